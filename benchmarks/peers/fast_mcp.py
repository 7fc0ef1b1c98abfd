"""FastMCP, called in process: ``FastMCP.call_tool``, its public API for running a tool.

``call_tool`` opens a request ``Context``, runs the server's middleware chain (empty
here) and the tool: argument validation, the body, conversion to a ``ToolResult``; no
client or transport is involved. A sync tool runs in a thread pool. A server answers
each request on its own, so the step is ``asyncio.gather`` over ``call_tool``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sized
from contextlib import asynccontextmanager
from typing import Any

from fastmcp import FastMCP

from . import Harness, _work

CALL = "FastMCP.call_tool(name, arguments)"
STEP = "asyncio.gather of FastMCP.call_tool (no step executor)"
REGISTER = "FastMCP.tool + list_tools()"


@asynccontextmanager
async def harness() -> AsyncIterator[Harness]:
    server = FastMCP("bench")
    for fn in (_work.read, _work.read_sync, _work.wait):
        server.tool(fn)
    arguments = [{"index": i} for i in range(_work.STEP_SIZE)]

    async def step() -> list[Any]:
        return await asyncio.gather(*(server.call_tool("wait", a) for a in arguments))

    yield Harness(
        lambda: server.call_tool("read", _work.ARGS),
        lambda: server.call_tool("read_sync", _work.ARGS),
        step,
    )


async def register(functions: list[Callable[..., Any]]) -> tuple[object, Sized]:
    server = FastMCP("bench")
    for fn in functions:
        server.tool(fn)
    listed = await server.list_tools()
    return server, listed
