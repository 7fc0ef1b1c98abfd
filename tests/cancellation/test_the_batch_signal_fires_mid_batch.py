"""Cancelling a batch and leaving a stream early (scheduler.md "Cancellation" and
"Ownership", with pipeline.md "Cancellation" for what a dispatching call sees).

Calls cancelled before they started (``ABORTED_BEFORE_DISPATCH``):
test_aborted_before_dispatch.py; failures of the scheduler itself:
test_scheduler_failures.py. Bodies record their start and end and wait on per-call
gates; every wait is bounded by ``asyncio.wait_for(..., 5)``; nothing synchronizes with
sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from typing import Any

import pytest

import toolrail as tr
from helpers import PostNext, PreNext, assert_error, one_turn, raw_tool, within
from scheduler_cancellation_helpers import (
    NAN,
    NOT_LOSSLESS,
    Lab,
    assert_aborted,
    assert_aborted_before_dispatch,
    call,
)


def texts(contexts: tuple[tr.ContextMessage, ...]) -> list[str]:
    return [b.text for m in contexts for b in m.content if isinstance(b, tr.TextContent)]


# ---- the batch signal fires mid-batch ---------------------------------------------------


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


# ---- a call's own signal ----------------------------------------------------------------


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


# ---- asyncio cancellation of the task running run ---------------------------------------


async def test_cancelling_the_run_task_awaits_in_flight_calls_then_propagates_cancelled_error() -> (
    None
):
    lab = Lab()
    lab.release("c0")
    calls = [call(0), call(1), call(2, "polite"), call(3, "solo")]
    before = asyncio.all_tasks()
    task = asyncio.create_task(lab.registry.run(calls))

    await within(lab.committed["c0"].wait())
    await lab.wait_started("c1", "c2")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(task)

    assert task.cancelled()
    assert "interrupted c1" in lab.log  # an "interrupt" body is cancelled
    assert lab.finished["c1"].is_set()
    assert lab.finished["c2"].is_set()  # awaited before CancelledError propagated
    assert lab.signal_at_end["c2"] is True  # a cooperative body is told by its signal
    assert sorted(lab.starts()) == ["c0", "c1", "c2"]
    assert lab.commits() == ["c0"]  # no further result committed or notified
    assert "post c1" not in lab.stages
    assert "post c2" not in lab.stages
    assert asyncio.all_tasks() == before


async def test_cancelling_the_run_task_fires_the_body_signal_of_an_interrupt_body() -> None:
    lab = Lab()
    task = asyncio.create_task(lab.registry.run([call(0), call(1, "polite")]))

    await lab.wait_started("c0", "c1")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(task)

    assert "interrupted c0" in lab.log
    assert lab.signal_at_end == {"c0": True, "c1": True}  # "the body signal fires"


async def test_cancelling_the_run_task_during_an_ordered_pre_execute_still_awaits_in_flight_calls() -> (  # noqa: E501
    None
):
    lab = Lab()
    waiting = asyncio.Event()
    pre_cancelled: list[str] = []

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        if execution.call_id == "c1":
            waiting.set()
            try:
                await within(asyncio.Event().wait())
            except asyncio.CancelledError:
                pre_cancelled.append(execution.call_id)
                raise
        return await call_next()

    lab.registry.pre_execute(pre)
    before = asyncio.all_tasks()
    task = asyncio.create_task(lab.registry.run([call(0), call(1), call(2)]))

    await lab.wait_started("c0")
    await within(waiting.wait())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(task)

    assert pre_cancelled == ["c1"]
    assert "interrupted c0" in lab.log
    assert lab.finished["c0"].is_set()
    assert sorted(lab.starts()) == ["c0"]
    assert lab.notified == []
    assert asyncio.all_tasks() == before


# ---- leaving a stream early -------------------------------------------------------------


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


async def test_cancelling_the_run_task_waits_for_a_sync_body_in_a_worker_thread() -> None:
    lab = Lab()
    entered = threading.Event()
    gate = threading.Event()
    ended: list[str] = []

    def blocking(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        entered.set()
        gate.wait(5)
        ended.append(ctx.call_id)
        return "done"

    lab.registry.register(raw_tool("blocking", blocking, concurrency_safe=True))
    task = asyncio.create_task(lab.registry.run([call(0, "blocking"), call(1)]))
    await lab.wait_started("c1")
    await within(asyncio.to_thread(entered.wait, 5))
    task.cancel()
    for _ in range(5):
        await one_turn()
    assert not task.done()  # the worker thread cannot be interrupted: run waits for it
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await within(task)

    assert ended == ["c0"]
    assert "interrupted c1" in lab.log
    assert lab.notified == []


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


async def test_an_empty_batch_with_an_already_cancelled_signal_reports_cancelled() -> None:
    registry = tr.ToolRegistry()
    controller = tr.CancelController()
    controller.cancel()

    batch = await within(registry.run([], signal=controller.signal))

    assert batch == tr.Batch(results=(), contexts=(), cancelled=True, concludes_turn=False)


async def test_cancelling_a_stream_consumer_waiting_for_an_item_stops_the_batch_like_run() -> None:
    lab = Lab()
    lab.release("c0")
    stream = lab.registry.stream([call(0, "solo"), call(1), call(2, "polite"), call(3, "solo")])
    before = asyncio.all_tasks()

    first = await within(stream.__anext__())
    consumer = asyncio.ensure_future(stream.__anext__())
    await lab.wait_started("c1", "c2")
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(consumer)

    assert first.result.value == "c0"
    assert "interrupted c1" in lab.log
    assert lab.signal_at_end == {"c0": False, "c1": True, "c2": True}
    assert lab.commits() == ["c0"]  # no further result committed or notified
    assert asyncio.all_tasks() == before
    with pytest.raises(StopAsyncIteration):
        await within(stream.__anext__())


async def test_cancelling_the_run_task_during_an_async_post_execute_commits_nothing_more() -> None:
    lab = Lab()
    lab.release("c0")
    posting = asyncio.Event()
    post_cancelled: list[str] = []

    async def post(
        execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision:
        if execution.call_id == "c0":
            posting.set()
            try:
                await within(asyncio.Event().wait())
            except asyncio.CancelledError:
                post_cancelled.append(execution.call_id)
                raise
        return await call_next()

    lab.registry.post_execute(post)
    before = asyncio.all_tasks()
    task = asyncio.create_task(lab.registry.run([call(0), call(1), call(2, "solo")]))

    await lab.wait_started("c1")
    await within(posting.wait())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(task)

    assert post_cancelled == ["c0"]
    assert "interrupted c1" in lab.log
    assert lab.notified == []
    assert "start c2" not in lab.log
    assert asyncio.all_tasks() == before


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
