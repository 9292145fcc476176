"""The serving stage table in every view (tracekit.renderers.stagetable; issue 44, item 2): terminal, markdown,
CSV (``--by stage``), JSON, the HTML report and (through it) the TensorBoard tab, attribution and diff alike; and
no stage section on a trace without stages.

support.builders.serving_trace gives the figures by construction: prefill busy 50 µs (attention 30), decode 25
(16), mixed 10 (7), outside 6.
"""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from support.builders import SERVING_ITERATIONS, no_attention_trace, serving_trace
from tracekit import analyze, diff
from tracekit.renderers import CSVRenderer, JSONRenderer, MarkdownRenderer, TerminalRenderer
from tracekit.renderers.html import HTMLRenderer

TITLE = "serving stages"


@pytest.fixture
def serving(tmp_path):
    return analyze(serving_trace(tmp_path / "serving.json")).check()


def _embedded(page: str) -> dict:
    return json.loads(re.search(r'id="tk-data">(.*?)</script>', page, re.S).group(1))["result"]


def test_the_terminal_and_markdown_show_one_row_per_stage(serving):
    for renderer in (TerminalRenderer(), MarkdownRenderer()):
        text = renderer.render(serving)
        rows = [ln for ln in text.splitlines() if re.match(r"\|? ?(prefill|decode|mixed|outside)\b", ln)]
        assert TITLE in text and len(rows) == 4, renderer.name
        assert "50.0 µs" in rows[0] and "30.0 µs" in rows[0] and "60.0%" in rows[0]  # prefill: busy, attention, share


def test_csv_by_stage_gives_the_raw_figures(serving):
    rows = list(csv.DictReader(io.StringIO(CSVRenderer(by="stage").render(serving))))
    assert [r["stage"] for r in rows] == ["prefill", "decode", "mixed", "outside"]
    assert [float(r["busy_us"]) for r in rows] == pytest.approx([50, 25, 10, 6])
    assert [float(r["fused_attention_us"]) for r in rows] == pytest.approx([30, 16, 7, 0])
    assert rows[1]["rules"] == "execute-context-generation=1;sglang-step=1" and rows[3]["span_us"] == ""


def test_json_lists_the_stages_and_leaves_them_out_without_any(serving, tmp_path):
    stages = json.loads(JSONRenderer().render(serving))["stages"]
    assert [(s["stage"], s["busy_us"], s["attention_us"]) for s in stages] == [
        ("prefill", 50.0, 30.0), ("decode", 25.0, 16.0), ("mixed", 10.0, 7.0), ("outside", 6.0, 0.0)]
    other = analyze(no_attention_trace(tmp_path / "resnet.json"))
    assert "stages" not in json.loads(JSONRenderer().render(other))
    assert TITLE not in TerminalRenderer().render(other) and TITLE not in MarkdownRenderer().render(other)


def test_the_report_draws_the_stage_section(serving, tmp_path):
    table = _embedded(HTMLRenderer().render(serving))["stage_table"]
    assert table["stages"] == ["prefill", "decode", "mixed", "outside"]
    assert table["rows"][0][:5] == ["prefill", "1", "50.0 µs", "30.0 µs", "60.0%"]
    assert "function stageSection" in HTMLRenderer().render(serving)
    other = analyze(no_attention_trace(tmp_path / "resnet.json"))
    assert _embedded(HTMLRenderer().render(other))["stage_table"] is None


def test_every_diff_view_compares_stage_to_stage(serving, tmp_path):
    after = analyze(serving_trace(tmp_path / "after.json", SERVING_ITERATIONS[:2]))  # prefill and one decode
    r = diff(serving, after).check()
    d = json.loads(JSONRenderer().render(r))["stages"]
    assert [p["stage"] for p in d["pairs"]] == ["prefill", "decode", "outside"]
    assert d["pairs"][1]["busy_delta_us"] == pytest.approx(15 - 25) and d["only_before"] == ["mixed"]
    for renderer in (TerminalRenderer(), MarkdownRenderer()):
        text = renderer.render(r)
        assert "stage to stage" in text and "stages in before only: mixed" in text, renderer.name
    rows = list(csv.reader(io.StringIO(CSVRenderer().render(r))))
    assert ["stage_only_before", "mixed"] == rows[-1][:2]
    assert ["stage", "decode:busy", "25.0", "15.0", "-10.0"] == [x for x in rows if x[1] == "decode:busy"][0][:5]
    page = _embedded(HTMLRenderer().render(r))["stage_diff"]
    assert page["stages"] == ["prefill", "decode", "outside"] and page["notes"]


def test_a_sweep_pages_each_runs_own_stages(tmp_path):
    """A folder of runs (``--by run``): each run's detail carries its own stage table, a run without stages none."""
    for run in ("vllm", "resnet"):
        (tmp_path / "runs" / run).mkdir(parents=True)
    serving_trace(tmp_path / "runs" / "vllm" / "a.pt.trace.json")
    no_attention_trace(tmp_path / "runs" / "resnet" / "a.pt.trace.json")
    runs = {r["name"]: r for r in _embedded(HTMLRenderer().render(analyze(tmp_path / "runs", by="run")))["runs"]}
    assert runs["vllm"]["stage_table"]["stages"] == ["prefill", "decode", "mixed", "outside"]
    assert runs["resnet"]["stage_table"] is None


def test_a_stage_counted_as_bounds_shows_its_range_never_the_lower_end_alone(serving):
    """Issue 44: a stage whose attention FLOPs are a range (varlen, paged) shows TFLOP/s and % of the roof as
    low–high. By construction: 1 to 4 GFLOP in 1 ms on a 1 PFLOP/s device: 1.0–4.0 TFLOP/s, 0.1–0.4% of the roof."""
    from dataclasses import replace

    from tracekit.renderers.stagetable import stage_cells
    from tracekit.results.efficiency import Efficiency

    e = Efficiency(flops=1e9, bytes=1e6, time_ns=1_000_000, compute_s=1e-6, memory_s=1e-7, ops=1, bounded=1,
                   flops_span=3e9, compute_span_s=3e-6, bounds_why="varlen")
    assert stage_cells(replace(serving.stages[0], efficiency=e))[-2:] == ["1.0\u20134.0", "0.1\u20130.4% compute"]
    from tracekit.results.stages import stage_record

    rec = stage_record(replace(serving.stages[0], efficiency=e))  # (CSV --by stage, to_dataframe(by="stage"))
    assert (rec["flops_kind"], rec["tflops_per_s"], rec["tflops_per_s_max"], rec["roof_pct_max"]) == (
        "bounds", 1.0, 4.0, 0.4)
    exact = Efficiency(flops=1e9, bytes=1e6, time_ns=1_000_000, compute_s=1e-6, memory_s=1e-7, ops=1)
    assert stage_cells(replace(serving.stages[0], efficiency=exact))[-2:] == ["1.0", "0.1% compute"]
