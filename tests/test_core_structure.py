"""The core's shape (issue 16): real methods with the documented signatures, and a
registry whose module graph does not reach pydantic or the typed-tool machinery."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
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


# Issue 24, item 4: a layout that shows the architecture. The module graph below holds
# every toolrail module's module-level imports: top-level statements and what runs with
# them at import time (``if TYPE_CHECKING:`` blocks, try/except, class bodies), not the
# imports inside functions, which are lazy on purpose. A package stands for its
# ``__init__``. Importing a submodule also runs its ancestors' ``__init__``s, but that is
# not an edge (every re-exporting ``__init__`` would otherwise sit in a circle with its
# children); reading a name from an ancestor (``from .. import Tool``) is one.

THE_ONE_CIRCLE = frozenset({"toolrail._registry.registry", "toolrail._registry.scope"})
"""Type-only, and justified in the docstring of ``toolrail/_registry/scope.py``."""


def _modules(root: Path) -> dict[str, Path]:
    """Every module of the package at ``root`` by dotted name (a package by its own name)."""
    modules: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports(module: str, path: Path, *, lazy: bool) -> Iterator[tuple[str, list[str]]]:
    """Each import of ``module`` as (the absolute module it names, the names it takes).

    ``import a.b`` is ``("a.b", [])``; ``from ..x import y as z`` is ``("<pkg>.x", ["y"])``.
    Imports inside functions count only if ``lazy``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def walk(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child
            elif lazy or not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield from walk(child)

    for node in walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")
            anchor = anchor[:len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, *([node.module] if node.module else [])])
        yield base, [alias.name for alias in node.names]


def _import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports at module level."""
    modules = _modules(root)

    def known(name: str) -> str | None:  # ``import pkg.mod.Name`` names ``pkg.mod``
        while name not in modules and "." in name:
            name = name.rpartition(".")[0]
        return name if name in modules else None

    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, path in modules.items():
        for target, names in _imports(module, path, lazy=False):
            targets = [f"{target}.{name}" for name in names if f"{target}.{name}" in modules]
            ancestor = module.startswith(f"{target}.")
            # ``from .. import sibling`` reads only submodules of an ancestor: no edge to it
            if not (ancestor and names and len(targets) == len(names)):
                targets.append(target)
            graph[module].update(
                found for found in map(known, targets) if found not in (None, module))
    return graph


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def _edges(graph: dict[str, set[str]], circle: frozenset[str]) -> str:
    return "\n".join(f"  {module} -> {other}" for module in sorted(circle)
                     for other in sorted(graph[module] & circle))


def test_no_module_level_import_circle_but_the_scope_and_its_registry() -> None:
    graph = _import_graph(SOURCE)
    assert len(graph) > 50
    assert {"toolrail", "toolrail._dispatch", "toolrail.adapters"} <= set(graph)
    assert "toolrail._registry.registry" in graph["toolrail._registry.scope"]  # TYPE_CHECKING
    others = [circle for circle in _circles(graph) if circle != THE_ONE_CIRCLE]
    assert not others, "module-level import circles:\n" + "\n\n".join(
        _edges(graph, circle) for circle in others)


def test_the_circle_finder_finds_a_type_only_circle(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    files = {
        "__init__.py": '"""Docstring only."""\n',
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
        "b.py": "try:\n    from . import a as _a\nexcept ImportError:\n    pass\nclass B: ...\n",
        # A lazy import closes no circle; a package stands for its __init__.
        "c.py": "from .sub import d\ndef f() -> None:\n    from . import c\n",
        "sub/__init__.py": "",
        "sub/d.py": "import typing\nif typing.TYPE_CHECKING:\n    from .. import c\n",
        "e.py": "import pkg\ndef f() -> None:\n    from .b import B\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    graph = _import_graph(package)

    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.a"}
    assert graph["pkg.c"] == {"pkg.sub", "pkg.sub.d"}
    assert graph["pkg.e"] == {"pkg"}
    assert sorted(map(sorted, _circles(graph))) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.sub.d"]]
    assert _edges(graph, frozenset({"pkg.a", "pkg.b"})) == "  pkg.a -> pkg.b\n  pkg.b -> pkg.a"


def _private_imports_of_siblings(root: Path, subpackage: str) -> list[str]:
    """Imports, lazy ones included, in ``root/subpackage`` of a private module (or name) of
    another public subpackage of ``root``: ``"<module>: <what it imports>"``."""
    top = root.name
    siblings = [f"{top}.{child.name}" for child in sorted(root.iterdir())
                if (child / "__init__.py").exists() and not child.name.startswith("_")
                and child.name != subpackage]
    offenders: list[str] = []
    for module, path in _modules(root).items():
        if not module.startswith(f"{top}.{subpackage}"):
            continue
        for target, names in _imports(module, path, lazy=True):
            for imported in [target] + [f"{target}.{name}" for name in names]:
                for sibling in siblings:
                    rest = imported.removeprefix(f"{sibling}.")
                    if rest != imported and rest.split(".")[0].startswith("_"):
                        offenders.append(f"{module}: {imported}")
    return offenders


def test_integrations_import_no_private_module_of_another_subpackage() -> None:
    imports = {target for module, path in _modules(SOURCE).items()
               if module.startswith("toolrail.integrations.")
               for target, _ in _imports(module, path, lazy=True)}
    assert {"toolrail", "toolrail.adapters", "toolrail.integrations._source"} <= imports
    offenders = _private_imports_of_siblings(SOURCE, "integrations")
    assert not offenders, "integrations import private modules of other subpackages:\n" + \
        "\n".join(offenders)


def test_the_private_import_finder_finds_a_sibling_private_module(tmp_path: Path) -> None:
    for name in ("integrations", "adapters", "_model"):
        (tmp_path / "pkg" / name).mkdir(parents=True)
        (tmp_path / "pkg" / name / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "integrations" / "x.py").write_text(
        "from ..adapters import visible, _strict\n"  # a private submodule, or name
        "from .._model.tool import Tool\n"  # an internal layer: not a sibling's privates
        "from ._source import source\n"  # its own private module
        "def f() -> None:\n    from pkg.adapters._common import g\n")
    assert _private_imports_of_siblings(tmp_path / "pkg", "integrations") == [
        "pkg.integrations.x: pkg.adapters._strict", "pkg.integrations.x: pkg.adapters._common",
        "pkg.integrations.x: pkg.adapters._common.g"]
