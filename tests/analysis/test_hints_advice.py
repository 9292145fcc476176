"""Issue 24, part 3: one device table behind every efficiency figure, honest overlapping savings, vendor-aware advice.

Numbers here are independent of tracekit's own output: peaks are the datasheet figures that tracekit/hardware.py
cites (NVIDIA H200 SXM: 989.4 TFLOP/s bf16 dense; AMD MI300X: 1307.4), FLOPs are computed from the shapes
(an attention forward is two GEMMs, 4·B·H·Lq·Lk·D, half that under a causal mask of equal lengths), kernel times
are read from the raw trace JSON (gzip + json) or set in a hand-built trace (tests/support/builders.py).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from support.builders import TraceBuilder
from support.paths import REAL
from support.cli import run_cli
from support.traces import read_events

from tracekit import analyze
from tracekit.analysis.hints.advice import ADVICE, AdviceTopic
from tracekit.hardware import Arch, Vendor, platform
from tracekit.results.attribution import Attribution
from tracekit.results.hints import Hint, HintOverlap
from tracekit.results.invariants import InvariantError

H200_SWEEP = REAL.parent / "h200" / "sweep"
H200_BF16 = 989.4  # NVIDIA H200 Tensor Core GPU datasheet, SXM: BF16 1,979 TFLOPS with sparsity -> 989.4 dense
MI300X_BF16 = 1307.4  # AMD Instinct MI300X datasheet: BF16 1307.4 TFLOPS dense

FLASH_K = ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
           "cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, false, "
           "false, true, true, false, false>(Flash_fwd_params)")
SOFTMAX_K = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*)"
SOFTMAX16_K = ("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 8, false, "
               "false>(c10::BFloat16*)")
MASK_K = ("void at::native::vectorized_elementwise_kernel<4, at::native::masked_fill_kernel(at::TensorIterator&, "
          "c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda(float, bool)#1}>(int)")
MUL_K = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
         "at::native::binary_internal::MulFunctor<float> > >(int)")
GEMM_K = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
CAST_K = ("void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16tofloat32_copy_kernel_cuda("
          "at::TensorIteratorBase&)::{lambda(c10::BFloat16)#1}>(int)")

NVIDIA_WORDS = re.compile(r"hopper|\bFA[234]\b|cudnn|nvidia|\bsm(?:80|89|90|100)\b", re.IGNORECASE)
ROCM_WORDS = re.compile(r"rocm|aiter|aotriton|composable kernel|\bCK\b|\bhip\b|mi300", re.IGNORECASE)


def _need(p: Path) -> Path:
    if not p.exists():
        pytest.skip(f"{p} not present")
    return p


def _events(path: Path) -> list[dict]:
    """Every event of the trace file(s) under ``path``, straight from the JSON."""
    files = [path] if path.is_file() else sorted(path.rglob("*.json.gz"))
    out: list[dict] = []
    for f in files:
        out += read_events(f)
    return out


def _attention_flops(dims: list, concrete: list, causal_at: int) -> float:
    """Two GEMMs (QKᵀ and PV) of B·H·Lq·Lk·D multiply-adds each; half under a causal mask of equal lengths."""
    (b, h, lq, d), (_, _, lk, _) = dims[0], dims[1]
    causal = len(concrete) > causal_at and concrete[causal_at] == "True"
    return 4.0 * b * h * lq * lk * d * (0.5 if causal and lq == lk else 1.0)


def _flash_walk(path: Path) -> tuple[float, float]:
    """(FLOPs of every flash-attention call, µs of every flash kernel), from the raw JSON."""
    ev = _events(path)
    flops = sum(_attention_flops(e["args"]["Input Dims"], e["args"]["Concrete Inputs"], 4) for e in ev
                if e.get("name") == "aten::_scaled_dot_product_flash_attention")
    us = sum(e["dur"] for e in ev if e.get("cat") == "kernel" and "flash_fwd_kernel" in e["name"])
    return flops, us


def _fired(a: Attribution, rule: str) -> Hint:
    (h,) = [h for h in a.hints if h.rule == rule]
    return h


# -- 1. one peak: the hint's figures are the datasheet's and the efficiency table's ---------------------------------

def _flash_trace(device: str | None, calls: list[tuple[tuple[int, int, int, int], float]],
                 runtime: tuple[str, int] | None = ("cuda_runtime_version", 12040)) -> TraceBuilder:
    """One annotated block per call: SDPA -> the flash op (shapes recorded, not causal) -> one flash kernel."""
    top: dict = {"deviceProperties": [{"id": 0, "name": device}]} if device is not None else {}
    if runtime:
        top[runtime[0]] = runtime[1]
    b = TraceBuilder(**top)
    t = 0.0
    for i, (q, dur) in enumerate(calls):
        b.annotation(f"layer{i}.attention", t, dur + 20)
        b.op("aten::scaled_dot_product_attention", t + 1, 10)
        ev = b.op("aten::_scaled_dot_product_flash_attention", t + 2, 8)
        ev["args"].update({"Input Dims": [list(q)] * 3 + [[], [], [], []],
                           "Input type": ["c10::BFloat16"] * 3 + ["Scalar"] * 4,
                           "Concrete Inputs": ["", "", "", "0.", "False", "False", ""]})
        b.launch(FLASH_K, t + 3, 1, t + 5, dur)
        t += dur + 40
    return b


# A memory-bound first block (intensity 64 FLOP/B, under the H200's ridge of 989.4 / 4.8 = 206), then two
# compute-bound ones: the old rule read its peak back from the first block's roof, the memory roof.
MIXED = [((1, 8, 128, 64), 1.0), ((1, 16, 4096, 64), 2000.0), ((1, 16, 4096, 64), 2000.0)]


def test_low_tflops_peak_is_the_datasheet_bf16_peak_whatever_block_comes_first(tmp_path: Path) -> None:
    a = analyze(_flash_trace("NVIDIA H200", MIXED).write(tmp_path / "t.json")).check()
    h = _fired(a, "low-tflops")
    flops = sum(4.0 * b * hh * s * s * d for (b, hh, s, d), _ in MIXED)
    us = sum(dur for _, dur in MIXED)
    assert h.evidence["flops"] == flops
    assert h.evidence["peak_tflops_per_s"] == H200_BF16 and h.evidence["peak_dtypes"] == ["bf16"]
    assert h.evidence["tflops_per_s"] == pytest.approx(flops / us / 1e6, abs=1e-3)
    assert h.evidence["roof_pct"] == pytest.approx(100 * flops / (us * 1e-6) / (H200_BF16 * 1e12), abs=0.01)
    assert h.saving_us == pytest.approx(us - flops / (H200_BF16 * 1e12) * 1e6, abs=0.01)  # time above the roof
    assert f"{H200_BF16:.1f} TFLOP/s" in h.message and f"{h.evidence['roof_pct']:.0f}%" in h.message


def test_low_tflops_figures_are_the_json_efficiency_records_of_the_same_kernels(tmp_path: Path) -> None:
    path = _flash_trace("NVIDIA H200", MIXED).write(tmp_path / "t.json")
    d = json.loads(run_cli("attribute", path, "--format", "json", check=True).stdout)
    (h,) = [h for h in d["hints"] if h["rule"] == "low-tflops"]
    recs = [b["efficiency_by_category"]["fused_attention"] for b in d["blocks"]]
    flops, us = sum(r["flops"] for r in recs), sum(r["time_us"] for r in recs)
    assert h["evidence"]["tflops_per_s"] == pytest.approx(flops / us / 1e6, abs=1e-3)
    assert h["evidence"]["roof_pct"] == pytest.approx(100 * flops / us / 1e6 / d["device"]["peaks"]["bf16"], abs=0.01)
    assert d["device"]["peaks"]["bf16"] == h["evidence"]["peak_tflops_per_s"] == H200_BF16
    table = " ".join(run_cli("attribute", path, check=True).stdout.split())  # the terminal's roof: the same peak
    assert f"H200: bf16 {H200_BF16} TFLOP/s" in table and f"bf16 peak ({H200_BF16:.1f} TFLOP/s)" in table


def test_low_tflops_on_the_h200_flash_sweep_run_matches_the_raw_trace() -> None:
    path = _need(H200_SWEEP / "sdpa-flash_4096")
    h = _fired(analyze(path).check(), "low-tflops")
    flops, us = _flash_walk(path)
    assert h.evidence["flops"] == flops
    assert h.evidence["peak_tflops_per_s"] == H200_BF16
    assert h.evidence["roof_pct"] == pytest.approx(100 * flops / (us * 1e-6) / (H200_BF16 * 1e12), abs=0.01)


def test_low_tflops_on_a_folder_whose_first_run_is_memory_bound(tmp_path: Path) -> None:
    """The user's finding: the parent folder said 34% of 614.4 TFLOP/s (a peak read back from a memory roof)."""
    for name, run in (("a", "sdpa-flash_512"), ("b", "sdpa-flash_4096")):  # file order: the 512 run's blocks first
        shutil.copy(next(_need(H200_SWEEP / run).glob("*.json.gz")), tmp_path / f"{name}.pt.trace.json.gz")
    h = _fired(analyze(tmp_path, jobs=1).check(), "low-tflops")
    flops, us = _flash_walk(tmp_path)
    assert h.evidence["flops"] == flops and h.evidence["peak_tflops_per_s"] == H200_BF16
    assert h.evidence["roof_pct"] == pytest.approx(100 * flops / (us * 1e-6) / (H200_BF16 * 1e12), abs=0.01)


def test_low_tflops_on_mi300x_uses_the_mi300x_peak() -> None:
    a = analyze(_need(REAL / "tracelens/evals/sdpa_01_long_seq_low_eff.json.gz")).check()
    assert _fired(a, "low-tflops").evidence["peak_tflops_per_s"] == MI300X_BF16


def test_terminal_roof_names_the_peaks_of_the_dtypes_counted() -> None:
    """eager_4096 counts bf16 GEMMs and fp32 vector work (softmax, elementwise): the roof line names both peaks."""
    out = " ".join(run_cli("attribute", _need(H200_SWEEP / "eager_4096"), check=True).stdout.split())
    assert f"H200: bf16 {H200_BF16}, fp32 67.0 TFLOP/s, 4800 GB/s" in out  # datasheet: FP32 67 TFLOPS, 4.8 TB/s


# -- 2. overlapping savings: the union of the counted kernels, never their sum ----------------------------------------

def _eager_block(tmp_path: Path, with_fp32_softmax: bool = False) -> Attribution:
    """softmax 30 µs, masked_fill 20 µs, mul 10 µs, a bf16 GEMM 10 µs (+ a bf16->fp32 cast 6 µs), one stream."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 300)
    b.op("aten::bmm", 0.2, 0.5)  # host-only QKᵀ: with the softmax and the mm, the range's attention core
    t, k = 1.0, 1000.0
    ops = [("aten::masked_fill", {}, MASK_K, 20.0), ("aten::mul", {}, MUL_K, 10.0),
           ("aten::_softmax", {"Input type": ["float", "Scalar", "Scalar"]} if with_fp32_softmax else {},
            SOFTMAX_K if with_fp32_softmax else SOFTMAX16_K, 30.0)]
    if with_fp32_softmax:
        ops.insert(0, ("aten::_to_copy", {}, CAST_K, 6.0))
    for name, args, kernel, dur in ops:
        b.op(name, t, 8)["args"].update(args)
        b.launch(kernel, t + 1, 1, k, dur)
        t, k = t + 10, k + dur
    b.op("aten::mm", t, 8)["args"].update({"Input type": ["c10::BFloat16", "c10::BFloat16"]})
    b.launch(GEMM_K, t + 1, 1, k, 10.0)
    return analyze(b.write(tmp_path / "t.json")).check()


def test_eager_softmax_and_mask_overlap_by_the_masked_fill_time(tmp_path: Path) -> None:
    a = _eager_block(tmp_path)
    es, mm = _fired(a, "eager-softmax"), _fired(a, "materialised-mask")
    assert es.saving_us == pytest.approx(60) and mm.saving_us == pytest.approx(20)  # 30 + 20 + 10; the fill
    assert es.overlap is mm.overlap and es.overlap is not None
    ov = es.overlap
    assert ov.rules == ["eager-softmax", "materialised-mask"]
    assert ov.union_us == pytest.approx(60) and ov.sum_us == pytest.approx(80)
    assert ov.double_counted_us == pytest.approx(20) and ov.union_pct == pytest.approx(100 * 60 / 70, abs=0.05)
    assert len(ov.shared_kernels) == 1 and "masked_fill_kernel" in ov.shared_kernels[0]
    assert any("masked_fill_kernel" in n for n in mm.saving_kernels)


def test_an_estimate_overlaps_by_the_part_it_claims(tmp_path: Path) -> None:
    """fp32-softmax claims half the softmax (30 / 2) and the cast (6): together with eager-softmax (60), the union
    counts the softmax once and adds the cast, which eager-softmax does not count (memory, not elementwise)."""
    a = _eager_block(tmp_path, with_fp32_softmax=True)
    fp = _fired(a, "fp32-softmax")
    assert fp.saving_us == pytest.approx(30 / 2 + 6)
    ov = fp.overlap
    assert ov is not None and set(ov.rules) == {"eager-softmax", "materialised-mask", "fp32-softmax"}
    assert ov.union_us == pytest.approx(30 + 20 + 10 + 6)  # each kernel once, at the most any hint counts of it
    assert ov.sum_us == pytest.approx(60 + 20 + 21) and ov.union_us <= 76  # the block's busy time: 30+20+10+10+6


def _masked_fill_in_blocks(path: Path) -> float:
    """µs of the masked_fill kernels whose launch lies inside a layer*.attention range: a walk of the raw JSON."""
    ev = _events(path)
    ranges = [(e["ts"], e["ts"] + e["dur"]) for e in ev
              if e.get("cat") == "user_annotation" and re.fullmatch(r"layer\d+\.attention", e["name"])]
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime"
                 and "correlation" in e.get("args", {})}
    us = 0.0
    for e in ev:
        if e.get("cat") == "kernel" and "masked_fill" in e["name"]:
            ts = launch_ts.get(e["args"].get("correlation"))
            if ts is not None and any(lo <= ts <= hi for lo, hi in ranges):
                us += e["dur"]
    return us


def test_eager_4096_overlap_is_the_raw_masked_fill_time() -> None:
    """The user's finding: eager-softmax 74.9% and materialised-mask 28.2% claim the same masked_fill kernels."""
    path = _need(H200_SWEEP / "eager_4096")
    a = analyze(path).check()
    es, mm = _fired(a, "eager-softmax"), _fired(a, "materialised-mask")
    fill = _masked_fill_in_blocks(path)
    assert fill > 0 and mm.saving_us == pytest.approx(fill, rel=1e-6)
    ov = es.overlap
    assert ov is not None and ov is mm.overlap
    assert ov.double_counted_us == pytest.approx(fill, rel=1e-6)
    assert ov.union_us == pytest.approx(es.saving_us + mm.saving_us - fill, rel=1e-6)
    assert ov.union_us < ov.sum_us and ov.union_pct is not None and ov.union_pct <= 100
    raw_busy = sum(b.total_us for b in a.blocks)
    assert ov.union_us <= raw_busy


def test_overlap_in_json_terminal_and_markdown() -> None:
    path = _need(H200_SWEEP / "eager_4096")
    fill = _masked_fill_in_blocks(path)
    d = json.loads(run_cli("attribute", path, "--format", "json", check=True).stdout)
    by = {h["rule"]: h for h in d["hints"]}
    for rule in ("eager-softmax", "materialised-mask"):
        ov = by[rule]["overlap"]
        assert ov["rules"] == ["eager-softmax", "materialised-mask"]
        assert ov["double_counted_us"] == pytest.approx(fill, rel=1e-6)
        assert ov["combined_saving_us"] == pytest.approx(ov["sum_saving_us"] - fill, rel=1e-6)
        assert ov["combined_saving_us"] <= d["totals"]["busy_us"]
        # the masked_fill rows are among eager-softmax's: the union per step is eager-softmax's, within a step
        assert ov["combined_saving_per_step_us"] == pytest.approx(by["eager-softmax"]["saving_per_step_us"], abs=0.002)
        assert ov["combined_saving_per_step_us"] <= by[rule]["step_attention_us"]
    assert any("masked_fill" in n for n in by["materialised-mask"]["saving_kernels"])
    joined = " ".join(run_cli("attribute", path, check=True).stdout.split())  # wrapped lines joined again
    # the union's figures as the JSON gives them (test_hints checks them against a walk of each step's kernels)
    per, total = by["eager-softmax"]["overlap"]["combined_saving_per_step_us"], by["eager-softmax"]["saving_us"]
    assert (f"together: eager-softmax + materialised-mask save at most {per / 1000:.2f} ms per step, "
            f"{total / 1000:.2f} ms in all") in joined
    assert "overlaps [materialised-mask]" in joined and "overlaps [eager-softmax]" in joined
    md = run_cli("attribute", path, "--format", "markdown", check=True).stdout
    assert (f"Together, eager-softmax + materialised-mask save at most {per:,.1f} µs per step, {total:,.1f} µs "
            "in all") in md


def test_no_overlap_between_disjoint_savings(tmp_path: Path) -> None:
    path = _need(REAL / "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    a = analyze(path).check()  # layout copies (memory) and rotary's cat + neg share no kernel
    assert {h.rule for h in a.hints} >= {"layout-copies", "rotary-cat"}
    assert all(h.overlap is None for h in a.hints)


def test_overlap_check_refuses_a_union_above_the_sum_or_the_blocks() -> None:
    ok: dict = {"rules": ["a", "b"], "blocks": ["k"], "sum_us": 80.0, "union_us": 60.0, "double_counted_us": 20.0,
                "shared_kernels": ["x"], "busy_us": 70.0, "union_pct": 85.7}
    assert HintOverlap(**ok).check()
    for bad in ({"union_us": 90.0, "double_counted_us": -10.0, "union_pct": 128.6},  # more than the sum
                {"busy_us": 50.0, "union_pct": 120.0},  # more than the blocks' time
                {"double_counted_us": 5.0},  # not sum - union
                {"union_pct": 50.0},  # not union / busy
                {"rules": ["a"]}):  # one hint overlaps nothing
        with pytest.raises(InvariantError, match="HintOverlap"):
            HintOverlap(**{**ok, **bad}).check()


def test_hint_check_refuses_a_saving_that_is_not_its_counted_time() -> None:
    h = Hint(rule="r", blocks=["k"], message="m", evidence={}, saving_us=10.0, saving_pct=10.0,
             saving_basis="upper bound: x", counted={("k1", "softmax", "", ""): 4.0})
    with pytest.raises(InvariantError, match="counted kernel time"):
        h.check()


def _per_step_hint(**kw: object) -> Hint:
    """A hint of 10 µs over 2 steps, 5 µs in the median step of 40 µs attention busy time; ``kw`` breaks it."""
    fields: dict = dict(rule="r", blocks=["k"], message="m", evidence={}, saving_us=10.0, saving_pct=10.0,
                        saving_basis="upper bound: x", saving_per_step_us=5.0, steps=2,
                        per_step_basis="median of 2 steps", step_attention_us=40.0, reaches_latency=True)
    return Hint(**{**fields, **kw})


def test_hint_check_bounds_the_per_step_saving_by_a_steps_attention_time() -> None:
    assert _per_step_hint().check().saving_per_step_us == 5.0
    assert _per_step_hint(step_attention_us=5.0).check()  # equal: the kernels are all of the step's attention
    with pytest.raises(InvariantError, match="exceeds the step's attention time"):
        _per_step_hint(step_attention_us=4.0).check()
    with pytest.raises(InvariantError, match="exceeds the total"):
        _per_step_hint(saving_per_step_us=12.0, step_attention_us=40.0).check()
    with pytest.raises(InvariantError, match="without its per-step figure"):
        _per_step_hint(saving_per_step_us=None).check()
    with pytest.raises(InvariantError, match="a per-step saving without a saving"):
        _per_step_hint(saving_us=None, saving_pct=None).check()


# -- 3. vendor-aware advice: a named, ordered table -----------------------------------------------------------------

def test_advice_table_is_named_ordered_and_ends_each_topic_in_a_catch_all() -> None:
    names = [a.name for a in ADVICE]
    assert len(names) == len(set(names))
    for topic in AdviceTopic:
        rows = [a for a in ADVICE if a.topic == topic]
        assert rows and rows[-1].vendor is None and not rows[-1].archs and not rows[-1].ran
        assert all(a.vendor is not None for a in rows[:-1])  # one catch-all, last
    for a in ADVICE:
        assert a.text and a.why
        if a.vendor == Vendor.AMD:
            assert not NVIDIA_WORDS.search(a.text), a.name
        if a.vendor == Vendor.NVIDIA:
            assert not ROCM_WORDS.search(a.text), a.name


@pytest.mark.parametrize(("name", "runtime", "vendor", "arch"), [
    ("NVIDIA H200", "CUDA 13.0", Vendor.NVIDIA, Arch.HOPPER),
    ("NVIDIA H100 80GB HBM3", "CUDA 12.4", Vendor.NVIDIA, Arch.HOPPER),
    ("NVIDIA B200", None, Vendor.NVIDIA, Arch.BLACKWELL),
    ("NVIDIA A100-PG509-200", None, Vendor.NVIDIA, Arch.AMPERE),
    ("Tesla V100-SXM2-32GB", None, Vendor.NVIDIA, Arch.VOLTA),
    ("AMD Instinct MI300X VF", "HIP 6.4", Vendor.AMD, Arch.CDNA3),
    ("AMD Instinct MI210", "HIP 6.4", Vendor.AMD, Arch.CDNA2),
    ("AMD Radeon Graphics", None, Vendor.AMD, Arch.UNKNOWN),  # HTA's MI250 trace: a generic name, no runtime
    ("", "HIP 7.0", Vendor.AMD, Arch.UNKNOWN),  # vLLM's decode trace: an empty name, the HIP runtime
    ("NVIDIA GeForce RTX 3090", "CUDA 12.4", Vendor.NVIDIA, Arch.UNKNOWN),  # not in the table
    (None, None, Vendor.UNKNOWN, Arch.UNKNOWN),
])
def test_platform_of_a_trace(name: str | None, runtime: str | None, vendor: Vendor, arch: Arch) -> None:
    p = platform(name, runtime)
    assert (p.vendor, p.arch) == (vendor, arch)


@pytest.mark.parametrize(("device", "says", "never"), [
    ("NVIDIA H200", r"FA3", ROCM_WORDS),
    ("NVIDIA B200", r"FA4", ROCM_WORDS),
    ("NVIDIA A100-SXM4-80GB", r"FA2", re.compile(r"FA3|FA4|" + ROCM_WORDS.pattern, re.IGNORECASE)),
    ("AMD Instinct MI300X", r"aiter", NVIDIA_WORDS),
    ("AMD Instinct MI250X", r"ROCm", re.compile(r"MI300|" + NVIDIA_WORDS.pattern, re.IGNORECASE)),
])
def test_low_tflops_advice_by_vendor_and_architecture(tmp_path: Path, device: str, says: str,
                                                      never: re.Pattern[str]) -> None:
    runtime = ("hip_runtime_version", 60443483) if device.startswith("AMD") else ("cuda_runtime_version", 12040)
    calls = [((1, 16, 4096, 64), 2000.0), ((1, 16, 4096, 64), 2000.0)]  # compute-bound, far below every roof
    a = analyze(_flash_trace(device, calls, runtime).write(tmp_path / "t.json")).check()
    h = _fired(a, "low-tflops")
    assert re.search(says, h.message) and not never.search(h.message), h.message


def test_advice_without_a_known_vendor_names_no_vendor_library(tmp_path: Path) -> None:
    b = _eager_block(tmp_path)  # a hand-built trace has no deviceProperties and no runtime version
    h = _fired(b, "eager-softmax")
    assert not NVIDIA_WORDS.search(h.message) and not ROCM_WORDS.search(h.message), h.message


MI300X = ["tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
          "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz",
          "tracelens/mi300/google_owlv2-large-patch14-ensemble__1016001.json.gz",
          "tracelens/evals/sdpa_01_long_seq_low_eff.json.gz",
          "tracelens/inference/xdit_flux_aiter/profile_trace_rank_0.json.gz",
          "tracelens/torch_compile_triton/trace.json.gz"]


@pytest.mark.parametrize("rel", MI300X)
def test_no_nvidia_advice_on_mi300x(rel: str) -> None:
    a = analyze(_need(REAL / rel)).check()
    for h in a.hints:
        assert not NVIDIA_WORDS.search(h.message), h.message


def test_mi300x_advice_names_rocm_backends() -> None:
    """Not vacuous: on the MI300X traces, the hints that name a backend name ROCm ones."""
    named = [h for rel in MI300X for h in analyze(_need(REAL / rel)).hints
             if h.rule in ("low-tflops", "eager-softmax")]
    assert {h.rule for h in named} == {"low-tflops", "eager-softmax"}
    assert all(ROCM_WORDS.search(h.message) for h in named)


@pytest.mark.parametrize("run", ["eager_4096", "sdpa-flash_4096", "sdpa-cudnn_4096", "sdpa-math_4096"])
def test_no_rocm_advice_on_h200(run: str) -> None:
    a = analyze(_need(H200_SWEEP / run)).check()
    assert a.hints
    for h in a.hints:
        assert not ROCM_WORDS.search(h.message), h.message


def test_h200_cudnn_run_is_not_told_to_use_cudnn() -> None:
    h = _fired(analyze(_need(H200_SWEEP / "sdpa-cudnn_4096")).check(), "low-tflops")
    assert "FA3" in h.message and "already ran" in h.message


@pytest.mark.slow
def test_html_report_draws_the_combined_saving(tmp_path: Path) -> None:
    """The page draws each overlapping hint marked and one "together" line with the JSON's union."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    binary, driver = shutil.which("chromium") or shutil.which("google-chrome"), shutil.which("chromedriver")
    if not binary or not driver:
        pytest.skip("chromium and chromedriver are not installed")
    _eager_block(tmp_path)  # writes t.json: softmax 30, masked_fill 20, mul 10, GEMM 10 (µs)
    run_cli("report", tmp_path / "t.json", "-o", tmp_path / "r.html", check=True)
    opts = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    opts.binary_location = binary
    d = webdriver.Chrome(service=Service(driver), options=opts)
    try:
        d.get((tmp_path / "r.html").as_uri())
        texts = [e.text for e in d.find_elements(By.CSS_SELECTOR, "div.hint")]
    finally:
        d.quit()
    assert any(t.startswith("[eager-softmax]") and "(overlaps materialised-mask)" in t for t in texts)
    (together,) = [t for t in texts if t.startswith("together:")]
    # one block, no ProfilerStep: no step was recorded, so the union is said once, in all (30 + 20 + 10), never
    # "per step" (the headline's basis is the whole trace)
    assert "save at most 60.0 \u00b5s in all (85.7%)" in together and "per step" not in together
    assert "not the sum 80.0 \u00b5s" in together
