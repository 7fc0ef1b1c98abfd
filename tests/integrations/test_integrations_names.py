"""Tool names every provider accepts, through each framework and back to the registry.

The frameworks forward a tool's name to whichever provider the agent uses, so each
integration names its tools by ``toolrail.adapters.portable_names`` and runs the
registry's tool when the model calls that name. Issue 25, item 6.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent as SdkAgent
from agents import RunConfig, Runner, Usage
from agents.items import ModelResponse as SdkResponse
from agents.models.interface import Model
from langchain_core.utils.function_calling import convert_to_openai_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import toolrail as tr
from helpers import within
from toolrail.adapters import portable_names
from toolrail.integrations.langchain import tools
from toolrail.integrations.openai_agents import function_tools
from toolrail.integrations.pydantic_ai import ToolrailToolset

PORTABLE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$")  # OpenAI, Anthropic and Gemini
NAMES = ["github.search", "github_search", "x" * 128, "x" * 64 + ".y", "3d", "now"]
WIRE = portable_names(NAMES)


def names_registry() -> tr.ToolRegistry:
    """One tool per name, each answering its own name and its arguments."""
    registry = tr.ToolRegistry()
    for name in NAMES:
        async def answer(arguments: tr.JsonValue, ctx: tr.RunContext, name: str = name) -> str:
            return f"{name} {json.dumps(arguments)}"

        registry.register(tr.Tool(name=name, description=f"The {name} tool.",
                                  parameters={"type": "object"}, execute=answer))
    return registry


def test_the_wire_names_are_portable_and_distinct_and_valid_ones_are_kept() -> None:
    assert all(PORTABLE.fullmatch(wire) for wire in WIRE.values())
    assert len(set(WIRE.values())) == len(NAMES)
    assert (WIRE["github_search"], WIRE["now"]) == ("github_search", "now")
    assert WIRE["3d"] == "_3d"


async def test_pydantic_ai_sees_portable_names_and_its_calls_run_the_registrys_tools() -> None:
    seen: list[AgentInfo] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info)
        if len(seen) > 1:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(WIRE[name], {"n": i}, tool_call_id=f"c{i}")
                                    for i, name in enumerate(NAMES)])

    toolset = ToolrailToolset(names_registry())
    result = await within(Agent(FunctionModel(respond), toolsets=[toolset]).run("go"))

    assert sorted(t.name for t in seen[0].function_tools) == sorted(WIRE.values())
    assert {t.name: (t.metadata or {}).get("toolrail_name")
            for t in seen[0].function_tools} == {wire: name for name, wire in WIRE.items()}
    returned = {part.tool_call_id: part.content
                for message in result.all_messages() if isinstance(message, ModelRequest)
                for part in message.parts if isinstance(part, ToolReturnPart)}
    assert returned == {f"c{i}": f'{name} {{"n": {i}}}' for i, name in enumerate(NAMES)}
    toolset.close()


class Scripted(Model):
    """Calls every tool by the given names in its first response, then says done."""

    def __init__(self, *names: str) -> None:
        self.names = names
        self.tools: list[list[Any]] = []
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: str | None, input: Any,
                           model_settings: Any, tools: list[Any], *args: Any,
                           **kwargs: Any) -> SdkResponse:
        self.tools.append(tools)
        self.inputs.append(input)
        if len(self.tools) > 1:
            done = ResponseOutputMessage(
                id="m", role="assistant", status="completed", type="message",
                content=[ResponseOutputText(annotations=[], text="done", type="output_text")])
            return SdkResponse(output=[done], usage=Usage(), response_id=None)
        calls = [ResponseFunctionToolCall(arguments=json.dumps({"n": i}), call_id=f"c{i}",
                                          name=name, type="function_call")
                 for i, name in enumerate(self.names)]
        return SdkResponse(output=list(calls), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


async def test_openai_agents_tools_have_portable_names_and_run_the_registrys_tools() -> None:
    model = Scripted(*(WIRE[name] for name in NAMES))
    sdk_tools: list[Any] = function_tools(names_registry())
    agent: SdkAgent[None] = SdkAgent(name="t", model=model, tools=sdk_tools)

    await within(Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True)))

    assert sorted(tool.name for tool in model.tools[0]) == sorted(WIRE.values())
    outputs = {item["call_id"]: item["output"] for item in model.inputs[-1]
               if isinstance(item, dict) and item.get("type") == "function_call_output"}
    assert outputs == {f"c{i}": f'{name} {{"n": {i}}}' for i, name in enumerate(NAMES)}


async def test_langchain_tools_bind_portable_names_and_run_the_registrys_tools() -> None:
    built = tools(names_registry())
    by_wire = {tool.name: tool for tool in built}

    bound = [convert_to_openai_tool(tool)["function"]["name"] for tool in built]
    messages = [await by_wire[WIRE[name]].ainvoke(
        {"type": "tool_call", "id": f"c{i}", "name": WIRE[name], "args": {"n": i}})
        for i, name in enumerate(NAMES)]

    assert sorted(bound) == sorted(WIRE.values())
    assert {tool.name: tool.registry_name for tool in built} == {
        wire: name for name, wire in WIRE.items()}
    assert [message.content for message in messages] == [
        f'{name} {{"n": {i}}}' for i, name in enumerate(NAMES)]
    assert [message.name for message in messages] == [WIRE[name] for name in NAMES]
