"""examples/notes_agent.py runs offline, end to end, and does what its docstring says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "notes_agent.py"


def run_example(answer: str) -> list[str]:
    done = subprocess.run([sys.executable, str(EXAMPLE)], input=answer, capture_output=True,
                          text=True, timeout=30, check=True)
    return done.stdout.splitlines()


@pytest.mark.parametrize(("answer", "write"), [
    ("y\n", "c4: wrote todo.md"),
    ("n\n", 'c4: Error: the user rejected tool "write_note"'),
])
def test_the_notes_agent_reads_in_parallel_guards_and_asks_before_writing(
        answer: str, write: str) -> None:
    lines = run_example(answer)
    assert lines[0].startswith("writes change your notes: allow write_note {'path': 'todo.md'")
    assert lines[0].endswith('c1: ["ideas.md", "todo.md"]')  # the prompt has no newline
    assert lines[1:] == ["c2: buy milk", "c3: Error: ../etc/passwd is outside the notes", write]
