"""Running one model step's calls: groups and the pool (spec: scheduler.md, "Groups",
"The pool").

Overlap and order are proven with ``asyncio.Event`` gates (every wait bounded by
``asyncio.wait_for(..., 5)``), never with sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

import toolrail as tr
from helpers import within
from scheduler_helpers import Lab, PostNext, PreNext, call, make_tool

CallNext = Callable[[], Awaitable[tr.ToolResult]]


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


def run_after_an_observer_flips_safety(
    initially: bool,
) -> tuple[Lab, asyncio.Task[tr.Batch]]:
    """Run an ungated exclusive ``setup`` (c0), then two calls of a tool whose safety is
    ``initially`` until an observer flips it when c0 commits."""
    lab = Lab()
    safe = {"now": initially}
    lab.add(safe=lambda arguments: safe["now"])
    lab.add("setup", safe=False, gated=False)

    def flip(execution: tr.Execution, result: tr.ToolResult) -> None:
        if execution.call_id == "c0":
            safe["now"] = not initially

    lab.registry.on_result(flip)
    calls = [call(0, "setup"), call(1), call(2)]
    return lab, asyncio.create_task(lab.registry.run(calls))


async def test_an_observer_that_marks_later_calls_parallel_lets_them_run_together() -> None:
    lab, task = run_after_an_observer_flips_safety(initially=False)

    await lab.wait_started("c1", "c2")
    lab.release("c1", "c2")
    await within(task)

    assert lab.peak == 2


async def test_an_observer_that_marks_later_calls_exclusive_makes_them_run_one_at_a_time() -> None:
    lab, task = run_after_an_observer_flips_safety(initially=True)

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


def swap_the_tool_when_c0_commits(lab: Lab) -> None:
    """Add an ungated "swap" tool answering "old"; when c0 commits, an observer disposes
    it and adds a "swap" answering "new"."""
    old = lab.add("swap", gated=False, value="old")

    def swap(execution: tr.Execution, result: tr.ToolResult) -> None:
        if execution.call_id == "c0":
            old()
            lab.add("swap", gated=False, value="new")

    lab.registry.on_result(swap)


async def test_the_stage_8_tool_lookup_happens_when_the_dispatch_starts() -> None:
    lab = Lab()
    lab.add()
    swap_the_tool_when_c0_commits(lab)
    holding = asyncio.Event()
    hold = asyncio.Event()

    async def around(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        if execution.call_id == "c1":
            holding.set()
            await within(hold.wait())
        return await call_next()

    lab.registry.around_execute(around)
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
    swap_the_tool_when_c0_commits(lab)

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        if execution.call_id == "c1":
            lab.release("c0")
            await within(lab.finished["c0"].wait())  # c0 settles while c1 is prepared
        return await call_next()

    lab.registry.pre_execute(pre)

    # c1 dispatches right after its prepare; c0's commit (which swaps the tool) follows.
    batch = await within(lab.registry.run([call(0), call(1, "swap")]))

    assert [r.value for r in batch.results] == ["c0", "old"]


async def test_an_observers_registry_change_is_seen_by_the_next_start_in_the_group() -> None:
    lab = Lab()
    swap_the_tool_when_c0_commits(lab)

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
