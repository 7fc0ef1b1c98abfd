"""Decisions middleware returns, and the approval types.

Pre-execute middleware returns :class:`Allow`, :class:`Deny` or :class:`Ask`;
post-execute middleware returns :class:`Accept` or :class:`Block`. An :class:`Ask`
goes to the registry's approver, a callable that takes an :class:`ApprovalRequest`
and returns (or awaits to) an :class:`ApprovalOutcome`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeAlias

from .cancel import CancelSignal
from .lossless import JsonValue
from .results import Content, ContextMessage

__all__ = [
    "Accept",
    "Allow",
    "ApprovalOutcome",
    "ApprovalRequest",
    "Approver",
    "Ask",
    "Block",
    "Deny",
    "PostDecision",
    "PreDecision",
]


@dataclass(frozen=True, slots=True)
class Allow:
    """Pre-execute: run the call."""


@dataclass(frozen=True, slots=True)
class Deny:
    """Pre-execute: refuse the call; the model reads ``Error: <reason>``."""

    reason: str


@dataclass(frozen=True, slots=True)
class Ask:
    """Pre-execute: ask the registry's approver, giving it ``reason``."""

    reason: str | None = None


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<left out>"


UNSET: Any = _Unset()


@dataclass(frozen=True, slots=True)
class Accept:
    """Post-execute: keep the result, optionally replacing its content *or* its value.

    ``contexts`` are appended after the result's own.
    """

    content: str | Sequence[Content] | None = None
    value: Any = field(default=UNSET)
    contexts: Sequence[ContextMessage] = ()

    def __repr__(self) -> str:
        parts = []
        if self.content is not None:
            parts.append(f"content={self.content!r}")
        if self.value is not UNSET:
            parts.append(f"value={self.value!r}")
        if self.contexts:
            parts.append(f"contexts={self.contexts!r}")
        return f"Accept({', '.join(parts)})"


@dataclass(frozen=True, slots=True)
class Block:
    """Post-execute: turn the result into a failure whose content is ``feedback``."""

    feedback: str | Sequence[Content]
    contexts: Sequence[ContextMessage] = ()


PreDecision: TypeAlias = Allow | Deny | Ask
PostDecision: TypeAlias = Accept | Block


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What the approver is asked: one call, with its frozen arguments and signal."""

    call_id: str
    tool_name: str
    arguments: JsonValue
    scope: Hashable | None
    reason: str | None
    signal: CancelSignal


class ApprovalOutcome(StrEnum):
    """The approver's answer."""

    ALLOWED_ONCE = "allowed-once"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    UNAVAILABLE = "unavailable"


Approver: TypeAlias = Callable[
    [ApprovalRequest], "ApprovalOutcome | str | Awaitable[ApprovalOutcome | str]"
]
