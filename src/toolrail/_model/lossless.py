"""Lossless JSON: the one boundary that arguments and results cross.

:func:`snapshot_json` copies a value into the immutable form that is exactly what JSON
carries: ``None``, ``bool``, ``int``, finite ``float``, ``str``, ``tuple`` for arrays and
:class:`FrozenDict` for objects. Subclasses (``StrEnum``, ``IntEnum``, ...) become the
plain type, any ``Mapping`` with ``str`` keys becomes a ``FrozenDict`` in the input's
key order, and a value that is already in frozen form comes back as the same object.
A container reachable by several paths is copied once and shared in the result.
Both :func:`snapshot_json` and :func:`thaw` walk the value with an explicit stack, so
depth is bounded by memory, not by the recursion limit.

Anything else raises ``ValueError("value is not lossless JSON: <path> <reason>")``
naming the first offending value, and nothing but ``ValueError`` escapes whatever the
input's own methods do. A mapping's keys are checked before its values::

    is a <type name>                 $.items[2].when is a datetime  ("an" before a vowel)
    is a non-finite float (<repr>)   $.ratio is a non-finite float (nan)
    has a non-str key <repr>         $.counts has a non-str key 1
    has a duplicate key <json>       $.a has a duplicate key "x"  (two keys, one plain str)
    is a cycle back to <path>        $.a.b[0] is a cycle back to $.a
    could not be read: <error>       $.rows could not be read: RuntimeError: boom

The path is ``$``, then ``.key`` for a key that is a Python identifier, ``["key"]``
(JSON-quoted) for any other key, and ``[i]`` for an item.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from operator import is_
from typing import Any, Final, NoReturn, TypeAlias

__all__ = ["FrozenDict", "JsonValue", "MISSING", "snapshot_json", "thaw"]


class FrozenDict(dict[str, Any]):
    """A ``dict`` whose own mutating methods raise ``TypeError``.

    Being a real ``dict``, it works with ``json.dumps`` and ``isinstance(x, dict)``;
    only its own methods are blocked (``dict.__setitem__(d, k, v)`` still writes).
    It hashes as ``frozenset(self.items())`` (so equal dicts hash equal) when its values
    are hashable, and ``copy.copy`` / ``copy.deepcopy`` return it as it is.

    Example:
        >>> d = FrozenDict({"a": 1})
        >>> d["b"] = 2
        Traceback (most recent call last):
        TypeError: FrozenDict is immutable; use toolrail.thaw() for a mutable copy
    """

    __slots__ = ()

    def _immutable(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("FrozenDict is immutable; use toolrail.thaw() for a mutable copy")

    __setitem__ = __delitem__ = __ior__ = _immutable
    update = pop = popitem = clear = setdefault = _immutable

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __or__(self, other: object) -> FrozenDict:  # type: ignore[override]
        if not isinstance(other, Mapping):
            return NotImplemented
        return FrozenDict({**self, **other})

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[dict[str, Any]]]:
        return (FrozenDict, (dict(self),))


JsonValue: TypeAlias = bool | int | float | str | tuple["JsonValue", ...] | FrozenDict | None


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "tr.MISSING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
"""Marks arguments that failed the snapshot; falsy, and kept by copy and pickle."""

_PREFIX = "value is not lossless JSON: "
_CONTAINER: Final = object()
_OPEN: Final = object()
_isfinite = math.isfinite


def snapshot_json(value: Any) -> JsonValue:
    """Return a deep-frozen, lossless-JSON copy of ``value``.

    Args:
        value: Any value; see the module docstring for what is accepted.

    Returns:
        The frozen copy: ``dict``-likes become :class:`FrozenDict`, lists and tuples
        become ``tuple``; a value already in frozen form is returned as it is.

    Raises:
        ValueError: If ``value`` is not lossless JSON; the message names the path.

    Example:
        >>> snapshot_json({"path": "/tmp/a", "lines": [1, 2]})
        FrozenDict({'path': '/tmp/a', 'lines': (1, 2)})
        >>> snapshot_json({"when": {1.5, 2.5}})
        Traceback (most recent call last):
        ValueError: value is not lossless JSON: $.when is a set
    """
    cls = type(value)
    if cls is dict or cls is FrozenDict:
        # Fast path for a flat object of plain scalars: copy once, check the copy.
        try:
            frozen = value if cls is FrozenDict else FrozenDict(value)
        except Exception:  # only a non-str key's __eq__ can raise; reported below
            return _snapshot(value)
        for key, item in frozen.items():
            kind = type(item)
            if type(key) is not str or not (
                kind is str
                or kind is int
                or kind is bool
                or item is None
                or (kind is float and _isfinite(item))
            ):
                break
        else:
            return frozen
    return _snapshot(value)


class _Rejected(Exception):
    def __init__(self, reason: str, path: str | None = None) -> None:
        self.reason = reason
        self.path = path


# A container being copied, as a plain tuple (the walk makes one per container: a class
# would cost more than the rest of the copy), read through these names:
# ``[SOURCE]`` the container as given; ``[KEYS]`` an object's keys (plain ``str``),
# ``None`` for an array; ``[VALUES]`` its values, read once, and ``[ITEMS]`` where the
# walk is in them; ``[OUT]`` the frozen copies of the values read so far (``len`` of
# it is the index of the item being read, all an error path needs); ``[REUSE]`` the
# container is already frozen, and is kept if every value is too.
_Frame: TypeAlias = tuple[Any, "list[str] | None", Any, Iterator[Any], list[JsonValue], bool]
SOURCE: Final = 0
KEYS: Final = 1
VALUES: Final = 2
ITEMS: Final = 3
OUT: Final = 4
REUSE: Final = 5


def _snapshot(root: Any) -> JsonValue:
    holder: _Frame = (None, None, (root,), iter((root,)), [], False)
    stack = [holder]
    # id -> frozen copy, or _OPEN while it is on the stack. ``opened`` holds the
    # originals so that no id is reused by another object during the walk.
    memo: dict[int, Any] = {}
    opened: list[Any] = []
    try:
        while True:
            frame = stack[-1]
            append = frame[OUT].append
            for value in frame[ITEMS]:
                cls = type(value)
                if (
                    cls is str
                    or cls is int
                    or cls is bool
                    or value is None
                    or (cls is float and _isfinite(value))
                ):
                    append(value)
                    continue
                if not (cls is dict or cls is list or cls is tuple or cls is FrozenDict):
                    scalar = _scalar(value, cls)
                    if scalar is not _CONTAINER:
                        append(scalar)
                        continue
                key = id(value)
                done = memo.get(key)
                if done is None:
                    stack.append(_open(value, cls))
                    memo[key] = _OPEN
                    opened.append(value)
                    break
                if done is _OPEN:
                    at = next(i for i, outer in enumerate(stack) if outer[SOURCE] is value)
                    raise _Rejected(f"is a cycle back to {_path(stack[:at])}")
                append(done)
            else:
                if frame is holder:
                    return frame[OUT][0]
                frozen = _close(frame, stack)
                stack.pop()
                memo[id(frame[SOURCE])] = frozen
                stack[-1][OUT].append(frozen)
    except _Rejected as exc:
        path = _path(stack) if exc.path is None else exc.path
        raise ValueError(f"{_PREFIX}{path} {exc.reason}") from None
    except Exception as exc:
        raise ValueError(f"{_PREFIX}{_path(stack)} could not be read: {_describe(exc)}") from exc


def _scalar(value: Any, cls: type) -> Any:
    """The plain form of a scalar that is not of an exact type, or ``_CONTAINER``."""
    if issubclass(cls, float):
        number = float.__float__(value)
        if not _isfinite(number):
            raise _Rejected(f"is a non-finite float ({number!r})")
        return number
    # The base-class slots return a plain copy and ignore an overridden __str__/__int__.
    if issubclass(cls, str):
        return str.__str__(value)
    if issubclass(cls, int):
        return int.__int__(value)
    if issubclass(cls, (list, tuple)):
        return _CONTAINER
    try:
        mapping = issubclass(cls, Mapping)
    except Exception:  # the ABC check hashes the class: a metaclass may raise there
        mapping = False
    if mapping:
        return _CONTAINER
    name = type_name(cls)
    article = "an" if name[:1].lower() in ("a", "e", "i", "o", "u") else "a"
    raise _Rejected(f"is {article} {name}")


def _open(value: Any, cls: type) -> _Frame:
    """Read a container once and check its keys."""
    keys: list[Any] | None = None
    reuse = cls is tuple or cls is FrozenDict
    if cls is tuple or cls is list:
        values = value
    elif issubclass(cls, (list, tuple)):
        values = list(value)
    elif reuse or cls is dict:
        keys, values = list(value), list(value.values())
    else:
        keys, values = [], []
        for key, item in value.items():
            keys.append(key)
            values.append(item)
    for i, key in enumerate(keys or ()):
        if type(key) is not str:
            if not issubclass(type(key), str):
                raise _Rejected(f"has a non-str key {_safe_repr(key)}")
            keys[i] = str.__str__(key)  # type: ignore[index]
            reuse = False
    return (value, keys, values, iter(values), [], reuse)


def _close(frame: _Frame, stack: list[_Frame]) -> JsonValue:
    source, keys, values, _, out, reuse = frame
    if reuse and all(map(is_, out, values)):
        return source  # type: ignore[no-any-return]
    if keys is None:
        return tuple(out)
    frozen = FrozenDict(zip(keys, out, strict=True))
    if len(frozen) != len(keys):
        seen: set[str] = set()
        for duplicate in keys:
            if duplicate in seen:
                break
            seen.add(duplicate)
        raise _Rejected(f"has a duplicate key {json.dumps(duplicate)}", _path(stack[:-1]))
    return frozen


def _path(stack: list[_Frame]) -> str:
    """The path of the item each frame is reading, skipping the root holder."""
    steps = ["$"]
    for _, keys, _, _, out, _ in stack[1:]:
        if keys is None:
            steps.append(f"[{len(out)}]")
        else:
            key = keys[len(out)]
            steps.append(f".{key}" if key.isidentifier() else f"[{json.dumps(key)}]")
    return "".join(steps)


def type_name(cls: type) -> str:
    """``cls.__name__`` as ``type`` defines it: a metaclass's override cannot lie or raise."""
    name: str = type.__dict__["__name__"].__get__(cls)
    return name


def _safe_repr(value: object) -> str:
    try:
        text = repr(value)
    except Exception:
        return f"<{type_name(type(value))} object>"
    return text if len(text) <= 80 else f"{text[:77]}..."


def _describe(exc: Exception) -> str:
    name = type_name(type(exc))
    try:
        return f"{name}: {exc}"
    except Exception:
        return name


_FLAT = frozenset({str, int, float, bool, type(None)})


def thaw(value: JsonValue) -> Any:
    """Return a fresh mutable deep copy: mappings become ``dict``, arrays ``list``.

    Scalars are returned as they are. A subtree shared by several paths is copied once
    and stays shared in the copy, so the cost is linear in the input's size.

    Example:
        >>> thaw(snapshot_json({"a": [1, {"b": None}]}))
        {'a': [1, {'b': None}]}
    """
    if isinstance(value, dict) and all(type(v) in _FLAT for v in value.values()):
        return dict(value)  # the common argument object: one level of scalars
    copy, items = _thaw_open(value)
    if items is None:
        return copy
    memo: dict[int, tuple[Any, Any]] = {id(value): (value, copy)}
    stack = [(copy, items)]
    while stack:
        out, items = stack[-1]
        is_dict = type(out) is dict
        for item in items:
            if is_dict:
                key, item = item
            child, child_items = _thaw_open(item)
            if child_items is not None:
                done = memo.get(id(item))
                if done is None:
                    memo[id(item)] = (item, child)
                else:
                    child, child_items = done[1], None
            if is_dict:
                out[key] = child
            else:
                out.append(child)
            if child_items is not None:
                stack.append((child, child_items))
                break
        else:
            stack.pop()
    return copy


def _thaw_open(value: Any) -> tuple[Any, Iterator[Any] | None]:
    """An empty copy of a container and an iterator over its items (``None`` if a scalar)."""
    cls = type(value)
    if cls is str or cls is int or cls is float or cls is bool or value is None:
        return value, None
    if cls is FrozenDict or cls is dict or isinstance(value, Mapping):
        return {}, iter(value.items())
    if cls is tuple or cls is list or isinstance(value, (list, tuple)):
        return [], iter(value)
    return value, None


def json_text(value: JsonValue) -> str:
    """The compact JSON text of a snapshot, at any depth and with ints of any length.

    ``json.dumps`` does it in C, but recursively (a ``RecursionError`` past about a
    thousand levels) and prints ints through ``int.__repr__`` (a ``ValueError`` past
    ``sys.get_int_max_str_digits()`` digits); this walk has neither limit.
    """
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError):
        return _walk(value, False, False)


def canonical_json(value: Any, *, ensure_ascii: bool = False) -> str:
    """``json_text`` with every object's keys sorted: the same text for the same JSON,
    whatever the order its objects were built in (what a digest or a key is taken of)."""
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=ensure_ascii,
                          separators=(",", ":"))
    except (ValueError, RecursionError):
        return _walk(value, True, ensure_ascii)


def _walk(value: Any, sort: bool, ensure_ascii: bool) -> str:
    """The JSON text of ``value`` without recursion, and with ints of any length."""
    parts: list[str] = []
    stack: list[Iterator[Any]] = [iter((value,))]
    closers: list[str] = [""]
    firsts: list[bool] = [True]
    while stack:
        for item in stack[-1]:
            if firsts[-1]:
                firsts[-1] = False
            else:
                parts.append(",")
            if closers[-1] == "}":
                key, item = item
                parts.append(json.dumps(key, ensure_ascii=ensure_ascii) + ":")
            cls = type(item)
            if cls is FrozenDict or cls is dict:
                parts.append("{")
                stack.append(iter(sorted(item.items()) if sort else item.items()))
                closers.append("}")
            elif cls is tuple or cls is list:
                parts.append("[")
                stack.append(iter(item))
                closers.append("]")
            elif cls is int:
                parts.append(_digits(item))
                continue
            else:
                parts.append(json.dumps(item, ensure_ascii=ensure_ascii))
                continue
            firsts.append(True)
            break
        else:
            stack.pop()
            firsts.pop()
            parts.append(closers.pop())
    return "".join(parts)


def _digits(number: int) -> str:
    """``int.__repr__`` without the digit limit (for the rare int longer than it)."""
    try:
        return int.__repr__(number)
    except ValueError:
        pass
    if number < 0:
        return "-" + _digits(-number)
    half = int(number.bit_length() * 0.30103) // 2  # about half its decimal digits
    high, low = divmod(number, 10**half)
    return _digits(high) + _digits(low).rjust(half, "0")
