"""Scope handles, flat scopes and shadowing, the views bound to a scope, and the scope
filter of middleware, observers and guards.

Mirrors api.md "Scope" and pipeline.md "Registration" (scope handles), "Views" and
"Middleware chains". ``restrict``: test_scope_restrict.py.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, cast

import pytest

import toolrail as tr
from helpers import Changes, call, exactly, raw_tool
from scope_helpers import assert_unknown, global_registry, names, run

# ---- handles ------------------------------------------------------------------------


def test_a_scope_handle_carries_its_key() -> None:
    registry = tr.ToolRegistry()
    assert registry.scope("agent-1").key == "agent-1"


def test_several_handles_for_the_same_key_share_the_scopes_layer() -> None:
    registry = tr.ToolRegistry()
    first, second = registry.scope("agent"), registry.scope("agent")
    tool = raw_tool("t")

    first.register(tool)

    assert second.get("t") is tool
    assert names(second) == ["t"]
    assert registry.get("t", "agent") is tool
    with pytest.raises(ValueError, match=exactly('tool "t" is already registered in this scope')):
        second.register(raw_tool("t"))


def test_handles_for_equal_keys_share_the_layer() -> None:
    registry = tr.ToolRegistry()
    tool = raw_tool("t")
    registry.scope(("agent", 1)).register(tool)
    assert registry.scope(("agent", 1)).get("t") is tool
    assert registry.get("t", ("agent", 1)) is tool


def test_keys_without_eq_compare_by_identity() -> None:
    class Agent:
        pass

    one, two = Agent(), Agent()
    registry = tr.ToolRegistry()
    tool = raw_tool("t")
    registry.scope(one).register(tool)

    assert registry.get("t", one) is tool
    assert registry.get("t", two) is None
    assert registry.scope(two).get("t") is None


def test_each_handle_owns_only_what_was_registered_through_it() -> None:
    registry = global_registry("g1", "g2")
    first, second = registry.scope("agent"), registry.scope("agent")
    first.register(raw_tool("a"))
    second.register(raw_tool("b"))
    second.restrict(deny=["g1"])
    first.restrict(deny=["g2"])

    first.close()

    assert names(second) == ["b", "g2"]
    assert second.get("a") is None
    second.close()
    assert names(registry, "agent") == ["g1", "g2"]


def test_close_disposes_everything_registered_through_the_handle() -> None:
    registry = global_registry("g")
    calls: list[str] = []
    scope = registry.scope("agent")
    scope.register(raw_tool("s"))
    scope.restrict(allow=[])

    def guard(execution: tr.Execution) -> None:
        calls.append("guard")

    scope.guard(guard)
    scope.on_change(lambda: calls.append("change"))

    scope.close()

    assert names(registry, "agent") == ["g"]
    assert registry.get("s", "agent") is None
    calls.clear()
    registry.register(raw_tool("later"))
    assert calls == []


async def test_close_disposes_middleware_and_observers_of_the_handle() -> None:
    registry = global_registry("t")
    seen: list[str] = []
    scope = registry.scope("agent")

    async def pre(execution: tr.Execution, call_next: Callable[[], Awaitable[Any]]) -> Any:
        seen.append("pre")
        return await call_next()

    async def around(execution: tr.Execution, call_next: Callable[[], Awaitable[Any]]) -> Any:
        seen.append("around")
        return await call_next()

    async def post(
        execution: tr.Execution, result: tr.ToolResult, call_next: Callable[[], Awaitable[Any]]
    ) -> Any:
        seen.append("post")
        return await call_next()

    def observe(execution: tr.Execution, result: tr.ToolResult) -> None:
        seen.append("observe")

    scope.pre_execute(pre)
    scope.around_execute(around, all_scopes=True)
    scope.post_execute(post)
    scope.on_result(observe, all_scopes=True)

    await run(scope, call("t"))
    assert seen == ["pre", "around", "post", "observe"]

    scope.close()
    seen.clear()
    await run(scope, call("t"))
    await run(registry, call("t"))
    assert seen == []


def test_close_disposes_newest_first() -> None:
    registry = global_registry("g")
    scope = registry.scope("agent")
    seen: list[list[str]] = []
    scope.on_change(lambda: seen.append(names(registry, "agent")))
    scope.register(raw_tool("a"))
    scope.register(raw_tool("b"))
    scope.restrict(deny=["g"])
    scope.register(raw_tool("c"))
    seen.clear()

    scope.close()

    # c removed, then the restriction lifted, then b, then a; the listener (oldest) last
    assert seen == [["a", "b"], ["a", "b", "g"], ["a", "g"], ["g"]]


def test_close_skips_registrations_already_disposed_by_their_own_disposer() -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")
    dispose_a = scope.register(raw_tool("a"))
    scope.register(raw_tool("b"))
    dispose_a()
    changes = Changes()
    registry.on_change(changes)

    scope.close()

    assert changes.count == 1
    assert dispose_a.disposed is True


def test_close_is_idempotent() -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")
    scope.register(raw_tool("a"))
    changes = Changes()
    registry.on_change(changes)

    scope.close()
    scope.close()
    scope.close()

    assert changes.count == 1
    assert scope.get("a") is None


def test_disposers_returned_through_a_scope_are_disposed_by_close() -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")
    disposers = [
        scope.register(raw_tool("a")),
        scope.guard(lambda execution: None),
        scope.on_change(lambda: None),
        scope.pre_execute(lambda execution, call_next: call_next()),
    ]
    assert [d.disposed for d in disposers] == [False] * 4
    scope.close()
    assert [d.disposed for d in disposers] == [True] * 4


def test_close_disposes_everything_then_raises_the_first_exception() -> None:
    registry = global_registry("g")
    scope = registry.scope("agent")
    scope.register(raw_tool("a"))
    scope.register(raw_tool("b"))
    scope.restrict(deny=["g"])
    errors: list[RuntimeError] = []

    def fail() -> None:
        errors.append(RuntimeError(f"listener failure {len(errors) + 1}"))
        raise errors[-1]

    registry.on_change(fail)

    with pytest.raises(RuntimeError) as info:
        scope.close()

    assert len(errors) == 3
    assert info.value is errors[0]
    assert names(registry, "agent") == ["g"]
    assert registry.scopes() == []
    scope.close()  # nothing left: no notification, no error
    assert len(errors) == 3


def test_a_scope_is_a_context_manager_that_closes_on_exit() -> None:
    registry = global_registry("g")
    with registry.scope("agent") as scope:
        assert isinstance(scope, tr.Scope)
        scope.register(raw_tool("s"))
        scope.restrict(deny=["g"])
        assert names(scope) == ["s"]
    assert names(registry, "agent") == ["g"]
    assert registry.scopes() == []


def test_a_scope_context_manager_closes_when_the_block_raises_and_lets_it_propagate() -> None:
    registry = tr.ToolRegistry()

    def use_scope() -> None:
        with registry.scope("agent") as scope:
            scope.register(raw_tool("s"))
            raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        use_scope()
    assert registry.get("s", "agent") is None


def test_enter_returns_the_scope_handle_itself() -> None:
    registry = tr.ToolRegistry()
    handle = registry.scope("agent")
    with handle as entered:
        assert entered is handle


def test_an_empty_scope_leaves_no_trace_after_close() -> None:
    registry = global_registry("g")
    scope = registry.scope("agent")
    scope.register(raw_tool("s"))
    scope.restrict(allow=["g"])
    scope.guard(lambda execution: None)
    scope.pre_execute(lambda execution, call_next: call_next())
    scope.around_execute(lambda execution, call_next: call_next())
    scope.post_execute(lambda execution, result, call_next: call_next())
    scope.on_result(lambda execution, result: None)
    scope.on_change(lambda: None)

    scope.close()

    assert registry.scopes() == []
    assert registry.schemas("agent") == registry.schemas()


def test_a_scope_whose_registrations_were_each_disposed_leaves_no_trace() -> None:
    registry = global_registry("g")
    scope = registry.scope("agent")
    disposers = [
        scope.register(raw_tool("s")),
        scope.restrict(deny=["g"]),
        scope.guard(lambda execution: None),
        scope.on_result(lambda execution, result: None),
    ]
    for disposer in disposers:
        disposer()
    assert registry.scopes() == []


def test_handles_views_and_failed_registrations_leave_no_trace() -> None:
    registry = global_registry("g")
    scope = registry.scope("agent")
    scope.get("g")
    scope.schemas()
    scope.execution_mode(call("g"))
    registry.schemas("ghost")
    registry.get("g", "ghost")
    with pytest.raises(TypeError):
        scope.register(cast(Any, 1))
    with pytest.raises(ValueError, match=re.escape("no-op")):
        scope.restrict()
    with pytest.raises(ValueError, match=re.escape("unknown global tool")):
        scope.restrict(allow=["nope"])
    assert registry.scopes() == []


async def test_executing_in_an_unknown_scope_leaves_no_trace() -> None:
    registry = global_registry("g")
    result = await run(registry, call("g", scope="ghost"))
    assert result.is_error is False
    result = await run(registry.scope("other"), call("g"))
    assert result.is_error is False
    assert registry.scopes() == []


# ---- flat scopes and shadowing ------------------------------------------------------


async def test_scopes_are_flat_and_never_see_another_scopes_tools() -> None:
    registry = global_registry("g")
    registry.scope("a").register(raw_tool("only_a", concurrency_safe=True))
    b = registry.scope("b")

    assert b.get("only_a") is None
    assert names(b) == ["g"]
    assert registry.get("only_a") is None
    assert names(registry) == ["g"]
    assert b.execution_mode(call("only_a")) is tr.ExecutionMode.EXCLUSIVE
    assert_unknown(await run(b, call("only_a")), "only_a")
    assert_unknown(await run(registry, call("only_a")), "only_a")


async def test_scoped_tool_shadows_global_tool_only_in_its_scope() -> None:
    async def scoped_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        return "scoped"

    async def global_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        return "global"

    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", execute=global_body, description="global"))
    scope = registry.scope("agent")
    scoped = raw_tool("t", execute=scoped_body, description="scoped")
    scope.register(scoped)

    assert scope.get("t") is scoped
    assert [s.description for s in scope.schemas()] == ["scoped"]
    assert [s.description for s in registry.schemas()] == ["global"]
    assert [s.description for s in registry.schemas("other")] == ["global"]
    assert (await run(scope, call("t"))).text == "scoped"
    assert (await run(registry, call("t", scope="agent"))).text == "scoped"
    assert (await run(registry, call("t"))).text == "global"
    assert (await run(registry, call("t", scope="other"))).text == "global"


def test_disposing_a_shadowing_tool_uncovers_the_global_one() -> None:
    registry = tr.ToolRegistry()
    global_tool = raw_tool("t")
    registry.register(global_tool)
    dispose = registry.scope("agent").register(raw_tool("t"))
    dispose()
    assert registry.get("t", "agent") is global_tool


def test_a_global_registered_after_the_scoped_tool_stays_shadowed_in_that_scope() -> None:
    registry = tr.ToolRegistry()
    scoped = raw_tool("t")
    registry.scope("agent").register(scoped)
    registry.register(raw_tool("t"))
    assert registry.get("t", "agent") is scoped
    assert len(registry.schemas("agent")) == 1


# ---- views bound to the scope -------------------------------------------------------


def test_scope_views_equal_the_registry_views_for_that_key() -> None:
    registry = global_registry("g", "h")
    scope = registry.scope("agent")
    local = raw_tool("local", concurrency_safe=True)
    scope.register(local)
    scope.restrict(deny=["h"])

    assert scope.get("local") is local
    assert scope.get("local") is registry.get("local", "agent")
    assert scope.get("h") is None
    assert scope.schemas() == registry.schemas("agent")
    assert names(scope) == ["g", "local"]
    assert scope.schemas() is not scope.schemas()
    assert scope.execution_mode(call("local")) is tr.ExecutionMode.PARALLEL
    assert registry.execution_mode(call("local")) is tr.ExecutionMode.EXCLUSIVE


def test_scope_execution_mode_accepts_a_call_that_names_this_scope() -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")
    scope.register(raw_tool("local", concurrency_safe=True))
    assert scope.execution_mode(call("local", scope="agent")) is tr.ExecutionMode.PARALLEL


def test_scope_execution_mode_of_another_scopes_call_is_exclusive() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("g", concurrency_safe=True))
    registry.scope("other").register(raw_tool("theirs", concurrency_safe=True))
    scope = registry.scope("agent")

    assert scope.execution_mode(call("g", scope="other")) is tr.ExecutionMode.EXCLUSIVE
    assert scope.execution_mode(call("theirs", scope="other")) is tr.ExecutionMode.EXCLUSIVE
    assert scope.execution_mode(call("g")) is tr.ExecutionMode.PARALLEL


def test_scope_execution_mode_never_raises() -> None:
    class Hostile:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("no equality")

        def __ne__(self, other: object) -> bool:
            raise RuntimeError("no inequality")

        def __hash__(self) -> int:
            raise RuntimeError("no hash")

    def classifier(arguments: tr.JsonValue) -> bool:
        raise RuntimeError("classifier broke")

    registry = tr.ToolRegistry()
    registry.register(raw_tool("g", concurrency_safe=True))
    registry.register(raw_tool("c", concurrency_safe=classifier))
    scope = registry.scope("agent")

    assert scope.execution_mode(call("g", scope=Hostile())) is tr.ExecutionMode.EXCLUSIVE
    assert scope.execution_mode(call("c")) is tr.ExecutionMode.EXCLUSIVE
    assert scope.execution_mode(cast(Any, "not a call")) is tr.ExecutionMode.EXCLUSIVE


async def test_scope_execute_binds_an_unscoped_call_to_the_scope() -> None:
    seen: list[Hashable | None] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        seen.append(ctx.scope)
        return "ok"

    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", execute=body))
    observed: list[Hashable | None] = []
    registry.on_result(lambda execution, result: observed.append(execution.scope))
    scope = registry.scope("agent")

    result = await run(scope, call("t"))

    assert result.is_error is False
    assert seen == ["agent"]
    assert observed == ["agent"]


async def test_scope_execute_accepts_a_call_that_names_this_scope() -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")
    scope.register(raw_tool("local"))
    result = await run(scope, call("local", scope="agent"))
    assert result.is_error is False


async def test_scope_execute_of_a_call_naming_another_scope_raises_value_error() -> None:
    ran = False

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        nonlocal ran
        ran = True
        return "ran"

    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", execute=body))
    observed: list[str] = []
    registry.on_result(lambda execution, result: observed.append(execution.call_id))
    scope = registry.scope("agent")

    with pytest.raises(ValueError):  # noqa: PT011 - the spec fixes no message
        await run(scope, call("t", scope="other"))

    assert ran is False
    assert observed == []


async def test_scope_run_with_a_call_naming_another_scope_raises_value_error() -> None:
    registry = global_registry("t")
    scope = registry.scope("agent")
    with pytest.raises(ValueError):  # noqa: PT011 - the spec fixes no message
        await asyncio.wait_for(scope.run([call("t", scope="other")]), 5)


async def test_scope_stream_with_a_call_naming_another_scope_raises_value_error() -> None:
    # The spec does not say whether stream() raises at the call or at the first step;
    # either is accepted here.
    registry = global_registry("t")
    scope = registry.scope("agent")

    async def first_commit() -> None:
        stream = scope.stream([call("t", scope="other")])
        try:
            await asyncio.wait_for(anext(stream), 5)
        finally:
            await stream.aclose()

    with pytest.raises(ValueError):  # noqa: PT011 - the spec fixes no message
        await first_commit()


# ---- middleware, observers and guards through a scope -------------------------------


async def test_scope_middleware_and_observers_see_only_that_scopes_calls() -> None:
    registry = global_registry("t")
    seen: list[tuple[str, str]] = []
    a = registry.scope("a")

    async def pre(execution: tr.Execution, call_next: Callable[[], Awaitable[Any]]) -> Any:
        seen.append(("pre", execution.call_id))
        return await call_next()

    async def around(execution: tr.Execution, call_next: Callable[[], Awaitable[Any]]) -> Any:
        seen.append(("around", execution.call_id))
        return await call_next()

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: Callable[[], Any]) -> Any:
        seen.append(("post", execution.call_id))
        return call_next()

    def observe(execution: tr.Execution, result: tr.ToolResult) -> None:
        seen.append(("observe", execution.call_id))

    a.pre_execute(pre)
    a.around_execute(around)
    a.post_execute(post)
    a.on_result(observe)

    await run(registry, call("t", call_id="global"))
    await run(registry, call("t", call_id="in-b", scope="b"))
    await run(registry.scope("b"), call("t", call_id="via-b"))
    assert seen == []

    await run(registry, call("t", call_id="in-a", scope="a"))
    await run(a, call("t", call_id="via-a"))
    await run(registry.scope("a"), call("t", call_id="via-other-handle"))
    assert seen == [
        (stage, call_id)
        for call_id in ("in-a", "via-a", "via-other-handle")
        for stage in ("pre", "around", "post", "observe")
    ]


async def test_all_scopes_lifts_the_filter_but_still_closes_with_the_scope() -> None:
    registry = global_registry("t")
    seen: list[tuple[str, str]] = []
    a = registry.scope("a")

    def pre(execution: tr.Execution, call_next: Callable[[], Any]) -> Any:
        seen.append(("pre", execution.call_id))
        return call_next()

    def around(execution: tr.Execution, call_next: Callable[[], Any]) -> Any:
        seen.append(("around", execution.call_id))
        return call_next()

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: Callable[[], Any]) -> Any:
        seen.append(("post", execution.call_id))
        return call_next()

    def observe(execution: tr.Execution, result: tr.ToolResult) -> None:
        seen.append(("observe", execution.call_id))

    a.pre_execute(pre, all_scopes=True)
    a.around_execute(around, all_scopes=True)
    a.post_execute(post, all_scopes=True)
    a.on_result(observe, all_scopes=True)

    for call_id, scope in (("global", None), ("in-a", "a"), ("in-b", "b")):
        await run(registry, call("t", call_id=call_id, scope=scope))
    assert seen == [
        (stage, call_id)
        for call_id in ("global", "in-a", "in-b")
        for stage in ("pre", "around", "post", "observe")
    ]

    a.close()
    seen.clear()
    for call_id, scope in (("global", None), ("in-a", "a"), ("in-b", "b")):
        await run(registry, call("t", call_id=call_id, scope=scope))
    assert seen == []


async def test_unscoped_calls_reach_only_registry_level_and_all_scopes_listeners() -> None:
    registry = global_registry("t")
    seen: list[str] = []
    registry.on_result(lambda execution, result: seen.append("registry"))
    registry.scope("a").on_result(lambda execution, result: seen.append("a"))
    registry.scope("b").on_result(lambda execution, result: seen.append("b-all"), all_scopes=True)
    registry.scope("c").on_result(lambda execution, result: seen.append("c"))

    await run(registry, call("t"))

    assert seen == ["registry", "b-all"]


async def test_registry_level_listeners_see_every_scopes_calls() -> None:
    registry = global_registry("t")
    seen: list[Hashable | None] = []
    registry.on_result(lambda execution, result: seen.append(execution.scope))
    await run(registry, call("t"))
    await run(registry, call("t", scope="a"))
    await run(registry.scope("b"), call("t"))
    assert seen == [None, "a", "b"]


async def test_chains_interleave_registry_and_scope_registrations_in_order() -> None:
    registry = global_registry("t")
    a, b = registry.scope("a"), registry.scope("b")
    order: dict[str, list[str]] = {"pre": [], "around": [], "post": [], "observe": []}

    def pre(label: str) -> Callable[[tr.Execution, Callable[[], Any]], Any]:
        def middleware(execution: tr.Execution, call_next: Callable[[], Any]) -> Any:
            order["pre"].append(label)
            return call_next()

        return middleware

    def around(label: str) -> Callable[[tr.Execution, Callable[[], Any]], Any]:
        def middleware(execution: tr.Execution, call_next: Callable[[], Any]) -> Any:
            order["around"].append(label)
            return call_next()

        return middleware

    def post(label: str) -> Callable[[tr.Execution, tr.ToolResult, Callable[[], Any]], Any]:
        def middleware(
            execution: tr.Execution, result: tr.ToolResult, call_next: Callable[[], Any]
        ) -> Any:
            order["post"].append(label)
            return call_next()

        return middleware

    def observe(label: str) -> Callable[[tr.Execution, tr.ToolResult], None]:
        def observer(execution: tr.Execution, result: tr.ToolResult) -> None:
            order["observe"].append(label)

        return observer

    registry.pre_execute(pre("R1"))
    registry.around_execute(around("R1"))
    registry.post_execute(post("R1"))
    registry.on_result(observe("R1"))
    a.pre_execute(pre("A1"))
    a.around_execute(around("A1"))
    a.post_execute(post("A1"))
    a.on_result(observe("A1"))
    registry.pre_execute(pre("R2"))
    registry.around_execute(around("R2"))
    registry.post_execute(post("R2"))
    registry.on_result(observe("R2"))
    b.pre_execute(pre("B1"))
    b.around_execute(around("B1"))
    b.post_execute(post("B1"))
    b.on_result(observe("B1"))
    a.pre_execute(pre("A2"), prepend=True)
    a.around_execute(around("A2"), prepend=True)
    a.post_execute(post("A2"), prepend=True)
    a.on_result(observe("A2"), prepend=True)
    a.pre_execute(pre("A3"), all_scopes=True)
    a.around_execute(around("A3"), all_scopes=True)
    a.post_execute(post("A3"), all_scopes=True)
    a.on_result(observe("A3"), all_scopes=True)

    async def chain_for(scope: str | None) -> dict[str, list[str]]:
        for labels in order.values():
            labels.clear()
        await run(registry, call("t", scope=scope))
        return {stage: list(labels) for stage, labels in order.items()}

    expected_a = ["A2", "R1", "A1", "R2", "A3"]
    assert await chain_for("a") == {stage: expected_a for stage in order}
    expected_b = ["R1", "R2", "B1", "A3"]
    assert await chain_for("b") == {stage: expected_b for stage in order}
    assert await chain_for(None) == {stage: ["R1", "R2", "A3"] for stage in order}

    registry.pre_execute(pre("R0"), prepend=True)
    registry.around_execute(around("R0"), prepend=True)
    registry.post_execute(post("R0"), prepend=True)
    registry.on_result(observe("R0"), prepend=True)
    assert await chain_for("a") == {stage: ["R0", *expected_a] for stage in order}
    assert await chain_for("b") == {stage: ["R0", *expected_b] for stage in order}

    b.pre_execute(pre("B0"), prepend=True, all_scopes=True)
    b.around_execute(around("B0"), prepend=True, all_scopes=True)
    b.post_execute(post("B0"), prepend=True, all_scopes=True)
    b.on_result(observe("B0"), prepend=True, all_scopes=True)
    assert await chain_for(None) == {stage: ["B0", "R0", "R1", "R2", "A3"] for stage in order}


async def test_guards_run_all_global_guards_first_then_the_scopes() -> None:
    registry = global_registry("t")
    a, b = registry.scope("a"), registry.scope("b")
    order: list[str] = []

    def guard(label: str) -> Callable[[tr.Execution], str | None]:
        def check(execution: tr.Execution) -> str | None:
            order.append(label)
            return None

        return check

    registry.guard(guard("G1"))
    a.guard(guard("A1"))
    b.guard(guard("B1"))
    registry.guard(guard("G2"))
    registry.scope("a").guard(guard("A2"))
    registry.guard(guard("G3"))

    await run(registry, call("t", scope="a"))
    assert order == ["G1", "G2", "G3", "A1", "A2"]

    order.clear()
    await run(b, call("t"))
    assert order == ["G1", "G2", "G3", "B1"]

    order.clear()
    await run(registry, call("t"))
    assert order == ["G1", "G2", "G3"]


async def test_a_scope_guard_denies_only_that_scopes_calls() -> None:
    registry = global_registry("t")
    registry.scope("a").guard(lambda execution: "not in a")

    denied = await run(registry, call("t", scope="a"))
    assert denied.error == tr.ErrorInfo("not in a", "DENIED")
    assert denied.content == (tr.TextContent("Error: not in a"),)

    assert (await run(registry, call("t", scope="b"))).is_error is False
    assert (await run(registry, call("t"))).is_error is False


async def test_a_global_guard_denial_stops_the_scope_guards() -> None:
    registry = global_registry("t")
    order: list[str] = []

    def global_guard(execution: tr.Execution) -> str | None:
        order.append("global")
        return "global says no"

    def scope_guard(execution: tr.Execution) -> str | None:
        order.append("scope")
        return None

    registry.scope("a").guard(scope_guard)
    registry.guard(global_guard)

    result = await run(registry, call("t", scope="a"))

    assert order == ["global"]
    assert result.error == tr.ErrorInfo("global says no", "DENIED")


async def test_scope_on_change_hears_every_change_and_closes_with_the_scope() -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("a")
    heard = Changes()
    scope.on_change(heard)
    registry.register(raw_tool("g"))
    registry.scope("b").register(raw_tool("s"))
    assert heard.count == 2
    scope.close()
    registry.register(raw_tool("h"))
    assert heard.count == 2
