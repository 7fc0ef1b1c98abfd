"""One DBOS application, configured as an application configures its own (durable.md,
``dbos=``): toolrail's durable engines and pydantic-ai's ``DBOSAgent`` on one database.

DBOS is one instance per process, so ``bench_durable`` runs this in a process of its own
for each database, and reads what it prints, one line of JSON:

    python -m benchmarks.durable_app time sqlite:///d/bench.sqlite --repeat 40
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=d/cg.out \\
        python -m benchmarks.durable_app count sqlite:///d/bench.sqlite

(``in_process`` and ``instructions`` run it so, from ``bench_durable``.)

The cases, run once each per round, in turn, after ``WARM_UP`` rounds:

* ``plain``: ``registry.run`` of ``CALLS`` calls of a tool that returns at once;
* ``durable``: the same calls as a durable step (``engine.run``, a fresh ``step_id``);
* ``idempotent``: the same, the tool declared idempotent;
* ``workflow``: a durable step of no calls: its workflow's own records alone;
* ``agent``: a ``DBOSAgent`` run whose ``TestModel`` calls ``CALLS`` tools in one
  response, each tool a ``@DBOS.step`` (pydantic-ai's way to make a tool durable), then
  answers; ``agent-sequential`` the same with ``parallel_execution_mode="sequential"``;
* ``agent-inline``: the same run, its tools plain functions (no record: after a crash,
  they all run again);
* ``agent-answer``: a run whose model answers at once, with no tool call.

``time`` prints each case's ms per run; on SQLite, the statements it sent to DBOS's
database from the threads that run it (the event loop and DBOS's executor, not DBOS's
pollers), counted by kind. ``count`` runs each case in a phase of its own under
callgrind, instrumented from its start to its end and dumped under the case's name, then
an empty and an idle phase: what a phase and the background threads cost, to subtract.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import toolrail as tr

ROOT = Path(__file__).resolve().parent.parent
CALLS = 10
CASES = (
    "plain",
    "durable",
    "idempotent",
    "workflow",
    "agent",
    "agent-sequential",
    "agent-inline",
    "agent-answer",
)
AGENTS = {case for case in CASES if case.startswith("agent")}
WARM_UP = 3  # rounds of every case before anything is measured or counted

Case = Callable[[int], Awaitable[Any]]  # one run of a case, given the round's number


def registry(name: str = "noop", *, requires_approval: bool = False) -> tr.ToolRegistry:
    """One tool, ``noop`` by default, that returns at once and may run beside others (or,
    ``requires_approval``, one that asks first)."""
    registry = tr.ToolRegistry()

    async def noop(arguments: Any, ctx: tr.RunContext) -> str:
        return "done"

    registry.register(
        tr.Tool(
            name=name,
            description=name,
            parameters={"type": "object"},
            execute=noop,
            concurrency_safe=not requires_approval,
            requires_approval=requires_approval,
        )
    )
    return registry


def calls(count: int = CALLS) -> list[tr.ToolCall]:
    return [tr.ToolCall(call_id=f"c{i}", name="noop") for i in range(count)]


def _tools(prefix: str, *, steps: bool) -> list[Callable[[], Awaitable[str]]]:
    """``CALLS`` tools without parameters; with ``steps``, each a DBOS step."""
    from dbos import DBOS

    out: list[Callable[[], Awaitable[str]]] = []
    for i in range(CALLS):

        async def tool() -> str:
            return "done"

        tool.__name__ = tool.__qualname__ = f"tool_{i}"
        out.append(DBOS.step(name=f"{prefix}.tool_{i}")(tool) if steps else tool)
    return out


def _agents(wanted: set[str]) -> dict[str, Any]:
    """The ``DBOSAgent`` of each agent case in ``wanted``, by case. Registered before
    DBOS launches, as DBOS wants; none where pydantic-ai is not installed."""
    if not wanted & AGENTS or importlib.util.find_spec("pydantic_ai") is None:
        return {}
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.dbos import DBOSAgent
    from pydantic_ai.models.test import TestModel

    shapes = {
        "agent": (True, "parallel_ordered_events"),
        "agent-sequential": (True, "sequential"),
        "agent-inline": (False, "parallel_ordered_events"),
        "agent-answer": (False, "parallel_ordered_events"),
    }
    agents = {}
    for case, (steps, mode) in shapes.items():
        if case not in wanted:
            continue
        model = TestModel(call_tools=[]) if case == "agent-answer" else TestModel()
        agent = Agent(model, name=case.replace("-", "_"), tools=_tools(case, steps=steps))
        with warnings.catch_warnings():  # pydantic-ai 2 deprecates it for DBOSDurability
            warnings.filterwarnings("ignore", message="`DBOSAgent` is deprecated")
            agents[case] = DBOSAgent(agent, parallel_execution_mode=mode)  # type: ignore[arg-type]
    return agents


@dataclass(frozen=True, slots=True)
class App:
    """The launched application: its cases, and its SQLAlchemy engine on SQLite."""

    cases: dict[str, Case]
    engine: Any

    async def warm_up(self) -> None:
        for i in range(-WARM_UP, 0):
            for case in self.cases.values():
                await case(i)


@asynccontextmanager
async def application(database: str, wanted: tuple[str, ...] = CASES) -> AsyncIterator[App]:
    """The application's DBOS on ``database``, configured as toolrail configures its own
    (``durable.sqlite_engine`` on SQLite, a 50 ms notification poll), launched, with the
    cases in ``wanted``."""
    from dbos import DBOS

    from toolrail import durable

    engine = durable.sqlite_engine(database) if database.startswith("sqlite:") else None
    config: Any = {
        "name": "bench",
        "system_database_url": database,
        "application_version": "bench",
        "log_level": "WARNING",
        "notification_listener_polling_interval_sec": 0.05,
    }
    if engine is not None:
        config["system_database_engine"] = engine
    app = DBOS(config=config)
    agents = _agents(set(wanted))
    tools = registry()
    steps = durable.DBOS(tools, name="bench", database=database, dbos=app)
    reads = durable.DBOS(
        tools, name="bench-idempotent", database=database, dbos=app, idempotent={"noop"}
    )
    await steps.launch()
    await reads.launch()
    DBOS.launch()
    batch = calls()
    every: dict[str, Case] = {
        "plain": lambda i: tools.run(batch),
        "durable": lambda i: steps.run(f"step-{i}", batch),
        "idempotent": lambda i: reads.run(f"step-{i}", batch),
        "workflow": lambda i: steps.run(f"workflow-{i}", []),
        **{case: functools.partial(_agent_run, agent) for case, agent in agents.items()},
    }
    try:
        yield App({case: every[case] for case in wanted if case in every}, engine)
    finally:
        await steps.aclose()
        await reads.aclose()
        DBOS.destroy(workflow_completion_timeout_sec=0)
        if engine is not None:
            engine.dispose()


async def _agent_run(agent: Any, i: int) -> Any:
    return await agent.run("go")


class Statements:
    """The statements sent to one SQLAlchemy engine by the threads that run workflows,
    by case: transactions (commits), reads, and writes by statement and table."""

    def __init__(self, engine: Any) -> None:
        import sqlalchemy as sa

        self.case = ""
        self.counts: Counter[tuple[str, str]] = Counter()
        sa.event.listen(engine, "commit", self._commit)
        sa.event.listen(engine, "after_cursor_execute", self._executed)

    @staticmethod
    def _ours() -> bool:
        name = threading.current_thread().name
        return name == "MainThread" or name.startswith("dbos-executor")

    def _commit(self, connection: Any) -> None:
        if self.case and self._ours():
            self.counts[self.case, "transactions"] += 1

    def _executed(self, connection: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not self.case or not self._ours():
            return
        words = statement.split()
        verb = words[0].upper()
        if verb in ("INSERT", "UPDATE", "DELETE"):  # DBOS's: each of one row
            table = words[1 if verb == "UPDATE" else 2].split(".")[-1].strip('"')
            self.counts[self.case, "writes"] += 1
            self.counts[self.case, f"{verb} {table}"] += 1
        elif verb == "SELECT":
            self.counts[self.case, "reads"] += 1


async def timed(database: str, repeat: int, wanted: tuple[str, ...]) -> dict[str, Any]:
    """Each case's ms per run (median, min, max) over ``repeat`` rounds and, on SQLite,
    its statements per run; then a durable step that finished, run again (its record)."""
    async with application(database, wanted) as app:
        await app.warm_up()
        counter = None if app.engine is None else Statements(app.engine)
        samples: dict[str, list[float]] = {case: [] for case in app.cases}
        for i in range(repeat):
            for case, run in app.cases.items():
                if counter is not None:
                    counter.case = case
                start = time.perf_counter()
                await run(i)
                samples[case].append((time.perf_counter() - start) * 1e3)
                if counter is not None:
                    counter.case = ""
        replay = app.cases.get("durable")
        start = time.perf_counter()
        for i in range(repeat):
            if replay is not None:
                await replay(i)  # recorded: it returns the Batch
        replayed = (time.perf_counter() - start) / repeat * 1e3
    out: dict[str, Any] = {"replayed": replayed, "cases": {}}
    for case, values in samples.items():
        out["cases"][case] = {
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
            "statements": {},
        }
    if counter is not None:
        for (case, kind), count in counter.counts.items():
            out["cases"][case]["statements"][kind] = count / repeat
    return out


async def counted(
    database: str, iterations: int, idle: float, wanted: tuple[str, ...]
) -> dict[str, Any]:
    """Each case, ``runs(case, iterations)`` times, in a callgrind phase of its own; then
    an ``empty`` phase (what a phase costs with nothing in it: callgrind_control's round
    trips, and the background threads meanwhile) and an ``idle`` one (``idle`` seconds of
    sleep: the background threads' instructions per second). Each phase's runs and the
    seconds its runs took, by name."""
    phases: dict[str, Any] = {}
    async with application(database, wanted) as app:
        await app.warm_up()
        # What the imports and the launch left is long-lived: frozen, it is not walked by
        # a full collection that falls in one phase and not another.
        gc.collect()
        gc.freeze()
        _callgrind("--instr=on")
        phased = [(case, run, runs(case, iterations)) for case, run in app.cases.items()]
        phased += [("empty", _idle(0), 0), ("idle", _idle(idle), 1)]
        for case, run, count in phased:
            _callgrind("--zero")
            start = time.perf_counter()
            for i in range(count):
                await run(i)
            phases[case] = {"runs": count, "seconds": time.perf_counter() - start}
            _callgrind(f"--dump={case}")
        _callgrind("--instr=off")
    return phases


def _idle(seconds: float) -> Case:
    return lambda i: asyncio.sleep(seconds)


def runs(case: str, iterations: int) -> int:
    """How many runs of ``case`` its phase counts: a ``DBOSAgent`` run, half as many; a
    plain ``run``, ten times as many."""
    if case == "plain":
        return iterations * 10
    return max(1, iterations // 2) if case in AGENTS else iterations


def _callgrind(command: str) -> None:
    """Send ``command`` (callgrind_control's) to the callgrind that runs this process."""
    subprocess.run(
        ["callgrind_control", command, str(os.getpid())],
        check=True,
        capture_output=True,
        timeout=120,
    )


def in_process(args: list[str], *, timeout: float, prefix: tuple[str, ...] = ()) -> Any:
    """What this module printed, run with ``args`` in a process of its own (under
    ``prefix``, a command such as valgrind's), with ``PYTHONHASHSEED=0`` as ``bench
    --ir``'s workload runs."""
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "benchmarks.durable_app", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"durable_app {args[0]} exited {done.returncode}:\n{done.stderr[-3000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


@dataclass(frozen=True, slots=True)
class Instructions:
    """Each case's instructions per run and its phase's runs, and what was subtracted:
    an empty phase's count and the background threads' per second."""

    per_run: dict[str, float]
    runs: dict[str, int]
    per_phase: float
    per_second: float


def instructions(directory: Path, cases: str) -> Instructions:
    """``count`` of ``cases`` under callgrind, in ``directory``: a case's figure is its
    phase's count, less the empty phase's and the background's for as long as it ran,
    over its runs."""
    out = directory / "callgrind.out"
    phases = in_process(
        ["count", f"sqlite:///{directory / 'counted.sqlite'}", "--cases", cases],
        prefix=(
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
        ),
        timeout=1800,
    )
    totals = {}
    for dump in directory.glob("callgrind.out.*"):
        text = dump.read_text()
        phase = re.search(r"^desc: Trigger: dump (\S+)$", text, re.MULTILINE)
        total = re.search(r"^totals: (\d+)$", text, re.MULTILINE)
        if phase and total:
            totals[phase.group(1)] = int(total.group(1))
    empty = totals.pop("empty")
    del phases["empty"]
    background = (totals.pop("idle") - empty) / phases.pop("idle")["seconds"]
    return Instructions(
        per_run={
            case: (totals[case] - empty - background * phase["seconds"]) / phase["runs"]
            for case, phase in phases.items()
        },
        runs={case: phase["runs"] for case, phase in phases.items()},
        per_phase=empty,
        per_second=background,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    timing = commands.add_parser("time", help="each case's ms per run, interleaved")
    timing.add_argument("--repeat", type=int, default=40)
    counting = commands.add_parser("count", help="each case's phase under callgrind")
    counting.add_argument("--iterations", type=int, default=20)
    counting.add_argument("--idle", type=float, default=5.0, help="seconds")
    for command in (timing, counting):
        command.add_argument("database")
        command.add_argument(
            "--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}"
        )
    args = parser.parse_args(argv)
    wanted = tuple(args.cases.split(","))
    if unknown := set(wanted) - set(CASES):
        parser.error(f"unknown cases: {', '.join(sorted(unknown))}")
    if args.command == "time":
        out = asyncio.run(timed(args.database, args.repeat, wanted))
    else:
        out = asyncio.run(counted(args.database, args.iterations, args.idle, wanted))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
