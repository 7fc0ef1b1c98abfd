"""Stopping a program (code-mode.md, "Cancellation"): nothing of it runs after
``run_code`` returns, and a worker that does not stop is killed and replaced."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

import toolrail as tr
from helpers import within
from toolrail.code import CodeSettings

pytest.importorskip("pydantic_monty")

from toolrail.code import _pool


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return not _pool.alive(pid)  # a killed worker not yet reaped is a zombie


async def test_a_cancelled_program_stuck_in_a_loop_has_its_worker_killed() -> None:
    # The program spins far longer than the test waits (max_duration is 60 s): only a
    # kill can end it in time, and it must be dead by the time run_code returns.
    registry = tr.ToolRegistry(presentation="code", code=CodeSettings(max_duration=60))
    started = asyncio.Event()
    pids: list[int] = []

    async def begin(arguments: Any, ctx: tr.RunContext) -> str:
        pool = registry._pool
        assert pool is not None
        [program] = pool.running
        assert program.pid is not None
        pids.append(program.pid)
        started.set()
        return "go"

    registry.register(tr.Tool(name="begin", description="Begin.",
                              parameters={"type": "object"}, execute=begin))
    async with registry:
        controller = tr.CancelController()
        call = tr.ToolCall(call_id="r", name="run_code", signal=controller.signal,
                           arguments={"code": "await tools.begin({})\nwhile True:\n    pass"})
        task = asyncio.create_task(registry.execute(call))
        await within(started.wait(), 30)
        controller.cancel()
        result = await within(task, 20)
        assert result.error is not None
        assert result.error.code == "ABORTED"
        [pid] = pids
        assert _gone(pid)  # killed before run_code returned, not left spinning
        # The pool replaced the worker: the registry still runs programs.
        after = await within(registry.execute(
            tr.ToolCall(call_id="s", name="run_code", arguments={"code": "1 + 1"})), 30)
        assert after.value == {"logs": "", "result": 2}
