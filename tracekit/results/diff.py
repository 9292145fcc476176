"""The result of a diff: two attributions compared, and the CI gate's verdict (the rules: tracekit.analysis.compare).

Renderers take these; nothing here formats text. What each figure means: docs/attribution.md, "Diff".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..vocab import CATEGORIES, MATMUL_ROLES, Basis, Category, Compared, FoundBy, PairedBy, TimeBase, launch_bound_holds
from .views import show
from .attribution import Attribution, BlockResult, RankRow, StepFigures
from .invariants import EPS_US, close, expect, near
from .stages import StageDiff, check_stage_diff  # issue 44: stage to stage

__all__ = ["EAGER_TO_FUSED_ALLOC", "NOISE_MIN_STEPS", "AllocDelta", "BlockPair", "CategoryDelta", "CategoryNoise",
           "DiffResult", "Figures", "KernelChange", "KernelTotal", "Noise", "RankPair", "RunPair", "Spread", "Verdict",
           "WholeStep", "Headline", "HEADLINE_BASES", "pair_headline", "pair_reading", "peak_of", "shares_defined",
           "totals_figures", "whole_steps", "PAIR_ATTENTION_BASES", "gate_basis", "whole_noise"]

# Conclusions a diff states in words, in every format (DiffResult.conclusions).
EAGER_TO_FUSED_ALLOC = "eager → fused, the B·H·N² score matrices are no longer allocated"

# Steps each side needs before its per-step spread says anything about noise: the range of two points is one
# difference, which says nothing about how far a third step could fall (docs/attribution.md, "Diff"). Below it the
# noise verdicts are None (unknown), in the headline, the categories, the kernels changed and the CI gate.
NOISE_MIN_STEPS = 3


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
    paired_by: PairedBy  # the kind rule, or the fused-kernel fallback

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
    within_noise: bool | None  # None: unknown, fewer than NOISE_MIN_STEPS steps on a side


@dataclass(slots=True, kw_only=True)
class Noise:
    """Each side's per-step spread, and whether the change is within it: None (unknown) with fewer than
    NOISE_MIN_STEPS steps on either side, where the spreads are shown but decide nothing."""

    before: Spread
    after: Spread
    combined_spread_us: float  # (range before + range after) / 2
    within_noise: bool | None
    categories: dict[str, CategoryNoise]

    @property
    def known(self) -> bool:
        return min(len(self.before.steps), len(self.after.steps)) >= NOISE_MIN_STEPS


@dataclass(slots=True, kw_only=True)
class AllocDelta:
    """Memory inside blocks (``profile_memory`` traces), over all blocks of each side: the bytes allocated, summed
    (each allocation counted, however soon it was freed), and the peak: the largest ``Total Allocated`` the
    allocator reported at an allocation inside any block, as ``torch.cuda.max_memory_allocated`` reads it (on any
    one device; None, unknown, where the memory events carry no total)."""

    before_bytes: int
    after_bytes: int
    before_blocks: int  # blocks that carry memory data
    after_blocks: int
    before_peak_bytes: int | None = None
    after_peak_bytes: int | None = None

    @property
    def delta_bytes(self) -> int:
        return self.after_bytes - self.before_bytes

    @property
    def delta_peak_bytes(self) -> int | None:
        if self.before_peak_bytes is None or self.after_peak_bytes is None:
            return None
        return self.after_peak_bytes - self.before_peak_bytes


@dataclass(slots=True, kw_only=True)
class WholeStep:
    """One side's median step as a whole (all its device work, not only attention's), in µs: the mean over
    ``steps`` (the middle two of an even count) of each step's StepFigures, ranks of a run summed per step."""

    steps: list[int]  # the median step(s) by attention time (tracekit.results.steps); else by whole-step busy
    busy_us: float
    span_us: float
    attention_us: float  # the attention blocks' busy inside it (a union: at most the headline's sum of blocks)


# What a diff's headline compares (issue 37), the first that both sides have: the latency measured outside the
# profiler, else the median step's device busy time, else (where a side's step is launch-bound, so busy time is not
# what the user waits for) the median step's span. Attention alone is the second line, never the lead.
HEADLINE_LATENCY, HEADLINE_STEP_BUSY, HEADLINE_STEP_SPAN = "latency", "step busy", "step span"
HEADLINE_BASES = (HEADLINE_LATENCY, HEADLINE_STEP_BUSY, HEADLINE_STEP_SPAN)


@dataclass(slots=True, kw_only=True)
class Headline:
    """The diff's lead: the whole step (or the measured forward), before and after, on one basis (µs).

    ``basis`` is None when neither side pair has a whole figure (no measured latency, and a side without device
    ProfilerSteps); ``note`` then says why, and the attention line is all the diff can compare."""

    basis: str | None  # one of HEADLINE_BASES, or None
    before_us: float | None = None
    after_us: float | None = None
    note: str = ""  # why this basis (a launch-bound side), or why none

    @property
    def speedup(self) -> float | None:
        """before / after on the basis: above 1 is faster; None without a basis or with nothing after."""
        if self.before_us is None or self.after_us is None or self.after_us <= 0:
            return None
        return self.before_us / self.after_us

    def check(self) -> None:
        expect(self.basis is None or self.basis in HEADLINE_BASES, f"headline basis {self.basis!r}")
        expect((self.basis is None) == (self.before_us is None) == (self.after_us is None),
               f"headline on {self.basis}: figures {self.before_us}, {self.after_us}")
        expect(self.basis is not None or bool(self.note), "a diff without a whole-step headline must say why")


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
    # Each side's ProfilerSteps as a whole, by step number (whole_steps); [] without steps or on CPU-only traces.
    whole_steps_before: list[StepFigures] = field(default_factory=list)
    whole_steps_after: list[StepFigures] = field(default_factory=list)
    # The median step of each, as a whole (the step line beside the attention headline); None without whole steps.
    step_before: WholeStep | None = None
    step_after: WholeStep | None = None
    # The lead (issue 37): latency, else the median step's busy time, else its span; attention is the second line.
    headline: Headline = field(default_factory=lambda: Headline(basis=None, note="not computed"))
    # Both sides folders of several runs: the runs of the same name, each diffed on its own (the figures above are
    # then the runs in common, summed); the names found on one side only. [] otherwise.
    run_pairs: list[RunPair] = field(default_factory=list)
    runs_only_before: list[str] = field(default_factory=list)
    runs_only_after: list[str] = field(default_factory=list)
    # Serving traces (issue 44): stage to stage, prefill with prefill; a stage on one side only is named, not paired.
    stages: StageDiff = field(default_factory=lambda: StageDiff(pairs=[], only_before=[], only_after=[]))

    def to_dataframe(self, by: str = "category") -> Any:
        """A pandas DataFrame (``pip install 'tracekit[notebook]'``): one row per ``by`` = "category" (with the
        total), "pair" (paired blocks), "kind" (pairs grouped by kind) or "kernel" (both sides); times in µs."""
        return show("diff_frame", self, by)

    def __repr__(self) -> str:
        """One line (the headline), not the nested dataclasses' tens of thousands of characters."""
        return str(show("diff_repr", self))

    def _repr_html_(self) -> str:
        return str(show("diff_html", self))

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
        scale = max(self.before_figures.total_us, self.after_figures.total_us)  # of the terms behind every delta
        for side, fig, att in (("before", self.before_figures, self.before), ("after", self.after_figures, self.after)):
            _check_figures(side, fig, len(att.blocks))
        self._check_deltas(scale)
        for side in ("before", "after"):
            self._check_side(side)
        for p in self.pairs:
            expect(p.before.phase == p.after.phase, f"pair {p.before.name}/{p.after.name}: phases differ")
            ok = p.before.kind == p.after.kind if p.paired_by == PairedBy.KIND else \
                p.before.found_by == p.after.found_by == FoundBy.FUSED_KERNEL
            expect(ok, f"pair {p.before.name}/{p.after.name}: does not follow the {p.paired_by} rule")
        if self.launch_bound:
            expect(bool(self.no_claim), "a launch-bound diff must say why it claims no busy-time speedup")
        self._check_kernels()
        if self.ranks:
            self._check_ranks()
        self._check_noise()
        self._check_alloc()
        for side in ("before", "after"):
            self._check_whole_step(side)
        self._check_run_pairs()
        self._check_headline()
        check_stage_diff(self.stages, self.before.stages, self.after.stages)
        return self

    def _check_run_pairs(self) -> None:
        """Each run is paired once, by its own name, or named on one side only; ranks pair within a run, never
        across the runs summed here; each pair's own diff adds up."""
        if not self.run_pairs:
            expect(not self.runs_only_before and not self.runs_only_after, "runs on one side only, but no run pair")
            return
        names = [p.run for p in self.run_pairs]
        expect(len(names) == len(set(names)), "a run is paired twice")
        expect(len({*names, *self.runs_only_before, *self.runs_only_after})
               == len(names) + len(self.runs_only_before) + len(self.runs_only_after),
               "a run is both paired and on one side only, or on both sides' only-lists")
        expect(not self.ranks, "ranks paired across the runs summed (they pair only within a run)")
        for p in self.run_pairs:
            expect(p.gate is None or not p.inconclusive, f"run {p.run}: the gate both decided and did not")
            p.diff.check()

    def _check_headline(self) -> None:
        """The lead's figures are the measured latencies or the median whole steps it names, nothing else."""
        h = self.headline
        h.check()
        if h.basis == HEADLINE_LATENCY:
            mb, ma = self.before.measured, self.after.measured
            expect(mb is not None and ma is not None and h.before_us == 1000 * mb.median_ms
                   and h.after_us == 1000 * ma.median_ms, "latency headline is not the measured latencies")
        elif h.basis is not None:
            sb, sa = self.step_before, self.step_after
            attr = "busy_us" if h.basis == HEADLINE_STEP_BUSY else "span_us"
            expect(sb is not None and sa is not None and h.before_us == getattr(sb, attr)
                   and h.after_us == getattr(sa, attr), f"{h.basis} headline is not the median steps'")

    def _check_noise(self) -> None:
        """Noise verdicts are None exactly when a side has fewer than NOISE_MIN_STEPS steps."""
        n = self.noise
        if n is None:
            return
        expect((n.within_noise is None) == (not n.known), f"noise verdict {n.within_noise} over "
               f"{len(n.before.steps)} and {len(n.after.steps)} steps")
        expect(all((c.within_noise is None) == (not n.known) for c in n.categories.values()),
               "category noise verdicts disagree with the step counts")

    def _check_alloc(self) -> None:
        """The memory figures are the blocks': allocated bytes summed, peaks their maximum (never negative)."""
        a = self.alloc
        if a is None:
            return
        for side, att, total, peak in (("before", self.before, a.before_bytes, a.before_peak_bytes),
                                       ("after", self.after, a.after_bytes, a.after_peak_bytes)):
            expect(total == sum(b.alloc_bytes for b in att.blocks if b.alloc_bytes is not None),
                   f"{side}: allocated bytes != the blocks' sum")
            expect(peak == peak_of(att.blocks), f"{side}: peak {peak} is not the blocks' largest")
            expect(peak is None or peak >= 0, f"{side}: negative peak memory")

    def _check_whole_step(self, side: str) -> None:
        """The whole-step figures are the side's steps summed per number; its median step is the mean of some of
        them, busy at least its attention part, span at least its busy; on the per-step basis, the headline's
        median step itself, so its attention part is at most the headline's attention time."""
        att, per = (self.before, self.whole_steps_before) if side == "before" else (self.after, self.whole_steps_after)
        ws = self.step_before if side == "before" else self.step_after
        expect([(f.step, f.busy_us, f.span_us, f.attention_us) for f in per]
               == [(f.step, f.busy_us, f.span_us, f.attention_us) for f in whole_steps(att)],
               f"{side}: whole steps are not the traces' own")
        if ws is None:
            return
        _check_median_step(side, ws, per)
        expect(ws.attention_us <= ws.busy_us + near(2, ws.busy_us), f"{side}: step busy below its attention busy")
        expect(ws.busy_us <= ws.span_us + near(2, ws.span_us), f"{side}: step span below its busy")
        if self.basis == Basis.MEDIAN_STEP:
            fig = self._figures(side)
            expect(ws.attention_us <= fig.total_us + near(2 * max(1, len(att.blocks)), fig.total_us),
                   f"{side}: the median step's attention part beyond the headline's attention time")

    def _check_deltas(self, scale: float) -> None:
        """Each category's delta is after - before of the headline figures, and they sum to the total delta."""
        nc = len(CATEGORIES)
        expect(list(self.categories) == list(CATEGORIES), "category deltas out of order or missing")
        for c, d in self.categories.items():
            expect(d.before_us == self.before_figures.categories[c] and d.after_us == self.after_figures.categories[c],
                   f"{c}: delta row is not the headline figures")
            expect(close(d.after_us - d.before_us, d.delta_us, 1, scale), f"{c}: delta != after - before")
        expect(close(sum(d.delta_us for d in self.categories.values()), self.delta_us, nc, scale),
               "total delta != sum of category deltas")
        if shares_defined(self.delta_us, scale):
            expect(abs(sum(d.share_of_delta or 0 for d in self.categories.values()) - 1) < 1e-6,
                   "category shares of the delta do not sum to 1")

    def _check_side(self, side: str) -> None:
        """One side's blocks are each paired or listed once, and its headline is its totals or its median step."""
        att, unmatched, steps, ks = self._side(side)
        mine = [getattr(p, side) for p in self.pairs]
        seen = [id(b) for b in mine + unmatched]
        n = max(1, len(att.blocks))
        expect(len(seen) == len(set(seen)), f"{side}: a block is paired or listed twice")
        expect(set(seen) == {id(b) for b in att.blocks}, f"{side}: paired + unmatched blocks != all blocks")
        expect(close(sum(b.total_us for b in mine + unmatched), att.totals.total_us, n),
               f"{side}: paired + unmatched time != total attention time")
        if self.basis == Basis.TOTAL:
            expect(self._figures(side) == totals_figures(att),
                   f"{side}: total basis but headline != attribution totals")
        else:
            _check_steps_add_up(side, steps, att, self._figures(side).total_us)
        if att.time_base == TimeBase.DEVICE:
            expect(sum(k.count for k in ks) == sum(b.kernels for b in att.blocks),
                   f"{side}: kernel table count != device events owned by blocks")

    def _check_kernels(self) -> None:
        """A changed kernel changed; an 'only before' kernel is absent after, and the reverse."""
        for k in self.kernels_changed:
            expect(k.before.name == k.after.name == k.name, f"changed kernel {k.name}: rows of other kernels")
            expect(k.before.count != k.after.count or k.before.total_us != k.after.total_us,
                   f"changed kernel {k.name}: nothing changed")
        after_names = {k.name for k in self.kernels_after}
        before_names = {k.name for k in self.kernels_before}
        expect(all(k.name not in after_names for k in self.only_before), "an 'only before' kernel exists after")
        expect(all(k.name not in before_names for k in self.only_after), "an 'only after' kernel exists before")

    def _check_ranks(self) -> None:
        """Rank N pairs with rank N; every rank of each side's view is in one pair."""
        expect(self.before.ranks is not None and self.after.ranks is not None, "rank pairs without rank views")
        for side, att in (("before", self.before), ("after", self.after)):
            expect(self._rank_paired_once(side, att), f"{side}: a rank is paired twice or missing")
        expect(all(p.before is None or p.before.rank == p.rank for p in self.ranks)
               and all(p.after is None or p.after.rank == p.rank for p in self.ranks), "a pair of different ranks")

    def _side(self, side: str
              ) -> tuple[Attribution, list[BlockResult], list[tuple[int, Figures]], list[KernelTotal]]:
        """One side's attribution, unpaired blocks, per-step figures and kernel table."""
        if side == "before":
            return self.before, self.unmatched_before, self.steps_before, self.kernels_before
        return self.after, self.unmatched_after, self.steps_after, self.kernels_after

    def _rank_paired_once(self, side: str, att: Attribution) -> bool:
        """Every rank row of the side's view is in exactly one pair."""
        if not att.ranks:
            return False
        ids = [id(getattr(rp, side)) for rp in self.ranks if getattr(rp, side) is not None]
        return sorted(ids) == sorted(id(r) for r in att.ranks.rows)

    def _figures(self, side: str) -> Figures:
        return self.before_figures if side == "before" else self.after_figures


def _check_median_step(side: str, ws: WholeStep, per: list[StepFigures]) -> None:
    """The median whole step names some of the side's steps, and its figures are their means."""
    by = {f.step: f for f in per}
    expect(bool(ws.steps) and all(s in by for s in ws.steps), f"{side}: median step {ws.steps} not among its steps")
    n = len(ws.steps)
    for name, v in (("busy", ws.busy_us), ("span", ws.span_us), ("attention", ws.attention_us)):
        mean = sum(getattr(by[s], f"{name}_us") for s in ws.steps) / n
        expect(close(v, mean, n, mean), f"{side}: median step {name} {v} != mean of its steps {mean}")


def _check_steps_add_up(side: str, steps: list[tuple[int, Figures]], att: Attribution, med: float) -> None:
    """On the per-step basis: the steps' totals and spans sum to the side's, and the median lies in their range."""
    n = max(1, len(att.blocks))
    expect(close(sum(f.total_us for _, f in steps), att.totals.total_us, n),
           f"{side}: per-step totals do not sum to the trace total")
    lo, hi = min(f.total_us for _, f in steps), max(f.total_us for _, f in steps)
    expect((lo <= med or close(lo, med)) and (med <= hi or close(med, hi)), f"{side}: median outside its range")
    expect(close(sum(f.span_us for _, f in steps), att.totals.span_us, n, att.totals.span_us),
           f"{side}: per-step spans do not sum to the trace's span")


def _check_figures(side: str, fig: Figures, nblocks: int) -> None:
    """A headline's categories sum to its total, its roles to its matmul, busy + idle to its span."""
    expect(set(fig.categories) == set(CATEGORIES), f"{side}: category keys {sorted(fig.categories)}")
    expect(close(sum(fig.categories.values()), fig.total_us, len(CATEGORIES)),
           f"{side}: headline categories do not sum to its total")
    if fig.matmul_roles is not None:
        m = fig.categories[Category.MATMUL]
        expect(list(fig.matmul_roles) == list(MATMUL_ROLES), f"{side}: matmul role keys")
        expect(close(sum(fig.matmul_roles.values()), m, len(MATMUL_ROLES), m),
               f"{side}: headline matmul roles do not sum to its matmul")
    expect(close(fig.total_us + fig.idle_us, fig.span_us, 2 * max(1, nblocks), fig.span_us)
           or fig.launch_bound is None, f"{side}: headline busy + idle != span")
    if fig.launch_bound is not None:
        expect(launch_bound_holds(fig.launch_bound, fig.idle_us, fig.span_us, near(2, fig.span_us)),
               f"{side}: launch_bound does not follow idle / span")


@dataclass(slots=True, kw_only=True)
class RunPair:
    """One run found under the same name on both sides (``--by run``'s names), diffed on its own, and what the CI
    gate made of it: ``gate`` when it decided, ``inconclusive`` (why) when it could not."""

    run: str
    diff: DiffResult
    gate: Verdict | None = None
    inconclusive: str = ""

    @property
    def verdict(self) -> str:
        """The gate's word (``regression``, ``pass``, ``inconclusive``) when it was asked; else the pair's own
        reading of its headline (:func:`pair_reading`)."""
        if self.gate is not None:
            return "pass" if self.gate.ok else "regression"
        return "inconclusive" if self.inconclusive else pair_reading(self.diff)

    @property
    def verdict_basis(self) -> str | None:
        """What the verdict was decided on: the gate's own basis when it decided (:func:`gate_basis`), which need
        not be the headline's; the headline's basis when no gate was asked; None when the gate could not decide."""
        if self.gate is not None:
            return gate_basis(self.gate)
        return None if self.inconclusive else str(pair_headline(self.diff)["basis"])


def gate_basis(v: Verdict) -> str:
    """The CI gate's basis, named as a run pair's headline names its own: ``latency``, ``attention (median step)``
    (attention busy time, as the attention line), or ``attention span (median step)``; ``total`` for median step
    where a side has no steps."""
    if v.compared == Compared.LATENCY:
        return HEADLINE_LATENCY
    att = PAIR_ATTENTION_BASES[v.basis]
    return att.replace("attention", "attention span", 1) if v.compared == Compared.SPAN else att


# A run pair's lead when it has no whole step (``diff.headline.basis`` None): its attention figure, named as such.
PAIR_ATTENTION_BASES = {Basis.MEDIAN_STEP: "attention (median step)", Basis.TOTAL: "attention (total)"}


def pair_headline(diff: DiffResult) -> dict[str, Any]:
    """A run pair's headline, as that pair's diff leads: its basis, before and after (µs), speedup, noise.

    The one place every view of a run pair takes its figure from. The pair leads like a single diff, with its whole
    step (``diff.headline``: latency, step busy or step span); only a pair without one falls back to its attention
    figure (basis ``attention (median step)`` / ``attention (total)``). One basis per row: the noise verdict and the
    reading are on the basis the row names (:func:`whole_noise`), never attention's beside a whole-step figure."""
    h = diff.headline
    if h.basis is None or h.before_us is None or h.after_us is None:
        return {"basis": PAIR_ATTENTION_BASES[diff.basis], "before_us": diff.before_figures.total_us,
                "after_us": diff.after_figures.total_us, "speedup": diff.speedup, "delta_pct": diff.delta_pct,
                "within_noise": None if diff.noise is None else diff.noise.within_noise,
                "claims_speedup": not diff.no_claim, "note": h.note or None}
    b, a = h.before_us, h.after_us
    return {"basis": h.basis, "before_us": b, "after_us": a, "speedup": h.speedup,
            "delta_pct": 100 * (a - b) / b if b > 0 else None, "within_noise": whole_noise(diff),
            # a launch-bound step's span is not what the user waits for: shorter or longer, never a speedup
            "claims_speedup": h.basis != HEADLINE_STEP_SPAN, "note": h.note or None}


def whole_noise(diff: DiffResult) -> bool | None:
    """Whether the whole-step lead's change is within its own per-step spread, by the attention rule (|Δ| <= (range
    before + range after) / 2, docs/attribution.md, "Noise") over each side's whole steps on the lead's basis. None
    (unknown) on a latency lead (its repeats are the gate's to test), or with fewer than NOISE_MIN_STEPS steps."""
    h = diff.headline
    per_b, per_a = diff.whole_steps_before, diff.whole_steps_after
    if h.basis not in (HEADLINE_STEP_BUSY, HEADLINE_STEP_SPAN) or min(len(per_b), len(per_a)) < NOISE_MIN_STEPS:
        return None
    if h.before_us is None or h.after_us is None:
        return None
    attr = "busy_us" if h.basis == HEADLINE_STEP_BUSY else "span_us"

    def spread(steps: list[StepFigures]) -> float:
        return max(getattr(f, attr) for f in steps) - min(getattr(f, attr) for f in steps)
    return abs(h.after_us - h.before_us) <= (spread(per_b) + spread(per_a)) / 2 + EPS_US


def pair_reading(diff: DiffResult) -> str:
    """What the pair's headline says without a gate, on its own basis: ``faster``/``slower``/``unchanged`` (latency,
    step busy, attention), ``shorter``/``longer``/``unchanged`` (step span: a launch-bound step's span is not a
    latency), ``within noise``, or ``no claim`` (an attention fallback that is launch-bound or paired nothing);
    ``…, noise unknown`` where no spread says whether the change is more than noise."""
    h = pair_headline(diff)
    if h["basis"] not in HEADLINE_BASES and not h["claims_speedup"]:
        return "no claim"
    if h["within_noise"]:
        return "within noise"
    s = h["speedup"]
    if s is None or h["before_us"] <= 0:
        what = "attention" if h["basis"] not in HEADLINE_BASES else h["basis"]
        return f"no {what} time " + ("after" if s is None else "before")
    return _change_word(h["basis"], s) + (", noise unknown" if h["within_noise"] is None and s != 1 else "")


def _change_word(basis: str, speedup: float) -> str:
    """``faster``/``slower`` (``shorter``/``longer`` on a step span, which is not a latency) or ``unchanged``."""
    up, down = ("shorter", "longer") if basis == HEADLINE_STEP_SPAN else ("faster", "slower")
    return up if speedup > 1 else down if speedup < 1 else "unchanged"


def peak_of(blocks: list[BlockResult]) -> int | None:
    """The largest peak memory of any block; None when no block knows its peak."""
    peaks = [b.alloc_peak_bytes for b in blocks if b.alloc_peak_bytes is not None]
    return max(peaks) if peaks else None


def whole_steps(att: Attribution) -> list[StepFigures]:
    """The side's whole steps by step number, the traces of a run (ranks) summed per number, like its per-step
    attention figures (tracekit.analysis.compare.step_figures)."""
    per: dict[int, StepFigures] = {}
    for t in att.traces:
        for f in t.step_figures:
            g = per.setdefault(f.step, StepFigures(step=f.step, busy_us=0.0, span_us=0.0, attention_us=0.0))
            g.busy_us += f.busy_us
            g.span_us += f.span_us
            g.attention_us += f.attention_us
    return [per[s] for s in sorted(per)]


def shares_defined(delta_us: float, scale: float) -> bool:
    """Shares of the delta mean something only when the delta is more than rounding."""
    return not close(delta_us, 0.0, len(CATEGORIES), scale)


def totals_figures(att: Attribution) -> Figures:
    t = att.totals
    roles = t.matmul_roles
    return Figures(total_us=t.total_us, categories=dict(t.categories), span_us=t.span_us, idle_us=t.idle_us,
                   launch_bound=t.launch_bound, matmul_roles=None if roles is None else dict(roles))



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
    compared: Compared = Compared.BUSY  # what was compared (--gate-on; docs/attribution.md, "The CI gate")
    chosen: bool = False  # ``compared`` was asked for (--gate-on), not chosen by the default rule
    # Where each side's measured latency came from (a measured.json, or --latency-before/--latency-after), when
    # ``compared`` is LATENCY; "" otherwise.
    sources: tuple[str, str] = ("", "")
    # Why the noise could not carry the figure across the threshold (the spread it beat, or the test and its
    # p-value; tracekit.analysis.gate): "" for a verdict built without one.
    evidence: str = ""
