"""Running ``run_code`` programs in the sandbox (code-mode.md, "Running a program").

Every program runs in a real ``pydantic_monty`` worker. Hostile programs try the
sandbox's limits and its boundary; each must end in a failure of its kind, with
nothing left running.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest

import toolrail as tr
from helpers import one_turn, within
from toolrail.code import CodeSettings

pytest.importorskip("pydantic_monty")


@pytest.fixture
async def registry() -> AsyncIterator[tr.ToolRegistry]:
    async with tr.ToolRegistry(presentation="code") as registry:
        @registry.tool(concurrency_safe=True)
        async def read_file(path: str) -> str:
            """Read a file."""
            return f"contents of {path}"

        @registry.tool
        async def write_file(path: str, text: str) -> str:
            """Write a file."""
            return f"wrote {path}"

        yield registry


async def run(registry: tr.ToolRegistry, code: str, call_id: str = "r") -> tr.ToolResult:
    return await within(registry.execute(
        tr.ToolCall(call_id=call_id, name="run_code", arguments={"code": code})), 30)


def failure(result: tr.ToolResult, kind: str) -> str:
    assert result.is_error, result.text
    assert result.error is not None
    assert result.error.code == "CODE_FAILED"
    prefix = f"code run failed ({kind}): "
    assert result.error.message.startswith(prefix), result.error.message
    return result.error.message[len(prefix):]


async def test_a_program_calls_tools_and_returns_logs_and_its_last_expression(
        registry: tr.ToolRegistry) -> None:
    result = await run(registry, 'a = await tools.read_file({"path": "a"})\nprint(a)\n[a, 1]')
    assert result.error is None
    assert result.value == {"logs": "contents of a\n", "result": ("contents of a", 1)}
    assert result.text == 'contents of a\nresult: ["contents of a", 1]'


# Programs whose last statement is no expression, though one inside it has a value: the
# runtime takes the sandbox's word that such a program has no value (it parses nothing).
NO_LAST_EXPRESSION = [
    "x = 1", "5\nx = 2", "x: int = 4", "x = [1]\nx[0] += 1", "assert True",
    "if True:\n    5", "for i in range(3):\n    i", "while False:\n    pass\nelse:\n    9",
    "try:\n    7\nexcept Exception:\n    pass", "match 1:\n    case 1:\n        8",
    "def f():\n    return 3", "import asyncio\nawait asyncio.sleep(0)",
]


@pytest.mark.parametrize("code", NO_LAST_EXPRESSION)
async def test_a_program_without_a_last_expression_has_no_result(
        registry: tr.ToolRegistry, code: str) -> None:
    result = await run(registry, code)
    assert result.value == {"logs": ""}
    assert result.text == "(run_code completed with no output)"


async def test_a_program_printing_without_a_last_expression_has_its_logs_alone(
        registry: tr.ToolRegistry) -> None:
    printed = await run(registry, 'print("hi")')
    assert printed.value == {"logs": "hi\n"}
    assert printed.text == "hi\n"


async def test_nested_calls_go_through_the_pipeline_with_parent_tokens_and_numbered_ids(
        registry: tr.ToolRegistry) -> None:
    seen: list[tuple[str, str, Any]] = []
    tokens: dict[str, tr.ExecutionToken] = {}

    def observe(execution: tr.Execution, result: tr.ToolResult) -> None:
        tokens[execution.call_id] = execution.token
        seen.append((execution.call_id, execution.name, execution.parent))

    registry.on_result(observe)
    registry.guard(lambda e: "no writes" if e.name == "write_file" else None)
    result = await run(registry, (
        'a = await tools.read_file({"path": "a"})\n'
        'try:\n    await tools.write_file({"path": "b", "text": "x"})\n'
        'except ToolCallError as e:\n    print(str(e))\n'
        'await tools.call("read_file", {"path": "c"})'))
    assert result.error is None, result.text
    assert [(cid, name) for cid, name, _ in seen] == [
        ("r.1", "read_file"), ("r.2", "write_file"), ("r.3", "read_file"), ("r", "run_code")]
    assert all(parent is tokens["r"] for _, _, parent in seen[:3])
    assert result.value == {"logs": 'tool "write_file" failed (DENIED): no writes\n',
                            "result": "contents of c"}


async def test_gathered_parallel_calls_overlap_and_commit_in_submission_order(
        registry: tr.ToolRegistry) -> None:
    started: list[str] = []
    both = asyncio.Event()

    @registry.tool(concurrency_safe=True)
    async def slow(name: str) -> str:
        """Wait for the other call."""
        started.append(name)
        if len(started) == 2:
            both.set()
        await within(both.wait())
        return name

    commits: list[str] = []
    registry.on_result(lambda e, r: commits.append(e.call_id))
    result = await run(registry, (
        "import asyncio\n"
        'await asyncio.gather(tools.slow({"name": "x"}), tools.slow({"name": "y"}))'))
    assert result.value == {"logs": "", "result": ("x", "y")}
    assert commits == ["r.1", "r.2", "r"]


async def test_an_uncaught_tool_call_error_is_a_runtime_failure(
        registry: tr.ToolRegistry) -> None:
    result = await run(registry, 'await tools.call("nope", {})')
    message = failure(result, "runtime")
    assert 'tool "nope" failed (UNKNOWN_TOOL): unknown tool "nope"' in message
    assert result.error is not None
    assert result.error.type == "MontyRuntimeError"


async def test_a_program_that_fails_the_type_check_runs_nothing(
        registry: tr.ToolRegistry) -> None:
    seen: list[str] = []
    registry.on_result(lambda e, r: seen.append(e.call_id))
    result = await run(registry, 'await tools.read_file({"path": 1})')
    assert "invalid-argument-type" in failure(result, "type")
    assert seen == ["r"]


async def test_type_checking_can_be_turned_off() -> None:
    async with tr.ToolRegistry(presentation="code", code=CodeSettings(type_check=False)) as reg:
        reg.register(tr.tool(lambda: "v", name="get", description="Get."))
        result = await run(reg, 'x: int = "s"\nx')
        assert result.value == {"logs": "", "result": "s"}


async def test_a_syntax_error_is_a_syntax_failure(registry: tr.ToolRegistry) -> None:
    failure(await run(registry, "def ("), "syntax")


async def test_each_run_has_a_fresh_session(registry: tr.ToolRegistry) -> None:
    await run(registry, "x = 41")
    assert "x" in failure(await run(registry, "x + 1"), "type")


async def test_arguments_without_a_code_string_are_invalid(registry: tr.ToolRegistry) -> None:
    result = await within(registry.execute(
        tr.ToolCall(call_id="r", name="run_code", arguments={"code": 3})))
    assert result.error is not None
    assert result.error.code == "INVALID_ARGS"


async def test_nested_contexts_images_and_concludes_turn_are_forwarded() -> None:
    async with tr.ToolRegistry(presentation="code") as registry:
        async def picture(arguments: Any, ctx: tr.RunContext) -> Any:
            ctx.defer_context("note")
            ctx.conclude_turn()
            return tr.ToolOutput(value="p", content=[tr.ImageContent("aGk=", "image/png")])

        registry.register(tr.Tool(name="picture", description="A picture.",
                                  parameters={"type": "object"}, execute=picture))
        result = await run(registry, "await tools.picture({})")
        assert result.error is None
        assert [c.source for c in result.contexts] == ["picture", "picture"]
        assert result.contexts[1].content == (tr.ImageContent("aGk=", "image/png"),)
        assert result.concludes_turn is True


# ---- hostile programs ----------------------------------------------------------------


async def hostile(settings: CodeSettings | None = None) -> tr.ToolRegistry:
    registry = tr.ToolRegistry(presentation="code", code=settings)
    registry.register(tr.tool(lambda: "v", name="get", description="Get.",
                              concurrency_safe=True))
    return registry


async def test_an_endless_loop_is_a_timeout() -> None:
    async with await hostile(CodeSettings(max_duration=0.5)) as registry:
        failure(await run(registry, "while True:\n    pass"), "timeout")


async def test_a_memory_bomb_is_a_memory_failure() -> None:
    async with await hostile(CodeSettings(max_memory=20_000_000)) as registry:
        failure(await run(registry, 'x = []\nwhile True:\n    x.append("a" * 1000000)'),
                "memory")


async def test_a_huge_print_is_an_output_limit_failure() -> None:
    async with await hostile(CodeSettings(max_output_bytes=10_000)) as registry:
        failure(await run(registry, 'for i in range(100000):\n    print("x" * 1000)'),
                "output-limit")
        failure(await run(registry, '"x" * 20000'), "output-limit")


async def test_deep_recursion_is_a_runtime_failure() -> None:
    async with await hostile() as registry:
        assert "RecursionError" in failure(
            await run(registry, "def f(n: int) -> int:\n    return f(n + 1)\nf(0)"), "runtime")


async def test_ten_thousand_nested_calls_stop_at_the_call_limit() -> None:
    async with await hostile(CodeSettings(max_calls=20)) as registry:
        seen: list[str] = []
        registry.on_result(lambda e, r: seen.append(e.call_id))
        result = await run(registry, "for i in range(10000):\n    await tools.get({})")
        failure(result, "call-limit")
        assert len(seen) == 21  # 20 nested calls, then run_code; the 21st never submitted


async def test_an_unknown_method_or_wrong_arguments_fail_without_reaching_a_body() -> None:
    async with await hostile(CodeSettings(type_check=False)) as registry:
        failure(await run(registry, "await tools.nope({})"), "runtime")
        result = await run(registry, 'await tools.get({"unexpected": 1})')
        assert "INVALID_ARGS" in failure(result, "runtime")


async def test_fire_and_forget_calls_are_awaited_or_dropped_before_run_code_returns() -> None:
    async with await hostile(CodeSettings(type_check=False)) as registry:
        seen: list[str] = []
        registry.on_result(lambda e, r: seen.append(e.call_id))
        result = await run(registry, "tools.get({})\ntools.get({})\n1")
        assert result.value == {"logs": "", "result": 1}
        assert seen[-1] == "r"
        assert set(seen[:-1]) <= {"r.1", "r.2"}  # started ones committed; others no trace


@pytest.mark.parametrize("code", [
    'open("/etc/passwd").read()',
    'import os\nos.getenv("HOME")',
    'import os\nos.environ["HOME"]',
    '__import__("os")',
    "import socket",
    "import subprocess",
])
async def test_files_network_environment_and_imports_are_out_of_reach(code: str) -> None:
    async with await hostile(CodeSettings(type_check=False)) as registry:
        result = await run(registry, code)
        assert result.is_error, result.text
        assert result.error is not None
        assert result.error.code == "CODE_FAILED"


async def test_cancellation_while_ten_nested_calls_await_approval() -> None:
    asked = asyncio.Event()
    requests: list[tr.ApprovalRequest] = []

    async def approver(request: tr.ApprovalRequest) -> str:
        requests.append(request)
        asked.set()
        await asyncio.Event().wait()
        return "allowed-once"

    async with tr.ToolRegistry(presentation="code", approver=approver) as registry:
        async def get(arguments: Any, ctx: tr.RunContext) -> str:
            return "v"

        registry.register(tr.Tool(name="get", description="Get.", parameters={"type": "object"},
                                  execute=get, concurrency_safe=True))
        registry.pre_execute(lambda e, call_next: tr.Ask() if e.name == "get" else call_next())
        seen: list[tuple[str, str | None]] = []
        registry.on_result(lambda e, r: seen.append(
            (e.call_id, None if r.error is None else r.error.code)))
        controller = tr.CancelController()
        task = asyncio.ensure_future(registry.execute(tr.ToolCall(
            call_id="r", name="run_code", signal=controller.signal, arguments={"code": (
                "import asyncio\nawait asyncio.gather(*[tools.get({}) for i in range(10)])")})))
        await within(asked.wait(), 30)
        controller.cancel()
        result = await within(task, 10)
        assert result.error is not None
        assert result.error.code == "ABORTED"
        assert len(requests) == 1  # prepare is one call at a time
        assert seen == [("r.1", "ABORTED_BEFORE_DISPATCH"), ("r", "ABORTED")]


async def test_aclose_cancels_running_programs_and_waits_for_them() -> None:
    registry = await hostile()
    started = asyncio.Event()

    async def hold(arguments: Any, ctx: tr.RunContext) -> str:
        started.set()
        await ctx.signal.wait()
        return "stopped"

    registry.register(tr.Tool(name="hold", description="Hold.", parameters={"type": "object"},
                              execute=hold, cancellation="cooperative"))
    task = asyncio.ensure_future(run(registry, "await tools.hold({})"))
    await within(started.wait(), 30)
    await within(registry.aclose(), 10)
    result = await within(task)
    assert result.error is not None
    assert result.error.code == "ABORTED"
    assert result.error.message == "tool call aborted: the registry is closing"


async def test_an_exclusive_nested_call_waits_for_earlier_calls_and_holds_the_barrier(
        registry: tr.ToolRegistry) -> None:
    log: list[str] = []

    def observe(execution: tr.Execution, result: tr.ToolResult) -> None:
        log.append(f"commit {execution.call_id}")

    async def around(execution: tr.Execution, call_next: Any) -> tr.ToolResult:
        log.append(f"start {execution.call_id}")
        return await call_next()  # type: ignore[no-any-return]

    registry.on_result(observe)
    registry.around_execute(around)
    result = await run(registry, (
        "import asyncio\n"
        'await asyncio.gather(tools.read_file({"path": "a"}),\n'
        '                     tools.write_file({"path": "b", "text": "t"}),\n'
        '                     tools.read_file({"path": "c"}))'))
    assert result.error is None, result.text
    assert log == ["start r", "start r.1", "commit r.1", "start r.2", "commit r.2",
                   "start r.3", "commit r.3", "commit r"]


async def test_a_program_cannot_run_another_program(registry: tr.ToolRegistry) -> None:
    # Each level would hold a worker while it waits: nesting could starve the pool.
    result = await run(registry, (
        'try:\n    await tools.call("run_code", {"code": "1 + 1"})\n'
        "except ToolCallError as error:\n    print(error)\n"))
    assert result.error is None
    assert result.value == {"logs": 'tool "run_code" failed (UNKNOWN_TOOL): a run_code program '
                                     "cannot run another program\n"}


async def test_run_code_arguments_other_than_code_are_invalid(registry: tr.ToolRegistry) -> None:
    result = await within(registry.execute(tr.ToolCall(
        call_id="r", name="run_code", arguments={"code": "1 + 1", "extra": 2})), 30)
    assert result.error is not None
    assert result.error.code == "INVALID_ARGS"
    assert result.error.message == 'invalid arguments: unexpected property "extra"'


async def test_a_nested_failure_without_a_code_reads_failed_without_one() -> None:
    async def fail(arguments: Any, ctx: tr.RunContext) -> tr.ToolOutput:
        return tr.ToolOutput(value="v", meta={"not": {"lossless"}})  # a failure with no code

    async with tr.ToolRegistry(presentation="code") as registry:
        registry.register(tr.Tool(name="fail", description="Fail.",
                                  parameters={"type": "object"}, execute=fail))
        result = await run(registry, (
            "try:\n    await tools.fail({})\nexcept ToolCallError as error:\n    print(error)\n"))
    assert result.value == {
        "logs": 'tool "fail" failed: tool result must be losslessly JSON-serializable\n'}


async def test_a_program_stopped_by_a_middleware_s_own_deadline_is_aborted() -> None:
    held = asyncio.Event()

    async def hold(arguments: Any, ctx: tr.RunContext) -> str:
        held.set()
        await ctx.signal.wait()
        return "held"

    deadline = tr.CancelController()

    async def around(execution: tr.Execution, call_next: Any) -> tr.ToolResult:
        if execution.name == "run_code":
            execution.signal = deadline.signal  # the middleware's own signal, not the caller's
        return await call_next()  # type: ignore[no-any-return]

    async with tr.ToolRegistry(presentation="code") as registry:
        registry.register(tr.Tool(name="hold", description="Hold.",
                                  parameters={"type": "object"}, execute=hold,
                                  cancellation="cooperative"))
        registry.around_execute(around)
        task = asyncio.create_task(run(registry, "await tools.hold({})\nprint('after')"))
        await within(held.wait(), 30)
        deadline.cancel("deadline")
        result = await within(task, 30)
    assert result.error is not None
    assert result.error.code == "ABORTED"
    assert result.error.message == "tool call aborted"


async def test_nested_calls_overlap_up_to_max_parallel_and_no_further() -> None:
    active = 0
    peak = 0
    full = asyncio.Event()
    gate = asyncio.Event()

    async def slot(arguments: Any, ctx: tr.RunContext) -> str:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        if active == 3:
            full.set()
        await gate.wait()
        active -= 1
        return "done"

    async with tr.ToolRegistry(presentation="code",
                               code=CodeSettings(max_parallel=3)) as registry:
        registry.register(tr.Tool(name="slot", description="Slot.",
                                  parameters={"type": "object"}, execute=slot,
                                  concurrency_safe=True))
        task = asyncio.create_task(run(registry, (
            "import asyncio\nlen(await asyncio.gather(*[tools.slot({}) for i in range(7)]))")))
        await within(full.wait(), 30)
        for _ in range(20):  # whatever was (wrongly) ready to start has had its chance
            await one_turn()
        assert active == 3
        gate.set()
        result = await within(task, 30)
    assert result.value == {"logs": "", "result": 7}
    assert peak == 3


async def test_a_worker_killed_mid_program_is_a_crashed_failure() -> None:
    started = asyncio.Event()

    async with tr.ToolRegistry(presentation="code") as registry:
        async def kill(arguments: Any, ctx: tr.RunContext) -> str:
            pool = registry._pool
            assert pool is not None
            [program] = pool.running
            assert program.pid is not None
            os.kill(program.pid, signal.SIGKILL)
            started.set()
            return "killed"

        registry.register(tr.Tool(name="kill", description="Kill.",
                                  parameters={"type": "object"}, execute=kill))
        result = await run(registry, 'print("hi")\nawait tools.kill({})\nprint("after")')
        assert started.is_set()
        detail = failure(result, "crashed")
        assert result.error is not None
        assert result.error.type == "MontyCrashedError"
        assert detail.endswith("\nCaptured output:\nhi\n")
        assert "after" not in detail
        # The pool replaced the worker.
        assert (await run(registry, "1 + 1")).value == {"logs": "", "result": 2}


async def _started_while_the_program_runs_on(code: str, settings: CodeSettings,
                                             calls: int) -> list[str]:
    """The ids of the nested calls that started while ``code`` had not yet ended (it
    ends in an endless loop, and is cancelled once ``calls`` calls have started)."""
    started: list[str] = []
    all_started = asyncio.Event()

    async def mark(arguments: Any, ctx: tr.RunContext) -> str:
        started.append(ctx.call_id)
        if len(started) == calls:
            all_started.set()
        return "marked"

    async with tr.ToolRegistry(presentation="code", code=settings) as registry:
        registry.register(tr.Tool(name="mark", description="Mark.",
                                  parameters={"type": "object"}, execute=mark,
                                  concurrency_safe=True))
        signal_ = tr.CancelController()
        task = asyncio.create_task(within(registry.execute(tr.ToolCall(
            call_id="r", name="run_code", arguments={"code": code},
            signal=signal_.signal)), 30))
        await within(all_started.wait(), 30)
        signal_.cancel("enough")
        result = await task
    assert result.error is not None, result.text
    assert result.error.code == "ABORTED", result.text
    return started


async def test_calls_not_awaited_start_once_max_parallel_of_them_are_held() -> None:
    started = await _started_while_the_program_runs_on(
        "a = tools.mark({})\nb = tools.mark({})\nwhile True:\n    pass",
        CodeSettings(max_parallel=2, type_check=False, max_duration=60), calls=2)
    assert started == ["r.1", "r.2"]


async def test_calls_not_awaited_start_when_the_program_sleeps() -> None:
    started = await _started_while_the_program_runs_on(
        "import asyncio\na = tools.mark({})\nawait asyncio.sleep(30)",
        CodeSettings(type_check=False, max_duration=60), calls=1)
    assert started == ["r.1"]


@pytest.mark.parametrize("code", [
    "import asyncio\nawait asyncio.sleep(0.01)\n1",
    "import asyncio\nawait asyncio.gather(asyncio.sleep(0.02), tools.read_file({'path': 'a'}))\n1",
    "import asyncio\nawait asyncio.sleep(-1)\nawait asyncio.sleep(0)\n1",
    "import time\ntime.sleep(0.01)\n1",
])
async def test_a_program_sleeps(registry: tr.ToolRegistry, code: str) -> None:
    assert (await run(registry, code)).value == {"logs": "", "result": 1}


async def test_a_sleep_past_max_duration_is_a_timeout() -> None:
    async with tr.ToolRegistry(presentation="code",
                               code=CodeSettings(max_duration=0.2)) as registry:
        for code in ("import asyncio\nawait asyncio.sleep(3600)",
                     "import time\ntime.sleep(3600)"):
            result = await run(registry, code)
            assert result.error is not None, result.text
            assert result.error.code == "CODE_FAILED", result.text
            assert result.error.message.startswith("code run failed (timeout): "), code
