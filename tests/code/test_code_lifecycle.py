"""The sandbox pool's lifecycle (code/_pool.py; issue 25, item 4).

A program that is cancelled, times out, hits the memory limit or is killed leaves no
worker process, no task and no slot or spare in a bad state; ``aclose()`` returns only
once every worker process has exited (a worker that does not answer is killed); 300
programs in a row keep memory flat; 50 concurrent programs share the pool without a
deadlock, and one waiting for a worker can be cancelled at once.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import tracemalloc
from typing import Any

import pytest

import toolrail as tr
from helpers import one_turn, within
from toolrail.code import CodeSettings

pytest.importorskip("pydantic_monty")

from toolrail.code import _pool as pools

SPIN = "await tools.begin({})\nwhile True:\n    pass"


class Lab:
    """A code-mode registry whose tools report the program's progress through gates."""

    def __init__(self, **settings: Any) -> None:
        self.registry = tr.ToolRegistry(presentation="code", code=CodeSettings(**settings))
        self.began = asyncio.Event()  # a program called begin
        self.release = asyncio.Event()  # what hold waits for
        self.holding = 0
        self.most = 0
        self.full: asyncio.Event | None = None  # set when `holding` reaches `self.want`
        self.want = 0

        @self.registry.tool(concurrency_safe=True)
        async def read_file(path: str) -> str:
            """Read a file."""
            return f"contents of {path}"

        @self.registry.tool(concurrency_safe=True)
        async def begin() -> str:
            """Tell the test the program runs."""
            self.began.set()
            return "go"

        @self.registry.tool(concurrency_safe=True)
        async def hold(n: int) -> int:
            """Wait for the test's release, counting the programs waiting at once."""
            self.holding += 1
            self.most = max(self.most, self.holding)
            if self.full is not None and self.holding >= self.want:
                self.full.set()
            try:
                await self.release.wait()
            finally:
                self.holding -= 1
            return n

    async def run(self, code: str, *, call_id: str = "r",
                  signal: tr.CancelSignal | None = None) -> tr.ToolResult:
        call = tr.ToolCall(call_id=call_id, name="run_code", arguments={"code": code},
                           signal=signal)
        return await self.registry.execute(call)

    @property
    def pool(self) -> pools.SandboxPool:
        pool = self.registry._pool
        assert pool is not None
        return pool


def _children() -> dict[int, str]:
    """This process's child processes, and their states (``Z``: a zombie)."""
    found = {}
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(") ", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                found[int(entry)] = fields[0]
    return found


def _resident() -> int:
    """This process's resident set, in bytes (0 where there is no procfs)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _running_children() -> set[int]:
    return {pid for pid, state in _children().items() if state not in ("Z", "X")}


async def _reaped(pid: int) -> None:
    """A killed worker is reaped (by the sandbox's runtime), not left a zombie: bounded."""
    for _ in range(500):
        if pid not in _children():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"worker {pid} is still a child of ours: {_children()[pid]}")


async def _settled(lab: Lab) -> None:
    """Nothing of a finished program is left: no program, task, held slot or session but
    the warm spares', and each spare's worker runs."""
    pool = lab.pool
    await within(pool.ready(), 30)
    assert pool.running == set()
    spares = [task.result() for task in pool._spares.values()]
    assert all(spare is not None and pools.alive(spare.worker_pid) for spare in spares)
    assert set(pool._holding) == {id(spare) for spare in spares}
    assert pool._slots is not None
    assert pool._slots._value == pool._size - len(spares)
    others = asyncio.all_tasks() - {asyncio.current_task(), *pool._spares.values()}
    assert others == set()


requires_procfs = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")


@requires_procfs
async def test_aclose_returns_only_once_every_worker_process_has_exited() -> None:
    # Closed while its spare still warms (the checkout or the feeds in flight) or once
    # it is warm: 30 one-program registries, no worker of theirs runs after aclose().
    before = _running_children()
    for n in range(30):
        lab = Lab()
        assert (await within(lab.run('await tools.read_file({"path": "a"})'), 30)).value == {
            "logs": "", "result": "contents of a"}
        if n % 2:
            await lab.pool.ready()
        pool = lab.pool
        await within(lab.registry.aclose(), 30)
        assert _running_children() - before == set(), f"round {n}"
        assert pool._workers == {}
        assert pool._holding == {}


@requires_procfs
async def test_aclose_kills_a_worker_that_does_not_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pools, "_EXIT_GRACE", 0.2)
    lab = Lab()
    await within(lab.run("1 + 1"), 30)
    await lab.pool.ready()
    [spare] = [task.result() for task in lab.pool._spares.values()]
    pid = spare.worker_pid
    os.kill(pid, signal.SIGSTOP)  # it will never answer the pool's goodbye
    await within(lab.registry.aclose(), 10)
    assert not pools.alive(pid)
    await _reaped(pid)


@requires_procfs
@pytest.mark.parametrize("how", ["signal", "task"])
async def test_a_cancelled_program_leaves_no_worker_task_or_slot_behind(how: str) -> None:
    lab = Lab(max_duration=60)  # only a kill ends the spinning program in time
    async with lab.registry:
        controller = tr.CancelController()
        running = asyncio.create_task(lab.run(SPIN, signal=controller.signal))
        await within(lab.began.wait(), 30)
        [program] = lab.pool.running
        pid = program.pid
        assert pid is not None
        assert pools.alive(pid)
        if how == "signal":
            controller.cancel()
            result = await within(running, 10)
            assert result.error is not None
            assert result.error.code == "ABORTED"
        else:
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await within(running, 10)
        assert not pools.alive(pid)  # exited before run_code returned
        await _reaped(pid)  # ... and not left a zombie
        await _settled(lab)
        after = await within(lab.run('await tools.read_file({"path": "b"})'), 30)
        assert after.value == {"logs": "", "result": "contents of b"}
        await _settled(lab)


@pytest.mark.parametrize(("code", "kind"), [
    ("while True:\n    pass", "timeout"),
    ("x = [1] * 10 ** 9", "memory"),
])
async def test_a_program_over_a_limit_leaves_its_worker_and_the_pool_sound(
        code: str, kind: str) -> None:
    lab = Lab(max_duration=0.2, max_memory=8 * 1024 * 1024)
    async with lab.registry:
        result = await within(lab.run(code), 30)
        assert result.error is not None
        assert result.error.message.startswith(f"code run failed ({kind}): ")
        await _settled(lab)
        after = await within(lab.run('await tools.read_file({"path": "c"})'), 30)
        assert after.value == {"logs": "", "result": "contents of c"}
        await _settled(lab)


async def test_300_programs_in_a_row_keep_memory_flat() -> None:
    lab = Lab(type_check=False)  # the checker's stub loading is the worker's: 4x the time
    async with lab.registry:
        async def programs(count: int) -> None:
            for n in range(count):
                result = await lab.run(f'await tools.read_file({{"path": "{n}"}})',
                                       call_id=f"r{n}")
                assert result.value == {"logs": "", "result": f"contents of {n}"}
            await lab.pool.ready()
            gc.collect()

        await within(programs(20), 60)  # warm: caches, the spare, the first workers
        tracemalloc.start()
        try:
            await within(programs(30), 60)
            baseline, resident = tracemalloc.get_traced_memory()[0], _resident()
            await within(programs(250), 120)
            grown = tracemalloc.get_traced_memory()[0] - baseline
            grown_resident = _resident() - resident
        finally:
            tracemalloc.stop()
        # Loop and allocator bookkeeping only: 250 programs retaining 256 bytes each
        # would be 64 KiB (measured: 5-9 KiB). The resident set also counts the
        # sandbox's Rust side (measured: under 100 KiB).
        assert grown < 64 * 1024, grown
        assert grown_resident < 8 * 1024 * 1024, grown_resident
        assert len(lab.pool._workers) <= lab.pool._size
        await _settled(lab)


async def test_50_concurrent_programs_share_the_pool_without_deadlock() -> None:
    lab = Lab(type_check=False)
    async with lab.registry:
        await within(lab.run("1"), 30)  # the pool is started
        size = lab.pool._size
        lab.want, lab.full = size - pools._SPARES, asyncio.Event()
        calls = [asyncio.create_task(lab.run(f"await tools.hold({{'n': {n}}})",
                                             call_id=f"r{n}")) for n in range(50)]
        await within(lab.full.wait(), 30)  # as many programs as the pool serves hold...
        for _ in range(20):
            await one_turn()
        assert lab.holding <= size  # ...the others wait for a worker, none for good
        lab.release.set()
        results = await within(asyncio.gather(*calls), 60)
        assert [r.value for r in results] == [{"logs": "", "result": n} for n in range(50)]
        assert size - pools._SPARES <= lab.most <= size
        await _settled(lab)


async def test_a_session_close_cancelled_at_once_still_closes_it_before_its_slot_is_free(
        ) -> None:
    # A stop in the same turn of the loop as the close: the close, still queued for a
    # pool thread, must run all the same (a session left checked out would hold a worker
    # that the pool counts as free).
    pool = pools.SandboxPool()
    try:
        await pool.start()
        pool._settle_loop()
        options = {"limits": {"max_feed_duration_secs": 5, "max_memory": 64 * 1024 * 1024,
                              "max_suspensions": 1000},
                   "type_check": False, "type_check_stubs": "", "type_check_format": "concise"}
        session = await within(pool._open(options), 30)
        slots = pool._slots
        assert slots is not None
        free = slots._value
        closing = asyncio.ensure_future(pool._exit(session))
        asyncio.get_running_loop().call_soon(closing.cancel)
        with pytest.raises(asyncio.CancelledError):
            await within(closing, 30)
        assert slots._value == free + 1
        with pytest.raises(RuntimeError, match="already been finished"):
            session.feed_run("1 + 1")  # closed
    finally:
        await within(pool.close(), 30)


async def test_a_program_waiting_for_a_worker_is_cancelled_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # a pool of 1 + _SPARES workers
    lab = Lab(type_check=False)
    async with lab.registry:
        await within(lab.run("1"), 30)
        await lab.pool.ready()
        size = lab.pool._size
        lab.want, lab.full = size, asyncio.Event()  # the spare first, then new checkouts
        holders = [asyncio.create_task(lab.run(f"await tools.hold({{'n': {n}}})",
                                               call_id=f"h{n}")) for n in range(lab.want)]
        await within(lab.full.wait(), 30)  # every worker is taken (spares included)
        slots = lab.pool._slots
        assert slots is not None
        assert slots.locked()
        controller = tr.CancelController()
        waiting = asyncio.create_task(lab.run("1", call_id="w", signal=controller.signal))
        while not slots._waiters:  # it waits for a slot
            await one_turn()
        controller.cancel()
        result = await within(waiting, 5)  # ...while every worker is still taken
        assert result.error is not None
        assert result.error.code == "ABORTED"
        assert lab.holding == lab.want
        lab.release.set()
        assert [r.value for r in await within(asyncio.gather(*holders), 30)] == [
            {"logs": "", "result": n} for n in range(lab.want)]
        await _settled(lab)
