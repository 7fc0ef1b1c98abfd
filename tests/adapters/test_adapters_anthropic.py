"""toolrail.adapters.anthropic: Messages tools, tool_use blocks and tool_result blocks.

Spec: integrations.md, "Provider adapters". Wire shapes are checked against the real
``anthropic`` SDK: ``Message`` objects built with ``model_validate``, its request
``TypedDict``\\ s compared key by key, and whole requests sent through a real client
whose transport is an ``httpx2.MockTransport`` (the SDK's HTTP client; no network).
"""

from __future__ import annotations

import doctest
import json
from typing import Any, cast, get_type_hints

import anthropic
import httpx2
import pytest
from anthropic.types import (
    ContentBlockParam,
    ImageBlockParam,
    Message,
    MessageParam,
    TextBlockParam,
    ToolParam,
    ToolResultBlockParam,
)
from pydantic import TypeAdapter

import toolrail as tr
from helpers import (
    ADD_PARAMETERS,
    adder_registry,
    assert_a_sub_agents_calls_carry_the_parent_token_and_scope,
    python_output,
)
from toolrail.adapters import anthropic as an

PNG = tr.ImageContent(data="iVBORw0KGgo=", mime_type="image/png")
BMP = tr.ImageContent(data="Qk0=", mime_type="image/bmp")
CALL = tr.ToolCall(call_id="toolu_1", name="t")


def message(*content: dict[str, Any]) -> Message:
    return Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": list(content),
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )


def tool_use(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def answering(reply: Message) -> tuple[anthropic.Anthropic, list[dict[str, Any]]]:
    """A real SDK client whose transport answers every request with ``reply``, and the
    list it notes each request's JSON body in."""
    requests: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        requests.append(json.loads(request.content))
        return httpx2.Response(200, json=reply.model_dump(mode="json"))

    sdk = anthropic.Anthropic(
        api_key="test",
        base_url="https://anthropic.test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        max_retries=0,
    )
    return sdk, requests


def keys(cls: type) -> set[str]:
    return set(get_type_hints(cls))


def one_block(result: tr.ToolResult) -> ToolResultBlockParam:
    [block] = an.tool_result_blocks([CALL], [result])
    return block


# ---- tools out ----------------------------------------------------------------------


def test_tools_maps_each_schema_to_name_description_and_input_schema() -> None:
    [tool] = an.tools(adder_registry().schemas())

    assert tool == {
        "name": "add",
        "description": "Add two numbers.",
        "input_schema": ADD_PARAMETERS,
    }
    assert ToolParam.__required_keys__ <= set(tool) <= keys(ToolParam)


def test_tools_accepts_dicts_and_returns_fresh_json_ready_dicts() -> None:
    source = {"name": "now", "description": "The time.", "parameters": {"type": "object"}}

    [tool] = an.tools([source])
    cast(dict[str, Any], tool["input_schema"])["required"] = ["x"]

    assert source["parameters"] == {"type": "object"}
    assert json.loads(json.dumps(tool)) == tool


# ---- calls in -----------------------------------------------------------------------


def test_calls_from_message_reads_the_tool_use_blocks_in_order() -> None:
    sdk_message = message(
        {"type": "text", "text": "Let me add."},
        tool_use("toolu_1", "add", {"a": 1, "b": 2}),
        tool_use("toolu_2", "add", {}),
    )

    assert an.calls_from_message(sdk_message, scope="agent") == [
        tr.ToolCall(call_id="toolu_1", name="add", arguments={"a": 1, "b": 2}, scope="agent"),
        tr.ToolCall(call_id="toolu_2", name="add", arguments={}, scope="agent"),
    ]


async def test_a_sub_agents_tool_use_blocks_carry_the_parent_token_and_scope() -> None:
    sub_reply = message(tool_use("toolu_9", "add", {"a": 1}), tool_use("toolu_10", "add", {"a": 2}))

    await assert_a_sub_agents_calls_carry_the_parent_token_and_scope(
        lambda registry, parent: an.calls_from_message(sub_reply, parent=parent, scope="sub")
    )
    assert [c.parent for c in an.calls_from_message(sub_reply)] == [None, None]


def test_calls_from_message_reads_a_plain_dict_message_the_same_way() -> None:
    as_dict = {"role": "assistant", "content": [tool_use("toolu_1", "add", {"a": 1})]}

    assert an.calls_from_message(as_dict) == [
        tr.ToolCall(call_id="toolu_1", name="add", arguments={"a": 1})
    ]


def test_a_message_without_tool_use_has_no_calls() -> None:
    assert an.calls_from_message(message({"type": "text", "text": "Done."})) == []


def test_a_dict_message_with_plain_text_content_has_no_calls() -> None:
    assert an.calls_from_message({"role": "assistant", "content": "Done."}) == []


def test_input_that_is_not_an_object_is_kept_as_it_is() -> None:
    as_dict = {"content": [tool_use("toolu_1", "add", '{"a": 1'), tool_use("toolu_2", "add", [1])]}

    assert [c.arguments for c in an.calls_from_message(as_dict)] == ['{"a": 1', [1]]


def test_a_tool_use_block_without_input_has_empty_arguments() -> None:
    as_dict = {"content": [{"type": "tool_use", "id": "toolu_1", "name": "add"}]}

    assert an.calls_from_message(as_dict)[0].arguments == {}


async def test_a_call_whose_input_is_not_an_object_executes_to_an_error_block() -> None:
    [call] = an.calls_from_message({"content": [tool_use("toolu_1", "add", "1 + 2")]})

    result = await adder_registry().execute(call)

    assert result.error is not None
    assert result.error.code == "INVALID_ARGS"
    assert an.tool_result_blocks([call], [result]) == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": [
                {"type": "text", "text": 'Error: invalid arguments: "arguments" must be an object'}
            ],
            "is_error": True,
        }
    ]


# ---- results out --------------------------------------------------------------------


def test_a_success_is_a_tool_result_of_text_blocks_with_is_error_false() -> None:
    block = one_block(tr.ToolResult((tr.TextContent("3"), tr.TextContent("ok"))))

    assert block == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "text", "text": "3"}, {"type": "text", "text": "ok"}],
        "is_error": False,
    }
    assert ToolResultBlockParam.__required_keys__ <= set(block) <= keys(ToolResultBlockParam)


def test_an_error_result_sets_is_error() -> None:
    error = tr.ErrorInfo("boom", code="TOOL_ERROR")

    block = one_block(tr.ToolResult((tr.TextContent("Error: boom"),), is_error=True, error=error))

    assert block["is_error"] is True
    assert block.get("content") == [{"type": "text", "text": "Error: boom"}]


def test_an_image_is_an_image_block_with_a_base64_source() -> None:
    block = one_block(tr.ToolResult((tr.TextContent("chart:"), PNG)))

    [text, image] = cast(list[dict[str, Any]], block.get("content"))
    assert image == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    assert set(image) <= keys(ImageBlockParam)
    assert set(text) <= keys(TextBlockParam)


def test_an_image_claude_cannot_read_is_a_placeholder_text_block() -> None:
    block = one_block(tr.ToolResult((BMP,)))

    assert block.get("content") == [{"type": "text", "text": "[image content]"}]


def test_an_empty_result_is_a_tool_result_with_no_content_blocks() -> None:
    assert one_block(tr.ToolResult(())).get("content") == []


def test_empty_text_blocks_are_left_out_for_the_api_rejects_them() -> None:
    block = one_block(tr.ToolResult((tr.TextContent(""), tr.TextContent("a"), tr.TextContent(""))))

    assert block.get("content") == [{"type": "text", "text": "a"}]


def test_an_error_with_nothing_to_show_says_its_message_for_the_api_rejects_it_empty() -> None:
    error = tr.ErrorInfo("blocked by policy", code="BLOCKED")

    block = one_block(tr.ToolResult((tr.TextContent(""),), is_error=True, error=error))

    assert block.get("content") == [{"type": "text", "text": "Error: blocked by policy"}]
    assert block.get("is_error") is True


def test_tool_result_blocks_needs_exactly_one_result_per_call() -> None:
    with pytest.raises(ValueError, match=r"^got 1 calls and 2 results; each call needs exactly"):
        an.tool_result_blocks([CALL], [tr.ToolResult(()), tr.ToolResult(())])


def test_tool_result_blocks_rejects_what_is_not_a_call_or_a_result() -> None:
    with pytest.raises(TypeError, match=r"^expected a ToolResult, got dict\Z"):
        an.tool_result_blocks([CALL], [{"content": []}])  # type: ignore[list-item]


# ---- through the real client --------------------------------------------------------


async def test_a_step_round_trips_through_the_sdk_client() -> None:
    reg = adder_registry()
    reply = message({"type": "text", "text": "Adding."}, tool_use("toolu_1", "add", {"a": 2}))
    sdk, requests = answering(reply)
    tools = an.tools(reg.schemas())
    history: list[MessageParam] = [{"role": "user", "content": "2+5?"}]
    first = sdk.messages.create(model="claude-test", max_tokens=64, messages=history, tools=tools)
    calls = an.calls_from_message(first)
    batch = await reg.run(calls)
    history += [
        {"role": "assistant", "content": cast(Any, first.model_dump(exclude_none=True)["content"])},
        {"role": "user", "content": [*an.tool_result_blocks(calls, batch.results)]},
    ]
    sdk.messages.create(model="claude-test", max_tokens=64, messages=history, tools=tools)

    assert requests[0]["tools"] == tools
    assert requests[1]["messages"][-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": "7"}],
                "is_error": False,
            }
        ],
    }


# ---- follow-up blocks: the results' contexts ------------------------------------------


def noted(text: str, *blocks: tr.Content) -> tr.ContextMessage:
    return tr.ContextMessage((tr.TextContent(text), *blocks), source="test")


def test_followup_blocks_are_empty_without_contexts_for_a_tool_result_holds_images() -> None:
    assert an.followup_blocks([CALL], [tr.ToolResult((tr.TextContent("chart:"), PNG))]) == []


def test_followup_blocks_carry_each_results_contexts_in_model_order() -> None:
    calls = [CALL, tr.ToolCall(call_id="toolu_2", name="u")]
    results = [
        tr.ToolResult((tr.TextContent("a"),), contexts=(noted("first"), noted("", PNG))),
        tr.ToolResult((tr.TextContent("b"),), contexts=(noted("second", BMP),)),
    ]

    assert an.followup_blocks(calls, results) == [
        {"type": "text", "text": "first"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": PNG.data}},
        {"type": "text", "text": "second"},
        {"type": "text", "text": "[image content]"},
    ]


def test_followup_blocks_validate_as_the_sdks_content_block_params() -> None:
    result = tr.ToolResult((tr.TextContent("a"),), contexts=(noted("note", PNG, BMP),))
    blocks = an.followup_blocks([CALL], [result])

    assert TypeAdapter(list[ContentBlockParam]).validate_python(blocks) == blocks
    assert [block["type"] for block in blocks] == ["text", "image", "text"]


def test_followup_blocks_need_one_result_per_call() -> None:
    with pytest.raises(ValueError, match=r"^got 1 calls and 0 results"):
        an.followup_blocks([CALL], [])


async def test_a_step_sends_deferred_contexts_after_the_tool_results() -> None:
    reg = tr.ToolRegistry()

    @reg.tool
    def now(ctx: tr.RunContext) -> str:
        """The time."""
        ctx.defer_context("Times are in UTC.")
        return "12:00"

    sdk, requests = answering(message({"type": "text", "text": "Noon."}))
    assistant = message(tool_use("toolu_1", "now", {}))
    calls = an.calls_from_message(assistant)
    batch = await reg.run(calls)
    sdk.messages.create(model="claude-test", max_tokens=64, messages=[
        {"role": "user", "content": "Time?"},
        {"role": "assistant",
         "content": cast(Any, assistant.model_dump(exclude_none=True)["content"])},
        {"role": "user", "content": [*an.tool_result_blocks(calls, batch.results),
                                     *an.followup_blocks(calls, batch.results)]},
    ])

    assert requests[0]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1",
         "content": [{"type": "text", "text": "12:00"}], "is_error": False},
        {"type": "text", "text": "Times are in UTC."},
    ]


# ---- the module ---------------------------------------------------------------------


def test_the_docstring_examples_run() -> None:
    assert doctest.testmod(an).failed == 0


def test_the_module_imports_and_maps_without_the_sdk_installed() -> None:
    code = (
        "import sys; sys.modules['anthropic'] = None\n"
        "from toolrail.adapters import anthropic as an\n"
        "print(an.tools([{'name': 'now'}])[0]['name'])\n"
    )
    output = python_output(code)

    assert output == "now\n"
