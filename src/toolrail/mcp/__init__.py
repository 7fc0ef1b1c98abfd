"""toolrail over MCP, both ways, on the official ``mcp`` SDK (2.3 or later).

* **Serve** a registry: ``server(registry, scope=...)`` is an SDK ``Server`` whose
  ``tools/list`` is ``registry.schemas(scope)`` and whose ``tools/call`` runs the full
  pipeline; ``serve_stdio`` and ``serve_http`` run it on the standard transports.
* **Use** a server's tools: ``attach(registry_or_scope, session)`` registers them as
  raw tools and returns an ``Attachment`` (``refresh()``, ``close()``);
  ``connect(registry_or_scope, command=... | url=... | server=...)`` opens the session
  too and re-syncs on ``notifications/tools/list_changed``.

Needs the ``mcp`` extra: ``pip install 'toolrail[mcp]'``.
"""

from __future__ import annotations

try:
    import mcp as _mcp  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is installed in development
    raise ImportError("toolrail.mcp needs the mcp extra: pip install 'toolrail[mcp]'") from exc

from ._client import Attachment, Changes, ConnectionFailed, attach, connect
from ._serve import serve_http, serve_stdio
from ._server import server

__all__ = [
    "Attachment",
    "Changes",
    "ConnectionFailed",
    "attach",
    "connect",
    "serve_http",
    "serve_stdio",
    "server",
]
