"""Timing helpers shared by the benchmarks: repeats, warm-up and medians."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """Per-operation cost in microseconds over several repeats."""

    label: str
    median_us: float
    min_us: float
    max_us: float

    def row(self) -> str:
        return (f"{self.label:<58} {self.median_us:>10.3f} µs"
                f"   (min {self.min_us:.3f}, max {self.max_us:.3f})")


def measure(label: str, fn: Callable[[], object], *, number: int, repeat: int) -> Figure:
    """Time a synchronous ``fn``: ``repeat`` rounds of ``number`` calls after a warm-up."""
    for _ in range(min(number, 1000)):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number * 1e6)
    return Figure(label, statistics.median(samples), min(samples), max(samples))


async def ameasure(label: str, fn: Callable[[], Awaitable[object]], *, number: int,
                   repeat: int) -> Figure:
    """Time an async ``fn`` the same way, awaiting each call in the running loop."""
    for _ in range(min(number, 1000)):
        await fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            await fn()
        samples.append((time.perf_counter() - start) / number * 1e6)
    return Figure(label, statistics.median(samples), min(samples), max(samples))


def run(coro: Awaitable[object]) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]
