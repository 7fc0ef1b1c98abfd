"""Set-up shared by the batch files of tests/cancellation/ (scheduler.md "Cancellation")
and test_scheduler_failures.py: a gated ``Lab`` whose tools record what they lived
through, calls, checks of the two cancellation outcomes, and the texts of contexts.

Import as ``from scheduler_cancellation_helpers import ...``; helpers shared more
widely are in helpers.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import toolrail as tr
from helpers import (
    ABORTED,
    ABORTED_BEFORE,
    GatedLab,
    PostNext,
    PreNext,
    assert_error,
    raw_tool,
    within,
)

Body = Callable[[tr.JsonValue, tr.RunContext], Awaitable[Any]]


NOT_LOSSLESS = "tool call arguments must be losslessly JSON-serializable"


NAN: dict[str, Any] = {"x": float("nan")}


def call(index: int, name: str = "work", **fields: Any) -> tr.ToolCall:
    fields.setdefault("arguments", {})
    return tr.ToolCall(call_id=f"c{index}", name=name, **fields)


def assert_aborted(result: tr.ToolResult) -> None:
    assert_error(result, ABORTED, "ABORTED", "ToolAbortedError")


def assert_aborted_before_dispatch(result: tr.ToolResult) -> None:
    assert_error(result, ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError")


def texts(contexts: tuple[tr.ContextMessage, ...]) -> list[str]:
    """The text of every text block of ``contexts``, in order."""
    return [b.text for m in contexts for b in m.content if isinstance(b, tr.TextContent)]


class Lab(GatedLab):
    """A registry with gated tools that record what they lived through.

    ``"work"``: an ``"interrupt"`` body that waits on its gate; ``"polite"``: a
    ``"cooperative"`` body that waits until its gate opens or its signal fires, then
    returns a success; ``"solo"``: like ``"work"`` but exclusive. Each body defers a
    context ``"from <id>"`` as it starts.
    """

    def __init__(self) -> None:
        super().__init__()
        self.signal_at_end: dict[str, bool] = {}
        self.stages: list[str] = []
        self.add("work")
        self.add("polite", cancellation="cooperative")
        self.add("solo", safe=False)
        self.registry.pre_execute(self._pre)
        self.registry.guard(self._guard)
        self.registry.around_execute(self._around)
        self.registry.post_execute(self._post)

    def _pre(self, execution: tr.Execution, call_next: PreNext) -> Awaitable[tr.PreDecision]:
        self.stages.append(f"pre {execution.call_id}")
        return call_next()

    def _guard(self, execution: tr.Execution) -> None:
        self.stages.append(f"guard {execution.call_id}")

    async def _around(
        self, execution: tr.Execution, call_next: Callable[[], Awaitable[tr.ToolResult]]
    ) -> tr.ToolResult:
        self.stages.append(f"around {execution.call_id}")
        return await call_next()

    async def _post(
        self, execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision:
        self.stages.append(f"post {execution.call_id}")
        return await call_next()

    def body(self, cooperative: bool) -> Body:
        async def execute(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
            cid = ctx.call_id
            self.log.append(f"start {cid}")
            self.started[cid].set()
            ctx.defer_context(f"from {cid}")
            try:
                if cooperative:
                    with ctx.signal.add_callback(self.gates[cid].set):
                        await within(self.gates[cid].wait())
                else:
                    await within(self.gates[cid].wait())
                return cid
            except asyncio.CancelledError:
                self.log.append(f"interrupted {cid}")
                raise
            finally:
                self.signal_at_end[cid] = ctx.signal.cancelled
                self.log.append(f"end {cid}")
                self.finished[cid].set()

        return execute

    def add(
        self,
        name: str,
        *,
        safe: bool = True,
        cancellation: Literal["interrupt", "cooperative"] = "interrupt",
    ) -> None:
        self.registry.register(
            raw_tool(
                name,
                self.body(cancellation == "cooperative"),
                concurrency_safe=safe,
                cancellation=cancellation,
            )
        )
