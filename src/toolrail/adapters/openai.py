"""OpenAI: Chat Completions and Responses, in both directions.

| direction   | Chat Completions                       | Responses                            |
|-------------|----------------------------------------|--------------------------------------|
| tools out   | :func:`chat_tools`                     | :func:`responses_tools`              |
| calls in    | :func:`calls_from_chat`                | :func:`calls_from_response`          |
| results out | :func:`chat_messages`                  | :func:`responses_items`              |

Inputs are the ``openai`` SDK's objects or plain dicts of the same shape; outputs are
plain JSON-ready dicts typed as the SDK's request ``TypedDict``\\ s. The SDK is never
imported at run time.

- Calls in: ``arguments`` text is parsed by ``ToolCall.from_json`` rules (empty → ``{}``,
  not JSON → the raw string, which the tool then reports as invalid arguments). Only
  ``function`` tool calls are read; ``custom`` tool calls are left to the caller.
- Results out: a Chat Completions tool message is text, so each image becomes
  ``[image content]``; a Responses output is one string, or a list of ``input_text`` /
  ``input_image`` parts when the result holds an image OpenAI accepts (PNG, JPEG, WebP,
  GIF). OpenAI has no error flag: an error result's text already reads ``Error: ...``.
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

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import ImageContent, TextContent, ToolCall, ToolResult
from ._common import (
    SchemaLike,
    call_from_text,
    field,
    pairs,
    schema_parts,
    sequence_field,
    text_of,
    visible_content,
)

if TYPE_CHECKING:
    from collections.abc import Hashable

    from openai.types.chat import (
        ChatCompletionMessage,
        ChatCompletionToolMessageParam,
        ChatCompletionToolParam,
    )
    from openai.types.responses import (
        FunctionToolParam,
        Response,
        ResponseFunctionCallOutputItemListParam,
    )
    from openai.types.responses.response_input_item_param import FunctionCallOutput
    from openai.types.shared_params import FunctionDefinition

__all__ = [
    "calls_from_chat",
    "calls_from_response",
    "chat_messages",
    "chat_tools",
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
    for schema in schemas:
        name, description, parameters = schema_parts(schema)
        function: FunctionDefinition = {"name": name, "description": description}
        if strict:
            function["parameters"] = _strict_schema(name, parameters)
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
    for schema in schemas:
        name, description, parameters = schema_parts(schema)
        tools.append(
            {
                "type": "function",
                "name": name,
                "description": description,
                "parameters": _strict_schema(name, parameters) if strict else parameters,
                "strict": strict,
            }
        )
    return tools


def calls_from_chat(
    message: ChatCompletionMessage | Mapping[str, Any],
    *,
    scope: Hashable | None = None,
    schemas: Iterable[SchemaLike] | None = None,
) -> list[ToolCall]:
    """The function tool calls of an assistant message, in the model's order.

    Args:
        message: ``completion.choices[0].message`` or a dict with ``tool_calls``; a
            whole completion is a ``TypeError``.
        scope: the scope every call runs in.
        schemas: the schemas sent as tools; a ``null`` the original schema rejects for
            an optional property is removed (see the module docstring).
    """
    if field(message, "choices") is not None:
        raise TypeError("calls_from_chat takes a message: pass completion.choices[0].message")
    calls = []
    for tool_call in sequence_field(message, "tool_calls"):
        if field(tool_call, "type") not in (None, "function"):
            continue
        function = field(tool_call, "function")
        calls.append(
            call_from_text(
                field(tool_call, "id"),
                field(function, "name"),
                field(function, "arguments"),
                scope,
            )
        )
    return _restore_absent(calls, schemas)


def calls_from_response(
    response: Response | Mapping[str, Any],
    *,
    scope: Hashable | None = None,
    schemas: Iterable[SchemaLike] | None = None,
) -> list[ToolCall]:
    """The ``function_call`` output items of a response, keyed by their ``call_id``.

    Arguments as in :func:`calls_from_chat`; ``response`` is a ``Response`` or a dict
    with ``output``.
    """
    calls = [
        call_from_text(field(item, "call_id"), field(item, "name"), field(item, "arguments"), scope)
        for item in sequence_field(response, "output")
        if field(item, "type") == "function_call"
    ]
    return _restore_absent(calls, schemas)


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


def _output(result: ToolResult) -> str | ResponseFunctionCallOutputItemListParam:
    blocks = visible_content(result)
    if not any(isinstance(b, ImageContent) and b.mime_type in _IMAGE_TYPES for b in blocks):
        return text_of(blocks)
    parts: ResponseFunctionCallOutputItemListParam = []
    for block in blocks:
        if isinstance(block, TextContent):
            if block.text:
                parts.append({"type": "input_text", "text": block.text})
        elif block.mime_type in _IMAGE_TYPES:
            url = f"data:{block.mime_type};base64,{block.data}"
            parts.append({"type": "input_image", "image_url": url})
        else:
            parts.append({"type": "input_text", "text": text_of([block])})
    return parts


# ---- strict mode --------------------------------------------------------------------

_REJECTED = (
    "patternProperties",
    "propertyNames",
    "unevaluatedProperties",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "prefixItems",
    "additionalItems",
)
_NOTED = (
    "minLength",
    "maxLength",
    "minProperties",
    "maxProperties",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedItems",
)
_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
_LOOKAROUNDS = ("(?=", "(?!", "(?<=", "(?<!")
_TYPED = ("type", "$ref", "anyOf", "enum", "const")


def _strict_schema(tool: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """``parameters`` rewritten for OpenAI strict mode (module docstring); a new dict.

    Raises:
        ValueError: ``cannot make tool '<tool>' strict: <construct> at <JSON pointer>``.
    """
    if parameters.get("type") != "object" or "anyOf" in parameters or "oneOf" in parameters:
        raise ValueError(f'cannot make tool {tool!r} strict: a root other than "type": "object"')
    return _StrictRewrite(tool, parameters).node(parameters, "#")


class _StrictRewrite:
    """One tool's strict rewrite; ``node`` returns a new schema and never edits its input."""

    __slots__ = ("root", "tool")

    def __init__(self, tool: str, root: Mapping[str, Any]) -> None:
        self.tool = tool
        self.root = root

    def fail(self, construct: str, path: str) -> ValueError:
        return ValueError(f"cannot make tool {self.tool!r} strict: {construct} at {path}")

    def node(self, schema: object, path: str) -> dict[str, Any]:
        if isinstance(schema, bool):
            raise self.fail(f"the boolean schema {json.dumps(schema)}", path)
        if not isinstance(schema, Mapping):
            raise self.fail("a schema that is not an object", path)
        schema = self.merged(schema, path)
        if schema.get("unevaluatedProperties", True) is False:
            schema = {k: v for k, v in schema.items() if k != "unevaluatedProperties"}
        for key in _REJECTED:
            if key in schema:
                raise self.fail(key, path)
        out: dict[str, Any] = {}
        notes: list[str] = []
        for key, value in schema.items():
            if key in ("$schema", "discriminator") or (key == "default" and value is None):
                continue
            if key in _NOTED or key == "default" or _unsupported_string_rule(key, value):
                notes.append(f"{key}={json.dumps(value)}")
            elif key in ("$defs", "definitions"):
                if not isinstance(value, Mapping):
                    raise self.fail(f"{key} that is not an object", path)
                out[key] = {n: self.node(s, f"{path}/{key}/{n}") for n, s in value.items()}
            elif key == "anyOf":
                if not isinstance(value, list):
                    raise self.fail("anyOf that is not an array", path)
                out[key] = [self.node(s, f"{path}/anyOf/{i}") for i, s in enumerate(value)]
            elif key == "items":
                out[key] = self.node(value, f"{path}/items")
            elif key == "$ref" and not _is_local_ref(value):
                raise self.fail(f"a $ref to {value!r} (only #, #/$defs/… or #/definitions/…)", path)
            else:
                out[key] = value
        if notes:
            described = out.get("description")
            note = ", ".join(notes)
            out["description"] = f"{described} ({note})" if described else note
        if not any(key in out for key in _TYPED):
            raise self.fail("a schema without a type", path)
        if "object" in _types(out):
            self.close_object(schema, out, path)
        if "array" in _types(out) and "items" not in out:
            raise self.fail("an array without typed items", path)
        if "$ref" in out and len(out) > 1:
            out = {"anyOf": [{"$ref": out.pop("$ref")}], **out}
        return out

    def merged(self, schema: Mapping[str, Any], path: str) -> Mapping[str, Any]:
        """``oneOf`` as ``anyOf``; a lone ``allOf`` folded into its parent."""
        if "oneOf" in schema:
            if "anyOf" in schema:
                raise self.fail("oneOf next to anyOf", path)
            schema = {("anyOf" if k == "oneOf" else k): v for k, v in schema.items()}
        if "allOf" in schema:
            all_of = schema["allOf"]
            if not isinstance(all_of, list) or len(all_of) != 1:
                raise self.fail("allOf with several schemas", path)
            if not isinstance(all_of[0], Mapping):
                raise self.fail("an allOf entry that is not an object", f"{path}/allOf/0")
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            return self.merged({**all_of[0], **rest}, path)
        return schema

    def close_object(self, schema: Mapping[str, Any], out: dict[str, Any], path: str) -> None:
        if schema.get("additionalProperties", False) is not False:
            raise self.fail("additionalProperties other than false (an open map)", path)
        properties = schema.get("properties", {})
        if not isinstance(properties, Mapping):
            raise self.fail("properties that are not an object", path)
        required = schema.get("required", ())
        rewritten = {}
        for name, prop in properties.items():
            node = self.node(prop, f"{path}/properties/{name}")
            if name not in required and not _accepts_null(prop, self.root):
                node = _nullable(node)
            rewritten[name] = node
        out["properties"] = rewritten
        out["required"] = list(rewritten)
        out["additionalProperties"] = False


def _unsupported_string_rule(key: str, value: object) -> bool:
    if key == "format":
        return value not in _FORMATS
    return key == "pattern" and isinstance(value, str) and any(t in value for t in _LOOKAROUNDS)


def _is_local_ref(ref: object) -> bool:
    """``#`` or a top-level definition: the only pointers strict mode resolves."""
    if not isinstance(ref, str):
        return False
    for prefix in ("#/$defs/", "#/definitions/"):
        name = ref.removeprefix(prefix)
        if name != ref:
            return bool(name) and "/" not in name
    return ref == "#"


def _types(schema: Mapping[str, Any]) -> list[Any]:
    types = schema.get("type")
    return types if isinstance(types, list) else [types]


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` that also accepts ``null``: a type list, an extra variant, or a wrapper."""
    if "type" in schema and not any(k in schema for k in ("enum", "const", "anyOf", "$ref")):
        return {**schema, "type": [*_types(schema), "null"]}
    if "anyOf" in schema and "type" not in schema:
        return {**schema, "anyOf": [*schema["anyOf"], {"type": "null"}]}
    outer: dict[str, Any] = {k: schema[k] for k in ("title", "description") if k in schema}
    inner = {k: v for k, v in schema.items() if k not in outer}
    return {"anyOf": [inner, {"type": "null"}], **outer}


# ---- nulls back to absent -----------------------------------------------------------


def _restore_absent(calls: list[ToolCall], schemas: Iterable[SchemaLike] | None) -> list[ToolCall]:
    if schemas is None:
        return calls
    parameters = {name: params for name, _, params in map(schema_parts, schemas)}
    restored = []
    for call in calls:
        root = parameters.get(call.name)
        if root is not None and isinstance(call.arguments, dict):
            call = dataclasses.replace(call, arguments=_without_nulls(call.arguments, root, root))
        restored.append(call)
    return restored


def _without_nulls(value: Any, schema: Any, root: Mapping[str, Any]) -> Any:
    """``value`` minus each ``null`` its schema rejects for a property it may leave out."""
    schema = _branch(value, _resolve(schema, root), root)
    if not isinstance(schema, Mapping):
        return value
    if isinstance(value, dict):
        properties, required = schema.get("properties"), schema.get("required", ())
        if not isinstance(properties, Mapping):
            return value
        kept = {}
        for key, item in value.items():
            prop = properties.get(key)
            if prop is None:
                kept[key] = item
            elif item is not None:
                kept[key] = _without_nulls(item, prop, root)
            elif key in required or _accepts_null(prop, root):
                kept[key] = item
        return kept
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_without_nulls(item, schema["items"], root) for item in value]
    return value


def _branch(value: Any, schema: Any, root: Mapping[str, Any]) -> Any:
    """The one ``anyOf``/``oneOf``/``allOf`` branch that can hold this object or array."""
    if not isinstance(schema, Mapping) or not isinstance(value, dict | list):
        return schema
    kind = "object" if isinstance(value, dict) else "array"
    for key in ("anyOf", "oneOf", "allOf"):
        variants = schema.get(key)
        if isinstance(variants, list):
            fits = [v for v in (_resolve(s, root) for s in variants) if _holds(v, kind)]
            return fits[0] if len(fits) == 1 else schema
    return schema


def _holds(schema: Any, kind: str) -> bool:
    return isinstance(schema, Mapping) and kind in _types(schema)


def _accepts_null(schema: Any, root: Mapping[str, Any], depth: int = 0) -> bool:
    schema = _resolve(schema, root)
    if isinstance(schema, bool) or depth > 32:
        return schema is True
    if not isinstance(schema, Mapping):
        return True
    if "const" in schema and schema["const"] is not None:
        return False
    if "enum" in schema and None not in schema["enum"]:
        return False
    if "type" in schema and "null" not in _types(schema):
        return False
    for key in ("anyOf", "oneOf"):
        variants = schema.get(key)
        if isinstance(variants, list) and not any(
            _accepts_null(v, root, depth + 1) for v in variants
        ):
            return False
    all_of = schema.get("allOf")
    return not isinstance(all_of, list) or all(_accepts_null(v, root, depth + 1) for v in all_of)


def _resolve(schema: Any, root: Mapping[str, Any]) -> Any:
    """Follow local ``$ref`` pointers (``#``, ``#/$defs/x`` …) to the schema they name."""
    for _ in range(32):
        ref = schema.get("$ref") if isinstance(schema, Mapping) else None
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            return schema
        target: Any = root
        for part in ref[2:].split("/") if ref != "#" else ():
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, Mapping) else None
        schema = target
    return schema
