"""Cooperative cancellation: ``CancelController`` (the owner) and ``CancelSignal``.

A signal fires at most once and keeps the first reason. Callbacks run synchronously,
in the order they were added, in the thread that calls ``cancel()``; every callback
runs, and the first exception one raises propagates from ``cancel()`` afterwards.
Signals belong to the event loop thread, like the registry; a worker thread may read
``cancelled`` and ``reason``.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

from .disposer import Disposer

__all__ = ["CancelController", "CancelSignal"]

_NOOP = Disposer(None)


class CancelSignal:
    """The observer's side of a cancellation: read it, wait for it, or be called back."""

    __slots__ = ("__weakref__", "_callbacks", "_next_id", "cancelled", "reason")

    def __init__(self) -> None:
        self.cancelled = False
        self.reason: str | None = None
        self._callbacks: dict[int, Callable[[], None]] | None = {}
        self._next_id = 0

    def __repr__(self) -> str:
        state = f"cancelled reason={self.reason!r}" if self.cancelled else "pending"
        return f"<CancelSignal {state}>"

    def add_callback(self, fn: Callable[[], None]) -> Disposer:
        """Call ``fn()`` when the signal fires, or at once if it already has.

        Returns a disposer that removes the callback (so long-lived signals keep
        nothing for finished work).
        """
        callbacks = self._callbacks
        if callbacks is None:
            if self.cancelled:
                fn()
            return _NOOP
        key = self._next_id
        self._next_id = key + 1
        callbacks[key] = fn
        return Disposer(lambda: callbacks.pop(key, None) and None)

    def _subscribe(self, fn: Callable[[], None]) -> int:
        """``add_callback`` without a Disposer, for the registry's per-call watches.

        Returns the key for ``_unsubscribe``, or -1 when ``fn`` already ran.
        """
        callbacks = self._callbacks
        if callbacks is None:
            if self.cancelled:
                fn()
            return -1
        key = self._next_id
        self._next_id = key + 1
        callbacks[key] = fn
        return key

    def _unsubscribe(self, key: int) -> None:
        callbacks = self._callbacks
        if callbacks is not None:
            callbacks.pop(key, None)
            if not callbacks:
                self._callbacks = {}  # dicts never shrink: drop a peak-sized empty table

    async def wait(self) -> None:
        """Return once the signal has fired."""
        if self.cancelled:
            return
        waiter = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not waiter.done():
                waiter.set_result(None)

        with self.add_callback(wake):
            await waiter

    def _fire(self, reason: str) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        self.reason = reason
        callbacks, self._callbacks = self._callbacks or {}, None
        first: Exception | None = None
        for key in list(callbacks):
            fn = callbacks.pop(key, None)
            if fn is None:
                continue  # disposed by a callback that ran before it
            try:
                fn()
            except Exception as exc:  # every callback runs; the first failure surfaces
                first = first or exc
        if first is not None:
            raise first

    @staticmethod
    def never() -> CancelSignal:
        """A signal that never fires (and keeps no callbacks)."""
        return _NEVER

    @staticmethod
    def any(*signals: CancelSignal) -> CancelSignal:
        """A signal that fires, with the same reason, as soon as any input fires.

        The derived signal holds its inputs' callbacks only while it is alive.
        """
        return _linked(signals)


class _NeverSignal(CancelSignal):
    __slots__ = ()

    def __init__(self) -> None:
        super().__init__()
        self._callbacks = None

    def add_callback(self, fn: Callable[[], None]) -> Disposer:
        return _NOOP

    def _fire(self, reason: str) -> None:
        raise TypeError("the never-cancelled signal cannot be cancelled")

    def __repr__(self) -> str:
        return "<CancelSignal never>"


_NEVER = _NeverSignal()


class CancelController:
    """The owner's side: ``cancel()`` fires ``signal``."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = CancelSignal()

    def cancel(self, reason: str = "cancelled") -> None:
        """Fire the signal; idempotent, the first reason stays."""
        self.signal._fire(reason)

    def __repr__(self) -> str:
        return f"<CancelController {self.signal!r}>"


def _linked(signals: tuple[CancelSignal, ...]) -> CancelSignal:
    for signal in signals:
        if not isinstance(signal, CancelSignal):
            raise TypeError(f"CancelSignal.any() takes CancelSignals, got {type(signal).__name__}")
    derived = CancelSignal()
    for signal in signals:
        if signal.cancelled:
            derived._fire(signal.reason or "cancelled")
            return derived
    live = [s for s in signals if s is not _NEVER]
    if not live:
        return _NEVER
    ref = weakref.ref(derived)

    def forward(source: CancelSignal) -> Callable[[], None]:
        def fire() -> None:
            target = ref()
            if target is not None:
                target._fire(source.reason or "cancelled")

        return fire

    disposers = [s.add_callback(forward(s)) for s in live]
    # Unhook from the inputs once the derived signal fires or is collected, so a
    # long-lived input signal does not accumulate callbacks of finished work.
    finalizer = weakref.finalize(derived, _dispose_all, disposers)
    derived.add_callback(finalizer)
    return derived


def _dispose_all(disposers: list[Disposer]) -> None:
    for dispose in disposers:
        dispose()


def link(*signals: CancelSignal) -> tuple[CancelSignal, Callable[[], None]]:
    """Like ``CancelSignal.any`` with explicit disposal, for the registry's own use.

    Returns the combined signal and a function that unhooks it from its inputs.
    """
    live = tuple(s for s in signals if s is not _NEVER)
    if len(live) == 1:
        return live[0], _nothing
    if not live:
        return _NEVER, _nothing
    controller = CancelController()
    for signal in live:
        if signal.cancelled:
            controller.cancel(signal.reason or "cancelled")
            return controller.signal, _nothing
    disposers = [s.add_callback(_relay(s, controller)) for s in live]
    return controller.signal, lambda: _dispose_all(disposers)


def _relay(source: CancelSignal, target: CancelController) -> Callable[[], None]:
    return lambda: target.cancel(source.reason or "cancelled")


def _nothing() -> None:
    pass
