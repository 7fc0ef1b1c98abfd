"""Set-up and entry point for a fresh machine that has only Python 3.11+.

    python3 scripts/dev.py demo   # create .venv, install toolrail, run `toolrail demo`
    python3 scripts/dev.py test   # create .venv, install toolrail[dev], run the test suite
    python3 scripts/dev.py bench  # run the benchmarks (--quick for a smoke run)
    python3 scripts/dev.py check  # ruff and mypy --strict over src and tests

The virtualenv is (re)installed only when pyproject.toml changed since the last install.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"


def ensure_venv(extras: str) -> None:
    if sys.version_info < (3, 11):
        sys.exit("toolrail needs Python 3.11 or newer")
    if not PY.exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    stamp = VENV / f".installed-{extras.replace(',', '-') or 'base'}"
    if stamp.exists() and stamp.read_text() == digest:
        return
    print(f"installing toolrail[{extras}] into {VENV}", flush=True)
    pip = [str(PY), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    target = f".[{extras}]" if extras else "."
    subprocess.run([*pip, "-e", target], check=True, cwd=ROOT)
    stamp.write_text(digest)


def run(*argv: str) -> int:
    return subprocess.run(list(argv), cwd=ROOT).returncode


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command == "demo":
        ensure_venv("cli,code" if "--code" in rest else "cli")
        return run(str(BIN / "toolrail"), "demo", *rest)
    if command == "test":
        ensure_venv("dev,bench")
        return run(str(PY), "-m", "pytest", *rest)
    if command == "check":
        ensure_venv("dev,bench")
        lint = run(str(BIN / "ruff"), "check", "src", "tests", "benchmarks")
        return lint or run(str(BIN / "mypy"), "src", "tests")
    if command == "bench":
        ensure_venv("dev,bench")
        return run(str(PY), "benchmarks/run.py", *rest)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
