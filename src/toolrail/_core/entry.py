"""``Entry``: a registered tool with everything the hot path needs, computed once.

Registration validates the ``Tool`` (raising the exact messages of the spec), freezes
its parameters into the ``ToolSchema``, compiles the output-schema check, and decides
how the body is invoked.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from .._model.checked import CheckedBody
from .._model.lossless import JsonValue, snapshot_json, thaw
from .._model.tool import Tool, ToolSchema

__all__ = ["Entry", "OutputCheck", "is_async", "path_of"]

OutputCheck = Callable[[JsonValue], list[str]]
BodyKind = Literal["async", "inline", "thread"]

_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


class Entry:
    """One tool in one layer."""

    __slots__ = ("_value_check", "approval", "check_output", "context_free", "fast", "finish",
                 "interrupts", "kind", "schema", "start", "tool")

    def __init__(self, tool: Tool, schema: ToolSchema, check_output: OutputCheck | None,
                 kind: BodyKind) -> None:
        self.tool = tool
        self.schema = schema
        self.check_output = check_output
        self._value_check = check_output
        self.kind = kind
        # An async interrupt body is awaited in the calling task, interruptibly.
        self.interrupts = tool.cancellation == "interrupt" and kind != "thread"
        self.fast = kind == "async" and self.interrupts
        body: Any = tool.execute
        halves = kind == "async" and isinstance(body, CheckedBody)
        self.start: Callable[..., Any] = body.start if halves else body
        self.finish: Callable[[str, Any], Any] | None = body.finish if halves else None
        # A typed function without a RunContext parameter, awaited in the calling task:
        # nothing would ever read its run context, so none is made.
        self.context_free = self.fast and halves and body.context_free
        # ``requires_approval``: ``None`` when it never does (the hot path reads only this).
        approval = tool.requires_approval
        self.approval: bool | Callable[[JsonValue], Any] | None = (
            None if approval is False else approval)

    def requires_approval(self, arguments: JsonValue) -> bool:
        """pipeline.md "Approval": ``True``, or the callable's exactly-``True`` answer; a
        raising callable requires approval."""
        approval = self.approval
        if approval is None or approval is True:
            return approval is True
        try:
            return approval(arguments) is True  # type: ignore[operator]
        except Exception:
            return True

    def value_check(self) -> OutputCheck | None:
        """The output-schema check of a value ``Accept(value=...)`` sets: the body's own,
        or, for a body that checks its values itself (a typed tool), the schema's,
        compiled the first time one is set."""
        if self._value_check is None and self.tool.output_schema is not None:
            self._value_check = compile_output_check(self.tool.name, self.tool.output_schema)
        return self._value_check

    def cannot_run(self, arguments: JsonValue) -> Exception | None:
        """Why the body would fail before it runs (a typed tool's invalid arguments)."""
        body = self.tool.execute
        return body.check_arguments(arguments) if isinstance(body, CheckedBody) else None

    @classmethod
    def build(cls, tool: Tool) -> Entry:
        """Validate ``tool`` in the spec's order and precompute what calls need."""
        if not isinstance(tool, Tool):
            raise TypeError(f"register() takes a Tool, got {type(tool).__name__}")
        name = tool.name
        if not isinstance(name, str) or _NAME.fullmatch(name) is None:
            raise ValueError(
                f"invalid tool name {name!r}: use 1-128 characters from A-Z, a-z, 0-9, "
                '"_", "-" and "."'
            )
        try:
            parameters = snapshot_json(tool.parameters)
        except ValueError:
            parameters = None
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            raise ValueError(
                f'tool "{name}" parameters must be a JSON Schema object with "type": "object"'
            )
        if not _valid_timeout(tool.timeout):
            raise ValueError(f'tool "{name}" timeout must be a positive finite number of seconds')
        if not callable(tool.execute):
            raise TypeError(f'tool "{name}" execute must be callable')
        if not isinstance(tool.description, str):
            raise TypeError(f'tool "{name}" description must be a str')
        if tool.cancellation not in ("interrupt", "cooperative"):
            raise ValueError(f'tool "{name}" cancellation must be "interrupt" or "cooperative"')
        approval = tool.requires_approval
        if not (isinstance(approval, bool) or callable(approval)):
            raise TypeError(f'tool "{name}" requires_approval must be a bool or a callable')
        check = None
        body = tool.execute
        checked = isinstance(body, CheckedBody) and body.output_schema is tool.output_schema
        if tool.output_schema is not None and not checked:
            check = compile_output_check(name, tool.output_schema)
        schema = ToolSchema(name, str(tool.description), parameters)
        return cls(tool, schema, check, _body_kind(tool))


def _valid_timeout(timeout: Any) -> bool:
    if timeout is None:
        return True
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        return False
    try:
        return math.isfinite(timeout) and timeout > 0
    except OverflowError:  # an int no float can hold
        return False


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` (a function, or an object with an async ``__call__``) is async."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _body_kind(tool: Tool) -> BodyKind:
    if is_async(tool.execute):
        return "async"
    return "inline" if tool.inline else "thread"


def compile_output_check(name: str, output_schema: Mapping[str, Any]) -> OutputCheck:
    """Compile a JSON Schema into a check returning ``"<path>": <problem>`` violations.

    Arrays may be tuples and objects ``FrozenDict``s, as snapshots are.
    """
    from jsonschema import validators  # imported at registration, never per call
    from jsonschema.exceptions import SchemaError

    try:
        frozen = snapshot_json(output_schema)
        if not isinstance(frozen, Mapping):
            raise ValueError("not an object")
        base = validators.validator_for(frozen, default=validators.Draft202012Validator)
        base.check_schema(thaw(frozen))
    except (ValueError, SchemaError) as exc:
        raise ValueError(f'tool "{name}" output_schema must be a valid JSON Schema: {exc}') from exc
    checker = base.TYPE_CHECKER.redefine(
        "array", lambda _checker, instance: isinstance(instance, list | tuple)
    )
    validator = validators.extend(base, type_checker=checker)(frozen)

    def check(value: JsonValue) -> list[str]:
        return [
            f'"{path_of(error.absolute_path)}": {error.message}'
            for error in validator.iter_errors(value)
        ]

    return check


def path_of(parts: Any) -> str:
    """A dotted path (``a.b[0]``) of keys and indexes; ``$`` for the root."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "$"
