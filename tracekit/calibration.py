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

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from .hardware import normalise

__all__ = ["BACKENDS", "BUILT_IN", "CALIBRATIONS", "RATIOS", "Calibration", "Ratio", "calibration", "calibrations_for",
           "FA3_PAPER", "PUBLISHED_TFLOPS", "RATIO_HEAD_DIMS", "ratio", "with_user_entries"]

BUILT_IN = "built-in"  # an entry's origin when it ships in CALIBRATIONS below

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
    origin: str = "built-in"  # BUILT_IN, or the user calibration file it was read from (tracekit.io.calibration_file)

    def as_dict(self) -> dict[str, object]:
        """The entry as the JSON output and a calibration file spell it (one spelling, for both)."""
        return {"device": self.device, "backend": self.backend, "eta_max": self.eta_max, "l_half": self.l_half,
                "sms": self.sms, "tile_q": self.tile_q, "floor_us": self.floor_us, "small_us": self.small_us,
                "head_dim": self.head_dim, "causal": self.causal, "phase": self.phase, "points": self.points,
                "source": self.source}


@dataclass(frozen=True, slots=True, kw_only=True)
class Ratio:
    """A factor on the efficiency where a block differs from what the calibration covers, for one backend, with
    its source. ``factor`` multiplies the efficiency going from the calibrated side to the other (from head dim
    64 to 128, from causal to no mask, from forward to backward); the way back divides by it."""

    name: str
    backend: str  # one of BACKENDS
    applies: str  # "head_dim" (64 <-> 128), "no_mask" (causal <-> none), "backward" (forward -> backward)
    factor: float
    source: str | None  # the published figures it comes from; None: no source, so 1.0 and the row says so
    why: str


# Published H100 SXM5 throughput (BF16/FP16, TFLOP/s at sequence lengths 512, 1k, 2k, 4k, 8k, 16k; batch x
# length = 16k tokens, heads x head dim = 2048) in FlashAttention-3: Shah, Bikshandi, Zhang, Thakkar, Ramani, Dao,
# "FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision", arXiv:2407.08608 (2024),
# section 4.1, Figure 5 (forward, without and with causal mask, head dim 64 and 128) and Figure 6 (backward,
# without causal mask), the bars' labels. Its "cuDNN" series is what SDPA's cudnn backend runs; its
# "FlashAttention-2" series is the kernel SDPA's flash backend ships. Its FLOP counts are this project's
# (4*B*H*L^2*d, half with a causal mask, 2.5x backward: the count of the flash-attention repository's
# benchmarks/benchmark_flash_attention.py), so a ratio of two series at one length is a ratio of efficiencies.
FA3_PAPER = ("FlashAttention-3 (Shah et al., arXiv:2407.08608, 2024), section 4.1, Figure 5 (forward) and Figure 6 "
             "(backward), H100 SXM5, BF16/FP16, L = 512..16k")
PUBLISHED_TFLOPS: dict[tuple[str, int, str, str], tuple[float, ...]] = {
    # (backend, head dim, mask, phase): the series at L = 512, 1k, 2k, 4k, 8k, 16k
    ("cudnn", 64, "causal", "forward"): (225, 288, 334, 363, 379, 388),
    ("cudnn", 128, "causal", "forward"): (315, 410, 484, 518, 529, 539),
    ("cudnn", 64, "none", "forward"): (335, 373, 395, 408, 412, 413),
    ("cudnn", 64, "none", "backward"): (266, 348, 395, 417, 432, 433),
    ("flash", 64, "causal", "forward"): (180, 229, 262, 284, 295, 299),
    ("flash", 128, "causal", "forward"): (191, 260, 298, 319, 333, 335),
    ("flash", 64, "none", "forward"): (282, 306, 318, 321, 322, 324),
    ("flash", 64, "none", "backward"): (198, 238, 264, 279, 287, 291),
}


def _published_ratio(backend: str, to: tuple[int, str, str], frm: tuple[int, str, str]) -> float:
    """The median over the published lengths of one series over another (2 decimals): one factor for all
    lengths, since the model's curve carries the length."""
    a, b = PUBLISHED_TFLOPS[(backend, *to)], PUBLISHED_TFLOPS[(backend, *frm)]
    return round(median(x / y for x, y in zip(a, b)), 2)


def _sourced(backend: str, applies: str, to: tuple[int, str, str], frm: tuple[int, str, str], why: str) -> Ratio:
    return Ratio(name=f"{applies}-{backend}", backend=backend, applies=applies,
                 factor=_published_ratio(backend, to, frm), source=FA3_PAPER, why=why)


_NO_SOURCE = ("no published figure for this backend (the FlashAttention-3 paper has none for the memory-efficient "
              "kernel): 1.0, and the row is labelled")
RATIOS: tuple[Ratio, ...] = (
    *(_sourced(b, "head_dim", (128, "causal", "forward"), (64, "causal", "forward"),
               "head dim 128 over 64, causal forward: larger tiles per byte moved run closer to peak")
      for b in ("cudnn", "flash")),
    *(_sourced(b, "no_mask", (64, "none", "forward"), (64, "causal", "forward"),
               "no mask over causal, head dim 64 forward: no half-masked diagonal tiles (the ratio falls from "
               "about 1.5 at L = 512 to 1.1 at 16k)") for b in ("cudnn", "flash")),
    *(_sourced(b, "backward", (64, "none", "backward"), (64, "none", "forward"),
               "backward over forward, head dim 64, no mask (the paper has no causal backward: a causal one is "
               "assumed to keep the same ratio); labelled backward, +-20%") for b in ("cudnn", "flash")),
    *(Ratio(name=f"{a}-efficient", backend="efficient", applies=a, factor=1.0, source=None, why=_NO_SOURCE)
      for a in ("head_dim", "no_mask", "backward")),
)
# The head dims a head_dim ratio relates: another pair has no figure (factor 1.0, label uncalibrated).
RATIO_HEAD_DIMS: frozenset[int] = frozenset({64, 128})


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


def calibration(device: str | None, backend: str,
                entries: Sequence[Calibration] = CALIBRATIONS) -> Calibration | None:
    """The entry for a device name (as the trace spells it) and a backend, or None."""
    model = normalise(device) if device else None
    return next((c for c in entries if c.device == model and c.backend == backend), None)


def calibrations_for(device: str | None, entries: Sequence[Calibration] = CALIBRATIONS) -> list[Calibration]:
    """Every backend's entry for a device name, in :data:`BACKENDS` order ([] when none)."""
    found = (calibration(device, b, entries) for b in BACKENDS)
    return [c for c in found if c is not None]


def with_user_entries(user: Sequence[Calibration]) -> tuple[Calibration, ...]:
    """The entries a prediction uses with a user's calibration file: the user's, and the built-in ones of the
    devices the file does not name. Why whole devices: ``--backend best`` compares backends, and that is only
    fair between entries from one sweep on one machine."""
    theirs = {c.device for c in user}
    return (*user, *(c for c in CALIBRATIONS if c.device not in theirs))


def ratio(backend: str, applies: str) -> Ratio | None:
    """The :data:`RATIOS` row for a backend and a difference from the calibration, or None."""
    return next((r for r in RATIOS if r.backend == backend and r.applies == applies), None)
