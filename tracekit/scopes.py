"""Find attention blocks: host intervals that each compute one attention call.

Order (``shared/docs/attribution.md``): a scope-matching ``record_function`` or
``nn.Module`` slice (outermost wins), then a fused attention op outside any scope,
then an inferred eager pattern (matmul → softmax → matmul under one parent). Fused
attention kernels that no host block owns (CUDA/HIP graphs, compiled regions) become
``fused-kernel`` blocks later, in :mod:`tracekit.attribute`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .link import NONE, Links
from .model import ANNOTATION, MODULE, OP, Trace

DEFAULT_SCOPE = r"attention|attn|SelfAttention|MultiheadAttention"

# Ops that are one whole attention call. Named patterns, searched in the op name.
FUSED_ATTENTION_OPS = (
    ("sdpa", r"^aten::(scaled_dot_product_attention|_scaled_dot_product_\w*attention\w*)$"),
    ("aten-fused-backend", r"^aten::_(flash|efficient|cudnn)_attention_forward$"),
    ("native-mha", r"^aten::_native_multi_head_attention$"),
    ("flex-attention", r"^(aten::_?flex_attention|higher_order::flex_attention)"),
    ("flash-attn", r"^flash_attn(_\w+)?::"),
    ("vllm-attention", r"^vllm::\w*attention\w*$"),
    ("aiter-mha", r"^aiter::(mha|fmha)\w*$"),
    ("sglang-attention", r"^sglang\w*::\w*(mha|attention)\w*$"),
)

MATMUL_OPS = re.compile(r"^aten::(matmul|bmm|baddbmm|einsum|mm)$")
SOFTMAX_OPS = re.compile(r"^aten::(softmax|_softmax|_safe_softmax)$")

FOUND_BY = ("annotation", "module", "fused-op", "inferred", "fused-kernel")


@dataclass(slots=True)
class Block:
    """One attention call: its host roots (siblings for inferred blocks) and how it was found."""

    name: str
    found_by: str
    roots: list[int] = field(default_factory=list)
    step: int | None = None
    phase: str = "forward"
    ts: int = 0  # first host (or device) start, for ordering


class BlockFinder:
    """Marks host events with the block that owns them."""

    def __init__(self, scope: str | None = None):
        self.scope = re.compile(scope or DEFAULT_SCOPE, re.IGNORECASE)
        self.fused = [(name, re.compile(p)) for name, p in FUSED_ATTENTION_OPS]
        self._fused_cache: dict[str, bool] = {}

    def is_fused_op(self, name: str) -> bool:
        hit = self._fused_cache.get(name)
        if hit is None:
            hit = self._fused_cache[name] = any(p.search(name) for _, p in self.fused)
        return hit

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
            found = "module" if h.kind == MODULE else "annotation"
            if name is None and h.kind == OP and self.is_fused_op(h.name):
                name, found = h.name, "fused-op"
            if name is not None:
                owner[i] = len(blocks)
                blocks.append(Block(name, found, [i], ts=h.ts))
        self._infer(tr, links, owner, blocks)
        _assign_steps(links, blocks)
        return blocks, owner

    def _infer(self, tr: Trace, links: Links, owner: list[int], blocks: list[Block]) -> None:
        """matmul-family op, then softmax, then matmul-family op, siblings under one parent."""
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
            blocks.append(Block("inferred attention", "inferred", roots, ts=host[roots[0]].ts))
            for r in roots:
                owner[r] = b
        for i in links.order:  # hand the new roots' descendants to their block
            p = links.parent[i]
            if owner[i] == NONE and p != NONE and owner[p] != NONE:
                owner[i] = owner[p]


def _assign_steps(links: Links, blocks: list[Block]) -> None:
    for b in blocks:
        b.step = links.step[b.roots[0]]
