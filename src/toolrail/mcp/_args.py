"""Checking a remote tool's arguments against its ``inputSchema`` before the round trip.

The validator is compiled once per tool (when it is registered), as the SDK's client
does for output schemas: ``$ref`` pointers resolve within the schema only. A schema
that is not valid JSON Schema, or whose ``$ref`` does not resolve, checks nothing: the
server is left to judge.

A failure is the ``INVALID_ARGS`` error typed tools give (typed-tools.md, "Arguments"):
``invalid arguments: <violation>; <violation>``, each violation
``"<path>": <what is wrong>`` (dotted path, ``[i]`` for items, ``"arguments"`` for the
root), ``missing required property "<path>"`` or ``unexpected property "<path>"``;
what is wrong is in jsonschema's words.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from referencing.exceptions import Unresolvable

from .. import ToolArgsError

__all__ = ["ArgumentCheck", "NOT_AN_OBJECT"]

logger = logging.getLogger("toolrail.mcp")

NOT_AN_OBJECT = '"arguments" must be an object'


class ArgumentCheck:
    """The compiled ``inputSchema`` of one remote tool."""

    __slots__ = ("validator",)

    def __init__(self, name: str, schema: Mapping[str, Any]) -> None:
        from jsonschema import SchemaError
        from jsonschema.validators import validator_for
        from referencing import Registry

        self.validator: Any = None
        try:
            cls = validator_for(schema)
            cls.check_schema(schema)
        except SchemaError as exc:
            logger.warning(
                "the inputSchema of MCP tool %r is not valid JSON Schema; its arguments go "
                "to the server unchecked: %s",
                name,
                exc.message,
            )
            return
        self.validator = cls(schema, registry=Registry())

    def check(self, arguments: Any) -> None:
        """Raise ``ToolArgsError`` when ``arguments`` (plain JSON) break the schema."""
        if not isinstance(arguments, dict):
            raise ToolArgsError(f"invalid arguments: {NOT_AN_OBJECT}", violations=(NOT_AN_OBJECT,))
        if self.validator is None:
            return
        try:
            errors = list(self.validator.iter_errors(arguments))
        except Unresolvable:
            return  # the server resolves what we cannot
        if errors:
            violations = tuple(dict.fromkeys(v for error in errors for v in _violations(error)))
            raise ToolArgsError(
                "invalid arguments: " + "; ".join(violations), violations=violations
            )


def _violations(error: Any) -> Iterable[str]:
    path = _path(error.absolute_path)
    instance, schema = error.instance, error.schema
    if error.validator == "required" and isinstance(instance, dict):
        for name in error.validator_value:
            if name not in instance:
                yield f'missing required property "{_join(path, name)}"'
        return
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        extras = [
            key
            for key in instance
            if key not in known and not any(re.search(pattern, key) for pattern in patterns)
        ]
        if extras and error.validator_value is False:
            for key in extras:
                yield f'unexpected property "{_join(path, key)}"'
            return
    yield f'"{path or "arguments"}": {error.message}'


def _path(parts: Iterable[Any]) -> str:
    path = ""
    for part in parts:
        path = f"{path}[{part}]" if isinstance(part, int) else _join(path, part)
    return path


def _join(path: str, name: object) -> str:
    return f"{path}.{name}" if path else str(name)
