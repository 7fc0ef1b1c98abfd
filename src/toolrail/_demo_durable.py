"""``toolrail demo --durable``: a step killed and resumed, an approval answered from a
second process (durable.md), on DBOS with SQLite in a temporary directory.

The demo runs three kinds of process, all ``python -m toolrail._demo_durable``:

- ``agent DIR``: runs the durable step ``ticket-42/step-1`` and says what it does as
  JSON lines (``launched``, ``body``, ``pending``, ``batch``);
- ``approve DIR``: lists the waiting approvals and answers each, with no agent running;
- the demo itself, which starts them, reads them, and ``kill -9``s the agents.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import toolrail as tr

STEP_ID = "ticket-42/step-1"
CALLS = [
    ("search", {"query": "refund policy"}),
    ("search", {"query": "order 1017"}),
    ("delete_draft", {"draft": "reply-v1"}),
    ("send_reply", {"to": "ada@example.com", "draft": "reply-v2"}),
]


def registry(workdir: Path) -> tr.ToolRegistry:
    """The agent's tools: every body start is appended to ``ran.jsonl`` (the side effects
    the demo counts); ``send_reply`` blocks until ``workdir/release`` exists."""
    registry = tr.ToolRegistry()
    ran = workdir / "ran.jsonl"

    def started(tool: str, arguments: Any) -> None:
        with ran.open("a") as f:
            f.write(json.dumps({"tool": tool, "arguments": tr.thaw(arguments),
                                "pid": os.getpid()}) + "\n")
        _say("body", tool=tool)

    @registry.tool(concurrency_safe=True)
    async def search(query: str) -> str:
        """Search the help center."""
        started("search", {"query": query})
        return f"3 articles about {query!r}"

    @registry.tool(requires_approval=True)
    async def delete_draft(draft: str) -> str:
        """Delete a draft reply."""
        started("delete_draft", {"draft": draft})
        return f"deleted {draft}"

    @registry.tool
    async def send_reply(to: str, draft: str) -> str:
        """Send a draft to a customer."""
        started("send_reply", {"to": to, "draft": draft})
        while not (workdir / "release").exists():  # noqa: ASYNC110 (another process releases it)
            await asyncio.sleep(0.02)
        return f"sent {draft} to {to}"

    return registry


def _say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def _database(workdir: Path) -> str:
    return f"sqlite:///{workdir / 'agent.sqlite'}"


async def _agent(workdir: Path) -> None:
    from toolrail import durable

    async with durable.DBOS(registry(workdir), name="demo-agent",
                            database=_database(workdir)) as engine:
        _say("launched")
        calls = [tr.ToolCall(call_id=f"call_{i}", name=name, arguments=arguments)
                 for i, (name, arguments) in enumerate(CALLS)]
        step = asyncio.ensure_future(engine.run(STEP_ID, calls))
        told: set[str] = set()
        while not step.done():
            for approval in await engine.pending():
                if approval.ticket not in told:
                    told.add(approval.ticket)
                    _say("pending", ticket=approval.ticket, tool=approval.tool_name,
                         arguments=tr.thaw(approval.arguments))
            await asyncio.wait([step], timeout=0.05)
        _say("batch", results=[r.to_dict() for r in step.result().results])


async def _approve(workdir: Path) -> None:
    from toolrail import durable

    approvals = durable.Approvals(_database(workdir))
    try:
        for approval in await approvals.pending():
            await approvals.resume(approval.ticket, tr.ApprovalOutcome.ALLOWED_ONCE)
            _say("answered", ticket=approval.ticket, tool=approval.tool_name,
                 arguments=tr.thaw(approval.arguments))
    finally:
        approvals.close()


class _Process:
    """A child ``python -m toolrail._demo_durable <role> DIR``, read line by line."""

    def __init__(self, role: str, workdir: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "toolrail._demo_durable", role, str(workdir)],
            stdout=subprocess.PIPE, text=True)

    def until(self, event: str, **fields: Any) -> dict[str, Any]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            got: dict[str, Any] = json.loads(line)
            if got["event"] == event and all(got.get(k) == v for k, v in fields.items()):
                return got
        raise RuntimeError(f"the {event} event never came (exit {self.process.wait()})")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.close()

    def close(self) -> None:
        if self.process.stdout is not None:
            self.process.stdout.close()


def run_durable_demo() -> int:
    """The demo; its exit code."""
    try:
        import dbos  # noqa: F401
    except ImportError:
        print("toolrail demo --durable needs the dbos extra: pip install 'toolrail[dbos]'",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="toolrail-durable-") as name:
        return _Story(Path(name)).run()


class _Story:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def run(self) -> int:
        line = self._line
        line(f"a durable step on DBOS (SQLite in {self.workdir.name}): "
             + ", ".join(name for name, _ in CALLS))

        first = _Process("agent", self.workdir)
        pending = first.until("pending")
        line(f"agent {first.process.pid}: both searches committed; {pending['tool']} waits "
             f"for approval ({pending['ticket']})")
        first.kill()
        line(f"agent {first.process.pid}: killed with SIGKILL while the approval waits")

        approver = _Process("approve", self.workdir)
        answered = approver.until("answered")
        approver.process.wait()
        approver.close()
        line(f"approver {approver.process.pid} (no agent running): allowed "
             f"{answered['tool']}{_args(answered['arguments'])}")

        second = _Process("agent", self.workdir)
        second.until("body", tool="send_reply")
        line(f"agent {second.process.pid}: resumed the step; delete_draft ran; send_reply "
             "started")
        second.kill()
        line(f"agent {second.process.pid}: killed with SIGKILL inside send_reply's body")
        (self.workdir / "release").touch()

        restarted = time.perf_counter()
        third = _Process("agent", self.workdir)
        results = third.until("batch")["results"]
        elapsed = time.perf_counter() - restarted
        third.process.wait()
        third.close()
        line(f"agent {third.process.pid}: resumed the step; its last result came "
             f"{elapsed:.2f} s after the process started")
        for (name, _), result in zip(CALLS, results, strict=True):
            text = "".join(b["text"] for b in result["content"] if b["type"] == "text")
            code = result["error"]["code"] if result["error"] else "ok"
            line(f"  {name:<13} {code:<12} {text}")

        ran = [json.loads(x) for x in (self.workdir / "ran.jsonl").read_text().splitlines()]
        counts = {name: sum(r["tool"] == name for r in ran) for name, _ in CALLS}
        line("bodies run, across the three agents: "
             + ", ".join(f"{name} {count}" for name, count in counts.items()))
        line("send_reply is not idempotent: it came back INTERRUPTED for the model to "
             "judge, instead of running twice")
        ok = counts == {"search": 2, "delete_draft": 1, "send_reply": 1} and (
            results[3]["error"]["code"] == "INTERRUPTED")
        return 0 if ok else 1

    def _line(self, text: str) -> None:
        print(text, flush=True)


def _args(arguments: Any) -> str:
    return "(" + ", ".join(f"{k}={v!r}" for k, v in arguments.items()) + ")"


if __name__ == "__main__":
    role, directory = sys.argv[1], Path(sys.argv[2])
    asyncio.run(_agent(directory) if role == "agent" else _approve(directory))
