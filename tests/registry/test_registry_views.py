"""ToolRegistry views: ``get``, ``schemas`` and ``execution_mode`` (spec: pipeline.md
"Views", api.md "ToolSchema", "ExecutionMode")."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, cast

import pytest

import toolrail as tr
from helpers import call, names, raw_tool

# ---- views: get ---------------------------------------------------------------------


def test_get_returns_the_registered_object_itself() -> None:
    registry = tr.ToolRegistry()
    tool = raw_tool("t")
    registry.register(tool)
    assert registry.get("t") is tool
    assert registry.get("t", None) is tool


def test_get_returns_none_for_an_unknown_name() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t"))
    assert registry.get("other") is None
    assert registry.get("T") is None
    assert registry.get("other", "agent") is None


def test_get_in_a_scope_without_registrations_sees_the_global_layer() -> None:
    registry = tr.ToolRegistry()
    tool = raw_tool("t")
    registry.register(tool)
    assert registry.get("t", "nobody") is tool


def test_get_resolves_the_scopes_own_layer_first() -> None:
    registry = tr.ToolRegistry()
    global_tool, scoped_tool = raw_tool("t"), raw_tool("t")
    registry.register(global_tool)
    registry.scope("agent").register(scoped_tool)
    assert registry.get("t", "agent") is scoped_tool
    assert registry.get("t") is global_tool
    assert registry.get("t", "other") is global_tool


# ---- views: schemas -----------------------------------------------------------------

SORT_NAMES = ["b", "a", "B", "_x", "-y", ".z", "9", "Z", "aa", "a.b", "a-b", "a_b", "A"]


def test_schemas_are_sorted_by_code_point_whatever_the_registration_order() -> None:
    expected = sorted(SORT_NAMES)
    assert expected == ["-y", ".z", "9", "A", "B", "Z", "_x", "a", "a-b", "a.b", "a_b", "aa", "b"]
    for order in (SORT_NAMES, list(reversed(SORT_NAMES)), sorted(SORT_NAMES)):
        registry = tr.ToolRegistry()
        for name in order:
            registry.register(raw_tool(name))
        assert names(registry) == expected


def test_schemas_of_an_empty_registry_is_an_empty_list() -> None:
    assert tr.ToolRegistry().schemas() == []


def test_schemas_returns_a_new_list_per_call_that_belongs_to_the_caller() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("a"))
    registry.register(raw_tool("b"))

    first = registry.schemas()
    second = registry.schemas()
    assert type(first) is list
    assert first is not second

    first.clear()
    first.append(cast(Any, "junk"))
    assert names(registry) == ["a", "b"]
    assert [s.name for s in second] == ["a", "b"]


def test_schemas_twice_without_a_change_share_the_same_schema_objects() -> None:
    registry = tr.ToolRegistry()
    for name in ("c", "a", "b"):
        registry.register(raw_tool(name))

    first = registry.schemas()
    second = registry.schemas()

    assert first == second
    assert all(x is y for x, y in zip(first, second, strict=True))


def test_scoped_schemas_twice_without_a_change_share_the_same_schema_objects() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("g"))
    registry.scope("agent").register(raw_tool("s"))

    first = registry.schemas("agent")
    second = registry.schemas("agent")

    assert [s.name for s in first] == ["g", "s"]
    assert first is not second
    assert all(x is y for x, y in zip(first, second, strict=True))


def test_schemas_reflect_every_change() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("b"))
    assert names(registry) == ["b"]

    dispose_a = registry.register(raw_tool("a"))
    assert names(registry) == ["a", "b"]

    dispose_a()
    assert names(registry) == ["b"]

    scope = registry.scope("agent")
    scope.register(raw_tool("c"))
    assert names(registry, "agent") == ["b", "c"]
    assert names(registry) == ["b"]

    lift = scope.restrict(deny=["b"])
    assert names(registry, "agent") == ["c"]
    lift()
    assert names(registry, "agent") == ["b", "c"]


def test_schemas_reflect_a_replacement_tool_of_the_same_name() -> None:
    registry = tr.ToolRegistry()
    dispose = registry.register(raw_tool("t", description="old"))
    assert registry.schemas()[0].description == "old"
    dispose()
    registry.register(raw_tool("t", description="new"))
    assert registry.schemas()[0].description == "new"


def test_a_tool_schema_has_exactly_name_description_and_parameters() -> None:
    registry = tr.ToolRegistry()
    registry.register(
        raw_tool(
            "t",
            description="Does t.",
            parameters={"type": "object", "properties": {"x": {"type": "integer"}}},
            output_schema={"type": "object"},
            concurrency_safe=True,
            timeout=5,
            cancellation="cooperative",
            annotations={"readOnlyHint": True},
            present_call=lambda arguments: "call",
        )
    )
    (schema,) = registry.schemas()

    assert type(schema) is tr.ToolSchema
    assert [f.name for f in dataclasses.fields(schema)] == ["name", "description", "parameters"]
    assert schema.name == "t"
    assert schema.description == "Does t."
    assert schema.parameters == {"type": "object", "properties": {"x": {"type": "integer"}}}
    assert not hasattr(schema, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cast(Any, schema).name = "other"


def test_schema_parameters_are_deep_frozen() -> None:
    registry = tr.ToolRegistry()
    registry.register(
        raw_tool(
            "t",
            parameters={
                "type": "object",
                "properties": {"x": {"type": "integer"}},
                "required": ["x"],
            },
        )
    )
    parameters = registry.schemas()[0].parameters

    assert isinstance(parameters, tr.FrozenDict)
    properties = parameters["properties"]
    assert isinstance(properties, tr.FrozenDict)
    assert isinstance(properties["x"], tr.FrozenDict)
    assert parameters["required"] == ("x",)

    mutations: list[Callable[[], object]] = [
        lambda: parameters.__setitem__("type", "string"),
        lambda: parameters.__delitem__("type"),
        lambda: parameters.update({"a": 1}),
        lambda: parameters.pop("type"),
        lambda: parameters.popitem(),
        lambda: parameters.clear(),
        lambda: parameters.setdefault("new", 1),
        lambda: properties.__setitem__("y", {}),
        lambda: cast(Any, properties["x"]).__setitem__("type", "string"),
    ]
    for mutate in mutations:
        with pytest.raises(TypeError):
            mutate()
    frozen = cast(Any, parameters)
    with pytest.raises(TypeError):
        frozen |= {"a": 1}
    with pytest.raises(AttributeError):
        cast(Any, parameters["required"]).append("y")
    assert tr.thaw(parameters) == {
        "type": "object",
        "properties": {"x": {"type": "integer"}},
        "required": ["x"],
    }


def test_to_dict_returns_a_fresh_mutable_dict_with_the_three_keys() -> None:
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"x": {"type": "integer", "enum": [1, 2]}},
        "required": ["x"],
    }
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", description="Does t.", parameters=parameters))
    schema = registry.schemas()[0]

    first = schema.to_dict()
    second = schema.to_dict()

    assert first == {"name": "t", "description": "Does t.", "parameters": parameters}
    assert list(first) == ["name", "description", "parameters"]
    assert first is not second
    assert first["parameters"] is not second["parameters"]
    assert type(first) is dict
    assert type(first["parameters"]) is dict
    assert type(first["parameters"]["properties"]) is dict
    assert type(first["parameters"]["required"]) is list
    assert type(first["parameters"]["properties"]["x"]["enum"]) is list

    first["parameters"]["properties"]["x"]["enum"].append(3)
    first["parameters"]["required"].append("y")
    first["name"] = "changed"
    assert schema.to_dict() == second
    assert registry.schemas()[0].to_dict() == second


# ---- views: execution_mode ----------------------------------------------------------


def test_execution_mode_is_exclusive_for_an_unknown_tool() -> None:
    registry = tr.ToolRegistry()
    assert registry.execution_mode(call("nope")) is tr.ExecutionMode.EXCLUSIVE


def test_execution_mode_is_exclusive_for_a_tool_that_declares_nothing() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t"))
    assert registry.execution_mode(call("t")) is tr.ExecutionMode.EXCLUSIVE


def test_execution_mode_is_exclusive_for_concurrency_safe_false() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", concurrency_safe=False))
    assert registry.execution_mode(call("t")) is tr.ExecutionMode.EXCLUSIVE


def test_execution_mode_is_parallel_for_concurrency_safe_true() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", concurrency_safe=True))
    assert registry.execution_mode(call("t")) is tr.ExecutionMode.PARALLEL


@pytest.mark.parametrize("declared", [1, "yes", 1.0, [True], "true"])
def test_execution_mode_is_exclusive_for_a_truthy_non_callable_declaration(declared: Any) -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", concurrency_safe=declared))
    assert registry.execution_mode(call("t")) is tr.ExecutionMode.EXCLUSIVE


def test_execution_mode_is_parallel_when_the_classifier_returns_exactly_true() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", concurrency_safe=lambda arguments: True))
    assert registry.execution_mode(call("t")) is tr.ExecutionMode.PARALLEL


@pytest.mark.parametrize("verdict", [1, "yes", 1.0, [True], False, None, 0, "True"])
def test_execution_mode_is_exclusive_when_the_classifier_returns_anything_but_true(
    verdict: Any,
) -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", concurrency_safe=lambda arguments: verdict))
    assert registry.execution_mode(call("t")) is tr.ExecutionMode.EXCLUSIVE


def test_execution_mode_is_exclusive_when_the_classifier_raises() -> None:
    def classifier(arguments: tr.JsonValue) -> bool:
        raise RuntimeError("cannot tell")

    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", concurrency_safe=classifier))
    assert registry.execution_mode(call("t")) is tr.ExecutionMode.EXCLUSIVE


def test_execution_mode_is_exclusive_when_the_classifier_returns_an_object_that_raises() -> None:
    class Treacherous:
        def __bool__(self) -> bool:
            raise RuntimeError("no truth")

        def __eq__(self, other: object) -> bool:
            raise RuntimeError("no equality")

        __hash__ = None  # type: ignore[assignment]

    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", concurrency_safe=lambda arguments: Treacherous()))
    assert registry.execution_mode(call("t")) is tr.ExecutionMode.EXCLUSIVE


def test_the_classifier_decides_per_call_from_the_arguments() -> None:
    def classifier(arguments: tr.JsonValue) -> bool:
        assert isinstance(arguments, dict)
        return arguments.get("read_only") is True

    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", concurrency_safe=classifier))
    assert registry.execution_mode(call("t", {"read_only": True})) is tr.ExecutionMode.PARALLEL
    assert registry.execution_mode(call("t", {"read_only": False})) is tr.ExecutionMode.EXCLUSIVE


def test_the_classifier_receives_the_frozen_lossless_json_snapshot() -> None:
    received: list[tr.JsonValue] = []

    def classifier(arguments: tr.JsonValue) -> bool:
        received.append(arguments)
        return True

    arguments: dict[str, Any] = {"path": "a", "items": [1, 2], "nested": {"k": [True]}}
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", concurrency_safe=classifier))

    assert registry.execution_mode(call("t", arguments)) is tr.ExecutionMode.PARALLEL
    (snapshot,) = received
    assert type(snapshot) is tr.FrozenDict
    assert snapshot is not arguments
    assert snapshot == {"path": "a", "items": (1, 2), "nested": {"k": (True,)}}
    assert type(snapshot["nested"]) is tr.FrozenDict
    assert arguments == {"path": "a", "items": [1, 2], "nested": {"k": [True]}}


@pytest.mark.parametrize(
    "arguments",
    [{"x": math.nan}, {"x": math.inf}, {"when": object()}, {1: "int key"}, {"s": {1, 2}}],
)
def test_execution_mode_does_not_call_the_classifier_for_non_lossless_arguments(
    arguments: Any,
) -> None:
    called = False

    def classifier(arguments: tr.JsonValue) -> bool:
        nonlocal called
        called = True
        return True

    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", concurrency_safe=classifier))

    assert registry.execution_mode(call("t", arguments)) is tr.ExecutionMode.EXCLUSIVE
    assert called is False


@pytest.mark.parametrize("arguments", [{"x": math.nan}, {"when": object()}])
def test_execution_mode_is_exclusive_for_non_lossless_arguments_even_when_declared_safe(
    arguments: Any,
) -> None:
    # "PARALLEL only when ... concurrency_safe is True" is a necessary condition; the
    # next sentence makes "arguments that are not lossless JSON" EXCLUSIVE outright.
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", concurrency_safe=True))
    assert registry.execution_mode(call("t", arguments)) is tr.ExecutionMode.EXCLUSIVE
    assert registry.execution_mode(call("t", {"ok": 1})) is tr.ExecutionMode.PARALLEL


def test_execution_mode_sees_the_tool_visible_to_the_calls_scope() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", concurrency_safe=True))
    registry.scope("agent").register(raw_tool("t", concurrency_safe=False))
    registry.scope("other").register(raw_tool("only_here", concurrency_safe=True))

    assert registry.execution_mode(call("t")) is tr.ExecutionMode.PARALLEL
    assert registry.execution_mode(call("t", scope="agent")) is tr.ExecutionMode.EXCLUSIVE
    assert registry.execution_mode(call("t", scope="nobody")) is tr.ExecutionMode.PARALLEL
    assert registry.execution_mode(call("only_here", scope="other")) is (tr.ExecutionMode.PARALLEL)
    assert registry.execution_mode(call("only_here")) is tr.ExecutionMode.EXCLUSIVE
    assert registry.execution_mode(call("only_here", scope="agent")) is (tr.ExecutionMode.EXCLUSIVE)


def test_execution_mode_never_raises() -> None:
    class BadKey:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("no equality")

        def __hash__(self) -> int:
            raise RuntimeError("no hash")

    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", concurrency_safe=True))
    registry.scope("agent").register(raw_tool("t", concurrency_safe=True))

    assert registry.execution_mode(call("t", scope=BadKey())) is tr.ExecutionMode.EXCLUSIVE
    assert registry.execution_mode(call("t", scope=cast(Any, ["unhashable"]))) is (
        tr.ExecutionMode.EXCLUSIVE
    )
    assert registry.execution_mode(cast(Any, "not a call")) is tr.ExecutionMode.EXCLUSIVE
    assert registry.execution_mode(cast(Any, None)) is tr.ExecutionMode.EXCLUSIVE


def test_execution_mode_values_are_the_spec_strings() -> None:
    assert tr.ExecutionMode("parallel") is tr.ExecutionMode.PARALLEL
    assert tr.ExecutionMode("exclusive") is tr.ExecutionMode.EXCLUSIVE
    assert str(tr.ExecutionMode.PARALLEL) == "parallel"
    assert {m.value for m in tr.ExecutionMode} == {"parallel", "exclusive"}
