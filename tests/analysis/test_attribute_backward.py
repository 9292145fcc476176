"""Backward attention under its forward block, in every discovery mode (issue 11), on hand-built traces.

Each trace has two layers in one ProfilerStep; autograd's backward runs on its own thread outside the step,
in reverse layer order, as on GPU. The answer is known by construction: every forward block has exactly one
backward block with its name, step and ordinal, holding exactly the kernels its backward ops launched.
"""
from __future__ import annotations

import pytest

from support.builders import TraceBuilder
from tracekit import analyze
from tracekit.analysis.classify import Classifier
from tracekit.vocab import Category, is_backward_op, kernel_label, opens_fused_block
from tracekit.analysis.blocks.backward import _backward_evidence
from tracekit.analysis.blocks.discovery import Block
from tracekit.results.attribution import Evidence
from tracekit.vocab import CoreKind, FoundBy

MAIN, AUTOGRAD = 1, 2
FWD_K = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"
BWD_K = "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x128x128_4x1x1_cga1x1x1_kernel0_0"
DOT = "void compute_dot_do_o_specialized<128, 64, __nv_bfloat16>(const __nv_bfloat16*, float*, int)"
CONV = "void convert_dq_to_16bits<__nv_bfloat16, 128>(const float*, __nv_bfloat16*, int)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"


def _seq(ev: dict, nr: int, fwd_tid: int) -> dict:
    ev["args"]["Sequence number"] = nr
    ev["args"]["Fwd thread id"] = fwd_tid
    return ev


def _two_layers(mode: str, links: str) -> TraceBuilder:
    """Forward: per layer, a q projection (GEMM 10 µs) and the attention core (fwd kernel 30 µs), found by
    ``mode``; backward on the autograd thread in reverse order: core (dot 3, bprop 50, convert 2 µs), then
    projection (GEMM 20 µs). ``links``: ``flows`` (fwdbwd), ``seq`` (Sequence numbers only) or ``both``."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])
    b.annotation("ProfilerStep#5", 0, 1000, tid=MAIN)
    fwd_core: list[tuple[int, float]] = []  # (seq, ts) of each layer's core op
    fwd_proj: list[tuple[int, float]] = []
    for layer in range(2):
        t = 100 + 300 * layer
        seq_p, seq_c = 10 * layer + 1, 10 * layer + 2
        if mode == "annotation":
            b.annotation(f"layer{layer}.attention", t, 200, tid=MAIN)
        elif mode == "module":
            b.module(f"GPTAttention_{layer}", t, 200, tid=MAIN)
        p = _seq(b.op("aten::linear", t + 1, 20, tid=MAIN), seq_p, 0)
        b.launch(GEMM, t + 2, 2, 2000 + 200 * layer, 10, tid=MAIN)
        fwd_proj.append((seq_p, p["ts"]))
        if mode == "inferred":  # the eager pattern: matmul -> softmax -> matmul under one parent
            c = _seq(b.op("aten::matmul", t + 30, 20, tid=MAIN), seq_c, 0)
            b.launch(FWD_K, t + 31, 2, 2020 + 200 * layer, 30, tid=MAIN)
            b.op("aten::softmax", t + 60, 10, tid=MAIN)
            b.op("aten::matmul", t + 80, 10, tid=MAIN)
            b.op("aten::linear", t + 92, 2, tid=MAIN)  # the output projection and the residual add: the layer ends
            b.op("aten::add", t + 95, 2, tid=MAIN)  # (else the next layer's q projection is rule input-projections')
        elif mode == "fused-op":
            c = _seq(b.op("aten::scaled_dot_product_attention", t + 30, 100, tid=MAIN), seq_c, 0)
            _seq(b.op("aten::_scaled_dot_product_cudnn_attention", t + 31, 90, tid=MAIN), seq_c, 0)
            b.launch(FWD_K, t + 32, 2, 2020 + 200 * layer, 30, tid=MAIN)
        else:
            c = _seq(b.op("aten::mul", t + 30, 100, tid=MAIN), seq_c, 0)
            b.launch(FWD_K, t + 31, 2, 2020 + 200 * layer, 30, tid=MAIN)
        fwd_core.append((seq_c, c["ts"]))
    t = 1200  # backward, outside the step, layer 1 first
    for layer in (1, 0):
        for what, (nr, fts) in (("core", fwd_core[layer]), ("proj", fwd_proj[layer])):
            name = ("ScaledDotProductCudnnAttentionBackward0" if mode == "fused-op" else "MulBackward0") \
                if what == "core" else "AddmmBackward0"
            ev = b.op(f"autograd::engine::evaluate_function: {name}", t, 80, tid=AUTOGRAD)
            if links in ("seq", "both"):
                _seq(ev, nr, MAIN)
                _seq(b.op(name, t + 1, 78, tid=AUTOGRAD), nr, MAIN)
            if links in ("flows", "both"):
                fid = 1000 + nr
                b.flow(fid, True, fts, tid=MAIN)
                b.flow(fid, False, t, tid=AUTOGRAD)
            k0 = 3000 + 400 * (1 - layer) + (0 if what == "core" else 200)
            if what == "core":
                inner = "aten::_scaled_dot_product_cudnn_attention_backward" if mode == "fused-op" else "aten::mul"
                b.op(inner, t + 2, 70, tid=AUTOGRAD)
                b.launch(DOT, t + 3, 2, k0, 3, tid=AUTOGRAD)
                b.launch(BWD_K, t + 6, 2, k0 + 10, 50, tid=AUTOGRAD)
                b.launch(CONV, t + 9, 2, k0 + 70, 2, tid=AUTOGRAD)
            else:
                b.op("aten::mm", t + 2, 70, tid=AUTOGRAD)
                b.launch(GEMM, t + 3, 2, k0, 20, tid=AUTOGRAD)
            t += 100
    return b


MODES = {"annotation": "layer*.attention", "module": "GPTAttention", "fused-op": "aten::scaled_dot_product_attention",
         "inferred": "inferred attention"}


@pytest.mark.parametrize("links", ["flows", "seq", "both"])
@pytest.mark.parametrize("mode", list(MODES))
def test_every_forward_block_gets_its_backward(tmp_path, mode, links):
    b = _two_layers(mode, links)
    res = analyze(b.write(tmp_path / "t.json")).check()
    fwd = sorted((x for x in res.blocks if x.phase == "forward"), key=lambda x: x.ordinal)
    bwd = sorted((x for x in res.blocks if x.phase == "backward"), key=lambda x: x.ordinal)
    assert [x.found_by for x in fwd] == [mode] * 2
    assert [(x.name, x.step, x.ordinal) for x in bwd] == [(x.name, x.step, x.ordinal) for x in fwd]
    assert {x.step for x in res.blocks} == {5}  # the autograd thread is outside ProfilerStep#5
    core = 3 + 50 + 2  # dot_do_o + bprop + convert_dq: all three are fused attention (or 'other' if eager-named)
    for x in bwd:
        assert x.kernels in (3, 4)
        assert x.categories["fused_attention"] == pytest.approx(core)
    names = {x.name for x in res.blocks}
    assert not any(is_backward_op(n) for n in names)


def test_issue_trace_cudnn_backward_op_is_no_forward_block(tmp_path):
    """The issue's table: 2 forward + 2 backward blocks, not 2 forward + 2 '…_backward' forward blocks."""
    res = analyze(_two_layers("fused-op", "seq").write(tmp_path / "t.json")).check()
    kinds = sorted((x.kind, x.phase) for x in res.blocks)
    assert kinds == [("aten::scaled_dot_product_attention", "backward")] * 2 + \
        [("aten::scaled_dot_product_attention", "forward")] * 2
    total_bwd = sum(x.total_us for x in res.blocks if x.phase == "backward")
    assert total_bwd == pytest.approx(2 * (3 + 50 + 2))  # not 0.0 µs


def test_backward_ordinal_follows_the_forward_block_not_the_time(tmp_path):
    """Layer 1's backward runs first; it must carry layer 1's ordinal, by the link, not by its start time."""
    b = _two_layers("annotation", "flows")
    res = analyze(b.write(tmp_path / "t.json")).check()
    by = {(x.phase, x.ordinal): x for x in res.blocks}
    # forward layer 1 starts at 400; its backward (kernels from 3000) runs before layer 0's (from 3400)
    assert by[("forward", 1)].name == "layer1.attention"
    assert by[("backward", 1)].name == "layer1.attention"
    assert by[("backward", 1)].span_us > 0


def test_a_lone_fused_backward_op_is_a_backward_block(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 500)
    b.op("aten::_scaled_dot_product_flash_attention_for_cpu_backward", 100, 50)
    res = analyze(b.write(tmp_path / "cpu.json")).check()
    assert [(x.name, x.phase, x.found_by, x.step) for x in res.blocks] == [
        ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "backward", "fused-op", 1)]


def test_compiled_region_backward_pairs_last_to_first(tmp_path):
    """torch.compile: CompiledFunction holds the forward attention ops, CompiledFunctionBackward the backward
    ones, with no link of their own; autograd runs the graph in reverse."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#2", 0, 3000)
    b.annotation("Torch-Compiled Region: 0/0", 10, 900)
    _seq(b.op("CompiledFunction", 20, 800), 7, 0)
    for layer in range(2):
        b.op("aten::_scaled_dot_product_flash_attention_for_cpu", 100 + 300 * layer, 100 + 10 * layer)
    _seq(b.op("autograd::engine::evaluate_function: CompiledFunctionBackward", 1000, 1500), 7, 1)
    _seq(b.op("CompiledFunctionBackward", 1001, 1498), 7, 1)
    for k, layer in enumerate((1, 0)):
        b.op("aten::_scaled_dot_product_flash_attention_for_cpu_backward", 1100 + 500 * k, 200 + 10 * layer)
    res = analyze(b.write(tmp_path / "cpu.json")).check()
    fwd = {x.ordinal: x for x in res.blocks if x.phase == "forward"}
    bwd = {x.ordinal: x for x in res.blocks if x.phase == "backward"}
    assert sorted(fwd) == sorted(bwd) == [0, 1]
    for o in (0, 1):  # host time tells the layers apart: 100+10·layer forward, 200+10·layer backward
        assert fwd[o].total_us == pytest.approx(100 + 10 * o)
        assert bwd[o].total_us == pytest.approx(200 + 10 * o)
        assert bwd[o].name == fwd[o].name and bwd[o].step == 2


def test_graph_replay_kernels_are_named_and_phased_by_their_op(tmp_path):
    """CUDA graphs: no host op per kernel; the fused-kernel block is named after the op, not a kernel prefix."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    b.op("train_step", 10, 900)
    b.launch(FWD_K, 20, 5, 100, 30, launch_name="cudaGraphLaunch")
    b.launch(GEMM, 30, 5, 140, 10, launch_name="cudaGraphLaunch")
    b.launch(DOT, 40, 5, 200, 3, launch_name="cudaGraphLaunch")
    b.launch(BWD_K, 50, 5, 210, 50, launch_name="cudaGraphLaunch")
    b.launch(CONV, 60, 5, 270, 2, launch_name="cudaGraphLaunch")
    res = analyze(b.write(tmp_path / "g.json")).check()
    assert sorted((x.name, x.phase, x.found_by, x.total_us) for x in res.blocks) == [
        ("cudnn sdpa bprop", "backward", "fused-kernel", pytest.approx(55)),
        ("cudnn sdpa fprop", "forward", "fused-kernel", pytest.approx(30))]


@pytest.mark.parametrize("name", [  # real backend backward ops (PyTorch's native_functions.yaml, traces)
    "aten::_scaled_dot_product_cudnn_attention_backward", "aten::_scaled_dot_product_flash_attention_backward",
    "aten::_scaled_dot_product_efficient_attention_backward", "aten::_flash_attention_backward",
    "aten::_efficient_attention_backward", "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    "aten::_cudnn_attention_backward", "flash_attn::_flash_attn_backward", "aiter::mha_bwd"])
def test_backend_backward_ops_never_open_forward_blocks(name):
    assert is_backward_op(name) and not opens_fused_block(name)
    assert Classifier().host(name) == Category.FUSED_ATTENTION


KERNELS = [  # (real kernel name, launching op, category)
    # cuDNN backend backward: main kernel and its two helpers
    (BWD_K, "aten::_scaled_dot_product_cudnn_attention_backward", "fused_attention"),
    (DOT, None, "fused_attention"), (CONV, None, "fused_attention"),
    # flash backend backward (PyTorch's copy of FA2)
    ("void pytorch_flash::flash_bwd_dot_do_o_kernel<true, pytorch_flash::Flash_bwd_kernel_traits<64, 128, 128, 8>>"
     "(pytorch_flash::Flash_bwd_params)", None, "fused_attention"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::Flash_bwd_kernel_traits<64>>"
     "(pytorch_flash::Flash_bwd_params)", None, "fused_attention"),
    ("void pytorch_flash::flash_bwd_convert_dq_kernel<pytorch_flash::Flash_bwd_kernel_traits<64, 128, 128, 8>>"
     "(pytorch_flash::Flash_bwd_params, int)", None, "fused_attention"),
    # mem-efficient backend backward
    ("fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80>"
     "::Params)", None, "fused_attention"),
    # math backend backward: its true categories
    ("void (anonymous namespace)::softmax_warp_backward<float, float, float, 7, false, false>(float*, const float*)",
     "aten::_softmax_backward_data", "softmax"),
    ("ampere_sgemm_64x64_nn", "aten::bmm", "matmul"),
    # inductor: fused softmax counts as softmax; attention templates as fused attention
    ("triton_per_fused__softmax_0", None, "softmax"),
    ("triton_red_fused__softmax_backward_data_mul_1", None, "softmax"),
    ("triton_tem_fused_flex_attention_0", None, "fused_attention"),
    ("triton_tem_fused_flex_attention_backward_1", None, "fused_attention"),
    ("triton_poi_fused_add_mul_2", None, "elementwise"),
]


@pytest.mark.parametrize("kernel,launcher,category", KERNELS)
def test_backward_and_compiled_kernels_classify(kernel, launcher, category):
    assert Classifier().device(kernel, "kernel", launcher) == category


def test_kernel_labels_name_the_op():
    assert kernel_label(FWD_K).name == "cudnn sdpa fprop"
    assert kernel_label(BWD_K).phase == "backward"
    assert kernel_label(GEMM) is None


@pytest.mark.parametrize("links", ["flows", "seq"])
def test_autograd_thread_ops_take_their_forward_ops_step(tmp_path, links):
    """A backward op outside every ProfilerStep gets its forward op's step; so do the kernels it launches,
    here a fused-kernel block (a replayed graph launched from the autograd thread)."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#9", 0, 500, tid=MAIN)
    f = _seq(b.op("aten::mul", 100, 50, tid=MAIN), 3, 0)
    ev = b.op("autograd::engine::evaluate_function: MulBackward0", 1000, 100, tid=AUTOGRAD)
    if links == "seq":
        _seq(ev, 3, MAIN)
    else:
        b.flow(77, True, f["ts"], tid=MAIN)
        b.flow(77, False, 1000, tid=AUTOGRAD)
    b.launch(BWD_K, 1010, 5, 2000, 50, launch_name="cudaGraphLaunch", tid=AUTOGRAD)
    res = analyze(b.write(tmp_path / "t.json")).check()
    assert [(x.name, x.phase, x.step) for x in res.blocks] == [("cudnn sdpa bprop", "backward", 9)]


def _compiled_eager(b: TraceBuilder, layers: int = 2) -> None:
    """torch.compile of eager attention on GPU: one graph call launches every kernel; inductor fuses the
    softmax (scale, mask, exp, sum) into one Triton kernel between the QKᵀ and PV GEMMs."""
    b.annotation("ProfilerStep#4", 0, 5000, tid=MAIN)
    _seq(b.op("CompiledFunction", 5, 950, tid=MAIN), 40, 0)
    b.annotation("## Call CompiledFxGraph fabc ##", 10, 900, tid=MAIN)
    t, k = 20, 1000
    for layer in range(layers):
        for name, dur in ((GEMM, 10), ("triton_poi_fused_cat_split_transpose_view_1", 1),  # qkv proj, split
                          (GEMM, 4 + layer), ("triton_per_fused__softmax_add_exp_mul_sub_2", 3), (GEMM, 5),  # QK, PV
                          ("triton_poi_fused__unsafe_view_clone_transpose_view_4", 1), (GEMM, 8)):  # out proj
            b.launch(name, t, 2, k, dur, tid=MAIN, launch_name="cuLaunchKernel")
            t, k = t + 5, k + 20
    _seq(b.op("CompiledFunctionBackward", 2995, 950, tid=AUTOGRAD), 40, MAIN)  # outside the step: gets step 4
    b.annotation("## Call CompiledFxGraph fdef ##", 3000, 900, tid=AUTOGRAD)  # backward, layers reversed
    t = 3010
    for layer in reversed(range(layers)):
        for name, dur in ((GEMM, 9), ("triton_per_fused_sum_view_4", 1), (GEMM, 6), (GEMM, 7 + layer),  # dV, dP
                          ("triton_per_fused__softmax_backward_data_mul_view_8", 2), (GEMM, 6), (GEMM, 6),  # dQ, dK
                          ("triton_per_fused__unsafe_view_add_cat_clone_sum_transpose_view_9", 1), (GEMM, 11)):
            b.launch(name, t, 2, k, dur, tid=AUTOGRAD, launch_name="cuLaunchKernel")
            t, k = t + 5, k + 20


def test_compiled_eager_attention_is_found_from_its_kernels(tmp_path):
    b = TraceBuilder()
    _compiled_eager(b)
    res = analyze(b.write(tmp_path / "c.json")).check()
    fwd = sorted((x for x in res.blocks if x.phase == "forward"), key=lambda x: x.ordinal)
    bwd = sorted((x for x in res.blocks if x.phase == "backward"), key=lambda x: x.ordinal)
    assert [(x.found_by, x.ordinal, x.kernels) for x in fwd] == [("inferred", 0, 3), ("inferred", 1, 3)]
    assert [(x.found_by, x.ordinal, x.kernels) for x in bwd] == [("inferred", 0, 5), ("inferred", 1, 5)]
    for o, x in enumerate(fwd):  # QKᵀ 4+layer + PV 5 µs of GEMM, 3 µs of fused softmax; never the projections
        assert (x.categories["matmul"], x.categories["softmax"]) == (pytest.approx(9 + o), pytest.approx(3))
    for o, x in enumerate(bwd):  # dV 6 + dP 7+layer + dQ 6 + dK 6: layer 1 ran first, yet pairs with ordinal 1
        assert (x.categories["matmul"], x.categories["softmax"]) == (pytest.approx(25 + o), pytest.approx(2))
    assert {x.step for x in res.blocks} == {4}


def test_a_lone_softmax_or_loss_kernel_is_no_block(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    b.annotation("## Call CompiledFxGraph f ##", 10, 900)
    for i, name in enumerate((GEMM, "triton_per_fused__log_softmax_prepare_softmax_online_view_0", GEMM,
                              "triton_poi_fused_add_0", "triton_per_fused__softmax_1", "triton_poi_fused_add_0")):
        b.launch(name, 20 + 5 * i, 2, 100 + 20 * i, 3)
    res = analyze(b.write(tmp_path / "c.json")).check()
    assert res.blocks == []


def test_graph_replay_backward_blocks_pair_with_their_forward_ones(tmp_path):
    """Compiled FlexAttention training: one template kernel per layer and pass, projections between; the
    backward ones (layers reversed) carry the ordinal of their forward block."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#3", 0, 5000)
    b.annotation("## Call CompiledFxGraph f ##", 10, 4000)
    t, k = 20, 100
    for name, dur in ((GEMM, 5), ("triton_tem_fused_flex_attention_0", 30), (GEMM, 5),
                      (GEMM, 5), ("triton_tem_fused_flex_attention_0", 31), (GEMM, 5),
                      (GEMM, 5), ("triton_tem_fused_flex_attention_backward_1", 61), (GEMM, 5),  # layer 1 first
                      (GEMM, 5), ("triton_tem_fused_flex_attention_backward_1", 60), (GEMM, 5)):
        b.launch(name, t, 2, k, dur, launch_name="cuLaunchKernel")
        t, k = t + 5, k + 100
    res = analyze(b.write(tmp_path / "f.json")).check()
    got = sorted((x.phase, x.ordinal, x.total_us, x.found_by) for x in res.blocks)
    assert got == [("backward", 0, pytest.approx(60), "fused-kernel"),
                   ("backward", 1, pytest.approx(61), "fused-kernel"),
                   ("forward", 0, pytest.approx(30), "fused-kernel"),
                   ("forward", 1, pytest.approx(31), "fused-kernel")]


# ---------------------------------------------------------------------------------------------
# A backward block's evidence, and a backward op inside another layer's or step's backward op, on hand-built pieces

def test_backward_evidence_of_a_forward_block_without_evidence_is_none():
    """A forward block without evidence (a hand-built or pre-evidence block): its backward has none either,
    rather than a crash on the missing rule."""
    assert _backward_evidence(Block("attn", FoundBy.MODULE, [0], evidence=None), "autograd") is None


def test_backward_evidence_names_how_it_was_paired():
    """The forward's evidence with the rule prefixed: "autograd backward of innermost-scope"; the rest is kept."""
    ev = Evidence(rule="innermost-scope", core=CoreKind.FUSED_OP, names=("aten::sdpa",))
    got = _backward_evidence(Block("attn", FoundBy.MODULE, [0], evidence=ev), "autograd")
    assert got == Evidence(rule="autograd backward of innermost-scope", core=CoreKind.FUSED_OP, names=("aten::sdpa",))




def test_a_backward_op_inside_another_layers_backward_op_keeps_its_own_block(tmp_path):
    """Two layers (annotations, each a 30 µs fused forward kernel under an aten::mul with sequence number 2 / 12).
    On the autograd thread, layer 1's backward op (seq 12, 1200..1300 µs, a 10 µs bprop kernel) encloses layer 0's
    (seq 2, 1250..1280 µs, a 20 µs bprop kernel). Each is its own forward's backward root (attribute._attach_backward:
    an op inside another joined op is a root unless both join the same forward block), and children inherit an
    owner only when they have none: so layer 0's backward holds its 20 µs, not layer 1's, which holds its own 10 µs."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])
    b.annotation("ProfilerStep#5", 0, 1000, tid=MAIN)
    for layer in range(2):
        t = 100 + 300 * layer
        b.annotation(f"layer{layer}.attention", t, 200, tid=MAIN)
        _seq(b.op("aten::mul", t + 30, 100, tid=MAIN), 10 * layer + 2, 0)
        b.launch(FWD_K, t + 31, 2, 2000 + 200 * layer, 30, tid=MAIN)
    _seq(b.op("MulBackward0", 1200, 100, tid=AUTOGRAD), 12, MAIN)  # layer 1's
    b.launch(BWD_K, 1202, 2, 3000, 10, tid=AUTOGRAD)
    _seq(b.op("MulBackward0", 1250, 30, tid=AUTOGRAD), 2, MAIN)  # layer 0's, inside it
    b.launch(BWD_K, 1252, 2, 3100, 20, tid=AUTOGRAD)
    res = analyze(b.write(tmp_path / "t.json")).check()
    bwd = {x.name: x for x in res.blocks if x.phase == "backward"}
    assert sorted(bwd) == ["layer0.attention", "layer1.attention"]
    assert bwd["layer0.attention"].total_us == pytest.approx(20)
    assert bwd["layer1.attention"].total_us == pytest.approx(10)




def test_a_backward_op_inside_another_steps_backward_op_keeps_its_own_step(tmp_path):
    """ProfilerStep#5 and #6, each: a projection (aten::linear, sequence number 3 / 13, a 5 µs GEMM) and an attention
    layer (a 30 µs fused kernel). On the autograd thread, outside both steps: step 6's projection backward (seq 13,
    a 10 µs GEMM) encloses step 5's (seq 3, a 20 µs GEMM). Each backward op takes its own forward op's step, and a
    child inherits its parent's step only when it has none (attribute._inherit), so the whole-step busy times are
    step 5: 5 + 30 + 20 = 55 µs and step 6: 5 + 30 + 10 = 45 µs (no kernel overlaps another)."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])
    for s in range(2):
        t = 100 + 300 * s
        b.annotation(f"ProfilerStep#{5 + s}", t - 50, 290, tid=MAIN)
        _seq(b.op("aten::linear", t - 40, 20, tid=MAIN), 10 * s + 3, 0)
        b.launch(GEMM, t - 39, 2, 2000 + 200 * s, 5, tid=MAIN)
        b.annotation(f"layer{s}.attention", t, 200, tid=MAIN)
        b.op("aten::mul", t + 30, 100, tid=MAIN)
        b.launch(FWD_K, t + 31, 2, 2100 + 200 * s, 30, tid=MAIN)
    _seq(b.op("AddmmBackward0", 1200, 100, tid=AUTOGRAD), 13, MAIN)  # step 6's
    b.launch(GEMM, 1202, 2, 3000, 10, tid=AUTOGRAD)
    _seq(b.op("AddmmBackward0", 1250, 30, tid=AUTOGRAD), 3, MAIN)  # step 5's, inside it
    b.launch(GEMM, 1252, 2, 3100, 20, tid=AUTOGRAD)
    (tr,) = analyze(b.write(tmp_path / "t.json")).check().traces
    assert {f.step: f.busy_us for f in tr.step_figures} == pytest.approx({5: 55.0, 6: 45.0})
