"""Random hand-built traces for differential tests (issue 40): the analysis rewritten over columns is compared with
a plain per-event walk kept in the test file, on traces whose shape a seed picks.

Each trace has ProfilerStep ranges holding nested modules (a model, its layers, their linears), attention ranges
with an eager core (so blocks are found), and ops around them -- GEMMs with and without recorded shapes, cats,
reshape/clone/copy_ chains, masks, softmaxes, optionally SDPA calls -- each launching zero to three kernels at random
times on two streams: overlaps, ties, zero-length kernels, kernels with no launch, and ops outside every step.
"""

from __future__ import annotations

import random
from pathlib import Path

from support.builders import TraceBuilder, with_dims

KERNELS = (
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)",
    "void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda, bfloat16_copy_kernel>(int)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::neg_kernel_cuda(at::TensorIteratorBase&)>(int)",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4> >(Params)",
    "Memcpy HtoD (Pageable -> Device)",
)
_BF16, _FP32 = "c10::BFloat16", "float"
# (op name, its recorded Input Dims and Input type, or None): what each random op may be
OPS = (
    ("aten::addmm", [[64], [8, 32], [32, 64], [], []], [_BF16, _BF16, _BF16, "Scalar", "Scalar"]),
    ("aten::mm", [[8, 32], [32, 16]], [_FP32, _FP32]),
    ("aten::bmm", [[4, 8, 16], [4, 16, 8]], [_BF16, _BF16]),
    ("aten::linear", [[2, 8, 32], [64, 32], [64]], [_BF16, _BF16, _BF16]),
    ("aten::mm", None, None),
    ("aten::add", [[8, 32], [8, 32], []], [_BF16, _BF16, "Scalar"]),
    ("aten::_softmax", [[4, 8, 8], [], []], [_FP32, "Scalar", "Scalar"]),
    ("aten::_softmax", None, None),
    ("aten::cat", [[[1, 2, 6, 8], [1, 2, 2, 8]], []], ["TensorList", "Scalar"]),
    ("aten::masked_fill", [[4, 8, 8], [4, 8, 8], []], [_BF16, "bool", "Scalar"]),
    ("aten::repeat_interleave", None, None),
    ("aten::copy_", [[1, 2, 2, 4, 8], [1, 2, 2, 4, 8], []], [_BF16, _BF16, "Scalar"]),
    ("aten::neg", None, None),
    ("aten::empty", None, None),
)


def _gpu_time(rng: random.Random, t: float) -> tuple[float, float]:
    """A kernel's start and length: often tied or zero-length, often overlapping the one before."""
    start = round(t + rng.choice((0, 0, 1, 2.5, 5, rng.uniform(0, 40))), 1)
    return start, rng.choice((0, 1, 1, 3, 7.5, rng.uniform(0, 30)))


class _Random:
    """One random trace: host time runs forward from 0; each kernel runs 100 µs after its launch, jittered."""

    def __init__(self, seed: int, sdpa: bool) -> None:
        self.rng, self.sdpa = random.Random(seed), sdpa
        self.b = TraceBuilder(deviceProperties=[{"name": "NVIDIA H100"}])

    def launches(self, t: float, n: int) -> None:
        rng = self.rng
        for k in range(n):
            start, dur = _gpu_time(rng, t + 100)
            stream = rng.choice((7, 7, 8))
            self.b.launch(rng.choice(KERNELS), t + 0.1 + 0.2 * k, 0.1, start, dur, stream=stream,
                          kind="gpu_memcpy" if rng.random() < 0.1 else "kernel")

    def op(self, t: float, tid: int = 1) -> None:
        """One random op at ``t`` (3 µs), maybe with recorded shapes, maybe under a reshape/clone chain."""
        rng = self.rng
        name, dims, types = rng.choice(OPS)
        if name == "aten::copy_" and rng.random() < 0.5:
            self.b.op("aten::reshape", t - 0.02, 3.04, tid=tid)
            with_dims(self.b.op("aten::clone", t - 0.01, 3.02, tid=tid), [[1, 2, 2, 4, 8], []], [_BF16, "Scalar"])
        ev = self.b.op(name, t, 3, tid=tid)
        if dims is not None and rng.random() < 0.8:
            with_dims(ev, dims, types)
            if name == "aten::cat":
                ev["args"]["Concrete Inputs"] = ["", rng.choice(("2", "-2", "3", ""))]
        self.launches(t, rng.choice((0, 1, 1, 1, 2, 3)))

    def attention(self, t: float, k: int) -> None:
        """An attention range with an eager core (bmm, softmax, bmm), or an SDPA call around a flash kernel."""
        b, rng = self.b, self.rng
        b.annotation(f"layer{k}.attention", t, 40)
        if self.sdpa and rng.random() < 0.5:
            sd = b.op("aten::scaled_dot_product_attention", t + 1, 20)
            with_dims(sd, [[1, 2, 8, 16], [1, 2, 8, 16], [1, 2, 8, 16], [1, 2, 8, 8] if rng.random() < 0.5 else [],
                           [], []], [_BF16] * 4 + ["Scalar", "Scalar"])
            backend = rng.choice(("aten::_scaled_dot_product_flash_attention",
                                  "aten::_scaled_dot_product_attention_math", None))
            if backend is None:  # SDPA launching its kernel itself
                self.launches(t + 2, 1)
                return
            b.op(backend, t + 2, 15)
            if backend.endswith("_math"):  # the math path: its own products and softmax under SDPA
                for j, name in enumerate(("aten::bmm", "aten::_softmax", "aten::bmm")):
                    with_dims(b.op(name, t + 3 + 4 * j, 3), [[4, 8, 16], [4, 16, 8]], [_BF16, _BF16])
                    self.launches(t + 3 + 4 * j, 1)
            else:
                self.launches(t + 2, 1)
            return
        for j, name in enumerate(("aten::bmm", "aten::_softmax", "aten::bmm")):
            with_dims(b.op(name, t + 1 + 10 * j, 8), [[4, 8, 16], [4, 16, 8]], [_BF16, _BF16])
            self.launches(t + 1 + 10 * j, rng.choice((1, 1, 2)))

    def layer(self, t: float, k: int, step_modules: bool) -> float:
        """A module layer (with a linear module inside) around an attention range and a few ops; returns its end."""
        b, rng = self.b, self.rng
        b.module(f"Layer_{k}", t, 200)
        b.module(f"Linear_{k}", t + 1, 20)
        self.op(t + 2)
        self.attention(t + 30, k)
        for i in range(rng.randint(1, 4)):
            self.op(t + 80 + 25 * i)
        if not step_modules:
            self.op(t + 190, tid=2)
        return t + 210

    def build(self) -> TraceBuilder:
        rng, b = self.rng, self.b
        t = 0.0
        self.op(t)  # outside every step
        t += 10
        for step in range(rng.randint(1, 3)):
            layers = rng.randint(1, 4)
            b.annotation(f"ProfilerStep#{step + 3}", t, 215 * layers + 20)
            if rng.random() < 0.8:
                b.module("Model_0", t + 1, 215 * layers + 10)
            for k in range(layers):
                self.layer(t + 5 + 215 * k, k, rng.random() < 0.5)
            t += 215 * layers + 40
        if rng.random() < 0.5:
            b.device_only(KERNELS[0], rng.uniform(0, t + 100), 5, corr=999999)  # no launch: no step
        return b


def random_trace(tmp: Path, seed: int, sdpa: bool = False) -> Path:
    """A random trace (see the module's doc) written under ``tmp``."""
    return _Random(seed, sdpa).build().write(tmp / f"random{seed}.json")


# Real traces the differential tests also run on (under support.paths.REAL): steps, modules, shapes, SDPA, serving.
REAL_SAMPLES = (
    "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
    "tracelens/b200/eager_trace.json.gz",
    "hta/trace_diff/control/control.json.gz",
)


def context_after(path: Path, last: str):
    """A fresh pipeline context for the trace at ``path``, after the stages up to and including ``last``."""
    from tracekit.analysis.context import AttributeConfig, StageContext
    from tracekit.analysis.pipeline import STAGES, stage_names
    from tracekit.io.load import load_trace

    ctx = StageContext(tr=load_trace(path), config=AttributeConfig())
    for stage in STAGES[: stage_names().index(last) + 1]:
        stage.run(ctx)
    return ctx
