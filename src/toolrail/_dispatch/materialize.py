"""A value's content, and stage 11: materializing a result.

``render`` gives a canonical value its text block; ``checked_value`` is the one check
of a value a body returned or a post-execute ``Accept(value=...)`` set (lossless JSON,
the output schema, renderable). ``materialize`` turns whatever a middleware built into a
frozen, lossless, consistent ``ToolResult``; ``frozen_blocks`` is the content half of
that, shared with the stages that take content from user code.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from operator import is_
from typing import Any

from .._model.errors import ToolOutputError
from .._model.foreign import message_of, plain_str
from .._model.lossless import JsonValue, snapshot_json
from .._model.results import (
    Content,
    ContextMessage,
    ErrorInfo,
    ImageContent,
    TextContent,
    ToolResult,
    make_result,
    make_text,
)
from .failures import error

__all__ = [
    "Unrenderable",
    "checked_value",
    "frozen_blocks",
    "materialize",
    "output_error",
    "render",
    "rendered",
    "replace_result",
    "text_of",
]


class Unrenderable(Exception):
    """A value whose JSON text cannot be produced."""


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


def output_error(name: str, reason: str) -> ToolOutputError:
    """``tool "<name>" returned invalid output: <reason>``."""
    return ToolOutputError(f'tool "{name}" returned invalid output: {reason}')


def checked_value(name: str, check: Callable[[JsonValue], list[str]] | None,
                  raw: Any) -> JsonValue:
    """``raw`` as a lossless snapshot that satisfies the output schema (``check``), else
    ``ToolOutputError`` saying why."""
    try:
        value = snapshot_json(raw)
    except ValueError as exc:
        raise output_error(name, message_of(exc)) from exc
    if check is not None:
        violations = check(value)
        if violations:
            raise output_error(name, "; ".join(violations))
    return value


def rendered(name: str, value: JsonValue) -> tuple[TextContent, ...]:
    """``render(value)``, or ``ToolOutputError`` when its text cannot be produced."""
    try:
        return render(value)
    except Unrenderable as exc:
        raise output_error(name, f"value cannot be rendered as text: {exc}") from exc


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
