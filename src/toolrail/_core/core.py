"""``Core``: everything a call reads of its registry, in one internal object.

The pipeline (``_dispatch``: ``pipeline``, ``body``, ``commit``), the scheduler and a body's
``RunContext`` take a ``Core``, never the ``ToolRegistry``: the layers and their
resolver, the chains, the guards, the approver and the logger. ``ToolRegistry`` owns
one and is the only code that changes it (registration, ``restrict``, ``present_as``,
the guards); ``Scope`` changes it through the registry.

One resolver serves every view: a scope sees its own layer first, then the global
layer minus what its restrictions mask. ``resolve`` and ``classify`` are O(1) in the
number of tools and scopes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final

from .._model.decisions import Approver
from .._model.lossless import snapshot_json
from .._model.tool import ExecutionMode, ToolCall, ToolSchema
from .chains import Chains
from .entry import Entry
from .presentation import RUN_CODE, Mode

if TYPE_CHECKING:
    from ..code._settings import CodeSettings

__all__ = ["Core", "Registration", "ScopeState"]

# Read per call by the scheduler's classification: module globals cost less than members.
_PARALLEL: Final = ExecutionMode.PARALLEL
_EXCLUSIVE: Final = ExecutionMode.EXCLUSIVE


class Registration:
    """One registration of a callable: its own identity, even when the callable is
    registered twice, so that each disposer removes exactly its own."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __repr__(self) -> str:
        return repr(self.fn)


class Restriction:
    """One ``restrict`` of a scope: ``allow`` keeps only, ``deny`` removes."""

    __slots__ = ("allow", "deny")

    def __init__(self, allow: frozenset[str] | None, deny: frozenset[str]) -> None:
        self.allow = allow
        self.deny = deny

    def hides(self, name: str) -> bool:
        return (self.allow is not None and name not in self.allow) or name in self.deny


class Presentation:
    """One ``present_as`` declaration (its own identity: each disposer lifts its own)."""

    __slots__ = ("mode", "settings")

    def __init__(self, mode: Mode, settings: CodeSettings | None) -> None:
        self.mode = mode
        self.settings = settings


class ScopeState:
    """One scope's layer. It exists only while something is registered in it."""

    __slots__ = ("guards", "presenting", "refs", "restrictions", "schemas", "tools", "version")

    def __init__(self) -> None:
        self.tools: dict[str, Entry] = {}
        self.restrictions: tuple[Restriction, ...] = ()
        self.guards: tuple[Registration, ...] = ()
        self.presenting: tuple[Presentation, ...] = ()  # active declarations, oldest first
        self.refs = 0
        self.version = 0
        self.schemas: tuple[int, int, list[Any]] | None = None


_APPROVER: ContextVar[tuple[Core, Approver] | None] = ContextVar(
    "toolrail_approver", default=None)


class Core:
    """The layers, the chains, the guards, the approver and the logger of one registry."""

    __slots__ = ("_approver", "_make_transport", "_schemas", "_transports", "chains", "coded",
                 "guards", "logger", "presentation", "scopes", "tools", "version")

    def __init__(self, approver: Approver | None, logger: logging.Logger, presentation: Mode,
                 make_transport: Callable[[tuple[Entry, ...]], Entry]) -> None:
        self._approver = approver
        self.logger = logger
        self.presentation = presentation  # the registry's own mode
        # Whether any view may present code: until then the hot path never looks.
        self.coded = presentation != "native"
        self.tools: dict[str, Entry] = {}
        self.scopes: dict[Hashable, ScopeState] = {}
        self.guards: tuple[Registration, ...] = ()
        self.chains = Chains()
        self.version = 0  # counts every change of tools, restrictions and presentations
        self._schemas: tuple[int, list[ToolSchema]] | None = None
        # ``run_code`` for a scope (code mode), built by ``make_transport`` from the tools
        # that scope sees, and kept while they stay the same (see ``transport``).
        self._make_transport = make_transport
        self._transports: dict[Hashable, tuple[int, int, tuple[Entry, ...], Entry]] = {}

    @contextmanager
    def approving(self, approver: Approver) -> Iterator[None]:
        """Have the calls this core runs in this context ask ``approver`` (an
        integration's hook: ``approving_with``)."""
        token = _APPROVER.set((self, approver))
        try:
            yield
        finally:
            _APPROVER.reset(token)

    @property
    def approver(self) -> Approver | None:
        """The registry's approver, or ``approving``'s in that context."""
        override = _APPROVER.get()
        if override is not None and override[0] is self:
            return override[1]
        return self._approver

    def mode_of(self, scope: Hashable | None) -> Mode:
        """The presentation ``scope`` sees: its active ``present_as``, else the registry's."""
        state = self.scopes.get(scope) if scope is not None else None
        if state is not None and state.presenting:
            return state.presenting[0].mode
        return self.presentation

    def resolve(self, name: str, scope: Hashable | None) -> Entry | None:
        """The entry ``scope`` sees under ``name``: its own, else an unmasked global."""
        if self.coded and name == RUN_CODE:
            return None if self.mode_of(scope) == "native" else self.transport(scope)
        if scope is None:
            return self.tools.get(name)
        state = self.scopes.get(scope)
        if state is None:
            return self.tools.get(name)
        entry = state.tools.get(name)
        if entry is not None:
            return entry
        entry = self.tools.get(name)
        if entry is not None and state.restrictions:
            for restriction in state.restrictions:
                if restriction.hides(name):
                    return None
        return entry

    def visible_schemas(self, scope: Hashable | None) -> list[ToolSchema]:
        """The schemas of the tools ``scope`` sees (its own, and the unmasked globals), in
        name order; a new list, cached while nothing changed."""
        core = self
        state = core.scopes.get(scope) if scope is not None else None
        if state is None:
            cached = self._schemas
            if cached is None or cached[0] != self.version:
                ordered = sorted(core.tools.items())
                cached = self._schemas = (self.version, [e.schema for _, e in ordered])
            return list(cached[1])
        scoped = state.schemas
        if scoped is None or scoped[0] != self.version or scoped[1] != state.version:
            visible = {n: e for n, e in core.tools.items()
                       if not any(r.hides(n) for r in state.restrictions)}
            visible.update(state.tools)
            ordered = sorted(visible.items())
            scoped = state.schemas = (self.version, state.version,
                                      [e.schema for _, e in ordered])
        return list(scoped[2])

    def transport(self, scope: Hashable | None) -> Entry:
        """``run_code`` for ``scope``: the same entry (and SDK text) while the tools it
        calls are the same ones; looked up in O(1) while nothing changed."""
        state = self.scopes.get(scope) if scope is not None else None
        key = scope if state is not None else None
        version = -1 if state is None else state.version
        cached = self._transports.get(key)
        if cached is not None and cached[0] == self.version and cached[1] == version:
            return cached[3]
        entries = tuple(e for e in (self.visible_entry(s.name, scope)
                                    for s in self.visible_schemas(scope)) if e is not None)
        if cached is not None and len(cached[2]) == len(entries) and all(
                a is b for a, b in zip(cached[2], entries, strict=True)):
            entry = cached[3]
        else:
            entry = self._make_transport(entries)
        self._transports[key] = (self.version, version, entries, entry)
        scopes = self.scopes
        if len(self._transports) > 2 * len(scopes) + 8:  # forget closed scopes
            for stale in [k for k in self._transports if k is not None and k not in scopes]:
                del self._transports[stale]
        return entry

    def visible_entry(self, name: str, scope: Hashable | None) -> Entry | None:
        """The entry behind a visible schema: the scope's own, else the global one."""
        core = self
        state = core.scopes.get(scope) if scope is not None else None
        if state is not None and name in state.tools:
            return state.tools[name]
        return core.tools.get(name)

    def refuses(self, call: ToolCall, scope: Hashable | None) -> bool:
        """The collapse: a model-direct call of a native tool where only run_code is offered."""
        return call.parent is None and call.name != RUN_CODE and self.mode_of(scope) == "code"

    def classify(self, call: ToolCall, scope: Hashable | None) -> tuple[ExecutionMode, Any]:
        """The call's mode, and the argument snapshot taken for it (``None`` if none was).

        ``PARALLEL`` only when the visible tool declares the call safe; never raises.
        """
        arguments = None
        try:
            if self.coded and self.refuses(call, scope):
                return _EXCLUSIVE, None
            entry = self.resolve(call.name, scope)
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

    def guards_for(self, scope: Hashable | None) -> tuple[Registration, ...]:
        """The guards of a call in ``scope``: every global one, then the scope's own."""
        if scope is None:
            return self.guards
        state = self.scopes.get(scope)
        if state is None or not state.guards:
            return self.guards
        return self.guards + state.guards

    def acquire(self, key: Hashable) -> ScopeState:
        """The scope's layer, made if need be, held until a matching ``release``."""
        state = self.scopes.get(key)
        if state is None:
            state = self.scopes[key] = ScopeState()
        state.refs += 1
        return state

    def release(self, key: Hashable, state: ScopeState) -> None:
        state.refs -= 1
        if state.refs == 0 and self.scopes.get(key) is state:
            del self.scopes[key]
