"""``toolrail.mcp.attach`` / ``connect``: an MCP server's tools as toolrail tools.

Against real SDK servers: toolrail's own (in memory and as a stdio or HTTP subprocess),
the SDK's high-level ``MCPServer``, and a low-level SDK ``Server`` with awkward names and
content. Waits are bounded; nothing sleeps to synchronize.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import mcp
import pytest
from mcp import types
from mcp.server import MCPServer, Server, ServerRequestContext

import toolrail as tr
import toolrail.mcp
from helpers import raw_tool, waiting_tool
from mcp_fixtures.processes import STDIO_ARGS, http_server
from toolrail.mcp import Attachment, Changes

WAIT = 10


@pytest.fixture
def http_url() -> Iterator[str]:
    with http_server() as url:
        yield url


def call(
    tool: str, call_id: str = "c1", /, *, signal: tr.CancelSignal | None = None, **arguments: Any
) -> tr.ToolCall:
    return tr.ToolCall(call_id=call_id, name=tool, arguments=arguments, signal=signal)


def until(registry: tr.ToolRegistry, condition: Callable[[], bool]) -> asyncio.Event:
    """An event set once ``condition()`` holds after some registry change."""
    reached = asyncio.Event()
    registry.on_change(lambda: reached.set() if condition() else None)
    return reached


def remote_registry() -> tr.ToolRegistry:
    registry = tr.ToolRegistry()

    @registry.tool(annotations={"readOnlyHint": True, "title": "Adder"})
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @registry.tool
    def pair(a: int, b: int) -> dict[str, int]:
        """Both numbers, by name."""
        return {"a": a, "b": b}

    @registry.tool
    def fail(reason: str) -> str:
        """Always fails."""
        raise tr.ToolError(reason, code="NOPE")

    return registry


@asynccontextmanager
async def attached(
    app: Any,
    target: tr.ToolRegistry | tr.Scope | None = None,
    *,
    mode: str = "legacy",
    **options: Any,
) -> AsyncIterator[tuple[tr.ToolRegistry | tr.Scope, Attachment]]:
    local = tr.ToolRegistry() if target is None else target
    async with mcp.Client(app, mode=mode, cache=None) as client:
        handle = await toolrail.mcp.attach(local, client.session, **options)
        with handle:
            yield local, handle


# ---- attach, against toolrail's own server in memory --------------------------------------


async def test_attach_registers_every_remote_tool_with_its_schemas_and_hints() -> None:
    async with attached(toolrail.mcp.server(remote_registry())) as (local, handle):
        assert handle.names == {"add": "add", "fail": "fail", "pair": "pair"}
        add = local.get("add")
        pair = local.get("pair")
        schemas = {schema.name: schema.to_dict() for schema in local.schemas()}

    assert add is not None
    assert pair is not None
    remote = remote_registry()
    assert schemas == {schema.name: schema.to_dict() for schema in remote.schemas()}
    assert add.output_schema == {"type": "integer"}
    assert add.annotations == {"title": "Adder", "readOnlyHint": True}
    assert add.concurrency_safe is True
    assert pair.output_schema == tr.thaw(tr.snapshot_json(remote.get("pair").output_schema))  # type: ignore[union-attr]
    assert pair.concurrency_safe is False
    assert "MCP tool 'add'" in repr(add.execute)


async def test_calls_come_back_as_values_content_and_errors() -> None:
    async with attached(toolrail.mcp.server(remote_registry())) as (local, _):
        added = await local.execute(call("add", a=2, b=3))
        paired = await local.execute(call("pair", a=1, b=2))
        failed = await local.execute(call("fail", reason="no way"))
        bad = await local.execute(call("add", a="two", b=1))
        raw = await local.execute(tr.ToolCall.from_json("c2", "add", "{not json"))

    assert (added.value, added.text) == (5, "5")
    assert paired.value == {"a": 1, "b": 2}
    assert failed.error == tr.ErrorInfo("no way", "NOPE", "ToolError")
    assert failed.text == "Error: no way"
    assert bad.error is not None
    assert bad.error.code == "INVALID_ARGS"
    assert raw.error == tr.ErrorInfo(
        'invalid arguments: "arguments" must be an object', "INVALID_ARGS", "ToolArgsError"
    )


async def test_refresh_adds_new_tools_replaces_changed_ones_and_removes_gone_ones() -> None:
    remote = remote_registry()
    async with attached(toolrail.mcp.server(remote)) as (local, handle):
        assert await handle.refresh() == Changes()
        remote.register(raw_tool("late", lambda arguments, context: "late", description=""))
        dispose = remote.register(raw_tool("gone", lambda arguments, context: None, description=""))
        assert await handle.refresh() == Changes(added=("gone", "late"))
        dispose()
        assert await handle.refresh() == Changes(removed=("gone",))
        late = await local.execute(call("late"))
        assert local.get("gone") is None

    assert (late.text, late.value) == ("late", "late")


async def test_a_changed_remote_tool_is_replaced_under_the_same_local_name() -> None:
    remote = tr.ToolRegistry()
    first = remote.register(raw_tool("t", lambda arguments, context: 1, description="first"))
    async with attached(toolrail.mcp.server(remote), prefix="r.") as (local, handle):
        old = local.get("r.t")
        first()
        remote.register(raw_tool("t", lambda arguments, context: "two", description="second"))
        changes = await handle.refresh()
        new = local.get("r.t")
        result = await local.execute(call("r.t"))

    assert changes == Changes(replaced=("r.t",))
    assert old is not None
    assert new is not None
    assert new is not old
    assert new.description == "second"
    assert result.value == "two"


async def test_disposal_removes_every_tool_and_later_refreshes_do_nothing() -> None:
    local = tr.ToolRegistry()
    async with mcp.Client(toolrail.mcp.server(remote_registry()), mode="legacy") as client:
        handle = await toolrail.mcp.attach(local, client.session)
        assert len(local.schemas()) == 3
        handle()
        assert local.schemas() == []
        assert handle.closed is True
        assert await handle.refresh() == Changes()
        handle.close()

    assert local.schemas() == []
    assert repr(handle) == "<toolrail.mcp.Attachment closed>"


async def test_attach_into_a_scope_registers_scoped_tools() -> None:
    local = tr.ToolRegistry()
    agent = local.scope("agent")
    async with attached(toolrail.mcp.server(remote_registry()), agent) as _:
        assert local.get("add") is None
        assert local.get("add", "agent") is not None
        result = await agent.execute(call("add", a=1, b=1))
    assert local.get("add", "agent") is None
    assert result.value == 2


async def test_a_name_taken_in_the_registry_fails_attach_and_leaves_nothing_behind() -> None:
    local = tr.ToolRegistry()
    local.register(raw_tool("fail", lambda arguments, context: None, description="mine"))
    async with mcp.Client(toolrail.mcp.server(remote_registry()), mode="legacy") as client:
        with pytest.raises(ValueError, match='tool "fail" is already registered'):
            await toolrail.mcp.attach(local, client.session)

    assert [schema.name for schema in local.schemas()] == ["fail"]


async def test_a_cancelled_local_call_cancels_the_remote_request_and_stops_its_body() -> None:
    remote = tr.ToolRegistry()
    started, stopped = asyncio.Event(), asyncio.Event()
    remote_codes: list[str | None] = []
    remote.on_result(
        lambda execution, result: remote_codes.append(result.error.code if result.error else None)
    )
    remote.register(waiting_tool(started, stopped))
    controller = tr.CancelController()
    async with attached(toolrail.mcp.server(remote)) as (local, _):
        running = asyncio.ensure_future(local.execute(call("wait", signal=controller.signal)))
        await asyncio.wait_for(started.wait(), WAIT)
        controller.cancel()
        result = await asyncio.wait_for(running, WAIT)
        await asyncio.wait_for(stopped.wait(), WAIT)
        assert await local.execute(call("wait", "c2", signal=controller.signal)) is not None

    assert result.error is not None
    assert result.error.code == "ABORTED"
    assert remote_codes[0] == "ABORTED"


# ---- attach, against the SDK's own servers ------------------------------------------------


def sdk_server() -> MCPServer:
    app = MCPServer("sdk")

    @app.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @app.tool()
    def explode() -> str:
        """Always raises."""
        raise ValueError("kaboom")

    return app


async def test_an_sdk_servers_wrapped_results_come_back_unwrapped() -> None:
    async with attached(sdk_server()) as (local, _):
        add = local.get("add")
        added = await local.execute(call("add", a=20, b=22))
        exploded = await local.execute(call("explode"))

    assert add is not None
    assert add.output_schema is not None
    assert add.output_schema["type"] == "integer"
    assert added.value == 42
    assert exploded.is_error
    assert exploded.error is not None
    assert exploded.error.code == "TOOL_ERROR"
    assert exploded.text == "Error: Error executing tool explode"


LONG = "x" * 200


def odd_server(calls: list[str]) -> Server[Any]:
    """A low-level SDK server with names the registry rejects and every kind of content."""
    tools = [
        types.Tool(
            name="a b", input_schema={"type": "object", "properties": {"q": {"type": "string"}}}
        ),
        types.Tool(name="a_b", input_schema={"type": "object"}),
        types.Tool(name=LONG, input_schema={"type": "object"}),
        types.Tool(name="café/menu", input_schema={"type": "object"}),
    ]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        calls.append(params.name)
        return types.CallToolResult(
            content=[
                types.TextContent(text=params.name),
                types.AudioContent(data="AAAA", mime_type="audio/wav"),
                types.ResourceLink(name="doc", uri="file:///doc.txt"),
                types.EmbeddedResource(
                    resource=types.TextResourceContents(uri="file:///a", text="embedded")
                ),
            ]
        )

    return Server("odd", on_list_tools=list_tools, on_call_tool=call_tool)


def short_hash(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:8]


async def test_names_the_registry_rejects_are_mapped_and_calls_use_the_remote_name() -> None:
    calls: list[str] = []
    async with attached(odd_server(calls), mode="auto") as (local, handle):  # 2026-07-28
        names = handle.names
        results = {name: await local.execute(call(name)) for name in names}
        a_b = local.get("a_b")
        hashed = local.get(f"a_b_{short_hash('a b')}")

    assert names == {
        "a_b": "a_b",
        f"a_b_{short_hash('a b')}": "a b",
        f"{'x' * 119}_{short_hash(LONG)}": LONG,
        "caf__menu": "café/menu",
    }
    assert sorted(calls) == sorted(names.values())
    assert all(len(name) <= 128 for name in names)
    assert hashed is not None
    assert hashed.parameters["properties"] == {"q": {"type": "string"}}
    assert a_b is not None
    assert a_b.annotations is None
    assert results["caf__menu"].content == (
        tr.TextContent("café/menu"),
        tr.TextContent("[audio content]"),
        tr.TextContent("[resource: file:///doc.txt]"),
        tr.TextContent("embedded"),
    )
    assert results["caf__menu"].value is None


async def test_a_prefix_goes_in_front_of_every_local_name() -> None:
    async with attached(odd_server([]), prefix="odd.") as (_, handle):
        names = handle.names

    assert set(names) == {
        "odd.a_b",
        f"odd.a_b_{short_hash('a b')}",
        f"odd.{'x' * 115}_{short_hash(LONG)}",
        "odd.caf__menu",
    }


class ListingOnly:
    """A stand-in session whose listing the SDK's own validation would not let through."""

    async def list_tools(
        self, *, params: types.PaginatedRequestParams | None = None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name="untyped", input_schema={"properties": {"q": {"type": "string"}}})
            ]
        )


async def test_an_input_schema_without_a_type_reads_as_an_object_schema() -> None:
    local = tr.ToolRegistry()
    with await toolrail.mcp.attach(local, ListingOnly()):  # type: ignore[arg-type]
        tool = local.get("untyped")

    assert tool is not None
    assert tool.parameters == {"type": "object", "properties": {"q": {"type": "string"}}}


def test_attach_and_connect_check_their_arguments_at_once() -> None:
    registry = tr.ToolRegistry()
    with pytest.raises(TypeError, match="takes a ToolRegistry or a Scope, got dict"):
        toolrail.mcp.connect({}, server=sdk_server())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="invalid prefix 'a b'"):
        toolrail.mcp.connect(registry, server=sdk_server(), prefix="a b")
    with pytest.raises(ValueError, match="exactly one of command=, url= and server="):
        toolrail.mcp.connect(registry)
    with pytest.raises(ValueError, match="exactly one of"):
        toolrail.mcp.connect(registry, command="x", url="http://127.0.0.1:1/mcp")
    with pytest.raises(ValueError, match="args=, env= and cwd= go with command="):
        toolrail.mcp.connect(registry, url="http://127.0.0.1:1/mcp", args=["-v"])
    with pytest.raises(ValueError, match="headers= goes with url="):
        toolrail.mcp.connect(registry, command="x", headers={"a": "b"})


# ---- connect -------------------------------------------------------------------------------


async def test_connect_re_syncs_on_list_changed_and_removes_the_tools_on_exit() -> None:
    remote = remote_registry()
    local = tr.ToolRegistry()
    arrived = until(local, lambda: local.get("late") is not None)
    async with toolrail.mcp.connect(local, server=toolrail.mcp.server(remote)) as handle:
        assert set(handle.names) == {"add", "fail", "pair"}
        remote.register(raw_tool("late", lambda arguments, context: "late", description=""))
        await asyncio.wait_for(arrived.wait(), WAIT)
        result = await local.execute(call("late"))

    assert result.value == "late"
    assert local.schemas() == []


def stdio_options() -> dict[str, Any]:
    return {"command": sys.executable, "args": STDIO_ARGS}


async def test_connect_over_stdio_calls_tools_and_follows_the_servers_changes() -> None:
    local = tr.ToolRegistry()
    grown = until(local, lambda: local.get("extra") is not None)
    async with toolrail.mcp.connect(local, **stdio_options()) as handle:
        stats = await local.execute(call("stats", values=[1, 2]))
        failed = await local.execute(call("fail", reason="nope"))
        await local.execute(call("grow", name="extra"))
        await asyncio.wait_for(grown.wait(), WAIT)
        extra = await local.execute(call("extra"))
        names = set(handle.names)

    assert stats.value == {"count": 2, "total": 3.0}
    assert failed.error == tr.ErrorInfo("nope", "NOPE", "ToolError")
    assert extra.value == "extra"
    assert {"add", "stats", "extra"} <= names
    assert local.schemas() == []


async def test_over_stdio_a_cancelled_call_stops_the_remote_body() -> None:
    local = tr.ToolRegistry()
    controller = tr.CancelController()
    async with toolrail.mcp.connect(local, **stdio_options()):
        slow = asyncio.ensure_future(local.execute(call("slow", signal=controller.signal)))
        await local.execute(call("wait_started", "c2"))
        controller.cancel()
        aborted = await asyncio.wait_for(slow, WAIT)
        outcomes = await local.execute(call("outcomes", "c3"))

    assert aborted.error is not None
    assert aborted.error.code == "ABORTED"
    assert isinstance(outcomes.value, tuple)
    assert "slow:ABORTED" in outcomes.value


async def test_connect_over_streamable_http_with_headers(http_url: str) -> None:
    local = tr.ToolRegistry()
    async with toolrail.mcp.connect(
        local, url=http_url, headers={"X-Trace": "1"}, tool_timeout=30
    ) as handle:
        added = await local.execute(call("add", a=1, b=2))
        add = local.get("add")
        names = handle.names

    assert "add" in names
    assert added.value == 3
    assert add is not None
    assert add.timeout == 30


# ---- arguments checked against inputSchema before the round trip -------------------------


def strict_server(calls: list[dict[str, Any]]) -> Server[Any]:
    """A low-level SDK server that checks nothing itself and refuses ``q == "bad"``."""
    schema = {
        "type": "object",
        "properties": {
            "q": {"type": "string"},
            "n": {"type": "array", "items": {"type": "integer"}},
        },
        "required": ["q"],
        "additionalProperties": False,
    }

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="find", input_schema=schema)])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        calls.append(dict(params.arguments or {}))
        bad = (params.arguments or {}).get("q") == "bad"
        return types.CallToolResult(
            content=[types.TextContent(text="nope" if bad else "ok")], is_error=bad
        )

    return Server("strict", on_list_tools=list_tools, on_call_tool=call_tool)


async def test_arguments_the_input_schema_rejects_are_invalid_args_and_never_sent() -> None:
    calls: list[dict[str, Any]] = []
    async with attached(strict_server(calls)) as (local, _):
        wrong_type = await local.execute(call("find", q=1))
        missing = await local.execute(call("find", n=[1]))
        extra = await local.execute(call("find", q="x", z=1))
        deep = await local.execute(call("find", q="x", n=[1, "two"]))
        refused = await local.execute(call("find", q="bad"))
        fine = await local.execute(call("find", q="x", n=[1, 2]))

    assert wrong_type.error == tr.ErrorInfo(
        "invalid arguments: \"q\": 1 is not of type 'string'", "INVALID_ARGS", "ToolArgsError"
    )
    assert missing.error is not None
    assert missing.error.message == 'invalid arguments: missing required property "q"'
    assert extra.error is not None
    assert extra.error.message == 'invalid arguments: unexpected property "z"'
    assert deep.error is not None
    assert deep.error.message == "invalid arguments: \"n[1]\": 'two' is not of type 'integer'"
    assert refused.error == tr.ErrorInfo("nope", "TOOL_ERROR", "ToolError")  # the server's own
    assert fine.value == "ok"
    assert calls == [{"q": "bad"}, {"q": "x", "n": [1, 2]}]


async def test_over_stdio_bad_arguments_are_invalid_args_before_the_round_trip() -> None:
    local = tr.ToolRegistry()
    async with toolrail.mcp.connect(local, **stdio_options()):
        bad = await local.execute(call("add", a="two", b=1))
        added = await local.execute(call("add", "c2", a=2, b=1))

    assert bad.error == tr.ErrorInfo(
        "invalid arguments: \"a\": 'two' is not of type 'integer'", "INVALID_ARGS", "ToolArgsError"
    )
    assert added.value == 3


# ---- progress, both ways ------------------------------------------------------------------


def progress_registry() -> tr.ToolRegistry:
    registry = tr.ToolRegistry()

    async def index(arguments: Any, ctx: tr.RunContext) -> str:
        for done in range(1, 4):
            ctx.report_progress(done, 3, f"file {done}")
            await asyncio.sleep(0)
        return "indexed"

    registry.register(tr.Tool(name="index", description="Index files.",
                              parameters={"type": "object"}, execute=index))
    return registry


async def test_a_served_tools_progress_reaches_the_sdk_clients_progress_callback() -> None:
    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    async with mcp.Client(toolrail.mcp.server(progress_registry()), mode="legacy",
                          cache=None) as client:
        result = await client.session.call_tool("index", {}, progress_callback=on_progress)
    assert [block.text for block in result.content] == ["indexed"]  # type: ignore[union-attr]
    assert heard == [(1.0, 3.0, "file 1"), (2.0, 3.0, "file 2"), (3.0, 3.0, "file 3")]


@pytest.mark.parametrize("servers", [1, 2], ids=["one server", "two servers"])
async def test_concurrent_served_calls_each_hear_only_their_own_progress(servers: int) -> None:
    from toolrail._core.chains import PROGRESS

    registry = tr.ToolRegistry()
    reported = {"a": asyncio.Event(), "b": asyncio.Event()}
    both = asyncio.Event()

    async def step(arguments: Any, ctx: tr.RunContext) -> str:
        name = str(arguments["name"])
        ctx.report_progress(1, 2, f"{name} 1")
        reported[name].set()
        await both.wait()  # both calls are in flight, each reporting while the other runs
        ctx.report_progress(2, 2, f"{name} 2")
        return name

    registry.register(tr.Tool(name="step", description="Step.", parameters={"type": "object"},
                              execute=step, concurrency_safe=True))
    heard: dict[str, list[str | None]] = {"a": [], "b": []}

    def listener(name: str) -> Any:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            heard[name].append(message)
        return on_progress

    made = [toolrail.mcp.server(registry) for _ in range(servers)]
    async with mcp.Client(made[0], mode="legacy", cache=None) as first, \
            mcp.Client(made[-1], mode="legacy", cache=None) as second:
        calls = [asyncio.create_task(client.session.call_tool(
            "step", {"name": name}, progress_callback=listener(name)))
            for client, name in ((first, "a"), (second, "b"))]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in reported.values())), WAIT)
        # One registry listener per server serves every tracked call it has in flight.
        assert len(registry._core.chains._links[PROGRESS]) == servers
        both.set()
        await asyncio.wait_for(asyncio.gather(*calls), WAIT)
    assert heard == {"a": ["a 1", "a 2"], "b": ["b 1", "b 2"]}
    assert registry._core.chains._links[PROGRESS] == []  # and it is gone with the last


async def test_an_attached_tools_remote_progress_arrives_as_report_progress_locally() -> None:
    async with attached(toolrail.mcp.server(progress_registry())) as (local, _):
        assert isinstance(local, tr.ToolRegistry)
        heard: list[str] = []
        local.on_progress(lambda execution, report: heard.append(
            f"{execution.name} {report.progress:g}/{report.total:g} {report.message}"))
        result = await local.execute(call("index"))
    assert result.text == "indexed"
    assert heard == ["index 1/3 file 1", "index 2/3 file 2", "index 3/3 file 3"]
