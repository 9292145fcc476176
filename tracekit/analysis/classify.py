"""Six-way classification of device events (and CPU-only host ops) inside attention blocks.

Rules are ordered data, first match wins; each carries the trap or fact behind it in ``why``.
The order matters because real kernel names overlap: FA3 kernels are ``cutlass::device_kernel``s,
the KV-cache write contains "flash", ``splitKreduce`` contains "reduce", copy kernels are
``elementwise_kernel``s, and inductor pointwise kernels embed attention op names.
Sources for every pattern: the real traces (tests/conftest.py finds them) and the kernel-name notes
behind docs/attribution.md. Fused attention *ops* come from :mod:`tracekit.vocab`, shared with block finding.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..vocab import (
    CATEGORIES, COMPILED_GRAPH_OPS, COMPILED_REGION_OPS, FUSED_ATTENTION_OP_RE, GEMM_OPS, INDUCTOR_CPP_KERNELS,
    LINEAR_ATTENTION_SSM_OPS, LOG_SOFTMAX_BACKWARD_OPS, LOG_SOFTMAX_OPS,
    MASKED_SOFTMAX_OPS, SOFTMAX_BACKWARD_OPS, SOFTMAX_OPS, Category, OpPattern, alternation, anchored,
)

__all__ = ["CATEGORIES", "DEVICE_RULES", "HOST_CHILD_RULES", "HOST_RULES", "Category", "ChildRule", "Classifier",
           "Rule"]

DEVICE_KINDS = frozenset({"kernel", "memcpy", "memset"})
_COPIES = frozenset({"memcpy", "memset"})


@dataclass(frozen=True, slots=True)
class Rule:
    """One classification rule. ``kernel`` and ``launcher`` are ``re.search`` patterns (None = any).

    A rule with a ``launcher`` pattern never matches an event whose launcher is unknown (None).
    In HOST_RULES, ``kernel`` holds an anchored (``^...$``) pattern over the cpu op name and
    ``launcher``/``kinds`` are unused.
    """

    name: str
    category: Category
    kernel: str | None = None
    launcher: str | None = None
    kinds: frozenset[str] = DEVICE_KINDS
    why: str = ""

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"rule {self.name!r}: unknown category {self.category!r}")
        object.__setattr__(self, "category", Category(self.category))  # "softmax" and Category.SOFTMAX alike
        if not self.kinds <= DEVICE_KINDS:
            raise ValueError(f"rule {self.name!r}: unknown kinds {sorted(self.kinds - DEVICE_KINDS)}")


@dataclass(frozen=True, slots=True)
class ChildRule:
    """A host op whose SELF time (CPU-only traces) depends on the op run directly under it.

    ``op`` and ``child`` are anchored ``re`` patterns over op names. An op matching ``op`` with a child op (the
    profiler's tree) matching ``child`` takes ``category``, ahead of HOST_RULES; without such a child HOST_RULES
    decide. The public SDPA op is the case: which backend ran shows only in its child.
    """

    name: str
    category: Category
    op: str
    child: str
    why: str = ""

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"rule {self.name!r}: unknown category {self.category!r}")
        object.__setattr__(self, "category", Category(self.category))


_INDUCTOR = r"^triton_(?:poi|per|red)_"
# Ops that only move data, plus attention op names inductor embeds when it lays out their inputs.
_LAYOUT_OPS = (r"_to_copy|_unsafe_view|clone|copy|transpose|permute|view|reshape|expand|slice|select"
               r"|split_with_sizes|split|unsqueeze|squeeze|cat|stack|unbind|as_strided|constant_pad_nd|alias|t"
               r"|_scaled_dot_product_(?:flash|efficient|cudnn)_attention|fmha_v3_fwd|aiter_sage_attn")
_GEMM_OPS = anchored(*GEMM_OPS)  # the one vocabulary of matrix-product ops (tracekit.vocab)
# The same ops on CPU traces, with their in-place spellings, and the CPU libraries' own GEMM ops.
_CPU_GEMM_OPS = OpPattern("cpu-gemm", r"aten::(?:mkldnn_linear\w*|mkldnn_matmul\w*|_mkldnn_\w*)"
                          r"|mkldnn::\w*(?:linear|matmul|mm)\w*|mkl::\w*linear\w*|onednn::\w*(?:linear|matmul)\w*",
                          "oneDNN/MKL GEMM ops")
_HOST_GEMM_OPS = "^(?:(?:" + "|".join(p.pattern for p in GEMM_OPS) + ")_?|" + _CPU_GEMM_OPS.pattern + ")$"
_CONV_OPS = r"^aten::\w*conv"
_ONE_OF = "^(?:{})$".format  # a rule over whole op names, from one of tracekit.vocab's name families
_FUSED_ATTN_OPS = FUSED_ATTENTION_OP_RE  # the ops that open fused-op blocks (tracekit.vocab)
# Linear attention and state-space mixers (tracekit.vocab): recurrent or chunked scans with no softmax over keys.
# Their kernels and ops are 'other' under names of their own, ahead of every fused-attention and GEMM rule: they
# never count as fused attention nor, having no softmax, as an attention core (issue 22).
_SSM_OPS = anchored(*LINEAR_ATTENTION_SSM_OPS)
# flash-linear-attention (fla) gated delta net: the chunked path's kernels and the recurrent (decode) kernel.
_GATED_DELTA_KERNELS = (r"(?:chunk|fused_recurrent)_gated_delta_rule|chunk_scaled_dot_kkt|recompute_w_u_fwd"
                        r"|prepare_wy_repr|chunk_fwd_kernel_o\b|merge_\d+x\d+_to_\d+x\d+_inverse|solve_tril"
                        r"|chunk_local_cumsum|fused_gdn_gating|chunk_kda_|linear_attn_decode")
# Mamba: v1 selective scan (CUDA selective_scan_cuda, its Triton state update) and Mamba-2 SSD (the Triton
# kernels of mamba_ssm.ops.triton.ssd_*: chunk cumsum/state/scan, state passing, the chunked C·Bᵀ product).
_SELECTIVE_SCAN_KERNELS = r"selective_scan|selective_state_update|_selective_scan_update"
_SSD_KERNELS = (r"mamba_?(?:chunk_scan|ssd)|_chunk_(?:scan|state|cumsum)_(?:fwd|bwd)|_state_passing_(?:fwd|bwd)"
                r"|_bmm_chunk_(?:fwd|bwd)|(?<![A-Za-z0-9_])_?ssd_")

DEVICE_RULES: tuple[Rule, ...] = (
    # -- inductor-generated Triton kernels: the prefix decides, the embedded op names do not.
    Rule("inductor-log-softmax", Category.OTHER, _INDUCTOR + r"fused_\w*_log_softmax",
         why="log_softmax (loss) also contains '_softmax'"),
    Rule("inductor-softmax", Category.SOFTMAX, _INDUCTOR + r"fused_\w*_softmax",
         why="inductor names embed the aten ops they fuse; '_softmax' means the softmax itself"),
    Rule("inductor-layout", Category.MEMORY, _INDUCTOR + rf"fused_(?:(?:{_LAYOUT_OPS})_)+\d+$",
         why="every fused op is data movement (clone/transpose/cat/_to_copy/view...); any math token -> elementwise"),
    Rule("inductor-norm", Category.OTHER, _INDUCTOR + r"fused_\w*(?:native_layer_norm|_rms_norm|mean_\w*rsqrt)",
         why="fused RMS/layer norms (mean..rsqrt) are norms, 'other' like ATen's layer_norm kernels"),
    Rule("inductor-pointwise", Category.ELEMENTWISE, _INDUCTOR,
         why="poi/per/red kernels are pointwise/reductions even when they embed "
             "'_scaled_dot_product_flash_attention', 'fmha_v3_fwd', 'sage_attn' or 'addmm'"),
    # -- linear attention and state-space scans: named, 'other', before any fused-attention, GEMM or conv rule.
    Rule("linear-attention-gated-delta", Category.OTHER, _GATED_DELTA_KERNELS, kinds=frozenset({"kernel"}),
         why="gated delta net (Qwen3-Next; fla's chunked and recurrent kernels, Kimi's chunk_kda_*) and MiniMax linear "
             "attention decode: a recurrent state, no softmax over keys, so not fused attention; "
             "chunk_scaled_dot_kkt says 'scaled_dot' but is a chunk's K·Kᵀ"),
    Rule("mamba-selective-scan", Category.OTHER, _SELECTIVE_SCAN_KERNELS, kinds=frozenset({"kernel"}),
         why="Mamba v1 selective scan (selective_scan_fwd_kernel, selective_state_update): a state-space scan"),
    Rule("mamba-ssd", Category.OTHER, _SSD_KERNELS, kinds=frozenset({"kernel"}),
         why="Mamba-2 SSD chunked scan; _bmm_chunk_fwd_kernel is its C·Bᵀ, not an attention GEMM"),
    Rule("causal-conv1d", Category.OTHER, r"causal_conv1d", kinds=frozenset({"kernel"}),
         why="the SSM/linear-attention mixers' short depthwise conv (causal_conv1d_fwd_kernel, _update); "
             "named apart from the conv rule so that the mixer is told from a CNN"),
    Rule("flex-attention", Category.FUSED_ATTENTION, r"flex_(?:attention|decoding)",
         why="FlexAttention compiles to a triton_tem_ template; must precede the template-GEMM rule"),
    Rule("inductor-template-gemm", Category.MATMUL, r"^triton_tem_", why="tem = inductor template, a GEMM unless flex"),
    # -- KV-cache writes contain 'flash'/'mla' but move data.
    Rule("kv-cache-write", Category.MEMORY, r"reshape_and_cache|concat_and_cache|store_kvcache",
         why="vLLM/sglang KV-cache writes; must precede every flash rule"),
    # -- fused attention: before CUTLASS/GEMM and conv ('fprop') rules.
    Rule("fa3-device-kernel", Category.FUSED_ATTENTION, r"cutlass::device_kernel<\s*flash::",
         why="FA3/FA4 kernels are cutlass::device_kernel<flash::...>; must precede the CUTLASS GEMM rule"),
    Rule("flash-attention", Category.FUSED_ATTENTION,
         r"flash_fwd|flash_bwd|FlashAttn|FlashAttention|flash::|pytorch_flash",
         why="FA2 (SDPA flash backend, flash-attn, split-KV + combine helpers)"),
    Rule("fmha", Category.FUSED_ATTENTION, r"[Ff]mha",
         why="xFormers/mem-efficient fmha_cutlassF/B, TRT-LLM fmhaSm100a, aiter::fmha_fwd, mangled ck_tile Fmha"),
    Rule("sdpa-backward-helpers", Category.FUSED_ATTENTION, r"compute_dot_do_o|convert_dq_to_16bits|dot_do_o",
         why="cuDNN SDPA backward's rowsum(dO*O) (compute_dot_do_o_specialized) and dQ cast (convert_dq_to_16bits); "
             "the flash backend's are flash_bwd_dot_do_o/convert_dq (flash rule)"),
    Rule("cudnn-sdpa", Category.FUSED_ATTENTION, r"cudnn_generated_fort_native_sdpa",
         why="SDPA cuDNN backend; its names contain 'fprop'/'bprop' like conv kernels"),
    Rule("paged-unified-attention", Category.FUSED_ATTENTION, r"paged_attention|unified_attention",
         why="vLLM ROCm paged_attention_ll4mi and Triton kernel_unified_attention_2d/3d"),
    Rule("flashinfer", Category.FUSED_ATTENTION, r"(?:Batch|Single)(?:Prefill|Decode)With|BatchMLAPageAttention",
         why="FlashInfer prefill/decode/MLA kernels"),
    Rule("triton-attn-rocm", Category.FUSED_ATTENTION, r"^_?attn_(?:fwd|bwd)",
         why="SDPA flash on ROCm ends in Triton attn_fwd (attn_fwd.kd under rocprofiler-sdk)"),
    Rule("sage-attention", Category.FUSED_ATTENTION, r"sage_(?:fwd|bwd|quant)",
         why="SageAttention; its Q/K quantisation kernel is part of the fused implementation"),
    # -- copies/fills: by kind whoever launched them, then by name, before any elementwise rule.
    Rule("gemm-workspace-memset", Category.MEMORY, launcher=_GEMM_OPS, kinds=_COPIES,
         why="a cuBLAS workspace Memset under aten::addmm/mm (896 in the H100 traces) is a fill, and fills are memory "
             "(README, docs/attribution.md; issue 22): named so that it is not mistaken for GEMM time"),
    Rule("memcpy-memset", Category.MEMORY, kinds=_COPIES,
         why="gpu_memcpy/gpu_memset are data movement whatever op launched them, a conv's workspace fill included"),
    Rule("copy-kernel", Category.MEMORY, r"direct_copy_kernel|_copy_kernel_cuda|copy_device_to_device",
         why="copy_/contiguous/transpose materialisation and dtype casts; names say 'elementwise_kernel'"),
    Rule("cat-kernel", Category.MEMORY, r"CatArrayBatchedCopy", why="torch.cat (KV-cache concat in eager attention)"),
    Rule("layout-transform", Category.MEMORY, r"batched_transpose|nchwToNhwc|nhwcToNchw",
         why="MIOpen transposes and cuDNN layout transforms, even inside a conv"),
    Rule("fill-kernel", Category.MEMORY, r"FillFunctor", why="zeros/fill_; the name says 'elementwise_kernel'"),
    Rule("rocclr-blit", Category.MEMORY, r"__amd_rocclr_(?:copy|fill)Buffer|MEMORY_COPY",
         why="ROCm runtime copies/fills recorded as cat 'kernel'"),
    Rule("index-gather-scatter", Category.MEMORY,
         r"index_copy|index_put|index_kernel_impl|indexSelect|gather_kernel|scatter_gather",
         why="gather/scatter/index_select move data (embedding, rotary cos/sin lookups)"),
    # -- launcher-owned compute.
    Rule("ssm-launcher", Category.OTHER, launcher=_SSM_OPS, kinds=frozenset({"kernel"}),
         why="a kernel launched by a linear-attention/SSM op (vllm::gdn_attention_core, "
             "DaoAILab::_causal_conv1d_fwd_cpp, MambaSplitConv1dScanCombinedFn) is that mixer's, whatever its name: "
             "never fused attention"),
    Rule("fused-attention-launcher", Category.FUSED_ATTENTION, launcher=_FUSED_ATTN_OPS, kinds=frozenset({"kernel"}),
         why="a non-copy kernel launched by a fused attention op is that op's compute, whatever its name"),
    Rule("conv-kernel", Category.OTHER,
         r"fprop|dgrad|wgrad|[Cc]onv(?!er)|[Ii]mplicit_?[Gg]emm|scudnn|winograd|[Ii]m2d?2?[Cc]ol|^igemm_|cask_cudnn",
         why="convolution (implicit GEMM, cutlass__5x_cudnn ...fprop..., MIOpen igemm) is not attention matmul"),
    Rule("conv-launcher", Category.OTHER, launcher=_CONV_OPS, kinds=frozenset({"kernel"}),
         why="sgemm/Cijk GEMMs launched by cudnn/miopen convolution are conv time"),
    Rule("gemm-launcher", Category.MATMUL, launcher=_GEMM_OPS, kinds=frozenset({"kernel"}),
         why="splitKreduce/reduce_1Block/dot_kernel/epilogues launched by a GEMM op are GEMM time"),
    Rule("gemm-kernel", Category.MATMUL,
         r"(?<![Ff][Bb])gemm|gemv|xmma|nvjet|cutlass\w*::Kernel2?<|cutlass::device_kernel<|Cijk_|splitKreduce"
         r"|dot_kernel|^bmm_|kernel_gemm_xdl|wvSplitK|matmul_ogs|cublas",
         why="cuBLAS/CUTLASS/hipBLASLt/CK GEMMs (not fbgemm_gpu embedding ops); precedes reduce: 'splitKreduce'"),
    # -- softmax and its look-alikes.
    Rule("moe-router-softmax", Category.OTHER, r"[Tt]opk\w*[Ss]oft[Mm]ax|[Gg]ating[Ss]oft[Mm]ax|moe\w*[Ss]oftmax",
         why="MoE routers (topkGatingSoftmax, topk_softmax) are not attention softmax"),
    Rule("log-softmax-launcher", Category.OTHER,
         launcher=_ONE_OF(alternation(LOG_SOFTMAX_OPS + LOG_SOFTMAX_BACKWARD_OPS)),
         kinds=frozenset({"kernel"}), why="log_softmax of a loss shares softmax kernels"),
    Rule("log-softmax-kernel", Category.OTHER,
         r"softmax_warp_(?:forward|backward)<(?:[^,<>]+,){4}\s*true\b|LogSoftMax|[Ll]og_?[Ss]oft[Mm]ax",
         why="5th template arg of softmax_warp_* is is_log_softmax; LogSoftMax*Epilogue is log_softmax"),
    Rule("softmax", Category.SOFTMAX, r"[Ss]oft[Mm]ax",
         why="softmax_warp_forward/backward, cunn_SoftMaxForward(Reg)/Backward"),
    # -- the rest of the six-way split: norms, reductions and comm are 'other'; pointwise math is elementwise.
    Rule("norm", Category.OTHER,
         r"[Ll]ayer_?[Nn]orm|[Rr]ms_?[Nn]orm|RMSNorm|[Gg]roup_?[Nn]orm|batch_norm|bn_(?:fw|bw)_|GammaBetaBackward"
         r"|RowwiseMoments",
         why="layer/RMS/group/batch norms are reductions, not attention math"),
    Rule("comm", Category.OTHER,
         r"nccl|rccl|multimem_|cross_device_reduce|[Aa]ll_?[Rr]educe|[Aa]ll_?[Gg]ather|[Rr]educe_?[Ss]catter"
         r"|[Aa]ll_?[Tt]o_?[Aa]ll",
         why="NCCL/RCCL/symmetric-memory communication"),
    Rule("reduce-scan", Category.OTHER, r"reduce_kernel|[Rr]educe|\bcub::|rocprim|DeviceScan|RadixSort",
         why="sum/mean/max reductions and scans; reduce_kernel names embed functors, so before elementwise"),
    Rule("dropout", Category.ELEMENTWISE, r"dropout", why="attention dropout (fused_dropout_kernel_vec)"),
    Rule("elementwise", Category.ELEMENTWISE,
         r"elementwise|Functor|rotary_embedding|act_and_mul|silu_and_mul|gelu_and_mul",
         why="scale (MulFunctor), mask (masked_fill, where, additive add), activations, RoPE"),
)

_H = r"^aten::(?:{})$".format
HOST_RULES: tuple[Rule, ...] = (
    Rule("host-matmul", Category.MATMUL,
         _HOST_GEMM_OPS,
         why="BLAS/oneDNN GEMM ops; anchored so aten::add never matches aten::addmm"),
    Rule("host-softmax", Category.SOFTMAX,
         _ONE_OF(alternation(SOFTMAX_OPS + MASKED_SOFTMAX_OPS + SOFTMAX_BACKWARD_OPS)),
         why="_safe_softmax is the SDPA math path's softmax in newer PyTorch; _masked_softmax is MHA's"),
    Rule("host-log-softmax", Category.OTHER, _ONE_OF(alternation(LOG_SOFTMAX_OPS + LOG_SOFTMAX_BACKWARD_OPS)),
         why="loss, not attention"),
    Rule("host-sdpa-math", Category.OTHER, _H(r"_scaled_dot_product_attention_math\w*"),
         why="the un-fused math path; its bmm/softmax children carry the work"),
    # -- torch.compile on CPU (issue 38): inductor's C++ kernels, named when cpp.enable_kernel_profile records them
    # (graph_1_cpp_fused__softmax_view_0), like its Triton ones: the fused ATen ops say what each computes.
    Rule("host-inductor-cpp-log-softmax", Category.OTHER, rf"^{INDUCTOR_CPP_KERNELS}_log_softmax\w*$",
         why="a loss's log_softmax also contains '_softmax'"),
    Rule("host-inductor-cpp-softmax", Category.SOFTMAX, rf"^{INDUCTOR_CPP_KERNELS}_softmax\w*$",
         why="'_softmax' among the fused ops: the kernel is the attention softmax (exp/max/sum), whatever else it "
             "fuses"),
    Rule("host-inductor-cpp-norm", Category.OTHER,
         rf"^{INDUCTOR_CPP_KERNELS}(?:native_layer_norm|_rms_norm|mean_\w*rsqrt)\w*$",
         why="fused RMS/layer norms are norms, 'other' like their Triton twins"),
    Rule("host-inductor-cpp", Category.ELEMENTWISE, rf"^{INDUCTOR_CPP_KERNELS}$",
         why="inductor's other C++ kernels are pointwise math and reductions over it (scale, mask, RoPE, casts)"),
    Rule("host-compiled-code", Category.OTHER, anchored(COMPILED_REGION_OPS, COMPILED_GRAPH_OPS),
         why="a compiled region's and its graph call's self time is code no event names (dynamo's guards, the C++ "
             "kernels a CPU trace does not record): of unknown kind, so 'other', never guessed into attention math"),
    Rule("host-linear-attention-ssm", Category.OTHER, _SSM_OPS,
         why="linear attention (gated delta net, KDA, lightning) and SSM mixers (Mamba selective scan, SSD, "
             "causal-conv1d): no softmax over keys, so never fused attention; before host-fused-attention, whose "
             "vllm::*attention* pattern would take vllm::gdn_attention_core"),
    Rule("host-fused-attention", Category.FUSED_ATTENTION, _FUSED_ATTN_OPS,
         why="the ops that open fused-op blocks: SDPA and its backends (incl. _for_cpu), flash_attn, FlexAttention,"
             " vLLM/sglang/aiter attention ops"),
    Rule("host-memory", Category.MEMORY,
         _H(r"copy_|contiguous|clone|_to_copy|to|cat|_cat|stack|fill_|zero_|zeros|zeros_like|ones|ones_like|full"
            r"|full_like|new_zeros|new_ones|new_full|empty\w*|new_empty\w*|transpose_?|permute|view|view_as|reshape"
            r"|_reshape_alias|expand|expand_as|as_strided|t|unsqueeze_?|squeeze_?|split|split_with_sizes|chunk"
            r"|unbind|select|slice|narrow|_unsafe_view|flatten|unflatten|resize_|index_select|masked_select|index"
            r"|index_put_|index_copy_?|gather|detach|alias|lift_fresh|repeat|repeat_interleave|flip|roll|pad"
            r"|constant_pad_nd|movedim|swapaxes|unfold|_local_scalar_dense|item"),
         why="layout/data movement and fills; view ops cost only dispatch time on CPU, still not math"),
    Rule("host-elementwise", Category.ELEMENTWISE,
         _H(r"(?:mul|div|add|sub|rsub|masked_fill|where|elu|relu|gelu|silu|sigmoid|tanh|exp|log|neg|sqrt|rsqrt|pow"
            r"|abs|clamp|clamp_min|clamp_max|reciprocal|square|sin|cos|erf|softplus|hardtanh|leaky_relu|mish"
            r"|addcmul|addcdiv|lerp|minimum|maximum|eq|ne|lt|le|gt|ge|logical_and|logical_or|logical_not"
            r"|bitwise_and|bitwise_or|bitwise_not|tril|triu|bernoulli|threshold|floor_divide|remainder)_?"
            r"|dropout|native_dropout|feature_dropout|alpha_dropout"),
         why="scale, mask, dropout, activations and other pointwise math"),
    Rule("host-reduction-norm", Category.OTHER,
         _H(r"sum|mean|cumsum|cumprod|amax|amin|max|min|argmax|argmin|var|std|var_mean|norm|linalg_vector_norm"
            r"|layer_norm|native_layer_norm|rms_norm|_fused_rms_norm|group_norm|native_group_norm|batch_norm"
            r"|native_batch_norm|_batch_norm_impl_index|topk|sort"),
         why="reductions and norms are 'other', as their device kernels are"),
)


# The children that show an attention op ran unfused: its products and softmax are ops of their own.
_UNFUSED_CORE = r"^aten::(?:matmul|bmm|baddbmm|_?softmax|_safe_softmax|_masked_softmax)$"
HOST_CHILD_RULES: tuple[ChildRule, ...] = (
    ChildRule("host-sdpa-math-dispatch", Category.OTHER, r"^aten::scaled_dot_product_attention$",
              r"^aten::_scaled_dot_product_attention_math\w*$",
              why="on the math path no fused kernel runs: the public op's own time is backend selection and "
                  "argument checks, dispatch overhead like its _scaled_dot_product_attention_math child's (other); "
                  "the bmm/softmax below carry the attention. Under a fused backend (_flash_attention_for_cpu, "
                  "_efficient, _cudnn) it stays fused_attention (host-fused-attention)"),
    ChildRule("host-flex-eager-wrapper", Category.OTHER, r"^FlexAttentionAutogradOp$", _UNFUSED_CORE,
              why="eager (uncompiled) FlexAttention runs its reference implementation under this autograd op: the "
                  "matmul/bmm and softmax children carry the attention, and the op's own time is Python glue around "
                  "them (mask and score_mod calls, layout), not a fused kernel"),
    ChildRule("host-mha-math-fallback", Category.OTHER, r"^aten::_native_multi_head_attention$", _UNFUSED_CORE,
              why="nn.MultiheadAttention's fast path falls back to math on CPU: bmm, (_masked_)softmax and bmm run "
                  "under it as ops of their own, so its own time is the dispatch and layout glue between them; with a "
                  "fused SDPA child instead it stays fused_attention (host-fused-attention)"),
)


def _compile(pattern: str | None) -> re.Pattern[str] | None:
    return re.compile(pattern) if pattern is not None else None


class Classifier:
    """Compiles the rules once and caches one answer per distinct (name, kind, launcher)."""

    __slots__ = ("_device", "_host", "_child", "_dcache", "_hcache", "_pcache")

    def __init__(self, device_rules: Sequence[Rule] = DEVICE_RULES, host_rules: Sequence[Rule] = HOST_RULES,
                 child_rules: Sequence[ChildRule] = HOST_CHILD_RULES) -> None:
        for rules in (device_rules, host_rules, child_rules):
            names = [r.name for r in rules]
            if len(names) != len(set(names)):
                raise ValueError(f"duplicate rule names: {sorted({n for n in names if names.count(n) > 1})}")
        self._device = tuple((r, _compile(r.kernel), _compile(r.launcher)) for r in device_rules)
        self._host = tuple((r, _compile(r.kernel)) for r in host_rules)
        self._child = tuple((r, re.compile(r.op), re.compile(r.child)) for r in child_rules)
        self._dcache: dict[tuple[str, str, str | None], Rule | None] = {}
        self._hcache: dict[str, Category] = {}
        self._pcache: dict[str, bool] = {}

    def device_rule(self, name: str, kind: str, launcher: str | None) -> Rule | None:
        """The first rule matching this device event, or None (category 'other')."""
        key = (name, kind, launcher)
        try:
            return self._dcache[key]
        except KeyError:
            pass
        if kind not in DEVICE_KINDS:
            raise ValueError(f"device event kind must be one of {sorted(DEVICE_KINDS)}, got {kind!r}")
        hit = None
        for rule, kpat, lpat in self._device:
            if kind not in rule.kinds:
                continue
            if lpat is not None and (launcher is None or lpat.search(launcher) is None):
                continue
            if kpat is not None and kpat.search(name) is None:
                continue
            hit = rule
            break
        self._dcache[key] = hit
        return hit

    def device(self, name: str, kind: str, launcher: str | None) -> Category:
        """Category of a kernel/memcpy/memset; ``launcher`` is the innermost host op that launched it."""
        rule = self.device_rule(name, kind, launcher)
        return rule.category if rule is not None else Category.OTHER

    def host_rule(self, op_name: str) -> Rule | None:
        """The first host rule matching this cpu op name, or None (category 'other')."""
        for rule, pat in self._host:
            if pat is None or pat.search(op_name) is not None:
                return rule
        return None

    def host(self, op_name: str) -> Category:
        """Category of a host op's SELF time on CPU-only traces (keyed on the op name only)."""
        try:
            return self._hcache[op_name]
        except KeyError:
            rule = self.host_rule(op_name)
            cat = self._hcache[op_name] = rule.category if rule is not None else Category.OTHER
            return cat

    def has_child_rules(self, op_name: str) -> bool:
        """True when some HOST_CHILD_RULES entry may decide this op's category (its children must be looked at)."""
        try:
            return self._pcache[op_name]
        except KeyError:
            hit = self._pcache[op_name] = any(op.search(op_name) is not None for _, op, _ in self._child)
            return hit

    def host_child_rule(self, op_name: str, child_name: str) -> ChildRule | None:
        """The first child rule for this op that this child op fires, or None (HOST_RULES decide)."""
        for rule, op, child in self._child:
            if op.search(op_name) is not None and child.search(child_name) is not None:
                return rule
        return None
