"""``durable.Temporal``: durable steps and approvals on Temporal (durable.md).

A step is a Temporal workflow (``_temporal_workflow.Step``) whose ID is
``"<name>:<step_id>"``. The workflow holds the step's record and runs one activity,
``toolrail.step.<name>``: the scheduler's own driver over the registry, as on DBOS,
recording through the workflow's updates. The activity heartbeats; when its worker
dies, Temporal retries it on a live worker after ``HEARTBEAT``, and the retry reads the
record back through the workflow's query and resumes the step (``_journal``).

An approval is recorded in the workflow and listed in its memo; a person's answer is a
signal, which the server stores with no worker running.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from temporalio import activity
from temporalio.client import (
    Client,
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
from ._journal import DurableApprover, Record, StepJournal
from ._shared import PendingApproval, calls_digest, checked_step, pending_approval
from ._temporal_workflow import HEARTBEAT, KINDS, Step

if TYPE_CHECKING:
    from .._registry.registry import ToolRegistry

__all__ = ["Temporal"]

_TASK_TIMEOUT: Final = timedelta(seconds=2)
_RUNNING: Final = "WorkflowType='toolrail.step' AND ExecutionStatus='Running'"


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

    def worker(self, **options: Any) -> Worker:
        """A ``temporalio.worker.Worker`` that runs this engine's steps; ``options`` go to
        it. By default a workflow cached by a worker that died moves to another worker
        after 1 s (``sticky_queue_schedule_to_start_timeout``; Temporal's default is 10 s),
        and toolrail passes through Temporal's workflow sandbox (the workflow imports none
        of it, and would otherwise re-import it on every run)."""
        @activity.defn(name=f"toolrail.step.{self.name}")
        async def step(workflow_id: str, step_id: str, calls: list[Data], max_parallel: int,
                       cancelled: bool) -> Data:
            return await self._activity(workflow_id, step_id, calls, max_parallel, cancelled)

        options.setdefault("sticky_queue_schedule_to_start_timeout", timedelta(seconds=1))
        options.setdefault("workflow_runner", SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("toolrail")))
        return Worker(self.client, task_queue=self.task_queue, workflows=[Step],
                      activities=[step], **options)

    async def run(self, step_id: str, calls: Iterable[ToolCall], *, max_parallel: int = 10,
                  signal: CancelSignal | None = None) -> Batch:
        """``registry.run(calls)`` as a durable step named ``step_id``, run by this
        engine's workers; running it again returns its recorded ``Batch``. ``signal``
        cancels the step (the activity's cancellation fires the batch signal)."""
        _, data = checked_step(step_id, calls, max_parallel, signal)
        workflow_id = f"{self.name}:{step_id}"
        handle: WorkflowHandle[Any, Any]
        try:  # a step running (recovered, or elsewhere) is joined; a finished one read
            handle = await self.client.start_workflow(
                "toolrail.step", args=[self.name, step_id, data, max_parallel],
                id=workflow_id, task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                # a workflow task is a few ms of bookkeeping: one a dead worker had taken
                # is retried on a live one after this, not after Temporal's default 10 s
                task_timeout=_TASK_TIMEOUT)
        except WorkflowAlreadyStartedError:
            handle = self.client.get_workflow_handle(workflow_id)
        sent: list[asyncio.Future[None]] = []  # held: a task nobody holds may be collected

        def cancel() -> None:
            sent.append(asyncio.ensure_future(handle.signal("cancel")))

        unhook = None if signal is None else signal.add_callback(cancel)
        try:
            out: Data = await handle.result()
        finally:
            if unhook is not None:
                unhook()
        if out["calls"] != calls_digest(data):
            raise ValueError(f"step {step_id!r} was already run with other calls")
        return batch_from_data(out["batch"])

    async def pending(self) -> list[PendingApproval]:
        """This engine's waiting approvals, oldest first: one visibility query (which
        lags the workflows by a moment), no worker needed."""
        out = []
        prefix = f"{self.name}:"
        async for execution in self.client.list_workflows(_RUNNING):
            if execution.id.startswith(prefix):
                memo = await execution.memo()
                out += [pending_approval(request) for request in memo.get("pending", ())]
        return sorted(out, key=lambda p: p.asked_at)

    async def resume(self, ticket: str, outcome: ApprovalOutcome | str) -> None:
        """Answer approval ``ticket`` once, with no worker needed: ``KeyError`` for an
        unknown ticket, ``ValueError`` for one already answered (or an outcome that is
        not one). Of two answers racing, the workflow keeps the first."""
        if not isinstance(ticket, str):
            raise TypeError(f"ticket must be a str, got {type(ticket).__name__}")
        answer = ApprovalOutcome(outcome)  # ValueError: not an outcome
        workflow_id, _, index = ticket.rpartition("/")
        if not workflow_id.startswith(f"{self.name}:"):
            raise KeyError(ticket)
        handle = self.client.get_workflow_handle(workflow_id)
        try:
            memo = await (await handle.describe()).memo()
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise KeyError(ticket) from None
            raise
        if index in memo.get("answered", ()):
            raise ValueError(f"approval {ticket} was already answered")
        if not any(request["ticket"] == ticket for request in memo.get("pending", ())):
            raise KeyError(ticket)
        await handle.signal("answer", args=[index, answer.value])

    async def _activity(self, workflow_id: str, step_id: str, calls: list[Data],
                        max_parallel: int, cancelled: bool) -> Data:
        """The step, in its activity: the driver over the record the workflow holds."""
        handle = self.client.get_workflow_handle(workflow_id)
        attempt = activity.info().attempt
        state = await handle.execute_update("claim", args=[attempt])
        record = _TemporalRecord(handle, state, attempt)
        listed = [call_from_data(d) for d in calls]
        core = self.registry._core
        journal = StepJournal(core, step_id, workflow_id, record, self.idempotent,
                              self.approver)
        driver = journal.make_driver(listed, [c.scope for c in listed], max_parallel, None)
        if cancelled:  # cancelled before this activity started
            driver.cancel("the step was cancelled")
        with core.approving(journal.approve):  # the context the driver's task copies
            running = asyncio.ensure_future(driver.run())
        beat = asyncio.ensure_future(_heartbeats())
        try:
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
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
        return {"calls": calls_digest(calls), "batch": batch_to_data(driver.final())}


async def _heartbeats() -> None:
    """Tell Temporal the step's worker lives (and learn of a cancellation)."""
    every = HEARTBEAT.total_seconds() / 4
    while True:
        activity.heartbeat()
        await asyncio.sleep(every)


class _TemporalRecord(Record):
    """A step's record in its Temporal workflow: updates to write, a query to read."""

    def __init__(self, handle: WorkflowHandle[Any, Any], state: Data, attempt: int,
                 prefix: str = "") -> None:
        super().__init__()
        self.handle = handle
        self.state = state
        self.attempt = attempt
        self.prefix = prefix  # "" for the step's calls; "<i>." for call i's program's
        records = state["records"]
        self.approvals = {int(i): a for i, a in state["answers"].items()}
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
        return _TemporalRecord(self.handle, {"records": self.state["records"], "answers": {}},
                               self.attempt, f"{self.prefix}{index}.")

    async def ask(self, index: int, request: Data) -> Data:
        key = str(index)
        handle = self.handle
        await self._update("record", ["ask", key, request, self.attempt], f"ask/{key}")
        try:
            # the answer to the request as first asked: its digest is the one shown
            answer: Data = await self._update("answer_of", [key])
        except asyncio.CancelledError:
            if _attempt_over():
                raise  # the approval waits for the next attempt
            # the call's signal fired: nobody is asked any more
            await asyncio.shield(handle.execute_update("withdraw", args=[key]))
            raise
        self.approvals[index] = answer
        return answer

    async def mark(self, index: int) -> None:
        await self._record(KINDS[0], index, True)
        self.marked.add(index)

    async def dispatch(self, index: int, outcome: Data) -> None:
        await self._record(KINDS[1], index, outcome)
        self.dispatched[index] = outcome

    async def commit(self, index: int, result: Data) -> None:
        await self._record(KINDS[2], index, result)
        self.results[index] = result

    async def _record(self, kind: str, index: int, data: Any) -> None:
        key = f"{self.prefix}{index}"
        # the update's ID makes a retried record a no-op, as the workflow's setdefault does
        await self._update("record", [kind, key, data, self.attempt], f"{kind}/{key}")

    async def _update(self, name: str, args: list[Any], update_id: str | None = None) -> Any:
        """A workflow update; a cancelled one, or one the workflow refused because a newer
        attempt took the step over, as the cancellation it is (so that the pipeline
        records nothing of it)."""
        try:
            return await self.handle.execute_update(name, args=args, id=update_id)
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            raise asyncio.CancelledError from None
        except WorkflowUpdateFailedError as exc:
            if "was superseded" in str(exc.cause):
                raise asyncio.CancelledError from None
            raise


def _attempt_over() -> bool:
    """Whether this activity attempt is ending for a reason other than a requested
    cancellation of the step (timed out, superseded, its worker stopping)."""
    details = activity.cancellation_details()
    return details is not None and not details.cancel_requested

