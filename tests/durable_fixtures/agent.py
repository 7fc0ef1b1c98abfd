"""An agent process for the durable tests: ``python agent.py <workdir> <step_id> <calls>``.

It runs one durable step (``calls`` is JSON: ``[[name, arguments], ...]``) on DBOS with
SQLite in ``workdir``, and says what it does as JSON lines on stdout, which the tests
read to choose when to ``kill -9`` it:

- ``{"event": "launched"}`` once DBOS runs (and has recovered what a dead process left);
- ``{"event": "pending", "ticket": ...}`` once a call waits for an approval;
- ``{"event": "body", "tool": ..., "arguments": ...}`` as a body starts;
- ``{"event": "batch", "results": [...]}`` with the step's results, then it exits 0.

Every body start is also appended to ``workdir/ran.jsonl`` and every observed result to
``workdir/observed.jsonl``, so that the tests count side effects across processes. The
tool ``hang`` blocks until ``workdir/release`` exists (it is checked before it blocks).
``TOOLRAIL_TEST_VERSION`` changes the description of ``delete`` (a changed tool), and
``TOOLRAIL_TEST_IDEMPOTENT`` names the idempotent tools (comma-separated).
``TOOLRAIL_TEST_GUARD=1`` adds a guard that denies ``delete`` (a policy that changed),
and ``TOOLRAIL_TEST_CODE=1`` presents the tools in code mode (a step of ``run_code`` calls).
``TOOLRAIL_TEST_APPROVER`` is the engine's approver's one answer (``pending``,
``allowed-once``, ...; none by default: every approval parks), ``TOOLRAIL_TEST_DROP=1``
leaves ``delete`` out of the registry (a tool that is gone), and
``TOOLRAIL_TEST_TAKEOVER`` and ``TOOLRAIL_TEST_EXECUTOR`` are DBOS's ``takeover_after``
(seconds) and ``executor_id``.
``TOOLRAIL_TEST_TEMPORAL=<host:port>`` runs the step on that Temporal server (with a
worker in this process, on the task queue ``TOOLRAIL_TEST_QUEUE``) instead of DBOS.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import toolrail as tr
from toolrail import durable


def say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def build(workdir: Path) -> tr.ToolRegistry:
    if os.environ.get("TOOLRAIL_TEST_CODE"):
        from toolrail.code import CodeSettings

        registry = tr.ToolRegistry(presentation="code", code=CodeSettings(type_check=False))
    else:
        registry = tr.ToolRegistry()
    ran = workdir / "ran.jsonl"

    def body(name: str, reply: str) -> Any:
        async def execute(arguments: Any, ctx: tr.RunContext) -> str:
            plain = tr.thaw(arguments)
            append(ran, {"tool": name, "arguments": plain, "pid": os.getpid()})
            say("body", tool=name, arguments=plain)
            if name == "hang":
                while not (workdir / "release").exists():  # noqa: ASYNC110 (another process releases it)
                    await asyncio.sleep(0.02)
            return f"{reply} {plain['x']}"
        return execute

    version = os.environ.get("TOOLRAIL_TEST_VERSION", "1")
    registry.register(tr.Tool(name="echo", description="Echo x.", parameters={"type": "object"},
                              execute=body("echo", "echo"), concurrency_safe=True))
    registry.register(tr.Tool(name="hang", description="Hang.", parameters={"type": "object"},
                              execute=body("hang", "hung"), concurrency_safe=True))
    if not os.environ.get("TOOLRAIL_TEST_DROP"):
        registry.register(tr.Tool(name="delete", description=f"Delete x (v{version}).",
                                  parameters={"type": "object"},
                                  execute=body("delete", "deleted"), requires_approval=True))
    if os.environ.get("TOOLRAIL_TEST_GUARD"):
        registry.guard(lambda execution: "deletes are frozen" if execution.name == "delete"
                       else None)
    observed = workdir / "observed.jsonl"
    registry.on_result(lambda execution, result: append(
        observed, {"durable_id": execution.durable_id, "text": result.text}))
    return registry


async def main(workdir: Path, step_id: str, spec: list[list[Any]]) -> None:
    idempotent = [t for t in os.environ.get("TOOLRAIL_TEST_IDEMPOTENT", "").split(",") if t]
    registry = build(workdir)
    async with registry:
        await on_engine(registry, workdir, step_id, spec, idempotent)


async def on_engine(registry: tr.ToolRegistry, workdir: Path, step_id: str,
                    spec: list[list[Any]], idempotent: list[str]) -> None:
    temporal = os.environ.get("TOOLRAIL_TEST_TEMPORAL")
    answer = os.environ.get("TOOLRAIL_TEST_APPROVER")
    approver = None if answer is None else (
        lambda request: durable.PENDING if answer == "pending" else answer)
    if temporal is None:
        engine = durable.DBOS(registry, name="agent", idempotent=idempotent,
                              database=f"sqlite:///{workdir / 'agent.sqlite'}",
                              approver=approver, takeover_after=float(
                                  os.environ.get("TOOLRAIL_TEST_TAKEOVER", "15")),
                              executor_id=os.environ.get("TOOLRAIL_TEST_EXECUTOR"))
        async with engine:
            await step(engine, step_id, spec)
        return
    from temporalio.client import Client

    client = await Client.connect(temporal)
    on_temporal = durable.Temporal(registry, client, name="agent", idempotent=idempotent,
                                   task_queue=os.environ["TOOLRAIL_TEST_QUEUE"],
                                   approver=approver)
    async with on_temporal.worker():
        await step(on_temporal, step_id, spec)


async def step(engine: Any, step_id: str, spec: list[list[Any]]) -> None:
    say("launched")
    calls = [tr.ToolCall(call_id=f"c{i}", name=name, arguments=arguments)
             for i, (name, arguments) in enumerate(spec)]
    running = asyncio.ensure_future(engine.run(step_id, calls))
    told: set[str] = set()
    while not running.done():
        for approval in await engine.pending():
            if approval.ticket not in told:
                told.add(approval.ticket)
                say("pending", ticket=approval.ticket)
        await asyncio.wait([running], timeout=0.05)
    batch = running.result()
    say("batch", results=[r.to_dict() for r in batch.results])


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])))
    if "TOOLRAIL_TEST_TEMPORAL" in os.environ:
        # temporalio's Rust threads can abort the interpreter's finalization
        # (temporalio/sdk-python#300, open): skip it, as its users do
        sys.stdout.flush()
        os._exit(0)
