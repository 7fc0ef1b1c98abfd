"""toolregistry: ``ToolRegistry.ainvoke`` for one call, ``aexecute_tool_calls`` for a step.

Both go through access checks, the execution backend, result finalization and the
execution log. ``ainvoke`` runs an async tool inline on the loop. ``aexecute_tool_calls``
gathers concurrency-safe calls, on the registry's default backend, a process pool
(about 35 ms for this step here); ``wait`` is registered with its inline backend
instead, toolregistry's fastest path for an async tool.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sized
from contextlib import asynccontextmanager
from typing import Any

from toolregistry import Tool, ToolRegistry
from toolregistry.tool import ToolMetadata

from . import Harness, _work

CALL = "ToolRegistry.ainvoke(name, arguments)"
STEP = "ToolRegistry.aexecute_tool_calls (inline backend)"
REGISTER = "ToolRegistry.register + get_schemas()"


@asynccontextmanager
async def harness() -> AsyncIterator[Harness]:
    registry = ToolRegistry()
    registry.register(_work.read)
    registry.register(_work.read_sync)
    registry.register(
        Tool.from_function(_work.wait, metadata=ToolMetadata(natural_backend="inline"))
    )
    calls = [
        {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "wait", "arguments": json.dumps({"index": i})},
        }
        for i in range(_work.STEP_SIZE)
    ]
    try:
        yield Harness(
            lambda: registry.ainvoke("read", _work.ARGS),
            lambda: registry.ainvoke("read_sync", _work.ARGS),
            lambda: registry.aexecute_tool_calls(calls),
        )
    finally:
        await registry.close_async()


async def register(functions: list[Callable[..., Any]]) -> tuple[object, Sized]:
    registry = ToolRegistry()
    for fn in functions:
        registry.register(fn)
    schemas = registry.get_schemas()
    return registry, schemas
