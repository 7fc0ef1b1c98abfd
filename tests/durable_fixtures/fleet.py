"""One process of a fleet of agents for tests/durable/test_fleet.py:
``python fleet.py <workdir> <target> <agent-index> <n-agents> <n-steps>``.

``target`` is a DBOS database URL (``sqlite:///...`` or ``postgresql://...``) or
``temporal://<host:port>`` (a worker in this process, on the task queue of ``workdir``).
Step ``s<n>`` (``calls(n)``) is ``[echo, idem, refund, echo]``:

- ``echo`` is parallel-safe, ``idem`` is declared idempotent, ``refund`` requires
  approval. Each body appends ``{"step", "index", "tool", "pid", "phase": "start"}`` to
  ``workdir/ran.jsonl``, sleeps 0-50 ms, and appends the same line with ``"phase":
  "end"``; each observed result is appended to ``workdir/observed.jsonl``.
- The engine's approver parks the refund of step ``n`` for a person when
  ``asks_a_person(n)`` (two steps in three), and allows the others itself.

An agent runs its share of the steps (``n % n_agents == agent_index``), ``PARALLEL`` at a
time, appending ``{"step", "pid", "t"}`` to ``workdir/done.jsonl`` as each one ends; then it
joins every other step, so that it leaves no step of another agent's running in it (a
process that closes its engine abandons what runs there). It then prints
``{"event": "finished", "pid", "results": {step: [result, ...]}}`` and exits 0. A
restarted agent runs its share again: a finished step returns its record, one running
elsewhere is joined, and one its dead predecessor left is taken over.

``agent-index`` ``approver`` is the person's process instead: until ``workdir/stop``
exists, it answers every waiting approval with ``answer(n)`` as ``approver-4``, then
answers it a second time (which must be refused), appending every attempt and how it
ended to ``workdir/answers.jsonl``. At the stop it writes the inbox's history
(``pending(history=True)``) and what is still waiting to ``workdir/inbox.json``.

``TOOLRAIL_TEST_TAKEOVER`` and ``TOOLRAIL_TEST_EXECUTOR`` are DBOS's ``takeover_after``
and ``executor_id``; ``TOOLRAIL_TEST_SEED`` seeds the bodies' sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import toolrail as tr
from toolrail import durable

TOOLS = ("echo", "idem", "refund", "echo")
IDEMPOTENT = frozenset({"idem"})
PARALLEL = 10  # an agent's steps in flight at once
TEMPORAL = "temporal://"
APPROVER = "approver-4"


def name_of(workdir: Path) -> str:
    """The engine's name: one per test run (a Temporal server outlives a test)."""
    return "fleet-" + hashlib.sha256(str(workdir.resolve()).encode()).hexdigest()[:10]


def calls(step: int) -> list[tr.ToolCall]:
    return [tr.ToolCall(call_id=f"c{i}", name=name, arguments={"step": step, "index": i})
            for i, name in enumerate(TOOLS)]


def asks_a_person(step: int) -> bool:
    """Whether the engine's approver parks step ``step``'s refund (else it allows it)."""
    return step % 3 != 0


def answer(step: int) -> tr.ApprovalOutcome:
    """The person's answer to step ``step``'s refund."""
    return tr.ApprovalOutcome.ALLOWED_ONCE if step % 2 == 0 else tr.ApprovalOutcome.REJECTED


def append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def build(workdir: Path, rng: random.Random) -> tr.ToolRegistry:
    registry = tr.ToolRegistry()
    ran = workdir / "ran.jsonl"

    def body(name: str) -> Any:
        async def execute(arguments: Any, ctx: tr.RunContext) -> str:
            step, index = arguments["step"], arguments["index"]
            line = {"step": step, "index": index, "tool": name, "pid": os.getpid()}
            append(ran, {**line, "phase": "start", "t": time.time()})
            await asyncio.sleep(rng.uniform(0, 0.05))
            append(ran, {**line, "phase": "end", "t": time.time()})
            return f"{name} {step} {index}"
        return execute

    for name in ("echo", "idem", "refund"):
        registry.register(tr.Tool(
            name=name, description=f"{name.capitalize()}.", parameters={"type": "object"},
            execute=body(name), concurrency_safe=name != "refund",
            requires_approval=name == "refund"))
    observed = workdir / "observed.jsonl"
    registry.on_result(lambda execution, result: append(observed, {
        "durable_id": execution.durable_id, "text": result.text, "pid": os.getpid()}))
    return registry


def approver(request: tr.ApprovalRequest) -> Any:
    step = tr.thaw(request.arguments)["step"]
    return durable.PENDING if asks_a_person(step) else tr.ApprovalOutcome.ALLOWED_ONCE


@contextlib.asynccontextmanager
async def launched(registry: tr.ToolRegistry, workdir: Path,
                   target: str) -> AsyncIterator[Any]:
    """The engine, running in this process: DBOS launched, or a Temporal worker."""
    if target.startswith(TEMPORAL):
        from temporalio.client import Client

        client = await Client.connect(target.removeprefix(TEMPORAL))
        engine = durable.Temporal(registry, client, name=name_of(workdir),
                                  task_queue=name_of(workdir), idempotent=IDEMPOTENT,
                                  approver=approver)
        async with engine.worker():
            yield engine
        return
    async with durable.DBOS(registry, name=name_of(workdir), database=target,
                            idempotent=IDEMPOTENT, approver=approver,
                            takeover_after=float(os.environ.get("TOOLRAIL_TEST_TAKEOVER", "15")),
                            executor_id=os.environ.get("TOOLRAIL_TEST_EXECUTOR")) as dbos:
        yield dbos


async def agent(workdir: Path, target: str, index: int, agents: int, steps: int) -> None:
    rng = random.Random(os.environ.get("TOOLRAIL_TEST_SEED"))
    registry = build(workdir, rng)
    done = workdir / "done.jsonl"
    async with registry, launched(registry, workdir, target) as engine:
        say("launched")
        gate = asyncio.Semaphore(PARALLEL)

        async def one(step: int) -> list[dict[str, Any]]:
            async with gate:
                batch = await engine.run(f"s{step}", calls(step))
            append(done, {"step": step, "pid": os.getpid(), "t": time.time()})
            return [result.to_dict() for result in batch.results]

        async with asyncio.TaskGroup() as group:
            mine = {n: group.create_task(one(n)) for n in range(steps) if n % agents == index}
        async with asyncio.TaskGroup() as group:
            others = {n: group.create_task(one(n)) for n in range(steps) if n not in mine}
        results = {n: task.result() for n, task in sorted({**mine, **others}.items())}
        say("finished", pid=os.getpid(), results=results)


async def approve(workdir: Path, target: str) -> None:
    """The person: answers each waiting refund, then tries once more, until told to stop."""
    inbox = await approvals(workdir, target)
    log = workdir / "answers.jsonl"
    answered: set[str] = set()

    async def attempt(ticket: str, step: int, outcome: tr.ApprovalOutcome, kind: str) -> str:
        ended = await _resume(inbox, ticket, outcome)
        append(log, {"ticket": ticket, "step": step, "attempt": kind,
                     "outcome": outcome.value, "ended": ended, "t": time.time()})
        return ended

    try:
        while not (workdir / "stop").exists():
            for waiting in await inbox.pending():
                ticket, step = waiting.ticket, int(waiting.step_id.removeprefix("s"))
                if await attempt(ticket, step, answer(step), "first") == "ok":
                    answered.add(ticket)
                    await attempt(ticket, step, _other(answer(step)), "again")
            await asyncio.sleep(0.05)
        await _inbox(workdir, inbox, answered)
    finally:
        if not target.startswith(TEMPORAL):
            inbox.close()


async def approvals(workdir: Path, target: str) -> Any:
    """An object with ``pending()`` and ``resume()``: no DBOS launched, no worker."""
    if not target.startswith(TEMPORAL):
        return durable.Approvals(target, prefix=f"{name_of(workdir)}:")
    from temporalio.client import Client

    client = await Client.connect(target.removeprefix(TEMPORAL))
    return durable.Temporal(tr.ToolRegistry(), client, name=name_of(workdir),
                            task_queue=name_of(workdir))


async def _resume(inbox: Any, ticket: str, outcome: tr.ApprovalOutcome) -> str:
    try:
        await inbox.resume(ticket, outcome, answered_by=APPROVER)
    except ValueError as exc:
        return f"ValueError: {exc}"
    except KeyError as exc:
        return f"KeyError: {exc}"
    return "ok"


def _other(outcome: tr.ApprovalOutcome) -> tr.ApprovalOutcome:
    if outcome is tr.ApprovalOutcome.ALLOWED_ONCE:
        return tr.ApprovalOutcome.REJECTED
    return tr.ApprovalOutcome.ALLOWED_ONCE


async def _inbox(workdir: Path, inbox: Any, answered: set[str]) -> None:
    """Write the inbox as it ends: its history once it lists every ticket answered here
    (Temporal's lags its workflows by a moment), and what still waits."""
    deadline = time.monotonic() + 30
    while True:
        history = await inbox.pending(history=True)
        listed = {a.ticket for a in history if a.status == "answered"}
        if answered <= listed or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    waiting = await inbox.pending()
    (workdir / "inbox.json").write_text(json.dumps({
        "history": [_approval(a) for a in history],
        "waiting": [_approval(a) for a in waiting]}))


def _approval(approval: durable.PendingApproval) -> dict[str, Any]:
    return {"ticket": approval.ticket, "step_id": approval.step_id, "index": approval.index,
            "tool_name": approval.tool_name, "status": approval.status,
            "outcome": None if approval.outcome is None else approval.outcome.value,
            "answered_by": approval.answered_by, "asked_at": approval.asked_at,
            "answered_at": approval.answered_at}


def main(argv: list[str]) -> None:
    workdir, target = Path(argv[1]), argv[2]
    if argv[3] == "approver":
        asyncio.run(approve(workdir, target))
    else:
        asyncio.run(agent(workdir, target, int(argv[3]), int(argv[4]), int(argv[5])))
    if target.startswith(TEMPORAL):
        # temporalio's Rust threads can abort the interpreter's finalization
        # (temporalio/sdk-python#300, open): skip it, as its users do
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
