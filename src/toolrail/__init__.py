"""toolrail: the tool layer for LLM agents.

A scoped tool registry, one execute pipeline for every call (snapshot, pre-execute
policy and approval, guards, around-execute, the body, post-execute, a frozen result,
observers), and a scheduler that runs one model step's calls in parallel where safe.

>>> import toolrail as tr
>>> registry = tr.ToolRegistry()
"""

from __future__ import annotations

from ._dispatch.execution import Execution, ExecutionToken, RunContext
from ._dispatch.progress import Progress
from ._model.cancel import CancelController, CancelSignal
from ._model.decisions import (
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
from ._model.digest import call_digest
from ._model.disposer import Disposer
from ._model.errors import (
    ToolAbortedError,
    ToolArgsError,
    ToolError,
    ToolInterruptedError,
    ToolNotFoundError,
    ToolOutputError,
    ToolTimeoutError,
)
from ._model.hooks import AroundMiddleware, Guard, PostMiddleware, PreMiddleware, ResultObserver
from ._model.lossless import MISSING, FrozenDict, JsonValue, snapshot_json, thaw
from ._model.results import (
    Content,
    ContextMessage,
    ErrorInfo,
    ImageContent,
    TextContent,
    ToolOutput,
    ToolResult,
)
from ._model.tool import ExecutionMode, Tool, ToolCall, ToolSchema
from ._registry.registry import ToolRegistry
from ._registry.scope import Scope
from ._scheduling.scheduler import Batch, CallStream, Committed
from ._typed.tool import tool

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
    "ToolInterruptedError",
    "ToolNotFoundError",
    "ToolOutput",
    "ToolOutputError",
    "ToolRegistry",
    "ToolResult",
    "ToolSchema",
    "ToolTimeoutError",
    "call_digest",
    "snapshot_json",
    "thaw",
    "tool",
]
