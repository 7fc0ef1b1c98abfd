"""The MCP SDK's high-level server, called in process: ``MCPServer.call_tool``.

``call_tool`` is what the server's ``tools/call`` handler awaits once a request is
decoded: argument validation, the body, conversion to a ``CallToolResult``; no transport
or session is involved. A sync tool runs in ``anyio.to_thread``. A server answers each
request on its own, so the step is ``asyncio.gather`` over ``call_tool``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sized
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.mcpserver import MCPServer

from . import Harness, _work

CALL = "MCPServer.call_tool(name, arguments)"
STEP = "asyncio.gather of MCPServer.call_tool (no step executor)"
REGISTER = "MCPServer.add_tool + list_tools()"


@asynccontextmanager
async def harness() -> AsyncIterator[Harness]:
    server = MCPServer("bench")
    for fn in (_work.read, _work.read_sync, _work.wait):
        server.add_tool(fn)
    arguments = [{"index": i} for i in range(_work.STEP_SIZE)]

    async def step() -> list[Any]:
        return await asyncio.gather(*(server.call_tool("wait", a) for a in arguments))

    yield Harness(
        lambda: server.call_tool("read", _work.ARGS),
        lambda: server.call_tool("read_sync", _work.ARGS),
        step,
    )


async def register(functions: list[Callable[..., Any]]) -> tuple[object, Sized]:
    server = MCPServer("bench")
    for fn in functions:
        server.add_tool(fn)
    listed = await server.list_tools()
    return server, listed
