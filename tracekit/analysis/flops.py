"""FLOPs and bytes moved by the ops a trace recorded shapes for, and the efficiency they imply.

Conventions (docs/attribution.md, "Efficiency"):

* A GEMM ``[M,K]·[K,N]`` is ``2·M·N·K`` FLOPs (one multiply and one add per term), plus ``M·N`` for a
  fused bias/``beta·C`` add (addmm, baddbmm, linear with bias) -- the same count as TraceLens' perf model.
  Bytes: each operand read once and the output written once (the minimum a kernel must move).
* Attention forward is its two products, ``2·B·Hq·Lq·Lk·(Dqk + Dv)`` (``4·B·H·L²·D`` when the head dims
  agree): the FlashAttention benchmark's count, which TraceLens' perf model and PyTorch's
  ``torch/utils/flop_counter.py`` also use; softmax is left out (it is ``O(1/D)`` of that). With grouped
  KV heads (GQA) the FLOPs follow the query heads; the bytes read K and V at their own head count.
* Causal: the unmasked fraction of the ``Lq×Lk`` score matrix, top-left aligned (PyTorch's ``is_causal``):
  exactly 1/2 when ``Lq == Lk`` (the convention of FlashAttention and TraceLens, not ``(L+1)/2L``).
  Read from the op's ``is_causal`` argument (``Concrete Inputs`` at the op's schema position) or, for the
  mem-efficient kernels, ``custom_mask_type`` != 0.
* Attention backward is 2.5× the forward: five products (recompute ``QKᵀ``, then dV, dP, dQ, dK), the
  FlashAttention-2 paper's and TraceLens' count for fused kernels, which all recompute the scores.
* Eager attention counts the ``bmm``s it ran: their full ``L×L`` products, masked or not (the work done,
  not the useful work).
* Softmax: 5 FLOPs per element (max, subtract, exp, sum, divide); elementwise ops: 1 per output element;
  copies and fills: 0 FLOPs. Bytes: every tensor input read once (at its recorded shape and dtype) and the
  (broadcast) output written once.

FLOPs go to the op that launched the kernels (the launcher, :mod:`tracekit.link`); a parent op
(``aten::matmul``, ``aten::linear``, ``aten::scaled_dot_product_attention``) is counted only when none of
its descendants was, and then only for the kernels of launchers without a formula of their own -- so each
product is counted once.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import compress, repeat
from math import prod
from operator import itemgetter, lt
from typing import NamedTuple, Protocol

import orjson

from ..hardware import DevicePeaks, compute_peak, lookup
from ..model import OpInputs, Trace
from ..results.efficiency import HOST_ONLY, NO_FORMULA, NO_SHAPES, DeviceInfo, Efficiency
from ..vocab import COMPOSITE_GEMM_OPS, LOG_SOFTMAX_OPS, SHAPED_GEMM_OPS, SOFTMAX_OPS, alternation, anchored
from . import serving
from .link import NONE, Links

__all__ = ["VECTOR_RULES", "ByteRule", "OpCost", "attention_flops", "block_efficiency", "device_info", "dtype_class",
           "op_cost", "vector_rule"]

# Bytes per element of the dtype names ``Input type`` uses, and the class whose peak applies.
_DTYPES: dict[str, tuple[int, str | None]] = {
    "c10::BFloat16": (2, "bf16"), "c10::Half": (2, "fp16"), "float": (4, "fp32"), "double": (8, None),
    "c10::Float8_e4m3fn": (1, "fp8"), "c10::Float8_e5m2": (1, "fp8"), "c10::Float8_e4m3fnuz": (1, "fp8"),
    "c10::Float8_e5m2fnuz": (1, "fp8"), "signed char": (1, "int8"), "unsigned char": (1, None),
    "bool": (1, None), "short int": (2, None), "int": (4, None), "long int": (8, None),
    "c10::complex<float>": (8, None), "c10::complex<double>": (16, None),
}
_CAUSAL_FRACTION_EQUAL = 0.5
_Tensor = tuple[list[int], int, str | None]  # an input: (shape, element size, dtype class)


class OpCost(NamedTuple):
    """What one op call does: FLOPs, bytes moved, the dtype class whose peak applies, matrix or vector work."""

    flops: float
    bytes: float
    dtype: str | None  # "bf16", "fp16", "fp8", "int8", "fp32" (None: no peak applies, e.g. fp64)
    matrix: bool  # tensor-core work (GEMM, attention) rather than vector work
    flops_max: float | None = None  # the upper bound when ``kind`` is "bounds" (``flops`` the lower); else None
    kind: str = "exact"  # FLOPS_EXACT | FLOPS_BOUNDS | FLOPS_NONE (no count: ``why`` says why; flops/bytes 0)
    why: str | None = None  # why the count is bounds or none


# --- attention ops: (index of q, layout of q/k/v, index of the causal argument, kind of that argument, backward)
# Positions from the ATen schemas (native_functions.yaml) and flash-attn's op registrations.
_BHLD, _BLHD = "bhld", "blhd"
_ATTENTION: dict[str, tuple[int, str, int, str, bool]] = {
    "aten::scaled_dot_product_attention": (0, _BHLD, 5, "bool", False),
    "aten::_scaled_dot_product_flash_attention": (0, _BHLD, 4, "bool", False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (0, _BHLD, 4, "bool", False),
    "aten::_scaled_dot_product_efficient_attention": (0, _BHLD, 6, "bool", False),
    "aten::_scaled_dot_product_cudnn_attention": (0, _BHLD, 6, "bool", False),
    "aten::_scaled_dot_product_fused_attention_overrideable": (0, _BHLD, 5, "bool", False),
    "aten::_flash_attention_forward": (0, _BLHD, 8, "bool", False),
    "aten::_efficient_attention_forward": (0, _BLHD, 9, "mask", False),
    "aten::_cudnn_attention_forward": (0, _BHLD, 10, "bool", False),
    "aten::_scaled_dot_product_flash_attention_backward": (1, _BHLD, 11, "bool", True),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": (1, _BHLD, 7, "bool", True),
    "aten::_scaled_dot_product_efficient_attention_backward": (1, _BHLD, 11, "bool", True),
    "aten::_scaled_dot_product_cudnn_attention_backward": (1, _BHLD, 14, "bool", True),
    "aten::_flash_attention_backward": (1, _BLHD, 11, "bool", True),
    "aten::_efficient_attention_backward": (1, _BLHD, 14, "mask", True),
    "flash_attn::_flash_attn_forward": (0, _BLHD, 5, "bool", False),
    "flash_attn::_flash_attn_backward": (1, _BLHD, 11, "bool", True),
}
_BWD_FACTOR = 2.5

_GEMM_PARENTS = COMPOSITE_GEMM_OPS
_SHAPED_GEMM = re.compile(anchored(*SHAPED_GEMM_OPS))  # einsum is matched first: it has its own formula


def _tensor(dims: list, types: list, k: int) -> _Tensor | None:
    """Input ``k`` as (shape, element size, dtype class), or None when it is not a tensor of known dtype."""
    if k >= len(dims) or k >= len(types):
        return None
    d, t = dims[k], types[k]
    if not isinstance(d, list) or not isinstance(t, str) or t not in _DTYPES:
        return None
    if d and not all(type(x) is int and x >= 0 for x in d):  # (a negative or boolean dim: no tensor's shape)
        return None
    size, cls = _DTYPES[t]
    return d, size, cls


def dtype_class(type_name: object) -> str | None:
    """The dtype class (tracekit.hardware.DTYPES) of a recorded ``Input type`` name, or None."""
    got = _DTYPES.get(type_name) if isinstance(type_name, str) else None
    return got[1] if got else None


def _numel(shape: Sequence[int]) -> int:
    return prod(shape) if shape else 1


def _broadcast(shapes: list[list[int]]) -> list[int]:
    n = max((len(s) for s in shapes), default=0)
    out = [1] * n
    for s in shapes:
        for i, x in enumerate(s, start=n - len(s)):
            if x != 1:
                out[i] = x
    return out


# The GEMMs whose first input is the bias (added to the product), and the element size of the outputs whose dtype
# is not the inputs' (_scaled_mm writes bf16 from fp8, _int_mm int32 from int8).
_BIAS_FIRST = ("aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation")
_GEMM_OUT_SIZE = {"aten::_scaled_mm": 2, "aten::_int_mm": 4}


def _gemm_operands(name: str, dims: list, types: list) -> tuple[_Tensor | None, _Tensor | None, _Tensor | None]:
    """The two factors and the bias (None without one), by where each op records them."""
    if name in _BIAS_FIRST:
        return _tensor(dims, types, 1), _tensor(dims, types, 2), _tensor(dims, types, 0)
    a, b = _tensor(dims, types, 0), _tensor(dims, types, 1)
    if name == "aten::linear":
        bias = _tensor(dims, types, 2)
        return a, b, bias if bias is not None and bias[0] else None  # an empty slot: no bias
    if name == "aten::_scaled_mm" and len(dims) > 4:
        return a, b, _tensor(dims, types, 4)
    return a, b, None


def _linear_bmkn(sa: list[int], sb: list[int]) -> tuple[int, int, int, int] | None:
    """(batch, M, K, N) of ``linear``: x[..., K] · W[N, K]ᵀ; None when the shapes do not fit."""
    if len(sb) != 2 or sa[-1] != sb[1]:
        return None
    return 1, _numel(sa[:-1]), sa[-1], sb[0]


def _matmul_bmkn(name: str, sa: list[int], sb: list[int]) -> tuple[int, int, int, int] | None:
    """(batch, M, K, N) of a (batched) product with matmul's rules: 1-D operands promoted, batch dims broadcast;
    addbmm sums over one shared batch dim of 3-D operands (what PyTorch accepts). None when the shapes do not fit."""
    if len(sa) == 1:
        sa = [1, sa[0]]
    if len(sb) == 1:
        sb = [sb[0], 1]
    if sa[-1] != sb[-2]:
        return None
    if name != "aten::addbmm":
        return _numel(_broadcast([sa[:-2], sb[:-2]])), sa[-2], sa[-1], sb[-1]
    if len(sa) != 3 or len(sb) != 3 or sa[0] != sb[0]:
        return None
    return sa[0], sa[-2], sa[-1], sb[-1]


def _gemm(name: str, dims: list, types: list) -> OpCost | None:
    """mm/addmm/bmm/baddbmm/addbmm/matmul/linear/_scaled_mm/_int_mm: 2·M·N·K per product, + M·N for a bias."""
    a, b, bias = _gemm_operands(name, dims, types)
    if a is None or b is None or not a[0] or not b[0]:
        return None
    bmkn = _linear_bmkn(a[0], b[0]) if name == "aten::linear" else _matmul_bmkn(name, a[0], b[0])
    if bmkn is None:
        return None
    batch, m, k, n = bmkn
    flops = 2.0 * batch * m * n * k
    out_elems = batch * m * n if name != "aten::addbmm" else m * n
    out_size = _GEMM_OUT_SIZE.get(name, a[1])
    nbytes = _numel(a[0]) * a[1] + _numel(b[0]) * b[1] + out_elems * out_size
    if bias is not None:
        flops += out_elems
        nbytes += _numel(bias[0]) * bias[1]
    return OpCost(flops, float(nbytes), a[2], True)


def _einsum(dims: list, types: list, concrete: list) -> OpCost | None:
    """Two or more operands: 2 FLOPs per term of the full index space (sizes of every letter multiplied)."""
    parsed = _einsum_operands(dims, concrete)
    if parsed is None:
        return None
    eq, ops = parsed
    tys = types[1] if len(types) > 1 else None
    ins, out = eq.replace(" ", "").split("->")
    size = _letter_sizes(ins.split(","), ops)
    if size is None or "." in eq:
        return None
    elt = _DTYPES.get(tys, (2, None)) if isinstance(tys, str) else (2, None)
    space = prod(size.values())
    flops = 2.0 * space if len(ops) > 1 else float(space)
    nbytes = (sum(_numel(s) for s in ops) + _numel([size[c] for c in out])) * elt[0]
    return OpCost(flops, float(nbytes), elt[1], True)


def _einsum_operands(dims: list, concrete: list) -> tuple[str, list[list[int]]] | None:
    """The equation (concrete input 0) and the operands' shapes (Input Dims[1], a list of shapes), when both are
    recorded and the equation has an output."""
    eq = concrete[0] if concrete and isinstance(concrete[0], str) else ""
    ops = dims[1] if len(dims) > 1 and isinstance(dims[1], list) else []
    if "->" not in eq or not ops or not all(isinstance(s, list) for s in ops):
        return None
    return eq, ops


def _letter_sizes(terms: list[str], ops: list[list[int]]) -> dict[str, int] | None:
    """Each index letter's size (the largest an operand gives it: size-1 dims broadcast); None when the terms and
    the operands do not match one for one, letter for dim."""
    if len(terms) != len(ops):
        return None
    size: dict[str, int] = {}
    for t, s in zip(terms, ops):
        if len(t) != len(s):
            return None
        for c, x in zip(t, s):
            size[c] = max(size.get(c, 1), x)
    return size


def _causal(name: str, concrete: list, pos: int, kind: str) -> bool:
    v = concrete[pos] if pos < len(concrete) else ""
    if kind == "mask":  # custom_mask_type: 0 none, 1 causal from top-left, 2 from bottom-right
        return isinstance(v, str) and v.strip() not in ("", "0")
    return v == "True"


def _causal_fraction(lq: int, lk: int) -> float:
    """The share of the score matrix a causal mask keeps (top-left aligned: row i sees i + 1 keys)."""
    if lq == lk:
        return _CAUSAL_FRACTION_EQUAL
    if lq < lk:
        return lq / (2 * lk)
    return 1 - lk / (2 * lq)


def _attention_or_window(name: str, dims: list, types: list, concrete: list) -> OpCost | None:
    """A fused attention op: packed tokens (cu_seqlens) and a recorded window counted as serving ops (issue 44),
    everything else by :func:`_attention`."""
    qi, layout, _, _, backward = _ATTENTION[name]
    q = _tensor(dims, types, qi)
    if q is not None and len(q[0]) == 3 and name in serving.ATEN_VARLEN:  # packed (cu_seqlens) tokens: varlen
        return _serving(serving.ATEN_VARLEN[name], dims, types, concrete)
    if (win := serving.dense_window(name, concrete)) is not None:
        return _cost(serving.windowed(lambda j: _tensor(dims, types, j), qi, win, layout == _BHLD, backward))
    return _attention(name, dims, types, concrete)


def _attention(name: str, dims: list, types: list, concrete: list) -> OpCost | None:
    qi, layout, cpos, ckind, backward = _ATTENTION[name]
    q, k, v = (_tensor(dims, types, qi + i) for i in range(3))
    if q is None or k is None or v is None or not (len(q[0]) == len(k[0]) == len(v[0]) == 4):
        return None
    if layout == _BHLD:
        (b, hq, lq, dqk), (_, hk, lk, _), (_, hv, _, dv) = q[0], k[0], v[0]
    else:
        (b, lq, hq, dqk), (_, lk, hk, _), (_, _, hv, dv) = q[0], k[0], v[0]
    flops = attention_flops(b * hq, lq, lk, dqk, dv, causal=_causal(name, concrete, cpos, ckind), backward=backward)
    elem = q[1]
    io = b * hq * lq * dqk + b * hk * lk * dqk + b * hv * lk * dv + b * hq * lq * dv  # Q, K, V read; O written
    if backward:
        io *= 2  # Q, K, V, O and dO read; dQ, dK, dV written
    return OpCost(flops, float(io * elem), q[2], True)


FLOPS_EXACT, FLOPS_BOUNDS, FLOPS_NONE = "exact", "bounds", "none"


def _cost(c: serving.Count | None) -> OpCost | None:
    """A serving op's count as an OpCost: exact, a range (``flops`` the lower bound) or none with its reason."""
    if c is None:
        return None
    if c.none:
        return OpCost(0.0, 0.0, c.dtype, True, None, FLOPS_NONE, c.why)
    if c.hi > c.lo:
        return OpCost(c.lo, c.bytes, c.dtype, True, c.hi, FLOPS_BOUNDS, c.why)
    return OpCost(c.lo, c.bytes, c.dtype, True)


def _serving(spec: serving.Spec, dims: list, types: list, concrete: list) -> OpCost | None:
    """Varlen, paged, windowed and serving-framework attention (tracekit.analysis.serving)."""
    return _cost(serving.count(spec, lambda j: _tensor(dims, types, j), dims, concrete))


def attention_flops(batch_heads: int, lq: int, lk: int, dqk: int, dv: int, *, causal: bool, backward: bool) -> float:
    """A fused attention call's FLOPs (the module docstring's conventions): its two products over the query heads,
    the causal fraction of the score matrix, 2.5x for the backward. The one formula: the fused ops' counts and
    ``tracekit whatif``'s predictions (tracekit.analysis.whatif) both read it."""
    flops = 2.0 * batch_heads * lq * lk * (dqk + dv) * (_causal_fraction(lq, lk) if causal else 1.0)
    return flops * _BWD_FACTOR if backward else flops


def _tensors(dims: list, types: list) -> list[_Tensor]:
    """The tensor inputs of known dtype, in order; Scalars and empty slots left out."""
    out = []
    for k in range(min(len(dims), len(types))):
        t = _tensor(dims, types, k)
        if t is not None and (t[0] or types[k] != "Scalar"):
            out.append(t)
    return out


# --- vector ops: softmax, pointwise, copies and fills. Few or no FLOPs; the bytes are what matters.


def _softmax(dims: list, types: list) -> OpCost | None:
    x = _tensor(dims, types, 0)
    if x is None:
        return None
    n = _numel(x[0])
    return OpCost(5.0 * n, 2.0 * n * x[1], "fp32", False)


def _copy_into(dims: list, types: list) -> OpCost | None:
    ts = _tensors(dims, types)
    if not ts:
        return None
    dst = ts[0]
    src = ts[-1] if len(ts) > 1 else dst
    return OpCost(0.0, float(_numel(src[0]) * (src[1] + dst[1])), None, False)


def _copy_out(dims: list, types: list) -> OpCost | None:
    x = _tensor(dims, types, 0)
    return None if x is None else OpCost(0.0, 2.0 * _numel(x[0]) * x[1], None, False)


def _fill(dims: list, types: list) -> OpCost | None:
    x = _tensor(dims, types, 0)
    return None if x is None else OpCost(0.0, float(_numel(x[0]) * x[1]), None, False)


def _shape_list(x: object) -> list[list[int]] | None:
    """A non-empty list of shapes, or None: a part recorded as anything else leaves the size unknown."""
    return x if isinstance(x, list) and x and all(isinstance(p, list) for p in x) else None


def _concat(dims: list, types: list) -> OpCost | None:
    parts = _shape_list(dims[0]) if dims else None
    ty = types[0] if types else None
    if parts is None or not isinstance(ty, str) or ty not in _DTYPES:
        return None
    return OpCost(0.0, 2.0 * sum(_numel(s) for s in parts) * _DTYPES[ty][0], None, False)


def _dropout(dims: list, types: list) -> OpCost | None:
    x = _tensor(dims, types, 0)
    return None if x is None else OpCost(float(_numel(x[0])), _numel(x[0]) * (2.0 * x[1] + 1), "fp32", False)


def _pointwise(ts: list[_Tensor], out_size: int) -> OpCost:
    """1 FLOP per (broadcast) output element; each input read at its own shape, the output written once."""
    out = _numel(_broadcast([t[0] for t in ts]))
    nbytes = sum(_numel(t[0]) * t[1] for t in ts) + out * out_size
    return OpCost(float(out), float(nbytes), "fp32", False)


def _masked_fill(dims: list, types: list) -> OpCost | None:
    ts = _tensors(dims, types)
    return _pointwise(ts, ts[0][1]) if ts else None


def _where(dims: list, types: list) -> OpCost | None:
    ts = _tensors(dims, types)
    return _pointwise(ts, ts[-1][1]) if ts else None


def _elementwise(dims: list, types: list) -> OpCost | None:
    ts = _tensors(dims, types)
    return _pointwise(ts, next((t[1] for t in ts if t[2] is not None), ts[0][1])) if ts else None


@dataclass(frozen=True, slots=True)
class ByteRule:
    """One family of vector ops and its count: ``ops`` is a full-match ``re`` pattern over the op name (as
    :class:`tracekit.vocab.OpPattern`), ``cost`` reads the recorded ``Input Dims``/``Input type`` lists (None when
    they do not fit), ``why`` the fact behind the count."""

    name: str
    ops: str
    cost: Callable[[list, list], OpCost | None]
    why: str


# Ordered, first match wins. Each input is read once at its recorded shape and dtype, each output written once.
VECTOR_RULES: tuple[ByteRule, ...] = (
    ByteRule("softmax", f"(?:{alternation(SOFTMAX_OPS + LOG_SOFTMAX_OPS)})", _softmax,
             "5 FLOPs per element (max, subtract, exp, sum, divide), fp32 vector work whatever the storage dtype; "
             "the input read and the output written at its element size"),
    ByteRule("copy-into", r"aten::copy_|aten::index_put_?", _copy_into,
             "the last tensor (copy_'s src, index_put's values) is read at its element size and written into the "
             "first (self) at self's; index_put's index list is no tensor of one shape and is left out"),
    ByteRule("copy-out", r"aten::(?:clone|contiguous|_to_copy)", _copy_out,
             "a new tensor: each element read and written once, at the input's element size (the loader keeps no "
             "shapes for _to_copy/contiguous: the copy_ below them counts, vocab.SHAPED_OPS)"),
    ByteRule("fill", r"aten::(?:fill_|zero_)", _fill, "writes only: one element size per element, nothing read"),
    ByteRule("concat", r"aten::(?:cat|stack)", _concat,
             "Input Dims[0] is the list of the parts' shapes: every part read, the result written, at the dtype "
             "Input type[0] names (no count where it says 'TensorList', as recent profilers record)"),
    ByteRule("dropout", r"aten::(?:dropout|native_dropout)", _dropout,
             "1 FLOP per element; the input read, the output written and a 1-byte keep mask written"),
    ByteRule("masked-fill", r"aten::masked_fill_?", _masked_fill,
             "the output has self's dtype (the first tensor), not the bool mask's or a 0-dim value's; "
             "before 'elementwise', which would take the first floating input's size"),
    ByteRule("where", r"aten::where_?", _where,
             "where(cond, x, y): the output has the values' dtype, not the bool condition's; the last tensor "
             "stands for it; before 'elementwise'"),
    ByteRule("elementwise", r"aten::(?:add|sub|mul|div|gelu|silu|relu|tanh|exp|neg|rsqrt|pow|sigmoid|clamp)_?",
             _elementwise, "1 FLOP per output element (the broadcast of the inputs), written at the first floating "
             "input's element size (an int index or bool mask beside it is read, not the output's dtype)"),
)
_VECTOR_RE = tuple((re.compile(r.ops), r) for r in VECTOR_RULES)


@lru_cache(maxsize=4096)
def vector_rule(name: str) -> ByteRule | None:
    """The first of :data:`VECTOR_RULES` whose ops pattern matches the whole op name; None: no formula."""
    return next((r for pat, r in _VECTOR_RE if pat.fullmatch(name)), None)


def _vector(name: str, dims: list, types: list) -> OpCost | None:
    """Softmax, elementwise ops, copies and fills: bytes from the shapes, few or no FLOPs (VECTOR_RULES)."""
    rule = vector_rule(name)
    return None if rule is None else rule.cost(dims, types)


def _lists(raw: bytes) -> list | None:
    """A recorded input list parsed (empty when not recorded); None when it is not JSON or not a list."""
    try:
        x = orjson.loads(raw) if raw else []
    except orjson.JSONDecodeError:
        return None
    return x if isinstance(x, list) else None


@lru_cache(maxsize=8192)
def op_cost(name: str, dims_raw: bytes, types_raw: bytes, concrete_raw: bytes) -> OpCost | None:
    """FLOPs and bytes of one op call from its recorded inputs; None when no formula applies."""
    dims, types, concrete = _lists(dims_raw), _lists(types_raw), _lists(concrete_raw)
    if dims is None or types is None or concrete is None:
        return None
    try:
        if name in _ATTENTION:
            return _attention_or_window(name, dims, types, concrete)
        if (spec := serving.spec_of(name)) is not None:
            return _serving(spec, dims, types, concrete)
        if name == "aten::einsum":
            return _einsum(dims, types, concrete)
        if _SHAPED_GEMM.match(name):
            return _gemm(name, dims, types)
        return _vector(name, dims, types)
    except (TypeError, ValueError, IndexError):  # a shape of the wrong arity or kind: no count, never a crash
        return None


def cost_of(tr: Trace, i: int) -> OpCost | None:
    """The cost of host op ``i``, when its inputs were recorded."""
    oi: OpInputs | None = tr.op_inputs.get(i)
    if oi is None:
        return None
    return op_cost(tr.host[i].name, oi.dims, oi.types, oi.concrete)


def _fallback(tr: Trace, op_parent: Sequence[int], i: int, memo: dict[int, int]) -> int:
    """The innermost op above ``i`` that is a GEMM/attention parent with a count, or NONE; ``memo`` maps each op
    visited to the answer for itself-or-above, so that a walk up a deep tree is done once per branch."""
    path: list[int] = []
    p = op_parent[i]
    found = NONE
    while p != NONE:
        if p in memo:
            found = memo[p]
            break
        path.append(p)
        if p in tr.op_inputs and _parent_counts(tr.host[p].name) and cost_of(tr, p) is not None:
            found = p
            break
        p = op_parent[p]
    for q in path:
        memo[q] = found
    return found


def _parent_counts(name: str) -> bool:
    """Ops that count the kernels of launchers below them without a formula of their own: the composite GEMMs,
    SDPA, and the serving attention ops (vllm::unified_attention around a FlashAttention build of another
    release: its reason, rather than none)."""
    return name in _GEMM_PARENTS or name in _ATTENTION or serving.spec_of(name) is not None


def _unit_efficiency(c: OpCost, time_ns: int, peaks: DevicePeaks | None, device: str | None) -> Efficiency:
    e = Efficiency(flops=c.flops, bytes=c.bytes, time_ns=time_ns, ops=1)
    if peaks is None:
        e.compute_s = e.memory_s = None
        e.reason = f"unknown device {device!r}: no peak figures" if device else "no device name in the trace"
        return e
    e.memory_s = c.bytes / (peaks.mem_gb_per_s * 1e9)
    if c.flops == 0:
        e.compute_s = 0.0
        return e
    dtype, peak = compute_peak(peaks, c.dtype, c.matrix)  # the one peak look-up (tracekit.hardware)
    if peak is None:
        e.compute_s = None
        e.reason = f"{peaks.model} has no {dtype or 'peak for this dtype'} figure"
    else:
        e.compute_s = c.flops / (peak * 1e12)
        e.dtypes = (str(dtype),)
    return e


class RoleLookup(Protocol):
    """Host index -> matmul role (None for ops that are no matrix product): a list, or roles.GemmRoles."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> str | None: ...


# block -> (category, matmul role, index of the cost of one call) -> [calls, busy ns]
_Groups = dict[int, dict[tuple[str, str | None, int], list[int]]]


def _kernels_by_launcher(links: Links, owned: Iterable[Sequence[int]]) -> dict[int, list[int]]:
    """The blocks' device events under the host op that launched them; events with no launcher have no shapes."""
    leaf, launcher = links.device_leaf, links.launcher
    out: dict[int, list[int]] = defaultdict(list)
    for js in owned:
        for j in js:
            lf = leaf[j]
            la = launcher[lf] if lf != NONE else NONE
            if la != NONE:
                out[la].append(j)
    return out


def _covered(op_parent: Sequence[int], own: dict[int, OpCost | None]) -> set[int]:
    """The ops above a launcher that counts matrix work: counting them as well would count its product twice."""
    covered: set[int] = set()
    for la, c in own.items():
        if c is not None and c.matrix:
            p = op_parent[la]
            while p != NONE and p not in covered:
                covered.add(p)
                p = op_parent[p]
    return covered


def _own_costs(tr: Trace, launchers: Iterable[int]) -> dict[int, OpCost | None]:
    """Each launcher's cost (:func:`cost_of`, written out: one call per launcher op of a big trace)."""
    host, inputs, own = tr.host, tr.op_inputs, {}
    for la in launchers:
        oi = inputs.get(la)
        own[la] = None if oi is None else op_cost(host[la].name, oi.dims, oi.types, oi.concrete)
    return own


def _counted_ops(tr: Trace, links: Links, owned: Iterable[Sequence[int]],
                 ) -> tuple[dict[int, list[int]], dict[int, OpCost]]:
    """The ops whose formulas count the blocks' kernels, with those kernels and the cost of one call.

    A launcher with a formula counts its own kernels; one without hands them to the innermost GEMM/attention op
    above it that has one (``_fallback``), unless a descendant of that op counted its product already.
    """
    by_launcher = _kernels_by_launcher(links, owned)
    own = _own_costs(tr, by_launcher)
    op_parent = links.op_parent
    covered = _covered(op_parent, own)
    units: dict[int, list[int]] = defaultdict(list)
    costs: dict[int, OpCost] = {}
    memo: dict[int, int] = {}
    for (la, js), c in zip(by_launcher.items(), own.values()):  # (``own`` is in ``by_launcher``'s order)
        if c is not None:
            if not (c.matrix and la in covered):  # else a parent whose children's products were counted
                got = units.get(la)
                if got is None:
                    units[la] = js  # (by_launcher's own list: read no further)
                else:
                    got.extend(js)
                costs[la] = c
            continue
        p = _fallback(tr, op_parent, la, memo)
        if p != NONE and p not in covered and (cp := cost_of(tr, p)) is not None:  # _fallback only finds counted ops
            units[p].extend(js)
            costs[p] = cp
    return units, costs


def _group(tr: Trace, units: dict[int, list[int]], costs: dict[int, OpCost], dev_owner: Sequence[int],
           cats: Sequence[str], dev_share: Sequence[int], roles: RoleLookup | None) -> tuple[_Groups, list[OpCost]]:
    """Counted ops with equal figures merged, per block: ``[calls, busy ns]`` per (category, role, cost), the cost
    as an index into the distinct costs (returned beside: equal costs are one, as equal keys are one).

    One dict update per counted op, its key's parts read as columns in C; the few distinct keys are summed per
    block, category and role afterwards. An op's kernels sit in the block and category of its longest one.
    """
    us, jss = list(units), list(units.values())
    longest = list(map(itemgetter(0), jss))  # (an op with one kernel, most of them: that one)
    ns = list(map(dev_share.__getitem__, longest))
    dev = tr.device
    for k in compress(range(len(jss)), map(lt, repeat(1), map(len, jss))):  # several kernels
        js = jss[k]
        durs = [dev[j].dur for j in js]
        longest[k] = js[durs.index(max(durs))]  # (the first of the longest, as max with a key gives it)
        ns[k] = sum(map(dev_share.__getitem__, js))
    distinct, index = _distinct_costs(list(map(costs.__getitem__, us)))
    # (each column made whole before the loop: a C loop at a time runs faster than the maps interleaved)
    groups: _Groups = {}
    last, mine = NONE, {}
    for b, cat, role, cost, n in zip(list(map(dev_owner.__getitem__, longest)), list(map(cats.__getitem__, longest)),
                                     list(_roles_of(us, roles)), index, ns):
        if b != last:  # (a block's ops mostly come in a run: its dict looked up once per run)
            got = groups.get(b)
            mine = got if got is not None else groups.setdefault(b, {})
            last = b
        key = (cat, role, cost)
        g = mine.get(key)
        if g is None:
            mine[key] = [1, n]
        else:
            g[0] += 1
            g[1] += n
    return groups, distinct


def _distinct_costs(unit_costs: list[OpCost]) -> tuple[list[OpCost], list[int]]:
    """The distinct costs (equal ones are one: the first met stands for them) and each op's index into them; the
    look-up is by object first (a few objects: op_cost's cache hands the same one for the same record)."""
    distinct: list[OpCost] = []
    first: dict[OpCost, int] = {}
    by_id: dict[int, int] = {}
    for i, c in dict(zip(map(id, unit_costs), unit_costs)).items():  # (the objects, alive in ``unit_costs``)
        k = first.get(c)
        if k is None:
            k = first[c] = len(distinct)
            distinct.append(c)
        by_id[i] = k
    return distinct, list(map(by_id.__getitem__, map(id, unit_costs)))


def _roles_of(us: list[int], roles: RoleLookup | None) -> Iterable[str | None]:
    """Each op's matmul role (None where ``roles`` has none for it)."""
    n_roles = len(roles) if roles is not None else 0
    if roles is None or not us:
        return repeat(None, len(us))
    if max(us) < n_roles:
        return map(roles.__getitem__, us)
    return [roles[u] if u < n_roles else None for u in us]


_Key = Hashable  # a sum's key within its block: None (the block's own), a category or a matmul role
_Shape = list[tuple[_Key, Efficiency, list[int]]]  # a block's sums before timing: (key, figures, its groups)


def _sums(groups: _Groups, distinct: list[OpCost], peaks: DevicePeaks | None, device: str | None,
          ) -> dict[int, list[tuple[_Key, Efficiency]]]:
    """Per block: its groups summed into one Efficiency per key (None: the block's own; a category; a role), in
    the order the keys come.

    A block's figures other than time are a function of its groups' (category, role, cost, calls) in order, and
    blocks repeat them (layer after layer, step after step): they are summed once per distinct sequence
    (:func:`_shape`), and each block takes a copy timed by its own groups' busy ns (integer sums, so the copy's
    figures are the ones its own sums would have made).
    """
    shapes: dict[tuple[tuple[tuple[str, str | None, int], ...], tuple[int, ...]], _Shape] = {}
    memo = _Memo(peaks, device)
    out: dict[int, list[tuple[_Key, Efficiency]]] = {}
    for b, mine in groups.items():
        sig = (tuple(mine), tuple(map(_CALLS, mine.values())))
        shape = shapes.get(sig)
        if shape is None:
            shape = shapes[sig] = _shape(sig[0], sig[1], distinct, memo)
        nss = list(map(_BUSY, mine.values()))
        out[b] = [(k, e.timed(sum(map(nss.__getitem__, ks)))) for k, e, ks in shape]
    return out


_CALLS, _BUSY = itemgetter(0), itemgetter(1)


class _Memo:
    """What the sums look up per distinct cost: one call's figures at peak, ``n`` calls' part, a category's str."""

    def __init__(self, peaks: DevicePeaks | None, device: str | None) -> None:
        self.peaks, self.device = peaks, device
        self.parts: dict[tuple[int, int], _Part] = {}  # (id(cost), calls) -> what those calls add
        self.names: dict[str, str] = {}  # category -> its plain str (orjson)

    def part(self, c: OpCost, n: int) -> _Part:
        got = self.parts.get((id(c), n))
        if got is None:
            got = self.parts[(id(c), n)] = _part(n, c, _unit_efficiency(c, 0, self.peaks, self.device))
        return got

    def name(self, cat: str) -> str:
        got = self.names.get(cat)
        if got is None:
            got = self.names[cat] = str(cat)
        return got


def _shape(groups: tuple[tuple[str, str | None, int], ...], calls: tuple[int, ...], distinct: list[OpCost],
           memo: _Memo) -> _Shape:
    """One block's groups (``groups``: category, role, cost's index in ``distinct``; ``calls``: each one's calls)
    summed per key, with no busy time yet: (key, figures, the positions of the groups whose time the key's sum
    takes), in key order.

    Efficiency is the accumulator: one per key, updated in place (as :meth:`Efficiency.add` sums, written out:
    a method call and a part object per group would cost more than the sums). Every part has ops > 0, so the
    reason kept is the first part's that is not None.
    """
    sums: dict[_Key, Efficiency] = {}
    timed: dict[_Key, list[int]] = {}
    for i, ((cat, role, cost), n) in enumerate(zip(groups, calls)):
        c = distinct[cost]
        keys = (None, memo.name(cat), str(role)) if role else (None, memo.name(cat))
        if c.kind == FLOPS_NONE:
            _note_uncounted(sums, keys, c.why)
            continue
        _accumulate(sums, keys, n, 0, memo.part(c, n))
        for key in keys:
            timed.setdefault(key, []).append(i)
        if c.kind == FLOPS_BOUNDS:
            for key in keys:
                _add_range(sums[key], n, c, memo.peaks)
    return [(k, e, timed.get(k, [])) for k, e in sums.items()]


def _note_uncounted(sums: dict[_Key, Efficiency], keys: Sequence[_Key], why: str | None) -> None:
    """Calls with no FLOP count (issue 44: vLLM's attention records no lengths): only their reason, where nothing
    else gives one -- never a figure."""
    for key in keys:
        e = sums.setdefault(key, Efficiency())
        e.reason = e.reason or why


class _Part(NamedTuple):
    """What ``n`` calls of one cost add to a sum: FLOPs, bytes, seconds at peak (None where the device's peak is
    unknown), the reason one call's figures carry, and its dtype class (at most one: _unit_efficiency's)."""

    flops: float
    bytes: float
    compute_s: float | None
    memory_s: float | None
    reason: str | None
    dtypes: tuple[str, ...]


def _part(n: int, c: OpCost, ref: Efficiency) -> _Part:
    """``n`` calls of cost ``c`` (``ref``: one call at peak)."""
    return _Part(n * c.flops, n * c.bytes, None if ref.compute_s is None else n * ref.compute_s,
                 None if ref.memory_s is None else n * ref.memory_s, ref.reason, ref.dtypes)


def _accumulate(sums: dict[_Key, Efficiency], keys: Sequence[_Key], n: int, ns: int, part: _Part) -> None:
    """``n`` calls (what they add: ``part``) taking ``ns`` of busy time, summed into each key's Efficiency in place,
    as :meth:`Efficiency.add` sums (without a part object per group)."""
    flops, nbytes, cs, ms, reason, dtypes = part
    for key in keys:
        e = sums.get(key)
        if e is None:
            e = sums[key] = Efficiency()
        e.flops += flops
        e.bytes += nbytes
        e.time_ns += ns
        e.compute_s = None if e.compute_s is None or cs is None else e.compute_s + cs
        e.memory_s = None if e.memory_s is None or ms is None else e.memory_s + ms
        e.ops += n
    if reason is not None or dtypes:  # (else nothing to merge)
        _add_reason_and_dtype(sums, keys, reason, dtypes)


def _add_reason_and_dtype(sums: dict[_Key, Efficiency], keys: Sequence[_Key], reason: str | None,
                          dtypes: tuple[str, ...]) -> None:
    """The first reason a key gets is kept; the calls' dtype (one at most: _unit_efficiency's) joins each key's,
    sorted (as Efficiency.add merges)."""
    for key in keys:
        e = sums[key]
        if e.reason is None:
            e.reason = reason
        if dtypes and dtypes[0] not in e.dtypes:  # (a key without dtypes yet, most often: takes the call's)
            e.dtypes = tuple(sorted({*e.dtypes, *dtypes})) if e.dtypes else dtypes


def _add_range(e: Efficiency, n: int, c: OpCost, peaks: DevicePeaks | None) -> None:
    """``n`` calls counted as a range: their widths (FLOPs and seconds at peak) beside the lower bounds summed."""
    span = (c.flops_max or c.flops) - c.flops
    e.bounded += n
    e.flops_span += n * span
    peak = compute_peak(peaks, c.dtype, c.matrix)[1] if peaks is not None else None
    if peak:
        e.compute_span_s += n * span / (peak * 1e12)
    e.bounds_why = e.bounds_why or c.why


def block_efficiency(tr: Trace, links: Links, nblocks: int, dev_owner: Sequence[int], cats: Sequence[str],
                     dev_share: Sequence[int], owned: Iterable[Sequence[int]],
                     roles: RoleLookup | None = None,
                     ) -> tuple[list[Efficiency | None], list[dict[str, Efficiency]]]:
    """Per block: the efficiency of its counted kernels, and the same per category (and per matmul role).

    ``owned`` lists each block's device events; ``dev_share[j]`` is device event ``j``'s share of its block's busy
    time (first-come split), so the time of a set of kernels is the busy union of those kernels. ``roles`` maps
    host index -> matmul role (projection/score/context/matmul-other) when known; a role's figures sit beside the
    categories.
    """
    by_cat: list[dict[str, Efficiency]] = [{} for _ in range(nblocks)]
    if not tr.op_inputs:
        return [Efficiency(ops=0, reason=NO_SHAPES) for _ in range(nblocks)], by_cat
    device = tr.info.gpus[0] if tr.info.gpus else None
    units, costs = _counted_ops(tr, links, owned)
    groups, distinct = _group(tr, units, costs, dev_owner, cats, dev_share, roles)
    empty = NO_FORMULA if units else NO_SHAPES  # nothing usable anywhere: as good as no shapes recorded
    return _by_block(_sums(groups, distinct, lookup(device), device), by_cat, empty)


def _by_block(sums: dict[int, list[tuple[_Key, Efficiency]]], by_cat: list[dict[str, Efficiency]], empty: str,
              ) -> tuple[list[Efficiency | None], list[dict[str, Efficiency]]]:
    """Each block's own sum (``empty``'s reason where it has none) and its sums per category and role."""
    effs: list[Efficiency | None] = [None] * len(by_cat)
    for b, block in sums.items():
        for k, e in block:
            if k is None:
                effs[b] = e
            else:
                by_cat[b][k] = e  # type: ignore[index]
    return [e if e is not None else Efficiency(ops=0, reason=empty) for e in effs], by_cat


def device_info(gpus: Sequence[str], has_device: bool) -> DeviceInfo:
    if not has_device:
        return DeviceInfo(name=None, peaks=None, reason=HOST_ONLY).check()
    name = gpus[0] if gpus else None
    peaks = lookup(name)
    reason = None if peaks else (f"unknown device {name!r}: no peak figures" if name else "no device name in the trace")
    return DeviceInfo(name=name, peaks=peaks, reason=reason, names=list(gpus)).check()
