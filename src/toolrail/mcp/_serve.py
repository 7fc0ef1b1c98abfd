"""Serving ``server()`` on the two standard transports: stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Hashable, Iterator
from types import FrameType
from typing import Any

from mcp.server.stdio import stdio_server

from .. import ToolRegistry
from ._limits import refusal_body
from ._server import server

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "serve_http", "serve_stdio"]

DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
"""The SDK's own limit on one streamable-HTTP request body, and ``serve_http``'s default."""


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
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> None:
    """Serve the tools ``scope`` sees over streamable HTTP at ``http://host:port/path``.

    Runs uvicorn until it is stopped (SIGINT/SIGTERM, or cancelling this coroutine).
    Bound to a loopback host, the SDK's DNS-rebinding protection is on.

    ``max_request_bytes`` is the largest request body accepted (the SDK's limit, 4 MiB by
    default): a larger one is answered HTTP 413 with a JSON-RPC error ``-32600`` whose
    message names the limit (``data`` ``{"maxRequestBytes": limit}``), and is not read on.

    On SIGINT or SIGTERM it stops accepting connections, fires the signal of every call
    in progress (``"the MCP server is shutting down"``: they end ``ABORTED``, and their
    clients get that result), waits for them, and returns. A second SIGINT exits at once.
    """
    import uvicorn

    if (
        isinstance(max_request_bytes, bool)
        or not isinstance(max_request_bytes, int)
        or max_request_bytes <= 0
    ):
        raise ValueError(f"max_request_bytes must be a positive int, got {max_request_bytes!r}")
    app = server(registry, scope=scope, name=name)
    asgi = app.streamable_http_app(
        streamable_http_path=path, host=host, max_request_body_size=max_request_bytes
    )
    config = uvicorn.Config(
        _NamingTheLimit(asgi, max_request_bytes),
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
    )
    await _uvicorn(config, app).serve()


_SHUTTING_DOWN = "the MCP server is shutting down"


class _NamingTheLimit:
    """The SDK refuses an over-limit body with a bare 413 ``Request body too large``;
    this says it as a JSON-RPC error naming the limit, which the SDK's client surfaces."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.body = refusal_body(limit)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = False

        async def sending(message: Any) -> None:
            nonlocal refused
            if message["type"] == "http.response.start" and message["status"] == 413:
                refused = True
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(self.body)).encode()),
                ]
                await send({"type": "http.response.start", "status": 413, "headers": headers})
                await send({"type": "http.response.body", "body": self.body})
            elif not refused:  # the SDK's own text body is dropped
                await send(message)

        await self.app(scope, receive, sending)


def _uvicorn(config: Any, app: Any) -> Any:
    """uvicorn's server, stopping on a signal as described in ``serve_http``.

    uvicorn alone waits for every open response before it stops (a call that never ends
    keeps it up), then raises the signal again (a ``KeyboardInterrupt`` traceback).
    """
    import uvicorn

    class Stopping(uvicorn.Server):
        def __init__(self, config: Any, app: Any) -> None:
            super().__init__(config)
            self._app = app
            self._loop = asyncio.get_running_loop()

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            super().handle_exit(sig, frame)
            # A signal handler runs between two bytecodes: leave the signals to the loop.
            self._loop.call_soon_threadsafe(self._app.cancel_calls, _SHUTTING_DOWN)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            handled = [signal.SIGINT, signal.SIGTERM]
            original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)

    return Stopping(config, app)
