"""Edges of cancellation: a task that was already being cancelled, raising callbacks on a
body signal, and a body signal first made in a worker thread.

Found by a second review against the spec; each test names the rule it pins. Ordering
is proven with gates (``asyncio.Event``, ``threading.Event`` for a worker thread), never
with sleeps; ``asyncio.timeout(0)`` expires at the loop's next turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

import toolrail as tr
from helpers import own_timeout, raw_tool, results_seen, settled

WAIT = 5
T = TypeVar("T")








async def after_a_handled_cancellation(work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work`` in a task that was cancelled earlier and handled it (as cleanup code
    in an ``except CancelledError`` does): ``cancelling()`` is 1, no cancel is pending,
    and nothing cancels the task while ``work`` runs."""
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()  # the cancellation is delivered here, and handled
    assert task.cancelling() == 1
    return await work()


def raising_callback() -> None:
    raise RuntimeError("callback failed")


# ---- a caller task that was already cancelling when execute started ---------------------


async def test_a_body_bounding_its_wait_in_an_already_cancelling_task_gets_its_own_result(
) -> None:
    """pipeline.md "Execute": only ``BaseException``s propagate, and ``CancelledError``
    only when "the task running execute is itself cancelled" ("Cancellation"). A task
    that handled an earlier cancellation (``cancelling() == 1``) and then runs a call is
    not cancelled again; the body bounds a wait with ``asyncio.timeout`` and handles the
    ``TimeoutError`` (asyncio itself hands it the ``TimeoutError``: the timeout compares
    with the count it saw on entry). Expected: the body's value ``"fallback"``, observed
    once."""
    registry = tr.ToolRegistry()
    seen = results_seen(registry)

    async def bounded(arguments: Any, ctx: tr.RunContext) -> str:
        return await own_timeout()

    registry.register(raw_tool("bounded", bounded))

    async def call() -> tr.ToolResult:
        return await registry.execute(tr.ToolCall(call_id="1", name="bounded"))

    # The reference: the same wait, without the registry, in the same situation.
    assert await asyncio.ensure_future(after_a_handled_cancellation(own_timeout)) == "fallback"
    result = await settled(asyncio.ensure_future(after_a_handled_cancellation(call)))
    assert result.error is None
    assert result.text == "fallback"
    assert seen == [result]


async def test_an_approver_bounding_its_wait_in_an_already_cancelling_task_is_applied(
) -> None:
    """pipeline.md "Approval": the approver's answer is applied; ``CancelledError``
    propagates only when "the task running execute is cancelled while the approver is
    pending". The task handled an earlier cancellation before the call; the approver
    bounds a wait with ``asyncio.timeout``, handles the ``TimeoutError`` and answers
    ``allowed-once``. Expected: the body runs (``"ran"``)."""

    async def approver(request: tr.ApprovalRequest) -> str:
        await own_timeout()
        return "allowed-once"

    registry = tr.ToolRegistry(approver=approver)
    registry.register(raw_tool("gated", lambda arguments, ctx: "ran"))
    registry.pre_execute(lambda execution, call_next: tr.Ask("sure?"))

    async def call() -> tr.ToolResult:
        return await registry.execute(tr.ToolCall(call_id="1", name="gated"))

    result = await settled(asyncio.ensure_future(after_a_handled_cancellation(call)))
    assert result.error is None
    assert result.text == "ran"


# ---- a body signal callback that raises while the trampoline fires the signal -----------


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


# ---- a body signal first read in a worker thread, with a raising callback ---------------


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


async def test_a_cancelled_error_a_dispatch_lets_through_cancels_the_batch_as_a_failure(
) -> None:
    """scheduler.md "Failures of the scheduler itself": any exception the pipeline lets
    through, other than the run task's own CancelledError, "cancels the in-flight calls
    as a batch cancellation would (their body signals fire)" -- so an in-flight body sees
    the batch's reason, not a cancellation of its task."""
    registry = tr.ToolRegistry()
    started = asyncio.Event()
    reasons: list[str | None] = []

    async def patient(arguments: Any, ctx: tr.RunContext) -> str:
        started.set()
        await asyncio.wait_for(ctx.signal.wait(), WAIT)
        reasons.append(ctx.signal.reason)
        return "stopped"

    async def around(execution: tr.Execution, call_next: Callable[[], Any]) -> Any:
        if execution.name == "breaks":
            await asyncio.wait_for(started.wait(), WAIT)
            raise asyncio.CancelledError  # a middleware's own doing: not the run task's
        return await call_next()

    registry.register(raw_tool("patient", patient, concurrency_safe=True,
                          cancellation="cooperative"))
    registry.register(raw_tool("breaks", patient, concurrency_safe=True))
    registry.around_execute(around)
    calls = [tr.ToolCall(call_id="0", name="patient"), tr.ToolCall(call_id="1", name="breaks")]

    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(registry.run(calls), WAIT)
    assert reasons == ["the scheduler failed"]
