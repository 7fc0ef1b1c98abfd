"""toolrail under LangChain and LangGraph: tools driven by LangChain's fake chat models."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage

import toolrail as tr
from helpers import CAT_PNG, looking_registry, registry_with_policy, until, within
from toolrail.integrations.langchain import ToolrailTool, tool_node, tools


def fake_model(*messages: AIMessage) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([*messages, AIMessage("done")]))


def tool_call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "args": args}


async def agent_loop(model: GenericFakeChatModel, by_name: dict[str, ToolrailTool]) -> list[Any]:
    """The loop a LangChain user writes: ask the model, run its calls together, repeat."""
    messages: list[Any] = [HumanMessage("go")]
    while True:
        reply = await model.ainvoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return messages
        messages += await asyncio.gather(
            *(by_name[c["name"]].ainvoke({**c, "type": "tool_call"}) for c in reply.tool_calls)
        )


def test_tools_carry_the_scopes_schemas() -> None:
    registry = tr.ToolRegistry()
    registry.register(tr.tool(lambda text: text, name="echo", description="Echo."))
    with registry.scope("s") as scope:
        scope.restrict(allow=[])
        assert tools(registry, scope="s") == []
    [echo] = tools(registry)
    assert (echo.name, echo.description) == ("echo", "Echo.")
    assert echo.args_schema == tr.thaw(registry.schemas()[0].parameters)


async def test_a_tool_call_becomes_a_tool_message_with_the_result_as_artifact() -> None:
    registry = tr.ToolRegistry()

    @registry.tool
    def square(n: int, ctx: tr.RunContext) -> str:
        """Square."""
        return f"{ctx.call_id}: {n * n}"

    [square_tool] = tools(registry)
    ok = await square_tool.ainvoke(tool_call("c1", "square", n=3))
    bad = await square_tool.ainvoke(tool_call("c2", "square", n="x"))
    assert isinstance(ok, ToolMessage)
    assert (ok.content, ok.status, ok.tool_call_id, ok.artifact.value) == (
        "c1: 9", "success", "c1", "c1: 9")
    assert isinstance(bad, ToolMessage)
    assert bad.status == "error"
    assert bad.artifact.error.code == "INVALID_ARGS"
    assert (await square_tool.ainvoke({"n": 2})).endswith(": 4")  # plain input: content only
    with pytest.raises(NotImplementedError):
        square_tool.invoke({"n": 2})


async def test_a_fake_model_loop_runs_calls_in_parallel_with_approval_and_guard() -> None:
    approved: list[str] = []
    registry = registry_with_policy(approved)
    started = {"a": asyncio.Event(), "b": asyncio.Event()}

    @registry.tool(concurrency_safe=True)
    async def meet(me: str, other: str) -> str:
        """Wait for the other call to start."""
        started[me].set()
        await until(started[other])
        return f"{me} met {other}"

    model = fake_model(
        AIMessage("", tool_calls=[tool_call("m1", "meet", me="a", other="b"),
                                  tool_call("m2", "meet", me="b", other="a")]),
        AIMessage("", tool_calls=[tool_call("w", "write", path="a.txt"),
                                  tool_call("d", "delete", path="b.txt")]),
    )
    messages = await within(agent_loop(model, {t.name: t for t in tools(registry)}))
    results = {m.tool_call_id: (m.status, m.content) for m in messages
               if isinstance(m, ToolMessage)}
    assert results == {
        "m1": ("success", "a met b"), "m2": ("success", "b met a"),
        "w": ("success", "wrote a.txt"), "d": ("error", "Error: deleting is not allowed"),
    }
    assert approved == ["w"]


async def test_images_and_contexts_become_standard_content_blocks() -> None:
    registry = looking_registry()

    message = await tools(registry)[0].ainvoke(tool_call("l", "look"))
    assert message.content == [
        {"type": "text", "text": "a cat"},
        {"type": "image", "base64": CAT_PNG, "mime_type": "image/png"},
        {"type": "text", "text": "remember the cat"},
    ]


async def test_a_langgraph_tool_node_runs_the_calls_through_the_registry() -> None:
    graph_module = pytest.importorskip("langgraph.graph")
    approved: list[str] = []
    registry = registry_with_policy(approved)
    model = fake_model(AIMessage("", tool_calls=[tool_call("w", "write", path="a.txt"),
                                                 tool_call("d", "delete", path="b.txt")]))

    async def think(state: dict[str, list[AnyMessage]]) -> dict[str, list[AnyMessage]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    def route(state: dict[str, list[AnyMessage]]) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else graph_module.END

    graph = graph_module.StateGraph(graph_module.MessagesState)
    graph.add_node("model", think)
    graph.add_node("tools", tool_node(registry))
    graph.add_edge(graph_module.START, "model")
    graph.add_conditional_edges("model", route)
    graph.add_edge("tools", "model")
    state = await within(graph.compile().ainvoke({"messages": [HumanMessage("go")]}))
    results = {m.tool_call_id: (m.status, m.content) for m in state["messages"]
               if isinstance(m, ToolMessage)}
    assert results == {"w": ("success", "wrote a.txt"),
                       "d": ("error", "Error: deleting is not allowed")}
    assert approved == ["w"]
    assert state["messages"][-1].content == "done"


def test_an_error_result_that_shows_nothing_reads_error_and_its_message() -> None:
    from toolrail.integrations.langchain import content_of

    result = tr.ToolResult((), True, error=tr.ErrorInfo("boom"))
    assert content_of(result) == "Error: boom"
