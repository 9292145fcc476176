"""The CI gate (``tracekit diff --fail-if-slower PCT``): its threshold's parsing, and its decision on a diff."""

from __future__ import annotations

import re

from ..errors import IncomparableError
from ..results.diff import DiffResult, Verdict
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
    return float(s)


def gate(result: DiffResult, pct: float) -> Verdict:
    """Fail when attention time grew by more than ``pct`` percent. Compares the headline figures (the
    median step when the basis is per-step). A regression within noise still fails: the gate stays
    deterministic, and the verdict says the change is within noise.

    Raises :class:`IncomparableError` when the sides use different time bases: device busy time
    against host self time says nothing about a regression.
    """
    tb, ta = str(result.before.time_base), str(result.after.time_base)
    if tb != ta or "mixed" in (tb, ta):
        raise IncomparableError(
            f"--fail-if-slower: cannot gate {TIME_BASE_LABELS.get(tb, tb)} against {TIME_BASE_LABELS.get(ta, ta)}; "
            "compare traces timed the same way (both GPU or both CPU-only)")
    compared = Compared.SPAN if result.launch_bound else Compared.BUSY
    if compared == Compared.SPAN:  # busy time is not what a launch-bound run waits for: gate on the profiled span
        b, a = result.before_figures.span_us, result.after_figures.span_us
        within = _span_within_noise(result)
    else:
        b, a = result.before_figures.total_us, result.after_figures.total_us
        within = None if result.noise is None else result.noise.within_noise
    if b <= 0:
        return Verdict(ok=a <= 0, threshold_pct=pct, before_us=b, after_us=a, change_pct=None, basis=result.basis,
                       within_noise=within, compared=compared)
    return Verdict(ok=a <= b * (1 + pct / 100.0), threshold_pct=pct, before_us=b, after_us=a,
                   change_pct=100.0 * (a - b) / b, basis=result.basis, within_noise=within, compared=compared)


def _span_within_noise(result: DiffResult) -> bool | None:
    """The headline's noise rule applied to the per-step spans (None without two steps on each side)."""
    sb = [f.span_us for _, f in result.steps_before]
    sa = [f.span_us for _, f in result.steps_after]
    if len(sb) < 2 or len(sa) < 2:
        return None
    delta = result.after_figures.span_us - result.before_figures.span_us
    return within_noise(delta, (max(sb) - min(sb) + max(sa) - min(sa)) / 2)
