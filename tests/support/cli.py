"""The CLI as a user runs it: a fresh process, so exit codes and stderr are real."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.paths import ROOT


def run_cli(*args: object, cwd: Path | None = None, check: bool = False,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m tracekit ARGS`` in ``cwd`` (the checkout by default); ``check``: fail on a non-zero exit."""
    proc = subprocess.run([sys.executable, "-m", "tracekit", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}: {proc.stderr}")
    return proc


def diff_json(proc: subprocess.CompletedProcess) -> dict:
    """``tracekit diff --format json`` output with what differs between machines pinned (the version, the
    folders of the sources), as tests/golden/diff.json holds it."""
    out = json.loads(proc.stdout)
    out["tool"] = "tracekit X.Y.Z"
    for side in ("before", "after"):
        for t in out["traces"][side]:
            t["source"] = Path(t["source"]).name
    return out
