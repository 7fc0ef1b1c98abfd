"""One call inside the pipeline: ``Execution`` and the body's ``RunContext``.

Every attribute is read-only. Around-execute middleware may replace ``signal`` (the
pipeline opens that window for the duration of the around chain); anywhere else
assigning raises ``AttributeError``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from ._cancel import CancelSignal
from ._json import JsonValue, snapshot_json
from ._results import Content, ContextMessage, ImageContent, TextContent

__all__ = ["Execution", "ExecutionToken", "RunContext"]

_set = object.__setattr__


class ExecutionToken:
    """An opaque correlation token, fresh per call; compared by identity only."""

    __slots__ = ("__weakref__",)

    def __repr__(self) -> str:
        return f"<ExecutionToken {id(self):#x}>"

    def __reduce__(self) -> Any:
        raise TypeError("ExecutionToken is never serialized")


class Execution:
    """One call as every middleware, guard and observer of it sees it."""

    __slots__ = ("_signal_writable", "arguments", "call_id", "name", "parent", "scope",
                 "signal", "token")

    token: ExecutionToken
    call_id: str
    name: str
    arguments: JsonValue
    scope: Hashable | None
    parent: ExecutionToken | None
    signal: CancelSignal

    def __init__(
        self,
        token: ExecutionToken,
        call_id: str,
        name: str,
        arguments: JsonValue,
        scope: Hashable | None,
        parent: ExecutionToken | None,
        signal: CancelSignal,
    ) -> None:
        _set(self, "token", token)
        _set(self, "call_id", call_id)
        _set(self, "name", name)
        _set(self, "arguments", arguments)
        _set(self, "scope", scope)
        _set(self, "parent", parent)
        _set(self, "signal", signal)
        _set(self, "_signal_writable", False)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "signal" and self._signal_writable:
            if not isinstance(value, CancelSignal):
                raise TypeError(f"signal must be a CancelSignal, got {type(value).__name__}")
            _set(self, "signal", value)
            return
        where = " outside around-execute middleware" if name == "signal" else ""
        raise AttributeError(f"{type(self).__name__}.{name} is read-only{where}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__}.{name} is read-only")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} call_id={self.call_id!r}>"


class RunContext(Execution):
    """What a tool body receives: the execution's fields, the body signal, and two effects.

    ``defer_context`` and ``conclude_turn`` take effect only while this body
    invocation runs; they may be called from a worker thread.
    """

    __slots__ = ("_active", "_concludes", "_deferred")

    def __init__(self, execution: Execution, signal: CancelSignal) -> None:
        super().__init__(execution.token, execution.call_id, execution.name,
                         execution.arguments, execution.scope, execution.parent, signal)
        _set(self, "_active", True)
        _set(self, "_concludes", False)
        _set(self, "_deferred", [])

    def defer_context(
        self,
        message: ContextMessage | str | Content | Sequence[Content],
        *,
        source: str | None = None,
        meta: Any = None,
    ) -> None:
        """Attach a context message to this call's result, for the model's next request.

        A ``str`` or content builds a ``ContextMessage`` whose ``source`` defaults to the
        tool's name. Ignored once the body has settled.
        """
        if isinstance(message, ContextMessage):
            built = message
        else:
            if isinstance(message, str):
                content: tuple[Content, ...] = (TextContent(message),)
            elif isinstance(message, TextContent | ImageContent):
                content = (message,)
            elif isinstance(message, Sequence) and all(
                isinstance(b, TextContent | ImageContent) for b in message
            ):
                content = tuple(message)
            else:
                raise TypeError(
                    "defer_context() takes a ContextMessage, a str, a Content or a sequence "
                    f"of Content, got {type(message).__name__}"
                )
            if source is not None and not isinstance(source, str):
                raise TypeError(f"source must be a str, got {type(source).__name__}")
            built = ContextMessage(content, self.name if source is None else source,
                                   snapshot_json(meta))
        if self._active:
            self._deferred.append(built)

    def conclude_turn(self) -> None:
        """Mark this invocation's success as concluding the model's turn."""
        if self._active:
            _set(self, "_concludes", True)

    def _settle(self) -> None:
        _set(self, "_active", False)
