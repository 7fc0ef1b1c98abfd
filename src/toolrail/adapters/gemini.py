"""Google Gemini (``google-genai``), in both directions.

- tools out, :func:`function_declarations`: ``{"name", "description",
  "parameters_json_schema"}``;
- calls in, :func:`calls_from_response`: the ``function_call`` parts of the first
  candidate;
- results out, :func:`function_responses`: ``{"function_response": {"id", "name",
  "response"}}`` parts;
- follow-up, :func:`followup_parts`: the results' ``contexts`` (and, with
  ``inline_images=False``, their images) as ``text`` and ``inline_data`` parts of the
  same user turn.

Inputs are the SDK's objects or plain dicts (snake_case or the REST API's camelCase);
outputs are plain JSON-ready dicts typed as the SDK's ``TypedDict``\\ s. The SDK is never
imported at run time.

- Tool names: a registry name Gemini rejects (outside
  ``^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$``: a first character other than a letter or ``_``,
  more than 64 characters) goes out as one it accepts, by the rule in
  ``toolrail.adapters`` ("Tool names"): ``3d`` as ``_3d``. Pass the same ``schemas`` to
  :func:`calls_from_response` and each call names the registry's tool, and to
  :func:`function_responses`, whose ``name`` must be the one the model called.
- Tools out: the JSON Schema goes to ``parameters_json_schema`` unchanged, not to
  ``parameters``, whose OpenAPI-subset ``Schema`` cannot say ``$ref``/``$defs``,
  ``additionalProperties`` or every ``anyOf``. Needs a ``google-genai`` that has the
  field (it has been there since mid-2025).
- Calls in: ``args`` is already parsed JSON and kept as it is (missing → ``{}``). A call
  without an ``id`` (older models, Vertex AI) gets the id ``f"{name}-{index}"``, its
  index among the response's function calls, so the same response always yields the
  same ids.
- Results out: ``response`` is ``{"output": text}`` on success and ``{"error": text}``
  on failure, ``text`` being the result's text blocks joined with ``"\\n"`` (``""`` when
  empty). Images (PNG, JPEG, WebP) travel as ``inline_data`` parts of the function
  response, which Gemini 3 models read; with ``inline_images=False``, or for other
  image types, an image is ``[image content]`` in the text. The ``id`` is echoed when
  the model issued one and left out for a minted ``<name>-<n>`` id, since an id the
  model never issued can be rejected.

Reference: integrations.md, "Provider adapters".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard, cast

from .. import Content, ImageContent, ToolCall, ToolResult
from ._common import (
    SchemaLike,
    field,
    followup_content,
    pairs,
    schema_parts,
    sequence_field,
    text_of,
    visible_content,
)
from ._names import GEMINI, from_wire, registry_name, schema_name, to_wire, wire_names

if TYPE_CHECKING:
    from collections.abc import Hashable

    from google.genai.types import (
        FunctionDeclarationDict,
        FunctionResponseDict,
        FunctionResponsePartDict,
        GenerateContentResponse,
        PartDict,
    )

    from .. import ExecutionToken

__all__ = [
    "calls_from_response",
    "followup_parts",
    "function_declarations",
    "function_responses",
]

_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp"})


def function_declarations(schemas: Iterable[SchemaLike]) -> list[FunctionDeclarationDict]:
    """``function_declarations`` of a Gemini tool, one per schema.

    ``schemas`` are ``ToolSchema`` values (``registry.schemas(scope)``) or dicts of
    that shape. Wrap the list as ``{"function_declarations": [...]}`` in ``tools``.

    >>> function_declarations([{"name": "now", "description": "The time.",
    ...                         "parameters": {"type": "object"}}])
    [{'name': 'now', 'description': 'The time.', 'parameters_json_schema': {'type': 'object'}}]
    """
    parts = [schema_parts(schema) for schema in schemas]
    wire = to_wire([name for name, _, _ in parts], GEMINI)
    return [
        {"name": name, "description": description, "parameters_json_schema": parameters}
        for name, (_, description, parameters) in zip(wire, parts, strict=True)
    ]


def calls_from_response(
    response: GenerateContentResponse | Mapping[str, Any],
    *,
    scope: Hashable | None = None,
    parent: ExecutionToken | None = None,
    schemas: Iterable[SchemaLike] | None = None,
) -> list[ToolCall]:
    """The ``function_call`` parts of the first candidate, in the model's order.

    Args:
        response: a ``GenerateContentResponse`` or a dict with ``candidates``.
        scope: the scope every call runs in.
        parent: the token of the call these calls are nested in (``ctx.token`` of a
            tool that runs a sub-agent), set on every call.
        schemas: the schemas sent as declarations: a call naming a tool by the name
            it went out as (see "Tool names" in the module docstring) names the
            registry's tool again, and a minted id is ``<registry name>-<index>``.
            Without them each name is kept as the model sent it.
    """
    back = from_wire(schemas, GEMINI)
    candidates = sequence_field(response, "candidates")
    content = field(candidates[0], "content") if candidates else None
    calls: list[ToolCall] = []
    for part in sequence_field(content, "parts"):
        function_call = field(part, "function_call", "functionCall")
        if function_call is None:
            continue
        name = registry_name(back, field(function_call, "name"))
        call_id = field(function_call, "id")
        arguments = field(function_call, "args")
        calls.append(
            ToolCall(
                call_id=f"{name}-{len(calls)}" if call_id is None else call_id,
                name=name,
                arguments={} if arguments is None else arguments,
                scope=scope,
                parent=parent,
            )
        )
    return calls


def function_responses(
    calls: Sequence[ToolCall], results: Sequence[ToolResult], *, inline_images: bool = True,
    schemas: Iterable[SchemaLike] | None = None,
) -> list[PartDict]:
    """One ``function_response`` part per call, in order: the next user turn's parts.

    Args:
        calls: the calls, as :func:`calls_from_response` made them.
        results: one result per call (``ValueError`` otherwise).
        inline_images: send images as ``inline_data`` parts of the response (Gemini 3
            models); ``False`` writes ``[image content]`` for models that reject them.
        schemas: the schemas sent as declarations: each ``name`` is the one the call's
            tool went out as. Without them it is the call's name.
    """
    wire = wire_names([] if schemas is None else map(schema_name, schemas), GEMINI)
    parts: list[PartDict] = []
    for call, result in pairs(calls, results):
        blocks = visible_content(result)
        images = [b for b in blocks if inline_images and _inline(b)]
        text = text_of(b for b in blocks if not (inline_images and _inline(b)))
        response: FunctionResponseDict = {} if _minted(call) else {"id": call.call_id}
        response["name"] = wire.get(call.name, call.name)
        response["response"] = {"error": text} if result.is_error else {"output": text}
        if images:
            response["parts"] = [_image_part(image) for image in images]
        parts.append({"function_response": response})
    return parts


def followup_parts(
    calls: Sequence[ToolCall], results: Sequence[ToolResult], *, inline_images: bool = True
) -> list[PartDict]:
    """The parts to put after the ``function_response`` parts, in the same user turn.

    Args:
        calls: the calls, as :func:`calls_from_response` made them.
        results: one result per call (``ValueError`` otherwise).
        inline_images: as given to :func:`function_responses`. With ``False`` each
            PNG, JPEG or WebP image of a result, there ``[image content]``, comes here
            as an ``inline_data`` part after ``Image content of tool call <call_id>
            (<name>):``.

    Then come the blocks of every result's ``contexts``, as ``text`` and ``inline_data``
    parts (an image of another type as ``[image content]``), all in model order; ``[]``
    when there is nothing. Gemini wants user and model turns to alternate: send
    ``function_responses(calls, results) + followup_parts(calls, results)`` as the
    parts of one user turn.
    """
    moved = (lambda image: False) if inline_images else _inline
    parts: list[PartDict] = []
    for block in followup_content(calls, results, moved):
        if _inline(block):  # base64 text for bytes, as in _image_part
            parts.append({"inline_data": {"mime_type": block.mime_type,
                                          "data": cast(bytes, block.data)}})
        else:
            parts.append({"text": text_of([block])})
    return parts


def _inline(block: Content) -> TypeGuard[ImageContent]:
    return isinstance(block, ImageContent) and block.mime_type in _IMAGE_TYPES


def _image_part(image: ImageContent) -> FunctionResponsePartDict:
    # The SDK types ``data`` as bytes but decodes base64 text into them; text keeps the
    # part JSON-ready, which is also the REST API's own form.
    data = cast(bytes, image.data)
    return {"inline_data": {"mime_type": image.mime_type, "data": data}}


def _minted(call: ToolCall) -> bool:
    index = call.call_id.removeprefix(f"{call.name}-")
    return index != call.call_id and index.isdecimal() and index.isascii()
