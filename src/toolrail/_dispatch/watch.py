"""Awaiting a tool body (or an approver) in the calling task while watching signals.

A task per call would cost more than the rest of the pipeline together, so an
``"interrupt"`` body is awaited in the task that runs the call, through ``watched``: a
small trampoline that passes every step of the body up to the task and back. That
position lets it do two things asyncio alone does not:

* **interrupt**: when a watched signal fires, it cancels the future the body is
  waiting on (or throws ``CancelledError`` in at the body's next step), so the body
  sees a cancellation without the task itself being cancelled;
* **notice outside cancellation**: every step of the body runs with a ``BodyTask`` as
  the current task, so the body's own ``asyncio.timeout``, ``TaskGroup`` and anyio
  cancel scopes cancel that, never the task running the call. A ``CancelledError`` that
  arrives while *that* task is being cancelled (``Task.cancelling()``) is someone
  cancelling it: the body signal fires *before* the body sees it, and once the body
  has settled the pipeline re-raises it if the task is still being cancelled
  (``Watch.stands``), even when the body swallowed it. A cancellation the body starts
  and ends inside itself never fires the body signal.

``wait_out`` is the other way to await: for work that cannot be interrupted (a worker
thread, a cooperative body in a child task), it waits to the end and then re-raises
the cancellation.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .._model.cancel import CancelSignal
from .bodytask import BodyTask, current_tasks

if TYPE_CHECKING:
    from .execution import RunContext

__all__ = ["Watch", "body_task", "report_callback_error", "resume", "wait_out", "watched"]

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
    interrupts = False  # it interrupts an awaitable a sync body returned
    external = False  # a cancellation of the task reached the body ...
    early = False  # ... one requested before the watch began
    waiting: asyncio.Future[Any] | None = None
    loop: asyncio.AbstractEventLoop | None = None
    timer: asyncio.TimerHandle | None = None  # the tool's timeout, when it has one
    _followed: tuple[tuple[CancelSignal, int], ...] = ()

    def __init__(self, context: RunContext | None = None, body: BodyTask | None = None) -> None:
        self.context = context
        if context is not None:
            context._hand_over()  # this watch fires its body signal from now on
            # A body that waits may report progress from another thread (to_thread):
            # it is delivered on this loop.
            context._loop = asyncio.get_running_loop()
        if body is None:
            body = body_task()
        self.body = body
        # The task's cancellation count as the watch starts: a rise is outside's.
        task = self.task = body._task if body is not None else None
        self.baseline = task.cancelling() if task is not None else 0
        if body is not None:
            self.loop = task.get_loop()  # type: ignore[union-attr]

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

        One that came with a new cancellation request of the task is outside's (the
        body's own scopes cancel its ``BodyTask``); one the ``BodyTask`` asked for is the
        body's own; one that came with neither was requested before the watch began,
        unless this watch caused it. An outside one fires the body signal before the
        body sees it.
        """
        task = self.task
        count = task.cancelling() if task is not None else 0
        body = self.body
        if count > self.baseline:
            self.cancelled_from_outside()
        elif body is not None and body._delivered:
            body._delivered = False
        elif count and not self.delivered:
            self.early = True
            self.cancelled_from_outside()

    def cancelled_from_outside(self) -> None:
        """The task was cancelled while the body waited: fire the body signal, before the
        body sees the cancellation. A raising callback of it is reported, never raised
        here (the body still has to be interrupted and awaited)."""
        self.external = True
        if self.context is not None:
            _reporting(self.context._cancel_body, "cancelled")

    def stands(self) -> bool:
        """Whether a cancellation of the task reached the body and still stands now the
        body has settled: then the caller re-raises it.

        A body that swallowed it and took it back itself (``uncancel()``) gets its own
        outcome, as asyncio means by ``uncancel()``.
        """
        if not self.external:
            return False
        task = self.task
        return self.early or (task is not None and task.cancelling() > self.baseline)

    def stop(self) -> None:
        if self.body is not None:
            self.body._done = True
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


def body_task() -> BodyTask | None:
    """A ``BodyTask`` for the task running now (``None`` outside a task)."""
    task = asyncio.current_task()
    return BodyTask.of(task) if task is not None else None


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
    body = watch.body
    if body is not None:
        current_tasks[watch.loop] = body
    try:
        if watch.fired and not watch.delivered:
            watch.delivered = True
            yielded = steps.throw(asyncio.CancelledError())
        else:
            yielded = steps.send(None)
    except StopIteration as stop:
        return cast(T, stop.value)
    finally:
        if body is not None:
            current_tasks[watch.loop] = watch.task
    return cast(T, (yield from resume(steps, yielded, watch)))


@types.coroutine
def resume(steps: Generator[Any, Any, Any], yielded: Any,
           watch: Watch) -> Generator[Any, Any, Any]:
    """Go on awaiting ``steps``, which has just yielded ``yielded``, as ``watched`` does.

    The caller may take a body's first step itself and watch only a body that waits.
    Every step runs with the watch's ``BodyTask`` as the current task.
    """
    body = watch.body
    task, loop = (watch.task, watch.loop) if body is not None else (None, None)
    while True:
        if issubclass(type(yielded), asyncio.Future):  # by type: a yielded value may be hostile
            if watch.fired and not watch.delivered and yielded.cancel():
                watch.delivered = True  # the task wakes with CancelledError at this point
            elif (body is not None and body._pending is not None
                  and yielded.cancel(msg=body._pending[0])):
                body._pending = None  # the body's own scope asked: as Task.cancel() does
                body._delivered = True
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
        if error is None:
            if watch.fired and not watch.delivered:
                watch.delivered = True
                error = asyncio.CancelledError()
            elif body is not None and body._pending is not None:
                message = body._pending[0]
                body._pending = None
                error = asyncio.CancelledError() if message is None else asyncio.CancelledError(
                    message)
        if body is not None:
            current_tasks[loop] = body
        try:
            yielded = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value
        finally:
            if body is not None:
                current_tasks[loop] = task


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
