"""Stages 1-9 of a call (pipeline.md): prepare, then dispatch.

*Prepare* is stages 1-7: ``begin`` (lookup, snapshot, signal), then ``decide``
(pre-execute, approval, guards, the signal again), or ``decide_now`` when there is
nothing to await. *Dispatch* is stages 8-9: ``lookup``, then ``run_dispatch``
(around-execute middleware around the body, whose core is ``body.core_body``).
*Commit*, stages 10-13, is ``commit``. ``ToolRegistry.execute`` runs the three in a
row; the scheduler runs the same functions and overlaps only dispatch.

Failures become results here and nowhere else. Two kinds travel differently:
*dispatch results* (unknown tool, body failure, timeout, abort) go on through around-
and post-execute middleware; *final errors* (a middleware, guard or approver that
raises or misbehaves) skip to materialization.

Each middleware chain is walked by index (``_core.chains.walk``), so ``call_next()`` may
run the rest of the chain more than once. Stages with no middleware take no ``await``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, Final, cast

from .._core.chains import AROUND, PRE, walk
from .._core.presentation import collapsed
from .._model.cancel import CancelSignal
from .._model.decisions import Allow, ApprovalOutcome, ApprovalRequest, Ask, Deny
from .._model.errors import ABORTED_BEFORE_DISPATCH
from .._model.foreign import discard, is_awaitable, message_of, plain_str, safe_repr
from .._model.lossless import MISSING, snapshot_json
from .._model.results import ErrorInfo, ToolResult
from .._model.tool import ToolCall
from .body import core_body
from .execution import Execution, ExecutionToken
from .failures import Invalid, aborted_before_dispatch, denied, error, from_exception, unknown_tool
from .materialize import replace_result
from .state import DISPATCHED, FINAL, NOT_STARTED, READY, REFUSED, CallState
from .watch import Watch, watched

if TYPE_CHECKING:
    from .._core.core import Core

__all__ = ["begin", "check_guards", "decide", "decide_now", "dispatched", "lookup",
           "run_dispatch"]

_NEVER: Final = CancelSignal.never()

_ALLOW: Final = Allow()
_ASK: Final = Ask()

_new = object.__new__


def decide_now(core: Core, state: CallState) -> bool:
    """Stages 4-7 when there is no pre-execute middleware or approval to await; else
    ``False`` (then ``decide`` does them)."""
    chains = core.chains
    if (not chains.quiet and chains.for_call(PRE, state.execution._scope)) or state.asks:
        return False
    check_guards(core, state)
    return True


# ---- stages 1-7 ---------------------------------------------------------------------


def begin(core: Core, call: ToolCall, scope: Hashable | None,
          signal: CancelSignal | None, snapshot: Any = None) -> CallState:
    """Stages 1-3: read the call once, snapshot the arguments, check for cancellation.

    ``snapshot`` is the arguments' snapshot when the scheduler took it to classify.
    """
    call_id, name, parent = call.call_id, call.name, call.parent
    if signal is None:
        signal = _NEVER
    unscoped: Exception | None = None
    try:
        entry = core.resolve(name, scope)
    except Exception as exc:  # a scope that cannot be hashed or compared
        entry, unscoped = None, exc
    arguments: Any = snapshot
    if arguments is None:
        try:
            arguments = snapshot_json(call.arguments)
        except ValueError:
            arguments = MISSING
    # Built field by field, not through ``__init__``: one call frame instead of three.
    execution = _new(Execution)
    execution._token = ExecutionToken()
    execution._call_id = call_id
    execution._name = name
    execution._arguments = arguments
    execution._scope = scope
    execution._parent = parent
    execution._signal = signal
    execution._signal_writable = False
    state = CallState()
    state.execution = execution
    state.core = core
    state.caller = signal
    state.looked_up = entry
    state.asks = entry is not None and entry.approval is not None
    state.finalize = None if entry is None else entry.tool.finalize_content
    state.phase = READY
    state.result = None
    state.entry = None
    state.invoked = False
    state.deferred = None
    state.trusted = True
    if unscoped is not None:
        state.finalize = None
        state.end(FINAL, error(f"tool call scope must be hashable: {message_of(unscoped)}"))
    elif arguments is MISSING:
        state.end(FINAL, error("tool call arguments must be losslessly JSON-serializable"))
    elif signal.cancelled:
        state.end(NOT_STARTED, aborted_before_dispatch())
    elif core.coded and core.refuses(call, scope):
        # code-mode.md, "The collapse": only run_code is callable by the model directly.
        state.finalize = None
        state.end(FINAL, unknown_tool(name, collapsed(name)))
    return state


async def decide(core: Core, state: CallState) -> None:
    """Stages 4-7: pre-execute, approval, guards, the cancellation recheck."""
    execution = state.execution
    chain = core.chains.for_call(PRE, execution._scope)
    try:
        decision = (await walk(chain, (execution,), _allow, _plain_pre, _accept_pre)
                    if chain else _ALLOW)
        looked_up = state.looked_up
        if type(decision) is Allow and looked_up is not None and (
                looked_up.requires_approval(execution._arguments)):
            decision = _ASK  # the tool requires approval: as for Ask(None)
        if type(decision) is Ask:
            unrunnable = _unrunnable(state)
            if unrunnable is not None:
                # A person is never asked about a call that cannot run (pipeline.md).
                state.end(REFUSED, unrunnable)
                return
            approved = await _approve(core, execution, decision)
            if approved is None:
                state.end(NOT_STARTED, aborted_before_dispatch())
                return
            decision = approved
    except Exception as exc:
        state.end(FINAL, from_exception(exc))
        return
    if type(decision) is Deny:
        state.end(REFUSED, denied(decision.reason))
    else:
        check_guards(core, state)


def _unrunnable(state: CallState) -> ToolResult | None:
    """The dispatch error a call would certainly end in (its tool not visible at stage 1,
    or a typed tool's invalid arguments), else ``None``."""
    looked_up = state.looked_up
    if looked_up is None:
        return unknown_tool(state.execution._name)
    reason = looked_up.cannot_run(state.execution._arguments)
    return None if reason is None else from_exception(reason)


def check_guards(core: Core, state: CallState) -> None:
    """Stages 5-7 for an allowed call."""
    execution = state.execution
    scope = execution._scope
    guards = core.guards if scope is None else core.guards_for(scope)
    if guards:
        try:
            reason = _run_guards(guards, execution)
        except Exception as exc:
            state.end(FINAL, from_exception(exc))
            return
        if reason is not None:
            state.end(REFUSED, denied(reason))
            return
    if state.caller.cancelled:
        state.end(NOT_STARTED, aborted_before_dispatch())


def _plain_pre(out: Any) -> bool:
    kind = type(out)  # compared by identity: a metaclass's __eq__ or __hash__ never runs
    return kind is Allow or kind is Deny or kind is Ask


def _accept_pre(out: Any) -> Any:
    kind = type(out)
    if kind is Allow or (kind is Ask and out.reason is None):
        return out
    if (kind is Deny or kind is Ask) and issubclass(type(out.reason), str):
        return out if type(out.reason) is str else kind(str.__str__(out.reason))
    discard(out)
    raise Invalid(f"pre-execute middleware returned {safe_repr(out)}, not Allow, Deny or Ask")


async def _allow() -> Allow:
    return _ALLOW


async def _approve(core: Core, execution: Execution, ask: Ask) -> Allow | Deny | None:
    """The approval table; ``None`` when the call's signal fired while it was pending."""
    name = execution._name
    approver = core.approver
    if approver is None:
        reason = ask.reason
        if reason is None:
            reason = f'tool "{name}" requires approval, but no approver is configured'
        return Deny(reason)
    signal = execution._signal
    if signal.cancelled:
        return None  # asking a human about an already-cancelled call is pointless
    request = ApprovalRequest(execution._call_id, name, execution._arguments, execution._scope,
                              ask.reason, signal)
    outcome = approver(request)
    if is_awaitable(outcome):
        watch = Watch()
        if signal is not _NEVER:
            watch.follow(signal)
        try:
            outcome = await watched(outcome, watch)
        except BaseException:
            if watch.fired and not watch.stands():
                return None
            raise
        finally:
            watch.stop()
        if watch.stands():
            raise asyncio.CancelledError  # the approver swallowed a cancellation of this task
        if watch.fired:
            return None
    try:
        # read by its value, like reasons: a str subclass cannot lie through __eq__
        answer = ApprovalOutcome(str.__str__(outcome)) if issubclass(type(outcome), str) else None
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
    discard(outcome)
    raise Invalid(f"approver returned an invalid outcome: {safe_repr(outcome)}")


def _run_guards(guards: tuple[Any, ...], execution: Execution) -> str | None:
    for guard in guards:
        verdict = guard.fn(execution)
        if verdict is None:
            continue
        if issubclass(type(verdict), str):
            return str.__str__(verdict)
        discard(verdict)
        raise Invalid(
            f"guard {safe_repr(guard.fn)} returned {safe_repr(verdict)}; a guard returns a "
            "reason string to deny or None to abstain"
        )
    return None


# ---- stages 8-9 ---------------------------------------------------------------------


def lookup(core: Core, state: CallState) -> None:
    """Stage 8's lookup, once, as dispatch starts (a retry runs the same definition)."""
    execution = state.execution
    state.entry = core.resolve(execution._name, execution._scope)


async def run_dispatch(core: Core, state: CallState) -> None:
    """Stages 8-9 after ``lookup``: around-execute middleware around the body."""
    execution = state.execution
    entry = state.entry
    chains = core.chains
    chain = () if chains.quiet else chains.for_call(AROUND, execution._scope)
    if not chain:
        dispatched(state, await core_body(state, entry))
        return
    state.trusted = False
    execution._signal_writable = True
    try:
        result = await walk(chain, (execution,), lambda: core_body(state, entry),
                            _plain_around, _accept_around)
    except Exception as exc:
        state.end(FINAL, from_exception(exc))
        return
    finally:
        execution._signal_writable = False
        execution._signal = state.caller
    dispatched(state, result)


def dispatched(state: CallState, result: ToolResult) -> None:
    """Stage 9, and whether the call ended before its body could start."""
    try:
        if state.deferred is not None:
            state.trusted = False
            result = replace_result(result, contexts=(*state.deferred, *result.contexts))
        info = result.error
        code = info.code if type(info) is ErrorInfo else None
    except Exception:  # a middleware's result whose fields cannot be read
        state.trusted = True
        state.end(FINAL, error("tool result must be losslessly JSON-serializable"))
        return
    # By its plain value: a str subclass's own __eq__ never runs. (A retry's attempt
    # after the stop gets ABORTED from the core once the body ran: see ``core``.)
    skipped = code is not None and plain_str(code) == ABORTED_BEFORE_DISPATCH
    state.phase = NOT_STARTED if skipped else DISPATCHED  # ``state.end``, without its frame
    state.result = result


def _plain_around(out: Any) -> bool:
    return type(out) is ToolResult


def _accept_around(out: Any) -> ToolResult:
    if issubclass(type(out), ToolResult):
        return cast(ToolResult, out)
    discard(out)
    raise Invalid(f"around-execute middleware returned {safe_repr(out)}, not a ToolResult")
