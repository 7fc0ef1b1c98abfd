"""toolrail.adapters.openai: the Responses API, both directions (spec: integrations.md,
"Provider adapters"). Wire shapes are checked against the real ``openai`` SDK.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from openai.types.responses import (
    FunctionToolParam,
)
from openai.types.responses.response_input_item_param import FunctionCallOutput

import toolrail as tr
from openai_helpers import (
    PNG,
    SVG,
    client,
    function_call,
    registry,
    response,
    schema,
    typed_dict_keys,
)
from toolrail.adapters import openai as oa

# ---- Responses ----------------------------------------------------------------------


def test_responses_tools_is_a_flat_function_tool_that_always_says_strict() -> None:
    tools = oa.responses_tools([schema("now", {"type": "object"}, "The time.")])

    assert tools == [
        {
            "type": "function",
            "name": "now",
            "description": "The time.",
            "parameters": {"type": "object"},
            "strict": False,
        }
    ]
    assert (
        FunctionToolParam.__required_keys__ <= set(tools[0]) <= typed_dict_keys(FunctionToolParam)
    )


def test_strict_responses_tools_carry_the_rewritten_schema() -> None:
    schemas = registry().schemas()

    [tool, _] = oa.responses_tools(schemas, strict=True)
    [chat_tool, _] = oa.chat_tools(schemas, strict=True)

    assert tool["strict"] is True
    assert tool["parameters"] == chat_tool["function"].get("parameters")


def test_calls_from_response_reads_the_function_call_items_by_call_id() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    text = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Adding.", "annotations": []}],
    }
    sdk_response = response(
        reasoning,
        text,
        function_call("call_1", "add", '{"a": 1}'),
        function_call("call_2", "add", ""),
    )

    assert oa.calls_from_response(sdk_response, scope="s") == [
        tr.ToolCall(call_id="call_1", name="add", arguments={"a": 1}, scope="s"),
        tr.ToolCall(call_id="call_2", name="add", arguments={}, scope="s"),
    ]


def test_calls_from_response_reads_a_plain_dict_and_keeps_bad_json_as_text() -> None:
    as_dict = {"output": [function_call("call_1", "add", "{'a': 1}")]}

    [call] = oa.calls_from_response(as_dict)

    assert call.arguments == "{'a': 1}"


def test_calls_from_response_restores_absent_properties_given_the_schemas() -> None:
    sdk_response = response(function_call("call_1", "add", '{"a": 1, "b": null}'))

    [call] = oa.calls_from_response(sdk_response, schemas=registry().schemas())

    assert call.arguments == {"a": 1}


def test_responses_items_is_one_function_call_output_per_call() -> None:
    calls = [tr.ToolCall(call_id="call_1", name="add"), tr.ToolCall(call_id="call_2", name="add")]
    error = tr.ErrorInfo("boom")
    results = [
        tr.ToolResult((tr.TextContent("3"), tr.TextContent("ok"))),
        tr.ToolResult((tr.TextContent("Error: boom"),), is_error=True, error=error),
    ]

    items = oa.responses_items(calls, results)

    assert items == [
        {"type": "function_call_output", "call_id": "call_1", "output": "3\nok"},
        {"type": "function_call_output", "call_id": "call_2", "output": "Error: boom"},
    ]
    assert set(items[0]) <= typed_dict_keys(FunctionCallOutput)


def test_an_empty_result_is_an_empty_output_string() -> None:
    [item] = oa.responses_items([tr.ToolCall(call_id="c", name="t")], [tr.ToolResult(())])

    assert item["output"] == ""


def test_a_result_with_an_image_is_a_list_of_input_text_and_input_image_parts() -> None:
    result = tr.ToolResult((tr.TextContent("chart:"), PNG, tr.TextContent(""), SVG))

    [item] = oa.responses_items([tr.ToolCall(call_id="c", name="plot")], [result])

    assert item["output"] == [
        {"type": "input_text", "text": "chart:"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
        {"type": "input_text", "text": "[image content]"},
    ]


def test_an_image_openai_cannot_read_is_a_placeholder_in_the_output_text() -> None:
    result = tr.ToolResult((tr.TextContent("icon:"), SVG))

    [item] = oa.responses_items([tr.ToolCall(call_id="c", name="plot")], [result])

    assert item["output"] == "icon:\n[image content]"


def test_responses_items_needs_exactly_one_result_per_call() -> None:
    with pytest.raises(ValueError, match="got 0 calls and 1 results"):
        oa.responses_items([], [tr.ToolResult(())])


async def test_a_responses_step_round_trips_through_the_sdk_client() -> None:
    reg = registry()
    requests: list[dict[str, Any]] = []
    output = [function_call("call_1", "add", '{"a": 4}')]

    def handler(request: httpx2.Request) -> httpx2.Response:
        requests.append(json.loads(request.content))
        return httpx2.Response(200, json=response(*output).model_dump(mode="json"))

    sdk = client(handler)
    tools = oa.responses_tools(reg.schemas(), strict=True)
    first = sdk.responses.create(model="gpt-test", input="4+5?", tools=tools)
    calls = oa.calls_from_response(first, schemas=reg.schemas())
    batch = await reg.run(calls)
    sdk.responses.create(
        model="gpt-test",
        previous_response_id=first.id,
        input=[*oa.responses_items(calls, batch.results)],
        tools=tools,
    )

    assert requests[0]["tools"] == tools
    assert requests[1]["input"] == [
        {"type": "function_call_output", "call_id": "call_1", "output": "9"}
    ]
