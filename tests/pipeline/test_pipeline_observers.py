"""The execute pipeline, stage 13: result observers (spec: pipeline.md, "Stages")."""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
from collections.abc import Callable
from typing import Any, cast

import pytest

import toolrail as tr
from helpers import PreNext, Recorder, Unprintable, make_call, make_tool

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
