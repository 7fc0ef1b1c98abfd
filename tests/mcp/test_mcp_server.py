"""``toolrail.mcp.server``: a registry served over MCP, driven by the SDK's own client.

The transport tests run ``tests/mcp_fixtures/server.py`` (or, for cancellation,
``WAITING_SERVER``) as a real subprocess (stdio, and streamable HTTP on a free loopback
port); the rest use the SDK's in-memory transport (``mcp.Client(server)``) or memory
streams. Waits are bounded; nothing sleeps to synchronize (the HTTP server's readiness
is polled with a deadline).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import mcp
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.memory import create_client_server_memory_streams
from pydantic import BaseModel

import toolrail as tr
import toolrail.mcp
import toolrail.mcp._server
from helpers import raw_tool, waiting_tool
from mcp_fixtures.processes import STDIO_ARGS, free_port, http_process, http_server

WAIT = 10
CallNext = Callable[[], Awaitable[tr.ToolResult]]


class ListChanges:
    """A message handler counting ``notifications/tools/list_changed``."""

    def __init__(self) -> None:
        self.count = 0
        self.arrived = asyncio.Event()

    async def __call__(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.count += 1
            self.arrived.set()

    async def wait(self) -> None:
        await asyncio.wait_for(self.arrived.wait(), WAIT)
        self.arrived.clear()


@asynccontextmanager
async def stdio_session(changes: ListChanges | None = None) -> AsyncIterator[ClientSession]:
    # The SDK passes the child a minimal environment; PYTHONPATH (a worktree's src, say)
    # goes too, so the server runs the toolrail under test.
    path = os.environ.get("PYTHONPATH")
    env = None if path is None else {"PYTHONPATH": path}
    params = StdioServerParameters(command=sys.executable, args=STDIO_ARGS, env=env)
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, message_handler=changes) as session,
    ):
        await asyncio.wait_for(session.initialize(), WAIT)
        yield session


@asynccontextmanager
async def http_session(
    url: str, changes: ListChanges | None = None
) -> AsyncIterator[ClientSession]:
    async with (
        streamable_http_client(url) as (read, write),
        ClientSession(read, write, message_handler=changes) as session,
    ):
        await asyncio.wait_for(session.initialize(), WAIT)
        yield session


@asynccontextmanager
async def memory_session(
    app: Any, changes: ListChanges | None = None, mode: str = "legacy"
) -> AsyncIterator[mcp.Client]:
    async with mcp.Client(app, mode=mode, message_handler=changes, cache=None) as client:
        yield client


def tools_by_name(listing: types.ListToolsResult) -> dict[str, types.Tool]:
    return {tool.name: tool for tool in listing.tools}


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


# ---- over stdio, in a subprocess ----------------------------------------------------------


async def test_over_stdio_tools_list_carries_output_schemas_and_annotations() -> None:
    async with stdio_session() as session:
        tools = tools_by_name(await session.list_tools())

    assert sorted(tools) == [
        "add",
        "die",
        "fail",
        "grow",
        "lone_surrogate",
        "outcomes",
        "slow",
        "stats",
        "text",
        "wait_started",
    ]
    add = tools["add"]
    assert add.description == "Add two integers."
    assert add.input_schema["required"] == ["a", "b"]
    assert add.output_schema == {
        "type": "object",
        "properties": {"result": {"type": "integer"}},
        "required": ["result"],
        "x-fastmcp-wrap-result": True,
    }
    assert add.annotations is not None
    assert add.annotations.read_only_hint is True
    stats = tools["stats"]
    assert stats.output_schema is not None
    assert stats.output_schema["type"] == "object"
    assert "result" not in stats.output_schema["properties"]
    assert tools["fail"].annotations is None


async def test_over_stdio_calls_answer_with_structured_content_or_is_error() -> None:
    async with stdio_session() as session:
        added = await session.call_tool("add", {"a": 2, "b": 3})
        stats = await session.call_tool("stats", {"values": [1, 2.5]})
        failed = await session.call_tool("fail", {"reason": "no way"})
        invalid = await session.call_tool("add", {"a": "two"})

    assert (added.is_error, text_of(added), added.structured_content) == (False, "5", {"result": 5})
    assert stats.structured_content == {"count": 2, "total": 3.5}
    assert failed.is_error is True
    assert text_of(failed) == "Error: no way"
    assert failed.structured_content is None
    assert failed.meta == {
        "toolrail/error": {"message": "no way", "code": "NOPE", "type": "ToolError"}
    }
    assert invalid.is_error is True
    assert (invalid.meta or {})["toolrail/error"]["code"] == "INVALID_ARGS"


async def test_over_stdio_a_registry_change_sends_tools_list_changed() -> None:
    changes = ListChanges()
    async with stdio_session(changes) as session:
        await session.call_tool("grow", {"name": "extra"})
        await changes.wait()
        tools = tools_by_name(await session.list_tools())

    assert "extra" in tools
    assert tools["extra"].description == "Added at run time."


async def test_over_stdio_a_cancelled_request_aborts_the_call_in_the_server() -> None:
    async with stdio_session() as session:
        slow = asyncio.ensure_future(session.call_tool("slow"))
        await session.call_tool("wait_started")
        slow.cancel()  # the SDK sends notifications/cancelled for the request
        with pytest.raises(asyncio.CancelledError):
            await slow
        outcomes = await session.call_tool("outcomes")

    assert outcomes.structured_content is not None
    assert "slow:ABORTED" in outcomes.structured_content["result"]


WAITING_SERVER = """
import asyncio, sys
import toolrail as tr, toolrail.mcp

log = open(sys.argv[1], "a", buffering=1)
lines = []
noted = asyncio.Event()

def note(line):
    lines.append(line)
    log.write(line + "\\n")
    noted.set()

registry = tr.ToolRegistry()
started = asyncio.Event()
registry.on_result(lambda execution, result: note(
    f"{execution.name} {result.error.code if result.error else 'OK'}"))

async def wait(arguments, context):
    first = asyncio.current_task()
    started.set()
    await context.signal.wait()  # a CancelledError from outside would end it here
    note(f"signal {context.signal.reason!r}, one task: {asyncio.current_task() is first}")
    return "stopped"

registry.register(tr.Tool(name="wait", description="", parameters={"type": "object"},
                          execute=wait, cancellation="cooperative"))

@registry.tool
async def wait_started() -> str:
    await started.wait()
    started.clear()
    return "started"

@registry.tool
async def noted_once_aborted(count: int) -> list[str]:
    async def enough():
        while lines.count("wait ABORTED") < count:
            noted.clear()
            await noted.wait()
    await asyncio.wait_for(enough(), 10)
    return lines

if sys.argv[2] == "stdio":
    asyncio.run(toolrail.mcp.serve_stdio(registry))
else:
    asyncio.run(toolrail.mcp.serve_http(registry, port=int(sys.argv[2])))
"""

CANCELLED_THEN_CUT_OFF = [
    "wait_started OK",
    "signal 'cancelled by the MCP client', one task: True",
    "wait ABORTED",
] * 2


async def cancel_one_call_then_leave_with_another_running(session: ClientSession) -> Any:
    await asyncio.wait_for(session.initialize(), WAIT)
    cancelled = asyncio.ensure_future(session.call_tool("wait"))
    await asyncio.wait_for(session.call_tool("wait_started"), WAIT)
    cancelled.cancel()  # notifications/cancelled
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    cut_off = asyncio.ensure_future(session.call_tool("wait"))
    await asyncio.wait_for(session.call_tool("wait_started"), WAIT)
    return cut_off


@contextmanager
def serving_over_http(script: Path, log: Path, deadline: float = 10) -> Iterator[str]:
    """Run ``WAITING_SERVER`` over streamable HTTP on a free loopback port; yield its URL."""
    port = free_port()
    with http_process([str(script), str(log), str(port)], port, deadline) as url:
        yield url


async def test_over_stdio_a_call_cancelled_or_cut_off_ends_through_its_signal(
    tmp_path: Path,
) -> None:
    script, log = tmp_path / "server.py", tmp_path / "log.txt"
    script.write_text(WAITING_SERVER)
    params = StdioServerParameters(command=sys.executable, args=[str(script), str(log), "stdio"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        cut_off = await cancel_one_call_then_leave_with_another_running(session)
    # Leaving closed the server's input with the second call running; the server ended it
    # before it exited (the client waits for that, and would kill it after 2 s).
    with pytest.raises(MCPError, match="Connection closed"):
        await asyncio.wait_for(cut_off, WAIT)

    assert log.read_text().splitlines() == CANCELLED_THEN_CUT_OFF


async def test_over_handshake_http_a_call_cancelled_or_cut_off_ends_through_its_signal(
    tmp_path: Path,
) -> None:
    script, log = tmp_path / "server.py", tmp_path / "log.txt"
    script.write_text(WAITING_SERVER)
    with serving_over_http(script, log) as url:
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            cut_off = await cancel_one_call_then_leave_with_another_running(session)
        # Leaving ended the HTTP session with the second call running.
        with pytest.raises(MCPError, match="Connection closed"):
            await asyncio.wait_for(cut_off, WAIT)
        async with mcp.Client(url, mode="legacy", cache=None) as client:
            noted = await client.call_tool("noted_once_aborted", {"count": 2})

    assert noted.structured_content == {"result": CANCELLED_THEN_CUT_OFF}


# ---- over streamable HTTP, in a subprocess ------------------------------------------------


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """One server process for the module's HTTP tests (each grows its own tool names)."""
    with http_server() as url:
        yield url


async def test_over_stdio_a_tools_only_server_answers_resources_prompts_and_log_levels() -> None:
    async with stdio_session() as session:
        resources = await session.list_resources()
        templates = await session.list_resource_templates()
        prompts = await session.list_prompts()
        with pytest.warns(MCPDeprecationWarning):
            level = await session.set_logging_level("debug")

    assert resources.resources == []
    assert templates.resource_templates == []
    assert prompts.prompts == []
    assert level is not None


async def test_over_stdio_reading_a_resource_or_getting_a_prompt_is_invalid_params() -> None:
    async with stdio_session() as session:
        capabilities = session.server_capabilities  # advertised: the lists answer, empty
        with pytest.raises(MCPError) as resource:
            await asyncio.wait_for(session.read_resource("file:///etc/hosts"), WAIT)
        with pytest.raises(MCPError) as prompt:
            await asyncio.wait_for(session.get_prompt("review", {"code": "x"}), WAIT)
        after = await asyncio.wait_for(session.list_tools(), WAIT)  # the session lives on

    assert capabilities is not None
    assert capabilities.resources is not None
    assert capabilities.prompts is not None
    uri = "file:///etc/hosts"
    assert resource.value.error == types.ErrorData(
        code=-32602, message=f"Unknown resource: {uri}", data={"uri": uri}
    )
    assert prompt.value.error == types.ErrorData(code=-32602, message="Unknown prompt: review")
    assert "add" in tools_by_name(after)


async def test_a_2026_client_gets_the_same_invalid_params_for_resources_and_prompts() -> None:
    async with memory_session(toolrail.mcp.server(tr.ToolRegistry()), mode="2026-07-28") as client:
        with pytest.raises(MCPError) as resource:
            await asyncio.wait_for(client.session.read_resource("memo://today"), WAIT)
        with pytest.raises(MCPError) as prompt:
            await asyncio.wait_for(client.session.get_prompt("review"), WAIT)

    assert resource.value.error == types.ErrorData(
        code=-32602, message="Unknown resource: memo://today", data={"uri": "memo://today"}
    )
    assert prompt.value.error == types.ErrorData(code=-32602, message="Unknown prompt: review")


UNENCODABLE = (
    "the result cannot be sent over MCP: it holds text that is not valid Unicode "
    "(a lone surrogate, as os.listdir gives for a file name that is not UTF-8)"
)


def assert_unencodable(result: types.CallToolResult) -> None:
    assert result.is_error
    assert text_of(result) == f"Error: {UNENCODABLE}"
    assert result.meta == {
        "toolrail/error": {"message": UNENCODABLE, "code": "INVALID_TOOL_OUTPUT"}
    }


@pytest.mark.parametrize("transport", [
    pytest.param("stdio", id="over-stdio"),
    pytest.param("http", id="over-streamable-http"),
])
async def test_a_lone_surrogate_in_a_result_is_an_error_and_the_session_lives_on(
    transport: str, request: pytest.FixtureRequest
) -> None:
    if transport == "stdio":
        opened = stdio_session()
    else:
        opened = http_session(request.getfixturevalue("http_url"))
    async with opened as session:
        surrogate = await asyncio.wait_for(session.call_tool("lone_surrogate", {}), WAIT)
        added = await asyncio.wait_for(session.call_tool("add", {"a": 1, "b": 2}), WAIT)

    assert_unencodable(surrogate)
    assert added.structured_content == {"result": 3}


async def test_a_text_result_without_an_output_schema_is_sent_once(http_url: str) -> None:
    async with http_session(http_url) as session:
        text = await asyncio.wait_for(session.call_tool("text", {"size": 3}), WAIT)

    assert text.structured_content is None
    assert [block.model_dump(exclude_none=True) for block in text.content] == [
        {"type": "text", "text": "xxx"}
    ]


async def test_over_streamable_http_tools_list_calls_and_list_changed_work(http_url: str) -> None:
    changes = ListChanges()
    async with http_session(http_url, changes) as session:
        tools = tools_by_name(await session.list_tools())
        added = await session.call_tool("add", {"a": 20, "b": 22})
        await session.call_tool("grow", {"name": "extra_2025"})
        await changes.wait()
        grown = tools_by_name(await session.list_tools())

    assert "add" in tools
    assert "extra_2025" not in tools
    assert added.structured_content == {"result": 42}
    assert "extra_2025" in grown


async def test_over_streamable_http_a_2026_client_listens_and_cancels(http_url: str) -> None:
    async with mcp.Client(http_url, cache=None) as client:
        assert client.protocol_version == "2026-07-28"
        async with client.listen(tools_list_changed=True) as subscription:
            await client.call_tool("grow", {"name": "extra_2026"})
            event = await asyncio.wait_for(anext(aiter(subscription)), WAIT)
        slow = asyncio.ensure_future(client.call_tool("slow", {}))
        await client.call_tool("wait_started", {})
        slow.cancel()  # on this wire: the request's POST is abandoned
        with pytest.raises(asyncio.CancelledError):
            await slow
        outcomes = await client.call_tool("outcomes", {})

    assert type(event).__name__ == "ToolsListChanged"
    assert outcomes.structured_content is not None
    assert "slow:ABORTED" in outcomes.structured_content["result"]


# ---- in memory ----------------------------------------------------------------------------


class Point(BaseModel):
    x: int
    y: int


def demo_registry() -> tr.ToolRegistry:
    registry = tr.ToolRegistry()

    @registry.tool
    def points(n: int) -> list[Point]:
        """The first n points of the diagonal."""
        return [Point(x=i, y=i) for i in range(n)]

    @registry.tool
    def greet(name: str) -> str:
        """Greet someone."""
        return f"hello {name}"

    registry.register(
        raw_tool("raw_object", lambda arguments, context: {"k": [1, 2]}, description="")
    )
    registry.register(raw_tool("raw_text", lambda arguments, context: "plain", description=""))
    registry.register(
        tr.Tool(
            name="picture",
            description="",
            parameters={"type": "object"},
            execute=lambda arguments, context: [
                tr.TextContent("a dot"),
                tr.ImageContent("iVBORw0KGgo=", "image/png"),
            ],
        )
    )
    return registry


async def test_a_wrapped_output_schema_keeps_its_defs_resolvable() -> None:
    async with memory_session(toolrail.mcp.server(demo_registry())) as client:
        tools = tools_by_name(await client.list_tools())
        result = await client.session.call_tool("points", {"n": 2})  # the SDK validates it

    schema = tools["points"].output_schema
    assert schema is not None
    assert schema["properties"]["result"]["items"] == {"$ref": "#/$defs/Point"}
    assert "Point" in schema["$defs"]
    assert result.structured_content == {"result": [{"x": 0, "y": 0}, {"x": 1, "y": 1}]}


async def test_without_an_output_schema_only_object_values_become_structured_content() -> None:
    async with memory_session(toolrail.mcp.server(demo_registry())) as client:
        tools = tools_by_name(await client.list_tools())
        obj = await client.session.call_tool("raw_object", {})
        text = await client.session.call_tool("raw_text", {})

    assert tools["raw_object"].output_schema is None
    assert obj.structured_content == {"k": [1, 2]}
    assert text_of(obj) == '{"k": [1, 2]}'
    assert text.structured_content is None
    assert text_of(text) == "plain"


async def test_image_blocks_cross_as_image_content() -> None:
    async with memory_session(toolrail.mcp.server(demo_registry())) as client:
        result = await client.session.call_tool("picture", {})

    text, image = result.content
    assert isinstance(text, types.TextContent)
    assert text.text == "a dot"
    assert isinstance(image, types.ImageContent)
    assert (image.data, image.mime_type) == ("iVBORw0KGgo=", "image/png")


async def test_a_call_runs_the_full_pipeline_with_the_request_id_as_call_id() -> None:
    registry = demo_registry()
    seen: list[tuple[str, str, str | None]] = []
    registry.on_result(
        lambda execution, result: seen.append(
            (execution.name, execution.call_id, result.error.code if result.error else None)
        )
    )
    registry.guard(lambda execution: "no greeting" if execution.name == "greet" else None)

    async with memory_session(toolrail.mcp.server(registry)) as client:
        denied = await client.session.call_tool("greet", {"name": "Ada"})
        unknown = await client.session.call_tool("nope", {})

    assert text_of(denied) == "Error: no greeting"
    assert (denied.meta or {})["toolrail/error"] == {"message": "no greeting", "code": "DENIED"}
    assert (unknown.meta or {})["toolrail/error"]["code"] == "UNKNOWN_TOOL"
    (greet_name, greet_id, greet_code), (nope_name, nope_id, nope_code) = seen
    assert (greet_name, greet_code, nope_name, nope_code) == (
        "greet",
        "DENIED",
        "nope",
        "UNKNOWN_TOOL",
    )
    assert greet_id.isdigit()
    assert nope_id.isdigit()
    assert greet_id != nope_id


async def test_a_scope_is_served_with_its_own_view_and_its_calls_bound_to_it() -> None:
    registry = demo_registry()
    agent = registry.scope("agent")
    agent.restrict(deny=["picture"])
    agent.register(
        raw_tool(
            "greet",
            lambda arguments, context: f"scope {context.scope}",
            description="The agent's own greeting.",
        )
    )

    async with memory_session(toolrail.mcp.server(registry, scope="agent")) as client:
        tools = tools_by_name(await client.list_tools())
        greeted = await client.session.call_tool("greet", {})

    assert "picture" not in tools
    assert tools["greet"].description == "The agent's own greeting."
    assert text_of(greeted) == "scope agent"


async def test_a_cancelled_request_fires_the_call_signal_and_the_body_stops() -> None:
    registry = tr.ToolRegistry()
    started, stopped = asyncio.Event(), asyncio.Event()
    outcome: list[tr.ToolResult] = []
    registry.on_result(lambda execution, result: outcome.append(result))
    registry.register(waiting_tool(started, stopped))
    async with memory_session(toolrail.mcp.server(registry)) as client:
        call = asyncio.ensure_future(client.session.call_tool("wait", {}))
        await asyncio.wait_for(started.wait(), WAIT)
        call.cancel()
        await asyncio.wait_for(stopped.wait(), WAIT)
        with pytest.raises(asyncio.CancelledError):
            await call
        await client.session.send_ping()  # the server is still serving

    (result,) = outcome
    assert result.error is not None
    assert result.error.code == "ABORTED"


async def test_a_call_that_waits_keeps_its_context_from_first_step_to_last() -> None:
    registry = tr.ToolRegistry()
    current: contextvars.ContextVar[str] = contextvars.ContextVar("current", default="none")
    seen: list[str] = []

    async def around(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        token = current.set(execution.call_id)  # set before the body waits, reset after
        try:
            return await call_next()
        finally:
            current.reset(token)

    async def waits(arguments: tr.JsonValue, context: tr.RunContext) -> str:
        resumed = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(resumed.set_result, None)
        await resumed  # the call waits once: the rest of it runs in a task of its own
        seen.append(current.get())
        return "done"

    registry.around_execute(around)
    registry.register(raw_tool("waits", waits, description=""))
    async with memory_session(toolrail.mcp.server(registry)) as client:
        result = await asyncio.wait_for(client.session.call_tool("waits", {}), WAIT)

    assert text_of(result) == "done"
    assert seen[0].isdigit()
    assert current.get() == "none"


async def test_a_tool_body_runs_in_one_task_from_its_first_step_to_its_last() -> None:
    # A body that enters asyncio.timeout (or an anyio cancel scope, as httpx does) before
    # it first waits must still be in the same task when it leaves it.
    registry = tr.ToolRegistry()
    tasks: list[asyncio.Task[Any] | None] = []

    async def waits(arguments: tr.JsonValue, context: tr.RunContext) -> str:
        tasks.append(asyncio.current_task())
        async with asyncio.timeout(5):
            resumed = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(resumed.set_result, None)
            await resumed
        tasks.append(asyncio.current_task())
        return "done"

    registry.register(raw_tool("waits", waits, description=""))
    async with memory_session(toolrail.mcp.server(registry)) as client:
        result = await asyncio.wait_for(client.session.call_tool("waits", {}), WAIT)

    assert (text_of(result), result.is_error) == ("done", False)
    assert tasks[0] is tasks[1]


class Waiter:
    """A cooperative tool body that waits for its signal, and what the call went through."""

    def __init__(self, registry: tr.ToolRegistry) -> None:
        self.started = asyncio.Event()
        self.ended = asyncio.Event()
        self.tasks: list[asyncio.Task[Any] | None] = []
        self.reasons: list[str | None] = []
        self.codes: list[str | None] = []
        registry.on_result(self.observe)
        registry.register(raw_tool("wait", self.body, description="", cancellation="cooperative"))

    async def body(self, arguments: tr.JsonValue, context: tr.RunContext) -> str:
        self.tasks.append(asyncio.current_task())
        self.started.set()
        await context.signal.wait()  # a CancelledError from outside would end it here
        self.tasks.append(asyncio.current_task())
        self.reasons.append(context.signal.reason)
        return "stopped"

    def observe(self, execution: tr.Execution, result: tr.ToolResult) -> None:
        if execution.name == "wait":
            self.codes.append(result.error.code if result.error is not None else None)
            self.ended.set()

    def saw_one_call_end_through_its_signal(self) -> bool:
        return (
            self.codes == ["ABORTED"]
            and self.reasons == ["cancelled by the MCP client"]
            and len(self.tasks) == 2
            and self.tasks[0] is self.tasks[1]
        )


@pytest.fixture
def holds(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each call was held in its handler's task (rather than run in a task of its own)."""
    seen: list[bool] = []
    hold = toolrail.mcp._server._hold

    def spy(ctx: Any, controller: Any) -> bool:
        held = hold(ctx, controller)
        seen.append(held)
        return held

    monkeypatch.setattr(toolrail.mcp._server, "_hold", spy)
    return seen


class StreamTransport:
    """The server run on memory streams, as a ``Transport`` for ``mcp.Client``: unlike
    ``mcp.Client(server)``, a 2026 client then talks JSON-RPC to it, as over stdio."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.streams = create_client_server_memory_streams()
        self.running: asyncio.Future[None] | None = None

    async def __aenter__(self) -> Any:
        client_side, server_side = await self.streams.__aenter__()
        options = self.app.create_initialization_options()
        self.running = asyncio.ensure_future(self.app.run(*server_side, options))
        return client_side

    async def __aexit__(self, *exc: Any) -> None:
        await self.streams.__aexit__(*exc)  # end of input: the server stops
        assert self.running is not None
        await asyncio.wait_for(self.running, WAIT)


@pytest.mark.parametrize(
    ("connection", "held"),
    [("handshake in memory", True), ("2026 over a stream", True), ("2026 direct", False)],
)
async def test_a_client_cancellation_reaches_the_call_only_as_its_signal(
    connection: str, held: bool, holds: list[bool]
) -> None:
    # Where the SDK's JSON-RPC dispatcher serves it (notifications/cancelled) the call is
    # held in its handler's task; over the 2026 direct dispatch it runs in a task of its own.
    registry = tr.ToolRegistry()
    waiter = Waiter(registry)
    app = toolrail.mcp.server(registry)
    client = {
        "handshake in memory": lambda: mcp.Client(app, mode="legacy", cache=None),
        "2026 over a stream": lambda: mcp.Client(StreamTransport(app), cache=None),
        "2026 direct": lambda: mcp.Client(app, mode="auto", cache=None),
    }[connection]()
    async with client:
        call = asyncio.ensure_future(client.session.call_tool("wait", {}))
        await asyncio.wait_for(waiter.started.wait(), WAIT)
        call.cancel()
        await asyncio.wait_for(waiter.ended.wait(), WAIT)
        with pytest.raises(asyncio.CancelledError):
            await call
        listed = await client.session.list_tools()  # the server is still serving

    assert [tool.name for tool in listed.tools] == ["wait"]
    assert holds == [held]
    assert waiter.saw_one_call_end_through_its_signal()


async def test_a_raising_signal_callback_does_not_break_the_connection(holds: list[bool]) -> None:
    registry = tr.ToolRegistry()
    waiter = Waiter(registry)

    async def around(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        def boom() -> None:
            raise RuntimeError("callback failed")

        execution.signal.add_callback(boom)
        return await call_next()

    registry.around_execute(around)
    async with memory_session(toolrail.mcp.server(registry)) as client:
        call = asyncio.ensure_future(client.session.call_tool("wait", {}))
        await asyncio.wait_for(waiter.started.wait(), WAIT)
        call.cancel()  # fires the signal in the SDK's read loop, callbacks and all
        await asyncio.wait_for(waiter.ended.wait(), WAIT)
        with pytest.raises(asyncio.CancelledError):
            await call
        unknown = await client.session.call_tool("not_there", {})  # still serving

    assert holds == [True, True]
    assert waiter.saw_one_call_end_through_its_signal()
    assert (unknown.meta or {})["toolrail/error"]["code"] == "UNKNOWN_TOOL"


@pytest.mark.parametrize("how", ["end of input", "server cancelled"])
async def test_a_connection_that_ends_mid_call_ends_the_call_through_its_signal(
    how: str, holds: list[bool]
) -> None:
    registry = tr.ToolRegistry()
    waiter = Waiter(registry)
    app = toolrail.mcp.server(registry)
    async with create_client_server_memory_streams() as (client_side, server_side):
        running = asyncio.ensure_future(app.run(*server_side, app.create_initialization_options()))
        async with ClientSession(*client_side) as session:
            await asyncio.wait_for(session.initialize(), WAIT)
            call = asyncio.ensure_future(session.call_tool("wait", {}))
            await asyncio.wait_for(waiter.started.wait(), WAIT)
            if how == "end of input":
                await client_side[1].aclose()
            else:
                running.cancel()
            await asyncio.wait((running,), timeout=WAIT)
            # The server waited for the call: it had ended, observers told, when run() did.
            assert running.done()
            assert waiter.saw_one_call_end_through_its_signal()
            call.cancel()
            await asyncio.wait_for(asyncio.gather(call, return_exceptions=True), WAIT)

    assert holds == [True]


async def test_tools_list_changes_when_a_visible_tool_is_added_replaced_or_removed() -> None:
    registry = tr.ToolRegistry()
    changes = ListChanges()
    first = raw_tool("t", lambda arguments, context: None, description="first")
    async with memory_session(toolrail.mcp.server(registry), changes) as client:
        assert (await client.list_tools()).tools == []
        dispose = registry.register(first)
        await changes.wait()
        listed = tools_by_name(await client.list_tools())
        dispose()
        registry.register(raw_tool("t", lambda arguments, context: None, description="second"))
        await changes.wait()
        relisted = tools_by_name(await client.list_tools())

    assert listed["t"].description == "first"
    assert relisted["t"].description == "second"


async def test_a_2026_client_hears_of_changes_on_its_listen_stream() -> None:
    registry = demo_registry()
    app = toolrail.mcp.server(registry)
    async with memory_session(app, mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed is True
        async with client.listen(tools_list_changed=True) as subscription:
            registry.register(raw_tool("late", lambda arguments, context: "late", description=""))
            event = await asyncio.wait_for(anext(aiter(subscription)), WAIT)
        called = await client.call_tool("late", {})

    assert type(event).__name__ == "ToolsListChanged"
    assert text_of(called) == "late"


async def test_handshake_clients_are_told_the_server_sends_list_changed() -> None:
    async with memory_session(toolrail.mcp.server(tr.ToolRegistry(), name="mine")) as client:
        capabilities = client.server_capabilities
        info = client.server_info

    assert capabilities.tools is not None
    assert capabilities.tools.list_changed is True
    assert info is not None
    assert (info.name, info.version) == ("mine", tr.__version__)


def test_server_takes_a_registry() -> None:
    with pytest.raises(TypeError, match="server\\(\\) takes a ToolRegistry, got str"):
        toolrail.mcp.server("registry")  # type: ignore[arg-type]


def test_the_package_facade_lists_exactly_its_public_names() -> None:
    assert toolrail.mcp.__all__ == [
        "Attachment",
        "Changes",
        "ConnectionFailed",
        "attach",
        "connect",
        "serve_http",
        "serve_stdio",
        "server",
    ]


def test_importing_toolrail_imports_neither_mcp_nor_opentelemetry() -> None:
    probe = (
        "import sys, toolrail, toolrail.otel\n"
        "loaded = sorted(name for name in sys.modules\n"
        "                if name.split('.')[0] in ('mcp', 'mcp_types', 'opentelemetry'))\n"
        "print(loaded)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=WAIT, check=True
    )
    assert done.stdout.strip() == "[]"


# ---- approval over MCP: approver="elicit" --------------------------------------------------


def approval_registry(local_answers: list[str]) -> tr.ToolRegistry:
    """A tool a policy asks approval for, and a registry approver that always rejects."""

    def local(request: tr.ApprovalRequest) -> str:
        local_answers.append(request.tool_name)
        return "rejected"

    registry = tr.ToolRegistry(approver=local)
    registry.pre_execute(lambda execution, call_next: tr.Ask())

    @registry.tool
    def delete(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    return registry


def answering(action: str, asked: list[str]) -> Any:
    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action=action)  # type: ignore[arg-type]

    return elicit


@pytest.mark.parametrize(
    ("action", "text"),
    [
        ("accept", "deleted a.txt"),
        ("decline", 'Error: the user rejected tool "delete"'),
        ("cancel", 'Error: approval for tool "delete" was cancelled'),
    ],
)
async def test_with_approver_elicit_a_call_needing_approval_asks_the_mcp_client(
    action: str, text: str
) -> None:
    local_answers: list[str] = []
    asked: list[str] = []
    registry = approval_registry(local_answers)
    app = toolrail.mcp.server(registry, approver="elicit")
    elicit = answering(action, asked)
    async with mcp.Client(app, mode="legacy", elicitation_callback=elicit) as client:
        result = await asyncio.wait_for(client.call_tool("delete", {"path": "a.txt"}), WAIT)
    local_result = await registry.execute(
        tr.ToolCall(call_id="l1", name="delete", arguments={"path": "b.txt"})
    )

    assert text_of(result) == text
    assert asked == ['Allow tool "delete" with arguments {"path": "a.txt"}?']
    assert local_answers == ["delete"]  # only the call outside MCP asked the registry's
    assert local_result.error is not None
    assert local_result.error.code == "DENIED"


async def test_with_approver_elicit_a_client_without_elicitation_is_unavailable() -> None:
    local_answers: list[str] = []
    app = toolrail.mcp.server(approval_registry(local_answers), approver="elicit")
    async with mcp.Client(app, mode="legacy") as client:
        result = await asyncio.wait_for(client.call_tool("delete", {"path": "a.txt"}), WAIT)

    assert result.is_error
    assert text_of(result) == (
        'Error: tool "delete" requires approval, but no approval channel is available'
    )
    assert result.meta is not None
    assert result.meta["toolrail/error"]["code"] == "DENIED"
    assert local_answers == []


def test_server_takes_only_elicit_as_approver() -> None:
    with pytest.raises(ValueError, match='approver must be "elicit" or None'):
        toolrail.mcp.server(tr.ToolRegistry(), approver="ask")  # type: ignore[arg-type]
