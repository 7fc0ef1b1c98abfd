"""OpenAI Agents SDK: ``FunctionTool.on_invoke_tool`` and the runner's function-tool batch.

``on_invoke_tool`` takes the model's argument text (only text: its figure includes one
``json.loads`` of a 50-byte string) and a ``ToolContext``, which the runner builds for
every call, so one is built per call here too. The step is
``run_internal.tool_execution.execute_function_tool_calls``, the function the runner
awaits for the function tools of one model response: one task per call with hooks,
guardrails, approvals and a function span each. Tracing is disabled. A sync tool runs
in ``asyncio.to_thread``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sized
from contextlib import asynccontextmanager
from typing import Any

from agents import Agent, RunConfig, RunContextWrapper, RunHooks, function_tool
from agents.run_internal.agent_bindings import bind_public_agent
from agents.run_internal.run_steps import ToolRunFunction
from agents.run_internal.tool_execution import execute_function_tool_calls
from agents.tool_context import ToolContext
from openai.types.responses import ResponseFunctionToolCall

from . import Harness, _work

CALL = "FunctionTool.on_invoke_tool(ToolContext, json)"
STEP = "run_internal.tool_execution.execute_function_tool_calls"
REGISTER = "function_tool + params_json_schema"


@asynccontextmanager
async def harness() -> AsyncIterator[Harness]:
    read = function_tool(_work.read)
    read_sync = function_tool(_work.read_sync)
    wait = function_tool(_work.wait)
    agent: Agent[None] = Agent(name="bench", tools=[read, read_sync, wait])
    bindings = bind_public_agent(agent)
    config = RunConfig(tracing_disabled=True)
    hooks: RunHooks[None] = RunHooks()
    runs = [
        ToolRunFunction(
            tool_call=ResponseFunctionToolCall(
                arguments=f'{{"index": {i}}}', call_id=f"c{i}", name="wait", type="function_call"
            ),
            function_tool=wait,
        )
        for i in range(_work.STEP_SIZE)
    ]

    def call(tool: Any) -> Any:
        context = ToolContext(
            context=None, tool_name=tool.name, tool_call_id="c1", tool_arguments=_work.ARGS_JSON
        )
        return tool.on_invoke_tool(context, _work.ARGS_JSON)

    async def step() -> Any:
        return await execute_function_tool_calls(
            bindings=bindings,
            tool_runs=runs,
            hooks=hooks,
            context_wrapper=RunContextWrapper(context=None),
            config=config,
        )

    yield Harness(lambda: call(read), lambda: call(read_sync), step)


async def register(functions: list[Callable[..., Any]]) -> tuple[object, Sized]:
    tools = [function_tool(fn) for fn in functions]
    schemas = [(tool.name, tool.description, tool.params_json_schema) for tool in tools]
    return tools, schemas
