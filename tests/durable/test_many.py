"""durable.md "Many agent processes": agents on one DBOS database leave each other's live
steps alone, and a dead one's steps are taken over by a live one, exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

import toolrail as tr
from durable_helpers import WAIT, Engine, lines, texts
from toolrail import durable

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return Engine("dbos", tmp_path)


async def observed(path: Path, durable_id: str) -> dict[str, str]:
    """The observation of call ``durable_id``, once an agent's observer has made it."""
    async with asyncio.timeout(WAIT):
        while not (seen := [o for o in lines(path) if o["durable_id"] == durable_id]):  # noqa: ASYNC110 (another process writes it)
            await asyncio.sleep(0.02)
    return seen[0]


async def allow_the_one_waiting(engine: Engine) -> None:
    """Answer the one approval waiting on ``engine``'s database, from this process."""
    approvals = durable.Approvals(engine.database, prefix="agent:")
    try:
        (waiting,) = await approvals.pending()
        await approvals.resume(waiting.ticket, "allowed-once")
    finally:
        approvals.close()


async def test_a_second_agent_leaves_the_first_agents_live_step_alone(
        engine: Engine, tmp_path: Path) -> None:
    first = engine.agent("a", [["hang", {"x": 1}]])
    first.wait_for("body", tool="hang")
    second = engine.agent("b", [["hang", {"x": 2}]])
    second.wait_for("body", tool="hang")  # launched: its recovery is behind it
    (tmp_path / "release").touch()

    assert texts(first.batch()) == ["hung 1"]  # not INTERRUPTED: nothing restarted
    assert texts(second.batch()) == ["hung 2"]
    ran = sorted((r["arguments"]["x"], r["pid"]) for r in lines(tmp_path / "ran.jsonl"))
    assert ran == [(1, first.process.pid), (2, second.process.pid)]


async def test_a_dead_agents_parked_step_is_taken_over_by_a_live_one_exactly_once(
        engine: Engine, tmp_path: Path) -> None:
    first = engine.agent("t", [["echo", {"x": 0}], ["delete", {"x": 1}]])
    ticket = first.wait_for("pending")["ticket"]
    live = engine.agent("b", [["hang", {"x": 2}]])
    live.wait_for("body", tool="hang")
    first.kill()  # gone from this host: taken over at the live agent's next beat

    approvals = durable.Approvals(engine.database, prefix="agent:")
    try:
        await approvals.resume(ticket, "allowed-once", answered_by="bob")
    finally:
        approvals.close()
    assert (await observed(tmp_path / "observed.jsonl", "t/1"))["text"] == "deleted 1"
    (tmp_path / "release").touch()
    assert texts(live.batch()) == ["hung 2"]
    ran = [(r["tool"], r["pid"]) for r in lines(tmp_path / "ran.jsonl")]
    assert sorted(ran) == sorted([("echo", first.process.pid), ("hang", live.process.pid),
                                  ("delete", live.process.pid)])


async def test_a_stopped_agent_is_taken_over_once_it_has_not_been_seen_for_takeover_after(
        engine: Engine, tmp_path: Path) -> None:
    """A process that is alive on this host but silent (stopped) is read as dead only
    after ``takeover_after``, from its row's beat: the path of a process on another
    machine."""
    takeover = {"TOOLRAIL_TEST_TAKEOVER": "2"}
    first = engine.agent("t", [["delete", {"x": 1}]], **takeover)
    first.wait_for("pending")
    live = engine.agent("b", [["hang", {"x": 2}]], **takeover)
    live.wait_for("body", tool="hang")
    os.kill(first.process.pid, signal.SIGSTOP)  # alive on this host: only its beat ages
    try:
        await allow_the_one_waiting(engine)
        assert (await observed(tmp_path / "observed.jsonl", "t/0"))["text"] == "deleted 1"
    finally:
        first.kill()
    (tmp_path / "release").touch()
    assert texts(live.batch()) == ["hung 2"]
    assert [(r["tool"], r["pid"]) for r in lines(tmp_path / "ran.jsonl")
            if r["tool"] == "delete"] == [("delete", live.process.pid)]


async def test_a_given_executor_id_held_by_a_live_agent_is_refused_naming_it(
        engine: Engine, tmp_path: Path) -> None:
    slot = {"TOOLRAIL_TEST_EXECUTOR": "slot-1"}
    first = engine.agent("s", [["delete", {"x": 1}]], **slot)
    first.wait_for("pending")
    registry = tr.ToolRegistry()
    with pytest.raises(RuntimeError, match=(
            f"executor_id='slot-1' is held by a live agent process \\(pid "
            f"{first.process.pid} on .*, seen .* s ago\\): give each process its own "
            "executor_id, or none for a unique one")):
        await durable.DBOS(registry, name="other", database=engine.database,
                           executor_id="slot-1").launch()
    first.kill()

    # the slot's next process takes it at once (its holder is gone from this host), and
    # DBOS's own startup recovery resumes its step
    second = engine.agent("s", [["delete", {"x": 1}]], **slot)
    second.wait_for("pending")
    await allow_the_one_waiting(engine)
    assert texts(second.batch()) == ["deleted 1"]
