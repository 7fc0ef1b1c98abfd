"""Tool names each provider accepts: out through every adapter, and back to the registry.

Spec: issue 25, item 6; the rule is in ``toolrail.adapters``' docstring ("Tool names").
The registry takes up to 128 characters with dots; OpenAI and Anthropic reject a whole
request naming a tool outside ``^[a-zA-Z0-9_-]{1,64}$``, Gemini one outside
``^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$``. Every round trip goes through the SDK's own
request and response types.
"""

from __future__ import annotations

import doctest
import random
import re
from typing import Any

from anthropic.types import Message, ToolParam
from google.genai import types
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessage, ChatCompletionToolParam
from openai.types.responses import FunctionToolParam, Response
from pydantic import TypeAdapter

import toolrail as tr
from helpers import raw_tool
from toolrail.adapters import _names, portable_names
from toolrail.adapters import anthropic as an
from toolrail.adapters import gemini as gm
from toolrail.adapters import openai as oa

OPENAI = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # Anthropic's too
GEMINI = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$")
PORTABLE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$")

LONG = "x" * 128
TWIN_1, TWIN_2 = "p" * 64 + ".one", "p" * 64 + ".two"  # one 64-character prefix
NAMES = ["now", "github.search", "a.b", "a_b", LONG, TWIN_1, TWIN_2, "3d", "-dash"]


def names_registry() -> tr.ToolRegistry:
    registry = tr.ToolRegistry()
    for name in NAMES:
        registry.register(raw_tool(name))
    return registry


def registry_names(calls: list[tr.ToolCall]) -> list[str]:
    return [call.name for call in calls]


async def echoed(registry: tr.ToolRegistry, calls: list[tr.ToolCall]) -> list[str]:
    """Each call's result text (the echo of its arguments), all calls run."""
    batch = await registry.run(calls)
    assert [result.is_error for result in batch.results] == [False] * len(calls)
    return [result.text for result in batch.results]


# ---- the rule -----------------------------------------------------------------------


def test_names_every_provider_accepts_go_out_unchanged() -> None:
    names = ["now", "read_file", "a-b", "_x", "A" * 64]

    assert _names.wire_names(names, _names.OPENAI) == {}
    assert _names.wire_names([*names, "github.search", "a:b"], _names.GEMINI) == {}
    assert portable_names(names) == {name: name for name in names}


def test_a_rejected_name_has_its_rejected_characters_replaced_when_that_is_free() -> None:
    assert _names.wire_names(["github.search"], _names.OPENAI) == {"github.search": "github_search"}
    assert _names.wire_names(["3d", "-x", "9.a"], _names.GEMINI) == {
        "3d": "_3d", "-x": "_-x", "9.a": "_9.a",
    }
    assert portable_names(["3d.x"]) == {"3d.x": "_3d_x"}


def test_names_that_collide_after_replacing_get_a_stable_hash_suffix() -> None:
    wire = portable_names(["a.b", "a_b", "a-b"])

    assert wire["a_b"] == "a_b"
    assert wire["a-b"] == "a-b"
    assert re.fullmatch(r"a_b_[0-9a-f]{8}", wire["a.b"])
    both = portable_names(["x.y", "x:y"])  # neither kept: both suffixed, neither preferred
    assert all(re.fullmatch(r"x_y_[0-9a-f]{8}", out) for out in both.values())
    assert len(set(both.values())) == 2


def test_a_name_longer_than_64_is_cut_to_55_characters_and_a_hash() -> None:
    wire = portable_names([LONG, TWIN_1, TWIN_2])

    assert wire[LONG] == "x" * 55 + "_" + wire[LONG][-8:]
    assert wire[TWIN_1][:56] == wire[TWIN_2][:56] == "p" * 55 + "_"
    assert wire[TWIN_1] != wire[TWIN_2]
    assert all(len(out) == 64 for out in wire.values())


def test_a_hashed_name_already_taken_by_a_tool_is_salted_until_free() -> None:
    first = portable_names(["a.b", "a_b"])["a.b"]  # a_b_<8 hex digits>

    wire = portable_names(["a.b", "a_b", first])

    assert wire[first] == first
    assert wire["a_b"] == "a_b"
    assert wire["a.b"] not in {first, "a_b"}
    assert re.fullmatch(r"a_b_[0-9a-f]{8}", wire["a.b"])


def test_the_mapping_depends_on_the_set_of_names_never_their_order() -> None:
    shuffled = NAMES[:]
    random.Random(25).shuffle(shuffled)

    assert portable_names(shuffled) == portable_names(NAMES)
    assert portable_names(NAMES + NAMES) == portable_names(NAMES)


@settings(max_examples=200, deadline=None)
@given(st.sets(st.from_regex(r"[A-Za-z0-9_.\-]{1,128}", fullmatch=True), min_size=1,
               max_size=12))
def test_every_registry_name_set_maps_one_to_one_onto_names_the_provider_accepts(
    names: set[str],
) -> None:
    for rule, pattern in ((_names.OPENAI, OPENAI), (_names.GEMINI, GEMINI),
                          (_names.PORTABLE, PORTABLE)):
        wire = _names.to_wire(sorted(names), rule)
        assert all(pattern.fullmatch(out) for out in wire), wire
        assert len(set(wire)) == len(names)
        for name, out in zip(sorted(names), wire, strict=True):
            assert out == name or not pattern.fullmatch(name)


def test_the_module_examples_run() -> None:
    assert doctest.testmod(_names).failed == 0


# ---- OpenAI Chat Completions ----------------------------------------------------------


def chat_reply(*names: str) -> ChatCompletionMessage:
    return ChatCompletionMessage.model_validate({
        "role": "assistant",
        "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": name, "arguments": f'{{"n": {i}}}'}}
            for i, name in enumerate(names)
        ],
    })


async def test_chat_tools_send_valid_names_and_calls_come_back_as_the_registrys() -> None:
    registry = names_registry()
    schemas = registry.schemas()

    tools = [TypeAdapter(ChatCompletionToolParam).validate_python(tool)
             for tool in oa.chat_tools(schemas, strict=True)]
    wire = [tool["function"]["name"] for tool in tools]
    calls = oa.calls_from_chat(chat_reply(*wire), schemas=schemas)

    assert all(OPENAI.fullmatch(name) for name in wire)
    assert len(set(wire)) == len(NAMES)
    by_name = dict(zip([schema.name for schema in schemas], wire, strict=True))
    assert by_name["now"] == "now"
    assert by_name["github.search"] == "github_search"
    assert registry_names(calls) == [schema.name for schema in schemas]
    assert await echoed(registry, calls) == [f'{{"n": {i}}}' for i in range(len(NAMES))]


def test_without_schemas_or_for_a_name_never_sent_the_name_is_the_models() -> None:
    schemas = names_registry().schemas()

    assert registry_names(oa.calls_from_chat(chat_reply("github_search"))) == ["github_search"]
    assert registry_names(oa.calls_from_chat(chat_reply("made_up", "now"), schemas=schemas)) == [
        "made_up", "now",
    ]


async def test_a_name_the_model_makes_up_is_still_an_unknown_tool() -> None:
    registry = names_registry()
    [call] = oa.calls_from_chat(chat_reply("github_searches"), schemas=registry.schemas())

    result = await registry.execute(call)

    assert result.error is not None
    assert result.error.code == "UNKNOWN_TOOL"


# ---- OpenAI Responses -----------------------------------------------------------------


def responses_reply(*names: str) -> Response:
    return Response.model_validate({
        "id": "resp_1", "object": "response", "created_at": 0, "model": "gpt-test",
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "output": [
            {"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}", "name": name,
             "arguments": "{}", "status": "completed"}
            for i, name in enumerate(names)
        ],
    })


def test_responses_tools_send_valid_names_and_calls_come_back_as_the_registrys() -> None:
    schemas = names_registry().schemas()

    tools = [TypeAdapter(FunctionToolParam).validate_python(tool)
             for tool in oa.responses_tools(schemas)]
    wire = [tool["name"] for tool in tools]
    calls = oa.calls_from_response(responses_reply(*wire), schemas=schemas)

    assert all(OPENAI.fullmatch(name) for name in wire)
    assert len(set(wire)) == len(NAMES)
    assert registry_names(calls) == [schema.name for schema in schemas]


# ---- Anthropic ------------------------------------------------------------------------


def claude_reply(*names: str) -> Message:
    return Message.model_validate({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": {"n": i}}
                    for i, name in enumerate(names)],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    })


async def test_anthropic_tools_send_valid_names_and_tool_use_comes_back_as_the_registrys() -> None:
    registry = names_registry()
    schemas = registry.schemas()

    tools = [TypeAdapter(ToolParam).validate_python(tool) for tool in an.tools(schemas)]
    wire = [tool["name"] for tool in tools]
    calls = an.calls_from_message(claude_reply(*wire), schemas=schemas)

    assert all(OPENAI.fullmatch(name) for name in wire)
    assert wire == [tool["function"]["name"] for tool in oa.chat_tools(schemas)]
    assert registry_names(calls) == [schema.name for schema in schemas]
    assert await echoed(registry, calls) == [f'{{"n": {i}}}' for i in range(len(NAMES))]
    assert registry_names(an.calls_from_message(claude_reply("a_b", "zzz"))) == ["a_b", "zzz"]


# ---- Gemini ---------------------------------------------------------------------------


def gemini_reply(*names: str, ids: bool = True) -> types.GenerateContentResponse:
    calls: list[dict[str, Any]] = [
        {"function_call": {"name": name, "args": {"n": i}} | ({"id": f"fc_{i}"} if ids else {})}
        for i, name in enumerate(names)
    ]
    return types.GenerateContentResponse.model_validate(
        {"candidates": [{"content": {"role": "model", "parts": calls}}]}
    )


async def test_gemini_declarations_send_valid_names_and_calls_come_back_as_the_registrys() -> None:
    registry = names_registry()
    schemas = registry.schemas()

    declarations = [types.FunctionDeclaration.model_validate(declaration)
                    for declaration in gm.function_declarations(schemas)]
    wire = [declaration.name or "" for declaration in declarations]
    calls = gm.calls_from_response(gemini_reply(*wire), schemas=schemas)

    assert all(GEMINI.fullmatch(name) for name in wire)
    assert len(set(wire)) == len(NAMES)
    by_name = dict(zip([schema.name for schema in schemas], wire, strict=True))
    assert by_name["github.search"] == "github.search"  # Gemini takes dots
    assert by_name["3d"] == "_3d"
    assert by_name["-dash"] == "_-dash"
    assert registry_names(calls) == [schema.name for schema in schemas]
    assert await echoed(registry, calls) == [f'{{"n": {i}}}' for i in range(len(NAMES))]


async def test_gemini_function_responses_answer_with_the_name_the_model_called() -> None:
    registry = names_registry()
    schemas = registry.schemas()
    wire = [declaration.get("name") or "" for declaration in gm.function_declarations(schemas)]
    calls = gm.calls_from_response(gemini_reply(*wire, ids=False), schemas=schemas)
    batch = await registry.run(calls)

    parts = [types.Part.model_validate(part)
             for part in gm.function_responses(calls, batch.results, schemas=schemas)]

    answered = [part.function_response for part in parts]
    assert [response.name for response in answered if response] == wire
    assert [response.id for response in answered if response] == [None] * len(NAMES)
    assert calls[1].name == "3d"
    assert calls[1].call_id == "3d-1"
    unmapped = [types.Part.model_validate(part).function_response
                for part in gm.function_responses(calls, batch.results)]
    assert [response.name for response in unmapped if response] == registry_names(calls)
