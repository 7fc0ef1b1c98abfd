"""Set-up shared by test_scope.py and test_scope_restrict.py: a registry of global
tools, the names a view sees, and the unknown-tool check.

Import as ``from scope_helpers import ...``; helpers shared more widely are in helpers.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

import toolrail as tr
from helpers import raw_tool


def names(view: tr.ToolRegistry | tr.Scope, *scope: Hashable) -> list[str]:
    return [schema.name for schema in view.schemas(*scope)]


async def run(view: tr.ToolRegistry | tr.Scope, c: tr.ToolCall) -> tr.ToolResult:
    return await asyncio.wait_for(view.execute(c), 5)


def assert_unknown(result: tr.ToolResult, name: str) -> None:
    assert result.is_error is True
    assert result.error == tr.ErrorInfo(
        f'unknown tool "{name}"', "UNKNOWN_TOOL", "ToolNotFoundError"
    )
    assert result.content == (tr.TextContent(f'Error: unknown tool "{name}"'),)


def global_registry(*tool_names: str) -> tr.ToolRegistry:
    registry = tr.ToolRegistry()
    for name in tool_names:
        registry.register(raw_tool(name))
    return registry
