"""What crosses the wire both ways: output schemas, structured content, content blocks.

MCP wants an object at the root of ``outputSchema`` and of ``structuredContent``. A
tool whose output schema is not an object schema is served *wrapped*: the schema as
``{"type": "object", "properties": {"result": <schema>}, "required": ["result"]}``
and its value as ``{"result": <value>}`` (``$defs`` move up to the wrapper, so ``$ref``
pointers keep resolving; ``"x-fastmcp-wrap-result": true`` marks the wrapper for
FastMCP clients). A client reads a schema as wrapped when it carries that marker or has
exactly that shape, which is what the SDK's own ``MCPServer`` emits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp import types

from .. import Content, FrozenDict, ImageContent, TextContent, Tool, ToolResult, ToolSchema, thaw
from .._model.errors import ToolOutputError

__all__ = [
    "ERROR_META",
    "local_blocks",
    "unwrap_output_schema",
    "wire_result",
    "wire_tool",
    "wrap_output_schema",
]

ERROR_META = "toolrail/error"
"""``CallToolResult._meta`` key carrying a failure's ``ErrorInfo`` (message, code, type)."""

WRAP_MARKER = "x-fastmcp-wrap-result"
_HOISTED = ("$schema", "$defs", "definitions")
_WRAPPER_KEYS = frozenset(
    {
        "type",
        "properties",
        "required",
        "title",
        "description",
        "additionalProperties",
        WRAP_MARKER,
        *_HOISTED,
    }
)


def is_object_schema(schema: Mapping[str, Any]) -> bool:
    return schema.get("type") == "object"


def wrap_output_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The ``outputSchema`` served for a tool's ``output_schema``."""
    inner: dict[str, Any] = thaw(schema) if isinstance(schema, FrozenDict) else dict(schema)
    if is_object_schema(inner):
        return inner
    wrapper: dict[str, Any] = {
        "type": "object",
        "properties": {"result": inner},
        "required": ["result"],
        WRAP_MARKER: True,
    }
    for key in _HOISTED:
        if key in inner:
            wrapper[key] = inner.pop(key)
    return wrapper


def unwrap_output_schema(schema: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, bool]:
    """A served ``outputSchema`` as a local ``output_schema``, and whether it was wrapped."""
    if schema is None:
        return None, False
    outer = dict(schema)
    properties = outer.get("properties")
    wrapped = outer.get(WRAP_MARKER) is True or (
        is_object_schema(outer)
        and isinstance(properties, Mapping)
        and list(properties) == ["result"]
        and outer.get("required") == ["result"]
        and outer.keys() <= _WRAPPER_KEYS
    )
    if not wrapped or not isinstance(properties, Mapping) or "result" not in properties:
        return outer, False
    inner = dict(properties["result"])
    for key in _HOISTED:
        if key in outer and key not in inner:
            inner[key] = outer[key]
    return inner, True


def wire_tool(schema: ToolSchema, tool: Tool) -> dict[str, Any]:
    """One ``tools/list`` entry, in its wire (camelCase) form."""
    entry: dict[str, Any] = {
        "name": schema.name,
        "description": schema.description,
        "inputSchema": thaw(schema.parameters),
    }
    if tool.output_schema is not None:
        entry["outputSchema"] = wrap_output_schema(tool.output_schema)
    if tool.annotations:
        entry["annotations"] = {str(key): thaw(value) for key, value in tool.annotations.items()}
    return entry


UNENCODABLE = (
    "the result cannot be sent over MCP: it holds text that is not valid Unicode "
    "(a lone surrogate, as os.listdir gives for a file name that is not UTF-8)"
)


def wire_result(result: ToolResult, tool: Tool | None) -> dict[str, Any]:
    """A ``CallToolResult`` in its wire form, for the tool the call resolved (if any).

    A result no UTF-8 encoder takes (a lone surrogate in a text or value) would break
    the transport: it is sent as an ``isError`` result ``INVALID_TOOL_OUTPUT`` instead.
    """
    wire = _wire_result(result, tool)
    if not _encodable(wire):
        return {
            "content": [{"type": "text", "text": f"Error: {UNENCODABLE}"}],
            "isError": True,
            "resultType": "complete",
            "_meta": {ERROR_META: {"message": UNENCODABLE, "code": ToolOutputError.code}},
        }
    return wire


def _encodable(value: Any) -> bool:
    """Whether every string in a JSON value encodes as UTF-8 (no lone surrogates)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if type(node) is str:
            if not node.isascii():
                try:
                    node.encode("utf-8")
                except UnicodeEncodeError:
                    return False
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
        elif isinstance(node, str) and not _encodable(str.__str__(node)):
            return False
    return True


def _wire_result(result: ToolResult, tool: Tool | None) -> dict[str, Any]:
    content = [
        {"type": "text", "text": block.text} if type(block) is TextContent else _wire_block(block)
        for block in result.content
    ]
    if result.is_error:
        wire: dict[str, Any] = {"content": content, "isError": True, "resultType": "complete"}
        error = result.error
        if error is not None:
            info = {"message": error.message, "code": error.code, "type": error.type}
            wire["_meta"] = {ERROR_META: {k: v for k, v in info.items() if v is not None}}
        return wire
    wire = {"content": content, "isError": False, "resultType": "complete"}
    value = result.value
    schema = tool.output_schema if tool is not None else None
    if schema is not None:
        if schema.get("type") != "object":
            scalar = type(value) in _SCALARS
            wire["structuredContent"] = {"result": value if scalar else thaw(value)}
        elif value is not None:
            wire["structuredContent"] = thaw(value)
    elif isinstance(value, FrozenDict):
        wire["structuredContent"] = thaw(value)
    return wire


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _wire_block(block: Content) -> dict[str, Any]:
    if isinstance(block, TextContent):
        return {"type": "text", "text": block.text}
    return {"type": "image", "data": block.data, "mimeType": block.mime_type}


def local_blocks(blocks: list[types.ContentBlock]) -> tuple[Content, ...]:
    """A result's content blocks as toolrail content: text and images as they are; audio,
    resource links and embedded resources as text (``[audio content]``,
    ``[resource: <uri>]``, or the embedded text itself)."""
    return tuple(_local_block(block) for block in blocks)


def _local_block(block: types.ContentBlock) -> Content:
    if isinstance(block, types.TextContent):
        return TextContent(block.text)
    if isinstance(block, types.ImageContent):
        return ImageContent(block.data, block.mime_type)
    if isinstance(block, types.AudioContent):
        return TextContent("[audio content]")
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return TextContent(resource.text)
        return TextContent(f"[resource: {resource.uri}]")
    return TextContent(f"[resource: {block.uri}]")
