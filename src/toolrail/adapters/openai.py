"""OpenAI: Chat Completions and Responses, in both directions.

| direction   | Chat Completions                       | Responses                            |
|-------------|----------------------------------------|--------------------------------------|
| tools out   | :func:`chat_tools`                     | :func:`responses_tools`              |
| calls in    | :func:`calls_from_chat`                | :func:`calls_from_response`          |
| results out | :func:`chat_messages`                  | :func:`responses_items`              |
| follow-up   | :func:`chat_followup`                  | :func:`responses_followup`           |

Inputs are the ``openai`` SDK's objects or plain dicts of the same shape; outputs are
plain JSON-ready dicts typed as the SDK's request ``TypedDict``\\ s. The SDK is never
imported at run time.

- Tool names: a registry name OpenAI rejects (outside ``^[a-zA-Z0-9_-]{1,64}$``: a
  dot, more than 64 characters) goes out as one it accepts, by the rule in
  ``toolrail.adapters`` ("Tool names"): ``github.search`` as ``github_search``. Pass the
  same ``schemas`` to the calls-in functions and each call names the registry's tool.
- Calls in: ``arguments`` text is parsed by ``ToolCall.from_json`` rules (empty → ``{}``,
  not JSON → the raw string, which the tool then reports as invalid arguments). Only
  ``function`` tool calls are read; ``custom`` tool calls are left to the caller.
- Results out: a Chat Completions tool message is text, so each image becomes
  ``[image content]``; a Responses output is one string, or a list of ``input_text`` /
  ``input_image`` parts when the result holds an image OpenAI accepts (PNG, JPEG, WebP,
  GIF). OpenAI has no error flag: an error result's text already reads ``Error: ...``.
- Follow-up: what a tool message or output item cannot carry, the results' ``contexts``
  and (Chat Completions) their images, goes into one user message after them.
- ``strict=True`` rewrites each schema for Structured Outputs: every object closed
  (``additionalProperties: false``) with every property required, an optional property
  made nullable, ``oneOf`` read as ``anyOf``, a lone ``allOf`` merged, a ``$ref`` with
  siblings wrapped in ``anyOf``; constraints strict mode rejects (``minLength``,
  ``maxLength``, ``uniqueItems``, unsupported ``format`` …, and ``default``) move into
  the description as ``key=value`` notes, for the tool still validates them. What it
  cannot express raises ``ValueError`` naming the tool, the construct and where, e.g.
  ``cannot make tool 'tag' strict: patternProperties at #/properties/tags``.
- In strict mode the model sends ``null`` for an optional property it leaves out. Pass
  the same ``schemas`` to the calls-in functions and such a ``null`` is removed again
  wherever the original schema does not accept ``null``, so the tool sees the property
  absent and applies its default.

Reference: integrations.md, "Provider adapters"; OpenAI's guide to Structured Outputs,
"Supported schemas".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import ImageContent, TextContent, ToolCall, ToolResult
from ._common import (
    IMAGE_PLACEHOLDER,
    SchemaLike,
    call_from_text,
    field,
    followup_content,
    pairs,
    schema_parts,
    sequence_field,
    text_of,
    visible_content,
)
from ._names import OPENAI, from_wire, registry_name, to_wire
from ._strict import restore_absent, strict_schema

if TYPE_CHECKING:
    from collections.abc import Hashable

    from openai.types.chat import (
        ChatCompletionContentPartParam,
        ChatCompletionMessage,
        ChatCompletionToolMessageParam,
        ChatCompletionToolParam,
        ChatCompletionUserMessageParam,
    )
    from openai.types.responses import (
        EasyInputMessageParam,
        FunctionToolParam,
        Response,
        ResponseFunctionCallOutputItemListParam,
        ResponseInputMessageContentListParam,
    )
    from openai.types.responses.response_input_item_param import FunctionCallOutput
    from openai.types.shared_params import FunctionDefinition

    from .. import ExecutionToken

__all__ = [
    "calls_from_chat",
    "calls_from_response",
    "chat_followup",
    "chat_messages",
    "chat_tools",
    "responses_followup",
    "responses_items",
    "responses_tools",
]

_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})


def chat_tools(
    schemas: Iterable[SchemaLike], *, strict: bool = False
) -> list[ChatCompletionToolParam]:
    """Chat Completions ``tools``: ``{"type": "function", "function": {...}}`` per schema.

    Args:
        schemas: ``ToolSchema`` values (``registry.schemas(scope)``) or dicts of that shape.
        strict: rewrite each schema for Structured Outputs and set ``"strict": True``;
            ``ValueError`` for a schema strict mode cannot express.

    >>> [tool] = chat_tools([{"name": "now", "parameters": {"type": "object"}}], strict=True)
    >>> tool["function"]
    {'name': 'now', 'description': '', 'parameters': {'type': 'object', 'properties': {}, \
'required': [], 'additionalProperties': False}, 'strict': True}
    """
    tools: list[ChatCompletionToolParam] = []
    parts = [schema_parts(schema) for schema in schemas]
    for wire, (name, description, parameters) in zip(_wire(parts), parts, strict=True):
        function: FunctionDefinition = {"name": wire, "description": description}
        if strict:
            function["parameters"] = strict_schema(name, parameters)
            function["strict"] = True
        else:
            function["parameters"] = parameters
        tools.append({"type": "function", "function": function})
    return tools


def responses_tools(
    schemas: Iterable[SchemaLike], *, strict: bool = False
) -> list[FunctionToolParam]:
    """Responses ``tools``: ``{"type": "function", "name", "description", "parameters", "strict"}``.

    ``strict`` is always sent, for the Responses API treats a missing one as ``true``.
    Arguments as in :func:`chat_tools`.
    """
    tools: list[FunctionToolParam] = []
    parts = [schema_parts(schema) for schema in schemas]
    for wire, (name, description, parameters) in zip(_wire(parts), parts, strict=True):
        tools.append(
            {
                "type": "function",
                "name": wire,
                "description": description,
                "parameters": strict_schema(name, parameters) if strict else parameters,
                "strict": strict,
            }
        )
    return tools


def calls_from_chat(
    message: ChatCompletionMessage | Mapping[str, Any],
    *,
    scope: Hashable | None = None,
    parent: ExecutionToken | None = None,
    schemas: Iterable[SchemaLike] | None = None,
) -> list[ToolCall]:
    """The function tool calls of an assistant message, in the model's order.

    Args:
        message: ``completion.choices[0].message`` or a dict with ``tool_calls``; a
            whole completion is a ``TypeError``.
        scope: the scope every call runs in.
        parent: the token of the call these calls are nested in (``ctx.token`` of a
            tool that runs a sub-agent), set on every call.
        schemas: the schemas sent as tools: a call naming a tool by the name it went
            out as (see "Tool names" in the module docstring) names the registry's
            tool again, and a ``null`` the original schema rejects for an optional
            property is removed. Without them names and arguments pass through as sent.
    """
    if field(message, "choices") is not None:
        raise TypeError("calls_from_chat takes a message: pass completion.choices[0].message")
    schemas = None if schemas is None else list(schemas)
    back = from_wire(schemas, OPENAI)
    calls = []
    for tool_call in sequence_field(message, "tool_calls"):
        if field(tool_call, "type") not in (None, "function"):
            continue
        function = field(tool_call, "function")
        calls.append(
            call_from_text(
                field(tool_call, "id"),
                registry_name(back, field(function, "name")),
                field(function, "arguments"),
                scope=scope,
                parent=parent,
            )
        )
    return restore_absent(calls, schemas)


def calls_from_response(
    response: Response | Mapping[str, Any],
    *,
    scope: Hashable | None = None,
    parent: ExecutionToken | None = None,
    schemas: Iterable[SchemaLike] | None = None,
) -> list[ToolCall]:
    """The ``function_call`` output items of a response, keyed by their ``call_id``.

    Arguments as in :func:`calls_from_chat`; ``response`` is a ``Response`` or a dict
    with ``output``.
    """
    schemas = None if schemas is None else list(schemas)
    back = from_wire(schemas, OPENAI)
    calls = [
        call_from_text(field(item, "call_id"), registry_name(back, field(item, "name")),
                       field(item, "arguments"), scope=scope, parent=parent)
        for item in sequence_field(response, "output")
        if field(item, "type") == "function_call"
    ]
    return restore_absent(calls, schemas)


def chat_messages(
    calls: Sequence[ToolCall], results: Sequence[ToolResult]
) -> list[ChatCompletionToolMessageParam]:
    """One ``{"role": "tool", "tool_call_id", "content"}`` message per call, in order.

    ``content`` is the result's text blocks joined with ``"\\n"``, each image as
    ``[image content]``; an empty result is ``""``. ``ValueError`` unless there is
    exactly one result per call.
    """
    return [
        {
            "role": "tool",
            "tool_call_id": call.call_id,
            "content": text_of(visible_content(result)),
        }
        for call, result in pairs(calls, results)
    ]


def responses_items(
    calls: Sequence[ToolCall], results: Sequence[ToolResult]
) -> list[FunctionCallOutput]:
    """One ``{"type": "function_call_output", "call_id", "output"}`` input item per call.

    ``output`` is the text (as in :func:`chat_messages`) unless the result holds an
    image OpenAI accepts; then it is a list of ``input_text`` / ``input_image`` parts,
    images as base64 data URLs, empty text blocks left out.
    """
    return [
        {"type": "function_call_output", "call_id": call.call_id, "output": _output(result)}
        for call, result in pairs(calls, results)
    ]


def chat_followup(
    calls: Sequence[ToolCall], results: Sequence[ToolResult]
) -> list[ChatCompletionUserMessageParam]:
    """The user message to send after the tool messages: ``[]`` when there is nothing to add.

    It holds, in model order, each image a tool message showed as ``[image content]``
    (PNG, JPEG, WebP or GIF, as a base64 data URL) after the line ``Image content of
    tool call <call_id> (<name>):``, and the blocks of every result's ``contexts``
    (an image of another type as ``[image content]``). Send both as
    ``chat_messages(calls, results) + chat_followup(calls, results)``.

    >>> import toolrail as tr
    >>> note = tr.ContextMessage((tr.TextContent("Times are in UTC."),), source="now")
    >>> call = tr.ToolCall(call_id="call_1", name="now")
    >>> chat_followup([call], [tr.ToolResult((tr.TextContent("12:00"),), contexts=(note,))])
    [{'role': 'user', 'content': [{'type': 'text', 'text': 'Times are in UTC.'}]}]
    """
    parts: list[ChatCompletionContentPartParam] = []
    for block in followup_content(calls, results, _readable):
        if isinstance(block, TextContent):
            parts.append({"type": "text", "text": block.text})
        elif _readable(block):
            parts.append({"type": "image_url", "image_url": {"url": _data_url(block)}})
        else:
            parts.append({"type": "text", "text": IMAGE_PLACEHOLDER})
    return [{"role": "user", "content": parts}] if parts else []


def responses_followup(
    calls: Sequence[ToolCall], results: Sequence[ToolResult]
) -> list[EasyInputMessageParam]:
    """The user message item to send after the ``function_call_output`` items, or ``[]``.

    It holds the blocks of every result's ``contexts`` in model order, as ``input_text``
    and ``input_image`` parts (an image of a type OpenAI does not read as
    ``[image content]``). A ``function_call_output`` holds a result's own images, so
    none move here. Send both as ``responses_items(calls, results) +
    responses_followup(calls, results)``.
    """
    parts: ResponseInputMessageContentListParam = []
    for block in followup_content(calls, results, lambda image: False):
        if isinstance(block, TextContent):
            parts.append({"type": "input_text", "text": block.text})
        elif _readable(block):
            parts.append({"type": "input_image", "image_url": _data_url(block), "detail": "auto"})
        else:
            parts.append({"type": "input_text", "text": IMAGE_PLACEHOLDER})
    return [{"type": "message", "role": "user", "content": parts}] if parts else []


def _wire(parts: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    return to_wire([name for name, _, _ in parts], OPENAI)


def _readable(image: ImageContent) -> bool:
    return image.mime_type in _IMAGE_TYPES


def _data_url(image: ImageContent) -> str:
    return f"data:{image.mime_type};base64,{image.data}"


def _output(result: ToolResult) -> str | ResponseFunctionCallOutputItemListParam:
    blocks = visible_content(result)
    if not any(isinstance(b, ImageContent) and b.mime_type in _IMAGE_TYPES for b in blocks):
        return text_of(blocks)
    parts: ResponseFunctionCallOutputItemListParam = []
    for block in blocks:
        if isinstance(block, TextContent):
            if block.text:
                parts.append({"type": "input_text", "text": block.text})
        elif _readable(block):
            parts.append({"type": "input_image", "image_url": _data_url(block)})
        else:
            parts.append({"type": "input_text", "text": IMAGE_PLACEHOLDER})
    return parts
