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
