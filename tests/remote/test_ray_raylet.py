"""docs/scale-out.md, "A dead raylet": a ``kill -9`` of a real raylet under a real agent.

The agent (``ray_agent.py``) starts its own local cluster, so that the other Ray tests'
cluster is never touched.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="the Ray tests need toolrail[ray]")

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(not sys.platform.startswith("linux"),
                       reason="reads processes from /proc, and the guard is Linux's"),
]

AGENT = Path(__file__).with_name("ray_agent.py")


class Agent:
    """The agent process, read line by line (Ray prints on its stdout too)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def next(self, event: str) -> dict[str, Any]:
        assert self.process.stdout is not None
        while True:
            line = await asyncio.wait_for(self.process.stdout.readline(), 60)
            assert line, f"the agent exited before saying {event!r}"
            if not line.startswith(b'{"event": '):
                continue
            said: dict[str, Any] = json.loads(line)
            if said["event"] == "no ray":
                pytest.skip(f"Ray cannot start here: {said['reason']}")
            if said["event"] == event:
                return said


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[Agent]:
    # Ray's sockets live under its temp dir, and a socket's path is at most 107 bytes.
    ray_dir = tempfile.mkdtemp(prefix="tr-ray-")
    with (tmp_path / "stderr").open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(AGENT), ray_dir, str(tmp_path / "pid"),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=stderr)
    started = descendants(process.pid)
    try:
        yield Agent(process)
    finally:
        leftover = {**started, **descendants(process.pid)}
        if process.returncode is None:
            process.kill()
            await process.wait()
        for pid in leftover:  # only on a failure: the agent's Ray shuts its processes
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_dir, ignore_errors=True)


async def test_a_dead_raylet_ends_the_call_in_flight_and_the_agent_stays_up(
        agent: Agent) -> None:
    worker = (await agent.next("running"))["worker"]
    cluster = descendants(agent.process.pid)
    assert worker in cluster
    (raylet,) = [pid for pid, name in cluster.items() if name == "raylet"]
    killed = time.monotonic()
    os.kill(raylet, signal.SIGKILL)

    in_flight = await agent.next("result")
    ended = time.monotonic() - killed
    assert in_flight["error"] == ["the Ray worker running the tool died: NodeDiedError",
                                  "REMOTE_WORKER_DIED", "ToolError"]
    assert ended < 5, f"the call in flight ended {ended:.1f} s after the raylet died"
    assert await exits(worker, within=5)

    assert (await agent.next("result"))["error"] == [
        "tool call timed out after 1s", "TOOL_TIMEOUT", "ToolTimeoutError"]
    await agent.next("finally")
    assert await asyncio.wait_for(agent.process.wait(), 30) == 0
    for pid in cluster:
        assert await exits(pid, within=10), f"{cluster[pid]} ({pid}) outlived the agent"


def descendants(root: int) -> dict[int, str]:
    """The processes under ``root`` (the living ones), by pid, with their names."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        pid = int(entry.name)
        names[pid] = stat[stat.index("(") + 1:stat.rindex(")")]
        state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
        if state != "Z":
            parents[pid] = int(ppid)
    found: dict[int, str] = {}
    level = {root}
    while level:
        level = {pid for pid, ppid in parents.items() if ppid in level and pid not in found}
        found.update((pid, names[pid]) for pid in level)
    return found


def gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie has: it waits only to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2:].startswith("Z")


async def exits(pid: int, *, within: float) -> bool:
    deadline = time.monotonic() + within
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True
