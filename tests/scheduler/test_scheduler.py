"""Running one model step's calls: ``run`` and ``stream`` (scheduler.md).

Results and contexts, argument errors, scope binding, ``stream`` and ``Committed``,
ownership and ``CallStream.batch``. Groups and the pool: test_scheduler_pool.py.
Cancellation: tests/cancellation/ (one file per bullet of scheduler.md "Cancellation");
failures of the scheduler itself: test_scheduler_failures.py.

Overlap and order are proven with ``asyncio.Event`` gates (every wait bounded by
``asyncio.wait_for(..., 5)``), never with sleeps: tool bodies record their start in a
log and wait on a per-call gate the test opens; an observer records each commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable
from typing import Any

import pytest

import toolrail as tr
from helpers import assert_error, exactly, one_turn, raw_tool, within
from scheduler_helpers import Lab, PostNext, PreNext, call, make_tool

ABORTED_BEFORE = "tool call aborted before dispatch"


MAX_PARALLEL_ERROR = "max_parallel must be a positive integer"


def texts(contexts: tuple[tr.ContextMessage, ...]) -> list[str]:
    out: list[str] = []
    for message in contexts:
        for block in message.content:
            assert isinstance(block, tr.TextContent)
            out.append(block.text)
    return out


# ---- results and contexts -----------------------------------------------------------


async def test_results_are_in_model_order_whatever_order_the_bodies_finish() -> None:
    lab = Lab()
    lab.add()
    calls = [call(i) for i in range(4)]
    task = asyncio.create_task(lab.registry.run(calls))
    await lab.wait_started("c0", "c1", "c2", "c3")
    for cid in ("c3", "c2", "c1", "c0"):
        lab.release(cid)
        await within(lab.finished[cid].wait())

    batch = await within(task)

    assert isinstance(batch, tr.Batch)
    assert [r.value for r in batch.results] == ["c0", "c1", "c2", "c3"]
    assert [r.content for r in batch.results] == [(tr.TextContent(f"c{i}"),) for i in range(4)]
    assert batch.cancelled is False
    assert batch.concludes_turn is False


async def test_batch_contexts_are_every_results_contexts_concatenated_in_model_order() -> None:
    lab = Lab()
    lab.add(defer=True)

    async def failing(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ctx.defer_context(f"from {ctx.call_id}")
        await within(lab.gates[ctx.call_id].wait())
        raise tr.ToolError("broke")

    lab.registry.register(make_tool("failing", failing))

    async def post(
        execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision:
        source = "plugin:test"
        note = tr.ContextMessage((tr.TextContent(f"post {execution.call_id}"),), source)
        return tr.Accept(contexts=[note])

    lab.registry.post_execute(post)
    calls = [call(0), call(1, "failing"), call(2)]
    task = asyncio.create_task(lab.registry.run(calls))
    await lab.wait_started("c0", "c2")
    lab.release("c2", "c1", "c0")

    batch = await within(task)

    assert texts(batch.contexts) == [
        "from c0", "post c0", "from c1", "post c1", "from c2", "post c2",
    ]  # fmt: skip
    assert batch.contexts == tuple(c for r in batch.results for c in r.contexts)
    assert batch.results[1].error == tr.ErrorInfo("broke", "TOOL_ERROR", "ToolError")


async def test_batch_concludes_turn_when_any_success_concluded_and_later_calls_still_run() -> None:
    lab = Lab()
    lab.add(gated=False)

    async def final(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ctx.conclude_turn()
        return "the answer"

    lab.registry.register(make_tool("final", final, safe=False))
    calls = [call(0), call(1, "final"), call(2), call(3)]

    batch = await within(lab.registry.run(calls))

    assert batch.concludes_turn is True
    assert [r.concludes_turn for r in batch.results] == [False, True, False, False]
    assert [r.is_error for r in batch.results] == [False] * 4
    assert batch.results[3].value == "c3"
    assert lab.starts() == ["c0", "c2", "c3"]
    assert lab.commits() == ["c0", "c1", "c2", "c3"]


async def test_batch_does_not_conclude_turn_when_only_a_failure_asked_to() -> None:
    registry = tr.ToolRegistry()

    async def gives_up(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ctx.conclude_turn()
        raise tr.ToolError("could not finish")

    registry.register(make_tool("gives_up", gives_up))

    batch = await within(registry.run([call(0, "gives_up"), call(1, "gives_up")]))

    assert batch.concludes_turn is False
    assert [r.concludes_turn for r in batch.results] == [False, False]


async def test_every_call_gets_exactly_one_result_and_one_notification_in_model_order() -> None:
    lab = Lab()
    lab.add(gated=False)

    async def broken(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        raise RuntimeError("body broke")

    lab.registry.register(make_tool("broken", broken))
    lab.registry.guard(lambda e: "not c2" if e.call_id == "c2" else None)

    def pre(execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        if execution.call_id == "c5":
            raise ValueError("pre broke")
        return call_next()

    lab.registry.pre_execute(pre)

    def post(
        execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision | Awaitable[tr.PostDecision]:
        if execution.call_id == "c6":
            return tr.Block("blocked c6")
        return call_next()

    lab.registry.post_execute(post)
    calls = [
        call(0),
        call(1, "missing"),
        call(2),
        call(3, "broken"),
        call(4, arguments={"x": float("nan")}),
        call(5),
        call(6),
        call(7),
    ]

    batch = await within(lab.registry.run(calls))

    assert len(batch.results) == len(calls)
    assert lab.commits() == [c.call_id for c in calls]
    for (_, seen), result in zip(lab.notified, batch.results, strict=True):
        assert seen is result
    results = batch.results
    assert results[0].value == "c0"
    assert_error(results[1], 'unknown tool "missing"', "UNKNOWN_TOOL", "ToolNotFoundError")
    assert_error(results[2], "not c2", "DENIED", None)
    assert_error(results[3], "body broke", None, "RuntimeError")
    message = "tool call arguments must be losslessly JSON-serializable"
    assert_error(results[4], message, None, None)
    assert_error(results[5], "pre broke", None, "ValueError")
    assert results[6].error == tr.ErrorInfo("blocked c6", "BLOCKED")
    assert results[7].value == "c7"


async def test_an_empty_call_list_gives_an_empty_batch() -> None:
    lab = Lab()
    lab.add()

    batch = await within(lab.registry.run([]))

    assert batch == tr.Batch(results=(), contexts=(), cancelled=False, concludes_turn=False)
    assert lab.notified == []


async def test_an_empty_stream_yields_nothing() -> None:
    registry = tr.ToolRegistry()
    async with contextlib.aclosing(registry.stream([])) as stream:
        items = [item async for item in stream]
    assert items == []


async def test_run_takes_any_iterable_of_calls() -> None:
    lab = Lab()
    lab.add(gated=False)

    batch = await within(lab.registry.run(call(i) for i in range(3)))

    assert [r.value for r in batch.results] == ["c0", "c1", "c2"]


# ---- argument errors ------------------------------------------------------------------

BAD_MAX_PARALLEL = [0, -1, True, False, 1.5, "2", None, 2.0]


@pytest.mark.parametrize("bad", BAD_MAX_PARALLEL, ids=repr)
async def test_run_rejects_a_max_parallel_that_is_not_a_positive_int_when_awaited(bad: Any) -> None:
    lab = Lab()
    lab.add(gated=False)
    ran: list[str] = []

    def pre(execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        ran.append("pre")
        return call_next()

    lab.registry.pre_execute(pre)

    pending = lab.registry.run([call(0)], max_parallel=bad)  # creating it does not raise
    with pytest.raises(ValueError, match=exactly(MAX_PARALLEL_ERROR)):
        await pending

    assert ran == []
    assert lab.log == []
    assert lab.notified == []


@pytest.mark.parametrize("bad", BAD_MAX_PARALLEL, ids=repr)
def test_stream_rejects_a_max_parallel_that_is_not_a_positive_int_when_called(bad: Any) -> None:
    lab = Lab()
    lab.add(gated=False)

    with pytest.raises(ValueError, match=exactly(MAX_PARALLEL_ERROR)):
        lab.registry.stream([call(0)], max_parallel=bad)

    assert lab.notified == []


async def test_scope_run_and_stream_reject_a_bad_max_parallel_the_same_way() -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")
    pending = scope.run([], max_parallel=0)
    with pytest.raises(ValueError, match=exactly(MAX_PARALLEL_ERROR)):
        await pending
    with pytest.raises(ValueError, match=exactly(MAX_PARALLEL_ERROR)):
        scope.stream([], max_parallel=True)


# ---- scopes ---------------------------------------------------------------------------


def scoped_lab() -> tuple[tr.ToolRegistry, tr.Scope, list[tr.Execution]]:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent")

    async def where(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        return f"{ctx.call_id} in {ctx.scope}"

    scope.register(make_tool("mine", where))
    seen: list[tr.Execution] = []
    scope.on_result(lambda execution, result: seen.append(execution), all_scopes=True)
    return registry, scope, seen


async def test_scope_run_binds_unscoped_calls_to_the_scope() -> None:
    _, scope, seen = scoped_lab()

    batch = await within(scope.run([call(0, "mine"), call(1, "mine", scope="agent")]))

    assert [r.value for r in batch.results] == ["c0 in agent", "c1 in agent"]
    assert [(e.call_id, e.scope) for e in seen] == [("c0", "agent"), ("c1", "agent")]


async def test_scope_stream_binds_unscoped_calls_to_the_scope() -> None:
    _, scope, seen = scoped_lab()

    async with contextlib.aclosing(scope.stream([call(0, "mine"), call(1, "mine")])) as stream:
        items = [item async for item in stream]

    assert [item.result.value for item in items] == ["c0 in agent", "c1 in agent"]
    assert [item.index for item in items] == [0, 1]
    assert [(e.call_id, e.scope) for e in seen] == [("c0", "agent"), ("c1", "agent")]


async def test_scope_run_rejects_a_call_naming_another_scope_before_any_call_runs() -> None:
    registry, scope, seen = scoped_lab()
    registry.scope("other")
    calls = [call(0, "mine"), call(1, "mine", scope="other")]

    pending = scope.run(calls)
    with pytest.raises(ValueError):  # noqa: PT011 - the spec fixes no message
        await pending

    assert seen == []


def test_scope_stream_rejects_a_call_naming_another_scope_when_called() -> None:
    _, scope, seen = scoped_lab()
    calls = [call(0, "mine"), call(1, "mine", scope="other")]

    with pytest.raises(ValueError):  # noqa: PT011 - the spec fixes no message
        scope.stream(calls)

    assert seen == []


# ---- stream and Committed ---------------------------------------------------------------


async def test_stream_yields_each_committed_in_model_order_as_soon_as_it_commits() -> None:
    lab = Lab()
    lab.add()
    calls = [call(0), call(1), call(2)]
    lab.release("c0")

    async with contextlib.aclosing(lab.registry.stream(calls)) as stream:
        first = await within(stream.__anext__())
        assert lab.commits() == ["c0"]
        assert not lab.finished["c1"].is_set()  # yielded while c1 still runs
        lab.release("c2")
        await within(lab.finished["c2"].wait())
        lab.release("c1")
        second = await within(stream.__anext__())
        third = await within(stream.__anext__())
        with pytest.raises(StopAsyncIteration):
            await within(stream.__anext__())

    for index, item in enumerate((first, second, third)):
        assert isinstance(item, tr.Committed)
        assert item.index == index
        assert item.call is calls[index]
        assert item.result is lab.notified[index][1]
        assert item.result.value == f"c{index}"
        assert item.started is True


async def test_a_stream_runs_nothing_until_its_first_anext() -> None:
    lab = Lab()
    lab.add(gated=False)
    stream = lab.registry.stream([call(0), call(1)])
    await one_turn()
    assert lab.log == []

    async with contextlib.aclosing(stream):
        items = [item.result.value async for item in stream]

    assert items == ["c0", "c1"]


async def test_committed_started_is_true_for_calls_denied_or_failed_in_prepare() -> None:
    lab = Lab()
    lab.add(gated=False)
    lab.registry.guard(lambda e: "denied" if e.call_id == "c0" else None)

    def pre(execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        if execution.call_id == "c1":
            raise RuntimeError("pre broke")
        return call_next()

    lab.registry.pre_execute(pre)
    stopped = tr.CancelController()
    stopped.cancel()
    calls = [
        call(0),
        call(1),
        call(2, "missing"),
        call(3, arguments={"x": float("nan")}),
        call(4, signal=stopped.signal),
        call(5),
    ]

    async with contextlib.aclosing(lab.registry.stream(calls)) as stream:
        items = [item async for item in stream]

    assert [item.index for item in items] == [0, 1, 2, 3, 4, 5]
    assert [item.started for item in items] == [True, True, True, True, False, True]
    assert items[0].result.error == tr.ErrorInfo("denied", "DENIED")
    assert_error(items[4].result, ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError")
    assert items[5].result.value == "c5"


def test_batch_and_committed_are_frozen_slotted_values_with_the_spec_fields() -> None:
    result = tr.ToolResult((tr.TextContent("ok"),))
    batch = tr.Batch((result,), (), False, True)
    item = tr.Committed(0, call(0), result, True)

    assert [f.name for f in dataclasses.fields(tr.Batch)] == [
        "results", "contexts", "cancelled", "concludes_turn",
    ]  # fmt: skip
    assert [f.name for f in dataclasses.fields(tr.Committed)] == [
        "index", "call", "result", "started",
    ]  # fmt: skip
    assert hasattr(tr.Batch, "__slots__")
    assert hasattr(tr.Committed, "__slots__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.cancelled = True  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.started = False  # type: ignore[misc]


async def test_stream_used_with_aclosing_and_async_for_yields_every_call() -> None:
    lab = Lab()
    lab.add(gated=False)
    lab.add("solo", safe=False, gated=False)
    calls = [call(0), call(1, "solo"), call(2), call(3)]

    async with contextlib.aclosing(lab.registry.stream(calls)) as stream:
        assert isinstance(stream, tr.CallStream)
        items = [item async for item in stream]

    assert [(item.index, item.result.value) for item in items] == [
        (0, "c0"), (1, "c1"), (2, "c2"), (3, "c3"),
    ]  # fmt: skip
    assert lab.commits() == ["c0", "c1", "c2", "c3"]


# ---- ownership --------------------------------------------------------------------------


async def test_nothing_the_batch_started_is_still_running_when_run_returns() -> None:
    lab = Lab()
    lab.add()

    async def polite(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        await within(lab.gates[ctx.call_id].wait())
        return "polite"

    def threaded(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        return "threaded"

    lab.registry.register(make_tool("polite", polite, cancellation="cooperative"))
    lab.registry.register(raw_tool("threaded", threaded, concurrency_safe=True))
    before = asyncio.all_tasks()
    task = asyncio.create_task(
        lab.registry.run([call(0), call(1, "polite"), call(2, "threaded"), call(3)])
    )
    await lab.wait_started("c0", "c3")
    lab.release("c0", "c1", "c3")
    batch = await within(task)

    assert asyncio.all_tasks() == before
    assert [r.value for r in batch.results] == ["c0", "polite", "threaded", "c3"]


def c1_held_in_pre_execute_until_c0_finishes() -> Lab:
    """A lab whose c0 is released at once and whose c1 waits in pre-execute until c0's
    body has finished; c1's body stays gated."""
    lab = Lab()
    lab.add()
    lab.release("c0")

    async def hold_c1(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        if execution.call_id == "c1":
            await lab.finished["c0"].wait()
        return await call_next()

    lab.registry.pre_execute(hold_c1)
    return lab


async def test_a_settled_call_commits_while_the_last_call_of_the_batch_still_runs() -> None:
    # Issue 12: c0 settles while c1 (the last call) is in pre-execute; c1 then blocks.
    # c0 must be yielded before c1 ends: each call commits once it and every earlier
    # call have settled.
    lab = c1_held_in_pre_execute_until_c0_finishes()
    async with contextlib.aclosing(lab.registry.stream([call(0), call(1)], max_parallel=2)) as s:
        first = await within(s.__anext__())
        assert first.index == 0
        assert lab.commits() == ["c0"]
        assert "end c1" not in lab.log  # committed while c1's body still runs
        lab.release("c1")
        second = await within(s.__anext__())
    assert second.result.value == "c1"


async def test_run_commits_a_settled_call_before_the_last_body_ends() -> None:
    lab = c1_held_in_pre_execute_until_c0_finishes()
    batch = asyncio.ensure_future(lab.registry.run([call(0), call(1)], max_parallel=2))
    await within(lab.started["c1"].wait())
    for _ in range(3):
        await one_turn()
    assert lab.commits() == ["c0"]
    lab.release("c1")
    assert [r.value for r in (await within(batch)).results] == ["c0", "c1"]


# ---- CallStream.batch ---------------------------------------------------------------


async def test_an_exhausted_streams_batch_is_the_batch_run_would_have_returned() -> None:
    lab = Lab()
    lab.add(gated=False, defer=True)
    calls = [call(0), call(1), call(2)]
    stream = lab.registry.stream(calls)
    async with contextlib.aclosing(stream):
        items = [item async for item in stream]
    batch = stream.batch
    assert isinstance(batch, tr.Batch)
    assert batch.results == tuple(item.result for item in items)
    assert texts(batch.contexts) == ["from c0", "from c1", "from c2"]
    assert batch.cancelled is False
    assert batch.concludes_turn is False
    ran = await lab.registry.run(calls)
    assert [r.value for r in ran.results] == [r.value for r in batch.results]
    assert stream.batch == batch  # the same value each time it is read


async def test_a_stream_closed_early_has_a_batch_with_every_call_and_cancelled_set() -> None:
    lab = Lab()
    lab.add(gated=False)
    stream = lab.registry.stream([call(0), call(1), call(2)], max_parallel=1)
    async with contextlib.aclosing(stream):
        async for _ in stream:
            break
    batch = stream.batch
    assert batch.cancelled is True
    assert batch.results[0].value == "c0"
    for result in batch.results[1:]:
        assert_error(result, ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError")


async def test_reading_a_streams_batch_before_it_is_exhausted_raises() -> None:
    lab = Lab()
    lab.add(gated=False)
    stream = lab.registry.stream([call(0), call(1)])
    with pytest.raises(RuntimeError, match=exactly(
            "CallStream.batch is available once the stream is exhausted or closed")):
        _ = stream.batch
    async with contextlib.aclosing(stream):
        await within(stream.__anext__())
        with pytest.raises(RuntimeError, match="once the stream is exhausted or closed"):
            _ = stream.batch
        await within(stream.__anext__())
        with pytest.raises(RuntimeError, match="once the stream is exhausted or closed"):
            _ = stream.batch  # every call committed, but the stream has not ended yet
        with pytest.raises(StopAsyncIteration):
            await within(stream.__anext__())
    assert len(stream.batch.results) == 2


async def test_a_stream_closed_before_it_started_has_no_batch() -> None:
    lab = Lab()
    lab.add(gated=False)
    stream = lab.registry.stream([call(0)])
    await stream.aclose()
    with pytest.raises(RuntimeError, match=exactly(
            "CallStream.batch: the stream was closed before its batch started; "
            "nothing ran, so there is no Batch")):
        _ = stream.batch
    assert lab.log == []


async def test_a_stream_whose_scheduler_failed_has_no_batch() -> None:
    lab = Lab()
    lab.add(gated=False)

    class Boom(BaseException):
        """Not an Exception: the pipeline lets it through, a failure of the scheduler."""

    def explode(execution: tr.Execution, result: tr.ToolResult) -> None:
        raise Boom

    lab.registry.on_result(explode)
    stream = lab.registry.stream([call(0)])
    with pytest.raises(Boom):
        async with contextlib.aclosing(stream):
            await within(stream.__anext__())
    with pytest.raises(RuntimeError, match="the batch did not finish"):
        _ = stream.batch
