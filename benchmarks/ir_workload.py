"""The workload for instruction counts: ``python ir_workload.py KIND N [KIND N ...]``.

Runs ``N`` iterations of each KIND given, in the order below (a ``run`` iteration is a
batch), after 50 warm-up rounds of every kind, so that the code each kind touches is
loaded and its caches are filled before the counted iterations:

- ``raw``: ``registry.execute`` of a raw async ``Tool``;
- ``typed``: ``registry.execute`` of an ``@tr.tool`` async function of
  ``(path: str, offset: int, limit: int) -> str``;
- ``run``: ``registry.run`` of a batch of 10 raw calls (one batch per iteration);
- ``floor``: the pydantic work a typed call cannot avoid, defined as in
  ``bench_typed.py``: ``TypeAdapter.validate_python`` of a ``TypedDict`` of the same
  three fields over ``snapshot_json`` of the arguments, then ``await fn(**args)``.

``benchmarks/ir.py`` runs it under callgrind once with every kind at its ``N1``, and once
per kind with that kind at ``N2``: each difference cancels the start-up. It imports only
toolrail (from whichever ``src`` is on ``PYTHONPATH``, which may be an older commit's),
pydantic and the standard library, and uses only public API that commit 334927d already
had. It prints where toolrail came from, so the driver can check what it measured.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from pydantic import TypeAdapter
from typing_extensions import TypedDict

import toolrail as tr

KINDS = ("raw", "typed", "run", "floor")
WARM_UP = 50
ARGS = {"path": "/tmp/notes.txt", "offset": 3, "limit": 10}


class _Args(TypedDict):
    path: str
    offset: int
    limit: int


async def _raw_body(arguments: Any, ctx: Any) -> str:
    return str(arguments["path"])


async def read(path: str, offset: int, limit: int) -> str:
    """Read part of a file."""
    return path


async def _workload(iterations: dict[str, int]) -> None:
    registry = tr.ToolRegistry()
    registry.register(tr.Tool(name="read", description="Read a file.",
                              parameters={"type": "object"}, execute=_raw_body,
                              concurrency_safe=True))
    registry.register(tr.tool(read, name="typed_read"))
    raw = tr.ToolCall(call_id="c1", name="read", arguments=ARGS)
    typed = tr.ToolCall(call_id="c2", name="typed_read", arguments=ARGS)
    batch = [tr.ToolCall(call_id=f"c{i}", name="read", arguments=ARGS) for i in range(10)]
    adapter = TypeAdapter(_Args)

    async def floor() -> str:
        return await read(**adapter.validate_python(tr.snapshot_json(ARGS)))

    # A figure of calls that fail would measure the error path: check each kind once.
    results = [await registry.execute(raw), await registry.execute(typed),
               *(await registry.run(batch)).results]
    if any(result.is_error for result in results) or len(results) != 12:
        raise SystemExit(f"the workload's calls failed: {results!r}")
    if await floor() != ARGS["path"]:
        raise SystemExit("the floor did not return the path")

    for _ in range(WARM_UP):
        await registry.execute(raw)
        await registry.execute(typed)
        await registry.run(batch)
        await floor()

    # Each loop awaits the call itself, as a caller would: no wrapper frame is counted.
    for _ in range(iterations.get("raw", 0)):
        await registry.execute(raw)
    for _ in range(iterations.get("typed", 0)):
        await registry.execute(typed)
    for _ in range(iterations.get("run", 0)):
        await registry.run(batch)
    for _ in range(iterations.get("floor", 0)):
        await floor()


def main(argv: list[str]) -> int:
    pairs = dict(zip(argv[::2], argv[1::2], strict=False))
    if (not argv or len(argv) % 2 or len(pairs) != len(argv) // 2
            or any(kind not in KINDS or not n.isdigit() for kind, n in pairs.items())):
        print(f"usage: ir_workload.py KIND N [KIND N ...], KIND one of {', '.join(KINDS)}",
              file=sys.stderr)
        return 2
    print(f"toolrail {tr.__file__}", flush=True)
    asyncio.run(_workload({kind: int(n) for kind, n in pairs.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
