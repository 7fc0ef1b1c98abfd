"""Progress a body reports (``RunContext.report_progress``) and ``on_progress`` listeners.

docs/pipeline.md "Progress": listeners filtered by scope as observers are, synchronous,
on the loop's thread; a raising listener is logged and contained; progress is never
stored and never part of the result.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

import toolrail as tr
from helpers import raw_tool, until, within

Seen = list[tuple[str, tr.Progress]]


def listener(seen: Seen) -> Any:
    return lambda execution, report: seen.append((execution.call_id, report))


async def steps(arguments: Any, ctx: tr.RunContext) -> str:
    ctx.report_progress(0, 2, "starting")
    await asyncio.sleep(0)
    ctx.report_progress(1, 2)
    ctx.report_progress(2.0, 2, "done")
    return "finished"


async def test_a_body_reports_progress_to_the_registrys_listeners_in_order() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", steps))
    seen: Seen = []
    registry.on_progress(listener(seen))
    result = await within(registry.execute(tr.ToolCall(call_id="1", name="t")))
    assert seen == [("1", tr.Progress(0.0, 2.0, "starting")), ("1", tr.Progress(1.0, 2.0)),
                    ("1", tr.Progress(2.0, 2.0, "done"))]
    # never part of the result
    assert (result.text, result.value, result.meta, result.contexts) == (
        "finished", "finished", None, ())


async def test_progress_listeners_are_filtered_by_scope_as_observers_are() -> None:
    """The registry's listeners hear every call; a scope's, only that scope's calls."""
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", steps))
    unscoped: Seen = []
    mine: Seen = []
    every: Seen = []
    registry.on_progress(listener(unscoped))
    agent = registry.scope("agent")
    agent.on_progress(listener(mine))
    agent.on_progress(listener(every), all_scopes=True)
    await registry.execute(tr.ToolCall(call_id="plain", name="t"))
    await registry.execute(tr.ToolCall(call_id="agent's", name="t", scope="agent"))
    await registry.execute(tr.ToolCall(call_id="other's", name="t", scope="other"))
    assert {call_id for call_id, _ in unscoped} == {"plain", "agent's", "other's"}
    assert {call_id for call_id, _ in mine} == {"agent's"}
    assert {call_id for call_id, _ in every} == {"plain", "agent's", "other's"}


async def test_a_disposed_listener_hears_nothing_more() -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", steps))
    seen: Seen = []
    dispose = registry.on_progress(listener(seen))
    dispose()
    await registry.execute(tr.ToolCall(call_id="1", name="t"))
    assert seen == []


async def test_a_worker_thread_body_reports_progress_on_the_loop_thread_in_order() -> None:
    registry = tr.ToolRegistry()
    loop_thread = threading.get_ident()
    threads: list[int] = []
    seen: Seen = []

    def work(arguments: Any, ctx: tr.RunContext) -> str:
        assert threading.get_ident() != loop_thread
        for i in range(5):
            ctx.report_progress(i, 4)
        return "done"

    registry.register(raw_tool("t", work))
    def note(execution: tr.Execution, report: tr.Progress) -> None:
        threads.append(threading.get_ident())
        seen.append((execution.call_id, report))

    registry.on_progress(note)
    result = await within(registry.execute(tr.ToolCall(call_id="1", name="t")))
    # Delivered before execute returned: handed to the loop before the thread finished.
    assert result.text == "done"
    assert [report.progress for _, report in seen] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert set(threads) == {loop_thread}


async def test_a_raising_listener_is_logged_and_the_others_still_run(
        caplog: pytest.LogCaptureFixture) -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", steps))
    seen: Seen = []

    def broken(execution: tr.Execution, report: tr.Progress) -> None:
        raise RuntimeError("display gone")

    registry.on_progress(broken)
    registry.on_progress(listener(seen))
    with caplog.at_level(logging.WARNING, logger="toolrail"):
        result = await registry.execute(tr.ToolCall(call_id="c7", name="t"))
    assert result.text == "finished"
    assert len(seen) == 3
    assert [r.getMessage() for r in caplog.records] == [
        'tool "t" (c7): progress listener failed: display gone'] * 3


async def test_an_async_listener_is_closed_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", steps))

    async def later(execution: tr.Execution, report: tr.Progress) -> None:
        raise AssertionError("never awaited")

    registry.on_progress(later)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="toolrail"):
        await registry.execute(tr.ToolCall(call_id="c1", name="t"))
    assert {r.getMessage() for r in caplog.records} == {
        'tool "t" (c1): progress listener failed: progress listeners must be synchronous'}


async def test_a_report_after_the_body_settled_is_ignored() -> None:
    registry = tr.ToolRegistry()
    kept: list[tr.RunContext] = []

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        kept.append(ctx)
        return "ok"

    registry.register(raw_tool("t", body))
    seen: Seen = []
    registry.on_progress(listener(seen))
    await registry.execute(tr.ToolCall(call_id="1", name="t"))
    kept[0].report_progress(1)
    assert seen == []


@pytest.mark.parametrize(("args", "error", "message"), [
    (("half",), TypeError, "report_progress() progress must be a number, got str"),
    ((True,), TypeError, "report_progress() progress must be a number, got bool"),
    ((float("nan"),), ValueError, "report_progress() progress must be finite, got nan"),
    ((1, "ten"), TypeError, "report_progress() total must be a number, got str"),
    ((1, 2, 3), TypeError, "report_progress() message must be a str or None, got int"),
])
async def test_bad_progress_values_raise_in_the_body(args: tuple[Any, ...], error: type,
                                                     message: str) -> None:
    registry = tr.ToolRegistry()
    raised: list[BaseException] = []

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        try:
            ctx.report_progress(*args)
        except Exception as exc:
            raised.append(exc)
            raise
        return "never"

    registry.register(raw_tool("t", body))
    result = await registry.execute(tr.ToolCall(call_id="1", name="t"))
    [exc] = raised
    assert (type(exc), str(exc)) == (error, message)
    assert result.error == tr.ErrorInfo(message, None, error.__name__)


async def test_progress_of_parallel_calls_in_a_batch_names_each_call() -> None:
    registry = tr.ToolRegistry()
    both = asyncio.Event()
    arrived = 0

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        nonlocal arrived
        ctx.report_progress(0)
        arrived += 1
        if arrived == 2:
            both.set()
        await until(both)
        ctx.report_progress(1)
        return ctx.call_id

    registry.register(raw_tool("t", body, concurrency_safe=True))
    seen: Seen = []
    registry.on_progress(listener(seen))
    batch = await within(registry.run([tr.ToolCall(call_id=str(i), name="t") for i in range(2)]))
    assert [r.text for r in batch.results] == ["0", "1"]
    assert sorted((call_id, report.progress) for call_id, report in seen) == [
        ("0", 0.0), ("0", 1.0), ("1", 0.0), ("1", 1.0)]


async def test_an_async_body_reporting_from_a_worker_thread_is_heard_on_the_loop_thread(
) -> None:
    registry = tr.ToolRegistry()
    loop_thread = threading.get_ident()
    threads: list[int] = []

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        await asyncio.to_thread(ctx.report_progress, 1, 1, "from a thread")
        return "done"

    registry.register(raw_tool("t", body))
    registry.on_progress(lambda execution, report: threads.append(threading.get_ident()))
    result = await within(registry.execute(tr.ToolCall(call_id="1", name="t")))
    assert result.text == "done"
    assert threads == [loop_thread]
