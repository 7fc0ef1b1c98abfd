"""pipeline.md "Cancellation", outcomes most specific first: "cancelled before the body was
invoked, and prepare did not end in a denial or a failure" -> ``ABORTED_BEFORE_DISPATCH``.

A call cancelled before its body was invoked gets ``tool call aborted before dispatch``
(code ``ABORTED_BEFORE_DISPATCH``, type ``ToolAbortedError``) unless its arguments fail
the snapshot or prepare ended in a denial or a failure; it skips every remaining
middleware stage but still goes through finalize content and one observer
notification. The same rule in a batch (scheduler.md "Cancellation"):
test_already_cancelled_when_the_batch_starts.py, test_the_batch_signal_fires_mid_batch.py
and test_leaving_a_stream_early.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import toolrail as tr
from cancellation_helpers import Recorder, logging_body, make_call, record_post, registry_for
from helpers import ABORTED_BEFORE, CallNext, PreNext, assert_error, observe, within
from scheduler_cancellation_helpers import Lab, assert_aborted, assert_aborted_before_dispatch, call


async def no_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
    raise AssertionError("a denied or failed call has no body")


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


async def test_a_call_whose_dispatch_began_but_body_never_ran_is_aborted_before_dispatch() -> None:
    lab = Lab()
    controller = tr.CancelController()
    holding = asyncio.Event()
    hold = asyncio.Event()

    async def around(
        execution: tr.Execution, call_next: Callable[[], Awaitable[tr.ToolResult]]
    ) -> tr.ToolResult:
        if execution.call_id == "c1":
            holding.set()
            await within(hold.wait())
        return await call_next()

    lab.registry.around_execute(around)
    stream = lab.registry.stream([call(0), call(1)], signal=controller.signal)

    async with contextlib.aclosing(stream):
        pending = asyncio.ensure_future(stream.__anext__())
        await lab.wait_started("c0")
        await within(holding.wait())
        controller.cancel()
        hold.set()
        items = [await within(pending)]
        items += [item async for item in stream]

    assert [item.started for item in items] == [True, False]
    assert_aborted(items[0].result)
    assert_aborted_before_dispatch(items[1].result)
    assert sorted(lab.starts()) == ["c0"]
    assert "post c1" not in lab.stages

