"""Survivors of the fourth mutmut run (issue 21), on traces built by hand: what each asserts follows from how the
trace is built (worked out in the docstrings), not from tracekit's output."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.builders import TraceBuilder
from support.paths import REAL, requires_real

from tracekit import analyze
from tracekit.results.efficiency import NO_FORMULA
from tracekit.vocab import MatmulRole

GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Params)"
SPLITKV = "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128>>(Params)"
CACHE_WRITE = "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>(int)"
BF = "c10::BFloat16"


def _run(tmp_path: Path, b: TraceBuilder):
    return analyze(b.write(tmp_path / "t.json")).check()


def _dims(ev: dict, dims: list, types: list) -> dict:
    ev["args"].update({"Input Dims": dims, "Input type": types})
    return ev


def _replay(b: TraceBuilder, kernels: list[tuple[str, float]], t0: float, host_ts: float = 1) -> None:
    """One cudaGraphLaunch replaying ``kernels`` back to back from ``t0``: no host op of their own."""
    b.op("model_runner_forward", host_ts, 50)
    t = t0
    for k, (name, dur) in enumerate(kernels):
        if k == 0:
            b.launch(name, host_ts + 1, 5, t, dur, launch_name="cudaGraphLaunch", corr=77)
        else:
            b.device_only(name, t, dur, corr=77)
        t += dur + 1


# -- flops: efficiency sums over calls, and says why a block has none ------------------------------------------

def test_equal_calls_sum_their_kernel_time(tmp_path: Path) -> None:
    """Two identical aten::mm [2,3]·[3,4] bf16 calls in one block, their GEMM kernels 20 and 30 µs apart in time:
    one group of equal figures, so the block's counted time is the busy union 20 + 30 = 50 µs, its FLOPs 2·48."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 200)
    _dims(b.op("aten::mm", 10, 8), [[2, 3], [3, 4]], [BF, BF])
    b.launch(GEMM, 11, 1, 1000, 20)
    _dims(b.op("aten::mm", 30, 8), [[2, 3], [3, 4]], [BF, BF])
    b.launch(GEMM, 31, 1, 1100, 30)
    [blk] = _run(tmp_path, b).blocks
    e = blk.efficiency
    assert e.ops == 2 and e.flops == 96.0
    assert e.time_ns == 50_000


def test_a_block_without_counted_ops_says_why(tmp_path: Path) -> None:
    """Two blocks (mm → softmax → mm); only the first's first mm has recorded shapes (counted: 48 FLOPs). Shapes exist in
    the trace, so the second block's reason is "no formula" (not "no shapes", and never empty)."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)
    _dims(b.op("aten::mm", 10, 8), [[2, 3], [3, 4]], [BF, BF])
    b.launch(GEMM, 11, 1, 1000, 20)
    b.op("aten::_softmax", 30, 2)
    b.op("aten::mm", 40, 8)
    b.annotation("layer1.attention", 200, 100)
    b.op("aten::mm", 210, 8)
    b.launch(GEMM, 211, 1, 1100, 20)
    b.op("aten::_softmax", 230, 2)
    b.op("aten::mm", 240, 8)
    first, second = _run(tmp_path, b).blocks
    assert first.efficiency.ops == 1 and first.efficiency.flops == 48.0
    assert second.efficiency.ops == 0 and second.efficiency.reason == NO_FORMULA


# -- attribute: allocation peaks are read on the block's own thread -------------------------------------------

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
    res = _run(tmp_path, b)
    assert [blk.alloc_peak_bytes for blk in res.blocks] == [None, 4096]  # blocks in time order: thread 1's first


# -- scopes: the eager pattern's shapes, and the fused-kernel walk ---------------------------------------------

def _eager(b: TraceBuilder, score: list, softmax: list, context: list) -> None:
    ev = b.op("aten::matmul", 1, 3)
    _dims(ev, score, ["float"] * len(score))
    b.op("aten::div", 5, 1)
    _dims(b.op("aten::softmax", 7, 2), [softmax, []], ["float", "Scalar"])
    _dims(b.op("aten::matmul", 10, 3), context, ["float"] * len(context))


@pytest.mark.parametrize(("score", "softmax", "context", "found"), [
    ([[1, 4, 32, 16], [1, 4, 16, 48]], [1, 4, 32, 48], [[1, 4, 32, 48], [1, 4, 48, 16]], True),  # the control
    ([[1, 4, 24, 16], [1, 4, 16, 48]], [1, 4, 32, 48], [[1, 4, 32, 48], [1, 4, 48, 16]], False),  # score's Lq
    ([[1, 4, 32, 16], [1, 4, 16, 40]], [1, 4, 32, 48], [[1, 4, 32, 48], [1, 4, 48, 16]], False),  # score's Lk
    ([[1, 4, 32, 16], [1, 4, 16, 48]], [1, 4, 32, 48], [[1, 4, 32, 40], [1, 4, 40, 16]], False),  # context's Lk
    ([[4, 32, 16], [4, 16, 48]], [4, 32, 48], [[4, 32, 48], [4, 48, 16]], True),  # 3-D (bmm): Lq is dim -2, not 2
])
def test_each_shape_of_the_eager_pattern_must_agree(tmp_path: Path, score, softmax, context, found) -> None:
    """matmul → softmax → matmul is attention only when the score product makes the softmax input [.., Lq, Lk]
    (its Lq from the first operand, its Lk from the second) and the context product consumes it: each
    disagreement on its own rejects the triple."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 200)
    _eager(b, score, softmax, context)
    assert len(_run(tmp_path, b).blocks) == (1 if found else 0)


def test_a_cache_write_followed_by_another_blocks_gemm_stays_out_of_it(tmp_path: Path) -> None:
    """A replayed KV-cache write (free), then on the same stream a GEMM and a flash kernel that an SDPA call's block
    owns. Only an owned *attention* kernel right after the open run takes it over (the call's first kernels); the
    GEMM closes the run, so the block keeps its own 2 kernels and the cache write stays outside (3 µs unowned)."""
    b = TraceBuilder()
    _replay(b, [(CACHE_WRITE, 3)], 1000)
    b.annotation("layer0.attention", 100, 100)
    b.op("aten::mm", 110, 10)
    b.launch(GEMM, 111, 1, 1010, 10)
    b.op("aten::scaled_dot_product_attention", 130, 10)
    b.launch(FLASH, 131, 1, 1030, 20)
    [blk] = _run(tmp_path, b).blocks
    assert blk.kernels == 2 and blk.total_us == pytest.approx(30)


@pytest.mark.parametrize("replay_first", [False, True])
def test_a_fused_kernel_block_takes_its_place_in_time(tmp_path: Path, replay_first: bool) -> None:
    """An SDPA call (host op at 100 µs, its flash kernel at 500 µs) and a graph replay whose kernel runs at 50 µs
    (launched at 21 µs) or at 1000 µs. A block's start is its first host op's, or for a block found from kernels
    alone its first kernel's (scopes.Block.ts), and ordinals follow it, whichever block tracekit found first:
    the replay is 0 when its kernel starts before the SDPA op (50 < 100), else 1 (1000 > 100)."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 2000)
    b.op("aten::scaled_dot_product_attention", 100, 10)
    b.launch(FLASH, 101, 1, 500, 20)
    _replay(b, [(SPLITKV, 20)], 50 if replay_first else 1000, host_ts=20 if replay_first else 200)
    res = _run(tmp_path, b)
    want = [("fused-kernel", 0), ("fused-op", 1)] if replay_first else [("fused-kernel", 1), ("fused-op", 0)]
    assert sorted((blk.found_by, blk.ordinal) for blk in res.blocks) == want


def test_a_step_holding_attention_ops_directly_is_no_block_under_any_scope(tmp_path: Path) -> None:
    """tests/builders.attention_block's ops with ProfilerStep#1 itself as their only range, under scope ".": the
    step is the innermost range around them, yet never a block; the eager pattern finds the call instead."""
    from support.builders import attention_block
    b = TraceBuilder()
    attention_block(b, 10, name="ProfilerStep#1")
    res = analyze(b.write(tmp_path / "t.json"), scope=".").check()
    assert [(x.found_by, x.step) for x in res.blocks] == [("inferred", 1)]
    assert not any(x.name.startswith("ProfilerStep") for x in res.blocks)


# -- hints: a hint's evidence states its share as its message does ---------------------------------------------

@requires_real
@pytest.mark.parametrize("rel", ["tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                                 "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"])
def test_a_hints_share_in_its_evidence_is_the_share_its_message_prints(rel: str) -> None:
    """Qwen's rotate_half rotary (cat + neg kernels) fires rotary-cat. Its message prints the share of busy time to
    one decimal, and the evidence's ``share_pct`` is that same figure (rounded once, to one decimal), for each
    hint that states a share (layout-copies fires too on the H100 trace); the rotary share is also
    (cat + neg) / busy from the evidence's own µs, within rounding."""
    import re
    res = analyze(REAL / rel).check()
    rotary = [h for h in res.hints if h.rule == "rotary-cat"]
    assert rotary
    for h in res.hints:
        m = re.search(r"([0-9]+(?:\.[0-9]+)?)% of busy time", h.message)
        if m is None or "share_pct" not in h.evidence:
            continue
        assert h.evidence["share_pct"] == float(m.group(1)), (h.rule, h.message)
    for h in rotary:
        e = h.evidence
        assert abs(100 * (e["cat_us"] + e["neg_us"]) / e["busy_us"] - e["share_pct"]) <= 0.05 + 1e-3


# -- hints facts and matmul roles: counts per kernel, roles for matrix products only -------------------------

def _two_fp32_products(b: TraceBuilder) -> None:
    """A block (mm → softmax → mm) whose two mm calls have fp32 inputs ([2,3]·[3,4], then [2,4]·[4,5]), each launching one GEMM
    kernel; the softmax has recorded shapes too (a counted vector op) and launches a softmax kernel."""
    b.annotation("layer0.attention", 0, 200)
    _dims(b.op("aten::mm", 10, 8), [[2, 3], [3, 4]], ["float", "float"])
    b.launch(GEMM, 11, 1, 1000, 20)
    _dims(b.op("aten::_softmax", 30, 8), [[2, 4], [], []], ["float", "Scalar", "Scalar"])
    b.launch("void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*)",
             31, 1, 1030, 5)
    _dims(b.op("aten::mm", 50, 8), [[2, 4], [4, 5]], ["float", "float"])
    b.launch(GEMM, 51, 1, 1040, 20)


def test_fp32_gemm_kernels_are_counted_one_by_one(tmp_path: Path) -> None:
    """Two GEMM kernels launched by fp32 GEMM ops in the block: the block kind's facts count 2, none 16-bit."""
    b = TraceBuilder()
    _two_fp32_products(b)
    res = _run(tmp_path, b)
    [facts] = res.hint_facts.values()
    assert (facts.gemm_fp32, facts.gemm_16bit) == (2, 0)


def test_only_matrix_products_have_a_matmul_role(tmp_path: Path) -> None:
    """The counted ops are the two mm calls and the softmax. Matmul roles split the matmul category only, so the
    role figures hold the two mm calls (2·2·3·4 + 2·2·4·5 = 128 FLOPs) and never the softmax."""
    b = TraceBuilder()
    _two_fp32_products(b)
    [blk] = _run(tmp_path, b).blocks
    by = blk.efficiency_by_category
    roles = {k: e for k, e in by.items() if k in {r.value for r in MatmulRole}}
    assert roles and sum(e.ops for e in roles.values()) == 2
    assert sum(e.flops for e in roles.values()) == by["matmul"].flops == 128.0
    assert by["softmax"].ops == 1


def test_a_cpu_block_at_negative_times_keeps_its_host_ops(tmp_path: Path) -> None:
    """The parser keeps timestamps down to -2⁵³ µs, so a CPU-only trace may sit before its clock's zero. The block's
    host ops with self time (the timeline's ops row: the range itself has 70 µs of its own) end where the trace
    says, in absolute ns: the range -500+100, bmm -490+10, softmax -470+10, bmm -450+10 µs."""
    b = TraceBuilder()
    b.annotation("layer0.attention", -500, 100)
    for t in (-490, -470, -450):
        b.op("aten::bmm" if t != -470 else "aten::_softmax", t, 10)
    [blk] = _run(tmp_path, b).blocks
    ops = blk.host_ops
    assert list(ops.end_ns) == [-400_000, -480_000, -460_000, -440_000]


# -- compare: two results read by run pair run by run, step by step position ------------------------------------

def _sweep(root: Path, steps: tuple[int, int], blocks: dict[str, int]) -> Path:
    """A folder of runs, each one trace of two ProfilerSteps numbered ``steps``, run ``x`` holding ``blocks[x]``
    attention blocks per step (tests/builders.attention_block, 400 µs apart)."""
    from support.builders import attention_block
    for run, n in blocks.items():
        b = TraceBuilder()
        for k, s in enumerate(steps):
            t0 = k * 1000
            b.annotation(f"ProfilerStep#{s}", t0, 900)
            for j in range(n):
                attention_block(b, t0 + 10 + 400 * j)
        (root / run).mkdir(parents=True)
        b.write(root / run / "t.pt.trace.json")
    return root


def test_results_read_by_run_pair_run_by_run(tmp_path: Path) -> None:
    """Before: runs a and b, one block per step, steps 1 and 2; after: the same runs recorded at steps 3 and 4, run
    a now with two blocks per step. Each block pairs with the same run's block at the same step position (1↔3,
    2↔4), never with the other run's: run a's second blocks are left over on the after side. (Block sources are
    the runs' names in a result read by run.)"""
    from tracekit import diff
    before = analyze(_sweep(tmp_path / "b", (1, 2), {"a": 1, "b": 1}), by="run").check()
    after = analyze(_sweep(tmp_path / "a", (3, 4), {"a": 2, "b": 1}), by="run").check()
    r = diff(before, after).check()
    got = sorted((p.before.source, p.before.step, p.after.source, p.after.step) for p in r.pairs)
    assert got == [("a", 1, "a", 3), ("a", 2, "a", 4), ("b", 1, "b", 3), ("b", 2, "b", 4)]
    assert not r.unmatched_before and sorted((x.source, x.step) for x in r.unmatched_after) == [("a", 3), ("a", 4)]


# -- more fourth-run survivors -----------------------------------------------------------------------------

def test_attribute_trace_gives_hints_by_default(tmp_path: Path) -> None:
    """The public ``attribute_trace(load_trace(path))`` runs the hint rules unless told not to: tests/
    test_mutants_hints3's repeat_kv trace (reshape → clone of a 5-D expand → copy_) fires gqa-repeat-kv."""
    from tracekit import attribute_trace, load_trace
    b = TraceBuilder()
    _repeat_kv(b, [1, 2, 4, 100, 64])
    path = b.write(tmp_path / "t.json")
    assert "gqa-repeat-kv" in [h.rule for h in attribute_trace(load_trace(path)).hints]
    assert attribute_trace(load_trace(path), hints=False).hints == []


def _repeat_kv(b: TraceBuilder, shape: list[int]) -> None:
    """HF repeat_kv's ops (reshape → clone of an expand of ``shape`` → copy_, one 20 µs copy kernel) beside a
    bmm → softmax → mm attention pattern inside layer0.attention."""
    copy = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
            "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const>(int)")
    b.annotation("layer0.attention", 0, 200)
    b.op("aten::bmm", 0.2, 0.5)
    b.op("aten::reshape", 1, 30)
    b.op("aten::clone", 2, 28)["args"].update({"Input Dims": [shape, []], "Input type": [BF, "Scalar"]})
    b.op("aten::copy_", 3, 20)["args"].update({"Input Dims": [shape, shape, []]})
    b.launch(copy, 4, 1, 1000, 20)
    b.op("aten::_softmax", 36, 2)
    b.op("aten::mm", 40, 8)
    b.launch(GEMM, 41, 1, 1020, 20)


@pytest.mark.parametrize("shape", [[1, 8, 100, 64], [8, 100, 64]])
def test_repeat_kv_needs_a_five_d_expand(tmp_path: Path, shape: list[int]) -> None:
    """The same copies of a 4-D or 3-D tensor whose third dim is > 1: a plain contiguous copy, not repeat_kv's
    (B, H_kv, n_rep, S, D) expand, so no gqa-repeat-kv hint. (A 5-D clone elsewhere in the file, launching
    nothing, lets the walk run at all: without one it is skipped.)"""
    b = TraceBuilder()
    _repeat_kv(b, shape)
    b.op("aten::clone", 300, 5)["args"].update({"Input Dims": [[1, 2, 4, 100, 64], []], "Input type": [BF, "Scalar"]})
    assert [h.rule for h in _run(tmp_path, b).hints if h.rule == "gqa-repeat-kv"] == []


def test_a_cpu_blocks_host_time_is_its_range(tmp_path: Path) -> None:
    """CPU-only: the block's host time is its range's span, 100 µs (its ops inside it are not added again)."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)
    for t, op in ((10, "aten::bmm"), (30, "aten::_softmax"), (50, "aten::bmm")):
        b.op(op, t, 10)
    [blk] = _run(tmp_path, b).blocks
    assert blk.host_us == pytest.approx(100)


def test_efficiency_sums_the_bytes_of_unequal_calls(tmp_path: Path) -> None:
    """The two fp32 products of different shapes are two groups; their bytes add up in matmul: mm [2,3]·[3,4] reads
    6 + 12 and writes 8 elements, mm [2,4]·[4,5] reads 8 + 20 and writes 10: (26 + 38) · 4 bytes."""
    b = TraceBuilder()
    _two_fp32_products(b)
    [blk] = _run(tmp_path, b).blocks
    assert blk.efficiency_by_category["matmul"].bytes == 256.0


@pytest.mark.parametrize(("replayed", "graphed"), [(50.0, False), (50.5, True)])
def test_launch_advice_says_already_graphed_past_half_replayed(replayed: float, graphed: bool) -> None:
    """The launch-bound hint's advice: when more than half the blocks' busy time ran from graph replays, the gaps
    are not launch overhead; exactly half is not more than half."""
    from types import SimpleNamespace
    from tracekit.analysis.hints import _launch_advice
    g = SimpleNamespace(facts=SimpleNamespace(graph_modes=["eager"], replayed_us=replayed), share=lambda us: us / 100)
    assert _launch_advice(g).startswith("the blocks already run from a CUDA/HIP graph") == graphed


def test_shared_kernels_with_equal_double_counts_are_listed_by_name() -> None:
    """Two hints both count kernels "b" and "a" (5 µs each): each is double-counted 5 µs, a tie broken by name."""
    from types import SimpleNamespace
    from tracekit.analysis.hints import _overlap
    counted = {("b", "memory"): 5.0, ("a", "memory"): 5.0}
    members = [SimpleNamespace(rule="r1", counted=counted), SimpleNamespace(rule="r2", counted=counted)]
    o = _overlap(members, "layer", 100.0)
    assert o.shared_kernels == ["a", "b"] and o.double_counted_us == 10.0
    # unequal: "a" double-counted 5 µs, "c" 8 µs: the most double-counted first
    more = {("a", "memory"): 5.0, ("c", "memory"): 8.0}
    o = _overlap([SimpleNamespace(rule="r1", counted=more), SimpleNamespace(rule="r2", counted=more)], "layer", 100.0)
    assert o.shared_kernels == ["c", "a"]


def test_an_after_member_names_the_group_of_a_run_the_attention_kernel_opened(tmp_path: Path) -> None:
    """A replayed FlashInfer decode kernel, then its MergeStates (flashinfer, after): the run opened with no group,
    and the member that joins it names it."""
    b = TraceBuilder()
    _replay(b, [("BatchDecodeWithPagedKVCacheKernel<128>", 20), ("void flashinfer::MergeStatesKernel<8>(int)", 2)],
            1000)
    [blk] = _run(tmp_path, b).blocks
    assert blk.kernels == 2 and blk.evidence.group == "flashinfer"


def test_a_scope_around_a_fused_kernel_names_the_kernel(tmp_path: Path) -> None:
    """layer0.attention around a custom op that launches a flash kernel: the block's evidence names the kernel
    (its short name), as the core it was found by."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)
    b.op("my_custom_op", 10, 20)
    b.launch(FLASH, 11, 1, 500, 20)
    [blk] = _run(tmp_path, b).blocks
    assert blk.evidence.rule == "innermost-scope" and blk.evidence.names == ("pytorch_flash::flash_fwd_kernel",)


def test_a_replayed_blocks_evidence_names_its_rule(tmp_path: Path) -> None:
    """A graph replay of a split-KV decode kernel is found by rule fused-kernels, and its evidence says so."""
    b = TraceBuilder()
    _replay(b, [(SPLITKV, 20)], 1000)
    [blk] = _run(tmp_path, b).blocks
    assert (blk.found_by, blk.evidence.rule) == ("fused-kernel", "fused-kernels")


def test_the_launch_bound_hint_gives_the_mean_kernel_time_to_the_ns(tmp_path: Path) -> None:
    """tests/builders.attention_block: 6 device events, 31 µs busy in a 136 µs span (launch-bound). The hint's mean
    kernel time is 31/6 = 5.1666… µs, given to the ns: 5.167."""
    from support.builders import attention_block
    b = TraceBuilder()
    attention_block(b, 10)
    [h] = [h for h in _run(tmp_path, b).hints if h.rule == "launch-bound"]
    assert h.evidence["mean_kernel_us"] == 5.167


def test_duplicate_rule_names_are_named_in_the_error() -> None:
    """Three device rules, two with one name: the Classifier refuses them, naming the duplicate and only it."""
    from tracekit.analysis.classify import DEVICE_RULES, Classifier
    with pytest.raises(ValueError) as e:
        Classifier(device_rules=(DEVICE_RULES[0], DEVICE_RULES[1], DEVICE_RULES[0]))
    assert str(e.value) == f"duplicate rule names: {[DEVICE_RULES[0].name]}"  # only the name given twice


def _roles(tmp_path: Path, b: TraceBuilder, t: float) -> dict[str, float]:
    """Close layer0.attention's pattern with a softmax at ``t`` µs and a product after it; the block's matmul roles."""
    b.op("aten::_softmax", t, 2)
    b.op("aten::bmm", t + 10, 8)
    [blk] = _run(tmp_path, b).blocks
    return blk.matmul_roles


def _compiled_scope(tmp_path: Path, kernels: list[tuple[str, float]]):
    """layer0.attention around one compiled op that launches ``kernels`` back to back from 500 µs: its blocks."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)
    b.op("CompiledFunction", 10, 50)
    t = 500.0
    for k, (name, dur) in enumerate(kernels):
        b.launch(name, 11 + 2 * k, 1, t, dur)
        t += dur + 1
    return _run(tmp_path, b).blocks


def test_a_module_name_with_an_index_suffix_gives_its_role(tmp_path: Path) -> None:
    """The only name that says a role is the module ``nn.Module: Linear_0`` (with_modules names classes and numbers
    their instances): read as a module (prefix and ``_0`` dropped) it is Linear, a projection, so its mm's 20 µs
    GEMM is projection time. Read as raw text, the anchored class rule matches nothing, and the walk up the names
    would be skipped: the 20 µs would be matmul-other."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 200)
    b.module("Linear_0", 5, 20)
    b.op("aten::mm", 10, 8)
    b.launch(GEMM, 11, 1, 1000, 20)
    assert _roles(tmp_path, b, 30).get("projection") == pytest.approx(20)


def test_kernels_written_out_of_time_order_are_walked_in_time_order(tmp_path: Path) -> None:
    """A graph replay whose trace lists the decode kernel (at 1004 µs) before the KV-cache write that ran ahead of it
    (at 1000 µs): the walk goes by time, so the write opens the call and both kernels are one block (23 µs)."""
    b = TraceBuilder()
    b.op("model_runner_forward", 1, 50)
    b.launch(SPLITKV, 2, 5, 1004, 20, launch_name="cudaGraphLaunch", corr=77)
    b.device_only(CACHE_WRITE, 1000, 3, corr=77)
    [blk] = _run(tmp_path, b).blocks
    assert blk.kernels == 2 and blk.total_us == pytest.approx(23) and blk.evidence.group == "kv-cache-write"


def test_a_kernel_launched_under_a_range_inside_a_product_takes_the_products_role(tmp_path: Path) -> None:
    """A GEMM kernel whose launch sits in a range (``inner``, no role in its name) inside aten::bmm: the op that
    launched it is the bmm, whose recorded operands [4,32,16]·[4,16,32] make a square [32, 32] from a contracted 16
    (a head dim): Q·Kᵀ, so its 20 µs are score time. Starting from the range instead finds no product: matmul-other."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 200)
    _dims(b.op("aten::bmm", 10, 20), [[4, 32, 16], [4, 16, 32]], [BF, BF])
    b.annotation("inner", 12, 10)
    b.launch(GEMM, 13, 1, 1000, 20)
    assert _roles(tmp_path, b, 40).get("score") == pytest.approx(20)


def test_a_scope_whose_kernels_run_gemm_softmax_gemm_is_a_block(tmp_path: Path) -> None:
    """layer0.attention around one compiled op that launches GEMM (10 µs) → a Triton softmax (5 µs) → GEMM (10 µs):
    no attention op inside, but its kernels make the pattern, so the scope is a block of those 3 kernels (25 µs),
    its core the kernel triple."""
    [blk] = _compiled_scope(tmp_path, [(GEMM, 10), ("triton_per_fused__softmax_0", 5), (GEMM, 10)])
    assert (blk.found_by, blk.evidence.core) == ("annotation", "gemm-softmax-gemm")
    assert blk.kernels == 3 and blk.total_us == pytest.approx(25)


def test_two_products_under_one_named_range_both_take_its_role(tmp_path: Path) -> None:
    """Two bmm calls (no recorded shapes) inside the range ``qk_matmul`` (a score name), each launching a 10 µs
    GEMM: both kernels are score time (20 µs), the second found through the range the first already resolved."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 200)
    b.annotation("qk_matmul", 5, 40)
    b.op("aten::bmm", 10, 8)
    b.launch(GEMM, 11, 1, 1000, 10)
    b.op("aten::bmm", 25, 8)
    b.launch(GEMM, 26, 1, 1020, 10)
    assert _roles(tmp_path, b, 60).get("score") == pytest.approx(20)


def test_the_device_lists_every_gpu_name(tmp_path: Path) -> None:
    """A trace whose deviceProperties name two GPUs (an H100 first, then an A100): the device's names list both,
    sorted and once each (io.load), and the device is the first of them, whose peaks are the roof."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}, {"id": 1, "name": "NVIDIA A100-SXM4-80GB"}])
    b.annotation("layer0.attention", 0, 100)
    b.op("aten::_flash_attention_forward", 10, 20)
    b.launch(FLASH, 11, 1, 500, 20)
    res = _run(tmp_path, b)
    assert res.device.names == ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
    assert res.device.name == "NVIDIA A100-SXM4-80GB"


def test_a_device_blocks_host_time_is_its_ranges_span(tmp_path: Path) -> None:
    """tests/builders.attention_block: the range layer0.attention is 60 µs on the host, so the block's host time is
    60 µs (its span, host and device, is 136)."""
    from support.builders import attention_block
    b = TraceBuilder()
    attention_block(b, 10)
    [blk] = _run(tmp_path, b).blocks
    assert (blk.host_us, blk.span_us) == (pytest.approx(60), pytest.approx(136))


def test_a_device_trace_without_recorded_shapes_says_so(tmp_path: Path) -> None:
    """No op in the trace has Input Dims (record_shapes off): every block's efficiency has no ops and says why."""
    from support.builders import attention_block
    from tracekit.results.efficiency import NO_SHAPES
    b = TraceBuilder()
    attention_block(b, 10)
    [blk] = _run(tmp_path, b).blocks
    assert blk.efficiency.ops == 0 and blk.efficiency.reason == NO_SHAPES


def test_input_dims_that_are_not_a_list_give_no_role_from_shapes(tmp_path: Path) -> None:
    """A bmm whose Input Dims is a JSON string (a damaged record): no shapes, so its GEMM's 20 µs are matmul-other,
    and nothing fails."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 200)
    b.op("aten::bmm", 10, 8)["args"].update({"Input Dims": "[[4, 32, 16], [4, 16, 32]]", "Input type": [BF, BF]})
    b.launch(GEMM, 11, 1, 1000, 20)
    b.op("aten::_softmax", 30, 2)
    b.op("aten::bmm", 40, 8)
    [blk] = _run(tmp_path, b).blocks
    assert blk.matmul_roles.get("matmul-other") == pytest.approx(20)


def test_a_scope_whose_kernels_run_gemm_elementwise_gemm_is_no_block(tmp_path: Path) -> None:
    """The same scope with an elementwise kernel where the softmax was (an MLP's up-projection, activation,
    down-projection): no softmax kernel, so no attention."""
    assert _compiled_scope(tmp_path, [(GEMM, 10), ("triton_poi_fused_gelu_0", 5), (GEMM, 10)]) == []


@pytest.mark.parametrize(("between", "kernels"), [(4, 6), (5, 1)])
def test_at_most_four_kernels_between_a_groups_member_and_its_attention_kernel(tmp_path, between, kernels):
    """A replayed SageAttention call: its quantise kernel, ``between`` elementwise kernels, then its attention kernel.
    Up to MAX_BETWEEN (4) kernels between join the call: one block of 1 + 4 + 1 = 6 kernels. A fifth ends the
    quantise kernel's run, and the attention kernel is a block on its own (1 kernel)."""
    from tracekit.analysis.scopes import MAX_BETWEEN
    assert MAX_BETWEEN == 4
    b = TraceBuilder()
    elementwise = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
                   "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, float)")
    _replay(b, [("sage_quant_kernel", 4)] + [(elementwise, 2)] * between + [("sage_fwd", 30)], 1000)
    [blk] = _run(tmp_path, b).blocks
    assert blk.kernels == kernels


def test_a_kernel_triple_is_centred_on_the_softmax(tmp_path: Path) -> None:
    """layer0.attention's kernels run GEMM, GEMM, GEMM → softmax → GEMM (projections, then the score product): the
    triple the evidence names is the one around the softmax (GEMM, softmax, GEMM), not three GEMMs in a row."""
    [blk] = _compiled_scope(tmp_path, [(GEMM, 10)] * 3 + [("triton_per_fused__softmax_0", 5), (GEMM, 10)])
    assert blk.evidence.names == ("cutlass::Kernel2", "triton_per_fused__softmax_0", "cutlass::Kernel2")


def test_input_dims_that_are_not_a_list_are_none_for_the_hints() -> None:
    """An SDPA op whose Input Dims is the JSON string "abcdef" (a damaged record): no dims, so no attn_mask tensor is
    seen. Taking the string as the dims list would read its fourth character as a mask and count a masked call."""
    import orjson
    from types import SimpleNamespace
    from tracekit.analysis.hints import _Inputs, _sdpa_masked
    from tracekit.model import OpInputs
    rec = OpInputs(dims=orjson.dumps("abcdef"), types=orjson.dumps([BF] * 4), concrete=b"")
    inp = _Inputs(SimpleNamespace(op_inputs={0: rec}))
    assert inp.dims(0) is None and _sdpa_masked(inp, 0) is False


def test_a_device_event_of_an_unknown_kind_is_refused_by_name() -> None:
    """The classifier is public API: a device event kind outside DEVICE_KINDS is a ValueError that names it."""
    from tracekit.analysis.classify import Classifier
    with pytest.raises(ValueError, match="got 'bogus'"):
        Classifier().device_rule("void k()", "bogus", None)


def test_a_device_block_at_negative_times_keeps_its_kernels(tmp_path: Path) -> None:
    """tests/builders.attention_block placed before the clock's zero (t0 = -1000 µs): the parser keeps such times,
    and the block's kernel intervals start where the trace says, k = t0 + 100 µs onward: -900 µs first."""
    from support.builders import attention_block
    b = TraceBuilder()
    attention_block(b, -1000)
    [blk] = _run(tmp_path, b).blocks
    assert blk.kernels == 6 and min(blk.intervals.start_ns) == -900_000
