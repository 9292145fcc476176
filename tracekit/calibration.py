"""How fast a fused attention kernel runs on a device: the calibration that ``tracekit whatif`` predicts with.

Why data beside the peak table (tracekit.hardware): a prediction is only as good as what it was fitted to, so
each entry names the sweep it came from, the software that ran it and the script that fitted it. A device or
backend with no entry gets no prediction ("no fused-attention calibration for <device>"), never a guess from a
neighbouring device.

The model (docs/whatif.md): a fused kernel's time is ``max(floor, F / (eta(Lk) * r * u * peak))``, with F the
fused FLOP count (tracekit.analysis.flops), ``eta(Lk) = eta_max * Lk / (Lk + l_half)`` its efficiency curve in
the key length, ``u`` the last wave's occupancy of the SMs and ``r`` the product of the :data:`RATIOS` that apply.
"""

from __future__ import annotations

from dataclasses import dataclass

from .hardware import normalise

__all__ = ["BACKENDS", "CALIBRATIONS", "RATIOS", "Calibration", "Ratio", "calibration", "calibrations_for"]

# The fused backends a prediction can be made for, in the order ``--backend all`` lists them. They are SDPA's
# (torch.nn.attention.SDPBackend): what a user switching from eager attention would call.
BACKENDS: tuple[str, ...] = ("cudnn", "flash", "efficient")


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """One device and backend: the efficiency curve, the SM count its occupancy term reads, the shortest kernel
    time, and the small kernels SDPA runs beside the fused one per call; with where they came from."""

    device: str  # a tracekit.hardware.PEAKS key
    backend: str  # one of BACKENDS
    eta_max: float  # efficiency (share of the dtype's dense peak) as Lk grows without bound
    l_half: float  # the key length at which the efficiency is half eta_max
    sms: int  # streaming multiprocessors: the occupancy term's wave size
    tile_q: int  # query rows per CTA: n_cta = batch * heads_q * ceil(Lq / tile_q)
    floor_us: float  # no fused kernel call takes less
    small_us: float  # SDPA's own small kernels per call beside the fused one (memsets, casts)
    head_dim: int  # the head dim the sweep ran: another one is outside the calibration
    causal: bool  # the mask the sweep ran
    phase: str  # "forward": the sweep ran no backward
    source: str  # the sweep, the script that fitted it, and the software that ran it
    points: int  # how many (shape, time) points the fit used


@dataclass(frozen=True, slots=True, kw_only=True)
class Ratio:
    """A factor on the efficiency where a block differs from what the calibration covers, with its source."""

    name: str
    factor: float
    applies: str  # when: "head_dim_128", "no_mask", "backward"
    why: str


# Fitted by scripts/fit_whatif.py from ../shared/traces/h200/sweep (sdpa-cudnn_*, sdpa-flash_*, sdpa-efficient_*;
# tests/analysis/test_whatif.py refits and compares). One H200 SXM, torch 2.11.0+cu130, CUDA 13.0 (its cuDNN),
# bf16, causal, B=4, H=16, head dim 64, L in 512..4096, forward only.
_H200_SOURCE = ("fitted by scripts/fit_whatif.py to ../shared/traces/h200/sweep (scripts/profile_attention.py on "
                "one H200 SXM: torch 2.11.0+cu130, CUDA 13.0 and its cuDNN; bf16, causal, B=4, H=16, d=64, "
                "L=512..4096, forward)")
CALIBRATIONS: tuple[Calibration, ...] = (
    Calibration(device="H200", backend="cudnn", eta_max=0.5386, l_half=1149.7, sms=132, tile_q=128, floor_us=4.0,
                small_us=1.49, head_dim=64, causal=True, phase="forward", source=_H200_SOURCE, points=4),
    Calibration(device="H200", backend="flash", eta_max=0.3148, l_half=916.3, sms=132, tile_q=128, floor_us=4.0,
                small_us=0.74, head_dim=64, causal=True, phase="forward", source=_H200_SOURCE, points=4),
    Calibration(device="H200", backend="efficient", eta_max=0.1377, l_half=625.1, sms=132, tile_q=128, floor_us=4.0,
                small_us=0.73, head_dim=64, causal=True, phase="forward", source=_H200_SOURCE, points=4),
)

# Where a block lies outside what the sweep ran. Each factor is 1.0 unless a fit or a published figure says
# otherwise; a row that needs one is labelled by the confidence rules (tracekit.analysis.whatif.CONFIDENCE_RULES).
RATIOS: tuple[Ratio, ...] = (
    Ratio(name="backward", factor=1.0, applies="backward",
          why="no backward in the calibration sweep: the backward's extra work is carried by its FLOP count "
              "(2.5x the forward, tracekit.analysis.flops), at the forward's efficiency; published FlashAttention "
              "backward kernels run below their forward's efficiency, so this errs low on time (label backward, "
              "+-20%)"),
    Ratio(name="other-head-dim", factor=1.0, applies="head_dim",
          why="the sweep ran head dim 64 only: another head dim is predicted at the same efficiency curve and "
              "labelled uncalibrated (larger head dims run closer to peak in published FlashAttention-3 and cuDNN "
              "figures, so this errs high on time)"),
    Ratio(name="no-mask", factor=1.0, applies="no_mask",
          why="the sweep ran causal only: a block without a mask is predicted at the causal curve for its full "
              "FLOP count (an unmasked kernel skips no tiles, so it runs at least as efficiently)"),
)


def calibration(device: str | None, backend: str) -> Calibration | None:
    """The entry for a device name (as the trace spells it) and a backend, or None."""
    model = normalise(device) if device else None
    return next((c for c in CALIBRATIONS if c.device == model and c.backend == backend), None)


def calibrations_for(device: str | None) -> list[Calibration]:
    """Every backend's entry for a device name, in :data:`BACKENDS` order ([] when none)."""
    found = (calibration(device, b) for b in BACKENDS)
    return [c for c in found if c is not None]
