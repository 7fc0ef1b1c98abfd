"""Set-up and entry point for a fresh machine that has only Python 3.11+.

    python3 scripts/dev.py demo   # create .venv, install toolrail, run `toolrail demo`
    python3 scripts/dev.py test   # install toolrail[dev,bench], run the tests (below)
    python3 scripts/dev.py bench  # run the benchmarks (--quick for a smoke run)
    python3 scripts/dev.py check  # ruff and mypy --strict over src and tests

`test` with no --python runs the whole suite on the interpreter running this script, then
the whole suite on 3.13 and the asyncio backend's tests (BACKEND_TESTS) on 3.12, each only
when that version is installed (a line says so when it is not). The exit code is non-zero
when any run failed.

    python3 scripts/dev.py test --python 3.13 [pytest args]   # only 3.13, the whole suite
    python3 scripts/dev.py test --python 3.11 --python 3.12   # only those, in that order
    python3 scripts/dev.py test --python /usr/bin/python3.13  # an interpreter by its path

--python X.Y is found as pythonX.Y on PATH, else as $PYENV_ROOT/versions/X.Y*/bin/python
(~/.pyenv by default); one that is asked for and not found is an error (exit 2). Any other
arguments go to pytest, in every run.

The interpreter running this script installs into .venv (demo, bench and check use it
too); any other one into .venv-X.Y. A virtualenv is (re)installed only when pyproject.toml
or its interpreter changed since the last install.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN_DIR = "Scripts" if os.name == "nt" else "bin"
BIN = VENV / BIN_DIR
PY = BIN / "python"
PYENV = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")

# The tests of the private asyncio backend (src/toolrail/_dispatch/bodytask.py), run on 3.12
# by the default `test`.
BACKEND_TESTS = ["tests/cancellation/test_body_task.py"]
# The versions the default `test` runs besides the one running this script.
FULL_SUITE_ALSO_ON = "3.13"
BACKEND_TESTS_ON = "3.12"

PROBE = "import sys; print(*sys.version_info[:3], sys.base_prefix)"


@dataclass(frozen=True)
class Interpreter:
    executable: str
    version: tuple[int, int, int]
    venv: Path

    @property
    def name(self) -> str:
        return f"Python {'.'.join(map(str, self.version))} ({self.executable})"

    @property
    def python(self) -> Path:
        return self.venv / BIN_DIR / "python"


def probe(executable: str) -> tuple[tuple[int, int, int], str] | None:
    """The interpreter's version and base prefix, or None when it does not run (a pyenv
    shim for a version that is installed but not selected exits 127)."""
    try:
        done = subprocess.run([executable, "-c", PROBE], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = done.stdout.strip().split(" ", 3)
    if done.returncode != 0 or len(parts) != 4 or not all(p.isdigit() for p in parts[:3]):
        return None
    return (int(parts[0]), int(parts[1]), int(parts[2])), parts[3]


def running() -> Interpreter:
    major, minor, micro = sys.version_info[:3]
    return Interpreter(sys.executable, (major, minor, micro), VENV)


def find(request: str) -> Interpreter | None:
    """An interpreter by version ("3.13") or by path or command name; None if not found."""
    wanted: tuple[int, ...] | None = None
    if re.fullmatch(r"\d+\.\d+", request):
        wanted = tuple(int(part) for part in request.split("."))
        found = glob.glob(str(PYENV / "versions" / f"{request}*" / "bin" / "python"))
        candidates = [shutil.which(f"python{request}"),
                      *sorted(found, key=_version_key, reverse=True)]
    else:
        candidates = [shutil.which(request) or request]
    for candidate in candidates:
        probed = probe(candidate) if candidate else None
        if candidate is None or probed is None or (wanted is not None and probed[0][:2] != wanted):
            continue
        (major, minor, micro), base_prefix = probed
        if os.path.realpath(base_prefix) == os.path.realpath(sys.base_prefix):
            return running()  # the interpreter running this script: .venv
        return Interpreter(candidate, (major, minor, micro), ROOT / f".venv-{major}.{minor}")
    return None


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", Path(path).parent.parent.name))


def ensure_venv(extras: str, interpreter: Interpreter | None = None) -> Interpreter:
    target = interpreter or running()
    if target.version < (3, 11):
        sys.exit(f"toolrail needs Python 3.11 or newer, not {target.name}")
    venv, py = target.venv, target.python
    probed = probe(str(py)) if py.exists() else None
    if probed is None or probed[0] != target.version:
        print(f"creating {venv.name} with {target.name}", flush=True)
        made = subprocess.run([target.executable, "-m", "venv", "--clear", str(venv)])
        if made.returncode != 0:
            sys.exit(f"could not create {venv} with {target.name} (is its venv/ensurepip "
                     "module installed?)")
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    stamp = venv / f".installed-{extras.replace(',', '-') or 'base'}"
    if stamp.exists() and stamp.read_text() == digest:
        return target
    print(f"installing toolrail[{extras}] into {venv.name}", flush=True)
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    spec = f".[{extras}]" if extras else "."
    subprocess.run([*pip, "-e", spec], check=True, cwd=ROOT)
    stamp.write_text(digest)
    return target


def run(*argv: str, env: dict[str, str] | None = None) -> int:
    return subprocess.run(list(argv), cwd=ROOT,
                          env=None if env is None else {**os.environ, **env}).returncode


def test(rest: list[str]) -> int:
    requests, pytest_args = split_python_options(rest)
    plan: list[tuple[Interpreter, list[str], str]] = []  # interpreter, paths, what
    if requests is None:
        return 2
    suite = f"pytest {' '.join(pytest_args)}" if pytest_args else "the whole suite"
    backend = f"the backend tests ({' '.join(BACKEND_TESTS)})"
    if requests:
        for request in requests:
            found = find(request)
            if found is None:
                where = (f"no python{request} on PATH, none in {PYENV}/versions/{request}*"
                         if re.fullmatch(r"\d+\.\d+", request) else "not an interpreter that runs")
                print(f"--python {request}: not found ({where})", file=sys.stderr)
                return 2
            if found.version < (3, 11):
                print(f"--python {request}: toolrail needs Python 3.11 or newer, not "
                      f"{found.name}", file=sys.stderr)
                return 2
            plan.append((found, [], suite))
    else:
        mine = running()
        plan.append((mine, [], suite))
        for version, paths, what in ((FULL_SUITE_ALSO_ON, [], suite),
                                     (BACKEND_TESTS_ON, BACKEND_TESTS, backend)):
            if version == f"{mine.version[0]}.{mine.version[1]}":
                continue  # the whole suite already runs on it
            found = find(version)
            if found is None:
                print(f"Python {version} not found (python{version} on PATH, "
                      f"{PYENV}/versions/{version}*): skipping {what} on {version}",
                      flush=True)
            else:
                plan.append((found, paths, what))
    results: list[tuple[str, int]] = []
    for interpreter, paths, what in plan:
        print(f"\n=== {what} on {interpreter.name}, in {interpreter.venv.name} ===", flush=True)
        try:
            ensure_venv("dev,bench", interpreter)
        except (subprocess.CalledProcessError, SystemExit) as failure:
            print(f"installing into {interpreter.venv.name} failed: {failure}", file=sys.stderr)
            results.append((f"{what} on {interpreter.name} (not installed)", 1))
            continue
        # The runs after the first skip the few long tests of an engine's semantics
        # rather than of the interpreter's (tests/README.md, "Secondary runs").
        secondary = {"TOOLRAIL_TEST_SECONDARY": "1"} if results else None
        code = run(str(interpreter.python), "-m", "pytest", *paths, *pytest_args,
                   env=secondary)
        results.append((f"{what} on {interpreter.name}", code))
    if len(results) > 1:
        print("\n=== summary ===")
        for label, code in results:
            print(f"{'passed' if code == 0 else f'FAILED (exit {code})'}: {label}")
    return next((code for _, code in results if code != 0), 0)


def split_python_options(rest: list[str]) -> tuple[list[str] | None, list[str]]:
    """The --python values (None on a usage error) and the arguments left for pytest."""
    requests: list[str] = []
    others: list[str] = []
    args = iter(rest)
    for arg in args:
        if arg == "--python":
            value = next(args, None)
            if value is None:
                print("--python needs a version (3.13) or an interpreter's path",
                      file=sys.stderr)
                return None, others
            requests.append(value)
        elif arg.startswith("--python="):
            requests.append(arg.removeprefix("--python="))
        else:
            others.append(arg)
    return requests, others


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command == "demo":
        extras = {"--code": "cli,code", "--durable": "cli,dbos"}
        ensure_venv(next((extras[a] for a in rest if a in extras), "cli"))
        return run(str(BIN / "toolrail"), "demo", *rest)
    if command == "test":
        return test(rest)
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
