"""The TensorBoard tab's analysis cache (issue 26, rows 15-16), without a server: concurrent first requests cost one
analysis, and a trace replaced by other content of the same size and mtime is analysed again."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from support.builders import TraceBuilder, attention_block

pytest.importorskip("tensorboard")
from tracekit.tbplugin.plugin import AnalysisCache


def _write(path: Path, name: str) -> Path:
    b = TraceBuilder()
    attention_block(b, 0, name=name)
    path.parent.mkdir(parents=True, exist_ok=True)
    return b.write(path)


def test_concurrent_first_requests_share_one_analysis(tmp_path: Path) -> None:
    _write(tmp_path / "logs" / "eager" / "a.pt.trace.json", "layer0.attention")
    cache = AnalysisCache(tmp_path / "logs")
    [run] = cache.runs()
    start = threading.Barrier(24)
    got: list[object] = []

    def ask() -> None:
        start.wait()
        got.append(cache.attribution(run))

    threads = [threading.Thread(target=ask) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(got) == 24 and cache.analysed == 1 and all(g is got[0] for g in got)


def test_same_size_and_mtime_other_content_is_analysed_again(tmp_path: Path) -> None:
    trace = _write(tmp_path / "logs" / "eager" / "a.pt.trace.json", "layer0.attention")
    cache = AnalysisCache(tmp_path / "logs")
    [run] = cache.runs()
    first = cache.attribution(run)
    st = os.stat(trace)
    other = _write(tmp_path / "other.pt.trace.json", "layer9.attention")  # same length: one digit changed
    assert other.stat().st_size == st.st_size
    os.replace(other, trace)
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(trace).st_mtime_ns == st.st_mtime_ns and os.stat(trace).st_size == st.st_size
    again = cache.attribution(run)
    assert cache.analysed == 2 and [b.name for b in again.blocks] == ["layer9.attention"]
    assert [b.name for b in first.blocks] == ["layer0.attention"]


def test_the_all_runs_view_skips_an_unusable_run_and_names_it(tmp_path: Path) -> None:
    """Issue 41, row 12: a run whose trace holds no profiler event made the tab's all-runs view a 400."""
    import json
    import re

    from support.builders import eager_trace
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from tracekit.tbplugin import TracekitPlugin

    logs = tmp_path / "logs"
    for name, layers in (("run_a", 2), ("run_b", 1)):
        (logs / name).mkdir(parents=True)
        eager_trace(logs / name / "host.pt.trace.json", layers=layers, steps=1)
    (logs / "run_dead").mkdir()
    (logs / "run_dead" / "host.pt.trace.json").write_text('{"traceEvents": []}')
    plugin = TracekitPlugin(base_plugin.TBContext(logdir=str(logs)))
    report = Client(plugin.get_plugin_apps()["/report"])
    resp = report.get("/report")
    page = resp.get_data(as_text=True)
    assert resp.status_code == 200, page[:300]
    data = json.loads(re.search(r'<script type="application/json" id="tk-data">(.*?)</script>', page, re.S).group(1))
    runs = {r["name"]: r["totals"] for r in data["result"]["runs"]}
    assert sorted(runs) == ["run_a", "run_b"] and runs["run_a"]["blocks"] == 2 and runs["run_b"]["blocks"] == 1
    assert len([w for w in data["result"]["warnings"] if "run_dead" in w]) == 1
    assert report.get("/report", query_string={"run": "run_dead"}).status_code == 400  # the run alone: its error
