"""One row per block: the fused kernel a calibrated backend would run for its shape, the block around it, the saving.

Predicted fused block = block busy - eager core busy - repeat_kv copies + fused kernel + SDPA's small kernels
(docs/whatif.md). A row without shapes, or on a device with no calibration, says why and gives no number.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...calibration import CALIBRATIONS, RATIO_HEAD_DIMS, Calibration, calibration, ratio
from ...hardware import lookup
from ...results.whatif import Shape, WhatIf, WhatIfBlock, WhatIfStep
from ...vocab import Phase
from ..flops import attention_flops
from .model import fused_time_us

__all__ = ["CONFIDENCE_RULES", "ConfidenceRule", "CoreFacts", "predict", "predict_block", "resolve_mask"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CoreFacts:
    """What the trace says of one block that a prediction reads (gathered by :func:`core_facts`)."""

    name: str
    kind: str
    step: int | None
    ordinal: int
    phase: Phase
    shape: Shape | None  # None: no eager core with recorded shapes (``reason`` says which)
    mask_op: bool  # a mask op (masked_fill, where, an additive mask) between the score and the softmax
    block_us: float
    eager_core_us: float
    repeat_kv_us: float
    host_us: float | None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ConfidenceRule:
    """A row's confidence label: the first rule whose test holds names it (CONFIDENCE_ERRORS states its error)."""

    label: str
    test: Callable[[CoreFacts, str, Calibration], bool]
    why: str


CONFIDENCE_RULES: tuple[ConfidenceRule, ...] = (
    ConfidenceRule("masked", lambda f, mask, cal: mask == "dense",
                   "a dense mask's kernel may skip no tile or many: the unmasked time is a lower bound only"),
    ConfidenceRule("uncalibrated", lambda f, mask, cal: f.shape is not None and not head_dim_covered(f.shape.head_dim,
                                                                                                    cal),
                   "the calibration ran one head dim; another one, without a published ratio (RATIOS), runs at an "
                   "efficiency nothing measured"),
    ConfidenceRule("backward", lambda f, mask, cal: f.phase == Phase.BACKWARD,
                   "no backward in the calibration: the FLOP count carries it, at the forward's efficiency times "
                   "the published backward ratio (RATIOS)"),
    ConfidenceRule("small", lambda f, mask, cal: f.shape is not None and f.shape.len_q < cal.tile_q,
                   "fewer queries than one CTA's tile: the kernel's fixed costs dominate"),
    ConfidenceRule("in-scope", lambda f, mask, cal: True, "forward, Lq >= one tile, causal or no mask, as calibrated"),
)


def confidence(f: CoreFacts, mask: str, cal: Calibration) -> str:
    return next(r.label for r in CONFIDENCE_RULES if r.test(f, mask, cal))


def resolve_mask(f: CoreFacts, option: str) -> tuple[str, bool]:
    """(the mask, whether it was assumed): ``auto`` guesses causal when Lq = Lk and the core holds a mask op,
    otherwise none (an eager trace cannot tell a causal mask from a sliding window or padding)."""
    if option != "auto":
        return option, False
    square = f.shape is not None and f.shape.len_q == f.shape.len_k
    return ("causal" if square and f.mask_op else "none"), True


def predict_block(f: CoreFacts, cal: Calibration | None, peak_tflops: float | None, mask_option: str,
                  no_cal_reason: str) -> WhatIfBlock:
    """One block's row: the fused kernel, the fused block and the saving, or a reason and no number."""
    row = WhatIfBlock(name=f.name, kind=f.kind, step=f.step, ordinal=f.ordinal, phase=f.phase, shape=f.shape,
                      mask=None, mask_assumed=False, flops=None, block_us=f.block_us, eager_core_us=f.eager_core_us,
                      repeat_kv_us=f.repeat_kv_us, host_us=f.host_us, fused_us=None, fused_block_us=None,
                      saving_us=None, confidence="none", reason=f.reason)
    if f.shape is None:
        return row
    if cal is None or peak_tflops is None:
        row.reason = no_cal_reason
        return row
    s = f.shape
    mask, assumed = resolve_mask(f, mask_option)
    flops = attention_flops(s.batch_heads, s.len_q, s.len_k, s.head_dim, s.head_dim, causal=mask == "causal",
                            backward=f.phase == Phase.BACKWARD)
    ratio = ratio_for(f, cal, mask)
    fused = fused_time_us(cal, flops=flops, batch_heads=s.batch_heads, len_q=s.len_q, len_k=s.len_k,
                          peak_tflops=peak_tflops, ratio=ratio)
    fused_block = f.block_us - f.eager_core_us - f.repeat_kv_us + fused + cal.small_us
    row.mask, row.mask_assumed, row.flops, row.fused_us = mask, assumed, flops, round(fused, 3)
    row.fused_block_us = round(fused_block, 3)
    row.saving_us = round(f.block_us - row.fused_block_us, 3)
    row.confidence = confidence(f, mask, cal)
    row.reason = _assumption(row)
    row.launch_bound_predicted = f.host_us is not None and f.host_us > row.fused_block_us
    return row


def head_dim_covered(head_dim: int, cal: Calibration) -> bool:
    """Whether a block's head dim is the calibration's, or one a sourced head-dim ratio (RATIOS) reaches."""
    if head_dim == cal.head_dim:
        return True
    r = ratio(cal.backend, "head_dim")
    return {head_dim, cal.head_dim} == RATIO_HEAD_DIMS and r is not None and r.source is not None


def ratio_for(f: CoreFacts, cal: Calibration, mask: str) -> float:
    """The product of the RATIOS that apply to this block (1.0 inside what the calibration ran): each one where
    the block differs from the calibration, multiplied going its way (64 -> 128, causal -> no mask, forward ->
    backward) and divided going back."""
    r = 1.0
    if f.shape is not None and f.shape.head_dim != cal.head_dim and \
            {f.shape.head_dim, cal.head_dim} == RATIO_HEAD_DIMS:
        r *= _factor(cal.backend, "head_dim", f.shape.head_dim > cal.head_dim)
    unmasked = mask != "causal"  # none, or dense: predicted unmasked (a lower bound)
    if unmasked == cal.causal:
        r *= _factor(cal.backend, "no_mask", unmasked)
    if f.phase == Phase.BACKWARD and cal.phase == "forward":
        r *= _factor(cal.backend, "backward", True)
    return r


def _factor(backend: str, applies: str, forward: bool) -> float:
    row = ratio(backend, applies)
    factor = row.factor if row is not None else 1.0
    return factor if forward else 1.0 / factor


def _assumption(row: WhatIfBlock) -> str | None:
    if row.mask_assumed and row.mask == "causal":
        return "causal mask assumed (Lq = Lk and a mask op in the core); --mask dense if it is a padding mask"
    if row.mask_assumed:
        return "no mask assumed (no mask op, or Lq != Lk); --mask causal or dense if the model masks"
    return None


def per_step(rows: Sequence[WhatIfBlock]) -> list[WhatIfStep]:
    """The predicted blocks summed per ProfilerStep (None: outside any step), in step order."""
    by: dict[int | None, list[float]] = {}
    for b in rows:
        if b.fused_block_us is None or b.saving_us is None:
            continue
        acc = by.setdefault(b.step, [0.0, 0.0, 0.0])
        acc[0] += b.block_us
        acc[1] += b.fused_block_us
        acc[2] += b.saving_us
    return [WhatIfStep(step=s, eager_us=e, fused_us=f, saving_us=v)
            for s, (e, f, v) in sorted(by.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))]


def predict(facts: Sequence[CoreFacts], *, source: str, device: str | None, backend: str,
            mask_option: str = "auto", entries: Sequence[Calibration] = CALIBRATIONS) -> WhatIf:
    """The whatif result for one trace's blocks on one backend, with the calibration ``entries`` (the built-in
    ones, or tracekit.calibration.with_user_entries's)."""
    cal = calibration(device, backend, entries)
    peaks = lookup(device) if device else None
    reason = (f"no fused-attention calibration for {device or 'an unknown device'}"
              + ("" if cal is not None or device is None else f" and backend {backend}"))
    rows = []
    for f in facts:
        dtype_peak = peaks.tflops(f.shape.dtype) if peaks is not None and f.shape and f.shape.dtype else None
        rows.append(predict_block(f, cal, dtype_peak, mask_option, reason))
    return WhatIf(source=source, backend=backend, device=device, mask_option=mask_option,
                  calibration=_cal_dict(cal), blocks=rows, per_step=per_step(rows),
                  reason=None if cal is not None else reason)


def _cal_dict(cal: Calibration | None) -> dict[str, object] | None:
    """The entry used, and where it came from: ``origin`` is "built-in" or the user calibration file's path."""
    return None if cal is None else {**cal.as_dict(), "origin": cal.origin}
