"""Code mode over a real MCP server's tools (code-mode.md, "The SDK" and "Running a
program"): the SDK rendered from what the server declares type-checks the program, and
the program's nested calls reach the server process over stdio."""

from __future__ import annotations

import ast
import sys

import pytest

import toolrail as tr
import toolrail.mcp
from helpers import within
from mcp_fixtures.processes import STDIO_ARGS

pytest.importorskip("pydantic_monty")


def _transport_text(registry: tr.ToolRegistry) -> str:
    [schema] = registry.schemas()
    assert schema.name == "run_code"
    return schema.description


async def _run(registry: tr.ToolRegistry, code: str) -> tr.ToolResult:
    return await within(registry.execute(
        tr.ToolCall(call_id="r", name="run_code", arguments={"code": code})), 30)


async def test_the_sdk_of_a_real_mcp_servers_tools_checks_and_runs_a_program() -> None:
    registry = tr.ToolRegistry(presentation="code")
    async with registry, toolrail.mcp.connect(registry, command=sys.executable,
                                              args=STDIO_ARGS):
        text = _transport_text(registry)
        sdk = text[text.index("from typing import"):]
        ast.parse(sdk)  # valid Python
        assert "class AddArgs(TypedDict):\n    a: int\n    b: int\n" in sdk
        assert "class StatsArgs(TypedDict):\n    values: list[float]\n" in sdk
        assert "    async def add(self, args: AddArgs) -> AddOutput:\n" in sdk
        assert '        """Add two integers."""\n' in sdk

        result = await _run(registry, (
            'total = await tools.add({"a": 1, "b": 2})\n'
            'stats = await tools.stats({"values": [1.5, 2.5]})\n'
            "try:\n"
            '    await tools.fail({"reason": "nope"})\n'
            "except ToolCallError as error:\n"
            "    print(error)\n"
            '[total, stats["count"], stats["total"]]'))
        assert result.error is None, result.text
        assert result.value == {"logs": 'tool "fail" failed (NOPE): nope\n',
                                "result": (3, 2, 4.0)}

        wrong = await _run(registry, 'await tools.add({"a": "one", "b": 2})')
        assert wrong.error is not None
        assert wrong.error.message.startswith("code run failed (type): ")
