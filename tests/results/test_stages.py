"""Serving stages in results (tracekit.results.stages; issue 44, item 2): a diff pairs a stage only with itself and
names a stage one side ran alone; a merge of traces keeps the rows adding up to the merged whole.

Hand-built traces (support.builders.serving_trace and its SERVING_ITERATIONS) give the answers by construction.
"""

from __future__ import annotations

import pytest

from support.builders import SERVING_ITERATIONS, serving_trace
from tracekit import analyze, diff
from tracekit.results.invariants import InvariantError
from tracekit.results.stages import StagePair, check_stages, merge_stages, pair_stages

PREFILL_ONLY = (SERVING_ITERATIONS[0],)  # one prefill iteration: 30 µs attention, 20 µs GEMM
DECODE_FASTER = (("execute_context_0(0)_generation_8(8)", 5, 5), ("step[DECODE bs=8]", 3, 2))  # decode 15 µs


def test_diff_pairs_decode_with_decode_and_names_the_stages_one_side_ran_alone(tmp_path):
    before = analyze(serving_trace(tmp_path / "before.json"))
    after = analyze(serving_trace(tmp_path / "after.json", DECODE_FASTER))
    d = diff(before, after).check().stages
    assert [p.stage for p in d.pairs] == ["decode", "outside"]
    [dec] = [p for p in d.pairs if p.stage == "decode"]
    assert (dec.before.busy_us, dec.after.busy_us) == (pytest.approx(25), pytest.approx(15))
    assert dec.busy_delta_us == pytest.approx(-10) and dec.attention_delta_us == pytest.approx(8 - 16)
    assert (d.only_before, d.only_after) == (["prefill", "mixed"], [])


def test_a_prefill_trace_against_a_decode_trace_pairs_nothing_but_outside(tmp_path):
    before = analyze(serving_trace(tmp_path / "p.json", PREFILL_ONLY))
    after = analyze(serving_trace(tmp_path / "d.json", DECODE_FASTER))
    d = diff(before, after).check().stages
    assert ([p.stage for p in d.pairs], d.only_before, d.only_after) == (["outside"], ["prefill"], ["decode"])


def test_a_stage_paired_with_another_fails_the_diffs_check(tmp_path):
    before = analyze(serving_trace(tmp_path / "p.json", PREFILL_ONLY))
    after = analyze(serving_trace(tmp_path / "d.json", DECODE_FASTER))
    r = diff(before, after)
    rows_b, rows_a = {x.stage: x for x in before.stages}, {x.stage: x for x in after.stages}
    r.stages.pairs.append(StagePair(stage="prefill", before=rows_b["prefill"], after=rows_a["decode"]))
    with pytest.raises(InvariantError, match="paired with another stage"):
        r.check()


def test_no_stages_on_either_side_means_no_stage_diff():
    d = pair_stages(None, None)
    assert not d.any and d.pairs == d.only_before == d.only_after == []


def test_a_merge_keeps_the_rows_adding_up_to_the_merged_whole(tmp_path):
    a = analyze(serving_trace(tmp_path / "a.json")).stages
    b = analyze(serving_trace(tmp_path / "b.json", DECODE_FASTER)).stages
    merged = merge_stages([(a, 91.0), (b, 19.0), (None, 50.0)])  # a training trace's 50 µs join outside
    by = {r.stage: r for r in merged}
    assert by["decode"].iterations == 4 and by["decode"].busy_us == pytest.approx(25 + 15)
    assert by["outside"].busy_us == pytest.approx(6 + 4 + 50) and by["outside"].span_us is None
    check_stages(merged, 91 + 19 + 50)
    assert merge_stages([(None, 1.0)]) is None
