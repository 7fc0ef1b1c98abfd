"""Stage 8's core: invoke a tool body once and turn whatever happens into a result.

The *body signal* (``RunContext.signal``) fires when the caller's signal, a signal
installed by around-execute middleware, or the tool's timeout fires, or when the task
running the call is cancelled. How the body is run decides what firing does:

* an async ``"interrupt"`` body is awaited in the calling task through ``watched``,
  which interrupts it (``CancelledError`` at its current await);
* a ``"cooperative"`` body runs in a child task that only the signal tells to stop;
* a sync body runs in a worker thread (or inline), which nothing can interrupt.

Whatever the path, the registry waits for the body to finish before it returns.
"""

from __future__ import annotations

import asyncio
import contextvars
from asyncio import get_running_loop
from types import CoroutineType
from typing import TYPE_CHECKING, Any, Final

from .._model.cancel import CancelSignal
from .._model.errors import ToolOutputError
from .._model.foreign import discard, is_awaitable, message_of
from .._model.lossless import snapshot_json
from .._model.results import (
    ToolOutput,
    ToolResult,
    is_content,
    make_result,
    make_text,
    only_content,
)
from .bodytask import BodyTask, current_tasks
from .execution import RunContext
from .failures import (
    aborted,
    aborted_before_dispatch,
    error,
    from_exception,
    invalid_output,
    timed_out,
    unknown_tool,
)
from .materialize import checked_value, frozen_blocks, rendered
from .watch import Watch, report_callback_error, resume, wait_out, watched

if TYPE_CHECKING:
    from .._core.entry import Entry
    from .state import CallState

__all__ = ["body_result", "core_body"]

_NEVER: Final = CancelSignal.never()
_BIG: Final = 10**18
_new = object.__new__


async def core_body(state: CallState, entry: Entry | None) -> ToolResult:
    """The innermost step of the around-execute chain; it never raises an ``Exception``.

    An async interrupt body (``entry.fast``) is awaited in this task and watched from
    its first wait on. Its first step runs before anything watches it: nothing can
    interrupt a step, and no timer can fire during one. A body that returns without
    waiting (the common case for a quick tool) never needs a ``Watch``; one that waits
    gets it then, with the timeout's deadline counted from the body's start. A signal
    that fired during that first step is found then: at once by the ``Watch``, or
    afterwards for a body that did not wait (the run context's own signal follows the
    caller's meanwhile). Any other body is watched from the start (``_watched_body``).

    Every step of the body runs with a ``BodyTask`` as the current task (``bodytask``),
    so that its own cancellations are told from the call's.
    """
    execution = state.execution
    caller = state.caller
    if entry is None or caller.cancelled:
        return _not_invoked(state, entry)
    state.invoked = True
    if not entry.fast or execution._signal.cancelled:
        return await _watched_body(state, entry)
    loop = get_running_loop()
    started = loop.time() if entry.tool.timeout is not None else 0.0
    # A typed function without a RunContext parameter never sees one: none is made.
    context = None if entry.context_free else RunContext(execution, caller, state.core, loop)
    watch: Watch | None = None
    body: BodyTask | None = None
    failure: ToolResult | None = None
    out: Any = None
    try:
        steps = entry.start(execution._arguments, context)
        if type(steps) is not CoroutineType:
            steps = steps.__await__()
        task = current_tasks.get(loop)
        if task is not None:  # BodyTask.of(task), without its frame: the hot path
            body = BodyTask()
            body._task = task
            body._done = False
            current_tasks[loop] = body
        try:
            yielded = steps.send(None)
        except StopIteration as stop:
            out = stop.value
        else:
            watch = _watch(state, entry, context, started, body)
        finally:
            if body is not None:
                current_tasks[loop] = task
        if watch is not None:
            out = await resume(steps, yielded, watch)
        if entry.finish is not None:
            out = entry.finish(execution._name, out)
    except asyncio.CancelledError as exc:
        if watch is not None and watch.stands():
            raise
        failure = _own_cancellation(entry, watch, exc)
    except Exception as exc:
        failure = from_exception(exc)
    finally:
        _settle(state, context, watch, body)
    return _outcome(state, entry, watch, failure, out, context)


def _not_invoked(state: CallState, entry: Entry | None) -> ToolResult:
    """The dispatch result of a call whose body is not invoked."""
    if entry is None:
        return unknown_tool(state.execution._name)
    # A retry's later attempt: the call's body did run, so the call was aborted.
    return aborted() if state.invoked else aborted_before_dispatch()


async def _watched_body(state: CallState, entry: Entry) -> ToolResult:
    """A body watched from its start: one the signal cannot interrupt (a thread, an inline
    sync body, a cooperative one: ``_unwatched``), or an async one whose around-execute
    middleware installed a signal that has already fired (interrupted at its very first
    step)."""
    execution = state.execution
    context = None if entry.context_free else RunContext(execution, state.caller, state.core)
    watch = _watch(state, entry, context, None)
    failure: ToolResult | None = None
    out: Any = None
    try:
        if entry.fast:
            out = await watched(entry.start(execution._arguments, context), watch)
            if entry.finish is not None:
                out = entry.finish(execution._name, out)
        else:
            assert context is not None
            out = await _unwatched(entry, context, watch)
    except asyncio.CancelledError as exc:
        if watch.stands():
            raise
        failure = _own_cancellation(entry, watch, exc)
    except Exception as exc:
        failure = from_exception(exc)
    finally:
        _settle(state, context, watch, None)
    return _outcome(state, entry, watch, failure, out, context)


def _own_cancellation(entry: Entry, watch: Watch | None,
                      exc: asyncio.CancelledError) -> ToolResult | None:
    """The failure a ``CancelledError`` out of the body is: ``None`` when the watch
    interrupted it, else one of the body's own doing (pipeline.md "Body")."""
    if watch is not None and watch.fired and (entry.interrupts or watch.interrupts):
        return None
    return error(message_of(exc), None, "CancelledError")


def _watch(state: CallState, entry: Entry, context: RunContext | None,
           started: float | None, body: BodyTask | None = None) -> Watch:
    """A watch on the call's signals and the tool's clock (from ``started``, else now)."""
    watch = Watch(context, body)
    caller = state.caller
    if caller is not _NEVER:
        watch.follow(caller)
    installed = state.execution._signal
    if installed is not caller and installed is not _NEVER:
        watch.follow(installed)
    timeout = entry.tool.timeout
    if timeout is not None:
        loop = asyncio.get_running_loop()
        deadline = (loop.time() if started is None else started) + timeout
        watch.timer = loop.call_at(deadline, watch.expire)
    return watch


def _unwatch(watch: Watch) -> None:
    watch.stop()
    if watch.timer is not None:
        watch.timer.cancel()


def _outcome(state: CallState, entry: Entry, watch: Watch | None, failure: ToolResult | None,
             out: Any, context: RunContext | None) -> ToolResult:
    """The dispatch result of a settled body (the most specific outcome first)."""
    if watch is not None:
        if watch.stands():
            raise asyncio.CancelledError  # the body swallowed a cancellation of this task
        if watch.timed_out:
            return timed_out(entry.tool.timeout)  # type: ignore[arg-type]
        fired = watch.fired and (entry.interrupts or watch.interrupts)
        if fired and watch.delivered:
            return aborted()  # interrupted, it has not failed (pipeline.md "Cancellation")
    else:
        fired = _fired_during_step(state, context)
    result = failure if failure is not None else body_result(
        entry, out, context is not None and context._concludes)
    # A failure it met before any interruption reached it is its own, an invalid output
    # included; a success under a fired signal is an abort (the outcome table).
    return aborted() if fired and not result.is_error else result


def _fired_during_step(state: CallState, context: RunContext | None) -> bool:
    """Whether a signal fired during the only step of a body that never waited; then the
    body signal fires now: nothing has passed it on yet."""
    caller, installed = state.caller, state.execution._signal
    if not (caller.cancelled or installed.cancelled):
        return False
    if context is not None:
        fired = caller if caller.cancelled else installed
        try:
            context._cancel_body(fired.reason or "cancelled")
        except Exception as exc:  # its callbacks: nobody's cancel() is there to raise
            report_callback_error(exc)
    return True


def _settle(state: CallState, context: RunContext | None, watch: Watch | None,
            body: BodyTask | None) -> None:
    """The invocation is over: nothing watches it, its stand-in task reaches nothing, its
    context's effects stop and its messages are kept."""
    if watch is not None:
        _unwatch(watch)
    elif body is not None:
        body._done = True
    if context is not None:
        context._settle()
        if context._deferred:
            if state.deferred is None:
                state.deferred = []
            state.deferred.extend(context._deferred)


async def _unwatched(entry: Entry, context: RunContext, watch: Watch) -> Any:
    """A body the signal cannot interrupt: a thread, an inline sync body, a cooperative one."""
    tool = entry.tool
    context.signal  # made now, on the loop: a worker thread must not create it  # noqa: B018
    if entry.kind == "thread":
        loop = context._loop = asyncio.get_running_loop()  # for report_progress
        future = loop.run_in_executor(None, contextvars.copy_context().run, tool.execute,
                                      context._arguments, context)
        out = await wait_out(future, watch.cancelled_from_outside)
    else:
        out = tool.execute(context._arguments, context)
    if not is_awaitable(out):
        return out
    if tool.cancellation == "cooperative":
        return await wait_out(asyncio.ensure_future(out), watch.cancelled_from_outside)
    watch.interrupts = True  # a sync body that returned an awaitable: interrupt that
    return await watched(out, watch)


def body_result(entry: Entry, out: Any, concludes: bool) -> ToolResult:
    """The body return table, with the lossless and output-schema checks.

    The result is fully materialized: frozen, lossless and consistent.
    """
    kind = type(out)  # by type, never isinstance: that reads the value's own __class__
    if entry.check_output is None:  # the plain values a body returns most: no JSON encoder
        if kind is str:
            return make_result((make_text(out),), False, out, None, None, (), concludes)
        if kind is bool:
            return make_result((make_text("true" if out else "false"),), False, out, None, None,
                               (), concludes)
        if kind is int and -_BIG < out < _BIG:  # longer ones may be too long to print
            return make_result((make_text(int.__repr__(out)),), False, out, None, None, (),
                               concludes)
    name = entry.tool.name
    content: Any = None
    meta: Any = None
    try:
        if out is None:
            value: Any = None
            content = ()
        elif issubclass(kind, ToolOutput):
            value, content, meta = out.value, out.content, out.meta
        elif is_content(out):
            value, content = None, (out,)
        elif only_content(out):
            value, content = None, out
        else:
            value = out
        value = checked_value(name, entry.check_output, value)
        if content is None:
            content = rendered(name, value)
    except Exception as exc:
        discard(out)  # a coroutine returned as a value is never awaited: close it
        if type(exc) is ToolOutputError:  # checked_value's, with the spec's message
            return from_exception(exc)
        return invalid_output(name, message_of(exc))
    try:
        content = frozen_blocks(content)
        meta = snapshot_json(meta)
    except Exception:
        return error("tool result must be losslessly JSON-serializable")
    return make_result(content, False, value, None, meta, (), concludes)


