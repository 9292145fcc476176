"""Hand-built traces for the mutation-killing tests (tests/test_mutants_*.py): each block's answer is known by
construction, so those tests derive their expected figures by hand arithmetic. No tests here.

Times are µs. An ``eager`` block: bmm → softmax → bmm, device busy ``2·gemm + softmax``, its kernels 100 µs after
the block's host range opens (two 1-µs gaps between them), so its span is ``102 + busy`` and its idle ``102`` µs:
launch-bound (idle > span / 2) while busy < 102. ``busy(kind)`` keeps the device busy on another stream until the
block's first kernel: the span then starts there and the block is not launch-bound.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from builders import TraceBuilder

from tracekit.run.api import diff_paths

from test_diff import FLASH, FLASH_C, GEMM, GEMM_C, H100, SOFTMAX, SOFTMAX_C, eager, fused  # noqa: F401  (shared)

ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"
# The name as kernel tables show it ("void " dropped).
ADD_C = "vectorized_elementwise_kernel<4, CUDAFunctor_add<float> >(int)"


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
