"""Examples in the README and the docs cannot go stale: each block marked ``<!-- example: COMMAND -->`` is that
command's output.

The marker names the command; the fenced block under it shows ``$ COMMAND`` and the output
(``scripts/make_examples.py`` writes them). This test runs the command from the repository root and compares its
output with the block, line for line. A command over traces that are absent (``../shared`` in a user's clone) is
skipped with the reason.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from support.paths import ROOT

MARK = re.compile(r"<!-- example: (?P<cmd>.+?) -->\n```\n\$ (?P=cmd)\n(?P<out>.*?)```", re.S)


def _pages() -> list:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _examples() -> list[tuple[str, str, str]]:
    """(page, command, the output shown) of every marked example."""
    return [(page.name, m["cmd"], m["out"]) for page in _pages()
            for m in MARK.finditer(page.read_text(encoding="utf-8"))]


def test_the_readme_and_the_docs_mark_their_examples() -> None:
    pages = {page for page, _, _ in _examples()}
    assert {"README.md", "attribute.md", "diff.md", "whatif.md"} <= pages


def test_no_command_output_is_shown_unmarked() -> None:
    """A fenced block that shows a tracekit command's output (``$ tracekit ...``) is always a marked example."""
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        marked = {m.start("out") - len(f"$ {m['cmd']}") - 1 for m in MARK.finditer(text)}
        for m in re.finditer(r"^```\n(\$ tracekit .*)$", text, re.M):
            assert m.start(1) in marked, f"{page.name}: unmarked example {m.group(1)!r} (scripts/make_examples.py)"


@pytest.mark.parametrize(("page", "cmd", "shown"), _examples(), ids=[f"{p}: {c}" for p, c, _ in _examples()])
def test_each_example_is_the_commands_output(page: str, cmd: str, shown: str) -> None:
    argv = shlex.split(cmd)
    assert argv[0] == "tracekit"
    missing = [a for a in argv[1:] if a.startswith("../") and not (ROOT / a).exists()]
    if missing:
        pytest.skip(f"{missing[0]} not present (a user's clone)")
    run = subprocess.run([sys.executable, "-m", "tracekit", *argv[1:]], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "COLUMNS": "100"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == shown.splitlines()


def test_the_readme_is_a_short_start_that_links_every_page_of_the_site() -> None:
    """Issue 42: the README keeps the two commands, one real output and links; the rest lives in docs/ (mkdocs)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert "pip install . && tracekit attribute" in text and "python -m pytest -q" in text
    jobs = ["attribute", "diff", "measured", "report", "whatif", "graphs", "ranks", "share", "profiling", "numbers",
            "attribution", "cli", "api", "performance"]
    assert [p for p in jobs if f"(docs/{p}.md)" not in text] == []
    assert all((ROOT / "docs" / f"{p}.md").exists() for p in jobs)


def test_the_quick_start_names_every_runtime_dependency() -> None:
    """The README says what ``pip install .`` brings in: exactly pyproject's dependencies (numpy was missing once)."""
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    names = {re.match(r"[A-Za-z0-9_.-]+", d)[0].lower() for d in deps}  # type: ignore[index]
    said = re.search(r"\(dependencies: ([^)]*)\)", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert said is not None
    assert set(re.findall(r"`([^`]+)`", said[1])) == names
