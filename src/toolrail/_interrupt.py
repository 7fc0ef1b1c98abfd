"""Interrupting awaits in the current task when a signal fires, and waiting them out.

A tool body (mode ``"interrupt"``) and a pending approver are awaited *in the task
that runs the call*, not in a task of their own: a task per call would cost more than
the rest of the pipeline together. To interrupt them, ``Interrupt`` cancels the
current task while it is armed and, when disarmed, ``uncancel``s it again — the
technique ``asyncio.timeout`` uses. A cancellation requested by anyone else stays
visible in ``Task.cancelling()`` and is re-raised by the pipeline.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from ._cancel import CancelSignal

__all__ = ["Interrupt", "external_cancel", "wait_out"]

T = TypeVar("T")


class Interrupt:
    """Cancels the current task if ``signal`` fires while armed (context manager)."""

    __slots__ = ("_cancelled", "_dispose", "_task", "armed", "fired")

    def __init__(self, signal: CancelSignal) -> None:
        task = asyncio.current_task()
        assert task is not None, "toolrail runs calls inside an asyncio task"
        self._task = task
        self._cancelled = False
        self.armed = True
        self.fired = False
        self._dispose = signal.add_callback(self._fire)

    def _fire(self) -> None:
        if not self.armed or self.fired:
            return
        self.fired = True
        if asyncio.current_task() is self._task:
            # Fired from inside the guarded code itself (it cancelled its own signal):
            # cancelling a running task would hit our own next await, so wait until
            # the task is suspended in the guarded await.
            self._task.get_loop().call_soon(self._deliver)
        else:
            self._deliver()

    def _deliver(self) -> None:
        if self.armed and not self._cancelled:
            self._cancelled = self._task.cancel()

    def disarm(self) -> bool:
        """Stop watching; undo our own cancellation request. Returns whether it fired."""
        self.armed = False
        self._dispose()
        if self._cancelled:
            self._cancelled = False
            self._task.uncancel()
        return self.fired


def external_cancel() -> bool:
    """Whether someone other than toolrail asked to cancel the current task."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def wait_out(future: asyncio.Future[T], on_cancel: Any) -> T:
    """Await ``future`` to the end even if this task is cancelled meanwhile.

    On the first cancellation ``on_cancel()`` runs (to signal the work to stop); once
    the future is done the cancellation is re-raised.
    """
    cancelled = False
    while not future.done():
        try:
            await asyncio.wait((future,))
        except asyncio.CancelledError:
            if not cancelled:
                cancelled = True
                on_cancel()
    if cancelled:
        if not future.cancelled():
            future.exception()  # retrieved: the caller's cancellation wins
        raise asyncio.CancelledError
    return future.result()
