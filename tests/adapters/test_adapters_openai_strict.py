"""toolrail.adapters.openai: strict mode, out (the strict schema) and back (nulls back to
absent) (spec: integrations.md, "Provider adapters")."""

from __future__ import annotations

from typing import Any

import pytest

import toolrail as tr
from openai_helpers import chat_message, exactly, registry, schema, strict
from toolrail.adapters import openai as oa

# ---- strict mode --------------------------------------------------------------------


def test_strict_closes_every_object_and_requires_every_property() -> None:
    [tool] = oa.chat_tools(
        [schema("move", {"type": "object", "properties": {"to": {"type": "string"}}})],
        strict=True,
    )

    assert tool == {
        "type": "function",
        "function": {
            "name": "move",
            "description": "A tool.",
            "parameters": {
                "type": "object",
                "properties": {"to": {"type": ["string", "null"]}},
                "required": ["to"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }


def test_strict_gives_a_tool_without_parameters_an_empty_closed_object() -> None:
    assert strict({"type": "object"}) == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_strict_makes_only_optional_properties_nullable() -> None:
    parameters = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a"],
    }

    assert strict(parameters)["properties"] == {
        "a": {"type": "integer"},
        "b": {"type": ["integer", "null"]},
    }


@pytest.mark.parametrize(
    ("optional", "nullable"),
    [
        ({"type": ["string", "integer"]}, {"type": ["string", "integer", "null"]}),
        (
            {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
        ),
        (
            {"type": "string", "enum": ["F", "C"], "description": "Unit."},
            {
                "anyOf": [{"type": "string", "enum": ["F", "C"]}, {"type": "null"}],
                "description": "Unit.",
            },
        ),
        ({"const": 1}, {"anyOf": [{"const": 1}, {"type": "null"}]}),
        ({"$ref": "#/$defs/P"}, {"anyOf": [{"$ref": "#/$defs/P"}, {"type": "null"}]}),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, None),
        ({"type": ["string", "null"]}, None),
        ({"enum": ["a", None]}, None),
    ],
)
def test_strict_makes_an_optional_property_nullable_in_the_simplest_form(
    optional: dict[str, Any], nullable: dict[str, Any] | None
) -> None:
    parameters = {
        "type": "object",
        "properties": {"p": optional},
        "$defs": {"P": {"type": "object", "properties": {}}},
    }

    assert strict(parameters)["properties"]["p"] == (optional if nullable is None else nullable)


def test_strict_rewrites_nested_objects_definitions_and_array_items() -> None:
    parameters = tr.thaw(registry().schemas()[1].parameters)

    rewritten = strict(parameters)

    assert rewritten["properties"]["points"] == {
        "items": {"$ref": "#/$defs/Point"},
        "type": "array",
    }
    assert rewritten["$defs"]["Point"] == {
        "properties": {
            "x": {"type": "integer"},
            "y": {"type": ["integer", "null"], "description": "default=0"},
        },
        "required": ["x", "y"],
        "type": "object",
        "additionalProperties": False,
    }


def test_strict_moves_constraints_it_cannot_send_into_the_description() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "Who.", "minLength": 1, "maxLength": 9},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "when": {"type": "string", "format": "date"},
            "site": {"type": "string", "format": "uri"},
            "code": {"type": "string", "pattern": "^(?!x)[a-z]+$"},
            "page": {"type": "integer", "minimum": 1, "default": 1},
        },
        "required": ["name", "tags", "when", "site", "code", "page"],
    }

    assert strict(parameters)["properties"] == {
        "name": {"type": "string", "description": "Who. (minLength=1, maxLength=9)"},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "uniqueItems=true"},
        "when": {"type": "string", "format": "date"},
        "site": {"type": "string", "description": 'format="uri"'},
        "code": {"type": "string", "description": 'pattern="^(?!x)[a-z]+$"'},
        "page": {"type": "integer", "minimum": 1, "description": "default=1"},
    }


def test_strict_drops_a_null_default_and_the_schema_dialect_keyword() -> None:
    parameters = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"p": {"type": ["string", "null"], "default": None}},
    }

    assert strict(parameters) == {
        "type": "object",
        "properties": {"p": {"type": ["string", "null"]}},
        "required": ["p"],
        "additionalProperties": False,
    }


def test_strict_reads_one_of_as_any_of_and_folds_a_lone_all_of() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "shape": {
                "oneOf": [{"$ref": "#/$defs/Circle"}, {"$ref": "#/$defs/Square"}],
                "discriminator": {"propertyName": "kind"},
            },
            "size": {"allOf": [{"type": "integer"}], "description": "Size."},
        },
        "required": ["shape", "size"],
        "$defs": {
            "Circle": {
                "type": "object",
                "properties": {"r": {"type": "number"}},
                "required": ["r"],
            },
            "Square": {
                "type": "object",
                "properties": {"s": {"type": "number"}},
                "required": ["s"],
            },
        },
    }

    rewritten = strict(parameters)

    assert rewritten["properties"] == {
        "shape": {"anyOf": [{"$ref": "#/$defs/Circle"}, {"$ref": "#/$defs/Square"}]},
        "size": {"type": "integer", "description": "Size."},
    }
    assert rewritten["$defs"]["Square"]["additionalProperties"] is False


def test_strict_wraps_a_ref_with_siblings_in_any_of() -> None:
    parameters = {
        "type": "object",
        "properties": {"at": {"$ref": "#/$defs/P", "description": "Where."}},
        "required": ["at"],
        "$defs": {"P": {"type": "object", "properties": {}}},
    }

    assert strict(parameters)["properties"]["at"] == {
        "anyOf": [{"$ref": "#/$defs/P"}],
        "description": "Where.",
    }


def test_strict_keeps_recursive_references_to_the_root() -> None:
    parameters = {
        "type": "object",
        "properties": {"children": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["children"],
    }

    assert strict(parameters)["properties"]["children"] == {
        "type": "array",
        "items": {"$ref": "#"},
    }


def test_strict_accepts_unevaluated_properties_false_as_a_closed_object() -> None:
    parameters = {"type": "object", "properties": {}, "unevaluatedProperties": False}

    assert strict(parameters)["additionalProperties"] is False


@pytest.mark.parametrize(
    ("parameters", "construct"),
    [
        (
            {"type": "object", "properties": {"tags": {"type": "object", "patternProperties": {}}}},
            "patternProperties at #/properties/tags",
        ),
        (
            {"type": "object", "additionalProperties": {"type": "string"}},
            "additionalProperties other than false (an open map) at #",
        ),
        (
            {"type": "object", "additionalProperties": True},
            "additionalProperties other than false (an open map) at #",
        ),
        (
            {"type": "object", "properties": {"v": {}}},
            "a schema without a type at #/properties/v",
        ),
        (
            {"type": "object", "properties": {"v": {"description": "Anything."}}},
            "a schema without a type at #/properties/v",
        ),
        (
            {"type": "object", "properties": {"v": {"type": "array"}}},
            "an array without typed items at #/properties/v",
        ),
        (
            {"type": "object", "properties": {"v": {"type": "array", "items": True}}},
            "the boolean schema true at #/properties/v/items",
        ),
        (
            {"type": "object", "properties": {"v": {"allOf": [{"type": "a"}, {"type": "b"}]}}},
            "allOf with several schemas at #/properties/v",
        ),
        (
            {"type": "object", "properties": {"v": {"type": "string", "not": {"const": ""}}}},
            "not at #/properties/v",
        ),
        (
            {"type": "object", "if": {}, "then": {}},
            "if at #",
        ),
        (
            {"type": "object", "dependentRequired": {"a": ["b"]}},
            "dependentRequired at #",
        ),
        (
            {"type": "object", "properties": {"v": {"type": "array", "prefixItems": []}}},
            "prefixItems at #/properties/v",
        ),
        (
            {"type": "object", "properties": {"v": {"$ref": "#/properties/w"}}},
            "a $ref to '#/properties/w' (only #, #/$defs/… or #/definitions/…) at #/properties/v",
        ),
        (
            {"type": "object", "$defs": {"D": {"type": "object", "propertyNames": {}}}},
            "propertyNames at #/$defs/D",
        ),
    ],
)
def test_strict_refuses_what_strict_mode_cannot_express_naming_tool_construct_and_place(
    parameters: dict[str, Any], construct: str
) -> None:
    with pytest.raises(ValueError, match=exactly(f"cannot make tool 't' strict: {construct}")):
        strict(parameters)


def test_strict_refuses_a_root_other_than_an_object() -> None:
    with pytest.raises(
        ValueError,
        match=exactly('cannot make tool \'u\' strict: a root other than "type": "object"'),
    ):
        oa.responses_tools(
            [{"name": "u", "parameters": {"anyOf": [{"type": "object"}]}}], strict=True
        )


def test_without_strict_no_schema_is_refused_or_changed() -> None:
    parameters = {"type": "object", "patternProperties": {"^x": {"type": "string"}}}

    [tool] = oa.chat_tools([schema("t", parameters)])

    assert tool["function"].get("parameters") == parameters
    assert "strict" not in tool["function"]


# ---- strict mode: nulls back to absent ----------------------------------------------


def test_given_the_schemas_a_null_for_an_optional_property_becomes_absent() -> None:
    reg = registry()
    message = chat_message(("c1", "add", '{"a": 1, "b": null}'))

    [call] = oa.calls_from_chat(message, schemas=reg.schemas())

    assert call.arguments == {"a": 1}


async def test_a_strict_call_with_nulls_for_optional_arguments_runs_with_the_defaults() -> None:
    reg = registry()
    arguments = '{"points": [{"x": 1, "y": null}], "label": null, "mode": null}'
    message = chat_message(("c1", "plot", arguments))

    [call] = oa.calls_from_chat(message, schemas=reg.schemas())

    assert call.arguments == {"points": [{"x": 1}], "label": None}
    assert (await reg.execute(call)).text == "1 points, None, x"


async def test_without_the_schemas_such_a_null_reaches_the_tool_and_fails_validation() -> None:
    reg = registry()

    [call] = oa.calls_from_chat(chat_message(("c1", "add", '{"a": 1, "b": null}')))
    result = await reg.execute(call)

    assert result.error is not None
    assert result.error.code == "INVALID_ARGS"


def test_a_null_for_a_required_or_nullable_property_is_kept() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "req": {"type": "string"},
            "opt": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "node": {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "null"}]},
        },
        "required": ["req"],
        "$defs": {"N": {"type": "object", "properties": {"v": {"type": "integer"}}}},
    }
    message = {
        "tool_calls": [
            {
                "id": "c1",
                "function": {
                    "name": "t",
                    "arguments": '{"req": null, "opt": null, "node": {"v": null}, "x": null}',
                },
            }
        ]
    }

    [call] = oa.calls_from_chat(message, schemas=[{"name": "t", "parameters": parameters}])

    assert call.arguments == {"req": None, "opt": None, "node": {}, "x": None}


def test_calls_of_unknown_tools_or_with_raw_string_arguments_are_left_alone() -> None:
    message = chat_message(("c1", "nope", '{"b": null}'), ("c2", "add", "{oops"))

    calls = oa.calls_from_chat(message, schemas=registry().schemas())

    assert [c.arguments for c in calls] == [{"b": None}, "{oops"]


def test_the_helpers_integrations_build_on_are_public_and_their_examples_run() -> None:
    import doctest
    from pathlib import Path

    import toolrail.adapters
    from toolrail.adapters import _strict

    assert toolrail.adapters.__all__ == ["portable_names", "strict_schema", "visible_content",
                                         "without_strict_nulls"]
    assert doctest.testmod(_strict).failed == 0
    # The integrations use the public helpers only, never an adapter's private module.
    integrations = Path(toolrail.adapters.__file__).parent.parent / "integrations"
    for module in integrations.glob("*.py"):
        assert "adapters._" not in module.read_text(), module.name
