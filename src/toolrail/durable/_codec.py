"""Calls, results and batches as the plain data an engine records (``durable``)."""

from __future__ import annotations

from typing import Any

from .._model.lossless import snapshot_json, thaw
from .._model.results import ContextMessage, ErrorInfo, ImageContent, TextContent, ToolResult
from .._model.tool import ToolCall
from .._scheduling.scheduler import Batch

__all__ = ["batch_from_data", "batch_to_data", "call_from_data", "call_to_data",
           "result_from_data", "result_to_data"]

Data = dict[str, Any]


def call_to_data(call: ToolCall) -> Data:
    """A call a durable step can record: its id, name, frozen arguments and scope.

    A call's own ``signal`` and ``parent`` live in one process only, so a durable step
    does not take them (its batch ``signal`` is the live process's)."""
    if not isinstance(call, ToolCall):
        raise TypeError(f"a durable step takes ToolCalls, got {type(call).__name__}")
    if call.signal is not None or call.parent is not None:
        raise ValueError(
            f"call {call.call_id!r}: a durable step's calls cannot carry a signal or a "
            "parent (they do not survive the process); give the step a signal instead")
    scope = call.scope
    if scope is not None and type(scope) is not str:
        raise TypeError(f"call {call.call_id!r}: a durable step's scope must be a str or None, "
                        f"got {type(scope).__name__}")
    try:
        arguments = thaw(snapshot_json(call.arguments))
    except ValueError:
        raise ValueError(f"call {call.call_id!r}: a durable step's arguments must be "
                         "losslessly JSON-serializable") from None
    return {"call_id": call.call_id, "name": call.name, "arguments": arguments,
            "scope": scope}


def call_from_data(data: Data) -> ToolCall:
    return ToolCall(call_id=data["call_id"], name=data["name"], arguments=data["arguments"],
                    scope=data["scope"])


def result_to_data(result: ToolResult) -> Data:
    return result.to_dict()


def result_from_data(data: Data) -> ToolResult:
    error = data["error"]
    return ToolResult(
        content=_content(data["content"]),
        is_error=data["is_error"],
        value=snapshot_json(data["value"]),
        error=None if error is None else ErrorInfo(error["message"], error["code"], error["type"]),
        meta=snapshot_json(data["meta"]),
        contexts=tuple(ContextMessage(_content(c["content"]), c["source"],
                                      snapshot_json(c["meta"])) for c in data["contexts"]),
        concludes_turn=data["concludes_turn"],
    )


def batch_to_data(batch: Batch) -> Data:
    return {"results": [result_to_data(r) for r in batch.results],
            "cancelled": batch.cancelled}


def batch_from_data(data: Data) -> Batch:
    results = tuple(result_from_data(r) for r in data["results"])
    contexts = tuple(c for result in results for c in result.contexts)
    return Batch(results, contexts, data["cancelled"], any(r.concludes_turn for r in results))


def _content(blocks: list[Data]) -> tuple[TextContent | ImageContent, ...]:
    return tuple(TextContent(b["text"]) if b["type"] == "text"
                 else ImageContent(b["data"], b["mime_type"]) for b in blocks)
