"""No hidden import cycle: the graph of the package's imports, those inside functions and type-only ones included,
has no cycle.

An import inside a function hides a cycle from the interpreter (it runs after both modules are loaded) and from
import-linter's layers (it only reads the arrows' direction), and so does an ``if TYPE_CHECKING:`` import (it never
runs, yet the two modules still depend on each other: the type belongs a floor lower); this check parses every
module, takes every import of the package at any depth, type-only ones included, and fails on a cycle, naming it.
An import left inside a function is for a heavy optional dependency, never to break a cycle, and says which on its
line or the line above (``# lazy: torch``); the second check finds every function-level import that does not.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
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


def imported_modules(tree: ast.AST, this: str, is_package: bool, known: set[str], *,
                     type_only: bool = True) -> set[str]:
    """The package's modules that ``tree`` imports anywhere (``from a.b import c`` names ``a.b.c`` when that is a
    module, else ``a.b``), those under ``if TYPE_CHECKING:`` only when ``type_only``."""
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node) and not type_only:
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


def import_graph(root: Path = ROOT, package: str = PACKAGE, *, type_only: bool = True) -> dict[str, set[str]]:
    files = {module_name(p, root): p for p in (root / package).rglob("*.py")}
    known = set(files)
    return {name: imported_modules(ast.parse(path.read_text()), name, path.name == "__init__.py", known,
                                   type_only=type_only)
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


def test_no_import_cycle_even_inside_functions_or_type_only():
    found = cycles(import_graph())
    assert found == [], "import cycles (imports inside functions and TYPE_CHECKING ones included): " + \
        "; ".join(" <-> ".join(c) for c in found)


def test_a_cycle_hidden_in_a_function_is_found(tmp_path):
    """Negative control: a scratch package whose two modules import each other, one of them inside a function, and
    two that import each other, one of them for types only."""
    pkg = tmp_path / "scratch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from scratch.b import g\n\n\ndef f():\n    return g()\n")
    (pkg / "b.py").write_text("def g():\n    from scratch import a\n    return a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from scratch.d import T\n")
    (pkg / "d.py").write_text("from scratch import c\n\n\nclass T:\n    pass\n")
    graph = import_graph(tmp_path, "scratch")
    assert cycles(graph) == [["scratch.a", "scratch.b"], ["scratch.c", "scratch.d"]]
    assert cycles(import_graph(tmp_path, "scratch", type_only=False)) == [["scratch.a", "scratch.b"]]


def _absolute(node: ast.Import | ast.ImportFrom, this: str, is_package: bool) -> list[str]:
    """The modules an import statement may name, relative imports resolved (``from a import b``: ``a``, ``a.b``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        anchor = this.split(".") if is_package else this.split(".")[:-1]
        anchor = anchor[:len(anchor) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
    return [base] + [f"{base}.{a.name}" for a in node.names]


def _imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement of a module with whether it sits inside a function (``TYPE_CHECKING`` excepted)."""
    found = []
    stack = [(tree, False)]
    while stack:
        node, in_function = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, in_function))
            stack.append((child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))))
    return found


def loaded_libraries(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    """The libraries (top-level names outside the package and the standard library) that importing each module
    of the package loads, read from the source: its module-level imports, its parent packages' and those of the
    package modules it imports, transitively."""
    files = {module_name(p, root): p for p in (root / package).rglob("*.py")}
    direct: dict[str, set[str]] = {}
    for name, path in files.items():
        names = {m for node, in_function in _imports(ast.parse(path.read_text())) if not in_function
                 for m in _absolute(node, name, path.name == "__init__.py")}
        parts = name.split(".")
        names |= {".".join(parts[:i]) for i in range(1, len(parts))}  # its parent packages run first
        direct[name] = names
    loaded: dict[str, set[str]] = {}
    for name in files:
        seen, todo, libraries = {name}, [name], set()
        while todo:
            for m in direct[todo.pop()]:
                top = m.split(".")[0]
                if m in files and m not in seen:
                    seen.add(m)
                    todo.append(m)
                elif top != package and top not in sys.stdlib_module_names:
                    libraries.add(top)
        loaded[name] = libraries
    return loaded


def unexplained_lazy_imports(root: Path = ROOT, package: str = PACKAGE) -> list[str]:
    """``path:line`` of every import inside a function (``TYPE_CHECKING`` blocks excepted) whose line, or the
    comment line above it, does not say ``lazy:`` with the heavy library it keeps lazy: the imported library
    itself, or for a module of the package one of the libraries importing it loads (:func:`loaded_libraries`). A
    standard-library module is never heavy: its import belongs at the top."""
    files = {module_name(p, root): p for p in (root / package).rglob("*.py")}
    loaded = loaded_libraries(root, package)
    found = []
    for name, path in sorted(files.items()):
        lines = path.read_text().splitlines()
        for node, in_function in _imports(ast.parse("\n".join(lines))):
            if not in_function:
                continue
            said = " ".join(line.split("# lazy:", 1)[1] for line in
                            lines[node.lineno - 1:node.end_lineno] + [lines[node.lineno - 2]] if "# lazy:" in line)
            words = set(re.findall(r"[A-Za-z_]\w*", said))
            modules = _absolute(node, name, path.name == "__init__.py")
            inside = [m for m in modules if m in files]
            heavy = loaded[max(inside, key=len)] if inside else \
                {m.split(".")[0] for m in modules[:1]} - set(sys.stdlib_module_names)
            if not words & heavy:
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return sorted(found)


def test_every_import_inside_a_function_says_which_heavy_dependency_it_keeps_lazy():
    found = unexplained_lazy_imports()
    assert found == [], "imports inside functions without a '# lazy: <the heavy library>' comment: " + ", ".join(found)


def test_an_unexplained_import_inside_a_function_is_found(tmp_path):
    """Negative control: a scratch package whose function-level imports are explained or not: a library named
    (yes), a package module with the library it loads (yes), any other text (no), a library the module does not
    load (no), a standard-library module (no)."""
    pkg = tmp_path / "scratch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "heavy.py").write_text("import numpy\n")
    (pkg / "light.py").write_text("import json\n")
    (pkg / "m.py").write_text("def f():\n"
                              "    import numpy.linalg  # lazy: numpy\n"
                              "    from scratch import heavy  # lazy: imports numpy\n"
                              "    from scratch import light  # lazy: the light module\n"
                              "    # lazy: imports numpy\n"
                              "    from scratch.light import json\n"
                              "    import json  # lazy: json\n"
                              "    import csv\n"
                              "    return numpy, heavy, light, json, csv\n")
    assert loaded_libraries(tmp_path, "scratch")["scratch.m"] == set()
    assert loaded_libraries(tmp_path, "scratch")["scratch.heavy"] == {"numpy"}
    assert unexplained_lazy_imports(tmp_path, "scratch") == [f"scratch/m.py:{n}" for n in (4, 6, 7, 8)]


# Modules that load without torch, transformers or a framework (what the lazy imports are for): the settings a
# config check reads, `skillduet --help` and each command's argument parser, the report, and verl's plugin entry
# point, which verl imports in every process.
LIGHT_MODULES = ("skillduet_plugin.config", "skillduet_plugin.runs.config", "skillduet_plugin.cli",
                 "skillduet_plugin.commands.train", "skillduet_plugin.commands.study", "skillduet_plugin.reporting",
                 "skillduet_plugin.integrations.verl.plugin", "skillduet_plugin.envs")
HEAVY = ("torch", "transformers", "trl", "verl")


def heavy_imports(module: str) -> list[str]:
    """The heavy libraries importing ``module`` loads, in a fresh interpreter."""
    code = f"import json, sys, {module}\nprint(json.dumps([h for h in {HEAVY!r} if h in sys.modules]))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_entry_points_and_settings_load_without_torch():
    loaded = {m: heavy_imports(m) for m in LIGHT_MODULES}
    assert all(not v for v in loaded.values()), loaded
    assert heavy_imports("skillduet_plugin.core.scores") == ["torch"]  # negative control: the check sees torch
