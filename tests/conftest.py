"""Shared fixtures: where the real traces are, and helpers to run the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT.parent / "shared" / "traces" / "real"
SAMPLES = ROOT / "sample_traces"

requires_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real traces not present at {REAL} (a user's clone)")


def real(rel: str) -> Path:
    return REAL / rel


def run_cli(*args, cwd=None, check=False) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: a fresh process, so exit codes and stderr are real."""
    proc = subprocess.run([sys.executable, "-m", "tracekit", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}: {proc.stderr}")
    return proc
