"""What a nested call and a repeated program cost the sandbox (issue 25, item 3), held to
the same outcomes either way: a call awaited at once is answered in place
(``resume_auto``), a gathered one through a future; a program that passed its type
check against the same SDK skips the check next time, one that failed it never does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import toolrail as tr
from helpers import within
from toolrail.code import _pool

pytest.importorskip("pydantic_monty")


@pytest.fixture
async def registry() -> AsyncIterator[tr.ToolRegistry]:
    async with tr.ToolRegistry(presentation="code") as registry:
        @registry.tool(concurrency_safe=True)
        async def echo(text: str) -> str:
            """Echo a text."""
            return text

        @registry.tool(concurrency_safe=True)
        async def fail(message: str) -> str:
            """Fail."""
            raise tr.ToolError(message, code="NOPE")

        yield registry


async def run(registry: tr.ToolRegistry, code: str) -> tr.ToolResult:
    return await within(registry.execute(
        tr.ToolCall(call_id="r", name="run_code", arguments={"code": code})), 30)


def result_of(result: tr.ToolResult) -> Any:
    assert result.error is None, result.text
    return tr.thaw(result.value)["result"]


async def test_calls_awaited_at_once_and_gathered_give_the_same_values_and_errors(
        registry: tr.ToolRegistry) -> None:
    code = ("a = await tools.echo({'text': 'one'})\n"
            "b, c = await asyncio.gather(tools.echo({'text': 'two'}), "
            "tools.echo({'text': 'three'}))\n"
            "caught = []\n"
            "try:\n"
            "    await tools.fail({'message': 'at once'})\n"
            "except ToolCallError as error:\n"
            "    caught.append(tool_call_error(error).message)\n"
            "try:\n"
            "    await asyncio.gather(tools.fail({'message': 'gathered'}))\n"
            "except ToolCallError as error:\n"
            "    caught.append(tool_call_error(error).code)\n"
            "[a, b, c, caught]")
    assert result_of(await run(registry, "import asyncio\n" + code)) == [
        "one", "two", "three", ["at once", "NOPE"]]


async def test_a_program_that_passed_its_type_check_skips_it_next_time(
        registry: tr.ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    skipped: list[bool] = []
    original = _pool.TypeChecked.knows

    def knows(self: _pool.TypeChecked, sdk: str, code: str) -> bool:
        skipped.append(original(self, sdk, code))
        return skipped[-1]

    monkeypatch.setattr(_pool.TypeChecked, "knows", knows)
    good = "await tools.echo({'text': 'hi'})"
    assert result_of(await run(registry, good)) == "hi"
    assert result_of(await run(registry, good)) == "hi"
    bad = "await tools.echo({'text': 1})"  # an int where the SDK says str
    for _ in range(2):
        failed = await run(registry, bad)
        assert failed.error is not None
        assert failed.error.code == "CODE_FAILED"
        assert failed.error.message.startswith("code run failed (type):")
    assert skipped == [False, True, False, False]  # a failed check is never remembered


def test_the_type_check_memory_keeps_the_newest_pairs_only() -> None:
    checked = _pool.TypeChecked()
    for i in range(_pool._CHECKED + 5):
        checked.add("sdk", f"program {i}")
    assert not checked.knows("sdk", "program 0")
    assert checked.knows("sdk", f"program {_pool._CHECKED + 4}")
    assert not checked.knows("another sdk", f"program {_pool._CHECKED + 4}")
    assert checked.knows("sdk", "program 5")  # now the newest: it stays
    checked.add("sdk", "one more")
    assert checked.knows("sdk", "program 5")
    assert not checked.knows("sdk", "program 6")


async def test_a_program_checked_before_does_not_wait_for_a_spare_still_warming(
        registry: tr.ToolRegistry) -> None:
    code = "await tools.echo({'text': 'again'})"
    assert result_of(await run(registry, code)) == "again"
    pool = registry._pool
    assert pool is not None
    [warming] = pool._spares.values()
    if warming.done():
        pytest.skip("the spare warmed before the program could start")
    assert result_of(await run(registry, code)) == "again"  # a session of its own
    assert list(pool._spares.values()) == [warming]  # the spare waits for the next one
    assert result_of(await run(registry, "await tools.echo({'text': 'new'})")) == "new"
