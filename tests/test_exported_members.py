"""The public façade: exactly these names, sorted, each importable."""

from __future__ import annotations

import toolrail as tr

EXPECTED = [
    "MISSING", "Accept", "Allow", "ApprovalOutcome", "ApprovalRequest", "Approver",
    "AroundMiddleware", "Ask", "Batch", "Block", "CallStream", "CancelController",
    "CancelSignal", "Committed", "Content",
    "ContextMessage", "Deny", "Disposer", "ErrorInfo", "Execution", "ExecutionMode",
    "ExecutionToken", "FrozenDict", "Guard", "ImageContent", "JsonValue", "PostDecision",
    "PostMiddleware", "PreDecision", "PreMiddleware", "Progress", "ResultObserver", "RunContext",
    "Scope",
    "TextContent", "Tool", "ToolAbortedError", "ToolArgsError", "ToolCall", "ToolError",
    "ToolInterruptedError", "ToolNotFoundError", "ToolOutput", "ToolOutputError", "ToolRegistry",
    "ToolResult",
    "ToolSchema", "ToolTimeoutError", "call_digest", "snapshot_json", "thaw", "tool",
]


def test_all_lists_exactly_the_public_names() -> None:
    assert tr.__all__ == EXPECTED


def test_all_is_sorted() -> None:
    assert tr.__all__ == sorted(tr.__all__, key=lambda n: (not n.isupper(), n))


def test_every_public_name_is_importable() -> None:
    for name in tr.__all__:
        assert getattr(tr, name) is not None or name == "MISSING"


def test_public_classes_live_in_private_modules_behind_the_facade() -> None:
    for name in tr.__all__:
        value = getattr(tr, name)
        if isinstance(value, type):
            assert value.__module__.startswith("toolrail._"), name
