"""scheduler.md "Cancellation": "Already cancelled when the batch starts: nothing is
dispatched and no middleware, guard or body runs; each call gets its argument-snapshot
error if its arguments are not lossless JSON, else ``ABORTED_BEFORE_DISPATCH`` (one
result and one notification each)." The batch signal is combined with each call's own
signal: a call whose own signal already fired is the only one aborted.

Bodies record their start and end and wait on per-call gates; every wait is bounded
by ``asyncio.wait_for(..., 5)``; nothing synchronizes with sleeps.
"""

from __future__ import annotations

import contextlib

import toolrail as tr
from helpers import assert_error, within
from scheduler_cancellation_helpers import (
    NAN,
    NOT_LOSSLESS,
    Lab,
    assert_aborted_before_dispatch,
    call,
)


async def test_an_already_cancelled_batch_runs_nothing_and_aborts_every_call_before_dispatch() -> (
    None
):
    lab = Lab()
    controller = tr.CancelController()
    controller.cancel("stop")
    calls = [
        call(0),
        call(1, "solo"),
        call(2, arguments=NAN),
        call(3, "missing"),
        call(4, "polite"),
        call(5, "solo", arguments=NAN),
    ]

    batch = await within(lab.registry.run(calls, signal=controller.signal))

    assert lab.log == ["commit c0", "commit c1", "commit c2", "commit c3", "commit c4", "commit c5"]
    assert lab.stages == []  # no middleware, guard or body ran
    for i in (0, 1, 3, 4):
        assert_aborted_before_dispatch(batch.results[i])
    assert_error(batch.results[2], NOT_LOSSLESS, None, None)
    assert_error(batch.results[5], NOT_LOSSLESS, None, None)
    assert [seen for _, seen in lab.notified] == list(batch.results)
    assert batch.cancelled is True
    assert batch.contexts == ()
    assert batch.concludes_turn is False


async def test_a_stream_of_an_already_cancelled_batch_yields_calls_not_started() -> None:
    lab = Lab()
    controller = tr.CancelController()
    controller.cancel()
    calls = [call(0), call(1, arguments=NAN), call(2, "solo")]

    stream = lab.registry.stream(calls, signal=controller.signal)
    async with contextlib.aclosing(stream):
        items = [item async for item in stream]

    assert [(item.index, item.started) for item in items] == [(0, False), (1, True), (2, False)]
    assert [item.call for item in items] == calls
    assert_aborted_before_dispatch(items[0].result)
    assert_error(items[1].result, NOT_LOSSLESS, None, None)
    assert lab.stages == []
    assert lab.commits() == ["c0", "c1", "c2"]


async def test_a_call_whose_own_signal_already_fired_is_the_only_one_aborted_before_dispatch() -> (
    None
):
    lab = Lab()
    lab.release("c0", "c2")
    own = tr.CancelController()
    own.cancel()
    calls = [call(0), call(1, signal=own.signal), call(2)]

    async with contextlib.aclosing(lab.registry.stream(calls)) as stream:
        items = [item async for item in stream]

    assert [item.started for item in items] == [True, False, True]
    assert_aborted_before_dispatch(items[1].result)
    assert [items[0].result.value, items[2].result.value] == ["c0", "c2"]
    assert sorted(lab.starts()) == ["c0", "c2"]


async def test_an_empty_batch_with_an_already_cancelled_signal_reports_cancelled() -> None:
    registry = tr.ToolRegistry()
    controller = tr.CancelController()
    controller.cancel()

    batch = await within(registry.run([], signal=controller.signal))

    assert batch == tr.Batch(results=(), contexts=(), cancelled=True, concludes_turn=False)

