"""Tool names a provider accepts, and the way back to the registry's names.

The registry takes 1-128 characters from ``A-Z a-z 0-9 _ . -``; providers take less:

| rule         | pattern                              | who                          |
|--------------|--------------------------------------|------------------------------|
| ``OPENAI``   | ``^[a-zA-Z0-9_-]{1,64}$``            | OpenAI, Anthropic            |
| ``GEMINI``   | ``^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$`` | Gemini                       |
| ``PORTABLE`` | ``^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$``   | all three (the integrations) |

:func:`wire_names` maps a set of names, as one request sends them, to names the rule
accepts. A name the rule accepts is kept. Any other name has each character the rule
rejects replaced by ``_`` and, where the first character must be a letter or ``_``,
an ``_`` put in front: its *stem*. The stem is the wire name unless it is longer than
64 characters, is a kept name, or is the stem of another name too; then the wire name
is the stem's first 55 characters, ``_`` and the first 8 hex digits of the SHA-256 of
the registry name (of ``name#1``, ``name#2`` … should that still be taken). So the
mapping depends on the set of names only, never on their order, and no two names share
a wire name. Mapped back, a wire name the set does not produce is kept as it is.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import ToolSchema
from ._common import SchemaLike

__all__ = [
    "GEMINI",
    "OPENAI",
    "PORTABLE",
    "NameRule",
    "from_wire",
    "portable_names",
    "registry_name",
    "schema_name",
    "to_wire",
    "wire_names",
]

_FIRST = frozenset(string.ascii_letters + "_")
_LIMIT = 64
_STEM = _LIMIT - 9  # room for "_" and 8 hex digits


@dataclass(frozen=True, slots=True)
class NameRule:
    """What a provider accepts as a tool name: ``valid`` whole, ``invalid`` per character."""

    valid: re.Pattern[str]
    invalid: re.Pattern[str]
    letter_first: bool

    def stem(self, name: str) -> str:
        stem = self.invalid.sub("_", name)
        if not stem or (self.letter_first and stem[0] not in _FIRST):
            stem = "_" + stem
        return stem


OPENAI = NameRule(re.compile(r"[a-zA-Z0-9_-]{1,64}"), re.compile(r"[^a-zA-Z0-9_-]"), False)
GEMINI = NameRule(re.compile(r"[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}"), re.compile(r"[^a-zA-Z0-9_.:-]"),
                  True)
PORTABLE = NameRule(re.compile(r"[a-zA-Z_][a-zA-Z0-9_-]{0,63}"), re.compile(r"[^a-zA-Z0-9_-]"),
                    True)


def wire_names(names: Iterable[str], rule: NameRule) -> dict[str, str]:
    """Each name ``rule`` rejects, mapped to the wire name that stands for it (see above).

    Names the rule accepts are left out: they go out as they are.
    """
    unique = set(names)
    kept = {name for name in unique if rule.valid.fullmatch(name)}
    changed = sorted(unique - kept)
    if not changed:
        return {}
    stems = {name: rule.stem(name) for name in changed}
    shared = Counter(stems.values())
    wire = {
        name: stem for name, stem in stems.items()
        if len(stem) <= _LIMIT and shared[stem] == 1 and stem not in kept
    }
    taken = kept | set(wire.values())
    for name in changed:
        if name not in wire:
            wire[name] = _hashed(name, stems[name][:_STEM], taken)
            taken.add(wire[name])
    return wire


def portable_names(names: Iterable[str]) -> dict[str, str]:
    """Each name mapped to one OpenAI, Anthropic and Gemini all accept, as the adapters map.

    A name every provider accepts (``^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$``) maps to itself;
    the others as in ``toolrail.adapters``' "Tool names". The mapping is a function of
    the set of names only, and no two names share a wire name, so its inverse is the
    way back: ``{wire: name for name, wire in portable_names(names).items()}``.

    >>> portable_names(["github.search", "github_search", "now"])["github.search"]
    'github_search_6d8eba8b'
    """
    names = list(names)
    wire = wire_names(names, PORTABLE)
    return {name: wire.get(name, name) for name in names}


def to_wire(names: Sequence[str], rule: NameRule) -> list[str]:
    """``names``, in order, as they go out under ``rule``."""
    wire = wire_names(names, rule)
    return [wire.get(name, name) for name in names] if wire else list(names)


def from_wire(schemas: Iterable[SchemaLike] | None, rule: NameRule) -> dict[str, str]:
    """Wire name to registry name for the names ``schemas`` sent under ``rule``: only
    the names that changed; ``{}`` without ``schemas``."""
    if schemas is None:
        return {}
    return {out: name for name, out in wire_names(map(schema_name, schemas), rule).items()}


def registry_name(back: Mapping[str, str], name: Any) -> Any:
    """``name`` as the registry knows it, by a :func:`from_wire` mapping; anything else
    (an unknown name, a name that is no ``str``) is kept for ``ToolCall`` to judge."""
    return back.get(name, name) if back and isinstance(name, str) else name


def schema_name(schema: SchemaLike) -> str:
    """A schema's ``name``; ``ValueError`` when a mapping's is no ``str``."""
    if isinstance(schema, ToolSchema):
        return schema.name
    if not isinstance(schema, Mapping):
        raise TypeError(f"expected a ToolSchema or a mapping, got {type(schema).__name__}")
    name = schema.get("name")
    if not isinstance(name, str):
        raise ValueError(f"a tool schema needs a str 'name', got {name!r}")
    return name


def _hashed(name: str, stem: str, taken: set[str]) -> str:
    salt = 0
    while True:
        seed = (name if salt == 0 else f"{name}#{salt}").encode(errors="surrogatepass")
        candidate = f"{stem}_{hashlib.sha256(seed).hexdigest()[:8]}"
        if candidate not in taken:
            return candidate
        salt += 1
