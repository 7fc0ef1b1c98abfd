"""The asyncio backend of cancellation: ``toolrail._dispatch.bodytask``, tested directly.

An ``"interrupt"`` body is awaited in the task that runs the call, and every step of it
runs with a ``BodyTask`` current instead of that task, so that the body's own
cancellations (``asyncio.timeout``, ``TaskGroup``, anyio cancel scopes) are told from a
cancellation of the call (pipeline.md "Cancellation"). That module is the one place
allowed to use asyncio's private parts: ``asyncio.tasks._current_tasks`` (through
``current_tasks``), ``Task._fut_waiter``, and what asyncio's scopes read and call on
``current_task()``. Those are not a public API, and CPython may change them in any
release, so issue 24 asks for this file to run on every interpreter toolrail supports
(3.11, 3.12, 3.13; ``scripts/dev.py`` lists it in ``BACKEND_TESTS``).

Each test checks one assumption the module makes, with exact values, so that an
interpreter breaking it fails here with a message naming it rather than as some far-off
behavioural test of tests/cancellation/ (those test the outcomes; this file the backend).
Ordering is proved with ``asyncio.Event`` gates; ``asyncio.sleep(0)`` is only a yield
point, and every wait is bounded (``within``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import toolrail as tr
from helpers import raw_tool, within
from toolrail._dispatch.bodytask import BodyTask, current_tasks

Body = Callable[[tr.JsonValue, tr.RunContext], Awaitable[Any]]
Runner = asyncio.Task[tuple[tr.ToolResult, asyncio.Task[Any] | None]]


def start(body: Body) -> Runner:
    """A task running one call of a tool ``"t"`` with ``body``; it returns the result and
    what ``asyncio.current_task()`` was once ``execute`` returned."""
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", body))

    async def run() -> tuple[tr.ToolResult, asyncio.Task[Any] | None]:
        result = await registry.execute(tr.ToolCall(call_id="1", name="t"))
        return result, asyncio.current_task()

    return asyncio.create_task(run())


async def finish(runner: Runner) -> tr.ToolResult:
    """The result of ``runner``'s call; the current task is the runner again after it."""
    result, after = await within(runner)
    assert after is runner, "the task running execute is not current again after the body"
    assert runner.cancelling() == 0
    return result


def value_of(result: tr.ToolResult) -> Any:
    assert result.is_error is False, result.error
    return result.value


def stand_in() -> BodyTask:
    """The current task inside a body: its ``BodyTask``."""
    current: Any = asyncio.current_task()
    assert type(current) is BodyTask, f"the current task in a body is {current!r}"
    return current


# ---- current_tasks: asyncio's current task, read and set -------------------------------


async def test_current_tasks_reads_the_current_task_and_none_outside_a_task() -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    assert current_tasks.get(loop) is task
    if sys.version_info < (3, 14):
        assert current_tasks is asyncio.tasks._current_tasks  # type: ignore[attr-defined]

    outside: asyncio.Future[tuple[Any, Any]] = loop.create_future()
    loop.call_soon(lambda: outside.set_result((current_tasks.get(loop),
                                               asyncio.current_task(loop))))
    assert await within(outside) == (None, None), "a loop callback runs in no task"


async def test_setting_current_tasks_is_what_current_task_returns_and_restores() -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    body = BodyTask.of(task)
    try:
        current_tasks[loop] = body
        now: Any = asyncio.current_task()
        assert now is body, "asyncio.current_task() does not read what current_tasks[loop] = x sets"
        now = asyncio.current_task(loop)
        assert now is body
        assert current_tasks.get(loop) is body
    finally:
        current_tasks[loop] = task
    assert asyncio.current_task() is task
    assert current_tasks.get(loop) is task
    await asyncio.sleep(0)  # the task's step ends with itself current, as asyncio checks
    assert asyncio.current_task() is task


async def test_fut_waiter_is_the_future_a_task_waits_on_and_none_while_it_runs() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()
    waiting = asyncio.Event()
    running: list[Any] = []

    async def waiter() -> str:
        task = asyncio.current_task()
        running.append(task._fut_waiter)  # type: ignore[union-attr]
        waiting.set()
        return await future

    task = asyncio.create_task(waiter())
    await within(waiting.wait())
    await asyncio.sleep(0)  # the waiter has reached its await of the future
    assert running == [None]
    assert task._fut_waiter is future  # type: ignore[attr-defined]
    assert BodyTask.of(task)._fut_waiter is future
    future.set_result("done")
    assert await within(task) == "done"


# ---- a BodyTask is the current task during a body's steps -------------------------------


async def test_every_step_of_a_body_runs_with_its_body_task_current() -> None:
    seen: list[Any] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        seen.append(asyncio.current_task())
        await asyncio.sleep(0)
        seen.append(asyncio.current_task())
        return "ok"

    runner = start(body)
    assert value_of(await finish(runner)) == "ok"
    assert [type(task) for task in seen] == [BodyTask, BodyTask]
    assert seen[0] is seen[1], "one stand-in per body invocation, for every step"
    assert seen[0]._task is runner
    assert seen[0]._done is True


async def test_a_body_that_never_waits_runs_with_a_body_task_current() -> None:
    seen: list[Any] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        seen.append(asyncio.current_task())
        return "ok"

    runner = start(body)
    assert value_of(await finish(runner)) == "ok"
    assert [type(task) for task in seen] == [BodyTask]
    assert seen[0]._task is runner


# ---- cancel(), cancelling(), uncancel() -------------------------------------------------


async def test_cancel_while_the_body_waits_cancels_its_future_not_the_task() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()
    waiting = asyncio.Event()
    seen: dict[str, Any] = {}

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        me = stand_in()
        seen["me"] = me
        waiting.set()
        try:
            await future
        except asyncio.CancelledError as exc:
            seen["args"] = exc.args
            now: Any = asyncio.current_task()
            seen["in handler"] = (now is me, me.cancelling(),
                                  me._task.cancelling(), ctx.signal.cancelled)
            seen["uncancel"] = me.uncancel()
            return "caught"
        return "not cancelled"

    runner = start(body)
    await within(waiting.wait())
    me: BodyTask = seen["me"]
    assert me._fut_waiter is future, "the body's wait is not the task's _fut_waiter"
    assert me.cancel("why") is True
    assert future.cancelled() is True
    assert (me.cancelling(), runner.cancelling()) == (1, 0)
    assert value_of(await finish(runner)) == "caught"
    assert seen["args"] == ("why",)
    assert seen["in handler"] == (True, 1, 0, False)
    assert seen["uncancel"] == 0
    assert runner.cancelling() == 0


async def test_cancelling_counts_its_own_and_the_tasks_and_uncancel_takes_its_own_first(
) -> None:
    release = asyncio.Event()

    async def idle() -> None:
        await release.wait()

    task = asyncio.create_task(idle())  # not started: it awaits nothing yet
    body = BodyTask.of(task)
    assert (body.cancelling(), task.cancelling()) == (0, 0)
    assert body.cancel() is True
    assert (body.cancelling(), task.cancelling()) == (1, 0)
    assert task.cancel() is True
    assert (body.cancelling(), task.cancelling()) == (2, 1)
    assert body.cancel() is True
    assert (body.cancelling(), task.cancelling()) == (3, 1)
    assert body.uncancel() == 2
    assert (body.cancelling(), task.cancelling()) == (2, 1)
    assert body.uncancel() == 1
    assert (body.cancelling(), task.cancelling()) == (1, 1), "its own requests go first"
    assert body.uncancel() == 0
    assert (body.cancelling(), task.cancelling()) == (0, 0), "then the task's"
    release.set()
    task.cancel()
    await within(asyncio.gather(task, return_exceptions=True))


@pytest.mark.parametrize("wait", ["bare yield", "future"])
@pytest.mark.parametrize("step", ["first", "later"])
async def test_cancel_during_a_step_is_delivered_at_the_bodys_next_wait(
    step: str, wait: str
) -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    seen: dict[str, Any] = {}

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        me = stand_in()
        if step == "later":
            await asyncio.sleep(0)
        assert me._fut_waiter is None  # the task is running this step
        seen["cancel"] = me.cancel("now")
        seen["after cancel"] = (me._pending, me._must_cancel, me.cancelling(),
                                me._task.cancelling())
        try:
            if wait == "future":
                await future
            else:
                await asyncio.sleep(0)
        except asyncio.CancelledError as exc:
            seen["args"] = exc.args
            seen["in handler"] = (me._pending, me._must_cancel, me.cancelling(),
                                  me._task.cancelling(), ctx.signal.cancelled)
            seen["uncancel"] = me.uncancel()
            return "caught"
        return "not cancelled"

    runner = start(body)
    assert value_of(await finish(runner)) == "caught"
    assert seen["cancel"] is True
    assert seen["after cancel"] == (("now",), True, 1, 0), "kept for the next wait"
    assert seen["args"] == ("now",)
    assert seen["in handler"] == (None, False, 1, 0, False)
    assert seen["uncancel"] == 0
    assert future.cancelled() is (wait == "future")


@pytest.mark.parametrize("waits", [False, True], ids=["returns at once", "waits"])
async def test_after_the_body_settled_cancel_returns_false_and_reaches_nothing(
    waits: bool,
) -> None:
    bodies: list[BodyTask] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        bodies.append(stand_in())
        if waits:
            await asyncio.sleep(0)
        return "ok"

    go_on = asyncio.Event()
    cancelled = asyncio.Event()
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", body))

    async def run() -> str:
        result = await registry.execute(tr.ToolCall(call_id="1", name="t"))
        cancelled.set()
        await go_on.wait()  # the late cancel() happens here
        await asyncio.sleep(0)
        return value_of(result)  # type: ignore[no-any-return]

    runner = asyncio.create_task(run())
    await within(cancelled.wait())
    [me] = bodies
    assert me._done is True
    assert me.cancel("late") is False
    assert (me.cancelling(), me._pending, runner.cancelling()) == (0, None, 0)
    go_on.set()
    assert await within(runner) == "ok", "a late cancel() reached the task"


async def test_cancel_of_a_finished_task_returns_false() -> None:
    async def nothing() -> None:
        pass

    task = asyncio.create_task(nothing())
    await within(task)
    body = BodyTask.of(task)
    assert body.cancel() is False
    assert (body.cancelling(), body._pending) == (0, None)


# ---- everything else is the task's ------------------------------------------------------


async def test_everything_else_forwards_to_the_task_and_repr_names_it() -> None:
    release = asyncio.Event()

    async def idle() -> str:
        await release.wait()
        return "idle done"

    task = asyncio.create_task(idle(), name="the-runner")
    body = BodyTask.of(task)
    assert body.get_name() == "the-runner"
    assert body.get_loop() is asyncio.get_running_loop()
    assert body.done() is False
    assert body.get_coro() is task.get_coro()
    assert repr(body) == f"<BodyTask of {task!r}>"
    assert "the-runner" in repr(body)
    done: list[Any] = []
    body.add_done_callback(done.append)
    body.add_done_callback(print)
    assert body.remove_done_callback(print) == 1
    release.set()
    assert await within(task) == "idle done"
    await asyncio.sleep(0)  # done callbacks run at the loop's next turn
    assert done == [task], "add_done_callback did not reach the task"
    assert body.result() == "idle done"


# ---- the body's own scopes bind to its BodyTask -----------------------------------------


async def test_asyncio_timeout_in_the_first_step_binds_to_the_body_task() -> None:
    seen: dict[str, Any] = {}

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        me = stand_in()
        never = asyncio.Event()
        try:
            async with asyncio.timeout(0) as scope:
                try:
                    await never.wait()
                except asyncio.CancelledError:
                    seen["inside"] = (me.cancelling(), me._task.cancelling())
                    raise
        except TimeoutError:
            seen["after"] = (scope.expired(), me.cancelling(), me._task.cancelling(),
                             ctx.signal.cancelled)
            return "timed out inside"
        return "never"

    runner = start(body)
    assert value_of(await finish(runner)) == "timed out inside"
    assert seen["inside"] == (1, 0), "asyncio.timeout cancelled the task, not its BodyTask"
    assert seen["after"] == (True, 0, 0, False)


async def test_a_task_group_whose_child_fails_cancels_the_body_not_the_call() -> None:
    seen: dict[str, Any] = {}

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        me = stand_in()
        started = asyncio.Event()
        never = asyncio.Event()

        async def sibling() -> None:
            started.set()
            try:
                await never.wait()
            except asyncio.CancelledError:
                seen["sibling"] = "cancelled"
                raise

        async def failing() -> None:
            await started.wait()
            raise ValueError("child failed")

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(sibling())
                group.create_task(failing())
                try:
                    await never.wait()
                except asyncio.CancelledError:
                    seen["inside"] = (me.cancelling(), me._task.cancelling())
                    raise
        except* ValueError as failures:
            seen["failures"] = [str(exc) for exc in failures.exceptions]
        seen["after"] = (me.cancelling(), me._task.cancelling(), ctx.signal.cancelled)
        return "group failed"

    runner = start(body)
    assert value_of(await finish(runner)) == "group failed"
    assert seen["sibling"] == "cancelled"
    assert seen["inside"] == (1, 0), "the TaskGroup cancelled the task, not its BodyTask"
    assert seen["failures"] == ["child failed"]
    assert seen["after"] == (0, 0, False)


async def test_anyio_move_on_after_in_a_body_is_the_bodys_own() -> None:
    seen: dict[str, Any] = {}

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        me = stand_in()
        with anyio.move_on_after(0) as scope:
            await asyncio.Event().wait()
        seen["after"] = (scope.cancelled_caught, me.cancelling(), me._task.cancelling(),
                         ctx.signal.cancelled)
        return "moved on"

    runner = start(body)
    assert value_of(await finish(runner)) == "moved on"
    assert seen["after"] == (True, 0, 0, False)


async def test_anyio_cancel_scope_cancel_in_a_body_is_the_bodys_own() -> None:
    seen: dict[str, Any] = {}

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        me = stand_in()
        with anyio.CancelScope() as scope:
            scope.cancel()
            await asyncio.Event().wait()
        seen["after"] = (scope.cancelled_caught, me.cancelling(), me._task.cancelling(),
                         ctx.signal.cancelled)
        await asyncio.sleep(0)  # a later wait is not interrupted
        return "cancelled inside"

    runner = start(body)
    assert value_of(await finish(runner)) == "cancelled inside"
    assert seen["after"] == (True, 0, 0, False)
