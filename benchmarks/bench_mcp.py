"""MCP: one ``tools/call`` round trip through ``toolrail.mcp.server`` and the SDK's server.

The same tool (``add(a: int, b: int) -> int``, async, an integer output schema the
client validates) served two ways, each called by the SDK's own ``ClientSession``:

* over the SDK's in-memory transport (JSON-RPC over memory streams, the handshake
  era: what a stdio or HTTP session does, less the bytes on a wire);
* over the 2026-07-28 in-process path (the SDK's direct dispatcher, no framing), which
  leaves mostly the servers' own work.

toolrail's side runs the full pipeline (snapshot, pre/guards/around/post chains, output
check, frozen result, observers); the SDK's ``MCPServer`` runs its own validation and
result conversion. The SDK's client, session and transport are most of each round trip,
so the two differ by a few percent: cases are interleaved round by round, and the bar
compares each side's fastest round, the figure least disturbed by other load.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import mcp
from mcp.server import MCPServer

import toolrail as tr
import toolrail.mcp

from ._timing import Figure, ainterleave

ARGUMENTS = {"a": 20, "b": 22}
TOOLRAIL_MEMORY = "tools/call over the in-memory transport: toolrail.mcp.server"
SDK_MEMORY = "tools/call over the in-memory transport: SDK MCPServer"
TOOLRAIL_DIRECT = "tools/call in process (2026 direct dispatch): toolrail.mcp.server"
SDK_DIRECT = "tools/call in process (2026 direct dispatch): SDK MCPServer"


def _toolrail_server() -> Any:
    registry = tr.ToolRegistry()

    @registry.tool
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    return toolrail.mcp.server(registry)


def _sdk_server() -> MCPServer:
    server = MCPServer("bench")

    @server.tool()
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    return server


async def _caller(stack: AsyncExitStack, server: Any, mode: str) -> Callable[[], Awaitable[Any]]:
    client = await stack.enter_async_context(mcp.Client(server, mode=mode, cache=None))
    session = client.session
    check = await session.call_tool("add", ARGUMENTS)
    if check.structured_content != {"result": 42}:
        raise RuntimeError(f"unexpected result {check!r}")
    return lambda: session.call_tool("add", ARGUMENTS)


async def main(quick: bool) -> list[Figure]:
    repeat, target = (3, 0.01) if quick else (15, 0.1)
    async with AsyncExitStack() as stack:
        cases = [
            (TOOLRAIL_MEMORY, await _caller(stack, _toolrail_server(), "legacy")),
            (SDK_MEMORY, await _caller(stack, _sdk_server(), "legacy")),
            (TOOLRAIL_DIRECT, await _caller(stack, _toolrail_server(), "auto")),
            (SDK_DIRECT, await _caller(stack, _sdk_server(), "auto")),
        ]
        return await ainterleave(cases, repeat=repeat, target=target)


def bars(figures: list[Figure]) -> list[str]:
    """The issue's bar, as a ratio measured in this run."""
    by = {figure.label: figure.min_us for figure in figures}
    ratio = by[TOOLRAIL_MEMORY] / by[SDK_MEMORY]
    direct = by[TOOLRAIL_DIRECT] / by[SDK_DIRECT]
    return [
        f"toolrail server / SDK server = {ratio:.2f}x (bar: at most 1x; fastest rounds); "
        f"in process, without JSON-RPC framing: {direct:.2f}x"
    ]


if __name__ == "__main__":
    result = asyncio.run(main(quick=False))
    for figure in result:
        print(figure.row())
    for line in bars(result):
        print(line)
