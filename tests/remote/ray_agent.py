"""An agent with its own local Ray cluster: ``python ray_agent.py <ray temp dir> <pid file>``.

The test that runs it kills the cluster's raylet with ``SIGKILL`` mid-call. The agent
says what it does as JSON lines on stdout:

- ``{"event": "running", "worker": <pid>}`` once a body, which never returns, runs on a
  Ray worker (the worker's pid, written by the body to the pid file);
- ``{"event": "result", "call": "in flight", "error": [message, code, type]}`` with that
  call's result, and the same with ``"call": "next"`` for a call made after it, with
  1 MB of arguments (its tool's timeout is 1 s);
- ``{"event": "finally"}`` from its ``finally`` block, then it shuts Ray down and exits 0;
- ``{"event": "no ray", "reason": ...}`` instead, if Ray cannot start here.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import ray

import toolrail as tr
from toolrail import remote


def say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


@tr.tool
async def hang(path: str) -> str:
    """Write the worker's pid, then never return."""
    Path(path).write_text(str(os.getpid()))  # noqa: ASYNC240 (a few bytes, once)
    await asyncio.Event().wait()
    return "never"


@tr.tool(timeout=1)
def measure(text: str) -> int:
    """Return the length of a text."""
    return len(text)


def error_of(result: tr.ToolResult) -> list[str | None] | None:
    error = result.error
    return None if error is None else [error.message, error.code, error.type]


async def main(pid_file: Path) -> None:
    executor = remote.Ray()
    registry = tr.ToolRegistry()
    registry.register(executor.tool(hang))
    registry.register(executor.tool(measure))
    try:
        call = tr.ToolCall(call_id="a", name="hang", arguments={"path": str(pid_file)})
        in_flight = asyncio.ensure_future(registry.execute(call))
        while not pid_file.exists() or not pid_file.read_text():  # noqa: ASYNC110, ASYNC240
            await asyncio.sleep(0.01)
        say("running", worker=int(pid_file.read_text()))  # noqa: ASYNC240
        say("result", call="in flight", error=error_of(await in_flight))
        result = await registry.execute(tr.ToolCall(call_id="b", name="measure",
                                                    arguments={"text": "x" * 1_000_000}))
        say("result", call="next", error=error_of(result))
    finally:
        say("finally")


if __name__ == "__main__":
    try:
        ray.init(_node_ip_address="127.0.0.1", _temp_dir=sys.argv[1], include_dashboard=False,
                 num_cpus=1, log_to_driver=False)
    except Exception as exc:
        say("no ray", reason=f"{type(exc).__name__}: {exc}")
        sys.exit(0)
    try:
        asyncio.run(main(Path(sys.argv[2])))
    finally:
        ray.shutdown()
