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
from collections.abc import Iterable, Sequence
from functools import lru_cache
from math import prod
from typing import NamedTuple, Protocol

import orjson

from ..hardware import DevicePeaks, lookup
from ..model import OpInputs, Trace
from ..vocab import COMPOSITE_GEMM_OPS, SHAPED_GEMM_OPS, anchored
from ..results.efficiency import HOST_ONLY, NO_FORMULA, NO_SHAPES, DeviceInfo, Efficiency
from .link import NONE, Links

__all__ = ["OpCost", "block_efficiency", "device_info", "op_cost"]

# Bytes per element of the dtype names ``Input type`` uses, and the class whose peak applies.
_DTYPES: dict[str, tuple[int, str | None]] = {
    "c10::BFloat16": (2, "bf16"), "c10::Half": (2, "fp16"), "float": (4, "fp32"), "double": (8, None),
    "c10::Float8_e4m3fn": (1, "fp8"), "c10::Float8_e5m2": (1, "fp8"), "c10::Float8_e4m3fnuz": (1, "fp8"),
    "c10::Float8_e5m2fnuz": (1, "fp8"), "signed char": (1, "int8"), "unsigned char": (1, None),
    "bool": (1, None), "short int": (2, None), "int": (4, None), "long int": (8, None),
    "c10::complex<float>": (8, None), "c10::complex<double>": (16, None),
}
_CAUSAL_FRACTION_EQUAL = 0.5


class OpCost(NamedTuple):
    """What one op call does: FLOPs, bytes moved, the dtype class whose peak applies, matrix or vector work."""

    flops: float
    bytes: float
    dtype: str | None  # "bf16", "fp16", "fp8", "int8", "fp32" (None: no peak applies, e.g. fp64)
    matrix: bool  # tensor-core work (GEMM, attention) rather than vector work


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

_ELEMENTWISE = re.compile(r"aten::(?:add|sub|mul|div|masked_fill|where|gelu|silu|relu|tanh|exp|neg|rsqrt|pow|"
                          r"sigmoid|clamp)_?")
_SOFTMAX = re.compile(r"aten::(?:softmax|_softmax|_safe_softmax|log_softmax|_log_softmax)")
_GEMM_PARENTS = COMPOSITE_GEMM_OPS
_SHAPED_GEMM = re.compile(anchored(*SHAPED_GEMM_OPS))  # einsum is matched first: it has its own formula


def _tensor(dims: list, types: list, k: int) -> tuple[list[int], int, str | None] | None:
    """Input ``k`` as (shape, element size, dtype class), or None when it is not a tensor of known dtype."""
    if k >= len(dims) or k >= len(types):
        return None
    d, t = dims[k], types[k]
    if not isinstance(d, list) or not isinstance(t, str) or t not in _DTYPES:
        return None
    if d and not all(isinstance(x, int) for x in d):
        return None
    size, cls = _DTYPES[t]
    return d, size, cls


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


def _gemm(name: str, dims: list, types: list) -> OpCost | None:
    """mm/addmm/bmm/baddbmm/addbmm/matmul/linear/_scaled_mm/_int_mm: 2·M·N·K per product, + M·N for a bias."""
    bias: tuple[list[int], int, str | None] | None = None
    if name in ("aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation"):
        bias, a, b = _tensor(dims, types, 0), _tensor(dims, types, 1), _tensor(dims, types, 2)
    else:
        a, b = _tensor(dims, types, 0), _tensor(dims, types, 1)
        if name == "aten::linear":
            bias = _tensor(dims, types, 2)
            if bias is not None and not bias[0]:
                bias = None  # an empty slot: no bias
        elif name == "aten::_scaled_mm" and len(dims) > 4:
            bias = _tensor(dims, types, 4)
    if a is None or b is None or not a[0] or not b[0]:
        return None
    sa, sb = a[0], b[0]
    if name == "aten::linear":  # x[..., K] · W[N, K]ᵀ
        if len(sb) != 2 or sa[-1] != sb[1]:
            return None
        batch, m, k, n = 1, _numel(sa[:-1]), sa[-1], sb[0]
    else:
        if len(sa) == 1:
            sa = [1, sa[0]]
        if len(sb) == 1:
            sb = [sb[0], 1]
        if sa[-1] != sb[-2]:
            return None
        m, k, n = sa[-2], sa[-1], sb[-1]
        batch = _numel(_broadcast([sa[:-2], sb[:-2]]))
        if name == "aten::addbmm":
            batch = sa[0]
    flops = 2.0 * batch * m * n * k
    out_elems = batch * m * n if name != "aten::addbmm" else m * n
    out_size = a[1] if name not in ("aten::_scaled_mm", "aten::_int_mm") else 2 if name == "aten::_scaled_mm" else 4
    nbytes = _numel(a[0]) * a[1] + _numel(b[0]) * b[1] + out_elems * out_size
    if bias is not None:
        flops += out_elems
        nbytes += _numel(bias[0]) * bias[1]
    return OpCost(flops, float(nbytes), a[2], True)


def _einsum(dims: list, types: list, concrete: list) -> OpCost | None:
    """Two or more operands: 2 FLOPs per term of the full index space (sizes of every letter multiplied)."""
    eq = concrete[0] if concrete and isinstance(concrete[0], str) else ""
    ops = dims[1] if len(dims) > 1 and isinstance(dims[1], list) else []
    tys = types[1] if len(types) > 1 else None
    if "->" not in eq or not ops or not all(isinstance(s, list) for s in ops):
        return None
    ins, out = eq.replace(" ", "").split("->")
    terms = ins.split(",")
    if len(terms) != len(ops) or "." in eq:
        return None
    size: dict[str, int] = {}
    for t, s in zip(terms, ops):
        if len(t) != len(s):
            return None
        for c, x in zip(t, s):
            size[c] = max(size.get(c, 1), x)
    elt = _DTYPES.get(tys, (2, None)) if isinstance(tys, str) else (2, None)
    space = prod(size.values())
    flops = 2.0 * space if len(ops) > 1 else float(space)
    nbytes = (sum(_numel(s) for s in ops) + _numel([size[c] for c in out])) * elt[0]
    return OpCost(flops, float(nbytes), elt[1], True)


def _causal(name: str, concrete: list, pos: int, kind: str) -> bool:
    v = concrete[pos] if pos < len(concrete) else ""
    if kind == "mask":  # custom_mask_type: 0 none, 1 causal from top-left, 2 from bottom-right
        return isinstance(v, str) and v.strip() not in ("", "0")
    return v == "True"


def _attention(name: str, dims: list, types: list, concrete: list) -> OpCost | None:
    qi, layout, cpos, ckind, backward = _ATTENTION[name]
    q, k, v = (_tensor(dims, types, qi + i) for i in range(3))
    if q is None or k is None or v is None or not (len(q[0]) == len(k[0]) == len(v[0]) == 4):
        return None
    if layout == _BHLD:
        (b, hq, lq, dqk), (_, hk, lk, _), (_, hv, _, dv) = q[0], k[0], v[0]
    else:
        (b, lq, hq, dqk), (_, lk, hk, _), (_, _, hv, dv) = q[0], k[0], v[0]
    frac = 1.0
    if _causal(name, concrete, cpos, ckind):
        if lq == lk:
            frac = _CAUSAL_FRACTION_EQUAL
        elif lq < lk:
            frac = lq / (2 * lk)  # top-left: row i sees i + 1 keys
        else:
            frac = 1 - lk / (2 * lq)
    flops = 2.0 * b * hq * lq * lk * (dqk + dv) * frac
    elem = q[1]
    io = b * hq * lq * dqk + b * hk * lk * dqk + b * hv * lk * dv + b * hq * lq * dv  # Q, K, V read; O written
    if backward:
        flops *= _BWD_FACTOR
        io *= 2  # Q, K, V, O and dO read; dQ, dK, dV written
    return OpCost(flops, float(io * elem), q[2], True)


def _tensors(dims: list, types: list) -> list[tuple[list[int], int, str | None]]:
    out = []
    for k in range(min(len(dims), len(types))):
        t = _tensor(dims, types, k)
        if t is not None and (t[0] or types[k] != "Scalar"):
            out.append(t)
    return out


def _vector(name: str, dims: list, types: list) -> OpCost | None:
    """Softmax, elementwise ops, copies and fills: bytes from the shapes, few or no FLOPs."""
    base = name[:-1] if name.endswith("_") and not name.endswith("__") else name
    if _SOFTMAX.fullmatch(name):
        x = _tensor(dims, types, 0)
        if x is None:
            return None
        n = _numel(x[0])
        return OpCost(5.0 * n, 2.0 * n * x[1], "fp32", False)
    if name in ("aten::copy_", "aten::index_put_", "aten::index_put"):
        ts = _tensors(dims, types)
        if not ts:
            return None
        dst = ts[0]
        src = ts[-1] if len(ts) > 1 else dst
        return OpCost(0.0, float(_numel(src[0]) * (src[1] + dst[1])), None, False)
    if name in ("aten::clone", "aten::contiguous", "aten::_to_copy"):
        x = _tensor(dims, types, 0)
        return None if x is None else OpCost(0.0, 2.0 * _numel(x[0]) * x[1], None, False)
    if name in ("aten::fill_", "aten::zero_"):
        x = _tensor(dims, types, 0)
        return None if x is None else OpCost(0.0, float(_numel(x[0]) * x[1]), None, False)
    if name in ("aten::cat", "aten::stack"):
        parts = dims[0] if dims and isinstance(dims[0], list) and dims[0] and isinstance(dims[0][0], list) else None
        ty = types[0] if types else None
        if parts is None or not isinstance(ty, str) or ty not in _DTYPES:
            return None
        return OpCost(0.0, 2.0 * sum(_numel(s) for s in parts) * _DTYPES[ty][0], None, False)
    if name in ("aten::dropout", "aten::native_dropout"):
        x = _tensor(dims, types, 0)
        return None if x is None else OpCost(float(_numel(x[0])), _numel(x[0]) * (2.0 * x[1] + 1), "fp32", False)
    if _ELEMENTWISE.fullmatch(base) or _ELEMENTWISE.fullmatch(name):
        ts = _tensors(dims, types)
        if not ts:
            return None
        out = _numel(_broadcast([t[0] for t in ts]))
        out_size = next((t[1] for t in ts if t[2] is not None), ts[0][1])
        if name in ("aten::masked_fill", "aten::masked_fill_") or base == "aten::where":
            out_size = ts[-1][1] if base == "aten::where" else ts[0][1]
        nbytes = sum(_numel(t[0]) * t[1] for t in ts) + out * out_size
        return OpCost(float(out), float(nbytes), "fp32", False)
    return None


@lru_cache(maxsize=8192)
def op_cost(name: str, dims_raw: bytes, types_raw: bytes, concrete_raw: bytes) -> OpCost | None:
    """FLOPs and bytes of one op call from its recorded inputs; None when no formula applies."""
    try:
        dims = orjson.loads(dims_raw) if dims_raw else []
        types = orjson.loads(types_raw) if types_raw else []
        concrete = orjson.loads(concrete_raw) if concrete_raw else []
    except orjson.JSONDecodeError:
        return None
    if not isinstance(dims, list) or not isinstance(types, list) or not isinstance(concrete, list):
        return None
    try:
        if name in _ATTENTION:
            return _attention(name, dims, types, concrete)
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
        if p in tr.op_inputs and (tr.host[p].name in _GEMM_PARENTS or tr.host[p].name in _ATTENTION) \
                and cost_of(tr, p) is not None:
            found = p
            break
        p = op_parent[p]
    for q in path:
        memo[q] = found
    return found


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
    dtype = c.dtype if c.matrix else "fp32"
    peak = peaks.tflops(dtype) if dtype else None
    if peak is None:
        e.compute_s = None
        e.reason = f"{peaks.model} has no {dtype or 'peak for this dtype'} figure"
    else:
        e.compute_s = c.flops / (peak * 1e12)
    return e


class RoleLookup(Protocol):
    """Host index -> matmul role (None for ops that are no matrix product): a list, or roles.GemmRoles."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> str | None: ...


def block_efficiency(tr: Trace, links: Links, nblocks: int, dev_owner: Sequence[int], cats: Sequence[str],
                     dev_share: Sequence[int], owned: Iterable[Sequence[int]],
                     roles: RoleLookup | None = None,
                     ) -> tuple[list[Efficiency | None], list[dict[str, Efficiency]]]:
    """Per block: the efficiency of its counted kernels, and the same per category (and per matmul role).

    ``owned`` lists each block's device events; ``dev_share[j]`` is device event ``j``'s share of its block's busy time (first-come split), so the time of
    a set of kernels is the busy union of those kernels. ``roles`` maps host index -> matmul role
    (projection/score/context/matmul-other) when known; a role's figures sit beside the categories.
    """
    effs: list[Efficiency | None] = [None] * nblocks
    by_cat: list[dict[str, Efficiency]] = [{} for _ in range(nblocks)]
    if not tr.op_inputs:
        return [Efficiency(ops=0, reason=NO_SHAPES) for _ in range(nblocks)], by_cat
    device = tr.info.gpus[0] if tr.info.gpus else None
    peaks = lookup(device)
    leaf, launcher = links.device_leaf, links.launcher
    by_launcher: dict[int, list[int]] = defaultdict(list)
    for js in owned:
        for j in js:
            lf = leaf[j]
            la = launcher[lf] if lf != NONE else NONE
            if la != NONE:
                by_launcher[la].append(j)
    own: dict[int, OpCost | None] = {la: cost_of(tr, la) for la in by_launcher}
    covered: set[int] = set()  # ops with a counted matrix-work descendant: never counted themselves
    op_parent = links.op_parent
    for la, c in own.items():
        if c is not None and c.matrix:
            p = op_parent[la]
            while p != NONE and p not in covered:
                covered.add(p)
                p = op_parent[p]
    units: dict[int, list[int]] = defaultdict(list)  # counted op -> its kernels
    memo: dict[int, int] = {}
    costs: dict[int, OpCost] = {}
    for la, js in by_launcher.items():
        c = own[la]
        if c is not None and not (c.matrix and la in covered):
            units[la].extend(js)
            costs[la] = c
            continue
        if c is not None:
            continue  # a parent whose children's products were counted
        p = _fallback(tr, op_parent, la, memo)  # the innermost enclosing GEMM/attention op with shapes
        if p != NONE and p not in covered:
            units[p].extend(js)
            costs[p] = cost_of(tr, p)  # type: ignore[assignment]
    # Sum plain numbers per (block, key) and build the few Efficiency objects at the end: per-op objects
    # would cost more than the counting itself on a big trace.
    at_peak: dict[OpCost, Efficiency] = {}  # a cost's time at peak (and reason) on this device, per distinct cost
    # One dict update per counted op, keyed by everything its figures depend on; expanded per block,
    # category and role over the (few) distinct keys at the end.
    groups: dict[tuple[int, str, str | None, OpCost], list[int]] = {}  # -> [ops, busy ns]
    n_roles = len(roles) if roles is not None else 0
    dev = tr.device
    for u, js in units.items():
        if len(js) == 1:
            longest = js[0]
            ns = dev_share[longest]
        else:
            longest = max(js, key=lambda j: dev[j].dur)
            ns = sum(dev_share[j] for j in js)
        key = (dev_owner[longest], cats[longest], roles[u] if u < n_roles else None, costs[u])  # type: ignore[index]
        g = groups.get(key)
        if g is None:
            groups[key] = [1, ns]
        else:
            g[0] += 1
            g[1] += ns
    # Plain sums per (block, key); Efficiency objects are built once per key at the end. Each part has ops > 0,
    # so the summed reason is the first part's reason that is not None (as Efficiency.add keeps it).
    sums: dict[tuple[int, str | None], list] = {}  # -> [flops, bytes, time ns, compute s, memory s, ops, reason]
    for (b, cat, role, c), (n, ns) in groups.items():
        ref = at_peak.get(c)
        if ref is None:
            ref = at_peak[c] = _unit_efficiency(c, 0, peaks, device)
        cs, ms = ref.compute_s, ref.memory_s
        part = (n * c.flops, n * c.bytes, ns, None if cs is None else n * cs, None if ms is None else n * ms, n)
        for k in (None, str(cat), str(role)) if role else (None, str(cat)):  # None: the block's own figure
            acc = sums.get((b, k))
            if acc is None:
                sums[(b, k)] = [*part, ref.reason]
                continue
            acc[0] += part[0]
            acc[1] += part[1]
            acc[2] += ns
            acc[3] = None if acc[3] is None or part[3] is None else acc[3] + part[3]
            acc[4] = None if acc[4] is None or part[4] is None else acc[4] + part[4]
            acc[5] += n
            if acc[6] is None:
                acc[6] = ref.reason
    for (b, k), (fl, by, ns, cs, ms, n, why) in sums.items():
        e = Efficiency(flops=fl, bytes=by, time_ns=ns, compute_s=cs, memory_s=ms, ops=n, reason=why)
        if k is None:
            effs[b] = e
        else:
            by_cat[b][k] = e  # plain str keys: orjson refuses str subclasses
    empty = NO_FORMULA if units else NO_SHAPES  # nothing usable anywhere: as good as no shapes recorded
    for b in range(nblocks):
        if effs[b] is None:
            effs[b] = Efficiency(ops=0, reason=empty)
    return effs, by_cat


def device_info(gpus: Sequence[str], has_device: bool) -> DeviceInfo:
    if not has_device:
        return DeviceInfo(name=None, peaks=None, reason=HOST_ONLY)
    name = gpus[0] if gpus else None
    peaks = lookup(name)
    reason = None if peaks else (f"unknown device {name!r}: no peak figures" if name else "no device name in the trace")
    return DeviceInfo(name=name, peaks=peaks, reason=reason, names=list(gpus))
