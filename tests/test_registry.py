"""ToolRegistry: registration checks, change notifications, disposers and the views.

Mirrors pipeline.md "Registration" and "Views" and api.md "ToolRegistry", "Disposer",
"ToolSchema" and "ExecutionMode". Scope handles and restrictions: test_scope.py.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import math
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import Any, cast

import pytest

import toolrail as tr
from helpers import Changes, call, exactly, raw_tool

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


def names(registry: tr.ToolRegistry, scope: Any = None) -> list[str]:
    return [schema.name for schema in registry.schemas(scope)]


def refuse_the_first_change(
    registry: tr.ToolRegistry, name: str, refusal: Exception
) -> list[tr.Tool | None]:
    """A listener raising ``refusal`` at the first change; returns ``name`` as "agent" saw it."""
    seen: list[tr.Tool | None] = []

    def refuse() -> None:
        seen.append(registry.get(name, "agent"))
        if len(seen) == 1:
            raise refusal

    registry.on_change(refuse)
    return seen


async def execute(registry: tr.ToolRegistry, call: tr.ToolCall) -> tr.ToolResult:
    return await asyncio.wait_for(registry.execute(call), 5)


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


# ---- change notifications -----------------------------------------------------------


def test_register_and_dispose_notify_each_listener_once_in_registration_order() -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")
    order: list[str] = []
    registry.on_change(lambda: order.append("first"))
    scope.on_change(lambda: order.append("second"))
    registry.on_change(lambda: order.append("third"))

    disposer = registry.register(raw_tool("t"))
    assert order == ["first", "second", "third"]

    order.clear()
    disposer()
    assert order == ["first", "second", "third"]


def test_listeners_run_synchronously_after_the_insert_and_after_the_removal() -> None:
    registry = tr.ToolRegistry()
    tool = raw_tool("t")
    seen: list[tuple[tr.Tool | None, list[str]]] = []
    registry.on_change(lambda: seen.append((registry.get("t"), names(registry))))

    disposer = registry.register(tool)
    assert seen == [(tool, ["t"])]

    disposer()
    assert seen == [(tool, ["t"]), (None, [])]


def test_scoped_registration_and_disposal_notify_and_are_seen_by_the_listener() -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")
    tool = raw_tool("t")
    seen: list[tr.Tool | None] = []
    registry.on_change(lambda: seen.append(registry.get("t", "agent")))

    disposer = scope.register(tool)
    disposer()

    assert seen == [tool, None]


def test_restrict_and_lift_notify_listeners() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("a"))
    registry.register(raw_tool("b"))
    scope = registry.scope("agent")
    seen: list[list[str]] = []
    registry.on_change(lambda: seen.append(names(registry, "agent")))

    lift = scope.restrict(deny=["a"])
    assert seen == [["b"]]

    lift()
    assert seen == [["b"], ["a", "b"]]


def test_change_notifications_are_not_filtered_by_scope() -> None:
    registry = tr.ToolRegistry()
    heard = Changes()
    registry.scope("listener").on_change(heard)

    registry.register(raw_tool("g"))
    registry.scope("other").register(raw_tool("s"))
    registry.scope("listener").register(raw_tool("own"))

    assert heard.count == 3


def test_the_same_listener_registered_twice_is_notified_twice_and_disposed_separately() -> None:
    registry = tr.ToolRegistry()
    changes = Changes()
    first = registry.on_change(changes)
    registry.on_change(changes)

    registry.register(raw_tool("a"))
    assert changes.count == 2

    first()
    registry.register(raw_tool("b"))
    assert changes.count == 3


def test_a_disposed_listener_is_not_notified() -> None:
    registry = tr.ToolRegistry()
    changes = Changes()
    disposer = registry.on_change(changes)
    disposer()
    registry.register(raw_tool("t"))
    assert changes.count == 0


def test_registering_and_disposing_guards_middleware_observers_and_listeners_never_notifies() -> (
    None
):
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")
    changes = Changes()
    registry.on_change(changes)

    def guard(execution: tr.Execution) -> str | None:
        return None

    def pre(execution: tr.Execution, call_next: Callable[[], Any]) -> Any:
        return call_next()

    def around(execution: tr.Execution, call_next: Callable[[], Any]) -> Any:
        return call_next()

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: Callable[[], Any]) -> Any:
        return call_next()

    def observer(execution: tr.Execution, result: tr.ToolResult) -> None:
        return None

    disposers = [
        registry.guard(guard),
        registry.pre_execute(pre),
        registry.pre_execute(pre, prepend=True),
        registry.around_execute(around),
        registry.post_execute(post),
        registry.on_result(observer),
        registry.on_change(Changes()),
        scope.guard(guard),
        scope.pre_execute(pre),
        scope.around_execute(around, all_scopes=True),
        scope.post_execute(post, prepend=True),
        scope.on_result(observer),
        scope.on_change(Changes()),
    ]
    for disposer in disposers:
        disposer()
    scope.close()

    assert changes.count == 0


def test_a_listener_that_raises_during_register_rolls_the_registration_back() -> None:
    registry = tr.ToolRegistry()
    tool = raw_tool("t")
    refusal = RuntimeError("refused")
    raised = False
    first: list[bool] = []
    third: list[bool] = []

    def refuse_once() -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise refusal

    registry.on_change(lambda: first.append(registry.get("t") is not None))
    registry.on_change(refuse_once)
    registry.on_change(lambda: third.append(registry.get("t") is not None))

    with pytest.raises(RuntimeError) as info:
        registry.register(tool)

    assert info.value is refusal
    assert registry.get("t") is None
    assert registry.schemas() == []
    # the first listener saw the insert, then every listener the rollback
    assert first == [True, False]
    assert third[-1:] == [False]
    assert True not in third
    # nothing is left behind: the name is free again
    registry.register(tool)
    assert registry.get("t") is tool


def test_a_listener_that_raises_during_scoped_register_rolls_it_back_without_a_trace() -> None:
    registry = tr.ToolRegistry()
    global_tool = raw_tool("t")
    registry.register(global_tool)
    scope = registry.scope("agent")
    refusal = ValueError("no scoped tools")
    seen = refuse_the_first_change(registry, "t", refusal)

    with pytest.raises(ValueError, match=exactly("no scoped tools")) as info:
        scope.register(raw_tool("t"))

    assert info.value is refusal
    assert len(seen) == 2
    assert seen[1] is global_tool
    assert scope.get("t") is global_tool
    assert registry.scopes() == []
    changes = Changes()
    registry.on_change(changes)
    scope.close()  # owns nothing: no notification, no error
    assert changes.count == 0


def test_a_listener_that_raises_during_restrict_rolls_the_restriction_back() -> None:
    registry = tr.ToolRegistry()
    tool = raw_tool("a")
    registry.register(tool)
    scope = registry.scope("agent")
    refusal = RuntimeError("no restrictions")
    seen = refuse_the_first_change(registry, "a", refusal)

    with pytest.raises(RuntimeError) as info:
        scope.restrict(deny=["a"])

    assert info.value is refusal
    assert seen == [None, tool]
    assert scope.get("a") is tool
    assert names(registry, "agent") == ["a"]
    assert registry.scopes() == []
    changes = Changes()
    registry.on_change(changes)
    scope.close()
    assert changes.count == 0


def test_disposal_keeps_the_removal_runs_every_listener_and_raises_the_first_error() -> None:
    registry = tr.ToolRegistry()
    disposer = registry.register(raw_tool("t"))
    first_error, second_error = RuntimeError("first"), RuntimeError("second")
    ran: list[str] = []

    def fail(label: str, exc: Exception) -> Callable[[], None]:
        def listener() -> None:
            ran.append(label)
            raise exc

        return listener

    registry.on_change(fail("one", first_error))
    registry.on_change(fail("two", second_error))
    registry.on_change(lambda: ran.append("three"))

    with pytest.raises(RuntimeError) as info:
        disposer()

    assert info.value is first_error
    assert ran == ["one", "two", "three"]
    assert registry.get("t") is None
    assert disposer.disposed is True
    ran.clear()
    disposer()  # already disposed: nothing runs, nothing raises
    assert ran == []


def test_lifting_a_restriction_keeps_the_lift_runs_every_listener_and_raises_the_first() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("a"))
    scope = registry.scope("agent")
    lift = scope.restrict(deny=["a"])
    error = RuntimeError("listener failed")
    ran: list[list[str]] = []

    def fail() -> None:
        ran.append(names(registry, "agent"))
        raise error

    registry.on_change(fail)
    registry.on_change(lambda: ran.append(names(registry, "agent")))

    with pytest.raises(RuntimeError) as info:
        lift()

    assert info.value is error
    assert ran == [["a"], ["a"]]
    assert scope.get("a") is not None
    assert lift.disposed is True


def test_disposal_of_a_scoped_tool_keeps_the_removal_when_a_listener_raises() -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")
    disposer = scope.register(raw_tool("t"))

    def fail() -> None:
        raise RuntimeError("listener failed")

    registry.on_change(fail)
    with pytest.raises(RuntimeError, match=exactly("listener failed")):
        disposer()
    assert scope.get("t") is None
    assert registry.scopes() == []


# ---- Disposer -----------------------------------------------------------------------


def test_a_disposer_undoes_its_registration_once_and_later_calls_do_nothing() -> None:
    registry = tr.ToolRegistry()
    changes = Changes()
    registry.on_change(changes)
    disposer = registry.register(raw_tool("t"))
    assert changes.count == 1

    disposer()
    disposer()
    disposer()

    assert changes.count == 2
    assert disposer.disposed is True
    assert registry.get("t") is None


def test_an_old_disposer_does_not_remove_a_later_registration_of_the_same_name() -> None:
    registry = tr.ToolRegistry()
    old = registry.register(raw_tool("t"))
    old()
    newer = raw_tool("t")
    registry.register(newer)
    old()
    assert registry.get("t") is newer


def test_disposed_is_false_until_the_disposer_runs() -> None:
    registry = tr.ToolRegistry()
    disposers = [
        registry.register(raw_tool("t")),
        registry.guard(lambda execution: None),
        registry.on_change(lambda: None),
    ]
    assert [d.disposed for d in disposers] == [False, False, False]
    for d in disposers:
        d()
    assert [d.disposed for d in disposers] == [True, True, True]


def test_a_disposer_is_a_context_manager_that_disposes_on_exit() -> None:
    registry = tr.ToolRegistry()
    tool = raw_tool("t")
    with registry.register(tool) as disposer:
        assert isinstance(disposer, tr.Disposer)
        assert disposer.disposed is False
        assert registry.get("t") is tool
    assert disposer.disposed is True
    assert registry.get("t") is None


def test_a_disposer_context_manager_disposes_when_the_block_raises_and_lets_it_propagate() -> None:
    registry = tr.ToolRegistry()
    disposer = registry.register(raw_tool("t"))
    with pytest.raises(KeyError), disposer:
        raise KeyError("boom")
    assert disposer.disposed is True
    assert registry.get("t") is None


def test_enter_returns_the_disposer_itself() -> None:
    registry = tr.ToolRegistry()
    disposer = registry.register(raw_tool("t"))
    with disposer as entered:
        assert entered is disposer


async def test_a_disposed_guard_no_longer_runs() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t"))
    disposer = registry.guard(lambda execution: "no")
    denied = await execute(registry, call("t"))
    assert denied.error is not None
    assert denied.error.code == "DENIED"

    disposer()
    disposer()
    allowed = await execute(registry, call("t"))
    assert allowed.is_error is False


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
