"""Value types of a call's outcome: results, calls, decisions, approval and errors.

Spec: api.md ("ToolCall", "ToolResult", "Decisions", "Approval", "Errors").
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, cast

import pytest

import toolrail as tr

IMAGE = tr.ImageContent(data="aGVsbG8=", mime_type="image/png")


def frozen(value: Any) -> tr.JsonValue:
    return tr.snapshot_json(value)


async def echo(arguments: tr.JsonValue, ctx: tr.RunContext) -> dict[str, tr.JsonValue]:
    return {"received": arguments}


def echo_tool(name: str = "echo") -> tr.Tool:
    return tr.Tool(
        name=name, description="Echo the arguments.", parameters={"type": "object"}, execute=echo
    )


# ---- ToolResult.text ----------------------------------------------------------------


def test_text_joins_the_text_blocks_with_newlines_and_skips_images() -> None:
    result = tr.ToolResult(content=(tr.TextContent("one"), IMAGE, tr.TextContent("two")))

    assert result.text == "one\ntwo"


@pytest.mark.parametrize(
    ("content", "text"),
    [((), ""), ((IMAGE,), ""), ((tr.TextContent(""),), ""), ((tr.TextContent("a"),), "a")],
)
def test_text_of_edge_cases(content: tuple[tr.Content, ...], text: str) -> None:
    assert tr.ToolResult(content=content).text == text


def test_text_keeps_empty_text_blocks_as_empty_lines() -> None:
    result = tr.ToolResult(content=(tr.TextContent("a"), tr.TextContent(""), tr.TextContent("b")))

    assert result.text == "a\n\nb"


# ---- ToolResult.to_dict -------------------------------------------------------------


def test_to_dict_of_a_default_result_has_every_key() -> None:
    assert tr.ToolResult(content=()).to_dict() == {
        "content": [],
        "is_error": False,
        "value": None,
        "error": None,
        "meta": None,
        "contexts": [],
        "concludes_turn": False,
    }


def test_to_dict_writes_every_field_with_frozen_values_thawed() -> None:
    result = tr.ToolResult(
        content=(tr.TextContent("hi"), IMAGE),
        value=frozen({"rows": [{"id": 1}, {"id": 2}], "n": 2}),
        meta=frozen(["m", {"k": [True, None]}]),
        contexts=(
            tr.ContextMessage((tr.TextContent("note"), IMAGE), "plugin:x", frozen({"a": [1]})),
            tr.ContextMessage((), "tool"),
        ),
        concludes_turn=True,
    )

    out = result.to_dict()

    assert out == {
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "image", "data": "aGVsbG8=", "mime_type": "image/png"},
        ],
        "is_error": False,
        "value": {"rows": [{"id": 1}, {"id": 2}], "n": 2},
        "error": None,
        "meta": ["m", {"k": [True, None]}],
        "contexts": [
            {
                "content": [
                    {"type": "text", "text": "note"},
                    {"type": "image", "data": "aGVsbG8=", "mime_type": "image/png"},
                ],
                "source": "plugin:x",
                "meta": {"a": [1]},
            },
            {"content": [], "source": "tool", "meta": None},
        ],
        "concludes_turn": True,
    }
    assert type(out["value"]) is dict
    assert type(out["value"]["rows"]) is list
    assert type(out["value"]["rows"][0]) is dict
    assert type(out["meta"]) is list
    assert type(out["meta"][1]) is dict
    assert type(out["meta"][1]["k"]) is list
    assert type(out["contexts"][0]["meta"]) is dict
    assert type(out["contexts"][0]["meta"]["a"]) is list


def test_to_dict_of_a_failure_writes_the_error() -> None:
    result = tr.ToolResult(
        content=(tr.TextContent("Error: nope"),),
        is_error=True,
        error=tr.ErrorInfo("nope", "DENIED"),
    )

    out = result.to_dict()

    assert out["is_error"] is True
    assert out["error"] == {"message": "nope", "code": "DENIED", "type": None}
    assert out["content"] == [{"type": "text", "text": "Error: nope"}]


def test_to_dict_returns_fresh_mutable_values_each_time() -> None:
    result = tr.ToolResult(content=(tr.TextContent("x"),), value=frozen({"a": [1]}))

    first = result.to_dict()
    first["value"]["a"].append(2)
    first["content"].clear()

    assert result.to_dict()["value"] == {"a": [1]}
    assert result.to_dict()["content"] == [{"type": "text", "text": "x"}]
    assert result.value == {"a": (1,)}


async def test_to_dict_of_an_executed_result_is_json_serializable() -> None:
    registry = tr.ToolRegistry()
    registry.register(echo_tool())

    result = await registry.execute(
        tr.ToolCall(call_id="1", name="echo", arguments={"q": ["é", 1.5]})
    )
    text = json.dumps(result.to_dict(), ensure_ascii=False)

    assert json.loads(text) == {
        "content": [{"type": "text", "text": '{"received": {"q": ["é", 1.5]}}'}],
        "is_error": False,
        "value": {"received": {"q": ["é", 1.5]}},
        "error": None,
        "meta": None,
        "contexts": [],
        "concludes_turn": False,
    }


# ---- ToolCall.from_json -------------------------------------------------------------


@pytest.mark.parametrize("raw", [None, ""])
def test_from_json_reads_no_text_as_an_empty_object(raw: str | None) -> None:
    call = tr.ToolCall.from_json("c1", "echo", raw)

    assert call.arguments == {}
    assert call.call_id == "c1"
    assert call.name == "echo"


@pytest.mark.parametrize(
    ("raw", "arguments"),
    [
        ('{"a": 1, "b": [true, null, "x"]}', {"a": 1, "b": [True, None, "x"]}),
        ("[1, 2]", [1, 2]),
        ('"text"', "text"),
        ("3", 3),
        ("null", None),
        (' {"a": 1} ', {"a": 1}),
    ],
)
def test_from_json_parses_valid_json(raw: str, arguments: Any) -> None:
    assert tr.ToolCall.from_json("c1", "echo", raw).arguments == arguments


@pytest.mark.parametrize(
    "raw",
    [
        "{",
        "{'a': 1}",
        '{"a": 1,}',
        "not json",
        "   ",
        "NaN",
        "Infinity",
        "-Infinity",
        '{"ratio": NaN}',
        "[1, Infinity]",
    ],
)
def test_from_json_keeps_text_that_is_not_valid_json_as_the_raw_string(raw: str) -> None:
    call = tr.ToolCall.from_json("c1", "echo", raw)

    assert call.arguments == raw
    assert type(call.arguments) is str


def test_from_json_passes_the_other_fields_through() -> None:
    controller = tr.CancelController()

    call = tr.ToolCall.from_json("c1", "echo", "{}", scope="agent", signal=controller.signal)

    assert call.scope == "agent"
    assert call.signal is controller.signal
    assert call.parent is None


@pytest.mark.parametrize("raw", ["{", "NaN", '{"a": Infinity}'])
async def test_executing_a_call_with_invalid_json_text_yields_a_result(raw: str) -> None:
    registry = tr.ToolRegistry()
    registry.register(echo_tool())

    result = await registry.execute(tr.ToolCall.from_json("c1", "echo", raw))

    assert isinstance(result, tr.ToolResult)
    assert result.is_error is False
    assert result.value == {"received": raw}


# ---- value types --------------------------------------------------------------------


VALUE_TYPES: list[Any] = [
    tr.ToolResult(content=()),
    tr.ErrorInfo("m"),
    tr.TextContent("t"),
    IMAGE,
    tr.ContextMessage((), "s"),
    tr.ToolOutput(),
    tr.ToolCall(call_id="c", name="n"),
    tr.Allow(),
    tr.Deny("r"),
    tr.Ask(),
    tr.Accept(),
    tr.Block("b"),
    tr.ApprovalRequest("c", "t", None, None, None, tr.CancelSignal.never()),
]


@pytest.mark.parametrize("value", VALUE_TYPES, ids=lambda v: type(v).__name__)
def test_value_types_are_frozen_slotted_dataclasses(value: Any) -> None:
    assert dataclasses.is_dataclass(value)
    assert type(value).__dict__["__dataclass_params__"].frozen is True
    assert "__slots__" in type(value).__dict__
    assert not hasattr(value, "__dict__")
    for field in dataclasses.fields(value):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field.name, None)


def test_content_blocks_carry_their_type_tag() -> None:
    assert tr.TextContent("x").type == "text"
    assert IMAGE.type == "image"
    assert tr.TextContent("x") == tr.TextContent("x")


def test_result_and_error_defaults() -> None:
    result = tr.ToolResult(content=())

    assert (result.is_error, result.value, result.error, result.meta) == (False, None, None, None)
    assert (result.contexts, result.concludes_turn) == ((), False)
    assert tr.ErrorInfo("m") == tr.ErrorInfo("m", None, None)
    assert tr.ContextMessage((), "s").meta is None


def test_tool_output_is_keyword_only_with_none_defaults() -> None:
    output = tr.ToolOutput()

    assert (output.value, output.content, output.meta) == (None, None, None)
    with pytest.raises(TypeError):
        tr.ToolOutput(1)  # type: ignore[call-arg]


def test_tool_call_defaults() -> None:
    call = tr.ToolCall(call_id="c", name="n")

    assert call.arguments == {}
    assert (call.scope, call.parent, call.signal) == (None, None, None)


# ---- decisions ----------------------------------------------------------------------


def test_decisions_hold_their_fields() -> None:
    contexts = (tr.ContextMessage((tr.TextContent("c"),), "s"),)

    assert tr.Deny("because").reason == "because"
    assert tr.Ask().reason is None
    assert tr.Ask("why").reason == "why"
    assert tr.Accept().content is None
    assert tuple(tr.Accept().contexts) == ()
    assert tr.Accept(content="c").content == "c"
    assert tr.Accept(value=None).value is None
    assert tuple(tr.Accept(contexts=contexts).contexts) == contexts
    assert tr.Block("no").feedback == "no"
    assert tuple(tr.Block("no").contexts) == ()
    assert tuple(tr.Block("no", contexts=contexts).contexts) == contexts


def test_decisions_compare_by_value() -> None:
    assert tr.Allow() == tr.Allow()
    assert tr.Deny("a") == tr.Deny("a")
    assert tr.Deny("a") != tr.Deny("b")
    assert tr.Ask() == tr.Ask(None)
    assert tr.Accept() == tr.Accept()
    assert tr.Accept(value=None) != tr.Accept()  # a value of None is not a left-out value
    assert tr.Block("x") == tr.Block("x")


# ---- approval -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "value"),
    [
        (tr.ApprovalOutcome.ALLOWED_ONCE, "allowed-once"),
        (tr.ApprovalOutcome.REJECTED, "rejected"),
        (tr.ApprovalOutcome.CANCELLED, "cancelled"),
        (tr.ApprovalOutcome.UNAVAILABLE, "unavailable"),
    ],
)
def test_approval_outcomes_are_str_enum_members_with_their_values(
    outcome: tr.ApprovalOutcome, value: str
) -> None:
    assert outcome == value
    assert outcome.value == value
    assert str(outcome) == value
    assert isinstance(outcome, str)
    assert tr.ApprovalOutcome(value) is outcome


def test_there_are_exactly_four_approval_outcomes() -> None:
    assert [o.value for o in tr.ApprovalOutcome] == [
        "allowed-once",
        "rejected",
        "cancelled",
        "unavailable",
    ]


def test_approval_request_holds_its_fields() -> None:
    signal = tr.CancelController().signal
    arguments = frozen({"path": "/x"})

    request = tr.ApprovalRequest("c1", "rm", arguments, "agent", "destructive", signal)

    assert request.call_id == "c1"
    assert request.tool_name == "rm"
    assert request.arguments is arguments
    assert request.scope == "agent"
    assert request.reason == "destructive"
    assert request.signal is signal


# ---- errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (tr.ToolError, "TOOL_ERROR"),
        (tr.ToolNotFoundError, "UNKNOWN_TOOL"),
        (tr.ToolArgsError, "INVALID_ARGS"),
        (tr.ToolOutputError, "INVALID_TOOL_OUTPUT"),
        (tr.ToolTimeoutError, "TOOL_TIMEOUT"),
        (tr.ToolAbortedError, "ABORTED"),
    ],
)
def test_each_error_class_has_its_stable_default_code(cls: type[tr.ToolError], code: str) -> None:
    assert cls.code == code
    error = cls("message")
    assert error.code == code
    assert str(error) == "message"
    assert isinstance(error, tr.ToolError)
    assert isinstance(error, Exception)


@pytest.mark.parametrize(
    "cls",
    [
        tr.ToolError,
        tr.ToolNotFoundError,
        tr.ToolArgsError,
        tr.ToolOutputError,
        tr.ToolTimeoutError,
        tr.ToolAbortedError,
    ],
)
def test_a_code_passed_to_an_error_overrides_the_class_default_for_that_instance_only(
    cls: type[tr.ToolError],
) -> None:
    default = cls.code

    error = cls("m", code="X")

    assert error.code == "X"
    assert cls.code == default
    assert cls("m").code == default


def test_aborted_error_may_carry_the_before_dispatch_code() -> None:
    error = tr.ToolAbortedError("tool call aborted before dispatch", code="ABORTED_BEFORE_DISPATCH")

    assert error.code == "ABORTED_BEFORE_DISPATCH"


def test_tool_args_error_keeps_its_violations_as_a_tuple() -> None:
    error = tr.ToolArgsError("bad arguments", violations=['"$.a": required', '"$.b": not int'])

    assert error.violations == ('"$.a": required', '"$.b": not int')
    assert type(error.violations) is tuple
    assert error.code == "INVALID_ARGS"
    assert str(error) == "bad arguments"


def test_tool_args_error_violations_default_to_empty_and_accept_a_code() -> None:
    error = tr.ToolArgsError("bad", code="SCHEMA")

    assert error.violations == ()
    assert error.code == "SCHEMA"


def test_tool_error_message_and_code_are_keyword_after_the_message() -> None:
    with pytest.raises(TypeError):
        tr.ToolError("m", "CODE")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        cast(Any, tr.ToolArgsError)("m", ("v",))


def test_a_tool_error_can_be_raised_and_caught_as_its_base() -> None:
    with pytest.raises(tr.ToolError) as info:
        raise tr.ToolTimeoutError("tool call timed out after 1s")

    assert info.value.code == "TOOL_TIMEOUT"
