"""Properties of ``run`` over generated batches (spec: scheduler.md).

A reference model of scheduler.md's pool predicts which bodies are running at every
step of a generated batch (parallel and exclusive tools, denials, failures,
``max_parallel``, a batch cancellation); the test releases the running bodies' gates in
a generated order (``asyncio.Event`` gates, never sleeps) and checks results, commit
order, one-at-a-time ordered stages and the pool bound. Each scenario runs in its own
``asyncio.run`` so that every example gets a fresh loop; every wait is bounded.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolrail as tr
from helpers import PostNext, assert_frozen, error, one_turn, raw_tool, success, within

ABORTED = "tool call aborted"


ABORTED_BEFORE = "tool call aborted before dispatch"


# ---- run: a reference model of the pool --------------------------------------------

CALL_KINDS = ("ok", "fail", "pre_deny", "guard_deny")


@dataclass(frozen=True)
class Plan:
    kinds: tuple[str, ...]
    parallel: tuple[bool, ...]
    max_parallel: int
    priority: tuple[int, ...]  # the order in which running bodies are released
    cancel_at: int | None  # fire the batch signal after this many releases


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    n = draw(st.integers(1, 8))
    # Mostly parallel calls that reach their bodies, so that the pool fills up.
    kinds = draw(st.lists(st.sampled_from(CALL_KINDS[:1] * 3 + CALL_KINDS), min_size=n, max_size=n))
    parallel = draw(st.lists(st.sampled_from((True, True, True, False)), min_size=n, max_size=n))
    priority = draw(st.permutations(range(n)))
    cancel_at = draw(st.none() | st.integers(0, n))
    return Plan(tuple(kinds), tuple(parallel), draw(st.integers(1, 4)), tuple(priority), cancel_at)


class Pool:
    """scheduler.md's groups and pool, as a state machine the test advances."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.n = len(plan.kinds)
        self.started = 0
        self.cursor = 0
        self.parallel = False
        self.dispatching: set[int] = set()
        self.released: set[int] = set()
        self.settled: dict[int, tr.ToolResult] = {}
        self.prepared = 0  # calls whose prepare ran (started before the cancellation)
        self.results: list[tr.ToolResult] = []
        self.cancelled = False

    def advance(self) -> None:
        """Commit and start until only a release (or the cancellation) can move it on."""
        while self.cursor < self.n:
            if self.cursor in self.settled:
                result = self.settled.pop(self.cursor)
                if self.cancelled and not result.is_error:
                    result = error(ABORTED, "ABORTED", "ToolAbortedError")
                self.results.append(result)
                self.cursor += 1
            elif self.started < self.n and self.may_start():
                self.start(self.started)
            else:
                return

    def may_start(self) -> bool:
        index = self.started
        if self.cancelled:
            return True
        if index == self.cursor:
            self.parallel = self.plan.parallel[index]
            return True
        if not self.parallel or len(self.dispatching) >= self.plan.max_parallel:
            return False
        if self.plan.parallel[index]:
            return True
        self.parallel = False
        return False

    def start(self, index: int) -> None:
        self.started = index + 1
        kind = self.plan.kinds[index]
        if self.cancelled:
            self.settled[index] = error(
                ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError"
            )
            return
        self.prepared = index + 1
        if kind == "pre_deny":
            self.settled[index] = error(f"pre denies c{index}", "DENIED")
        elif kind == "guard_deny":
            self.settled[index] = error(f"guard denies c{index}", "DENIED")
        else:
            self.dispatching.add(index)

    def release(self, index: int) -> None:
        self.dispatching.remove(index)
        self.released.add(index)
        if self.plan.kinds[index] == "ok":
            self.settled[index] = success(f"ok{index}")
        else:
            self.settled[index] = error(f"c{index} failed", "BODY", "ToolError")

    def cancel(self) -> None:
        self.cancelled = True
        for index in self.dispatching:
            self.settled[index] = error(ABORTED, "ABORTED", "ToolAbortedError")
        self.dispatching.clear()


class Lab:
    """The real batch: gated bodies and middleware that log what happens, in order."""

    def __init__(self, plan: Plan) -> None:
        n = len(plan.kinds)
        self.plan = plan
        self.log: list[str] = []
        self.started = [asyncio.Event() for _ in range(n)]
        self.gates = [asyncio.Event() for _ in range(n)]
        self.finished = [asyncio.Event() for _ in range(n)]
        self.prepared = [asyncio.Event() for _ in range(n)]
        self.committed = [asyncio.Event() for _ in range(n)]
        self.notified: Counter[str] = Counter()
        self.running = 0
        self.peak = 0
        self.registry = registry = tr.ToolRegistry()
        for name, safe in (("par", True), ("exc", False)):
            registry.register(raw_tool(name, self.body, concurrency_safe=safe))
        registry.pre_execute(self.pre)
        registry.guard(self.guard)
        registry.post_execute(self.post)
        registry.on_result(self.observe)

    @staticmethod
    def index(execution: tr.Execution) -> int:
        return int(execution.call_id[1:])

    async def body(self, arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        i = self.index(ctx)
        self.log.append(f"body c{i}")
        self.running += 1
        self.peak = max(self.peak, self.running)
        self.started[i].set()
        try:
            await self.gates[i].wait()
        finally:
            self.running -= 1
            self.finished[i].set()
        if self.plan.kinds[i] == "fail":
            raise tr.ToolError(f"c{i} failed", code="BODY")
        return f"ok{i}"

    async def pre(self, execution: tr.Execution, call_next: Callable[[], Awaitable[Any]]) -> Any:
        i = self.index(execution)
        self.log.append(f"pre-start c{i}")
        await one_turn()
        self.log.append(f"pre-end c{i}")
        self.prepared[i].set()
        if self.plan.kinds[i] == "pre_deny":
            return tr.Deny(f"pre denies c{i}")
        return await call_next()

    def guard(self, execution: tr.Execution) -> str | None:
        i = self.index(execution)
        return f"guard denies c{i}" if self.plan.kinds[i] == "guard_deny" else None

    async def post(
        self, execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> Any:
        i = self.index(execution)
        self.log.append(f"post-start c{i}")
        await one_turn()
        self.log.append(f"post-end c{i}")
        return await call_next()

    def observe(self, execution: tr.Execution, result: tr.ToolResult) -> None:
        i = self.index(execution)
        self.log.append(f"commit c{i}")
        self.notified[execution.call_id] += 1
        self.committed[i].set()

    async def reach(self, pool: Pool) -> None:
        """Wait until the real batch has done everything the model says it can do."""
        for i in range(pool.prepared):
            if self.plan.kinds[i] in ("pre_deny", "guard_deny"):
                await within(self.prepared[i].wait())
            else:
                await within(self.started[i].wait())
                if i in pool.released:
                    await within(self.finished[i].wait())
        for i in range(pool.cursor):
            await within(self.committed[i].wait())


def stage_events(log: list[str], stage: str, ids: list[int]) -> None:
    """The stage ran one call at a time (start, end, start, end...), in model order."""
    events = [e for e in log if e.startswith(stage + "-")]
    assert events == [f"{stage}-{edge} c{i}" for i in ids for edge in ("start", "end")]


async def run_plan(plan: Plan) -> None:
    n = len(plan.kinds)
    lab = Lab(plan)
    calls = [
        tr.ToolCall(call_id=f"c{i}", name="par" if plan.parallel[i] else "exc") for i in range(n)
    ]
    controller = tr.CancelController()
    before = asyncio.all_tasks()
    task = asyncio.ensure_future(
        lab.registry.run(calls, max_parallel=plan.max_parallel, signal=controller.signal)
    )
    pool = Pool(plan)
    releases = 0
    while True:
        pool.advance()
        await lab.reach(pool)
        if plan.cancel_at == releases and not pool.cancelled and pool.cursor < n:
            controller.cancel()
            pool.cancel()
            continue
        if not pool.dispatching:
            break
        index = min(pool.dispatching, key=plan.priority.index)
        lab.gates[index].set()
        pool.release(index)
        releases += 1
    batch = await within(task)
    assert asyncio.all_tasks() - {asyncio.current_task()} <= before

    assert list(batch.results) == pool.results
    assert batch.cancelled is pool.cancelled
    assert batch.contexts == ()
    for result in batch.results:
        assert_frozen(result)
    assert lab.notified == Counter(f"c{i}" for i in range(n))
    assert [e for e in lab.log if e.startswith("commit")] == [f"commit c{i}" for i in range(n)]
    assert lab.peak <= plan.max_parallel
    stage_events(lab.log, "pre", list(range(pool.prepared)))
    aborted_before = [
        r.error is not None and r.error.code == "ABORTED_BEFORE_DISPATCH" for r in batch.results
    ]
    stage_events(lab.log, "post", [i for i in range(n) if not aborted_before[i]])
    for i in range(pool.prepared):
        if plan.parallel[i]:
            continue
        # An exclusive call is a group of one: everything before it has committed before
        # it starts, and nothing after it starts before it commits.
        first = lab.log.index(f"pre-start c{i}")
        last = lab.log.index(f"commit c{i}")
        assert all(
            not e.endswith(f" c{j}") for e in lab.log[first : last + 1] for j in range(n) if j != i
        )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_run_matches_the_pool_model_for_any_mix_and_settlement_order(plan: Plan) -> None:
    asyncio.run(run_plan(plan))
