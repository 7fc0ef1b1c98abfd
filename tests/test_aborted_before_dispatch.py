"""The rule "aborted before dispatch" in one place (spec: pipeline.md, "Cancellation",
its outcomes most specific first; scheduler.md, "Cancellation").

A call cancelled before its body was invoked gets ``tool call aborted before dispatch``
(code ``ABORTED_BEFORE_DISPATCH``, type ``ToolAbortedError``) unless its arguments fail
the snapshot or prepare ended in a denial or a failure; it skips every remaining
middleware stage but still goes through finalize content and one observer
notification. In a batch, every call not started when the signal fires gets it, and
``Committed.started`` is ``False`` for exactly those calls.

How bodies that did run see a cancellation (``ABORTED``): test_cancellation*.py and
test_scheduler_cancellation.py.
"""

from __future__ import annotations

import toolrail as tr
from cancellation_helpers import Recorder, logging_body, make_call, record_post, registry_for
from helpers import (
    ABORTED_BEFORE,
    CallNext,
    PreNext,
    assert_error,
    observe,
)


async def no_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
    raise AssertionError("a denied or failed call has no body")


# ---- before the body: stages 2-8 -------------------------------------------------------


async def test_a_call_cancelled_before_execute_is_aborted_before_dispatch() -> None:
    ran: list[str] = []
    finalized: list[tr.ToolResult] = []

    def finalize(execution: tr.Execution, result: tr.ToolResult) -> None:
        finalized.append(result)

    registry = registry_for(logging_body(ran), finalize_content=finalize)
    stages = Recorder(registry)
    seen = observe(registry)
    controller = tr.CancelController()
    controller.cancel()

    result = await registry.execute(make_call(controller.signal))

    assert_error(result, ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError")
    assert ran == []
    assert stages.ran == []
    assert len(finalized) == 1
    assert finalized[0].error == result.error
    assert len(seen) == 1
    assert seen[0][1] is result


async def test_finalize_content_may_replace_the_content_of_an_abort_before_dispatch() -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        return "done"

    def finalize(execution: tr.Execution, result: tr.ToolResult) -> list[tr.Content]:
        return [tr.TextContent("the call was stopped")]

    registry = registry_for(body, finalize_content=finalize)
    controller = tr.CancelController()
    controller.cancel()

    result = await registry.execute(make_call(controller.signal))

    assert result.content == (tr.TextContent("the call was stopped"),)
    assert result.error == tr.ErrorInfo(
        ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError"
    )


async def test_arguments_that_are_not_lossless_win_over_cancellation() -> None:
    ran: list[str] = []

    registry = registry_for(logging_body(ran))
    stages = Recorder(registry)
    seen = observe(registry)
    controller = tr.CancelController()
    controller.cancel()

    result = await registry.execute(make_call(controller.signal, arguments={"x": object()}))

    assert_error(result, "tool call arguments must be losslessly JSON-serializable", None, None)
    assert ran == []
    assert stages.ran == []
    assert len(seen) == 1
    arguments: object = seen[0][0].arguments
    assert arguments is tr.MISSING


async def test_cancelling_during_pre_execute_then_allowing_aborts_before_dispatch() -> None:
    ran: list[str] = []
    controller = tr.CancelController()

    def cancel_then_allow(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        controller.cancel()
        return tr.Allow()

    registry = registry_for(logging_body(ran))
    registry.pre_execute(cancel_then_allow)
    stages = Recorder(registry)
    seen = observe(registry)

    result = await registry.execute(make_call(controller.signal))

    assert_error(result, ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError")
    assert ran == []
    assert "around" not in stages.ran
    assert "post" not in stages.ran
    assert len(seen) == 1


async def test_a_pre_execute_denial_settling_after_cancellation_stays_the_denial() -> None:
    controller = tr.CancelController()

    def cancel_then_deny(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        controller.cancel()
        return tr.Deny("not now")

    registry = registry_for(no_body)
    registry.pre_execute(cancel_then_deny)
    post_saw = record_post(registry)
    seen = observe(registry)

    result = await registry.execute(make_call(controller.signal))

    assert_error(result, "not now", "DENIED", None)
    assert [r.error for r in post_saw] == [tr.ErrorInfo("not now", "DENIED", None)]
    assert len(seen) == 1


async def test_a_pre_execute_failure_settling_after_cancellation_stays_the_failure() -> None:
    controller = tr.CancelController()

    def cancel_then_fail(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        controller.cancel()
        raise tr.ToolError("policy store is down", code="POLICY_DOWN")

    registry = registry_for(no_body)
    registry.pre_execute(cancel_then_fail)

    result = await registry.execute(make_call(controller.signal))

    assert_error(result, "policy store is down", "POLICY_DOWN", "ToolError")


async def test_a_guard_denial_after_cancellation_stays_the_denial() -> None:
    controller = tr.CancelController()

    def cancel_then_deny(execution: tr.Execution) -> str | None:
        controller.cancel()
        return "guard says no"

    registry = registry_for(no_body)
    registry.guard(cancel_then_deny)

    result = await registry.execute(make_call(controller.signal))

    assert_error(result, "guard says no", "DENIED", None)


async def test_a_guard_denial_stays_the_denial_when_pre_execute_cancelled_first() -> None:
    controller = tr.CancelController()

    def cancel_then_allow(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        controller.cancel()
        return tr.Allow()

    registry = registry_for(no_body)
    registry.pre_execute(cancel_then_allow)
    registry.guard(lambda execution: "guard says no")

    result = await registry.execute(make_call(controller.signal))

    assert_error(result, "guard says no", "DENIED", None)


async def test_cancelling_in_around_execute_before_call_next_aborts_before_dispatch() -> None:
    ran: list[str] = []
    around_saw: list[tr.ToolResult] = []
    controller = tr.CancelController()

    async def cancel_then_continue(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        controller.cancel()
        result = await call_next()
        around_saw.append(result)
        return result

    registry = registry_for(logging_body(ran))
    registry.around_execute(cancel_then_continue)
    post_saw = record_post(registry)
    seen = observe(registry)

    result = await registry.execute(make_call(controller.signal))

    assert_error(result, ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError")
    assert ran == []
    assert [r.error for r in around_saw] == [
        tr.ErrorInfo(ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError")
    ]
    assert post_saw == []
    assert len(seen) == 1
