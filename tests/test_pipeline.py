"""The execute pipeline, stage by stage (spec: pipeline.md, "Execute").

Timeouts and cancellation live in their own test module; here a call's signal only
appears where a stage hands it on (the approver, around-execute, the body).
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import enum
import gc
import inspect
import json
import logging
import pickle
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar, cast, overload

import pytest

import toolrail as tr
from helpers import PostNext, PreNext, until, within

AroundNext = Callable[[], Awaitable[tr.ToolResult]]
Body = Callable[[tr.JsonValue, tr.RunContext], Any]
T = TypeVar("T")

IMAGE = tr.ImageContent(data="aGVsbG8=", mime_type="image/png")
GUARD_HINT = "a guard returns a reason string to deny or None to abstain"


# ---- helpers ------------------------------------------------------------------------


async def ok_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
    return "ok"


def make_tool(name: str = "t", execute: Body = ok_body, **options: Any) -> tr.Tool:
    return tr.Tool(
        name=name,
        description=f"the {name} tool",
        parameters={"type": "object"},
        execute=execute,
        **options,
    )


def make_call(
    name: str = "t", call_id: str = "c1", arguments: Any = None, **fields: Any
) -> tr.ToolCall:
    return tr.ToolCall(
        call_id=call_id, name=name, arguments={} if arguments is None else arguments, **fields
    )


def assert_error(
    result: tr.ToolResult, message: str, code: str | None = None, type_name: str | None = None
) -> None:
    """An error result exactly as the registry builds it."""
    assert result.error == tr.ErrorInfo(message, code, type_name)
    assert result.is_error is True
    assert result.content == (tr.TextContent("Error: " + message),)
    assert result.value is None
    assert result.meta is None
    assert result.concludes_turn is False


def assert_final_error(
    result: tr.ToolResult, message: str, code: str | None = None, type_name: str | None = None
) -> None:
    """A final error: the registry's error result, with no contexts kept."""
    assert_error(result, message, code, type_name)
    assert result.contexts == ()


def raises_attribute_error(action: Callable[[], object]) -> bool:
    try:
        action()
    except AttributeError:
        return True
    return False


def assign(target: object, attribute: str, value: object) -> None:
    setattr(target, attribute, value)


def context(text: str, source: str = "test", meta: Any = None) -> tr.ContextMessage:
    return tr.ContextMessage((tr.TextContent(text),), source, meta)


class BadRepr:
    """A value whose ``repr`` fails."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class Unprintable(Exception):
    """An exception whose ``str`` fails."""

    def __str__(self) -> str:
        raise RuntimeError("no str")


class Reason(enum.StrEnum):
    BUSY = "the tool is busy"


class Recorder:
    """Records the events of one test in order."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def __call__(self, event: str) -> None:
        self.events.append(event)

    def then(self, event: str, value: T) -> T:
        """Record ``event`` and return ``value`` (for one-line middleware)."""
        self.events.append(event)
        return value


def appended(items: list[Any], item: Any, value: T) -> T:
    """Append ``item`` to ``items`` and return ``value`` (for one-line middleware)."""
    items.append(item)
    return value


@pytest.fixture
def registry() -> tr.ToolRegistry:
    return tr.ToolRegistry()


@pytest.fixture
def log() -> Recorder:
    return Recorder()


def install_every_stage(registry: tr.ToolRegistry, log: Recorder) -> None:
    """Middleware, a guard and an observer that only record that they ran."""

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        log("pre")
        return await call_next()

    def guard(execution: tr.Execution) -> str | None:
        log("guard")
        return None

    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        log("around")
        return await call_next()

    async def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> Any:
        log("post")
        return await call_next()

    def observer(execution: tr.Execution, result: tr.ToolResult) -> None:
        log("observer")

    registry.pre_execute(pre)
    registry.guard(guard)
    registry.around_execute(around)
    registry.post_execute(post)
    registry.on_result(observer)


def deferring(*texts: str) -> Body:
    """A body that defers a context for each of ``texts``, in order, and returns "ok"."""

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        for text in texts:
            ctx.defer_context(text)
        return "ok"

    return body


def recording_body(log: Recorder, value: Any = "ok") -> Body:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        log("body")
        return value

    return body


def nesting(log: Recorder, label: str) -> Callable[..., Awaitable[Any]]:
    """Middleware for any stage that logs ``label>``, calls ``call_next`` (its last
    argument) and logs ``label<`` before handing the outcome back."""

    async def middleware(*arguments: Any) -> Any:
        call_next = arguments[-1]
        log(label + ">")
        outcome = await call_next()
        log(label + "<")
        return outcome

    return middleware


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


async def test_an_invalid_pre_execute_return_whose_repr_fails_is_named_by_its_type(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.pre_execute(lambda execution, call_next: BadRepr())

    result = await registry.execute(make_call())

    assert_final_error(
        result, "pre-execute middleware returned <BadRepr object>, not Allow, Deny or Ask"
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


# ---- approval -----------------------------------------------------------------------


def asking(reason: str | None = None) -> Callable[[tr.Execution, PreNext], tr.PreDecision]:
    return lambda execution, call_next: tr.Ask(reason)


async def test_ask_without_an_approver_denies_with_the_ask_reason(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    registry.register(make_tool(execute=recording_body(log)))
    registry.pre_execute(asking("deleting files needs a human"))

    result = await registry.execute(make_call())

    assert_error(result, "deleting files needs a human", "DENIED")
    assert log.events == []


async def test_ask_without_an_approver_or_a_reason_denies_naming_the_missing_approver(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.pre_execute(asking())

    result = await registry.execute(make_call())

    assert_error(result, 'tool "t" requires approval, but no approver is configured', "DENIED")


def approver_of(
    outcome: Any, kind: str, log: Recorder | None = None
) -> Callable[[tr.ApprovalRequest], Any]:
    """A sync or async approver that answers ``outcome`` (raising it if an exception)."""

    def answer() -> Any:
        if log is not None:
            log("approver")
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    if kind == "sync":
        return lambda request: answer()

    async def approve(request: tr.ApprovalRequest) -> Any:
        return answer()

    return approve


def asking_registry(
    approver: Callable[[tr.ApprovalRequest], Any], log: Recorder, reason: str | None = None
) -> tr.ToolRegistry:
    """A registry with ``approver``: a recording tool, every stage recording, and a pre-execute
    middleware that asks for approval with ``reason``."""
    registry = tr.ToolRegistry(approver=approver)
    registry.register(make_tool(execute=recording_body(log)))
    install_every_stage(registry, log)
    registry.pre_execute(asking(reason))
    return registry


APPROVER_KINDS = ["sync", "async"]


@pytest.mark.parametrize("kind", APPROVER_KINDS)
@pytest.mark.parametrize("outcome", [tr.ApprovalOutcome.ALLOWED_ONCE, "allowed-once"])
async def test_an_approver_that_allows_once_lets_the_call_run(
    log: Recorder, outcome: Any, kind: str
) -> None:
    registry = tr.ToolRegistry(approver=approver_of(outcome, kind, log))
    registry.register(make_tool(execute=recording_body(log)))
    registry.pre_execute(asking("confirm"))

    result = await registry.execute(make_call())

    assert result.is_error is False
    assert result.value == "ok"
    assert log.events == ["approver", "body"]


@pytest.mark.parametrize("kind", APPROVER_KINDS)
@pytest.mark.parametrize(
    ("outcome", "message"),
    [
        (tr.ApprovalOutcome.REJECTED, 'the user rejected tool "t"'),
        ("rejected", 'the user rejected tool "t"'),
        (tr.ApprovalOutcome.CANCELLED, 'approval for tool "t" was cancelled'),
        ("cancelled", 'approval for tool "t" was cancelled'),
        (tr.ApprovalOutcome.UNAVAILABLE,
         'tool "t" requires approval, but no approval channel is available'),
        ("unavailable", 'tool "t" requires approval, but no approval channel is available'),
    ],
)  # fmt: skip
async def test_an_approver_that_does_not_allow_denies_the_call(
    log: Recorder, outcome: Any, message: str, kind: str
) -> None:
    registry = asking_registry(approver_of(outcome, kind), log, "confirm")

    result = await registry.execute(make_call())

    assert_error(result, message, "DENIED")
    assert log.events == ["pre", "post", "observer"]  # no guard, no dispatch


@pytest.mark.parametrize("kind", APPROVER_KINDS)
@pytest.mark.parametrize("outcome", ["yes", "ALLOWED_ONCE", None, 1, True, tr.Allow()])
async def test_an_approver_returning_an_invalid_outcome_is_a_final_error(
    log: Recorder, outcome: Any, kind: str
) -> None:
    registry = asking_registry(approver_of(outcome, kind), log)

    result = await registry.execute(make_call())

    assert_final_error(result, f"approver returned an invalid outcome: {outcome!r}")
    assert log.events == ["pre", "observer"]


async def test_an_invalid_approver_outcome_whose_repr_fails_is_named_by_its_type() -> None:
    registry = tr.ToolRegistry(approver=lambda request: cast(Any, BadRepr()))
    registry.register(make_tool())
    registry.pre_execute(asking())

    result = await registry.execute(make_call())

    assert_final_error(result, "approver returned an invalid outcome: <BadRepr object>")


@pytest.mark.parametrize("kind", APPROVER_KINDS)
@pytest.mark.parametrize(
    ("exc", "message", "code", "type_name"),
    [
        (RuntimeError("approval UI crashed"), "approval UI crashed", None, "RuntimeError"),
        (tr.ToolError("no quorum", code="NO_QUORUM"), "no quorum", "NO_QUORUM", "ToolError"),
        (KeyError(), "KeyError", None, "KeyError"),
    ],
)
async def test_a_raising_approver_is_a_final_error_with_its_message(
    log: Recorder, exc: Exception, message: str, code: str | None, type_name: str, kind: str
) -> None:
    registry = asking_registry(approver_of(exc, kind), log)

    result = await registry.execute(make_call())

    assert_final_error(result, message, code, type_name)
    assert log.events == ["pre", "observer"]


async def test_the_approver_receives_one_request_with_the_calls_frozen_arguments_and_signal(
    log: Recorder,
) -> None:
    requests: list[tr.ApprovalRequest] = []
    controller = tr.CancelController()

    def approver(request: tr.ApprovalRequest) -> str:
        requests.append(request)
        return "allowed-once"

    registry = tr.ToolRegistry(approver=approver)
    scope = registry.scope("agent-1")
    scope.register(make_tool("rm", execute=recording_body(log)))
    scope.pre_execute(asking("deletes files"))

    result = await scope.execute(
        make_call("rm", call_id="c9", arguments={"paths": ["/a", "/b"]}, signal=controller.signal)
    )

    assert result.value == "ok"
    (request,) = requests
    assert request.call_id == "c9"
    assert request.tool_name == "rm"
    assert request.arguments == {"paths": ("/a", "/b")}
    assert type(request.arguments) is tr.FrozenDict
    assert request.scope == "agent-1"
    assert request.reason == "deletes files"
    assert request.signal is controller.signal


async def test_the_approver_request_reason_is_none_for_a_bare_ask() -> None:
    requests: list[tr.ApprovalRequest] = []
    registry = tr.ToolRegistry(approver=lambda r: appended(requests, r, "allowed-once"))
    registry.register(make_tool())
    registry.pre_execute(asking())

    await registry.execute(make_call())

    assert [r.reason for r in requests] == [None]


async def test_the_approver_is_read_at_the_moment_the_call_asks(log: Recorder) -> None:
    registry = tr.ToolRegistry()
    registry.register(make_tool(execute=recording_body(log)))

    def ask_after_installing(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        registry.approver = approver_of("allowed-once", "sync", log)
        return tr.Ask("confirm")

    registry.pre_execute(ask_after_installing)
    result = await registry.execute(make_call())

    assert result.value == "ok"
    assert log.events == ["approver", "body"]


async def test_an_approver_set_after_construction_is_used_and_a_cleared_one_is_not() -> None:
    registry = tr.ToolRegistry()
    registry.register(make_tool())
    registry.pre_execute(asking())

    registry.approver = lambda request: tr.ApprovalOutcome.REJECTED
    rejected = await registry.execute(make_call())
    registry.approver = None
    unconfigured = await registry.execute(make_call())

    assert_error(rejected, 'the user rejected tool "t"', "DENIED")
    assert_error(
        unconfigured, 'tool "t" requires approval, but no approver is configured', "DENIED"
    )


async def test_an_approved_call_still_goes_through_the_guards(log: Recorder) -> None:
    registry = tr.ToolRegistry(approver=approver_of("allowed-once", "sync", log))
    registry.register(make_tool(execute=recording_body(log)))
    registry.pre_execute(asking())
    registry.guard(lambda execution: log.then("guard", "guard says no"))

    result = await registry.execute(make_call())

    assert_error(result, "guard says no", "DENIED")
    assert log.events == ["approver", "guard"]


async def test_an_approval_denial_reaches_post_execute(log: Recorder) -> None:
    seen: list[tr.ToolResult] = []
    registry = tr.ToolRegistry(approver=lambda request: "rejected")
    registry.register(make_tool())
    registry.pre_execute(asking())

    async def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> Any:
        seen.append(result)
        return await call_next()

    registry.post_execute(post)
    result = await registry.execute(make_call())

    assert [r.error for r in seen] == [tr.ErrorInfo('the user rejected tool "t"', "DENIED")]
    assert_error(result, 'the user rejected tool "t"', "DENIED")


@pytest.mark.parametrize("answer", ["allowed-once", "rejected"])
async def test_a_signal_firing_while_the_approver_is_pending_cancels_it_and_aborts_before_dispatch(
    log: Recorder, answer: str
) -> None:
    asked = asyncio.Event()

    async def approver(request: tr.ApprovalRequest) -> str:
        asked.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            log("approver cancelled")
        return answer  # whatever it returns, the call was cancelled

    controller = tr.CancelController()
    registry = tr.ToolRegistry(approver=approver)
    registry.register(make_tool(execute=recording_body(log)))
    registry.pre_execute(asking())
    registry.post_execute(lambda execution, result, call_next: log.then("post", tr.Accept()))
    registry.on_result(lambda execution, result: log("observer"))

    task = asyncio.create_task(registry.execute(make_call(signal=controller.signal)))
    await until(asked)
    controller.cancel()
    result = await within(task)

    assert_final_error(
        result, "tool call aborted before dispatch", "ABORTED_BEFORE_DISPATCH", "ToolAbortedError"
    )
    assert log.events == ["approver cancelled", "observer"]


async def test_cancelling_the_task_while_the_approver_is_pending_cancels_and_awaits_the_approver(
    log: Recorder,
) -> None:
    asked = asyncio.Event()

    async def approver(request: tr.ApprovalRequest) -> str:
        asked.set()
        try:
            await asyncio.Event().wait()
        finally:
            log("approver finished")
        return "allowed-once"

    registry = tr.ToolRegistry(approver=approver)
    registry.register(make_tool(execute=recording_body(log)))
    registry.pre_execute(asking())
    registry.on_result(lambda execution, result: log("observer"))

    task = asyncio.create_task(registry.execute(make_call()))
    await until(asked)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(task)

    assert log.events == ["approver finished"]


# ---- stage 5: guards ----------------------------------------------------------------


async def test_guards_run_only_when_the_decision_is_allow(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    registry.register(make_tool())
    registry.guard(lambda execution: log(f"guard:{execution.call_id}"))

    def pre(execution: tr.Execution, call_next: PreNext) -> Any:
        if execution.call_id == "deny":
            return tr.Deny("no")
        if execution.call_id == "ask":
            return tr.Ask()
        return call_next()

    registry.pre_execute(pre)
    await registry.execute(make_call(call_id="deny"))
    await registry.execute(make_call(call_id="ask"))
    await registry.execute(make_call(call_id="allow"))

    assert log.events == ["guard:allow"]


async def test_every_global_guard_runs_in_order_before_the_scopes_guards(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    def guard(label: str) -> Callable[[tr.Execution], None]:
        return lambda execution: log(label)

    registry.register(make_tool())
    scope = registry.scope("agent")
    scope.guard(guard("s1"))
    registry.guard(guard("g1"))
    scope.guard(guard("s2"))
    registry.guard(guard("g2"))
    registry.scope("other").guard(guard("other"))

    result = await scope.execute(make_call())
    await registry.execute(make_call())

    assert result.value == "ok"
    assert log.events == ["g1", "g2", "s1", "s2", "g1", "g2"]


async def test_the_first_guard_reason_denies_and_later_guards_do_not_run(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    registry.register(make_tool(execute=recording_body(log)))
    registry.guard(lambda execution: log("g1"))
    registry.guard(lambda execution: log.then("g2", "no writes under /etc"))
    registry.guard(lambda execution: log.then("g3", "another reason"))

    result = await registry.execute(make_call())

    assert_error(result, "no writes under /etc", "DENIED")
    assert log.events == ["g1", "g2"]


async def test_an_empty_string_from_a_guard_still_denies(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    registry.register(make_tool(execute=recording_body(log)))
    registry.guard(lambda execution: "")
    registry.guard(lambda execution: log("later guard"))

    result = await registry.execute(make_call())

    assert_error(result, "", "DENIED")
    assert log.events == []


async def test_a_guard_reason_that_is_a_str_subclass_denies_with_its_text(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.guard(lambda execution: Reason.BUSY)

    result = await registry.execute(make_call())

    assert_error(result, "the tool is busy", "DENIED")
    assert type(cast(tr.ErrorInfo, result.error).message) is str


async def test_a_guard_denial_goes_on_to_post_execute_but_skips_dispatch(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    seen: list[tr.ToolResult] = []
    registry.register(make_tool(execute=recording_body(log)))
    install_every_stage(registry, log)
    registry.guard(lambda execution: "denied by guard")
    registry.post_execute(lambda execution, result, call_next: appended(seen, result, tr.Accept()))

    result = await registry.execute(make_call())

    assert_error(result, "denied by guard", "DENIED")
    assert [r.error for r in seen] == [tr.ErrorInfo("denied by guard", "DENIED")]
    assert log.events == ["pre", "guard", "post", "observer"]


class NamedGuard:
    def __init__(self, verdict: Any) -> None:
        self.verdict = verdict

    def __repr__(self) -> str:
        return "NamedGuard()"

    def __call__(self, execution: tr.Execution) -> Any:
        return self.verdict


class BadReprGuard(NamedGuard):
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@pytest.mark.parametrize("verdict", [5, b"no", True, ["no"], tr.Deny("no")])
async def test_a_guard_returning_neither_none_nor_a_str_is_a_final_error(
    registry: tr.ToolRegistry, log: Recorder, verdict: Any
) -> None:
    registry.register(make_tool(execute=recording_body(log)))
    install_every_stage(registry, log)
    registry.guard(NamedGuard(verdict))

    result = await registry.execute(make_call())

    assert_final_error(result, f"guard NamedGuard() returned {verdict!r}; {GUARD_HINT}")
    assert log.events == ["pre", "guard", "observer"]


async def test_an_invalid_guard_return_names_a_plain_function_guard_by_its_repr(
    registry: tr.ToolRegistry,
) -> None:
    def no_numbers(execution: tr.Execution) -> Any:
        return 42

    registry.register(make_tool())
    registry.guard(no_numbers)

    result = await registry.execute(make_call())

    assert_final_error(result, f"guard {no_numbers!r} returned 42; {GUARD_HINT}")


async def test_an_invalid_guard_return_names_a_guard_whose_repr_fails_by_its_type(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.guard(BadReprGuard(5))

    result = await registry.execute(make_call())

    assert_final_error(result, f"guard <BadReprGuard object> returned 5; {GUARD_HINT}")


async def test_an_invalid_guard_return_whose_repr_fails_is_named_by_its_type(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.guard(NamedGuard(BadRepr()))

    result = await registry.execute(make_call())

    assert_final_error(result, f"guard NamedGuard() returned <BadRepr object>; {GUARD_HINT}")


async def test_an_async_guard_is_a_final_error_and_its_coroutine_is_closed(
    registry: tr.ToolRegistry,
) -> None:
    coroutines: list[Any] = []

    async def verdict() -> None:
        return None

    def async_guard(execution: tr.Execution) -> Any:
        coroutine = verdict()
        coroutines.append(coroutine)
        return coroutine

    registry.register(make_tool())
    registry.guard(async_guard)

    result = await registry.execute(make_call())

    (coroutine,) = coroutines
    assert_final_error(result, f"guard {async_guard!r} returned {coroutine!r}; {GUARD_HINT}")
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED
    coroutines.clear()
    del coroutine
    gc.collect()  # a never-awaited coroutine would warn here (warnings are errors)


@pytest.mark.parametrize(
    ("exc", "message", "code", "type_name"),
    [
        (RuntimeError("guard broke"), "guard broke", None, "RuntimeError"),
        (tr.ToolError("quota", code="QUOTA"), "quota", "QUOTA", "ToolError"),
        (Unprintable(), "<unprintable thrown value>", None, "Unprintable"),
    ],
)
async def test_a_raising_guard_is_a_final_error_with_its_message(
    registry: tr.ToolRegistry,
    log: Recorder,
    exc: Exception,
    message: str,
    code: str | None,
    type_name: str,
) -> None:
    def guard(execution: tr.Execution) -> None:
        raise exc

    registry.register(make_tool(execute=recording_body(log)))
    install_every_stage(registry, log)
    registry.guard(guard)

    result = await registry.execute(make_call())

    assert_final_error(result, message, code, type_name)
    assert log.events == ["pre", "guard", "observer"]


# ---- stage 6: denial ----------------------------------------------------------------


async def test_a_denial_skips_dispatch_and_post_execute_sees_the_denial_result(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    seen: list[tr.ToolResult] = []

    async def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> Any:
        seen.append(result)
        return await call_next()

    registry.register(make_tool(execute=recording_body(log)))
    registry.around_execute(lambda execution, call_next: log.then("around", call_next()))
    registry.pre_execute(lambda execution, call_next: tr.Deny("blocked path"))
    registry.post_execute(post)

    result = await registry.execute(make_call())

    assert log.events == []
    (denial,) = seen
    assert_error(denial, "blocked path", "DENIED")
    assert result == denial


# ---- stage 8: around-execute --------------------------------------------------------


async def test_around_execute_wraps_the_body_outermost_first(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    registry.register(make_tool(execute=recording_body(log)))
    registry.around_execute(nesting(log, "a"))
    registry.around_execute(nesting(log, "b"))
    registry.around_execute(nesting(log, "first"), prepend=True)

    result = await registry.execute(make_call())

    assert result.value == "ok"
    assert log.events == ["first>", "a>", "b>", "body", "b<", "a<", "first<"]


async def test_around_execute_may_short_circuit_without_running_the_body(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    seen: list[tr.ToolResult] = []
    cached = tr.ToolResult(
        content=(tr.TextContent("cached"),), value=tr.snapshot_json({"hit": True})
    )

    registry.register(make_tool(execute=recording_body(log)))
    registry.around_execute(lambda execution, call_next: cached)
    registry.post_execute(lambda execution, result, call_next: appended(seen, result, tr.Accept()))

    result = await registry.execute(make_call())

    assert log.events == []
    assert seen == [cached]
    assert result.content == (tr.TextContent("cached"),)
    assert result.value == {"hit": True}
    assert type(result.value) is tr.FrozenDict
    assert result.is_error is False


async def test_around_execute_may_replace_the_result_it_got(
    registry: tr.ToolRegistry,
) -> None:
    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        original = await call_next()
        return tr.ToolResult(content=(tr.TextContent("wrapped " + original.text),), value=1)

    registry.register(make_tool())
    registry.around_execute(around)
    result = await registry.execute(make_call())

    assert result.content == (tr.TextContent("wrapped ok"),)
    assert result.value == 1


async def test_a_sync_around_execute_middleware_is_accepted(registry: tr.ToolRegistry) -> None:
    registry.register(make_tool())
    registry.around_execute(lambda execution, call_next: call_next())
    registry.around_execute(
        lambda execution, call_next: tr.ToolResult(content=(tr.TextContent("sync"),))
    )

    result = await registry.execute(make_call())

    assert result.content == (tr.TextContent("sync"),)


async def test_around_call_next_twice_runs_the_body_twice_with_a_fresh_run_context_each_time(
    registry: tr.ToolRegistry,
) -> None:
    contexts: list[tr.RunContext] = []
    executions: list[tr.Execution] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> int:
        contexts.append(ctx)
        return len(contexts)

    async def retry(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        executions.append(execution)
        first = await call_next()
        assert first.value == 1
        return await call_next()

    registry.register(make_tool(execute=body))
    registry.around_execute(retry)
    result = await registry.execute(make_call())

    assert result.value == 2
    first, second = contexts
    assert first is not second
    assert first.token is second.token is executions[0].token


async def test_around_call_next_twice_runs_inner_middleware_again(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    async def retry(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        await call_next()
        return await call_next()

    async def inner(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        log("inner")
        return await call_next()

    registry.register(make_tool(execute=recording_body(log)))
    registry.around_execute(retry)
    registry.around_execute(inner)
    await registry.execute(make_call())

    assert log.events == ["inner", "body", "inner", "body"]


@pytest.mark.parametrize("value", [None, "ok", {"content": []}, tr.Accept(), tr.TextContent("x")])
async def test_an_around_execute_return_that_is_not_a_tool_result_is_a_final_error(
    registry: tr.ToolRegistry, log: Recorder, value: Any
) -> None:
    async def around(execution: tr.Execution, call_next: AroundNext) -> Any:
        await call_next()
        return value

    registry.register(make_tool(execute=recording_body(log)))
    install_every_stage(registry, log)
    registry.around_execute(around)

    result = await registry.execute(make_call())

    assert_final_error(result, f"around-execute middleware returned {value!r}, not a ToolResult")
    assert log.events == ["pre", "guard", "around", "body", "observer"]


async def test_an_invalid_around_execute_return_whose_repr_fails_is_named_by_its_type(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.around_execute(lambda execution, call_next: BadRepr())

    result = await registry.execute(make_call())

    assert_final_error(
        result, "around-execute middleware returned <BadRepr object>, not a ToolResult"
    )


async def test_a_raising_around_execute_middleware_is_a_final_error_that_skips_post_execute(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        await call_next()
        raise tr.ToolError("wrapper failed", code="WRAPPER")

    registry.register(make_tool(execute=deferring("from the body")))
    install_every_stage(registry, log)
    registry.around_execute(around)

    result = await registry.execute(make_call())

    assert_final_error(result, "wrapper failed", "WRAPPER", "ToolError")
    assert log.events == ["pre", "guard", "around", "observer"]


async def test_an_unknown_tool_is_an_ordinary_dispatch_result(
    registry: tr.ToolRegistry,
) -> None:
    result = await registry.execute(make_call("nope"))

    assert_error(result, 'unknown tool "nope"', "UNKNOWN_TOOL", "ToolNotFoundError")


async def test_around_and_post_execute_see_the_unknown_tool_result(
    registry: tr.ToolRegistry,
) -> None:
    seen: list[tuple[str, tr.ToolResult]] = []

    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        result = await call_next()
        seen.append(("around", result))
        return result

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        seen.append(("post", result))
        return tr.Accept()

    registry.around_execute(around)
    registry.post_execute(post)
    result = await registry.execute(make_call("missing"))

    assert [stage for stage, _ in seen] == ["around", "post"]
    for _, dispatched in seen:
        assert_error(dispatched, 'unknown tool "missing"', "UNKNOWN_TOOL", "ToolNotFoundError")
    assert_error(result, 'unknown tool "missing"', "UNKNOWN_TOOL", "ToolNotFoundError")


# ---- Execution attributes and the signal --------------------------------------------


ATTRIBUTES = ["token", "call_id", "name", "arguments", "scope", "parent"]


async def test_execution_attributes_are_read_only(registry: tr.ToolRegistry) -> None:
    outcomes: dict[str, bool] = {}

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        for attribute in [*ATTRIBUTES, "signal", "something_new"]:
            outcomes[attribute] = raises_attribute_error(
                lambda a=attribute: assign(execution, a, None)  # type: ignore[misc]
            )
        return await call_next()

    registry.register(make_tool())
    registry.pre_execute(pre)
    result = await registry.execute(make_call())

    assert result.value == "ok"
    assert outcomes == dict.fromkeys([*ATTRIBUTES, "signal", "something_new"], True)


async def test_run_context_attributes_are_read_only(registry: tr.ToolRegistry) -> None:
    outcomes: dict[str, bool] = {}

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        for attribute in [*ATTRIBUTES, "signal"]:
            outcomes[attribute] = raises_attribute_error(
                lambda a=attribute: assign(ctx, a, tr.CancelSignal.never())  # type: ignore[misc]
            )
        return "ok"

    registry.register(make_tool(execute=body))
    registry.around_execute(lambda execution, call_next: call_next())  # signal writable there
    result = await registry.execute(make_call())

    assert result.value == "ok"
    assert outcomes == dict.fromkeys([*ATTRIBUTES, "signal"], True)


async def test_the_signal_cannot_be_assigned_outside_around_execute(
    registry: tr.ToolRegistry,
) -> None:
    outcomes: dict[str, bool] = {}
    replacement = tr.CancelController().signal

    def try_assign(where: str, execution: tr.Execution) -> None:
        outcomes[where] = raises_attribute_error(lambda: assign(execution, "signal", replacement))

    def finalize(execution: tr.Execution, result: tr.ToolResult) -> None:
        try_assign("finalize", execution)

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        try_assign("pre", execution)
        return await call_next()

    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        return await call_next()

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        try_assign("post", execution)
        return tr.Accept()

    registry.register(make_tool(finalize_content=finalize))
    registry.pre_execute(pre)
    registry.guard(lambda execution: try_assign("guard", execution))
    registry.around_execute(around)
    registry.post_execute(post)
    registry.on_result(lambda execution, result: try_assign("observer", execution))

    result = await registry.execute(make_call())

    assert result.value == "ok"
    assert outcomes == dict.fromkeys(["pre", "guard", "post", "finalize", "observer"], True)


async def test_around_execute_may_replace_the_signal_and_the_callers_is_restored_after_it(
    registry: tr.ToolRegistry,
) -> None:
    caller = tr.CancelController()
    replacement = tr.CancelController()
    seen: dict[str, tr.CancelSignal] = {}
    stashed: list[tr.Execution] = []

    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        seen["before"] = execution.signal
        execution.signal = replacement.signal
        seen["installed"] = execution.signal
        result = await call_next()
        seen["after call_next"] = execution.signal
        stashed.append(execution)
        return result

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        seen["post"] = execution.signal
        return tr.Accept()

    registry.register(make_tool())
    registry.around_execute(around)
    registry.post_execute(post)
    registry.on_result(lambda execution, result: seen.update(observer=execution.signal))

    result = await registry.execute(make_call(signal=caller.signal))

    assert result.value == "ok"
    assert seen["before"] is caller.signal
    assert seen["installed"] is replacement.signal
    assert seen["after call_next"] is replacement.signal
    assert seen["post"] is caller.signal
    assert seen["observer"] is caller.signal
    assert raises_attribute_error(lambda: assign(stashed[0], "signal", replacement.signal))


async def test_the_signal_is_restored_even_when_around_execute_raises(
    registry: tr.ToolRegistry,
) -> None:
    caller = tr.CancelController()
    seen: list[tr.CancelSignal] = []

    def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        execution.signal = tr.CancelController().signal
        raise RuntimeError("after installing")

    registry.register(make_tool())
    registry.around_execute(around)
    registry.on_result(lambda execution, result: seen.append(execution.signal))

    result = await registry.execute(make_call(signal=caller.signal))

    assert_final_error(result, "after installing", None, "RuntimeError")
    assert seen == [caller.signal]


async def test_the_body_signal_fires_when_the_signal_installed_by_around_execute_fires(
    registry: tr.ToolRegistry,
) -> None:
    deadline = tr.CancelController()

    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        execution.signal = deadline.signal
        return await call_next()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        assert ctx.signal.cancelled is False
        deadline.cancel("deadline")
        await asyncio.wait_for(ctx.signal.wait(), 5)
        return "saw the deadline"

    registry.register(make_tool(execute=body, cancellation="cooperative"))
    registry.around_execute(around)

    result = await registry.execute(make_call())

    assert result.is_error is False
    assert result.value == "saw the deadline"


# ---- the body -----------------------------------------------------------------------


async def test_a_coroutine_body_is_awaited_on_the_loop_thread(registry: tr.ToolRegistry) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> int:
        return threading.get_ident()

    registry.register(make_tool(execute=body))
    result = await registry.execute(make_call())

    assert result.value == threading.get_ident()


async def test_a_sync_body_runs_in_a_worker_thread(registry: tr.ToolRegistry) -> None:
    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> int:
        return threading.get_ident()

    registry.register(make_tool(execute=body))
    result = await registry.execute(make_call())

    assert isinstance(result.value, int)
    assert result.value != threading.get_ident()


async def test_an_inline_sync_body_runs_on_the_loop_thread(registry: tr.ToolRegistry) -> None:
    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> int:
        return threading.get_ident()

    registry.register(make_tool(execute=body, inline=True))
    result = await registry.execute(make_call())

    assert result.value == threading.get_ident()


async def test_the_body_receives_the_frozen_arguments(registry: tr.ToolRegistry) -> None:
    received: list[tr.JsonValue] = []

    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> None:
        received.append(arguments)

    registry.register(make_tool(execute=body, inline=True))
    await registry.execute(make_call(arguments={"a": [1, {"b": 2}]}))

    (arguments,) = received
    assert arguments == {"a": (1, {"b": 2})}
    assert type(arguments) is tr.FrozenDict
    with pytest.raises(TypeError):
        arguments["c"] = 3


def returning(value: Any) -> Body:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        return value

    return body


RETURN_TABLE: list[tuple[str, Any, Any, tuple[tr.Content, ...], Any]] = [
    ("tool output with value", tr.ToolOutput(value={"a": 1}), {"a": 1},
     (tr.TextContent('{"a": 1}'),), None),
    ("tool output with content and meta",
     tr.ToolOutput(value=[1, 2], content=[tr.TextContent("two items"), IMAGE],
                   meta={"rows": [1, 2]}),
     (1, 2), (tr.TextContent("two items"), IMAGE), {"rows": (1, 2)}),
    ("tool output with a str value", tr.ToolOutput(value="plain"), "plain",
     (tr.TextContent("plain"),), None),
    ("empty tool output", tr.ToolOutput(), None, (), None),
    ("tool output with empty content", tr.ToolOutput(value=3, content=[]), 3, (), None),
    ("str", "hello", "hello", (tr.TextContent("hello"),), None),
    ("empty str", "", "", (tr.TextContent(""),), None),
    ("str subclass", Reason.BUSY, "the tool is busy", (tr.TextContent("the tool is busy"),), None),
    ("text content", tr.TextContent("block"), None, (tr.TextContent("block"),), None),
    ("image content", IMAGE, None, (IMAGE,), None),
    ("list of content", [tr.TextContent("a"), IMAGE], None, (tr.TextContent("a"), IMAGE), None),
    ("tuple of content", (tr.TextContent("a"),), None, (tr.TextContent("a"),), None),
    ("None", None, None, (), None),
    ("int", 42, 42, (tr.TextContent("42"),), None),
    ("bool", True, True, (tr.TextContent("true"),), None),
    ("float", 2.5, 2.5, (tr.TextContent("2.5"),), None),
    ("empty list", [], (), (tr.TextContent("[]"),), None),
    ("non-ASCII dict", {"name": "Zoë", "city": "東京"}, {"name": "Zoë", "city": "東京"},
     (tr.TextContent('{"name": "Zoë", "city": "東京"}'),), None),
    ("mixed list", [1, "a", None, {"b": False}], (1, "a", None, {"b": False}),
     (tr.TextContent('[1, "a", null, {"b": false}]'),), None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("returned", "value", "content", "meta"),
    [row[1:] for row in RETURN_TABLE],
    ids=[row[0] for row in RETURN_TABLE],
)
async def test_what_the_body_returns_becomes_value_and_content(
    registry: tr.ToolRegistry,
    returned: Any,
    value: Any,
    content: tuple[tr.Content, ...],
    meta: Any,
) -> None:
    registry.register(make_tool(execute=returning(returned)))

    result = await registry.execute(make_call())

    assert result.is_error is False
    assert result.error is None
    assert result.value == value
    assert type(result.value) is type(value) or isinstance(value, dict)
    assert result.content == content
    assert type(result.content) is tuple
    assert result.meta == meta


async def test_a_returned_json_value_is_rendered_with_json_dumps_keeping_non_ascii(
    registry: tr.ToolRegistry,
) -> None:
    value = {"greeting": "héllo", "emoji": "🙂", "nested": [1, {"k": "ß"}]}
    registry.register(make_tool(execute=returning(value)))

    result = await registry.execute(make_call())

    assert result.content == (tr.TextContent(json.dumps(value, ensure_ascii=False)),)
    assert result.text == '{"greeting": "héllo", "emoji": "🙂", "nested": [1, {"k": "ß"}]}'


async def test_a_returned_value_is_a_frozen_snapshot(registry: tr.ToolRegistry) -> None:
    value: dict[str, Any] = {"items": [1, {"deep": [2]}]}

    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        return value

    registry.register(make_tool(execute=body, inline=True))
    result = await registry.execute(make_call())
    value["items"].append(3)

    assert result.value == {"items": (1, {"deep": (2,)})}
    frozen = result.value
    assert isinstance(frozen, tr.FrozenDict)
    assert type(frozen["items"]) is tuple
    assert type(frozen["items"][1]) is tr.FrozenDict


class ContentSequence(Sequence[tr.Content]):
    """A read-only sequence of content blocks that is neither a list nor a tuple."""

    def __init__(self, *blocks: tr.Content) -> None:
        self._blocks = blocks

    @overload
    def __getitem__(self, index: int) -> tr.Content: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[tr.Content]: ...
    def __getitem__(self, index: int | slice) -> tr.Content | Sequence[tr.Content]:
        return self._blocks[index]

    def __len__(self) -> int:
        return len(self._blocks)

    def __iter__(self) -> Iterator[tr.Content]:
        return iter(self._blocks)


async def test_tool_output_content_may_be_any_sequence_of_content(
    registry: tr.ToolRegistry,
) -> None:
    output = tr.ToolOutput(value=1, content=ContentSequence(tr.TextContent("one")))
    registry.register(make_tool(execute=returning(output)))

    result = await registry.execute(make_call())

    assert result.is_error is False
    assert result.content == (tr.TextContent("one"),)
    assert result.value == 1


BODY_KINDS = ["async", "thread", "inline"]


def raising_tool(exc: BaseException, kind: str) -> tr.Tool:
    if kind == "async":

        async def async_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> None:
            raise exc

        return make_tool(execute=async_body)

    def sync_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> None:
        raise exc

    return make_tool(execute=sync_body, inline=kind == "inline")


class QuotaError(tr.ToolError):
    code = "QUOTA_EXCEEDED"


BODY_EXCEPTIONS: list[tuple[Exception, str, str | None, str]] = [
    (RuntimeError("disk full"), "disk full", None, "RuntimeError"),
    (ValueError(), "ValueError", None, "ValueError"),
    (Unprintable(), "<unprintable thrown value>", None, "Unprintable"),
    (tr.ToolError("bad input"), "bad input", "TOOL_ERROR", "ToolError"),
    (tr.ToolError("slow down", code="RATE_LIMITED"), "slow down", "RATE_LIMITED", "ToolError"),
    (tr.ToolError(""), "ToolError", "TOOL_ERROR", "ToolError"),
    (tr.ToolArgsError("bad args", violations=["x"]), "bad args", "INVALID_ARGS", "ToolArgsError"),
    (QuotaError("over quota"), "over quota", "QUOTA_EXCEEDED", "QuotaError"),
]


@pytest.mark.parametrize("kind", BODY_KINDS)
@pytest.mark.parametrize(("exc", "message", "code", "type_name"), BODY_EXCEPTIONS)
async def test_an_exception_from_the_body_becomes_an_error_result(
    registry: tr.ToolRegistry,
    exc: Exception,
    message: str,
    code: str | None,
    type_name: str,
    kind: str,
) -> None:
    registry.register(raising_tool(exc, kind))

    result = await registry.execute(make_call())

    assert_error(result, message, code, type_name)


async def test_a_body_failure_is_a_dispatch_result_that_around_and_post_execute_see(
    registry: tr.ToolRegistry,
) -> None:
    seen: list[str] = []

    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        result = await call_next()
        seen.append("around:" + result.text)
        return result

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        seen.append("post:" + result.text)
        return tr.Accept()

    registry.register(raising_tool(RuntimeError("boom"), "async"))
    registry.around_execute(around)
    registry.post_execute(post)
    result = await registry.execute(make_call())

    assert seen == ["around:Error: boom", "post:Error: boom"]
    assert_error(result, "boom", None, "RuntimeError")


@pytest.mark.parametrize(
    "options",
    [{}, {"cancellation": "cooperative"}, {"timeout": 60.0}],
    ids=["interrupt", "cooperative", "with-timeout"],
)
@pytest.mark.parametrize("with_signal", [False, True], ids=["no-signal", "with-signal"])
async def test_a_body_raising_cancelled_error_on_its_own_is_a_failure(
    registry: tr.ToolRegistry, options: dict[str, Any], with_signal: bool
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> None:
        raise asyncio.CancelledError

    registry.register(make_tool(execute=body, **options))
    signal = tr.CancelController().signal if with_signal else None

    result = await registry.execute(make_call(signal=signal))

    assert_error(result, "CancelledError", None, "CancelledError")


async def test_a_body_cancelled_error_with_a_message_keeps_the_message(
    registry: tr.ToolRegistry,
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> None:
        raise asyncio.CancelledError("gave up")

    registry.register(make_tool(execute=body))
    result = await registry.execute(make_call())

    assert_error(result, "gave up", None, "CancelledError")


NUMBER_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "minProperties": 1,
}


@pytest.mark.parametrize(
    "returned",
    [{"a": "x"}, tr.ToolOutput(value={"a": "x"}, content=[tr.TextContent("fine")]), "text", None],
)
async def test_a_value_violating_the_output_schema_is_an_invalid_output_result(
    registry: tr.ToolRegistry, returned: Any
) -> None:
    registry.register(make_tool(execute=returning(returned), output_schema=NUMBER_SCHEMA))

    result = await registry.execute(make_call())

    assert result.error is not None
    message = result.error.message
    assert message.startswith('tool "t" returned invalid output: ')
    assert_error(result, message, "INVALID_TOOL_OUTPUT", "ToolOutputError")


async def test_output_schema_violations_are_joined_by_semicolons(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(
        make_tool(execute=returning({"a": "x", "b": "y"}), output_schema=NUMBER_SCHEMA)
    )

    result = await registry.execute(make_call())

    assert result.error is not None
    reason = result.error.message.removeprefix('tool "t" returned invalid output: ')
    assert len(reason.split("; ")) == 2
    assert result.error.code == "INVALID_TOOL_OUTPUT"


async def test_a_value_satisfying_the_output_schema_is_kept(registry: tr.ToolRegistry) -> None:
    registry.register(make_tool(execute=returning({"a": 1, "b": 2}), output_schema=NUMBER_SCHEMA))

    result = await registry.execute(make_call())

    assert result.is_error is False
    assert result.value == {"a": 1, "b": 2}


async def test_an_output_schema_using_arrays_registers_and_is_enforced(
    registry: tr.ToolRegistry,
) -> None:
    schema = {
        "type": "object",
        "properties": {"kind": {"enum": ["a", "b"]}},
        "required": ["kind"],
    }
    registry.register(make_tool("good", execute=returning({"kind": "a"}), output_schema=schema))
    registry.register(make_tool("bad", execute=returning({"kind": "c"}), output_schema=schema))

    good = await registry.execute(make_call("good"))
    bad = await registry.execute(make_call("bad"))

    assert good.value == {"kind": "a"}
    assert bad.error is not None
    assert bad.error.message.startswith('tool "bad" returned invalid output: ')
    assert_error(bad, bad.error.message, "INVALID_TOOL_OUTPUT", "ToolOutputError")


@pytest.mark.parametrize(
    ("returned", "reason"),
    [
        ({"tags": {"a"}}, "value is not lossless JSON: $.tags is a set"),
        ([1, float("inf")], "value is not lossless JSON: $[1] "),
        (tr.ToolOutput(value={"when": dt.date(2024, 1, 1)}),
         "value is not lossless JSON: $.when is a date"),
        (object(), "value is not lossless JSON: $ "),
    ],
)  # fmt: skip
async def test_a_value_that_is_not_lossless_json_is_an_invalid_output_result(
    registry: tr.ToolRegistry, returned: Any, reason: str
) -> None:
    registry.register(make_tool(execute=returning(returned)))

    result = await registry.execute(make_call())

    assert result.error is not None
    message = result.error.message
    assert message.startswith('tool "t" returned invalid output: value is not lossless JSON: ')
    assert message.startswith('tool "t" returned invalid output: ' + reason)
    assert_error(result, message, "INVALID_TOOL_OUTPUT", "ToolOutputError")


UNRENDERABLE = 'tool "t" returned invalid output: value cannot be rendered as text: '


def deep_list(depth: int) -> list[Any]:
    root: list[Any] = []
    current = root
    for _ in range(depth):
        child: list[Any] = []
        current.append(child)
        current = child
    return root


async def test_a_value_too_deep_to_render_is_an_invalid_output_result(
    registry: tr.ToolRegistry,
) -> None:
    deep = deep_list(100_000)

    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        return deep

    registry.register(make_tool(execute=body, inline=True))
    result = await registry.execute(make_call())

    assert result.error is not None
    message = result.error.message
    assert message.startswith(UNRENDERABLE)
    assert len(message) > len(UNRENDERABLE)
    assert_error(result, message, "INVALID_TOOL_OUTPUT", "ToolOutputError")


# ---- defer_context and conclude_turn ------------------------------------------------


@pytest.mark.parametrize(
    ("message", "options", "expected"),
    [
        ("remember this", {}, tr.ContextMessage((tr.TextContent("remember this"),), "t")),
        (tr.TextContent("block"), {}, tr.ContextMessage((tr.TextContent("block"),), "t")),
        (IMAGE, {"source": "camera"}, tr.ContextMessage((IMAGE,), "camera")),
        ([tr.TextContent("a"), IMAGE], {}, tr.ContextMessage((tr.TextContent("a"), IMAGE), "t")),
        ((tr.TextContent("a"),), {"meta": {"k": [1]}},
         tr.ContextMessage((tr.TextContent("a"),), "t", tr.snapshot_json({"k": [1]}))),
        (ContentSequence(tr.TextContent("seq")), {},
         tr.ContextMessage((tr.TextContent("seq"),), "t")),
        ("with source", {"source": "plugin:reminders", "meta": 1},
         tr.ContextMessage((tr.TextContent("with source"),), "plugin:reminders", 1)),
        (context("as is", "plugin:x"), {}, context("as is", "plugin:x")),
    ],
    ids=["str", "text", "image", "list", "tuple-with-meta", "sequence", "source", "message"],
)  # fmt: skip
async def test_defer_context_accepts_every_message_form(
    registry: tr.ToolRegistry, message: Any, options: dict[str, Any], expected: tr.ContextMessage
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ctx.defer_context(message, **options)
        return "ok"

    registry.register(make_tool(execute=body))
    result = await registry.execute(make_call())

    assert result.value == "ok"
    assert result.contexts == (expected,)
    assert type(result.contexts) is tuple
    assert type(result.contexts[0].content) is tuple


async def test_deferred_contexts_are_kept_when_the_body_raises(
    registry: tr.ToolRegistry,
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> None:
        ctx.defer_context("partial progress")
        raise RuntimeError("then it broke")

    registry.register(make_tool(execute=body))
    result = await registry.execute(make_call())

    assert result.is_error is True
    assert result.error == tr.ErrorInfo("then it broke", None, "RuntimeError")
    assert result.contexts == (context("partial progress", "t"),)


async def test_deferred_contexts_are_dropped_when_post_execute_blocks(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool(execute=deferring("deferred")))
    registry.post_execute(
        lambda execution, result, call_next: tr.Block("no", contexts=[context("why", "policy")])
    )
    result = await registry.execute(make_call())

    assert result.contexts == (context("why", "policy"),)


async def test_deferred_contexts_go_in_front_of_the_dispatch_results_own_contexts(
    registry: tr.ToolRegistry,
) -> None:
    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        result = await call_next()
        assert result.contexts == ()  # stage 9 comes after the around chain
        return tr.ToolResult(
            content=result.content, value=result.value, contexts=(context("from wrapper", "w"),)
        )

    registry.register(make_tool(execute=deferring("first", "second")))
    registry.around_execute(around)
    registry.post_execute(lambda execution, result, call_next: tr.Accept(contexts=[context("p")]))
    result = await registry.execute(make_call())

    assert result.contexts == (
        context("first", "t"), context("second", "t"), context("from wrapper", "w"), context("p"),
    )  # fmt: skip


async def test_post_execute_sees_the_deferred_contexts(registry: tr.ToolRegistry) -> None:
    seen: list[tuple[tr.ContextMessage, ...]] = []

    registry.register(make_tool(execute=deferring("note")))
    registry.post_execute(
        lambda execution, result, call_next: appended(seen, result.contexts, tr.Accept())
    )
    await registry.execute(make_call())

    assert seen == [(context("note", "t"),)]


async def test_contexts_deferred_by_every_invocation_of_a_retry_are_kept_in_order(
    registry: tr.ToolRegistry,
) -> None:
    attempts: list[int] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        attempts.append(1)
        ctx.defer_context(f"attempt {len(attempts)}")
        if len(attempts) == 1:
            raise RuntimeError("flaky")
        return "ok"

    async def retry(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        result = await call_next()
        return await call_next() if result.is_error else result

    registry.register(make_tool(execute=body))
    registry.around_execute(retry)
    result = await registry.execute(make_call())

    assert result.value == "ok"
    assert result.contexts == (context("attempt 1", "t"), context("attempt 2", "t"))


async def test_defer_context_and_conclude_turn_are_ignored_after_the_body_settles(
    registry: tr.ToolRegistry,
) -> None:
    contexts: list[tr.RunContext] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        contexts.append(ctx)
        return "ok"

    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        result = await call_next()
        contexts[0].defer_context("too late")
        contexts[0].conclude_turn()
        return result

    def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        contexts[0].defer_context("much too late")
        contexts[0].conclude_turn()
        return tr.Accept()

    registry.register(make_tool(execute=body))
    registry.around_execute(around)
    registry.post_execute(post)
    result = await registry.execute(make_call())

    assert result.contexts == ()
    assert result.concludes_turn is False


async def test_a_sync_body_may_defer_context_and_conclude_the_turn_from_its_worker_thread(
    registry: tr.ToolRegistry,
) -> None:
    def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ctx.defer_context("from a thread")
        ctx.conclude_turn()
        return "done"

    registry.register(make_tool(execute=body))
    result = await registry.execute(make_call())

    assert result.value == "done"
    assert result.contexts == (context("from a thread", "t"),)
    assert result.concludes_turn is True


async def test_conclude_turn_marks_a_success_as_concluding_the_turn(
    registry: tr.ToolRegistry,
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ctx.conclude_turn()
        return "final answer"

    registry.register(make_tool(execute=body))
    concluded = await registry.execute(make_call())
    registry.register(make_tool("plain"))
    plain = await registry.execute(make_call("plain"))

    assert concluded.concludes_turn is True
    assert concluded.is_error is False
    assert plain.concludes_turn is False


async def test_conclude_turn_does_not_mark_a_failure(registry: tr.ToolRegistry) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> None:
        ctx.conclude_turn()
        raise RuntimeError("failed anyway")

    registry.register(make_tool(execute=body))
    result = await registry.execute(make_call())

    assert_error(result, "failed anyway", None, "RuntimeError")


async def test_conclude_turn_marks_only_the_result_of_the_invocation_that_called_it(
    registry: tr.ToolRegistry,
) -> None:
    attempts: list[int] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> int:
        attempts.append(1)
        if len(attempts) == 1:
            ctx.conclude_turn()
        return len(attempts)

    async def keep(which: int, execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        results = [await call_next(), await call_next()]
        return results[which]

    registry.register(make_tool(execute=body))
    with registry.around_execute(lambda e, n: keep(1, e, n)):
        second = await registry.execute(make_call())
    attempts.clear()
    with registry.around_execute(lambda e, n: keep(0, e, n)):
        first = await registry.execute(make_call())

    assert (second.value, second.concludes_turn) == (2, False)
    assert (first.value, first.concludes_turn) == (1, True)


async def test_the_run_context_carries_the_executions_fields(registry: tr.ToolRegistry) -> None:
    seen: dict[str, Any] = {}
    parent_token: list[tr.ExecutionToken] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        seen["ctx"] = ctx
        return "ok"

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        seen.setdefault("executions", []).append(execution)
        return await call_next()

    async def outer(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        parent_token.append(ctx.token)
        scope = registry.scope("agent")
        result = await scope.execute(
            make_call("inner", call_id="c-inner", arguments={"x": [1]}, parent=ctx.token)
        )
        return result.text

    registry.register(make_tool("inner", execute=body))
    registry.register(make_tool("outer", execute=outer))
    registry.pre_execute(pre)
    await registry.execute(make_call("outer"))

    ctx = seen["ctx"]
    execution = seen["executions"][1]
    assert isinstance(ctx, tr.RunContext)
    assert isinstance(ctx, tr.Execution)
    assert ctx is not execution
    assert ctx.token is execution.token
    assert ctx.call_id == execution.call_id == "c-inner"
    assert ctx.name == execution.name == "inner"
    assert ctx.arguments == execution.arguments == {"x": (1,)}
    assert ctx.scope == execution.scope == "agent"
    assert ctx.parent is execution.parent is parent_token[0]
    assert isinstance(ctx.signal, tr.CancelSignal)


# ---- stage 10: post-execute ---------------------------------------------------------


async def test_the_innermost_post_execute_decision_is_accept_and_keeps_the_result(
    registry: tr.ToolRegistry,
) -> None:
    decisions: list[tr.PostDecision] = []
    seen: list[tr.ToolResult] = []

    async def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> Any:
        seen.append(result)
        decision = await call_next()
        decisions.append(decision)
        return decision

    registry.register(make_tool(execute=returning(tr.ToolOutput(value={"n": 1}, meta="m"))))
    registry.post_execute(post)
    result = await registry.execute(make_call())

    (decision,) = decisions
    assert isinstance(decision, tr.Accept)
    assert decision.content is None
    assert tuple(decision.contexts) == ()
    assert result == seen[0]
    assert result.value == {"n": 1}
    assert result.meta == "m"


async def test_post_execute_chain_runs_outermost_first_with_prepend_first(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    registry.register(make_tool())
    registry.post_execute(nesting(log, "a"))
    registry.post_execute(nesting(log, "b"))
    registry.post_execute(nesting(log, "first"), prepend=True)
    await registry.execute(make_call())

    assert log.events == ["first>", "a>", "b>", "b<", "a<", "first<"]


async def test_post_execute_call_next_awaited_twice_runs_the_rest_again(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    async def twice(
        execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision:
        await call_next()
        return await call_next()

    def inner(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        log("inner")
        return tr.Accept(content="inner " + str(len(log.events)))

    registry.register(make_tool())
    registry.post_execute(twice)
    registry.post_execute(inner)
    result = await registry.execute(make_call())

    assert log.events == ["inner", "inner"]
    assert result.content == (tr.TextContent("inner 2"),)


@pytest.mark.parametrize(
    ("replacement", "content"),
    [
        ("replaced", (tr.TextContent("replaced"),)),
        ([tr.TextContent("a"), IMAGE], (tr.TextContent("a"), IMAGE)),
        ((tr.TextContent("t"),), (tr.TextContent("t"),)),
        ([], ()),
    ],
)
async def test_accept_with_content_replaces_only_the_content(
    registry: tr.ToolRegistry, replacement: Any, content: tuple[tr.Content, ...]
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> tr.ToolOutput:
        ctx.defer_context("kept")
        ctx.conclude_turn()
        return tr.ToolOutput(value={"v": 1}, meta={"m": 2})

    registry.register(make_tool(execute=body))
    registry.post_execute(lambda execution, result, call_next: tr.Accept(content=replacement))
    result = await registry.execute(make_call())

    assert result.content == content
    assert result.value == {"v": 1}
    assert result.meta == {"m": 2}
    assert result.contexts == (context("kept", "t"),)
    assert result.concludes_turn is True
    assert result.is_error is False


async def test_accept_with_content_on_a_failure_keeps_it_a_failure(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(raising_tool(tr.ToolError("nope", code="X"), "async"))
    registry.post_execute(
        lambda execution, result, call_next: tr.Accept(content="friendlier words")
    )
    result = await registry.execute(make_call())

    assert result.is_error is True
    assert result.error == tr.ErrorInfo("nope", "X", "ToolError")
    assert result.content == (tr.TextContent("friendlier words"),)


@pytest.mark.parametrize(
    ("value", "content"),
    [
        ({"total": 3, "name": "Zoë"}, (tr.TextContent('{"total": 3, "name": "Zoë"}'),)),
        ("plain text", (tr.TextContent("plain text"),)),
        (None, ()),
        ([1, 2], (tr.TextContent("[1, 2]"),)),
    ],
)
async def test_accept_with_value_replaces_the_value_and_re_renders_the_content(
    registry: tr.ToolRegistry, value: Any, content: tuple[tr.Content, ...]
) -> None:
    registry.register(make_tool(execute=returning(tr.ToolOutput(value="old", meta="m"))))
    registry.post_execute(lambda execution, result, call_next: tr.Accept(value=value))
    result = await registry.execute(make_call())

    assert result.is_error is False
    assert result.value == (tuple(value) if isinstance(value, list) else value)
    assert result.content == content
    assert result.meta == "m"


async def test_accept_with_value_is_snapshotted_and_frozen(registry: tr.ToolRegistry) -> None:
    value: dict[str, Any] = {"rows": [{"id": 1}]}
    registry.register(make_tool())
    registry.post_execute(lambda execution, result, call_next: tr.Accept(value=value))
    result = await registry.execute(make_call())
    value["rows"].append({"id": 2})

    assert result.value == {"rows": ({"id": 1},)}
    assert type(result.value) is tr.FrozenDict


async def test_accept_with_value_satisfying_the_output_schema_is_kept(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool(execute=returning({"a": 1}), output_schema=NUMBER_SCHEMA))
    registry.post_execute(lambda execution, result, call_next: tr.Accept(value={"a": 2}))
    result = await registry.execute(make_call())

    assert result.value == {"a": 2}
    assert result.content == (tr.TextContent('{"a": 2}'),)


async def test_accept_with_value_violating_the_output_schema_is_a_final_error(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        ctx.defer_context("dropped")
        return {"a": 1}

    registry.register(make_tool(execute=body, output_schema=NUMBER_SCHEMA))
    registry.post_execute(lambda execution, result, call_next: tr.Accept(value={"a": "x"}))
    registry.on_result(lambda execution, result: log("observer"))
    result = await registry.execute(make_call())

    assert result.error is not None
    message = result.error.message
    assert message.startswith('tool "t" returned invalid output: ')
    assert_final_error(result, message, "INVALID_TOOL_OUTPUT", "ToolOutputError")
    assert log.events == ["observer"]


async def test_accept_with_a_value_that_is_not_lossless_is_a_final_invalid_output_error(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.post_execute(lambda execution, result, call_next: tr.Accept(value={"s": {1}}))
    result = await registry.execute(make_call())

    assert_final_error(
        result,
        'tool "t" returned invalid output: value is not lossless JSON: $.s is a set',
        "INVALID_TOOL_OUTPUT",
        "ToolOutputError",
    )


async def test_accept_with_a_value_too_deep_to_render_is_a_final_invalid_output_error(
    registry: tr.ToolRegistry,
) -> None:
    deep = deep_list(100_000)
    registry.register(make_tool())
    registry.post_execute(lambda execution, result, call_next: tr.Accept(value=deep))
    result = await registry.execute(make_call())

    assert result.error is not None
    message = result.error.message
    assert message.startswith(UNRENDERABLE)
    assert_final_error(result, message, "INVALID_TOOL_OUTPUT", "ToolOutputError")


async def test_accept_with_value_on_a_failed_result_is_a_final_error(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(raising_tool(RuntimeError("broken"), "async"))
    registry.post_execute(lambda execution, result, call_next: tr.Accept(value="rescued"))
    result = await registry.execute(make_call())

    assert_final_error(result, "post-execute cannot replace the value of a failed result")


async def test_accept_with_both_value_and_content_is_a_final_error(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.post_execute(lambda execution, result, call_next: tr.Accept(content="c", value="v"))
    result = await registry.execute(make_call())

    assert_final_error(result, "post-execute Accept cannot replace both value and content")


async def test_accept_contexts_are_appended_after_the_existing_contexts(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool(execute=deferring("deferred")))
    registry.post_execute(
        lambda execution, result, call_next: tr.Accept(contexts=[context("outer")])
    )
    registry.post_execute(
        lambda execution, result, call_next: tr.Accept(contexts=(context("inner"),))
    )
    result = await registry.execute(make_call())

    # the outer middleware's decision is the one that counts
    assert result.contexts == (context("deferred", "t"), context("outer"))
    assert result.value == "ok"


@pytest.mark.parametrize(
    ("feedback", "content", "message"),
    [
        ("not allowed to show this", (tr.TextContent("not allowed to show this"),),
         "not allowed to show this"),
        ([tr.TextContent("line 1"), IMAGE, tr.TextContent("line 2")],
         (tr.TextContent("line 1"), IMAGE, tr.TextContent("line 2")),
         "line 1\n[image content]\nline 2"),
        ((IMAGE,), (IMAGE,), "[image content]"),
        ("", (tr.TextContent("Error: tool result blocked by post-execute policy"),),
         "tool result blocked by post-execute policy"),
        ([], (tr.TextContent("Error: tool result blocked by post-execute policy"),),
         "tool result blocked by post-execute policy"),
    ],
    ids=["str", "blocks", "image-only", "empty-str", "empty-blocks"],
)  # fmt: skip
async def test_block_turns_the_result_into_a_blocked_failure(
    registry: tr.ToolRegistry, feedback: Any, content: tuple[tr.Content, ...], message: str
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> tr.ToolOutput:
        ctx.defer_context("deferred")
        ctx.conclude_turn()
        return tr.ToolOutput(value={"secret": 1}, meta={"m": 1})

    registry.register(make_tool(execute=body))
    registry.post_execute(lambda execution, result, call_next: tr.Block(feedback))
    result = await registry.execute(make_call())

    assert result.is_error is True
    assert result.content == content
    assert result.error == tr.ErrorInfo(message, "BLOCKED")
    assert result.value is None
    assert result.meta is None
    assert result.contexts == ()
    assert result.concludes_turn is False


async def test_block_keeps_only_its_own_contexts(registry: tr.ToolRegistry) -> None:
    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        result = await call_next()
        return tr.ToolResult(
            content=result.content, value=result.value, contexts=(context("wrapper"),)
        )

    registry.register(make_tool())
    registry.around_execute(around)
    registry.post_execute(
        lambda execution, result, call_next: tr.Block(
            "blocked", contexts=[context("policy 1"), context("policy 2")]
        )
    )
    result = await registry.execute(make_call())

    assert result.contexts == (context("policy 1"), context("policy 2"))
    assert result.error == tr.ErrorInfo("blocked", "BLOCKED")


async def test_block_applies_to_a_denial_too(registry: tr.ToolRegistry) -> None:
    registry.register(make_tool())
    registry.pre_execute(lambda execution, call_next: tr.Deny("denied"))
    registry.post_execute(lambda execution, result, call_next: tr.Block("rewritten"))
    result = await registry.execute(make_call())

    assert result.error == tr.ErrorInfo("rewritten", "BLOCKED")
    assert result.content == (tr.TextContent("rewritten"),)


@pytest.mark.parametrize(
    "value", [None, "accept", tr.Allow(), tr.Deny("x"), True, tr.ToolResult(content=())]
)
async def test_an_invalid_post_execute_return_is_a_final_error(
    registry: tr.ToolRegistry, log: Recorder, value: Any
) -> None:
    registry.register(make_tool(execute=deferring("dropped")))
    registry.post_execute(lambda execution, result, call_next: value)
    registry.on_result(lambda execution, result: log("observer"))
    result = await registry.execute(make_call())

    assert_final_error(result, f"post-execute middleware returned {value!r}, not Accept or Block")
    assert log.events == ["observer"]


async def test_an_invalid_post_execute_return_whose_repr_fails_is_named_by_its_type(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.post_execute(lambda execution, result, call_next: BadRepr())
    result = await registry.execute(make_call())

    assert_final_error(
        result, "post-execute middleware returned <BadRepr object>, not Accept or Block"
    )


async def test_a_raising_post_execute_middleware_is_a_final_error_with_its_message(
    registry: tr.ToolRegistry,
) -> None:
    async def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> Any:
        raise tr.ToolError("audit log unavailable", code="AUDIT")

    registry.register(make_tool(execute=deferring("dropped")))
    registry.post_execute(post)
    result = await registry.execute(make_call())

    assert_final_error(result, "audit log unavailable", "AUDIT", "ToolError")


async def test_a_scope_post_execute_sees_only_its_scopes_calls(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.scope("agent").post_execute(
        lambda execution, result, call_next: tr.Accept(content="scoped")
    )
    scoped = await registry.scope("agent").execute(make_call())
    unscoped = await registry.execute(make_call())
    other = await registry.execute(make_call(scope="other"))

    assert scoped.content == (tr.TextContent("scoped"),)
    assert unscoped.content == (tr.TextContent("ok"),)
    assert other.content == (tr.TextContent("ok"),)


# ---- stage 11: materialize ----------------------------------------------------------


def returning_result(result: tr.ToolResult) -> Callable[[tr.Execution, AroundNext], tr.ToolResult]:
    return lambda execution, call_next: result


async def test_a_failure_without_error_info_gets_one_from_its_text(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    content = (tr.TextContent("first"), IMAGE, tr.TextContent("second"))
    registry.around_execute(returning_result(tr.ToolResult(content=content, is_error=True)))
    result = await registry.execute(make_call())

    assert result.is_error is True
    assert result.error == tr.ErrorInfo("first\nsecond")
    assert result.content == content


async def test_a_failure_without_error_info_or_text_gets_an_empty_message(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.around_execute(returning_result(tr.ToolResult(content=(IMAGE,), is_error=True)))
    result = await registry.execute(make_call())

    assert result.error == tr.ErrorInfo("")


async def test_a_success_drops_its_error_info(registry: tr.ToolRegistry) -> None:
    registry.register(make_tool())
    registry.around_execute(
        returning_result(
            tr.ToolResult(content=(tr.TextContent("fine"),), error=tr.ErrorInfo("stale", "X"))
        )
    )
    result = await registry.execute(make_call())

    assert result.is_error is False
    assert result.error is None
    assert result.content == (tr.TextContent("fine"),)


async def test_a_failure_drops_its_value_and_concludes_turn(registry: tr.ToolRegistry) -> None:
    registry.register(make_tool())
    registry.around_execute(
        returning_result(
            tr.ToolResult(
                content=(tr.TextContent("Error: x"),),
                is_error=True,
                value=tr.snapshot_json({"partial": 1}),
                error=tr.ErrorInfo("x", "CODE", "Type"),
                meta=tr.snapshot_json({"kept": True}),
                concludes_turn=True,
            )
        )
    )
    result = await registry.execute(make_call())

    assert result.is_error is True
    assert result.value is None
    assert result.concludes_turn is False
    assert result.error == tr.ErrorInfo("x", "CODE", "Type")
    assert result.meta == {"kept": True}


async def test_a_wrapper_result_is_deep_frozen(registry: tr.ToolRegistry) -> None:
    registry.register(make_tool())
    registry.around_execute(
        returning_result(
            tr.ToolResult(
                content=cast(Any, [tr.TextContent("x")]),
                value=cast(Any, {"rows": [{"id": 1}]}),
                meta=cast(Any, ["m", {"k": [1]}]),
                contexts=cast(
                    Any,
                    [
                        tr.ContextMessage(
                            cast(Any, [tr.TextContent("c")]), "s", cast(Any, {"a": [1]})
                        )
                    ],
                ),
            )
        )
    )
    result = await registry.execute(make_call())

    assert result.is_error is False
    assert type(result.content) is tuple
    value = cast(tr.FrozenDict, result.value)
    assert type(value) is tr.FrozenDict
    assert type(value["rows"]) is tuple
    assert type(value["rows"][0]) is tr.FrozenDict
    assert type(result.meta) is tuple
    assert type(result.contexts) is tuple
    assert type(result.contexts[0].content) is tuple
    assert type(result.contexts[0].meta) is tr.FrozenDict
    assert result.value == {"rows": ({"id": 1},)}
    assert result.meta == ("m", {"k": (1,)})


@pytest.mark.parametrize(
    "result",
    [
        tr.ToolResult(content=(tr.TextContent("x"),), meta=cast(Any, {"when": dt.date.today()})),
        tr.ToolResult(content=(tr.TextContent("x"),), value=cast(Any, {1, 2})),
        tr.ToolResult(content=(tr.TextContent("x"),),
                      contexts=(tr.ContextMessage((), "s", cast(Any, float("nan"))),)),
        tr.ToolResult(content=(tr.TextContent("x"),), contexts=cast(Any, ["not a message"])),
        tr.ToolResult(content=cast(Any, ["not a block"])),
    ],
    ids=["meta", "value", "context-meta", "context", "content"],
)  # fmt: skip
async def test_a_result_that_is_not_lossless_json_becomes_an_error(
    registry: tr.ToolRegistry, result: tr.ToolResult
) -> None:
    registry.register(make_tool())
    registry.around_execute(returning_result(result))
    final = await registry.execute(make_call())

    assert_final_error(final, "tool result must be losslessly JSON-serializable")


async def test_tool_output_meta_that_is_not_lossless_json_makes_the_result_an_error(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool(execute=returning(tr.ToolOutput(value=1, meta={"s": {1}}))))
    result = await registry.execute(make_call())

    assert_error(result, "tool result must be losslessly JSON-serializable")


# ---- stage 12: finalize content -----------------------------------------------------


class Finalizer:
    """A ``finalize_content`` that records its calls and returns (or raises) ``out``."""

    def __init__(self, out: Any = None) -> None:
        self.out = out
        self.calls: list[tuple[tr.Execution, tr.ToolResult]] = []

    def __call__(self, execution: tr.Execution, result: tr.ToolResult) -> Any:
        self.calls.append((execution, result))
        if isinstance(self.out, Exception):
            raise self.out
        return self.out


async def test_finalize_content_runs_once_on_the_materialized_result_and_none_keeps_it(
    registry: tr.ToolRegistry,
) -> None:
    finalize = Finalizer(None)
    executions: list[tr.Execution] = []
    registry.register(make_tool(execute=returning({"a": [1]}), finalize_content=finalize))
    registry.on_result(lambda execution, result: executions.append(execution))

    result = await registry.execute(make_call())

    ((execution, seen),) = finalize.calls
    assert execution is executions[0]
    assert seen is result
    assert result.value == {"a": (1,)}
    assert type(seen.value) is tr.FrozenDict
    assert result.content == (tr.TextContent('{"a": [1]}'),)


async def test_finalize_content_sequence_replaces_only_the_content(
    registry: tr.ToolRegistry,
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> tr.ToolOutput:
        ctx.defer_context("kept")
        ctx.conclude_turn()
        return tr.ToolOutput(value={"v": 1}, meta="m")

    finalize = Finalizer([tr.TextContent("short"), IMAGE])
    registry.register(make_tool(execute=body, finalize_content=finalize))
    result = await registry.execute(make_call())

    assert result.content == (tr.TextContent("short"), IMAGE)
    assert type(result.content) is tuple
    assert result.value == {"v": 1}
    assert result.meta == "m"
    assert result.contexts == (context("kept", "t"),)
    assert result.concludes_turn is True
    assert len(finalize.calls) == 1


async def test_finalize_content_may_accept_any_sequence(registry: tr.ToolRegistry) -> None:
    finalize = Finalizer(ContentSequence(tr.TextContent("from a sequence")))
    registry.register(make_tool(finalize_content=finalize))
    result = await registry.execute(make_call())

    assert result.content == (tr.TextContent("from a sequence"),)


async def test_finalize_content_runs_on_denials_and_keeps_the_error(
    registry: tr.ToolRegistry,
) -> None:
    finalize = Finalizer([tr.TextContent("denied, try something else")])
    registry.register(make_tool(finalize_content=finalize))
    registry.pre_execute(lambda execution, call_next: tr.Deny("no"))
    result = await registry.execute(make_call())

    assert len(finalize.calls) == 1
    assert_error(finalize.calls[0][1], "no", "DENIED")
    assert result.is_error is True
    assert result.error == tr.ErrorInfo("no", "DENIED")
    assert result.content == (tr.TextContent("denied, try something else"),)


@pytest.mark.parametrize("failure", ["arguments", "pre", "guard", "around", "post"])
async def test_finalize_content_runs_once_on_final_errors(
    registry: tr.ToolRegistry, failure: str
) -> None:
    finalize = Finalizer(None)

    def fail(*args: Any) -> Any:
        raise RuntimeError(f"{failure} failed")

    registry.register(make_tool(finalize_content=finalize))
    if failure == "pre":
        registry.pre_execute(fail)
    elif failure == "guard":
        registry.guard(fail)
    elif failure == "around":
        registry.around_execute(fail)
    elif failure == "post":
        registry.post_execute(fail)
    arguments = {"bad": {1}} if failure == "arguments" else {}

    result = await registry.execute(make_call(arguments=arguments))

    assert len(finalize.calls) == 1
    assert finalize.calls[0][1] is result
    if failure == "arguments":
        assert_final_error(result, "tool call arguments must be losslessly JSON-serializable")
    else:
        assert_final_error(result, f"{failure} failed", None, "RuntimeError")


@pytest.mark.parametrize("out", ["text", 5, [5], [tr.TextContent("ok"), "no"], {"x": 1}, True])
async def test_finalize_content_returning_neither_none_nor_content_makes_the_result_an_error(
    registry: tr.ToolRegistry, out: Any
) -> None:
    finalize = Finalizer(out)
    seen: list[tr.ToolResult] = []
    registry.register(make_tool(finalize_content=finalize))
    registry.on_result(lambda execution, result: seen.append(result))
    result = await registry.execute(make_call())

    assert_error(result, f"finalize_content returned {out!r}, not None or a sequence of Content")
    assert len(finalize.calls) == 1
    assert seen == [result]


async def test_finalize_content_returning_a_value_whose_repr_fails_is_named_by_its_type(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool(finalize_content=Finalizer(BadRepr())))
    result = await registry.execute(make_call())

    assert_error(
        result, "finalize_content returned <BadRepr object>, not None or a sequence of Content"
    )


async def test_an_async_finalize_content_makes_the_result_an_error_and_is_closed(
    registry: tr.ToolRegistry,
) -> None:
    coroutines: list[Any] = []

    async def replacement() -> list[tr.Content]:
        return [tr.TextContent("never")]

    def finalize(execution: tr.Execution, result: tr.ToolResult) -> Any:
        coroutine = replacement()
        coroutines.append(coroutine)
        return coroutine

    registry.register(make_tool(finalize_content=finalize))
    result = await registry.execute(make_call())

    (coroutine,) = coroutines
    assert_error(
        result, f"finalize_content returned {coroutine!r}, not None or a sequence of Content"
    )
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED
    coroutines.clear()
    del coroutine
    gc.collect()  # an unclosed coroutine would warn "never awaited" here


@pytest.mark.parametrize(
    ("exc", "message", "code", "type_name"),
    [
        (RuntimeError("renderer crashed"), "renderer crashed", None, "RuntimeError"),
        (tr.ToolError("no render", code="RENDER"), "no render", "RENDER", "ToolError"),
        (Unprintable(), "<unprintable thrown value>", None, "Unprintable"),
    ],
)
async def test_a_raising_finalize_content_makes_the_result_its_error_and_is_not_called_again(
    registry: tr.ToolRegistry, exc: Exception, message: str, code: str | None, type_name: str
) -> None:
    finalize = Finalizer(exc)
    registry.register(make_tool(finalize_content=finalize))
    result = await registry.execute(make_call())

    assert_error(result, message, code, type_name)
    assert len(finalize.calls) == 1


# ---- stage 13: observers ------------------------------------------------------------


async def test_observers_run_in_registration_order_and_get_the_very_result_execute_returns(
    registry: tr.ToolRegistry,
) -> None:
    seen: list[tuple[str, tr.Execution, tr.ToolResult]] = []
    executions: list[tr.Execution] = []

    def observer(label: str) -> Callable[[tr.Execution, tr.ToolResult], None]:
        return lambda execution, result: seen.append((label, execution, result))

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        executions.append(execution)
        return await call_next()

    registry.register(make_tool())
    registry.pre_execute(pre)
    registry.on_result(observer("a"))
    registry.on_result(observer("b"))
    registry.on_result(observer("first"), prepend=True)
    result = await registry.execute(make_call())

    assert [label for label, _, _ in seen] == ["first", "a", "b"]
    for _, execution, observed in seen:
        assert observed is result
        assert execution is executions[0]


async def test_observers_run_synchronously_before_execute_returns(
    registry: tr.ToolRegistry,
) -> None:
    seen: list[str] = []
    registry.register(make_tool())
    registry.on_result(lambda execution, result: seen.append(execution.call_id))

    await registry.execute(make_call(call_id="x"))

    assert seen == ["x"]


async def test_observers_are_filtered_by_scope(registry: tr.ToolRegistry, log: Recorder) -> None:
    registry.register(make_tool())
    agent = registry.scope("agent")
    registry.on_result(lambda execution, result: log(f"global:{execution.call_id}"))
    agent.on_result(lambda execution, result: log(f"agent:{execution.call_id}"))
    registry.scope("other").on_result(lambda execution, result: log(f"other:{execution.call_id}"))
    agent.on_result(lambda e, r: log(f"all:{e.call_id}"), all_scopes=True)

    await agent.execute(make_call(call_id="a"))
    await registry.execute(make_call(call_id="n"))

    assert log.events == ["global:a", "agent:a", "all:a", "global:n", "all:n"]


async def test_a_raising_observer_is_logged_once_and_later_observers_still_run(
    registry: tr.ToolRegistry, log: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(execution: tr.Execution, result: tr.ToolResult) -> None:
        raise RuntimeError("metrics backend down")

    registry.register(make_tool("search"))
    registry.on_result(broken)
    registry.on_result(lambda execution, result: log("after"))

    with caplog.at_level(logging.WARNING, logger="toolrail"):
        result = await registry.execute(make_call("search", call_id="call-7"))

    assert result.value == "ok"
    assert log.events == ["after"]
    records = [r for r in caplog.records if r.name == "toolrail"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.WARNING, 'tool "search" (call-7): result observer failed: metrics backend down')
    ]


async def test_observer_failures_are_logged_on_the_registrys_own_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("tests.pipeline.custom")
    registry = tr.ToolRegistry(logger=logger)
    registry.register(make_tool())

    def unprintable(execution: tr.Execution, result: tr.ToolResult) -> None:
        raise Unprintable

    def empty(execution: tr.Execution, result: tr.ToolResult) -> None:
        raise KeyError

    registry.on_result(unprintable)
    registry.on_result(empty)

    with caplog.at_level(logging.WARNING):
        await registry.execute(make_call(call_id="c1"))

    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("tests.pipeline.custom", logging.WARNING,
         'tool "t" (c1): result observer failed: <unprintable thrown value>'),
        ("tests.pipeline.custom", logging.WARNING,
         'tool "t" (c1): result observer failed: KeyError'),
    ]  # fmt: skip


async def test_an_async_observer_is_closed_and_logged_as_a_mistake(
    registry: tr.ToolRegistry, log: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    coroutines: list[Any] = []

    async def never_runs() -> None:
        log("async observer body")

    def async_observer(execution: tr.Execution, result: tr.ToolResult) -> Any:
        coroutine = never_runs()
        coroutines.append(coroutine)
        return coroutine

    async def async_def_observer(execution: tr.Execution, result: tr.ToolResult) -> None:
        log("async def observer body")

    registry.register(make_tool())
    registry.on_result(async_observer)
    registry.on_result(cast(Any, async_def_observer))
    registry.on_result(lambda execution, result: log("sync observer"))

    with caplog.at_level(logging.WARNING, logger="toolrail"):
        result = await registry.execute(make_call(call_id="c2"))

    assert result.value == "ok"
    assert log.events == ["sync observer"]
    assert inspect.getcoroutinestate(coroutines[0]) == inspect.CORO_CLOSED
    message = 'tool "t" (c2): result observer failed: observers must be synchronous'
    assert [r.getMessage() for r in caplog.records if r.name == "toolrail"] == [message, message]
    coroutines.clear()
    gc.collect()  # an unclosed coroutine would warn "never awaited" here


async def test_an_observer_returning_a_future_has_it_cancelled_and_logged(
    registry: tr.ToolRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    futures: list[asyncio.Future[None]] = []

    def observer(execution: tr.Execution, result: tr.ToolResult) -> Any:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        futures.append(future)
        return future

    registry.register(make_tool())
    registry.on_result(observer)

    with caplog.at_level(logging.WARNING, logger="toolrail"):
        await registry.execute(make_call())

    assert futures[0].cancelled()
    assert [r.getMessage() for r in caplog.records if r.name == "toolrail"] == [
        'tool "t" (c1): result observer failed: observers must be synchronous'
    ]


class StopEverything(BaseException):
    pass


async def test_a_base_exception_from_an_observer_propagates_at_once(
    registry: tr.ToolRegistry, log: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    def stop(execution: tr.Execution, result: tr.ToolResult) -> None:
        log("stop")
        raise StopEverything

    registry.register(make_tool())
    registry.on_result(lambda execution, result: log("before"))
    registry.on_result(stop)
    registry.on_result(lambda execution, result: log("after"))

    with caplog.at_level(logging.DEBUG), pytest.raises(StopEverything):
        await registry.execute(make_call())

    assert log.events == ["before", "stop"]
    assert caplog.records == []


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
