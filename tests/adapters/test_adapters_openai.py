"""toolrail.adapters.openai: Chat Completions both directions, the module, and follow-up
messages.

Spec: integrations.md, "Provider adapters". Strict mode: test_adapters_openai_strict.py;
the Responses API: test_adapters_openai_responses.py. Wire shapes are checked against
the real ``openai`` SDK: its response models are built with ``model_validate``, its
request ``TypedDict``\\ s are compared key by key, and whole requests go through a real
client whose transport is an ``httpx2.MockTransport`` (the SDK's HTTP client) (no
network).
"""

from __future__ import annotations

import doctest
import json
from typing import Any, cast

import httpx2
import pytest
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionContentPartParam,
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionToolParam,
    ChatCompletionUserMessageParam,
)
from openai.types.chat.chat_completion_message_custom_tool_call import (
    ChatCompletionMessageCustomToolCall,
    Custom,
)
from openai.types.chat.chat_completion_message_function_tool_call import Function
from openai.types.responses import (
    EasyInputMessage,
    ResponseInputItemParam,
)
from openai.types.shared_params import FunctionDefinition
from pydantic import TypeAdapter

import toolrail as tr
from helpers import (
    assert_a_sub_agents_calls_carry_the_parent_token_and_scope,
    python_output,
)
from openai_helpers import (
    PNG,
    SVG,
    chat_message,
    client,
    exactly,
    function_call,
    registry,
    response,
    schema,
    typed_dict_keys,
)
from toolrail.adapters import openai as oa

# ---- Chat Completions: tools out ----------------------------------------------------


def test_chat_tools_wraps_each_schema_as_a_function_tool() -> None:
    [tool] = oa.chat_tools([schema("now", {"type": "object"}, "The time.")])

    assert tool == {
        "type": "function",
        "function": {
            "name": "now",
            "description": "The time.",
            "parameters": {"type": "object"},
        },
    }


def test_chat_tools_takes_the_schemas_of_a_registry_in_order_as_plain_dicts() -> None:
    tools = oa.chat_tools(registry().schemas())

    assert [t["function"]["name"] for t in tools] == ["add", "plot"]
    parameters = tools[0]["function"].get("parameters")
    assert type(parameters) is dict
    assert parameters["properties"] == {
        "a": {"type": "integer"},
        "b": {"type": "integer", "default": 5},
    }
    assert json.loads(json.dumps(tools)) == tools


def test_chat_tools_accepts_dicts_of_the_tool_schema_shape() -> None:
    as_dict = {"name": "now", "description": "The time.", "parameters": {"type": "object"}}

    assert oa.chat_tools([as_dict]) == oa.chat_tools(
        [schema("now", {"type": "object"}, "The time.")]
    )


def test_a_dict_schema_may_leave_out_description_and_parameters() -> None:
    [tool] = oa.chat_tools([{"name": "ping"}])

    assert tool["function"] == {
        "name": "ping",
        "description": "",
        "parameters": {"type": "object", "properties": {}},
    }


def test_a_dict_schema_without_a_name_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=exactly("a tool schema needs a str 'name', got None")):
        oa.chat_tools([{"description": "nameless"}])


def test_chat_tools_returns_fresh_dicts_that_leave_the_schema_untouched() -> None:
    source = {"name": "now", "parameters": {"type": "object", "properties": {}}}
    [tool] = oa.chat_tools([source])
    tool["function"]["parameters"]["properties"]["x"] = {"type": "string"}  # type: ignore[index]

    assert source == {"name": "now", "parameters": {"type": "object", "properties": {}}}


def test_chat_tools_keys_are_those_of_the_sdk_tool_param() -> None:
    [tool] = oa.chat_tools(registry().schemas()[:1], strict=True)

    assert set(tool) <= typed_dict_keys(ChatCompletionToolParam)
    assert set(tool["function"]) <= typed_dict_keys(FunctionDefinition)
    assert ChatCompletionToolParam.__required_keys__ <= set(tool)


# ---- Chat Completions: calls in -----------------------------------------------------


def test_calls_from_chat_reads_function_tool_calls_in_order() -> None:
    message = chat_message(("call_1", "add", '{"a": 1, "b": 2}'), ("call_2", "add", '{"a": 3}'))

    assert oa.calls_from_chat(message) == [
        tr.ToolCall(call_id="call_1", name="add", arguments={"a": 1, "b": 2}),
        tr.ToolCall(call_id="call_2", name="add", arguments={"a": 3}),
    ]


def test_calls_from_chat_reads_a_plain_dict_message_the_same_way() -> None:
    message = {
        "role": "assistant",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
        ],
    }

    assert oa.calls_from_chat(message) == [tr.ToolCall(call_id="call_1", name="add")]


def test_a_message_without_tool_calls_has_no_calls() -> None:
    assert oa.calls_from_chat(ChatCompletionMessage(role="assistant", content="Hi.")) == []
    assert oa.calls_from_chat({"role": "assistant", "content": "Hi."}) == []


@pytest.mark.parametrize(("raw", "arguments"), [("", {}), (None, {}), ("[1]", [1])])
def test_empty_argument_text_is_an_empty_object_and_json_is_parsed(
    raw: str | None, arguments: Any
) -> None:
    [call] = oa.calls_from_chat(chat_message(("call_1", "add", raw)))

    assert call.arguments == arguments


@pytest.mark.parametrize("raw", ['{"a": 1', "NaN", '{"a": Infinity}', "add 1 and 2"])
def test_argument_text_that_is_not_json_is_kept_as_the_raw_string(raw: str) -> None:
    [call] = oa.calls_from_chat(chat_message(("call_1", "add", raw)))

    assert call.arguments == raw


async def test_a_call_with_arguments_that_are_not_json_executes_to_an_error_result() -> None:
    [call] = oa.calls_from_chat(chat_message(("call_1", "add", '{"a": 1')))

    result = await registry().execute(call)

    assert result.is_error
    assert result.error is not None
    assert result.error.code == "INVALID_ARGS"
    assert oa.chat_messages([call], [result]) == [
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": 'Error: invalid arguments: "arguments" must be an object',
        }
    ]


async def test_a_call_with_empty_argument_text_runs_with_no_arguments() -> None:
    reg = tr.ToolRegistry()

    @reg.tool
    def now() -> str:
        """The time."""
        return "noon"

    [call] = oa.calls_from_chat(chat_message(("call_1", "now", "")))

    assert (await reg.execute(call)).text == "noon"


def test_custom_tool_calls_are_left_to_the_caller() -> None:
    message = ChatCompletionMessage(
        role="assistant",
        tool_calls=[
            ChatCompletionMessageCustomToolCall(
                id="call_0", type="custom", custom=Custom(name="grammar", input="x")
            ),
            ChatCompletionMessageFunctionToolCall(
                id="call_1", type="function", function=Function(name="add", arguments="{}")
            ),
        ],
    )

    assert [c.call_id for c in oa.calls_from_chat(message)] == ["call_1"]


def test_calls_from_chat_binds_every_call_to_the_given_scope() -> None:
    message = chat_message(("call_1", "add", "{}"), ("call_2", "add", "{}"))

    assert {c.scope for c in oa.calls_from_chat(message, scope="agent-7")} == {"agent-7"}


async def test_a_sub_agents_chat_calls_carry_the_parent_token_and_scope() -> None:
    sub_reply = chat_message(("call_9", "add", '{"a": 1}'),
                             ("call_10", "add", '{"a": 2, "b": null}'))

    # With the schemas the null b is absent, so the sums are 1+5 and 2+5: "6 7".
    await assert_a_sub_agents_calls_carry_the_parent_token_and_scope(
        lambda registry, parent: oa.calls_from_chat(
            sub_reply, parent=parent, scope="sub", schemas=registry.schemas("sub")
        )
    )


def test_calls_from_chat_and_from_response_leave_parent_none_by_default() -> None:
    token = tr.ExecutionToken()
    chat = chat_message(("call_1", "add", "{}"))
    responses = response(function_call("call_1", "add", "{}"))

    assert [c.parent for c in oa.calls_from_chat(chat)] == [None]
    assert [c.parent for c in oa.calls_from_response(responses)] == [None]
    assert oa.calls_from_chat(chat, parent=token, scope=3) == [
        tr.ToolCall(call_id="call_1", name="add", arguments={}, scope=3, parent=token)
    ]


async def test_a_sub_agents_response_calls_carry_the_parent_token_and_scope() -> None:
    sub_reply = response(function_call("call_9", "add", '{"a": 1}'),
                         function_call("call_10", "add", '{"a": 2}'))

    await assert_a_sub_agents_calls_carry_the_parent_token_and_scope(
        lambda registry, parent: oa.calls_from_response(sub_reply, parent=parent, scope="sub")
    )


def test_calls_keep_arguments_that_a_compatible_server_sent_already_parsed() -> None:
    message = {"tool_calls": [{"id": "c", "function": {"name": "add", "arguments": {"a": 1}}}]}

    assert oa.calls_from_chat(message)[0].arguments == {"a": 1}


# ---- Chat Completions: results out --------------------------------------------------


def test_chat_messages_is_one_tool_message_per_call_in_order() -> None:
    calls = [tr.ToolCall(call_id="c1", name="add"), tr.ToolCall(call_id="c2", name="add")]
    results = [tr.ToolResult((tr.TextContent("3"),)), tr.ToolResult((tr.TextContent("7"),))]

    assert oa.chat_messages(calls, results) == [
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {"role": "tool", "tool_call_id": "c2", "content": "7"},
    ]


def test_chat_message_content_joins_the_blocks_and_writes_a_placeholder_per_image() -> None:
    result = tr.ToolResult((tr.TextContent("chart:"), PNG, tr.TextContent("done")))

    [message] = oa.chat_messages([tr.ToolCall(call_id="c1", name="plot")], [result])

    assert message["content"] == "chart:\n[image content]\ndone"


def test_an_empty_result_is_a_tool_message_with_empty_content() -> None:
    [message] = oa.chat_messages([tr.ToolCall(call_id="c1", name="t")], [tr.ToolResult(())])

    assert message == {"role": "tool", "tool_call_id": "c1", "content": ""}


def test_an_error_result_is_its_error_text_for_openai_has_no_error_flag() -> None:
    error = tr.ErrorInfo("boom", code="TOOL_ERROR")
    result = tr.ToolResult((tr.TextContent("Error: boom"),), is_error=True, error=error)

    [message] = oa.chat_messages([tr.ToolCall(call_id="c1", name="t")], [result])

    assert message["content"] == "Error: boom"


def test_an_error_result_that_shows_nothing_says_its_error_message() -> None:
    error = tr.ErrorInfo("denied", code="DENIED")
    result = tr.ToolResult((tr.TextContent(""),), is_error=True, error=error)

    [message] = oa.chat_messages([tr.ToolCall(call_id="c1", name="t")], [result])

    assert message["content"] == "Error: denied"


def test_chat_messages_needs_exactly_one_result_per_call() -> None:
    calls = [tr.ToolCall(call_id="c1", name="t"), tr.ToolCall(call_id="c2", name="t")]

    with pytest.raises(
        ValueError,
        match=exactly("got 2 calls and 1 results; each call needs exactly one result"),
    ):
        oa.chat_messages(calls, [tr.ToolResult(())])


def test_chat_messages_keys_are_those_of_the_sdk_tool_message_param() -> None:
    [message] = oa.chat_messages([tr.ToolCall(call_id="c1", name="t")], [tr.ToolResult(())])

    assert set(message) == typed_dict_keys(ChatCompletionToolMessageParam)


# ---- Chat Completions: through the real client --------------------------------------


async def test_a_chat_step_round_trips_through_the_sdk_client() -> None:
    reg = registry()
    requests: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        requests.append(json.loads(request.content))
        tool_call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
        body = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-test",
            "choices": [choice],
        }
        return httpx2.Response(200, json=body)

    sdk = client(handler)
    tools = oa.chat_tools(reg.schemas(), strict=True)
    completion = sdk.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "2+3?"}], tools=tools
    )
    assert isinstance(completion, ChatCompletion)
    message = completion.choices[0].message
    calls = oa.calls_from_chat(message, schemas=reg.schemas())
    batch = await reg.run(calls)
    sdk.chat.completions.create(
        model="gpt-test",
        messages=[
            {"role": "user", "content": "2+3?"},
            cast(ChatCompletionMessageParam, message.model_dump(exclude_none=True)),
            *oa.chat_messages(calls, batch.results),
        ],
        tools=tools,
    )

    assert requests[0]["tools"] == tools
    assert requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "5"}


# ---- the module ---------------------------------------------------------------------


def test_the_docstring_examples_run() -> None:
    assert doctest.testmod(oa).failed == 0


def test_the_module_imports_and_maps_without_the_sdk_installed() -> None:
    code = (
        "import sys; sys.modules['openai'] = None\n"
        "from toolrail.adapters import openai as oa\n"
        "print(oa.chat_tools([{'name': 'now'}])[0]['type'])\n"
        "print(oa.calls_from_chat({'tool_calls': [{'id': 'c', 'function': {'name': 'n'}}]}))\n"
    )
    output = python_output(code)

    assert output.splitlines()[0] == "function"


def test_calls_from_chat_refuses_a_whole_completion_instead_of_its_message() -> None:
    as_dict: dict[str, Any] = {"choices": [{"message": {"tool_calls": []}}]}

    with pytest.raises(
        TypeError,
        match=exactly("calls_from_chat takes a message: pass completion.choices[0].message"),
    ):
        oa.calls_from_chat(as_dict)


# ---- follow-up messages: contexts, and images a tool message cannot hold -------------

GIF = tr.ImageContent(data="R0lGOA==", mime_type="image/gif")


def noted(text: str, *blocks: tr.Content) -> tr.ContextMessage:
    return tr.ContextMessage((tr.TextContent(text), *blocks), source="test")


FOLLOWUP_CALLS = [tr.ToolCall(call_id="call_1", name="plot"),
                  tr.ToolCall(call_id="call_2", name="now")]


FOLLOWUP_RESULTS = [
    tr.ToolResult((tr.TextContent("chart:"), PNG, SVG), contexts=(noted("Axes are in metres."),)),
    tr.ToolResult((tr.TextContent("12:00"),),
                  contexts=(noted("", GIF), noted("Times are in UTC.", SVG))),
]


def test_chat_followup_is_empty_when_every_result_fits_its_tool_message() -> None:
    calls = [tr.ToolCall(call_id="call_1", name="add")]

    assert oa.chat_followup(calls, [tr.ToolResult((tr.TextContent("5"),))]) == []
    assert oa.chat_followup([], []) == []


def test_chat_followup_carries_images_then_contexts_of_each_call_in_model_order() -> None:
    followup = oa.chat_followup(FOLLOWUP_CALLS, FOLLOWUP_RESULTS)

    assert followup == [{"role": "user", "content": [
        {"type": "text", "text": "Image content of tool call call_1 (plot):"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG.data}"}},
        {"type": "text", "text": "Axes are in metres."},
        {"type": "image_url", "image_url": {"url": f"data:image/gif;base64,{GIF.data}"}},
        {"type": "text", "text": "Times are in UTC."},
        {"type": "text", "text": "[image content]"},
    ]}]
    assert [m["content"] for m in oa.chat_messages(FOLLOWUP_CALLS, FOLLOWUP_RESULTS)] == [
        "chart:\n[image content]\n[image content]", "12:00"]


def test_chat_followup_moves_the_images_of_an_error_result_too() -> None:
    failed = tr.ToolResult((tr.TextContent("Error: blurry"), PNG), is_error=True,
                           error=tr.ErrorInfo("blurry"))

    [message] = oa.chat_followup(FOLLOWUP_CALLS[:1], [failed])

    parts = cast(list[dict[str, Any]], message["content"])
    assert [part["type"] for part in parts] == ["text", "image_url"]


def test_chat_followup_validates_as_the_sdks_user_message_param() -> None:
    [message] = oa.chat_followup(FOLLOWUP_CALLS, FOLLOWUP_RESULTS)

    assert {"role", "content"} == set(message) <= typed_dict_keys(ChatCompletionUserMessageParam)
    parts = TypeAdapter(list[ChatCompletionContentPartParam])
    assert parts.validate_python(message["content"]) == message["content"]


def test_followups_need_one_result_per_call() -> None:
    message = "got 2 calls and 1 results; each call needs exactly one result"
    with pytest.raises(ValueError, match=exactly(message)):
        oa.chat_followup(FOLLOWUP_CALLS, FOLLOWUP_RESULTS[:1])
    with pytest.raises(ValueError, match=exactly(message)):
        oa.responses_followup(FOLLOWUP_CALLS, FOLLOWUP_RESULTS[:1])


def test_responses_followup_carries_only_contexts_for_an_output_holds_images() -> None:
    followup = oa.responses_followup(FOLLOWUP_CALLS, FOLLOWUP_RESULTS)

    assert followup == [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Axes are in metres."},
        {"type": "input_image", "image_url": f"data:image/gif;base64,{GIF.data}",
         "detail": "auto"},
        {"type": "input_text", "text": "Times are in UTC."},
        {"type": "input_text", "text": "[image content]"},
    ]}]
    assert oa.responses_followup(FOLLOWUP_CALLS[:1], [tr.ToolResult((PNG,))]) == []


def test_responses_followup_validates_as_the_sdks_input_item() -> None:
    [item] = oa.responses_followup(FOLLOWUP_CALLS, FOLLOWUP_RESULTS)

    assert TypeAdapter(ResponseInputItemParam).validate_python(item) == item
    assert EasyInputMessage.model_validate(item).model_dump(exclude_none=True) == item


async def test_a_chat_step_sends_deferred_contexts_and_images_after_the_tool_messages() -> None:
    reg = tr.ToolRegistry()

    @reg.tool
    def snapshot(ctx: tr.RunContext) -> tr.ToolOutput:
        """Take a screenshot."""
        ctx.defer_context("The screen is 800x600.")
        return tr.ToolOutput(value="taken", content=[tr.TextContent("taken"), PNG])

    requests: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        requests.append(json.loads(request.content))
        message = {"role": "assistant", "content": "Done."}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return httpx2.Response(200, json={"id": "c", "object": "chat.completion", "created": 0,
                                          "model": "gpt-test", "choices": [choice]})

    assistant = chat_message(("call_1", "snapshot", "{}"))
    calls = oa.calls_from_chat(assistant)
    batch = await reg.run(calls)
    client(handler).chat.completions.create(
        model="gpt-test",
        messages=[
            {"role": "user", "content": "Look."},
            cast(ChatCompletionMessageParam, assistant.model_dump(exclude_none=True)),
            *oa.chat_messages(calls, batch.results),
            *oa.chat_followup(calls, batch.results),
        ],
    )

    assert requests[0]["messages"][2:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "taken\n[image content]"},
        {"role": "user", "content": [
            {"type": "text", "text": "Image content of tool call call_1 (snapshot):"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG.data}"}},
            {"type": "text", "text": "The screen is 800x600."},
        ]},
    ]
