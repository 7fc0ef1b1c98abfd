"""Running one model step's calls: ``run`` and ``stream`` (scheduler.md).

One driver per batch walks the calls in model order. Everything ordered runs in the
driver itself — classification, prepare (snapshot, pre-execute, approval, guards) and
commit (post-execute, finalize, materialize, observers) — one call at a time. Only
dispatch (around-execute and the body) runs in tasks of its own, at most
``max_parallel`` at once; the driver owns them and never returns or raises while one
still runs.

The driver is an async generator of ``Committed`` items: ``run`` drains it, ``stream``
hands it to the caller. Closing it early cancels the batch, waits for the calls in
flight, and commits every remaining call without yielding.

**Why the dispatch tasks are owned by hand, not by a ``TaskGroup``.** ``stream`` hands
the driver to the caller as an async generator, and a task group cannot be held open
across ``yield``: the caller's code between two items would run inside the group's
scope, and a cancellation meant for the caller would land in the group (PEP 789). So
the driver keeps its tasks in ``_Slot.task`` and gives the guarantees a group would:
every way out (exhausted, closed early, cancelled, a scheduler failure) goes through
``_wind_down`` or ``_stop_in_flight``, which cancels the batch or the tasks and waits
for every one of them before the driver returns or raises; a task's exception is
retrieved there, and the first failure is the one raised. One driver serves a model
step (a fixed list of calls) and a code-mode program (``open``: calls are submitted
while it runs, ``submit`` / ``close_feed``).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncGenerator, Callable, Coroutine, Hashable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from .._dispatch.commit import awaits_post, finish, post_execute
from .._dispatch.pipeline import begin, decide, decide_now, lookup, run_dispatch
from .._dispatch.state import READY, CallState
from .._dispatch.watch import report_callback_error
from .._model.cancel import CancelController, CancelSignal, link
from .._model.errors import ABORTED_BEFORE_DISPATCH
from .._model.results import ContextMessage, ToolResult
from .._model.tool import ExecutionMode, ToolCall

if TYPE_CHECKING:
    from .._core.core import Core

__all__ = ["PROGRAM_DRIVERS", "Batch", "CallStream", "Committed", "Driver", "Feed",
           "program_driver", "run", "stream"]

# A durable step sets this while one of its run_code calls dispatches: the factory of the
# program's driver, which records and replays the nested calls (``toolrail.durable``).
PROGRAM_DRIVERS: ContextVar[Callable[[Core, int], Driver] | None] = ContextVar(
    "toolrail_program_drivers", default=None)


def program_driver(core: Core, max_parallel: int) -> Driver:
    """The open driver of a code-mode program's nested calls (a durable one in a durable
    step)."""
    factory = PROGRAM_DRIVERS.get()
    if factory is None:
        return Driver(core, [], [], max_parallel, None, Feed.OPEN)
    return factory(core, max_parallel)


class Journal(Protocol):
    """What a durable step gives its driver (``toolrail.durable``)."""

    async def commit(self, index: int, state: CallState) -> None:
        """Stages 11-13 of call ``index``: set ``state.result``, and record it once the
        observers saw it."""


_PARALLEL = ExecutionMode.PARALLEL  # read per call: a module global costs less than an enum member


@dataclass(frozen=True, slots=True)
class Batch:
    """Every call's final result, in the calls' order."""

    results: tuple[ToolResult, ...]
    contexts: tuple[ContextMessage, ...]
    cancelled: bool
    concludes_turn: bool


@dataclass(frozen=True, slots=True)
class Committed:
    """One call's committed result, as ``stream`` yields it."""

    index: int
    call: ToolCall
    result: ToolResult
    started: bool


def bind_calls(calls: Iterable[ToolCall], max_parallel: int, signal: CancelSignal | None,
               scope: Hashable | None, bound: bool) -> tuple[list[ToolCall], list[Hashable]]:
    """Check ``run``/``stream`` arguments before anything runs; returns calls and scopes."""
    if type(max_parallel) is not int or max_parallel < 1:
        raise ValueError("max_parallel must be a positive integer")
    if signal is not None and not isinstance(signal, CancelSignal):
        raise TypeError(f"signal must be a CancelSignal or None, got {type(signal).__name__}")
    listed = list(calls)
    scopes: list[Hashable] = []
    for call in listed:
        if not isinstance(call, ToolCall):
            raise TypeError(f"run() and stream() take ToolCalls, got {type(call).__name__}")
        if not bound:
            scopes.append(call.scope)
        elif call.scope is None or call.scope == scope:
            scopes.append(scope)
        else:
            raise ValueError(
                f"call {call.call_id!r} names scope {call.scope!r}, not this scope {scope!r}"
            )
    return listed, scopes


async def run(core: Core, calls: list[ToolCall], scopes: list[Hashable],
              max_parallel: int, signal: CancelSignal | None) -> Batch:
    driver = Driver(core, calls, scopes, max_parallel, signal)
    await driver.run()
    return driver.final()


def stream(core: Core, calls: list[ToolCall], scopes: list[Hashable],
           max_parallel: int, signal: CancelSignal | None) -> CallStream:
    return CallStream(Driver(core, calls, scopes, max_parallel, signal))


class CallStream:
    """An async iterator of ``Committed``, in model order, with ``aclose()``.

    Use it as ``async with contextlib.aclosing(registry.stream(calls)) as s``; leaving
    early cancels the batch like its signal would, and ``aclose()`` returns only once
    every call has its result and notification. The batch starts at the first
    ``__anext__()``. Once every call has committed (the stream is exhausted, or closed
    after it started), ``batch`` is the ``Batch`` that ``run`` would have returned.
    """

    __slots__ = ("_agen", "_driver")

    def __init__(self, driver: Driver) -> None:
        self._driver = driver
        self._agen = driver.committed()

    @property
    def batch(self) -> Batch:
        """The batch's ``Batch``, once every call has committed; else ``RuntimeError``."""
        driver = self._driver
        if driver.cursor == len(driver.calls) and driver.life is ENDED:
            return driver.final()
        if driver.life is ENDED:
            raise RuntimeError(
                "CallStream.batch: the batch did not finish (the scheduler failed or the "
                "task iterating the stream was cancelled), so there is no Batch"
            )
        if driver.life is NOT_BEGUN and driver.closed:
            raise RuntimeError(
                "CallStream.batch: the stream was closed before its batch started; "
                "nothing ran, so there is no Batch"
            )
        raise RuntimeError(
            "CallStream.batch is available once the stream is exhausted or closed"
        )

    def __aiter__(self) -> CallStream:
        return self

    async def __anext__(self) -> Committed:
        return await self._agen.__anext__()

    async def aclose(self) -> None:
        """Stop the batch: no further call starts; return once every call is committed."""
        self._driver.closed = True
        await self._agen.aclose()

    async def __aenter__(self) -> CallStream:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()


class _Slot:
    """One call of the batch between its stages."""

    __slots__ = ("index", "settled", "state", "task", "unlink")

    def __init__(self, index: int, state: CallState, unlink: Callable[[], None]) -> None:
        self.index = index
        self.state = state
        self.unlink = unlink
        self.task: asyncio.Task[None] | None = None
        self.settled = False


class Life(enum.Enum):
    """Where a driver is in its life."""

    NOT_BEGUN = "not begun"  # a stream before its first ``__anext__()``
    RUNNING = "running"
    ENDED = "ended"  # stopped: every call committed, or not (a failure, a cancellation)


NOT_BEGUN, RUNNING, ENDED = Life.NOT_BEGUN, Life.RUNNING, Life.ENDED


class Feed(enum.Enum):
    """Where a driver's calls come from."""

    FIXED = "fixed"  # a model step: the calls it was given
    OPEN = "open"  # a code-mode program: calls are submitted while it runs
    CLOSED = "closed"  # was open: no more calls (unstarted ones were dropped)


class Group(enum.Enum):
    """The group of calls dispatched together, in model order."""

    ALONE = "alone"  # an exclusive call: the next call waits for it to commit
    GROWING = "growing"  # parallel-safe calls: the next one joins while the pool has room
    SHUT = "shut"  # an exclusive call came: it heads the next group


# Read per step: module globals cost less than enum members.
FIXED, OPEN, CLOSED = Feed.FIXED, Feed.OPEN, Feed.CLOSED
ALONE, GROWING, SHUT = Group.ALONE, Group.GROWING, Group.SHUT


class Driver:
    """One batch: a state machine that ``_next()`` advances to the next commit.

    ``run`` (a model step, and a code-mode program's open feed: ``OPEN``, ``submit``,
    ``close_feed``) and ``committed`` (``stream``) are its two ways to be driven; ``cancel``
    cancels the batch from its owner. Everything else is the state machine's own.
    """

    def __init__(self, core: Core, calls: list[ToolCall], scopes: list[Hashable],
                 max_parallel: int, signal: CancelSignal | None,
                 feed: Feed = Feed.FIXED) -> None:
        self.core = core
        self.calls = calls
        self.scopes = scopes
        self.max_parallel = max_parallel
        self.user_signal = signal
        self.feed = feed
        self.batch = CancelController()  # fires on the caller's signal or an early close
        self.slots: dict[int, _Slot] = {}  # started, not yet committed
        self.started = 0  # calls[:started] have started
        self.cursor = 0  # calls[:cursor] have committed
        self.dispatching = 0
        self.group = ALONE
        self.snapshot: object = None  # the arguments of call ``started``, as classified
        self.wake = asyncio.Event()
        self.failure: BaseException | None = None
        self.cancelling = False  # the driver is cancelling its dispatch tasks
        self.results: list[ToolResult] = []  # calls[:cursor]'s final results
        self.life = NOT_BEGUN
        self.closed = False  # a stream's ``aclose()`` was called
        self.awaited = -1  # the index of an open feed's call its submitter waits for
        # A durable step's record (``toolrail.durable``): it commits each call (the result
        # recorded after the observers saw it); ``None`` for a plain batch.
        self.journal: Journal | None = None
        self.dispatcher = run_dispatch  # stages 8-9; a durable step marks the body first

    def submit(self, call: ToolCall, scope: Hashable | None, *, awaited: bool = False) -> int:
        """Append a call to an open driver (a program's nested call); its index.

        ``awaited``: the submitter submits nothing more until this call commits (a
        program blocked on it), so the call may be alone like a fixed batch's last one.
        """
        if self.feed is not OPEN:
            raise RuntimeError("no more calls can be submitted to this driver")
        self.calls.append(call)
        self.scopes.append(scope)
        index = len(self.calls) - 1
        self.awaited = index if awaited else -1
        self.wake.set()
        return index

    def close_feed(self) -> None:
        """No more calls: those submitted but not started are dropped without a trace."""
        if self.feed is OPEN:
            self.feed = CLOSED
            del self.calls[self.started:]
            del self.scopes[self.started:]
            self.wake.set()

    def final(self) -> Batch:
        """The ``Batch`` of a batch whose calls have all committed."""
        results = self.results
        contexts = tuple(c for result in results for c in result.contexts)
        concludes = any(r.concludes_turn for r in results)
        return Batch(tuple(results), contexts, self.batch.signal.cancelled, concludes)

    async def run(self, on_commit: Callable[[int, ToolResult], None] | None = None) -> None:
        """Commit every call, in order; ``on_commit(index, result)`` is told of each (a
        program's driver answers its sandbox there). ``run`` and a program use this."""
        unhook = self._hook()
        try:
            while (slot := await self._next()) is not None:
                result = self._committed(slot)
                if on_commit is not None:
                    on_commit(slot.index, result)
        except BaseException as exc:
            await self._wind_down(exc)
            raise
        finally:
            self.life = ENDED
            unhook()

    async def committed(self) -> AsyncGenerator[Committed, None]:
        """Each call as it commits, in order (``stream``); closing early cancels the rest."""
        unhook = self._hook()
        try:
            while (slot := await self._next()) is not None:
                result = self._committed(slot)
                info = result.error
                started = info is None or info.code != ABORTED_BEFORE_DISPATCH
                yield Committed(slot.index, self.calls[slot.index], result, started)
        except GeneratorExit:
            # Left early: cancel the batch and commit everything, without yielding.
            self.cancel("stream closed")
            try:
                while (slot := await self._next()) is not None:
                    self._committed(slot)
            except BaseException:
                await self._stop_in_flight(cancel_tasks=True)
                raise
            raise
        except BaseException as exc:
            await self._wind_down(exc)
            raise
        finally:
            self.life = ENDED
            unhook()

    def cancel(self, reason: str) -> None:
        """Cancel the batch from inside, or from its owner (a program that stops): every
        started call sees its signal, and no further call starts.

        Every callback of the batch signal runs (the bodies' signals included); one
        that raises has nobody's ``cancel()`` to raise from, so its exception goes to
        the event loop's exception handler.
        """
        try:
            self.batch.cancel(reason)
        except Exception as exc:
            report_callback_error(exc)

    async def _wind_down(self, exc: BaseException) -> None:
        """The driver stopped on ``exc``: wait for what is in flight (the caller re-raises).

        A cancellation of the task running the batch cancels the dispatch tasks too;
        any other exception is a failure of the scheduler (a ``CancelledError`` a
        dispatch let through included): the batch is cancelled (the bodies see their
        signal) and waited for.
        """
        if isinstance(exc, asyncio.CancelledError) and exc is not self.failure:
            await self._stop_in_flight(cancel_tasks=True)
        else:
            self.cancel("the scheduler failed")
            await self._stop_in_flight(cancel_tasks=False)

    def _hook(self) -> Callable[[], None]:
        """Start: follow the caller's signal and wake on the batch's; returns the undo."""
        self.life = RUNNING
        user = self.user_signal
        unhook = user.add_callback(lambda: self.batch.cancel(user.reason or "cancelled")) \
            if user is not None else None
        wake = self.batch.signal.add_callback(self.wake.set)

        def undo() -> None:
            wake()
            if unhook is not None:
                unhook()

        return undo

    async def _next(self) -> _Slot | None:
        """Work until the next call commits (its result is in its state); ``None`` once
        every call has. Each step awaits only what it must: a call with no middleware
        to await is prepared and committed without a coroutine of its own."""
        while self.cursor < len(self.calls) or self.feed is OPEN:
            if self.failure is not None:
                raise self.failure
            slot = self.slots.get(self.cursor)
            if slot is not None and slot.settled:  # stages 10-13 of the call at the cursor
                state = slot.state
                if awaits_post(self.core, state):
                    await self._post_execute(state)
                if self.journal is None:
                    state.result = finish(self.core, state)
                else:
                    await self.journal.commit(slot.index, state)
                return slot
            if self.started < len(self.calls) and self._may_start():
                pending = self._start()
                if pending is not None:
                    await pending
            else:  # nothing to do until a dispatch settles (or a program submits a call)
                await self._settlement()
        return None

    async def _post_execute(self, state: CallState) -> None:
        await post_execute(self.core, state)
        if self.failure is not None:  # it failed meanwhile: notify nothing more
            raise self.failure

    def _start(self) -> Coroutine[Any, Any, None] | None:
        """Prepare call ``started`` (stages 1-7), then dispatch it; what is left to await,
        if anything."""
        slot = self._prepare(self.started)
        if slot.state.phase == READY and not decide_now(self.core, slot.state):
            return self._decide_then_dispatch(slot)
        return self._dispatch_prepared(slot)

    async def _decide_then_dispatch(self, slot: _Slot) -> None:
        await decide(self.core, slot.state)
        if self.failure is not None:  # it failed meanwhile: dispatch nothing
            raise self.failure
        pending = self._dispatch_prepared(slot)
        if pending is not None:
            await pending

    def _dispatch_prepared(self, slot: _Slot) -> Coroutine[Any, Any, None] | None:
        """Dispatch a prepared call: right here when it is alone by construction (the
        coroutine to await), else in a pool slot."""
        state = slot.state
        if state.phase != READY:
            slot.settled = True  # denied, failed or never started: no pool slot
            return None
        if self._alone(slot):
            lookup(self.core, state)
            return self._dispatch_here(slot)
        self._launch(slot)
        return None

    async def _dispatch_here(self, slot: _Slot) -> None:
        try:
            await self.dispatcher(self.core, slot.state)
        finally:
            slot.settled = True

    def _alone(self, slot: _Slot) -> bool:
        """Whether nothing else can need the driver while ``slot`` dispatches, so that it
        needs no task: every earlier call committed, and it is an exclusive call, the
        last call, or in a pool of one. (A settled call still waiting to commit would
        need the driver: then the call gets a task.)"""
        return self.cursor == slot.index and (
            self.group is not GROWING or self.max_parallel == 1
            or (self.started == len(self.calls)
                and (self.feed is not OPEN or self.awaited == slot.index)))

    def _may_start(self) -> bool:
        """Whether call ``started`` may start now; classifies it when that is asked."""
        if self.batch.signal.cancelled:
            return True  # it starts only to be committed as ABORTED_BEFORE_DISPATCH
        if self.started == self.cursor:  # a group boundary: everything before committed
            self.group = GROWING if self._mode(self.started) is _PARALLEL else ALONE
            return True
        if self.group is not GROWING or self.dispatching >= self.max_parallel:
            return False
        if self._mode(self.started) is _PARALLEL:
            return True
        self.group = SHUT  # the group stops growing; this call heads the next one
        return False

    def _mode(self, index: int) -> ExecutionMode:
        mode, self.snapshot = self.core.classify(self.calls[index], self.scopes[index])
        return mode

    def _prepare(self, index: int) -> _Slot:
        """Start call ``index``: stages 1-3 (the caller then finishes prepare)."""
        call = self.calls[index]
        batch = self.batch.signal
        signal, unlink = (batch, _unlinked) if call.signal is None else link(batch, call.signal)
        snapshot, self.snapshot = self.snapshot, None
        state = begin(self.core, call, self.scopes[index], signal, snapshot)
        slot = self.slots[index] = _Slot(index, state, unlink)
        self.started = index + 1
        return slot

    def _launch(self, slot: _Slot) -> None:
        """Dispatch a prepared call in a pool slot, in a task of its own."""
        lookup(self.core, slot.state)  # stage 8's lookup, before any later commit
        self.dispatching += 1
        slot.task = asyncio.get_running_loop().create_task(self._dispatch(slot))

    async def _dispatch(self, slot: _Slot) -> None:
        try:
            await self.dispatcher(self.core, slot.state)
        except BaseException as exc:
            # Anything but the cancellation the driver itself asked for is a failure of
            # the scheduler (a CancelledError a middleware raised on its own included).
            if not self.cancelling and self.failure is None:
                self.failure = exc
            raise
        finally:
            slot.settled = True
            self.dispatching -= 1  # the pool slot is free at once
            self.wake.set()

    async def _settlement(self) -> None:
        """Wait until a dispatch settles or the batch is cancelled."""
        if self.failure is None:
            self.wake.clear()
            await self.wake.wait()
        if self.failure is not None:
            raise self.failure

    def _committed(self, slot: _Slot) -> ToolResult:
        """Close the books on a committed call; its final result."""
        slot.unlink()
        del self.slots[slot.index]
        self.cursor = slot.index + 1
        result = slot.state.result
        assert result is not None
        self.results.append(result)
        return result

    async def _stop_in_flight(self, *, cancel_tasks: bool) -> None:
        """Wait for every started body to finish, cancelling the tasks if asked."""
        tasks = [slot.task for slot in self.slots.values()
                 if slot.task is not None and not slot.task.done()]
        if cancel_tasks:
            self.cancelling = True
            for task in tasks:
                task.cancel()
        cancelled = False
        while tasks:
            try:
                await asyncio.wait(tasks)
            except asyncio.CancelledError:
                cancelled = True
                self.cancelling = True
                for task in tasks:
                    task.cancel()
            tasks = [task for task in tasks if not task.done()]
        for slot in self.slots.values():
            slot.unlink()
            if slot.task is not None and not slot.task.cancelled():
                slot.task.exception()  # retrieved: the first failure is raised instead
        if cancelled:
            raise asyncio.CancelledError


def _unlinked() -> None:
    """The undo of a call's signal that is the batch's own: nothing to undo."""
