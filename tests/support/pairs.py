"""Hand-built attention blocks and the one steps writer, for diffs and gates whose answers are known by construction.

Times are µs. An ``eager`` block: bmm → softmax → bmm, device busy ``2·gemm + softmax``, its kernels 100 µs after
the block's host range opens (two 1-µs gaps between them), so its span is ``102 + busy`` and its idle ``102`` µs:
launch-bound (idle > span / 2) while busy < 102. ``busy(kind)`` keeps the device busy on another stream until the
block's first kernel: the span then starts there and the block is not launch-bound. A ``fused`` block: SDPA → one
flash kernel. ``write`` lays blocks out in ProfilerSteps, 1 ms apart.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from support.builders import TraceBuilder, host_core

from tracekit.run.api import diff_paths

H100 = "NVIDIA H100 80GB HBM3"
GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*)"
FLASH = "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4> >(Params)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"
# The same names as the kernel table shows them (``void `` and ``(anonymous namespace)::`` dropped).
GEMM_C = "cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
SOFTMAX_C = "softmax_warp_forward<float, float, float, 8, false, false>(float*)"
FLASH_C = "pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4> >(Params)"
ADD_C = "vectorized_elementwise_kernel<4, CUDAFunctor_add<float> >(int)"









def eager(b: TraceBuilder, t0: float, name: str = "layer0.attention", gemm: float = 10, softmax: float = 5,
          n: int = 256, alloc: int | None = None, gemm2: float | None = None) -> None:
    """bmm → softmax → bmm on one stream: busy = gemm + softmax + gemm2 (gemm2 defaults to gemm)."""
    b.annotation(name, t0, 60)
    k = t0 + 100
    b.op("aten::bmm", t0 + 1, 8)
    b.launch(GEMM, t0 + 2, 1, k, gemm)
    sm = b.op("aten::_softmax", t0 + 20, 6)
    sm["args"]["Input Dims"] = [[1, 2, n, n], [], []]
    b.launch(SOFTMAX, t0 + 21, 2, k + gemm + 1, softmax)
    if alloc is not None:
        b.memory(t0 + 22, alloc)
    b.op("aten::bmm", t0 + 40, 8)
    b.launch(GEMM, t0 + 41, 2, k + gemm + softmax + 2, gemm if gemm2 is None else gemm2)


def fused(b: TraceBuilder, t0: float, name: str = "layer0.attention", flash: float = 12, n: int = 256,
          alloc: int | None = None) -> None:
    """SDPA → one flash kernel: busy = ``flash``, all fused_attention."""
    b.annotation(name, t0, 60)
    sdpa = b.op("aten::scaled_dot_product_attention", t0 + 1, 20)
    sdpa["args"]["Input Dims"] = [[1, 2, n, 32], [1, 2, n, 32], [1, 2, n, 32], [], [], [], [], []]
    b.op("aten::_scaled_dot_product_flash_attention", t0 + 2, 18)
    b.launch(FLASH, t0 + 3, 2, t0 + 100, flash)
    if alloc is not None:
        b.memory(t0 + 4, alloc)


def two_layers(kind, **kw_per_step):
    """Steps of layer0 + layer1 built by ``kind``; kwargs are per-step lists (one value per step)."""
    n = len(next(iter(kw_per_step.values())))
    return [[partial(kind, name=f"layer{i}.attention", **{k: v[s] for k, v in kw_per_step.items()})
             for i in range(2)] for s in range(n)]




def plain(b: TraceBuilder, t0: float, add: float = 3) -> None:
    """An add kernel outside any attention: device time that no block owns."""
    b.op("aten::add", t0, 5)
    b.launch(ADD, t0 + 1, 1, t0 + 100, add)


def busy(kind):
    """``kind`` with another op's kernel on stream 8 until the block's first kernel: not launch-bound."""
    def make(b: TraceBuilder, t0: float, **kw) -> None:
        b.op("aten::mm", t0 - 8, 2)
        b.launch(GEMM, t0 - 7, 1, t0 + 40, 60, stream=8)
        kind(b, t0, **kw)
    return make


def write(path: Path, steps: list[list], device: str | None = H100, first_step: int = 5) -> Path:
    """One ProfilerStep per entry of ``steps``, each holding its blocks (callables ``f(builder, t0)``)."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": device}] if device else [])
    t = 1000
    for s, blocks in enumerate(steps):
        b.annotation(f"ProfilerStep#{first_step + s}", t - 10, 1000 * max(1, len(blocks)) + 20)
        for make in blocks:
            make(b, t)
            t += 1000
        if not blocks:
            t += 1000
        t += 100
    return b.write(path)


def steps_of(kind, key: str, values: list) -> list[list]:
    """One step per value, each one block ``kind(**{key: value})``."""
    return [[partial(kind, **{key: v})] for v in values]


def no_steps(path: Path, *blocks, device: str | None = H100) -> Path:
    """The blocks one after another with no ProfilerStep around them."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": device}] if device else [])
    for i, make in enumerate(blocks):
        make(b, 1000 + 1000 * i)
    return b.write(path)


def cpu_trace(path: Path, self_us: float = 40) -> Path:
    """A CPU-only trace: one annotated range around a CPU SDPA op (host time base)."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, self_us + 10)
    b.op("aten::_scaled_dot_product_flash_attention_for_cpu", 1, self_us)
    return b.write(path)


def diff(before: Path, after: Path, **kw):
    return diff_paths(before, after, **kw).check()


def launch_bound_trace(path: Path, gemm: float, host: float, steps: int = 2) -> Path:
    """``steps`` steps (two by default), one block each: host range ``host`` µs, one GEMM of ``gemm`` µs that
    starts right after its launch on an idle device. Span = max(host, 3 + gemm); busy = gemm."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    for s, t in enumerate(range(1000, 1000 + 2000 * steps, 2000)):
        b.annotation(f"ProfilerStep#{s + 1}", t - 10, 1500)
        b.annotation("layer0.attention", t, host)
        b.op("aten::bmm", t + 1, 2)
        b.launch(GEMM, t + 2, 1, t + 3, gemm)
        host_core(b, t + 4)
    return b.write(path)


def run_folders(root: Path, runs: dict[str, list[list]]) -> Path:
    """A folder of runs: one sub-folder per name, each holding one trace of those steps (``write``)."""
    for name, steps in runs.items():
        (root / name).mkdir(parents=True)
        write(root / name / "w.pt.trace.json", steps)
    return root


def paired_sweeps(tmp_path: Path, slower_after: float = 20) -> tuple[Path, Path]:
    """Two folders of runs, three steps a run. In common: ``bound`` (launch-bound eager blocks, the same both sides:
    the gate is inconclusive by default) and ``slower`` (not launch-bound: busy 2·10 + 5 = 25 µs a step before,
    2·``slower_after`` + 5 after: 45 µs, +80%, by default). ``gone`` only before, ``new`` only after."""
    def side(gemm: float) -> dict[str, list[list]]:
        return {"bound": steps_of(eager, "gemm", [10] * 3), "slower": steps_of(busy(eager), "gemm", [gemm] * 3)}
    before = run_folders(tmp_path / "before", {**side(10), "gone": steps_of(busy(eager), "gemm", [10] * 3)})
    after = run_folders(tmp_path / "after", {**side(slower_after), "new": steps_of(busy(eager), "gemm", [10] * 3)})
    return before, after
