"""What the engines share: the approval record, the step's input check, its digest."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from .._model.cancel import CancelSignal
from .._model.decisions import ApprovalOutcome
from .._model.lossless import JsonValue, snapshot_json
from .._model.tool import ToolCall
from .._scheduling.scheduler import bind_calls
from ._codec import Data, call_to_data

__all__ = ["ANSWERED", "WAITING", "WITHDRAWN", "PendingApproval", "already_answered",
           "answer_of", "calls_digest", "checked_answer", "checked_step", "other_calls",
           "pending_approval", "withdrawn"]

WAITING: Final = "waiting"
ANSWERED: Final = "answered"
WITHDRAWN: Final = "withdrawn"  # its call was settled without an answer


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """One call parked for a person's answer; with ``pending(history=True)``, also one
    answered (``status`` ``"answered"``: who answered, when, and how) or withdrawn
    (``"withdrawn"``: its call was settled without an answer)."""

    ticket: str
    step_id: str
    index: int
    call_id: str
    tool_name: str
    arguments: JsonValue  # frozen: exactly what the call will run if approved
    reason: str | None
    asked_at: float  # seconds since the epoch
    status: str = WAITING
    outcome: ApprovalOutcome | None = None
    answered_by: str | None = None
    answered_at: float | None = None


def pending_approval(request: Data, answer: Data | None = None,
                     status: str = WAITING) -> PendingApproval:
    """The ``PendingApproval`` of a request as ``StepJournal`` records it, and of its
    answer (as ``answer_of`` made it) when it has one."""
    if answer is not None:
        status = ANSWERED
    return PendingApproval(request["ticket"], request["step_id"], request["index"],
                           request["call_id"], request["tool_name"],
                           snapshot_json(request["arguments"]), request["reason"],
                           request["asked_at"], status,
                           None if answer is None else ApprovalOutcome(answer["outcome"]),
                           None if answer is None else answer.get("answered_by"),
                           None if answer is None else answer.get("answered_at"))


def checked_answer(ticket: object, outcome: ApprovalOutcome | str,
                   answered_by: str | None) -> ApprovalOutcome:
    """``resume``'s arguments, checked the same way on every engine."""
    if not isinstance(ticket, str):
        raise TypeError(f"ticket must be a str, got {type(ticket).__name__}")
    if answered_by is not None and not isinstance(answered_by, str):
        raise TypeError(f"answered_by must be a str or None, got {type(answered_by).__name__}")
    return ApprovalOutcome(outcome)  # ValueError: not an outcome


def answer_of(outcome: ApprovalOutcome, answered_by: str | None) -> Data:
    """A person's answer as the engines record it: what, who, and when."""
    return {"outcome": outcome.value, "answered_by": answered_by, "answered_at": time.time()}


def already_answered(ticket: str) -> ValueError:
    return ValueError(f"approval {ticket} was already answered")


def other_calls(step_id: str) -> ValueError:
    """A used ``step_id`` run with other calls, on either engine."""
    return ValueError(f"step {step_id!r} was already run with other calls")


def withdrawn(ticket: str) -> ValueError:
    return ValueError(f"approval {ticket} was withdrawn: its call was settled without an "
                      "answer")


def checked_step(step_id: str, calls: Iterable[ToolCall], max_parallel: int,
                 signal: CancelSignal | None) -> tuple[list[ToolCall], list[Data]]:
    """A durable step's arguments, checked before anything runs: its calls, and the
    data that is recorded of them."""
    if not isinstance(step_id, str) or not step_id:
        raise ValueError("step_id must be a non-empty str")
    listed, _ = bind_calls(calls, max_parallel, signal, None, False)
    return listed, [call_to_data(call) for call in listed]


def calls_digest(data: list[Data]) -> str:
    """What tells a step's calls from others run under the same ``step_id``."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()
