"""One time base for every headline: the median ProfilerStep (issue 37).

Why it exists: an attribution's totals sum every profiled step, a diff compared the median step and a measured
latency covers one forward pass, so the same run read 84.60 ms in one output and 42.30 ms in the next. Every
headline (attribute in each format, the report, the notebook, and the diff's step line) now leads with the one
median step chosen here, labelled "per step (median of N)"; totals over all steps come second, labelled so.

The median step is chosen by attention time (the step whose attention total is the median, the mean of the middle
two when the count is even), as the diff's headline does, so the diff's ``step.before`` is this step by
construction; where some block lies outside every step, by whole-step busy time. A trace without ProfilerStep
events (or a CPU-only one, which has no device steps) has no per-step figures: its headline is the whole trace,
labelled so, never silently another basis.
"""

from __future__ import annotations

from dataclasses import dataclass

from .attribution import Attribution, StepFigures
from .diff import WholeStep, whole_steps
from .invariants import close, expect

PER_STEP = "median step"  # PerStep.basis: the median of the steps
WHOLE_TRACE = "whole trace"  # PerStep.basis: no steps to take a median of


@dataclass(slots=True, kw_only=True)
class PerStep:
    """A result's headline figures on the one time base (µs): the median step, or the whole trace without steps."""

    basis: str  # PER_STEP or WHOLE_TRACE
    steps: int  # ProfilerSteps with whole-step figures (0 on the whole-trace basis)
    median_steps: list[int]  # the step(s) the median is the mean of ([] on the whole-trace basis)
    attention_us: float  # the attention blocks' busy time (a union per step; the blocks' sum over the whole trace)
    busy_us: float  # all device busy time of the step (the trace's busy, or host, time on the whole-trace basis)
    span_us: float | None  # the step's span; None on the whole-trace basis (a trace's span is not measured)
    note: str = ""  # why the basis is the whole trace, in a few words ("" on the per-step basis)

    @property
    def idle_us(self) -> float | None:
        """The step's device idle: span - busy (None without a span)."""
        return None if self.span_us is None else self.span_us - self.busy_us

    @property
    def label(self) -> str:
        """``per step (median of 2)`` / ``per step (1 step)`` / ``whole trace``: how every output names the basis."""
        if self.basis == WHOLE_TRACE:
            return f"{WHOLE_TRACE} ({self.note})"
        return "per step (1 step)" if self.steps == 1 else f"per step (median of {self.steps})"

    def check(self) -> None:
        expect(self.basis in (PER_STEP, WHOLE_TRACE), f"per step: basis {self.basis!r}")
        expect((self.basis == PER_STEP) == (self.steps > 0) == bool(self.median_steps) == (self.span_us is not None),
               f"per step: basis {self.basis} with {self.steps} steps")
        expect(self.attention_us <= self.busy_us or close(self.attention_us, self.busy_us, 2, self.busy_us),
               f"per step: attention {self.attention_us} µs beyond busy {self.busy_us} µs")
        if self.span_us is not None:
            expect(self.busy_us <= self.span_us or close(self.busy_us, self.span_us, 2, self.span_us),
                   f"per step: busy {self.busy_us} µs beyond span {self.span_us} µs")


def _attention_by_step(att: Attribution) -> list[tuple[float, int]]:
    """(attention total, step) per step, the key the median is chosen by (a step without attention counts 0);
    [] when some block lies outside every step (per-step totals would drop it) or there are no steps."""
    steps = sorted({s for t in att.traces for s in t.steps})
    if not steps or any(b.step is None for b in att.blocks):
        return []
    per = dict.fromkeys(steps, 0.0)
    for b in att.blocks:
        assert b.step is not None  # checked above
        per[b.step] = per.get(b.step, 0.0) + b.total_us
    return [(us, s) for s, us in sorted(per.items())]


def middle(keyed: list[tuple[float, int]]) -> list[int]:
    """The step numbers of the median of (figure, step) pairs: the middle one, or the middle two when even."""
    order = sorted(keyed)
    n = len(order)
    return [s for _, s in order[(n - 1) // 2: n // 2 + 1]]


def median_whole_step(att: Attribution, whole: list[StepFigures] | None = None) -> WholeStep | None:
    """The side's median step as a whole: chosen by attention time, else (blocks outside steps) by whole-step busy;
    None without whole steps (no ProfilerStep, CPU-only) or when a median step has none."""
    whole = whole_steps(att) if whole is None else whole
    keyed = _attention_by_step(att)
    return _mean_step(whole, middle(keyed if keyed else [(f.busy_us, f.step) for f in whole]))


def _mean_step(whole: list[StepFigures], mid: list[int]) -> WholeStep | None:
    """The mean of the whole steps numbered ``mid``; None when there are none or one of them has no figures."""
    by = {f.step: f for f in whole}
    if not mid or any(s not in by for s in mid):
        return None
    n = len(mid)
    return WholeStep(steps=sorted(mid), busy_us=sum(by[s].busy_us for s in mid) / n,
                     span_us=sum(by[s].span_us for s in mid) / n, attention_us=sum(by[s].attention_us for s in mid) / n)


def per_step(att: Attribution) -> PerStep:
    """The result's headline figures: its median step, or (with the reason) its whole trace."""
    whole = whole_steps(att) if len(att.runs) <= 1 else []  # runs pooled: step N of one run is not step N of another
    ws = median_whole_step(att, whole) if whole else None
    if ws is not None:
        return PerStep(basis=PER_STEP, steps=len(whole), median_steps=ws.steps, attention_us=ws.attention_us,
                       busy_us=ws.busy_us, span_us=ws.span_us)
    return PerStep(basis=WHOLE_TRACE, steps=0, median_steps=[], attention_us=att.totals.total_us,
                   busy_us=sum(t.base_us for t in att.traces), span_us=None, note=_why_whole(att))


def _why_whole(att: Attribution) -> str:
    """Why a result has no median step: runs pooled, no ProfilerStep, or no device steps (a CPU-only trace)."""
    if len(att.runs) > 1:
        return f"pooled over {len(att.runs)} runs: each run's own steps are in its run row"
    if not any(t.steps for t in att.traces):
        return "no ProfilerStep events"
    return "no device time per ProfilerStep: a CPU-only trace"
