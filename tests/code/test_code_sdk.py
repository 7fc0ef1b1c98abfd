"""``toolrail.code.render_sdk``: the stubs a ``run_code`` program is written against."""

from __future__ import annotations

import ast
import enum
import random
from typing import Any, Literal

import pydantic
import pytest

import toolrail as tr
from helpers import exactly
from toolrail.code import render_sdk


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(pydantic.BaseModel):
    street: str
    zip: int | None = None


class Person(pydantic.BaseModel):
    name: str
    address: Address
    friends: list[Person] = []


def create(person: Person, color: Color, mode: Literal["a", "b"] = "a", key: int | str = 1,
           weights: dict[str, float] | None = None, tags: list[str] | None = None) -> Person:
    """Create a person.

    The "person" is stored."""
    return person


def read_file(path: str) -> str:
    """Read a file."""
    return path


def typed_registry() -> tr.ToolRegistry:
    registry = tr.ToolRegistry()
    registry.register(tr.tool(create))
    registry.register(tr.tool(read_file))
    registry.register(tr.tool(read_file, name="read-file"))
    registry.register(tr.tool(read_file, name="call"))
    registry.register(tr.tool(read_file, name="_hidden"))
    registry.register(tr.tool(read_file, name="class"))
    return registry


def outputs(registry: tr.ToolRegistry) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for schema in registry.schemas():
        tool = registry.get(schema.name)
        assert tool is not None
        if tool.output_schema is not None:
            out[schema.name] = tool.output_schema
    return out


def schema(name: str, parameters: dict[str, Any], description: str = "") -> tr.ToolSchema:
    frozen = tr.snapshot_json(parameters)
    assert isinstance(frozen, tr.FrozenDict)
    return tr.ToolSchema(name, description, frozen)


def test_the_sdk_opens_with_the_typing_import_and_tool_call_error() -> None:
    sdk = render_sdk([])
    assert sdk.startswith("from typing import Any, Literal, NotRequired, Protocol, TypedDict\n"
                          "\n\nclass ToolCallError(Exception):\n")
    tree = ast.parse(sdk)
    error = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ToolCallError")
    fields = {n.target.id: ast.unparse(n.annotation) for n in error.body  # type: ignore[union-attr]
              if isinstance(n, ast.AnnAssign)}
    assert fields == {"tool_name": "str", "code": "str | None", "message": "str"}
    # The sandbox's exceptions carry only a message: tool_call_error() reads the fields.
    info = next(n for n in tree.body if isinstance(n, ast.ClassDef)
                and n.name == "ToolCallErrorInfo")
    fields = {n.target.id: ast.unparse(n.annotation) for n in info.body  # type: ignore[union-attr]
              if isinstance(n, ast.AnnAssign)}
    assert fields == {"tool_name": "str", "code": "str | None", "message": "str"}
    reader = next(n for n in tree.body if isinstance(n, ast.FunctionDef)
                  and n.name == "tool_call_error")
    assert ast.unparse(reader.args) == "error: BaseException"
    assert reader.returns is not None
    assert ast.unparse(reader.returns) == "ToolCallErrorInfo"
    assert sdk.endswith("\n\ntools: Tools\n")


def test_the_sdk_is_byte_identical_for_the_same_schemas_in_any_order() -> None:
    registry = typed_registry()
    schemas = registry.schemas()
    first = render_sdk(schemas, outputs(registry))
    for seed in range(5):
        shuffled = list(schemas)
        random.Random(seed).shuffle(shuffled)
        assert render_sdk(shuffled, outputs(registry)) == first


def test_typed_tools_with_nested_models_unions_enums_and_optional_fields_render_as_typed_dicts(
) -> None:
    registry = typed_registry()
    sdk = render_sdk(registry.schemas(), outputs(registry))
    assert "class CreatePerson(TypedDict):\n    name: str\n    address: CreateAddress\n" \
           '    friends: NotRequired[list["CreatePerson"]]\n' in sdk
    assert "class CreateAddress(TypedDict):\n    street: str\n    zip: NotRequired[int | None]\n" \
        in sdk
    assert 'CreateColor = Literal["red", "blue"]\n' in sdk
    assert ("class CreateArgs(TypedDict):\n    person: CreatePerson\n    color: CreateColor\n"
            '    mode: NotRequired[Literal["a", "b"]]\n    key: NotRequired[int | str]\n'
            "    weights: NotRequired[dict[str, float] | None]\n"
            "    tags: NotRequired[list[str] | None]\n") in sdk
    assert "CreateOutput = CreatePerson\n" in sdk
    assert "ReadFileOutput = str\n" in sdk
    assert ('    async def create(self, args: CreateArgs) -> CreateOutput:\n'
            '        """Create a person.\n\n        The "person" is stored.\n        """\n'
            in sdk)
    assert ('    async def read_file(self, args: ReadFile2Args) -> ReadFile2Output:\n'
            '        """Read a file."""\n') in sdk


def test_names_that_are_no_method_get_a_comment_and_call_reaches_every_tool() -> None:
    sdk = render_sdk(typed_registry().schemas())
    for name in ("read-file", "call", "_hidden", "class"):
        assert f'    # await tools.call("{name}", args)' in sdk
    assert "async def call(self, name: str, args: dict[str, Any]) -> Any:" in sdk
    assert "async def _hidden" not in sdk
    assert "async def class" not in sdk
    assert sdk.count("async def call(") == 1


def test_a_tool_without_an_output_schema_returns_any() -> None:
    sdk = render_sdk([schema("echo", {"type": "object"}, "Echo.")])
    assert "EchoArgs = dict[str, Any]\n" in sdk
    assert "EchoOutput = Any\n" in sdk
    assert "async def echo(self, args: EchoArgs) -> EchoOutput:" in sdk


def test_json_schema_constructs_that_mcp_servers_emit() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "maybe": {"type": ["string", "null"]},
            "count": {"type": "integer", "minimum": 0},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "any": {},
            "items": {"type": "array"},
            "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
            "fixed": {"const": "v1"},
            "level": {"enum": [1, 2, None]},
            "floaty": {"enum": [0.5, 1.5]},
            "pick": {"oneOf": [{"type": "string"}, {"$ref": "#/definitions/Thing"}]},
            "wrapped": {"allOf": [{"$ref": "#/definitions/Thing"}]},
            "both": {"allOf": [{"type": "string"}, {"minLength": 2}]},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"type": "object"},
            "nested": {"type": "object", "properties": {"dash-key": {"type": "string"},
                                                          "ok": {"type": "boolean"}},
                       "required": ["dash-key"]},
            "nullable": {"type": "string", "nullable": True},
            "remote": {"$ref": "https://example.com/schema.json"},
        },
        "required": ["maybe"],
        "definitions": {"Thing": {"type": "object", "properties": {"id": {"type": "integer"}},
                                  "required": ["id"]}},
    }
    sdk = render_sdk([schema("mcp.tool", parameters, "From MCP.")])
    tree = ast.parse(sdk)
    args = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "McpToolArgs")
    fields = {n.target.id: ast.unparse(n.annotation) for n in args.body  # type: ignore[union-attr]
              if isinstance(n, ast.AnnAssign)}
    assert fields == {
        "maybe": "str | None",
        "count": "NotRequired[int]",
        "ratio": "NotRequired[float]",
        "flag": "NotRequired[bool]",
        "any": "NotRequired[Any]",
        "items": "NotRequired[list[Any]]",
        "matrix": "NotRequired[list[list[float]]]",
        "fixed": "NotRequired[Literal['v1']]",
        "level": "NotRequired[Literal[1, 2] | None]",
        "floaty": "NotRequired[Any]",
        "pick": "NotRequired[str | McpToolThing]",
        "wrapped": "NotRequired[McpToolThing]",
        "both": "NotRequired[Any]",
        "headers": "NotRequired[dict[str, str]]",
        "free": "NotRequired[dict[str, Any]]",
        "nested": "NotRequired[McpToolArgsNested]",
        "nullable": "NotRequired[str | None]",
        "remote": "NotRequired[Any]",
    }
    assert "class McpToolThing(TypedDict):\n    id: int\n" in sdk
    assert ('McpToolArgsNested = TypedDict("McpToolArgsNested", {"dash-key": str, '
            '"ok": NotRequired[bool]})\n') in sdk
    assert '    # await tools.call("mcp.tool", args)' in sdk


def test_the_sdk_is_valid_python_that_defines_tools() -> None:
    registry = typed_registry()
    namespace: dict[str, Any] = {}
    code = compile(render_sdk(registry.schemas(), outputs(registry)), "sdk.py", "exec",
                   dont_inherit=True)
    exec(code, namespace)
    assert issubclass(namespace["ToolCallError"], Exception)
    assert "create" in dir(namespace["Tools"])
    assert namespace["__annotations__"]["tools"] is namespace["Tools"]


def test_a_description_with_quotes_and_backslashes_stays_one_docstring() -> None:
    sdk = render_sdk([schema("q", {"type": "object"}, 'Ends in a quote "x" \\ and """ too"')])
    tree = ast.parse(sdk)
    tools = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tools")
    method = next(n for n in tools.body if isinstance(n, ast.AsyncFunctionDef))
    assert ast.get_docstring(method) == 'Ends in a quote "x" \\ and """ too"'


def test_the_comment_for_a_tool_without_a_method_is_exactly_the_call() -> None:
    sdk = render_sdk([schema("mcp.tool", {"type": "object"})])
    [line] = [line for line in sdk.splitlines() if "mcp.tool" in line]
    assert line == '    # await tools.call("mcp.tool", args)'


def test_a_nested_class_never_takes_the_name_another_tool_s_args_need() -> None:
    # Tool "a"'s property "b_args" would be AArgsBArgs, the Args name of tool "a_args_b".
    sdk = render_sdk([
        schema("a", {"type": "object", "properties": {
            "b_args": {"type": "object", "properties": {"q": {"type": "integer"}}}}}),
        schema("a_args_b", {"type": "object", "properties": {"z": {"type": "string"}}}),
    ])
    classes = [node.name for node in ast.parse(sdk).body if isinstance(node, ast.ClassDef)]
    assert len(classes) == len(set(classes)), classes
    assert "class AArgsBArgs(TypedDict):\n    z: NotRequired[str]\n" in sdk
    assert "    b_args: NotRequired[AArgsBArgs2]\n" in sdk


def test_two_schemas_of_one_name_are_refused() -> None:
    with pytest.raises(ValueError, match=exactly("render_sdk() got two schemas named 'a'")):
        render_sdk([schema("a", {"type": "object"}), schema("a", {"type": "object"}, "Other.")])
