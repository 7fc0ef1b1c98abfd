"""The instruction-count benchmark: parsing, the baseline comparison and its messages.

valgrind is never run here (a count takes minutes); the comparison is pure functions,
the workload runs once without it, and the wiring is checked on a PATH without valgrind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import ir  # noqa: E402

BASE = "1111111aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
HEAD = "2222222bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
COUNTS = {"raw": 40_000, "typed": 50_000, "run": 800_000, "floor": 16_000}
STDERR = """==4242== Callgrind, a call-graph generating cache profiler
==4242== Events    : Ir
==4242== Collected : 1106343285
==4242==
==4242== I   refs:      1,106,343,285
"""


def _baseline(**counts: int) -> ir.Baseline:
    return ir.Baseline(commit=BASE, python="3.11.7", pydantic="2.14.4",
                       counts={**COUNTS, **counts})


def _compare(counts: dict[str, int], baseline: ir.Baseline | None, *,
             head: str = HEAD, dirty: bool = False) -> ir.Verdict:
    return ir.compare(counts, baseline, python="3.11", pydantic="2.14.4", head=head,
                      dirty=dirty)


def test_the_count_is_read_from_callgrinds_collected_line() -> None:
    assert ir.parse_collected(STDERR) == 1_106_343_285


def test_output_without_a_collected_line_raises_with_its_tail() -> None:
    with pytest.raises(ValueError, match=r"found 0[\s\S]*Killed") as raised:
        ir.parse_collected("==1== Callgrind\nKilled\n")
    assert "Collected : <n>" in str(raised.value)


def test_per_call_is_the_difference_over_the_extra_iterations() -> None:
    assert ir.per_call(1_000_000, 1_045_000, 200, 1200) == 45


def test_the_plan_raises_one_kind_at_a_time_above_the_common_base() -> None:
    plan = ir.plan(("raw", "run"))
    assert plan == {None: {"raw": 200, "run": 40}, "raw": {"raw": 1200, "run": 40},
                    "run": {"raw": 200, "run": 240}}


def test_a_rise_of_3_5_percent_is_a_regression_with_the_commits_to_look_at() -> None:
    verdict = _compare({**COUNTS, "raw": 41_400}, _baseline())
    assert verdict.regressions == ("raw",)
    assert ("REGRESSION raw: 41,400 instructions per call against 40,000, +3.50% (over 3%); "
            "look at commits 1111111..2222222 (git log --oneline 1111111..2222222 -- src)"
            ) in verdict.lines


def test_a_rise_of_2_9_percent_is_not_a_regression() -> None:
    verdict = _compare({**COUNTS, "typed": 51_450}, _baseline())
    assert verdict.regressions == ()
    assert "typed: 51,450 instructions per call against 50,000, +2.90%" in verdict.lines
    assert verdict.lines[-1] == "no figure rose more than 3%"


def test_every_kind_that_rose_is_reported() -> None:
    verdict = _compare({**COUNTS, "typed": 60_000, "run": 900_000}, _baseline())
    assert verdict.regressions == ("typed", "run")


def test_the_floor_is_not_held_to_the_baseline() -> None:
    assert _compare({**COUNTS, "floor": 20_000}, _baseline()).regressions == ()


def test_a_drop_asks_for_the_baseline_to_be_refreshed() -> None:
    verdict = _compare({**COUNTS, "run": 700_000}, _baseline())
    assert verdict.regressions == ()
    assert any(line.startswith("run: 700,000 instructions per batch against 800,000, -12.50%: "
                               "fewer; refresh the baseline with `python3 scripts/dev.py "
                               "bench --ir --update-baseline`") for line in verdict.lines)


def test_uncommitted_changes_are_part_of_the_range() -> None:
    verdict = _compare({**COUNTS, "raw": 50_000}, _baseline(), dirty=True)
    assert verdict.lines[1].endswith("-- src) and the uncommitted changes")


def test_a_regression_at_the_baselines_own_commit_points_at_the_diff() -> None:
    verdict = _compare({**COUNTS, "raw": 50_000}, _baseline(), head=BASE, dirty=True)
    assert verdict.lines[1].endswith("look at the uncommitted changes (git diff 1111111 -- src)")
    clean = _compare({**COUNTS, "raw": 50_000}, _baseline(), head=BASE)
    assert "the interpreter, pydantic or valgrind changed" in clean.lines[1]


def test_a_kind_missing_from_the_baseline_is_reported_not_compared() -> None:
    baseline = ir.Baseline(commit=BASE, python="3.11.7", pydantic="2.14.4",
                           counts={"raw": 40_000, "run": 800_000})
    verdict = _compare(COUNTS, baseline)
    assert verdict.regressions == ()
    assert ("typed: no baseline figure for 'execute(): typed async tool, 3 scalar parameters' "
            "(the baseline has raw, run); refresh it with "
            "`python3 scripts/dev.py bench --ir --update-baseline`") in verdict.lines


def test_no_baseline_for_this_python_says_so() -> None:
    verdict = ir.compare(COUNTS, None, python="3.13", pydantic="2.14.4", head=HEAD,
                         dirty=False)
    assert verdict == ir.Verdict(
        ("no baseline for Python 3.13 in ir_baseline.json: the figures above are not "
         "compared; record them with `python3 scripts/dev.py bench --ir --update-baseline`",),
        ())


def test_another_pydantic_is_noted() -> None:
    verdict = ir.compare(COUNTS, _baseline(), python="3.11", pydantic="2.15.0", head=HEAD,
                         dirty=False)
    assert ("note: this run has pydantic 2.15.0, the baseline 2.14.4; part of a change may "
            "be pydantic's") in verdict.lines


def test_writing_a_baseline_keeps_the_other_pythons(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"3.12": {"commit": BASE, "python": "3.12.1",
                                         "pydantic": "2.14.4", "counts": {"raw": 1}}}))
    ir.write_baseline(path, "3.11", _baseline())
    assert ir.load_baseline(path, "3.11") == _baseline()
    assert ir.load_baseline(path, "3.12") == ir.Baseline(BASE, "3.12.1", "2.14.4", {"raw": 1})
    assert ir.load_baseline(path, "3.13") is None
    assert ir.load_baseline(tmp_path / "absent.json", "3.11") is None


def test_the_baseline_in_the_repo_has_every_kind_for_python_3_11() -> None:
    baseline = ir.load_baseline(ir.BASELINE, "3.11")
    assert baseline is not None
    assert sorted(baseline.counts) == sorted(ir.KINDS)
    assert len(baseline.commit) == 40


def test_the_bars_are_ratios_of_the_counts() -> None:
    assert ir.bars(COUNTS, {**COUNTS, "raw": 39_000}, "334927d") == [
        "raw execute() / at 334927d = 1.026x (bar: at most 1.03x)",
        "typed execute() / its floor = 3.12x (bar: at most 3x)",
        "run() per call / raw execute() = 2.00x (bar: at most 2.5x)",
    ]
    assert len(ir.bars(COUNTS)) == 2


def test_the_table_shows_both_trees_and_the_ratio() -> None:
    rows = ir.rows(COUNTS, {"raw": 32_000, "typed": 50_000, "run": 1_000_000}, "334927d")
    assert rows[0].split()[-3:] == ["tree", "334927d", "ratio"]
    assert rows[1].split()[-3:] == ["40,000", "32,000", "1.25x"]
    assert rows[4].split()[-3:] == ["80,000", "100,000", "0.80x"]  # run, per call
    assert rows[5].split()[-2:] == ["16,000", "-"]  # the floor, not measured at the rev


def test_the_workload_runs_every_kind_with_the_given_src() -> None:
    done = subprocess.run(
        [sys.executable, str(ir.WORKLOAD), "raw", "2", "typed", "2", "run", "1", "floor", "2"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True, text=True, timeout=50, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"toolrail {ROOT / 'src' / 'toolrail' / '__init__.py'}\n"


def test_without_valgrind_the_ir_run_is_skipped_with_one_line() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--ir", "--against", "334927d"],
        env={**os.environ, "PATH": str(ROOT / "no-such-dir")},
        cwd=ROOT, capture_output=True, text=True, timeout=50, check=False,
    )
    assert (done.returncode, done.stdout) == (
        0, "instruction counts skipped: valgrind is not installed "
           "(on Debian or Ubuntu: apt-get install valgrind)\n"), done.stderr
