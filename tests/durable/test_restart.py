"""durable.md on DBOS and on Temporal: every property proved by a ``kill -9`` of a real
agent process and a new process on the same record."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import toolrail as tr
from durable_helpers import WAIT, Engine, lines, texts

pytestmark = pytest.mark.timeout(120)

STEP = [["echo", {"x": 0}], ["delete", {"x": 1, "path": "/tmp/a"}], ["echo", {"x": 2}]]


async def settled(approvals: Any, count: int) -> list[Any]:
    """The waiting approvals, once there are ``count`` (Temporal lists them from its
    visibility store, which lags its workflows by a moment)."""
    async with asyncio.timeout(WAIT):
        while len(pending := await approvals.pending()) != count:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    return list(pending)


async def test_an_approval_pending_at_a_kill_is_answered_with_no_agent_and_runs_once(
        backend: Engine, tmp_path: Path) -> None:
    first = backend.agent("s1", STEP)
    ticket = first.wait_for("pending")["ticket"]
    first.kill()

    approvals = await backend.approvals()
    (waiting,) = await settled(approvals, 1)
    assert (waiting.ticket, waiting.step_id, waiting.index, waiting.call_id,
            waiting.tool_name) == (ticket, "s1", 1, "c1", "delete")
    assert waiting.arguments == tr.snapshot_json({"x": 1, "path": "/tmp/a"})
    await approvals.resume(ticket, tr.ApprovalOutcome.ALLOWED_ONCE)
    if backend.kind == "dbos":  # Temporal's answer is a signal, stored until a worker runs
        assert await approvals.pending() == []
        with pytest.raises(ValueError, match=f"approval {ticket} was already answered"):
            await approvals.resume(ticket, tr.ApprovalOutcome.REJECTED)
        approvals.close()

    second = backend.agent("s1", STEP)
    assert texts(second.batch()) == ["echo 0", "deleted 1", "echo 2"]
    ran = lines(tmp_path / "ran.jsonl")
    deletes = [r for r in ran if r["tool"] == "delete"]
    assert [d["arguments"] for d in deletes] == [{"x": 1, "path": "/tmp/a"}]
    assert deletes[0]["pid"] == second.process.pid
    # echo 0 committed in the first process: not run again
    assert [r["tool"] for r in ran].count("echo") == 2
    if backend.kind == "temporal":
        with pytest.raises(ValueError, match=f"approval {ticket} was already answered"):
            await approvals.resume(ticket, tr.ApprovalOutcome.REJECTED)


async def test_a_step_killed_mid_way_runs_no_finished_call_again_and_interrupts_one_in_flight(
        backend: Engine, tmp_path: Path) -> None:
    step = [["echo", {"x": 0}], ["hang", {"x": 1}], ["echo", {"x": 2}]]
    first = backend.agent("s2", step)
    first.wait_for("body", tool="hang")
    for text in ("echo 0", "echo 2"):  # both finished; echo 2 cannot commit behind hang
        await backend.wait_until_dispatched("s2", text)
    first.kill()
    (tmp_path / "release").touch()

    results = backend.agent("s2", step).batch()
    assert texts(results)[0::2] == ["echo 0", "echo 2"]
    interrupted = results[1]
    assert interrupted["is_error"] is True
    assert interrupted["error"] == {
        "message": "tool call was interrupted by a restart; it may have run",
        "code": "INTERRUPTED", "type": "ToolInterruptedError"}
    ran = lines(tmp_path / "ran.jsonl")  # each body once, all in the first process
    assert sorted(r["tool"] for r in ran) == ["echo", "echo", "hang"]
    assert {r["pid"] for r in ran} == {first.process.pid}, ran


async def test_an_idempotent_call_in_flight_at_a_kill_runs_again(backend: Engine,
                                                                  tmp_path: Path) -> None:
    step = [["echo", {"x": 0}], ["hang", {"x": 1}]]
    first = backend.agent("s3", step, TOOLRAIL_TEST_IDEMPOTENT="hang")
    first.wait_for("body", tool="hang")
    await backend.wait_until_dispatched("s3", "echo 0")
    first.kill()
    (tmp_path / "release").touch()

    second = backend.agent("s3", step, TOOLRAIL_TEST_IDEMPOTENT="hang")
    assert texts(second.batch()) == ["echo 0", "hung 1"]
    hangs = [r["pid"] for r in lines(tmp_path / "ran.jsonl") if r["tool"] == "hang"]
    assert hangs == [first.process.pid, second.process.pid]


@pytest.mark.parametrize(("step_id", "env", "error"), [
    pytest.param("s4", {"TOOLRAIL_TEST_VERSION": "2"}, {
        "message": 'tool "delete" changed while its call waited for approval',
        "code": "TOOL_CHANGED", "type": "ToolError"}, id="the-tool-changed"),
    pytest.param("s6", {"TOOLRAIL_TEST_GUARD": "1"}, {
        "message": "deletes are frozen", "code": "DENIED", "type": None},
        id="a-guard-was-added"),
])
async def test_an_approval_answered_after_a_kill_meets_the_registry_as_it_is_then(
        backend: Engine, tmp_path: Path, step_id: str, env: dict[str, str],
        error: dict[str, Any]) -> None:
    """The tool's digest and the guards are checked again against the new process's
    registry: a changed tool is refused, and a guard added since denies the call."""
    first = backend.agent(step_id, STEP)
    ticket = first.wait_for("pending")["ticket"]
    first.kill()
    approvals = await backend.approvals()
    await settled(approvals, 1)
    await approvals.resume(ticket, "allowed-once")
    if backend.kind == "dbos":
        approvals.close()

    results = backend.agent(step_id, STEP, **env).batch()
    assert results[1]["error"] == error
    assert texts(results)[0::2] == ["echo 0", "echo 2"]
    assert "delete" not in [r["tool"] for r in lines(tmp_path / "ran.jsonl")]


async def test_a_persons_rejection_is_final_when_the_next_processs_approver_would_allow(
        backend: Engine, tmp_path: Path) -> None:
    """The engine's approver parks the call; a person rejects it while no agent runs; the
    next process's approver, which allows every call, is not asked: the ticket was."""
    first = backend.agent("r", STEP, TOOLRAIL_TEST_APPROVER="pending")
    ticket = first.wait_for("pending")["ticket"]
    first.kill()
    approvals = await backend.approvals()
    await settled(approvals, 1)
    await approvals.resume(ticket, "rejected", answered_by="alice")

    results = backend.agent("r", STEP, TOOLRAIL_TEST_APPROVER="allowed-once").batch()
    assert results[1]["error"] == {"message": 'the user rejected tool "delete"',
                                   "code": "DENIED", "type": None}
    assert "delete" not in [r["tool"] for r in lines(tmp_path / "ran.jsonl")]
    assert await approvals.pending() == []
    (answered,) = [a for a in await approvals.pending(history=True) if a.ticket == ticket]
    assert (answered.status, answered.outcome, answered.answered_by) == (
        "answered", tr.ApprovalOutcome.REJECTED, "alice")
    assert answered.answered_at is not None
    assert answered.answered_at >= answered.asked_at
    with pytest.raises(ValueError, match=f"approval {ticket} was already answered"):
        await approvals.resume(ticket, "allowed-once")
    if backend.kind == "dbos":
        approvals.close()


async def test_a_ticket_whose_tool_is_gone_is_withdrawn_and_cannot_be_answered(
        backend: Engine, tmp_path: Path) -> None:
    first = backend.agent("g", STEP)
    ticket = first.wait_for("pending")["ticket"]
    first.kill()

    results = backend.agent("g", STEP, TOOLRAIL_TEST_DROP="1").batch()
    assert results[1]["error"]["code"] == "UNKNOWN_TOOL"
    approvals = await backend.approvals()
    await settled(approvals, 0)
    (withdrawn,) = [a for a in await approvals.pending(history=True) if a.ticket == ticket]
    assert (withdrawn.status, withdrawn.outcome, withdrawn.answered_by) == (
        "withdrawn", None, None)
    with pytest.raises(ValueError, match=f"approval {ticket} was withdrawn: its call was "
                                         "settled without an answer"):
        await approvals.resume(ticket, "allowed-once")
    with pytest.raises(KeyError):
        await approvals.resume(f"{ticket}0", "allowed-once")
    if backend.kind == "dbos":
        approvals.close()


async def test_observers_see_each_result_once_across_a_kill_and_a_finished_step_replays(
        backend: Engine, tmp_path: Path) -> None:
    step = [["echo", {"x": 0}], ["hang", {"x": 1}], ["echo", {"x": 2}]]
    first = backend.agent("s5", step, TOOLRAIL_TEST_IDEMPOTENT="hang")
    first.wait_for("body", tool="hang")
    # Killed once call 0 is recorded (its observers ran before that: a kill between the
    # two is the at-least-once window of durable.md, which this test does not time).
    await backend.wait_until_committed("s5", "echo 0")
    await backend.wait_until_dispatched("s5", "echo 2")
    first.kill()
    (tmp_path / "release").touch()
    results = backend.agent("s5", step, TOOLRAIL_TEST_IDEMPOTENT="hang").batch()
    assert texts(results) == ["echo 0", "hung 1", "echo 2"]
    observed = lines(tmp_path / "observed.jsonl")
    assert sorted(o["durable_id"] for o in observed) == ["s5/0", "s5/1", "s5/2"]

    again = backend.agent("s5", step, TOOLRAIL_TEST_IDEMPOTENT="hang").batch()
    assert again == results
    assert len(lines(tmp_path / "observed.jsonl")) == 3
    assert len(lines(tmp_path / "ran.jsonl")) == 4  # echo, hang, hang again, echo


PROGRAM = """\
a = await tools.echo({"x": 0})
try:
    b = await tools.hang({"x": 1})
except ToolCallError as error:
    b = tool_call_error(error).code
c = await tools.echo({"x": 2})
[a, b, c]
"""


@pytest.mark.parametrize("idempotent", [False, True], ids=["in-flight", "idempotent"])
async def test_a_program_killed_mid_way_runs_again_with_its_finished_nested_calls_replayed(
        backend: Engine, tmp_path: Path, idempotent: bool) -> None:
    pytest.importorskip("pydantic_monty")
    env = {"TOOLRAIL_TEST_CODE": "1", "TOOLRAIL_TEST_IDEMPOTENT": "hang" if idempotent else ""}
    step = [["run_code", {"code": PROGRAM}]]
    step_id = f"p-{idempotent}"  # Temporal's workflow IDs are the server's, not the test's
    first = backend.agent(step_id, step, **env)
    first.wait_for("body", tool="hang")
    first.kill()
    (tmp_path / "release").touch()

    second = backend.agent(step_id, step, **env)
    (result,) = second.batch()
    assert result["error"] is None, result
    middle = "hung 1" if idempotent else "INTERRUPTED"
    assert result["value"]["result"] == ["echo 0", middle, "echo 2"]
    ran = [(r["tool"], r["arguments"]["x"], r["pid"]) for r in lines(tmp_path / "ran.jsonl")]
    hangs = [(pid,) for tool, _, pid in ran if tool == "hang"]
    assert ran[0] == ("echo", 0, first.process.pid)  # run once: replayed in the second
    assert [(t, x) for t, x, _ in ran].count(("echo", 0)) == 1
    assert ran[-1] == ("echo", 2, second.process.pid)
    assert hangs == ([(first.process.pid,), (second.process.pid,)] if idempotent
                     else [(first.process.pid,)])
