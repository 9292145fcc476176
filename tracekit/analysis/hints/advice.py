"""Vendor-specific advice: which kernel library a hint may name, for the GPUs and kernels of the blocks' traces.

Rows are ordered data, first fit wins, and each topic ends in a catch-all, so a hint never names a library that
does not run on the trace's GPU (docs/attribution.md, "Hints").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ...hardware import Arch, Platform, Vendor
from ...vocab import StrEnum


class AdviceTopic(StrEnum):
    """What a piece of vendor-specific advice is about: the hint rules that name a kernel library ask for one."""

    FUSED_SDPA = "fused-sdpa"  # the fused SDPA backends that replace an eager softmax (eager-softmax)
    FUSED_ELIGIBLE = "fused-eligible"  # where SDPA's fused backends are switched on (sdpa-math-fallback)
    FASTER_KERNEL = "faster-kernel"  # a faster fused attention kernel for this GPU (low-tflops)


@dataclass(frozen=True, slots=True, kw_only=True)
class Advice:
    """One row of :data:`ADVICE`: ``text`` for a topic on the platforms it fits. ``vendor`` None fits any (a topic's
    catch-all); ``archs`` empty fits any arch of the vendor; ``ran``/``not_ran`` (regexes over the kernel names
    that ran) fit only when some kernel matches / none does, so that a trace is not told to use what it runs."""

    name: str
    topic: AdviceTopic
    text: str
    why: str
    vendor: Vendor | None = None
    archs: frozenset[Arch] = frozenset()
    ran: str = ""
    not_ran: str = ""

    def fits(self, platforms: Sequence[Platform], kernels: Sequence[str]) -> bool:
        """Every platform of the blocks' traces is this row's (one vendor, arch in ``archs``), and the kernels fit."""
        return self._fits_platforms(platforms) and self._fits_kernels(kernels)

    def _fits_platforms(self, platforms: Sequence[Platform]) -> bool:
        if self.vendor is not None and not (platforms and all(p.vendor == self.vendor for p in platforms)):
            return False
        return not self.archs or all(p.arch in self.archs for p in platforms)

    def _fits_kernels(self, kernels: Sequence[str]) -> bool:
        if self.ran and not any(re.search(self.ran, k) for k in kernels):
            return False
        return not (self.not_ran and any(re.search(self.not_ran, k) for k in kernels))


_CUDNN_KERNEL = r"cudnn|fort_native_sdpa"
_AITER_KERNEL = r"aiter::|fmha_fwd|ck_tile|Fmha"
_AMD, _NVIDIA = Vendor.AMD, Vendor.NVIDIA

# Ordered, first fit wins; each topic ends in a catch-all (vendor None). ROCm rows name ROCm libraries only and CUDA
# rows CUDA ones: FA3 and cuDNN do not run on AMD GPUs, nor aiter/CK/AOTriton-for-ROCm on NVIDIA ones.
ADVICE: tuple[Advice, ...] = (
    Advice(name="rocm-fused-sdpa", topic=AdviceTopic.FUSED_SDPA, vendor=_AMD,
           text="fused on ROCm: flash/mem-efficient, AOTriton's kernels; or aiter's flash attention",
           why="on ROCm, SDPA's fused backends are AOTriton's Triton kernels; cuDNN is CUDA-only"),
    Advice(name="volta-fused-sdpa", topic=AdviceTopic.FUSED_SDPA, vendor=_NVIDIA, archs=frozenset({Arch.VOLTA}),
           text="fused: mem-efficient; the flash and cuDNN backends need sm80 or newer",
           why="PyTorch's flash and cuDNN SDPA backends require compute capability 8.0"),
    Advice(name="cuda-fused-sdpa", topic=AdviceTopic.FUSED_SDPA, vendor=_NVIDIA,
           text="fused: flash/mem-efficient/cuDNN",
           why="the three fused SDPA backends of CUDA builds of PyTorch"),
    Advice(name="any-fused-sdpa", topic=AdviceTopic.FUSED_SDPA,
           text="a fused backend: flash or mem-efficient",
           why="vendor unknown or mixed: only the backends every GPU build has"),
    Advice(name="rocm-fused-eligible", topic=AdviceTopic.FUSED_ELIGIBLE, vendor=_AMD,
           text="check sdpa_kernel()/torch.backends settings (on ROCm the fused backends are AOTriton's: set "
                "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 on GPUs where they are experimental)",
           why="ROCm builds gate AOTriton's flash/mem-efficient SDPA on some GPUs behind that variable"),
    Advice(name="any-fused-eligible", topic=AdviceTopic.FUSED_ELIGIBLE,
           text="check sdpa_kernel()/torch.backends settings",
           why="the switches every build has"),
    Advice(name="rocm-cdna3-faster", topic=AdviceTopic.FASTER_KERNEL, vendor=_AMD, archs=frozenset({Arch.CDNA3}),
           not_ran=_AITER_KERNEL,
           text="aiter's flash attention (CK and assembly FMHA kernels tuned for MI300) or the Composable Kernel "
                "backend of ROCm flash-attention",
           why="on CDNA3, aiter's CK/assembly kernels outrun SDPA's default AOTriton (Triton) kernels"),
    Advice(name="rocm-faster", topic=AdviceTopic.FASTER_KERNEL, vendor=_AMD,
           text="a newer aiter or ROCm flash-attention (Composable Kernel backend), or SDPA's flash backend "
                "(AOTriton; TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 where it is experimental)",
           why="ROCm's fused attention kernels come from aiter/CK and AOTriton"),
    Advice(name="blackwell-faster", topic=AdviceTopic.FASTER_KERNEL, vendor=_NVIDIA, archs=frozenset({Arch.BLACKWELL}),
           text="FA4 (flash-attn's CuTe DSL kernels for sm100) or cuDNN SDPA",
           why="FA3 is built for sm90 only; on sm100, FA4 and cuDNN use the new tensor-core instructions"),
    Advice(name="hopper-after-cudnn", topic=AdviceTopic.FASTER_KERNEL, vendor=_NVIDIA, archs=frozenset({Arch.HOPPER}),
           ran=_CUDNN_KERNEL,
           text="FA3 (flash-attn's hopper/ build for sm90; cuDNN SDPA already ran here)",
           why="the trace runs cuDNN's sm90 kernel already: the other Hopper kernel is FA3"),
    Advice(name="hopper-faster", topic=AdviceTopic.FASTER_KERNEL, vendor=_NVIDIA, archs=frozenset({Arch.HOPPER}),
           text="FA3 (flash-attn's hopper/ build for sm90) or cuDNN SDPA",
           why="SDPA's flash backend is FA2, which uses no Hopper wgmma/TMA; FA3 and cuDNN's sm90 kernels do"),
    Advice(name="ampere-ada-faster", topic=AdviceTopic.FASTER_KERNEL, vendor=_NVIDIA,
           archs=frozenset({Arch.AMPERE, Arch.ADA}),
           text="FA2 (flash-attn 2, or SDPA's flash backend) or cuDNN SDPA",
           why="FA3 needs sm90; on sm80/sm89, FA2 and cuDNN are the fast kernels"),
    Advice(name="volta-faster", topic=AdviceTopic.FASTER_KERNEL, vendor=_NVIDIA, archs=frozenset({Arch.VOLTA}),
           text="SDPA's mem-efficient backend or xFormers; FA2 and cuDNN SDPA need sm80 or newer",
           why="flash-attn 2 and cuDNN attention do not build for sm70"),
    Advice(name="cuda-faster", topic=AdviceTopic.FASTER_KERNEL, vendor=_NVIDIA,
           text="FA3 on Hopper, FA2 or cuDNN SDPA on Ampere/Ada, FA4 or cuDNN on Blackwell",
           why="the GPU model is not in tracekit.hardware, so its architecture is unknown"),
    Advice(name="any-faster", topic=AdviceTopic.FASTER_KERNEL,
           text="the fastest fused attention kernel the GPU's vendor ships for it",
           why="vendor unknown, or the traces' GPUs differ: naming one vendor's library could be wrong"),
)


def advise(topic: AdviceTopic, platforms: Sequence[Platform], kernels: Sequence[str] = ()) -> Advice:
    """The first row of :data:`ADVICE` for ``topic`` that fits the blocks' platforms and kernels."""
    return next(a for a in ADVICE if a.topic == topic and a.fits(platforms, kernels))
