"""Hints (what to do next) and the per-kernel facts their rules read (the rules: tracekit.analysis.hints)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..hardware import Arch, Platform, Vendor
from .invariants import expect

__all__ = ["GroupFacts", "Hint", "HintFacts", "HintOverlap", "KernelRow", "merge_facts"]

# One kernel row of a block kind's facts: (compact kernel name, category, launcher op, tag). Rows partition the
# blocks' busy time (each device event sits on one row, at its share of its block's busy time).
KernelRow = tuple[str, str, str, str]

# A trace that recorded no ProfilerStep has no step: its "per step" figures are the whole trace's, and are worded so
# (``step_unit``), never "per step" beside a headline that says "whole trace" (issue 37: one time base, stated).
NO_STEPS_BASIS = "whole trace (no steps recorded)"


def step_unit(per_step_basis: str | None) -> str:
    """The words after a per-step figure: " per step", or none where no step was recorded (the figure is then
    the whole trace's, and its basis says so)."""
    return "" if per_step_basis == NO_STEPS_BASIS else " per step"


_US_SLACK = 0.002  # µs: figures are rounded to 3 decimals on their own before a check compares them


@dataclass(slots=True, kw_only=True)
class HintOverlap:
    """Hints of one block kind whose savings count some of the same kernel time: what they save together.

    ``union_us`` is the device time they count, each kernel row once (where a hint counts part of a row, an
    estimate, the largest part); it is the combined saving's upper bound, never their sum.
    """

    rules: list[str]  # the overlapping hints, in hint order
    blocks: list[str]  # their block kind
    sum_us: float  # their savings added up: what reading them one at a time suggests
    union_us: float  # the kernel time they count together
    double_counted_us: float  # sum_us - union_us: the time their savings count more than once
    shared_kernels: list[str]  # the kernels two or more count, costliest first
    busy_us: float  # the blocks' busy time: the denominator of union_pct
    union_pct: float | None
    union_per_step_us: float | None = None  # the union in one step (the members' per-step basis); None unset

    def check(self) -> HintOverlap:
        """Raise InvariantError unless the union can be true: at most the sum and the blocks' time; returns self."""
        n = max(1, len(self.rules))
        expect(len(self.rules) >= 2 and len(set(self.rules)) == len(self.rules),
               f"HintOverlap: {self.rules} are not two or more distinct hints")
        expect(abs(self.sum_us - self.union_us - self.double_counted_us) <= n * _US_SLACK,
               f"HintOverlap {self.rules}: double-counted {self.double_counted_us} µs is not sum - union")
        expect(self.union_us <= self.sum_us + n * _US_SLACK,
               f"HintOverlap {self.rules}: union {self.union_us} µs exceeds the sum {self.sum_us}")
        expect(self.union_us <= self.busy_us + n * _US_SLACK,
               f"HintOverlap {self.rules}: union {self.union_us} µs exceeds the blocks' time {self.busy_us}")
        expect(self.union_per_step_us is None or self.union_per_step_us <= self.union_us + _US_SLACK,
               f"HintOverlap {self.rules}: union {self.union_per_step_us} µs per step exceeds its total")
        expect(self.double_counted_us > 0 and bool(self.shared_kernels),
               f"HintOverlap {self.rules}: no time counted twice, so no overlap")
        expect((self.union_pct is None) == (self.busy_us <= 0) and (
                   self.union_pct is None or abs(self.union_pct - 100 * self.union_us / self.busy_us) <= 0.051),
               f"HintOverlap {self.rules}: union_pct {self.union_pct} is not union / busy")
        return self


@dataclass(slots=True, kw_only=True)
class Hint:
    """One piece of advice about one or more block kinds, with what it read and what it may save."""

    rule: str
    blocks: list[str]  # block kinds (with " (backward)" for backward groups)
    message: str
    evidence: dict[str, Any]  # figures (µs, %) and kernel names the rule read
    saving_us: float | None  # an upper bound or a labelled estimate; None when the trace cannot tell
    saving_pct: float | None  # of the blocks' busy time (launch-bound: of their span)
    saving_basis: str  # "upper bound: …", "estimate: …" or why there is no figure
    # The kernel time the saving counts, per kernel row (µs; all of a row, or the part an estimate claims);
    # empty when the saving is no kernels' time (launch-bound counts idle gaps) or there is no saving.
    counted: dict[KernelRow, float] = field(default_factory=dict, repr=False)
    overlap: HintOverlap | None = None  # the hints (this one among them) whose savings count the same kernels
    # The headline figure: the saving in one step (µs), never more than ``step_attention_us``; None with no saving.
    saving_per_step_us: float | None = None
    # What saving_us covers and how the per-step figure was taken: "median of N steps" (each step's own share),
    # or "whole trace over N steps" (saving_us / N) where some block lies outside every ProfilerStep.
    steps: int = 1
    per_step_basis: str = ""
    # The per-step bound: the attention blocks' busy time in one step, on the same basis (launch-bound, whose
    # saving is idle time inside the blocks: their span); None with no saving.
    step_attention_us: float | None = None
    # False: a busy-time saving on launch-bound blocks, which will not reach latency (the device waits on
    # launches); True: the saving can reach latency (up to it); None with no saving.
    reaches_latency: bool | None = None

    @property
    def saving_kernels(self) -> list[str]:
        """The kernels the saving counts, costliest first (names shortened)."""
        by: dict[str, float] = {}
        for row, us in self.counted.items():
            by[row[0]] = by.get(row[0], 0.0) + us
        return [n[:120] for n, _ in sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))]

    def check(self) -> Hint:
        """Raise InvariantError unless the saving is the counted kernel time it names; returns self."""
        expect(self.saving_us is None or self.saving_us >= 0, f"hint {self.rule}: negative saving")
        expect(all(us >= 0 for us in self.counted.values()), f"hint {self.rule}: negative counted time")
        expect(not self.counted or (self.saving_us is not None and abs(sum(self.counted.values()) - self.saving_us)
                                    <= _US_SLACK * (1 + len(self.counted))),
               f"hint {self.rule}: saving {self.saving_us} µs is not the counted kernel time")
        self._check_per_step()
        if self.overlap is not None:
            expect(self.rule in self.overlap.rules, f"hint {self.rule}: its overlap {self.overlap.rules} omits it")
            expect(self.saving_us is not None and self.saving_us <= self.overlap.union_us + _US_SLACK,
                   f"hint {self.rule}: saving {self.saving_us} µs exceeds its overlap's union {self.overlap.union_us}")
            self.overlap.check()
        return self


    def _check_per_step(self) -> None:
        """A saving has its per-step figure, at most one step's attention time (the kernels it counts are part of
        it) and at most the total over ``steps``: a per-step headline can never exceed what a step holds."""
        if self.saving_us is None:
            expect(self.saving_per_step_us is None, f"hint {self.rule}: a per-step saving without a saving")
            return
        per, bound = self.saving_per_step_us, self.step_attention_us
        expect(per is not None and bound is not None and self.steps >= 1 and bool(self.per_step_basis),
               f"hint {self.rule}: saving {self.saving_us} µs without its per-step figure and bound")
        assert per is not None and bound is not None  # (for mypy: expect raised otherwise)
        expect(0 <= per <= bound + _US_SLACK,
               f"hint {self.rule}: saving {per} µs per step exceeds the step's attention time {bound} µs")
        expect(per <= self.saving_us + _US_SLACK,
               f"hint {self.rule}: saving {per} µs per step exceeds the total {self.saving_us} µs")


@dataclass(slots=True, kw_only=True)
class GroupFacts:
    """What the rules read about one block kind beyond BlockResult's figures, summed over its blocks."""

    # (compact kernel name, category, launcher op, tag) -> [count, busy µs inside the blocks]
    kernels: dict[tuple[str, str, str, str], list[float]] = field(default_factory=dict)
    sdpa_calls: int = 0  # public SDPA ops whose kernels ran in these blocks
    sdpa_masked: int = 0  # ... of which were passed an attn_mask tensor with is_causal=False
    gemm_16bit: int = 0  # kernels launched by GEMM ops with bf16/fp16 inputs
    gemm_fp32: int = 0  # kernels launched by GEMM ops with fp32 inputs
    replayed_us: float = 0.0  # busy µs of the blocks' kernels that CUDA/HIP graph launches ran
    graph_modes: list[str] = field(default_factory=list)  # the graph modes (vocab.GraphMode) of the blocks' traces
    platforms: list[Platform] = field(default_factory=list)  # the GPUs of the blocks' traces (hardware.platform)
    # ``kernels``' µs split by the owning block's ProfilerStep number (blocks outside every step: not here), so a
    # hint's per-step saving is the very kernels' time in each step; summed over ranks like the rows.
    step_us: dict[int, dict[KernelRow, float]] = field(default_factory=dict)
    # ``tracekit whatif``'s fused kernel time for these blocks per ProfilerStep, on ``fused_backend`` (the fastest
    # calibrated one); empty where the device has no calibration or no block has an eager core with shapes.
    fused_us_by_step: dict[int, float] = field(default_factory=dict)
    fused_backend: str | None = None

    def check(self) -> GroupFacts:
        """Raise InvariantError unless the counts can be true: a broken row would skew every share a rule computes.
        Returns self."""
        for name in ("sdpa_calls", "sdpa_masked", "gemm_16bit", "gemm_fp32"):
            expect(getattr(self, name) >= 0, f"GroupFacts.{name} is negative: {getattr(self, name)}")
        expect(self.replayed_us >= 0, f"GroupFacts.replayed_us is negative: {self.replayed_us}")
        expect(self.sdpa_masked <= self.sdpa_calls,
               f"GroupFacts: {self.sdpa_masked} masked SDPA calls of {self.sdpa_calls}")
        expect(all(isinstance(p, Platform) and isinstance(p.vendor, Vendor) and isinstance(p.arch, Arch)
                   and p.arch.vendor in (p.vendor, Vendor.UNKNOWN) for p in self.platforms),
               f"GroupFacts.platforms {self.platforms!r}: not Platforms whose arch is their vendor's")
        for row, v in self.kernels.items():
            expect(len(v) == 2 and v[0] >= 0 and v[1] >= 0,
                   f"GroupFacts.kernels[{row!r}] is {v!r}, not [count >= 0, µs >= 0]")
        self._check_steps()
        return self

    def _check_steps(self) -> None:
        """Each step's row times are rows of ``kernels``, and no row has more time in its steps than in all."""
        in_steps: dict[KernelRow, float] = {}
        for step, rows in self.step_us.items():
            for row, us in rows.items():
                expect(us >= 0 and row in self.kernels, f"GroupFacts.step_us[{step}][{row!r}] is {us!r}")
                in_steps[row] = in_steps.get(row, 0.0) + us
        for row, us in in_steps.items():
            expect(us <= self.kernels[row][1] + _US_SLACK * (1 + len(self.step_us)),
                   f"GroupFacts.step_us: {row!r} has {us} µs in its steps, {self.kernels[row][1]} in all")


# (block kind, phase) -> facts; plain data so that it pickles from a worker process and merges by summing.
HintFacts = dict[tuple[str, str], GroupFacts]


def merge_facts(parts: Iterable[HintFacts | None]) -> HintFacts | None:
    """Several files' facts as one (a folder of ranks): rows and counts summed per block kind."""
    out: HintFacts = {}
    seen = False
    for facts in parts:
        if facts is None:
            continue
        seen = True
        for key, g in facts.items():
            m = out.setdefault(key, GroupFacts())
            g.check()  # each part as it arrives (from a worker process): sums of sound parts are sound
            for row, (n, us) in g.kernels.items():
                acc = m.kernels.setdefault(row, [0, 0.0])
                acc[0] += n
                acc[1] += us
            m.sdpa_calls += g.sdpa_calls
            m.sdpa_masked += g.sdpa_masked
            m.gemm_16bit += g.gemm_16bit
            m.gemm_fp32 += g.gemm_fp32
            m.replayed_us += g.replayed_us
            for step, rows in g.step_us.items():
                into = m.step_us.setdefault(step, {})
                for row, us in rows.items():
                    into[row] = into.get(row, 0.0) + us
            for step, us in g.fused_us_by_step.items():
                m.fused_us_by_step[step] = m.fused_us_by_step.get(step, 0.0) + us
            m.fused_backend = m.fused_backend if m.fused_backend == g.fused_backend or not g.fused_backend else (
                g.fused_backend if not m.fused_backend else None)  # (ranks on two backends: no one name)
            m.graph_modes = sorted(set(m.graph_modes) | set(g.graph_modes))
            m.platforms = sorted(set(m.platforms) | set(g.platforms))
    return out if seen else None
