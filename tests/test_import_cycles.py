"""No hidden import cycle: the graph of the package's imports, those inside functions included, has no cycle.

An import inside a function hides a cycle from the interpreter (it runs after both modules are loaded) and from
import-linter's layers (it only reads the arrows' direction); this check parses every module, takes every import
of the package at any depth (``if TYPE_CHECKING:`` blocks excepted: they never run) and fails on a cycle,
naming it. An import left inside a function is for a heavy optional dependency, never to break a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "skillduet_plugin"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_modules(tree: ast.AST, this: str, is_package: bool, known: set[str]) -> set[str]:
    """The package's modules that ``tree`` imports anywhere (``from a.b import c`` names ``a.b.c`` when that is a
    module, else ``a.b``)."""
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = this.split(".") if is_package else this.split(".")[:-1]
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
        stack.extend(ast.iter_child_nodes(node))
    return {m for m in found if m in known and m != this}


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    files = {module_name(p, root): p for p in (root / package).rglob("*.py")}
    known = set(files)
    return {name: imported_modules(ast.parse(path.read_text()), name, path.name == "__init__.py", known)
            for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_even_inside_functions():
    found = cycles(import_graph())
    assert found == [], "import cycles (imports inside functions included): " + \
        "; ".join(" <-> ".join(c) for c in found)


def test_a_cycle_hidden_in_a_function_is_found(tmp_path):
    """Negative control: a scratch package whose two modules import each other, one of them inside a function."""
    pkg = tmp_path / "scratch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from scratch.b import g\n\n\ndef f():\n    return g()\n")
    (pkg / "b.py").write_text("def g():\n    from scratch import a\n    return a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from scratch.a import f\n")
    graph = import_graph(tmp_path, "scratch")
    assert cycles(graph) == [["scratch.a", "scratch.b"]]
    assert graph["scratch.c"] == set()  # TYPE_CHECKING imports never run
