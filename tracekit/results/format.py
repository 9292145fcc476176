"""How figures are worded in every text output: times, shares, bytes, labels, and a diff's headline.

Below the renderers, so that the notebook's one-line reprs and every text format say a figure the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..text import printable  # noqa: F401  (the renderers import it from here)
from ..vocab import TIME_BASE_LABELS, Basis

if TYPE_CHECKING:
    from .diff import DiffResult
    from .steps import PerStep


def fmt_time(us: float) -> str:
    """Human units with three significant-ish digits: 812 µs, 3.41 ms, 12.0 s."""
    a = abs(us)
    if a >= 1e6:
        return f"{us / 1e6:.2f} s"
    if a >= 1e3:
        return f"{us / 1e3:.2f} ms"
    if a >= 100:
        return f"{us:.0f} µs"
    return f"{us:.1f} µs"


def pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def signed(us: float) -> str:
    """``+0.60 ms`` / ``-1.80 ms`` / ``0.0 µs``: a delta always shows its direction."""
    if abs(us) < 0.05:
        return "0.0 µs"
    return ("+" if us > 0 else "") + fmt_time(us)


def ratio_text(before: float, after: float) -> str:
    """``0.58×``; ``gone``/``new`` where a side is 0, and ``<0.01×`` for a ratio above 0 that rounds to it."""
    if before > 0:
        if 0 < after / before < 0.005:
            return "<0.01×"
        return f"{after / before:.2f}×" if after > 0 else "gone"
    return "new" if after > 0 else "—"


def share_text(x: float | None) -> str:
    if x is None:
        return "n/a"
    v = 100 * x
    return f"{0.0 if abs(v) < 0.05 else v:.1f}%"


def fmt_bytes(n: int) -> str:
    a = abs(n)
    for unit, k in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if a >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


def time_base_label(time_base: str) -> str:
    """The one wording of a time base, in every format."""
    return TIME_BASE_LABELS.get(time_base, time_base)


def basis_label(basis: str) -> str:
    return "median step" if basis == Basis.MEDIAN_STEP else "total"


def headline(r: DiffResult) -> str:
    """``attention (median step): 2.69 ms → 1.03 ms · Δ -1.66 ms (-61.6%) · 2.61× faster``."""
    b, a = r.before_figures.total_us, r.after_figures.total_us
    parts = [f"attention ({basis_label(r.basis)}): {fmt_time(b)} → {fmt_time(a)}", f"Δ {signed(r.delta_us)}"
             + (f" ({r.delta_pct:+.1f}%)" if r.delta_pct is not None else "")]
    if r.no_claim:  # launch-bound, or nothing paired: busy time alone does not say faster or slower
        sb, sa = r.before_figures.span_us, r.after_figures.span_us
        if r.launch_bound:
            parts[0] = f"attention ({basis_label(r.basis)}): busy {fmt_time(b)} → {fmt_time(a)}, " \
                       f"profiled span {fmt_time(sb)} → {fmt_time(sa)}"
        return " · ".join([*parts, r.no_claim])
    parts.append(_speed_words(b, a, r.speedup))
    if r.noise is not None and (b > 0 or a > 0):
        parts.append(noise_words(r.noise.within_noise))
    return " · ".join(parts)


def per_step_line(ps: PerStep) -> str:
    """An attribution's first figure line on the one time base (issue 37): ``per step (median of 2): attention
    42.30 ms · busy 44.72 ms · span 46.64 ms · idle 1.92 ms (attention 95% of busy)``; on a trace without steps
    ``whole trace (no ProfilerStep events): attention 84.60 ms · busy 89.43 ms``."""
    parts = [f"attention {fmt_time(ps.attention_us)}", f"busy {fmt_time(ps.busy_us)}"]
    if ps.span_us is not None and ps.idle_us is not None:
        parts += [f"span {fmt_time(ps.span_us)}", f"idle {fmt_time(ps.idle_us)}"]
    return f"{ps.label}: " + " · ".join(parts) + f" (attention {pct(ps.attention_us, ps.busy_us):.0f}% of busy)"


def totals_label(ps: PerStep) -> str:
    """What the totals line sums, said beside it: ``totals over all 2 steps`` / ``totals (1 step)`` /
    ``totals, whole trace``."""
    if ps.span_us is None:
        return "totals, whole trace"
    return "totals (1 step)" if ps.steps == 1 else f"totals over all {ps.steps} steps"


def lead_line(r: DiffResult) -> str:
    """The diff's first line, the whole step on one basis (issue 37): ``step busy (per step, median of 2): 44.72 ms →
    5.54 ms · Δ -39.18 ms (-87.6%) · 8.08× faster``; ``latency (measured)``; ``step span (per step, …; launch-bound
    …)``; or why there is none. Attention follows on its own line (:func:`headline`)."""
    h = r.headline
    if h.basis is None or h.before_us is None or h.after_us is None:
        return f"whole step: not compared ({h.note})"
    b, a = h.before_us, h.after_us
    delta = a - b
    parts = [f"{_lead_label(r)}: {fmt_time(b)} → {fmt_time(a)}",
             f"Δ {signed(delta)}" + (f" ({100 * delta / b:+.1f}%)" if b > 0 else "")]
    speed = h.speedup
    if speed is not None and b > 0:
        # A launch-bound step's span holds the profiler's own launch overhead: it is shorter or longer, never
        # "faster", which only a latency (or busy time on a device that never waits) may claim.
        words = ("shorter", "longer") if h.basis == "step span" else ("faster", "slower")
        parts.append(f"{speed:.2f}× {words[0]}" if speed >= 1 else f"{1 / speed:.2f}× {words[1]}")
    return " · ".join(parts)


def _lead_label(r: DiffResult) -> str:
    """``latency (measured)`` / ``step busy (per step, median of 2)`` / ``step span (per step, …; why)``."""
    h = r.headline
    if h.basis == "latency":
        return "latency (measured)"
    n = max(len(r.whole_steps_before), len(r.whole_steps_after))
    label = f"{h.basis} ({'per step' if n == 1 else f'per step, median of {n}'}"
    return label + (f"; {h.note})" if h.note else ")")


def _speed_words(b: float, a: float, speedup: float | None) -> str:
    """``2.61× faster`` / ``1.20× slower``, or which side has no attention time (``b``/``a``: before/after µs)."""
    if b <= 0 and a <= 0:
        return "no attention time on either side"
    if speedup is None:
        return "no attention time after"
    if b <= 0:
        return "no attention time before"
    if speedup >= 1:
        return f"{speedup:.2f}× faster"
    return f"{1 / speedup:.2f}× slower"


def noise_words(within: bool | None) -> str:
    """``within noise`` / ``beyond noise`` / ``noise unknown`` (too few steps for a spread to mean anything)."""
    return "noise unknown" if within is None else "within noise" if within else "beyond noise"


def step_line(r: DiffResult) -> str | None:
    """``step (median): busy 2.61 ms → 1.02 ms, span 6.10 ms → 2.30 ms (attention 31% → 20% of busy)``: the whole
    step beside the attention headline (all its device work); None unless both sides have whole steps."""
    sb, sa = r.step_before, r.step_after
    if sb is None or sa is None:
        return None
    label = "step (median)" if max(len(r.whole_steps_before), len(r.whole_steps_after)) > 1 else "step"
    share = f"{pct(sb.attention_us, sb.busy_us):.0f}% → {pct(sa.attention_us, sa.busy_us):.0f}%"
    return (f"{label}: busy {fmt_time(sb.busy_us)} → {fmt_time(sa.busy_us)}, span {fmt_time(sb.span_us)} → "
            f"{fmt_time(sa.span_us)} (attention {share} of busy)")
