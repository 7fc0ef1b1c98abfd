"""Set-up shared by the files of tests/cancellation/ (pipeline.md "Cancellation"):
one tool ``"work"`` built around a given body, its call, and a ``Recorder`` of the stages
that ran.

Import as ``from cancellation_helpers import ...``; helpers shared more widely are in
helpers.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import toolrail as tr
from helpers import (
    CallNext,
    PostNext,
    PreNext,
    until,
    wait_forever,
)

NAME = "work"


Body = Callable[[tr.JsonValue, tr.RunContext], Any]


def make_tool(
    execute: Body,
    *,
    timeout: float | None = None,
    cancellation: Literal["interrupt", "cooperative"] = "interrupt",
    finalize_content: Callable[[tr.Execution, tr.ToolResult], Sequence[tr.Content] | None]
    | None = None,
) -> tr.Tool:
    return tr.Tool(
        name=NAME,
        description="does some work",
        parameters={"type": "object"},
        execute=execute,
        timeout=timeout,
        cancellation=cancellation,
        finalize_content=finalize_content,
    )


def make_call(signal: tr.CancelSignal | None = None, arguments: Any = None) -> tr.ToolCall:
    return tr.ToolCall(
        call_id="call-1",
        name=NAME,
        arguments={} if arguments is None else arguments,
        signal=signal,
    )


def registry_for(
    body: Body, *, approver: tr.Approver | None = None, **options: Any
) -> tr.ToolRegistry:
    """A registry (with ``approver``) holding ``make_tool(body, **options)``."""
    registry = tr.ToolRegistry(approver=approver)
    registry.register(make_tool(body, **options))
    return registry


async def execute_until(
    registry: tr.ToolRegistry, started: asyncio.Event, signal: tr.CancelSignal | None = None
) -> asyncio.Task[tr.ToolResult]:
    """``registry.execute(make_call(signal))`` as a task, once the body has set ``started``."""
    task = asyncio.create_task(registry.execute(make_call(signal)))
    await until(started)
    return task


def logging_body(ran: list[str]) -> Body:
    """A body that notes "body" in ``ran`` and returns "done"."""

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ran.append("body")
        return "done"

    return body


async def task_cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait, bounded, until it is done."""
    task.cancel()
    await asyncio.wait({task}, timeout=5)


def record_post(registry: tr.ToolRegistry) -> list[tr.ToolResult]:
    """Register a post-execute middleware that records the result it sees and accepts."""
    saw: list[tr.ToolResult] = []

    async def post(
        execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision:
        saw.append(result)
        return await call_next()

    registry.post_execute(post)
    return saw


async def still_running(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` is still running after the loop had every chance to finish it."""
    done, _ = await asyncio.wait({task}, timeout=0.05)
    return not done


class Recorder:
    """Records which stages of a call ran; every stage passes the call on."""

    def __init__(self, registry: tr.ToolRegistry) -> None:
        self.ran: list[str] = []
        self.around_saw: list[tr.ToolResult] = []
        self.post_saw: list[tr.ToolResult] = []
        registry.pre_execute(self.pre)
        registry.guard(self.guard)
        registry.around_execute(self.around)
        registry.post_execute(self.post)

    def pre(self, execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        self.ran.append("pre")
        return call_next()

    def guard(self, execution: tr.Execution) -> str | None:
        self.ran.append("guard")
        return None

    async def around(self, execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        self.ran.append("around")
        result = await call_next()
        self.around_saw.append(result)
        return result

    async def post(
        self, execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision:
        self.ran.append("post")
        self.post_saw.append(result)
        return await call_next()


def interruptible(started: asyncio.Event, saw: list[str]) -> Callable[..., Any]:
    """A body that opens ``started``, waits forever, and notes the ``CancelledError``."""

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        started.set()
        try:
            await wait_forever()
        except asyncio.CancelledError:
            saw.append("CancelledError")
            raise
        return "finished anyway"

    return body
