"""The execute pipeline, stages 11 and 12: materializing the final result and the tool's
`finalize_content` (spec: pipeline.md, "Stages")."""

from __future__ import annotations

import datetime as dt
import gc
import inspect
from collections.abc import Callable
from typing import Any, cast

import pytest

import toolrail as tr
from helpers import (
    IMAGE,
    AroundNext,
    ContentSequence,
    Finalizer,
    Unprintable,
    assert_error,
    assert_final_error,
    context,
    make_call,
    make_tool,
    returning,
)

# ---- stage 11: materialize ----------------------------------------------------------


def returning_result(result: tr.ToolResult) -> Callable[[tr.Execution, AroundNext], tr.ToolResult]:
    return lambda execution, call_next: result


async def test_a_failure_without_error_info_gets_one_from_its_text(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    content = (tr.TextContent("first"), IMAGE, tr.TextContent("second"))
    registry.around_execute(returning_result(tr.ToolResult(content=content, is_error=True)))
    result = await registry.execute(make_call())

    assert result.is_error is True
    assert result.error == tr.ErrorInfo("first\nsecond")
    assert result.content == content


async def test_a_failure_without_error_info_or_text_gets_an_empty_message(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.around_execute(returning_result(tr.ToolResult(content=(IMAGE,), is_error=True)))
    result = await registry.execute(make_call())

    assert result.error == tr.ErrorInfo("")


async def test_a_success_drops_its_error_info(registry: tr.ToolRegistry) -> None:
    registry.register(make_tool())
    registry.around_execute(
        returning_result(
            tr.ToolResult(content=(tr.TextContent("fine"),), error=tr.ErrorInfo("stale", "X"))
        )
    )
    result = await registry.execute(make_call())

    assert result.is_error is False
    assert result.error is None
    assert result.content == (tr.TextContent("fine"),)


async def test_a_failure_drops_its_value_and_concludes_turn(registry: tr.ToolRegistry) -> None:
    registry.register(make_tool())
    registry.around_execute(
        returning_result(
            tr.ToolResult(
                content=(tr.TextContent("Error: x"),),
                is_error=True,
                value=tr.snapshot_json({"partial": 1}),
                error=tr.ErrorInfo("x", "CODE", "Type"),
                meta=tr.snapshot_json({"kept": True}),
                concludes_turn=True,
            )
        )
    )
    result = await registry.execute(make_call())

    assert result.is_error is True
    assert result.value is None
    assert result.concludes_turn is False
    assert result.error == tr.ErrorInfo("x", "CODE", "Type")
    assert result.meta == {"kept": True}


async def test_a_wrapper_result_is_deep_frozen(registry: tr.ToolRegistry) -> None:
    registry.register(make_tool())
    registry.around_execute(
        returning_result(
            tr.ToolResult(
                content=cast(Any, [tr.TextContent("x")]),
                value=cast(Any, {"rows": [{"id": 1}]}),
                meta=cast(Any, ["m", {"k": [1]}]),
                contexts=cast(
                    Any,
                    [
                        tr.ContextMessage(
                            cast(Any, [tr.TextContent("c")]), "s", cast(Any, {"a": [1]})
                        )
                    ],
                ),
            )
        )
    )
    result = await registry.execute(make_call())

    assert result.is_error is False
    assert type(result.content) is tuple
    value = cast(tr.FrozenDict, result.value)
    assert type(value) is tr.FrozenDict
    assert type(value["rows"]) is tuple
    assert type(value["rows"][0]) is tr.FrozenDict
    assert type(result.meta) is tuple
    assert type(result.contexts) is tuple
    assert type(result.contexts[0].content) is tuple
    assert type(result.contexts[0].meta) is tr.FrozenDict
    assert result.value == {"rows": ({"id": 1},)}
    assert result.meta == ("m", {"k": (1,)})


@pytest.mark.parametrize(
    "result",
    [
        tr.ToolResult(content=(tr.TextContent("x"),), meta=cast(Any, {"when": dt.date.today()})),
        tr.ToolResult(content=(tr.TextContent("x"),), value=cast(Any, {1, 2})),
        tr.ToolResult(content=(tr.TextContent("x"),),
                      contexts=(tr.ContextMessage((), "s", cast(Any, float("nan"))),)),
        tr.ToolResult(content=(tr.TextContent("x"),), contexts=cast(Any, ["not a message"])),
        tr.ToolResult(content=cast(Any, ["not a block"])),
    ],
    ids=["meta", "value", "context-meta", "context", "content"],
)  # fmt: skip
async def test_a_result_that_is_not_lossless_json_becomes_an_error(
    registry: tr.ToolRegistry, result: tr.ToolResult
) -> None:
    registry.register(make_tool())
    registry.around_execute(returning_result(result))
    final = await registry.execute(make_call())

    assert_final_error(final, "tool result must be losslessly JSON-serializable")


async def test_tool_output_meta_that_is_not_lossless_json_makes_the_result_an_error(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool(execute=returning(tr.ToolOutput(value=1, meta={"s": {1}}))))
    result = await registry.execute(make_call())

    assert_error(result, "tool result must be losslessly JSON-serializable")


# ---- stage 12: finalize content -----------------------------------------------------


async def test_finalize_content_runs_once_on_the_materialized_result_and_none_keeps_it(
    registry: tr.ToolRegistry,
) -> None:
    finalize = Finalizer(None)
    executions: list[tr.Execution] = []
    registry.register(make_tool(execute=returning({"a": [1]}), finalize_content=finalize))
    registry.on_result(lambda execution, result: executions.append(execution))

    result = await registry.execute(make_call())

    ((execution, seen),) = finalize.calls
    assert execution is executions[0]
    assert seen is result
    assert result.value == {"a": (1,)}
    assert type(seen.value) is tr.FrozenDict
    assert result.content == (tr.TextContent('{"a": [1]}'),)


async def test_finalize_content_sequence_replaces_only_the_content(
    registry: tr.ToolRegistry,
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> tr.ToolOutput:
        ctx.defer_context("kept")
        ctx.conclude_turn()
        return tr.ToolOutput(value={"v": 1}, meta="m")

    finalize = Finalizer([tr.TextContent("short"), IMAGE])
    registry.register(make_tool(execute=body, finalize_content=finalize))
    result = await registry.execute(make_call())

    assert result.content == (tr.TextContent("short"), IMAGE)
    assert type(result.content) is tuple
    assert result.value == {"v": 1}
    assert result.meta == "m"
    assert result.contexts == (context("kept", "t"),)
    assert result.concludes_turn is True
    assert len(finalize.calls) == 1


async def test_finalize_content_may_accept_any_sequence(registry: tr.ToolRegistry) -> None:
    finalize = Finalizer(ContentSequence(tr.TextContent("from a sequence")))
    registry.register(make_tool(finalize_content=finalize))
    result = await registry.execute(make_call())

    assert result.content == (tr.TextContent("from a sequence"),)


async def test_finalize_content_runs_on_denials_and_keeps_the_error(
    registry: tr.ToolRegistry,
) -> None:
    finalize = Finalizer([tr.TextContent("denied, try something else")])
    registry.register(make_tool(finalize_content=finalize))
    registry.pre_execute(lambda execution, call_next: tr.Deny("no"))
    result = await registry.execute(make_call())

    assert len(finalize.calls) == 1
    assert_error(finalize.calls[0][1], "no", "DENIED")
    assert result.is_error is True
    assert result.error == tr.ErrorInfo("no", "DENIED")
    assert result.content == (tr.TextContent("denied, try something else"),)


@pytest.mark.parametrize("failure", ["arguments", "pre", "guard", "around", "post"])
async def test_finalize_content_runs_once_on_final_errors(
    registry: tr.ToolRegistry, failure: str
) -> None:
    finalize = Finalizer(None)

    def fail(*args: Any) -> Any:
        raise RuntimeError(f"{failure} failed")

    registry.register(make_tool(finalize_content=finalize))
    if failure == "pre":
        registry.pre_execute(fail)
    elif failure == "guard":
        registry.guard(fail)
    elif failure == "around":
        registry.around_execute(fail)
    elif failure == "post":
        registry.post_execute(fail)
    arguments = {"bad": {1}} if failure == "arguments" else {}

    result = await registry.execute(make_call(arguments=arguments))

    assert len(finalize.calls) == 1
    assert finalize.calls[0][1] is result
    if failure == "arguments":
        assert_final_error(result, "tool call arguments must be losslessly JSON-serializable")
    else:
        assert_final_error(result, f"{failure} failed", None, "RuntimeError")


@pytest.mark.parametrize("out", ["text", 5, [5], [tr.TextContent("ok"), "no"], {"x": 1}, True])
async def test_finalize_content_returning_neither_none_nor_content_makes_the_result_an_error(
    registry: tr.ToolRegistry, out: Any
) -> None:
    finalize = Finalizer(out)
    seen: list[tr.ToolResult] = []
    registry.register(make_tool(finalize_content=finalize))
    registry.on_result(lambda execution, result: seen.append(result))
    result = await registry.execute(make_call())

    assert_error(result, f"finalize_content returned {out!r}, not None or a sequence of Content")
    assert len(finalize.calls) == 1
    assert seen == [result]


async def test_an_async_finalize_content_makes_the_result_an_error_and_is_closed(
    registry: tr.ToolRegistry,
) -> None:
    coroutines: list[Any] = []

    async def replacement() -> list[tr.Content]:
        return [tr.TextContent("never")]

    def finalize(execution: tr.Execution, result: tr.ToolResult) -> Any:
        coroutine = replacement()
        coroutines.append(coroutine)
        return coroutine

    registry.register(make_tool(finalize_content=finalize))
    result = await registry.execute(make_call())

    (coroutine,) = coroutines
    assert_error(
        result, f"finalize_content returned {coroutine!r}, not None or a sequence of Content"
    )
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED
    coroutines.clear()
    del coroutine
    gc.collect()  # an unclosed coroutine would warn "never awaited" here


@pytest.mark.parametrize(
    ("exc", "message", "code", "type_name"),
    [
        (RuntimeError("renderer crashed"), "renderer crashed", None, "RuntimeError"),
        (tr.ToolError("no render", code="RENDER"), "no render", "RENDER", "ToolError"),
        (Unprintable(), "<unprintable thrown value>", None, "Unprintable"),
    ],
)
async def test_a_raising_finalize_content_makes_the_result_its_error_and_is_not_called_again(
    registry: tr.ToolRegistry, exc: Exception, message: str, code: str | None, type_name: str
) -> None:
    finalize = Finalizer(exc)
    registry.register(make_tool(finalize_content=finalize))
    result = await registry.execute(make_call())

    assert_error(result, message, code, type_name)
    assert len(finalize.calls) == 1
