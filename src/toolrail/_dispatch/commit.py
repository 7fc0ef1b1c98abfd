"""Stages 10-13 of a call: post-execute, materialize, finalize content, observers.

``post_execute`` walks the post-execute chain (it may await); ``finish`` does the rest
synchronously: the success-to-``ABORTED`` rule of a cancelled call, materialization of
anything a middleware built, ``finalize_content``, and the observers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeGuard, cast

from .._core.chains import POST, RESULT, notify, walk
from .._model.decisions import UNSET, Accept, Block
from .._model.errors import BLOCKED
from .._model.foreign import discard, safe_repr
from .._model.results import (
    Content,
    ContextMessage,
    ErrorInfo,
    TextContent,
    ToolResult,
    only_content,
)
from .execution import Execution
from .failures import Invalid, aborted, error, from_exception
from .materialize import checked_value, frozen_blocks, materialize, rendered, replace_result
from .state import DISPATCHED, FINAL, REFUSED, CallState

if TYPE_CHECKING:
    from .._core.core import Core

__all__ = ["awaits_post", "finish", "post_execute"]

_ACCEPT: Final = Accept()


def awaits_post(core: Core, state: CallState) -> bool:
    """Whether stage 10 has post-execute middleware to await (then ``post_execute``,
    before ``finish``): a dispatched or refused call, with a chain for its scope."""
    chains = core.chains
    return (state.phase == DISPATCHED or state.phase == REFUSED) and not chains.quiet and (
        bool(chains.for_call(POST, state.execution._scope)))


async def post_execute(core: Core, state: CallState) -> None:
    """Stage 10."""
    execution = state.execution
    chain = core.chains.for_call(POST, execution._scope)
    if not chain:
        return
    result = state.result
    assert result is not None
    try:
        decision = await walk(chain, (execution, result), _accept, _plain_post,
                              _accept_post)
        changed = _apply_post(state, decision, result)
    except Exception as exc:
        state.trusted = True
        state.end(FINAL, from_exception(exc))
        return
    if changed is not result:
        state.trusted = False
        state.result = changed


def finish(core: Core, state: CallState) -> ToolResult:
    """Stages 11-13, after the success-to-ABORTED rule of a cancelled call."""
    execution = state.execution
    result = state.result
    assert result is not None
    if not state.trusted:
        result = materialize(result)
    if state.invoked and state.caller.cancelled and not result.is_error:
        result = aborted(result.contexts)
    if state.finalize is not None:
        result = _finalize(state.finalize, execution, result)
    scope = execution._scope
    chains = core.chains
    observers = chains.every[RESULT] if scope is None else chains.for_call(RESULT, scope)
    if observers:
        notify(core.logger, observers, execution, result)
    return result


def _plain_post(out: Any) -> bool:
    kind = type(out)  # compared by identity: a metaclass's __eq__ or __hash__ never runs
    return kind is Accept or kind is Block


def _accept_post(out: Any) -> Any:
    if _valid_post(out):
        return out
    discard(out)
    raise Invalid(f"post-execute middleware returned {safe_repr(out)}, not Accept or Block")


async def _accept() -> Accept:
    return _ACCEPT


def _valid_post(out: Any) -> bool:
    try:
        return _well_formed(out)
    except Exception:  # a decision whose content cannot even be read is not valid
        return False


def _well_formed(out: Any) -> bool:
    kind = type(out)
    if issubclass(kind, Accept):
        content = out.content
        return (content is None or _is_str(content) or _is_blocks(content)) and (
            _is_contexts(out.contexts))
    if issubclass(kind, Block):
        return (_is_str(out.feedback) or _is_blocks(out.feedback)) and _is_contexts(
            out.contexts)
    return False


def _is_str(value: Any) -> TypeGuard[str]:
    return issubclass(type(value), str)


def _is_blocks(value: Any) -> bool:
    return only_content(value, Sequence, empty=True)


def _is_contexts(value: Any) -> bool:
    kind = type(value)
    return issubclass(kind, Sequence) and not issubclass(kind, str) and all(
        issubclass(type(c), ContextMessage) for c in value)


def _apply_post(state: CallState, decision: Accept | Block, result: ToolResult) -> ToolResult:
    if issubclass(type(decision), Block):
        feedback = cast(Block, decision).feedback
        # Frozen first: plain str fields and exact blocks, which compare as data.
        blocks = frozen_blocks((TextContent(feedback),) if _is_str(feedback) else feedback)
        if not blocks or blocks == (TextContent(""),):
            message = "tool result blocked by post-execute policy"
            blocks = (TextContent("Error: " + message),)
        else:
            message = "\n".join(b.text if type(b) is TextContent else f"[{b.type} content]"
                                for b in blocks)
        return ToolResult(blocks, True, None, ErrorInfo(message, BLOCKED), None,
                          tuple(decision.contexts))
    decision = cast(Accept, decision)
    has_value = decision.value is not UNSET
    if has_value and decision.content is not None:
        raise Invalid("post-execute Accept cannot replace both value and content")
    if not has_value and decision.content is None and not decision.contexts:
        return result
    contexts = (*result.contexts, *decision.contexts)
    if has_value:
        if result.is_error:
            raise Invalid("post-execute cannot replace the value of a failed result")
        value, content = _checked_value(state, decision.value)
        return replace_result(result, value=value, content=content, contexts=contexts)
    replacement = decision.content
    if replacement is not None:
        blocks = ((TextContent(replacement),) if _is_str(replacement)
                  else tuple(cast(Sequence[Content], replacement)))
        return replace_result(result, content=blocks, contexts=contexts)
    return replace_result(result, contexts=contexts)


def _checked_value(state: CallState, raw: Any) -> tuple[Any, tuple[TextContent, ...]]:
    """A value set by ``Accept(value=...)``, checked as a body's value is."""
    name, entry = state.execution._name, state.entry
    value = checked_value(name, None if entry is None else entry.value_check(), raw)
    return value, rendered(name, value)


def _finalize(finalize: Callable[..., Any], execution: Execution,
              result: ToolResult) -> ToolResult:
    try:
        out = finalize(execution, result)
    except Exception as exc:
        return from_exception(exc)
    if out is None:
        return result
    try:
        if not issubclass(type(out), Sequence) or _is_str(out):
            raise ValueError("not a sequence")
        content = frozen_blocks(tuple(out))
    except Exception:
        discard(out)
        return error(f"finalize_content returned {safe_repr(out)}, not None or a sequence of "
                     "Content")
    return replace_result(result, content=content)
