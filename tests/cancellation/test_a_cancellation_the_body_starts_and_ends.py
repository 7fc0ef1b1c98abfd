"""pipeline.md "Cancellation": "A cancellation that the body's own code starts and ends
inside itself [...] is not a cancellation of the task running ``execute``: it never
fires the body signal and never changes the outcome."

The body signal fires only for a cancellation from outside the body. "A cancellation
that the body's own code starts and ends inside itself — an anyio cancel scope or task
group, ``asyncio.timeout``, a ``TaskGroup``, the connection race an HTTP client runs
(httpx and every SDK built on it) — is not a cancellation of the task running
``execute``: it never fires the body signal and never changes the outcome." And: "If
the task running execute is itself cancelled (asyncio), the body signal fires (reason
``"cancelled"``)". The HTTP and scope cases run through ``execute``, ``run`` and
``stream``, for interrupt and cooperative bodies.

Also here: a ``CancelledError`` the body (or the approver) causes itself — its own
``asyncio.timeout``, a ``TaskGroup`` whose child fails, a future someone else cancels,
also in a task that had handled an earlier cancellation — is the body's own outcome
(pipeline.md "Body": "A ``CancelledError`` raised by the body when neither the registry
nor the caller's task asked for a cancellation is such a failure too"), and a real
cancellation during such a scope still propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import httpx
import pytest

import toolrail as tr
from cancellation_helpers import make_call, registry_for
from helpers import (
    assert_error,
    own_timeout,
    raw_tool,
    results_seen,
    settled,
    until,
    wait_forever,
    within,
)

Body = Callable[[Any, tr.RunContext], Awaitable[str]]


MODES = ("interrupt", "cooperative")
WAIT = 5
T = TypeVar("T")


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1, in a thread of this process."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _report(ctx: tr.RunContext, text: str) -> str:
    return f"{text} signal={ctx.signal.cancelled}"


async def _http_get(url: str, ctx: tr.RunContext) -> str:
    # A new client opens a new connection: anyio's connect_tcp races the attempts
    # inside a task group and cancels the losers (and its own scope) once one wins.
    async with httpx.AsyncClient() as client:
        response = await client.get(url)
    return _report(ctx, response.text)


async def _own_asyncio_timeout(ctx: tr.RunContext) -> str:
    try:
        async with asyncio.timeout(0):
            await wait_forever()
    except TimeoutError:
        await asyncio.sleep(0)  # a later wait: the signal is read after it, too
        return _report(ctx, "timed out")
    return "never"


async def _own_task_group(ctx: tr.RunContext) -> str:
    async def fails() -> None:
        raise ValueError("child failed")

    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(fails())
            await wait_forever()
    except ExceptionGroup:
        await asyncio.sleep(0)
        return _report(ctx, "group failed")
    return "never"


async def _own_anyio_scope(ctx: tr.RunContext) -> str:
    with anyio.move_on_after(0) as scope:
        await anyio.sleep_forever()
    return _report(ctx, f"moved on={scope.cancelled_caught}")


async def _own_anyio_task_group(ctx: tr.RunContext) -> str:
    async with anyio.create_task_group() as group:
        group.start_soon(anyio.sleep_forever)
        await anyio.lowlevel.checkpoint()
        group.cancel_scope.cancel()
    return _report(ctx, "group cancelled")


INNER: dict[str, Callable[[tr.RunContext], Awaitable[str]]] = {
    "asyncio.timeout": _own_asyncio_timeout,
    "TaskGroup": _own_task_group,
    "anyio.move_on_after": _own_anyio_scope,
    "anyio task group": _own_anyio_task_group,
}


EXPECTED = {
    "asyncio.timeout": "timed out signal=False",
    "TaskGroup": "group failed signal=False",
    "anyio.move_on_after": "moved on=True signal=False",
    "anyio task group": "group cancelled signal=False",
}


def _registry(body: Body, mode: str) -> tr.ToolRegistry:
    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", body, cancellation=mode, concurrency_safe=True))
    return registry


async def _through(how: str, registry: tr.ToolRegistry) -> list[tr.ToolResult]:
    """Two calls of ``t`` through ``execute`` (one after the other), ``run`` or ``stream``."""
    calls = [tr.ToolCall(call_id=str(i), name="t") for i in range(2)]
    if how == "execute":
        return [await within(registry.execute(call)) for call in calls]
    if how == "run":
        return list((await within(registry.run(calls))).results)

    async def streamed() -> list[tr.ToolResult]:
        return [item.result async for item in registry.stream(calls)]

    return await within(streamed())


@contextlib.asynccontextmanager
async def _outer_scope(kind: str) -> AsyncIterator[None]:
    """An inner scope that stays active (and never cancels) while the body waits in it."""
    if kind == "anyio.move_on_after":
        with anyio.move_on_after(60):
            yield
        return
    scope: contextlib.AbstractAsyncContextManager[Any] = (
        asyncio.timeout(60) if kind == "asyncio.timeout"
        else asyncio.TaskGroup() if kind == "TaskGroup" else anyio.create_task_group())
    async with scope:
        yield


async def after_a_handled_cancellation(work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work`` in a task that was cancelled earlier and handled it (as cleanup code
    in an ``except CancelledError`` does): ``cancelling()`` is 1, no cancel is pending,
    and nothing cancels the task while ``work`` runs."""
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()  # the cancellation is delivered here, and handled
    assert task.cancelling() == 1
    return await work()


@pytest.mark.parametrize("how", ["execute", "run", "stream"])
@pytest.mark.parametrize("mode", MODES)
async def test_a_body_making_a_real_http_request_keeps_its_signal_unfired(
        url: str, mode: str, how: str) -> None:
    """The motivating case: ``httpx.AsyncClient().get`` against a server on 127.0.0.1."""

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        return await _http_get(url, ctx)

    results = await _through(how, _registry(body, mode))
    assert [(r.text, r.error) for r in results] == [("ok signal=False", None)] * 2


@pytest.mark.parametrize("how", ["execute", "run", "stream"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scope", list(INNER))
async def test_a_cancellation_the_body_starts_and_ends_never_fires_its_signal(
        scope: str, mode: str, how: str) -> None:
    inner = INNER[scope]

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        return await inner(ctx)

    results = await _through(how, _registry(body, mode))
    assert [(r.text, r.error) for r in results] == [(EXPECTED[scope], None)] * 2


async def test_a_sub_agent_handed_the_signal_after_an_http_request_still_runs(url: str) -> None:
    """The issue's symptom: a nested call given the body signal after an HTTP request
    was ``ABORTED_BEFORE_DISPATCH`` at once."""
    registry = tr.ToolRegistry()
    registry.register(raw_tool("inner", lambda arguments, ctx: "inner ran", inline=True))

    async def outer(arguments: Any, ctx: tr.RunContext) -> str:
        await _http_get(url, ctx)
        nested = await registry.execute(tr.ToolCall(call_id="n", name="inner",
                                                    signal=ctx.signal, parent=ctx.token))
        return nested.text

    registry.register(raw_tool("outer", outer))
    result = await within(registry.execute(tr.ToolCall(call_id="1", name="outer")))
    assert (result.text, result.error) == ("inner ran", None)


async def test_the_bodys_own_cancel_in_its_first_step_interrupts_only_the_body() -> None:
    """A scope cancelled before the body's first wait (anyio delivers it at that wait)
    is still the body's own."""

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await anyio.sleep_forever()
        return _report(ctx, f"caught={scope.cancelled_caught}")

    result = await within(_registry(body, "interrupt").execute(tr.ToolCall(call_id="1",
                                                                           name="t")))
    assert (result.text, result.error) == ("caught=True signal=False", None)


async def test_a_body_scope_around_a_nested_call_fires_the_nested_body_signal() -> None:
    """For a nested call, the outer body's ``asyncio.timeout`` is a cancellation from
    outside the nested body: the nested body signal fires and its call is aborted."""
    registry = tr.ToolRegistry()
    nested_saw: list[bool] = []

    async def inner(arguments: Any, ctx: tr.RunContext) -> str:
        try:
            await wait_forever()
        finally:
            nested_saw.append(ctx.signal.cancelled)
        return "never"

    async def outer(arguments: Any, ctx: tr.RunContext) -> str:
        try:
            async with asyncio.timeout(0):
                await registry.execute(tr.ToolCall(call_id="n", name="inner",
                                                   parent=ctx.token))
        except TimeoutError:
            return _report(ctx, "nested call timed out")
        return "never"

    registry.register(raw_tool("inner", inner))
    registry.register(raw_tool("outer", outer))
    result = await within(registry.execute(tr.ToolCall(call_id="1", name="outer")))
    assert (result.text, result.error) == ("nested call timed out signal=False", None)
    assert nested_saw == [True]


@pytest.mark.parametrize("how", ["execute", "run", "stream"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", list(INNER))
async def test_cancelling_the_task_while_an_inner_scope_is_active_still_fires_the_signal(
        kind: str, mode: str, how: str) -> None:
    started = asyncio.Event()
    saw: list[tuple[str, bool, str | None]] = []
    callbacks: list[str] = []

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        ctx.signal.add_callback(lambda: callbacks.append("fired"))
        async with _outer_scope(kind):
            started.set()
            try:
                if mode == "cooperative":
                    await ctx.signal.wait()
                else:
                    await wait_forever()
            finally:
                saw.append(("inside the scope", ctx.signal.cancelled, ctx.signal.reason))
        return "stopped"

    registry = _registry(body, mode)
    calls = [tr.ToolCall(call_id="1", name="t")]

    async def consume() -> Any:
        if how == "execute":
            return await registry.execute(calls[0])
        if how == "run":
            return await registry.run(calls)
        return [item async for item in registry.stream(calls)]

    task = asyncio.ensure_future(consume())
    await within(until(started))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(task)
    assert saw == [("inside the scope", True, "cancelled")]
    assert callbacks == ["fired"]


async def test_an_inner_scope_that_expires_as_the_task_is_cancelled_keeps_the_cancellation(
) -> None:
    """Both at once: the body's own timeout expires and the task is cancelled from
    outside in the same loop turn. The timeout must not swallow the outside cancellation
    (asyncio's rule, which the body's stand-in task keeps), so it propagates."""
    started = asyncio.Event()
    saw: list[bool] = []
    registry = tr.ToolRegistry()

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        async with asyncio.timeout(None) as timeout:
            started.set()
            try:
                await wait_forever()
            finally:
                saw.append(ctx.signal.cancelled)
        return f"deadline {timeout.when()}"

    registry.register(raw_tool("t", body))
    task = asyncio.ensure_future(registry.execute(tr.ToolCall(call_id="1", name="t")))
    await within(until(started))
    loop = asyncio.get_running_loop()
    loop.call_soon(task.cancel)
    loop.call_soon(lambda: None)  # both land before the body next runs
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(task)
    assert saw == [True]


async def test_a_body_sees_a_stand_in_for_the_task_running_the_call() -> None:
    """What the body's scopes bind to: a stand-in whose name, loop and callbacks are the
    task's own, and which is the same object for every step of one invocation."""
    seen: list[Any] = []

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        seen.append(asyncio.current_task())
        await asyncio.sleep(0)
        seen.append(asyncio.current_task())
        return "ok"

    registry = tr.ToolRegistry()
    registry.register(raw_tool("t", body))

    async def caller() -> Any:
        await registry.execute(tr.ToolCall(call_id="1", name="t"))
        return asyncio.current_task()

    runner = await within(asyncio.ensure_future(caller()))
    first, second = seen
    assert first is second
    assert first is not runner
    assert first.get_name() == runner.get_name()
    assert first.get_loop() is runner.get_loop()


@pytest.mark.parametrize("with_signal", [False, True])
async def test_a_cancelled_error_the_body_raises_on_its_own_is_a_failure(
    with_signal: bool,
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        raise asyncio.CancelledError("gave up on my own")

    registry = registry_for(body)
    signal = tr.CancelController().signal if with_signal else None

    result = await asyncio.wait_for(registry.execute(make_call(signal)), 5)

    assert_error(result, "gave up on my own", None, "CancelledError")


async def test_a_body_bounding_its_wait_in_an_already_cancelling_task_gets_its_own_result(
) -> None:
    """pipeline.md "Execute": only ``BaseException``s propagate, and ``CancelledError``
    only when "the task running execute is itself cancelled" ("Cancellation"). A task
    that handled an earlier cancellation (``cancelling() == 1``) and then runs a call is
    not cancelled again; the body bounds a wait with ``asyncio.timeout`` and handles the
    ``TimeoutError`` (asyncio itself hands it the ``TimeoutError``: the timeout compares
    with the count it saw on entry). Expected: the body's value ``"fallback"``, observed
    once."""
    registry = tr.ToolRegistry()
    seen = results_seen(registry)

    async def bounded(arguments: Any, ctx: tr.RunContext) -> str:
        return await own_timeout()

    registry.register(raw_tool("bounded", bounded))

    async def call() -> tr.ToolResult:
        return await registry.execute(tr.ToolCall(call_id="1", name="bounded"))

    # The reference: the same wait, without the registry, in the same situation.
    assert await asyncio.ensure_future(after_a_handled_cancellation(own_timeout)) == "fallback"
    result = await settled(asyncio.ensure_future(after_a_handled_cancellation(call)))
    assert result.error is None
    assert result.text == "fallback"
    assert seen == [result]


async def test_an_approver_bounding_its_wait_in_an_already_cancelling_task_is_applied(
) -> None:
    """pipeline.md "Approval": the approver's answer is applied; ``CancelledError``
    propagates only when "the task running execute is cancelled while the approver is
    pending". The task handled an earlier cancellation before the call; the approver
    bounds a wait with ``asyncio.timeout``, handles the ``TimeoutError`` and answers
    ``allowed-once``. Expected: the body runs (``"ran"``)."""

    async def approver(request: tr.ApprovalRequest) -> str:
        await own_timeout()
        return "allowed-once"

    registry = tr.ToolRegistry(approver=approver)
    registry.register(raw_tool("gated", lambda arguments, ctx: "ran"))
    registry.pre_execute(lambda execution, call_next: tr.Ask("sure?"))

    async def call() -> tr.ToolResult:
        return await registry.execute(tr.ToolCall(call_id="1", name="gated"))

    result = await settled(asyncio.ensure_future(after_a_handled_cancellation(call)))
    assert result.error is None
    assert result.text == "ran"


async def test_a_body_bounding_a_wait_with_asyncio_timeout_gets_its_own_result() -> None:
    """pipeline.md "Execute": execute never raises for anything caused by a tool; only the
    task's own cancellation propagates ("Cancellation": "If the task running execute is
    itself cancelled"). A body that bounds a wait with ``asyncio.timeout`` and handles the
    ``TimeoutError`` returned a value: that is its result, although the ``CancelledError``
    that ``asyncio.timeout`` delivers passed through the task like one from outside."""
    registry = tr.ToolRegistry()
    seen = results_seen(registry)

    async def bounded(arguments: Any, ctx: tr.RunContext) -> str:
        return await own_timeout()

    registry.register(raw_tool("bounded", bounded))
    result = await settled(registry.execute(tr.ToolCall(call_id="1", name="bounded")))

    assert result.error is None
    assert result.text == "fallback"
    assert seen == [result]


async def test_a_typed_body_bounding_a_wait_with_asyncio_timeout_gets_its_own_result() -> None:
    """Same rule as above on the typed fast path (no RunContext: ``context=None``)."""
    registry = tr.ToolRegistry()

    @registry.tool
    async def bounded(path: str) -> str:
        return path + ":" + await own_timeout()

    result = await settled(registry.execute(
        tr.ToolCall(call_id="1", name="bounded", arguments={"path": "p"})))

    assert result.error is None
    assert result.text == "p:fallback"


async def test_a_body_whose_task_group_child_fails_is_that_failure() -> None:
    """pipeline.md "Body": an exception from the body is an error result with message
    ``str(exc)`` and ``type`` its class name. A ``TaskGroup`` whose child fails cancels the
    task it runs in to stop its block, then raises ``ExceptionGroup``; nobody cancelled the
    task running execute, so the result is that failure, not a ``CancelledError``."""
    registry = tr.ToolRegistry()
    seen = results_seen(registry)

    async def fan_out(arguments: Any, ctx: tr.RunContext) -> str:
        async def child() -> None:
            raise ValueError("child failed")

        async with asyncio.TaskGroup() as group:
            group.create_task(child())
            await asyncio.Event().wait()
        return "never"

    registry.register(raw_tool("fan_out", fan_out))
    result = await settled(registry.execute(tr.ToolCall(call_id="1", name="fan_out")))

    assert result.error == tr.ErrorInfo(
        "unhandled errors in a TaskGroup (1 sub-exception)", None, "ExceptionGroup")
    assert result.text == "Error: unhandled errors in a TaskGroup (1 sub-exception)"
    assert seen == [result]


async def test_a_body_awaiting_a_future_someone_else_cancels_is_a_cancelled_error_failure(
) -> None:
    """pipeline.md "Body": "A ``CancelledError`` raised by the body when neither the
    registry nor the caller's task asked for a cancellation is such a failure too (type
    ``CancelledError``)" -- with the class name as its message when ``str`` is empty. Here
    a third party cancels the future the body awaits: the task was never cancelled."""
    registry = tr.ToolRegistry()
    waiting = asyncio.Event()
    shared: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def awaits_shared(arguments: Any, ctx: tr.RunContext) -> str:
        waiting.set()
        return await shared

    registry.register(raw_tool("t", awaits_shared))
    task = asyncio.ensure_future(registry.execute(tr.ToolCall(call_id="1", name="t")))
    await asyncio.wait_for(waiting.wait(), WAIT)
    shared.cancel()  # someone else gives up on the shared work
    result = await settled(task)

    assert result.error == tr.ErrorInfo("CancelledError", None, "CancelledError")
    assert result.text == "Error: CancelledError"


async def test_an_approver_bounding_its_wait_with_asyncio_timeout_gets_its_answer_applied(
) -> None:
    """pipeline.md "Approval": an approver that returns ``unavailable`` denies with ``tool
    "<name>" requires approval, but no approval channel is available``. An approver that
    waits for a human at most so long (``asyncio.timeout``) and then answers
    ``unavailable`` must get that denial, not a ``CancelledError`` out of execute."""

    async def approver(request: tr.ApprovalRequest) -> str:
        answer = await own_timeout()
        return "unavailable" if answer == "fallback" else "allowed-once"

    registry = tr.ToolRegistry(approver=approver)
    registry.pre_execute(lambda execution, call_next: tr.Ask())

    async def body(arguments: Any, ctx: tr.RunContext) -> str:
        return "ran"

    registry.register(raw_tool("t", body))
    result = await settled(registry.execute(tr.ToolCall(call_id="1", name="t")))

    message = 'tool "t" requires approval, but no approval channel is available'
    assert result.error == tr.ErrorInfo(message, "DENIED")
    assert result.text == "Error: " + message


async def test_run_with_bodies_bounding_waits_with_asyncio_timeout_returns_every_result(
) -> None:
    """scheduler.md "Results": every call gets exactly one result; "Failures of the
    scheduler itself" are exceptions the pipeline lets through -- and the pipeline must
    not let a tool's own, handled ``asyncio.timeout`` through as a cancellation (here it
    fails the whole batch with ``CancelledError`` from a dispatch task)."""
    registry = tr.ToolRegistry()

    async def bounded(arguments: Any, ctx: tr.RunContext) -> str:
        return await own_timeout()

    registry.register(raw_tool("t", bounded, concurrency_safe=True))
    batch = await settled(registry.run(
        [tr.ToolCall(call_id=str(i), name="t") for i in range(3)], max_parallel=3))

    assert [r.text for r in batch.results] == ["fallback"] * 3
    assert not batch.cancelled


async def test_a_real_cancellation_during_a_bodys_own_timeout_still_propagates() -> None:
    """pipeline.md "Cancellation": the task running execute cancelled while the body waits
    inside its own ``asyncio.timeout`` is still that task's cancellation: the body's
    timeout leaves it standing, and ``CancelledError`` propagates."""
    registry = tr.ToolRegistry()
    seen = results_seen(registry)
    started = asyncio.Event()

    async def bounded(arguments: Any, ctx: tr.RunContext) -> str:
        try:
            async with asyncio.timeout(WAIT):
                started.set()
                await asyncio.Event().wait()
        except TimeoutError:
            return "fallback"
        return "never"

    registry.register(raw_tool("bounded", bounded))
    task = asyncio.ensure_future(registry.execute(tr.ToolCall(call_id="1", name="bounded")))
    await asyncio.wait_for(started.wait(), WAIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, WAIT)
    assert seen == []

