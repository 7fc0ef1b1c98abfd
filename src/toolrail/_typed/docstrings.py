"""Reading a tool's description and parameter descriptions from its docstring.

Three styles are understood, for the parameter section:

* Google: ``Args:`` (or ``Arguments:``, ``Parameters:``, ``Params:``, ``Keyword Args:``)
  followed by indented ``name: text`` or ``name (type): text`` lines;
* NumPy: a ``Parameters`` header underlined with dashes, then ``name : type`` lines with
  the text indented below;
* Sphinx: ``:param name: text`` or ``:param type name: text`` fields.

The description is everything before the first section (any Google or NumPy header, or
a Sphinx ``:field:``), cleaned as the spec says. Continuation lines of a parameter's
text are joined with single spaces.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

__all__ = ["Docstring", "parse_docstring"]

_GOOGLE_SECTIONS = frozenset({
    "args", "arguments", "parameters", "params", "keyword args", "keyword arguments",
    "other parameters", "returns", "return", "yields", "yield", "raises", "raise",
    "examples", "example", "note", "notes", "attributes", "see also", "warning", "warnings",
    "references", "todo", "methods",
})
_GOOGLE_PARAMS = frozenset({
    "args", "arguments", "parameters", "params", "keyword args", "keyword arguments",
    "other parameters",
})
_GOOGLE_HEADER = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
_GOOGLE_ITEM = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_UNDERLINE = re.compile(r"^\s*-{3,}\s*$")
_NUMPY_ITEM = re.compile(r"^(\w+)\s*(?::.*)?$")
_SPHINX_FIELD = re.compile(r"^:(\w+)(?:\s+([^:]*?))?:\s*(.*)$")


@dataclass(frozen=True, slots=True)
class Docstring:
    description: str
    params: dict[str, str]


def parse_docstring(doc: str | None) -> Docstring:
    """Split a docstring into the description and per-parameter descriptions."""
    if not doc:
        return Docstring("", {})
    lines = [line.rstrip() for line in inspect.cleandoc(doc).splitlines()]
    end = _first_section(lines)
    params: dict[str, str] = {}
    _google(lines, params)
    _numpy(lines, params)
    _sphinx(lines, params)
    return Docstring(_clean(lines[:end]), params)


def _first_section(lines: list[str]) -> int:
    for i, line in enumerate(lines):
        header = _GOOGLE_HEADER.match(line)
        if header and header.group(1).strip().lower() in _GOOGLE_SECTIONS:
            return i
        if i + 1 < len(lines) and line.strip() and _NUMPY_UNDERLINE.match(lines[i + 1]):
            return i
        if _SPHINX_FIELD.match(line.strip()):
            return i
    return len(lines)


def _clean(lines: list[str]) -> str:
    paragraphs: list[str] = []
    blank = False
    for line in lines:
        if not line:
            blank = bool(paragraphs)
            continue
        if blank:
            paragraphs.append("")
            blank = False
        paragraphs.append(line)
    return "\n".join(paragraphs)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google(lines: list[str], params: dict[str, str]) -> None:
    i = 0
    while i < len(lines):
        header = _GOOGLE_HEADER.match(lines[i])
        i += 1
        if not header or header.group(1).strip().lower() not in _GOOGLE_PARAMS:
            continue
        base = _indent(lines[i - 1])
        item_indent: int | None = None
        current: str | None = None
        while i < len(lines):
            line = lines[i]
            if line and _indent(line) <= base:
                break
            i += 1
            if not line:
                continue
            indent = _indent(line)
            if item_indent is None:
                item_indent = indent
            match = _GOOGLE_ITEM.match(line.strip())
            if indent == item_indent and match:
                current = match.group(1)
                params.setdefault(current, match.group(2).strip())
            elif current is not None and indent > item_indent:
                params[current] = f"{params[current]} {line.strip()}".strip()


def _numpy(lines: list[str], params: dict[str, str]) -> None:
    i = 0
    while i + 1 < len(lines):
        if not (lines[i].strip().lower() in ("parameters", "other parameters")
                and _NUMPY_UNDERLINE.match(lines[i + 1])):
            i += 1
            continue
        i += 2
        current: str | None = None
        while i < len(lines):
            line = lines[i]
            if i + 1 < len(lines) and line.strip() and _NUMPY_UNDERLINE.match(lines[i + 1]):
                break
            i += 1
            if not line:
                continue
            match = _NUMPY_ITEM.match(line)
            if _indent(line) == 0 and match:
                current = match.group(1)
                params.setdefault(current, "")
            elif current is not None:
                params[current] = f"{params[current]} {line.strip()}".strip()


def _sphinx(lines: list[str], params: dict[str, str]) -> None:
    current: str | None = None
    for line in lines:
        field = _SPHINX_FIELD.match(line.strip())
        if field:
            current = None
            if field.group(1) in ("param", "parameter", "arg", "argument", "key", "keyword"):
                words = (field.group(2) or "").split()
                if words:
                    current = words[-1]
                    params.setdefault(current, field.group(3).strip())
        elif current is not None and line.strip() and _indent(line) > 0:
            params[current] = f"{params[current]} {line.strip()}".strip()
        elif not line.strip():
            current = None
