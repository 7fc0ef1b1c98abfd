"""The core's shape (issue 16): real methods with the documented signatures, and a
registry whose module graph does not reach pydantic or the typed-tool machinery."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import toolrail as tr

SOURCE = Path(tr.__file__).parent


@pytest.mark.parametrize(("owner", "name", "signature", "is_async"), [
    (tr.ToolRegistry, "execute", "(self, call: 'ToolCall') -> 'ToolResult'", True),
    (tr.ToolRegistry, "run", "(self, calls: 'Iterable[ToolCall]', *, max_parallel: 'int' = 10, "
                             "signal: 'CancelSignal | None' = None) -> 'Batch'", True),
    (tr.ToolRegistry, "stream", "(self, calls: 'Iterable[ToolCall]', *, max_parallel: 'int' = 10, "
                                "signal: 'CancelSignal | None' = None) -> 'CallStream'", False),
    (tr.Scope, "execute", "(self, call: 'ToolCall') -> 'ToolResult'", True),
])
def test_execute_run_and_stream_are_methods_with_the_documented_signatures(
        owner: type, name: str, signature: str, is_async: bool) -> None:
    method = owner.__dict__[name]
    assert inspect.isfunction(method)
    assert method.__qualname__ == f"{owner.__name__}.{name}"  # defined on the class itself
    assert str(inspect.signature(method)) == signature
    assert inspect.iscoroutinefunction(method) is is_async
    assert method.__doc__


def _runtime_imports(module: str) -> set[str]:
    """The toolrail modules ``module`` imports at module level (not under TYPE_CHECKING)."""
    path = _path(module)
    found: set[str] = set()
    package = module.rpartition(".")[0]
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = f"{base}.{node.module}".strip(".") if node.level else node.module or ""
            if node.level and node.module is None:
                found.update(f"{base}.{alias.name}".strip(".") for alias in node.names)
            else:
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _path(module: str) -> Path:
    """The source file of ``module`` (dotted, relative to toolrail): a module or a package."""
    path = SOURCE / module.replace(".", "/")
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _closure(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for imported in _runtime_imports(module):
            if imported.startswith("_") and _path(imported).exists():
                todo.append(imported)
            elif not imported.startswith("_"):
                seen.add(imported)
    return seen


def test_the_registry_module_graph_does_not_import_pydantic_or_typed_tools() -> None:
    reached = _closure("_registry.registry")
    assert {"_core.core", "_dispatch.pipeline", "_scheduling.scheduler", "_dispatch.body",
            "_dispatch.commit"} <= reached
    assert not any(m == "_typed" or m.startswith("_typed.") for m in reached)
    assert not any(m == "pydantic" or m.startswith("pydantic.") for m in reached)
