"""Set-up shared by test_hostile.py and test_hostile_middleware.py: objects whose
``__eq__``, ``__hash__``, ``__str__``, ``__repr__`` or iteration raise, and a ``Lab`` that
runs one call of them, bounded; with test_hostile_values.py too: ``at_stage``, which
puts a function at one middleware stage, and ``NamedGuard``.

Import as ``from hostile_helpers import ...``; helpers shared more widely are in
helpers.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import toolrail as tr

T = TypeVar("T")


Body = Callable[[tr.JsonValue, tr.RunContext], Any]


RESULT_NOT_LOSSLESS = "tool result must be losslessly JSON-serializable"


def boom(*args: object) -> Any:
    raise RuntimeError("hostile")


class Hostile:
    """Every protocol raises."""

    __eq__ = __hash__ = __str__ = __repr__ = __iter__ = __len__ = __bool__ = boom
    keys = items = values = boom


class HostileList(list[Any]):
    """A list whose every way of reading raises."""

    __eq__ = __repr__ = __iter__ = __len__ = __bool__ = boom
    __hash__ = boom  # type: ignore[assignment]


class HostileStr(str):
    """A str whose protocols raise; its value is still a plain string underneath."""

    __eq__ = __hash__ = __str__ = __repr__ = boom


async def contained(awaitable: Awaitable[T]) -> T:
    """Await with a bound, then check that nothing it started is still running."""
    before = asyncio.all_tasks()
    try:
        return await asyncio.wait_for(awaitable, 5)
    finally:
        assert asyncio.all_tasks() - before == set()


def anything(value: object) -> Any:
    """Hand a deliberately ill-typed value to an API (the point of these tests)."""
    return value


def at_stage(registry: tr.ToolRegistry, stage: str, fn: Callable[..., Any]) -> None:
    """Put ``fn`` at ``stage`` of ``registry``: the "pre", "around" or "post" middleware,
    or the "approver" (behind a pre-execute that asks, so that it is reached)."""
    if stage == "pre":
        registry.pre_execute(fn)
    elif stage == "around":
        registry.around_execute(fn)
    elif stage == "post":
        registry.post_execute(fn)
    elif stage == "approver":
        registry.pre_execute(lambda e, n: tr.Ask())
        registry.approver = fn
    else:
        raise ValueError(f"no middleware stage {stage!r}")


class NamedGuard:
    """A guard whose verdict is ``verdict()`` and whose repr is ``<named guard>``."""

    def __init__(self, verdict: Callable[[], Any]) -> None:
        self.verdict = verdict

    def __call__(self, execution: tr.Execution) -> Any:
        return self.verdict()

    def __repr__(self) -> str:
        return "<named guard>"


def make_tool(execute: Body, **options: Any) -> tr.Tool:
    options.setdefault("concurrency_safe", True)
    return tr.Tool(
        name="t", description="d", parameters={"type": "object"}, execute=execute, **options
    )


def call(call_id: str = "c1", arguments: Any = None) -> tr.ToolCall:
    return tr.ToolCall(call_id=call_id, name="t", arguments={} if arguments is None else arguments)


def assert_error(
    result: tr.ToolResult, message: str, code: str | None = None, kind: str | None = None
) -> None:
    assert result.is_error is True
    assert result.error == tr.ErrorInfo(message, code, kind)
    assert result.content == (tr.TextContent("Error: " + message),)
    assert result.value is None


class Lab:
    """A registry with one tool, recording body runs and observer notifications."""

    def __init__(self, body: Body | None = None, **options: Any) -> None:
        self.ran: list[Any] = []
        self.notified: list[tuple[str, tr.ToolResult]] = []
        self.registry = tr.ToolRegistry()

        async def default(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
            self.ran.append(arguments)
            return "ok"

        self.registry.register(make_tool(default if body is None else body, **options))
        self.registry.on_result(lambda e, r: self.notified.append((e.call_id, r)))

    async def execute(self, arguments: Any = None) -> tr.ToolResult:
        result = await contained(self.registry.execute(call(arguments=arguments)))
        assert self.notified == [("c1", result)]
        assert self.notified[0][1] is result
        return result

    async def run(self, arguments: Any = None, n: int = 3) -> tr.Batch:
        calls = [call(f"b{i}", arguments) for i in range(n)]
        batch = await contained(self.registry.run(calls, max_parallel=2))
        assert len(batch.results) == n
        assert self.notified[-n:] == [(f"b{i}", r) for i, r in enumerate(batch.results)]
        return batch


INVALID = 'tool "t" returned invalid output: value is not lossless JSON: '
