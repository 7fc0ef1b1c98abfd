"""The execute pipeline (pipeline.md), split where the scheduler needs it.

``prepare`` runs stages 1-7 (snapshot, pre-execute, approval, guards), ``dispatch``
stages 8-9 (around-execute and the body) and ``commit`` stages 10-13 (post-execute,
materialize, finalize content, observers). ``execute`` is the three in a row; the
scheduler overlaps only ``dispatch``.

Failures become results here and nowhere else. Two kinds travel differently:
*dispatch results* (unknown tool, body failure, timeout, abort) go on through
around- and post-execute middleware; *final errors* (a middleware, guard or approver
that raises or misbehaves) skip to materialization.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Final

from ._cancel import CancelController, CancelSignal
from ._chains import Stage
from ._decisions import UNSET, Accept, Allow, ApprovalOutcome, ApprovalRequest, Ask, Block, Deny
from ._errors import ToolError
from ._execution import Execution, ExecutionToken, RunContext
from ._interrupt import Interrupt, external_cancel, wait_out
from ._json import MISSING, JsonValue, snapshot_json
from ._results import ContextMessage, ErrorInfo, ImageContent, TextContent, ToolOutput, ToolResult
from ._tool import ToolCall

if TYPE_CHECKING:
    from ._entry import Entry
    from ._registry import ToolRegistry

__all__ = ["CallState", "commit", "dispatch", "execute", "prepare"]

_NEVER: Final = CancelSignal.never()
_ALLOW: Final = Allow()
_set = object.__setattr__

# What a call's state is between stages.
READY, DENIED, DISPATCHED, FINAL, NOT_STARTED = range(5)


class CallState:
    """One call between its stages."""

    __slots__ = ("caller", "deferred", "entry", "execution", "finalize", "invoked", "phase",
                 "result")

    def __init__(self, execution: Execution, caller: CancelSignal,
                 finalize: Callable[..., Any] | None) -> None:
        self.execution = execution
        self.caller = caller
        self.finalize = finalize
        self.phase = READY
        self.result: ToolResult | None = None
        self.entry: Entry | None = None
        self.invoked = False
        self.deferred: list[ContextMessage] = []

    def end(self, phase: int, result: ToolResult) -> CallState:
        self.phase = phase
        self.result = result
        return self


class _Invalid(Exception):
    """A failure the registry itself detects (an invalid return): no code, no type."""


async def execute(registry: ToolRegistry, call: ToolCall, scope: Hashable | None) -> ToolResult:
    state = await prepare(registry, call, scope, call.signal)
    if state.phase is READY:
        await dispatch(registry, state)
    return await commit(registry, state)


# ---- stages 1-7: prepare ------------------------------------------------------------


async def prepare(registry: ToolRegistry, call: ToolCall, scope: Hashable | None,
                  signal: CancelSignal | None) -> CallState:
    """Stages 1-7: read, snapshot, pre-execute, approval, guards, cancellation checks."""
    call_id, name, raw, parent = call.call_id, call.name, call.arguments, call.parent
    if signal is None:
        signal = _NEVER
    entry = registry._resolve(name, scope)
    try:
        arguments: Any = snapshot_json(raw)
    except ValueError:
        arguments = MISSING
    execution = Execution(ExecutionToken(), call_id, name, arguments, scope, parent, signal)
    state = CallState(execution, signal, None if entry is None else entry.tool.finalize_content)
    if arguments is MISSING:
        return state.end(FINAL, error("tool call arguments must be losslessly JSON-serializable"))
    if signal.cancelled:
        return state.end(NOT_STARTED, aborted_before_dispatch())
    chain = registry._chains.for_call(Stage.PRE, scope)
    try:
        decision = await _walk_pre(chain, execution) if chain else _ALLOW
        if type(decision) is Ask:
            decision = await _approve(registry, execution, decision)
            if decision is None:
                return state.end(NOT_STARTED, aborted_before_dispatch())
        if type(decision) is Allow:
            reason = _run_guards(registry._guards_for(scope), execution)
            if reason is not None:
                decision = Deny(reason)
    except Exception as exc:
        return state.end(FINAL, from_exception(exc))
    if type(decision) is Deny:
        return state.end(DENIED, error(decision.reason, "DENIED"))
    if signal.cancelled:
        return state.end(NOT_STARTED, aborted_before_dispatch())
    return state


async def _walk_pre(chain: tuple[Callable[..., Any], ...], execution: Execution) -> Any:
    last = len(chain)

    async def at(i: int) -> Any:
        if i == last:
            return _ALLOW
        out = chain[i](execution, lambda: at(i + 1))
        if type(out) not in _PRE_TYPES and inspect.isawaitable(out):
            out = await out
        kind = type(out)
        if (kind is Allow or (kind is Deny and type(out.reason) is str)
                or (kind is Ask and (out.reason is None or type(out.reason) is str))):
            return out
        raise _Invalid(f"pre-execute middleware returned {safe_repr(out)}, not Allow, Deny or Ask")

    return await at(0)


_PRE_TYPES: Final = frozenset({Allow, Deny, Ask})


async def _approve(registry: ToolRegistry, execution: Execution, ask: Ask) -> Allow | Deny | None:
    """The approval table; ``None`` means the call's signal fired while pending."""
    name = execution.name
    approver = registry.approver
    if approver is None:
        reason = ask.reason
        if reason is None:
            reason = f'tool "{name}" requires approval, but no approver is configured'
        return Deny(reason)
    signal = execution.signal
    if signal.cancelled:
        return None  # asking a human about an already-cancelled call is pointless
    request = ApprovalRequest(execution.call_id, name, execution.arguments, execution.scope,
                              ask.reason, signal)
    outcome = approver(request)
    if inspect.isawaitable(outcome):
        if signal is _NEVER:
            outcome = await outcome
        else:
            interrupt = Interrupt(signal)
            try:
                outcome = await outcome
            except BaseException as exc:
                fired = interrupt.disarm()
                if isinstance(exc, asyncio.CancelledError) and external_cancel():
                    raise
                if fired:
                    return None
                raise
            if interrupt.disarm():
                return None
    try:
        answer = ApprovalOutcome(outcome) if isinstance(outcome, str) else None
    except ValueError:
        answer = None
    if answer is ApprovalOutcome.ALLOWED_ONCE:
        return _ALLOW
    if answer is ApprovalOutcome.REJECTED:
        return Deny(f'the user rejected tool "{name}"')
    if answer is ApprovalOutcome.CANCELLED:
        return Deny(f'approval for tool "{name}" was cancelled')
    if answer is ApprovalOutcome.UNAVAILABLE:
        return Deny(f'tool "{name}" requires approval, but no approval channel is available')
    raise _Invalid(f"approver returned an invalid outcome: {safe_repr(outcome)}")


def _run_guards(guards: tuple[Callable[[Execution], Any], ...], execution: Execution) -> str | None:
    for guard in guards:
        verdict = guard(execution)
        if verdict is None:
            continue
        if type(verdict) is str:
            return verdict
        if isinstance(verdict, str):
            return str.__str__(verdict)
        _discard(verdict)
        raise _Invalid(
            f"guard {safe_repr(guard)} returned {safe_repr(verdict)}; a guard returns a reason "
            "string to deny or None to abstain"
        )
    return None


# ---- stages 8-9: dispatch -----------------------------------------------------------


async def dispatch(registry: ToolRegistry, state: CallState) -> None:
    """Stages 8-9: resolve the tool, run around-execute middleware and the body."""
    execution = state.execution
    entry = state.entry = registry._resolve(execution.name, execution.scope)
    chain = registry._chains.for_call(Stage.AROUND, execution.scope)
    if not chain:
        result = await _core(state, entry)
    else:
        _set(execution, "_signal_writable", True)
        try:
            result = await _walk_around(chain, execution, lambda: _core(state, entry))
        except Exception as exc:
            state.end(FINAL, from_exception(exc))
            return
        finally:
            _set(execution, "_signal_writable", False)
            _set(execution, "signal", state.caller)
    if state.deferred:
        try:
            result = _replace(result, contexts=(*state.deferred, *result.contexts))
        except Exception:
            result = _replace(result, contexts=tuple(state.deferred))
    error_info = result.error
    skipped = isinstance(error_info, ErrorInfo) and error_info.code == "ABORTED_BEFORE_DISPATCH"
    state.end(NOT_STARTED if skipped else DISPATCHED, result)


async def _walk_around(chain: tuple[Callable[..., Any], ...], execution: Execution,
                       core: Callable[[], Awaitable[ToolResult]]) -> ToolResult:
    last = len(chain)

    async def at(i: int) -> ToolResult:
        if i == last:
            return await core()
        out = chain[i](execution, lambda: at(i + 1))
        if type(out) is not ToolResult and inspect.isawaitable(out):
            out = await out
        if isinstance(out, ToolResult):
            return out
        raise _Invalid(f"around-execute middleware returned {safe_repr(out)}, not a ToolResult")

    return await at(0)


async def _core(state: CallState, entry: Entry | None) -> ToolResult:
    """Invoke the body once and turn whatever happens into a dispatch result."""
    execution = state.execution
    if entry is None:
        return error(f'unknown tool "{execution.name}"', "UNKNOWN_TOOL", "ToolNotFoundError")
    caller = state.caller
    if caller.cancelled:
        return aborted_before_dispatch()
    tool = entry.tool
    timeout = tool.timeout
    installed = execution.signal
    # A thread or cooperative body outlives a cancellation of this task, so it needs a
    # signal of its own to be told; an interrupted body is told by CancelledError.
    own = entry.kind == "thread" or tool.cancellation == "cooperative"
    run = _BodyRun(caller, installed, timeout, own)
    context = RunContext(execution, run.signal)
    state.invoked = True
    failure: ToolResult | None = None
    try:
        out = await run.invoke(entry, execution.arguments, context)
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
        context._settle()
        state.deferred.extend(context._deferred)
    if run.timed_out:
        return error(f"tool call timed out after {timeout:g}s", "TOOL_TIMEOUT",
                     "ToolTimeoutError")
    if run.interrupted:
        return error("tool call aborted", "ABORTED", "ToolAbortedError")
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

    async def invoke(self, entry: Entry, arguments: JsonValue, context: RunContext) -> Any:
        tool = entry.tool
        if entry.kind == "thread":
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(None, contextvars.copy_context().run, tool.execute,
                                          arguments, context)
            out = await wait_out(future, self._on_cancel)
        else:
            out = tool.execute(arguments, context)
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
    """The body return table, with the lossless and output-schema checks."""
    name = entry.tool.name
    try:
        content: Any = None
        meta = None
        if type(out) is str:
            return ToolResult((TextContent(out),), False, out, None, None, (), concludes)
        if out is None:
            value = None
            content = ()
        elif isinstance(out, ToolOutput):
            value, content, meta = out.value, out.content, out.meta
        elif isinstance(out, TextContent | ImageContent):
            value, content = None, (out,)
        elif (isinstance(out, list | tuple) and out
              and all(isinstance(b, TextContent | ImageContent) for b in out)):
            value, content = None, tuple(out)
        else:
            value = out
        value = snapshot_json(value)
        if entry.check_output is not None:
            violations = entry.check_output(value)
            if violations:
                return invalid_output(name, "; ".join(violations))
        content = render(value) if content is None else tuple(content)
    except _Unrenderable as exc:
        return invalid_output(name, f"value cannot be rendered as text: {exc}")
    except Exception as exc:
        return invalid_output(name, message_of(exc))
    return ToolResult(content, False, value, None, meta, (), concludes)


class _Unrenderable(Exception):
    pass


def render(value: JsonValue) -> tuple[TextContent, ...]:
    """A canonical value's content: a str as is, ``None`` as nothing, else its JSON."""
    if isinstance(value, str):
        return (TextContent(value),)
    if value is None:
        return ()
    try:
        return (TextContent(json.dumps(value, ensure_ascii=False)),)
    except Exception as exc:
        raise _Unrenderable(message_of(exc)) from exc


def invalid_output(name: str, reason: str) -> ToolResult:
    return error(f'tool "{name}" returned invalid output: {reason}', "INVALID_TOOL_OUTPUT",
                 "ToolOutputError")


# ---- stages 10-13: commit -----------------------------------------------------------


async def commit(registry: ToolRegistry, state: CallState) -> ToolResult:
    """Stages 10-13: post-execute, abort conversion, materialize, finalize, notify."""
    execution = state.execution
    result = state.result
    assert result is not None
    if state.phase is DISPATCHED or state.phase is DENIED:
        chain = registry._chains.for_call(Stage.POST, execution.scope)
        if chain:
            try:
                decision = await _walk_post(chain, execution, result)
                result = _apply_post(state, decision, result)
            except Exception as exc:
                result = from_exception(exc)
                state.phase = FINAL
        if state.invoked and state.caller.cancelled and not _is_error(result):
            result = error("tool call aborted", "ABORTED", "ToolAbortedError",
                           contexts=result.contexts)
    result = materialize(result)
    if state.finalize is not None:
        result = _finalize(state.finalize, execution, result)
    observers = registry._chains.for_call(Stage.RESULT, execution.scope)
    if observers:
        _notify(registry, observers, execution, result)
    return result


async def _walk_post(chain: tuple[Callable[..., Any], ...], execution: Execution,
                     result: ToolResult) -> Any:
    last = len(chain)
    accept = Accept()

    async def at(i: int) -> Any:
        if i == last:
            return accept
        out = chain[i](execution, result, lambda: at(i + 1))
        if type(out) is not Accept and type(out) is not Block and inspect.isawaitable(out):
            out = await out
        if _valid_post(out):
            return out
        raise _Invalid(f"post-execute middleware returned {safe_repr(out)}, not Accept or Block")

    return await at(0)


def _valid_post(out: Any) -> bool:
    if isinstance(out, Accept):
        content = out.content
        return (content is None or isinstance(content, str) or _is_blocks(content)) and (
            _is_contexts(out.contexts))
    if isinstance(out, Block):
        return (isinstance(out.feedback, str) or _is_blocks(out.feedback)) and _is_contexts(
            out.contexts)
    return False


def _is_blocks(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str) and all(
        isinstance(b, TextContent | ImageContent) for b in value)


def _is_contexts(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str) and all(
        isinstance(c, ContextMessage) for c in value)


def _apply_post(state: CallState, decision: Accept | Block, result: ToolResult) -> ToolResult:
    if isinstance(decision, Block):
        feedback = decision.feedback
        blocks = (TextContent(feedback),) if isinstance(feedback, str) else tuple(feedback)
        if not blocks or blocks == (TextContent(""),):
            message = "tool result blocked by post-execute policy"
            blocks = (TextContent("Error: " + message),)
        else:
            message = "\n".join(b.text if isinstance(b, TextContent) else f"[{b.type} content]"
                                for b in blocks)
        return ToolResult(blocks, True, None, ErrorInfo(message, "BLOCKED"), None,
                          tuple(decision.contexts))
    has_value = decision.value is not UNSET
    if has_value and decision.content is not None:
        raise _Invalid("post-execute Accept cannot replace both value and content")
    contexts = (*result.contexts, *decision.contexts)
    if has_value:
        if _is_error(result):
            raise _Invalid("post-execute cannot replace the value of a failed result")
        return _replace_value(state, result, decision.value, contexts)
    if decision.content is not None:
        content = decision.content
        blocks = (TextContent(content),) if isinstance(content, str) else tuple(content)
        return _replace(result, content=blocks, contexts=contexts)
    return _replace(result, contexts=contexts) if decision.contexts else result


def _replace_value(state: CallState, result: ToolResult, raw: Any,
                   contexts: tuple[ContextMessage, ...]) -> ToolResult:
    name = state.execution.name
    entry = state.entry
    try:
        value = snapshot_json(raw)
        if entry is not None and entry.check_output is not None:
            violations = entry.check_output(value)
            if violations:
                raise _OutputError(name, "; ".join(violations))
        content = render(value)
    except _Unrenderable as exc:
        raise _OutputError(name, f"value cannot be rendered as text: {exc}") from exc
    except ValueError as exc:
        raise _OutputError(name, message_of(exc)) from exc
    return _replace(result, value=value, content=content, contexts=contexts)


class _OutputError(ToolError):
    code = "INVALID_TOOL_OUTPUT"

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f'tool "{name}" returned invalid output: {reason}')


_OutputError.__name__ = "ToolOutputError"  # reported as the public class it stands for


def materialize(result: ToolResult) -> ToolResult:
    """Stage 11: snapshot and deep-freeze the result, and restore its invariants."""
    try:
        content = _frozen_blocks(result.content)
        is_error = result.is_error is True
        value = snapshot_json(result.value)
        meta = snapshot_json(result.meta)
        contexts = tuple(_frozen_context(c) for c in result.contexts)
        concludes = result.concludes_turn is True
        error_info = result.error
        if is_error:
            value, concludes = None, False
            if not (isinstance(error_info, ErrorInfo) and type(error_info.message) is str
                    and (error_info.code is None or type(error_info.code) is str)
                    and (error_info.type is None or type(error_info.type) is str)):
                error_info = ErrorInfo(_text(content))
        else:
            error_info = None
    except Exception:
        return error("tool result must be losslessly JSON-serializable")
    if (content is result.content and is_error is result.is_error and value is result.value
            and meta is result.meta and error_info is result.error
            and concludes is result.concludes_turn and contexts == result.contexts
            and type(result) is ToolResult):
        return result
    return ToolResult(content, is_error, value, error_info, meta, contexts, concludes)


def _frozen_blocks(blocks: Any) -> tuple[TextContent | ImageContent, ...]:
    if type(blocks) is tuple and all(
        (type(b) is TextContent and type(b.text) is str) for b in blocks
    ):
        return blocks
    out: list[TextContent | ImageContent] = []
    for block in blocks:
        if isinstance(block, TextContent):
            out.append(TextContent(_plain_str(block.text)))
        elif isinstance(block, ImageContent):
            out.append(ImageContent(_plain_str(block.data), _plain_str(block.mime_type)))
        else:
            raise ValueError(f"not content: {type(block).__name__}")
    return tuple(out)


def _plain_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("content fields must be str")
    return str.__str__(value)


def _frozen_context(context: Any) -> ContextMessage:
    if not isinstance(context, ContextMessage):
        raise ValueError(f"not a ContextMessage: {type(context).__name__}")
    content = _frozen_blocks(context.content)
    source = _plain_str(context.source)
    meta = snapshot_json(context.meta)
    if content is context.content and source is context.source and meta is context.meta:
        return context
    return ContextMessage(content, source, meta)


def _finalize(finalize: Callable[..., Any], execution: Execution,
              result: ToolResult) -> ToolResult:
    try:
        out = finalize(execution, result)
    except Exception as exc:
        return from_exception(exc)
    if out is None:
        return result
    try:
        if not isinstance(out, Sequence) or isinstance(out, str):
            raise ValueError
        content = _frozen_blocks(tuple(out))
    except Exception:
        _discard(out)
        return error(f"finalize_content returned {safe_repr(out)}, not None or a sequence of "
                     "Content")
    return _replace(result, content=content)


def _notify(registry: ToolRegistry, observers: tuple[Callable[..., Any], ...],
            execution: Execution, result: ToolResult) -> None:
    for observer in observers:
        try:
            out = observer(execution, result)
        except Exception as exc:
            _observer_failed(registry, execution, message_of(exc))
            continue
        if out is not None and inspect.isawaitable(out):
            _discard(out)
            _observer_failed(registry, execution, "observers must be synchronous")


def _observer_failed(registry: ToolRegistry, execution: Execution, message: str) -> None:
    registry.logger.warning('tool "%s" (%s): result observer failed: %s', execution.name,
                            execution.call_id, message)


# ---- result building ----------------------------------------------------------------


def error(message: str, code: str | None = None, type_name: str | None = None, *,
          contexts: tuple[ContextMessage, ...] = ()) -> ToolResult:
    """An error result as the registry builds it: one ``Error: <message>`` text block."""
    return ToolResult((TextContent("Error: " + message),), True, None,
                      ErrorInfo(message, code, type_name), None, contexts)


def aborted_before_dispatch() -> ToolResult:
    return error("tool call aborted before dispatch", "ABORTED_BEFORE_DISPATCH",
                 "ToolAbortedError")


def from_exception(exc: Exception) -> ToolResult:
    """The error result for an exception raised anywhere in the pipeline."""
    if isinstance(exc, _Invalid):
        return error(message_of(exc))
    code = None
    if isinstance(exc, ToolError):
        try:
            code = exc.code if isinstance(exc.code, str) else None
        except Exception:
            code = None
    return error(message_of(exc), code, type(exc).__name__)


def message_of(exc: BaseException) -> str:
    """``str(exc)``; the class name when that is empty; a placeholder when it raises."""
    try:
        text = str(exc)
    except Exception:
        return "<unprintable thrown value>"
    return text or type(exc).__name__


def safe_repr(value: Any) -> str:
    """``repr(value)``, or ``<TypeName object>`` when ``repr`` fails."""
    try:
        text = repr(value)
        if isinstance(text, str):
            return text
    except Exception:
        pass
    return f"<{type(value).__name__} object>"


def _is_error(result: ToolResult) -> bool:
    return result.is_error is not False and bool(result.is_error)


def _text(content: tuple[TextContent | ImageContent, ...]) -> str:
    return "\n".join(b.text for b in content if isinstance(b, TextContent))


def _replace(result: ToolResult, **changes: Any) -> ToolResult:
    fields = {
        "content": result.content, "is_error": result.is_error, "value": result.value,
        "error": result.error, "meta": result.meta, "contexts": result.contexts,
        "concludes_turn": result.concludes_turn,
    }
    fields.update(changes)
    return ToolResult(**fields)


def _discard(value: Any) -> None:
    """Close a coroutine or cancel a future nobody will await."""
    if inspect.iscoroutine(value):
        value.close()
    elif isinstance(value, asyncio.Future):
        value.cancel()
