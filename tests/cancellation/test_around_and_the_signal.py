"""Cancellation seen by around-execute (the signal it may install) and by the approver
(spec: pipeline.md, "Around and the signal", "Approval", "Cancellation").

Every test proves ordering with ``asyncio.Event`` gates and bounds its waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

import toolrail as tr
from cancellation_helpers import (
    execute_until,
    interruptible,
    logging_body,
    make_call,
    record_post,
    registry_for,
    task_cancelled,
)
from helpers import (
    ABORTED,
    ABORTED_BEFORE,
    CallNext,
    PostNext,
    PreNext,
    assert_error,
    observe,
    one_turn,
    wait_forever,
)

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


# ---- approval ------------------------------------------------------------------------------


def pending_approver(
    started: asyncio.Event,
    approver_saw: list[str],
    approver_does: str,
    requests: list[tr.ApprovalRequest],
) -> Callable[[tr.ApprovalRequest], Awaitable[tr.ApprovalOutcome]]:
    """An approver that notes its request, opens ``started`` and waits; cancelled, it
    notes "CancelledError", takes a turn, notes "finished", then does as
    ``approver_does`` says: "re-raises", "rejects" or "allows once"."""

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

    return approver


@pytest.mark.parametrize("approver_does", ["re-raises", "allows once", "rejects"])
async def test_a_pending_approver_is_cancelled_and_awaited_when_the_signal_fires(
    approver_does: str,
) -> None:
    started = asyncio.Event()
    approver_saw: list[str] = []
    requests: list[tr.ApprovalRequest] = []
    ran: list[str] = []
    controller = tr.CancelController()
    approver = pending_approver(started, approver_saw, approver_does, requests)

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
    approver = pending_approver(started, approver_saw, approver_does, [])

    registry = registry_for(logging_body(ran), approver=approver)
    registry.pre_execute(lambda execution, call_next: tr.Ask())
    seen = observe(registry)

    task = await execute_until(registry, started, controller.signal)
    await task_cancelled(task)

    assert approver_saw == ["CancelledError", "finished"]
    assert task.cancelled(), f"execute returned {task.result()!r}"
    assert ran == []
    assert seen == []
