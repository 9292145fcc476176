"""Find attention blocks: host intervals that each compute one attention call.

Order (docs/attribution.md, "Attention blocks"): a scope-matching ``record_function`` or
``nn.Module`` slice (outermost wins), then a fused attention op outside any scope,
then an inferred eager pattern (matmul → softmax → matmul under one parent). Fused
attention kernels that no host block owns (CUDA/HIP graphs, compiled regions) become
``fused-kernel`` blocks later, in :mod:`tracekit.attribute`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .link import NONE, Links
from ..model import ANNOTATION, MODULE, OP, Trace
from ..vocab import EAGER_MATMUL_OPS, EAGER_SOFTMAX_OPS, FoundBy, Phase, anchored, opens_fused_block

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
