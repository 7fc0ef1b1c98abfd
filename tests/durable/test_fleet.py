"""durable.md "Many agent processes", proved by chaos: three agent processes on one
record (DBOS on a real PostgreSQL server, DBOS on SQLite, Temporal), ``STEPS`` steps whose
refunds a person answers from a fourth process, and agents killed with ``SIGKILL`` at
random moments and restarted, until most steps are done. Then every step has finished,
and every side effect and answer is accounted for:

- a non-idempotent body started at most once; an idempotent one ended at least once;
- every ticket was answered exactly once (a second answer is refused), a refund ran iff
  it was allowed, and a rejected one is ``DENIED``;
- a call ends ``INTERRUPTED`` only when a process that ran it was killed between its
  marker and the record of its outcome: inside its body (a start without an end, by a
  killed process), after its body's last line, or before its first one (no start);
- no body was left half-way by a process that lived, an observer saw a result again only
  after the process that saw it first was killed, and every agent reads the same record.

Only killed agents may be taken over: one taken over while it lived (its beat late by
``takeover_after``) fails the test, naming it. ``TOOLRAIL_FLEET_SEED`` replays a run's
kills (the seed is printed, and in every failure).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from durable_fixtures.fleet import (
    APPROVER,
    IDEMPOTENT,
    TEMPORAL,
    TOOLS,
    answer,
    asks_a_person,
    name_of,
)

FLEET = Path(__file__).parent.parent / "durable_fixtures" / "fleet.py"
AGENTS = 3
STEPS = 200
CHAOS_UNTIL = 0.6  # the share of steps done when the kills stop, once there were
MIN_KILLS = 10  # at least these (a fast machine does 60% in a few seconds),
CHAOS_MAX = 30.0  # or the seconds after which they stop
FINISH = 150.0  # s for the fleet to end once the kills stop: a bound for a hang
# DBOS's takeover_after: a killed agent is taken over at once anyway (its pid is gone
# from this host), so this is only how late a live agent's beat may be (up to 1.7 s
# was seen on a loaded 2-core machine) before it is taken over while it lives
TAKEOVER_AFTER = "8"
TAKEN_OVER_ALIVE = "was taken over while this process lived"
INTERRUPTED = {"message": "tool call was interrupted by a restart; it may have run",
               "code": "INTERRUPTED", "type": "ToolInterruptedError"}
REJECTED = {"message": 'the user rejected tool "refund"', "code": "DENIED", "type": None}


@pytest.fixture(params=["postgres", "sqlite", "temporal"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the fleet keeps its record: a DBOS database URL or a Temporal server."""
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_database"))
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    return TEMPORAL + str(request.getfixturevalue("temporal_server"))


def records(path: Path) -> list[dict[str, Any]]:
    """A JSON-lines file another process appends to (a line being written is skipped)."""
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]


def wait_until(condition: Callable[[], bool], seconds: float, what: Callable[[], str],
               check: Callable[[], None] = lambda: None) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        check()
        if time.monotonic() > deadline:
            raise AssertionError(f"{what()}: not in {seconds} s")
        time.sleep(0.05)


@dataclass
class Fleet:
    """The agent processes (``durable_fixtures/fleet.py``), each slot restarted after a
    kill, and the person's process."""

    workdir: Path
    target: str
    seed: int
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    runs: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    killed: dict[int, float] = field(default_factory=dict)  # pid -> when
    person: subprocess.Popen[bytes] | None = None

    def _spawn(self, role: str, out: str, **env: str) -> subprocess.Popen[bytes]:
        with (self.workdir / f"{out}.out").open("wb") as stdout, \
                (self.workdir / f"{out}.err").open("wb") as stderr:
            return subprocess.Popen(
                [sys.executable, str(FLEET), str(self.workdir), self.target, role,
                 str(AGENTS), str(STEPS)], stdout=stdout, stderr=stderr,
                env={**os.environ, **env})

    def start(self, slot: int) -> None:
        run = self.runs[slot] = self.runs[slot] + 1
        env = {"TOOLRAIL_TEST_TAKEOVER": TAKEOVER_AFTER,
               "TOOLRAIL_TEST_SEED": f"{self.seed}-{slot}-{run}"}
        if slot == 0:  # a slot with a given executor_id: DBOS's startup recovery resumes it
            env["TOOLRAIL_TEST_EXECUTOR"] = "fleet-slot-0"
        self.processes[slot] = self._spawn(str(slot), f"agent-{slot}-{run}", **env)

    def kill(self, slot: int) -> bool:
        """``kill -9`` the agent in ``slot``; ``False`` if it had finished first."""
        process = self.processes[slot]
        process.send_signal(signal.SIGKILL)
        when = time.time()
        if process.wait() != -signal.SIGKILL:
            return False
        self.killed[process.pid] = when
        with (self.workdir / "kills.jsonl").open("a") as f:  # for a failure's reader
            f.write(json.dumps({"slot": slot, "pid": process.pid, "t": when}) + "\n")
        return True

    def start_person(self) -> None:
        self.person = self._spawn("approver", "approver")

    def check(self) -> None:
        """Fail at once, with its output, if a process exited when nobody killed it, or
        if a live agent was taken over (what follows assumes that only the killed are)."""
        for slot, process in self.processes.items():
            if process.poll() not in (None, 0):
                race = ("; processes that launch at once on a fresh PostgreSQL database "
                        "race on CREATE TABLE IF NOT EXISTS" if "pg_type_typname_nsp_index"
                        in self.stderr(slot) else "")
                raise AssertionError(f"agent {slot} exited {process.returncode} (seed "
                                     f"{self.seed}){race}:\n{self.stderr(slot)}")
        for err in self.workdir.glob("agent-*.err"):
            if TAKEN_OVER_ALIVE in (text := err.read_text()):
                raise AssertionError(
                    f"{err.stem} {TAKEN_OVER_ALIVE}: its beat was late by takeover_after="
                    f"{TAKEOVER_AFTER} s (seed {self.seed}). Its steps run elsewhere too, "
                    "and a step whose record write then fails with "
                    "DBOSWorkflowConflictIDError hangs in it: _DBOSRecord._flush leaves "
                    f"what was queued behind that write unwritten\n{text[-3000:]}")
        if self.person is not None and self.person.poll() not in (None, 0):
            raise AssertionError(f"the person's process exited {self.person.returncode}:\n"
                                 f"{(self.workdir / 'approver.err').read_text()[-3000:]}")

    def stderr(self, slot: int) -> str:
        return (self.workdir / f"agent-{slot}-{self.runs[slot]}.err").read_text()[-3000:]

    def running(self) -> bool:
        """Whether no agent has finished (one that has is not killed: it ran nothing)."""
        return all(process.poll() is None for process in self.processes.values())

    def launched(self, slot: int) -> bool:
        out = self.workdir / f"agent-{slot}-{self.runs[slot]}.out"
        return '"launched"' in out.read_text()

    def done(self) -> int:
        return len({r["step"] for r in records(self.workdir / "done.jsonl")})

    def finished(self, slot: int) -> dict[str, Any]:
        """The last run of ``slot``'s final line; it has exited 0."""
        out = (self.workdir / f"agent-{slot}-{self.runs[slot]}.out").read_text()
        (line,) = [json.loads(x) for x in out.splitlines() if '"finished"' in x]
        return dict(line)

    def stop(self) -> None:
        for process in [*self.processes.values(), self.person]:
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


@pytest.mark.timeout(240)
@pytest.mark.skipif(os.environ.get("TOOLRAIL_TEST_SECONDARY") == "1", reason=(
    "the fleet runs once per `dev.py test`, on its first interpreter: it proves the "
    "engines' semantics, which the other durable tests check on every interpreter"))
def test_a_fleet_killed_at_random_finishes_every_step_once_with_every_answer_accounted_for(
        target: str, tmp_path: Path) -> None:
    seed = int(os.environ.get("TOOLRAIL_FLEET_SEED", random.randrange(2**32)))
    print(f"seed={seed} (TOOLRAIL_FLEET_SEED replays the kills)")
    rng = random.Random(seed)
    fleet = Fleet(tmp_path, target, seed)
    try:
        started = time.monotonic()
        for slot in range(AGENTS):
            fleet.start(slot)
        # the person's inbox reads DBOS's tables, which the first launch creates
        wait_until(lambda: any(fleet.launched(slot) for slot in range(AGENTS)), 60,
                   lambda: "an agent's launch", fleet.check)
        fleet.start_person()
        # the kills start once steps are running, and stop once most are done
        wait_until(lambda: fleet.done() >= 5, 60, lambda: "the first steps", fleet.check)
        chaos = time.monotonic()
        while ((fleet.done() < CHAOS_UNTIL * STEPS or len(fleet.killed) < MIN_KILLS)
               and time.monotonic() - chaos < CHAOS_MAX and fleet.running()):
            time.sleep(rng.uniform(0.2, 1.0))  # the chaos, not a synchronization
            fleet.check()
            slot = rng.randrange(AGENTS)
            if not fleet.kill(slot):
                break
            time.sleep(rng.uniform(0, 0.3))
            fleet.start(slot)
        chaos = time.monotonic() - chaos
        wait_until(lambda: all(p.poll() is not None for p in fleet.processes.values()),
                   FINISH, lambda: f"the fleet's end (seed {seed}, {fleet.done()} steps "
                   "done)", fleet.check)
        fleet.check()
        (tmp_path / "stop").touch()
        assert fleet.person is not None
        fleet.person.wait(timeout=60)
        fleet.check()
        print(f"{len(fleet.killed)} kills in {chaos:.1f} s; all done after "
              f"{time.monotonic() - started:.1f} s")
        finals = [fleet.finished(slot) for slot in range(AGENTS)]
    finally:
        fleet.stop()
    check_the_record(tmp_path, finals, fleet.killed, seed)


def check_the_record(workdir: Path, finals: list[dict[str, Any]], killed: dict[int, float],
                     seed: int) -> None:
    where = f"(seed {seed}, {len(killed)} kills; files in {workdir})"
    assert len(killed) >= 3, f"too few kills to prove anything {where}"
    results = finals[0]["results"]
    for final in finals[1:]:
        assert final["results"] == results, f"two agents read different records {where}"
    assert sorted(results, key=int) == [str(n) for n in range(STEPS)], where
    assert all(len(batch) == len(TOOLS) for batch in results.values()), where

    ran: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for line in records(workdir / "ran.jsonl"):
        ran[line["step"], line["index"]].append(line)
    finished: dict[int, float] = {}  # step -> when an agent first had its result
    for line in records(workdir / "done.jsonl"):
        finished[line["step"]] = min(line["t"], finished.get(line["step"], line["t"]))
    observed: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in records(workdir / "observed.jsonl"):
        observed[line["durable_id"]].append(line)

    twice: list[Any] = []
    never: list[Any] = []
    wrong: list[Any] = []
    interrupted: list[Any] = []
    abandoned: list[Any] = []
    unseen: list[Any] = []
    kinds: Counter[str] = Counter()
    for step in range(STEPS):
        allowed = not asks_a_person(step) or answer(step) == "allowed-once"
        for index, tool in enumerate(TOOLS):
            result = results[str(step)][index]
            lines = ran[step, index]
            starts = [r for r in lines if r["phase"] == "start"]
            ends = [r for r in lines if r["phase"] == "end"]
            call = (step, index, tool)
            abandoned += [(call, r["pid"]) for r in starts
                          if r["pid"] not in killed and not any(
                              e["pid"] == r["pid"] for e in ends)]
            if tool not in IDEMPOTENT and len(starts) > 1:
                twice.append((call, [r["pid"] for r in starts]))
            text = "".join(b["text"] for b in result["content"] if b["type"] == "text")
            if tool == "refund" and not allowed:
                if result["error"] != REJECTED or starts:
                    wrong.append((call, result["error"], len(starts)))
            elif result["error"] == INTERRUPTED and tool not in IDEMPOTENT:
                kind = interruption(starts, ends, killed, finished[step])
                kinds[kind] += 1
                if kind == "unexplained":
                    interrupted.append((call, lines))
            elif result["error"] is not None or text != f"{tool} {step} {index}":
                wrong.append((call, result["error"], text))
            elif not ends:
                never.append(call)
            seen = observed[f"s{step}/{index}"]
            if (not seen or any(o["text"] != text for o in seen)
                    or any(o["pid"] not in killed for o in seen[:-1])):
                unseen.append((call, text, seen))
    print(f"INTERRUPTED calls: {dict(kinds)}")
    assert not twice, f"toolrail ran non-idempotent bodies more than once {where}: {twice}"
    assert not never, f"results with no body that ended {where}: {never}"
    assert not wrong, f"unexpected results (or a rejected refund ran) {where}: {wrong}"
    assert not interrupted, (
        f"INTERRUPTED calls that no kill explains (a live process's call ended "
        f"INTERRUPTED) {where}: {interrupted}")
    assert not abandoned, f"bodies a live process left half-way {where}: {abandoned}"
    assert not unseen, (f"results the observers did not see, saw otherwise, or saw again "
                        f"though the process that saw them lived {where}: {unseen}")
    check_the_answers(workdir, where)


def interruption(starts: list[dict[str, Any]], ends: list[dict[str, Any]],
                 killed: dict[int, float], finished: float) -> str:
    """Where the kill that made a call ``INTERRUPTED`` landed, or ``unexplained``. With
    no start, the kill came between its marker and its body's first line, which no line
    can attribute to a process: a kill before its step finished is all that is asked."""
    if not starts:
        return "before its body" if min(killed.values()) < finished else "unexplained"
    (start,) = starts
    if start["pid"] not in killed:
        return "unexplained"
    return "after its body" if ends else "inside its body"


def check_the_answers(workdir: Path, where: str) -> None:
    """Every ticket answered exactly once, as the person meant, and nothing else."""
    name = name_of(workdir)
    tickets = {f"{name}:s{n}/2": n for n in range(STEPS) if asks_a_person(n)}
    attempts = records(workdir / "answers.jsonl")
    ok = Counter(a["ticket"] for a in attempts if a["ended"] == "ok")
    assert {t: c for t, c in ok.items() if c != 1} == {}, (
        f"resume() took more than one answer to a ticket {where}; on Temporal, an answer "
        "signalled while the step's workflow task is in flight (a worker was killed "
        "holding it) is buffered by the server, in neither the memo nor the history that "
        "resume() reads, so the next answer is taken too, and dropped by the workflow")
    assert set(ok) == set(tickets), (f"tickets never answered: {sorted(set(tickets) - set(ok))}"
                                     f"; unknown: {sorted(set(ok) - set(tickets))} {where}")
    for a in attempts:  # a first answer to a ticket listed again: refused, as a second
        refused = f"ValueError: approval {a['ticket']} was already answered"
        if a["attempt"] == "again":
            assert a["ended"] == refused, f"a second answer was not refused {where}: {a}"
        else:
            assert a["ended"] in ("ok", refused), f"an answer went wrong {where}: {a}"
            assert a["outcome"] == answer(a["step"]), where

    inbox = json.loads((workdir / "inbox.json").read_text())
    assert inbox["waiting"] == [], f"approvals still waiting {where}"
    history = {a["ticket"]: a for a in inbox["history"]}
    assert set(history) == set(tickets), where
    for ticket, step in tickets.items():
        entry = history[ticket]
        assert (entry["status"], entry["outcome"], entry["answered_by"]) == (
            "answered", answer(step).value, APPROVER), f"{entry} {where}"
        assert entry["answered_at"] >= entry["asked_at"], f"{entry} {where}"
