"""The house in layers (issue 21): the dependency rule is checked by import-linter, and functions stay short.

``lint-imports`` reads ``.importlinter``: cli/tbplugin → redact → run | renderers → analysis → io | results →
the bottom modules, no cycle between siblings, and only ``run/`` touching pools, Dask or remote files. grimp
counts every import, function-local and ``if TYPE_CHECKING:`` ones too. The module-level cycle check below is
this test's own walk of the package's imports (ast), independent of grimp.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT

PACKAGE = ROOT / "tracekit"
MAX_LINES = 80  # no function is longer, except the measured hot loop below
HOT_LOOPS = {"tracekit/io/builder.py:TraceBuilder._ingest"}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every tracekit module ``path`` imports, wherever the import statement sits."""
    me = _module(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            for alias in node.names:
                name = f"{base}.{alias.name}"
                out.add(name if name in modules else base)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in modules and m != me}


def test_import_linter_contracts_hold() -> None:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    done = subprocess.run([exe, "--config", str(ROOT / ".importlinter")], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "broken" not in done.stdout.split("Contracts:")[-1].split("\n")[0].replace("0 broken", "")


def test_no_module_imports_itself_back() -> None:
    """No cycle at all between tracekit's modules (Tarjan's strongly connected components of the import graph)."""
    files = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph = {m: _imports(p, set(files)) for m, p in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    assert cycles == []


def test_the_walk_sees_a_cycle_when_there_is_one(tmp_path: Path) -> None:
    """The walk above can fail: two modules importing each other inside functions are caught."""
    (tmp_path / "a.py").write_text("def f():\n    from . import b\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n")
    mods = {"tracekit.a", "tracekit.b"}
    global ROOT
    saved, ROOT = ROOT, tmp_path.parent
    try:
        fake = tmp_path.parent / "tracekit"
        fake.mkdir(exist_ok=True)
        for n in ("a", "b"):
            (fake / f"{n}.py").write_text((tmp_path / f"{n}.py").read_text())
        assert _imports(fake / "a.py", mods) == {"tracekit.b"}
        assert _imports(fake / "b.py", mods) == {"tracekit.a"}
    finally:
        ROOT = saved


def test_no_function_is_over_80_lines() -> None:
    long: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()

        def walk(node: ast.AST, prefix: str = "") -> None:
            for ch in ast.iter_child_nodes(node):
                if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = f"{rel}:{prefix}{ch.name}"
                    n = (ch.end_lineno or ch.lineno) - ch.lineno + 1
                    if n > MAX_LINES and name not in HOT_LOOPS:
                        long.append(f"{name} ({n} lines)")
                    walk(ch, f"{prefix}{ch.name}.")
                elif isinstance(ch, ast.ClassDef):
                    walk(ch, f"{prefix}{ch.name}.")

        walk(ast.parse(path.read_text()))
    assert long == []
