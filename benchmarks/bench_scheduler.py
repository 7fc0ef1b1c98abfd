"""The scheduler: I/O-bound parallel batches and per-call overhead of trivial ones."""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import toolrail as tr

from ._timing import Figure


async def _wait(arguments: Any, ctx: tr.RunContext) -> str:
    await asyncio.sleep(0.02)  # stands for 20 ms of I/O
    return "done"


async def _trivial(arguments: Any, ctx: tr.RunContext) -> str:
    return "done"


def _registry() -> tr.ToolRegistry:
    registry = tr.ToolRegistry()
    for name, body in (("wait", _wait), ("trivial", _trivial)):
        registry.register(tr.Tool(name=name, description=name, parameters={"type": "object"},
                                  execute=body, concurrency_safe=True))
    return registry


async def io_figure(repeat: int) -> Figure:
    registry = _registry()
    calls = [tr.ToolCall(call_id=str(i), name="wait") for i in range(100)]
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        await registry.run(calls, max_parallel=10)
        samples.append((time.perf_counter() - start) * 1e3)
    return Figure("run(): 100 x 20 ms I/O calls, max_parallel=10 (ms per batch)",
                  statistics.median(samples), min(samples), max(samples))


async def trivial_figures(count: int, repeat: int) -> list[Figure]:
    registry = _registry()
    calls = [tr.ToolCall(call_id=str(i), name="trivial") for i in range(count)]
    batch: list[float] = []
    single: list[float] = []

    async def one_batch() -> None:
        start = time.perf_counter()
        await registry.run(calls)
        batch.append((time.perf_counter() - start) / count * 1e6)

    async def one_at_a_time() -> None:
        start = time.perf_counter()
        for call in calls:
            await registry.execute(call)
        single.append((time.perf_counter() - start) / count * 1e6)

    await one_batch()  # warm-up, not kept
    await one_at_a_time()
    batch.clear()
    single.clear()
    # Rounds in ABBA order, so a drift in the machine's load falls on both alike.
    for round_ in range(repeat):
        first, second = (one_batch, one_at_a_time) if round_ % 2 else (one_at_a_time, one_batch)
        await first()
        await second()
    return [
        Figure(f"run(): {count} trivial parallel calls, per call",
               statistics.median(batch), min(batch), max(batch)),
        Figure("execute(): the same call, one at a time",
               statistics.median(single), min(single), max(single)),
    ]


async def main(quick: bool) -> list[Figure]:
    repeat = 3 if quick else 21
    figures = [await io_figure(2 if quick else 5)]
    figures += await trivial_figures(100 if quick else 1000, repeat)
    return figures


def bars(figures: list[Figure]) -> list[str]:
    io, batch, single = figures
    return [
        f"100 x 20 ms at max_parallel=10: {io.median_us:.0f} ms = {io.median_us / 200:.2f}x "
        "the ideal 200 ms (bar: at most 1.2x)",
        f"run() per call / execute() = {batch.median_us / single.median_us:.2f}x "
        "(bar: at most 3x)",
    ]
