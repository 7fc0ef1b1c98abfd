"""What an integration runs against: a registry and a scope key, or a scope handle.

Both give the same four things, resolved once here so the per-call path is one
``ToolCall`` and one ``execute``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from .. import Disposer, Scope, Tool, ToolCall, ToolRegistry, ToolResult, ToolSchema

__all__ = ["Source", "source_of"]


@dataclass(frozen=True, slots=True)
class Source:
    key: Hashable | None
    schemas: Callable[[], list[ToolSchema]]
    get: Callable[[str], Tool | None]
    on_change: Callable[[Callable[[], None]], Disposer]
    execute: Callable[[ToolCall], Any]

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
        return Source(target.key, target.schemas, target.get, target.on_change, target.execute)
    if not isinstance(target, ToolRegistry):
        raise TypeError(f"expected a ToolRegistry or a Scope, got {type(target).__name__}")

    def get(name: str) -> Tool | None:
        return target.get(name, scope)

    return Source(scope, lambda: target.schemas(scope), get, target.on_change, target.execute)
