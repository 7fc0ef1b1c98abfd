"""Using an MCP server's tools: ``attach`` registers them, ``connect`` opens the session too.

Every remote tool becomes a raw ``tr.Tool`` whose body calls ``session.call_tool``:

* ``parameters`` is the remote ``inputSchema`` (a missing ``"type"`` reads as
  ``"object"``), ``output_schema`` the remote ``outputSchema`` (unwrapped, see
  ``_wire``), ``annotations`` the remote annotations in their wire spelling
  (``readOnlyHint``, ...), and ``concurrency_safe`` is ``readOnlyHint``.
* A result's content maps block by block (``_wire.local_blocks``); its
  ``structuredContent`` is the value (``{"result": x}`` unwrapped for a wrapped schema).
* ``isError`` raises ``tr.ToolError`` with the remote message (from toolrail's error
  ``_meta`` when the server is toolrail, else the text less one leading ``Error: ``)
  and code; a protocol failure (``MCPError``, e.g. a closed connection) fails the call.
* The body is interruptible: when its signal fires, the awaiting ``call_tool`` is
  cancelled and the SDK sends ``notifications/cancelled`` for the request.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
from mcp import Client, ClientSession, StdioServerParameters, types
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.server import MCPServer, Server

from .. import (
    Content,
    Disposer,
    JsonValue,
    RunContext,
    Scope,
    TextContent,
    Tool,
    ToolArgsError,
    ToolError,
    ToolOutput,
    ToolRegistry,
    thaw,
)
from ._names import PREFIX, assign_names
from ._wire import ERROR_META, local_blocks, unwrap_output_schema

__all__ = ["Attachment", "Changes", "attach", "connect"]

logger = logging.getLogger("toolrail.mcp")

_MAX_PAGES = 1000


@dataclass(frozen=True, slots=True)
class Changes:
    """What one ``refresh()`` did, by local name, each sorted."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Remote:
    local: str
    fingerprint: str
    dispose: Disposer


class Attachment:
    """The tools of one MCP session, registered in one registry or scope.

    ``refresh()`` re-syncs them with the server; ``close()`` (or calling the handle, or
    leaving its ``with`` block) removes them all. Closing is final: a later
    ``refresh()`` does nothing.
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

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._remotes)} tools"
        return f"<toolrail.mcp.Attachment {state}>"

    @property
    def names(self) -> dict[str, str]:
        """A fresh ``{local name: remote name}`` of the tools registered now."""
        return {remote.local: name for name, remote in sorted(self._remotes.items())}

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
            execute=_RemoteCall(self.session, remote.name, wrapped),
            output_schema=output_schema,
            annotations=annotations,
            concurrency_safe=bool(annotations and annotations.get("readOnlyHint") is True),
            timeout=self.tool_timeout,
        )


class _RemoteCall:
    """The body of a remote tool: one ``tools/call`` on the session."""

    __slots__ = ("remote", "session", "wrapped")

    def __init__(self, session: ClientSession, remote: str, wrapped: bool) -> None:
        self.session = session
        self.remote = remote
        self.wrapped = wrapped

    def __repr__(self) -> str:
        return f"<MCP tool {self.remote!r}>"

    async def __call__(self, arguments: JsonValue, context: RunContext) -> ToolOutput:
        if not isinstance(arguments, Mapping):
            raise ToolArgsError(f"arguments must be a JSON object, got {type(arguments).__name__}")
        result = await self.session.call_tool(self.remote, thaw(arguments))
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
) -> AbstractAsyncContextManager[Attachment]:
    """Open an MCP session, attach its tools, and keep them in sync until the block ends.

    Exactly one of ``command`` (a stdio server: ``command`` + ``args``, ``env``, ``cwd``),
    ``url`` (streamable HTTP, with optional ``headers``) or ``server`` (an SDK server in
    this process, for tests and composition). The session speaks the handshake protocol
    era (``initialize``); each ``notifications/tools/list_changed`` triggers
    ``refresh()``. On exit the tools are removed, then the session and its transport
    (the subprocess, too) are closed.
    """
    _check(registry_or_scope, prefix)
    if sum(source is not None for source in (command, url, server)) != 1:
        raise ValueError("connect() takes exactly one of command=, url= and server=")
    if command is None and (args or env is not None or cwd is not None):
        raise ValueError("args=, env= and cwd= go with command=")
    if url is None and headers is not None:
        raise ValueError("headers= goes with url=")
    source: Any
    if command is not None:
        source = StdioServerParameters(
            command=command,
            args=list(args),
            env=None if env is None else dict(env),
            cwd=None if cwd is None else os.fspath(cwd),
        )
    else:
        source = url if url is not None else server
    return _connected(registry_or_scope, source, headers, prefix, tool_timeout)


@asynccontextmanager
async def _connected(
    target: ToolRegistry | Scope,
    source: Any,
    headers: Mapping[str, str] | None,
    prefix: str,
    tool_timeout: float | None,
) -> AsyncIterator[Attachment]:
    handle: Attachment | None = None

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification) and handle is not None:
            try:
                await handle.refresh()
            except Exception:
                logger.warning("re-syncing the tools of an MCP server failed", exc_info=True)

    async with AsyncExitStack() as stack:
        if headers is not None:
            import httpx2

            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=dict(headers), timeout=httpx2.Timeout(30, read=300))
            )
            source = streamable_http_client(source, http_client=http)
        client = await stack.enter_async_context(
            Client(source, mode="legacy", message_handler=on_message, cache=None)
        )
        handle = Attachment(target, client.session, prefix=prefix, tool_timeout=tool_timeout)
        with handle:
            await handle.refresh()
            yield handle


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
