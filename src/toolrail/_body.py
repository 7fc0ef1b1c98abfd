"""Stage 8's core: invoke a tool body once and turn whatever happens into a result.

An async ``"interrupt"`` body is awaited in the calling task and interrupted by
cancelling that task (``_interrupt``); a ``"cooperative"`` body runs in a child task
that only its signal tells to stop; a sync body runs in a worker thread (or inline).
Whatever the path, the registry waits for the body to finish before it returns.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ._cancel import CancelController, CancelSignal
from ._execution import RunContext
from ._interrupt import Interrupt, external_cancel, wait_out
from ._json import snapshot_json
from ._outcome import (
    Unrenderable,
    aborted,
    aborted_before_dispatch,
    error,
    from_exception,
    frozen_blocks,
    invalid_output,
    message_of,
    render,
)
from ._results import ImageContent, TextContent, ToolOutput, ToolResult, make_result, make_text

if TYPE_CHECKING:
    from ._entry import Entry
    from ._pipeline import CallState

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
    if not entry.fast or execution._signal is not caller:
        return await _watched_core(state, entry)
    # The common path: an async interrupt body without timeout, whose body signal is
    # the caller's own; it is awaited here and interrupted through this task.
    context = RunContext(execution, caller)
    interrupt = None if caller is _NEVER else Interrupt(caller)
    state.invoked = True
    try:
        out = await entry.start(execution._arguments, context)
        if entry.finish is not None:
            out = entry.finish(execution._name, out)
    except asyncio.CancelledError as exc:
        fired = interrupt is not None and interrupt.disarm()
        if external_cancel():
            raise
        if fired:
            return aborted()
        return error(message_of(exc), None, "CancelledError")  # the body's own doing
    except Exception as exc:
        if interrupt is not None and interrupt.disarm():
            return aborted()
        return from_exception(exc)
    finally:
        context._active = False
        if context._deferred:
            state.deferred.extend(context._deferred)
    if interrupt is not None and interrupt.disarm():
        return aborted()
    return body_result(entry, out, context._concludes)


async def _watched_core(state: CallState, entry: Entry) -> ToolResult:
    """``core`` for a body whose signal can fire, or that must outlive cancellation."""
    execution = state.execution
    tool = entry.tool
    # A thread or cooperative body outlives a cancellation of this task, so it needs a
    # signal of its own to be told; an interrupted body is told by CancelledError.
    own = entry.kind == "thread" or tool.cancellation == "cooperative"
    run = _BodyRun(state.caller, execution._signal, tool.timeout, own)
    context = RunContext(execution, run.signal)
    state.invoked = True
    failure: ToolResult | None = None
    try:
        out = await run.invoke(entry, context)
    except asyncio.CancelledError as exc:
        run.finish()
        if external_cancel():
            run.cancel_body("cancelled")
            raise
        failure = error(message_of(exc), None, "CancelledError")  # the body's own doing
    except Exception as exc:
        run.finish()
        failure = from_exception(exc)
    else:
        run.finish()
    finally:
        context._active = False
        if context._deferred:
            state.deferred.extend(context._deferred)
    if run.timed_out:
        return error(f"tool call timed out after {tool.timeout:g}s", "TOOL_TIMEOUT",
                     "ToolTimeoutError")
    if run.interrupted:
        return aborted()
    if failure is not None:
        return failure
    return body_result(entry, out, context._concludes)


class _BodyRun:
    """One body invocation: its signal, its timeout, and whether either ended it."""

    __slots__ = ("_controller", "_disposers", "_interrupt", "_timer", "interrupted", "signal",
                 "timed_out")

    def __init__(self, caller: CancelSignal, installed: CancelSignal,
                 timeout: float | None, own: bool) -> None:
        self.timed_out = False
        self.interrupted = False
        self._interrupt: Interrupt | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._controller: CancelController | None = None
        self._disposers: tuple[Any, ...] = ()
        if timeout is None and installed is caller and not own:
            self.signal = caller  # the body signal is the caller's: nothing to combine
            return
        controller = self._controller = CancelController()
        self.signal = controller.signal
        sources = (caller,) if installed is caller else (caller, installed)
        self._disposers = tuple(
            s.add_callback(_forward(s, controller)) for s in sources if s is not _NEVER
        )
        if timeout is not None:
            self._timer = asyncio.get_running_loop().call_later(timeout, self._expire)

    def _expire(self) -> None:
        self.timed_out = True
        self.cancel_body("timeout")

    def cancel_body(self, reason: str) -> None:
        """Fire the body signal (when it is the run's own, not the caller's)."""
        if self._controller is not None:
            self._controller.cancel(reason)

    async def invoke(self, entry: Entry, context: RunContext) -> Any:
        tool = entry.tool
        if entry.kind == "thread":
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(None, contextvars.copy_context().run, tool.execute,
                                          context._arguments, context)
            out = await wait_out(future, self._on_cancel)
        else:
            out = tool.execute(context._arguments, context)
        if not inspect.isawaitable(out):
            return out
        if tool.cancellation == "cooperative":
            return await wait_out(asyncio.ensure_future(out), self._on_cancel)
        if self.signal is not _NEVER:
            self._interrupt = Interrupt(self.signal)
        return await out

    def _on_cancel(self) -> None:
        self.cancel_body("cancelled")

    def finish(self) -> None:
        """Stop watching the signal and the clock; record whether we interrupted."""
        if self._interrupt is not None:
            self.interrupted = self._interrupt.disarm()
            self._interrupt = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for dispose in self._disposers:
            dispose()
        self._disposers = ()


def _forward(source: CancelSignal, target: CancelController) -> Callable[[], None]:
    return lambda: target.cancel(source.reason or "cancelled")


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
        elif (isinstance(out, list | tuple) and out
              and all(isinstance(b, TextContent | ImageContent) for b in out)):
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
        return invalid_output(name, message_of(exc))
    try:
        content = frozen_blocks(content)
        meta = snapshot_json(meta)
    except Exception:
        return error("tool result must be losslessly JSON-serializable")
    return make_result(content, False, value, None, meta, (), concludes)
