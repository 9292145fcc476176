"""Where the checkout, the shipped samples and the shared traces are, and the skips for when they are absent."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The one place that knows where the shared traces live: every test finds them through these names.
SHARED = ROOT.parent / "shared" / "traces"
REAL = SHARED / "real"
H200 = SHARED / "h200"
SWEEP = H200 / "sweep"
GRAPHS = SHARED / "graphs"
SAMPLES = ROOT / "sample_traces"
GOLDEN = ROOT / "tests" / "golden"

requires_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real traces not present at {REAL} (a user's clone)")
requires_h200 = pytest.mark.skipif(not SWEEP.is_dir(), reason=f"H200 sweep traces not present at {SWEEP}")


def real(rel: str) -> Path:
    """One real trace by its path under REAL."""
    return REAL / rel


def real_trace_files() -> list[Path]:
    """Every real trace file (sorted), or [] when the folder is absent (a user's clone)."""
    if not REAL.is_dir():
        return []
    return sorted(REAL.rglob("*.json.gz")) + sorted(REAL.rglob("*.json"))


def sweep_file(name: str) -> Path:
    """The one trace file of the H200 sweep's run ``name`` (e.g. ``eager_512``)."""
    [f] = sorted((SWEEP / name).glob("*.json*"))
    return f
