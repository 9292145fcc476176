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


def test_a_dead_run_is_analysed_once_until_its_files_change(tmp_path: Path) -> None:
    """The all-runs view asks every run on each request: a run with no usable trace fails from the cache, with the
    same error, and is read again only once its files change."""
    from tracekit.errors import TracekitError

    trace = tmp_path / "logs" / "dead" / "a.pt.trace.json"
    trace.parent.mkdir(parents=True)
    trace.write_text('{"traceEvents": []}')
    cache = AnalysisCache(tmp_path / "logs")
    [run] = cache.runs()
    errors = []
    for _ in range(3):
        with pytest.raises(TracekitError) as got:
            cache.attribution(run)
        errors.append(str(got.value))
    assert cache.analysed == 1 and len(set(errors)) == 1 and errors[0]
    _write(trace, "layer0.attention")  # now a usable trace: analysed again
    assert [b.name for b in cache.attribution(cache.run("dead")).blocks] == ["layer0.attention"]
    assert cache.analysed == 2


def test_the_tabs_report_has_the_whatif_section(tmp_path: Path) -> None:
    """Issue 39: the tab serves the report page with its "What if" section, tracekit.whatif's own rows for the run's
    trace (a calibrated H200 eager block, tests/support/builders.py); an uncalibrated run's section is its reason."""
    import json
    import re

    from support.builders import whatif_trace
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    import tracekit
    from tracekit.results.whatif import whatif_rows
    from tracekit.tbplugin.plugin import TracekitPlugin

    logs = tmp_path / "logs"
    for run, device in (("h200", "NVIDIA H200"), ("h100", "NVIDIA H100 80GB HBM3")):
        (logs / run).mkdir(parents=True)
        whatif_trace(logs / run / "a.pt.trace.json", device=device)
    client = Client(TracekitPlugin(base_plugin.TBContext(logdir=str(logs))).get_plugin_apps()["/report"])

    def section(run: str) -> dict:
        page = client.get(f"/report?run={run}").get_data(as_text=True)
        return json.loads(re.search(r'id="tk-data">(.*?)</script>', page, re.S).group(1))["result"]["whatif"]

    [w] = tracekit.whatif(logs / "h200" / "a.pt.trace.json")
    got = section("h200")
    assert [(r["label"], r["eager_core_us"], r["fused_us"], r["fused_block_us"], r["saving_per_step_us"])
            for r in got["rows"]] == [(r.label, r.eager_core_us, r.fused_us, r.fused_block_us, r.saving_per_step_us)
                                      for r in whatif_rows(w, "kind")]
    assert got["basis"] == "per step (median of 2)" and got["reason"] is None
    [other] = tracekit.whatif(logs / "h100" / "a.pt.trace.json")
    assert section("h100") == {"backend": "cuDNN", "device": "NVIDIA H100 80GB HBM3", "mask_option": "auto",
                               "reason": f"no prediction: {other.reason}"}


def test_report_with_a_count_past_64_bits_in_measured_json_is_served(tmp_path: Path) -> None:
    """Issue 41, row 2: ``"repeats": 10**23`` in a run's measured.json made the tab's /report an HTTP 500 (the
    JSON writer's TypeError). The file is ignored as any unusable measured.json is: the run's report is served,
    with no measured latency."""
    import json

    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from support.tensorboard import embedded
    from tracekit.tbplugin.plugin import TracekitPlugin

    _write(tmp_path / "logs" / "eager" / "a.pt.trace.json", "layer0.attention")
    (tmp_path / "logs" / "eager" / "measured.json").write_text(
        json.dumps({"schema": "tracekit.measured/1", "median_ms": 2.0, "repeats": 10**23}))
    plugin = TracekitPlugin(base_plugin.TBContext(logdir=str(tmp_path / "logs")))
    client = Client(plugin.get_plugin_apps()["/report"])
    resp = client.get("/report?run=eager")
    assert resp.status_code == 200, resp.get_data(as_text=True)[:300]
    data = embedded(resp.get_data(as_text=True))
    assert data["result"].get("measured") is None  # (the page's JSON holds no run-level warning to show)
    assert client.get("/report").status_code == 200  # every run (the sweep view)


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


def test_the_tabs_report_has_the_stage_section_of_a_serving_run(tmp_path: Path) -> None:
    """Issue 44: a serving run's page in the tab carries its stage table (support.builders.serving_trace: prefill
    busy 50 µs, attention 30), and a run of another kind none."""
    import json
    import re

    from support.builders import no_attention_trace, serving_trace
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from tracekit.tbplugin.plugin import TracekitPlugin

    logs = tmp_path / "logs"
    (logs / "vllm").mkdir(parents=True)
    (logs / "resnet").mkdir(parents=True)
    serving_trace(logs / "vllm" / "a.pt.trace.json")
    no_attention_trace(logs / "resnet" / "a.pt.trace.json")
    client = Client(TracekitPlugin(base_plugin.TBContext(logdir=str(logs))).get_plugin_apps()["/report"])

    def stages(run: str) -> dict | None:
        page = client.get(f"/report?run={run}").get_data(as_text=True)
        return json.loads(re.search(r'id="tk-data">(.*?)</script>', page, re.S).group(1))["result"]["stage_table"]

    got = stages("vllm")
    assert got is not None and got["stages"] == ["prefill", "decode", "mixed", "outside"]
    assert got["rows"][0][2:5] == ["50.0 µs", "30.0 µs", "60.0%"]
    assert stages("resnet") is None
