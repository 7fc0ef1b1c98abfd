"""The hot path's shortcuts behave exactly like the general path they skip.

An async interrupt body takes its first step before anything watches it, and gets a
watch only when it waits; a typed function without a ``RunContext`` parameter is given
none; results are built by filling twin classes; a registry without middleware skips
the chain lookups.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from typing import Any

import pytest

import toolrail as tr
from toolrail._model.results import make_result, make_text

WAIT = 5


def observed(registry: tr.ToolRegistry) -> list[tr.ToolResult]:
    seen: list[tr.ToolResult] = []
    registry.on_result(lambda _execution, result: seen.append(result))
    return seen


async def cancel_once_started(registry: tr.ToolRegistry, call: tr.ToolCall,
                              started: asyncio.Event) -> None:
    """Run ``call``, cancel the task running it once the body started: it must propagate."""
    task = asyncio.ensure_future(registry.execute(call))
    await asyncio.wait_for(started.wait(), WAIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, WAIT)


async def test_a_typed_body_cancelled_with_its_task_is_awaited_then_cancellation_propagates(
) -> None:
    registry = tr.ToolRegistry()
    seen = observed(registry)
    started, finished = asyncio.Event(), asyncio.Event()

    @registry.tool
    async def slow(path: str) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            finished.set()
        return path

    await cancel_once_started(
        registry, tr.ToolCall(call_id="1", name="slow", arguments={"path": "p"}), started)
    assert finished.is_set()
    assert seen == []  # no result is built or notified


async def test_a_typed_body_that_swallows_its_tasks_cancellation_still_propagates_it() -> None:
    registry = tr.ToolRegistry()
    seen = observed(registry)
    started = asyncio.Event()
    swallowed: list[bool] = []

    @registry.tool
    async def stubborn(path: str) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            swallowed.append(True)
        return path

    await cancel_once_started(
        registry, tr.ToolCall(call_id="1", name="stubborn", arguments={"path": "p"}), started)
    assert swallowed == [True]
    assert seen == []


async def test_a_typed_bodys_own_cancelled_error_is_a_failure() -> None:
    registry = tr.ToolRegistry()

    @registry.tool
    async def odd(path: str) -> str:
        raise asyncio.CancelledError("gave up")

    result = await registry.execute(tr.ToolCall(call_id="1", name="odd", arguments={"path": "p"}))
    assert result.error == tr.ErrorInfo("gave up", None, "CancelledError")
    # The task running execute was not cancelled and goes on.
    assert await asyncio.sleep(0, "still running") == "still running"


async def test_a_typed_bodys_cancelled_error_while_its_task_is_already_cancelling_propagates(
) -> None:
    registry = tr.ToolRegistry()
    entered = asyncio.Event()

    @registry.tool
    async def late(path: str) -> str:
        entered.set()
        await asyncio.sleep(0)  # the cancellation arrives here, and ends the body
        return path

    async def caller() -> tr.ToolResult:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # cancelling before the call: the body's first await raises
        return await registry.execute(
            tr.ToolCall(call_id="1", name="late", arguments={"path": "p"}))

    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.ensure_future(caller()), WAIT)
    assert entered.is_set()


async def test_a_typed_tool_with_a_signal_is_still_interrupted_by_it() -> None:
    registry = tr.ToolRegistry()
    started = asyncio.Event()

    @registry.tool
    async def slow(path: str) -> str:
        started.set()
        await asyncio.Event().wait()
        return path

    controller = tr.CancelController()
    task = asyncio.ensure_future(registry.execute(
        tr.ToolCall(call_id="1", name="slow", arguments={"path": "p"},
                    signal=controller.signal)))
    await asyncio.wait_for(started.wait(), WAIT)
    controller.cancel()
    result = await asyncio.wait_for(task, WAIT)
    assert result.error is not None
    assert result.error.code == "ABORTED"


async def test_a_typed_body_gets_validated_arguments_and_its_value_is_converted() -> None:
    registry = tr.ToolRegistry()

    @registry.tool
    async def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    ok = await registry.execute(tr.ToolCall(call_id="1", name="add", arguments={"a": 1, "b": 2}))
    assert ok.value == {"sum": 3}
    assert ok.text == '{"sum": 3}'
    bad = await registry.execute(tr.ToolCall(call_id="2", name="add", arguments={"a": "x"}))
    assert bad.error is not None
    assert bad.error.code == "INVALID_ARGS"


def test_built_results_are_exactly_what_the_dataclass_constructor_makes() -> None:
    built = make_result((make_text("hi"),), False, "hi", None, None, (), True)
    made = tr.ToolResult((tr.TextContent("hi"),), False, "hi", None, None, (), True)
    assert type(built) is tr.ToolResult
    assert type(built.content[0]) is tr.TextContent
    assert built == made
    assert hash(built) == hash(made)
    assert dataclasses.asdict(built) == dataclasses.asdict(made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.value = "changed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.content[0].text = "changed"  # type: ignore[misc]
    assert dataclasses.replace(built, value="x").value == "x"


def test_the_twin_classes_have_the_slots_of_the_classes_they_stand_for() -> None:
    from toolrail._model import results as _results

    twins: list[tuple[type[Any], type[Any]]] = [
        (_results._ResultTwin, tr.ToolResult), (_results._TextTwin, tr.TextContent)]
    for twin, real in twins:
        assert twin.__slots__ == real.__slots__
        assert twin.__basicsize__ == real.__basicsize__


async def test_a_raw_body_without_a_signal_sees_its_signal_fire_before_the_cancellation() -> None:
    registry = tr.ToolRegistry()
    started = asyncio.Event()
    seen: list[str] = []

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        ctx.signal.add_callback(lambda: seen.append("signal fired"))
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append(f"body cancelled, signal {ctx.signal.reason}")
            raise
        return "never"

    registry.register(tr.Tool(name="t", description="", parameters={"type": "object"},
                              execute=body))
    await cancel_once_started(registry, tr.ToolCall(call_id="1", name="t"), started)
    assert seen == ["signal fired", "body cancelled, signal cancelled"]


async def test_a_body_that_waits_then_returns_is_a_success_on_the_quiet_path() -> None:
    registry = tr.ToolRegistry()

    @registry.tool
    async def later(path: str) -> str:
        await asyncio.sleep(0)
        return path

    result = await registry.execute(
        tr.ToolCall(call_id="1", name="later", arguments={"path": "p"}))
    assert result.value == "p"


async def test_the_quick_validation_still_reports_an_unknown_key_in_the_specs_words() -> None:
    registry = tr.ToolRegistry()

    @registry.tool
    async def strict_keys(path: str) -> str:
        return path

    @registry.tool(extra="ignore")
    async def loose_keys(path: str) -> str:
        return path

    unknown = {"path": "p", "other": 1}
    bad = await registry.execute(tr.ToolCall(call_id="1", name="strict_keys", arguments=unknown))
    assert bad.error == tr.ErrorInfo('invalid arguments: unexpected property "other"',
                                     "INVALID_ARGS", "ToolArgsError")
    ok = await registry.execute(tr.ToolCall(call_id="2", name="loose_keys", arguments=unknown))
    assert ok.value == "p"


async def test_a_body_that_cancels_its_own_signal_and_returns_without_waiting_is_aborted(
) -> None:
    registry = tr.ToolRegistry()
    controller = tr.CancelController()

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        controller.cancel("enough")
        return "done"

    registry.register(tr.Tool(name="t", description="", parameters={"type": "object"},
                              execute=body))
    result = await registry.execute(tr.ToolCall(call_id="1", name="t", signal=controller.signal))
    assert result.error is not None
    assert result.error.code == "ABORTED"


async def test_a_body_signal_read_before_the_first_wait_fires_with_the_callers_at_once() -> None:
    registry = tr.ToolRegistry()
    controller = tr.CancelController()
    seen: list[str] = []

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        ctx.signal.add_callback(lambda: seen.append(f"body signal: {ctx.signal.reason}"))
        controller.cancel("enough")
        seen.append("after cancel()")
        return "done"

    registry.register(tr.Tool(name="t", description="", parameters={"type": "object"},
                              execute=body))
    result = await registry.execute(tr.ToolCall(call_id="1", name="t", signal=controller.signal))
    assert seen == ["body signal: enough", "after cancel()"]
    assert result.error is not None
    assert result.error.code == "ABORTED"
    assert controller.signal._callbacks in (None, {})  # nothing left subscribed


async def test_a_body_that_cancels_its_signal_then_waits_is_interrupted_at_that_wait() -> None:
    registry = tr.ToolRegistry()
    controller = tr.CancelController()
    reached: list[str] = []

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        controller.cancel()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            reached.append("interrupted")
            raise
        return "never"

    registry.register(tr.Tool(name="t", description="", parameters={"type": "object"},
                              execute=body))
    result = await asyncio.wait_for(
        registry.execute(tr.ToolCall(call_id="1", name="t", signal=controller.signal)), WAIT)
    assert reached == ["interrupted"]
    assert result.error is not None
    assert result.error.code == "ABORTED"


@pytest.mark.parametrize("scoped", [False, True])
async def test_middleware_added_while_a_body_waits_runs_in_that_calls_later_stages(
    scoped: bool,
) -> None:
    registry = tr.ToolRegistry()
    scope = registry.scope("agent") if scoped else None
    started, release = asyncio.Event(), asyncio.Event()

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        started.set()
        await release.wait()
        return "done"

    tool = tr.Tool(name="t", description="", parameters={"type": "object"}, execute=body)
    (scope or registry).register(tool)
    call = tr.ToolCall(call_id="1", name="t")
    task = asyncio.ensure_future((scope or registry).execute(call))
    await asyncio.wait_for(started.wait(), WAIT)
    assert registry._core.chains.quiet  # no middleware anywhere while the call started

    def replace(execution: tr.Execution, result: tr.ToolResult, call_next: Any) -> tr.Accept:
        return tr.Accept(content="replaced")

    (scope or registry).post_execute(replace)
    release.set()
    result = await asyncio.wait_for(task, WAIT)
    assert result.text == "replaced"


@pytest.mark.parametrize("value", [0, -7, 2**70, True, False, "text", ""])
async def test_plain_values_render_exactly_as_their_json(value: Any) -> None:
    registry = tr.ToolRegistry()

    async def body(arguments: Any, ctx: tr.RunContext) -> Any:
        return value

    registry.register(tr.Tool(name="t", description="", parameters={"type": "object"},
                              execute=body))
    result = await registry.execute(tr.ToolCall(call_id="1", name="t"))
    assert result.value == value
    assert type(result.value) is type(value)
    expected = value if isinstance(value, str) else json.dumps(value)
    assert result.content == (tr.TextContent(expected),)


async def test_a_body_signal_first_read_in_a_worker_thread_subscribes_nothing_from_there(
) -> None:
    registry = tr.ToolRegistry()
    controller = tr.CancelController()
    read_in_thread, release, done = threading.Event(), threading.Event(), threading.Event()
    waiting = asyncio.Event()
    seen: list[tuple[bool, str | None]] = []
    held: list[int] = []

    def worker(ctx: tr.RunContext) -> str:
        signal = ctx.signal  # made here, in the worker thread, before the body waits
        read_in_thread.set()
        release.wait(WAIT)
        seen.append((signal.cancelled, signal.reason))
        done.set()
        return "done"

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        future = asyncio.get_running_loop().run_in_executor(None, worker, ctx)
        read_in_thread.wait(WAIT)  # still in the body's first step: nothing watches it yet
        held.append(len(controller.signal._callbacks or {}))
        waiting.set()
        return await future

    registry.register(tr.Tool(name="t", description="", parameters={"type": "object"},
                              execute=body))
    task = asyncio.ensure_future(
        registry.execute(tr.ToolCall(call_id="1", name="t", signal=controller.signal)))
    await asyncio.wait_for(waiting.wait(), WAIT)
    controller.cancel("stop")
    result = await asyncio.wait_for(task, WAIT)
    release.set()
    await asyncio.wait_for(asyncio.to_thread(done.wait, WAIT), WAIT)

    assert held == [0]  # the thread subscribed nothing to the caller's signal
    assert seen == [(True, "stop")]  # yet the body signal fired with the caller's
    assert result.error is not None
    assert result.error.code == "ABORTED"
    assert not controller.signal._callbacks


async def test_a_pool_of_one_runs_each_call_in_the_task_running_the_batch() -> None:
    registry = tr.ToolRegistry()
    tasks: list[asyncio.Task[Any] | None] = []
    order: list[str] = []

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        tasks.append(asyncio.current_task())
        order.append(f"start {ctx.call_id}")
        turn = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(turn.set_result, None)
        await turn  # a real wait, one loop turn: nothing else may start meanwhile
        order.append(f"end {ctx.call_id}")
        return ctx.call_id

    registry.register(tr.Tool(name="t", description="", parameters={"type": "object"},
                              execute=body, concurrency_safe=True))
    calls = [tr.ToolCall(call_id=str(i), name="t") for i in range(3)]

    async def batch() -> tuple[tr.Batch, asyncio.Task[Any] | None]:
        return await registry.run(calls, max_parallel=1), asyncio.current_task()

    result, runner = await asyncio.wait_for(batch(), WAIT)
    assert [r.value for r in result.results] == ["0", "1", "2"]
    assert order == ["start 0", "end 0", "start 1", "end 1", "start 2", "end 2"]
    # a body sees its BodyTask (pipeline.md "Cancellation"), standing in for that task
    assert [t._task for t in tasks] == [runner] * 3  # type: ignore[union-attr]


async def test_cancelling_a_pool_of_one_awaits_its_call_then_propagates() -> None:
    registry = tr.ToolRegistry()
    seen = observed(registry)
    started, finished = asyncio.Event(), asyncio.Event()
    reasons: list[str | None] = []

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            reasons.append(ctx.signal.reason)
            finished.set()
        return "never"

    registry.register(tr.Tool(name="t", description="", parameters={"type": "object"},
                              execute=body, concurrency_safe=True))
    calls = [tr.ToolCall(call_id=str(i), name="t") for i in range(3)]
    task = asyncio.ensure_future(registry.run(calls, max_parallel=1))
    await asyncio.wait_for(started.wait(), WAIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, WAIT)
    assert finished.is_set()
    assert reasons == ["cancelled"]
    assert seen == []
