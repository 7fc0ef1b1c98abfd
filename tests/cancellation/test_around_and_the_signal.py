"""pipeline.md "Around and the signal": inside around-execute middleware
``execution.signal`` may be replaced; the body always receives a signal that fires when
either the replacement or the caller's original signal fires; after the chain the
caller's signal is restored; outside around-execute, assigning ``signal`` raises
``AttributeError``.

Every test proves ordering with gates (``asyncio.Event``, ``threading.Event`` for a
worker thread) and bounds its waits; nothing synchronizes with sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest

import toolrail as tr
from cancellation_helpers import execute_until, interruptible, make_call, registry_for
from helpers import ABORTED, CallNext, PostNext, PreNext, assert_error, observe


async def test_firing_a_signal_installed_by_around_execute_interrupts_the_body() -> None:
    started = asyncio.Event()
    body_saw: list[str] = []
    installed: list[tr.CancelController] = []
    caller = tr.CancelController()

    body = interruptible(started, body_saw)

    async def deadline(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        own = tr.CancelController()
        installed.append(own)
        execution.signal = own.signal
        return await call_next()

    registry = registry_for(body)
    registry.around_execute(deadline)

    task = await execute_until(registry, started, caller.signal)
    installed[0].cancel("deadline")
    result = await asyncio.wait_for(task, 5)

    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")
    assert body_saw == ["CancelledError"]
    assert caller.signal.cancelled is False
    assert caller.signal.reason is None


@pytest.mark.parametrize("which", ["caller", "installed"])
async def test_the_body_signal_fires_when_either_the_callers_or_the_installed_signal_fires(
    which: str,
) -> None:
    started = asyncio.Event()
    body_saw: list[bool] = []
    installed: list[tr.CancelController] = []
    caller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        await asyncio.wait_for(ctx.signal.wait(), 5)
        body_saw.append(ctx.signal.cancelled)
        return "finished"

    async def deadline(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        own = tr.CancelController()
        installed.append(own)
        execution.signal = own.signal
        return await call_next()

    registry = registry_for(body, cancellation="cooperative")
    registry.around_execute(deadline)

    task = await execute_until(registry, started, caller.signal)
    (caller if which == "caller" else installed[0]).cancel(f"{which} fired")
    result = await asyncio.wait_for(task, 5)

    assert body_saw == [True]
    if which == "caller":
        # the caller's signal fired and the outcome would be a success
        assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")
    else:
        # only the installed signal fired; the cooperative body still succeeded
        assert result.is_error is False
        assert result.value == "finished"
        assert caller.signal.cancelled is False


async def test_after_the_around_chain_the_execution_signal_is_the_callers_again() -> None:
    caller = tr.CancelController()
    installed = tr.CancelController()
    inside: list[tr.CancelSignal] = []
    after: list[tr.CancelSignal] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        return "done"

    async def replace(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        execution.signal = installed.signal
        inside.append(execution.signal)
        return await call_next()

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        after.append(execution.signal)
        return tr.Accept()

    registry = registry_for(body)
    registry.around_execute(replace)
    registry.post_execute(post)
    seen = observe(registry)

    result = await registry.execute(make_call(caller.signal))

    assert result.value == "done"
    assert inside == [installed.signal]
    assert after == [caller.signal]
    assert seen[0][0].signal is caller.signal


async def test_assigning_the_signal_outside_around_execute_raises_attribute_error() -> None:
    outcomes: dict[str, str] = {}
    replacement = tr.CancelController().signal

    def attempt(where: str, target: tr.Execution) -> None:
        try:
            target.signal = replacement
        except AttributeError:
            outcomes[where] = "AttributeError"
        except Exception as exc:
            outcomes[where] = type(exc).__name__
        else:
            outcomes[where] = "assigned"

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        attempt("body", ctx)
        return "done"

    def pre(execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        attempt("pre", execution)
        return call_next()

    def guard(execution: tr.Execution) -> str | None:
        attempt("guard", execution)
        return None

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        attempt("post", execution)
        return tr.Accept()

    def observer(execution: tr.Execution, result: tr.ToolResult) -> None:
        attempt("observer", execution)

    registry = registry_for(body)
    registry.pre_execute(pre)
    registry.guard(guard)
    registry.post_execute(post)
    registry.on_result(observer)
    seen = observe(registry)
    caller = tr.CancelController()

    result = await registry.execute(make_call(caller.signal))
    attempt("after execute", seen[0][0])

    assert result.value == "done"
    assert outcomes == {
        "pre": "AttributeError",
        "guard": "AttributeError",
        "body": "AttributeError",
        "post": "AttributeError",
        "observer": "AttributeError",
        "after execute": "AttributeError",
    }
    assert seen[0][0].signal is caller.signal

