"""Instructions per call under callgrind, held against a baseline kept in the repo.

    python3 scripts/dev.py bench --ir                     # count, compare with the baseline
    python3 scripts/dev.py bench --ir --against 334927d   # and that commit's, side by side
    python3 scripts/dev.py bench --ir --update-baseline   # record these counts as the baseline

``ir_workload.py`` runs under ``valgrind --tool=callgrind`` once with every kind (raw
``execute``, typed ``execute``, a 10-call ``run``, the typed floor) at ``N1`` iterations,
and once per kind with that kind at ``N2``, all after the same warm-up; a kind's figure
is the difference of the two counts over ``N2 - N1``, which cancels the interpreter's
start-up and the imports. With ``PYTHONHASHSEED=0`` the figures repeat from run to run
within a few hundredths of a per cent (addresses still vary), whatever else the machine
is doing, so the runs go in parallel, one per core.

The baseline (``ir_baseline.json``) is keyed by the Python minor version, since each
interpreter executes a different number of instructions for the same code, and records
the commit it was measured at: a figure more than 3% above it is a regression, printed
with the commits to look at, and the exit status is 1. A machine without valgrind skips
the whole thing with one line and exit status 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from importlib.metadata import version as installed_version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = Path(__file__).resolve().parent / "ir_workload.py"
BASELINE = Path(__file__).resolve().parent / "ir_baseline.json"
REFRESH = "python3 scripts/dev.py bench --ir --update-baseline"
THRESHOLD = 0.03  # a rise above this fraction of the baseline is a regression
BATCH = 10  # calls in one ``run`` of the workload

# kind: (label, N1, N2). A ``run`` iteration is a whole batch, so it needs fewer.
KINDS: dict[str, tuple[str, int, int]] = {
    "raw": ("execute(): raw async tool", 200, 1200),
    "typed": ("execute(): typed async tool, 3 scalar parameters", 200, 1200),
    "run": (f"run(): {BATCH} raw calls, per batch", 40, 240),
    "floor": ("floor: TypeAdapter.validate_python + snapshot + await fn(**args)", 200, 1200),
}
COMPARED = ("raw", "typed", "run")  # the floor is pydantic's work, not toolrail's
AGAINST = ("raw", "typed", "run")  # measured at --against REV as well

_COLLECTED = re.compile(r"^==\d+== Collected : (\d+)\s*$", re.MULTILINE)


def parse_collected(stderr: str) -> int:
    """The instruction count in callgrind's summary (``==pid== Collected : <n>``)."""
    found = _COLLECTED.findall(stderr)
    if len(found) != 1:
        tail = "\n".join(stderr.splitlines()[-20:])
        raise ValueError(f"expected one 'Collected : <n>' line from callgrind, "
                         f"found {len(found)}; its output ended with:\n{tail}")
    return int(found[0])


def per_call(first: int, second: int, n1: int, n2: int) -> int:
    """Instructions per iteration from the counts of ``n1`` and ``n2`` iterations."""
    return round((second - first) / (n2 - n1))


@dataclass(frozen=True, slots=True)
class Baseline:
    """The counts recorded for one Python minor version, and what they were measured at."""

    commit: str
    python: str
    pydantic: str
    counts: Mapping[str, int]


def load_baseline(path: Path, python: str) -> Baseline | None:
    """The baseline for Python ``python`` (``"3.11"``), or ``None`` if there is none."""
    if not path.exists():
        return None
    entry = json.loads(path.read_text()).get(python)
    if entry is None:
        return None
    return Baseline(commit=entry["commit"], python=entry["python"],
                    pydantic=entry["pydantic"], counts=dict(entry["counts"]))


def write_baseline(path: Path, python: str, baseline: Baseline) -> None:
    """Record ``baseline`` for ``python``, keeping the other versions' entries."""
    entries = json.loads(path.read_text()) if path.exists() else {}
    entries[python] = {"commit": baseline.commit, "python": baseline.python,
                       "pydantic": baseline.pydantic, "counts": dict(baseline.counts)}
    path.write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n")


def commits_to_look_at(baseline_commit: str, head: str, dirty: bool) -> str:
    """Where a change since ``baseline_commit`` can be, as the regression message says it."""
    base, tip = baseline_commit[:7], head[:7]
    if baseline_commit == head:
        if dirty:
            return f"look at the uncommitted changes (git diff {base} -- src)"
        return (f"the tree is the baseline's commit {base}: the interpreter, pydantic "
                "or valgrind changed, not toolrail")
    where = f"look at commits {base}..{tip} (git log --oneline {base}..{tip} -- src)"
    return where + " and the uncommitted changes" if dirty else where


@dataclass(frozen=True, slots=True)
class Verdict:
    """The comparison with the baseline: lines to print and the kinds that regressed."""

    lines: tuple[str, ...]
    regressions: tuple[str, ...]


def compare(counts: Mapping[str, int], baseline: Baseline | None, *, python: str,
            pydantic: str, head: str, dirty: bool, threshold: float = THRESHOLD) -> Verdict:
    """Hold ``counts`` to ``baseline``: a rise above ``threshold`` is a regression."""
    if baseline is None:
        return Verdict((f"no baseline for Python {python} in {BASELINE.name}: the figures "
                        f"above are not compared; record them with `{REFRESH}`",), ())
    lines = [f"against the baseline for Python {python}, measured at {baseline.commit[:7]} "
             f"(Python {baseline.python}, pydantic {baseline.pydantic}):"]
    regressions = []
    for kind in COMPARED:
        label = KINDS[kind][0]
        now, then = counts[kind], baseline.counts.get(kind)
        if then is None:
            lines.append(f"{kind}: no baseline figure for {label!r} (the baseline has "
                         f"{', '.join(sorted(baseline.counts)) or 'none'}); "
                         f"refresh it with `{REFRESH}`")
            continue
        change = now / then - 1
        unit = "per batch" if kind == "run" else "per call"
        figures = f"{now:,} instructions {unit} against {then:,}, {change:+.2%}"
        if change > threshold:
            regressions.append(kind)
            lines.append(f"REGRESSION {kind}: {figures} (over {threshold:.0%}); "
                         + commits_to_look_at(baseline.commit, head, dirty))
        elif change < -threshold:
            lines.append(f"{kind}: {figures}: fewer; refresh the baseline with `{REFRESH}`")
        else:
            lines.append(f"{kind}: {figures}")
    if pydantic != baseline.pydantic:
        lines.append(f"note: this run has pydantic {pydantic}, the baseline "
                     f"{baseline.pydantic}; part of a change may be pydantic's")
    if not regressions:
        lines.append(f"no figure rose more than {threshold:.0%}")
    return Verdict(tuple(lines), tuple(regressions))


def rows(counts: Mapping[str, int], against: Mapping[str, int] | None = None,
         rev: str | None = None) -> list[str]:
    """The table: instructions per call in this tree and, given one, at ``rev``."""
    per_batch = {**counts, "per call": counts["run"] / BATCH}
    other = {**against, "per call": against["run"] / BATCH} if against else {}
    labels = {kind: label for kind, (label, _, _) in KINDS.items()}
    labels["per call"] = f"run(): the same, per call (batch / {BATCH})"
    header = f"{'instructions per call':<66}{'this tree':>12}"
    lines = [header + (f"{rev:>12}{'ratio':>9}" if against else "")]
    for kind in ("raw", "typed", "run", "per call", "floor"):
        line = f"{labels[kind]:<66}{per_batch[kind]:>12,.0f}"
        if against:
            then = other.get(kind)
            line += (f"{then:>12,.0f}{per_batch[kind] / then:>8.2f}x" if then
                     else f"{'-':>12}")
        lines.append(line)
    return lines


def bars(counts: Mapping[str, int], against: Mapping[str, int] | None = None,
         rev: str | None = None) -> list[str]:
    """The issue's bars, as ratios of instruction counts measured in this run."""
    lines = []
    if against and rev:
        lines.append(f"raw execute() / at {rev} = {counts['raw'] / against['raw']:.3f}x "
                     "(bar: at most 1.03x)")
    lines += [
        f"typed execute() / its floor = {counts['typed'] / counts['floor']:.2f}x "
        "(bar: at most 3x)",
        f"run() per call / raw execute() = {counts['run'] / BATCH / counts['raw']:.2f}x "
        "(bar: at most 2.5x)",
    ]
    return lines


def count(src: Path, iterations: Mapping[str, int]) -> int:
    """Instructions callgrind counts for one workload process with ``src``'s toolrail."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(src)}
    argv = [str(part) for pair in iterations.items() for part in pair]
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
         sys.executable, str(WORKLOAD), *argv],
        env=env, capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the workload {' '.join(argv)} with {src} failed:\n"
                           f"{done.stderr[-3000:]}")
    imported = done.stdout.splitlines()[0].removeprefix("toolrail ")
    if Path(imported).resolve() != (src / "toolrail" / "__init__.py").resolve():
        raise RuntimeError(f"meant to measure {src}, but toolrail came from {imported}")
    return parse_collected(done.stderr)


def plan(kinds: tuple[str, ...]) -> dict[str | None, dict[str, int]]:
    """The processes to count for ``kinds``: every kind at ``N1`` (key ``None``), then,
    for each kind, the same with that kind at ``N2``."""
    base = {kind: KINDS[kind][1] for kind in kinds}
    return {None: base, **{kind: {**base, kind: KINDS[kind][2]} for kind in kinds}}


def measure(trees: Mapping[str, tuple[Path, tuple[str, ...]]]) -> dict[str, dict[str, int]]:
    """Per-call counts for each tree's kinds; the callgrind runs go one per core."""
    jobs = [(name, kind, src, iterations) for name, (src, kinds) in trees.items()
            for kind, iterations in plan(kinds).items()]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        counted = pool.map(lambda job: count(job[2], job[3]), jobs)
        totals = {(name, kind): total for (name, kind, _, _), total
                  in zip(jobs, counted, strict=True)}
    return {
        name: {kind: per_call(totals[name, None], totals[name, kind], *KINDS[kind][1:])
               for kind in kinds}
        for name, (_, kinds) in trees.items()
    }


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


@contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """A detached ``git worktree`` of ``rev`` in a temporary directory, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="toolrail-ir-") as tmp:
        path = Path(tmp) / rev.replace("/", "-")
        _git("worktree", "add", "--detach", "--quiet", str(path), rev)
        try:
            yield path
        finally:
            _git("worktree", "remove", "--force", str(path))


def run(*, against: str | None = None, update: bool = False,
        baseline_path: Path = BASELINE) -> int:
    """Count, print the table, the comparison with the baseline and the bars."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("instruction counts skipped: valgrind is not installed "
              "(on Debian or Ubuntu: apt-get install valgrind)")
        return 0
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    pydantic = installed_version("pydantic")
    head = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--", "src"))
    if against and subprocess.run(["git", "rev-parse", "--verify", "--quiet",
                                   f"{against}^{{commit}}"], cwd=ROOT, capture_output=True,
                                  check=False).returncode:
        print(f"--against {against}: no such commit in {ROOT}", file=sys.stderr)
        return 2
    tool = subprocess.run([valgrind, "--version"], capture_output=True, text=True,
                          check=False).stdout.strip()
    print(f"toolrail instruction counts — Python {platform.python_version()}, "
          f"pydantic {pydantic}, {tool} (callgrind), PYTHONHASHSEED=0")
    print(f"this tree: {ROOT} at {head[:7]}{' with uncommitted changes in src' if dirty else ''}")
    print("per call: (count with the kind at N2 - count with every kind at N1) / (N2 - N1), "
          "after 50 warm-up rounds; "
          + ", ".join(f"{kind} N={n1},{n2}" for kind, (_, n1, n2) in KINDS.items()))
    started = time.monotonic()
    with ExitStack() as stack:
        trees = {"this tree": (ROOT / "src", tuple(KINDS))}
        if against:
            trees[against] = (stack.enter_context(worktree(against)) / "src", AGAINST)
        runs = sum(1 + len(kinds) for _, kinds in trees.values())
        print(f"{runs} callgrind runs, {os.cpu_count() or 1} at a time ...\n", flush=True)
        figures = measure(trees)
    counts = figures["this tree"]
    other = figures.get(against) if against else None
    for line in rows(counts, other, against):
        print("  " + line)
    print(f"  ({time.monotonic() - started:.0f} s)\n")
    verdict = compare(counts, load_baseline(baseline_path, python), python=python,
                      pydantic=pydantic, head=head, dirty=dirty)
    for line in verdict.lines:
        print("  " + line)
    print("\nbars (ratios of instruction counts measured in this run)")
    for line in bars(counts, other, against):
        print("  " + line)
    if update:
        write_baseline(baseline_path, python, Baseline(
            commit=head, python=platform.python_version(), pydantic=pydantic,
            counts={kind: counts[kind] for kind in KINDS}))
        dirty_note = ", with the uncommitted changes in src," if dirty else ""
        print(f"\nwrote the baseline for Python {python}, measured at {head[:7]}{dirty_note} "
              f"to {baseline_path}")
        return 0
    return 1 if verdict.regressions else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", metavar="REV",
                        help="measure REV too, from a temporary git worktree, side by side")
    parser.add_argument("--update-baseline", action="store_true",
                        help="record this tree's counts as the baseline for this Python")
    args = parser.parse_args(argv)
    return run(against=args.against, update=args.update_baseline)


if __name__ == "__main__":
    sys.exit(main())
