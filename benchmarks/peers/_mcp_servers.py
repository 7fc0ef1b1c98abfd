"""What the two in-process MCP servers (the SDK's ``MCPServer``, FastMCP) share.

Both are timed through their own ``call_tool(name, arguments)``; a server answers each
request on its own, so the step is ``asyncio.gather`` over ``call_tool``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sized
from contextlib import asynccontextmanager
from typing import Any

from . import Harness, _work


def harness_for(make: Callable[[], Any], add: Callable[[Any, Callable[..., Any]], object]) -> Any:
    """A ``harness()`` for a server ``make()`` builds and ``add(server, fn)`` fills."""

    @asynccontextmanager
    async def harness() -> AsyncIterator[Harness]:
        server = make()
        for fn in (_work.read, _work.read_sync, _work.wait):
            add(server, fn)
        arguments = [{"index": i} for i in range(_work.STEP_SIZE)]

        async def step() -> list[Any]:
            return await asyncio.gather(*(server.call_tool("wait", a) for a in arguments))

        yield Harness(
            lambda: server.call_tool("read", _work.ARGS),
            lambda: server.call_tool("read_sync", _work.ARGS),
            step,
        )

    return harness


def register_for(make: Callable[[], Any], add: Callable[[Any, Callable[..., Any]], object]) -> Any:
    """A ``register(functions)`` for the same kind of server."""

    async def register(functions: list[Callable[..., Any]]) -> tuple[object, Sized]:
        server = make()
        for fn in functions:
            add(server, fn)
        listed = await server.list_tools()
        return server, listed

    return register
