"""``toolrail.mcp.connect`` when the server fails: it is gone, it dies, it never starts,
its answers are huge. Real servers only: ``tests/mcp_fixtures/server.py`` as a stdio
subprocess or on a loopback HTTP port. Waits are bounded; nothing sleeps to synchronize
(a restarted server is seen through the registry's change listener).
"""

from __future__ import annotations

import asyncio
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

import toolrail as tr
import toolrail.mcp
from mcp_fixtures.processes import SERVER, STDIO_ARGS, free_port, http_process
from mcp_fixtures.processes import wait_until_listening as listening

WAIT = 10
TEN_MB = 10 * 1024 * 1024


def call(tool: str, call_id: str = "c1", /, **arguments: Any) -> tr.ToolCall:
    return tr.ToolCall(call_id=call_id, name=tool, arguments=arguments)


def until(registry: tr.ToolRegistry, condition: Callable[[], bool]) -> asyncio.Event:
    reached = asyncio.Event()
    registry.on_change(lambda: reached.set() if condition() else None)
    return reached


def pid_tool(registry: tr.ToolRegistry) -> str | None:
    names = [schema.name for schema in registry.schemas() if schema.name.startswith("pid_")]
    return names[0] if names else None


def http_args(port: int, *extra: str) -> list[str]:
    return [str(SERVER), "http", str(port), *extra]


# ---- a server that goes away ---------------------------------------------------------------


async def test_over_http_a_server_gone_makes_calls_disconnected_and_the_block_lives_on() -> None:
    local = tr.ToolRegistry()
    port = free_port()
    with ExitStack() as server:
        url = server.enter_context(http_process(http_args(port), port))
        async with toolrail.mcp.connect(local, url=url) as handle:
            before = await local.execute(call("add", a=1, b=2))
            server.close()  # the server process stops
            gone = await asyncio.wait_for(local.execute(call("add", "c2", a=1, b=2)), WAIT)
            again = await asyncio.wait_for(local.execute(call("stats", "c3", values=[1])), WAIT)
            connected = handle.connected
        after_block = local.schemas()

    assert before.value == 3
    for result in (gone, again):
        assert result.error is not None
        assert result.error.code == "MCP_DISCONNECTED"
        assert result.error.message.startswith("MCP server disconnected: ")
    assert connected is False
    assert after_block == []


async def test_over_http_reconnect_reopens_the_session_and_re_syncs_the_tools() -> None:
    local = tr.ToolRegistry()
    port = free_port()
    first, second = ExitStack(), ExitStack()
    with first, second:
        url = first.enter_context(http_process(http_args(port, "--pid-tool"), port))
        async with toolrail.mcp.connect(local, url=url, reconnect=True) as handle:
            old = pid_tool(local)
            first.close()
            gone = await asyncio.wait_for(local.execute(call("add", a=1, b=2)), WAIT)
            back = until(local, lambda: pid_tool(local) not in (None, old))
            second.enter_context(http_process(http_args(port, "--pid-tool"), port))
            await asyncio.wait_for(back.wait(), WAIT)
            added = await local.execute(call("add", "c2", a=2, b=2))
            connected = handle.connected

    assert gone.error is not None
    assert gone.error.code == "MCP_DISCONNECTED"
    assert old is not None
    assert added.value == 4
    assert connected is True


async def test_over_stdio_a_server_killed_mid_call_makes_this_and_later_calls_disconnected() -> (
    None
):
    local = tr.ToolRegistry()
    async with toolrail.mcp.connect(local, command=sys.executable, args=STDIO_ARGS) as handle:
        died = await asyncio.wait_for(local.execute(call("die")), WAIT)
        after = await asyncio.wait_for(local.execute(call("add", "c2", a=1, b=1)), WAIT)
        connected = handle.connected

    for result in (died, after):
        assert result.error is not None
        assert result.error.code == "MCP_DISCONNECTED"
        assert result.error.type == "ToolError"
    assert connected is False


async def test_over_stdio_reconnect_starts_the_server_again_and_re_syncs_the_tools() -> None:
    local = tr.ToolRegistry()
    options: dict[str, Any] = {"command": sys.executable, "args": [*STDIO_ARGS, "--pid-tool"]}
    async with toolrail.mcp.connect(local, reconnect=True, **options) as handle:
        old = pid_tool(local)
        back = until(local, lambda: pid_tool(local) not in (None, old))
        died = await asyncio.wait_for(local.execute(call("die")), WAIT)
        await asyncio.wait_for(back.wait(), WAIT)
        added = await local.execute(call("add", "c2", a=2, b=3))
        connected = handle.connected

    assert died.error is not None
    assert died.error.code == "MCP_DISCONNECTED"
    assert added.value == 5
    assert connected is True
    assert local.schemas() == []


# ---- a server that never starts ------------------------------------------------------------


async def test_a_stdio_server_that_exits_at_start_raises_one_error_with_code_and_stderr() -> None:
    script = "import sys; print('loading config', file=sys.stderr); "
    script += "print('no such file: tools.toml', file=sys.stderr); sys.exit(3)"
    local = tr.ToolRegistry()
    with pytest.raises(toolrail.mcp.ConnectionFailed) as caught:
        async with toolrail.mcp.connect(local, command=sys.executable, args=["-c", script]):
            pass

    command = shlex.join([sys.executable, "-c", script])
    assert str(caught.value) == (
        f'MCP server "{command}" exited with code 3 before the session started; '
        "the last lines of its stderr:\n  loading config\n  no such file: tools.toml"
    )
    assert caught.value.returncode == 3
    assert caught.value.stderr == ("loading config", "no such file: tools.toml")
    assert local.schemas() == []


async def test_a_command_that_cannot_run_raises_connection_failed() -> None:
    with pytest.raises(toolrail.mcp.ConnectionFailed, match='cannot start MCP server "/no/such"'):
        async with toolrail.mcp.connect(tr.ToolRegistry(), command="/no/such"):
            pass


async def test_an_unreachable_url_raises_connection_failed() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with pytest.raises(toolrail.mcp.ConnectionFailed) as caught:
        async with toolrail.mcp.connect(tr.ToolRegistry(), url=url):
            pass

    assert str(caught.value).startswith(f"cannot connect to the MCP server at {url}: ")


async def test_an_error_in_the_block_propagates_as_it_is() -> None:
    with pytest.raises(KeyError):
        async with toolrail.mcp.connect(tr.ToolRegistry(), command=sys.executable, args=STDIO_ARGS):
            raise KeyError("mine")


# ---- huge results ---------------------------------------------------------------------------


async def test_a_ten_megabyte_text_crosses_stdio() -> None:
    local = tr.ToolRegistry()
    async with toolrail.mcp.connect(local, command=sys.executable, args=STDIO_ARGS):
        result = await asyncio.wait_for(local.execute(call("text", size=TEN_MB)), WAIT * 3)

    assert result.error is None
    assert result.value == "x" * TEN_MB


async def test_a_ten_megabyte_text_crosses_http_within_max_message_bytes() -> None:
    local = tr.ToolRegistry()
    port = free_port()
    with http_process(http_args(port), port) as url:
        async with toolrail.mcp.connect(local, url=url, max_message_bytes=11 * 1024 * 1024):
            result = await asyncio.wait_for(local.execute(call("text", size=TEN_MB)), WAIT * 3)
        async with toolrail.mcp.connect(local, url=url) as handle:  # the SDK's 1 MiB
            too_big = await asyncio.wait_for(local.execute(call("text", size=TEN_MB)), WAIT * 3)
            small = await local.execute(call("text", "c2", size=10))
            connected = handle.connected

    assert result.error is None
    assert result.value == "x" * TEN_MB
    assert too_big.error is not None
    assert too_big.error == tr.ErrorInfo(
        "the MCP server's answer is larger than max_message_bytes allows (SSE stream failed: "
        "Server-sent event exceeded the 1048576 byte limit.)",
        "MCP_MESSAGE_TOO_LARGE",
        "ToolError",
    )
    assert small.value == "x" * 10
    assert connected is True


def test_max_message_bytes_is_checked_at_once() -> None:
    with pytest.raises(ValueError, match="max_message_bytes must be a positive int or None"):
        toolrail.mcp.connect(tr.ToolRegistry(), url="http://127.0.0.1:1/mcp", max_message_bytes=0)


# ---- Ctrl-C while serving over HTTP -------------------------------------------------------


async def interrupt_serve(during_a_call: bool) -> tuple[int, str, types.CallToolResult | None]:
    """Run ``toolrail serve ... --http``, SIGINT it (during a call, if asked); its exit
    code, its stderr, and what the running call answered."""
    port = free_port()
    process = start_serving(port)
    try:
        wait_until_listening(process, port)
        answer: types.CallToolResult | None = None
        async with (
            streamable_http_client(f"http://127.0.0.1:{port}/mcp", terminate_on_close=False) as (
                read,
                write,
            ),
            ClientSession(read, write) as session,
        ):
            await asyncio.wait_for(session.initialize(), WAIT)
            if during_a_call:
                slow = asyncio.ensure_future(session.call_tool("slow", {}))
                await asyncio.wait_for(session.call_tool("wait_started", {}), WAIT)
            process.send_signal(signal.SIGINT)
            if during_a_call:
                answer = await asyncio.wait_for(slow, WAIT)
        code = await asyncio.to_thread(process.wait, WAIT)
        assert process.stderr is not None
        return code, process.stderr.read(), answer
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(WAIT)
        if process.stderr is not None:
            process.stderr.close()


def start_serving(port: int) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "toolrail", "serve", f"{SERVER}:build"]
    return subprocess.Popen(
        [*command, "--http", f"127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True
    )


def wait_until_listening(process: subprocess.Popen[str], port: int) -> None:
    listening(process, port, WAIT)


async def test_ctrl_c_while_a_call_runs_over_http_aborts_it_and_exits_0() -> None:
    code, stderr, answer = await interrupt_serve(during_a_call=True)

    assert code == 0
    assert "Traceback" not in stderr
    assert answer is not None
    assert answer.is_error
    assert answer.meta is not None
    assert answer.meta["toolrail/error"]["code"] == "ABORTED"


async def test_ctrl_c_on_an_idle_http_server_exits_0_without_a_traceback() -> None:
    code, stderr, _ = await interrupt_serve(during_a_call=False)

    assert code == 0
    assert "Traceback" not in stderr
