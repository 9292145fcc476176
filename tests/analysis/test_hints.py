"""Hint rules (tracekit/analysis/hints.py): each fires on a real trace that has the problem and stays silent on one
that has not; savings are bounded by figures the trace gives independently (its kernels' own durations)."""

from __future__ import annotations

import json
import re
import shutil
import statistics
from functools import lru_cache
from pathlib import Path

import orjson
import pytest
from support.builders import TraceBuilder
from support.builders import two_fp32_products
from support.builders import repeat_kv_block
from support.paths import REAL
from support.cli import run_cli

from tracekit.results.invariants import InvariantError
from tracekit import analyze
from tracekit.analysis.hints.rules import HINT_RULES
from tracekit.analysis.hints.facts import HintTag
from tracekit.results.attribution import Attribution
from tracekit.results.hints import GroupFacts, merge_facts
from types import SimpleNamespace
from tracekit.analysis.hints.rules import Group, _names, _t, evaluate
from tracekit.hardware import platform
from support.builders import attribute_built
from support.paths import requires_real
from support.randtrace import REAL_SAMPLES, context_after, random_trace
from support.traces import read_events
from tracekit.analysis.hints.facts import _cat_tag, _Inputs
from tracekit.model import OpInputs

H200 = REAL.parent / "h200"
requires_h200 = pytest.mark.skipif(not H200.is_dir(), reason=f"H200 traces not present at {H200}")

QWEN_H100 = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
QWEN_MI300 = "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
OWL_H100 = "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"
FLUX = "tracelens/inference/xdit_flux_aiter/profile_trace_rank_0.json.gz"
B200 = "tracelens/b200/eager_trace.json.gz"


@lru_cache(maxsize=None)
def _analyze(path: str) -> Attribution:
    return analyze(path).check()


def h200(name: str) -> Attribution:
    p = H200 / name
    if not p.exists():
        pytest.skip(f"{p} not present")
    return _analyze(str(p))


def real(rel: str) -> Attribution:
    p = REAL / rel
    if not p.exists():
        pytest.skip(f"{p} not present")
    return _analyze(str(p))


def fired(a: Attribution, rule: str) -> list:
    return [h for h in a.hints if h.rule == rule]


def _kernels(path: Path) -> list[dict]:
    """Device kernels straight from the JSON (independent of tracekit's reader)."""
    files = [path] if path.is_file() else sorted(path.rglob("*.json.gz"))
    out = []
    for f in files:
        out += read_events(f, cats=("kernel", "gpu_memcpy"))
    return out


def test_rule_table_is_named_and_ordered() -> None:
    names = [r.name for r in HINT_RULES]
    assert len(names) == len(set(names)) >= 9
    assert names[:3] == ["launch-bound", "eager-softmax", "sdpa-math-fallback"]  # launch-bound first: it leads
    for r in HINT_RULES:
        assert r.reads and r.why and r.threshold >= 0


# -- 1. eager softmax + mask + scale -> fused SDPA ---------------------------------------------------------

@requires_h200
def test_eager_softmax_fires_on_eager_sweep() -> None:
    a = h200("sweep/eager_512")
    (h,) = fired(a, "eager-softmax")
    assert h.blocks == ["layer*.attention"]
    # softmax kernels read from the raw JSON: every softmax_warp kernel in the file runs inside the blocks
    raw = sum(e["dur"] for e in _kernels(H200 / "sweep/eager_512") if "softmax" in e["name"])
    assert h.evidence["softmax_us"] == pytest.approx(raw, abs=0.01)
    assert h.saving_basis.startswith("upper bound")
    assert h.saving_us <= h.evidence["busy_us"] and h.saving_pct > 30


@requires_real
def test_eager_softmax_fires_on_owlv2() -> None:
    assert fired(real(OWL_H100), "eager-softmax")


@requires_h200
def test_eager_softmax_silent_on_fused_and_math() -> None:
    assert not fired(h200("sweep/sdpa-flash_512"), "eager-softmax")
    assert not fired(h200("sweep/sdpa-math_512"), "eager-softmax")  # the math fallback has its own rule


# -- 2. SDPA math fallback -----------------------------------------------------------------------------------

@requires_h200
def test_sdpa_math_fallback_fires() -> None:
    a = h200("sweep/sdpa-math_512")
    (h,) = fired(a, "sdpa-math-fallback")
    raw = sum(e["dur"] for e in _kernels(H200 / "sweep/sdpa-math_512") if "softmax" in e["name"])
    assert h.evidence["softmax_us"] == pytest.approx(raw, abs=0.01)
    assert h.evidence["non_matmul_us"] <= h.evidence["math_path_us"] <= h.evidence["busy_us"] + 1e-6


@requires_h200
def test_sdpa_math_fallback_silent_on_flash_and_eager() -> None:
    assert not fired(h200("sweep/sdpa-flash_512"), "sdpa-math-fallback")
    assert not fired(h200("sweep/eager_512"), "sdpa-math-fallback")  # softmax, but no SDPA op


# -- 3. launch-bound ------------------------------------------------------------------------------------------

@requires_h200
def test_launch_bound_fires_at_512() -> None:
    a = h200("sweep/eager_512")
    (h,) = fired(a, "launch-bound")
    idle = sum(b.idle_us for b in a.blocks)
    span = sum(b.span_us for b in a.blocks)
    assert idle > 0.5 * span
    assert h.saving_us == pytest.approx(idle, abs=0.01) and h.saving_pct == pytest.approx(100 * idle / span, abs=0.1)


@requires_h200
def test_launch_bound_silent_at_4096() -> None:
    a = h200("sweep/eager_4096")
    assert sum(b.idle_us for b in a.blocks) < 0.5 * sum(b.span_us for b in a.blocks)
    assert not fired(a, "launch-bound")


# -- 4. KV-cache concatenation (no real trace has one: built by hand) ----------------------------------------

def _block_with(tmp_path: Path, ops: list[tuple[str, dict, str, float]]) -> Attribution:
    """One annotated block: each op launches one kernel of the given µs; then a 10 µs GEMM."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 200)
    b.op("aten::bmm", 0.2, 0.5)  # host-only QKᵀ and softmax: with the closing mm, the range's attention core
    t, k = 1, 1000
    for name, args, kernel, dur in ops:
        ev = b.op(name, t, 8)
        ev["args"].update(args)
        b.launch(kernel, t + 1, 1, k, dur)
        t, k = t + 10, k + dur
    b.op("aten::_softmax", t, 1)
    t += 2
    b.op("aten::mm", t, 8)["args"].update({"Input type": ["c10::BFloat16", "c10::BFloat16"]})
    b.launch("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)",
             t + 1, 1, k, 10)
    return analyze(b.write(tmp_path / "t.json")).check()


CAT = "void at::native::CatArrayBatchedCopy<at::native::OpaqueType<2u>, unsigned int, 4, 64, 64>(int)"
COPY = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
        "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const>(int)")


def test_kv_cache_cat_fires_on_a_cache_append(tmp_path: Path) -> None:
    a = _block_with(tmp_path, [("aten::cat", {"Input Dims": [[[1, 8, 100, 64], [1, 8, 1, 64]], []],
                                              "Input type": ["TensorList", "Scalar"],
                                              "Concrete Inputs": ["", "-2"]}, CAT, 30)])
    (h,) = fired(a, "kv-cache-cat")
    assert h.saving_us == pytest.approx(30) and h.saving_pct == pytest.approx(75.0)


@requires_real
def test_kv_cache_cat_silent_on_rotary_and_chunk_cats() -> None:
    assert not fired(real(QWEN_H100), "kv-cache-cat")  # rotate_half: cat of halves along the last dim
    assert not fired(h200("sweep/linear_512"), "kv-cache-cat")  # a prefix shift: [1 chunk] + [7 chunks]


# -- 5. materialised causal mask ------------------------------------------------------------------------------

@requires_h200
def test_mask_fires_on_masked_fill() -> None:
    (h,) = fired(h200("sweep/eager_512"), "materialised-mask")
    raw = sum(e["dur"] for e in _kernels(H200 / "sweep/eager_512") if "masked_fill" in e["name"])
    assert h.saving_us == pytest.approx(raw, abs=0.01)


@requires_real
def test_mask_silent_with_is_causal() -> None:
    a = real(QWEN_H100)  # SDPA called with is_causal=True and no mask tensor
    assert not fired(a, "materialised-mask")
    assert not fired(h200("sweep/sdpa-flash_512"), "materialised-mask")


# -- 6. fp32 softmax in a bf16 model --------------------------------------------------------------------------

@pytest.mark.slow
@requires_real
def test_fp32_softmax_fires_on_t5() -> None:
    (h,) = fired(real(FLUX), "fp32-softmax")
    assert h.blocks == ["T5Attention"]
    raw = sum(e["dur"] for e in _kernels(REAL / FLUX) if e["name"].startswith("void (anonymous namespace)::softmax_warp"
                                                                              "_forward<float, float, float"))
    assert h.evidence["fp32_softmax_us"] == pytest.approx(raw, abs=0.01)
    assert h.saving_basis.startswith("estimate")


@requires_h200
def test_fp32_softmax_silent_on_bf16_softmax() -> None:
    assert not fired(h200("sweep/eager_512"), "fp32-softmax")  # softmax<BFloat16, BFloat16, float>
    assert not fired(h200("sweep/sdpa-math_512"), "fp32-softmax")  # fp32 inside SDPA: the fallback rule's


# -- 7. GQA repeat_kv copies (no real trace has one: built by hand) ------------------------------------------

def test_repeat_kv_fires_on_expand_reshape_copies(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 200)
    b.op("aten::bmm", 0.2, 0.5)
    b.op("aten::reshape", 1, 30)
    b.op("aten::clone", 2, 28)["args"].update({"Input Dims": [[1, 2, 4, 100, 64], []],
                                              "Input type": ["c10::BFloat16", "Scalar"]})
    b.op("aten::copy_", 3, 20)["args"].update({"Input Dims": [[1, 2, 4, 100, 64], [1, 2, 4, 100, 64], []]})
    b.launch(COPY, 4, 1, 1000, 20)
    b.op("aten::_softmax", 36, 2)  # host-only: with the mm after it, the range's core (the clone is no product)
    b.op("aten::mm", 40, 8)
    b.launch("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)",
             41, 1, 1020, 20)
    a = analyze(b.write(tmp_path / "t.json")).check()
    (h,) = fired(a, "gqa-repeat-kv")
    assert h.saving_us == pytest.approx(20) and h.saving_pct == pytest.approx(50.0)
    assert not fired(a, "layout-copies")  # the same µs are not advised on twice


@requires_h200
def test_repeat_kv_silent_on_chunked_matmul_copies() -> None:
    assert not fired(h200("sweep/linear_512"), "gqa-repeat-kv")  # 5-D copies inside aten::matmul
    assert not fired(real(QWEN_H100), "gqa-repeat-kv")  # 16 KV heads = 16 query heads


# -- 8. transpose / contiguous copies ------------------------------------------------------------------------

@requires_real
def test_layout_copies_fire_on_qwen() -> None:
    (h,) = fired(real(QWEN_H100), "layout-copies")
    assert h.evidence["share_pct"] >= 15 and h.saving_us <= h.evidence["busy_us"]
    assert "aten::copy_" in h.evidence["launchers"]


@requires_h200
def test_layout_copies_silent_below_threshold() -> None:
    a = h200("sweep/eager_4096")
    assert sum(b.categories["memory"] for b in a.blocks) < 0.15 * a.totals.total_us
    assert not fired(a, "layout-copies")
    assert not fired(h200("sweep/sdpa-flash_512"), "layout-copies")


# -- 9. low TFLOP/s on a compute-bound fused kernel (needs the flops branch's efficiency) --------------------

@requires_h200
def test_low_tflops_fires_on_flash_4096() -> None:
    a = h200("sweep/sdpa-flash_4096")
    (h,) = fired(a, "low-tflops")
    assert h.evidence["roof_pct"] < 40 and h.saving_basis.startswith("upper bound")


@requires_h200
def test_low_tflops_silent_without_fused_kernels() -> None:
    a = h200("sweep/eager_4096")
    assert all(getattr(b, "efficiency_by_category", None) for b in a.blocks)  # the figures exist...
    assert not fired(a, "low-tflops")  # ...but no fused kernel ran


# -- 10. rotary by rotate_half (cat + neg) -------------------------------------------------------------------

@requires_real
def test_rotary_cat_fires_on_qwen() -> None:
    for rel in (QWEN_H100, QWEN_MI300):
        (h,) = fired(real(rel), "rotary-cat")
        assert h.blocks == ["Qwen2Attention"]
        raw = sum(e["dur"] for e in _kernels(REAL / rel) if "CatArrayBatchedCopy" in e["name"] and
                  e["args"].get("External id") is not None)
        assert 0 < h.evidence["cat_us"] <= raw + 0.01


@requires_real
def test_rotary_cat_silent_without_rotary() -> None:
    assert not fired(real(OWL_H100), "rotary-cat")
    assert not fired(h200("sweep/eager_512"), "rotary-cat")


# -- 11. collectives inside attention ------------------------------------------------------------------------

@requires_real
def test_collective_silent_on_b200_tp_whose_all_reduce_follows_the_attention_layer() -> None:
    # vLLM's o_proj all-reduce runs in OAIAttention, after (outside) the innermost block, vLLM's Attention.
    assert not fired(real(B200), "collective-in-block")


def test_collective_fires_on_an_all_reduce_inside_the_block(tmp_path: Path) -> None:
    a = _block_with(tmp_path, [("c10d::allreduce_", {}, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*)", 25)])
    (h,) = fired(a, "collective-in-block")
    assert h.evidence["comm_us"] == pytest.approx(25)


@requires_real
def test_collective_silent_on_single_gpu() -> None:
    assert not fired(real(QWEN_H100), "collective-in-block")


# -- merging, switches, outputs --------------------------------------------------------------------------------

@requires_h200
def test_folder_merges_facts_before_rules(tmp_path: Path) -> None:
    src = next((H200 / "sweep/eager_512").glob("*.json.gz"))
    for r in ("rank0", "rank1"):
        shutil.copy(src, tmp_path / f"{r}.pt.trace.json.gz")
    one = h200("sweep/eager_512")
    for jobs in (1, 2):
        two = analyze(tmp_path, jobs=jobs).check()
        assert [h.rule for h in two.hints] == [h.rule for h in one.hints]
        for h1, h2 in zip(one.hints, two.hints):
            assert h2.saving_us == pytest.approx(2 * h1.saving_us, abs=0.01)
            assert h2.saving_pct == pytest.approx(h1.saving_pct, abs=0.11)


@requires_h200
def test_no_hints_switch_and_outputs() -> None:
    path = H200 / "sweep/eager_512"
    out = run_cli("attribute", path, "--format", "json", check=True).stdout
    hints = json.loads(out)["hints"]
    assert {h["rule"] for h in hints} >= {"eager-softmax", "launch-bound"}
    assert set(hints[0]) == {"rule", "message", "blocks", "evidence", "saving_us", "saving_pct", "saving_basis",
                             "saving_kernels", "overlap", "saving_per_step_us", "steps", "per_step_basis",
                             "step_attention_us", "reaches_latency"}  # issue 24; issue 37: per step, bounded
    assert json.loads(run_cli("attribute", path, "--format", "json", "--no-hints", check=True).stdout)["hints"] == []
    table = run_cli("attribute", path, check=True).stdout
    assert "hints:" in table and "[launch-bound]" in table
    assert "hints:" not in run_cli("attribute", path, "--no-hints", check=True).stdout
    assert analyze(path, hints=False).check().hints == []


# -- hand-built edge cases: no recorded types; an SDPA call given a mask tensor -------------------------------

GEMM_BF16 = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"


@pytest.mark.parametrize(("template", "fires"), [("float, float, float", True),
                                                 ("c10::BFloat16, c10::BFloat16, float", False)])
def test_fp32_softmax_from_the_kernel_template_without_shapes(tmp_path: Path, template: str, fires: bool) -> None:
    kernel = f"void (anonymous namespace)::softmax_warp_forward<{template}, 8, false, false>(float*)"
    a = _block_with(tmp_path, [("aten::_softmax", {}, kernel, 10)])  # no Input type: the template decides
    assert bool(fired(a, "fp32-softmax")) is fires
    if fires:
        (h,) = fired(a, "fp32-softmax")
        assert h.evidence["fp32_softmax_us"] == pytest.approx(10) and h.saving_us == pytest.approx(5)


@pytest.mark.parametrize(("mask", "causal", "fires"), [([1, 1, 64, 64], "False", True), ([], "True", False),
                                                       ([1, 1, 64, 64], "True", False)])
def test_sdpa_given_a_mask_tensor(tmp_path: Path, mask: list, causal: str, fires: bool) -> None:
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)
    b.op("aten::scaled_dot_product_attention", 1, 40)["args"].update({
        "Input Dims": [[1, 8, 64, 64], [1, 8, 64, 64], [1, 8, 64, 64], mask, [], [], [], []],
        "Input type": ["c10::BFloat16"] * 3 + ["c10::BFloat16" if mask else "", "Scalar", "Scalar", "", "Scalar"],
        "Concrete Inputs": ["", "", "", "", "0.", causal, "", "False"]})
    b.op("aten::_scaled_dot_product_efficient_attention", 2, 30)
    b.launch("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t>)",
             3, 1, 1000, 25)
    a = analyze(b.write(tmp_path / "t.json")).check()
    hs = fired(a, "materialised-mask")
    assert bool(hs) is fires
    if fires:
        assert hs[0].evidence["sdpa_with_mask"] == 1 and hs[0].evidence["sdpa_calls"] == 1
        assert hs[0].saving_us is None and hs[0].saving_basis.startswith("none")
    assert not fired(a, "sdpa-math-fallback")  # a backend op ran under SDPA


# -- the facts' invariants (GroupFacts.check) and the tags' JSON --------------------------------------------------

ROW = ("direct_copy_kernel_cuda", "memory", "aten::copy_", HintTag.REPEAT_KV.value)


@pytest.mark.parametrize("broken", [{"sdpa_calls": -1}, {"sdpa_masked": -1}, {"gemm_16bit": -1}, {"gemm_fp32": -1},
                                    {"sdpa_calls": 1, "sdpa_masked": 2}, {"kernels": {ROW: [-1, 5.0]}},
                                    {"kernels": {ROW: [1, -0.5]}}, {"kernels": {ROW: [1, float("nan")]}},
                                    {"kernels": {ROW: [1]}}])
def test_group_facts_check_refuses_impossible_counts(broken: dict) -> None:
    with pytest.raises(InvariantError, match="GroupFacts"):
        GroupFacts(**broken).check()
    with pytest.raises(InvariantError, match="GroupFacts"):  # merging checks the sums too
        merge_facts([{("layer*.attention", "forward"): GroupFacts(**broken)}])


def test_group_facts_check_passes_sound_facts(tmp_path: Path) -> None:
    g = GroupFacts(kernels={ROW: [3, 12.5]}, sdpa_calls=2, sdpa_masked=2, gemm_16bit=1)
    assert g.check() is g
    assert GroupFacts().check().kernels == {}
    a = _block_with(tmp_path, [("aten::masked_fill", {}, COPY, 5)])
    assert a.hint_facts and all(f.check() for f in a.hint_facts.values())


def test_tags_are_their_strings_in_rows_and_json(tmp_path: Path) -> None:
    """Rows carry HintTag members; they must hash, merge and serialise exactly as the plain strings did."""
    a = _block_with(tmp_path, [("aten::masked_fill", {}, COPY, 5)])
    assert a.hint_facts is not None
    (g,) = a.hint_facts.values()
    tags = {row[3] for row in g.kernels}
    assert tags == {"mask", ""} and all(isinstance(t, HintTag) for t in tags)
    plain = {tuple(str(x) for x in row): v for row, v in g.kernels.items()}
    merged = merge_facts([a.hint_facts, {k: GroupFacts(kernels=plain) for k in a.hint_facts}])
    assert merged is not None and len(next(iter(merged.values())).kernels) == len(g.kernels)  # one row per tag
    for t in HintTag:
        assert orjson.dumps({"tag": t, "tags": [t]}) == orjson.dumps({"tag": t.value, "tags": [t.value]})
        assert json.dumps({"tag": t}) == json.dumps({"tag": t.value}) and f"{t}" == str(t) == t.value
    for h in a.hints:
        assert orjson.dumps(h.evidence) == json.dumps(h.evidence, ensure_ascii=False, separators=(",", ":")).encode()


# ---------------------------------------------------------------------------------------------
# Each rule on hand-made block kinds: a Group whose kernel rows, busy, span and idle time are written out, so each
# hint's message, evidence, saving and basis are worked out by hand (the comments give the arithmetic); the
# real-trace tests above check the same rules, these pin the exact text and figures

RULES = {r.name: r for r in HINT_RULES}
SOFTMAX_ROW = ("softmax_k", "softmax", "aten::_softmax", "")
MUL_ROW = ("mul_k", "elementwise", "aten::mul", "")
GEMM_ROW = ("gemm_k", "matmul", "aten::bmm", "")


def group(rows: dict[tuple[str, str, str, str], float], busy: float = 100.0, span: float = 0.0, idle: float = 0.0,
          categories: dict | None = None, kernels: tuple[int, ...] = (1,), label: str = "attn", **facts) -> Group:
    """A block kind with ``rows`` (row -> µs, one kernel each) and the given figures."""
    f = GroupFacts(kernels={k: [1, us] for k, us in rows.items()}, **facts)
    blocks = [SimpleNamespace(kernels=n, efficiency_by_category={}) for n in kernels]
    return Group(label=label, blocks=blocks, facts=f, busy_us=busy, span_us=span, idle_us=idle,  # type: ignore[arg-type]
                 categories=dict(categories or {}))


def check(rule: str, g: Group):
    r = RULES[rule]
    return r.check(g, r)


# -- formatting ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("us,text", [
    (0.0, "0.0 µs"), (999.9, "999.9 µs"), (1000.0, "1.00 ms"), (1234.5, "1.23 ms"), (999_990.0, "999.99 ms"),
    (1e6, "1.00 s"), (2_500_000.0, "2.50 s"),
])
def test_times_read_in_their_unit(us, text):
    assert _t(us) == text


def test_evidence_names_are_the_three_costliest_shortened():
    """Rows of a (1 + 2 µs: 3 in all), b 4, c 3, d 0.5: by µs, then by name for ties: b, a, c; d is dropped. A
    name is cut at 120 characters."""
    rows = [("a", "", "", "", 1, 1.0), ("b", "", "", "", 1, 4.0), ("a", "", "", "", 1, 2.0),
            ("d", "", "", "", 1, 0.5), ("c", "", "", "", 1, 3.0)]
    assert _names(rows) == ["b", "a", "c"]
    assert _names([("x" * 130, "", "", "", 1, 1.0)]) == ["x" * 120]


# -- eager-softmax --------------------------------------------------------------------------------------------------


def test_eager_softmax_message_evidence_and_saving():
    """softmax 20 + mul 10 of 100 µs busy: 30%, exactly the threshold (it fires at >= 30%). No platform: the
    catch-all advice."""
    h = check("eager-softmax", group({SOFTMAX_ROW: 20.0, MUL_ROW: 10.0, GEMM_ROW: 70.0}))
    assert h.message == ("attn: eager softmax + mask/scale kernels are 30.0% of busy time (30.0 µs); use "
                         "F.scaled_dot_product_attention (a fused backend: flash or mem-efficient)")
    assert h.evidence == {"softmax_us": 20.0, "elementwise_us": 10.0, "busy_us": 100.0, "share_pct": 30.0,
                          "kernels": ["softmax_k", "mul_k"], "advice": "any-fused-sdpa"}
    assert (h.saving_us, h.saving_pct) == (30.0, 30.0)
    assert h.saving_basis == ("upper bound: these softmax/mask/scale kernels' time, what removing them saves at most; "
                              "not a prediction of SDPA: its fused kernel also replaces the score/context matmuls and "
                              "copies (not counted here) and costs time the trace cannot tell, so switching can "
                              "remove more busy time than this")
    assert h.counted == {SOFTMAX_ROW: 20.0, MUL_ROW: 10.0}
    assert h.rule == "eager-softmax" and h.blocks == ["attn"]


def test_eager_softmax_advice_follows_the_platform():
    """An H100 (CUDA): the CUDA row of the fused-SDPA advice."""
    g = group({SOFTMAX_ROW: 40.0, GEMM_ROW: 60.0}, platforms=[platform("NVIDIA H100 80GB HBM3", "CUDA 12.4")])
    h = check("eager-softmax", g)
    assert h.message.endswith("(fused: flash/mem-efficient/cuDNN)") and h.evidence["advice"] == "cuda-fused-sdpa"
    assert h.message.startswith("attn: eager softmax + mask/scale kernels are 40.0% of busy time (40.0 µs)")


@pytest.mark.parametrize("rows,categories", [
    ({SOFTMAX_ROW: 19.0, MUL_ROW: 10.0, GEMM_ROW: 71.0}, {}),  # 29%: under the threshold
    ({MUL_ROW: 50.0, GEMM_ROW: 50.0}, {}),  # no softmax time at all
    ({SOFTMAX_ROW: 40.0, GEMM_ROW: 60.0}, {"fused_attention": 1.0}),  # a fused kernel ran: not eager
    ({SOFTMAX_ROW: 40.0, ("sm2", "matmul", "aten::bmm", "sdpa-math"): 60.0}, {}),  # the math path's rule
])
def test_eager_softmax_silent(rows, categories):
    assert check("eager-softmax", group(rows, categories=categories)) is None


# -- sdpa-math-fallback ---------------------------------------------------------------------------------------------

M_SOFT = ("sm", "softmax", "aten::_softmax", "sdpa-math")
M_MM = ("mm", "matmul", "aten::bmm", "sdpa-math")
M_DIV = ("div", "elementwise", "aten::div", "sdpa-math")


def test_sdpa_math_message_evidence_and_saving():
    """Math path: softmax 10 + bmm 30 + div 5 = 45 µs of kernels; the saving is what is not matmul, 10 + 5 = 15."""
    h = check("sdpa-math-fallback", group({M_SOFT: 10.0, M_MM: 30.0, M_DIV: 5.0, GEMM_ROW: 55.0}))
    assert h.message == ("attn: SDPA ran its math fallback (softmax kernels inside the SDPA op, 45.0 µs of "
                         "kernels); make a fused backend eligible (bf16/fp16 inputs, is_causal instead of a mask, "
                         "supported head_dim) or check sdpa_kernel()/torch.backends settings")
    assert h.evidence == {"math_path_us": 45.0, "softmax_us": 10.0, "non_matmul_us": 15.0, "busy_us": 100.0,
                          "kernels": ["sm"], "advice": "any-fused-eligible"}
    assert (h.saving_us, h.saving_pct) == (15.0, 15.0)
    assert h.saving_basis == ("upper bound: the math path's softmax/mask/cast/copy kernels' time, what removing "
                              "them saves at most; a fused kernel also replaces the math path's matmuls (not counted) "
                              "and costs time the trace cannot tell")
    assert h.counted == {M_SOFT: 10.0, M_DIV: 5.0}


def test_sdpa_math_silent_without_a_softmax_in_the_math_path():
    assert check("sdpa-math-fallback", group({M_MM: 30.0, M_DIV: 5.0, SOFTMAX_ROW: 10.0})) is None


# -- launch-bound ---------------------------------------------------------------------------------------------------


def test_launch_bound_eager_blocks():
    """Idle 150 of a 200 µs span (75%), 50 µs busy over 2 + 3 kernels: 10 µs each. The saving is the idle time,
    as a share of the span."""
    h = check("launch-bound", group({}, busy=50.0, span=200.0, idle=150.0, kernels=(2, 3)))
    assert h.message == ("attn: launch-bound, the GPU is idle 75% of the blocks' span (150.0 µs); "
                         "capture CUDA graphs (torch.compile mode='reduce-overhead') or fuse kernels "
                         "(torch.compile), and judge speedups by wall time, not busy time; busy-time savings on "
                         "these blocks will not reach latency")
    assert h.evidence == {"span_us": 200.0, "idle_us": 150.0, "busy_us": 50.0, "idle_pct": 75.0, "kernels": 5,
                          "mean_kernel_us": 10.0}
    assert (h.saving_us, h.saving_pct) == (150.0, 75.0)
    assert h.saving_basis == ("upper bound: the device idle time inside the blocks (wall time, percent of their "
                              "span), what removing every gap saves at most")
    assert h.counted == {}


def test_launch_bound_eager_mode_listed_adds_no_graph_evidence():
    """graph_modes ["eager"] and nothing replayed: the eager advice and no graph figures; no kernels: no mean."""
    h = check("launch-bound", group({}, busy=50.0, span=200.0, idle=150.0, kernels=(0,), graph_modes=["eager"]))
    assert "mean_kernel_us" in h.evidence and h.evidence["mean_kernel_us"] is None
    assert "replayed_pct" not in h.evidence and "graph_modes" not in h.evidence
    assert "capture CUDA graphs (torch.compile mode='reduce-overhead')" in h.message


def test_launch_bound_blocks_that_run_from_a_graph():
    """Replayed 40 of 50 µs busy (80% > half): the gaps are inside the graph."""
    g = group({}, busy=50.0, span=200.0, idle=150.0, replayed_us=40.0, graph_modes=["replay"])
    h = check("launch-bound", g)
    assert h.message == ("attn: launch-bound, the GPU is idle 75% of the blocks' span (150.0 µs); the "
                         "blocks already run from a CUDA/HIP graph, so the gaps are not launch overhead: they are "
                         "dependencies inside the graph (event waits, host callbacks, kernels in series); fuse "
                         "kernels (torch.compile) or overlap independent work on another stream, and judge speedups "
                         "by wall time, not busy time; busy-time savings on these blocks will "
                         "not reach latency")
    assert h.evidence["replayed_pct"] == 80.0 and h.evidence["graph_modes"] == ["replay"]


def test_launch_bound_eager_blocks_beside_graphs():
    """A mixed trace, nothing of these blocks replayed: capture attention too."""
    h = check("launch-bound", group({}, busy=50.0, span=200.0, idle=150.0, graph_modes=["eager", "mixed"]))
    assert h.message == ("attn: launch-bound, the GPU is idle 75% of the blocks' span (150.0 µs); the "
                         "trace replays CUDA/HIP graphs but these blocks run eagerly outside them (as attention does "
                         "between the pieces of a piecewise graph), where each kernel pays its launch; capture "
                         "attention in the graph too (vLLM: a FULL cudagraph mode for decode) or fuse its kernels, "
                         "and judge speedups by wall time, not busy time; busy-time savings on these blocks will "
                         "not reach latency")
    assert h.evidence["replayed_pct"] == 0.0 and h.evidence["graph_modes"] == ["mixed"]


def test_launch_bound_replayed_time_alone_is_graph_evidence():
    """No graph mode recorded but 10 of 50 µs replayed (20%): the figures are shown, the advice stays eager."""
    h = check("launch-bound", group({}, busy=50.0, span=200.0, idle=150.0, replayed_us=10.0))
    assert h.evidence["replayed_pct"] == 20.0 and h.evidence["graph_modes"] == []
    assert "capture CUDA graphs" in h.message


@pytest.mark.parametrize("replayed,fires", [(25.0, False), (26.0, True)])
def test_launch_bound_capture_trace_warm_up_is_no_cost(replayed, fires):
    """A capture trace: its eager gaps are the capture's unless more than half the busy time (of 50) replayed."""
    g = group({}, busy=50.0, span=200.0, idle=150.0, replayed_us=replayed, graph_modes=["capture+replay"])
    assert (check("launch-bound", g) is not None) == fires
    g = group({}, busy=50.0, span=200.0, idle=150.0, replayed_us=replayed, graph_modes=["capture-only"])
    assert (check("launch-bound", g) is not None) == fires


@pytest.mark.parametrize("span,idle", [(200.0, 100.0), (0.0, 0.0)])
def test_launch_bound_silent(span, idle):
    """Idle exactly half the span is not launch-bound (more than half is); no span, no rule."""
    assert check("launch-bound", group({}, busy=100.0, span=span, idle=idle)) is None


# -- kv-cache-cat ---------------------------------------------------------------------------------------------------

KV = ("cat_k", "memory", "aten::cat", "kv-cat")


def test_kv_cat_message_evidence_and_saving():
    """Cat kernels 5 µs of 100 (the 5% threshold itself), over 4 calls."""
    g = group({})
    g.facts.kernels[KV] = [4, 5.0]
    h = check("kv-cache-cat", g)
    assert h.message == ("attn: KV-cache concatenation (torch.cat of past and new K/V) is 5.0% of busy time "
                         "(5.0 µs); use a static, pre-allocated cache (transformers StaticCache, "
                         "index_copy_ of the new tokens)")
    assert h.evidence == {"cat_us": 5.0, "busy_us": 100.0, "share_pct": 5.0, "calls": 4, "kernels": ["cat_k"]}
    assert (h.saving_us, h.saving_pct) == (5.0, 5.0)
    assert h.saving_basis == "upper bound: the cat kernels' time; a static cache still writes the new tokens"
    assert h.counted == {KV: 5.0}


def test_kv_cat_silent_under_the_threshold_or_with_no_busy_time():
    assert check("kv-cache-cat", group({KV: 4.9})) is None
    assert check("kv-cache-cat", group({KV: 4.9}, busy=0.0)) is None  # no busy time: share 0


# -- materialised-mask ----------------------------------------------------------------------------------------------

MASK = ("mf", "elementwise", "aten::masked_fill", "mask")
BASIS_MASK = ("upper bound: the masked_fill kernels' time, what removing them saves at most; what a fused causal "
              "kernel saves besides is not counted")


def test_mask_fills_and_masked_sdpa_calls():
    """masked_fill 3 µs of 100 (3% >= 2%), and 2 of 4 SDPA calls were given a mask."""
    h = check("materialised-mask", group({MASK: 3.0}, sdpa_calls=4, sdpa_masked=2))
    assert h.message == ("attn: a materialised mask: masked_fill kernels take 3.0% of busy time (3.0 µs); "
                         "2 of 4 SDPA calls were passed an attn_mask tensor; if it is causal, call "
                         "F.scaled_dot_product_attention(..., is_causal=True) instead (no mask tensor, and the flash "
                         "backend becomes eligible)")
    assert h.evidence == {"mask_us": 3.0, "busy_us": 100.0, "share_pct": 3.0, "sdpa_calls": 4, "sdpa_with_mask": 2,
                          "kernels": ["mf"]}
    assert (h.saving_us, h.saving_pct, h.saving_basis) == (3.0, 3.0, BASIS_MASK)
    assert h.counted == {MASK: 3.0}


def test_mask_fills_alone():
    """2 µs of 100: the 2% threshold itself; no SDPA call."""
    h = check("materialised-mask", group({MASK: 2.0}))
    assert h.message.startswith("attn: a materialised mask: masked_fill kernels take 2.0% of busy time (2.0 µs); if")
    assert (h.saving_us, h.saving_basis) == (2.0, BASIS_MASK)


def test_mask_tensors_without_fill_kernels_have_no_saving():
    """A fill under the threshold (1 µs, 1%) is not named; the masked SDPA call is, with no figure."""
    h = check("materialised-mask", group({MASK: 1.0}, sdpa_calls=3, sdpa_masked=1))
    assert h.message == ("attn: a materialised mask: 1 of 3 SDPA calls were passed an attn_mask tensor; if it is "
                         "causal, call F.scaled_dot_product_attention(..., is_causal=True) instead (no mask tensor, "
                         "and the flash backend becomes eligible)")
    assert h.evidence == {"mask_us": 1.0, "busy_us": 100.0, "share_pct": 1.0, "sdpa_calls": 3, "sdpa_with_mask": 1,
                          "kernels": ["mf"]}
    assert (h.saving_us, h.saving_pct) == (None, None) and h.counted == {}
    assert h.saving_basis == "none: what a fused causal kernel saves over a masked one is not in the trace"


def test_mask_silent():
    assert check("materialised-mask", group({MASK: 1.0}, sdpa_calls=3)) is None


# -- fp32-softmax ---------------------------------------------------------------------------------------------------

F32 = ("smf", "softmax", "aten::_softmax", "softmax-fp32")
CAST = ("cvt", "memory", "aten::to", "cast")


def test_fp32_softmax_message_evidence_and_estimate():
    """fp32 softmax 10 µs of 100 beside bf16 GEMM ops (2 kernels), casts 4 µs: the estimate is half the softmax
    plus the casts, 5 + 4 = 9 µs."""
    h = check("fp32-softmax", group({F32: 10.0, CAST: 4.0, GEMM_ROW: 86.0}, gemm_16bit=2))
    assert h.message == ("attn: softmax runs in fp32 (10.0 µs, 10.0% of busy time) while the matmuls are "
                         "bf16/fp16; keep the scores in bf16 (softmax accumulates in fp32 inside the kernel) and "
                         "drop the casts around it (4.0 µs)")
    assert h.evidence == {"fp32_softmax_us": 10.0, "cast_us": 4.0, "busy_us": 100.0, "gemm_ops_16bit": 2,
                          "kernels": ["smf"]}
    assert (h.saving_us, h.saving_pct) == (9.0, 9.0)
    assert h.saving_basis == ("estimate: a memory-bound softmax moves half the bytes in bf16 (half its time), plus "
                              "the bf16<->fp32 cast kernels")
    assert h.counted == {F32: 5.0, CAST: 4.0}


@pytest.mark.parametrize("gemm,fires", [
    ("gemm_bf16_tn", True), ("hgemm_f16", True), ("ampere_BFloat16_gemm", True), ("gemm<Half>", True),
    ("Cijk_h_x", True), ("gemm_h", True), ("sgemm_fp32", False), ("hgemm", False),
])
def test_fp32_softmax_reads_16_bit_matmuls_from_kernel_names(gemm, fires):
    """No GEMM op types recorded: a 16-bit matmul kernel's name decides (bf16, f16, BFloat16, Half, _h_, _h$)."""
    g = group({F32: 10.0, (gemm, "matmul", "aten::bmm", ""): 90.0})
    assert (check("fp32-softmax", g) is not None) == fires


def test_fp32_softmax_silent():
    assert check("fp32-softmax", group({F32: 10.0, GEMM_ROW: 90.0})) is None  # no 16-bit matmul
    assert check("fp32-softmax", group({F32: 0.9, GEMM_ROW: 99.1}, gemm_16bit=1)) is None  # 0.9% < 1%
    assert check("fp32-softmax", group({F32: 1.0, GEMM_ROW: 99.0}, gemm_16bit=1)) is not None  # 1%: fires


# -- gqa-repeat-kv --------------------------------------------------------------------------------------------------

RK1 = ("cp", "memory", "aten::copy_", "repeat-kv")
RK2 = ("cp2", "memory", "aten::repeat_interleave", "repeat-kv")


def test_repeat_kv_message_evidence_and_saving():
    """Copies 3 + 2 = 5 µs of 100."""
    h = check("gqa-repeat-kv", group({RK2: 2.0, RK1: 3.0, GEMM_ROW: 95.0}))
    assert h.message == ("attn: GQA repeat_kv copies K/V per query head (5.0 µs, 5.0% of busy time); pass "
                         "enable_gqa=True to F.scaled_dot_product_attention or use a GQA-aware kernel")
    assert h.evidence == {"copy_us": 5.0, "busy_us": 100.0, "share_pct": 5.0,
                          "launchers": ["aten::copy_", "aten::repeat_interleave"], "kernels": ["cp", "cp2"]}
    assert (h.saving_us, h.saving_pct) == (5.0, 5.0)
    assert h.saving_basis == "upper bound: the repeat_kv copy kernels' time"
    assert h.counted == {RK1: 3.0, RK2: 2.0}


def test_repeat_kv_threshold():
    assert check("gqa-repeat-kv", group({RK1: 1.9})) is None
    assert check("gqa-repeat-kv", group({RK1: 2.0})) is not None


# -- layout-copies --------------------------------------------------------------------------------------------------


def test_layout_copies_message_evidence_and_saving():
    """Untagged memory rows whose kernel is a layout copy: direct_copy 10 µs (launched by copy_) and a transpose
    6 µs with no launcher = 16 µs of 100 (16% >= 15%). A tagged copy, a non-layout memory kernel and a layout
    kernel filed under another category are not counted."""
    rows = {("direct_copy_kernel_cuda", "memory", "aten::copy_", ""): 10.0,
            ("batched_transpose", "memory", "", ""): 6.0,
            ("direct_copy_kernel", "memory", "aten::cat", "kv-cat"): 20.0,
            ("fill_kernel", "memory", "aten::fill_", ""): 20.0,
            ("nchwToNhwc", "elementwise", "aten::permute", ""): 20.0}
    h = check("layout-copies", group(rows))
    assert h.message == ("attn: transpose/contiguous copies are 16.0% of busy time (16.0 µs); keep tensors "
                         "in the layout the next op reads (e.g. (B, S, H, D) into flash-attn, no .contiguous() before "
                         "SDPA) or let torch.compile fuse the copies")
    assert h.evidence == {"copy_us": 16.0, "busy_us": 100.0, "share_pct": 16.0, "launchers": ["aten::copy_"],
                          "kernels": ["direct_copy_kernel_cuda", "batched_transpose"]}
    assert (h.saving_us, h.saving_pct) == (16.0, 16.0)
    assert h.saving_basis == "upper bound: the copy kernels' time"


def test_layout_copies_name_five_launchers_at_most():
    """Six launchers a..f of 3 µs each (18%): the first five by name."""
    rows = {(f"direct_copy_kernel{c}", "memory", f"aten::{c}", ""): 3.0 for c in "fedcba"}
    assert check("layout-copies", group(rows)).evidence["launchers"] == [f"aten::{c}" for c in "abcde"]


def test_layout_copies_threshold():
    assert check("layout-copies", group({("Memcpy DtoD", "memory", "", ""): 14.9})) is None
    assert check("layout-copies", group({("Memcpy DtoD", "memory", "", ""): 15.0})) is not None


# -- rotary-cat -----------------------------------------------------------------------------------------------------

HALVES = ("catk", "memory", "aten::cat", "halves-cat")
NEG = ("negk", "elementwise", "aten::neg", "neg")


def test_rotary_message_evidence_and_saving():
    """cat 3 + neg 2 = 5 µs of 100: the 5% threshold itself."""
    h = check("rotary-cat", group({HALVES: 3.0, NEG: 2.0}))
    assert h.message == ("attn: rotary embedding by rotate_half (cat of the two halves + neg) costs 5.0 µs "
                         "(5.0% of busy time) before the muls and adds; use a fused rotary kernel (flash_attn's "
                         "apply_rotary_emb, Liger, or torch.compile)")
    assert h.evidence == {"cat_us": 3.0, "neg_us": 2.0, "busy_us": 100.0, "share_pct": 5.0,
                          "kernels": ["catk", "negk"]}
    assert (h.saving_us, h.saving_pct) == (5.0, 5.0)
    assert h.saving_basis == ("upper bound: the cat and neg kernels' time; a fused kernel still reads and writes q "
                              "and k")
    assert h.counted == {HALVES: 3.0, NEG: 2.0}


def test_rotary_needs_both_halves_and_neg_over_the_threshold():
    assert check("rotary-cat", group({HALVES: 30.0})) is None
    assert check("rotary-cat", group({NEG: 30.0})) is None
    assert check("rotary-cat", group({HALVES: 2.5, NEG: 2.4})) is None  # 4.9%


# -- collective-in-block --------------------------------------------------------------------------------------------

COMM = ("nccl_allreduce", "other", "", "comm")


def test_collective_message_evidence_and_saving():
    """An all-reduce of 10 µs in 100: the 10% threshold itself."""
    h = check("collective-in-block", group({COMM: 10.0}))
    assert h.message == ("attn: collectives run inside the attention block (10.0 µs, 10.0% of busy time: "
                         "tensor-parallel all-reduce?); overlap them with compute (async TP) or check the TP degree "
                         "for this size")
    assert h.evidence == {"comm_us": 10.0, "busy_us": 100.0, "share_pct": 10.0, "kernels": ["nccl_allreduce"]}
    assert (h.saving_us, h.saving_pct) == (10.0, 10.0)
    assert h.saving_basis == "upper bound: the collective kernels' time, if fully overlapped"
    assert check("collective-in-block", group({COMM: 9.9})) is None


# -- evaluate: groups, order, overlaps ------------------------------------------------------------------------------


def _block(kind: str, phase: str, busy: float, span: float, idle: float, cats: dict, kernels: int = 1,
           step: int | None = None):
    return SimpleNamespace(kind=kind, phase=phase, total_us=busy, span_us=span, idle_us=idle, categories=cats,
                           kernels=kernels, efficiency_by_category={}, step=step)


def test_evaluate_groups_blocks_by_kind_and_phase():
    """Two forward blocks of kind "a" (busy 60 + 40, span 300 + 100, idle 240 + 60: 300 of 400, launch-bound) and a
    backward block "a" (busy 500, span 510, idle 10). The forward group's softmax rows make eager-softmax fire;
    labels carry the phase when it is not forward; rules come in table order (launch-bound first), groups by busy
    time. The launch-bound forward group's busy-time saving says it will not reach latency; the backward one's can."""
    soft = {SOFTMAX_ROW: [2, 50.0], GEMM_ROW: [2, 50.0]}
    facts = {("a", "forward"): GroupFacts(kernels=dict(soft)),
             ("a", "backward"): GroupFacts(kernels={SOFTMAX_ROW: [1, 400.0], GEMM_ROW: [1, 100.0]})}
    blocks = [_block("a", "forward", 60.0, 300.0, 240.0, {"softmax": 30.0, "matmul": 30.0}, 2),
              _block("a", "forward", 40.0, 100.0, 60.0, {"softmax": 20.0, "matmul": 20.0}, 2),
              _block("a", "backward", 500.0, 510.0, 10.0, {"softmax": 400.0, "matmul": 100.0})]
    hints = evaluate(facts, blocks)  # type: ignore[arg-type]
    assert [(h.rule, h.blocks) for h in hints] == [("launch-bound", ["a"]), ("eager-softmax", ["a (backward)"]),
                                                  ("eager-softmax", ["a"])]
    # backward: softmax 400 of 500 = 80%; forward: 50 of 100 = 50%; forward idle 300 of span 400 = 75%, over
    # 2 + 2 kernels of 100 µs busy: 25 µs each.
    assert [h.evidence.get("share_pct") for h in hints[1:]] == [80.0, 50.0]
    assert hints[0].evidence["idle_pct"] == 75.0 and hints[0].evidence["mean_kernel_us"] == 25.0
    assert hints[0].evidence["span_us"] == 400.0 and hints[0].evidence["busy_us"] == 100.0
    assert [h.reaches_latency for h in hints] == [True, True, False]
    assert hints[2].message.endswith("busy time only: these blocks are launch-bound, so this saving will not reach "
                                     "latency") and "latency" not in hints[1].message
    assert evaluate(None, blocks) == []  # type: ignore[arg-type]


def test_evaluate_groups_of_equal_busy_time_by_label():
    """Kinds "b" and "a", 100 µs busy each: "a" first."""
    facts = {(k, "forward"): GroupFacts(kernels={SOFTMAX_ROW: [1, 100.0]}) for k in "ab"}
    blocks = [_block(k, "forward", 100.0, 100.0, 0.0, {"softmax": 100.0}) for k in "ba"]
    assert [h.blocks for h in evaluate(facts, blocks)] == [["a"], ["b"]]  # type: ignore[arg-type]


def test_overlapping_savings_are_linked_with_their_union():
    """eager-softmax counts softmax 30 + mask-fill 10 (elementwise); materialised-mask counts the same fill 10:
    sum 50, union 40, 10 counted twice, of 100 µs busy (union 40%). A third hint on other rows stays apart."""
    rows = {SOFTMAX_ROW: [1, 30.0], MASK: [1, 10.0], GEMM_ROW: [1, 50.0], COMM: [1, 10.0]}
    facts = {("a", "forward"): GroupFacts(kernels=rows)}
    blocks = [_block("a", "forward", 100.0, 100.0, 0.0, {"softmax": 30.0, "elementwise": 10.0, "matmul": 50.0,
                                                         "other": 10.0})]
    hints = {h.rule: h for h in evaluate(facts, blocks)}  # type: ignore[arg-type]
    assert set(hints) == {"eager-softmax", "materialised-mask", "collective-in-block"}
    ov = hints["eager-softmax"].overlap
    assert ov is not None and ov is hints["materialised-mask"].overlap
    assert ov.rules == ["eager-softmax", "materialised-mask"] and ov.blocks == ["a"]
    assert (ov.sum_us, ov.union_us, ov.double_counted_us, ov.busy_us, ov.union_pct) == (50.0, 40.0, 10.0, 100.0, 40.0)
    assert ov.shared_kernels == ["mf"]
    assert hints["collective-in-block"].overlap is None


def test_estimates_overlap_by_the_part_they_claim():
    """fp32-softmax claims half of the 20 µs fp32 softmax row (10); eager-softmax all of it (20) and of the 10 µs
    mul: sum 40, union 30 (the row once, at its most: 20, plus the mul 10), 10 twice."""
    rows = {F32: [1, 20.0], MUL_ROW: [1, 10.0], ("gemm_bf16", "matmul", "aten::bmm", ""): [1, 70.0]}
    facts = {("a", "forward"): GroupFacts(kernels=rows)}
    blocks = [_block("a", "forward", 100.0, 100.0, 0.0, {"softmax": 20.0, "elementwise": 10.0, "matmul": 70.0})]
    hints = {h.rule: h for h in evaluate(facts, blocks)}  # type: ignore[arg-type]
    assert set(hints) == {"eager-softmax", "fp32-softmax"}
    ov = hints["fp32-softmax"].overlap
    assert ov is not None and ov.rules == ["eager-softmax", "fp32-softmax"]
    assert (ov.sum_us, ov.union_us, ov.double_counted_us, ov.union_pct) == (40.0, 30.0, 10.0, 30.0)
    assert ov.shared_kernels == ["smf"]


# -- low-tflops -----------------------------------------------------------------------------------------------------

FWD = ("flash_fwd", "fused_attention", "aten::_flash_attention_forward", "")
BWD = ("flash_bwd", "fused_attention", "aten::_flash_attention_backward", "")


def _eff(flops: float, time_ns: int, compute_s: float | None, memory_s: float | None, ops: int = 2):
    from tracekit.results.efficiency import Efficiency

    return Efficiency(flops=flops, bytes=1e9, time_ns=time_ns, compute_s=compute_s, memory_s=memory_s, ops=ops,
                      dtypes=("bf16",) if compute_s is not None else (),
                      reason=None if compute_s is not None else "no peak")


def _flash_group(effs, rows=None, busy=20000.0, **facts) -> Group:
    g = group(rows if rows is not None else {FWD: 6000.0, BWD: 4000.0}, busy=busy, **facts)
    g.blocks = [SimpleNamespace(kernels=1, efficiency_by_category={} if e is None else {"fused_attention": e})
                for e in effs]  # type: ignore[misc]
    return g


def test_low_tflops_message_evidence_and_saving():
    """Two blocks' fused kernels: 6e11 + 4e11 FLOPs in 6 + 4 ms, 1.2 + 0.8 ms at the compute peak (0.3 + 0.2 ms
    at the memory peak: compute-bound), and a block with none. Summed: 1e12 FLOPs in 10 ms = 100 TFLOP/s; peak
    1e12 / 2 ms = 500 TFLOP/s; roof 2 / 10 ms = 20% (< 40%). Saving: 10000 - 2000 µs = 8000 µs, split over the
    rows by their time (6000 : 4000 → 4800, 3200), 40% of 20000 µs busy."""
    g = _flash_group([_eff(6e11, 6_000_000, 0.0012, 0.0003), _eff(4e11, 4_000_000, 0.0008, 0.0002), None])
    h = check("low-tflops", g)
    assert h.message == ("attn: the fused attention kernel is compute-bound but runs at 100 TFLOP/s, 20% of the "
                         "device's bf16 peak (500.0 TFLOP/s); for this GPU try the fastest fused attention kernel "
                         "the GPU's vendor ships for it; or larger head_dim/batch per launch, or check the dtype")
    assert h.evidence == {"fused_attention_us": 10000.0, "flops": 1e12, "tflops_per_s": 100.0,
                          "peak_tflops_per_s": 500.0, "peak_dtypes": ["bf16"], "roof_pct": 20.0,
                          "kernels": ["flash_fwd", "flash_bwd"], "advice": "any-faster"}
    assert (h.saving_us, h.saving_pct) == (8000.0, 40.0)
    assert h.saving_basis == "upper bound: the fused kernels' time above what the compute roof allows"
    assert h.counted == {FWD: pytest.approx(4800.0), BWD: pytest.approx(3200.0)}


def test_low_tflops_without_fused_rows_has_no_saving():
    """The same figures, but no fused-attention rows in the facts: the hint stands, with no figure."""
    h = check("low-tflops", _flash_group([_eff(1e12, 10_000_000, 0.002, 0.0005)], rows={GEMM_ROW: 10.0}))
    assert (h.saving_us, h.saving_pct, h.counted) == (None, None, {})
    assert h.saving_basis == "none: the fused kernels' rows are not in the facts"
    assert h.evidence["kernels"] == []


def test_low_tflops_saving_is_never_negative():
    """A kernel faster than its roof (clock skew in the trace): 2 ms at the roof, measured 1 ms; the roof is 200%,
    so no hint; and at 39.99% a hint whose saving is the time above the roof."""
    assert check("low-tflops", _flash_group([_eff(1e12, 1_000_000, 0.002, 0.0005)])) is None
    h = check("low-tflops", _flash_group([_eff(1e12, 5_001_000, 0.002, 0.0005)]))
    assert h.evidence["roof_pct"] == 39.99 and h.saving_us == pytest.approx(3001.0)


@pytest.mark.parametrize("eff", [
    _eff(1e12, 5_000_000, 0.002, 0.0005),  # roof exactly 40%: not below it
    _eff(1e12, 10_000_000, 0.002, 0.003),  # memory-bound
    _eff(1e12, 0, 0.002, 0.0005),  # no time
    _eff(1e12, 10_000_000, None, 0.0005),  # no compute peak
    None,  # no fused kernels
])
def test_low_tflops_silent(eff):
    assert check("low-tflops", _flash_group([eff])) is None


def test_low_tflops_advice_follows_the_gpu_and_what_ran():
    """An H100: Hopper's advice, or FA3 alone once cuDNN's kernel already ran there."""
    hopper = [platform("NVIDIA H100 80GB HBM3", "CUDA 12.4")]
    g = _flash_group([_eff(1e12, 10_000_000, 0.002, 0.0005)], platforms=hopper)
    h = check("low-tflops", g)
    assert h.evidence["advice"] == "hopper-faster" and "try FA3 (flash-attn's hopper/ build for sm90) or cuDNN SDPA;" \
        in h.message
    g = _flash_group([_eff(1e12, 10_000_000, 0.002, 0.0005)], platforms=hopper,
                     rows={("cudnn_sm90_fprop", "fused_attention", "aten::_cudnn_attention_forward", ""): 10.0})
    assert check("low-tflops", g).evidence["advice"] == "hopper-after-cudnn"


# -- advice ---------------------------------------------------------------------------------------------------------

H100 = platform("NVIDIA H100 80GB HBM3", "CUDA 12.4")
A100 = platform("NVIDIA A100-SXM4-80GB", "CUDA 12.4")
MI300 = platform("AMD Instinct MI300X", "HIP 6.4")
MI250 = platform("AMD Instinct MI250X", "HIP 6.4")


@pytest.mark.parametrize("platforms,kernels,want", [
    ([H100], [], "hopper-faster"),
    ([H100, H100], ["x", "cudnn_fwd"], "hopper-after-cudnn"),  # some kernel ran cuDNN's
    ([H100, A100], [], "cuda-faster"),  # one vendor, two archs: no arch row fits all
    ([A100], [], "ampere-ada-faster"),
    ([MI300], [], "rocm-cdna3-faster"),
    ([MI300], ["aiter::fmha_fwd_hd128"], "rocm-faster"),  # aiter ran already
    ([MI250], [], "rocm-faster"),
    ([H100, MI300], [], "any-faster"),  # two vendors
    ([], [], "any-faster"),  # none known
])
def test_faster_kernel_advice_rows(platforms, kernels, want):
    from tracekit.analysis.hints.advice import AdviceTopic, advise

    assert advise(AdviceTopic.FASTER_KERNEL, platforms, kernels).name == want


@pytest.mark.parametrize("platforms,sdpa,eligible", [
    ([H100], "cuda-fused-sdpa", "any-fused-eligible"),
    ([platform("Tesla V100-SXM2-32GB", None)], "volta-fused-sdpa", "any-fused-eligible"),
    ([MI300, MI250], "rocm-fused-sdpa", "rocm-fused-eligible"),
    ([MI300, H100], "any-fused-sdpa", "any-fused-eligible"),
])
def test_fused_sdpa_and_eligible_advice_rows(platforms, sdpa, eligible):
    from tracekit.analysis.hints.advice import AdviceTopic, advise

    assert advise(AdviceTopic.FUSED_SDPA, platforms).name == sdpa
    assert advise(AdviceTopic.FUSED_ELIGIBLE, platforms).name == eligible


# ---------------------------------------------------------------------------------------------
# repeat_kv outside and inside a product, and the cat tag of recorded inputs, on traces built by hand

# An elementwise copy kernel (the layout copy a clone launches) and a bf16 GEMM kernel.
GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
FIVE_D = [1, 2, 4, 100, 64]  # (B, H_kv, n_rep = 4, S, D): repeat_kv's expand before the reshape


def _repeat_kv_trace(tmp_path: Path, wrapper: str | None) -> list:
    """test_hints' repeat_kv trace (reshape → clone of a 5-D expand → copy_, one 20 µs copy kernel), with the
    reshape optionally inside ``wrapper``: the gqa-repeat-kv hints it fires."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 200)
    b.op("aten::bmm", 0.2, 0.5)
    if wrapper is not None:
        b.op(wrapper, 0.8, 33)
    b.op("aten::reshape", 1, 30)
    b.op("aten::clone", 2, 28)["args"].update({"Input Dims": [FIVE_D, []], "Input type": ["c10::BFloat16", "Scalar"]})
    b.op("aten::copy_", 3, 20)["args"].update({"Input Dims": [FIVE_D, FIVE_D, []]})
    b.launch(COPY, 4, 1, 1000, 20)
    b.op("aten::_softmax", 36, 2)
    b.op("aten::mm", 40, 8)
    b.launch(GEMM, 41, 1, 1020, 20)
    a = analyze(b.write(tmp_path / "t.json")).check()
    return [h for h in a.hints if h.rule == "gqa-repeat-kv"]


def test_repeat_kv_fires_outside_any_product(tmp_path):
    """The control: the bare reshape → clone → copy_ fires (one hint, the 20 µs copy)."""
    (h,) = _repeat_kv_trace(tmp_path, None)
    assert h.saving_us == pytest.approx(20)


@pytest.mark.parametrize("wrapper", ["aten::matmul",  # a GEMM op: a chunked product reshapes its own operands
                                     "aten::_scaled_dot_product_efficient_attention"])  # a fused attention op
def test_repeat_kv_is_silent_when_the_reshape_is_inside_a_product(tmp_path, wrapper):
    """The same copies with the reshape's parent a GEMM or an attention op: that op reshaping its own operands,
    not HF's repeat_kv, so no hint (hints._is_matmul_op: a GEMM *or* a fused attention op)."""
    assert _repeat_kv_trace(tmp_path, wrapper) == []


# -- hints._cat_tag on recorded inputs (a stub for _Inputs: the cat's dims and concrete inputs) ------------------

class _Stub:
    def __init__(self, dims, conc):
        self._d, self._c = dims, conc

    def dims(self, i):
        return self._d

    def concrete(self, i):
        return self._c


PAST, NEW = [1, 2, 10, 64], [1, 2, 1, 64]  # (B, H, S, D): 10 cached tokens, 1 new


@pytest.mark.parametrize("dims,conc,want", [
    ([[PAST, NEW]], ["", "2"], "kv-cat"),  # along S: a cache append (past 10 >= new 1 > 0)
    ([[PAST, NEW]], ["", "-2"], "kv-cat"),  # -2 % 4 = 2: the same axis
    ([[PAST, PAST]], ["", "2"], "kv-cat"),  # equal lengths along S: still an append (>=), not halves
    ([[NEW, PAST]], ["", "2"], ""),  # the first part shorter than the second: no growing cache
    ([[PAST, [1, 2, 0, 64]]], ["", "2"], ""),  # nothing new (S = 0)
    ([[PAST, NEW]], ["", "0"], ""),  # along the batch axis
    ([[PAST, NEW]], ["", "3"], ""),  # along D with unequal parts
    ([[[1, 2, 10, 32], [1, 2, 10, 32]]], ["", "-1"], "halves-cat"),  # two equal halves along D: rotate_half
    ([[PAST, NEW, NEW]], ["", "2"], ""),  # three parts: not [past, new]
    ([[PAST, [1, 2, 64]]], ["", "2"], ""),  # a 3-D part
    ([[PAST, None]], ["", "2"], ""),  # a part that is not a shape
    ([[None, NEW]], ["", "2"], ""),
    ([{"a": 1, "b": 2}], ["", "2"], ""),  # the tensor list recorded as an object
    ([[PAST, NEW]], ["x"], ""),  # no dim argument recorded: the default, axis 0
])
def test_cat_tag(dims, conc, want):
    from tracekit.analysis.hints.facts import _cat_tag

    assert _cat_tag(_Stub(dims, conc), 0) == want  # HintTag values; UNTAGGED is ""


# ---------------------------------------------------------------------------------------------
# Hint facts, shares, advice and overlaps on hand-built traces and groups

BF = "c10::BFloat16"


@requires_real
@pytest.mark.parametrize("rel", ["tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                                 "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"])
def test_a_hints_share_in_its_evidence_is_the_share_its_message_prints(rel: str) -> None:
    """Qwen's rotate_half rotary (cat + neg kernels) fires rotary-cat. Its message prints the share of busy time to
    one decimal, and the evidence's ``share_pct`` is that same figure (rounded once, to one decimal), for each
    hint that states a share (layout-copies fires too on the H100 trace); the rotary share is also
    (cat + neg) / busy from the evidence's own µs, within rounding."""
    import re
    res = analyze(REAL / rel).check()
    rotary = [h for h in res.hints if h.rule == "rotary-cat"]
    assert rotary
    for h in res.hints:
        m = re.search(r"([0-9]+(?:\.[0-9]+)?)% of busy time", h.message)
        if m is None or "share_pct" not in h.evidence:
            continue
        assert h.evidence["share_pct"] == float(m.group(1)), (h.rule, h.message)
    for h in rotary:
        e = h.evidence
        assert abs(100 * (e["cat_us"] + e["neg_us"]) / e["busy_us"] - e["share_pct"]) <= 0.05 + 1e-3


def test_fp32_gemm_kernels_are_counted_one_by_one(tmp_path: Path) -> None:
    """Two GEMM kernels launched by fp32 GEMM ops in the block: the block kind's facts count 2, none 16-bit."""
    b = TraceBuilder()
    two_fp32_products(b)
    res = attribute_built(tmp_path, b)
    [facts] = res.hint_facts.values()
    assert (facts.gemm_fp32, facts.gemm_16bit) == (2, 0)


@pytest.mark.parametrize("shape", [[1, 8, 100, 64], [8, 100, 64]])
def test_repeat_kv_needs_a_five_d_expand(tmp_path: Path, shape: list[int]) -> None:
    """The same copies of a 4-D or 3-D tensor whose third dim is > 1: a plain contiguous copy, not repeat_kv's
    (B, H_kv, n_rep, S, D) expand, so no gqa-repeat-kv hint. (A 5-D clone elsewhere in the file, launching
    nothing, lets the walk run at all: without one it is skipped.)"""
    b = TraceBuilder()
    repeat_kv_block(b, shape)
    b.op("aten::clone", 300, 5)["args"].update({"Input Dims": [[1, 2, 4, 100, 64], []], "Input type": [BF, "Scalar"]})
    assert [h.rule for h in attribute_built(tmp_path, b).hints if h.rule == "gqa-repeat-kv"] == []


@pytest.mark.parametrize(("replayed", "graphed"), [(50.0, False), (50.5, True)])
def test_launch_advice_says_already_graphed_past_half_replayed(replayed: float, graphed: bool) -> None:
    """The launch-bound hint's advice: when more than half the blocks' busy time ran from graph replays, the gaps
    are not launch overhead; exactly half is not more than half."""
    from types import SimpleNamespace
    from tracekit.analysis.hints.rules import _launch_advice
    g = SimpleNamespace(facts=SimpleNamespace(graph_modes=["eager"], replayed_us=replayed), share=lambda us: us / 100)
    assert _launch_advice(g).startswith("the blocks already run from a CUDA/HIP graph") == graphed


def test_shared_kernels_with_equal_double_counts_are_listed_by_name() -> None:
    """Two hints both count kernels "b" and "a" (5 µs each): each is double-counted 5 µs, a tie broken by name."""
    from types import SimpleNamespace
    from tracekit.analysis.hints.rules import _overlap
    counted = {("b", "memory"): 5.0, ("a", "memory"): 5.0}
    members = [SimpleNamespace(rule="r1", counted=counted), SimpleNamespace(rule="r2", counted=counted)]
    o = _overlap(members, "layer", 100.0)
    assert o.shared_kernels == ["a", "b"] and o.double_counted_us == 10.0
    # unequal: "a" double-counted 5 µs, "c" 8 µs: the most double-counted first
    more = {("a", "memory"): 5.0, ("c", "memory"): 8.0}
    o = _overlap([SimpleNamespace(rule="r1", counted=more), SimpleNamespace(rule="r2", counted=more)], "layer", 100.0)
    assert o.shared_kernels == ["c", "a"]


def test_the_launch_bound_hint_gives_the_mean_kernel_time_to_the_ns(tmp_path: Path) -> None:
    """tests/support/builders.py's attention_block: 6 device events, 31 µs busy in a 136 µs span (launch-bound).
    The hint's mean kernel time is 31/6 = 5.1666… µs, given to the ns: 5.167."""
    from support.builders import attention_block
    b = TraceBuilder()
    attention_block(b, 10)
    [h] = [h for h in attribute_built(tmp_path, b).hints if h.rule == "launch-bound"]
    assert h.evidence["mean_kernel_us"] == 5.167


def test_input_dims_that_are_not_a_list_are_none_for_the_hints() -> None:
    """An SDPA op whose Input Dims is the JSON string "abcdef" (a damaged record): no dims, so no attn_mask tensor is
    seen. Taking the string as the dims list would read its fourth character as a mask and count a masked call."""
    import orjson
    from types import SimpleNamespace
    from tracekit.analysis.hints.facts import _Inputs, _sdpa_masked
    from tracekit.model import OpInputs
    rec = OpInputs(dims=orjson.dumps("abcdef"), types=orjson.dumps([BF] * 4), concrete=b"")
    inp = _Inputs(SimpleNamespace(op_inputs={0: rec}))
    assert inp.dims(0) is None and _sdpa_masked(inp, 0) is False


# ---------------------------------------------------------------------------------------------
# Concrete inputs read for the cat axis, and none when they are not a list

def _inputs(concrete: bytes) -> _Inputs:
    rec = OpInputs(dims=orjson.dumps([[[1, 8, 16, 64], [1, 8, 1, 64]], []]),
                   types=orjson.dumps(["TensorList", "Scalar"]), concrete=concrete)
    return _Inputs(SimpleNamespace(op_inputs={0: rec}))


def test_concrete_inputs_that_are_a_list_give_the_cat_axis():
    """The control: cat([past (16 tokens), new (1)], dim=2) of (B, H, S, D) tensors is a KV-cache append."""
    inp = _inputs(orjson.dumps(["", "2"]))
    assert inp.concrete(0) == ["", "2"]
    assert _cat_tag(inp, 0) == HintTag.KV_CAT


def test_concrete_inputs_that_are_not_a_list_are_none():
    """A JSON string "x2" in place of the list: no concrete inputs, so the cat's axis is the default 0 and the cat is
    untagged. Taking the string as the list would read its second character, "2", as the axis: a KV append."""
    inp = _inputs(orjson.dumps("x2"))
    assert inp.concrete(0) is None
    assert _cat_tag(inp, 0) == HintTag.UNTAGGED


# -- savings per step, and bounded (issue 37) ------------------------------------------------------------------------
# Hand-built steps whose kernel times are written out: the per-step saving, its median and the bound (one step's
# attention busy time) are worked out by hand, and each step's own kernels decide its part (not a spread).

BF16_SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 9, false, false>"
MUL_KERNEL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
              "at::native::binary_internal::MulFunctor<float> > >(int, float)")
BF16_GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"


def _tight_block(b: TraceBuilder, t0: float, soft_us: float, mul_us: float = 10.0) -> float:
    """An eager block (bmm → softmax → mul → bmm) whose kernels run back to back from t0 + 5: busy 20 + soft + mul,
    idle 5 of its span (not launch-bound). Returns the device end."""
    b.annotation("layer0.attention", t0, 4)
    k = t0 + 5
    for i, (op, kernel, dur) in enumerate((("aten::bmm", BF16_GEMM, 10.0), ("aten::_softmax", BF16_SOFTMAX, soft_us),
                                           ("aten::mul", MUL_KERNEL, mul_us), ("aten::bmm", BF16_GEMM, 10.0))):
        b.op(op, t0 + 0.1 + 0.9 * i, 0.8)
        b.launch(kernel, t0 + 0.2 + 0.9 * i, 0.5, k, dur)
        k += dur
    return k


def _steps_of_softmax(tmp_path: Path, softs: tuple[float, ...]) -> Attribution:
    """One tight block per ProfilerStep, the softmax of step i taking ``softs[i]`` µs (mul 10 µs each)."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    t = 0.0
    for i, soft in enumerate(softs):
        b.annotation(f"ProfilerStep#{i + 1}", t, 200)
        _tight_block(b, t + 1, soft)
        t += 250
    return attribute_built(tmp_path, b)


def test_eager_softmax_saving_per_step_is_the_median_steps_kernels(tmp_path: Path) -> None:
    """Softmax 30, 60, 40 µs + mul 10 in three steps: the counted kernels take 40, 70, 50 µs per step, median 50;
    160 over 3 steps. A step's attention busy time is 60, 90, 70: median 70, the bound. Spreading the total by each
    step's busy share would give 160 * 70 / 220 = 50.9: the figure is each step's own kernels."""
    a = _steps_of_softmax(tmp_path, (30.0, 60.0, 40.0))
    (h,) = fired(a, "eager-softmax")
    assert (h.saving_us, h.steps, h.per_step_basis) == (160.0, 3, "median of 3 steps")
    assert h.saving_per_step_us == pytest.approx(50.0, abs=0.001)
    assert h.step_attention_us == pytest.approx(70.0, abs=0.001) and h.reaches_latency is True
    assert "(50.0 µs per step)" in h.message


def test_a_per_step_saving_never_exceeds_the_steps_attention_time(tmp_path: Path) -> None:
    """One heavy step (softmax 500) beside two light ones (5, 5): the total (540 over 3 steps, 180 a step on
    average) is more than the median step holds (20 + 5 + 10 = 35 µs); the per-step saving is the median step's
    own 15 µs, within its 35."""
    a = _steps_of_softmax(tmp_path, (5.0, 500.0, 5.0))
    (h,) = fired(a, "eager-softmax")
    assert h.saving_us == pytest.approx(540.0) and h.saving_us / h.steps > h.step_attention_us
    assert h.saving_per_step_us == pytest.approx(15.0, abs=0.001) and h.step_attention_us == pytest.approx(35.0)


def test_launch_bound_leads_and_busy_savings_say_they_do_not_reach_latency(tmp_path: Path) -> None:
    """support.builders.steps_trace: steps of 1, 3 and 2 launch-bound blocks (busy 31, span 136, idle 105 each).
    launch-bound comes first: idle per step 105, 315, 210 (median 210) within the median step's span 272. The fp32
    softmax's saving (5 / 2 µs a block: 2.5, 7.5, 5.0, median 5.0, within the median step's busy 62) is busy time
    on launch-bound blocks: reaches_latency false, and the text says so after the launch-bound hint."""
    from support.builders import steps_trace

    from tracekit.renderers import JSONRenderer, TerminalRenderer

    path, _ = steps_trace(tmp_path / "t.json")
    a = analyze(path).check()
    lb, fp = a.hints[0], fired(a, "fp32-softmax")[0]
    assert lb.rule == "launch-bound" and lb.reaches_latency is True
    assert (lb.saving_per_step_us, lb.step_attention_us, lb.saving_us) == (210.0, 272.0, 630.0)
    assert (fp.saving_per_step_us, fp.step_attention_us, fp.saving_us) == (5.0, 62.0, 15.0)
    assert fp.reaches_latency is False and fp.message.endswith("so this saving will not reach latency")
    text = TerminalRenderer(width=200).render(a)
    assert text.index("[launch-bound]") < text.index("[fp32-softmax]")
    assert "saving: about 5.0 µs per step (median of 3 steps; a step's attention busy time is 62.0 µs); will not " \
           "reach latency (launch-bound); 15.0 µs over 3 steps" in text
    js = json.loads(JSONRenderer().render(a))["hints"]
    assert [(h["rule"], h["reaches_latency"], h["saving_per_step_us"]) for h in js[:2]] == [
        ("launch-bound", True, 210.0), ("fp32-softmax", False, 5.0)]


def _walk_steps(path: Path, pattern: str) -> tuple[list[float], list[float]]:
    """Per ProfilerStep (its GPU-side window in the raw JSON), the summed durations of the kernels whose names match
    ``pattern``, and of every device event: tracekit's reader, blocks and categories play no part."""
    events = read_events(path)
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in events
               if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("ProfilerStep#")]
    dev = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    hit = [sum(e["dur"] for e in dev if a <= e["ts"] < b and re.search(pattern, e["name"])) for a, b in windows]
    return hit, [sum(e["dur"] for e in dev if a <= e["ts"] < b) for a, b in windows]


@requires_h200
@pytest.mark.parametrize("run", ["eager_4096", "eager_512"])
def test_eager_sweep_saving_per_step_is_the_softmax_kernels_in_each_step(run: str) -> None:
    """The eager-softmax hint's per-step saving is the median ProfilerStep's softmax + masked_fill + mul (the scale)
    kernels, walked in the raw JSON; its total is theirs over both steps; the bound is within a step's device time.
    (eager_4096: 31.68 ms per step, where the total 63.35 ms once read as more than a 44.6 ms forward.)"""
    path = next((H200 / "sweep" / run).glob("*.json.gz"))
    hit, whole = _walk_steps(path, r"[Ss]oft[Mm]ax|masked_fill|MulFunctor")
    (h,) = fired(h200(f"sweep/{run}"), "eager-softmax")
    assert len(hit) == h.steps == 2 and h.per_step_basis == "median of 2 steps"
    assert h.saving_per_step_us == pytest.approx(statistics.median(hit), abs=0.01)
    assert h.saving_us == pytest.approx(sum(hit), abs=0.01)
    assert h.saving_per_step_us <= h.step_attention_us <= statistics.median(whole)
    assert "matmuls" in h.saving_basis and "not a prediction" in h.saving_basis


@requires_h200
def test_eager_512_busy_savings_follow_the_launch_bound_hint() -> None:
    a = h200("sweep/eager_512")
    rules = [h.rule for h in a.hints]
    assert rules[0] == "launch-bound" and {"eager-softmax", "layout-copies"} <= set(rules[1:])
    assert all(h.reaches_latency is False and h.message.endswith("will not reach latency") for h in a.hints[1:])


# -- the eager-softmax hint's line from tracekit whatif (issue 39) ---------------------------------------------------
@requires_h200
def test_eager_softmax_names_the_fused_kernel_time_per_step_on_a_calibrated_device():
    """On the H200 sweep's eager_1024 (4 layers a step) the hint says what a fused kernel would take per step: the
    whatif prediction, 4 calls a step, and within 15 % of the measured cuDNN kernels of sdpa-cudnn_1024 (4 a step,
    durations from a walk of the raw JSON)."""
    import gzip
    import json

    from support.paths import sweep_file
    from tracekit import whatif

    res = analyze(sweep_file("eager_1024")).check()
    [h] = [h for h in res.hints if h.rule == "eager-softmax"]
    [w] = whatif(sweep_file("eager_1024"))
    per_call = {b.fused_us for b in w.blocks}
    assert len(per_call) == 1 and h.evidence["fused_backend"] == w.backend
    assert h.evidence["fused_us_per_step"] == pytest.approx(4 * per_call.pop(), abs=1e-3)
    assert "a fused kernel (cudnn) would take about" in h.message and "tracekit whatif" in h.message
    with gzip.open(sweep_file("sdpa-cudnn_1024")) as f:
        durs = [e["dur"] for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel" and "sdpa" in e["name"]]
    assert len(durs) == 8  # 2 steps x 4 layers
    assert abs(h.evidence["fused_us_per_step"] / (sum(durs) / 2) - 1) <= 0.15


def test_no_fused_kernel_line_without_a_calibration():
    """An H100 trace with an eager-softmax hint: no calibration for the H100, so no predicted line."""
    res = real("tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz")
    [h] = [h for h in res.hints if h.rule == "eager-softmax"]
    assert "fused_us_per_step" not in h.evidence and "would take about" not in h.message


def test_merged_facts_sum_the_fused_estimates_per_step_and_keep_one_backend():
    a = GroupFacts(fused_us_by_step={1: 10.0, 2: 20.0}, fused_backend="cudnn")
    b = GroupFacts(fused_us_by_step={2: 5.0, 3: 1.0}, fused_backend="cudnn")
    c = GroupFacts(fused_us_by_step={1: 1.0}, fused_backend="flash")
    m = merge_facts([{("k", "forward"): a}, {("k", "forward"): b}])
    assert m is not None and m[("k", "forward")].fused_us_by_step == {1: 10.0, 2: 25.0, 3: 1.0}
    assert m[("k", "forward")].fused_backend == "cudnn"
    mixed = merge_facts([{("k", "forward"): GroupFacts(fused_us_by_step={1: 10.0}, fused_backend="cudnn")},
                         {("k", "forward"): c}])
    assert mixed is not None and mixed[("k", "forward")].fused_backend is None  # two backends: no one name


# -- hint facts over columns (issue 40), against the per-kernel walk they replaced ----------------------------------
def _plain_collect(collector, block_keys, dev_owner, cats, busy_ns) -> dict:
    """The kernel rows as the per-event walk made them: each owned kernel's launcher tag by the collector's own
    ``launcher_tag`` (which counts SDPA calls and GEMM dtypes on the way), its row and busy µs, in event order."""
    from tracekit.analysis.hints.facts import _kernel_tag
    from tracekit.vocab import compact_kernel_name

    tr, links, facts = collector._tr, collector._links, {}
    for j, b in enumerate(dev_owner):
        if b == -1:
            continue
        g = facts.setdefault(block_keys[b], GroupFacts())
        lf = links.device_leaf[j]
        la = links.launcher[lf] if lf != -1 else -1
        lname = tr.host[la].name if la != -1 else ""
        tag = collector.launcher_tag(la, g, b, lname) if la != -1 else HintTag.UNTAGGED
        name, cat = tr.device[j].name, cats[j]
        row = (compact_kernel_name(name), cat, lname, _kernel_tag(name, cat, tag))
        acc = g.kernels.setdefault(row, [0, 0.0])
        acc[0] += 1
        acc[1] = busy_ns[j] / 1000 if acc[0] == 1 else acc[1] + busy_ns[j] / 1000
    return facts


def _assert_facts_as_plain(path: Path) -> None:
    from tracekit.analysis.hints.facts import _FactCollector

    ctx = context_after(path, "split-stages")
    keys = [(r.kind, str(r.phase), r.step) for r in ctx.block_results]
    args = (keys, ctx.dev_owner, ctx.cats, ctx.walk.dev_share)
    got = _FactCollector(ctx.tr, ctx.links).collect(*args)
    want = _plain_collect(_FactCollector(ctx.tr, ctx.links), *args)
    assert repr(got) == repr(want)


@pytest.mark.parametrize("seed", range(40))
def test_hint_facts_over_columns_are_the_per_kernel_walk(tmp_path, seed):
    _assert_facts_as_plain(random_trace(tmp_path, seed, sdpa=seed % 2 == 1))


@requires_real
@pytest.mark.parametrize("rel", REAL_SAMPLES)
def test_hint_facts_over_columns_are_the_per_kernel_walk_on_real_traces(rel):
    _assert_facts_as_plain(REAL / rel)
