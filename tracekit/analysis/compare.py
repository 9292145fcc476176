"""Compare two attributions: where attention time went between a *before* and an *after* trace.

Pure functions over :class:`~tracekit.results.Attribution`, giving a :class:`~tracekit.results.DiffResult`;
nothing here prints or formats, reads files or knows about paths (those are tracekit.run.api).
The rules (docs/attribution.md, "Diff"):

- **Headline basis.** With per-step figures on both sides (every block inside a ``ProfilerStep``)
  and at least two steps on one side, the headline is the *median step*: the step whose attention
  total is the median (the mean of the two middle steps when the count is even). Its own category
  split is used, so category deltas still add up to the total delta exactly (independent
  per-category medians would not). Otherwise the headline is the whole-trace total.
- **Noise.** Needs at least NOISE_MIN_STEPS (3) steps on *both* sides: the range of two steps says nothing
  about a third, so with two the spreads are shown and the verdicts are None (unknown). Each side's spread is
  the min–max range of its per-step totals; the change is *within noise* when
  ``|Δ| <= (range_before + range_after) / 2``, the gap at which the two ranges would just touch if each median
  sat mid-range.
- **Pairing.** Blocks pair by (trace, step position, phase, kind, rank of that kind in the step);
  then ``fused-kernel`` blocks still unpaired pair by (trace, step position, phase, rank among
  those), since their names are the kernels that changed. Steps pair by position, not number.
  Unpaired blocks are listed, never dropped.
- **Kernels.** Every device event owned by a block (host ops on CPU-only traces) per side; a kernel
  whose name never occurs on the other side is "only before" (gone) or "only after" (new). Times
  are summed durations, like ``top_kernels``. Kernels on both sides whose count or time changed beyond
  noise are ``kernels_changed`` (rule in :func:`kernels_changed`).
- **Ranks.** Two folders of ranks (both with a per-rank view, tracekit.results.ranks) pair rank N with rank N;
  a rank on one side only is listed as such. Nothing else depends on this pairing.
- **Wall clock.** Each side's headline figures carry its blocks' span and idle on the same basis. When
  either side is launch-bound (idle > half the span) the headline claims no speedup from busy time
  (``no_claim``) and the CI gate compares span.
- **Whole step.** Beside attention, each side's median step as a whole (``step_before``/``step_after``): busy
  and span of all its device work (``TraceSummary.step_figures``): the side's own median step
  (tracekit.results.steps, by attention time, else by whole-step busy), the one its attribution headlines.
- **Memory.** Bytes allocated inside blocks, summed, and the peak (largest ``Total Allocated`` at an allocation
  inside any block), each only when both sides carry memory events.
"""

from __future__ import annotations

import math
from collections import defaultdict

from ..model import Shape, shape_text
from ..results.attribution import EPS_US, Attribution, BlockResult, zero_categories
from ..results.steps import median_whole_step, middle
from ..results.stages import pair_stages  # issue 44: stage to stage
from ..results.diff import (
    EAGER_TO_FUSED_ALLOC, NOISE_MIN_STEPS, AllocDelta, BlockPair, CategoryDelta, CategoryNoise, DiffResult, Figures,
    HEADLINE_LATENCY, HEADLINE_STEP_BUSY, HEADLINE_STEP_SPAN, Headline,
    KernelChange, KernelTotal, Noise, RankPair, Spread, WholeStep, peak_of, shares_defined, totals_figures, whole_steps,
)
from ..vocab import (
    CALLED_SOFTMAX_OPS,
    CATEGORIES, MATMUL_ROLES, TIME_BASE_LABELS, Basis, Category, FoundBy, GraphMode, PairedBy, TimeBase,
    is_launch_bound,
)
from .roles import zero_roles

BASIS_MEDIAN, BASIS_TOTAL = Basis.MEDIAN_STEP, Basis.TOTAL


def within_noise(delta_us: float, spread_us: float) -> bool:
    """The noise rule (docs/attribution.md, "Noise"): a change no bigger than the spread, up to 1 ns rounding."""
    return abs(delta_us) <= spread_us + EPS_US


def diff_attributions(before: Attribution, after: Attribution) -> DiffResult:
    """The diff of two attributions (kernel tables from each side's full ``Attribution.kernels``)."""
    warnings = compare_headers(before, after)
    kb, ka = _kernel_table(before), _kernel_table(after)
    per_b, per_a = step_figures(before), step_figures(after)
    basis, basis_note, noise_note = _basis(before, after, per_b, per_a)
    if basis == Basis.MEDIAN_STEP:
        fig_b, fig_a = _bound(median_step(per_b), before), _bound(median_step(per_a), after)
    else:
        fig_b, fig_a = totals_figures(before), totals_figures(after)
        warnings += _step_count_warning(before, after)
    noise = None
    if basis == Basis.MEDIAN_STEP and len(per_b) >= 2 and len(per_a) >= 2:
        noise = _noise(per_b, per_a, fig_b, fig_a)
        noise_note = _noise_note(noise, len(per_b), len(per_a))
    cats = _category_deltas(fig_b, fig_a)
    pairs, ub, ua = pair_blocks(before, after)
    launch = _launch_note(fig_b, fig_a, _replays(before), _replays(after))
    no_claim = _block_warnings(before, after, bool(pairs), launch, warnings)
    changed, changed_note = kernels_changed(before, after, kb, ka, noise is not None and noise.known,
                                            unknown=noise is not None and not noise.known)
    unit_b, unit_a = _unit(before), _unit(after)
    alloc = _alloc(before, after)
    # The per-step figures are shown only when the headline compares steps; the median whole step is each side's
    # own (tracekit.results.steps), the one its attribution headlines, so the two outputs cannot disagree.
    shown_b, shown_a = (per_b, per_a) if basis == Basis.MEDIAN_STEP else ([], [])
    whole_b, whole_a = whole_steps(before), whole_steps(after)
    step_b, step_a = median_whole_step(before, whole_b), median_whole_step(after, whole_a)
    return DiffResult(
        before=before, after=after, basis=basis, basis_note=basis_note, before_figures=fig_b, after_figures=fig_a,
        categories=cats, pairs=pairs, unmatched_before=ub, unmatched_after=ua,
        kernel_unit=unit_b if unit_b == unit_a else "mixed", kernels_before=kb, kernels_after=ka,
        only_before=_only_in(kb, ka), only_after=_only_in(ka, kb), steps_before=shown_b, steps_after=shown_a,
        noise=noise, noise_note=noise_note, alloc=alloc, conclusions=_conclusions(cats, alloc),
        warnings=warnings, labels=(before.source, after.source),
        kernels_changed=changed, kernels_changed_note=changed_note, no_claim=no_claim,
        ranks=pair_ranks(before, after), whole_steps_before=whole_b, whole_steps_after=whole_a,
        step_before=step_b, step_after=step_a, headline=whole_headline(before, after, step_b, step_a),
        stages=pair_stages(before.stages, after.stages))


def whole_headline(before: Attribution, after: Attribution, step_b: WholeStep | None,
                   step_a: WholeStep | None) -> Headline:
    """The diff's lead (docs/attribution.md, "Diff"): measured latency when both sides have it; else the median
    step's busy time; its span where either side's step is launch-bound (busy time is then not what the user
    waits for); no lead, with the reason, when a side has no whole step."""
    mb, ma = before.measured, after.measured
    if mb is not None and ma is not None:
        return Headline(basis=HEADLINE_LATENCY, before_us=1000 * mb.median_ms, after_us=1000 * ma.median_ms,
                        note="measured outside the profiler (each side's measured.json)")
    if step_b is None or step_a is None:
        return _no_lead(step_b, step_a)
    bound = [name for name, w in (("before", step_b), ("after", step_a))
             if is_launch_bound(w.span_us - w.busy_us, w.span_us)]
    if bound:
        return Headline(basis=HEADLINE_STEP_SPAN, before_us=step_b.span_us, after_us=step_a.span_us,
                        note=f"{' and '.join(bound)} launch-bound (the device idles over half the step): busy time "
                             f"is not what the user waits for")
    return Headline(basis=HEADLINE_STEP_BUSY, before_us=step_b.busy_us, after_us=step_a.busy_us)


def _no_lead(step_b: WholeStep | None, step_a: WholeStep | None) -> Headline:
    """No lead, and why: the sides without a whole step (no ProfilerStep, or CPU-only) and no measured latency."""
    sides = [name for name, w in (("before", step_b), ("after", step_a)) if w is None]
    verb = "have" if len(sides) == 2 else "has"
    return Headline(basis=None, note=f"{' and '.join(sides)} {verb} no device time per ProfilerStep (no "
                                     f"ProfilerStep, or CPU-only) and no measured latency; attention alone compares")


def _only_in(side: list[KernelTotal], other: list[KernelTotal]) -> list[KernelTotal]:
    """The side's kernel rows whose name the other side never ran."""
    names = {k.name for k in other}
    return [k for k in side if k.name not in names]


def _step_count_warning(before: Attribution, after: Attribution) -> list[str]:
    """Whole-trace totals of sides with different step counts may measure different amounts of work."""
    nb, na = len(_steps(before)), len(_steps(after))
    if nb == na:
        return []
    return [f"before has {_n_steps(nb)} and after {_n_steps(na)}: whole-trace totals may cover different amounts "
            f"of work"]


def _noise_note(noise: Noise, nb: int, na: int) -> str:
    """The rule the per-step noise applies, or why it is unknown (too few steps on a side)."""
    if not noise.known:
        return (f"noise unknown: before {_n_steps(nb)}, after {_n_steps(na)}; a per-step "
                f"spread needs at least {NOISE_MIN_STEPS} steps on each side")
    return (f"per-step spread: before {nb} steps, after {na} steps; "
            f"within noise when |Δ| <= (range before + range after) / 2")


def _category_deltas(fig_b: Figures, fig_a: Figures) -> dict[str, CategoryDelta]:
    """Per category: before, after, their ratio, and its share of the total delta (when that is more than
    rounding), so that the deltas sum to the total's."""
    total_delta = fig_a.total_us - fig_b.total_us
    shares = shares_defined(total_delta, max(fig_a.total_us, fig_b.total_us))
    cats = {}
    for c in CATEGORIES:
        b, a = fig_b.categories[c], fig_a.categories[c]
        d = a - b
        share = None
        if shares:
            share = d / total_delta if d != 0 else 0.0  # never -0.0
        cats[c] = CategoryDelta(before_us=b, after_us=a, delta_us=d, ratio=a / b if b > 0 else None,
                                share_of_delta=share)
    return cats


def _block_warnings(before: Attribution, after: Attribution, paired: bool, no_claim: str,
                    warnings: list[str]) -> str:
    """Warnings about how each side found its blocks (appended to ``warnings``); the headline's no-claim
    reason, extended when sides found by different modes pair nothing."""
    fb, fa = sorted({b.found_by for b in before.blocks}), sorted({b.found_by for b in after.blocks})
    if fb and fa and fb != fa:
        warnings.append(f"the sides found blocks differently: before by {', '.join(fb)}, after by {', '.join(fa)} "
                        f"(e.g. a trace with module stacks against one without); blocks pair only within one mode")
        if not paired:
            no_claim = _joined(no_claim, f"no block pairs: before found blocks by {', '.join(fb)}, after by "
                                         f"{', '.join(fa)}, so the totals may cover different code; profile both "
                                         f"the same way")
    warnings += _empty_sides(before, after)
    return no_claim


def _empty_sides(before: Attribution, after: Attribution) -> list[str]:
    """A warning when one side, or both, found no attention block at all."""
    if not before.blocks and not after.blocks:
        return ["no attention blocks on either side (try --scope REGEX to name your attention modules)"]
    if not before.blocks or not after.blocks:
        return [f"no attention blocks in {'before' if not before.blocks else 'after'}"
                f" ({(before if not before.blocks else after).source})"]
    return []


def _joined(*reasons: str) -> str:
    """Reasons joined by '; ', the empty ones left out."""
    return "; ".join(x for x in reasons if x)


def pair_ranks(before: Attribution, after: Attribution) -> list[RankPair]:
    """Rank N with rank N, by rank number, when both sides have a per-rank view."""
    if before.ranks is None or after.ranks is None:
        return []
    rb = {r.rank: r for r in before.ranks.rows}
    ra = {r.rank: r for r in after.ranks.rows}
    return [RankPair(rank=n, before=rb.get(n), after=ra.get(n)) for n in sorted(rb.keys() | ra.keys())]


def _times(x: float) -> str:
    return f"{x:.2f}×" if x < 10 else f"{x:.1f}×"


def _moves(before_us: float, after_us: float) -> str:
    """``falls 4.07×`` / ``rises 1.2×`` / ``is unchanged``."""
    if before_us <= 0 or after_us <= 0:
        return f"goes {before_us:.1f} µs → {after_us:.1f} µs"
    if before_us > after_us:
        return f"falls {_times(before_us / after_us)}"
    if after_us > before_us:
        return f"rises {_times(after_us / before_us)}"
    return "is unchanged"


def _launch_note(fig_b: Figures, fig_a: Figures, replay_b: bool = False, replay_a: bool = False) -> str:
    """The headline's words when either side is launch-bound (docs/attribution.md, Diff): busy time then
    measures the kernels, not what the user waits for, so no speedup is claimed from it. A side that replays
    CUDA/HIP graphs has the replay's own span (the device's times: no launch gaps), which is what to compare."""
    if not (fig_b.launch_bound or fig_a.launch_bound):
        return ""
    idle = " / ".join(f"{100 * f.idle_us / f.span_us:.0f}%" if f.span_us > 0 else "n/a" for f in (fig_b, fig_a))
    sides = [name for name, r in (("before", replay_b), ("after", replay_a)) if r]
    advice = (f"{' and '.join(sides)} replay{'s' if len(sides) == 1 else ''} CUDA/HIP graphs, so compare the "
              f"spans: a replay's span is its kernels' own, without launch gaps" if sides else
              "measure latency outside the profiler or capture CUDA graphs")
    return (f"launch-bound: the GPU is idle {idle} of the attention blocks; busy time "
            f"{_moves(fig_b.total_us, fig_a.total_us)}, profiled span {_moves(fig_b.span_us, fig_a.span_us)}; "
            f"{advice}")


def _replays(side: Attribution) -> bool:
    """Whether the side's attention ran from graph replays (a trace in a replay mode with replayed kernels)."""
    return any(t.graphs is not None and t.graphs.replayed_kernels > 0 and t.graphs.mode != GraphMode.CAPTURE_ONLY
               for t in side.traces)


def _conclusions(cats: dict[str, CategoryDelta], alloc: AllocDelta | None) -> list[str]:
    """What the figures show, in words every format carries (the terminal prints them next to the memory line)."""
    out = []
    sm, fa = cats[Category.SOFTMAX], cats[Category.FUSED_ATTENTION]
    if alloc is not None and alloc.delta_bytes < 0 and sm.before_us > 0 and sm.after_us == 0 and fa.after_us > 0:
        out.append(EAGER_TO_FUSED_ALLOC)
    return out


# ---------------------------------------------------------------------------------------------
# Steps, basis and noise


def _steps(att: Attribution) -> list[int]:
    return sorted({s for t in att.traces for s in t.steps})


def _n_steps(n: int) -> str:
    return "no ProfilerStep" if n == 0 else f"{n} step{'s' if n != 1 else ''}"


def _step_noise(per: dict[int | None, float], steps: list[int]) -> tuple[float, float]:
    """(median, range) of one kernel's per-step time; a step without it counts 0."""
    xs = [per.get(s, 0.0) for s in steps]
    return _median(xs), max(xs) - min(xs)


KERNEL_CHANGE_PCT = 5.0  # without a noise estimate: a time change must exceed 5% of before ...
KERNEL_CHANGE_FLOOR_US = 1.0  # ... and 1 µs (all steps) to count


def kernels_changed(before: Attribution, after: Attribution, kb: list[KernelTotal], ka: list[KernelTotal],
                    per_step: bool, unknown: bool = False) -> tuple[list[KernelChange], str]:
    """Kernels on both sides whose count or time changed beyond noise, by |Δ| (all steps), and the rule used.

    With per-step noise (``per_step``: NOISE_MIN_STEPS steps or more on both sides) the rule is the headline's,
    per kernel: its per-step count changed, or its median-step time moved by more than the mean of the two
    sides' per-step ranges. Without it: the count changed, or the time by more than KERNEL_CHANGE_PCT % of
    before and KERNEL_CHANGE_FLOOR_US; ``unknown`` says why in the note (steps too few for noise, not absent).
    """
    def by_name(rows: list[KernelTotal]) -> dict[str, tuple[int, float, Category]]:
        out: dict[str, tuple[int, float, Category]] = {}
        for k in rows:  # by time, so the first row of a name is its costliest category
            n0, us0, c0 = out.get(k.name, (0, 0.0, k.category))
            out[k.name] = (n0 + k.count, us0 + k.total_us, c0)
        return out

    def steps_of(att: Attribution) -> dict[str, tuple[dict[int | None, int], dict[int | None, float]]]:
        out: dict[str, tuple[dict[int | None, int], dict[int | None, float]]] = {}
        for (name, _, step), (k, us) in att.kernels_by_step.items():
            cnt, tim = out.setdefault(name, ({}, {}))
            cnt[step] = cnt.get(step, 0) + k
            tim[step] = tim.get(step, 0.0) + us
        return out

    nb, na = by_name(kb), by_name(ka)
    if per_step:
        sb, sa = _steps(before), _steps(after)
        pb, pa = steps_of(before), steps_of(after)
    out = []
    for name, (cb, ub, _) in nb.items():
        if name not in na:
            continue
        ca, ua, cat = na[name]
        if per_step:
            beyond = _moved_per_step(pb.get(name, ({}, {})), pa.get(name, ({}, {})), sb, sa)
        else:
            beyond = cb != ca or abs(ua - ub) > max(KERNEL_CHANGE_PCT / 100 * ub, KERNEL_CHANGE_FLOOR_US)
        if beyond and (cb != ca or ub != ua):
            out.append(KernelChange(name=name, category=cat,
                                    before=KernelTotal(name=name, category=nb[name][2], count=cb, total_us=ub),
                                    after=KernelTotal(name=name, category=cat, count=ca, total_us=ua)))
    out.sort(key=lambda k: (-abs(k.delta_us), k.name))
    return out, _kernel_rule(per_step, unknown)


_StepCounts = tuple[dict[int | None, int], dict[int | None, float]]  # one kernel's count and time by step


def _moved_per_step(before: _StepCounts, after: _StepCounts, sb: list[int], sa: list[int]) -> bool:
    """The per-step rule for one kernel: its median per-step count changed, or its median-step time moved by
    more than the mean of the two sides' per-step ranges."""
    (cnt_b, tim_b), (cnt_a, tim_a) = before, after
    med_b, rng_b = _step_noise(tim_b, sb)
    med_a, rng_a = _step_noise(tim_a, sa)
    counts_moved = _median([float(cnt_b.get(s, 0)) for s in sb]) != _median([float(cnt_a.get(s, 0)) for s in sa])
    return counts_moved or not within_noise(med_a - med_b, (rng_b + rng_a) / 2)


def _kernel_rule(per_step: bool, unknown: bool) -> str:
    """The note that says which rule kernels_changed applied, and, without per-step noise, why not."""
    if per_step:
        return ("beyond noise: the kernel's per-step count changed, or its median-step time moved by more than "
                "(its per-step range before + after) / 2")
    why = f"noise unknown (fewer than {NOISE_MIN_STEPS} steps on a side)" if unknown else "no per-step noise estimate"
    return (f"{why}: a kernel changed when its count changed, or its time by more than "
            f"{KERNEL_CHANGE_PCT:g}% and {KERNEL_CHANGE_FLOOR_US:g} µs (all steps)")


def step_figures(att: Attribution) -> list[tuple[int, Figures]]:
    """Attention figures per ProfilerStep (ranks of a run summed per step number); a step without
    attention counts as 0. Empty when some block lies outside every step: per-step figures would
    then silently drop it."""
    steps = _steps(att)
    if not steps or any(b.step is None for b in att.blocks):
        return []
    with_roles = all(b.matmul_roles is not None for b in att.blocks)

    def zero() -> Figures:
        return Figures(total_us=0.0, categories=zero_categories(), matmul_roles=zero_roles() if with_roles else None)

    per = {s: zero() for s in steps}
    for b in att.blocks:
        assert b.step is not None  # checked above
        _add_block(per.setdefault(b.step, zero()), b)
    return sorted(per.items())


def _add_block(f: Figures, b: BlockResult) -> None:
    """Add one block's time, span, idle, categories and (where both have them) matmul roles to a step's figures."""
    f.total_us += b.total_us
    f.span_us += b.span_us
    f.idle_us += b.idle_us
    for c in CATEGORIES:
        f.categories[c] += b.categories[c]
    if f.matmul_roles is not None and b.matmul_roles is not None:
        for r, us in b.matmul_roles.items():
            f.matmul_roles[r] += us


def _step_totals(per_step: list[tuple[int, Figures]]) -> list[tuple[float, int]]:
    """(attention total, step) pairs, the key by which the median step is chosen."""
    return [(f.total_us, s) for s, f in per_step]


def median_step(per_step: list[tuple[int, Figures]]) -> Figures:
    """The step with the median attention total, categories included (mean of the middle two when even)."""
    by = dict(per_step)
    mid = [by[s] for s in middle(_step_totals(per_step))]
    cats = {c: sum(f.categories[c] for f in mid) / len(mid) for c in CATEGORIES}
    return Figures(total_us=sum(f.total_us for f in mid) / len(mid), categories=cats, matmul_roles=_mean_roles(mid),
                   span_us=sum(f.span_us for f in mid) / len(mid), idle_us=sum(f.idle_us for f in mid) / len(mid))


def _mean_roles(mid: list[Figures]) -> dict[str, float] | None:
    """The mean matmul roles of the median step(s); None when one of them has no roles."""
    if not all(f.matmul_roles is not None for f in mid):
        return None
    return {r: sum((f.matmul_roles or {})[r] for f in mid) / len(mid) for r in MATMUL_ROLES}


def _basis(before: Attribution, after: Attribution, per_b: list[tuple[int, Figures]],
           per_a: list[tuple[int, Figures]]) -> tuple[Basis, str, str]:
    """Which figures the headline compares, why, and (when there is no noise estimate) why not."""
    why_not = [why for why in (_no_noise("before", before), _no_noise("after", after)) if why]
    if per_b and per_a and max(len(per_b), len(per_a)) >= 2:
        note = (f"per-step median: the median step by attention time (before {len(per_b)} steps, after "
                f"{len(per_a)}); an even count averages the middle two")
        return Basis.MEDIAN_STEP, note, "no noise estimate possible: " + "; ".join(why_not) if why_not else ""
    note = "whole-trace totals" + (" (one step each)" if len(per_b) == len(per_a) == 1 else "")
    return Basis.TOTAL, note, "no noise estimate possible: " + "; ".join(why_not)


def _no_noise(side: str, att: Attribution) -> str | None:
    """Why one side gives no per-step noise estimate (no steps, blocks outside them, one step), or None."""
    n_steps = len(_steps(att))
    outside = sum(1 for b in att.blocks if b.step is None)
    if n_steps == 0:
        return f"{side} has no ProfilerStep"
    if outside:
        return f"{outside} block{'s' if outside != 1 else ''} of {side} lie outside any ProfilerStep"
    if n_steps == 1:
        return f"{side} has one step"
    return None


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return (s[(n - 1) // 2] + s[n // 2]) / 2


def _spread(per: list[tuple[int, Figures]]) -> Spread:
    totals = [f.total_us for _, f in per]
    return Spread(steps=[s for s, _ in per], totals_us=totals, min_us=min(totals), median_us=_median(totals),
                  max_us=max(totals))


def _noise(per_b: list[tuple[int, Figures]], per_a: list[tuple[int, Figures]], fig_b: Figures,
           fig_a: Figures) -> Noise:
    """The spreads, and the verdicts by the noise rule: None (unknown) with fewer than NOISE_MIN_STEPS steps a side."""
    known = min(len(per_b), len(per_a)) >= NOISE_MIN_STEPS
    sb, sa = _spread(per_b), _spread(per_a)
    combined = (sb.range_us + sa.range_us) / 2
    cats = {}
    for c in CATEGORIES:
        vb = [f.categories[c] for _, f in per_b]
        va = [f.categories[c] for _, f in per_a]
        spread_c = (max(vb) - min(vb) + max(va) - min(va)) / 2
        delta_c = fig_a.categories[c] - fig_b.categories[c]
        cats[c] = CategoryNoise(before_min_us=min(vb), before_max_us=max(vb), after_min_us=min(va),
                                after_max_us=max(va), within_noise=within_noise(delta_c, spread_c) if known else None)
    delta = fig_a.total_us - fig_b.total_us
    return Noise(before=sb, after=sa, combined_spread_us=combined,
                 within_noise=within_noise(delta, combined) if known else None, categories=cats)


# ---------------------------------------------------------------------------------------------
# Block pairing


def _block_keys(att: Attribution) -> list[tuple]:
    """(trace position, step position, phase) per block, so runs with different step numbers pair.

    In a result read by run (``analyze(..., by="run")``) each block's source is its run's name, not a trace's:
    there the run's position among the runs stands for the trace's, and the steps of its traces for its steps,
    so two sweeps pair run by run rather than every run's step N with every other's."""
    trace_ix: dict[str, int | tuple[str, int]] = {}
    step_ix: dict[str, dict[int, int]] = {}
    for n, t in enumerate(att.traces):
        trace_ix.setdefault(t.source, n)
        step_ix.setdefault(t.source, {s: k for k, s in enumerate(t.steps)})
    for n, run in enumerate(att.runs):
        if run.name not in trace_ix:  # (a run that is one file keeps that file's name and its trace's steps)
            trace_ix[run.name] = ("run", n)
            nums = sorted({s for t in run.attribution.traces for s in t.steps})
            step_ix[run.name] = {s: k for k, s in enumerate(nums)}
    out = []
    for b in att.blocks:
        steps = step_ix.get(b.source, {})
        out.append((trace_ix.get(b.source, -1), None if b.step is None else steps.get(b.step, ("#", b.step)), b.phase))
    return out


def _ranked(base: list[tuple], labels: list[str | None]) -> dict[tuple, int]:
    """key -> block index, where key = base + label + rank of that (base, label) in block order.
    A None label leaves the block out."""
    seen: dict[tuple, int] = defaultdict(int)
    out = {}
    for i, (k, lab) in enumerate(zip(base, labels)):
        if lab is None:
            continue
        g = (*k, lab)
        out[(*g, seen[g])] = i
        seen[g] += 1
    return out


def pair_blocks(before: Attribution, after: Attribution
                ) -> tuple[list[BlockPair], list[BlockResult], list[BlockResult]]:
    """Pair by (trace, step, phase, kind, rank); then unpaired fused-kernel blocks by rank alone."""
    bb, ab = before.blocks, after.blocks
    kb, ka = _block_keys(before), _block_keys(after)
    rb = _ranked(kb, [b.kind for b in bb])
    ra = _ranked(ka, [b.kind for b in ab])
    pairs = _matched(rb, ra, PairedBy.KIND)
    fb = _ranked(kb, _fused_left(bb, {i for i, _, _ in pairs}))
    fa = _ranked(ka, _fused_left(ab, {j for _, j, _ in pairs}))
    pairs += _matched(fb, fa, PairedBy.FUSED_KERNEL)
    pairs.sort()
    return ([BlockPair(before=bb[i], after=ab[j], paired_by=how) for i, j, how in pairs],
            _left(bb, {i for i, _, _ in pairs}), _left(ab, {j for _, j, _ in pairs}))


def _matched(rb: dict[tuple, int], ra: dict[tuple, int], how: PairedBy) -> list[tuple[int, int, PairedBy]]:
    """(before index, after index, how) for every key both sides hold."""
    return [(i, ra[k], how) for k, i in rb.items() if k in ra]


def _fused_left(blocks: list[BlockResult], used: set[int]) -> list[str | None]:
    """The second pass's kinds: fused-kernel blocks the first pass left unpaired, None for every other block."""
    return [b.found_by if b.found_by == FoundBy.FUSED_KERNEL and i not in used else None for i, b in enumerate(blocks)]


def _left(blocks: list[BlockResult], used: set[int]) -> list[BlockResult]:
    """The blocks of one side that no pair took, in their order."""
    return [b for i, b in enumerate(blocks) if i not in used]


# ---------------------------------------------------------------------------------------------
# Kernels, memory, headers


def _unit(att: Attribution) -> str:
    return {TimeBase.DEVICE: "kernel", TimeBase.HOST: "op"}.get(att.time_base, "mixed")


def _kernel_table(att: Attribution) -> list[KernelTotal]:
    rows = [KernelTotal(name=n, category=Category(c), count=k, total_us=us) for (n, c), (k, us) in att.kernels.items()]
    rows.sort(key=lambda r: (-r.total_us, r.name, r.category))
    return rows


def _alloc(before: Attribution, after: Attribution) -> AllocDelta | None:
    """Only when both sides carry memory events: one side's silence is not zero bytes."""
    xb = [b.alloc_bytes for b in before.blocks if b.alloc_bytes is not None]
    xa = [b.alloc_bytes for b in after.blocks if b.alloc_bytes is not None]
    if not xb or not xa:
        return None
    return AllocDelta(before_bytes=sum(xb), after_bytes=sum(xa), before_blocks=len(xb), after_blocks=len(xa),
                      before_peak_bytes=peak_of(before.blocks), after_peak_bytes=peak_of(after.blocks))


def compare_headers(before: Attribution, after: Attribution) -> list[str]:
    """Warnings when the two traces differ in device, time base or attention problem size."""
    out = []
    gb, ga = _gpus(before), _gpus(after)
    if gb != ga:
        out.append(f"devices differ: before {gb or 'no GPU listed'}, after {ga or 'no GPU listed'}"
                   f" (the change includes the hardware)")
    if before.time_base != after.time_base:
        out.append(f"time bases differ: before {TIME_BASE_LABELS[before.time_base]}, after "
                   f"{TIME_BASE_LABELS[after.time_base]} (the figures measure different things)")
    size = _size_warning(_distinct_shapes(before), _distinct_shapes(after))
    return out + [size] if size else out


def _gpus(att: Attribution) -> str:
    """The side's distinct GPUs over all its traces, sorted and joined ('' when none is listed)."""
    return ", ".join(sorted({g for t in att.traces for g in t.gpus}))


def _size_warning(shb: list[Shape], sha: list[Shape]) -> str | None:
    """Attention sizes compared where both sides give them (so eager and SDPA runs of one model agree), else
    the recorded shapes themselves; None when they agree."""
    zb, za = attention_sizes(shb), attention_sizes(sha)
    if zb and za:
        if zb == za:
            return None
        return (f"attention sizes differ (batch·heads, query length, key length): before {_sizes(zb)}, "
                f"after {_sizes(za)}")
    if shb != sha:
        return f"attention op input shapes differ: before {_shapes(shb)}; after {_shapes(sha)}"
    return None


def _sizes(z: set[tuple[int, int, int]]) -> str:
    return ", ".join(f"({bh}, {q}, {k})" for bh, q, k in sorted(z))


def _distinct_shapes(att: Attribution) -> list[Shape]:
    """Every trace's recorded shapes once, ordered by display form (the order the warning lists them in)."""
    return sorted({shape_text(s): s for t in att.traces for s in t.shapes}.values(), key=shape_text)


def _shapes(s: list[Shape]) -> str:
    if not s:
        return "none recorded"
    return shape_text(s[0]) + (f" (+{len(s) - 1} more)" if len(s) > 1 else "")


def attention_sizes(shapes: list[Shape]) -> set[tuple[int, int, int]]:
    """(batch·heads, query length, key length) from recorded input dims, so an eager run (softmax
    over [B, H, N, N]) and an SDPA run (q, k of [B, H, N, d]) of the same model compare equal.
    ``bmm`` shapes are ambiguous (QKᵀ or PV) and are not used."""
    out = set()
    for name, dims in shapes:
        if not isinstance(dims, list) or not dims or not all(isinstance(d, list) for d in dims):
            continue
        size = _attention_size(name, dims[0], dims[1] if len(dims) > 1 else [])
        if size is not None:
            out.add(size)
    return out


def _attention_size(name: str, q: list[int], key: list[int]) -> tuple[int, int, int] | None:
    """One op's (batch·heads, query length, key length) from its first two inputs' dims, each op by its layout."""
    if name == "aten::scaled_dot_product_attention" and len(q) >= 3 and len(key) >= 3:
        return (math.prod(q[:-2]), q[-2], key[-2])
    if name in ("aten::_flash_attention_forward", "aten::_efficient_attention_forward") \
            and len(q) == 4 and len(key) == 4:
        return (q[0] * q[2], q[1], key[1])  # [B, N, H, d]
    if name in CALLED_SOFTMAX_OPS and len(q) >= 3:
        return (math.prod(q[:-2]), q[-2], q[-1])
    return None


def _bound(fig: Figures, att: Attribution) -> Figures:
    """Set ``launch_bound`` on a per-step figure: only sides with device blocks can be launch-bound."""
    if att.totals.launch_bound is not None:
        fig.launch_bound = is_launch_bound(fig.idle_us, fig.span_us)
    return fig
