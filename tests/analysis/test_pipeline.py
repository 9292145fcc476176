"""attribute_trace as named stages (tracekit.analysis.pipeline): the order, and each stage alone.

Each test runs a prefix of STAGES on a hand-built trace and checks what the last stage put on the context;
the answers are known by construction (tests/builders.py's attention_block: busy 31 µs, matmul 20, softmax 5,
elementwise 2, memory 4, six device events).
"""

from __future__ import annotations

from collections import Counter

import pytest

from support.builders import TraceBuilder, attention_block
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
        "account-device", "add-efficiency", "assemble-device", "collect-hint-facts", "account-host",
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
