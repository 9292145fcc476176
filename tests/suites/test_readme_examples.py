"""Examples in the README cannot go stale: each block marked ``<!-- example: COMMAND -->`` is that command's output.

The marker names the command; the fenced block under it shows ``$ COMMAND`` and the output. This test runs the
command from the repository root and compares its output with the block, line for line. A command over traces
that are absent (``../shared`` in a user's clone) is skipped with the reason.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from support.paths import ROOT

MARK = re.compile(r"<!-- example: (?P<cmd>.+?) -->\n```\n\$ (?P=cmd)\n(?P<out>.*?)```", re.S)


def _examples() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [(m["cmd"], m["out"]) for m in MARK.finditer(text)]


def test_the_readme_marks_its_examples() -> None:
    assert _examples(), "no <!-- example: ... --> block in the README"


@pytest.mark.parametrize(("cmd", "shown"), _examples(), ids=[c for c, _ in _examples()])
def test_each_example_is_the_commands_output(cmd: str, shown: str) -> None:
    argv = shlex.split(cmd)
    assert argv[0] == "tracekit"
    missing = [a for a in argv[1:] if a.startswith("../") and not (ROOT / a).exists()]
    if missing:
        pytest.skip(f"{missing[0]} not present (a user's clone)")
    run = subprocess.run([sys.executable, "-m", "tracekit", *argv[1:]], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == shown.splitlines()
