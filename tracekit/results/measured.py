"""Latency measured outside the profiler, as a recorder wrote it beside a run's traces (``measured.json``).

Why it exists: a profiled span is inflated by the profiler's own launch overhead, and on a launch-bound run
neither busy time nor that span is what a user waits for. Where the recording script timed the forward pass
without the profiler (CUDA events, repeats), that figure is the latency, and the profiled ones stay beside it,
labelled "profiled". The file's format is in docs/attribution.md, "Measured latency".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .invariants import expect

MEASURED_FILE = "measured.json"  # beside a run's traces; never read as a trace
MEASURED_SCHEMA = "tracekit.measured/1"

# The latencies tracekit takes (ms), wherever one comes from (measured.json, --latency-before/--latency-after),
# and for every latency figure (a median, a spread's ends, each sample, the CUDA-graph median): 1 ns to 1 day.
# Why a range: a figure outside it is a unit mix-up or damage, not one forward pass, and the arithmetic breaks on
# it (issue 41): 1e308 ms is inf in µs (the gate said "inf s … +nan%", the run table drew a 309-digit cell), and
# 5e-324 ms divides into "+inf%".
LATENCY_RANGE_MS = (1e-6, 24 * 3600 * 1000.0)
LATENCY_RANGE_WORDS = f"between 1 ns and 1 day ({LATENCY_RANGE_MS[0]:.6f} to {LATENCY_RANGE_MS[1]:.0f} ms)"
# The largest count (repeats, iters) taken: the JSON output writes counts as integers, which its writer refuses
# past 64 bits (10**23 repeats was a TypeError and the tab's HTTP 500, issue 41) and the HTML report's JavaScript
# holds exactly only up to 2**53.
MAX_COUNT = 2**53


def plausible_latency(ms: float) -> bool:
    """Whether ``ms`` is a latency tracekit takes (``LATENCY_RANGE_MS``; False for NaN and infinities)."""
    return LATENCY_RANGE_MS[0] <= ms <= LATENCY_RANGE_MS[1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Measured:
    """One run's measured latency (ms). ``low_ms``..``high_ms`` is the spread the recorder saw (``spread_kind``:
    min-max over repeats, or an IQR); ``launch_bound`` is the recorder's own note, None when it gave none."""

    median_ms: float
    low_ms: float | None = None
    high_ms: float | None = None
    spread_kind: str | None = None
    repeats: int | None = None
    iters: int | None = None
    graph_median_ms: float | None = None  # the same forward replayed from a CUDA graph, when recorded
    peak_memory_mb: float | None = None
    launch_bound: bool | None = None
    what: str = "forward pass"  # what one measurement covers (trace data: hostile text)
    source: str = ""  # where it was read (a file name), or "--latency-before" and the like
    # Each repeat's time (ms), when the recorder kept them: the CI gate tests these rather than the spread's ends
    # (docs/attribution.md, "The CI gate"). None for files written before samples were recorded.
    samples_ms: tuple[float, ...] | None = None

    @property
    def sample_count(self) -> int | None:
        """How many repeats this figure is made of: the samples kept, else the recorder's ``repeats``."""
        return len(self.samples_ms) if self.samples_ms is not None else self.repeats

    @property
    def half_spread_ms(self) -> float | None:
        """Half the spread (the table's ``±``), None without one."""
        if self.low_ms is None or self.high_ms is None:
            return None
        return (self.high_ms - self.low_ms) / 2

    def check(self) -> None:
        """Every latency figure lies in LATENCY_RANGE_MS, the spread around the median, counts in 1..MAX_COUNT."""
        for name in ("median_ms", "low_ms", "high_ms", "graph_median_ms"):
            v = getattr(self, name)
            expect((v is None and name != "median_ms") or plausible_latency(v), f"measured: {name} {v} ms")
        expect((self.low_ms is None) == (self.high_ms is None), "measured: a spread needs both ends")
        if self.low_ms is not None and self.high_ms is not None:
            expect(self.low_ms <= self.median_ms <= self.high_ms,
                   f"measured: {self.low_ms} <= {self.median_ms} <= {self.high_ms} ms")
        v = self.peak_memory_mb
        expect(v is None or (math.isfinite(v) and v >= 0), f"measured: peak_memory_mb {v}")
        for name in ("repeats", "iters"):
            v = getattr(self, name)
            expect(v is None or 1 <= v <= MAX_COUNT, f"measured: {name} {v}")
        self._check_samples()

    def _check_samples(self) -> None:
        """Samples are latencies (LATENCY_RANGE_MS), as many as ``repeats`` says, and the median lies among them."""
        xs = self.samples_ms
        if xs is None:
            return
        expect(len(xs) >= 1 and all(plausible_latency(x) for x in xs), f"measured: samples {xs}")
        expect(self.repeats is None or self.repeats == len(xs), f"measured: {len(xs)} samples, repeats {self.repeats}")
        expect(min(xs) <= self.median_ms <= max(xs), f"measured: median {self.median_ms} outside the samples")


def speedup(base: Measured | None, this: Measured | None) -> float | None:
    """``base`` latency over ``this`` one: > 1 when ``this`` is faster; None unless both were measured."""
    if base is None or this is None:
        return None
    return base.median_ms / this.median_ms


def within_spread(before: Measured, after: Measured) -> bool | None:
    """The medians differ by no more than the sum of the half-spreads (None when either has no spread)."""
    hb, ha = before.half_spread_ms, after.half_spread_ms
    if hb is None or ha is None:
        return None
    return abs(after.median_ms - before.median_ms) <= hb + ha
