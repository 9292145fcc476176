"""Compare two attributions: where attention time went between a *before* and an *after* trace.

Pure functions over :class:`~tracekit.result.Attribution`; nothing here prints or formats.
The rules (docs/attribution.md, "Diff"):

- **Headline basis.** With per-step figures on both sides (every block inside a ``ProfilerStep``)
  and at least two steps on one side, the headline is the *median step*: the step whose attention
  total is the median (the mean of the two middle steps when the count is even). Its own category
  split is used, so category deltas still add up to the total delta exactly (independent
  per-category medians would not). Otherwise the headline is the whole-trace total.
- **Noise.** Needs at least two steps on *both* sides. Each side's spread is the min–max range of its
  per-step totals; the change is *within noise* when ``|Δ| <= (range_before + range_after) / 2``,
  the gap at which the two ranges would just touch if each median sat mid-range.
- **Pairing.** Blocks pair by (trace, step position, phase, kind, rank of that kind in the step);
  then ``fused-kernel`` blocks still unpaired pair by (trace, step position, phase, rank among
  those), since their names are the kernels that changed. Steps pair by position, not number.
  Unpaired blocks are listed, never dropped.
- **Kernels.** Every device event owned by a block (host ops on CPU-only traces) per side; a kernel
  whose name never occurs on the other side is "only before" (gone) or "only after" (new). Times
  are summed durations, like ``top_kernels``. Kernels on both sides whose count or time changed beyond
  noise are ``kernels_changed`` (rule in :func:`kernels_changed`).
- **Ranks.** Two folders of ranks (both with a per-rank view, tracekit.ranks) pair rank N with rank N;
  a rank on one side only is listed as such. Nothing else depends on this pairing.
- **Wall clock.** Each side's headline figures carry its blocks' span and idle on the same basis. When
  either side is launch-bound (idle > half the span) the headline claims no speedup from busy time
  (``no_claim``) and the CI gate compares span.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import types
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .attribute import analyze
from .classify import Classifier
from .errors import IncomparableError
from .inputs import Inputs, discover
from .result import DIFF_SCHEMA_VERSION as DIFF_SCHEMA_VERSION  # re-exported: the diff JSON's version
from .result import CATEGORIES, Attribution, BlockResult, InvariantError, RankRow, close, zero_categories
from .roles import zero_roles
from .vocab import MATMUL_ROLES, TIME_BASE_LABELS, Basis, Category, FoundBy, TimeBase

_EPS_US = 0.002  # 1 ns rounding on each side of a sum, as in result.py

BASIS_MEDIAN, BASIS_TOTAL = Basis.MEDIAN_STEP, Basis.TOTAL

# Conclusions a diff states in words, in every format (DiffResult.conclusions).
EAGER_TO_FUSED_ALLOC = "eager → fused, the B·H·N² score matrices are no longer allocated"


@dataclass(slots=True, kw_only=True)
class Figures:
    """One side's attention time on the headline basis; ``categories`` sum to ``total_us``."""

    total_us: float
    categories: dict[str, float]
    # ``matmul`` by role on the same basis (docs/attribution.md, "Matmul roles"); None if a block lacks roles.
    matmul_roles: dict[str, float] | None = None
    span_us: float = 0.0  # the blocks' spans (host and device work), on the same basis
    idle_us: float = 0.0  # the blocks' device idle time
    launch_bound: bool | None = None  # idle > half the span; None when the side has no device blocks


@dataclass(slots=True, kw_only=True)
class CategoryDelta:
    before_us: float
    after_us: float
    delta_us: float
    ratio: float | None  # after / before; None when before is 0
    share_of_delta: float | None  # delta / total delta; None when the total did not change


@dataclass(slots=True, kw_only=True)
class BlockPair:
    """One block on each side that compute the same attention call."""

    before: BlockResult
    after: BlockResult
    paired_by: str  # "kind", or "fused-kernel" for the fallback rule (PAIRED_BY)

    @property
    def delta_us(self) -> float:
        return self.after.total_us - self.before.total_us


@dataclass(slots=True, kw_only=True)
class KernelTotal:
    """All calls of one kernel (host op on CPU traces) inside a side's blocks."""

    name: str  # compact kernel name, as in top_kernels; the op name on CPU-only traces
    category: Category
    count: int
    total_us: float  # summed durations (device) or self time (host)


@dataclass(slots=True, kw_only=True)
class KernelChange:
    """A kernel (host op on CPU traces) on both sides whose count or time changed beyond noise, all steps."""

    name: str
    category: Category  # of its costliest row after (a kernel can be filed under two launchers' categories)
    before: KernelTotal
    after: KernelTotal

    @property
    def delta_us(self) -> float:
        return self.after.total_us - self.before.total_us


@dataclass(slots=True, kw_only=True)
class Spread:
    """Per-step attention totals of one side, with their range."""

    steps: list[int]
    totals_us: list[float]  # in step order
    min_us: float
    median_us: float
    max_us: float

    @property
    def range_us(self) -> float:
        return self.max_us - self.min_us


@dataclass(slots=True, kw_only=True)
class CategoryNoise:
    before_min_us: float
    before_max_us: float
    after_min_us: float
    after_max_us: float
    within_noise: bool


@dataclass(slots=True, kw_only=True)
class Noise:
    before: Spread
    after: Spread
    combined_spread_us: float  # (range before + range after) / 2
    within_noise: bool
    categories: dict[str, CategoryNoise]


@dataclass(slots=True, kw_only=True)
class AllocDelta:
    """Bytes allocated inside blocks (``profile_memory`` traces), over all blocks of each side."""

    before_bytes: int
    after_bytes: int
    before_blocks: int  # blocks that carry memory data
    after_blocks: int

    @property
    def delta_bytes(self) -> int:
        return self.after_bytes - self.before_bytes


@dataclass(slots=True, kw_only=True)
class RankPair:
    """Rank N before and rank N after (one side None when that rank is only on the other)."""

    rank: int
    before: RankRow | None
    after: RankRow | None

    @property
    def delta_us(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return self.after.total_us - self.before.total_us


@dataclass(slots=True, kw_only=True)
class DiffResult:
    """Everything a diff report shows; renderers take this and nothing else."""

    before: Attribution
    after: Attribution
    basis: Basis
    basis_note: str
    before_figures: Figures  # headline, on ``basis``
    after_figures: Figures
    categories: dict[str, CategoryDelta]
    pairs: list[BlockPair]
    unmatched_before: list[BlockResult]
    unmatched_after: list[BlockResult]
    kernel_unit: str  # "kernel" (device traces), "op" (CPU-only), or "mixed"
    kernels_before: list[KernelTotal]  # the full table, by time
    kernels_after: list[KernelTotal]
    only_before: list[KernelTotal]
    only_after: list[KernelTotal]
    steps_before: list[tuple[int, Figures]]  # per-step figures ([] when the basis is the total)
    steps_after: list[tuple[int, Figures]]
    noise: Noise | None
    noise_note: str
    alloc: AllocDelta | None
    conclusions: list[str] = field(default_factory=list)  # findings in words, e.g. EAGER_TO_FUSED_ALLOC
    warnings: list[str] = field(default_factory=list)
    labels: tuple[str, str] = ("", "")  # how to name the two sides (paths as given, shortened)
    # Kernels on both sides whose count or time changed beyond noise (rule in kernels_changed_note), by |Δ|.
    kernels_changed: list[KernelChange] = field(default_factory=list)
    kernels_changed_note: str = ""
    # Why the headline claims no speedup from busy time ("" when it may): launch-bound sides, or no block paired.
    no_claim: str = ""
    # Ranks paired by number when both sides are folders of ranks; [] otherwise.
    ranks: list[RankPair] = field(default_factory=list)

    def to_dataframe(self, by: str = "category") -> Any:
        """A pandas DataFrame (``pip install 'tracekit[notebook]'``): one row per ``by`` = "category" (with the
        total), "pair" (paired blocks), "kind" (pairs grouped by kind) or "kernel" (both sides); times in µs."""
        from .notebook import diff_frame

        return diff_frame(self, by)

    def __repr__(self) -> str:
        """One line (the headline), not the nested dataclasses' tens of thousands of characters."""
        from .notebook import diff_repr

        return diff_repr(self)

    def _repr_html_(self) -> str:
        from .notebook import diff_html

        return diff_html(self)

    @property
    def launch_bound(self) -> bool:
        """Either side's device idles more than half its blocks' span: busy time is not what the user waits for."""
        return bool(self.before_figures.launch_bound or self.after_figures.launch_bound)

    @property
    def span_ratio(self) -> float | None:
        """after / before span, like the category ratios; None when before has no span."""
        b = self.before_figures.span_us
        return self.after_figures.span_us / b if b > 0 else None

    @property
    def delta_us(self) -> float:
        return self.after_figures.total_us - self.before_figures.total_us

    @property
    def delta_pct(self) -> float | None:
        b = self.before_figures.total_us
        return 100.0 * self.delta_us / b if b > 0 else None

    @property
    def speedup(self) -> float | None:
        """before / after: above 1 is faster. None when after has no attention time."""
        a = self.after_figures.total_us
        return self.before_figures.total_us / a if a > 0 else None

    @property
    def damaged(self) -> bool:
        return self.before.damaged or self.after.damaged

    def check(self) -> "DiffResult":
        """Raise InvariantError unless every figure adds up and every block is accounted for."""
        self.before.check()
        self.after.check()
        nc = len(CATEGORIES)
        scale = max(self.before_figures.total_us, self.after_figures.total_us)  # of the terms behind every delta
        for side, fig in (("before", self.before_figures), ("after", self.after_figures)):
            _expect(set(fig.categories) == set(CATEGORIES), f"{side}: category keys {sorted(fig.categories)}")
            _expect(close(sum(fig.categories.values()), fig.total_us, nc),
                    f"{side}: headline categories do not sum to its total")
            if fig.matmul_roles is not None:
                m = fig.categories[Category.MATMUL]
                _expect(list(fig.matmul_roles) == list(MATMUL_ROLES), f"{side}: matmul role keys")
                _expect(close(sum(fig.matmul_roles.values()), m, len(MATMUL_ROLES), m),
                        f"{side}: headline matmul roles do not sum to its matmul")
        _expect(list(self.categories) == list(CATEGORIES), "category deltas out of order or missing")
        for c, d in self.categories.items():
            _expect(d.before_us == self.before_figures.categories[c] and d.after_us == self.after_figures.categories[c],
                    f"{c}: delta row is not the headline figures")
            _expect(close(d.after_us - d.before_us, d.delta_us, 1, scale), f"{c}: delta != after - before")
        _expect(close(sum(d.delta_us for d in self.categories.values()), self.delta_us, nc, scale),
                "total delta != sum of category deltas")
        if _shares_defined(self.delta_us, scale):
            _expect(abs(sum(d.share_of_delta or 0 for d in self.categories.values()) - 1) < 1e-6,
                    "category shares of the delta do not sum to 1")
        for side, att, mine, unmatched, steps in (
                ("before", self.before, [p.before for p in self.pairs], self.unmatched_before, self.steps_before),
                ("after", self.after, [p.after for p in self.pairs], self.unmatched_after, self.steps_after)):
            seen = [id(b) for b in mine + unmatched]
            _expect(len(seen) == len(set(seen)), f"{side}: a block is paired or listed twice")
            _expect(set(seen) == {id(b) for b in att.blocks}, f"{side}: paired + unmatched blocks != all blocks")
            n = max(1, len(att.blocks))
            _expect(close(sum(b.total_us for b in mine + unmatched), att.totals.total_us, n),
                    f"{side}: paired + unmatched time != total attention time")
            if self.basis == Basis.TOTAL:
                _expect(self._figures(side) == _totals_figures(att), f"{side}: total basis but headline != attribution totals")
            else:
                _expect(close(sum(f.total_us for _, f in steps), att.totals.total_us, n),
                        f"{side}: per-step totals do not sum to the trace total")
                lo = min(f.total_us for _, f in steps)
                hi = max(f.total_us for _, f in steps)
                med = self._figures(side).total_us
                _expect((lo <= med or close(lo, med)) and (med <= hi or close(med, hi)), f"{side}: median outside its range")
            ks = self.kernels_before if side == "before" else self.kernels_after
            if att.time_base == TimeBase.DEVICE:
                _expect(sum(k.count for k in ks) == sum(b.kernels for b in att.blocks),
                        f"{side}: kernel table count != device events owned by blocks")
        for p in self.pairs:
            _expect(p.before.phase == p.after.phase, f"pair {p.before.name}/{p.after.name}: phases differ")
            ok = p.before.kind == p.after.kind if p.paired_by == "kind" else \
                p.before.found_by == p.after.found_by == FoundBy.FUSED_KERNEL
            _expect(ok, f"pair {p.before.name}/{p.after.name}: does not follow the {p.paired_by} rule")
        for side, fig, att, steps in (("before", self.before_figures, self.before, self.steps_before),
                                      ("after", self.after_figures, self.after, self.steps_after)):
            _expect(close(fig.total_us + fig.idle_us, fig.span_us, 2 * max(1, len(att.blocks)), fig.span_us)
                    or fig.launch_bound is None, f"{side}: headline busy + idle != span")
            if fig.launch_bound is not None:
                _expect(fig.launch_bound == (2 * fig.idle_us > fig.span_us) or close(2 * fig.idle_us, fig.span_us, 4),
                        f"{side}: launch_bound does not follow idle / span")
            if self.basis == Basis.MEDIAN_STEP:
                _expect(close(sum(f.span_us for _, f in steps), att.totals.span_us, max(1, len(att.blocks)),
                              att.totals.span_us), f"{side}: per-step spans do not sum to the trace's span")
        if self.launch_bound:
            _expect(bool(self.no_claim), "a launch-bound diff must say why it claims no busy-time speedup")
        for k in self.kernels_changed:
            _expect(k.before.name == k.after.name == k.name, f"changed kernel {k.name}: rows of other kernels")
            _expect(k.before.count != k.after.count or k.before.total_us != k.after.total_us,
                    f"changed kernel {k.name}: nothing changed")
        after_names = {k.name for k in self.kernels_after}
        before_names = {k.name for k in self.kernels_before}
        _expect(all(k.name not in after_names for k in self.only_before), "an 'only before' kernel exists after")
        _expect(all(k.name not in before_names for k in self.only_after), "an 'only after' kernel exists before")
        if self.ranks:
            _expect(self.before.ranks is not None and self.after.ranks is not None, "rank pairs without rank views")
            for side, att in (("before", self.before), ("after", self.after)):
                ids = [id(getattr(rp, side)) for rp in self.ranks if getattr(rp, side) is not None]
                _expect(sorted(ids) == sorted(id(r) for r in att.ranks.rows) if att.ranks else False,
                        f"{side}: a rank is paired twice or missing")
            _expect(all(p.before is None or p.before.rank == p.rank for p in self.ranks)
                    and all(p.after is None or p.after.rank == p.rank for p in self.ranks), "a pair of different ranks")
        return self

    def _figures(self, side: str) -> Figures:
        return self.before_figures if side == "before" else self.after_figures


def _expect(ok: bool, msg: str) -> None:
    if not ok:
        raise InvariantError(msg)


def _shares_defined(delta_us: float, scale: float) -> bool:
    """Shares of the delta mean something only when the delta is more than rounding."""
    return not close(delta_us, 0.0, len(CATEGORIES), scale)


def _totals_figures(att: Attribution) -> Figures:
    t = att.totals
    roles = t.matmul_roles
    return Figures(total_us=t.total_us, categories=dict(t.categories), span_us=t.span_us, idle_us=t.idle_us,
                   launch_bound=t.launch_bound, matmul_roles=None if roles is None else dict(roles))


def _bound(fig: Figures, att: Attribution) -> Figures:
    """Set ``launch_bound`` on a per-step figure: only sides with device blocks can be launch-bound."""
    if att.totals.launch_bound is not None:
        fig.launch_bound = 2 * fig.idle_us > fig.span_us
    return fig


# ---------------------------------------------------------------------------------------------
# Entry points


def diff_paths(before: str | os.PathLike | Inputs, after: str | os.PathLike | Inputs, scope: str | None = None,
               classifier: Classifier | None = None, jobs: int = 1,
               progress: Callable[[str, int, int], None] | None = None, dask: str | None = None) -> DiffResult:
    """Load and attribute both sides (files or run folders), then diff them.

    Each side goes through :mod:`tracekit.inputs` like ``analyze``: folder warnings, ``jobs``
    processes and ``progress`` apply to both.
    """
    # Discover both sides first: fail on a missing *after* before spending time on a big *before*.
    found_b = before if isinstance(before, Inputs) else discover(before)
    found_a = after if isinstance(after, Inputs) else discover(after)
    clf = classifier or Classifier()
    result = diff_attributions(analyze(found_b, scope=scope, classifier=clf, jobs=jobs, progress=progress, dask=dask),
                               analyze(found_a, scope=scope, classifier=clf, jobs=jobs, progress=progress, dask=dask))
    result.labels = side_labels(found_b.path, found_a.path)
    return result


def side_labels(before: str | os.PathLike, after: str | os.PathLike) -> tuple[str, str]:
    """The shortest path tails that tell the two sides apart (``x/rank_0.json.gz`` vs ``y/rank_0.json.gz``)."""
    pb, pa = Path(before).parts, Path(after).parts
    for n in range(1, max(len(pb), len(pa)) + 1):
        lb, la = "/".join(pb[-n:]), "/".join(pa[-n:])
        if lb != la:
            return lb, la
    return str(before), str(after)


def diff_attributions(before: Attribution, after: Attribution) -> DiffResult:
    """The diff of two attributions (kernel tables from each side's full ``Attribution.kernels``)."""
    warnings = compare_headers(before, after)
    kb, ka = _kernel_table(before), _kernel_table(after)
    per_b, per_a = step_figures(before), step_figures(after)
    basis, basis_note, noise_note = _basis(before, after, per_b, per_a)
    if basis == Basis.MEDIAN_STEP:
        fig_b, fig_a = _bound(median_step(per_b), before), _bound(median_step(per_a), after)
    else:
        fig_b, fig_a = _totals_figures(before), _totals_figures(after)
        nb, na = len(_steps(before)), len(_steps(after))
        if nb != na:
            warnings.append(f"before has {_n_steps(nb)} and after {_n_steps(na)}: whole-trace totals may cover "
                            f"different amounts of work")
    noise = None
    if basis == Basis.MEDIAN_STEP and len(per_b) >= 2 and len(per_a) >= 2:
        noise = _noise(per_b, per_a, fig_b, fig_a)
        noise_note = (f"per-step spread: before {len(per_b)} steps, after {len(per_a)} steps; "
                      f"within noise when |Δ| <= (range before + range after) / 2")
    total_delta = fig_a.total_us - fig_b.total_us
    shares = _shares_defined(total_delta, max(fig_a.total_us, fig_b.total_us))
    cats = {}
    for c in CATEGORIES:
        b, a = fig_b.categories[c], fig_a.categories[c]
        d = a - b
        share = None
        if shares:
            share = d / total_delta if d != 0 else 0.0  # never -0.0
        cats[c] = CategoryDelta(before_us=b, after_us=a, delta_us=d, ratio=a / b if b > 0 else None,
                                share_of_delta=share)
    pairs, ub, ua = pair_blocks(before, after)
    no_claim = _launch_note(fig_b, fig_a)
    fb, fa = sorted({b.found_by for b in before.blocks}), sorted({b.found_by for b in after.blocks})
    if fb and fa and fb != fa:
        warnings.append(f"the sides found blocks differently: before by {', '.join(fb)}, after by {', '.join(fa)} "
                        f"(e.g. a trace with module stacks against one without); blocks pair only within one mode")
        if not pairs:
            no_claim = "; ".join(x for x in (no_claim, (
                f"no block pairs: before found blocks by {', '.join(fb)}, after by {', '.join(fa)}, so the "
                f"totals may cover different code; profile both the same way")) if x)
    if not before.blocks and not after.blocks:
        warnings.append("no attention blocks on either side (try --scope REGEX to name your attention modules)")
    elif not before.blocks or not after.blocks:
        warnings.append(f"no attention blocks in {'before' if not before.blocks else 'after'}"
                        f" ({(before if not before.blocks else after).source})")
    names_b = {k.name for k in kb}
    names_a = {k.name for k in ka}
    changed, changed_note = kernels_changed(before, after, kb, ka, noise is not None)
    unit_b, unit_a = _unit(before), _unit(after)
    alloc = _alloc(before, after)
    per_step = basis == Basis.MEDIAN_STEP
    return DiffResult(
        before=before, after=after, basis=basis, basis_note=basis_note, before_figures=fig_b, after_figures=fig_a,
        categories=cats, pairs=pairs, unmatched_before=ub, unmatched_after=ua,
        kernel_unit=unit_b if unit_b == unit_a else "mixed", kernels_before=kb, kernels_after=ka,
        only_before=[k for k in kb if k.name not in names_a], only_after=[k for k in ka if k.name not in names_b],
        steps_before=per_b if per_step else [], steps_after=per_a if per_step else [],
        noise=noise, noise_note=noise_note, alloc=alloc, conclusions=_conclusions(cats, alloc),
        warnings=warnings, labels=(before.source, after.source),
        kernels_changed=changed, kernels_changed_note=changed_note, no_claim=no_claim,
        ranks=pair_ranks(before, after))


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


def _launch_note(fig_b: Figures, fig_a: Figures) -> str:
    """The headline's words when either side is launch-bound (docs/attribution.md, Diff): busy time then
    measures the kernels, not what the user waits for, so no speedup is claimed from it."""
    if not (fig_b.launch_bound or fig_a.launch_bound):
        return ""
    idle = " / ".join(f"{100 * f.idle_us / f.span_us:.0f}%" if f.span_us > 0 else "n/a" for f in (fig_b, fig_a))
    return (f"launch-bound: the GPU is idle {idle} of the attention blocks; busy time "
            f"{_moves(fig_b.total_us, fig_a.total_us)}, profiled span {_moves(fig_b.span_us, fig_a.span_us)}; "
            f"measure latency outside the profiler or capture CUDA graphs")


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
                    per_step: bool) -> tuple[list[KernelChange], str]:
    """Kernels on both sides whose count or time changed beyond noise, by |Δ| (all steps), and the rule used.

    With per-step noise (``per_step``: at least two steps on both sides) the rule is the headline's, per
    kernel: its per-step count changed, or its median-step time moved by more than the mean of the two
    sides' per-step ranges. Without it: the count changed, or the time by more than KERNEL_CHANGE_PCT % of
    before and KERNEL_CHANGE_FLOOR_US.
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
        note = ("beyond noise: the kernel's per-step count changed, or its median-step time moved by more than "
                "(its per-step range before + after) / 2")
    else:
        note = (f"no per-step noise estimate: a kernel changed when its count changed, or its time by more than "
                f"{KERNEL_CHANGE_PCT:g}% and {KERNEL_CHANGE_FLOOR_US:g} µs (all steps)")
    out = []
    for name, (cb, ub, _) in nb.items():
        if name not in na:
            continue
        ca, ua, cat = na[name]
        if per_step:
            cnt_b, tim_b = pb.get(name, ({}, {}))
            cnt_a, tim_a = pa.get(name, ({}, {}))
            med_b, rng_b = _step_noise(tim_b, sb)
            med_a, rng_a = _step_noise(tim_a, sa)
            counts_moved = _median([float(cnt_b.get(s, 0)) for s in sb]) != _median([float(cnt_a.get(s, 0)) for s in sa])
            beyond = counts_moved or abs(med_a - med_b) > (rng_b + rng_a) / 2 + _EPS_US
        else:
            beyond = cb != ca or abs(ua - ub) > max(KERNEL_CHANGE_PCT / 100 * ub, KERNEL_CHANGE_FLOOR_US)
        if beyond and (cb != ca or ub != ua):
            out.append(KernelChange(name=name, category=cat,
                                    before=KernelTotal(name=name, category=nb[name][2], count=cb, total_us=ub),
                                    after=KernelTotal(name=name, category=cat, count=ca, total_us=ua)))
    out.sort(key=lambda k: (-abs(k.delta_us), k.name))
    return out, note


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
        f = per.setdefault(b.step, zero())
        f.total_us += b.total_us
        f.span_us += b.span_us
        f.idle_us += b.idle_us
        for c in CATEGORIES:
            f.categories[c] += b.categories[c]
        if f.matmul_roles is not None and b.matmul_roles is not None:
            for r, us in b.matmul_roles.items():
                f.matmul_roles[r] += us
    return sorted(per.items())


def median_step(per_step: list[tuple[int, Figures]]) -> Figures:
    """The step with the median attention total, categories included (mean of the middle two when even)."""
    order = sorted(per_step, key=lambda sf: (sf[1].total_us, sf[0]))
    n = len(order)
    mid = [f for _, f in order[(n - 1) // 2: n // 2 + 1]]
    cats = {c: sum(f.categories[c] for f in mid) / len(mid) for c in CATEGORIES}
    roles = None
    if all(f.matmul_roles is not None for f in mid):
        roles = {r: sum((f.matmul_roles or {})[r] for f in mid) / len(mid) for r in MATMUL_ROLES}
    return Figures(total_us=sum(f.total_us for f in mid) / len(mid), categories=cats, matmul_roles=roles,
                   span_us=sum(f.span_us for f in mid) / len(mid), idle_us=sum(f.idle_us for f in mid) / len(mid))


def _basis(before: Attribution, after: Attribution, per_b: list[tuple[int, Figures]],
           per_a: list[tuple[int, Figures]]) -> tuple[Basis, str, str]:
    """Which figures the headline compares, why, and (when there is no noise estimate) why not."""
    why_not = []
    for side, att, per in (("before", before, per_b), ("after", after, per_a)):
        n_steps = len(_steps(att))
        outside = sum(1 for b in att.blocks if b.step is None)
        if n_steps == 0:
            why_not.append(f"{side} has no ProfilerStep")
        elif outside:
            why_not.append(f"{outside} block{'s' if outside != 1 else ''} of {side} lie outside any ProfilerStep")
        elif n_steps == 1:
            why_not.append(f"{side} has one step")
    if per_b and per_a and max(len(per_b), len(per_a)) >= 2:
        note = (f"per-step median: the median step by attention time (before {len(per_b)} steps, after "
                f"{len(per_a)}); an even count averages the middle two")
        return Basis.MEDIAN_STEP, note, "no noise estimate possible: " + "; ".join(why_not) if why_not else ""
    note = "whole-trace totals" + (" (one step each)" if len(per_b) == len(per_a) == 1 else "")
    return Basis.TOTAL, note, "no noise estimate possible: " + "; ".join(why_not)


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
    sb, sa = _spread(per_b), _spread(per_a)
    combined = (sb.range_us + sa.range_us) / 2
    cats = {}
    for c in CATEGORIES:
        vb = [f.categories[c] for _, f in per_b]
        va = [f.categories[c] for _, f in per_a]
        spread_c = (max(vb) - min(vb) + max(va) - min(va)) / 2
        delta_c = fig_a.categories[c] - fig_b.categories[c]
        cats[c] = CategoryNoise(before_min_us=min(vb), before_max_us=max(vb), after_min_us=min(va),
                                after_max_us=max(va), within_noise=abs(delta_c) <= spread_c + _EPS_US)
    delta = fig_a.total_us - fig_b.total_us
    return Noise(before=sb, after=sa, combined_spread_us=combined, within_noise=abs(delta) <= combined + _EPS_US,
                 categories=cats)


# ---------------------------------------------------------------------------------------------
# Block pairing


def _block_keys(att: Attribution) -> list[tuple]:
    """(trace position, step position, phase) per block, so runs with different step numbers pair."""
    trace_ix: dict[str, int] = {}
    step_ix: dict[str, dict[int, int]] = {}
    for n, t in enumerate(att.traces):
        trace_ix.setdefault(t.source, n)
        step_ix.setdefault(t.source, {s: k for k, s in enumerate(t.steps)})
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
    pairs: list[tuple[int, int, str]] = [(i, ra[k], "kind") for k, i in rb.items() if k in ra]
    used_b = {i for i, _, _ in pairs}
    used_a = {j for _, j, _ in pairs}
    fb = _ranked(kb, [b.found_by if b.found_by == FoundBy.FUSED_KERNEL and i not in used_b else None
                      for i, b in enumerate(bb)])
    fa = _ranked(ka, [b.found_by if b.found_by == FoundBy.FUSED_KERNEL and j not in used_a else None
                      for j, b in enumerate(ab)])
    pairs += [(i, fa[k], "fused-kernel") for k, i in fb.items() if k in fa]
    pairs.sort()
    used_b = {i for i, _, _ in pairs}
    used_a = {j for _, j, _ in pairs}
    return ([BlockPair(before=bb[i], after=ab[j], paired_by=how) for i, j, how in pairs],
            [b for i, b in enumerate(bb) if i not in used_b], [b for j, b in enumerate(ab) if j not in used_a])


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
    return AllocDelta(before_bytes=sum(xb), after_bytes=sum(xa), before_blocks=len(xb), after_blocks=len(xa))


def compare_headers(before: Attribution, after: Attribution) -> list[str]:
    """Warnings when the two traces differ in device, time base or attention problem size."""
    out = []
    gb = sorted({g for t in before.traces for g in t.gpus})
    ga = sorted({g for t in after.traces for g in t.gpus})
    if gb != ga:
        out.append(f"devices differ: before {', '.join(gb) or 'no GPU listed'}, after {', '.join(ga) or 'no GPU listed'}"
                   f" (the change includes the hardware)")
    if before.time_base != after.time_base:
        out.append(f"time bases differ: before {TIME_BASE_LABELS[before.time_base]}, after "
                   f"{TIME_BASE_LABELS[after.time_base]} (the figures measure different things)")
    shb = sorted({s for t in before.traces for s in t.shapes})
    sha = sorted({s for t in after.traces for s in t.shapes})
    zb, za = attention_sizes(shb), attention_sizes(sha)
    if zb and za:
        if zb != za:
            out.append(f"attention sizes differ (batch·heads, query length, key length): before {_sizes(zb)}, "
                       f"after {_sizes(za)}")
    elif shb != sha:
        out.append(f"attention op input shapes differ: before {_shapes(shb)}; after {_shapes(sha)}")
    return out


def _sizes(z: set[tuple[int, int, int]]) -> str:
    return ", ".join(f"({bh}, {q}, {k})" for bh, q, k in sorted(z))


def _shapes(s: list[str]) -> str:
    if not s:
        return "none recorded"
    return f"{s[0]}" + (f" (+{len(s) - 1} more)" if len(s) > 1 else "")


def attention_sizes(shapes: list[str]) -> set[tuple[int, int, int]]:
    """(batch·heads, query length, key length) from recorded input dims, so an eager run (softmax
    over [B, H, N, N]) and an SDPA run (q, k of [B, H, N, d]) of the same model compare equal.
    ``bmm`` shapes are ambiguous (QKᵀ or PV) and are not used."""
    out = set()
    for s in shapes:
        k = s.find("[")
        if k <= 0:
            continue
        name = s[:k]
        try:
            dims = json.loads(s[k:])
        except ValueError:
            continue
        if not isinstance(dims, list) or not dims or not all(isinstance(d, list) for d in dims):
            continue
        q = dims[0]
        key = dims[1] if len(dims) > 1 else []
        if name == "aten::scaled_dot_product_attention" and len(q) >= 3 and len(key) >= 3:
            out.add((math.prod(q[:-2]), q[-2], key[-2]))
        elif name in ("aten::_flash_attention_forward", "aten::_efficient_attention_forward") \
                and len(q) == 4 and len(key) == 4:
            out.add((q[0] * q[2], q[1], key[1]))  # [B, N, H, d]
        elif name in ("aten::softmax", "aten::_softmax") and len(q) >= 3:
            out.add((math.prod(q[:-2]), q[-2], q[-1]))
    return out




# ---------------------------------------------------------------------------------------------
# The CI gate


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


@dataclass(slots=True, kw_only=True)
class Verdict:
    """The CI gate's decision; tracekit.renderers.verdict_line words it."""

    ok: bool
    threshold_pct: float
    before_us: float
    after_us: float
    change_pct: float | None  # None when before has no attention time
    basis: Basis
    within_noise: bool | None
    compared: str = "busy"  # "span" when either side is launch-bound: the profiled span, not busy time


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
    compared = "span" if result.launch_bound else "busy"
    if compared == "span":  # busy time is not what a launch-bound run waits for: gate on the profiled span
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
    return abs(delta) <= (max(sb) - min(sb) + max(sa) - min(sa)) / 2 + _EPS_US


def diff(before: str | os.PathLike | Inputs | Attribution, after: str | os.PathLike | Inputs | Attribution,
         scope: str | None = None, classifier: Classifier | None = None, jobs: int = 1,
         progress: Callable[[str, int, int], None] | None = None) -> DiffResult:
    """``tracekit.diff(before, after)``: two traces or run folders (as :func:`diff_paths`), or two results of
    ``tracekit.analyze`` (as :func:`diff_attributions`; ``scope``/``jobs`` then do not apply)."""
    if isinstance(before, Attribution) and isinstance(after, Attribution):
        result = diff_attributions(before, after)
        result.labels = (before.source, after.source) if before.source != after.source else ("before", "after")
        return result
    if isinstance(before, Attribution) or isinstance(after, Attribution):
        raise TypeError("tracekit.diff takes two paths or two Attribution results, not one of each")
    return diff_paths(before, after, scope=scope, classifier=classifier, jobs=jobs, progress=progress)


class _CallableModule(types.ModuleType):
    """Importing ``tracekit.diff`` (this module) rebinds the package's ``diff`` attribute to the module, which
    would hide the ``tracekit.diff(...)`` function: so the module, called, is that function."""

    def __call__(self, *args: Any, **kwargs: Any) -> DiffResult:
        return diff(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
