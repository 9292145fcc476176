"""What a prediction reads from an analysed device trace, per block (:class:`.predict.CoreFacts`).

* The shape, from the eager core's score product's recorded inputs (``[..., Lq, d] @ [..., d, Lk]``): batch and
  heads where the product ran on 4-D tensors, only their product where it ran on ``[B*H, L, d]``.
* The eager core's busy time: the block's device events launched from inside its chain of ops, score product to
  context product (Block.core_ops), each event at its share of the block's busy time (so the parts never exceed
  the block).
* The repeat_kv copies' busy time (tracekit.analysis.hints.facts.RepeatKv: the gqa-repeat-kv hint's walk).
* Whether the chain holds a mask op (:data:`MASK_OPS`), for ``--mask auto``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ...model import Trace
from ...results.whatif import Shape
from ..blocks.discovery import Block
from ..context import StageContext
from ..flops import dtype_class
from ..hints.facts import RepeatKv, _Inputs
from ..link import NONE, Links, nearest_above
from .predict import CoreFacts

__all__ = ["MASK_OPS", "core_facts"]


@dataclass(frozen=True, slots=True)
class MaskOp:
    """An op between the score product and the softmax that masks scores, and how it is told from one that does
    not (``tensor``: it must take a second tensor input of 2 dims or more: a scalar add is a softcap or a scale)."""

    name: str
    pattern: str
    tensor: bool
    why: str


MASK_OPS: tuple[MaskOp, ...] = (
    MaskOp("masked-fill", r"aten::masked_fill_?", False, "fills masked scores with -inf (GPT-2, the H200 sweep)"),
    MaskOp("where", r"aten::where", False, "selects -inf where the mask is false (torch.where masking)"),
    MaskOp("additive", r"aten::add_?", True, "adds a [B, 1, Lq, Lk] mask of 0 and -inf (HF eager attention)"),
)
_MASK = [(re.compile(m.pattern), m) for m in MASK_OPS]
_LEFT = {"aten::baddbmm": 1}  # where the product's first matrix operand sits (else 0)


def core_facts(ctx: StageContext) -> list[CoreFacts]:
    """One CoreFacts per block of a device trace whose stages have all run, in block order."""
    tr, links = ctx.tr, ctx.need(ctx.links, "links")
    share = ctx.need(ctx.walk, "device walk").dev_share
    members = ctx.need(ctx.device_time, "device time").members
    kv, inp = RepeatKv(tr, links), _Inputs(tr)
    out = []
    for b, (blk, r) in enumerate(zip(ctx.blocks, ctx.block_results)):
        core_ns, kv_ns, heads_kv = _split(links, blk, members.get(b, []), share, kv)
        shape, reason = _shape(tr, inp, blk, heads_kv)
        out.append(CoreFacts(name=r.name, kind=r.kind, step=r.step, ordinal=r.ordinal, phase=r.phase, shape=shape,
                             mask_op=_masked(tr, inp, blk), block_us=r.total_us, eager_core_us=core_ns / 1000,
                             repeat_kv_us=kv_ns / 1000, host_us=r.host_us, reason=reason))
    return out


def _split(links: Links, blk: Block, js: Sequence[int], share: Sequence[int],
           kv: RepeatKv) -> tuple[int, int, int | None]:
    """(ns of the block's events launched inside its core chain, ns of its repeat_kv copies, their KV heads)."""
    core = set(blk.core_ops)
    if not core:
        return 0, 0, None
    inside: dict[int, int] = {}  # (nearest_above's memo: the core op around each event walked, or NONE)
    parent, leaf, launcher = links.parent, links.device_leaf, links.launcher
    core_ns = kv_ns = 0
    heads_kv = None
    for j in js:
        lf = leaf[j]
        if lf == NONE:
            continue
        if nearest_above(parent, lf, core.__contains__, inside) != NONE:
            core_ns += share[j]
        elif (la := launcher[lf]) != NONE and kv.is_copy(la):
            kv_ns += share[j]
            heads_kv = heads_kv or kv.heads_kv(la)
    return core_ns, kv_ns, heads_kv


def _shape(tr: Trace, inp: _Inputs, blk: Block, heads_kv: int | None) -> tuple[Shape | None, str | None]:
    """The call's shape from its score product, or None and why."""
    if not blk.core_ops:
        return None, "no eager core (a fused op or kernels already): nothing to replace"
    score = blk.core_ops[0]
    dims, types = inp.dims(score), inp.types(score)
    if not dims or not types:
        return None, "no recorded shapes (profile with record_shapes=True)"
    k = _LEFT.get(tr.host[score].name, 0)
    q, kt = (dims[k], dims[k + 1]) if len(dims) > k + 1 else (None, None)
    if not (isinstance(q, list) and isinstance(kt, list) and len(q) in (3, 4) and len(kt) == len(q)
            and all(type(x) is int and x > 0 for x in q + kt) and q[-1] == kt[-2]):
        return None, f"the score product's inputs are not [..., Lq, d] @ [..., d, Lk] ({tr.host[score].name})"
    four = len(q) == 4
    bh = q[0] * q[1] if four else q[0]
    heads_q = q[1] if four else None
    return Shape(batch_heads=bh, batch=q[0] if four else None, heads_q=heads_q,
                 heads_kv=heads_kv if heads_kv else heads_q, len_q=q[-2], len_k=kt[-1], head_dim=q[-1],
                 dtype=dtype_class(types[k] if len(types) > k else None)), None


def _masked(tr: Trace, inp: _Inputs, blk: Block) -> bool:
    """Whether the core chain holds a mask op (:data:`MASK_OPS`)."""
    for i in blk.core_ops:
        name = tr.host[i].name
        for rx, m in _MASK:
            if rx.fullmatch(name) and (not m.tensor or _tensor_operand(inp, i)):
                return True
    return False


def _tensor_operand(inp: _Inputs, i: int) -> bool:
    dims = inp.dims(i)
    return dims is not None and len(dims) > 1 and isinstance(dims[1], list) and len(dims[1]) >= 2
