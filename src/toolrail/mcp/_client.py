"""Using an MCP server's tools: ``attach`` registers them, ``connect`` opens the session too.

Every remote tool becomes a raw ``tr.Tool`` whose body calls ``session.call_tool``:

* ``parameters`` is the remote ``inputSchema`` (a missing ``"type"`` reads as
  ``"object"``), ``output_schema`` the remote ``outputSchema`` (unwrapped, see
  ``_wire``), ``annotations`` the remote annotations in their wire spelling
  (``readOnlyHint``, ...), and ``concurrency_safe`` is ``readOnlyHint``.
* A result's content maps block by block (``_wire.local_blocks``); its
  ``structuredContent`` is the value (``{"result": x}`` unwrapped for a wrapped schema).
* The arguments are checked against ``inputSchema`` first (``_args``): what it
  rejects is ``INVALID_ARGS`` without a round trip.
* ``isError`` raises ``tr.ToolError`` with the remote message (from toolrail's error
  ``_meta`` when the server is toolrail, else the text less one leading ``Error: ``)
  and code; a closed connection is ``MCP_DISCONNECTED``, and so is every later call of
  the attachment, at once, until ``connect(reconnect=True)`` has a new session; any
  other protocol failure (``MCPError``) fails the call with that exception.
* The body is interruptible: when its signal fires, the awaiting ``call_tool`` is
  cancelled and the SDK sends ``notifications/cancelled`` for the request.

``connect`` runs its sessions in a task of its own (``_Link``), so nothing a transport
does can cancel the caller: a session that fails only makes the attachment
disconnected, and with ``reconnect=True`` the task opens a new one, with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
from mcp import Client, ClientSession, types
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.server import MCPServer, Server
from mcp.shared.exceptions import MCPError

from .. import (
    Content,
    Disposer,
    JsonValue,
    RunContext,
    Scope,
    TextContent,
    Tool,
    ToolError,
    ToolOutput,
    ToolRegistry,
    thaw,
)
from .._model.errors import MCP_DISCONNECTED, MCP_MESSAGE_TOO_LARGE
from ._args import ArgumentCheck
from ._limits import SizeRefusals, refused_for_size
from ._names import PREFIX, assign_names
from ._stdio import StdioProcess
from ._wire import ERROR_META, local_blocks, unwrap_output_schema

__all__ = [
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DISCONNECTED",
    "TOO_LARGE",
    "Attachment",
    "Changes",
    "ConnectionFailed",
    "attach",
    "connect",
]

logger = logging.getLogger("toolrail.mcp")

_MAX_PAGES = 1000
_CONNECTION_CLOSED = types.CONNECTION_CLOSED
_CLOSED = "Connection closed"  # the SDK's message for it

DISCONNECTED = MCP_DISCONNECTED
"""The code of a call that found its MCP server's connection closed (or lost before)."""

TOO_LARGE = MCP_MESSAGE_TOO_LARGE
"""The code of a call whose answer exceeded ``connect``'s ``max_message_bytes``, or whose
request a streamable-HTTP server refused as larger than its limit (HTTP 413)."""

DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024
"""The SDK's own cap on one message from a streamable-HTTP server (one SSE event)."""

DEFAULT_HANDSHAKE_TIMEOUT = 10.0
"""Seconds ``connect`` gives a server from its start to its answer to ``initialize``."""

_FIRST_DELAY = 0.1  # seconds before the first reconnection attempt; doubles up to _MAX_DELAY
_MAX_DELAY = 5.0


@dataclass(frozen=True, slots=True)
class Changes:
    """What one ``refresh()`` did, by local name, each sorted."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()


class ConnectionFailed(ConnectionError):
    """``connect()`` could not open a session: the server did not start, cannot be reached,
    or did not answer ``initialize`` within the handshake timeout.

    ``returncode`` is set for a stdio server that exited, ``stderr`` (its last lines) for
    one that exited or did not answer in time.
    """

    def __init__(
        self, message: str, *, returncode: int | None = None, stderr: Sequence[str] = ()
    ) -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stderr = tuple(stderr)


@dataclass(frozen=True, slots=True)
class _Remote:
    local: str
    fingerprint: str
    dispose: Disposer


class Attachment:
    """The tools of one MCP session, registered in one registry or scope.

    ``refresh()`` re-syncs them with the server; ``close()`` (or calling the handle, or
    leaving its ``with`` block) removes them all. Closing is final: a later
    ``refresh()`` does nothing. ``connected`` is ``False`` once a call found the
    connection closed: every call of its tools is then ``MCP_DISCONNECTED`` at once,
    until ``connect(reconnect=True)`` has opened a new session.
    """

    def __init__(
        self,
        target: ToolRegistry | Scope,
        session: ClientSession,
        *,
        prefix: str = "",
        tool_timeout: float | None = None,
    ) -> None:
        _check(target, prefix)
        self.target = target
        self.session = session
        self.prefix = prefix
        self.tool_timeout = tool_timeout
        self.closed = False
        self._remotes: dict[str, _Remote] = {}
        self._lock = anyio.Lock()
        self._generation = 0  # one per session
        self._lost: str | None = None
        self._on_lost: Callable[[], None] | None = None

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._remotes)} tools"
        if not self.closed and self._lost is not None:
            state += ", disconnected"
        return f"<toolrail.mcp.Attachment {state}>"

    @property
    def names(self) -> dict[str, str]:
        """A fresh ``{local name: remote name}`` of the tools registered now."""
        return {remote.local: name for name, remote in sorted(self._remotes.items())}

    @property
    def connected(self) -> bool:
        """Whether calls go to the server (``False`` once the connection was found lost)."""
        return self._lost is None

    async def refresh(self) -> Changes:
        """List the server's tools and register, replace or remove local ones to match.

        A tool is replaced when its description, schemas or annotations changed. If a
        registration fails (say, a name already taken in the registry), the others are
        still applied and the first error is raised afterwards; that tool is tried again
        on the next refresh.
        """
        async with self._lock:
            if self.closed:
                return Changes()
            listing = await self._list()
            if self.closed:
                return Changes()
            return self._apply(listing)

    def close(self) -> None:
        """Remove every tool this handle registered (newest first); idempotent."""
        self.closed = True
        remotes, self._remotes = self._remotes, {}
        first: Exception | None = None
        for remote in reversed(list(remotes.values())):
            try:
                remote.dispose()
            except Exception as exc:  # every tool is removed; the first failure surfaces
                first = first or exc
        if first is not None:
            raise first

    __call__ = close

    def __enter__(self) -> Attachment:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _use(self, session: ClientSession) -> int:
        """Send calls to a new session from now on; its generation."""
        self.session = session
        self._generation += 1
        self._lost = None
        return self._generation

    def _lose(self, reason: str, generation: int) -> str:
        """The session of ``generation`` is gone; the reason calls now give."""
        if generation == self._generation:
            if self._lost is None or self._lost == _CLOSED:  # a more telling reason wins
                self._lost = reason
                if self._on_lost is not None:
                    self._on_lost()
            return self._lost
        return reason

    def _disconnected(self) -> ToolError:
        return ToolError(f"MCP server disconnected: {self._lost}", code=DISCONNECTED)

    async def _list(self) -> dict[str, types.Tool]:
        tools: dict[str, types.Tool] = {}
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
            page = await self.session.list_tools(params=params)
            tools.update((tool.name, tool) for tool in page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools
        raise RuntimeError(f"the MCP server's tools/list did not end after {_MAX_PAGES} pages")

    def _apply(self, listing: dict[str, types.Tool]) -> Changes:
        fingerprints = {name: _fingerprint(tool) for name, tool in listing.items()}
        first: Exception | None = None
        removed: list[str] = []
        kept_names: dict[str, str] = {}  # replaced tools keep their local name
        for name in list(self._remotes):
            if name in listing and self._remotes[name].fingerprint == fingerprints[name]:
                continue
            remote = self._remotes.pop(name)
            try:
                remote.dispose()
            except Exception as exc:  # a raising change listener: the removal stays
                first = first or exc
            if name in listing:
                kept_names[name] = remote.local
            else:
                removed.append(remote.local)
        taken = {remote.local for remote in self._remotes.values()} | set(kept_names.values())
        fresh = [name for name in listing if name not in self._remotes and name not in kept_names]
        names = assign_names(fresh, self.prefix, taken) | kept_names
        added: list[str] = []
        replaced: list[str] = []
        for name, local in sorted(names.items(), key=lambda item: item[1]):
            try:
                dispose = self.target.register(self._tool(local, listing[name]))
            except Exception as exc:
                first = first or exc
                continue
            self._remotes[name] = _Remote(local, fingerprints[name], dispose)
            (replaced if name in kept_names else added).append(local)
        if first is not None:
            raise first
        return Changes(tuple(added), tuple(sorted(removed)), tuple(replaced))

    def _tool(self, local: str, remote: types.Tool) -> Tool:
        parameters = dict(remote.input_schema)
        parameters.setdefault("type", "object")
        output_schema, wrapped = unwrap_output_schema(remote.output_schema)
        annotations = (
            None
            if remote.annotations is None
            else remote.annotations.model_dump(by_alias=True, exclude_none=True)
        )
        return Tool(
            name=local,
            description=remote.description or "",
            parameters=parameters,
            execute=_RemoteCall(self, remote.name, wrapped, ArgumentCheck(remote.name, parameters)),
            output_schema=output_schema,
            annotations=annotations,
            concurrency_safe=bool(annotations and annotations.get("readOnlyHint") is True),
            timeout=self.tool_timeout,
        )


class _RemoteCall:
    """The body of a remote tool: one ``tools/call`` on the attachment's session."""

    __slots__ = ("arguments", "attachment", "remote", "wrapped")

    def __init__(
        self, attachment: Attachment, remote: str, wrapped: bool, arguments: ArgumentCheck
    ) -> None:
        self.attachment = attachment
        self.remote = remote
        self.wrapped = wrapped
        self.arguments = arguments

    def __repr__(self) -> str:
        return f"<MCP tool {self.remote!r}>"

    async def __call__(self, arguments: JsonValue, context: RunContext) -> ToolOutput:
        plain: Any = thaw(arguments) if isinstance(arguments, Mapping) else arguments
        self.arguments.check(plain)
        link = self.attachment
        if link._lost is not None:
            raise link._disconnected()
        generation = link._generation
        try:
            result = await link.session.call_tool(self.remote, plain,
                                                  progress_callback=_forwarding(context))
        except MCPError as exc:
            message = exc.error.message
            refused = refused_for_size(exc)
            if refused is not None:  # over HTTP: see _limits
                raise ToolError(refused, code=TOO_LARGE) from exc
            if exc.code != _CONNECTION_CLOSED:
                raise
            if message.startswith("SSE stream failed"):  # one answer failed, not the connection
                if "byte limit" not in message:
                    raise
                raise ToolError(
                    f"the MCP server's answer is larger than max_message_bytes allows ({message})",
                    code=TOO_LARGE,
                ) from exc
            reason = link._lose(message, generation)
            raise ToolError(f"MCP server disconnected: {reason}", code=DISCONNECTED) from exc
        content = local_blocks(result.content)
        if result.is_error:
            raise _remote_error(result, content)
        value = result.structured_content
        if value is None:
            # Like a body returning a str: a result of text blocks alone has that text as value.
            texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
            if texts and len(texts) == len(result.content):
                return ToolOutput(value="\n".join(texts), content=content)
            return ToolOutput(content=content)
        if self.wrapped and isinstance(value, dict) and "result" in value:
            value = value["result"]
        # No blocks but a value: let the pipeline render the value as the model's text.
        return ToolOutput(value=value, content=content or None)


def _forwarding(context: RunContext) -> Any:
    """The ``progress_callback`` of one remote call: the server's progress notifications
    become the body's ``report_progress`` (values the body would refuse are dropped)."""

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        with contextlib.suppress(TypeError, ValueError):
            context.report_progress(progress, total, message)

    return forward


def _check(target: object, prefix: object) -> None:
    if not isinstance(target, ToolRegistry | Scope):
        raise TypeError(f"attach() takes a ToolRegistry or a Scope, got {type(target).__name__}")
    if not isinstance(prefix, str) or PREFIX.fullmatch(prefix) is None:
        raise ValueError(
            f"invalid prefix {prefix!r}: use up to 100 characters from "
            'A-Z, a-z, 0-9, "_", "-" and "."'
        )


def _remote_error(result: types.CallToolResult, content: tuple[Content, ...]) -> ToolError:
    info = (result.meta or {}).get(ERROR_META)
    if isinstance(info, Mapping) and isinstance(info.get("message"), str):
        code = info.get("code")
        return ToolError(info["message"], code=code if isinstance(code, str) else None)
    text = "\n".join(block.text for block in content if isinstance(block, TextContent))
    return ToolError(text.removeprefix("Error: ") or "the MCP tool reported an error")


async def attach(
    registry_or_scope: ToolRegistry | Scope,
    session: ClientSession,
    *,
    prefix: str = "",
    tool_timeout: float | None = None,
) -> Attachment:
    """Register every tool of a connected (initialized) MCP session; return the handle.

    Args:
        registry_or_scope: Where to register the tools: the global layer, or a scope.
        session: An initialized ``mcp.ClientSession`` (``mcp.Client(...).session`` too).
        prefix: Put in front of every local name (``"github."``, say).
        tool_timeout: Each tool's ``timeout``, in seconds; ``None`` for none.

    Raises:
        ValueError: A tool cannot be registered (its name is taken, its schema is not an
            object schema); nothing stays registered then.
    """
    handle = Attachment(registry_or_scope, session, prefix=prefix, tool_timeout=tool_timeout)
    try:
        await handle.refresh()
    except BaseException:
        handle.close()
        raise
    return handle


def connect(
    registry_or_scope: ToolRegistry | Scope,
    *,
    command: str | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    url: str | None = None,
    headers: Mapping[str, str] | None = None,
    server: Server[Any] | MCPServer | None = None,
    prefix: str = "",
    tool_timeout: float | None = None,
    max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
    reconnect: bool = False,
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
) -> AbstractAsyncContextManager[Attachment]:
    """Open an MCP session, attach its tools, and keep them in sync until the block ends.

    Exactly one of ``command`` (a stdio server: ``command`` + ``args``, ``env``, ``cwd``),
    ``url`` (streamable HTTP, with optional ``headers``) or ``server`` (an SDK server in
    this process, for tests and composition). The session speaks the handshake protocol
    era (``initialize``); each ``notifications/tools/list_changed`` triggers
    ``refresh()``. On exit the tools are removed, then the session and its transport
    (the subprocess, too) are closed.

    A connection lost later never raises into the block: the calls become
    ``MCP_DISCONNECTED`` results, and with ``reconnect=True`` a new session is opened
    (backoff from 0.1 s, doubling up to 5 s) and the tools re-synced.

    Args:
        max_message_bytes: The largest message a streamable-HTTP server may send in one
            event (the SDK's limit, 1 MiB by default); ``None`` for no limit.
        reconnect: Re-open a lost session, and keep trying.
        handshake_timeout: Seconds from opening the transport (starting the stdio
            server) to the server's answer to ``initialize``, for every session opened;
            a positive finite number. A stdio server that misses it is stopped (SIGTERM
            to its group at once, SIGKILL 2 s later) and reaped.

    Raises:
        ConnectionFailed: The first session could not be opened: a stdio server that
            exited (its command, exit code and last lines of stderr are in the message),
            a server that cannot be reached, or one that did not answer ``initialize``
            within ``handshake_timeout`` (``MCP server "<command>" did not answer
            initialize within 10 s``, with what it wrote that was not JSON-RPC and the
            last lines of its stderr).
    """
    _check(registry_or_scope, prefix)
    if sum(source is not None for source in (command, url, server)) != 1:
        raise ValueError("connect() takes exactly one of command=, url= and server=")
    if command is None and (args or env is not None or cwd is not None):
        raise ValueError("args=, env= and cwd= go with command=")
    if url is None and headers is not None:
        raise ValueError("headers= goes with url=")
    if max_message_bytes is not None and (
        isinstance(max_message_bytes, bool)
        or not isinstance(max_message_bytes, int)
        or max_message_bytes <= 0
    ):
        raise ValueError(
            f"max_message_bytes must be a positive int or None, got {max_message_bytes!r}"
        )
    if (
        isinstance(handshake_timeout, bool)
        or not isinstance(handshake_timeout, int | float)
        or not math.isfinite(handshake_timeout)
        or handshake_timeout <= 0
    ):
        raise ValueError(
            f"handshake_timeout must be a positive finite number of seconds, "
            f"got {handshake_timeout!r}"
        )
    source: _Source
    if command is not None:
        source = _StdioSource(
            StdioProcess(command, args, env, None if cwd is None else os.fspath(cwd))
        )
    elif url is not None:
        source = _HttpSource(url, headers, max_message_bytes)
    else:
        assert server is not None
        source = _Source(server)
    return _connected(
        registry_or_scope, source, prefix, tool_timeout, reconnect, float(handshake_timeout)
    )


class _Source:
    """Where ``connect`` opens its sessions: an SDK server in this process."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def transport(self, on_end: Callable[[str], None]) -> Any:
        return self.server

    def abandon(self) -> None:
        """The handshake timed out: its transport is about to be torn down."""

    def failed(self, exc: Exception) -> ConnectionFailed:
        if isinstance(_innermost(exc), _HandshakeTimeout):
            return ConnectionFailed(f"the MCP server {_reason(exc)}")
        return ConnectionFailed(f"cannot connect to the MCP server: {_reason(exc)}")


class _HttpSource(_Source):
    def __init__(self, url: str, headers: Mapping[str, str] | None, limit: int | None) -> None:
        super().__init__(url)
        self.headers = headers
        self.limit = limit

    def transport(self, on_end: Callable[[str], None]) -> Any:
        import httpx2

        http = httpx2.AsyncClient(
            headers=None if self.headers is None else dict(self.headers),
            timeout=httpx2.Timeout(30, read=300),  # the SDK's own defaults
            transport=SizeRefusals(httpx2.AsyncHTTPTransport()),
        )
        return _both(
            http,
            streamable_http_client(self.server, http_client=http, max_sse_event_size=self.limit),
        )

    def failed(self, exc: Exception) -> ConnectionFailed:
        if isinstance(_innermost(exc), _HandshakeTimeout):
            return ConnectionFailed(f"MCP server at {self.server} {_reason(exc)}")
        return ConnectionFailed(
            f"cannot connect to the MCP server at {self.server}: {_reason(exc)}"
        )


class _StdioSource(_Source):
    def __init__(self, process: StdioProcess) -> None:
        super().__init__(process)
        self.process = process

    def transport(self, on_end: Callable[[str], None]) -> Any:
        return self.process.open(on_end)

    def abandon(self) -> None:
        self.process.abandoned = True

    def failed(self, exc: Exception) -> ConnectionFailed:
        process = self.process
        command = process.describe()
        reason = _reason(exc)
        timed_out = isinstance(_innermost(exc), _HandshakeTimeout)
        if isinstance(_innermost(exc), OSError) and not timed_out:
            return ConnectionFailed(f'cannot start MCP server "{command}": {reason}')
        returncode = None if timed_out else process.returncode  # not its own exit: ours
        if timed_out:
            message = f'MCP server "{command}" {reason}'
            if process.garbage:
                count = process.garbage
                lines = "1 line that is" if count == 1 else f"{count} lines that are"
                message += (
                    f"; it wrote {lines} not JSON-RPC to stdout, "
                    f"the first: {process.first_garbage!r}"
                )
        elif process.returncode is None:
            message = f'MCP server "{command}" did not start a session: {reason}'
        else:
            message = (
                f'MCP server "{command}" exited with code {process.returncode} '
                "before the session started"
            )
        tail = list(process.stderr)
        message += (
            "; the last lines of its stderr:\n" + "\n".join(f"  {line}" for line in tail)
            if tail
            else "; it wrote nothing to stderr"
        )
        return ConnectionFailed(message, returncode=returncode, stderr=tail)


@asynccontextmanager
async def _both(http: Any, transport: Any) -> AsyncIterator[Any]:
    async with http, transport as streams:
        yield streams


class _HandshakeTimeout(TimeoutError):
    """A server did not answer ``initialize`` in time (the message: what it did not do)."""

    def __init__(self, timeout: float) -> None:
        super().__init__(f"did not answer initialize within {timeout:g} s")


class _Attempt:
    """One try at a session: its generation once open, and how its transport ended."""

    __slots__ = ("ended", "generation")

    def __init__(self) -> None:
        self.generation = -1
        self.ended: list[str] = []


class _Link:
    """The task that owns ``connect``'s sessions: open one, attach, wait until it is lost,
    and (with ``reconnect``) open the next, with backoff."""

    def __init__(
        self,
        target: ToolRegistry | Scope,
        source: _Source,
        prefix: str,
        tool_timeout: float | None,
        reconnect: bool,
        handshake_timeout: float,
    ) -> None:
        self.source = source
        self.reconnect = reconnect
        self.handshake_timeout = handshake_timeout
        self.handle: Attachment | None = None
        self.target, self.prefix, self.tool_timeout = target, prefix, tool_timeout
        self.ready = asyncio.Event()
        self.failure: BaseException | None = None
        self.lost = asyncio.Event()

    async def on_message(self, message: IncomingMessage) -> None:
        handle = self.handle
        if isinstance(message, types.ToolListChangedNotification) and handle is not None:
            try:
                await handle.refresh()
            except Exception:
                logger.warning("re-syncing the tools of an MCP server failed", exc_info=True)

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            self.ready.set()

    async def _run(self) -> None:
        delay = _FIRST_DELAY
        while True:
            attempt = _Attempt()
            try:
                await self._session(attempt)
            except Exception as exc:
                reason = _reason(exc)
                if not self.ready.is_set():
                    started = self.handle is not None and attempt.generation >= 0
                    self.failure = exc if started else self.source.failed(exc)
                    return
                if self.handle is not None:
                    self.handle._lose(reason, attempt.generation)
                logger.warning("the connection to an MCP server was lost: %s", reason)
            if not self.reconnect:
                return
            if attempt.generation >= 0:
                delay = _FIRST_DELAY  # it had connected: start the backoff afresh
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_DELAY)

    async def _session(self, attempt: _Attempt) -> None:
        """Open one session, attach or re-sync, and hold it until it is lost."""
        self.lost = asyncio.Event()

        def on_end(reason: str) -> None:
            attempt.ended.append(reason)
            if self.handle is not None and attempt.generation >= 0:
                self.handle._lose(reason, attempt.generation)
            self.lost.set()

        client = Client(
            self.source.transport(on_end),
            mode="legacy",
            message_handler=self.on_message,
            cache=None,
        )
        # The handshake (the transport opened, initialize answered) runs in a scope the
        # timer cancels; once it is done the timer is gone. Not a deadline on the scope:
        # the source must hear first, so a stdio server is stopped without a grace.
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            self.source.abandon()
            handshake.cancel()

        try:
            with anyio.CancelScope() as handshake:
                timer = asyncio.get_running_loop().call_later(self.handshake_timeout, expire)
                try:
                    async with client:
                        timer.cancel()
                        attempt.generation = self._use(client.session)
                        if attempt.ended:
                            raise ConnectionError(attempt.ended[0])
                        await self._refresh()
                        self.ready.set()
                        await self.lost.wait()
                finally:
                    timer.cancel()
        except Exception as exc:  # what tearing the transport down raised, say
            if expired:
                raise _HandshakeTimeout(self.handshake_timeout) from exc
            raise
        if expired:
            raise _HandshakeTimeout(self.handshake_timeout)

    def _use(self, session: ClientSession) -> int:
        if self.handle is None:
            self.handle = Attachment(
                self.target, session, prefix=self.prefix, tool_timeout=self.tool_timeout
            )
        self.handle._on_lost = self.lost.set
        return self.handle._use(session)

    async def _refresh(self) -> None:
        assert self.handle is not None
        if not self.ready.is_set():
            await self.handle.refresh()  # the first time, a failure is connect()'s
            return
        try:
            await self.handle.refresh()
        except Exception:
            logger.warning("re-syncing the tools of a reconnected MCP server failed", exc_info=True)


@asynccontextmanager
async def _connected(
    target: ToolRegistry | Scope,
    source: _Source,
    prefix: str,
    tool_timeout: float | None,
    reconnect: bool,
    handshake_timeout: float,
) -> AsyncIterator[Attachment]:
    link = _Link(target, source, prefix, tool_timeout, reconnect, handshake_timeout)
    # The sessions live in a task of their own, owned here and always awaited before
    # this returns; not a TaskGroup, which would wrap the block's own exceptions.
    runner = asyncio.get_running_loop().create_task(link.run())
    try:
        await link.ready.wait()
        if link.failure is None and link.handle is not None and not runner.done():
            yield link.handle
    finally:
        if link.handle is not None:
            link.handle.close()
        runner.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait((runner,))
    if link.failure is not None:
        raise link.failure
    if not runner.cancelled() and runner.exception() is not None:
        raise runner.exception()  # type: ignore[misc]


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _reason(exc: BaseException) -> str:
    """The innermost message of a (grouped) failure."""
    exc = _innermost(exc)
    if isinstance(exc, MCPError):
        return exc.error.message
    return str(exc) or type(exc).__name__


def _fingerprint(tool: types.Tool) -> str:
    return json.dumps(
        [
            tool.description,
            tool.input_schema,
            tool.output_schema,
            None
            if tool.annotations is None
            else tool.annotations.model_dump(by_alias=True, exclude_none=True),
        ],
        sort_keys=True,
        default=str,
    )
