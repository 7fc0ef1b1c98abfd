"""Soak: many calls and batches leave nothing behind.

10 000 concurrent ``execute`` calls, and 100 batches of 100 calls, through a registry
with middleware in every stage, a guard, an observer and bodies that defer context.
Afterwards ``tracemalloc`` shows memory back at its baseline (nothing retained per call:
executions, deferred contexts, results, signal callbacks), every ``ExecutionToken`` is
collected, and the long-lived caller and batch signals hold no callbacks.

By default a smaller version runs (1 000 calls, 10 batches); the full one runs with::

    pytest -m soak --soak-full        # or: TOOLRAIL_SOAK=full pytest -m soak
"""

from __future__ import annotations

import asyncio
import gc
import os
import tracemalloc
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import toolrail as tr
from helpers import PostNext, one_turn, raw_tool

pytestmark = pytest.mark.soak

# What a workload may leave allocated once it is over and collected, whatever its size:
# loop and allocator bookkeeping, never a per-call share (1 000 calls retaining even 64
# bytes each would exceed it; the full run is ten times stricter per call).
SLACK = 64 * 1024


@pytest.fixture
def full(request: pytest.FixtureRequest) -> bool:
    return (
        bool(request.config.getoption("--soak-full")) or os.environ.get("TOOLRAIL_SOAK") == "full"
    )


async def within(awaitable: Awaitable[Any]) -> Any:
    return await asyncio.wait_for(awaitable, 60)


def callbacks_held(signal: tr.CancelSignal) -> int:
    """How many callbacks a signal holds (its internal table; empty means nothing leaked)."""
    return len(signal._callbacks or {})


class Lab:
    """A registry exercising every stage; the observer keeps only weak references."""

    def __init__(self) -> None:
        self.tokens: list[weakref.ref[tr.ExecutionToken]] = []
        self.gate: asyncio.Event | None = None
        self.expected = 0
        self.started = 0
        self.all_started = asyncio.Event()
        registry = self.registry = tr.ToolRegistry()
        for name, safe in (("work", True), ("solo", False)):
            registry.register(raw_tool(name, self.body, concurrency_safe=safe))
        registry.pre_execute(self.pre)
        registry.guard(lambda execution: None)
        registry.around_execute(self.around)
        registry.post_execute(self.post)
        registry.on_result(self.observe)

    async def pre(self, execution: tr.Execution, call_next: Callable[[], Awaitable[Any]]) -> Any:
        await one_turn()
        return await call_next()

    async def around(
        self, execution: tr.Execution, call_next: Callable[[], Awaitable[tr.ToolResult]]
    ) -> tr.ToolResult:
        return await call_next()

    async def post(
        self, execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> Any:
        return tr.Accept(contexts=[tr.ContextMessage((tr.TextContent("post"),), "post")])

    async def body(self, arguments: tr.JsonValue, ctx: tr.RunContext) -> dict[str, Any]:
        ctx.defer_context("note", meta={"n": arguments})
        assert not ctx.signal.cancelled
        self.started += 1
        if self.started == self.expected:
            self.all_started.set()
        if self.gate is not None:
            await self.gate.wait()
        else:
            await one_turn()
        return {"echo": arguments}

    def observe(self, execution: tr.Execution, result: tr.ToolResult) -> None:
        assert not result.is_error, result.error
        self.tokens.append(weakref.ref(execution.token))


def traced_growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot) -> tuple[int, str]:
    """Bytes allocated between the snapshots and still held, outside this test file."""
    ignore = [tracemalloc.Filter(False, __file__), tracemalloc.Filter(False, tracemalloc.__file__)]
    stats = after.filter_traces(ignore).compare_to(before.filter_traces(ignore), "lineno")
    growth = sum(stat.size_diff for stat in stats)
    return growth, "\n".join(str(stat) for stat in stats[:10])


async def measure(workload: Callable[[], Awaitable[None]]) -> tuple[int, str]:
    """Run ``workload`` twice under tracemalloc; how much the second run left behind.

    The first run warms up: tables that grow with the number of calls in flight (the
    loop's task set, a signal's callback dict) reach their size there. Tracing starts
    before it, so that a table reallocated during the second run counts the old one as
    freed. Each run is followed by a loop turn: the wake-up callbacks of its finished
    tasks (which hold them, and so asyncio's weak set of scheduled tasks, on 3.13) run
    there, as they would before the caller's next step.
    """
    gc.collect()
    tracemalloc.start()
    try:
        await workload()
        await one_turn()
        gc.collect()
        before = tracemalloc.take_snapshot()
        await workload()
        await one_turn()
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    return traced_growth(before, after)


async def test_concurrent_executes_return_memory_to_its_baseline(full: bool) -> None:
    n = 10_000 if full else 1_000
    lab = Lab()
    caller = tr.CancelController()  # one long-lived signal shared by every call

    async def workload() -> None:
        lab.gate = asyncio.Event()
        lab.started, lab.expected = 0, n
        lab.all_started.clear()
        calls = [
            tr.ToolCall(call_id=f"c{i}", name="work", arguments={"i": i}, signal=caller.signal)
            for i in range(n)
        ]
        pending = asyncio.gather(*(lab.registry.execute(call) for call in calls))
        await within(lab.all_started.wait())
        assert callbacks_held(caller.signal) == n  # every call in flight watches it
        lab.gate.set()
        results = await within(pending)
        assert len(results) == n
        assert results[-1].value == {"echo": {"i": n - 1}}
        assert len(results[-1].contexts) == 2

    growth, top = await measure(workload)

    assert growth < SLACK, f"{growth} bytes retained after {n} calls:\n{top}"
    assert callbacks_held(caller.signal) == 0
    assert len(lab.tokens) == 2 * n
    assert [ref for ref in lab.tokens if ref() is not None] == []
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_batches_return_memory_to_its_baseline(full: bool) -> None:
    batches = 100 if full else 10
    size = 100
    lab = Lab()
    caller = tr.CancelController()
    batch_signal = tr.CancelController()  # one long-lived signal for every batch
    held = [0]  # the most callbacks the batch signal held while a batch ran

    def observe(execution: tr.Execution, result: tr.ToolResult) -> None:
        held[0] = max(held[0], callbacks_held(batch_signal.signal))

    lab.registry.on_result(observe)

    def calls() -> list[tr.ToolCall]:
        # Parallel runs broken up by an exclusive call every tenth position.
        return [
            tr.ToolCall(
                call_id=f"c{i}",
                name="solo" if i % 10 == 9 else "work",
                arguments={"i": i},
                signal=caller.signal,
            )
            for i in range(size)
        ]

    async def workload() -> None:
        for _ in range(batches):
            batch = await within(
                lab.registry.run(calls(), max_parallel=10, signal=batch_signal.signal)
            )
            assert len(batch.results) == size
            assert not batch.cancelled
            assert len(batch.contexts) == 2 * size

    growth, top = await measure(workload)

    assert growth < SLACK, f"{growth} bytes retained after {batches} batches of {size}:\n{top}"
    assert callbacks_held(caller.signal) == 0
    assert held[0] > 0  # the batch watched its signal while it ran
    assert callbacks_held(batch_signal.signal) == 0
    assert len(lab.tokens) == 2 * batches * size
    assert [ref for ref in lab.tokens if ref() is not None] == []
    assert asyncio.all_tasks() == {asyncio.current_task()}
