"""Tool bodies on Ray (``toolrail.remote.Ray``, docs/scale-out.md) beside in-process.

A local Ray cluster (``ray.init()`` on 127.0.0.1, 2 CPUs) runs the bodies:
- a trivial typed tool, in process and on Ray: median and p95 per call;
- the time from the caller's signal to the cancelled body's Ray task ending;
- 1 000 calls through ``run`` at ``max_parallel=64``.

Skipped, with a row saying so, where Ray is not installed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time

import toolrail as tr

from ._timing import Figure


@tr.tool(concurrency_safe=True)
async def add(a: int, b: int) -> int:
    """Add."""
    return a + b


@tr.tool
async def forever() -> str:
    """Never return."""
    await asyncio.Event().wait()
    return "never"


def _percentiles(label: str, samples: list[float]) -> list[Figure]:
    ordered = sorted(samples)
    median, p95 = ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.95)]
    return [Figure(f"{label}, median (ms)", median, ordered[0], ordered[-1]),
            Figure(f"{label}, p95 (ms)", p95, p95, p95)]


async def _timed(registry: tr.ToolRegistry, call: tr.ToolCall, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        await registry.execute(call)
        out.append((time.perf_counter() - start) * 1e3)
    return out


async def _cancels(registry: tr.ToolRegistry, repeat: int) -> list[float]:
    out = []
    for i in range(repeat):
        controller = tr.CancelController()
        call = tr.ToolCall(call_id=str(i), name="forever", signal=controller.signal)
        running = asyncio.ensure_future(registry.execute(call))
        await asyncio.sleep(0.05)  # the Ray task has started
        start = time.perf_counter()
        controller.cancel()
        await running
        out.append((time.perf_counter() - start) * 1e3)
    return out


async def main(quick: bool) -> list[Figure]:
    if importlib.util.find_spec("ray") is None:
        return [Figure("Ray is not installed (toolrail[ray]): skipped", 0, 0, 0)]
    import ray

    from toolrail import remote

    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=2,
             log_to_driver=False)
    try:
        executor = remote.Ray()
        local, on_ray = tr.ToolRegistry(), tr.ToolRegistry()
        local.register(add)
        on_ray.register(executor.tool(add))
        on_ray.register(executor.tool(forever))
        call = tr.ToolCall(call_id="c", name="add", arguments={"a": 1, "b": 2})
        repeat = 20 if quick else 300
        await _timed(on_ray, call, 20)  # warm: workers started, the body in the store
        figures = [*_percentiles("execute() in process", await _timed(local, call, repeat)),
                   *_percentiles("execute() on Ray", await _timed(on_ray, call, repeat)),
                   *_percentiles("the caller's signal to the Ray task ended",
                                 await _cancels(on_ray, 5 if quick else 40))]
        many = [tr.ToolCall(call_id=str(i), name="add", arguments={"a": i, "b": 1})
                for i in range(100 if quick else 1000)]
        start = time.perf_counter()
        batch = await on_ray.run(many, max_parallel=64)
        elapsed = (time.perf_counter() - start) * 1e3
        assert not any(r.is_error for r in batch.results)
        figures.append(Figure(f"run(): {len(many)} calls on Ray at max_parallel=64 (ms)",
                              elapsed, elapsed, elapsed))
        return figures
    finally:
        ray.shutdown()


def bars(figures: list[Figure]) -> list[str]:
    if len(figures) == 1:
        return []
    by = {f.label: f.median_us for f in figures}
    median = by["execute() on Ray, median (ms)"]
    p95 = by["execute() on Ray, p95 (ms)"]
    cancel = by["the caller's signal to the Ray task ended, p95 (ms)"]
    return [f"a call on Ray: median {median:.2f} ms (bar: at most 2.5 ms), p95 {p95:.2f} ms "
            "(bar: at most 5 ms)",
            f"cancel to the Ray task ended: p95 {cancel:.1f} ms (bar: at most 20 ms)"]
