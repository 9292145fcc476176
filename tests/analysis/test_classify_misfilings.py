"""Issue 22, class 5, "small misfilings": each rule with a case where it must fire and one where it must not.

1. A ``Memset (Device)`` launched inside a GEMM op (cuBLAS workspace under aten::addmm/mm/linear) is a fill:
   ``memory``, as the README promises, not ``matmul``.
2. On the SDPA math path of a CPU trace, the public ``aten::scaled_dot_product_attention`` op's own self time is
   ``other`` (dispatch; no fused kernel ran); under a fused backend it stays ``fused_attention``.
3. ``aten::_grouped_mm`` / ``aten::_scaled_grouped_mm`` (MoE experts) are ``matmul``, host op and the kernels they
   launch.
4. Linear attention and SSM kernels and ops (gated delta net, Mamba selective scan and SSD, causal-conv1d) have
   named rules, file as ``other``, are never ``fused_attention`` and never open an attention block.

Expected figures are written out by construction (hand-built traces, tests/support/builders.py) or walked from the raw
JSON of a trace recorded here with torch, never read back from tracekit.
"""

from __future__ import annotations

import json

import pytest

from support.builders import TraceBuilder
from tracekit import analyze
from tracekit.analysis.classify import HOST_CHILD_RULES, Classifier
from tracekit.vocab import LINEAR_ATTENTION_SSM_OPS, anchored, is_fused_attention_op, opens_fused_block

GEMM_K = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
SPLITK = ("void cublasLt::splitKreduce_kernel<32, 16, int, __nv_bfloat16, __nv_bfloat16, float, __nv_bfloat16, "
          "true, true, false>(cublasLt::cublasSplitKParams<float>, __nv_bfloat16 const*)")
FLASH_K = ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
           "false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, "
           "false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)")


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return Classifier()


def _rule(clf: Classifier, name: str, kind: str, launcher: str | None) -> tuple[str | None, str]:
    r = clf.device_rule(name, kind, launcher)
    return (r.name if r is not None else None), clf.device(name, kind, launcher)


def _analyze(tmp_path, b: TraceBuilder, name: str = "t.json"):
    return analyze(b.write(tmp_path / name)).check()


# ---- 1. a GEMM's workspace memset is a fill ----------------------------------------------------------------

@pytest.mark.parametrize("launcher", ["aten::addmm", "aten::mm", "aten::bmm", "aten::linear", "aten::_grouped_mm",
                                      "aten::_scaled_mm"])
def test_memset_under_a_gemm_op_is_memory(clf, launcher):
    assert _rule(clf, "Memset (Device)", "memset", launcher) == ("gemm-workspace-memset", "memory")


@pytest.mark.parametrize("name, kind, launcher, rule, category", [
    # the GEMM op's own kernels stay matmul, the split-K epilogue included: only copies/fills move
    (SPLITK, "kernel", "aten::addmm", "gemm-launcher", "matmul"),
    (GEMM_K, "kernel", "aten::mm", "gemm-launcher", "matmul"),
    (GEMM_K, "kernel", None, "gemm-kernel", "matmul"),
    # fills elsewhere were memory already, and a conv's workspace fill is a fill too
    ("Memset (Device)", "memset", "aten::zero_", "memcpy-memset", "memory"),
    ("Memset (Device)", "memset", "aten::cudnn_convolution", "memcpy-memset", "memory"),
    ("Memset (Device)", "memset", None, "memcpy-memset", "memory"),
])
def test_memset_rule_must_not_take_gemm_compute(clf, name, kind, launcher, rule, category):
    assert _rule(clf, name, kind, launcher) == (rule, category)


def test_workspace_memset_inside_a_linear_is_memory_in_the_block(tmp_path):
    """A q-projection (aten::linear → aten::addmm) launches a 2 µs workspace memset and a 10 µs GEMM; the range's
    attention core is an SDPA flash call (5 µs)."""
    b = TraceBuilder()
    b.annotation("layer0.self_attn", 0, 100)
    b.op("aten::linear", 5, 40)
    b.op("aten::addmm", 6, 38)
    b.launch("Memset (Device)", 7, 1, 200, 2, kind="gpu_memset")
    b.launch(GEMM_K, 10, 2, 203, 10)
    b.op("aten::scaled_dot_product_attention", 50, 40)
    b.op("aten::_flash_attention_forward", 52, 36)
    b.launch(FLASH_K, 55, 2, 214, 5)
    res = _analyze(tmp_path, b)
    [blk] = res.blocks
    assert blk.categories == pytest.approx({"matmul": 10, "softmax": 0, "fused_attention": 5, "memory": 2,
                                            "elementwise": 0, "other": 0})
    assert sum(blk.matmul_roles.values()) == pytest.approx(10)  # the roles split the GEMM only
    assert res.kernels[("Memset (Device)", "memory")][0] == 1


# ---- 2. SDPA on the math path: the public op's own time is not fused attention -----------------------------

def _sdpa_cpu(b: TraceBuilder, t0: float, child: str | None) -> None:
    """aten::scaled_dot_product_attention (100 µs) over ``child`` (90 µs from t0 + 5), or no child at all.

    The math child holds bmm 20, _softmax 30, bmm 20 (its own self time 20); a fused child holds nothing.
    """
    b.op("aten::scaled_dot_product_attention", t0, 100)
    if child is None:
        return
    b.op(child, t0 + 5, 90)
    if "math" in child:
        b.op("aten::bmm", t0 + 10, 20)
        b.op("aten::_softmax", t0 + 35, 30)
        b.op("aten::bmm", t0 + 70, 20)


def test_sdpa_math_path_self_time_is_other(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    _sdpa_cpu(b, 100, "aten::_scaled_dot_product_attention_math")
    res = _analyze(tmp_path, b)
    [blk] = res.blocks
    # other = the SDPA op's self 100 - 90 and the math op's self 90 - 70; no fused kernel ran
    assert blk.categories == pytest.approx({"matmul": 40, "softmax": 30, "fused_attention": 0, "memory": 0,
                                            "elementwise": 0, "other": 30})
    assert res.kernels[("aten::scaled_dot_product_attention", "other")] == (1, pytest.approx(10))


@pytest.mark.parametrize("child", ["aten::_scaled_dot_product_flash_attention_for_cpu",
                                   "aten::_scaled_dot_product_efficient_attention",
                                   "aten::_scaled_dot_product_cudnn_attention", None])
def test_sdpa_over_a_fused_backend_or_alone_stays_fused(tmp_path, child):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    _sdpa_cpu(b, 100, child)
    res = _analyze(tmp_path, b)
    [blk] = res.blocks
    assert blk.categories["fused_attention"] == pytest.approx(100) and blk.categories["other"] == 0
    own = 10 if child else 100  # the SDPA op's self time: 100 µs less its 90 µs child
    assert res.kernels[("aten::scaled_dot_product_attention", "fused_attention")] == (1, pytest.approx(own))


def test_sdpa_child_rule_fires_on_the_math_child_only():
    [rule] = [r for r in HOST_CHILD_RULES if r.name == "host-sdpa-math-dispatch"]
    c = Classifier()
    assert c.host_child_rule("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_attention_math") is rule
    assert c.host_child_rule("aten::scaled_dot_product_attention",
                             "aten::_scaled_dot_product_flash_attention_for_cpu") is None
    assert c.host_child_rule("aten::_scaled_dot_product_flash_attention_for_cpu",
                             "aten::_scaled_dot_product_attention_math") is None
    assert c.has_child_rules("aten::scaled_dot_product_attention") and not c.has_child_rules("aten::bmm")


def _self_times_by_name(events: list[dict]) -> dict[tuple[int, str], float]:
    """Independent of tracekit: each cpu_op's self time (duration minus its direct children's), parents found by a
    stack of the enclosing ops on each thread."""
    ops = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"),
                 key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    selfs = [float(e["dur"]) for e in ops]
    stack: list[int] = []
    for k, e in enumerate(ops):
        while stack and (ops[stack[-1]]["tid"] != e["tid"] or ops[stack[-1]]["ts"] + ops[stack[-1]]["dur"] <= e["ts"]):
            stack.pop()
        if stack:
            selfs[stack[-1]] -= e["dur"]
        stack.append(k)
    return {(k, e["name"]): selfs[k] for k, e in enumerate(ops)}


def test_sdpa_math_path_on_a_recorded_cpu_trace(tmp_path):
    """torch's own names: the math backend forced, then the default (flash for CPU); expected self times walked
    from the raw JSON."""
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    q = torch.randn(1, 2, 16, 8)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with sdpa_kernel(SDPBackend.MATH):
            torch.nn.functional.scaled_dot_product_attention(q, q, q)
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    path = tmp_path / "sdpa.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    selfs = _self_times_by_name(events)
    sdpa = [us for (_, n), us in sorted(selfs.items()) if n == "aten::scaled_dot_product_attention"]
    assert len(sdpa) == 2  # math first, then the fused CPU backend
    res = analyze(path).check()
    math_blk, fused_blk = sorted(res.blocks, key=lambda x: x.categories["fused_attention"])
    assert math_blk.categories["fused_attention"] == 0
    assert res.kernels[("aten::scaled_dot_product_attention", "other")][1] == pytest.approx(sdpa[0], abs=2e-3)
    assert res.kernels[("aten::scaled_dot_product_attention", "fused_attention")][1] == pytest.approx(sdpa[1], abs=2e-3)
    assert fused_blk.categories["fused_attention"] > 0


# ---- 3. grouped GEMMs (MoE experts) are matmul -------------------------------------------------------------

@pytest.mark.parametrize("op, category, rule", [
    ("aten::_grouped_mm", "matmul", "host-matmul"),
    ("aten::_scaled_grouped_mm", "matmul", "host-matmul"),
    # look-alikes that are not a grouped GEMM
    ("aten::group_norm", "other", "host-reduction-norm"),
    ("aten::_grouped_mm_x", "other", None),
])
def test_grouped_mm_host_op(clf, op, category, rule):
    got = clf.host_rule(op)
    assert (got.name if got else None) == rule and clf.host(op) == category


def test_grouped_mm_kernels_are_matmul_by_launcher(clf):
    # a grouped GEMM kernel whose name no GEMM pattern knows is still matmul under aten::_grouped_mm
    helper = "void grouped_offsets_helper_kernel<int>(int const*, int)"  # hand-built: no GEMM word in it
    assert _rule(clf, helper, "kernel", "aten::_grouped_mm") == ("gemm-launcher", "matmul")
    assert _rule(clf, helper, "kernel", "aten::_scaled_grouped_mm") == ("gemm-launcher", "matmul")
    assert _rule(clf, helper, "kernel", "aten::group_norm") == (None, "other")


def test_grouped_mm_experts_on_a_recorded_cpu_trace(tmp_path):
    """torch._grouped_mm on CPU runs one aten::mm per group under it: all of it is matmul in the block."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    x, w = torch.randn(32, 16), torch.randn(4, 16, 8)
    offs = torch.tensor([8, 16, 24, 32], dtype=torch.int32)
    q = torch.randn(1, 2, 16, 8)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("layer0.attention"):  # an attention call (its core) and the experts after it
            torch.nn.functional.scaled_dot_product_attention(q, q, q)
            torch._grouped_mm(x, w, offs=offs)
    path = tmp_path / "gmm.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    selfs = _self_times_by_name(events)
    gmm = sum(us for (_, n), us in selfs.items() if n == "aten::_grouped_mm")
    mm = sum(us for (_, n), us in selfs.items() if n == "aten::mm")
    res = analyze(path).check()
    [blk] = [x for x in res.blocks if x.name == "layer0.attention"]
    assert res.kernels[("aten::_grouped_mm", "matmul")][1] == pytest.approx(gmm, abs=2e-3)
    assert blk.categories["matmul"] == pytest.approx(gmm + mm, abs=1e-2)


# ---- 4. linear attention and state-space scans: named rules, never attention -------------------------------

SSM_KERNELS = [  # (kernel name as its library spells it, rule)
    ("chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "linear-attention-gated-delta"),
    ("chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64", "linear-attention-gated-delta"),
    ("fused_recurrent_gated_delta_rule_fwd_kernel", "linear-attention-gated-delta"),
    ("chunk_scaled_dot_kkt_fwd_kernel", "linear-attention-gated-delta"),
    ("recompute_w_u_fwd_kernel", "linear-attention-gated-delta"),
    ("chunk_fwd_kernel_o", "linear-attention-gated-delta"),
    ("merge_16x16_to_64x64_inverse_kernel", "linear-attention-gated-delta"),
    ("solve_tril_16x16_kernel", "linear-attention-gated-delta"),
    ("chunk_local_cumsum_scalar_kernel", "linear-attention-gated-delta"),
    ("fused_gdn_gating_kernel", "linear-attention-gated-delta"),
    ("chunk_kda_fwd_kernel_inter_solve_fused", "linear-attention-gated-delta"),
    ("void selective_scan_fwd_kernel<Selective_Scan_fwd_kernel_traits<32, 16, 1, true, true, true, false, "
     "c10::BFloat16, float, c10::BFloat16> >(SSMParamsBase)", "mamba-selective-scan"),
    ("void selective_scan_bwd_kernel<Selective_Scan_bwd_kernel_traits<128, 16, 1, true, true, false, false, "
     "false, c10::BFloat16, float, c10::BFloat16> >(SSMParamsBwd)", "mamba-selective-scan"),
    ("_selective_scan_update_kernel", "mamba-selective-scan"),
    ("_chunk_scan_fwd_kernel", "mamba-ssd"),
    ("_chunk_state_fwd_kernel", "mamba-ssd"),
    ("_chunk_cumsum_fwd_kernel", "mamba-ssd"),
    ("_state_passing_fwd_kernel", "mamba-ssd"),
    ("_bmm_chunk_fwd_kernel", "mamba-ssd"),
    ("_chunk_scan_chunk_state_bwd_dx_kernel", "mamba-ssd"),
    ("mamba_chunk_scan_combined_fwd", "mamba-ssd"),
    ("mamba_ssd_fwd_kernel", "mamba-ssd"),
    ("ssd_combined_fwd_kernel", "mamba-ssd"),
    ("void causal_conv1d_fwd_kernel<Causal_conv1d_fwd_kernel_traits<128, 4, true, c10::BFloat16, "
     "c10::BFloat16> >(ConvParamsBase)", "causal-conv1d"),
    ("void causal_conv1d_channellast_fwd_kernel<Causal_conv1d_channellast_fwd_kernel_traits<128, 4, 64, true, "
     "c10::BFloat16, c10::BFloat16> >(ConvParamsBase)", "causal-conv1d"),
    ("void causal_conv1d_update_kernel<Causal_conv1d_update_kernel_traits<64, 4, c10::BFloat16, c10::BFloat16> >"
     "(ConvParamsBase)", "causal-conv1d"),
    ("_causal_conv1d_fwd_kernel", "causal-conv1d"),
    ("_causal_conv1d_update_kernel", "causal-conv1d"),
]

# Look-alikes each of those rules must leave alone: (name, launcher, rule that takes it, category).
NOT_SSM = [
    (FLASH_K, "aten::_flash_attention_forward", "flash-attention", "fused_attention"),
    ("bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x64_cga1x1x1_16dp256b_TN_transOut_schedS_sm100f",
     None, "gemm-kernel", "matmul"),  # a TRT-LLM batched GEMM, ^bmm_, not Mamba's _bmm_chunk_
    ("void at_cuda_detail::cub::DeviceScanKernel<int>(int)", "aten::cumsum", "reduce-scan", "other"),  # not selective
    ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_64x64_64x5_nhwc>(Params)",
     "aten::cudnn_convolution", "conv-kernel", "other"),  # a CNN's conv, not the mixers' causal_conv1d
    ("void at::native::(anonymous namespace)::chunk_cat_cuda_kernel<float, float>(int)", None, None, "other"),
    ("void cross_ssd_update(int)", None, None, "other"),  # 'ssd_' inside a word is not SSD
    ("triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10", None, "inductor-layout", "memory"),
]


@pytest.mark.parametrize("name, rule", SSM_KERNELS, ids=[r + ":" + n[:40] for n, r in SSM_KERNELS])
@pytest.mark.parametrize("launcher", [None, "vllm::gdn_attention_core", "aten::scaled_dot_product_attention"])
def test_ssm_kernel_is_named_and_never_fused(clf, name, rule, launcher):
    # even launched from a fused attention op (which would claim any kernel it launches), it keeps its own rule
    assert _rule(clf, name, "kernel", launcher) == (rule, "other")


@pytest.mark.parametrize("name, launcher, rule, category", NOT_SSM, ids=[n[:40] for n, *_ in NOT_SSM])
def test_ssm_rules_leave_look_alikes_alone(clf, name, launcher, rule, category):
    assert _rule(clf, name, "kernel", launcher) == (rule, category)


@pytest.mark.parametrize("op", ["vllm::gdn_attention_core", "vllm::gdn_attention", "vllm::gdn_attention_core_xpu",
                                "vllm::kda_attention", "vllm::linear_attention", "vllm::mamba_mixer2",
                                "vllm::mamba_mixer", "aiter::linear_attention_with_output_base",
                                "ChunkGatedDeltaRuleFunction", "MambaSplitConv1dScanCombinedFn",
                                "MambaSplitConv1dScanCombinedFnBackward", "SelectiveScanFn", "MambaInnerFn",
                                "DaoAILab::_causal_conv1d_fwd_cpp", "DaoAILab::_causal_conv1d_update_cpp",
                                "DaoAILab::_causal_conv1d_bwd_cpp", "CausalConv1dFn"])
def test_ssm_ops_are_other_and_open_no_block(clf, op):
    got = clf.host_rule(op)
    assert got is not None and got.name == "host-linear-attention-ssm" and clf.host(op) == "other"
    assert not is_fused_attention_op(op) and not opens_fused_block(op)
    # whatever odd name a kernel it launches has, it is the mixer's
    assert _rule(clf, "_fwd_diag_kernel", "kernel", op) == ("ssm-launcher", "other")
    assert _rule(clf, "Memset (Device)", "memset", op) == ("memcpy-memset", "memory")  # fills stay memory


@pytest.mark.parametrize("op", ["vllm::unified_attention_with_output", "vllm::unified_attention",
                                "vllm::mla_attention", "aten::scaled_dot_product_attention"])
def test_softmax_attention_ops_are_untouched(clf, op):
    """The vllm-attention pattern lost only the linear attentions: the softmax ones still open blocks."""
    assert opens_fused_block(op) and clf.host(op) == "fused_attention"
    assert _rule(clf, "_fwd_diag_kernel", "kernel", op) == ("fused-attention-launcher", "fused_attention")
    import re
    assert re.match(anchored(*LINEAR_ATTENTION_SSM_OPS), op) is None


def test_gated_delta_net_layer_opens_no_block(tmp_path):
    """A Qwen3-Next-style decode step on a GPU trace: the GDN op with fla kernels, then a softmax-attention op with
    its kernel. Only the second is a block, and the GDN kernels sit in none."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    b.op("vllm::gdn_attention_core", 10, 50)
    b.launch("fused_gdn_gating_kernel", 12, 2, 300, 3)
    b.launch("chunk_gated_delta_rule_fwd_kernel_h_blockdim64", 15, 2, 304, 20)
    b.launch("_fwd_diag_kernel", 18, 2, 325, 4)  # a kernel with a generic name, owned by its launcher
    b.op("vllm::unified_attention_with_output", 100, 50)
    b.launch(FLASH_K, 105, 2, 340, 15)
    res = _analyze(tmp_path, b)
    [blk] = res.blocks
    assert blk.name == "vllm::unified_attention_with_output" and blk.total_us == pytest.approx(15)
    assert blk.categories["fused_attention"] == pytest.approx(15) and blk.categories["other"] == 0
    assert not [k for k in res.kernels if "gated_delta" in k[0] or "gdn" in k[0] or "diag" in k[0]]


def test_ssm_kernels_without_host_ops_open_and_join_no_fused_kernel_block(tmp_path):
    """A replayed graph (no host op per kernel): flash, then a Mamba scan, then flash on one stream. The scan
    breaks the run of fused kernels (two blocks) and belongs to neither; alone it opens nothing."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    b.op("decode_step", 10, 900)
    b.launch(FLASH_K, 20, 5, 100, 10, launch_name="cudaGraphLaunch")
    b.launch("_chunk_scan_fwd_kernel", 30, 5, 111, 30, launch_name="cudaGraphLaunch")
    b.launch(FLASH_K, 40, 5, 142, 10, launch_name="cudaGraphLaunch")
    b.launch("void causal_conv1d_fwd_kernel<Causal_conv1d_fwd_kernel_traits<128, 4, true, c10::BFloat16, "
             "c10::BFloat16> >(ConvParamsBase)", 50, 5, 160, 8, launch_name="cudaGraphLaunch")
    res = _analyze(tmp_path, b)
    assert sorted(x.total_us for x in res.blocks) == [pytest.approx(10), pytest.approx(10)]
    assert all(x.categories["fused_attention"] == pytest.approx(x.total_us) for x in res.blocks)
    b2 = TraceBuilder()
    b2.annotation("ProfilerStep#1", 0, 1000)
    b2.op("decode_step", 10, 900)
    b2.launch("_chunk_scan_fwd_kernel", 30, 5, 111, 30, launch_name="cudaGraphLaunch")
    b2.launch("chunk_gated_delta_rule_fwd_kernel_h_blockdim64", 40, 5, 142, 10, launch_name="cudaGraphLaunch")
    assert _analyze(tmp_path, b2, "t2.json").blocks == []
