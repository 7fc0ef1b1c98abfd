"""The MCP SDK's high-level server, called in process: ``MCPServer.call_tool``.

``call_tool`` is what the server's ``tools/call`` handler awaits once a request is
decoded: argument validation, the body, conversion to a ``CallToolResult``; no transport
or session is involved. A sync tool runs in ``anyio.to_thread``. A server answers each
request on its own, so the step is ``asyncio.gather`` over ``call_tool``.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from ._mcp_servers import harness_for, register_for

CALL = "MCPServer.call_tool(name, arguments)"
STEP = "asyncio.gather of MCPServer.call_tool (no step executor)"
REGISTER = "MCPServer.add_tool + list_tools()"


def _server() -> MCPServer:
    return MCPServer("bench")


harness = harness_for(_server, lambda server, fn: server.add_tool(fn))
register = register_for(_server, lambda server, fn: server.add_tool(fn))
