"""``server()``: the tools one scope sees, as an MCP server (the SDK's low-level ``Server``).

* ``tools/list`` is ``registry.schemas(scope)`` with each tool's ``outputSchema``
  (wrapped when it is not an object schema, see ``_wire``) and ``annotations``.
* ``tools/call`` runs the full pipeline: ``registry.execute`` with the JSON-RPC request
  id as ``call_id`` and the signal of a fresh ``CancelController``. The call's first
  step runs in the handler; a call that then waits continues in a task of its own, so
  that the client's ``notifications/cancelled`` (which the SDK delivers by cancelling
  the handler) only *fires that signal*: the pipeline ends the call as ``ABORTED``,
  observers notified, and the handler waits for it.
* A registry change that alters what the scope sees is announced once per burst:
  ``notifications/tools/list_changed`` to every handshake-era connection, and a
  ``ToolsListChanged`` event to every 2026-era ``subscriptions/listen`` stream.

Each run of the server (its lifespan: one per stdio or in-memory connection, one for a
whole streamable-HTTP app) owns one ``_Run``: the connections to notify, the listen
streams, and the task that sends the notifications.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Hashable, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
from mcp import types
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from .. import CancelController, Tool, ToolCall, ToolRegistry, __version__
from ._wire import wire_result, wire_tool

__all__ = ["server"]

logger = logging.getLogger("toolrail.mcp")

T = TypeVar("T")


def server(
    registry: ToolRegistry, *, scope: Hashable | None = None, name: str = "toolrail"
) -> Server[Any]:
    """An MCP server (the ``mcp`` SDK's low-level ``Server``) for the tools ``scope`` sees.

    Run it on any SDK transport, or use ``serve_stdio`` / ``serve_http``. It advertises
    ``tools.listChanged``; every call goes through ``registry.execute``.

    Args:
        registry: The registry whose tools to serve.
        scope: The scope whose view to serve; ``None`` serves the global tools.
        name: The server name announced to clients.

    >>> import toolrail as tr, toolrail.mcp
    >>> app = toolrail.mcp.server(tr.ToolRegistry(), name="tools")
    >>> app.name
    'tools'
    """
    if not isinstance(registry, ToolRegistry):
        raise TypeError(f"server() takes a ToolRegistry, got {type(registry).__name__}")
    view = _View(registry, scope)

    async def listen(
        ctx: ServerRequestContext[_Run], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        return await ctx.lifespan_context.listen(ctx, params)

    async def initialized(
        ctx: ServerRequestContext[_Run], params: types.NotificationParams
    ) -> None:
        ctx.lifespan_context.track(ctx.session)

    app = _Server(
        name,
        version=__version__,
        lifespan=_lifespan(view),
        get_tool_input_schema=view.input_schema,
        on_subscriptions_listen=listen,
    )
    # Registered this way the handlers may return the wire dicts (no model round trip).
    app.add_request_handler("tools/list", types.PaginatedRequestParams, view.list_tools)
    app.add_request_handler("tools/call", types.CallToolRequestParams, view.call_tool)
    app.add_notification_handler("notifications/initialized", types.NotificationParams, initialized)
    return app


class _Server(Server["_Run"]):
    """The SDK's ``Server``, advertising ``tools.listChanged`` whoever builds the options."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


class _View:
    """One scope's view of the registry, as the handlers need it."""

    __slots__ = ("_listed", "_listing", "registry", "scope")

    def __init__(self, registry: ToolRegistry, scope: Hashable | None) -> None:
        self.registry = registry
        self.scope = scope
        self._listed: tuple[Tool | None, ...] | None = None
        self._listing: list[dict[str, Any]] = []

    def visible(self) -> tuple[Tool | None, ...]:
        """The visible definitions, by identity: a replaced tool is a different one."""
        get, scope = self.registry.get, self.scope
        return tuple(get(schema.name, scope) for schema in self.registry.schemas(scope))

    async def list_tools(
        self, ctx: ServerRequestContext[_Run], params: types.PaginatedRequestParams
    ) -> dict[str, Any]:
        ctx.lifespan_context.track(ctx.session)  # whoever has a listing hears of changes
        schemas = self.registry.schemas(self.scope)
        tools = tuple(self.registry.get(schema.name, self.scope) for schema in schemas)
        if tools != self._listed:
            self._listing = [
                wire_tool(schema, tool)
                for schema, tool in zip(schemas, tools, strict=True)
                if tool is not None
            ]
            self._listed = tools
        # ttlMs/cacheScope: the SDK's defaults (2026-07-28 requires them): never cache a
        # listing that changes with the registry.
        return {
            "tools": self._listing,
            "resultType": "complete",
            "ttlMs": 0,
            "cacheScope": "private",
        }

    def input_schema(self, name: str) -> Mapping[str, Any] | None:
        tool = self.registry.get(name, self.scope)
        return None if tool is None else tool.parameters

    async def call_tool(
        self, ctx: ServerRequestContext[_Run], params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        name, arguments = params.name, params.arguments
        controller = CancelController()
        call = ToolCall(
            call_id=str(ctx.request_id),
            name=name,
            arguments={} if arguments is None else arguments,
            scope=self.scope,
            signal=controller.signal,
        )
        tool = self.registry.get(name, self.scope)
        # The call runs in a task of its own, awaited on every path. The SDK cancels this
        # handler when the client cancels the request; that must reach the call as its
        # signal (it then ends ABORTED, observers notified), never as a CancelledError
        # inside it. (Running the call's first step here instead, to save the task,
        # would start tool bodies in one task and finish them in another: a body's
        # asyncio.timeout or anyio cancel scope would then belong to the wrong task.)
        task = asyncio.get_running_loop().create_task(self.registry.execute(call))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            controller.cancel("cancelled by the MCP client")
            with anyio.CancelScope(shield=True):
                await asyncio.wait((task,))
            raise
        return wire_result(task.result(), tool)


class _Run:
    """One run of the server: who to tell about changes, and the task that tells them."""

    def __init__(self) -> None:
        self.connections: set[Connection] = set()
        self.changed = anyio.Event()
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus)

    def mark_changed(self) -> None:
        self.changed.set()

    def track(self, session: Any) -> None:
        """Remember the connection of a handshake-era session until it closes.

        Called when the client is initialized and on every listing, so a client that
        has a listing always hears of later changes.
        """
        # mcp 2.x hands low-level handlers the per-request ``ServerSession`` only; its
        # ``Connection`` (public on the SDK's own ``Context``) is not exposed there yet.
        connection = getattr(session, "_connection", None)
        if (
            not isinstance(connection, Connection)
            or connection in self.connections
            or connection.protocol_version in MODERN_PROTOCOL_VERSIONS  # they listen instead
        ):
            return
        self.connections.add(connection)
        connection.exit_stack.callback(self.connections.discard, connection)

    async def announce(self, view: _View) -> None:
        """Send one list-changed per burst of changes that alter the visible tools."""
        seen = view.visible()
        while True:
            await self.changed.wait()
            self.changed = anyio.Event()
            now = view.visible()
            if now == seen:
                continue
            seen = now
            for connection in list(self.connections):
                try:
                    await connection.send_tool_list_changed()
                except Exception:  # one broken connection must not silence the others
                    logger.warning("could not send tools/list_changed", exc_info=True)
            try:
                await self.bus.publish(ToolsListChanged())
            except Exception:
                logger.warning("could not publish the tools list change", exc_info=True)


def _lifespan(view: _View) -> Any:
    @asynccontextmanager
    async def lifespan(_: Server[_Run]) -> AsyncIterator[_Run]:
        run = _Run()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run.announce, view)
            try:
                with view.registry.on_change(run.mark_changed):
                    yield run
            finally:
                run.listen.close()
                tasks.cancel_scope.cancel()

    return lifespan
