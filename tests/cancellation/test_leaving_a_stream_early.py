"""scheduler.md "Cancellation": "Leaving a ``stream`` early (``await stream.aclose()``, or
leaving an ``async with contextlib.aclosing(stream)`` block) acts like a batch
cancellation [...]; only then does ``aclose()`` return. Nothing more is yielded. A
stream's batch starts at its first ``__anext__()`` [...]. (A bare ``break`` cannot
notify an async iterator; the stream then closes when it is finalized.)"

Bodies record their start and end and wait on per-call gates; every wait is bounded
by ``asyncio.wait_for(..., 5)``; nothing synchronizes with sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc

import pytest

import toolrail as tr
from helpers import assert_error, within
from scheduler_cancellation_helpers import (
    NAN,
    NOT_LOSSLESS,
    Lab,
    assert_aborted,
    assert_aborted_before_dispatch,
    call,
)


async def test_aclose_while_every_started_call_has_committed_aborts_the_rest_before_dispatch() -> (
    None
):
    lab = Lab()
    lab.release("c0")
    calls = [call(0, "solo"), call(1, "solo"), call(2)]
    stream = lab.registry.stream(calls)

    first = await within(stream.__anext__())
    await within(stream.aclose())

    assert first.result.value == "c0"
    assert sorted(lab.starts()) == ["c0"]
    assert lab.commits() == ["c0", "c1", "c2"]
    assert_aborted_before_dispatch(lab.notified[1][1])
    assert_aborted_before_dispatch(lab.notified[2][1])


async def test_aclose_cancels_the_batch_and_commits_every_call_before_it_returns() -> None:
    lab = Lab()
    lab.release("c0")
    calls = [call(0), call(1), call(2, "polite"), call(3, "solo"), call(4, arguments=NAN)]
    before = asyncio.all_tasks()
    stream = lab.registry.stream(calls)

    first = await within(stream.__anext__())
    await lab.wait_started("c1", "c2")
    await within(stream.aclose())

    assert first.index == 0
    assert first.result.value == "c0"
    assert lab.commits() == ["c0", "c1", "c2", "c3", "c4"]  # all notified before it returned
    results = [result for _, result in lab.notified]
    assert_aborted(results[1])
    assert_aborted(results[2])
    assert_aborted_before_dispatch(results[3])
    assert_error(results[4], NOT_LOSSLESS, None, None)
    assert "interrupted c1" in lab.log
    assert lab.signal_at_end == {"c0": False, "c1": True, "c2": True}
    assert sorted(lab.starts()) == ["c0", "c1", "c2"]
    assert "post c1" in lab.stages  # in-flight calls commit as usual
    assert asyncio.all_tasks() == before
    with pytest.raises(StopAsyncIteration):
        await within(stream.__anext__())  # nothing more is yielded
    assert len(lab.notified) == 5


async def test_leaving_an_aclosing_block_early_acts_like_a_batch_cancellation() -> None:
    lab = Lab()
    lab.release("c0")
    calls = [call(0), call(1, "polite"), call(2), call(3, "solo")]
    before = asyncio.all_tasks()
    got: list[tr.Committed] = []

    async with contextlib.aclosing(lab.registry.stream(calls)) as stream:
        async for item in stream:
            got.append(item)
            await lab.wait_started("c1", "c2")
            break

    assert [item.index for item in got] == [0]
    assert lab.commits() == ["c0", "c1", "c2", "c3"]
    results = [result for _, result in lab.notified]
    assert_aborted(results[1])
    assert_aborted(results[2])
    assert_aborted_before_dispatch(results[3])
    assert lab.signal_at_end == {"c0": False, "c1": True, "c2": True}
    assert sorted(lab.starts()) == ["c0", "c1", "c2"]
    assert asyncio.all_tasks() == before
    with pytest.raises(StopAsyncIteration):
        await within(stream.__anext__())


async def test_a_stream_closed_before_its_first_anext_runs_and_notifies_nothing() -> None:
    lab = Lab()
    lab.release("c0", "c1")
    stream = lab.registry.stream([call(0), call(1, "solo")])

    await within(stream.aclose())

    assert lab.log == []
    assert lab.stages == []
    with pytest.raises(StopAsyncIteration):
        await within(stream.__anext__())
    assert lab.log == []


async def test_a_stream_left_with_a_bare_break_closes_when_it_is_finalized() -> None:
    lab = Lab()
    lab.release("c0")
    calls = [call(0), call(1), call(2, "solo")]

    async def consume() -> None:
        async for _item in lab.registry.stream(calls):
            await lab.wait_started("c1")
            break

    await within(consume())
    gc.collect()
    await within(lab.committed["c2"].wait())

    assert lab.commits() == ["c0", "c1", "c2"]
    assert_aborted(lab.notified[1][1])
    assert_aborted_before_dispatch(lab.notified[2][1])

