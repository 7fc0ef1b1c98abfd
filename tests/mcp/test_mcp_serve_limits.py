"""``toolrail serve`` at its edges (issue 27): a request over the HTTP limit, the limit
raised.

Real processes only: ``python -m toolrail serve`` on a small registry file, spoken to
with raw POSTs or ``toolrail.mcp.connect``. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx2
import pytest

import toolrail as tr
import toolrail.mcp
from mcp_fixtures.processes import free_port, http_process

WAIT = 20
FIVE_MB = 5 * 1024 * 1024
DEFAULT_LIMIT = 4 * 1024 * 1024

SOURCE = '''
import toolrail as tr

registry = tr.ToolRegistry()

@registry.tool
def size(text: str) -> int:
    """The length of a text."""
    return len(text)
'''

# A toolrail server on the SDK's app as it is: its bare 413, without the limit named.
BARE_SDK_SERVER = '''
import sys
import uvicorn
import toolrail as tr
import toolrail.mcp

sys.path.insert(0, sys.argv[2])
from tools import registry

app = toolrail.mcp.server(registry).streamable_http_app(max_request_body_size=1000)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
'''

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def size_call(call_id: str, length: int) -> tr.ToolCall:
    return tr.ToolCall(call_id=call_id, name="size", arguments={"text": "x" * length})


def call_request(request_id: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def request_size(result: tr.ToolResult, limit: str) -> int:
    """The request size the message of a refused call names (its whole text checked)."""
    assert result.error is not None
    pattern = rf"MCP server refused the request: it is (\d+) bytes, {re.escape(limit)}"
    named = re.fullmatch(pattern, result.error.message)
    assert named is not None, result.error.message
    return int(named[1])


@pytest.fixture
def target(tmp_path: Path) -> str:
    (tmp_path / "tools.py").write_text(SOURCE)
    return f"{tmp_path / 'tools.py'}:registry"


def serve_args(target: str, *extra: str) -> list[str]:
    return ["-m", "toolrail", "serve", target, *extra]


# ---- a request over the HTTP limit ---------------------------------------------------------


async def test_arguments_over_the_default_limit_fail_naming_it_and_the_session_lives_on(
    target: str,
) -> None:
    local = tr.ToolRegistry()
    port = free_port()
    with http_process(serve_args(target, "--http", f"127.0.0.1:{port}"), port) as url:
        async with toolrail.mcp.connect(local, url=url) as handle:
            refused = await asyncio.wait_for(local.execute(size_call("c1", FIVE_MB)), WAIT)
            small = await asyncio.wait_for(local.execute(size_call("c2", 3)), WAIT)
            connected = handle.connected

    assert refused.error is not None
    assert refused.error.code == "MCP_MESSAGE_TOO_LARGE"
    assert refused.error.type == "ToolError"
    assert request_size(refused, "larger than the server's limit of 4194304 bytes") > FIVE_MB
    assert small.value == 3
    assert connected is True


async def test_serve_max_request_bytes_raises_the_limit(target: str) -> None:
    local = tr.ToolRegistry()
    port = free_port()
    args = serve_args(target, "--http", f"127.0.0.1:{port}", "--max-request-bytes", "8388608")
    with http_process(args, port) as url:
        async with toolrail.mcp.connect(local, url=url):
            passed = await asyncio.wait_for(local.execute(size_call("c1", FIVE_MB)), WAIT)
            refused = await asyncio.wait_for(local.execute(size_call("c2", 9_000_000)), WAIT)

    assert passed.error is None
    assert passed.value == FIVE_MB
    assert refused.error is not None
    assert refused.error.code == "MCP_MESSAGE_TOO_LARGE"
    assert request_size(refused, "larger than the server's limit of 8388608 bytes") > 9_000_000


async def test_an_over_limit_post_gets_413_with_a_json_rpc_error_naming_the_limit(
    target: str,
) -> None:
    port = free_port()
    with http_process(serve_args(target, "--http", f"127.0.0.1:{port}"), port) as url:
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            response = await http.post(url, content=b"x" * FIVE_MB, headers=HEADERS)

    assert response.status_code == 413
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": "the request is larger than the server's limit of 4194304 bytes",
            "data": {"maxRequestBytes": DEFAULT_LIMIT},
        },
    }


async def test_a_server_whose_413_names_no_limit_still_fails_the_call_as_too_large(
    target: str, tmp_path: Path
) -> None:
    script = tmp_path / "bare.py"
    script.write_text(BARE_SDK_SERVER)
    local = tr.ToolRegistry()
    port = free_port()
    with http_process([str(script), str(port), str(tmp_path)], port) as url:
        async with toolrail.mcp.connect(local, url=url):
            refused = await asyncio.wait_for(local.execute(size_call("c1", 2000)), WAIT)
            small = await asyncio.wait_for(local.execute(size_call("c2", 3)), WAIT)

    assert refused.error is not None
    assert refused.error.code == "MCP_MESSAGE_TOO_LARGE"
    assert request_size(refused, "larger than the server accepts (HTTP 413)") > 2000
    assert small.value == 3


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "4"])
def test_serve_http_checks_max_request_bytes_before_serving(limit: Any) -> None:
    with pytest.raises(ValueError, match="max_request_bytes must be a positive int"):
        asyncio.run(
            toolrail.mcp.serve_http(tr.ToolRegistry(), port=free_port(), max_request_bytes=limit)
        )
