"""toolrail under pydantic-ai: an agent driven by pydantic-ai's own FunctionModel."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import toolrail as tr
from helpers import looking_registry, one_turn, until, within
from toolrail.integrations.pydantic_ai import ToolrailToolset

Step = Sequence[ToolCallPart]


def scripted(*steps: Step, seen: list[AgentInfo] | None = None) -> FunctionModel:
    """A model that answers request n with steps[n]'s calls, then with text."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if seen is not None:
            seen.append(info)
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn < len(steps):
            return ModelResponse(parts=list(steps[turn]))
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def call(name: str, call_id: str, **args: object) -> ToolCallPart:
    return ToolCallPart(name, dict(args), tool_call_id=call_id)


def returns(messages: list[ModelMessage]) -> dict[str, ToolReturnPart]:
    return {
        part.tool_call_id: part
        for message in messages if isinstance(message, ModelRequest)
        for part in message.parts if isinstance(part, ToolReturnPart)
    }


def agent_over(registry: tr.ToolRegistry, model: FunctionModel,
               scope: str | None = None) -> Agent[None, str]:
    return Agent(model, toolsets=[ToolrailToolset(registry, scope=scope)])


async def test_tool_definitions_are_the_scopes_schemas_and_follow_changes() -> None:
    registry = tr.ToolRegistry()

    @registry.tool
    def shared(text: str) -> str:
        """Shared by all."""
        return text

    scope = registry.scope("a")
    seen: list[AgentInfo] = []

    def add_later(ctx: tr.RunContext) -> str:
        """Registers another tool."""
        scope.register(tr.tool(lambda: "new", name="later", description="Added later."))
        return "ok"

    scope.register(tr.tool(add_later, name="add_later"))
    agent = agent_over(registry, scripted([call("add_later", "c1")], seen=seen), scope="a")
    await agent.run("go")
    first, second = ({t.name for t in info.function_tools} for info in seen[:2])
    assert first == {"add_later", "shared"}
    assert second == {"add_later", "later", "shared"}
    assert seen[0].function_tools[1].description == "Shared by all."


async def test_parallel_calls_overlap_and_keep_pydantic_ai_call_ids() -> None:
    registry = tr.ToolRegistry()
    started = {"a": asyncio.Event(), "b": asyncio.Event()}
    ids: list[str] = []

    @registry.tool(concurrency_safe=True)
    async def meet(me: str, other: str, ctx: tr.RunContext) -> str:
        """Wait for the other call to start."""
        ids.append(ctx.call_id)
        started[me].set()
        await until(started[other])
        return f"{me} met {other}"

    model = scripted(
        [call("meet", "id-a", me="a", other="b"), call("meet", "id-b", me="b", other="a")]
    )
    result = await within(agent_over(registry, model).run("go"))
    parts = returns(result.all_messages())
    assert parts["id-a"].content == "a met b"
    assert parts["id-b"].content == "b met a"
    assert sorted(ids) == ["id-a", "id-b"]


async def test_an_exclusive_tool_is_a_sequential_barrier() -> None:
    registry = tr.ToolRegistry()
    order: list[str] = []

    @registry.tool
    async def write(n: int) -> str:
        """Exclusive."""
        order.append(f"start {n}")
        await one_turn()
        order.append(f"end {n}")
        return "ok"

    model = scripted([call("write", "w1", n=1), call("write", "w2", n=2)])
    await within(agent_over(registry, model).run("go"))
    assert order == ["start 1", "end 1", "start 2", "end 2"]


async def test_an_ask_goes_to_the_registrys_approver() -> None:
    requests: list[tr.ApprovalRequest] = []

    def approver(request: tr.ApprovalRequest) -> tr.ApprovalOutcome:
        requests.append(request)
        assert isinstance(request.arguments, tr.FrozenDict)
        allowed = request.arguments["path"] == "ok.txt"
        return tr.ApprovalOutcome.ALLOWED_ONCE if allowed else tr.ApprovalOutcome.REJECTED

    registry = tr.ToolRegistry(approver=approver)

    @registry.tool
    def write(path: str) -> str:
        """Write a file."""
        return f"wrote {path}"

    registry.pre_execute(lambda e, call_next: tr.Ask("writes need approval")
                         if e.name == "write" else call_next())
    model = scripted([call("write", "w1", path="ok.txt"), call("write", "w2", path="no.txt")])
    result = await within(agent_over(registry, model).run("go"))
    parts = returns(result.all_messages())
    assert parts["w1"].content == "wrote ok.txt"
    assert parts["w2"].outcome == "failed"
    assert parts["w2"].content == 'Error: the user rejected tool "write"'
    assert [(r.call_id, r.reason) for r in requests] == [
        ("w1", "writes need approval"), ("w2", "writes need approval")
    ]


async def test_a_guard_denial_is_fed_back_as_a_failed_tool_return() -> None:
    registry = tr.ToolRegistry()
    ran: list[str] = []

    @registry.tool
    def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "deleted"

    registry.guard(lambda e: "deleting is not allowed" if e.name == "delete" else None)
    model = scripted([call("delete", "d1", path="x")])
    result = await within(agent_over(registry, model).run("go"))
    part = returns(result.all_messages())["d1"]
    assert (part.outcome, part.content) == ("failed", "Error: deleting is not allowed")
    assert ran == []
    assert result.output == "done"


async def test_invalid_arguments_spend_pydantic_ais_retry_budget() -> None:
    registry = tr.ToolRegistry()

    @registry.tool
    def square(n: int) -> int:
        """Square."""
        return n * n

    model = scripted([call("square", "s1", n="x")], [call("square", "s2", n=3)])
    result = await within(agent_over(registry, model).run("go"))
    parts = returns(result.all_messages())
    assert parts["s1"].outcome == "retried"
    assert parts["s2"].content == "9"


async def test_images_and_contexts_map_to_pydantic_ai_content() -> None:
    registry = looking_registry()
    result = await within(agent_over(registry, scripted([call("look", "l1")])).run("go"))
    messages = result.all_messages()
    content: Any = returns(messages)["l1"].content
    assert content[0] == "a cat"
    assert content[1].data == b"\x89PNG"
    assert content[1].media_type == "image/png"
    prompts = [part.content for m in messages if isinstance(m, ModelRequest)
               for part in m.parts if isinstance(part, UserPromptPart)]
    assert ["remember the cat"] in prompts


async def test_cancelling_the_run_waits_for_the_started_body() -> None:
    registry = tr.ToolRegistry()
    started, finished = asyncio.Event(), asyncio.Event()
    seen: list[str] = []

    @registry.tool
    async def slow() -> str:
        """Slow."""
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        finally:
            finished.set()
        return "never"

    run = asyncio.create_task(agent_over(registry, scripted([call("slow", "s1")])).run("go"))
    await until(started)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(run)
    assert finished.is_set()
    assert seen == ["cancelled"]


async def test_a_scope_handle_serves_its_own_view_and_close_stops_listening() -> None:
    registry = tr.ToolRegistry()
    registry.register(tr.tool(lambda: "g", name="global_tool", description="Global."))
    seen: list[AgentInfo] = []
    with registry.scope("s") as scope:
        scope.restrict(allow=[])
        scope.register(tr.tool(lambda: "mine", name="mine", description="Mine."))
        toolset = ToolrailToolset(scope)
        agent = Agent(scripted([call("mine", "m1")], seen=seen), toolsets=[toolset])
        result = await within(agent.run("go"))
        assert returns(result.all_messages())["m1"].content == "mine"
        assert [t.name for t in seen[0].function_tools] == ["mine"]
        toolset.close()
        scope.register(tr.tool(lambda: "late", name="late", description="Late."))
        seen.clear()
        await within(Agent(scripted(seen=seen), toolsets=[toolset]).run("go"))
        assert [t.name for t in seen[0].function_tools] == ["late", "mine"]
