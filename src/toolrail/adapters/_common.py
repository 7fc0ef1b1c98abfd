"""What every provider adapter shares: reading wire objects, schemas, calls and results.

Wire objects arrive either as the provider SDK's pydantic models or as plain dicts;
:func:`field` reads both the same way. Results leave as text or as blocks: an image a
provider cannot carry becomes the text placeholder ``[image content]``, and an error
result with nothing visible to say gets ``Error: <message>`` so the model still sees
the failure (Anthropic rejects an empty error result outright). What a result message
cannot carry (a result's ``contexts``, an image a tool message cannot hold) goes into
the follow-up user message, as :func:`followup_content` orders it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from .. import (
    Content,
    ExecutionToken,
    ImageContent,
    TextContent,
    ToolCall,
    ToolResult,
    ToolSchema,
    snapshot_json,
    thaw,
)

__all__ = [
    "IMAGE_PLACEHOLDER",
    "SchemaLike",
    "call_from_text",
    "field",
    "followup_content",
    "pairs",
    "schema_parts",
    "sequence_field",
    "shows_something",
    "text_of",
    "visible_content",
]

IMAGE_PLACEHOLDER = "[image content]"

SchemaLike: TypeAlias = ToolSchema | Mapping[str, Any]
"""A ``ToolSchema``, or a mapping of the same shape (``name``, ``description``, ``parameters``)."""


def field(obj: object, *names: str) -> Any:
    """The first of ``names`` that ``obj`` has, as a mapping key or an attribute; else ``None``."""
    for name in names:
        value = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
        if value is not None:
            return value
    return None


def sequence_field(obj: object, *names: str) -> Sequence[Any]:
    """A list-valued field (``[]`` when absent); a string or mapping there is a ``TypeError``."""
    value = field(obj, *names)
    if value is None:
        return ()
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise TypeError(f"{names[0]} must be a list, got {type(value).__name__}")
    return value


def schema_parts(schema: SchemaLike) -> tuple[str, str, dict[str, Any]]:
    """``(name, description, parameters)`` with a fresh mutable copy of the parameters.

    A mapping needs ``name``; ``description`` defaults to ``""`` and ``parameters`` to
    an object without properties. Its parameters must be lossless JSON (``ValueError``).
    """
    if isinstance(schema, ToolSchema):
        return schema.name, schema.description, thaw(schema.parameters)
    if not isinstance(schema, Mapping):
        raise TypeError(f"expected a ToolSchema or a mapping, got {type(schema).__name__}")
    name, description = schema.get("name"), schema.get("description", "")
    if not isinstance(name, str):
        raise ValueError(f"a tool schema needs a str 'name', got {name!r}")
    if not isinstance(description, str):
        raise ValueError(f"tool {name!r}: 'description' must be a str")
    parameters = schema.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, Mapping):
        raise ValueError(f"tool {name!r}: 'parameters' must be a JSON Schema object")
    return name, description, thaw(snapshot_json(parameters))


def call_from_text(call_id: Any, name: Any, raw: Any, *, scope: Hashable | None,
                   parent: ExecutionToken | None) -> ToolCall:
    """A call from model-emitted arguments: text by ``ToolCall.from_json`` rules.

    Arguments that are already parsed (some OpenAI-compatible servers send an object)
    are kept as they are; the pipeline snapshots and validates them like any other.
    """
    if raw is None or isinstance(raw, str):
        return ToolCall.from_json(call_id, name, raw, scope=scope, parent=parent)
    return ToolCall(call_id=call_id, name=name, arguments=raw, scope=scope, parent=parent)


def pairs(
    calls: Sequence[ToolCall], results: Sequence[ToolResult]
) -> list[tuple[ToolCall, ToolResult]]:
    """The calls zipped with their results; ``ValueError`` unless the lengths match."""
    if len(calls) != len(results):
        raise ValueError(
            f"got {len(calls)} calls and {len(results)} results; each call needs exactly one result"
        )
    for call, result in zip(calls, results, strict=True):
        if not isinstance(call, ToolCall):
            raise TypeError(f"expected a ToolCall, got {type(call).__name__}")
        if not isinstance(result, ToolResult):
            raise TypeError(f"expected a ToolResult, got {type(result).__name__}")
    return list(zip(calls, results, strict=True))


def visible_content(result: ToolResult) -> tuple[Content, ...]:
    """The result's blocks, or ``Error: <message>`` for an error result that shows nothing."""
    content = result.content
    if result.is_error and not any(shows_something(block) for block in content):
        message = result.error.message if result.error is not None else "the call failed"
        return (TextContent(f"Error: {message}"),)
    return content


def followup_content(
    calls: Sequence[ToolCall], results: Sequence[ToolResult], moved: Callable[[ImageContent], bool]
) -> list[Content]:
    """What the follow-up user message says, in model order: per call, first the images
    its result message could not hold (``moved``) after ``Image content of tool call
    <call_id> (<name>):``, then the blocks of its result's ``contexts``. Empty text
    blocks are left out. ``ValueError`` unless there is exactly one result per call.
    """
    blocks: list[Content] = []
    for call, result in pairs(calls, results):
        images = [b for b in visible_content(result) if isinstance(b, ImageContent) and moved(b)]
        if images:
            blocks.append(TextContent(f"Image content of tool call {call.call_id} ({call.name}):"))
            blocks += images
        for context in result.contexts:
            blocks += [block for block in context.content if shows_something(block)]
    return blocks


def text_of(blocks: Iterable[Content]) -> str:
    """The blocks as one text, joined with ``"\\n"``; each image is ``[image content]``."""
    return "\n".join(
        block.text if isinstance(block, TextContent) else IMAGE_PLACEHOLDER for block in blocks
    )


def shows_something(block: Content) -> bool:
    """Whether the block is an image or a non-empty text."""
    return isinstance(block, ImageContent) or block.text != ""
