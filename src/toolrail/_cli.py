"""The ``toolrail`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolrail",
        description="The tool layer for LLM agents: a scoped registry, one execute "
        "pipeline, a parallel scheduler.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="walk through the pipeline with real tools (no network, no API key)",
        description="Register tools, then run calls that show each stage of the pipeline: "
        "a scoped shadow, a denial, an approval, a guard, a post-execute block, a timeout.",
    )
    demo.add_argument("--yes", action="store_true", help="approve every approval request")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``toolrail`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from ._demo import run_demo

        return run_demo(auto_approve=args.yes or not sys.stdin.isatty())
    _parser().print_help()
    return 2
