"""``ToolRegistry.scopes()``: the keys of the scopes that have a layer.

A scope has a layer while something is registered, restricted, guarded or added
(scope-only middleware or observer) through it; the keys come sorted by ``str``.
"""

from __future__ import annotations

import doctest
from typing import Any, cast

import toolrail as tr
from helpers import PreNext, adder_registry
from toolrail._registry import registry as registry_module


def noop_tool(name: str = "secret") -> tr.Tool:
    return tr.Tool(name=name, description="A tool.", parameters={"type": "object"},
                   execute=lambda arguments, ctx: "ok")


async def allow(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
    return tr.Allow()


def test_a_registry_without_scoped_registrations_has_no_scopes() -> None:
    registry = adder_registry()
    registry.scope("idle")  # a handle alone makes no layer
    assert registry.scopes() == []


def test_every_kind_of_scoped_registration_makes_a_layer() -> None:
    registry = adder_registry()
    registry.scope("tools").register(noop_tool())
    registry.scope("restricted").restrict(deny=["add"])
    registry.scope("guarded").guard(lambda execution: None)
    registry.scope("middleware").pre_execute(allow)
    registry.scope("observed").on_result(lambda execution, result: None)
    assert registry.scopes() == ["guarded", "middleware", "observed", "restricted", "tools"]


def test_middleware_for_all_scopes_makes_no_layer() -> None:
    registry = adder_registry()
    registry.scope("agent").pre_execute(allow, all_scopes=True)
    assert registry.scopes() == []


def test_a_scope_leaves_the_list_when_its_last_registration_is_disposed() -> None:
    registry = adder_registry()
    scope = registry.scope("agent")
    first, second = scope.register(noop_tool("a")), scope.restrict(allow=["add"])
    first()
    assert registry.scopes() == ["agent"]
    second()
    assert registry.scopes() == []


def test_closing_a_handle_removes_its_scope() -> None:
    registry = adder_registry()
    with registry.scope("agent") as scope:
        scope.register(noop_tool())
        assert registry.scopes() == ["agent"]
    assert registry.scopes() == []


def test_keys_are_sorted_by_str_and_keep_their_own_type() -> None:
    registry = adder_registry()
    for key in (10, "b", 2, ("a", 1)):
        registry.scope(key).register(noop_tool())
    assert registry.scopes() == [("a", 1), 10, 2, "b"]


def test_each_call_returns_a_new_list() -> None:
    registry = adder_registry()
    registry.scope("agent").register(noop_tool())
    listed = registry.scopes()
    listed.clear()
    assert registry.scopes() == ["agent"]


def test_the_registry_module_examples_run() -> None:
    assert doctest.testmod(registry_module).failed == 0


class _NoHash:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no equality")

    def __hash__(self) -> int:
        raise RuntimeError("no hash")


async def test_a_call_whose_scope_cannot_be_hashed_is_an_error_result_never_raised() -> None:
    # ToolCall construction stays allowed; execute/run/stream never raise for it, and the
    # global observers see the error once per call.
    registry = adder_registry()
    registry.scope("agent")
    seen: list[tr.ErrorInfo | None] = []
    registry.on_result(lambda execution, result: seen.append(result.error))
    for scope, reason in ((cast(Any, ["agent"]), "unhashable type: 'list'"),
                          (_NoHash(), "no hash")):
        message = f"tool call scope must be hashable: {reason}"
        call = tr.ToolCall(call_id="1", name="add", arguments={"a": 1, "b": 2}, scope=scope)
        results = [await registry.execute(call), (await registry.run([call])).results[0]]
        results += [item.result async for item in registry.stream([call])]
        for result in results:
            assert result.error == tr.ErrorInfo(message, None, None)
            assert result.content == (tr.TextContent("Error: " + message),)
        assert seen == [tr.ErrorInfo(message, None, None)] * 3
        seen.clear()
