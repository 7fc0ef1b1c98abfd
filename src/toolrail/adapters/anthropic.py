"""Anthropic Messages, in both directions.

- tools out, :func:`tools`: ``{"name", "description", "input_schema"}``;
- calls in, :func:`calls_from_message`: the ``tool_use`` content blocks;
- results out, :func:`tool_result_blocks`: ``{"type": "tool_result", "tool_use_id",
  "content", "is_error"}``;
- follow-up, :func:`followup_blocks`: the results' ``contexts`` as ``text`` and
  ``image`` blocks, after the ``tool_result`` blocks of the same user message.

Inputs are the ``anthropic`` SDK's objects or plain dicts of the same shape; outputs are
plain JSON-ready dicts typed as the SDK's request ``TypedDict``\\ s. The SDK is never
imported at run time.

- Tool names: a registry name Claude rejects (outside ``^[a-zA-Z0-9_-]{1,64}$``: a dot,
  more than 64 characters) goes out as one it accepts, by the rule in
  ``toolrail.adapters`` ("Tool names"): ``github.search`` as ``github_search``. Pass the
  same ``schemas`` to :func:`calls_from_message` and each call names the registry's tool.
- Calls in: a ``tool_use`` block's ``input`` is already parsed JSON, so it is kept as it
  is, even when it is not an object (the tool then reports invalid arguments); a
  missing ``input`` is ``{}``.
- Results out: ``content`` is a list of ``text`` and ``image`` blocks (base64 source)
  and ``is_error`` is always set. Empty text blocks are left out, for the API rejects
  them, so an empty result is ``"content": []``; an error result with nothing to show
  says ``Error: <message>``, for the API rejects an empty error. An image of a type
  Claude does not read (other than JPEG, PNG, GIF, WebP) becomes ``[image content]``.

Reference: integrations.md, "Provider adapters".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeGuard

from .. import Content, TextContent, ToolCall, ToolResult
from ._common import (
    IMAGE_PLACEHOLDER,
    SchemaLike,
    field,
    followup_content,
    pairs,
    schema_parts,
    sequence_field,
    shows_something,
    visible_content,
)
from ._names import OPENAI, from_wire, registry_name, to_wire

if TYPE_CHECKING:
    from collections.abc import Hashable

    from anthropic.types import (
        ImageBlockParam,
        Message,
        TextBlockParam,
        ToolParam,
        ToolResultBlockParam,
    )

    from .. import ExecutionToken

__all__ = ["calls_from_message", "followup_blocks", "tool_result_blocks", "tools"]

_MediaType = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


def tools(schemas: Iterable[SchemaLike]) -> list[ToolParam]:
    """Messages ``tools``: ``{"name", "description", "input_schema"}`` per schema.

    ``schemas`` are ``ToolSchema`` values (``registry.schemas(scope)``) or dicts of
    that shape; the JSON Schema is sent as it is.

    >>> tools([{"name": "now", "description": "The time.", "parameters": {"type": "object"}}])
    [{'name': 'now', 'description': 'The time.', 'input_schema': {'type': 'object'}}]
    """
    parts = [schema_parts(schema) for schema in schemas]
    wire = to_wire([name for name, _, _ in parts], OPENAI)
    return [
        {"name": name, "description": description, "input_schema": parameters}
        for name, (_, description, parameters) in zip(wire, parts, strict=True)
    ]


def calls_from_message(
    message: Message | Mapping[str, Any],
    *,
    scope: Hashable | None = None,
    parent: ExecutionToken | None = None,
    schemas: Iterable[SchemaLike] | None = None,
) -> list[ToolCall]:
    """The ``tool_use`` blocks of an assistant message, in the model's order.

    Args:
        message: a ``Message`` or a dict with ``content``.
        scope: the scope every call runs in.
        parent: the token of the call these calls are nested in (``ctx.token`` of a
            tool that runs a sub-agent), set on every call.
        schemas: the schemas sent as tools: a call naming a tool by the name it went
            out as (see "Tool names" in the module docstring) names the registry's
            tool again. Without them each name is kept as the model sent it.
    """
    if isinstance(field(message, "content"), str):
        return []  # a plain-text turn, as a request param may be written
    back = from_wire(schemas, OPENAI)
    calls = []
    for block in sequence_field(message, "content"):
        if field(block, "type") == "tool_use":
            arguments = field(block, "input")
            calls.append(
                ToolCall(
                    call_id=field(block, "id"),
                    name=registry_name(back, field(block, "name")),
                    arguments={} if arguments is None else arguments,
                    scope=scope,
                    parent=parent,
                )
            )
    return calls


def tool_result_blocks(
    calls: Sequence[ToolCall], results: Sequence[ToolResult]
) -> list[ToolResultBlockParam]:
    """One ``tool_result`` block per call, in order: the next user message's content.

    ``ValueError`` unless there is exactly one result per call.
    """
    return [
        {
            "type": "tool_result",
            "tool_use_id": call.call_id,
            "content": [_block(b) for b in visible_content(result) if shows_something(b)],
            "is_error": result.is_error,
        }
        for call, result in pairs(calls, results)
    ]


def followup_blocks(
    calls: Sequence[ToolCall], results: Sequence[ToolResult]
) -> list[TextBlockParam | ImageBlockParam]:
    """The blocks to put after the ``tool_result`` blocks, in the same user message.

    They are the blocks of every result's ``contexts``, in model order, as ``text`` and
    ``image`` blocks (empty text left out, an image Claude does not read as
    ``[image content]``); ``[]`` when there are none. A ``tool_result`` holds a
    result's own images, so none move here. Claude wants every ``tool_result`` first
    in its message, text after: send ``tool_result_blocks(calls, results) +
    followup_blocks(calls, results)`` as one message's content.
    """
    return [_block(block) for block in followup_content(calls, results, lambda image: False)]


def _block(block: Content) -> TextBlockParam | ImageBlockParam:
    if isinstance(block, TextContent):
        return {"type": "text", "text": block.text}
    media_type = block.mime_type
    if not _readable(media_type):
        return {"type": "text", "text": IMAGE_PLACEHOLDER}
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type, "data": block.data},
    }


def _readable(media_type: str) -> TypeGuard[_MediaType]:
    return media_type in _IMAGE_TYPES
