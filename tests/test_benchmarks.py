"""The benchmarks run end to end in quick mode and print every row and bar they promise.

Only the shape of the output is checked, never which framework is faster.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The quick run is set up inside the first test (a module fixture): its bound is the
# fixture's own, not the suite's 60 s per test.
HANG_GUARD = 150  # five times a run inside the suite
pytestmark = pytest.mark.timeout(2 * (HANG_GUARD + 30) + 60)  # a run, and one more
PEERS_TITLE = "peers: the same work through toolrail and each peer's own execution path"

CALLS = {
    "toolrail": "registry.execute(ToolCall)",
    "LangChain": "StructuredTool.ainvoke(ToolCall)",
    "pydantic-ai": "ToolManager.handle_call(ToolCallPart)",
    "OpenAI Agents SDK": "FunctionTool.on_invoke_tool(ToolContext, json)",
    "MCP SDK": "MCPServer.call_tool(name, arguments)",
    "FastMCP": "FastMCP.call_tool(name, arguments)",
    "toolregistry": "ToolRegistry.ainvoke(name, arguments)",
}
STEPS = {
    "toolrail": "registry.run(calls)",
    "LangChain": "asyncio.gather of StructuredTool.ainvoke (no step executor)",
    "pydantic-ai": "_tool_execution.process_tool_calls (run by CallToolsNode)",
    "OpenAI Agents SDK": "run_internal.tool_execution.execute_function_tool_calls",
    "MCP SDK": "asyncio.gather of MCPServer.call_tool (no step executor)",
    "FastMCP": "asyncio.gather of FastMCP.call_tool (no step executor)",
    "toolregistry": "ToolRegistry.aexecute_tool_calls (inline backend)",
}
REGISTERS = {
    "toolrail": "registry.register(tr.tool(fn)) + schemas()",
    "LangChain": "StructuredTool.from_function + convert_to_openai_tool",
    "pydantic-ai": "FunctionToolset.add_function + Tool.tool_def",
    "OpenAI Agents SDK": "function_tool + params_json_schema",
    "MCP SDK": "MCPServer.add_tool + list_tools()",
    "FastMCP": "FastMCP.tool + list_tools()",
    "toolregistry": "ToolRegistry.register + get_schemas()",
}
FLOORS = {
    "one call, async body": (
        "`await fn(**args)`",
        "TypeAdapter.validate_python + `await fn(**args)`",
    ),
    "one call, sync body": (
        "`await asyncio.to_thread(fn, **args)`",
        "validate_python + `await asyncio.to_thread(fn, **args)`",
    ),
    "one model step": (
        "asyncio.gather of 10 x `await fn(**args)`",
        "asyncio.gather of 10 x (validate_python + `await fn(**args)`)",
    ),
}
SECTIONS = {
    "one call, async body": CALLS,
    "one call, sync body": CALLS,
    "one model step": STEPS,
    "register ": REGISTERS,
    "memory kept per registered tool": REGISTERS,
}
BARS = (
    ("nested call ", "(bar: at most that)"),
    ("fan-out program / native step = ", "(bar: at most 1.3x)"),
    ("the same program in the sandbox alone / native step = ",
     "(what of the bar is the sandbox's)"),
    ("run_code fixed cost ", "(bar: under 10 ms)"),
    ("toolrail single call vs fastest peer: ", "(bar: at least 2x)"),
    ("toolrail single call vs LangChain: ", "(bar: at least 20x)"),
    ("10-call step vs OpenAI Agents SDK / pydantic-ai: ", "(bar: at least 5x)"),
)


def _sections(lines: list[str]) -> dict[str, list[str]]:
    """The peers suite's rows, by section title."""
    start = lines.index(PEERS_TITLE)
    sections: dict[str, list[str]] = {}
    rows: list[str] = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        if line.startswith("    "):
            rows.append(line.strip())
        elif not line.startswith("  versions: "):
            rows = sections[line.strip()] = []
    return sections


def _section(sections: dict[str, list[str]], prefix: str) -> list[str]:
    [rows] = [rows for title, rows in sections.items() if title.startswith(prefix)]
    return rows


def _has_row(rows: list[str], who: str, path: str) -> bool:
    row = re.compile(rf"{re.escape(who)}\s+({re.escape(path)}\s|not installed)")
    return any(row.match(line) for line in rows)


def _quick_run(where: Path) -> tuple[subprocess.CompletedProcess[str], bool]:
    """One quick run: its exit code and output, and whether it hung (went past
    ``HANG_GUARD``: it was then sent SIGABRT, so that faulthandler printed where each of
    its threads was). Its output goes to files, not pipes, so that a child process it
    leaves behind cannot hold the wait open; whatever it leaves in its session is
    killed."""
    where.mkdir()
    with open(where / "out", "w+") as out, open(where / "err", "w+") as err:
        run = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", str(ROOT / "benchmarks" / "run.py"),
             "--quick"],
            cwd=ROOT, stdout=out, stderr=err, text=True, start_new_session=True)
        hung = False
        try:
            code = run.wait(timeout=HANG_GUARD)
        except subprocess.TimeoutExpired:
            hung = True
            run.send_signal(signal.SIGABRT)
            try:
                code = run.wait(timeout=30)
            except subprocess.TimeoutExpired:  # not even faulthandler could run
                run.kill()
                code = run.wait()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.pid, signal.SIGKILL)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(run.args, code, out.read(), err.read()), hung


def _hang_report(run: subprocess.CompletedProcess[str]) -> str:
    return (f"the quick run took over {HANG_GUARD} s; its output:\n{run.stdout[-3000:]}\n"
            f"its threads:\n{run.stderr[-12000:]}")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory,
              pytestconfig: pytest.Config) -> subprocess.CompletedProcess[str]:
    """The quick run's exit code and output. About 30 s alone (DBOS, a Temporal dev server
    and a Ray cluster start in it), longer inside the suite; the bound guards against a
    hang. CI once saw a run on 3.13 hang, after its Ray cluster started, and no run since
    has (about 25 tried, alone, under load and inside the suite): a run that hangs is
    reported with its threads' stacks on the terminal (past the output capture) and run
    once more; the test fails if that one hangs too."""
    where = tmp_path_factory.mktemp("bench")
    result, hung = _quick_run(where / "first")
    if hung:
        terminal = pytestconfig.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write_line("\nWARNING: " + _hang_report(result) + "\nrunning it again")
        result, hung = _quick_run(where / "again")
        if hung:
            pytest.fail(_hang_report(result))
    return result


def test_the_quick_run_exits_cleanly(quick_run: subprocess.CompletedProcess[str]) -> None:
    assert quick_run.returncode == 0, quick_run.stderr
    assert "Traceback" not in quick_run.stderr


@pytest.mark.parametrize("prefix", list(SECTIONS))
def test_every_section_has_a_row_for_toolrail_and_each_peer(
    quick_run: subprocess.CompletedProcess[str], prefix: str
) -> None:
    rows = _section(_sections(quick_run.stdout.splitlines()), prefix)
    missing = [who for who, path in SECTIONS[prefix].items() if not _has_row(rows, who, path)]
    assert missing == [], rows


@pytest.mark.parametrize("prefix", list(FLOORS))
def test_the_timed_sections_show_both_floors(
    quick_run: subprocess.CompletedProcess[str], prefix: str
) -> None:
    rows = _section(_sections(quick_run.stdout.splitlines()), prefix)
    assert all(_has_row(rows, "floor", floor) for floor in FLOORS[prefix]), rows


def test_every_bar_line_is_printed(quick_run: subprocess.CompletedProcess[str]) -> None:
    lines = [line.strip() for line in quick_run.stdout.splitlines()]
    for start, end in BARS:
        assert any(line.startswith(start) and line.endswith(end) for line in lines), start


def test_a_peer_that_cannot_be_imported_is_reported_not_installed() -> None:
    script = (
        "import asyncio, sys\n"
        "sys.modules['langchain_core'] = None  # as if it were not installed\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from benchmarks import bench_peers\n"
        "figures = asyncio.run(bench_peers.main(quick=True))\n"
        f"print({PEERS_TITLE!r})\n"
        "print('\\n'.join('  ' + line for line in bench_peers.rows(figures)))\n"
        "print('\\n'.join(bench_peers.bars(figures)))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    sections = _sections(run.stdout.splitlines())
    for prefix in SECTIONS:
        assert any(
            re.fullmatch(r"LangChain\s+not installed", row) for row in _section(sections, prefix)
        ), prefix
    assert "toolrail single call vs LangChain: n/a (LangChain not measured)" in run.stdout


def test_the_code_suite_prints_its_figures(quick_run: subprocess.CompletedProcess[str]) -> None:
    lines = quick_run.stdout.splitlines()
    start = lines.index("code mode: run_code programs and their nested calls")
    rows = []
    for line in lines[start + 1:]:  # the section's rows are indented; its end is not
        if not line.startswith("  "):
            break
        rows.append(line.strip())
    for label in ("run_code `1 + 1` (checkout + type check + run)",
                  "one nested call (per call, from the difference)",
                  "sandbox round trip (per call, from the difference)",
                  "the same through AsyncMonty",
                  "execute(): the same tool, native",
                  "run(): 10 x 5 ms I/O native calls (ms per step)",
                  "run_code: asyncio.gather of the same 10 (ms per step)",
                  "sandbox alone: the same program (ms per step)"):
        assert any(row.startswith(label) for row in rows), label
