"""pipeline.md "Cancellation": "If the task running ``execute`` is itself cancelled
(asyncio), the body signal fires (reason ``"cancelled"``) and an ``"interrupt"`` body is
also cancelled; the body is awaited, then ``CancelledError`` propagates (no result is
built or notified)."

The same for ``run``: test_the_task_running_run_is_cancelled.py.
Every test proves ordering with gates (``asyncio.Event``, ``threading.Event`` for a
worker thread) and bounds its waits; nothing synchronizes with sleeps.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

import toolrail as tr
from cancellation_helpers import Body, execute_until, registry_for, still_running, task_cancelled
from helpers import observe, one_turn, until, wait_forever

Observed = list[tuple[tr.Execution, tr.ToolResult]]


async def cancel_the_task_once_started(
    body: Body, started: asyncio.Event, with_signal: bool
) -> tuple[asyncio.Task[tr.ToolResult], Observed, tr.CancelSignal]:
    """Execute a call of ``body`` (with a caller's signal when ``with_signal``), cancel
    the task once ``body`` has set ``started``, and wait for it: the task, what the
    observer saw, and the caller's signal."""
    registry = registry_for(body)
    seen = observe(registry)
    caller = tr.CancelController()

    task = await execute_until(registry, started, caller.signal if with_signal else None)
    await task_cancelled(task)
    return task, seen, caller.signal


@pytest.mark.parametrize("with_signal", [False, True])
async def test_cancelling_the_task_interrupts_the_body_and_propagates(with_signal: bool) -> None:
    started = asyncio.Event()
    body_saw: list[str] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        try:
            await wait_forever()
        except asyncio.CancelledError:
            body_saw.append("CancelledError")
            await one_turn()
            body_saw.append("cleaned up")
            raise
        return "finished anyway"

    task, seen, caller_signal = await cancel_the_task_once_started(body, started, with_signal)

    assert task.cancelled()
    assert body_saw == ["CancelledError", "cleaned up"]
    assert seen == []
    assert caller_signal.cancelled is False


@pytest.mark.parametrize("with_signal", [False, True])
async def test_cancelling_the_task_fires_the_interrupt_body_signal_with_reason_cancelled(
    with_signal: bool,
) -> None:
    started = asyncio.Event()
    body_saw: list[tuple[bool, str | None]] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        try:
            await wait_forever()
        except asyncio.CancelledError:
            body_saw.append((ctx.signal.cancelled, ctx.signal.reason))
            raise
        return "finished anyway"

    task, _, _ = await cancel_the_task_once_started(body, started, with_signal)

    assert task.cancelled()
    assert body_saw == [(True, "cancelled")]


@pytest.mark.parametrize("with_signal", [False, True])
async def test_a_task_cancellation_the_body_swallows_still_propagates(with_signal: bool) -> None:
    started = asyncio.Event()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        try:
            await wait_forever()
        except asyncio.CancelledError:
            return "swallowed"
        return "finished anyway"

    task, seen, _ = await cancel_the_task_once_started(body, started, with_signal)

    assert task.cancelled(), f"execute returned {task.result()!r}"
    assert seen == []


async def test_cancelling_the_task_fires_a_cooperative_body_signal_and_waits_for_the_body() -> None:
    started = asyncio.Event()
    saw_signal = asyncio.Event()
    release = asyncio.Event()
    body_saw: list[tuple[bool, str | None]] = []
    finished: list[bool] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        await asyncio.wait_for(ctx.signal.wait(), 5)
        body_saw.append((ctx.signal.cancelled, ctx.signal.reason))
        saw_signal.set()
        await until(release)
        finished.append(True)
        return "finished"

    registry = registry_for(body, cancellation="cooperative")
    seen = observe(registry)
    caller = tr.CancelController()

    task = await execute_until(registry, started, caller.signal)
    task.cancel()
    await until(saw_signal)
    assert not task.done()
    release.set()
    await asyncio.wait({task}, timeout=5)

    assert body_saw == [(True, "cancelled")]
    assert finished == [True]
    assert task.cancelled()
    assert seen == []
    assert caller.signal.cancelled is False


async def test_cancelling_the_task_waits_out_a_sync_body_and_fires_its_signal() -> None:
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    release = threading.Event()
    finished = threading.Event()
    body_saw: list[tuple[bool, str | None]] = []

    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        loop.call_soon_threadsafe(started.set)
        release.wait(5)
        body_saw.append((ctx.signal.cancelled, ctx.signal.reason))
        finished.set()
        return "finished"

    registry = registry_for(body)
    seen = observe(registry)

    task = await execute_until(registry, started)
    task.cancel()
    try:
        assert await still_running(task)
    finally:
        release.set()
    await asyncio.wait({task}, timeout=5)

    assert finished.is_set()
    assert body_saw == [(True, "cancelled")]
    assert task.cancelled()
    assert seen == []

