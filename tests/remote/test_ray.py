"""docs/scale-out.md, Ray: tool bodies on a local Ray cluster, through the pipeline."""

from __future__ import annotations

import asyncio
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import toolrail as tr
from toolrail import remote

ray = pytest.importorskip("ray", reason="the Ray tests need toolrail[ray]")

# Ray's workers cannot import this module: what it defines travels by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def executor() -> Iterator[remote.Ray]:
    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=2,
             log_to_driver=False)
    try:
        yield remote.Ray()
    finally:
        ray.shutdown()


def registry_of(executor: remote.Ray, *tools: tr.Tool) -> tr.ToolRegistry:
    registry = tr.ToolRegistry()
    for tool in tools:
        registry.register(executor.tool(tool))
    return registry


@tr.tool
async def total(items: list[int], meta: dict[str, Any]) -> dict[str, Any]:
    """Sum items."""
    return {"sum": sum(items), "meta": meta, "pid": os.getpid()}


@tr.tool
def fail(code: str) -> str:
    """Fail with a code."""
    raise tr.ToolError("it failed on the worker", code=code)


@tr.tool
def crash() -> str:
    """Raise a plain exception."""
    raise KeyError("missing")


class Odd(Exception):
    """An exception that pickle rebuilds wrong: its ``args`` are not its ``__init__``'s."""

    def __init__(self, n: int) -> None:
        super().__init__(f"odd {n}")


def raising(name: str, exception: Callable[[], BaseException]) -> tr.Tool:
    def execute(arguments: Any, ctx: Any) -> Any:
        raise exception()

    return tr.Tool(name=name, description="Raise.", parameters={"type": "object"},
                   execute=execute)


def returning(name: str, value: Any, **fields: Any) -> tr.Tool:
    async def execute(arguments: Any, ctx: Any) -> Any:
        return value

    return tr.Tool(name=name, description="Return a value.", parameters={"type": "object"},
                   execute=execute, **fields)


def locked() -> Exception:
    exc = ValueError("holds a lock")
    exc.lock = threading.Lock()  # type: ignore[attr-defined]  # pickle refuses it
    return exc


def odd() -> Exception:
    return Odd(3)


RETURNS = [
    returning("a_set", {"when": {1, 2}}),
    returning("bytes", b"raw"),
    returning("nan", float("nan")),
    returning("inf_deep", {"rows": [[1.0, math.inf]]}),
    returning("an_object", object()),
    returning("a_tuple_key", {(1, 2): "x"}),
    returning("output_value", tr.ToolOutput(value={1})),
    returning("output_meta", tr.ToolOutput(value=1, meta={"seen": {1}})),
    returning("output_content", tr.ToolOutput(value=1, content=["not a block"])),  # type: ignore[list-item]
    returning("too_long_to_print", 10**5000),
    returning("schema", {"n": "one"}, output_schema={
        "type": "object", "properties": {"n": {"type": "integer"}}}),
    returning("a_block", tr.TextContent("one block")),
    returning("blocks", [tr.TextContent("a"), tr.ImageContent("aGk=", "image/png")]),
    returning("nothing", None),
    returning("text", "plain text"),
    returning("long_int", tr.ToolOutput(value=10**5000, content=[tr.TextContent("big")])),
]

RAISES = [
    raising("key", lambda: KeyError("missing")),
    raising("empty", ValueError),
    raising("tool_error", lambda: tr.ToolError("quota", code="QUOTA")),
    raising("output_error", lambda: tr.ToolOutputError("bad output")),
    raising("cancelled", lambda: asyncio.CancelledError("inner")),
]


def assert_no_ray_text(result: tr.ToolResult) -> None:
    """Nothing of Ray's reaches the model: no traceback, colour codes, pids or addresses."""
    texts = [result.text] + ([] if result.error is None else [result.error.message])
    for text in texts:
        for mark in ("\x1b[", "pid=", "ip=", "Traceback", "ray::", 'File "'):
            assert mark not in text, f"{mark!r} in {text!r}"


@tr.tool
def die() -> str:
    """Kill the worker."""
    os._exit(3)


@tr.tool
def shaped() -> tr.ToolOutput:
    """Return an explicit output."""
    return tr.ToolOutput(value={"n": 1}, content=[tr.TextContent("one")], meta={"ui": "x"})


@tr.tool(timeout=0.5)
async def forever(path: str) -> str:
    """Write the worker's pid, then never return."""
    Path(path).write_text(str(os.getpid()))  # noqa: ASYNC240 (a few bytes, once)
    await asyncio.Event().wait()
    return "never"


def gone(pid_file: Path) -> bool:
    """Whether the worker whose pid ``pid_file`` holds has exited (within 10 s)."""
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


async def test_a_body_on_ray_gives_the_in_process_result_from_another_process(
        executor: remote.Ray) -> None:
    arguments = {"items": [1, 2, 2**60], "meta": {"nested": [True, None, 1.5]}}
    call = tr.ToolCall(call_id="c", name="total", arguments=arguments)
    local = tr.ToolRegistry()
    local.register(total)
    here, there = await local.execute(call), await registry_of(executor, total).execute(call)
    assert there.error is None
    value = tr.thaw(there.value)
    assert value["pid"] != os.getpid()
    assert {**value, "pid": 0} == {**tr.thaw(here.value), "pid": 0}
    assert value["sum"] == 3 + 2**60  # lossless across the wire


async def test_failures_on_the_worker_are_error_results_with_their_codes(
        executor: remote.Ray) -> None:
    registry = registry_of(executor, fail, crash, total)
    failed = await registry.execute(tr.ToolCall(call_id="a", name="fail",
                                                arguments={"code": "QUOTA"}))
    assert failed.error == tr.ErrorInfo("it failed on the worker", "QUOTA", "ToolError")
    crashed = await registry.execute(tr.ToolCall(call_id="b", name="crash"))
    assert crashed.error == tr.ErrorInfo("'missing'", None, "KeyError")


@pytest.mark.parametrize("tool", RETURNS, ids=lambda tool: tool.name)
async def test_what_a_body_returns_is_judged_as_in_process(executor: remote.Ray,
                                                           tool: tr.Tool) -> None:
    here, there = await both(executor, tool)
    assert (there.error, there.text, there.value, there.meta) == (
        here.error, here.text, here.value, here.meta)
    assert_no_ray_text(there)


@pytest.mark.parametrize("tool", RAISES, ids=lambda tool: tool.name)
async def test_an_exception_on_the_worker_is_the_in_process_result(executor: remote.Ray,
                                                                   tool: tr.Tool) -> None:
    here, there = await both(executor, tool)
    assert there.error == here.error
    assert there.text == here.text
    assert_no_ray_text(there)


async def test_an_exception_that_pickle_cannot_bring_back_keeps_its_message_and_code(
        executor: remote.Ray) -> None:
    for tool, message in ((raising("odd", odd), "odd 3"),
                          (raising("locked", locked), "holds a lock")):
        here, there = await both(executor, tool)
        assert here.error is not None
        assert there.error == tr.ErrorInfo(message, None, "ToolError")
        assert (here.error.message, here.error.code) == (message, None)


async def test_invalid_arguments_are_the_in_process_result(executor: remote.Ray) -> None:
    here, there = await both(executor, total, {"items": "x", "meta": {}})
    assert there.error == here.error
    assert there.error is not None
    assert there.error.type == "ToolArgsError"


async def test_a_failure_of_rays_own_is_an_error_result_without_rays_text(
        executor: remote.Ray) -> None:
    # Ray cannot set the environment up: no conda, or no such environment.
    broken = remote.Ray(runtime_env={"conda": "toolrail-no-such-environment"})
    registry = tr.ToolRegistry()
    registry.register(broken.tool(total))
    result = await registry.execute(tr.ToolCall(call_id="r", name="total",
                                                arguments={"items": [], "meta": {}}))
    assert result.error == tr.ErrorInfo(
        "the Ray task running the tool failed: RuntimeEnvSetupError", "REMOTE_FAILED",
        "ToolError")
    assert_no_ray_text(result)


async def both(executor: remote.Ray, tool: tr.Tool,
               arguments: Any = None) -> tuple[tr.ToolResult, tr.ToolResult]:
    """The results of one call of ``tool``: in process, then on Ray."""
    call = tr.ToolCall(call_id="c", name=tool.name, arguments=arguments or {})
    local = tr.ToolRegistry()
    local.register(tool)
    return await local.execute(call), await registry_of(executor, tool).execute(call)


@tr.tool
def echo(text: str, n: int) -> dict[str, Any]:
    """Return the text, and the bit length of n."""
    return {"text": text, "bits": n.bit_length()}


async def test_a_large_call_crosses_whole(executor: remote.Ray) -> None:
    arguments = {"text": "é€😀" * 100_000, "n": 10**5000}  # 1 MB of UTF-8; 5 001 digits
    here, there = await both(executor, echo, arguments)
    assert there.error is None
    assert tr.thaw(there.value) == tr.thaw(here.value) == {
        "text": arguments["text"], "bits": (10**5000).bit_length()}


async def test_an_explicit_tool_output_crosses_whole(executor: remote.Ray) -> None:
    result = await registry_of(executor, shaped).execute(tr.ToolCall(call_id="s", name="shaped"))
    assert (tr.thaw(result.value), result.text, tr.thaw(result.meta)) == (
        {"n": 1}, "one", {"ui": "x"})


async def test_a_timeout_is_the_tools_and_stops_the_worker(executor: remote.Ray,
                                                           tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    result = await registry_of(executor, forever).execute(
        tr.ToolCall(call_id="t", name="forever", arguments={"path": str(pid_file)}))
    assert result.error == tr.ErrorInfo("tool call timed out after 0.5s", "TOOL_TIMEOUT",
                                        "ToolTimeoutError")
    assert gone(pid_file)


async def test_the_callers_signal_cancels_the_ray_task(executor: remote.Ray,
                                                       tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    controller = tr.CancelController()
    registry = registry_of(executor, dataclass_replace(forever, timeout=None))
    call = tr.ToolCall(call_id="t", name="forever", arguments={"path": str(pid_file)},
                       signal=controller.signal)
    running = asyncio.ensure_future(registry.execute(call))
    async with asyncio.timeout(30):
        while not pid_file.exists():  # noqa: ASYNC110 (written by the Ray worker)
            await asyncio.sleep(0.01)
    controller.cancel("the user left")
    result = await running
    assert result.error is not None
    assert result.error.code == "ABORTED"
    assert gone(pid_file)


async def test_a_worker_that_dies_mid_call_is_an_error_result_not_a_hang(
        executor: remote.Ray) -> None:
    result = await registry_of(executor, die).execute(tr.ToolCall(call_id="d", name="die"))
    assert result.error == tr.ErrorInfo(
        "the Ray worker running the tool died: WorkerCrashedError", "REMOTE_WORKER_DIED",
        "ToolError")
    assert_no_ray_text(result)


def test_only_a_tool_can_run_on_ray(executor: remote.Ray) -> None:
    with pytest.raises(TypeError, match=r"Ray\.tool takes a Tool, got function"):
        executor.tool(lambda: None)  # type: ignore[arg-type]


def test_a_body_ray_cannot_pickle_fails_at_registration(executor: remote.Ray) -> None:
    tool = returning("locked", threading.Lock())
    with pytest.raises(TypeError, match=r'^tool "locked": Ray cannot pickle its body: '
                                        r"cannot pickle '_thread\.lock' object$"):
        executor.tool(tool)


def dataclass_replace(tool: tr.Tool, **fields: Any) -> tr.Tool:
    import dataclasses

    return dataclasses.replace(tool, **fields)


async def keys(arguments: Any, ctx: Any) -> dict[str, Any]:
    return {"durable_id": ctx.durable_id, "idempotency_key": ctx.idempotency_key}


async def test_a_body_on_ray_gets_the_calls_idempotency_key_and_durable_id(
        executor: remote.Ray) -> None:
    tool = tr.Tool(name="keys", description="The call's keys.",
                   parameters={"type": "object"}, execute=keys)
    call = tr.ToolCall(call_id="c", name="keys", arguments={"order": 1017})
    local = tr.ToolRegistry()
    local.register(tool)
    here, there = await local.execute(call), await registry_of(executor, tool).execute(call)
    assert there.error is None
    assert tr.thaw(there.value) == tr.thaw(here.value)
    assert len(tr.thaw(there.value)["idempotency_key"]) == 64  # a plain call's: a digest
