"""Reduced-precision cores: INT8 (SageAttention-style) and FP8 e4m3 (FlashAttention-3-style).

Why written out by hand: the point of the `quantized` impls is to show what
int8/fp8 *products* cost and how accurate they are, so every step is its own
op (and record_function scope) that tracekit can attribute. From the papers'
description, not their code:

* INT8 (SageAttention): K is smoothed by subtracting its mean over tokens (a
  constant per query row, which softmax ignores), the softmax scale is folded
  into Q, Q and K get symmetric per-block int8 scales (amax / 127), QK^T runs
  as an int8 x int8 -> int32 GEMM (torch._int_mm), is dequantized with the
  outer product of the scales, masked and softmaxed in fp32, and P V runs in
  the model dtype (bf16 on GPU).
* FP8 (FlashAttention-3's fp8 path): both products in e4m3 through
  torch._scaled_mm with per-(batch, head) tensor-wise fp32 scales; P is scaled
  by 448 (its max is <= 1) before the cast.

Shape constraints of the GEMMs (torch._int_mm: 2-D int8, m > 16, k and n
multiples of 8; torch._scaled_mm: dims multiples of 16, second operand
column-major) are met by zero-padding the token axis to a multiple of 16 (at
least 32) and slicing the padding off before the softmax, and by looping over
batch*heads (both GEMMs are 2-D only). Heads are processed in chunks so the
L x L buffers stay bounded (`chunk_elems`).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.profiler import record_function

INT8_MAX = 127.0
FP8_MAX = 448.0  # largest finite float8_e4m3fn
CHUNK_ELEMS = 1 << 28  # L x L score elements per head chunk (int32 + fp32 + fp32 + P: ~3.75 GB)


def padded_len(n: int) -> int:
    """Token count after padding for the GEMM shape rules: multiple of 16, at least 32."""
    return max(32, -(-n // 16) * 16)


def quantize_int8(x: torch.Tensor, block: int):
    """Symmetric int8 with one scale per `block` consecutive tokens (block=1: per token).

    x: (..., n, d). Returns (int8 tensor (..., n, d), fp32 per-token scales (..., n)).
    Dequantized value = q * scale; |x - q * scale| <= scale / 2.
    """
    n = x.shape[-2]
    pad = (-n) % block
    xf = x.float()
    if pad:
        xf = F.pad(xf, (0, 0, 0, pad))
    xb = xf.unflatten(-2, (-1, block))  # (..., nb, block, d)
    scale = xb.abs().amax(dim=(-2, -1), keepdim=True).clamp_min(1e-12) / INT8_MAX
    q = torch.round(xb / scale).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    tok_scale = scale.expand(*scale.shape[:-2], block, 1).flatten(-3, -2)[..., :n, 0]
    return q.flatten(-3, -2)[..., :n, :], tok_scale.contiguous()


def quantize_fp8(x: torch.Tensor, dims=(-2, -1)):
    """e4m3 with a symmetric scale (amax / 448) over `dims` (default: per matrix).

    Returns (float8_e4m3fn tensor, fp32 scales with `dims` kept as size 1).
    """
    xf = x.float()
    scale = xf.abs().amax(dim=dims, keepdim=True).clamp_min(1e-12) / FP8_MAX
    q = (xf / scale).clamp_(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


def _pad_tokens(x: torch.Tensor, n_pad: int) -> torch.Tensor:
    n = x.shape[-2]
    return F.pad(x, (0, 0, 0, n_pad - n)) if n_pad > n else x


def _causal_mask(n: int, device) -> torch.Tensor:
    i = torch.arange(n, device=device)
    return i[None, :] > i[:, None]  # key index > query index


def _chunk(n_pad: int, heads: int, chunk_elems: int) -> int:
    return max(1, min(heads, chunk_elems // (n_pad * n_pad)))


_ROW_MAJOR_B = False  # set if this build rejects a column-major second operand


def _int_mm_into(a, b_rows, out):
    """out = a @ b_rows^T in int32 (torch._int_mm), b_rows: (n, k) row-major."""
    global _ROW_MAJOR_B
    if not _ROW_MAJOR_B:
        try:
            return torch._int_mm(a, b_rows.transpose(0, 1), out=out)
        except RuntimeError:
            _ROW_MAJOR_B = True
    return torch._int_mm(a, b_rows.transpose(0, 1).contiguous(), out=out)


_SCALE_1D = False  # set if this build wants 1-element 1-D scale tensors, not 0-d


def _scaled_mm(a, b, sa, sb, out_dtype):
    """torch._scaled_mm with tensor-wise fp32 scales, whichever scale shape the build wants."""
    global _SCALE_1D
    if not _SCALE_1D:
        try:
            return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=out_dtype)
        except (RuntimeError, TypeError) as exc:
            first = exc
            _SCALE_1D = True
        try:
            return torch._scaled_mm(a, b, scale_a=sa.reshape(1), scale_b=sb.reshape(1),
                                    out_dtype=out_dtype)
        except (RuntimeError, TypeError):
            _SCALE_1D = False
            raise first from None
    return torch._scaled_mm(a, b, scale_a=sa.reshape(1), scale_b=sb.reshape(1),
                            out_dtype=out_dtype)


_SCALE_ROW = 16  # floats: 64 bytes between heads' scales


def _aligned_scales(s):
    """Per-head scales as (heads, 16) rows, each head's scale at [i, 0].

    Why: cuBLASLt rejects a scale pointer that is not 16-byte aligned
    (CUBLAS_STATUS_NOT_SUPPORTED on an H200, torch 2.11 + CUDA 13), and ``s[i]`` of a flat
    fp32 vector sits 4*i bytes into it.
    """
    return s.reshape(-1, 1).expand(-1, _SCALE_ROW).contiguous()


def int8_core(q, k, v, *, scale=None, causal=True, block=64, chunk_elems=CHUNK_ELEMS, mask=None):
    """INT8 QK^T (torch._int_mm) + fp32 softmax + P V in v.dtype. q, k, v: (b, h, n, d)."""
    b, h, n, d = q.shape
    dv = v.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    n_pad = padded_len(n)
    bh = b * h
    with record_function("quantize_qk"):
        k = k - k.mean(dim=-2, keepdim=True)  # smoothing: softmax-invariant
        q8, sq = quantize_int8(q.float() * scale, block)
        k8, sk = quantize_int8(k, block)
        q8 = _pad_tokens(q8, n_pad).reshape(bh, n_pad, d).contiguous()
        k8 = _pad_tokens(k8, n_pad).reshape(bh, n_pad, d).contiguous()
        sq, sk = sq.reshape(bh, n), sk.reshape(bh, n)
    if causal and mask is None:
        mask = _causal_mask(n, q.device)
    v3 = v.reshape(bh, n, dv)
    out = torch.empty(bh, n, dv, dtype=v.dtype, device=v.device)
    c = _chunk(n_pad, bh, chunk_elems)
    for i0 in range(0, bh, c):
        i1 = min(bh, i0 + c)
        with record_function("qk_matmul"):
            s32 = torch.empty(i1 - i0, n_pad, n_pad, dtype=torch.int32, device=q.device)
            for i in range(i0, i1):
                _int_mm_into(q8[i], k8[i], s32[i - i0])
        with record_function("dequant_mask"):
            # int32 * fp32 promotes to fp32: the dequantisation is the first float pass
            s = torch.mul(s32[:, :n, :n], sq[i0:i1, :, None])
            del s32
            s.mul_(sk[i0:i1, None, :])
            if mask is not None:
                s.masked_fill_(mask, float("-inf"))
        with record_function("softmax"):
            p = F.softmax(s, dim=-1).to(v.dtype)
            del s
        with record_function("pv_matmul"):
            torch.bmm(p, v3[i0:i1], out=out[i0:i1])
    return out.view(b, h, n, dv)


def fp8_core(q, k, v, *, scale=None, causal=True, chunk_elems=CHUNK_ELEMS, mask=None,
             out_dtype=None):
    """FP8 e4m3 QK^T and P V (torch._scaled_mm), fp32 softmax. q, k, v: (b, h, n, d)."""
    b, h, n, d = q.shape
    dv = v.shape[-1]
    out_dtype = out_dtype or (v.dtype if v.dtype in (torch.bfloat16, torch.float16)
                              else torch.bfloat16)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    n_pad = padded_len(n)
    bh = b * h
    with record_function("quantize_qkv"):
        k = k - k.mean(dim=-2, keepdim=True)  # smoothing, as for int8
        # zero-pad in float before the casts: fewer ops on float8 tensors (zeros stay zeros)
        q8, sq = quantize_fp8(_pad_tokens(q.float() * scale, n_pad))
        k8, sk = quantize_fp8(_pad_tokens(k, n_pad))
        v8, sv = quantize_fp8(_pad_tokens(v, n_pad))
        q8 = q8.reshape(bh, n_pad, d)
        k8 = k8.reshape(bh, n_pad, d)
        # second operand of P V must be column-major: store V^T row-major, use its .t()
        v8t = v8.reshape(bh, n_pad, dv).transpose(1, 2).contiguous()
        sq, sk, sv = (_aligned_scales(x.reshape(bh)) for x in (sq, sk, sv))
        # torch.full, not torch.tensor: no host-to-device copy, so CUDA-graph capturable
        p_scale = torch.full((), 1.0 / FP8_MAX, dtype=torch.float32, device=q.device)
    if causal and mask is None:
        mask = _causal_mask(n, q.device)
    out = torch.empty(bh, n, dv, dtype=out_dtype, device=v.device)
    c = _chunk(n_pad, bh, chunk_elems)
    for i0 in range(0, bh, c):
        i1 = min(bh, i0 + c)
        with record_function("qk_matmul"):
            s = torch.empty(i1 - i0, n_pad, n_pad, dtype=torch.bfloat16, device=q.device)
            for i in range(i0, i1):
                s[i - i0] = _scaled_mm(q8[i], k8[i].transpose(0, 1), sq[i, 0], sk[i, 0],
                                       torch.bfloat16)
        with record_function("scale_mask"):
            s = s[:, :n, :n].float()
            if mask is not None:
                s.masked_fill_(mask, float("-inf"))
        with record_function("softmax"):
            p = F.softmax(s, dim=-1)
            del s
        with record_function("quantize_p"):
            p8 = F.pad(p * FP8_MAX, (0, n_pad - n, 0, n_pad - n)).to(torch.float8_e4m3fn)
            del p
        with record_function("pv_matmul"):
            for i in range(i0, i1):
                out[i] = _scaled_mm(p8[i - i0], v8t[i].transpose(0, 1), p_scale, sv[i, 0],
                                    out_dtype)[:n]
    return out.view(b, h, n, dv).to(v.dtype)


def reference_core(q, k, v, *, scale=None, causal=True):
    """Float64 textbook attention: the yardstick for the tests."""
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    q, k, v = q.double(), k.double(), v.double()
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(_causal_mask(q.shape[-2], q.device), float("-inf"))
    return F.softmax(s, dim=-1) @ v
