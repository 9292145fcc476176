"""scripts/regen_golden.py rebuilds tests/golden/ from the same inputs the tests use (or a
regenerated golden file would silently pin something else)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.paths import ROOT, SWEEP


@pytest.mark.slow
def test_golden_files_are_what_the_regen_script_makes() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "regen_golden.py"), "--check"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("attribute.json", "attribute_header.csv", "diff.json", "diff_header.csv"):
        assert f"{name}: unchanged" in proc.stdout, proc.stdout
    if SWEEP.is_dir():
        assert "whatif_eager_4096.json: unchanged" in proc.stdout, proc.stdout
