"""The ``toolrail`` command: demo, list, call, serve — exit codes and messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import toolrail as tr
from toolrail._cli import UsageError, load_target, main, resolve_scope

TARGET_SOURCE = '''
import toolrail as tr

registry = tr.ToolRegistry()

@registry.tool(concurrency_safe=True)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b

@registry.tool
def fail(reason: str) -> str:
    """Always fails."""
    raise tr.ToolError(reason, code="NOPE")

scoped = registry.scope("agent")
scoped.register(tr.Tool(name="secret", description="Only the agent sees it.",
                        parameters={"type": "object"}, execute=lambda a, c: "42"))

researcher = registry.scope("researcher")
researcher.restrict(deny=["fail"])
registry.scope(7).guard(lambda execution: f"denied in scope {execution.scope!r}")

def build():
    return registry

not_a_registry = 3
'''


def _toolrail(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolrail", *args], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture
def target(tmp_path: Path) -> str:
    path = tmp_path / "tools.py"
    path.write_text(TARGET_SOURCE)
    return f"{path}:registry"


DEMO_SHOWS_EVERY_STAGE = (
    "call_2 read_file: ok toolrail runs tool calls in model order",
    "approve write_file {'path': 'summary.md', 'text': '3 notes, 2 todos'}?  y "
    "(auto-approved)",
    "call_4 write_file: ok wrote 16 characters to summary.md",
    "call_7 read_file: DENIED Error: ../../etc/passwd is outside the workspace",
    "call_8 fetch: TOOL_TIMEOUT Error: tool call timed out after 0.3s",
    'call_9 read_file: INVALID_ARGS Error: invalid arguments: "arguments" must be an object',
    "the user pressed stop",
    "call_11 slow_count: ABORTED Error: tool call aborted",
    "call_12 word_count: ABORTED_BEFORE_DISPATCH Error: tool call aborted before dispatch",
    "model: The workspace is summarized in summary.md.",
    "parallel speed-up",
    "tool messages for the model │ 12",
)


# --code runs the task as one run_code step and shows its nested calls.
DEMO_CODE_SHOWS_THE_NESTED_CALLS = (
    "one registry in code mode",
    "approve write_file {'path': 'summary.md', 'text': '3 notes, 2 todos'}?  y "
    "(auto-approved)",
    "call_1.1 list_files (nested): ok",
    "call_1.2 read_file (nested): ok toolrail runs tool calls in model order",
    "call_1.3 read_file (nested): ok write the summary",
    "call_1.4 write_file (nested): ok wrote 16 characters to summary.md",
    "call_1.5 word_count (nested): ok 4",
    "call_1.8 read_file (nested): DENIED Error: ../../etc/passwd is outside the workspace",
    'call_1 run_code: ok refused: tool "read_file" failed (DENIED)',
    'result: {"files": ["notes.md", "todo.md"], "summary": "3 notes, 2 todos", '
    '"words": [4, 13, 6]}',
    "model: The workspace is summarized in summary.md.",
    "tool calls                  │ 9",
    "tool messages for the model │ 1",
)

DEMO_DURABLE_KILLS_AND_RESUMES = (
    "search, search, delete_draft, send_reply",
    "both searches committed; delete_draft waits for approval "
    "(demo-agent:ticket-42/step-1/2)",
    "killed with SIGKILL while the approval waits",
    "(no agent running): allowed delete_draft(draft='reply-v1')",
    "killed with SIGKILL inside send_reply's body",
    "  delete_draft  ok           deleted reply-v1",
    "  send_reply    INTERRUPTED  Error: tool call was interrupted by a restart; it may have run",
    "bodies run, across the three agents: search 2, delete_draft 1, send_reply 1",
)


@pytest.mark.parametrize(("args", "shown"), [
    pytest.param(("demo",), DEMO_SHOWS_EVERY_STAGE, id="demo-shows-every-stage"),
    pytest.param(("demo", "--code"), DEMO_CODE_SHOWS_THE_NESTED_CALLS,
                 id="demo-code-one-run-code-step-with-its-nested-calls"),
    pytest.param(("demo", "--durable"), DEMO_DURABLE_KILLS_AND_RESUMES,
                 id="demo-durable-an-agent-killed-twice-and-resumed"),
])
def test_the_demo_runs_non_interactively_and_shows_what_it_did(
    args: tuple[str, ...], shown: tuple[str, ...]
) -> None:
    done = _toolrail(*args)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for expected in shown:
        assert expected in out, expected
    assert done.stderr == ""


def test_demo_code_without_the_code_extra_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pydantic_monty", None)  # as if it were not installed
    assert main(["demo", "--code", "--yes"]) == 2
    assert capsys.readouterr().err == (
        "toolrail demo --code needs the code extra: pip install 'toolrail[code]'\n")


def test_list_of_a_scope_in_code_mode_shows_the_sdk_the_program_calls(tmp_path: Path) -> None:
    path = tmp_path / "coded.py"
    path.write_text(TARGET_SOURCE + 'registry.scope("coder").present_as("code")\n')
    done = _toolrail("list", f"{path}:registry", "--scope", "coder")
    assert done.returncode == 0, done.stderr
    registry = load_target(f"{path}:registry")
    transport = registry.get("run_code", "coder")
    assert transport is not None
    summary = transport.description.split("\n", 1)[0]
    assert done.stdout == (f"run_code            {summary}\n\n"
                           "run_code's description (the SDK its programs call):\n\n"
                           f"{transport.description}\n")
    assert "async def add(self, args: AddArgs)" in done.stdout
    assert "class Tools(Protocol):" in done.stdout


def test_list_of_a_native_scope_shows_no_sdk(target: str) -> None:
    done = _toolrail("list", target, "--scope", "agent")
    assert done.returncode == 0, done.stderr
    assert "run_code" not in done.stdout


def test_list_prints_a_table_of_the_global_tools(target: str) -> None:
    done = _toolrail("list", target)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["add   parallel  Add two integers.",
                                        "fail            Always fails."]


def test_list_shows_what_a_scope_sees(target: str) -> None:
    done = _toolrail("list", target, "--scope", "agent", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert [tool["name"] for tool in json.loads(done.stdout)] == ["add", "fail", "secret"]


def test_list_in_mcp_format_uses_input_schema(target: str) -> None:
    done = _toolrail("list", target, "--format", "mcp")
    tools = json.loads(done.stdout)
    assert tools[0]["name"] == "add"
    assert tools[0]["inputSchema"]["required"] == ["a", "b"]


async def test_list_in_mcp_format_prints_what_the_server_lists(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mcp

    import toolrail.mcp

    done = _toolrail("list", target, "--scope", "agent", "--format", "mcp")
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_target puts the file's folder first
    app = toolrail.mcp.server(load_target(target), scope="agent")
    async with mcp.Client(app, cache=None) as client:
        listing = await client.list_tools()

    served = [tool.model_dump(mode="json", by_alias=True, exclude_none=True)
              for tool in listing.tools]
    assert (done.returncode, json.loads(done.stdout)) == (0, served)
    assert served[0]["outputSchema"]["properties"] == {"result": {"type": "integer"}}


def test_call_prints_the_result_and_exits_0(target: str) -> None:
    done = _toolrail("call", target, "add", '{"a": 2, "b": 3}')
    assert (done.returncode, done.stdout) == (0, "5\n")


def test_call_with_json_prints_the_whole_result(target: str) -> None:
    done = _toolrail("call", target, "add", '{"a": 2, "b": 3}', "--json")
    assert json.loads(done.stdout)["value"] == 5


def test_a_call_whose_result_is_an_error_exits_1(target: str) -> None:
    done = _toolrail("call", target, "fail", '{"reason": "no"}')
    assert (done.returncode, done.stdout, done.stderr) == (1, "", "Error: no\n")


def test_invalid_arguments_are_the_tools_error_not_a_usage_error(target: str) -> None:
    done = _toolrail("call", target, "add", '{"a": "x"}')
    assert done.returncode == 1
    assert done.stderr.startswith('Error: invalid arguments: "a": Input should be a valid integer')


def test_an_unknown_tool_says_which_tools_exist(target: str) -> None:
    done = _toolrail("call", target, "secret")
    assert done.returncode == 2
    assert done.stderr == "toolrail: unknown tool 'secret'; available: add, fail\n"


def test_a_scope_sees_its_own_tool(target: str) -> None:
    done = _toolrail("call", target, "secret", "--scope", "agent")
    assert (done.returncode, done.stdout) == (0, "42\n")


def test_arguments_that_are_not_json_say_what_to_pass(target: str) -> None:
    done = _toolrail("call", target, "add", "{a: 1}")
    assert done.returncode == 2
    assert done.stderr.startswith("toolrail: the arguments are not valid JSON (")
    assert "pass one JSON object, e.g. '{\"path\": \"notes.txt\"}'" in done.stderr


@pytest.mark.parametrize(
    ("suffix", "message"),
    [
        ("", "has no ':attribute'"),
        (":nothing", "has no attribute 'nothing'"),
        (":not_a_registry", "is a int, not a ToolRegistry"),
    ],
)
def test_a_bad_target_says_what_a_target_is(target: str, suffix: str, message: str) -> None:
    path = target.rsplit(":", 1)[0]
    done = _toolrail("list", path + suffix)
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stderr.startswith("toolrail: TARGET ")


def test_a_target_may_be_a_callable_returning_a_registry(target: str) -> None:
    done = _toolrail("list", target.rsplit(":", 1)[0] + ":build")
    assert done.returncode == 0
    assert done.stdout.startswith("add")


def test_a_missing_module_is_reported_with_the_import_error() -> None:
    done = _toolrail("list", "no_such_module_here:registry")
    assert done.returncode == 2
    assert "importing 'no_such_module_here' failed: ModuleNotFoundError" in done.stderr


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    out = capsys.readouterr().out
    for command in ("demo", "list", "call", "serve"):
        assert command in out


def test_help_of_call_explains_the_arguments() -> None:
    done = _toolrail("call", "--help")
    assert done.returncode == 0
    assert "the arguments as a JSON object" in done.stdout


@pytest.mark.parametrize(
    ("form", "first"),
    [
        ("openai", {"type": "function", "function": {"name": "add"}}),
        ("anthropic", {"name": "add"}),
        ("gemini", {"name": "add"}),
    ],
)
def test_list_prints_a_providers_tool_format(target: str, form: str,
                                             first: dict[str, object]) -> None:
    done = _toolrail("list", target, "--format", form)
    assert done.returncode == 0, done.stderr
    tool = json.loads(done.stdout)[0]
    for key, value in first.items():
        if isinstance(value, dict):
            assert tool[key]["name"] == value["name"]
        else:
            assert tool[key] == value


def test_serve_rejects_an_http_address_that_is_not_host_port(target: str) -> None:
    done = _toolrail("serve", target, "--http", "8000")
    assert done.returncode == 2
    assert done.stderr == ("toolrail: --http '8000' is not HOST:PORT, e.g. 127.0.0.1:8000\n")


@pytest.mark.parametrize("given", ["0", "-5", "4MiB", "1.5"])
def test_serve_max_request_bytes_must_be_a_positive_int(target: str, given: str) -> None:
    done = _toolrail("serve", target, "--http", "127.0.0.1:1", "--max-request-bytes", given)
    assert done.returncode == 2
    assert done.stderr.endswith(
        f"toolrail serve: error: argument --max-request-bytes: {given!r} is not a positive "
        "integer number of bytes\n"
    )


def test_serve_max_request_bytes_goes_with_http(target: str) -> None:
    done = _toolrail("serve", target, "--max-request-bytes", "1000")
    assert done.returncode == 2
    assert done.stderr == ("toolrail: --max-request-bytes goes with --http "
                           "(stdio has no request limit)\n")


async def test_serve_speaks_mcp_over_stdio_to_the_sdks_client(target: str) -> None:
    import asyncio

    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "toolrail", "serve", target, "--scope", "agent"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await asyncio.wait_for(session.initialize(), 30)
        listing = await asyncio.wait_for(session.list_tools(), 30)
        result = await asyncio.wait_for(session.call_tool("add", {"a": 2, "b": 3}), 30)

    assert sorted(tool.name for tool in listing.tools) == ["add", "fail", "secret"]
    assert result.structured_content == {"result": 5}
    assert result.is_error is False


# ---- --scope names a scope that exists (issue 15) --------------------------------------

UNKNOWN_SCOPE = ("toolrail: unknown scope 'reseacher' (nothing is registered, restricted or "
                 "guarded in it); scopes: 7, agent, researcher\n")


@pytest.mark.parametrize(
    "command",
    [["list"], ["list", "--format", "json"], ["call", "fail", '{"reason": "x"}'], ["serve"]],
    ids=["list", "list-json", "call", "serve"],
)
def test_a_mistyped_scope_exits_2_naming_the_scopes_that_exist(target: str,
                                                               command: list[str]) -> None:
    name, *rest = command
    done = _toolrail(name, target, *rest, "--scope", "reseacher")
    assert (done.returncode, done.stdout, done.stderr) == (2, "", UNKNOWN_SCOPE)


def test_a_mistyped_scope_runs_nothing_the_intended_scope_hides(target: str) -> None:
    assert _toolrail("call", target, "fail", '{"reason": "x"}', "--scope", "researcher"
                     ).stderr == ("toolrail: unknown tool 'fail' in scope 'researcher'; "
                                  "available: add\n")
    done = _toolrail("call", target, "fail", '{"reason": "x"}', "--scope", "reseacher")
    assert done.returncode == 2
    assert "Error: x" not in done.stderr


def test_a_registry_without_scopes_says_so(tmp_path: Path) -> None:
    path = tmp_path / "bare.py"
    path.write_text("import toolrail as tr\nregistry = tr.ToolRegistry()\n")
    done = _toolrail("list", f"{path}:registry", "--scope", "agent")
    assert (done.returncode, done.stderr) == (
        2, "toolrail: unknown scope 'agent' (nothing is registered, restricted or guarded "
           "in it); scopes: (none)\n")


def test_a_scope_that_only_restricts_is_a_scope(target: str) -> None:
    done = _toolrail("list", target, "--scope", "researcher")
    assert (done.returncode, done.stdout) == (0, "add  parallel  Add two integers.\n")


def test_a_scope_key_that_is_not_a_str_is_named_by_its_str(target: str) -> None:
    done = _toolrail("call", target, "add", '{"a": 2, "b": 3}', "--scope", "7")
    assert (done.returncode, done.stderr) == (1, "Error: denied in scope 7\n")


class Named:
    """A scope key compared by identity whose ``str`` is its name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name


def guarded_by(*keys: object) -> tr.ToolRegistry:
    registry = tr.ToolRegistry()
    for key in keys:
        registry.scope(key).guard(lambda execution: None)
    return registry


def test_a_str_key_wins_over_another_key_with_the_same_str() -> None:
    registry = guarded_by(Named("7"), "7")
    assert resolve_scope(registry, "7") == "7"
    assert resolve_scope(registry, None) is None


def test_two_keys_with_the_same_str_are_ambiguous() -> None:
    first, second = Named("x"), Named("x")
    with pytest.raises(UsageError) as raised:
        resolve_scope(guarded_by(first, second), "x")
    assert str(raised.value) == (f"scope 'x' is ambiguous: 2 scope keys read 'x' "
                                 f"({first!r}, {second!r})")
