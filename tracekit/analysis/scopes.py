"""Find attention blocks: host intervals that each compute one attention call.

Order (docs/attribution.md, "Attention blocks"): a scope-matching ``record_function`` or
``nn.Module`` slice (outermost wins), then a fused attention op outside any scope,
then an inferred eager pattern (matmul → softmax → matmul under one parent). Then, once the device
events are classified (:func:`find_kernel_blocks`, called by tracekit.analysis.attribute): fused attention
kernels that no host block owns (CUDA/HIP graphs, compiled regions) become ``fused-kernel`` blocks, and a
GEMM → softmax → GEMM run of kernels that none owns an ``inferred`` one. All block discovery lives here.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import groupby

from ..model import ANNOTATION, MODULE, OP, DeviceEvent, Trace
from ..vocab import (
    EAGER_MATMUL_OPS, EAGER_SOFTMAX_OPS, Category, FoundBy, Phase, anchored, compact_kernel_name, kernel_label,
    opens_fused_block,
)
from .link import NONE, Links

DEFAULT_SCOPE = r"attention|attn|SelfAttention|MultiheadAttention"

MATMUL_OPS = re.compile(anchored(EAGER_MATMUL_OPS))
SOFTMAX_OPS = re.compile(anchored(EAGER_SOFTMAX_OPS))


@dataclass(slots=True)
class Block:
    """One attention call: its host roots (siblings for inferred blocks) and how it was found."""

    name: str
    found_by: FoundBy
    roots: list[int] = field(default_factory=list)
    step: int | None = None
    phase: Phase = Phase.FORWARD
    ts: int = 0  # first host (or device) start, for ordering
    forward: int | None = None  # a backward block: index of the forward block it is the backward of


class BlockFinder:
    """Marks host events with the block that owns them."""

    def __init__(self, scope: str | None = None) -> None:
        self.scope = re.compile(scope or DEFAULT_SCOPE, re.IGNORECASE)

    def scope_name(self, kind: int, name: str) -> str | None:
        """The block name if this host event opens a scope; ProfilerStep never does."""
        if kind == MODULE:
            label = name[len("nn.Module: "):]
            return label if self.scope.search(label) else None
        if kind == ANNOTATION and not name.startswith("ProfilerStep#") and self.scope.search(name):
            return name
        return None

    def find(self, tr: Trace, links: Links) -> tuple[list[Block], list[int]]:
        """Returns the blocks and, per host event, the owning block index or NONE."""
        host = tr.host
        parent = links.parent
        owner = [NONE] * len(host)
        blocks: list[Block] = []
        for i in links.order:  # parents come before children
            p = parent[i]
            if p != NONE and owner[p] != NONE:
                owner[i] = owner[p]
                continue
            h = host[i]
            name = self.scope_name(h.kind, h.name)
            found = FoundBy.MODULE if h.kind == MODULE else FoundBy.ANNOTATION
            if name is None and h.kind == OP and opens_fused_block(h.name):  # never a …_backward op
                name, found = h.name, FoundBy.FUSED_OP
            if name is not None:
                owner[i] = len(blocks)
                blocks.append(Block(name, found, [i], ts=h.ts))
        self._infer(tr, links, owner, blocks)
        _assign_steps(links, blocks)
        return blocks, owner

    def _infer(self, tr: Trace, links: Links, owner: list[int], blocks: list[Block]) -> None:
        """matmul-family op, then softmax, then matmul-family op, siblings under one parent."""
        names = tr.names
        if names is not None and not any(SOFTMAX_OPS.match(n) for n in names):
            return  # no softmax op in the file (fused attention models): no such run; the walk is skipped
        host = tr.host
        children: dict[int, list[int]] = {}
        for i in links.order:
            if owner[i] == NONE and host[i].kind == OP:
                p = links.op_parent[i]
                if p == NONE or owner[p] == NONE:
                    children.setdefault(p, []).append(i)
        new_roots: list[list[int]] = []
        for p, kids in children.items():
            if p == NONE:
                kids = [k for k in kids if links.op_parent[k] == NONE]
            last_mm = None
            saw_softmax = False
            for pos, k in enumerate(kids):
                nm = host[k].name
                if MATMUL_OPS.match(nm):
                    if saw_softmax and last_mm is not None:
                        new_roots.append(kids[last_mm: pos + 1])
                        last_mm, saw_softmax = None, False
                    else:
                        last_mm = pos
                elif SOFTMAX_OPS.match(nm) and last_mm is not None:
                    saw_softmax = True
        if not new_roots:
            return
        for roots in new_roots:
            b = len(blocks)
            blocks.append(Block("inferred attention", FoundBy.INFERRED, roots, ts=host[roots[0]].ts))
            for r in roots:
                owner[r] = b
        for i in links.order:  # hand the new roots' descendants to their block
            p = links.parent[i]
            if owner[i] == NONE and p != NONE and owner[p] != NONE:
                owner[i] = owner[p]


def _assign_steps(links: Links, blocks: list[Block]) -> None:
    for b in blocks:
        b.step = links.step[b.roots[0]]


# ---------------------------------------------------------------------------------------------
# Blocks found from device kernels alone (no host op shows them)

MAX_BETWEEN = 4  # kernels allowed between a GEMM run and the softmax (scale, mask, dropout, layout)


def find_kernel_blocks(tr: Trace, links: Links, blocks: list[Block], cats: Sequence[Category],
                       dev_owner: list[int]) -> None:
    """Add the blocks that only the classified kernels show; ``dev_owner`` gets their events."""
    fused = _fused_kernel_blocks(tr, links, blocks, cats, dev_owner)
    _pair_kernel_blocks(blocks, fused)
    _pair_kernel_blocks(blocks, _inferred_kernel_blocks(tr, links, blocks, cats, dev_owner))


def short_kernel_name(name: str) -> str:
    """``void ns::kernel<…>(…)`` → ``ns::kernel``: a readable block name for fused kernels."""
    n = compact_kernel_name(name)
    cut = len(n)
    for ch in "<(":
        k = n.find(ch)
        if 0 < k < cut:
            cut = k
    return n[:cut].strip() or name[:60]


def _by_stream(dev: Sequence[DeviceEvent], events: list[int]) -> list[list[int]]:
    """``events`` grouped by stream, each group in start order (ties in index order)."""
    starts = [d.ts for d in dev]
    order = sorted(events, key=starts.__getitem__)  # two stable sorts on key lists: no tuple per event
    streams = [d.stream for d in dev]
    order.sort(key=streams.__getitem__)
    return [list(g) for _, g in groupby(order, key=streams.__getitem__)]


def _fused_kernel_blocks(tr: Trace, links: Links, blocks: list[Block], cats: Sequence[Category],
                         dev_owner: list[int]) -> list[int]:
    """Runs of fused-attention kernels on one stream that no host block owns (graphs, compiled code).

    Only linked events count: an orphan launched before the window is reported as unlinked,
    never guessed into a block. Memory kernels *between* two fused kernels of a run (SageAttention
    zero-fills its outputs between quantising and attending) join the run. Returns the new blocks.
    """
    dev = tr.device
    linked = links.device_linked
    longest: dict[int, int] = {}  # block -> its longest fused kernel, which names it
    fused, memory = Category.FUSED_ATTENTION, Category.MEMORY  # hoisted: this loop sees every device event
    for g in _by_stream(dev, list(range(len(dev)))):
        current = NONE
        between: list[int] = []
        for j in g:
            free = dev_owner[j] == NONE and linked[j]
            if free and cats[j] == fused:
                if current == NONE:
                    lf = links.device_leaf[j]
                    current = len(blocks)
                    blocks.append(Block(short_kernel_name(dev[j].name), FoundBy.FUSED_KERNEL, [],
                                        links.step[lf] if lf != NONE else None, Phase.FORWARD, dev[j].ts))
                for k in between:
                    dev_owner[k] = current
                between.clear()
                dev_owner[j] = current
                if current not in longest or dev[j].dur > dev[longest[current]].dur:
                    longest[current] = j
            elif free and current != NONE and cats[j] == memory:
                between.append(j)
            else:
                current = NONE
                between.clear()
    for b, j in longest.items():  # named after the op its longest kernel computes (vocab.KERNEL_LABELS)
        lab = kernel_label(dev[j].name)
        blocks[b].name = lab.name if lab is not None and lab.name is not None else short_kernel_name(dev[j].name)
        blocks[b].phase = lab.phase if lab is not None else Phase.FORWARD
    return list(longest)


def _inferred_kernel_blocks(tr: Trace, links: Links, blocks: list[Block], cats: Sequence[Category],
                            dev_owner: list[int]) -> list[int]:
    """Eager attention that no host op shows: compiled code (inductor) launches its GEMMs and fused softmax
    from one graph call. On each stream, a softmax kernel with a run of GEMM kernels shortly before and
    after it, none owned by a block, is one ``inferred`` block: forward QKᵀ → softmax → PV, backward
    dV, dP → softmax backward → dQ, dK. Returns the new blocks.
    """
    dev = tr.device
    linked = links.device_linked
    streams = {dev[j].stream for j, c in enumerate(cats)
               if c == Category.SOFTMAX and dev_owner[j] == NONE and linked[j]}
    if not streams:  # no softmax kernel left outside a block: the common case, no sort
        return []
    new: list[int] = []
    for g in _by_stream(dev, [j for j in range(len(dev)) if dev[j].stream in streams]):
        free = [j for j in g if dev_owner[j] == NONE and linked[j] and dev[j].kind == "kernel"]
        free_cats = [cats[j] for j in free]
        k = 0
        while k < len(free):
            run = _gemm_softmax_gemm(free_cats, k) if free_cats[k] == Category.SOFTMAX else None
            if run is None:
                k += 1
                continue
            lo, hi = run
            first = free[lo]
            lf = links.device_leaf[first]
            phase = Phase.BACKWARD if "backward" in dev[free[k]].name.lower() else Phase.FORWARD
            new.append(len(blocks))
            blocks.append(Block("inferred attention", FoundBy.INFERRED, [], links.step[lf] if lf != NONE else None,
                                phase, dev[first].ts))
            for j in free[lo: hi + 1]:
                dev_owner[j] = new[-1]
            k = hi + 1
    return new


def _gemm_softmax_gemm(cats: Sequence[Category], k: int) -> tuple[int, int] | None:
    """(first, last) of the GEMM run before the softmax at ``k`` to the GEMM run after it, each within
    MAX_BETWEEN other kernels of it, or None when either run is missing."""
    matmul, softmax = Category.MATMUL, Category.SOFTMAX
    n = len(cats)
    lo = k - 1  # the GEMM run before: at most MAX_BETWEEN kernels back
    while lo >= 0 and k - lo <= MAX_BETWEEN + 1 and cats[lo] != matmul and cats[lo] != softmax:
        lo -= 1
    hi = k + 1
    while hi < n and hi - k <= MAX_BETWEEN + 1 and cats[hi] != matmul and cats[hi] != softmax:
        hi += 1
    if lo < 0 or hi >= n or cats[lo] != matmul or cats[hi] != matmul:
        return None
    while lo > 0 and cats[lo - 1] == matmul:
        lo -= 1
    while hi + 1 < n and cats[hi + 1] == matmul:
        hi += 1
    return lo, hi


def _pair_kernel_blocks(blocks: list[Block], found: list[int]) -> None:
    """Blocks found from kernels alone have no autograd link: in each step, when there are as many backward
    blocks of a kind as forward ones, they pair last-to-first (autograd runs the layers in reverse)."""
    groups: dict[tuple[str, int | None, Phase], list[int]] = defaultdict(list)
    for b in found:
        blk = blocks[b]
        groups[(blk.found_by, blk.step, blk.phase)].append(b)
    for (found_by, step, phase), bwd in groups.items():
        fwd = groups.get((found_by, step, Phase.FORWARD), [])
        if phase == Phase.BACKWARD and len(fwd) == len(bwd):
            fwd.sort(key=lambda b: blocks[b].ts)
            bwd.sort(key=lambda b: blocks[b].ts)
            for f, b in zip(reversed(fwd), bwd):
                blocks[b].forward = f
