"""Set-up shared by test_scheduler.py and test_scheduler_pool.py: tools, calls and a
gated ``Lab`` whose bodies log their starts and ends.

Import as ``from scheduler_helpers import ...``; helpers shared more widely are in
helpers.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

import toolrail as tr
from helpers import GatedLab, raw_tool

PreNext = Callable[[], Awaitable[tr.PreDecision]]


PostNext = Callable[[], Awaitable[tr.PostDecision]]


Classifier = Callable[[tr.JsonValue], bool]


Body = Callable[[tr.JsonValue, tr.RunContext], Awaitable[Any]]


def make_tool(
    name: str,
    execute: Body,
    *,
    safe: bool | Classifier = True,
    cancellation: Literal["interrupt", "cooperative"] = "interrupt",
) -> tr.Tool:
    return raw_tool(name, execute, concurrency_safe=safe, cancellation=cancellation)


def call(index: int, name: str = "work", **fields: Any) -> tr.ToolCall:
    fields.setdefault("arguments", {})
    return tr.ToolCall(call_id=f"c{index}", name=name, **fields)


class Lab(GatedLab):
    """A registry whose tools log their starts and ends and wait on per-call gates.

    ``log`` holds ``"start <id>"`` (the body began), ``"end <id>"`` (the body finished)
    and ``"commit <id>"`` (the first observer saw the result), in the order they
    happened.
    """

    def __init__(self) -> None:
        super().__init__()
        self.running = 0
        self.peak = 0

    def body(self, *, gated: bool = True, defer: bool = False, value: str | None = None) -> Body:
        async def execute(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
            cid = ctx.call_id
            self.log.append(f"start {cid}")
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.started[cid].set()
            if defer:
                ctx.defer_context(f"from {cid}")
            try:
                if gated:
                    await self.gates[cid].wait()
                return cid if value is None else value
            finally:
                self.running -= 1
                self.log.append(f"end {cid}")
                self.finished[cid].set()

        return execute

    def add(
        self,
        name: str = "work",
        *,
        safe: bool | Classifier = True,
        gated: bool = True,
        defer: bool = False,
        value: str | None = None,
    ) -> tr.Disposer:
        return self.registry.register(
            make_tool(name, self.body(gated=gated, defer=defer, value=value), safe=safe)
        )

    def before(self, first: str, second: str) -> bool:
        """Whether log entry ``first`` happened, and before ``second`` (if that did)."""
        if first not in self.log:
            return False
        return second not in self.log or self.log.index(first) < self.log.index(second)
