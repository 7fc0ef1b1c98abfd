"""The ``toolrail`` command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from toolrail._cli import main


def _toolrail(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolrail", *args], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_demo_runs_non_interactively_and_shows_every_stage() -> None:
    done = _toolrail("demo")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for expected in (
        "-> [ok] toolrail keeps every result in model order.",
        "-> [ok] [agent-1 sees a sandboxed copy]",
        '-> [error UNKNOWN_TOOL] Error: unknown tool "delete_everything"',
        "y (auto-approved)",
        "-> [ok] wrote 19 characters to out.txt",
        "-> [error DENIED] Error: reading outside the workspace is not allowed",
        "-> [error BLOCKED] secrets are redacted",
        "-> [error TOOL_TIMEOUT] Error: tool call timed out after 0.2s",
        "-> [error ABORTED_BEFORE_DISPATCH] Error: tool call aborted before dispatch",
        "-> [error INVALID_ARGS]",
    ):
        assert expected in out, expected
    assert done.stderr == ""


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "demo" in capsys.readouterr().out
