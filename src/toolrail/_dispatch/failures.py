"""The error results the registry builds, each from the code ``_model.errors`` names.

Every one has exactly one text block ``Error: <message>`` and an ``ErrorInfo`` with
the message, the code and the exception class name (pipeline.md, "Error results").
``from_exception`` turns any exception raised in the pipeline into one; ``Invalid``
is a failure the registry itself detects (an invalid return), which has no code.
"""

from __future__ import annotations

from typing import cast

from .._model.errors import (
    ABORTED_BEFORE_DISPATCH,
    DENIED,
    ToolAbortedError,
    ToolError,
    ToolNotFoundError,
    ToolOutputError,
    ToolTimeoutError,
)
from .._model.foreign import message_of, plain_str
from .._model.lossless import type_name
from .._model.results import ContextMessage, ErrorInfo, ToolResult, make_result, make_text

__all__ = [
    "Invalid",
    "aborted",
    "aborted_before_dispatch",
    "denied",
    "error",
    "from_exception",
    "invalid_output",
    "timed_out",
    "unknown_tool",
]


class Invalid(Exception):
    """A failure the registry itself detects (an invalid return): no code, no type."""


def error(message: str, code: str | None = None, type_name: str | None = None, *,
          contexts: tuple[ContextMessage, ...] = ()) -> ToolResult:
    """An error result as the registry builds it."""
    return make_result((make_text("Error: " + message),), True, None,
                       ErrorInfo(message, code, type_name), None, contexts, False)


def _raised(message: str, kind: type[ToolError], code: str | None = None,
            contexts: tuple[ContextMessage, ...] = ()) -> ToolResult:
    """The error result of a failure of class ``kind`` (its code unless ``code``)."""
    return error(message, kind.code if code is None else code, kind.__name__, contexts=contexts)


def unknown_tool(name: str, message: str | None = None) -> ToolResult:
    """``unknown tool "<name>"``, or ``message`` (code mode's collapse) with that code."""
    return _raised(f'unknown tool "{name}"' if message is None else message, ToolNotFoundError)


def timed_out(timeout: float) -> ToolResult:
    return _raised(f"tool call timed out after {timeout:g}s", ToolTimeoutError)


def aborted_before_dispatch() -> ToolResult:
    return _raised("tool call aborted before dispatch", ToolAbortedError,
                   ABORTED_BEFORE_DISPATCH)


def aborted(contexts: tuple[ContextMessage, ...] = ()) -> ToolResult:
    return _raised("tool call aborted", ToolAbortedError, contexts=contexts)


def invalid_output(name: str, reason: str) -> ToolResult:
    return _raised(f'tool "{name}" returned invalid output: {reason}', ToolOutputError)


def denied(reason: str) -> ToolResult:
    """A pre-execute ``Deny``, an approval not granted, or a guard's reason."""
    return error(reason, DENIED)


def from_exception(exc: BaseException) -> ToolResult:
    """The error result for an exception raised anywhere in the pipeline."""
    kind = type(exc)
    if issubclass(kind, Invalid):
        return error(message_of(exc))
    code = None
    if issubclass(kind, ToolError):
        try:
            code = plain_str(cast(ToolError, exc).code)
        except Exception:
            code = None
    return error(message_of(exc), code, type_name(kind))
