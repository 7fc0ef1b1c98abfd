"""pipeline.md "Approval", the rows "the call's signal fires while the approver is
pending" (the registry cancels the pending approver, waits for it, and the result is
``ABORTED_BEFORE_DISPATCH``, whatever the approver returns) and "the task running
``execute`` is cancelled while the approver is pending" (the approver is cancelled and
awaited, then ``CancelledError`` propagates); in a batch too (scheduler.md
"Cancellation": the batch signal is combined with each call's own signal).

Every test proves ordering with gates (``asyncio.Event``, ``threading.Event`` for a
worker thread) and bounds its waits; nothing synchronizes with sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import toolrail as tr
from cancellation_helpers import (
    execute_until,
    logging_body,
    record_post,
    registry_for,
    task_cancelled,
)
from helpers import ABORTED_BEFORE, PreNext, assert_error, observe, one_turn, wait_forever, within
from scheduler_cancellation_helpers import Lab, assert_aborted, assert_aborted_before_dispatch, call


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


async def test_a_pending_approver_is_cancelled_when_the_batch_signal_fires() -> None:
    lab = Lab()
    controller = tr.CancelController()
    asking = asyncio.Event()
    approver_cancelled: list[str] = []

    async def approver(request: tr.ApprovalRequest) -> tr.ApprovalOutcome:
        asking.set()
        try:
            await within(asyncio.Event().wait())
        except asyncio.CancelledError:
            approver_cancelled.append(request.call_id)
            raise
        return tr.ApprovalOutcome.ALLOWED_ONCE

    lab.registry.approver = approver

    def pre(execution: tr.Execution, call_next: PreNext) -> Any:
        return tr.Ask("check") if execution.call_id == "c1" else call_next()

    lab.registry.pre_execute(pre)
    stream = lab.registry.stream([call(0), call(1), call(2)], signal=controller.signal)

    async with contextlib.aclosing(stream):
        pending = asyncio.ensure_future(stream.__anext__())
        await lab.wait_started("c0")
        await within(asking.wait())
        controller.cancel()
        items = [await within(pending)]
        items += [item async for item in stream]

    assert approver_cancelled == ["c1"]
    assert [item.started for item in items] == [True, False, False]
    assert_aborted(items[0].result)
    assert_aborted_before_dispatch(items[1].result)
    assert_aborted_before_dispatch(items[2].result)
    assert lab.commits() == ["c0", "c1", "c2"]

