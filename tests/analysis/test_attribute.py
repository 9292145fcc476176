"""Attribution on hand-built traces whose answers are known by construction."""

from __future__ import annotations

import pytest

from support.builders import TraceBuilder, attention_block
from support.builders import repeat_kv_block
from tracekit import analyze
from tracekit.results.attribution import CATEGORIES
from functools import partial
from support.pairs import GEMM_C, H100, cpu_trace, eager, fused, plain, write
from tracekit import load_trace
from tracekit.analysis.attribute import op_self_times
from tracekit.vocab import Category, TimeBase
from pathlib import Path
from support.builders import attribute_built


def _one(tmp_path, b: TraceBuilder, **kw):
    return analyze(b.write(tmp_path / "t.json"), **kw).check()


def test_eager_block_categories_and_idle(tmp_path):
    b = TraceBuilder()
    attention_block(b, 1000)
    res = _one(tmp_path, b)
    [blk] = res.blocks
    assert (blk.name, blk.found_by, blk.phase) == ("layer0.attention", "annotation", "forward")
    assert blk.categories == pytest.approx({"matmul": 20, "softmax": 5, "fused_attention": 0, "memory": 4,
                                            "elementwise": 2, "other": 0})  # the bmm's workspace memset is a fill
    # span: host and device work, from the annotation's start (t0) to the last kernel's end (t0 + 136)
    assert blk.total_us == pytest.approx(31) and blk.span_us == pytest.approx(136) and blk.idle_us == pytest.approx(105)
    assert blk.kernels == 6
    assert res.coverage.unlinked_us == 0 and res.totals.attention_share == pytest.approx(1.0)


def test_overlap_on_two_streams_is_counted_once_first_starter_keeps_it(tmp_path):
    b = TraceBuilder()
    b.annotation("attn", 0, 50)
    b.op("aten::bmm", 1, 5)
    b.launch("gemm_a_kernel", 2, 1, 100, 10, stream=7)  # [100, 110]
    b.op("aten::_softmax", 10, 5)
    b.launch("softmax_warp_forward<float, float, float, 8, false, false>", 11, 1, 104, 10, stream=8)  # [104, 114]
    b.op("aten::bmm", 20, 5)  # the context product (host only): QKᵀ → softmax → PV makes the range a block
    res = _one(tmp_path, b)
    [blk] = res.blocks
    assert blk.total_us == pytest.approx(14)  # union of [100,110] and [104,114]
    assert blk.categories["matmul"] == pytest.approx(10)
    assert blk.categories["softmax"] == pytest.approx(4)  # only what the earlier gemm did not cover
    assert res.coverage.device_us == pytest.approx(14)


def test_unlinked_device_time_is_reported_not_dropped(tmp_path):
    b = TraceBuilder()
    attention_block(b, 1000)
    b.device_only("void orphan_kernel(int)", 50, 7, corr=3)  # launched before the window: no runtime event
    res = _one(tmp_path, b)
    assert res.coverage.unlinked_us == pytest.approx(7)
    assert res.coverage.device_us == pytest.approx(38)
    assert res.totals.total_us == pytest.approx(31)
    assert res.totals.attention_share == pytest.approx(31 / 38)


def test_external_id_fallback_and_distrust_when_it_equals_correlation(tmp_path):
    b = TraceBuilder()
    b.annotation("attn", 0, 50)
    op = b.op("aten::bmm", 1, 5)
    b.op("aten::_softmax", 10, 5)
    b.op("aten::bmm", 20, 5)
    ext = op["args"]["External id"]
    b.device_only("gemm_kernel", 100, 10, corr=999, ext=ext)  # no runtime with corr 999, but External id matches
    res = _one(tmp_path, b)
    assert res.blocks[0].categories["matmul"] == pytest.approx(10)
    assert res.coverage.linked_us == pytest.approx(10)

    # 2022-23 traces: External id on device events is the correlation id; joining on it would be a false match.
    b2 = TraceBuilder()
    b2.annotation("attn", 0, 50)
    op = b2.op("aten::bmm", 1, 5)
    b2.op("aten::_softmax", 10, 5)
    b2.op("aten::bmm", 20, 5)
    ext = op["args"]["External id"]
    b2.device_only("gemm_kernel", 100, 10, corr=ext, ext=ext)
    res2 = analyze(b2.write(tmp_path / "t2.json")).check()
    assert res2.coverage.unlinked_us == pytest.approx(10)
    assert res2.blocks[0].total_us == 0


def test_gpu_annotation_fallback_links_by_stream_time(tmp_path):
    b = TraceBuilder()
    ann = b.annotation("layer0.attention", 0, 50)
    b.gpu_annotation("layer0.attention", 100, 30, ann["args"]["External id"])
    b.device_only("gemm_kernel", 101, 3, corr=4)  # GEMM → softmax → GEMM kernels: the range's eager core
    b.device_only("softmax_warp_forward<float, float, float, 8, false, false>", 105, 5, corr=5)
    b.device_only("gemm_kernel", 111, 3, corr=7)
    b.device_only("softmax_warp_forward<float, float, float, 8, false, false>", 140, 5, corr=6)  # outside
    res = _one(tmp_path, b)
    assert res.blocks[0].categories["softmax"] == pytest.approx(5)
    assert res.blocks[0].categories["matmul"] == pytest.approx(6)
    assert res.blocks[0].evidence.core == "gemm-softmax-gemm"
    assert res.coverage.unlinked_us == pytest.approx(5)


def test_innermost_scope_around_the_core_wins_and_profiler_step_is_never_a_block(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#3", 0, 500)
    b.module("BertAttention_0", 10, 200)
    b.module("BertSelfAttention_0", 20, 100)
    b.annotation("inner_attention_part", 30, 50)
    b.op("aten::scaled_dot_product_attention", 40, 20)
    b.op("aten::_flash_attention_forward", 41, 10)
    b.launch("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Params)", 42, 2, 300, 40)
    b.op("aten::scaled_dot_product_attention", 300, 20)  # outside any scope: its own fused-op block
    b.op("aten::_flash_attention_forward", 301, 10)
    b.launch("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Params)", 302, 2, 400, 30)
    res = _one(tmp_path, b)
    assert [(x.name, x.found_by, x.step, x.ordinal) for x in res.blocks] == [
        ("inner_attention_part", "annotation", 3, 0), ("aten::scaled_dot_product_attention", "fused-op", 3, 1)]
    assert [x.categories["fused_attention"] for x in res.blocks] == pytest.approx([40, 30])
    assert [x.evidence.names[0] for x in res.blocks] == ["aten::scaled_dot_product_attention"] * 2
    assert [x.evidence.rule for x in res.blocks] == ["innermost-scope", "fused-op"]


def test_inferred_eager_pattern_without_annotations(tmp_path):
    b = TraceBuilder()
    b.op("aten::linear", 0, 5)
    b.op("aten::matmul", 10, 5)
    b.op("aten::bmm", 11, 3)
    b.launch("gemm_kernel", 12, 1, 100, 4)
    b.op("aten::div", 16, 2)
    b.op("aten::softmax", 20, 5)
    b.op("aten::_softmax", 21, 3)
    b.launch("softmax_warp_forward<float, float, float, 8, false, false>", 22, 1, 105, 3)
    b.op("aten::matmul", 30, 5)
    b.op("aten::bmm", 31, 3)
    b.launch("gemm_kernel", 32, 1, 110, 4)
    b.op("aten::linear", 40, 5)
    b.launch("gemm_kernel", 41, 1, 120, 6)
    res = _one(tmp_path, b)
    [blk] = res.blocks
    assert blk.found_by == "inferred"
    assert blk.categories["matmul"] == pytest.approx(8) and blk.categories["softmax"] == pytest.approx(3)
    assert res.coverage.in_blocks_us == pytest.approx(11)  # the trailing projection is outside


def test_memory_allocated_inside_block(tmp_path):
    b = TraceBuilder(profile_memory=1)
    attention_block(b, 1000)
    b.memory(1005, 4096)
    b.memory(1006, -4096)  # frees are not allocations
    b.memory(1007, 1 << 20)
    b.memory(1007, 999, device_type=0)  # host allocation, not device memory
    b.memory(2000, 8192)  # outside the block
    res = _one(tmp_path, b)
    assert res.blocks[0].alloc_bytes == 4096 + (1 << 20)


def test_backward_ops_join_their_forward_block(tmp_path):
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 50)
    b.op("aten::bmm", 1, 5)
    b.launch("gemm_kernel", 2, 1, 100, 10)
    b.op("aten::_softmax", 10, 5)
    b.op("aten::bmm", 20, 5)
    b.flow(1, True, 1)
    bwd = b.op("autograd::engine::evaluate_function: BmmBackward0", 500, 20, tid=2)
    b.op("aten::bmm", 501, 5, tid=2)
    b.launch("gemm_kernel", 502, 1, 600, 20, tid=2)
    b.flow(1, False, 500, tid=2)
    res = _one(tmp_path, b)
    assert [(x.name, x.phase) for x in res.blocks] == [("layer0.attention", "forward"),
                                                        ("layer0.attention", "backward")]
    assert [x.categories["matmul"] for x in res.blocks] == pytest.approx([10, 20])
    assert bwd["name"].startswith("autograd")


def test_cpu_only_trace_uses_self_time(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 200)
    b.annotation("layer0.attention", 10, 100)
    b.op("aten::matmul", 12, 30)
    b.op("aten::bmm", 14, 20)
    b.op("aten::softmax", 45, 20)
    b.op("aten::_softmax", 46, 18)
    b.op("aten::contiguous", 70, 10)
    b.op("aten::copy_", 71, 8)
    b.op("aten::matmul", 85, 10)
    res = _one(tmp_path, b)
    [blk] = res.blocks
    assert res.time_base == "host"
    assert blk.total_us == pytest.approx(100)
    c = blk.categories
    assert c["matmul"] == pytest.approx(40) and c["softmax"] == pytest.approx(20) and c["memory"] == pytest.approx(10)
    assert c["other"] == pytest.approx(30)  # the annotation's own time between ops
    assert res.totals.attention_share == pytest.approx(0.5)


def test_check_catches_broken_invariants(tmp_path):
    b = TraceBuilder()
    attention_block(b, 1000)
    res = _one(tmp_path, b)
    res.blocks[0].categories["matmul"] += 1
    with pytest.raises(AssertionError):
        res.check()


def test_folder_sums_its_traces(tmp_path):
    for rank in (0, 1):
        b = TraceBuilder()
        attention_block(b, 1000)
        b.write(tmp_path / f"w{rank}.pt.trace.json.gz")
    res = analyze(tmp_path).check()
    assert res.totals.blocks == 2 and res.totals.total_us == pytest.approx(62)
    assert {b.source for b in res.blocks} == {"w0.pt.trace.json.gz", "w1.pt.trace.json.gz"}
    assert set(res.totals.categories) == set(CATEGORIES)


def test_folder_sums_its_compiled_regions_outside_blocks(tmp_path):
    """Issue 38: each CPU trace lists its compiled regions no block covers; a folder lists them all (k + 1 regions
    of 50 µs, one bmm each, in trace k)."""
    for k in (0, 1):
        b = TraceBuilder()
        for i in range(k + 1):
            b.op(f"Torch-Compiled Region: {k}/0", 100 * i, 50)
            b.op("aten::bmm", 100 * i + 10, 5)
        b.write(tmp_path / f"w{k}.pt.trace.json.gz")
    co = analyze(tmp_path).check().compiled_outside
    assert co is not None and (co.regions, co.batched_products) == (3, 3) and co.host_us == pytest.approx(150)
    assert co.names == {"Torch-Compiled Region: 1/0": 2, "Torch-Compiled Region: 0/0": 1}


def test_parallel_folder_equals_serial(tmp_path):
    from tracekit.renderers.jsonrenderer import to_dict
    for rank in range(3):
        b = TraceBuilder()
        for k in range(rank + 1):
            attention_block(b, 1000 + 200 * k, name=f"layer{k}.attention")
        b.write(tmp_path / f"rank{rank}.pt.trace.json.gz")
    serial = analyze(tmp_path, jobs=1).check()
    parallel = analyze(tmp_path, jobs=3).check()
    assert to_dict(serial, "x") == to_dict(parallel, "x")
    assert serial.totals.blocks == 6
    assert [t.source for t in parallel.traces] == [f"rank{r}.pt.trace.json.gz" for r in range(3)]


# ---------------------------------------------------------------------------------------------
# Folders merged into one result, and op_self_times, on hand-built traces whose figures are known by construction
# (tests/support/pairs.py); every result is check()ed

def _folder(path, *traces):
    path.mkdir()
    for name, steps in traces:
        write(path / name, steps)
    return path


def test_gpu_folder_merges_shares_steps_facts_and_device(tmp_path):
    # a: one step, eager (25 µs in the block) + a 3-µs add outside it: device busy 28 µs.
    # b: the same again. Merged: share (25 + 25) / (28 + 28); step 5 holds both traces' kernels.
    f = _folder(tmp_path / "run", ("a.json", [[eager, plain]]), ("b.json", [[eager, plain]]))
    r = analyze(f).check()
    one = analyze(f / "a.json").check()
    assert r.time_base == TimeBase.DEVICE and f.name in r.source
    assert [t.base_us for t in r.traces] == [28, 28]
    assert r.totals.attention_share == pytest.approx(50 / 56)
    assert r.kernels_by_step[(GEMM_C, Category.MATMUL, 5)] == (4, 40)  # 2 kernels of 10 µs per trace
    assert r.kernels[(GEMM_C, Category.MATMUL)] == (4, 40)
    key = next(iter(one.hint_facts))
    assert set(r.hint_facts) == set(one.hint_facts)
    gemm_fact = next(v for k, v in one.hint_facts[key].kernels.items() if k[0] == GEMM_C)
    merged = next(v for k, v in r.hint_facts[key].kernels.items() if k[0] == GEMM_C)
    assert list(merged) == [2 * gemm_fact[0], 2 * gemm_fact[1]]
    assert r.device is not None and r.device.name == H100


def test_shares_weighted_by_each_trace_base(tmp_path):
    # a: 25 of 28 µs; b: a 3-µs flash block and a 3-µs add: 3 of 6 µs. Merged: 28 / 34.
    f = _folder(tmp_path / "run", ("a.json", [[eager, plain]]), ("b.json", [[partial(fused, flash=3), plain]]))
    assert analyze(f).check().totals.attention_share == pytest.approx(28 / 34)


def test_folder_under_one_microsecond_of_device_time(tmp_path):
    # Two traces, each a single 0.4-µs flash kernel inside its block: base 0.8 µs, all of it attention.
    f = _folder(tmp_path / "run", ("a.json", [[partial(fused, flash=0.4)]]), ("b.json", [[partial(fused, flash=0.4)]]))
    r = analyze(f).check()
    assert sum(t.base_us for t in r.traces) == pytest.approx(0.8)
    assert r.totals.attention_share == pytest.approx(1)


def test_mixed_folder(tmp_path):
    f = tmp_path / "mixed"
    f.mkdir()
    write(f / "gpu.json", [[eager]])
    cpu_trace(f / "cpu.json")
    assert analyze(f).check().time_base == TimeBase.MIXED


def test_cpu_folder_has_no_coverage(tmp_path):
    f = tmp_path / "cpu"
    f.mkdir()
    cpu_trace(f / "a.json", 40)
    cpu_trace(f / "b.json", 20)
    r = analyze(f).check()
    assert r.time_base == TimeBase.HOST and r.coverage is None


def test_folder_with_no_time_has_no_share(tmp_path):
    f = tmp_path / "empty"
    f.mkdir()
    for n in "ab":
        b = TraceBuilder()
        b.op("aten::empty", 0, 0)
        b.write(f / f"{n}.json")
    r = analyze(f).check()
    assert sum(t.base_us for t in r.traces) == 0 and r.totals.attention_share is None


def test_op_self_times_count_annotations_and_ops(tmp_path):
    # A 10-µs range around a 3-µs op: self 7 and 3 µs.
    b = TraceBuilder()
    b.annotation("my_range", 0, 10)
    b.op("aten::mul", 2, 3)
    t = op_self_times(load_trace(b.write(tmp_path / "t.json")))
    assert t["my_range"] == (1, pytest.approx(7)) and t["aten::mul"] == (1, pytest.approx(3))


@pytest.mark.parametrize("end,gap", [(10, 0), (12, 2)])
def test_module_time_outside_its_ops_is_other(tmp_path, end, gap):
    # CPU-only: an nn.Module block from 0 to ``end`` µs around bmm (3) + softmax (3) + bmm (4) = 10 µs of ops.
    b = TraceBuilder()
    b.module("SelfAttention_0", 0, end)
    b.op("aten::bmm", 0, 3)
    b.op("aten::_softmax", 3, 3)
    b.op("aten::bmm", 6, 4)
    r = analyze(b.write(tmp_path / "m.json")).check()
    (blk,) = r.blocks
    assert blk.categories["other"] == gap and blk.categories["matmul"] == 7 and blk.categories["softmax"] == 3
    assert blk.total_us == end and r.traces[0].base_us == end and r.totals.attention_share == 1


# ---------------------------------------------------------------------------------------------
# A block's host time, allocations peak, devices and negative timestamps, on hand-built traces

GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"


FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Params)"


BF = "c10::BFloat16"


def test_a_block_on_a_thread_without_allocations_has_no_peak(tmp_path: Path) -> None:
    """CPU-only: a block on thread 1, allocations (with totals) only on thread 2, inside the block's time. The peak is
    read on the block's thread, where the allocator said nothing: None. The control block on thread 2 reads 4096."""
    b = TraceBuilder()
    for tid, t0 in ((1, 0), (2, 300)):
        b.annotation("layer0.attention", t0, 100, tid=tid)
        b.op("aten::bmm", t0 + 10, 10, tid=tid)
        b.op("aten::_softmax", t0 + 30, 10, tid=tid)
        b.op("aten::bmm", t0 + 50, 10, tid=tid)
    b.memory(15, 1024, device_type=0, tid=2, total=2048)  # in thread 1's block window, but on thread 2
    b.memory(315, 2048, device_type=0, tid=2, total=4096)
    res = attribute_built(tmp_path, b)
    assert [blk.alloc_peak_bytes for blk in res.blocks] == [None, 4096]  # blocks in time order: thread 1's first


def test_a_cpu_block_at_negative_times_keeps_its_host_ops(tmp_path: Path) -> None:
    """The parser keeps timestamps down to -2⁵³ µs, so a CPU-only trace may sit before its clock's zero. The block's
    host ops with self time (the timeline's ops row: the range itself has 70 µs of its own) end where the trace
    says, in absolute ns: the range -500+100, bmm -490+10, softmax -470+10, bmm -450+10 µs."""
    b = TraceBuilder()
    b.annotation("layer0.attention", -500, 100)
    for t in (-490, -470, -450):
        b.op("aten::bmm" if t != -470 else "aten::_softmax", t, 10)
    [blk] = attribute_built(tmp_path, b).blocks
    ops = blk.host_ops
    assert list(ops.end_ns) == [-400_000, -480_000, -460_000, -440_000]


def test_attribute_trace_gives_hints_by_default(tmp_path: Path) -> None:
    """The public ``attribute_trace(load_trace(path))`` runs the hint rules unless told not to: the
    repeat_kv trace of tests/analysis/test_hints.py (reshape → clone of a 5-D expand → copy_) fires gqa-repeat-kv."""
    from tracekit import attribute_trace, load_trace
    b = TraceBuilder()
    repeat_kv_block(b, [1, 2, 4, 100, 64])
    path = b.write(tmp_path / "t.json")
    assert "gqa-repeat-kv" in [h.rule for h in attribute_trace(load_trace(path)).hints]
    assert attribute_trace(load_trace(path), hints=False).hints == []


def test_a_cpu_blocks_host_time_is_its_range(tmp_path: Path) -> None:
    """CPU-only: the block's host time is its range's span, 100 µs (its ops inside it are not added again)."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)
    for t, op in ((10, "aten::bmm"), (30, "aten::_softmax"), (50, "aten::bmm")):
        b.op(op, t, 10)
    [blk] = attribute_built(tmp_path, b).blocks
    assert blk.host_us == pytest.approx(100)


def test_the_device_lists_every_gpu_name(tmp_path: Path) -> None:
    """A trace whose deviceProperties name two GPUs (an H100 first, then an A100): the device's names list both,
    sorted and once each (io.load), and the device is the first of them, whose peaks are the roof."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"},
                                       {"id": 1, "name": "NVIDIA A100-SXM4-80GB"}])
    b.annotation("layer0.attention", 0, 100)
    b.op("aten::_flash_attention_forward", 10, 20)
    b.launch(FLASH, 11, 1, 500, 20)
    res = attribute_built(tmp_path, b)
    assert res.device.names == ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
    assert res.device.name == "NVIDIA A100-SXM4-80GB"


def test_a_device_blocks_host_time_is_its_ranges_span(tmp_path: Path) -> None:
    """support.builders.attention_block: the range layer0.attention is 60 µs on the host, so the block's host time is
    60 µs (its span, host and device, is 136)."""
    from support.builders import attention_block
    b = TraceBuilder()
    attention_block(b, 10)
    [blk] = attribute_built(tmp_path, b).blocks
    assert (blk.host_us, blk.span_us) == (pytest.approx(60), pytest.approx(136))


def test_a_device_block_at_negative_times_keeps_its_kernels(tmp_path: Path) -> None:
    """support.builders.attention_block placed before the clock's zero (t0 = -1000 µs): the parser keeps such times,
    and the block's kernel intervals start where the trace says, k = t0 + 100 µs onward: -900 µs first."""
    from support.builders import attention_block
    b = TraceBuilder()
    attention_block(b, -1000)
    [blk] = attribute_built(tmp_path, b).blocks
    assert blk.kernels == 6 and min(blk.intervals.start_ns) == -900_000
