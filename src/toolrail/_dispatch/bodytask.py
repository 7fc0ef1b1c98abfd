"""``BodyTask``: what ``asyncio.current_task()`` is while a step of a tool body runs.

A body is awaited in the task that runs the call (see ``watch``), so without help the
cancellations its own code starts and ends would be requests to cancel that task: an
``asyncio.timeout`` that expires, a ``TaskGroup`` whose child fails, an anyio cancel
scope (httpx races connection attempts inside one). While such a ``CancelledError``
passes it cannot be told from someone cancelling the task, and its scope takes it back
(``Task.uncancel()``) only as it exits, after the body's handlers ran.

So each body invocation gets a ``BodyTask`` of its own, made current for every step of
the body (and only then). The body's scopes bind to it: their ``cancel()`` counts here
and interrupts the body at its wait, exactly as ``Task.cancel()`` would, but never
touches the task running the call. A rise in *that* task's ``cancelling()`` is then
certainly a cancellation from outside the body. ``cancelling()`` adds the task's own
count, so a scope still sees an outside cancellation as not its own; everything else
(``get_name``, ``add_done_callback`` ...) is the task's.
"""

from __future__ import annotations

import asyncio
import sys
from asyncio import tasks
from typing import Any

__all__ = ["BodyTask", "current_tasks"]


class BodyTask:
    """Stands in for ``task`` while a body's step runs; see the module docstring."""

    # One is made per body invocation: the task in a slot, and the rarely changed state
    # as class attributes (an instance dict is made only if one changes).
    __slots__ = ("__dict__", "__weakref__", "_done", "_task")

    _task: asyncio.Task[Any]
    _done: bool  # the body has settled: a late cancel() must not reach the task
    _requests = 0  # cancel() calls not yet taken back by uncancel()
    _pending: tuple[str | None] | None = None  # a cancel() to deliver at the next wait
    _delivered = False  # a CancelledError this task asked for has reached the body

    @classmethod
    def of(cls, task: asyncio.Task[Any]) -> BodyTask:
        body = cls()  # no __init__ frame: one is made per body invocation
        body._task = task
        body._done = False
        return body

    def cancel(self, msg: str | None = None) -> bool:
        if self._done or self._task.done():
            return False
        self._requests += 1
        waiter = self._task._fut_waiter  # type: ignore[attr-defined]
        if waiter is not None and waiter.cancel(msg=msg):
            self._delivered = True  # the task wakes with CancelledError at the body's wait
        else:
            self._pending = (msg,)  # delivered at the body's next wait, as Task does
        return True

    def cancelling(self) -> int:
        return self._requests + self._task.cancelling()

    def uncancel(self) -> int:
        if self._requests:
            self._requests -= 1
        else:  # the body takes back a cancellation of the task itself
            self._task.uncancel()
        return self.cancelling()

    @property
    def _must_cancel(self) -> bool:
        return self._pending is not None

    @property
    def _fut_waiter(self) -> Any:
        return self._task._fut_waiter  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._task, name)

    def __repr__(self) -> str:
        return f"<BodyTask of {self._task!r}>"


class _SwappedCurrentTasks:
    """Python 3.14+ keeps the current task in the thread state, not in a dict: the same
    two operations, through the call eager tasks use to swap it."""

    __slots__ = ()

    def get(self, loop: asyncio.AbstractEventLoop) -> Any:
        return asyncio.current_task(loop)

    def __setitem__(self, loop: asyncio.AbstractEventLoop, task: Any) -> None:
        tasks._swap_current_task(loop, task)  # type: ignore[attr-defined]


# Asyncio's current task by loop, as ``asyncio.current_task()`` reads it: ``get(loop)``
# (``None`` outside a task) and ``[loop] = task`` to make ``task`` (a ``BodyTask``, or the
# task again) current. Python 3.11-3.13 read a dict (the C ``_asyncio`` module's, when
# it is loaded): its own operations cost no call frame, and one body step pays for three.
current_tasks: Any = (tasks._current_tasks  # type: ignore[attr-defined]
                      if sys.version_info < (3, 14) else _SwappedCurrentTasks())
