"""pipeline.md "Cancellation": "Cooperative and quiescent: the registry never returns
while a body it started is still running", and "A sync body in a worker thread cannot
be interrupted: the registry waits for it."

Every test proves ordering with gates (``asyncio.Event``, ``threading.Event`` for a
worker thread) and bounds its waits; nothing synchronizes with sleeps.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Literal

import pytest

import toolrail as tr
from cancellation_helpers import execute_until, make_call, make_tool, registry_for, still_running
from helpers import ABORTED, assert_error, one_turn, until, wait_forever


async def test_a_sync_body_in_a_worker_thread_is_waited_out() -> None:
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    release = threading.Event()
    finished = threading.Event()
    body_saw: list[bool] = []
    controller = tr.CancelController()

    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        loop.call_soon_threadsafe(started.set)
        release.wait(5)
        body_saw.append(ctx.signal.cancelled)
        finished.set()
        return "finished"

    registry = registry_for(body)

    task = await execute_until(registry, started, controller.signal)
    controller.cancel()
    try:
        assert await still_running(task)
    finally:
        release.set()
    result = await asyncio.wait_for(task, 5)

    assert finished.is_set()
    assert body_saw == [True]
    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")


@pytest.mark.parametrize("cancellation", ["interrupt", "cooperative"])
@pytest.mark.parametrize("trigger", ["signal", "timeout"])
async def test_nothing_the_library_started_runs_after_execute_returns(
    cancellation: Literal["interrupt", "cooperative"], trigger: str
) -> None:
    started = asyncio.Event()
    finished: list[bool] = []
    controller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        try:
            if cancellation == "cooperative":
                await asyncio.wait_for(ctx.signal.wait(), 5)
            else:
                await wait_forever()
        finally:
            for _ in range(3):
                await one_turn()
            finished.append(True)
        return "finished"

    registry = tr.ToolRegistry()
    timeout = 0.05 if trigger == "timeout" else None
    registry.register(make_tool(body, timeout=timeout, cancellation=cancellation))

    async def canceller() -> None:
        await until(started)
        if trigger == "signal":
            controller.cancel()

    helper = asyncio.create_task(canceller())
    before = asyncio.all_tasks()
    result = await registry.execute(make_call(controller.signal))
    after = asyncio.all_tasks()

    assert finished == [True]
    assert after - before == set()
    assert result.error is not None
    assert result.error.code == ("ABORTED" if trigger == "signal" else "TOOL_TIMEOUT")
    await asyncio.wait_for(helper, 5)

