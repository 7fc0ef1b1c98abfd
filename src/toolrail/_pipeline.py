"""The execute pipeline (pipeline.md), split where the scheduler needs it.

*Prepare* is stages 1-7 (``begin``, then ``decide``: snapshot, pre-execute, approval,
guards), *dispatch* stages 8-9 (``resolve``, then ``run_dispatch``: around-execute and
the body, see ``_body``) and *commit* stages 10-13 (``post_execute``, then ``finish``,
in ``_commit``: post-execute, materialize, finalize content, observers). ``execute``
is the three in a row; the scheduler overlaps only dispatch. ``decide_now`` and
``commit_now`` do their stages without an ``await`` when no middleware needs one.

Failures become results here and nowhere else. Two kinds travel differently:
*dispatch results* (unknown tool, body failure, timeout, abort) go on through around-
and post-execute middleware; *final errors* (a middleware, guard or approver that
raises or misbehaves) skip to materialization.

Each middleware chain is walked by index, so ``call_next()`` may run the rest of the
chain more than once. Stages with no middleware take no ``await`` at all.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any, Final

from ._body import core
from ._cancel import CancelSignal
from ._chains import AROUND, POST, PRE
from ._commit import finish, post_execute
from ._decisions import Allow, ApprovalOutcome, ApprovalRequest, Ask, Deny
from ._execution import Execution, ExecutionToken
from ._json import MISSING, snapshot_json
from ._outcome import (
    Invalid,
    aborted_before_dispatch,
    discard,
    error,
    from_exception,
    replace_result,
    safe_repr,
)
from ._presentation import collapsed
from ._results import ErrorInfo, ToolResult
from ._state import DENIED, DISPATCHED, FINAL, NOT_STARTED, READY, CallState
from ._tool import ToolCall
from ._watch import Watch, watched

if TYPE_CHECKING:
    from ._registry import ToolRegistry

__all__ = [
    "begin",
    "commit_now",
    "decide",
    "decide_now",
    "execute",
    "resolve",
    "run_dispatch",
]

_NEVER: Final = CancelSignal.never()

_ALLOW: Final = Allow()

_new = object.__new__

async def execute(
    registry: ToolRegistry, call: ToolCall, _scope: Hashable | None = None
) -> ToolResult:
    """Run one call through the whole pipeline to a final, frozen result.

    Never raises for anything the arguments, a tool, a middleware, a guard, an
    approver or an observer did; only ``BaseException``s that are not ``Exception``s
    propagate, after any body it started has finished. (``ToolRegistry.execute`` is
    this function; ``_scope`` is for ``Scope.execute``, which binds its calls.)
    """
    if not isinstance(call, ToolCall):
        raise TypeError(f"execute() takes a ToolCall, got {type(call).__name__}")
    scope = call.scope if _scope is None else _scope
    state = begin(registry, call, scope, call.signal)
    chains = registry._chains
    # Each stage reads its chain as it stands when it starts (``quiet``: none at all).
    if state.phase == READY:
        if not chains.quiet and chains.for_call(PRE, scope):
            await decide(registry, state)
        else:
            check_guards(registry, state)
        if state.phase == READY:
            resolve(registry, state)
            if not chains.quiet and chains.for_call(AROUND, scope):
                await run_dispatch(registry, state)
            else:
                _dispatched(state, await core(state, state.entry))
    if (state.phase == DISPATCHED or state.phase == DENIED) and not chains.quiet and (
            chains.for_call(POST, scope)):
        await post_execute(registry, state)
    return finish(registry, state)


def decide_now(registry: ToolRegistry, state: CallState) -> bool:
    """Stages 4-7 when there is no pre-execute middleware to await; else ``False``."""
    chains = registry._chains
    if not chains.quiet and chains.for_call(PRE, state.execution._scope):
        return False
    check_guards(registry, state)
    return True


def commit_now(registry: ToolRegistry, state: CallState) -> ToolResult | None:
    """Stages 10-13 when there is no post-execute middleware to await; else ``None``."""
    chains = registry._chains
    if (state.phase == DISPATCHED or state.phase == DENIED) and not chains.quiet and (
            chains.for_call(POST, state.execution._scope)):
        return None
    return finish(registry, state)


# ---- stages 1-7 ---------------------------------------------------------------------


def begin(registry: ToolRegistry, call: ToolCall, scope: Hashable | None,
          signal: CancelSignal | None, snapshot: Any = None) -> CallState:
    """Stages 1-3: read the call once, snapshot the arguments, check for cancellation.

    ``snapshot`` is the arguments' snapshot when the scheduler took it to classify.
    """
    call_id, name, parent = call.call_id, call.name, call.parent
    if signal is None:
        signal = _NEVER
    entry = registry._resolve(name, scope)
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
    state = _new(CallState)
    state.execution = execution
    state.caller = signal
    state.finalize = None if entry is None else entry.tool.finalize_content
    state.phase = READY
    state.result = None
    state.entry = None
    state.invoked = False
    state.deferred = None
    state.trusted = True
    if arguments is MISSING:
        state.end(FINAL, error("tool call arguments must be losslessly JSON-serializable"))
    elif signal.cancelled:
        state.end(NOT_STARTED, aborted_before_dispatch())
    elif registry._coded and registry._refuses(call, scope):
        # code-mode.md, "The collapse": only run_code is callable by the model directly.
        state.finalize = None
        state.end(FINAL, error(collapsed(name), "UNKNOWN_TOOL", "ToolNotFoundError"))
    return state


async def decide(registry: ToolRegistry, state: CallState) -> None:
    """Stages 4-7: pre-execute, approval, guards, the cancellation recheck."""
    execution = state.execution
    chain = registry._chains.for_call(PRE, execution._scope)
    try:
        decision = await _walk_pre(chain, execution) if chain else _ALLOW
        if type(decision) is Ask:
            approved = await _approve(registry, execution, decision)
            if approved is None:
                state.end(NOT_STARTED, aborted_before_dispatch())
                return
            decision = approved
    except Exception as exc:
        state.end(FINAL, from_exception(exc))
        return
    if type(decision) is Deny:
        state.end(DENIED, error(decision.reason, "DENIED"))
    else:
        check_guards(registry, state)


def check_guards(registry: ToolRegistry, state: CallState) -> None:
    """Stages 5-7 for an allowed call."""
    execution = state.execution
    guards = registry._guards_for(execution._scope)
    if guards:
        try:
            reason = _run_guards(guards, execution)
        except Exception as exc:
            state.end(FINAL, from_exception(exc))
            return
        if reason is not None:
            state.end(DENIED, error(reason, "DENIED"))
            return
    if state.caller.cancelled:
        state.end(NOT_STARTED, aborted_before_dispatch())


async def _walk_pre(chain: tuple[Callable[..., Any], ...], execution: Execution) -> Any:
    last = len(chain)

    async def at(i: int) -> Any:
        if i == last:
            return _ALLOW
        out = chain[i](execution, lambda: at(i + 1))
        if type(out) not in _DECISIONS and inspect.isawaitable(out):
            out = await out
        kind = type(out)
        if kind is Allow or (kind is Ask and out.reason is None):
            return out
        if (kind is Deny or kind is Ask) and isinstance(out.reason, str):
            return out if type(out.reason) is str else kind(str.__str__(out.reason))
        discard(out)
        raise Invalid(f"pre-execute middleware returned {safe_repr(out)}, not Allow, Deny or Ask")

    return await at(0)


_DECISIONS: Final = frozenset({Allow, Deny, Ask})


async def _approve(registry: ToolRegistry, execution: Execution, ask: Ask) -> Allow | Deny | None:
    """The approval table; ``None`` when the call's signal fired while it was pending."""
    name = execution._name
    approver = registry.approver
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
    if inspect.isawaitable(outcome):
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
        answer = ApprovalOutcome(str.__str__(outcome)) if isinstance(outcome, str) else None
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
        if isinstance(verdict, str):
            return str.__str__(verdict)
        discard(verdict)
        raise Invalid(
            f"guard {safe_repr(guard.fn)} returned {safe_repr(verdict)}; a guard returns a "
            "reason string to deny or None to abstain"
        )
    return None


# ---- stages 8-9 ---------------------------------------------------------------------


def resolve(registry: ToolRegistry, state: CallState) -> None:
    """Stage 8's lookup, once, as dispatch starts (a retry runs the same definition)."""
    execution = state.execution
    state.entry = registry._resolve(execution._name, execution._scope)


async def run_dispatch(registry: ToolRegistry, state: CallState) -> None:
    """Stages 8-9 after ``resolve``: around-execute middleware around the body."""
    execution = state.execution
    entry = state.entry
    chains = registry._chains
    chain = () if chains.quiet else chains.for_call(AROUND, execution._scope)
    if not chain:
        _dispatched(state, await core(state, entry))
        return
    state.trusted = False
    execution._signal_writable = True
    try:
        result = await _walk_around(chain, execution, lambda: core(state, entry))
    except Exception as exc:
        state.end(FINAL, from_exception(exc))
        return
    finally:
        execution._signal_writable = False
        execution._signal = state.caller
    _dispatched(state, result)


def _dispatched(state: CallState, result: ToolResult) -> None:
    """Stage 9, and whether the call ended before its body could start."""
    try:
        if state.deferred is not None:
            state.trusted = False
            result = replace_result(result, contexts=(*state.deferred, *result.contexts))
        info = result.error
    except Exception:  # a middleware's result whose fields cannot be read
        state.trusted = True
        state.end(FINAL, error("tool result must be losslessly JSON-serializable"))
        return
    skipped = type(info) is ErrorInfo and info.code == "ABORTED_BEFORE_DISPATCH"
    state.end(NOT_STARTED if skipped else DISPATCHED, result)


async def _walk_around(chain: tuple[Callable[..., Any], ...], execution: Execution,
                       innermost: Callable[[], Awaitable[ToolResult]]) -> ToolResult:
    last = len(chain)

    async def at(i: int) -> ToolResult:
        if i == last:
            return await innermost()
        out = chain[i](execution, lambda: at(i + 1))
        if type(out) is not ToolResult and inspect.isawaitable(out):
            out = await out
        if isinstance(out, ToolResult):
            return out
        discard(out)
        raise Invalid(f"around-execute middleware returned {safe_repr(out)}, not a ToolResult")

    return await at(0)
