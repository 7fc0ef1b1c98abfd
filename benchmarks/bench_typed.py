"""Typed tools: per-call cost against its floor, and decoration cost."""

from __future__ import annotations

import statistics
import time
from typing import Any

from pydantic import TypeAdapter
from typing_extensions import TypedDict

import toolrail as tr

from ._timing import Figure, ainterleave

ARGS = {"path": "/tmp/notes.txt", "offset": 3, "limit": 10}


async def read(path: str, offset: int, limit: int) -> str:
    """Read part of a file."""
    return path


class _Args(TypedDict):
    path: str
    offset: int
    limit: int


async def call_figures(repeat: int, target: float) -> list[Figure]:
    adapter = TypeAdapter(_Args)
    registry = tr.ToolRegistry()
    registry.register(tr.tool(read))
    call = tr.ToolCall(call_id="c1", name="read", arguments=ARGS)

    async def floor() -> str:
        return await read(**adapter.validate_python(tr.snapshot_json(ARGS)))

    # Interleaved rounds: a burst of load on the shared machine hits both alike.
    return await ainterleave(
        [("floor: TypeAdapter.validate_python + snapshot + await fn(**args)", floor),
         ("execute(): typed async tool, 3 scalar parameters", lambda: registry.execute(call))],
        repeat=repeat, target=target)


def decoration_figure(count: int, rounds: int) -> Figure:
    """Decorate ``count`` distinct 3-parameter functions and list their schemas.

    Each round decorates freshly made functions (nothing cached on a function object is
    reused); the figure is the median of the rounds.
    """
    samples = []
    for round_ in range(rounds):
        source = "\n".join(
            f"def f{i}(a: int, b: str, c: float = 1.0) -> str:\n"
            f"    '''Tool number {i} of round {round_}.\n\n    Args:\n        a: The a.\n"
            "        b: The b.\n    '''\n"
            "    return b\n"
            for i in range(count)
        )
        namespace: dict[str, Any] = {}
        exec(source, namespace)  # distinct function objects, as a real module would have
        start = time.perf_counter()
        registry = tr.ToolRegistry()
        for i in range(count):
            registry.register(tr.tool(namespace[f"f{i}"]))
        registry.schemas()
        samples.append((time.perf_counter() - start) * 1e3)
    label = f"decorate {count} distinct functions + schemas() (ms)"
    return Figure(label, statistics.median(samples), min(samples), max(samples))


async def main(quick: bool) -> list[Figure]:
    repeat, target = (3, 0.002) if quick else (21, 0.02)
    figures = await call_figures(repeat, target)
    figures.append(decoration_figure(100 if quick else 1000, 1 if quick else 5))
    return figures


def bars(figures: list[Figure]) -> list[str]:
    by = {f.label: f.median_us for f in figures}
    floor = by["floor: TypeAdapter.validate_python + snapshot + await fn(**args)"]
    typed = by["execute(): typed async tool, 3 scalar parameters"]
    decoration = next(f for f in figures if f.label.startswith("decorate"))
    return [
        f"typed execute() / its floor = {typed / floor:.2f}x (bar: at most 3x)",
        f"{decoration.label.split(' (')[0]}: {decoration.median_us:.0f} ms "
        "(bar: under 200 ms for 1000)",
    ]
