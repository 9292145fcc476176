"""A folder of runs as a table: one row per run, its measured latency where the recorder wrote one, and its
speedup over the sweep's baseline (the ``eager`` run at the same sequence length).

Why one module: the terminal, JSON, CSV, markdown, the HTML report (and so the TensorBoard tab) and the
DataFrame all show the same run rows, and a speedup must mean the same thing in each: measured latency
when both runs have it, else the profiled span per step, labelled so and marked when launch-bound.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..vocab import CATEGORIES, SpeedupBasis
from .attribution import Attribution, RunResult
from .invariants import close, expect
from .measured import Measured

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
    speedup: float | None = None  # over ``baseline`` at the same seq; None for the baseline's own row or without one
    speedup_basis: SpeedupBasis | None = None
    speedup_launch_bound: bool = False  # a profiled speedup where either run is launch-bound: not the latency
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
        expect((self.speedup is None) == (self.speedup_basis is None) == (self.baseline is None),
               f"run {self.name}: a speedup needs its basis and baseline")
        expect(self.speedup_basis != SpeedupBasis.MEASURED or self.measured is not None,
               f"run {self.name}: a measured speedup without a measurement")
        expect(not self.speedup_launch_bound or self.speedup_basis == SpeedupBasis.PROFILED,
               f"run {self.name}: only a profiled speedup is marked launch-bound")
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
                  categories=dict(t.categories), measured=a.measured)


def _baseline_impl(rows: list[RunRow]) -> str | None:
    impls = [r.impl for r in rows if r.impl is not None]
    return BASELINE_IMPL if BASELINE_IMPL in impls else (impls[0] if impls else None)


def _speedup(r: RunRow, base: RunRow) -> None:
    """Measured latency when both runs have it; else the profiled span per step (marked when launch-bound)."""
    if r.measured is not None and base.measured is not None:
        r.speedup, r.speedup_basis = base.measured.median_ms / r.measured.median_ms, SpeedupBasis.MEASURED
    elif r.span_us > 0 and base.span_us > 0:
        r.speedup, r.speedup_basis = base.span_per_step_us / r.span_per_step_us, SpeedupBasis.PROFILED
        r.speedup_launch_bound = bool(r.launch_bound or base.launch_bound)
    else:
        return
    r.baseline = base.name
