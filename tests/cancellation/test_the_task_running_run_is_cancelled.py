"""scheduler.md "Cancellation": "If the task running ``run`` is itself cancelled (asyncio),
every in-flight call is cancelled as in pipeline.md [...] and awaited, then
``CancelledError`` propagates; no further result is committed or notified." Also a
stream consumer cancelled while it waits for an item.

The same for ``execute``: test_the_task_running_execute_is_cancelled.py.

Bodies record their start and end and wait on per-call gates; every wait is bounded
by ``asyncio.wait_for(..., 5)``; nothing synchronizes with sleeps.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

import toolrail as tr
from helpers import PostNext, PreNext, one_turn, raw_tool, within
from scheduler_cancellation_helpers import Lab, call


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

