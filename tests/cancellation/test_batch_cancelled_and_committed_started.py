"""scheduler.md "Cancellation": "``Batch.cancelled`` is ``True`` when the batch signal had
fired by the time ``run`` returns; the contexts of committed calls are still returned:
the caller decides whether to deliver them." (``Committed.started`` is ``False``
exactly for ``ABORTED_BEFORE_DISPATCH``: checked by the tests of the other batch
cancellation files.)

Bodies record their start and end and wait on per-call gates; every wait is bounded
by ``asyncio.wait_for(..., 5)``; nothing synchronizes with sleeps.
"""

from __future__ import annotations

import asyncio

import toolrail as tr
from helpers import within
from scheduler_cancellation_helpers import (
    Lab,
    assert_aborted,
    assert_aborted_before_dispatch,
    call,
    texts,
)


async def test_a_cancelled_batch_still_returns_the_contexts_of_committed_calls() -> None:
    lab = Lab()
    controller = tr.CancelController()
    lab.release("c0")
    calls = [call(0), call(1), call(2, "solo")]
    task = asyncio.create_task(lab.registry.run(calls, signal=controller.signal))

    await within(lab.committed["c0"].wait())
    await lab.wait_started("c1")
    controller.cancel()
    batch = await within(task)

    assert batch.results[0].value == "c0"
    assert_aborted(batch.results[1])
    assert_aborted_before_dispatch(batch.results[2])
    assert texts(batch.contexts) == ["from c0", "from c1"]
    assert batch.cancelled is True


async def test_batch_cancelled_is_true_when_the_signal_fired_after_the_last_commit() -> None:
    lab = Lab()
    controller = tr.CancelController()
    lab.release("c0", "c1")

    def stop(execution: tr.Execution, result: tr.ToolResult) -> None:
        if execution.call_id == "c1":
            controller.cancel()

    lab.registry.on_result(stop)

    batch = await within(lab.registry.run([call(0), call(1)], signal=controller.signal))

    assert [r.value for r in batch.results] == ["c0", "c1"]
    assert batch.cancelled is True


async def test_batch_cancelled_is_false_when_the_signal_never_fired() -> None:
    lab = Lab()
    lab.release("c0")
    controller = tr.CancelController()

    batch = await within(lab.registry.run([call(0)], signal=controller.signal))

    assert batch.cancelled is False
    assert batch.results[0].value == "c0"

