"""``server()``: the tools one scope sees, as an MCP server (the SDK's low-level ``Server``).

* ``tools/list`` is ``registry.schemas(scope)`` with each tool's ``outputSchema``
  (wrapped when it is not an object schema, see ``_wire``) and ``annotations``.
* ``tools/call`` runs the full pipeline: ``registry.execute`` with the JSON-RPC request
  id as ``call_id`` and the signal of a fresh controller. The client cancelling the
  request (``notifications/cancelled``, or a closed response stream on HTTP) or the
  connection ending under it only *fires that signal*: the pipeline ends the call as
  ``ABORTED``, observers notified, and the handler waits for it. The call runs in the
  handler's own task where the SDK's JSON-RPC dispatcher serves it (stdio, in-memory,
  handshake-era HTTP; see ``_hold``), in a task of its own elsewhere; either way a tool
  body runs in one task from its first step to its last.
* ``resources/list``, ``resources/templates/list`` and ``prompts/list`` are empty, so
  ``resources/read`` and ``prompts/get`` answer -32602 (unknown resource, unknown
  prompt), as the SDK's MCPServer and the spec do.
* A registry change that alters what the scope sees is announced once per burst:
  ``notifications/tools/list_changed`` to every handshake-era connection, and a
  ``ToolsListChanged`` event to every 2026-era ``subscriptions/listen`` stream.

Each run of the server (its lifespan: one per stdio or in-memory connection, one for a
whole streamable-HTTP app) owns one ``_Run``: the connections to notify, the listen
streams, the task that sends the notifications, and the calls held on each of its
dispatchers.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from collections.abc import AsyncIterator, Coroutine, Hashable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager, nullcontext
from typing import Any, Literal, TypeVar

import anyio
import anyio.abc
from mcp import types
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher, progress_token_from_params
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from .. import (
    ApprovalRequest,
    CancelController,
    Disposer,
    Execution,
    Progress,
    Tool,
    ToolCall,
    ToolRegistry,
    __version__,
    thaw,
)
from .._registry.registry import approving_with
from ._wire import wire_result, wire_tool

__all__ = ["server"]

logger = logging.getLogger("toolrail.mcp")

T = TypeVar("T")


def server(
    registry: ToolRegistry,
    *,
    scope: Hashable | None = None,
    name: str = "toolrail",
    approver: Literal["elicit"] | None = None,
) -> Server[Any]:
    """An MCP server (the ``mcp`` SDK's low-level ``Server``) for the tools ``scope`` sees.

    Run it on any SDK transport, or use ``serve_stdio`` / ``serve_http``. It advertises
    ``tools.listChanged``; every call goes through ``registry.execute``.

    Args:
        registry: The registry whose tools to serve.
        scope: The scope whose view to serve; ``None`` serves the global tools.
        name: The server name announced to clients.
        approver: ``"elicit"``: a call that needs approval asks the MCP client (an
            ``elicitation/create`` request) instead of the registry's approver; a client
            that did not declare elicitation gets the ``unavailable`` outcome.

    >>> import toolrail as tr, toolrail.mcp
    >>> app = toolrail.mcp.server(tr.ToolRegistry(), name="tools")
    >>> app.name
    'tools'
    """
    if not isinstance(registry, ToolRegistry):
        raise TypeError(f"server() takes a ToolRegistry, got {type(registry).__name__}")
    if approver not in (None, "elicit"):
        raise ValueError(f'approver must be "elicit" or None, got {approver!r}')
    view = _View(registry, scope, elicit=approver == "elicit")

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
    app.view = view
    # Registered this way the handlers may return the wire dicts (no model round trip).
    app.add_request_handler("tools/list", types.PaginatedRequestParams, view.list_tools)
    app.add_request_handler("tools/call", types.CallToolRequestParams, view.call_tool)
    app.add_notification_handler("notifications/initialized", types.NotificationParams, initialized)
    # A tools-only server still answers what clients ask of any server, as the SDK's
    # MCPServer does: nothing to list, nothing to read or get (invalid params, see
    # _unknown_resource), and any log level accepted (it logs nothing).
    for method, key in _EMPTY_LISTS.items():
        app.add_request_handler(method, types.PaginatedRequestParams, _empty(key))
    app.add_request_handler("resources/read", types.ReadResourceRequestParams, _unknown_resource)
    app.add_request_handler("prompts/get", types.GetPromptRequestParams, _unknown_prompt)
    app.add_request_handler("logging/setLevel", types.SetLevelRequestParams, _accept_level)
    return app


_EMPTY_LISTS = {
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
    "prompts/list": "prompts",
}


def _empty(key: str) -> Any:
    async def handler(ctx: ServerRequestContext[_Run], params: Any) -> dict[str, Any]:
        return {key: [], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}

    return handler


async def _unknown_resource(
    ctx: ServerRequestContext[_Run], params: types.ReadResourceRequestParams
) -> dict[str, Any]:
    """No resource exists: -32602 with the URI in ``data``, as the SDK's MCPServer answers
    and the MCP spec requires since SEP-2164 (2026-07-28; before it, -32002 was a SHOULD)."""
    uri = str(params.uri)
    raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown resource: {uri}", data={"uri": uri})


async def _unknown_prompt(
    ctx: ServerRequestContext[_Run], params: types.GetPromptRequestParams
) -> dict[str, Any]:
    """No prompt exists: -32602, the MCP spec's code for an invalid prompt name, with the
    SDK's message (its MCPServer sends that message with code 0)."""
    raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")


async def _accept_level(
    ctx: ServerRequestContext[_Run], params: types.SetLevelRequestParams
) -> dict[str, Any]:
    return {}


class _Server(Server["_Run"]):
    """The SDK's ``Server``, advertising ``tools.listChanged`` whoever builds the options."""

    view: _View

    def cancel_calls(self, reason: str) -> None:
        """Fire the signal of every call in progress (``serve_http`` stopping)."""
        for controller in list(self.view.running):
            controller.cancel(reason)

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

    __slots__ = ("_listed", "_listing", "_tracked", "_unlisten", "elicit", "registry",
                 "running", "scope")

    def __init__(self, registry: ToolRegistry, scope: Hashable | None, *, elicit: bool) -> None:
        self.registry = registry
        self.scope = scope
        self.elicit = elicit
        self.running: set[_Controller] = set()  # the calls in progress, on every transport
        self._listed: tuple[Tool | None, ...] | None = None
        self._listing: list[dict[str, Any]] = []
        self._tracked = 0  # calls in progress whose client asked for progress
        self._unlisten: Disposer | None = None

    @contextmanager
    def _reporting(self, out: _ProgressOut) -> Iterator[None]:
        """Send this call's progress to its client: one registry listener serves every
        tracked call (each report goes to the call whose context made it), held while
        any is in progress."""
        reset = _REPORTING.set(out)
        if self._tracked == 0:
            self._unlisten = self.registry.on_progress(self._heard)
        self._tracked += 1
        try:
            yield
        finally:
            self._tracked -= 1
            if self._tracked == 0 and self._unlisten is not None:
                self._unlisten()
                self._unlisten = None
            _REPORTING.reset(reset)

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

    def _heard(self, execution: Execution, report: Progress) -> None:
        """The registry's progress listener while tracked calls run: a report goes to the
        call whose context made it, if that call is this view's (two servers may serve
        one registry)."""
        out = _REPORTING.get()
        if out is not None and out.view is self:
            out.send(report)

    def input_schema(self, name: str) -> Mapping[str, Any] | None:
        tool = self.registry.get(name, self.scope)
        return None if tool is None else tool.parameters

    async def call_tool(
        self, ctx: ServerRequestContext[_Run], params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        name, arguments = params.name, params.arguments
        controller = _Controller()
        call = ToolCall(
            call_id=str(ctx.request_id),
            name=name,
            arguments={} if arguments is None else arguments,
            scope=self.scope,
            signal=controller.signal,
        )
        tool = self.registry.get(name, self.scope)
        self.running.add(controller)
        asking = approving_with(self.registry, _Elicit(ctx)) if self.elicit else nullcontext()
        progress = (_ProgressOut(ctx, self) if progress_token_from_params(ctx.params) is not None
                    else None)
        try:
            with asking, self._reporting(progress) if progress else nullcontext():
                # Never a CancelledError inside the call: its cancellations reach it as its
                # signal.
                if _hold(ctx, controller):
                    try:
                        result = await self.registry.execute(call)
                    finally:
                        controller.release()
                else:
                    result = await _in_a_task(self.registry.execute(call), controller)
        finally:
            self.running.discard(controller)
            if progress is not None:
                await progress.flush()
        return wire_result(result, tool)


_CANCELLED = "cancelled by the MCP client"

_REPORTING: contextvars.ContextVar[_ProgressOut | None] = contextvars.ContextVar(
    "toolrail_mcp_progress", default=None)


class _ProgressOut:
    """Progress of one served call, sent to the client as ``notifications/progress`` for
    the request's ``progressToken``, all of it before the call's answer.

    This call's reports are the ones made in its context (a worker thread's and a child
    task's contexts are copies of it): its view's ``_heard`` finds it there.
    """

    __slots__ = ("ctx", "sends", "view")

    def __init__(self, ctx: ServerRequestContext[_Run], view: _View) -> None:
        self.ctx = ctx
        self.view = view
        self.sends: list[asyncio.Task[None]] = []

    def send(self, report: Progress) -> None:
        self.sends.append(asyncio.get_running_loop().create_task(
            self.ctx.session.report_progress(report.progress, report.total, report.message)))

    async def flush(self) -> None:
        """Wait until every notification is sent (or failed: never the call's answer)."""
        if self.sends:
            await asyncio.gather(*self.sends, return_exceptions=True)

_ELICITATION = types.ClientCapabilities(elicitation=types.ElicitationCapability())
_OUTCOMES = {"accept": "allowed-once", "decline": "rejected", "cancel": "cancelled"}


class _Elicit:
    """The approver of one MCP call: ask the client (``elicitation/create``).

    accept is ``allowed-once``, decline ``rejected``, cancel ``cancelled``; a client
    that did not declare elicitation, or an elicitation that fails, ``unavailable``.
    """

    __slots__ = ("ctx",)

    def __init__(self, ctx: ServerRequestContext[_Run]) -> None:
        self.ctx = ctx

    async def __call__(self, request: ApprovalRequest) -> str:
        session = self.ctx.session
        try:
            if not session.check_client_capability(_ELICITATION):
                return "unavailable"
            answer = await session.elicit_form(
                _question(request),
                {"type": "object", "properties": {}},
                related_request_id=self.ctx.request_id,
            )
        except Exception:
            logger.warning("asking the MCP client for approval failed", exc_info=True)
            return "unavailable"
        return _OUTCOMES.get(answer.action, "unavailable")


def _question(request: ApprovalRequest) -> str:
    arguments = json.dumps(thaw(request.arguments), ensure_ascii=False, default=str)
    question = f'Allow tool "{request.tool_name}" with arguments {arguments}?'
    return question if request.reason is None else f"{question} ({request.reason})"


class _Controller(CancelController):
    """A call's controller: ``cancel()`` fires the call's signal, and never raises.

    While the call is held (``_hold``), the dispatcher knows it as the request's cancel
    scope: a client cancellation calls ``cancel()`` here instead of cancelling the
    handler.
    """

    __slots__ = ("calls", "entry", "scope")
    calls: _HeldCalls  # these three are set only while the call is held
    entry: Any
    scope: anyio.CancelScope

    def cancel(self, reason: str = _CANCELLED) -> None:
        try:
            super().cancel(reason)
        except Exception:  # a raising signal callback must not break the SDK's read loop
            logger.warning("a signal callback raised when a call was cancelled", exc_info=True)

    def release(self) -> None:
        """Give the request its scope back once the call has ended."""
        self.calls.calls.discard(self)
        scope = self.scope
        scope.shield = False  # a shutdown that came meanwhile now reaches the handler
        entry = self.entry
        if entry.scope is self:
            entry.scope = scope


async def _in_a_task(work: Coroutine[Any, Any, T], controller: _Controller) -> T:
    """Await ``work`` in a task of its own; a cancellation of this one fires ``controller``.

    For the handlers ``_hold`` cannot hold: the SDK cancels the handler, and that must
    reach the call as its signal, never as a ``CancelledError`` inside it.
    """
    task = asyncio.get_running_loop().create_task(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        controller.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait((task,))
        raise
    return task.result()


# ---- holding a call in its handler's task: mcp 2.3's JSONRPCDispatcher, not public API --
#
# That dispatcher (stdio, in-memory, streamable HTTP of the handshake era, and the
# 2026-era stream loop) runs each request's handler in a task of its own, inside a cancel
# scope it keeps in its ``_in_flight`` table. It cancels that scope when the client sends
# ``notifications/cancelled``, and its whole task group when it shuts down (end of input,
# or its own caller cancelled). To run a call right in the handler's task and still have
# both reach the call only as its signal:
#
# * the table's entry for the request is pointed at the call's ``_Controller``, so a
#   client cancellation calls ``_Controller.cancel()``;
# * the request's scope is shielded while the call runs, so a shutdown does not cancel
#   the handler; instead one ``_HeldCalls`` task per dispatcher, in its task group, is
#   cancelled, and fires the signals of that dispatcher's held calls.
#
# Anything not as expected (another dispatcher, another SDK version) and the call runs in
# a task of its own instead (``_in_a_task``), as it does on the other transports.


class _HeldCalls:
    """The calls held on one dispatcher, and whether it still runs."""

    __slots__ = ("calls", "closed", "in_flight")

    def __init__(self, in_flight: dict[Any, Any]) -> None:
        self.in_flight = in_flight
        self.calls: set[_Controller] = set()
        self.closed = False

    async def watch(self, held: dict[Any, _HeldCalls], dispatcher: Any) -> None:
        try:
            await anyio.sleep_forever()
        finally:  # the dispatcher's task group is cancelled
            self.closed = True
            if held.get(dispatcher) is self:
                del held[dispatcher]
            for controller in list(self.calls):
                controller.cancel()


def _hold(ctx: ServerRequestContext[_Run], controller: _Controller) -> bool:
    """Hold the call in the handler's task (see above); False if it cannot be."""
    outbound = getattr(ctx.session, "_request_outbound", None)
    dispatcher = getattr(outbound, "_dispatcher", None)
    if dispatcher is None:  # the 2026-era stream loop wraps the dispatcher's context
        outbound = getattr(outbound, "_inner", None)
        dispatcher = getattr(outbound, "_dispatcher", None)
    held = ctx.lifespan_context.held
    calls = held.get(dispatcher) or _watch(dispatcher, held)
    request_id = ctx.request_id
    if calls is None or calls.closed or request_id is None:
        return False
    entry = calls.in_flight.get(coerce_request_id(request_id))
    if entry is None or getattr(entry, "dctx", None) is not outbound:
        return False
    scope = getattr(entry, "scope", None)
    if not isinstance(scope, anyio.CancelScope) or scope.shield or scope.cancel_called:
        return False
    controller.calls, controller.entry, controller.scope = calls, entry, scope
    calls.calls.add(controller)
    scope.shield = True
    entry.scope = controller
    return True


def _watch(dispatcher: Any, held: dict[Any, _HeldCalls]) -> _HeldCalls | None:
    """Start watching ``dispatcher`` if it is the one ``_hold`` knows."""
    if type(dispatcher) is not JSONRPCDispatcher:
        return None
    in_flight = getattr(dispatcher, "_in_flight", None)
    group = getattr(dispatcher, "_tg", None)
    if (
        not isinstance(in_flight, dict)
        or not isinstance(group, anyio.abc.TaskGroup)
        or getattr(dispatcher, "_peer_cancel_mode", None) != "interrupt"
    ):
        return None
    calls = _HeldCalls(in_flight)
    try:
        # In a context of its own: the task lives as long as the connection, and must
        # not keep the first request's context (its OpenTelemetry span, say) that long.
        contextvars.Context().run(group.start_soon, calls.watch, held, dispatcher)
    except RuntimeError:  # the group no longer takes tasks
        return None
    held[dispatcher] = calls
    return calls


class _Run:
    """One run of the server: who to tell about changes, the task that tells them, and
    the calls held in their handlers' tasks (by dispatcher, see ``_hold``)."""

    def __init__(self) -> None:
        self.connections: set[Connection] = set()
        self.changed = anyio.Event()
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus)
        self.held: dict[Any, _HeldCalls] = {}

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
