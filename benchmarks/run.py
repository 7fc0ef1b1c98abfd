"""Run toolrail's benchmarks and print per-call costs and the bars they are held to.

    python3 scripts/dev.py bench            # full run (about two minutes)
    python3 scripts/dev.py bench --quick    # a few iterations, to check it runs
    python3 scripts/dev.py bench --only typed --only peers   # some suites only
    python3 scripts/dev.py bench --ir       # instructions per call against a baseline
    python3 scripts/dev.py bench --ir --against 334927d   # and beside another commit's

Figures are medians over repeats, in microseconds per operation, measured in one
process on one machine; compare ratios, not absolute numbers, across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import (
    bench_code,
    bench_durable,
    bench_integrations,
    bench_mcp,
    bench_peers,
    bench_pipeline,
    bench_remote,
    bench_scheduler,
    bench_typed,
    ir,
)

# (name for --only, title, module)
SUITES: tuple[tuple[str, str, Any], ...] = (
    ("pipeline", "pipeline", bench_pipeline),
    ("typed", "typed tools", bench_typed),
    ("scheduler", "scheduler", bench_scheduler),
    ("mcp", "MCP", bench_mcp),
    ("peers", "peers: the same work through toolrail and each peer's own execution path",
     bench_peers),
    ("integrations", "integrations: each framework's tool path over toolrail, beside its own",
     bench_integrations),
    ("code", "code mode: run_code programs and their nested calls", bench_code),
    ("durable", "durable steps on DBOS/SQLite, beside a plain run", bench_durable),
    ("remote", "tool bodies on a local Ray cluster, beside in process", bench_remote),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="few iterations: a smoke run")
    parser.add_argument("--only", action="append", choices=[name for name, _, _ in SUITES],
                        help="run only this suite (may be repeated)")
    parser.add_argument("--ir", action="store_true",
                        help="count instructions per call under callgrind instead, against "
                             "benchmarks/ir_baseline.json (see benchmarks/ir.py)")
    parser.add_argument("--against", metavar="REV",
                        help="with --ir: measure REV too, from a temporary git worktree")
    parser.add_argument("--update-baseline", action="store_true",
                        help="with --ir: record this tree's counts as the baseline")
    args = parser.parse_args(argv)
    if args.ir:
        return ir.run(against=args.against, update=args.update_baseline)
    if args.against or args.update_baseline:
        parser.error("--against and --update-baseline go with --ir")
    print(
        f"toolrail benchmarks — Python {platform.python_version()} on {platform.machine()}"
        f"{' (quick mode: figures are not meaningful)' if args.quick else ''}\n"
    )
    bars: list[str] = []
    for name, title, suite in SUITES:
        if args.only and name not in args.only:
            continue
        figures = asyncio.run(suite.main(args.quick))
        print(title)
        render = getattr(suite, "rows", None)  # a suite may print its own table
        lines = render(figures) if render else [figure.row() for figure in figures]
        for line in lines:
            print("  " + line)
        bars += suite.bars(figures)
    print("\nbars (ratios measured in this run)")
    for line in bars:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
