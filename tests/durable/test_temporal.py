"""durable.md on Temporal, with a worker in the test's process: the API and its errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import toolrail as tr
from durable_helpers import WAIT, Tools, calls
from toolrail import durable

pytestmark = pytest.mark.timeout(60)

_queues = iter(range(10**6))


@pytest.fixture
def tools() -> Tools:
    return Tools()


@pytest.fixture
async def engine(tools: Tools, temporal_server: str) -> AsyncIterator[Any]:
    from temporalio.client import Client

    client = await Client.connect(temporal_server)
    engine = durable.Temporal(tools.registry, client, name="unit",
                              task_queue=f"unit-{next(_queues)}-{id(tools)}")
    async with engine.worker():
        yield engine


async def waiting(engine: Any, count: int = 1) -> list[durable.PendingApproval]:
    async with asyncio.timeout(WAIT):
        while len(pending := await engine.pending()) < count:  # noqa: ASYNC110 (visibility)
            await asyncio.sleep(0.02)
    return list(pending)


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
    assert (approval.ticket, approval.index, approval.tool_name) == (
        f"unit:{step_id}/1", 1, "delete")
    assert approval.arguments == tr.snapshot_json({"x": 1})
    with pytest.raises(ValueError, match="'maybe' is not a valid ApprovalOutcome"):
        await engine.resume(approval.ticket, "maybe")
    with pytest.raises(KeyError):
        await engine.resume(f"unit:{step_id}/7", "allowed-once")
    with pytest.raises(KeyError):
        await engine.resume("unit:no-such-step/0", "allowed-once")
    await engine.resume(approval.ticket, "rejected")
    batch = await step
    assert batch.results[1].error == tr.ErrorInfo('the user rejected tool "delete"', "DENIED",
                                                  None)
    with pytest.raises(ValueError, match=f"approval {approval.ticket} was already answered"):
        await engine.resume(approval.ticket, "allowed-once")
    assert tools.ran == [("echo", {"x": 0})]


async def test_a_step_cancelled_by_its_signal_aborts_the_rest_and_withdraws_the_approval(
        engine: Any, tools: Tools) -> None:
    controller = tr.CancelController()
    step = asyncio.ensure_future(engine.run(f"c-{id(tools)}", calls("delete"),
                                            signal=controller.signal))
    await waiting(engine)
    controller.cancel("the user left")
    batch = await step
    assert batch.cancelled
    error = batch.results[0].error
    assert error is not None
    assert error.code == "ABORTED_BEFORE_DISPATCH"
    async with asyncio.timeout(WAIT):
        while await engine.pending():  # noqa: ASYNC110 (visibility lags)
            await asyncio.sleep(0.02)


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
    from temporalio.client import Client

    client = await Client.connect(temporal_server)
    engine = durable.Temporal(tools.registry, client, name="unit",
                              task_queue=f"stop-{id(tools)}")
    step_id = f"stop-{id(tools)}"
    async with engine.worker():
        running = asyncio.ensure_future(engine.run(step_id, calls("echo", "delete")))
        (approval,) = await waiting(engine)
    async with engine.worker():
        await engine.resume(approval.ticket, "allowed-once")
        batch = await asyncio.wait_for(running, WAIT)
    assert [r.text for r in batch.results] == ["echo 0", "delete 1"]
    assert tools.ran == [("echo", {"x": 0}), ("delete", {"x": 1})]
