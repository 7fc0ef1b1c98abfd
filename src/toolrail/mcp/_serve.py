"""Serving ``server()`` on the two standard transports: stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Hashable, Iterator
from types import FrameType, TracebackType
from typing import IO, Any, cast

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError

from .. import ToolRegistry
from ._limits import refusal_body
from ._server import server

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "serve_http", "serve_stdio"]

logger = logging.getLogger("toolrail.mcp")

DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
"""The SDK's own limit on one streamable-HTTP request body, and ``serve_http``'s default."""

_SHUTTING_DOWN = "the MCP server is shutting down"


async def serve_stdio(
    registry: ToolRegistry, *, scope: Hashable | None = None, name: str = "toolrail"
) -> None:
    """Serve the tools ``scope`` sees over stdio until the client closes the connection.

    Standard output carries the protocol; anything else a tool prints to it goes to
    standard error instead (the SDK diverts it), and a tool reading standard input reads
    nothing. A line that is not JSON is answered with a JSON-RPC ``-32700`` parse error,
    one that is JSON but no JSON-RPC message with ``-32600`` (invalid request); either is
    logged as a warning on ``toolrail.mcp`` (standard error), and serving goes on.

    On SIGINT or SIGTERM (in the main thread) it stops reading, fires the signal of every
    call in progress (``"the MCP server is shutting down"``: they end ``ABORTED`` and their
    answers are sent), waits for them, and returns, as when the client closes the input.
    """
    app = server(registry, scope=scope, name=name)
    served: Any = app  # server()'s own class, with cancel_calls
    with _wire_of_stdin() as wire:
        lines = _Lines(wire)

        def stop() -> None:
            served.cancel_calls(_SHUTTING_DOWN)
            lines.end()

        with _stopping_on_signals(stop):
            stdin = cast(Any, lines)  # stdio_server iterates it for its lines
            async with stdio_server(stdin=stdin) as (read_stream, write_stream):
                answering = _AnsweringMalformed(read_stream, write_stream)
                await app.run(answering, write_stream, app.create_initialization_options())


async def serve_http(
    registry: ToolRegistry,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    scope: Hashable | None = None,
    name: str = "toolrail",
    path: str = "/mcp",
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    stateless: bool = False,
) -> None:
    """Serve the tools ``scope`` sees over streamable HTTP at ``http://host:port/path``.

    ``stateless``: every request stands alone (the SDK's ``stateless_http``), so replicas
    behind a load balancer need no session affinity; a server request to the client (an
    approval asked of it) has no session to go to, and is unavailable.

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
        streamable_http_path=path, host=host, max_request_body_size=max_request_bytes,
        stateless_http=stateless,
    )
    config = uvicorn.Config(
        _NamingTheLimit(asgi, max_request_bytes),
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
    )
    await _uvicorn(config, app).serve()


# ---- HTTP ----------------------------------------------------------------------------------


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
            with _signals_to(self.handle_exit):
                yield

    return Stopping(config, app)


# ---- stdio ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _signals_to(handler: Callable[[int, FrameType | None], Any]) -> Iterator[None]:
    """SIGINT and SIGTERM call ``handler`` meanwhile (in the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handled = [signal.SIGINT, signal.SIGTERM]
    original = {sig: signal.signal(sig, handler) for sig in handled}
    try:
        yield
    finally:
        for sig, previous in original.items():
            signal.signal(sig, previous)


@contextlib.contextmanager
def _stopping_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    loop = asyncio.get_running_loop()

    def handle(sig: int, frame: FrameType | None) -> None:
        # A signal handler runs between two bytecodes: leave the work to the loop.
        loop.call_soon_threadsafe(stop)

    with _signals_to(handle):
        yield


@contextlib.contextmanager
def _wire_of_stdin() -> Iterator[IO[bytes]]:
    """The protocol's input, with fd 0 itself reading the null device meanwhile (as the
    SDK does when it reads stdin itself), so a tool or a child reading stdin gets EOF."""
    try:
        if sys.stdin is None or sys.stdin.fileno() != 0:
            raise OSError("stdin is not fd 0")
        wire = os.dup(0)  # not inherited by children
    except (OSError, ValueError, AttributeError):
        yield sys.stdin.buffer
        return
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        # Never closed: the reading thread may still block on it after serving ends.
        yield os.fdopen(wire, "rb", closefd=False)
    finally:
        os.dup2(wire, 0)


class _Lines:
    """The lines of the protocol's input, for ``stdio_server``, read by a daemon thread.

    The SDK reads stdin in a worker thread that a cancellation must wait for, and that
    ``asyncio.run`` joins at exit: a signal could not end serving while a read blocks.
    ``end()`` makes the iteration end at once; the thread is left blocked, and dies with
    the process. Blank lines are skipped.
    """

    def __init__(self, source: IO[bytes]) -> None:
        self._source = source
        self._loop = asyncio.get_running_loop()
        self._read: collections.deque[bytes] = collections.deque()
        self._wanted = threading.Semaphore(0)
        self._thread: threading.Thread | None = None
        self._reading = False
        self._ended = False
        self._waiter: asyncio.Future[None] | None = None

    def end(self) -> None:
        self._ended = True
        self._wake()

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        while True:
            while not self._read:
                if self._ended:
                    raise StopAsyncIteration
                if not self._reading:
                    self._reading = True
                    self._ask()
                self._waiter = self._loop.create_future()
                await self._waiter
            if self._ended:
                raise StopAsyncIteration
            line = self._read.popleft()
            if not line:
                self._ended = True
                raise StopAsyncIteration
            if line.strip():
                return line.decode("utf-8", "replace")

    def _ask(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="toolrail MCP stdin", daemon=True
            )
            self._thread.start()
        self._wanted.release()

    def _run(self) -> None:  # in the thread
        while True:
            self._wanted.acquire()
            try:
                line = self._source.readline()
            except (OSError, ValueError):
                line = b""  # as the end of input
            try:
                self._loop.call_soon_threadsafe(self._arrived, line)
            except RuntimeError:  # the loop is closed
                return
            if not line:
                return

    def _arrived(self, line: bytes) -> None:
        self._reading = False
        self._read.append(line)
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class _AnsweringMalformed:
    """``stdio_server``'s read stream, less the lines that are no JSON-RPC message: the
    SDK passes those on as exceptions and its dispatcher drops them (a debug log); here
    each gets a JSON-RPC error with ``"id": null`` and a warning."""

    def __init__(self, inner: Any, write_stream: Any) -> None:
        self._inner = inner
        self._write = write_stream
        self.last_context = None  # the sender's context, as the SDK's stream has it

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            self.last_context = getattr(self._inner, "last_context", None)
            if not isinstance(item, Exception):
                return item
            await self._answer(item)

    async def _answer(self, exc: Exception) -> None:
        errors = exc.errors() if isinstance(exc, ValidationError) else []
        if errors and errors[0]["type"] == "json_invalid":
            code, message = PARSE_ERROR, "Parse error: the line is not JSON"
        else:
            code, message = INVALID_REQUEST, "Invalid request: the JSON is not a JSON-RPC message"
        excerpt = repr(errors[0]["input"])[:80] if errors else repr(exc)[:80]
        logger.warning("MCP over stdio: %s (answered %d): %s", message, code, excerpt)
        reply = JSONRPCError(
            jsonrpc="2.0", id=_request_id(errors), error=ErrorData(code=code, message=message)
        )
        with contextlib.suppress(Exception):  # the output closed: nothing to answer on
            await self._write.send(SessionMessage(reply))

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _AnsweringMalformed:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _AnsweringMalformed:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _request_id(errors: list[Any]) -> str | int | None:
    """The id of a JSON object that is no JSON-RPC message, when it has a usable one."""
    for error in errors:
        given = error.get("input")
        if isinstance(given, dict):
            value = given.get("id")
            if isinstance(value, str | int) and not isinstance(value, bool):
                return value
            return None
    return None
