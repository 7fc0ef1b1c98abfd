"""``durable.DBOS``: durable steps and approvals on DBOS Transact (durable.md).

A step is a DBOS workflow whose ID is ``"<name>:<step_id>"``. Its record is a log of
DBOS steps, each a group of ``[kind, index, data]`` records (a marker, a dispatch
outcome, a result) asked for while the group before it was being written; a rerun reads
the log back and hands it to the scheduler's own driver (``_journal``), and writes its
new groups at DBOS step IDs after the recorded ones.

A parked call's ticket (``"<name>:<step_id>/<index>"``) and its answer are rows of
toolrail's own tables on the same database (``_tickets``): ``pending()`` is one query,
``resume()`` one transaction, from any process (``Approvals`` launches no DBOS).

Each process is a DBOS executor of its own, kept alive in ``toolrail_executors``; a live
process takes over a dead one's steps through DBOS's recovery (``_liveness``).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import re
import sqlite3
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

import sqlalchemy as sa
from dbos import DBOS as _DBOS
from dbos import SetWorkflowID
from dbos._core import WorkflowHandleAsyncTask

from .._core.presentation import RUN_CODE
from .._model.cancel import CancelController, CancelSignal
from .._model.decisions import ApprovalOutcome
from .._model.errors import ABORTED_BEFORE_DISPATCH
from .._model.results import ToolResult
from .._model.tool import ToolCall
from .._scheduling.scheduler import Batch, Committed
from ._codec import Data, batch_from_data, batch_to_data, call_from_data
from ._journal import DurableApprover, GroupCommit, Record, StepJournal
from ._liveness import Liveness, connect
from ._shared import (
    WITHDRAWN,
    PendingApproval,
    already_answered,
    answer_of,
    calls_digest,
    checked_answer,
    checked_step,
    other_calls,
    pending_approval,
    withdrawn,
)
from ._tickets import MISSING, AnswerWatch
from ._tickets import answer as answer_ticket
from ._tickets import ask as ask_ticket
from ._tickets import list_tickets as tickets_of
from ._tickets import withdraw as withdraw_ticket

if TYPE_CHECKING:
    from .._registry.registry import ToolRegistry

__all__ = ["DBOS", "Approvals", "DurableStream", "PendingApproval", "sqlite_engine"]

T = TypeVar("T")

_STEP: Final = "toolrail.step"
_VERSION: Final = "toolrail-durable-2"  # the record's layout: DBOS recovers only this version
_PROGRAM: Final = "toolrail.program"  # the prefix of a program's records (events)
_LAZY: Final = 0.05  # s a committed result waits for a write to join (``commit``)
_POLL: Final = 0.05  # s between polls of DBOS's internal queue (private: dbos<3.5)
TAKEOVER_AFTER: Final = 15.0  # s without a sign of life before a process's steps move

_NAME: Final = re.compile(r"[a-z0-9_-]{3,256}")

_engines: dict[str, DBOS] = {}  # the engines of this process, by name (workflows find theirs)
_arrivals: dict[str, asyncio.Event] = {}  # a recovered step waits here for its engine
_fresh: set[str] = set()  # steps this process is starting: no record to read back yet


@dataclass
class _Launched:
    """The process's DBOS, as toolrail's own engines launched it (DBOS is one per process)."""

    database: str | None = None
    owners: int = 0
    engine: Any = None  # the SQLite engine it was given: DBOS does not dispose of it
    liveness: Liveness | None = None  # this process's executor row (``_liveness``)
    users: int = 0  # the engines using it, the application's DBOS's (``dbos=``) included
    watch: AnswerWatch | None = None  # the answers this process's parked calls wait for

    def tables(self) -> Any:
        """The SQLAlchemy engine on toolrail's tables in the process's database."""
        assert self.liveness is not None, "no engine is launched"
        return self.liveness.engine

    def answers(self) -> AnswerWatch:
        if self.watch is None:
            self.watch = AnswerWatch(self.tables())
        return self.watch


_launched = _Launched()


class Approvals:
    """The waiting approvals of one database, from any process; no agent needs to run
    and no DBOS is launched: the tickets are toolrail's tables (``_tickets``).

    ``Approvals("sqlite:///agent.sqlite")``; an engine's ``pending()`` and ``resume()``
    are this, on the engine's database."""

    def __init__(self, database: str, *, prefix: str = "") -> None:
        self._engine = connect(database, sqlite_engine(database)
                               if database.startswith("sqlite:") else None)
        self._prefix = prefix

    async def pending(self, *, history: bool = False) -> list[PendingApproval]:
        """Every approval still waiting for an answer, oldest first, in one query; with
        ``history``, the answered ones (who, when, what) and the withdrawn ones too."""
        tickets = await asyncio.to_thread(tickets_of, self._engine, self._prefix,
                                          waiting_only=not history)
        return [pending_approval(request, found, state)
                for _, state, found, request in tickets]

    async def resume(self, ticket: str, outcome: ApprovalOutcome | str, *,
                     answered_by: str | None = None) -> None:
        """Answer approval ``ticket`` once, as ``answered_by`` (recorded with the time);
        ``KeyError`` for an unknown ticket, ``ValueError`` for one already answered or
        withdrawn (its call was settled without it), or an outcome that is not one. Of
        two answers racing, the first to commit is the answer; the other raises."""
        given = answer_of(checked_answer(ticket, outcome, answered_by), answered_by)
        if not ticket.startswith(self._prefix):
            raise KeyError(ticket)
        try:
            done = await asyncio.to_thread(answer_ticket, self._engine, ticket, **given)
        except sa.exc.IntegrityError:
            raise already_answered(ticket) from None
        if done == MISSING:
            raise KeyError(ticket)
        if done == WITHDRAWN:
            raise withdrawn(ticket)

    def close(self) -> None:
        self._engine.dispose()


_Listener = Callable[[int, ToolResult], None]


class DBOS:
    """Durable steps of ``registry`` on DBOS Transact; see durable.md.

    ``database`` defaults to ``sqlite:///<name>.sqlite``; ``dbos`` takes a ``DBOS``
    instance the application configured, with its ``database`` URL (then ``launch`` and
    ``aclose`` leave DBOS's life to the application, which launches it after ``launch``).
    ``idempotent`` names the tools whose calls may run again when a process died inside
    their body. ``approver`` is asked first; its ``PENDING`` (and
    every ask when there is none) parks the call durably."""

    def __init__(self, registry: ToolRegistry, *, name: str, database: str | None = None,
                 idempotent: Iterable[str] = (), approver: DurableApprover | None = None,
                 dbos: _DBOS | None = None, executor_id: str | None = None,
                 takeover_after: float = TAKEOVER_AFTER) -> None:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"name must be 3-256 lowercase letters, digits, '-' or '_' (a "
                             f"DBOS application name), got {name!r}")
        if isinstance(idempotent, str):
            raise TypeError("idempotent must be an iterable of tool names, not a str")
        if executor_id is not None and (not isinstance(executor_id, str) or not executor_id):
            raise ValueError(f"executor_id must be a non-empty str or None, got {executor_id!r}")
        if dbos is not None and executor_id is not None:
            raise ValueError("with dbos=, give the executor_id in that DBOS's own config")
        if (isinstance(takeover_after, bool) or not isinstance(takeover_after, (int, float))
                or not takeover_after > 0):
            raise ValueError(f"takeover_after must be a number of seconds > 0, got "
                             f"{takeover_after!r}")
        self.registry = registry
        self.name = name
        self.executor_id = executor_id
        self.takeover_after = float(takeover_after)
        if dbos is not None and database is None:
            raise ValueError("with dbos=, pass database= too: the URL of that DBOS's system "
                             "database, where pending() and resume() read")
        self.database = database or f"sqlite:///{name}.sqlite"
        self.idempotent = frozenset(idempotent)
        self.approver = approver
        self._owned = dbos is None  # else the application launches and destroys DBOS
        # The live side of the steps this process runs or waits for, by workflow ID: a
        # controller of each step's batch signal (a caller's signal reaches a step that
        # DBOS recovered at launch too), and a stream's commit listener.
        self._cancels: dict[str, CancelController] = {}
        self._listeners: dict[str, _Listener] = {}
        self._approvals: Approvals | None = None
        self._launched = False

    async def launch(self) -> None:
        """Start DBOS (unless the application did) and this process's liveness; take
        over the steps of a process of this machine that died, and (with a given
        ``executor_id``) let DBOS recover this slot's own."""
        if self._launched:
            return
        other = _engines.get(self.name)
        if other is not None and other is not self:
            raise RuntimeError(f"an engine named {self.name!r} is already launched")
        self._join_liveness()
        if self._owned:
            try:
                self._launch_shared()
            except BaseException:
                _leave_liveness()
                raise
            liveness = _launched.liveness
            if _launched.owners == 1 and liveness is not None:
                # the steps of a process that died here moments ago: now, not a beat later
                await asyncio.to_thread(liveness.take_over)
        _engines[self.name] = self
        _arrival(self.name).set()
        self._launched = True

    def _join_liveness(self) -> None:
        """This process's row among the database's executors (``_liveness``): claimed by
        the first engine launched here, before DBOS launches, and shared after."""
        liveness = _launched.liveness
        if liveness is None:
            engine = connect(self.database, sqlite_engine(self.database)
                             if self.database.startswith("sqlite:") else None)
            liveness = Liveness(engine, self.executor_id if self._owned else
                                _DBOS.executor_id or "local", self.takeover_after,
                                _DBOS._recover_pending_workflows)
            try:
                liveness.claim()
            except BaseException:
                engine.dispose()
                raise
            liveness.start()
            _launched.liveness = liveness
        elif self.executor_id is not None and self.executor_id != liveness.executor_id:
            raise RuntimeError(
                f"this process is DBOS executor {liveness.executor_id!r}: an engine with "
                f"executor_id={self.executor_id!r} cannot launch in it")
        _launched.users += 1

    def _launch_shared(self) -> None:
        """Launch the process's DBOS, or join it when another engine launched it on the
        same database."""
        if _launched.database is not None:
            if _launched.database != self.database:
                raise RuntimeError(
                    f"DBOS runs one database per process: {_launched.database} is launched, "
                    f"so an engine on {self.database} cannot be")
        else:
            config: Any = {
                # one DBOS application for every engine on a database: DBOS ties its
                # fixed version to the name that registered it first
                "name": "toolrail", "system_database_url": self.database,
                "application_version": _VERSION,
                "executor_id": _launched.liveness.executor_id if _launched.liveness else None,
                "log_level": os.environ.get("TOOLRAIL_DBOS_LOG_LEVEL", "WARNING"),
                "notification_listener_polling_interval_sec": 0.05,
            }
            if self.database.startswith("sqlite:"):
                config["system_database_engine"] = _launched.engine = sqlite_engine(
                    self.database)
            instance = _DBOS(config=config)
            # A step taken over, or recovered at launch, is re-enqueued on DBOS's internal
            # queue: polled every 50 ms rather than every 1 s, it resumes that much sooner.
            instance._registry.get_internal_queue()._polling_interval_sec = _POLL
            _DBOS.launch()
            _launched.database = self.database
        _launched.owners += 1

    async def run(self, step_id: str, calls: Iterable[ToolCall], *, max_parallel: int = 10,
                  signal: CancelSignal | None = None) -> Batch:
        """``registry.run(calls)`` as a durable step named ``step_id``: running the same
        step again (here or in another process) returns its recorded ``Batch``."""
        _, data = self._checked(step_id, calls, max_parallel, signal)
        return await self._run(step_id, data, max_parallel, signal)

    def stream(self, step_id: str, calls: Iterable[ToolCall], *, max_parallel: int = 10,
               signal: CancelSignal | None = None) -> DurableStream:
        """``registry.stream(calls)`` as a durable step: ``Committed`` items in model
        order, as this process commits them (a step recovered or finished elsewhere
        yields its recorded results). Closing it early cancels the step."""
        listed, data = self._checked(step_id, calls, max_parallel, signal)
        return DurableStream(self, step_id, listed, data, max_parallel, signal)

    def _checked(self, step_id: str, calls: Iterable[ToolCall], max_parallel: int,
                 signal: CancelSignal | None) -> tuple[list[ToolCall], list[Data]]:
        if not self._launched:
            raise RuntimeError("launch() the engine before running steps")
        return checked_step(step_id, calls, max_parallel, signal)

    async def _run(self, step_id: str, data: list[Data], max_parallel: int,
                   signal: CancelSignal | None,
                   on_commit: Callable[[int, ToolResult], None] | None = None) -> Batch:
        workflow_id = f"{self.name}:{step_id}"
        controller = self._cancels.setdefault(workflow_id, CancelController())
        unhook = None if signal is None else signal.add_callback(
            lambda: controller.cancel(signal.reason or "cancelled"))
        if on_commit is not None:
            self._listeners[workflow_id] = on_commit
        try:
            out = await _result(workflow_id, step_id, data, self.name, max_parallel)
        finally:
            if unhook is not None:
                unhook()
            self._listeners.pop(workflow_id, None)
            self._cancels.pop(workflow_id, None)
        if out["calls"] != calls_digest(data):
            raise other_calls(step_id)
        return batch_from_data(out["batch"])

    async def pending(self, *, history: bool = False) -> list[PendingApproval]:
        """This engine's waiting approvals, oldest first; with ``history``, its answered
        and withdrawn ones too (``Approvals.pending``)."""
        return await self._client().pending(history=history)

    async def resume(self, ticket: str, outcome: ApprovalOutcome | str, *,
                     answered_by: str | None = None) -> None:
        """Answer one waiting approval, as ``answered_by`` (``Approvals.resume``)."""
        await self._client().resume(ticket, outcome, answered_by=answered_by)

    async def aclose(self) -> None:
        """Stop DBOS if this engine started it; the last engine of the process marks it
        gone, so that a live process takes over the steps still running at once (or this
        slot's next launch, for a given ``executor_id``)."""
        if self._approvals is not None:
            self._approvals.close()
            self._approvals = None
        if self._launched:
            self._launched = False
            _engines.pop(self.name, None)
            _arrivals.pop(self.name, None)
            if self._owned:
                _launched.owners -= 1
            if self._owned and not _launched.owners:
                _launched.database = None
                _DBOS.destroy(workflow_completion_timeout_sec=0)
                if _launched.engine is not None:
                    _launched.engine.dispose()
                    _launched.engine = None
                # DBOS made its own (now shut down) pool this loop's default executor:
                # without a fresh one, the application's asyncio.to_thread would fail.
                asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor())
            _leave_liveness()

    async def __aenter__(self) -> DBOS:
        await self.launch()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _client(self) -> Approvals:
        if self._approvals is None:
            self._approvals = Approvals(self.database, prefix=f"{self.name}:")
        return self._approvals

    def _committed(self, workflow_id: str, index: int, result: ToolResult) -> None:
        listener = self._listeners.get(workflow_id)
        if listener is not None:
            listener(index, result)

    async def _step(self, workflow_id: str, step_id: str, data: list[Data],
                    max_parallel: int) -> Data:
        fresh = workflow_id in _fresh
        _fresh.discard(workflow_id)
        record = await _DBOSRecord.open(workflow_id, data, fresh)
        calls = [call_from_data(d) for d in data]
        journal = StepJournal(self.registry._core, step_id, workflow_id, record,
                              self.idempotent, self.approver)
        controller = self._cancels.setdefault(workflow_id, CancelController())
        driver = journal.make_driver(calls, [c.scope for c in calls], max_parallel,
                                     controller.signal)
        with self.registry._core.approving(journal.approve):
            await driver.run(lambda i, r: self._committed(workflow_id, i, r))
        await record.writes.drain(dropping_later=True)  # the output holds every result
        return {"calls": calls_digest(data), "batch": batch_to_data(driver.final())}


class DurableStream:
    """A durable step's ``Committed`` items, in model order; ``aclose()`` cancels the
    rest of the step and returns once it has finished (``CallStream``'s contract)."""

    def __init__(self, engine: DBOS, step_id: str, calls: list[ToolCall], data: list[Data],
                 max_parallel: int, signal: CancelSignal | None) -> None:
        self._engine = engine
        self._step_id = step_id
        self._calls = calls
        self._data = data
        self._max_parallel = max_parallel
        self._closer = CancelController()
        self._unhook = None if signal is None else signal.add_callback(
            lambda: self._closer.cancel(signal.reason or "cancelled"))
        self._committed: dict[int, ToolResult] = {}
        self._arrived = asyncio.Event()
        self._task: asyncio.Future[Batch] | None = None
        self._next = 0
        self._batch: Batch | None = None

    @property
    def batch(self) -> Batch:
        """The step's ``Batch``, once it has finished; else ``RuntimeError``."""
        if self._batch is None:
            raise RuntimeError("DurableStream.batch is available once the step has finished")
        return self._batch

    def __aiter__(self) -> DurableStream:
        return self

    async def __anext__(self) -> Committed:
        task = self._task
        if self._next == len(self._calls):
            if task is None and not self._calls and not self._closer.signal.cancelled:
                task = self._task = asyncio.ensure_future(self._engine._run(
                    self._step_id, self._data, self._max_parallel, self._closer.signal))
            if task is not None and self._batch is None:
                self._batch = await task
            raise StopAsyncIteration
        if task is None:
            task = self._task = asyncio.ensure_future(self._engine._run(
                self._step_id, self._data, self._max_parallel, self._closer.signal,
                self._arrive))
        while (result := self._committed.get(self._next)) is None:
            if task.done():
                self._batch = batch = task.result()
                result = batch.results[self._next]
                break
            self._arrived.clear()
            waiter = asyncio.ensure_future(self._arrived.wait())
            either: list[asyncio.Future[Any]] = [task, waiter]
            try:
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
        index, self._next = self._next, self._next + 1
        error = result.error
        return Committed(index, self._calls[index], result,
                         error is None or error.code != ABORTED_BEFORE_DISPATCH)

    def _arrive(self, index: int, result: ToolResult) -> None:
        self._committed[index] = result
        self._arrived.set()

    async def aclose(self) -> None:
        """Cancel what is left of the step; return once it has finished."""
        self._closer.cancel("stream closed")
        try:
            if self._task is not None:
                self._batch = await self._task
        finally:
            self._next = len(self._calls)
            if self._unhook is not None:
                self._unhook()

    async def __aenter__(self) -> DurableStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _DBOSRecord(Record):
    """A step's record in DBOS: an append-only log of DBOS steps, each holding the
    records (``[kind, index, data]``) that were asked for while the one before it was
    being written (group commit: the ten markers of ten parallel calls are one DBOS step,
    one transaction). The approvals' answers are their tickets' own workflows."""

    def __init__(self, workflow_id: str) -> None:
        super().__init__()
        self.workflow_id = workflow_id
        self.events: dict[str, Any] = {}  # the step's DBOS events: its programs' records
        self.last = 0  # the highest DBOS step ID recorded when the step (re)started
        self.writes = GroupCommit(self._send)

    @classmethod
    async def open(cls, workflow_id: str, calls: list[Data], fresh: bool) -> _DBOSRecord:
        """The record of step ``workflow_id``, read back unless the step is ``fresh``
        (started by this process just now: nothing can be recorded yet)."""
        record = cls(workflow_id)
        if fresh:
            return record
        reads: list[Awaitable[Any]] = [
            _outside(_DBOS.list_workflow_steps_async(workflow_id)),
            asyncio.to_thread(tickets_of, _launched.tables(), f"{workflow_id}/",
                              waiting_only=False)]
        if any(call["name"] == RUN_CODE for call in calls):
            reads.append(_outside(_DBOS.get_all_events_async(workflow_id)))
        steps, tickets, *events = await asyncio.gather(*reads)
        record.events = events[0] if events else {}
        for step in steps:
            record.last = max(record.last, step["function_id"])
            if step["error"] is None and isinstance(step["output"], list):
                for kind, index, data in step["output"]:
                    record._replay(kind, index, data)
        prefix = len(workflow_id) + 1
        for ticket, _, found, request in tickets:
            index = ticket[prefix:]
            if index.isdigit():
                record.asked.add(int(index))
                if found is not None:
                    record.approvals[int(index)] = {**found, "digest": request["digest"]}
        return record

    def _replay(self, kind: str, index: int, data: Any) -> None:
        if kind == "mark":
            self.marked.add(index)
        elif kind == "dispatch":
            self.dispatched[index] = data
        else:
            self.results[index] = data

    async def ask(self, index: int, request: Data) -> Data:
        ticket = request["ticket"]
        self.writes.flush_later()  # the results committed before a wait of hours go now
        # the request as it was first asked (an earlier process's, when this one asks
        # again): its digest is the one the person saw
        first, _ = await asyncio.to_thread(ask_ticket, _launched.tables(), request)
        try:
            found = await _launched.answers().wait(ticket)
        except asyncio.CancelledError:  # the call's signal fired: nobody is asked
            await asyncio.shield(self.withdraw(index))
            raise
        out = self.approvals[index] = {**found, "digest": first["digest"]}
        return out

    async def withdraw(self, index: int) -> None:
        await asyncio.to_thread(withdraw_ticket, _launched.tables(),
                                f"{self.workflow_id}/{index}")

    async def mark(self, index: int) -> None:
        await self.writes.wait(["mark", index, True])
        self.marked.add(index)

    async def dispatch(self, index: int, outcome: Data) -> None:
        await self.writes.wait(["dispatch", index, outcome])
        self.dispatched[index] = outcome

    async def commit(self, index: int, result: Data) -> None:
        # Not waited for, nor written at once: nothing depends on it but a rerun's
        # replay, and the observers have seen the result already (a process that dies
        # before it is written notifies them again: durable.md's at-least-once). It
        # joins the next write (the next call's marker, say), or is written _LAZY s
        # later, or before the step parks on an approval; a step that ends first does
        # not write it at all: the step's output holds every result.
        self.writes.later(["result", index, result], _LAZY)
        self.results[index] = result

    async def _send(self, entries: list[Any], number: int) -> None:
        """One group, as one DBOS step."""
        await self._next_step().run_async(None, _identity, entries)

    def _next_step(self) -> Any:
        """A DBOS step ID after every one recorded before this run (a rerun's would
        replay what an earlier process recorded there instead of writing)."""
        while (step := _DBOS.reserve_step()).step_id <= self.last:
            pass
        return step

    def program(self, index: int) -> Record:
        return _DBOSProgramRecord(index, self.events)

    async def dispatch_program(self, index: int, run: Callable[[], Awaitable[Data]]) -> None:
        # The program runs inside a DBOS step of its own: there its nested calls record
        # as DBOS events, keyed by their index, with no step ID to draw. The step's
        # output is the program's dispatch record.
        async def program() -> list[list[Any]]:
            return [["dispatch", index, await run()]]

        for kind, at, data in await self._next_step().run_async(None, program):
            self._replay(kind, at, data)


class _DBOSProgramRecord(Record):
    """A program's record in DBOS: events of the step, ``toolrail.program/<i>/<j>/<kind>``,
    set from inside the program's dispatch step (a DBOS step does not number what it
    does inside)."""

    def __init__(self, index: int, events: dict[str, Any]) -> None:
        super().__init__()
        self.prefix = f"{_PROGRAM}/{index}/"
        for key, value in events.items():
            if key.startswith(self.prefix):
                nested, kind = key[len(self.prefix):].split("/")
                if kind == "mark":
                    self.marked.add(int(nested))
                elif kind == "dispatch":
                    self.dispatched[int(nested)] = value
                else:
                    self.results[int(nested)] = value

    async def mark(self, index: int) -> None:
        await _DBOS.set_event_async(f"{self.prefix}{index}/mark", True)
        self.marked.add(index)

    async def dispatch(self, index: int, outcome: Data) -> None:
        await _DBOS.set_event_async(f"{self.prefix}{index}/dispatch", outcome)
        self.dispatched[index] = outcome

    async def commit(self, index: int, result: Data) -> None:
        await _DBOS.set_event_async(f"{self.prefix}{index}/result", result)
        self.results[index] = result


@_DBOS.workflow(name=_STEP)
async def _step(engine: str, step_id: str, calls: list[Data], max_parallel: int) -> Data:
    owner = _engines.get(engine)
    if owner is None:  # recovered when another engine launched DBOS: wait for its own
        await _arrival(engine).wait()
        owner = _engines[engine]
    return await owner._step(_DBOS.workflow_id or "", step_id, calls, max_parallel)


async def _result(workflow_id: str, step_id: str, data: list[Data], *args: Any) -> Data:
    """The result of step workflow ``workflow_id``, started with ``args`` unless it
    exists (run before, or recovered at launch: then its own inputs are the ones that
    count, and other calls are refused at once, before any wait). A workflow running
    elsewhere (recovered by DBOS's queue thread, or another process's) is polled every
    50 ms (DBOS's default is 1 s)."""
    found: Any = await _DBOS.list_workflows_async(workflow_ids=[workflow_id],
                                                  load_output=False)
    if found:
        if found[0].input and calls_digest(found[0].input["args"][2]) != calls_digest(data):
            raise other_calls(step_id)
        handle: Any = await _DBOS.retrieve_workflow_async(workflow_id)
    else:
        _fresh.add(workflow_id)
        handle = None
        try:
            with SetWorkflowID(workflow_id):
                handle = await _DBOS.start_workflow_async(_step, args[0], step_id, data,
                                                          *args[1:])
        finally:
            # DBOS runs it here only if this start created it (else another process
            # did, a moment ago): only then is its record known to be empty
            if not isinstance(handle, WorkflowHandleAsyncTask):
                _fresh.discard(workflow_id)
    out: Data = await handle.get_result(polling_interval_sec=0.05)
    return out


def _leave_liveness() -> None:
    """One engine less on this process's executor row; the last one stops it."""
    _launched.users -= 1
    liveness = _launched.liveness
    if not _launched.users and liveness is not None:
        if _launched.watch is not None:
            _launched.watch.close()
            _launched.watch = None
        _launched.liveness = None
        liveness.stop()


def _arrival(name: str) -> asyncio.Event:
    event = _arrivals.get(name)
    if event is None:
        event = _arrivals[name] = asyncio.Event()
    return event


def sqlite_engine(url: str) -> Any:
    """A SQLAlchemy engine for DBOS's system database on SQLite (``url`` is
    ``sqlite:///<path>``): DBOS's own, in WAL mode with ``synchronous=NORMAL``, and able
    to run DBOS's schema on SQLite before 3.42. Pass it as DBOS's
    ``system_database_engine`` (an application that configures DBOS itself, ``dbos=``,
    wants it too); ``durable.DBOS`` and ``durable.Approvals`` use it on SQLite.

    - DBOS's own engine keeps SQLite's defaults, a rollback journal and
      ``synchronous=FULL``: several fsyncs per commit (about 5 ms each here), and a
      durable call commits three times. In WAL mode with ``NORMAL``, a commit survives
      the process being killed (what durable.md promises); only a power cut or an OS
      crash can lose the last commits. Postgres is the answer for machine failures.
    - On Python 3.12 and later, DBOS's schema takes its timestamps from
      ``unixepoch('subsec')``, which SQLite has only from 3.42: on an older SQLite (a
      Python built against the system's, as pyenv builds are) it is NULL, and DBOS fails
      to launch. The engine then defines ``unixepoch`` for that one argument.
    - The rest is what DBOS's own engine sets on each connection.
    """
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    old = sqlite3.sqlite_version_info < (3, 42)

    @sa.event.listens_for(engine, "connect")
    def configure(connection: Any, record: Any) -> None:
        connection.isolation_level = "IMMEDIATE"  # DBOS serializes writers this way
        connection.execute("PRAGMA busy_timeout=30000")
        connection.execute("PRAGMA foreign_keys=ON")
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        if old:
            connection.create_function("unixepoch", 1, _unixepoch)

    return engine


def _unixepoch(value: Any) -> float | int | None:
    """SQLite's ``unixepoch(x)`` for what DBOS's schema asks (``'subsec'``: now, with its
    fraction), and ``'now'`` or a number."""
    if value == "subsec":
        return time.time()
    if value == "now":
        return int(time.time())
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def _outside(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """Run ``coro`` outside the current workflow: DBOS would record it as a step there."""
    return asyncio.get_running_loop().create_task(coro, context=contextvars.Context())


def _identity(value: T) -> T:
    return value


