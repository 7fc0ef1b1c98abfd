"""A plain ``asyncio.run(main())`` script that used code mode exits 0 (issue 25, item 1).

pydantic-monty 1.4.0's ``AsyncMonty`` resolves its futures from the threads of its Rust
runtime. A thread still inside the interpreter when finalization begins (the one that
resolved the last future, finishing ``call_soon_threadsafe``, or one coming back for a
future that was cancelled) is ended with ``pthread_exit``, whose unwinding through Rust
frames aborts the process: SIGABRT after all its output, in about one run in six
before the first fix. The pool now drives the sandbox's synchronous API from threads of
its own, which the interpreter joins before it finalizes (code-mode.md, "Interpreter
exit"). No ``gc.collect()`` or other workaround is in these scripts; each runs in a
fresh interpreter, with and without closing the registry, after a program that
completed, was cancelled (its signal, or its task), timed out, or hit the memory limit.
An abort would be a race, so each script runs several times (concurrently, to keep the
test short).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

import toolrail

pytest.importorskip("pydantic_monty")

# The scripts import the toolrail these tests do.
SOURCE = str(Path(toolrail.__file__).resolve().parents[1])

RUNS = 4  # per script: a broken exit aborted about one run in six (1 in 3 for some kinds)

SCRIPT = '''\
import asyncio
import sys

import toolrail as tr
from toolrail.code import CodeSettings

KIND, CLOSE = sys.argv[1], sys.argv[2] == "close"
PROGRAMS = {
    "completed": 'await tools.read_file({"path": "a"})',
    "failed": "1 / 0",
    "timeout": "while True:\\n    pass",
    "memory": "x = [1] * 10 ** 9",
    "cancelled": "await tools.begin({})\\nwhile True:\\n    pass",
    "task-cancelled": "await tools.begin({})\\nwhile True:\\n    pass",
}
EXPECTED = {
    "completed": "contents of a",
    "failed": "code run failed (runtime)",
    "timeout": "code run failed (timeout)",
    "memory": "code run failed (memory)",
    "cancelled": "tool call aborted",
    "task-cancelled": "cancelled",
}


async def main() -> str:
    registry = tr.ToolRegistry(presentation="code", code=CodeSettings(
        max_duration=60 if "cancelled" in KIND else 0.2, max_memory=8 * 1024 * 1024))
    began = asyncio.Event()

    @registry.tool(concurrency_safe=True)
    async def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    @registry.tool()
    async def begin() -> str:
        """Tell the script the program runs."""
        began.set()
        return "go"

    controller = tr.CancelController()
    call = tr.ToolCall(call_id="s1", name="run_code", signal=controller.signal,
                       arguments={"code": PROGRAMS[KIND]})
    task = asyncio.create_task(registry.execute(call))
    if "cancelled" in KIND:
        await began.wait()
        controller.cancel() if KIND == "cancelled" else task.cancel()
    try:
        result = await task
        text = result.text
    except asyncio.CancelledError:
        text = "cancelled"
    if CLOSE:
        await registry.aclose()
    return text


text = asyncio.run(main())
assert EXPECTED[KIND] in text, text
print("exited", KIND)
'''

KINDS = ["completed", "failed", "timeout", "memory", "cancelled", "task-cancelled"]


async def _run_all(script: Path, runs: list[tuple[str, str]]) -> list[tuple[int, str, str]]:
    gate = asyncio.Semaphore(os.cpu_count() or 1)
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(p for p in (SOURCE, os.environ.get("PYTHONPATH")) if p)}

    async def one(kind: str, close: str) -> tuple[int, str, str]:
        async with gate:
            process = await asyncio.create_subprocess_exec(
                sys.executable, str(script), kind, close, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(process.communicate(), 60)
            assert process.returncode is not None
            return process.returncode, out.decode(), err.decode()

    return await asyncio.gather(*(one(kind, close) for kind, close in runs))


@pytest.mark.parametrize("kind", KINDS)
async def test_a_plain_asyncio_run_script_exits_0_with_and_without_aclose(
        kind: str, tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    runs = [(kind, close) for close in ("close", "plain") for _ in range(RUNS)]
    outcomes = await _run_all(script, runs)
    for (_, close), (status, out, err) in zip(runs, outcomes, strict=True):
        # -6 is SIGABRT; stderr stays empty (no "Task was destroyed", nothing ignored).
        assert (status, out, err) == (0, f"exited {kind}\n", ""), close
