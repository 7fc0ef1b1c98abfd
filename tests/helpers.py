"""Set-up shared by several test files: raw tools and calls, bounded waits, gates, checks.

Import as ``from helpers import ...`` from any folder of ``tests/`` (pyproject.toml puts
``tests/`` on pytest's ``pythonpath``, for ``mcp_fixtures`` too). A helper only one file
uses stays in that file.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import enum
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar, overload

import pytest

import toolrail as tr

T = TypeVar("T")

# The messages of the two cancellation outcomes (pipeline.md, "Cancellation").
ABORTED = "tool call aborted"
ABORTED_BEFORE = "tool call aborted before dispatch"

CallNext = Callable[[], Awaitable[tr.ToolResult]]
PreNext = Callable[[], Awaitable[tr.PreDecision]]
PostNext = Callable[[], Awaitable[tr.PostDecision]]


def exactly(message: str) -> str:
    """A ``match=`` pattern that accepts exactly ``message``."""
    return f"^{re.escape(message)}\\Z"


async def within(awaitable: Awaitable[T], seconds: float = 5) -> T:
    """Every wait in the tests is bounded: a broken library fails, it does not hang."""
    return await asyncio.wait_for(awaitable, seconds)


async def one_turn() -> None:
    """Give the loop one turn, so what was (wrongly) ready to run has had its chance."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    loop.call_soon(future.set_result, None)
    await future


async def until(event: asyncio.Event) -> None:
    """Wait for a gate, bounded."""
    await asyncio.wait_for(event.wait(), 5)


async def wait_forever() -> None:
    """What a slow body awaits; bounded so a broken interrupt fails instead of hanging."""
    await asyncio.wait_for(asyncio.Event().wait(), 5)


async def echo(arguments: tr.JsonValue, ctx: tr.RunContext) -> tr.JsonValue:
    return arguments


def raw_tool(name: str = "t", execute: Any = echo, **overrides: Any) -> tr.Tool:
    """A raw ``tr.Tool``; ``overrides`` may set any field, including invalid values."""
    fields: dict[str, Any] = {
        "name": name,
        "description": f"The {name} tool.",
        "parameters": {"type": "object"},
        "execute": execute,
    }
    fields.update(overrides)
    return tr.Tool(**fields)


def call(name: str, arguments: Any = None, *, call_id: str = "c1", **fields: Any) -> tr.ToolCall:
    """A call of ``name``; ``arguments`` default to ``{}``."""
    return tr.ToolCall(
        call_id=call_id, name=name, arguments={} if arguments is None else arguments, **fields
    )


def observe(registry: tr.ToolRegistry) -> list[tuple[tr.Execution, tr.ToolResult]]:
    """Every (execution, result) pair ``registry``'s observers are told about, in order."""
    seen: list[tuple[tr.Execution, tr.ToolResult]] = []
    registry.on_result(lambda execution, result: seen.append((execution, result)))
    return seen


def results_seen(registry: tr.ToolRegistry) -> list[tr.ToolResult]:
    """Every result ``registry``'s observers are told about, in order."""
    seen: list[tr.ToolResult] = []
    registry.on_result(lambda _execution, result: seen.append(result))
    return seen


async def settled(awaitable: Awaitable[T], seconds: float = 5) -> T:
    """Await a call that nothing cancels: a ``CancelledError`` out of it is a failure."""
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except asyncio.CancelledError:
        pytest.fail("the call raised CancelledError although nothing cancelled the task "
                    "running it")


async def own_timeout() -> str:
    """What a tool (or an approver) does to bound a wait: asyncio's own ``timeout``
    (``timeout(0)`` expires at the loop's next turn)."""
    try:
        async with asyncio.timeout(0):
            await asyncio.Event().wait()
    except TimeoutError:
        return "fallback"
    return "never"


class Changes:
    """An ``on_change`` listener that counts notifications."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def assert_error(
    result: tr.ToolResult, message: str, code: str | None = None, type_name: str | None = None
) -> None:
    """An error result exactly as the registry builds it."""
    assert result.error == tr.ErrorInfo(message, code, type_name)
    assert result.is_error is True
    assert result.content == (tr.TextContent("Error: " + message),)
    assert result.value is None
    assert result.meta is None
    assert result.concludes_turn is False


class GatedLab:
    """A registry whose bodies wait on per-call gates; the first observer logs each commit.

    Subclasses register the tools. Their bodies append ``"start <id>"`` and ``"end <id>"``
    to ``log`` and set ``started`` and ``finished``; the observer appends
    ``"commit <id>"``, all in the order they happened.
    """

    def __init__(self) -> None:
        self.registry = tr.ToolRegistry()
        self.log: list[str] = []
        self.started: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.gates: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.finished: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.committed: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.notified: list[tuple[tr.Execution, tr.ToolResult]] = []
        self.registry.on_result(self._observe)

    def _observe(self, execution: tr.Execution, result: tr.ToolResult) -> None:
        self.notified.append((execution, result))
        self.log.append(f"commit {execution.call_id}")
        self.committed[execution.call_id].set()

    def release(self, *ids: str) -> None:
        for cid in ids:
            self.gates[cid].set()

    async def wait_started(self, *ids: str) -> None:
        for cid in ids:
            await within(self.started[cid].wait())

    def starts(self) -> list[str]:
        return [entry.split()[1] for entry in self.log if entry.startswith("start ")]

    def commits(self) -> list[str]:
        return [execution.call_id for execution, _ in self.notified]


def adder_registry() -> tr.ToolRegistry:
    """A registry holding one typed tool, ``add(a: int, b: int = 5) -> int``."""
    reg = tr.ToolRegistry()

    @reg.tool(concurrency_safe=True)
    def add(a: int, b: int = 5) -> int:
        """Add two numbers."""
        return a + b

    return reg


async def assert_a_sub_agents_calls_carry_the_parent_token_and_scope(
    read: Callable[[tr.ToolRegistry, tr.ExecutionToken], list[tr.ToolCall]],
) -> None:
    """An adapter's calls read for a sub-agent carry its parent's token and scope.

    A ``delegate`` tool on ``adder_registry()`` reads a sub-agent reply of two ``add``
    calls (``a=1`` and ``a=2``) with ``read(registry, parent)``, which must pass
    ``parent=parent, scope="sub"`` to the adapter, and runs them: they come back as
    ``"6 7"``, and each is observed with the outer call's token and scope ``"sub"``,
    the outer call itself with neither.
    """
    registry = adder_registry()
    seen: list[tuple[tr.ExecutionToken | None, object]] = []
    registry.on_result(lambda execution, result: seen.append((execution.parent, execution.scope)))
    outer: list[tr.ExecutionToken] = []

    @registry.tool
    async def delegate(ctx: tr.RunContext) -> str:
        """Hand two sums to a sub-agent."""
        outer.append(ctx.token)
        batch = await registry.run(read(registry, ctx.token))
        return " ".join(result.text for result in batch.results)

    result = await registry.execute(tr.ToolCall(call_id="outer", name="delegate"))

    assert (result.is_error, result.value) == (False, "6 7")
    assert seen == [(outer[0], "sub"), (outer[0], "sub"), (None, None)]


# The parameters schema of ``adder_registry()``'s ``add``, as every adapter sends it.
ADD_PARAMETERS = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 5}},
    "required": ["a"],
    "additionalProperties": False,
}


def registry_with_policy(approved: list[str]) -> tr.ToolRegistry:
    """The integrations' policy registry: ``write(path)`` asks the approver (which notes
    the call id in ``approved`` and allows it once); ``delete(path)`` a guard denies with
    "deleting is not allowed", so its body never runs."""

    def approver(request: tr.ApprovalRequest) -> tr.ApprovalOutcome:
        approved.append(request.call_id)
        return tr.ApprovalOutcome.ALLOWED_ONCE

    registry = tr.ToolRegistry(approver=approver)

    @registry.tool
    def write(path: str) -> str:
        """Write a file."""
        return f"wrote {path}"

    @registry.tool
    def delete(path: str) -> str:
        """Delete a file."""
        raise AssertionError("a denied call never runs")

    registry.pre_execute(lambda e, call_next: tr.Ask() if e.name == "write" else call_next())
    registry.guard(lambda e: "deleting is not allowed" if e.name == "delete" else None)
    return registry


# The image ``looking_registry()``'s ``look`` returns, as base64.
CAT_PNG = base64.b64encode(b"\x89PNG").decode()


def looking_registry() -> tr.ToolRegistry:
    """The integrations' image registry: ``look()`` returns the text "a cat" and
    ``CAT_PNG``, and defers the context "remember the cat"."""
    registry = tr.ToolRegistry()

    @registry.tool
    def look(ctx: tr.RunContext) -> list[tr.Content]:
        """Look."""
        ctx.defer_context("remember the cat")
        return [tr.TextContent("a cat"), tr.ImageContent(CAT_PNG, "image/png")]

    return registry


def python_output(code: str) -> str:
    """What a fresh ``python -c code`` prints; it must exit with status 0."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def waiting_tool(started: asyncio.Event, stopped: asyncio.Event) -> tr.Tool:
    """Tool "wait": sets ``started``, waits until interrupted, then sets ``stopped``."""

    async def wait(arguments: tr.JsonValue, context: tr.RunContext) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()
        return "never"

    return raw_tool("wait", wait, description="")


# ---- shared by the test_pipeline_* files -----------------------------------------------


AroundNext = Callable[[], Awaitable[tr.ToolResult]]


Body = Callable[[tr.JsonValue, tr.RunContext], Any]


IMAGE = tr.ImageContent(data="aGVsbG8=", mime_type="image/png")


async def ok_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
    return "ok"


def make_tool(name: str = "t", execute: Body = ok_body, **options: Any) -> tr.Tool:
    return tr.Tool(
        name=name,
        description=f"the {name} tool",
        parameters={"type": "object"},
        execute=execute,
        **options,
    )


def make_call(
    name: str = "t", call_id: str = "c1", arguments: Any = None, **fields: Any
) -> tr.ToolCall:
    return tr.ToolCall(
        call_id=call_id, name=name, arguments={} if arguments is None else arguments, **fields
    )


def assert_final_error(
    result: tr.ToolResult, message: str, code: str | None = None, type_name: str | None = None
) -> None:
    """A final error: the registry's error result, with no contexts kept."""
    assert_error(result, message, code, type_name)
    assert result.contexts == ()


def raises_attribute_error(action: Callable[[], object]) -> bool:
    try:
        action()
    except AttributeError:
        return True
    return False


def assign(target: object, attribute: str, value: object) -> None:
    setattr(target, attribute, value)


def context(text: str, source: str = "test", meta: Any = None) -> tr.ContextMessage:
    return tr.ContextMessage((tr.TextContent(text),), source, meta)


class BadRepr:
    """A value whose ``repr`` fails."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class Unprintable(Exception):
    """An exception whose ``str`` fails."""

    def __str__(self) -> str:
        raise RuntimeError("no str")


class Reason(enum.StrEnum):
    BUSY = "the tool is busy"


class Recorder:
    """Records the events of one test in order."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def __call__(self, event: str) -> None:
        self.events.append(event)

    def then(self, event: str, value: T) -> T:
        """Record ``event`` and return ``value`` (for one-line middleware)."""
        self.events.append(event)
        return value


def appended(items: list[Any], item: Any, value: T) -> T:
    """Append ``item`` to ``items`` and return ``value`` (for one-line middleware)."""
    items.append(item)
    return value


def install_every_stage(registry: tr.ToolRegistry, log: Recorder) -> None:
    """Middleware, a guard and an observer that only record that they ran."""

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        log("pre")
        return await call_next()

    def guard(execution: tr.Execution) -> str | None:
        log("guard")
        return None

    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        log("around")
        return await call_next()

    async def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> Any:
        log("post")
        return await call_next()

    def observer(execution: tr.Execution, result: tr.ToolResult) -> None:
        log("observer")

    registry.pre_execute(pre)
    registry.guard(guard)
    registry.around_execute(around)
    registry.post_execute(post)
    registry.on_result(observer)


def deferring(*texts: str) -> Body:
    """A body that defers a context for each of ``texts``, in order, and returns "ok"."""

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        for text in texts:
            ctx.defer_context(text)
        return "ok"

    return body


def recording_body(log: Recorder, value: Any = "ok") -> Body:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        log("body")
        return value

    return body


def nesting(log: Recorder, label: str) -> Callable[..., Awaitable[Any]]:
    """Middleware for any stage that logs ``label>``, calls ``call_next`` (its last
    argument) and logs ``label<`` before handing the outcome back."""

    async def middleware(*arguments: Any) -> Any:
        call_next = arguments[-1]
        log(label + ">")
        outcome = await call_next()
        log(label + "<")
        return outcome

    return middleware


def returning(value: Any) -> Body:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        return value

    return body


class ContentSequence(Sequence[tr.Content]):
    """A read-only sequence of content blocks that is neither a list nor a tuple."""

    def __init__(self, *blocks: tr.Content) -> None:
        self._blocks = blocks

    @overload
    def __getitem__(self, index: int) -> tr.Content: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[tr.Content]: ...
    def __getitem__(self, index: int | slice) -> tr.Content | Sequence[tr.Content]:
        return self._blocks[index]

    def __len__(self) -> int:
        return len(self._blocks)

    def __iter__(self) -> Iterator[tr.Content]:
        return iter(self._blocks)


def raising_tool(exc: BaseException, kind: str) -> tr.Tool:
    if kind == "async":

        async def async_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> None:
            raise exc

        return make_tool(execute=async_body)

    def sync_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> None:
        raise exc

    return make_tool(execute=sync_body, inline=kind == "inline")


NUMBER_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "minProperties": 1,
}


UNRENDERABLE = 'tool "t" returned invalid output: value cannot be rendered as text: '


def deep_list(depth: int) -> list[Any]:
    root: list[Any] = []
    current = root
    for _ in range(depth):
        child: list[Any] = []
        current.append(child)
        current = child
    return root


GUARD_HINT = "a guard returns a reason string to deny or None to abstain"


class NamedGuard:
    def __init__(self, verdict: Any) -> None:
        self.verdict = verdict

    def __repr__(self) -> str:
        return "NamedGuard()"

    def __call__(self, execution: tr.Execution) -> Any:
        return self.verdict


class Finalizer:
    """A ``finalize_content`` that records its calls and returns (or raises) ``out``."""

    def __init__(self, out: Any = None) -> None:
        self.out = out
        self.calls: list[tuple[tr.Execution, tr.ToolResult]] = []

    def __call__(self, execution: tr.Execution, result: tr.ToolResult) -> Any:
        self.calls.append((execution, result))
        if isinstance(self.out, Exception):
            raise self.out
        return self.out


def asking(reason: str | None = None) -> Callable[[tr.Execution, PreNext], tr.PreDecision]:
    return lambda execution, call_next: tr.Ask(reason)


# ---- shared by the test_registry_* files -----------------------------------------------


def names(registry: tr.ToolRegistry, scope: Any = None) -> list[str]:
    return [schema.name for schema in registry.schemas(scope)]


async def execute(registry: tr.ToolRegistry, call: tr.ToolCall) -> tr.ToolResult:
    return await asyncio.wait_for(registry.execute(call), 5)


# ---- shared by the test_properties_* files ---------------------------------------------


def error(message: str, code: str | None = None, kind: str | None = None) -> tr.ToolResult:
    """An error result as the registry builds it."""
    return tr.ToolResult(
        (tr.TextContent("Error: " + message),), True, None, tr.ErrorInfo(message, code, kind)
    )


def success(value: str, *, concludes: bool = False) -> tr.ToolResult:
    return tr.ToolResult((tr.TextContent(value),), False, value, None, None, (), concludes)


def assert_frozen(result: tr.ToolResult) -> None:
    """A final result: frozen, lossless, consistent."""
    assert type(result) is tr.ToolResult
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.is_error = not result.is_error  # type: ignore[misc]
    assert type(result.content) is tuple
    assert all(type(block) in (tr.TextContent, tr.ImageContent) for block in result.content)
    assert type(result.contexts) is tuple
    assert all(type(c) is tr.ContextMessage for c in result.contexts)
    assert tr.snapshot_json(result.value) is result.value
    assert tr.snapshot_json(result.meta) is result.meta
    assert (result.error is not None) is result.is_error
    if result.is_error:
        assert result.value is None
        assert result.concludes_turn is False
