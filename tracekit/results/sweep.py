"""A folder of runs as a table: one row per run, its measured latency where the recorder wrote one, and its
speedups over the sweep's baseline (the ``eager`` run at the same sequence length).

Why one module: the terminal, JSON, markdown, the HTML report (and so the TensorBoard tab) and the DataFrame all
show the same run rows, and a speedup must mean the same thing in each. One "speedup" once meant the measured
latency where both runs had a measured.json and the profiled attention span otherwise (sdpa-flash_512: 2.70×
profiled against 0.88× measured), so three are kept apart (issue 37), each named in every view:

- ``latency_speedup``: the measured latencies' ratio (None unless both runs were measured);
- ``step_speedup``: the median profiled step's device busy time (the whole step, tracekit.results.steps);
- ``attention_speedup``: the attention blocks' busy time in that median step.

A profiled speedup where either run is launch-bound (the device idles over half the step, or of the blocks' span)
is marked (``*_launch_bound``): busy time is then not what the user waits for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..vocab import CATEGORIES, is_launch_bound
from .attribution import Attribution, RunResult
from .invariants import close, expect
from .measured import Measured
from .steps import PER_STEP, PerStep, per_step

BASELINE_IMPL = "eager"  # the speedups' baseline when a sweep has it; else the sweep's first impl
_SWEEP_NAME = re.compile(r"^(?P<impl>.+?)[_-](?P<seq>\d+)$")


def sweep_key(name: str) -> tuple[str, int] | None:
    """``(impl, sequence length)`` for a run named ``<impl>_<seq>`` (``sdpa-flash_4096``), else None."""
    m = _SWEEP_NAME.match(name.rsplit("/", 1)[-1])
    return (m["impl"], int(m["seq"])) if m else None


@dataclass(slots=True, kw_only=True)
class RunRow:
    """One run's line. Profiled figures are totals over its steps (µs); ``measured`` is one forward pass."""

    name: str
    impl: str | None
    seq: int | None
    blocks: int
    steps: int  # profiled steps (1 when the trace has none)
    busy_us: float
    span_us: float
    idle_us: float
    launch_bound: bool | None  # None on CPU-only runs (no device to wait)
    categories: dict[str, float]
    measured: Measured | None
    per_step: PerStep  # the run's headline figures: its median step (or its whole trace, labelled so)
    # Over ``baseline`` at the same seq (None for the baseline's own row, or without one): see the module docstring.
    latency_speedup: float | None = None  # measured; None unless both runs have a measured latency
    step_speedup: float | None = None  # profiled: the median step's device busy time
    attention_speedup: float | None = None  # profiled: the attention blocks' busy time in the median step
    step_speedup_launch_bound: bool = False  # either run's median step is launch-bound: busy is not the latency
    attention_speedup_launch_bound: bool = False  # either run's attention blocks are launch-bound
    baseline: str | None = None  # the run divided by

    @property
    def idle_pct(self) -> float | None:
        return None if self.launch_bound is None or self.span_us <= 0 else 100.0 * self.idle_us / self.span_us

    @property
    def span_per_step_us(self) -> float:
        return self.span_us / self.steps

    def check(self) -> None:
        expect(self.steps >= 1, f"run {self.name}: {self.steps} steps")
        expect(close(sum(self.categories.values()), self.busy_us, len(CATEGORIES), self.busy_us),
               f"run {self.name}: categories do not sum to busy")
        expect(self.launch_bound is None or close(self.busy_us + self.idle_us, self.span_us, 2, self.span_us),
               f"run {self.name}: busy + idle != span")
        some = (self.latency_speedup, self.step_speedup, self.attention_speedup)
        expect(self.baseline is not None or all(x is None for x in some),
               f"run {self.name}: a speedup needs a baseline")
        expect(self.latency_speedup is None or self.measured is not None,
               f"run {self.name}: a latency speedup without a measurement")
        expect(self.step_speedup is not None or not self.step_speedup_launch_bound,
               f"run {self.name}: a missing step speedup marked launch-bound")
        expect(self.attention_speedup is not None or not self.attention_speedup_launch_bound,
               f"run {self.name}: a missing attention speedup marked launch-bound")
        self.per_step.check()
        if self.measured is not None:
            self.measured.check()


def run_rows(result: Attribution) -> list[RunRow]:
    """The result's runs (``result.runs``, or the result itself when it is one run), with their speedups."""
    runs = result.runs or [RunResult(name=result.source, attribution=result)]
    rows = [_row(r) for r in runs]
    base_impl = _baseline_impl(rows)
    by_key: dict[tuple[str | None, int | None], RunRow] = {(r.impl, r.seq): r for r in rows if r.impl is not None}
    for r in rows:
        base = by_key.get((base_impl, r.seq))
        if base is not None and base is not r:
            _speedup(r, base)
    return rows


def _row(run: RunResult) -> RunRow:
    a, t = run.attribution, run.attribution.totals
    key = sweep_key(run.name)
    steps = len({b.step for b in a.blocks if b.step is not None}) or 1
    return RunRow(name=run.name, impl=key[0] if key else None, seq=key[1] if key else None, blocks=t.blocks,
                  steps=steps, busy_us=t.total_us, span_us=t.span_us, idle_us=t.idle_us, launch_bound=t.launch_bound,
                  categories=dict(t.categories), measured=a.measured, per_step=per_step(a))


def _baseline_impl(rows: list[RunRow]) -> str | None:
    impls = [r.impl for r in rows if r.impl is not None]
    return BASELINE_IMPL if BASELINE_IMPL in impls else (impls[0] if impls else None)


def _speedup(r: RunRow, base: RunRow) -> None:
    """The three speedups over ``base``, each only where both runs have its figure on the same basis."""
    if r.measured is not None and base.measured is not None:
        r.latency_speedup = base.measured.median_ms / r.measured.median_ms
    _profiled(r, base)
    r.baseline = base.name


def _profiled(r: RunRow, base: RunRow) -> None:
    """The profiled speedups: step busy only between two median steps, attention only on one basis."""
    ps, pb = r.per_step, base.per_step
    if ps.basis == PER_STEP and pb.basis == PER_STEP and ps.busy_us > 0:
        r.step_speedup = pb.busy_us / ps.busy_us
        r.step_speedup_launch_bound = _step_bound(ps) or _step_bound(pb)
    if ps.basis == pb.basis and ps.attention_us > 0 and pb.attention_us > 0:
        r.attention_speedup = pb.attention_us / ps.attention_us
        r.attention_speedup_launch_bound = bool(r.launch_bound or base.launch_bound)


def _step_bound(ps: PerStep) -> bool:
    """The median step idles over half its span (the launch-bound rule, vocab.is_launch_bound)."""
    return ps.span_us is not None and ps.idle_us is not None and is_launch_bound(ps.idle_us, ps.span_us)
