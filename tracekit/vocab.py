"""tracekit's one vocabulary: the closed sets every stage shares, and the attention op names.

Block finding (:mod:`tracekit.analysis.blocks`) and classification (:mod:`tracekit.analysis.classify`) both read the
op patterns here, so an op that opens a ``fused-op`` block is always the op whose kernels and host
time count as ``fused_attention`` (docs/attribution.md, "Attention blocks" and "Categories").
The closed sets are ``StrEnum``s: members compare and serialise as their plain string values, so
the JSON and CSV outputs are the strings of docs/attribution.md.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import lru_cache

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10
    from enum import Enum

    class StrEnum(str, Enum):
        """``enum.StrEnum`` as Python 3.11 defines it: ``str()`` and ``format()`` give the value."""

        __str__ = str.__str__
        __format__ = str.__format__


class Category(StrEnum):
    """The six-way split of attention time, in report order."""

    MATMUL = "matmul"
    SOFTMAX = "softmax"
    FUSED_ATTENTION = "fused_attention"
    MEMORY = "memory"
    ELEMENTWISE = "elementwise"
    OTHER = "other"


# Plain strings, not members: orjson refuses str subclasses as dict keys, and category dicts are keyed by these.
CATEGORIES: tuple[str, ...] = tuple(c.value for c in Category)


class Phase(StrEnum):
    FORWARD = "forward"
    BACKWARD = "backward"


class FoundBy(StrEnum):
    """How a block was found, in the order the finder tries (docs/attribution.md, "Attention blocks")."""

    ANNOTATION = "annotation"
    MODULE = "module"
    FUSED_OP = "fused-op"
    INFERRED = "inferred"
    FUSED_KERNEL = "fused-kernel"


class CoreKind(StrEnum):
    """What makes a block attention: the core its evidence names (docs/attribution.md, "Attention blocks").
    A host interval or kernel run with none of these is never a block."""

    FUSED_OP = "fused-op"  # a fused attention host op (SDPA and its backends, flash_attn, vLLM/aiter ops)
    FUSED_KERNEL = "fused-kernel"  # a kernel the classifier calls fused attention (flash, fmha, paged, sage…)
    EAGER_OPS = "score-softmax-context"  # a score product, its softmax and the context product (host ops)
    EAGER_KERNELS = "gemm-softmax-gemm"  # the same three as kernels, when no host op shows them
    PRODUCTS = "products-no-softmax"  # linear attention: a scope's own products (φ(K)ᵀV, φ(Q)·KV), no softmax
    # torch.compile code inside an attention scope, no op naming the call: what it shows of it (flex kernels,
    # an inductor softmax kernel, batched products), else the region's own name (issue 38)
    COMPILED_REGION = "compiled-region"


class TimeBase(StrEnum):
    """What a figure measures: device busy time (GPU traces), host self time (CPU-only), or both (a folder)."""

    DEVICE = "device"
    HOST = "host"
    MIXED = "mixed"


class Basis(StrEnum):
    """Which figures a diff's headline compares (docs/attribution.md, "Diff")."""

    MEDIAN_STEP = "median_step"
    TOTAL = "total"


class PairedBy(StrEnum):
    """Which rule of the diff paired two blocks (docs/attribution.md, "Diff", "Pairing")."""

    KIND = "kind"  # same kind, same rank of that kind in the step
    FUSED_KERNEL = "fused-kernel"  # the fallback: unpaired fused-kernel blocks by position (their names changed)


class UnlinkedReason(StrEnum):
    """Why a device event is tied to no host op (docs/attribution.md, "Linking", step 4), in report order.
    The linker's ordered rules (tracekit.analysis.link.UNLINKED_RULES) give each unlinked event one."""

    BEFORE_TRACE = "before_trace"  # launched before the profiler's window opened
    GRAPH_REPLAY = "graph_replay"  # replayed from a CUDA/HIP graph whose launch call is not in the trace
    NO_CORRELATION = "no_correlation"  # the event carries no correlation id
    OTHER_PROCESS = "other_process"  # launched from a process, thread or stream the trace did not record
    OTHER = "other"


# Plain strings in report order, like CATEGORIES: the keys of every ``unlinked_by_reason`` dict.
UNLINKED_REASONS: tuple[str, ...] = tuple(r.value for r in UnlinkedReason)


class GraphMode(StrEnum):
    """What a trace shows of CUDA/HIP graphs (tracekit.analysis.graphs; docs/attribution.md, "Graphs")."""

    EAGER = "eager"  # no capture, no graph launch
    CAPTURE_ONLY = "capture-only"  # graphs were recorded, none replayed: the captured launches ran nothing
    REPLAY = "replay"  # graphs replayed, attention among their kernels or none launched outside them
    CAPTURE_REPLAY = "capture+replay"  # a capture and graph launches in one file
    MIXED = "mixed"  # graphs replayed and attention launched eagerly beside them (piecewise graphs)


class Compared(StrEnum):
    """What the CI gate compares (``--gate-on``): device busy time, the profiled span, or the latency measured
    outside the profiler. Without a choice: latency where both sides have it, else busy time, and no verdict
    (exit 5, inconclusive) when either side is launch-bound (docs/attribution.md, "The CI gate")."""

    BUSY = "busy"
    SPAN = "span"
    LATENCY = "latency"


class SpeedupBasis(StrEnum):
    """What a sweep's speedup over its baseline divides: latency measured outside the profiler (both runs have
    a measured.json), or the attention blocks' profiled span per step (inflated by the profiler's own launch
    overhead: labelled "profiled", and marked where either run is launch-bound)."""

    MEASURED = "measured"
    PROFILED = "profiled span"


# The launch-bound rule, the one definition everything imports (blocks, totals, ranks, diff sides, hints, the
# gate): the device idles more than this share of the blocks' span, so busy time is not what the user waits for.
LAUNCH_BOUND_IDLE_SHARE = 0.5


def is_launch_bound(idle_us: float, span_us: float) -> bool:
    """Idle for more than LAUNCH_BOUND_IDLE_SHARE of the span (``2·idle > span``)."""
    return idle_us > LAUNCH_BOUND_IDLE_SHARE * span_us


def launch_bound_holds(flag: bool | None, idle_us: float, span_us: float, near_us: float) -> bool:
    """A result's ``launch_bound`` follows the rule, or the figures sit within ``near_us`` of its boundary,
    where ns rounding of summed figures may tip it either way (the results' check())."""
    boundary = LAUNCH_BOUND_IDLE_SHARE * span_us
    return flag == (idle_us > boundary) or abs(idle_us - boundary) <= near_us


class RankFrom(StrEnum):
    """Where a folder's rank numbers came from (tracekit.results.ranks): each trace's ``distributedInfo.rank``,
    a ``rank<N>``/``_<N>.`` in its path, or, when neither numbers every file once, the file order."""

    TRACE = "distributedInfo"
    PATH = "path"
    ORDER = "file order"


# How every format names a time base (headers, share lines, diff warnings).
TIME_BASE_LABELS: dict[str, str] = {
    TimeBase.DEVICE: "device busy time",
    TimeBase.HOST: "host self time",
    TimeBase.MIXED: "mixed time bases",
}


@dataclass(frozen=True, slots=True)
class OpPattern:
    """One family of host op names: an anchored ``re`` pattern over the whole op name, and the fact behind it."""

    name: str
    pattern: str
    why: str = ""


# Ops that are one whole attention call: each opens a ``fused-op`` block when outside any scope, and
# its kernels (as launcher) and host self time are ``fused_attention``. Names from the real traces and the
# libraries' op registrations; tests/test_vocab.py holds them.
FUSED_ATTENTION_OPS: tuple[OpPattern, ...] = (
    OpPattern("sdpa", r"aten::scaled_dot_product_attention",
              "the public SDPA op; the backend op below it does the work"),
    OpPattern("sdpa-backend",
              r"aten::_scaled_dot_product_(?:flash|efficient|cudnn|fused)_attention\w*",
              "SDPA backends and their _backward, _for_cpu and _overrideable variants; not _attention_math, "
              "the un-fused path whose bmm/softmax children carry the work"),
    OpPattern("aten-fused-kernel-op", r"aten::_(?:flash|efficient|cudnn)_attention_(?:forward|backward)",
              "the ops under the SDPA backends that launch the flash/mem-efficient/cuDNN kernels"),
    OpPattern("native-mha", r"aten::_native_multi_head_attention", "nn.MultiheadAttention's fast path"),
    OpPattern("flex-attention",
              r"(?:aten::_?flex_attention|higher_order::flex_attention|flex_attention)\w*|FlexAttentionAutogradOp",
              "FlexAttention, eager or compiled, forward and backward; eager PyTorch records FlexAttentionAutogradOp "
              "around its unfused reference (bmm, softmax: their own categories)"),
    OpPattern("flash-attn", r"flash_attn(?:_\w+)?::\w+",
              "the flash-attn package (FA2 flash_attn::, FA3 flash_attn_3::)"),
    OpPattern("vllm-attention", r"vllm::(?!\w*cache)(?!(?:gdn|kda|linear)_attention)\w*attention\w*",
              "vllm::unified_attention(_with_output), vllm::mla_attention; never the KV-cache writes, nor the linear "
              "attentions vllm::gdn_attention(_core), kda_attention, linear_attention (LINEAR_ATTENTION_SSM_OPS)"),
    OpPattern("aiter-mha", r"aiter::f?mha\w*", "ROCm aiter mha_fwd/mha_batch_prefill/fmha_v3_fwd"),
    OpPattern("sglang-attention", r"sglang\w*::(?!\w*cache)\w*(?:mha|attention)\w*",
              "sglang::extend_attention, sglang_profiler::mha__mha_batch_prefill_N"),
)

# Linear attention and state-space mixers: a recurrent state updated token by token (or chunk by chunk), no
# softmax over keys. They are not attention cores: never ``fused_attention``, never a ``fused-op`` block (the
# vllm-attention pattern above leaves them out); classification files them and their kernels as ``other`` under
# their own rule names (tracekit.analysis.classify). Names from vLLM's custom-op registrations, the mamba_ssm /
# causal-conv1d / flash-linear-attention autograd Functions and TraceLens' SSM category.
LINEAR_ATTENTION_SSM_OPS: tuple[OpPattern, ...] = (
    OpPattern("linear-attention-op",
              r"vllm::(?:gdn|kda|linear)_attention\w*|aiter::linear_attention\w*"
              r"|(?:Chunk|FusedRecurrent)GatedDeltaRuleFunction\w*|(?:chunk|fused_recurrent)_gated_delta_rule\w*",
              "gated delta net (Qwen3-Next vllm::gdn_attention_core, fla's chunk/fused_recurrent_gated_delta_rule), "
              "Kimi delta attention (vllm::kda_attention), MiniMax lightning (vllm::linear_attention)"),
    OpPattern("ssm-op",
              r"vllm::\w*mamba_mixer2?|SelectiveScanFn\w*|MambaInnerFn\w*|MambaSplitConv1dScanCombinedFn\w*"
              r"|MambaChunkScanCombinedFn\w*|\w*selective_scan\w*|mamba_chunk_scan\w*|\w*mamba_ssd\w*",
              "Mamba v1 selective scan and Mamba-2 SSD: vllm::mamba_mixer(2), mamba_ssm's autograd Functions "
              "and their ...Backward"),
    OpPattern("causal-conv1d-op", r"DaoAILab::_?causal_conv1d\w*|CausalConv1dFn\w*|causal_conv1d\w*",
              "the mixers' short causal depthwise conv (causal-conv1d's DaoAILab::_causal_conv1d_fwd_cpp, "
              "update, bwd)"),
)

# The one vocabulary of matrix-product ops, by family. Each user takes the families it needs: classification
# (every family), matmul roles, FLOPs and hints (the shaped ones), eager block inference (the products).
LINEAR_OPS = OpPattern("linear", r"aten::(?:linear|addmm|_addmm_activation)",
                       "linear layers: the weight is a 2-D matrix (addmm is linear's kernel-level op)")
PRODUCT_OPS = OpPattern("product", r"aten::(?:mm|bmm|baddbmm|addbmm|matmul)",
                        "matrix products, batched or not: the QKᵀ and PV of eager attention among them")
EINSUM_OPS = OpPattern("einsum", r"aten::einsum", "a product written as an equation (its scalars say which)")
LOW_PRECISION_GEMM_OPS = OpPattern("low-precision-gemm", r"aten::(?:_scaled_mm|_int_mm)", "fp8 and int8 GEMMs")
VECTOR_PRODUCT_OPS = OpPattern("vector-product", r"aten::(?:addmv|mv|dot|vdot|tensordot)",
                               "matrix-vector and dot products: matmul time, no shape rule")
GROUPED_GEMM_OPS = OpPattern("grouped-gemm", r"aten::(?:_grouped_mm|_scaled_grouped_mm)", "MoE experts' grouped GEMMs")
QUANTIZED_LINEAR_OPS = OpPattern("quantized-linear", r"quantized::linear\w*", "int8 linear layers (eager quantisation)")
# The feed-forward half of a transformer layer, by op family: an attention layer (tracekit.analysis.blocks.layer)
# never holds one of these, so the layer search stops below the scope that does.
MOE_OPS = OpPattern("moe", r"(?:\w+::)?\w*(?:fused_moe|moe_align|moe_sum|moe_forward|topk_softmax|topk_sigmoid"
                           r"|fused_experts|grouped_topk)\w*",
                    "a MoE router's top-k gating and the experts' fused kernels-ops (vLLM/SGLang fused_moe, "
                    "_moe_C::topk_softmax; the same router names classify.py's moe-router-softmax rule reads)")
MLP_ACTIVATION_OPS = OpPattern("mlp-activation", r"aten::(?:gelu|silu|relu|mish|glu)_?"
                                                 r"|(?:\w+::)?\w*(?:silu|gelu|gelu_tanh|act)_and_mul\w*"
                                                 r"|(?:triton|cpp)_\w*fused_\w*?(?:silu|gelu|relu|mish)\w*",
                               "the MLP's activation between its two GEMMs (BERT's gelu, Llama's silu, vLLM/SGLang "
                               "silu_and_mul, inductor's triton_poi_fused_..._silu_2 launch op in a compiled "
                               "graph); softmax attention applies none")
FEED_FORWARD_OPS: tuple[OpPattern, ...] = (GROUPED_GEMM_OPS, MOE_OPS, MLP_ACTIVATION_OPS)
# The ops whose recorded shapes give a FLOP count and a matmul role (SHAPED_OPS keeps their inputs).
SHAPED_GEMM_OPS: tuple[OpPattern, ...] = (LINEAR_OPS, PRODUCT_OPS, EINSUM_OPS, LOW_PRECISION_GEMM_OPS)
GEMM_OPS: tuple[OpPattern, ...] = (*SHAPED_GEMM_OPS, VECTOR_PRODUCT_OPS, GROUPED_GEMM_OPS, QUANTIZED_LINEAR_OPS)
# Composite ops that launch no kernel themselves: the product's FLOPs are counted at the op below them.
COMPOSITE_GEMM_OPS = frozenset({"aten::matmul", "aten::linear", "aten::einsum"})

# The eager pattern (matmul → softmax → matmul under one parent) that infers a block.
EAGER_MATMUL_OPS = OpPattern("eager-matmul", f"{PRODUCT_OPS.pattern}|{EINSUM_OPS.pattern}",
                             "the QKᵀ and PV products of eager attention")

# torch.compile (issue 38). Dynamo records one ``Torch-Compiled Region: F/G`` per call of a compiled frame, and
# inductor's graph call (``## Call CompiledFxGraph <hash> ##``) inside it runs the generated kernels: on GPU they
# are device events like any other; on CPU they are C++ functions the profiler does not record (unless inductor's
# ``cpp.enable_kernel_profile`` names each one, ``graph_<n>_cpp_fused_<ops>_<k>``), so the call's self time is all
# the trace shows of them. Extern kernels (aten::mm, aten::bmm, the SDPA ops) stay visible ops inside it.
COMPILED_REGION_OPS = OpPattern("compiled-region", r"Torch-Compiled Region(?::\s*\S+)?",
                                "dynamo's range around one call of a compiled frame")
COMPILED_GRAPH_OPS = OpPattern("compiled-graph-call", r"## Call CompiledFxGraph[^#]*##",
                               "inductor's call of its generated code: its self time is the kernels no event shows")
INDUCTOR_CPP_KERNELS = r"(?:graph_\d+_)?cpp_fused_\w*"  # inductor's C++ kernels, named after the ATen ops they fuse
BATCHED_PRODUCT_OPS = OpPattern("batched-product", r"aten::(?:bmm|baddbmm)",
                                "batched products: compiled attention's QKᵀ and PV run as extern bmm calls (one batch "
                                "per head), where the projections are 2-D mm")

# The one softmax vocabulary (issue 36): every softmax op name tracekit reads, by family. Each user builds its
# pattern or set from these tuples; where a user takes other families than the attention softmax, the
# combination is named below with its reason. Names are PyTorch's ``aten`` registrations.
SOFTMAX_OPS: tuple[str, ...] = ("aten::softmax", "aten::_softmax", "aten::_safe_softmax")
"""The attention softmax, forward: ``_safe_softmax`` is the SDPA math path's softmax in newer PyTorch."""
MASKED_SOFTMAX_OPS: tuple[str, ...] = ("aten::_masked_softmax",)
"""``nn.MultiheadAttention``'s softmax with its mask folded in: softmax time, but no eager-pattern member."""
SOFTMAX_BACKWARD_OPS: tuple[str, ...] = ("aten::_softmax_backward_data",)
"""The softmax's backward: softmax time, but its inputs are gradients (no forward cost formula, no pattern)."""
LOG_SOFTMAX_OPS: tuple[str, ...] = ("aten::log_softmax", "aten::_log_softmax")
"""A loss's log_softmax: never attention, but the same kernels and the same per-element cost."""
LOG_SOFTMAX_BACKWARD_OPS: tuple[str, ...] = ("aten::_log_softmax_backward_data",)
"""log_softmax's backward: a loss's, never attention."""
CALLED_SOFTMAX_OPS: tuple[str, ...] = SOFTMAX_OPS[:2]
"""The softmax ops a model calls itself, for the recorded problem sizes (io's shape list, compare's attention
sizes): ``_safe_softmax`` runs only inside SDPA's math path, whose SDPA op those lists already record."""


def alternation(names: tuple[str, ...]) -> str:
    """``a|b|…``: op names as one regex alternation (names escaped), to build an OpPattern or a rule from."""
    return "|".join(re.escape(n) for n in names)


EAGER_SOFTMAX_OPS = OpPattern("eager-softmax", alternation(SOFTMAX_OPS),
                              "_safe_softmax is the SDPA math path's softmax in newer PyTorch")


def anchored(*patterns: OpPattern) -> str:
    """One ``^(?:a|b|…)$`` pattern matching any of the families."""
    return "^(?:" + "|".join(p.pattern for p in patterns) + ")$"


FUSED_ATTENTION_OP_RE: str = anchored(*FUSED_ATTENTION_OPS)
_FUSED = re.compile(FUSED_ATTENTION_OP_RE)


@lru_cache(maxsize=4096)
def is_fused_attention_op(name: str) -> bool:
    """True when this host op computes a whole attention call (opens a ``fused-op`` block)."""
    return _FUSED.match(name) is not None


# Backward ops of the attention families above (``aten::_scaled_dot_product_cudnn_attention_backward``,
# ``aten::_flash_attention_backward``, ``flash_attn::_flash_attn_backward``, ``aiter::mha_bwd``,
# ``flex_attention_backward``): they are fused attention, but never open a forward block; they join the
# backward block of the forward op autograd recorded them for (docs/attribution.md, "Backward blocks").
BACKWARD_OP = OpPattern("backward-op", r".*(?:[Bb]ackward|_bwd)\w*", "an op whose name says it is a backward pass")
_BACKWARD = re.compile(anchored(BACKWARD_OP))


@lru_cache(maxsize=4096)
def is_backward_op(name: str) -> bool:
    """True for a backward op name (``…_backward``, ``…_bwd``, ``…Backward0``)."""
    return _BACKWARD.match(name) is not None


@lru_cache(maxsize=4096)
def opens_fused_block(name: str) -> bool:
    """A fused attention op that opens a forward ``fused-op`` block: never its backward op."""
    return is_fused_attention_op(name) and not is_backward_op(name)


@dataclass(frozen=True, slots=True)
class KernelLabel:
    """How a ``fused-kernel`` block (graph replay, compiled code) is named: the op its kernel computes.

    ``pattern`` is searched in the kernel name; the first label that matches wins, in order. ``name`` None
    keeps the kernel's own short name (already the op's, e.g. ``kernel_unified_attention_2d``). ``phase``
    is the pass the kernel belongs to, which the kernel name alone has to tell: there is no host op.
    """

    name: str | None
    pattern: str
    phase: Phase


KERNEL_LABELS: tuple[KernelLabel, ...] = (
    KernelLabel("cudnn sdpa fprop", r"cudnn_generated_fort_native_sdpa\w*fprop", Phase.FORWARD),
    KernelLabel("cudnn sdpa bprop", r"cudnn_generated_fort_native_sdpa\w*bprop", Phase.BACKWARD),
    KernelLabel("cudnn sdpa bprop", r"compute_dot_do_o|convert_dq_to_16bits", Phase.BACKWARD),
    KernelLabel(None, r"aiter::f?mha\w*bwd|fmha_v3_bwd|^_?attn_bwd|sage_bwd|flex_attention_backward", Phase.BACKWARD),
    KernelLabel(None, r"aiter::|fmha_v3|^_?attn_fwd|sage_|flex_|paged_attention|unified_attention"
                      r"|(?:Batch|Single)(?:Prefill|Decode)With|BatchMLAPageAttention", Phase.FORWARD),
    KernelLabel("flash attention bwd", r"flash_bwd|flash::\w*[Bb]wd|FlashAttn\w*Bwd", Phase.BACKWARD),
    KernelLabel("flash attention fwd", r"flash_fwd|flash::|FlashAttn|FlashAttention|pytorch_flash", Phase.FORWARD),
    KernelLabel("mem-efficient attention bwd", r"fmha_cutlassB|fmha\w*(?:bwd|dgrad|backward)", Phase.BACKWARD),
    KernelLabel("mem-efficient attention fwd", r"fmha_cutlassF|[Ff]mha", Phase.FORWARD),
)
_KERNEL_LABELS = tuple((lab, re.compile(lab.pattern)) for lab in KERNEL_LABELS)


@lru_cache(maxsize=1024)
def kernel_label(kernel: str) -> KernelLabel | None:
    """The first :data:`KERNEL_LABELS` entry whose pattern the kernel name contains, or None."""
    for lab, pat in _KERNEL_LABELS:
        if pat.search(kernel) is not None:
            return lab
    return None


# Ops whose recorded inputs (``Input Dims``, ``Input type``, ``Concrete Inputs``) the loader keeps: what
# FLOP/byte counts and matmul roles read. Everything else is dropped at parse time to keep memory bounded.
SHAPED_OPS: tuple[OpPattern, ...] = (
    OpPattern("gemm", "|".join(p.pattern for p in SHAPED_GEMM_OPS),
              "matrix products: FLOPs and the projection/score/context role"),
    *FUSED_ATTENTION_OPS,
    OpPattern("serving-attention-shapes", r"aiter::paged_attention\w*|triton_tem_fused_flex_attention\w*|"
                                          r"flashinfer::(?:batch|single)_prefill\w*|_vllm_fa[23]_C::\w*fwd",
              "issue 44: attention ops that open no block of their own but whose inputs say what the call counts "
              "(aiter's paged decode; inductor's flex-attention template, whose block mask is not recorded; "
              "FlashInfer's prefill runs; vLLM's FlashAttention builds under vllm::unified_attention)"),
    OpPattern("softmax", f"(?:{alternation(SOFTMAX_OPS + LOG_SOFTMAX_OPS)})\\w*",
              "softmax and log_softmax, with any suffix (their _backward_data too): the FLOP/byte rules read them"),
    OpPattern("elementwise", r"aten::(?:add|sub|mul|div|masked_fill|where|gelu|silu|relu|tanh|exp|neg|rsqrt|"
                             r"dropout|native_dropout|pow|sigmoid|clamp)_?", "pointwise ops: bytes moved"),
    OpPattern("copy", r"aten::(?:copy_|clone|cat|stack|index_copy_?|repeat_interleave|"
                      r"expand_as|fill_|zero_|zeros|ones|full|masked_scatter_?|index_put_?)",
              "copies and fills: bytes (not _to_copy/contiguous: the copy_ under them launches the kernel and "
              "has the same shapes)"),
)
_SHAPED = re.compile(anchored(*SHAPED_OPS))


def keeps_shapes(name: str) -> bool:
    """True for the ops whose recorded input shapes/types the analysis reads (see SHAPED_OPS)."""
    return _SHAPED.match(name) is not None


class MatmulRole(StrEnum):
    """What a ``matmul`` is for inside attention (docs/attribution.md, "Matmul roles"): the sub-split of ``matmul``."""

    PROJECTION = "projection"  # q/k/v/out linear layers, fused qkv
    SCORE = "score"  # Q·Kᵀ
    CONTEXT = "context"  # P·V
    OTHER = "matmul-other"  # no name or shape evidence, or evidence for none of the three


# Plain strings in report order, like CATEGORIES: the keys of every ``matmul_roles`` dict.
MATMUL_ROLES: tuple[str, ...] = tuple(r.value for r in MatmulRole)


# Serving attention ops that are no fused-attention op of their own (they run under one) but whose count reads
# their scalars: FlashInfer's mask_mode/layout/window_left, vLLM FlashAttention's max_seqlen/is_causal/window.
SERVING_SCALAR_OPS = OpPattern("serving-attention-scalars",
                               r"flashinfer::(?:batch|single)_prefill\w*|_vllm_fa[23]_C::\w*fwd",
                               "issue 44: their Concrete Inputs say the mask and the lengths a call counts")
_SERVING_SCALARS = re.compile(anchored(SERVING_SCALAR_OPS))


def keeps_scalars(name: str) -> bool:
    """Ops whose ``Concrete Inputs`` the analysis reads: attention's is_causal, cat's dim, einsum's equation.
    The other ops' scalars are not kept (copying them for every op cost about 2% of a 1 GB load)."""
    return name in ("aten::cat", "aten::einsum") or is_fused_attention_op(name) or \
        _SERVING_SCALARS.match(name) is not None


@lru_cache(maxsize=1 << 16)  # per distinct kernel name: called per device event
def compact_kernel_name(name: str) -> str:
    """Drop the noise that every CUDA kernel name carries, keep what tells kernels apart."""
    n = name[5:] if name.startswith("void ") else name
    return n.replace("(anonymous namespace)::", "").replace("at::native::", "")


class IdleCause(StrEnum):
    """Why a block's device idled inside its span (docs/attribution.md, "Idle by cause"; tracekit.analysis.idle), in
    report order. Each idle instant has one, given by the first of tracekit.analysis.idle.IDLE_RULES that explains
    it: before the launch call of the kernel that ends its gap the host was late (sync, launch); from that call on
    the launch was issued (elsewhere, event_wait, queued); in the span's tail the host was still in the block (sync,
    elsewhere, host_op). ``other`` is only what no rule explains."""

    LAUNCH = "launch"  # waiting for the host to issue the launch of the kernel that ended the gap
    SYNC = "sync"  # waiting so, while the launching thread was held in a sync or a blocking copy
    ELSEWHERE = "elsewhere"  # the device ran work outside the block meanwhile (another stream, or queued before)
    EVENT_WAIT = "event_wait"  # a device-side wait (cudaStreamWaitEvent) queued just before the kernel's launch
    QUEUED = "queued"  # the launch was issued, the device had nothing else to run: launch latency, kernel overhead
    HOST_OP = "host_op"  # the span's tail: the block's host op still ran and launched nothing more
    OTHER = "other"  # what no rule explains: a gap whose kernel has no launch call in the trace


# Plain strings in report order, like CATEGORIES: the keys of every ``idle_by_cause`` dict.
IDLE_CAUSES: tuple[str, ...] = tuple(c.value for c in IdleCause)

# The ``cat`` of the events ``tracekit annotate`` adds to a trace copy (tracekit/annotation.py): the reader skips them
# (tracekit.io.builder), so the annotated copy attributes exactly like the original.
ANNOTATE_CAT = "tracekit"


class LaneKind(StrEnum):
    """A lane of the report's timeline (tracekit.results.timeline)."""

    HOST = "host"  # a host thread that ran a block's host op
    STREAM = "stream"  # a device stream that ran a block's kernels


class StepChoice(StrEnum):
    """How the report's timeline chose the step it draws."""

    MEDIAN = "median"  # the default: the step of median span among those with attention blocks
    REQUESTED = "requested"  # the step asked for (``tracekit report --step N``)
    ALL = "all"  # the trace has no steps: every block


# -- groupings: the ways blocks are summed into rows (tracekit.results.rows sums them) ---------------------------
class Grouping(StrEnum):
    """The rows a table (``--by``) or a DataFrame (``to_dataframe(by=)``) sums blocks into."""

    KIND = "kind"
    BLOCK = "block"
    LAYER = "layer"
    STEP = "step"
    RUN = "run"
    RANK = "rank"
    KERNEL = "kernel"
    OP = "op"
    STAGE = "stage"


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupingRule:
    """One way to group blocks: in tables (``--by``), in DataFrames (``to_dataframe(by=)``), or both."""

    grouping: Grouping
    table: bool
    frame: bool
    why: str


GROUPINGS: tuple[GroupingRule, ...] = (
    GroupingRule(grouping=Grouping.KIND, table=True, frame=True,
                 why="instance numbers folded: layer3.attention and layer4.attention are one row"),
    GroupingRule(grouping=Grouping.BLOCK, table=True, frame=True, why="every block, by step and ordinal"),
    GroupingRule(grouping=Grouping.LAYER, table=True, frame=True, why="one row per block name over its steps"),
    GroupingRule(grouping=Grouping.STEP, table=True, frame=True,
                 why="one row per ProfilerStep: the step-to-step spread"),
    GroupingRule(grouping=Grouping.RUN, table=True, frame=True,
                 why="a folder of runs (a sweep): blocks' source is their run (tracekit.run.runs)"),
    GroupingRule(grouping=Grouping.RANK, table=True, frame=False,
                 why="a folder of ranks: one row per rank and their spread, the straggler view"),
    GroupingRule(grouping=Grouping.KERNEL, table=True, frame=True,
                 why="every kernel the blocks own, by time: the kernel table every result carries (issue 42)"),
    GroupingRule(grouping=Grouping.OP, table=True, frame=True,
                 why="each counted op call shape on its own roofline (TFLOP/s, GB/s, % of roof, bound), as TraceLens's "
                     "GEMM/SDPA tables: a block's pooled figure hides fast GEMMs beside slow vector work; computed "
                     "only when asked (analyze(by='op'), --by op)"),
    GroupingRule(grouping=Grouping.STAGE, table=True, frame=True,
                 why="a serving trace's prefill, decode and mixed iterations and the time outside them (issue 44): "
                     "device busy time, attention share, split, efficiency and idle per stage"),
)
TABLE_GROUPINGS: tuple[str, ...] = tuple(g.grouping.value for g in GROUPINGS if g.table)
