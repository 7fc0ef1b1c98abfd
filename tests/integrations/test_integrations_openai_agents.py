"""toolrail under the OpenAI Agents SDK: the SDK's Runner over a scripted Model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from agents import Agent, FunctionTool, RunConfig, Runner, Usage
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

import toolrail as tr
from helpers import (
    CAT_PNG,
    exactly,
    looking_registry,
    registry_with_policy,
    until,
    within,
)
from toolrail.integrations.openai_agents import function_tools


class Scripted(Model):
    """Answers request n with steps[n], then with a final message; keeps every input."""

    def __init__(self, *steps: Sequence[TResponseOutputItem]) -> None:
        self.steps = [list(step) for step in steps]
        self.inputs: list[list[TResponseInputItem]] = []
        self.tools: list[list[Any]] = []

    async def get_response(self, system_instructions: str | None,
                           input: str | list[TResponseInputItem], model_settings: Any,
                           tools: list[Any], output_schema: Any, handoffs: Any, tracing: Any,
                           **_: Any) -> ModelResponse:
        self.inputs.append([] if isinstance(input, str) else list(input))
        self.tools.append(tools)
        step: list[TResponseOutputItem] = self.steps.pop(0) if self.steps else [say("done")]
        return ModelResponse(output=step, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def call(call_id: str, name: str, **args: Any) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(arguments=json.dumps(args), call_id=call_id, name=name,
                                    type="function_call")


def say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="m", role="assistant", status="completed", type="message",
        content=[ResponseOutputText(annotations=[], text=text, type="output_text")],
    )


def outputs(model: Scripted) -> dict[str, Any]:
    items: list[Any] = model.inputs[-1]
    return {item["call_id"]: item["output"] for item in items
            if item.get("type") == "function_call_output"}


async def run(registry: tr.ToolRegistry | tr.Scope, model: Scripted, **options: Any) -> Any:
    tools: list[Any] = function_tools(registry, **options)
    agent: Agent[None] = Agent(name="t", model=model, tools=tools)
    return await within(Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True)))


def test_function_tools_are_the_scopes_schemas_made_strict() -> None:
    registry = tr.ToolRegistry()

    @registry.tool
    def add(a: int, b: int | None = None) -> int:
        """Add."""
        return a + (b or 0)

    with registry.scope("s") as scope:
        scope.register(tr.tool(lambda: "x", name="local", description="Local."))
        tools = function_tools(registry, scope="s")
        assert [t.name for t in tools] == ["add", "local"]
        assert [t.name for t in function_tools(scope)] == ["add", "local"]
    strict, loose = function_tools(registry)[0], function_tools(registry, strict=False)[0]
    assert isinstance(strict, FunctionTool)
    assert strict.strict_json_schema
    assert strict.params_json_schema["required"] == ["a", "b"]
    assert strict.params_json_schema["additionalProperties"] is False
    assert not loose.strict_json_schema
    assert loose.params_json_schema["required"] == ["a"]


def test_a_schema_strict_mode_cannot_express_raises_at_once() -> None:
    registry = tr.ToolRegistry()
    registry.register(tr.Tool(name="tag", description="", execute=lambda a, c: None, parameters={
        "type": "object", "properties": {"tags": {"type": "object", "patternProperties": {}}}}))
    with pytest.raises(ValueError, match=exactly(
            "cannot make tool 'tag' strict: patternProperties at #/properties/tags")):
        function_tools(registry)
    assert function_tools(registry, strict=False)[0].name == "tag"


async def test_runner_calls_run_in_parallel_with_the_sdks_call_ids() -> None:
    registry = tr.ToolRegistry()
    started = {"a": asyncio.Event(), "b": asyncio.Event()}
    seen: list[tuple[str, tr.JsonValue]] = []

    @registry.tool(concurrency_safe=True)
    async def meet(me: str, other: str, note: str = "", *,
                   ctx: tr.RunContext) -> str:
        """Wait for the other call to start."""
        seen.append((ctx.call_id, ctx.arguments))
        started[me].set()
        await until(started[other])
        return f"{me} met {other}"

    model = Scripted([call("c-a", "meet", me="a", other="b", note=None),
                      call("c-b", "meet", me="b", other="a", note="hi")])
    result = await run(registry, model)
    assert result.final_output == "done"
    assert outputs(model) == {"c-a": "a met b", "c-b": "b met a"}
    # strict mode's null for an absent optional property (not nullable) is taken back out
    assert dict(seen) == {"c-a": {"me": "a", "other": "b"},
                          "c-b": {"me": "b", "other": "a", "note": "hi"}}


async def test_approval_guard_and_errors_reach_the_model_as_tool_output() -> None:
    asked: list[str] = []
    registry = registry_with_policy(asked)
    model = Scripted([call("w", "write", path="a.txt"), call("d", "delete", path="b.txt")])
    await run(registry, model, strict=False)
    assert outputs(model) == {"w": "wrote a.txt", "d": "Error: deleting is not allowed"}
    assert asked == ["w"]


async def test_images_become_output_images_and_contexts_follow() -> None:
    registry = looking_registry()

    model = Scripted([call("l", "look")])
    await run(registry, model)
    assert outputs(model)["l"] == [
        {"type": "input_text", "text": "a cat"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{CAT_PNG}"},
        {"type": "input_text", "text": "remember the cat"},
    ]


def test_an_error_result_that_shows_nothing_reads_error_and_its_message() -> None:
    from toolrail.integrations.openai_agents import output_of

    result = tr.ToolResult((), True, error=tr.ErrorInfo("boom"))
    assert output_of(result) == "Error: boom"
