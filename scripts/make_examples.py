"""Rewrite every example in the README and the docs from the tool itself: examples that cannot go stale.

An example is a ``<!-- example: COMMAND -->`` line followed by a fenced block; the block becomes ``$ COMMAND``
and the command's output, run from the repository root as a user would (``python -m tracekit``, output to a
pipe, at 100 columns as the test sees it: ``COLUMNS=100``). A command over traces that are absent (``../shared``
in a user's clone) is left as it is. ``tests/suites/test_readme_examples.py`` fails when a block differs from its
command's output.

    python scripts/make_examples.py [--check]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = re.compile(r"<!-- example: (?P<cmd>.+?) -->\n```\n(?P<body>.*?)```", re.S)


def example_files() -> list[Path]:
    """The README and every page of the docs site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def missing_input(cmd: str) -> str | None:
    """The first ``../`` path the command names that is absent, else None."""
    return next((a for a in shlex.split(cmd)[1:] if a.startswith("../") and not (ROOT / a).exists()), None)


def output_of(cmd: str) -> str:
    """What ``cmd`` (a ``tracekit ...`` line) prints, run from the repository root."""
    argv = shlex.split(cmd)
    if argv[0] != "tracekit":
        raise SystemExit(f"Error: an example must run tracekit, not {argv[0]!r}")
    run = subprocess.run([sys.executable, "-m", "tracekit", *argv[1:]], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "COLUMNS": "100"})
    if run.returncode != 0:
        raise SystemExit(f"Error: `{cmd}` exited {run.returncode}: {run.stderr.strip()[-300:]}")
    return run.stdout


def rewrite(text: str) -> tuple[str, list[str]]:
    """``text`` with each example block made its command's output; and the commands skipped."""
    skipped: list[str] = []

    def block(m: re.Match[str]) -> str:
        cmd = m["cmd"]
        if missing_input(cmd):
            skipped.append(cmd)
            return m.group(0)
        return f"<!-- example: {cmd} -->\n```\n$ {cmd}\n{output_of(cmd)}```"

    return MARK.sub(block, text), skipped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if an example is stale")
    a = ap.parse_args()
    stale = 0
    for path in example_files():
        text = path.read_text(encoding="utf-8")
        new, skipped = rewrite(text)
        for cmd in skipped:
            print(f"{path.relative_to(ROOT)}: skipped (input absent): {cmd}", file=sys.stderr)
        if new != text:
            stale += 1
            print(f"{path.relative_to(ROOT)}: {'stale' if a.check else 'rewritten'}", file=sys.stderr)
            if not a.check:
                path.write_text(new, encoding="utf-8")
    return 1 if a.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
