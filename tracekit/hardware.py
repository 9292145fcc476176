"""Peak figures of the accelerators a trace names: the roof that achieved FLOP/s and GB/s are held against.

Dense (not 2:4-sparse) tensor throughput in TFLOP/s and memory bandwidth in GB/s, one entry per model, each
from the vendor's datasheet named beside it. ``fp32`` is the rate an fp32 GEMM reaches without TF32
(CUDA cores on NVIDIA, the FP32 matrix cores on AMD CDNA); vector ops (softmax, elementwise) are held
against it too. A figure the device lacks (bf16 on V100, fp8 before Hopper/Ada/CDNA3) is ``None``, and
then no roof is claimed for work in that dtype. Device names are matched after normalisation
(:func:`normalise`), so ``"NVIDIA H100 80GB HBM3"`` and ``"AMD Instinct MI300X VF"`` find their entries;
an unknown name gets no figures, never a guess.

Each entry also names its architecture (:class:`Arch`), and so its vendor: advice that names a kernel
library (tracekit.analysis.hints) depends on both. :func:`compute_peak` is the one look-up of the
TFLOP/s a piece of work is held against; every efficiency figure (tracekit.analysis.flops, the hints,
the renderers' roof) goes through it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import lru_cache

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10: as tracekit.vocab defines it (this module sits beside vocab and may not import it)
    from enum import Enum

    class StrEnum(str, Enum):
        __str__ = str.__str__
        __format__ = str.__format__

__all__ = ["DTYPES", "PEAKS", "VENDOR_RULES", "Arch", "DevicePeaks", "Platform", "Vendor", "compute_peak", "lookup",
           "normalise", "platform"]

DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "int8", "tf32", "fp32")


class Vendor(StrEnum):
    """Whose GPU, and so which software stack: CUDA or ROCm/HIP."""

    NVIDIA = "nvidia"  # CUDA
    AMD = "amd"  # ROCm / HIP
    UNKNOWN = "unknown"


class Arch(StrEnum):
    """GPU architectures as the vendors' compilers name them (CUDA compute capability, AMD gfx target)."""

    VOLTA = "sm70"
    AMPERE = "sm80"
    ADA = "sm89"
    HOPPER = "sm90"
    BLACKWELL = "sm100"
    CDNA2 = "gfx90a"  # MI210, MI250, MI250X
    CDNA3 = "gfx942"  # MI300X, MI325X
    UNKNOWN = "unknown"

    @property
    def vendor(self) -> Vendor:
        if self is Arch.UNKNOWN:
            return Vendor.UNKNOWN
        return Vendor.AMD if self.value.startswith("gfx") else Vendor.NVIDIA


@dataclass(frozen=True, slots=True)
class DevicePeaks:
    """Dense peaks of one accelerator model. TFLOP/s (TOP/s for int8) per dtype; HBM (or GDDR) GB/s."""

    model: str
    bf16: float | None
    fp16: float | None
    fp8: float | None
    int8: float | None
    tf32: float | None
    fp32: float
    mem_gb_per_s: float
    source: str
    arch: Arch = Arch.UNKNOWN

    def tflops(self, dtype: str) -> float | None:
        """The peak for a dtype class from :data:`DTYPES` (None when the device has no such unit)."""
        v = getattr(self, dtype, None) if dtype in DTYPES else None
        return float(v) if v else None

    def as_dict(self) -> dict[str, object]:
        return {"model": self.model, **{d: self.tflops(d) for d in DTYPES}, "mem_gb_per_s": self.mem_gb_per_s,
                "source": self.source}


def compute_peak(peaks: DevicePeaks, dtype: str | None, matrix: bool) -> tuple[str | None, float | None]:
    """The dtype class whose peak applies to a piece of work, and that peak in TFLOP/s (None: no such unit).

    The one look-up: matrix work (GEMM, attention) runs on the tensor units at its own dtype's peak; vector work
    (softmax, elementwise) at the fp32 rate whatever the storage dtype, since it computes in fp32.
    """
    cls = dtype if matrix else "fp32"
    return cls, (peaks.tflops(cls) if cls else None)


def _p(model: str, bf16: float | None, fp16: float | None, fp8: float | None, int8: float | None, tf32: float | None,
       fp32: float, mem: float, source: str, arch: Arch) -> DevicePeaks:
    return DevicePeaks(model, bf16, fp16, fp8, int8, tf32, fp32, mem, source, arch)


# Datasheets quote tensor figures "with sparsity"; the dense figure is half of that. Where a sheet gives
# only the sparse figure, the entry is that figure / 2 (noted).
PEAKS: dict[str, DevicePeaks] = {p.model: p for p in (
    # NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column; sparse figures / 2).
    _p("H100 SXM", 989.4, 989.4, 1978.9, 1978.9, 494.7, 67.0, 3350.0, "NVIDIA H100 Tensor Core GPU datasheet, SXM",
       Arch.HOPPER),
    # Same datasheet, H100 PCIe column.
    _p("H100 PCIe", 756.0, 756.0, 1513.0, 1513.0, 378.0, 51.0, 2000.0, "NVIDIA H100 Tensor Core GPU datasheet, PCIe",
       Arch.HOPPER),
    # Same datasheet, H100 NVL column (per GPU).
    _p("H100 NVL", 835.5, 835.5, 1670.5, 1670.5, 417.5, 60.0, 3900.0, "NVIDIA H100 Tensor Core GPU datasheet, NVL",
       Arch.HOPPER),
    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: H100 SXM compute, 141 GB HBM3e at 4.8 TB/s.
    _p("H200", 989.4, 989.4, 1978.9, 1978.9, 494.7, 67.0, 4800.0, "NVIDIA H200 Tensor Core GPU datasheet, SXM",
       Arch.HOPPER),
    # Same datasheet, H200 NVL column.
    _p("H200 NVL", 835.5, 835.5, 1670.5, 1670.5, 417.5, 60.0, 4800.0, "NVIDIA H200 Tensor Core GPU datasheet, NVL",
       Arch.HOPPER),
    # NVIDIA HGX B200 datasheet (8-GPU figures / 8, sparse / 2): FP8 4.5 PF, BF16 2.25 PF, TF32 1.1 PF, 8 TB/s.
    _p("B200", 2250.0, 2250.0, 4500.0, 4500.0, 1125.0, 75.0, 8000.0, "NVIDIA HGX B200 datasheet, per GPU",
       Arch.BLACKWELL),
    # NVIDIA A100 Tensor Core GPU datasheet: BF16/FP16 312, TF32 156, INT8 624, FP32 19.5; bandwidth per variant.
    _p("A100 SXM 80GB", 312.0, 312.0, None, 624.0, 156.0, 19.5, 2039.0, "NVIDIA A100 datasheet, 80GB SXM", Arch.AMPERE),
    _p("A100 PCIe 80GB", 312.0, 312.0, None, 624.0, 156.0, 19.5, 1935.0, "NVIDIA A100 datasheet, 80GB PCIe",
       Arch.AMPERE),
    _p("A100 SXM 40GB", 312.0, 312.0, None, 624.0, 156.0, 19.5, 1555.0, "NVIDIA A100 datasheet, 40GB", Arch.AMPERE),
    _p("A100 PCIe 40GB", 312.0, 312.0, None, 624.0, 156.0, 19.5, 1555.0, "NVIDIA A100 datasheet, 40GB PCIe",
       Arch.AMPERE),
    # NVIDIA V100 Tensor Core GPU datasheet: FP16 tensor 125 (SXM2) / 112 (PCIe) / 130 (V100S); no BF16/TF32.
    _p("V100 SXM2", None, 125.0, None, None, None, 15.7, 900.0, "NVIDIA V100 datasheet, SXM2", Arch.VOLTA),
    _p("V100 PCIe", None, 112.0, None, None, None, 14.0, 900.0, "NVIDIA V100 datasheet, PCIe", Arch.VOLTA),
    _p("V100S", None, 130.0, None, None, None, 16.4, 1134.0, "NVIDIA V100S datasheet", Arch.VOLTA),
    # NVIDIA L4 Tensor Core GPU datasheet (sparse / 2): BF16 121, FP8 242.5, TF32 60, FP32 30.3, 300 GB/s GDDR6.
    _p("L4", 121.0, 121.0, 242.5, 242.5, 60.0, 30.3, 300.0, "NVIDIA L4 datasheet", Arch.ADA),
    # NVIDIA L40S datasheet (sparse / 2): BF16 366, FP8 733, TF32 183, FP32 91.6, 864 GB/s.
    _p("L40S", 366.0, 366.0, 733.0, 733.0, 183.0, 91.6, 864.0, "NVIDIA L40S datasheet", Arch.ADA),
    # NVIDIA Ada Lovelace architecture whitepaper, GeForce RTX 4090 column, FP32-accumulate tensor figures
    # (what PyTorch's GEMMs use): FP16/BF16 165.2, FP8 330.3, TF32 82.6, FP32 82.6, 1008 GB/s GDDR6X.
    _p("RTX 4090", 165.2, 165.2, 330.3, 660.6, 82.6, 82.6, 1008.0, "NVIDIA Ada Lovelace architecture whitepaper",
       Arch.ADA),
    # AMD Instinct MI300X datasheet (dense): FP16/BF16 1307.4, FP8 2614.9, TF32 653.7, FP32 163.4, 5.3 TB/s.
    _p("MI300X", 1307.4, 1307.4, 2614.9, 2614.9, 653.7, 163.4, 5300.0, "AMD Instinct MI300X datasheet", Arch.CDNA3),
    # AMD Instinct MI325X datasheet: MI300X compute, 256 GB HBM3E at 6 TB/s.
    _p("MI325X", 1307.4, 1307.4, 2614.9, 2614.9, 653.7, 163.4, 6000.0, "AMD Instinct MI325X datasheet", Arch.CDNA3),
    # AMD Instinct MI250X datasheet: FP16/BF16 383, INT8 383, FP32 matrix 95.7, 3.2768 TB/s; no FP8/TF32.
    _p("MI250X", 383.0, 383.0, None, 383.0, None, 95.7, 3276.8, "AMD Instinct MI250X datasheet", Arch.CDNA2),
    # AMD Instinct MI250 datasheet: FP16/BF16 362.1, FP32 matrix 90.5, 3.2768 TB/s.
    _p("MI250", 362.1, 362.1, None, 362.1, None, 90.5, 3276.8, "AMD Instinct MI250 datasheet", Arch.CDNA2),
    # AMD Instinct MI210 datasheet: FP16/BF16 181, INT8 181, FP32 matrix 45.3, 1.6384 TB/s.
    _p("MI210", 181.0, 181.0, None, 181.0, None, 45.3, 1638.4, "AMD Instinct MI210 datasheet", Arch.CDNA2),
)}

# (pattern over the lower-cased device name, model); first match wins, so variants come before the base name.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), m) for p, m in (
    (r"h100.*pcie", "H100 PCIe"),
    (r"h100.*nvl", "H100 NVL"),
    (r"h100", "H100 SXM"),
    (r"h200.*nvl", "H200 NVL"),
    (r"h200", "H200"),
    (r"\bb200\b", "B200"),
    (r"a100.*(?:80\s*gb|pg509-210).*pcie|a100.*pcie.*80\s*gb", "A100 PCIe 80GB"),
    (r"a100.*(?:80\s*gb|pg509-210)", "A100 SXM 80GB"),
    (r"a100.*pcie", "A100 PCIe 40GB"),
    (r"a100", "A100 SXM 40GB"),  # plain "A100-SXM4-40GB" and the PG509-200 board (the 40 GB SXM4 part)
    (r"v100s", "V100S"),
    (r"v100.*pcie", "V100 PCIe"),
    (r"v100", "V100 SXM2"),  # SXM2 and DGX Station (DGXS) parts
    (r"\bl40s\b", "L40S"),
    (r"\bl4\b", "L4"),
    (r"rtx\s*4090", "RTX 4090"),
    (r"mi300x", "MI300X"),
    (r"mi325x", "MI325X"),
    (r"mi250x", "MI250X"),
    (r"mi250\b", "MI250"),
    (r"mi210", "MI210"),
))


@lru_cache(maxsize=64)
def normalise(name: str) -> str | None:
    """The :data:`PEAKS` key for a device name as the trace's ``deviceProperties`` spell it, or None."""
    low = name.lower()
    for pat, model in _RULES:
        if pat.search(low):
            return model
    return None


def lookup(name: str | None) -> DevicePeaks | None:
    """Peaks of a named device; None for an unknown or missing name."""
    if not name:
        return None
    model = normalise(name)
    return PEAKS[model] if model else None


@dataclass(frozen=True, slots=True, order=True)
class Platform:
    """The vendor and architecture of the GPU a trace ran on: what advice naming a kernel library reads."""

    vendor: Vendor = Vendor.UNKNOWN
    arch: Arch = Arch.UNKNOWN


# How a trace's vendor is known when its device is not in PEAKS: (what is matched, pattern over the lower-cased
# text, vendor, why). Ordered, first match wins; the runtime comes first, since it names the stack the trace ran on.
VENDOR_RULES: tuple[tuple[str, re.Pattern[str], Vendor, str], ...] = tuple(
    (what, re.compile(p), v, why) for what, p, v, why in (
        ("runtime", r"^hip\b", Vendor.AMD, "Kineto writes hip_runtime_version on ROCm builds of PyTorch"),
        ("runtime", r"^cuda\b", Vendor.NVIDIA, "Kineto writes cuda_runtime_version on CUDA builds"),
        ("device", r"\b(?:amd|radeon|instinct)\b|\bmi\d{3}", Vendor.AMD,
         "ROCm reports the marketing name (\"AMD Instinct MI300X\", \"AMD Radeon Graphics\")"),
        ("device", r"\b(?:nvidia|tesla|geforce|quadro)\b", Vendor.NVIDIA,
         "CUDA reports names such as \"NVIDIA H100 80GB HBM3\" or \"Tesla V100-SXM2-32GB\""),
    ))


def platform(name: str | None, runtime: str | None) -> Platform:
    """The platform of a device name and runtime (``TraceInfo.gpus``/``runtime``): its PEAKS entry's arch when the
    name is known, else the vendor by :data:`VENDOR_RULES` with an unknown arch, else unknown."""
    peaks = lookup(name)
    if peaks is not None and peaks.arch is not Arch.UNKNOWN:
        return Platform(peaks.arch.vendor, peaks.arch)
    for what, pat, vendor, _why in VENDOR_RULES:
        text = runtime if what == "runtime" else name
        if text and pat.search(text.lower()):
            return Platform(vendor, Arch.UNKNOWN)
    return Platform()
