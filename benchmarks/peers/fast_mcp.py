"""FastMCP, called in process: ``FastMCP.call_tool``, its public API for running a tool.

``call_tool`` opens a request ``Context``, runs the server's middleware chain (empty
here) and the tool: argument validation, the body, conversion to a ``ToolResult``; no
client or transport is involved. A sync tool runs in a thread pool. A server answers
each request on its own, so the step is ``asyncio.gather`` over ``call_tool``.
"""

from __future__ import annotations

from fastmcp import FastMCP

from ._mcp_servers import harness_for, register_for

CALL = "FastMCP.call_tool(name, arguments)"
STEP = "asyncio.gather of FastMCP.call_tool (no step executor)"
REGISTER = "FastMCP.tool + list_tools()"


def _server() -> FastMCP:
    return FastMCP("bench")


harness = harness_for(_server, lambda server, fn: server.tool(fn))
register = register_for(_server, lambda server, fn: server.tool(fn))
