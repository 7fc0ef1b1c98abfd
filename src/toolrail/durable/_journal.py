"""A durable step's driver: the scheduler's own, told what an engine recorded (durable.md).

The engine (DBOS, Temporal) records up to four things per call, each once: the
approval's answer, a marker written just before dispatch, the dispatch outcome (stages
8-9, as the body and around-execute middleware left it), and the committed result. A
call of an idempotent tool records neither marker nor dispatch outcome: it may run
again anyway, so its record is its answer and its result. ``StepJournal`` turns that
record into the step's behaviour on a rerun:

- a recorded committed result is committed in model order without running anything;
- a recorded dispatch result goes on to post-execute and commit without dispatching
  again (a body that finished is never run twice, even when an approval of a later
  call kept it from committing before the process died);
- a call whose marker is recorded but not its dispatch outcome was inside its body when
  the process died: it ends as ``INTERRUPTED`` (an idempotent tool's call has no
  marker: it simply runs again);
- an approval answered earlier is not asked again, but the call's digest is checked
  against the registry as it is now (``TOOL_CHANGED``); a call whose ticket was asked
  earlier waits for that ticket's answer, and the engine's approver is not asked again
  (a person's answer is final);
- a ticket whose call is settled without its answer (denied by a guard, its tool gone or
  changed, the step cancelled) is withdrawn: it leaves ``pending()``.

Everything else (pre-execute, guards, post-execute, the order) is the scheduler's own
code path, run again against the registry as it is at the rerun.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable, Collection, Hashable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from .._core.presentation import RUN_CODE
from .._dispatch.commit import finish
from .._dispatch.execution import Execution, ExecutionToken
from .._dispatch.failures import from_exception
from .._dispatch.materialize import materialize
from .._dispatch.pipeline import run_dispatch
from .._dispatch.state import FINAL, CallState
from .._model.cancel import CancelSignal
from .._model.decisions import ApprovalOutcome, ApprovalRequest
from .._model.digest import call_digest
from .._model.errors import TOOL_CHANGED, ToolError, ToolInterruptedError
from .._model.foreign import is_awaitable
from .._model.lossless import thaw
from .._model.tool import ToolCall
from .._scheduling.scheduler import PROGRAM_DRIVERS, Driver, Feed, _Slot
from ._codec import Data, result_from_data, result_to_data

if TYPE_CHECKING:
    from .._core.core import Core

__all__ = ["PENDING", "Answer", "DurableApprover", "GroupCommit", "Record", "StepJournal",
           "answer"]


class _Pending:
    """The type of ``durable.PENDING``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "durable.PENDING"


# Set while a call of a durable step dispatches: an approval asked then is a nested call's
# (a code-mode program's), which the step's record does not hold (see ``approve``).
_DISPATCHING: ContextVar[bool] = ContextVar("toolrail_durable_dispatching", default=False)

PENDING: Final = _Pending()
"""An approver's answer under a durable engine: park the call and ask a person durably."""

DurableApprover: TypeAlias = Callable[
    [ApprovalRequest],
    "ApprovalOutcome | str | _Pending | Awaitable[ApprovalOutcome | str | _Pending]"]
"""An engine's approver: an ``Approver`` that may also answer ``PENDING``."""

INTERRUPTED_MESSAGE: Final = "tool call was interrupted by a restart; it may have run"


@dataclass(frozen=True, slots=True)
class Answer:
    """A person's answer to a call's ticket: what, who (``resume(..., answered_by=)``),
    and when (seconds since the epoch)."""

    ticket: str
    outcome: ApprovalOutcome
    answered_by: str | None
    answered_at: float | None


# the answers of the calls in flight, by token: observers read them with ``answer``
_ANSWERS: weakref.WeakKeyDictionary[ExecutionToken, Answer] = weakref.WeakKeyDictionary()


def answer(execution: Execution) -> Answer | None:
    """The person's answer that call ``execution`` ran (or was refused) under, for a call
    of a durable step that waited on a ticket; ``None`` for any other call. Middleware
    and observers read it: ``durable.answer(execution).answered_by``."""
    return _ANSWERS.get(execution.token)


class GroupCommit:
    """An engine's records on their way to it, in groups (group commit): each write holds
    the records asked for while the one before it was under way, so the ten markers of
    ten parallel calls are one write. ``send(entries, number)`` writes one group (its
    number counts the groups sent before it); ``cancels(exc)`` says whether a failed
    write is a cancellation (its waiters' calls then end as cancelled).

    A write that fails fails its group and every record asked for after it: nothing is
    sent after a failure, nothing waits for a write that will not come, and ``drain``
    raises it."""

    def __init__(self, send: Callable[[list[Any], int], Awaitable[object]],
                 cancels: Callable[[BaseException], bool] = lambda exc: False) -> None:
        self._send = send
        self._cancels = cancels
        self._sent = 0
        self._queue: list[Any] = []  # records asked for since the last write began
        self._group: asyncio.Future[None] | None = None  # the write of those
        self._writing: asyncio.Future[None] | None = None  # the task writing, if any
        self._failed: BaseException | None = None
        self._later: list[Any] = []  # records that wait for a write to join (``later``)
        self._timer: asyncio.TimerHandle | None = None  # when they go, at the latest

    async def wait(self, entry: Any) -> None:
        """Record ``entry``, and return once it is written."""
        await asyncio.shield(self.write(entry))

    def write(self, entry: Any) -> asyncio.Future[None]:
        """Queue ``entry`` for the next group: the future of its write."""
        group = self._group
        if group is None:
            group = self._group = asyncio.get_running_loop().create_future()
            group.add_done_callback(_retrieved)
        if self._failed is not None:
            self._group = None
            self._fail(group)
            return group
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._queue += self._later  # what waits for a write rides along with this one
        self._later = []
        self._queue.append(entry)
        if self._writing is None or self._writing.done():
            self._writing = asyncio.ensure_future(self._flush())
        return group

    def later(self, entry: Any, delay: float) -> None:
        """Queue ``entry`` for the next write, or one of its own ``delay`` s from now;
        ``drain(dropping_later=True)`` drops it if neither came."""
        self._later.append(entry)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(delay, self.flush_later)

    def flush_later(self) -> None:
        """Write what ``later`` queued, now."""
        self._timer = None
        if self._later:
            self.write(self._later.pop())  # the others ride along

    async def _flush(self) -> None:
        """Write what is queued, one group at a time, until nothing is."""
        await asyncio.sleep(0)  # the calls that start with this one join its write
        while (group := self._group) is not None:
            entries, self._queue, self._group = self._queue, [], None
            try:
                await self._send(entries, self._sent)
            except BaseException as exc:
                self._failed = (asyncio.CancelledError() if self._cancels(exc) else exc)
                self._fail(group)
                if (queued := self._group) is not None:
                    self._queue, self._group = [], None
                    self._fail(queued)
                if isinstance(exc, asyncio.CancelledError):
                    raise  # this task was cancelled (``close``)
                return  # ``drain`` raises it
            self._sent += 1
            group.set_result(None)

    def _fail(self, group: asyncio.Future[None]) -> None:
        assert self._failed is not None
        if isinstance(self._failed, asyncio.CancelledError):
            group.cancel()
        else:
            group.set_exception(self._failed)

    async def drain(self, *, dropping_later: bool = False) -> None:
        """Return once every record asked for is written (``dropping_later``: but those
        ``later`` queued and nothing has sent yet); raise if one could not be."""
        if dropping_later:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._later = []
        else:
            self.flush_later()
        while self._writing is not None and not self._writing.done():
            await asyncio.shield(self._writing)
        if self._failed is not None:
            raise self._failed

    async def close(self) -> None:
        """Stop writing: what is not written yet never will be."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writing is not None and not self._writing.done():
            self._writing.cancel()
            await asyncio.wait([self._writing])


def _retrieved(future: asyncio.Future[None]) -> None:
    """A group's write that failed is raised by ``drain``: nobody else need look."""
    if not future.cancelled():
        future.exception()


@dataclass
class Record:
    """What an engine recorded of one step, read once when the step (re)starts, and how
    it records more. An engine subclasses it and implements the ``async`` methods."""

    # {"outcome", "digest", "answered_by", "answered_at"}: a person's answer, final
    approvals: dict[int, Data] = field(default_factory=dict)
    asked: set[int] = field(default_factory=set)  # calls with a ticket, answered or not
    marked: set[int] = field(default_factory=set)
    dispatched: dict[int, Data] = field(default_factory=dict)  # {"phase", "invoked", "result"}
    results: dict[int, Data] = field(default_factory=dict)

    async def ask(self, index: int, request: Data) -> Data:
        """Park call ``index`` on a durable approval ``request``; its recorded answer."""
        raise NotImplementedError

    async def withdraw(self, index: int) -> None:
        """Withdraw call ``index``'s ticket: the call was settled without its answer (a
        guard denied it, its tool is gone or changed, the step was cancelled), so the
        ticket leaves ``pending()`` and an answer to it is refused."""
        raise NotImplementedError

    async def mark(self, index: int) -> None:
        """Record that call ``index`` is about to be dispatched."""
        raise NotImplementedError

    async def dispatch(self, index: int, outcome: Data) -> None:
        """Record call ``index``'s dispatch outcome."""
        raise NotImplementedError

    async def commit(self, index: int, result: Data) -> None:
        """Record call ``index``'s final result."""
        raise NotImplementedError

    def program(self, index: int) -> Record | None:
        """The record of the nested calls of call ``index``'s code-mode program, or
        ``None`` where the engine keeps none (then ``run_code`` is a call like others)."""
        return None

    async def dispatch_program(self, index: int, run: Callable[[], Awaitable[Data]]) -> None:
        """Dispatch call ``index``'s program (``run``) and record its outcome."""
        outcome = await run()
        await self.dispatch(index, outcome)


class StepJournal:
    """One run of one durable step: its driver, approver and record."""

    def __init__(self, core: Core, step_id: str, ticket_prefix: str, record: Record,
                 idempotent: Collection[str], approver: DurableApprover | None) -> None:
        self.core = core
        self.step_id = step_id
        self.ticket_prefix = ticket_prefix
        self.record = record
        self.idempotent = idempotent
        self.approver = approver
        self.replayed: set[int] = set()
        self.indexes: dict[int, int] = {}  # id(state) -> the call's index
        self.driver: DurableDriver | None = None
        self.tokens: dict[int, ExecutionToken] = {}  # each call's, for ``answer``

    def make_driver(self, calls: list[ToolCall], scopes: list[Hashable], max_parallel: int,
                    signal: CancelSignal | None, feed: Feed = Feed.FIXED) -> DurableDriver:
        driver = self.driver = DurableDriver(self.core, calls, scopes, max_parallel, signal,
                                             feed)
        driver.journal = self
        driver.dispatcher = self.dispatch
        driver.step = self
        return driver

    def began(self, index: int, state: CallState) -> None:
        """Call ``index`` has passed stages 1-3: replay what the record says of it."""
        execution = state.execution
        execution._durable_id = f"{self.step_id}/{index}"
        # unique across engines on one database, as the ticket is (writing-tools.md)
        execution._idempotency_key = f"{self.ticket_prefix}/{index}"
        record = self.record
        self.tokens[index] = execution._token
        if (answered := record.approvals.get(index)) is not None:
            self._answered(index, answered)
        recorded = record.results.get(index)
        dispatched = record.dispatched.get(index)
        if recorded is not None:
            self.replayed.add(index)
            state.finalize = None
            state.end(FINAL, result_from_data(recorded))
        elif dispatched is not None:
            state.entry = self.core.resolve(execution._name, execution._scope)
            state.invoked = dispatched["invoked"]
            state.end(dispatched["phase"], result_from_data(dispatched["result"]))
        elif index in record.marked:
            state.finalize = None
            state.end(FINAL, from_exception(ToolInterruptedError(INTERRUPTED_MESSAGE)))
        elif execution._name not in self.idempotent or execution._name == RUN_CODE:
            self.indexes[id(state)] = index

    async def dispatch(self, core: Core, state: CallState) -> None:
        """Stages 8-9: after the marker that says the body may have started, and before
        the record of what dispatch left (an idempotent tool's call: neither). A
        ``run_code`` call has no marker: its program runs again after a restart, and its
        nested calls' own record answers those that completed (``_program``)."""
        index = self.indexes.pop(id(state), None)
        token = _DISPATCHING.set(True)
        try:
            if index is None:
                await run_dispatch(core, state)
                return
            record = self.record
            program = record.program(index) if state.execution._name == RUN_CODE else None
            if program is not None:
                async def run() -> Data:  # a coroutine function: DBOS tells them apart
                    return await _dispatched(core, state)

                drivers = PROGRAM_DRIVERS.set(self._program(index, program))
                try:
                    await record.dispatch_program(index, run)
                finally:
                    PROGRAM_DRIVERS.reset(drivers)
                return
            await record.mark(index)
            await record.dispatch(index, await _dispatched(core, state))
        finally:
            _DISPATCHING.reset(token)

    def _program(self, index: int, record: Record) -> Callable[[Core, int], Driver]:
        """The factory of the driver of call ``index``'s program: a journal of its own,
        over the program's record, with the step's idempotent tools."""
        def driver(core: Core, max_parallel: int) -> Driver:
            journal = StepJournal(core, f"{self.step_id}/{index}",
                                  f"{self.ticket_prefix}/{index}", record, self.idempotent,
                                  None)
            return journal.make_driver([], [], max_parallel, None, Feed.OPEN)
        return driver

    async def commit(self, index: int, state: CallState) -> None:
        """Stages 11-13, then the record of the result. The observers come first: a
        process that dies between them and the record notifies them again when the
        step resumes (at least once; ``Execution.durable_id`` tells the repeat), where
        the other order would lose the notification."""
        self.indexes.pop(id(state), None)  # a call that was never dispatched
        record = self.record
        if index not in self.replayed:  # else its state holds the recorded result
            result = state.result = finish(self.core, state)
            await record.commit(index, result_to_data(result))
        if index in record.asked and index not in record.approvals:
            # settled without its person's answer: the inbox must not offer it any more
            await record.withdraw(index)

    async def approve(self, request: ApprovalRequest) -> Any:
        """The approver of a durable step's calls (stage 4)."""
        driver = self.driver
        assert driver is not None
        if _DISPATCHING.get():
            # A nested call of a program in this step: the record holds the step's calls
            # only, so its approval is the approver's, and cannot wait durably.
            outcome = await self._asked_first(request)
            return ApprovalOutcome.UNAVAILABLE if outcome is PENDING else outcome
        index = driver.started - 1  # prepare runs one call at a time, in the driver
        record = self.record
        answer = record.approvals.get(index)
        if answer is None:
            if index not in record.asked:  # a ticket, once asked, is a person's to answer
                outcome = await self._asked_first(request)
                if outcome is not PENDING:
                    return outcome
                record.asked.add(index)
            answer = await record.ask(index, self._asked(index, request))
        self._answered(index, answer)
        if answer["digest"] != self._digest(request):
            raise ToolError(f'tool "{request.tool_name}" changed while its call waited for '
                            "approval", code=TOOL_CHANGED)
        return ApprovalOutcome(answer["outcome"])

    def _answered(self, index: int, answer: Data) -> None:
        token = self.tokens.get(index)
        if token is not None:
            _ANSWERS[token] = Answer(f"{self.ticket_prefix}/{index}",
                                     ApprovalOutcome(answer["outcome"]),
                                     answer.get("answered_by"), answer.get("answered_at"))

    async def _asked_first(self, request: ApprovalRequest) -> Any:
        """The engine's approver's answer (``PENDING`` when there is none)."""
        approver = self.approver
        if approver is None:
            return PENDING
        outcome: Any = approver(request)
        if is_awaitable(outcome):
            outcome = await outcome
        return outcome

    def _asked(self, index: int, request: ApprovalRequest) -> Data:
        return {
            "ticket": f"{self.ticket_prefix}/{index}",
            "step_id": self.step_id,
            "index": index,
            "call_id": request.call_id,
            "tool_name": request.tool_name,
            "arguments": thaw(request.arguments),
            "scope": request.scope,
            "reason": request.reason,
            "asked_at": time.time(),
            "digest": self._digest(request),
        }

    def _digest(self, request: ApprovalRequest) -> str | None:
        """The call's digest against the registry as it is now; ``None`` if its tool is
        gone."""
        entry = self.core.resolve(request.tool_name, request.scope)
        return None if entry is None else call_digest(entry.schema, request.arguments)


async def _dispatched(core: Core, state: CallState) -> Data:
    """Stages 8-9, and their outcome as the record holds it."""
    await run_dispatch(core, state)
    result = state.result
    assert result is not None
    if not state.trusted:  # stage 11's materialization, early: the record is frozen
        state.result = result = materialize(result)
        state.trusted = True
    return {"phase": state.phase, "invoked": state.invoked, "result": result_to_data(result)}


class DurableDriver(Driver):
    """The scheduler's driver, with each call's stages 1-3 followed by its replay."""

    step: StepJournal

    def _prepare(self, index: int) -> _Slot:
        slot = super()._prepare(index)
        self.step.began(index, slot.state)
        return slot
