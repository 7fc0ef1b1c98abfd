"""The Temporal workflows of ``durable.Temporal``: a durable step's (its record, nothing
else), and a person's answer to one of its tickets.

It runs in Temporal's workflow sandbox, so it imports only ``temporalio`` and the
standard library, and holds no policy: the step itself (the scheduler's driver, the
pipeline, the bodies) runs in one activity, ``toolrail.step.<engine name>``, which
records through this workflow's updates and reads the record back through its query
when a retry of the activity resumes the step on another worker.

Its memo is what a process with no worker reads: ``calls`` (the digest of the step's
calls, set at start), and its tickets: ``asked`` (index -> request), ``answers`` (index
-> a person's answer: outcome, who, when) and ``withdrawn`` (indexes whose call was
settled without an answer).

Every key is a ``str``: Temporal's JSON converter would turn ``int`` keys into
strings on the way back.

An answer is a workflow of its own (``Answer``), started once per ticket: its ID is the
ticket's, and Temporal starts a workflow ID once, with no worker running.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.workflow import ActivityCancellationType

__all__ = ["ANSWER", "HEARTBEAT", "KINDS", "Answer", "Step"]

KINDS = ("mark", "dispatch", "result")  # the record kinds besides the approvals
HEARTBEAT = timedelta(seconds=2)  # a dead worker's step moves to a live one after this
# An answer's workflow ID is this and its ticket. A step's is "<name>:<step_id>", with no
# "/" before its first ":" (a name has none): the two never collide.
ANSWER = "toolrail/answer:"


@workflow.defn(name="toolrail.step")
class Step:
    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS}
        self.asked: dict[str, dict[str, Any]] = {}  # index -> the request as first asked
        self.answers: dict[str, dict[str, Any]] = {}  # index -> outcome, answered_by, _at
        self.withdrawn: set[str] = set()
        self.activity: workflow.ActivityHandle[Any] | None = None
        self.cancelled = False
        self.attempt = 0  # the newest activity attempt that claimed the step

    @workflow.run
    async def run(self, engine: str, step_id: str, calls: list[Any],
                  max_parallel: int) -> dict[str, Any]:
        fresh = True
        while True:
            # the first activity's first attempt finds the record empty, with no attempt
            # before it to fence off: it skips the claim (``fresh``)
            self.activity = workflow.start_activity(
                f"toolrail.step.{engine}", args=[workflow.info().workflow_id, step_id, calls,
                                                 max_parallel, self.cancelled, fresh],
                start_to_close_timeout=timedelta(days=3650), heartbeat_timeout=HEARTBEAT,
                retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200),
                                         maximum_interval=timedelta(seconds=5)),
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED)
            try:
                out: dict[str, Any] = await self.activity
                return out
            except ActivityError as exc:
                # Cancelled before it started: run it again, told so, and it commits
                # every call as cancelled (a step's batch always has its results).
                if not (self.cancelled and isinstance(exc.cause, CancelledError)):
                    raise
                fresh = False

    @workflow.update
    def claim(self, attempt: int) -> dict[str, Any]:
        """An activity attempt takes the step over: records from older attempts are
        refused from now on (a superseded attempt that still runs starts nothing more).
        The record as it stands."""
        self.attempt = max(self.attempt, attempt)
        return self.state()

    @workflow.update
    def record(self, kind: str, index: str, data: Any, attempt: int) -> Any:
        """Record ``data`` once; an approval request returns the one first asked. (The
        activity records its markers, dispatch outcomes and results with ``record_many``;
        histories written before it still replay through this.)"""
        if kind == "ask":
            first = self.asked.setdefault(index, data)
            self._publish()
            return first
        self.records[kind].setdefault(index, data)
        return None

    @record.validator
    def _current(self, kind: str, index: str, data: Any, attempt: int) -> None:
        """Refuse an older attempt's records. A refusal, unlike a failed update, is not
        kept: a newer attempt's record with the same update ID is not answered with it."""
        self._refuse_superseded(attempt)

    @workflow.update
    def record_many(self, entries: list[list[Any]], attempt: int) -> None:
        """Record each ``[kind, index, data]`` of ``entries`` once, as ``record`` does:
        the records an attempt asked for while its previous group was being written."""
        for kind, index, data in entries:
            self.records[kind].setdefault(index, data)

    @record_many.validator
    def _current_many(self, entries: list[list[Any]], attempt: int) -> None:
        self._refuse_superseded(attempt)

    def _refuse_superseded(self, attempt: int) -> None:
        if attempt < self.attempt:
            raise ApplicationError(f"attempt {attempt} was superseded", non_retryable=True)

    @workflow.update(unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON)
    async def answer_of(self, index: str) -> dict[str, Any]:
        """The answer to approval ``index``, once a person gave it (``cancelled`` once it
        was withdrawn). A step that ends with one still waiting (its activity's attempt
        died waiting) abandons it."""
        await workflow.wait_condition(
            lambda: index in self.answers or index in self.withdrawn)
        return self._answer(index)

    @workflow.signal
    def answer(self, index: str, answer: dict[str, Any]) -> None:
        """A person's answer (``outcome``, ``answered_by``, ``answered_at``); the first one
        counts, and none counts for a ticket withdrawn."""
        if index in self.asked and index not in self.answers and index not in self.withdrawn:
            self.answers[index] = answer
            self._publish()

    @workflow.update
    def withdraw(self, index: str) -> None:
        """Approval ``index`` is no longer asked: its call was settled without an answer.
        Withdrawing it again, or once answered, does nothing."""
        if index not in self.answers and index not in self.withdrawn:
            self.withdrawn.add(index)
            self._publish()

    @workflow.signal
    def cancel(self) -> None:
        """Cancel the step: its activity's cancellation fires the batch signal (one not
        started yet starts cancelled)."""
        self.cancelled = True
        if self.activity is not None:
            self.activity.cancel()

    @workflow.query
    def state(self) -> dict[str, Any]:
        """The record: what ``_temporal._TemporalRecord`` reads when an attempt claims the
        step."""
        return {"records": self.records, "asked": sorted(self.asked),
                "answers": {i: self._answer(i) for i in self.answers}}

    def _answer(self, index: str) -> dict[str, Any]:
        """A person's answer to ``index`` with the digest of the call they saw."""
        answer = self.answers.get(index, {"outcome": "cancelled"})  # else it was withdrawn
        return {"outcome": answer["outcome"], "digest": self.asked[index]["digest"],
                "answered_by": answer.get("answered_by"),
                "answered_at": answer.get("answered_at")}

    def _publish(self) -> None:
        """The memo ``pending()`` and ``resume()`` read, with no worker running."""
        workflow.upsert_memo({"asked": self.asked, "answers": self.answers,
                              "withdrawn": sorted(self.withdrawn)})


@workflow.defn(name="toolrail.answer")
class Answer:
    """A person's answer to one ticket, whose workflow ID is ``ANSWER`` and the ticket:
    starting it is what makes the answer the ticket's one (``Temporal.resume``). It sends
    the answer to the step's workflow, which ``resume`` did too unless it died first (the
    step keeps the first answer, and these are one), and ends: ``True`` if the step was
    there to take it. Its memo holds the answer, for ``pending()`` until the step has it."""

    @workflow.run
    async def run(self, step: str, index: str, answer: dict[str, Any]) -> bool:
        try:
            await workflow.get_external_workflow_handle(step).signal("answer",
                                                                     args=[index, answer])
        except ApplicationError:  # the step has ended: nothing can take the answer in
            return False
        return True
