"""Failures of the scheduler itself: an exception the pipeline lets through stops new
dispatches, cancels and awaits the in-flight calls, then is raised (spec: scheduler.md,
"Failures of the scheduler itself").

Bodies wait on per-call gates; every wait is bounded by ``asyncio.wait_for(..., 5)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import pytest

import toolrail as tr
from helpers import PreNext, raw_tool, within
from scheduler_cancellation_helpers import Lab, call

WAIT = 5


class Boom(BaseException):
    """A failure that is not a tool outcome: the pipeline lets it through."""


# ---- failures of the scheduler itself ------------------------------------------------------


def boom_on(call_id: str) -> Callable[[tr.Execution, tr.ToolResult], None]:
    def observer(execution: tr.Execution, result: tr.ToolResult) -> None:
        if execution.call_id == call_id:
            raise Boom(call_id)

    return observer


async def test_an_observer_raising_a_base_exception_stops_the_batch_and_run_raises_it() -> None:
    lab = Lab()
    lab.registry.on_result(boom_on("c0"), prepend=True)
    calls = [call(0), call(1), call(2, "polite"), call(3, "solo"), call(4)]
    before = asyncio.all_tasks()
    task = asyncio.create_task(lab.registry.run(calls))

    await lab.wait_started("c0", "c1", "c2")
    lab.release("c0")
    with pytest.raises(Boom):
        await within(task)

    assert "interrupted c1" in lab.log  # in-flight calls were cancelled
    assert lab.signal_at_end == {"c0": False, "c1": True, "c2": True}
    assert lab.finished["c1"].is_set()
    assert lab.finished["c2"].is_set()  # every started body was awaited
    assert sorted(lab.starts()) == ["c0", "c1", "c2"]  # no new dispatch
    assert lab.notified == []  # nothing further committed or notified
    assert "post c1" not in lab.stages
    assert "post c2" not in lab.stages
    assert asyncio.all_tasks() == before


async def test_a_body_raising_a_base_exception_stops_the_batch_and_run_raises_it() -> None:
    lab = Lab()

    async def explode(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        await lab.wait_started("c0", "c2")
        raise Boom("from a body")

    lab.registry.register(raw_tool("explode", explode, concurrency_safe=True))
    calls = [call(0), call(1, "explode"), call(2, "polite"), call(3, "solo")]
    before = asyncio.all_tasks()

    with pytest.raises(Boom):
        await within(lab.registry.run(calls))

    assert "interrupted c0" in lab.log
    assert lab.signal_at_end == {"c0": True, "c2": True}
    assert sorted(lab.starts()) == ["c0", "c2"]
    assert lab.notified == []
    assert asyncio.all_tasks() == before


async def test_a_stream_that_raised_a_scheduler_failure_then_raises_stop_async_iteration() -> None:
    lab = Lab()
    lab.release("c0", "c1")
    lab.registry.on_result(boom_on("c1"))
    calls = [call(0, "solo"), call(1, "solo"), call(2, "solo")]
    stream = lab.registry.stream(calls)

    first = await within(stream.__anext__())
    with pytest.raises(Boom):
        await within(stream.__anext__())
    with pytest.raises(StopAsyncIteration):
        await within(stream.__anext__())
    await within(stream.aclose())

    assert first.result.value == "c0"
    assert sorted(lab.starts()) == ["c0", "c1"]
    assert lab.commits() == ["c0", "c1"]  # c1's earlier observer ran before Boom
    assert "start c2" not in lab.log


async def test_a_scheduler_failure_between_items_does_not_cancel_the_stream_consumer() -> None:
    lab = Lab()
    lab.release("c0")
    loop = asyncio.get_running_loop()
    consumer_free = asyncio.Event()

    async def explode(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        await within(lab.gates[ctx.call_id].wait())
        # Wake the consumer only after this dispatch's failure has fully settled.
        loop.call_soon(loop.call_soon, consumer_free.set)
        raise Boom("from a body")

    lab.registry.register(raw_tool("explode", explode, concurrency_safe=True))
    stream = lab.registry.stream([call(0), call(1, "explode")])

    first = await within(stream.__anext__())
    lab.release("c1")
    await within(consumer_free.wait())  # the consumer's own await is not cancelled
    with pytest.raises(Boom):
        await within(stream.__anext__())
    with pytest.raises(StopAsyncIteration):
        await within(stream.__anext__())

    assert first.result.value == "c0"
    assert lab.commits() == ["c0"]


async def test_a_pre_execute_raising_a_base_exception_stops_the_batch_and_run_raises_it() -> None:
    lab = Lab()

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        if execution.call_id == "c1":
            await lab.wait_started("c0")
            raise Boom("from pre-execute")
        return await call_next()

    lab.registry.pre_execute(pre)
    before = asyncio.all_tasks()

    with pytest.raises(Boom):
        await within(lab.registry.run([call(0), call(1), call(2)]))

    assert "interrupted c0" in lab.log
    assert lab.signal_at_end == {"c0": True}
    assert sorted(lab.starts()) == ["c0"]
    assert lab.notified == []
    assert asyncio.all_tasks() == before


class OtherBoom(BaseException):
    """A second failure, raised after the first."""


async def test_a_scheduler_failure_raises_the_first_failure() -> None:
    lab = Lab()

    async def first(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        await lab.wait_started("c1")
        raise Boom("first")

    async def second(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        lab.log.append(f"start {ctx.call_id}")
        lab.started[ctx.call_id].set()
        await within(ctx.signal.wait())  # fires once the scheduler failed
        raise OtherBoom("second")

    for name, body in (("first", first), ("second", second)):
        lab.registry.register(
            raw_tool(name, body, concurrency_safe=True, cancellation="cooperative")
        )

    with pytest.raises(Boom):
        await within(lab.registry.run([call(0, "second"), call(1, "second"), call(2, "first")]))

    assert lab.notified == []


async def test_a_dispatch_that_lets_a_cancelled_error_through_is_a_scheduler_failure() -> None:
    # execute() lets a CancelledError from around-execute middleware through; in a batch
    # that is "any exception the pipeline lets through, other than the run task's own
    # CancelledError": run stops, cancels and awaits the in-flight calls, then raises it.
    lab = Lab()

    async def around(
        execution: tr.Execution, call_next: Callable[[], Awaitable[tr.ToolResult]]
    ) -> tr.ToolResult:
        if execution.call_id == "c1":
            await lab.wait_started("c0")
            raise asyncio.CancelledError
        return await call_next()

    lab.registry.around_execute(around)
    task = asyncio.create_task(lab.registry.run([call(0), call(1), call(2, "solo")]))

    with pytest.raises(asyncio.CancelledError):
        await within(task)

    assert "interrupted c0" in lab.log
    assert lab.signal_at_end == {"c0": True}
    assert lab.notified == []
    assert "start c2" not in lab.log


async def test_a_scheduler_failure_while_a_stream_closes_is_raised_by_aclose() -> None:
    lab = Lab()
    lab.release("c0")
    lab.registry.on_result(boom_on("c1"), prepend=True)
    calls = [call(0), call(1), call(2, "polite"), call(3, "solo")]
    before = asyncio.all_tasks()
    stream = lab.registry.stream(calls)

    first = await within(stream.__anext__())
    await lab.wait_started("c1", "c2")
    with pytest.raises(Boom):
        await within(stream.aclose())

    assert first.result.value == "c0"
    assert lab.commits() == ["c0"]  # nothing further committed or notified
    assert lab.finished["c2"].is_set()
    assert lab.signal_at_end == {"c0": False, "c1": True, "c2": True}
    assert "start c3" not in lab.log
    assert asyncio.all_tasks() == before
    with pytest.raises(StopAsyncIteration):
        await within(stream.__anext__())


# ---- a raising callback on a running body's signal ------------------------------------


@pytest.mark.parametrize("cancellation", ["interrupt", "cooperative"])
async def test_closing_a_stream_with_a_raising_body_signal_callback_still_winds_down(
    cancellation: Literal["interrupt", "cooperative"],
) -> None:
    # Issue 18: aclose() raised the callback's exception at once, while c1's body still
    # ran and c2 was never committed. It must wind down as scheduler.md says (c1 awaited
    # and committed, c2 ABORTED_BEFORE_DISPATCH, one notification each) and report the
    # callback's exception to the loop, not raise it.
    registry = tr.ToolRegistry()
    seen: list[tuple[str, str | None]] = []
    registry.on_result(
        lambda e, r: seen.append((e.call_id, None if r.error is None else r.error.code)))
    entered = asyncio.Event()
    log: list[str] = []

    class CallbackFailure(Exception):
        pass

    def raising() -> None:
        raise CallbackFailure("callback")

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        if ctx.call_id == "c0":
            return "quick"
        ctx.signal.add_callback(raising)
        entered.set()
        try:
            await within(ctx.signal.wait())
            return "stopped"
        finally:
            log.append(f"end {ctx.call_id}")

    registry.register(raw_tool("work", body, concurrency_safe=True, cancellation=cancellation))
    reported: list[BaseException | None] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(context.get("exception")))
    try:
        stream = registry.stream([call(0), call(1), call(2)], max_parallel=2)
        first = await within(stream.__anext__())
        await within(entered.wait())
        await within(stream.aclose())
    finally:
        loop.set_exception_handler(previous)

    assert first.result.value == "quick"
    assert log == ["end c1"]  # nothing left running once aclose() returned
    assert [cid for cid, _ in seen] == ["c0", "c1", "c2"]
    assert seen[2] == ("c2", "ABORTED_BEFORE_DISPATCH")
    assert len(reported) == 1
    assert isinstance(reported[0], CallbackFailure)
    assert stream.batch.cancelled is True


async def test_a_cancelled_error_a_dispatch_lets_through_cancels_the_batch_as_a_failure(
) -> None:
    """scheduler.md "Failures of the scheduler itself": any exception the pipeline lets
    through, other than the run task's own CancelledError, "cancels the in-flight calls
    as a batch cancellation would (their body signals fire)" -- so an in-flight body sees
    the batch's reason, not a cancellation of its task."""
    registry = tr.ToolRegistry()
    started = asyncio.Event()
    reasons: list[str | None] = []

    async def patient(arguments: Any, ctx: tr.RunContext) -> str:
        started.set()
        await asyncio.wait_for(ctx.signal.wait(), WAIT)
        reasons.append(ctx.signal.reason)
        return "stopped"

    async def around(execution: tr.Execution, call_next: Callable[[], Any]) -> Any:
        if execution.name == "breaks":
            await asyncio.wait_for(started.wait(), WAIT)
            raise asyncio.CancelledError  # a middleware's own doing: not the run task's
        return await call_next()

    registry.register(raw_tool("patient", patient, concurrency_safe=True,
                          cancellation="cooperative"))
    registry.register(raw_tool("breaks", patient, concurrency_safe=True))
    registry.around_execute(around)
    calls = [tr.ToolCall(call_id="0", name="patient"), tr.ToolCall(call_id="1", name="breaks")]

    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(registry.run(calls), WAIT)
    assert reasons == ["the scheduler failed"]
