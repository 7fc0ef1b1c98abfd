"""``toolrail serve`` at its edges (issue 27): a request over the HTTP limit, the limit
raised, SIGINT over stdio and HTTP, and input that is not JSON-RPC on both transports.

Real processes only: ``python -m toolrail serve`` on a small registry file (and
``tests/mcp_fixtures/server.py:build`` for a call that runs until aborted), spoken to
with raw JSON lines over stdio, raw POSTs, or ``toolrail.mcp.connect``. Every wait is
bounded.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest

import toolrail as tr
import toolrail.mcp
from mcp_fixtures.processes import SERVER, free_port, http_process, wait_until_listening

WAIT = 20
FIVE_MB = 5 * 1024 * 1024
DEFAULT_LIMIT = 4 * 1024 * 1024

SOURCE = '''
import toolrail as tr

registry = tr.ToolRegistry()

@registry.tool
def size(text: str) -> int:
    """The length of a text."""
    return len(text)
'''

# A toolrail server on the SDK's app as it is: its bare 413, without the limit named.
BARE_SDK_SERVER = '''
import sys
import uvicorn
import toolrail as tr
import toolrail.mcp

sys.path.insert(0, sys.argv[2])
from tools import registry

app = toolrail.mcp.server(registry).streamable_http_app(max_request_body_size=1000)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
'''

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def size_call(call_id: str, length: int) -> tr.ToolCall:
    return tr.ToolCall(call_id=call_id, name="size", arguments={"text": "x" * length})


def call_request(request_id: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def request_size(result: tr.ToolResult, limit: str) -> int:
    """The request size the message of a refused call names (its whole text checked)."""
    assert result.error is not None
    pattern = rf"MCP server refused the request: it is (\d+) bytes, {re.escape(limit)}"
    named = re.fullmatch(pattern, result.error.message)
    assert named is not None, result.error.message
    return int(named[1])


@pytest.fixture
def target(tmp_path: Path) -> str:
    (tmp_path / "tools.py").write_text(SOURCE)
    return f"{tmp_path / 'tools.py'}:registry"


def serve_args(target: str, *extra: str) -> list[str]:
    return ["-m", "toolrail", "serve", target, *extra]


# ---- a request over the HTTP limit ---------------------------------------------------------


async def test_arguments_over_the_default_limit_fail_naming_it_and_the_session_lives_on(
    target: str,
) -> None:
    local = tr.ToolRegistry()
    port = free_port()
    with http_process(serve_args(target, "--http", f"127.0.0.1:{port}"), port) as url:
        async with toolrail.mcp.connect(local, url=url) as handle:
            refused = await asyncio.wait_for(local.execute(size_call("c1", FIVE_MB)), WAIT)
            small = await asyncio.wait_for(local.execute(size_call("c2", 3)), WAIT)
            connected = handle.connected

    assert refused.error is not None
    assert refused.error.code == "MCP_MESSAGE_TOO_LARGE"
    assert refused.error.type == "ToolError"
    assert request_size(refused, "larger than the server's limit of 4194304 bytes") > FIVE_MB
    assert small.value == 3
    assert connected is True


async def test_serve_max_request_bytes_raises_the_limit(target: str) -> None:
    local = tr.ToolRegistry()
    port = free_port()
    args = serve_args(target, "--http", f"127.0.0.1:{port}", "--max-request-bytes", "8388608")
    with http_process(args, port) as url:
        async with toolrail.mcp.connect(local, url=url):
            passed = await asyncio.wait_for(local.execute(size_call("c1", FIVE_MB)), WAIT)
            refused = await asyncio.wait_for(local.execute(size_call("c2", 9_000_000)), WAIT)

    assert passed.error is None
    assert passed.value == FIVE_MB
    assert refused.error is not None
    assert refused.error.code == "MCP_MESSAGE_TOO_LARGE"
    assert request_size(refused, "larger than the server's limit of 8388608 bytes") > 9_000_000


async def test_an_over_limit_post_gets_413_with_a_json_rpc_error_naming_the_limit(
    target: str,
) -> None:
    port = free_port()
    with http_process(serve_args(target, "--http", f"127.0.0.1:{port}"), port) as url:
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            response = await http.post(url, content=b"x" * FIVE_MB, headers=HEADERS)

    assert response.status_code == 413
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": "the request is larger than the server's limit of 4194304 bytes",
            "data": {"maxRequestBytes": DEFAULT_LIMIT},
        },
    }


async def test_a_server_whose_413_names_no_limit_still_fails_the_call_as_too_large(
    target: str, tmp_path: Path
) -> None:
    script = tmp_path / "bare.py"
    script.write_text(BARE_SDK_SERVER)
    local = tr.ToolRegistry()
    port = free_port()
    with http_process([str(script), str(port), str(tmp_path)], port) as url:
        async with toolrail.mcp.connect(local, url=url):
            refused = await asyncio.wait_for(local.execute(size_call("c1", 2000)), WAIT)
            small = await asyncio.wait_for(local.execute(size_call("c2", 3)), WAIT)

    assert refused.error is not None
    assert refused.error.code == "MCP_MESSAGE_TOO_LARGE"
    assert request_size(refused, "larger than the server accepts (HTTP 413)") > 2000
    assert small.value == 3


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "4"])
def test_serve_http_checks_max_request_bytes_before_serving(limit: Any) -> None:
    with pytest.raises(ValueError, match="max_request_bytes must be a positive int"):
        asyncio.run(
            toolrail.mcp.serve_http(tr.ToolRegistry(), port=free_port(), max_request_bytes=limit)
        )


# ---- SIGINT --------------------------------------------------------------------------------


def left_in_group(group: int) -> list[int]:
    """The processes still in process group ``group`` (Linux: from /proc)."""
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:  # state, ppid, pgrp
            left.append(int(entry.name))
    return left


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


class StdioServer:
    """``toolrail serve`` over stdio, spoken to in raw JSON lines."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def send(self, message: dict[str, Any] | str) -> None:
        line = message if isinstance(message, str) else json.dumps(message)
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        await self.process.stdin.drain()

    async def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), WAIT)
        assert line, "the server closed its output"
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def initialize(self) -> None:
        await self.send(INITIALIZE)
        assert "result" in await self.receive()
        await self.send(INITIALIZED)

    async def interrupt(self) -> tuple[int, str]:
        """SIGINT; the exit code and stderr once it exited."""
        self.process.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(self.process.wait(), WAIT)
        assert self.process.stderr is not None
        stderr = await asyncio.wait_for(self.process.stderr.read(), WAIT)
        return code, stderr.decode()


@asynccontextmanager
async def stdio_server(*args: str) -> AsyncIterator[StdioServer]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *serve_args(*args),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, to see what it leaves behind
    )
    try:
        yield StdioServer(process)
    finally:
        if process.returncode is None:
            process.kill()
            await asyncio.wait_for(process.wait(), WAIT)


@needs_proc
async def test_sigint_of_an_idle_stdio_server_exits_0_without_a_traceback(target: str) -> None:
    async with stdio_server(target) as served:
        await served.initialize()
        code, stderr = await served.interrupt()
        group = served.process.pid

    assert code == 0
    assert stderr == ""
    assert left_in_group(group) == []


@needs_proc
async def test_sigint_of_a_stdio_server_mid_call_aborts_it_and_answers_it(target: str) -> None:
    async with stdio_server(f"{SERVER}:build") as served:
        await served.initialize()
        await served.send(call_request(2, "slow", {}))
        await served.send(call_request(3, "wait_started", {}))
        started = await served.receive()
        code, stderr = await served.interrupt()
        assert served.process.stdout is not None
        answer = json.loads(await served.process.stdout.readline())
        group = served.process.pid

    assert started["id"] == 3
    assert started["result"]["content"][0]["text"] == "started"
    assert answer["id"] == 2
    assert answer["result"]["isError"] is True
    assert answer["result"]["_meta"]["toolrail/error"]["code"] == "ABORTED"
    assert code == 0
    assert "Traceback" not in stderr
    assert left_in_group(group) == []


@needs_proc
def test_sigint_of_an_http_server_exits_0_and_leaves_no_process(target: str) -> None:
    port = free_port()
    with http_served(serve_args(target, "--http", f"127.0.0.1:{port}"), port) as process:
        process.send_signal(signal.SIGINT)
        code = process.wait(WAIT)
        assert process.stderr is not None
        stderr = process.stderr.read()

    assert code == 0
    assert "Traceback" not in stderr
    assert left_in_group(process.pid) == []


@contextmanager
def http_served(args: list[str], port: int) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, *args], stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        wait_until_listening(process, port, WAIT)
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(WAIT)
        if process.stderr is not None:
            process.stderr.close()


# ---- input that is not JSON-RPC ------------------------------------------------------------


async def test_over_stdio_lines_that_are_not_json_rpc_get_errors_and_serving_goes_on(
    target: str,
) -> None:
    async with stdio_server(target) as served:
        await served.send("this is not JSON")
        not_json = await served.receive()
        await served.send({"foo": 1})
        not_json_rpc = await served.receive()
        await served.send({"jsonrpc": "2.0", "id": 9})
        with_an_id = await served.receive()
        await served.send("")  # a blank line is skipped
        await served.initialize()
        await served.send("{broken")
        in_session = await served.receive()
        await served.send(call_request(2, "size", {"text": "abc"}))
        answer = await served.receive()
        code, stderr = await served.interrupt()

    parse_error = {"code": -32700, "message": "Parse error: the line is not JSON"}
    invalid = {"code": -32600, "message": "Invalid request: the JSON is not a JSON-RPC message"}
    assert not_json == {"jsonrpc": "2.0", "id": None, "error": parse_error}
    assert not_json_rpc == {"jsonrpc": "2.0", "id": None, "error": invalid}
    assert with_an_id == {"jsonrpc": "2.0", "id": 9, "error": invalid}
    assert in_session == {"jsonrpc": "2.0", "id": None, "error": parse_error}
    assert answer["id"] == 2
    assert answer["result"]["structuredContent"] == {"result": 3}
    assert code == 0
    assert stderr.splitlines() == [
        "MCP over stdio: Parse error: the line is not JSON (answered -32700): "
        "'this is not JSON\\n'",
        "MCP over stdio: Invalid request: the JSON is not a JSON-RPC message (answered -32600): "
        "{'foo': 1}",
        "MCP over stdio: Invalid request: the JSON is not a JSON-RPC message (answered -32600): "
        "{'jsonrpc': '2.0', 'id': 9}",
        "MCP over stdio: Parse error: the line is not JSON (answered -32700): '{broken\\n'",
    ]


async def test_over_http_posts_that_are_not_json_rpc_get_errors_and_serving_goes_on(
    target: str,
) -> None:
    port = free_port()
    with http_process(serve_args(target, "--http", f"127.0.0.1:{port}"), port) as url:
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            not_json = await http.post(url, content=b"{not json", headers=HEADERS)
            not_json_rpc = await http.post(url, content=b'{"foo": 1}', headers=HEADERS)
            opened = await http.post(url, json=INITIALIZE, headers=HEADERS)
            session = {**HEADERS, "mcp-session-id": opened.headers["mcp-session-id"]}
            await http.post(url, json=INITIALIZED, headers=session)
            in_session = await http.post(url, content=b"{broken", headers=session)
            listed = await http.post(
                url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=session
            )
        local = tr.ToolRegistry()
        async with toolrail.mcp.connect(local, url=url):
            called = await asyncio.wait_for(local.execute(size_call("c1", 3)), WAIT)

    for response in (not_json, in_session):
        assert response.status_code == 400
        body = response.json()
        assert body["id"] is None
        assert body["error"]["code"] == -32700
        assert body["error"]["message"].startswith("Parse error: ")
    # The SDK answers a JSON object that is no JSON-RPC message with -32602 (where
    # JSON-RPC 2.0 says -32600) and the validation errors as the message.
    assert not_json_rpc.status_code == 400
    assert not_json_rpc.json()["error"]["code"] == -32602
    assert not_json_rpc.json()["error"]["message"].startswith("Validation error: ")
    assert listed.status_code == 200
    assert '"name":"size"' in listed.text
    assert called.value == 3
