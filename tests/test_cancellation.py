"""Cancellation and timeouts in the execute pipeline (pipeline.md, "Cancellation").

Every test proves ordering with ``asyncio.Event`` / ``threading.Event`` gates and bounds
its waits; the only real clock in use is a tool's own ``timeout``, the thing under test.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import pytest

import toolrail as tr
from helpers import (
    CallNext,
    PostNext,
    PreNext,
    assert_error,
    observe,
    one_turn,
    until,
    wait_forever,
)

NAME = "work"
ABORTED = "tool call aborted"
ABORTED_BEFORE = "tool call aborted before dispatch"

Body = Callable[[tr.JsonValue, tr.RunContext], Any]


def make_tool(
    execute: Body,
    *,
    timeout: float | None = None,
    cancellation: Literal["interrupt", "cooperative"] = "interrupt",
    finalize_content: Callable[[tr.Execution, tr.ToolResult], Sequence[tr.Content] | None]
    | None = None,
) -> tr.Tool:
    return tr.Tool(
        name=NAME,
        description="does some work",
        parameters={"type": "object"},
        execute=execute,
        timeout=timeout,
        cancellation=cancellation,
        finalize_content=finalize_content,
    )


def make_call(signal: tr.CancelSignal | None = None, arguments: Any = None) -> tr.ToolCall:
    return tr.ToolCall(
        call_id="call-1",
        name=NAME,
        arguments={} if arguments is None else arguments,
        signal=signal,
    )


def registry_for(
    body: Body, *, approver: tr.Approver | None = None, **options: Any
) -> tr.ToolRegistry:
    """A registry (with ``approver``) holding ``make_tool(body, **options)``."""
    registry = tr.ToolRegistry(approver=approver)
    registry.register(make_tool(body, **options))
    return registry


async def execute_until(
    registry: tr.ToolRegistry, started: asyncio.Event, signal: tr.CancelSignal | None = None
) -> asyncio.Task[tr.ToolResult]:
    """``registry.execute(make_call(signal))`` as a task, once the body has set ``started``."""
    task = asyncio.create_task(registry.execute(make_call(signal)))
    await until(started)
    return task


def logging_body(ran: list[str]) -> Body:
    """A body that notes "body" in ``ran`` and returns "done"."""

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ran.append("body")
        return "done"

    return body


async def task_cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait, bounded, until it is done."""
    task.cancel()
    await asyncio.wait({task}, timeout=5)


async def no_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
    raise AssertionError("a denied or failed call has no body")


def record_post(registry: tr.ToolRegistry) -> list[tr.ToolResult]:
    """Register a post-execute middleware that records the result it sees and accepts."""
    saw: list[tr.ToolResult] = []

    async def post(
        execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision:
        saw.append(result)
        return await call_next()

    registry.post_execute(post)
    return saw


async def still_running(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` is still running after the loop had every chance to finish it."""
    done, _ = await asyncio.wait({task}, timeout=0.05)
    return not done


class Recorder:
    """Records which stages of a call ran; every stage passes the call on."""

    def __init__(self, registry: tr.ToolRegistry) -> None:
        self.ran: list[str] = []
        self.around_saw: list[tr.ToolResult] = []
        self.post_saw: list[tr.ToolResult] = []
        registry.pre_execute(self.pre)
        registry.guard(self.guard)
        registry.around_execute(self.around)
        registry.post_execute(self.post)

    def pre(self, execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        self.ran.append("pre")
        return call_next()

    def guard(self, execution: tr.Execution) -> str | None:
        self.ran.append("guard")
        return None

    async def around(self, execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        self.ran.append("around")
        result = await call_next()
        self.around_saw.append(result)
        return result

    async def post(
        self, execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision:
        self.ran.append("post")
        self.post_saw.append(result)
        return await call_next()


# ---- before the body: stages 2-8 -------------------------------------------------------


async def test_a_call_cancelled_before_execute_is_aborted_before_dispatch() -> None:
    ran: list[str] = []
    finalized: list[tr.ToolResult] = []

    def finalize(execution: tr.Execution, result: tr.ToolResult) -> None:
        finalized.append(result)

    registry = registry_for(logging_body(ran), finalize_content=finalize)
    stages = Recorder(registry)
    seen = observe(registry)
    controller = tr.CancelController()
    controller.cancel()

    result = await registry.execute(make_call(controller.signal))

    assert_error(result, ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError")
    assert ran == []
    assert stages.ran == []
    assert len(finalized) == 1
    assert finalized[0].error == result.error
    assert len(seen) == 1
    assert seen[0][1] is result


async def test_finalize_content_may_replace_the_content_of_an_abort_before_dispatch() -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        return "done"

    def finalize(execution: tr.Execution, result: tr.ToolResult) -> list[tr.Content]:
        return [tr.TextContent("the call was stopped")]

    registry = registry_for(body, finalize_content=finalize)
    controller = tr.CancelController()
    controller.cancel()

    result = await registry.execute(make_call(controller.signal))

    assert result.content == (tr.TextContent("the call was stopped"),)
    assert result.error == tr.ErrorInfo(
        ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError"
    )


async def test_arguments_that_are_not_lossless_win_over_cancellation() -> None:
    ran: list[str] = []

    registry = registry_for(logging_body(ran))
    stages = Recorder(registry)
    seen = observe(registry)
    controller = tr.CancelController()
    controller.cancel()

    result = await registry.execute(make_call(controller.signal, arguments={"x": object()}))

    assert_error(result, "tool call arguments must be losslessly JSON-serializable", None, None)
    assert ran == []
    assert stages.ran == []
    assert len(seen) == 1
    arguments: object = seen[0][0].arguments
    assert arguments is tr.MISSING


async def test_cancelling_during_pre_execute_then_allowing_aborts_before_dispatch() -> None:
    ran: list[str] = []
    controller = tr.CancelController()

    def cancel_then_allow(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        controller.cancel()
        return tr.Allow()

    registry = registry_for(logging_body(ran))
    registry.pre_execute(cancel_then_allow)
    stages = Recorder(registry)
    seen = observe(registry)

    result = await registry.execute(make_call(controller.signal))

    assert_error(result, ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError")
    assert ran == []
    assert "around" not in stages.ran
    assert "post" not in stages.ran
    assert len(seen) == 1


async def test_a_pre_execute_denial_settling_after_cancellation_stays_the_denial() -> None:
    controller = tr.CancelController()

    def cancel_then_deny(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        controller.cancel()
        return tr.Deny("not now")

    registry = registry_for(no_body)
    registry.pre_execute(cancel_then_deny)
    post_saw = record_post(registry)
    seen = observe(registry)

    result = await registry.execute(make_call(controller.signal))

    assert_error(result, "not now", "DENIED", None)
    assert [r.error for r in post_saw] == [tr.ErrorInfo("not now", "DENIED", None)]
    assert len(seen) == 1


async def test_a_pre_execute_failure_settling_after_cancellation_stays_the_failure() -> None:
    controller = tr.CancelController()

    def cancel_then_fail(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        controller.cancel()
        raise tr.ToolError("policy store is down", code="POLICY_DOWN")

    registry = registry_for(no_body)
    registry.pre_execute(cancel_then_fail)

    result = await registry.execute(make_call(controller.signal))

    assert_error(result, "policy store is down", "POLICY_DOWN", "ToolError")


async def test_a_guard_denial_after_cancellation_stays_the_denial() -> None:
    controller = tr.CancelController()

    def cancel_then_deny(execution: tr.Execution) -> str | None:
        controller.cancel()
        return "guard says no"

    registry = registry_for(no_body)
    registry.guard(cancel_then_deny)

    result = await registry.execute(make_call(controller.signal))

    assert_error(result, "guard says no", "DENIED", None)


async def test_a_guard_denial_stays_the_denial_when_pre_execute_cancelled_first() -> None:
    controller = tr.CancelController()

    def cancel_then_allow(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        controller.cancel()
        return tr.Allow()

    registry = registry_for(no_body)
    registry.pre_execute(cancel_then_allow)
    registry.guard(lambda execution: "guard says no")

    result = await registry.execute(make_call(controller.signal))

    assert_error(result, "guard says no", "DENIED", None)


async def test_cancelling_in_around_execute_before_call_next_aborts_before_dispatch() -> None:
    ran: list[str] = []
    around_saw: list[tr.ToolResult] = []
    controller = tr.CancelController()

    async def cancel_then_continue(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        controller.cancel()
        result = await call_next()
        around_saw.append(result)
        return result

    registry = registry_for(logging_body(ran))
    registry.around_execute(cancel_then_continue)
    post_saw = record_post(registry)
    seen = observe(registry)

    result = await registry.execute(make_call(controller.signal))

    assert_error(result, ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError")
    assert ran == []
    assert [r.error for r in around_saw] == [
        tr.ErrorInfo(ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError")
    ]
    assert post_saw == []
    assert len(seen) == 1


# ---- an interrupt body ----------------------------------------------------------------


def interruptible(started: asyncio.Event, saw: list[str]) -> Callable[..., Any]:
    """A body that opens ``started``, waits forever, and notes the ``CancelledError``."""

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        try:
            await wait_forever()
        except asyncio.CancelledError:
            saw.append("CancelledError")
            raise
        return "finished anyway"

    return body


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


# ---- around-execute and the signal ----------------------------------------------------------


async def test_firing_a_signal_installed_by_around_execute_interrupts_the_body() -> None:
    started = asyncio.Event()
    body_saw: list[str] = []
    installed: list[tr.CancelController] = []
    caller = tr.CancelController()

    body = interruptible(started, body_saw)

    async def deadline(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        own = tr.CancelController()
        installed.append(own)
        execution.signal = own.signal
        return await call_next()

    registry = registry_for(body)
    registry.around_execute(deadline)

    task = await execute_until(registry, started, caller.signal)
    installed[0].cancel("deadline")
    result = await asyncio.wait_for(task, 5)

    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")
    assert body_saw == ["CancelledError"]
    assert caller.signal.cancelled is False
    assert caller.signal.reason is None


@pytest.mark.parametrize("which", ["caller", "installed"])
async def test_the_body_signal_fires_when_either_the_callers_or_the_installed_signal_fires(
    which: str,
) -> None:
    started = asyncio.Event()
    body_saw: list[bool] = []
    installed: list[tr.CancelController] = []
    caller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        await asyncio.wait_for(ctx.signal.wait(), 5)
        body_saw.append(ctx.signal.cancelled)
        return "finished"

    async def deadline(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        own = tr.CancelController()
        installed.append(own)
        execution.signal = own.signal
        return await call_next()

    registry = registry_for(body, cancellation="cooperative")
    registry.around_execute(deadline)

    task = await execute_until(registry, started, caller.signal)
    (caller if which == "caller" else installed[0]).cancel(f"{which} fired")
    result = await asyncio.wait_for(task, 5)

    assert body_saw == [True]
    if which == "caller":
        # the caller's signal fired and the outcome would be a success
        assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")
    else:
        # only the installed signal fired; the cooperative body still succeeded
        assert result.is_error is False
        assert result.value == "finished"
        assert caller.signal.cancelled is False


async def test_after_the_around_chain_the_execution_signal_is_the_callers_again() -> None:
    caller = tr.CancelController()
    installed = tr.CancelController()
    inside: list[tr.CancelSignal] = []
    after: list[tr.CancelSignal] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        return "done"

    async def replace(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        execution.signal = installed.signal
        inside.append(execution.signal)
        return await call_next()

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        after.append(execution.signal)
        return tr.Accept()

    registry = registry_for(body)
    registry.around_execute(replace)
    registry.post_execute(post)
    seen = observe(registry)

    result = await registry.execute(make_call(caller.signal))

    assert result.value == "done"
    assert inside == [installed.signal]
    assert after == [caller.signal]
    assert seen[0][0].signal is caller.signal


async def test_assigning_the_signal_outside_around_execute_raises_attribute_error() -> None:
    outcomes: dict[str, str] = {}
    replacement = tr.CancelController().signal

    def attempt(where: str, target: tr.Execution) -> None:
        try:
            target.signal = replacement
        except AttributeError:
            outcomes[where] = "AttributeError"
        except Exception as exc:
            outcomes[where] = type(exc).__name__
        else:
            outcomes[where] = "assigned"

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        attempt("body", ctx)
        return "done"

    def pre(execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        attempt("pre", execution)
        return call_next()

    def guard(execution: tr.Execution) -> str | None:
        attempt("guard", execution)
        return None

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        attempt("post", execution)
        return tr.Accept()

    def observer(execution: tr.Execution, result: tr.ToolResult) -> None:
        attempt("observer", execution)

    registry = registry_for(body)
    registry.pre_execute(pre)
    registry.guard(guard)
    registry.post_execute(post)
    registry.on_result(observer)
    seen = observe(registry)
    caller = tr.CancelController()

    result = await registry.execute(make_call(caller.signal))
    attempt("after execute", seen[0][0])

    assert result.value == "done"
    assert outcomes == {
        "pre": "AttributeError",
        "guard": "AttributeError",
        "body": "AttributeError",
        "post": "AttributeError",
        "observer": "AttributeError",
        "after execute": "AttributeError",
    }
    assert seen[0][0].signal is caller.signal


# ---- asyncio cancellation of the task running execute -------------------------------------


@pytest.mark.parametrize("with_signal", [False, True])
async def test_cancelling_the_task_interrupts_the_body_and_propagates(with_signal: bool) -> None:
    started = asyncio.Event()
    body_saw: list[str] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        try:
            await wait_forever()
        except asyncio.CancelledError:
            body_saw.append("CancelledError")
            await one_turn()
            body_saw.append("cleaned up")
            raise
        return "finished anyway"

    registry = registry_for(body)
    seen = observe(registry)
    caller = tr.CancelController()

    task = await execute_until(registry, started, caller.signal if with_signal else None)
    await task_cancelled(task)

    assert task.cancelled()
    assert body_saw == ["CancelledError", "cleaned up"]
    assert seen == []
    assert caller.signal.cancelled is False


@pytest.mark.parametrize("with_signal", [False, True])
async def test_cancelling_the_task_fires_the_interrupt_body_signal_with_reason_cancelled(
    with_signal: bool,
) -> None:
    started = asyncio.Event()
    body_saw: list[tuple[bool, str | None]] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        try:
            await wait_forever()
        except asyncio.CancelledError:
            body_saw.append((ctx.signal.cancelled, ctx.signal.reason))
            raise
        return "finished anyway"

    registry = registry_for(body)
    caller = tr.CancelController()

    task = await execute_until(registry, started, caller.signal if with_signal else None)
    await task_cancelled(task)

    assert task.cancelled()
    assert body_saw == [(True, "cancelled")]


@pytest.mark.parametrize("with_signal", [False, True])
async def test_a_task_cancellation_the_body_swallows_still_propagates(with_signal: bool) -> None:
    started = asyncio.Event()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        try:
            await wait_forever()
        except asyncio.CancelledError:
            return "swallowed"
        return "finished anyway"

    registry = registry_for(body)
    seen = observe(registry)
    caller = tr.CancelController()

    task = await execute_until(registry, started, caller.signal if with_signal else None)
    await task_cancelled(task)

    assert task.cancelled(), f"execute returned {task.result()!r}"
    assert seen == []


async def test_cancelling_the_task_fires_a_cooperative_body_signal_and_waits_for_the_body() -> None:
    started = asyncio.Event()
    saw_signal = asyncio.Event()
    release = asyncio.Event()
    body_saw: list[tuple[bool, str | None]] = []
    finished: list[bool] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        await asyncio.wait_for(ctx.signal.wait(), 5)
        body_saw.append((ctx.signal.cancelled, ctx.signal.reason))
        saw_signal.set()
        await until(release)
        finished.append(True)
        return "finished"

    registry = registry_for(body, cancellation="cooperative")
    seen = observe(registry)
    caller = tr.CancelController()

    task = await execute_until(registry, started, caller.signal)
    task.cancel()
    await until(saw_signal)
    assert not task.done()
    release.set()
    await asyncio.wait({task}, timeout=5)

    assert body_saw == [(True, "cancelled")]
    assert finished == [True]
    assert task.cancelled()
    assert seen == []
    assert caller.signal.cancelled is False


async def test_cancelling_the_task_waits_out_a_sync_body_and_fires_its_signal() -> None:
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    release = threading.Event()
    finished = threading.Event()
    body_saw: list[tuple[bool, str | None]] = []

    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        loop.call_soon_threadsafe(started.set)
        release.wait(5)
        body_saw.append((ctx.signal.cancelled, ctx.signal.reason))
        finished.set()
        return "finished"

    registry = registry_for(body)
    seen = observe(registry)

    task = await execute_until(registry, started)
    task.cancel()
    try:
        assert await still_running(task)
    finally:
        release.set()
    await asyncio.wait({task}, timeout=5)

    assert finished.is_set()
    assert body_saw == [(True, "cancelled")]
    assert task.cancelled()
    assert seen == []


# ---- approval ------------------------------------------------------------------------------


@pytest.mark.parametrize("approver_does", ["re-raises", "allows once", "rejects"])
async def test_a_pending_approver_is_cancelled_and_awaited_when_the_signal_fires(
    approver_does: str,
) -> None:
    started = asyncio.Event()
    approver_saw: list[str] = []
    requests: list[tr.ApprovalRequest] = []
    ran: list[str] = []
    controller = tr.CancelController()

    async def approver(request: tr.ApprovalRequest) -> tr.ApprovalOutcome:
        requests.append(request)
        started.set()
        try:
            await wait_forever()
        except asyncio.CancelledError:
            approver_saw.append("CancelledError")
            await one_turn()
            approver_saw.append("finished")
            if approver_does == "re-raises":
                raise
            if approver_does == "rejects":
                return tr.ApprovalOutcome.REJECTED
        return tr.ApprovalOutcome.ALLOWED_ONCE

    registry = registry_for(logging_body(ran), approver=approver)
    registry.pre_execute(lambda execution, call_next: tr.Ask("may I?"))
    post_saw = record_post(registry)
    seen = observe(registry)

    task = await execute_until(registry, started, controller.signal)
    controller.cancel()
    result = await asyncio.wait_for(task, 5)

    assert_error(result, ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError")
    assert approver_saw == ["CancelledError", "finished"]
    assert requests[0].signal is controller.signal
    assert requests[0].reason == "may I?"
    assert ran == []
    assert post_saw == []
    assert len(seen) == 1


@pytest.mark.parametrize("approver_does", ["re-raises", "allows once"])
async def test_cancelling_the_task_cancels_and_awaits_a_pending_approver(
    approver_does: str,
) -> None:
    started = asyncio.Event()
    approver_saw: list[str] = []
    ran: list[str] = []
    controller = tr.CancelController()

    async def approver(request: tr.ApprovalRequest) -> tr.ApprovalOutcome:
        started.set()
        try:
            await wait_forever()
        except asyncio.CancelledError:
            approver_saw.append("CancelledError")
            await one_turn()
            approver_saw.append("finished")
            if approver_does == "re-raises":
                raise
        return tr.ApprovalOutcome.ALLOWED_ONCE

    registry = registry_for(logging_body(ran), approver=approver)
    registry.pre_execute(lambda execution, call_next: tr.Ask())
    seen = observe(registry)

    task = await execute_until(registry, started, controller.signal)
    await task_cancelled(task)

    assert approver_saw == ["CancelledError", "finished"]
    assert task.cancelled(), f"execute returned {task.result()!r}"
    assert ran == []
    assert seen == []


# ---- quiescence --------------------------------------------------------------------------


@pytest.mark.parametrize("cancellation", ["interrupt", "cooperative"])
@pytest.mark.parametrize("trigger", ["signal", "timeout"])
async def test_nothing_the_library_started_runs_after_execute_returns(
    cancellation: Literal["interrupt", "cooperative"], trigger: str
) -> None:
    started = asyncio.Event()
    finished: list[bool] = []
    controller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        try:
            if cancellation == "cooperative":
                await asyncio.wait_for(ctx.signal.wait(), 5)
            else:
                await wait_forever()
        finally:
            for _ in range(3):
                await one_turn()
            finished.append(True)
        return "finished"

    registry = tr.ToolRegistry()
    timeout = 0.05 if trigger == "timeout" else None
    registry.register(make_tool(body, timeout=timeout, cancellation=cancellation))

    async def canceller() -> None:
        await until(started)
        if trigger == "signal":
            controller.cancel()

    helper = asyncio.create_task(canceller())
    before = asyncio.all_tasks()
    result = await registry.execute(make_call(controller.signal))
    after = asyncio.all_tasks()

    assert finished == [True]
    assert after - before == set()
    assert result.error is not None
    assert result.error.code == ("ABORTED" if trigger == "signal" else "TOOL_TIMEOUT")
    await asyncio.wait_for(helper, 5)
