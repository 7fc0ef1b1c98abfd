"""Building results: error results, exception messages, rendering and materializing.

Every error result the registry builds has exactly one text block
``Error: <message>``. ``materialize`` (stage 11) turns whatever a middleware built into
a frozen, lossless, consistent ``ToolResult``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Sequence
from typing import Any

from ._errors import ToolError
from ._json import JsonValue, snapshot_json
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
    "discard",
    "error",
    "from_exception",
    "frozen_blocks",
    "invalid_output",
    "materialize",
    "message_of",
    "render",
    "replace_result",
    "safe_repr",
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


def aborted_before_dispatch() -> ToolResult:
    return error("tool call aborted before dispatch", "ABORTED_BEFORE_DISPATCH",
                 "ToolAbortedError")


def aborted(contexts: tuple[ContextMessage, ...] = ()) -> ToolResult:
    return error("tool call aborted", "ABORTED", "ToolAbortedError", contexts=contexts)


def invalid_output(name: str, reason: str) -> ToolResult:
    return error(f'tool "{name}" returned invalid output: {reason}', "INVALID_TOOL_OUTPUT",
                 "ToolOutputError")


def from_exception(exc: BaseException) -> ToolResult:
    """The error result for an exception raised anywhere in the pipeline."""
    if isinstance(exc, Invalid):
        return error(message_of(exc))
    code = None
    if isinstance(exc, ToolError):
        try:
            code = exc.code if isinstance(exc.code, str) else None
        except Exception:
            code = None
    return error(message_of(exc), code, type(exc).__name__)


def message_of(exc: BaseException) -> str:
    """``str(exc)``; the class name when that is empty; a placeholder when it raises."""
    try:
        text = str(exc)
    except Exception:
        return "<unprintable thrown value>"
    return text or type(exc).__name__


def safe_repr(value: Any) -> str:
    """``repr(value)``, or ``<TypeName object>`` when ``repr`` fails."""
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"
    return text if isinstance(text, str) else f"<{type(value).__name__} object>"


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
    except Exception:
        return error("tool result must be losslessly JSON-serializable")
    if (type(result) is ToolResult and content is result.content and is_error is result.is_error
            and value is result.value and meta is result.meta and error_info is result.error
            and concludes is result.concludes_turn and contexts == result.contexts):
        return result
    return make_result(content, is_error, value, error_info, meta, contexts, concludes)


def _valid_error(info: Any) -> bool:
    return (type(info) is ErrorInfo and type(info.message) is str
            and (info.code is None or type(info.code) is str)
            and (info.type is None or type(info.type) is str))


def frozen_blocks(blocks: Any) -> tuple[Content, ...]:
    """A tuple of exact ``TextContent`` / ``ImageContent`` with plain ``str`` fields."""
    if type(blocks) is tuple and all(type(b) is TextContent and type(b.text) is str
                                     for b in blocks):
        return blocks
    if isinstance(blocks, str | bytes) or not isinstance(blocks, Sequence):
        raise ValueError(f"content must be a sequence of Content, got {type(blocks).__name__}")
    out: list[Content] = []
    for block in blocks:
        if isinstance(block, TextContent):
            out.append(make_text(_plain_str(block.text)))
        elif isinstance(block, ImageContent):
            out.append(ImageContent(_plain_str(block.data), _plain_str(block.mime_type)))
        else:
            raise ValueError(f"not content: {type(block).__name__}")
    return tuple(out)


def _plain_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("content fields must be str")
    return str.__str__(value)


def _frozen_context(context: Any) -> ContextMessage:
    if not isinstance(context, ContextMessage):
        raise ValueError(f"not a ContextMessage: {type(context).__name__}")
    content = frozen_blocks(context.content)
    source = _plain_str(context.source)
    meta = snapshot_json(context.meta)
    if (type(context) is ContextMessage and content is context.content
            and source is context.source and meta is context.meta):
        return context
    return ContextMessage(content, source, meta)


def text_of(content: tuple[Content, ...]) -> str:
    """The text blocks joined with ``"\\n"``."""
    return "\n".join(b.text for b in content if isinstance(b, TextContent))


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
    """Close a coroutine or cancel a future nobody will await."""
    if inspect.iscoroutine(value):
        value.close()
    elif isinstance(value, asyncio.Future):
        value.cancel()
