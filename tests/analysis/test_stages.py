"""Serving stages (tracekit.analysis.stages; issue 44, item 2): each engine iteration named prefill, decode or
mixed, by the framework's own range or by its attention's shapes, and the device time summed per stage.

The hand-built traces know their answers by construction (support.builders.serving_iteration: attention
``attn_us``, a GEMM ``other_us``, a 2-µs gap between them). The real serving traces are read twice: by tracekit,
and by this file's own walk of the raw JSON (the iteration range's name, and the device time its launches ran).
"""

from __future__ import annotations

import gzip
import json
import re

import pytest

from support.builders import SERVING_GAP_US, TraceBuilder, serving_core, serving_iteration, serving_trace
from support.paths import GRAPHS, REAL, requires_real
from tracekit import analyze
from tracekit.analysis.stages import RANGE_RULES, SHAPE_RULES
from tracekit.results.invariants import InvariantError

EXEC = "execute-context-generation"


def _rows(result) -> dict:
    return {r.stage: r for r in result.stages or []}


def _framework_trace(tmp_path):
    """support.builders.serving_trace: five iterations named by the engines' ranges (prefill 30 + 20 µs; decode
    10 + 5 and 6 + 4; mixed 7 + 3; an IDLE step's 2 µs, no stage) and one 4-µs kernel launched outside them."""
    return analyze(serving_trace(tmp_path / "serving.json")).check()


def test_the_framework_ranges_name_each_iteration_and_the_stages_sum_their_time(tmp_path):
    rows = _rows(_framework_trace(tmp_path))
    assert list(rows) == ["prefill", "decode", "mixed", "outside"]
    p, d, m, o = rows["prefill"], rows["decode"], rows["mixed"], rows["outside"]
    assert (p.iterations, p.rules) == (1, {EXEC: 1})
    assert (d.iterations, d.rules) == (2, {EXEC: 1, "sglang-step": 1})
    assert (m.iterations, m.rules, o.iterations, o.rules) == (1, {"sglang-step": 1}, 0, {})
    assert [r.busy_us for r in (p, d, m, o)] == pytest.approx([50, 25, 10, 6])
    assert [r.attention_us for r in (p, d, m, o)] == pytest.approx([30, 16, 7, 0])
    assert [r.categories["fused_attention"] for r in (p, d, m)] == pytest.approx([30, 16, 7])
    assert p.attention_share == pytest.approx(0.6) and d.attention_share == pytest.approx(16 / 25)
    # each iteration's device window holds one 2-µs gap; the outside row has no span of its own
    assert [r.idle_us for r in (p, d, m)] == pytest.approx([SERVING_GAP_US, 2 * SERVING_GAP_US, SERVING_GAP_US])
    assert [r.span_us for r in (p, d, m)] == pytest.approx([52, 29, 12]) and o.span_us is None
    assert [r.blocks for r in (p, d, m, o)] == [1, 2, 1, 0]


def test_a_range_nested_in_another_names_no_second_iteration(tmp_path):
    """TraceLens's patched SGLang records execute_… around step[…]: one iteration, named by the outer range."""
    b = TraceBuilder()
    b.annotation("execute_8_context_0(sq0sk0sqsq0sqsk0)_generation_8(sq8sk900sqsq8sqsk900)", 0, 150)
    serving_iteration(b, 10, "step[DECODE bs=8]", 10, 5)
    [d] = analyze(b.write(tmp_path / "nested.json")).check().stages
    assert (d.stage, d.iterations, d.rules, d.busy_us) == ("decode", 1, {EXEC: 1}, pytest.approx(15))


def _steps_trace(tmp_path, q_lens: list[list[int]]):
    """One ProfilerStep per entry, 1000 µs apart, no framework range: an attention core per query length (10 µs
    each, 20 µs apart on the device) and a 5-µs GEMM."""
    b = TraceBuilder()
    for s, lens in enumerate(q_lens):
        t0 = 1000 * s
        b.annotation(f"ProfilerStep#{s + 1}", t0, 900)
        for c, q in enumerate(lens):
            serving_core(b, t0 + 1 + 10 * c, t0 + 200 + 20 * c, 10, q)
        serving_iteration(b, t0 + 500, None, 0, 5)
    return analyze(b.write(tmp_path / "steps.json")).check()


def test_without_framework_ranges_the_query_length_names_each_step(tmp_path):
    rows = _rows(_steps_trace(tmp_path, [[128], [1], [64, 1]]))
    assert list(rows) == ["prefill", "decode", "mixed"]
    assert {s: (r.iterations, r.rules) for s, r in rows.items()} == {
        "prefill": (1, {"query-length": 1}), "decode": (1, {"query-length": 1}), "mixed": (1, {"query-length": 1})}
    assert [rows[s].attention_us for s in rows] == pytest.approx([10, 10, 20])
    assert [rows[s].busy_us for s in rows] == pytest.approx([15, 15, 25])


def test_a_decode_kernel_names_its_step_without_any_recorded_shape(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 900)
    serving_core(b, 1, 200, 12, kernel="void paged_attention_ll4mi_QKV_mfma16_kernel<__hip_bfloat16, 16>(Params)")
    [d] = analyze(b.write(tmp_path / "paged.json")).check().stages
    assert (d.stage, d.rules, d.attention_us) == ("decode", {"decode-kernel": 1}, pytest.approx(12))


def test_a_training_trace_has_no_stages(tmp_path):
    """Queries of 128 tokens and no serving name: no serving signature, no stage table (and no JSON key)."""
    result = _steps_trace(tmp_path, [[128], [128]])
    assert result.stages is None
    from tracekit.renderers.jsonrenderer import to_dict
    assert "stages" not in to_dict(result, "tracekit")


def test_long_queries_alone_make_no_prefill_stage(tmp_path):
    """A diffusion pipeline's trace names a VAE ``decode`` (as xDiT's do) and runs 4096-token queries: a
    serving-like name lets the shape rules look, but a long query alone never marks a serving trace."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 900)
    serving_core(b, 1, 200, 10, 4096)
    b.module("Decoder_0", 300, 50)
    b.op("diffusers/models/autoencoders/autoencoder_kl.py(213): decode", 301, 40, cat="python_function")
    assert analyze(b.write(tmp_path / "flux.json")).check().stages is None


def test_the_stages_must_add_up_to_the_whole(tmp_path):
    result = _framework_trace(tmp_path)
    rows = _rows(result)
    rows["outside"].busy_us += 0.0009 * 91  # within 0.1% of the 91 µs whole: still adds up
    result.check()
    rows["outside"].busy_us += 0.0002 * 91
    with pytest.raises(InvariantError, match="not the whole"):
        result.check()


def test_a_stage_whose_split_misses_its_attention_fails_its_check(tmp_path):
    result = _framework_trace(tmp_path)
    _rows(result)["decode"].categories["fused_attention"] -= 1
    with pytest.raises(InvariantError, match="categories sum"):
        result.check()


def test_rules_are_named_and_give_reasons():
    for rule in (*RANGE_RULES, *SHAPE_RULES):
        assert rule.name and rule.why
    assert len({r.name for r in (*RANGE_RULES, *SHAPE_RULES)}) == len(RANGE_RULES) + len(SHAPE_RULES)


# -- the shared serving traces: tracekit's stages against this file's own walk of the raw JSON

SERVING = {
    "sglang_decode": GRAPHS / "sglang_decode" / "sglang_Qwen3-8B_decode.json.gz",
    "vllm_prefilldecode_piecewise": GRAPHS / "vllm_prefilldecode_piecewise" / "graph_execution.json.gz",
    "sglang_prefilldecode": REAL / "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
    "vllm_decode_full": REAL / "tracelens/inference/vllm_decode_full/graph_execution.json.gz",
    "b200_eager": REAL / "tracelens/b200/eager_trace.json.gz",
}
_EXEC = re.compile(r"execute_(?:\d+_)?context_(\d+)\(.*\)_generation_(\d+)\(")
_DEVICE = {"kernel", "gpu_memcpy", "gpu_memset"}


def _raw_walk(path) -> tuple[str, float, float]:
    """(stage, busy µs of the device events launched inside the iteration range, busy µs of all device events),
    from the raw events: the outermost execute_… range's counts, runtime calls by correlation, and each set's
    union of intervals."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    [(lo, hi, ctx, gen)] = [(e["ts"], e["ts"] + e["dur"], int(m[1]), int(m[2])) for e in events
                            if e.get("cat") == "user_annotation" and (m := _EXEC.match(e["name"]))]
    stage = "mixed" if ctx and gen else "prefill" if ctx else "decode"
    launch = {e["args"]["correlation"]: e["ts"] for e in events
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    dev = [e for e in events if e.get("cat") in _DEVICE and e.get("ph") == "X"]
    inside = [e for e in dev if lo <= launch.get(e["args"].get("correlation"), -1) < hi]
    return stage, _union(inside), _union(dev)


def _union(evs: list[dict]) -> float:
    busy, end = 0.0, float("-inf")
    for s, e in sorted((x["ts"], x["ts"] + x["dur"]) for x in evs):
        if e > end:
            busy += e - max(s, end)
            end = e
    return busy


@requires_real
@pytest.mark.parametrize("name", sorted(SERVING))
def test_each_shared_serving_trace_gets_its_stage_from_its_own_range(name):
    path = SERVING[name]
    if not path.exists():
        pytest.skip(f"{path} is not in ../shared")
    result = analyze(path).check()  # check(): the rows add up to the device busy time within 0.1%
    stage, inside_us, whole_us = _raw_walk(path)
    rows = _rows(result)
    assert rows[stage].iterations == 1 and rows[stage].rules == {EXEC: 1}
    assert set(rows) <= {stage, "outside"}
    assert sum(t.base_us for t in result.traces) == pytest.approx(whole_us, rel=1e-3)
    assert rows[stage].busy_us == pytest.approx(inside_us, rel=1e-3)
    assert rows[stage].attention_us == pytest.approx(result.coverage.in_blocks_us, rel=1e-3)
