"""The registry and execute pipeline: per-call overhead, view costs, snapshot limits."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import toolrail as tr

from ._timing import Figure, ainterleave, measure

ARGS = {"path": "/tmp/notes.txt", "offset": 3, "limit": 10}


async def _read(path: str, offset: int, limit: int) -> str:
    return path


async def _body(arguments: Any, ctx: tr.RunContext) -> str:
    return str(arguments["path"])


def _raw_tool(name: str = "read") -> tr.Tool:
    return tr.Tool(name=name, description="Read a file.", parameters={"type": "object"},
                   execute=_body, concurrency_safe=True)


def _with_middleware() -> tr.ToolRegistry:
    registry = tr.ToolRegistry()
    registry.register(_raw_tool())

    async def pre(execution: tr.Execution, call_next: Any) -> Any:
        return await call_next()

    async def around(execution: tr.Execution, call_next: Any) -> Any:
        return await call_next()

    async def post(execution: tr.Execution, result: tr.ToolResult, call_next: Any) -> Any:
        return await call_next()

    registry.pre_execute(pre)
    registry.around_execute(around)
    registry.post_execute(post)
    registry.guard(lambda execution: None)
    registry.on_result(lambda execution, result: None)
    return registry


async def execute_figures(repeat: int, target: float) -> list[Figure]:
    plain = tr.ToolRegistry()
    plain.register(_raw_tool())
    stacked = _with_middleware()
    call = tr.ToolCall(call_id="c1", name="read", arguments=ARGS)
    # Interleaved rounds: a burst of load on the shared machine hits every case alike.
    return await ainterleave(
        [("floor: bare `await fn(**args)`", lambda: _read(**ARGS)),
         ("execute(): raw async tool, no middleware", lambda: plain.execute(call)),
         ("execute(): one pass-through in every stage", lambda: stacked.execute(call))],
        repeat=repeat, target=target)


def _big_registry() -> tuple[tr.ToolRegistry, list[tr.Scope]]:
    registry = tr.ToolRegistry()
    for i in range(10_000):
        registry.register(_raw_tool(f"tool_{i}"))
    scopes = []
    for s in range(1_000):
        scope = registry.scope(f"agent-{s}")
        for t in range(5):
            scope.register(_raw_tool(f"scoped_{t}"))
        scope.restrict(deny=[f"tool_{s}"])
        scopes.append(scope)
    return registry, scopes


def _small_registry() -> tuple[tr.ToolRegistry, list[tr.Scope]]:
    """The same shape at the small end: one scope of 5 tools with one restriction."""
    registry = tr.ToolRegistry()
    for i in range(10):
        registry.register(_raw_tool(f"tool_{i}"))
    scope = registry.scope("agent-0")
    for t in range(5):
        scope.register(_raw_tool(f"scoped_{t}"))
    scope.restrict(deny=["tool_0"])
    return registry, [scope]


def view_figures(number: int, repeat: int) -> list[Figure]:
    figures = []
    for label, (registry, scopes) in (("10 tools", _small_registry()),
                                      ("10 000 tools x 1 000 scopes", _big_registry())):
        key = scopes[-1].key
        call = tr.ToolCall(call_id="c", name="tool_7", arguments=ARGS, scope=key)
        figures.append(measure(f"get(), {label}", lambda r=registry, k=key: r.get("tool_7", k),
                               number=number, repeat=repeat))
        figures.append(measure(f"execution_mode(), {label}",
                               lambda r=registry, c=call: r.execution_mode(c),
                               number=number, repeat=repeat))
        registry.schemas(key)
        figures.append(measure(f"schemas() again, unchanged, {label}",
                               lambda r=registry, k=key: r.schemas(k),
                               number=max(number // 100, 10), repeat=repeat))
    return figures


def snapshot_figures(number: int, repeat: int) -> list[Figure]:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    start = time.perf_counter()
    tr.snapshot_json(deep)
    deep_us = (time.perf_counter() - start) * 1e6
    dag: Any = {"leaf": 1}
    for _ in range(60):
        dag = {"a": dag, "b": dag}
    start = time.perf_counter()
    tr.snapshot_json(dag)
    dag_us = (time.perf_counter() - start) * 1e6
    return [
        measure("snapshot_json(): 3-key argument object", lambda: tr.snapshot_json(ARGS),
                number=number, repeat=repeat),
        Figure("snapshot_json(): 100 000-deep nested list (once)", deep_us, deep_us, deep_us),
        Figure("snapshot_json(): 60-level DAG, 2 refs per level (once)", dag_us, dag_us, dag_us),
    ]


async def main(quick: bool) -> list[Figure]:
    number, repeat = (200, 3) if quick else (20_000, 7)
    figures = await execute_figures(*((3, 0.002) if quick else (21, 0.02)))
    figures += view_figures(number, repeat)
    figures += snapshot_figures(number, repeat)
    return figures


def bars(figures: list[Figure]) -> list[str]:
    """The issue's bars, as ratios measured in this run."""
    by = {f.label: f.median_us for f in figures}
    floor = by["floor: bare `await fn(**args)`"]
    execute = by["execute(): raw async tool, no middleware"]
    lines = [f"execute() / bare await = {execute / floor:.1f}x (bar: at most 25x)"]
    for view in ("get()", "execution_mode()"):
        small = by[f"{view}, 10 tools"]
        big = by[f"{view}, 10 000 tools x 1 000 scopes"]
        lines.append(f"{view} at 10 000 x 1 000 / at 10 tools = {big / small:.2f}x "
                     "(bar: at most 1.5x)")
    deep = by["snapshot_json(): 100 000-deep nested list (once)"] / 1e3
    dag = by["snapshot_json(): 60-level DAG, 2 refs per level (once)"] / 1e3
    lines.append(f"100 000-deep snapshot: {deep:.1f} ms, no RecursionError; 60-level DAG: "
                 f"{dag:.2f} ms (bar: well under a second)")
    return lines


if __name__ == "__main__":
    result = asyncio.run(main(quick=False))
    for figure in result:
        print(figure.row())
