"""pydantic-ai: the agent's own tool manager and its processing of one model response.

A ``FunctionModel`` answers the first request with ``STEP_SIZE`` calls of ``wait``; the
run is driven with ``Agent.iter`` up to its ``CallToolsNode``, which leaves a prepared
``ToolManager`` and the run's graph context. One call is ``ToolManager.handle_call``
(validation, capability hooks, execution); the step is
``_tool_execution.process_tool_calls``, the function ``CallToolsNode`` runs over the
response's calls (one task per call, results as ``ToolReturnPart`` objects). A sync tool
runs in a worker thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sized
from contextlib import aclosing, asynccontextmanager
from typing import Any

from pydantic_ai import Agent, CallToolsNode
from pydantic_ai._tool_execution import process_tool_calls
from pydantic_ai.messages import ModelMessage, ModelRequestPart, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from . import Harness, _work

CALL = "ToolManager.handle_call(ToolCallPart)"
STEP = "_tool_execution.process_tool_calls (run by CallToolsNode)"
REGISTER = "FunctionToolset.add_function + Tool.tool_def"


@asynccontextmanager
async def harness() -> AsyncIterator[Harness]:
    calls = [
        ToolCallPart("wait", {"index": i}, tool_call_id=f"c{i}") for i in range(_work.STEP_SIZE)
    ]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=list(calls))

    agent = Agent(FunctionModel(respond))
    for fn in (_work.read, _work.read_sync, _work.wait):
        agent.tool_plain(fn)
    async with agent.iter("step") as run:
        node: Any = run.next_node
        while not isinstance(node, CallToolsNode):
            node = await run.next(node)
        ctx = run.ctx
        manager = ctx.deps.tool_manager
        one = ToolCallPart("read", _work.ARGS, tool_call_id="c1")
        one_sync = ToolCallPart("read_sync", _work.ARGS, tool_call_id="c1")

        async def step() -> list[ModelRequestPart]:
            parts: list[ModelRequestPart] = []
            async with aclosing(
                process_tool_calls(
                    manager,
                    tool_calls=calls,
                    tool_call_results=None,
                    tool_call_metadata=None,
                    final_result=None,
                    ctx=ctx,
                    output_parts=parts,
                )
            ) as events:
                async for _ in events:
                    pass
            return parts

        yield Harness(lambda: manager.handle_call(one), lambda: manager.handle_call(one_sync), step)


async def register(functions: list[Callable[..., Any]]) -> tuple[object, Sized]:
    toolset: FunctionToolset[None] = FunctionToolset()
    for fn in functions:
        toolset.add_function(fn)
    definitions = [tool.tool_def for tool in toolset.tools.values()]
    return toolset, definitions
