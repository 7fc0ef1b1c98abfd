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
    └── ToolAbortedError        ABORTED / ABORTED_BEFORE_DISPATCH
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "ToolAbortedError",
    "ToolArgsError",
    "ToolError",
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
