"""Reading pydantic's schemas and errors the way toolrail reports them.

``tidy`` shapes a generated JSON Schema (no titles; closed or open object levels),
``has_schema`` looks for a kind of core schema, and ``violation`` turns one pydantic
error into the spec's words, with a path that walks the core schema so that pydantic's
union-member tags never appear in it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CONTAINERS", "MODELS", "has_schema", "tidy", "violation"]

CONTAINERS = frozenset({
    "any", "list", "tuple", "set", "frozenset", "dict", "generator", "model", "dataclass",
    "typed-dict", "definitions", "definition-ref", "is-instance", "json-or-python",
})
"""Core schema kinds below which a value may hold a snapshot's tuples or FrozenDicts."""


def tidy(schema: dict[str, Any], forbid: bool, *, open_objects: bool = False) -> dict[str, Any]:
    """Drop ``title`` keys; with ``forbid``, close every level that lists properties.

    With ``open_objects`` (``extra="ignore"``) every such level is left open instead,
    whatever a model's own config says, since validation ignores unknown keys there.
    """
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        node.pop("title", None)
        if forbid and "properties" in node:
            node["additionalProperties"] = False
        elif open_objects and "properties" in node and node.get("additionalProperties") is False:
            del node["additionalProperties"]
        for key, value in node.items():
            if key in ("properties", "$defs", "definitions", "patternProperties",
                       "dependentSchemas"):
                if isinstance(value, dict):
                    stack.extend(value.values())
            elif key not in ("default", "examples", "const", "enum", "required"):
                stack.append(value)
    return schema


MODELS = frozenset({"model", "dataclass", "typed-dict", "definitions", "definition-ref"})


def has_schema(schema: Any, kinds: set[str] | frozenset[str]) -> bool:
    """Whether a core schema holds, below its root, a schema of one of ``kinds``."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") in kinds and node is not schema:
                return True
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return False


def violation(error: Any, schema: Any, *, root: str) -> str:
    """One violation in the spec's words, its path without pydantic's union-member tags."""
    path = _path(error.get("loc", ()), schema)
    kind = error.get("type")
    if kind == "missing":
        return f'missing required property "{path or root}"'
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        return f'unexpected property "{path or root}"'
    return f'"{path or root or "arguments"}": {error.get("msg", "is invalid")}'


def _path(loc: tuple[Any, ...], schema: Any) -> str:
    """``a.b[0]`` from an error location, walking the core schema beside it.

    pydantic puts the member's tag (``int``, ``list[int]``, a model's name) into the
    location of an error inside a union; the walk knows where a union is, and skips it.
    """
    definitions: dict[str, Any] = {}
    path = ""
    parts = list(loc)
    node = schema
    while parts:
        node = _unwrap(node, definitions)
        kind = node.get("type") if isinstance(node, dict) else None
        if kind in ("union", "tagged-union") and isinstance(parts[0], str):
            node = _choice(node, parts.pop(0))
            continue
        part = parts.pop(0)
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        node = _child(node, part)
    return path


def _unwrap(node: Any, definitions: dict[str, Any]) -> Any:
    while isinstance(node, dict):
        kind = node.get("type")
        if kind == "definitions":
            for definition in node.get("definitions", ()):
                definitions[definition.get("ref")] = definition
            node = node.get("schema")
        elif kind == "definition-ref":
            node = definitions.get(str(node.get("schema_ref")))
        elif kind in ("model", "dataclass", "nullable", "default", "function-after",
                      "function-before", "function-wrap", "json-or-python"):
            node = node.get("schema") or node.get("python_schema")
        else:
            return node
    return node


def _choice(node: dict[str, Any], tag: str) -> Any:
    choices = node.get("choices", ())
    if isinstance(choices, dict):
        return choices.get(tag)
    kind = tag.split("[", 1)[0]  # pydantic tags a list[int] member "list[int]"
    for choice in choices:
        schema, label = choice if isinstance(choice, tuple) else (choice, None)
        cls = schema.get("cls") if isinstance(schema, dict) else None
        if tag in (label, getattr(cls, "__name__", None)) or kind == schema.get("type"):
            return schema
    return None  # unknown member: the rest of the path is taken as it is


def _child(node: Any, part: Any) -> Any:
    if not isinstance(node, dict):
        return None
    kind = node.get("type")
    if kind in ("typed-dict", "model-fields"):
        field = node.get("fields", {}).get(part)
        return field.get("schema") if field else None
    if kind == "dataclass-args":
        for field in node.get("fields", ()):
            if field.get("name") == part:
                return field.get("schema")
        return None
    if kind in ("list", "set", "frozenset", "generator"):
        return node.get("items_schema")
    if kind == "tuple":
        items = node.get("items_schema", ())
        return items[part] if isinstance(part, int) and part < len(items) else (
            items[-1] if items else None)
    if kind == "dict":
        return node.get("values_schema")
    return None
