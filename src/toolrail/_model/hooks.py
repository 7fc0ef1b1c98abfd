"""The extension points, as plain callable types.

* ``PreMiddleware(execution, call_next)`` returns ``Allow`` / ``Deny`` / ``Ask`` (or an
  awaitable of one); ``call_next()`` runs the rest of the chain.
* ``AroundMiddleware(execution, call_next)`` returns a ``ToolResult``; ``call_next()``
  runs the rest of the chain and the body, and may be awaited more than once.
* ``PostMiddleware(execution, result, call_next)`` returns ``Accept`` / ``Block``.
* ``Guard(execution)`` is synchronous and returns a reason string to deny, or ``None``.
* ``ResultObserver(execution, result)`` is synchronous and returns nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeAlias

from .._dispatch.execution import Execution
from .decisions import PostDecision, PreDecision
from .results import ToolResult

__all__ = ["AroundMiddleware", "Guard", "PostMiddleware", "PreMiddleware", "ResultObserver"]

PreMiddleware: TypeAlias = Callable[
    [Execution, Callable[[], Awaitable[PreDecision]]], PreDecision | Awaitable[PreDecision]
]
AroundMiddleware: TypeAlias = Callable[
    [Execution, Callable[[], Awaitable[ToolResult]]], ToolResult | Awaitable[ToolResult]
]
PostMiddleware: TypeAlias = Callable[
    [Execution, ToolResult, Callable[[], Awaitable[PostDecision]]],
    PostDecision | Awaitable[PostDecision],
]
Guard: TypeAlias = Callable[[Execution], "str | None"]
ResultObserver: TypeAlias = Callable[[Execution, ToolResult], None]
