"""What a fused attention kernel would take for an eager block's shapes (``tracekit whatif``; docs/whatif.md).

The model, per call: ``t = max(floor, F / (eta(Lk) * r * u * peak))``.

* ``F``: the fused FLOP count of the block's shape (tracekit.analysis.flops.attention_flops: 1/2 for causal,
  2.5x for backward), the count every efficiency figure uses.
* ``eta(Lk) = eta_max * Lk / (Lk + l_half)``: a fused kernel's share of the dense peak grows with the key length
  and saturates (each CTA streams Lk keys: fixed costs per tile amortise over them). Fitted per device and
  backend (tracekit.calibration) by :func:`fit_curve`.
* ``u = n_cta / (ceil(n_cta / SMs) * SMs)``, ``n_cta = batch * heads_q * ceil(Lq / tile_q)``: the last wave of
  CTAs leaves SMs idle.
* ``r``: the ratios (tracekit.calibration.RATIOS) where the block lies outside what the calibration ran.

Why a curve and not a roofline at a fixed efficiency: on the H200 sweep a fixed efficiency was 28-46% off,
because short keys leave the kernel far below its saturated rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import ceil

from ...calibration import Calibration

__all__ = ["efficiency", "fit_curve", "fused_time_us", "occupancy"]


def efficiency(cal: Calibration, len_k: int) -> float:
    """``eta(Lk)``: the fused kernel's share of the dense peak at this key length."""
    return cal.eta_max * len_k / (len_k + cal.l_half)


def occupancy(cal: Calibration, batch_heads: int, len_q: int) -> float:
    """``u``: the share of SM slots the CTAs fill over their waves (1.0 when they divide evenly)."""
    n_cta = batch_heads * ceil(len_q / cal.tile_q)
    if n_cta <= 0:
        return 1.0
    return n_cta / (ceil(n_cta / cal.sms) * cal.sms)


def fused_time_us(cal: Calibration, *, flops: float, batch_heads: int, len_q: int, len_k: int,
                  peak_tflops: float, ratio: float = 1.0) -> float:
    """The predicted fused kernel time of one call, µs."""
    rate = efficiency(cal, len_k) * ratio * occupancy(cal, batch_heads, len_q) * peak_tflops * 1e12
    return max(cal.floor_us, flops / rate * 1e6)


def fit_curve(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """``(eta_max, l_half)`` from ``(Lk, eta)`` points: ``1/eta = 1/eta_max + (l_half/eta_max) / Lk`` is a line
    in ``1/Lk``, fitted by least squares on relative error (weights ``eta²``: a kernel time's relative error is
    its ``1/eta``'s). Needs two distinct key lengths."""
    if len({lk for lk, _ in points}) < 2:
        raise ValueError("a curve needs points at two key lengths at least")
    sw = sx = sy = sxx = sxy = 0.0
    for lk, eta in points:
        x, y, w = 1.0 / lk, 1.0 / eta, eta * eta
        sw, sx, sy, sxx, sxy = sw + w, sx + w * x, sy + w * y, sxx + w * x * x, sxy + w * x * y
    slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    intercept = (sy - slope * sx) / sw
    if intercept <= 0 or slope < 0:
        raise ValueError(f"no saturating curve fits these points (1/eta = {intercept:.3g} + {slope:.3g}/Lk)")
    return 1.0 / intercept, slope / intercept
