"""pipeline.md "Timeout": a tool's ``timeout`` is enforced around the body only (inside
every around-execute wrapper, so a retry wrapper gets a fresh timeout per attempt); on
expiry the body signal fires, the body is awaited, and the dispatch result is ``tool
call timed out after <timeout:g>s`` (``TOOL_TIMEOUT``, ``ToolTimeoutError``).

Every test proves ordering with gates (``asyncio.Event``, ``threading.Event`` for a
worker thread) and bounds its waits; nothing synchronizes with sleeps. The only real clock in
use is a tool's own ``timeout``, the thing under test.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

import toolrail as tr
from cancellation_helpers import Recorder, make_call, registry_for
from helpers import CallNext, assert_error, one_turn, wait_forever


async def test_an_interrupt_body_exceeding_its_timeout_times_out() -> None:
    body_saw: list[bool] = []
    cleaned_up: list[bool] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        try:
            await wait_forever()
        except asyncio.CancelledError:
            body_saw.append(ctx.signal.cancelled)
            await one_turn()
            cleaned_up.append(True)
            raise
        return "finished anyway"

    registry = registry_for(body, timeout=0.05)
    stages = Recorder(registry)

    result = await asyncio.wait_for(registry.execute(make_call()), 5)

    assert_error(result, "tool call timed out after 0.05s", "TOOL_TIMEOUT", "ToolTimeoutError")
    assert body_saw == [True]
    assert cleaned_up == [True]
    timed_out = tr.ErrorInfo("tool call timed out after 0.05s", "TOOL_TIMEOUT", "ToolTimeoutError")
    assert [r.error for r in stages.around_saw] == [timed_out]
    assert [r.error for r in stages.post_saw] == [timed_out]


async def test_the_timeout_message_uses_the_general_number_format() -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        await wait_forever()
        return "finished anyway"

    registry = registry_for(body, timeout=0.0625)

    result = await asyncio.wait_for(registry.execute(make_call()), 5)

    assert_error(result, "tool call timed out after 0.0625s", "TOOL_TIMEOUT", "ToolTimeoutError")


async def test_a_body_finishing_within_its_timeout_succeeds() -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        await one_turn()
        return "quick"

    registry = registry_for(body, timeout=5)

    result = await asyncio.wait_for(registry.execute(make_call()), 5)

    assert result.is_error is False
    assert result.value == "quick"


async def test_a_sync_body_exceeding_its_timeout_is_waited_out_and_times_out() -> None:
    body_saw: list[bool] = []
    finished = threading.Event()

    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        threading.Event().wait(0.3)  # outlives its 0.05 s timeout
        body_saw.append(ctx.signal.cancelled)
        finished.set()
        return "late"

    registry = registry_for(body, timeout=0.05)

    result = await asyncio.wait_for(registry.execute(make_call()), 5)

    assert finished.is_set()
    assert body_saw == [True]
    assert_error(result, "tool call timed out after 0.05s", "TOOL_TIMEOUT", "ToolTimeoutError")


@pytest.mark.parametrize("ending", ["returns", "raises"])
async def test_a_cooperative_body_with_a_timeout_sees_its_signal_and_times_out(
    ending: str,
) -> None:
    body_saw: list[bool] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        await asyncio.wait_for(ctx.signal.wait(), 5)
        body_saw.append(ctx.signal.cancelled)
        if ending == "raises":
            raise tr.ToolError("ran out of time", code="MY_CODE")
        return "partial answer"

    registry = registry_for(body, timeout=0.05, cancellation="cooperative")

    result = await asyncio.wait_for(registry.execute(make_call()), 5)

    assert body_saw == [True]
    assert_error(result, "tool call timed out after 0.05s", "TOOL_TIMEOUT", "ToolTimeoutError")


async def test_the_timeout_applies_per_attempt_of_a_retry_wrapper() -> None:
    attempts: list[tr.ToolResult] = []
    started_cancelled: list[bool] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started_cancelled.append(ctx.signal.cancelled)
        await wait_forever()
        return "finished anyway"

    async def retry(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        attempts.append(await call_next())
        attempts.append(await call_next())
        return attempts[-1]

    registry = registry_for(body, timeout=0.05)
    registry.around_execute(retry)

    result = await asyncio.wait_for(registry.execute(make_call()), 5)

    timed_out = tr.ErrorInfo("tool call timed out after 0.05s", "TOOL_TIMEOUT", "ToolTimeoutError")
    assert [r.error for r in attempts] == [timed_out, timed_out]
    assert started_cancelled == [False, False]
    assert_error(result, "tool call timed out after 0.05s", "TOOL_TIMEOUT", "ToolTimeoutError")

