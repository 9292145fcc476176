"""Block discovery (issue 22): each rule of tracekit.analysis.scopes on a hand-built trace where it must fire and
one where it must not. The expected blocks follow from how each trace is built, not from tracekit's output."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.builders import TraceBuilder
from tracekit import analyze
from tracekit.analysis.blocks.discovery import DISCOVERY_RULES, EAGER_BREAKERS
from tracekit.analysis.blocks.kernels import KERNEL_GROUPS
from tracekit.vocab import CoreKind
from support.pairs import GEMM, H100
from support.builders import attribute_built, replay_graph, with_dims
from support.builders import attention_block

FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Params)"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*)"
ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
               "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, float)")


def _run(tmp_path: Path, b: TraceBuilder, **kw):
    return analyze(b.write(tmp_path / "t.json"), **kw).check()


def _blocks(res) -> list[tuple[str, str]]:
    return [(x.name, str(x.found_by)) for x in res.blocks]


def _dims(ev: dict, *dims) -> dict:
    ev["args"]["Input Dims"] = [list(d) for d in dims]
    ev["args"]["Input type"] = ["float"] * len(dims)
    return ev


def test_rules_are_named_ordered_data_with_reasons() -> None:
    names = [r.name for r in DISCOVERY_RULES]
    assert len(set(names)) == len(names) and all(r.why for r in DISCOVERY_RULES)
    assert names.index("innermost-scope") < names.index("fused-op") < names.index("eager-ops")
    assert all(p.why for p in EAGER_BREAKERS) and all(g.why for g in KERNEL_GROUPS)


# -- class 1: a MoE router's softmax between matmul-family ops ------------------------------------------------

def _moe_layer(b: TraceBuilder, t: float, shapes: bool) -> None:
    """SDPA (QKᵀ and PV inside it), o_proj, norm, router gate → softmax → top-k, then bmm experts."""
    b.op("aten::scaled_dot_product_attention", t, 10)
    b.op("aten::linear", t + 11, 2)
    b.op("aten::layer_norm", t + 14, 2)
    b.op("aten::linear", t + 17, 2)  # the router's gate
    sm = b.op("aten::softmax", t + 20, 2)
    b.op("aten::topk", t + 23, 2)
    up = b.op("aten::bmm", t + 26, 3)
    b.op("aten::silu", t + 30, 1)
    down = b.op("aten::bmm", t + 32, 3)
    if shapes:
        _dims(sm, (16, 8), ())
        _dims(up, (8, 16, 64), (8, 64, 128))
        _dims(down, (8, 16, 128), (8, 128, 64))


@pytest.mark.parametrize("shapes", [False, True])
def test_a_moe_router_softmax_between_expert_bmms_is_no_attention(tmp_path: Path, shapes: bool) -> None:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 200)
    _moe_layer(b, 1, shapes)
    _moe_layer(b, 60, shapes)
    res = _run(tmp_path, b)
    assert _blocks(res) == [("aten::scaled_dot_product_attention", "fused-op")] * 2


def test_shapes_reject_a_softmax_the_products_neither_make_nor_consume(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 200)
    _dims(b.op("aten::bmm", 1, 3), (8, 16, 64), (8, 64, 128))  # expert-like: [E, T, F] out
    _dims(b.op("aten::softmax", 5, 2), (16, 8), ())  # [T, E]
    _dims(b.op("aten::bmm", 8, 3), (8, 16, 128), (8, 128, 64))
    res = _run(tmp_path, b)
    assert res.blocks == []


def test_shapes_accept_and_record_an_eager_core(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 200)
    _dims(b.op("aten::matmul", 1, 3), (1, 4, 32, 16), (1, 4, 16, 48))  # QKᵀ: [.., Lq=32, Lk=48]
    b.op("aten::div", 5, 1)
    _dims(b.op("aten::softmax", 7, 2), (1, 4, 32, 48), ())
    _dims(b.op("aten::matmul", 10, 3), (1, 4, 32, 48), (1, 4, 48, 16))  # PV
    res = _run(tmp_path, b)
    [blk] = res.blocks
    assert blk.found_by == "inferred" and blk.evidence.rule == "eager-ops"
    assert blk.evidence.core == CoreKind.EAGER_OPS
    assert blk.evidence.names == ("aten::matmul", "aten::softmax", "aten::matmul")
    assert blk.evidence.shapes[1] == "[[1, 4, 32, 48], []]"


@pytest.mark.parametrize("breaker", ["aten::linear", "aten::rms_norm", "aten::_scaled_dot_product_flash_attention"])
def test_a_breaker_between_the_products_ends_the_pattern(tmp_path: Path, breaker: str) -> None:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 200)
    b.op("aten::bmm", 1, 3)
    b.op(breaker, 5, 2)
    b.op("aten::softmax", 8, 2)
    b.op("aten::bmm", 11, 3)
    res = _run(tmp_path, b)
    assert all(x.found_by != "inferred" for x in res.blocks)


# -- class 2: a layer named like attention --------------------------------------------------------------------

def _hybrid_layer(b: TraceBuilder, t: float, k: int) -> None:
    b.module(f"JambaAttentionDecoderLayer_{k}", t, 100)
    b.op("aten::rms_norm", t + 1, 2)
    b.module(f"JambaAttention_{k}", t + 5, 40)
    b.op("aten::linear", t + 6, 3)
    b.op("aten::scaled_dot_product_attention", t + 10, 20)
    b.op("aten::_scaled_dot_product_flash_attention", t + 11, 18)
    b.launch(FLASH, t + 12, 2, 1000 + 10 * t, 30)
    b.op("aten::linear", t + 32, 3)
    b.op("aten::rms_norm", t + 50, 2)
    b.module(f"JambaSparseMoeBlock_{k}", t + 55, 40)
    b.op("aten::linear", t + 56, 2)
    b.launch(GEMM, t + 57, 1, 1000 + 10 * t + 40, 5)
    b.op("aten::softmax", t + 60, 2)
    b.launch(SOFTMAX, t + 61, 1, 1000 + 10 * t + 50, 4)
    b.op("aten::_grouped_mm", t + 65, 10)
    b.launch(GEMM, t + 66, 1, 1000 + 10 * t + 60, 20)


def test_the_innermost_scope_around_the_core_is_the_block_not_its_layer(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 400)
    _hybrid_layer(b, 1, 0)
    _hybrid_layer(b, 150, 1)
    res = _run(tmp_path, b)
    assert _blocks(res) == [("JambaAttention_0", "module"), ("JambaAttention_1", "module")]
    for blk in res.blocks:
        assert blk.categories["fused_attention"] == pytest.approx(30)
        assert blk.categories["softmax"] == 0 and blk.total_us == pytest.approx(30)  # the router is outside
        assert blk.evidence.core == CoreKind.FUSED_OP and blk.evidence.rule == "innermost-scope"


def test_a_scope_without_an_attention_core_is_no_block(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 400)
    b.annotation("attn_norm", 1, 20)
    b.op("aten::layer_norm", 2, 10)
    b.module("AttentionPooler_0", 30, 20)  # a softmax over one product is pooling, not attention
    b.op("aten::linear", 31, 3)
    b.op("aten::softmax", 35, 3)
    res = _run(tmp_path, b)
    assert res.blocks == []


def test_linear_attention_is_a_scope_of_products_without_a_softmax(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 400)
    b.annotation("layer0.attention", 1, 50)
    b.op("aten::linear", 2, 3)
    b.annotation("kv_state", 6, 10)
    b.op("aten::matmul", 7, 8)
    b.annotation("intra_chunk", 17, 10)
    b.op("aten::matmul", 18, 8)
    b.op("aten::linear", 30, 3)
    res = _run(tmp_path, b)
    [blk] = res.blocks
    assert blk.name == "layer0.attention" and blk.evidence.core == CoreKind.PRODUCTS


def test_the_eager_pattern_sees_through_ranges_that_wrap_each_op(tmp_path: Path) -> None:
    b = TraceBuilder()  # the H200 sweep's eager path: qk_matmul / softmax / pv_matmul ranges in one scope
    b.annotation("ProfilerStep#1", 0, 400)
    b.annotation("layer0.attention", 1, 50)
    for name, op, t in (("qk_matmul", "aten::matmul", 5), ("softmax", "aten::softmax", 15),
                        ("pv_matmul", "aten::matmul", 25)):
        b.annotation(name, t, 8)
        b.op(op, t + 1, 6)
    res = _run(tmp_path, b)
    [blk] = res.blocks
    assert blk.name == "layer0.attention" and blk.evidence.core == CoreKind.EAGER_OPS


# -- class 3: one call, several kernels ------------------------------------------------------------------------

def _replay(b: TraceBuilder, kernels: list[tuple[str, float]], t0: float = 1000) -> None:
    """One cudaGraphLaunch replaying ``kernels`` back to back: no host op of their own."""
    b.op("model_runner_forward", 1, 50)
    first, t = True, t0
    for name, dur in kernels:
        if first:
            b.launch(name, 2, 5, t, dur, launch_name="cudaGraphLaunch", corr=77)
            first = False
        else:
            b.device_only(name, t, dur, corr=77)
        t += dur + 1


def test_a_kv_cache_write_and_split_kv_combine_are_one_call_with_the_attention_kernel(tmp_path: Path) -> None:
    b = TraceBuilder()
    _replay(b, [(GEMM, 10), ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>(int)", 3),
                ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128>>(Params)", 20),
                ("void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128>>(Params)", 2), (GEMM, 10)])
    res = _run(tmp_path, b)
    [blk] = res.blocks
    assert blk.found_by == "fused-kernel" and blk.kernels == 3
    assert blk.categories["memory"] == pytest.approx(3) and blk.categories["fused_attention"] == pytest.approx(22)
    assert blk.evidence.group == "kv-cache-write"


def test_sage_quantisation_with_kernels_between_is_one_call(tmp_path: Path) -> None:
    b = TraceBuilder()
    _replay(b, [("sage_quant_kernel", 4), (ELEMENTWISE, 2), (ELEMENTWISE, 2), ("sage_fwd", 30), (GEMM, 10),
                ("sage_quant_kernel", 4), (ELEMENTWISE, 2), ("sage_fwd", 30)])
    res = _run(tmp_path, b)
    assert [x.kernels for x in res.blocks] == [4, 3]
    assert all(x.evidence.group == "sage-attention" for x in res.blocks)
    assert [x.total_us for x in res.blocks] == pytest.approx([38, 36])


def test_a_cache_write_before_a_gemm_is_not_part_of_the_next_attention(tmp_path: Path) -> None:
    b = TraceBuilder()
    _replay(b, [("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>(int)", 3), (GEMM, 10),
                ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128>>(Params)", 20)])
    res = _run(tmp_path, b)
    [blk] = res.blocks
    assert blk.kernels == 1 and blk.categories["memory"] == 0 and blk.evidence.group is None


def test_a_free_cache_write_joins_the_host_block_of_its_attention_kernel(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.op("_C_cache_ops::reshape_and_cache_flash", 1, 3)
    b.launch("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>(int)", 2, 1, 100, 3)
    b.op("vllm::unified_attention_with_output", 5, 10)
    b.launch("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128>>(Params)", 6, 1, 104, 20)
    res = _run(tmp_path, b)
    [blk] = res.blocks
    assert blk.found_by == "fused-op" and blk.kernels == 2 and blk.categories["memory"] == pytest.approx(3)
    assert blk.evidence.group == "kv-cache-write"


def test_a_backward_block_carries_its_forward_calls_core(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 50)
    b.op("aten::bmm", 1, 5)
    b.op("aten::_softmax", 10, 5)
    b.op("aten::bmm", 20, 5)
    b.launch(GEMM, 21, 1, 100, 10)
    b.flow(1, True, 1)
    b.op("autograd::engine::evaluate_function: BmmBackward0", 500, 20, tid=2)
    b.op("aten::bmm", 501, 5, tid=2)
    b.launch(GEMM, 502, 1, 600, 20, tid=2)
    b.flow(1, False, 500, tid=2)
    res = _run(tmp_path, b)
    fwd, bwd = res.blocks
    assert (fwd.phase, bwd.phase) == ("forward", "backward")
    assert bwd.evidence.rule == "autograd backward of innermost-scope"
    assert (bwd.evidence.core, bwd.evidence.names) == (fwd.evidence.core, fwd.evidence.names)
    assert fwd.evidence.names == ("aten::bmm", "aten::_softmax", "aten::bmm")


# ---------------------------------------------------------------------------------------------
# Rule eager-kernels: a softmax kernel with a GEMM run shortly before and after it, on one stream and owned by no
# block, is one inferred block (docs/attribution.md, "Attention blocks", rule 5). Hand-built compiled regions: one
# host call launches every kernel, each 5 µs, 1 µs apart

SM = "triton_per_fused__softmax_0"  # inductor's fused softmax: category softmax
E = "triton_poi_fused_mul_0"  # inductor pointwise: elementwise, neither GEMM nor softmax


def compiled(path, seq, launcher="CompiledFunction", softmax_op=None, gemm_op=None):
    """One host call launching ``seq`` in order; optionally the softmax under a host ``softmax_op`` and the GEMMs
    under a host ``gemm_op`` (each its own op inside the call)."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    b.op(launcher, 0, 1000)
    t, k = 1, 2000
    for name in seq:
        op = softmax_op if name == SM else gemm_op if name == GEMM else None
        if op:
            b.op(op, t - 0.5, 1.8)
        b.launch(name, t, 1, k, 5)
        t += 2
        k += 6
    return b.write(path)


def blocks(tmp_path, seq, **kw):
    r = analyze(compiled(tmp_path / "c.json", seq, **kw)).check()
    return [(b.name, b.found_by, b.kernels) for b in r.blocks]


@pytest.mark.parametrize("before,after", [(0, 0), (1, 1), (3, 3), (4, 4), (1, 4), (4, 1)])
def test_gemm_runs_up_to_four_kernels_from_the_softmax(tmp_path, before, after):
    seq = [GEMM] + [E] * before + [SM] + [E] * after + [GEMM]
    assert blocks(tmp_path, seq) == [("inferred attention", "inferred", len(seq))]


@pytest.mark.parametrize("before,after", [(5, 1), (1, 5), (6, 1), (1, 6)])  # 5: one past MAX_BETWEEN (4)
def test_gemm_run_too_far_from_the_softmax(tmp_path, before, after):
    assert blocks(tmp_path, [GEMM] + [E] * before + [SM] + [E] * after + [GEMM]) == []


def test_pattern_late_on_the_stream(tmp_path):
    # Six free kernels first: the search counts kernels from the softmax, not from the start of the stream.
    seq = [E] * 6 + [GEMM, E, SM, E, GEMM]
    assert blocks(tmp_path, seq) == [("inferred attention", "inferred", 5)]


def test_gemm_runs_are_taken_whole(tmp_path):
    seq = [E, GEMM, GEMM, E, SM, E, GEMM, GEMM, GEMM, E]
    assert blocks(tmp_path, seq) == [("inferred attention", "inferred", 8)]  # first GEMM to last GEMM


def test_no_gemm_on_one_side(tmp_path):
    assert blocks(tmp_path, [GEMM, E, SM, E, E]) == []
    assert blocks(tmp_path, [E, E, SM, E, GEMM]) == []


def test_gemms_of_a_linear_layer_are_no_members(tmp_path):
    # A router: linear → softmax → linear. Its GEMMs are a breaker op's: no inferred block.
    assert blocks(tmp_path, [GEMM, SM, GEMM], gemm_op="aten::linear") == []


def test_softmax_of_a_host_softmax_op_is_no_member(tmp_path):
    assert blocks(tmp_path, [GEMM, SM, GEMM], softmax_op="aten::_softmax") == []


@pytest.mark.parametrize("seq", [[GEMM, GEMM, SM, GEMM], [GEMM, SM, GEMM, GEMM]])
def test_gemm_runs_reach_the_ends_of_the_stream(tmp_path, seq):
    assert blocks(tmp_path, seq) == [("inferred attention", "inferred", 4)]


# ---------------------------------------------------------------------------------------------
# Kernel groups, fused kernels, replays and compiled scopes: which kernels make a block, and what its evidence names

GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"




SPLITKV = "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128>>(Params)"


CACHE_WRITE = "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>(int)"


def _eager(b: TraceBuilder, score: list, softmax: list, context: list) -> None:
    ev = b.op("aten::matmul", 1, 3)
    with_dims(ev, score, ["float"] * len(score))
    b.op("aten::div", 5, 1)
    with_dims(b.op("aten::softmax", 7, 2), [softmax, []], ["float", "Scalar"])
    with_dims(b.op("aten::matmul", 10, 3), context, ["float"] * len(context))


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
    assert len(attribute_built(tmp_path, b).blocks) == (1 if found else 0)


def test_a_cache_write_followed_by_another_blocks_gemm_stays_out_of_it(tmp_path: Path) -> None:
    """A replayed KV-cache write (free), then on the same stream a GEMM and a flash kernel that an SDPA call's block
    owns. Only an owned *attention* kernel right after the open run takes it over (the call's first kernels); the
    GEMM closes the run, so the block keeps its own 2 kernels and the cache write stays outside (3 µs unowned)."""
    b = TraceBuilder()
    replay_graph(b, [(CACHE_WRITE, 3)], 1000)
    b.annotation("layer0.attention", 100, 100)
    b.op("aten::mm", 110, 10)
    b.launch(GEMM, 111, 1, 1010, 10)
    b.op("aten::scaled_dot_product_attention", 130, 10)
    b.launch(FLASH, 131, 1, 1030, 20)
    [blk] = attribute_built(tmp_path, b).blocks
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
    replay_graph(b, [(SPLITKV, 20)], 50 if replay_first else 1000, host_ts=20 if replay_first else 200)
    res = attribute_built(tmp_path, b)
    want = [("fused-kernel", 0), ("fused-op", 1)] if replay_first else [("fused-kernel", 1), ("fused-op", 0)]
    assert sorted((blk.found_by, blk.ordinal) for blk in res.blocks) == want


def test_a_step_holding_attention_ops_directly_is_no_block_under_any_scope(tmp_path: Path) -> None:
    """tests/support/builders.py's attention_block's ops with ProfilerStep#1 itself as their only range, under
    scope ".": the step is the innermost range around them, yet never a block; the eager pattern finds the call
    instead."""
    from support.builders import attention_block
    b = TraceBuilder()
    attention_block(b, 10, name="ProfilerStep#1")
    res = analyze(b.write(tmp_path / "t.json"), scope=".").check()
    assert [(x.found_by, x.step) for x in res.blocks] == [("inferred", 1)]
    assert not any(x.name.startswith("ProfilerStep") for x in res.blocks)


def test_an_after_member_names_the_group_of_a_run_the_attention_kernel_opened(tmp_path: Path) -> None:
    """A replayed FlashInfer decode kernel, then its MergeStates (flashinfer, after): the run opened with no group,
    and the member that joins it names it."""
    b = TraceBuilder()
    replay_graph(b, [("BatchDecodeWithPagedKVCacheKernel<128>", 20), ("void flashinfer::MergeStatesKernel<8>(int)", 2)],
            1000)
    [blk] = attribute_built(tmp_path, b).blocks
    assert blk.kernels == 2 and blk.evidence.group == "flashinfer"


def test_a_scope_around_a_fused_kernel_names_the_kernel(tmp_path: Path) -> None:
    """layer0.attention around a custom op that launches a flash kernel: the block's evidence names the kernel
    (its short name), as the core it was found by."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)
    b.op("my_custom_op", 10, 20)
    b.launch(FLASH, 11, 1, 500, 20)
    [blk] = attribute_built(tmp_path, b).blocks
    assert blk.evidence.rule == "innermost-scope" and blk.evidence.names == ("pytorch_flash::flash_fwd_kernel",)


def test_a_replayed_blocks_evidence_names_its_rule(tmp_path: Path) -> None:
    """A graph replay of a split-KV decode kernel is found by rule fused-kernels, and its evidence says so."""
    b = TraceBuilder()
    replay_graph(b, [(SPLITKV, 20)], 1000)
    [blk] = attribute_built(tmp_path, b).blocks
    assert (blk.found_by, blk.evidence.rule) == ("fused-kernel", "fused-kernels")


def _compiled_scope(tmp_path: Path, kernels: list[tuple[str, float]]):
    """layer0.attention around one compiled op that launches ``kernels`` back to back from 500 µs: its blocks."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)
    b.op("CompiledFunction", 10, 50)
    t = 500.0
    for k, (name, dur) in enumerate(kernels):
        b.launch(name, 11 + 2 * k, 1, t, dur)
        t += dur + 1
    return attribute_built(tmp_path, b).blocks


def test_kernels_written_out_of_time_order_are_walked_in_time_order(tmp_path: Path) -> None:
    """A graph replay whose trace lists the decode kernel (at 1004 µs) before the KV-cache write that ran ahead of it
    (at 1000 µs): the walk goes by time, so the write opens the call and both kernels are one block (23 µs)."""
    b = TraceBuilder()
    b.op("model_runner_forward", 1, 50)
    b.launch(SPLITKV, 2, 5, 1004, 20, launch_name="cudaGraphLaunch", corr=77)
    b.device_only(CACHE_WRITE, 1000, 3, corr=77)
    [blk] = attribute_built(tmp_path, b).blocks
    assert blk.kernels == 2 and blk.total_us == pytest.approx(23) and blk.evidence.group == "kv-cache-write"


def test_a_scope_whose_kernels_run_gemm_softmax_gemm_is_a_block(tmp_path: Path) -> None:
    """layer0.attention around one compiled op that launches GEMM (10 µs) → a Triton softmax (5 µs) → GEMM (10 µs):
    no attention op inside, but its kernels make the pattern, so the scope is a block of those 3 kernels (25 µs),
    its core the kernel triple."""
    [blk] = _compiled_scope(tmp_path, [(GEMM, 10), ("triton_per_fused__softmax_0", 5), (GEMM, 10)])
    assert (blk.found_by, blk.evidence.core) == ("annotation", "gemm-softmax-gemm")
    assert blk.kernels == 3 and blk.total_us == pytest.approx(25)


def test_a_scope_whose_kernels_run_gemm_elementwise_gemm_is_no_block(tmp_path: Path) -> None:
    """The same scope with an elementwise kernel where the softmax was (an MLP's up-projection, activation,
    down-projection): no softmax kernel, so no attention."""
    assert _compiled_scope(tmp_path, [(GEMM, 10), ("triton_poi_fused_gelu_0", 5), (GEMM, 10)]) == []


@pytest.mark.parametrize(("between", "kernels"), [(4, 6), (5, 1)])
def test_at_most_four_kernels_between_a_groups_member_and_its_attention_kernel(tmp_path, between, kernels):
    """A replayed SageAttention call: its quantise kernel, ``between`` elementwise kernels, then its attention kernel.
    Up to MAX_BETWEEN (4) kernels between join the call: one block of 1 + 4 + 1 = 6 kernels. A fifth ends the
    quantise kernel's run, and the attention kernel is a block on its own (1 kernel)."""
    from tracekit.analysis.blocks.discovery import MAX_BETWEEN
    assert MAX_BETWEEN == 4
    b = TraceBuilder()
    elementwise = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
                   "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, float)")
    replay_graph(b, [("sage_quant_kernel", 4)] + [(elementwise, 2)] * between + [("sage_fwd", 30)], 1000)
    [blk] = attribute_built(tmp_path, b).blocks
    assert blk.kernels == kernels


def test_a_kernel_triple_is_centred_on_the_softmax(tmp_path: Path) -> None:
    """layer0.attention's kernels run GEMM, GEMM, GEMM → softmax → GEMM (projections, then the score product): the
    triple the evidence names is the one around the softmax (GEMM, softmax, GEMM), not three GEMMs in a row."""
    [blk] = _compiled_scope(tmp_path, [(GEMM, 10)] * 3 + [("triton_per_fused__softmax_0", 5), (GEMM, 10)])
    assert blk.evidence.names == ("cutlass::Kernel2", "triton_per_fused__softmax_0", "cutlass::Kernel2")


# ---------------------------------------------------------------------------------------------
# A kernel run joined by members of two groups keeps the group that opened it

def test_a_run_keeps_the_group_that_opened_it(tmp_path: Path) -> None:
    """One graph replay: a KV-cache write (kv-cache-write, before), a FlashInfer decode kernel, then FlashInfer's
    MergeStates (flashinfer, after; classified "other", so it joins as a member, not as an attention kernel).
    One block of the three kernels, and its group is the one that opened the run, not the last member's."""
    b = TraceBuilder()
    b.op("model_runner_forward", 1, 50)
    kernels = [("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>(int)", 3),
               ("BatchDecodeWithPagedKVCacheKernel<128>", 20), ("void flashinfer::MergeStatesKernel<8>(int)", 2)]
    t = 1000.0
    for k, (name, dur) in enumerate(kernels):
        if k == 0:
            b.launch(name, 2, 5, t, dur, launch_name="cudaGraphLaunch", corr=77)
        else:
            b.device_only(name, t, dur, corr=77)
        t += dur + 1
    res = analyze(b.write(tmp_path / "t.json")).check()
    [blk] = res.blocks
    assert blk.kernels == 3 and blk.total_us == pytest.approx(25)
    assert blk.evidence.group == "kv-cache-write"


# ---------------------------------------------------------------------------------------------
# ProfilerStep#N never becomes a block, even under a scope that matches its name

@pytest.mark.parametrize("scope", ["Profiler|attention", ".", "ProfilerStep#1|layer"])
def test_profiler_step_is_never_a_block_even_when_the_scope_matches_it(tmp_path, scope):
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    b.annotation("ProfilerStep#1", 0, 1000)
    attention_block(b, 10, name="layer0.attention")
    attention_block(b, 400, name="layer1.attention")
    r = analyze(b.write(tmp_path / "t.json"), scope=scope).check()
    assert not any(x.name.startswith("ProfilerStep") for x in r.blocks)
    assert [(x.name, x.found_by, x.step) for x in r.blocks] == [
        ("layer0.attention", "annotation", 1), ("layer1.attention", "annotation", 1)]
    # attention_block's device work: 31 µs busy (matmul 20, softmax 5, elementwise 2, memory 4) per block
    assert [x.total_us for x in r.blocks] == pytest.approx([31, 31])
    assert r.totals.categories["matmul"] == pytest.approx(40)
