"""``toolrail demo``: a scripted walk through the pipeline, printing every result."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from ._cancel import CancelController
from ._decisions import Accept, ApprovalOutcome, ApprovalRequest, Ask, Block
from ._errors import ToolArgsError
from ._execution import Execution, RunContext
from ._json import thaw
from ._registry import ToolRegistry
from ._results import ToolResult
from ._tool import Tool, ToolCall

__all__ = ["run_demo"]

_OBJECT = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def run_demo(*, auto_approve: bool) -> int:
    """Run the walk-through; returns the exit code."""
    with tempfile.TemporaryDirectory(prefix="toolrail-demo-") as workspace:
        return asyncio.run(_walk(Path(workspace), auto_approve))


async def _walk(root: Path, auto_approve: bool) -> int:
    (root / "notes.txt").write_text("toolrail keeps every result in model order.")

    def approver(request: ApprovalRequest) -> ApprovalOutcome:
        question = f"  approve {request.tool_name}({thaw(request.arguments)})? [y/N] "
        if auto_approve:
            print(question + "y (auto-approved)")
            return ApprovalOutcome.ALLOWED_ONCE
        answer = input(question).strip().lower()
        return ApprovalOutcome.ALLOWED_ONCE if answer in ("y", "yes") else ApprovalOutcome.REJECTED

    registry = ToolRegistry(approver=approver)
    registry.register(_read_tool(root))
    registry.register(_write_tool(root))
    registry.register(Tool(name="sleep", description="Wait a while.", parameters={"type": "object"},
                           execute=_sleep, timeout=0.2))
    registry.register(Tool(name="env", description="Read an environment variable.",
                           parameters={"type": "object"},
                           execute=lambda args, ctx: "SECRET=hunter2"))

    def writes_need_approval(execution: Execution, call_next: Any) -> Any:
        if execution.name == "write_file":
            return Ask("writes change the workspace")
        return call_next()

    registry.pre_execute(writes_need_approval)
    registry.guard(lambda execution: "reading outside the workspace is not allowed"
                   if execution.name == "read_file" and ".." in _path(execution.arguments)
                   else None)
    registry.post_execute(lambda execution, result, call_next: Block("secrets are redacted")
                          if "SECRET" in result.text else Accept())

    agent = registry.scope("agent-1")
    agent.register(Tool(name="read_file", description="Read a file (agent-1's read-only copy).",
                        parameters=_OBJECT,
                        execute=lambda args, ctx: "[agent-1 sees a sandboxed copy]"))

    controller = CancelController()
    controller.cancel("the user pressed stop")
    steps: list[tuple[str, Any, ToolCall]] = [
        ("a global tool", registry, ToolCall(call_id="c1", name="read_file",
                                              arguments={"path": "notes.txt"})),
        ("a scoped tool shadows the global one", agent,
         ToolCall(call_id="c2", name="read_file", arguments={"path": "notes.txt"})),
        ("an unknown tool", registry, ToolCall(call_id="c3", name="delete_everything")),
        ("a write asks the approver", registry,
         ToolCall(call_id="c4", name="write_file",
                  arguments={"path": "out.txt", "text": "written by the demo"})),
        ("a guard denies", registry, ToolCall(call_id="c5", name="read_file",
                                              arguments={"path": "../etc/passwd"})),
        ("post-execute blocks a secret", registry, ToolCall(call_id="c6", name="env")),
        ("a tool times out", registry, ToolCall(call_id="c7", name="sleep")),
        ("a cancelled call never starts", registry,
         ToolCall(call_id="c8", name="read_file", arguments={"path": "notes.txt"},
                  signal=controller.signal)),
        ("arguments the model garbled", registry,
         ToolCall.from_json("c9", "read_file", '{"path": "notes.txt"')),
    ]
    print("toolrail demo: every call goes through one pipeline\n")
    for title, target, call in steps:
        print(f"- {title}: {call.name}({call.arguments!r})")
        result = await target.execute(call)
        _show(result)
    print("\nThe registry never raised: every failure above is a result the model can read.")
    sys.stdout.flush()
    return 0


def _show(result: ToolResult) -> None:
    status = f"error {result.error.code}" if result.error is not None else "ok"
    print(f"    -> [{status}] {result.text}")


def _read_tool(root: Path) -> Tool:
    def read(args: Any, ctx: RunContext) -> str:
        return (root / _path(args)).read_text()

    return Tool(name="read_file", description="Read a UTF-8 text file of the workspace.",
                parameters=_OBJECT, execute=read, concurrency_safe=True)


def _write_tool(root: Path) -> Tool:
    def write(args: Any, ctx: RunContext) -> str:
        target = root / _path(args)
        target.write_text(args["text"])
        return f"wrote {len(args['text'])} characters to {args['path']}"

    return Tool(name="write_file", description="Write a text file in the workspace.",
                parameters={"type": "object"}, execute=write)


async def _sleep(args: Any, ctx: RunContext) -> str:
    await asyncio.sleep(10)
    return "woke up"


def _path(arguments: Any) -> str:
    if not isinstance(arguments, dict) or not isinstance(arguments.get("path"), str):
        raise ToolArgsError('invalid arguments: "path" must be a string')
    return str(arguments["path"])
