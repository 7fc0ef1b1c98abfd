"""The limits of a program that the sandbox alone does not enforce (code-mode.md,
"Running a program", item 5 and ``CodeSettings``; docs/code-mode.md, "Errors and
limits"): its wall time with waits on tools, the depth of its result, a call it never
awaits, and the size of the exception message it fails with.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import toolrail as tr
from helpers import within
from toolrail.code import CodeSettings

pytest.importorskip("pydantic_monty")


async def run(registry: tr.ToolRegistry, code: str) -> tr.ToolResult:
    return await within(registry.execute(
        tr.ToolCall(call_id="r", name="run_code", arguments={"code": code})), 30)


def failure(result: tr.ToolResult, kind: str) -> tuple[str, str | None]:
    """The message after ``code run failed (<kind>): `` and the error's type."""
    assert result.is_error, result.text
    assert result.error is not None
    assert result.error.code == "CODE_FAILED"
    prefix = f"code run failed ({kind}): "
    assert result.error.message.startswith(prefix), result.error.message[:300]
    return result.error.message[len(prefix):], result.error.type


def echoing(settings: CodeSettings | None = None) -> tr.ToolRegistry:
    registry = tr.ToolRegistry(presentation="code", code=settings)

    @registry.tool(concurrency_safe=True)
    async def echo(text: str) -> str:
        """Echo."""
        return text

    return registry


def waiting(settings: CodeSettings) -> tuple[tr.ToolRegistry, list[tuple[str, str | None]]]:
    """A registry whose ``wait`` tool never returns, and the (call id, error code) of
    each result its observers see."""
    never = asyncio.Event()
    seen: list[tuple[str, str | None]] = []
    registry = tr.ToolRegistry(presentation="code", code=settings)

    @registry.tool(concurrency_safe=True)
    async def wait() -> str:
        """Wait for ever."""
        await never.wait()
        return "never"

    registry.on_result(lambda e, r: seen.append((e.call_id, r.error.code if r.error else None)))
    return registry, seen


async def test_waiting_on_a_tool_counts_toward_max_duration() -> None:
    registry, seen = waiting(CodeSettings(max_duration=0.5, max_calls=100_000))
    async with registry:
        started = time.monotonic()
        result = await run(registry, "while True:\n    await tools.wait({})")
        elapsed = time.monotonic() - started
    message, type_ = failure(result, "timeout")
    assert message == ("the program ran longer than max_duration (0.5 s) of wall time, "
                       "waits on tool calls included")
    assert type_ == "CodeFailedError"
    assert elapsed < 5
    # The call the program waited on was cancelled and committed before run_code returned.
    assert seen == [("r.1", "ABORTED"), ("r", "CODE_FAILED")]


async def test_at_max_duration_calls_not_started_are_dropped_without_a_trace() -> None:
    registry, seen = waiting(CodeSettings(max_duration=0.5, max_parallel=1))
    async with registry:
        result = await run(registry, (
            "import asyncio\nawait asyncio.gather(tools.wait({}), tools.wait({}), "
            "tools.wait({}))"))
    failure(result, "timeout")
    # One call at a time: the first started (and was cancelled); the others never did.
    assert seen == [("r.1", "ABORTED"), ("r", "CODE_FAILED")]


async def test_many_quick_tool_calls_stop_at_max_duration_too() -> None:
    async with echoing(CodeSettings(max_duration=0.5, max_calls=1_000_000)) as registry:
        result = await run(registry, 'while True:\n    await tools.echo({"text": "a"})')
    message, _ = failure(result, "timeout")
    assert message.startswith("the program ran longer than max_duration (0.5 s)")


async def test_a_result_nested_a_thousand_deep_is_a_runtime_failure() -> None:
    async with echoing() as registry:
        deep = await run(registry, "x = []\nfor i in range(1000):\n    x = [x]\nx")
        dicts = await run(registry, 'x = {}\nfor i in range(1000):\n    x = {"a": x}\nx')
        at_the_limit = await run(registry, "x = []\nfor i in range(99):\n    x = [x]\nx")
        past_it = await run(registry, "x = []\nfor i in range(100):\n    x = [x]\nx")
    for result in (deep, dicts, past_it):
        assert failure(result, "runtime") == (
            "the program's result nests deeper than 100 levels of arrays and objects",
            "CodeFailedError")
    assert at_the_limit.error is None, at_the_limit.text  # 100 levels


UNAWAITED = ('a tool call was not awaited: the program\'s result holds the call of "echo" '
             "instead of its value; await every call (await tools.<name>(...), or "
             "await asyncio.gather(...) for several)")


async def test_a_call_not_awaited_in_the_result_is_an_error_and_never_starts() -> None:
    async with echoing() as registry:
        seen: list[str] = []
        registry.on_result(lambda e, r: seen.append(e.call_id))
        in_a_list = await run(registry, '[tools.echo({"text": "a"})]')
        # A call not awaited at once is held until the program waits; this one never
        # did, so its call never started (as a coroutine never awaited never runs).
        assert seen == ["r"]
        in_a_dict = await run(registry, '{"a": tools.echo({"text": "a"})}')
    for result in (in_a_list, in_a_dict):
        assert failure(result, "runtime") == (UNAWAITED, "CodeFailedError")


async def test_a_bare_call_not_awaited_is_the_same_error_without_the_type_check() -> None:
    async with echoing(CodeSettings(type_check=False)) as registry:
        result = await run(registry, 'tools.echo({"text": "a"})')
        awaited_later = await run(registry, (
            'c = tools.echo({"text": "a"})\nawait c\n[c]'))
    assert failure(result, "runtime") == (UNAWAITED, "CodeFailedError")
    assert failure(awaited_later, "runtime") == (UNAWAITED, "CodeFailedError")


async def test_a_string_that_only_looks_like_a_call_is_a_result() -> None:
    async with echoing() as registry:
        result = await run(registry, 'await tools.echo({"text": "<coroutine external_future(0)>"})')
    assert result.error is None
    assert result.text == 'result: "<coroutine external_future(0)>"'


async def test_an_exception_message_is_cut_at_max_output_bytes() -> None:
    async with echoing(CodeSettings(max_output_bytes=10_000)) as registry:
        result = await run(registry, 'print("before")\nraise ValueError("é" * 5_000_000)')
    message, type_ = failure(result, "runtime")
    assert type_ == "MontyRuntimeError"
    head, logs = message.split("\nCaptured output:\n")
    assert logs == "before\n"
    assert head.endswith(" ... [cut: the message is over max_output_bytes (10000 bytes)]")
    assert "ValueError: éé" in head
    assert len(head.encode()) <= 10_000


async def test_a_huge_result_is_refused_as_an_output_limit() -> None:
    async with echoing(CodeSettings(max_output_bytes=10_000)) as registry:
        result = await run(registry, '["x" * 20_000_000]')
        exact = await run(registry, '"é" * 4_000')  # 4 000 characters, 8 002 bytes of JSON
        over = await run(registry, '"é" * 5_000')  # 5 000 characters, 10 002 bytes
    assert failure(result, "output-limit") == (
        "captured output and result exceed 10000 bytes", "CodeFailedError")
    assert exact.error is None
    assert failure(over, "output-limit")[0] == "captured output and result exceed 10000 bytes"
