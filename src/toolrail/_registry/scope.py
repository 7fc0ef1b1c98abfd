"""``Scope``: a handle on one agent's layer of a ``ToolRegistry``.

Handles for equal keys share the layer; each handle owns what was registered through
it, and closing the handle disposes that, newest first.

The one import circle of the package stays here, on purpose and for types only: a
scope is a view its registry makes (``registry.scope(key)`` builds it) and every
change through it is the registry's own change (versions, listeners, the duplicate
check), so ``Scope`` calls back into the ``ToolRegistry`` it names under
``TYPE_CHECKING``. Splitting the registry's change methods out to break it would
scatter one object's invariants over two modules.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from .._core.chains import AROUND, POST, PRE, PROGRESS, RESULT, Stage
from .._model.cancel import CancelSignal
from .._model.disposer import Disposer
from .._model.tool import ExecutionMode, Tool, ToolCall, ToolSchema
from .._scheduling import scheduler as _scheduler
from .._scheduling.scheduler import Batch, CallStream, bind_calls

if TYPE_CHECKING:
    from .._model.hooks import Guard
    from .._model.results import ToolResult
    from ..code._settings import CodeSettings
    from .registry import ToolRegistry

__all__ = ["Scope"]

F = TypeVar("F", bound=Callable[..., Any])


class Scope:
    """A handle for one scope: registrations through it are owned by it and closed with it.

    >>> registry = ToolRegistry()
    >>> with registry.scope("agent-1") as scope:
    ...     scope.schemas()
    []
    """

    def __init__(self, registry: ToolRegistry, key: Hashable) -> None:
        self._registry = registry
        self._core = registry._core
        self.key = key
        self._owned: dict[int, Disposer] = {}
        self._next = 0

    def __repr__(self) -> str:
        return f"<Scope {self.key!r}>"

    def _own(self, disposer: Disposer) -> Disposer:
        owned, slot = self._owned, self._next
        self._next += 1

        def undo() -> None:
            owned.pop(slot, None)
            disposer()

        handle = owned[slot] = Disposer(undo)
        return handle

    def register(self, tool: Tool) -> Disposer:
        """Register ``tool`` in this scope's layer (it shadows a global of the same name)."""
        return self._own(self._registry._register(tool, self.key))

    @overload
    def tool(self, fn: F, /) -> F: ...

    @overload
    def tool(self, fn: None = None, /, **options: Any) -> Callable[[F], F]: ...

    def tool(self, fn: F | None = None, /, **options: Any) -> F | Callable[[F], F]:
        """Decorator: ``register(tr.tool(fn, **options))`` in this scope; returns ``fn``."""
        from .._typed.tool import registering  # typed tools (pydantic) load at first use

        return registering(self.register, fn, options)

    def restrict(self, *, allow: Iterable[str] | None = None,
                 deny: Iterable[str] | None = None) -> Disposer:
        """Mask global tools for this scope: ``allow`` keeps only, ``deny`` removes."""
        return self._own(self._registry._restrict(self.key, allow, deny))

    def present_as(self, mode: Literal["native", "code", "both"], *,
                   settings: CodeSettings | None = None) -> Disposer:
        """Present this scope's tools natively, as ``run_code`` only, or both (code-mode.md)."""
        return self._own(self._registry._present(self.key, mode, settings))

    def guard(self, guard: Guard) -> Disposer:
        """Add a guard for this scope's calls, run after every global guard."""
        return self._own(self._registry._add_guard(guard, self.key))

    def pre_execute(self, m: Any, *, prepend: bool = False, all_scopes: bool = False) -> Disposer:
        """Add pre-execute middleware for this scope's calls (every call with ``all_scopes``)."""
        return self._add(PRE, m, prepend, all_scopes)

    def around_execute(self, m: Any, *, prepend: bool = False,
                       all_scopes: bool = False) -> Disposer:
        """Add around-execute middleware for this scope's calls."""
        return self._add(AROUND, m, prepend, all_scopes)

    def post_execute(self, m: Any, *, prepend: bool = False, all_scopes: bool = False) -> Disposer:
        """Add post-execute middleware for this scope's calls."""
        return self._add(POST, m, prepend, all_scopes)

    def on_result(self, o: Any, *, prepend: bool = False, all_scopes: bool = False) -> Disposer:
        """Add a result observer for this scope's calls."""
        return self._add(RESULT, o, prepend, all_scopes)

    def on_progress(self, listener: Any, *, prepend: bool = False,
                    all_scopes: bool = False) -> Disposer:
        """Add a listener of the progress this scope's calls report."""
        return self._add(PROGRESS, listener, prepend, all_scopes)

    def on_change(self, listener: Callable[[], None]) -> Disposer:
        """Call ``listener()`` after every registry change (not filtered by scope)."""
        return self._own(self._registry.on_change(listener))

    def _add(self, stage: Stage, fn: Any, prepend: bool, all_scopes: bool) -> Disposer:
        core = self._core
        if all_scopes:
            return self._own(core.chains.add(stage, fn, None, prepend))
        key = self.key
        state = core.acquire(key)
        try:
            added = core.chains.add(stage, fn, key, prepend)
        except BaseException:
            core.release(key, state)
            raise

        def remove() -> None:
            added()
            core.release(key, state)

        return self._own(Disposer(remove))

    # ---- views and execution bound to this scope ----------------------------------

    def get(self, name: str) -> Tool | None:
        """The tool this scope sees under ``name``."""
        return self._registry.get(name, self.key)

    def schemas(self) -> list[ToolSchema]:
        """The schemas this scope sees, sorted by name."""
        return self._registry.schemas(self.key)

    def execution_mode(self, call: ToolCall) -> ExecutionMode:
        """Classify ``call`` as this scope sees it; another scope's call is ``EXCLUSIVE``."""
        if not isinstance(call, ToolCall):
            return ExecutionMode.EXCLUSIVE
        try:
            if call.scope is not None and call.scope != self.key:
                return ExecutionMode.EXCLUSIVE
        except Exception:
            return ExecutionMode.EXCLUSIVE
        return self._core.classify(call, self.key)[0]

    async def execute(self, call: ToolCall) -> ToolResult:
        """Run ``call`` in this scope (``scope=None`` binds it here)."""
        return await self._registry.execute(self._bind(call))

    async def run(self, calls: Iterable[ToolCall], *, max_parallel: int = 10,
                  signal: CancelSignal | None = None) -> Batch:
        """``registry.run`` for this scope's calls (``scope=None`` binds them here)."""
        listed, scopes = bind_calls(calls, max_parallel, signal, self.key, bound=True)
        return await _scheduler.run(self._core, listed, scopes, max_parallel, signal)

    def stream(self, calls: Iterable[ToolCall], *, max_parallel: int = 10,
               signal: CancelSignal | None = None) -> CallStream:
        """``registry.stream`` for this scope's calls."""
        listed, scopes = bind_calls(calls, max_parallel, signal, self.key, bound=True)
        return _scheduler.stream(self._core, listed, scopes, max_parallel, signal)

    def _bind(self, call: ToolCall) -> ToolCall:
        """``call`` bound to this scope: the registry runs it as this scope's call."""
        if not isinstance(call, ToolCall):
            raise TypeError(f"execute() takes a ToolCall, got {type(call).__name__}")
        if call.scope is not None and call.scope != self.key:
            raise ValueError(
                f"call {call.call_id!r} names scope {call.scope!r}, not this scope {self.key!r}"
            )
        return call if call.scope is self.key else replace(call, scope=self.key)

    def close(self) -> None:
        """Dispose everything registered through this handle, newest first; idempotent."""
        first: Exception | None = None
        while self._owned:
            _, disposer = self._owned.popitem()
            try:
                disposer()
            except Exception as exc:
                first = first or exc
        if first is not None:
            raise first

    def __enter__(self) -> Scope:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
