"""``ToolRegistry``: the layers, the views, and every registration.

One resolver serves every view: a scope sees its own layer first, then the global
layer minus what its restrictions mask. ``get`` and ``execution_mode`` are O(1) in
the number of tools and scopes; ``schemas`` is cached per scope and invalidated by a
version counter. ``scopes()`` lists the keys that have a layer (something registered,
restricted, guarded or scope-only middleware). ``Scope`` (``_scope``) is a handle on
one scope's layer; the execute pipeline lives in ``_pipeline``, the scheduler in
``_scheduler``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar, overload

from . import _pipeline, _scheduler
from ._cancel import CancelSignal
from ._chains import AROUND, POST, PRE, PROGRESS, RESULT, Chains
from ._decisions import Approver
from ._disposer import Disposer
from ._entry import Entry
from ._json import snapshot_json
from ._presentation import (
    RESERVED,
    RESTRICTED,
    RUN_CODE,
    Mode,
    check_mode,
    conflict,
    require_code_extra,
)
from ._scheduler import Batch, CallStream, bind_calls
from ._scope import Scope, tool_decorator
from ._tool import ExecutionMode, Tool, ToolCall, ToolSchema

if TYPE_CHECKING:
    from ._execution import Execution
    from ._progress import Progress
    from ._results import ToolResult
    from ._types import Guard
    from .code._runtime import SandboxPool
    from .code._settings import CodeSettings

__all__ = ["ToolRegistry"]

# Read per call by the scheduler's classification: module globals cost less than members.
_PARALLEL = ExecutionMode.PARALLEL
_EXCLUSIVE = ExecutionMode.EXCLUSIVE

class _Registration:
    """One registration of a callable: its own identity, even when the callable is
    registered twice, so that each disposer removes exactly its own."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __repr__(self) -> str:
        return repr(self.fn)


F = TypeVar("F", bound=Callable[..., Any])


class _Restriction:
    __slots__ = ("allow", "deny")

    def __init__(self, allow: frozenset[str] | None, deny: frozenset[str]) -> None:
        self.allow = allow
        self.deny = deny

    def hides(self, name: str) -> bool:
        return (self.allow is not None and name not in self.allow) or name in self.deny


class _Presentation:
    """One ``present_as`` declaration (its own identity: each disposer lifts its own)."""

    __slots__ = ("mode", "settings")

    def __init__(self, mode: Mode, settings: CodeSettings | None) -> None:
        self.mode = mode
        self.settings = settings


class _ScopeState:
    """One scope's layer. It exists only while something is registered in it."""

    __slots__ = ("guards", "presenting", "refs", "restrictions", "schemas", "tools", "version")

    def __init__(self) -> None:
        self.tools: dict[str, Entry] = {}
        self.restrictions: tuple[_Restriction, ...] = ()
        self.guards: tuple[_Registration, ...] = ()
        self.presenting: tuple[_Presentation, ...] = ()  # active declarations, oldest first
        self.refs = 0
        self.version = 0
        self.schemas: tuple[int, int, list[ToolSchema]] | None = None


_APPROVER: ContextVar[tuple[ToolRegistry, Approver] | None] = ContextVar(
    "toolrail_approver", default=None)


@contextmanager
def approving_with(registry: ToolRegistry, approver: Approver) -> Iterator[None]:
    """Have the calls ``registry`` runs in this context ask ``approver`` (integrations)."""
    token = _APPROVER.set((registry, approver))
    try:
        yield
    finally:
        _APPROVER.reset(token)


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
        self._presentation: Mode = mode
        self._code = code
        # Whether any view may present code: until then the hot path never looks.
        self._coded = mode != "native"
        self._coded_scopes = 0  # scopes whose active declaration is "code" or "both"
        self._transports: dict[Hashable, tuple[tuple[Entry, ...], Entry]] = {}
        self._pool: SandboxPool | None = None
        self._approver = approver
        self.logger = logger if logger is not None else logging.getLogger("toolrail")
        self._tools: dict[str, Entry] = {}
        self._guards: tuple[_Registration, ...] = ()
        self._scopes: dict[Hashable, _ScopeState] = {}
        self._chains = Chains()
        self._listeners: list[Callable[[], None]] = []
        self._version = 0
        self._schemas: tuple[int, list[ToolSchema]] | None = None

    def __repr__(self) -> str:
        return f"<ToolRegistry tools={len(self._tools)} scopes={len(self._scopes)}>"

    @property
    def approver(self) -> Approver | None:
        """Who is asked when a call needs approval; read at the moment a call asks.

        Inside ``approving_with(registry, approver)`` (an integration's hook: the MCP
        server asking its client), the calls of that context ask that approver instead.
        """
        override = _APPROVER.get()
        if override is not None and override[0] is self:
            return override[1]
        return self._approver

    @approver.setter
    def approver(self, approver: Approver | None) -> None:
        self._approver = approver

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
        return tool_decorator(self.register, fn, options)

    def guard(self, guard: Guard) -> Disposer:
        """Add a monotonic guard for every call: it may only deny, by returning a reason."""
        return self._add_guard(guard, None)

    def pre_execute(self, middleware: Any, *, prepend: bool = False) -> Disposer:
        """Add pre-execute middleware (``Allow`` / ``Deny`` / ``Ask``) for every call."""
        return self._chains.add(PRE, middleware, None, prepend)

    def around_execute(self, middleware: Any, *, prepend: bool = False) -> Disposer:
        """Add around-execute middleware (wraps the dispatch) for every call."""
        return self._chains.add(AROUND, middleware, None, prepend)

    def post_execute(self, middleware: Any, *, prepend: bool = False) -> Disposer:
        """Add post-execute middleware (``Accept`` / ``Block``) for every call."""
        return self._chains.add(POST, middleware, None, prepend)

    def on_result(self, observer: Callable[[Execution, ToolResult], None], *,
                  prepend: bool = False) -> Disposer:
        """Add a synchronous observer of every final result."""
        return self._chains.add(RESULT, observer, None, prepend)

    def on_progress(self, listener: Callable[[Execution, Progress], None], *,
                    prepend: bool = False) -> Disposer:
        """Add a synchronous listener of the progress bodies report (``report_progress``).

        Like a result observer added here, it hears every call; one added through a
        scope hears only that scope's calls. Progress is never stored.
        """
        return self._chains.add(PROGRESS, listener, None, prepend)

    def on_change(self, listener: Callable[[], None]) -> Disposer:
        """Call ``listener()`` after every change of tools or restrictions."""
        if not callable(listener):
            raise TypeError(f"on_change() takes a callable, got {type(listener).__name__}")
        listeners = self._listeners
        token = _Registration(listener)
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
        state = self._scopes.get(scope) if scope is not None else None
        if state is not None and state.presenting:
            return state.presenting[0].mode
        return self._presentation

    def get(self, name: str, scope: Hashable | None = None) -> Tool | None:
        """The tool ``scope`` sees under ``name`` (its own first, then unmasked globals)."""
        entry = self._resolve(name, scope)
        return None if entry is None else entry.tool

    def schemas(self, scope: Hashable | None = None) -> list[ToolSchema]:
        """One schema per tool ``scope`` sees, sorted by name; a new list each call.

        In ``"code"`` mode exactly ``[run_code]``; in ``"both"`` ``run_code`` comes last.
        """
        visible = self._visible_schemas(scope)
        if not self._coded:
            return visible
        mode = self.presentation(scope)
        if mode == "native":
            return visible
        transport = self._transport(scope).schema
        return [transport] if mode == "code" else [*visible, transport]

    def _visible_schemas(self, scope: Hashable | None) -> list[ToolSchema]:
        state = self._scopes.get(scope) if scope is not None else None
        if state is None:
            cached = self._schemas
            if cached is None or cached[0] != self._version:
                ordered = sorted(self._tools.items())
                cached = self._schemas = (self._version, [e.schema for _, e in ordered])
            return list(cached[1])
        scoped = state.schemas
        if scoped is None or scoped[0] != self._version or scoped[1] != state.version:
            visible = {n: e for n, e in self._tools.items()
                       if not any(r.hides(n) for r in state.restrictions)}
            visible.update(state.tools)
            ordered = sorted(visible.items())
            scoped = state.schemas = (self._version, state.version,
                                      [e.schema for _, e in ordered])
        return list(scoped[2])

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
        return sorted(self._scopes, key=str)

    def execution_mode(self, call: ToolCall) -> ExecutionMode:
        """``PARALLEL`` only when the visible tool declares the call safe; never raises."""
        if not issubclass(type(call), ToolCall):  # isinstance would run call's own code
            return ExecutionMode.EXCLUSIVE
        return self._mode(call, call.scope)

    # ---- execution ------------------------------------------------------------------

    execute = _pipeline.execute

    async def run(self, calls: Iterable[ToolCall], *, max_parallel: int = 10,
                  signal: CancelSignal | None = None) -> Batch:
        """Run one model step's calls: in parallel where safe, results in model order.

        Argument errors (``max_parallel``, a non-``ToolCall``) raise before anything runs.
        """
        listed, scopes = bind_calls(calls, max_parallel, signal, None, bound=False)
        return await _scheduler.run(self, listed, scopes, max_parallel, signal)

    def stream(self, calls: Iterable[ToolCall], *, max_parallel: int = 10,
               signal: CancelSignal | None = None) -> CallStream:
        """Like ``run``, yielding each ``Committed`` as soon as it commits, in model order.

        Use it as ``async with contextlib.aclosing(registry.stream(calls)) as s``.
        """
        listed, scopes = bind_calls(calls, max_parallel, signal, None, bound=False)
        return _scheduler.stream(self, listed, scopes, max_parallel, signal)

    # ---- internals shared with Scope and the pipeline -------------------------------

    def _resolve(self, name: str, scope: Hashable | None) -> Entry | None:
        if self._coded and name == RUN_CODE:
            return None if self.presentation(scope) == "native" else self._transport(scope)
        if scope is None:
            return self._tools.get(name)
        state = self._scopes.get(scope)
        if state is None:
            return self._tools.get(name)
        entry = state.tools.get(name)
        if entry is not None:
            return entry
        entry = self._tools.get(name)
        if entry is not None and state.restrictions:
            for restriction in state.restrictions:
                if restriction.hides(name):
                    return None
        return entry

    def _mode(self, call: ToolCall, scope: Hashable | None) -> ExecutionMode:
        return self._classify(call, scope)[0]

    def _classify(self, call: ToolCall, scope: Hashable | None) -> tuple[ExecutionMode, Any]:
        """The call's mode, and the argument snapshot taken for it (``None`` if none was)."""
        arguments = None
        try:
            if self._coded and self._refuses(call, scope):
                return _EXCLUSIVE, None
            entry = self._resolve(call.name, scope)
            if entry is None:
                return _EXCLUSIVE, None
            safe = entry.tool.concurrency_safe
            if safe is False:
                return _EXCLUSIVE, None
            arguments = snapshot_json(call.arguments)
            if safe is True:
                return _PARALLEL, arguments
            if not callable(safe):
                return _EXCLUSIVE, arguments
            verdict = safe(arguments)
        except Exception:
            return _EXCLUSIVE, arguments
        mode = _PARALLEL if verdict is True else _EXCLUSIVE
        return mode, arguments

    def _guards_for(self, scope: Hashable | None) -> tuple[_Registration, ...]:
        if scope is None:
            return self._guards
        state = self._scopes.get(scope)
        if state is None or not state.guards:
            return self._guards
        return self._guards + state.guards

    def _acquire(self, key: Hashable) -> _ScopeState:
        """The scope's layer, made if need be, held until a matching ``_release``."""
        state = self._scopes.get(key)
        if state is None:
            state = self._scopes[key] = _ScopeState()
        state.refs += 1
        return state

    def _release(self, key: Hashable, state: _ScopeState) -> None:
        state.refs -= 1
        if state.refs == 0 and self._scopes.get(key) is state:
            del self._scopes[key]

    def _register(self, tool: Tool, scope: Hashable | None) -> Disposer:
        if isinstance(tool, Tool) and tool.name == RUN_CODE:
            raise ValueError(RESERVED)  # the first check after the type check
        entry = Entry.build(tool)  # every check but the duplicate one
        name = tool.name
        if scope is None:
            layer = self._tools
            if name in layer:
                raise ValueError(
                    f'tool "{name}" is already registered (for a per-scope variant, '
                    "register it through registry.scope(key) instead)"
                )
            state = None
        else:
            state = self._scopes.get(scope)
            if state is not None and name in state.tools:
                raise ValueError(f'tool "{name}" is already registered in this scope')
            state = self._acquire(scope)
            layer = state.tools
            state.version += 1
        layer[name] = entry

        def remove() -> None:
            if layer.get(name) is entry:
                del layer[name]
                if state is not None:
                    state.version += 1
            if state is not None:
                self._release(scope, state)

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
        unknown = [n for n in dict.fromkeys([*(allowed or ()), *denied]) if n not in self._tools]
        if unknown:
            known = ", ".join(sorted(self._tools)) or "(none)"
            quoted = ", ".join(f'"{n}"' for n in unknown)
            noun = "tool" if len(unknown) == 1 else "tools"
            raise ValueError(
                f"restrict() names unknown global {noun} {quoted}; known global tools: {known}"
            )
        restriction = _Restriction(None if allowed is None else frozenset(allowed),
                                   frozenset(denied))
        state = self._acquire(key)
        state.restrictions = (*state.restrictions, restriction)
        state.version += 1

        def lift() -> None:
            if restriction in state.restrictions:
                state.restrictions = tuple(r for r in state.restrictions if r is not restriction)
                state.version += 1
            self._release(key, state)

        return self._commit_change(lift)

    # ---- code mode (code-mode.md) -----------------------------------------------------

    def _present(self, key: Hashable, mode: Any, settings: Any) -> Disposer:
        """``Scope.present_as``: declare how this scope presents its tools."""
        mode = check_mode(mode)
        if settings is not None:
            _check_settings(settings)
        if mode != "native":
            require_code_extra()
        state = self._scopes.get(key)
        if state is not None and state.presenting and state.presenting[0].mode != mode:
            raise conflict(mode, state.presenting[0].mode)
        state = self._acquire(key)
        declaration = _Presentation(mode, settings)
        state.presenting = (*state.presenting, declaration)
        state.version += 1
        self._recount()

        def lift() -> None:
            if declaration in state.presenting:
                state.presenting = tuple(p for p in state.presenting if p is not declaration)
                state.version += 1
            self._release(key, state)
            self._recount()

        return self._commit_change(lift)

    def _recount(self) -> None:
        self._coded_scopes = sum(
            1 for s in self._scopes.values() if s.presenting and s.presenting[0].mode != "native")
        self._coded = self._presentation != "native" or self._coded_scopes > 0

    def _refuses(self, call: ToolCall, scope: Hashable | None) -> bool:
        """The collapse: a model-direct call of a native tool where only run_code is offered."""
        return call.parent is None and call.name != RUN_CODE and (
            self.presentation(scope) == "code")

    def _code_settings(self, scope: Hashable | None) -> CodeSettings:
        """The settings of ``scope``'s programs: its declaration's, the registry's, defaults."""
        state = self._scopes.get(scope) if scope is not None else None
        if state is not None:
            for declaration in state.presenting:
                if declaration.settings is not None:
                    return declaration.settings
        if self._code is not None:
            return self._code
        from .code._settings import CodeSettings

        return CodeSettings()

    def _transport(self, scope: Hashable | None) -> Entry:
        """``run_code`` for ``scope``: rebuilt only when the tools it sees change."""
        state = self._scopes.get(scope) if scope is not None else None
        key = scope if state is not None else None
        entries = tuple(e for e in (self._visible_entry(s.name, scope)
                                    for s in self._visible_schemas(scope)) if e is not None)
        cached = self._transports.get(key)
        if cached is not None and len(cached[0]) == len(entries) and all(
                a is b for a, b in zip(cached[0], entries, strict=True)):
            return cached[1]
        from .code._transport import build_transport

        entry = Entry.build(build_transport(self, entries))
        self._transports[key] = (entries, entry)
        if len(self._transports) > 2 * len(self._scopes) + 8:  # forget closed scopes
            for stale in [k for k in self._transports if k is not None and k not in self._scopes]:
                del self._transports[stale]
        return entry

    def _visible_entry(self, name: str, scope: Hashable | None) -> Entry | None:
        state = self._scopes.get(scope) if scope is not None else None
        if state is not None and name in state.tools:
            return state.tools[name]
        return self._tools.get(name)

    async def _sandbox(self) -> SandboxPool:
        """The registry's sandbox pool, started at the first program."""
        pool = self._pool
        if pool is None:
            from .code._runtime import SandboxPool

            pool = self._pool = SandboxPool()
        await pool.start()
        return pool

    async def aclose(self) -> None:
        """Close the sandbox pool: wait for running programs to be cancelled and their
        workers to exit. The registry can still run native calls afterwards."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def __aenter__(self) -> ToolRegistry:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _add_guard(self, guard: Guard, key: Hashable | None) -> Disposer:
        if not callable(guard):
            raise TypeError(f"guard() takes a callable, got {type(guard).__name__}")
        marker = _Registration(guard)
        if key is None:
            self._guards = (*self._guards, marker)

            def remove_global() -> None:
                self._guards = tuple(g for g in self._guards if g is not marker)

            return Disposer(remove_global)
        state = self._acquire(key)
        state.guards = (*state.guards, marker)

        def remove_scoped() -> None:
            state.guards = tuple(g for g in state.guards if g is not marker)
            self._release(key, state)

        return Disposer(remove_scoped)

    def _commit_change(self, undo: Callable[[], None]) -> Disposer:
        """Announce a change just made; roll it back if a listener refuses it."""
        self._notify(rollback=undo)

        def dispose() -> None:
            undo()
            self._notify()

        return Disposer(dispose)

    def _notify(self, rollback: Callable[[], None] | None = None) -> None:
        self._version += 1
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
        self._version += 1
        for listener in tuple(self._listeners):
            try:
                listener()
            except Exception as exc:
                self.logger.warning("change listener failed during rollback: %s", exc)


def _check_settings(settings: Any) -> None:
    from .code._settings import CodeSettings

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
