"""The package type-checks: mypy over tracekit/ with the settings in pyproject.toml ([tool.mypy])."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_mypy_is_clean() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
