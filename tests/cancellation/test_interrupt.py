"""pipeline.md "Cancellation": ``cancellation="interrupt"`` (default): "when the body
signal fires, an async body is cancelled (``CancelledError`` at its next ``await``); the
registry waits for it to finish. A body ended this way has not *failed*: its dispatch
result is ``tool call aborted`` (``ABORTED``)".

Cooperative bodies: test_cooperative.py; the tool's timeout: test_timeout.py; the task
running ``execute`` cancelled: test_the_task_running_execute_is_cancelled.py.
Every test proves ordering with gates (``asyncio.Event``, ``threading.Event`` for a
worker thread) and bounds its waits; nothing synchronizes with sleeps.
"""

from __future__ import annotations

import asyncio

import pytest

import toolrail as tr
from cancellation_helpers import (
    Recorder,
    execute_until,
    interruptible,
    make_call,
    make_tool,
    registry_for,
)
from helpers import ABORTED, assert_error, observe, one_turn, until, wait_forever


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

