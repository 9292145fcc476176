"""The fused-attention model of ``tracekit whatif`` (tracekit.analysis.whatif) and its calibration (issue 39).

Expectations come from arithmetic done here (FLOP counts by hand, curves with known parameters) and from the
shared H200 sweep's own traces, never from a figure tracekit printed.
"""

from __future__ import annotations

import gzip
import json
import statistics
from dataclasses import replace
from math import isclose
from pathlib import Path

import orjson
import pytest

from support.builders import CUTLASS_BF16_GEMM, TraceBuilder, with_dims
from support.paths import SWEEP, requires_h200, sweep_file
from tracekit import whatif
from tracekit.results.whatif import Shape, WhatIf
from tracekit.analysis.flops import attention_flops, op_cost
from tracekit.analysis.whatif import efficiency, fit_curve, fused_time_us, occupancy
from tracekit.analysis.whatif import CoreFacts
from tracekit.analysis.whatif.predict import ratio_for
from tracekit.calibration import BACKENDS, CALIBRATIONS, RATIOS, calibration, calibrations_for, ratio
from tracekit.errors import UsageError
from tracekit.io.calibration_file import calibration_document
from tracekit.vocab import Phase
from tracekit.hardware import lookup

H200 = calibration("NVIDIA H200", "cudnn")


def _sdpa_cost(q: list[int], k: list[int], v: list[int], causal: bool) -> float:
    """FLOPs flops.py counts for an SDPA op with these recorded inputs."""
    dims = orjson.dumps([q, k, v, [], [], [], [], []])
    types = orjson.dumps(["c10::BFloat16"] * 3 + [""] * 5)
    concrete = orjson.dumps(["", "", "", "", "0.", "True" if causal else "False", "", "False"])
    cost = op_cost("aten::scaled_dot_product_attention", dims, types, concrete)
    assert cost is not None
    return cost.flops


@pytest.mark.parametrize(("q", "k", "causal", "by_hand"), [
    ([2, 8, 256, 64], [2, 8, 256, 64], True, 4 * 2 * 8 * 256 * 256 * 64 / 2),  # causal, Lq == Lk: half
    ([2, 8, 256, 64], [2, 8, 256, 64], False, 4 * 2 * 8 * 256 * 256 * 64),
    ([1, 32, 128, 128], [1, 8, 512, 128], True, 4 * 32 * 128 * 512 * 128 * (128 / (2 * 512))),  # GQA, Lq < Lk
])
def test_fused_flops_are_flops_py_count(q: list[int], k: list[int], causal: bool, by_hand: float) -> None:
    """One formula: whatif's F is the count flops.py gives the same shapes, and both are the count by hand."""
    f = attention_flops(q[0] * q[1], q[2], k[2], q[3], k[3], causal=causal, backward=False)
    assert f == _sdpa_cost(q, k, k, causal)
    assert isclose(f, by_hand)
    assert attention_flops(q[0] * q[1], q[2], k[2], q[3], k[3], causal=causal, backward=True) == 2.5 * f


def test_efficiency_rises_with_the_key_length_and_saturates() -> None:
    assert H200 is not None
    etas = [efficiency(H200, lk) for lk in (64, 128, 512, 1024, 4096, 65536, 10**9)]
    assert etas == sorted(etas) and len(set(etas)) == len(etas)
    assert efficiency(H200, round(H200.l_half)) == pytest.approx(H200.eta_max / 2, rel=1e-3)
    assert etas[-1] == pytest.approx(H200.eta_max, rel=1e-5)


def test_occupancy_counts_the_idle_slots_of_the_last_wave() -> None:
    assert H200 is not None and H200.sms == 132 and H200.tile_q == 128
    assert occupancy(H200, 132, 128) == 1.0  # 132 CTAs: one full wave
    assert occupancy(H200, 133, 128) == 133 / 264  # one CTA spills into a second wave
    assert occupancy(H200, 1, 1000) == 8 / 132  # ceil(1000 / 128) = 8 CTAs on 132 SMs
    assert occupancy(H200, 64, 4096) == 2048 / (16 * 132)


def test_the_floor_holds_for_tiny_calls_and_is_left_behind_by_big_ones() -> None:
    assert H200 is not None
    peak = 989.4
    tiny = fused_time_us(H200, flops=1e3, batch_heads=1, len_q=8, len_k=8, peak_tflops=peak)
    assert tiny == H200.floor_us
    big = fused_time_us(H200, flops=1e12, batch_heads=132, len_q=128, len_k=8192, peak_tflops=peak)
    assert big == pytest.approx(1e12 / (efficiency(H200, 8192) * peak * 1e12) * 1e6)
    assert fused_time_us(H200, flops=1e12, batch_heads=132, len_q=128, len_k=8192, peak_tflops=peak,
                         ratio=0.5) == pytest.approx(2 * big)


def test_fit_curve_recovers_a_known_curve_and_refuses_what_does_not_saturate() -> None:
    eta_max, l_half = 0.6, 900.0
    points = [(lk, eta_max * lk / (lk + l_half)) for lk in (256, 1024, 8192)]
    got = fit_curve(points)
    assert got == pytest.approx((eta_max, l_half), rel=1e-9)
    with pytest.raises(ValueError, match="two key lengths"):
        fit_curve([(512, 0.2), (512, 0.3)])
    with pytest.raises(ValueError, match="no saturating curve"):
        fit_curve([(512, 0.5), (4096, 0.1)])  # efficiency falling with Lk


def test_an_unknown_device_has_no_calibration() -> None:
    assert calibration("NVIDIA GeForce RTX 4090", "cudnn") is None
    assert calibration(None, "cudnn") is None
    assert calibrations_for("AMD Instinct MI300X") == []
    assert [c.backend for c in calibrations_for("NVIDIA H200")] == list(BACKENDS)


def test_every_calibration_names_its_source_and_a_device_with_peaks() -> None:
    for c in CALIBRATIONS:
        assert c.backend in BACKENDS and c.source and c.points >= 2
        assert lookup(c.device) is not None
        assert 0 < c.eta_max < 1 and c.l_half > 0 and c.floor_us > 0


@requires_h200
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_stored_h200_entry_is_what_the_fit_of_the_shared_sweep_gives(backend: str) -> None:
    from tracekit.run.calibrate import fit_backend, sweep_points

    stored = calibration("H200", backend)
    assert stored is not None
    assert fit_backend(sweep_points(SWEEP, backend), backend, stored) == stored


@requires_h200
@pytest.mark.parametrize("backend", BACKENDS)
def test_leave_one_out_predicts_each_sweep_point_within_15_percent(backend: str) -> None:
    """Fitted without a point, the curve predicts that point's kernel time (the sweep's own median per call)."""
    from tracekit.run.calibrate import fit_backend, sweep_points

    stored = calibration("H200", backend)
    assert stored is not None
    points = sweep_points(SWEEP, backend)
    assert len(points) >= 4
    for i, p in enumerate(points):
        cal = fit_backend(points[:i] + points[i + 1:], backend, stored)
        t = fused_time_us(cal, flops=p.flops, batch_heads=p.batch_heads, len_q=p.len_q, len_k=p.len_k,
                          peak_tflops=989.4)
        assert abs(t / p.fused_us - 1) <= 0.15, (p.run, t, p.fused_us)


@requires_h200
def test_sweep_points_read_the_shapes_the_runs_recorded() -> None:
    """Each point's shape is the sweep's (MANIFEST: B=4, H=16, d=64, causal) and its time the fused kernels'."""
    from tracekit.run.calibrate import sweep_points

    points = sweep_points(SWEEP, "cudnn")
    assert [p.len_q for p in points] == [512, 1024, 2048, 4096]
    for p in points:
        assert (p.batch_heads, p.len_k, p.head_dim, p.causal) == (64, p.len_q, 64, True)
        assert p.flops == 4 * 64 * p.len_q ** 2 * 64 / 2
        assert p.fused_us > 0 and p.small_us >= 0
    assert [p.fused_us for p in points] == sorted(p.fused_us for p in points)


def test_replace_keeps_a_calibration_frozen() -> None:
    assert H200 is not None
    with pytest.raises(AttributeError):
        H200.eta_max = 1.0  # type: ignore[misc]
    assert replace(H200, eta_max=0.1).eta_max == 0.1


# -- one hand-built eager block: every figure known by construction -------------------------------------------------
MASK_K = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
          "at::native::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}>(int)")
SOFT_K = "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 8, false, false>(x)"
COPY_K = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
          "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const>(int)")
BF = "c10::BFloat16"
B, HQ, HKV, L, D = 2, 8, 2, 256, 64
# (kernel, µs) launched by each op, back to back on one stream: the busy shares are the durations
KERNELS = {"proj": 30.0, "copy": 20.0, "score": 40.0, "mask": 10.0, "soft": 25.0, "context": 30.0, "out": 30.0}


def _gqa_block(device: str = "NVIDIA H200", dims: bool = True, mask: bool = True, d: int = D) -> TraceBuilder:
    """ProfilerStep#1 > layer0.attention: a q projection, HF repeat_kv's copy of K (H_kv 2 to 8 heads), the eager
    core (matmul, masked_fill, softmax, matmul) and the output projection, each op launching one kernel."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": device}])
    b.annotation("ProfilerStep#1", 0, 400)
    b.annotation("layer0.attention", 1, 390)
    t, k = 2.0, 1000.0

    def op(name: str, kernel: str, us: float, d: list | None = None, types: list | None = None) -> None:
        nonlocal t, k
        ev = b.op(name, t, 20)
        if dims and d is not None:
            with_dims(ev, d, types or [BF] * len(d))
        b.launch(kernel, t + 1, 1, k, us)
        t, k = t + 30, k + us

    op("aten::linear", CUTLASS_BF16_GEMM, KERNELS["proj"], [[B, L, 512], [512, 512]])
    b.op("aten::reshape", t, 25)
    with_dims(b.op("aten::clone", t + 1, 23), [[B, HKV, HQ // HKV, L, d], []], [BF, "Scalar"])
    b.op("aten::copy_", t + 2, 20)
    b.launch(COPY_K, t + 3, 1, k, KERNELS["copy"])
    t, k = t + 30, k + KERNELS["copy"]
    op("aten::matmul", CUTLASS_BF16_GEMM, KERNELS["score"], [[B, HQ, L, d], [B, HQ, d, L]])
    if mask:
        op("aten::masked_fill", MASK_K, KERNELS["mask"], [[B, HQ, L, L], [1, 1, L, L], []], [BF, "bool", "Scalar"])
    op("aten::softmax", SOFT_K, KERNELS["soft"], [[B, HQ, L, L], [], []], [BF, "Scalar", "Scalar"])
    op("aten::matmul", CUTLASS_BF16_GEMM, KERNELS["context"], [[B, HQ, L, L], [B, HQ, L, d]])
    op("aten::linear", CUTLASS_BF16_GEMM, KERNELS["out"], [[B, L, 512], [512, 512]])
    return b


def _one(tmp_path: Path, b: TraceBuilder, **kw: str) -> WhatIf:
    [w] = whatif(b.write(tmp_path / "t.json"), **kw)
    return w.check()


def test_a_hand_built_block_gives_the_figures_of_its_construction(tmp_path: Path) -> None:
    w = _one(tmp_path, _gqa_block(), backend="cudnn")
    [row] = w.blocks
    core = KERNELS["score"] + KERNELS["mask"] + KERNELS["soft"] + KERNELS["context"]
    assert row.block_us == pytest.approx(sum(KERNELS.values()))
    assert row.eager_core_us == pytest.approx(core)
    assert row.repeat_kv_us == pytest.approx(KERNELS["copy"])
    assert row.shape == Shape(batch_heads=B * HQ, batch=B, heads_q=HQ, heads_kv=HKV, len_q=L, len_k=L, head_dim=D,
                              dtype="bf16")
    assert (row.mask, row.mask_assumed, row.confidence) == ("causal", True, "in-scope")
    cal = calibration("NVIDIA H200", "cudnn")
    assert cal is not None
    flops = 4 * B * HQ * L * L * D / 2  # causal, Lq = Lk: half the two products
    n_cta = B * HQ * 2  # ceil(256 / 128) query tiles per head
    by_hand = flops / (cal.eta_max * L / (L + cal.l_half) * (n_cta / 132) * 989.4e12) * 1e6
    assert row.flops == flops
    assert row.fused_us == pytest.approx(max(cal.floor_us, by_hand), abs=1e-3)
    assert row.fused_block_us == pytest.approx(sum(KERNELS.values()) - core - KERNELS["copy"] + row.fused_us
                                               + cal.small_us, abs=2e-3)
    assert row.saving_us == pytest.approx(row.block_us - row.fused_block_us, abs=2e-3)
    assert [(s.step, s.saving_us) for s in w.per_step] == [(1, row.saving_us)]


def test_the_mask_option_and_auto_without_a_mask_op(tmp_path: Path) -> None:
    causal = _one(tmp_path, _gqa_block(), backend="cudnn", mask="causal").blocks[0]
    none = _one(tmp_path, _gqa_block(), backend="cudnn", mask="none").blocks[0]
    dense = _one(tmp_path, _gqa_block(), backend="cudnn", mask="dense").blocks[0]
    assert none.flops == 2 * causal.flops and dense.flops == none.flops
    assert (causal.mask_assumed, none.mask_assumed) == (False, False)
    assert dense.confidence == "masked" and none.confidence == "in-scope"
    unmasked = _one(tmp_path, _gqa_block(mask=False), backend="cudnn").blocks[0]
    assert (unmasked.mask, unmasked.mask_assumed) == ("none", True)


def test_no_number_without_shapes_or_a_calibrated_device(tmp_path: Path) -> None:
    bare = _one(tmp_path, _gqa_block(dims=False), backend="cudnn").blocks[0]
    assert bare.fused_us is None and bare.confidence == "none" and "record_shapes" in (bare.reason or "")
    other = _one(tmp_path, _gqa_block(device="NVIDIA GeForce RTX 4090"))
    assert other.calibration is None and other.blocks[0].fused_us is None
    assert "no fused-attention calibration for NVIDIA GeForce RTX 4090" in (other.reason or "")


def test_best_picks_the_fastest_backend_and_all_lists_each(tmp_path: Path) -> None:
    path = _gqa_block().write(tmp_path / "t.json")
    every = whatif(path, backend="all")
    assert [w.backend for w in every] == sorted(BACKENDS, key=lambda be: next(
        w.totals.fused_us for w in every if w.backend == be))
    [best] = whatif(path)
    assert best.backend == every[0].backend
    assert best.totals.fused_us == min(w.totals.fused_us for w in every)


# -- the shared H200 sweep: eager_L against the measured sdpa-cudnn_L ------------------------------------------------
def _fused_kernel_us(run: str) -> float:
    """The median duration of the cuDNN SDPA forward kernels of a sweep run: a walk of the raw JSON."""
    with gzip.open(sweep_file(run)) as f:
        doc = json.load(f)
    durs = [e["dur"] for e in doc["traceEvents"] if e.get("cat") == "kernel" and "sdpa" in e.get("name", "")
            and "cudnn" in e.get("name", "")]
    assert durs
    return statistics.median(durs)


@requires_h200
@pytest.mark.parametrize("length", [1024, 2048, 4096])
def test_eager_l_predicts_the_measured_cudnn_kernel_within_15_percent(length: int) -> None:
    [w] = whatif(sweep_file(f"eager_{length}"), backend="cudnn")
    measured = _fused_kernel_us(f"sdpa-cudnn_{length}")
    for b in w.blocks:
        assert b.fused_us is not None and b.confidence == "in-scope"
        assert abs(b.fused_us / measured - 1) <= 0.15, (b.name, b.fused_us, measured)


@requires_h200
def test_the_launch_check_fires_at_512() -> None:
    """At L = 512 the measured latency got worse with SDPA (summary.md): the host outlasts the fused block."""
    [w] = whatif(sweep_file("eager_512"), backend="cudnn")
    assert w.blocks and all(b.launch_bound_predicted for b in w.blocks)



# -- the ratios (RATIOS): published FlashAttention-3 figures, applied where a block differs from the calibration -----
# The paper's bars (arXiv:2407.08608, Figures 5 and 6; H100 SXM5, TFLOP/s at L = 512 .. 16k), read off it here
# independently of tracekit.calibration.PUBLISHED_TFLOPS: each factor is the median over L of one series over another.
PAPER = {"cudnn d64 causal": (225, 288, 334, 363, 379, 388), "cudnn d128 causal": (315, 410, 484, 518, 529, 539),
         "cudnn d64 none": (335, 373, 395, 408, 412, 413), "cudnn d64 none bwd": (266, 348, 395, 417, 432, 433),
         "fa2 d64 causal": (180, 229, 262, 284, 295, 299), "fa2 d128 causal": (191, 260, 298, 319, 333, 335),
         "fa2 d64 none": (282, 306, 318, 321, 322, 324), "fa2 d64 none bwd": (198, 238, 264, 279, 287, 291)}


def _median_ratio(a: str, b: str) -> float:
    return round(statistics.median(x / y for x, y in zip(PAPER[a], PAPER[b])), 2)


@pytest.mark.parametrize(("backend", "applies", "over", "under", "by_hand"), [
    ("cudnn", "head_dim", "cudnn d128 causal", "cudnn d64 causal", 1.41),
    ("cudnn", "no_mask", "cudnn d64 none", "cudnn d64 causal", 1.15),
    ("cudnn", "backward", "cudnn d64 none bwd", "cudnn d64 none", 1.01),
    ("flash", "head_dim", "fa2 d128 causal", "fa2 d64 causal", 1.13),
    ("flash", "no_mask", "fa2 d64 none", "fa2 d64 causal", 1.17),
    ("flash", "backward", "fa2 d64 none bwd", "fa2 d64 none", 0.85),
])
def test_each_sourced_ratio_is_the_median_of_the_published_figures(backend: str, applies: str, over: str,
                                                                    under: str, by_hand: float) -> None:
    r = ratio(backend, applies)
    assert r is not None and r.source is not None and "arXiv:2407.08608" in r.source
    assert r.factor == _median_ratio(over, under) == by_hand


def test_a_ratio_without_a_source_stays_one() -> None:
    """The paper has no memory-efficient kernel: its rows keep 1.0 and no source."""
    for applies in ("head_dim", "no_mask", "backward"):
        r = ratio("efficient", applies)
        assert r is not None and r.factor == 1.0 and r.source is None
    assert {(r.backend, r.applies) for r in RATIOS} == {(b, a) for b in BACKENDS
                                                       for a in ("head_dim", "no_mask", "backward")}


def _facts(head_dim: int = 64, phase: Phase = Phase.FORWARD) -> CoreFacts:
    shape = Shape(batch_heads=16, batch=2, heads_q=8, heads_kv=8, len_q=256, len_k=256, head_dim=head_dim,
                  dtype="bf16")
    return CoreFacts(name="a", kind="a", step=1, ordinal=0, phase=phase, shape=shape, mask_op=True, block_us=100.0,
                     eager_core_us=50.0, repeat_kv_us=0.0, host_us=None)


def test_the_ratios_multiply_where_the_block_differs_and_divide_going_back() -> None:
    cudnn, flash = calibration("H200", "cudnn"), calibration("H200", "flash")
    assert cudnn is not None and flash is not None and cudnn.head_dim == 64 and cudnn.causal
    assert ratio_for(_facts(), cudnn, "causal") == 1.0  # what the calibration ran
    assert ratio_for(_facts(), cudnn, "none") == 1.15
    assert ratio_for(_facts(), cudnn, "dense") == 1.15  # a dense mask is predicted unmasked (a lower bound)
    assert ratio_for(_facts(128), cudnn, "causal") == 1.41
    assert ratio_for(_facts(96), cudnn, "causal") == 1.0  # no published figure for 96
    assert ratio_for(_facts(128, Phase.BACKWARD), flash, "none") == pytest.approx(1.13 * 1.17 * 0.85)
    at_128 = replace(cudnn, head_dim=128, causal=False)  # a user's calibration at head dim 128, no mask
    assert ratio_for(_facts(64), at_128, "causal") == pytest.approx(1 / (1.41 * 1.15))
    assert ratio_for(_facts(64), calibration("H200", "efficient"), "none") == 1.0  # type: ignore[arg-type]


@pytest.mark.parametrize(("backend", "d", "label", "factor"), [
    ("cudnn", 128, "in-scope", 1.41), ("flash", 128, "in-scope", 1.13), ("efficient", 128, "uncalibrated", 1.0),
    ("cudnn", 96, "uncalibrated", 1.0)])
def test_a_head_dim_is_calibrated_only_where_a_published_ratio_reaches_it(tmp_path: Path, backend: str, d: int,
                                                                           label: str, factor: float) -> None:
    [row] = _one(tmp_path, _gqa_block(d=d), backend=backend).blocks
    cal = calibration("NVIDIA H200", backend)
    assert cal is not None and row.shape is not None and row.shape.head_dim == d
    flops = 4 * B * HQ * L * L * d / 2
    by_hand = flops / (cal.eta_max * L / (L + cal.l_half) * factor * (B * HQ * 2 / 132) * 989.4e12) * 1e6
    assert row.confidence == label
    assert row.fused_us == pytest.approx(max(cal.floor_us, by_hand), abs=1e-3)


def test_an_unmasked_block_runs_at_the_no_mask_ratio(tmp_path: Path) -> None:
    causal = _one(tmp_path, _gqa_block(), backend="cudnn", mask="causal").blocks[0]
    none = _one(tmp_path, _gqa_block(), backend="cudnn", mask="none").blocks[0]
    assert none.flops == 2 * causal.flops and none.confidence == "in-scope"
    assert none.fused_us is not None and causal.fused_us is not None
    assert causal.fused_us > 4.0  # above the floor: twice the work at 1.15 times the rate
    assert none.fused_us == pytest.approx(causal.fused_us * 2 / 1.15, rel=1e-3)


def test_whatif_takes_a_calibration_file_and_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tracekit.whatif(..., calibration=FILE): the file's entry for the trace's device, its origin in the output."""
    monkeypatch.delenv("TRACEKIT_CALIBRATION", raising=False)
    stored = calibration("H200", "cudnn")
    assert stored is not None
    mine = replace(stored, eta_max=stored.eta_max / 2, source="half the built-in efficiency")
    cal = tmp_path / "mine.json"
    cal.write_text(json.dumps(calibration_document([mine], {"device_name": "NVIDIA H200"})))
    path = _gqa_block().write(tmp_path / "t.json")
    [w] = whatif(path, backend="all", calibration=cal)
    assert w.backend == "cudnn" and w.calibration is not None and w.calibration["origin"] == str(cal)
    [built_in] = whatif(path, backend="cudnn")
    assert built_in.calibration is not None and built_in.calibration["origin"] == "built-in"
    fused, base = w.blocks[0].fused_us, built_in.blocks[0].fused_us
    assert fused is not None and base is not None
    assert base > stored.floor_us and fused == pytest.approx(2 * base, abs=2e-3)  # half the efficiency
    (tmp_path / "bad.json").write_text('{"tracekit_calibration": 1, "entries": [{"eta_max": -1}]}')
    with pytest.raises(UsageError, match="bad.json"):
        whatif(path, calibration=tmp_path / "bad.json")
    monkeypatch.setenv("TRACEKIT_CALIBRATION", str(tmp_path / "bad.json"))
    [warned] = whatif(path, backend="cudnn")
    assert warned.calibration == built_in.calibration and len(warned.warnings) == 1
