"""Local names for remote tools: the registry takes 1-128 characters of ``A-Za-z0-9_.-``.

The rule, tried in order for ``prefix + remote`` (first one free wins):

1. the name itself, when it is valid;
2. every other character replaced by ``_`` (an empty name becomes ``_``), when that is
   at most 128 characters;
3. that, cut to 119 characters, then ``_`` and the first 8 hex digits of the SHA-256 of
   the remote name (more digits in the unlikely case those collide too).

Names already given keep their local name; new remote names that are valid as they
are get their names before the ones that need rewriting, each group in sorted order,
so a rewritten name never takes a real one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable

__all__ = ["PREFIX", "assign_names"]

_VALID = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_INVALID_CHAR = re.compile(r"[^A-Za-z0-9_.\-]")
PREFIX = re.compile(r"[A-Za-z0-9_.\-]{0,100}")
_MAX = 128


def assign_names(
    remote_names: Iterable[str], prefix: str, taken: Collection[str]
) -> dict[str, str]:
    """Local names for ``remote_names`` (which have none yet), avoiding ``taken``."""
    used = set(taken)
    names = sorted(remote_names, key=lambda remote: (not _VALID.fullmatch(prefix + remote), remote))
    assigned: dict[str, str] = {}
    for remote in names:
        local = _local_name(remote, prefix, used)
        used.add(local)
        assigned[remote] = local
    return assigned


def _local_name(remote: str, prefix: str, used: Collection[str]) -> str:
    candidate = prefix + remote
    if _VALID.fullmatch(candidate) and candidate not in used:
        return candidate
    cleaned = _INVALID_CHAR.sub("_", candidate) or "_"
    if len(cleaned) <= _MAX and cleaned not in used:
        return cleaned
    digest = hashlib.sha256(remote.encode()).hexdigest()
    for digits in range(8, len(digest) + 1):
        local = f"{cleaned[: _MAX - 1 - digits]}_{digest[:digits]}"
        if local not in used:
            return local
    raise ValueError(f"no free local name for MCP tool {remote!r}")  # 2**-256: unreachable
