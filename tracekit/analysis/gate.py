"""The CI gate (``tracekit diff --fail-if-slower PCT``): its threshold's parsing, and its decision on a diff.

The rule (docs/diff.md, "CI gate"; docs/attribution.md, "The CI gate"): compare the latency measured outside the
profiler when both sides have it; otherwise busy time, unless a side is launch-bound: then neither busy time
nor the profiled span is what the user waits for, and the gate refuses to decide (InconclusiveError, exit 5).
``--gate-on busy|span|latency`` makes the choice explicit.

Whatever it compares, the gate decides only when the noise cannot carry the figure across the threshold (issue
37): latency needs at least ``MIN_REPEATS`` repeats a side with their spread, and per-repeat samples are put to
the Mann-Whitney U test (analysis/ranktest.py) at ``ALPHA``; busy time and span need the step-to-step spread
(``NOISE_MIN_STEPS`` steps a side). Otherwise: InconclusiveError (exit 5), naming why.
"""

from __future__ import annotations

import math
import re
import statistics

from ..errors import InconclusiveError, IncomparableError, UsageError
from ..results.attribution import Attribution
from ..results.diff import NOISE_MIN_STEPS, DiffResult, RunPair, Verdict
from ..results.format import fmt_time
from ..results.measured import LATENCY_RANGE_WORDS, Measured, plausible_latency, within_spread
from ..vocab import TIME_BASE_LABELS, Compared
from .compare import within_noise
from .ranktest import mann_whitney

_PERCENT = re.compile(r"[0-9]+(\.[0-9]+)?", re.ASCII)
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"  # plain ASCII decimals, as for a percentage
_SPREAD = re.compile(rf"({_NUMBER})\s*(?:±|\+-|\+/-)\s*({_NUMBER})", re.ASCII)
_SAMPLES = re.compile(rf"{_NUMBER}(?:\s*,\s*{_NUMBER})*", re.ASCII)
MIN_REPEATS = 3  # a latency gate wants at least this many repeats a side (fewer: exit 5)
ALPHA = 0.05  # the U test's level, one-sided each way: with 3 repeats a side, only full separation reaches it


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


def parse_latency(text: str, side: str) -> Measured:
    """``--latency-before``/``--latency-after``: ``2.51±0.04`` (or ``2.51+-0.04``: a median and its half-spread),
    ``2.49,2.51,2.55`` (samples: each repeat's time) or ``2.51`` (one sample, which alone decides nothing), in ms.
    ValueError, one line, for anything else: a latency that is not a positive number, or a spread wider than it;
    and for a latency (a median, a spread's end, a sample) outside ``LATENCY_RANGE_MS`` (results/measured.py).
    """
    s = (text or "").strip()
    source = f"--latency-{side}"
    spread = _SPREAD.fullmatch(s)
    if spread:
        median, half = float(spread.group(1)), float(spread.group(2))
        if median <= 0 or half >= median or not math.isfinite(median + half):
            raise ValueError(f"{text[:40]!r}: a latency ± its half-spread needs 0 <= spread < latency (ms)")
        if not all(plausible_latency(x) for x in (median - half, median, median + half)):
            raise ValueError(f"{text[:40]!r}: a latency and its spread's ends must lie {LATENCY_RANGE_WORDS}")
        return Measured(median_ms=median, low_ms=median - half, high_ms=median + half, spread_kind="±",
                        source=source)
    if not _SAMPLES.fullmatch(s):
        raise ValueError(f"{text[:40]!r} is not a latency in ms: give 2.51±0.04, samples 2.49,2.51,2.55, or 2.51")
    return _samples(tuple(float(x) for x in s.split(",")), text, source)


def _samples(xs: tuple[float, ...], text: str, source: str) -> Measured:
    """Latency samples as a measurement: their median and min-max; one sample has no spread."""
    if not all(math.isfinite(x) and x > 0 for x in xs):
        raise ValueError(f"{text[:40]!r}: every latency sample must be a positive number of ms")
    if not all(plausible_latency(x) for x in xs):
        raise ValueError(f"{text[:40]!r}: every latency sample must lie {LATENCY_RANGE_WORDS}")
    if len(xs) == 1:
        return Measured(median_ms=xs[0], repeats=1, samples_ms=xs, source=source)
    return Measured(median_ms=statistics.median(xs), low_ms=min(xs), high_ms=max(xs), spread_kind="min-max",
                    repeats=len(xs), samples_ms=xs, source=source)


def gate(result: DiffResult, pct: float, *, on: Compared | None = None,
         latency: tuple[Measured | None, Measured | None] = (None, None)) -> Verdict:
    """Fail when the compared figure grew by more than ``pct`` percent (the median step when the basis is
    per-step), pass when it did not, and decide neither (InconclusiveError, exit 5) when the noise could carry
    it across the threshold: the rules are in the module's docstring.

    ``on`` is ``--gate-on`` (None: the default rule above). ``latency`` overrides a side's measured latency
    (``--latency-before``/``--latency-after``); otherwise each side's ``measured.json`` is used.
    Raises :class:`InconclusiveError` (exit 5) by the default rule on a launch-bound side without measured
    latency, and whenever the noise rules above leave the answer open; :class:`UsageError` for ``on=LATENCY``
    without a latency, and :class:`IncomparableError` for busy or span over sides timed differently (device busy
    time against host self time says nothing about a regression).
    """
    mb = latency[0] or result.before.measured
    ma = latency[1] or result.after.measured
    if on != Compared.LATENCY:  # (--gate-on latency names a missing side itself)
        _paired(latency, mb, ma)
    if _compares_timed_figures(on, mb, ma):
        _same_time_base(result)
    compared = on if on is not None else _default(result, mb, ma)
    if compared == Compared.LATENCY:
        return _latency_verdict(pct, result, mb, ma, on is not None)
    if compared == Compared.SPAN:
        b, a = result.before_figures.span_us, result.after_figures.span_us
        spread, within = _span_noise(result)
    else:
        b, a = result.before_figures.total_us, result.after_figures.total_us
        spread, within = _busy_noise(result)
    return _step_verdict(pct, result, (b, a, spread), within, compared, on is not None)


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


def _paired(given: tuple[Measured | None, Measured | None], mb: Measured | None, ma: Measured | None) -> None:
    """A latency given for one side needs one for the other (given too, or its measured.json): alone it would be
    dropped without a word and the gate would decide on busy time (issue 41). UsageError (exit 2) naming both."""
    for side, other, mine, theirs in (("before", "after", given[0], ma), ("after", "before", given[1], mb)):
        if mine is not None and theirs is None:
            raise UsageError(f"--latency-{side} given without a latency for {other}: give --latency-{other} too, "
                             f"or put the recorder's measured.json beside {other}'s traces")


def _compares_timed_figures(on: Compared | None, mb: Measured | None, ma: Measured | None) -> bool:
    """Whether the gate may compare busy time or span (which need both sides timed the same way): not when
    latency is asked for, nor by default when both sides were measured (latency is then the default)."""
    return on != Compared.LATENCY and not (on is None and mb is not None and ma is not None)


def _step_verdict(pct: float, result: DiffResult, figures: tuple[float, float, float | None], within: bool | None,
                  compared: Compared, chosen: bool) -> Verdict:
    """Busy time or span, ``(before, after, step-to-step spread)`` in µs: a regression when ``after`` exceeds the
    threshold by more than the spread, a pass when it stays under it by the spread, else no decision."""
    b, a, spread = figures
    what = "profiled span" if compared == Compared.SPAN else "attention busy time"
    if spread is None:
        nb, na = _steps(result.before), _steps(result.after)
        raise InconclusiveError(
            f"--fail-if-slower: inconclusive: {what} has no step-to-step spread (before {_n(nb, 'step')}, after "
            f"{_n(na, 'step')}; it needs at least {NOISE_MIN_STEPS} a side): profile more steps, or give the "
            "latency measured with repeats (--latency-before/--latency-after)")
    limit = b * (1 + pct / 100.0)
    if a - spread <= limit < a + spread:
        raise InconclusiveError(
            f"--fail-if-slower: inconclusive: {what} {fmt_time(b)} → {fmt_time(a)}{_change(b, a)} is within the "
            f"step-to-step spread (±{fmt_time(spread)}) of the {pct:g}% threshold ({fmt_time(limit)}): "
            "profile more steps, or give the latency measured with repeats (--latency-before/--latency-after)")
    ok = a + spread <= limit
    side = "under" if ok else "over"
    margin = "at least" if ok else "more than"
    change = None if b <= 0 else 100.0 * (a - b) / b
    return Verdict(ok=ok, threshold_pct=pct, before_us=b, after_us=a, change_pct=change, basis=result.basis,
                   within_noise=within, compared=compared, chosen=chosen,
                   evidence=f"{side} the threshold ({fmt_time(limit)}) by {margin} the step-to-step spread "
                            f"(±{fmt_time(spread)})" if spread > 0 else f"{side} the threshold, no step-to-step spread")


def _steps(att: Attribution) -> int:
    """Profiled steps with attention blocks on one side."""
    return len({b.step for b in att.blocks if b.step is not None})


def _n(n: int, unit: str) -> str:
    return f"{n} {unit}{'' if n == 1 else 's'}"


def _change(b: float, a: float) -> str:
    return "" if b <= 0 else f" ({100.0 * (a - b) / b:+.1f}%)"


def _latency_verdict(pct: float, result: DiffResult, mb: Measured | None, ma: Measured | None,
                     chosen: bool) -> Verdict:
    """The verdict on measured latency (µs): by the U test where both sides kept their samples, else by the
    spreads; a usage error when a side has no measurement, and no decision on fewer than MIN_REPEATS repeats."""
    if mb is None or ma is None:
        missing = " and ".join(s for s, m in (("before", mb), ("after", ma)) if m is None)
        raise UsageError(f"--gate-on latency: no measured latency for {missing}; give --latency-before/"
                         "--latency-after MS, or put the recorder's measured.json beside the traces")
    why = [w for w in (_too_few_repeats(mb, "before"), _too_few_repeats(ma, "after")) if w]
    if why:
        raise InconclusiveError(f"--fail-if-slower: inconclusive: measured latency: {'; '.join(why)}; the gate "
                                f"needs at least {MIN_REPEATS} repeats a side with their spread")
    within: bool | None
    if _has_samples(mb) and _has_samples(ma):
        ok, evidence, within = _rank_decision(pct, mb, ma)
    else:
        ok, evidence = _spread_decision(pct, mb, ma)
        within = within_spread(mb, ma)
    b, a = mb.median_ms * 1000, ma.median_ms * 1000
    return Verdict(ok=ok, threshold_pct=pct, before_us=b, after_us=a, change_pct=100.0 * (a - b) / b,
                   basis=result.basis, within_noise=within, compared=Compared.LATENCY, chosen=chosen,
                   sources=(mb.source, ma.source), evidence=evidence)


def _has_samples(m: Measured) -> bool:
    return m.samples_ms is not None and len(m.samples_ms) >= MIN_REPEATS


def _too_few_repeats(m: Measured, side: str) -> str | None:
    """Why one side's latency cannot be gated on (one repeat, too few, no spread), or None."""
    n = m.sample_count
    where = f"{side} ({m.source})" if m.source else side
    if n is not None and n < MIN_REPEATS:
        if m.source.startswith("--latency-") and n == 1:
            return f"{where} is one sample (give MS±S, or each repeat's time MS,MS,MS)"
        return f"{where} has {'one repeat' if n == 1 else _n(n, 'repeat')}"
    if m.samples_ms is None and m.half_spread_ms is None:
        return f"{where} has no spread"
    return None


def _ends(m: Measured) -> tuple[float, float]:
    """A side's interval (ms): its spread, else the range of its samples."""
    if m.low_ms is not None and m.high_ms is not None:
        return m.low_ms, m.high_ms
    assert m.samples_ms is not None  # (_too_few_repeats refused a side with neither)
    return min(m.samples_ms), max(m.samples_ms)


def _spread_decision(pct: float, mb: Measured, ma: Measured) -> tuple[bool, str]:
    """Latency by the spreads alone: decided only when after's interval lies wholly above before's raised by
    ``pct`` (a regression) or wholly at or below it (a pass)."""
    k = 1 + pct / 100.0
    (lo_b, hi_b), (lo_a, hi_a) = _ends(mb), _ends(ma)
    words = f"after {lo_a:.3f}–{hi_a:.3f} ms against before +{pct:g}% {lo_b * k:.3f}–{hi_b * k:.3f} ms"
    if lo_a > hi_b * k:
        return False, f"the spreads are apart: {words}"
    if hi_a <= lo_b * k:
        return True, f"the spreads are apart: {words}"
    raise InconclusiveError(f"--fail-if-slower: inconclusive: measured latency: the spreads overlap: {words}")


def _rank_decision(pct: float, mb: Measured, ma: Measured) -> tuple[bool, str, bool]:
    """Latency by the one-sided Mann-Whitney U tests of after's samples against before's raised by ``pct``, at
    ALPHA each way; and whether after is within noise of before (neither one-sided test at ALPHA, unraised)."""
    assert mb.samples_ms is not None and ma.samples_ms is not None
    k = 1 + pct / 100.0
    t = mann_whitney(ma.samples_ms, [x * k for x in mb.samples_ms])
    same = mann_whitney(ma.samples_ms, mb.samples_ms)
    within = min(same.p_greater, same.p_less) > ALPHA
    test = (f"Mann-Whitney U {t.u:g} of {t.n_x * t.n_y}, {t.n_x} repeats after against {t.n_y} before "
            f"+{pct:g}%{'' if t.exact else ' (normal approximation)'}")
    if t.p_greater <= ALPHA:
        return False, f"{test}: slower, p {t.p_greater:.2g} <= {ALPHA:g}", within
    if t.p_less <= ALPHA:
        return True, f"{test}: not slower, p {t.p_less:.2g} <= {ALPHA:g}", within
    raise InconclusiveError(f"--fail-if-slower: inconclusive: measured latency: {test}: p {t.p_greater:.2g} "
                            f"(slower) and {t.p_less:.2g} (not slower), neither <= {ALPHA:g}")


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


def _busy_noise(result: DiffResult) -> tuple[float | None, bool | None]:
    """The diff's own noise (analysis/compare.py): the combined per-step spread, None under NOISE_MIN_STEPS steps
    a side; and the headline's within-noise verdict."""
    n = result.noise
    if n is None:
        return None, None
    return (n.combined_spread_us if n.known else None), n.within_noise


def _span_noise(result: DiffResult) -> tuple[float | None, bool | None]:
    """The per-step spans' combined spread ((range before + range after) / 2) and the headline's noise rule on
    them; (None, None), unknown, under NOISE_MIN_STEPS steps a side."""
    sb = [f.span_us for _, f in result.steps_before]
    sa = [f.span_us for _, f in result.steps_after]
    if len(sb) < NOISE_MIN_STEPS or len(sa) < NOISE_MIN_STEPS:
        return None, None
    spread = (max(sb) - min(sb) + max(sa) - min(sa)) / 2
    delta = result.after_figures.span_us - result.before_figures.span_us
    return spread, within_noise(delta, spread)
