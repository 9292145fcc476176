"""attribute_trace as named stages (tracekit.analysis.pipeline): the order, and each stage alone.

Each test runs a prefix of STAGES on a hand-built trace and checks what the last stage put on the context;
the answers are known by construction (tests/builders.py's attention_block: busy 31 µs, matmul 20, softmax 5,
elementwise 2, memory 4, six device events).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from support.builders import TraceBuilder, attention_block
from support.paths import REAL, requires_real
from tracekit.analysis.context import AttributeConfig, StageContext, StageOrderError
from tracekit.analysis.link import NONE
from tracekit.analysis.pipeline import STAGES, attribute_trace, run_stages, stage_names
from tracekit.io.load import load_trace
from tracekit.model import Trace
from tracekit.vocab import Category, FoundBy, Phase, TimeBase

T0 = 1000


def _eager(tmp_path) -> Trace:
    b = TraceBuilder()
    attention_block(b, T0)
    return load_trace(b.write(tmp_path / "eager.json"))


def _until(tr: Trace, last: str, **config) -> StageContext:
    """A fresh context for ``tr`` after the stages up to and including ``last``."""
    stages = STAGES[: stage_names().index(last) + 1]
    return run_stages(StageContext(tr=tr, config=AttributeConfig(**config)), stages)


def test_the_stages_run_in_this_order_each_with_a_reason():
    assert stage_names() == [
        "find-graphs", "read-origin", "replay-captures", "link", "classify-device", "find-host-blocks",
        "attach-backward", "record-captured", "find-kernel-blocks", "find-layers", "measure-busy",
        "account-device", "add-efficiency", "assemble-device", "split-stages", "collect-hint-facts", "account-host",
        "list-compiled-outside", "account-layers", "summarize-graphs", "evaluate-hints",
    ]
    assert all(s.why and s.run.__doc__ for s in STAGES)


def test_a_stage_run_before_the_stage_it_reads_names_the_missing_field(tmp_path):
    ctx = StageContext(tr=_eager(tmp_path))
    find_blocks = STAGES[stage_names().index("find-host-blocks")]
    with pytest.raises(StageOrderError, match="no links yet"):
        run_stages(ctx, [find_blocks])


def test_link_and_classify_give_each_device_event_its_category(tmp_path):
    ctx = _until(_eager(tmp_path), "classify-device")
    assert ctx.links is not None and ctx.blocks == []
    # the bmm's workspace memset and the copy are memory, the two GEMMs matmul, the div elementwise
    assert Counter(ctx.cats or []) == {Category.MATMUL: 2, Category.MEMORY: 2, Category.ELEMENTWISE: 1,
                                       Category.SOFTMAX: 1}


def test_a_cpu_only_trace_has_no_device_categories(tmp_path):
    b = TraceBuilder()
    b.annotation("attn", 0, 50)
    b.op("aten::bmm", 1, 8)
    ctx = _until(load_trace(b.write(tmp_path / "cpu.json")), "classify-device")
    assert ctx.cats is None and not ctx.device


def test_host_blocks_own_the_ops_inside_them(tmp_path):
    ctx = _until(_eager(tmp_path), "find-host-blocks")
    [blk] = ctx.blocks
    assert (blk.name, blk.found_by, blk.phase) == ("layer0.attention", FoundBy.ANNOTATION, Phase.FORWARD)
    host = ctx.tr.host
    inside = [i for i, h in enumerate(host) if T0 * 1000 <= h.ts < (T0 + 60) * 1000]
    assert inside and all(ctx.owner[i] == 0 for i in inside)
    assert ctx.dev_owner is None  # the kernels are the find-kernel-blocks stage's


def test_attach_backward_adds_a_backward_block_for_a_flow_from_a_block_op(tmp_path):
    b = TraceBuilder()
    attention_block(b, T0)
    back = b.op("autograd::engine::evaluate_function: BmmBackward0", 5000, 30, tid=2)
    b.flow(9, True, T0 + 1)  # from the block's first aten::bmm (at T0 + 1 on the main thread)
    b.flow(9, False, back["ts"], tid=2)
    ctx = _until(load_trace(b.write(tmp_path / "bwd.json")), "attach-backward")
    fwd, bwd = ctx.blocks
    assert (bwd.phase, bwd.forward, bwd.name) == (Phase.BACKWARD, 0, fwd.name)
    [root] = bwd.roots
    assert ctx.tr.host[root].ts == 5000 * 1000 and ctx.owner[root] == 1


def test_every_event_of_the_block_is_owned_and_the_device_busy_time_measured(tmp_path):
    ctx = _until(_eager(tmp_path), "measure-busy")
    assert ctx.dev_owner == [0] * 6
    t = ctx.device_time
    assert t is not None
    assert (t.total_ns, t.in_blocks_ns) == (31_000, 31_000)  # five 1-µs gaps and no overlap: busy is the sum
    assert sorted(t.members) == [0] and len(t.members[0]) == 6
    assert ctx.block_results == [] and ctx.result is None


def test_account_device_splits_the_block_by_category(tmp_path):
    ctx = _until(_eager(tmp_path), "account-device")
    [r] = ctx.block_results
    assert r.total_us == pytest.approx(31) and r.kernels == 6
    assert r.categories == pytest.approx({"matmul": 20, "softmax": 5, "fused_attention": 0, "memory": 4,
                                          "elementwise": 2, "other": 0})
    assert ctx.walk is not None and sum(ctx.walk.dev_share) == 31_000  # each event's share, summed: the busy time
    assert r.efficiency is None  # the add-efficiency stage's


def test_assemble_device_builds_the_result_without_hints(tmp_path):
    ctx = _until(_eager(tmp_path), "assemble-device")
    res = ctx.result
    assert res is not None and res.time_base == TimeBase.DEVICE
    assert res.totals.total_us == pytest.approx(31) and res.totals.attention_share == pytest.approx(1.0)
    assert res.hint_facts is None and res.hints == []


def test_hint_facts_count_every_owned_event_once_under_the_block_kind(tmp_path):
    ctx = _until(_eager(tmp_path), "collect-hint-facts")
    facts = ctx.result.hint_facts
    [(key, g)] = facts.items()
    assert key == (ctx.block_results[0].kind, "forward")
    assert sum(n for n, _ in g.kernels.values()) == 6
    assert sum(us for _, us in g.kernels.values()) == pytest.approx(31)


def test_with_hints_off_no_facts_are_gathered_and_no_hint_is_given(tmp_path):
    ctx = _until(_eager(tmp_path), "evaluate-hints", hints=False)
    assert ctx.result.hint_facts is None and ctx.result.hints == []


def test_account_host_uses_host_self_time_on_a_cpu_only_trace(tmp_path):
    b = TraceBuilder()
    b.annotation("attn", 0, 50)
    b.op("aten::bmm", 1, 8)
    b.op("aten::_softmax", 10, 6)
    b.op("aten::bmm", 20, 8)
    ctx = _until(load_trace(b.write(tmp_path / "cpu.json")), "account-host")
    assert ctx.dev_owner is None and ctx.device_time is None  # the device stages did nothing
    res = ctx.result
    assert res is not None and res.time_base == TimeBase.HOST
    [blk] = res.blocks
    # self times: the products 8 + 8, the softmax 6, the range's own 50 - 22 = 28 (other)
    assert blk.categories == pytest.approx({"matmul": 16, "softmax": 6, "fused_attention": 0, "memory": 0,
                                            "elementwise": 0, "other": 28})


def test_summarize_graphs_sets_the_origin_and_a_graph_summary(tmp_path):
    ctx = _until(_eager(tmp_path), "summarize-graphs")
    trace = ctx.result.traces[0]
    assert trace.origin_ns == ctx.origin and ctx.origin <= T0 * 1000
    assert trace.graphs is not None and str(trace.graphs.mode) == "eager"
    assert ctx.result.hints == []  # evaluate-hints comes last


def test_evaluate_hints_last_gives_attribute_traces_hints(tmp_path):
    """The block earns two hints by construction: it idles 105 of its 136 µs span (busy 31), launch-bound; its
    softmax kernel is templated on float while its GEMMs are bf16 (their names say so), fp32-softmax. Only the
    last stage gives them, and attribute_trace (the whole list) returns them."""
    before = _until(_eager(tmp_path), "summarize-graphs").result
    ctx = run_stages(StageContext(tr=_eager(tmp_path)))
    assert before.hints == []
    assert [h.rule for h in ctx.result.hints] == ["launch-bound", "fp32-softmax"]
    assert [h.rule for h in attribute_trace(_eager(tmp_path)).hints] == ["launch-bound", "fp32-softmax"]


def test_no_owner_left_unset_for_events_outside_blocks(tmp_path):
    """Host events outside every block are NONE, not a block index (the owners the later stages read)."""
    b = TraceBuilder()
    b.op("aten::add", 0, 5)
    attention_block(b, T0)
    ctx = _until(load_trace(b.write(tmp_path / "t.json")), "find-host-blocks")
    first = min(range(len(ctx.tr.host)), key=lambda i: ctx.tr.host[i].ts)
    assert ctx.owner[first] == NONE


# -- walks over the events: what each stage may cost on a big trace ---------------------------------------------
# Each stage's walks over the trace's event lists, in pass-equivalents on the trace built below (40 layers, 2 steps,
# an allocation per layer): a whole iteration is one pass, index reads count 1/len each. The analysis is linear and
# each walk over every event is what the 1 GB benchmark sees, so an added one must fail here, naming the stage and
# the list (issue 40): lower a budget when a walk goes, raise one only with its reason.
PASS_BUDGET: dict[str, tuple[dict[str, int], str]] = {
    "read-origin": ({"host": 1, "device": 1, "runtime": 1, "memory": 1}, "each list's earliest timestamp"),
    "link": ({"host": 5, "device": 2, "runtime": 2},
             "host: the ts and thread key lists of the sort, the nesting sweep (the runtime calls' leaves read off "
             "its stack as they go by); device: correlation ids and the External-id check; runtime: the calls' "
             "times and threads in one walk, correlation ids"),
    "classify-device": ({"host": 1, "device": 1}, "each kernel's name and its launching op's"),
    "find-host-blocks": ({"host": 6},
                         "softmax ops' keys, their siblings (only the events under their keys: picked out of the "
                         "order by their parents), the product ops, the eager triples' neighbours and scopes"),
    "find-kernel-blocks": ({"device": 2}, "the start and stream key lists of the per-stream sort"),
    "measure-busy": ({"device": 2}, "busy_time: the start key list and the first-come sweep"),
    "account-device": ({"host": 2, "device": 5, "runtime": 2, "memory": 1},
                       "device: the device's merged work, each block's events, busy split, categories and the "
                       "enders' calls; host: roots and product ops' roles; runtime: names for the blocking calls "
                       "and each gap's launch call; memory: one sort for the bytes and peaks"),
    "assemble-device": ({"host": 1, "device": 3}, "the step index's passes and the events outside blocks"),
    "collect-hint-facts": ({"host": 2, "device": 1}, "each owned kernel and its launching op"),
    "split-stages": ({"host": 1, "device": 1, "runtime": 1},
                     "serving traces only (a training trace is never walked: the name table decides): the host events "
                     "for the framework's iteration ranges, the device events and each one's launch call for its "
                     "iteration"),
}
_LISTS = ("host", "device", "runtime", "memory")


class _Walked(list):
    """An event list that counts the walks over it: iterations (also reversed and ``in``) and index reads."""

    def __init__(self, items) -> None:
        super().__init__(items)
        self.iters = self.reads = 0

    def __iter__(self):
        self.iters += 1
        return super().__iter__()

    def __reversed__(self):
        self.iters += 1
        return super().__reversed__()

    def __contains__(self, x) -> bool:
        self.iters += 1
        return super().__contains__(x)

    def __getitem__(self, i):
        self.reads += 1 if isinstance(i, int) else len(range(*i.indices(len(self))))
        return super().__getitem__(i)

    def passes(self) -> float:
        return self.iters + self.reads / max(1, len(self))


def _walks_per_stage(tmp_path, stages=STAGES) -> dict[str, dict[str, float]]:
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    t = 0
    for s in range(2):
        b.annotation(f"ProfilerStep#{s + 1}", t, 400 * 40)
        for i in range(40):
            attention_block(b, t + 1 + 400 * i, name=f"layer{i}.attention")
            b.memory(t + 2 + 400 * i, 1024, total=4096 + i)
        t += 400 * 40 + 10
    tr = load_trace(b.write(tmp_path / "walked.json"))
    for f in _LISTS:
        setattr(tr, f, _Walked(getattr(tr, f)))
    ctx = StageContext(tr=tr, config=AttributeConfig())
    out = {}
    for stage in stages:
        before = {f: getattr(tr, f).passes() for f in _LISTS}
        stage.run(ctx)
        out[stage.name] = {f: getattr(tr, f).passes() - before[f] for f in _LISTS}
    attribution = ctx.result
    assert attribution is not None and len(attribution.blocks) == 80
    attribution.check()
    return out


def _over_budget(walks: dict[str, dict[str, float]]) -> list[str]:
    """'stage list: passes > budget' for each list a stage walks more often than PASS_BUDGET allows (half a pass
    of slack: index reads over part of a list count a fraction)."""
    over = []
    for stage, per_list in walks.items():
        budget = PASS_BUDGET.get(stage, ({}, ""))[0]
        over += [f"{stage} {f}: {n:.2f} > {budget.get(f, 0)}" for f, n in per_list.items()
                 if n > budget.get(f, 0) + 0.5]
    return over


def test_no_stage_walks_the_events_more_often_than_its_budget(tmp_path):
    walks = _walks_per_stage(tmp_path)
    assert _over_budget(walks) == []
    assert all(PASS_BUDGET[s][1] for s in PASS_BUDGET) and set(PASS_BUDGET) <= set(stage_names())


def test_split_stages_walks_a_serving_trace_once_and_a_training_trace_never(tmp_path):
    """Issue 44: the stage split pays one pass per list on a serving trace, none on this file's training trace."""
    from support.builders import SERVING_ITERATIONS, serving_trace

    assert _walks_per_stage(tmp_path)["split-stages"] == dict.fromkeys(_LISTS, 0)
    tr = load_trace(serving_trace(tmp_path / "serving.json", SERVING_ITERATIONS * 20))
    for f in _LISTS:
        setattr(tr, f, _Walked(getattr(tr, f)))
    ctx = _until(tr, "assemble-device")
    before = {f: getattr(tr, f).passes() for f in _LISTS}
    STAGES[stage_names().index("split-stages")].run(ctx)
    walked = {f: getattr(tr, f).passes() - before[f] for f in _LISTS}
    assert ctx.result.stages is not None and _over_budget({"split-stages": walked}) == []
    assert walked["host"] > 0 and walked["device"] > 0


def test_an_added_walk_over_the_events_is_caught(tmp_path):
    """The counting itself: a stage that also walks every host event (as a new feature's loop would) is reported."""
    stage = STAGES[stage_names().index("find-layers")]

    def walk_then_run(ctx: StageContext) -> None:
        sum(1 for h in ctx.tr.host if h.dur > 0)
        stage.run(ctx)

    patched = [dataclasses.replace(s, run=walk_then_run) if s is stage else s for s in STAGES]
    assert _over_budget(_walks_per_stage(tmp_path, patched)) == ["find-layers host: 1.00 > 0"]


def _cycles_left(tr: Trace, **config) -> int:
    """How many objects ``attribute_trace`` leaves in reference cycles (garbage only a collection frees)."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        result = attribute_trace(tr, **config)
        left = gc.collect()
    finally:
        if was:
            gc.enable()
    assert result.blocks
    return left


def test_the_analysis_leaves_no_reference_cycle(tmp_path):
    """The CLI pauses the garbage collector for the whole run (tracekit.memory.one_shot): anything the analysis
    leaves in a cycle (a memo holding a bound method of its owner, say) keeps the links' per-event lists alive while
    the report is rendered, the run's peak of memory (+40 MB at 1 GB of trace)."""
    tr = _eager(tmp_path)
    assert _cycles_left(tr) == 0
    assert _cycles_left(tr, hints=False) == 0


@requires_real
def test_the_analysis_of_a_real_trace_leaves_no_reference_cycle():
    tr = load_trace(REAL / "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz")
    assert _cycles_left(tr) == 0


def test_the_nesting_arrays_go_once_the_blocks_are_found(tmp_path):
    """Only block discovery reads ``Links.tree``; it is dropped before the accounting, where memory peaks."""
    tr = _eager(tmp_path)
    assert _until(tr, "link").links.tree is not None
    ctx = _until(tr, "find-host-blocks")
    assert ctx.links.tree is None and ctx.blocks
