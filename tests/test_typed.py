"""``tr.tool``: typed tools, checked against typed-tools.md rule by rule.

Decoration forms and the registry/scope decorators, the schema (name, description,
parameters, output schema), decoration-time ``TypeError``s, argument validation and
its violation messages, classifiers and presenters, and the value a body returns.
Docstring reading in detail: test_docstrings.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import json
import re
import socket
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Annotated, Any, cast

import pytest
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_serializer

import toolrail as tr

# ---- helpers ------------------------------------------------------------------------

ToolDecorator = Callable[[Callable[..., Any]], tr.Tool]


def tool_with(**options: Any) -> ToolDecorator:
    """``tr.tool(**options)``, the decorator with options, typed for mypy."""
    decorator: ToolDecorator = tr.tool(**options)
    return decorator


def function_of(tool: tr.Tool) -> Callable[..., Any]:
    """The original function of a typed tool (always set by ``tr.tool``)."""
    assert tool.function is not None
    return tool.function


def exactly(message: str) -> str:
    """A ``match=`` pattern that accepts exactly ``message``."""
    return f"^{re.escape(message)}\\Z"


def schema_of(tool: tr.Tool) -> Any:
    """The tool's parameters as plain JSON (dicts and lists)."""
    return tr.thaw(tr.snapshot_json(tool.parameters))


def output_schema_of(tool: tr.Tool) -> Any:
    assert tool.output_schema is not None
    return tr.thaw(tr.snapshot_json(tool.output_schema))


def schema_nodes(schema: Any) -> Iterator[dict[str, Any]]:
    """Every schema object inside ``schema``; property names are not schema keywords."""
    if isinstance(schema, list):
        for item in schema:
            yield from schema_nodes(item)
        return
    if not isinstance(schema, dict):
        return
    yield schema
    for key, value in schema.items():
        if key in ("properties", "$defs", "definitions", "patternProperties"):
            for sub in value.values():
                yield from schema_nodes(sub)
        elif key not in ("default", "examples", "const", "enum", "required"):
            yield from schema_nodes(value)


def without_titles(schema: Any) -> Any:
    """A copy of ``schema`` with every ``title`` keyword dropped."""
    if isinstance(schema, list):
        return [without_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in ("properties", "$defs"):
            out[key] = {name: without_titles(sub) for name, sub in value.items()}
        elif key in ("default", "examples", "const", "enum", "required"):
            out[key] = value
        else:
            out[key] = without_titles(value)
    return out


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


def violations_of(result: tr.ToolResult) -> list[str]:
    """The violations of an ``INVALID_ARGS`` result (none of the tested ones has ``; ``)."""
    assert result.error is not None
    assert result.error.code == "INVALID_ARGS"
    assert result.error.type == "ToolArgsError"
    prefix = "invalid arguments: "
    assert result.error.message.startswith(prefix)
    return result.error.message[len(prefix) :].split("; ")


# ---- module-level types and tools (postponed annotations resolve from here) -----------


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


class Labelled(BaseModel):
    title: str
    color: Color = Color.RED
    note: str | None = None


@dataclasses.dataclass
class Pair:
    left: int
    right: int


class Person(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    full_name: str = Field(alias="fullName")
    born: datetime.datetime


class Price(BaseModel):
    amount: Decimal


class Secret(BaseModel):
    token: str

    @field_serializer("token")
    def _hide(self, token: str) -> str:
        raise ValueError("cannot serialize the token")


class Opaque:
    """A plain class: no JSON representation."""


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
def take_values(shape: Shape, values: list[int], day: datetime.date) -> None:
    received["take_values"] = (shape, values, day)


@tool_with(strict=True)
def strict_values(
    count: int, day: datetime.date, values: list[int], point: Point, scores: dict[str, int]
) -> None:
    received["strict_values"] = (count, day, values, point, scores)


@tr.tool
def take_any(payload: Any, rows: list[Any], table: dict[str, Any]) -> None:
    received["take_any"] = (payload, rows, table)


@tr.tool
def take_pair(pair: Pair) -> None:
    received["pair"] = pair


@tr.tool
def pick(choice: int | list[int]) -> None:
    received["pick"] = choice


@tr.tool
def aim(target: Point | str) -> None:
    received["aim"] = target


@tr.tool
def describe_person() -> Person:
    return Person(fullName="Ada Lovelace", born=datetime.datetime(1815, 12, 10, 8, 30))


@tr.tool
def price() -> Price:
    return Price(amount=Decimal("1.50"))


@tr.tool
def leak() -> Secret:
    return Secret(token="hunter2")


@tr.tool
def bad_point() -> Point:
    return cast(Point, {"x": "left", "y": 2})


@tr.tool
def bad_shape() -> Shape:
    return cast(Shape, {"name": "s", "points": [{"x": 1, "y": 2}, {"x": 1, "y": "up"}]})


@tr.tool
def labelled(item: Labelled, tags: list[Color], when: datetime.date | None = None) -> None:
    """Label something."""


@tr.tool
def titled(title: str, item: Labelled) -> None:
    """A parameter and a model field named title."""


@tr.tool
def counted(
    count: Annotated[int, Field(description="How many to take.", ge=0)] = 3,
    label: Annotated[str, Field(description="A label.")] = "x",
) -> None:
    """Count."""


@tr.tool
async def whoami(run: tr.RunContext, label: str) -> str:
    assert isinstance(run, tr.RunContext)
    return f"{run.call_id}:{run.name}:{label}"


@tr.tool
def whoami_sync(label: str, context: tr.RunContext) -> str:
    assert isinstance(context, tr.RunContext)
    return f"{context.call_id}:{context.name}:{label}"


# functions that cannot be tools


def takes_star_numbers(*numbers: int) -> None: ...


def takes_star_options(**options: int) -> None: ...


def takes_positional_count(count: int, /) -> None: ...


def takes_opaque_handle(handle: Opaque) -> None: ...


def takes_socket_conn(conn: socket.socket) -> None: ...


def takes_callback_fn(callback: Callable[[int], int]) -> None: ...


def takes_result_value(result: int) -> None: ...


class Counter:
    """A stateful object whose bound methods become tools."""

    def __init__(self) -> None:
        self.total = 0

    def add(self, amount: int) -> int:
        """Add to the running total.

        Args:
            amount: How much to add.
        """
        self.total += amount
        return self.total

    async def add_later(self, amount: int = 1) -> int:
        """Add, asynchronously."""
        self.total += amount
        return self.total

    @classmethod
    def kind(cls, word: str) -> str:
        return f"{cls.__name__}:{word}"


# ---- decoration forms ---------------------------------------------------------------


def test_bare_decorator_turns_a_sync_function_into_a_tool_keeping_the_function() -> None:
    def subtract(a: int, b: int) -> int:
        return a - b

    tool = tr.tool(subtract)

    assert isinstance(tool, tr.Tool)
    assert tool.function is subtract
    assert tool.name == "subtract"


def test_decorator_with_options_turns_an_async_function_into_a_tool() -> None:
    async def fetch(url: str) -> str:
        return url

    tool = tool_with(timeout=5)(fetch)

    assert isinstance(tool, tr.Tool)
    assert tool.function is fetch
    assert tool.timeout == 5


def test_module_level_decorators_produce_tools_keeping_the_original_functions() -> None:
    assert isinstance(read_file, tr.Tool)
    assert isinstance(add, tr.Tool)
    assert add.function is not None
    assert add.function.__name__ == "add"
    assert read_file.concurrency_safe is True
    assert read_file.timeout == 30


def test_the_function_of_a_tool_can_still_be_called_directly() -> None:
    assert add.function is not None
    assert add.function(2, 3) == 5


async def test_an_async_function_of_a_tool_can_still_be_awaited_directly() -> None:
    assert read_file.function is not None
    assert await read_file.function("/a", 1, 2) == "/a:1:2"


async def test_a_bound_method_leaves_self_out_of_the_schema_and_still_gets_self() -> None:
    counter = Counter()
    tool = tr.tool(counter.add)

    assert tool.name == "add"
    assert schema_of(tool) == {
        "type": "object",
        "properties": {"amount": {"type": "integer", "description": "How much to add."}},
        "required": ["amount"],
        "additionalProperties": False,
    }
    registry = tr.ToolRegistry()
    registry.register(tool)
    first = await execute(registry, call("add", {"amount": 2}))
    second = await execute(registry, call("add", {"amount": 3}))

    assert (first.value, second.value) == (2, 5)
    assert counter.total == 5
    assert tool.function == counter.add


async def test_an_async_bound_method_with_options_leaves_self_out_and_still_gets_self() -> None:
    counter = Counter()
    tool = tool_with(name="add_later")(counter.add_later)

    assert schema_of(tool) == {
        "type": "object",
        "properties": {"amount": {"type": "integer", "default": 1}},
        "additionalProperties": False,
    }
    assert schema_of(tool).get("required", []) == []
    result = await run(tool, {"amount": 4})

    assert result.is_error is False
    assert result.value == 4
    assert counter.total == 4


async def test_a_bound_classmethod_leaves_cls_out_of_the_schema() -> None:
    tool = tr.tool(Counter.kind)

    assert schema_of(tool) == {
        "type": "object",
        "properties": {"word": {"type": "string"}},
        "required": ["word"],
        "additionalProperties": False,
    }
    result = await run(tool, {"word": "hi"})
    assert result.value == "Counter:hi"


async def test_registry_tool_bare_registers_a_tool_and_returns_the_function_unchanged() -> None:
    registry = tr.ToolRegistry()

    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    decorated = registry.tool(multiply)

    assert decorated is multiply
    assert multiply(2, 3) == 6
    registered = registry.get("multiply")
    assert isinstance(registered, tr.Tool)
    assert registered.function is multiply
    assert registered.description == "Multiply two integers."
    result = await execute(registry, call("multiply", {"a": 4, "b": 5}))
    assert result.value == 20


async def test_registry_tool_with_options_registers_and_returns_the_function_unchanged() -> None:
    registry = tr.ToolRegistry()

    def multiply(a: int, b: int) -> int:
        return a * b

    decorate: Callable[[Callable[..., int]], Callable[..., int]] = registry.tool(
        name="times", timeout=7, concurrency_safe=True
    )
    decorated = decorate(multiply)

    assert decorated is multiply
    assert registry.get("multiply") is None
    registered = registry.get("times")
    assert registered is not None
    assert registered.function is multiply
    assert registered.timeout == 7
    assert registered.concurrency_safe is True
    assert registry.execution_mode(call("times", {"a": 1, "b": 2})) is tr.ExecutionMode.PARALLEL
    result = await execute(registry, call("times", {"a": 4, "b": 5}))
    assert result.value == 20


async def test_scope_tool_bare_registers_in_the_scope_only_and_returns_the_function() -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")

    def greet(who: str) -> str:
        return f"hello {who}"

    decorated = scope.tool(greet)

    assert decorated is greet
    assert registry.get("greet") is None
    registered = scope.get("greet")
    assert registered is not None
    assert registered.function is greet
    result = await asyncio.wait_for(scope.execute(call("greet", {"who": "ada"})), 5)
    assert result.value == "hello ada"


async def test_scope_tool_with_options_registers_in_the_scope_and_returns_the_function() -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")

    def greet(who: str) -> str:
        return f"hello {who}"

    decorate: Callable[[Callable[..., str]], Callable[..., str]] = scope.tool(
        name="hello", description="Say hello."
    )

    assert decorate(greet) is greet
    registered = scope.get("hello")
    assert registered is not None
    assert registered.description == "Say hello."
    assert registry.get("hello") is None
    result = await asyncio.wait_for(scope.execute(call("hello", {"who": "bob"})), 5)
    assert result.value == "hello bob"
    scope.close()
    assert scope.get("hello") is None


# ---- name and description -----------------------------------------------------------


def test_name_is_the_functions_name_unless_given() -> None:
    def lookup(key: str) -> str:
        return key

    assert tr.tool(lookup).name == "lookup"
    renamed = tool_with(name="kv.lookup")(lookup)
    assert renamed.name == "kv.lookup"
    assert renamed.function is lookup


def test_description_is_the_docstring_text_before_its_first_section() -> None:
    assert read_file.description == "Read a UTF-8 text file."
    assert add.description == "Add two integers."


def test_description_is_empty_without_a_docstring() -> None:
    def bare(x: int) -> int:
        return x

    assert tr.tool(bare).description == ""


def test_description_option_overrides_the_docstring() -> None:
    assert tool_with(description="Sum a and b.")(function_of(add)).description == "Sum a and b."
    assert tool_with(description="")(function_of(add)).description == ""


# ---- parameters schema --------------------------------------------------------------


def test_parameters_schema_of_the_spec_example_is_exact() -> None:
    assert schema_of(read_file) == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Absolute path of the file."},
            "offset": {
                "type": "integer",
                "default": 0,
                "description": "First line to return, counting from 0.",
            },
            "limit": {
                "anyOf": [{"type": "integer"}, {"type": "null"}],
                "default": None,
                "description": "Most lines to return; all when omitted.",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }


def test_required_lists_parameters_without_defaults_in_signature_order() -> None:
    def place(z: int, a: int, m: int = 1, b: str = "b") -> None: ...

    schema = schema_of(tr.tool(place))
    assert schema["required"] == ["z", "a"]
    assert list(schema["properties"]) == ["z", "a", "m", "b"]
    assert schema["properties"]["m"]["default"] == 1
    assert schema["properties"]["b"]["default"] == "b"


def test_annotated_field_descriptions_and_constraints_reach_the_schema() -> None:
    assert schema_of(counted) == {
        "type": "object",
        "properties": {
            "count": {
                "type": "integer",
                "minimum": 0,
                "default": 3,
                "description": "How many to take.",
            },
            "label": {"type": "string", "default": "x", "description": "A label."},
        },
        "additionalProperties": False,
    }


def test_defaults_appear_as_json_values() -> None:
    def when(
        day: datetime.date = datetime.date(2024, 1, 2), color: Color = Color.GREEN
    ) -> None: ...

    properties = schema_of(tr.tool(when))["properties"]
    assert properties["day"]["default"] == "2024-01-02"
    assert properties["color"]["default"] == "green"


def test_the_schema_has_no_title_keys_anywhere() -> None:
    for tool in (labelled, draw, read_file, take_holder, counted, whoami):
        for node in schema_nodes(schema_of(tool)):
            assert "title" not in node, (tool.name, node)


def test_a_parameter_or_field_named_title_is_kept() -> None:
    schema = schema_of(titled)
    assert schema["properties"]["title"] == {"type": "string"}
    assert schema["required"] == ["title", "item"]
    assert "title" in schema["$defs"]["Labelled"]["properties"]
    assert schema["$defs"]["Labelled"]["required"] == ["title"]


def test_nested_models_use_defs_and_refs_with_every_object_level_closed() -> None:
    assert schema_of(draw) == {
        "type": "object",
        "properties": {
            "shape": {"$ref": "#/$defs/Shape"},
            "color": {"$ref": "#/$defs/Color", "default": "green"},
        },
        "required": ["shape"],
        "additionalProperties": False,
        "$defs": {
            "Point": {
                "type": "object",
                "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                "required": ["x", "y"],
                "additionalProperties": False,
            },
            "Shape": {
                "type": "object",
                "description": "A named polygon.",
                "properties": {
                    "name": {"type": "string"},
                    "points": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
                },
                "required": ["name", "points"],
                "additionalProperties": False,
            },
            "Color": {"type": "string", "enum": ["red", "green"]},
        },
    }


def test_every_level_with_properties_is_closed_even_when_the_model_allows_extra() -> None:
    schema = schema_of(take_holder)
    assert schema["additionalProperties"] is False
    assert schema["$defs"]["Loose"]["additionalProperties"] is False
    assert schema["$defs"]["Holder"]["additionalProperties"] is False
    for node in schema_nodes(schema):
        if "properties" in node:
            assert node["additionalProperties"] is False, node


def test_map_types_keep_their_value_schema() -> None:
    schema = schema_of(take_map)
    assert schema["properties"]["scores"] == {
        "type": "object",
        "additionalProperties": {"type": "integer"},
    }
    assert schema["properties"]["points"] == {
        "type": "object",
        "additionalProperties": {"$ref": "#/$defs/Point"},
    }
    assert schema["$defs"]["Point"]["additionalProperties"] is False


def test_extra_ignore_sets_no_closed_level_in_the_schema() -> None:
    schema = schema_of(lenient)
    for node in schema_nodes(schema):
        assert node.get("additionalProperties") is not False, node


def test_extra_ignore_leaves_no_closed_level_even_for_a_model_that_forbids_extra() -> None:
    # validation ignores unknown keys at every level (next tests), so the schema must too
    for node in schema_nodes(schema_of(lenient_closed)):
        assert node.get("additionalProperties") is not False, node


def test_a_run_context_parameter_of_any_name_is_left_out_of_the_schema() -> None:
    expected = {
        "type": "object",
        "properties": {"label": {"type": "string"}},
        "required": ["label"],
        "additionalProperties": False,
    }
    assert schema_of(whoami) == expected
    assert schema_of(whoami_sync) == expected


async def test_a_run_context_parameter_receives_the_run_context() -> None:
    registry = tr.ToolRegistry()
    registry.register(whoami)
    registry.register(whoami_sync)

    first = await execute(registry, call("whoami", {"label": "a"}))
    second = await execute(
        registry, tr.ToolCall(call_id="c2", name="whoami_sync", arguments={"label": "b"})
    )

    assert first.value == "c1:whoami:a"
    assert second.value == "c2:whoami_sync:b"


async def test_a_run_context_parameter_cannot_be_passed_as_an_argument() -> None:
    result = await run(whoami, {"label": "a", "run": {}})
    assert_invalid_args(result, 'unexpected property "run"')


# ---- decoration-time TypeError ------------------------------------------------------


@pytest.mark.parametrize(
    ("function", "parameter"),
    [
        (takes_star_numbers, "numbers"),
        (takes_star_options, "options"),
        (takes_positional_count, "count"),
        (takes_opaque_handle, "handle"),
        (takes_socket_conn, "conn"),
        (takes_callback_fn, "callback"),
    ],
    ids=["args", "kwargs", "positional-only", "plain-class", "socket", "callable"],
)
def test_a_parameter_that_cannot_be_a_tool_parameter_raises_type_error_naming_both(
    function: Callable[..., Any], parameter: str
) -> None:
    with pytest.raises(TypeError) as raised:
        tr.tool(function)
    message = str(raised.value)
    assert function.__name__ in message
    assert parameter in message


def test_registry_tool_raises_the_same_type_error_and_registers_nothing() -> None:
    registry = tr.ToolRegistry()
    with pytest.raises(TypeError) as raised:
        registry.tool(takes_opaque_handle)
    assert "takes_opaque_handle" in str(raised.value)
    assert "handle" in str(raised.value)
    assert registry.schemas() == []


def test_a_postponed_annotation_naming_a_local_class_raises_type_error_naming_both() -> None:
    class LocalThing(BaseModel):
        value: int

    def takes_local_thing(local_item: LocalThing) -> None: ...

    with pytest.raises(TypeError) as raised:
        tr.tool(takes_local_thing)
    message = str(raised.value)
    assert "takes_local_thing" in message
    assert "local_item" in message


def test_present_result_with_a_parameter_named_result_raises_type_error_naming_both() -> None:
    def present(**kwargs: Any) -> None:
        return None

    with pytest.raises(TypeError) as raised:
        tool_with(present_result=present)(takes_result_value)
    message = str(raised.value)
    assert "takes_result_value" in message
    assert "result" in message


def test_a_parameter_named_result_is_fine_without_present_result() -> None:
    tool = tr.tool(takes_result_value)
    assert schema_of(tool)["required"] == ["result"]


# ---- output schema ------------------------------------------------------------------


def test_output_schema_is_the_serialization_mode_schema_of_the_return_annotation() -> None:
    expected = TypeAdapter(Price).json_schema(mode="serialization")
    assert without_titles(output_schema_of(price)) == without_titles(expected)
    # serialization mode: a Decimal is a string, not "number or string"
    assert output_schema_of(price)["properties"]["amount"] == {"type": "string"}


def test_output_schema_of_an_aliased_model_names_the_alias() -> None:
    expected = TypeAdapter(Person).json_schema(mode="serialization")
    schema = output_schema_of(describe_person)
    assert without_titles(schema) == without_titles(expected)
    assert set(schema["properties"]) == {"fullName", "born"}


def test_output_schema_of_a_scalar_return() -> None:
    assert output_schema_of(add) == {"type": "integer"}
    assert output_schema_of(read_file) == {"type": "string"}


def returns_none() -> None:
    return None


def returns_unannotated():  # type: ignore[no-untyped-def]
    return 1


def returns_tool_output() -> tr.ToolOutput:
    return tr.ToolOutput(value=1)


def returns_text() -> tr.TextContent:
    return tr.TextContent("hi")


def returns_content() -> tr.Content:
    return tr.TextContent("hi")


@pytest.mark.parametrize(
    "function",
    [returns_none, returns_unannotated, returns_tool_output, returns_text, returns_content],
    ids=["None", "no-annotation", "ToolOutput", "TextContent", "Content"],
)
def test_there_is_no_output_schema_for_none_no_annotation_or_content_returns(
    function: Callable[..., Any],
) -> None:
    assert tr.tool(function).output_schema is None


# ---- arguments ----------------------------------------------------------------------


async def test_arguments_are_coerced_laxly_by_default() -> None:
    result = await run(add, {"a": "3", "b": 4})
    assert result.is_error is False
    assert result.value == 7


async def test_the_body_receives_validated_python_values() -> None:
    result = await run(
        take_values,
        {
            "shape": {"name": "tri", "points": [{"x": 1, "y": "2"}]},
            "values": [1, "2"],
            "day": "2024-01-02",
        },
    )

    assert result.is_error is False
    shape, values, day = received["take_values"]
    assert shape == Shape(name="tri", points=[Point(x=1, y=2)])
    assert type(shape) is Shape
    assert type(shape.points) is list
    assert type(values) is list
    assert values == [1, 2]
    assert day == datetime.date(2024, 1, 2)


async def test_any_typed_arguments_reach_the_body_as_plain_lists_and_dicts() -> None:
    # "validated as JSON": a JSON array becomes a list, a JSON object a dict
    result = await run(
        take_any,
        {"payload": [1, {"a": [2]}], "rows": [[1, 2]], "table": {"k": {"n": [3]}}},
    )

    assert result.is_error is False
    payload, rows, table = received["take_any"]
    assert type(payload) is list
    assert type(payload[1]) is dict
    assert type(payload[1]["a"]) is list
    assert type(rows[0]) is list
    assert type(table["k"]) is dict
    assert type(table["k"]["n"]) is list


async def test_strict_rejects_a_string_for_an_int() -> None:
    result = await run(
        strict_values,
        {"count": "3", "day": "2024-01-02", "values": [1], "point": {"x": 1, "y": 2}, "scores": {}},
    )
    assert_invalid_args(result, '"count": Input should be a valid integer')


async def test_strict_accepts_an_iso_date_and_the_snapshots_arrays_and_objects() -> None:
    arguments = tr.snapshot_json(
        {
            "count": 3,
            "day": "2024-01-02",
            "values": [1, 2],
            "point": {"x": 1, "y": 2},
            "scores": {"a": 1},
        }
    )
    assert isinstance(arguments, tr.FrozenDict)
    assert isinstance(arguments["values"], tuple)

    result = await run(strict_values, arguments)

    assert result.is_error is False
    count, day, values, point, scores = received["strict_values"]
    assert count == 3
    assert day == datetime.date(2024, 1, 2)
    assert type(values) is list
    assert values == [1, 2]
    assert point == Point(x=1, y=2)
    assert type(scores) is dict
    assert scores == {"a": 1}


async def test_strict_rejects_a_float_for_an_int_and_a_string_for_a_list() -> None:
    result = await run(
        strict_values,
        {"count": 3.5, "day": "2024-01-02", "values": "1", "point": {"x": 1, "y": 2}, "scores": {}},
    )
    assert violations_of(result) == [
        '"count": Input should be a valid integer',
        '"values": Input should be a valid array',
    ]


async def test_a_missing_required_parameter_is_reported_by_path() -> None:
    result = await run(add, {"a": 1})
    assert_invalid_args(result, 'missing required property "b"')


async def test_a_missing_nested_property_is_reported_by_dotted_path() -> None:
    result = await run(draw, {"shape": {"points": []}})
    assert_invalid_args(result, 'missing required property "shape.name"')


async def test_an_unexpected_root_property_is_reported() -> None:
    result = await run(add, {"a": 1, "b": 2, "c": 3})
    assert_invalid_args(result, 'unexpected property "c"')


async def test_a_wrong_type_is_reported_by_dotted_path_with_item_indexes() -> None:
    result = await run(
        draw, {"shape": {"name": "s", "points": [{"x": 1, "y": 2}, {"x": "left", "y": 2}]}}
    )
    assert_invalid_args(
        result,
        '"shape.points[1].x": Input should be a valid integer, '
        "unable to parse string as an integer",
    )


async def test_a_wrong_item_of_a_top_level_list_is_reported_with_its_index() -> None:
    result = await run(
        take_values, {"shape": {"name": "s", "points": []}, "values": [1, "b"], "day": "2024-01-02"}
    )
    assert_invalid_args(
        result, '"values[1]": Input should be a valid integer, unable to parse string as an integer'
    )


async def test_several_violations_are_joined_with_semicolons() -> None:
    result = await run(add, {"a": "x", "c": 1})
    assert sorted(violations_of(result)) == sorted(
        [
            '"a": Input should be a valid integer, unable to parse string as an integer',
            'missing required property "b"',
            'unexpected property "c"',
        ]
    )


async def test_an_unexpected_key_in_a_model_that_allows_extra_is_rejected_under_forbid() -> None:
    result = await run(take_holder, {"holder": {"loose": {"x": 1, "zz": 2}}})
    assert_invalid_args(result, 'unexpected property "holder.loose.zz"')


async def test_map_keys_are_free_but_unknown_keys_of_its_model_values_are_rejected() -> None:
    ok = await run(take_map, {"scores": {"anything": 1, "else": 2}, "points": {}})
    assert ok.is_error is False
    assert received["scores"] == {"anything": 1, "else": 2}

    bad = await run(take_map, {"scores": {}, "points": {"p": {"x": 1, "y": 2, "z": 3}}})
    assert_invalid_args(bad, 'unexpected property "points.p.z"')


async def test_an_unexpected_key_in_a_dataclass_is_an_unexpected_property() -> None:
    result = await run(take_pair, {"pair": {"left": 1, "right": 2, "extra": 3}})
    assert_invalid_args(result, 'unexpected property "pair.extra"')


async def test_union_violations_name_the_argument_path_not_the_union_member() -> None:
    result = await run(pick, {"choice": "a"})
    violations = violations_of(result)
    assert violations
    for violation in violations:
        assert violation.startswith('"choice": '), violation


async def test_union_violations_inside_a_model_member_use_the_dotted_path() -> None:
    result = await run(aim, {"target": {"x": "left", "y": 1}})
    paths = {violation.split(": ", 1)[0] for violation in violations_of(result)}
    assert paths <= {'"target"', '"target.x"'}, paths


async def test_extra_ignore_ignores_unknown_keys_at_every_level() -> None:
    result = await run(
        lenient, {"holder": {"loose": {"x": 1, "zz": 2}, "other": 3}, "count": 1, "top": 4}
    )
    assert result.is_error is False
    holder, count = received["lenient"]
    assert holder.loose.x == 1
    assert count == 1


async def test_extra_ignore_ignores_unknown_keys_of_a_model_that_forbids_extra() -> None:
    result = await run(lenient_closed, {"closed": {"x": 1, "zz": 2}})
    assert result.is_error is False
    assert received["lenient_closed"] == Closed(x=1)


@pytest.mark.parametrize(
    "arguments",
    [[1, 2], "text", 3, None, True],
    ids=["list", "string", "number", "null", "bool"],
)
async def test_arguments_that_are_not_an_object_are_rejected_exactly(arguments: Any) -> None:
    result = await run(add, arguments)
    assert_invalid_args(result, '"arguments" must be an object')


async def test_invalid_json_from_from_json_is_rejected_as_not_an_object() -> None:
    registry = tr.ToolRegistry()
    registry.register(add)

    result = await execute(registry, tr.ToolCall.from_json("c1", "add", '{"a": 1, '))

    assert result.content == (
        tr.TextContent('Error: invalid arguments: "arguments" must be an object'),
    )
    assert result.error == tr.ErrorInfo(
        'invalid arguments: "arguments" must be an object', "INVALID_ARGS", "ToolArgsError"
    )


async def test_invalid_arguments_never_call_the_function() -> None:
    calls: list[int] = []

    def count(n: int) -> int:
        calls.append(n)
        return n

    result = await run(tr.tool(count), {"n": "many"})

    assert result.is_error is True
    assert calls == []


# ---- concurrency_safe, present_call, present_result --------------------------------


def test_concurrency_safe_true_passes_through() -> None:
    assert read_file.concurrency_safe is True
    assert add.concurrency_safe is False


def test_concurrency_safe_callable_gets_validated_keyword_arguments() -> None:
    seen: list[tuple[str, int]] = []

    def safe(path: str, offset: int = 0) -> bool:
        seen.append((path, offset))
        return offset < 10

    def peek(path: str, offset: int = 0) -> str:
        return path

    registry = tr.ToolRegistry()
    registry.register(tool_with(concurrency_safe=safe)(peek))

    assert registry.execution_mode(call("peek", {"path": "/a", "offset": "3"})) is (
        tr.ExecutionMode.PARALLEL
    )
    assert registry.execution_mode(call("peek", {"path": "/b"})) is tr.ExecutionMode.PARALLEL
    assert registry.execution_mode(call("peek", {"path": "/c", "offset": 12})) is (
        tr.ExecutionMode.EXCLUSIVE
    )
    assert seen == [("/a", 3), ("/b", 0), ("/c", 12)]


def test_concurrency_safe_callable_that_cannot_bind_gets_one_dict_of_validated_arguments() -> None:
    seen: list[dict[str, Any]] = []

    def safe(arguments: dict[str, Any]) -> bool:
        seen.append(arguments)
        return True

    def peek(path: str, offset: int = 0) -> str:
        return path

    registry = tr.ToolRegistry()
    registry.register(tool_with(concurrency_safe=safe)(peek))

    mode = registry.execution_mode(call("peek", {"path": "/a", "offset": "3"}))

    assert mode is tr.ExecutionMode.PARALLEL
    assert seen == [{"path": "/a", "offset": 3}]


def test_invalid_arguments_classify_as_exclusive_without_calling_the_classifier() -> None:
    seen: list[Any] = []

    def safe(**arguments: Any) -> bool:
        seen.append(arguments)
        return True

    def peek(path: str, offset: int = 0) -> str:
        return path

    registry = tr.ToolRegistry()
    tool = tool_with(concurrency_safe=safe)(peek)
    registry.register(tool)

    assert registry.execution_mode(call("peek", {"offset": 1})) is tr.ExecutionMode.EXCLUSIVE
    assert registry.execution_mode(call("peek", {"path": 1})) is tr.ExecutionMode.EXCLUSIVE
    assert registry.execution_mode(call("peek", "raw")) is tr.ExecutionMode.EXCLUSIVE
    assert registry.execution_mode(call("peek", {"path": "/a", "x": 1})) is (
        tr.ExecutionMode.EXCLUSIVE
    )
    assert callable(tool.concurrency_safe)
    assert tool.concurrency_safe(tr.snapshot_json({"path": 5})) is False
    assert seen == []


def test_present_call_gets_validated_keyword_arguments() -> None:
    def present(path: str, offset: int = 0) -> str:
        return f"reading {path} from {offset}"

    def peek(path: str, offset: int = 0) -> str:
        return path

    tool = tool_with(present_call=present)(peek)

    assert tool.present_call is not None
    assert tool.present_call(tr.snapshot_json({"path": "/a", "offset": "2"})) == (
        "reading /a from 2"
    )


def test_present_call_that_cannot_bind_gets_one_dict_of_validated_arguments() -> None:
    def present(arguments: dict[str, Any]) -> dict[str, Any]:
        return {"shown": arguments}

    def peek(path: str, offset: int = 0) -> str:
        return path

    tool = tool_with(present_call=present)(peek)

    assert tool.present_call is not None
    assert tool.present_call(tr.snapshot_json({"path": "/a"})) == {
        "shown": {"path": "/a", "offset": 0}
    }


def test_present_call_returns_none_for_invalid_arguments_without_calling_the_function() -> None:
    seen: list[Any] = []

    def present(**arguments: Any) -> str:
        seen.append(arguments)
        return "shown"

    def peek(path: str) -> str:
        return path

    tool = tool_with(present_call=present)(peek)

    assert tool.present_call is not None
    assert tool.present_call(tr.snapshot_json({})) is None
    assert tool.present_call(tr.snapshot_json({"path": "/a", "x": 1})) is None
    assert tool.present_call("raw") is None
    assert seen == []


async def test_present_result_gets_validated_keyword_arguments_and_the_result() -> None:
    def present(path: str, offset: int, result: tr.ToolResult) -> tuple[str, int, str]:
        return (path, offset, result.text)

    def peek(path: str, offset: int = 0) -> str:
        return path.upper()

    tool = tool_with(present_result=present)(peek)
    result = await run(tool, {"path": "/a"})

    assert tool.present_result is not None
    assert tool.present_result(tr.snapshot_json({"path": "/a", "offset": "1"}), result) == (
        "/a",
        1,
        "/A",
    )


async def test_present_result_that_cannot_bind_gets_a_dict_and_the_result_keyword() -> None:
    def present(arguments: dict[str, Any], *, result: tr.ToolResult) -> Any:
        return (arguments, result.value)

    def peek(path: str, offset: int = 0) -> str:
        return path.upper()

    tool = tool_with(present_result=present)(peek)
    result = await run(tool, {"path": "/a"})

    assert tool.present_result is not None
    assert tool.present_result(tr.snapshot_json({"path": "/a"}), result) == (
        {"path": "/a", "offset": 0},
        "/A",
    )


async def test_present_result_returns_none_for_invalid_arguments_without_calling() -> None:
    seen: list[Any] = []

    def present(**arguments: Any) -> str:
        seen.append(arguments)
        return "shown"

    def peek(path: str) -> str:
        return path

    tool = tool_with(present_result=present)(peek)
    result = await run(tool, {"path": "/a"})

    assert tool.present_result is not None
    assert tool.present_result(tr.snapshot_json({"path": 3.5}), result) is None
    assert tool.present_result("raw", result) is None
    assert seen == []


# ---- output -------------------------------------------------------------------------


async def test_the_value_is_dumped_in_json_mode_by_alias() -> None:
    result = await run(describe_person)

    expected = {"fullName": "Ada Lovelace", "born": "1815-12-10T08:30:00"}
    assert result.is_error is False
    assert tr.thaw(result.value) == expected
    assert result.content == (tr.TextContent(json.dumps(expected, ensure_ascii=False)),)


async def test_a_decimal_value_is_dumped_as_its_serialization_mode_string() -> None:
    result = await run(price)
    assert tr.thaw(result.value) == {"amount": "1.50"}


async def test_a_str_value_is_one_text_block() -> None:
    result = await run(read_file, {"path": "/x"})
    assert result.value == "/x:0:None"
    assert result.content == (tr.TextContent("/x:0:None"),)


async def test_a_none_value_is_no_blocks() -> None:
    result = await run(tr.tool(returns_none))
    assert result.is_error is False
    assert result.value is None
    assert result.content == ()


async def test_other_values_are_one_text_block_of_json_dumps_without_ascii_escapes() -> None:
    def cities() -> dict[str, Any]:
        return {"città": ["Roma", "Zürich"], "n": 2}

    result = await run(tr.tool(cities))

    expected = {"città": ["Roma", "Zürich"], "n": 2}
    assert tr.thaw(result.value) == expected
    assert result.content == (tr.TextContent(json.dumps(expected, ensure_ascii=False)),)
    assert result.content[0].type == "text"
    assert "città" in result.text


async def test_a_value_is_validated_laxly_against_the_return_annotation() -> None:
    def three() -> int:
        return cast(int, "3")

    result = await run(tr.tool(three))
    assert result.is_error is False
    assert result.value == 3
    assert result.content == (tr.TextContent("3"),)


async def test_a_mismatching_return_is_invalid_output_with_a_root_path() -> None:
    def broken() -> int:
        return cast(int, "abc")

    result = await run(tr.tool(broken))

    assert_error(
        result,
        'tool "broken" returned invalid output: "$": Input should be a valid integer, '
        "unable to parse string as an integer",
        "INVALID_TOOL_OUTPUT",
        "ToolOutputError",
    )


async def test_invalid_output_names_the_tool_by_its_given_name() -> None:
    def broken() -> int:
        return cast(int, "abc")

    result = await run(tool_with(name="renamed")(broken))

    assert result.error is not None
    assert result.error.message.startswith('tool "renamed" returned invalid output: "$": ')


async def test_a_nested_output_failure_is_reported_by_its_path() -> None:
    result = await run(bad_point)
    assert_error(
        result,
        'tool "bad_point" returned invalid output: "x": Input should be a valid integer, '
        "unable to parse string as an integer",
        "INVALID_TOOL_OUTPUT",
        "ToolOutputError",
    )


async def test_a_deep_output_failure_is_reported_by_dotted_path_with_indexes() -> None:
    result = await run(bad_shape)
    assert_error(
        result,
        'tool "bad_shape" returned invalid output: "points[1].y": Input should be a valid '
        "integer, unable to parse string as an integer",
        "INVALID_TOOL_OUTPUT",
        "ToolOutputError",
    )


async def test_strict_output_validation_uses_strict_python_mode() -> None:
    def three() -> int:
        return cast(int, "3")

    result = await run(tool_with(strict=True)(three))

    assert_error(
        result,
        'tool "three" returned invalid output: "$": Input should be a valid integer',
        "INVALID_TOOL_OUTPUT",
        "ToolOutputError",
    )


async def test_a_serializer_that_fails_is_invalid_output_with_its_message() -> None:
    result = await run(leak)

    assert result.is_error is True
    assert result.error is not None
    assert result.error.code == "INVALID_TOOL_OUTPUT"
    assert result.error.type == "ToolOutputError"
    assert result.error.message.startswith('tool "leak" returned invalid output: ')
    assert "cannot serialize the token" in result.error.message
    assert result.content == (tr.TextContent("Error: " + result.error.message),)


async def test_returning_a_tool_output_gives_its_content_directly() -> None:
    def report() -> tr.ToolOutput:
        return tr.ToolOutput(value={"n": 1}, content=[tr.TextContent("one")], meta={"m": 1})

    result = await run(tr.tool(report))

    assert result.is_error is False
    assert result.content == (tr.TextContent("one"),)
    assert tr.thaw(result.value) == {"n": 1}
    assert tr.thaw(result.meta) == {"m": 1}


async def test_returning_a_content_block_gives_that_block() -> None:
    result = await run(tr.tool(returns_text))
    assert result.is_error is False
    assert result.content == (tr.TextContent("hi"),)
    assert result.value is None


async def test_returning_a_list_of_content_gives_those_blocks() -> None:
    def blocks() -> list[tr.Content]:
        return [tr.TextContent("a"), tr.ImageContent(data="aGk=", mime_type="image/png")]

    result = await run(tr.tool(blocks))

    assert result.is_error is False
    assert result.content == (
        tr.TextContent("a"),
        tr.ImageContent(data="aGk=", mime_type="image/png"),
    )
    assert result.value is None


async def test_a_tool_error_raised_by_the_function_keeps_its_code() -> None:
    def refuse() -> int:
        raise tr.ToolError("not today", code="NOT_TODAY")

    result = await run(tr.tool(refuse))
    assert_error(result, "not today", "NOT_TODAY", "ToolError")


async def test_an_async_function_raising_a_tool_error_subclass_keeps_its_code() -> None:
    async def refuse() -> int:
        raise tr.ToolTimeoutError("too slow")

    result = await run(tr.tool(refuse))
    assert_error(result, "too slow", "TOOL_TIMEOUT", "ToolTimeoutError")


async def test_another_exception_reaches_the_pipeline_unchanged() -> None:
    def crash() -> int:
        raise KeyError("k")

    result = await run(tr.tool(crash))
    assert_error(result, "'k'", None, "KeyError")


async def test_a_sync_function_runs_in_a_worker_thread() -> None:
    def where() -> int:
        return threading.get_ident()

    result = await run(tr.tool(where))

    assert result.is_error is False
    assert result.value != threading.get_ident()


async def test_a_sync_function_runs_on_the_loop_thread_with_inline() -> None:
    def where() -> int:
        return threading.get_ident()

    result = await run(tool_with(inline=True)(where))

    assert result.value == threading.get_ident()


async def test_an_async_function_runs_on_the_loop_thread() -> None:
    async def where() -> int:
        return threading.get_ident()

    result = await run(tr.tool(where))

    assert result.value == threading.get_ident()


def test_options_pass_through_to_the_tool() -> None:
    def finalize(execution: tr.Execution, result: tr.ToolResult) -> None:
        return None

    def noop(x: int) -> None: ...

    tool = tool_with(
        timeout=2.5,
        annotations={"readOnlyHint": True},
        inline=True,
        cancellation="cooperative",
        finalize_content=finalize,
    )(noop)

    assert tool.timeout == 2.5
    assert tool.annotations == {"readOnlyHint": True}
    assert tool.inline is True
    assert tool.cancellation == "cooperative"
    assert tool.finalize_content is finalize


def test_options_default_like_the_tool_dataclass() -> None:
    def noop(x: int) -> None: ...

    tool = tr.tool(noop)

    assert tool.timeout is None
    assert tool.annotations is None
    assert tool.inline is False
    assert tool.cancellation == "interrupt"
    assert tool.finalize_content is None
    assert tool.present_call is None
    assert tool.present_result is None
    assert tool.concurrency_safe is False


async def test_finalize_content_of_a_typed_tool_changes_the_content() -> None:
    def finalize(execution: tr.Execution, result: tr.ToolResult) -> list[tr.Content]:
        return [tr.TextContent(f"final {result.text}")]

    result = await run(tool_with(finalize_content=finalize)(function_of(add)), {"a": 1, "b": 2})

    assert result.content == (tr.TextContent("final 3"),)
    assert result.value == 3


Counted = Annotated[int, {"unit": "items"}]  # unhashable metadata: the annotation is too


async def test_a_parameter_whose_annotation_is_unhashable_is_still_a_tool_parameter() -> None:
    def count(n: Counted) -> Counted:
        return n

    tool = tr.tool(count)
    result = await run(tool, {"n": "3"})

    assert schema_of(tool) == {
        "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
        "additionalProperties": False,
    }
    assert output_schema_of(tool) == {"type": "integer"}
    assert result.value == 3
