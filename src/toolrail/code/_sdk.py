"""``render_sdk``: Python stubs for a scope's tools, the program's view of them.

The stubs are what the model reads in ``run_code``'s description and what the sandbox
type-checks a program against, so they are deterministic: tools in name order, every
generated name derived from the schemas alone, and byte-identical output for the same
schemas whatever order they come in.

JSON Schema maps to Python types as far as a ``TypedDict`` stub can say it:
``string``/``integer``/``number``/``boolean``/``null`` to ``str``/``int``/``float``/
``bool``/``None``; arrays to ``list[...]``; objects with ``properties`` to nested
``TypedDict``s (``NotRequired`` for what ``required`` leaves out), other objects to
``dict[str, ...]``; ``enum``/``const`` to ``Literal[...]``; ``anyOf``/``oneOf`` and type
lists to unions; local ``$ref``s (``#/$defs/X``, ``#/definitions/X``) to a class or alias
per definition. Anything else is ``Any``.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from .._model.tool import ToolSchema

__all__ = ["PRELUDE", "error_text", "method_name", "render_sdk"]

_HEADER = (
    "from typing import Any, Literal, NotRequired, Protocol, TypedDict\n"
    "\n"
    "\n"
    "class ToolCallError(Exception):\n"
    '    """A nested tool call failed; catch it to handle the failure in the program."""\n'
    "\n"
    "    tool_name: str\n"
    "    code: str | None\n"
    "    message: str\n"
    "\n"
    "\n"
    "class ToolCallErrorInfo:\n"
    '    """A failed tool call: the tool\'s name, the error code and the message."""\n'
    "\n"
    "    tool_name: str\n"
    "    code: str | None\n"
    "    message: str\n"
    "\n"
    "\n"
    "def tool_call_error(error: BaseException) -> ToolCallErrorInfo:\n"
    '    """The tool_name, code and message of the ToolCallError a failed call raised\n'
    "    (any other exception is raised again). The sandbox's exceptions carry only a\n"
    '    message, so read the fields through this, not as attributes of the error."""\n'
    "    ...\n"
)
# What the sandbox runs before each program: the run-time side of the header's
# declarations. The sandbox (pydantic-monty 1.4) has no class inheritance and its
# exceptions take one string, so a failed call raises RuntimeError with the message
# ``error_text`` writes, and ``tool_call_error`` reads the fields back from it.
PRELUDE: Final = """\
ToolCallError = RuntimeError


class ToolCallErrorInfo:
    def __init__(self, tool_name, code, message):
        self.tool_name = tool_name
        self.code = code
        self.message = message

    def __repr__(self):
        return (f"ToolCallErrorInfo(tool_name={self.tool_name!r}, code={self.code!r}, "
                f"message={self.message!r})")


def tool_call_error(error):
    import json

    def quoted(start):
        end = start + 1
        while text[end] != '"':
            end += 2 if text[end] == "\\\\" else 1
        return json.loads(text[start:end + 1]), end + 1

    text = str(error) if isinstance(error, RuntimeError) else ""
    try:
        if not text.startswith('tool "'):
            raise ValueError()
        tool_name, end = quoted(5)
        code = None
        if text[end:end + 10] == ' failed ("':
            code, end = quoted(end + 9)
            end += 1
        elif text[end:end + 9] == " failed (":
            close = text.index(")", end)
            code, end = text[end + 9:close], close + 1
        else:
            end += 7
        if text[end:end + 2] != ": ":
            raise ValueError()
    except Exception:
        raise error
    return ToolCallErrorInfo(tool_name, code, text[end + 2:])
"""


def error_text(tool_name: str, code: str | None, message: str) -> str:
    """The message of the ``ToolCallError`` a failed call of ``tool_name`` raises:
    ``tool "<name>" failed (<code>): <message>``, which ``tool_call_error`` reads back
    exactly (the name is JSON-quoted, and so is a code holding ``)`` or opening in ``"``).

    >>> error_text("read_file", "DENIED", "only workspace files")
    'tool "read_file" failed (DENIED): only workspace files'
    """
    name = json.dumps(tool_name, ensure_ascii=False)
    if code is None:
        return f"tool {name} failed: {message}"
    if ")" in code or code.startswith('"'):
        code = json.dumps(code, ensure_ascii=False)
    return f"tool {name} failed ({code}): {message}"


_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool",
            "null": "None"}
_DEPTH = 32  # deeper schemas are Any: a stub is for reading, not for proving


def method_name(name: str) -> str | None:
    """The ``Tools`` method that reaches tool ``name``, or ``None`` (only ``tools.call``)."""
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        return None
    if name == "call":
        return None  # ``call`` is the method that reaches any tool by name
    return name


def render_sdk(schemas: Iterable[ToolSchema],
               output_schemas: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """Python stubs for ``schemas``: ``<Pascal>Args``/``<Pascal>Output`` and ``Tools``.

    >>> import toolrail as tr
    >>> schema = tr.ToolSchema("echo", "Echo.", tr.snapshot_json({"type": "object"}))
    >>> print(render_sdk([schema]).splitlines()[-1])
    tools: Tools
    """
    outputs = output_schemas or {}
    by_name: dict[str, ToolSchema] = {}
    for schema in schemas:
        if schema.name in by_name:  # which one would win would depend on their order
            raise ValueError(f"render_sdk() got two schemas named {schema.name!r}")
        by_name[schema.name] = schema
    tools = sorted(by_name.items())
    writer = _Writer()
    named = [(name, schema, writer.claim(_pascal(name) or "Tool")) for name, schema in tools]
    for _, _, pascal in named:  # the names the spec fixes come first: nested ones yield
        writer.taken.update((f"{pascal}Args", f"{pascal}Output"))
    methods: list[str] = []
    for name, schema, pascal in named:
        args = writer.top(f"{pascal}Args", schema.parameters)
        output = outputs.get(name)
        result = writer.top(f"{pascal}Output", output) \
            if output is not None else writer.alias(f"{pascal}Output", "Any")
        method = method_name(name)
        if method is None:
            methods.append(f"    # await tools.call({json.dumps(name)}, args)\n")
            continue
        methods.append(f"    async def {method}(self, args: {args}) -> {result}:\n"
                       f"{_docstring(schema.description)}")
    methods.append("    async def call(self, name: str, args: dict[str, Any]) -> Any:\n"
                   '        """Call any tool by name (the only way to reach one whose name is '
                   'not a method)."""\n'
                   "        ...\n")
    parts = [_HEADER, *writer.blocks,
             "\n\nclass Tools(Protocol):\n" + "\n".join(methods), "\n\ntools: Tools\n"]
    return "".join(parts)


def _docstring(description: str) -> str:
    text = description.strip()
    if not text:
        return "        ...\n"
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if text.endswith('"'):
        text = text[:-1] + '\\"'
    lines = text.splitlines()
    body = "\n".join(("        " + line).rstrip() for line in lines).lstrip()
    if len(lines) > 1:
        return f'        """{body}\n        """\n        ...\n'
    return f'        """{body}"""\n        ...\n'


def _pascal(name: str) -> str:
    words = re.split(r"[^0-9A-Za-z]+", name)
    out = "".join(w[:1].upper() + w[1:] for w in words if w)
    return "T" + out if out[:1].isdigit() else out


class _Writer:
    """Emits classes and aliases in dependency order under names it keeps unique."""

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self.taken: set[str] = {"Any", "Literal", "NotRequired", "Protocol", "TypedDict",
                                "ToolCallError", "ToolCallErrorInfo", "Tools", "tools"}
        self.defs: dict[str, str] = {}  # a tool's definition, as JSON -> its name
        self.emitted: set[str] = set()  # names whose block is written (no quotes needed)
        self.root: Mapping[str, Any] = {}
        self.prefix = ""

    def claim(self, base: str) -> str:
        name, n = base, 2
        while name in self.taken:
            name, n = f"{base}{n}", n + 1
        self.taken.add(name)
        return name

    def alias(self, name: str, type_: str) -> str:
        self.taken.add(name)
        self.blocks.append(f"\n\n{name} = {type_}\n")
        self.emitted.add(name)
        return name

    def top(self, name: str, schema: Any) -> str:
        """A tool's Args or Output: a class for an object, else an alias."""
        self.root = schema if isinstance(schema, Mapping) else {}
        self.prefix = name[:-4] if name.endswith("Args") else name[:-6]
        self.taken.add(name)
        if isinstance(schema, Mapping) and _is_object(schema) and "properties" in schema:
            self._typed_dict(name, schema, 0)
            return name
        return self.alias(name, self.type_of(schema, name, 0))

    def type_of(self, schema: Any, hint: str, depth: int) -> str:
        if schema is True or schema == {}:
            return "Any"
        if not isinstance(schema, Mapping) or depth > _DEPTH:
            return "Any"
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self._ref(ref, depth)
        if "const" in schema:
            return _literal([schema["const"]])
        enum = schema.get("enum")
        if isinstance(enum, list | tuple) and enum:
            return _literal(list(enum))
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list | tuple) and options:
                return _union([self.type_of(o, f"{hint}Option{i}", depth + 1)
                               for i, o in enumerate(options, 1)])
        all_of = schema.get("allOf")
        if isinstance(all_of, list | tuple):
            if len(all_of) == 1:
                return self.type_of(all_of[0], hint, depth + 1)
            return "Any"
        kind = schema.get("type")
        if isinstance(kind, list | tuple):
            types = [self.type_of({**schema, "type": k}, hint, depth + 1) for k in kind]
            out = _union(types)
        elif kind == "object" or (kind is None and "properties" in schema):
            out = self._object(schema, hint, depth)
        elif kind == "array":
            items = schema.get("items")
            out = f"list[{self.type_of(items, hint + 'Item', depth + 1)}]" \
                if isinstance(items, Mapping) else "list[Any]"
        elif isinstance(kind, str) and kind in _SCALARS:
            out = _SCALARS[kind]
        else:
            return "Any"
        if schema.get("nullable") is True:
            out = _union([out, "None"])
        return out

    def _object(self, schema: Mapping[str, Any], hint: str, depth: int) -> str:
        properties = schema.get("properties")
        if isinstance(properties, Mapping) and properties:
            name = self.claim(hint)
            self._typed_dict(name, schema, depth + 1)
            return name
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and extra:
            return f"dict[str, {self.type_of(extra, hint + 'Value', depth + 1)}]"
        return "dict[str, Any]"

    def _typed_dict(self, name: str, schema: Mapping[str, Any], depth: int) -> None:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        required = schema.get("required")
        needed = set(required) if isinstance(required, list | tuple) else set()
        fields: list[tuple[str, str]] = []
        for key, sub in properties.items():
            type_ = self.type_of(sub, name + (_pascal(str(key)) or "Field"), depth + 1)
            fields.append((str(key), type_ if key in needed else f"NotRequired[{type_}]"))
        if all(k.isidentifier() and not keyword.iskeyword(k) for k, _ in fields):
            body = "".join(f"    {k}: {t}\n" for k, t in fields) or "    pass\n"
            self.blocks.append(f"\n\nclass {name}(TypedDict):\n{body}")
        else:
            items = ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {t}" for k, t in fields)
            self.blocks.append(f'\n\n{name} = TypedDict("{name}", {{{items}}})\n')
        self.emitted.add(name)

    def _ref(self, ref: str, depth: int) -> str:
        match = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", ref)
        if match is None:
            return "Any"
        table = self.root.get(match.group(1))
        target = table.get(match.group(2)) if isinstance(table, Mapping) else None
        if not isinstance(target, Mapping):
            return "Any"
        # One name per distinct definition of a tool: its Args and Output share one
        # when they define it alike, and a recursive reference is quoted.
        key = self.prefix + "\0" + json.dumps(_shape(target), sort_keys=True, default=str)
        known = self.defs.get(key)
        if known is not None:
            return known if known in self.emitted else f'"{known}"'
        name = self.claim(self.prefix + (_pascal(match.group(2)) or "Def"))
        self.defs[key] = name
        if _is_object(target) and isinstance(target.get("properties"), Mapping) and \
                target["properties"]:
            self._typed_dict(name, target, depth + 1)
        else:
            self.alias(name, self.type_of(target, name, depth + 1))
        return name


_READ = frozenset({"type", "properties", "required", "items", "enum", "const", "anyOf",
                   "oneOf", "allOf", "$ref", "additionalProperties", "nullable"})


def _shape(schema: Any) -> Any:
    """What of ``schema`` the stubs read (two definitions alike in it render alike)."""
    if isinstance(schema, Mapping):
        return {k: (v if k == "properties" and not isinstance(v, Mapping) else
                    {p: _shape(x) for p, x in v.items()} if k == "properties" else _shape(v))
                for k, v in schema.items() if k in _READ and not (
                    k == "additionalProperties" and not isinstance(v, Mapping))}
    if isinstance(schema, list | tuple):
        return [_shape(x) for x in schema]
    return schema


def _is_object(schema: Mapping[str, Any]) -> bool:
    return schema.get("type") == "object" or (
        "type" not in schema and "properties" in schema)


def _literal(values: list[Any]) -> str:
    literals: list[str] = []
    none = False
    for value in values:
        if value is None:
            none = True
        elif isinstance(value, bool):
            literals.append("True" if value else "False")
        elif isinstance(value, int | str):
            literals.append(json.dumps(value, ensure_ascii=False))
        else:
            return "Any"  # floats, objects and arrays have no Literal form
    parts = [f"Literal[{', '.join(dict.fromkeys(literals))}]"] if literals else []
    return _union([*parts, "None"] if none else parts)


def _union(types: list[str]) -> str:
    unique = list(dict.fromkeys(types))
    if "Any" in unique or not unique:
        return "Any"
    return " | ".join(unique)
