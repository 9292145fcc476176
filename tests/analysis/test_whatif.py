"""The fused-attention model of ``tracekit whatif`` (tracekit.analysis.whatif) and its calibration (issue 39).

Expectations come from arithmetic done here (FLOP counts by hand, curves with known parameters) and from the
shared H200 sweep's own traces, never from a figure tracekit printed.
"""

from __future__ import annotations

from dataclasses import replace
from math import isclose

import orjson
import pytest

from support.paths import SWEEP, requires_h200
from tracekit.analysis.flops import attention_flops, op_cost
from tracekit.analysis.whatif import efficiency, fit_curve, fused_time_us, occupancy
from tracekit.calibration import BACKENDS, CALIBRATIONS, calibration, calibrations_for
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
