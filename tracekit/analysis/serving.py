"""Where the serving attention ops record their shapes, masks and lengths, and what their calls count (issue 44).

Each op family is one :class:`Spec`: the argument positions of its schema (flash-attn's
``flash_attn_interface.py`` op registrations, aiter's ``aiter/ops/mha.py`` and ``aiter/ops/attention.py``, ATen's
``native_functions.yaml``, FlashInfer's ``flashinfer/prefill.py``), read from ``Input Dims`` (tensors) and
``Concrete Inputs`` (scalars: ``is_causal``, ``window_size_left/right``, ``max_seqlen_q/k``). The pairs a call
scores are counted by :mod:`tracekit.analysis.masks`; FLOPs are ``2·Hq·pairs·(Dqk + Dv)``, 2.5× for a backward
(flops.py's conventions).

Alignment of a causal or windowed mask when ``Lq != Lk``: bottom-right for flash-attn (>= 2.1, its README),
aiter, FlashInfer, vLLM and SGLang (all flash-attn's convention); top-left for the ATen ops (PyTorch's
``is_causal``). Self-attention varlen (one split for queries and keys) does not depend on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from .masks import Mask, Pairs, mask_pairs, paged_pairs, varlen_pairs

__all__ = ["ATEN_VARLEN", "Count", "Spec", "count", "dense_window", "spec_of", "windowed", "windowed_pairs"]

Tensor = tuple[list[int], int, "str | None"]  # (shape, element size, dtype class), as flops._tensor gives it
TensorAt = Callable[[int], "Tensor | None"]

BWD_FACTOR = 2.5  # flops.py's backward factor (flops imports this module, not the other way: a test ties them)


class Spec(NamedTuple):
    """One op family's argument positions. ``form``: "dense" ([B, L, H, D] tensors), "varlen" (packed [T, H, D]
    with ``cu``/``maxlen``), "paged" (a prefill over a paged KV cache: ``pages`` is the page-index list or block
    table), "decode" (one query per sequence over a paged cache), "single" (FlashInfer's one sequence, [L, H, D]),
    "none" (no lengths recorded: ``why``)."""

    form: str
    q: int = 0
    causal: int | None = None
    win: tuple[int | None, int | None] | None = None
    cu: tuple[int, int] | None = None
    maxlen: tuple[int, int] | None = None
    pages: int | None = None
    backward: bool = False
    bottom_right: bool = True
    why: str | None = None
    causal_int: bool = False  # FlashInfer: ``mask_mode`` 0 none, 1 causal, 2/3 a custom mask (no count)
    layout: int | None = None  # FlashInfer: the ``layout`` scalar, 0 NHD ([.., L, H, D]), 1 HND ([.., H, L, D])
    # (position, kind: "bool", "int" or "float") the recorded scalars must fit before any is read: for schemas that
    # move between releases (vLLM's FlashAttention builds), a call of another release is not counted, never misread
    scalars: tuple[tuple[int, str], ...] = ()


class Count(NamedTuple):
    """A call's count: FLOPs ``lo..hi`` (equal when exact), bytes, the dtype class; ``why`` when not exact;
    ``none`` when no FLOPs can be counted (``why`` says why)."""

    lo: float
    hi: float
    bytes: float
    dtype: str | None
    why: str | None = None
    none: bool = False


_VLLM_WHY = ("vllm::unified_attention records no sequence or context lengths (vLLM keeps them in its forward "
             "context, not in the op's arguments): query tokens known, the keys each one sees are not")
_SPECS: dict[str, Spec] = {
    "flash_attn::_flash_attn_varlen_forward": Spec("varlen", 0, 9, (10, 11), (3, 4), (5, 6), pages=15),
    "flash_attn::_flash_attn_varlen_backward": Spec("varlen", 1, 15, (16, 17), (9, 10), (11, 12), backward=True),
    "aiter::mha_varlen_fwd": Spec("varlen", 0, 12, (13, 14), (3, 4), (5, 6), pages=19),
    "aiter::fmha_v3_varlen_fwd": Spec("varlen", 0, 12, (13, 14), (3, 4), (5, 6), pages=19),
    "aiter::mha_varlen_bwd": Spec("varlen", 1, 13, (14, 15), (6, 7), (8, 9), backward=True),
    "aiter::fmha_v3_varlen_bwd": Spec("varlen", 1, 13, (14, 15), (6, 7), (8, 9), backward=True),
    "aiter::mha_fwd": Spec("dense", 0, 5, (6, 7)),
    "aiter::fmha_v3_fwd": Spec("dense", 0, 5, (6, 7)),
    "aiter::mha_bwd": Spec("dense", 1, 8, (9, 10), backward=True),
    "aiter::fmha_v3_bwd": Spec("dense", 1, 8, (9, 10), backward=True),
    "aiter::mha_batch_prefill": Spec("paged", 0, 12, (13, 14), (3, 4), (6, 7), pages=5),
    "aiter::paged_attention_ragged": Spec("decode", 2, cu=(6, 6), pages=7),
    # SGLang's profiler wrapper (sglang_profiler::attention_paged_attention_ragged_<n>) drops the scale argument
    "sglang_profiler::attention_paged_attention_ragged": Spec("decode", 2, cu=(5, 5), pages=6),
    # FlashInfer's JIT ops, flashinfer::<uri>_{ragged,paged}_run and flashinfer::single_prefill_<uri>_run (by their
    # prefix and suffix, spec_of): q, k, v, the indptrs, mask_mode, layout, window_left (left only)
    "flashinfer::ragged_run": Spec("varlen", 3, 10, (12, None), (6, 7), causal_int=True, layout=11),
    "flashinfer::paged_run": Spec("paged", 3, 12, (14, None), (6, 7), pages=8, causal_int=True, layout=13),
    "flashinfer::single_run": Spec("single", 0, 6, (8, None), causal_int=True, layout=7),
    # vLLM's FlashAttention builds (vllm-project/flash-attention: csrc/flash_attn/flash_api_torch_lib.cpp's
    # varlen_fwd, hopper/flash_api_torch_lib.cpp's fwd), run under vllm::unified_attention with the lengths it lacks
    "_vllm_fa2_C::varlen_fwd": Spec("varlen", 0, 15, (16, 17), (4, 5), (10, 11), pages=8,
                                    scalars=((10, "int"), (11, "int"), (13, "float"), (15, "bool"), (16, "int"),
                                             (17, "int"))),
    "_vllm_fa3_C::fwd": Spec("varlen", 0, 25, (26, 27), (7, 8), (12, 13), pages=14,
                             scalars=((24, "float"), (25, "bool"), (26, "int"), (27, "int"))),
    "vllm::unified_attention": Spec("none", why=_VLLM_WHY),
    "vllm::unified_attention_with_output": Spec("none", why=_VLLM_WHY),
}
# ATen's flash ops take packed [T, H, D] tokens with cum_seq_q/k (varlen) as well as [B, L, H, D]
ATEN_VARLEN: dict[str, Spec] = {
    "aten::_flash_attention_forward": Spec("varlen", 0, 8, (11, 12), (3, 4), (5, 6), bottom_right=False),
    "aten::_flash_attention_backward": Spec("varlen", 1, 11, (15, 16), (6, 7), (8, 9), backward=True,
                                            bottom_right=False),
}
# The window arguments of the dense ops tracekit.analysis.flops counts (absent in older releases), and alignment
_DENSE_WINDOW: dict[str, tuple[int, int, bool]] = {
    "flash_attn::_flash_attn_forward": (6, 7, True), "flash_attn::_flash_attn_backward": (12, 13, True),
    "aten::_flash_attention_forward": (11, 12, False), "aten::_flash_attention_backward": (15, 16, False),
}
_CAUSAL_AT = {"flash_attn::_flash_attn_forward": 5, "flash_attn::_flash_attn_backward": 11,
              "aten::_flash_attention_forward": 8, "aten::_flash_attention_backward": 11}


_FLEX_WHY = ("flex attention's block mask is a tensor (its kv_num_blocks/kv_indices values, and the mask_mod's "
             "partial blocks) the trace does not record: the pairs it scores are unknown")
_FLEX = Spec("none", why=_FLEX_WHY)


def spec_of(name: str) -> Spec | None:
    """The spec of an op name; SGLang's numbered profiler wrappers (``…_ragged_100``) by their stem; Inductor's
    flex-attention templates (``triton_tem_fused_flex_attention_0``) by their prefix."""
    got = _SPECS.get(name)
    if got is None and name.startswith("sglang_profiler::"):
        stem, _, tail = name.rpartition("_")
        got = _SPECS.get(stem) if tail.isdigit() else None
    if got is None and name.startswith("triton_tem_fused_flex_attention"):
        got = _FLEX
    if got is None and name.startswith("flashinfer::"):
        got = _flashinfer(name)
    return got


def _flashinfer(name: str) -> Spec | None:
    """FlashInfer's ops are named after their JIT module: ``flashinfer::batch_prefill_with_kv_cache_<dtypes…>_
    ragged_run`` / ``…_paged_run``, ``flashinfer::single_prefill_with_kv_cache_<…>_run`` (flashinfer/prefill.py)."""
    if name.startswith("flashinfer::batch_prefill"):
        for tail in ("ragged_run", "paged_run"):
            if name.endswith("_" + tail):
                return _SPECS["flashinfer::" + tail]
    if name.startswith("flashinfer::single_prefill") and name.endswith("_run"):
        return _SPECS["flashinfer::single_run"]
    return None


def _int(concrete: list, pos: int | None) -> int | None:
    """A recorded integer scalar (``"-1"``, ``"1024"``), None when absent or not an integer."""
    v = concrete[pos] if pos is not None and pos < len(concrete) else None
    if not isinstance(v, str) or not v.strip().lstrip("-").isdigit():
        return None
    return int(v)


def _true(concrete: list, pos: int | None) -> bool:
    v = concrete[pos] if pos is not None and pos < len(concrete) else ""
    return isinstance(v, str) and v.strip() in ("True", "true", "1")


def _causal(concrete: list, spec: Spec) -> bool:
    if spec.causal_int:
        return _int(concrete, spec.causal) == 1
    return _true(concrete, spec.causal)


def _mask(concrete: list, spec: Spec) -> Mask:
    """Causal and window from the recorded scalars: a negative window side is unlimited; causal caps the right."""
    left = right = None
    if spec.win is not None:
        left, right = _int(concrete, spec.win[0]), _int(concrete, spec.win[1])
        left = left if left is not None and left >= 0 else None
        right = right if right is not None and right >= 0 else None
    if _causal(concrete, spec):
        right = 0 if right is None else min(right, 0)
    return Mask(left, right, spec.bottom_right)


def dense_window(name: str, concrete: list) -> Mask | None:
    """The mask of a dense flash op when a window is recorded (either side >= 0), else None (no window)."""
    at = _DENSE_WINDOW.get(name)
    if at is None:
        return None
    m = _mask(concrete, Spec("dense", causal=_CAUSAL_AT[name], win=at[:2], bottom_right=at[2]))
    return m if m.left is not None or (m.right is not None and m.right > 0) else None


def _half(lq: int, lk: int, mask: Mask) -> bool:
    """A causal mask alone over a square score matrix: counted at ½ (flops.py's convention), not L(L+1)/2."""
    return lq == lk and mask.left is None and mask.right == 0


def windowed_pairs(lq: int, lk: int, mask: Mask) -> float:
    """One dense sequence's pairs: the ½ convention for a square causal mask, else the exact count."""
    return lq * lk / 2 if _half(lq, lk, mask) else float(mask_pairs(lq, lk, mask))


def _per_pair(hq: int, dqk: int, dv: int, backward: bool) -> float:
    return 2.0 * hq * (dqk + dv) * (BWD_FACTOR if backward else 1.0)


def _dense(spec: Spec, at: TensorAt, mask: Mask, bhld: bool = False) -> Count | None:
    q, k, v = at(spec.q), at(spec.q + 1), at(spec.q + 2)
    if q is None or k is None or v is None or not len(q[0]) == len(k[0]) == len(v[0]) == 4:
        return None
    if bhld:
        (b, hq, lq, dqk), (_, hk, lk, _), (_, hv, _, dv) = q[0], k[0], v[0]
    else:
        (b, lq, hq, dqk), (_, lk, hk, _), (_, _, hv, dv) = q[0], k[0], v[0]
    flops = b * windowed_pairs(lq, lk, mask) * _per_pair(hq, dqk, dv, spec.backward)
    io = b * (hq * lq * dqk + hk * lk * dqk + hv * lk * dv + hq * lq * dv) * (2 if spec.backward else 1)
    return Count(flops, flops, float(io * q[1]), q[2])


def _first(dims: list, pos: int | None) -> int | None:
    """The first dim of input ``pos`` (a cu_seqlens or page list's length), None when not a 1-D shape."""
    d = dims[pos] if pos is not None and pos < len(dims) else None
    return d[0] if isinstance(d, list) and len(d) == 1 and type(d[0]) is int else None


def _cross(batch: int, tq: int, tk: int, mq: int, mk: int, mask: Mask) -> Pairs:
    """Queries and keys split differently: exact when every length is forced, else 0 (masked) or max(Tq, Tk) (each
    row and column has a pair) up to every row seeing its widest reach."""
    if tq == batch * mq and tk == batch * mk:
        n = batch * mask_pairs(mq, mk, mask)
        return Pairs(n, n)
    lo = 0 if mask.masked else max(tq, tk)
    hi = min(tq * mk, tk * mq)
    return Pairs(lo, max(lo, hi), f"varlen: {batch} sequences of {tq} query and {tk} key tokens (split unrecorded)")


def _varlen_pairs(spec: Spec, dims: list, concrete: list, tq: int, tk: int, mask: Mask) -> Pairs | None:
    n = _first(dims, spec.cu[0] if spec.cu else None)
    mq, mk = _maxlens(spec, concrete)
    if n is None or n < 2:
        return None
    mq = mq if mq is not None else tq - n + 2  # no max_seqlen recorded (FlashInfer): the longest a split allows
    mk = mk if mk is not None else tk - n + 2
    if tq == tk and mq == mk:  # self-attention's packing: one split for both (cu_seqlens_q == cu_seqlens_k)
        return varlen_pairs(n - 1, tq, mq, mask)
    return _cross(n - 1, tq, tk, mq, mk, mask)


def _count(pairs: Pairs, q: Tensor, hq: int, dqk: int, dv: int, nbytes: float, backward: bool) -> Count:
    per = _per_pair(hq, dqk, dv, backward)
    return Count(pairs.lo * per, pairs.hi * per, float(nbytes * (2 if backward else 1)), q[2], pairs.why)


def _nhd(s: list[int], hnd: bool) -> list[int]:
    """A packed [T, H, D] shape; FlashInfer's HND layout records [H, T, D]."""
    return [s[1], s[0], s[2]] if hnd else s


def _varlen(spec: Spec, at: TensorAt, dims: list, concrete: list, mask: Mask) -> Count | None:
    q, k, v = at(spec.q), at(spec.q + 1), at(spec.q + 2)
    if q is None or k is None or v is None or len(q[0]) != 3:
        return None
    if len(k[0]) == 4 and spec.pages is not None:  # a paged cache (block_table given): the keys are not packed
        return _paged(spec, at, dims, concrete, mask)
    if len(k[0]) != 3 or len(v[0]) != 3:
        return None
    hnd = _int(concrete, spec.layout) == 1
    (tq, hq, dqk), (tk, hk, _), (_, hv, dv) = q[0], _nhd(k[0], hnd), _nhd(v[0], hnd)
    pairs = _varlen_pairs(spec, dims, concrete, tq, tk, mask)
    if pairs is None:
        return None
    nbytes = (tq * hq * (dqk + dv) + tk * (hk * dqk + hv * dv)) * q[1]
    return _count(pairs, q, hq, dqk, dv, nbytes, spec.backward)


def _cache_geometry(k: Tensor, hnd: bool = False) -> tuple[int, int, int] | None:
    """(page size, KV heads, head dim) of a paged cache: [pages, page, H, D] ([pages, H, page, D] when ``hnd``), or
    [slots, H, D] (page size 1)."""
    s = k[0]
    if len(s) == 4:
        return (s[2], s[1], s[3]) if hnd else (s[1], s[2], s[3])
    if len(s) == 3:
        return 1, s[1], s[2]
    return None


def _maxlens(spec: Spec, concrete: list) -> tuple[int | None, int | None]:
    """The recorded ``max_seqlen_q``/``max_seqlen_k`` (None where absent); decode is one query per sequence."""
    mq, mk = (_int(concrete, spec.maxlen[0]), _int(concrete, spec.maxlen[1])) if spec.maxlen else (None, None)
    return (1 if spec.form == "decode" else mq), mk


def _page_bounds(spec: Spec, dims: list, page: int, mk: int | None) -> tuple[int | None, int | None]:
    """(longest context, all contexts together) from the page list's shape: a page-index list ``[n]`` holds every
    sequence's pages (at most ``n × page`` keys in all); a block table ``[batch, pages]`` caps each sequence."""
    plist = dims[spec.pages] if spec.pages is not None and spec.pages < len(dims) else None
    if not isinstance(plist, list) or not all(type(x) is int for x in plist):
        return mk, None
    if len(plist) == 1:
        return mk, plist[0] * page
    if len(plist) == 2:
        return (plist[1] * page if mk is None else min(mk, plist[1] * page)), None
    return mk, None


def _paged(spec: Spec, at: TensorAt, dims: list, concrete: list, mask: Mask) -> Count | None:
    """A prefill (or decode) over a paged cache: queries packed, keys bounded by max_seqlen_k and the page list."""
    q, k = at(spec.q), at(spec.q + 1)
    geo = _cache_geometry(k, _int(concrete, spec.layout) == 1) if k is not None else None
    n = _first(dims, spec.cu[0] if spec.cu else None)
    if q is None or len(q[0]) != 3 or geo is None or n is None or n < 2:
        return None
    page, hk, dk = geo
    tq, hq, dqk = q[0]
    mq, mk = _maxlens(spec, concrete)
    mk, cap = _page_bounds(spec, dims, page, mk)
    pairs = paged_pairs(n - 1, tq, mq, mk, mask, cap)
    if pairs is None:
        return None
    nbytes = (tq * hq * (dqk + dk) + tq * hk * 2 * dk) * q[1]  # keys read: at least one per query token
    return _count(pairs, q, hq, dqk, dk, nbytes, spec.backward)


_CUSTOM_WHY = "a custom mask (FlashInfer mask_mode 2/3) is a tensor the trace does not record: the pairs are unknown"


def _single(spec: Spec, at: TensorAt, mask: Mask, hnd: bool) -> Count | None:
    """One sequence, FlashInfer's single prefill: q [Lq, Hq, D]; k, v [Lk, Hk, D] ([Hk, Lk, D] when ``hnd``)."""
    q, k, v = at(spec.q), at(spec.q + 1), at(spec.q + 2)
    if q is None or k is None or v is None or not len(q[0]) == len(k[0]) == len(v[0]) == 3:
        return None
    (lq, hq, dqk), (hk, lk) = q[0], ((k[0][0], k[0][1]) if hnd else (k[0][1], k[0][0]))
    dv, hv = v[0][2], hk
    flops = windowed_pairs(lq, lk, mask) * _per_pair(hq, dqk, dv, spec.backward)
    return Count(flops, flops, float((hq * lq * (dqk + dv) + lk * (hk * dqk + hv * dv)) * q[1]), q[2])


def _by_mask_mode(spec: Spec, concrete: list) -> Spec | None:
    """FlashInfer's ``mask_mode``: 0/1 the spec as it is; 2/3 (a custom mask tensor) no count, with why; not
    recorded as an integer (another release's argument order): None, no count."""
    mode = _int(concrete, spec.causal)
    if mode in (0, 1):
        return spec
    return Spec("none", spec.q, why=_CUSTOM_WHY) if mode is not None and mode >= 2 else None


def _is_float(v: str) -> bool:
    try:
        float(v)
    except ValueError:  # (a bool, an empty slot: another release's argument)
        return False
    return True


_KINDS: dict[str, Callable[[str], bool]] = {
    "bool": lambda v: v in ("True", "False"),
    "int": lambda v: v.lstrip("-").isdigit(),
    "float": _is_float,
}


def fits(spec: Spec, concrete: list) -> bool:
    """Whether the recorded scalars are of the kinds the spec's schema puts at their positions (Spec.scalars)."""
    return all(pos < len(concrete) and isinstance(v := concrete[pos], str) and _KINDS[kind](v.strip())
               for pos, kind in spec.scalars)


def count(spec: Spec, at: TensorAt, dims: list, concrete: list) -> Count | None:
    """One call's count by its spec; None when the recorded inputs do not fit it."""
    if not fits(spec, concrete):
        return None
    got = _by_mask_mode(spec, concrete) if spec.causal_int else spec
    if got is None:
        return None
    spec = got
    if spec.form == "none":
        q = at(spec.q)
        return Count(0.0, 0.0, 0.0, q[2] if q else None, spec.why, none=True)
    mask = _mask(concrete, spec)
    if spec.form == "single":
        return _single(spec, at, mask, _int(concrete, spec.layout) == 1)
    if spec.form == "dense":
        return _dense(spec, at, mask)
    if spec.form == "varlen":
        return _varlen(spec, at, dims, concrete, mask)
    return _paged(spec, at, dims, concrete, mask)


def windowed(at: TensorAt, q: int, mask: Mask, bhld: bool, backward: bool) -> Count | None:
    """A dense ATen/flash op whose recorded window binds: the exact pairs at its alignment."""
    return _dense(Spec("dense", q, backward=backward, bottom_right=mask.bottom_right), at, mask, bhld)
