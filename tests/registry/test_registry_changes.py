"""ToolRegistry: change notifications and disposers (spec: pipeline.md "Registration",
api.md "ToolRegistry", "Disposer")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import toolrail as tr
from helpers import Changes, call, exactly, execute, names, raw_tool


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
