"""Hints: what to do next, read from an attribution. Rules are ordered data, like :mod:`tracekit.classify`.

Each rule reads figures that the attribution already has (per block kind: busy, span and idle time,
categories) plus a few facts gathered once per trace while kernels are placed in blocks: which host op
launched each kernel, whether it ran inside an SDPA math path, and what the recorded input shapes and
dtypes of a handful of ops say (a cat along the sequence axis, an fp32 softmax, a 5-D repeat_kv copy).
A rule's saving is only ever an upper bound or a labelled estimate, with the basis spelled out; when the
trace cannot tell, the saving is None and ``saving_basis`` says why (docs/attribution.md, "Hints").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import orjson

from ..hardware import Arch, Platform, Vendor, platform
from ..results.efficiency import Efficiency, efficiency_dict, sum_efficiency
from ..results.hints import GroupFacts, Hint, HintFacts, HintOverlap, KernelRow
from ..vocab import (LAUNCH_BOUND_IDLE_SHARE, SHAPED_GEMM_OPS, Category, GraphMode, StrEnum, anchored, compact_kernel_name,
                     is_fused_attention_op, is_launch_bound)

if TYPE_CHECKING:
    from .link import Links
    from ..model import Trace
    from ..results.attribution import BlockResult

# Hint, GroupFacts, HintFacts and merge_facts live in tracekit.results.hints; they are imported here for use.
__all__ = ["ADVICE", "HINT_RULES", "Advice", "AdviceTopic", "HintRule", "HintTag", "advise", "collect_facts",
           "evaluate"]

NONE = -1  # tracekit.link.NONE, repeated so that importing this module stays light

# -- thresholds (named, documented in docs/attribution.md "Hints") -------------------------------------------
EAGER_SOFTMAX_SHARE = 0.30  # softmax + elementwise (mask, scale) share of an eager block's busy time
LAUNCH_BOUND_IDLE = LAUNCH_BOUND_IDLE_SHARE  # the one launch-bound rule (tracekit.vocab.is_launch_bound)
KV_CAT_SHARE = 0.05  # KV-cache cat kernels' share of busy time
MASK_SHARE = 0.02  # masked_fill kernels' share of busy time
FP32_SOFTMAX_SHARE = 0.01  # fp32 softmax kernels' share of busy time
REPEAT_KV_SHARE = 0.02  # repeat_kv / repeat_interleave copies' share of busy time
LAYOUT_COPY_SHARE = 0.15  # transpose/contiguous copies' share of busy time
LOW_ROOF_PCT = 40.0  # % of the compute roof below which a compute-bound fused kernel is "low"
ROTARY_SHARE = 0.05  # rotate_half cat + neg kernels' share of busy time
COMM_SHARE = 0.10  # collective (all-reduce/all-gather) kernels' share of busy time

_TOP_NAMES = 3  # kernel names quoted as evidence


class HintTag(StrEnum):
    """What a kernel row is to the rules (one tag each, the first that applies). Members are their string values
    (equality, hash, JSON), so the facts read, merge and serialise as the plain strings would."""

    UNTAGGED = ""  # no rule's tag (layout-copies reads untagged memory rows)
    SDPA_MATH = "sdpa-math"
    MASK = "mask"
    KV_CAT = "kv-cat"
    HALVES_CAT = "halves-cat"
    REPEAT_KV = "repeat-kv"
    CAST = "cast"
    SOFTMAX_FP32 = "softmax-fp32"
    NEG = "neg"
    COMM = "comm"
    SOFTMAX_UNKNOWN = "softmax?"  # a launcher's only (a softmax op without recorded input types); never a row's


class OpKind(StrEnum):
    """What a host op is to the rules, by its name alone (:func:`_op_kind`)."""

    NONE = ""
    MATH = "math"  # SDPA's math path (_scaled_dot_product_attention_math)
    FUSED = "fused"  # a fused attention op
    GEMM = "gemm"  # a GEMM whose input types are recorded
    MASK = "mask"
    CAT = "cat"
    REPEAT = "repeat"  # repeat_interleave
    SOFTMAX = "softmax"
    RESHAPE = "reshape"  # reshape/clone/expand/copy: HF repeat_kv's steps


class SdpaContext(StrEnum):
    """Where an op runs relative to an SDPA call (:meth:`_FactCollector.context`)."""

    NONE = ""
    MATH = "math"  # inside SDPA's math path
    SDPA = "sdpa"  # inside SDPA with no backend op between
    FUSED = "fused"  # inside a fused backend op under SDPA


# The tags the per-event path returns, bound as globals: on Python 3.11 ``HintTag.X`` takes the slow attribute path
# (EnumType defines __getattr__), ~10x a global look-up, and that path runs once per device event.
_UNTAGGED, _SDPA_MATH, _MASK, _REPEAT_KV = HintTag.UNTAGGED, HintTag.SDPA_MATH, HintTag.MASK, HintTag.REPEAT_KV


_MATH_OP = re.compile(r"aten::_scaled_dot_product_attention_math\w*$")
_SDPA_OP = "aten::scaled_dot_product_attention"
_SOFTMAX_OP = re.compile(r"aten::_?(?:safe_)?softmax$")
_MASK_OP = re.compile(r"aten::masked_fill_?$")
_GEMM_OP = re.compile(anchored(*SHAPED_GEMM_OPS))  # the GEMMs whose input types are recorded
_RESHAPE_OPS = frozenset({"aten::reshape", "aten::clone", "aten::contiguous", "aten::expand", "aten::copy_",
                          "aten::_unsafe_view"})
_CAST_KERNEL = re.compile(r"(?:bfloat16|float16|half|float32|float)(?:to(?:float32|bfloat16|float16|half))?_copy_kernel"
                          r"|bfloat16tofloat|float32tobfloat|tofloat32_copy")
_FP32_SOFTMAX_KERNEL = re.compile(r"[Ss]oft[Mm]ax\w*<(?:\d+, )?float, ")
_NEG_KERNEL = re.compile(r"neg_kernel")
_COMM_KERNEL = re.compile(r"all_?reduce|allgather|all_gather|reduce_scatter|ReduceScatter|AllReduce|AllGather|nccl|rccl",
                          re.IGNORECASE)
_LAYOUT_KERNEL = re.compile(r"direct_copy_kernel|_copy_kernel_cuda|copy_device_to_device|Memcpy DtoD|batched_transpose"
                            r"|nchwToNhwc|nhwcToNchw")
_SIXTEEN_BIT = ("c10::BFloat16", "c10::Half")


# ---------------------------------------------------------------------------------------------
# Collecting facts (once per trace, only over device events that blocks own)


class _Inputs:
    """Recorded inputs of host ops, parsed lazily and once per distinct JSON text."""

    __slots__ = ("_tr", "_cache")

    def __init__(self, tr: Trace) -> None:
        self._tr = tr
        self._cache: dict[bytes, Any] = {}

    def _load(self, raw: bytes) -> Any:
        try:
            return self._cache[raw]
        except KeyError:
            pass
        try:
            v = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            v = None
        self._cache[raw] = v
        return v

    def dims(self, i: int) -> list | None:
        rec = self._tr.op_inputs.get(i)
        v = self._load(rec.dims) if rec is not None else None
        return v if isinstance(v, list) else None

    def types(self, i: int) -> list | None:
        rec = self._tr.op_inputs.get(i)
        v = self._load(rec.types) if rec is not None else None
        return v if isinstance(v, list) else None

    def concrete(self, i: int) -> list | None:
        rec = self._tr.op_inputs.get(i)
        v = self._load(rec.concrete) if rec is not None else None
        return v if isinstance(v, list) else None


def _shape(x: object) -> list[int] | None:
    return x if isinstance(x, list) and all(isinstance(d, int) for d in x) else None


def _first_shape(inp: _Inputs, i: int) -> list[int] | None:
    """The shape of op i's first input, when it was recorded as one."""
    d = inp.dims(i)
    return _shape(d[0]) if d else None


def _is_matmul_op(name: str) -> bool:
    """GEMM and attention ops reshape their own operands (e.g. 5-D chunked products): not repeat_kv."""
    return _GEMM_OP.match(name) is not None or is_fused_attention_op(name)


def _cat_tag(inp: _Inputs, i: int) -> HintTag:
    """A cat of [past, new] along the sequence axis of 4-D (B, H, S, D) tensors is a KV-cache append;
    one of two equal halves along the last axis is rotary's rotate_half."""
    dims = inp.dims(i)
    if not dims or not isinstance(dims[0], list) or len(dims[0]) != 2:
        return HintTag.UNTAGGED
    a, b = _shape(dims[0][0]), _shape(dims[0][1])
    if a is None or b is None or len(a) != 4 or len(b) != 4:
        return HintTag.UNTAGGED
    conc = inp.concrete(i) or []
    dim = conc[1] if len(conc) > 1 else ""
    try:
        axis = int(dim) % 4 if dim not in ("", None) else 0
    except (TypeError, ValueError):
        return HintTag.UNTAGGED
    if axis == 3 and a == b:
        return HintTag.HALVES_CAT
    if axis == 2 and a[:2] == b[:2] and a[3] == b[3] and a[2] >= b[2] > 0:
        return HintTag.KV_CAT  # past (a) at least as long as the new tokens (b): a cache that grows
    return HintTag.UNTAGGED


def _sdpa_masked(inp: _Inputs, i: int) -> bool:
    """SDPA(query, key, value, attn_mask, dropout_p, is_causal, …) with a mask tensor and is_causal False."""
    dims = inp.dims(i)
    if not dims or len(dims) < 4 or not dims[3]:
        return False
    conc = inp.concrete(i) or []
    return not (len(conc) > 5 and conc[5] == "True")


class _FactCollector:
    """One trace's fact gathering. A class, not closures, so that each concept is one method: counting events on
    rows (``collect``), a launcher's tag (``launcher_tag``), the SDPA context walk and the repeat_kv walk.

    The memos are attributes, filled once per trace, so each host op is walked at most once.
    """

    __slots__ = ("_tr", "_host", "_links", "_op_parent", "_inp", "_up", "_seen_ops", "_five_d_clones", "_no_sdpa")

    def __init__(self, tr: Trace, links: Links) -> None:
        self._tr = tr
        self._host = tr.host
        self._links = links
        self._op_parent = links.op_parent
        self._inp = _Inputs(tr)
        self._up: dict[int, tuple[SdpaContext, int]] = {}  # host op -> (nearest SDPA context above it, the SDPA op or NONE)
        self._seen_ops: set[tuple[int, int]] = set()  # (block, SDPA op) counted once
        self._five_d_clones: bool | None = None  # whether any aten::clone copies a 5-D tensor; None until asked
        # No SDPA op and no math-path op anywhere in the file: every op's context is empty, and the walk is skipped.
        names = tr.names
        self._no_sdpa = names is not None and not any(n == _SDPA_OP or _MATH_OP.match(n) for n in names)

    def collect(self, block_keys: Sequence[tuple[str, str]], dev_owner: Sequence[int], cats: Sequence[str],
                busy_ns: Sequence[int]) -> HintFacts:
        """Each owned device event counted on its kernel row, under its block's (kind, phase)."""
        dev, host = self._tr.device, self._host
        leaf, launcher = self._links.device_leaf, self._links.launcher
        launcher_tag = self.launcher_tag
        facts: HintFacts = {}
        rows: dict[tuple[str, str, str, str], tuple[str, str, str, str]] = {}  # regexes run once per distinct row
        for j, b in enumerate(dev_owner):
            if b == NONE:
                continue
            key = block_keys[b]
            g = facts.get(key)
            if g is None:
                g = facts[key] = GroupFacts()
            lf = leaf[j]
            la = launcher[lf] if lf != NONE else NONE
            if la != NONE:
                tag = launcher_tag(la, g, b)
                lname = host[la].name
            else:
                tag, lname = _UNTAGGED, ""
            name = dev[j].name
            cat = cats[j]
            memo = (name, cat, lname, tag)
            row = rows.get(memo)
            if row is None:
                row = rows[memo] = (compact_kernel_name(name), cat, lname, _kernel_tag(name, cat, tag))
            acc = g.kernels.get(row)
            if acc is None:
                g.kernels[row] = [1, busy_ns[j] / 1000]
            else:
                acc[0] += 1
                acc[1] += busy_ns[j] / 1000
        return facts

    def launcher_tag(self, la: int, g: GroupFacts, b: int) -> HintTag:
        """The tag launcher op ``la`` gives its kernels in block ``b``; the SDPA call above it is counted on the way."""
        ctx, sdpa = (SdpaContext.NONE, NONE) if self._no_sdpa else self.context(la)
        if sdpa != NONE and (b, sdpa) not in self._seen_ops:  # one call per (block, op), however many kernels
            self._seen_ops.add((b, sdpa))
            g.sdpa_calls += 1
            g.sdpa_masked += _sdpa_masked(self._inp, sdpa)
        if ctx == SdpaContext.MATH or ctx == SdpaContext.SDPA:
            return _SDPA_MATH
        kind = _op_kind(self._host[la].name)
        if kind == OpKind.GEMM:
            self._count_gemm(la, g)
            return _UNTAGGED
        if kind == OpKind.MASK:
            return _MASK
        if kind == OpKind.CAT:
            return _cat_tag(self._inp, la)
        if kind == OpKind.REPEAT:
            return _REPEAT_KV
        if kind == OpKind.SOFTMAX:
            return self._softmax_tag(la)
        if kind == OpKind.RESHAPE:
            return self._repeat_kv_tag(la)
        return _UNTAGGED

    def _count_gemm(self, la: int, g: GroupFacts) -> None:
        """A kernel of a GEMM op, counted by the op's input dtype (what fp32-softmax compares against)."""
        types = self._inp.types(la)
        if types and types[0] in _SIXTEEN_BIT:
            g.gemm_16bit += 1
        elif types and types[0] == "float":
            g.gemm_fp32 += 1

    def _softmax_tag(self, la: int) -> HintTag:
        """fp32 by the op's recorded input type; without record_shapes, the kernel's template decides later."""
        types = self._inp.types(la)
        if not types:
            return HintTag.SOFTMAX_UNKNOWN
        return HintTag.SOFTMAX_FP32 if types[0] == "float" else HintTag.UNTAGGED

    def context(self, la: int) -> tuple[SdpaContext, int]:
        """The op's SdpaContext and the SDPA call above it (NONE without one).

        Memoised per host op and filled along the walked path, so each op is visited once per trace.
        """
        host, op_parent, up = self._host, self._op_parent, self._up
        path: list[int] = []
        p = la
        res: tuple[SdpaContext, int] = (SdpaContext.NONE, NONE)
        while p != NONE:
            hit = up.get(p)
            if hit is not None:
                res = hit
                break
            if host[p].name == _SDPA_OP:
                res = up[p] = (SdpaContext.SDPA, p)
                break
            path.append(p)
            p = op_parent[p]
        for q in reversed(path):  # from the top down: each op's context from its parent's
            kind = _op_kind(host[q].name)
            if kind == OpKind.MATH:
                res = (SdpaContext.MATH, res[1])
            elif kind == OpKind.FUSED and res[0] == SdpaContext.SDPA:
                res = (SdpaContext.FUSED, res[1])
            up[q] = res
        return res

    def _repeat_kv_tag(self, la: int) -> HintTag:
        """HF repeat_kv: reshape of a 5-D expand (B, H_kv, n_rep, S, D) -> clone -> copy_, outside any GEMM."""
        if not self._any_five_d_clone():  # without one, no walk can find repeat_kv: skip them all
            return HintTag.UNTAGGED
        host, op_parent = self._host, self._op_parent
        p, depth, five = la, 0, False
        while p != NONE and depth < 6:
            n = host[p].name
            if _is_matmul_op(n):
                return HintTag.UNTAGGED
            if n == "aten::clone":
                s = _first_shape(self._inp, p)
                five = s is not None and len(s) == 5 and s[2] > 1
            elif n == "aten::reshape":
                up = op_parent[p]
                inside_op = up != NONE and _is_matmul_op(host[up].name)
                return HintTag.REPEAT_KV if five and not inside_op else HintTag.UNTAGGED
            elif n not in _RESHAPE_OPS:
                return HintTag.UNTAGGED
            p = op_parent[p]
            depth += 1
        return HintTag.UNTAGGED

    def _any_five_d_clone(self) -> bool:
        """Whether any aten::clone in the file copies a 5-D tensor: looked up once, over distinct recorded dims."""
        if self._five_d_clones is None:
            host, inp = self._host, self._inp
            seen: set[bytes] = set()
            self._five_d_clones = False
            for i, rec in self._tr.op_inputs.items():
                if host[i].name == "aten::clone" and rec.dims not in seen:
                    seen.add(rec.dims)
                    s = _first_shape(inp, i)
                    if s is not None and len(s) == 5:
                        self._five_d_clones = True
                        break
        return self._five_d_clones


def collect_facts(tr: Trace, links: Links, block_keys: Sequence[tuple[str, str]], dev_owner: Sequence[int],
                  cats: Sequence[str], busy_ns: Sequence[int]) -> HintFacts:
    """Per block kind, the kernel rows the rules read: one pass over the device events blocks own.

    ``block_keys[b]`` is block b's (kind, phase); ``busy_ns[j]`` is event j's share of its block's busy time.
    Work per event is a few dict look-ups; ancestors are walked once per distinct launcher.
    """
    facts = _FactCollector(tr, links).collect(block_keys, dev_owner, cats, busy_ns)
    info = tr.info
    platforms = sorted({platform(n, info.runtime) for n in info.gpus} or {platform(None, info.runtime)})
    for g in facts.values():  # once per block kind, not per event
        g.platforms = list(platforms)
        g.check()
    return facts


@lru_cache(maxsize=4096)
def _op_kind(name: str) -> OpKind:
    """What a host op is to the rules, by its name alone."""
    if _MATH_OP.match(name):
        return OpKind.MATH
    if is_fused_attention_op(name):
        return OpKind.FUSED
    if _GEMM_OP.match(name):
        return OpKind.GEMM
    if _MASK_OP.match(name):
        return OpKind.MASK
    if name == "aten::cat":
        return OpKind.CAT
    if name == "aten::repeat_interleave":
        return OpKind.REPEAT
    if _SOFTMAX_OP.match(name):
        return OpKind.SOFTMAX
    if name in _RESHAPE_OPS:
        return OpKind.RESHAPE
    return OpKind.NONE


def _kernel_tag(name: str, cat: str, tag: HintTag) -> HintTag:
    """The row's tag: the launcher's, refined by what the kernel's own name says."""
    if tag == HintTag.SOFTMAX_UNKNOWN or (not tag and cat == Category.SOFTMAX):
        fp32 = cat == Category.SOFTMAX and _FP32_SOFTMAX_KERNEL.search(name) is not None
        return HintTag.SOFTMAX_FP32 if fp32 else HintTag.UNTAGGED
    if tag == HintTag.SOFTMAX_FP32:
        return tag if cat == Category.SOFTMAX else HintTag.UNTAGGED
    if tag:
        return tag
    if _COMM_KERNEL.search(name):
        return HintTag.COMM
    if cat == Category.MEMORY and _CAST_KERNEL.search(name):
        return HintTag.CAST
    if _NEG_KERNEL.search(name):
        return HintTag.NEG
    return HintTag.UNTAGGED


# ---------------------------------------------------------------------------------------------
# Evaluating the rules on block kinds


@dataclass(slots=True, kw_only=True)
class Group:
    """One block kind (and phase): BlockResult figures summed, plus its facts. What a rule's check reads."""

    label: str
    blocks: list[BlockResult]
    facts: GroupFacts
    busy_us: float = 0.0
    span_us: float = 0.0
    idle_us: float = 0.0
    categories: dict[str, float] = field(default_factory=dict)

    def rows(self, pred: Callable[[str, str, str, str], bool]) -> list[tuple[str, str, str, str, int, float]]:
        """Kernel rows (name, category, launcher, tag, count, µs) for which ``pred(name, cat, launcher, tag)``."""
        return [(*k, int(v[0]), v[1]) for k, v in self.facts.kernels.items() if pred(*k)]

    def tagged(self, *tags: HintTag) -> list[tuple[str, str, str, str, int, float]]:
        return self.rows(lambda n, c, la, t: t in tags)

    def share(self, us: float) -> float:
        return us / self.busy_us if self.busy_us > 0 else 0.0


class AdviceTopic(StrEnum):
    """What a piece of vendor-specific advice is about: the hint rules that name a kernel library ask for one."""

    FUSED_SDPA = "fused-sdpa"  # the fused SDPA backends that replace an eager softmax (eager-softmax)
    FUSED_ELIGIBLE = "fused-eligible"  # where SDPA's fused backends are switched on (sdpa-math-fallback)
    FASTER_KERNEL = "faster-kernel"  # a faster fused attention kernel for this GPU (low-tflops)


@dataclass(frozen=True, slots=True, kw_only=True)
class Advice:
    """One row of :data:`ADVICE`: ``text`` for a topic on the platforms it fits. ``vendor`` None fits any (a topic's
    catch-all); ``archs`` empty fits any arch of the vendor; ``ran``/``not_ran`` (regexes over the kernel names
    that ran) fit only when some kernel matches / none does, so that a trace is not told to use what it runs."""

    name: str
    topic: AdviceTopic
    text: str
    why: str
    vendor: Vendor | None = None
    archs: frozenset[Arch] = frozenset()
    ran: str = ""
    not_ran: str = ""

    def fits(self, platforms: Sequence[Platform], kernels: Sequence[str]) -> bool:
        """Every platform of the blocks' traces is this row's (one vendor, arch in ``archs``), and the kernels fit."""
        if self.vendor is not None and not (platforms and all(p.vendor == self.vendor for p in platforms)):
            return False
        if self.archs and not all(p.arch in self.archs for p in platforms):
            return False
        if self.ran and not any(re.search(self.ran, k) for k in kernels):
            return False
        return not (self.not_ran and any(re.search(self.not_ran, k) for k in kernels))


_CUDNN_KERNEL = r"cudnn|fort_native_sdpa"
_AITER_KERNEL = r"aiter::|fmha_fwd|ck_tile|Fmha"
_AMD, _NVIDIA = Vendor.AMD, Vendor.NVIDIA

# Ordered, first fit wins; each topic ends in a catch-all (vendor None). ROCm rows name ROCm libraries only and CUDA
# rows CUDA ones: FA3 and cuDNN do not run on AMD GPUs, nor aiter/CK/AOTriton-for-ROCm on NVIDIA ones.
ADVICE: tuple[Advice, ...] = (
    Advice(name="rocm-fused-sdpa", topic=AdviceTopic.FUSED_SDPA, vendor=_AMD,
           text="fused on ROCm: flash/mem-efficient, AOTriton's kernels; or aiter's flash attention",
           why="on ROCm, SDPA's fused backends are AOTriton's Triton kernels; cuDNN is CUDA-only"),
    Advice(name="volta-fused-sdpa", topic=AdviceTopic.FUSED_SDPA, vendor=_NVIDIA, archs=frozenset({Arch.VOLTA}),
           text="fused: mem-efficient; the flash and cuDNN backends need sm80 or newer",
           why="PyTorch's flash and cuDNN SDPA backends require compute capability 8.0"),
    Advice(name="cuda-fused-sdpa", topic=AdviceTopic.FUSED_SDPA, vendor=_NVIDIA,
           text="fused: flash/mem-efficient/cuDNN",
           why="the three fused SDPA backends of CUDA builds of PyTorch"),
    Advice(name="any-fused-sdpa", topic=AdviceTopic.FUSED_SDPA,
           text="a fused backend: flash or mem-efficient",
           why="vendor unknown or mixed: only the backends every GPU build has"),
    Advice(name="rocm-fused-eligible", topic=AdviceTopic.FUSED_ELIGIBLE, vendor=_AMD,
           text="check sdpa_kernel()/torch.backends settings (on ROCm the fused backends are AOTriton's: set "
                "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 on GPUs where they are experimental)",
           why="ROCm builds gate AOTriton's flash/mem-efficient SDPA on some GPUs behind that variable"),
    Advice(name="any-fused-eligible", topic=AdviceTopic.FUSED_ELIGIBLE,
           text="check sdpa_kernel()/torch.backends settings",
           why="the switches every build has"),
    Advice(name="rocm-cdna3-faster", topic=AdviceTopic.FASTER_KERNEL, vendor=_AMD, archs=frozenset({Arch.CDNA3}),
           not_ran=_AITER_KERNEL,
           text="aiter's flash attention (CK and assembly FMHA kernels tuned for MI300) or the Composable Kernel "
                "backend of ROCm flash-attention",
           why="on CDNA3, aiter's CK/assembly kernels outrun SDPA's default AOTriton (Triton) kernels"),
    Advice(name="rocm-faster", topic=AdviceTopic.FASTER_KERNEL, vendor=_AMD,
           text="a newer aiter or ROCm flash-attention (Composable Kernel backend), or SDPA's flash backend "
                "(AOTriton; TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 where it is experimental)",
           why="ROCm's fused attention kernels come from aiter/CK and AOTriton"),
    Advice(name="blackwell-faster", topic=AdviceTopic.FASTER_KERNEL, vendor=_NVIDIA, archs=frozenset({Arch.BLACKWELL}),
           text="FA4 (flash-attn's CuTe DSL kernels for sm100) or cuDNN SDPA",
           why="FA3 is built for sm90 only; on sm100, FA4 and cuDNN use the new tensor-core instructions"),
    Advice(name="hopper-after-cudnn", topic=AdviceTopic.FASTER_KERNEL, vendor=_NVIDIA, archs=frozenset({Arch.HOPPER}),
           ran=_CUDNN_KERNEL,
           text="FA3 (flash-attn's hopper/ build for sm90; cuDNN SDPA already ran here)",
           why="the trace runs cuDNN's sm90 kernel already: the other Hopper kernel is FA3"),
    Advice(name="hopper-faster", topic=AdviceTopic.FASTER_KERNEL, vendor=_NVIDIA, archs=frozenset({Arch.HOPPER}),
           text="FA3 (flash-attn's hopper/ build for sm90) or cuDNN SDPA",
           why="SDPA's flash backend is FA2, which uses no Hopper wgmma/TMA; FA3 and cuDNN's sm90 kernels do"),
    Advice(name="ampere-ada-faster", topic=AdviceTopic.FASTER_KERNEL, vendor=_NVIDIA,
           archs=frozenset({Arch.AMPERE, Arch.ADA}),
           text="FA2 (flash-attn 2, or SDPA's flash backend) or cuDNN SDPA",
           why="FA3 needs sm90; on sm80/sm89, FA2 and cuDNN are the fast kernels"),
    Advice(name="volta-faster", topic=AdviceTopic.FASTER_KERNEL, vendor=_NVIDIA, archs=frozenset({Arch.VOLTA}),
           text="SDPA's mem-efficient backend or xFormers; FA2 and cuDNN SDPA need sm80 or newer",
           why="flash-attn 2 and cuDNN attention do not build for sm70"),
    Advice(name="cuda-faster", topic=AdviceTopic.FASTER_KERNEL, vendor=_NVIDIA,
           text="FA3 on Hopper, FA2 or cuDNN SDPA on Ampere/Ada, FA4 or cuDNN on Blackwell",
           why="the GPU model is not in tracekit.hardware, so its architecture is unknown"),
    Advice(name="any-faster", topic=AdviceTopic.FASTER_KERNEL,
           text="the fastest fused attention kernel the GPU's vendor ships for it",
           why="vendor unknown, or the traces' GPUs differ: naming one vendor's library could be wrong"),
)


def advise(topic: AdviceTopic, platforms: Sequence[Platform], kernels: Sequence[str] = ()) -> Advice:
    """The first row of :data:`ADVICE` for ``topic`` that fits the blocks' platforms and kernels."""
    return next(a for a in ADVICE if a.topic == topic and a.fits(platforms, kernels))


def _us(rows: Sequence[tuple[str, str, str, str, int, float]]) -> float:
    return sum(r[5] for r in rows)


def _names(rows: Sequence[tuple[str, str, str, str, int, float]]) -> list[str]:
    """The costliest kernel names of these rows (evidence), shortened."""
    by: dict[str, float] = {}
    for r in rows:
        by[r[0]] = by.get(r[0], 0.0) + r[5]
    return [n[:120] for n, _ in sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))[:_TOP_NAMES]]


def _t(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.1f} µs"


def _r(x: float) -> float:
    return round(x, 3)


def _full(rows: Sequence[tuple[str, str, str, str, int, float]]) -> dict[KernelRow, float]:
    """All of these rows' time, as a hint's ``counted``."""
    out: dict[KernelRow, float] = {}
    for r in rows:
        out[r[:4]] = out.get(r[:4], 0.0) + r[5]
    return out


def _hint(rule: HintRule, g: Group, message: str, evidence: dict[str, Any], saving_us: float | None,
          basis: str, denominator_us: float | None = None, counted: dict[KernelRow, float] | None = None) -> Hint:
    """A Hint; ``counted`` is the kernel time its saving counts, per row (its sum is the saving), for overlaps."""
    den = g.busy_us if denominator_us is None else denominator_us
    pct = 100 * saving_us / den if saving_us is not None and den > 0 else None
    return Hint(rule=rule.name, blocks=[g.label], message=message, evidence=evidence,
                saving_us=None if saving_us is None else _r(saving_us), saving_pct=None if pct is None else round(pct, 1),
                saving_basis=basis, counted=dict(counted or {}) if saving_us is not None else {}).check()


def _eager_softmax(g: Group, rule: HintRule) -> Hint | None:
    """The softmax and elementwise rows' time (their kernels, the saving's count; the categories' sums agree)."""
    rows = g.rows(lambda n, c, la, t: c in (Category.SOFTMAX, Category.ELEMENTWISE))
    sm, ew = _us([r for r in rows if r[1] == Category.SOFTMAX]), _us([r for r in rows if r[1] != Category.SOFTMAX])
    if sm <= 0 or g.categories.get(Category.FUSED_ATTENTION, 0.0) > 0 or g.tagged(HintTag.SDPA_MATH):
        return None
    share = g.share(sm + ew)
    if share < rule.threshold:
        return None
    advice = advise(AdviceTopic.FUSED_SDPA, g.facts.platforms)
    return _hint(rule, g, f"{g.label}: eager softmax + mask/scale kernels are {100 * share:.1f}% of busy time "
                          f"({_t(sm + ew)}); use F.scaled_dot_product_attention ({advice.text})",
                 {"softmax_us": _r(sm), "elementwise_us": _r(ew), "busy_us": _r(g.busy_us),
                  "share_pct": round(100 * share, 1), "kernels": _names(rows), "advice": advice.name},
                 sm + ew, "upper bound: the time of the eager softmax/mask/scale kernels; the fused kernel does "
                          "this work too, in time the trace cannot tell", counted=_full(rows))


def _sdpa_math(g: Group, rule: HintRule) -> Hint | None:
    rows = g.tagged(HintTag.SDPA_MATH)
    soft = [r for r in rows if r[1] == Category.SOFTMAX]
    if not soft:
        return None
    total = _us(rows)
    not_mm_rows = [r for r in rows if r[1] != Category.MATMUL]
    not_mm = _us(not_mm_rows)
    advice = advise(AdviceTopic.FUSED_ELIGIBLE, g.facts.platforms)
    return _hint(rule, g, f"{g.label}: SDPA ran its math fallback (softmax kernels inside the SDPA op, "
                          f"{_t(total)} of kernels); make a fused backend eligible (bf16/fp16 inputs, is_causal "
                          f"instead of a mask, supported head_dim) or {advice.text}",
                 {"math_path_us": _r(total), "softmax_us": _r(_us(soft)), "non_matmul_us": _r(not_mm),
                  "busy_us": _r(g.busy_us), "kernels": _names(soft), "advice": advice.name},
                 not_mm, "upper bound: the math path's softmax/mask/cast/copy kernels; a fused kernel still "
                         "does the matmul work", counted=_full(not_mm_rows))


_CAPTURES = frozenset({GraphMode.CAPTURE_ONLY, GraphMode.CAPTURE_REPLAY})


def _launch_bound(g: Group, rule: HintRule) -> Hint | None:
    if g.span_us <= 0 or not is_launch_bound(g.idle_us, g.span_us):
        return None
    if _CAPTURES.intersection(g.facts.graph_modes) and g.share(g.facts.replayed_us) <= 0.5:
        return None  # the eager calls of a capture trace are its warm-up: their gaps are the capture's, not a cost
    kernels = sum(b.kernels for b in g.blocks)
    return _hint(rule, g, f"{g.label}: launch-bound, the GPU is idle {100 * g.idle_us / g.span_us:.0f}% of the "
                          f"blocks' span ({_t(g.idle_us)} of {_t(g.span_us)}); {_launch_advice(g)}, and judge "
                          f"speedups by wall time, not busy time",
                 {"span_us": _r(g.span_us), "idle_us": _r(g.idle_us), "busy_us": _r(g.busy_us),
                  "idle_pct": round(100 * g.idle_us / g.span_us, 1), "kernels": kernels,
                  "mean_kernel_us": _r(g.busy_us / kernels) if kernels else None, **_graph_evidence(g)},
                 g.idle_us, "upper bound: the device idle time inside the blocks (percent of their span)",
                 denominator_us=g.span_us)


def _graph_evidence(g: Group) -> dict[str, Any]:
    """The graph facts the advice read; none for blocks of eager traces only (their evidence stays as it was)."""
    modes = [m for m in g.facts.graph_modes if m != GraphMode.EAGER]
    if not modes and not g.facts.replayed_us:
        return {}
    return {"replayed_pct": round(100 * g.share(g.facts.replayed_us), 1), "graph_modes": modes}


# What removes launch gaps depends on whether the blocks already run from a CUDA/HIP graph (GroupFacts.replayed_us):
# advising graphs to a replay, or to a trace that is a capture, would be advice the trace itself refutes.
def _launch_advice(g: Group) -> str:
    modes = set(g.facts.graph_modes) - {str(GraphMode.EAGER)}
    if g.share(g.facts.replayed_us) > 0.5:
        return ("the blocks already run from a CUDA/HIP graph, so the gaps are not launch overhead: they are "
                "dependencies inside the graph (event waits, host callbacks, kernels in series); fuse kernels "
                "(torch.compile) or overlap independent work on another stream")
    if modes:
        return ("the trace replays CUDA/HIP graphs but these blocks run eagerly outside them (as attention does "
                "between the pieces of a piecewise graph), where each kernel pays its launch; capture attention in "
                "the graph too (vLLM: a FULL cudagraph mode for decode) or fuse its kernels")
    return "capture CUDA graphs (torch.compile mode='reduce-overhead') or fuse kernels (torch.compile)"


def _tagged_over(g: Group, rule: HintRule, tag: HintTag) -> tuple[list[tuple[str, str, str, str, int, float]], float]:
    """The rows with ``tag`` and their µs, when they reach the rule's share of busy time; else ([], 0)."""
    rows = g.tagged(tag)
    us = _us(rows)
    return (rows, us) if rows and g.share(us) >= rule.threshold else ([], 0.0)


def _kv_cat(g: Group, rule: HintRule) -> Hint | None:
    rows, us = _tagged_over(g, rule, HintTag.KV_CAT)
    if not rows:
        return None
    return _hint(rule, g, f"{g.label}: KV-cache concatenation (torch.cat of past and new K/V) is "
                          f"{100 * g.share(us):.1f}% of busy time ({_t(us)}); use a static, pre-allocated cache "
                          f"(transformers StaticCache, index_copy_ of the new tokens)",
                 {"cat_us": _r(us), "busy_us": _r(g.busy_us), "share_pct": round(100 * g.share(us), 1),
                  "calls": sum(r[4] for r in rows), "kernels": _names(rows)},
                 us, "upper bound: the cat kernels' time; a static cache still writes the new tokens",
                 counted=_full(rows))


def _causal_mask(g: Group, rule: HintRule) -> Hint | None:
    rows = g.tagged(HintTag.MASK)
    us = _us(rows)
    fills = bool(rows) and g.share(us) >= rule.threshold
    masked = g.facts.sdpa_masked
    if not fills and not masked:
        return None
    parts = []
    if fills:
        parts.append(f"masked_fill kernels take {100 * g.share(us):.1f}% of busy time ({_t(us)})")
    if masked:
        parts.append(f"{masked} of {g.facts.sdpa_calls} SDPA calls were passed an attn_mask tensor")
    ev: dict[str, Any] = {"mask_us": _r(us), "busy_us": _r(g.busy_us), "share_pct": round(100 * g.share(us), 1),
                          "sdpa_calls": g.facts.sdpa_calls, "sdpa_with_mask": masked, "kernels": _names(rows)}
    msg = (f"{g.label}: a materialised mask: {'; '.join(parts)}; if it is causal, call "
           f"F.scaled_dot_product_attention(..., is_causal=True) instead (no mask tensor, and the flash backend "
           f"becomes eligible)")
    if fills:
        return _hint(rule, g, msg, ev, us, "upper bound: the masked_fill kernels' time", counted=_full(rows))
    return _hint(rule, g, msg, ev, None, "none: what a fused causal kernel saves over a masked one is not in the trace")


def _fp32_softmax(g: Group, rule: HintRule) -> Hint | None:
    rows, us = _tagged_over(g, rule, HintTag.SOFTMAX_FP32)
    if not rows:
        return None
    sixteen = g.facts.gemm_16bit > 0 or any(re.search(r"bf16|f16|BFloat16|Half|_h_|_h$", r[0])
                                            for r in g.rows(lambda n, c, la, t: c == Category.MATMUL))
    if not sixteen:
        return None
    cast_rows = g.tagged(HintTag.CAST)
    casts = _us(cast_rows)
    counted = {k: v / 2 for k, v in _full(rows).items()}  # the half a bf16 softmax would save, then the casts
    for k, v in _full(cast_rows).items():
        counted[k] = counted.get(k, 0.0) + v
    return _hint(rule, g, f"{g.label}: softmax runs in fp32 ({_t(us)}, {100 * g.share(us):.1f}% of busy time) while "
                          f"the matmuls are bf16/fp16; keep the scores in bf16 (softmax accumulates in fp32 inside "
                          f"the kernel) and drop the casts around it ({_t(casts)})",
                 {"fp32_softmax_us": _r(us), "cast_us": _r(casts), "busy_us": _r(g.busy_us),
                  "gemm_ops_16bit": g.facts.gemm_16bit, "kernels": _names(rows)},
                 us / 2 + casts, "estimate: a memory-bound softmax moves half the bytes in bf16 (half its time), "
                                 "plus the bf16<->fp32 cast kernels", counted=counted)


def _repeat_kv(g: Group, rule: HintRule) -> Hint | None:
    rows, us = _tagged_over(g, rule, HintTag.REPEAT_KV)
    if not rows:
        return None
    return _hint(rule, g, f"{g.label}: GQA repeat_kv copies K/V per query head ({_t(us)}, "
                          f"{100 * g.share(us):.1f}% of busy time); pass enable_gqa=True to "
                          f"F.scaled_dot_product_attention or use a GQA-aware kernel",
                 {"copy_us": _r(us), "busy_us": _r(g.busy_us), "share_pct": round(100 * g.share(us), 1),
                  "launchers": sorted({r[2] for r in rows}), "kernels": _names(rows)},
                 us, "upper bound: the repeat_kv copy kernels' time", counted=_full(rows))


def _layout_copies(g: Group, rule: HintRule) -> Hint | None:
    rows = g.rows(lambda n, c, la, t: c == Category.MEMORY and not t and _LAYOUT_KERNEL.search(n) is not None)
    us = _us(rows)
    if not rows or g.share(us) < rule.threshold:
        return None
    return _hint(rule, g, f"{g.label}: transpose/contiguous copies are {100 * g.share(us):.1f}% of busy time "
                          f"({_t(us)}); keep tensors in the layout the next op reads (e.g. (B, S, H, D) into "
                          f"flash-attn, no .contiguous() before SDPA) or let torch.compile fuse the copies",
                 {"copy_us": _r(us), "busy_us": _r(g.busy_us), "share_pct": round(100 * g.share(us), 1),
                  "launchers": sorted({r[2] for r in rows if r[2]})[:5], "kernels": _names(rows)},
                 us, "upper bound: the copy kernels' time", counted=_full(rows))


def _fused_efficiency(g: Group) -> Efficiency | None:
    """The fused attention kernels' efficiency over the group's blocks: the sum of the very records the JSON's
    ``efficiency_by_category["fused_attention"]`` shows per block, so the hint's figures are the table's."""
    key = Category.FUSED_ATTENTION.value
    return sum_efficiency([b.efficiency_by_category.get(key) for b in g.blocks])


def _low_tflops(g: Group, rule: HintRule) -> Hint | None:
    """A compute-bound fused kernel far below its dtype's peak (the one look-up: hardware.compute_peak)."""
    e = _fused_efficiency(g)
    peak = e.peak_tflops if e is not None else None
    if e is None or peak is None or e.bound != "compute" or e.time_ns <= 0 or e.compute_s is None:
        return None
    d = efficiency_dict(e)  # rates and roof exactly as the JSON's efficiency records round them
    roof_pct, rate = float(d["roof_pct"]), float(d["tflops_per_s"])  # type: ignore[arg-type]
    if roof_pct >= rule.threshold:
        return None
    rows = g.rows(lambda n, c, la, t: c == Category.FUSED_ATTENTION)
    us, at_roof_us = e.time_ns / 1000, e.compute_s * 1e6
    saving = max(0.0, us - at_roof_us)
    rows_us = _us(rows)
    counted = {k: v * saving / rows_us for k, v in _full(rows).items()} if rows_us > 0 else {}
    dtype = "/".join(e.dtypes)
    advice = advise(AdviceTopic.FASTER_KERNEL, g.facts.platforms, [r[0] for r in rows])
    return _hint(rule, g, f"{g.label}: the fused attention kernel is compute-bound but runs at {rate:.0f} TFLOP/s, "
                          f"{roof_pct:.0f}% of the device's {dtype} peak ({peak:.1f} TFLOP/s); for this GPU try "
                          f"{advice.text}; or larger head_dim/batch per launch, or check the dtype",
                 {"fused_attention_us": _r(us), "flops": e.flops, "tflops_per_s": rate,
                  "peak_tflops_per_s": round(peak, 1), "peak_dtypes": list(e.dtypes), "roof_pct": roof_pct,
                  "kernels": _names(rows), "advice": advice.name},
                 saving if counted else None,
                 "upper bound: the fused kernels' time above what the compute roof allows" if counted else
                 "none: the fused kernels' rows are not in the facts", counted=counted)


def _rotary_cat(g: Group, rule: HintRule) -> Hint | None:
    cat, neg = g.tagged(HintTag.HALVES_CAT), g.tagged(HintTag.NEG)
    us = _us(cat) + _us(neg)
    if not cat or not neg or g.share(us) < rule.threshold:
        return None
    return _hint(rule, g, f"{g.label}: rotary embedding by rotate_half (cat of the two halves + neg) costs "
                          f"{_t(us)} ({100 * g.share(us):.1f}% of busy time) before the muls and adds; use a fused "
                          f"rotary kernel (flash_attn's apply_rotary_emb, Liger, or torch.compile)",
                 {"cat_us": _r(_us(cat)), "neg_us": _r(_us(neg)), "busy_us": _r(g.busy_us),
                  "share_pct": round(100 * g.share(us), 1), "kernels": _names(cat + neg)},
                 us, "upper bound: the cat and neg kernels' time; a fused kernel still reads and writes q and k",
                 counted=_full(cat + neg))


def _comm(g: Group, rule: HintRule) -> Hint | None:
    rows, us = _tagged_over(g, rule, HintTag.COMM)
    if not rows:
        return None
    return _hint(rule, g, f"{g.label}: collectives run inside the attention block ({_t(us)}, "
                          f"{100 * g.share(us):.1f}% of busy time: tensor-parallel all-reduce?); overlap them with "
                          f"compute (async TP) or check the TP degree for this size",
                 {"comm_us": _r(us), "busy_us": _r(g.busy_us), "share_pct": round(100 * g.share(us), 1),
                  "kernels": _names(rows)},
                 us, "upper bound: the collective kernels' time, if fully overlapped", counted=_full(rows))


@dataclass(frozen=True, slots=True, kw_only=True)
class HintRule:
    """One hint rule: ``check`` returns a Hint for a block kind, or None. ``reads`` and ``why`` document it."""

    name: str
    threshold: float
    reads: str
    check: Callable[[Group, HintRule], Hint | None]
    why: str = ""


HINT_RULES: tuple[HintRule, ...] = (
    HintRule(name="eager-softmax", threshold=EAGER_SOFTMAX_SHARE, check=_eager_softmax,
             reads="softmax + elementwise share of busy time, no fused/SDPA kernels",
             why="the unfused softmax/mask/scale round trips through HBM are what fused SDPA removes"),
    HintRule(name="sdpa-math-fallback", threshold=0.0, check=_sdpa_math,
             reads="softmax kernels launched under aten::scaled_dot_product_attention "
                   "(or _scaled_dot_product_attention_math) with no fused backend op",
             why="SDPA silently falls back to the math path (fp32 upcast, materialised scores)"),
    HintRule(name="launch-bound", threshold=LAUNCH_BOUND_IDLE, check=_launch_bound,
             reads="idle_us / span_us of the blocks",
             why="busy time is not what the user pays when the GPU waits for launches"),
    HintRule(name="kv-cache-cat", threshold=KV_CAT_SHARE, check=_kv_cat,
             reads="kernels of aten::cat([past, new], dim=-2) on 4-D K/V (Input Dims)",
             why="a growing cache re-copies all past tokens every step"),
    HintRule(name="materialised-mask", threshold=MASK_SHARE, check=_causal_mask,
             reads="masked_fill kernels; SDPA calls with an attn_mask and is_causal=False",
             why="a causal mask tensor costs a kernel and keeps SDPA off the flash backend"),
    HintRule(name="fp32-softmax", threshold=FP32_SOFTMAX_SHARE, check=_fp32_softmax,
             reads="softmax op Input type float (or kernel templated on float) while "
                   "GEMM ops take bf16/fp16",
             why="upcasting scores doubles the softmax's bytes and adds casts"),
    HintRule(name="gqa-repeat-kv", threshold=REPEAT_KV_SHARE, check=_repeat_kv,
             reads="copies launched by repeat_interleave or a 5-D expand+reshape",
             why="repeat_kv materialises K/V n_rep times"),
    HintRule(name="layout-copies", threshold=LAYOUT_COPY_SHARE, check=_layout_copies,
             reads="direct copy/transpose kernels (memory) not covered by another rule",
             why="contiguous()/transpose copies move the whole tensor for no math"),
    HintRule(name="low-tflops", threshold=LOW_ROOF_PCT, check=_low_tflops,
             reads="BlockResult.efficiency_by_category['fused_attention'] summed over the blocks (flops, "
                   "bound, roof_pct; the peak of the kernels' dtype)",
             why="a compute-bound kernel far below the roof leaves the most on the table"),
    HintRule(name="rotary-cat", threshold=ROTARY_SHARE, check=_rotary_cat,
             reads="cat of two equal halves along the last dim + neg kernels",
             why="HF rotate_half materialises two extra copies of q and k"),
    HintRule(name="collective-in-block", threshold=COMM_SHARE, check=_comm,
             reads="all-reduce/all-gather kernels in the block",
             why="a tensor-parallel collective serialises with attention unless overlapped"),
)


def _groups(blocks: Sequence[BlockResult], facts: HintFacts) -> list[Group]:
    by: dict[tuple[str, str], Group] = {}
    for b in blocks:
        key = (b.kind, str(b.phase))
        g = by.get(key)
        if g is None:
            label = b.kind if b.phase == "forward" else f"{b.kind} ({b.phase})"
            g = by[key] = Group(label=label, blocks=[], facts=facts.get(key) or GroupFacts(),
                                categories=dict.fromkeys(b.categories, 0.0))
        g.blocks.append(b)
        g.busy_us += b.total_us
        g.span_us += b.span_us
        g.idle_us += b.idle_us
        for c, v in b.categories.items():
            g.categories[c] = g.categories.get(c, 0.0) + v
    return sorted(by.values(), key=lambda g: (-g.busy_us, g.label))


def evaluate(facts: HintFacts | None, blocks: Sequence[BlockResult],
             rules: Sequence[HintRule] = HINT_RULES) -> list[Hint]:
    """Every rule on every block kind, in rule order then by busy time; [] when no facts were gathered."""
    if facts is None:
        return []
    groups = _groups(blocks, facts)
    out: list[Hint] = []
    for rule in rules:
        for g in groups:
            h = rule.check(g, rule)
            if h is not None:
                out.append(h)
    _mark_overlaps(out, {g.label: g.busy_us for g in groups})
    return out


def _mark_overlaps(hints: Sequence[Hint], busy_us: dict[str, float]) -> None:
    """Hints of one block kind whose savings count some of the same kernel rows, linked (a connected set each):
    every member gets the set's HintOverlap, so no reader adds up savings that share device time."""
    by_label: dict[str, list[Hint]] = {}
    for h in hints:
        if h.counted:
            by_label.setdefault(h.blocks[0], []).append(h)
    for label, hs in by_label.items():
        for members in _sharing_sets(hs):
            if len(members) > 1:
                ov = _overlap(members, label, busy_us[label])
                for h in members:
                    h.overlap = ov


def _sharing_sets(hs: Sequence[Hint]) -> list[list[Hint]]:
    """The hints in connected sets, two linked when both count time of one kernel row (in hint order)."""
    parent = list(range(len(hs)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i in range(len(hs)):
        for j in range(i + 1, len(hs)):
            if any(us > 0 and hs[j].counted.get(k, 0.0) > 0 for k, us in hs[i].counted.items()):
                parent[root(j)] = root(i)
    sets: dict[int, list[Hint]] = {}
    for i, h in enumerate(hs):
        sets.setdefault(root(i), []).append(h)
    return list(sets.values())


def _overlap(members: Sequence[Hint], label: str, busy_us: float) -> HintOverlap:
    """The union of the members' counted kernel time: each row once, at the most any member counts of it."""
    rows = list(dict.fromkeys(k for h in members for k in h.counted))  # hint order: the sums are reproducible
    most = {k: max(h.counted.get(k, 0.0) for h in members) for k in rows}
    twice = {k: sum(h.counted.get(k, 0.0) for h in members) - most[k] for k in rows}  # counted beyond the most
    union, total = sum(most.values()), sum(sum(h.counted.values()) for h in members)
    names: dict[str, float] = {}
    for k, us in twice.items():
        if us > 0:
            names[k[0]] = names.get(k[0], 0.0) + us
    return HintOverlap(rules=[h.rule for h in members], blocks=[label], sum_us=_r(total), union_us=_r(union),
                       double_counted_us=_r(total - union),
                       shared_kernels=[n[:120] for n, _ in sorted(names.items(), key=lambda kv: (-kv[1], kv[0]))],
                       busy_us=_r(busy_us), union_pct=round(100 * union / busy_us, 1) if busy_us > 0 else None).check()
