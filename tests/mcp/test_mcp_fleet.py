"""Many agents, one MCP fleet (docs/scale-out.md): ``toolrail serve --http --stateless``
replicas behind a load balancer, which this test starts (a small round-robin ASGI proxy:
no nginx or HAProxy here), and a client that survives a replica killed mid-call."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

import toolrail as tr
import toolrail.mcp
from mcp_fixtures.processes import free_port, wait_until_listening

pytestmark = pytest.mark.timeout(120)

WAIT = 30.0

SOURCE = '''
import os, time
from pathlib import Path
import toolrail as tr

registry = tr.ToolRegistry()

@registry.tool(concurrency_safe=True)
def where() -> int:
    """The serving process."""
    return os.getpid()

@registry.tool
def slow(path: str) -> int:
    """Write the serving process's pid to path, then wait for path + ".go"."""
    Path(path).write_text(str(os.getpid()))
    while not Path(path + ".go").exists():
        time.sleep(0.01)
    return os.getpid()
'''


class RoundRobin:
    """A load balancer for the test: each request to the next live replica, its
    response streamed back; a replica that refuses the connection is skipped, and one
    that dies mid-response breaks the client's connection, as a real proxy would."""

    def __init__(self, backends: list[str]) -> None:
        self.backends = backends
        self.turn = 0
        self.client = httpx.AsyncClient(timeout=None)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await self.client.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"host", b"content-length")]
        query = scope.get("query_string", b"").decode()
        for _ in self.backends:
            backend = self.backends[self.turn % len(self.backends)]
            self.turn += 1
            url = backend + scope["path"] + (f"?{query}" if query else "")
            request = self.client.build_request(scope["method"], url, headers=headers,
                                                content=body)
            try:
                response = await self.client.send(request, stream=True)
                break
            except httpx.ConnectError:
                continue
        else:
            await send({"type": "http.response.start", "status": 502, "headers": []})
            await send({"type": "http.response.body", "body": b"no live replica"})
            return
        try:
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [(k, v) for k, v in response.headers.raw
                                    if k.lower() not in (b"transfer-encoding", b"connection")]})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()


def replica(target: str, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "toolrail", "serve", target, "--http",
                             f"127.0.0.1:{port}", "--stateless"])


@contextlib.asynccontextmanager
async def fleet(tmp_path: Path, replicas: int) -> AsyncIterator[tuple[str, list[Any]]]:
    (tmp_path / "tools.py").write_text(SOURCE)
    target = f"{tmp_path / 'tools.py'}:registry"
    processes, backends = [], []
    try:
        for _ in range(replicas):
            port = free_port()
            process = replica(target, port)
            processes.append(process)
            await asyncio.to_thread(wait_until_listening, process, port, WAIT)
            backends.append(f"http://127.0.0.1:{port}")
        port = free_port()
        balancer = uvicorn.Server(uvicorn.Config(RoundRobin(backends), host="127.0.0.1",
                                                 port=port, log_level="error"))
        serving = asyncio.ensure_future(balancer.serve())
        while not balancer.started:  # noqa: ASYNC110 (uvicorn has no event for it)
            await asyncio.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{port}/mcp", processes
        finally:
            balancer.should_exit = True
            await serving
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process in processes:
            process.wait(WAIT)


async def test_stateless_replicas_behind_a_balancer_serve_one_session(tmp_path: Path) -> None:
    local = tr.ToolRegistry()
    async with fleet(tmp_path, 2) as (url, processes), toolrail.mcp.connect(local, url=url):
        pids = set()
        for i in range(6):
            result = await asyncio.wait_for(
                local.execute(tr.ToolCall(call_id=str(i), name="where")), WAIT)
            assert result.error is None, result.text
            pids.add(result.value)
    assert pids == {p.pid for p in processes}  # no session affinity needed


async def test_a_client_survives_a_replica_killed_mid_call(tmp_path: Path) -> None:
    local = tr.ToolRegistry()
    pid_file = tmp_path / "pid"
    async with (fleet(tmp_path, 2) as (url, processes),
                toolrail.mcp.connect(local, url=url, reconnect=True) as handle):
            running = asyncio.ensure_future(local.execute(tr.ToolCall(
                call_id="s", name="slow", arguments={"path": str(pid_file)})))
            async with asyncio.timeout(WAIT):
                while not pid_file.exists():  # noqa: ASYNC110 (written by the replica)
                    await asyncio.sleep(0.01)
            victim = int(pid_file.read_text())
            os.kill(victim, signal.SIGKILL)
            lost = await asyncio.wait_for(running, WAIT)
            async with asyncio.timeout(WAIT):
                while True:  # the handle reconnects through the balancer
                    after = await local.execute(tr.ToolCall(call_id="w", name="where"))
                    if after.error is None:
                        break
                    await asyncio.sleep(0.05)
            connected = handle.connected
    assert lost.error is not None
    assert lost.error.code == "MCP_DISCONNECTED", lost.error
    assert after.value != victim
    assert after.value in {p.pid for p in processes}
    assert connected
