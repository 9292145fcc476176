"""The model zoo (issue 22): tracekit must find exactly the attention calls that tiny transformers models made.

Each case of tests/support/zoo.py is recorded once (cached, see there) and analysed once per session. Expectations
never come from tracekit:
- counts: forward hooks on the innermost attention modules, in the profiled steps; a training step runs one
  backward block per forward block;
- totals: our own walk of the raw trace JSON. A CPU block's total is host time (docs/attribution.md,
  "Time"): the self time of each host op inside the attention call, plus the call's time outside any op
  (Python), which the block also owns. The call is the innermost attention module's ``nn.Module:`` slice in
  stack traces, the outermost fused attention op in plain SDPA traces (plain eager traces have no such
  interval and are not summed);
- softmaxes (issue 38): in each step, the softmax ops inside blocks are exactly the softmax calls the attention
  modules made, counted by a dispatch mode under forward hooks in an un-profiled step (zoo.count_softmaxes);
- evidence: each block names the core it found (a fused attention op, or the softmax of the score/context
  pair), with the core's shapes when the trace recorded them.
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.traces import read_events
from support import zoo

import tracekit

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.zoo

HOST_OPS = ("cpu_op", "user_annotation")  # the host events that own self time (docs/attribution.md)
STEP = re.compile(r"ProfilerStep#(\d+)$")
FUSED_OP = re.compile(r"aten::_?scaled_dot_product_\w*attention\w*(?<!_backward)$")  # forward SDPA and its backends
NS = 1e-3  # µs: the timestamps' unit (Kineto writes µs with ns decimals)
CORES = {"sdpa": ("scaled_dot_product", "flash_attention", "efficient_attention"), "eager": ("softmax",)}
# Issue 38: a compiled-region core is named by what the region shows: a flex kernel, a softmax kernel, the extern
# bmm pair of compiled eager attention, or (CPU FlexAttention: nothing recorded inside) the region itself.
COMPILED_CORES = ("flex", "softmax", "aten::bmm", "torch-compiled region")
REGION = re.compile(r"Torch-Compiled Region\b")


@dataclass
class Analysed:
    rec: zoo.Recorded
    result: Any  # tracekit.Attribution

    def blocks(self, phase: str) -> list:
        return [b for b in self.result.blocks if str(b.phase) == phase]


def _params() -> list:
    return [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.slow else []) for c in zoo.CASES]


@pytest.fixture(scope="session")
def zoo_root(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = getattr(request.config, "cache", None)
    if cache is None:  # -p no:cacheprovider
        return tmp_path_factory.mktemp("zoo")
    root = cache.mkdir("tracekit-zoo") / zoo.cache_key()
    zoo.prune_stale(root)
    return root


@pytest.fixture(scope="session", params=_params())
def analysed(request: pytest.FixtureRequest, zoo_root: Path) -> Analysed:
    try:
        rec = zoo.cached_record(request.param, zoo_root)
    except zoo.Unavailable as exc:
        pytest.skip(str(exc))
    return Analysed(rec, tracekit.attribute_trace(tracekit.load_trace(rec.trace)))


def _describe(blocks: list) -> list[tuple]:
    return [(b.name, str(b.found_by), str(b.phase), b.step) for b in blocks]


# -- counts --------------------------------------------------------------------------------------------
def test_invariants_hold(analysed: Analysed) -> None:
    analysed.result.check()


def test_forward_blocks_are_the_attention_calls(analysed: Analysed) -> None:
    fwd = analysed.blocks("forward")
    if not analysed.rec.case.seen:  # compiled code no op names, no attention scope: nothing to make a block of
        assert fwd == [], f"blocks where no attention can be seen: {_describe(fwd)}"
        return
    assert len(fwd) == analysed.rec.forward_calls, (
        f"hooks on {analysed.rec.attention_classes} counted {analysed.rec.forward_calls} calls "
        f"{analysed.rec.per_step}; tracekit: {_describe(fwd)}")


def test_backward_blocks_match_forward_calls(analysed: Analysed) -> None:
    bwd = analysed.blocks("backward")
    assert len(bwd) == analysed.rec.backward_calls, (
        f"{analysed.rec.case.mode}: expected {analysed.rec.backward_calls} backward blocks; "
        f"tracekit: {_describe(bwd)}")


def test_each_step_holds_its_calls(analysed: Analysed) -> None:
    if not analysed.rec.case.seen:
        pytest.skip("no block can be found in compiled code no scope names (test_compiled_regions_are_listed)")
    per_step = defaultdict(int)
    for b in analysed.blocks("forward"):
        per_step[b.step] += 1
    assert [per_step[s] for s in sorted(per_step)] == analysed.rec.per_step, _describe(analysed.blocks("forward"))


# -- softmaxes: each attention softmax inside a block ---------------------------------------------------
SOFTMAX_NAMES = {f"aten::{n}" for n in zoo.SOFTMAX_OPS}


def _softmaxes_in_blocks_by_step(events: list[dict], result: Any) -> list[int]:
    """Per ProfilerStep#N (in order), the outermost softmax ops of the raw trace that lie inside a block's host
    span on their thread (a softmax called inside another softmax op is one call)."""
    ops = [e for e in events if e.get("cat") in HOST_OPS and not STEP.match(e["name"])]
    spans = _block_host_spans(result)
    inside = [e for e in _outermost_softmaxes(ops) if any(_in_span(e, sp) for sp in spans)]
    return [sum(1 for e in inside if _inside(e, step)) for step in _steps_in_order(events)]


def _steps_in_order(events: list[dict]) -> list[dict]:
    """The ProfilerStep#N events, by N."""
    return sorted((e for e in events if STEP.match(e["name"])), key=lambda e: int(STEP.match(e["name"]).group(1)))


def _outermost_softmaxes(ops: list[dict]) -> list[dict]:
    """The softmax ops not nested inside another softmax op (time nesting on each thread)."""
    nesting = _nesting(ops)

    def under_softmax(e: dict) -> bool:
        p = nesting[id(e)].parent
        return p is not None and (p["name"] in SOFTMAX_NAMES or under_softmax(p))

    return [e for e in ops if e["name"] in SOFTMAX_NAMES and not under_softmax(e)]


def _block_host_spans(result: Any) -> list[tuple]:
    """Every block's host spans as (pid, tid, start, end) in the raw trace's µs (the results count from the
    trace's origin)."""
    origin_us = min(t.origin_ns for t in result.traces) / 1000
    return [(pid, tid, s + origin_us, e + origin_us) for b in result.blocks for pid, tid, s, e in b.host_spans]


def _in_span(e: dict, span: tuple) -> bool:
    pid, tid, s, t = span
    return (e["pid"], e["tid"]) == (pid, tid) and e["ts"] >= s - NS and _end(e) <= t + NS


def test_each_attention_softmax_falls_inside_a_block(analysed: Analysed) -> None:
    """Issue 38: counting blocks is not enough (a block can hold the wrong softmax: Longformer's global-token
    attention instead of its windowed one). In each step, the softmax ops inside blocks number exactly the softmax
    calls the attention modules made (zoo.count_softmaxes, a dispatch mode under forward hooks): none missed, and
    no other softmax (a MoE router's, a loss's) inside a block."""
    rec = analysed.rec
    if rec.case.compiled or rec.case.attn == "flex_attention":
        pytest.skip("compiled code fuses the softmax into its own kernels (flex_attention is compiled too): the trace "
                    "has no softmax op to place")
    got = _softmaxes_in_blocks_by_step(_events(rec.trace), analysed.result)
    assert got == [rec.softmaxes] * len(rec.per_step), (
        f"{rec.softmaxes} softmax calls per step inside {rec.attention_classes}; inside blocks per step: {got}")


# -- totals against our own walk of the raw trace ----------------------------------------------------
def _events(path: Path) -> list[dict]:
    return [e for e in read_events(path) if e.get("ph") == "X"]


def _resolution(events: list[dict]) -> float:
    """µs: a nanosecond, or the spacing of doubles at the trace's largest timestamp if that is coarser."""
    return max(NS, math.ulp(max(_end(e) for e in events)))


def _end(e: dict) -> float:
    return e["ts"] + e["dur"]


def _inside(e: dict, outer: dict) -> bool:
    return (e["pid"], e["tid"]) == (outer["pid"], outer["tid"]) and e["ts"] >= outer["ts"] - NS \
        and _end(e) <= _end(outer) + NS


@dataclass
class Nested:
    self_us: float  # dur minus the direct children's durs
    parent: dict | None  # the op directly around it on its thread


def _nesting(ops: list[dict]) -> dict[int, Nested]:
    """id(op) -> its self time and parent, by time nesting on each (pid, tid)."""
    out: dict[int, Nested] = {}
    stacks: dict[tuple, list[dict]] = defaultdict(list)
    for e in sorted(ops, key=lambda e: (e["ts"], -e["dur"])):
        stack = stacks[(e["pid"], e["tid"])]
        while stack and _end(stack[-1]) <= e["ts"] + NS:
            stack.pop()
        parent = stack[-1] if stack else None
        out[id(e)] = Nested(e["dur"], parent)
        if parent is not None:
            out[id(parent)].self_us -= e["dur"]
        stack.append(e)
    return out


@dataclass
class OwnBlock:
    """Our sum for one attention call: an attention module's slice, or a fused attention op."""

    name: str
    ops: int
    op_self_us: float  # self time of the host ops inside the interval
    python_us: float  # the interval's time outside any op (a module slice's Python)

    @property
    def total_us(self) -> float:
        return self.op_self_us + self.python_us


def _own_block(interval: dict, ops: list[dict], nesting: dict[int, Nested]) -> OwnBlock:
    inside = [e for e in ops if _inside(e, interval)]
    outermost = [e for e in inside if nesting[id(e)].parent is None or not _inside(nesting[id(e)].parent, interval)]
    return OwnBlock(interval["name"], len(inside), sum(nesting[id(e)].self_us for e in inside),
                    interval["dur"] - sum(e["dur"] for e in outermost))


def _module_slices(events: list[dict], classes: list[str]) -> list[dict]:
    """The ``nn.Module:`` slices of the innermost attention classes (with_stack traces)."""
    names = "|".join(map(re.escape, classes))
    slices = re.compile(rf"nn\.Module: ({names})_\d+$")
    return [e for e in events if e.get("cat") == "python_function" and slices.match(e["name"])]


def _fused_ops(ops: list[dict], nesting: dict[int, Nested]) -> list[dict]:
    """Forward fused attention ops not inside another one (plain SDPA traces: the op is the call)."""
    def fused(e: dict | None) -> bool:
        return e is not None and bool(FUSED_OP.match(e["name"]))

    def under_fused(e: dict) -> bool:
        p = nesting[id(e)].parent
        return p is not None and (fused(p) or under_fused(p))

    return [e for e in ops if fused(e) and not under_fused(e)]


def _own_blocks_by_step(events: list[dict], rec: zoo.Recorded) -> dict[int, list[OwnBlock]] | None:
    """Per ProfilerStep#N, our sums for its attention calls in time order; None where a trace has no
    interval of its own per call (a plain eager trace: the score, softmax and context ops are loose)."""
    ops = [e for e in events if e.get("cat") in HOST_OPS and not STEP.match(e["name"])]
    nesting = _nesting(ops)
    if rec.case.stack:
        calls = _module_slices(events, rec.attention_classes)
    elif rec.case.attn == "sdpa":
        calls = _fused_ops(ops, nesting)
    else:
        return None
    calls.sort(key=lambda e: e["ts"])
    out: dict[int, list[OwnBlock]] = {}
    for step in (e for e in events if STEP.match(e["name"])):
        n = int(STEP.match(step["name"]).group(1))
        out[n] = [_own_block(c, ops, nesting) for c in calls if _inside(c, step)]
    return out


def test_block_totals_match_own_walk(analysed: Analysed) -> None:
    """Forward blocks against our sums over the attention calls: the innermost attention modules' slices
    (stack traces) or the fused attention ops (plain SDPA traces).

    Paired by step and order: the k-th forward block of step N is the k-th call in ProfilerStep#N.
    (Backward ops have no slice of their own to sum over.)"""
    events = _events(analysed.rec.trace)
    own = _own_blocks_by_step(events, analysed.rec)
    if own is None:
        pytest.skip("a plain eager trace has no interval per attention call to sum over")
    assert sum(map(len, own.values())) == analysed.rec.forward_calls, "the trace's attention calls vs the hooks"
    got = defaultdict(list)
    for b in sorted(analysed.blocks("forward"), key=lambda b: (b.step, b.ordinal)):
        got[b.step].append(b)
    # A few roundings per op of the timestamps' precision: far below any op's time (a CPU aten op takes µs), so
    # a block that holds one op too many or too few (a layer norm, a residual add) cannot pass.
    per_op = 4 * _resolution(events)
    wrong = []
    for step, mine in own.items():
        theirs = got.get(step, [])
        assert len(theirs) == len(mine), f"step {step}: {len(mine)} attention calls, blocks {_describe(theirs)}"
        for m, b in zip(mine, theirs):
            if abs(b.total_us - m.total_us) > per_op * (m.ops + 2):
                wrong.append(f"step {step} {m.name}: own {m.total_us:.3f} µs (ops {m.op_self_us:.3f} + python "
                             f"{m.python_us:.3f}, {m.ops} ops) vs block {b.name} ({b.found_by}) {b.total_us:.3f} µs")
    assert not wrong, "\n".join(wrong)


# -- evidence ----------------------------------------------------------------------------------------
def test_each_block_names_its_core(analysed: Analysed) -> None:
    from tracekit.results.attribution import BlockResult

    if "evidence" not in {f.name for f in dataclasses.fields(BlockResult)}:
        pytest.skip("BlockResult.evidence does not exist yet (issue 22: being added)")
    cores = _cores(analysed.rec.case)
    missing = [(b.name, str(b.phase), b.evidence) for b in analysed.result.blocks
               if not any(c in _core_names(b.evidence) for c in cores)]
    assert not missing, f"blocks whose evidence names none of {cores}: {missing}"
    if analysed.rec.case.shapes:  # a score/softmax/context core says what shapes it was matched on
        bare = [(b.name, str(b.phase), b.evidence) for b in analysed.result.blocks
                if "softmax" in _core_names(b.evidence) and not getattr(b.evidence, "shapes", None)]
        assert not bare, f"eager cores without their recorded shapes: {bare}"


def _cores(case: zoo.Case) -> tuple[str, ...]:
    """The names a block's evidence may give its core: compiled code no op names shows a compiled-region core."""
    hidden_ops = case.attn == "flex_attention" or (case.compiled and case.attn == "eager")
    return COMPILED_CORES if hidden_ops else CORES[case.attn]


def _core_names(evidence: object) -> str:
    """The op or kernel names the evidence gives for its core (its ``names``, else its text), lower case."""
    if evidence is None:
        return ""
    names = getattr(evidence, "names", None)
    return (" ".join(map(str, names)) if names is not None else str(evidence)).lower()



# -- compiled attention that no op names (issue 38) ----------------------------------------------------------------
def _outermost_regions(events: list[dict], classes: list[str]) -> tuple[list[dict], list[dict]]:
    """The raw trace's Torch-Compiled Region events not inside another one: (outside every slice of the
    innermost attention modules, inside one)."""
    regions = [e for e in events if REGION.match(e["name"])]
    outer = [e for e in regions if not _within_any(e, [o for o in regions if o is not e])]
    slices = _module_slices(events, classes)
    held = [_within_any(e, slices) for e in outer]
    return [e for e, h in zip(outer, held) if not h], [e for e, h in zip(outer, held) if h]


def _within_any(e: dict, outers: list[dict]) -> bool:
    return any(_inside(e, o) for o in outers)


def test_compiled_regions_are_listed_or_are_blocks(analysed: Analysed) -> None:
    """Where attention runs in compiled code, each outermost compiled region of the raw trace is either inside an
    attention module's slice (then that call is a block whose core is the compiled region) or listed under
    "attention outside blocks": their count and host time from our own walk."""
    case = analysed.rec.case
    if not (case.compiled or case.attn == "flex_attention"):
        pytest.skip("not compiled")
    listed = analysed.result.compiled_outside
    if case.attn == "sdpa":  # SDPA ops stay visible inside compiled code: blocks, and no region is listed
        assert listed is None, listed
        return
    events = _events(analysed.rec.trace)
    outside, inside = _outermost_regions(events, analysed.rec.attention_classes)
    assert (listed.regions if listed else 0) == len(outside), (listed, len(outside))
    if listed is not None:
        assert abs(listed.host_us - sum(e["dur"] for e in outside)) <= 4 * _resolution(events) * len(outside)
    if case.seen:
        compiled = [b for b in analysed.blocks("forward") if str(b.evidence.core) == "compiled-region"]
        assert len(compiled) == len(inside) == analysed.rec.forward_calls, _describe(analysed.blocks("forward"))


def test_hidden_compiled_attention_is_counted_outside_blocks(analysed: Analysed) -> None:
    """Where no attention can be seen, the listing still accounts for the calls: transformers compiles
    flex_attention alone (a region per call, so at least one region per call); a compiled eager call runs its
    QKᵀ and PV as two extern bmm calls (the model's two 4-D matmuls), so two listed products per call."""
    case, listed = analysed.rec.case, analysed.result.compiled_outside
    if case.seen:
        pytest.skip("the calls are blocks (test_forward_blocks_are_the_attention_calls)")
    assert listed is not None
    if case.attn == "eager":
        assert listed.batched_products == 2 * analysed.rec.forward_calls, listed
    else:
        assert listed.regions >= analysed.rec.forward_calls, listed


# -- the attention layer (issue 38, class 4) ---------------------------------------------------------------
def test_each_block_names_its_attention_layer(analysed: Analysed) -> None:
    """Where modules are recorded, each block of an innermost attention class names the layer the model's
    structure gives around that class (zoo.expected_layers: the outermost module holding this one attention module
    and no activation), or none where the attention module is its own layer."""
    if not analysed.rec.case.stack:
        pytest.skip("no nn.Module slices in a plain trace: no scope to be a layer")
    model, _ = zoo.build(analysed.rec.case)
    expected = zoo.expected_layers(model)
    got: dict[str, set[str | None]] = defaultdict(set)
    for b in analysed.blocks("forward"):
        cls = re.sub(r"_\d+$", "", b.name)
        if cls in expected:
            got[cls].add(None if b.layer is None else re.sub(r"_\d+$", "", b.layer.name))
    assert got, f"no block of the attention classes {sorted(expected)}: {_describe(analysed.blocks('forward'))}"
    assert dict(got) == {c: expected[c] for c in got}


def test_layer_totals_match_own_walk(analysed: Analysed) -> None:
    """Each forward block's layer total against our sum over the layer module's slice (host self time of the ops
    inside it plus its Python time, as test_block_totals_match_own_walk sums a block), paired by step and order."""
    if not analysed.rec.case.stack:
        pytest.skip("no nn.Module slices in a plain trace: no scope to be a layer")
    layered = [b for b in analysed.blocks("forward") if b.layer is not None]
    if not layered:
        pytest.skip("no block of this model has a layer around it (zoo.expected_layers says which do)")
    events = _events(analysed.rec.trace)
    ops = [e for e in events if e.get("cat") in HOST_OPS and not STEP.match(e["name"])]
    nesting = _nesting(ops)
    steps = {int(STEP.match(e["name"]).group(1)): e for e in events if STEP.match(e["name"])}
    per_op = 4 * _resolution(events)
    wrong = []
    for b in sorted(layered, key=lambda b: (b.step, b.ordinal)):
        layer = b.layer
        assert layer is not None
        same = sorted((e for e in events if e["name"] == f"nn.Module: {layer.name}" and _inside(e, steps[b.step])),
                      key=lambda e: e["ts"])
        mine = [x for x in layered if x.step == b.step and x.layer is not None and x.layer.name == layer.name]
        own = _own_block(same[mine.index(b)], ops, nesting)
        if abs(layer.total_us - own.total_us) > per_op * (own.ops + 2):
            wrong.append(f"step {b.step} {layer.name}: own {own.total_us:.3f} µs vs layer {layer.total_us:.3f} µs")
    assert not wrong, "\n".join(wrong)
