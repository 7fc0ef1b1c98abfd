"""``tr.tool``: typed tools, checked against typed-tools.md rule by rule.

Here: decoration forms and the registry/scope decorators, name and description, and
the options passed through to the tool. The schema and decoration-time ``TypeError``s:
test_typed_schema.py; argument validation: test_typed_arguments.py; classifiers and
presenters: test_typed_classifiers.py; the value a body returns: test_typed_output.py.
Shared set-up: typed_helpers.py. Docstring reading in detail: test_docstrings.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

import toolrail as tr
from typed_helpers import add, call, execute, output_schema_of, read_file, run, schema_of, tool_with


def function_of(tool: tr.Tool) -> Callable[..., Any]:
    """The original function of a typed tool (always set by ``tr.tool``)."""
    assert tool.function is not None
    return tool.function


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
