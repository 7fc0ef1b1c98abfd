"""Running one model step's calls: ``run`` and ``stream`` (scheduler.md).

Groups, the pool, ordered prepare and commit, results and contexts, argument errors,
scope binding and ``Committed``. Cancellation and scheduler failures:
test_scheduler_cancellation.py.

Overlap and order are proven with ``asyncio.Event`` gates (every wait bounded by
``asyncio.wait_for(..., 5)``), never with sleeps: tool bodies record their start in a
log and wait on a per-call gate the test opens; an observer records each commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Literal

import pytest

import toolrail as tr
from helpers import GatedLab, assert_error, exactly, one_turn, raw_tool, within

CallNext = Callable[[], Awaitable[tr.ToolResult]]
PreNext = Callable[[], Awaitable[tr.PreDecision]]
PostNext = Callable[[], Awaitable[tr.PostDecision]]
Classifier = Callable[[tr.JsonValue], bool]
Body = Callable[[tr.JsonValue, tr.RunContext], Awaitable[Any]]

ABORTED_BEFORE = "tool call aborted before dispatch"
MAX_PARALLEL_ERROR = "max_parallel must be a positive integer"


def make_tool(
    name: str,
    execute: Body,
    *,
    safe: bool | Classifier = True,
    cancellation: Literal["interrupt", "cooperative"] = "interrupt",
) -> tr.Tool:
    return raw_tool(name, execute, concurrency_safe=safe, cancellation=cancellation)


def call(index: int, name: str = "work", **fields: Any) -> tr.ToolCall:
    fields.setdefault("arguments", {})
    return tr.ToolCall(call_id=f"c{index}", name=name, **fields)


def texts(contexts: tuple[tr.ContextMessage, ...]) -> list[str]:
    out: list[str] = []
    for message in contexts:
        for block in message.content:
            assert isinstance(block, tr.TextContent)
            out.append(block.text)
    return out


class Lab(GatedLab):
    """A registry whose tools log their starts and ends and wait on per-call gates.

    ``log`` holds ``"start <id>"`` (the body began), ``"end <id>"`` (the body finished)
    and ``"commit <id>"`` (the first observer saw the result), in the order they
    happened.
    """

    def __init__(self) -> None:
        super().__init__()
        self.running = 0
        self.peak = 0

    def body(self, *, gated: bool = True, defer: bool = False, value: str | None = None) -> Body:
        async def execute(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
            cid = ctx.call_id
            self.log.append(f"start {cid}")
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.started[cid].set()
            if defer:
                ctx.defer_context(f"from {cid}")
            try:
                if gated:
                    await self.gates[cid].wait()
                return cid if value is None else value
            finally:
                self.running -= 1
                self.log.append(f"end {cid}")
                self.finished[cid].set()

        return execute

    def add(
        self,
        name: str = "work",
        *,
        safe: bool | Classifier = True,
        gated: bool = True,
        defer: bool = False,
        value: str | None = None,
    ) -> tr.Disposer:
        return self.registry.register(
            make_tool(name, self.body(gated=gated, defer=defer, value=value), safe=safe)
        )

    def before(self, first: str, second: str) -> bool:
        """Whether log entry ``first`` happened, and before ``second`` (if that did)."""
        if first not in self.log:
            return False
        return second not in self.log or self.log.index(first) < self.log.index(second)


class Overlap:
    """Counts how many ordered stages run at once; ``peak`` must stay 1."""

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            yield
        finally:
            self.active -= 1


# ---- results and contexts -----------------------------------------------------------


async def test_results_are_in_model_order_whatever_order_the_bodies_finish() -> None:
    lab = Lab()
    lab.add()
    calls = [call(i) for i in range(4)]
    task = asyncio.create_task(lab.registry.run(calls))
    await lab.wait_started("c0", "c1", "c2", "c3")
    for cid in ("c3", "c2", "c1", "c0"):
        lab.release(cid)
        await within(lab.finished[cid].wait())

    batch = await within(task)

    assert isinstance(batch, tr.Batch)
    assert [r.value for r in batch.results] == ["c0", "c1", "c2", "c3"]
    assert [r.content for r in batch.results] == [(tr.TextContent(f"c{i}"),) for i in range(4)]
    assert batch.cancelled is False
    assert batch.concludes_turn is False


async def test_batch_contexts_are_every_results_contexts_concatenated_in_model_order() -> None:
    lab = Lab()
    lab.add(defer=True)

    async def failing(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ctx.defer_context(f"from {ctx.call_id}")
        await within(lab.gates[ctx.call_id].wait())
        raise tr.ToolError("broke")

    lab.registry.register(make_tool("failing", failing))

    async def post(
        execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision:
        source = "plugin:test"
        note = tr.ContextMessage((tr.TextContent(f"post {execution.call_id}"),), source)
        return tr.Accept(contexts=[note])

    lab.registry.post_execute(post)
    calls = [call(0), call(1, "failing"), call(2)]
    task = asyncio.create_task(lab.registry.run(calls))
    await lab.wait_started("c0", "c2")
    lab.release("c2", "c1", "c0")

    batch = await within(task)

    assert texts(batch.contexts) == [
        "from c0", "post c0", "from c1", "post c1", "from c2", "post c2",
    ]  # fmt: skip
    assert batch.contexts == tuple(c for r in batch.results for c in r.contexts)
    assert batch.results[1].error == tr.ErrorInfo("broke", "TOOL_ERROR", "ToolError")


async def test_batch_concludes_turn_when_any_success_concluded_and_later_calls_still_run() -> None:
    lab = Lab()
    lab.add(gated=False)

    async def final(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ctx.conclude_turn()
        return "the answer"

    lab.registry.register(make_tool("final", final, safe=False))
    calls = [call(0), call(1, "final"), call(2), call(3)]

    batch = await within(lab.registry.run(calls))

    assert batch.concludes_turn is True
    assert [r.concludes_turn for r in batch.results] == [False, True, False, False]
    assert [r.is_error for r in batch.results] == [False] * 4
    assert batch.results[3].value == "c3"
    assert lab.starts() == ["c0", "c2", "c3"]
    assert lab.commits() == ["c0", "c1", "c2", "c3"]


async def test_batch_does_not_conclude_turn_when_only_a_failure_asked_to() -> None:
    registry = tr.ToolRegistry()

    async def gives_up(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ctx.conclude_turn()
        raise tr.ToolError("could not finish")

    registry.register(make_tool("gives_up", gives_up))

    batch = await within(registry.run([call(0, "gives_up"), call(1, "gives_up")]))

    assert batch.concludes_turn is False
    assert [r.concludes_turn for r in batch.results] == [False, False]


async def test_every_call_gets_exactly_one_result_and_one_notification_in_model_order() -> None:
    lab = Lab()
    lab.add(gated=False)

    async def broken(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        raise RuntimeError("body broke")

    lab.registry.register(make_tool("broken", broken))
    lab.registry.guard(lambda e: "not c2" if e.call_id == "c2" else None)

    def pre(execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        if execution.call_id == "c5":
            raise ValueError("pre broke")
        return call_next()

    lab.registry.pre_execute(pre)

    def post(
        execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision | Awaitable[tr.PostDecision]:
        if execution.call_id == "c6":
            return tr.Block("blocked c6")
        return call_next()

    lab.registry.post_execute(post)
    calls = [
        call(0),
        call(1, "missing"),
        call(2),
        call(3, "broken"),
        call(4, arguments={"x": float("nan")}),
        call(5),
        call(6),
        call(7),
    ]

    batch = await within(lab.registry.run(calls))

    assert len(batch.results) == len(calls)
    assert lab.commits() == [c.call_id for c in calls]
    for (_, seen), result in zip(lab.notified, batch.results, strict=True):
        assert seen is result
    results = batch.results
    assert results[0].value == "c0"
    assert_error(results[1], 'unknown tool "missing"', "UNKNOWN_TOOL", "ToolNotFoundError")
    assert_error(results[2], "not c2", "DENIED", None)
    assert_error(results[3], "body broke", None, "RuntimeError")
    message = "tool call arguments must be losslessly JSON-serializable"
    assert_error(results[4], message, None, None)
    assert_error(results[5], "pre broke", None, "ValueError")
    assert results[6].error == tr.ErrorInfo("blocked c6", "BLOCKED")
    assert results[7].value == "c7"


async def test_an_empty_call_list_gives_an_empty_batch() -> None:
    lab = Lab()
    lab.add()

    batch = await within(lab.registry.run([]))

    assert batch == tr.Batch(results=(), contexts=(), cancelled=False, concludes_turn=False)
    assert lab.notified == []


async def test_an_empty_stream_yields_nothing() -> None:
    registry = tr.ToolRegistry()
    async with contextlib.aclosing(registry.stream([])) as stream:
        items = [item async for item in stream]
    assert items == []


async def test_run_takes_any_iterable_of_calls() -> None:
    lab = Lab()
    lab.add(gated=False)

    batch = await within(lab.registry.run(call(i) for i in range(3)))

    assert [r.value for r in batch.results] == ["c0", "c1", "c2"]


# ---- groups ---------------------------------------------------------------------------


async def test_parallel_siblings_all_start_before_any_is_released() -> None:
    lab = Lab()
    lab.add()
    task = asyncio.create_task(lab.registry.run([call(i) for i in range(5)]))

    await lab.wait_started("c0", "c1", "c2", "c3", "c4")
    assert lab.running == 5
    assert lab.notified == []
    lab.release("c0", "c1", "c2", "c3", "c4")
    batch = await within(task)

    assert lab.peak == 5
    assert [r.value for r in batch.results] == [f"c{i}" for i in range(5)]


async def test_exclusive_call_waits_for_earlier_calls_to_commit_and_later_calls_wait_for_it() -> (
    None
):
    lab = Lab()
    lab.add()
    lab.add("solo", safe=False)
    calls = [call(0), call(1), call(2, "solo"), call(3)]
    task = asyncio.create_task(lab.registry.run(calls))

    await lab.wait_started("c0", "c1")
    assert lab.starts() == ["c0", "c1"]
    lab.release("c1")
    await within(lab.finished["c1"].wait())
    assert lab.starts() == ["c0", "c1"]  # c1 settled, c0 has not committed
    lab.release("c0")
    await lab.wait_started("c2")
    assert lab.commits() == ["c0", "c1"]
    assert lab.starts() == ["c0", "c1", "c2"]  # nothing after the exclusive call started
    lab.release("c2")
    await lab.wait_started("c3")
    lab.release("c3")
    await within(task)

    assert lab.before("commit c1", "start c2")
    assert lab.before("commit c2", "start c3")
    assert lab.commits() == ["c0", "c1", "c2", "c3"]


async def assert_one_after_another(lab: Lab, task: asyncio.Task[tr.Batch]) -> None:
    """Three gated calls c0-c2 start, end and commit strictly one after another."""
    for i in range(3):
        await lab.wait_started(f"c{i}")
        assert lab.starts() == [f"c{j}" for j in range(i + 1)]
        lab.release(f"c{i}")
    await within(task)

    assert lab.peak == 1
    assert lab.log == [
        "start c0", "end c0", "commit c0",
        "start c1", "end c1", "commit c1",
        "start c2", "end c2", "commit c2",
    ]  # fmt: skip


async def test_consecutive_exclusive_calls_run_one_after_another() -> None:
    lab = Lab()
    lab.add("solo", safe=False)
    await assert_one_after_another(
        lab, asyncio.create_task(lab.registry.run([call(i, "solo") for i in range(3)])))


async def test_a_tool_body_that_registers_a_tool_changes_how_later_calls_run() -> None:
    lab = Lab()

    async def setup(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        lab.add("late")  # safe and gated
        return "registered"

    lab.registry.register(make_tool("setup", setup, safe=False))
    calls = [call(0, "setup"), call(1, "late"), call(2, "late")]
    task = asyncio.create_task(lab.registry.run(calls))

    # Classified after call 0 committed, "late" is known and PARALLEL: both start at once.
    await lab.wait_started("c1", "c2")
    lab.release("c1", "c2")
    batch = await within(task)

    assert [r.value for r in batch.results] == ["registered", "c1", "c2"]
    assert lab.peak == 2


async def test_an_observer_that_marks_later_calls_parallel_lets_them_run_together() -> None:
    lab = Lab()
    safe = {"now": False}
    lab.add(safe=lambda arguments: safe["now"])
    lab.add("setup", safe=False, gated=False)

    def flip(execution: tr.Execution, result: tr.ToolResult) -> None:
        if execution.call_id == "c0":
            safe["now"] = True

    lab.registry.on_result(flip)
    calls = [call(0, "setup"), call(1), call(2)]
    task = asyncio.create_task(lab.registry.run(calls))

    await lab.wait_started("c1", "c2")
    lab.release("c1", "c2")
    await within(task)

    assert lab.peak == 2


async def test_an_observer_that_marks_later_calls_exclusive_makes_them_run_one_at_a_time() -> None:
    lab = Lab()
    safe = {"now": True}
    lab.add(safe=lambda arguments: safe["now"])
    lab.add("setup", safe=False, gated=False)

    def flip(execution: tr.Execution, result: tr.ToolResult) -> None:
        if execution.call_id == "c0":
            safe["now"] = False

    lab.registry.on_result(flip)
    calls = [call(0, "setup"), call(1), call(2)]
    task = asyncio.create_task(lab.registry.run(calls))

    await lab.wait_started("c1")
    assert lab.starts() == ["c0", "c1"]
    lab.release("c1")
    await lab.wait_started("c2")
    lab.release("c2")
    await within(task)

    assert lab.peak == 1
    assert lab.before("commit c1", "start c2")


async def test_a_later_call_no_longer_parallel_ends_the_group_and_waits_for_in_flight_calls() -> (
    None
):
    lab = Lab()
    lab.add()
    classified = asyncio.Event()

    def never_safe(arguments: tr.JsonValue) -> bool:
        classified.set()
        return False

    lab.add("careful", safe=never_safe)
    calls = [call(0), call(1), call(2, "careful"), call(3)]
    task = asyncio.create_task(lab.registry.run(calls))

    await lab.wait_started("c0", "c1")
    await within(classified.wait())  # c2 was re-classified: it will not join the group
    assert lab.starts() == ["c0", "c1"]
    lab.release("c1")
    await within(lab.finished["c1"].wait())
    assert lab.starts() == ["c0", "c1"]
    lab.release("c0")
    await lab.wait_started("c2")
    assert lab.commits() == ["c0", "c1"]
    assert lab.starts() == ["c0", "c1", "c2"]  # c2 is exclusive: c3 waits for its commit
    lab.release("c2")
    await lab.wait_started("c3")
    lab.release("c3")
    await within(task)

    assert lab.before("commit c1", "start c2")
    assert lab.before("commit c2", "start c3")


async def test_the_call_that_ended_a_group_is_classified_again_as_head_of_the_next() -> None:
    lab = Lab()
    lab.add()
    answers = iter([False])  # no longer PARALLEL inside the group; PARALLEL as a head

    lab.add("fickle", safe=lambda arguments: next(answers, True))
    calls = [call(0), call(1, "fickle"), call(2)]
    task = asyncio.create_task(lab.registry.run(calls))

    await lab.wait_started("c0")
    lab.release("c0")
    await lab.wait_started("c1", "c2")  # c1 heads a parallel group that c2 joins
    assert lab.before("commit c0", "start c1")
    lab.release("c1", "c2")
    await within(task)

    assert lab.commits() == ["c0", "c1", "c2"]


async def test_a_started_call_keeps_the_decision_it_started_under() -> None:
    lab = Lab()
    safe = {"now": True}
    lab.add(safe=lambda arguments: safe["now"])

    def pre(execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        if execution.call_id == "c1":
            safe["now"] = False  # c1 has started: its prepare began
        return call_next()

    lab.registry.pre_execute(pre)
    task = asyncio.create_task(lab.registry.run([call(0), call(1), call(2)]))

    await lab.wait_started("c0", "c1")  # c1 dispatched at once, beside c0
    assert lab.commits() == []
    lab.release("c1", "c0")
    await lab.wait_started("c2")  # c2 was re-classified: no longer PARALLEL
    assert lab.commits() == ["c0", "c1"]
    lab.release("c2")
    await within(task)

    assert lab.before("commit c1", "start c2")


async def test_the_stage_8_tool_lookup_happens_when_the_dispatch_starts() -> None:
    lab = Lab()
    lab.add()
    old = lab.add("swap", gated=False, value="old")
    holding = asyncio.Event()
    hold = asyncio.Event()

    async def around(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        if execution.call_id == "c1":
            holding.set()
            await within(hold.wait())
        return await call_next()

    def swap(execution: tr.Execution, result: tr.ToolResult) -> None:
        if execution.call_id == "c0":
            old()
            lab.add("swap", gated=False, value="new")

    lab.registry.around_execute(around)
    lab.registry.on_result(swap)
    task = asyncio.create_task(lab.registry.run([call(0), call(1, "swap")]))

    await lab.wait_started("c0")
    await within(holding.wait())  # c1's dispatch started: its tool was looked up
    lab.release("c0")
    await within(lab.committed["c0"].wait())  # the definition c1 looked up is gone
    hold.set()
    batch = await within(task)

    assert [r.value for r in batch.results] == ["c0", "old"]
    assert lab.registry.get("swap") is not None


async def test_the_stage_8_tool_lookup_comes_before_any_later_commit() -> None:
    lab = Lab()
    lab.add()
    old = lab.add("swap", gated=False, value="old")

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        if execution.call_id == "c1":
            lab.release("c0")
            await within(lab.finished["c0"].wait())  # c0 settles while c1 is prepared
        return await call_next()

    def swap(execution: tr.Execution, result: tr.ToolResult) -> None:
        if execution.call_id == "c0":
            old()
            lab.add("swap", gated=False, value="new")

    lab.registry.pre_execute(pre)
    lab.registry.on_result(swap)

    # c1 dispatches right after its prepare; c0's commit (which swaps the tool) follows.
    batch = await within(lab.registry.run([call(0), call(1, "swap")]))

    assert [r.value for r in batch.results] == ["c0", "old"]


async def test_an_observers_registry_change_is_seen_by_the_next_start_in_the_group() -> None:
    lab = Lab()
    old = lab.add("swap", gated=False, value="old")

    def swap(execution: tr.Execution, result: tr.ToolResult) -> None:
        if execution.call_id == "c0":
            old()
            lab.add("swap", gated=False, value="new")

    lab.registry.on_result(swap)

    batch = await within(lab.registry.run([call(0, "swap"), call(1, "swap")], max_parallel=1))

    assert [r.value for r in batch.results] == ["old", "new"]


# ---- the pool -------------------------------------------------------------------------


async def test_max_parallel_two_starts_two_of_four_calls_and_a_settled_dispatch_frees_its_slot_at_once() -> (  # noqa: E501
    None
):
    lab = Lab()
    lab.add()
    task = asyncio.create_task(lab.registry.run([call(i) for i in range(4)], max_parallel=2))

    await lab.wait_started("c0", "c1")
    assert lab.starts() == ["c0", "c1"]
    lab.release("c1")
    await lab.wait_started("c2")  # c1's slot is free though c1 waits for c0 to commit
    assert lab.commits() == []
    assert lab.starts() == ["c0", "c1", "c2"]
    assert lab.running == 2
    lab.release("c0")
    await lab.wait_started("c3")
    assert lab.commits() == ["c0", "c1"]
    lab.release("c2", "c3")
    batch = await within(task)

    assert lab.peak == 2
    assert [r.value for r in batch.results] == ["c0", "c1", "c2", "c3"]
    assert lab.before("start c2", "commit c0")


async def test_max_parallel_defaults_to_ten() -> None:
    lab = Lab()
    lab.add()
    ids = [f"c{i}" for i in range(12)]
    task = asyncio.create_task(lab.registry.run([call(i) for i in range(12)]))

    await lab.wait_started(*ids[:10])
    assert lab.starts() == ids[:10]
    lab.release("c3")
    await lab.wait_started("c10")
    assert lab.starts() == ids[:11]
    lab.release(*ids)
    await within(task)

    assert lab.peak == 10


async def test_max_parallel_one_is_fully_serial() -> None:
    lab = Lab()
    lab.add()
    await assert_one_after_another(
        lab, asyncio.create_task(lab.registry.run([call(i) for i in range(3)], max_parallel=1)))


async def test_reverse_settlement_still_commits_in_model_order() -> None:
    lab = Lab()
    lab.add()
    posted: list[str] = []

    async def post(
        execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision:
        posted.append(execution.call_id)
        return await call_next()

    lab.registry.post_execute(post)
    task = asyncio.create_task(lab.registry.run([call(i) for i in range(4)]))
    await lab.wait_started("c0", "c1", "c2", "c3")
    for cid in ("c3", "c2", "c1"):
        lab.release(cid)
        await within(lab.finished[cid].wait())
        assert lab.commits() == []
    lab.release("c0")
    await within(task)

    assert posted == ["c0", "c1", "c2", "c3"]
    assert lab.commits() == ["c0", "c1", "c2", "c3"]
    assert lab.log[4:] == [
        "end c3", "end c2", "end c1", "end c0",
        "commit c0", "commit c1", "commit c2", "commit c3",
    ]  # fmt: skip


async def test_prepare_and_commit_stages_run_one_call_at_a_time_in_model_order_while_bodies_overlap() -> (  # noqa: E501
    None
):
    lab = Lab()
    lab.add()
    overlap = Overlap()
    order: list[str] = []
    entered: asyncio.Queue[tuple[str, asyncio.Event]] = asyncio.Queue()

    async def held(stage: str, execution: tr.Execution) -> None:
        with overlap.entered():
            order.append(f"{stage} {execution.call_id}")
            go = asyncio.Event()
            entered.put_nowait((f"{stage} {execution.call_id}", go))
            await within(go.wait())

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        await held("pre", execution)
        return await call_next()

    def guard(execution: tr.Execution) -> None:
        with overlap.entered():
            order.append(f"guard {execution.call_id}")

    async def post(
        execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision:
        await held("post", execution)
        return await call_next()

    def observer(execution: tr.Execution, result: tr.ToolResult) -> None:
        with overlap.entered():
            order.append(f"observe {execution.call_id}")

    lab.registry.pre_execute(pre)
    lab.registry.guard(guard)
    lab.registry.post_execute(post)
    lab.registry.on_result(observer)
    task = asyncio.create_task(lab.registry.run([call(i) for i in range(3)]))

    for i in range(3):
        stage, go = await within(entered.get())
        assert stage == f"pre c{i}"
        assert lab.starts() == [f"c{j}" for j in range(i)]  # a slow prepare delays starts
        go.set()
    await lab.wait_started("c0", "c1", "c2")
    assert lab.running == 3  # the bodies overlap
    lab.release("c2", "c1", "c0")
    for i in range(3):
        stage, go = await within(entered.get())
        assert stage == f"post c{i}"
        go.set()
    await within(task)

    assert overlap.peak == 1
    assert order == [
        "pre c0", "guard c0", "pre c1", "guard c1", "pre c2", "guard c2",
        "post c0", "observe c0", "post c1", "observe c1", "post c2", "observe c2",
    ]  # fmt: skip


async def test_a_pending_approver_delays_later_starts_and_commits_and_never_runs_twice() -> None:
    overlap = Overlap()
    asked: asyncio.Queue[tuple[str, asyncio.Event]] = asyncio.Queue()

    async def approver(request: tr.ApprovalRequest) -> tr.ApprovalOutcome:
        with overlap.entered():
            go = asyncio.Event()
            asked.put_nowait((request.call_id, go))
            await within(go.wait())
        return tr.ApprovalOutcome.ALLOWED_ONCE

    lab = Lab()
    lab.registry.approver = approver
    lab.add()
    lab.registry.pre_execute(lambda execution, call_next: tr.Ask("may I?"))

    def observer(execution: tr.Execution, result: tr.ToolResult) -> None:
        with overlap.entered():
            pass

    lab.registry.on_result(observer)
    task = asyncio.create_task(lab.registry.run([call(i) for i in range(3)]))

    cid, go = await within(asked.get())
    assert cid == "c0"
    assert lab.starts() == []
    go.set()
    cid, go = await within(asked.get())
    assert cid == "c1"
    await lab.wait_started("c0")
    lab.release("c0")
    await within(lab.finished["c0"].wait())
    assert lab.commits() == []  # c0's commit waits behind c1's pending approval
    assert lab.starts() == ["c0"]
    go.set()
    cid, go = await within(asked.get())
    assert cid == "c2"
    go.set()
    lab.release("c1", "c2")
    batch = await within(task)

    assert overlap.peak == 1
    assert [r.value for r in batch.results] == ["c0", "c1", "c2"]


DenialSetup = Callable[[tr.ToolRegistry], None]


def deny_in_pre_execute(registry: tr.ToolRegistry) -> None:
    def pre(execution: tr.Execution, call_next: PreNext) -> Any:
        return tr.Deny("no c1") if execution.call_id == "c1" else call_next()

    registry.pre_execute(pre)


def deny_in_guard(registry: tr.ToolRegistry) -> None:
    registry.guard(lambda execution: "no c1" if execution.call_id == "c1" else None)


def fail_in_guard(registry: tr.ToolRegistry) -> None:
    def guard(execution: tr.Execution) -> str | None:
        if execution.call_id == "c1":
            raise RuntimeError("no c1")
        return None

    registry.guard(guard)


def fail_in_pre_execute(registry: tr.ToolRegistry) -> None:
    def pre(execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        if execution.call_id == "c1":
            raise RuntimeError("no c1")
        return call_next()

    registry.pre_execute(pre)


PREPARE_ENDINGS = [
    pytest.param(deny_in_pre_execute, tr.ErrorInfo("no c1", "DENIED"), id="pre-execute-deny"),
    pytest.param(deny_in_guard, tr.ErrorInfo("no c1", "DENIED"), id="guard-deny"),
    pytest.param(fail_in_guard, tr.ErrorInfo("no c1", None, "RuntimeError"), id="guard-raises"),
    pytest.param(
        fail_in_pre_execute, tr.ErrorInfo("no c1", None, "RuntimeError"), id="pre-execute-raises"
    ),
]


@pytest.mark.parametrize(("setup", "expected"), PREPARE_ENDINGS)
async def test_a_call_whose_prepare_ends_in_a_denial_or_final_error_never_takes_a_pool_slot(
    setup: DenialSetup, expected: tr.ErrorInfo
) -> None:
    lab = Lab()
    lab.add()
    setup(lab.registry)
    task = asyncio.create_task(lab.registry.run([call(0), call(1), call(2)], max_parallel=2))

    await lab.wait_started("c0", "c2")  # c1 took no slot: c2 dispatches beside c0
    assert lab.commits() == []
    lab.release("c0", "c2")
    batch = await within(task)

    assert batch.results[1].error == expected
    assert lab.starts() == ["c0", "c2"]
    assert lab.commits() == ["c0", "c1", "c2"]


async def test_with_max_parallel_one_denied_calls_do_not_block_the_next() -> None:
    lab = Lab()
    lab.add(gated=False)
    lab.registry.guard(lambda e: "denied" if e.call_id in {"c0", "c2", "c3"} else None)
    calls = [call(i) for i in range(6)]

    batch = await within(lab.registry.run(calls, max_parallel=1))

    assert [r.error.code if r.error else r.value for r in batch.results] == [
        "DENIED", "c1", "DENIED", "DENIED", "c4", "c5",
    ]  # fmt: skip
    assert lab.starts() == ["c1", "c4", "c5"]


# ---- argument errors ------------------------------------------------------------------

BAD_MAX_PARALLEL = [0, -1, True, False, 1.5, "2", None, 2.0]


@pytest.mark.parametrize("bad", BAD_MAX_PARALLEL, ids=repr)
async def test_run_rejects_a_max_parallel_that_is_not_a_positive_int_when_awaited(bad: Any) -> None:
    lab = Lab()
    lab.add(gated=False)
    ran: list[str] = []

    def pre(execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        ran.append("pre")
        return call_next()

    lab.registry.pre_execute(pre)

    pending = lab.registry.run([call(0)], max_parallel=bad)  # creating it does not raise
    with pytest.raises(ValueError, match=exactly(MAX_PARALLEL_ERROR)):
        await pending

    assert ran == []
    assert lab.log == []
    assert lab.notified == []


@pytest.mark.parametrize("bad", BAD_MAX_PARALLEL, ids=repr)
def test_stream_rejects_a_max_parallel_that_is_not_a_positive_int_when_called(bad: Any) -> None:
    lab = Lab()
    lab.add(gated=False)

    with pytest.raises(ValueError, match=exactly(MAX_PARALLEL_ERROR)):
        lab.registry.stream([call(0)], max_parallel=bad)

    assert lab.notified == []


async def test_scope_run_and_stream_reject_a_bad_max_parallel_the_same_way() -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")
    pending = scope.run([], max_parallel=0)
    with pytest.raises(ValueError, match=exactly(MAX_PARALLEL_ERROR)):
        await pending
    with pytest.raises(ValueError, match=exactly(MAX_PARALLEL_ERROR)):
        scope.stream([], max_parallel=True)


# ---- scopes ---------------------------------------------------------------------------


def scoped_lab() -> tuple[tr.ToolRegistry, tr.Scope, list[tr.Execution]]:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")

    async def where(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        return f"{ctx.call_id} in {ctx.scope}"

    scope.register(make_tool("mine", where))
    seen: list[tr.Execution] = []
    scope.on_result(lambda execution, result: seen.append(execution), all_scopes=True)
    return registry, scope, seen


async def test_scope_run_binds_unscoped_calls_to_the_scope() -> None:
    _, scope, seen = scoped_lab()

    batch = await within(scope.run([call(0, "mine"), call(1, "mine", scope="agent")]))

    assert [r.value for r in batch.results] == ["c0 in agent", "c1 in agent"]
    assert [(e.call_id, e.scope) for e in seen] == [("c0", "agent"), ("c1", "agent")]


async def test_scope_stream_binds_unscoped_calls_to_the_scope() -> None:
    _, scope, seen = scoped_lab()

    async with contextlib.aclosing(scope.stream([call(0, "mine"), call(1, "mine")])) as stream:
        items = [item async for item in stream]

    assert [item.result.value for item in items] == ["c0 in agent", "c1 in agent"]
    assert [item.index for item in items] == [0, 1]
    assert [(e.call_id, e.scope) for e in seen] == [("c0", "agent"), ("c1", "agent")]


async def test_scope_run_rejects_a_call_naming_another_scope_before_any_call_runs() -> None:
    registry, scope, seen = scoped_lab()
    registry.scope("other")
    calls = [call(0, "mine"), call(1, "mine", scope="other")]

    pending = scope.run(calls)
    with pytest.raises(ValueError):  # noqa: PT011 - the spec fixes no message
        await pending

    assert seen == []


def test_scope_stream_rejects_a_call_naming_another_scope_when_called() -> None:
    _, scope, seen = scoped_lab()
    calls = [call(0, "mine"), call(1, "mine", scope="other")]

    with pytest.raises(ValueError):  # noqa: PT011 - the spec fixes no message
        scope.stream(calls)

    assert seen == []


# ---- stream and Committed ---------------------------------------------------------------


async def test_stream_yields_each_committed_in_model_order_as_soon_as_it_commits() -> None:
    lab = Lab()
    lab.add()
    calls = [call(0), call(1), call(2)]
    lab.release("c0")

    async with contextlib.aclosing(lab.registry.stream(calls)) as stream:
        first = await within(stream.__anext__())
        assert lab.commits() == ["c0"]
        assert not lab.finished["c1"].is_set()  # yielded while c1 still runs
        lab.release("c2")
        await within(lab.finished["c2"].wait())
        lab.release("c1")
        second = await within(stream.__anext__())
        third = await within(stream.__anext__())
        with pytest.raises(StopAsyncIteration):
            await within(stream.__anext__())

    for index, item in enumerate((first, second, third)):
        assert isinstance(item, tr.Committed)
        assert item.index == index
        assert item.call is calls[index]
        assert item.result is lab.notified[index][1]
        assert item.result.value == f"c{index}"
        assert item.started is True


async def test_a_stream_runs_nothing_until_its_first_anext() -> None:
    lab = Lab()
    lab.add(gated=False)
    stream = lab.registry.stream([call(0), call(1)])
    await one_turn()
    assert lab.log == []

    async with contextlib.aclosing(stream):
        items = [item.result.value async for item in stream]

    assert items == ["c0", "c1"]


async def test_committed_started_is_true_for_calls_denied_or_failed_in_prepare() -> None:
    lab = Lab()
    lab.add(gated=False)
    lab.registry.guard(lambda e: "denied" if e.call_id == "c0" else None)

    def pre(execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        if execution.call_id == "c1":
            raise RuntimeError("pre broke")
        return call_next()

    lab.registry.pre_execute(pre)
    stopped = tr.CancelController()
    stopped.cancel()
    calls = [
        call(0),
        call(1),
        call(2, "missing"),
        call(3, arguments={"x": float("nan")}),
        call(4, signal=stopped.signal),
        call(5),
    ]

    async with contextlib.aclosing(lab.registry.stream(calls)) as stream:
        items = [item async for item in stream]

    assert [item.index for item in items] == [0, 1, 2, 3, 4, 5]
    assert [item.started for item in items] == [True, True, True, True, False, True]
    assert items[0].result.error == tr.ErrorInfo("denied", "DENIED")
    assert_error(items[4].result, ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError")
    assert items[5].result.value == "c5"


def test_batch_and_committed_are_frozen_slotted_values_with_the_spec_fields() -> None:
    result = tr.ToolResult((tr.TextContent("ok"),))
    batch = tr.Batch((result,), (), False, True)
    item = tr.Committed(0, call(0), result, True)

    assert [f.name for f in dataclasses.fields(tr.Batch)] == [
        "results", "contexts", "cancelled", "concludes_turn",
    ]  # fmt: skip
    assert [f.name for f in dataclasses.fields(tr.Committed)] == [
        "index", "call", "result", "started",
    ]  # fmt: skip
    assert hasattr(tr.Batch, "__slots__")
    assert hasattr(tr.Committed, "__slots__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.cancelled = True  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.started = False  # type: ignore[misc]


async def test_stream_used_with_aclosing_and_async_for_yields_every_call() -> None:
    lab = Lab()
    lab.add(gated=False)
    lab.add("solo", safe=False, gated=False)
    calls = [call(0), call(1, "solo"), call(2), call(3)]

    async with contextlib.aclosing(lab.registry.stream(calls)) as stream:
        assert isinstance(stream, tr.CallStream)
        items = [item async for item in stream]

    assert [(item.index, item.result.value) for item in items] == [
        (0, "c0"), (1, "c1"), (2, "c2"), (3, "c3"),
    ]  # fmt: skip
    assert lab.commits() == ["c0", "c1", "c2", "c3"]


# ---- ownership --------------------------------------------------------------------------


async def test_nothing_the_batch_started_is_still_running_when_run_returns() -> None:
    lab = Lab()
    lab.add()

    async def polite(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        await within(lab.gates[ctx.call_id].wait())
        return "polite"

    def threaded(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        return "threaded"

    lab.registry.register(make_tool("polite", polite, cancellation="cooperative"))
    lab.registry.register(raw_tool("threaded", threaded, concurrency_safe=True))
    before = asyncio.all_tasks()
    task = asyncio.create_task(
        lab.registry.run([call(0), call(1, "polite"), call(2, "threaded"), call(3)])
    )
    await lab.wait_started("c0", "c3")
    lab.release("c0", "c1", "c3")
    batch = await within(task)

    assert asyncio.all_tasks() == before
    assert [r.value for r in batch.results] == ["c0", "polite", "threaded", "c3"]


async def test_a_settled_call_commits_while_the_last_call_of_the_batch_still_runs() -> None:
    # Issue 12: c0 settles while c1 (the last call) is in pre-execute; c1 then blocks.
    # c0 must be yielded before c1 ends: each call commits once it and every earlier
    # call have settled.
    lab = Lab()
    lab.add()
    lab.release("c0")

    async def hold_c1(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        if execution.call_id == "c1":
            await lab.finished["c0"].wait()
        return await call_next()

    lab.registry.pre_execute(hold_c1)
    async with contextlib.aclosing(lab.registry.stream([call(0), call(1)], max_parallel=2)) as s:
        first = await within(s.__anext__())
        assert first.index == 0
        assert lab.commits() == ["c0"]
        assert "end c1" not in lab.log  # committed while c1's body still runs
        lab.release("c1")
        second = await within(s.__anext__())
    assert second.result.value == "c1"


async def test_run_commits_a_settled_call_before_the_last_body_ends() -> None:
    lab = Lab()
    lab.add()
    lab.release("c0")

    async def hold_c1(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        if execution.call_id == "c1":
            await lab.finished["c0"].wait()
        return await call_next()

    lab.registry.pre_execute(hold_c1)
    batch = asyncio.ensure_future(lab.registry.run([call(0), call(1)], max_parallel=2))
    await within(lab.started["c1"].wait())
    for _ in range(3):
        await one_turn()
    assert lab.commits() == ["c0"]
    lab.release("c1")
    assert [r.value for r in (await within(batch)).results] == ["c0", "c1"]


# ---- CallStream.batch ---------------------------------------------------------------


async def test_an_exhausted_streams_batch_is_the_batch_run_would_have_returned() -> None:
    lab = Lab()
    lab.add(gated=False, defer=True)
    calls = [call(0), call(1), call(2)]
    stream = lab.registry.stream(calls)
    async with contextlib.aclosing(stream):
        items = [item async for item in stream]
    batch = stream.batch
    assert isinstance(batch, tr.Batch)
    assert batch.results == tuple(item.result for item in items)
    assert texts(batch.contexts) == ["from c0", "from c1", "from c2"]
    assert batch.cancelled is False
    assert batch.concludes_turn is False
    ran = await lab.registry.run(calls)
    assert [r.value for r in ran.results] == [r.value for r in batch.results]
    assert stream.batch == batch  # the same value each time it is read


async def test_a_stream_closed_early_has_a_batch_with_every_call_and_cancelled_set() -> None:
    lab = Lab()
    lab.add(gated=False)
    stream = lab.registry.stream([call(0), call(1), call(2)], max_parallel=1)
    async with contextlib.aclosing(stream):
        async for _ in stream:
            break
    batch = stream.batch
    assert batch.cancelled is True
    assert batch.results[0].value == "c0"
    for result in batch.results[1:]:
        assert_error(result, ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError")


async def test_reading_a_streams_batch_before_it_is_exhausted_raises() -> None:
    lab = Lab()
    lab.add(gated=False)
    stream = lab.registry.stream([call(0), call(1)])
    with pytest.raises(RuntimeError, match=exactly(
            "CallStream.batch is available once the stream is exhausted or closed")):
        _ = stream.batch
    async with contextlib.aclosing(stream):
        await within(stream.__anext__())
        with pytest.raises(RuntimeError, match="once the stream is exhausted or closed"):
            _ = stream.batch
        await within(stream.__anext__())
        with pytest.raises(RuntimeError, match="once the stream is exhausted or closed"):
            _ = stream.batch  # every call committed, but the stream has not ended yet
        with pytest.raises(StopAsyncIteration):
            await within(stream.__anext__())
    assert len(stream.batch.results) == 2


async def test_a_stream_closed_before_it_started_has_no_batch() -> None:
    lab = Lab()
    lab.add(gated=False)
    stream = lab.registry.stream([call(0)])
    await stream.aclose()
    with pytest.raises(RuntimeError, match=exactly(
            "CallStream.batch: the stream was closed before its batch started; "
            "nothing ran, so there is no Batch")):
        _ = stream.batch
    assert lab.log == []


async def test_a_stream_whose_scheduler_failed_has_no_batch() -> None:
    lab = Lab()
    lab.add(gated=False)

    class Boom(BaseException):
        """Not an Exception: the pipeline lets it through, a failure of the scheduler."""

    def explode(execution: tr.Execution, result: tr.ToolResult) -> None:
        raise Boom

    lab.registry.on_result(explode)
    stream = lab.registry.stream([call(0)])
    with pytest.raises(Boom):
        async with contextlib.aclosing(stream):
            await within(stream.__anext__())
    with pytest.raises(RuntimeError, match="the batch did not finish"):
        _ = stream.batch
