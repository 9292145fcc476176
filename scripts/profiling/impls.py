"""Which attention impls exist, and whether each one runs on this device.

Why probe: forced SDPA backends, flash-attn and FlexAttention depend on the
device, dtype and head size. A tiny forward pass tells us up front, so the
sweep can skip an impl with a one-line message instead of crashing mid-run.
"""
from __future__ import annotations

import warnings

IMPLS = (
    "eager", "sdpa", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn",
    "flash-attn", "sparse", "linear", "quantized", "quantized-fp8", "autocast",
)


class Unavailable(Exception):
    """The impl cannot run here; str(exc) is the one-line reason."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    msg = text[0] if text else type(exc).__name__
    return msg if len(msg) <= 160 else msg[:157] + "..."


def _tiny_forward(impl, device, dtype, heads, head_dim, causal, window, variant, seq=16):
    import torch

    from .model import Mixer, _autocast_dtype, quantize_cpu

    torch.manual_seed(0)
    m = Mixer(impl, heads * head_dim, heads, causal=causal, window=window, variant=variant)
    autocast = None
    if impl == "quantized" and device.type != "cuda":
        m, dt = quantize_cpu(m.eval()), torch.float32
    elif impl == "autocast":
        m, dt = m.to(device), torch.float32
        autocast = _autocast_dtype(device, dtype)
    else:
        m, dt = m.to(device=device, dtype=dtype), dtype
    x = torch.randn(1, seq, heads * head_dim, device=device, dtype=dt)
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")  # SDPA explains every rejected backend
        if autocast is None:
            y = m(x)
        else:
            with torch.autocast(device_type=device.type, dtype=autocast):
                y = m(x)
    if device.type == "cuda":
        torch.cuda.synchronize()
    if not bool(torch.isfinite(y.float()).all()):
        raise RuntimeError("probe produced non-finite output")


def _need_flash_attn(device, torch):
    if device.type != "cuda":
        raise Unavailable(f"not available on {device.type}: flash-attn needs CUDA")
    try:
        import flash_attn  # noqa: F401
    except Exception as exc:  # ImportError, or a broken build
        raise Unavailable(f"flash-attn package not importable: {_first_line(exc)}")


def _need_int8_engine(device, torch):
    if device.type != "cuda":
        if "qnnpack" not in torch.backends.quantized.supported_engines and \
                "fbgemm" not in torch.backends.quantized.supported_engines:
            raise Unavailable("no int8 quantized engine in this torch build")


def _need_fp8(device, torch):
    if device.type != "cuda":
        raise Unavailable(f"not available on {device.type}: fp8 attention needs CUDA sm_89+")
    cap = torch.cuda.get_device_capability(device)
    if cap < (8, 9) or not hasattr(torch, "float8_e4m3fn"):
        raise Unavailable(f"fp8 e4m3 GEMMs need sm_89+ (this GPU is sm_{cap[0]}{cap[1]})")


# What an impl needs before a probe is worth running: each raises Unavailable with the reason a probe's own error
# would hide (a missing package, no int8 engine, a GPU too old for fp8).
_PREREQUISITES = {"flash-attn": _need_flash_attn, "quantized": _need_int8_engine, "quantized-fp8": _need_fp8}


def _try_flex(device, dtype, heads, head_dim, causal, window, sparse_mode, note):
    """The FlexAttention label when a flex probe runs; None (after a note) when `sparse_mode` allows the
    banded-mask fallback instead, and Unavailable when it was forced ("flex")."""
    try:
        # one full 128-token block: the smallest shape every flex kernel supports
        _tiny_forward("sparse", device, dtype, heads, head_dim, causal, window, "flex",
                      seq=128)
        return ("flex-compiled" if device.type == "cuda" else "flex-eager") + \
            f" w={window}"
    except Exception as exc:
        if sparse_mode == "flex":
            raise Unavailable(f"FlexAttention failed on {device.type}: {_first_line(exc)}")
        note(f"note: sparse: FlexAttention unusable on {device.type} "
             f"({_first_line(exc)}); using the banded-mask fallback")
    return None


def _label(impl, *, device, dtype, causal, window, torch, autocast_dtype):
    """The short variant label of an impl whose probe ran."""
    if impl == "sparse":
        return f"masked-band w={window}"
    if impl == "quantized":
        if device.type == "cuda":
            return f"int8 QK^T (block 64), {str(dtype).replace('torch.', '')} PV"
        return "int8-dynamic linears, fp32 attention"
    if impl == "quantized-fp8":
        return "fp8 e4m3 QK^T + PV"
    if impl == "autocast":
        return "autocast-" + ("bf16" if autocast_dtype(device, dtype) == torch.bfloat16
                              else "fp16")
    if impl.startswith("sdpa-"):
        return "forced " + impl[5:]
    return {"sdpa": "auto backend", "linear": "elu+1 chunked" if causal else "elu+1"}.get(impl, "")


def resolve(impl, *, device, dtype, heads, head_dim, causal, window, sparse_mode="auto",
            note=print):
    """Return a short variant label for `impl` on this device, or raise Unavailable.

    `note` receives informational one-liners (e.g. the sparse fallback).
    """
    import torch

    from .model import _autocast_dtype

    if impl not in IMPLS:
        raise Unavailable(f"unknown impl {impl!r}")
    if impl in _PREREQUISITES:
        _PREREQUISITES[impl](device, torch)

    variant = ""
    if impl == "sparse":
        if sparse_mode in ("auto", "flex"):
            flex = _try_flex(device, dtype, heads, head_dim, causal, window, sparse_mode, note)
            if flex is not None:
                return flex
        variant = "masked"
    try:
        _tiny_forward(impl, device, dtype, heads, head_dim, causal, window, variant)
    except Exception as exc:
        raise Unavailable(f"not available on {device.type} "
                          f"({str(dtype).replace('torch.', '')}): {_first_line(exc)}")
    return _label(impl, device=device, dtype=dtype, causal=causal, window=window, torch=torch,
                  autocast_dtype=_autocast_dtype)
