"""Cancellations a tool body (or an approver) causes itself, and signals that fire during
a body's only step.

A body's own ``asyncio.timeout``, a ``TaskGroup`` whose child fails, or a future someone
else cancels all deliver a ``CancelledError`` through the task running the call; none
of them is a cancellation of that task from outside, so the call's outcome is the
body's own. Found by a review against the spec; each test names the rule it pins.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

import toolrail as tr
from helpers import own_timeout, raw_tool, results_seen, settled

WAIT = 5
T = TypeVar("T")










# ---- a cancellation the body (or the approver) caused and handled itself ----------------


async def test_a_body_bounding_a_wait_with_asyncio_timeout_gets_its_own_result() -> None:
    """pipeline.md "Execute": execute never raises for anything caused by a tool; only the
    task's own cancellation propagates ("Cancellation": "If the task running execute is
    itself cancelled"). A body that bounds a wait with ``asyncio.timeout`` and handles the
    ``TimeoutError`` returned a value: that is its result, although the ``CancelledError``
    that ``asyncio.timeout`` delivers passed through the task like one from outside."""
    registry = tr.ToolRegistry()
    seen = results_seen(registry)

    async def bounded(arguments: Any, ctx: tr.RunContext) -> str:
        return await own_timeout()

    registry.register(raw_tool("bounded", bounded))
    result = await settled(registry.execute(tr.ToolCall(call_id="1", name="bounded")))

    assert result.error is None
    assert result.text == "fallback"
    assert seen == [result]


async def test_a_typed_body_bounding_a_wait_with_asyncio_timeout_gets_its_own_result() -> None:
    """Same rule as above on the typed fast path (no RunContext: ``context=None``)."""
    registry = tr.ToolRegistry()

    @registry.tool
    async def bounded(path: str) -> str:
        return path + ":" + await own_timeout()

    result = await settled(registry.execute(
        tr.ToolCall(call_id="1", name="bounded", arguments={"path": "p"})))

    assert result.error is None
    assert result.text == "p:fallback"


async def test_a_body_whose_task_group_child_fails_is_that_failure() -> None:
    """pipeline.md "Body": an exception from the body is an error result with message
    ``str(exc)`` and ``type`` its class name. A ``TaskGroup`` whose child fails cancels the
    task it runs in to stop its block, then raises ``ExceptionGroup``; nobody cancelled the
    task running execute, so the result is that failure, not a ``CancelledError``."""
    registry = tr.ToolRegistry()
    seen = results_seen(registry)

    async def fan_out(arguments: Any, ctx: tr.RunContext) -> str:
        async def child() -> None:
            raise ValueError("child failed")

        async with asyncio.TaskGroup() as group:
            group.create_task(child())
            await asyncio.Event().wait()
        return "never"

    registry.register(raw_tool("fan_out", fan_out))
    result = await settled(registry.execute(tr.ToolCall(call_id="1", name="fan_out")))

    assert result.error == tr.ErrorInfo(
        "unhandled errors in a TaskGroup (1 sub-exception)", None, "ExceptionGroup")
    assert result.text == "Error: unhandled errors in a TaskGroup (1 sub-exception)"
    assert seen == [result]


async def test_a_body_awaiting_a_future_someone_else_cancels_is_a_cancelled_error_failure(
) -> None:
    """pipeline.md "Body": "A ``CancelledError`` raised by the body when neither the
    registry nor the caller's task asked for a cancellation is such a failure too (type
    ``CancelledError``)" -- with the class name as its message when ``str`` is empty. Here
    a third party cancels the future the body awaits: the task was never cancelled."""
    registry = tr.ToolRegistry()
    waiting = asyncio.Event()
    shared: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def awaits_shared(arguments: Any, ctx: tr.RunContext) -> str:
        waiting.set()
        return await shared

    registry.register(raw_tool("t", awaits_shared))
    task = asyncio.ensure_future(registry.execute(tr.ToolCall(call_id="1", name="t")))
    await asyncio.wait_for(waiting.wait(), WAIT)
    shared.cancel()  # someone else gives up on the shared work
    result = await settled(task)

    assert result.error == tr.ErrorInfo("CancelledError", None, "CancelledError")
    assert result.text == "Error: CancelledError"


async def test_an_approver_bounding_its_wait_with_asyncio_timeout_gets_its_answer_applied(
) -> None:
    """pipeline.md "Approval": an approver that returns ``unavailable`` denies with ``tool
    "<name>" requires approval, but no approval channel is available``. An approver that
    waits for a human at most so long (``asyncio.timeout``) and then answers
    ``unavailable`` must get that denial, not a ``CancelledError`` out of execute."""

    async def approver(request: tr.ApprovalRequest) -> str:
        answer = await own_timeout()
        return "unavailable" if answer == "fallback" else "allowed-once"

    registry = tr.ToolRegistry(approver=approver)
    registry.pre_execute(lambda execution, call_next: tr.Ask())

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        return "ran"

    registry.register(raw_tool("t", body))
    result = await settled(registry.execute(tr.ToolCall(call_id="1", name="t")))

    message = 'tool "t" requires approval, but no approval channel is available'
    assert result.error == tr.ErrorInfo(message, "DENIED")
    assert result.text == "Error: " + message


async def test_run_with_bodies_bounding_waits_with_asyncio_timeout_returns_every_result(
) -> None:
    """scheduler.md "Results": every call gets exactly one result; "Failures of the
    scheduler itself" are exceptions the pipeline lets through -- and the pipeline must
    not let a tool's own, handled ``asyncio.timeout`` through as a cancellation (here it
    fails the whole batch with ``CancelledError`` from a dispatch task)."""
    registry = tr.ToolRegistry()

    async def bounded(arguments: Any, ctx: tr.RunContext) -> str:
        return await own_timeout()

    registry.register(raw_tool("t", bounded, concurrency_safe=True))
    batch = await settled(registry.run(
        [tr.ToolCall(call_id=str(i), name="t") for i in range(3)], max_parallel=3))

    assert [r.text for r in batch.results] == ["fallback"] * 3
    assert not batch.cancelled


# ---- a signal that fires during a body's only step ---------------------------------------


async def test_the_body_signal_fires_when_the_callers_fires_during_a_body_that_never_waits(
) -> None:
    """pipeline.md "Cancellation": "The body signal fires when the caller's signal, a
    signal installed by an around-execute middleware, or the tool's timeout fires." A body
    that stops the turn (cancels its caller's signal) and returns without waiting is
    ``ABORTED``, and its run context's signal, handed to work it started, has fired too,
    although the body never read it before the cancel and nothing watched it."""
    registry = tr.ToolRegistry()
    controller = tr.CancelController()
    gate = asyncio.Event()
    seen: list[tuple[bool, str | None]] = []
    helpers: list[asyncio.Task[None]] = []

    async def follow_up(ctx: tr.RunContext) -> None:
        await gate.wait()
        seen.append((ctx.signal.cancelled, ctx.signal.reason))

    async def stop_turn(arguments: Any, ctx: tr.RunContext) -> str:
        helpers.append(asyncio.ensure_future(follow_up(ctx)))  # watches ctx.signal later
        controller.cancel("user pressed stop")
        return "stopping"

    registry.register(raw_tool("stop_turn", stop_turn))
    result = await settled(registry.execute(
        tr.ToolCall(call_id="1", name="stop_turn", signal=controller.signal)))
    assert result.error is not None
    assert result.error.code == "ABORTED"

    gate.set()
    await asyncio.wait_for(helpers[0], WAIT)
    assert seen == [(True, "user pressed stop")]


async def test_the_body_signal_fires_when_an_installed_signal_fires_during_a_body_that_never_waits(
) -> None:
    """The same rule for "a signal installed by an around-execute middleware": the body
    cancels the middleware's signal and returns without waiting; the result is ``ABORTED``
    and its body signal must have fired too."""
    registry = tr.ToolRegistry()
    installed = tr.CancelController()
    kept: list[tr.RunContext] = []

    async def deadline(execution: tr.Execution, call_next: Callable[[], Any]) -> Any:
        execution.signal = installed.signal
        return await call_next()

    registry.around_execute(deadline)

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        kept.append(ctx)
        installed.cancel("deadline")
        return "done"

    registry.register(raw_tool("t", body))
    result = await settled(registry.execute(tr.ToolCall(call_id="1", name="t")))
    assert result.error is not None
    assert result.error.code == "ABORTED"

    assert (kept[0].signal.cancelled, kept[0].signal.reason) == (True, "deadline")


async def test_a_real_cancellation_during_a_bodys_own_timeout_still_propagates() -> None:
    """pipeline.md "Cancellation": the task running execute cancelled while the body waits
    inside its own ``asyncio.timeout`` is still that task's cancellation: the body's
    timeout leaves it standing, and ``CancelledError`` propagates."""
    registry = tr.ToolRegistry()
    seen = results_seen(registry)
    started = asyncio.Event()

    async def bounded(arguments: Any, ctx: tr.RunContext) -> str:
        try:
            async with asyncio.timeout(WAIT):
                started.set()
                await asyncio.Event().wait()
        except TimeoutError:
            return "fallback"
        return "never"

    registry.register(raw_tool("bounded", bounded))
    task = asyncio.ensure_future(registry.execute(tr.ToolCall(call_id="1", name="bounded")))
    await asyncio.wait_for(started.wait(), WAIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, WAIT)
    assert seen == []
