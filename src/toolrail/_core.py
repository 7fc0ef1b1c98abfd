"""``Core``: everything a call reads of its registry, in one internal object.

The pipeline (``_pipeline``, ``_body``, ``_commit``), the scheduler and a body's
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

from ._chains import Chains
from ._decisions import Approver
from ._entry import Entry
from ._json import snapshot_json
from ._presentation import RUN_CODE, Mode
from ._tool import ExecutionMode, ToolCall

if TYPE_CHECKING:
    from ._registry import ToolRegistry
    from .code._settings import CodeSettings

__all__ = ["Core", "Registration", "ScopeState", "approving_with"]

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


@contextmanager
def approving_with(registry: ToolRegistry, approver: Approver) -> Iterator[None]:
    """Have the calls ``registry`` runs in this context ask ``approver`` (integrations)."""
    token = _APPROVER.set((registry._core, approver))
    try:
        yield
    finally:
        _APPROVER.reset(token)


class Core:
    """The layers, the chains, the guards, the approver and the logger of one registry."""

    __slots__ = ("_approver", "chains", "coded", "guards", "logger", "owner", "presentation",
                 "scopes", "tools")

    def __init__(self, owner: ToolRegistry, approver: Approver | None,
                 logger: logging.Logger, presentation: Mode) -> None:
        self.owner = owner  # for code mode's transport, built per scope by the registry
        self._approver = approver
        self.logger = logger
        self.presentation = presentation  # the registry's own mode
        # Whether any view may present code: until then the hot path never looks.
        self.coded = presentation != "native"
        self.tools: dict[str, Entry] = {}
        self.scopes: dict[Hashable, ScopeState] = {}
        self.guards: tuple[Registration, ...] = ()
        self.chains = Chains()

    @property
    def approver(self) -> Approver | None:
        """The registry's approver, or ``approving_with``'s in that context."""
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
            return None if self.mode_of(scope) == "native" else self.owner._transport(scope)
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
