"""Set-up shared by several test files: raw tools and calls, bounded waits, gates, checks.

Import as ``from helpers import ...`` (pytest puts ``tests/`` on ``sys.path``, as it does
for ``mcp_fixtures``). A helper only one file uses stays in that file.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

import toolrail as tr

T = TypeVar("T")

CallNext = Callable[[], Awaitable[tr.ToolResult]]
PreNext = Callable[[], Awaitable[tr.PreDecision]]
PostNext = Callable[[], Awaitable[tr.PostDecision]]


def exactly(message: str) -> str:
    """A ``match=`` pattern that accepts exactly ``message``."""
    return f"^{re.escape(message)}\\Z"


async def within(awaitable: Awaitable[T], seconds: float = 5) -> T:
    """Every wait in the tests is bounded: a broken library fails, it does not hang."""
    return await asyncio.wait_for(awaitable, seconds)


async def one_turn() -> None:
    """Give the loop one turn, so what was (wrongly) ready to run has had its chance."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    loop.call_soon(future.set_result, None)
    await future


async def until(event: asyncio.Event) -> None:
    """Wait for a gate, bounded."""
    await asyncio.wait_for(event.wait(), 5)


async def wait_forever() -> None:
    """What a slow body awaits; bounded so a broken interrupt fails instead of hanging."""
    await asyncio.wait_for(asyncio.Event().wait(), 5)


async def echo(arguments: tr.JsonValue, ctx: tr.RunContext) -> tr.JsonValue:
    return arguments


def raw_tool(name: str = "t", execute: Any = echo, **overrides: Any) -> tr.Tool:
    """A raw ``tr.Tool``; ``overrides`` may set any field, including invalid values."""
    fields: dict[str, Any] = {
        "name": name,
        "description": f"The {name} tool.",
        "parameters": {"type": "object"},
        "execute": execute,
    }
    fields.update(overrides)
    return tr.Tool(**fields)


def call(name: str, arguments: Any = None, *, call_id: str = "c1", **fields: Any) -> tr.ToolCall:
    """A call of ``name``; ``arguments`` default to ``{}``."""
    return tr.ToolCall(
        call_id=call_id, name=name, arguments={} if arguments is None else arguments, **fields
    )


def observe(registry: tr.ToolRegistry) -> list[tuple[tr.Execution, tr.ToolResult]]:
    """Every (execution, result) pair ``registry``'s observers are told about, in order."""
    seen: list[tuple[tr.Execution, tr.ToolResult]] = []
    registry.on_result(lambda execution, result: seen.append((execution, result)))
    return seen


def results_seen(registry: tr.ToolRegistry) -> list[tr.ToolResult]:
    """Every result ``registry``'s observers are told about, in order."""
    seen: list[tr.ToolResult] = []
    registry.on_result(lambda _execution, result: seen.append(result))
    return seen


async def settled(awaitable: Awaitable[T], seconds: float = 5) -> T:
    """Await a call that nothing cancels: a ``CancelledError`` out of it is a failure."""
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except asyncio.CancelledError:
        pytest.fail("the call raised CancelledError although nothing cancelled the task "
                    "running it")


async def own_timeout() -> str:
    """What a tool (or an approver) does to bound a wait: asyncio's own ``timeout``
    (``timeout(0)`` expires at the loop's next turn)."""
    try:
        async with asyncio.timeout(0):
            await asyncio.Event().wait()
    except TimeoutError:
        return "fallback"
    return "never"


class Changes:
    """An ``on_change`` listener that counts notifications."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def assert_error(result: tr.ToolResult, message: str, code: str | None, kind: str | None) -> None:
    """An error result exactly as the registry builds it."""
    assert result.is_error is True
    assert result.error == tr.ErrorInfo(message, code, kind)
    assert result.content == (tr.TextContent("Error: " + message),)
    assert result.value is None
    assert result.concludes_turn is False


class GatedLab:
    """A registry whose bodies wait on per-call gates; the first observer logs each commit.

    Subclasses register the tools. Their bodies append ``"start <id>"`` and ``"end <id>"``
    to ``log`` and set ``started`` and ``finished``; the observer appends
    ``"commit <id>"``, all in the order they happened.
    """

    def __init__(self) -> None:
        self.registry = tr.ToolRegistry()
        self.log: list[str] = []
        self.started: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.gates: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.finished: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.committed: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.notified: list[tuple[tr.Execution, tr.ToolResult]] = []
        self.registry.on_result(self._observe)

    def _observe(self, execution: tr.Execution, result: tr.ToolResult) -> None:
        self.notified.append((execution, result))
        self.log.append(f"commit {execution.call_id}")
        self.committed[execution.call_id].set()

    def release(self, *ids: str) -> None:
        for cid in ids:
            self.gates[cid].set()

    async def wait_started(self, *ids: str) -> None:
        for cid in ids:
            await within(self.started[cid].wait())

    def starts(self) -> list[str]:
        return [entry.split()[1] for entry in self.log if entry.startswith("start ")]

    def commits(self) -> list[str]:
        return [execution.call_id for execution, _ in self.notified]


def adder_registry() -> tr.ToolRegistry:
    """A registry holding one typed tool, ``add(a: int, b: int = 5) -> int``."""
    reg = tr.ToolRegistry()

    @reg.tool(concurrency_safe=True)
    def add(a: int, b: int = 5) -> int:
        """Add two numbers."""
        return a + b

    return reg


# The parameters schema of ``adder_registry()``'s ``add``, as every adapter sends it.
ADD_PARAMETERS = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 5}},
    "required": ["a"],
    "additionalProperties": False,
}


def python_output(code: str) -> str:
    """What a fresh ``python -c code`` prints; it must exit with status 0."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def waiting_tool(started: asyncio.Event, stopped: asyncio.Event) -> tr.Tool:
    """Tool "wait": sets ``started``, waits until interrupted, then sets ``stopped``."""

    async def wait(arguments: tr.JsonValue, context: tr.RunContext) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()
        return "never"

    return raw_tool("wait", wait, description="")
