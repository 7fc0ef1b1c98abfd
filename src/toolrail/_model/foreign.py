"""Reading the values user code hands over without running any of their code.

A tool, a middleware, an approver or an observer may hand back anything. Such values
are inspected by their type only (``type(x)``, ``issubclass``), never by
``isinstance`` (it falls back to reading ``x.__class__``, which runs the value's own
``__getattribute__``) or ``inspect.is*``; their text is read defensively; a coroutine
or future nobody will await is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from types import CoroutineType, GeneratorType
from typing import Any, TypeGuard

from .lossless import type_name

__all__ = ["discard", "is_awaitable", "message_of", "plain_str", "safe_repr"]


def message_of(exc: BaseException) -> str:
    """``str(exc)``; the class name when that is empty; a placeholder when it raises."""
    try:
        text = str(exc)
    except Exception:
        return "<unprintable thrown value>"
    if type(text) is not str:
        text = str.__str__(text)  # a str subclass: its plain value, nothing it could do
    return text or type_name(type(exc))


def safe_repr(value: Any) -> str:
    """``repr(value)``, or ``<TypeName object>`` when ``repr`` fails."""
    try:
        text = repr(value)
    except Exception:
        return f"<{type_name(type(value))} object>"
    return text if type(text) is str else str.__str__(text)


def plain_str(value: Any) -> str | None:
    """A ``str`` (or subclass) as a plain ``str``; ``None`` for anything else."""
    kind = type(value)
    if kind is str:
        return value  # type: ignore[no-any-return]
    return str.__str__(value) if issubclass(kind, str) else None


def is_awaitable(value: Any) -> TypeGuard[Awaitable[Any]]:
    """``inspect.isawaitable``, judged by the type alone: it never runs the value's code."""
    kind = type(value)
    if kind is CoroutineType:
        return True
    try:
        if kind is GeneratorType:
            return bool(value.gi_code.co_flags & 0x100)  # CO_ITERABLE_COROUTINE
        return issubclass(kind, Awaitable)
    except Exception:  # a metaclass that will not say
        return False


def discard(value: Any) -> None:
    """Close a coroutine or cancel a future nobody will await (it never raises)."""
    kind = type(value)
    if kind is CoroutineType:
        value.close()
    elif issubclass(kind, asyncio.Future):
        with contextlib.suppress(Exception):  # a subclass's own cancel(): nobody to tell
            value.cancel()
