"""``tr.tool``: a ``Tool`` from a typed Python function.

Decoration does all the reflection once (``Signature``, in ``signature``); the tool's
``execute`` is a ``TypedBody`` that validates the arguments, calls the function and
converts its value. An async body comes in two halves (``start``, ``finish``) so the
pipeline awaits the function's own coroutine. ``concurrency_safe``, ``present_call``
and ``present_result`` callables are wrapped to run on validated arguments only.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Literal, TypeVar, overload

from pydantic import ValidationError

from .._core.entry import is_async
from .._dispatch.execution import RunContext
from .._model.checked import CheckedBody
from .._model.errors import ToolArgsError
from .._model.lossless import FrozenDict, JsonValue, thaw
from .._model.results import ToolResult
from .._model.tool import Tool
from .docstrings import parse_docstring
from .signature import Extra, Signature

__all__ = ["TypedBody", "tool"]

F = TypeVar("F", bound=Callable[..., Any])

Decorator = Callable[[Callable[..., Any]], Tool]


@overload
def tool(fn: Callable[..., Any], /, *, name: str | None = None,
         description: str | None = None,
         concurrency_safe: bool | Callable[..., bool] = False,
         requires_approval: bool | Callable[..., bool] = False,
         timeout: float | None = None, strict: bool = False, extra: Extra = "forbid",
         inline: bool = False, cancellation: Literal["interrupt", "cooperative"] = "interrupt",
         annotations: Mapping[str, Any] | None = None,
         present_call: Callable[..., Any] | None = None,
         present_result: Callable[..., Any] | None = None,
         finalize_content: Callable[..., Any] | None = None) -> Tool: ...


@overload
def tool(fn: None = None, /, *, name: str | None = None,
         description: str | None = None,
         concurrency_safe: bool | Callable[..., bool] = False,
         requires_approval: bool | Callable[..., bool] = False,
         timeout: float | None = None, strict: bool = False, extra: Extra = "forbid",
         inline: bool = False, cancellation: Literal["interrupt", "cooperative"] = "interrupt",
         annotations: Mapping[str, Any] | None = None,
         present_call: Callable[..., Any] | None = None,
         present_result: Callable[..., Any] | None = None,
         finalize_content: Callable[..., Any] | None = None) -> Decorator: ...


def tool(fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
         description: str | None = None,
         concurrency_safe: bool | Callable[..., bool] = False,
         requires_approval: bool | Callable[..., bool] = False,
         timeout: float | None = None, strict: bool = False, extra: Extra = "forbid",
         inline: bool = False, cancellation: Literal["interrupt", "cooperative"] = "interrupt",
         annotations: Mapping[str, Any] | None = None,
         present_call: Callable[..., Any] | None = None,
         present_result: Callable[..., Any] | None = None,
         finalize_content: Callable[..., Any] | None = None) -> Tool | Decorator:
    """Build a ``Tool`` from a typed function; usable bare or with options.

    >>> @tool
    ... def add(a: int, b: int) -> int:
    ...     '''Add two integers.'''
    ...     return a + b
    >>> add.name, add.description, add.parameters["required"]
    ('add', 'Add two integers.', ('a', 'b'))
    """
    if extra not in ("forbid", "ignore"):
        raise ValueError(f'extra must be "forbid" or "ignore", got {extra!r}')

    def build(func: Callable[..., Any]) -> Tool:
        spec = Signature.read(func, extra, strict)
        if present_result is not None and "result" in spec.fields:
            raise TypeError(f"{spec.label}: a tool with a parameter named 'result' cannot have "
                            "present_result (it receives the result as keyword 'result')")
        body = (_AsyncBody if is_async(func) else _SyncBody)(func, spec)
        doc = parse_docstring(getattr(func, "__doc__", None))
        return Tool(
            name=name if name is not None else func.__name__,
            description=description if description is not None else doc.description,
            parameters=spec.parameters_schema(doc.params),
            execute=body,
            output_schema=spec.output_schema,
            concurrency_safe=concurrency_safe if isinstance(concurrency_safe, bool)
            else _Classifier(concurrency_safe, spec),
            requires_approval=requires_approval if isinstance(requires_approval, bool)
            else _Approval(requires_approval, spec),
            timeout=timeout,
            cancellation=cancellation,
            inline=inline,
            annotations=annotations,
            present_call=None if present_call is None else _Presenter(present_call, spec),
            present_result=None if present_result is None
            else _ResultPresenter(present_result, spec),
            finalize_content=finalize_content,
            function=func,
        )

    return build if fn is None else build(fn)


class TypedBody(CheckedBody):
    """The ``execute`` of a typed tool: validate, call, convert the value."""

    __slots__ = ("__wrapped__", "_call", "_context", "_spec", "context_free", "name",
                 "output_schema")

    def __init__(self, func: Callable[..., Any], spec: Signature) -> None:
        self.__wrapped__ = func
        self._call = func
        self._spec = spec
        self._context = spec.context
        self.context_free = spec.context is None
        self.output_schema = spec.output_schema
        self.name = getattr(func, "__name__", "tool")

    def _kwargs(self, arguments: JsonValue, context: RunContext) -> dict[str, Any]:
        kwargs = self._spec.take(arguments)
        if kwargs is None:
            kwargs = self._spec.validate(arguments)
        if self._context is not None:
            kwargs[self._context] = context
        return kwargs

    def check_arguments(self, arguments: Any) -> Exception | None:
        try:
            self._spec.hold(arguments)  # the body takes what this validated
        except ToolArgsError as exc:
            return exc
        return None

    def __repr__(self) -> str:
        return f"<typed body of {self._spec.label}>"


class _AsyncBody(TypedBody):
    __slots__ = ()

    async def __call__(self, arguments: JsonValue, context: RunContext) -> Any:
        return self.finish(context.name, await self.start(arguments, context))

    def start(self, arguments: JsonValue, context: RunContext) -> Any:
        spec = self._spec
        quick = spec.quick
        names = spec.names  # read after quick: _first_quick sets names first
        # Validated on the approval path already (``Signature.held``), else here.
        kwargs = None if spec.held is None else spec.take(arguments)
        if kwargs is None:
            if quick is None or type(arguments) is not FrozenDict or (
                    names is not None and not names.issuperset(arguments)):
                return self._call(**self._kwargs(arguments, context))
            # The common case, with no call in between: lax, no nested models.
            try:
                kwargs = quick(thaw(arguments) if spec.thaws else arguments)
            except ValidationError as exc:
                raise spec.args_error(exc) from None
        if self._context is not None:
            kwargs[self._context] = context
        return self._call(**kwargs)

    def finish(self, name: str, value: Any) -> Any:
        spec = self._spec
        return value if type(value) is spec.plain_return else spec.canonical(name, value)


class _SyncBody(TypedBody):
    __slots__ = ()

    def __call__(self, arguments: JsonValue, context: RunContext) -> Any:
        value = self._call(**self._kwargs(arguments, context))
        return self._spec.canonical(context.name, value)


class _Classifier:
    """A user's ``concurrency_safe`` callable, run on validated arguments only."""

    __slots__ = ("_by_keyword", "_fn", "_spec")
    _option: ClassVar[str] = "concurrency_safe must be a bool or a callable"
    _keywords: ClassVar[tuple[str, ...]] = ()  # passed besides the tool's parameters

    def __init__(self, fn: Callable[..., Any], spec: Signature) -> None:
        if not callable(fn):
            raise TypeError(f"{spec.label}: {self._option}")
        self._fn = fn
        self._spec = spec
        self._by_keyword = _binds(fn, (*spec.fields, *self._keywords))

    def _invoke(self, kwargs: dict[str, Any], **more: Any) -> Any:
        if self._by_keyword:
            return self._fn(**kwargs, **more)
        return self._fn(kwargs, **more)

    def __call__(self, arguments: JsonValue) -> bool:
        kwargs = self._spec.soft_validate(arguments)
        return False if kwargs is None else self._invoke(kwargs) is True

    def __repr__(self) -> str:
        return repr(self._fn)


class _Approval(_Classifier):
    """A ``requires_approval`` callable, on validated arguments; invalid ones are never
    dispatched, so asking about them is left to the pipeline's order (pipeline.md)."""

    __slots__ = ()
    _option = "requires_approval must be a bool or a callable"

    def __call__(self, arguments: JsonValue) -> bool:
        try:
            kwargs = self._spec.hold(arguments)  # validated once for the call (``held``)
        except ToolArgsError:
            return True
        return self._invoke(kwargs) is True


class _Presenter(_Classifier):
    __slots__ = ()
    _option = "present_call must be a callable"

    def __call__(self, arguments: JsonValue) -> Any:
        kwargs = self._spec.soft_validate(arguments)
        return None if kwargs is None else self._invoke(kwargs)


class _ResultPresenter(_Classifier):
    __slots__ = ()
    _option = "present_result must be a callable"
    _keywords = ("result",)

    def __call__(self, arguments: JsonValue, result: ToolResult) -> Any:  # type: ignore[override]
        kwargs = self._spec.soft_validate(arguments)
        return None if kwargs is None else self._invoke(kwargs, result=result)


def _binds(fn: Callable[..., Any], names: Iterable[str]) -> bool:
    try:
        inspect.signature(fn).bind(**dict.fromkeys(names))
    except (TypeError, ValueError):
        return False
    return True


def registering(register: Callable[[Tool], Any], fn: F | None,
                options: dict[str, Any]) -> F | Callable[[F], F]:
    """``registry.tool`` and ``scope.tool``: ``register(tool(fn, **options))``, then ``fn``."""
    def decorate(func: F) -> F:
        register(tool(func, **options))
        return func

    return decorate if fn is None else decorate(fn)
