"""``ToolRegistry``: tools, middleware and observers for many agents, and their calls.

Read top to bottom: the constructor, then ``execute``, which runs one call through the
pipeline stage by stage (pipeline.md), then ``run`` and ``stream`` (the scheduler,
``_scheduling``), then registration, the views, and code mode's transport factory.

Everything a call reads of the registry lives in one internal ``Core`` (``_core.core``):
the layers and their resolver, the chains, the guards, the approver, the logger and code
mode's transports. The stages themselves are in ``_dispatch``: ``pipeline`` (1-7),
``body`` (the tool body) and ``commit`` (10-13). ``Scope`` (``scope``) is a handle on
one scope's layer. ``schemas`` is cached per scope and invalidated by a version counter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .._core.chains import AROUND, POST, PRE, PROGRESS, RESULT
from .._core.core import Core, Presentation, Registration, Restriction
from .._core.entry import Entry
from .._core.presentation import (
    RESERVED,
    RESTRICTED,
    RUN_CODE,
    Mode,
    check_mode,
    conflict,
    require_code_extra,
)
from .._dispatch.body import core_body
from .._dispatch.commit import finish, post_execute
from .._dispatch.pipeline import begin, check_guards, decide, dispatched, run_dispatch
from .._dispatch.state import DISPATCHED, READY, REFUSED
from .._model.cancel import CancelSignal
from .._model.decisions import Approver
from .._model.disposer import Disposer
from .._model.tool import ExecutionMode, Tool, ToolCall, ToolSchema
from .._scheduling import scheduler as _scheduler
from .._scheduling.scheduler import Batch, CallStream, bind_calls
from .scope import Scope

if TYPE_CHECKING:
    from .._dispatch.execution import Execution
    from .._dispatch.progress import Progress
    from .._model.hooks import Guard
    from .._model.results import ToolResult
    from ..code._pool import SandboxPool
    from ..code._settings import CodeSettings

__all__ = ["ToolRegistry", "approving_with"]

F = TypeVar("F", bound=Callable[..., Any])


class ToolRegistry:
    """Tools, middleware and observers for many agents, and the pipeline that runs calls.

    >>> registry = ToolRegistry()
    >>> registry.register(Tool(name="echo", description="Echo.",
    ...                        parameters={"type": "object"}, execute=lambda a, ctx: a))
    <Disposer active>
    >>> [s.name for s in registry.schemas()]
    ['echo']
    """

    def __init__(
        self, *, approver: Approver | None = None, logger: logging.Logger | None = None,
        presentation: Mode = "native", code: CodeSettings | None = None,
    ) -> None:
        mode = check_mode(presentation)
        if mode != "native":
            require_code_extra()
        if code is not None:
            _check_settings(code)
        self._core = Core(approver, logger if logger is not None else logging.getLogger("toolrail"),
                          mode, self._transport)
        self._code = code
        self._pool: SandboxPool | None = None
        self._listeners: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        core = self._core
        return f"<ToolRegistry tools={len(core.tools)} scopes={len(core.scopes)}>"

    @property
    def logger(self) -> logging.Logger:
        """Where contained failures (observers, listeners) are logged."""
        return self._core.logger

    @logger.setter
    def logger(self, logger: logging.Logger) -> None:
        self._core.logger = logger

    @property
    def approver(self) -> Approver | None:
        """Who is asked when a call needs approval; read at the moment a call asks.

        Inside ``approving_with(registry, approver)`` (an integration's hook: the MCP
        server asking its client), the calls of that context ask that approver instead.
        """
        return self._core.approver

    @approver.setter
    def approver(self, approver: Approver | None) -> None:
        self._core._approver = approver

    # ---- running calls ----------------------------------------------------------------

    async def execute(self, call: ToolCall) -> ToolResult:
        """Run one call through the whole pipeline to a final, frozen result.

        Never raises for anything the arguments, a tool, a middleware, a guard, an
        approver or an observer did; only ``BaseException``s that are not ``Exception``s
        propagate, after any body it started has finished.

        The stages of pipeline.md, in order; the scheduler runs the same stage functions
        (``_dispatch.pipeline``, ``_dispatch.commit``) and overlaps only dispatch. Each
        stage reads its chain as it stands when it starts, and one with nothing to await
        (no middleware, no approval) is done without an ``await``, or a call frame: this
        is the hot path.
        """
        if not isinstance(call, ToolCall):
            raise TypeError(f"execute() takes a ToolCall, got {type(call).__name__}")
        core = self._core
        chains = core.chains
        scope = call.scope
        state = begin(core, call, scope, call.signal)  # 1-3: lookup, snapshot, signal
        if state.phase == READY:
            if state.asks or (not chains.quiet and chains.for_call(PRE, scope)):
                await decide(core, state)  # 4-7: pre-execute, approval, guards, signal
            else:
                check_guards(core, state)  # 5-7
        if state.phase == READY:
            state.entry = entry = core.resolve(state.execution._name, scope)  # 8: dispatch's
            if chains.quiet or not chains.for_call(AROUND, scope):
                dispatched(state, await core_body(state, entry))  # 9: the body, right here
            else:
                await run_dispatch(core, state)  # 8-9: around-execute around the body
        if (state.phase == DISPATCHED or state.phase == REFUSED) and not chains.quiet and (
                chains.for_call(POST, scope)):  # ``awaits_post``, without its frame
            await post_execute(core, state)  # 10: post-execute middleware
        return finish(core, state)  # 11-13: materialize, finalize, observers

    async def run(self, calls: Iterable[ToolCall], *, max_parallel: int = 10,
                  signal: CancelSignal | None = None) -> Batch:
        """Run one model step's calls: in parallel where safe, results in model order.

        Argument errors (``max_parallel``, a non-``ToolCall``) raise before anything runs.
        """
        listed, scopes = bind_calls(calls, max_parallel, signal, None, bound=False)
        return await _scheduler.run(self._core, listed, scopes, max_parallel, signal)

    def stream(self, calls: Iterable[ToolCall], *, max_parallel: int = 10,
               signal: CancelSignal | None = None) -> CallStream:
        """Like ``run``, yielding each ``Committed`` as soon as it commits, in model order.

        Use it as ``async with contextlib.aclosing(registry.stream(calls)) as s``.
        """
        listed, scopes = bind_calls(calls, max_parallel, signal, None, bound=False)
        return _scheduler.stream(self._core, listed, scopes, max_parallel, signal)

    # ---- the global layer -----------------------------------------------------------

    def register(self, tool: Tool) -> Disposer:
        """Register ``tool`` in the global layer; raises at once on any mistake."""
        return self._register(tool, None)

    @overload
    def tool(self, fn: F, /) -> F: ...

    @overload
    def tool(self, fn: None = None, /, **options: Any) -> Callable[[F], F]: ...

    def tool(self, fn: F | None = None, /, **options: Any) -> F | Callable[[F], F]:
        """Decorator: ``register(tr.tool(fn, **options))``; returns ``fn`` unchanged."""
        from .._typed.tool import registering  # typed tools (pydantic) load at first use

        return registering(self.register, fn, options)

    def guard(self, guard: Guard) -> Disposer:
        """Add a monotonic guard for every call: it may only deny, by returning a reason."""
        return self._add_guard(guard, None)

    def pre_execute(self, middleware: Any, *, prepend: bool = False) -> Disposer:
        """Add pre-execute middleware (``Allow`` / ``Deny`` / ``Ask``) for every call."""
        return self._core.chains.add(PRE, middleware, None, prepend)

    def around_execute(self, middleware: Any, *, prepend: bool = False) -> Disposer:
        """Add around-execute middleware (wraps the dispatch) for every call."""
        return self._core.chains.add(AROUND, middleware, None, prepend)

    def post_execute(self, middleware: Any, *, prepend: bool = False) -> Disposer:
        """Add post-execute middleware (``Accept`` / ``Block``) for every call."""
        return self._core.chains.add(POST, middleware, None, prepend)

    def on_result(self, observer: Callable[[Execution, ToolResult], None], *,
                  prepend: bool = False) -> Disposer:
        """Add a synchronous observer of every final result."""
        return self._core.chains.add(RESULT, observer, None, prepend)

    def on_progress(self, listener: Callable[[Execution, Progress], None], *,
                    prepend: bool = False) -> Disposer:
        """Add a synchronous listener of the progress bodies report (``report_progress``).

        Like a result observer added here, it hears every call; one added through a
        scope hears only that scope's calls. Progress is never stored.
        """
        return self._core.chains.add(PROGRESS, listener, None, prepend)

    def on_change(self, listener: Callable[[], None]) -> Disposer:
        """Call ``listener()`` after every change of tools or restrictions."""
        if not callable(listener):
            raise TypeError(f"on_change() takes a callable, got {type(listener).__name__}")
        listeners = self._listeners
        token = Registration(listener)
        listeners.append(token)
        return Disposer(lambda: listeners.remove(token))  # the token, compared by identity

    def scope(self, key: Hashable) -> Scope:
        """A handle for one agent's scope; handles for equal keys share one layer."""
        if key is None:
            raise ValueError("scope key must not be None")
        hash(key)
        return Scope(self, key)

    # ---- views ----------------------------------------------------------------------

    def presentation(self, scope: Hashable | None = None) -> str:
        """The presentation mode ``scope`` sees: its active ``present_as``, else the registry's."""
        return self._core.mode_of(scope)

    def get(self, name: str, scope: Hashable | None = None) -> Tool | None:
        """The tool ``scope`` sees under ``name`` (its own first, then unmasked globals)."""
        entry = self._core.resolve(name, scope)
        return None if entry is None else entry.tool

    def schemas(self, scope: Hashable | None = None) -> list[ToolSchema]:
        """One schema per tool ``scope`` sees, sorted by name; a new list each call.

        In ``"code"`` mode exactly ``[run_code]``; in ``"both"`` ``run_code`` comes last.
        """
        visible = self._core.visible_schemas(scope)
        core = self._core
        if not core.coded:
            return visible
        mode = core.mode_of(scope)
        if mode == "native":
            return visible
        transport = self._core.transport(scope).schema
        return [transport] if mode == "code" else [*visible, transport]

    def scopes(self) -> list[Hashable]:
        """The keys of the scopes that have a layer, sorted by ``str(key)``; a new list.

        A scope has a layer while something is registered, restricted, guarded or
        added (scope-only middleware or observer) through it; a key with none sees
        exactly the global view. Keys whose ``str`` is equal keep the order their
        layers were made in.

        >>> registry = ToolRegistry()
        >>> with registry.scope("writer") as writer:
        ...     _ = writer.guard(lambda execution: None)
        ...     registry.scopes()
        ['writer']
        >>> registry.scopes()
        []
        """
        return sorted(self._core.scopes, key=str)

    def execution_mode(self, call: ToolCall) -> ExecutionMode:
        """``PARALLEL`` only when the visible tool declares the call safe; never raises."""
        if not issubclass(type(call), ToolCall):  # isinstance would run call's own code
            return ExecutionMode.EXCLUSIVE
        return self._core.classify(call, call.scope)[0]

    # ---- changes, shared with Scope -------------------------------------------------

    def _register(self, tool: Tool, scope: Hashable | None) -> Disposer:
        if isinstance(tool, Tool) and tool.name == RUN_CODE:
            raise ValueError(RESERVED)  # the first check after the type check
        entry = Entry.build(tool)  # every check but the duplicate one
        name = tool.name
        core = self._core
        if scope is None:
            layer = core.tools
            if name in layer:
                raise ValueError(
                    f'tool "{name}" is already registered (for a per-scope variant, '
                    "register it through registry.scope(key) instead)"
                )
            state = None
        else:
            state = core.scopes.get(scope)
            if state is not None and name in state.tools:
                raise ValueError(f'tool "{name}" is already registered in this scope')
            state = core.acquire(scope)
            layer = state.tools
            state.version += 1
        layer[name] = entry

        def remove() -> None:
            if layer.get(name) is entry:
                del layer[name]
                if state is not None:
                    state.version += 1
            if state is not None:
                core.release(scope, state)

        return self._commit_change(remove)

    def _restrict(self, key: Hashable, allow: Iterable[str] | None,
                  deny: Iterable[str] | None) -> Disposer:
        if allow is None and deny is None:
            raise ValueError(
                "restrict() with neither allow nor deny is a no-op: pass allow and/or deny"
            )
        allowed = None if allow is None else _names("allow", allow)
        denied = () if deny is None else _names("deny", deny)
        if RUN_CODE in (allowed or ()) or RUN_CODE in denied:
            raise ValueError(RESTRICTED)
        core = self._core
        unknown = [n for n in dict.fromkeys([*(allowed or ()), *denied]) if n not in core.tools]
        if unknown:
            known = ", ".join(sorted(core.tools)) or "(none)"
            quoted = ", ".join(f'"{n}"' for n in unknown)
            noun = "tool" if len(unknown) == 1 else "tools"
            raise ValueError(
                f"restrict() names unknown global {noun} {quoted}; known global tools: {known}"
            )
        restriction = Restriction(None if allowed is None else frozenset(allowed),
                                  frozenset(denied))
        state = core.acquire(key)
        state.restrictions = (*state.restrictions, restriction)
        state.version += 1

        def lift() -> None:
            if restriction in state.restrictions:
                state.restrictions = tuple(r for r in state.restrictions if r is not restriction)
                state.version += 1
            core.release(key, state)

        return self._commit_change(lift)

    def _add_guard(self, guard: Guard, key: Hashable | None) -> Disposer:
        if not callable(guard):
            raise TypeError(f"guard() takes a callable, got {type(guard).__name__}")
        marker = Registration(guard)
        core = self._core
        if key is None:
            core.guards = (*core.guards, marker)

            def remove_global() -> None:
                core.guards = tuple(g for g in core.guards if g is not marker)

            return Disposer(remove_global)
        state = core.acquire(key)
        state.guards = (*state.guards, marker)

        def remove_scoped() -> None:
            state.guards = tuple(g for g in state.guards if g is not marker)
            core.release(key, state)

        return Disposer(remove_scoped)

    def _commit_change(self, undo: Callable[[], None]) -> Disposer:
        """Announce a change just made; roll it back if a listener refuses it."""
        self._notify(rollback=undo)

        def dispose() -> None:
            undo()
            self._notify()

        return Disposer(dispose)

    def _notify(self, rollback: Callable[[], None] | None = None) -> None:
        self._core.version += 1
        first: Exception | None = None
        for listener in tuple(self._listeners):
            try:
                listener()
            except Exception as exc:
                if rollback is not None:
                    rollback()
                    self._notify_quietly()
                    raise
                first = first or exc
        if first is not None:
            raise first

    def _notify_quietly(self) -> None:
        self._core.version += 1
        for listener in tuple(self._listeners):
            try:
                listener()
            except Exception as exc:
                self.logger.warning("change listener failed during rollback: %s", exc)

    # ---- code mode (code-mode.md) -----------------------------------------------------

    def _present(self, key: Hashable, mode: Any, settings: Any) -> Disposer:
        """``Scope.present_as``: declare how this scope presents its tools."""
        mode = check_mode(mode)
        if settings is not None:
            _check_settings(settings)
        if mode != "native":
            require_code_extra()
        core = self._core
        state = core.scopes.get(key)
        if state is not None and state.presenting and state.presenting[0].mode != mode:
            raise conflict(mode, state.presenting[0].mode)
        state = core.acquire(key)
        declaration = Presentation(mode, settings)
        state.presenting = (*state.presenting, declaration)
        state.version += 1
        self._recount()

        def lift() -> None:
            if declaration in state.presenting:
                state.presenting = tuple(p for p in state.presenting if p is not declaration)
                state.version += 1
            core.release(key, state)
            self._recount()

        return self._commit_change(lift)

    def _recount(self) -> None:
        """Whether any view presents code now (until one does, calls never look)."""
        core = self._core
        core.coded = core.presentation != "native" or any(
            s.presenting and s.presenting[0].mode != "native" for s in core.scopes.values())

    def _code_settings(self, scope: Hashable | None) -> CodeSettings:
        """The settings of ``scope``'s programs: its declaration's, the registry's, defaults."""
        state = self._core.scopes.get(scope) if scope is not None else None
        if state is not None:
            for declaration in state.presenting:
                if declaration.settings is not None:
                    return declaration.settings
        if self._code is not None:
            return self._code
        from ..code._settings import CodeSettings

        return CodeSettings()

    def _transport(self, entries: tuple[Entry, ...]) -> Entry:
        """A ``run_code`` entry over ``entries`` (the tools a scope sees, in name order),
        whose programs run in this registry's sandbox pool; ``Core.transport`` keeps it."""
        from ..code._transport import build_transport

        return Entry.build(build_transport(self, entries))

    async def _sandbox(self) -> SandboxPool:
        """The registry's sandbox pool, started at the first program."""
        pool = self._pool
        if pool is None:
            from ..code._pool import SandboxPool

            pool = self._pool = SandboxPool()
        await pool.start()
        return pool

    async def aclose(self) -> None:
        """Close the sandbox pool: wait for running programs to be cancelled and their
        workers to exit. The registry can still run native calls afterwards; a later
        ``run_code`` starts a new pool, for the next ``aclose()`` to close."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def __aenter__(self) -> ToolRegistry:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@contextmanager
def approving_with(registry: ToolRegistry, approver: Approver) -> Iterator[None]:
    """Have the calls ``registry`` runs in this context ask ``approver`` (integrations:
    the MCP server asks its client)."""
    with registry._core.approving(approver):
        yield


def _check_settings(settings: Any) -> None:
    from ..code._settings import CodeSettings

    if not isinstance(settings, CodeSettings):
        raise TypeError(f"code settings must be a CodeSettings, got {type(settings).__name__}")


def _names(which: str, names: Iterable[str]) -> list[str]:
    if isinstance(names, str):
        raise TypeError(f"restrict() {which} must be an iterable of tool names, not a str")
    out = list(names)
    for name in out:
        if not isinstance(name, str):
            raise TypeError(f"restrict() {which} names must be str, got {type(name).__name__}")
    return out
