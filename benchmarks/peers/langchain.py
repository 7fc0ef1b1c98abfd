"""LangChain: ``StructuredTool.ainvoke`` with a tool call, as an agent's tool node invokes it.

Given a ``ToolCall`` the tool answers with a ``ToolMessage``, the form a model reads.
A sync-only tool's ``ainvoke`` runs ``invoke`` in the default executor (a thread).
langchain-core has no executor for one model step's calls, so the step is
``asyncio.gather`` over ``ainvoke``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sized
from contextlib import asynccontextmanager
from typing import Any

from langchain_core.messages.tool import tool_call
from langchain_core.tools import StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from . import Harness, _work

CALL = "StructuredTool.ainvoke(ToolCall)"
STEP = "asyncio.gather of StructuredTool.ainvoke (no step executor)"
REGISTER = "StructuredTool.from_function + convert_to_openai_tool"


@asynccontextmanager
async def harness() -> AsyncIterator[Harness]:
    read = StructuredTool.from_function(coroutine=_work.read)
    read_sync = StructuredTool.from_function(func=_work.read_sync)
    wait = StructuredTool.from_function(coroutine=_work.wait)
    one = tool_call(name="read", args=_work.ARGS, id="c1")
    one_sync = tool_call(name="read_sync", args=_work.ARGS, id="c1")
    calls = [tool_call(name="wait", args={"index": i}, id=f"c{i}") for i in range(_work.STEP_SIZE)]

    async def step() -> list[Any]:
        return await asyncio.gather(*(wait.ainvoke(call) for call in calls))

    yield Harness(lambda: read.ainvoke(one), lambda: read_sync.ainvoke(one_sync), step)


async def register(functions: list[Callable[..., Any]]) -> tuple[object, Sized]:
    tools = [StructuredTool.from_function(coroutine=fn) for fn in functions]
    schemas = [convert_to_openai_tool(tool) for tool in tools]
    return tools, schemas
