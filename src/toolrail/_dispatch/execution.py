"""One call inside the pipeline: ``Execution`` and the body's ``RunContext``.

Every public attribute is a read-only property over a private slot, so building one
per call stays cheap. Around-execute middleware may replace ``signal`` (the pipeline
opens that window for the duration of the around chain); anywhere else assigning
raises ``AttributeError``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .._core.chains import PROGRESS, Chains, notify
from .._model.cancel import CancelController, CancelSignal
from .._model.lossless import MISSING, JsonValue, canonical_json, snapshot_json, type_name
from .._model.results import Content, ContextMessage, TextContent, is_content, only_content
from .progress import Progress, checked_progress

if TYPE_CHECKING:
    import logging

__all__ = ["Execution", "ExecutionToken", "Listeners", "RunContext"]


class Listeners(Protocol):
    """What a body's progress reports are delivered through: the registry's chains and
    logger (``Core`` is one; named here so that this module needs no registry)."""

    @property
    def chains(self) -> Chains: ...

    @property
    def logger(self) -> logging.Logger: ...


def deliver(core: Listeners, execution: Execution, report: Progress) -> None:
    """Run the listeners the call's scope sees now, containing their failures."""
    listeners = core.chains.for_call(PROGRESS, execution._scope)
    notify(core.logger, listeners, execution, report, "progress listener",
           "progress listeners must be synchronous")


class ExecutionToken:
    """An opaque correlation token, fresh per call; compared by identity only."""

    __slots__ = ("__weakref__",)

    def __repr__(self) -> str:
        return f"<ExecutionToken {id(self):#x}>"

    def __reduce__(self) -> Any:
        raise TypeError("ExecutionToken is never serialized")


class Execution:
    """One call as every middleware, guard and observer of it sees it."""

    __slots__ = ("_arguments", "_call_id", "_durable_id", "_idempotency_key", "_name",
                 "_parent", "_scope", "_signal", "_signal_writable", "_token")

    _durable_id: str  # set by a durable engine only (``durable_id``)
    _idempotency_key: str  # set by a durable engine (the ticket), or made on first read

    def __init__(
        self,
        token: ExecutionToken,
        call_id: str,
        name: str,
        arguments: JsonValue,
        scope: Hashable | None,
        parent: ExecutionToken | None,
        signal: CancelSignal,
    ) -> None:
        self._token = token
        self._call_id = call_id
        self._name = name
        self._arguments = arguments
        self._scope = scope
        self._parent = parent
        self._signal = signal
        self._signal_writable = False

    @property
    def token(self) -> ExecutionToken:
        """The call's correlation token, fresh per call."""
        return self._token

    @property
    def call_id(self) -> str:
        return self._call_id

    @property
    def name(self) -> str:
        return self._name

    @property
    def arguments(self) -> JsonValue:
        """The deep-frozen argument snapshot; ``tr.MISSING`` if the snapshot failed."""
        return self._arguments

    @property
    def scope(self) -> Hashable | None:
        return self._scope

    @property
    def parent(self) -> ExecutionToken | None:
        """The enclosing call's token, for nested calls."""
        return self._parent

    @property
    def durable_id(self) -> str | None:
        """``"<step_id>/<index>"`` for a call of a durable step (durable.md), the same in
        every process that runs it; ``None`` for a plain call. (Left unset on the hot
        path: a plain call pays nothing for it.)"""
        return getattr(self, "_durable_id", None)

    @property
    def idempotency_key(self) -> str:
        """A key for the call's side effects, the same every time this call runs: in a
        retry, in a rerun after a restart, in every process.

        Under a durable engine it is the call's ticket, ``"<name>:<step_id>/<index>"``
        (``<name>`` the engine's); otherwise the SHA-256 (hex) of
        ``json.dumps([call_id, tool_name, arguments], sort_keys=True,
        separators=(",", ":"))``, ``arguments`` as plain JSON (a call whose arguments
        failed the snapshot: ``[call_id, tool_name]``). Made on first read.
        """
        try:
            return self._idempotency_key  # a durable engine sets it with the durable id
        except AttributeError:
            pass
        key = self._idempotency_key = _call_key(self._call_id, self._name, self._arguments)
        return key

    @property
    def signal(self) -> CancelSignal:
        """The call's signal; around-execute middleware may replace it."""
        return self._signal

    @signal.setter
    def signal(self, value: CancelSignal) -> None:
        if not self._signal_writable:
            raise AttributeError(
                f"{type(self).__name__}.signal can only be replaced inside around-execute "
                "middleware"
            )
        if not issubclass(type(value), CancelSignal):
            raise TypeError(f"signal must be a CancelSignal, got {type_name(type(value))}")
        self._signal = value

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name!r} call_id={self._call_id!r}>"


class RunContext(Execution):
    """What a tool body receives: the execution's fields, the body signal, and three effects.

    ``defer_context``, ``conclude_turn`` and ``report_progress`` take effect only while
    this body invocation runs; they may be called from a worker thread.
    """

    __slots__ = ("_active", "_caller", "_concludes", "_controller", "_core", "_deferred",
                 "_execution", "_fired", "_followed", "_installed", "_loop")

    def __init__(self, execution: Execution, caller: CancelSignal | None = None,
                 core: Listeners | None = None,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._token = execution._token
        self._call_id = execution._call_id
        self._name = execution._name
        self._arguments = execution._arguments
        self._scope = execution._scope
        self._parent = execution._parent
        self._signal_writable = False
        self._execution = execution
        self._core = core
        # The loop a report from another thread is delivered on (the pipeline sets it).
        self._loop = loop
        self._active = True
        self._concludes = False
        self._deferred: list[ContextMessage] = []
        # The body signal is made on first use: most bodies never look at it.
        self._signal = None  # type: ignore[assignment]
        self._controller: CancelController | None = None
        self._fired: str | None = None
        # What the body signal follows (see ``signal``): the caller's signal, and the
        # one an around-execute middleware installed.
        self._installed = execution._signal
        self._caller = self._installed if caller is None else caller
        # Subscriptions made by ``_follow``; ``None`` once a ``Watch`` forwards instead.
        self._followed: tuple[tuple[CancelSignal, int], ...] | None = ()

    @property
    def signal(self) -> CancelSignal:
        """The body signal: fires on the caller's signal, a middleware's, the timeout, or
        a cancellation of the task running the call."""
        signal = self._signal
        if signal is None:
            controller = self._controller = CancelController()
            signal = self._signal = controller.signal
            if self._fired is not None:
                controller.cancel(self._fired)
            elif self._active and self._followed is not None:
                if _on_a_loop():
                    self._follow(self._caller)
                    if self._installed is not self._caller:
                        self._follow(self._installed)
                else:  # a worker thread: it may read signals, not subscribe to them
                    for source in (self._caller, self._installed):
                        if source.cancelled:
                            self._cancel_body(source.reason or "cancelled")
        return signal

    @signal.setter
    def signal(self, value: CancelSignal) -> None:
        raise AttributeError("RunContext.signal is read-only")

    # Read through: a durable engine sets these on the execution, not on its contexts.
    @property
    def durable_id(self) -> str | None:
        return self._execution.durable_id

    @property
    def idempotency_key(self) -> str:
        return self._execution.idempotency_key

    def _follow(self, source: CancelSignal) -> None:
        """Fire the body signal when ``source`` does, until the invocation settles.

        The pipeline's ``Watch`` does this once a body waits; this covers a body that
        reads its signal before its first wait.
        """
        key = source._subscribe(lambda: self._cancel_body(source.reason or "cancelled"))
        if key >= 0 and self._followed is not None:
            self._followed = (*self._followed, (source, key))

    def _hand_over(self) -> None:
        """A ``Watch`` now fires the body signal for the same sources: stop following."""
        self._unfollow()
        self._followed = None

    def _unfollow(self) -> None:
        if self._followed:
            for source, key in self._followed:
                source._unsubscribe(key)
            self._followed = ()

    def _cancel_body(self, reason: str) -> None:
        if self._fired is None:
            self._fired = reason
            if self._controller is not None:
                self._controller.cancel(reason)

    def defer_context(
        self,
        message: ContextMessage | str | Content | Sequence[Content],
        *,
        source: str | None = None,
        meta: Any = None,
    ) -> None:
        """Attach a context message to this call's result, for the model's next request.

        A ``str`` or content builds a ``ContextMessage`` whose ``source`` defaults to the
        tool's name. Ignored once the body has settled.
        """
        given: Any = message
        kind = type(given)  # by type: isinstance would run the message's own code
        if issubclass(kind, ContextMessage):
            built = given
        else:
            if issubclass(kind, str):
                content: tuple[Content, ...] = (TextContent(given),)
            elif is_content(given):
                content = (given,)
            elif only_content(given, Sequence, empty=True):
                content = tuple[Any, ...](given)
            else:
                raise TypeError(
                    "defer_context() takes a ContextMessage, a str, a Content or a sequence "
                    f"of Content, got {type_name(kind)}"
                )
            if source is not None and not issubclass(type(source), str):
                raise TypeError(f"source must be a str, got {type_name(type(source))}")
            built = ContextMessage(content, self.name if source is None else source,
                                   snapshot_json(meta))
        if self._active:
            self._deferred.append(built)

    def report_progress(self, progress: float, total: float | None = None,
                        message: str | None = None) -> None:
        """Tell the registry's ``on_progress`` listeners how far this call has got.

        ``progress`` and ``total`` are finite numbers (``total`` when known), ``message``
        a short text. Bad values raise ``TypeError``/``ValueError`` here. Ignored once the
        body has settled; never stored, never part of the result. From a worker thread
        the report is delivered on the event loop's thread.
        """
        report = checked_progress(progress, total, message)
        core = self._core
        if not self._active or core is None:
            return
        loop = self._loop
        if loop is not None and not _on_a_loop():
            loop.call_soon_threadsafe(self._deliver, core, report)
        else:
            deliver(core, self._execution, report)

    def _deliver(self, core: Listeners, report: Progress) -> None:
        if self._active:
            deliver(core, self._execution, report)

    def conclude_turn(self) -> None:
        """Mark this invocation's success as concluding the model's turn."""
        if self._active:
            self._concludes = True

    def _settle(self) -> None:
        """The invocation is over: its effects stop and its signal follows nothing more."""
        self._active = False
        if self._followed:  # ``_unfollow``, without its frame: every invocation settles
            self._unfollow()


def _call_key(call_id: str, name: str, arguments: object) -> str:
    """A plain call's ``idempotency_key``: a digest of what it is, stable across processes
    (``arguments`` is the snapshot, or ``MISSING``)."""
    payload = [call_id, name] if arguments is MISSING else [call_id, name, arguments]
    # json.dumps(payload, sort_keys=True, separators=(",", ":")), for ints of any length
    # and at any depth too
    text = canonical_json(payload, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _on_a_loop() -> bool:
    """Whether this thread runs an event loop (signals belong to the loop's thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
