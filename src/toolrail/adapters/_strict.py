"""OpenAI's strict mode (Structured Outputs): rewriting a tool's JSON Schema for it,
and taking back the ``null``s it makes the model send for absent optional properties.

Reference: OpenAI's guide to Structured Outputs, "Supported schemas".
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from .. import ToolCall
from ._common import SchemaLike, schema_parts

__all__ = ["restore_absent", "strict_schema", "without_strict_nulls"]


# ---- strict mode --------------------------------------------------------------------

_REJECTED = (
    "patternProperties",
    "propertyNames",
    "unevaluatedProperties",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "prefixItems",
    "additionalItems",
)
_NOTED = (
    "minLength",
    "maxLength",
    "minProperties",
    "maxProperties",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedItems",
)
_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
_LOOKAROUNDS = ("(?=", "(?!", "(?<=", "(?<!")
_TYPED = ("type", "$ref", "anyOf", "enum", "const")


def strict_schema(tool: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """``parameters`` rewritten for OpenAI strict mode (module docstring); a new dict.

    Raises:
        ValueError: ``cannot make tool '<tool>' strict: <construct> at <JSON pointer>``.
    """
    if parameters.get("type") != "object" or "anyOf" in parameters or "oneOf" in parameters:
        raise ValueError(f'cannot make tool {tool!r} strict: a root other than "type": "object"')
    return _StrictRewrite(tool, parameters).node(parameters, "#")


class _StrictRewrite:
    """One tool's strict rewrite; ``node`` returns a new schema and never edits its input."""

    __slots__ = ("root", "tool")

    def __init__(self, tool: str, root: Mapping[str, Any]) -> None:
        self.tool = tool
        self.root = root

    def fail(self, construct: str, path: str) -> ValueError:
        return ValueError(f"cannot make tool {self.tool!r} strict: {construct} at {path}")

    def node(self, schema: object, path: str) -> dict[str, Any]:
        if isinstance(schema, bool):
            raise self.fail(f"the boolean schema {json.dumps(schema)}", path)
        if not isinstance(schema, Mapping):
            raise self.fail("a schema that is not an object", path)
        schema = self.merged(schema, path)
        if schema.get("unevaluatedProperties", True) is False:
            schema = {k: v for k, v in schema.items() if k != "unevaluatedProperties"}
        for key in _REJECTED:
            if key in schema:
                raise self.fail(key, path)
        out: dict[str, Any] = {}
        notes: list[str] = []
        for key, value in schema.items():
            if key in ("$schema", "discriminator") or (key == "default" and value is None):
                continue
            if key in _NOTED or key == "default" or _unsupported_string_rule(key, value):
                notes.append(f"{key}={json.dumps(value)}")
            elif key in ("$defs", "definitions"):
                if not isinstance(value, Mapping):
                    raise self.fail(f"{key} that is not an object", path)
                out[key] = {n: self.node(s, f"{path}/{key}/{n}") for n, s in value.items()}
            elif key == "anyOf":
                if not isinstance(value, list):
                    raise self.fail("anyOf that is not an array", path)
                out[key] = [self.node(s, f"{path}/anyOf/{i}") for i, s in enumerate(value)]
            elif key == "items":
                out[key] = self.node(value, f"{path}/items")
            elif key == "$ref" and not _is_local_ref(value):
                raise self.fail(f"a $ref to {value!r} (only #, #/$defs/… or #/definitions/…)", path)
            else:
                out[key] = value
        if notes:
            described = out.get("description")
            note = ", ".join(notes)
            out["description"] = f"{described} ({note})" if described else note
        if not any(key in out for key in _TYPED):
            raise self.fail("a schema without a type", path)
        if "object" in _types(out):
            self.close_object(schema, out, path)
        if "array" in _types(out) and "items" not in out:
            raise self.fail("an array without typed items", path)
        if "$ref" in out and len(out) > 1:
            out = {"anyOf": [{"$ref": out.pop("$ref")}], **out}
        return out

    def merged(self, schema: Mapping[str, Any], path: str) -> Mapping[str, Any]:
        """``oneOf`` as ``anyOf``; a lone ``allOf`` folded into its parent."""
        if "oneOf" in schema:
            if "anyOf" in schema:
                raise self.fail("oneOf next to anyOf", path)
            schema = {("anyOf" if k == "oneOf" else k): v for k, v in schema.items()}
        if "allOf" in schema:
            all_of = schema["allOf"]
            if not isinstance(all_of, list) or len(all_of) != 1:
                raise self.fail("allOf with several schemas", path)
            if not isinstance(all_of[0], Mapping):
                raise self.fail("an allOf entry that is not an object", f"{path}/allOf/0")
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            return self.merged({**all_of[0], **rest}, path)
        return schema

    def close_object(self, schema: Mapping[str, Any], out: dict[str, Any], path: str) -> None:
        if schema.get("additionalProperties", False) is not False:
            raise self.fail("additionalProperties other than false (an open map)", path)
        properties = schema.get("properties", {})
        if not isinstance(properties, Mapping):
            raise self.fail("properties that are not an object", path)
        required = schema.get("required", ())
        rewritten = {}
        for name, prop in properties.items():
            node = self.node(prop, f"{path}/properties/{name}")
            if name not in required and not _accepts_null(prop, self.root):
                node = _nullable(node)
            rewritten[name] = node
        out["properties"] = rewritten
        out["required"] = list(rewritten)
        out["additionalProperties"] = False


def _unsupported_string_rule(key: str, value: object) -> bool:
    if key == "format":
        return value not in _FORMATS
    return key == "pattern" and isinstance(value, str) and any(t in value for t in _LOOKAROUNDS)


def _is_local_ref(ref: object) -> bool:
    """``#`` or a top-level definition: the only pointers strict mode resolves."""
    if not isinstance(ref, str):
        return False
    for prefix in ("#/$defs/", "#/definitions/"):
        name = ref.removeprefix(prefix)
        if name != ref:
            return bool(name) and "/" not in name
    return ref == "#"


def _types(schema: Mapping[str, Any]) -> list[Any]:
    types = schema.get("type")
    return types if isinstance(types, list) else [types]


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` that also accepts ``null``: a type list, an extra variant, or a wrapper."""
    if "type" in schema and not any(k in schema for k in ("enum", "const", "anyOf", "$ref")):
        return {**schema, "type": [*_types(schema), "null"]}
    if "anyOf" in schema and "type" not in schema:
        return {**schema, "anyOf": [*schema["anyOf"], {"type": "null"}]}
    outer: dict[str, Any] = {k: schema[k] for k in ("title", "description") if k in schema}
    inner = {k: v for k, v in schema.items() if k not in outer}
    return {"anyOf": [inner, {"type": "null"}], **outer}


# ---- nulls back to absent -----------------------------------------------------------


def without_strict_nulls(arguments: dict[str, Any], parameters: Mapping[str, Any]) -> Any:
    """``arguments`` of a call made under ``strict_schema(name, parameters)``, without the
    ``null`` strict mode made the model send for each property it may leave out (and
    whose own schema rejects ``null``): the arguments as the tool's schema means them.

    >>> without_strict_nulls({"path": "a", "limit": None},
    ...                      {"type": "object", "properties": {"path": {"type": "string"},
    ...                       "limit": {"type": "integer"}}, "required": ["path"]})
    {'path': 'a'}
    """
    return _without_nulls(arguments, parameters, parameters)


def restore_absent(calls: list[ToolCall], schemas: Iterable[SchemaLike] | None) -> list[ToolCall]:
    if schemas is None:
        return calls
    parameters = {name: params for name, _, params in map(schema_parts, schemas)}
    restored = []
    for call in calls:
        root = parameters.get(call.name)
        if root is not None and isinstance(call.arguments, dict):
            call = dataclasses.replace(call, arguments=without_strict_nulls(call.arguments, root))
        restored.append(call)
    return restored


def _without_nulls(value: Any, schema: Any, root: Mapping[str, Any]) -> Any:
    """``value`` minus each ``null`` its schema rejects for a property it may leave out."""
    schema = _branch(value, _resolve(schema, root), root)
    if not isinstance(schema, Mapping):
        return value
    if isinstance(value, dict):
        properties, required = schema.get("properties"), schema.get("required", ())
        if not isinstance(properties, Mapping):
            return value
        kept = {}
        for key, item in value.items():
            prop = properties.get(key)
            if prop is None:
                kept[key] = item
            elif item is not None:
                kept[key] = _without_nulls(item, prop, root)
            elif key in required or _accepts_null(prop, root):
                kept[key] = item
        return kept
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_without_nulls(item, schema["items"], root) for item in value]
    return value


def _branch(value: Any, schema: Any, root: Mapping[str, Any]) -> Any:
    """The one ``anyOf``/``oneOf``/``allOf`` branch that can hold this object or array."""
    if not isinstance(schema, Mapping) or not isinstance(value, dict | list):
        return schema
    kind = "object" if isinstance(value, dict) else "array"
    for key in ("anyOf", "oneOf", "allOf"):
        variants = schema.get(key)
        if isinstance(variants, list):
            fits = [v for v in (_resolve(s, root) for s in variants) if _holds(v, kind)]
            return fits[0] if len(fits) == 1 else schema
    return schema


def _holds(schema: Any, kind: str) -> bool:
    return isinstance(schema, Mapping) and kind in _types(schema)


def _accepts_null(schema: Any, root: Mapping[str, Any], depth: int = 0) -> bool:
    schema = _resolve(schema, root)
    if isinstance(schema, bool) or depth > 32:
        return schema is True
    if not isinstance(schema, Mapping):
        return True
    if "const" in schema and schema["const"] is not None:
        return False
    if "enum" in schema and None not in schema["enum"]:
        return False
    if "type" in schema and "null" not in _types(schema):
        return False
    for key in ("anyOf", "oneOf"):
        variants = schema.get(key)
        if isinstance(variants, list) and not any(
            _accepts_null(v, root, depth + 1) for v in variants
        ):
            return False
    all_of = schema.get("allOf")
    return not isinstance(all_of, list) or all(_accepts_null(v, root, depth + 1) for v in all_of)


def _resolve(schema: Any, root: Mapping[str, Any]) -> Any:
    """Follow local ``$ref`` pointers (``#``, ``#/$defs/x`` …) to the schema they name."""
    for _ in range(32):
        ref = schema.get("$ref") if isinstance(schema, Mapping) else None
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            return schema
        target: Any = root
        for part in ref[2:].split("/") if ref != "#" else ():
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, Mapping) else None
        schema = target
    return schema
