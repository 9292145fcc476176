"""Find attention blocks: host intervals that each compute one attention call.

Order (docs/attribution.md, "Attention blocks"): a scope-matching ``record_function`` or
``nn.Module`` slice (outermost wins), then a fused attention op outside any scope,
then an inferred eager pattern (matmul → softmax → matmul under one parent). Then, once the device
events are classified (:func:`find_kernel_blocks`, in :mod:`.kernels`, a later stage): fused attention
kernels that no host block owns (CUDA/HIP graphs, compiled regions) become ``fused-kernel`` blocks, and a
GEMM → softmax → GEMM run of kernels that none owns an ``inferred`` one. A scope around torch.compile code takes a
``compiled-region`` core (:mod:`.compiled`, issue 38). All block discovery lives in this package.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate, chain, compress, repeat
from operator import eq
from typing import Any

import orjson

from ...model import ANNOTATION, MODULE, OP, HostEvent, Trace
from ...results.attribution import Evidence
from ...vocab import (
    EAGER_MATMUL_OPS, EAGER_SOFTMAX_OPS, FUSED_ATTENTION_OPS, GROUPED_GEMM_OPS, LINEAR_OPS, LOW_PRECISION_GEMM_OPS,
    QUANTIZED_LINEAR_OPS, Category, CoreKind, FoundBy, OpPattern, Phase, anchored, compact_kernel_name,
    opens_fused_block,
)
from ..link import NONE, HostTree, Links, nearest_above
from .compiled import Regions, core_names, region_events, region_work

DEFAULT_SCOPE = r"attention|attn|SelfAttention|MultiheadAttention"

MATMUL_OPS = re.compile(anchored(EAGER_MATMUL_OPS))
SOFTMAX_OPS = re.compile(anchored(EAGER_SOFTMAX_OPS))


@dataclass(frozen=True, slots=True)
class DiscoveryRule:
    """One way a block is found, in the order the finder applies them; ``why`` is the fact behind it."""

    name: str
    found_by: FoundBy
    why: str


DISCOVERY_RULES: tuple[DiscoveryRule, ...] = (
    DiscoveryRule("innermost-scope", FoundBy.MODULE,
                  "a record_function range or nn.Module slice matching the scope, the innermost one around an "
                  "attention core: hybrids name whole layers after their mixer (JambaAttentionDecoderLayer, "
                  "Zamba2AttentionDecoderLayer, MllamaCrossAttentionDecoderLayer), and the layer also holds the "
                  "norms and the MoE FFN; a scope holding no core is no block"),
    DiscoveryRule("fused-op", FoundBy.FUSED_OP,
                  "a fused attention op outside any scope block (SDPA and its backends, flash_attn, vLLM, aiter)"),
    DiscoveryRule("eager-ops", FoundBy.INFERRED,
                  "a score product, a softmax of its output and a context product consuming it, siblings under "
                  "one parent with no layer boundary between (EAGER_BREAKERS) and, where shapes were recorded, "
                  "[..., Lq, Lk] on all three (a MoE router's [tokens, experts] softmax fails it)"),
    DiscoveryRule("fused-kernels", FoundBy.FUSED_KERNEL,
                  "a run of fused attention kernels on one stream that no host block owns (CUDA/HIP graph "
                  "replays, compiled code), with the other kernels of the same call (KERNEL_GROUPS)"),
    DiscoveryRule("eager-kernels", FoundBy.INFERRED,
                  "GEMM → softmax → GEMM kernels that no host block owns (inductor launches them from one call)"),
)

# Ops that end a score → softmax → context search: none of them sits inside one eager attention call.
EAGER_BREAKERS: tuple[OpPattern, ...] = (
    OpPattern("linear-gemm", "|".join(p.pattern for p in (LINEAR_OPS, LOW_PRECISION_GEMM_OPS, GROUPED_GEMM_OPS,
                                                          QUANTIZED_LINEAR_OPS)),
              "a projection or an expert GEMM: a MoE router's gate is a linear before its softmax"),
    *FUSED_ATTENTION_OPS,  # (reason: a fused attention call between two products means they are two other calls)
    OpPattern("norm", r"aten::(?:layer_norm|native_layer_norm|rms_norm|_fused_rms_norm|group_norm|native_group_norm"
                      r"|batch_norm|native_batch_norm|_batch_norm_impl_index)",
              "a norm between two products is a layer boundary (pre-norm blocks start with one)"),
)
BREAKER = re.compile(anchored(*EAGER_BREAKERS))


@dataclass(frozen=True, slots=True)
class GlueRule:
    """Shape-changing glue that rule eager-ops looks through when a recorded shape disagrees: ``side`` says where it
    sits ("score": between the score product and the softmax; "context": between the softmax and the context
    product), ``ops`` which sibling ops it is (a full match), ``why`` what it does to the dims and how they are
    checked. The glue explains a disagreement only where its own check holds: the shape test is kept, not dropped."""

    name: str
    side: str
    ops: str
    why: str


SHAPE_GLUE: tuple[GlueRule, ...] = (
    GlueRule("cat-columns", "score", r"aten::cat",
             "attention sinks (GPT-OSS: [B, H, Lq, Lk] cat a sink column to Lk + 1) and Longformer's global keys' "
             "scores join the scores before the softmax: one of the cat's recorded inputs is the score product's "
             "[.., Lq, Lk] and the inputs summed along one dim are the softmax input"),
    GlueRule("pad", "score", r"aten::(?:pad|constant_pad_nd)",
             "chunked sliding windows pad their scores (Longformer): the softmax input has the score's rank and no "
             "smaller Lq or Lk (a pad's own dims are not kept at load)"),
    GlueRule("narrow", "context", r"aten::(?:narrow|slice|select|split\w*|chunk|unbind|index)",
             "the sink column is sliced off after the softmax (GPT-OSS), a band or the global part narrowed out "
             "(BigBird, Longformer): the context product's first matrix has the softmax's rank and no larger dim"),
    GlueRule("layout", "context", r"aten::(?:transpose|permute|t|swapaxes|movedim)",
             "a narrowed probability matrix transposed before its product (Longformer's global part): with a "
             "narrowing, the first matrix's dims are compared sorted, each no larger than the softmax's"),
)
# How far one call reaches, beyond its core (issue 38): refinements of rules eager-ops and fused-kernels, in the order
# they apply. (Data for the docs and tests; the functions named in each reason apply them.)
EXTENT_RULES: tuple[DiscoveryRule, ...] = (
    DiscoveryRule("first-score", FoundBy.INFERRED,
                  "products before the score product with no breaker or softmax between, and no recorded 2-D operand "
                  "(a projection), compute the same scores in parts (Longformer's window einsum before its mask "
                  "einsum, BigBird's bands): the block starts at the first (_first_score)"),
    DiscoveryRule("last-context", FoundBy.INFERRED,
                  "products after the context product with no breaker or softmax between that no softmax follows "
                  "before a breaker compute the same context in parts (Longformer's window context after its global "
                  "columns'): the block ends at the last (_last_context)"),
    DiscoveryRule("one-chain", FoundBy.INFERRED,
                  "consecutive score → softmax → context triples with at most MAX_EAGER_GAP siblings and no breaker "
                  "between are one call (BigBird's block-sparse attention: five softmaxes a call); layers are always "
                  "apart by a breaker, and a projection alone is none where rule input-projections holds (_one_chain)"),
    DiscoveryRule("input-projections", FoundBy.INFERRED,
                  "two triples with only projections of the layer's input between them are one call too (Longformer's "
                  "global tokens: query_global/key_global/value_global linears, then bmm → softmax → bmm, after the "
                  "windowed triple): nothing that ends a layer lies between: no breaker but a projection, and from "
                  "the first projection on no LAYER_ENDS op (a residual add, a norm's pieces, an MLP's activation); "
                  "where shapes were recorded, each projection's input has the rank and width of the input of the "
                  "projection before the chain and no larger dim (the same tokens or some of them: an output "
                  "projection or a cross-attention's encoder keys may differ) (_input_projections)"),
    DiscoveryRule("owned-lead", FoundBy.FUSED_KERNEL,
                  "a free attention kernel of a KERNEL_GROUPS group within MAX_BETWEEN kernels after a group's "
                  "'before' member that a block owns (SageAttention's quantise) joins that block, and in a graph "
                  "capture its launch is recorded by that block: one call, one block (kernels._KernelRun, "
                  "kernels.CaptureLead)"),
)
# Rule input-projections: the breakers a call may hold between two of its triples, and the ops that end a layer after
# a projection. Every transformer layer ends in an output projection whose result a residual add joins, then a norm
# (an op, or its pieces where a model writes it out) and an MLP (an activation) or another sublayer.
INPUT_PROJECTION = re.compile(anchored(LINEAR_OPS, LOW_PRECISION_GEMM_OPS, QUANTIZED_LINEAR_OPS))
LAYER_ENDS: tuple[OpPattern, ...] = (
    OpPattern("residual-add", r"aten::add_?|(?:\w+::)?\w*(?:residual|dropout_add|fused_add)\w*",
              "an add after a projection joins its output to the residual stream (an output projection's), or a "
              "fused residual add does (vLLM's fused_add_rms_norm): the layer's end. (An add before the first "
              "projection is the call's own: Longformer adds its global columns' context to the window's.)"),
    OpPattern("norm", r"(?:\w+::)?\w*norm\w*|aten::(?:pow|mean|rsqrt|sqrt|var|var_mean|std|std_mean)",
              "a norm between sublayers: an op (any namespace), or its pieces where a model writes it out (Llama's "
              "RMSNorm, T5's: pow, mean, rsqrt)"),
    OpPattern("activation", r"(?:\w+::)?\w*(?:gelu|silu|relu|sigmoid|tanh|mish|hardswish|elu|softplus|glu)\w*",
              "an MLP's activation (or an expert's, a Mamba mixer's, vLLM's silu_and_mul): a feed-forward sublayer "
              "between the triples"),
    OpPattern("router", r"aten::(?:softmax|_softmax|_safe_softmax|topk)",
              "a softmax that is no triple's, or a top-k: a MoE router's gating between the triples"),
)
LAYER_END = re.compile(anchored(*LAYER_ENDS))
_GLUE = {side: re.compile("|".join(f"(?:{g.ops})" for g in SHAPE_GLUE if g.side == side))
         for side in ("score", "context")}
_GLUE_OP = {g.name: re.compile(g.ops) for g in SHAPE_GLUE}
MAX_EAGER_GAP = 48  # sibling ops allowed between a product and the softmax: scale, softcap, mask, casts, views, and
# T5's first layer computing its relative position bias (about 30 ops); the breakers, not the gap, end a layer
# Siblings that do not count against MAX_EAGER_GAP: views, slices, transposes, copies and joins only move or reshape
# the scores. Chunked sliding windows (Longformer) build their diagonals from about 40 of them between the score
# einsum and the softmax; an op that computes (a mask, a scale, a where) still counts.
GAP_FREE = re.compile(r"aten::(?:view|reshape|_reshape_alias|_unsafe_view|as_strided|slice|select|narrow|transpose|"
                      r"permute|t|expand|expand_as|unsqueeze|squeeze|flatten|unflatten|contiguous|clone|copy_|to|"
                      r"_to_copy|cat|pad|constant_pad_nd|item|_local_scalar_dense|detach|alias|lift_fresh)")
_LEFT_OPERANDS = {"aten::baddbmm": 1, "aten::addbmm": 1}  # where the first matrix operand sits (else 0)
MAX_BETWEEN = 4  # kernels allowed between a GEMM run and the softmax (scale, mask, dropout, layout)



@dataclass(slots=True)
class Block:
    """One attention call: its host roots (siblings for inferred blocks), how it was found and why."""

    name: str
    found_by: FoundBy
    roots: list[int] = field(default_factory=list)
    step: int | None = None
    phase: Phase = Phase.FORWARD
    ts: int = 0  # first host (or device) start, for ordering
    forward: int | None = None  # a backward block: index of the forward block it is the backward of
    evidence: Evidence | None = None
    recorded: dict[str, int] | None = None  # in a graph capture: the kernels its launches recorded, by name
    # The host ops of its eager core chains (score product .. context product, with the ops between), in order:
    # what a fused kernel would replace (tracekit.analysis.whatif). () without an eager core.
    core_ops: tuple[int, ...] = ()


@dataclass(slots=True)
class _Eager:
    """A score → softmax → context triple of sibling ops (host indices) and the siblings it spans."""

    score: int
    softmax: int
    context: int
    roots: list[int]
    # The core chains' ops (Block.core_ops) where they are not all of ``roots``: the projections between two
    # triples that rule input-projections joins are the call's but no part of what a fused kernel replaces.
    core: list[int] | None = None


class BlockFinder:
    """Marks host events with the block that owns them (rules innermost-scope, fused-op, eager-ops)."""

    def __init__(self, scope: str | None = None) -> None:
        self.scope = re.compile(scope or DEFAULT_SCOPE, re.IGNORECASE)
        self._named: dict[tuple[int, str], str | None] = {}  # (kind, name) -> scope_name: layers repeat names

    def scope_name(self, kind: int, name: str) -> str | None:
        """The block name if this host event opens a scope; ProfilerStep never does."""
        key = (kind, name)
        got = self._named.get(key, self)
        if got is self:
            got = self._named[key] = self._scope_name(kind, name)
        return got  # type: ignore[return-value]  # (self: the miss marker, replaced above)

    def _scope_name(self, kind: int, name: str) -> str | None:
        if kind == MODULE:
            label = name[len("nn.Module: "):]
            return label if self.scope.search(label) else None
        if kind == ANNOTATION and not name.startswith("ProfilerStep#") and self.scope.search(name):
            return name
        return None

    def find(self, tr: Trace, links: Links, cats: Sequence[Category] | None = None) -> tuple[list[Block], list[int]]:
        """Returns the blocks and, per host event, the owning block index or NONE.

        ``cats``, the device events' categories, lets a fused attention kernel count as a scope's core.
        """
        cores = _Cores(tr, links, self, cats)
        blocks = cores.blocks()
        _assign_steps(links, blocks)
        return blocks, _owners(tr, links, blocks)


def _owners(tr: Trace, links: Links, blocks: list[Block]) -> list[int]:
    """Per host event, the block whose root is the innermost around it (itself included), or NONE. A root's subtree
    is one run of the sweep's positions (link.HostTree): the runs are assigned outermost first, so an inner root's
    overwrites its block's; a root of two blocks is the later block's."""
    import numpy as np

    tree = links.host_tree(tr)
    roots = [(r, b) for b, blk in enumerate(blocks) for r in blk.roots]
    owner = np.zeros(len(tr.host), np.int64)  # per position: 1 + the owning block, 0 for none
    if roots:
        at = tree.position[[r for r, _ in roots]].tolist()
        ends = tree.end[at].tolist()
        for p, b, e in sorted(zip(at, [b for _, b in roots], ends)):
            owner[p:e] = b + 1
    table = np.array([NONE, *range(len(blocks))], object)  # (shared ints: none made per event)
    return table[owner[tree.position]].tolist()


class _Cores:
    """The attention cores of a trace (fused ops, eager triples, fused kernels' launch sites) and the blocks
    they make: each core is claimed by the innermost scope around it, else it is a block of its own kind."""

    def __init__(self, tr: Trace, links: Links, finder: BlockFinder, cats: Sequence[Category] | None) -> None:
        self.tr, self.links, self.finder = tr, links, finder
        self._key_of: dict[int, int] = {}  # non-op host event -> its sibling key (sibling_key)
        names = tr.names if tr.names is not None else frozenset(h.name for h in tr.host)
        self.ops = _NamedOps(tr, links, names)
        self.fused_ops = self.ops.of(self.ops.fused)
        self.is_fused = set(self.fused_ops)
        self.eager = _eager_triples(tr, links, self.ops, self.sibling_key, self.is_key)
        self.kernels = _kernel_sites(links, cats)  # launch-site host event -> fused kernels
        self._scope_of: dict[int, int] = {}
        self.cats = cats
        self.names = names

    def scope_around(self, i: int) -> int:
        """The innermost scope-opening host event around ``i`` (itself included), or NONE."""
        return nearest_above(self.links.parent, i, self._opens_scope, self._scope_of)

    def _opens_scope(self, k: int) -> bool:
        h = self.tr.host[k]
        return h.kind != OP and self.finder.scope_name(h.kind, h.name) is not None

    def sibling_key(self, i: int) -> int:
        """The event whose ops count as ``i``'s siblings for rule eager-ops: the nearest op, scope or
        ProfilerStep around it. Other ranges and modules are transparent: the H200 sweep wraps each of
        QKᵀ, softmax and PV in a range of its own (qk_matmul, softmax, pv_matmul) under one scope."""
        host, parent, memo = self.tr.host, self.links.parent, self._key_of
        path = []
        k = parent[i]
        key = NONE
        while k != NONE:
            h = host[k]
            if h.kind == OP:
                key = k
                break
            got = memo.get(k)
            if got is not None:
                key = got
                break
            if self.is_key(h):
                key = k
                break
            path.append(k)
            k = parent[k]
        for k in path:
            memo[k] = key
        return key

    def is_key(self, h: HostEvent) -> bool:
        """Whether range or module ``h`` is a sibling key of the ops under it (a scope or a ProfilerStep), not one
        of the ranges and modules between a key and its ops (sibling_key)."""
        return h.name.startswith("ProfilerStep#") or self.finder.scope_name(h.kind, h.name) is not None

    def outermost_fused(self, i: int) -> int:
        """The outermost fused attention op around ``i`` (itself included), or NONE."""
        parent, fused = self.links.parent, self.is_fused
        top = NONE
        k = i
        while k != NONE:
            if k in fused:
                top = k
            k = parent[k]
        return top

    def blocks(self) -> list[Block]:
        """Every core claimed (scopes first), then one block per claiming scope, fused op and free eager triple,
        in start order."""
        claimed: dict[int, _Claim] = {}  # scope event -> what it holds
        fused_blocks: dict[int, _Claim] = {}  # outermost fused op outside scopes -> what it holds
        free_eager = self.claim_cores(claimed, fused_blocks)
        self.claim_kernel_triples(claimed)
        self.claim_compiled(claimed)
        self.claim_products(claimed)
        return self.make_blocks(claimed, fused_blocks, free_eager)

    def claim_cores(self, claimed: dict[int, _Claim], fused_blocks: dict[int, _Claim]) -> list[_Eager]:
        """Rules innermost-scope and fused-op: each fused op, fused kernel and eager triple to the innermost scope
        around it; a fused op outside scopes to its outermost fused op. Returns the eager triples no one claims."""
        host, dev = self.tr.host, self.tr.device
        for i in self.fused_ops:
            s = self.scope_around(i)
            c = claimed.setdefault(s, _Claim()) if s != NONE else fused_blocks.setdefault(self.outermost_fused(i),
                                                                                          _Claim())
            c.add_name(host[i].name)
        for leaf, js in self.kernels.items():
            s = self.scope_around(leaf)
            if s != NONE:
                for j in js:
                    claimed.setdefault(s, _Claim()).add_kernel(short_kernel_name(dev[j].name))
        free_eager: list[_Eager] = []
        for e in self.eager:
            s = self.scope_around(e.softmax)
            if s != NONE:
                claimed.setdefault(s, _Claim()).add_eager(self, e)
            elif self.outermost_fused(e.softmax) == NONE:
                free_eager.append(e)
        return free_eager

    def make_blocks(self, claimed: dict[int, _Claim], fused_blocks: dict[int, _Claim],
                    free_eager: list[_Eager]) -> list[Block]:
        """One block per claiming scope, per fused op outside scopes and per free eager triple, in start order."""
        host = self.tr.host
        out: list[Block] = []
        for s, c in claimed.items():
            h = host[s]
            name = self.finder.scope_name(h.kind, h.name) or h.name
            out.append(Block(name, FoundBy.MODULE if h.kind == MODULE else FoundBy.ANNOTATION, [s], ts=h.ts,
                             evidence=c.evidence("innermost-scope"), core_ops=tuple(c.core_ops)))
        for f, c in fused_blocks.items():
            out.append(Block(host[f].name, FoundBy.FUSED_OP, [f], ts=host[f].ts, evidence=c.evidence("fused-op")))
        for e in free_eager:
            c = _Claim()
            c.add_eager(self, e)
            out.append(Block("inferred attention", FoundBy.INFERRED, e.roots, ts=host[e.roots[0]].ts,
                             evidence=c.evidence("eager-ops"), core_ops=tuple(c.core_ops)))
        out.sort(key=lambda b: (b.ts, b.roots[0]))
        return out

    def claim_kernel_triples(self, claimed: dict[int, _Claim]) -> None:
        """Rule innermost-scope, kernels only: a scope with no core among its ops whose kernels run GEMM → softmax
        → GEMM (a range linked to its kernels by ``gpu_user_annotation`` alone, or ops the vocabulary does not
        know) holds an eager core. Only scopes around an unclaimed softmax kernel are looked at."""
        cats = self.cats
        if cats is None:
            return
        open_scopes = self._open_scopes(cats, claimed)
        if not open_scopes:
            return
        self._scope_kernels(cats, open_scopes, _around(self.links.parent, claimed))
        dev = self.tr.device
        for sc, js in open_scopes.items():
            js.sort(key=lambda j: dev[j].ts)
            run = _first_triple([cats[j] for j in js])
            if run is not None:
                lo, k, hi = run
                cl = claimed[sc] = _Claim()
                cl.kernels = [short_kernel_name(dev[js[i]].name) for i in (lo, k, hi)]
                cl.kernel_triple = True

    def _open_scopes(self, cats: Sequence[Category], claimed: dict[int, _Claim]) -> dict[int, list[int]]:
        """Unclaimed scopes around a softmax kernel -> [] (their kernels, filled by _scope_kernels)."""
        leaf = self.links.device_leaf
        open_scopes: dict[int, list[int]] = {}
        for j in _of_category(cats, Category.SOFTMAX):
            if leaf[j] != NONE:
                sc = self.scope_around(leaf[j])
                if sc != NONE and sc not in claimed:
                    open_scopes[sc] = []
        return open_scopes

    def _scope_kernels(self, cats: Sequence[Category], open_scopes: dict[int, list[int]], containers: set[int]) -> None:
        """Each open scope's GEMM and softmax kernels; a layer container's are none, nor a breaker op's GEMMs."""
        host, leaf, launcher = self.tr.host, self.links.device_leaf, self.links.launcher
        matmul = Category.MATMUL
        for j in sorted(_of_category(cats, matmul) + _of_category(cats, Category.SOFTMAX)):
            c = cats[j]
            if leaf[j] == NONE:
                continue
            sc = self.scope_around(leaf[j])
            if sc not in open_scopes or sc in containers:
                continue
            la = launcher[leaf[j]]
            if c == matmul and la != NONE and BREAKER.match(host[la].name):
                continue  # a projection's or an expert's GEMM (a router's gate) is no score or context product
            open_scopes[sc].append(j)

    def claim_compiled(self, claimed: dict[int, _Claim]) -> None:
        """Rule innermost-scope, compiled code (issue 38): a scope around a torch.compile region holds a
        ``compiled-region`` core. A scope whose core is only kernels (a FlexAttention template, GEMM → softmax →
        GEMM) says its core is compiled; a scope with no core takes what its regions show (compiled.SIGHTS), if
        anything. Layer containers never qualify. Before claim_products, so that a compiled call's bmm pair is
        never taken for linear attention."""
        regions = region_events(self.tr, self.names)
        if not regions:
            return
        around = _around(self.links.parent, claimed)
        open_scopes: dict[int, list[int]] = defaultdict(list)
        for r in regions:
            s = self.scope_around(r)
            if s == NONE or s in around:
                continue
            c = claimed.get(s)
            if c is None:
                open_scopes[s].append(r)
            elif c.region is None and not c.fused and not c.eager:
                c.region = self.tr.host[r].name
        if open_scopes:
            self._claim_regions(claimed, open_scopes, regions)

    def _claim_regions(self, claimed: dict[int, _Claim], open_scopes: dict[int, list[int]],
                       regions: list[int]) -> None:
        """Each open scope whose regions show a core (compiled.core_names) holds a compiled-region core."""
        host = self.tr.host
        wanted = {r for rs in open_scopes.values() for r in rs}
        work = region_work(self.tr, self.links, self.cats, Regions(self.links, regions), wanted, self.names)
        for s, rs in open_scopes.items():
            seen = core_names(self.tr, [work[r] for r in rs], host[rs[0]].name, short_kernel_name)
            if seen:
                c = claimed[s] = _Claim()
                c.region, c.kernels = host[rs[0]].name, list(seen)

    def claim_products(self, claimed: dict[int, _Claim]) -> None:
        """Rule innermost-scope, linear attention: a scope with no core and no block inside it whose own products
        (matrix products not inside another op) number two or more holds a softmax-free attention core. A layer
        container (its attention module a block of its own) never qualifies, so MoE expert bmms make no block."""
        host = self.tr.host
        if not self.ops.products:
            return
        for s, ops in self._own_products(self.ops.of(self.ops.products), claimed).items():
            if len(ops) >= 2:
                c = claimed[s] = _Claim()
                c.products = [host[i].name for i in ops[:4]]

    def _own_products(self, products: list[int], claimed: dict[int, _Claim]) -> dict[int, list[int]]:
        """Unclaimed scope (no layer container) -> its own product ops (of ``products``): those not inside another
        op."""
        host, parent = self.tr.host, self.links.parent
        around = _around(parent, claimed)
        own: dict[int, list[int]] = defaultdict(list)
        for i in products:
            p = parent[i]
            s = self.scope_around(i) if p == NONE or host[p].kind != OP else NONE
            if s != NONE and s not in claimed and s not in around:
                own[s].append(i)
        return own


def _first_triple(kc: Sequence[Category]) -> tuple[int, int, int] | None:
    """(first GEMM, softmax, last GEMM) positions of the first GEMM → softmax → GEMM run in ``kc``, or None."""
    for k, c in enumerate(kc):
        run = gemm_softmax_gemm(kc, k) if c == Category.SOFTMAX else None
        if run is not None:
            return run[0], k, run[1]
    return None


class _NamedOps:
    """The host ops whose names the rules look for: fused attention ops (rule fused-op), softmax ops (rule
    eager-ops) and matrix products (linear attention), found in one walk over the host events for all three, and
    none when the file has none of those names."""

    def __init__(self, tr: Trace, links: Links, names: frozenset[str]) -> None:
        self.host = tr.host
        self.fused = {n for n in names if opens_fused_block(n)}
        self.softmax = {n for n in names if SOFTMAX_OPS.match(n)}
        self.products = {n for n in names if MATMUL_OPS.match(n)}
        self.ops = _ops_named(tr, links, self.fused | self.softmax | self.products)
        self._names = links.host_tree(tr).names_of(tr) if self.ops else None

    def of(self, names: set[str]) -> list[int]:
        """The ops named one of ``names`` (one of the three sets), in index order: their name ids looked up."""
        if not names or self._names is None:
            return []
        import numpy as np

        ops = np.array(self.ops, np.int64)
        return ops[self._names.flags(names)[self._names.column[ops]]].tolist()


def _ops_named(tr: Trace, links: Links, names: set[str]) -> list[int]:
    """The ops named one of ``names``, in index order (the names' column: link.HostNames); none when none is."""
    if not names:
        return []
    tree = links.host_tree(tr)
    named = tree.names_of(tr).having(names)
    return named[tree.kind[tree.position[named]] == OP].tolist()


def _kernel_sites(links: Links, cats: Sequence[Category] | None) -> dict[int, list[int]]:
    """Launch-site host event -> its fused attention kernels (none on CPU-only traces)."""
    kernels: dict[int, list[int]] = defaultdict(list)
    if cats is not None:
        leaf = links.device_leaf
        for j in _of_category(cats, Category.FUSED_ATTENTION):
            if leaf[j] != NONE:
                kernels[leaf[j]].append(j)
    return kernels


def _of_category(cats: Sequence[Category], category: Category) -> list[int]:
    """The device events of ``category``, in index order (C loops: a few among many kernels)."""
    return list(compress(range(len(cats)), map(eq, cats, repeat(category))))


def _around(parent: Sequence[int], claimed: dict[int, _Claim]) -> set[int]:
    """The host events around a claimed scope: layer containers, never blocks of their own."""
    around: set[int] = set()
    for c in claimed:
        k = parent[c]
        while k != NONE and k not in around:
            around.add(k)
            k = parent[k]
    return around


@dataclass(slots=True)
class _Claim:
    """What one block's core is made of, gathered while the cores are claimed."""

    fused: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    eager: list[tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)
    products: list[str] = field(default_factory=list)
    kernel_triple: bool = False  # ``kernels`` are a GEMM → softmax → GEMM run, not fused attention kernels
    region: str | None = None  # the core runs in this compiled region (issue 38): ``kernels`` are what it shows
    core_ops: list[int] = field(default_factory=list)  # the eager chains' ops (Block.core_ops)

    def add_name(self, name: str) -> None:
        if name not in self.fused:
            self.fused.append(name)

    def add_kernel(self, name: str) -> None:
        if name not in self.kernels:
            self.kernels.append(name)

    def add_eager(self, cores: _Cores, e: _Eager) -> None:
        tr = cores.tr
        names = tuple(tr.host[i].name for i in (e.score, e.softmax, e.context))
        shapes = tuple(_dims_text(tr, i) for i in (e.score, e.softmax, e.context))
        self.eager.append((names, shapes if all(shapes) else ()))
        self.core_ops.extend(e.roots if e.core is None else e.core)

    def evidence(self, rule: str) -> Evidence:
        """Fused ops first (they name the call), then what a compiled region shows (a host eager triple, though,
        is a visible core of its own), then fused kernels, then the first eager triple."""
        if self.fused:
            return Evidence(rule=rule, core=CoreKind.FUSED_OP, names=tuple(self.fused[:4]))
        if self.region is not None and not self.eager:
            return Evidence(rule=rule, core=CoreKind.COMPILED_REGION, names=tuple(self.kernels[:4]))
        if self.kernels:
            core = CoreKind.EAGER_KERNELS if self.kernel_triple else CoreKind.FUSED_KERNEL
            return Evidence(rule=rule, core=core, names=tuple(self.kernels[:4]))
        if self.eager:
            names, shapes = self.eager[0]
            return Evidence(rule=rule, core=CoreKind.EAGER_OPS, names=names, shapes=shapes)
        return Evidence(rule=rule, core=CoreKind.PRODUCTS, names=tuple(self.products))


def _dims_text(tr: Trace, i: int) -> str:
    rec = tr.op_inputs.get(i)
    return rec.dims.decode("utf-8", "replace") if rec is not None and rec.dims else ""


def _dims(tr: Trace, i: int) -> list | None:
    """An op's recorded input dims (its ``Input Dims``, a JSON list), or None. (Read, never changed, by the rules.)"""
    rec = tr.op_inputs.get(i)
    return _parsed_dims(rec.dims) if rec is not None and rec.dims else None


@lru_cache(maxsize=1 << 12)
def _parsed_dims(text: bytes) -> list | None:
    """A recorded ``Input Dims`` text parsed, or None: memoised, as every layer records the same few shapes."""
    try:
        dims = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return dims if isinstance(dims, list) else None


def _matrix(dims: list, k: int) -> list[int] | None:
    if k >= len(dims) or not isinstance(dims[k], list) or len(dims[k]) < 2:
        return None
    m = dims[k]
    return m if all(isinstance(x, int) for x in m) else None


def _shapes_agree(tr: Trace, sibs: list[int], lo: int, pos: int, hi: int) -> bool:
    """The softmax input (sibling ``pos``) is [..., Lq, Lk]: the score product (``lo``) makes it (its operands
    [..., Lq, d] and [..., d, Lk]) and the context product (``hi``) consumes it as its first matrix, directly or
    through the shape-changing glue between them (SHAPE_GLUE). True where a shape was not recorded (or for einsum,
    whose equation decides its operands)."""
    ds = _dims(tr, sibs[pos])
    if ds is None:
        return True
    s = _matrix(ds, 0)
    if s is None:
        return False
    score, context = sibs[lo], sibs[hi]
    return ((_score_agrees(tr, score, s) or _score_through_glue(tr, score, s, sibs[lo + 1: pos]))
            and (_context_agrees(tr, context, s) or _context_through_glue(tr, context, s, sibs[pos + 1: hi])))


def _score_through_glue(tr: Trace, score: int, s: list[int], between: list[int]) -> bool:
    """The score product's [.., Lq, Lk] becomes the softmax input ``s`` through a cat or a pad between them."""
    out = _score_out(tr, score)
    if out is None:
        return False
    host = tr.host
    for i in between:
        name = host[i].name
        if not _GLUE["score"].fullmatch(name):
            continue
        if _GLUE_OP["cat-columns"].fullmatch(name):
            if _cat_explains(tr, i, out, s):
                return True
        elif len(s) == out[0] and s[-2] >= out[1] and s[-1] >= out[2]:
            return True  # a pad: its own dims are not kept, the ranks and sizes are checked
    return False


def _score_out(tr: Trace, score: int) -> tuple[int, int, int] | None:
    """(rank, Lq, Lk) of the score product's output from its recorded operands; None where not recorded."""
    name = tr.host[score].name
    da = _dims(tr, score) if name != "aten::einsum" else None
    if da is None:
        return None
    k = _LEFT_OPERANDS.get(name, 0)
    a, b = _matrix(da, k), _matrix(da, k + 1)
    if a is None or b is None:
        return None
    return max(len(a), len(b)), a[-2], b[-1]


def _cat_explains(tr: Trace, cat: int, out: tuple[int, int, int], s: list[int]) -> bool:
    """One of the cat's inputs is the score [.., Lq, Lk] (of its rank) and the inputs joined along one dim are
    ``s``."""
    parts = _cat_parts(tr, cat, len(s))
    if parts is None or not any(len(p) == out[0] and p[-2:] == [out[1], out[2]] for p in parts):
        return False
    return any(_joined_along(parts, s, d) for d in range(len(s)))


def _cat_parts(tr: Trace, cat: int, rank: int) -> list[list[int]] | None:
    """The cat's recorded input shapes (its first argument, a tensor list), each of ``rank`` int dims; else None."""
    dims = _dims(tr, cat)
    parts = dims[0] if dims and isinstance(dims[0], list) else None
    if not parts or not all(isinstance(p, list) and len(p) == rank and all(isinstance(x, int) for x in p)
                            for p in parts):
        return None
    return parts


def _joined_along(parts: list[list[int]], s: list[int], d: int) -> bool:
    """``parts`` agree with ``s`` on every dim but ``d``, and sum to it there."""
    others = all(p[k] == s[k] for p in parts for k in range(len(s)) if k != d)
    return others and sum(p[d] for p in parts) == s[d]


def _first_matrix(tr: Trace, i: int) -> list[int] | None:
    """The recorded dims of a product's first matrix operand (baddbmm's is its second input); None if unknown."""
    d = _dims(tr, i)
    return _matrix(d, _LEFT_OPERANDS.get(tr.host[i].name, 0)) if d is not None else None


def _context_through_glue(tr: Trace, context: int, s: list[int], between: list[int]) -> bool:
    """The context product's first matrix is the softmax output ``s`` narrowed (and maybe transposed) by the
    glue between them: same rank, no dim larger (compared sorted where a transpose is among the glue)."""
    host = tr.host
    names = [host[i].name for i in between if _GLUE["context"].fullmatch(host[i].name)]
    if not any(_GLUE_OP["narrow"].fullmatch(n) for n in names):
        return False
    p = _first_matrix(tr, context)
    if p is None or len(p) != len(s):
        return False
    transposed = any(_GLUE_OP["layout"].fullmatch(n) for n in names)
    return all(a <= b for a, b in zip(*((sorted(p), sorted(s)) if transposed else (p, s))))


def _score_agrees(tr: Trace, score: int, s: list[int]) -> bool:
    """The score product's operands are [..., Lq, d] and [..., d, Lk] (True when not recorded, or einsum)."""
    name = tr.host[score].name
    da = _dims(tr, score) if name != "aten::einsum" else None
    if da is None:
        return True
    k = _LEFT_OPERANDS.get(name, 0)
    a, b = _matrix(da, k), _matrix(da, k + 1)
    return a is not None and b is not None and a[-2] == s[-2] and b[-1] == s[-1]


def _context_agrees(tr: Trace, context: int, s: list[int]) -> bool:
    """The context product's first matrix is the softmax's [..., Lq, Lk] (True when not recorded, or einsum)."""
    name = tr.host[context].name
    dc = _dims(tr, context) if name != "aten::einsum" else None
    if dc is None:
        return True
    p = _matrix(dc, _LEFT_OPERANDS.get(name, 0))
    return p is not None and p[-2:] == s[-2:]


def _eager_triples(tr: Trace, links: Links, ops: _NamedOps, key: Callable[[int], int],
                   is_key: Callable[[HostEvent], bool]) -> list[_Eager]:
    """Every score → softmax → context triple of sibling ops (rule eager-ops), scope or not."""
    if not ops.softmax:
        return []  # no softmax op in the file (fused attention models): the walk is skipped
    out: list[_Eager] = []
    groups = _softmax_siblings(tr, links, ops.of(ops.softmax), key, is_key)
    for (sibs, softmaxes), classes in zip(groups, _sibling_classes(tr, links, [sibs for sibs, _ in groups])):
        out += _triples_among(tr, sibs, softmaxes, classes)
    return out


def _sibling_classes(tr: Trace, links: Links, groups: list[list[int]]) -> list[list[int]]:
    """Each sibling's :func:`_sibling_class`, per group: once per distinct name, then looked up by the names'
    ids (link.HostNames) for all siblings at once, so that the walks read a list, not each op's name."""
    import numpy as np

    names = links.host_tree(tr).names_of(tr)
    by_id = [0] * (len(names.ids) + 1)
    for name, k in names.ids.items():
        by_id[k] = _sibling_class(name)
    flat = np.fromiter(chain.from_iterable(groups), np.int64, sum(map(len, groups)))
    classes = np.array(by_id, np.int64)[names.column[flat]].tolist()
    cuts = [0, *accumulate(map(len, groups))]
    return [classes[a:b] for a, b in zip(cuts, cuts[1:])]


def _softmax_siblings(tr: Trace, links: Links, softmax_ops: list[int], key: Callable[[int], int],
                      is_key: Callable[[HostEvent], bool]) -> list[tuple[list[int], list[int]]]:
    """The ops (parents first) under each sibling key that has a softmax op among its ops, and where the softmax
    ops are among them; keys in the order of their first op. An op is a key's when its parent is the key or a
    range or module between one and its ops (:func:`_key_groups`). Over the nesting's columns (link.HostTree):
    the events under no such key are never visited in Python."""
    import numpy as np

    if not softmax_ops:
        return []  # (softmax names only on ranges: no softmax op)
    tree = links.host_tree(tr)
    group = _key_groups(tr, tree, [key(i) for i in softmax_ops], is_key)
    kid = np.flatnonzero((tree.kind == OP) & (group[tree.parent] >= 0))  # positions, in order (each softmax op's)
    of = group[tree.parent[kid]]
    by_group = np.argsort(of, kind="stable")  # each group's kids together, in order
    of, kid = of[by_group], kid[by_group]
    firsts = np.flatnonzero(np.concatenate(([True], of[1:] != of[:-1]))).tolist()
    soft = np.zeros(len(tree.order), bool)
    soft[tree.position[softmax_ops]] = True
    sibs, softs = tree.order[kid].tolist(), np.flatnonzero(soft[kid]).tolist()
    stops = [*firsts[1:], len(sibs)]
    out = []
    for a, b in sorted(zip(firsts, stops), key=lambda ab: by_group[ab[0]]):  # (by each group's first kid)
        k = bisect_left(softs, a)
        out.append((sibs[a:b], [s - a for s in softs[k:bisect_left(softs, b, k)]]))
    return out


def _key_groups(tr: Trace, tree: HostTree, keys: list[int], is_key: Callable[[HostEvent], bool]) -> Any:
    """Per position (and n: none, last), the position of the sibling key whose group it heads (n for NONE), or -1:
    the keys themselves, and the ranges and modules under one (or under one of those) that are no key (``is_key``),
    found a level at a time: parents first, as the sweep's order has them."""
    import numpy as np

    n = len(tree.order)
    group = np.full(n + 1, -1, np.int64)
    at = np.array(keys, np.int64)
    at = np.where(at == NONE, n, tree.position[np.maximum(at, 0)])
    group[at] = at
    open_ = (tree.kind != OP) & (group[:n] < 0)  # ranges and modules not yet placed
    host, order, up = tr.host, tree.order, tree.parent
    while True:
        new = np.flatnonzero(open_ & (group[up] >= 0))
        if not len(new):
            return group
        open_[new] = False
        new = new[[not is_key(host[i]) for i in order[new].tolist()]]
        group[new] = group[up[new]]


def _triples_among(tr: Trace, sibs: list[int], softmaxes: list[int], classes: list[int]) -> list[_Eager]:
    """The triples among one key's sibling ops (the softmax ops at ``softmaxes``; each one's _sibling_class in
    ``classes``), left to right: products are not shared between calls."""
    out: list[_Eager] = []
    used = -1  # the last sibling position a triple took
    first = -1  # the first sibling position of the last chain
    for pos in softmaxes:
        if pos <= used:
            continue
        i = sibs[pos]
        lo = _product_near(classes, pos, -1, used)
        hi = _product_near(classes, pos, 1, len(sibs))
        if lo is None or hi is None or not _shapes_agree(tr, sibs, lo, pos, hi):
            continue
        lo, start = _first_score(tr, sibs, lo, used, classes)
        end = _last_context(tr, sibs, hi, classes)
        join = _one_chain(tr, sibs, used, start, first) if out else None
        if join is not None:
            out[-1] = _joined(out[-1], sibs, used, start, end, join)
        else:
            out.append(_Eager(sibs[lo], i, sibs[hi], sibs[start: end + 1]))
            first = start
        used = end
    return out


def _joined(prev: _Eager, sibs: list[int], used: int, start: int, end: int, join: str) -> _Eager:
    """``prev``, the chain so far (its last sibling at ``used``), continued by the triple spanning siblings
    ``start`` .. ``end``: the call's siblings run on to ``end``; its core takes the siblings between the two only
    where they are the same scores' glue (rule one-chain), not the projections of rule input-projections."""
    core = prev.roots if prev.core is None else prev.core
    more = sibs[used + 1: end + 1] if join == "one-chain" else sibs[start: end + 1]
    return _Eager(prev.score, prev.softmax, prev.context, prev.roots + sibs[used + 1: end + 1],
                  None if join == "one-chain" and prev.core is None else core + more)


def _first_score(tr: Trace, sibs: list[int], lo: int, used: int, classes: list[int]) -> tuple[int, int]:
    """(the score product, the first sibling of the call): products before the score product with no breaker or
    softmax between (within MAX_EAGER_GAP, layout glue not counted) compute the same scores in parts: Longformer's
    window einsum before its mask einsum, BigBird's band products, a relative-position product (never a
    projection)."""
    start = lo
    k = _product_near(classes, lo, -1, used)
    while k is not None and not _projection(tr, sibs[k]):
        start = k
        k = _product_near(classes, k, -1, used)
    return lo, start


def _last_context(tr: Trace, sibs: list[int], hi: int, classes: list[int]) -> int:
    """The last sibling of the call from its context product at ``hi``: products after it with no breaker or
    softmax between (within MAX_EAGER_GAP) that are no next call's scores (no softmax follows them before a
    breaker) compute the same context in parts: Longformer's global columns by matmul, then its window by einsum
    (never a projection)."""
    host = tr.host
    end = hi
    k = _product_near(classes, hi, 1, len(sibs))
    while k is not None and not _projection(tr, sibs[k]) and _product_near_softmax(host, sibs, k) is None:
        end = k
        k = _product_near(classes, k, 1, len(sibs))
    return end


def _projection(tr: Trace, i: int) -> bool:
    """A product with a recorded 2-D operand (a weight matrix: ``x @ W`` written as a matmul) is a projection,
    never part of the scores or the context, whose operands are batched (≥ 3-D); unknown without shapes."""
    dims = _dims(tr, i)
    if dims is None:
        return False
    name = tr.host[i].name
    if name == "aten::einsum":
        dims = dims[1] if len(dims) > 1 and isinstance(dims[1], list) else []
    k = _LEFT_OPERANDS.get(name, 0)
    return any(isinstance(d, list) and len(d) == 2 and all(isinstance(x, int) for x in d) for d in dims[k: k + 2])


def _product_near_softmax(host: Sequence[HostEvent], sibs: list[int], k: int) -> int | None:
    """The softmax a product at ``k`` would be the score of: the first softmax after it within MAX_EAGER_GAP
    (layout glue not counted) before any breaker; None if there is none."""
    j = k + 1
    gap = 0
    while j < len(sibs) and gap <= MAX_EAGER_GAP:
        nm = host[sibs[j]].name
        if SOFTMAX_OPS.match(nm):
            return j
        if BREAKER.match(nm):
            return None
        if not GAP_FREE.fullmatch(nm):
            gap += 1
        j += 1
    return None


def _one_chain(tr: Trace, sibs: list[int], end: int, start: int, first: int) -> str | None:
    """The rule by which a triple starting at sibling ``start`` continues the chain (first sibling at ``first``) whose
    last sibling is at ``end``, or None. Rule one-chain: at most MAX_EAGER_GAP siblings and no breaker between:
    block-sparse attention (BigBird) runs several score → softmax → context triples in one call. Rule
    input-projections: within the gap too, the breakers between are only projections of the layer's input."""
    if start - end - 1 > MAX_EAGER_GAP:
        return None
    host = tr.host
    between = sibs[end + 1: start]
    k = next((k for k, i in enumerate(between) if BREAKER.match(host[i].name)), None)
    if k is None:
        return "one-chain"
    return "input-projections" if _input_projections(tr, between[k:], sibs, first) else None


def _input_projections(tr: Trace, tail: list[int], sibs: list[int], first: int) -> bool:
    """Rule input-projections: ``tail``, the siblings from the first breaker after a chain to the next triple, holds
    only projections and no op that ends a layer (LAYER_ENDS); where shapes were recorded, each projection's input
    is like that of the projection before the chain, which starts at sibling ``first`` (_like_input): then the tail
    projects the same layer's input again (Longformer's global tokens), not an output projection's result or another
    layer's. (The names first: most tails, a layer's end, fail on them without a look at any shape.)"""
    host = tr.host
    projections = []
    for i in tail:
        name = host[i].name
        if BREAKER.match(name):
            if not INPUT_PROJECTION.match(name):
                return False
            projections.append(i)
        elif LAYER_END.match(name):
            return False
    ref = _projection_before(tr, sibs, first)
    return all(_like_input(_first_input(tr, i), ref) for i in projections)


def _projection_before(tr: Trace, sibs: list[int], first: int) -> list[int] | None:
    """The recorded input dims of the nearest breaker before sibling ``first`` (a chain's start) if it is a
    projection (its q/k/v's last); None where there is none or no shape was recorded."""
    host = tr.host
    for k in range(first - 1, -1, -1):
        name = host[sibs[k]].name
        if BREAKER.match(name):
            return _first_input(tr, sibs[k]) if INPUT_PROJECTION.match(name) else None
    return None


def _first_input(tr: Trace, i: int) -> list[int] | None:
    """An op's first recorded input's dims (all ints), or None."""
    dims = _dims(tr, i)
    first = dims[0] if dims else None
    return first if isinstance(first, list) and first and all(isinstance(x, int) for x in first) else None


def _like_input(dims: list[int] | None, ref: list[int] | None) -> bool:
    """``dims`` is an input like ``ref``: the same rank and width (last dim), no other dim larger (all its tokens or
    some: Longformer projects only the global tokens' queries). True where either was not recorded."""
    if dims is None or ref is None:
        return True
    return len(dims) == len(ref) and dims[-1] == ref[-1] and all(a <= b for a, b in zip(dims[:-1], ref[:-1]))


def _product_near(classes: list[int], pos: int, step: int, stop: int) -> int | None:
    """The nearest product op from ``pos`` in direction ``step`` within MAX_EAGER_GAP siblings (layout glue not
    counted: GAP_FREE_GLUE), before any breaker or other softmax, not reaching ``stop``; None if there is none.
    (``classes``: each sibling's _sibling_class.)"""
    gap = 0
    for k in range(pos + step, min(stop, len(classes)) if step > 0 else max(stop, -1), step):
        what = classes[k]
        if what == _PRODUCT:
            return k
        if what == _STOP:
            return None
        if what == _COUNTED:
            gap += 1
            if gap > MAX_EAGER_GAP:
                return None
    return None


_PRODUCT, _STOP, _COUNTED, _FREE = range(4)


@lru_cache(maxsize=1 << 14)
def _sibling_class(name: str) -> int:
    """What a sibling op is to the eager pattern's walk, in the order the walk tests it: a product, a breaker or
    another softmax (the walk stops), layout glue (not counted against the gap), or any other op. Memoised per
    name: the walk meets the same few names at every layer."""
    if MATMUL_OPS.match(name):
        return _PRODUCT
    if BREAKER.match(name) or SOFTMAX_OPS.match(name):
        return _STOP
    return _FREE if GAP_FREE.fullmatch(name) else _COUNTED


def _assign_steps(links: Links, blocks: list[Block]) -> None:
    for b in blocks:
        b.step = links.step[b.roots[0]]


# ---------------------------------------------------------------------------------------------
# Blocks found from device kernels alone (no host op shows them)

@lru_cache(maxsize=1 << 16)  # (called per kernel by some passes: a trace has a few thousand distinct names)
def short_kernel_name(name: str) -> str:
    """``void ns::kernel<…>(…)`` → ``ns::kernel``: a readable block name for fused kernels."""
    n = compact_kernel_name(name)
    cut = len(n)
    for ch in "<(":
        k = n.find(ch)
        if 0 < k < cut:
            cut = k
    return n[:cut].strip() or name[:60]

def gemm_softmax_gemm(cats: Sequence[Category], k: int) -> tuple[int, int] | None:
    """(first, last) of the GEMM run before the softmax at ``k`` to the GEMM run after it, each within
    MAX_BETWEEN other kernels of it, or None when either run is missing."""
    lo, hi = _nearest_product(cats, k, -1), _nearest_product(cats, k, 1)
    if lo is None or hi is None:
        return None
    return _run_end(cats, lo, -1), _run_end(cats, hi, 1)


def _nearest_product(cats: Sequence[Category], k: int, step: int) -> int | None:
    """The GEMM nearest to ``k`` in direction ``step``, at most MAX_BETWEEN kernels away with no softmax between."""
    matmul, softmax = Category.MATMUL, Category.SOFTMAX
    n = len(cats)
    i = k + step
    while 0 <= i < n and abs(i - k) <= MAX_BETWEEN and cats[i] != matmul and cats[i] != softmax:
        i += step
    return i if 0 <= i < n and cats[i] == matmul else None


def _run_end(cats: Sequence[Category], i: int, step: int) -> int:
    """The last GEMM of the run of GEMMs at ``i``, walking in direction ``step``."""
    matmul, n = Category.MATMUL, len(cats)
    while 0 <= i + step < n and cats[i + step] == matmul:
        i += step
    return i
