"""durable.md on Temporal, with a worker in the test's process: the API and its errors."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import toolrail as tr
from durable_helpers import WAIT, Engine, Tools, calls, lines, texts
from toolrail import durable

pytestmark = pytest.mark.timeout(60)

_queues = iter(range(10**6))


@pytest.fixture
def tools() -> Tools:
    return Tools()


async def make(tools: Tools, server: str, **options: Any) -> Any:
    """An engine of a name and task queue of its own: its ``pending()`` lists only its
    test's tickets (the dev server is the session's)."""
    from temporalio.client import Client

    client = await Client.connect(server)
    n = next(_queues)
    return durable.Temporal(tools.registry, client, name=f"unit{n}",
                            task_queue=f"unit-{n}-{id(tools)}", **options)


@pytest.fixture
async def engine(tools: Tools, temporal_server: str) -> AsyncIterator[Any]:
    engine = await make(tools, temporal_server)
    async with engine.worker():
        yield engine


async def waiting(engine: Any, count: int = 1) -> list[durable.PendingApproval]:
    async with asyncio.timeout(WAIT):
        while len(pending := await engine.pending()) < count:  # noqa: ASYNC110 (visibility)
            await asyncio.sleep(0.02)
    return list(pending)


async def listed(engine: Any, status: str, count: int = 1) -> list[durable.PendingApproval]:
    """``pending(history=True)``'s tickets of ``status``, once there are ``count``
    (visibility lags the workflows by a moment)."""
    async with asyncio.timeout(WAIT):
        while True:
            tickets = [p for p in await engine.pending(history=True) if p.status == status]
            if len(tickets) >= count:
                return tickets
            await asyncio.sleep(0.02)


async def none_waiting(engine: Any) -> None:
    async with asyncio.timeout(WAIT):
        while await engine.pending():  # noqa: ASYNC110 (visibility lags)
            await asyncio.sleep(0.02)


async def test_a_step_runs_like_registry_run_and_running_it_again_returns_the_record(
        engine: Any, tools: Tools) -> None:
    step_id = f"s-{id(tools)}"
    plain = await tools.registry.run(calls("echo", "echo"))
    tools.ran.clear()
    batch = await engine.run(step_id, calls("echo", "echo"))
    assert batch == plain
    assert await engine.run(step_id, calls("echo", "echo")) == batch
    assert len(tools.ran) == 2
    with pytest.raises(ValueError, match=f"step '{step_id}' was already run with other calls"):
        await engine.run(step_id, calls("echo"))


async def test_an_approval_is_listed_resumed_and_answered_once(engine: Any,
                                                               tools: Tools) -> None:
    step_id = f"a-{id(tools)}"
    step = asyncio.ensure_future(engine.run(step_id, calls("echo", "delete")))
    (approval,) = await waiting(engine)
    assert (approval.ticket, approval.index, approval.tool_name, approval.status) == (
        f"{engine.name}:{step_id}/1", 1, "delete", "waiting")
    assert approval.arguments == tr.snapshot_json({"x": 1})
    with pytest.raises(ValueError, match="'maybe' is not a valid ApprovalOutcome"):
        await engine.resume(approval.ticket, "maybe")
    await engine.resume(approval.ticket, "rejected")
    batch = await step
    assert batch.results[1].error == tr.ErrorInfo('the user rejected tool "delete"', "DENIED",
                                                  None)
    with pytest.raises(ValueError, match=f"approval {approval.ticket} was already answered"):
        await engine.resume(approval.ticket, "allowed-once")
    assert tools.ran == [("echo", {"x": 0})]


async def test_resume_refuses_unknown_tickets_with_key_error_and_bad_arguments(
        engine: Any, tools: Tools) -> None:
    step_id = f"k-{id(tools)}"
    step = asyncio.ensure_future(engine.run(step_id, calls("echo", "delete")))
    (approval,) = await waiting(engine)
    for ticket in (f"{engine.name}:{step_id}/0",  # a call that asked nothing
                   f"{engine.name}:{step_id}/7", f"{engine.name}:{step_id}/x",
                   f"{engine.name}:no-such-step/0", f"other:{step_id}/1", "nonsense"):
        with pytest.raises(KeyError):
            await engine.resume(ticket, "allowed-once")
    with pytest.raises(TypeError, match="ticket must be a str, got int"):
        await engine.resume(7, "allowed-once")
    with pytest.raises(TypeError, match="answered_by must be a str or None, got int"):
        await engine.resume(approval.ticket, "allowed-once", answered_by=7)
    await engine.resume(approval.ticket, "allowed-once")
    assert [r.text for r in (await step).results] == ["echo 0", "delete 1"]


async def test_a_second_answer_with_no_worker_running_is_refused_and_the_first_recorded(
        tools: Tools, temporal_server: str) -> None:
    """With no worker, the workflow has not taken the first answer in (its memo still
    says waiting): the second is refused by its answer's workflow, which started once, and
    the first, with who gave it and when, is what the step runs and what the record and
    inbox hold."""
    seen: list[Any] = []
    tools.registry.on_result(lambda execution, result: seen.append(durable.answer(execution)))
    engine = await make(tools, temporal_server)
    step_id = f"twice-{id(tools)}"
    async with engine.worker():
        running = asyncio.ensure_future(engine.run(step_id, calls("echo", "delete")))
        (approval,) = await waiting(engine)
    before = time.time()
    await engine.resume(approval.ticket, "allowed-once", answered_by="ada")
    after = time.time()
    with pytest.raises(ValueError, match=f"approval {approval.ticket} was already answered"):
        await engine.resume(approval.ticket, "rejected", answered_by="bob")
    async with engine.worker():
        batch = await asyncio.wait_for(running, WAIT)
        handle = engine.client.get_workflow_handle(f"{engine.name}:{step_id}")
        state = await handle.query("state")  # a query needs a worker
    assert [r.text for r in batch.results] == ["echo 0", "delete 1"]
    assert tools.ran == [("echo", {"x": 0}), ("delete", {"x": 1})]
    answer = state["answers"]["1"]
    assert (answer["outcome"], answer["answered_by"]) == ("allowed-once", "ada")
    assert before <= answer["answered_at"] <= after
    assert seen == [None, durable.Answer(approval.ticket, tr.ApprovalOutcome.ALLOWED_ONCE,
                                         "ada", answer["answered_at"])]  # the observers'
    (answered,) = await listed(engine, "answered")
    assert (answered.ticket, answered.outcome, answered.answered_by, answered.answered_at) == (
        approval.ticket, tr.ApprovalOutcome.ALLOWED_ONCE, "ada", answer["answered_at"])
    assert await engine.pending() == []
    with pytest.raises(ValueError, match=f"approval {approval.ticket} was already answered"):
        await engine.resume(approval.ticket, "rejected")  # the step has finished


async def test_a_step_cancelled_by_its_signal_aborts_the_rest_and_withdraws_the_approval(
        engine: Any, tools: Tools) -> None:
    controller = tr.CancelController()
    step = asyncio.ensure_future(engine.run(f"c-{id(tools)}", calls("delete"),
                                            signal=controller.signal))
    (approval,) = await waiting(engine)
    controller.cancel("the user left")
    batch = await step
    assert batch.cancelled
    error = batch.results[0].error
    assert error is not None
    assert error.code == "ABORTED_BEFORE_DISPATCH"
    await none_waiting(engine)
    (gone,) = await listed(engine, "withdrawn")
    assert (gone.ticket, gone.outcome, gone.answered_by) == (approval.ticket, None, None)
    with pytest.raises(ValueError, match=f"approval {approval.ticket} was withdrawn: its "
                                         "call was settled without an answer"):
        await engine.resume(approval.ticket, "allowed-once")


async def test_a_ticket_whose_tool_is_gone_at_the_rerun_is_withdrawn(
        tools: Tools, temporal_server: str) -> None:
    remove = tools.registry.register(tr.Tool(
        name="drop", description="Drop x.", parameters={"type": "object"},
        execute=lambda arguments, ctx: "dropped", requires_approval=True))
    engine = await make(tools, temporal_server)
    step = [tr.ToolCall(call_id="c0", name="drop", arguments={"x": 0})]
    async with engine.worker():
        running = asyncio.ensure_future(engine.run(f"gone-{id(tools)}", step))
        (approval,) = await waiting(engine)
    remove()
    async with engine.worker():
        batch = await asyncio.wait_for(running, WAIT)
    error = batch.results[0].error
    assert error is not None
    assert error.code == "UNKNOWN_TOOL"
    await none_waiting(engine)
    (gone,) = await listed(engine, "withdrawn")
    assert gone.ticket == approval.ticket
    with pytest.raises(ValueError, match=f"approval {approval.ticket} was withdrawn"):
        await engine.resume(approval.ticket, "allowed-once")


async def test_a_rerun_waits_for_the_ticket_asked_before_and_asks_no_approver_again(
        tools: Tools, temporal_server: str) -> None:
    asked: list[str] = []

    def approver(name: str) -> Any:
        def answer(request: tr.ApprovalRequest) -> Any:
            asked.append(name)
            return durable.PENDING
        return answer

    first = await make(tools, temporal_server, approver=approver("first"))
    step_id = f"again-{id(tools)}"
    async with first.worker():
        running = asyncio.ensure_future(first.run(step_id, calls("echo", "delete")))
        (approval,) = await waiting(first)
    # The rerun's pre-execute sees "delete" after its attempt claimed the step (the ticket
    # unanswered then), just before its approval stage.
    reached = asyncio.Event()

    async def pre(execution: tr.Execution, call_next: Any) -> Any:
        if execution.name == "delete":
            reached.set()
        return await call_next()

    tools.registry.pre_execute(pre)
    second = durable.Temporal(tools.registry, first.client, name=first.name,
                              task_queue=first.task_queue, approver=approver("second"))
    async with second.worker():
        await asyncio.wait_for(reached.wait(), WAIT)
        await second.resume(approval.ticket, "allowed-once")
        batch = await asyncio.wait_for(running, WAIT)
    assert [r.text for r in batch.results] == ["echo 0", "delete 1"]
    assert asked == ["first"]


async def test_running_a_step_again_with_other_calls_raises_at_once_while_it_waits(
        engine: Any, tools: Tools) -> None:
    """Parked behind an approval, or live inside a body: either could wait for hours."""
    inside, release = asyncio.Event(), asyncio.Event()

    async def gate(arguments: Any, ctx: tr.RunContext) -> str:
        inside.set()
        await release.wait()
        return "through"

    tools.registry.register(tr.Tool(name="gate", description="Gate.",
                                    parameters={"type": "object"}, execute=gate))
    parked = asyncio.ensure_future(engine.run(f"parked-{id(tools)}", calls("delete")))
    live = asyncio.ensure_future(engine.run(f"live-{id(tools)}", calls("gate")))
    (approval,) = await waiting(engine)
    await asyncio.wait_for(inside.wait(), WAIT)
    for step_id in (f"parked-{id(tools)}", f"live-{id(tools)}"):
        with pytest.raises(ValueError, match=f"step '{step_id}' was already run with other "
                                             "calls"):
            await asyncio.wait_for(engine.run(step_id, calls("echo")), 5)
    assert not parked.done()
    assert not live.done()
    await engine.resume(approval.ticket, "rejected")
    release.set()
    assert [r.text for r in (await live).results] == ["through"]
    assert (await parked).results[0].is_error


async def test_a_body_that_blocks_the_event_loop_runs_once_and_commits(
        engine: Any, tools: Tools) -> None:
    """Sync I/O inside an ``async def`` blocks the loop the worker runs on: for 8 s here,
    four heartbeat timeouts. The heartbeats come from a thread, so Temporal never takes
    the worker for dead: the body is not run again and its result is committed."""
    ran: list[int] = []

    async def block(arguments: Any, ctx: tr.RunContext) -> str:
        ran.append(arguments["x"])
        time.sleep(8)  # noqa: ASYNC251 (the mistake this test is about)
        return "woke"

    tools.registry.register(tr.Tool(name="block", description="Block.",
                                    parameters={"type": "object"}, execute=block,
                                    concurrency_safe=True))
    step_id = f"block-{id(tools)}"
    batch = await engine.run(step_id, calls("block", "echo"))
    assert [(r.text, r.error) for r in batch.results] == [("woke", None), ("echo 1", None)]
    assert ran == [0]
    handle = engine.client.get_workflow_handle(f"{engine.name}:{step_id}")
    history = await handle.fetch_history()
    attempts = [e.activity_task_started_event_attributes.attempt for e in history.events
                if e.HasField("activity_task_started_event_attributes")]
    assert attempts == [1]  # the server never timed the attempt out


async def test_bad_names_are_refused(tools: Tools) -> None:
    with pytest.raises(ValueError, match="name must be a non-empty str without ':' or '/'"):
        durable.Temporal(tools.registry, None, name="a:b", task_queue="q")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="idempotent must be an iterable of tool names"):
        durable.Temporal(tools.registry, None, name="a", task_queue="q",  # type: ignore[arg-type]
                         idempotent="echo")


async def test_a_step_cancelled_before_its_activity_started_runs_nothing(
        engine: Any, tools: Tools) -> None:
    controller = tr.CancelController()
    controller.cancel("before anything")
    batch = await engine.run(f"early-{id(tools)}", calls("echo", "echo"),
                             signal=controller.signal)
    assert [r.error.code if r.error else None for r in batch.results] == [
        "ABORTED_BEFORE_DISPATCH", "ABORTED_BEFORE_DISPATCH"]
    assert tools.ran == []


async def test_a_worker_stopping_while_an_approval_waits_leaves_it_to_the_next_worker(
        tools: Tools, temporal_server: str) -> None:
    engine = await make(tools, temporal_server)
    step_id = f"stop-{id(tools)}"
    async with engine.worker():
        running = asyncio.ensure_future(engine.run(step_id, calls("echo", "delete")))
        (approval,) = await waiting(engine)
    async with engine.worker():
        await engine.resume(approval.ticket, "allowed-once")
        batch = await asyncio.wait_for(running, WAIT)
    assert [r.text for r in batch.results] == ["echo 0", "delete 1"]
    assert tools.ran == [("echo", {"x": 0}), ("delete", {"x": 1})]


class Updates:
    """A fake workflow handle: each update waits until the test releases it."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[Any], str | None]] = []
        self.arrived = asyncio.Event()
        self.released = asyncio.Event()
        self.failure: BaseException | None = None

    async def execute_update(self, name: str, args: list[Any], id: str | None) -> None:
        self.sent.append((name, args, id))
        self.arrived.set()
        await self.released.wait()
        self.released.clear()
        if self.failure is not None:
            raise self.failure

    async def next(self) -> None:
        """Release the update in flight, and wait for the next one to be sent."""
        self.arrived.clear()
        self.released.set()
        await asyncio.wait_for(self.arrived.wait(), 5)


def fresh_record(updates: Updates) -> Any:
    from toolrail.durable._temporal import _Groups, _TemporalRecord

    state = {"records": {"mark": {}, "dispatch": {}, "result": {}}, "asked": [], "answers": {}}
    return _TemporalRecord(_Groups(updates, 3, "1.3"), state)  # type: ignore[arg-type]


async def test_records_asked_for_while_an_update_is_in_flight_go_together_in_the_next() -> None:
    updates = Updates()
    record = fresh_record(updates)
    first = asyncio.ensure_future(record.mark(0))
    await asyncio.wait_for(updates.arrived.wait(), 5)
    await record.commit(7, {"text": "seven"})  # not waited for: queued behind the update
    later = asyncio.gather(record.mark(1), record.dispatch(2, {"phase": "x"}))
    await updates.next()
    await asyncio.wait_for(first, 5)
    assert not later.done()
    updates.released.set()
    await asyncio.wait_for(later, 5)
    await asyncio.wait_for(record.groups.drain(), 5)
    assert updates.sent == [
        ("record_many", [[["mark", "0", True]], 3], "records/1.3/0"),
        ("record_many", [[["result", "7", {"text": "seven"}], ["mark", "1", True],
                          ["dispatch", "2", {"phase": "x"}]], 3], "records/1.3/1")]
    assert (record.marked, record.dispatched, record.results) == (
        {0, 1}, {2: {"phase": "x"}}, {7: {"text": "seven"}})


async def test_a_superseded_attempts_group_cancels_its_waiters_and_drain_raises() -> None:
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.exceptions import ApplicationError

    updates = Updates()
    record = fresh_record(updates)
    updates.failure = WorkflowUpdateFailedError(ApplicationError("attempt 3 was superseded"))
    mark = asyncio.ensure_future(record.mark(0))
    await asyncio.wait_for(updates.arrived.wait(), 5)
    updates.released.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(mark, 5)
    assert record.marked == set()
    await record.commit(1, {"text": "one"})  # written no more: the attempt is over
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(record.groups.drain(), 5)
    assert len(updates.sent) == 1


async def test_the_records_of_a_step_of_parallel_calls_are_three_updates(
        engine: Any, tools: Tools) -> None:
    """The ten markers are one update, the ten dispatch outcomes one, the ten results one;
    the step's first attempt claims nothing (there is nothing to read or fence off)."""
    step_id = f"groups-{id(tools)}"
    batch = await engine.run(step_id, calls(*["echo"] * 10))
    assert [r.text for r in batch.results] == [f"echo {i}" for i in range(10)]
    handle = engine.client.get_workflow_handle(f"{engine.name}:{step_id}")
    history = await handle.fetch_history()
    updates = [e.workflow_execution_update_accepted_event_attributes.accepted_request
               for e in history.events
               if e.HasField("workflow_execution_update_accepted_event_attributes")]
    assert [u.input.name for u in updates] == ["record_many"] * 3
    assert [u.meta.update_id for u in updates] == [f"records/1.1/{n}" for n in range(3)]
    state = await handle.query("state")
    assert {kind: sorted(state["records"][kind], key=int) for kind in state["records"]} == {
        kind: [str(i) for i in range(10)] for kind in ("mark", "dispatch", "result")}


async def test_an_attempt_superseded_mid_step_starts_no_body_and_the_next_attempt_finishes(
        engine: Any, tools: Tools) -> None:
    """A newer attempt's claim fences the running one off: its next marker is refused, so
    it never starts the body, and the retry that claims the step runs it once."""
    step_id = f"fenced-{id(tools)}"
    running = asyncio.ensure_future(engine.run(step_id, calls("echo", "delete")))
    (approval,) = await waiting(engine)
    handle = engine.client.get_workflow_handle(f"{engine.name}:{step_id}")
    await handle.execute_update("claim", args=[2])  # as a retry of the activity would
    await engine.resume(approval.ticket, "allowed-once")
    batch = await asyncio.wait_for(running, WAIT)
    assert [r.text for r in batch.results] == ["echo 0", "delete 1"]
    assert tools.ran == [("echo", {"x": 0}), ("delete", {"x": 1})]
    history = await handle.fetch_history()
    attempts = [e.activity_task_started_event_attributes.attempt for e in history.events
                if e.HasField("activity_task_started_event_attributes")]
    assert attempts == [2]


async def test_a_second_answer_is_refused_while_a_stopped_worker_holds_the_steps_task(
        temporal_server: str, tmp_path: Path) -> None:
    """An agent stopped holding the step's workflow task (as one killed holding it, until
    the task times out): the server buffers what the step is sent meanwhile, in neither
    its memo nor its history. The second answer is refused all the same, the ticket is
    not listed as waiting, and the step runs with the first once the agent goes on."""
    backend = Engine("temporal", tmp_path, temporal_server)
    step_id = f"held-{tmp_path.name}"
    agent = backend.agent(step_id, [["delete", {"x": 1}]])
    ticket = agent.wait_for("pending")["ticket"]
    inbox = await backend.approvals()
    handle = inbox.client.get_workflow_handle(f"agent:{step_id}")
    os.kill(agent.process.pid, signal.SIGSTOP)
    try:
        # any signal makes a workflow task, which the stopped agent's poll takes
        await handle.signal("answer", args=["9", {"outcome": "rejected"}])
        await task_in_flight(handle)
        await inbox.resume(ticket, "allowed-once", answered_by="ada")
        for outcome in ("rejected", "allowed-once"):
            with pytest.raises(ValueError,
                               match=f"approval {re.escape(ticket)} was already answered"):
                await inbox.resume(ticket, outcome, answered_by="bob")
        answered = await ticket_listed(inbox, ticket, "answered")
        assert (answered.outcome, answered.answered_by) == (tr.ApprovalOutcome.ALLOWED_ONCE,
                                                            "ada")
        assert ticket not in [p.ticket for p in await inbox.pending()]
    finally:
        os.kill(agent.process.pid, signal.SIGCONT)
    assert texts(agent.batch()) == ["deleted 1"]
    assert [r["tool"] for r in lines(tmp_path / "ran.jsonl")] == ["delete"]
    with pytest.raises(ValueError, match=f"approval {re.escape(ticket)} was already answered"):
        await inbox.resume(ticket, "rejected")


async def task_in_flight(handle: Any) -> None:
    """Until a worker has taken a workflow task of ``handle``'s and not completed it."""
    from temporalio.api.enums.v1 import PendingWorkflowTaskState

    started = PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED
    async with asyncio.timeout(WAIT):
        while True:
            task = (await handle.describe()).raw_description.pending_workflow_task
            if task.state == started:
                return
            await asyncio.sleep(0.02)


async def ticket_listed(inbox: Any, ticket: str, status: str) -> durable.PendingApproval:
    """``ticket`` in ``pending(history=True)``, once it is listed with ``status``
    (visibility lags the workflows by a moment)."""
    async with asyncio.timeout(WAIT):
        while True:
            history: list[durable.PendingApproval] = await inbox.pending(history=True)
            for approval in history:
                if approval.ticket == ticket and approval.status == status:
                    return approval
            await asyncio.sleep(0.02)


async def test_of_two_answers_at_once_one_is_taken_and_the_other_refused(
        engine: Any, tools: Tools) -> None:
    step_id = f"race-{id(tools)}"
    step = asyncio.ensure_future(engine.run(step_id, calls("echo", "delete")))
    (approval,) = await waiting(engine)
    ended = await asyncio.gather(
        engine.resume(approval.ticket, "allowed-once", answered_by="ada"),
        engine.resume(approval.ticket, "rejected", answered_by="bob"),
        return_exceptions=True)
    refused = [e for e in ended if e is not None]
    assert len(refused) == 1
    assert isinstance(refused[0], ValueError)
    assert str(refused[0]) == f"approval {approval.ticket} was already answered"
    winner = "ada" if ended[0] is None else "bob"
    batch = await asyncio.wait_for(step, WAIT)
    state = await engine.client.get_workflow_handle(f"{engine.name}:{step_id}").query("state")
    assert state["answers"]["1"]["answered_by"] == winner
    if winner == "ada":
        assert [r.text for r in batch.results] == ["echo 0", "delete 1"]
    else:
        assert batch.results[1].error is not None
        assert batch.results[1].error.code == "DENIED"


async def test_an_answer_whose_resume_died_before_signalling_reaches_the_step_by_its_workflow(
        tools: Tools, temporal_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``resume`` died once its answer's workflow had started, with no worker running:
    the ticket is answered (listed so, and a second answer refused), and the answer's
    workflow takes it to the step when a worker runs."""
    from toolrail.durable import _temporal

    engine = await make(tools, temporal_server)
    step_id = f"died-{id(tools)}"
    async with engine.worker():
        running = asyncio.ensure_future(engine.run(step_id, calls("echo", "delete")))
        (approval,) = await waiting(engine)

    async def died(*args: Any) -> None:
        return None

    with monkeypatch.context() as patched:
        patched.setattr(_temporal, "_delivered", died)
        await engine.resume(approval.ticket, "allowed-once", answered_by="ada")
    answered = await ticket_listed(engine, approval.ticket, "answered")
    assert (answered.outcome, answered.answered_by) == (tr.ApprovalOutcome.ALLOWED_ONCE, "ada")
    assert await engine.pending() == []
    with pytest.raises(ValueError, match=f"approval {approval.ticket} was already answered"):
        await engine.resume(approval.ticket, "rejected")
    async with engine.worker():
        batch = await asyncio.wait_for(running, WAIT)
        delivered = await engine.client.get_workflow_handle(
            f"toolrail/answer:{approval.ticket}").result()
    assert [r.text for r in batch.results] == ["echo 0", "delete 1"]
    assert delivered is True


async def test_an_answers_workflow_whose_step_has_ended_ends_without_failing(
        engine: Any, tools: Tools) -> None:
    step_id = f"ended-{id(tools)}"
    await engine.run(step_id, calls("echo"))
    answer = {"outcome": "allowed-once", "answered_by": None, "answered_at": time.time()}
    delivered = await engine.client.execute_workflow(
        "toolrail.answer", args=[f"{engine.name}:{step_id}", "0", answer],
        id=f"toolrail/answer:{engine.name}:{step_id}/0", task_queue=engine.task_queue)
    assert delivered is False
