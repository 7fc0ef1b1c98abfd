"""Result value types: what a call produces and what the model reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from .lossless import JsonValue, thaw

__all__ = [
    "Content",
    "ContextMessage",
    "ErrorInfo",
    "ImageContent",
    "TextContent",
    "ToolOutput",
    "ToolResult",
    "is_content",
    "only_content",
]


@dataclass(frozen=True, slots=True)
class TextContent:
    """A text block the model reads."""

    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ImageContent:
    """An image block: base64 ``data`` of the given ``mime_type``."""

    data: str
    mime_type: str
    type: Literal["image"] = "image"


Content: TypeAlias = TextContent | ImageContent



def is_content(value: Any) -> bool:
    """Whether ``value`` is a content block, judged by its type (never ``isinstance``,
    which would read a foreign value's own ``__class__``)."""
    return issubclass(type(value), TextContent | ImageContent)


def only_content(value: Any, containers: Any = (list, tuple), *, empty: bool = False) -> bool:
    """Whether ``value`` is a ``containers`` (not a ``str``) holding only content blocks
    (and at least one unless ``empty``); ``False`` for one that cannot even be read."""
    kind = type(value)
    if not issubclass(kind, containers) or issubclass(kind, str):
        return False
    try:
        return (empty or bool(value)) and all(is_content(block) for block in value)
    except Exception:  # unreadable: whoever asked reports it
        return False

@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """Why a call failed: the message, a stable ``code`` and the exception class name."""

    message: str
    code: str | None = None
    type: str | None = None

    def __post_init__(self) -> None:
        # A str subclass (a StrEnum, say) is stored as its plain value: the result it
        # is part of is frozen, and must not be changeable through a field.
        for name in ("message", "code", "type"):
            value = object.__getattribute__(self, name)
            kind = type(value)
            if kind is not str and value is not None and issubclass(kind, str):
                object.__setattr__(self, name, str.__str__(value))


@dataclass(frozen=True, slots=True)
class ContextMessage:
    """Extra context for the model's next request, produced by ``source``."""

    content: tuple[Content, ...]
    source: str
    meta: JsonValue = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"content": [...], "source": ..., "meta": ...}``."""
        return {
            "content": [_content_dict(block) for block in self.content],
            "source": self.source,
            "meta": thaw(self.meta),
        }


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The final, frozen outcome of one call."""

    content: tuple[Content, ...]
    is_error: bool = False
    value: JsonValue = None
    error: ErrorInfo | None = None
    meta: JsonValue = None
    contexts: tuple[ContextMessage, ...] = ()
    concludes_turn: bool = False

    @property
    def text(self) -> str:
        """The text blocks joined with ``"\\n"``."""
        return "\n".join(b.text for b in self.content if isinstance(b, TextContent))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of the result; every key is always present."""
        error = self.error
        return {
            "content": [_content_dict(block) for block in self.content],
            "is_error": self.is_error,
            "value": thaw(self.value),
            "error": None
            if error is None
            else {"message": error.message, "code": error.code, "type": error.type},
            "meta": thaw(self.meta),
            "contexts": [context.to_dict() for context in self.contexts],
            "concludes_turn": self.concludes_turn,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutput:
    """A tool body's explicit return form: a value, its content, and presentation ``meta``.

    ``content=None`` renders the content from ``value`` (a ``str`` is one text block,
    ``None`` no blocks, anything else its JSON text).
    """

    value: Any = None
    content: Sequence[Content] | None = None
    meta: Any = None


def _content_dict(block: Content) -> dict[str, Any]:
    if isinstance(block, TextContent):
        return {"type": "text", "text": block.text}
    return {"type": "image", "data": block.data, "mime_type": block.mime_type}


# The pipeline builds a result and a text block per call. A frozen dataclass's
# ``__init__`` assigns each field through ``object.__setattr__``, which costs more than
# the rest of building a result. For values already checked, ``make_result`` and
# ``make_text`` fill an instance of a plain twin class (same slots, in the same order,
# so the same memory layout) with ordinary attribute stores and then give it its real
# class: the object is then exactly what the dataclass's ``__init__`` would have made.
class _ResultTwin:
    __slots__ = ToolResult.__slots__


class _TextTwin:
    __slots__ = TextContent.__slots__


_new = object.__new__


def make_text(text: str) -> TextContent:
    """``TextContent(text)`` for a text already known to be a ``str``."""
    block: Any = _TextTwin()
    block.text = text
    block.type = "text"
    block.__class__ = TextContent
    return block  # type: ignore[no-any-return]


def make_result(
    content: tuple[Content, ...],
    is_error: bool,
    value: JsonValue,
    error: ErrorInfo | None,
    meta: JsonValue,
    contexts: tuple[ContextMessage, ...],
    concludes_turn: bool,
) -> ToolResult:
    """``ToolResult(...)`` for fields already frozen and consistent."""
    result: Any = _ResultTwin()
    result.content = content
    result.is_error = is_error
    result.value = value
    result.error = error
    result.meta = meta
    result.contexts = contexts
    result.concludes_turn = concludes_turn
    result.__class__ = ToolResult
    return result  # type: ignore[no-any-return]
