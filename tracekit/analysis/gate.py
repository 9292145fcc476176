"""The CI gate (``tracekit diff --fail-if-slower PCT``): its threshold's parsing, and its decision on a diff.

The rule (README, "CI gate"; docs/attribution.md, "The CI gate"): compare the latency measured outside the
profiler when both sides have it; otherwise busy time, unless a side is launch-bound: then neither busy time
nor the profiled span is what the user waits for, and the gate refuses to decide (InconclusiveError, exit 5).
``--gate-on busy|span|latency`` makes the choice explicit.
"""

from __future__ import annotations

import math

import re

from ..errors import InconclusiveError, IncomparableError, UsageError
from ..results.diff import NOISE_MIN_STEPS, DiffResult, RunPair, Verdict
from ..results.measured import Measured, within_spread
from ..vocab import TIME_BASE_LABELS, Compared
from .compare import within_noise

_PERCENT = re.compile(r"[0-9]+(\.[0-9]+)?", re.ASCII)


def parse_percent(text: str) -> float:
    """``5%``, ``5`` or ``2.5`` -> 5.0 / 2.5; ValueError for anything else (``^\\d+(\\.\\d+)?%?$``, ASCII).

    Strict on purpose: ``float()`` would take ``1_0``, ``٥`` (Arabic-Indic five), ``-0``,
    ``inf`` and ``1e1``, and a CI threshold should mean exactly what it looks like.
    """
    s = text or ""
    if s.endswith("%"):
        s = s[:-1]
    if not _PERCENT.fullmatch(s):
        raise ValueError(f"{text!r} is not a percentage (digits, an optional decimal part and %: 5% or 2.5)")
    pct = float(s)
    if not math.isfinite(pct):  # 309 digits or more: float() says inf, and "grew by more than inf%" never fails
        raise ValueError(f"{text[:20]!r}… is not a percentage: too large to be one")
    return pct


def gate(result: DiffResult, pct: float, *, on: Compared | None = None,
         latency: tuple[Measured | None, Measured | None] = (None, None)) -> Verdict:
    """Fail when the compared figure grew by more than ``pct`` percent (the median step when the basis is
    per-step). A regression within noise still fails: the gate stays deterministic, and the verdict says so.

    ``on`` is ``--gate-on`` (None: the default rule above). ``latency`` overrides a side's measured latency
    (``--latency-before``/``--latency-after``); otherwise each side's ``measured.json`` is used.
    Raises :class:`InconclusiveError` (exit 5) by the default rule on a launch-bound side without measured
    latency, :class:`UsageError` for ``on=LATENCY`` without it, and :class:`IncomparableError` for busy or span
    over sides timed differently (device busy time against host self time says nothing about a regression).
    """
    mb = latency[0] or result.before.measured
    ma = latency[1] or result.after.measured
    if _compares_timed_figures(on, mb, ma):
        _same_time_base(result)
    compared = on if on is not None else _default(result, mb, ma)
    if compared == Compared.LATENCY:
        return _latency_verdict(pct, result, mb, ma, on is not None)
    if compared == Compared.SPAN:
        b, a = result.before_figures.span_us, result.after_figures.span_us
        return _verdict(pct, result, b, a, _span_within_noise(result), compared, on is not None)
    within = None if result.noise is None else result.noise.within_noise
    b, a = result.before_figures.total_us, result.after_figures.total_us
    return _verdict(pct, result, b, a, within, compared, on is not None)


def gate_runs(result: DiffResult, pct: float, *, on: Compared | None = None) -> list[RunPair]:
    """The gate over two folders of runs: each run pair decided on its own, as :func:`gate` decides a diff (on
    each run's own ``measured.json``), and its outcome recorded on the pair (``gate``, or ``inconclusive`` and
    why). Returns the pairs that regress. The CLI exits 4 when any does, else 5 when any pair is inconclusive.

    A usage or incomparable error on one pair is raised for the whole gate, naming the run."""
    for p in result.run_pairs:
        p.gate, p.inconclusive = None, ""
        try:
            p.gate = gate(p.diff, pct, on=on)
        except InconclusiveError as exc:
            p.inconclusive = str(exc).replace("--fail-if-slower: inconclusive: ", "", 1)
        except (UsageError, IncomparableError) as exc:
            raise type(exc)(f"run {p.run}: {exc}") from None
    return [p for p in result.run_pairs if p.gate is not None and not p.gate.ok]


def _compares_timed_figures(on: Compared | None, mb: Measured | None, ma: Measured | None) -> bool:
    """Whether the gate may compare busy time or span (which need both sides timed the same way): not when
    latency is asked for, nor by default when both sides were measured (latency is then the default)."""
    return on != Compared.LATENCY and not (on is None and mb is not None and ma is not None)


def _latency_verdict(pct: float, result: DiffResult, mb: Measured | None, ma: Measured | None,
                     chosen: bool) -> Verdict:
    """The verdict on measured latency (µs), within noise by the two measurements' spreads; a usage error when a
    side has no measurement."""
    if mb is None or ma is None:
        missing = " and ".join(s for s, m in (("before", mb), ("after", ma)) if m is None)
        raise UsageError(f"--gate-on latency: no measured latency for {missing}; give --latency-before/"
                         "--latency-after MS, or put the recorder's measured.json beside the traces")
    return _verdict(pct, result, mb.median_ms * 1000, ma.median_ms * 1000, within_spread(mb, ma), Compared.LATENCY,
                    chosen, (mb.source, ma.source))


def _default(result: DiffResult, mb: Measured | None, ma: Measured | None) -> Compared:
    """Latency where both sides were measured; busy time where neither side is launch-bound; else no verdict."""
    if mb is not None and ma is not None:
        return Compared.LATENCY
    if not result.launch_bound:
        return Compared.BUSY
    sides = " and ".join(s for s, f in (("before", result.before_figures), ("after", result.after_figures))
                         if f.launch_bound)
    raise InconclusiveError(
        f"--fail-if-slower: inconclusive: {sides} {'is' if ' and ' not in sides else 'are'} launch-bound, so "
        "neither busy time nor the profiled span is the latency; give --latency-before/--latency-after MS "
        "(or measured.json beside the traces), or choose --gate-on busy|span")


def _same_time_base(result: DiffResult) -> None:
    tb, ta = str(result.before.time_base), str(result.after.time_base)
    if tb != ta or "mixed" in (tb, ta):
        raise IncomparableError(
            f"--fail-if-slower: cannot gate {TIME_BASE_LABELS.get(tb, tb)} against {TIME_BASE_LABELS.get(ta, ta)}; "
            "compare traces timed the same way (both GPU or both CPU-only)")


def _verdict(pct: float, result: DiffResult, b: float, a: float, within: bool | None, compared: Compared,
             chosen: bool, sources: tuple[str, str] = ("", "")) -> Verdict:
    change = None if b <= 0 else 100.0 * (a - b) / b
    ok = a <= 0 if b <= 0 else a <= b * (1 + pct / 100.0)
    return Verdict(ok=ok, threshold_pct=pct, before_us=b, after_us=a, change_pct=change, basis=result.basis,
                   within_noise=within, compared=compared, chosen=chosen, sources=sources)


def _span_within_noise(result: DiffResult) -> bool | None:
    """The headline's noise rule applied to the per-step spans (None, unknown, under NOISE_MIN_STEPS steps a side)."""
    sb = [f.span_us for _, f in result.steps_before]
    sa = [f.span_us for _, f in result.steps_after]
    if len(sb) < NOISE_MIN_STEPS or len(sa) < NOISE_MIN_STEPS:
        return None
    delta = result.after_figures.span_us - result.before_figures.span_us
    return within_noise(delta, (max(sb) - min(sb) + max(sa) - min(sa)) / 2)
