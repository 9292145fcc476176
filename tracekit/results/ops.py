"""The op and kernel tables (``tracekit attribute --by op`` / ``--by kernel``; issue 42, section 4).

Why two tables: a block's pooled efficiency ("39.7 TFLOP/s, memory-bound") hides the projection GEMMs at
hundreds of TFLOP/s beside a slow softmax. ``--by op`` shows each counted op call shape on its own roofline, as
TraceLens's GEMM/SDPA tables do; ``--by kernel`` shows every kernel the blocks own, by time.

The op rows are computed only when asked (``analyze(..., by="op")``: tracekit.analysis.ops), so the default run
pays nothing; the kernel rows are the result's kernel table, which every result carries.

Time basis: a row's time is its kernels' share of the blocks' busy time summed over the whole profile; the views
show it per step, as the mean over the profiled steps when every block lies in a step
(tracekit.results.rows.step_count), else as totals, and say which in the header.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .invariants import close, expect

__all__ = ["OpRow", "check_ops", "merge_ops", "ops_basis", "sort_ops"]


@dataclass(slots=True, kw_only=True)
class OpRow:
    """One (op name, recorded input shapes, dtype) among the ops whose FLOP formulas count the blocks' kernels,
    summed over its calls. ``shapes`` is the recorded ``Input Dims`` as written; ``dtype`` the first tensor input's
    dtype class ("bf16", …; the recorded name where no class applies). ``time_ns`` is the busy share of the calls'
    kernels (each instant once, as the blocks' busy time counts it). ``compute_s``/``memory_s``: the same calls at
    the device's peak FLOP/s and bandwidth (tracekit.analysis.flops); None without peaks for the device or dtype."""

    op: str
    shapes: str
    dtype: str
    calls: int
    flops: float
    bytes: float
    time_ns: int
    compute_s: float | None
    memory_s: float | None
    flops_max: float | None = None  # issue 44: the calls' upper bound when their FLOPs are bounds (varlen, paged)

    def add(self, calls: int, flops: float, nbytes: float, time_ns: int, compute_s: float | None,
            memory_s: float | None, flops_max: float | None = None) -> None:
        """More calls summed in; a time at peak stays None once any part's is unknown (a partial sum would
        mislead). ``flops_max``: the parts' upper bound (None: their FLOPs are exact)."""
        if flops_max is not None or self.flops_max is not None:
            self.flops_max = (self.flops if self.flops_max is None else self.flops_max) \
                + (flops if flops_max is None else flops_max)
        self.calls += calls
        self.flops += flops
        self.bytes += nbytes
        self.time_ns += time_ns
        self.compute_s = None if self.compute_s is None or compute_s is None else self.compute_s + compute_s
        self.memory_s = None if self.memory_s is None or memory_s is None else self.memory_s + memory_s

    @property
    def time_us(self) -> float:
        return self.time_ns / 1000

    @property
    def tflops_per_s(self) -> float | None:
        return self.flops / self.time_ns / 1e3 if self.time_ns > 0 else None

    @property
    def gb_per_s(self) -> float | None:
        return self.bytes / self.time_ns if self.time_ns > 0 else None

    @property
    def bound(self) -> str | None:
        """``compute`` or ``memory``: whichever of the two times at peak is larger (None without peaks)."""
        if self.compute_s is None or self.memory_s is None:
            return None
        return "compute" if self.compute_s >= self.memory_s else "memory"

    @property
    def roof_pct(self) -> float | None:
        """Time at peak (the larger of compute and memory) over the measured time, in %; never above 100 (issue 44:
        a count the device could not do in the measured time is cut at the roof, not printed above it)."""
        if self.compute_s is None or self.memory_s is None or self.time_ns <= 0:
            return None
        return min(100.0, 100.0 * max(self.compute_s, self.memory_s) / (self.time_ns * 1e-9))


    @property
    def roof_pct_max(self) -> float | None:
        """Issue 44: % of the roof at the upper bound of FLOPs counted as bounds, never above 100 (an upper bound
        the device could not reach in the measured time is cut at the roof); None for exact counts."""
        if self.flops_max is None or self.roof_pct is None or self.compute_s is None or self.memory_s is None:
            return None
        cs = self.compute_s * self.flops_max / self.flops if self.flops > 0 else self.compute_s
        return min(100.0, 100.0 * max(cs, self.memory_s) / (self.time_ns * 1e-9))

    @property
    def tflops_per_s_max(self) -> float | None:
        """The upper bound's rate, at most the roof's: the FLOPs the device could do at peak in the measured
        time."""
        if self.flops_max is None or self.time_ns <= 0:
            return None
        hi = self.flops_max
        if self.compute_s and self.flops > 0:
            hi = min(hi, max(self.flops, self.flops * (self.time_ns * 1e-9) / self.compute_s))
        return hi / self.time_ns / 1e3


def check_ops(rows: list[OpRow], busy_us: float) -> None:
    """Every row has calls and no negative figure, and the rows' time never exceeds the blocks' busy total
    (each kernel's share of it is counted in at most one row)."""
    for r in rows:
        expect(r.calls > 0, lambda: f"op {r.op}: {r.calls} calls")
        expect(r.time_ns >= 0 and r.flops >= 0 and r.bytes >= 0, lambda: f"op {r.op}: a negative figure")
        expect(all(x is None or x >= 0 for x in (r.compute_s, r.memory_s)), lambda: f"op {r.op}: negative peak time")
        expect(r.roof_pct is None or r.roof_pct >= 0, lambda: f"op {r.op}: negative share of the roof")
    total = sum(r.time_ns for r in rows) / 1000
    expect(total <= busy_us or close(total, busy_us, len(rows) + 1, busy_us),
           lambda: f"op rows' time {total} µs beyond the blocks' busy {busy_us} µs")


def _key(r: OpRow) -> tuple[str, str, str]:
    return r.op, r.shapes, r.dtype


def merge_ops(parts: list[list[OpRow] | None]) -> list[OpRow] | None:
    """Several results' op rows as one table (ranks, workers): equal (op, shapes, dtype) summed, by time. None when
    no part computed its rows."""
    if all(p is None for p in parts):
        return None
    out: dict[tuple[str, str, str], OpRow] = {}
    for p in parts:
        for r in p or []:
            m = out.get(_key(r))
            if m is None:
                out[_key(r)] = replace(r)  # a copy: the parts' rows stay as they were
            else:
                m.add(r.calls, r.flops, r.bytes, r.time_ns, r.compute_s, r.memory_s, r.flops_max)
    return sort_ops(list(out.values()))


def sort_ops(rows: list[OpRow]) -> list[OpRow]:
    """By time, largest first; ties by name and shapes (a stable order for every output)."""
    return sorted(rows, key=lambda r: (-r.time_ns, r.op, r.shapes, r.dtype))


def ops_basis(steps: int) -> str:
    """How the tables' time column is labelled: ``per step (mean over 4 steps)``, or ``total (no steps)``."""
    if steps == 0:
        return "total (no ProfilerSteps around every block)"
    return f"per step (mean over {steps} step{'s' if steps != 1 else ''})"
