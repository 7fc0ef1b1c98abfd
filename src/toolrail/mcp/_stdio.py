"""The client side of MCP over stdio: a server subprocess, as the SDK's ``Transport``.

The SDK's ``stdio_client`` keeps its process to itself; ``connect`` needs two things
from it: the exit code and the last lines of standard error, to say why a server did
not start, and the moment its output ends, to know the connection is lost without
waiting for a call to find out. Otherwise it does what ``stdio_client`` does: one
JSON-RPC message per line each way, standard error passed through to ours, the server
in a process group of its own, and on exit its standard input closed, then SIGTERM to
the group, then SIGKILL (SIGTERM at once for a server ``connect`` gave up on, see
``abandoned``). It also counts the lines of output that are not JSON-RPC, for the
message of a server that never answered.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import anyio.abc
from anyio.streams.text import TextReceiveStream
from mcp import types
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

__all__ = ["StdioProcess"]

logger = logging.getLogger("toolrail.mcp")

_TAIL_LINES = 20
_TAIL_LINE_CHARS = 1000
_GRACE = 2.0  # seconds a server gets to exit after its input closes, then after SIGTERM


class StdioProcess:
    """One server process: how to start it, and what became of it."""

    def __init__(
        self,
        command: str,
        args: Sequence[str],
        env: Mapping[str, str] | None,
        cwd: str | None,
    ) -> None:
        self.command = command
        self.args = list(args)
        self.env = env
        self.cwd = cwd
        self.returncode: int | None = None
        self.stderr: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self.garbage = 0  # lines on stdout that are not JSON-RPC
        self.first_garbage: str | None = None
        self.abandoned = False  # it did not answer in time: stop it without a grace

    def describe(self) -> str:
        """The command line, quoted as a shell would read it."""
        import shlex

        return shlex.join([self.command, *self.args])

    @asynccontextmanager
    async def open(self, on_end: Callable[[str], None]) -> AsyncIterator[tuple[Any, Any]]:
        """Start the process; yield the SDK's (read, write) streams; stop it on exit.

        ``on_end(reason)`` is called once its output ends (it exited, or closed it).
        """
        self.returncode = None
        self.stderr.clear()
        self.garbage, self.first_garbage, self.abandoned = 0, None, False
        process = await anyio.open_process(
            [self.command, *self.args],
            env=get_default_environment() | dict(self.env or {}),
            cwd=self.cwd,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        reader, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, writer = anyio.create_memory_object_stream[SessionMessage](0)

        async def read_stdout() -> None:
            assert process.stdout is not None
            buffer = ""
            try:
                async with reader:
                    async for chunk in TextReceiveStream(process.stdout, errors="replace"):
                        *lines, buffer = (buffer + chunk).split("\n")
                        for line in lines:
                            if line.strip():
                                message = _parse(line)
                                if isinstance(message, Exception):
                                    self.garbage += 1
                                    if self.first_garbage is None:
                                        self.first_garbage = line[:_TAIL_LINE_CHARS]
                                await reader.send(message)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                pass
            with anyio.CancelScope(shield=True), anyio.move_on_after(_GRACE):
                self.returncode = await process.wait()
            on_end(self._ended())

        stderr_read = anyio.Event()

        async def read_stderr() -> None:
            assert process.stderr is not None
            partial = ""
            try:
                with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    async for chunk in TextReceiveStream(process.stderr, errors="replace"):
                        sys.stderr.write(chunk)
                        *lines, partial = (partial + chunk).split("\n")
                        self.stderr.extend(line[:_TAIL_LINE_CHARS] for line in lines)
                if partial:
                    self.stderr.append(partial[:_TAIL_LINE_CHARS])
            finally:
                stderr_read.set()

        async def write_stdin() -> None:
            assert process.stdin is not None
            try:
                async with writer:
                    async for message in writer:
                        line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        await process.stdin.send((line + "\n").encode("utf-8", "replace"))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                await reader.aclose()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read_stdout)
            tasks.start_soon(read_stderr)
            tasks.start_soon(write_stdin)
            try:
                yield read_stream, write_stream
            finally:
                with anyio.CancelScope(shield=True):
                    await write_stream.aclose()
                    await read_stream.aclose()
                    await _stop(process, stderr_read, patient=not self.abandoned)
                    self.returncode = process.returncode
                tasks.cancel_scope.cancel()

    def _ended(self) -> str:
        code = self.returncode
        if code is None:
            return f"the server process ({self.describe()}) closed its output"
        return f"the server process ({self.describe()}) exited with code {code}"


def _parse(line: str) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        logger.warning("an MCP server wrote a line that is not JSON-RPC: %.200s", line)
        return exc


async def _stop(process: anyio.abc.Process, stderr_read: anyio.Event, *, patient: bool) -> None:
    """Close its input, then SIGTERM its group, then SIGKILL it, each after a grace (the
    first one only if ``patient``); let the last of its stderr be read, then close its
    pipes."""
    if process.stdin is not None:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    for grace, send in ((_GRACE if patient else 0, _terminate), (_GRACE, _kill)):
        with anyio.move_on_after(grace):
            await process.wait()
        if process.returncode is not None:
            break
        send(process)
    with anyio.move_on_after(_GRACE):
        await process.wait()
    with anyio.move_on_after(_GRACE):  # a child holding the pipe keeps it open
        await stderr_read.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await stream.aclose()


def _terminate(process: anyio.abc.Process) -> None:
    _signal_group(process, getattr(signal, "SIGTERM", None), process.terminate)


def _kill(process: anyio.abc.Process) -> None:
    _signal_group(process, getattr(signal, "SIGKILL", None), process.kill)


def _signal_group(
    process: anyio.abc.Process, signum: int | None, fallback: Callable[[], None]
) -> None:
    with suppress(ProcessLookupError, PermissionError, OSError):
        if signum is not None and hasattr(os, "killpg"):
            os.killpg(process.pid, signum)  # the server and anything it started
        else:  # pragma: no cover - Windows
            fallback()
