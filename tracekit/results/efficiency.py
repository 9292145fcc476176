"""Efficiency figures (FLOPs, bytes, the roofline) and the device they are measured against.

Results only: the counting lives in tracekit.analysis.flops; the formulas are in docs/attribution.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from math import copysign

from ..hardware import DTYPES, DevicePeaks, lookup
from .invariants import expect

__all__ = ["HOST_ONLY", "NO_FORMULA", "NO_SHAPES", "DeviceInfo", "Efficiency", "efficiency_dict", "flops_range",
           "merge_device", "sum_efficiency", "sum_efficiency_maps"]

NO_SHAPES = "no recorded shapes (record_shapes=False)"
NO_FORMULA = "no recorded shapes or FLOP formula for this block's kernels"
HOST_ONLY = "CPU-only trace: no device kernels to time"


def _expect(ok: bool, what: str, obj: object) -> None:
    """One invariant of a ``check()``: a tracekit bug when broken, so an InvariantError naming it and the object."""
    if not ok:
        expect(False, f"{type(obj).__name__} invariant broken: {what}: {obj!r}")


@dataclass(slots=True, kw_only=True)
class Efficiency:
    """Sums over the op calls whose FLOPs were counted; rates and the roof are derived (:func:`efficiency_dict`).

    ``time_ns`` is the device busy time of exactly the kernels those ops launched (each instant once).
    ``compute_s``/``memory_s`` are the seconds the same work would take at the device's peak FLOP/s (for
    each op's dtype) and at its peak bandwidth; None when the device or a dtype's peak is unknown.
    ``dtypes`` are the dtype classes whose peaks (tracekit.hardware.compute_peak) ``compute_s`` was counted at.
    """

    flops: float = 0.0
    bytes: float = 0.0
    time_ns: int = 0
    compute_s: float | None = 0.0
    memory_s: float | None = 0.0
    ops: int = 0
    reason: str | None = None  # why figures are missing or partial
    dtypes: tuple[str, ...] = ()  # sorted; the peak classes of the FLOPs counted in compute_s
    # issue 44: calls counted as a range (varlen, paged): ``flops`` sums their lower bounds, ``flops_span`` the
    # widths (upper - lower), ``compute_span_s`` the widths' seconds at peak; ``bounds_why`` the first range's reason
    bounded: int = 0
    flops_span: float = 0.0
    compute_span_s: float = 0.0
    bounds_why: str | None = None

    def add(self, o: Efficiency) -> None:
        """Sum in another part; a reason survives only from parts with the same standing (counted or not)."""
        self.reason = self._merged_reason(o)
        self.flops += o.flops
        self.bytes += o.bytes
        self.time_ns += o.time_ns
        self.compute_s = _sum_known(self.compute_s, o.compute_s)
        self.memory_s = _sum_known(self.memory_s, o.memory_s)
        self.ops += o.ops
        self.bounded += o.bounded
        self.flops_span += o.flops_span
        self.compute_span_s += o.compute_span_s
        self.bounds_why = self.bounds_why or o.bounds_why
        if o.dtypes and o.dtypes != self.dtypes:
            self.dtypes = tuple(sorted({*self.dtypes, *o.dtypes}))

    def timed(self, time_ns: int) -> Efficiency:
        """A copy over ``time_ns`` of busy time: the same work measured on other kernels (tracekit.analysis.flops
        sums the figures of blocks that repeat once, and times each block's copy). Every field is set here, without
        the keyword __init__ (a fifth of its cost: a big trace makes one per block and key); a test checks that
        each field is copied."""
        e = _new(Efficiency)
        e.flops, e.bytes, e.time_ns, e.compute_s, e.memory_s = self.flops, self.bytes, time_ns, self.compute_s, \
            self.memory_s
        e.ops, e.reason, e.dtypes, e.bounded = self.ops, self.reason, self.dtypes, self.bounded
        e.flops_span, e.compute_span_s, e.bounds_why = self.flops_span, self.compute_span_s, self.bounds_why
        return e

    def _merged_reason(self, o: Efficiency) -> str | None:
        """The reason after adding ``o``: a counted part's replaces an uncounted sum's; an uncounted part's never
        replaces a counted sum's; otherwise the first one kept."""
        if o.ops and not self.ops:
            return o.reason
        if o.ops or not self.ops:
            return self.reason or o.reason
        return self.reason

    def check(self) -> Efficiency:
        """Raise InvariantError unless these are figures a count can sum to; returns self for chaining.

        Every Efficiency is built from ``ops`` counted calls (or none, with a reason) and the device's peaks, so:
        no negative sum; no call, no figures; a bandwidth peak wherever there is a FLOP peak (a known device has
        both); a missing roof says why.
        """
        self._check_sums()
        _expect(self.memory_s is not None or self.compute_s is None,
                "memory_s None (unknown device) implies compute_s None", self)
        _expect(self.ops == 0 or (self.compute_s is not None and self.memory_s is not None) or bool(self.reason),
                "counted ops without a roof (compute_s or memory_s None) carry a reason", self)
        _expect(self.reason is None or (isinstance(self.reason, str) and self.reason != ""),
                "reason is None or a non-empty str", self)
        _expect(set(self.dtypes) <= set(DTYPES) and list(self.dtypes) == sorted(set(self.dtypes)),
                "dtypes are distinct hardware.DTYPES classes, sorted", self)
        _expect(self.ops > 0 or not self.dtypes, "ops == 0 implies no dtypes", self)
        self._check_ranges()
        return self

    def _check_ranges(self) -> None:
        """Issue 44: ranges only from calls counted as ranges, never negative, never more such calls than calls."""
        _expect(0 <= self.bounded <= self.ops and self.flops_span >= 0 and self.compute_span_s >= 0,
                "0 <= bounded <= ops; the ranges' widths are >= 0", self)
        _expect(self.bounded > 0 or (self.flops_span == 0 and self.compute_span_s == 0),
                "no call counted as a range, no width", self)

    def _check_sums(self) -> None:
        """No negative (or NaN) sum, and no figures without a counted call."""
        _expect(self.flops >= 0 and self.bytes >= 0 and self.time_ns >= 0 and self.ops >= 0,
                "flops, bytes, time_ns and ops are >= 0 (not NaN)", self)
        _expect(self.compute_s is None or self.compute_s >= 0, "compute_s is None or >= 0", self)
        _expect(self.memory_s is None or self.memory_s >= 0, "memory_s is None or >= 0", self)
        _expect(self.ops > 0 or (self.flops == self.bytes == self.time_ns == 0
                                 and not self.compute_s and not self.memory_s),
                "ops == 0 implies no flops, bytes, time or seconds at peak", self)

    @property
    def peak_tflops(self) -> float | None:
        """The compute roof of these FLOPs in TFLOP/s: their FLOPs over their seconds at peak. For one dtype class
        exactly that class's hardware.compute_peak; for several, their FLOP-weighted harmonic mean."""
        if not self.ops or not self.flops or not self.compute_s:
            return None
        return self.flops / self.compute_s / 1e12

    @property
    def bound(self) -> str | None:
        """``compute`` when the work's arithmetic intensity reaches the ridge point, else ``memory``."""
        if not self.ops or self.compute_s is None or self.memory_s is None:
            return None
        return "compute" if self.compute_s >= self.memory_s else "memory"

    @property
    def roof_pct(self) -> float | None:
        """Achieved / min(peak FLOP/s, intensity × peak bandwidth) = roofline time / measured time, in %."""
        if not self.ops or self.compute_s is None or self.memory_s is None or self.time_ns <= 0:
            return None
        return 100.0 * max(self.compute_s, self.memory_s) / (self.time_ns * 1e-9)


_new = object.__new__


def _sum_known(a: float | None, b: float | None) -> float | None:
    """A sum of seconds at peak, None when either side's is unknown (no peaks for its device)."""
    return None if a is None or b is None else a + b


def sum_efficiency(parts: Sequence[Efficiency | None]) -> Efficiency | None:
    """The sum of the parts that have figures or reasons; None when there are none."""
    some = [p for p in parts if p is not None]
    return _fold(some).check() if some else None


def sum_efficiency_maps(parts: Sequence[dict[str, Efficiency]]) -> dict[str, Efficiency]:
    """Key by key, the sum of the parts that have the key (the keys in the order they first come)."""
    by_key: dict[str, list[Efficiency]] = {}
    for p in parts:
        for k, e in p.items():
            got = by_key.get(k)
            if got is None:
                by_key[k] = [e]
            else:
                got.append(e)
    return {k: _fold(es).check() for k, es in by_key.items()}


def _fold(parts: Sequence[Efficiency]) -> Efficiency:
    """``Efficiency()`` with each part added in turn (:meth:`Efficiency.add`), the sums kept in locals until the end:
    the same additions in the same order, at a fraction of a method call per part (a big trace sums one part per
    block and key)."""
    flops = nbytes = flops_span = compute_span_s = 0.0
    cs: float | None = 0.0
    ms: float | None = 0.0
    time_ns = ops = bounded = 0
    reason = bounds_why = None
    dtypes: tuple[str, ...] = ()
    for o in parts:
        reason = _reason_after(reason, ops, o)
        ops += o.ops
        flops += o.flops
        nbytes += o.bytes
        time_ns += o.time_ns
        cs = None if cs is None or o.compute_s is None else cs + o.compute_s
        ms = None if ms is None or o.memory_s is None else ms + o.memory_s
        bounded += o.bounded
        flops_span += o.flops_span
        compute_span_s += o.compute_span_s
        bounds_why = bounds_why or o.bounds_why
        if o.dtypes and o.dtypes != dtypes:
            dtypes = tuple(sorted({*dtypes, *o.dtypes}))
    return Efficiency(flops=flops, bytes=nbytes, time_ns=time_ns, compute_s=cs, memory_s=ms, ops=ops, reason=reason,
                      dtypes=dtypes, bounded=bounded, flops_span=flops_span, compute_span_s=compute_span_s,
                      bounds_why=bounds_why)


def _reason_after(reason: str | None, ops: int, o: Efficiency) -> str | None:
    """:meth:`Efficiency._merged_reason` of a sum with ``reason`` over ``ops`` calls, ``o`` added."""
    if o.ops:
        return reason or o.reason if ops else o.reason
    return reason or o.reason if not ops else reason


def efficiency_dict(e: Efficiency | None, reason: str | None = None) -> dict[str, object]:
    """The JSON object: ``{flops, bytes, tflops_per_s, gb_per_s, bound, roof_pct, ...}``; nulls with a reason.

    Written out rather than through the ``bound``/``roof_pct`` properties: a big trace renders one per block and
    category, and the figures must stay the properties' (tests compare them). The rate and the roof are rounded
    once and handed to the range's fields, which repeat them for an exact count (``round`` is most of the cost).
    """
    if e is None or e.ops == 0:
        return _no_figures(reason or (e.reason if e is not None else None) or NO_FORMULA)
    t, fl, by, cs, ms = e.time_ns, e.flops, e.bytes, e.compute_s, e.memory_s
    rate, roof = _rate(fl, t), _roof(cs, ms, t)
    return {"flops": fl, "bytes": by, "tflops_per_s": rate,
            "gb_per_s": round(by / t, 3) if t > 0 else None,
            "bound": _bound(cs, ms),
            "roof_pct": None if roof is None else min(100.0, roof),  # (issue 44: flops_reason)
            "intensity": round(fl / by, 3) if by else None,
            "time_us": round(t / 1000, 3), "reason": e.reason, **_flops_range(e, rate, roof)}


def _rate(flops: float, t: int) -> float | None:
    """TFLOP/s of ``flops`` in ``t`` ns, rounded as the JSON writes it."""
    return round(flops / t / 1e3, 3) if t > 0 else None


def _bound(cs: float | None, ms: float | None) -> str | None:
    """``compute`` when the seconds at peak FLOP/s reach those at peak bandwidth (the ``bound`` property)."""
    return None if cs is None or ms is None else "compute" if cs >= ms else "memory"


def _roof(cs: float | None, ms: float | None, t: int) -> float | None:
    """% of the roofline (as ``roof_pct``, before its cut at 100%); None without peaks."""
    return None if cs is None or ms is None or t <= 0 else round(100.0 * max(cs, ms) / (t * 1e-9), 2)


FLOPS_KIND_NONE = {"flops_kind": "none", "flops_min": None, "flops_max": None, "tflops_per_s_max": None,
                   "roof_pct_max": None}
_UNSET = object()  # (_flops_range: a figure not worked out yet)


def flops_range(e: Efficiency) -> dict[str, object]:
    """Issue 44's fields: how the FLOPs were counted (``exact``, ``bounds``, ``none``), the range and its rate,
    and the share of the roof at the upper bound -- never above 100%: an upper bound the device could not reach
    in the measured time is cut at the roof, and ``flops_reason`` says so.

    ``flops``/``tflops_per_s``/``roof_pct`` keep their meaning: for a range they are the lower bound's.
    """
    return _flops_range(e, _UNSET, _UNSET)


def _flops_range(e: Efficiency, rate: object, roof: object) -> dict[str, object]:
    """:func:`flops_range`, given the lower bound's rate and its roof before the cut at 100% (rounded; _UNSET:
    not worked out), which it repeats where the upper bound's are the same figures."""
    if e.ops == 0:
        return {**FLOPS_KIND_NONE, "flops_reason": e.reason}
    t, lo, hi = e.time_ns, e.flops, e.flops + e.flops_span
    roof_hi = roof if _same_roof(e, roof) else _roof_at(e.compute_s, e.memory_s, e.compute_span_s, t)
    why = e.bounds_why if e.bounded else None
    if roof_hi is not None and roof_hi > 100.0:  # type: ignore[operator]
        roof_hi, hi, why = _cut_at_roof(e, hi, why)
    top = max(lo, hi)  # (the lower bound itself where there is no width: its rate as given)
    return {"flops_kind": "bounds" if e.bounded else "exact", "flops_min": lo, "flops_max": top,
            "tflops_per_s_max": rate if top is lo and rate is not _UNSET else _rate(top, t), "roof_pct_max": roof_hi,
            "flops_reason": why}


def _same_roof(e: Efficiency, roof: object) -> bool:
    """Whether the upper bound's roof is ``roof``, worked out already: no seconds are added to the compute side,
    and it is not -0.0 (which adding 0.0 would change)."""
    cs = e.compute_s
    return roof is not _UNSET and e.compute_span_s == 0.0 and not (cs == 0.0 and copysign(1.0, cs) < 0.0)


def _cut_at_roof(e: Efficiency, hi: float, why: str | None) -> tuple[float, float, str]:
    """A count whose high end the device could not reach in the measured time: 100% of the roof, the FLOPs the
    roof allows (at these calls' peak), and the reason said."""
    cut = (f"the {'upper bound' if e.bounded else 'count'} would exceed the roof in the measured time"
           f"{'' if e.bounded else ' (a count, peak or time that cannot be right)'}: cut at 100%")
    if e.compute_s and e.compute_span_s:
        hi = min(hi, e.flops * (e.time_ns * 1e-9) / e.compute_s)
    return 100.0, hi, "; ".join(x for x in (why, cut) if x)


def _roof_at(cs: float | None, ms: float | None, extra_cs: float, t: int) -> float | None:
    """% of the roofline with ``extra_cs`` seconds at peak added to the compute side; None without peaks."""
    if cs is None or ms is None or t <= 0:
        return None
    return round(100.0 * max(cs + extra_cs, ms) / (t * 1e-9), 2)


def _no_figures(why: str) -> dict[str, object]:
    """The JSON object of a part without counted calls: every figure null, and why."""
    return {"flops": None, "bytes": None, "tflops_per_s": None, "gb_per_s": None, "bound": None,
            "roof_pct": None, "intensity": None, "time_us": None, "reason": why, **FLOPS_KIND_NONE,
            "flops_reason": why}


@dataclass(slots=True, kw_only=True)
class DeviceInfo:
    """The top-level ``device`` object: the name the trace gives and the peaks it maps to."""

    name: str | None
    peaks: DevicePeaks | None
    reason: str | None = None
    names: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "model": self.peaks.model if self.peaks else None,
                "peaks": self.peaks.as_dict() if self.peaks else None, "reason": self.reason}

    def check(self) -> DeviceInfo:
        """Raise InvariantError unless name, peaks and reason agree; returns self for chaining.

        Peaks come only from looking the name up in tracekit.hardware, and a device without peaks says why
        (host-only trace, unknown name, devices that differ); ``names`` are the trace's, ``name`` the first.
        """
        _expect((self.peaks is None) == (self.reason is not None), "a reason exactly when peaks are None", self)
        _expect(self.reason is None or (isinstance(self.reason, str) and self.reason != ""),
                "reason is None or a non-empty str", self)
        _expect(self.peaks is None or (self.name is not None and lookup(self.name) == self.peaks),
                "peaks are the hardware table's entry for name", self)
        _expect(not self.names or self.name == self.names[0], "name is the first of names", self)
        return self


def _first_unnamed(parts: Sequence[DeviceInfo | None]) -> DeviceInfo | None:
    """Where no part names a device: the first part (with its reason), or None."""
    out = next((d for d in parts if d is not None), None)
    return out.check() if out is not None else None


def merge_device(parts: Sequence[DeviceInfo | None]) -> DeviceInfo | None:
    """One device for a folder of traces; ``None`` peaks with a reason when they name different models."""
    ds = [d for d in parts if d is not None and d.name is not None]
    if not ds:
        return _first_unnamed(parts)
    models = {d.peaks.model if d.peaks else d.name for d in ds}
    if len(models) == 1:
        return ds[0].check()
    return DeviceInfo(name=", ".join(sorted(str(m) for m in models)), peaks=None,
                      reason="traces from different devices").check()
