"""The step ordering a framework's own fan-out leaves out: exclusive calls run alone.

The OpenAI Agents SDK and LangGraph's ``ToolNode`` start every call of a step at once.
toolrail's scheduler would let parallel-safe calls overlap and give an exclusive call
the batch to itself; a ``Gate`` does the same for the calls of one tool list, in the
order they reach it: parallel-safe calls share it, an exclusive call waits for every
call that came before it and holds it until it is done, and later calls wait for it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["Gate"]


class Gate:
    """First come, first served: many parallel-safe calls at once, or one exclusive one."""

    __slots__ = ("_alone", "_shared", "_waiting")

    def __init__(self) -> None:
        self._shared = 0  # parallel-safe calls inside
        self._alone = False  # an exclusive call is inside
        self._waiting: deque[tuple[bool, asyncio.Future[None]]] = deque()

    @asynccontextmanager
    async def enter(self, exclusive: bool) -> AsyncIterator[None]:
        """Hold the gate for one call (alone when ``exclusive``) until the block ends."""
        if self._waiting or not self._free(exclusive):
            waiter = asyncio.get_running_loop().create_future()
            entry = (exclusive, waiter)
            self._waiting.append(entry)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._leave(exclusive)  # let in, then cancelled before it could run
                else:
                    self._waiting.remove(entry)
                    self._admit()  # it may have held back calls that can go in now
                raise
        else:
            self._take(exclusive)
        try:
            yield
        finally:
            self._leave(exclusive)

    def _free(self, exclusive: bool) -> bool:
        return not self._alone and (not exclusive or self._shared == 0)

    def _take(self, exclusive: bool) -> None:
        if exclusive:
            self._alone = True
        else:
            self._shared += 1

    def _leave(self, exclusive: bool) -> None:
        if exclusive:
            self._alone = False
        else:
            self._shared -= 1
        self._admit()

    def _admit(self) -> None:
        """Let in the waiting calls at the head of the queue that may go in now."""
        waiting = self._waiting
        while waiting and self._free(waiting[0][0]):
            exclusive, waiter = waiting.popleft()
            self._take(exclusive)
            waiter.set_result(None)
