"""The ``run_code`` transport ``Tool`` a registry builds for a scope (code-mode.md).

Its description is the usage rules followed by the SDK of the tools the scope sees;
the registry rebuilds it only when that tool set changes, so the text stays
byte-identical (prompt caches hit) while the tools do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from .._core.presentation import RUN_CODE
from .._model.tool import Tool
from ._sdk import method_name, render_sdk

if TYPE_CHECKING:
    from .._core.entry import Entry
    from .._dispatch.execution import RunContext
    from .._registry.registry import ToolRegistry

__all__ = ["PARAMETERS", "RULES", "build_transport"]

PARAMETERS: Final = {
    "type": "object",
    "properties": {"code": {
        "type": "string",
        "description": "A Python program that calls the tools through `tools` (see the SDK "
                       "in the tool description); its last expression is the result.",
    }},
    "required": ["code"],
    "additionalProperties": False,
}

RULES: Final = """\
Run a Python program that calls the tools below, so that one step can do the work of
many: loops, conditions, variables and concurrent calls are all yours.

- Call a tool with `await tools.<name>({...})`, or `await tools.call("<name>", {...})`
  for any tool (the only way to reach one whose name is not a method). The value is the
  tool's result value; run independent calls together with `asyncio.gather(...)`.
- Await every call: a call not awaited has no value (a result holding one fails).
- A failed call raises `ToolCallError`, whose message names the tool, its error code and
  the error; catch it to handle the failure (`except ToolCallError as error:`), and read
  the fields with `tool_call_error(error).code` (also `.tool_name`, `.message`).
- What the program prints and the value of its last expression are returned to you.
- The program runs in a sandbox: no files, network, environment or imports beyond what
  it provides (asyncio, json, math, re, datetime and the like); it is type-checked
  against the SDK before it runs, and limited in time, memory, output and calls.

The SDK:
"""


def build_transport(registry: ToolRegistry, entries: Sequence[Entry]) -> Tool:
    """``run_code`` for a scope that sees the tools of ``entries`` (in name order)."""
    schemas = [entry.schema for entry in entries]
    outputs = {e.schema.name: e.tool.output_schema for e in entries
               if e.tool.output_schema is not None}
    sdk = render_sdk(schemas, outputs)
    methods = frozenset(m for m in (method_name(s.name) for s in schemas) if m is not None)

    async def execute(arguments: Any, ctx: RunContext) -> Any:
        from ._runtime import run_program

        return await run_program(registry, sdk, methods, arguments, ctx)

    return Tool(name=RUN_CODE, description=RULES + "\n" + sdk, parameters=PARAMETERS,
                execute=execute, concurrency_safe=False, cancellation="cooperative")
