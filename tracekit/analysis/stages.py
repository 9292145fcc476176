"""Serving stages (issue 44, item 2): each engine iteration of a serving trace named prefill, decode or mixed,
and the device time summed per stage (tracekit.results.stages; docs/attribution.md, "Serving stages").

Where the iterations come from, first rule that finds any wins:

1. **The framework's own ranges** (:data:`RANGE_RULES`): vLLM's model runner wraps each ``execute_model`` in a
   ``record_function`` named by its context (prefill) and generation (decode) request counts; SGLang's names each
   forward ``step[<ForwardMode> …]``. The range's name says its stage.
2. **The shapes** (:data:`SHAPE_RULES`), where no such range was recorded: each ProfilerStep (the whole trace
   without steps) is an iteration, named by its attention blocks. A decode call has one query token per sequence
   (a decode-only kernel, ``max_seqlen_q`` 1, a query of length 1); a prefill call has more. An iteration with
   both is mixed.

A trace with neither (every training trace) has no stages, and the stage returns before any pass over the
events: the framework rules read the loader's table of distinct names, the shape rules read each block's roots.
Only a serving trace pays one pass over its host events (finding the ranges) and one over its device events
(each event's iteration by its launch time: a bisect among the few iterations).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import orjson

from ..model import GraphLaunch, Trace
from ..results.attribution import BlockResult
from ..results.efficiency import Efficiency
from ..results.stages import DECODE, MIXED, OUTSIDE, PREFILL, STAGE_ORDER, StageRow
from ..vocab import CATEGORIES, Category
from .blocks.discovery import Block
from .link import NONE, Links

__all__ = ["RANGE_RULES", "SHAPE_RULES", "RangeRule", "ShapeRule", "serving_stages"]


def _by_counts(m: re.Match[str]) -> str | None:
    """vLLM: context (prefill) requests only, generation (decode) only, or both (a mixed batch)."""
    return _mix(int(m["context"]) > 0, int(m["generation"]) > 0)


_SGLANG_MODES = {"EXTEND": PREFILL, "PREFILL": PREFILL, "SPLIT_PREFILL": PREFILL, "DECODE": DECODE, "MIXED": MIXED}


def _by_mode(m: re.Match[str]) -> str | None:
    """SGLang's ForwardMode: EXTEND (prefill), DECODE, MIXED; the others (IDLE, speculative verify and draft
    modes) are no stage of the three: their time stays ``outside``."""
    return _SGLANG_MODES.get(m["mode"])


def _mix(prefill: bool, decode: bool) -> str | None:
    return MIXED if prefill and decode else PREFILL if prefill else DECODE if decode else None


@dataclass(frozen=True, slots=True)
class RangeRule:
    """A framework's iteration range: a host range whose name ``pattern`` matches (from its start) is one
    iteration, and ``stage`` reads its stage off the match (None: a mode that is none of the three)."""

    name: str
    pattern: re.Pattern[str]
    stage: Callable[[re.Match[str]], str | None]
    why: str


RANGE_RULES: tuple[RangeRule, ...] = (
    RangeRule("execute-context-generation",
              re.compile(r"execute_(?:\d+_)?context_(?P<context>\d+)\(.*\)_generation_(?P<generation>\d+)\("),
              _by_counts, "vLLM's model runner (and SGLang's, as TraceLens's profiling patch records it) names each "
              "execute_model call execute[_<tokens>]_context_<n>(…)_generation_<m>(…): n requests in prefill, m in "
              "decode; first, so that the two engines' traces read alike"),
    RangeRule("sglang-step", re.compile(r"step\[(?P<mode>[A-Z_]+)[\s\]]"), _by_mode,
              "SGLang's model runner names each forward step[<ForwardMode> bs=…]"),
)


@dataclass(frozen=True, slots=True)
class _Facts:
    """What a block's core says about its query: its op/kernel names (lower case) and query length per sequence."""

    names: str
    query_len: int | None


@dataclass(frozen=True, slots=True)
class ShapeRule:
    """A block's stage from its core, where no framework range exists: ``stage`` returns it or None (no
    opinion). ``serving``: a block this rule names marks the trace as a serving trace (a query of length > 1
    alone does not: every training trace has those)."""

    name: str
    stage: Callable[[_Facts], str | None]
    serving: Callable[[str], bool]
    why: str


_DECODE_KERNEL = re.compile(r"decode|paged_attention|_ll4mi_")
_PREFILL_KERNEL = re.compile(r"prefill|batch_context|context_with_kv")

SHAPE_RULES: tuple[ShapeRule, ...] = (
    ShapeRule("decode-kernel", lambda f: DECODE if _DECODE_KERNEL.search(f.names) else None, lambda s: True,
              "decode-only kernels and ops: FlashInfer's BatchDecode, TRT-LLM's batch_decode, vLLM's and ROCm's "
              "paged_attention (v1/v2, ll4mi) run one query token per sequence"),
    ShapeRule("prefill-kernel", lambda f: PREFILL if _PREFILL_KERNEL.search(f.names) else None, lambda s: True,
              "prefill kernels and ops: aiter's mha_batch_prefill, FlashInfer's BatchPrefill, TRT-LLM's "
              "batch_context_with_kv_cache"),
    ShapeRule("query-length",
              lambda f: None if f.query_len is None else DECODE if f.query_len == 1 else PREFILL,
              lambda s: s == DECODE,
              "the recorded query: one token per sequence (max_seqlen_q 1, or a query of length 1) is decode"),
)

# Fused attention ops whose recorded query gives its length per sequence: name -> (axis of L in a 4-D query,
# position of max_seqlen_q among the Concrete Inputs for a 3-D (varlen) query, or -1).
_QUERY_AXIS: dict[str, tuple[int, int]] = {
    "aten::scaled_dot_product_attention": (2, -1),
    "aten::_scaled_dot_product_flash_attention": (2, -1),
    "aten::_scaled_dot_product_efficient_attention": (2, -1),
    "aten::_scaled_dot_product_cudnn_attention": (2, -1),
    "aten::_flash_attention_forward": (1, 5),
    "aten::_efficient_attention_forward": (1, 6),
}


def _query_len(name: str, dims: list, concrete: list) -> int | None:
    """The query length per sequence of a fused op (_QUERY_AXIS) from its recorded inputs; None when unknown."""
    spec = _QUERY_AXIS.get(name)
    if spec is None:
        return None
    try:
        q = dims[0]
        if len(q) == 4:
            return int(q[spec[0]])
        return int(concrete[spec[1]]) if len(q) == 3 and spec[1] >= 0 else None
    except (TypeError, ValueError, IndexError):
        return None


def _recorded_query_len(name: str, dims_raw: bytes, concrete_raw: bytes) -> int | None:
    """_query_len of an op's raw recorded inputs (JSON); None when they do not parse."""
    try:
        return _query_len(name, orjson.loads(dims_raw), orjson.loads(concrete_raw) if concrete_raw else [])
    except orjson.JSONDecodeError:
        return None


# Name parts only a serving engine's trace holds (kernels, ops, Python frames), lower case: the shape rules run
# only where one is present, or where a recorded attention shape has a query of length 1.
_SERVING_NAMES: tuple[str, ...] = ("decode", "prefill", "paged_attention", "kv_cache", "reshape_and_cache", "vllm::",
                                   "sglang", "flashinfer", "_ll4mi_", "batch_context")


def _shows_serving(tr: Trace, text: str) -> bool:
    """A serving engine's name among the trace's distinct names (``text``: _names_text's), or a recorded attention
    query of length 1."""
    low = text.lower()
    if any(part in low for part in _SERVING_NAMES):
        return True
    return any(_query_len(op, dims, []) == 1 for op, dims in tr.info.shapes)


def _block_query_lens(tr: Trace, owner: Sequence[int]) -> dict[int, int]:
    """Block -> the longest query (per sequence) among its fused ops' recorded inputs."""
    out: dict[int, int] = {}
    host = tr.host
    for i, oi in tr.op_inputs.items():
        name = host[i].name
        if name in _QUERY_AXIS and owner[i] != NONE:
            n = _recorded_query_len(name, oi.dims, oi.concrete)
            if n is not None:
                out[owner[i]] = max(n, out.get(owner[i], 0))
    return out


def _block_stage(blk: Block, res: BlockResult | None, query_len: int | None,
                 memo: dict[tuple[frozenset[str], int | None], tuple[str, str, bool] | None] | None = None,
                 ) -> tuple[str, str, bool] | None:
    """(stage, rule, serving) of one block by the first shape rule with an opinion; None when none has one. Its
    names: its core's (evidence) and its kernels' (a fused op's block names the op, its kernel says decode).
    ``memo``: answers by (names, query length), which decide them (a serving trace's blocks repeat a few)."""
    names = set(blk.evidence.names if blk.evidence is not None else ())
    if res is not None and res.intervals is not None:
        names.update(res.intervals.names)
    if memo is None:
        return _stage_of(names, query_len)
    key = (frozenset(names), query_len)
    if key not in memo:
        memo[key] = _stage_of(names, query_len)
    return memo[key]


def _stage_of(names: set[str], query_len: int | None) -> tuple[str, str, bool] | None:
    """:func:`_block_stage` of a block's names and query length."""
    facts = _Facts(names=" ".join(sorted(names)).lower(), query_len=query_len)
    for rule in SHAPE_RULES:
        got = rule.stage(facts)
        if got is not None:
            return got, rule.name, rule.serving(got)
    return None


@dataclass(slots=True)
class _Iteration:
    """One iteration: its host range (ns), its stage (None: no stage of the three) and the rule that named it."""

    start: int
    end: int
    stage: str | None
    rule: str


# Literal text every RANGE_RULES name holds: a substring scan (C speed) rules a trace out before any regex runs.
_RANGE_LITERALS = ("_generation_", "step[")


def _names_text(tr: Trace) -> tuple[frozenset[str], str]:
    """The trace's distinct names (the loader's table), and the same joined by newlines: a substring scan of the
    text says whether any name can match, where a regex per name would cost a training trace ~1 µs each."""
    names = tr.names if tr.names is not None else frozenset(h.name for h in tr.host)
    return names, "\n".join(names)


def _range_rules_of(names: frozenset[str], text: str) -> dict[str, RangeRule]:
    """Each distinct name a RANGE_RULES pattern matches -> that rule; {} after one scan when none does."""
    if not any(lit in text for lit in _RANGE_LITERALS):
        return {}
    hit: dict[str, RangeRule] = {}
    for n in names:
        rule = next((r for r in RANGE_RULES if r.pattern.match(n)), None)
        if rule is not None:
            hit[n] = rule
    return hit


def _framework_iterations(tr: Trace, names: frozenset[str], text: str) -> list[_Iteration]:
    """The framework ranges (RANGE_RULES), outermost only, in time order; [] when the trace records none. The
    distinct-name table decides first, so a trace without them is never walked."""
    hit = _range_rules_of(names, text)
    if not hit:
        return []
    out: list[_Iteration] = []
    for ts, neg, name in sorted((h.ts, -h.dur, h.name) for h in tr.host if h.name in hit):
        if out and ts < out[-1].end:
            continue  # nested in (or overlapping) the previous range: one engine iteration, named once
        rule = hit[name]
        m = rule.pattern.match(name)
        assert m is not None
        out.append(_Iteration(ts, ts - neg, rule.stage(m), rule.name))
    return out


def _named_blocks(tr: Trace, text: str, blocks: Sequence[Block], owner: Sequence[int],
                  results: Sequence[BlockResult]) -> list[tuple[str, str, bool] | None]:
    """Each block's (stage, rule, serving) by SHAPE_RULES; [] when the trace shows no serving name or shape, or
    no block marks it as a serving trace."""
    if not blocks or not _shows_serving(tr, text):
        return []
    lens = _block_query_lens(tr, owner)
    memo: dict[tuple[frozenset[str], int | None], tuple[str, str, bool] | None] = {}
    named = [_block_stage(b, results[k] if k < len(results) else None, lens.get(k), memo)
             for k, b in enumerate(blocks)]
    return named if any(n is not None and n[2] for n in named) else []


def _step_spans(tr: Trace, links: Links) -> list[tuple[int, int]]:
    """The ProfilerSteps' host ranges in time order; the whole trace as one range without steps."""
    roots = sorted(links.step_roots, key=lambda i: tr.host[i].ts)
    return [(tr.host[i].ts, tr.host[i].ts + tr.host[i].dur) for i in roots] or [(-(1 << 62), 1 << 62)]


def _shape_iterations(tr: Trace, text: str, links: Links, blocks: Sequence[Block], owner: Sequence[int],
                      results: Sequence[BlockResult]) -> list[_Iteration]:
    """ProfilerSteps (the whole trace without steps) as iterations, each named by its blocks' shape rules
    (prefill and decode blocks in one: mixed); [] when no block marks the trace as a serving trace."""
    named = _named_blocks(tr, text, blocks, owner, results)
    if not named:
        return []  # no serving trace: not even the steps are read
    return _name_steps(_step_spans(tr, links), named, blocks)


def _name_steps(spans: list[tuple[int, int]], named: list[tuple[str, str, bool] | None],
                blocks: Sequence[Block]) -> list[_Iteration]:
    """Each step span an iteration named by the blocks that start in it (prefill and decode: mixed), and by the
    rule of its first named block."""
    starts = [s for s, _ in spans]
    kinds: list[set[str]] = [set() for _ in spans]
    rules = ["" for _ in spans]
    for n, b in zip(named, blocks):
        k = bisect_right(starts, b.ts) - 1
        if n is not None and k >= 0 and b.ts < spans[k][1]:
            kinds[k].add(n[0])
            rules[k] = rules[k] or n[1]
    return [_Iteration(s, e, _mix(PREFILL in ks, DECODE in ks), r) for (s, e), ks, r in zip(spans, kinds, rules)]


def serving_stages(tr: Trace, links: Links, blocks: Sequence[Block], owner: Sequence[int],
                   results: Sequence[BlockResult], cats: Sequence[Category], dev_owner: Sequence[int],
                   dev_share: Sequence[int],
                   graph_launches: Sequence[GraphLaunch] = ()) -> list[StageRow] | None:
    """The trace's stage rows; None when it shows no serving iteration (then nothing was walked). ``owner``: each
    host event's block; ``dev_share``:
    each device event's first-come share of the device's busy time; ``graph_launches``: the trace's graph
    launches, whose call time is their replayed kernels' launch time."""
    names, text = _names_text(tr)
    its = _framework_iterations(tr, names, text)
    if not its:
        its = _shape_iterations(tr, text, links, blocks, owner, results)
    if not any(it.stage is not None for it in its):
        return None
    acc = _Accumulator(len(its))
    acc.walk(tr, _launch_times(tr, links, graph_launches), its, cats, dev_owner, dev_share)
    return acc.rows(its, results)


def _slot(t: int | None, starts: list[int], ends: list[int], staged: list[bool]) -> int:
    """The iteration a launch at ``t`` falls in, or ``len(starts)`` (outside) when none holding a stage does."""
    k = bisect_right(starts, t) - 1 if t is not None else -1
    return k if k >= 0 and t is not None and t < ends[k] and staged[k] else len(starts)


class _Accumulator:
    """Per iteration (and one slot past the end for ``outside``): busy and attention ns (each event's first-come
    share of the whole device's busy time, so that the stages add up to it), attention by category,
    device window, and the blocks whose first event it launched."""

    def __init__(self, n: int) -> None:
        self.busy = [0] * (n + 1)
        self.att = [0] * (n + 1)
        self.cat = [[0] * len(CATEGORIES) for _ in range(n + 1)]
        self.lo = [1 << 62] * (n + 1)
        self.hi = [-(1 << 62)] * (n + 1)
        self.block_at: dict[int, int] = {}

    def walk(self, tr: Trace, launch_ts: Callable[[int], int | None], its: list[_Iteration],
             cats: Sequence[Category], dev_owner: Sequence[int], dev_share: Sequence[int]) -> None:
        """One pass over the device events: each event's iteration is the one its launch falls in."""
        starts, ends = [it.start for it in its], [it.end for it in its]
        index = {c: k for k, c in enumerate(CATEGORIES)}
        busy, att, cat, lo, hi, block_at = self.busy, self.att, self.cat, self.lo, self.hi, self.block_at
        staged = [it.stage is not None for it in its]
        for j, ev in enumerate(tr.device):
            k = _slot(launch_ts(j), starts, ends, staged)
            share = dev_share[j]
            busy[k] += share
            lo[k] = min(lo[k], ev.ts)
            hi[k] = max(hi[k], ev.ts + ev.dur)
            b = dev_owner[j]
            if b != NONE:
                att[k] += share
                cat[k][index[cats[j]]] += share
                block_at.setdefault(b, k)

    def rows(self, its: list[_Iteration], results: Sequence[BlockResult]) -> list[StageRow]:
        """The iterations summed per stage, in STAGE_ORDER; ``outside`` only where it holds device time."""
        keys = [it.stage or OUTSIDE for it in its] + [OUTSIDE]
        out: dict[str, StageRow] = {}
        for k, stage in enumerate(keys):
            if stage == OUTSIDE and self.lo[k] > self.hi[k]:
                continue  # no device event: no row of its own
            row = out.get(stage) or out.setdefault(stage, _empty_row(stage))
            self._add(row, k, None if stage == OUTSIDE else its[k].rule)
        self._add_blocks(out, keys, results)
        return [out[s] for s in STAGE_ORDER if s in out]

    def _add_blocks(self, out: dict[str, StageRow], keys: list[str], results: Sequence[BlockResult]) -> None:
        """Each block counted in (and its efficiency summed into) the stage of the iteration of its first event."""
        for b, k in self.block_at.items():
            row = out[keys[k]]
            row.blocks += 1
            e = results[b].efficiency if b < len(results) else None
            if e is not None:
                row.efficiency = _summed(row.efficiency, e)

    def _add(self, row: StageRow, k: int, rule: str | None) -> None:
        """Iteration ``k``'s figures into its stage's row (``rule`` None: the outside slot, which has no span: its
        events lie between and around the iterations, not in one stretch)."""
        row.busy_us += self.busy[k] / 1000
        row.attention_us += self.att[k] / 1000
        for c, ns in zip(CATEGORIES, self.cat[k]):
            row.categories[c] += ns / 1000
        if rule is None or row.span_us is None or row.idle_us is None:
            return
        span = max(0, self.hi[k] - self.lo[k])
        row.span_us += span / 1000
        row.idle_us += (span - self.busy[k]) / 1000
        row.iterations += 1
        row.rules[rule] = row.rules.get(rule, 0) + 1


def _empty_row(stage: str) -> StageRow:
    """A stage's row before its iterations are added (``outside`` has no span)."""
    span = None if stage == OUTSIDE else 0.0
    return StageRow(stage=stage, iterations=0, rules={}, busy_us=0.0, attention_us=0.0,
                    categories=dict.fromkeys(CATEGORIES, 0.0), span_us=span, idle_us=span, blocks=0)


def _summed(a: Efficiency | None, b: Efficiency) -> Efficiency:
    out = Efficiency() if a is None else a
    out.add(b)
    return out


def _launch_times(tr: Trace, links: Links, graph_launches: Sequence[GraphLaunch]) -> Callable[[int], int | None]:
    """Device event -> the ns its launch started: the graph launch that replayed it (a replayed kernel's host op,
    once mapped to its capture, carries the capture's clock), else its runtime call's, else its innermost host
    event's; None when nothing launched it (an unlinked event: outside every iteration)."""
    calls, leaf, rt, host = links.device_call, links.device_leaf, tr.runtime, tr.host
    replayed = {j: rt[g.runtime].ts for g in graph_launches for j in g.device}

    def at(j: int) -> int | None:
        t = replayed.get(j)
        if t is not None:
            return t
        c = calls[j] if calls else None
        if c is not None:
            return rt[c].ts
        h = leaf[j]
        return None if h == NONE else host[h].ts

    return at
