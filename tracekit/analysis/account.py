"""Account each attention block's time to the six categories (docs/attribution.md, "Time").

GPU traces use device busy time: where device events of one block overlap (several
streams), each instant is given to the event that started first, so categories sum
exactly to the busy union. CPU-only traces use host self time of the profiler's op
tree, the same quantity as ``torch.profiler``'s ``self_cpu_time_total``.
"""

from __future__ import annotations

import re
from array import array
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate, chain, compress, groupby, repeat
from operator import eq, ne
from typing import TYPE_CHECKING

from ..model import ANNOTATION, MODULE, OP, DeviceEvent, GraphLaunch, HostEvent, Trace
from ..results.attribution import CATEGORIES, Attribution, BlockResult, IdleGaps, Intervals
from ..results.efficiency import HOST_ONLY, Efficiency
from ..vocab import (
    IDLE_CAUSES, MATMUL_ROLES, Category, FoundBy, MatmulRole, TimeBase, compact_kernel_name, is_launch_bound,
)
from .allocations import block_allocations
from .blocks.discovery import Block
from .blocks.kernels import find_kernel_blocks
from .busy import DeviceColumns, block_window, device_busy, first_come, window
from .classify import Classifier
from .clock import CATEGORY_INDEX, host_intervals, host_spans, relative_us
from .flops import block_efficiency, device_info
from .graphs import replay_threads
from .idle import IdleSplitter, zero_causes
from .rest import blockless_steps, step_rest
from .stepindex import step_index
from .link import NONE, Links, link
from .roles import GemmRoles, RoleFinder
from .totals import block_totals, device_coverage, over_steps, sorted_results, trace_summary, whole_steps

if TYPE_CHECKING:
    import numpy as np

_INSTANCE = re.compile(r"(?<=[._\[:/#-])\d+|(?<=layer)\d+|(?<=layers)\d+|(?<=block)\d+")


@lru_cache(maxsize=4096)
def block_kind(name: str, found_by: FoundBy) -> str:
    """Fold instance numbers so that ``layer3.attention`` and ``layer4.attention`` group (memoised: a trace's blocks
    repeat few names, step after step)."""
    if found_by == FoundBy.MODULE:
        return re.sub(r"_\d+$", "", name)
    if found_by == FoundBy.FUSED_KERNEL:
        return name
    return _INSTANCE.sub("*", name)


def ordinals(blocks: list[Block]) -> list[int]:
    """Position of each block in its step and phase by start time; a backward block takes its forward
    block's (backward runs layers in reverse, and the pair must read as one call)."""
    ordinal = [0] * len(blocks)
    idx = sorted(range(len(blocks)),
                 key=lambda b: (blocks[b].step is None, blocks[b].step or 0, blocks[b].phase, blocks[b].ts))
    for _, g in groupby(idx, key=lambda b: (blocks[b].step, blocks[b].phase)):
        for k, b in enumerate(g):
            ordinal[b] = k
    for b, blk in enumerate(blocks):
        if blk.forward is not None:
            ordinal[b] = ordinal[blk.forward]
    return ordinal


def device_categories(tr: Trace, links: Links, clf: Classifier) -> list[Category]:
    """Each device event's category, by its name, kind and launching op."""
    host, dev = tr.host, tr.device
    leaf, launcher = links.device_leaf, links.launcher
    cats: list[Category] = []
    memo: dict[tuple[str, str, str | None], Category] = {}  # (the classifier caches so too; this saves its call)
    for j, d in enumerate(dev):
        lf = leaf[j]
        la = launcher[lf] if lf != NONE else NONE
        key = (d.name, d.kind, host[la].name if la != NONE else None)
        cat = memo.get(key)
        if cat is None:
            cat = memo[key] = clf.device(*key)
        cats.append(cat)
    return cats


@dataclass(slots=True, kw_only=True)
class DeviceTime:
    """The whole device's busy time, measured once: what block figures, coverage and step figures share."""

    members: dict[int, list[int]]  # block -> its device events, in event order
    free_at: Sequence[int]  # per device event: when the device finished the work queued before it (-1: never busy)
    share: Sequence[int]  # per device event: its first-come share of the device's busy time, ns
    total_ns: int  # the device's busy union
    in_blocks_ns: int  # the part of it that blocks own
    columns: DeviceColumns  # every event's start and end, read once for the figures of every block


def own_device_events(tr: Trace, links: Links, blocks: list[Block], owner: list[int],
                      cats: list[Category]) -> list[int]:
    """Each device event's block: its launching host event's, then the blocks only the kernels show."""
    dev_owner = [owner[lf] if lf != NONE else NONE for lf in links.device_leaf]
    find_kernel_blocks(tr, links, blocks, cats, dev_owner)
    return dev_owner


def measure_device(tr: Trace, dev_owner: list[int]) -> DeviceTime:
    """Busy time of the whole device (each instant once), and which events each block owns."""
    members: dict[int, list[int]] = defaultdict(list)
    for j, b in enumerate(dev_owner):
        if b != NONE:
            members[b].append(j)
    total_busy, share, free_at, columns = device_busy(tr.device)
    in_blocks_ns = sum(compress(share, map(ne, dev_owner, repeat(NONE))))
    return DeviceTime(members=members, free_at=free_at, share=share, total_ns=total_busy, in_blocks_ns=in_blocks_ns,
                      columns=columns)


def account_device_blocks(tr: Trace, links: Links, blocks: list[Block], cats: list[Category], time: DeviceTime,
                          graph_launches: Sequence[GraphLaunch] = (),
                          origin: int = 0) -> tuple[list[BlockResult], DeviceBlocks]:
    """Each block's figures (device busy time split by category and matmul role, span, idle, memory), in block
    order, and the walk that holds each owned event's share of its block's busy time."""
    idle = IdleSplitter(tr, graph_launches, links.device_call, time.columns)
    walk = DeviceBlocks(tr, links, cats, time.free_at, idle, origin)
    (alloc, peaks), ordinal = block_allocations(tr, blocks, device_side=True), ordinals(blocks)
    results = walk.blocks(blocks, time, ordinal, alloc)
    for r, peak in zip(results, peaks):
        r.alloc_peak_bytes = peak
    return results, walk


def add_efficiency(tr: Trace, links: Links, cats: list[Category], dev_owner: list[int], time: DeviceTime,
                   walk: DeviceBlocks, results: list[BlockResult]) -> None:
    """Each block's FLOP/byte efficiency, overall and by category (tracekit.analysis.flops)."""
    effs, eff_cats = block_efficiency(tr, links, len(results), dev_owner, cats, walk.dev_share,
                                      time.members.values(), roles=GemmRoles(tr, walk.roles))
    for b, r in enumerate(results):
        r.efficiency, r.efficiency_by_category = effs[b], eff_cats[b]


def device_result(tr: Trace, links: Links, cats: list[Category], blocks: list[Block], dev_owner: list[int],
                  time: DeviceTime, walk: DeviceBlocks, results: list[BlockResult], origin: int = 0) -> Attribution:
    """The device trace's Attribution: blocks sorted, totals, coverage, the kernel table and the step figures."""
    top, members = walk.top, time.members.values()
    summary = trace_summary(tr, links, TimeBase.DEVICE, time.total_ns)
    index = step_index(tr, links, blocks, dev_owner)  # one walk of each event list for both per-step figures
    summary.step_figures = whole_steps(tr, index, time.free_at, origin)
    summary.step_rest = step_rest(tr, links, cats, index)
    if not blocks:  # (issue 42: a trace without attention still says why its device idled, and on what it ran)
        blockless_steps(tr, cats, index, summary.step_rest, walk.idle, time.free_at)
    return Attribution(
        source=tr.info.source, time_base=TimeBase.DEVICE, traces=[summary],
        blocks=sorted_results(results), totals=block_totals(results, time.in_blocks_ns, time.total_ns),
        coverage=device_coverage(tr, links, time.share, time.total_ns, time.in_blocks_ns, cats, dev_owner),
        kernels=over_steps(top), kernels_by_step={k: (n, ns / 1000) for k, (n, ns) in top.items()},
        device_events_owned=sum(map(len, members)), device_events_owned_distinct=len(set().union(*members)),
        device=device_info(tr.info.gpus, True))


@dataclass(slots=True, kw_only=True)
class _Grouped:
    """Every block's device events as columns, grouped by block (block order; each block's in event order), so
    that a block's figures are slices of them: read, sorted and split once for all blocks, not block by block."""

    bounds: list[int]  # block b's events sit at [bounds[b], bounds[b + 1])
    block: list[int]  # each event's block
    js: list[int]  # the events' indices
    evs: list[DeviceEvent]
    starts: array  # 'q', ns
    ends: array  # 'q', ns
    order: list[int]  # per block, its events' positions (from its first) by start, stably (busy.start_order's)
    share: list[int]  # each event's first-come share of its block's busy time (busy.busy_time's split)
    cats: list[Category]
    category: bytes  # each event's index into CATEGORIES
    stream: array  # 'q'
    names: list[str]
    by_start: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # start, end, block, index by (block, start)
    extent: list[tuple[int, int, int] | None]  # per block: first start, last end, the first starter (None: no events)
    arrays: tuple[np.ndarray, np.ndarray]  # ``block`` and ``share`` as int64 arrays


def _group(tr: Trace, cats: list[Category], time: DeviceTime, n_blocks: int) -> _Grouped:
    """The blocks' events as :class:`_Grouped` columns, gathered from the device's columns (busy.DeviceColumns).
    Each block's start order and busy split come from one sort by (block, start) and one segmented first-come split
    (busy.first_come): array operations over all blocks at once."""
    import numpy as np

    members, dev = time.members, tr.device
    lens = [len(members.get(b, ())) for b in range(n_blocks)]
    js = list(chain.from_iterable(members.get(b, ()) for b in range(n_blocks)))
    bounds = [0, *accumulate(lens)]
    opens = [a for a, z in zip(bounds, bounds[1:]) if z > a]  # (each block's first event, in either order)
    g = np.array(js, np.int64)
    ts, end = time.columns.ts[g], time.columns.end[g]
    block = np.repeat(np.arange(n_blocks), lens)
    perm = np.lexsort((ts, block))  # (stable: ties in event order, as each block's own sort)
    first = np.zeros(len(js), np.bool_)
    first[opens] = True
    share = np.empty(len(js), np.int64)
    share[perm] = first_come(ts[perm], end[perm], first)[1]
    evs = list(map(dev.__getitem__, js))
    gcats = list(map(cats.__getitem__, js))
    by_start = (ts[perm], end[perm], block[perm], g[perm])
    return _Grouped(
        bounds=bounds, block=block.tolist(), js=js, evs=evs, starts=array("q", ts.tobytes()),
        ends=array("q", end.tobytes()), order=(perm - np.repeat(bounds[:-1], lens)).tolist(), share=share.tolist(),
        cats=gcats, category=bytes(map(CATEGORY_INDEX.__getitem__, gcats)),
        stream=array("q", [e.stream for e in evs]), names=[e.name for e in evs],
        by_start=by_start, extent=_extents(by_start, end, opens, n_blocks), arrays=(block, share))


def _extents(by_start: tuple[np.ndarray, ...], end: np.ndarray, opens: list[int],
             n_blocks: int) -> list[tuple[int, int, int] | None]:
    """Per block: its events' first start, last end and the first to start (the lowest index among ties: the
    first of its run in (block, start) order); None for a block without events. ``opens``: where each block with
    events begins, in both the grouped and the sorted order; ``end``: the ends in grouped order."""
    import numpy as np

    extent: list[tuple[int, int, int] | None] = [None] * n_blocks
    if opens:
        ts_s, _, block_s, js_s = by_start
        for b, *ext in zip(block_s[opens].tolist(), ts_s[opens].tolist(), np.maximum.reduceat(end, opens).tolist(),
                           js_s[opens].tolist()):
            extent[b] = tuple(ext)
    return extent


_NARROW = 2**62  # every block's events within this many ns: its sums by category fit int64 (each is <= its busy)


def _by_category(g: _Grouped, n_blocks: int) -> list[dict[str, int]]:
    """Each block's busy ns by category: its events' shares summed per (block, category) in one array operation.
    A block's sum for a category is at most its busy time, at most the width of its events' extent: when every
    block is narrower than 2**62 ns, int64 sums are exact; otherwise (events centuries apart) Python ints, per
    event."""
    import numpy as np

    if not all(e is None or e[1] - e[0] < _NARROW for e in g.extent):
        c = [dict.fromkeys(CATEGORIES, 0) for _ in range(n_blocks)]
        for b, cat, s in zip(g.block, g.cats, g.share):
            c[b][cat] += s
        return c
    nc = len(CATEGORIES)
    sums = np.zeros(n_blocks * nc, np.int64)
    if g.js:
        block, share = g.arrays
        np.add.at(sums, block * nc + np.frombuffer(g.category, np.uint8), share)
    return [dict(zip(CATEGORIES, row)) for row in sums.reshape(n_blocks, nc).tolist()]


class DeviceBlocks:
    """The device blocks' figures, and what the later stages read across all of them: each owned event's share of
    its block's busy time (efficiency, hints) and the kernel table by step."""

    def __init__(self, tr: Trace, links: Links, cats: list[Category], free_at: Sequence[int], idle: IdleSplitter,
                 origin: int = 0) -> None:
        self.tr, self.links, self.cats, self.free_at, self.idle = tr, links, cats, free_at, idle
        self.origin, self.streams = origin, tuple(tr.streams)  # the trace's clock and stream table (clock.py)
        self.replay_threads = replay_threads(tr) if tr.graphs is not None and tr.graphs.launches else frozenset()
        self.roles = RoleFinder(tr, links)
        self.dev_share = [0] * len(tr.device)
        self.top: dict[tuple[str, str, int | None], list] = {}  # (compact kernel name, category, step) -> [count, ns]

    def blocks(self, blocks: list[Block], time: DeviceTime, ordinal: list[int],
               alloc: list[int | None]) -> list[BlockResult]:
        """Every block's figures, in block order: the sums over their events for all blocks at once (one pass over
        columns), each block's window, then the idle splits (all regular ones at once, idle.split_regular)."""
        g = _group(self.tr, self.cats, time, len(blocks))
        if g.js:
            import numpy as np

            share = np.zeros(len(self.tr.device), np.int64)
            share[g.js] = g.share
            self.dev_share = share.tolist()
        c, mr = self._split(g, len(blocks))
        self._kernels(g, blocks)
        spans = [self._span(blk, b, g) for b, blk in enumerate(blocks)]
        regular = self.idle.split_regular(*g.by_start, [(s, e) if e - s > busy else None for _, s, e, busy in spans])
        return [self.block(blk, b, g, spans[b], regular.get(b), c[b], mr[b], ordinal[b], alloc[b])
                for b, blk in enumerate(blocks)]

    def _span(self, blk: Block, b: int, g: _Grouped) -> tuple[list[HostEvent], int, int, int]:
        """Block ``blk``'s roots that measure time, its window (start, end) and its busy ns."""
        host = self.tr.host
        a, z = g.bounds[b], g.bounds[b + 1]
        # (a replay's copied ops have the capture's times: they measure nothing, the device's times do)
        replay = self.replay_threads
        roots = [host[r] for r in blk.roots if host[r].thread not in replay] if replay else [host[r] for r in blk.roots]
        start, end = self._window(blk, g.extent[b], roots)
        return roots, start, end, sum(g.share[a:z])

    def block(self, blk: Block, b: int, g: _Grouped, span: tuple[list[HostEvent], int, int, int],
              regular: tuple[array, dict[str, int]] | None, c: dict[str, int], mr: dict[str, int], ordinal: int,
              alloc: int | None) -> BlockResult:
        """Block ``blk``'s figures from its slice of the columns ``g`` and its ``span`` (roots, window, busy): busy
        time by category (``c``) and role (``mr``), span, idle (``regular``: its split, when done already)."""
        tr = self.tr
        a, z = g.bounds[b], g.bounds[b + 1]
        roots, start, end, busy = span
        span_ns = end - start
        gaps: array | None
        if regular is not None:
            gaps, causes = regular
        else:
            gaps, causes = self._idle(g.js[a:z], start, end, roots, span_ns > busy, g.evs[a:z], g.order[a:z])
        return BlockResult(
            name=blk.name, kind=block_kind(blk.name, blk.found_by), found_by=blk.found_by, step=blk.step,
            ordinal=ordinal, phase=blk.phase, total_us=busy / 1000, span_us=span_ns / 1000,
            idle_us=(span_ns - busy) / 1000, categories={k: v / 1000 for k, v in c.items()}, kernels=z - a,
            host_us=sum(h.dur for h in roots) / 1000 if roots else None, alloc_bytes=alloc, source=tr.info.source,
            matmul_roles=role_us(mr), launch_bound=is_launch_bound(span_ns - busy, span_ns), evidence=blk.evidence,
            recorded=blk.recorded, idle_by_cause={k: v / 1000 for k, v in causes.items()},
            start_us=relative_us(start, self.origin), end_us=relative_us(end, self.origin),
            intervals=Intervals(origin_ns=self.origin, start_ns=g.starts[a:z], end_ns=g.ends[a:z],
                                category=g.category[a:z], stream=g.stream[a:z], streams=self.streams,
                                names=tuple(g.names[a:z])),
            idle_gaps=IdleGaps(origin_ns=self.origin, flat=gaps) if gaps is not None else None,
            host_spans=host_spans(roots, self.tr.threads, self.origin))

    def _idle(self, js: list[int], start: int, end: int, roots: list[HostEvent], idles: bool,
              evs: list[DeviceEvent], order: list[int]) -> tuple[array | None, dict[str, int]]:
        """The block's idle gaps and idle time by cause (tracekit.analysis.idle); none when the device never idles.
        ``evs``: the events of ``js``; ``order``: their positions by start."""
        if not idles:
            return None, zero_causes()
        gaps = array("q")
        return gaps, self.idle.split(js, start, end, {h.thread for h in roots}, gaps,
                                     [(h.ts, h.ts + h.dur) for h in roots], evs, order)

    def _window(self, blk: Block, extent: tuple[int, int, int] | None, roots: list[HostEvent]) -> tuple[int, int]:
        """The block's span (busy.block_window, from its events' first start, last end and the first to start, the
        lowest index among ties, clock.first_event's: ``extent``); with no device work, as in a graph capture, an
        empty one at its start: no span the device could idle in, so never launch-bound."""
        if extent is None:
            return blk.ts, blk.ts
        d0, d_end, first = extent
        return window(d0, d_end, roots, self.free_at[first])

    def _split(self, g: _Grouped, n_blocks: int) -> tuple[list[dict[str, int]], list[dict[str, int]]]:
        """Each block's busy ns by category and its matmul ns by role (each matmul event's share, by its launching
        op's role), in one pass over the columns."""
        c = _by_category(g, n_blocks)
        mr = [dict.fromkeys(MATMUL_ROLES, 0) for _ in range(n_blocks)]
        leaf, launcher, role = self.links.device_leaf, self.links.launcher, self.roles.role
        other_role = str(MatmulRole.OTHER)
        for j, b, s in compress(zip(g.js, g.block, g.share), map(eq, g.cats, repeat(Category.MATMUL))):
            lf = leaf[j]
            la = launcher[lf] if lf != NONE else NONE
            mr[b][role(la if la != NONE else lf) if lf != NONE else other_role] += s
        return c, mr

    def _kernels(self, g: _Grouped, blocks: list[Block]) -> None:
        """The kernel table: (compact kernel name, category, step) -> [count, ns], in the order each row is first
        seen (block order, each block's events in event order); names compacted once per distinct name.

        Over columns: each event's (name, category, step) as one integer key, the keys' counts and first events
        from one np.unique, the events grouped by key with one stable sort; each key's ns an exact Python sum of
        its slice of durations (sums of many durations may pass int64)."""
        import numpy as np

        if not g.js:
            return
        ids = {name: k for k, name in enumerate(dict.fromkeys(g.names))}
        step_ids = {step: k for k, step in enumerate(dict.fromkeys(blk.step for blk in blocks))}
        per_block = np.fromiter([step_ids[blk.step] for blk in blocks], np.int64, len(blocks))
        n = len(g.js)
        key = np.fromiter(map(ids.__getitem__, g.names), np.int64, n) * len(CATEGORIES)
        key += np.frombuffer(g.category, np.uint8)
        key = key * len(step_ids) + per_block[np.array(g.block, np.int64)]
        _, first, inverse, counts = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
        durs = (np.frombuffer(g.ends, np.int64) - np.frombuffer(g.starts, np.int64))[np.argsort(inverse, kind="stable")]
        ends = np.cumsum(counts).tolist()
        flat = durs.tolist()
        ns = [sum(flat[a:z]) for a, z in zip([0, *ends], ends)]
        top, names, cats = self.top, g.names, g.cats
        for k in np.argsort(first, kind="stable").tolist():  # (the keys in the order first seen)
            j = int(first[k])
            row = (compact_kernel_name(names[j]), cats[j], blocks[g.block[j]].step)
            t = top.get(row)
            if t is None:
                t = top[row] = [0, 0]
            t[0] += int(counts[k])
            t[1] += ns[k]


def self_times(tr: Trace, links: Links) -> list[int]:
    """Self time on the op/annotation tree; children are clipped to the parent and to each other."""
    host = tr.host
    n = len(host)
    eff_start = [0] * n
    eff_end = [0] * n
    self_ns = [0] * n
    last_child_end: dict[int, int] = {}
    for i in links.order:
        h = host[i]
        if h.kind < ANNOTATION:
            continue
        p = links.op_parent[i]
        s, e = h.ts, h.ts + h.dur
        if p != NONE:
            s = max(s, eff_start[p], last_child_end.get(p, s))
            e = min(e, eff_end[p])
            e = max(e, s)
        eff_start[i], eff_end[i] = s, e
        self_ns[i] = e - s
        if p != NONE:
            self_ns[p] -= e - s
            last_child_end[p] = e
    return self_ns


def _child_categories(tr: Trace, links: Links, clf: Classifier) -> dict[int, Category]:
    """Host ops whose self-time category a child op decides (``classify.HOST_CHILD_RULES``): op index -> category.

    The public SDPA op on the math path is ``other``: its child ``_scaled_dot_product_attention_math`` shows that
    no fused kernel ran. Children are the profiler's tree (``op_parent``), as for self times.
    """
    host, op_parent = tr.host, links.op_parent
    if not _any_child_rules(tr, clf):
        return {}  # the common case: no such op in the trace, one pass over the names
    out: dict[int, Category] = {}
    for i, h in enumerate(host):
        p = op_parent[i]
        if h.kind != OP or p == NONE or p in out or host[p].kind != OP or not clf.has_child_rules(host[p].name):
            continue
        rule = clf.host_child_rule(host[p].name, h.name)
        if rule is not None:
            out[p] = rule.category
    return out


def _any_child_rules(tr: Trace, clf: Classifier) -> bool:
    """Whether any op in the trace has child rules: looked up once per distinct op name."""
    return any(clf.has_child_rules(n) for n in {h.name for h in tr.host if h.kind == OP})


@dataclass(slots=True, kw_only=True)
class _HostTime:
    """Host self time split over the blocks, per block in block order (ns), and the trace's base time."""

    cats: list[dict[str, int]]  # by category
    roles: list[dict[str, int]]  # matmul self time by the op's role
    covered: list[int]  # self time of the block's ops and ranges
    timed: list[list[tuple[HostEvent, str]]]  # the block's ops with self time, and their categories (timeline)
    ops: dict[tuple[str, str, int | None], list]  # (op name, category, step) -> [count, self ns]
    base: int = 0  # host time of the outermost ops: the denominator of the attention share

    @classmethod
    def empty(cls, n: int) -> _HostTime:
        return cls(cats=[dict.fromkeys(CATEGORIES, 0) for _ in range(n)],
                   roles=[dict.fromkeys(MATMUL_ROLES, 0) for _ in range(n)],
                   covered=[0] * n, timed=[[] for _ in range(n)], ops={})


def _split_host_time(tr: Trace, links: Links, blocks: list[Block], owner: list[int], clf: Classifier) -> _HostTime:
    """One pass over the host events: each op's and range's self time to its block's category and role."""
    host = tr.host
    self_ns = self_times(tr, links)
    by_child = _child_categories(tr, links, clf)
    t = _HostTime.empty(len(blocks))
    c, mr, covered, timed, ops = t.cats, t.roles, t.covered, t.timed, t.ops  # (locals: this loop sees every event)
    roles = RoleFinder(tr, links)
    other, matmul = Category.OTHER, Category.MATMUL
    base = 0
    for i, h in enumerate(host):
        if h.kind < ANNOTATION:
            continue
        base += self_ns[i]
        b = owner[i]
        if b == NONE:
            continue
        cat = (by_child.get(i) or clf.host(h.name)) if h.kind == OP else other
        c[b][cat] += self_ns[i]
        if self_ns[i] > 0:
            timed[b].append((h, cat))
        if cat == matmul:
            mr[b][roles.role(i)] += self_ns[i]
        covered[b] += self_ns[i]
        if h.kind == OP:
            v = ops.setdefault((h.name, cat, blocks[b].step), [0, 0])
            v[0] += 1
            v[1] += self_ns[i]
    t.base = base
    return t


def _add_module_gaps(tr: Trace, links: Links, blocks: list[Block], t: _HostTime) -> None:
    """A module block's time outside any op (Python and the module call) is ``other``; the base counts it where
    no enclosing op's or range's self time already does."""
    host = tr.host
    for b, blk in enumerate(blocks):
        for r in blk.roots:
            if host[r].kind != MODULE:
                continue
            gap = _module_gap(tr, links, r, t.covered[b])
            t.cats[b][Category.OTHER] += gap
            if links.op_parent[r] == NONE:
                t.base += gap


def host_attribution(tr: Trace, links: Links, blocks: list[Block], owner: list[int], clf: Classifier,
                     origin: int = 0, results: list[BlockResult] | None = None) -> Attribution:
    """CPU-only traces: each block's host self time by category (docs/attribution.md, "Time"), and the result.
    ``results``, when given, receives the block results in block order (the layers stage reads them so)."""
    t = _split_host_time(tr, links, blocks, owner, clf)
    _add_module_gaps(tr, links, blocks, t)
    (alloc, peaks), ordinal = block_allocations(tr, blocks, device_side=False), ordinals(blocks)
    results = results if results is not None else []
    results[:] = [_host_block(tr, blk, b, t, ordinal[b], alloc[b], origin) for b, blk in enumerate(blocks)]
    for res, peak in zip(results, peaks):
        res.alloc_peak_bytes = peak
    in_blocks = sum(sum(x.values()) for x in t.cats)
    ops = t.ops
    return Attribution(
        source=tr.info.source, time_base=TimeBase.HOST, traces=[trace_summary(tr, links, TimeBase.HOST, t.base)],
        blocks=sorted_results(results), totals=block_totals(results, in_blocks, t.base), coverage=None,
        kernels=over_steps(ops), kernels_by_step={k: (n, ns / 1000) for k, (n, ns) in ops.items()},
        device=device_info(tr.info.gpus, False))


def _host_block(tr: Trace, blk: Block, b: int, t: _HostTime, ordinal: int, alloc: int | None,
                origin: int) -> BlockResult:
    """One block's result on a CPU-only trace: no device to wait for, so no idle time and no launch_bound."""
    roots = [tr.host[r] for r in blk.roots]
    c = t.cats[b]
    start, end = block_window((), roots)
    return BlockResult(
        name=blk.name, kind=block_kind(blk.name, blk.found_by), found_by=blk.found_by, step=blk.step,
        ordinal=ordinal, phase=blk.phase, total_us=sum(c.values()) / 1000, span_us=(end - start) / 1000,
        start_us=relative_us(start, origin), end_us=relative_us(end, origin),
        host_spans=host_spans(roots, tr.threads, origin),
        host_ops=host_intervals(t.timed[b], origin, start, end, tuple(tr.threads)),
        idle_us=0.0, categories={k: v / 1000 for k, v in c.items()}, kernels=0,
        host_us=sum(h.dur for h in roots) / 1000, alloc_bytes=alloc, source=tr.info.source,
        matmul_roles=role_us(t.roles[b]), efficiency=Efficiency(reason=HOST_ONLY), evidence=blk.evidence,
        recorded=blk.recorded, idle_by_cause=dict.fromkeys(IDLE_CAUSES, 0.0))


def _module_gap(tr: Trace, links: Links, root: int, covered_ns: int) -> int:
    """Time of an ``nn.Module`` block not covered by its ops, clipped to the op or range around it.

    The clip keeps the gap inside the enclosing self time that the share's denominator already counts;
    a module with nothing around it adds its gap to the denominator instead, so the share stays <= 100%.
    """
    h = tr.host[root]
    start, end = h.ts, h.ts + h.dur
    p = links.op_parent[root]
    if p != NONE:
        ph = tr.host[p]
        start, end = max(start, ph.ts), min(end, ph.ts + ph.dur)
    return max(0, end - start - covered_ns)


def role_us(roles_ns: dict[str, int]) -> dict[str, float]:
    """Roles in µs: integer ns sums of the same shares as ``matmul``, so they partition it (check() asserts it)."""
    return {k: v / 1000 for k, v in roles_ns.items()}


def op_self_times(tr: Trace) -> dict[str, tuple[int, float]]:
    """Per op/annotation name: (calls, total self µs) over the whole trace.

    The same quantity as ``torch.profiler``'s ``key_averages()`` ``self_cpu_time_total``; the tests
    use it to cross-check the host attribution against torch's own table.
    """
    links = link(tr)
    self_ns = self_times(tr, links)
    out: dict[str, list] = {}
    for i, h in enumerate(tr.host):
        if h.kind >= ANNOTATION:
            v = out.setdefault(h.name, [0, 0])
            v[0] += 1
            v[1] += self_ns[i]
    return {k: (n, ns / 1000) for k, (n, ns) in out.items()}
