"""pipeline.md "Cancellation": ``cancellation="cooperative"``: "the body is left to watch
``run_context.signal`` itself."

A cooperative body is not interrupted; what it returns or raises after its signal fired
follows the outcome table (test_outcomes.py).
Every test proves ordering with gates (``asyncio.Event``, ``threading.Event`` for a
worker thread) and bounds its waits; nothing synchronizes with sleeps.
"""

from __future__ import annotations

import asyncio

import toolrail as tr
from cancellation_helpers import NAME, execute_until, registry_for, still_running
from helpers import ABORTED, PostNext, assert_error, observe, one_turn, until


async def test_a_cooperative_body_that_returns_after_the_signal_is_aborted_with_contexts() -> None:
    started = asyncio.Event()
    body_saw: list[tuple[bool, str | None]] = []
    controller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        await asyncio.wait_for(ctx.signal.wait(), 5)
        body_saw.append((ctx.signal.cancelled, ctx.signal.reason))
        await one_turn()  # still running after the signal fired
        ctx.defer_context("deferred by the body")
        return "finished"

    post_context = tr.ContextMessage((tr.TextContent("from post-execute"),), "policy")
    post_saw: list[tr.ToolResult] = []

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        post_saw.append(result)
        return tr.Accept(contexts=(post_context,))

    registry = registry_for(body, cancellation="cooperative")
    registry.post_execute(post)
    seen = observe(registry)

    task = await execute_until(registry, started, controller.signal)
    controller.cancel("stop")
    result = await asyncio.wait_for(task, 5)

    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")
    assert body_saw == [(True, "stop")]
    deferred = tr.ContextMessage((tr.TextContent("deferred by the body"),), NAME)
    assert result.contexts == (deferred, post_context)
    assert len(post_saw) == 1
    assert post_saw[0].is_error is False
    assert post_saw[0].value == "finished"
    assert len(seen) == 1


async def test_a_cooperative_body_that_raises_after_the_signal_gives_that_failure() -> None:
    started = asyncio.Event()
    controller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        await asyncio.wait_for(ctx.signal.wait(), 5)
        raise tr.ToolError("stopped half way", code="HALF_WAY")

    registry = registry_for(body, cancellation="cooperative")

    task = await execute_until(registry, started, controller.signal)
    controller.cancel()
    result = await asyncio.wait_for(task, 5)

    assert_error(result, "stopped half way", "HALF_WAY", "ToolError")


async def test_a_cooperative_body_is_not_interrupted_by_the_signal() -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    body_saw: list[str] = []
    controller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        try:
            await until(release)
        except asyncio.CancelledError:
            body_saw.append("CancelledError")
            raise
        body_saw.append(f"released, cancelled={ctx.signal.cancelled}")
        return "finished"

    registry = registry_for(body, cancellation="cooperative")

    task = await execute_until(registry, started, controller.signal)
    controller.cancel()
    assert await still_running(task)
    release.set()
    result = await asyncio.wait_for(task, 5)

    assert body_saw == ["released, cancelled=True"]
    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")

