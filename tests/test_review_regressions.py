"""Regressions found by a review against the spec: each once wrong, each pinned here."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

import toolrail as tr

WAIT = 5


class Boom(BaseException):
    """A failure the pipeline lets through: a failure of the scheduler itself."""


def raw(name: str, body: Callable[..., Any], **options: Any) -> tr.Tool:
    return tr.Tool(name=name, description="", parameters={"type": "object"}, execute=body,
                   **options)


async def test_a_cooperative_body_raising_cancelled_error_after_its_signal_is_a_failure() -> None:
    registry = tr.ToolRegistry()
    controller = tr.CancelController()

    async def cooperative(arguments: Any, ctx: tr.RunContext) -> str:
        controller.cancel()
        await ctx.signal.wait()
        raise asyncio.CancelledError

    registry.register(raw("t", cooperative, cancellation="cooperative"))
    call = tr.ToolCall(call_id="1", name="t", signal=controller.signal)
    result = await asyncio.wait_for(registry.execute(call), WAIT)

    assert result.error == tr.ErrorInfo("CancelledError", None, "CancelledError")


async def test_a_thread_body_raising_cancelled_error_after_its_signal_is_a_failure() -> None:
    registry = tr.ToolRegistry()
    controller = tr.CancelController()
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    go = threading.Event()

    def thread(arguments: Any, ctx: tr.RunContext) -> str:
        loop.call_soon_threadsafe(started.set)
        go.wait(WAIT)
        raise asyncio.CancelledError

    registry.register(raw("t", thread))
    task = asyncio.create_task(
        registry.execute(tr.ToolCall(call_id="1", name="t", signal=controller.signal)))
    await asyncio.wait_for(started.wait(), WAIT)
    controller.cancel()
    go.set()
    result = await asyncio.wait_for(task, WAIT)

    assert result.error == tr.ErrorInfo("CancelledError", None, "CancelledError")


async def test_a_caller_signal_cancelled_with_reason_timeout_is_aborted_not_timed_out() -> None:
    registry = tr.ToolRegistry()
    started = asyncio.Event()
    controller = tr.CancelController()

    async def slow(arguments: Any, ctx: tr.RunContext) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    registry.register(raw("slow", slow, timeout=60))
    task = asyncio.create_task(
        registry.execute(tr.ToolCall(call_id="1", name="slow", signal=controller.signal)))
    await asyncio.wait_for(started.wait(), WAIT)
    controller.cancel("timeout")
    result = await asyncio.wait_for(task, WAIT)

    assert result.error == tr.ErrorInfo("tool call aborted", "ABORTED", "ToolAbortedError")


async def test_a_raising_body_signal_callback_does_not_stop_the_interrupt() -> None:
    registry = tr.ToolRegistry()
    started = asyncio.Event()
    controller = tr.CancelController()

    def broken() -> None:
        raise ZeroDivisionError("callback")

    async def slow(arguments: Any, ctx: tr.RunContext) -> str:
        ctx.signal.add_callback(broken)
        started.set()
        await asyncio.Event().wait()
        return "never"

    registry.register(raw("slow", slow))
    task = asyncio.create_task(
        registry.execute(tr.ToolCall(call_id="1", name="slow", signal=controller.signal)))
    await asyncio.wait_for(started.wait(), WAIT)
    with pytest.raises(ZeroDivisionError):
        controller.cancel()  # the first callback exception propagates from cancel()
    result = await asyncio.wait_for(task, WAIT)

    assert result.error is not None
    assert result.error.code == "ABORTED"


async def test_after_a_scheduler_failure_a_call_still_in_prepare_is_not_dispatched() -> None:
    registry = tr.ToolRegistry()
    log: list[str] = []
    preparing = asyncio.Event()
    release = asyncio.Event()

    async def fails(arguments: Any, ctx: tr.RunContext) -> str:
        await asyncio.wait_for(preparing.wait(), WAIT)
        release.set()
        raise Boom

    async def fine(arguments: Any, ctx: tr.RunContext) -> str:
        await asyncio.Event().wait()
        return "never"

    async def pre(execution: tr.Execution, call_next: Callable[[], Awaitable[Any]]) -> Any:
        if execution.call_id == "3":
            preparing.set()
            await asyncio.wait_for(release.wait(), WAIT)
        return await call_next()

    async def around(execution: tr.Execution, call_next: Callable[[], Awaitable[Any]]) -> Any:
        log.append(f"dispatch {execution.call_id}")
        return await call_next()

    registry.register(raw("fails", fails, concurrency_safe=True))
    registry.register(raw("fine", fine, concurrency_safe=True))
    registry.pre_execute(pre)
    registry.around_execute(around)
    calls = [tr.ToolCall(call_id="1", name="fails"), tr.ToolCall(call_id="2", name="fine"),
             tr.ToolCall(call_id="3", name="fine")]
    with pytest.raises(Boom):
        await asyncio.wait_for(registry.run(calls), WAIT)

    assert log == ["dispatch 1", "dispatch 2"]


async def test_after_a_scheduler_failure_a_commit_in_progress_notifies_nothing() -> None:
    registry = tr.ToolRegistry()
    notified: list[str] = []
    committing = asyncio.Event()
    failed = asyncio.Event()

    async def quick(arguments: Any, ctx: tr.RunContext) -> str:
        return "ok"

    async def fails(arguments: Any, ctx: tr.RunContext) -> str:
        await asyncio.wait_for(committing.wait(), WAIT)
        failed.set()
        raise Boom

    async def post(execution: tr.Execution, result: tr.ToolResult,
                   call_next: Callable[[], Awaitable[Any]]) -> Any:
        if execution.call_id == "1":
            committing.set()
            await asyncio.wait_for(failed.wait(), WAIT)  # the failure is recorded by now
        return await call_next()

    registry.register(raw("quick", quick, concurrency_safe=True))
    registry.register(raw("fails", fails, concurrency_safe=True))
    registry.post_execute(post)
    registry.on_result(lambda execution, result: notified.append(execution.call_id))
    calls = [tr.ToolCall(call_id="1", name="quick"), tr.ToolCall(call_id="2", name="fails")]
    with pytest.raises(Boom):
        await asyncio.wait_for(registry.run(calls, max_parallel=2), WAIT)

    assert notified == []


@tr.tool
def takes_sequences(xs: Sequence[int], nested: dict[str, Sequence[int]]) -> str:
    """Report the types the body received."""
    return f"{type(xs).__name__} {type(nested['a']).__name__}"


@tr.tool
def takes_a_union(x: list[int | bool] | str) -> str:
    """Accept a list of ints or bools, or a string."""
    return "ok"


async def test_lax_validation_hands_the_body_lists_as_json_mode_would() -> None:
    registry = tr.ToolRegistry()
    registry.register(takes_sequences)
    call = tr.ToolCall(call_id="1", name="takes_sequences",
                       arguments={"xs": [1, 2], "nested": {"a": [1]}})
    result = await registry.execute(call)

    assert result.text == "list list"


async def test_violation_paths_leave_out_union_member_tags_at_every_level() -> None:
    registry = tr.ToolRegistry()
    registry.register(takes_a_union)
    result = await registry.execute(
        tr.ToolCall(call_id="1", name="takes_a_union", arguments={"x": [1, "a"]}))

    assert result.text == (
        'Error: invalid arguments: "x[1]": Input should be a valid integer, unable to parse '
        'string as an integer; "x[1]": Input should be a valid boolean, unable to interpret '
        'input; "x": Input should be a valid string')
