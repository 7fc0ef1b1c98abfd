"""The execute pipeline (spec: pipeline.md, "Execute"): reading the call (stage 1), the
argument snapshot (stage 2), the invalid returns of every stage, and what holds for every
error result the registry builds.

Each later stage has its own file: test_pipeline_pre_execute.py, test_pipeline_approval.py,
test_pipeline_guards.py, test_pipeline_around.py, test_pipeline_body.py,
test_pipeline_post_execute.py, test_pipeline_materialize.py (materialize and finalize
content) and test_pipeline_observers.py. Timeouts and cancellation live in
tests/cancellation/; here a call's signal only appears where a stage hands it on (the
approver, around-execute, the body).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import pickle
from typing import Any, cast

import pytest

import toolrail as tr
from helpers import (
    GUARD_HINT,
    AroundNext,
    BadRepr,
    Finalizer,
    NamedGuard,
    PostNext,
    PreNext,
    Recorder,
    asking,
    assert_error,
    assert_final_error,
    assign,
    install_every_stage,
    make_call,
    make_tool,
    raises_attribute_error,
    recording_body,
    returning,
)

# ---- stage 1: read the call ---------------------------------------------------------


async def test_each_call_mints_a_fresh_token_that_every_stage_and_the_body_share(
    registry: tr.ToolRegistry,
) -> None:
    tokens: dict[str, list[tr.ExecutionToken]] = {}

    def seen(stage: str, execution: tr.Execution) -> None:
        tokens.setdefault(stage, []).append(execution.token)

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        seen("body", ctx)
        return "ok"

    def finalize(execution: tr.Execution, result: tr.ToolResult) -> None:
        seen("finalize", execution)

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        seen("pre", execution)
        return await call_next()

    def guard(execution: tr.Execution) -> None:
        seen("guard", execution)

    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        seen("around", execution)
        return await call_next()

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        seen("post", execution)
        return tr.Accept()

    registry.register(make_tool(execute=body, finalize_content=finalize))
    registry.pre_execute(pre)
    registry.guard(guard)
    registry.around_execute(around)
    registry.post_execute(post)
    registry.on_result(lambda execution, result: seen("observer", execution))

    await registry.execute(make_call(call_id="first"))
    await registry.execute(make_call(call_id="second"))

    stages = ["pre", "guard", "around", "body", "post", "finalize", "observer"]
    assert sorted(tokens) == sorted(stages)
    first, second = tokens["pre"]
    assert first is not second
    for stage in stages:
        assert tokens[stage][0] is first, stage
        assert tokens[stage][1] is second, stage


async def test_execution_token_compares_by_identity_only_and_is_hashable(
    registry: tr.ToolRegistry,
) -> None:
    tokens: list[tr.ExecutionToken] = []
    registry.register(make_tool())
    registry.on_result(lambda execution, result: tokens.append(execution.token))

    await registry.execute(make_call(call_id="same"))
    await registry.execute(make_call(call_id="same"))

    first, second = tokens
    assert first == first
    assert first != second
    assert first != object()
    assert {first: 1, second: 2}[first] == 1
    assert len({first, second}) == 2


async def test_execution_token_is_never_serialized(registry: tr.ToolRegistry) -> None:
    tokens: list[tr.ExecutionToken] = []
    registry.register(make_tool())
    registry.on_result(lambda execution, result: tokens.append(execution.token))
    await registry.execute(make_call())

    with pytest.raises(TypeError):
        json.dumps(tokens[0])
    with pytest.raises((TypeError, pickle.PicklingError)):
        pickle.dumps(tokens[0])


async def test_execution_carries_the_calls_fields_and_its_signal(
    registry: tr.ToolRegistry,
) -> None:
    seen: list[tr.Execution] = []
    controller = tr.CancelController()
    registry.register(make_tool())

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        seen.append(execution)
        return await call_next()

    registry.pre_execute(pre)
    await registry.execute(
        make_call(call_id="c7", arguments={"path": "/tmp", "n": [1, 2]}, signal=controller.signal)
    )

    (execution,) = seen
    assert execution.call_id == "c7"
    assert execution.name == "t"
    assert execution.arguments == {"path": "/tmp", "n": (1, 2)}
    assert type(execution.arguments) is tr.FrozenDict
    assert execution.scope is None
    assert execution.parent is None
    assert execution.signal is controller.signal


async def test_a_call_without_a_signal_gets_a_never_cancelled_signal(
    registry: tr.ToolRegistry,
) -> None:
    seen: list[tr.CancelSignal] = []
    registry.register(make_tool())
    registry.on_result(lambda execution, result: seen.append(execution.signal))

    await registry.execute(make_call())

    (signal,) = seen
    assert isinstance(signal, tr.CancelSignal)
    assert signal.cancelled is False


async def test_a_nested_call_names_the_enclosing_calls_token_as_its_parent(
    registry: tr.ToolRegistry,
) -> None:
    executions: dict[str, tr.Execution] = {}

    async def outer(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        inner = await registry.execute(make_call("inner", call_id="in", parent=ctx.token))
        return "outer:" + inner.text

    registry.register(make_tool("outer", execute=outer))
    registry.register(make_tool("inner"))
    registry.on_result(lambda execution, result: executions.update({execution.call_id: execution}))

    result = await registry.execute(make_call("outer", call_id="out"))

    assert result.value == "outer:ok"
    assert executions["in"].parent is executions["out"].token
    assert executions["out"].parent is None


async def test_stage_one_captures_finalize_content_while_dispatch_resolves_the_tool_again(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    def old_finalize(execution: tr.Execution, result: tr.ToolResult) -> list[tr.Content]:
        log("old finalize")
        return [tr.TextContent("finalized by old: " + result.text)]

    def new_finalize(execution: tr.Execution, result: tr.ToolResult) -> list[tr.Content]:
        log("new finalize")
        return [tr.TextContent("finalized by new")]

    async def old_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        log("old body")
        return "old"

    async def new_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        log("new body")
        return "new"

    dispose_old = registry.register(make_tool(execute=old_body, finalize_content=old_finalize))

    async def swap(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        dispose_old()
        registry.register(make_tool(execute=new_body, finalize_content=new_finalize))
        return await call_next()

    registry.pre_execute(swap)
    result = await registry.execute(make_call())

    assert log.events == ["new body", "old finalize"]
    assert result.value == "new"
    assert result.content == (tr.TextContent("finalized by old: new"),)


async def test_finalize_content_of_a_tool_registered_after_stage_one_does_not_run(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    def finalize(execution: tr.Execution, result: tr.ToolResult) -> list[tr.Content]:
        log("finalize")
        return [tr.TextContent("finalized")]

    async def register_late(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        registry.register(make_tool(execute=recording_body(log), finalize_content=finalize))
        return await call_next()

    registry.pre_execute(register_late)
    result = await registry.execute(make_call())

    assert log.events == ["body"]
    assert result.content == (tr.TextContent("ok"),)


async def test_dispatch_resolves_the_tool_once_before_the_around_chain_so_a_retry_runs_it_again(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    async def first(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        log("first body")
        return "first"

    async def second(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        log("second body")
        return "second"

    dispose = registry.register(make_tool(execute=first))

    async def swap_then_retry(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        dispose()
        registry.register(make_tool(execute=second))
        await call_next()
        return await call_next()

    registry.around_execute(swap_then_retry)
    result = await registry.execute(make_call())

    assert log.events == ["first body", "first body"]
    assert result.value == "first"


# ---- stage 2: snapshot the arguments ------------------------------------------------


NOT_LOSSLESS = [
    {"when": dt.datetime(2024, 1, 1)},
    {"tags": {"a", "b"}},
    {"ratio": float("nan")},
    {1: "non-str key"},
    [object()],
]


@pytest.mark.parametrize("arguments", NOT_LOSSLESS)
async def test_arguments_that_are_not_lossless_json_are_a_final_error(
    registry: tr.ToolRegistry, log: Recorder, arguments: Any
) -> None:
    registry.register(make_tool(execute=recording_body(log)))
    install_every_stage(registry, log)

    result = await registry.execute(make_call(arguments=arguments))

    assert_final_error(result, "tool call arguments must be losslessly JSON-serializable")
    assert log.events == ["observer"]


async def test_observers_and_finalize_content_see_missing_arguments_after_a_failed_snapshot(
    registry: tr.ToolRegistry,
) -> None:
    seen: list[object] = []

    def finalize(execution: tr.Execution, result: tr.ToolResult) -> None:
        seen.append(execution.arguments)

    registry.register(make_tool(finalize_content=finalize))
    registry.on_result(lambda execution, result: seen.append(execution.arguments))

    await registry.execute(make_call(arguments={"tags": {"a"}}))

    assert len(seen) == 2
    assert seen[0] is tr.MISSING
    assert seen[1] is tr.MISSING


async def test_arguments_are_snapshotted_once_so_later_mutation_does_not_reach_the_body(
    registry: tr.ToolRegistry,
) -> None:
    raw: dict[str, Any] = {"path": "/safe", "items": [1]}
    received: list[tr.JsonValue] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        received.append(arguments)
        return "ok"

    def mutate(execution: tr.Execution) -> None:
        raw["path"] = "/etc/passwd"
        raw["items"].append(2)

    registry.register(make_tool(execute=body))
    registry.guard(mutate)
    await registry.execute(make_call(arguments=raw))

    assert received == [{"path": "/safe", "items": (1,)}]
    assert type(received[0]) is tr.FrozenDict


# ---- every stage: an invalid return whose repr fails is named by its type ----------


def returning_bad_repr(stage: str) -> tr.ToolRegistry:
    """A registry whose ``stage`` returns (or is) a value whose ``repr`` fails."""
    if stage == "approver":
        registry = tr.ToolRegistry(approver=lambda request: cast(Any, BadRepr()))
        registry.register(make_tool())
        registry.pre_execute(asking())
        return registry
    registry = tr.ToolRegistry()
    if stage == "finalize_content":
        registry.register(make_tool(finalize_content=Finalizer(BadRepr())))
        return registry
    registry.register(make_tool())
    if stage == "pre-execute":
        registry.pre_execute(lambda execution, call_next: BadRepr())
    elif stage == "guard":
        registry.guard(NamedGuard(BadRepr()))
    elif stage == "around-execute":
        registry.around_execute(lambda execution, call_next: BadRepr())
    else:
        assert stage == "post-execute"
        registry.post_execute(lambda execution, result, call_next: BadRepr())
    return registry


@pytest.mark.parametrize(
    ("stage", "message", "final"),
    [
        ("pre-execute", "pre-execute middleware returned <BadRepr object>, not Allow, Deny or Ask",
         True),
        ("approver", "approver returned an invalid outcome: <BadRepr object>", True),
        ("guard", f"guard NamedGuard() returned <BadRepr object>; {GUARD_HINT}", True),
        ("around-execute",
         "around-execute middleware returned <BadRepr object>, not a ToolResult", True),
        ("post-execute",
         "post-execute middleware returned <BadRepr object>, not Accept or Block", True),
        ("finalize_content",
         "finalize_content returned <BadRepr object>, not None or a sequence of Content", False),
    ],
    ids=["pre-execute", "approver", "guard", "around-execute", "post-execute", "finalize_content"],
)
async def test_an_invalid_return_whose_repr_fails_is_named_by_its_type(
    stage: str, message: str, final: bool
) -> None:
    result = await returning_bad_repr(stage).execute(make_call())

    if final:
        assert_final_error(result, message)
    else:
        assert_error(result, message)


# ---- every error result the registry builds -----------------------------------------


async def test_execute_never_raises_for_failures_of_every_stage_and_each_is_an_error_text_block(
    log: Recorder,
) -> None:
    """One registry whose every stage misbehaves for some call id."""

    def fails(where: str, execution: tr.Execution) -> bool:
        return execution.call_id == where

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        if ctx.call_id == "body":
            raise RuntimeError("body")
        return {"bad": {1}} if ctx.call_id == "output" else "ok"

    registry = tr.ToolRegistry(approver=lambda request: "maybe")
    registry.register(make_tool(execute=body))
    registry.pre_execute(
        lambda e, n: tr.Ask() if fails("approver", e) else (5 if fails("pre", e) else n())
    )
    registry.guard(lambda e: cast(Any, 7) if fails("guard", e) else None)
    registry.around_execute(lambda e, n: "x" if fails("around", e) else n())
    registry.post_execute(
        lambda e, r, n: tr.Accept(value=1, content="c") if fails("post", e) else n()
    )

    expected = {
        "approver": "approver returned an invalid outcome: 'maybe'",
        "pre": "pre-execute middleware returned 5, not Allow, Deny or Ask",
        "around": "around-execute middleware returned 'x', not a ToolResult",
        "post": "post-execute Accept cannot replace both value and content",
        "body": "body",
    }
    for call_id, message in expected.items():
        result = await registry.execute(make_call(call_id=call_id))
        assert result.is_error is True, call_id
        assert result.error is not None
        assert result.error.message == message
        assert result.content == (tr.TextContent("Error: " + message),)
    guard = await registry.execute(make_call(call_id="guard"))
    assert guard.content == (tr.TextContent("Error: " + cast(tr.ErrorInfo, guard.error).message),)
    output = await registry.execute(make_call(call_id="output"))
    assert output.content == (tr.TextContent("Error: " + cast(tr.ErrorInfo, output.error).message),)
    assert cast(tr.ErrorInfo, output.error).code == "INVALID_TOOL_OUTPUT"


async def test_results_are_immutable(registry: tr.ToolRegistry) -> None:
    registry.register(make_tool(execute=returning({"a": [1]})))
    result = await registry.execute(make_call())

    assert raises_attribute_error(lambda: assign(result, "value", None))
    with pytest.raises(TypeError):
        cast(tr.FrozenDict, result.value)["b"] = 2
    assert copy.deepcopy(result.value) is result.value
