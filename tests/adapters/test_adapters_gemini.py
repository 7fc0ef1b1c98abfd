"""toolrail.adapters.gemini: function declarations, function calls, function responses.

Spec: integrations.md, "Provider adapters". Wire shapes are checked against the real
``google-genai`` SDK: responses built as ``GenerateContentResponse`` models, outputs
validated by its pydantic models (which forbid unknown keys), and whole requests sent
through a real client whose transport is an ``httpx.MockTransport`` (no network).
"""

from __future__ import annotations

import base64
import doctest
import json
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import types

import toolrail as tr
from helpers import (
    ADD_PARAMETERS,
    adder_registry,
    assert_a_sub_agents_calls_carry_the_parent_token_and_scope,
    python_output,
)
from toolrail.adapters import gemini as gm

PNG = tr.ImageContent(data=base64.b64encode(b"\x89PNG").decode(), mime_type="image/png")
GIF = tr.ImageContent(data="R0lGOA==", mime_type="image/gif")


def response(*parts: dict[str, Any]) -> types.GenerateContentResponse:
    return types.GenerateContentResponse.model_validate(
        {"candidates": [{"content": {"role": "model", "parts": list(parts)}}]}
    )


def function_call(name: str, args: Any, call_id: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"name": name, "args": args}
    if call_id is not None:
        call["id"] = call_id
    return {"function_call": call}


def answering(reply: dict[str, Any]) -> tuple[genai.Client, list[dict[str, Any]]]:
    """A real SDK client whose transport answers every request with ``reply`` (REST
    JSON), and the list it notes each request's JSON body in."""
    requests: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(json.loads(request.content))
        return httpx.Response(200, json=reply)

    sdk = genai.Client(
        api_key="test",
        http_options=types.HttpOptions(
            base_url="https://gemini.test",
            httpx_client=httpx.Client(transport=httpx.MockTransport(handler)),
        ),
    )
    return sdk, requests


def one_part(result: tr.ToolResult, call_id: str = "fc_1", **options: Any) -> dict[str, Any]:
    call = tr.ToolCall(call_id=call_id, name="t")
    [part] = gm.function_responses([call], [result], **options)
    return dict(part)


# ---- tools out ----------------------------------------------------------------------


def test_function_declarations_send_the_json_schema_as_parameters_json_schema() -> None:
    [declaration] = gm.function_declarations(adder_registry().schemas())

    assert declaration == {
        "name": "add",
        "description": "Add two numbers.",
        "parameters_json_schema": ADD_PARAMETERS,
    }


def test_function_declarations_validate_as_the_sdk_tool_model() -> None:
    declarations = gm.function_declarations(adder_registry().schemas())

    tool = types.Tool.model_validate({"function_declarations": declarations})

    assert tool.function_declarations is not None
    assert tool.function_declarations[0].parameters_json_schema == declarations[0].get(
        "parameters_json_schema"
    )


def test_function_declarations_accept_dicts_and_keep_json_schema_constructs() -> None:
    parameters = {
        "type": "object",
        "properties": {"next": {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "null"}]}},
        "$defs": {"N": {"type": "object", "additionalProperties": {"type": "string"}}},
    }

    [declaration] = gm.function_declarations([{"name": "walk", "parameters": parameters}])

    assert declaration == {"name": "walk", "description": "", "parameters_json_schema": parameters}


# ---- calls in -----------------------------------------------------------------------


def test_calls_from_response_reads_the_function_calls_with_their_ids() -> None:
    sdk_response = response(
        {"text": "Adding."},
        function_call("add", {"a": 1, "b": 2}, "fc_1"),
        function_call("add", {"a": 3}, "fc_2"),
    )

    assert gm.calls_from_response(sdk_response, scope="agent") == [
        tr.ToolCall(call_id="fc_1", name="add", arguments={"a": 1, "b": 2}, scope="agent"),
        tr.ToolCall(call_id="fc_2", name="add", arguments={"a": 3}, scope="agent"),
    ]


async def test_a_sub_agents_function_calls_carry_the_parent_token_and_scope() -> None:
    sub_reply = response(function_call("add", {"a": 1}, "fc_9"), function_call("add", {"a": 2}))

    await assert_a_sub_agents_calls_carry_the_parent_token_and_scope(
        lambda registry, parent: gm.calls_from_response(sub_reply, parent=parent, scope="sub")
    )
    assert [c.parent for c in gm.calls_from_response(sub_reply)] == [None, None]


def test_a_call_without_an_id_gets_its_name_and_index_among_the_calls() -> None:
    sdk_response = response(
        function_call("add", {"a": 1}), {"text": "and"}, function_call("add", {"a": 2})
    )

    calls = gm.calls_from_response(sdk_response)

    assert [c.call_id for c in calls] == ["add-0", "add-1"]
    assert [c.call_id for c in gm.calls_from_response(sdk_response)] == ["add-0", "add-1"]


def test_a_call_without_args_has_empty_arguments() -> None:
    [call] = gm.calls_from_response(response({"function_call": {"name": "now"}}))

    assert call.arguments == {}


def test_calls_from_response_reads_a_rest_api_dict_in_camel_case() -> None:
    as_dict = {
        "candidates": [
            {"content": {"parts": [{"functionCall": {"id": "x1", "name": "add", "args": {}}}]}}
        ]
    }

    assert gm.calls_from_response(as_dict) == [tr.ToolCall(call_id="x1", name="add")]


def test_a_response_without_candidates_or_function_calls_has_no_calls() -> None:
    assert gm.calls_from_response(types.GenerateContentResponse()) == []
    assert gm.calls_from_response(response({"text": "Done."})) == []
    assert gm.calls_from_response({"candidates": [{"finish_reason": "SAFETY"}]}) == []


async def test_arguments_the_tool_rejects_execute_to_an_error_response() -> None:
    [call] = gm.calls_from_response(response(function_call("add", {"a": "one"})))

    result = await adder_registry().execute(call)

    assert result.error is not None
    assert result.error.code == "INVALID_ARGS"
    [part] = gm.function_responses([call], [result])
    assert part == {
        "function_response": {
            "name": "add",
            "response": {"error": result.text},
        }
    }


# ---- results out --------------------------------------------------------------------


def test_a_success_is_a_function_response_with_the_text_as_output() -> None:
    part = one_part(tr.ToolResult((tr.TextContent("3"), tr.TextContent("ok")), value=3))

    assert part == {
        "function_response": {"id": "fc_1", "name": "t", "response": {"output": "3\nok"}}
    }


def test_an_error_is_a_function_response_with_the_text_as_error() -> None:
    error = tr.ErrorInfo("boom", code="TOOL_ERROR")

    part = one_part(tr.ToolResult((tr.TextContent("Error: boom"),), is_error=True, error=error))

    assert part["function_response"]["response"] == {"error": "Error: boom"}


def test_an_empty_result_is_an_empty_output() -> None:
    assert one_part(tr.ToolResult(()))["function_response"]["response"] == {"output": ""}


def test_an_error_with_nothing_to_show_says_its_message() -> None:
    error = tr.ErrorInfo("denied", code="DENIED")

    part = one_part(tr.ToolResult((), is_error=True, error=error))

    assert part["function_response"]["response"] == {"error": "Error: denied"}


def test_a_minted_id_is_left_out_of_the_response_and_a_model_id_is_echoed() -> None:
    sdk_response = response(function_call("t", {}), function_call("t", {}, "fc_9"))
    calls = gm.calls_from_response(sdk_response)
    results = [tr.ToolResult(()), tr.ToolResult(())]

    parts = gm.function_responses(calls, results)

    assert [dict(p.get("function_response") or {}).get("id") for p in parts] == [None, "fc_9"]


def test_images_travel_as_inline_data_parts_of_the_function_response() -> None:
    part = one_part(tr.ToolResult((tr.TextContent("chart:"), PNG, GIF)))

    assert part == {
        "function_response": {
            "id": "fc_1",
            "name": "t",
            "response": {"output": "chart:\n[image content]"},
            "parts": [{"inline_data": {"mime_type": "image/png", "data": PNG.data}}],
        }
    }


def test_without_inline_images_every_image_is_a_placeholder() -> None:
    part = one_part(tr.ToolResult((tr.TextContent("chart:"), PNG)), inline_images=False)

    assert part["function_response"] == {
        "id": "fc_1",
        "name": "t",
        "response": {"output": "chart:\n[image content]"},
    }


def test_function_responses_validate_as_sdk_parts_with_the_image_bytes_decoded() -> None:
    error = tr.ErrorInfo("boom")
    results = [
        tr.ToolResult((PNG,)),
        tr.ToolResult((tr.TextContent("Error: boom"),), is_error=True, error=error),
    ]
    calls = [tr.ToolCall(call_id="a", name="t"), tr.ToolCall(call_id="b", name="t")]

    content = types.Content.model_validate(
        {"role": "user", "parts": gm.function_responses(calls, results)}
    )

    assert content.parts is not None
    [image, failure] = [p.function_response for p in content.parts]
    assert image is not None
    assert failure is not None
    assert image.parts is not None
    assert image.parts[0].inline_data is not None
    assert image.parts[0].inline_data.data == b"\x89PNG"
    assert failure.response == {"error": "Error: boom"}


def test_function_responses_needs_exactly_one_result_per_call() -> None:
    with pytest.raises(ValueError, match=r"^got 1 calls and 0 results"):
        gm.function_responses([tr.ToolCall(call_id="a", name="t")], [])


# ---- through the real client --------------------------------------------------------


async def test_a_step_round_trips_through_the_sdk_client() -> None:
    reg = adder_registry()
    sdk, requests = answering({
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"functionCall": {"id": "fc_1", "name": "add", "args": {"a": 2}}}],
                },
                "finishReason": "STOP",
            }
        ]
    })
    config: types.GenerateContentConfigDict = {
        "tools": [{"function_declarations": gm.function_declarations(reg.schemas())}]
    }
    contents: list[types.ContentUnionDict] = [{"role": "user", "parts": [{"text": "2+5?"}]}]
    first = sdk.models.generate_content(model="gemini-test", contents=contents, config=config)
    calls = gm.calls_from_response(first)
    batch = await reg.run(calls)
    assert first.candidates is not None
    assert first.candidates[0].content is not None
    contents += [
        first.candidates[0].content,
        {"role": "user", "parts": gm.function_responses(calls, batch.results)},
    ]
    sdk.models.generate_content(model="gemini-test", contents=contents, config=config)
    [schema] = reg.schemas()
    native = types.FunctionDeclaration(
        name=schema.name,
        description=schema.description,
        parameters_json_schema=schema.to_dict()["parameters"],
    )
    native_config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[native])])
    sdk.models.generate_content(model="gemini-test", contents=contents, config=native_config)

    assert requests[0]["tools"] == requests[2]["tools"]
    assert requests[1]["contents"][-1] == {
        "role": "user",
        "parts": [{"functionResponse": {"id": "fc_1", "name": "add", "response": {"output": "7"}}}],
    }


# ---- follow-up parts: contexts, and images a function response leaves out ------------


def noted(text: str, *blocks: tr.Content) -> tr.ContextMessage:
    return tr.ContextMessage((tr.TextContent(text), *blocks), source="test")


CHART = tr.ToolCall(call_id="fc_1", name="plot")


def test_followup_parts_are_empty_when_the_function_response_holds_everything() -> None:
    assert gm.followup_parts([CHART], [tr.ToolResult((tr.TextContent("chart:"), PNG))]) == []


def test_followup_parts_carry_each_results_contexts_in_model_order() -> None:
    calls = [CHART, tr.ToolCall(call_id="fc_2", name="now")]
    results = [
        tr.ToolResult((PNG,), contexts=(noted("Axes are in metres."),)),
        tr.ToolResult((tr.TextContent("12:00"),), contexts=(noted("", PNG), noted("UTC.", GIF))),
    ]

    assert gm.followup_parts(calls, results) == [
        {"text": "Axes are in metres."},
        {"inline_data": {"mime_type": "image/png", "data": PNG.data}},
        {"text": "UTC."},
        {"text": "[image content]"},
    ]


def test_without_inline_images_the_images_come_in_the_followup_after_a_label() -> None:
    results = [tr.ToolResult((tr.TextContent("chart:"), PNG, GIF), contexts=(noted("Note."),))]

    assert gm.followup_parts([CHART], results, inline_images=False) == [
        {"text": "Image content of tool call fc_1 (plot):"},
        {"inline_data": {"mime_type": "image/png", "data": PNG.data}},
        {"text": "Note."},
    ]


def test_followup_parts_follow_the_function_responses_as_one_valid_user_turn() -> None:
    results = [tr.ToolResult((PNG,), contexts=(noted("Note.", PNG),))]
    parts = [*gm.function_responses([CHART], results, inline_images=False),
             *gm.followup_parts([CHART], results, inline_images=False)]

    content = types.Content.model_validate({"role": "user", "parts": parts})

    assert content.parts is not None
    assert [(p.function_response is not None, p.text, p.inline_data is not None)
            for p in content.parts] == [
        (True, None, False),
        (False, "Image content of tool call fc_1 (plot):", False),
        (False, None, True),
        (False, "Note.", False),
        (False, None, True),
    ]
    assert content.parts[2].inline_data is not None
    assert content.parts[2].inline_data.data == b"\x89PNG"


def test_followup_parts_need_one_result_per_call() -> None:
    with pytest.raises(ValueError, match=r"^got 1 calls and 0 results"):
        gm.followup_parts([CHART], [])


async def test_a_step_sends_deferred_contexts_in_the_function_response_turn() -> None:
    reg = tr.ToolRegistry()

    @reg.tool
    def now(ctx: tr.RunContext) -> str:
        """The time."""
        ctx.defer_context("Times are in UTC.")
        return "12:00"

    sdk, requests = answering({"candidates": [{"content": {
        "role": "model", "parts": [{"text": "Noon."}]}, "finishReason": "STOP"}]})
    reply = response(function_call("now", {}, "fc_1"))
    calls = gm.calls_from_response(reply)
    batch = await reg.run(calls)
    assert reply.candidates is not None
    assert reply.candidates[0].content is not None
    contents: list[types.ContentUnionDict] = [
        {"role": "user", "parts": [{"text": "Time?"}]},
        reply.candidates[0].content,
        {"role": "user", "parts": [*gm.function_responses(calls, batch.results),
                                   *gm.followup_parts(calls, batch.results)]},
    ]
    sdk.models.generate_content(model="gemini-test", contents=contents)

    assert requests[0]["contents"][-1] == {"role": "user", "parts": [
        {"functionResponse": {"id": "fc_1", "name": "now", "response": {"output": "12:00"}}},
        {"text": "Times are in UTC."},
    ]}


# ---- the module ---------------------------------------------------------------------


def test_the_docstring_examples_run() -> None:
    assert doctest.testmod(gm).failed == 0


def test_the_module_imports_and_maps_without_the_sdk_installed() -> None:
    code = (
        "import sys; sys.modules['google.genai'] = None; sys.modules['google'] = None\n"
        "from toolrail.adapters import gemini as gm\n"
        "print(gm.function_declarations([{'name': 'now'}])[0]['name'])\n"
    )
    output = python_output(code)

    assert output == "now\n"
