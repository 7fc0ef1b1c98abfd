"""OpenTelemetry tracing: one span per tool execution, after the GenAI semantic conventions.

``tracing()`` returns an around-execute middleware::

    registry.around_execute(toolrail.otel.tracing())

Each call that reaches dispatch gets a span named ``execute_tool <name>`` (kind
``INTERNAL``) around the rest of the around-execute chain and the body, with
``gen_ai.operation.name = "execute_tool"``, ``gen_ai.tool.name``,
``gen_ai.tool.call.id`` and ``gen_ai.tool.type = "function"``. An error result sets the
span status to ``ERROR`` (the error message as its description) and ``error.type`` to
the result's ``ErrorInfo.code``, else its ``ErrorInfo.type``, else ``"_OTHER"``. A call
that raises (the task running it was cancelled) records the exception the same way.
Calls that never dispatch (denied, aborted before dispatch, a failing pre-execute stage)
have no span: they never executed a tool.

Without ``opentelemetry-api`` installed, ``tracing()`` returns a pass-through.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from . import Execution, ToolResult, __version__

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = ["tracing"]

CallNext = Callable[[], Awaitable[ToolResult]]


def tracing(tracer: Tracer | None = None) -> Callable[[Execution, CallNext], Awaitable[ToolResult]]:
    """An around-execute middleware that traces every tool execution.

    Args:
        tracer: The tracer to use; by default ``opentelemetry.trace.get_tracer("toolrail")``
            (whatever tracer provider is global when spans start).

    >>> import toolrail as tr, toolrail.otel
    >>> registry = tr.ToolRegistry()
    >>> dispose = registry.around_execute(toolrail.otel.tracing())
    """
    try:
        from opentelemetry import trace
    except ImportError:
        return _passthrough
    return _Tracing(tracer if tracer is not None else trace.get_tracer("toolrail", __version__))


def _passthrough(execution: Execution, call_next: CallNext) -> Awaitable[ToolResult]:
    return call_next()


class _Tracing:
    """The middleware ``tracing()`` returns."""

    __slots__ = ("_kind", "_status", "tracer")

    def __init__(self, tracer: Tracer) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self.tracer = tracer
        self._kind = SpanKind.INTERNAL
        self._status: tuple[type[Status], Any] = (Status, StatusCode.ERROR)

    def __repr__(self) -> str:
        return f"<toolrail.otel.tracing {self.tracer!r}>"

    async def __call__(self, execution: Execution, call_next: CallNext) -> ToolResult:
        name = execution.name
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": execution.call_id,
            "gen_ai.tool.type": "function",
        }
        with self.tracer.start_as_current_span(
            f"execute_tool {name}",
            kind=self._kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            status, error_code = self._status
            try:
                result = await call_next()
            except BaseException as exc:
                span.record_exception(exc)
                span.set_attribute("error.type", type(exc).__qualname__)
                span.set_status(status(error_code, str(exc) or type(exc).__qualname__))
                raise
            error = result.error
            if result.is_error:
                kind = (error.code or error.type) if error is not None else None
                span.set_attribute("error.type", kind or "_OTHER")
                span.set_status(status(error_code, error.message if error is not None else None))
            return result
