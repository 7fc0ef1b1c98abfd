"""Tool definitions, the schema the model sees, and the calls it makes."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, Literal

from .cancel import CancelSignal
from .lossless import FrozenDict, JsonValue, thaw, type_name

if TYPE_CHECKING:
    from .._dispatch.execution import Execution, ExecutionToken, RunContext
    from .results import Content, ToolResult

__all__ = ["ExecutionMode", "Tool", "ToolCall", "ToolSchema"]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Tool:
    """A tool definition: the schema the model sees plus how the host runs it.

    ``execute(arguments, run_context)`` is the body; it may be sync or async. Build one
    by hand for a raw JSON-Schema tool, or with ``tr.tool`` from a typed function.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    execute: Callable[[JsonValue, RunContext], Any]
    output_schema: Mapping[str, Any] | None = None
    concurrency_safe: bool | Callable[[JsonValue], bool] = False
    requires_approval: bool | Callable[[JsonValue], bool] = False
    timeout: float | None = None
    cancellation: Literal["interrupt", "cooperative"] = "interrupt"
    inline: bool = False
    annotations: Mapping[str, Any] | None = None
    present_call: Callable[[JsonValue], Any] | None = None
    present_result: Callable[[JsonValue, ToolResult], Any] | None = None
    finalize_content: Callable[[Execution, ToolResult], Sequence[Content] | None] | None = None
    function: Callable[..., Any] | None = None

    def __repr__(self) -> str:
        return f"<Tool {self.name!r}>"


@dataclass(frozen=True, slots=True)
class ToolSchema:
    """What the model sees of a tool: exactly its name, description and parameters."""

    name: str
    description: str
    parameters: FrozenDict

    def to_dict(self) -> dict[str, Any]:
        """A fresh mutable ``{"name", "description", "parameters"}``."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": thaw(self.parameters),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One call the model asked for."""

    call_id: str
    name: str
    arguments: Any = field(default_factory=dict)
    scope: Hashable | None = None
    parent: ExecutionToken | None = None
    signal: CancelSignal | None = None

    def __post_init__(self) -> None:
        # Checked by type, and a str subclass kept as its plain value: the registry looks
        # the name up and compares it, which must never run the caller's own __eq__.
        for label in ("call_id", "name"):
            value = getattr(self, label)
            kind = type(value)
            if kind is not str:
                if not issubclass(kind, str):
                    raise TypeError(f"ToolCall.{label} must be a str, got {type_name(kind)}")
                object.__setattr__(self, label, str.__str__(value))
        if self.signal is not None and not isinstance(self.signal, CancelSignal):
            raise TypeError(
                f"ToolCall.signal must be a CancelSignal or None, got {type(self.signal).__name__}"
            )

    @classmethod
    def from_json(cls, call_id: str, name: str, raw: str | None, **fields: Any) -> ToolCall:
        """Build a call from model-emitted argument text.

        ``None`` or ``""`` become ``{}``; text that is not valid JSON (``NaN`` and
        ``Infinity`` are not JSON) is kept as the raw string, so the tool reports
        invalid arguments instead of the call being lost.

        >>> ToolCall.from_json("c1", "add", '{"a": 1}').arguments
        {'a': 1}
        """
        arguments: Any
        if raw is None or raw == "":
            arguments = {}
        else:
            try:
                arguments = (_DECODER.decode(raw) if type(raw) is str
                             else json.loads(raw, parse_constant=_reject_constant))
            except ValueError:
                arguments = raw
        return cls(call_id=call_id, name=name, arguments=arguments, **fields)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# One decoder for every call: ``json.loads`` with an argument builds a new one each time.
_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)


class ExecutionMode(StrEnum):
    """How a call may be scheduled relative to its siblings in one model step."""

    PARALLEL = "parallel"
    EXCLUSIVE = "exclusive"
