"""Hint rules (tracekit/analysis/hints.py): each fires on a real trace that has the problem and stays silent on one
that has not; savings are bounded by figures the trace gives independently (its kernels' own durations)."""

from __future__ import annotations

import gzip
import json
import shutil
from functools import lru_cache
from pathlib import Path

import orjson
import pytest
from support.builders import TraceBuilder
from support.paths import REAL
from support.cli import run_cli

from tracekit.results.invariants import InvariantError
from tracekit import analyze
from tracekit.analysis.hints import HINT_RULES, HintTag
from tracekit.results.attribution import Attribution
from tracekit.results.hints import GroupFacts, merge_facts

H200 = REAL.parent / "h200"
requires_h200 = pytest.mark.skipif(not H200.is_dir(), reason=f"H200 traces not present at {H200}")
requires_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real traces not present at {REAL}")

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
        with gzip.open(f) as fh:
            out += [e for e in json.load(fh)["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy")]
    return out


def test_rule_table_is_named_and_ordered() -> None:
    names = [r.name for r in HINT_RULES]
    assert len(names) == len(set(names)) >= 9
    assert names[:3] == ["eager-softmax", "sdpa-math-fallback", "launch-bound"]
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
                             "saving_kernels", "overlap"}  # issue 24: what each saving counts, and its overlaps
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
