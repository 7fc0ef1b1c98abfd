"""Integrations: what each framework integration adds over ``execute``, beside the framework.

For each framework, one call of the same typed async 3-parameter tool, timed as

- ``execute``: bare ``registry.execute(call)``, the toolrail floor (for the OpenAI
  Agents SDK the call is built with ``ToolCall.from_json``, for the SDK hands over text);
- the integration's own entry (``ToolrailToolset.call_tool``, the ``FunctionTool``'s
  ``on_invoke_tool``, ``ToolrailTool._arun``): ``execute`` plus the mapping in and out;
- the framework's own tool path over its own tool and over the toolrail one
  (``ToolManager.handle_call``, ``on_invoke_tool`` of ``function_tool``,
  ``BaseTool.ainvoke`` of a tool call), so the figures sit beside what a framework
  user already pays per call. For the Agents SDK that path is ``invoke_function_tool``,
  what its runner awaits for each call (it inspects ``on_invoke_tool`` first).

The bar: each integration's entry adds at most 5 µs per call over ``execute`` (for
LangChain, over ``execute`` and the ``ToolMessage`` every LangChain tool call builds).
A framework that cannot be imported is skipped with a row saying so.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Awaitable, Callable
from typing import Any

import toolrail as tr

from ._timing import Figure, ainterleave
from .peers import _work

Case = tuple[str, Callable[[], Awaitable[object]]]
EXECUTE = "execute"
ENTRY = "integration"
MESSAGE = "message"
BAR_US = 5.0


def _execute(registry: tr.ToolRegistry) -> Awaitable[tr.ToolResult]:
    # fresh arguments each call, as every framework hands over
    return registry.execute(tr.ToolCall(call_id="c1", name="read", arguments=dict(_work.ARGS)))


def _registry() -> tr.ToolRegistry:
    registry = tr.ToolRegistry()
    registry.register(tr.tool(_work.read))
    return registry


async def _pydantic_ai(repeat: int, target: float) -> list[Figure]:
    from pydantic_ai import Agent, CallToolsNode
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from toolrail.integrations.pydantic_ai import ToolrailToolset

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("x")])

    registry = _registry()
    toolset = ToolrailToolset(registry)
    agent = Agent(FunctionModel(respond), toolsets=[toolset])
    agent.tool_plain(name="native_read")(_work.read)
    async with agent.iter("step") as run:
        node: Any = run.next_node
        while not isinstance(node, CallToolsNode):
            node = await run.next(node)
        manager = run.ctx.deps.tool_manager
        ctx, prepared = manager.ctx, manager.tools
        if ctx is None or prepared is None:
            raise RuntimeError("the run did not prepare its tool manager")
        tool = prepared["read"]
        native = ToolCallPart("native_read", _work.ARGS, tool_call_id="c1")
        ours = ToolCallPart("read", _work.ARGS, tool_call_id="c1")
        return await ainterleave([
            (f"pydantic-ai  {EXECUTE}: registry.execute(ToolCall)", lambda: _execute(registry)),
            (f"pydantic-ai  {ENTRY}: ToolrailToolset.call_tool",
             lambda: toolset.call_tool("read", dict(_work.ARGS), ctx, tool)),
            ("pydantic-ai  own tool: ToolManager.handle_call", lambda: manager.handle_call(native)),
            ("pydantic-ai  toolrail tool: ToolManager.handle_call",
             lambda: manager.handle_call(ours)),
        ], repeat=repeat, target=target)


async def _openai_agents(repeat: int, target: float) -> list[Figure]:
    from agents import function_tool
    from agents.tool import invoke_function_tool
    from agents.tool_context import ToolContext

    from toolrail.integrations.openai_agents import function_tools

    registry = _registry()
    [ours] = function_tools(registry)
    native = function_tool(_work.read)
    text = _work.ARGS_JSON

    # The runner builds one ToolContext per call whichever tool it calls: built once here,
    # so the rows differ by the tools alone.
    context = ToolContext(context=None, tool_name="read", tool_call_id="c1", tool_arguments=text)

    def invoke(tool: Any) -> Awaitable[object]:
        return tool.on_invoke_tool(context, text)  # type: ignore[no-any-return]

    def run(tool: Any) -> Awaitable[object]:
        return invoke_function_tool(function_tool=tool, context=context, arguments=text)

    return await ainterleave([
        (f"openai-agents  {EXECUTE}: execute(ToolCall.from_json)",
         lambda: registry.execute(tr.ToolCall.from_json("c1", "read", text))),
        (f"openai-agents  {ENTRY}: on_invoke_tool of function_tools (strict)",
         lambda: invoke(ours)),
        ("openai-agents  own tool: on_invoke_tool of function_tool", lambda: invoke(native)),
        ("openai-agents  own tool: invoke_function_tool(function_tool)", lambda: run(native)),
        ("openai-agents  toolrail tool: invoke_function_tool(function_tools)",
         lambda: run(ours)),
    ], repeat=repeat, target=target)


async def _langchain(repeat: int, target: float) -> list[Figure]:
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool as lc_tool

    from toolrail.integrations.langchain import tools

    registry = _registry()
    [ours] = tools(registry)
    native = lc_tool(_work.read)
    tool_call = {"type": "tool_call", "id": "c1", "name": "read", "args": _work.ARGS}

    async def message() -> object:
        return ToolMessage("x", artifact=None, tool_call_id="c1", name="read", status="success")
    return await ainterleave([
        (f"langchain  {EXECUTE}: registry.execute(ToolCall)", lambda: _execute(registry)),
        (f"langchain  {ENTRY}: ToolrailTool._arun of a tool call",
         lambda: ours._arun(arguments=dict(_work.ARGS), call_id="c1")),
        (f"langchain  {MESSAGE}: ToolMessage(...) alone, built for every tool call",
         message),
        ("langchain  own tool: StructuredTool.ainvoke(tool call)",
         lambda: native.ainvoke(tool_call)),
        ("langchain  toolrail tool: ToolrailTool.ainvoke(tool call)",
         lambda: ours.ainvoke(tool_call)),
    ], repeat=repeat, target=target)


FRAMEWORKS = (("pydantic-ai", "pydantic_ai", _pydantic_ai),
              ("openai-agents", "agents", _openai_agents),
              ("langchain", "langchain_core", _langchain))


async def main(quick: bool) -> list[Figure]:
    repeat, target = (3, 0.002) if quick else (21, 0.02)
    figures: list[Figure] = []
    for name, module, measure in FRAMEWORKS:
        if importlib.util.find_spec(module) is None:
            figures.append(Figure(f"{name}  not installed", 0.0, 0.0, 0.0))
            continue
        figures += await measure(repeat, target)
    return figures


def bars(figures: list[Figure]) -> list[str]:
    lines = []
    for name, _, _ in FRAMEWORKS:
        mine = {f.label.split(":")[0].split()[-1]: f.median_us for f in figures
                if f.label.startswith(f"{name}  ")}
        if EXECUTE in mine and ENTRY in mine:
            # LangChain builds a ToolMessage per tool call for its own tools as well
            added = mine[ENTRY] - mine[EXECUTE] - mine.get(MESSAGE, 0.0)
            besides = " and its ToolMessage" if MESSAGE in mine else ""
            lines.append(f"{name} integration adds {added:.2f} µs per call over execute()"
                         f"{besides} (bar: at most {BAR_US:g} µs)")
        else:
            lines.append(f"{name} integration: not installed")
    return lines
