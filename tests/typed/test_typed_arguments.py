"""``tr.tool``: argument validation and its violation messages (spec: typed-tools.md,
"Arguments")."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest

import toolrail as tr
from typed_helpers import (
    Closed,
    Point,
    Shape,
    add,
    assert_invalid_args,
    draw,
    execute,
    lenient,
    lenient_closed,
    received,
    run,
    take_holder,
    take_map,
    tool_with,
)


def violations_of(result: tr.ToolResult) -> list[str]:
    """The violations of an ``INVALID_ARGS`` result (none of the tested ones has ``; ``)."""
    assert result.error is not None
    assert result.error.code == "INVALID_ARGS"
    assert result.error.type == "ToolArgsError"
    prefix = "invalid arguments: "
    assert result.error.message.startswith(prefix)
    return result.error.message[len(prefix) :].split("; ")


@dataclasses.dataclass
class Pair:
    left: int
    right: int


@tr.tool
def take_values(shape: Shape, values: list[int], day: datetime.date) -> None:
    received["take_values"] = (shape, values, day)


@tool_with(strict=True)
def strict_values(
    count: int, day: datetime.date, values: list[int], point: Point, scores: dict[str, int]
) -> None:
    received["strict_values"] = (count, day, values, point, scores)


@tr.tool
def take_any(payload: Any, rows: list[Any], table: dict[str, Any]) -> None:
    received["take_any"] = (payload, rows, table)


@tr.tool
def take_pair(pair: Pair) -> None:
    received["pair"] = pair


@tr.tool
def pick(choice: int | list[int]) -> None:
    received["pick"] = choice


@tr.tool
def aim(target: Point | str) -> None:
    received["aim"] = target


# ---- arguments ----------------------------------------------------------------------


async def test_arguments_are_coerced_laxly_by_default() -> None:
    result = await run(add, {"a": "3", "b": 4})
    assert result.is_error is False
    assert result.value == 7


async def test_the_body_receives_validated_python_values() -> None:
    result = await run(
        take_values,
        {
            "shape": {"name": "tri", "points": [{"x": 1, "y": "2"}]},
            "values": [1, "2"],
            "day": "2024-01-02",
        },
    )

    assert result.is_error is False
    shape, values, day = received["take_values"]
    assert shape == Shape(name="tri", points=[Point(x=1, y=2)])
    assert type(shape) is Shape
    assert type(shape.points) is list
    assert type(values) is list
    assert values == [1, 2]
    assert day == datetime.date(2024, 1, 2)


async def test_any_typed_arguments_reach_the_body_as_plain_lists_and_dicts() -> None:
    # "validated as JSON": a JSON array becomes a list, a JSON object a dict
    result = await run(
        take_any,
        {"payload": [1, {"a": [2]}], "rows": [[1, 2]], "table": {"k": {"n": [3]}}},
    )

    assert result.is_error is False
    payload, rows, table = received["take_any"]
    assert type(payload) is list
    assert type(payload[1]) is dict
    assert type(payload[1]["a"]) is list
    assert type(rows[0]) is list
    assert type(table["k"]) is dict
    assert type(table["k"]["n"]) is list


async def test_strict_rejects_a_string_for_an_int() -> None:
    result = await run(
        strict_values,
        {"count": "3", "day": "2024-01-02", "values": [1], "point": {"x": 1, "y": 2}, "scores": {}},
    )
    assert_invalid_args(result, '"count": Input should be a valid integer')


async def test_strict_accepts_an_iso_date_and_the_snapshots_arrays_and_objects() -> None:
    arguments = tr.snapshot_json(
        {
            "count": 3,
            "day": "2024-01-02",
            "values": [1, 2],
            "point": {"x": 1, "y": 2},
            "scores": {"a": 1},
        }
    )
    assert isinstance(arguments, tr.FrozenDict)
    assert isinstance(arguments["values"], tuple)

    result = await run(strict_values, arguments)

    assert result.is_error is False
    count, day, values, point, scores = received["strict_values"]
    assert count == 3
    assert day == datetime.date(2024, 1, 2)
    assert type(values) is list
    assert values == [1, 2]
    assert point == Point(x=1, y=2)
    assert type(scores) is dict
    assert scores == {"a": 1}


async def test_strict_rejects_a_float_for_an_int_and_a_string_for_a_list() -> None:
    result = await run(
        strict_values,
        {"count": 3.5, "day": "2024-01-02", "values": "1", "point": {"x": 1, "y": 2}, "scores": {}},
    )
    assert violations_of(result) == [
        '"count": Input should be a valid integer',
        '"values": Input should be a valid array',
    ]


async def test_a_missing_required_parameter_is_reported_by_path() -> None:
    result = await run(add, {"a": 1})
    assert_invalid_args(result, 'missing required property "b"')


async def test_a_missing_nested_property_is_reported_by_dotted_path() -> None:
    result = await run(draw, {"shape": {"points": []}})
    assert_invalid_args(result, 'missing required property "shape.name"')


async def test_an_unexpected_root_property_is_reported() -> None:
    result = await run(add, {"a": 1, "b": 2, "c": 3})
    assert_invalid_args(result, 'unexpected property "c"')


async def test_a_wrong_type_is_reported_by_dotted_path_with_item_indexes() -> None:
    result = await run(
        draw, {"shape": {"name": "s", "points": [{"x": 1, "y": 2}, {"x": "left", "y": 2}]}}
    )
    assert_invalid_args(
        result,
        '"shape.points[1].x": Input should be a valid integer, '
        "unable to parse string as an integer",
    )


async def test_a_wrong_item_of_a_top_level_list_is_reported_with_its_index() -> None:
    result = await run(
        take_values, {"shape": {"name": "s", "points": []}, "values": [1, "b"], "day": "2024-01-02"}
    )
    assert_invalid_args(
        result, '"values[1]": Input should be a valid integer, unable to parse string as an integer'
    )


async def test_several_violations_are_joined_with_semicolons() -> None:
    result = await run(add, {"a": "x", "c": 1})
    assert sorted(violations_of(result)) == sorted(
        [
            '"a": Input should be a valid integer, unable to parse string as an integer',
            'missing required property "b"',
            'unexpected property "c"',
        ]
    )


async def test_an_unexpected_key_in_a_model_that_allows_extra_is_rejected_under_forbid() -> None:
    result = await run(take_holder, {"holder": {"loose": {"x": 1, "zz": 2}}})
    assert_invalid_args(result, 'unexpected property "holder.loose.zz"')


async def test_map_keys_are_free_but_unknown_keys_of_its_model_values_are_rejected() -> None:
    ok = await run(take_map, {"scores": {"anything": 1, "else": 2}, "points": {}})
    assert ok.is_error is False
    assert received["scores"] == {"anything": 1, "else": 2}

    bad = await run(take_map, {"scores": {}, "points": {"p": {"x": 1, "y": 2, "z": 3}}})
    assert_invalid_args(bad, 'unexpected property "points.p.z"')


async def test_an_unexpected_key_in_a_dataclass_is_an_unexpected_property() -> None:
    result = await run(take_pair, {"pair": {"left": 1, "right": 2, "extra": 3}})
    assert_invalid_args(result, 'unexpected property "pair.extra"')


async def test_union_violations_name_the_argument_path_not_the_union_member() -> None:
    result = await run(pick, {"choice": "a"})
    violations = violations_of(result)
    assert violations
    for violation in violations:
        assert violation.startswith('"choice": '), violation


async def test_union_violations_inside_a_model_member_use_the_dotted_path() -> None:
    result = await run(aim, {"target": {"x": "left", "y": 1}})
    paths = {violation.split(": ", 1)[0] for violation in violations_of(result)}
    assert paths <= {'"target"', '"target.x"'}, paths


async def test_extra_ignore_ignores_unknown_keys_at_every_level() -> None:
    result = await run(
        lenient, {"holder": {"loose": {"x": 1, "zz": 2}, "other": 3}, "count": 1, "top": 4}
    )
    assert result.is_error is False
    holder, count = received["lenient"]
    assert holder.loose.x == 1
    assert count == 1


async def test_extra_ignore_ignores_unknown_keys_of_a_model_that_forbids_extra() -> None:
    result = await run(lenient_closed, {"closed": {"x": 1, "zz": 2}})
    assert result.is_error is False
    assert received["lenient_closed"] == Closed(x=1)


@pytest.mark.parametrize(
    "arguments",
    [[1, 2], "text", 3, None, True],
    ids=["list", "string", "number", "null", "bool"],
)
async def test_arguments_that_are_not_an_object_are_rejected_exactly(arguments: Any) -> None:
    result = await run(add, arguments)
    assert_invalid_args(result, '"arguments" must be an object')


async def test_invalid_json_from_from_json_is_rejected_as_not_an_object() -> None:
    registry = tr.ToolRegistry()
    registry.register(add)

    result = await execute(registry, tr.ToolCall.from_json("c1", "add", '{"a": 1, '))

    assert result.content == (
        tr.TextContent('Error: invalid arguments: "arguments" must be an object'),
    )
    assert result.error == tr.ErrorInfo(
        'invalid arguments: "arguments" must be an object', "INVALID_ARGS", "ToolArgsError"
    )


async def test_invalid_arguments_never_call_the_function() -> None:
    calls: list[int] = []

    def count(n: int) -> int:
        calls.append(n)
        return n

    result = await run(tr.tool(count), {"n": "many"})

    assert result.is_error is True
    assert calls == []
