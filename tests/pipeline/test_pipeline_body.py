"""The execute pipeline, stage 9: the tool body, what it returns, how it fails, and
`defer_context` / `conclude_turn` (spec: pipeline.md, "Body").

Timeouts and cancellation live in tests/cancellation/; here a body's signal only
appears where the pipeline hands it on.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import threading
from typing import Any

import pytest

import toolrail as tr
from helpers import (
    IMAGE,
    NUMBER_SCHEMA,
    UNRENDERABLE,
    AroundNext,
    ContentSequence,
    PostNext,
    PreNext,
    Reason,
    Unprintable,
    appended,
    assert_error,
    context,
    deep_list,
    deferring,
    make_call,
    make_tool,
    raising_tool,
    returning,
)

# ---- the body -----------------------------------------------------------------------


async def test_a_coroutine_body_is_awaited_on_the_loop_thread(registry: tr.ToolRegistry) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> int:
        return threading.get_ident()

    registry.register(make_tool(execute=body))
    result = await registry.execute(make_call())

    assert result.value == threading.get_ident()


async def test_a_sync_body_runs_in_a_worker_thread(registry: tr.ToolRegistry) -> None:
    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> int:
        return threading.get_ident()

    registry.register(make_tool(execute=body))
    result = await registry.execute(make_call())

    assert isinstance(result.value, int)
    assert result.value != threading.get_ident()


async def test_an_inline_sync_body_runs_on_the_loop_thread(registry: tr.ToolRegistry) -> None:
    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> int:
        return threading.get_ident()

    registry.register(make_tool(execute=body, inline=True))
    result = await registry.execute(make_call())

    assert result.value == threading.get_ident()


async def test_the_body_receives_the_frozen_arguments(registry: tr.ToolRegistry) -> None:
    received: list[tr.JsonValue] = []

    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> None:
        received.append(arguments)

    registry.register(make_tool(execute=body, inline=True))
    await registry.execute(make_call(arguments={"a": [1, {"b": 2}]}))

    (arguments,) = received
    assert arguments == {"a": (1, {"b": 2})}
    assert type(arguments) is tr.FrozenDict
    with pytest.raises(TypeError):
        arguments["c"] = 3


RETURN_TABLE: list[tuple[str, Any, Any, tuple[tr.Content, ...], Any]] = [
    ("tool output with value", tr.ToolOutput(value={"a": 1}), {"a": 1},
     (tr.TextContent('{"a": 1}'),), None),
    ("tool output with content and meta",
     tr.ToolOutput(value=[1, 2], content=[tr.TextContent("two items"), IMAGE],
                   meta={"rows": [1, 2]}),
     (1, 2), (tr.TextContent("two items"), IMAGE), {"rows": (1, 2)}),
    ("tool output with a str value", tr.ToolOutput(value="plain"), "plain",
     (tr.TextContent("plain"),), None),
    ("empty tool output", tr.ToolOutput(), None, (), None),
    ("tool output with empty content", tr.ToolOutput(value=3, content=[]), 3, (), None),
    ("str", "hello", "hello", (tr.TextContent("hello"),), None),
    ("empty str", "", "", (tr.TextContent(""),), None),
    ("str subclass", Reason.BUSY, "the tool is busy", (tr.TextContent("the tool is busy"),), None),
    ("text content", tr.TextContent("block"), None, (tr.TextContent("block"),), None),
    ("image content", IMAGE, None, (IMAGE,), None),
    ("list of content", [tr.TextContent("a"), IMAGE], None, (tr.TextContent("a"), IMAGE), None),
    ("tuple of content", (tr.TextContent("a"),), None, (tr.TextContent("a"),), None),
    ("None", None, None, (), None),
    ("int", 42, 42, (tr.TextContent("42"),), None),
    ("bool", True, True, (tr.TextContent("true"),), None),
    ("float", 2.5, 2.5, (tr.TextContent("2.5"),), None),
    ("empty list", [], (), (tr.TextContent("[]"),), None),
    ("non-ASCII dict", {"name": "Zoë", "city": "東京"}, {"name": "Zoë", "city": "東京"},
     (tr.TextContent('{"name": "Zoë", "city": "東京"}'),), None),
    ("mixed list", [1, "a", None, {"b": False}], (1, "a", None, {"b": False}),
     (tr.TextContent('[1, "a", null, {"b": false}]'),), None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("returned", "value", "content", "meta"),
    [row[1:] for row in RETURN_TABLE],
    ids=[row[0] for row in RETURN_TABLE],
)
async def test_what_the_body_returns_becomes_value_and_content(
    registry: tr.ToolRegistry,
    returned: Any,
    value: Any,
    content: tuple[tr.Content, ...],
    meta: Any,
) -> None:
    registry.register(make_tool(execute=returning(returned)))

    result = await registry.execute(make_call())

    assert result.is_error is False
    assert result.error is None
    assert result.value == value
    assert type(result.value) is type(value) or isinstance(value, dict)
    assert result.content == content
    assert type(result.content) is tuple
    assert result.meta == meta


async def test_a_returned_json_value_is_rendered_with_json_dumps_keeping_non_ascii(
    registry: tr.ToolRegistry,
) -> None:
    value = {"greeting": "héllo", "emoji": "🙂", "nested": [1, {"k": "ß"}]}
    registry.register(make_tool(execute=returning(value)))

    result = await registry.execute(make_call())

    assert result.content == (tr.TextContent(json.dumps(value, ensure_ascii=False)),)
    assert result.text == '{"greeting": "héllo", "emoji": "🙂", "nested": [1, {"k": "ß"}]}'


async def test_a_returned_value_is_a_frozen_snapshot(registry: tr.ToolRegistry) -> None:
    value: dict[str, Any] = {"items": [1, {"deep": [2]}]}

    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        return value

    registry.register(make_tool(execute=body, inline=True))
    result = await registry.execute(make_call())
    value["items"].append(3)

    assert result.value == {"items": (1, {"deep": (2,)})}
    frozen = result.value
    assert isinstance(frozen, tr.FrozenDict)
    assert type(frozen["items"]) is tuple
    assert type(frozen["items"][1]) is tr.FrozenDict


async def test_tool_output_content_may_be_any_sequence_of_content(
    registry: tr.ToolRegistry,
) -> None:
    output = tr.ToolOutput(value=1, content=ContentSequence(tr.TextContent("one")))
    registry.register(make_tool(execute=returning(output)))

    result = await registry.execute(make_call())

    assert result.is_error is False
    assert result.content == (tr.TextContent("one"),)
    assert result.value == 1


BODY_KINDS = ["async", "thread", "inline"]


class QuotaError(tr.ToolError):
    code = "QUOTA_EXCEEDED"


BODY_EXCEPTIONS: list[tuple[Exception, str, str | None, str]] = [
    (RuntimeError("disk full"), "disk full", None, "RuntimeError"),
    (ValueError(), "ValueError", None, "ValueError"),
    (Unprintable(), "<unprintable thrown value>", None, "Unprintable"),
    (tr.ToolError("bad input"), "bad input", "TOOL_ERROR", "ToolError"),
    (tr.ToolError("slow down", code="RATE_LIMITED"), "slow down", "RATE_LIMITED", "ToolError"),
    (tr.ToolError(""), "ToolError", "TOOL_ERROR", "ToolError"),
    (tr.ToolArgsError("bad args", violations=["x"]), "bad args", "INVALID_ARGS", "ToolArgsError"),
    (QuotaError("over quota"), "over quota", "QUOTA_EXCEEDED", "QuotaError"),
]


@pytest.mark.parametrize("kind", BODY_KINDS)
@pytest.mark.parametrize(("exc", "message", "code", "type_name"), BODY_EXCEPTIONS)
async def test_an_exception_from_the_body_becomes_an_error_result(
    registry: tr.ToolRegistry,
    exc: Exception,
    message: str,
    code: str | None,
    type_name: str,
    kind: str,
) -> None:
    registry.register(raising_tool(exc, kind))

    result = await registry.execute(make_call())

    assert_error(result, message, code, type_name)


async def test_a_body_failure_is_a_dispatch_result_that_around_and_post_execute_see(
    registry: tr.ToolRegistry,
) -> None:
    seen: list[str] = []

    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        result = await call_next()
        seen.append("around:" + result.text)
        return result

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        seen.append("post:" + result.text)
        return tr.Accept()

    registry.register(raising_tool(RuntimeError("boom"), "async"))
    registry.around_execute(around)
    registry.post_execute(post)
    result = await registry.execute(make_call())

    assert seen == ["around:Error: boom", "post:Error: boom"]
    assert_error(result, "boom", None, "RuntimeError")


@pytest.mark.parametrize(
    "options",
    [{}, {"cancellation": "cooperative"}, {"timeout": 60.0}],
    ids=["interrupt", "cooperative", "with-timeout"],
)
@pytest.mark.parametrize("with_signal", [False, True], ids=["no-signal", "with-signal"])
async def test_a_body_raising_cancelled_error_on_its_own_is_a_failure(
    registry: tr.ToolRegistry, options: dict[str, Any], with_signal: bool
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> None:
        raise asyncio.CancelledError

    registry.register(make_tool(execute=body, **options))
    signal = tr.CancelController().signal if with_signal else None

    result = await registry.execute(make_call(signal=signal))

    assert_error(result, "CancelledError", None, "CancelledError")


async def test_a_body_cancelled_error_with_a_message_keeps_the_message(
    registry: tr.ToolRegistry,
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> None:
        raise asyncio.CancelledError("gave up")

    registry.register(make_tool(execute=body))
    result = await registry.execute(make_call())

    assert_error(result, "gave up", None, "CancelledError")


@pytest.mark.parametrize(
    "returned",
    [{"a": "x"}, tr.ToolOutput(value={"a": "x"}, content=[tr.TextContent("fine")]), "text", None],
)
async def test_a_value_violating_the_output_schema_is_an_invalid_output_result(
    registry: tr.ToolRegistry, returned: Any
) -> None:
    registry.register(make_tool(execute=returning(returned), output_schema=NUMBER_SCHEMA))

    result = await registry.execute(make_call())

    assert result.error is not None
    message = result.error.message
    assert message.startswith('tool "t" returned invalid output: ')
    assert_error(result, message, "INVALID_TOOL_OUTPUT", "ToolOutputError")


async def test_output_schema_violations_are_joined_by_semicolons(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(
        make_tool(execute=returning({"a": "x", "b": "y"}), output_schema=NUMBER_SCHEMA)
    )

    result = await registry.execute(make_call())

    assert result.error is not None
    reason = result.error.message.removeprefix('tool "t" returned invalid output: ')
    assert len(reason.split("; ")) == 2
    assert result.error.code == "INVALID_TOOL_OUTPUT"


async def test_a_value_satisfying_the_output_schema_is_kept(registry: tr.ToolRegistry) -> None:
    registry.register(make_tool(execute=returning({"a": 1, "b": 2}), output_schema=NUMBER_SCHEMA))

    result = await registry.execute(make_call())

    assert result.is_error is False
    assert result.value == {"a": 1, "b": 2}


async def test_an_output_schema_using_arrays_registers_and_is_enforced(
    registry: tr.ToolRegistry,
) -> None:
    schema = {
        "type": "object",
        "properties": {"kind": {"enum": ["a", "b"]}},
        "required": ["kind"],
    }
    registry.register(make_tool("good", execute=returning({"kind": "a"}), output_schema=schema))
    registry.register(make_tool("bad", execute=returning({"kind": "c"}), output_schema=schema))

    good = await registry.execute(make_call("good"))
    bad = await registry.execute(make_call("bad"))

    assert good.value == {"kind": "a"}
    assert bad.error is not None
    assert bad.error.message.startswith('tool "bad" returned invalid output: ')
    assert_error(bad, bad.error.message, "INVALID_TOOL_OUTPUT", "ToolOutputError")


@pytest.mark.parametrize(
    ("returned", "reason"),
    [
        ({"tags": {"a"}}, "value is not lossless JSON: $.tags is a set"),
        ([1, float("inf")], "value is not lossless JSON: $[1] "),
        (tr.ToolOutput(value={"when": dt.date(2024, 1, 1)}),
         "value is not lossless JSON: $.when is a date"),
        (object(), "value is not lossless JSON: $ "),
    ],
)  # fmt: skip
async def test_a_value_that_is_not_lossless_json_is_an_invalid_output_result(
    registry: tr.ToolRegistry, returned: Any, reason: str
) -> None:
    registry.register(make_tool(execute=returning(returned)))

    result = await registry.execute(make_call())

    assert result.error is not None
    message = result.error.message
    assert message.startswith('tool "t" returned invalid output: value is not lossless JSON: ')
    assert message.startswith('tool "t" returned invalid output: ' + reason)
    assert_error(result, message, "INVALID_TOOL_OUTPUT", "ToolOutputError")


async def test_a_value_too_deep_to_render_is_an_invalid_output_result(
    registry: tr.ToolRegistry,
) -> None:
    deep = deep_list(100_000)

    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        return deep

    registry.register(make_tool(execute=body, inline=True))
    result = await registry.execute(make_call())

    assert result.error is not None
    message = result.error.message
    assert message.startswith(UNRENDERABLE)
    assert len(message) > len(UNRENDERABLE)
    assert_error(result, message, "INVALID_TOOL_OUTPUT", "ToolOutputError")


# ---- defer_context and conclude_turn ------------------------------------------------


@pytest.mark.parametrize(
    ("message", "options", "expected"),
    [
        ("remember this", {}, tr.ContextMessage((tr.TextContent("remember this"),), "t")),
        (tr.TextContent("block"), {}, tr.ContextMessage((tr.TextContent("block"),), "t")),
        (IMAGE, {"source": "camera"}, tr.ContextMessage((IMAGE,), "camera")),
        ([tr.TextContent("a"), IMAGE], {}, tr.ContextMessage((tr.TextContent("a"), IMAGE), "t")),
        ((tr.TextContent("a"),), {"meta": {"k": [1]}},
         tr.ContextMessage((tr.TextContent("a"),), "t", tr.snapshot_json({"k": [1]}))),
        (ContentSequence(tr.TextContent("seq")), {},
         tr.ContextMessage((tr.TextContent("seq"),), "t")),
        ("with source", {"source": "plugin:reminders", "meta": 1},
         tr.ContextMessage((tr.TextContent("with source"),), "plugin:reminders", 1)),
        (context("as is", "plugin:x"), {}, context("as is", "plugin:x")),
    ],
    ids=["str", "text", "image", "list", "tuple-with-meta", "sequence", "source", "message"],
)  # fmt: skip
async def test_defer_context_accepts_every_message_form(
    registry: tr.ToolRegistry, message: Any, options: dict[str, Any], expected: tr.ContextMessage
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ctx.defer_context(message, **options)
        return "ok"

    registry.register(make_tool(execute=body))
    result = await registry.execute(make_call())

    assert result.value == "ok"
    assert result.contexts == (expected,)
    assert type(result.contexts) is tuple
    assert type(result.contexts[0].content) is tuple


async def test_deferred_contexts_are_kept_when_the_body_raises(
    registry: tr.ToolRegistry,
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> None:
        ctx.defer_context("partial progress")
        raise RuntimeError("then it broke")

    registry.register(make_tool(execute=body))
    result = await registry.execute(make_call())

    assert result.is_error is True
    assert result.error == tr.ErrorInfo("then it broke", None, "RuntimeError")
    assert result.contexts == (context("partial progress", "t"),)


async def test_deferred_contexts_are_dropped_when_post_execute_blocks(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool(execute=deferring("deferred")))
    registry.post_execute(
        lambda execution, result, call_next: tr.Block("no", contexts=[context("why", "policy")])
    )
    result = await registry.execute(make_call())

    assert result.contexts == (context("why", "policy"),)


async def test_deferred_contexts_go_in_front_of_the_dispatch_results_own_contexts(
    registry: tr.ToolRegistry,
) -> None:
    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        result = await call_next()
        assert result.contexts == ()  # stage 9 comes after the around chain
        return tr.ToolResult(
            content=result.content, value=result.value, contexts=(context("from wrapper", "w"),)
        )

    registry.register(make_tool(execute=deferring("first", "second")))
    registry.around_execute(around)
    registry.post_execute(lambda execution, result, call_next: tr.Accept(contexts=[context("p")]))
    result = await registry.execute(make_call())

    assert result.contexts == (
        context("first", "t"), context("second", "t"), context("from wrapper", "w"), context("p"),
    )  # fmt: skip


async def test_post_execute_sees_the_deferred_contexts(registry: tr.ToolRegistry) -> None:
    seen: list[tuple[tr.ContextMessage, ...]] = []

    registry.register(make_tool(execute=deferring("note")))
    registry.post_execute(
        lambda execution, result, call_next: appended(seen, result.contexts, tr.Accept())
    )
    await registry.execute(make_call())

    assert seen == [(context("note", "t"),)]


async def test_contexts_deferred_by_every_invocation_of_a_retry_are_kept_in_order(
    registry: tr.ToolRegistry,
) -> None:
    attempts: list[int] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        attempts.append(1)
        ctx.defer_context(f"attempt {len(attempts)}")
        if len(attempts) == 1:
            raise RuntimeError("flaky")
        return "ok"

    async def retry(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        result = await call_next()
        return await call_next() if result.is_error else result

    registry.register(make_tool(execute=body))
    registry.around_execute(retry)
    result = await registry.execute(make_call())

    assert result.value == "ok"
    assert result.contexts == (context("attempt 1", "t"), context("attempt 2", "t"))


async def test_defer_context_and_conclude_turn_are_ignored_after_the_body_settles(
    registry: tr.ToolRegistry,
) -> None:
    contexts: list[tr.RunContext] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        contexts.append(ctx)
        return "ok"

    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        result = await call_next()
        contexts[0].defer_context("too late")
        contexts[0].conclude_turn()
        return result

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        contexts[0].defer_context("much too late")
        contexts[0].conclude_turn()
        return tr.Accept()

    registry.register(make_tool(execute=body))
    registry.around_execute(around)
    registry.post_execute(post)
    result = await registry.execute(make_call())

    assert result.contexts == ()
    assert result.concludes_turn is False


async def test_a_sync_body_may_defer_context_and_conclude_the_turn_from_its_worker_thread(
    registry: tr.ToolRegistry,
) -> None:
    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ctx.defer_context("from a thread")
        ctx.conclude_turn()
        return "done"

    registry.register(make_tool(execute=body))
    result = await registry.execute(make_call())

    assert result.value == "done"
    assert result.contexts == (context("from a thread", "t"),)
    assert result.concludes_turn is True


async def test_conclude_turn_marks_a_success_as_concluding_the_turn(
    registry: tr.ToolRegistry,
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ctx.conclude_turn()
        return "final answer"

    registry.register(make_tool(execute=body))
    concluded = await registry.execute(make_call())
    registry.register(make_tool("plain"))
    plain = await registry.execute(make_call("plain"))

    assert concluded.concludes_turn is True
    assert concluded.is_error is False
    assert plain.concludes_turn is False


async def test_conclude_turn_does_not_mark_a_failure(registry: tr.ToolRegistry) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> None:
        ctx.conclude_turn()
        raise RuntimeError("failed anyway")

    registry.register(make_tool(execute=body))
    result = await registry.execute(make_call())

    assert_error(result, "failed anyway", None, "RuntimeError")


async def test_conclude_turn_marks_only_the_result_of_the_invocation_that_called_it(
    registry: tr.ToolRegistry,
) -> None:
    attempts: list[int] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> int:
        attempts.append(1)
        if len(attempts) == 1:
            ctx.conclude_turn()
        return len(attempts)

    async def keep(which: int, execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        results = [await call_next(), await call_next()]
        return results[which]

    registry.register(make_tool(execute=body))
    with registry.around_execute(lambda e, n: keep(1, e, n)):
        second = await registry.execute(make_call())
    attempts.clear()
    with registry.around_execute(lambda e, n: keep(0, e, n)):
        first = await registry.execute(make_call())

    assert (second.value, second.concludes_turn) == (2, False)
    assert (first.value, first.concludes_turn) == (1, True)


async def test_the_run_context_carries_the_executions_fields(registry: tr.ToolRegistry) -> None:
    seen: dict[str, Any] = {}
    parent_token: list[tr.ExecutionToken] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        seen["ctx"] = ctx
        return "ok"

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        seen.setdefault("executions", []).append(execution)
        return await call_next()

    async def outer(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        parent_token.append(ctx.token)
        scope = registry.scope("agent")
        result = await scope.execute(
            make_call("inner", call_id="c-inner", arguments={"x": [1]}, parent=ctx.token)
        )
        return result.text

    registry.register(make_tool("inner", execute=body))
    registry.register(make_tool("outer", execute=outer))
    registry.pre_execute(pre)
    await registry.execute(make_call("outer"))

    ctx = seen["ctx"]
    execution = seen["executions"][1]
    assert isinstance(ctx, tr.RunContext)
    assert isinstance(ctx, tr.Execution)
    assert ctx is not execution
    assert ctx.token is execution.token
    assert ctx.call_id == execution.call_id == "c-inner"
    assert ctx.name == execution.name == "inner"
    assert ctx.arguments == execution.arguments == {"x": (1,)}
    assert ctx.scope == execution.scope == "agent"
    assert ctx.parent is execution.parent is parent_token[0]
    assert isinstance(ctx.signal, tr.CancelSignal)
