"""A streamable-HTTP request larger than the server accepts, on both sides.

The SDK's server refuses a body over its limit (4 MiB by default) with HTTP 413 and the
text ``Request body too large``, which its client turns into an ``MCPError``
``-32603 Server returned an error response``: neither says what was too large, nor the
limit. ``serve_http`` answers instead with a JSON-RPC error naming the limit
(``refusal_body``), and ``connect``'s HTTP client (``SizeRefusals``) turns any 413, from
a toolrail server or another one, into a JSON-RPC error naming the request's size and
the limit when the server gave it; the call ends ``MCP_MESSAGE_TOO_LARGE``
(``refused_for_size``).
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_REQUEST

__all__ = ["LIMIT_KEY", "SizeRefusals", "refusal_body", "refused_for_size"]

LIMIT_KEY = "maxRequestBytes"
"""The limit, in the ``data`` of the JSON-RPC error of a refused request."""

_SIZE_KEY = "requestBytes"
_STATUS_KEY = "httpStatus"
_TOO_LARGE = 413


def refusal_body(limit: int) -> bytes:
    """The server's answer to a request body over ``limit`` bytes (sent with HTTP 413)."""
    error = {
        "code": INVALID_REQUEST,
        "message": f"the request is larger than the server's limit of {limit} bytes",
        "data": {LIMIT_KEY: limit},
    }
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()


class SizeRefusals(httpx2.AsyncBaseTransport):
    """``inner``, with a 413 answer made a JSON-RPC error the SDK's client passes on."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if response.status_code != _TOO_LARGE:
            return response
        try:
            body = await response.aread()
        finally:
            await response.aclose()
        limit = _limit_in(body)
        try:
            size: int | None = len(request.content)
        except httpx2.RequestNotRead:  # a streamed body: its size is not known here
            size = None
        it = "it" if size is None else f"it is {size} bytes,"
        message = (
            f"MCP server refused the request: {it} larger than the server accepts (HTTP 413)"
            if limit is None
            else f"MCP server refused the request: {it} larger than the server's limit of "
            f"{limit} bytes"
        )
        data = {_STATUS_KEY: _TOO_LARGE, LIMIT_KEY: limit, _SIZE_KEY: size}
        error = {"code": INVALID_REQUEST, "message": message, "data": data}
        return httpx2.Response(
            _TOO_LARGE,
            json={"jsonrpc": "2.0", "id": None, "error": error},
            request=request,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def refused_for_size(exc: MCPError) -> str | None:
    """The message of a call whose request was refused as too large; else ``None``."""
    data = exc.error.data
    if isinstance(data, dict) and data.get(_STATUS_KEY) == _TOO_LARGE:
        return exc.error.message
    return None


def _limit_in(body: bytes) -> int | None:
    """The limit a toolrail server names in its 413 answer."""
    try:
        data: Any = json.loads(body)["error"]["data"]
        limit = data[LIMIT_KEY]
    except (ValueError, TypeError, KeyError):
        return None
    return limit if isinstance(limit, int) and not isinstance(limit, bool) else None
