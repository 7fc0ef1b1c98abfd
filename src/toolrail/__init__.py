"""toolrail: the tool layer for LLM agents.

A scoped tool registry, one execute pipeline for every call (snapshot, pre-execute
policy and approval, guards, around-execute, the body, post-execute, a frozen result,
observers), and a scheduler that runs one model step's calls in parallel where safe.

>>> import toolrail as tr
>>> registry = tr.ToolRegistry()
"""

from __future__ import annotations

from ._cancel import CancelController, CancelSignal
from ._decisions import (
    Accept,
    Allow,
    ApprovalOutcome,
    ApprovalRequest,
    Approver,
    Ask,
    Block,
    Deny,
    PostDecision,
    PreDecision,
)
from ._disposer import Disposer
from ._errors import (
    ToolAbortedError,
    ToolArgsError,
    ToolError,
    ToolNotFoundError,
    ToolOutputError,
    ToolTimeoutError,
)
from ._execution import Execution, ExecutionToken, RunContext
from ._json import MISSING, FrozenDict, JsonValue, snapshot_json, thaw
from ._progress import Progress
from ._registry import ToolRegistry
from ._results import (
    Content,
    ContextMessage,
    ErrorInfo,
    ImageContent,
    TextContent,
    ToolOutput,
    ToolResult,
)
from ._scheduler import Batch, CallStream, Committed
from ._scope import Scope
from ._tool import ExecutionMode, Tool, ToolCall, ToolSchema
from ._typed import tool
from ._types import AroundMiddleware, Guard, PostMiddleware, PreMiddleware, ResultObserver

__version__ = "0.1.0"

__all__ = [
    "MISSING",
    "Accept",
    "Allow",
    "ApprovalOutcome",
    "ApprovalRequest",
    "Approver",
    "AroundMiddleware",
    "Ask",
    "Batch",
    "Block",
    "CallStream",
    "CancelController",
    "CancelSignal",
    "Committed",
    "Content",
    "ContextMessage",
    "Deny",
    "Disposer",
    "ErrorInfo",
    "Execution",
    "ExecutionMode",
    "ExecutionToken",
    "FrozenDict",
    "Guard",
    "ImageContent",
    "JsonValue",
    "PostDecision",
    "PostMiddleware",
    "PreDecision",
    "PreMiddleware",
    "Progress",
    "ResultObserver",
    "RunContext",
    "Scope",
    "TextContent",
    "Tool",
    "ToolAbortedError",
    "ToolArgsError",
    "ToolCall",
    "ToolError",
    "ToolNotFoundError",
    "ToolOutput",
    "ToolOutputError",
    "ToolRegistry",
    "ToolResult",
    "ToolSchema",
    "ToolTimeoutError",
    "snapshot_json",
    "thaw",
    "tool",
]
