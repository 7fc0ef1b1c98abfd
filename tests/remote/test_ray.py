"""docs/scale-out.md, Ray: tool bodies on a local Ray cluster, through the pipeline."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import toolrail as tr
from toolrail import remote

ray = pytest.importorskip("ray", reason="the Ray tests need toolrail[ray]")

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
    assert crashed.error == tr.ErrorInfo("KeyError: 'missing'", "TOOL_ERROR", "ToolError")
    invalid = await registry.execute(tr.ToolCall(call_id="c", name="total",
                                                 arguments={"items": "x", "meta": {}}))
    assert invalid.error is not None
    assert invalid.error.code == "INVALID_ARGS"


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


def test_only_a_tool_can_run_on_ray(executor: remote.Ray) -> None:
    with pytest.raises(TypeError, match=r"Ray\.tool takes a Tool, got function"):
        executor.tool(lambda: None)  # type: ignore[arg-type]


def dataclass_replace(tool: tr.Tool, **fields: Any) -> tr.Tool:
    import dataclasses

    return dataclasses.replace(tool, **fields)
