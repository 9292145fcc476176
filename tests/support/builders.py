"""Tiny Kineto-shaped traces built in Python, so each unit test knows its answer by construction."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

CPU_PID, TID, GPU_PID, STREAM = 100, 1, 0, 7


class TraceBuilder:
    """Add host ops, launches and kernels with explicit times (µs); ``build()`` gives the JSON dict."""

    def __init__(self, **top):
        self.events: list[dict] = []
        self.top = {"schemaVersion": 1, **top}
        self._corr = 1000
        self._ext = 1

    def _x(self, cat, name, ts, dur, pid, tid, **args):
        ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
        self.events.append(ev)
        return ev

    def op(self, name, ts, dur, tid=TID, cat="cpu_op"):
        self._ext += 1
        return self._x(cat, name, ts, dur, CPU_PID, tid, **{"External id": self._ext})

    def annotation(self, name, ts, dur, tid=TID):
        return self.op(name, ts, dur, tid, cat="user_annotation")

    def module(self, name, ts, dur, tid=TID):
        return self._x("python_function", f"nn.Module: {name}", ts, dur, CPU_PID, tid)

    def launch(self, name, ts, dur, kernel_ts, kernel_dur, kind="kernel", stream=STREAM, tid=TID,
               launch_name="cudaLaunchKernel", ext=None, corr=None):
        """A runtime call at ``ts`` and the device event it starts at ``kernel_ts``."""
        self._corr += 1
        c = corr if corr is not None else self._corr
        e = ext if ext is not None else self._ext
        self._x("cuda_runtime", launch_name, ts, dur, CPU_PID, tid, correlation=c, **{"External id": e})
        return self._x(kind, name, kernel_ts, kernel_dur, GPU_PID, stream, correlation=c, device=0,
                       stream=stream, **{"External id": e})

    def device_only(self, name, ts, dur, kind="kernel", stream=STREAM, corr=1, ext=0):
        args = {"correlation": corr, "device": 0, "stream": stream}
        if ext:
            args["External id"] = ext
        return self._x(kind, name, ts, dur, GPU_PID, stream, **args)

    def gpu_annotation(self, name, ts, dur, ext, stream=STREAM):
        return self._x("gpu_user_annotation", name, ts, dur, GPU_PID, stream, **{"External id": ext})

    def memory(self, ts, nbytes, device_type=1, tid=TID, total=None):
        """An allocator event; ``total`` is its ``Total Allocated`` (bytes after it), left out when None."""
        args = {"Bytes": nbytes, "Device Type": device_type}
        if total is not None:
            args["Total Allocated"] = total
        self.events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": CPU_PID,
                            "tid": tid, "ts": ts, "args": args})

    def flow(self, fid, start, ts, tid=TID):
        ev = {"ph": "s" if start else "f", "cat": "fwdbwd", "name": "fwdbwd", "id": fid, "pid": CPU_PID,
              "tid": tid, "ts": ts}
        if not start:
            ev["bp"] = "e"
        self.events.append(ev)

    def build(self) -> dict:
        return {**self.top, "traceEvents": list(self.events)}

    def write(self, path: Path, gz: bool | None = None) -> Path:
        data = json.dumps(self.build()).encode()
        if gz if gz is not None else str(path).endswith(".gz"):
            data = gzip.compress(data)
        Path(path).write_bytes(data)
        return Path(path)


def attention_block(b: TraceBuilder, t0: float, name="layer0.attention", ext_link=False):
    """An eager attention block on one stream with a known answer.

    Device: bmm 10 µs, softmax 5 µs, div 2 µs (elementwise), copy 3 µs (memory), bmm 10 µs,
    plus a cuBLAS workspace memset (1 µs) launched by aten::bmm → memory (a fill). Gaps: 1 µs idle each.
    Busy 31 µs: matmul 20, softmax 5, elementwise 2, memory 4. Device span 36 µs (five 1-µs gaps); the block's span,
    host and device, 136 µs.
    """
    b.annotation(name, t0, 60)
    k = t0 + 100  # device work runs later than the host side, as it does on real GPUs
    b.op("aten::bmm", t0 + 1, 8)
    b.launch("Memset (Device)", t0 + 2, 1, k, 1, kind="gpu_memset")
    b.launch("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)",
             t0 + 4, 2, k + 2, 10)
    b.op("aten::div", t0 + 10, 5)
    b.launch("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
             "at::native::binary_internal::DivFunctor<float> > >(int, float)", t0 + 11, 2, k + 13, 2)
    b.op("aten::_softmax", t0 + 20, 6)
    b.launch("void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*)",
             t0 + 21, 2, k + 16, 5)
    b.op("aten::copy_", t0 + 30, 6)
    b.launch("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
             "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const>(int)",
             t0 + 31, 2, k + 22, 3)
    b.op("aten::bmm", t0 + 40, 8)
    b.launch("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_nn_align8>(Params)",
             t0 + 41, 2, k + 26, 10)


# attention_block's six kernels: (start after t0, µs) each; 31 µs busy in all.
ATTENTION_BLOCK_BUSY = 31.0  # µs
ATTENTION_BLOCK_KERNELS = [(100, 1), (102, 10), (113, 2), (116, 5), (122, 3), (126, 10)]


def host_core(b: TraceBuilder, t: float) -> None:
    """Host-only softmax and PV ops at ``t`` (no kernels, 1 µs in all): after a range's QKᵀ product they
    make its attention core (issue 22: a range without one is no block), adding no device time."""
    b.op("aten::_softmax", t, 0.4)
    b.op("aten::bmm", t + 0.5, 0.4)


# -- CUDA/HIP graphs (issue 23) ------------------------------------------------------------------------------------
GEMM_K = "Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_K1"  # a hipBLASLt GEMM (matmul)
SOFTMAX_K = "void (anonymous namespace)::softmax_warp_forward<c10::Half, c10::Half, float, 8, false, false>(c10::Half*)"
GEMM2_K = "Cijk_Alik_Bljk_HHS_BH_MT64x64x64_MI32x32x8x1_SN_K1"
FILL_K = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::Half>>(int)"


def captured_attention(b: TraceBuilder, t0: float, kernels=(GEMM_K, SOFTMAX_K, GEMM2_K), name="Attention",
                       launch_name="hipLaunchKernel", named=True, dims=None) -> None:
    """One attention module captured into a graph: bmm → softmax → bmm ops, each launching one kernel that is
    recorded, not run (a runtime call naming its kernel, as HIP's do, and no device event). 30 µs of host time."""
    b.module(name, t0, 30)
    for k, (op, kernel) in enumerate(zip(("aten::bmm", "aten::_softmax", "aten::bmm"), kernels)):
        ev = b.op(op, t0 + 1 + 9 * k, 8)
        if dims is not None:
            ev["args"]["Input Dims"] = dims[k]
        b._corr += 1
        args = {"correlation": b._corr, "External id": b._ext}
        if named:
            args["kernel"] = kernel
        b._x("cuda_runtime", launch_name, t0 + 2 + 9 * k, 2, CPU_PID, TID, **args)


def capture(b: TraceBuilder, t0: float, layers: int, dur: float | None = None, **kw) -> float:
    """A stream capture of ``layers`` attention modules from ``t0``; returns its end."""
    b._x("cuda_runtime", "hipStreamBeginCapture", t0, 1, CPU_PID, TID, correlation=0)
    for i in range(layers):
        captured_attention(b, t0 + 2 + 40 * i, name=f"Attention_{i}", **kw)
    end = t0 + 2 + 40 * layers + 1 if dur is None else t0 + dur
    b._x("cuda_runtime", "hipStreamEndCapture", end, 1, CPU_PID, TID, correlation=0)
    b._x("cuda_runtime", "hipGraphInstantiateWithFlags", end + 2, 5, CPU_PID, TID, correlation=0)
    return end + 8


def graph_launch(b: TraceBuilder, ts: float, kernels, launch_name="hipGraphLaunch") -> None:
    """One graph launch at ``ts`` and the device events it ran: ``kernels`` is (name, start, dur[, kind])."""
    b._corr += 1
    b._x("cuda_runtime", launch_name, ts, 5, CPU_PID, TID, correlation=b._corr)
    for k in kernels:
        name, start, dur = k[:3]
        kind = k[3] if len(k) > 3 else "kernel"
        b._x(kind, name, start, dur, GPU_PID, STREAM, correlation=b._corr, device=0, stream=STREAM)


GRAPH_KERNELS = (GEMM_K, SOFTMAX_K, GEMM2_K)  # one captured attention layer's kernels
GRAPH_DURS = (10, 5, 8)  # and their µs


def replay_kernels(t0: float, layers: int, kernels=(GEMM_K, SOFTMAX_K, GEMM2_K), durs=(10, 5, 8), gap=1.0):
    """The device events of ``layers`` replayed attention calls from ``t0``: each call's kernels back to back with
    ``gap`` µs between kernels. Returns (events, end)."""
    out, t = [], t0
    for _ in range(layers):
        for name, d in zip(kernels, durs):
            out.append((name, t, d))
            t += d + gap
    return out, t


# ---------------------------------------------------------------------------------------------
# Whole traces that more than one test file builds


def golden_trace(path: Path) -> Path:
    """The trace behind tests/golden/attribute.json (scripts/regen_golden.py builds it too)."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}], cuda_runtime_version=12040,
                     metadata={"env": {"HF_TOKEN": "hf_secretsecretsecretsecret"}})
    b.annotation("ProfilerStep#7", 900, 1000)
    for k in range(2):
        attention_block(b, 1000 + 200 * k, name=f"layer{k}.attention")
    return b.write(path)


def rank_trace(path: Path, blocks: int, rank: int | None = None) -> Path:
    """``blocks`` eager attention blocks, 1 ms apart; ``distributedInfo.rank`` when ``rank`` is given."""
    top = {} if rank is None else {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 8}}
    b = TraceBuilder(**top)
    for i in range(blocks):
        attention_block(b, 1000.0 * i, name=f"layer{i}.attention")
    return b.write(path)


STEP_LAYERS = {1: 1, 2: 3, 3: 2}  # ProfilerStep#N: its layers; step windows 200, 600, 400 µs long


def steps_trace(path: Path, step_layers: dict[int, int] = STEP_LAYERS, gap: float = 50) -> tuple[Path, dict]:
    """Steps of different lengths (200 µs per layer), ``gap`` µs apart; returns the path and each block's t0."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    t, starts = 0.0, {}
    for step, layers in step_layers.items():
        b.annotation(f"ProfilerStep#{step}", t, 200 * layers)
        for i in range(layers):
            starts[(step, i)] = t + 200 * i + 1
            attention_block(b, starts[(step, i)], name=f"layer{i}.attention")
        t += 200 * layers + gap
    return b.write(path), starts


def eager_trace(path: Path, layers: int, steps: int = 2, names: tuple[str, ...] = ()) -> Path:
    """``steps`` ProfilerSteps of ``layers`` eager blocks (31 µs busy each: matmul 20, softmax 5, elementwise 2,
    memory 4)."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    t = 0
    for s in range(steps):
        b.annotation(f"ProfilerStep#{s + 1}", t, 400 * layers)
        for i in range(layers):
            attention_block(b, t + 1 + 400 * i, name=names[i] if i < len(names) else f"layer{i}.attention")
        t += 400 * layers + 10
    return b.write(path)


def graph_pair(tmp_path: Path, layers: int = 2, **kw) -> tuple[Path, Path, float]:
    cap = TraceBuilder()
    capture(cap, 0, layers, **kw)
    rep = TraceBuilder()
    ks, _ = replay_kernels(1000, layers, GRAPH_KERNELS, GRAPH_DURS)
    graph_launch(rep, 990, ks)
    total = sum(k[2] for k in ks)
    return rep.write(tmp_path / "replay.json"), cap.write(tmp_path / "capture.json"), total


def eager_layers(b: TraceBuilder, layers: int) -> float:
    """The same attention modules run eagerly: each kernel waits 30 µs for its launch. Returns the summed spans."""
    spans = 0.0
    for i in range(layers):
        t0 = 200 * i
        b.module(f"Attention_{i}", t0, 100)
        ops = ("aten::bmm", "aten::_softmax", "aten::bmm")
        for k, (op, kernel, d) in enumerate(zip(ops, GRAPH_KERNELS, GRAPH_DURS)):
            b.op(op, t0 + 1 + 30 * k, 25)
            b.launch(kernel, t0 + 2 + 30 * k, 2, t0 + 5 + 30 * k, d)
        spans += (t0 + 100) - t0  # the module's host extent encloses its kernels (last ends at t0 + 73)
    return spans


# ---------------------------------------------------------------------------------------------
# Small pieces for traces built test by test


def attribute_built(tmp_path: Path, b: TraceBuilder):
    """``b`` written to ``tmp_path/t.json`` and attributed, its invariants checked."""
    from tracekit import analyze

    return analyze(b.write(tmp_path / "t.json")).check()


def with_dims(ev: dict, dims: list, types: list) -> dict:
    """``ev`` (an op) with recorded shapes: its ``Input Dims`` and ``Input type``."""
    ev["args"].update({"Input Dims": dims, "Input type": types})
    return ev


def replay_graph(b: TraceBuilder, kernels: list[tuple[str, float]], t0: float, host_ts: float = 1) -> None:
    """One cudaGraphLaunch replaying ``kernels`` back to back from ``t0``: no host op of their own."""
    b.op("model_runner_forward", host_ts, 50)
    t = t0
    for k, (name, dur) in enumerate(kernels):
        if k == 0:
            b.launch(name, host_ts + 1, 5, t, dur, launch_name="cudaGraphLaunch", corr=77)
        else:
            b.device_only(name, t, dur, corr=77)
        t += dur + 1


CUTLASS_BF16_GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"


def repeat_kv_block(b: TraceBuilder, shape: list[int]) -> None:
    """HF repeat_kv's ops (reshape → clone of an expand of ``shape`` → copy_, one 20 µs copy kernel) beside a
    bmm → softmax → mm attention pattern inside layer0.attention."""
    copy = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
            "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const>(int)")
    b.annotation("layer0.attention", 0, 200)
    b.op("aten::bmm", 0.2, 0.5)
    b.op("aten::reshape", 1, 30)
    b.op("aten::clone", 2, 28)["args"].update({"Input Dims": [shape, []], "Input type": ["c10::BFloat16", "Scalar"]})
    b.op("aten::copy_", 3, 20)["args"].update({"Input Dims": [shape, shape, []]})
    b.launch(copy, 4, 1, 1000, 20)
    b.op("aten::_softmax", 36, 2)
    b.op("aten::mm", 40, 8)
    b.launch(CUTLASS_BF16_GEMM, 41, 1, 1020, 20)


def two_fp32_products(b: TraceBuilder) -> None:
    """A block (mm → softmax → mm) whose two mm calls have fp32 inputs ([2,3]·[3,4], then [2,4]·[4,5]), each
    launching one GEMM kernel; the softmax has recorded shapes too (a counted vector op) and launches a softmax
    kernel."""
    b.annotation("layer0.attention", 0, 200)
    with_dims(b.op("aten::mm", 10, 8), [[2, 3], [3, 4]], ["float", "float"])
    b.launch(CUTLASS_BF16_GEMM, 11, 1, 1000, 20)
    with_dims(b.op("aten::_softmax", 30, 8), [[2, 4], [], []], ["float", "Scalar", "Scalar"])
    b.launch("void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*)",
             31, 1, 1030, 5)
    with_dims(b.op("aten::mm", 50, 8), [[2, 4], [4, 5]], ["float", "float"])
    b.launch(CUTLASS_BF16_GEMM, 51, 1, 1040, 20)


# -- attention layers (issue 38, class 4) ------------------------------------------------------------------------
LAYER_GEMM_K = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
LAYER_FLASH_K = "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4> >(Params)"
LAYER_SILU_K = ("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)"
                "::{lambda()#1}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, float)")


def projection(b: TraceBuilder, t: float, name: str = "Linear_0", kernel_at: float | None = None,
               kernel_us: float = 0) -> None:
    """An ``nn.Linear`` call at host time ``t`` (4 µs: aten::linear 3 µs, no children), launching one GEMM of
    ``kernel_us`` at ``kernel_at`` when given (a CPU-only trace has none)."""
    b.module(name, t, 4)
    b.op("aten::linear", t + 0.5, 3)
    if kernel_at is not None:
        b.launch(LAYER_GEMM_K, t + 1, 1, kernel_at, kernel_us)


def sdpa_core(b: TraceBuilder, t: float, name: str = "CoreAttention_0", kernel_at: float | None = None,
              kernel_us: float = 0) -> None:
    """An attention module at host time ``t`` (6 µs) around one SDPA op (5 µs, no children): the core a block is
    made of, launching one flash kernel of ``kernel_us`` at ``kernel_at`` when given."""
    b.module(name, t, 6)
    b.op("aten::scaled_dot_product_attention", t + 0.5, 5)
    if kernel_at is not None:
        b.launch(LAYER_FLASH_K, t + 1, 1, kernel_at, kernel_us)


def llama_layer(b: TraceBuilder, t: float = 0, k: float = 1000, n: int = 0, q_us: float = 10) -> None:
    """DecoderLayer ⊃ [SelfAttn ⊃ (q_proj GEMM ``q_us``, core flash 20 µs, o_proj GEMM 7 µs), LlamaMLP ⊃ (GEMM 30 µs,
    silu 3 µs)], device kernels back to back from ``k`` (1 µs apart). The block is CoreAttention (20 µs), its
    layer SelfAttn: ``q_us`` + 27 µs busy, of which ``q_us`` + 7 µs projection GEMMs; the MLP is outside it."""
    b.module(f"DecoderLayer_{n}", t, 100)
    b.module(f"SelfAttn_{n}", t + 1, 40)
    projection(b, t + 2, f"Linear_{3 * n}", k, q_us)
    sdpa_core(b, t + 10, f"CoreAttention_{n}", k + q_us + 1, 20)
    projection(b, t + 20, f"Linear_{3 * n + 1}", k + q_us + 22, 7)
    b.module(f"LlamaMLP_{n}", t + 50, 40)
    projection(b, t + 51, f"Linear_{3 * n + 2}", k + q_us + 30, 30)
    b.op("aten::silu", t + 56, 3)
    b.launch(LAYER_SILU_K, t + 57, 1, k + q_us + 61, 3)


# -- a calibrated eager block for `tracekit whatif` and the report's "What if" section (issue 39) ------------------
WHATIF_MASK_K = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
                 "at::native::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}>(int)")
WHATIF_SOFTMAX_K = ("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 8, false, "
                    "false>(x)")
# (op, kernel, µs): each op launches one kernel, back to back on one stream, so the busy shares are the durations;
# the eager core is the score product, the mask, the softmax and the context product (105 of 165 µs).
WHATIF_OPS = (("proj", CUTLASS_BF16_GEMM, 30.0), ("score", CUTLASS_BF16_GEMM, 40.0), ("mask", WHATIF_MASK_K, 10.0),
              ("soft", WHATIF_SOFTMAX_K, 25.0), ("context", CUTLASS_BF16_GEMM, 30.0), ("out", CUTLASS_BF16_GEMM, 30.0))


def whatif_trace(path: Path, steps: int = 2, name: str = "layer0.attention", softmax_kernel: str = WHATIF_SOFTMAX_K,
                 device: str = "NVIDIA H200", dims: bool = True) -> Path:
    """``steps`` ProfilerSteps of one eager attention block on ``device`` (an H200: calibrated), B 2, H 8, L 256,
    d 64, bf16, with a masked_fill (so ``--mask auto`` assumes causal): a prediction tracekit whatif can make.
    ``dims=False``: no recorded shapes (no prediction). ``name`` and ``softmax_kernel`` may be hostile."""
    bsz, heads, length, d = 2, 8, 256, 64
    shapes = {"proj": [[bsz, length, 512], [512, 512]], "score": [[bsz, heads, length, d], [bsz, heads, d, length]],
              "mask": [[bsz, heads, length, length], [1, 1, length, length], []],
              "soft": [[bsz, heads, length, length], [], []],
              "context": [[bsz, heads, length, length], [bsz, heads, length, d]],
              "out": [[bsz, length, 512], [512, 512]]}
    ops = {"proj": "aten::linear", "score": "aten::matmul", "mask": "aten::masked_fill", "soft": "aten::softmax",
           "context": "aten::matmul", "out": "aten::linear"}
    bf = "c10::BFloat16"
    types = {"mask": [bf, "bool", "Scalar"], "soft": [bf, "Scalar", "Scalar"]}
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": device}])
    for s in range(steps):
        t0 = 400.0 * s
        b.annotation(f"ProfilerStep#{s + 1}", t0, 390)
        b.annotation(name, t0 + 1, 380)
        t, k = t0 + 2, 10000.0 + 400 * s
        for role, kernel, us in WHATIF_OPS:
            ev = b.op(ops[role], t, 20)
            if dims:
                with_dims(ev, shapes[role], types.get(role, [bf] * len(shapes[role])))
            b.launch(softmax_kernel if role == "soft" else kernel, t + 1, 1, k, us)
            t, k = t + 30, k + us
    return b.write(path)


# -- the op table (issue 42: --by op) ------------------------------------------------------------------------------
OPS_BF = "c10::BFloat16"
OPS_QK = ([8, 128, 64], [8, 64, 128])  # the score bmm: 8 products [128,64]·[64,128]
OPS_PV = ([8, 128, 128], [8, 128, 64])  # the context bmm: 8 products [128,128]·[128,64]
OPS_SCORES = [8, 128, 128]  # the softmax's input
OPS_US = {"qk": 10.0, "softmax": 5.0, "pv": 8.0}  # each call's one kernel, µs; back to back with 1 µs gaps


def op_table_trace(path: Path, steps: int = 2, kernel_name: str = CUTLASS_BF16_GEMM,
                   dtype_name: str | None = None) -> Path:
    """``steps`` ProfilerSteps on an H200, each one eager block (layer0.attention): bmm QK (OPS_QK, bf16) → softmax
    (OPS_SCORES) → bmm PV (OPS_PV), one kernel each (OPS_US). ``kernel_name`` names the GEMM kernels; ``dtype_name``
    adds an aten::add (1 µs kernel) whose first recorded type is that name (a hostile one: a label, not a dtype)."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])
    soft = "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 8, false, false>(x)"
    for s in range(steps):
        t = 1000.0 * s
        b.annotation(f"ProfilerStep#{s + 1}", t, 900)
        b.annotation("layer0.attention", t + 1, 300)
        k = t + 400
        with_dims(b.op("aten::bmm", t + 2, 8), [*OPS_QK], [OPS_BF, OPS_BF])
        b.launch(kernel_name, t + 3, 1, k, OPS_US["qk"])
        with_dims(b.op("aten::_softmax", t + 20, 8), [OPS_SCORES, [], []], [OPS_BF, "Scalar", "Scalar"])
        b.launch(soft, t + 21, 1, k + 11, OPS_US["softmax"])
        with_dims(b.op("aten::bmm", t + 40, 8), [*OPS_PV], [OPS_BF, OPS_BF])
        b.launch(kernel_name, t + 41, 1, k + 17, OPS_US["pv"])
        if dtype_name is not None:
            with_dims(b.op("aten::add", t + 60, 8), [[], OPS_SCORES], [dtype_name, OPS_BF])
            b.launch("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float> >(int)",
                     t + 61, 1, k + 26, 1)
    return b.write(path)


def no_attention_trace(path: Path) -> Path:
    """A ResNet-like trace with no attention: two ProfilerSteps (900 µs, 1000 µs apart), each a conv op launching a
    400 µs kernel (category other) and a relu launching a 50 µs elementwise kernel; busy 450 µs per step."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    for step, t0 in ((1, 0), (2, 1000)):
        b.annotation(f"ProfilerStep#{step}", t0, 900)
        b.op("aten::conv2d", t0 + 10, 100)
        b.launch("implicit_convolve_sgemm<float, 1024, 5, 5, 3, 3, 3, 1, false>", t0 + 20, 5, t0 + 30, 400)
        b.op("aten::relu", t0 + 120, 20)
        b.launch("vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar>",
                 t0 + 125, 5, t0 + 440, 50)
    return b.write(path)


# Serving iterations (issue 44, item 2): each one's host range holds an attention core (one SDPA launching a flash
# kernel of ``attn_us``) and a GEMM outside attention (``other_us``); the device runs them 200 µs after ``t0``, with
# a 2-µs gap between: busy attn + other, span busy + 2 (idle 2), attention the flash kernel alone.
SERVING_GAP_US = 2.0


def serving_core(b: TraceBuilder, t: float, k: float, attn_us: float, q_len: int | None = None,
                 kernel: str = LAYER_FLASH_K) -> None:
    """An attention module at host time ``t`` around one SDPA op (query length ``q_len`` recorded when given,
    [4, 8, L, 64] against 512 keys) launching ``kernel`` for ``attn_us`` at device time ``k``."""
    b.module("Attention_0", t, 6)
    sdpa = b.op("aten::scaled_dot_product_attention", t + 0.5, 5)
    if q_len is not None:
        bf = "c10::BFloat16"
        with_dims(sdpa, [[4, 8, q_len, 64], [4, 8, 512, 64], [4, 8, 512, 64]], [bf, bf, bf])
    b.launch(kernel, t + 1, 1, k, attn_us)


def serving_iteration(b: TraceBuilder, t0: float, name: str | None, attn_us: float, other_us: float,
                      q_len: int | None = None) -> None:
    """One engine iteration at ``t0`` (its host range 100 µs, named ``name`` when given): an attention core of
    ``attn_us`` (none when 0) and a GEMM of ``other_us`` after it on the device."""
    if name is not None:
        b.annotation(name, t0, 100)
    k = t0 + 200
    if attn_us:
        serving_core(b, t0 + 1, k, attn_us, q_len)
        k += attn_us + SERVING_GAP_US
    b.op("aten::mm", t0 + 20, 5)
    b.launch(LAYER_GEMM_K, t0 + 21, 1, k, other_us)


# serving_trace's iterations: (range name, attention µs, GEMM µs); by construction prefill busy 50 (attention 30),
# decode 25 (16, over two iterations), mixed 10 (7), and outside 6 (the IDLE step's 2 and a 4-µs kernel launched
# outside every range): 91 µs in all.
SERVING_ITERATIONS: tuple[tuple[str, float, float], ...] = (
    ("execute_context_2(200_40000)_generation_0(0)", 30, 20),
    ("execute_8_context_0(sq0sk0sqsq0sqsk0)_generation_8(sq8sk900sqsq8sqsk900)", 10, 5),
    ("step[DECODE bs=8]", 6, 4),
    ("step[MIXED bs=4 toks=40]", 7, 3),
    ("step[IDLE bs=0]", 0, 2),
)


def serving_trace(path: Path, iterations: tuple[tuple[str, float, float], ...] = SERVING_ITERATIONS) -> Path:
    """Engine iterations 1000 µs apart, named by vLLM's and SGLang's ranges (serving_iteration each), then one
    4-µs GEMM launched outside them."""
    b = TraceBuilder()
    for k, (name, attn_us, other_us) in enumerate(iterations):
        serving_iteration(b, 1000 * k, name, attn_us, other_us)
    t = 1000 * len(iterations)
    b.op("aten::copy_", t, 5)
    b.launch(LAYER_GEMM_K, t + 1, 1, t + 200, 4)
    return b.write(path)


# -- two score → softmax → context triples with given ops between (rule input-projections, issue 38) ---------------
HIDDEN_IN = [16, 1, 64]  # the layer's input as Longformer's q/k/v linears take it: [L, B, E]


def plain_op(b: TraceBuilder, t: list[float], name: str, first: list | None = None) -> dict:
    """One top-level op of 1 µs at the running time ``t[0]`` (then advanced by 2), with ``first`` as its first
    recorded input's dims if given (a linear's weight and bias follow, [E, E] and [E])."""
    ev = b.op(name, t[0], 1)
    t[0] += 2
    if first is not None:
        dims = [first, [first[-1], first[-1]], [first[-1]]] if name == "aten::linear" else [first]
        with_dims(ev, dims, ["float"] * len(dims))
    return ev


# two_triples' kernels by op (µs), where it launches them: a GEMM for each product and linear, a softmax kernel
TRIPLE_KERNELS = {"aten::linear": 7.0, "aten::bmm": 5.0, "aten::softmax": 2.0}
SOFTMAX_BF16_K = ("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 8, false, "
                  "false>")


def two_triples(b: TraceBuilder, between: list[tuple[str, list | None]], shapes: bool = True,
                kernels: bool = False) -> None:
    """One ProfilerStep: q/k/v linears on HIDDEN_IN, bmm → softmax → bmm, then ``between`` (op name, first input
    dims or None), then a second bmm → softmax → bmm, then an output projection, a residual add and a layer norm.
    Dims only where ``shapes``; where ``kernels``, each op in TRIPLE_KERNELS launches one kernel of that many µs, one
    after another on one stream. The triples are one attention call exactly when ``between`` holds nothing that ends
    a layer: the builder's caller says which."""
    b.annotation("ProfilerStep#1", 0, 10_000)
    t = [1.0]
    k = [20_000.0]

    def op(name: str, first: list | None = None) -> None:
        at = t[0]
        plain_op(b, t, name, first if shapes else None)
        if kernels and name in TRIPLE_KERNELS:
            kernel = SOFTMAX_BF16_K if name == "aten::softmax" else CUTLASS_BF16_GEMM
            b.launch(kernel, at + 0.2, 0.5, k[0], TRIPLE_KERNELS[name])
            k[0] += TRIPLE_KERNELS[name] + 1
    for _ in range(3):
        op("aten::linear", HIDDEN_IN)
    for pairs in ([("aten::bmm", None), ("aten::softmax", None), ("aten::bmm", None)], between,
                  [("aten::bmm", None), ("aten::softmax", None), ("aten::bmm", None)],
                  [("aten::linear", [1, 16, 64]), ("aten::add", None), ("aten::layer_norm", None)]):
        for name, first in pairs:
            op(name, first)


def serving_attention_trace(path: Path, op: str, dims: list, types: list, concrete: list,
                            kernel_us: float = 100.0) -> Path:
    """One attention block on an H100 (issue 44): a serving attention op (``op``, with its recorded ``Input Dims``,
    ``Input type`` and ``Concrete Inputs``) launching one flash kernel of ``kernel_us`` -- the op whose FLOPs the
    block's efficiency counts."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    b.annotation("layer0.attention", 0, 200)
    ev = with_dims(b.op(op, 10, 20), dims, types)
    ev["args"]["Concrete Inputs"] = concrete
    b.launch(LAYER_FLASH_K, 11, 1, 1000, kernel_us)
    return b.write(path)
