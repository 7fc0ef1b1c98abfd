"""OpenAI Agents SDK: ``FunctionTool``\\ s whose ``on_invoke_tool`` runs ``execute``.

>>> from agents import Agent
>>> registry = ToolRegistry()
>>> agent = Agent(name="helper", tools=function_tools(registry, scope="agent-1"))

- One ``FunctionTool`` per schema the scope sees now, in ``schemas`` order. The list
  is a snapshot: call ``function_tools`` again after the registry changes (a tool
  removed since is then reported as an unknown tool, never run).
- ``strict=True`` (the SDK's own default) rewrites each schema with toolrail's strict
  transform (``toolrail.adapters.openai``'s, the same rules and ``ValueError``); the
  ``null`` the model then sends for an optional property it leaves out is removed
  again before the call reaches the registry, so the tool sees the property absent.
- Each tool's name is ``toolrail.adapters.portable_names``' (one every provider
  accepts, a valid name unchanged, ``github.search`` as ``github_search``); its calls
  run the registry's tool of that name.
- Each call is ``execute(ToolCall.from_json(<the SDK's tool_call_id>, name, text))``.
  The SDK starts a step's calls at once; an exclusive one (``execution_mode``) still
  runs alone: it waits for the calls of the step that came before it, later ones wait
  for it. The step is keyed by the run's ``Usage`` object, which the SDK hands every
  ``ToolContext`` of one run (a run's steps follow one another).
- The output is the result's text, or a list of ``ToolOutputText`` and
  ``ToolOutputImage`` (data URLs) when it holds an image. A failure's output is its
  ``Error: ...`` text: the SDK sends it to the model as the tool's output, as it does
  for its own failing tools. A result's contexts follow as further text/image items,
  for the SDK has no separate channel for them.
- The SDK's ``needs_approval``, guardrails and timeouts stay available but are not
  needed: toolrail's approver, guards and ``Tool.timeout`` already apply.

Needs the ``openai-agents`` extra: ``pip install 'toolrail[openai-agents]'``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import replace
from typing import Any, get_type_hints

try:
    from agents import FunctionTool, ToolOutputImage, ToolOutputText
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover - the extra is installed in development
    raise ImportError(
        "toolrail.integrations.openai_agents needs the openai-agents extra: "
        "pip install 'toolrail[openai-agents]'"
    ) from exc

from .. import (
    Content,
    ImageContent,
    Scope,
    TextContent,
    ToolCall,
    ToolRegistry,
    ToolResult,
    ToolSchema,
    thaw,
)
from ..adapters import portable_names, strict_schema, visible_content, without_strict_nulls
from ._source import Source, source_of

__all__ = ["function_tools", "output_of"]


def function_tools(target: ToolRegistry | Scope, scope: Hashable | None = None, *,
                   strict: bool = True) -> list[FunctionTool]:
    """The SDK's ``FunctionTool``\\ s for the tools ``target`` shows ``scope``.

    Args:
        target: a ``ToolRegistry`` (viewed through ``scope``) or a ``Scope`` handle.
        scope: the scope key when ``target`` is a registry; ``None`` is the global view.
        strict: send strict schemas (OpenAI Structured Outputs).

    Raises:
        ValueError: ``strict`` and a schema strict mode cannot express (names the tool).
    """
    source = source_of(target, scope)
    schemas = source.schemas()
    wire = portable_names(schema.name for schema in schemas)
    return [_function_tool(source, schema, wire[schema.name], strict) for schema in schemas]


def _function_tool(source: Source, schema: ToolSchema, wire: str, strict: bool) -> FunctionTool:
    name, key, in_step = schema.name, source.key, source.in_step
    root = thaw(schema.parameters) if strict else None

    @_resolved
    async def invoke(context: ToolContext[Any], text: str) -> Any:
        call = ToolCall.from_json(context.tool_call_id, name, text, scope=key)
        # Only text holding a null can hold one strict mode added.
        if root is not None and "null" in text and isinstance(call.arguments, dict):
            call = replace(call, arguments=without_strict_nulls(call.arguments, root))
        usage = context.usage
        result: ToolResult = await in_step(("agents", id(usage)), usage, call)
        return output_of(result)

    parameters = strict_schema(name, thaw(schema.parameters)) if strict else thaw(schema.parameters)
    return FunctionTool(
        name=wire, description=schema.description, params_json_schema=parameters,
        on_invoke_tool=invoke, strict_json_schema=strict,
    )


Invoke = Callable[[ToolContext[Any], str], Awaitable[Any]]


def _resolved(invoke: Invoke) -> Invoke:
    """``invoke`` with its signature and annotations resolved once, here.

    The SDK reads ``inspect.signature`` and ``get_type_hints`` of ``on_invoke_tool`` on
    every call (to choose which context to pass); the annotations of this module are
    strings (``from __future__ import annotations``), which ``get_type_hints`` would
    evaluate again each time: about 40 µs per call, more than the rest of the call.
    """
    invoke.__annotations__ = get_type_hints(invoke)
    invoke.__signature__ = inspect.signature(invoke)  # type: ignore[attr-defined]
    return invoke


def output_of(result: ToolResult) -> Any:
    """A result as a function tool's output: its text, or output items when it holds images."""
    content = visible_content(result)  # an error that shows nothing reads Error: <message>
    if len(content) == 1 and not result.contexts and type(content[0]) is TextContent:
        return content[0].text
    if result.contexts:
        content += tuple(block for message in result.contexts for block in message.content)
    if not any(isinstance(block, ImageContent) for block in content):
        return "\n".join(block.text for block in content)  # type: ignore[union-attr]
    return [_item(block) for block in content]


def _item(block: Content) -> ToolOutputText | ToolOutputImage:
    if isinstance(block, ImageContent):
        return ToolOutputImage(image_url=f"data:{block.mime_type};base64,{block.data}")
    return ToolOutputText(text=block.text)
