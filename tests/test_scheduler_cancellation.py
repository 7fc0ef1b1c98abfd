"""Cancelling a batch, leaving a stream early, and failures of the scheduler itself.

Mirrors scheduler.md "Cancellation", "Failures of the scheduler itself" and
"Ownership", with pipeline.md "Cancellation" for what a dispatching call sees. Bodies
record their start and end and wait on per-call gates; every wait is bounded by
``asyncio.wait_for(..., 5)``; nothing synchronizes with sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import pytest

import toolrail as tr
from helpers import ABORTED, ABORTED_BEFORE, GatedLab, assert_error, one_turn, raw_tool, within

PreNext = Callable[[], Awaitable[tr.PreDecision]]
PostNext = Callable[[], Awaitable[tr.PostDecision]]
Body = Callable[[tr.JsonValue, tr.RunContext], Awaitable[Any]]

NOT_LOSSLESS = "tool call arguments must be losslessly JSON-serializable"
NAN: dict[str, Any] = {"x": float("nan")}


class Boom(BaseException):
    """A failure that is not a tool outcome: the pipeline lets it through."""


def call(index: int, name: str = "work", **fields: Any) -> tr.ToolCall:
    fields.setdefault("arguments", {})
    return tr.ToolCall(call_id=f"c{index}", name=name, **fields)


def assert_aborted(result: tr.ToolResult) -> None:
    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")


def assert_aborted_before_dispatch(result: tr.ToolResult) -> None:
    assert_error(result, ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError")


def texts(contexts: tuple[tr.ContextMessage, ...]) -> list[str]:
    return [b.text for m in contexts for b in m.content if isinstance(b, tr.TextContent)]


class Lab(GatedLab):
    """A registry with gated tools that record what they lived through.

    ``"work"``: an ``"interrupt"`` body that waits on its gate; ``"polite"``: a
    ``"cooperative"`` body that waits until its gate opens or its signal fires, then
    returns a success; ``"solo"``: like ``"work"`` but exclusive. Each body defers a
    context ``"from <id>"`` as it starts.
    """

    def __init__(self) -> None:
        super().__init__()
        self.signal_at_end: dict[str, bool] = {}
        self.stages: list[str] = []
        self.add("work")
        self.add("polite", cancellation="cooperative")
        self.add("solo", safe=False)
        self.registry.pre_execute(self._pre)
        self.registry.guard(self._guard)
        self.registry.around_execute(self._around)
        self.registry.post_execute(self._post)

    def _pre(self, execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        self.stages.append(f"pre {execution.call_id}")
        return call_next()

    def _guard(self, execution: tr.Execution) -> None:
        self.stages.append(f"guard {execution.call_id}")

    async def _around(
        self, execution: tr.Execution, call_next: Callable[[], Awaitable[tr.ToolResult]]
    ) -> tr.ToolResult:
        self.stages.append(f"around {execution.call_id}")
        return await call_next()

    async def _post(
        self, execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision:
        self.stages.append(f"post {execution.call_id}")
        return await call_next()

    def body(self, cooperative: bool) -> Body:
        async def execute(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
            cid = ctx.call_id
            self.log.append(f"start {cid}")
            self.started[cid].set()
            ctx.defer_context(f"from {cid}")
            try:
                if cooperative:
                    with ctx.signal.add_callback(self.gates[cid].set):
                        await within(self.gates[cid].wait())
                else:
                    await within(self.gates[cid].wait())
                return cid
            except asyncio.CancelledError:
                self.log.append(f"interrupted {cid}")
                raise
            finally:
                self.signal_at_end[cid] = ctx.signal.cancelled
                self.log.append(f"end {cid}")
                self.finished[cid].set()

        return execute

    def add(
        self,
        name: str,
        *,
        safe: bool = True,
        cancellation: Literal["interrupt", "cooperative"] = "interrupt",
    ) -> None:
        self.registry.register(
            raw_tool(
                name,
                self.body(cancellation == "cooperative"),
                concurrency_safe=safe,
                cancellation=cancellation,
            )
        )


# ---- the batch signal already cancelled --------------------------------------------------


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


# ---- cancellation while a call is being prepared ------------------------------------------


async def test_a_pre_execute_that_cancels_the_batch_and_allows_aborts_its_call_before_dispatch() -> (  # noqa: E501
    None
):
    lab = Lab()
    controller = tr.CancelController()

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        if execution.call_id == "c1":
            await lab.wait_started("c0")
            controller.cancel()
            return tr.Allow()
        return await call_next()

    lab.registry.pre_execute(pre)
    calls = [call(0), call(1), call(2)]

    stream = lab.registry.stream(calls, signal=controller.signal)
    async with contextlib.aclosing(stream):
        items = [item async for item in stream]

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
    controller = tr.CancelController()

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        if execution.call_id == "c1":
            await lab.wait_started("c0")
            controller.cancel()
            return tr.Deny("not now")
        return await call_next()

    lab.registry.pre_execute(pre)
    calls = [call(0), call(1), call(2)]

    stream = lab.registry.stream(calls, signal=controller.signal)
    async with contextlib.aclosing(stream):
        items = [item async for item in stream]

    assert [item.started for item in items] == [True, True, False]
    assert_aborted(items[0].result)
    assert_error(items[1].result, "not now", "DENIED", None)
    assert "post c1" in lab.stages  # a denial goes on to post-execute
    assert_aborted_before_dispatch(items[2].result)
    assert sorted(lab.starts()) == ["c0"]


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


# ---- more of what a dispatching or preparing call sees --------------------------------------


async def test_a_call_whose_dispatch_began_but_body_never_ran_is_aborted_before_dispatch() -> None:
    lab = Lab()
    controller = tr.CancelController()
    holding = asyncio.Event()
    hold = asyncio.Event()

    async def around(
        execution: tr.Execution, call_next: Callable[[], Awaitable[tr.ToolResult]]
    ) -> tr.ToolResult:
        if execution.call_id == "c1":
            holding.set()
            await within(hold.wait())
        return await call_next()

    lab.registry.around_execute(around)
    stream = lab.registry.stream([call(0), call(1)], signal=controller.signal)

    async with contextlib.aclosing(stream):
        pending = asyncio.ensure_future(stream.__anext__())
        await lab.wait_started("c0")
        await within(holding.wait())
        controller.cancel()
        hold.set()
        items = [await within(pending)]
        items += [item async for item in stream]

    assert [item.started for item in items] == [True, False]
    assert_aborted(items[0].result)
    assert_aborted_before_dispatch(items[1].result)
    assert sorted(lab.starts()) == ["c0"]
    assert "post c1" not in lab.stages


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
