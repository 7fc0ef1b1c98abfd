"""The execute pipeline, stage 10: the post-execute chain, `Accept` and `Block` (spec:
pipeline.md, "Stages")."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

import toolrail as tr
from helpers import (
    IMAGE,
    NUMBER_SCHEMA,
    UNRENDERABLE,
    AroundNext,
    PostNext,
    Recorder,
    assert_final_error,
    context,
    deep_list,
    deferring,
    make_call,
    make_tool,
    nesting,
    raising_tool,
    returning,
)

# ---- stage 10: post-execute ---------------------------------------------------------


async def test_the_innermost_post_execute_decision_is_accept_and_keeps_the_result(
    registry: tr.ToolRegistry,
) -> None:
    decisions: list[tr.PostDecision] = []
    seen: list[tr.ToolResult] = []

    async def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> Any:
        seen.append(result)
        decision = await call_next()
        decisions.append(decision)
        return decision

    registry.register(make_tool(execute=returning(tr.ToolOutput(value={"n": 1}, meta="m"))))
    registry.post_execute(post)
    result = await registry.execute(make_call())

    (decision,) = decisions
    assert isinstance(decision, tr.Accept)
    assert decision.content is None
    assert tuple(decision.contexts) == ()
    assert result == seen[0]
    assert result.value == {"n": 1}
    assert result.meta == "m"


async def test_post_execute_chain_runs_outermost_first_with_prepend_first(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    registry.register(make_tool())
    registry.post_execute(nesting(log, "a"))
    registry.post_execute(nesting(log, "b"))
    registry.post_execute(nesting(log, "first"), prepend=True)
    await registry.execute(make_call())

    assert log.events == ["first>", "a>", "b>", "b<", "a<", "first<"]


async def test_post_execute_call_next_awaited_twice_runs_the_rest_again(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    async def twice(
        execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision:
        await call_next()
        return await call_next()

    def inner(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> tr.Accept:
        log("inner")
        return tr.Accept(content="inner " + str(len(log.events)))

    registry.register(make_tool())
    registry.post_execute(twice)
    registry.post_execute(inner)
    result = await registry.execute(make_call())

    assert log.events == ["inner", "inner"]
    assert result.content == (tr.TextContent("inner 2"),)


@pytest.mark.parametrize(
    ("replacement", "content"),
    [
        ("replaced", (tr.TextContent("replaced"),)),
        ([tr.TextContent("a"), IMAGE], (tr.TextContent("a"), IMAGE)),
        ((tr.TextContent("t"),), (tr.TextContent("t"),)),
        ([], ()),
    ],
)
async def test_accept_with_content_replaces_only_the_content(
    registry: tr.ToolRegistry, replacement: Any, content: tuple[tr.Content, ...]
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> tr.ToolOutput:
        ctx.defer_context("kept")
        ctx.conclude_turn()
        return tr.ToolOutput(value={"v": 1}, meta={"m": 2})

    registry.register(make_tool(execute=body))
    registry.post_execute(lambda execution, result, call_next: tr.Accept(content=replacement))
    result = await registry.execute(make_call())

    assert result.content == content
    assert result.value == {"v": 1}
    assert result.meta == {"m": 2}
    assert result.contexts == (context("kept", "t"),)
    assert result.concludes_turn is True
    assert result.is_error is False


async def test_accept_with_content_on_a_failure_keeps_it_a_failure(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(raising_tool(tr.ToolError("nope", code="X"), "async"))
    registry.post_execute(
        lambda execution, result, call_next: tr.Accept(content="friendlier words")
    )
    result = await registry.execute(make_call())

    assert result.is_error is True
    assert result.error == tr.ErrorInfo("nope", "X", "ToolError")
    assert result.content == (tr.TextContent("friendlier words"),)


@pytest.mark.parametrize(
    ("value", "content"),
    [
        ({"total": 3, "name": "Zoë"}, (tr.TextContent('{"total": 3, "name": "Zoë"}'),)),
        ("plain text", (tr.TextContent("plain text"),)),
        (None, ()),
        ([1, 2], (tr.TextContent("[1, 2]"),)),
    ],
)
async def test_accept_with_value_replaces_the_value_and_re_renders_the_content(
    registry: tr.ToolRegistry, value: Any, content: tuple[tr.Content, ...]
) -> None:
    registry.register(make_tool(execute=returning(tr.ToolOutput(value="old", meta="m"))))
    registry.post_execute(lambda execution, result, call_next: tr.Accept(value=value))
    result = await registry.execute(make_call())

    assert result.is_error is False
    assert result.value == (tuple(value) if isinstance(value, list) else value)
    assert result.content == content
    assert result.meta == "m"


async def test_accept_with_value_is_snapshotted_and_frozen(registry: tr.ToolRegistry) -> None:
    value: dict[str, Any] = {"rows": [{"id": 1}]}
    registry.register(make_tool())
    registry.post_execute(lambda execution, result, call_next: tr.Accept(value=value))
    result = await registry.execute(make_call())
    value["rows"].append({"id": 2})

    assert result.value == {"rows": ({"id": 1},)}
    assert type(result.value) is tr.FrozenDict


async def test_accept_with_value_satisfying_the_output_schema_is_kept(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool(execute=returning({"a": 1}), output_schema=NUMBER_SCHEMA))
    registry.post_execute(lambda execution, result, call_next: tr.Accept(value={"a": 2}))
    result = await registry.execute(make_call())

    assert result.value == {"a": 2}
    assert result.content == (tr.TextContent('{"a": 2}'),)


async def test_accept_with_value_violating_the_output_schema_is_a_final_error(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        ctx.defer_context("dropped")
        return {"a": 1}

    registry.register(make_tool(execute=body, output_schema=NUMBER_SCHEMA))
    registry.post_execute(lambda execution, result, call_next: tr.Accept(value={"a": "x"}))
    registry.on_result(lambda execution, result: log("observer"))
    result = await registry.execute(make_call())

    assert result.error is not None
    message = result.error.message
    assert message.startswith('tool "t" returned invalid output: ')
    assert_final_error(result, message, "INVALID_TOOL_OUTPUT", "ToolOutputError")
    assert log.events == ["observer"]


async def test_accept_with_a_value_that_is_not_lossless_is_a_final_invalid_output_error(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.post_execute(lambda execution, result, call_next: tr.Accept(value={"s": {1}}))
    result = await registry.execute(make_call())

    assert_final_error(
        result,
        'tool "t" returned invalid output: value is not lossless JSON: $.s is a set',
        "INVALID_TOOL_OUTPUT",
        "ToolOutputError",
    )


async def test_accept_with_a_value_too_deep_to_render_is_a_final_invalid_output_error(
    registry: tr.ToolRegistry,
) -> None:
    deep = deep_list(100_000)
    registry.register(make_tool())
    registry.post_execute(lambda execution, result, call_next: tr.Accept(value=deep))
    result = await registry.execute(make_call())

    assert result.error is not None
    message = result.error.message
    assert message.startswith(UNRENDERABLE)
    assert_final_error(result, message, "INVALID_TOOL_OUTPUT", "ToolOutputError")


async def test_accept_with_value_on_a_failed_result_is_a_final_error(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(raising_tool(RuntimeError("broken"), "async"))
    registry.post_execute(lambda execution, result, call_next: tr.Accept(value="rescued"))
    result = await registry.execute(make_call())

    assert_final_error(result, "post-execute cannot replace the value of a failed result")


async def test_accept_with_both_value_and_content_is_a_final_error(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.post_execute(lambda execution, result, call_next: tr.Accept(content="c", value="v"))
    result = await registry.execute(make_call())

    assert_final_error(result, "post-execute Accept cannot replace both value and content")


async def test_accept_contexts_are_appended_after_the_existing_contexts(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool(execute=deferring("deferred")))
    registry.post_execute(
        lambda execution, result, call_next: tr.Accept(contexts=[context("outer")])
    )
    registry.post_execute(
        lambda execution, result, call_next: tr.Accept(contexts=(context("inner"),))
    )
    result = await registry.execute(make_call())

    # the outer middleware's decision is the one that counts
    assert result.contexts == (context("deferred", "t"), context("outer"))
    assert result.value == "ok"


@pytest.mark.parametrize(
    ("feedback", "content", "message"),
    [
        ("not allowed to show this", (tr.TextContent("not allowed to show this"),),
         "not allowed to show this"),
        ([tr.TextContent("line 1"), IMAGE, tr.TextContent("line 2")],
         (tr.TextContent("line 1"), IMAGE, tr.TextContent("line 2")),
         "line 1\n[image content]\nline 2"),
        ((IMAGE,), (IMAGE,), "[image content]"),
        ("", (tr.TextContent("Error: tool result blocked by post-execute policy"),),
         "tool result blocked by post-execute policy"),
        ([], (tr.TextContent("Error: tool result blocked by post-execute policy"),),
         "tool result blocked by post-execute policy"),
    ],
    ids=["str", "blocks", "image-only", "empty-str", "empty-blocks"],
)  # fmt: skip
async def test_block_turns_the_result_into_a_blocked_failure(
    registry: tr.ToolRegistry, feedback: Any, content: tuple[tr.Content, ...], message: str
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> tr.ToolOutput:
        ctx.defer_context("deferred")
        ctx.conclude_turn()
        return tr.ToolOutput(value={"secret": 1}, meta={"m": 1})

    registry.register(make_tool(execute=body))
    registry.post_execute(lambda execution, result, call_next: tr.Block(feedback))
    result = await registry.execute(make_call())

    assert result.is_error is True
    assert result.content == content
    assert result.error == tr.ErrorInfo(message, "BLOCKED")
    assert result.value is None
    assert result.meta is None
    assert result.contexts == ()
    assert result.concludes_turn is False


async def test_block_keeps_only_its_own_contexts(registry: tr.ToolRegistry) -> None:
    async def around(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        result = await call_next()
        return tr.ToolResult(
            content=result.content, value=result.value, contexts=(context("wrapper"),)
        )

    registry.register(make_tool())
    registry.around_execute(around)
    registry.post_execute(
        lambda execution, result, call_next: tr.Block(
            "blocked", contexts=[context("policy 1"), context("policy 2")]
        )
    )
    result = await registry.execute(make_call())

    assert result.contexts == (context("policy 1"), context("policy 2"))
    assert result.error == tr.ErrorInfo("blocked", "BLOCKED")


async def test_block_applies_to_a_denial_too(registry: tr.ToolRegistry) -> None:
    registry.register(make_tool())
    registry.pre_execute(lambda execution, call_next: tr.Deny("denied"))
    registry.post_execute(lambda execution, result, call_next: tr.Block("rewritten"))
    result = await registry.execute(make_call())

    assert result.error == tr.ErrorInfo("rewritten", "BLOCKED")
    assert result.content == (tr.TextContent("rewritten"),)


@pytest.mark.parametrize(
    "value", [None, "accept", tr.Allow(), tr.Deny("x"), True, tr.ToolResult(content=())]
)
async def test_an_invalid_post_execute_return_is_a_final_error(
    registry: tr.ToolRegistry, log: Recorder, value: Any
) -> None:
    registry.register(make_tool(execute=deferring("dropped")))
    registry.post_execute(lambda execution, result, call_next: value)
    registry.on_result(lambda execution, result: log("observer"))
    result = await registry.execute(make_call())

    assert_final_error(result, f"post-execute middleware returned {value!r}, not Accept or Block")
    assert log.events == ["observer"]


async def test_a_raising_post_execute_middleware_is_a_final_error_with_its_message(
    registry: tr.ToolRegistry,
) -> None:
    async def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> Any:
        raise tr.ToolError("audit log unavailable", code="AUDIT")

    registry.register(make_tool(execute=deferring("dropped")))
    registry.post_execute(post)
    result = await registry.execute(make_call())

    assert_final_error(result, "audit log unavailable", "AUDIT", "ToolError")


async def test_a_scope_post_execute_sees_only_its_scopes_calls(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.scope("agent").post_execute(
        lambda execution, result, call_next: tr.Accept(content="scoped")
    )
    scoped = await registry.scope("agent").execute(make_call())
    unscoped = await registry.execute(make_call())
    other = await registry.execute(make_call(scope="other"))

    assert scoped.content == (tr.TextContent("scoped"),)
    assert unscoped.content == (tr.TextContent("ok"),)
    assert other.content == (tr.TextContent("ok"),)


# ---- a value set by post-execute Accept(value=...) ---------------------------------


class _Person(pydantic.BaseModel):
    name: str
    age: int


@pytest.mark.parametrize(("value", "reason"), [
    pytest.param({"name": "b"}, "\"$\": 'age' is a required property", id="missing field"),
    pytest.param({"name": "b", "age": "old"}, "\"age\": 'old' is not of type 'integer'",
                 id="wrong type"),
])
async def test_a_value_accept_sets_on_a_typed_tool_is_checked_against_its_output_schema(
        value: Any, reason: str) -> None:
    registry = tr.ToolRegistry()

    @registry.tool
    def person() -> _Person:
        """A person."""
        return _Person(name="a", age=1)

    registry.post_execute(lambda e, r, call_next: tr.Accept(value=value))
    result = await registry.execute(tr.ToolCall(call_id="c", name="person"))
    message = f'tool "person" returned invalid output: {reason}'
    assert result.error == tr.ErrorInfo(message, "INVALID_TOOL_OUTPUT", "ToolOutputError")
    assert result.text == "Error: " + message


async def test_a_valid_value_accept_sets_on_a_typed_tool_replaces_the_value() -> None:
    registry = tr.ToolRegistry()

    @registry.tool
    def person() -> _Person:
        """A person."""
        return _Person(name="a", age=1)

    registry.post_execute(lambda e, r, call_next: tr.Accept(value={"name": "b", "age": 2}))
    result = await registry.execute(tr.ToolCall(call_id="c", name="person"))
    assert result.error is None
    assert result.value == {"name": "b", "age": 2}
