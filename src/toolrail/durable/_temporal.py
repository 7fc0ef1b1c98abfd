"""``durable.Temporal``: durable steps and approvals on Temporal (durable.md).

A step is a Temporal workflow (``_temporal_workflow.Step``) whose ID is
``"<name>:<step_id>"``. The workflow holds the step's record and runs one activity,
``toolrail.step.<name>``: the scheduler's own driver over the registry, as on DBOS,
recording through the workflow's updates, in groups (``_Groups``). The activity
heartbeats from a thread of its own, so that a body blocking the event loop does not
read as a dead worker; when its worker dies, Temporal retries it on a live worker after
``HEARTBEAT``, and the retry reads the record back (the workflow's ``claim``) and
resumes the step (``_journal``).

An approval is recorded in the workflow and listed in its memo. A person's answer is a
workflow of its own (``_temporal_workflow.Answer``) whose ID is the ticket's: ``resume``
starts it, which takes no worker and succeeds once per ticket, then signals the answer to
the step's workflow, as the answer's workflow does again when a worker runs it (in case
``resume`` died in between). The step's workflow keeps the first answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from temporalio import activity
from temporalio.api.errordetails.v1 import WorkflowNotReadyFailure
from temporalio.bridge.proto import ActivityHeartbeat
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from .._model.cancel import CancelSignal
from .._model.decisions import ApprovalOutcome
from .._model.tool import ToolCall
from .._scheduling.scheduler import Batch
from ._codec import Data, batch_from_data, batch_to_data, call_from_data
from ._journal import DurableApprover, GroupCommit, Record, StepJournal
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
from ._temporal_workflow import ANSWER, HEARTBEAT, KINDS, Answer, Step

if TYPE_CHECKING:
    from .._registry.registry import ToolRegistry

__all__ = ["Temporal"]

_TASK_TIMEOUT: Final = timedelta(seconds=2)
_UNREACHABLE: Final = frozenset({RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED,
                                 RPCStatusCode.CANCELLED, RPCStatusCode.RESOURCE_EXHAUSTED})


class Temporal:
    """Durable steps of ``registry`` on Temporal; see durable.md.

    ``client`` is a connected ``temporalio.client.Client``; ``task_queue`` is where the
    steps run: ``worker()`` is a ``Worker`` for it, to run in this process or on other
    machines (each with the same registry). ``idempotent`` and ``approver`` are as for
    ``durable.DBOS``."""

    def __init__(self, registry: ToolRegistry, client: Client, *, name: str,
                 task_queue: str, idempotent: Iterable[str] = (),
                 approver: DurableApprover | None = None) -> None:
        if not isinstance(name, str) or not name or ":" in name or "/" in name:
            raise ValueError(f"name must be a non-empty str without ':' or '/', got {name!r}")
        if isinstance(idempotent, str):
            raise TypeError("idempotent must be an iterable of tool names, not a str")
        self.registry = registry
        self.client = client
        self.name = name
        self.task_queue = task_queue
        self.idempotent = frozenset(idempotent)
        self.approver = approver
        # Visibility narrows the steps to the name's plain leading characters (no quote or
        # LIKE wildcard to escape); pending() checks the whole prefix itself.
        plain = re.match(r"[A-Za-z0-9.-]*", name)
        assert plain is not None
        self._steps = "WorkflowType='toolrail.step'" + (
            f" AND WorkflowId STARTS_WITH '{plain[0]}'" if plain[0] else "")
        self._answers = ("WorkflowType='toolrail.answer' AND ExecutionStatus='Running' AND "
                         f"WorkflowId STARTS_WITH '{ANSWER}{plain[0]}'")

    def worker(self, **options: Any) -> Worker:
        """A ``temporalio.worker.Worker`` that runs this engine's steps; ``options`` go to
        it. By default a workflow cached by a worker that died moves to another worker
        after 1 s (``sticky_queue_schedule_to_start_timeout``; Temporal's default is 10 s),
        and toolrail passes through Temporal's workflow sandbox (the workflow imports none
        of it, and would otherwise re-import it on every run)."""
        worker: Worker | None = None  # the step's heartbeats go through it

        @activity.defn(name=f"toolrail.step.{self.name}")
        async def step(workflow_id: str, step_id: str, calls: list[Data], max_parallel: int,
                       cancelled: bool, fresh: bool = False) -> Data:
            assert worker is not None
            with _heartbeating(worker):
                return await self._activity(workflow_id, step_id, calls, max_parallel,
                                            cancelled, fresh)

        options.setdefault("sticky_queue_schedule_to_start_timeout", timedelta(seconds=1))
        options.setdefault("workflow_runner", SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("toolrail")))
        worker = Worker(self.client, task_queue=self.task_queue, workflows=[Step, Answer],
                        activities=[step], **options)
        if not hasattr(worker, "_bridge_worker"):
            raise RuntimeError("this temporalio's Worker has no _bridge_worker, through which "
                               "toolrail's steps heartbeat off the event loop (temporalio "
                               "1.35 has it)")
        return worker

    async def run(self, step_id: str, calls: Iterable[ToolCall], *, max_parallel: int = 10,
                  signal: CancelSignal | None = None) -> Batch:
        """``registry.run(calls)`` as a durable step named ``step_id``, run by this
        engine's workers; running it again returns its recorded ``Batch``, and running it
        with other calls raises ``ValueError`` at once. ``signal`` cancels the step (the
        activity's cancellation fires the batch signal)."""
        _, data = checked_step(step_id, calls, max_parallel, signal)
        digest = calls_digest(data)
        handle = await self._started(step_id, data, digest, max_parallel)
        sent: list[asyncio.Future[None]] = []  # held: a task nobody holds may be collected

        def cancel() -> None:
            sent.append(asyncio.ensure_future(handle.signal("cancel")))

        unhook = None if signal is None else signal.add_callback(cancel)
        try:
            out: Data = await handle.result()
        finally:
            if unhook is not None:
                unhook()
        if out["calls"] != digest:  # a step started with no digest in its memo
            raise other_calls(step_id)
        return batch_from_data(out["batch"])

    async def _started(self, step_id: str, data: list[Data], digest: str,
                       max_parallel: int) -> WorkflowHandle[Any, Any]:
        """The step's workflow: started now, or the one that runs or ran under
        ``step_id`` (joined, or read), once its memo says it has these calls."""
        workflow_id = f"{self.name}:{step_id}"
        try:
            return await self.client.start_workflow(
                "toolrail.step", args=[self.name, step_id, data, max_parallel],
                id=workflow_id, task_queue=self.task_queue, memo={"calls": digest},
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                # a workflow task is a few ms of bookkeeping: one a dead worker had taken
                # is retried on a live one after this, not after Temporal's default 10 s
                task_timeout=_TASK_TIMEOUT)
        except WorkflowAlreadyStartedError:
            handle = self.client.get_workflow_handle(workflow_id)
        memo = await (await handle.describe()).memo()
        if memo.get("calls", digest) != digest:
            raise other_calls(step_id)
        return handle

    async def pending(self, *, history: bool = False) -> list[PendingApproval]:
        """This engine's waiting approvals, oldest first; with ``history``, also those
        answered or withdrawn, of running and finished steps. One visibility query (which
        lags the workflows by a moment), and one more for the answers no worker has run
        yet (their tickets are answered, not waiting), no worker needed."""
        query = self._steps if history else f"{self._steps} AND ExecutionStatus='Running'"
        prefix = f"{self.name}:"
        out: list[PendingApproval] = []
        try:
            # first: an answer's workflow that has ended by then signalled its step before
            # the steps are listed
            undelivered = await self._undelivered()
            async for execution in self.client.list_workflows(query):
                if execution.id.startswith(prefix):
                    running = execution.status is WorkflowExecutionStatus.RUNNING
                    out += _tickets(dict(await execution.memo()), running, history,
                                    undelivered)
        except RPCError as exc:
            raise _engine_error(exc) from exc
        return sorted(out, key=lambda p: p.asked_at)

    async def _undelivered(self) -> dict[str, Data]:
        """The answers whose workflow has not run yet, by ticket."""
        prefix = f"{ANSWER}{self.name}:"
        return {execution.id.removeprefix(ANSWER): (await execution.memo())["answer"]
                async for execution in self.client.list_workflows(self._answers)
                if execution.id.startswith(prefix)}

    async def resume(self, ticket: str, outcome: ApprovalOutcome | str, *,
                     answered_by: str | None = None) -> None:
        """Answer approval ``ticket`` once, with no worker needed, recording who answered
        and when. ``KeyError`` for an unknown ticket; ``ValueError`` for one answered
        already (even if no worker has taken the first answer in yet), or withdrawn (its
        call was settled without an answer, or its step ended), or an outcome that is not
        one; ``ConnectionError`` when Temporal cannot be reached. Of two answers racing,
        the first to start its workflow is the answer, and the other raises
        ``ValueError``."""
        answer = answer_of(checked_answer(ticket, outcome, answered_by), answered_by)
        workflow_id, _, index = ticket.rpartition("/")
        if not workflow_id.startswith(f"{self.name}:") or not index.isdigit():
            raise KeyError(ticket)
        handle = self.client.get_workflow_handle(workflow_id)
        try:
            await _unsettled(handle, ticket, index)
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise KeyError(ticket) from None
            raise _engine_error(exc) from exc
        await self._recorded(ticket, workflow_id, index, answer)
        await _delivered(handle, ticket, index, answer)

    async def _recorded(self, ticket: str, workflow_id: str, index: str,
                        answer: Data) -> None:
        """Start the ticket's answer workflow: the answer is the ticket's from then on,
        and a second start raises."""
        try:
            await self.client.start_workflow(
                "toolrail.answer", args=[workflow_id, index, answer], id=f"{ANSWER}{ticket}",
                task_queue=self.task_queue, memo={"answer": answer},
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                task_timeout=_TASK_TIMEOUT)
        except WorkflowAlreadyStartedError:
            raise already_answered(ticket) from None
        except RPCError as exc:
            raise _engine_error(exc) from exc

    async def _activity(self, workflow_id: str, step_id: str, calls: list[Data],
                        max_parallel: int, cancelled: bool, fresh: bool) -> Data:
        """The step, in its activity: the driver over the record the workflow holds. The
        step's first attempt (``fresh``) has nothing to read and no attempt before it to
        fence off, so it does not claim the step."""
        handle = self.client.get_workflow_handle(workflow_id)
        info = activity.info()
        groups = _Groups(handle, info.attempt, f"{info.activity_id}.{info.attempt}")
        try:
            if fresh and info.attempt == 1:
                state: Data = {"records": {kind: {} for kind in KINDS}, "asked": [],
                               "answers": {}}
            else:
                state = await groups.update("claim", [info.attempt])
            record = _TemporalRecord(groups, state)
            batch = await self._driven(record, step_id, workflow_id, calls, max_parallel,
                                       cancelled)
        finally:
            await groups.close()  # an attempt that ends early records nothing more
        return {"calls": calls_digest(calls), "batch": batch_to_data(batch)}

    async def _driven(self, record: _TemporalRecord, step_id: str, workflow_id: str,
                      calls: list[Data], max_parallel: int, cancelled: bool) -> Batch:
        """The step's batch: the scheduler's driver run over ``record``, once every
        record it asked for is written."""
        listed = [call_from_data(d) for d in calls]
        core = self.registry._core
        journal = StepJournal(core, step_id, workflow_id, record, self.idempotent,
                              self.approver)
        driver = journal.make_driver(listed, [c.scope for c in listed], max_parallel, None)
        if cancelled:  # cancelled before this activity started
            driver.cancel("the step was cancelled")

        async def drive() -> None:
            await driver.run()
            await record.groups.drain()

        with core.approving(journal.approve):  # the context the driver's task copies
            running = asyncio.ensure_future(drive())
        while True:
            try:
                await asyncio.shield(running)
                break
            except asyncio.CancelledError:
                if running.done():
                    raise
                if activity.cancellation_details() is None or _attempt_over():
                    # this attempt is over (timed out, superseded, its worker stopping):
                    # another one resumes the step from the record, so stop here and
                    # record nothing more
                    running.cancel()
                    await asyncio.wait([running])
                    raise
                # the step was cancelled: its batch signal, as registry.run's would
                driver.cancel("the step was cancelled")
        return driver.final()


@contextlib.contextmanager
def _heartbeating(worker: Worker) -> Iterator[None]:
    """Tell Temporal that the step's worker lives, from a thread of its own, for as long
    as the block runs. A body that blocks the event loop (sync I/O in an ``async def``)
    then does not read as a dead worker, as it did with ``activity.heartbeat()``, which
    needs the loop. The thread records into the worker's core (its Rust side, which is
    thread-safe and sends heartbeats from its own threads); a cancellation the server
    answers with still reaches the activity through the loop."""
    beat = ActivityHeartbeat(task_token=activity.info().task_token)
    core = worker._bridge_worker  # temporalio's own record, minus the loop
    core.record_activity_heartbeat(beat)  # here: a failure to beat fails the attempt loudly
    stop = threading.Event()
    every = HEARTBEAT.total_seconds() / 4  # the core sends one per 0.8 x HEARTBEAT

    def beating() -> None:
        while not stop.wait(every):
            try:
                core.record_activity_heartbeat(beat)
            except Exception:  # the worker is shutting down: the attempt ends with it
                return

    thread = threading.Thread(target=beating, name="toolrail-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _tickets(memo: Data, running: bool, history: bool,
             undelivered: dict[str, Data]) -> list[PendingApproval]:
    """One step's tickets, from its memo: those waiting, and with ``history`` also those
    answered or withdrawn (one its step ended without answering is withdrawn). A ticket
    whose answer no worker has run yet (in ``undelivered``) is answered."""
    answers = memo.get("answers", {})
    gone = memo.get("withdrawn", ())
    out = []
    for index, request in memo.get("asked", {}).items():
        answer = answers.get(index)
        if answer is None and running and index not in gone:
            answer = undelivered.get(request["ticket"])
            if answer is None:
                out.append(pending_approval(request))
                continue
        if history:
            out.append(pending_approval(request, answer, WITHDRAWN))
    return out


async def _unsettled(handle: WorkflowHandle[Any, Any], ticket: str, index: str) -> None:
    """Raise unless the step's memo says ``ticket`` waits for an answer. (An answer whose
    workflow started but has not reached the step yet is refused by its start.)"""
    description = await handle.describe()
    memo = await description.memo()
    if index in memo.get("answers", {}):
        raise already_answered(ticket)
    if index in memo.get("withdrawn", ()):
        raise withdrawn(ticket)
    if index not in memo.get("asked", {}):
        raise KeyError(ticket)
    if description.status is not WorkflowExecutionStatus.RUNNING:
        raise withdrawn(ticket)  # its step ended without taking an answer in


async def _delivered(handle: WorkflowHandle[Any, Any], ticket: str, index: str,
                     answer: Data) -> None:
    """Signal a recorded answer to its step, now rather than when a worker runs its
    workflow (a signal is stored with no worker running); raise if the step withdrew the
    ticket since ``_unsettled`` read it, or ended without taking an answer in. The answer
    is the ticket's whatever happens here: a failed request leaves it to its workflow."""
    try:
        with contextlib.suppress(RPCError):  # NOT_FOUND: the step ended, read below
            await handle.signal("answer", args=[index, answer])
        description = await handle.describe()
        memo = await description.memo()
    except RPCError:
        return
    if index in memo.get("answers", {}):
        return
    if (index in memo.get("withdrawn", ())
            or description.status is not WorkflowExecutionStatus.RUNNING):
        raise withdrawn(ticket)  # the step dropped the answer, or never took it in


async def _execute_update(handle: WorkflowHandle[Any, Any], name: str, args: list[Any],
                          update_id: str | None = None) -> Any:
    """``handle.execute_update``, sent again for as long as Temporal refuses it because a
    workflow task of the step is being retried (until a worker completes one). One is,
    for instance, when a body that blocked the worker's event loop delayed the workflow
    task past its timeout."""
    delay = 0.02
    while True:
        try:
            return await handle.execute_update(name, args=args, id=update_id)
        except RPCError as exc:
            details = exc.grpc_status.details
            if not (exc.status is RPCStatusCode.FAILED_PRECONDITION and details
                    and details[0].Is(WorkflowNotReadyFailure.DESCRIPTOR)):
                raise
        await asyncio.sleep(delay)  # a backoff, not a wait for an event: Temporal has none
        delay = min(2 * delay, 1.0)


def _engine_error(exc: RPCError) -> Exception:
    """A failed Temporal request as a builtin error: ``ConnectionError`` when Temporal
    could not be reached in time (worth a retry), ``RuntimeError`` otherwise."""
    if exc.status in _UNREACHABLE:
        return ConnectionError(f"Temporal could not be reached: {exc.message}")
    return RuntimeError(f"Temporal refused the request: {exc.message}")


class _Groups(GroupCommit):
    """The records of one activity attempt on their way to the step's workflow, written
    in groups (``GroupCommit``, as DBOS's are): each ``record_many`` update holds the
    records asked for while the one before it was under way (the ten markers of ten
    parallel calls are one update). The step's record and its programs' share it.

    Each group's update ID is the attempt's (its activity's ID and attempt number) and
    the group's number in it, so a retried update is a no-op; the workflow applies each
    record once (``setdefault``) and refuses a superseded attempt's, which cancels the
    calls waiting on it. After an update fails, nothing more is sent: the attempt fails
    at ``drain``, and a retry resumes the step from what the workflow holds."""

    def __init__(self, handle: WorkflowHandle[Any, Any], attempt: int, tag: str) -> None:
        super().__init__(self._record_many, _cancels)
        self.handle = handle
        self.attempt = attempt
        self._tag = tag

    async def _record_many(self, entries: list[Any], number: int) -> None:
        await _execute_update(self.handle, "record_many", [entries, self.attempt],
                              f"records/{self._tag}/{number}")

    async def update(self, name: str, args: list[Any], update_id: str | None = None) -> Any:
        """A workflow update; a cancelled one, or one the workflow refused because a newer
        attempt took the step over, as the cancellation it is (so that the pipeline
        records nothing of it)."""
        try:
            return await _execute_update(self.handle, name, args, update_id)
        except Exception as exc:
            if _cancels(exc):
                raise asyncio.CancelledError from None
            raise


class _TemporalRecord(Record):
    """A step's record in its Temporal workflow, written through ``_Groups`` and read
    back, by a retry, from the ``claim`` update.

    The marker and the dispatch outcome are waited for; the result is not (``commit``).
    The activity drains the groups before it returns."""

    def __init__(self, groups: _Groups, state: Data, prefix: str = "") -> None:
        super().__init__()
        self.groups = groups
        self.state = state
        self.prefix = prefix  # "" for the step's calls; "<i>." for call i's program's
        records = state["records"]
        self.approvals = {int(i): a for i, a in state["answers"].items()}
        self.asked = {int(i) for i in state["asked"]}
        self.marked = {int(k) for i in records["mark"] if (k := self._own(i)) is not None}
        self.dispatched = {int(k): d for i, d in records["dispatch"].items()
                           if (k := self._own(i)) is not None}
        self.results = {int(k): r for i, r in records["result"].items()
                        if (k := self._own(i)) is not None}

    def _own(self, key: str) -> str | None:
        """The index in ``key`` if it is one of this record's (a program's keys are
        ``"<i>.<j>"``)."""
        if not key.startswith(self.prefix):
            return None
        rest = key[len(self.prefix):]
        return rest if rest.isdigit() else None

    def program(self, index: int) -> Record:
        state = {"records": self.state["records"], "asked": [], "answers": {}}
        return _TemporalRecord(self.groups, state, f"{self.prefix}{index}.")

    async def ask(self, index: int, request: Data) -> Data:
        key = str(index)
        groups = self.groups
        await groups.update("record", ["ask", key, request, groups.attempt], f"ask/{key}")
        # the answer to the request as first asked: its digest is the one shown
        answer: Data = await groups.update("answer_of", [key])
        self.approvals[index] = answer
        return answer

    async def withdraw(self, index: int) -> None:
        key = f"{self.prefix}{index}"
        await self.groups.update("withdraw", [key], f"withdraw/{key}")

    async def mark(self, index: int) -> None:
        await self.groups.wait([KINDS[0], f"{self.prefix}{index}", True])
        self.marked.add(index)

    async def dispatch(self, index: int, outcome: Data) -> None:
        await self.groups.wait([KINDS[1], f"{self.prefix}{index}", outcome])
        self.dispatched[index] = outcome

    async def commit(self, index: int, result: Data) -> None:
        # Not waited for: nothing depends on it but a rerun's replay, and the observers
        # have seen the result already (an attempt that dies before it is written
        # notifies them again: durable.md's at-least-once). It joins the next group.
        self.groups.write([KINDS[2], f"{self.prefix}{index}", result])
        self.results[index] = result


def _cancels(exc: BaseException) -> bool:
    """Whether a failed update is a cancellation: cancelled itself, or refused because a
    newer attempt took the step over."""
    return isinstance(exc, WorkflowUpdateRPCTimeoutOrCancelledError) or (
        isinstance(exc, WorkflowUpdateFailedError) and "was superseded" in str(exc.cause))


def _attempt_over() -> bool:
    """Whether this activity attempt is ending for a reason other than a requested
    cancellation of the step (timed out, superseded, its worker stopping)."""
    details = activity.cancellation_details()
    return details is not None and not details.cancel_requested
