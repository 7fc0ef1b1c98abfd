"""The README's quick start runs and prints what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_quick_start_runs_and_prints_its_comments() -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Quick start\n\n```python\n(.*?)```", readme, re.S)
    assert block is not None
    done = subprocess.run([sys.executable, "-c", block.group(1)], capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.splitlines() == ["contents of notes.txt", "Error: no secrets DENIED"]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "python3 scripts/dev.py test" in readme
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = [line for line in ci if line.strip() and not line.startswith(("#", "set ", "cd "))]
    assert commands == ["python3 scripts/dev.py test"]


def test_every_document_the_readme_links_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)]+)\)", readme)
    assert links
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert missing == []
