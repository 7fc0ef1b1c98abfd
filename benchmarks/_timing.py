"""Timing helpers shared by the benchmarks: repeats, warm-up and medians."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """Per-operation cost in microseconds over several repeats."""

    label: str
    median_us: float
    min_us: float
    max_us: float

    def row(self) -> str:
        unit = "ms" if "(ms" in self.label else "µs"  # a few figures are whole batches
        return (f"{self.label:<58} {self.median_us:>10.3f} {unit}"
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


async def ainterleave(
    cases: Sequence[tuple[str, Callable[[], Awaitable[object]]]], *, repeat: int, target: float
) -> list[Figure]:
    """Time several async cases round by round, one sample of each per round.

    On a shared machine a burst of load then lands on every case alike instead of on
    whichever ran during it, which keeps their ratios steady. An untimed warm-up
    calibrates each case's number of calls per sample to last about ``target`` seconds.
    Figures come back in the order of ``cases``.
    """
    numbers = [await _calibrate(fn, target) for _, fn in cases]
    samples: list[list[float]] = [[] for _ in cases]
    for _ in range(repeat):
        for (_, fn), number, out in zip(cases, numbers, samples, strict=True):
            start = time.perf_counter()
            for _ in range(number):
                await fn()
            out.append((time.perf_counter() - start) / number * 1e6)
    return [
        Figure(label, statistics.median(out), min(out), max(out))
        for (label, _), out in zip(cases, samples, strict=True)
    ]


async def _calibrate(fn: Callable[[], Awaitable[object]], target: float) -> int:
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            await fn()
        elapsed = time.perf_counter() - start
        if elapsed >= target / 4 or number >= 1 << 20:
            return max(1, round(number * target / max(elapsed, 1e-9)))
        number *= 2
