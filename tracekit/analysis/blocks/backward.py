"""Backward blocks: each forward block's backward work, paired by what autograd recorded (docs/attribution.md,
"Backward blocks"). A pipeline stage, after host block discovery and before any time is accounted.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from ...model import OP, Trace
from ...results.attribution import Evidence
from ...vocab import CoreKind, FoundBy, Phase, is_backward_op, is_fused_attention_op
from ..link import NONE, Links
from .discovery import Block


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


def attach_backward(tr: Trace, links: Links, blocks: list[Block], owner: list[int]) -> None:
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
