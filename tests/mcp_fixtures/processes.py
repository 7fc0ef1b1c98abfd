"""Running ``server.py`` as a subprocess for the MCP tests."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SERVER = Path(__file__).resolve().parent / "server.py"
STDIO_ARGS = [str(SERVER), "stdio"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_until_listening(process: subprocess.Popen[Any], port: int, deadline: float) -> None:
    """Return once ``process`` accepts connections on ``port``; raise if it exits first
    or ``deadline`` seconds pass."""
    give_up = time.monotonic() + deadline
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > give_up or process.poll() is not None:
                raise
            time.sleep(0.05)  # polling the subprocess's readiness, bounded above


@contextmanager
def http_server(deadline: float = 10) -> Iterator[str]:
    """Serve ``server.py`` over streamable HTTP on a free loopback port; yield its URL."""
    port = free_port()
    with http_process([str(SERVER), "http", str(port)], port, deadline) as url:
        yield url


@contextmanager
def http_process(args: list[str], port: int, deadline: float = 10) -> Iterator[str]:
    """Run ``python *args``, which serves streamable HTTP on ``port``; yield its URL once
    it accepts connections, and stop it afterwards (killing it if it will not stop)."""
    process = subprocess.Popen([sys.executable, *args])
    try:
        wait_until_listening(process, port, deadline)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(deadline)
        except subprocess.TimeoutExpired:  # it would not stop: fail, leaving nothing behind
            process.kill()
            process.wait(deadline)
            raise
