"""``tr.tool``: the value a body returns, checked and rendered (spec: typed-tools.md,
"Output")."""

from __future__ import annotations

import json
import threading
from typing import Any, cast

from pydantic import BaseModel, field_serializer

import toolrail as tr
from typed_helpers import (
    Point,
    Shape,
    assert_error,
    describe_person,
    price,
    read_file,
    returns_none,
    returns_text,
    run,
    tool_with,
)


class Secret(BaseModel):
    token: str

    @field_serializer("token")
    def _hide(self, token: str) -> str:
        raise ValueError("cannot serialize the token")


@tr.tool
def leak() -> Secret:
    return Secret(token="hunter2")


@tr.tool
def bad_point() -> Point:
    return cast(Point, {"x": "left", "y": 2})


@tr.tool
def bad_shape() -> Shape:
    return cast(Shape, {"name": "s", "points": [{"x": 1, "y": 2}, {"x": 1, "y": "up"}]})


# ---- output -------------------------------------------------------------------------


async def test_the_value_is_dumped_in_json_mode_by_alias() -> None:
    result = await run(describe_person)

    expected = {"fullName": "Ada Lovelace", "born": "1815-12-10T08:30:00"}
    assert result.is_error is False
    assert tr.thaw(result.value) == expected
    assert result.content == (tr.TextContent(json.dumps(expected, ensure_ascii=False)),)


async def test_a_decimal_value_is_dumped_as_its_serialization_mode_string() -> None:
    result = await run(price)
    assert tr.thaw(result.value) == {"amount": "1.50"}


async def test_a_str_value_is_one_text_block() -> None:
    result = await run(read_file, {"path": "/x"})
    assert result.value == "/x:0:None"
    assert result.content == (tr.TextContent("/x:0:None"),)


async def test_a_none_value_is_no_blocks() -> None:
    result = await run(tr.tool(returns_none))
    assert result.is_error is False
    assert result.value is None
    assert result.content == ()


async def test_other_values_are_one_text_block_of_json_dumps_without_ascii_escapes() -> None:
    def cities() -> dict[str, Any]:
        return {"città": ["Roma", "Zürich"], "n": 2}

    result = await run(tr.tool(cities))

    expected = {"città": ["Roma", "Zürich"], "n": 2}
    assert tr.thaw(result.value) == expected
    assert result.content == (tr.TextContent(json.dumps(expected, ensure_ascii=False)),)
    assert result.content[0].type == "text"
    assert "città" in result.text


async def test_a_value_is_validated_laxly_against_the_return_annotation() -> None:
    def three() -> int:
        return cast(int, "3")

    result = await run(tr.tool(three))
    assert result.is_error is False
    assert result.value == 3
    assert result.content == (tr.TextContent("3"),)


async def test_a_mismatching_return_is_invalid_output_with_a_root_path() -> None:
    def broken() -> int:
        return cast(int, "abc")

    result = await run(tr.tool(broken))

    assert_error(
        result,
        'tool "broken" returned invalid output: "$": Input should be a valid integer, '
        "unable to parse string as an integer",
        "INVALID_TOOL_OUTPUT",
        "ToolOutputError",
    )


async def test_invalid_output_names_the_tool_by_its_given_name() -> None:
    def broken() -> int:
        return cast(int, "abc")

    result = await run(tool_with(name="renamed")(broken))

    assert result.error is not None
    assert result.error.message.startswith('tool "renamed" returned invalid output: "$": ')


async def test_a_nested_output_failure_is_reported_by_its_path() -> None:
    result = await run(bad_point)
    assert_error(
        result,
        'tool "bad_point" returned invalid output: "x": Input should be a valid integer, '
        "unable to parse string as an integer",
        "INVALID_TOOL_OUTPUT",
        "ToolOutputError",
    )


async def test_a_deep_output_failure_is_reported_by_dotted_path_with_indexes() -> None:
    result = await run(bad_shape)
    assert_error(
        result,
        'tool "bad_shape" returned invalid output: "points[1].y": Input should be a valid '
        "integer, unable to parse string as an integer",
        "INVALID_TOOL_OUTPUT",
        "ToolOutputError",
    )


async def test_strict_output_validation_uses_strict_python_mode() -> None:
    def three() -> int:
        return cast(int, "3")

    result = await run(tool_with(strict=True)(three))

    assert_error(
        result,
        'tool "three" returned invalid output: "$": Input should be a valid integer',
        "INVALID_TOOL_OUTPUT",
        "ToolOutputError",
    )


async def test_a_serializer_that_fails_is_invalid_output_with_its_message() -> None:
    result = await run(leak)

    assert result.is_error is True
    assert result.error is not None
    assert result.error.code == "INVALID_TOOL_OUTPUT"
    assert result.error.type == "ToolOutputError"
    assert result.error.message.startswith('tool "leak" returned invalid output: ')
    assert "cannot serialize the token" in result.error.message
    assert result.content == (tr.TextContent("Error: " + result.error.message),)


async def test_returning_a_tool_output_gives_its_content_directly() -> None:
    def report() -> tr.ToolOutput:
        return tr.ToolOutput(value={"n": 1}, content=[tr.TextContent("one")], meta={"m": 1})

    result = await run(tr.tool(report))

    assert result.is_error is False
    assert result.content == (tr.TextContent("one"),)
    assert tr.thaw(result.value) == {"n": 1}
    assert tr.thaw(result.meta) == {"m": 1}


async def test_returning_a_content_block_gives_that_block() -> None:
    result = await run(tr.tool(returns_text))
    assert result.is_error is False
    assert result.content == (tr.TextContent("hi"),)
    assert result.value is None


async def test_returning_a_list_of_content_gives_those_blocks() -> None:
    def blocks() -> list[tr.Content]:
        return [tr.TextContent("a"), tr.ImageContent(data="aGk=", mime_type="image/png")]

    result = await run(tr.tool(blocks))

    assert result.is_error is False
    assert result.content == (
        tr.TextContent("a"),
        tr.ImageContent(data="aGk=", mime_type="image/png"),
    )
    assert result.value is None


async def test_a_tool_error_raised_by_the_function_keeps_its_code() -> None:
    def refuse() -> int:
        raise tr.ToolError("not today", code="NOT_TODAY")

    result = await run(tr.tool(refuse))
    assert_error(result, "not today", "NOT_TODAY", "ToolError")


async def test_an_async_function_raising_a_tool_error_subclass_keeps_its_code() -> None:
    async def refuse() -> int:
        raise tr.ToolTimeoutError("too slow")

    result = await run(tr.tool(refuse))
    assert_error(result, "too slow", "TOOL_TIMEOUT", "ToolTimeoutError")


async def test_another_exception_reaches_the_pipeline_unchanged() -> None:
    def crash() -> int:
        raise KeyError("k")

    result = await run(tr.tool(crash))
    assert_error(result, "'k'", None, "KeyError")


async def test_a_sync_function_runs_in_a_worker_thread() -> None:
    def where() -> int:
        return threading.get_ident()

    result = await run(tr.tool(where))

    assert result.is_error is False
    assert result.value != threading.get_ident()


async def test_a_sync_function_runs_on_the_loop_thread_with_inline() -> None:
    def where() -> int:
        return threading.get_ident()

    result = await run(tool_with(inline=True)(where))

    assert result.value == threading.get_ident()


async def test_an_async_function_runs_on_the_loop_thread() -> None:
    async def where() -> int:
        return threading.get_ident()

    result = await run(tr.tool(where))

    assert result.value == threading.get_ident()
