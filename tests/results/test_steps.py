"""One time base (issue 37): every headline is the median ProfilerStep, labelled; totals come second, labelled.

Hand-built traces give each figure by construction (``dense_steps``); the shared H200 sweep is checked against an
independent walk of its raw JSON (ProfilerStep windows, the union of the kernels their ops launched, the median).
"""

from __future__ import annotations

import json

import pytest

from support.cli import run_cli
from support.pairs import eager, no_steps
from support.paths import SWEEP, requires_h200
from support.steps import dense_steps, raw_steps
from tracekit import analyze
from tracekit.renderers import JSONRenderer, MarkdownRenderer, TerminalRenderer
from tracekit.results.steps import PER_STEP, WHOLE_TRACE, per_step

THREE = [(100.0, 50.0), (300.0, 10.0), (200.0, 100.0)]  # attention 100, 300, 200: the median step is the third


def test_per_step_is_the_median_step_by_construction(tmp_path):
    res = analyze(dense_steps(tmp_path / "t.json", THREE)).check()
    ps = per_step(res)
    ps.check()
    assert (ps.basis, ps.steps, ps.median_steps) == (PER_STEP, 3, [3])
    assert (ps.attention_us, ps.busy_us, ps.span_us, ps.idle_us) == pytest.approx((200, 300, 313, 13))
    assert ps.label == "per step (median of 3)"
    assert res.totals.total_us == pytest.approx(600)  # the totals still sum every step (busy 760 with the adds)


def test_an_even_count_averages_the_middle_two(tmp_path):
    ps = per_step(analyze(dense_steps(tmp_path / "t.json", [(100.0, 50.0), (300.0, 10.0)])).check())
    assert ps.median_steps == [1, 2]
    assert (ps.attention_us, ps.busy_us, ps.span_us) == pytest.approx((200, 230, 243))
    assert ps.label == "per step (median of 2)"


def test_every_format_leads_with_the_median_step_and_labels_the_totals(tmp_path):
    """Terminal, markdown, JSON and the notebook repr: the median step first, the totals over all steps after."""
    res = analyze(dense_steps(tmp_path / "t.json", THREE)).check()
    lines = TerminalRenderer(width=200).render(res).splitlines()
    lead = next(i for i, x in enumerate(lines) if x.startswith("per step (median of 3): "))
    assert lines[lead].startswith("per step (median of 3): attention 200 µs · busy 300 µs · span 313 µs · idle 13.0 µs")
    assert lines[lead + 1].startswith("totals over all 3 steps — attention: 3 blocks, 600 µs · 78.9% of device busy "
                                      "time (760 µs)")  # 760: the adds' 160 µs besides the blocks' 600
    md = MarkdownRenderer().render(res).splitlines()
    assert "per step (median of 3): attention 200 µs · busy 300 µs" in md[0]
    assert any(x.startswith("- totals over all 3 steps: 3 attention blocks, 600.0 µs") for x in md)
    doc = json.loads(JSONRenderer().render(res))
    assert doc["totals"]["per_step"] == {"basis": "median step", "steps": 3, "median_steps": [3],
                                         "attention_us": 200.0, "busy_us": 300.0, "span_us": 313.0,
                                         "idle_us": 13.0, "note": None}
    assert doc["totals"]["total_us"] == 600.0
    assert "per step (median of 3): attention 200 µs" in repr(res)


def test_per_step_equals_the_diffs_step_before(tmp_path):
    """For one trace, ``totals.per_step`` is the diff's ``step.before``: one median step, two outputs."""
    a = dense_steps(tmp_path / "a.json", THREE)
    b = dense_steps(tmp_path / "b.json", [(50.0, 50.0), (60.0, 10.0), (70.0, 100.0)])
    att = json.loads(run_cli("attribute", a, "--format", "json", check=True).stdout)["totals"]["per_step"]
    step = json.loads(run_cli("diff", a, b, "--format", "json", check=True).stdout)["step"]["before"]
    assert att["median_steps"] == step["steps"]
    assert {k: att[k] for k in ("attention_us", "busy_us", "span_us")} == {
        k: step[k] for k in ("attention_us", "busy_us", "span_us")}


def test_a_trace_without_steps_says_whole_trace(tmp_path):
    """No ProfilerStep: the headline is the totals, labelled "whole trace" and why, never another basis."""
    res = analyze(no_steps(tmp_path / "t.json", eager)).check()
    ps = per_step(res)
    ps.check()
    assert (ps.basis, ps.steps, ps.span_us, ps.idle_us) == (WHOLE_TRACE, 0, None, None)
    assert ps.attention_us == pytest.approx(res.totals.total_us) == pytest.approx(25)  # eager: 10 + 5 + 10
    text = TerminalRenderer(width=200).render(res)
    assert "attention, whole trace (no ProfilerStep events): 1 block" in text
    assert "per step" not in text and "totals over" not in text
    doc = json.loads(JSONRenderer().render(res))["totals"]["per_step"]
    assert doc["basis"] == "whole trace" and doc["span_us"] is None and doc["note"] == "no ProfilerStep events"


# ---------------------------------------------------------------------------------------------
# The shared H200 sweep, against an independent walk of the raw JSON

@requires_h200
@pytest.mark.parametrize("run", ["eager_4096", "sdpa-flash_4096", "eager_512"])
def test_real_per_step_is_the_raw_median_step(run):
    steps = raw_steps(run)
    ps = per_step(analyze(SWEEP / run).check())
    assert ps.steps == len(steps) == 2  # two steps: the median is their mean
    busy = sum(b for b, _ in steps.values()) / 2
    span = sum(s for _, s in steps.values()) / 2
    assert ps.busy_us == pytest.approx(busy, abs=0.01)
    assert ps.span_us == pytest.approx(span, abs=0.01)
