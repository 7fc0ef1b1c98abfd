"""The execute pipeline, stage 4: the pre-execute chain (spec: pipeline.md, "Stages",
"Middleware chains").

The other stages have their own files: test_pipeline.py (reading the call, the argument
snapshot, every error result), test_pipeline_approval.py, test_pipeline_guards.py,
test_pipeline_around.py, test_pipeline_body.py, test_pipeline_post_execute.py,
test_pipeline_materialize.py and test_pipeline_observers.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

import toolrail as tr
from helpers import (
    PreNext,
    Reason,
    Recorder,
    Unprintable,
    assert_error,
    assert_final_error,
    install_every_stage,
    make_call,
    make_tool,
    nesting,
    recording_body,
)

# ---- stage 4: pre-execute -----------------------------------------------------------


async def test_the_innermost_pre_execute_decision_is_allow(registry: tr.ToolRegistry) -> None:
    decisions: list[tr.PreDecision] = []

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        decision = await call_next()
        decisions.append(decision)
        return decision

    registry.register(make_tool())
    registry.pre_execute(pre)
    result = await registry.execute(make_call())

    assert decisions == [tr.Allow()]
    assert result.value == "ok"
    assert result.is_error is False


async def test_pre_execute_chain_runs_outermost_first_in_registration_order(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    registry.register(make_tool(execute=recording_body(log)))
    registry.pre_execute(nesting(log, "a"))
    registry.pre_execute(nesting(log, "b"))
    registry.pre_execute(nesting(log, "c"))
    await registry.execute(make_call())

    assert log.events == ["a>", "b>", "c>", "c<", "b<", "a<", "body"]


async def test_pre_execute_prepend_puts_the_middleware_first(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    def wrapper(label: str) -> Callable[[tr.Execution, PreNext], Awaitable[tr.PreDecision]]:
        async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
            log(label)
            return await call_next()

        return pre

    registry.register(make_tool())
    registry.pre_execute(wrapper("a"))
    registry.pre_execute(wrapper("b"))
    registry.pre_execute(wrapper("first"), prepend=True)
    await registry.execute(make_call())

    assert log.events == ["first", "a", "b"]


async def test_pre_execute_chain_interleaves_registry_and_scope_registrations_in_order(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    def wrapper(label: str) -> Callable[[tr.Execution, PreNext], Awaitable[tr.PreDecision]]:
        async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
            log(f"{label}:{execution.call_id}")
            return await call_next()

        return pre

    registry.register(make_tool())
    scope = registry.scope("agent")
    registry.pre_execute(wrapper("g1"))
    scope.pre_execute(wrapper("s1"))
    registry.pre_execute(wrapper("g2"))
    scope.pre_execute(wrapper("s0"), prepend=True)
    registry.scope("other").pre_execute(wrapper("other"))

    await scope.execute(make_call(call_id="scoped"))
    await registry.execute(make_call(call_id="global"))

    assert log.events == [
        "s0:scoped", "g1:scoped", "s1:scoped", "g2:scoped",
        "g1:global", "g2:global",
    ]  # fmt: skip


async def test_scope_pre_execute_with_all_scopes_sees_every_call(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        log(f"pre:{execution.scope}")
        return await call_next()

    registry.register(make_tool())
    registry.scope("agent").pre_execute(pre, all_scopes=True)
    await registry.execute(make_call())
    await registry.scope("elsewhere").execute(make_call())

    assert log.events == ["pre:None", "pre:elsewhere"]


async def test_sync_and_async_pre_execute_middleware_are_both_accepted(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    def sync_pass(execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        log("sync")
        return call_next()

    async def async_pass(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        log("async")
        return await call_next()

    def sync_deny(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        log("deny")
        return tr.Deny("sync says no")

    registry.register(make_tool(execute=recording_body(log)))
    registry.pre_execute(sync_pass)
    registry.pre_execute(async_pass)
    allowed = await registry.execute(make_call())
    registry.pre_execute(sync_deny)
    denied = await registry.execute(make_call())

    assert allowed.value == "ok"
    assert_error(denied, "sync says no", "DENIED")
    assert log.events == ["sync", "async", "body", "sync", "async", "deny"]


async def test_pre_execute_call_next_awaited_twice_runs_the_rest_of_the_chain_again(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    async def twice(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        first = await call_next()
        second = await call_next()
        log(f"{type(first).__name__},{type(second).__name__}")
        return second

    async def inner(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        log("inner")
        return await call_next()

    def innermost(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        log("innermost")
        return tr.Ask("check") if len(log.events) > 2 else tr.Allow()

    registry.register(make_tool(execute=recording_body(log)))
    registry.pre_execute(twice)
    registry.pre_execute(inner)
    registry.pre_execute(innermost)
    result = await registry.execute(make_call())

    assert log.events == ["inner", "innermost", "inner", "innermost", "Allow,Ask"]
    assert_error(result, "check", "DENIED")  # the second decision (Ask, no approver) counts


async def test_pre_execute_deny_denies_with_its_reason_and_skips_guards_and_dispatch(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    registry.register(make_tool(execute=recording_body(log)))
    install_every_stage(registry, log)
    registry.pre_execute(lambda execution, call_next: tr.Deny("not today"))

    result = await registry.execute(make_call())

    assert_error(result, "not today", "DENIED")
    assert log.events == ["pre", "post", "observer"]


async def test_a_deny_reason_that_is_a_str_subclass_counts_as_a_str(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.pre_execute(lambda execution, call_next: tr.Deny(Reason.BUSY))

    result = await registry.execute(make_call())

    assert_error(result, "the tool is busy", "DENIED")


INVALID_PRE_RETURNS: list[Any] = [
    None,
    "allow",
    True,
    tr.Deny(cast(Any, 5)),
    tr.Deny(cast(Any, None)),
    tr.Ask(cast(Any, 5)),
    tr.Accept(),
    tr.Block("no"),
    tr.Allow,
]


@pytest.mark.parametrize("value", INVALID_PRE_RETURNS)
async def test_an_invalid_pre_execute_return_is_a_final_error(
    registry: tr.ToolRegistry, log: Recorder, value: Any
) -> None:
    registry.register(make_tool(execute=recording_body(log)))
    install_every_stage(registry, log)
    registry.pre_execute(lambda execution, call_next: value)

    result = await registry.execute(make_call())

    assert_final_error(result, f"pre-execute middleware returned {value!r}, not Allow, Deny or Ask")
    assert log.events == ["pre", "observer"]


async def test_an_invalid_async_pre_execute_return_is_a_final_error(
    registry: tr.ToolRegistry,
) -> None:
    async def pre(execution: tr.Execution, call_next: PreNext) -> Any:
        await call_next()
        return {"decision": "allow"}

    registry.register(make_tool())
    registry.pre_execute(pre)
    result = await registry.execute(make_call())

    assert_final_error(
        result, "pre-execute middleware returned {'decision': 'allow'}, not Allow, Deny or Ask"
    )


async def test_a_raising_pre_execute_middleware_is_a_final_error_with_its_message(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        raise RuntimeError("policy store is down")

    registry.register(make_tool(execute=recording_body(log)))
    install_every_stage(registry, log)
    registry.pre_execute(pre)

    result = await registry.execute(make_call())

    assert_final_error(result, "policy store is down", None, "RuntimeError")
    assert log.events == ["pre", "observer"]


@pytest.mark.parametrize(
    ("exc", "message", "code", "type_name"),
    [
        (tr.ToolError("rate limited", code="RATE_LIMITED"), "rate limited", "RATE_LIMITED",
         "ToolError"),
        (tr.ToolError("plain"), "plain", "TOOL_ERROR", "ToolError"),
        (tr.ToolNotFoundError("gone"), "gone", "UNKNOWN_TOOL", "ToolNotFoundError"),
        (ValueError(), "ValueError", None, "ValueError"),
        (Unprintable(), "<unprintable thrown value>", None, "Unprintable"),
    ],
)  # fmt: skip
async def test_an_exception_from_pre_execute_keeps_its_code_type_and_message_rule(
    registry: tr.ToolRegistry, exc: Exception, message: str, code: str | None, type_name: str
) -> None:
    def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        raise exc

    registry.register(make_tool())
    registry.pre_execute(pre)

    result = await registry.execute(make_call())

    assert_final_error(result, message, code, type_name)


async def test_the_pre_execute_chain_is_taken_as_it_stands_when_the_stage_starts(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    def late(execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        log(f"late:{execution.call_id}")
        return call_next()

    async def adds_late(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        if execution.call_id == "1":
            registry.pre_execute(late)
        return await call_next()

    registry.register(make_tool())
    registry.pre_execute(adds_late)
    await registry.execute(make_call(call_id="1"))
    await registry.execute(make_call(call_id="2"))

    assert log.events == ["late:2"]
