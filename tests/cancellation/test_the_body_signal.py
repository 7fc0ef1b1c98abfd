"""pipeline.md "Cancellation": "The *body signal* fires when the caller's signal, a signal
installed by an around-execute middleware, or the tool's timeout fires."

It fires even during a body's only step (a body that never waits), when a callback on
it raises, and when a worker thread made it first. Ordering is proven with gates
(``asyncio.Event``, ``threading.Event`` for a worker thread), never with sleeps;
``asyncio.timeout(0)`` expires at the loop's next turn.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable
from typing import Any

import pytest

import toolrail as tr
from helpers import own_timeout, raw_tool, results_seen, settled

WAIT = 5


def raising_callback() -> None:
    raise RuntimeError("callback failed")


def thread_reads_signal_first(ctx: tr.RunContext) -> asyncio.Future[str]:
    """Start a worker thread that reads ``ctx.signal`` first (so it subscribes nothing),
    and return once it has: the caller is still in the body's first step."""
    read = threading.Event()

    def worker() -> str:
        ctx.signal  # noqa: B018  made here, in the worker thread
        read.set()
        return "thread"

    future = asyncio.get_running_loop().run_in_executor(None, worker)
    assert read.wait(WAIT)
    return future


async def test_a_raising_body_signal_callback_does_not_abandon_a_body_whose_own_timeout_fires(
) -> None:
    """pipeline.md "Cancellation": "the registry never returns while a body it started
    is still running"; "Execute": only the task's own cancellation propagates. The body
    adds a callback to its signal that raises, then bounds a wait with ``asyncio.timeout``.
    The trampoline fires the body signal when that timeout's ``CancelledError`` passes
    (``Watch.cancelled_from_outside``); the callback's exception escapes the trampoline
    before the ``CancelledError`` is thrown into the body. Expected: the body is resumed
    and finishes, ``execute`` does not raise ``CancelledError``, the task is not left
    cancelling."""
    registry = tr.ToolRegistry()
    log: list[str] = []

    async def bounded(arguments: Any, ctx: tr.RunContext) -> str:
        ctx.signal.add_callback(raising_callback)
        try:
            return await own_timeout()
        finally:
            log.append("body finished")

    registry.register(raw_tool("bounded", bounded))

    async def call() -> tuple[tr.ToolResult | None, list[str], int]:
        task = asyncio.current_task()
        assert task is not None
        try:
            result: tr.ToolResult | None = await registry.execute(
                tr.ToolCall(call_id="1", name="bounded"))
        except asyncio.CancelledError:
            result = None
        return result, list(log), task.cancelling()

    try:
        result, finished, cancelling = await asyncio.wait_for(asyncio.ensure_future(call()),
                                                              WAIT)
        assert finished == ["body finished"], "execute returned while the body was suspended"
        assert result is not None, "execute raised CancelledError; nothing cancelled the task"
        assert cancelling == 0
    finally:
        gc.collect()  # an abandoned body is closed here, not in a later test


async def test_a_raising_body_signal_callback_does_not_abandon_a_body_when_its_task_is_cancelled(
) -> None:
    """pipeline.md "Cancellation": "If the task running execute is itself cancelled ...
    the body is awaited, then ``CancelledError`` propagates (no result is built or
    notified)". The body added a raising callback to its signal; the trampoline fires
    that signal before it throws the cancellation in, and the callback's exception
    escapes it. Expected: the body's ``finally`` has run when ``CancelledError`` reaches
    the caller."""
    registry = tr.ToolRegistry()
    seen = results_seen(registry)
    entered = asyncio.Event()
    log: list[str] = []

    async def slow(arguments: Any, ctx: tr.RunContext) -> str:
        ctx.signal.add_callback(raising_callback)
        entered.set()
        try:
            await asyncio.Event().wait()
            return "never"
        finally:
            log.append("body finished")

    registry.register(raw_tool("slow", slow))
    task = asyncio.ensure_future(registry.execute(tr.ToolCall(call_id="1", name="slow")))
    try:
        await asyncio.wait_for(entered.wait(), WAIT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, WAIT)
        assert log == ["body finished"], "CancelledError propagated before the body finished"
        assert seen == []
    finally:
        gc.collect()


async def test_a_body_cancelling_its_caller_after_a_thread_made_its_signal_is_aborted(
) -> None:
    """pipeline.md "Execute": ``execute`` never raises for anything a tool did; docs
    "Decisions": "A body that cancels its own caller's signal and returns without ever
    waiting is ``ABORTED``, and its body signal fires with the caller's reason". Here a
    worker thread made the body signal (it follows nothing), the body added a callback
    that raises, cancelled its caller and returned without waiting. The registry fires
    the body signal afterwards (``_awaited``'s no-wait branch) and the callback's
    exception escapes ``core``. Expected: ``ABORTED``."""
    registry = tr.ToolRegistry()
    controller = tr.CancelController()

    async def no_wait(arguments: Any, ctx: tr.RunContext) -> str:
        thread_reads_signal_first(ctx)
        ctx.signal.add_callback(raising_callback)
        controller.cancel("stop")  # nothing of the body's follows the caller yet
        return "done"

    registry.register(raw_tool("t", no_wait))
    try:
        result = await asyncio.wait_for(
            registry.execute(tr.ToolCall(call_id="1", name="t", signal=controller.signal)),
            WAIT)
    except RuntimeError as exc:
        pytest.fail(f"execute raised {exc!r} from a body signal callback")
    assert result.error == tr.ErrorInfo("tool call aborted", "ABORTED", "ToolAbortedError")
    assert not controller.signal._callbacks


async def test_a_body_waiting_after_a_thread_made_its_signal_is_awaited_before_execute_returns(
) -> None:
    """pipeline.md "Cancellation": "the registry never returns while a body it started
    is still running". A worker thread made the body signal; the body added a raising
    callback, cancelled its caller, then waited. The ``Watch`` made at that first wait
    follows the already-fired caller and fires the body signal at once; the callback's
    exception escapes ``_watch()`` before the trampoline has the body. Expected: the
    body is interrupted at that wait and finishes (``ABORTED``)."""
    registry = tr.ToolRegistry()
    controller = tr.CancelController()
    log: list[str] = []

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        future = thread_reads_signal_first(ctx)
        ctx.signal.add_callback(raising_callback)
        controller.cancel("stop")
        try:
            return await future
        finally:
            log.append("body finished")

    registry.register(raw_tool("t", body))
    try:
        result = await asyncio.wait_for(
            registry.execute(tr.ToolCall(call_id="1", name="t", signal=controller.signal)),
            WAIT)
        assert log == ["body finished"], "execute returned while the body was suspended"
        assert result.error == tr.ErrorInfo("tool call aborted", "ABORTED",
                                            "ToolAbortedError")
    finally:
        gc.collect()


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

