"""The error hierarchy.

Two families, kept apart on purpose:

* **Usage errors** are the built-in ``TypeError`` / ``ValueError``, raised at once by
  registration (``register``, ``restrict``, ``tr.tool``, ``run`` arguments). They mean
  the host program is wrong and should stop.
* **Call outcomes** derive from :class:`ToolError`. ``execute`` never raises them; it
  turns every failure into an error :class:`~toolrail.ToolResult` whose ``error.code``
  is the class's stable ``code``. A tool raises a ``ToolError`` (or a subclass, or one
  with ``code=...``) to give the model a routable failure::

    ToolError                   TOOL_ERROR       (or the code passed in)
    ├── ToolNotFoundError       UNKNOWN_TOOL
    ├── ToolArgsError           INVALID_ARGS     (+ violations)
    ├── ToolOutputError         INVALID_TOOL_OUTPUT
    ├── ToolTimeoutError        TOOL_TIMEOUT
    ├── ToolAbortedError        ABORTED / ABORTED_BEFORE_DISPATCH
    └── CodeFailedError         CODE_FAILED      (a run_code program failed; code mode)

Two codes belong to the registry's own decisions, not to an exception a tool raises:
``DENIED`` (a pre-execute ``Deny``, an approval not granted, a guard) and ``BLOCKED``
(a post-execute ``Block``); ``toolrail.mcp`` adds ``MCP_DISCONNECTED`` and
``MCP_MESSAGE_TOO_LARGE`` for attached tools. This module names every code; the result builders in
``_dispatch.failures`` take them from here, and a failure the registry itself detects (an
invalid middleware return, a result that is not lossless) carries no code at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

__all__ = [
    "ABORTED",
    "ABORTED_BEFORE_DISPATCH",
    "BLOCKED",
    "CODE_FAILED",
    "CodeFailedError",
    "DENIED",
    "INTERRUPTED",
    "MCP_DISCONNECTED",
    "MCP_MESSAGE_TOO_LARGE",
    "ToolAbortedError",
    "ToolArgsError",
    "TOOL_CHANGED",
    "ToolError",
    "ToolInterruptedError",
    "ToolNotFoundError",
    "ToolOutputError",
    "ToolTimeoutError",
]


class ToolError(Exception):
    """A failure a tool reports to the model, with a stable machine ``code``."""

    code: str = "TOOL_ERROR"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message


class ToolNotFoundError(ToolError):
    """No visible tool has the called name."""

    code = "UNKNOWN_TOOL"


class ToolArgsError(ToolError):
    """The arguments do not satisfy the tool's parameters."""

    code = "INVALID_ARGS"

    def __init__(
        self, message: str, *, violations: Iterable[str] = (), code: str | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.violations: tuple[str, ...] = tuple(violations)


class ToolOutputError(ToolError):
    """The tool's value is not lossless JSON or violates its output schema."""

    code = "INVALID_TOOL_OUTPUT"


class ToolTimeoutError(ToolError):
    """The tool's timeout expired."""

    code = "TOOL_TIMEOUT"


class ToolAbortedError(ToolError):
    """The call was cancelled (``ABORTED``) or never dispatched (``ABORTED_BEFORE_DISPATCH``)."""

    code = "ABORTED"


class ToolInterruptedError(ToolError):
    """A durable step's call was inside its body when its process died, and its tool is
    not declared idempotent: it may have run (durable.md)."""

    code = "INTERRUPTED"


class CodeFailedError(ToolError):
    """A ``run_code`` program failed: ``code run failed (<kind>): <message>``."""

    code = "CODE_FAILED"


DENIED: Final = "DENIED"
BLOCKED: Final = "BLOCKED"
CODE_FAILED: Final = CodeFailedError.code
ABORTED: Final = ToolAbortedError.code
ABORTED_BEFORE_DISPATCH: Final = "ABORTED_BEFORE_DISPATCH"
INTERRUPTED: Final = ToolInterruptedError.code
TOOL_CHANGED: Final = "TOOL_CHANGED"  # durable.md: a tool changed while its call waited

# The codes of calls to a tool attached from an MCP server (``toolrail.mcp``).
MCP_DISCONNECTED: Final = "MCP_DISCONNECTED"
MCP_MESSAGE_TOO_LARGE: Final = "MCP_MESSAGE_TOO_LARGE"
