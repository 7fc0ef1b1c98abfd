"""The same work run through each peer framework's own execution path.

One module per peer. Each imports its framework at module level, so a missing
framework shows up as an ``ImportError`` when ``bench_peers`` imports the module, and
exposes:

* ``CALL``, ``STEP``, ``REGISTER``: the exact functions timed, as the table prints them;
* ``harness()``: an async context manager yielding a ``Harness``, the framework set up
  with the three tools of ``_work`` and ready to be timed;
* ``register(functions)``: register typed functions and list their schemas the way the
  framework hands them to a model; returns what keeps the tools alive and the listing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["PEERS", "Harness", "Peer"]


@dataclass(frozen=True, slots=True)
class Peer:
    """A peer's module under ``benchmarks.peers``, its display name, its package."""

    module: str
    name: str
    package: str  # the top-level import
    distribution: str  # what pip installs


PEERS = (
    Peer("langchain", "LangChain", "langchain_core", "langchain-core"),
    Peer("pydanticai", "pydantic-ai", "pydantic_ai", "pydantic-ai-slim"),
    Peer("openai_agents", "OpenAI Agents SDK", "agents", "openai-agents"),
    Peer("mcp_sdk", "MCP SDK", "mcp", "mcp"),
    Peer("fast_mcp", "FastMCP", "fastmcp", "fastmcp"),
    Peer("tool_registry", "toolregistry", "toolregistry", "toolregistry"),
)


@dataclass(frozen=True, slots=True)
class Harness:
    """One framework holding ``read``, ``read_sync`` and ``wait``; each callable is one timed unit.

    ``call_async`` and ``call_sync`` make one call of ``read`` / ``read_sync`` with
    ``ARGS``; ``step`` runs the ``STEP_SIZE`` calls of ``wait`` one model response holds.
    """

    call_async: Callable[[], Awaitable[object]]
    call_sync: Callable[[], Awaitable[object]]
    step: Callable[[], Awaitable[object]]
