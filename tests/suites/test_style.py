"""House style that a reader can measure (issue 36): ruff is clean, and few functions branch more than ten ways.

The complexity share is counted the way the issue measured it (``radon cc``: 13.9% of functions above 10), but
without radon, which is no dependency: ``_complexity`` below walks a function's ``ast`` with radon's rules. Ruff's
own C901 (mccabe) is not that measure: it leaves out boolean operators, comprehensions and conditional
expressions, so it counted 29 functions above 10 where radon counted 119; pyproject's mccabe ceiling is the hard
limit for any one function, this share is the limit for the package as a whole.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # tests/suites/test_style.py -> the repository
PACKAGE = ROOT / "tracekit"
OVER = 10  # a function above this many paths counts as complex (radon's grade C and worse)
MAX_SHARE = 0.08  # at most this share of the package's functions and methods are complex

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _decisions(node: ast.AST) -> int:
    """The decision points of one node itself (radon's rules), not of its children."""
    if isinstance(node, ast.Try):
        return len(node.handlers) + bool(node.orelse)
    if isinstance(node, ast.BoolOp):
        return len(node.values) - 1
    if isinstance(node, (ast.If, ast.IfExp, ast.Assert)):
        return 1  # an assert counts once, its condition's and/or not at all (radon does not look inside it)
    if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
        return 1 + bool(node.orelse)
    if isinstance(node, ast.comprehension):
        return 1 + len(node.ifs)
    if isinstance(node, ast.Match):
        wildcard = any(isinstance(c.pattern, ast.MatchAs) and c.pattern.pattern is None for c in node.cases)
        return max(0, len(node.cases) - wildcard)
    return 0


def _complexity(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """1 + the decision points of the body; a nested function or class is its own block and adds nothing."""
    total = 1
    todo: list[ast.AST] = list(function.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            continue
        total += _decisions(node)
        if not isinstance(node, ast.Assert):
            todo.extend(ast.iter_child_nodes(node))
    return total


def _blocks(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions radon reports: a module's own functions and its classes' methods, not closures."""
    found: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, _FUNCTIONS):
            found.append(node)
        elif isinstance(node, ast.ClassDef):
            found.extend(child for child in node.body if isinstance(child, _FUNCTIONS))
        else:  # a definition under a module-level if/try still counts
            todo.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, (ast.stmt, ast.excepthandler)))
    return found


def _package_complexities() -> dict[str, int]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for function in _blocks(ast.parse(path.read_text(), filename=str(path))):
            out[f"{path.relative_to(ROOT)}:{function.lineno}:{function.name}"] = _complexity(function)
    return out


def test_complexity_counts_each_kind_of_decision() -> None:
    """A hand-built function with a known count: 1 + if/elif 2 + for-else 2 + while 1 + 2 handlers + else 1
    + ``(a and b) or c`` 2 + a comprehension with one if 2 + a conditional expression 1 + assert 1 = 15; the nested
    function and the class below it are blocks of their own (radon lists the method, not the closure)."""
    source = textwrap.dedent('''
        def f(x):
            if x:
                pass
            elif not x:
                pass
            for i in x:
                pass
            else:
                pass
            while x:
                break
            try:
                pass
            except ValueError:
                pass
            except KeyError:
                pass
            else:
                pass
            y = (x and x) or x
            z = [i for i in x if i]
            w = 1 if x else 2
            assert x and x
            def inner(q):
                return q if q else [r for r in q]
            return y, z, w

        class K:
            def m(self, a):
                return a or self
    ''')
    blocks = _blocks(ast.parse(source))
    assert sorted((b.name, _complexity(b)) for b in blocks) == [("f", 15), ("m", 2)]


def test_few_functions_are_complex() -> None:
    """At most 8% of the package's functions and methods have a cyclomatic complexity above 10."""
    figures = _package_complexities()
    complex_ = sorted(name for name, cc in figures.items() if cc > OVER)
    share = len(complex_) / len(figures)
    assert share <= MAX_SHARE, (f"{len(complex_)} of {len(figures)} functions ({share:.1%}) have complexity > {OVER}; "
                                f"at most {MAX_SHARE:.0%}:\n" + "\n".join(complex_))


def test_the_count_is_radons_count() -> None:
    """Where radon is installed, the walk above gives radon's figure for every function of the package."""
    radon = pytest.importorskip("radon.complexity", reason="radon is not installed (only this cross-check needs it)")
    expected = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for block in radon.sorted_results(radon.cc_visit(path.read_text())):
            if not hasattr(block, "methods"):  # a class: its methods are listed on their own
                expected[f"{path.relative_to(ROOT)}:{block.lineno}:{block.name}"] = block.complexity
    assert _package_complexities() == expected


def test_ruff_is_clean() -> None:
    """The rules pyproject's [tool.ruff] selects (line length 120, mccabe ceiling) hold for the code CI checks."""
    exe = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(exe).exists():
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    done = subprocess.run([exe, "check", "--output-format", "concise", "tracekit", "tests", "scripts", "benchmarks"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
