"""LangChain: ``BaseTool``\\ s that run ``execute``, and a LangGraph ``ToolNode`` of them.

>>> registry = ToolRegistry()
>>> tools(registry, scope="agent-1")
[]

- Tool names are ``toolrail.adapters.portable_names``' (one every provider accepts, a
  valid name unchanged, ``github.search`` as ``github_search``); ``registry_name`` is
  the registry's, which each call runs.
- One ``ToolrailTool`` per schema the scope sees now; ``args_schema`` is the schema
  itself (a JSON Schema dict, which ``bind_tools`` sends as is). The list is a
  snapshot: call ``tools`` again after the registry changes.
- The model's arguments reach the registry untouched (LangChain does not validate a
  dict schema); invoked with a tool call (``{"type": "tool_call", "id": ...}``), the
  call id is LangChain's and the output is a ``ToolMessage``.
- ``response_format="content_and_artifact"``: the message content is the result's
  content (a string, or standard ``text``/``image`` blocks when it holds an image,
  with the result's contexts after it) and the ``artifact`` is the ``ToolResult``
  itself (value, meta, error code, contexts).
- A failure is a ``ToolMessage`` with ``status="error"`` and the ``Error: ...`` text
  (invoked with plain arguments, no tool call: the content, and the result as artifact).
- Only async invocation (``ainvoke``, ``astream``, an async graph) runs the pipeline;
  ``invoke`` raises ``NotImplementedError``, for the registry belongs to one event loop.
- ``tool_node(...)`` (needs ``langgraph``) is ``ToolNode(tools(...))``: LangGraph's node
  still fans the calls of one message out in parallel; toolrail runs each one, and an
  exclusive one (``execution_mode``) alone: it waits for the calls of the step that came
  before it, later ones wait for it. The step is the parent run of the tool runs (the
  node's run, for a ``ToolNode`` given the whole message); calls with no parent run (a
  loop of your own that gathers ``ainvoke`` calls) are not gated: use ``registry.run``.

Needs the ``langchain`` extra: ``pip install 'toolrail[langchain]'``.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable
from typing import Any

try:
    from langchain_core.callbacks import AsyncCallbackManagerForToolRun
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import BaseTool
except ImportError as exc:  # pragma: no cover - the extra is installed in development
    raise ImportError(
        "toolrail.integrations.langchain needs the langchain extra: "
        "pip install 'toolrail[langchain]'"
    ) from exc

from pydantic import ConfigDict

from .. import ImageContent, Scope, TextContent, ToolCall, ToolRegistry, ToolResult, thaw
from ..adapters import portable_names, visible_content
from ._source import Source, source_of

__all__ = ["ToolrailTool", "content_of", "tool_node", "tools"]


class ToolrailTool(BaseTool):
    """One registry tool as a LangChain tool; build them with :func:`tools`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    source: Source
    registry_name: str | None = None
    """The registry's name of the tool, when ``name`` is the portable one sent out."""
    response_format: Any = "content_and_artifact"

    def _to_args_and_kwargs(self, tool_input: str | dict[str, Any],
                            tool_call_id: str | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
        # The one override that matters: hand the raw arguments and LangChain's call id
        # to _arun, so the registry (not LangChain) snapshots and validates them.
        return (), {"arguments": tool_input, "call_id": tool_call_id}

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"tool {self.name!r} runs toolrail's async pipeline: use ainvoke, not invoke"
        )

    async def _arun(self, *, arguments: Any, call_id: str | None,
                    run_manager: AsyncCallbackManagerForToolRun | None = None,
                    **_: Any) -> tuple[Any, Any]:
        result = await self._execute(call_id or uuid.uuid4().hex, arguments, run_manager)
        if call_id is None:
            return content_of(result), result
        # A ToolMessage of our own carries the error status LangChain only sets for
        # exceptions, while keeping the result as the artifact.
        status = "error" if result.is_error else "success"
        message = ToolMessage(content_of(result), artifact=result, tool_call_id=call_id,
                              name=self.name, status=status)
        return message, None

    async def _execute(self, call_id: str, arguments: Any,
                       run_manager: AsyncCallbackManagerForToolRun | None) -> ToolResult:
        source = self.source
        name = self.registry_name or self.name  # the registry's, not the portable one
        step = None if run_manager is None else run_manager.parent_run_id
        if step is None:  # no step to keep: the caller's own fan-out
            return await source.call(call_id, name, arguments)
        call = ToolCall(call_id=call_id, name=name, arguments=arguments, scope=source.key)
        return await source.in_step(("langchain", step), None, call)


def tools(target: ToolRegistry | Scope, scope: Hashable | None = None) -> list[ToolrailTool]:
    """LangChain tools for the tools ``target`` shows ``scope``, in ``schemas`` order.

    Args:
        target: a ``ToolRegistry`` (viewed through ``scope``) or a ``Scope`` handle.
        scope: the scope key when ``target`` is a registry; ``None`` is the global view.
    """
    source = source_of(target, scope)
    schemas = source.schemas()
    wire = portable_names(schema.name for schema in schemas)
    return [
        ToolrailTool(name=wire[schema.name], description=schema.description,
                     args_schema=thaw(schema.parameters), source=source,
                     registry_name=schema.name)
        for schema in schemas
    ]


def tool_node(target: ToolRegistry | Scope, scope: Hashable | None = None, **options: Any) -> Any:
    """A LangGraph ``ToolNode`` over :func:`tools`; ``options`` go to ``ToolNode``."""
    try:
        from langgraph.prebuilt import ToolNode
    except ImportError as exc:
        raise ImportError("tool_node needs langgraph: pip install 'toolrail[langgraph]'") from exc
    return ToolNode(tools(target, scope), **options)


def content_of(result: ToolResult) -> str | list[str | dict[Any, Any]]:
    """A result's content and contexts as message content: a string, or blocks with images."""
    content = visible_content(result)  # an error that shows nothing reads Error: <message>
    if len(content) == 1 and not result.contexts and type(content[0]) is TextContent:
        return content[0].text
    if result.contexts:
        content += tuple(block for message in result.contexts for block in message.content)
    if not any(isinstance(block, ImageContent) for block in content):
        return "\n".join(block.text for block in content)  # type: ignore[union-attr]
    return [
        {"type": "image", "base64": block.data, "mime_type": block.mime_type}
        if isinstance(block, ImageContent) else {"type": "text", "text": block.text}
        for block in content
    ]
