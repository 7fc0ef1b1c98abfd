"""pydantic-ai: a toolset whose tools are a registry scope's, run through ``execute``.

>>> from pydantic_ai import Agent
>>> registry = ToolRegistry()
>>> agent = Agent("test", toolsets=[ToolrailToolset(registry, scope="agent-1")])

- Tool names are ``toolrail.adapters.portable_names``' (one every provider accepts, a
  valid name unchanged, ``github.search`` as ``github_search``); each definition's
  ``metadata["toolrail_name"]`` is the registry's name, which each call runs.
- Tool definitions are ``schemas(scope)``, cached and rebuilt after an ``on_change``
  notification; arguments are validated by the registry (pydantic-ai only parses the
  JSON), so the toolset's validator accepts any object.
- A tool whose ``concurrency_safe`` is not exactly ``True`` is ``sequential``: pydantic-ai
  runs it as a barrier, as toolrail's scheduler would (a per-argument classifier is
  read as exclusive, for pydantic-ai decides per tool, not per call).
- Each call is ``execute(ToolCall(call_id=<pydantic-ai's tool_call_id>, ...))``.
- A success returns one string (text only), or a list of strings and
  ``BinaryContent`` images; a result with contexts returns ``ToolReturn`` whose
  ``content`` carries them, so pydantic-ai sends them as a user part after the results.
- A failure raises ``ToolFailed`` with the result's text (``Error: ...``): the model
  sees it and no retry budget is spent — except ``INVALID_ARGS``, raised as
  ``ModelRetry`` so pydantic-ai's own retry budget for bad arguments still applies.
- Cancelling the agent run cancels ``execute``, which awaits any started body first.

Call :meth:`ToolrailToolset.close` (or use it as a context manager's target through
the agent) when the toolset is no longer used: it stops listening for changes.

Needs the ``pydantic-ai`` extra: ``pip install 'toolrail[pydantic-ai]'``.
"""

from __future__ import annotations

import base64
from collections.abc import Hashable
from typing import Any

try:
    from pydantic_ai import ModelRetry, ToolFailed
    from pydantic_ai.messages import BinaryContent, ToolReturn, UserContent
    from pydantic_ai.tools import RunContext, ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
    from pydantic_core import SchemaValidator, core_schema
except ImportError as exc:  # pragma: no cover - the extra is installed in development
    raise ImportError(
        "toolrail.integrations.pydantic_ai needs the pydantic-ai extra: "
        "pip install 'toolrail[pydantic-ai]'"
    ) from exc

from .. import Content, ImageContent, Scope, TextContent, ToolArgsError, ToolRegistry, thaw
from ..adapters import portable_names, visible_content
from ._source import source_of

__all__ = ["ToolrailToolset", "content_of"]

_ANY = SchemaValidator(core_schema.any_schema())
_NAME = "toolrail_name"  # the key of the registry's name in a tool definition's metadata


class ToolrailToolset(AbstractToolset[Any]):
    """The tools ``registry`` shows ``scope`` (or a ``Scope`` handle's), for a pydantic-ai agent.

    Args:
        target: a ``ToolRegistry`` (viewed through ``scope``) or a ``Scope`` handle.
        scope: the scope key when ``target`` is a registry; ``None`` is the global view.
        max_retries: pydantic-ai's retry budget for invalid arguments, per tool.
        id: the toolset's id (pydantic-ai needs one for durable execution).
    """

    def __init__(self, target: ToolRegistry | Scope, scope: Hashable | None = None, *,
                 max_retries: int = 1, id: str | None = None) -> None:
        self._source = source_of(target, scope)
        self._max_retries = max_retries
        self._id = id
        self._tools: dict[str, ToolsetTool[Any]] | None = None
        self._listening = self._source.on_change(self._changed)

    @property
    def id(self) -> str | None:
        return self._id

    @property
    def label(self) -> str:
        return f"ToolrailToolset(scope={self._source.key!r})"

    def _changed(self) -> None:
        self._tools = None

    def close(self) -> None:
        """Stop following registry changes; the toolset still works, rebuilding each step."""
        self._listening()
        self._tools = None

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = self._tools
        if tools is None:
            tools = {}
            schemas = self._source.schemas()
            wire = portable_names(schema.name for schema in schemas)
            for schema in schemas:
                tool = self._source.get(schema.name)
                definition = ToolDefinition(
                    name=wire[schema.name],
                    description=schema.description,
                    parameters_json_schema=thaw(schema.parameters),
                    sequential=tool is None or tool.concurrency_safe is not True,
                    metadata={_NAME: schema.name},
                )
                tools[definition.name] = ToolsetTool(
                    toolset=self, tool_def=definition, max_retries=self._max_retries,
                    args_validator=_ANY,
                )
            if not self._listening.disposed:
                self._tools = tools
        return tools

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        name = (tool.tool_def.metadata or {}).get(_NAME, name)  # the registry's name
        result = await self._source.call(ctx.tool_call_id or "", name, tool_args)
        if result.is_error:
            error = result.error
            if error is not None and error.code == ToolArgsError.code:
                raise ModelRetry(error.message)
            raise ToolFailed("\n".join(block.text for block in visible_content(result)
                                        if type(block) is TextContent))
        content = content_of(result.content)
        if not result.contexts:
            return content
        extra: list[UserContent] = []
        for message in result.contexts:
            extra += _parts(message.content)
        return ToolReturn(return_value=content, content=extra)


def content_of(content: tuple[Content, ...]) -> Any:
    """A result's content as pydantic-ai return content: one string, or a list with images."""
    if len(content) == 1 and type(content[0]) is TextContent:
        return content[0].text
    if all(type(block) is TextContent for block in content):
        return "\n".join(block.text for block in content)  # type: ignore[union-attr]
    return _parts(content)


def _parts(content: tuple[Content, ...]) -> list[UserContent]:
    parts: list[UserContent] = []
    for block in content:
        if isinstance(block, ImageContent):
            parts.append(BinaryContent(base64.b64decode(block.data), media_type=block.mime_type))
        else:
            parts.append(block.text)
    return parts
