"""The execute pipeline, stage 8: around-execute middleware, the read-only `Execution`
and `RunContext`, and the signal around-execute may replace (spec: pipeline.md,
"Stages", "Around and the signal")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import toolrail as tr
from helpers import (
    AroundNext,
    PostNext,
    PreNext,
    Recorder,
    appended,
    assert_error,
    assert_final_error,
    assign,
    deferring,
    install_every_stage,
    make_call,
    make_tool,
    nesting,
    raises_attribute_error,
    recording_body,
)

# ---- stage 8: around-execute --------------------------------------------------------


async def test_around_execute_wraps_the_body_outermost_first(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    registry.register(make_tool(execute=recording_body(log)))
    registry.around_execute(nesting(log, "a"))
    registry.around_execute(nesting(log, "b"))
    registry.around_execute(nesting(log, "first"), prepend=True)

    result = await registry.execute(make_call())

    assert result.value == "ok"
    assert log.events == ["first>", "a>", "b>", "body", "b<", "a<", "first<"]


async def test_around_execute_may_short_circuit_without_running_the_body(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    seen: list[tr.ToolResult] = []
    cached = tr.ToolResult(
        content=(tr.TextContent("cached"),), value=tr.snapshot_json({"hit": True})
    )

    registry.register(make_tool(execute=recording_body(log)))
    registry.around_execute(lambda execution, call_next: cached)
    registry.post_execute(lambda execution, result, call_next: appended(seen, result, tr.Accept()))

    result = await registry.execute(make_call())

    assert log.events == []
    assert seen == [cached]
    assert result.content == (tr.TextContent("cached"),)
    assert result.value == {"hit": True}
    assert type(result.value) is tr.FrozenDict
    assert result.is_error is False


async def test_around_execute_may_replace_the_result_it_got(
    registry: tr.ToolRegistry,
) -> None:
    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        original = await call_next()
        return tr.ToolResult(content=(tr.TextContent("wrapped " + original.text),), value=1)

    registry.register(make_tool())
    registry.around_execute(around)
    result = await registry.execute(make_call())

    assert result.content == (tr.TextContent("wrapped ok"),)
    assert result.value == 1


async def test_a_sync_around_execute_middleware_is_accepted(registry: tr.ToolRegistry) -> None:
    registry.register(make_tool())
    registry.around_execute(lambda execution, call_next: call_next())
    registry.around_execute(
        lambda execution, call_next: tr.ToolResult(content=(tr.TextContent("sync"),))
    )

    result = await registry.execute(make_call())

    assert result.content == (tr.TextContent("sync"),)


async def test_around_call_next_twice_runs_the_body_twice_with_a_fresh_run_context_each_time(
    registry: tr.ToolRegistry,
) -> None:
    contexts: list[tr.RunContext] = []
    executions: list[tr.Execution] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> int:
        contexts.append(ctx)
        return len(contexts)

    async def retry(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        executions.append(execution)
        first = await call_next()
        assert first.value == 1
        return await call_next()

    registry.register(make_tool(execute=body))
    registry.around_execute(retry)
    result = await registry.execute(make_call())

    assert result.value == 2
    first, second = contexts
    assert first is not second
    assert first.token is second.token is executions[0].token


async def test_around_call_next_twice_runs_inner_middleware_again(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    async def retry(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        await call_next()
        return await call_next()

    async def inner(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        log("inner")
        return await call_next()

    registry.register(make_tool(execute=recording_body(log)))
    registry.around_execute(retry)
    registry.around_execute(inner)
    await registry.execute(make_call())

    assert log.events == ["inner", "body", "inner", "body"]


@pytest.mark.parametrize("value", [None, "ok", {"content": []}, tr.Accept(), tr.TextContent("x")])
async def test_an_around_execute_return_that_is_not_a_tool_result_is_a_final_error(
    registry: tr.ToolRegistry, log: Recorder, value: Any
) -> None:
    async def around(execution: tr.Execution, call_next: AroundNext) -> Any:
        await call_next()
        return value

    registry.register(make_tool(execute=recording_body(log)))
    install_every_stage(registry, log)
    registry.around_execute(around)

    result = await registry.execute(make_call())

    assert_final_error(result, f"around-execute middleware returned {value!r}, not a ToolResult")
    assert log.events == ["pre", "guard", "around", "body", "observer"]


async def test_a_raising_around_execute_middleware_is_a_final_error_that_skips_post_execute(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        await call_next()
        raise tr.ToolError("wrapper failed", code="WRAPPER")

    registry.register(make_tool(execute=deferring("from the body")))
    install_every_stage(registry, log)
    registry.around_execute(around)

    result = await registry.execute(make_call())

    assert_final_error(result, "wrapper failed", "WRAPPER", "ToolError")
    assert log.events == ["pre", "guard", "around", "observer"]


async def test_an_unknown_tool_is_an_ordinary_dispatch_result(
    registry: tr.ToolRegistry,
) -> None:
    result = await registry.execute(make_call("nope"))

    assert_error(result, 'unknown tool "nope"', "UNKNOWN_TOOL", "ToolNotFoundError")


async def test_around_and_post_execute_see_the_unknown_tool_result(
    registry: tr.ToolRegistry,
) -> None:
    seen: list[tuple[str, tr.ToolResult]] = []

    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        result = await call_next()
        seen.append(("around", result))
        return result

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        seen.append(("post", result))
        return tr.Accept()

    registry.around_execute(around)
    registry.post_execute(post)
    result = await registry.execute(make_call("missing"))

    assert [stage for stage, _ in seen] == ["around", "post"]
    for _, dispatched in seen:
        assert_error(dispatched, 'unknown tool "missing"', "UNKNOWN_TOOL", "ToolNotFoundError")
    assert_error(result, 'unknown tool "missing"', "UNKNOWN_TOOL", "ToolNotFoundError")


# ---- Execution attributes and the signal --------------------------------------------


ATTRIBUTES = ["token", "call_id", "name", "arguments", "scope", "parent"]


async def test_execution_attributes_are_read_only(registry: tr.ToolRegistry) -> None:
    outcomes: dict[str, bool] = {}

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        for attribute in [*ATTRIBUTES, "signal", "something_new"]:
            outcomes[attribute] = raises_attribute_error(
                lambda a=attribute: assign(execution, a, None)  # type: ignore[misc]
            )
        return await call_next()

    registry.register(make_tool())
    registry.pre_execute(pre)
    result = await registry.execute(make_call())

    assert result.value == "ok"
    assert outcomes == dict.fromkeys([*ATTRIBUTES, "signal", "something_new"], True)


async def test_run_context_attributes_are_read_only(registry: tr.ToolRegistry) -> None:
    outcomes: dict[str, bool] = {}

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        for attribute in [*ATTRIBUTES, "signal"]:
            outcomes[attribute] = raises_attribute_error(
                lambda a=attribute: assign(ctx, a, tr.CancelSignal.never())  # type: ignore[misc]
            )
        return "ok"

    registry.register(make_tool(execute=body))
    registry.around_execute(lambda execution, call_next: call_next())  # signal writable there
    result = await registry.execute(make_call())

    assert result.value == "ok"
    assert outcomes == dict.fromkeys([*ATTRIBUTES, "signal"], True)


async def test_the_signal_cannot_be_assigned_outside_around_execute(
    registry: tr.ToolRegistry,
) -> None:
    outcomes: dict[str, bool] = {}
    replacement = tr.CancelController().signal

    def try_assign(where: str, execution: tr.Execution) -> None:
        outcomes[where] = raises_attribute_error(lambda: assign(execution, "signal", replacement))

    def finalize(execution: tr.Execution, result: tr.ToolResult) -> None:
        try_assign("finalize", execution)

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        try_assign("pre", execution)
        return await call_next()

    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        return await call_next()

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        try_assign("post", execution)
        return tr.Accept()

    registry.register(make_tool(finalize_content=finalize))
    registry.pre_execute(pre)
    registry.guard(lambda execution: try_assign("guard", execution))
    registry.around_execute(around)
    registry.post_execute(post)
    registry.on_result(lambda execution, result: try_assign("observer", execution))

    result = await registry.execute(make_call())

    assert result.value == "ok"
    assert outcomes == dict.fromkeys(["pre", "guard", "post", "finalize", "observer"], True)


async def test_around_execute_may_replace_the_signal_and_the_callers_is_restored_after_it(
    registry: tr.ToolRegistry,
) -> None:
    caller = tr.CancelController()
    replacement = tr.CancelController()
    seen: dict[str, tr.CancelSignal] = {}
    stashed: list[tr.Execution] = []

    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        seen["before"] = execution.signal
        execution.signal = replacement.signal
        seen["installed"] = execution.signal
        result = await call_next()
        seen["after call_next"] = execution.signal
        stashed.append(execution)
        return result

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        seen["post"] = execution.signal
        return tr.Accept()

    registry.register(make_tool())
    registry.around_execute(around)
    registry.post_execute(post)
    registry.on_result(lambda execution, result: seen.update(observer=execution.signal))

    result = await registry.execute(make_call(signal=caller.signal))

    assert result.value == "ok"
    assert seen["before"] is caller.signal
    assert seen["installed"] is replacement.signal
    assert seen["after call_next"] is replacement.signal
    assert seen["post"] is caller.signal
    assert seen["observer"] is caller.signal
    assert raises_attribute_error(lambda: assign(stashed[0], "signal", replacement.signal))


async def test_the_signal_is_restored_even_when_around_execute_raises(
    registry: tr.ToolRegistry,
) -> None:
    caller = tr.CancelController()
    seen: list[tr.CancelSignal] = []

    def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        execution.signal = tr.CancelController().signal
        raise RuntimeError("after installing")

    registry.register(make_tool())
    registry.around_execute(around)
    registry.on_result(lambda execution, result: seen.append(execution.signal))

    result = await registry.execute(make_call(signal=caller.signal))

    assert_final_error(result, "after installing", None, "RuntimeError")
    assert seen == [caller.signal]


async def test_the_body_signal_fires_when_the_signal_installed_by_around_execute_fires(
    registry: tr.ToolRegistry,
) -> None:
    deadline = tr.CancelController()

    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        execution.signal = deadline.signal
        return await call_next()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        assert ctx.signal.cancelled is False
        deadline.cancel("deadline")
        await asyncio.wait_for(ctx.signal.wait(), 5)
        return "saw the deadline"

    registry.register(make_tool(execute=body, cancellation="cooperative"))
    registry.around_execute(around)

    result = await registry.execute(make_call())

    assert result.is_error is False
    assert result.value == "saw the deadline"
