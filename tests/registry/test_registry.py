"""ToolRegistry: registration checks, and the registry object itself.

Mirrors pipeline.md "Registration" and api.md "ToolRegistry". Change notifications and
disposers: test_registry_changes.py; the views: test_registry_views.py; scope handles and
restrictions: test_scope*.py.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import Any, cast

import pytest

import toolrail as tr
from helpers import Changes, call, exactly, execute, names, raw_tool

# ---- helpers ------------------------------------------------------------------------

NAME_RULE = 'use 1-128 characters from A-Z, a-z, 0-9, "_", "-" and "."'


def name_error(name: object) -> str:
    return f"invalid tool name {name!r}: {NAME_RULE}"


def parameters_error(name: str) -> str:
    return f'tool "{name}" parameters must be a JSON Schema object with "type": "object"'


def timeout_error(name: str) -> str:
    return f'tool "{name}" timeout must be a positive finite number of seconds'


def execute_error(name: str) -> str:
    return f'tool "{name}" execute must be callable'


def description_error(name: str) -> str:
    return f'tool "{name}" description must be a str'


def cancellation_error(name: str) -> str:
    return f'tool "{name}" cancellation must be "interrupt" or "cooperative"'


def duplicate_global_error(name: str) -> str:
    return (
        f'tool "{name}" is already registered (for a per-scope variant, register it '
        "through registry.scope(key) instead)"
    )


def duplicate_scoped_error(name: str) -> str:
    return f'tool "{name}" is already registered in this scope'


# ---- registration: the table, check by check ---------------------------------------


def test_register_returns_a_disposer_and_files_the_tool_in_the_global_layer() -> None:
    registry = tr.ToolRegistry()
    tool = raw_tool("echo")

    disposer = registry.register(tool)

    assert isinstance(disposer, tr.Disposer)
    assert disposer.disposed is False
    assert registry.get("echo") is tool
    assert names(registry) == ["echo"]


@pytest.mark.parametrize(
    ("value", "type_name"),
    [(1, "int"), ("echo", "str"), (None, "NoneType"), ({"name": "echo"}, "dict")],
)
def test_register_rejects_anything_that_is_not_a_tool_with_a_type_error(
    value: object, type_name: str
) -> None:
    registry = tr.ToolRegistry()
    with pytest.raises(TypeError, match=exactly(f"register() takes a Tool, got {type_name}")):
        registry.register(cast(Any, value))


def test_scope_register_rejects_anything_that_is_not_a_tool_with_the_same_message() -> None:
    registry = tr.ToolRegistry()
    with pytest.raises(TypeError, match=exactly("register() takes a Tool, got int")):
        registry.scope("agent").register(cast(Any, 1))


@pytest.mark.parametrize(
    "name",
    [
        "a",
        "x" * 128,
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "abcdefghijklmnopqrstuvwxyz",
        "0123456789",
        "_",
        "-",
        ".",
        "mcp.server-1_read",
        "run_code2",
    ],
)
def test_register_accepts_names_of_1_to_128_allowed_characters(name: str) -> None:
    registry = tr.ToolRegistry()
    tool = raw_tool(name)
    registry.register(tool)
    assert registry.get(name) is tool


@pytest.mark.parametrize(
    "name",
    [
        "",
        "x" * 129,
        "has space",
        "slash/name",
        "colon:name",
        "star*",
        "caf\u00e9",
        "\uff21",  # FULLWIDTH LATIN CAPITAL LETTER A
        "\u0661",  # ARABIC-INDIC DIGIT ONE
        "name\n",
        "\nname",
        "tab\t",
        'quote"',
        "a+b",
    ],
)
def test_register_rejects_names_outside_1_to_128_allowed_characters(name: str) -> None:
    registry = tr.ToolRegistry()
    with pytest.raises(ValueError, match=exactly(name_error(name))):
        registry.register(raw_tool(name))
    assert registry.schemas() == []


def test_name_of_exactly_128_characters_is_accepted_and_129_is_rejected() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("n" * 128))
    with pytest.raises(ValueError, match=exactly(name_error("n" * 129))):
        registry.register(raw_tool("n" * 129))


@pytest.mark.parametrize("name", [None, 5, b"bytes", ["list"]])
def test_a_name_that_is_not_a_str_is_an_invalid_name_shown_by_its_repr(name: object) -> None:
    registry = tr.ToolRegistry()
    with pytest.raises(ValueError, match=exactly(name_error(name))):
        registry.register(raw_tool(cast(Any, name)))


def test_invalid_name_message_uses_the_repr_of_the_name() -> None:
    registry = tr.ToolRegistry()
    with pytest.raises(
        ValueError,
        match=exactly(
            'invalid tool name \'a b\': use 1-128 characters from A-Z, a-z, 0-9, "_", "-" and "."'
        ),
    ):
        registry.register(raw_tool("a b"))


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "string"},
        {},
        {"type": ["object"]},
        {"type": "Object"},
        {"properties": {}},
        {"type": "object", "minimum": math.nan},
        {"type": "object", "maximum": math.inf},
        {"type": "object", "enum": {1, 2}},
        {"type": "object", 1: "non-str key"},
        {"type": "object", "default": object()},
        [("type", "object")],
        "object",
        None,
    ],
)
def test_register_rejects_parameters_that_are_not_a_lossless_json_object_schema(
    parameters: Any,
) -> None:
    registry = tr.ToolRegistry()
    with pytest.raises(ValueError, match=exactly(parameters_error("t"))):
        registry.register(raw_tool("t", parameters=parameters))
    assert registry.get("t") is None


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "object"},
        {"type": "object", "properties": {"a": {"type": "array", "items": [1, 2.5]}}},
        MappingProxyType({"type": "object"}),
        {"type": "object", "required": ("a",), "properties": {"a": {"type": "string"}}},
    ],
)
def test_register_accepts_any_lossless_json_mapping_with_type_object(parameters: Any) -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", parameters=parameters))
    assert registry.get("t") is not None


@pytest.mark.parametrize(
    "timeout",
    [True, False, 0, 0.0, -0.0, -1, -0.5, math.inf, -math.inf, math.nan, "5", [1]],
)
def test_register_rejects_a_timeout_that_is_not_a_positive_finite_number(timeout: Any) -> None:
    registry = tr.ToolRegistry()
    with pytest.raises(ValueError, match=exactly(timeout_error("t"))):
        registry.register(raw_tool("t", timeout=timeout))
    assert registry.get("t") is None


def test_a_timeout_too_large_for_a_float_is_rejected_with_the_timeout_message() -> None:
    # 10**400 cannot be a number of seconds (no float holds it; asyncio.timeout would
    # fail during the call). Registration fails loudly with the table's ValueError,
    # not with an OverflowError.
    registry = tr.ToolRegistry()
    with pytest.raises(ValueError, match=exactly(timeout_error("t"))):
        registry.register(raw_tool("t", timeout=10**400))
    assert registry.get("t") is None


@pytest.mark.parametrize("timeout", [None, 1, 0.5, 1e-9, 3600, 1e300])
def test_register_accepts_none_or_a_positive_finite_timeout(timeout: float | None) -> None:
    registry = tr.ToolRegistry()
    tool = raw_tool("t", timeout=timeout)
    registry.register(tool)
    assert registry.get("t") is tool


@pytest.mark.parametrize("execute_value", [None, 5, "echo"])
def test_register_rejects_an_execute_that_is_not_callable(execute_value: Any) -> None:
    registry = tr.ToolRegistry()
    with pytest.raises(TypeError, match=exactly(execute_error("t"))):
        registry.register(raw_tool("t", execute=execute_value))
    assert registry.get("t") is None


def test_register_accepts_a_sync_execute_and_a_callable_object() -> None:
    class Body:
        def __call__(self, arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
            return "ok"

    def sync_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        return "ok"

    registry = tr.ToolRegistry()
    registry.register(raw_tool("sync", execute=sync_body))
    registry.register(raw_tool("obj", execute=Body()))
    assert names(registry) == ["obj", "sync"]


@pytest.mark.parametrize("description", [None, 5, b"bytes", ["text"]])
def test_register_rejects_a_description_that_is_not_a_str(description: Any) -> None:
    registry = tr.ToolRegistry()
    with pytest.raises(TypeError, match=exactly(description_error("t"))):
        registry.register(raw_tool("t", description=description))
    assert registry.get("t") is None


def test_register_accepts_an_empty_description() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", description=""))
    assert registry.schemas()[0].description == ""


@pytest.mark.parametrize("cancellation", ["abort", "Interrupt", "", None, 1])
def test_register_rejects_a_cancellation_other_than_interrupt_or_cooperative(
    cancellation: Any,
) -> None:
    registry = tr.ToolRegistry()
    with pytest.raises(ValueError, match=exactly(cancellation_error("t"))):
        registry.register(raw_tool("t", cancellation=cancellation))
    assert registry.get("t") is None


@pytest.mark.parametrize("cancellation", ["interrupt", "cooperative"])
def test_register_accepts_interrupt_and_cooperative_cancellation(cancellation: str) -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", cancellation=cancellation))
    assert registry.get("t") is not None


def test_a_second_global_tool_of_the_same_name_is_rejected_and_the_first_stays() -> None:
    registry = tr.ToolRegistry()
    first = raw_tool("dup")
    registry.register(first)
    with pytest.raises(ValueError, match=exactly(duplicate_global_error("dup"))):
        registry.register(raw_tool("dup"))
    assert registry.get("dup") is first


def test_registering_the_very_same_tool_twice_globally_is_a_duplicate() -> None:
    registry = tr.ToolRegistry()
    tool = raw_tool("dup")
    registry.register(tool)
    with pytest.raises(ValueError, match=exactly(duplicate_global_error("dup"))):
        registry.register(tool)


def test_a_second_tool_of_the_same_name_in_one_scope_is_rejected_with_the_scope_message() -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")
    first = raw_tool("dup")
    scope.register(first)
    with pytest.raises(ValueError, match=exactly(duplicate_scoped_error("dup"))):
        scope.register(raw_tool("dup"))
    assert scope.get("dup") is first


def test_a_duplicate_through_another_handle_of_the_same_scope_uses_the_scope_message() -> None:
    registry = tr.ToolRegistry()
    registry.scope("agent").register(raw_tool("dup"))
    with pytest.raises(ValueError, match=exactly(duplicate_scoped_error("dup"))):
        registry.scope("agent").register(raw_tool("dup"))


def test_a_global_tool_does_not_make_a_scoped_tool_of_the_same_name_a_duplicate() -> None:
    registry = tr.ToolRegistry()
    global_tool, scoped_tool = raw_tool("same"), raw_tool("same")
    registry.register(global_tool)
    registry.scope("agent").register(scoped_tool)
    assert registry.get("same") is global_tool
    assert registry.get("same", "agent") is scoped_tool


def test_a_scoped_tool_does_not_make_a_global_tool_of_the_same_name_a_duplicate() -> None:
    registry = tr.ToolRegistry()
    global_tool, scoped_tool = raw_tool("same"), raw_tool("same")
    registry.scope("agent").register(scoped_tool)
    registry.register(global_tool)
    assert registry.get("same") is global_tool
    assert registry.get("same", "agent") is scoped_tool


def test_the_same_name_in_two_scopes_is_legal() -> None:
    registry = tr.ToolRegistry()
    a, b = raw_tool("same"), raw_tool("same")
    registry.scope("a").register(a)
    registry.scope("b").register(b)
    assert registry.get("same", "a") is a
    assert registry.get("same", "b") is b
    assert registry.get("same") is None


# ---- registration: the checks run in order; the first failure wins -----------------


@pytest.mark.parametrize(
    ("overrides", "error_type", "message"),
    [
        # bad name + every later fault -> the name error
        (
            {
                "name": "bad name",
                "parameters": {"type": "string"},
                "timeout": -1,
                "execute": None,
                "description": None,
                "cancellation": "nope",
            },
            ValueError,
            name_error("bad name"),
        ),
        # bad parameters + bad timeout -> the parameters error
        (
            {"parameters": {"type": "string"}, "timeout": -1},
            ValueError,
            parameters_error("t"),
        ),
        # bad parameters + execute not callable (a TypeError row) -> the parameters error
        (
            {"parameters": {"type": "string"}, "execute": None},
            ValueError,
            parameters_error("t"),
        ),
        # bad timeout + execute not callable -> the timeout error (a ValueError)
        ({"timeout": 0, "execute": None}, ValueError, timeout_error("t")),
        # bad timeout + bad description + bad cancellation -> the timeout error
        (
            {"timeout": math.nan, "description": None, "cancellation": "nope"},
            ValueError,
            timeout_error("t"),
        ),
        # execute not callable + bad description -> the execute error
        ({"execute": 3, "description": 3}, TypeError, execute_error("t")),
        # bad description + bad cancellation -> the description error (a TypeError)
        ({"description": 3, "cancellation": "nope"}, TypeError, description_error("t")),
    ],
)
def test_the_first_failing_check_in_table_order_raises(
    overrides: dict[str, Any], error_type: type[Exception], message: str
) -> None:
    registry = tr.ToolRegistry()
    fields: dict[str, Any] = {"name": "t", **overrides}
    with pytest.raises(error_type) as info:
        registry.register(raw_tool(**fields))
    assert type(info.value) is error_type
    assert str(info.value) == message


def test_a_bad_cancellation_on_a_duplicate_name_raises_the_cancellation_error() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t"))
    with pytest.raises(ValueError, match=exactly(cancellation_error("t"))):
        registry.register(raw_tool("t", cancellation="nope"))


def test_a_bad_tool_on_a_scoped_duplicate_name_raises_the_tool_error_not_the_duplicate() -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")
    scope.register(raw_tool("t"))
    with pytest.raises(TypeError, match=exactly(description_error("t"))):
        scope.register(raw_tool("t", description=None))


BAD_TOOLS = [
    cast(Any, 1),
    raw_tool("bad name"),
    raw_tool("t", parameters={"type": "array"}),
    raw_tool("t", timeout=0),
    raw_tool("t", execute=None),
    raw_tool("t", description=None),
    raw_tool("t", cancellation="nope"),
    raw_tool("dup"),
]


def assert_a_failed_registration_changes_nothing(
    registry: tr.ToolRegistry, view: tr.ToolRegistry | tr.Scope, bad: tr.Tool
) -> None:
    """``view`` already holds a tool "dup"; registering ``bad`` there fails and leaves no trace."""
    existing = raw_tool("dup")
    view.register(existing)
    before = view.schemas()
    changes = Changes()
    registry.on_change(changes)

    with pytest.raises((TypeError, ValueError)):
        view.register(bad)

    assert changes.count == 0
    assert view.schemas() == before
    assert view.get("dup") is existing
    assert view.get("t") is None


@pytest.mark.parametrize("bad", BAD_TOOLS)
def test_a_failed_global_registration_changes_nothing_and_does_not_notify(bad: tr.Tool) -> None:
    registry = tr.ToolRegistry()
    assert_a_failed_registration_changes_nothing(registry, registry, bad)


@pytest.mark.parametrize("bad", BAD_TOOLS)
def test_a_failed_scoped_registration_changes_nothing_and_does_not_notify(bad: tr.Tool) -> None:
    registry = tr.ToolRegistry()
    assert_a_failed_registration_changes_nothing(registry, registry.scope("agent"), bad)


# ---- registration never mutates what the caller passed ------------------------------


def test_registration_does_not_mutate_the_tool_or_its_parameters() -> None:
    items = [1, 2.5, "x"]
    properties = {"a": {"type": "array", "items": items}}
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    expected = copy.deepcopy(parameters)
    tool = raw_tool("t", parameters=parameters)
    before = [getattr(tool, field.name) for field in dataclasses.fields(tool)]

    registry = tr.ToolRegistry()
    registry.register(tool)
    registry.schemas()

    after = [getattr(tool, field.name) for field in dataclasses.fields(tool)]
    assert all(x is y for x, y in zip(before, after, strict=True))
    assert tool.parameters is parameters
    assert parameters == expected
    assert type(parameters) is dict
    assert parameters["properties"] is properties
    assert type(properties["a"]) is dict
    assert properties["a"]["items"] is items
    assert type(items) is list
    # still the caller's mutable objects
    items.append("more")
    parameters["extra"] = True


def test_mutating_the_callers_parameters_after_registration_does_not_change_the_schema() -> None:
    parameters: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", parameters=parameters))
    registry.schemas()  # populate any cache

    parameters["properties"]["a"]["type"] = "integer"
    parameters["required"] = ["a"]

    schema = registry.schemas()[0]
    assert tr.thaw(schema.parameters) == {
        "type": "object",
        "properties": {"a": {"type": "string"}},
    }


# ---- the registry object ------------------------------------------------------------


def test_scope_none_is_rejected() -> None:
    registry = tr.ToolRegistry()
    with pytest.raises(ValueError, match=exactly("scope key must not be None")):
        registry.scope(None)


def test_scope_with_an_unhashable_key_raises_type_error() -> None:
    registry = tr.ToolRegistry()
    with pytest.raises(TypeError):
        registry.scope(cast(Any, ["not", "hashable"]))


def test_scope_returns_a_handle_with_the_key() -> None:
    registry = tr.ToolRegistry()
    key = ("agent", 1)
    scope = registry.scope(key)
    assert isinstance(scope, tr.Scope)
    assert scope.key == key


def _failing_observer(execution: tr.Execution, result: tr.ToolResult) -> None:
    raise RuntimeError("observer broke")


@pytest.fixture
def toolrail_records(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG):
        yield caplog


async def test_logger_defaults_to_the_toolrail_logger(
    toolrail_records: pytest.LogCaptureFixture,
) -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t"))
    registry.on_result(_failing_observer)

    await execute(registry, call("t"))

    records = [r for r in toolrail_records.records if r.name == "toolrail"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.WARNING, 'tool "t" (c1): result observer failed: observer broke')
    ]


async def test_a_custom_logger_receives_the_registrys_warnings(
    toolrail_records: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("tests.custom_registry_logger")
    registry = tr.ToolRegistry(logger=logger)
    registry.register(raw_tool("t"))
    registry.on_result(_failing_observer)

    await execute(registry, call("t"))

    assert [r.name for r in toolrail_records.records] == ["tests.custom_registry_logger"]
    assert toolrail_records.records[0].getMessage() == (
        'tool "t" (c1): result observer failed: observer broke'
    )


def test_the_approver_is_taken_from_the_constructor_and_is_settable() -> None:
    def approver(request: tr.ApprovalRequest) -> tr.ApprovalOutcome:
        return tr.ApprovalOutcome.ALLOWED_ONCE

    assert tr.ToolRegistry().approver is None
    registry = tr.ToolRegistry(approver=approver)
    assert registry.approver is approver
    registry.approver = None
    assert registry.approver is None


async def test_the_approver_is_read_at_the_moment_a_call_asks() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t"))
    asked: list[str] = []

    def approver(request: tr.ApprovalRequest) -> tr.ApprovalOutcome:
        asked.append(request.tool_name)
        return tr.ApprovalOutcome.ALLOWED_ONCE

    def ask(execution: tr.Execution, call_next: Callable[[], Any]) -> tr.Ask:
        registry.approver = approver  # set after the call started, before it asks
        return tr.Ask("please")

    registry.pre_execute(ask)

    result = await execute(registry, call("t", {"x": 1}))

    assert asked == ["t"]
    assert result.is_error is False


async def test_clearing_the_approver_makes_an_ask_a_denial() -> None:
    def approver(request: tr.ApprovalRequest) -> tr.ApprovalOutcome:
        return tr.ApprovalOutcome.ALLOWED_ONCE

    registry = tr.ToolRegistry(approver=approver)
    registry.register(raw_tool("t"))
    registry.pre_execute(lambda execution, call_next: tr.Ask())
    registry.approver = None

    result = await execute(registry, call("t"))

    assert result.error is not None
    assert result.error.code == "DENIED"
    assert result.error.message == 'tool "t" requires approval, but no approver is configured'
