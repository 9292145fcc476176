"""The result of a diff: two attributions compared, and the CI gate's verdict (the rules: tracekit.analysis.compare).

Renderers take these; nothing here formats text. What each figure means: docs/attribution.md, "Diff".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..vocab import CATEGORIES, MATMUL_ROLES, Basis, Category, Compared, FoundBy, PairedBy, TimeBase, launch_bound_holds
from .views import show
from .attribution import Attribution, BlockResult, RankRow
from .invariants import close, expect, near

__all__ = ["EAGER_TO_FUSED_ALLOC", "AllocDelta", "BlockPair", "CategoryDelta", "CategoryNoise", "DiffResult", "Figures",
           "KernelChange", "KernelTotal", "Noise", "RankPair", "Spread", "Verdict", "shares_defined", "totals_figures"]

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
        return self

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
        att = self.before if side == "before" else self.after
        mine = [getattr(p, side) for p in self.pairs]
        unmatched = self.unmatched_before if side == "before" else self.unmatched_after
        steps = self.steps_before if side == "before" else self.steps_after
        seen = [id(b) for b in mine + unmatched]
        n = max(1, len(att.blocks))
        expect(len(seen) == len(set(seen)), f"{side}: a block is paired or listed twice")
        expect(set(seen) == {id(b) for b in att.blocks}, f"{side}: paired + unmatched blocks != all blocks")
        expect(close(sum(b.total_us for b in mine + unmatched), att.totals.total_us, n),
               f"{side}: paired + unmatched time != total attention time")
        if self.basis == Basis.TOTAL:
            expect(self._figures(side) == totals_figures(att), f"{side}: total basis but headline != attribution totals")
        else:
            expect(close(sum(f.total_us for _, f in steps), att.totals.total_us, n),
                   f"{side}: per-step totals do not sum to the trace total")
            lo, hi = min(f.total_us for _, f in steps), max(f.total_us for _, f in steps)
            med = self._figures(side).total_us
            expect((lo <= med or close(lo, med)) and (med <= hi or close(med, hi)), f"{side}: median outside its range")
            expect(close(sum(f.span_us for _, f in steps), att.totals.span_us, n, att.totals.span_us),
                   f"{side}: per-step spans do not sum to the trace's span")
        ks = self.kernels_before if side == "before" else self.kernels_after
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
            ids = [id(getattr(rp, side)) for rp in self.ranks if getattr(rp, side) is not None]
            expect(sorted(ids) == sorted(id(r) for r in att.ranks.rows) if att.ranks else False,
                   f"{side}: a rank is paired twice or missing")
        expect(all(p.before is None or p.before.rank == p.rank for p in self.ranks)
               and all(p.after is None or p.after.rank == p.rank for p in self.ranks), "a pair of different ranks")

    def _figures(self, side: str) -> Figures:
        return self.before_figures if side == "before" else self.after_figures


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
    compared: Compared = Compared.BUSY  # SPAN when either side is launch-bound: the profiled span, not busy time
