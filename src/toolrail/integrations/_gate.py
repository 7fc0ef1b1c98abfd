"""Exclusive calls run alone under the frameworks that start a step's calls at once.

The OpenAI Agents SDK and LangGraph's ``ToolNode`` start every call of one model
response together. toolrail's scheduler lets parallel-safe calls overlap and runs an
exclusive call alone; a ``Gate`` does the same for the calls of one step, in the order
they reach it (the order the framework starts them, which is the model's): parallel-safe
calls share it, an exclusive call waits for every call that came before it and holds it
until it is done, and every later call waits behind it — a writer's lock, first come
first served, so a writer is never starved by readers that came after it.

A step is named by a key the framework gives each call (``gated``'s caller finds it).
The table of gates holds only gates with a call inside or waiting: the last call out
removes its gate, so nothing outlives the step. A call made from inside a gated call (a
sub-agent run in a tool's body) starts a batch of its own, as a body calling
``registry.run`` does: its key names the gate its caller holds, so it never waits for it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from contextvars import ContextVar
from typing import Any, TypeVar

__all__ = ["Gate", "gated", "open_gates"]

T = TypeVar("T")


class Gate:
    """Many parallel-safe calls at once, or one exclusive call; first come, first served."""

    __slots__ = ("_alone", "_shared", "_waiting", "anchor", "key")

    def __init__(self, key: Hashable, anchor: object) -> None:
        self.key = key
        self.anchor = anchor  # keeps alive what an id() in the key names
        self._shared = 0  # parallel-safe calls inside
        self._alone = False  # an exclusive call is inside
        self._waiting: deque[tuple[bool, asyncio.Future[None]]] = deque()

    @property
    def idle(self) -> bool:
        return not (self._shared or self._alone or self._waiting)

    def try_enter(self, exclusive: bool) -> bool:
        """Go in at once if nothing is in the way (the common case: no await)."""
        if self._waiting or not self._free(exclusive):
            return False
        self._take(exclusive)
        return True

    async def wait(self, exclusive: bool) -> None:
        """Wait for a turn behind the calls that came first, then go in."""
        waiter = asyncio.get_running_loop().create_future()
        entry = (exclusive, waiter)
        self._waiting.append(entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.leave(exclusive)  # let in, then cancelled before it could run
            else:
                self._waiting.remove(entry)
                self._admit()  # it may have held back calls that can go in now
            raise

    def leave(self, exclusive: bool) -> None:
        if exclusive:
            self._alone = False
        else:
            self._shared -= 1
        self._admit()

    def _free(self, exclusive: bool) -> bool:
        return not self._alone and (not exclusive or self._shared == 0)

    def _take(self, exclusive: bool) -> None:
        if exclusive:
            self._alone = True
        else:
            self._shared += 1

    def _admit(self) -> None:
        """Let in the waiting calls at the head of the queue that may go in now."""
        waiting = self._waiting
        while waiting and self._free(waiting[0][0]):
            exclusive, waiter = waiting.popleft()
            self._take(exclusive)
            waiter.set_result(None)


# The gates of the steps with calls in flight. Module-level because a step belongs to
# the framework, not to a toolrail object: two tool lists in one step share its gate.
# It holds nothing once the step's calls are done (the last one out removes its gate).
_GATES: dict[Hashable, Gate] = {}
# The gate the current call holds (a task started inside the call copies it).
_HELD: ContextVar[Gate | None] = ContextVar("toolrail_integration_gate", default=None)


async def gated(key: Hashable, anchor: object, exclusive: bool,
                run: Callable[[], Awaitable[T]]) -> T:
    """``await run()`` inside the gate of the step ``key`` names (alone if ``exclusive``)."""
    held = _HELD.get()
    if held is not None:
        key = (key, held)  # a batch started inside a gated call is a batch of its own
    gate = _GATES.get(key)
    if gate is None:
        gate = _GATES[key] = Gate(key, anchor)
    if not gate.try_enter(exclusive):
        try:
            await gate.wait(exclusive)
        except BaseException:
            _drop_if_idle(gate)
            raise
    token = _HELD.set(gate)
    try:
        return await run()
    finally:
        _HELD.reset(token)
        gate.leave(exclusive)
        _drop_if_idle(gate)


def _drop_if_idle(gate: Gate) -> None:
    if gate.idle and _GATES.get(gate.key) is gate:
        del _GATES[gate.key]


def open_gates() -> dict[Hashable, Any]:
    """The gates with calls in flight (for tests: empty once every step is done)."""
    return dict(_GATES)
