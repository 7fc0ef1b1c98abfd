"""Serving ``server()`` on the two standard transports: stdio and streamable HTTP."""

from __future__ import annotations

from collections.abc import Hashable

from mcp.server.stdio import stdio_server

from .. import ToolRegistry
from ._server import server

__all__ = ["serve_http", "serve_stdio"]


async def serve_stdio(
    registry: ToolRegistry, *, scope: Hashable | None = None, name: str = "toolrail"
) -> None:
    """Serve the tools ``scope`` sees over stdio until the client closes the connection.

    Standard output carries the protocol; anything else a tool prints to it goes to
    standard error instead (the SDK diverts it).
    """
    app = server(registry, scope=scope, name=name)
    async with stdio_server() as (read_stream, write_stream):
        await app.run(read_stream, write_stream, app.create_initialization_options())


async def serve_http(
    registry: ToolRegistry,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    scope: Hashable | None = None,
    name: str = "toolrail",
    path: str = "/mcp",
) -> None:
    """Serve the tools ``scope`` sees over streamable HTTP at ``http://host:port/path``.

    Runs uvicorn until it is stopped (SIGINT/SIGTERM, or cancelling this coroutine).
    Bound to a loopback host, the SDK's DNS-rebinding protection is on.
    """
    import uvicorn

    app = server(registry, scope=scope, name=name)
    asgi = app.streamable_http_app(streamable_http_path=path, host=host)
    config = uvicorn.Config(asgi, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
