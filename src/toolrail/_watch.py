"""Awaiting a tool body (or an approver) in the calling task while watching signals.

A task per call would cost more than the rest of the pipeline together, so an
``"interrupt"`` body is awaited in the task that runs the call, through ``watched``: a
small trampoline that passes every step of the body up to the task and back. That
position lets it do two things asyncio alone does not:

* **interrupt**: when a watched signal fires, it cancels the future the body is
  waiting on (or throws ``CancelledError`` in at the body's next step), so the body
  sees a cancellation without the task itself being cancelled;
* **notice outside cancellation**: a ``CancelledError`` that the task delivers while it
  is being cancelled (``Task.cancelling()``) may be someone cancelling the task; the
  body signal fires *before* the body sees it, and once the body has settled the
  pipeline re-raises it if the task is still being cancelled (``Watch.stands``), even
  when the body swallowed it.

``wait_out`` is the other way to await: for work that cannot be interrupted (a worker
thread, a cooperative body in a child task), it waits to the end and then re-raises
the cancellation.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ._cancel import CancelSignal

if TYPE_CHECKING:
    from ._execution import RunContext

__all__ = ["Watch", "report_callback_error", "resume", "wait_out", "watched"]

T = TypeVar("T")


class Watch:
    """Fires when a followed signal does (or ``fire`` is called); see ``watched``.

    Firing, and a cancellation of the task from outside, also fire the body signal of
    ``context`` (when there is one). One is made per body invocation (only once the
    body waits, on the hot path), so its rarely changed state starts as class
    attributes and only what changes is stored on the instance.
    """

    fired = False
    timed_out = False
    delivered = False  # a CancelledError we caused has reached the awaited code
    external = False  # a cancellation of the task reached the body ...
    certain = False  # ... and it cannot be one the body's own scopes take back
    waiting: asyncio.Future[Any] | None = None
    timer: asyncio.TimerHandle | None = None  # the tool's timeout, when it has one
    _followed: tuple[tuple[CancelSignal, int], ...] = ()

    def __init__(self, context: RunContext | None = None) -> None:
        self.context = context
        if context is not None:
            context._hand_over()  # this watch fires its body signal from now on
        # The task's cancellation count as the watch starts: what a cancellation the
        # body's own scopes ask for, and take back, is counted against.
        task = self.task = asyncio.current_task()
        self.baseline = task.cancelling() if task is not None else 0

    def follow(self, signal: CancelSignal) -> None:
        """Fire when ``signal`` fires (at once if it already has)."""
        if signal.cancelled:
            # Nobody's cancel() to raise from: a raising callback of the body signal is
            # reported, and the body goes on to be interrupted.
            _reporting(self.fire, signal.reason or "cancelled")
            return
        key = signal._subscribe(lambda: self.fire(signal.reason or "cancelled"))
        self._followed = (*self._followed, (signal, key))

    def fire(self, reason: str) -> None:
        if self.fired:
            return
        self.fired = True
        waiting = self.waiting
        if waiting is not None and not self.delivered and waiting.cancel():
            self.delivered = True  # the task wakes with CancelledError at the awaited point
        if self.context is not None:
            # Last: the body's own signal callbacks run here, and one may raise (out of
            # the cancel() that fired the followed signal, or to the loop for a timer).
            self.context._cancel_body(reason)

    def expire(self) -> None:
        """The tool's timeout: fire, and remember that the clock did it."""
        if not self.fired:
            self.timed_out = True
            self.fire("timeout")

    def arrived(self) -> None:
        """A ``CancelledError`` the task threw in at the body's wait: whose is it?

        One that came with a new cancellation request of the task may be outside's or
        the body's own scope's (``stands`` tells, once the body has settled); one that
        came with none was requested before the watch began, unless this watch caused
        it. Either way the body signal fires before the body sees it.
        """
        task = self.task
        count = task.cancelling() if task is not None else 0
        if count > self.baseline:
            self.cancelled_from_outside(certain=False)
        elif count and not self.delivered:
            self.cancelled_from_outside()

    def cancelled_from_outside(self, certain: bool = True) -> None:
        """The task was cancelled while the body waited: fire the body signal, before the
        body sees the cancellation. A raising callback of it is reported, never raised
        here (the body still has to be interrupted and awaited)."""
        self.external = True
        if certain:
            self.certain = True
        if self.context is not None:
            _reporting(self.context._cancel_body, "cancelled")

    def stands(self) -> bool:
        """Whether a cancellation of the task reached the body and still stands now the
        body has settled: then it came from outside, and the caller re-raises it.

        A cancellation the body's own ``asyncio.timeout``, ``TaskGroup`` or anyio cancel
        scope asked for is taken back by them (``Task.uncancel()``) before they hand the
        body its ``TimeoutError`` or exception group: the body's outcome is then its own.
        """
        if not self.external:
            return False
        task = self.task
        return self.certain or (task is not None and task.cancelling() > self.baseline)

    def stop(self) -> None:
        if self._followed:
            for signal, key in self._followed:
                signal._unsubscribe(key)
            self._followed = ()


def _reporting(fn: Callable[[str], None], reason: str) -> None:
    """``fn(reason)``; an exception from it goes to the event loop's exception handler."""
    try:
        fn(reason)
    except Exception as exc:
        report_callback_error(exc)


def report_callback_error(exc: Exception) -> None:
    """Hand a body-signal callback's exception to the loop: nobody can receive it."""
    asyncio.get_running_loop().call_exception_handler({
        "message": "a callback on a tool's body signal raised",
        "exception": exc,
    })


@types.coroutine
def watched(awaitable: Awaitable[T], watch: Watch) -> Generator[Any, Any, T]:
    """Await ``awaitable`` step by step in this task, interrupting it when ``watch`` fires."""
    steps = awaitable.__await__()
    try:
        if watch.fired and not watch.delivered:
            watch.delivered = True
            yielded = steps.throw(asyncio.CancelledError())
        else:
            yielded = steps.send(None)
    except StopIteration as stop:
        return cast(T, stop.value)
    return cast(T, (yield from resume(steps, yielded, watch)))


@types.coroutine
def resume(steps: Generator[Any, Any, Any], yielded: Any,
           watch: Watch) -> Generator[Any, Any, Any]:
    """Go on awaiting ``steps``, which has just yielded ``yielded``, as ``watched`` does.

    The caller may take a body's first step itself and watch only a body that waits.
    """
    while True:
        if isinstance(yielded, asyncio.Future):
            if watch.fired and not watch.delivered and yielded.cancel():
                watch.delivered = True  # the task wakes with CancelledError at this point
            watch.waiting = yielded
        value: Any = None
        error: BaseException | None = None
        try:
            value = yield yielded
        except GeneratorExit:
            steps.close()
            raise
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                watch.arrived()
            error = exc
        finally:
            if watch.waiting is not None:
                watch.waiting = None
        if error is None and watch.fired and not watch.delivered:
            watch.delivered = True
            error = asyncio.CancelledError()
        try:
            yielded = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value


async def wait_out(future: asyncio.Future[T], on_cancel: Callable[[], None]) -> T:
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
