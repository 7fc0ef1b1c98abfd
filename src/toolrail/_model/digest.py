"""``call_digest``: what a durable engine records of a call, to know it again (durable.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from .lossless import JsonValue, canonical_json, snapshot_json, thaw
from .tool import ToolSchema

__all__ = ["call_digest"]


def call_digest(schema: ToolSchema, arguments: JsonValue | Mapping[str, Any]) -> str:
    """A SHA-256 (hex) of the tool's schema (name, description, parameters) and the call's
    arguments (frozen, or the plain JSON they were frozen from), as JSON with sorted keys.

    Two calls have the same digest exactly when the same tool definition would run the
    same arguments: a durable engine takes it when a call is parked for approval and
    again when the answer comes, and refuses the call (``TOOL_CHANGED``) when they differ.

    >>> s = ToolSchema("add", "Add.", {"type": "object"})
    >>> call_digest(s, {"a": 1}) == call_digest(s, {"a": 1})
    True
    >>> call_digest(s, {"a": 1}) == call_digest(s, {"a": 2})
    False
    """
    if not isinstance(schema, ToolSchema):
        raise TypeError(f"call_digest takes a ToolSchema, got {type(schema).__name__}")
    frozen = snapshot_json(arguments)  # ValueError: not JSON
    payload: Any = [schema.name, schema.description, thaw(schema.parameters), thaw(frozen)]
    text = canonical_json(payload)  # ints of any length, any depth: snapshot's limits
    return hashlib.sha256(text.encode()).hexdigest()
