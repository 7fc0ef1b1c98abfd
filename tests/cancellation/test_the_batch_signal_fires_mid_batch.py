"""scheduler.md "Cancellation": the batch signal "Fires mid-batch: no further call starts.
Calls already dispatching see the signal (pipeline.md, "Cancellation"), are awaited, and
commit in order. Every call that had not started then gets ``ABORTED_BEFORE_DISPATCH``
(its argument-snapshot error takes precedence), in model order."

Also: cancelling one call's own signal (combined with the batch signal), and a call
whose prepare was in progress. Failures of the scheduler itself:
test_scheduler_failures.py.

Bodies record their start and end and wait on per-call gates; every wait is bounded
by ``asyncio.wait_for(..., 5)``; nothing synchronizes with sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib

import toolrail as tr
from helpers import PreNext, assert_error, raw_tool, within
from scheduler_cancellation_helpers import (
    NAN,
    NOT_LOSSLESS,
    Lab,
    assert_aborted,
    assert_aborted_before_dispatch,
    call,
    texts,
)


async def stream_where_c1s_pre_execute_cancels(
    lab: Lab, decision: tr.PreDecision
) -> list[tr.Committed]:
    """Stream c0, c1 and c2; c1's pre-execute waits for c0 to start, cancels the batch
    and returns ``decision``. Every item, in model order."""
    controller = tr.CancelController()

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        if execution.call_id == "c1":
            await lab.wait_started("c0")
            controller.cancel()
            return decision
        return await call_next()

    lab.registry.pre_execute(pre)
    calls = [call(0), call(1), call(2)]

    stream = lab.registry.stream(calls, signal=controller.signal)
    async with contextlib.aclosing(stream):
        return [item async for item in stream]


async def test_a_pre_execute_that_cancels_the_batch_and_allows_aborts_its_call_before_dispatch() -> (  # noqa: E501
    None
):
    lab = Lab()

    items = await stream_where_c1s_pre_execute_cancels(lab, tr.Allow())

    assert [item.started for item in items] == [True, False, False]
    assert_aborted(items[0].result)
    assert_aborted_before_dispatch(items[1].result)
    assert_aborted_before_dispatch(items[2].result)
    assert sorted(lab.starts()) == ["c0"]
    assert "pre c2" not in lab.stages  # no further call starts
    assert "around c1" not in lab.stages  # its own dispatch is skipped
    assert "post c1" not in lab.stages  # ABORTED_BEFORE_DISPATCH skips post-execute
    assert lab.commits() == ["c0", "c1", "c2"]


async def test_a_pre_execute_that_cancels_the_batch_and_denies_keeps_its_denial() -> None:
    lab = Lab()

    items = await stream_where_c1s_pre_execute_cancels(lab, tr.Deny("not now"))

    assert [item.started for item in items] == [True, True, False]
    assert_aborted(items[0].result)
    assert_error(items[1].result, "not now", "DENIED", None)
    assert "post c1" in lab.stages  # a denial goes on to post-execute
    assert_aborted_before_dispatch(items[2].result)
    assert sorted(lab.starts()) == ["c0"]


async def test_a_signal_fired_from_inside_a_body_stops_new_starts_and_aborts_in_flight_calls() -> (
    None
):
    lab = Lab()
    controller = tr.CancelController()

    async def trigger(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        await lab.wait_started("c0", "c1")
        controller.cancel("the user pressed stop")
        return "fired"

    lab.registry.register(raw_tool("trigger", trigger, concurrency_safe=True))
    calls = [call(0), call(1, "polite"), call(2, "trigger"), call(3, "solo"), call(4)]

    batch = await within(lab.registry.run(calls, signal=controller.signal))

    assert sorted(lab.starts()) == ["c0", "c1"]  # no call started after the signal fired
    assert "interrupted c0" in lab.log  # an "interrupt" body is cancelled
    assert lab.signal_at_end == {"c0": True, "c1": True}  # both saw their signal
    assert_aborted(batch.results[0])
    assert_aborted(batch.results[1])  # a cooperative success after the signal: ABORTED
    assert_aborted(batch.results[2])
    assert_aborted_before_dispatch(batch.results[3])
    assert_aborted_before_dispatch(batch.results[4])
    assert lab.commits() == ["c0", "c1", "c2", "c3", "c4"]
    assert texts(batch.contexts) == ["from c0", "from c1"]
    assert batch.cancelled is True
    assert "around c3" not in lab.stages
    assert "around c4" not in lab.stages


async def test_a_signal_fired_by_the_caller_aborts_in_flight_calls_and_every_unstarted_call() -> (
    None
):
    lab = Lab()
    controller = tr.CancelController()
    own = tr.CancelController()  # c0 has its own signal too: the two are combined
    calls = [
        call(0, signal=own.signal),
        call(1, "polite"),
        call(2),
        call(3, arguments=NAN),
        call(4, "solo"),
    ]
    stream = lab.registry.stream(calls, max_parallel=2, signal=controller.signal)

    async with contextlib.aclosing(stream):
        pending = asyncio.ensure_future(stream.__anext__())
        await lab.wait_started("c0", "c1")
        controller.cancel()
        items = [await within(pending)]
        items += [item async for item in stream]

    assert sorted(lab.starts()) == ["c0", "c1"]
    assert [(item.index, item.started) for item in items] == [
        (0, True), (1, True), (2, False), (3, True), (4, False),
    ]  # fmt: skip
    assert_aborted(items[0].result)
    assert_aborted(items[1].result)
    assert_aborted_before_dispatch(items[2].result)
    assert_error(items[3].result, NOT_LOSSLESS, None, None)  # the snapshot error wins
    assert_aborted_before_dispatch(items[4].result)
    assert lab.commits() == ["c0", "c1", "c2", "c3", "c4"]
    assert [seen for _, seen in lab.notified] == [item.result for item in items]
    assert lab.signal_at_end == {"c0": True, "c1": True}
    assert own.signal.cancelled is False  # the batch signal does not cancel the call's own


async def test_cancelling_one_calls_own_signal_aborts_only_that_call() -> None:
    lab = Lab()
    batch_signal = tr.CancelController()
    own = tr.CancelController()
    calls = [call(0, signal=own.signal), call(1), call(2, "polite")]
    task = asyncio.create_task(lab.registry.run(calls, signal=batch_signal.signal))

    await lab.wait_started("c0", "c1", "c2")
    own.cancel()
    await within(lab.finished["c0"].wait())
    assert not lab.finished["c1"].is_set()
    lab.release("c1", "c2")
    batch = await within(task)

    assert_aborted(batch.results[0])
    assert [r.value for r in batch.results[1:]] == ["c1", "c2"]
    assert lab.signal_at_end == {"c0": True, "c1": False, "c2": False}
    assert batch.cancelled is False
    assert batch_signal.signal.cancelled is False


async def test_a_success_that_settled_before_the_signal_but_commits_after_it_is_aborted() -> None:
    # pipeline.md: "the body was invoked, the caller's signal has fired, and the outcome
    # after post-execute would otherwise be a success" -> ABORTED. In a batch c1's
    # post-execute runs only once c0 has committed, after the signal fired.
    lab = Lab()
    controller = tr.CancelController()
    task = asyncio.create_task(lab.registry.run([call(0), call(1)], signal=controller.signal))

    await lab.wait_started("c0", "c1")
    lab.release("c1")
    await within(lab.finished["c1"].wait())
    controller.cancel()
    batch = await within(task)

    assert lab.signal_at_end["c1"] is False
    assert_aborted(batch.results[0])
    assert_aborted(batch.results[1])
    assert texts(batch.contexts) == ["from c0", "from c1"]


async def test_a_batch_does_not_conclude_the_turn_when_the_concluding_call_was_aborted() -> None:
    lab = Lab()
    controller = tr.CancelController()

    async def concluding(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ctx.conclude_turn()
        controller.cancel()
        await within(ctx.signal.wait())
        return "partial"

    lab.registry.register(raw_tool("concluding", concluding, cancellation="cooperative"))

    batch = await within(lab.registry.run([call(0, "concluding")], signal=controller.signal))

    assert_aborted(batch.results[0])
    assert batch.concludes_turn is False
    assert batch.cancelled is True

