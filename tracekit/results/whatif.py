"""What ``tracekit whatif`` predicts: per eager block, a fused kernel's time for its shapes, and the saving.

Why a result of its own (not fields on Attribution): a prediction is not a measurement. It has a backend, a
calibration with its provenance, a mask assumption and a confidence per row; ``tracekit attribute`` never computes
it (the 1 GB benchmark does not pay for it), and every view labels it as a prediction.
"""

from __future__ import annotations

from collections.abc import Iterator
from statistics import median
from dataclasses import dataclass, field

from ..vocab import Phase
from .invariants import EPS_US, close, expect

# Confidence labels, in the order their rules are tried (tracekit.analysis.whatif.CONFIDENCE_RULES), each with the
# error it states: None where no band is claimed.
CONFIDENCE_ERRORS: dict[str, float | None] = {
    "none": None,  # no shapes, an unknown device, no eager core: a reason and no number
    "masked": None,  # a dense mask: the fused time is a lower bound (the saving an upper bound)
    "uncalibrated": None,  # a head dim or backend outside the calibration
    "backward": 0.20,
    "small": 0.40,  # Lq < 128: one partial tile of queries per CTA
    "in-scope": 0.10,  # forward, Lq >= 128, causal or no mask, as calibrated
}
MASKS: tuple[str, ...] = ("causal", "none", "dense")


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    """One attention call's shape, as its eager core's recorded inputs give it. ``batch`` and ``heads_q`` are None
    where the score product ran on ``[batch * heads, L, d]`` (a bmm): only their product is known then."""

    batch_heads: int
    batch: int | None
    heads_q: int | None
    heads_kv: int | None
    len_q: int
    len_k: int
    head_dim: int
    dtype: str | None  # the dtype class of tracekit.hardware.DTYPES ("bf16", "fp16", "fp32", ...)

    def as_dict(self) -> dict[str, object]:
        return {"batch": self.batch, "heads_q": self.heads_q, "heads_kv": self.heads_kv,
                "batch_heads": self.batch_heads, "len_q": self.len_q, "len_k": self.len_k,
                "head_dim": self.head_dim, "dtype": self.dtype}


@dataclass(slots=True, kw_only=True)
class WhatIfBlock:
    """One block: its measured eager figures and, where a prediction can be made, the fused ones (µs per call)."""

    name: str
    kind: str
    step: int | None
    ordinal: int
    phase: Phase
    shape: Shape | None
    mask: str | None  # one of MASKS; None without a prediction
    mask_assumed: bool  # ``--mask auto`` guessed it
    flops: float | None  # the fused kernel's FLOP count for the shape and mask
    block_us: float  # the block's measured busy time
    eager_core_us: float  # the measured busy time of its score -> softmax -> context chain's kernels
    repeat_kv_us: float  # its GQA repeat_kv copies, which SDPA (enable_gqa) does not need
    host_us: float | None  # the block's host time per call
    fused_us: float | None  # the predicted fused kernel time; None with a reason
    fused_block_us: float | None  # block - eager core - repeat_kv + fused + SDPA's small kernels
    saving_us: float | None  # block - fused block
    confidence: str
    reason: str | None = None  # why there is no number, or what the number assumes
    launch_bound_predicted: bool | None = None  # the host time per call exceeds the predicted device time

    def check(self, where: str) -> None:
        expect(self.confidence in CONFIDENCE_ERRORS, lambda: f"{where}: confidence {self.confidence!r}")
        expect(self.eager_core_us >= -EPS_US and self.repeat_kv_us >= -EPS_US,
               lambda: f"{where}: negative eager core or repeat_kv time")
        expect(self.eager_core_us + self.repeat_kv_us <= self.block_us + EPS_US * 2,
               lambda: f"{where}: eager core {self.eager_core_us} + repeat_kv {self.repeat_kv_us} µs beyond the "
                       f"block's {self.block_us} µs")
        if self.fused_us is None:
            expect(self.confidence == "none" and bool(self.reason) and self.saving_us is None
                   and self.fused_block_us is None, lambda: f"{where}: no prediction without confidence none and a "
                                                            "reason")
            return
        expect(self.confidence != "none" and self.mask in MASKS and self.fused_us > 0,
               lambda: f"{where}: a prediction needs a mask and a positive fused time")
        assert self.fused_block_us is not None and self.saving_us is not None
        expect(close(self.block_us - self.fused_block_us, self.saving_us, 4, self.block_us),
               lambda: f"{where}: saving {self.saving_us} != block {self.block_us} - fused block "
                       f"{self.fused_block_us}")
        expect(self.fused_block_us >= self.fused_us - EPS_US,
               lambda: f"{where}: fused block {self.fused_block_us} below its fused kernel {self.fused_us}")


@dataclass(slots=True, kw_only=True)
class WhatIfStep:
    """One ProfilerStep's blocks with a prediction: measured busy, predicted busy and the saving, µs."""

    step: int | None
    eager_us: float
    fused_us: float
    saving_us: float


@dataclass(slots=True, kw_only=True)
class WhatIf:
    """The prediction for one trace and backend (``tracekit whatif``)."""

    source: str
    backend: str
    device: str | None
    calibration: dict[str, object] | None  # the entry used (tracekit.calibration), with its source; None: none
    mask_option: str  # what the user asked: auto, causal, none or dense
    blocks: list[WhatIfBlock] = field(default_factory=list)
    per_step: list[WhatIfStep] = field(default_factory=list)
    reason: str | None = None  # why nothing could be predicted at all (no calibration for the device)
    warnings: list[str] = field(default_factory=list)  # e.g. a bad $TRACEKIT_CALIBRATION file, ignored

    def predicted(self) -> Iterator[WhatIfBlock]:
        return (b for b in self.blocks if b.fused_us is not None)

    @property
    def totals(self) -> WhatIfStep:
        """Every predicted block summed (all steps): measured busy, predicted busy, saving."""
        rows = list(self.predicted())
        return WhatIfStep(step=None, eager_us=sum(b.block_us for b in rows),
                          fused_us=sum(b.fused_block_us or 0.0 for b in rows), saving_us=sum(b.saving_us or 0.0
                                                                                            for b in rows))

    def check(self) -> WhatIf:
        """Raise InvariantError unless every row and sum holds; returns self."""
        for i, b in enumerate(self.blocks):
            b.check(f"whatif block {i} ({b.name})")
        expect(self.calibration is not None or not any(True for _ in self.predicted()),
               "whatif: a prediction without a calibration")
        t = self.totals
        expect(close(sum(s.saving_us for s in self.per_step), t.saving_us, len(self.blocks) + 1, t.eager_us),
               lambda: f"whatif: per-step savings {sum(s.saving_us for s in self.per_step)} != total {t.saving_us}")
        for s in self.per_step:
            expect(close(s.eager_us - s.fused_us, s.saving_us, len(self.blocks) + 1, s.eager_us),
                   lambda: f"whatif step {s.step}: eager {s.eager_us} - fused {s.fused_us} != saving {s.saving_us}")
        return self


# -- rows: what every view shows, computed once here (the renderers only lay them out) ------------------------------
WHATIF_GROUPINGS: tuple[str, ...] = ("kind", "block", "step")


@dataclass(slots=True, kw_only=True)
class WhatIfRow:
    """One row of a whatif table: per call medians of its blocks, and the saving per step (the median over steps of
    the row's blocks' savings in each step); figures None where no block of the row has a prediction."""

    label: str
    phase: Phase | None
    n: int
    shape: Shape | None
    mask: str | None
    mask_assumed: bool
    confidence: str
    eager_core_us: float
    fused_us: float | None
    block_us: float
    fused_block_us: float | None
    saving_per_step_us: float | None
    steps: int  # the steps the saving per step is the median of (0: blocks outside steps, summed)
    launch_bound_predicted: bool
    reason: str | None

    @property
    def error(self) -> float | None:
        return CONFIDENCE_ERRORS.get(self.confidence)


def whatif_rows(w: WhatIf, by: str = "kind") -> list[WhatIfRow]:
    """One row per block kind and phase, per block, or per step, in the blocks' order."""
    if by not in WHATIF_GROUPINGS:
        raise ValueError(f"unknown grouping {by!r}; choose from {', '.join(WHATIF_GROUPINGS)}")
    groups: dict[tuple[object, ...], list[WhatIfBlock]] = {}
    for k, b in enumerate(w.blocks):
        key: tuple[object, ...] = ((b.kind, b.phase) if by == "kind" else (k,) if by == "block" else (b.step,))
        groups.setdefault(key, []).append(b)
    return [_row(_label(by, rows[0]), rows, by) for rows in groups.values()]


def _label(by: str, b: WhatIfBlock) -> str:
    if by == "kind":
        return b.kind if b.phase == Phase.FORWARD else f"{b.kind} ({b.phase})"
    if by == "block":
        return b.name if b.step is None else f"{b.name} (step {b.step})"
    return "outside steps" if b.step is None else f"step {b.step}"


def _row(label: str, rows: list[WhatIfBlock], by: str) -> WhatIfRow:
    done = [b for b in rows if b.fused_us is not None]
    first = done[0] if done else rows[0]
    saving, steps = _saving_per_step(done)
    return WhatIfRow(label=label, phase=first.phase if by != "step" else None, n=len(rows), shape=first.shape,
                     mask=first.mask, mask_assumed=first.mask_assumed, confidence=_worst(rows),
                     eager_core_us=median([b.eager_core_us for b in rows]),
                     fused_us=median([b.fused_us for b in done if b.fused_us is not None]) if done else None,
                     block_us=median([b.block_us for b in rows]),
                     fused_block_us=median([b.fused_block_us for b in done if b.fused_block_us is not None])
                     if done else None, saving_per_step_us=saving, steps=steps,
                     launch_bound_predicted=any(b.launch_bound_predicted for b in done),
                     reason=first.reason)


def _saving_per_step(done: list[WhatIfBlock]) -> tuple[float | None, int]:
    if not done:
        return None, 0
    by_step: dict[int | None, float] = {}
    for b in done:
        by_step[b.step] = by_step.get(b.step, 0.0) + (b.saving_us or 0.0)
    stepped = [v for s, v in by_step.items() if s is not None]
    if not stepped:
        return by_step[None], 0
    return median(stepped), len(stepped)


_ORDER = list(CONFIDENCE_ERRORS)


def _worst(rows: list[WhatIfBlock]) -> str:
    """The row's confidence: its blocks' least certain label (CONFIDENCE_ERRORS order, ``none`` first)."""
    return min((b.confidence for b in rows), key=_ORDER.index)


def shape_text(s: Shape | None, mask: str | None = None, assumed: bool = False) -> str:
    """``B4 H16/4 L1024² d128 bf16 causal (assumed)``: a shape as the table prints it."""
    if s is None:
        return "—"
    heads = (f"B{s.batch} H{s.heads_q}" + (f"/{s.heads_kv}" if s.heads_kv and s.heads_kv != s.heads_q else "")
             if s.batch is not None else f"BH{s.batch_heads}")
    length = f"L{s.len_q}²" if s.len_q == s.len_k else f"Lq{s.len_q} Lk{s.len_k}"
    out = f"{heads} {length} d{s.head_dim}" + (f" {s.dtype}" if s.dtype else "")
    if mask:
        out += f" {mask}" + (" (assumed)" if assumed else "")
    return out
