"""The execute pipeline: asking for approval (spec: pipeline.md, "Approval")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

import toolrail as tr
from helpers import (
    PostNext,
    PreNext,
    Recorder,
    appended,
    asking,
    assert_error,
    assert_final_error,
    install_every_stage,
    make_call,
    make_tool,
    recording_body,
    until,
    within,
)

# ---- approval -----------------------------------------------------------------------


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
