"""What the engines share: the approval record, the step's input check, its digest."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

from .._model.cancel import CancelSignal
from .._model.lossless import JsonValue, snapshot_json
from .._model.tool import ToolCall
from .._scheduling.scheduler import bind_calls
from ._codec import Data, call_to_data

__all__ = ["PendingApproval", "calls_digest", "checked_step", "pending_approval"]


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """One call parked for a person's answer."""

    ticket: str
    step_id: str
    index: int
    call_id: str
    tool_name: str
    arguments: JsonValue  # frozen: exactly what the call will run if approved
    reason: str | None
    asked_at: float  # seconds since the epoch


def pending_approval(request: Data) -> PendingApproval:
    """The ``PendingApproval`` of a request as ``StepJournal`` records it."""
    return PendingApproval(request["ticket"], request["step_id"], request["index"],
                           request["call_id"], request["tool_name"],
                           snapshot_json(request["arguments"]), request["reason"],
                           request["asked_at"])


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
