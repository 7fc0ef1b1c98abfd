"""``restrict``: its checks and the mask it puts over the global tools (spec: pipeline.md,
"Restrict"; api.md, "Scope")."""

from __future__ import annotations

import pytest

import toolrail as tr
from helpers import Changes, call, exactly, raw_tool
from scope_helpers import assert_unknown, global_registry, names, run

# ---- helpers ------------------------------------------------------------------------


NO_OP = "restrict() with neither allow nor deny is a no-op: pass allow and/or deny"


def unknown_error(unknown: list[str], known: str) -> str:
    noun = "tool" if len(unknown) == 1 else "tools"
    quoted = ", ".join(f'"{name}"' for name in unknown)
    return f"restrict() names unknown global {noun} {quoted}; known global tools: {known}"


# ---- restrict: the checks -----------------------------------------------------------


def test_restrict_with_neither_allow_nor_deny_raises() -> None:
    scope = global_registry("a").scope("agent")
    with pytest.raises(ValueError, match=exactly(NO_OP)):
        scope.restrict()
    with pytest.raises(ValueError, match=exactly(NO_OP)):
        scope.restrict(allow=None, deny=None)


def test_restrict_names_one_unknown_global_tool() -> None:
    scope = global_registry("b", "a").scope("agent")
    with pytest.raises(
        ValueError,
        match=exactly('restrict() names unknown global tool "x"; known global tools: a, b'),
    ):
        scope.restrict(allow=["x"])


def test_restrict_names_several_unknown_tools_allow_first_then_deny_as_given() -> None:
    scope = global_registry("b", "a").scope("agent")
    with pytest.raises(
        ValueError,
        match=exactly(
            'restrict() names unknown global tools "z", "y", "x", "w"; known global tools: a, b'
        ),
    ):
        scope.restrict(allow=["z", "a", "y"], deny=["x", "b", "w"])


def test_restrict_lists_known_tools_sorted_by_code_point() -> None:
    scope = global_registry("b", "a", "B", "_", "9").scope("agent")
    with pytest.raises(ValueError, match=exactly(unknown_error(["x"], "9, B, _, a, b"))):
        scope.restrict(deny=["x"])


def test_restrict_says_none_when_there_are_no_global_tools() -> None:
    scope = tr.ToolRegistry().scope("agent")
    with pytest.raises(
        ValueError,
        match=exactly('restrict() names unknown global tools "x", "y"; known global tools: (none)'),
    ):
        scope.restrict(allow=["x", "y"])


def test_an_empty_allow_list_with_no_globals_is_legal() -> None:
    scope = tr.ToolRegistry().scope("agent")
    scope.restrict(allow=[])
    assert scope.schemas() == []


def test_the_no_op_check_comes_before_the_unknown_name_check() -> None:
    scope = tr.ToolRegistry().scope("agent")
    with pytest.raises(ValueError, match=exactly(NO_OP)):
        scope.restrict()


def test_a_scope_local_name_that_is_not_global_is_unknown_to_restrict() -> None:
    registry = global_registry("g")
    scope = registry.scope("agent")
    scope.register(raw_tool("local"))
    with pytest.raises(ValueError, match=exactly(unknown_error(["local"], "g"))):
        scope.restrict(deny=["local"])
    with pytest.raises(ValueError, match=exactly(unknown_error(["local"], "g"))):
        scope.restrict(allow=["local"])


def test_another_scopes_tool_is_unknown_to_restrict() -> None:
    registry = global_registry("g")
    registry.scope("other").register(raw_tool("theirs"))
    with pytest.raises(ValueError, match=exactly(unknown_error(["theirs"], "g"))):
        registry.scope("agent").restrict(deny=["theirs"])


def test_a_disposed_global_is_unknown_to_restrict() -> None:
    registry = global_registry("keep")
    dispose = registry.register(raw_tool("gone"))
    dispose()
    with pytest.raises(ValueError, match=exactly(unknown_error(["gone"], "keep"))):
        registry.scope("agent").restrict(allow=["gone"])


def test_a_failed_restrict_changes_nothing_and_does_not_notify() -> None:
    registry = global_registry("a", "b")
    scope = registry.scope("agent")
    changes = Changes()
    registry.on_change(changes)
    with pytest.raises(ValueError, match=exactly(unknown_error(["nope"], "a, b"))):
        scope.restrict(allow=["a"], deny=["nope"])
    with pytest.raises(ValueError, match=exactly(NO_OP)):
        scope.restrict()
    assert changes.count == 0
    assert names(scope) == ["a", "b"]


# ---- restrict: the mask -------------------------------------------------------------


def test_allow_keeps_only_the_named_globals() -> None:
    scope = global_registry("a", "b", "c").scope("agent")
    scope.restrict(allow=["a", "c"])
    assert names(scope) == ["a", "c"]


def test_deny_removes_the_named_globals() -> None:
    scope = global_registry("a", "b", "c").scope("agent")
    scope.restrict(deny=["a", "c"])
    assert names(scope) == ["b"]


def test_allow_and_deny_together_keep_allowed_names_that_are_not_denied() -> None:
    scope = global_registry("a", "b", "c").scope("agent")
    scope.restrict(allow=["a", "b"], deny=["b"])
    assert names(scope) == ["a"]


def test_an_empty_allow_list_hides_every_global_tool() -> None:
    registry = global_registry("a", "b")
    scope = registry.scope("agent")
    local = raw_tool("local")
    scope.register(local)

    scope.restrict(allow=[])

    assert names(scope) == ["local"]
    assert scope.get("a") is None
    assert scope.get("local") is local


def test_an_empty_deny_list_is_legal_and_hides_nothing() -> None:
    scope = global_registry("a").scope("agent")
    scope.restrict(deny=[])
    assert names(scope) == ["a"]


def test_restrict_accepts_any_iterable_of_names() -> None:
    scope = global_registry("a", "b", "c").scope("agent")
    scope.restrict(allow=(name for name in ["a", "b"]), deny=iter(("b",)))
    assert names(scope) == ["a"]


def test_restrict_copies_the_lists_at_the_call() -> None:
    registry = global_registry("a", "b", "c")
    scope = registry.scope("agent")
    allow = ["a", "b"]
    deny = ["b"]
    scope.restrict(allow=allow, deny=deny)

    allow.append("c")
    allow.remove("a")
    deny.clear()

    assert names(scope) == ["a"]


def test_an_allow_list_hides_a_global_registered_later() -> None:
    registry = global_registry("a")
    scope = registry.scope("agent")
    scope.restrict(allow=["a"])

    registry.register(raw_tool("later"))

    assert names(scope) == ["a"]
    assert scope.get("later") is None
    assert names(registry) == ["a", "later"]


def test_a_deny_list_leaves_a_global_registered_later_visible() -> None:
    registry = global_registry("a")
    scope = registry.scope("agent")
    scope.restrict(deny=["a"])

    later = raw_tool("later")
    registry.register(later)

    assert names(scope) == ["later"]
    assert scope.get("later") is later


def test_an_allowed_global_that_is_disposed_and_registered_again_stays_allowed() -> None:
    registry = global_registry("b")
    dispose = registry.register(raw_tool("a"))
    scope = registry.scope("agent")
    scope.restrict(allow=["a"])
    dispose()
    assert names(scope) == []
    again = raw_tool("a")
    registry.register(again)
    assert scope.get("a") is again


def test_a_denied_global_that_is_registered_again_stays_hidden() -> None:
    registry = global_registry("b")
    dispose = registry.register(raw_tool("a"))
    scope = registry.scope("agent")
    scope.restrict(deny=["a"])
    dispose()
    registry.register(raw_tool("a"))
    assert scope.get("a") is None
    assert names(scope) == ["b"]


def test_several_restrictions_on_one_scope_intersect() -> None:
    scope = global_registry("a", "b", "c", "d").scope("agent")
    scope.restrict(allow=["a", "b", "c"])
    scope.restrict(allow=["b", "c", "d"])
    assert names(scope) == ["b", "c"]
    scope.restrict(deny=["c"])
    assert names(scope) == ["b"]


def test_restrictions_through_different_handles_of_one_scope_intersect() -> None:
    registry = global_registry("a", "b", "c")
    registry.scope("agent").restrict(deny=["a"])
    registry.scope("agent").restrict(deny=["b"])
    assert names(registry, "agent") == ["c"]


def test_each_restriction_is_lifted_by_its_own_disposer() -> None:
    scope = global_registry("a", "b", "c", "d").scope("agent")
    first = scope.restrict(allow=["a", "b", "c"])
    second = scope.restrict(deny=["a"])
    third = scope.restrict(allow=["a", "b", "d"])
    assert names(scope) == ["b"]

    second()
    assert names(scope) == ["a", "b"]
    first()
    assert names(scope) == ["a", "b", "d"]
    second()  # idempotent: does not lift another restriction
    assert names(scope) == ["a", "b", "d"]
    third()
    assert names(scope) == ["a", "b", "c", "d"]


def test_two_equal_restrictions_are_lifted_separately() -> None:
    scope = global_registry("a", "b").scope("agent")
    first = scope.restrict(deny=["a"])
    scope.restrict(deny=["a"])
    first()
    assert names(scope) == ["b"]


def test_a_restriction_masks_only_its_own_scope() -> None:
    registry = global_registry("a", "b")
    registry.scope("agent").restrict(allow=["a"])
    assert names(registry) == ["a", "b"]
    assert names(registry, "other") == ["a", "b"]
    assert registry.get("b") is not None
    assert registry.get("b", "other") is not None


def test_scope_local_tools_are_never_masked() -> None:
    registry = global_registry("t", "g")
    scope = registry.scope("agent")
    local, shadow = raw_tool("local"), raw_tool("t")
    scope.register(local)
    scope.register(shadow)

    scope.restrict(allow=["g"])
    scope.restrict(deny=["t", "g"])

    assert names(scope) == ["local", "t"]
    assert scope.get("local") is local
    assert scope.get("t") is shadow


def test_a_scoped_tool_registered_after_a_restriction_is_visible() -> None:
    registry = global_registry("g")
    scope = registry.scope("agent")
    scope.restrict(allow=[])
    local = raw_tool("local")
    scope.register(local)
    assert scope.get("local") is local
    assert names(scope) == ["local"]


def test_disposing_a_shadowing_tool_exposes_the_global_only_if_not_masked() -> None:
    registry = global_registry("t")
    scope = registry.scope("agent")
    dispose = scope.register(raw_tool("t"))
    scope.restrict(deny=["t"])
    dispose()
    assert scope.get("t") is None


async def test_a_masked_global_reads_as_absent_in_every_view_and_in_execute() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("masked", concurrency_safe=True))
    registry.register(raw_tool("kept", concurrency_safe=True))
    scope = registry.scope("agent")
    scope.restrict(deny=["masked"])

    assert scope.get("masked") is None
    assert registry.get("masked", "agent") is None
    assert names(scope) == ["kept"]
    assert names(registry, "agent") == ["kept"]
    assert scope.execution_mode(call("masked")) is tr.ExecutionMode.EXCLUSIVE
    assert registry.execution_mode(call("masked", scope="agent")) is tr.ExecutionMode.EXCLUSIVE
    assert registry.execution_mode(call("kept", scope="agent")) is tr.ExecutionMode.PARALLEL
    assert_unknown(await run(scope, call("masked")), "masked")
    assert_unknown(await run(registry, call("masked", scope="agent")), "masked")
    assert (await run(registry, call("masked"))).is_error is False


async def test_a_masked_global_does_not_run_its_body() -> None:
    ran = False

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        nonlocal ran
        ran = True
        return "ran"

    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", execute=body))
    scope = registry.scope("agent")
    scope.restrict(allow=[])

    assert_unknown(await run(scope, call("t")), "t")
    assert ran is False


async def test_a_lifted_restriction_makes_the_global_visible_again_everywhere() -> None:
    registry = global_registry("t")
    scope = registry.scope("agent")
    lift = scope.restrict(deny=["t"])
    lift()
    assert scope.get("t") is not None
    assert names(scope) == ["t"]
    assert (await run(scope, call("t"))).is_error is False
