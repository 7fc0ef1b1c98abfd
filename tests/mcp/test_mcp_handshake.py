"""``toolrail.mcp.connect(handshake_timeout=...)``: a server that starts and never answers
``initialize`` is a ``ConnectionFailed``, and a stdio one is stopped and reaped.

Real servers only: ``tests/mcp_fixtures/unresponsive.py`` as a stdio subprocess (it notes
its pid, and any SIGTERM, in a file), a loopback socket that never accepts for HTTP.
"""

from __future__ import annotations

import math
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import toolrail as tr
import toolrail.mcp
from mcp_fixtures.processes import STDIO_ARGS

UNRESPONSIVE = Path(__file__).resolve().parent.parent / "mcp_fixtures" / "unresponsive.py"
TIMEOUT = 0.5
GRACE = 2.0  # the stdio transport's wait after SIGTERM before SIGKILL


def gone(pid: int) -> bool:
    """No such process, not even a zombie: it ended and was reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def connect_unresponsive(mode: str, notes: Path) -> tuple[toolrail.mcp.ConnectionFailed,
                                                                 float, str]:
    args = [str(UNRESPONSIVE), mode, str(notes)]
    local = tr.ToolRegistry()
    started = time.monotonic()
    with pytest.raises(toolrail.mcp.ConnectionFailed) as caught:
        async with toolrail.mcp.connect(
            local, command=sys.executable, args=args, handshake_timeout=TIMEOUT
        ):
            pytest.fail("the session opened")
    elapsed = time.monotonic() - started
    assert local.schemas() == []
    return caught.value, elapsed, shlex.join([sys.executable, *args])


async def test_a_stdio_server_that_never_answers_is_stopped_at_once_and_reaped(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "notes"
    failed, elapsed, command = await connect_unresponsive("silent", notes)

    assert str(failed) == (
        f'MCP server "{command}" did not answer initialize within 0.5 s; '
        "the last lines of its stderr:\n  silent: waiting for a licence server"
    )
    assert failed.returncode is None  # it did not exit: it was stopped
    assert failed.stderr == ("silent: waiting for a licence server",)
    pid = int(notes.read_text().split()[0])
    assert gone(pid)
    assert TIMEOUT <= elapsed < GRACE  # SIGTERM at once, no grace after closing its stdin


async def test_a_stdio_server_that_outlives_sigterm_is_killed_and_reaped(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    failed, elapsed, command = await connect_unresponsive("stubborn", notes)

    assert str(failed).startswith(f'MCP server "{command}" did not answer initialize within 0.5 s')
    pid, *signals = notes.read_text().split()
    assert signals == ["SIGTERM"]  # it heard SIGTERM, lived on, and SIGKILL ended it
    assert gone(int(pid))
    assert elapsed >= TIMEOUT + GRACE


async def test_a_stdio_server_that_prints_garbage_and_runs_on_times_out_naming_it(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "notes"
    failed, _, command = await connect_unresponsive("garbage", notes)

    assert str(failed) == (
        f'MCP server "{command}" did not answer initialize within 0.5 s; '
        "it wrote 2 lines that are not JSON-RPC to stdout, the first: 'Loading model weights...'"
        "; the last lines of its stderr:\n  garbage: waiting for a licence server"
    )
    assert gone(int(notes.read_text().split()[0]))


@pytest.fixture
def black_hole() -> Iterator[str]:
    """A loopback port that takes connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"


async def test_an_http_server_that_never_answers_initialize_times_out(black_hole: str) -> None:
    started = time.monotonic()
    with pytest.raises(toolrail.mcp.ConnectionFailed) as caught:
        async with toolrail.mcp.connect(
            tr.ToolRegistry(), url=black_hole, handshake_timeout=TIMEOUT
        ):
            pytest.fail("the session opened")

    assert str(caught.value) == (
        f"MCP server at {black_hole} did not answer initialize within 0.5 s"
    )
    assert time.monotonic() - started < GRACE


async def test_a_server_that_answers_in_time_connects_as_before() -> None:
    local = tr.ToolRegistry()
    async with toolrail.mcp.connect(
        local, command=sys.executable, args=STDIO_ARGS, handshake_timeout=30
    ) as handle:
        names = set(handle.names)

    assert "add" in names


@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan, True, "10", None])
def test_handshake_timeout_must_be_a_positive_finite_number(bad: object) -> None:
    with pytest.raises(ValueError, match="handshake_timeout must be a positive finite number"):
        toolrail.mcp.connect(
            tr.ToolRegistry(), url="http://127.0.0.1:1/mcp", handshake_timeout=bad  # type: ignore[arg-type]
        )
