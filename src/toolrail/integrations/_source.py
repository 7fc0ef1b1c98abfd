"""What an integration runs against: a registry and a scope key, or a scope handle.

Both give the same things, resolved once here so the per-call path is one ``ToolCall``
and one ``execute`` (inside the step's gate, ``_gate``, for the frameworks that start a
step's calls at once).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from .. import (
    Disposer,
    ExecutionMode,
    Scope,
    Tool,
    ToolCall,
    ToolRegistry,
    ToolResult,
    ToolSchema,
)
from ._gate import gated

__all__ = ["Source", "source_of"]


@dataclass(frozen=True, slots=True)
class Source:
    key: Hashable | None
    schemas: Callable[[], list[ToolSchema]]
    get: Callable[[str], Tool | None]
    on_change: Callable[[Callable[[], None]], Disposer]
    execute: Callable[[ToolCall], Any]
    mode: Callable[[ToolCall], ExecutionMode]

    async def in_step(self, step: Hashable, anchor: object, call: ToolCall) -> ToolResult:
        """``execute(call)`` in the gate of the framework's step ``step``: alone if exclusive."""
        result: ToolResult = await gated(step, anchor, self.exclusive(call),
                                         lambda: self.execute(call))
        return result

    def exclusive(self, call: ToolCall) -> bool:
        # A tool's plain flag answers at once; only a classifier (or an unknown name)
        # needs execution_mode, which snapshots the arguments for it.
        tool = self.get(call.name)
        safe = None if tool is None else tool.concurrency_safe
        if safe is True or safe is False:
            return not safe
        return self.mode(call) is not ExecutionMode.PARALLEL

    async def call(self, call_id: str, name: str, arguments: Any) -> ToolResult:
        result: ToolResult = await self.execute(
            ToolCall(call_id=call_id, name=name, arguments=arguments, scope=self.key)
        )
        return result


def source_of(target: ToolRegistry | Scope, scope: Hashable | None) -> Source:
    """The source for ``target`` (a registry viewed through ``scope``, or a scope handle)."""
    if isinstance(target, Scope):
        if scope is not None:
            raise ValueError("pass a Scope or a registry with scope=, not both")
        return Source(target.key, target.schemas, target.get, target.on_change, target.execute,
                      target.execution_mode)
    if not isinstance(target, ToolRegistry):
        raise TypeError(f"expected a ToolRegistry or a Scope, got {type(target).__name__}")

    def get(name: str) -> Tool | None:
        return target.get(name, scope)

    return Source(scope, lambda: target.schemas(scope), get, target.on_change, target.execute,
                  target.execution_mode)
