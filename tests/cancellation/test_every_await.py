"""Cancellation at every await point of a call and of a batch.

Every await of the middleware (pre-, around- and post-execute, before and after
``call_next()``), of the approver and of the body stops at a *point*: a future the test
resolves, one at a time, in the order the points were reached. A dry run counts the
points; then, for each ``k``, the test opens ``k`` points and injects a cancellation
while the call (or batch) waits at the next one — by firing the call's or the batch's
signal, or by cancelling the asyncio task running ``execute``/``run`` — and keeps
opening whatever is still reachable until the task ends.

After each run: every call has its one result and one notification (signal), or the
``CancelledError`` propagated with no notification after it (task); no point is still
waiting and none is reached later; no task the library started is still running.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

import toolrail as tr
from helpers import PostNext, one_turn, raw_tool

Cancellation = Literal["interrupt", "cooperative"]

STAGES = (
    "pre-before",
    "pre-after",
    "approve",
    "around-before",
    "body-1",
    "body-2",
    "around-after",
    "post-before",
    "post-after",
)
CALL_POINTS = len(STAGES)
BATCH_SIZE = 3
BATCH_POINTS = BATCH_SIZE * CALL_POINTS
NOTE = tr.ContextMessage((tr.TextContent("note"),), "work")


class Points:
    """The instrumented awaits: each waits on a future until the test opens it."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.waiting: list[tuple[str, asyncio.Future[None]]] = []
        self.reached: list[str] = []
        self.changed: asyncio.Future[None] | None = None

    async def at(self, label: str) -> None:
        gate: asyncio.Future[None] = self.loop.create_future()
        self.waiting.append((label, gate))
        self.reached.append(label)
        self.poke()
        await gate

    def poke(self) -> None:
        if self.changed is not None and not self.changed.done():
            self.changed.set_result(None)

    def live(self) -> list[str]:
        """The points something is waiting at now (a cancelled gate waits no more)."""
        self.waiting = [(label, gate) for label, gate in self.waiting if not gate.done()]
        return [label for label, _ in self.waiting]

    def open_first(self) -> None:
        self.waiting.pop(0)[1].set_result(None)

    async def settle(self, task: asyncio.Future[Any]) -> None:
        """Wait until some point is waiting or ``task`` is done."""
        task.add_done_callback(lambda _: self.poke())
        while not (self.live() or task.done()):
            self.changed = self.loop.create_future()
            await asyncio.wait_for(self.changed, 5)


@dataclass
class Lab:
    """A registry whose every stage awaits points, recording what ran and what committed."""

    cancellation: Cancellation = "interrupt"
    points: Points = field(default_factory=Points)
    registry: tr.ToolRegistry = field(default_factory=tr.ToolRegistry)
    bodies: list[str] = field(default_factory=list)  # body started / ended, in order
    notified: list[tuple[str, tr.ToolResult]] = field(default_factory=list)

    def __post_init__(self) -> None:
        registry = self.registry
        for name, safe in (("work", True), ("solo", False)):
            registry.register(
                raw_tool(name, self.body, concurrency_safe=safe, cancellation=self.cancellation)
            )
        registry.pre_execute(self.pre)
        registry.around_execute(self.around)
        registry.post_execute(self.post)
        registry.approver = self.approve
        registry.on_result(lambda e, r: self.notified.append((e.call_id, r)))

    async def pre(self, execution: tr.Execution, call_next: Callable[[], Awaitable[Any]]) -> Any:
        await self.points.at(f"{execution.call_id} pre-before")
        await call_next()
        await self.points.at(f"{execution.call_id} pre-after")
        return tr.Ask()

    async def approve(self, request: tr.ApprovalRequest) -> str:
        await self.points.at(f"{request.call_id} approve")
        return "allowed-once"

    async def around(
        self, execution: tr.Execution, call_next: Callable[[], Awaitable[tr.ToolResult]]
    ) -> tr.ToolResult:
        await self.points.at(f"{execution.call_id} around-before")
        result = await call_next()
        await self.points.at(f"{execution.call_id} around-after")
        return result

    async def body(self, arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        self.bodies.append(f"{ctx.call_id} started")
        try:
            ctx.defer_context("note", source="work")
            await self.points.at(f"{ctx.call_id} body-1")
            await self.points.at(f"{ctx.call_id} body-2")
        finally:
            # A cleanup that takes a few turns and finishes even if cancelled again: the
            # registry must wait for it before it returns or raises.
            for _ in range(3):
                with contextlib.suppress(asyncio.CancelledError):
                    await one_turn()
            self.bodies.append(f"{ctx.call_id} ended")
        return "done"

    async def post(
        self, execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> Any:
        await self.points.at(f"{execution.call_id} post-before")
        decision = await call_next()
        await self.points.at(f"{execution.call_id} post-after")
        return decision

    def started(self, call_id: str) -> bool:
        return f"{call_id} started" in self.bodies

    def assert_bodies_ended(self) -> None:
        for entry in self.bodies:
            if entry.endswith(" started"):
                assert entry.replace("started", "ended") in self.bodies


@dataclass
class Outcome:
    injected_at: str | None = None  # the point the call waited at when cancelled
    notified_before: int = 0  # notifications already made at that moment
    opened: int = 0
    # What was still going on when the task finished (seen by its first done callback).
    waiting_at_end: list[str] = field(default_factory=list)
    running_at_end: set[asyncio.Task[Any]] = field(default_factory=set)
    bodies_at_end: list[str] = field(default_factory=list)


async def drive(
    lab: Lab, task: asyncio.Future[Any], k: int, inject: Callable[[], object]
) -> Outcome:
    """Open points one by one; after ``k`` of them, inject while a point is waiting."""
    points = lab.points
    opened = 0
    outcome = Outcome()

    def at_end(_: object) -> None:
        outcome.waiting_at_end = points.live()
        outcome.running_at_end = {t for t in asyncio.all_tasks() if not t.done()}
        outcome.bodies_at_end = list(lab.bodies)

    task.add_done_callback(at_end)
    while True:
        await points.settle(task)
        if task.done():
            break
        if outcome.injected_at is None and opened == k:
            outcome.injected_at = points.live()[0]
            outcome.notified_before = len(lab.notified)
            inject()
            continue
        points.open_first()
        opened += 1
    outcome.opened = opened
    return outcome


async def assert_quiescent(lab: Lab, outcome: Outcome, before: set[asyncio.Task[Any]]) -> None:
    """When the task ended nothing waited at a point and no task it started still ran,
    every body had ended; and nothing reaches a point or notifies later."""
    assert outcome.waiting_at_end == []
    assert outcome.running_at_end - before == set()
    assert [e for e in lab.bodies if e.endswith(" started")] == [
        e for e in outcome.bodies_at_end if e.endswith(" started")
    ]
    lab.bodies = outcome.bodies_at_end
    lab.assert_bodies_ended()
    assert lab.points.live() == []
    reached = list(lab.points.reached)
    notified = list(lab.notified)
    for _ in range(3):
        await one_turn()
    assert lab.points.reached == reached
    assert lab.notified == notified
    assert asyncio.all_tasks() - before == set()


def aborted_before() -> tr.ToolResult:
    message = "tool call aborted before dispatch"
    return tr.ToolResult(
        (tr.TextContent("Error: " + message),),
        True,
        None,
        tr.ErrorInfo(message, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError"),
    )


def aborted() -> tr.ToolResult:
    message = "tool call aborted"
    return tr.ToolResult(
        (tr.TextContent("Error: " + message),),
        True,
        None,
        tr.ErrorInfo(message, "ABORTED", "ToolAbortedError"),
        None,
        (NOTE,),
    )


def done() -> tr.ToolResult:
    return tr.ToolResult((tr.TextContent("done"),), False, "done", None, None, (NOTE,))


# ---- one call ------------------------------------------------------------------------


async def test_a_call_waits_at_every_point_once_in_stage_order() -> None:
    lab = Lab()
    before = asyncio.all_tasks()
    task = asyncio.ensure_future(lab.registry.execute(tr.ToolCall(call_id="c", name="work")))

    outcome = await drive(lab, task, CALL_POINTS + 1, lambda: None)

    assert task.result() == done()
    assert outcome.opened == CALL_POINTS
    assert lab.points.reached == [f"c {stage}" for stage in STAGES]
    await assert_quiescent(lab, outcome, before)


@pytest.mark.parametrize("cancellation", ["interrupt", "cooperative"])
@pytest.mark.parametrize("k", range(CALL_POINTS))
async def test_the_call_signal_firing_at_any_await_gives_one_result_and_one_notification(
    k: int,
    cancellation: Cancellation,
) -> None:
    lab = Lab(cancellation)
    controller = tr.CancelController()
    before = asyncio.all_tasks()
    task = asyncio.ensure_future(
        lab.registry.execute(tr.ToolCall(call_id="c", name="work", signal=controller.signal))
    )

    outcome = await drive(lab, task, k, controller.cancel)
    result = task.result()

    assert outcome.injected_at == f"c {STAGES[k]}"
    assert lab.notified == [("c", result)]
    assert lab.notified[0][1] is result
    if lab.started("c"):
        assert result == aborted()
    else:
        assert result == aborted_before()
    # The body runs only when the signal fires once dispatch has begun (its own points).
    assert lab.started("c") is (k >= STAGES.index("body-1"))
    if k < STAGES.index("approve"):
        assert "c approve" not in lab.points.reached  # nobody asks about a cancelled call
    await assert_quiescent(lab, outcome, before)


@pytest.mark.parametrize("cancellation", ["interrupt", "cooperative"])
@pytest.mark.parametrize("k", range(CALL_POINTS))
async def test_cancelling_the_execute_task_at_any_await_propagates_without_notification(
    k: int,
    cancellation: Cancellation,
) -> None:
    lab = Lab(cancellation)
    before = asyncio.all_tasks()
    task = asyncio.ensure_future(lab.registry.execute(tr.ToolCall(call_id="c", name="work")))

    outcome = await drive(lab, task, k, task.cancel)

    assert outcome.injected_at == f"c {STAGES[k]}"
    assert task.cancelled()
    assert lab.notified == []
    assert lab.started("c") is (k >= STAGES.index("body-1"))
    await assert_quiescent(lab, outcome, before)


# ---- a batch of three calls ----------------------------------------------------------


def batch_calls(signal: tr.CancelSignal | None = None) -> list[tr.ToolCall]:
    """Two parallel calls, then an exclusive one; only c1 carries ``signal``."""
    return [
        tr.ToolCall(call_id="c0", name="work"),
        tr.ToolCall(call_id="c1", name="work", signal=signal),
        tr.ToolCall(call_id="c2", name="solo"),
    ]


async def test_a_batch_waits_at_every_point_of_every_call_once() -> None:
    lab = Lab()
    before = asyncio.all_tasks()
    task = asyncio.ensure_future(lab.registry.run(batch_calls(), max_parallel=2))

    outcome = await drive(lab, task, BATCH_POINTS + 1, lambda: None)

    assert task.result().results == (done(), done(), done())
    assert outcome.opened == BATCH_POINTS
    assert sorted(lab.points.reached) == sorted(
        f"c{i} {stage}" for i in range(BATCH_SIZE) for stage in STAGES
    )
    await assert_quiescent(lab, outcome, before)


@pytest.mark.parametrize("which", ["batch", "call"])
@pytest.mark.parametrize("k", range(BATCH_POINTS))
async def test_a_signal_firing_at_any_await_of_a_batch_gives_every_call_one_result(
    k: int,
    which: str,
) -> None:
    lab = Lab()
    controller = tr.CancelController()
    batch_signal = controller.signal if which == "batch" else None
    call_signal = controller.signal if which == "call" else None
    before = asyncio.all_tasks()
    task = asyncio.ensure_future(
        lab.registry.run(batch_calls(call_signal), max_parallel=2, signal=batch_signal)
    )

    outcome = await drive(lab, task, k, controller.cancel)
    batch = task.result()

    assert outcome.injected_at is not None
    assert batch.cancelled is (which == "batch")
    assert lab.notified == [(f"c{i}", r) for i, r in enumerate(batch.results)]
    committed = {call_id for call_id, _ in lab.notified[: outcome.notified_before]}
    for i, result in enumerate(batch.results):
        call_id = f"c{i}"
        if call_id in committed or (which == "call" and call_id != "c1"):
            assert result == done()
        elif lab.started(call_id):
            assert result == aborted()
        else:
            assert result == aborted_before()
    await assert_quiescent(lab, outcome, before)


@pytest.mark.parametrize("k", range(BATCH_POINTS))
async def test_cancelling_the_run_task_at_any_await_propagates_and_notifies_nothing_more(
    k: int,
) -> None:
    lab = Lab()
    before = asyncio.all_tasks()
    task = asyncio.ensure_future(lab.registry.run(batch_calls(), max_parallel=2))

    outcome = await drive(lab, task, k, task.cancel)

    assert outcome.injected_at is not None
    assert task.cancelled()
    assert len(lab.notified) == outcome.notified_before
    assert [call_id for call_id, _ in lab.notified] == [
        f"c{i}" for i in range(outcome.notified_before)
    ]
    assert all(result == done() for _, result in lab.notified)
    await assert_quiescent(lab, outcome, before)
