"""pipeline.md "Cancellation": "Outcomes, most specific first" (the outcome table).

The rows for bodies that ran: "the body fails, times out, or post-execute fails or
blocks" -> that outcome; "the body was invoked, the caller's signal has fired, and the
outcome after post-execute would otherwise be a success" -> ``ABORTED``. The rows before
the body: test_aborted_before_dispatch.py.

Three defects from randomized cancellation runs: a sync callable returning a coroutine
was not interrupted like an async body; a retrying around-middleware turned a body
that ran into ``ABORTED_BEFORE_DISPATCH``; a body that failed on its own after its
signal fired had its failure replaced by ``ABORTED``. Each runs through ``execute``,
``run`` and ``stream``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import toolrail as tr
from cancellation_helpers import execute_until, registry_for
from helpers import ABORTED, PostNext, assert_error, raw_tool, until, wait_forever, within


async def _committed(how: str, registry: tr.ToolRegistry,
                     signal: tr.CancelSignal) -> list[tuple[tr.ToolResult, bool | None]]:
    """One call of ``t`` with ``signal``: its result (and, for ``stream``, ``started``)."""
    call = tr.ToolCall(call_id="1", name="t", signal=signal)
    if how == "execute":
        return [(await within(registry.execute(call)), None)]
    if how == "run":
        batch = await within(registry.run([tr.ToolCall(call_id="1", name="t")], signal=signal))
        return [(result, None) for result in batch.results]

    async def streamed() -> list[tuple[tr.ToolResult, bool | None]]:
        stream = registry.stream([tr.ToolCall(call_id="1", name="t")], signal=signal)
        return [(item.result, item.started) async for item in stream]

    return await within(streamed())


HOW = ["execute", "run", "stream"]


async def committed_once_cancelled(
    how: str, execute: Any, started: asyncio.Event
) -> tuple[tr.ToolResult, bool | None]:
    """The one call of ``t`` (whose ``execute`` sets ``started``), committed ``how``, with
    a signal that fires once ``started`` is set."""
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", execute))
    controller = tr.CancelController()
    task = asyncio.ensure_future(_committed(how, registry, controller.signal))
    await within(until(started))
    controller.cancel()
    [committed] = await within(task)
    return committed


def _failing_async(controller: tr.CancelController, wait_first: bool) -> Any:
    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        if wait_first:
            await asyncio.sleep(0)
        controller.cancel()
        raise ValueError("disk full")

    return body


def _failing_sync(controller: tr.CancelController) -> Any:
    def body(arguments: Any, ctx: tr.RunContext) -> str:
        controller.cancel()
        raise ValueError("disk full")

    return body


@pytest.mark.parametrize("post_does", ["blocks", "raises"])
async def test_post_execute_blocking_or_failing_after_cancellation_gives_that_outcome(
    post_does: str,
) -> None:
    started = asyncio.Event()
    controller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        await asyncio.wait_for(ctx.signal.wait(), 5)
        return "finished"

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Block:
        if post_does == "raises":
            raise tr.ToolError("audit log unavailable", code="AUDIT")
        return tr.Block("not shown to the model")

    registry = registry_for(body, cancellation="cooperative")
    registry.post_execute(post)

    task = await execute_until(registry, started, controller.signal)
    controller.cancel()
    result = await asyncio.wait_for(task, 5)

    if post_does == "blocks":
        assert result.error == tr.ErrorInfo("not shown to the model", "BLOCKED")
        assert result.content == (tr.TextContent("not shown to the model"),)
    else:
        assert_error(result, "audit log unavailable", "AUDIT", "ToolError")


@pytest.mark.parametrize("how", HOW)
async def test_a_sync_callable_returning_a_coroutine_is_interrupted_and_aborted(how: str) -> None:
    started = asyncio.Event()

    async def work(arguments: Any) -> str:
        started.set()
        await wait_forever()
        return "never"

    result, started_flag = await committed_once_cancelled(
        how, lambda arguments, ctx: work(arguments), started
    )
    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")
    assert started_flag in (None, True)


@pytest.mark.parametrize("how", HOW)
async def test_a_retry_after_the_signal_fired_reports_the_body_that_ran_as_aborted(
        how: str) -> None:
    controller = tr.CancelController()
    attempts: list[str] = []
    post_saw: list[str | None] = []

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        attempts.append("body")
        controller.cancel()  # the stop arrives while the first attempt runs
        return "ran"

    async def retry(execution: tr.Execution, call_next: Callable[[], Awaitable[tr.ToolResult]]
                    ) -> tr.ToolResult:
        await call_next()
        return await call_next()

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: Any) -> Any:
        post_saw.append(result.error.code if result.error else None)
        return call_next()

    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", body))
    registry.around_execute(retry)
    registry.post_execute(post)
    [(result, started_flag)] = await _committed(how, registry, controller.signal)
    assert attempts == ["body"]  # the second attempt finds the signal fired
    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")
    assert post_saw == ["ABORTED"], "post-execute must see a call whose body ran"
    assert started_flag in (None, True)


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("kind", ["async", "async after a wait", "inline", "thread",
                                  "cooperative"])
async def test_a_body_failing_on_its_own_after_its_signal_fired_keeps_its_failure(
        kind: str, how: str) -> None:
    """Outcome table: "the body fails ... → that outcome"; the signal fired, but no
    interruption reached the body before it failed."""
    controller = tr.CancelController()
    if kind in ("inline", "thread"):
        tool = raw_tool("t", _failing_sync(controller), inline=kind == "inline")
    else:
        tool = raw_tool("t", _failing_async(controller, kind != "async"),
                        cancellation="cooperative" if kind == "cooperative" else "interrupt")
    registry = tr.ToolRegistry()
    registry.register(tool)
    [(result, _)] = await _committed(how, registry, controller.signal)
    assert_error(result, "disk full", None, "ValueError")


@pytest.mark.parametrize("how", HOW)
async def test_a_body_that_fails_once_interrupted_is_still_aborted(how: str) -> None:
    """The other side of the rule: an interrupt body ended by the interruption "has not
    failed", whatever it raised while unwinding."""
    started = asyncio.Event()

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        started.set()
        try:
            await wait_forever()
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None
        return "never"

    result, _ = await committed_once_cancelled(how, body, started)
    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")



@pytest.mark.parametrize("wait_first", [False, True], ids=["never waits", "waits first"])
@pytest.mark.parametrize("how", HOW)
async def test_a_body_that_cancels_its_call_then_returns_an_invalid_value_gets_invalid_output(
        how: str, wait_first: bool) -> None:
    # "the body fails ... -> that outcome": an invalid output is the body's own failure,
    # met before any interruption reached it (it never waits after the signal fired).
    controller = tr.CancelController()

    async def body(arguments: Any, ctx: tr.RunContext) -> Any:
        if wait_first:
            await asyncio.sleep(0)
        controller.cancel()
        return {1, 2}  # a set is not JSON

    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", body))
    [(result, started)] = await _committed(how, registry, controller.signal)
    assert_error(result, 'tool "t" returned invalid output: value is not lossless JSON: $ is a '
                 "set", "INVALID_TOOL_OUTPUT", "ToolOutputError")
    assert started in (None, True)
    assert controller.signal.cancelled


@pytest.mark.parametrize("how", HOW)
async def test_a_body_that_cancels_its_call_then_returns_a_valid_value_is_aborted(
        how: str) -> None:
    controller = tr.CancelController()

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        controller.cancel()
        return "ran"

    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", body))
    [(result, _)] = await _committed(how, registry, controller.signal)
    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")
