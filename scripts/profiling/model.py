"""Tiny GPT-style model with a switchable attention core, built to be profiled.

Why it looks like this:
* each block's attention runs inside record_function(f"layer{i}.attention"),
  the outermost annotation tracekit uses to find attention blocks;
* the core is split into inner scopes (qk_matmul, scale_mask, softmax,
  pv_matmul, sdpa, flex, flash_fwd, ...) whose names never contain
  "attention"/"attn", so they can never be mistaken for a block;
* the nn.Module doing the work is called `Mixer` for the same reason
  (with_modules puts module class names into the trace).
"""
from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function

# impl name -> forced SDPA backend name (None = let PyTorch pick)
SDPA_BACKENDS = {
    "sdpa": None,
    "sdpa-math": "MATH",
    "sdpa-flash": "FLASH_ATTENTION",
    "sdpa-efficient": "EFFICIENT_ATTENTION",
    "sdpa-cudnn": "CUDNN_ATTENTION",
}
EAGER_LIKE = ("eager", "autocast")  # + "quantized" on CPU (int8 linears, float attention)
# impls whose attention materialises B*H*L*L scores (memory grows with L^2)
QUADRATIC = ("eager", "sdpa-math", "quantized", "quantized-fp8", "autocast")
VOCAB = 512

_compiled_flex = None


def flex_fn(device_type: str):
    """FlexAttention callable: compiled on CUDA (fused kernel); plain call elsewhere
    (PyTorch then runs an unfused reference path, still through the flex op)."""
    global _compiled_flex
    from torch.nn.attention.flex_attention import flex_attention

    if device_type != "cuda":
        return flex_attention
    if _compiled_flex is None:
        import torch._dynamo

        # one static compile per sequence length of a sweep (the default limit is 8)
        for name in ("cache_size_limit", "recompile_limit"):
            if isinstance(getattr(torch._dynamo.config, name, None), int):
                setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
        _compiled_flex = torch.compile(flex_attention, dynamic=False)
    return _compiled_flex


class Mixer(nn.Module):
    """Multi-head causal self-attention whose core is chosen by `impl`."""

    def __init__(self, impl, d_model, heads, causal=True, window=256, variant=""):
        super().__init__()
        assert d_model % heads == 0
        self.impl, self.heads, self.causal, self.window = impl, heads, causal, window
        self.variant = variant  # e.g. "flex" / "masked" for sparse
        self.head_dim = d_model // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self._cache: dict = {}
        if impl == "flash-attn":
            from flash_attn import flash_attn_func  # optional dependency

            self._flash = flash_attn_func

    # -- masks (built once per shape, outside the timed steps after warm-up) --
    def _mask(self, kind, n, device):
        key = (kind, n, str(device))
        if key not in self._cache:
            i = torch.arange(n, device=device)
            d = i[:, None] - i[None, :]  # query index - key index
            if kind == "causal":
                m = d < 0
            elif kind == "band":
                m = (d >= self.window) | ((d < 0) if self.causal else (-d >= self.window))
            else:  # flex block mask
                from torch.nn.attention.flex_attention import create_block_mask

                w, causal = self.window, self.causal

                def mask_mod(b, h, q, kv):
                    if causal:
                        return (q >= kv) & (q - kv < w)
                    return (q - kv).abs() < w

                m = create_block_mask(mask_mod, None, None, n, n, device=str(device))
            self._cache[key] = m
        return self._cache[key]

    def forward(self, x):
        b, n, c = x.shape
        with record_function("qkv_proj"):
            qkv = self.qkv(x)
        if self.impl == "flash-attn":
            q, k, v = qkv.view(b, n, 3, self.heads, self.head_dim).unbind(2)
            with record_function("flash_fwd"):
                y = self._flash(q, k, v, causal=self.causal)
            y = y.reshape(b, n, c)
        else:
            q, k, v = (
                t.view(b, n, self.heads, self.head_dim).transpose(1, 2)
                for t in qkv.split(c, dim=2)
            )
            y = self._core(q, k, v)
            with record_function("merge_heads"):
                y = y.transpose(1, 2).contiguous().view(b, n, c)
        with record_function("out_proj"):
            return self.proj(y)

    def _core(self, q, k, v):
        impl = self.impl
        if (impl == "quantized" and q.device.type == "cuda") or impl == "quantized-fp8":
            from .quant import fp8_core, int8_core

            core = int8_core if impl == "quantized" else fp8_core
            mask = self._mask("causal", q.shape[-2], q.device) if self.causal else None
            return core(q, k, v, scale=self.scale, causal=self.causal, mask=mask)
        if impl in EAGER_LIKE or impl == "quantized":
            mask = self._mask("causal", q.shape[-2], q.device) if self.causal else None
            return self._eager(q, k, v, mask)
        if impl in SDPA_BACKENDS:
            return self._sdpa(q, k, v, SDPA_BACKENDS[impl])
        if impl == "sparse":
            if self.variant == "flex":
                bm = self._mask("flex", q.shape[-2], q.device)
                with record_function("flex"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    return flex_fn(q.device.type)(q, k, v, block_mask=bm)
            return self._eager(q, k, v, self._mask("band", q.shape[-2], q.device))
        if impl == "linear":
            return self._linear(q, k, v)
        raise ValueError(f"unknown impl {impl!r}")

    def _eager(self, q, k, v, mask):
        """Textbook attention: every step is a separate kernel (and scope)."""
        with record_function("qk_matmul"):
            att = q @ k.transpose(-2, -1)
        with record_function("scale_mask"):
            att = att * self.scale
            if mask is not None:
                att = att.masked_fill(mask, float("-inf"))
        with record_function("softmax"):
            att = F.softmax(att, dim=-1)
        with record_function("pv_matmul"):
            return att @ v

    def _sdpa(self, q, k, v, backend):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with record_function("sdpa"):
            if backend is None:
                return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
            with sdpa_kernel(getattr(SDPBackend, backend)):
                return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)

    def _linear(self, q, k, v, chunk=64, eps=1e-6):
        """Kernel-feature linear attention, phi(x) = elu(x) + 1, O(n) in sequence.

        Causal case is chunked: a quadratic (masked, no softmax) product inside
        each chunk plus a running sum of phi(k)^T v over previous chunks.
        """
        with record_function("feature_map"):
            q, k = F.elu(q) + 1, F.elu(k) + 1
        if not self.causal:
            with record_function("kv_state"):
                kv = k.transpose(-2, -1) @ v
                ksum = k.sum(dim=-2, keepdim=True)
            with record_function("normalize"):
                return (q @ kv) / ((q * ksum).sum(-1, keepdim=True) + eps)
        b, h, n, d = q.shape
        cs = min(chunk, n)
        pad = (-n) % cs
        if pad:  # zero-padded keys/values add nothing: phi is applied before padding
            q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        m = (n + pad) // cs
        qc, kc, vc = (t.reshape(b, h, m, cs, t.shape[-1]) for t in (q, k, v))
        with record_function("kv_state"):
            kv = kc.transpose(-2, -1) @ vc  # (b, h, m, d, dv) per chunk
            ks = kc.sum(-2)  # (b, h, m, d)
            # exclusive prefix sums over chunks, accumulated in >= float32
            acc = torch.promote_types(q.dtype, torch.float32)
            kv = torch.cat([torch.zeros_like(kv[:, :, :1]), kv[:, :, :-1]], 2)
            ks = torch.cat([torch.zeros_like(ks[:, :, :1]), ks[:, :, :-1]], 2)
            state = kv.cumsum(2, dtype=acc).to(q.dtype)
            kstate = ks.cumsum(2, dtype=acc).to(q.dtype)
            inter = qc @ state
            inter_z = (qc * kstate.unsqueeze(-2)).sum(-1)
        with record_function("intra_chunk"):
            s = (qc @ kc.transpose(-2, -1)).masked_fill(self._mask("causal", cs, q.device), 0)
            intra = s @ vc
            intra_z = s.sum(-1)
        with record_function("normalize"):
            y = (inter + intra) / (inter_z + intra_z + eps).unsqueeze(-1)
        return y.reshape(b, h, m * cs, -1)[:, :, :n]


class Block(nn.Module):
    def __init__(self, idx, d_model, heads, **kw):
        super().__init__()
        self.idx = idx
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.mixer = Mixer(d_model=d_model, heads=heads, **kw)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x):
        h = self.ln1(x)
        with record_function(f"layer{self.idx}.attention"):
            a = self.mixer(h)
        x = x + a
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Embeddings -> N pre-LN blocks -> final LN -> LM head (GPT-2 layout)."""

    def __init__(self, impl, layers, heads, d_model, max_seq, **kw):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(max_seq, d_model)
        self.blocks = nn.ModuleList(
            Block(i, d_model, heads, impl=impl, **kw) for i in range(layers)
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def quantize_cpu(model):
    """int8 dynamic quantization of every nn.Linear (CPU only)."""
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():  # torch.ao.quantization deprecation chatter
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)


def _autocast_dtype(device, dtype):
    if device.type == "cuda":
        return torch.bfloat16 if dtype == torch.bfloat16 else torch.float16
    return torch.bfloat16  # CPU autocast supports bf16 only


def build(impl, *, layers, heads, d_model, seq, batch, dtype, device, causal=True,
          window=256, variant="", seed=0, reference=False):
    """Return (model, forward_fn) where forward_fn() runs one inference forward pass.

    With reference=True, return (model, forward_fn, accuracy_fn): accuracy_fn()
    runs layer 0's attention block (qkv projection, core, output projection) on
    the same input as eager in float32 with the same weights, and returns
    (max abs error, cosine similarity) of this impl's output against it.
    """
    import contextlib

    torch.manual_seed(seed)
    # built on the GPU directly: CPU init of the weights would cost ~0.5 s per config
    with torch.device(device) if device.type == "cuda" else contextlib.nullcontext():
        model = TinyGPT(impl, layers, heads, d_model, seq, causal=causal, window=window,
                        variant=variant).eval()
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, VOCAB, (batch, seq), generator=g)
    ref = None
    if reference:
        import copy

        first = model.tok.weight.device
        with torch.inference_mode():  # float32, before any conversion or quantization
            x0 = model.blocks[0].ln1(model.tok(tokens[:1].to(first)) +
                                     model.pos(torch.arange(seq, device=first)))
        ref_mixer = copy.deepcopy(model.blocks[0].mixer).to("cpu")
        ref_mixer.impl = "eager"
        ref = (ref_mixer, x0.clone())
    autocast = None
    if impl == "autocast":
        model.to(device)  # fp32 weights, reduced-precision compute via autocast
        autocast = _autocast_dtype(device, dtype)
    elif impl == "quantized" and device.type != "cuda":
        model = quantize_cpu(model)  # activations stay float32
    else:
        model.to(device=device, dtype=dtype)
    tokens = tokens.to(device)

    def run(fn, *args):
        with torch.inference_mode():
            if autocast is None:
                return fn(*args)
            # no weight-cast cache: it would outlive a CUDA-graph capture (--cuda-graphs)
            with torch.autocast(device_type=device.type, dtype=autocast, cache_enabled=False):
                return fn(*args)

    def forward():
        return run(model, tokens)

    if not reference:
        return model, forward

    def accuracy():
        ref_mixer, x0 = ref
        ref_mixer.to(device)
        try:
            with torch.inference_mode():
                y_ref = ref_mixer(x0.to(device)).double()
            mixer = model.blocks[0].mixer
            fp32_model = impl == "autocast" or (impl == "quantized" and device.type != "cuda")
            x_dtype = torch.float32 if fp32_model else dtype
            # the run's own batch shape (row 0 repeated): a compiled core (flex) must not
            # recompile for a batch-1 call
            xb = x0.to(device=device, dtype=x_dtype).expand(batch, -1, -1).contiguous()
            y = run(mixer, xb)[:1].double()
            err = float((y - y_ref).abs().max())
            cos = float(torch.nn.functional.cosine_similarity(y.flatten(), y_ref.flatten(), dim=0))
            return err, cos
        finally:
            ref_mixer.to("cpu")
            ref_mixer._cache.clear()  # its L x L mask must not count in the peak memory

    return model, forward, accuracy
