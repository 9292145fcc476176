"""Result objects of an analysis, and the invariants they must keep (``check``).

Renderers take these; nothing here formats text. What each figure means: docs/attribution.md.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from itertools import repeat
from operator import ge, le, lt, sub, truediv
from typing import TYPE_CHECKING, Any

from ..vocab import (
    CATEGORIES, IDLE_CAUSES, MATMUL_ROLES, UNLINKED_REASONS, Category, CoreKind, FoundBy, GraphMode, Phase, RankFrom,
    TimeBase, launch_bound_holds,
)
from .invariants import EPS_US, REL, InvariantError, check_roles, close, expect, near, zero_categories
from .views import show
from .ops import check_ops
from .rest import StepRest
from .stages import check_stages

if TYPE_CHECKING:
    from ..model import Shape
    from .efficiency import DeviceInfo, Efficiency
    from .measured import Measured
    from .ops import OpRow
    from .stages import StageRow
    from .hints import Hint, HintFacts
    from .whatif import WhatIf

__all__ = ["CATEGORIES", "DIFF_SCHEMA_VERSION", "EPS_US", "IDLE_CAUSES", "SCHEMA_VERSION", "Attribution",
           "BlockResult", "Coverage", "Evidence", "GraphSummary", "Intervals", "InvariantError", "Layer", "RankRow",
           "RankSpread", "RankView", "RunResult", "StepFigures", "Totals", "TraceSummary", "close", "near",
           "zero_categories"]

SCHEMA_VERSION = 1
_CATEGORY_SET, _IDLE_CAUSE_LIST = frozenset(CATEGORIES), list(IDLE_CAUSES)  # (what check() compares keys with)
DIFF_SCHEMA_VERSION = 1  # the diff's JSON (tracekit.results.diff), versioned on its own


@dataclass(frozen=True, slots=True, kw_only=True)
class Evidence:
    """Why a block is attention: the core found inside it and the discovery rule that chose its extent.

    ``names`` are the core's op or kernel names (trace data: hostile in every output); ``shapes`` the
    recorded input dims of an eager core's three ops, when the trace has them. ``group`` names the
    multi-kernel group (tracekit.analysis.blocks.kernels.KERNEL_GROUPS) whose kernels joined the block, if any.
    """

    rule: str
    core: CoreKind
    names: tuple[str, ...]
    shapes: tuple[str, ...] = ()
    group: str | None = None

    def check(self, where: str = "block") -> None:
        expect(bool(self.rule), lambda: f"{where}: evidence without a rule")
        expect(isinstance(self.core, CoreKind),
               lambda: f"{where}: evidence core {self.core!r} is not a CoreKind")
        expect(len(self.names) > 0, lambda: f"{where}: evidence names no core")
        if self.core == CoreKind.EAGER_OPS:
            expect(len(self.names) == 3, lambda: f"{where}: an eager core is a score, a softmax and a context op")
            expect(len(self.shapes) in (0, 3), lambda: f"{where}: eager core shapes are all three or none")


@dataclass(slots=True, kw_only=True)
class GraphSummary:
    """What one trace shows of CUDA/HIP graphs, and how much of what its graphs replayed was tied to the ops
    that captured them (tracekit.analysis.graphs; docs/attribution.md, "Graphs"). Times are device µs."""

    mode: GraphMode
    captures: int  # stream captures in this trace
    captured_launches: int  # launches inside them: each recorded a node and ran nothing
    captured_named: int  # of those, launches that name their kernel (HIP's)
    instantiations: int
    graph_launches: int
    replayed_kernels: int  # device events the graph launches ran
    replayed_us: float  # their summed durations
    mapped_kernels: int  # of those, tied to a captured launch (and so to its op, module and shapes)
    mapped_us: float
    mapped_by_order: int  # of the mapped, tied by position alone (the capture named no kernel there)
    unmapped: dict[str, int]  # short names of replayed kernels left unmapped -> count, the most frequent first
    capture_sources: list[str]  # the traces whose captures mapped something (this one's own name, or others)
    eager_attention_kernels: int  # fused attention kernels launched outside graphs, in a trace with graph launches

    @property
    def mapped_share(self) -> float | None:
        """Share of replayed kernel time mapped to captured ops; None without replayed time."""
        return self.mapped_us / self.replayed_us if self.replayed_us > 0 else None

    def check(self, where: str = "graphs") -> None:
        expect(isinstance(self.mode, GraphMode), f"{where}: mode {self.mode!r} is not a GraphMode")
        counts = (self.captures, self.captured_launches, self.captured_named, self.instantiations,
                  self.graph_launches, self.replayed_kernels, self.mapped_kernels, self.mapped_by_order,
                  self.eager_attention_kernels)
        expect(all(n >= 0 for n in counts), f"{where}: a negative count")
        expect(self.captured_named <= self.captured_launches, f"{where}: more named launches than launches")
        expect(self.mapped_by_order <= self.mapped_kernels <= self.replayed_kernels,
               f"{where}: mapped {self.mapped_kernels} of {self.replayed_kernels} replayed kernels")
        expect(-EPS_US <= self.mapped_us <= self.replayed_us + EPS_US, f"{where}: mapped time beyond replayed time")
        expect(sum(self.unmapped.values()) <= self.replayed_kernels - self.mapped_kernels,
               f"{where}: more unmapped names than unmapped kernels")
        expect((self.mode == GraphMode.EAGER) == (self.captures == 0 and self.graph_launches == 0),
               f"{where}: mode {self.mode} with {self.captures} captures and {self.graph_launches} graph launches")
        expect((self.mode in (GraphMode.CAPTURE_ONLY, GraphMode.CAPTURE_REPLAY)) == (self.captures > 0),
               f"{where}: mode {self.mode} with {self.captures} captures")
        expect(self.mode != GraphMode.MIXED or self.eager_attention_kernels > 0,
               f"{where}: mixed mode without attention launched outside graphs")
        expect(self.mapped_kernels == 0 or bool(self.capture_sources), f"{where}: mapped kernels without a capture")


@dataclass(frozen=True, slots=True, kw_only=True)
class Intervals:
    """A block's device events on its trace's own clock (docs/attribution.md, "Time in the trace"), stored as
    flat arrays: a block of a 1 GB trace holds thousands, and one tuple per event would cost more than the
    attribution itself. Times are the file's ``ts`` in integer ns (absolute); ``origin_ns`` is the trace start
    (TraceSummary.origin_ns) that ``rows()`` subtracts."""

    origin_ns: int
    start_ns: array  # 'q', one per device event, in the trace's order
    end_ns: array  # 'q'
    category: bytes  # index into CATEGORIES
    stream: array  # 'q', index into ``streams``
    streams: tuple[tuple[object, object], ...]  # the trace's device streams as (pid, tid); shared by its blocks
    names: tuple[str, ...] = ()  # each event's kernel name (the timeline's hover); () on hand-built results

    def __len__(self) -> int:
        return len(self.start_ns)

    def rows(self) -> list[tuple[float, float, str, object, object]]:
        """(start_us, end_us, category, pid, tid) per event, µs from the trace start."""
        o, cats, streams = self.origin_ns, CATEGORIES, self.streams
        return [((s - o) / 1000, (e - o) / 1000, cats[c], *streams[k])
                for s, e, c, k in zip(self.start_ns, self.end_ns, self.category, self.stream)]

    def check(self, start_us: float, end_us: float, where: str) -> None:
        """Every event lies inside the block's window [start_us, end_us] and ends after it starts."""
        n = len(self.start_ns)
        expect(len(self.end_ns) == n and len(self.category) == n and len(self.stream) == n,
               lambda: f"{where}: interval arrays of different lengths")
        if not n:
            return
        starts, ends, stream = self.start_ns.tolist(), self.end_ns.tolist(), self.stream.tolist()  # (each boxed once)
        expect(max(self.category) < len(CATEGORIES) and max(stream) < len(self.streams) and min(stream) >= 0,
               lambda: f"{where}: an interval's category or stream is out of range")
        expect(all(map(le, starts, ends)), lambda: f"{where}: an interval ends before it starts")
        lo, hi = (min(starts) - self.origin_ns) / 1000, (max(ends) - self.origin_ns) / 1000
        expect(lo >= start_us - near(1, start_us) and hi <= end_us + near(1, end_us),
               lambda: f"{where}: device intervals {lo}..{hi} µs outside the block's window {start_us}..{end_us} µs")


# Columns of an IdleGaps row: its start and end, then its ns per cause (IDLE_CAUSES order).
GAP_STRIDE = 2 + len(IDLE_CAUSES)


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleGaps:
    """A block's idle gaps (tracekit.analysis.idle): each stretch of its span where none of its device events ran,
    with the ns of it that each cause took, so that the timeline can label a gap by why the device waited. One flat
    'q' array of ``start, end`` and the ns per cause (IDLE_CAUSES order) per gap: GAP_STRIDE numbers (ns,
    absolute)."""

    origin_ns: int
    flat: array

    def __len__(self) -> int:
        return len(self.flat) // GAP_STRIDE

    def rows(self) -> list[tuple[float, ...]]:
        """(start_us, end_us, then µs per cause in IDLE_CAUSES order) per gap, times µs from the trace start."""
        f, o, w = self.flat, self.origin_ns, GAP_STRIDE
        return [((f[i] - o) / 1000, (f[i + 1] - o) / 1000, *(x / 1000 for x in f[i + 2:i + w]))
                for i in range(0, len(f), w)]

    def check(self, b: BlockResult, where: str) -> None:
        """Gaps in order, disjoint and inside the window; each gap's causes sum to its length; and the gaps' causes
        sum to the block's idle by cause (integer ns against µs figures: within rounding)."""
        f, o, w = self.flat, self.origin_ns, GAP_STRIDE
        expect(len(f) % w == 0, lambda: f"{where}: idle gaps array of length {len(f)}")
        assert b.start_us is not None and b.end_us is not None
        if not f:
            return
        lo, hi = b.start_us - near(1, b.start_us), b.end_us + near(1, b.end_us)  # (µs: epoch ns overflow a float)
        # Column-wise with builtins (no Python loop per gap): check() runs on every attribution of a 1 GB trace. The
        # numbers as a list first: a list's slices and sums read its ints, an array's box each one again.
        flat = f.tolist()
        g0, g1, *causes = (flat[k::w] for k in range(w))
        expect(_gaps_in_window(g0, g1, lo, hi, o),
               lambda: f"{where}: an idle gap out of order or outside the window")
        expect(min(map(min, causes)) >= 0 and list(map(sum, zip(*causes))) == list(map(sub, g1, g0)),
               lambda: f"{where}: an idle gap whose causes do not sum to its length")
        if b.idle_by_cause is not None:
            _check_gap_causes(b, b.idle_by_cause, tuple(map(sum, causes)), where)


def _gaps_in_window(g0: list[int], g1: list[int], lo: float, hi: float, origin_ns: int) -> bool:
    """Gaps (starts ``g0``, ends ``g1``, ns) each positive, in order and disjoint, and all within [lo, hi] µs."""
    return (all(map(lt, g0, g1)) and all(map(le, g1[:-1], g0[1:])) and lo <= (g0[0] - origin_ns) / 1000
            and (g1[-1] - origin_ns) / 1000 <= hi)


def _check_gap_causes(b: BlockResult, causes: dict[str, float], sums: tuple[int, ...], where: str) -> None:
    """The gaps' ns per cause sum to the block's idle by cause (µs figures: within rounding). All within two ns
    roundings (what ``close`` allows at the least) passes at once, by C loops; else each is asked in turn."""
    off = map(abs, map(sub, map(truediv, sums, repeat(1000)), map(causes.__getitem__, IDLE_CAUSES)))
    if all(map(le, off, repeat(2 * EPS_US))):
        return
    for cause, ns in zip(IDLE_CAUSES, sums):
        expect(close(ns / 1000, causes[cause], 2, b.span_us),
               lambda: f"{where}: idle gaps give {cause} {ns / 1000} µs, the block {causes[cause]}")


@dataclass(slots=True, kw_only=True)
class Layer:
    """The attention layer around a block's core (tracekit.analysis.blocks.layer): the outermost scope holding
    this one core, no other and no feed-forward part, e.g. the Q/K/V and output projections around SGLang's
    ``RadixAttention``. Its own split, on the block's time base: categories sum to ``total_us``, and ``matmul``
    splits by role. It holds the core, so its total is at least the block's."""

    name: str
    total_us: float
    categories: dict[str, float]
    matmul_roles: dict[str, float] | None = None

    def check(self, block_total_us: float, where: str) -> None:
        expect(set(self.categories) == set(CATEGORIES), f"{where}: layer category keys {sorted(self.categories)}")
        s = sum(self.categories.values())
        expect(close(s, self.total_us, len(CATEGORIES) + 1, self.total_us),
               f"{where}: layer categories sum {s} != layer total {self.total_us}")
        expect(all(v >= -EPS_US for v in self.categories.values()), f"{where}: negative layer category")
        if self.matmul_roles is not None:
            check_roles(self.matmul_roles, self.categories[Category.MATMUL], f"{where} (layer)")
        expect(self.total_us >= block_total_us - near(len(CATEGORIES) + 1, self.total_us),
               f"{where}: layer total {self.total_us} below the core's {block_total_us}")


@dataclass(slots=True, kw_only=True)
class BlockResult:
    """One attention block. Time figures in µs; ``total_us`` is device busy time or host time (one name in Python;
    the JSON also writes it as ``busy_us`` beside ``span_us`` and ``idle_us``, schema version 1)."""

    name: str
    kind: str  # the block name with instance numbers folded, for grouping
    found_by: FoundBy
    step: int | None
    ordinal: int
    phase: Phase
    total_us: float
    span_us: float
    idle_us: float
    categories: dict[str, float]
    kernels: int
    host_us: float | None
    alloc_bytes: int | None
    source: str
    # ``matmul`` split by role (tracekit.analysis.roles; keys MATMUL_ROLES), summing to categories["matmul"].
    # None where nothing computed it (a hand-built result); attribution always fills it.
    matmul_roles: dict[str, float] | None = None
    # Device idle for more than half the span (the device waited for launches); None on CPU-only traces,
    # which have no device to wait.
    launch_bound: bool | None = None
    # ``idle_us`` by why the device idled (tracekit.analysis.idle; keys IDLE_CAUSES), summing to it; all 0 on CPU-only
    # traces. None where nothing computed it (a hand-built result); attribution always fills it.
    idle_by_cause: dict[str, float] | None = None

    # FLOPs/bytes of the block's counted kernels and the rate they reached (tracekit.analysis.flops); per category
    # and role.
    efficiency: Efficiency | None = None
    efficiency_by_category: dict[str, Efficiency] = field(default_factory=dict)
    # Why this is attention (the core and the discovery rule); None only on hand-built or pre-evidence results.
    evidence: Evidence | None = None
    # In a graph capture: the kernels the block's launches recorded into the graph (short names -> count), the
    # captured structure of a call that ran nothing; None outside captures.
    recorded: dict[str, int] | None = None
    # The largest ``Total Allocated`` (bytes) the allocator reported at an allocation inside the block: its peak
    # memory, where ``alloc_bytes`` is the sum of what it allocated. None where no allocation there carries the total.
    alloc_peak_bytes: int | None = None
    # The block's window on its trace's clock, µs from the trace start (TraceSummary.origin_ns): the span's own
    # start and end, so end - start == span_us. None only on hand-built results.
    start_us: float | None = None
    end_us: float | None = None
    # Its device events' intervals on the same clock (in JSON only with --with-intervals); None on CPU-only
    # traces (no device events) and hand-built results.
    intervals: Intervals | None = None
    # Its idle gaps with their causes (the timeline's labels); None where the span has no idle or nothing split it.
    idle_gaps: IdleGaps | None = None
    # Its host ops' intervals as (pid, tid, start_us, end_us), on the same clock: the timeline's host lanes. ()
    # for a block found from its kernels alone (no host op) and on hand-built results.
    host_spans: tuple[tuple[object, object, float, float], ...] = ()
    # On CPU-only traces (host time base), the host ops whose self time the block counts, as intervals on their
    # threads (``streams`` are (pid, tid) of threads): the timeline's ops, where a device trace has kernels. Not
    # in the JSON. None on device traces and hand-built results.
    host_ops: Intervals | None = None
    # The attention layer around this block's core (its projections, norms and glue; tracekit.analysis.blocks.layer);
    # None where the block is its own layer, and on backward and kernel-only blocks (no module scope around them).
    layer: Layer | None = None


@dataclass(slots=True, kw_only=True)
class Totals:
    total_us: float
    categories: dict[str, float]
    attention_share: float | None  # of device busy time (host time on CPU-only traces)
    blocks: int
    matmul_roles: dict[str, float] | None = None  # the blocks' roles summed; None unless every block has them
    span_us: float = 0.0  # sum of the blocks' spans
    idle_us: float = 0.0  # sum of the blocks' device idle time
    launch_bound: bool | None = None  # idle > half the span over the device blocks; None without any
    idle_by_cause: dict[str, float] | None = None  # the blocks' idle causes summed; None unless every block has them

    efficiency: Efficiency | None = None  # the sum over blocks
    efficiency_by_category: dict[str, Efficiency] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class Coverage:
    """How much device time could be tied to host ops and to blocks, and what the rest is."""

    device_us: float
    linked_us: float
    in_blocks_us: float
    unlinked_us: float
    device_events: int
    linked_events: int
    # ``unlinked_us`` by why (keys UNLINKED_REASONS, all present, summing to it): busy µs of the unlinked events.
    unlinked_by_reason: dict[str, float]
    # Fused attention kernels that no block owns (linked or not): their number, busy µs (the same first-starter
    # shares as ``in_blocks_us``) and short names -> counts, the most frequent first. Names are trace data.
    attention_outside_kernels: int
    attention_outside_us: float
    attention_outside_names: dict[str, int]


COMPILED_OUTSIDE_REASON = ("torch.compile runs these regions' code with no op naming an attention call, and no "
                           "attention scope is around them: their attention calls, if any, make no block. Record "
                           "with with_stack=True (nn.Module slices) or wrap the attention in a record_function "
                           "range named like attention.")


@dataclass(slots=True, kw_only=True)
class CompiledOutside:
    """CPU-only traces: the outermost compiled regions (``Torch-Compiled Region``) that no block covers, whose
    code the trace does not show (tracekit.analysis.blocks.compiled; issue 38). ``host_us`` is their host time
    (duration, children included: a region's kernels are its graph call's self time); ``names`` region name ->
    count, the most frequent first (trace data); ``batched_products`` the extern bmm/baddbmm calls inside them
    (compiled eager attention runs two per call)."""

    regions: int
    host_us: float
    names: dict[str, int]
    batched_products: int
    reason: str

    def check(self) -> None:
        expect(self.regions > 0 and sum(self.names.values()) == self.regions,
               "compiled regions outside blocks: name counts != regions")
        expect(self.host_us >= -EPS_US and self.batched_products >= 0,
               "compiled regions outside blocks: negative time or products")
        expect(bool(self.reason), "compiled regions outside blocks without a reason")


@dataclass(slots=True, kw_only=True)
class StepFigures:
    """One ``ProfilerStep#N`` of a trace as a whole (tracekit.analysis.totals.whole_steps), in µs: all the
    device work of the step (the events its host ops launched, and those its attention blocks own), not only
    attention's. ``span_us`` follows the blocks' rule, with the ProfilerStep range as the host side."""

    step: int
    busy_us: float  # the union of the step's device events
    span_us: float  # first start to last end, host range and device events
    attention_us: float  # the union of the events the step's attention blocks own: a part of ``busy_us``
    # The span's window, µs from the trace start (TraceSummary.origin_ns); None only on hand-built results.
    start_us: float | None = None
    end_us: float | None = None

    def check(self, where: str) -> None:
        expect(self.attention_us >= -EPS_US, f"{where}: negative attention time")
        if self.start_us is not None and self.end_us is not None:
            expect(close(self.end_us - self.start_us, self.span_us, 2, self.end_us),
                   f"{where}: end {self.end_us} - start {self.start_us} != span {self.span_us}")
        expect(self.attention_us <= self.busy_us or close(self.attention_us, self.busy_us, 2, self.busy_us),
               f"{where}: attention {self.attention_us} µs beyond the step's busy {self.busy_us} µs")
        expect(self.busy_us <= self.span_us or close(self.busy_us, self.span_us, 2, self.span_us),
               f"{where}: busy {self.busy_us} µs beyond the step's span {self.span_us} µs")


@dataclass(slots=True, kw_only=True)
class TraceSummary:
    """Per input file: the header facts and its whole-trace denominators."""

    source: str
    gpus: list[str]
    pytorch: str | None
    runtime: str | None
    time_base: TimeBase
    steps: list[int]
    events: int
    base_us: float  # device busy time, or host time of the top-level ops
    warnings: list[str]
    damaged: bool
    external_ids_trusted: bool
    shapes: list[Shape] = field(default_factory=list)  # (op, input dims) of attention-like ops, as recorded
    rank: int | None = None  # ``distributedInfo.rank`` from the trace's header, when recorded
    graphs: GraphSummary | None = None  # CUDA/HIP graphs; None only on hand-built results
    # Each ProfilerStep as a whole, by step number ([] on CPU-only traces, and on traces without steps).
    step_figures: list[StepFigures] = field(default_factory=list)
    # Each ProfilerStep outside its attention blocks (tracekit.analysis.rest; [] as step_figures is).
    step_rest: list[StepRest] = field(default_factory=list)
    # The trace start: the smallest ``ts`` (integer ns, the file's own clock) of the events tracekit reads from it
    # (tracekit.analysis.clock.trace_origin); every start_us/end_us of its blocks and steps counts from it.
    origin_ns: int = 0


@dataclass(slots=True, kw_only=True)
class RankRow:
    """One rank (one trace file of a distributed run): its attention time, split, span and idle (µs)."""

    rank: int
    source: str  # the file, relative to the folder given
    blocks: int
    total_us: float
    categories: dict[str, float]
    span_us: float
    idle_us: float
    base_us: float  # the trace's device busy time (host time on CPU-only traces)
    attention_share: float | None
    launch_bound: bool | None


@dataclass(slots=True, kw_only=True)
class RankSpread:
    """Attention time across ranks: the slowest rank is the straggler the others wait for at each collective."""

    min_us: float
    median_us: float
    max_us: float
    fastest_rank: int
    slowest_rank: int
    slowest_over_median_us: float  # max - median
    slowest_over_median_pct: float | None  # of the median; None when the median is 0
    max_over_min: float | None  # None when the fastest rank has no attention time


@dataclass(slots=True, kw_only=True)
class RankView:
    """One row per rank, by rank number, and the spread across them (tracekit.results.ranks)."""

    rank_from: RankFrom
    rows: list[RankRow]
    spread: RankSpread
    note: str = ""  # why the numbers came from the file order, when they did

    def check(self) -> "RankView":
        """Raise InvariantError unless every row adds up and the spread is the rows' own."""
        nc = len(CATEGORIES)
        ranks = [r.rank for r in self.rows]
        expect(bool(ranks), "a rank view without ranks")
        expect(ranks == sorted(set(ranks)), f"ranks not unique and in order: {ranks}")
        for r in self.rows:
            expect(set(r.categories) == set(CATEGORIES), f"rank {r.rank}: category keys {sorted(r.categories)}")
            expect(close(sum(r.categories.values()), r.total_us, nc * max(1, r.blocks), r.total_us),
                    f"rank {r.rank}: categories do not sum to its total")
            if r.launch_bound is not None:
                expect(close(r.total_us + r.idle_us, r.span_us, 2 * max(1, r.blocks), r.span_us),
                        f"rank {r.rank}: busy + idle != span")
        totals = sorted(r.total_us for r in self.rows)
        sp = self.spread
        expect(sp.min_us == totals[0] and sp.max_us == totals[-1], "spread min/max are not the rows' own")
        expect(totals[0] <= sp.median_us <= totals[-1], "median outside the ranks' range")
        by_rank = {r.rank: r.total_us for r in self.rows}
        expect(by_rank.get(sp.slowest_rank) == sp.max_us and by_rank.get(sp.fastest_rank) == sp.min_us,
                "slowest/fastest rank do not hold the max/min")
        expect(close(sp.max_us - sp.median_us, sp.slowest_over_median_us, 1, sp.max_us), "slowest - median mismatch")
        return self


@dataclass(slots=True, kw_only=True)
class Attribution:
    """Where attention time goes, for one trace or a folder of them."""

    source: str
    time_base: TimeBase  # MIXED when a folder holds both GPU and CPU-only traces
    traces: list[TraceSummary]
    blocks: list[BlockResult]
    totals: Totals
    coverage: Coverage | None
    # Every device event (host op, on CPU-only traces) that a block owns: (name, category) -> (count, µs).
    # Device events count their full duration; host ops their self time.
    kernels: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)
    # Device events placed in a block, counted once per placement and once per distinct event: equal unless
    # an event was placed twice (check() asserts they are). Sums over the parts when results are merged.
    device_events_owned: int = 0
    device_events_owned_distinct: int = 0
    # About the inputs as a whole (files skipped or read once for two names), for stderr and reports.
    warnings: list[str] = field(default_factory=list)
    incomplete: bool = False  # an input file could not be read: the figures miss its share
    # What to do next (tracekit.analysis.hints; docs/attribution.md, "Hints"); [] when turned off or on CPU-only traces.
    hints: list[Hint] = field(default_factory=list)
    # The per-kernel facts the hint rules read, kept so that a folder's files merge before the rules run.
    hint_facts: HintFacts | None = field(default=None, repr=False)
    # ``kernels`` split by the owning block's step (None outside any step): the diff's per-step noise of a kernel.
    kernels_by_step: dict[tuple[str, str, int | None], tuple[int, float]] = field(default_factory=dict)
    device: DeviceInfo | None = None  # the accelerator and its peaks (the roof of the efficiency figures)
    # A folder of runs (``--by run``, tracekit.run.runs): each run's own result; this one merges them, its blocks'
    # ``source`` renamed to their run. Empty for a single run.
    runs: list[RunResult] = field(default_factory=list)
    # One row per rank and their spread, for a folder of two or more traces (tracekit.results.ranks); None otherwise.
    ranks: RankView | None = None
    # The grouping that to_dataframe() and the notebook's HTML table use when none is named (analyze(..., by=)).
    default_by: str = field(default="kind", repr=False)
    # The latency measured outside the profiler, read from measured.json beside the traces (tracekit.run.measured);
    # None without one. A merge of several runs has none: each run keeps its own.
    measured: Measured | None = None
    # CPU-only traces: compiled regions no block covers, listed under "attention outside blocks" (issue 38); None
    # when there are none.
    compiled_outside: CompiledOutside | None = None
    # The report's "What if" section (issue 39): ``tracekit whatif``'s prediction on the fastest calibrated backend,
    # made only where the report or the TensorBoard tab asks (tracekit.run.api.analyze_for_report), never by
    # ``tracekit attribute``; None otherwise. Never in the JSON: a prediction is not a measurement.
    whatif: WhatIf | None = field(default=None, repr=False)
    # ``--by op`` (issue 42): one row per (op, recorded shapes, dtype) the FLOP formulas count, made only where asked
    # (``analyze(..., by="op")``: tracekit.analysis.ops); None otherwise, and then absent from the JSON.
    ops: list[OpRow] | None = field(default=None, repr=False)
    # Serving traces (issue 44): the device time split into prefill, decode and mixed iterations, plus ``outside``
    # (tracekit.analysis.stages; tracekit.results.stages); None where the trace shows no serving iteration, and
    # then absent from the JSON.
    stages: list[StageRow] | None = None

    def to_dataframe(self, by: str | None = None) -> Any:
        """A pandas DataFrame (``pip install 'tracekit[notebook]'``): one row per ``by`` = "block", "kind",
        "layer", "step", "kernel" or "op" (the op table: analyze with by="op"); times in µs, the same sums as the
        JSON (tracekit.results.notebook)."""
        return show("attribution_frame", self, by or self.default_by)

    def __repr__(self) -> str:
        """One line, not the dataclass's thousands of characters: the figures live in to_dataframe()."""
        return str(show("attribution_repr", self))

    def _repr_html_(self) -> str:
        return str(show("attribution_html", self, self.default_by))

    @property
    def top_kernels(self) -> list[tuple[str, str, int, float]]:
        """The 15 costliest kernels in blocks: (name, category, count, µs)."""
        rows = sorted(((n, c, k, us) for (n, c), (k, us) in self.kernels.items()), key=lambda r: (-r[3], r[0]))
        return rows[:15]

    @property
    def damaged(self) -> bool:
        return self.incomplete or any(t.damaged for t in self.traces)

    def check(self, arrays: bool = True) -> "Attribution":
        """Raise InvariantError unless every figure adds up. Returns self for chaining.

        ``arrays=False`` leaves out the element-by-element checks of each block's per-event arrays (its device
        intervals and idle gaps: the timeline's data, O(events), a third of the cost of check() on a 1 GB trace).
        Their lengths and every figure are still checked; the CLI checks the arrays in full where it writes them
        (the report, ``--with-intervals``), and the tests always do."""
        for b in self.blocks:
            _check_block(b, self.time_base, arrays)
        _check_totals(self.blocks, self.totals)
        self._check_kernels()
        if self.coverage is not None:
            self._check_coverage(self.coverage)
        if self.compiled_outside is not None:
            self.compiled_outside.check()
        self._check_parts()
        self._check_members()
        self._check_steps()
        self._check_hints()
        return self

    def _check_members(self) -> None:
        """The parts that check themselves: block efficiencies, the device, the measured latency, graphs."""
        for e in (b.efficiency for b in self.blocks):
            if e is not None:
                e.check()
        if self.device is not None:
            self.device.check()
        if self.measured is not None:
            self.measured.check()
        if self.whatif is not None:
            self.whatif.check()
        if self.ops is not None:
            check_ops(self.ops, self.totals.total_us)
        if self.stages is not None:
            check_stages(self.stages, sum(t.base_us for t in self.traces))
        for t in self.traces:
            if t.graphs is not None:
                t.graphs.check(f"{t.source}: graphs")

    def _check_hints(self) -> None:
        """The hint facts, and each hint: a saving is part of the blocks' time (an upper bound or less), never more."""
        for g in (self.hint_facts or {}).values():
            g.check()
        for h in self.hints:
            expect(h.saving_pct is None or -REL <= h.saving_pct <= 100 + 0.05, f"hint {h.rule}: saving {h.saving_pct}%")
            expect(h.saving_us is None or h.saving_us >= 0, f"hint {h.rule}: negative saving")
            h.check()  # the saving is its counted kernels' time; an overlap's union is at most their sum and busy time

    def _check_kernels(self) -> None:
        """Each device event is owned once; the per-step kernel tables add up to the kernel table."""
        expect(self.device_events_owned == self.device_events_owned_distinct,
               "a device event was counted in two blocks")
        if not self.kernels_by_step:
            return
        summed: dict[tuple[str, str], list[float]] = {}
        for (name, cat, _), (k, us) in self.kernels_by_step.items():
            v = summed.setdefault((name, cat), [0, 0.0])
            v[0] += k
            v[1] += us
        expect(summed.keys() == self.kernels.keys() and all(
            summed[key][0] == k and close(summed[key][1], us, len(self.blocks) + 1)
            for key, (k, us) in self.kernels.items()), "per-step kernel tables do not add up to the kernel table")

    def _check_steps(self) -> None:
        """Each trace's whole steps are its own steps, once each; per step number (ranks of a run summed), the
        attention part of the steps is at most the step's blocks' busy time (a union is at most its parts' sum)."""
        attention: dict[int, float] = {}
        for t in self.traces:
            nums = [f.step for f in t.step_figures]
            expect(len(nums) == len(set(nums)) and set(nums) <= set(t.steps), f"{t.source}: whole steps {nums}")
            for f in t.step_figures:
                f.check(f"{t.source}: step {f.step}")
                attention[f.step] = attention.get(f.step, 0.0) + f.attention_us
            for r in t.step_rest:
                r.check(f"{t.source}: step {r.step} outside attention")
        for s, us in attention.items():
            blocks = [b.total_us for b in self.blocks if b.step == s]
            expect(us <= sum(blocks) or close(us, sum(blocks), 2 * len(blocks) + 2, us),
                   f"step {s}: attention {us} µs beyond its blocks' busy {sum(blocks)} µs")

    def _check_coverage(self, cv: Coverage) -> None:
        n = max(1, len(self.blocks))
        expect(close(cv.linked_us + cv.unlinked_us, cv.device_us, 4), "linked + unlinked != device time")
        expect(cv.in_blocks_us <= cv.device_us or close(cv.in_blocks_us, cv.device_us, n),
               "more time in blocks than on the device")
        expect(sum(b.kernels for b in self.blocks) == self.device_events_owned, "block kernel counts != events owned")
        parts = max(1, len(self.traces))  # each trace's figures are rounded on their own before a merge sums them
        by_reason = cv.unlinked_by_reason
        expect(list(by_reason) == list(UNLINKED_REASONS), f"unlinked reason keys {list(by_reason)}")
        expect(all(v >= -EPS_US for v in by_reason.values()), "negative unlinked time for a reason")
        expect(close(sum(by_reason.values()), cv.unlinked_us, (len(UNLINKED_REASONS) + 2) * parts, cv.device_us),
               f"unlinked by reason sums to {sum(by_reason.values())}, not unlinked {cv.unlinked_us}")
        expect(cv.attention_outside_kernels >= 0 and cv.attention_outside_us >= -EPS_US,
               "negative attention outside blocks")
        expect(sum(cv.attention_outside_names.values()) == cv.attention_outside_kernels,
               "attention outside blocks: name counts != kernels")
        expect(cv.attention_outside_kernels <= cv.device_events - self.device_events_owned,
               "more attention kernels outside blocks than device events outside blocks")
        expect(cv.attention_outside_us <= cv.device_us - cv.in_blocks_us
               or close(cv.attention_outside_us, cv.device_us - cv.in_blocks_us, 3 * parts, cv.device_us),
               "more attention time outside blocks than device time outside blocks")

    def _check_parts(self) -> None:
        """The runs and ranks this result merges hold its blocks and time, no more and no less."""
        t, n = self.totals, max(1, len(self.blocks))
        for run in self.runs:
            run.attribution.check()
        expect(sum(r.attribution.totals.blocks for r in self.runs) in (0, t.blocks), "runs' blocks != merged blocks")
        if self.ranks is not None:
            self.ranks.check()
            rs = self.ranks.rows
            expect(sum(r.blocks for r in rs) == t.blocks, "rank rows' blocks != totals.blocks")
            expect(close(sum(r.total_us for r in rs), t.total_us, n, t.total_us), "rank rows do not sum to the total")


@dataclass(slots=True, kw_only=True)
class RunResult:
    """One run of a folder of runs: its name (the folder relative to the root, or the file name) and result."""

    name: str
    attribution: Attribution


def _check_block(b: BlockResult, time_base: TimeBase, arrays: bool = True) -> None:
    """A block's categories sum to its time; a device block's busy + idle is its span, launch-bound by the rule."""
    expect(b.categories.keys() == _CATEGORY_SET, lambda: f"block {b.name}: category keys {sorted(b.categories)}")
    s = sum(b.categories.values())
    expect(close(s, b.total_us, len(CATEGORIES)),
           lambda: f"block {b.name}: categories sum {s} != total {b.total_us}")
    expect(all(map(ge, b.categories.values(), repeat(-EPS_US))), lambda: f"block {b.name}: negative category")
    if b.matmul_roles is not None:
        check_roles(b.matmul_roles, b.categories[Category.MATMUL], f"block {b.name}")
    if b.evidence is not None:
        b.evidence.check(f"block {b.name}")
    if b.layer is not None:
        b.layer.check(b.total_us, f"block {b.name}")
    if b.idle_by_cause is not None:
        _check_idle_causes(b.idle_by_cause, b.idle_us, f"block {b.name}", 1)
    if b.alloc_peak_bytes is not None:  # a peak comes from the same memory events as the allocated sum
        expect(b.alloc_peak_bytes >= 0 and b.alloc_bytes is not None,
               lambda: f"block {b.name}: peak {b.alloc_peak_bytes}")
    if b.start_us is not None and b.end_us is not None:
        _check_window(b, arrays)
    _check_busy_idle(b, time_base)


def _check_busy_idle(b: BlockResult, time_base: TimeBase) -> None:
    """A CPU-only block has no idle time; a device block's busy + idle is its span, launch-bound by the rule."""
    if b.launch_bound is None:
        expect(time_base != TimeBase.DEVICE, lambda: f"block {b.name}: device block without launch_bound")
        expect(b.idle_us == 0.0, lambda: f"block {b.name}: idle time on a CPU-only block")
        expect(not any((b.idle_by_cause or {}).values()), lambda: f"block {b.name}: idle causes on a CPU-only block")
        return
    expect(close(b.total_us + b.idle_us, b.span_us, 2),
           lambda: f"block {b.name}: busy {b.total_us} + idle {b.idle_us} != span {b.span_us}")
    expect(b.idle_us >= -EPS_US, lambda: f"block {b.name}: negative idle {b.idle_us}")
    expect(launch_bound_holds(b.launch_bound, b.idle_us, b.span_us, near(2, b.span_us)),
           lambda: f"block {b.name}: launch_bound {b.launch_bound} but idle {b.idle_us} of span {b.span_us}")


def _check_window(b: BlockResult, arrays: bool = True) -> None:
    """The block's window is its span (end - start == span_us), holds its device intervals, and on the device its
    busy time fits in it."""
    assert b.start_us is not None and b.end_us is not None
    expect(close(b.end_us - b.start_us, b.span_us, 2, b.end_us),
           lambda: f"block {b.name}: end {b.end_us} - start {b.start_us} != span {b.span_us}")
    if b.launch_bound is not None:
        expect(b.total_us <= b.span_us + near(2, b.span_us),
               lambda: f"block {b.name}: busy {b.total_us} beyond span {b.span_us}")
    iv = b.intervals
    if iv is not None:
        expect(len(iv) == b.kernels, lambda: f"block {b.name}: {len(iv)} intervals for {b.kernels} kernels")
        if arrays:
            iv.check(b.start_us, b.end_us, f"block {b.name}")
        else:
            expect(len(iv.end_ns) == len(iv) == len(iv.category) == len(iv.stream),
                   lambda: f"block {b.name}: interval arrays of different lengths")
        expect(not iv.names or len(iv.names) == len(iv),
               lambda: f"block {b.name}: {len(iv.names)} kernel names for {len(iv)} intervals")
    gaps = b.idle_gaps
    if gaps is not None:
        if arrays:
            gaps.check(b, f"block {b.name}")
        else:
            expect(len(gaps.flat) % GAP_STRIDE == 0, lambda: f"block {b.name}: idle gaps array of {len(gaps.flat)}")
    if b.host_ops is not None:
        b.host_ops.check(b.start_us, b.end_us, f"block {b.name} (host ops)")
    for pid, tid, s, e in b.host_spans:
        # (not inside the window: a host op may run ahead of the device, and a capture's window is an instant)
        expect(s <= e, lambda: f"block {b.name}: host span {s}..{e} µs on {pid}/{tid} ends before it starts")


def _check_totals(blocks: list[BlockResult], t: Totals) -> None:
    """The totals are the blocks' sums, each within its roundings."""
    n = max(1, len(blocks))
    expect(close(sum(b.total_us for b in blocks), t.total_us, n), "totals.total_us is not the sum of blocks")
    for c in CATEGORIES:
        expect(close(sum(b.categories[c] for b in blocks), t.categories[c], n, t.total_us),
               f"totals.{c} is not the sum of blocks")
    expect(t.blocks == len(blocks), "totals.blocks != number of blocks")
    if t.matmul_roles is not None:
        _check_total_roles(blocks, t.matmul_roles, t, n)
    expect(close(sum(b.span_us for b in blocks), t.span_us, n, t.span_us), "totals.span_us is not the sum of blocks")
    expect(close(sum(b.idle_us for b in blocks), t.idle_us, n, t.span_us), "totals.idle_us is not the sum of blocks")
    if t.idle_by_cause is not None:
        _check_total_idle_causes(blocks, t.idle_by_cause, t, n)
    _check_total_launch_bound(blocks, t, n)
    if t.attention_share is not None:
        expect(-REL <= t.attention_share <= 1 + REL, f"attention share {t.attention_share} outside [0, 1]")


def _check_total_roles(blocks: list[BlockResult], roles: dict[str, float], t: Totals, n: int) -> None:
    """The totals' matmul roles split their matmul time and are the blocks' sums (every block has roles)."""
    check_roles(roles, t.categories[Category.MATMUL], "totals")
    expect(all(b.matmul_roles is not None for b in blocks), "totals have matmul roles, a block not")
    for r in MATMUL_ROLES:
        expect(close(sum((b.matmul_roles or {}).get(r, 0.0) for b in blocks), roles[r], n, t.total_us),
               f"totals.matmul_roles.{r} is not the sum of blocks")


def _check_total_idle_causes(blocks: list[BlockResult], causes: dict[str, float], t: Totals, n: int) -> None:
    """The totals' idle causes partition their idle time and are the blocks' sums (every block has causes)."""
    _check_idle_causes(causes, t.idle_us, "totals", n)
    expect(all(b.idle_by_cause is not None for b in blocks), "totals have idle causes, a block not")
    for c in IDLE_CAUSES:
        expect(close(sum((b.idle_by_cause or {})[c] for b in blocks), causes[c], n, t.span_us),
               f"totals.idle_by_cause.{c} is not the sum of blocks")


def _check_total_launch_bound(blocks: list[BlockResult], t: Totals, n: int) -> None:
    """Launch-bound by the rule over the device blocks' idle and span; unset without device blocks."""
    dev = [b for b in blocks if b.launch_bound is not None]
    if not dev:
        expect(t.launch_bound is None, "totals.launch_bound set without device blocks")
        return
    ds, di = sum(b.span_us for b in dev), sum(b.idle_us for b in dev)
    expect(launch_bound_holds(t.launch_bound, di, ds, near(2 * n, ds)),
           f"totals.launch_bound {t.launch_bound} but idle {di} of span {ds}")


def _check_idle_causes(causes: dict[str, float], idle_us: float, where: str, blocks: int) -> None:
    """The idle causes partition ``idle_us``: every cause key, none negative, summing to it (each term rounded)."""
    expect(list(causes) == _IDLE_CAUSE_LIST, lambda: f"{where}: idle cause keys {list(causes)}")
    expect(all(map(ge, causes.values(), repeat(-EPS_US))), lambda: f"{where}: negative idle cause")
    expect(close(sum(causes.values()), idle_us, (len(IDLE_CAUSES) + 1) * blocks, idle_us),
           lambda: f"{where}: idle causes sum {sum(causes.values())} != idle {idle_us}")
