"""A toolrail registry served over MCP for the tests, in a process of its own.

    python server.py stdio [--pid-tool]          # serve_stdio
    python server.py http PORT [--pid-tool]      # serve_http on 127.0.0.1:PORT

``--pid-tool`` adds a tool named ``pid_<process id>``, so a client that reconnects to a
new process sees its listing change.

Besides ordinary tools it has tools that let a test look inside the server without
sleeping: ``wait_started`` returns once ``slow`` is running, ``outcomes`` once some
call ended ``ABORTED`` (every result's ``name:code`` as the observer saw it), ``grow``
registers a tool (a registry change), and ``die`` kills the process mid-call. ``text``
returns a text of any size (a tool without an output schema), ``lone_surrogate`` a
text no UTF-8 encoder takes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from typing_extensions import TypedDict

import toolrail as tr
import toolrail.mcp


class Stats(TypedDict):
    count: int
    total: float


def build(pid_tool: bool = False) -> tr.ToolRegistry:
    registry = tr.ToolRegistry()
    if pid_tool:
        registry.register(
            tr.Tool(
                name=f"pid_{os.getpid()}",
                description="Names this process.",
                parameters={"type": "object"},
                execute=lambda a, c: str(os.getpid()),
            )
        )
    slow_started = asyncio.Event()
    aborted = asyncio.Event()
    seen: list[str] = []

    def record(execution: tr.Execution, result: tr.ToolResult) -> None:
        code = result.error.code if result.error is not None else "OK"
        seen.append(f"{execution.name}:{code}")
        if code == "ABORTED":
            aborted.set()

    registry.on_result(record)

    @registry.tool(concurrency_safe=True, annotations={"readOnlyHint": True})
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @registry.tool
    def stats(values: list[float]) -> Stats:
        """Count and sum numbers."""
        return {"count": len(values), "total": sum(values)}

    @registry.tool
    def fail(reason: str) -> str:
        """Always fails."""
        raise tr.ToolError(reason, code="NOPE")

    @registry.tool
    async def slow() -> str:
        """Run until cancelled."""
        slow_started.set()
        await asyncio.Event().wait()
        return "never"

    @registry.tool
    async def wait_started() -> str:
        """Return once `slow` runs."""
        await asyncio.wait_for(slow_started.wait(), 10)
        return "started"

    @registry.tool
    async def outcomes() -> list[str]:
        """Every result so far as name:code, once some call was aborted."""
        await asyncio.wait_for(aborted.wait(), 10)
        return seen

    @registry.tool
    async def grow(name: str) -> str:
        """Register a tool named `name`."""
        registry.register(
            tr.Tool(
                name=name,
                description="Added at run time.",
                parameters={"type": "object"},
                execute=lambda a, c: name,
            )
        )
        return name

    registry.register(
        tr.Tool(
            name="text",
            description="A text of `size` characters.",
            parameters={
                "type": "object",
                "properties": {"size": {"type": "integer", "minimum": 0}},
                "required": ["size"],
            },
            execute=lambda arguments, context: "x" * int(arguments["size"]),  # type: ignore[index,call-overload]
        )
    )

    @registry.tool
    def lone_surrogate() -> str:
        """A file name as os.listdir gives one that is not UTF-8."""
        return os.fsdecode(b"caf\xe9.txt")

    @registry.tool
    def die() -> str:
        """Kill this server mid-call."""
        os.kill(os.getpid(), signal.SIGKILL)
        return "unreachable"

    return registry


def main(argv: list[str]) -> None:
    registry = build(pid_tool="--pid-tool" in argv)
    if argv[:1] == ["http"]:
        asyncio.run(toolrail.mcp.serve_http(registry, port=int(argv[1])))
    else:
        asyncio.run(toolrail.mcp.serve_stdio(registry))


if __name__ == "__main__":
    main(sys.argv[1:])
