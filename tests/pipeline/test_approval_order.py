"""pipeline.md "Approval": a person is never asked about a call that cannot run, and
``Tool.requires_approval`` asks the approver as ``Ask(None)`` would."""

from __future__ import annotations

from typing import Any

import pytest

import toolrail as tr
from helpers import assert_error, raw_tool

ASK_REASON = "writes need a person"


class Approver:
    """Records every request and answers ``answer``."""

    def __init__(self, answer: str = "allowed-once") -> None:
        self.answer = answer
        self.asked: list[tr.ApprovalRequest] = []

    async def __call__(self, request: tr.ApprovalRequest) -> str:
        self.asked.append(request)
        return self.answer


class Lab:
    """A registry whose approver, guards, post-execute and observers leave a trace."""

    def __init__(self, *, ask: bool = True, answer: str = "allowed-once",
                 approver: bool = True) -> None:
        self.approver = Approver(answer)
        self.registry = tr.ToolRegistry(approver=self.approver if approver else None)
        self.trace: list[str] = []
        self.results: list[tr.ToolResult] = []
        if ask:
            self.registry.pre_execute(lambda execution, call_next: tr.Ask(ASK_REASON))

        def guard(execution: tr.Execution) -> None:
            self.trace.append("guard")

        def post(execution: tr.Execution, result: tr.ToolResult, call_next: Any) -> Any:
            self.trace.append(f"post {result.error.code if result.error else 'ok'}")
            return call_next()

        self.registry.guard(guard)
        self.registry.post_execute(post)
        self.registry.on_result(lambda execution, result: self.results.append(result))

    async def execute(self, name: str, arguments: Any = None, **fields: Any) -> tr.ToolResult:
        return await self.registry.execute(tr.ToolCall(call_id="1", name=name,
                                                       arguments=arguments or {}, **fields))


def ran(log: list[str]) -> Any:
    def body(arguments: Any, ctx: tr.RunContext) -> str:
        log.append(ctx.name)
        return "ran"

    return body


@tr.tool
def write_file(path: str, text: str) -> str:
    """Write a file."""
    return f"wrote {len(text)} characters to {path}"


# ---- never asked about a call that cannot run ---------------------------------------------


async def test_an_ask_for_a_tool_that_does_not_exist_is_unknown_tool_without_asking() -> None:
    lab = Lab()
    result = await lab.execute("missing")
    assert_error(result, 'unknown tool "missing"', "UNKNOWN_TOOL", "ToolNotFoundError")
    assert lab.approver.asked == []
    assert lab.trace == ["post UNKNOWN_TOOL"]  # guards skipped; post-execute sees it
    assert lab.results == [result]


async def test_an_ask_for_a_tool_hidden_from_the_scope_is_unknown_tool_without_asking() -> None:
    lab = Lab()
    body_log: list[str] = []
    lab.registry.register(raw_tool("delete", ran(body_log)))
    lab.registry.scope("agent").restrict(deny=["delete"])
    result = await lab.execute("delete", scope="agent")
    assert_error(result, 'unknown tool "delete"', "UNKNOWN_TOOL", "ToolNotFoundError")
    assert lab.approver.asked == []
    assert body_log == []


async def test_an_ask_for_typed_arguments_that_fail_validation_is_invalid_args_without_asking(
) -> None:
    lab = Lab(answer="rejected")
    lab.registry.register(write_file)
    result = await lab.execute("write_file", {"path": "a.txt"})
    assert_error(result, 'invalid arguments: missing required property "text"', "INVALID_ARGS",
                 "ToolArgsError")
    assert lab.approver.asked == [], "the rejection would have hidden the real error as DENIED"
    assert lab.trace == ["post INVALID_ARGS"]


async def test_an_ask_for_valid_typed_arguments_asks_once_and_a_rejection_denies() -> None:
    lab = Lab(answer="rejected")
    lab.registry.register(write_file)
    result = await lab.execute("write_file", {"path": "a.txt", "text": "hi"})
    assert_error(result, 'the user rejected tool "write_file"', "DENIED", None)
    [request] = lab.approver.asked
    assert (request.tool_name, request.reason, request.arguments) == (
        "write_file", ASK_REASON, {"path": "a.txt", "text": "hi"})


async def test_an_ask_for_a_raw_tool_asks_whatever_its_arguments() -> None:
    """Only typed tools validate before dispatch; a raw tool's body is its own judge."""
    lab = Lab()
    body_log: list[str] = []
    lab.registry.register(raw_tool("t", ran(body_log)))
    result = await lab.execute("t", {"anything": [1, 2]})
    assert (result.text, len(lab.approver.asked), body_log) == ("ran", 1, ["t"])


# ---- Tool.requires_approval -----------------------------------------------------------------


async def test_a_tool_that_requires_approval_asks_the_approver_as_for_ask_none() -> None:
    lab = Lab(ask=False)
    body_log: list[str] = []
    lab.registry.register(raw_tool("rm", ran(body_log), requires_approval=True))
    result = await lab.execute("rm", {"path": "x"})
    [request] = lab.approver.asked
    assert (request.tool_name, request.reason, request.arguments) == ("rm", None, {"path": "x"})
    assert (result.text, body_log, lab.trace) == ("ran", ["rm"], ["guard", "post ok"])


async def test_a_tool_that_requires_approval_with_no_approver_is_denied() -> None:
    lab = Lab(ask=False, approver=False)
    lab.registry.register(raw_tool("rm", ran([]), requires_approval=True))
    result = await lab.execute("rm")
    assert_error(result, 'tool "rm" requires approval, but no approver is configured', "DENIED",
                 None)


@pytest.mark.parametrize(("answer", "message"), [
    ("rejected", 'the user rejected tool "rm"'),
    ("cancelled", 'approval for tool "rm" was cancelled'),
    ("unavailable", 'tool "rm" requires approval, but no approval channel is available'),
])
async def test_a_tool_that_requires_approval_follows_the_approval_table(
        answer: str, message: str) -> None:
    lab = Lab(ask=False, answer=answer)
    body_log: list[str] = []
    lab.registry.register(raw_tool("rm", ran(body_log), requires_approval=True))
    result = await lab.execute("rm")
    assert_error(result, message, "DENIED", None)
    assert body_log == []


async def test_requires_approval_callable_asks_only_when_it_returns_exactly_true() -> None:
    lab = Lab(ask=False)
    seen: list[Any] = []

    def dangerous(arguments: Any) -> Any:
        seen.append(arguments)
        return {"yes": True, "truthy": 1}.get(arguments["mode"], False)

    lab.registry.register(raw_tool("op", ran([]), requires_approval=dangerous))
    for mode in ("yes", "truthy", "no"):
        await lab.execute("op", {"mode": mode})
    assert [r.arguments for r in lab.approver.asked] == [{"mode": "yes"}]
    assert all(isinstance(arguments, tr.FrozenDict) for arguments in seen)  # frozen arguments


async def test_a_raising_requires_approval_callable_requires_approval() -> None:
    lab = Lab(ask=False, answer="rejected")

    def broken(arguments: Any) -> bool:
        raise RuntimeError("cannot tell")

    lab.registry.register(raw_tool("op", ran([]), requires_approval=broken))
    result = await lab.execute("op")
    assert_error(result, 'the user rejected tool "op"', "DENIED", None)


async def test_a_deny_from_pre_execute_wins_over_requires_approval() -> None:
    lab = Lab(ask=False)
    lab.registry.pre_execute(lambda execution, call_next: tr.Deny("read-only session"))
    lab.registry.register(raw_tool("rm", ran([]), requires_approval=True))
    result = await lab.execute("rm")
    assert_error(result, "read-only session", "DENIED", None)
    assert lab.approver.asked == []


async def test_requires_approval_with_invalid_typed_arguments_is_invalid_args_without_asking(
) -> None:
    lab = Lab(ask=False)

    @tr.tool(requires_approval=True)
    def rm(path: str) -> str:
        """Remove a file."""
        return path

    lab.registry.register(rm)
    result = await lab.execute("rm", {"path": 3})
    assert result.error is not None
    assert result.error.code == "INVALID_ARGS"
    assert lab.approver.asked == []


async def test_typed_requires_approval_callable_receives_validated_arguments() -> None:
    lab = Lab(ask=False)
    seen: list[Any] = []

    def outside_tmp(path: str, force: bool) -> bool:
        seen.append((path, force))
        return not path.startswith("/tmp/")

    @tr.tool(requires_approval=outside_tmp)
    def rm(path: str, force: bool = False) -> str:
        """Remove a file."""
        return f"removed {path}"

    lab.registry.register(rm)
    assert (await lab.execute("rm", {"path": "/tmp/x"})).text == "removed /tmp/x"
    assert (await lab.execute("rm", {"path": "/etc/x"})).text == "removed /etc/x"
    assert seen == [("/tmp/x", False), ("/etc/x", False)]
    assert [r.arguments for r in lab.approver.asked] == [{"path": "/etc/x"}]


async def test_requires_approval_in_a_batch_asks_in_model_order_and_keeps_results_in_order(
) -> None:
    lab = Lab(ask=False)
    lab.registry.register(raw_tool("read", ran([]), concurrency_safe=True))
    lab.registry.register(raw_tool("write", ran([]), requires_approval=True))
    calls = [tr.ToolCall(call_id=str(i), name=name, arguments={"i": i})
             for i, name in enumerate(["write", "read", "write", "missing"])]
    batch = await lab.registry.run(calls)
    assert [r.arguments for r in lab.approver.asked] == [{"i": 0}, {"i": 2}]
    assert [r.text for r in batch.results] == ["ran", "ran", "ran",
                                               'Error: unknown tool "missing"']


def test_registration_rejects_a_requires_approval_that_is_neither_bool_nor_callable() -> None:
    registry = tr.ToolRegistry()
    with pytest.raises(TypeError, match=r'^tool "t" requires_approval must be a bool or a '
                                        r"callable$"):
        registry.register(raw_tool("t", requires_approval="yes"))
    assert registry.get("t") is None


def test_tr_tool_rejects_a_requires_approval_that_is_not_callable() -> None:
    with pytest.raises(TypeError, match="requires_approval must be a bool or a callable"):
        tr.tool(requires_approval="always")(lambda path: path)  # type: ignore[call-overload]
