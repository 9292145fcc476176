"""Run rows keep their three speedups apart (issue 37): measured latency, profiled step busy, profiled attention busy,
each named in every view; a launch-bound profiled figure is never a plain speedup."""

from __future__ import annotations

import json

import pytest

from support.steps import dense_steps
from tracekit import analyze
from tracekit.renderers import JSONRenderer, MarkdownRenderer, TerminalRenderer
from tracekit.results.measured import MEASURED_FILE, MEASURED_SCHEMA
from tracekit.results.sweep import run_rows

# Median steps by construction (support.steps.dense_steps): eager busy 300, attention 200; fast busy 50, attention 30.
EAGER = [(100.0, 50.0), (300.0, 10.0), (200.0, 100.0)]
FAST = [(20.0, 50.0), (40.0, 10.0), (30.0, 20.0)]


def _sweep(tmp_path, latency=None):
    root = tmp_path / "sweep"
    for name, steps in (("eager_64", EAGER), ("fast_64", FAST)):
        (root / name).mkdir(parents=True)
        dense_steps(root / name / "t.pt.trace.json", steps)
        if latency is not None:
            doc = {"schema": MEASURED_SCHEMA, "median_ms": latency[name]}
            (root / name / MEASURED_FILE).write_text(json.dumps(doc))
    return analyze(root, by="run").check()


def test_profiled_speedups_by_construction(tmp_path):
    """No measured.json: latency_speedup is None; step 300 / 50 = 6×, attention 200 / 30 = 6.67×, neither marked
    launch-bound (each step idles 13 µs of its span)."""
    res = _sweep(tmp_path)
    fast = {r.name: r for r in run_rows(res)}["fast_64"]
    fast.check()
    assert fast.latency_speedup is None and fast.baseline == "eager_64"
    assert fast.step_speedup == pytest.approx(6.0) and fast.attention_speedup == pytest.approx(200 / 30)
    assert not fast.step_speedup_launch_bound and not fast.attention_speedup_launch_bound
    line = next(x for x in TerminalRenderer(by="run", width=120).render(res).splitlines() if x.startswith("fast_64"))
    assert "6.00× p " in line and "6.67× p " in line and "p!" not in line
    row = next(r for r in json.loads(JSONRenderer(by="run").render(res))["runs"] if r["name"] == "fast_64")["run_row"]
    assert (row["latency_speedup"], row["step_speedup"], row["attention_speedup"]) == (None, 6.0, 6.6667)
    assert "speedup" not in row and row["per_step"]["busy_us"] == 50.0


def test_measured_latency_sits_beside_the_profiled_speedups(tmp_path):
    """measured.json 4.0 → 2.5 ms: latency_speedup 1.60×, and the profiled 6× and 6.67× stay as they were."""
    res = _sweep(tmp_path, {"eager_64": 4.0, "fast_64": 2.5})
    fast = {r.name: r for r in run_rows(res)}["fast_64"]
    assert fast.latency_speedup == pytest.approx(1.6)
    assert fast.step_speedup == pytest.approx(6.0) and fast.attention_speedup == pytest.approx(200 / 30)
    text = TerminalRenderer(by="run", width=140).render(res)
    head = next(x for x in text.splitlines() if x.startswith("run "))
    assert head.split()[2:6] == ["latency", "latency×", "step×", "attn×"]
    assert "latency× measured latency" in text and "step× profiled" in text and "attn× profiled" in text
    md = MarkdownRenderer(by="run").render(res)
    assert "| latency speedup (measured) | step speedup (profiled) | attention speedup (profiled) |" in md
    assert "| 1.60× | 6.00× p | 6.67× p |" in md
