"""``Signature``: a typed function's parameters and return type, compiled once.

Decoration reads the signature (``Signature.read``), resolves the annotations, builds
one pydantic-core validator for the whole argument object and one adapter for the
return value, and assembles the JSON Schemas. Per-type work (pydantic's schema
generation) is memoized by annotation, so decorating many functions over the same
types stays cheap. Per call: one validation of the arguments (``validate``, or the
``quick`` path the async body inlines) and, for a value that is not already plain, one
validation and JSON dump (``canonical``).
"""

from __future__ import annotations

import functools
import inspect
import json
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import PydanticUndefined, SchemaValidator, to_jsonable_python
from pydantic_core import core_schema as cs

from .._dispatch.execution import RunContext
from .._model.errors import ToolArgsError, ToolError, ToolOutputError
from .._model.foreign import message_of
from .._model.lossless import FrozenDict, JsonValue, json_text, snapshot_json, thaw
from .._model.results import ImageContent, TextContent, ToolOutput, only_content
from .schemas import CONTAINERS, MODELS, has_schema, tidy, violation

__all__ = ["Extra", "Signature"]

Extra = Literal["forbid", "ignore"]
_T = TypeVar("_T")
_CONTENT_TYPES = (ToolOutput, TextContent, ImageContent)


class Signature:
    """A function's parameters and return type, compiled for validation."""

    def __init__(self, label: str, fields: dict[str, tuple[Any, Any]], context: str | None,
                 returns: Any, extra: Extra, strict: bool) -> None:
        self.label = label
        self.fields = fields  # name -> (annotation, default or PydanticUndefined)
        self.context = context
        self.extra = extra
        self.strict = strict
        schema = cs.typed_dict_schema(
            {n: _field(a, d, label, n) for n, (a, d) in fields.items()},
            extra_behavior=extra,
        )
        self.validator = SchemaValidator(schema)
        self._core_schema = schema
        # The per-call ``extra`` reaches into nested models whatever their own config;
        # without nested models the validator's own setting already says it all.
        self._nested_extra = extra if has_schema(schema, MODELS) else None
        # Lax validation is pydantic's Python mode over plain JSON data: the snapshot is
        # thawed so arrays arrive as lists (a ``Sequence`` field keeps what it gets) and
        # objects as dicts. With scalar fields only there is nothing to thaw: the top
        # object is read, never handed on (``extra`` is "forbid" or "ignore").
        self.thaws = has_schema(schema, CONTAINERS)
        # The quick path: lax, no nested models. pydantic's "forbid" looks at every key
        # and costs more than the rest of validating scalars; a subset test of the keys
        # costs a tenth. So the quick path validates with "ignore" when every key is a
        # parameter (``names``), and leaves a call with another key to ``validator``,
        # which reports it in pydantic's words.
        # Both are made by the first quick call: decorating stays cheap, and a tool
        # never called keeps nothing more.
        quick = not strict and self._nested_extra is None
        # The approval path validates once: asking (a ``requires_approval`` callable),
        # the pipeline's check that the call can run, and the body share this outcome,
        # kept for that very (frozen) arguments object until the body takes it.
        self.held: tuple[Any, dict[str, Any] | ToolArgsError] | None = None
        self.names: frozenset[str] | None = None
        self.quick: Callable[[Any], Any] | None = self._first_quick if quick else None
        self.returns = returns
        self.plain_return = returns if returns in (str, int, bool) else _NO_MATCH
        self.output: TypeAdapter[Any] | None = None
        self.output_schema: FrozenDict | None = None
        if returns is not _NO_ANNOTATION and not _is_content_annotation(returns):
            self.output = _adapter(returns, label, "the return annotation")
            if returns is not None and returns is not type(None):
                self.output_schema = _output_schema(returns, label)

    @classmethod
    def read(cls, func: Callable[..., Any], extra: Extra, strict: bool) -> Signature:
        label = getattr(func, "__qualname__", None) or repr(func)
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{label}: cannot read its signature: {exc}") from exc
        owner = getattr(func, "__func__", func)
        fields: dict[str, tuple[Any, Any]] = {}
        context: str | None = None
        for param in signature.parameters.values():
            where = f"{label}: parameter {param.name!r}"
            if param.kind is param.VAR_POSITIONAL or param.kind is param.VAR_KEYWORD:
                raise TypeError(f"{where}: *args and **kwargs cannot be tool parameters")
            if param.kind is param.POSITIONAL_ONLY:
                raise TypeError(f"{where}: positional-only parameters cannot be tool parameters")
            annotation = _resolve(owner, param.name, param.annotation, where)
            if annotation is RunContext:
                if context is not None:
                    raise TypeError(f"{where}: only one parameter may take the RunContext")
                context = param.name
                continue
            default = PydanticUndefined if param.default is param.empty else param.default
            fields[param.name] = (annotation, default)
        returns = _resolve(owner, "return", signature.return_annotation,
                           f"{label}: the return annotation")
        return cls(label, fields, context, returns, extra, strict)

    def parameters_schema(self, descriptions: dict[str, str]) -> dict[str, Any]:
        """The JSON Schema of the argument object, titles dropped."""
        properties: dict[str, Any] = {}
        required: list[str] = []
        defs: dict[str, Any] = {}
        for name, (annotation, default) in self.fields.items():
            fragment, fragment_defs = _parameter_schema(annotation, self.label, name)
            for key, value in fragment_defs.items():
                if defs.setdefault(key, value) != value:
                    return self._generated_schema(descriptions)  # two types, one name
            fragment = dict(fragment)
            if "description" not in fragment and descriptions.get(name):
                fragment["description"] = descriptions[name]
            if default is PydanticUndefined:
                required.append(name)
            else:
                fragment["default"] = _json_default(default, self.label, name)
            properties[name] = fragment
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        if self.extra == "forbid":
            schema["additionalProperties"] = False
        if defs:
            schema["$defs"] = defs
        return tidy(schema, self.extra == "forbid", open_objects=self.extra == "ignore")

    def _generated_schema(self, descriptions: dict[str, str]) -> dict[str, Any]:
        schema = GenerateJsonSchema().generate(self._core_schema, mode="validation")
        for name, fragment in schema.get("properties", {}).items():
            if "description" not in fragment and descriptions.get(name):
                fragment["description"] = descriptions[name]
        return tidy(schema, self.extra == "forbid", open_objects=self.extra == "ignore")

    def validate(self, arguments: JsonValue) -> dict[str, Any]:
        """Validated keyword arguments, or ``ToolArgsError`` with the spec's violations."""
        if not isinstance(arguments, dict):
            raise ToolArgsError('invalid arguments: "arguments" must be an object',
                                violations=('"arguments" must be an object',))
        try:
            if self.strict:
                # Printed without json.dumps's limits: a 5 000-deep object or a 4 301-digit
                # int is for the validator to judge (as an INVALID_ARGS violation).
                validated = self.validator.validate_json(json_text(arguments), strict=True,
                                                         extra=self.extra)
            elif (quick := self.quick) is not None and (
                    (names := self.names) is None or names.issuperset(arguments)):
                # Lax validation of plain JSON data: JSON-mode validation without
                # printing and parsing (see ``thaws``). ``names`` is read after
                # ``quick``, which ``_first_quick`` (maybe in another thread) sets last.
                validated = quick(self.plain(arguments))
            elif self._nested_extra is None:
                validated = self.validator.validate_python(self.plain(arguments))
            else:
                validated = self.validator.validate_python(self.plain(arguments),
                                                           extra=self._nested_extra)
            return validated  # type: ignore[no-any-return]
        except ValidationError as exc:
            raise self.args_error(exc) from None

    def _first_quick(self, arguments: Any) -> Any:
        """Make ``quick`` and ``names``, then validate as ``quick`` does with them.

        ``names`` is set before ``quick``: a reader that sees the new ``quick`` and then
        reads ``names`` sees it too, whatever thread made them.
        """
        quick = self.validator.validate_python
        if self.extra == "forbid":
            quick = SchemaValidator(cs.typed_dict_schema(
                self._core_schema["fields"], extra_behavior="ignore")).validate_python
            self.names = frozenset(self.fields)
        self.quick = quick
        if self.names is not None and not self.names.issuperset(arguments):
            return self.validator.validate_python(arguments)  # reports the unknown key
        return quick(arguments)

    def plain(self, arguments: Any) -> Any:
        """The arguments as lax validation reads them (see ``thaws``)."""
        return thaw(arguments) if self.thaws else arguments

    def args_error(self, exc: ValidationError) -> ToolArgsError:
        """The ``ToolArgsError`` for a failed validation, in the spec's words."""
        # Each violation once, even when several union members report the same one.
        violations = tuple(dict.fromkeys(
            violation(e, self._core_schema, root="") for e in exc.errors()))
        return ToolArgsError("invalid arguments: " + "; ".join(violations),
                             violations=violations)

    def hold(self, arguments: JsonValue) -> dict[str, Any]:
        """``validate``, kept for the body of this call (see ``held``); a dict of its own."""
        held = self.held
        if held is None or held[0] is not arguments:
            try:
                outcome: dict[str, Any] | ToolArgsError = self.validate(arguments)
            except ToolArgsError as exc:
                outcome = exc
            held = self.held = (arguments, outcome)
        if type(held[1]) is dict:
            return dict(held[1])
        raise held[1]  # type: ignore[misc]

    def take(self, arguments: JsonValue) -> dict[str, Any] | None:
        """The keyword arguments ``hold`` validated for this arguments object, once."""
        held = self.held
        if held is None or held[0] is not arguments or type(held[1]) is not dict:
            return None
        self.held = None
        return held[1]

    def soft_validate(self, arguments: JsonValue) -> dict[str, Any] | None:
        try:
            return self.validate(arguments)
        except ToolArgsError:
            return None

    def canonical(self, name: str, value: Any) -> Any:
        """The return value validated against the annotation and dumped as JSON."""
        if type(value) is self.plain_return:
            return value  # a str, int or bool for that very annotation: nothing to convert
        adapter = self.output
        if adapter is None or issubclass(type(value), _CONTENT_TYPES) or only_content(value):
            return value
        try:
            checked = adapter.validate_python(value, strict=self.strict)
        except ValidationError as exc:
            reasons = "; ".join(violation(e, adapter.core_schema, root="$")
                                for e in exc.errors())
            raise ToolOutputError(f'tool "{name}" returned invalid output: {reasons}') from None
        except ToolError:
            raise  # a validator's own ToolError keeps its code
        except Exception as exc:  # a validator, or the value's own code, raised
            raise ToolOutputError(f'tool "{name}" returned invalid output: {message_of(exc)}'
                                  ) from exc
        try:
            return adapter.dump_python(checked, mode="json", by_alias=True)
        except Exception as exc:
            raise ToolOutputError(f'tool "{name}" returned invalid output: {message_of(exc)}'
                                  ) from exc


# ---- annotations and per-type schemas -----------------------------------------------

_NO_ANNOTATION: Any = inspect.Parameter.empty


class _NoMatch:
    """A type no value has."""


_NO_MATCH: Any = _NoMatch


def _resolve(owner: Any, name: str, annotation: Any, where: str) -> Any:
    if annotation is inspect.Parameter.empty:
        return Any if name != "return" else _NO_ANNOTATION
    if not isinstance(annotation, str):
        return annotation
    holder = types.SimpleNamespace(__annotations__={name: annotation},
                                   __globals__=getattr(owner, "__globals__", {}))
    try:
        return typing.get_type_hints(holder, include_extras=True)[name]
    except Exception as exc:
        raise TypeError(f"{where}: cannot resolve the annotation {annotation!r} ({exc}); "
                        "define the type at module level") from exc


def _is_content_annotation(annotation: Any) -> bool:
    if annotation in _CONTENT_TYPES:
        return True
    args = typing.get_args(annotation)
    return bool(args) and all(_is_content_annotation(a) for a in args)


def _memoized(cached: Callable[[Any], _T], annotation: Any) -> _T:
    """``cached(annotation)``; an unhashable annotation is computed afresh, not memoized."""
    try:
        hash(annotation)
    except TypeError:
        return cached.__wrapped__(annotation)  # type: ignore[attr-defined,no-any-return]
    return cached(annotation)


@functools.lru_cache(maxsize=4096)
def _cached_adapter(annotation: Any) -> TypeAdapter[Any]:
    return TypeAdapter(annotation)


def _adapter(annotation: Any, label: str, what: str) -> TypeAdapter[Any]:
    try:
        return _memoized(_cached_adapter, annotation)
    except Exception as exc:
        raise TypeError(f"{label}: {what} {annotation!r} has no JSON representation: "
                        f"{exc}") from exc


def _field(annotation: Any, default: Any, label: str, name: str) -> cs.TypedDictField:
    schema = _adapter(annotation, label, f"parameter {name!r}:").core_schema
    if default is PydanticUndefined:
        return cs.typed_dict_field(schema)
    return cs.typed_dict_field(cs.with_default_schema(schema, default=default), required=False)


@functools.lru_cache(maxsize=4096)
def _cached_parameter_schema(annotation: Any) -> tuple[str, str]:
    field = cs.typed_dict_field(_memoized(_cached_adapter, annotation).core_schema)
    wrapper = cs.typed_dict_schema({"x": field})
    schema = GenerateJsonSchema().generate(wrapper, mode="validation")
    return json.dumps(schema["properties"]["x"]), json.dumps(schema.get("$defs", {}))


def _parameter_schema(annotation: Any, label: str,
                      name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JSON Schema of one parameter's type, and the ``$defs`` it refers to."""
    try:
        fragment, defs = _memoized(_cached_parameter_schema, annotation)
    except Exception as exc:
        raise TypeError(f"{label}: parameter {name!r}: {annotation!r} has no JSON "
                        f"representation: {exc}") from exc
    loaded: tuple[dict[str, Any], dict[str, Any]] = (json.loads(fragment), json.loads(defs))
    return loaded


@functools.lru_cache(maxsize=4096)
def _cached_output_schema(annotation: Any) -> FrozenDict:
    schema = _memoized(_cached_adapter, annotation).json_schema(mode="serialization")
    frozen = snapshot_json(tidy(schema, forbid=False))
    assert isinstance(frozen, FrozenDict)
    return frozen  # frozen: safe to share between tools


def _output_schema(annotation: Any, label: str) -> FrozenDict:
    try:
        return _memoized(_cached_output_schema, annotation)
    except Exception as exc:
        raise TypeError(f"{label}: the return annotation {annotation!r} has no JSON "
                        f"representation: {exc}") from exc


def _json_default(default: Any, label: str, name: str) -> Any:
    try:
        return thaw(snapshot_json(to_jsonable_python(default)))
    except Exception as exc:
        raise TypeError(f"{label}: parameter {name!r}: the default {default!r} has no JSON "
                        "representation") from exc
