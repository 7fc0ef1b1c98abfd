"""``CallState``: one call between the pipeline's stages, and where it stands."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .._model.cancel import CancelSignal
from .._model.results import ContextMessage, ToolResult
from .execution import Execution

if TYPE_CHECKING:
    from .._core.core import Core
    from .._core.entry import Entry

__all__ = ["DISPATCHED", "FINAL", "NOT_STARTED", "READY", "REFUSED", "CallState"]

# Where a call stands between stages.
READY: Final = 0  # prepared; dispatch next
REFUSED: Final = 1  # denied (or unrunnable) in prepare; post-execute sees the refusal
DISPATCHED: Final = 2  # has its dispatch result; post-execute next
FINAL: Final = 3  # a final error: straight to materialize
NOT_STARTED: Final = 4  # ABORTED_BEFORE_DISPATCH: straight to materialize


class CallState:
    """One call between its stages. ``begin`` fills every slot (without an ``__init__``:
    one call frame less per call)."""

    __slots__ = ("asks", "caller", "core", "deferred", "entry", "execution", "finalize",
                 "invoked", "looked_up", "phase", "result", "trusted")

    execution: Execution
    core: Core  # the registry running the call
    caller: CancelSignal  # the caller's signal (the batch's, in a batch)
    looked_up: Entry | None  # the tool the call's scope saw at stage 1
    asks: bool  # that tool may require approval: stage 4 awaits (pipeline.md "Approval")
    finalize: Callable[..., Any] | None  # the finalize_content of the tool at stage 1
    phase: int
    result: ToolResult | None
    entry: Entry | None  # stage 8's lookup
    invoked: bool  # the body was invoked
    deferred: list[ContextMessage] | None  # made by the first deferred message
    trusted: bool  # the result was built here, already frozen and consistent

    def end(self, phase: int, result: ToolResult) -> None:
        self.phase = phase
        self.result = result
