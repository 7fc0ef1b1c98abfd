"""``ToolCallError`` in a program (code-mode.md, "Running a program", item 3).

pydantic-monty 1.4 cannot define exception classes and its exceptions carry one string,
so a failed nested call raises ``ToolCallError`` (``RuntimeError`` at run time) with the
message ``tool "<name>" failed (<code>): <message>``, and ``tool_call_error(error)``
reads ``tool_name``, ``code`` and ``message`` back exactly. The SDK declares the spec's
class and the reader; reading a field as an attribute fails at run time.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

import toolrail as tr
from helpers import within
from toolrail.code import CodeSettings

pytest.importorskip("pydantic_monty")


@pytest.fixture
async def registry() -> AsyncIterator[tr.ToolRegistry]:
    async with tr.ToolRegistry(presentation="code") as registry:
        @registry.tool(concurrency_safe=True)
        async def read_file(path: str) -> str:
            """Read a file."""
            return f"contents of {path}"

        @registry.tool(concurrency_safe=True)
        async def fail(message: str, code: str) -> str:
            """Fail with a code."""
            raise tr.ToolError(message, code=code)

        def workspace_only(execution: tr.Execution) -> str | None:
            path = tr.thaw(execution.arguments).get("path", "")
            return "only workspace files" if path.startswith("/") else None

        registry.guard(workspace_only)
        yield registry


async def run(registry: tr.ToolRegistry, code: str) -> tr.ToolResult:
    return await within(registry.execute(
        tr.ToolCall(call_id="r", name="run_code", arguments={"code": code})), 30)


def fields(result: tr.ToolResult) -> Any:
    """The program's result: the fields it read."""
    assert result.error is None, result.text
    return tr.thaw(result.value)["result"]


READ = ("try:\n"
        "    {call}\n"
        "except ToolCallError as error:\n"
        "    info = tool_call_error(error)\n"
        "    print(error)\n"
        "    fields = [info.tool_name, info.code, info.message]\n"
        "fields\n")


async def test_a_program_catches_a_failed_call_and_reads_its_tool_name_code_and_message(
        registry: tr.ToolRegistry) -> None:
    result = await run(registry, READ.format(call='await tools.read_file({"path": "/etc"})'))
    assert result.error is None, result.text
    assert result.value == {"logs": 'tool "read_file" failed (DENIED): only workspace files\n',
                            "result": ("read_file", "DENIED", "only workspace files")}


@pytest.mark.parametrize(("message", "code"), [
    ("plain", "MY_CODE"),
    ("a message with ): and \"quotes\"\nover two lines", "MY_CODE"),
    ("x", "a code with ) in it"),
    ("x", '"quoted"'),
    ("x", ""),
])
async def test_the_fields_read_back_exactly_whatever_they_hold(
        registry: tr.ToolRegistry, message: str, code: str) -> None:
    args = json.dumps({"message": message, "code": code})
    result = await run(registry, READ.format(call=f"await tools.fail({args})"))
    assert fields(result) == ["fail", code, message]


async def test_a_failure_of_an_unknown_tool_name_reads_back_too(
        registry: tr.ToolRegistry) -> None:
    name = 'no "such" \\ tool'
    result = await run(registry, READ.format(call=f"await tools.call({json.dumps(name)}, {{}})"))
    tool_name, code, message = fields(result)
    assert (tool_name, code) == (name, "UNKNOWN_TOOL")
    assert message.startswith("unknown tool ")


async def test_a_failure_without_a_code_has_code_none() -> None:
    async def broken(arguments: Any, ctx: tr.RunContext) -> tr.ToolOutput:
        return tr.ToolOutput(value="v", meta={"not": {"lossless"}})  # a failure with no code

    async with tr.ToolRegistry(presentation="code") as registry:
        registry.register(tr.Tool(name="broken", description="Broken.",
                                  parameters={"type": "object"}, execute=broken))
        result = await run(registry, READ.format(call="await tools.broken({})"))
    assert result.value == {
        "logs": 'tool "broken" failed: tool result must be losslessly JSON-serializable\n',
        "result": ("broken", None, "tool result must be losslessly JSON-serializable")}


async def test_tool_call_error_raises_any_other_exception_again(
        registry: tr.ToolRegistry) -> None:
    result = await run(registry, (
        "try:\n"
        '    raise ValueError("not a tool call")\n'
        "except ValueError as error:\n"
        "    tool_call_error(error)\n"))
    assert result.error is not None
    assert result.error.code == "CODE_FAILED"
    assert result.error.message.startswith("code run failed (runtime): ")
    assert result.error.message.endswith("ValueError: not a tool call")
    own = await run(registry, (
        "try:\n"
        '    raise RuntimeError("tool made up")\n'
        "except ToolCallError as error:\n"
        "    tool_call_error(error)\n"))
    assert own.error is not None
    assert own.error.message.endswith("RuntimeError: tool made up")


async def test_an_uncaught_tool_call_error_is_a_runtime_failure_naming_the_tool(
        registry: tr.ToolRegistry) -> None:
    result = await run(registry, 'await tools.read_file({"path": "/etc"})')
    assert result.error is not None
    assert result.error.code == "CODE_FAILED"
    assert result.error.type == "MontyRuntimeError"
    assert result.error.message.startswith("code run failed (runtime): ")
    assert result.error.message.endswith(
        'RuntimeError: tool "read_file" failed (DENIED): only workspace files')


async def test_reading_a_field_as_an_attribute_is_a_runtime_failure_naming_it(
        registry: tr.ToolRegistry) -> None:
    # The SDK declares ToolCallError as the spec renders it (with its fields); the
    # sandbox's exception carries only its message, so the attribute is not there.
    result = await run(registry, (
        'try:\n    await tools.read_file({"path": "/etc"})\n'
        "except ToolCallError as error:\n    print(error.code)\n"))
    assert result.error is not None
    assert result.error.code == "CODE_FAILED"
    assert result.error.message.startswith("code run failed (runtime): Traceback")
    assert result.error.message.endswith(
        "AttributeError: 'RuntimeError' object has no attribute 'code'")


async def test_without_the_type_check_the_fields_read_back_the_same() -> None:
    async with tr.ToolRegistry(presentation="code", code=CodeSettings(type_check=False)) as r:
        @r.tool
        async def fail() -> str:
            """Fail."""
            raise tr.ToolError("no", code="NOPE")

        result = await run(r, READ.format(call="await tools.fail({})"))
    assert fields(result) == ["fail", "NOPE", "no"]


async def test_the_sdk_and_the_usage_rules_describe_tool_call_error(
        registry: tr.ToolRegistry) -> None:
    tool = registry.get("run_code")
    assert tool is not None
    assert "`tool_call_error(error).code`" in tool.description
    assert "\nclass ToolCallError(Exception):\n" in tool.description
    assert "\ndef tool_call_error(error: BaseException) -> ToolCallErrorInfo:\n" in \
        tool.description
