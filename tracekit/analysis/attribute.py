"""Attribute each attention block's time to the six categories.

GPU traces use device busy time: where device events of one block overlap (several
streams), each instant is given to the event that started first, so categories sum
exactly to the busy union. CPU-only traces use host self time of the profiler's op
tree, the same quantity as ``torch.profiler``'s ``self_cpu_time_total``.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from itertools import compress, groupby, repeat
from operator import eq

from .classify import Classifier
from .clock import block_intervals, host_intervals, host_spans, relative_us, trace_origin
from ..results.hints import merge_facts
from .hints import collect_facts, evaluate as evaluate_hints
from ..results.efficiency import HOST_ONLY, Efficiency, merge_device, sum_efficiency, sum_efficiency_maps
from .flops import block_efficiency, device_info
from .graphs import ReplayMap, graph_warnings, replay_threads, record_captured, replay_with_captures, summarize
from .idle import IdleSplitter, zero_causes
from ..io.graphs import find_graphs
from .link import NONE, Links, link
from ..memory import gc_paused
from ..model import ANNOTATION, MODULE, OP, DeviceEvent, GraphLaunch, HostEvent, Trace
from ..results.attribution import (
    IdleGaps,
    CATEGORIES, Attribution, BlockResult, Coverage, Evidence, StepFigures, Totals, TraceSummary, zero_categories,
)
from .roles import GemmRoles, RoleFinder
from .scopes import Block, BlockFinder, find_kernel_blocks, short_kernel_name
from ..vocab import (
    IDLE_CAUSES, MATMUL_ROLES, is_launch_bound, Category, CoreKind, FoundBy, MatmulRole, Phase, TimeBase, compact_kernel_name, is_backward_op,
    is_fused_attention_op, UNLINKED_REASONS,
)

_INSTANCE = re.compile(r"(?<=[._\[:/#-])\d+|(?<=layer)\d+|(?<=layers)\d+|(?<=block)\d+")


def attribute_trace(tr: Trace, scope: str | None = None, classifier: Classifier | None = None,
                    hints: bool = True, captures: Sequence[Trace] = ()) -> Attribution:
    """Link, find blocks and attribute their time (docs/attribution.md).

    ``captures``: traces of the graph captures that ``tr`` replays (``--capture``); a capture in ``tr`` itself
    is found without them. Replayed kernels are mapped to the captured ops first (tracekit.analysis.graphs).

    The cyclic GC is paused throughout: the stages build many small lists and dicts over a model of
    millions of objects, and each full collection would scan all of it (about 15% of the time on a
    200 MB trace). Nothing here builds reference cycles that must be freed before the call returns.
    """
    with gc_paused():
        clf = classifier or Classifier()
        facts = tr.graphs if tr.graphs is not None else find_graphs(tr)
        origin = trace_origin(tr)  # (before replays: copies of captured ops carry the capture's clock)
        tr, replays = replay_with_captures(tr, captures) if facts.any else (tr, ReplayMap())
        links = link(tr)
        cats = _device_categories(tr, links, clf) if tr.device else None
        blocks, owner = BlockFinder(scope).find(tr, links, cats)
        _attach_backward(tr, links, blocks, owner)
        if facts.captures:
            record_captured(tr, links, facts, blocks, owner)
        if tr.device and cats is not None:
            result = _device_attribution(tr, links, blocks, owner, cats, hints=hints, replayed=replays.replayed,
                                         graph_launches=facts.launches, origin=origin)
        else:
            result = _host_attribution(tr, links, blocks, owner, clf, origin)
        result.traces[0].origin_ns = origin
        graphs = result.traces[0].graphs = summarize(tr, facts, replays, cats)
        result.traces[0].warnings.extend(graph_warnings(graphs))
        for g in (result.hint_facts or {}).values():
            g.graph_modes = [str(graphs.mode)]
        # Last, so that rules reading figures other stages add to the blocks (efficiency) see them.
        result.hints = evaluate_hints(result.hint_facts, result.blocks)
        return result


def block_kind(name: str, found_by: FoundBy) -> str:
    """Fold instance numbers so that ``layer3.attention`` and ``layer4.attention`` group."""
    if found_by == FoundBy.MODULE:
        return re.sub(r"_\d+$", "", name)
    if found_by == FoundBy.FUSED_KERNEL:
        return name
    return _INSTANCE.sub("*", name)


def _backward_pairs(tr: Trace) -> list[tuple[int, int]]:
    """(forward op, backward op) host index pairs that autograd recorded.

    ``fwdbwd`` flows first: a flow starts at a forward op and finishes at the backward op run for it
    (each end is matched to the ops starting at that instant on that thread). Then, for backward ops no
    flow reached, ``Sequence number``: a backward op carries its forward op's number and ``Fwd thread id``
    (> 0); forward ops carry their number with id 0. The id is autograd's own thread count, not a tid, so
    a number is matched only where one host thread recorded forward ops with it.
    """
    host = tr.host
    pairs: list[tuple[int, int]] = []
    reached: set[int] = set()
    if tr.flows:
        starts: dict[int, tuple[int, int]] = {}
        finishes: dict[int, tuple[int, int]] = {}
        for fl in tr.flows:
            (starts if fl.start else finishes)[fl.id] = (fl.thread, fl.ts)
        at: dict[tuple[int, int], list[int]] = {k: [] for k in (*starts.values(), *finishes.values())}
        for i, h in enumerate(host):  # only the ops at a flow's ends
            ops = at.get((h.thread, h.ts))
            if ops is not None and h.kind == OP:
                ops.append(i)
        for fid, end in finishes.items():
            begin = starts.get(fid)
            if begin is None:
                continue
            fwd_ops, bwd_ops = at.get(begin), at.get(end)
            if fwd_ops and bwd_ops:
                root = max(bwd_ops, key=lambda i: host[i].dur)  # the outermost op at that instant
                for i in fwd_ops:
                    pairs.append((i, root))
                reached.update(bwd_ops)
    if tr.seq_host:
        fwd_by_seq: dict[int, list[int]] = defaultdict(list)
        seq_host, seq_nr, seq_fwd = tr.seq_host, tr.seq_nr, tr.seq_fwd
        for k in range(len(seq_host)):
            if seq_fwd[k] == 0:
                fwd_by_seq[seq_nr[k]].append(seq_host[k])
        for k in range(len(seq_host)):
            i = seq_host[k]
            if seq_fwd[k] == 0 or i in reached:
                continue
            fwd = fwd_by_seq.get(seq_nr[k])
            if fwd and all(host[f].thread == host[fwd[0]].thread for f in fwd):
                for f in fwd:
                    pairs.append((f, i))
    return pairs


def _attach_backward(tr: Trace, links: Links, blocks: list[Block], owner: list[int]) -> None:
    """Each forward block's backward work becomes a ``backward`` block with its name, step and ordinal.

    Backward ops reached from a forward block's ops (flows or sequence numbers, :func:`_backward_pairs`)
    are its roots; what they enclose and launch joins it. Backward ops run on the autograd thread, outside
    any ``ProfilerStep``: each gets its forward op's step (so do their children), here in ``links.step``.
    """
    pairs = _backward_pairs(tr)
    host, step, parent = tr.host, links.step, links.parent
    joins: dict[int, int] = {}  # backward op -> forward block
    stepped = False
    for f, b in pairs:
        if step[b] is None and step[f] is not None:
            step[b] = step[f]
            stepped = True
        fb = owner[f]
        if fb != NONE and owner[b] == NONE and blocks[fb].phase == Phase.FORWARD:
            joins.setdefault(b, fb)
    backward: dict[int, int] = {}  # forward block -> its backward block
    for i in sorted(joins, key=lambda i: host[i].ts):
        fb = joins[i]
        p = parent[i]
        while p != NONE and p not in joins:  # an op inside another joined op is no root
            p = parent[p]
        if p != NONE and joins[p] == fb:
            continue
        bb = backward.get(fb)
        if bb is None:
            fwd_block = blocks[fb]
            bb = backward[fb] = len(blocks)
            blocks.append(Block(fwd_block.name, fwd_block.found_by, [], fwd_block.step, Phase.BACKWARD, host[i].ts,
                                forward=fb, evidence=_backward_evidence(fwd_block, "autograd")))
        blocks[bb].roots.append(i)
        owner[i] = bb
    if backward or stepped:
        _inherit(links, owner)
    if _orphan_backward(tr, links, blocks, owner, pairs, backward):
        _inherit(links, owner)


def _backward_evidence(fwd: Block, how: str) -> Evidence | None:
    """A backward block's core is its forward call's; the rule says how the two were paired."""
    ev = fwd.evidence
    return None if ev is None else replace(ev, rule=f"{how} backward of {ev.rule}")


def _inherit(links: Links, owner: list[int]) -> None:
    """Parents first: children inherit the owner and the step."""
    step, parent = links.step, links.parent
    for i in links.order:
        p = parent[i]
        if p == NONE:
            continue
        if owner[i] == NONE and owner[p] != NONE:
            owner[i] = owner[p]
        if step[i] is None and step[p] is not None:
            step[i] = step[p]


def _orphan_backward(tr: Trace, links: Links, blocks: list[Block], owner: list[int], pairs: list[tuple[int, int]],
                     backward: dict[int, int]) -> bool:
    """Fused attention backward ops that no pair reached: compiled graphs (``CompiledFunctionBackward``) call
    them with no flow or number of their own. When an enclosing op is paired with a forward op (the
    ``CompiledFunction`` region), the region's forward blocks and its backward ops are matched last-to-first
    (autograd runs the graph in reverse); any other such op is a backward block of its own, never a forward one.
    """
    host, parent = tr.host, links.parent
    names = {n for n in {h.name for h in host} if is_fused_attention_op(n) and is_backward_op(n)}
    if not names:  # the common case (inference): one pass over the names, no per-op work
        return False
    orphans = [i for i in links.order if owner[i] == NONE and host[i].kind == OP and host[i].name in names]
    if not orphans:
        return False
    fwd_of: dict[int, int] = {}
    for f, b in pairs:
        fwd_of.setdefault(b, f)
    regions: dict[int, list[int]] = defaultdict(list)  # paired backward op around orphans -> the orphans
    for i in orphans:
        p = parent[i]
        while p != NONE and p not in fwd_of:
            p = parent[p]
        regions[p].append(i)
    fwd_starts = sorted((host[blk.roots[0]].ts, b) for b, blk in enumerate(blocks)
                        if blk.phase == Phase.FORWARD and blk.roots and blk.forward is None)
    for region, ops in regions.items():
        ops = [i for i in ops if not any(parent[i] == j for j in ops)]  # outermost only
        ops.sort(key=lambda i: host[i].ts)
        fwd_blocks: list[int] = []
        if region != NONE:
            fop = host[fwd_of[region]]
            lo, hi = fop.ts, fop.ts + fop.dur
            fwd_blocks = [b for ts, b in fwd_starts if lo <= ts <= hi and host[blocks[b].roots[0]].thread == fop.thread
                          and b not in backward]
        for k, i in enumerate(ops):
            fb = fwd_blocks[len(fwd_blocks) - 1 - k] if k < len(fwd_blocks) else None
            if fb is not None:
                blk = blocks[fb]
                backward[fb] = len(blocks)
                blocks.append(Block(blk.name, blk.found_by, [i], blk.step, Phase.BACKWARD, host[i].ts, forward=fb,
                                    evidence=_backward_evidence(blk, "compiled-region-order")))
            else:
                blocks.append(Block(host[i].name, FoundBy.FUSED_OP, [i], links.step[i], Phase.BACKWARD, host[i].ts,
                                    evidence=Evidence(rule="fused-op-backward", core=CoreKind.FUSED_OP,
                                                      names=(host[i].name,))))
            owner[i] = len(blocks) - 1
    return True


def _ordinals(blocks: list[Block]) -> list[int]:
    """Position of each block in its step and phase by start time; a backward block takes its forward
    block's (backward runs layers in reverse, and the pair must read as one call)."""
    ordinal = [0] * len(blocks)
    idx = sorted(range(len(blocks)), key=lambda b: (blocks[b].step is None, blocks[b].step or 0, blocks[b].phase, blocks[b].ts))
    for _, g in groupby(idx, key=lambda b: (blocks[b].step, blocks[b].phase)):
        for k, b in enumerate(g):
            ordinal[b] = k
    for b, blk in enumerate(blocks):
        if blk.forward is not None:
            ordinal[b] = ordinal[blk.forward]
    return ordinal


def _alloc_bytes(tr: Trace, blocks: list[Block], device_side: bool) -> list[int | None]:
    """Bytes allocated inside each block's host intervals (``profile_memory`` traces only)."""
    if not tr.memory:
        return [None] * len(blocks)
    per_thread: dict[int, tuple[list[int], list[int]]] = {}
    mem = sorted((m for m in tr.memory if m.nbytes > 0 and (m.device_type != 0) == device_side),
                 key=lambda m: (m.thread, m.ts))
    for t, g in groupby(mem, key=lambda m: m.thread):
        ts, cum, acc = [], [0], 0
        for m in g:
            ts.append(m.ts)
            acc += m.nbytes
            cum.append(acc)
        per_thread[t] = (ts, cum)
    out: list[int | None] = []
    for b in blocks:
        if not b.roots:
            out.append(None)
            continue
        total = 0
        for r in b.roots:
            h = tr.host[r]
            ts, cum = per_thread.get(h.thread, ([], [0]))
            total += cum[bisect_right(ts, h.ts + h.dur)] - cum[bisect_left(ts, h.ts)]
        out.append(total)
    return out


def _alloc_peaks(tr: Trace, blocks: list[Block], device_side: bool) -> list[int | None]:
    """Per block, the largest ``Total Allocated`` the allocator reported at an allocation inside its host intervals:
    its peak memory as ``torch.cuda.max_memory_allocated`` reads it (docs/attribution.md, "Diff"). None where no
    allocation there carries the total (older traces write none): a peak the trace cannot tell."""
    mem = sorted((m for m in tr.memory if m.nbytes > 0 and m.total >= 0 and (m.device_type != 0) == device_side),
                 key=lambda m: (m.thread, m.ts))
    if not mem:
        return [None] * len(blocks)
    per_thread: dict[int, tuple[list[int], list[int]]] = {}
    for t, g in groupby(mem, key=lambda m: m.thread):
        ms = list(g)
        per_thread[t] = ([m.ts for m in ms], [m.total for m in ms])
    out: list[int | None] = []
    for b in blocks:
        peaks = []
        for r in b.roots:
            h = tr.host[r]
            ts, totals = per_thread.get(h.thread, ([], []))
            lo, hi = bisect_left(ts, h.ts), bisect_right(ts, h.ts + h.dur)
            if hi > lo:
                peaks.append(max(totals[lo:hi]))
        out.append(max(peaks) if peaks else None)
    return out


def _whole_steps(tr: Trace, links: Links, blocks: list[Block], dev_owner: list[int],
                 free_at: list[int], origin: int = 0) -> list[StepFigures]:
    """Per ProfilerStep#N, all the device work of the step, not only attention's: the events its host ops launched
    (and those its blocks own), their busy union, and their span by the blocks' rule (:func:`_window`, the
    ProfilerStep range as the host side). What the user waits for per step, beside the attention figures."""
    if not tr.info.steps:
        return []
    step, leaf, host, dev = links.step, links.device_leaf, tr.host, tr.device
    roots: dict[int, list[HostEvent]] = defaultdict(list)
    names = {f"ProfilerStep#{n}": n for n in tr.info.steps}  # (a dict lookup per host event: this loop sees all)
    for i, h in enumerate(host):
        s = step[i]
        if s is not None and names.get(h.name) == s:
            roots[s].append(h)
    events: dict[int, list[int]] = defaultdict(list)
    attention: dict[int, list[int]] = defaultdict(list)
    for j, b in enumerate(dev_owner):
        s = blocks[b].step if b != NONE else None
        if s is not None:
            attention[s].append(j)
        elif leaf[j] != NONE:
            s = step[leaf[j]]
        if s is not None:
            events[s].append(j)
    out = []
    for s in sorted(roots):
        js = events.get(s, [])
        evs = [dev[j] for j in js]
        first = min(js, key=lambda j: (dev[j].ts, j)) if js else NONE
        start, end = _window(evs, roots[s], free_at[first] if js else -1)
        out.append(StepFigures(step=s, busy_us=_busy(evs)[0] / 1000, span_us=(end - start) / 1000,
                               attention_us=_busy([dev[j] for j in attention.get(s, [])])[0] / 1000,
                               start_us=relative_us(start, origin), end_us=relative_us(end, origin)))
    return out


def _busy(events: Sequence[DeviceEvent], busy_until: list[int] | None = None) -> tuple[int, list[int]]:
    """First-come split of overlapping device time: each event keeps what no earlier starter covered.

    ``busy_until``, when given (len(events) long), receives for each event the last end of the device
    work that started before it (-1 when none): when the device became free for it.
    """
    starts = [e.ts for e in events]  # (a stable sort: ties stay in index order)
    order = sorted(range(len(events)), key=starts.__getitem__)
    del starts
    share = [0] * len(events)
    maxend = None
    for k in order:
        e = events[k]
        end = e.ts + e.dur
        if busy_until is not None:
            busy_until[k] = -1 if maxend is None else maxend
        start = e.ts if maxend is None or maxend < e.ts else maxend
        if end > start:
            share[k] = end - start
        if maxend is None or end > maxend:
            maxend = end
    return sum(share), share


def _window(evs: Sequence[DeviceEvent], roots: Sequence[HostEvent], free_at: int = -1) -> tuple[int, int]:
    """The block's span as (start, end) in ns: first start to last end of its host intervals and its device
    events, the profiled wall clock that busy time alone hides when the device waits for launches.

    Host time before the block's first device event counts only from ``free_at``, when the device finished
    the work queued before the block: a host that runs ahead of the device waits in the queue, and that
    wait is the previous work's time, not this block's (docs/attribution.md, Time). The idle causes split
    this window, and it is the block's ``start_us``/``end_us``.
    """
    if not evs:
        return (min(h.ts for h in roots), max(h.ts + h.dur for h in roots)) if roots else (0, 0)
    d0 = min(e.ts for e in evs)
    end = max(e.ts + e.dur for e in evs)
    if not roots:
        return d0, end
    h0 = min(h.ts for h in roots)
    start = d0 if h0 >= d0 else max(h0, min(free_at, d0))
    return start, max(end, max(h.ts + h.dur for h in roots))


def _summary(tr: Trace, links: Links | None, time_base: TimeBase, base_ns: int) -> TraceSummary:
    i = tr.info
    return TraceSummary(source=i.source, gpus=i.gpus, pytorch=i.pytorch, runtime=i.runtime, time_base=time_base,
                        steps=i.steps, events=i.event_count, base_us=base_ns / 1000, warnings=list(i.warnings),
                        damaged=i.damaged, external_ids_trusted=bool(links and links.external_ids_trusted),
                        shapes=list(i.shapes), rank=i.rank)


def _device_attribution(tr: Trace, links: Links, blocks: list[Block], owner: list[int], cats: list[Category],
                        hints: bool = True, replayed: Sequence[int] = (),
                        graph_launches: Sequence[GraphLaunch] = (), origin: int = 0) -> Attribution:
    """Device busy time: each block's events (each instant once) split by category and matmul role."""
    dev = tr.device
    leaf = links.device_leaf
    dev_owner = [owner[lf] if lf != NONE else NONE for lf in leaf]
    find_kernel_blocks(tr, links, blocks, cats, dev_owner)
    members: dict[int, list[int]] = defaultdict(list)
    for j, b in enumerate(dev_owner):
        if b != NONE:
            members[b].append(j)
    free_at = [0] * len(dev)
    total_busy, share = _busy(dev, free_at)
    in_blocks_ns = sum(s for s, b in zip(share, dev_owner) if b != NONE)
    walk = _DeviceBlocks(tr, links, cats, free_at, IdleSplitter(tr, graph_launches), origin)
    alloc, ordinal = _alloc_bytes(tr, blocks, device_side=True), _ordinals(blocks)
    results = [walk.block(blk, members.get(b, []), ordinal[b], alloc[b]) for b, blk in enumerate(blocks)]
    effs, eff_cats = block_efficiency(tr, links, len(blocks), dev_owner, cats, walk.dev_share,
                                      members.values(), roles=GemmRoles(tr, walk.roles))
    for b, r in enumerate(results):
        r.efficiency, r.efficiency_by_category = effs[b], eff_cats[b]
    for r, peak in zip(results, _alloc_peaks(tr, blocks, device_side=True)):
        r.alloc_peak_bytes = peak
    facts = None
    if hints:
        keys = [(r.kind, str(r.phase)) for r in results]  # results are in block order until _sorted
        facts = collect_facts(tr, links, keys, dev_owner, cats, walk.dev_share)
        for j in replayed:  # (the hints tell a graph's blocks from eager ones by this)
            g = facts.get(keys[dev_owner[j]]) if dev_owner[j] != NONE else None
            if g is not None:
                g.replayed_us += walk.dev_share[j] / 1000
    top = walk.top
    summary = _summary(tr, links, TimeBase.DEVICE, total_busy)
    summary.step_figures = _whole_steps(tr, links, blocks, dev_owner, free_at, origin)
    return Attribution(
        source=tr.info.source, time_base=TimeBase.DEVICE, traces=[summary],
        blocks=_sorted(results), totals=_totals(results, in_blocks_ns, total_busy),
        coverage=_coverage(tr, links, share, total_busy, in_blocks_ns, cats, dev_owner),
        kernels=_over_steps(top), kernels_by_step={k: (n, ns / 1000) for k, (n, ns) in top.items()},
        device_events_owned=sum(len(v) for v in members.values()),
        device_events_owned_distinct=len({j for v in members.values() for j in v}), hint_facts=facts,
        device=device_info(tr.info.gpus, True))


def _device_categories(tr: Trace, links: Links, clf: Classifier) -> list[Category]:
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


def _coverage(tr: Trace, links: Links, share: list[int], total_busy: int, in_blocks_ns: int,
              cats: Sequence[Category], dev_owner: list[int]) -> Coverage:
    """How much device time is linked to host ops, how much of it lies in blocks, why the rest is unlinked
    (each unlinked event's busy share under the reason the linker gave it), and the fused attention kernels
    that no block owns after every block finder ran (``dev_owner`` NONE), linked or not."""
    linked_ns = sum(s for s, ok in zip(share, links.device_linked) if ok)
    by_reason = dict.fromkeys(UNLINKED_REASONS, 0)
    for j, reason in zip(links.unlinked, links.unlinked_reason):
        by_reason[reason] += share[j]
    fused = Category.FUSED_ATTENTION
    outside = [j for j in compress(range(len(cats)), map(eq, cats, repeat(fused))) if dev_owner[j] == NONE]
    names = Counter(short_kernel_name(tr.device[j].name) for j in outside)
    return Coverage(device_us=total_busy / 1000, linked_us=linked_ns / 1000, in_blocks_us=in_blocks_ns / 1000,
                    unlinked_us=(total_busy - linked_ns) / 1000, device_events=len(share),
                    linked_events=sum(links.device_linked),
                    unlinked_by_reason={k: v / 1000 for k, v in by_reason.items()},
                    attention_outside_kernels=len(outside),
                    attention_outside_us=sum(share[j] for j in outside) / 1000,
                    attention_outside_names=_by_count(names))


def _by_count(names: Counter[str]) -> dict[str, int]:
    """Kernel name -> count, the most frequent first (ties by name): the order every output lists them in."""
    return dict(sorted(names.items(), key=lambda kv: (-kv[1], kv[0])))


class _DeviceBlocks:
    """One device block's figures at a time, and what the later stages read across all of them: each owned
    event's share of its block's busy time (efficiency, hints) and the kernel table by step."""

    def __init__(self, tr: Trace, links: Links, cats: list[Category], free_at: list[int], idle: IdleSplitter,
                 origin: int = 0) -> None:
        self.tr, self.links, self.cats, self.free_at, self.idle = tr, links, cats, free_at, idle
        self.origin, self.streams = origin, tuple(tr.streams)  # the trace's clock and stream table (clock.py)
        self.replay_threads = replay_threads(tr) if tr.graphs is not None and tr.graphs.launches else frozenset()
        self.roles = RoleFinder(tr, links)
        self.dev_share = [0] * len(tr.device)
        self.top: dict[tuple[str, str, int | None], list] = {}  # (compact kernel name, category, step) -> [count, ns]

    def block(self, blk: Block, js: list[int], ordinal: int, alloc: int | None) -> BlockResult:
        tr, host, dev = self.tr, self.tr.host, self.tr.device
        evs = [dev[j] for j in js]
        busy, bshare = _busy(evs)
        c, mr = self._split(js, bshare, blk.step)
        first = min(js, key=lambda j: (dev[j].ts, j)) if js else NONE
        # (a replay's copied ops have the capture's times: they measure nothing, the device's times do)
        roots = [host[r] for r in blk.roots if host[r].thread not in self.replay_threads]
        # (no device work, as in a graph capture: no span the device could idle in, so never launch-bound)
        start, end = _window(evs, roots, self.free_at[first]) if js else (blk.ts, blk.ts)
        span = end - start
        gaps = array("q") if span > busy else None
        causes = self.idle.split(js, start, end, {h.thread for h in roots}, gaps) if gaps is not None else zero_causes()
        host_ns = sum(h.dur for h in roots) if roots else None
        return BlockResult(
            name=blk.name, kind=block_kind(blk.name, blk.found_by), found_by=blk.found_by, step=blk.step,
            ordinal=ordinal, phase=blk.phase, total_us=busy / 1000, span_us=span / 1000,
            idle_us=(span - busy) / 1000, categories={k: v / 1000 for k, v in c.items()}, kernels=len(js),
            host_us=host_ns / 1000 if host_ns is not None else None, alloc_bytes=alloc, source=tr.info.source,
            matmul_roles=_role_us(mr), launch_bound=is_launch_bound(span - busy, span), evidence=blk.evidence,
            recorded=blk.recorded, idle_by_cause={k: v / 1000 for k, v in causes.items()},
            start_us=relative_us(start, self.origin), end_us=relative_us(end, self.origin),
            intervals=block_intervals(evs, map(self.cats.__getitem__, js), self.origin, self.streams),
            idle_gaps=IdleGaps(origin_ns=self.origin, flat=gaps) if gaps is not None else None,
            host_spans=host_spans(roots, self.tr.threads, self.origin))

    def _split(self, js: list[int], bshare: list[int], step: int | None) -> tuple[dict[str, int], dict[str, int]]:
        """The block's busy ns by category and its matmul ns by role; its kernels into the table."""
        dev, cats, top = self.tr.device, self.cats, self.top
        leaf, launcher = self.links.device_leaf, self.links.launcher
        matmul, other_role = Category.MATMUL, str(MatmulRole.OTHER)
        c = dict.fromkeys(CATEGORIES, 0)
        mr = dict.fromkeys(MATMUL_ROLES, 0)  # each matmul event's busy share, by its launching op's role
        for j, s in zip(js, bshare):
            self.dev_share[j] = s
            c[cats[j]] += s
            if cats[j] == matmul:
                lf = leaf[j]
                la = launcher[lf] if lf != NONE else NONE
                mr[self.roles.role(la if la != NONE else lf) if lf != NONE else other_role] += s
            row = (compact_kernel_name(dev[j].name), cats[j], step)
            t = top.get(row)
            if t is None:
                t = top[row] = [0, 0]
            t[0] += 1
            t[1] += dev[j].dur
        return c, mr


def _self_times(tr: Trace, links: Links) -> list[int]:
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
    if not any(clf.has_child_rules(n) for n in {h.name for h in host if h.kind == OP}):
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


def _host_attribution(tr: Trace, links: Links, blocks: list[Block], owner: list[int], clf: Classifier,
                      origin: int = 0) -> Attribution:
    host = tr.host
    self_ns = _self_times(tr, links)
    by_child = _child_categories(tr, links, clf)
    c = [dict.fromkeys(CATEGORIES, 0) for _ in blocks]
    mr = [dict.fromkeys(MATMUL_ROLES, 0) for _ in blocks]  # matmul self time by the op's role
    roles = RoleFinder(tr, links)
    covered = [0] * len(blocks)
    timed: list[list[tuple[HostEvent, str]]] = [[] for _ in blocks]  # each block's ops with self time (timeline)
    ops: dict[tuple[str, str, int | None], list] = {}  # (op name, category, step) -> [count, self ns]
    base = 0  # host time of the outermost ops: the denominator of the attention share
    other = Category.OTHER
    for i, h in enumerate(host):
        if h.kind < ANNOTATION:
            continue
        base += self_ns[i]
        b = owner[i]
        if b != NONE:
            cat = (by_child.get(i) or clf.host(h.name)) if h.kind == OP else other
            c[b][cat] += self_ns[i]
            if self_ns[i] > 0:
                timed[b].append((h, cat))
            if cat == Category.MATMUL:
                mr[b][roles.role(i)] += self_ns[i]
            covered[b] += self_ns[i]
            if h.kind == OP:
                v = ops.setdefault((h.name, cat, blocks[b].step), [0, 0])
                v[0] += 1
                v[1] += self_ns[i]
    alloc = _alloc_bytes(tr, blocks, device_side=False)
    ordinal = _ordinals(blocks)
    threads = tuple(tr.threads)
    results = []
    for b, blk in enumerate(blocks):
        hspan = sum(host[r].dur for r in blk.roots)
        for r in blk.roots:
            if host[r].kind == MODULE:
                gap = _module_gap(tr, links, r, covered[b])
                c[b][Category.OTHER] += gap  # module time outside any op: Python and the module call
                if links.op_parent[r] == NONE:
                    base += gap  # else it is already in the enclosing op's or range's self time
        total = sum(c[b].values())
        start, end = _window((), [host[r] for r in blk.roots])
        results.append(BlockResult(
            name=blk.name, kind=block_kind(blk.name, blk.found_by), found_by=blk.found_by, step=blk.step,
            ordinal=ordinal[b], phase=blk.phase, total_us=total / 1000, span_us=(end - start) / 1000,
            start_us=relative_us(start, origin), end_us=relative_us(end, origin),
            host_spans=host_spans([host[r] for r in blk.roots], tr.threads, origin),
            host_ops=host_intervals(timed[b], origin, start, end, threads),
            idle_us=0.0, categories={k: v / 1000 for k, v in c[b].items()}, kernels=0, host_us=hspan / 1000,
            alloc_bytes=alloc[b], source=tr.info.source, matmul_roles=_role_us(mr[b]),
            efficiency=Efficiency(reason=HOST_ONLY), evidence=blk.evidence, recorded=blk.recorded,
            idle_by_cause=dict.fromkeys(IDLE_CAUSES, 0.0)))  # no device to wait: launch_bound None, no idle
    for res, peak in zip(results, _alloc_peaks(tr, blocks, device_side=False)):
        res.alloc_peak_bytes = peak
    in_blocks = sum(sum(x.values()) for x in c)
    return Attribution(
        source=tr.info.source, time_base=TimeBase.HOST, traces=[_summary(tr, links, TimeBase.HOST, base)],
        blocks=_sorted(results), totals=_totals(results, in_blocks, base), coverage=None,
        kernels=_over_steps(ops), kernels_by_step={k: (n, ns / 1000) for k, (n, ns) in ops.items()},
        device=device_info(tr.info.gpus, False))


def _over_steps(per_step: dict[tuple[str, str, int | None], list]) -> dict[tuple[str, str], tuple[int, float]]:
    """(name, category, step) -> [count, ns] summed over steps: the whole-trace kernel table, in µs."""
    out: dict[tuple[str, str], list] = {}
    for (name, cat, _), (n, ns) in per_step.items():
        v = out.setdefault((name, cat), [0, 0])
        v[0] += n
        v[1] += ns
    return {k: (n, ns / 1000) for k, (n, ns) in out.items()}


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


def _role_us(roles_ns: dict[str, int]) -> dict[str, float]:
    """Roles in µs: integer ns sums of the same shares as ``matmul``, so they partition it (check() asserts it)."""
    return {k: v / 1000 for k, v in roles_ns.items()}


def _sorted(results: list[BlockResult]) -> list[BlockResult]:
    return sorted(results, key=lambda r: (r.source, r.step is None, r.step or 0, r.phase != Phase.FORWARD, r.ordinal))


def _totals(results: list[BlockResult], in_blocks_ns: int, base_ns: int) -> Totals:
    cats = zero_categories()
    for r in results:
        for k, v in r.categories.items():
            cats[k] += v
    share = in_blocks_ns / base_ns if base_ns > 0 else None
    roles: dict[str, float] | None = None
    if all(r.matmul_roles is not None for r in results):
        roles = dict.fromkeys(MATMUL_ROLES, 0.0)
        for r in results:
            for k, v in (r.matmul_roles or {}).items():
                roles[k] += v
    dev = [r for r in results if r.launch_bound is not None]  # device blocks: a CPU-only block has no idle device
    idle_causes: dict[str, float] | None = None
    if all(r.idle_by_cause is not None for r in results):
        idle_causes = dict.fromkeys(IDLE_CAUSES, 0.0)
        for r in results:
            for k, v in (r.idle_by_cause or {}).items():
                idle_causes[k] += v
    dev_span = sum(r.span_us for r in dev)
    return Totals(total_us=sum(r.total_us for r in results), categories=cats, attention_share=share,
                  blocks=len(results), matmul_roles=roles, span_us=sum(r.span_us for r in results),
                  idle_us=sum(r.idle_us for r in results),
                  launch_bound=is_launch_bound(sum(r.idle_us for r in dev), dev_span) if dev else None,
                  idle_by_cause=idle_causes,
                  efficiency=sum_efficiency([r.efficiency for r in results]),
                  efficiency_by_category=sum_efficiency_maps([r.efficiency_by_category for r in results]))


def merge(parts: list[Attribution], source: str) -> Attribution:
    """Several traces (ranks, workers) as one result: blocks concatenated, totals summed."""
    blocks = [b for p in parts for b in p.blocks]
    bases = {p.time_base for p in parts}
    time_base = bases.pop() if len(bases) == 1 else TimeBase.MIXED
    covs = [p.coverage for p in parts if p.coverage is not None]
    cov = None
    if covs:
        names: Counter[str] = Counter()
        for c in covs:
            names.update(c.attention_outside_names)
        cov = Coverage(**{f: sum(getattr(c, f) for c in covs) for f in
                          ("device_us", "linked_us", "in_blocks_us", "unlinked_us", "device_events", "linked_events",
                           "attention_outside_kernels", "attention_outside_us")},
                       unlinked_by_reason={k: sum(c.unlinked_by_reason[k] for c in covs) for k in UNLINKED_REASONS},
                       attention_outside_names=_by_count(names))
    base = sum(t.base_us for p in parts for t in p.traces)
    in_blocks = sum(p.totals.attention_share * t.base_us for p in parts for t in p.traces if p.totals.attention_share)
    totals = _totals(blocks, 0, 1)
    totals.attention_share = in_blocks / base if base > 0 else None
    kernels: dict[tuple[str, str], tuple[int, float]] = {}
    by_step: dict[tuple[str, str, int | None], tuple[int, float]] = {}
    for p in parts:
        for key, (k, us) in p.kernels.items():
            n0, us0 = kernels.get(key, (0, 0.0))
            kernels[key] = (n0 + k, us0 + us)
        for skey, (k, us) in p.kernels_by_step.items():  # ranks of a run add up per step number
            n0, us0 = by_step.get(skey, (0, 0.0))
            by_step[skey] = (n0 + k, us0 + us)
    facts = merge_facts(p.hint_facts for p in parts)
    return Attribution(source=source, time_base=time_base, traces=[t for p in parts for t in p.traces], blocks=blocks,
                       totals=totals, coverage=cov, kernels=kernels, kernels_by_step=by_step,
                       device_events_owned=sum(p.device_events_owned for p in parts),
                       device_events_owned_distinct=sum(p.device_events_owned_distinct for p in parts),
                       hints=evaluate_hints(facts, blocks), hint_facts=facts,
                       device=merge_device([p.device for p in parts]))


def op_self_times(tr: Trace) -> dict[str, tuple[int, float]]:
    """Per op/annotation name: (calls, total self µs) over the whole trace.

    The same quantity as ``torch.profiler``'s ``key_averages()`` ``self_cpu_time_total``; the tests
    use it to cross-check the host attribution against torch's own table.
    """
    links = link(tr)
    self_ns = _self_times(tr, links)
    out: dict[str, list] = {}
    for i, h in enumerate(tr.host):
        if h.kind >= ANNOTATION:
            v = out.setdefault(h.name, [0, 0])
            v[0] += 1
            v[1] += self_ns[i]
    return {k: (n, ns / 1000) for k, (n, ns) in out.items()}
