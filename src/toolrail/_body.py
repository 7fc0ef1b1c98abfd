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
import inspect
from typing import TYPE_CHECKING, Any, Final

from ._cancel import CancelSignal
from ._execution import RunContext
from ._json import snapshot_json
from ._outcome import (
    Unrenderable,
    aborted,
    aborted_before_dispatch,
    discard,
    error,
    from_exception,
    frozen_blocks,
    invalid_output,
    message_of,
    render,
)
from ._results import ImageContent, TextContent, ToolOutput, ToolResult, make_result, make_text
from ._watch import Watch, wait_out, watched

if TYPE_CHECKING:
    from ._entry import Entry
    from ._state import CallState

__all__ = ["body_result", "core"]

_NEVER: Final = CancelSignal.never()


async def core(state: CallState, entry: Entry | None) -> ToolResult:
    """The innermost step of the around-execute chain; it never raises an ``Exception``."""
    execution = state.execution
    if entry is None:
        return error(f'unknown tool "{execution.name}"', "UNKNOWN_TOOL", "ToolNotFoundError")
    caller = state.caller
    if caller.cancelled:
        return aborted_before_dispatch()
    if entry.direct and caller is _NEVER and execution._signal is _NEVER:
        task = asyncio.current_task()
        if task is not None and not task.cancelling():
            return await _direct(state, entry, task)
    tool = entry.tool
    context = RunContext(execution)
    watch = Watch(context)
    if caller is not _NEVER:
        watch.follow(caller)
    installed = execution._signal
    if installed is not caller and installed is not _NEVER:
        watch.follow(installed)
    timer = None
    if tool.timeout is not None:
        timer = asyncio.get_running_loop().call_later(tool.timeout, watch.expire)
    state.invoked = True
    failure: ToolResult | None = None
    try:
        if entry.fast:
            out = await watched(entry.start(execution._arguments, context), watch)
            if entry.finish is not None:
                out = entry.finish(execution._name, out)
        else:
            out = await _unwatched(entry, context, watch)
    except asyncio.CancelledError as exc:
        if watch.external:
            raise
        if not (watch.fired and entry.interrupts):
            failure = error(message_of(exc), None, "CancelledError")  # the body's own doing
    except Exception as exc:
        failure = from_exception(exc)
    finally:
        watch.stop()
        if timer is not None:
            timer.cancel()
        context._active = False
        if context._deferred:
            if state.deferred is None:
                state.deferred = []
            state.deferred.extend(context._deferred)
    if watch.external:
        raise asyncio.CancelledError  # the body swallowed a cancellation of this task
    if watch.timed_out:
        return error(f"tool call timed out after {tool.timeout:g}s", "TOOL_TIMEOUT",
                     "ToolTimeoutError")
    if watch.fired and entry.interrupts:
        return aborted()
    if failure is not None:
        return failure
    return body_result(entry, out, context._concludes)


async def _direct(state: CallState, entry: Entry, task: asyncio.Task[Any]) -> ToolResult:
    """A body with nothing to watch (see ``Entry.direct``), awaited as it is.

    Only a cancellation of ``task`` can reach it. ``task`` was not being cancelled when
    the body started, so ``task.cancelling()`` tells that cancellation from the body's
    own ``CancelledError``, and reveals one the body swallowed.
    """
    execution = state.execution
    state.invoked = True
    try:
        out = await entry.start(execution._arguments, None)
        if entry.finish is not None:
            out = entry.finish(execution._name, out)
    except asyncio.CancelledError as exc:
        if task.cancelling():
            raise
        return error(message_of(exc), None, "CancelledError")  # the body's own doing
    except Exception as exc:
        return from_exception(exc)
    if task.cancelling():
        raise asyncio.CancelledError  # the body swallowed a cancellation of this task
    return body_result(entry, out, False)


async def _unwatched(entry: Entry, context: RunContext, watch: Watch) -> Any:
    """A body the signal cannot interrupt: a thread, an inline sync body, a cooperative one."""
    tool = entry.tool
    context.signal  # made now, on the loop: a worker thread must not create it  # noqa: B018
    if entry.kind == "thread":
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(None, contextvars.copy_context().run, tool.execute,
                                      context._arguments, context)
        out = await wait_out(future, watch.cancelled_from_outside)
    else:
        out = tool.execute(context._arguments, context)
    if not inspect.isawaitable(out):
        return out
    if tool.cancellation == "cooperative":
        return await wait_out(asyncio.ensure_future(out), watch.cancelled_from_outside)
    return await watched(out, watch)  # an inline sync body that returned an awaitable


def body_result(entry: Entry, out: Any, concludes: bool) -> ToolResult:
    """The body return table, with the lossless and output-schema checks.

    The result is fully materialized: frozen, lossless and consistent.
    """
    if type(out) is str and entry.check_output is None:
        return make_result((make_text(out),), False, out, None, None, (), concludes)
    name = entry.tool.name
    content: Any = None
    meta: Any = None
    try:
        if out is None:
            value: Any = None
            content = ()
        elif isinstance(out, ToolOutput):
            value, content, meta = out.value, out.content, out.meta
        elif isinstance(out, TextContent | ImageContent):
            value, content = None, (out,)
        elif _is_content_list(out):
            value, content = None, out
        else:
            value = out
        value = snapshot_json(value)
        if entry.check_output is not None:
            violations = entry.check_output(value)
            if violations:
                return invalid_output(name, "; ".join(violations))
        content = render(value) if content is None else content
    except Unrenderable as exc:
        return invalid_output(name, f"value cannot be rendered as text: {exc}")
    except Exception as exc:
        discard(out)  # a coroutine returned as a value is never awaited: close it
        return invalid_output(name, message_of(exc))
    try:
        content = frozen_blocks(content)
        meta = snapshot_json(meta)
    except Exception:
        return error("tool result must be losslessly JSON-serializable")
    return make_result(content, False, value, None, meta, (), concludes)


def _is_content_list(out: Any) -> bool:
    if not isinstance(out, list | tuple):
        return False
    try:
        return bool(out) and all(isinstance(b, TextContent | ImageContent) for b in out)
    except Exception:  # unreadable: the snapshot reports it, with its path
        return False
