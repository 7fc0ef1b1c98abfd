"""Set-up shared by the test_typed*.py files: schema readers, calls and checks, and the
module-level types and tools the typed-tool tests decorate and call (postponed
annotations resolve from this module's globals).

Import as ``from typed_helpers import ...``; helpers shared more widely are in helpers.py.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

import toolrail as tr

ToolDecorator = Callable[[Callable[..., Any]], tr.Tool]


def tool_with(**options: Any) -> ToolDecorator:
    """``tr.tool(**options)``, the decorator with options, typed for mypy."""
    decorator: ToolDecorator = tr.tool(**options)
    return decorator


def schema_of(tool: tr.Tool) -> Any:
    """The tool's parameters as plain JSON (dicts and lists)."""
    return tr.thaw(tr.snapshot_json(tool.parameters))


def output_schema_of(tool: tr.Tool) -> Any:
    assert tool.output_schema is not None
    return tr.thaw(tr.snapshot_json(tool.output_schema))


NO_ARGUMENTS: Any = object()


def call(name: str, arguments: Any = NO_ARGUMENTS, **fields: Any) -> tr.ToolCall:
    """A call with ``arguments`` as given (``None`` included); ``{}`` when left out."""
    return tr.ToolCall(
        call_id="c1", name=name, arguments={} if arguments is NO_ARGUMENTS else arguments, **fields
    )


async def execute(registry: tr.ToolRegistry, the_call: tr.ToolCall) -> tr.ToolResult:
    return await asyncio.wait_for(registry.execute(the_call), 5)


async def run(tool: tr.Tool, arguments: Any = NO_ARGUMENTS) -> tr.ToolResult:
    """Register ``tool`` in a fresh registry and execute one call of it."""
    registry = tr.ToolRegistry()
    registry.register(tool)
    return await execute(registry, call(tool.name, arguments))


def assert_error(result: tr.ToolResult, message: str, code: str | None, kind: str | None) -> None:
    assert result.is_error is True
    assert result.error == tr.ErrorInfo(message, code, kind)
    assert result.content == (tr.TextContent("Error: " + message),)
    assert result.value is None


def assert_invalid_args(result: tr.ToolResult, *violations: str) -> None:
    assert_error(
        result, "invalid arguments: " + "; ".join(violations), "INVALID_ARGS", "ToolArgsError"
    )


class Point(BaseModel):
    x: int
    y: int


class Shape(BaseModel):
    """A named polygon."""

    name: str
    points: list[Point]


class Loose(BaseModel):
    model_config = ConfigDict(extra="allow")
    x: int


class Holder(BaseModel):
    loose: Loose


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")
    x: int


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Person(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    full_name: str = Field(alias="fullName")
    born: datetime.datetime


class Price(BaseModel):
    amount: Decimal


@tool_with(concurrency_safe=True, timeout=30)  # the spec's @tr.tool(concurrency_safe=True, ...)
async def read_file(path: str, offset: int = 0, limit: int | None = None) -> str:
    """Read a UTF-8 text file.

    Args:
        path: Absolute path of the file.
        offset: First line to return, counting from 0.
        limit: Most lines to return; all when omitted.
    """
    return f"{path}:{offset}:{limit}"


@tr.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tr.tool
def draw(shape: Shape, color: Color = Color.GREEN) -> str:
    """Draw a shape."""
    return f"{shape.name}:{len(shape.points)}:{color.value}"


received: dict[str, Any] = {}


@tr.tool
def take_holder(holder: Holder) -> None:
    received["holder"] = holder


@tr.tool
def take_map(scores: dict[str, int], points: dict[str, Point]) -> None:
    received["scores"] = scores
    received["points"] = points


@tool_with(extra="ignore")
def lenient(holder: Holder, count: int) -> None:
    received["lenient"] = (holder, count)


@tool_with(extra="ignore")
def lenient_closed(closed: Closed) -> None:
    received["lenient_closed"] = closed


@tr.tool
def describe_person() -> Person:
    return Person(fullName="Ada Lovelace", born=datetime.datetime(1815, 12, 10, 8, 30))


@tr.tool
def price() -> Price:
    return Price(amount=Decimal("1.50"))


def returns_none() -> None:
    return None


def returns_text() -> tr.TextContent:
    return tr.TextContent("hi")
