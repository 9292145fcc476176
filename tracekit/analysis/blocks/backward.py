"""Backward blocks: each forward block's backward work, paired by what autograd recorded (docs/attribution.md,
"Backward blocks"). A pipeline stage, after host block discovery and before any time is accounted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from ...model import OP, Trace
from ...results.attribution import Evidence
from ...vocab import CoreKind, FoundBy, Phase, is_backward_op, is_fused_attention_op
from ..link import NONE, Links
from .discovery import Block


def _backward_pairs(tr: Trace) -> list[tuple[int, int]]:
    """(forward op, backward op) host index pairs that autograd recorded.

    ``fwdbwd`` flows first (:func:`_flow_pairs`), then ``Sequence number`` for the backward ops no flow
    reached (:func:`_sequence_pairs`).
    """
    pairs, reached = _flow_pairs(tr) if tr.flows else ([], set())
    if tr.seq_host:
        pairs += _sequence_pairs(tr, reached)
    return pairs


def _flow_pairs(tr: Trace) -> tuple[list[tuple[int, int]], set[int]]:
    """Pairs by ``fwdbwd`` flows, and the backward ops they reached: a flow starts at a forward op and finishes at
    the backward op run for it (each end is matched to the ops starting at that instant on that thread)."""
    host = tr.host
    starts, finishes, at = _flow_ends(tr)
    pairs: list[tuple[int, int]] = []
    reached: set[int] = set()
    for fid, end in finishes.items():
        begin = starts.get(fid)
        fwd_ops, bwd_ops = (at.get(begin), at.get(end)) if begin is not None else (None, None)
        if fwd_ops and bwd_ops:
            root = max(bwd_ops, key=lambda i: host[i].dur)  # the outermost op at that instant
            pairs += [(i, root) for i in fwd_ops]
            reached.update(bwd_ops)
    return pairs, reached


_Ends = dict[int, tuple[int, int]]  # flow id -> (thread, ts) of one end


def _flow_ends(tr: Trace) -> tuple[_Ends, _Ends, dict[tuple[int, int], list[int]]]:
    """Flow id -> (thread, ts) of its start and of its finish, and (thread, ts) -> the ops starting there."""
    starts: dict[int, tuple[int, int]] = {}
    finishes: dict[int, tuple[int, int]] = {}
    for fl in tr.flows:
        (starts if fl.start else finishes)[fl.id] = (fl.thread, fl.ts)
    at: dict[tuple[int, int], list[int]] = {k: [] for k in (*starts.values(), *finishes.values())}
    for i, h in enumerate(tr.host):  # only the ops at a flow's ends
        ops = at.get((h.thread, h.ts))
        if ops is not None and h.kind == OP:
            ops.append(i)
    return starts, finishes, at


def _sequence_pairs(tr: Trace, reached: set[int]) -> list[tuple[int, int]]:
    """Pairs by ``Sequence number`` for backward ops not in ``reached``: a backward op carries its forward op's
    number and ``Fwd thread id`` (> 0); forward ops carry their number with id 0. The id is autograd's own thread
    count, not a tid, so a number is matched only where one host thread recorded forward ops with it."""
    host = tr.host
    seq_host, seq_nr, seq_fwd = tr.seq_host, tr.seq_nr, tr.seq_fwd
    fwd_by_seq: dict[int, list[int]] = defaultdict(list)
    for i, nr, ft in zip(seq_host, seq_nr, seq_fwd):
        if ft == 0:
            fwd_by_seq[nr].append(i)
    # (the one-thread check once per number, not once per backward op that carries it)
    one_thread = {nr: fwd for nr, fwd in fwd_by_seq.items() if all(host[f].thread == host[fwd[0]].thread for f in fwd)}
    pairs: list[tuple[int, int]] = []
    for i, nr, ft in zip(seq_host, seq_nr, seq_fwd):
        if ft != 0 and i not in reached:
            fwd = one_thread.get(nr)
            if fwd:
                pairs += [(f, i) for f in fwd]
    return pairs


def attach_backward(tr: Trace, links: Links, blocks: list[Block], owner: list[int]) -> None:
    """Each forward block's backward work becomes a ``backward`` block with its name, step and ordinal.

    Backward ops reached from a forward block's ops (flows or sequence numbers, :func:`_backward_pairs`)
    are its roots; what they enclose and launch joins it. Backward ops run on the autograd thread, outside
    any ``ProfilerStep``: each gets its forward op's step (so do their children), here in ``links.step``.
    """
    pairs = _backward_pairs(tr)
    joins, stepped = _joins(pairs, links, blocks, owner)
    backward = _join_roots(tr, links, blocks, owner, joins)
    if backward or stepped:
        _inherit(links, owner)
    if _orphan_backward(tr, links, blocks, owner, pairs, backward):
        _inherit(links, owner)


def _joins(pairs: list[tuple[int, int]], links: Links, blocks: list[Block],
           owner: list[int]) -> tuple[dict[int, int], bool]:
    """Backward op -> the forward block it joins (its forward op's, when that block is a forward one and the op
    has no block yet); the steps backward ops take from their forward ops, and whether any was taken."""
    step = links.step
    joins: dict[int, int] = {}
    stepped = False
    for f, b in pairs:
        if step[b] is None and step[f] is not None:
            step[b] = step[f]
            stepped = True
        fb = owner[f]
        if fb != NONE and owner[b] == NONE and blocks[fb].phase == Phase.FORWARD:
            joins.setdefault(b, fb)
    return joins, stepped


def _join_roots(tr: Trace, links: Links, blocks: list[Block], owner: list[int],
                joins: dict[int, int]) -> dict[int, int]:
    """The joined ops that no other joined op of the same block encloses become the roots of that block's backward
    block (made on its first root, in start order). Returns forward block -> its backward block."""
    host, parent = tr.host, links.parent
    backward: dict[int, int] = {}
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
    return backward


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
    Returns whether any such op was found.
    """
    orphans = _orphans(tr, links, owner)
    if not orphans:
        return False
    host = tr.host
    regions, fwd_of = _regions(links.parent, orphans, pairs)
    fwd_starts = sorted((host[blk.roots[0]].ts, b) for b, blk in enumerate(blocks)
                        if blk.phase == Phase.FORWARD and blk.roots and blk.forward is None)
    for region, ops in regions.items():
        fwd = _region_forward_blocks(tr, blocks, fwd_of[region], fwd_starts, backward) if region != NONE else []
        _add_orphan_blocks(tr, links, blocks, owner, ops, fwd, backward)
    return True


def _regions(parent: Sequence[int], orphans: list[int],
             pairs: list[tuple[int, int]]) -> tuple[dict[int, list[int]], dict[int, int]]:
    """Paired backward op around orphans (NONE: none) -> the orphans, and backward op -> its forward op."""
    fwd_of: dict[int, int] = {}
    for f, b in pairs:
        fwd_of.setdefault(b, f)
    regions: dict[int, list[int]] = defaultdict(list)
    for i in orphans:
        p = parent[i]
        while p != NONE and p not in fwd_of:
            p = parent[p]
        regions[p].append(i)
    return regions, fwd_of


def _orphans(tr: Trace, links: Links, owner: list[int]) -> list[int]:
    """Fused attention backward ops (parents first) that no block owns."""
    host = tr.host
    distinct = tr.names if tr.names is not None else {h.name for h in host}  # (the file's names: no pass)
    names = {n for n in distinct if is_fused_attention_op(n) and is_backward_op(n)}
    if not names:  # the common case (inference): one pass over the names, no per-op work
        return []
    return [i for i in links.order if owner[i] == NONE and host[i].kind == OP and host[i].name in names]


def _region_forward_blocks(tr: Trace, blocks: list[Block], fwd_op: int, fwd_starts: list[tuple[int, int]],
                           backward: dict[int, int]) -> list[int]:
    """The forward blocks, in start order, that start inside forward op ``fwd_op`` on its thread and have no
    backward block yet: the forward calls of a compiled region."""
    host = tr.host
    fop = host[fwd_op]
    lo, hi = fop.ts, fop.ts + fop.dur
    return [b for ts, b in fwd_starts if lo <= ts <= hi and host[blocks[b].roots[0]].thread == fop.thread
            and b not in backward]


def _add_orphan_blocks(tr: Trace, links: Links, blocks: list[Block], owner: list[int], ops: list[int],
                       fwd_blocks: list[int], backward: dict[int, int]) -> None:
    """One backward block per op: the k-th op pairs with the k-th forward block from the end (autograd runs the
    region in reverse); an op with no forward block left is a ``fused-op`` backward block of its own."""
    host, parent = tr.host, links.parent
    ops = sorted((i for i in ops if not any(parent[i] == j for j in ops)), key=lambda i: host[i].ts)  # outermost
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
