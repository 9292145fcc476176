"""CUDA/HIP graphs in the analysis: replayed kernels mapped to the ops that captured them, and the trace's mode.

A replayed kernel has no host op: its launch is the one ``cudaGraphLaunch``. The capture that recorded the graph
(in the same file, or a capture trace beside it) has the ops, modules and shapes, and each of its launches names
the kernel it recorded (HIP's do). :func:`replay_with_captures` aligns each graph launch's kernels to a captured
launch sequence, by kernel name and order, and gives each replay a copy of the captured host tree on a thread of
its own: the linker, block discovery, roles and FLOPs then read a replay as they read an eager trace. The input
trace is never changed; the copy is a new :class:`Trace` (docs/attribution.md, "Graphs").
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher

import msgspec

from ..io.graphs import find_graphs
from ..model import (
    KERNEL,
    MEMCPY,
    MEMSET,
    CaptureRegion,
    GraphFacts,
    GraphLaunch,
    HostEvent,
    OpInputs,
    RuntimeEvent,
    Trace,
)
from ..results.attribution import GraphSummary
from ..vocab import Category, GraphMode
from .link import NONE, Links, runtime_leaves
from .blocks.discovery import Block, short_kernel_name
from .blocks.kernels import CaptureLead

# The process of the threads that replays' copies of the captured host tree live on: their times are the capture's,
# shifted to the graph launch, so they place and nest the ops but measure nothing (spans use the device's times).
REPLAY_PROCESS = "graph replay"

# Tokens of launches and device events that carry no kernel name: only their kind can be aligned.
UNNAMED_KERNEL, COPY, FILL = "\0kernel", "\0memcpy", "\0memset"
_DEVICE_TOKEN = {MEMCPY: COPY, MEMSET: FILL}
# A graph launch maps to a capture when at least this share of its device events aligns to the capture's launches:
# below it the sequences are different graphs, and a partial match would name kernels after the wrong ops.
MIN_ALIGNED_SHARE = 0.5
# What makes a replay trace "mixed": fused attention kernels launched outside any graph (piecewise graphs run attention
# so). Not softmax: a serving engine's sampler runs a softmax over the logits eagerly beside a FULL graph.
_EAGER_ATTENTION = (Category.FUSED_ATTENTION,)


@dataclass(slots=True)
class Template:
    """One capture, ready to be copied under its replays: its host events (sorted, parents first), their recorded
    inputs, its work launches and, for each launch, the host events around it (outermost first)."""

    source: str
    index: int  # the capture's number in its trace
    host: list[HostEvent]
    host_index: list[int]  # each host event's index in its own trace
    inputs: dict[int, OpInputs]  # by position in ``host``
    launches: list[RuntimeEvent]
    tokens: tuple[str, ...]
    around: list[list[int]]  # per launch: positions in ``host``
    begin: int
    names: frozenset[str] = frozenset()


@dataclass(slots=True)
class ReplayMap:
    """What the mapping did, for the trace's GraphSummary."""

    replayed: list[int] = field(default_factory=list)  # device events run by graph launches
    mapped: set[int] = field(default_factory=set)  # those tied to a captured launch
    by_order: int = 0  # of those, tied by position alone (the capture named no kernel there)
    sources: list[str] = field(default_factory=list)  # the captures' traces that mapped something
    used: set[tuple[str, int]] = field(default_factory=set)  # (source, capture index) of templates used


def capture_token(rt: RuntimeEvent) -> str:
    """What a captured launch recorded: its kernel's name where the call names it, else its kind."""
    if rt.kernel:
        return rt.kernel
    return COPY if "Memcpy" in rt.name else FILL if "Memset" in rt.name else UNNAMED_KERNEL


def templates(tr: Trace, source: str, facts: GraphFacts | None = None) -> list[Template]:
    """Every capture of ``tr`` with the host events inside it (on its thread, wholly within it)."""
    facts = facts if facts is not None else (tr.graphs if tr.graphs is not None else find_graphs(tr))
    if not facts.captures:
        return []
    by_thread = _host_by_thread(tr)
    starts = {t: [tr.host[i].ts for i in idx] for t, idx in by_thread.items()}
    out = []
    for n, cap in enumerate(facts.captures):
        idx = by_thread.get(cap.thread, [])
        lo, hi = bisect_left(starts.get(cap.thread, []), cap.begin), bisect_right(starts.get(cap.thread, []), cap.end)
        inside = [i for i in idx[lo:hi] if tr.host[i].ts + tr.host[i].dur <= cap.end]
        out.append(_template(tr, source, n, cap, inside))
    return out


def _host_by_thread(tr: Trace) -> dict[int, list[int]]:
    """Each thread's host events in start order (the longer first at one start), for a bisect per capture."""
    by_thread: dict[int, list[int]] = {}
    for i, h in enumerate(tr.host):
        by_thread.setdefault(h.thread, []).append(i)
    for idx in by_thread.values():
        idx.sort(key=lambda i: (tr.host[i].ts, -tr.host[i].dur, tr.host[i].kind, i))
    return by_thread


def _template(tr: Trace, source: str, n: int, cap: CaptureRegion, inside: list[int]) -> Template:
    host = [tr.host[i] for i in inside]
    launches = [tr.runtime[r] for r in cap.launches]
    inputs = {k: tr.op_inputs[i] for k, i in enumerate(inside) if i in tr.op_inputs}
    return Template(source=source, index=n, host=host, host_index=inside, inputs=inputs, launches=launches,
                    tokens=tuple(map(capture_token, launches)), around=_around(host, launches), begin=cap.begin,
                    names=frozenset(h.name for h in host))


def _around(host: list[HostEvent], launches: list[RuntimeEvent]) -> list[list[int]]:
    """For each launch (in time order), the host events that contain it: one stack sweep."""
    stack: list[int] = []
    k, out = 0, []
    for rt in launches:
        while k < len(host) and host[k].ts <= rt.ts:
            while stack and host[stack[-1]].ts + host[stack[-1]].dur <= host[k].ts and host[k].dur > 0:
                stack.pop()
            stack.append(k)
            k += 1
        while stack and host[stack[-1]].ts + host[stack[-1]].dur < rt.ts:
            stack.pop()
        out.append(list(stack))
    return out


def align(captured: Sequence[str], replayed: Sequence[str]) -> tuple[list[tuple[int, int]], int]:
    """Pairs (captured launch, replayed event) in order: equal names (or kinds) by the longest matching runs,
    then gaps of unnamed kernel launches against as many kernels, by position. Returns the pairs and how many
    of them are by position. Extra or missing memsets and kernels on either side stay unpaired."""
    sm = SequenceMatcher(None, captured, replayed, autojunk=False)
    pairs: list[tuple[int, int]] = []
    by_order = 0
    i0 = j0 = 0
    for blk in sm.get_matching_blocks():
        gap_i, gap_j = range(i0, blk.a), range(j0, blk.b)
        if (len(gap_i) == len(gap_j) and all(captured[i] == UNNAMED_KERNEL for i in gap_i)
                and not any(replayed[j].startswith("\0") for j in gap_j)):
            pairs.extend(zip(gap_i, gap_j))
            by_order += len(gap_i)
        pairs.extend((blk.a + k, blk.b + k) for k in range(blk.size))
        i0, j0 = blk.a + blk.size, blk.b + blk.size
    return pairs, by_order


class _Chooser:
    """Which capture a graph launch replays: the one its kernels align to best, ties by capture order after the
    last one chosen (the pieces of a piecewise graph, or one graph per batch size, replay in capture order)."""

    def __init__(self, temps: list[Template]) -> None:
        self.groups: dict[tuple[str, ...], list[int]] = {}
        for t, tp in enumerate(temps):
            self.groups.setdefault(tp.tokens, []).append(t)
        self.memo: dict[tuple[str, ...], tuple[list[int], list[tuple[int, int]], int] | None] = {}
        self.last = -1

    def choose(self, tokens: tuple[str, ...]) -> tuple[int, list[tuple[int, int]], int] | None:
        if tokens in self.memo:
            hit = self.memo[tokens]
        else:
            hit = self.memo[tokens] = self._best(tokens)
        if hit is None:
            return None
        group, pairs, by_order = hit
        t = next((t for t in group if t > self.last), group[0])
        self.last = t
        return t, pairs, by_order

    def _best(self, tokens: tuple[str, ...]) -> tuple[list[int], list[tuple[int, int]], int] | None:
        exact = self.groups.get(tokens)
        if exact is not None and UNNAMED_KERNEL not in tokens:  # the common case: the graph as it was captured
            return exact, [(k, k) for k in range(len(tokens))], 0
        best = self._best_aligned(tokens)
        if best is None or len(best[2]) < MIN_ALIGNED_SHARE * len(tokens):
            return None
        return best[1], best[2], best[3]

    def _best_aligned(self, tokens: tuple[str, ...]
                      ) -> tuple[tuple[int, int, int], list[int], list[tuple[int, int]], int] | None:
        """(score, capture group, pairs, pairs by order alone) of the capture whose tokens align best.

        Candidates by how many tokens they could match at most (the multisets' overlap), best first: an alignment
        (quadratic on repeated layers) runs only while a candidate could still beat the best found."""
        want = Counter(tokens)
        bounds = sorted(((sum((Counter(cap) & want).values()), cap) for cap in self.groups), key=lambda x: -x[0])
        best = None
        for bound, cap_tokens in bounds:
            if best is not None and bound < best[0][0]:
                break
            pairs, by_order = align(cap_tokens, tokens)
            score = (len(pairs) - by_order, len(pairs), -abs(len(cap_tokens) - len(tokens)))
            if best is None or score > best[0]:
                best = (score, self.groups[cap_tokens], pairs, by_order)
        return best


def device_token(tr: Trace, j: int) -> str:
    d = tr.device[j]
    return d.name if d.kind == KERNEL else _DEVICE_TOKEN.get(d.kind, d.name)


def replay_with_captures(tr: Trace, captures: Sequence[Trace] = ()) -> tuple[Trace, ReplayMap]:
    """``tr`` with each mapped graph launch's kernels launched from a copy of the captured host tree; captures
    of ``tr`` itself that a replay used are then templates only (their 0 µs ops are not blocks twice)."""
    facts = tr.graphs if tr.graphs is not None else find_graphs(tr)
    rm = ReplayMap(replayed=[j for g in facts.launches for j in g.device])
    if not rm.replayed:
        return tr, rm
    own = templates(tr, tr.info.source, facts)
    temps = own + _capture_templates(captures)
    if not temps:
        return tr, rm
    out = _copy(tr)
    synth = _Synth(out)
    chooser = _Chooser(temps)
    for g in facts.launches:
        hit = chooser.choose(tuple(device_token(tr, j) for j in g.device)) if g.device else None
        if hit is not None:
            _replay(tr, g, temps[hit[0]], hit[1], hit[2], synth, rm)
    _drop_own_captures(out, own)
    return out, rm


def _capture_templates(captures: Sequence[Trace]) -> list[Template]:
    """The templates of the capture traces passed beside the replay trace (``--capture``)."""
    return [t for c in captures for t in templates(c, c.info.source)]


def _drop_own_captures(out: Trace, own: list[Template]) -> None:
    """The file's own captures: once it replays graphs, their 0 µs calls are what the replays ran (mapped or not),
    so they are templates only, never blocks beside the replayed ones."""
    drop = {i for tp in own for i in tp.host_index}
    if drop:
        _drop_host(out, drop)


def _replay(tr: Trace, g: GraphLaunch, tp: Template, pairs: list[tuple[int, int]], by_order: int, synth: _Synth,
            rm: ReplayMap) -> None:
    """One graph launch replayed from its chosen template: the copy of the captured host tree, and the map's
    record of what it tied."""
    synth.replay(tp, [(i, g.device[k]) for i, k in pairs], tr.runtime[g.runtime].ts)
    rm.mapped.update(g.device[k] for _, k in pairs)
    rm.by_order += by_order
    rm.used.add((tp.source, tp.index))
    if tp.source not in rm.sources:
        rm.sources.append(tp.source)


def _copy(tr: Trace) -> Trace:
    """A trace whose lists can be extended and whose device events can be re-pointed without touching ``tr``."""
    return Trace(info=tr.info, threads=list(tr.threads), streams=tr.streams, host=list(tr.host),
                 runtime=list(tr.runtime), device=list(tr.device), gpu_annotations=tr.gpu_annotations,
                 memory=tr.memory, flows=tr.flows, dropped=tr.dropped, seq_host=tr.seq_host, seq_nr=tr.seq_nr,
                 seq_fwd=tr.seq_fwd, names=tr.names, op_inputs=dict(tr.op_inputs), graphs=tr.graphs)


class _Synth:
    """Appends, per replay, the captured host events around its paired launches (on the capture's own replay
    thread, shifted to the graph launch), one launch per paired event, and re-points that event to it."""

    def __init__(self, tr: Trace) -> None:
        self.tr = tr
        self.threads: dict[tuple[str, int], int] = {}
        self.free_at: dict[int, int] = {}  # thread -> end of its last copy: copies on one thread never overlap
        self.corr = 1 + max(max((r.correlation for r in tr.runtime), default=0),
                            max((d.correlation for d in tr.device), default=0))
        self.names: set[str] = set()

    def replay(self, tp: Template, pairs: list[tuple[int, int]], launch_ts: int) -> None:
        tr = self.tr
        thread = self._thread(tp)
        keep = sorted({k for i, _ in pairs for k in tp.around[i]})
        first = min((tp.host[k].ts for k in keep), default=tp.begin)
        off = max(launch_ts - tp.begin, self.free_at.get(thread, first) - first)
        at: dict[int, int] = {}
        for k in keep:
            h = tp.host[k]
            at[k] = len(tr.host)
            tr.host.append(HostEvent(h.kind, h.name, thread, h.ts + off, h.dur, 0))
            if k in tp.inputs:
                tr.op_inputs[at[k]] = tp.inputs[k]
        end = max((tp.host[k].ts + tp.host[k].dur for k in keep), default=first) + off
        self.free_at[thread] = max(self.free_at.get(thread, end), end) + 1
        for i, j in pairs:
            rt = tp.launches[i]
            tr.runtime.append(RuntimeEvent(rt.name, thread, rt.ts + off, rt.dur, self.corr, 0, rt.kernel))
            tr.device[j] = msgspec.structs.replace(tr.device[j], correlation=self.corr, ext_id=0)
            self.corr += 1
        if tr.names is not None and not tp.names <= tr.names:
            tr.names = tr.names | tp.names

    def _thread(self, tp: Template) -> int:
        """The replay thread of a capture: one per (source, capture), made on its first replay."""
        key = (tp.source, tp.index)
        thread = self.threads.get(key)
        if thread is None:
            thread = self.threads[key] = len(self.tr.threads)
            self.tr.threads.append((REPLAY_PROCESS, f"{tp.source} capture {tp.index}"))
        return thread


def replay_threads(tr: Trace) -> frozenset[int]:
    """The threads that hold copies of captured host trees (:data:`REPLAY_PROCESS`)."""
    return frozenset(t for t, key in enumerate(tr.threads) if key[0] == REPLAY_PROCESS)


def _drop_host(tr: Trace, drop: set[int]) -> None:
    """Remove host events (a used capture's own ops), renumbering what indexes ``host``."""
    new_at: list[int] = []
    kept: list[HostEvent] = []
    for i, h in enumerate(tr.host):
        new_at.append(len(kept) if i not in drop else -1)
        if i not in drop:
            kept.append(h)
    tr.host = kept
    tr.op_inputs = {new_at[i]: v for i, v in tr.op_inputs.items() if new_at[i] >= 0}
    if len(tr.seq_host):
        _renumber_sequences(tr, new_at)


def _renumber_sequences(tr: Trace, new_at: list[int]) -> None:
    """The autograd sequence table (host index, sequence nr, forward thread) after host events were dropped."""
    rows = [(new_at[i], n, f) for i, n, f in zip(tr.seq_host, tr.seq_nr, tr.seq_fwd) if new_at[i] >= 0]
    tr.seq_host = array("q", [r[0] for r in rows])
    tr.seq_nr = array("q", [r[1] for r in rows])
    tr.seq_fwd = array("q", [r[2] for r in rows])


def graph_mode(facts: GraphFacts, replayed: set[int], cats: Sequence[Category] | None) -> GraphMode:
    """The trace's mode (vocab.GraphMode): captures and graph launches, and attention launched outside them."""
    if facts.captures:
        return GraphMode.CAPTURE_REPLAY if facts.launches else GraphMode.CAPTURE_ONLY
    if not facts.launches:
        return GraphMode.EAGER
    eager_attention = cats is not None and any(
        c in _EAGER_ATTENTION and j not in replayed for j, c in enumerate(cats))
    return GraphMode.MIXED if eager_attention else GraphMode.REPLAY


def summarize(tr: Trace, facts: GraphFacts, rm: ReplayMap, cats: Sequence[Category] | None) -> GraphSummary:
    """The trace's graph facts and what the mapping reached (replayed time: the events' summed durations)."""
    replayed = set(rm.replayed)
    dev = tr.device

    def busy(js: set[int]) -> int:
        return sum(dev[j].dur for j in js)

    unmapped: Counter[str] = Counter()
    for name, k in Counter(dev[j].name for j in rm.replayed if j not in rm.mapped).items():
        unmapped[short_kernel_name(name)] += k  # (per distinct name, in the order of first appearance as before)
    launches = [r for c in facts.captures for r in c.launches]
    # (only beside graph launches: an eager trace's attention is all eager, and a walk of every event costs)
    eager_att = _eager_attention(cats, replayed) if facts.launches else 0
    return GraphSummary(
        mode=graph_mode(facts, replayed, cats), captures=len(facts.captures), captured_launches=len(launches),
        captured_named=sum(1 for r in launches if tr.runtime[r].kernel) if launches else 0,
        instantiations=facts.instantiations, graph_launches=len(facts.launches), replayed_kernels=len(replayed),
        replayed_us=busy(replayed) / 1000, mapped_kernels=len(rm.mapped), mapped_us=busy(rm.mapped) / 1000,
        mapped_by_order=rm.by_order, unmapped=dict(unmapped.most_common(10)), capture_sources=list(rm.sources),
        eager_attention_kernels=eager_att)


def _eager_attention(cats: Sequence[Category] | None, replayed: set[int]) -> int:
    """How many attention kernels ran outside graph replays."""
    return sum(1 for j, c in enumerate(cats or ()) if c in _EAGER_ATTENTION and j not in replayed)


def record_captured(tr: Trace, links: Links, facts: GraphFacts, blocks: list[Block], owner: list[int]) -> None:
    """Each block's ``recorded``: the kernels its launches put into a graph during a capture (which ran nothing),
    by short name (the call's kind where it names no kernel): the captured structure of the call."""
    leaf = runtime_leaves(tr, links.order, links.parent)
    for cap in facts.captures:
        lead = CaptureLead()  # (rule owned-lead: a call's attention kernel joins the block of its quantise)
        for pos, r in enumerate(cap.launches):
            lf = leaf[r]
            rt = tr.runtime[r]
            b = lead.owner(pos, rt.kernel, owner[lf] if lf != NONE else NONE)
            if b == NONE:
                continue
            name = short_kernel_name(rt.kernel) if rt.kernel else _UNNAMED_LABEL[capture_token(rt)]
            rec = blocks[b].recorded
            if rec is None:
                rec = blocks[b].recorded = {}
            rec[name] = rec.get(name, 0) + 1


_UNNAMED_LABEL = {UNNAMED_KERNEL: "(kernel, unnamed)", COPY: "(memcpy)", FILL: "(memset)"}
MAPPED_ENOUGH = 0.95  # below this share of replayed time mapped, the report says how much is named by kernels only


def graph_warnings(g: GraphSummary) -> list[str]:
    """What a reader must know before trusting the figures of a capture or a replay."""
    if g.mode == GraphMode.CAPTURE_ONLY:
        return [(f"graph capture: {g.captured_launches:,} launches recorded into {g.captures:,} graph"
                 f"{'s' if g.captures != 1 else ''} and ran nothing; blocks show the captured structure, not "
                 f"timings (attribute the replay, with --capture this file)")]
    share = g.mapped_share
    if not g.replayed_kernels or (share is not None and share >= MAPPED_ENOUGH):
        return []
    if not g.capture_sources:
        return [(f"graph replay: {g.replayed_kernels:,} replayed kernels have no host op; pass the capture trace "
                 f"with --capture (or put it in capture_traces/ beside the replay) to map them to the ops that "
                 f"captured them")]
    return [(f"graph replay: {100 * (share or 0):.1f}% of replayed kernel time mapped to captured ops; the rest "
             f"is named after its kernels")]
