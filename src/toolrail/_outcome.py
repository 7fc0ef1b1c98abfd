"""Building results: error results, exception messages, rendering and materializing.

Every error result the registry builds has exactly one text block
``Error: <message>``. ``materialize`` (stage 11) turns whatever a middleware built into
a frozen, lossless, consistent ``ToolResult``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Sequence
from operator import is_
from types import CoroutineType, GeneratorType
from typing import Any, TypeGuard, cast

from ._errors import (
    ABORTED_BEFORE_DISPATCH,
    DENIED,
    ToolAbortedError,
    ToolError,
    ToolNotFoundError,
    ToolOutputError,
    ToolTimeoutError,
)
from ._json import JsonValue, snapshot_json, type_name
from ._results import (
    Content,
    ContextMessage,
    ErrorInfo,
    ImageContent,
    TextContent,
    ToolResult,
    make_result,
    make_text,
)

__all__ = [
    "Invalid",
    "Unrenderable",
    "aborted",
    "aborted_before_dispatch",
    "denied",
    "discard",
    "error",
    "from_exception",
    "frozen_blocks",
    "invalid_output",
    "is_awaitable",
    "materialize",
    "message_of",
    "plain_str",
    "render",
    "replace_result",
    "safe_repr",
    "timed_out",
    "unknown_tool",
]


class Invalid(Exception):
    """A failure the registry itself detects (an invalid return): no code, no type."""


class Unrenderable(Exception):
    """A value whose JSON text cannot be produced."""


def error(message: str, code: str | None = None, type_name: str | None = None, *,
          contexts: tuple[ContextMessage, ...] = ()) -> ToolResult:
    """An error result as the registry builds it."""
    return make_result((make_text("Error: " + message),), True, None,
                       ErrorInfo(message, code, type_name), None, contexts, False)


def _raised(message: str, kind: type[ToolError], code: str | None = None,
            contexts: tuple[ContextMessage, ...] = ()) -> ToolResult:
    """The error result of a failure of class ``kind`` (its code unless ``code``)."""
    return error(message, kind.code if code is None else code, kind.__name__, contexts=contexts)


def unknown_tool(name: str, message: str | None = None) -> ToolResult:
    """``unknown tool "<name>"``, or ``message`` (code mode's collapse) with that code."""
    return _raised(f'unknown tool "{name}"' if message is None else message, ToolNotFoundError)


def timed_out(timeout: float) -> ToolResult:
    return _raised(f"tool call timed out after {timeout:g}s", ToolTimeoutError)


def aborted_before_dispatch() -> ToolResult:
    return _raised("tool call aborted before dispatch", ToolAbortedError,
                   ABORTED_BEFORE_DISPATCH)


def aborted(contexts: tuple[ContextMessage, ...] = ()) -> ToolResult:
    return _raised("tool call aborted", ToolAbortedError, contexts=contexts)


def invalid_output(name: str, reason: str) -> ToolResult:
    return _raised(f'tool "{name}" returned invalid output: {reason}', ToolOutputError)


def denied(reason: str) -> ToolResult:
    """A pre-execute ``Deny``, an approval not granted, or a guard's reason."""
    return error(reason, DENIED)


# Values a tool, a middleware or an observer hands over are inspected by their type
# only (``type(x)``, ``issubclass``), never by ``isinstance``: that falls back to
# reading ``x.__class__``, which runs the value's own ``__getattribute__``.


def from_exception(exc: BaseException) -> ToolResult:
    """The error result for an exception raised anywhere in the pipeline."""
    kind = type(exc)
    if issubclass(kind, Invalid):
        return error(message_of(exc))
    code = None
    if issubclass(kind, ToolError):
        try:
            code = plain_str(cast(ToolError, exc).code)
        except Exception:
            code = None
    return error(message_of(exc), code, type_name(kind))


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


def render(value: JsonValue) -> tuple[TextContent, ...]:
    """A canonical value's content: a str as is, ``None`` as nothing, else its JSON."""
    if isinstance(value, str):
        return (make_text(value),)
    if value is None:
        return ()
    try:
        return (make_text(json.dumps(value, ensure_ascii=False)),)
    except Exception as exc:
        raise Unrenderable(message_of(exc)) from exc


def materialize(result: ToolResult) -> ToolResult:
    """Stage 11: snapshot and deep-freeze the result, and restore its invariants."""
    try:
        content = frozen_blocks(result.content)
        is_error = bool(result.is_error)
        value = snapshot_json(result.value)
        meta = snapshot_json(result.meta)
        contexts = tuple(_frozen_context(c) for c in result.contexts)
        concludes = result.concludes_turn is True
        error_info = result.error
        if is_error:
            value, concludes = None, False
            if not _valid_error(error_info):
                error_info = ErrorInfo(text_of(content))
        else:
            error_info = None
        # Compared by identity: an equality check would run the foreign fields' own
        # __eq__ (or recurse through a deep meta).
        same = (type(result) is ToolResult and content is result.content
                and is_error is result.is_error and value is result.value
                and meta is result.meta and error_info is result.error
                and concludes is result.concludes_turn
                and (contexts is result.contexts or _same(contexts, result.contexts)))
    except Exception:
        return error("tool result must be losslessly JSON-serializable")
    if same:
        return result
    return make_result(content, is_error, value, error_info, meta, contexts, concludes)


def _same(mine: tuple[Any, ...], theirs: Any) -> bool:
    return type(theirs) is tuple and len(mine) == len(theirs) and all(map(is_, mine, theirs))


def _valid_error(info: Any) -> bool:
    # ErrorInfo stores a str subclass as a plain str: any other type is not valid.
    return (type(info) is ErrorInfo and type(info.message) is str
            and (info.code is None or type(info.code) is str)
            and (info.type is None or type(info.type) is str))


def frozen_blocks(blocks: Any) -> tuple[Content, ...]:
    """A tuple of exact ``TextContent`` / ``ImageContent`` with plain ``str`` fields."""
    if type(blocks) is tuple and all(type(b) is TextContent and type(b.text) is str
                                     for b in blocks):
        return blocks
    kind = type(blocks)
    if issubclass(kind, str | bytes) or not issubclass(kind, Sequence):
        raise ValueError("content must be a sequence of Content")
    out: list[Content] = []
    for block in blocks:
        kind = type(block)
        if issubclass(kind, TextContent):
            out.append(make_text(_field_str(block.text)))
        elif issubclass(kind, ImageContent):
            out.append(ImageContent(_field_str(block.data), _field_str(block.mime_type)))
        else:
            raise ValueError("not content")
    return tuple(out)


def _field_str(value: Any) -> str:
    text = plain_str(value)
    if text is None:
        raise ValueError("content fields must be str")
    return text


def _frozen_context(context: Any) -> ContextMessage:
    if not issubclass(type(context), ContextMessage):
        raise ValueError("not a ContextMessage")
    content = frozen_blocks(context.content)
    source = _field_str(context.source)
    meta = snapshot_json(context.meta)
    if (type(context) is ContextMessage and content is context.content
            and source is context.source and meta is context.meta):
        return context
    return ContextMessage(content, source, meta)


def text_of(content: tuple[Content, ...]) -> str:
    """The text blocks joined with ``"\\n"``."""
    return "\n".join(b.text for b in content if type(b) is TextContent)


def replace_result(result: ToolResult, **changes: Any) -> ToolResult:
    """``dataclasses.replace`` for a result that may not be consistent yet."""
    fields: dict[str, Any] = {
        "content": result.content, "is_error": result.is_error, "value": result.value,
        "error": result.error, "meta": result.meta, "contexts": result.contexts,
        "concludes_turn": result.concludes_turn,
    }
    fields.update(changes)
    return ToolResult(**fields)


def discard(value: Any) -> None:
    """Close a coroutine or cancel a future nobody will await (it never raises)."""
    kind = type(value)
    if kind is CoroutineType:
        value.close()
    elif issubclass(kind, asyncio.Future):
        with contextlib.suppress(Exception):  # a subclass's own cancel(): nobody to tell
            value.cancel()
