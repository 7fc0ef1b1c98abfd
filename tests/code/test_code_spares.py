"""The sandbox pool's warm spare sessions (code/_pool.py, ``SandboxPool``).

A spare is warmed after a program, for the next one with the same SDK and settings. It
must behave as a fresh session (code-mode.md, "Running a program", item 1), never be
used with a dead worker, never outnumber ``_SPARES``, and be gone after ``aclose()``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Any

import pytest

import toolrail as tr
from helpers import one_turn, within
from toolrail.code import CodeSettings

pytest.importorskip("pydantic_monty")

from toolrail.code import _pool as pools


def _registry(**settings: Any) -> tr.ToolRegistry:
    registry = tr.ToolRegistry(presentation="code", code=CodeSettings(**settings))

    @registry.tool(concurrency_safe=True)
    async def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    return registry


async def _run(registry: tr.ToolRegistry, code: str, scope: Any = None) -> tr.ToolResult:
    call = tr.ToolCall(call_id="r", name="run_code", arguments={"code": code}, scope=scope)
    return await within(registry.execute(call), 30)


def _pool(registry: tr.ToolRegistry) -> pools.SandboxPool:
    pool = registry._pool
    assert pool is not None
    return pool


async def _spare_pids(pool: pools.SandboxPool) -> list[int]:
    await pool.ready()
    pids = []
    for task in pool._spares.values():
        spare = task.result()
        assert spare is not None, "the spare failed to warm"
        pids.append(spare.worker_pid)
    return pids


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A killed worker the pool has not reaped yet is a zombie: gone all the same.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1].startswith("Z")


async def _wait_gone(pid: int) -> None:
    for _ in range(500):
        if _gone(pid):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"worker {pid} is still running")


async def _wait_exited(pid: int) -> None:
    """Until ``pid`` has exited, all its threads, as the pool sees it (its pidfd, or /proc
    where there are none: a killed worker's first thread shows ``Z`` in /proc a moment
    before the others are gone)."""
    fd = pools._pidfd(pid)
    try:
        assert await pools._wait_exit(pid, fd, 5.0), f"worker {pid} has not exited"
    finally:
        if fd is not None:
            os.close(fd)


@pytest.mark.parametrize("type_check", [True, False])
async def test_a_spare_is_warmed_after_a_program_and_serves_the_next(type_check: bool) -> None:
    async with _registry(type_check=type_check) as registry:
        first = await _run(registry, 'await tools.read_file({"path": "a"})')
        assert first.value == {"logs": "", "result": "contents of a"}
        pool = _pool(registry)
        [pid] = await _spare_pids(pool)
        second = await _run(registry, 'await tools.read_file({"path": "b"})')
        assert second.value == {"logs": "", "result": "contents of b"}
        # The second program took that spare; a new one is warmed for the third.
        [replacement] = await _spare_pids(pool)
        assert replacement != pid or not _gone(pid)


async def test_a_spare_carries_nothing_from_the_program_before() -> None:
    async with _registry(type_check=False) as registry:
        assert (await _run(registry, "secret = 41\nsecret + 1")).value == {
            "logs": "", "result": 42}
        await _pool(registry).ready()
        result = await _run(registry, "secret")
        assert result.is_error
        assert result.error is not None
        assert result.error.message.startswith("code run failed (runtime): ")
        assert "NameError" in result.error.message


async def test_a_checked_spare_still_refuses_a_program_that_fails_the_type_check() -> None:
    async with _registry() as registry:
        await _run(registry, "1 + 1")
        await _pool(registry).ready()
        result = await _run(registry, 'x: int = "a"\nprint("ran")')
        assert result.is_error
        assert result.error is not None
        assert result.error.message.startswith("code run failed (type): ")
        assert "Captured output" not in result.error.message
        # The warm-up's own names are no program's: using one is still an error.
        result = await _run(registry, "__toolrail_value")
        assert result.is_error


async def test_a_spare_whose_worker_died_is_not_used() -> None:
    async with _registry(type_check=False) as registry:
        await _run(registry, "1 + 1")
        [pid] = await _spare_pids(_pool(registry))
        os.kill(pid, signal.SIGKILL)
        await _wait_exited(pid)
        result = await _run(registry, 'await tools.read_file({"path": "a"})')
        assert result.value == {"logs": "", "result": "contents of a"}


async def test_a_programs_session_is_closed_only_after_its_result_has_returned(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Closing a type-checked session holds the interpreter's lock for milliseconds: the
    # close begins _CLOSE_DELAY after the run, on its pool thread, and the pool's
    # ready() and aclose() wait for it (a long delay here, so that nothing races it).
    monkeypatch.setattr(pools, "_CLOSE_DELAY", 1.0)
    delays: list[float] = []
    close = pools._close

    def recorded(session: Any, delay: float) -> None:
        delays.append(delay)
        close(session, delay)

    monkeypatch.setattr(pools, "_close", recorded)
    async with _registry() as registry:
        assert (await _run(registry, "1 + 1")).value == {"logs": "", "result": 2}
        pool = _pool(registry)
        [closing] = pool._closing
        assert not closing.done()  # the result came first
        await within(pool.ready(), 30)
        assert closing.done()
        assert pool._closing == set()
        assert delays == [1.0]  # the program's session; the spare was only warmed
        assert (await _run(registry, "2 + 2")).value == {"logs": "", "result": 4}
    # The second program's; aclose() waited for it (every session closed, its slot given
    # back), and cancelled the spare that waited for it too, before it was warmed.
    assert delays == [1.0, 1.0]
    assert pool._holding == {}
    assert pool._closing == set()


async def test_spares_never_outnumber_the_limit_and_the_oldest_gives_way() -> None:
    async with _registry(type_check=False) as registry:
        scopes = [registry.scope(f"agent-{n}") for n in range(pools._SPARES + 1)]
        first: Any = None
        for n, scope in enumerate(scopes):
            @scope.tool(name=f"own_{n}")
            def own() -> str:
                """A tool of this scope only: its SDK differs from the others'."""
                return "own"

            await _run(registry, "1 + 1", scope=scope.key)
            pool = _pool(registry)
            await pool.ready()
            assert len(pool._spares) == min(n + 1, pools._SPARES)
            if first is None:
                [task] = pool._spares.values()
                first = task.result()
        assert first not in [task.result() for task in pool._spares.values()]
        for _ in range(500):  # the evicted spare's session is closed: its worker returned
            if first.worker_pid is None:
                break
            await asyncio.sleep(0.01)
        assert first.worker_pid is None


async def test_aclose_stops_every_spare_and_a_closed_pool_warms_none() -> None:
    registry = _registry()
    await _run(registry, "1 + 1")
    pool = _pool(registry)
    [pid] = await _spare_pids(pool)
    await registry.aclose()
    assert pool._spares == {}
    await _wait_gone(pid)


async def test_aclose_while_a_spare_warms_cancels_the_warm_up() -> None:
    registry = _registry()
    await _run(registry, "1 + 1")
    pool = _pool(registry)
    [warming] = pool._spares.values()
    await registry.aclose()
    assert warming.done()
    assert pool._spares == {}


async def test_a_program_cancelled_while_its_spare_warms_leaves_the_spare_for_the_next() -> None:
    async with _registry() as registry:
        await _run(registry, "1 + 1")
        pool = _pool(registry)
        [warming] = pool._spares.values()
        if warming.done():
            pytest.skip("the spare warmed before the program could wait for it")
        controller = tr.CancelController()
        # A program not checked before: one that was needs no warm checker, and would
        # not wait for the spare (pool.session's ``checked``).
        call = tr.ToolCall(call_id="r", name="run_code", arguments={"code": "3 + 3"},
                           signal=controller.signal)
        taking = asyncio.Event()
        take = pool._take

        async def taken(key: Any, wait: bool = True) -> Any:
            taking.set()  # the spare's task leaves the pool before take's first await
            return await take(key, wait)

        pool._take = taken  # type: ignore[method-assign]
        waiting = asyncio.create_task(registry.execute(call))
        await taking.wait()
        assert pool._spares == {}
        assert not warming.done()
        controller.cancel()
        result = await within(waiting, 30)
        assert result.error is not None
        assert result.error.code == "ABORTED"
        assert list(pool._spares.values()) == [warming]
        assert (await _run(registry, "2 + 2")).value == {"logs": "", "result": 4}


def test_a_registry_used_from_a_second_event_loop_still_runs_programs() -> None:
    # The first loop ends while the spare warms (asyncio.run cancels the warm-up): the
    # second loop must not take that cancelled warm-up for a spare.
    registry = _registry()

    async def once(n: int) -> tr.ToolResult:
        return await _run(registry, f"{n} + 1")

    assert asyncio.run(once(1)).value == {"logs": "", "result": 2}
    assert asyncio.run(once(2)).value == {"logs": "", "result": 3}

    async def warm_then_close() -> None:
        await _pool(registry).ready()  # this loop's spare, finished
        await registry.aclose()

    asyncio.run(warm_then_close())


@pytest.mark.parametrize("type_check", [True, False])
async def test_a_failure_reads_the_same_from_a_new_session_and_from_a_spare(
        type_check: bool) -> None:
    async with _registry(type_check=type_check) as registry:
        program = 'a = 1\nraise ValueError("boom")\n'
        cold = await _run(registry, program)
        await _pool(registry).ready()
        warm = await _run(registry, program)
    assert cold.error is not None
    assert "ValueError: boom" in cold.error.message
    assert warm.error == cold.error  # the traceback names the same feed of its session


class _Workers:
    """``pydantic_monty.Monty`` with hooks: its start (on a thread of the pool's) waits
    for ``release``, and the checkouts numbered in ``failing`` raise ``OSError``."""

    def __init__(self, real: Any, release: threading.Event | None,
                 failing: frozenset[int]) -> None:
        self.real = real
        self.release = release
        self.failing = failing
        self.loop = asyncio.get_running_loop()  # made by the pool, on the loop
        self.starting = asyncio.Event()
        self.checkouts = 0

    def __enter__(self) -> _Workers:
        self.loop.call_soon_threadsafe(self.starting.set)
        if self.release is not None:
            self.release.wait()
        self.real.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.real.__exit__(None, None, None)

    def checkout(self, **options: Any) -> Any:
        self.checkouts += 1
        if self.checkouts in self.failing:
            raise OSError("no worker today")
        return self.real.checkout(**options)


def _hooked(monkeypatch: pytest.MonkeyPatch, *, release: threading.Event | None = None,
            failing: frozenset[int] = frozenset()) -> list[_Workers]:
    import pydantic_monty

    made: list[_Workers] = []
    real = pydantic_monty.Monty

    def workers(**options: Any) -> _Workers:
        made.append(_Workers(real(**options), release, failing))
        return made[-1]

    monkeypatch.setattr(pydantic_monty, "Monty", workers)
    return made


async def test_aclose_while_the_workers_start_stops_them_and_aborts_the_program(
        monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    made = _hooked(monkeypatch, release=release)
    registry = _registry(type_check=False)
    program = asyncio.create_task(_run(registry, "1 + 1"))
    await within(_started(made))
    pool = _pool(registry)
    closing = asyncio.create_task(registry.aclose())
    await one_turn()
    release.set()
    await within(closing)
    result = await within(program)
    assert result.error == tr.ErrorInfo("tool call aborted: the registry is closing",
                                        "ABORTED", "ToolAbortedError")
    assert pool._monty is None


async def _started(made: list[_Workers]) -> None:
    while not made:  # the pool makes its workers object in its first program's task
        await one_turn()
    await made[0].starting.wait()


async def test_a_spare_whose_checkout_fails_leaves_the_next_program_to_check_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made = _hooked(monkeypatch, failing=frozenset({2}))  # 1: the program, 2: its spare
    async with _registry(type_check=False) as registry:
        assert (await _run(registry, "1 + 1")).value == {"logs": "", "result": 2}
        await _pool(registry).ready()
        assert (await _run(registry, "2 + 2")).value == {"logs": "", "result": 4}
        await _pool(registry).ready()
    assert made[0].checkouts == 4  # the failed spare, a new checkout, and the next spare
