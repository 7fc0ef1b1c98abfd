"""durable.md on DBOS, in one process: the API, its errors, and the pipeline's rules."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import toolrail as tr
from durable_helpers import WAIT, Tools, calls
from toolrail import durable

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def tools() -> Tools:
    return Tools()


@pytest.fixture
async def engine(tools: Tools, tmp_path: Path) -> AsyncIterator[durable.DBOS]:
    async with durable.DBOS(tools.registry, name="unit",
                            database=f"sqlite:///{tmp_path / 'unit.sqlite'}") as engine:
        yield engine


async def waiting(engine: durable.DBOS, count: int = 1) -> list[durable.PendingApproval]:
    async with asyncio.timeout(WAIT):
        while len(pending := await engine.pending()) < count:  # noqa: ASYNC110 (the record is in the database)
            await asyncio.sleep(0.01)
    return pending


async def test_a_step_runs_like_registry_run_and_running_it_again_returns_the_record(
        engine: durable.DBOS, tools: Tools) -> None:
    plain = await tools.registry.run(calls("echo", "echo"))
    tools.ran.clear()
    tools.observed.clear()
    batch = await engine.run("s", calls("echo", "echo"))
    assert batch == plain
    assert tools.observed == [("s/0", "echo 0"), ("s/1", "echo 1")]
    again = await engine.run("s", calls("echo", "echo"))
    assert again == batch
    assert sorted((x["x"] for _, x in tools.ran)) == [0, 1]  # parallel: any order
    assert len(tools.observed) == 2


async def test_a_step_id_run_again_with_other_calls_is_an_error(engine: durable.DBOS) -> None:
    await engine.run("s", calls("echo"))
    with pytest.raises(ValueError, match="step 's' was already run with other calls"):
        await engine.run("s", calls("echo", "echo"))


async def test_an_approval_is_parked_listed_and_resumed(engine: durable.DBOS,
                                                        tools: Tools) -> None:
    step = asyncio.ensure_future(engine.run("s", calls("echo", "delete")))
    (approval,) = await waiting(engine)
    assert (approval.ticket, approval.step_id, approval.index, approval.tool_name,
            approval.reason) == ("unit:s/1", "s", 1, "delete", None)
    assert approval.arguments == tr.snapshot_json({"x": 1})
    assert ("delete", {"x": 1}) not in tools.ran
    await engine.resume(approval.ticket, tr.ApprovalOutcome.ALLOWED_ONCE)
    batch = await step
    assert [r.text for r in batch.results] == ["echo 0", "delete 1"]
    assert await engine.pending() == []
    with pytest.raises(ValueError, match="approval unit:s/1 was already answered"):
        await engine.resume(approval.ticket, "allowed-once")


async def test_a_rejected_approval_is_the_pipelines_denial(engine: durable.DBOS,
                                                           tools: Tools) -> None:
    step = asyncio.ensure_future(engine.run("s", calls("delete")))
    (approval,) = await waiting(engine)
    await engine.resume(approval.ticket, "rejected")
    (result,) = (await step).results
    assert result.error == tr.ErrorInfo('the user rejected tool "delete"', "DENIED", None)
    assert tools.ran == []


async def test_resume_refuses_an_unknown_ticket_and_an_outcome_that_is_not_one(
        engine: durable.DBOS) -> None:
    with pytest.raises(KeyError, match="unit:nope/0"):
        await engine.resume("unit:nope/0", "allowed-once")
    step = asyncio.ensure_future(engine.run("s", calls("delete")))
    (approval,) = await waiting(engine)
    with pytest.raises(ValueError, match="'maybe' is not a valid ApprovalOutcome"):
        await engine.resume(approval.ticket, "maybe")
    with pytest.raises(TypeError, match="ticket must be a str, got int"):
        await engine.resume(1, "allowed-once")  # type: ignore[arg-type]
    await engine.resume(approval.ticket, "cancelled")
    (result,) = (await step).results
    assert result.text == 'Error: approval for tool "delete" was cancelled'


async def test_guards_are_evaluated_again_when_an_approval_comes(
        engine: durable.DBOS, tools: Tools) -> None:
    step = asyncio.ensure_future(engine.run("s", calls("delete")))
    (approval,) = await waiting(engine)
    tools.registry.guard(lambda execution: "frozen by policy")
    await engine.resume(approval.ticket, "allowed-once")
    (result,) = (await step).results
    assert result.error == tr.ErrorInfo("frozen by policy", "DENIED", None)
    assert tools.ran == []


async def test_an_approver_answers_first_and_its_pending_parks_the_call(
        tools: Tools, tmp_path: Path) -> None:
    asked: list[str] = []

    def approver(request: tr.ApprovalRequest) -> Any:
        asked.append(request.call_id)
        return durable.PENDING if tr.thaw(request.arguments)["x"] == 1 else "allowed-once"

    async with durable.DBOS(tools.registry, name="unit", approver=approver,
                            database=f"sqlite:///{tmp_path / 'a.sqlite'}") as engine:
        step = asyncio.ensure_future(engine.run("s", calls("delete", "delete")))
        (approval,) = await waiting(engine)
        assert approval.index == 1
        await engine.resume(approval.ticket, "allowed-once")
        assert [r.text for r in (await step).results] == ["delete 0", "delete 1"]
    assert asked == ["c0", "c1"]


async def test_pending_outside_an_engine_is_an_invalid_approver_outcome(tools: Tools) -> None:
    tools.registry.approver = lambda request: durable.PENDING  # type: ignore[assignment,return-value]
    (result,) = (await tools.registry.run(calls("delete"))).results
    assert result.error == tr.ErrorInfo(
        "approver returned an invalid outcome: durable.PENDING", None, None)


async def test_a_step_cancelled_while_its_call_waits_withdraws_the_approval(
        engine: durable.DBOS, tools: Tools) -> None:
    controller = tr.CancelController()
    step = asyncio.ensure_future(engine.run("s", calls("delete"), signal=controller.signal))
    await waiting(engine)
    controller.cancel("the user left")
    batch = await step
    assert batch.cancelled
    assert batch.results[0].error is not None
    assert batch.results[0].error.code == "ABORTED_BEFORE_DISPATCH"
    assert await engine.pending() == []


async def test_bad_input_is_refused_before_anything_runs(tools: Tools, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="name must be 3-256 lowercase letters"):
        durable.DBOS(tools.registry, name="Agent")
    with pytest.raises(TypeError, match="idempotent must be an iterable of tool names"):
        durable.DBOS(tools.registry, name="unit", idempotent="echo")
    engine = durable.DBOS(tools.registry, name="unit",
                          database=f"sqlite:///{tmp_path / 'b.sqlite'}")
    with pytest.raises(RuntimeError, match=r"launch\(\) the engine before running steps"):
        await engine.run("s", calls("echo"))
    async with engine:
        with pytest.raises(ValueError, match="step_id must be a non-empty str"):
            await engine.run("", calls("echo"))
        with pytest.raises(TypeError, match="scope must be a str or None, got tuple"):
            await engine.run("s", [tr.ToolCall(call_id="c", name="echo", scope=("a",))])
        with pytest.raises(ValueError, match="cannot carry a signal or a parent"):
            await engine.run("s", [tr.ToolCall(call_id="c", name="echo",
                                               signal=tr.CancelSignal.never())])
        with pytest.raises(ValueError, match="must be losslessly JSON-serializable"):
            await engine.run("s", [tr.ToolCall(call_id="c", name="echo",
                                               arguments={"x": object()})])
        with pytest.raises(ValueError, match="max_parallel must be a positive integer"):
            await engine.run("s", calls("echo"), max_parallel=0)
    assert tools.ran == []


async def test_a_plain_call_has_no_durable_id_and_the_digest_knows_its_tool(
        tools: Tools) -> None:
    seen: list[str | None] = []
    tools.registry.on_result(lambda e, r: seen.append(e.durable_id))
    await tools.registry.execute(calls("echo")[0])
    assert seen == [None]
    schema = tools.registry.schemas()[0]
    other = tr.ToolSchema(schema.name, schema.description + "!", schema.parameters)
    arguments = tr.snapshot_json({"x": 1})
    assert tr.call_digest(schema, arguments) == tr.call_digest(schema, {"x": 1})
    assert tr.call_digest(schema, arguments) != tr.call_digest(other, arguments)
    assert tr.call_digest(schema, arguments) != tr.call_digest(schema, {"x": 2})
    with pytest.raises(TypeError, match="call_digest takes a ToolSchema, got dict"):
        tr.call_digest({"name": "echo"}, arguments)  # type: ignore[arg-type]


async def test_the_loop_still_runs_threads_after_the_engine_closed(tools: Tools,
                                                                   tmp_path: Path) -> None:
    async with durable.DBOS(tools.registry, name="unit",
                            database=f"sqlite:///{tmp_path / 'c.sqlite'}") as engine:
        await engine.run("s", calls("echo"))
    assert await asyncio.to_thread(lambda: "still here") == "still here"


async def test_a_durable_stream_yields_committed_items_in_order_and_then_the_record(
        engine: durable.DBOS, tools: Tools) -> None:
    async with engine.stream("s", calls("echo", "echo", "echo")) as stream:
        items = [(c.index, c.call.call_id, c.result.text, c.started) async for c in stream]
    assert items == [(0, "c0", "echo 0", True), (1, "c1", "echo 1", True),
                     (2, "c2", "echo 2", True)]
    assert [r.text for r in stream.batch.results] == ["echo 0", "echo 1", "echo 2"]
    assert len(tools.ran) == 3
    async with engine.stream("s", calls("echo", "echo", "echo")) as again:
        assert [c.result.text async for c in again] == ["echo 0", "echo 1", "echo 2"]
    assert len(tools.ran) == 3


async def test_closing_a_durable_stream_early_cancels_the_rest_of_the_step(
        engine: durable.DBOS, tools: Tools) -> None:
    stream = engine.stream("s", calls("echo", "delete"))
    first = await stream.__anext__()
    assert first.result.text == "echo 0"
    await waiting(engine)
    await stream.aclose()
    assert stream.batch.cancelled
    error = stream.batch.results[1].error
    assert error is not None
    assert error.code == "ABORTED_BEFORE_DISPATCH"
    assert await engine.pending() == []
    assert [c async for c in stream] == []
    with pytest.raises(RuntimeError, match="available once the step has finished"):
        _ = engine.stream("t", calls("echo")).batch


async def test_engines_share_the_process_dbos_on_one_database(tools: Tools,
                                                              tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    first = durable.DBOS(tools.registry, name="first", database=database)
    second = durable.DBOS(tools.registry, name="second", database=database)
    elsewhere = durable.DBOS(tools.registry, name="third",
                             database=f"sqlite:///{tmp_path / 'other.sqlite'}")
    async with first, second:
        with pytest.raises(RuntimeError, match="DBOS runs one database per process"):
            await elsewhere.launch()
        with pytest.raises(RuntimeError, match="an engine named 'first' is already launched"):
            await durable.DBOS(tools.registry, name="first", database=database).launch()
        await first.aclose()  # the other one keeps the process's DBOS
        batch = await second.run("s", calls("echo"))
        assert batch.results[0].text == "echo 0"


async def test_an_engine_joins_the_applications_own_dbos(tools: Tools, tmp_path: Path) -> None:
    from dbos import DBOS

    url = f"sqlite:///{tmp_path / 'app.sqlite'}"
    with pytest.raises(ValueError, match="with dbos=, pass database= too"):
        durable.DBOS(tools.registry, name="unit", dbos=object())  # type: ignore[arg-type]
    sqlite = durable.sqlite_engine(url)
    app = DBOS(config={"name": "the-app", "system_database_url": url, "log_level": "WARNING",
                       "system_database_engine": sqlite})
    engine = durable.DBOS(tools.registry, name="unit", database=url, dbos=app)
    await engine.launch()
    DBOS.launch()
    try:
        step = asyncio.ensure_future(engine.run("s", calls("delete")))
        (approval,) = await waiting(engine)
        await engine.resume(approval.ticket, "allowed-once")
        assert (await step).results[0].text == "delete 0"
        await engine.aclose()  # the application's DBOS is the application's to stop
        assert await DBOS.list_workflows_async(workflow_ids=["unit:s"])
    finally:
        DBOS.destroy(workflow_completion_timeout_sec=0)
        sqlite.dispose()


async def test_a_code_mode_programs_nested_approval_is_the_approvers_not_the_records(
        tmp_path: Path) -> None:
    pytest.importorskip("pydantic_monty")
    from toolrail.code import CodeSettings

    asked: list[str] = []

    def approver(request: tr.ApprovalRequest) -> Any:
        asked.append(request.tool_name)
        return durable.PENDING

    async with tr.ToolRegistry(presentation="code",
                               code=CodeSettings(type_check=False)) as registry:
        @registry.tool(requires_approval=True)
        async def delete(x: int) -> str:
            """Delete x."""
            return f"deleted {x}"

        program = tr.ToolCall(call_id="p", name="run_code", arguments={
            "code": "try:\n    r = await tools.delete({'x': 1})\nexcept ToolCallError as e:\n"
                    "    r = tool_call_error(e).message\nr\n"})
        async with durable.DBOS(registry, name="unit", approver=approver,
                                database=f"sqlite:///{tmp_path / 'code.sqlite'}") as engine:
            (result,) = (await engine.run("s", [program])).results
            assert await engine.pending() == []
    assert asked == ["delete"]
    assert tr.thaw(result.value)["result"] == (
        'tool "delete" requires approval, but no approval channel is available')


async def test_engines_of_other_names_launch_on_one_database_one_after_the_other(
        tools: Tools, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'names.sqlite'}"
    for name in ("alpha", "beta", "alpha"):
        async with durable.DBOS(tools.registry, name=name, database=database) as engine:
            assert (await engine.run(f"s-{name}", calls("echo"))).results[0].text == "echo 0"


async def test_the_signal_of_a_caller_reaches_a_step_recovered_at_launch(
        tmp_path: Path) -> None:
    from durable_helpers import Agent

    spec: list[list[Any]] = [["echo", {"x": 0}], ["delete", {"x": 1}]]
    first = Agent(tmp_path, "s", spec)
    first.wait_for("pending")
    first.kill()
    tools = Tools()
    step = [tr.ToolCall(call_id=f"c{i}", name=name, arguments=arguments)
            for i, (name, arguments) in enumerate(spec)]
    async with durable.DBOS(tools.registry, name="agent",
                            database=f"sqlite:///{tmp_path / 'agent.sqlite'}") as engine:
        controller = tr.CancelController()
        running = asyncio.ensure_future(engine.run("s", step, signal=controller.signal))
        await waiting(engine)
        controller.cancel("the user left")
        batch = await asyncio.wait_for(running, WAIT)
    assert batch.cancelled
    error = batch.results[1].error
    assert error is not None
    assert error.code == "ABORTED_BEFORE_DISPATCH"
    assert tools.ran == []


async def test_a_used_step_id_with_other_calls_is_refused_at_once_while_the_step_waits(
        engine: durable.DBOS) -> None:
    step = asyncio.ensure_future(engine.run("s", calls("echo", "delete")))
    (approval,) = await waiting(engine)
    with pytest.raises(ValueError, match="step 's' was already run with other calls"):
        await engine.run("s", calls("echo"))  # the step is parked: no wait for it
    assert not step.done()
    await engine.resume(approval.ticket, "allowed-once")
    assert [r.text for r in (await step).results] == ["echo 0", "delete 1"]


def _immutable(path: Path, on: bool = True) -> bool:
    """Make ``path`` unwritable even for root (``chattr +i``), or writable again; whether
    that worked."""
    if os.geteuid() != 0:
        path.chmod(0o444 if on else 0o644)
        return True
    flag = "+i" if on else "-i"
    return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0


@pytest.mark.parametrize("case", ["missing-directory", "not-a-database", "read-only",
                                  "unreachable-server"])
async def test_a_database_that_cannot_be_opened_is_an_error_naming_it(
        tools: Tools, tmp_path: Path, case: str) -> None:
    path = tmp_path / "agent.sqlite"
    if case == "missing-directory":
        url, reason = f"sqlite:///{tmp_path / 'missing' / 'agent.sqlite'}", "unable to open"
    elif case == "not-a-database":
        path.write_bytes(b"not a database, " * 100)
        url, reason = f"sqlite:///{path}", "file is not a database"
    elif case == "read-only":
        sqlite3.connect(path).close()
        if not _immutable(path):
            pytest.skip("chattr +i is not supported here, and root writes any file")
        url, reason = f"sqlite:///{path}", "readonly database"
    else:
        url, reason = "postgresql://toolrail@127.0.0.1:1/agent", "127.0.0.1"
    engine = durable.DBOS(tools.registry, name="unit", database=url)
    try:
        with pytest.raises(ValueError, match=f"database='{url}' cannot be opened: .*{reason}"):
            await engine.launch()
    finally:
        if case == "read-only":
            _immutable(path, on=False)
    # nothing is left half-launched: the next engine of the process launches
    async with durable.DBOS(tools.registry, name="unit",
                            database=f"sqlite:///{tmp_path / 'good.sqlite'}") as good:
        assert [r.text for r in (await good.run("s", calls("echo"))).results] == ["echo 0"]


async def test_who_answered_and_when_is_recorded_listed_and_readable_by_observers(
        engine: durable.DBOS, tools: Tools) -> None:
    answers: list[tuple[str | None, durable.Answer | None]] = []
    tools.registry.on_result(lambda e, r: answers.append((e.name, durable.answer(e))))
    step = asyncio.ensure_future(engine.run("s", calls("echo", "delete")))
    (approval,) = await waiting(engine)
    await engine.resume(approval.ticket, "allowed-once", answered_by="carol")
    await step
    (answered,) = await engine.pending(history=True)
    assert (answered.ticket, answered.status, answered.outcome, answered.answered_by) == (
        "unit:s/1", "answered", tr.ApprovalOutcome.ALLOWED_ONCE, "carol")
    assert answered.answered_at is not None
    assert answered.answered_at >= answered.asked_at
    assert answers == [("echo", None), ("delete", durable.Answer(
        "unit:s/1", tr.ApprovalOutcome.ALLOWED_ONCE, "carol", answered.answered_at))]


async def test_resume_checks_its_arguments(engine: durable.DBOS) -> None:
    with pytest.raises(TypeError, match="ticket must be a str, got int"):
        await engine.resume(1, "allowed-once")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="answered_by must be a str or None, got int"):
        await engine.resume("unit:s/0", "allowed-once", answered_by=7)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'maybe' is not a valid ApprovalOutcome"):
        await engine.resume("unit:s/0", "maybe")
    with pytest.raises(KeyError):
        await engine.resume("unit:s/0", "allowed-once")


class _LostStep:
    """A DBOS step whose write fails once ``written`` is set: the step is owned by
    another process now (DBOS raises ``DBOSWorkflowConflictIDError``, a BaseException)."""

    def __init__(self, writing: asyncio.Event, fail: asyncio.Event) -> None:
        self.writing = writing
        self.fail = fail

    async def run_async(self, *args: Any) -> None:
        from dbos._error import DBOSWorkflowConflictIDError

        self.writing.set()
        await self.fail.wait()
        raise DBOSWorkflowConflictIDError("unit:s")


async def test_a_failed_record_write_fails_what_was_queued_behind_it_and_everything_after(
        ) -> None:
    from dbos._error import DBOSWorkflowConflictIDError

    from toolrail.durable import _dbos

    writing, fail = asyncio.Event(), asyncio.Event()
    record = _dbos._DBOSRecord("unit:s")
    record._next_step = lambda: _LostStep(writing, fail)  # type: ignore[method-assign]
    await record.commit(2, {"content": []})  # not waited for: written within 50 ms
    await writing.wait()
    marker = asyncio.ensure_future(record.mark(3))  # queued behind the write under way
    await asyncio.sleep(0)
    fail.set()
    with pytest.raises(DBOSWorkflowConflictIDError):
        await marker  # never left waiting for a write that will not come
    with pytest.raises(DBOSWorkflowConflictIDError):
        await record.dispatch(4, {})  # nothing more is written
    with pytest.raises(DBOSWorkflowConflictIDError):
        await record.writes.drain()
