"""An exclusive call runs alone under the frameworks that start a step's calls at once
(the OpenAI Agents SDK's Runner, LangGraph's ToolNode): integrations/_gate.py.

Each step has three calls in this order: a parallel-safe read, an exclusive write, and
another read. Without the gate the framework would run all three together; with it the
first read runs, the write waits for it and then runs alone, and the second read waits
for the write.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import toolrail as tr
from helpers import one_turn, within
from toolrail.integrations._gate import Gate


class Step:
    """Tool bodies that log when they start and wait for the test to let each finish."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.started = {name: asyncio.Event() for name in ("a", "w", "b")}
        self.release = {name: asyncio.Event() for name in ("a", "w", "b")}

    def registry(self) -> tr.ToolRegistry:
        registry = tr.ToolRegistry()

        @registry.tool(concurrency_safe=True)
        async def read(path: str) -> str:
            """Read a file."""
            return await self._run(path)

        @registry.tool
        async def write(path: str) -> str:
            """Write a file."""
            return await self._run(path)

        return registry

    async def _run(self, name: str) -> str:
        self.log.append(f"start {name}")
        self.started[name].set()
        await self.release[name].wait()
        self.log.append(f"end {name}")
        return name

    async def settle(self) -> None:
        for _ in range(50):  # whatever was (wrongly) able to start has had its chance
            await one_turn()

    async def drive(self) -> None:
        """Let the calls through one by one, checking that nothing overlaps the write."""
        await within(self.started["a"].wait(), 30)
        await self.settle()
        assert self.log == ["start a"]  # the write waits for the read before it
        self.release["a"].set()
        await within(self.started["w"].wait(), 30)
        await self.settle()
        assert self.log == ["start a", "end a", "start w"]  # the later read waits for it
        self.release["w"].set()
        await within(self.started["b"].wait(), 30)
        self.release["b"].set()


async def test_the_agents_sdk_runs_an_exclusive_call_alone() -> None:
    pytest.importorskip("agents")
    from test_integrations_openai_agents import Scripted, call, outputs, run

    step = Step()
    model = Scripted([call("a", "read", path="a"), call("w", "write", path="w"),
                      call("b", "read", path="b")])
    running = asyncio.create_task(run(step.registry(), model))
    await step.drive()
    await within(running, 30)
    assert step.log == ["start a", "end a", "start w", "end w", "start b", "end b"]
    assert outputs(model) == {"a": "a", "w": "w", "b": "b"}


async def test_a_langgraph_tool_node_runs_an_exclusive_call_alone() -> None:
    graph_module = pytest.importorskip("langgraph.graph")
    from langchain_core.messages import AIMessage, ToolMessage

    from test_integrations_langchain import tool_call
    from toolrail.integrations.langchain import tool_node

    step = Step()
    graph = graph_module.StateGraph(graph_module.MessagesState)
    graph.add_node("tools", tool_node(step.registry()))
    graph.add_edge(graph_module.START, "tools")
    graph.add_edge("tools", graph_module.END)
    message = AIMessage("", tool_calls=[tool_call("a", "read", path="a"),
                                        tool_call("w", "write", path="w"),
                                        tool_call("b", "read", path="b")])
    running = asyncio.create_task(graph.compile().ainvoke({"messages": [message]}))
    await step.drive()
    state: Any = await within(running, 30)
    assert step.log == ["start a", "end a", "start w", "end w", "start b", "end b"]
    assert [(m.tool_call_id, m.content) for m in state["messages"]
            if isinstance(m, ToolMessage)] == [("a", "a"), ("w", "w"), ("b", "b")]


async def test_parallel_safe_calls_share_the_gate() -> None:
    gate = Gate()
    inside = 0
    both = asyncio.Event()
    release = asyncio.Event()

    async def safe() -> None:
        nonlocal inside
        async with gate.enter(exclusive=False):
            inside += 1
            if inside == 2:
                both.set()
            await release.wait()

    tasks = [asyncio.create_task(safe()) for _ in range(2)]
    await within(both.wait())
    release.set()
    await within(asyncio.gather(*tasks))


async def test_a_call_cancelled_while_it_waits_leaves_the_gate_as_it_was() -> None:
    gate = Gate()
    order: list[str] = []
    release = asyncio.Event()

    async def hold(name: str, exclusive: bool) -> None:
        async with gate.enter(exclusive):
            order.append(name)
            if name == "first":
                await release.wait()

    first = asyncio.create_task(hold("first", False))
    await one_turn()
    writer = asyncio.create_task(hold("writer", True))  # waits for the first
    reader = asyncio.create_task(hold("reader", False))  # waits behind the writer
    await one_turn()
    writer.cancel()
    await asyncio.gather(writer, return_exceptions=True)
    # The writer is gone: the reader it held back goes in beside the first call.
    await within(reader)
    assert order == ["first", "reader"]
    release.set()
    await within(first)
    async with gate.enter(exclusive=True):  # and the gate is free again
        order.append("last")
    assert order == ["first", "reader", "last"]
