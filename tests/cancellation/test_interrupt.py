"""Cancellation and timeouts of a running body (pipeline.md, "Cancellation", "Timeout"):
an ``"interrupt"`` body, a ``"cooperative"`` body, a sync body in a worker thread, and
the tool's timeout.

What happens before the body: test_aborted_before_dispatch.py; around-execute's signal
and the approver: test_cancellation_signal.py; asyncio cancellation of the task and
quiescence: test_cancellation_task.py. Every test proves ordering with
``asyncio.Event`` / ``threading.Event`` gates and bounds its waits; the only real clock
in use is a tool's own ``timeout``, the thing under test.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

import toolrail as tr
from cancellation_helpers import (
    NAME,
    Recorder,
    execute_until,
    interruptible,
    make_call,
    make_tool,
    registry_for,
    still_running,
)
from helpers import (
    ABORTED,
    CallNext,
    PostNext,
    assert_error,
    observe,
    one_turn,
    until,
    wait_forever,
)


async def test_an_interrupt_body_cancelled_mid_await_is_aborted() -> None:
    started = asyncio.Event()
    body_saw: list[str] = []
    controller = tr.CancelController()

    body = interruptible(started, body_saw)

    registry = registry_for(body)
    stages = Recorder(registry)
    seen = observe(registry)

    task = await execute_until(registry, started, controller.signal)
    controller.cancel("stop")
    result = await asyncio.wait_for(task, 5)

    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")
    assert body_saw == ["CancelledError"]
    aborted = tr.ErrorInfo(ABORTED, "ABORTED", "ToolAbortedError")
    assert [r.error for r in stages.around_saw] == [aborted]
    assert [r.error for r in stages.post_saw] == [aborted]
    assert len(seen) == 1


async def test_a_body_that_swallows_its_interruption_and_returns_is_still_aborted() -> None:
    started = asyncio.Event()
    controller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        try:
            await wait_forever()
        except asyncio.CancelledError:
            return "I am fine"
        return "never interrupted"

    registry = registry_for(body)

    task = await execute_until(registry, started, controller.signal)
    controller.cancel()
    result = await asyncio.wait_for(task, 5)

    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")


async def test_a_body_that_cancels_its_own_callers_controller_and_awaits_is_interrupted() -> None:
    controller = tr.CancelController()
    body_saw: list[str] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        controller.cancel("self-inflicted")
        try:
            await wait_forever()
        except asyncio.CancelledError:
            body_saw.append("CancelledError")
            raise
        except TimeoutError:
            body_saw.append("never interrupted")
        return "finished anyway"

    registry = registry_for(body)

    result = await asyncio.wait_for(registry.execute(make_call(controller.signal)), 10)

    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")
    assert body_saw == ["CancelledError"]


async def test_a_body_that_cancels_its_caller_and_returns_at_once_leaves_no_stray_cancel() -> None:
    controller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        controller.cancel()
        return "done"

    registry = registry_for(body)

    result = await registry.execute(make_call(controller.signal))

    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await one_turn()  # a left-over cancellation request would raise here


@pytest.mark.parametrize("how", ["signal", "timeout", "approver"])
async def test_the_callers_task_is_not_left_cancelling_after_an_interruption(how: str) -> None:
    started = asyncio.Event()
    controller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        await wait_forever()
        return "finished anyway"

    async def approver(request: tr.ApprovalRequest) -> tr.ApprovalOutcome:
        started.set()
        await wait_forever()
        return tr.ApprovalOutcome.ALLOWED_ONCE

    registry = tr.ToolRegistry(approver=approver)
    registry.register(make_tool(body, timeout=0.05 if how == "timeout" else None))
    if how == "approver":
        registry.pre_execute(lambda execution, call_next: tr.Ask())

    async def canceller() -> None:
        await until(started)
        if how != "timeout":
            controller.cancel()

    helper = asyncio.create_task(canceller())
    result = await registry.execute(make_call(controller.signal))
    await asyncio.wait_for(helper, 5)

    assert result.is_error
    assert result.error is not None
    expected = {
        "signal": "ABORTED",
        "timeout": "TOOL_TIMEOUT",
        "approver": "ABORTED_BEFORE_DISPATCH",
    }[how]
    assert result.error.code == expected
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await one_turn()  # a left-over cancellation request would raise here


@pytest.mark.parametrize("with_signal", [False, True])
async def test_a_cancelled_error_the_body_raises_on_its_own_is_a_failure(
    with_signal: bool,
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        raise asyncio.CancelledError("gave up on my own")

    registry = registry_for(body)
    signal = tr.CancelController().signal if with_signal else None

    result = await asyncio.wait_for(registry.execute(make_call(signal)), 5)

    assert_error(result, "gave up on my own", None, "CancelledError")


# ---- a cooperative body -----------------------------------------------------------------


async def test_a_cooperative_body_that_returns_after_the_signal_is_aborted_with_contexts() -> None:
    started = asyncio.Event()
    body_saw: list[tuple[bool, str | None]] = []
    controller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        await asyncio.wait_for(ctx.signal.wait(), 5)
        body_saw.append((ctx.signal.cancelled, ctx.signal.reason))
        await one_turn()  # still running after the signal fired
        ctx.defer_context("deferred by the body")
        return "finished"

    post_context = tr.ContextMessage((tr.TextContent("from post-execute"),), "policy")
    post_saw: list[tr.ToolResult] = []

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        post_saw.append(result)
        return tr.Accept(contexts=(post_context,))

    registry = registry_for(body, cancellation="cooperative")
    registry.post_execute(post)
    seen = observe(registry)

    task = await execute_until(registry, started, controller.signal)
    controller.cancel("stop")
    result = await asyncio.wait_for(task, 5)

    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")
    assert body_saw == [(True, "stop")]
    deferred = tr.ContextMessage((tr.TextContent("deferred by the body"),), NAME)
    assert result.contexts == (deferred, post_context)
    assert len(post_saw) == 1
    assert post_saw[0].is_error is False
    assert post_saw[0].value == "finished"
    assert len(seen) == 1


async def test_a_cooperative_body_that_raises_after_the_signal_gives_that_failure() -> None:
    started = asyncio.Event()
    controller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        await asyncio.wait_for(ctx.signal.wait(), 5)
        raise tr.ToolError("stopped half way", code="HALF_WAY")

    registry = registry_for(body, cancellation="cooperative")

    task = await execute_until(registry, started, controller.signal)
    controller.cancel()
    result = await asyncio.wait_for(task, 5)

    assert_error(result, "stopped half way", "HALF_WAY", "ToolError")


async def test_a_cooperative_body_is_not_interrupted_by_the_signal() -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    body_saw: list[str] = []
    controller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        try:
            await until(release)
        except asyncio.CancelledError:
            body_saw.append("CancelledError")
            raise
        body_saw.append(f"released, cancelled={ctx.signal.cancelled}")
        return "finished"

    registry = registry_for(body, cancellation="cooperative")

    task = await execute_until(registry, started, controller.signal)
    controller.cancel()
    assert await still_running(task)
    release.set()
    result = await asyncio.wait_for(task, 5)

    assert body_saw == ["released, cancelled=True"]
    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")


@pytest.mark.parametrize("post_does", ["blocks", "raises"])
async def test_post_execute_blocking_or_failing_after_cancellation_gives_that_outcome(
    post_does: str,
) -> None:
    started = asyncio.Event()
    controller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        await asyncio.wait_for(ctx.signal.wait(), 5)
        return "finished"

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Block:
        if post_does == "raises":
            raise tr.ToolError("audit log unavailable", code="AUDIT")
        return tr.Block("not shown to the model")

    registry = registry_for(body, cancellation="cooperative")
    registry.post_execute(post)

    task = await execute_until(registry, started, controller.signal)
    controller.cancel()
    result = await asyncio.wait_for(task, 5)

    if post_does == "blocks":
        assert result.error == tr.ErrorInfo("not shown to the model", "BLOCKED")
        assert result.content == (tr.TextContent("not shown to the model"),)
    else:
        assert_error(result, "audit log unavailable", "AUDIT", "ToolError")


# ---- a sync body in a worker thread -------------------------------------------------------


async def test_a_sync_body_in_a_worker_thread_is_waited_out() -> None:
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    release = threading.Event()
    finished = threading.Event()
    body_saw: list[bool] = []
    controller = tr.CancelController()

    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        loop.call_soon_threadsafe(started.set)
        release.wait(5)
        body_saw.append(ctx.signal.cancelled)
        finished.set()
        return "finished"

    registry = registry_for(body)

    task = await execute_until(registry, started, controller.signal)
    controller.cancel()
    try:
        assert await still_running(task)
    finally:
        release.set()
    result = await asyncio.wait_for(task, 5)

    assert finished.is_set()
    assert body_saw == [True]
    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")


# ---- timeout ------------------------------------------------------------------------------


async def test_an_interrupt_body_exceeding_its_timeout_times_out() -> None:
    body_saw: list[bool] = []
    cleaned_up: list[bool] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        try:
            await wait_forever()
        except asyncio.CancelledError:
            body_saw.append(ctx.signal.cancelled)
            await one_turn()
            cleaned_up.append(True)
            raise
        return "finished anyway"

    registry = registry_for(body, timeout=0.05)
    stages = Recorder(registry)

    result = await asyncio.wait_for(registry.execute(make_call()), 5)

    assert_error(result, "tool call timed out after 0.05s", "TOOL_TIMEOUT", "ToolTimeoutError")
    assert body_saw == [True]
    assert cleaned_up == [True]
    timed_out = tr.ErrorInfo("tool call timed out after 0.05s", "TOOL_TIMEOUT", "ToolTimeoutError")
    assert [r.error for r in stages.around_saw] == [timed_out]
    assert [r.error for r in stages.post_saw] == [timed_out]


async def test_the_timeout_message_uses_the_general_number_format() -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        await wait_forever()
        return "finished anyway"

    registry = registry_for(body, timeout=0.0625)

    result = await asyncio.wait_for(registry.execute(make_call()), 5)

    assert_error(result, "tool call timed out after 0.0625s", "TOOL_TIMEOUT", "ToolTimeoutError")


async def test_a_body_finishing_within_its_timeout_succeeds() -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        await one_turn()
        return "quick"

    registry = registry_for(body, timeout=5)

    result = await asyncio.wait_for(registry.execute(make_call()), 5)

    assert result.is_error is False
    assert result.value == "quick"


async def test_a_sync_body_exceeding_its_timeout_is_waited_out_and_times_out() -> None:
    body_saw: list[bool] = []
    finished = threading.Event()

    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        threading.Event().wait(0.3)  # outlives its 0.05 s timeout
        body_saw.append(ctx.signal.cancelled)
        finished.set()
        return "late"

    registry = registry_for(body, timeout=0.05)

    result = await asyncio.wait_for(registry.execute(make_call()), 5)

    assert finished.is_set()
    assert body_saw == [True]
    assert_error(result, "tool call timed out after 0.05s", "TOOL_TIMEOUT", "ToolTimeoutError")


@pytest.mark.parametrize("ending", ["returns", "raises"])
async def test_a_cooperative_body_with_a_timeout_sees_its_signal_and_times_out(
    ending: str,
) -> None:
    body_saw: list[bool] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        await asyncio.wait_for(ctx.signal.wait(), 5)
        body_saw.append(ctx.signal.cancelled)
        if ending == "raises":
            raise tr.ToolError("ran out of time", code="MY_CODE")
        return "partial answer"

    registry = registry_for(body, timeout=0.05, cancellation="cooperative")

    result = await asyncio.wait_for(registry.execute(make_call()), 5)

    assert body_saw == [True]
    assert_error(result, "tool call timed out after 0.05s", "TOOL_TIMEOUT", "ToolTimeoutError")


async def test_the_timeout_applies_per_attempt_of_a_retry_wrapper() -> None:
    attempts: list[tr.ToolResult] = []
    started_cancelled: list[bool] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started_cancelled.append(ctx.signal.cancelled)
        await wait_forever()
        return "finished anyway"

    async def retry(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        attempts.append(await call_next())
        attempts.append(await call_next())
        return attempts[-1]

    registry = registry_for(body, timeout=0.05)
    registry.around_execute(retry)

    result = await asyncio.wait_for(registry.execute(make_call()), 5)

    timed_out = tr.ErrorInfo("tool call timed out after 0.05s", "TOOL_TIMEOUT", "ToolTimeoutError")
    assert [r.error for r in attempts] == [timed_out, timed_out]
    assert started_cancelled == [False, False]
    assert_error(result, "tool call timed out after 0.05s", "TOOL_TIMEOUT", "ToolTimeoutError")
