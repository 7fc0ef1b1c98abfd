"""``tr.tool``: ``concurrency_safe``, ``present_call`` and ``present_result`` callables get
the validated arguments (spec: typed-tools.md, "Arguments")."""

from __future__ import annotations

from typing import Any

import toolrail as tr
from typed_helpers import add, call, read_file, run, tool_with

# ---- concurrency_safe, present_call, present_result --------------------------------


def test_concurrency_safe_true_passes_through() -> None:
    assert read_file.concurrency_safe is True
    assert add.concurrency_safe is False


def test_concurrency_safe_callable_gets_validated_keyword_arguments() -> None:
    seen: list[tuple[str, int]] = []

    def safe(path: str, offset: int = 0) -> bool:
        seen.append((path, offset))
        return offset < 10

    def peek(path: str, offset: int = 0) -> str:
        return path

    registry = tr.ToolRegistry()
    registry.register(tool_with(concurrency_safe=safe)(peek))

    assert registry.execution_mode(call("peek", {"path": "/a", "offset": "3"})) is (
        tr.ExecutionMode.PARALLEL
    )
    assert registry.execution_mode(call("peek", {"path": "/b"})) is tr.ExecutionMode.PARALLEL
    assert registry.execution_mode(call("peek", {"path": "/c", "offset": 12})) is (
        tr.ExecutionMode.EXCLUSIVE
    )
    assert seen == [("/a", 3), ("/b", 0), ("/c", 12)]


def test_concurrency_safe_callable_that_cannot_bind_gets_one_dict_of_validated_arguments() -> None:
    seen: list[dict[str, Any]] = []

    def safe(arguments: dict[str, Any]) -> bool:
        seen.append(arguments)
        return True

    def peek(path: str, offset: int = 0) -> str:
        return path

    registry = tr.ToolRegistry()
    registry.register(tool_with(concurrency_safe=safe)(peek))

    mode = registry.execution_mode(call("peek", {"path": "/a", "offset": "3"}))

    assert mode is tr.ExecutionMode.PARALLEL
    assert seen == [{"path": "/a", "offset": 3}]


def test_invalid_arguments_classify_as_exclusive_without_calling_the_classifier() -> None:
    seen: list[Any] = []

    def safe(**arguments: Any) -> bool:
        seen.append(arguments)
        return True

    def peek(path: str, offset: int = 0) -> str:
        return path

    registry = tr.ToolRegistry()
    tool = tool_with(concurrency_safe=safe)(peek)
    registry.register(tool)

    assert registry.execution_mode(call("peek", {"offset": 1})) is tr.ExecutionMode.EXCLUSIVE
    assert registry.execution_mode(call("peek", {"path": 1})) is tr.ExecutionMode.EXCLUSIVE
    assert registry.execution_mode(call("peek", "raw")) is tr.ExecutionMode.EXCLUSIVE
    assert registry.execution_mode(call("peek", {"path": "/a", "x": 1})) is (
        tr.ExecutionMode.EXCLUSIVE
    )
    assert callable(tool.concurrency_safe)
    assert tool.concurrency_safe(tr.snapshot_json({"path": 5})) is False
    assert seen == []


def test_present_call_gets_validated_keyword_arguments() -> None:
    def present(path: str, offset: int = 0) -> str:
        return f"reading {path} from {offset}"

    def peek(path: str, offset: int = 0) -> str:
        return path

    tool = tool_with(present_call=present)(peek)

    assert tool.present_call is not None
    assert tool.present_call(tr.snapshot_json({"path": "/a", "offset": "2"})) == (
        "reading /a from 2"
    )


def test_present_call_that_cannot_bind_gets_one_dict_of_validated_arguments() -> None:
    def present(arguments: dict[str, Any]) -> dict[str, Any]:
        return {"shown": arguments}

    def peek(path: str, offset: int = 0) -> str:
        return path

    tool = tool_with(present_call=present)(peek)

    assert tool.present_call is not None
    assert tool.present_call(tr.snapshot_json({"path": "/a"})) == {
        "shown": {"path": "/a", "offset": 0}
    }


def test_present_call_returns_none_for_invalid_arguments_without_calling_the_function() -> None:
    seen: list[Any] = []

    def present(**arguments: Any) -> str:
        seen.append(arguments)
        return "shown"

    def peek(path: str) -> str:
        return path

    tool = tool_with(present_call=present)(peek)

    assert tool.present_call is not None
    assert tool.present_call(tr.snapshot_json({})) is None
    assert tool.present_call(tr.snapshot_json({"path": "/a", "x": 1})) is None
    assert tool.present_call("raw") is None
    assert seen == []


async def test_present_result_gets_validated_keyword_arguments_and_the_result() -> None:
    def present(path: str, offset: int, result: tr.ToolResult) -> tuple[str, int, str]:
        return (path, offset, result.text)

    def peek(path: str, offset: int = 0) -> str:
        return path.upper()

    tool = tool_with(present_result=present)(peek)
    result = await run(tool, {"path": "/a"})

    assert tool.present_result is not None
    assert tool.present_result(tr.snapshot_json({"path": "/a", "offset": "1"}), result) == (
        "/a",
        1,
        "/A",
    )


async def test_present_result_that_cannot_bind_gets_a_dict_and_the_result_keyword() -> None:
    def present(arguments: dict[str, Any], *, result: tr.ToolResult) -> Any:
        return (arguments, result.value)

    def peek(path: str, offset: int = 0) -> str:
        return path.upper()

    tool = tool_with(present_result=present)(peek)
    result = await run(tool, {"path": "/a"})

    assert tool.present_result is not None
    assert tool.present_result(tr.snapshot_json({"path": "/a"}), result) == (
        {"path": "/a", "offset": 0},
        "/A",
    )


async def test_present_result_returns_none_for_invalid_arguments_without_calling() -> None:
    seen: list[Any] = []

    def present(**arguments: Any) -> str:
        seen.append(arguments)
        return "shown"

    def peek(path: str) -> str:
        return path

    tool = tool_with(present_result=present)(peek)
    result = await run(tool, {"path": "/a"})

    assert tool.present_result is not None
    assert tool.present_result(tr.snapshot_json({"path": 3.5}), result) is None
    assert tool.present_result("raw", result) is None
    assert seen == []


async def test_the_approval_path_validates_a_typed_calls_arguments_once() -> None:
    # requires_approval (on validated arguments), the check that the call can run, and
    # the body share one validation; a call that cannot run is validated once too.
    from toolrail._typed import signature as _signature

    counted: list[object] = []
    original = _signature.Signature.validate

    def validate(self: _signature.Signature, arguments: Any) -> dict[str, Any]:
        counted.append(arguments)
        return original(self, arguments)

    asked: list[str] = []
    registry = tr.ToolRegistry()

    async def approver(request: tr.ApprovalRequest) -> tr.ApprovalOutcome:
        asked.append(request.tool_name)
        return tr.ApprovalOutcome.ALLOWED_ONCE

    registry.approver = approver

    @registry.tool(requires_approval=lambda path, limit: limit > 10)
    async def read(path: str, limit: int = 5) -> str:
        """Read."""
        return f"{path}:{limit}"

    _signature.Signature.validate = validate  # type: ignore[method-assign]
    try:
        ok = await registry.execute(call("read", {"path": "a", "limit": "20"}))
        assert ok.value == "a:20"
        assert asked == ["read"]
        assert len(counted) == 1
        counted.clear()
        bad = await registry.execute(call("read", {"path": 3, "limit": 20}))
        assert bad.error is not None
        assert bad.error.code == "INVALID_ARGS"
        assert len(counted) == 1
        assert asked == ["read"]
    finally:
        _signature.Signature.validate = original  # type: ignore[method-assign]
