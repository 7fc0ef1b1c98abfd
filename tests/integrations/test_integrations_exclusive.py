"""An exclusive call runs alone under every framework, as under toolrail's scheduler.

One step of ``[delete, search, delete]`` (``delete`` exclusive, ``search`` parallel-safe)
through the Agents SDK's Runner, a LangGraph graph and pydantic-ai: each body records
who is inside when it starts and stays in until the test lets it out, a few loop turns
after it started, so a call that could overlap it has had its chance to start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

import toolrail as tr
from helpers import one_turn, until, within
from toolrail.integrations._gate import Gate, gated, open_gates

TURNS = 30  # loop turns a call stays in: far more than any framework needs to start one


class Probe:
    """Bodies that stay in until let out; who was inside when each one started."""

    def __init__(self) -> None:
        self.inside: set[str] = set()
        self.seen: list[tuple[str, frozenset[str]]] = []
        self.started: dict[str, asyncio.Event] = {}
        self.leave: dict[str, asyncio.Event] = {}

    async def stay(self, me: str) -> None:
        self.seen.append((me, frozenset(self.inside)))
        self.inside.add(me)
        self._event(self.started, me).set()
        await until(self._event(self.leave, me))
        self.inside.discard(me)

    async def let_out(self, *order: str) -> None:
        """Let each call out in turn, once it started and had company's chance to start."""
        for me in order:
            await until(self._event(self.started, me))
            for _ in range(TURNS):
                await one_turn()
            self._event(self.leave, me).set()

    @staticmethod
    def _event(events: dict[str, asyncio.Event], me: str) -> asyncio.Event:
        return events.setdefault(me, asyncio.Event())


def probed_registry(probe: Probe) -> tr.ToolRegistry:
    registry = tr.ToolRegistry()

    @registry.tool
    async def delete(path: str, ctx: tr.RunContext) -> str:
        """Delete a file (exclusive: the default)."""
        await probe.stay(ctx.call_id)
        return f"deleted {path}"

    @registry.tool(concurrency_safe=True)
    async def search(q: str, ctx: tr.RunContext) -> str:
        """Search (parallel-safe)."""
        await probe.stay(ctx.call_id)
        return f"found {q}"

    @registry.tool(concurrency_safe=True)
    async def meet(me: str, other: str) -> str:
        """Wait for the other call to start (parallel-safe)."""
        probe.started.setdefault(me, asyncio.Event()).set()
        await until(probe.started.setdefault(other, asyncio.Event()))
        return f"{me} met {other}"

    return registry


STEP = [("d1", "delete", {"path": "a"}), ("s", "search", {"q": "x"}),
        ("d2", "delete", {"path": "b"})]
ALONE: list[tuple[str, frozenset[str]]] = [("d1", frozenset()), ("s", frozenset()),
                                            ("d2", frozenset())]
# Parallel-safe calls still overlap; the exclusive one waits for both, the last for it.
MIXED = [("m1", "meet", {"me": "m1", "other": "m2"}), ("m2", "meet", {"me": "m2", "other": "m1"}),
         ("d", "delete", {"path": "a"}), ("s", "search", {"q": "x"})]


async def drive(run: Any, probe: Probe, *order: str) -> Any:
    async with asyncio.TaskGroup() as group:
        ran = group.create_task(within(run, 10))
        group.create_task(within(probe.let_out(*order), 10))
    assert open_gates() == {}  # nothing outlives the step
    return ran.result()


# The OpenAI Agents SDK ---------------------------------------------------------------

def sdk_run(registry: tr.ToolRegistry, *steps: Sequence[tuple[str, str, dict[str, Any]]],
            tools: list[Any] | None = None) -> Any:
    from agents import Agent, RunConfig, Runner
    from test_integrations_openai_agents import Scripted, call

    from toolrail.integrations.openai_agents import function_tools

    model = Scripted(*[[call(i, n, **a) for i, n, a in step] for step in steps])
    listed: list[Any] = tools if tools is not None else function_tools(registry)
    agent: Agent[None] = Agent(name="t", model=model, tools=listed)
    return Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))


async def test_agents_sdk_delete_search_delete_never_overlap() -> None:
    pytest.importorskip("agents")
    probe = Probe()
    result = await drive(sdk_run(probed_registry(probe), STEP), probe, "d1", "s", "d2")
    assert probe.seen == ALONE  # in model order, each alone
    assert result.final_output == "done"


async def test_agents_sdk_parallel_calls_overlap_and_an_exclusive_one_waits_for_them() -> None:
    pytest.importorskip("agents")
    probe = Probe()
    await drive(sdk_run(probed_registry(probe), MIXED), probe, "d", "s")
    assert probe.seen == [("d", frozenset()), ("s", frozenset())]


async def test_agents_sdk_two_runs_of_one_tool_list_do_not_exclude_each_other() -> None:
    pytest.importorskip("agents")
    from toolrail.integrations.openai_agents import function_tools

    probe = Probe()
    registry = probed_registry(probe)
    shared = function_tools(registry)
    one = sdk_run(registry, [("d1", "delete", {"path": "a"})], tools=shared)
    two = sdk_run(registry, [("d2", "delete", {"path": "b"})], tools=shared)
    await drive(asyncio.gather(one, two), probe, "d1", "d2")
    # the second run's delete started while the first run's was inside
    assert sorted(probe.seen) == [("d1", frozenset()), ("d2", frozenset({"d1"}))]


async def test_agents_sdk_a_sub_agent_run_inside_an_exclusive_call_does_not_wait_for_it() -> None:
    pytest.importorskip("agents")
    from agents import Agent, RunConfig, Runner
    from test_integrations_openai_agents import Scripted, call

    from toolrail.integrations.openai_agents import function_tools

    registry = tr.ToolRegistry()
    shared: list[Any] = []

    @registry.tool
    async def delegate() -> str:
        """Ask a sub-agent that uses the same tools (exclusive)."""
        sub: Agent[None] = Agent(name="sub", model=Scripted([call("i", "lookup")]),
                                 tools=shared)
        answer = await Runner.run(sub, "go", run_config=RunConfig(tracing_disabled=True))
        return str(answer.final_output)

    @registry.tool
    async def lookup() -> str:
        """Look something up (exclusive)."""
        return "found"

    shared.extend(function_tools(registry))
    agent: Agent[None] = Agent(name="t", model=Scripted([call("d", "delegate")]), tools=shared)
    result = await within(Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True)))
    assert result.final_output == "done"
    assert open_gates() == {}


# LangGraph ---------------------------------------------------------------------------

def graph_run(registry: tr.ToolRegistry, step: Sequence[tuple[str, str, dict[str, Any]]]) -> Any:
    graph_module = pytest.importorskip("langgraph.graph")
    from langchain_core.messages import AIMessage, HumanMessage

    from toolrail.integrations.langchain import tool_node

    replies = iter([AIMessage("", tool_calls=[{"id": i, "name": n, "args": a}
                                              for i, n, a in step]), AIMessage("done")])

    def think(state: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return {"messages": [next(replies)]}

    def route(state: dict[str, list[Any]]) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else graph_module.END

    graph = graph_module.StateGraph(graph_module.MessagesState)
    graph.add_node("model", think)
    graph.add_node("tools", tool_node(registry))
    graph.add_edge(graph_module.START, "model")
    graph.add_conditional_edges("model", route)
    graph.add_edge("tools", "model")
    return graph.compile().ainvoke({"messages": [HumanMessage("go")]})


async def test_langgraph_delete_search_delete_never_overlap() -> None:
    probe = Probe()
    state = await drive(graph_run(probed_registry(probe), STEP), probe, "d1", "s", "d2")
    assert probe.seen == ALONE
    assert state["messages"][-1].content == "done"


async def test_langgraph_parallel_calls_overlap_and_an_exclusive_one_waits_for_them() -> None:
    probe = Probe()
    await drive(graph_run(probed_registry(probe), MIXED), probe, "d", "s")
    assert probe.seen == [("d", frozenset()), ("s", frozenset())]


# pydantic-ai (its own barriers: a regression guard) ----------------------------------

def pydantic_ai_run(registry: tr.ToolRegistry,
                    step: Sequence[tuple[str, str, dict[str, Any]]]) -> Any:
    pytest.importorskip("pydantic_ai")
    from test_integrations_pydantic_ai import agent_over, call, scripted

    model = scripted([call(n, i, **a) for i, n, a in step])
    return agent_over(registry, model).run("go")


async def test_pydantic_ai_delete_search_delete_never_overlap() -> None:
    probe = Probe()
    result = await drive(pydantic_ai_run(probed_registry(probe), STEP), probe, "d1", "s", "d2")
    assert probe.seen == ALONE
    assert result.output == "done"


async def test_pydantic_ai_parallel_calls_overlap_and_an_exclusive_one_waits_for_them() -> None:
    probe = Probe()
    await drive(pydantic_ai_run(probed_registry(probe), MIXED), probe, "d", "s")
    assert probe.seen == [("d", frozenset()), ("s", frozenset())]


# The gate itself ---------------------------------------------------------------------

async def test_a_call_cancelled_while_it_waits_leaves_the_gate_as_it_was() -> None:
    gate = Gate("k", None)
    assert gate.try_enter(exclusive=False)
    waiting = asyncio.ensure_future(gate.wait(exclusive=True))
    await one_turn()
    assert not gate.try_enter(exclusive=False)  # a reader behind a waiting writer waits
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert gate.try_enter(exclusive=False)  # the writer's place is gone
    gate.leave(exclusive=False)
    gate.leave(exclusive=False)
    assert gate.idle


async def test_a_step_whose_calls_are_done_or_cancelled_leaves_no_gate() -> None:
    inside, out = asyncio.Event(), asyncio.Event()

    async def hold() -> str:
        inside.set()
        await until(out)
        return "held"

    async def value() -> str:
        return "ran"

    first = asyncio.ensure_future(gated("step", None, True, hold))
    await until(inside)
    second = asyncio.ensure_future(gated("step", None, False, value))
    await one_turn()
    assert not second.done()  # waits behind the exclusive call
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    out.set()
    assert await within(first) == "held"
    assert open_gates() == {}

