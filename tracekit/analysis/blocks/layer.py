"""The attention layer around each block's core (issue 38, class 4; docs/attribution.md, "Attention blocks").

Why: rule innermost-scope gives the right core, but the core alone hides what the layer costs around it. SGLang's
blocks are ``RadixAttention`` (fused attention, no GEMM): at decode the Q/K/V and output projections, often the
larger cost, are outside every block. BERT's are ``BertSdpaSelfAttention``, without its output projection. So every
block also names its layer, with a split of its own (:data:`LAYER_RULES` say which scope that is).

Cost: nothing here walks every event. The blocks' ancestors are walked once each (the core counts); a candidate
scope's subtree is a contiguous run of ``Links.order`` (parents come first, per thread by start), found by bisection
and read once, and only for a scope that holds this one core. The device side reads each event's launch site once,
at C speed (a set test, no per-event list), and only when some block has a layer.
"""

from __future__ import annotations

import re
from itertools import compress
from operator import attrgetter
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ...model import ANNOTATION, MODULE, OP, Trace
from ...results.attribution import CATEGORIES, BlockResult, Layer
from ...vocab import FEED_FORWARD_OPS, MATMUL_ROLES, Category, MatmulRole, Phase
from ..busy import busy_time
from ..classify import Classifier
from ..link import NONE, Links
from ..roles import RoleFinder
from .discovery import Block

__all__ = ["FEED_FORWARD_SCOPE", "LAYER_RULES", "LayerRule", "LayerSpan", "find_layers", "layer_figures"]


@dataclass(frozen=True, slots=True)
class LayerRule:
    """One condition on a block's layer, in the order the search applies them; ``why`` is the fact behind it."""

    name: str
    why: str


LAYER_RULES: tuple[LayerRule, ...] = (
    LayerRule("forward-host-block", "only a forward block with host roots has one: autograd runs backward outside "
                                    "every module scope, and a kernel-only block (a replay) has no host event"),
    LayerRule("scope", "a layer is an nn.Module slice or a record_function range around the core; ops are passed "
                       "through, never a layer; a ProfilerStep, and anything around it, never is one"),
    LayerRule("one-core", "it holds this block's core and no other block's: a scope with two cores is a model or a "
                          "stack of layers, not one attention layer"),
    LayerRule("no-feed-forward", "it holds no MLP or MoE: no scope named like one (FEED_FORWARD_SCOPE) and no "
                                 "feed-forward op (vocab.FEED_FORWARD_OPS: expert GEMMs, a router's top-k gating, "
                                 "an MLP activation); a decoder layer holds one, its attention module does not"),
    LayerRule("outermost", "the outermost scope that passes: the walk outward from the core stops at the first that "
                           "fails; where none passes the block is its own layer (null)"),
)

# Scope names of a transformer layer's feed-forward half: Llama/Qwen/GPT-2 ``*MLP``, BERT ``BertIntermediate``,
# Mixtral ``*SparseMoeBlock``, T5 ``T5LayerFF``/``DenseReluDense``, ``*FeedForward``, ``*Experts``, ``*Router``.
FEED_FORWARD_SCOPE = (r"(?i:mlp|ffn|moe|feed_?forward)|Intermediate|Experts?(?![a-z])|Router(?![a-z])"
                      r"|Dense(?:Relu|Act|Gated\w*)Dense|LayerFF")
_FFN_SCOPE = re.compile(FEED_FORWARD_SCOPE)
_NAME = attrgetter("name")
_FFN_OP = re.compile("^(?:" + "|".join(p.pattern for p in FEED_FORWARD_OPS) + ")$")


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerSpan:
    """A block's layer: its host event and its subtree, the run ``order[lo:hi]`` of ``Links.order``."""

    root: int
    lo: int
    hi: int


class _Tree:
    """Subtrees of the host nesting as runs of ``Links.order``, and the feed-forward test over them (memoised)."""

    def __init__(self, tr: Trace, links: Links) -> None:
        self.host, self.order, self.parent = tr.host, links.order, links.parent
        self._span: dict[int, tuple[int, int]] = {}
        self.index = links.index_of_order(tr)  # order's starts and per-thread runs, for bisection
        self._ffn_name: dict[str, bool] = {}
        self._ffn: dict[int, bool] = {}
        names = tr.names if tr.names is not None else frozenset(map(_NAME, tr.host))
        self._maybe = frozenset(n for n in names if _FFN_OP.match(n) or _FFN_SCOPE.search(n))  # of any kind

    def span(self, i: int) -> tuple[int, int]:
        """(lo, hi): ``order[lo]`` is ``i`` and ``order[lo+1:hi]`` its descendants (same thread, inside it)."""
        got = self._span.get(i)
        if got is not None:
            return got
        host, order = self.host, self.order
        h = host[i]
        index = self.index
        first, stop = index.run(h.thread)
        lo = bisect_left(index.starts, h.ts, first, stop)
        while order[lo] != i:  # ties on (thread, ts): parents first, so i is among the next few
            lo += 1
        # ``order`` is sorted by (thread, ts): the subtree ends at the thread's first event starting at its end
        hi = max(lo + 1, bisect_left(index.starts, h.ts + h.dur, lo + 1, stop))
        self._span[i] = (lo, hi)
        return lo, hi

    def is_ffn(self, name: str, kind: int) -> bool:
        """A feed-forward op or scope name (rule no-feed-forward), memoised per name."""
        hit = self._ffn_name.get(name)
        if hit is None:
            if kind == OP:
                hit = _FFN_OP.match(name) is not None
            else:
                label = name[len("nn.Module: "):] if kind == MODULE else name
                hit = _FFN_SCOPE.search(label) is not None
            self._ffn_name[name] = hit
        return hit

    def holds_ffn(self, a: int, clean: tuple[int, int] | None = None) -> bool:
        """Whether scope ``a`` is, or holds, a feed-forward part (rule no-feed-forward). ``clean``: a run of
        ``order`` inside ``a``'s already known to hold none (the scope the walk out came from), not read again. The
        names are tested lazily at C speed against those that could be one (whatever their kind); only those events
        get the exact test, and the first hit ends the walk."""
        got = self._ffn.get(a)
        if got is None:
            lo, hi = self.span(a)
            runs = [(lo, hi)] if clean is None else [(lo, clean[0]), (clean[1], hi)]
            # (last first: a layer's feed-forward part follows its attention, so a hit comes after a few events)
            got = self._ffn[a] = any(self._ffn_in(self.order[y - 1:x - 1 if x else None:-1]) for x, y in runs)
        return got

    def _ffn_in(self, sub: Sequence[int]) -> bool:
        host = self.host
        maybe = compress(sub, map(self._maybe.__contains__, map(_NAME, map(host.__getitem__, sub))))
        return any(self.is_ffn(host[k].name, host[k].kind) for k in maybe)


def _start(parent: Sequence[int], roots: Sequence[int]) -> int:
    """The innermost host event strictly around all of a block's roots (their parents' common ancestor)."""
    chain: list[int] = []
    k = parent[roots[0]]
    while k != NONE:
        chain.append(k)
        k = parent[k]
    pos = {a: n for n, a in enumerate(chain)}
    deepest = 0
    for r in roots[1:]:
        k = parent[r]
        while k != NONE and k not in pos:
            k = parent[k]
        if k == NONE:
            return NONE  # roots under no common event: no scope holds the core
        deepest = max(deepest, pos[k])
    return chain[deepest] if chain else NONE


def find_layers(tr: Trace, links: Links, blocks: Sequence[Block]) -> list[LayerSpan | None]:
    """Each block's layer (LAYER_RULES), or None where the block is its own layer."""
    parent = links.parent
    starts = [_start(parent, b.roots) if b.roots and b.phase == Phase.FORWARD else NONE for b in blocks]
    cores = _core_counts(parent, starts)
    tree = _Tree(tr, links)
    out: list[LayerSpan | None] = []
    for s in starts:
        best = _outermost(tr, parent, cores, tree, s)
        if best == NONE:
            out.append(None)
        else:
            lo, hi = tree.span(best)
            out.append(LayerSpan(root=best, lo=lo, hi=hi))
    return out


def _core_counts(parent: Sequence[int], starts: Sequence[int]) -> dict[int, int]:
    """Host event -> how many blocks' cores it holds (rule one-core): one walk up from each block's start."""
    cores: dict[int, int] = defaultdict(int)
    for s in starts:
        k = s
        while k != NONE:
            cores[k] += 1
            k = parent[k]
    return cores


def _outermost(tr: Trace, parent: Sequence[int], cores: dict[int, int], tree: _Tree, start: int) -> int:
    """The outermost scope from ``start`` outward that passes rules scope, one-core and no-feed-forward (the walk
    stops at the first that fails), or NONE."""
    host = tr.host
    best = NONE
    clean: tuple[int, int] | None = None  # the last scope found free of feed-forward parts, as a run of order
    k = start
    while k != NONE and cores[k] == 1:
        h = host[k]
        if h.kind == ANNOTATION and h.name.startswith("ProfilerStep#"):
            break
        if h.kind != OP:
            if tree.holds_ffn(k, clean):
                break
            best, clean = k, tree.span(k)
        k = parent[k]
    return best


def layer_name(tr: Trace, span: LayerSpan) -> str:
    """The layer's name as a block's: a module's label without ``nn.Module: ``, a range's name."""
    h = tr.host[span.root]
    return h.name[len("nn.Module: "):] if h.kind == MODULE and h.name.startswith("nn.Module: ") else h.name


def layer_figures(tr: Trace, links: Links, blocks: Sequence[Block], spans: Sequence[LayerSpan | None],
                  results: Sequence[BlockResult], owner: Sequence[int], *, cats: Sequence[Category] | None,
                  members: dict[int, list[int]] | None, classifier: Classifier) -> None:
    """Set each block result's ``layer`` (results in block order): device busy time on GPU traces, host self time
    on CPU-only ones, the same base as the block's."""
    if not any(spans):
        return
    roles = RoleFinder(tr, links)
    if cats is not None:
        extra = _extra_device_events(tr, links, spans, owner)
        for b, span in enumerate(spans):
            if span is not None:
                js = sorted({*(members or {}).get(b, ()), *extra.get(b, ())})
                results[b].layer = _device_layer(tr, links, cats, roles, span, js)
        return
    for b, span in enumerate(spans):
        if span is not None:
            results[b].layer = _host_layer(tr, links, classifier, roles, span, owner, blocks[b], b, results[b])


def _extra_device_events(tr: Trace, links: Links, spans: Sequence[LayerSpan | None],
                         owner: Sequence[int]) -> dict[int, list[int]]:
    """Block -> the device events launched inside its layer but outside its own block (projections, norms)."""
    mark: dict[int, int] = {}  # host event in a layer, outside every block -> the block (only those: no per-event list)
    order = links.order
    for b, span in enumerate(spans):
        if span is not None:
            for i in order[span.lo:span.hi]:
                if owner[i] == NONE:
                    mark[i] = b
    leaf = links.device_leaf
    out: dict[int, list[int]] = defaultdict(list)
    for j in compress(range(len(leaf)), map(mark.__contains__, leaf)):  # (a C-speed test per device event)
        out[mark[leaf[j]]].append(j)
    return out


def _device_layer(tr: Trace, links: Links, cats: Sequence[Category], roles: RoleFinder, span: LayerSpan,
                  js: list[int]) -> Layer:
    """The layer's device busy time (its events' union, first-come split) by category and matmul role."""
    dev, leaf, launcher = tr.device, links.device_leaf, links.launcher
    busy, share = busy_time([dev[j] for j in js])
    c = dict.fromkeys(CATEGORIES, 0)
    mr = dict.fromkeys(MATMUL_ROLES, 0)
    for j, s in zip(js, share):
        c[cats[j]] += s
        if cats[j] == Category.MATMUL:
            lf = leaf[j]
            la = launcher[lf] if lf != NONE else NONE
            mr[roles.role(la if la != NONE else lf) if lf != NONE else str(MatmulRole.OTHER)] += s
    return Layer(name=layer_name(tr, span), total_us=busy / 1000, categories={k: v / 1000 for k, v in c.items()},
                 matmul_roles={k: v / 1000 for k, v in mr.items()})


def _host_layer(tr: Trace, links: Links, clf: Classifier, roles: RoleFinder, span: LayerSpan, owner: Sequence[int],
                blk: Block, b: int, res: BlockResult) -> Layer:
    """The layer's host time: the block's split plus the self time of the layer's other ops and ranges, and a
    module layer's time outside any op (``other``, as a module block's)."""
    host = tr.host
    self_ns = _subtree_self_times(tr, links, span)
    _without_block_gap(tr, links, blk.roots[0], self_ns, owner, b)
    c = dict.fromkeys(CATEGORIES, 0)
    mr = dict.fromkeys(MATMUL_ROLES, 0)
    for i, ns in self_ns.items():
        if owner[i] != NONE:
            continue  # the block's own ops, already in its split
        h = host[i]
        cat = clf.host(h.name) if h.kind == OP else Category.OTHER
        c[cat] += ns
        if cat == Category.MATMUL:
            mr[roles.role(i)] += ns
    cats = {k: res.categories[k] + v / 1000 for k, v in c.items()}
    block_roles = res.matmul_roles or dict.fromkeys(MATMUL_ROLES, 0.0)
    layer_roles = {k: block_roles[k] + v / 1000 for k, v in mr.items()}
    root = host[span.root]
    if root.kind == MODULE:
        cats[Category.OTHER] += max(0.0, _clipped_dur(tr, links, span.root) / 1000 - sum(cats.values()))
    return Layer(name=layer_name(tr, span), total_us=sum(cats.values()), categories=cats,
                 matmul_roles=layer_roles if res.matmul_roles is not None else None)


def _without_block_gap(tr: Trace, links: Links, root: int, self_ns: dict[int, int], owner: Sequence[int],
                       b: int) -> None:
    """A module block's time outside its ops (account._module_gap: ``other`` in the block) is also in the self time
    of the op or range around the module: taken out of that one here, so that the layer counts it once."""
    p = links.op_parent[root]
    if tr.host[root].kind != MODULE or p not in self_ns:
        return
    covered = sum(ns for i, ns in self_ns.items() if owner[i] == b)
    self_ns[p] = max(0, self_ns[p] - max(0, _clipped_dur(tr, links, root) - covered))


def _clipped_dur(tr: Trace, links: Links, i: int) -> int:
    """A module's duration clipped to the op or range around it (account._module_gap's clip)."""
    h = tr.host[i]
    start, end = h.ts, h.ts + h.dur
    p = links.op_parent[i]
    if p != NONE:
        ph = tr.host[p]
        start, end = max(start, ph.ts), min(end, ph.ts + ph.dur)
    return max(0, end - start)


def _subtree_self_times(tr: Trace, links: Links, span: LayerSpan) -> dict[int, int]:
    """Self time of each op and range in the layer's subtree, as account.self_times computes it over the whole
    tree: children clipped to their parent and to each other; a parent outside the subtree clips by its own
    interval."""
    host, op_parent = tr.host, links.op_parent
    eff: dict[int, tuple[int, int]] = {}
    last_end: dict[int, int] = {}
    self_ns: dict[int, int] = {}
    for i in links.order[span.lo:span.hi]:
        h = host[i]
        if h.kind < ANNOTATION:
            continue
        p = op_parent[i]
        s, e = h.ts, h.ts + h.dur
        if p != NONE:
            ps, pe = eff.get(p) or (host[p].ts, host[p].ts + host[p].dur)
            s = max(s, ps, last_end.get(p, s))
            e = max(min(e, pe), s)
        eff[i] = (s, e)
        self_ns[i] = e - s
        if p in self_ns:
            self_ns[p] -= e - s
        if p != NONE:
            last_end[p] = e
    return self_ns
