"""``toolrail.otel.tracing()``: one span per tool execution, GenAI semantic conventions.

Spans go to the SDK's ``InMemorySpanExporter`` through a tracer of a local provider, so
no global OpenTelemetry state is touched.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import toolrail as tr
import toolrail.otel


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


@pytest.fixture
def registry(exporter: InMemorySpanExporter) -> tr.ToolRegistry:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = tr.ToolRegistry()
    registry.around_execute(toolrail.otel.tracing(provider.get_tracer("test")))

    @registry.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @registry.tool
    def fail(reason: str) -> str:
        """Always fails."""
        raise tr.ToolError(reason, code="NOPE")

    @registry.tool
    def crash() -> str:
        """Raises a plain exception."""
        raise RuntimeError("boom")

    return registry


def call(name: str, call_id: str = "c1", **arguments: object) -> tr.ToolCall:
    return tr.ToolCall(call_id=call_id, name=name, arguments=arguments)


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    spans = exporter.get_finished_spans()
    assert len(spans) == 1
    return spans[0]


async def test_a_successful_call_opens_one_span_named_after_the_tool(
    registry: tr.ToolRegistry, exporter: InMemorySpanExporter
) -> None:
    result = await registry.execute(call("add", a=2, b=3))

    assert result.value == 5
    span = only_span(exporter)
    assert span.name == "execute_tool add"
    assert span.kind is SpanKind.INTERNAL
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
    }
    assert span.status.status_code is StatusCode.UNSET


async def test_each_call_of_a_batch_gets_its_own_span(
    registry: tr.ToolRegistry, exporter: InMemorySpanExporter
) -> None:
    await registry.run([call("add", "c1", a=1, b=1), call("add", "c2", a=2, b=2)])

    spans = exporter.get_finished_spans()
    assert sorted(str((span.attributes or {})["gen_ai.tool.call.id"]) for span in spans) == [
        "c1",
        "c2",
    ]


async def test_an_error_result_sets_error_status_and_its_code_as_error_type(
    registry: tr.ToolRegistry, exporter: InMemorySpanExporter
) -> None:
    result = await registry.execute(call("fail", reason="no way"))

    assert result.is_error
    span = only_span(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "no way"
    assert (span.attributes or {})["error.type"] == "NOPE"


async def test_an_error_without_a_code_reports_its_exception_type(
    registry: tr.ToolRegistry, exporter: InMemorySpanExporter
) -> None:
    await registry.execute(call("crash"))

    span = only_span(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "RuntimeError"


async def test_an_unknown_tool_is_an_error_span_too(
    registry: tr.ToolRegistry, exporter: InMemorySpanExporter
) -> None:
    await registry.execute(call("missing"))

    span = only_span(exporter)
    assert span.name == "execute_tool missing"
    assert (span.attributes or {})["error.type"] == "UNKNOWN_TOOL"


async def test_a_denied_call_executes_no_tool_and_has_no_span(
    registry: tr.ToolRegistry, exporter: InMemorySpanExporter
) -> None:
    registry.guard(lambda execution: "not today")

    result = await registry.execute(call("add", a=1, b=2))

    assert result.error is not None
    assert result.error.code == "DENIED"
    assert exporter.get_finished_spans() == ()


async def test_a_cancelled_task_ends_its_span_with_the_cancellation(
    registry: tr.ToolRegistry, exporter: InMemorySpanExporter
) -> None:
    started = asyncio.Event()

    async def wait_forever(arguments: tr.JsonValue, context: tr.RunContext) -> None:
        started.set()
        await asyncio.Event().wait()

    registry.register(
        tr.Tool(name="wait", description="", parameters={"type": "object"}, execute=wait_forever)
    )
    task = asyncio.ensure_future(registry.execute(call("wait")))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)

    span = only_span(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "CancelledError"


async def test_spans_of_nested_calls_are_children_of_the_outer_span(
    registry: tr.ToolRegistry, exporter: InMemorySpanExporter
) -> None:
    async def outer(arguments: tr.JsonValue, context: tr.RunContext) -> str:
        inner = await registry.execute(
            tr.ToolCall(call_id="c2", name="add", arguments={"a": 1, "b": 1}, parent=context.token)
        )
        return inner.text

    registry.register(
        tr.Tool(name="outer", description="", parameters={"type": "object"}, execute=outer)
    )
    await registry.execute(call("outer"))

    inner_span, outer_span = exporter.get_finished_spans()
    assert outer_span.name == "execute_tool outer"
    assert inner_span.parent is not None
    assert outer_span.context is not None
    assert inner_span.parent.span_id == outer_span.context.span_id


def test_the_default_tracer_comes_from_the_global_provider() -> None:
    middleware = toolrail.otel.tracing()

    assert "toolrail.otel.tracing" in repr(middleware)


async def test_without_opentelemetry_tracing_is_a_pass_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    registry = tr.ToolRegistry()
    middleware = toolrail.otel.tracing()
    registry.around_execute(middleware)

    @registry.tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    result = await registry.execute(call("echo", text="hi"))

    assert result.value == "hi"
    assert not hasattr(middleware, "tracer")
