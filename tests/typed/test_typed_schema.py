"""``tr.tool``: the parameters schema, decoration-time ``TypeError``s and the output schema
(spec: typed-tools.md, "Signature", "Schema")."""

from __future__ import annotations

import datetime
import socket
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field, TypeAdapter

import toolrail as tr
from typed_helpers import (
    Color,
    Person,
    Price,
    add,
    assert_invalid_args,
    call,
    describe_person,
    draw,
    execute,
    lenient,
    lenient_closed,
    output_schema_of,
    price,
    read_file,
    returns_none,
    returns_text,
    run,
    schema_of,
    take_holder,
    take_map,
    tool_with,
)


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


class Labelled(BaseModel):
    title: str
    color: Color = Color.RED
    note: str | None = None


class Opaque:
    """A plain class: no JSON representation."""


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


def returns_unannotated():  # type: ignore[no-untyped-def]
    return 1


def returns_tool_output() -> tr.ToolOutput:
    return tr.ToolOutput(value=1)


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
