"""Hand-made sweep folders, as ``scripts/profile_attention.py`` leaves them: ``sdpa-<backend>_<L>/`` runs whose
fused kernels are timed by a known efficiency curve, so a calibration fitted to them must give that curve back
(tests/run/test_calibrate.py, tests/scripts/test_profile_calibrate.py)."""

from __future__ import annotations

from math import ceil
from pathlib import Path

from support.builders import TraceBuilder

KERNELS = {"cudnn": "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_kernel0_0",
           "flash": "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false>>(x)",
           "efficient": "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<x>)"}
MEMSET = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, float)"
BATCH, HEADS, D, SMS, PEAK = 4, 16, 64, 132, 989.4  # H100 SXM / H200 bf16 dense peak, TFLOP/s
CURVES = {"cudnn": (0.5, 1000.0), "flash": (0.3, 800.0)}  # (eta_max, l_half) each backend's kernels follow
SMALL_US = 1.5  # SDPA's own small kernel per call


def kernel_us(backend: str, length: int) -> float:
    """The model's time by hand: causal FLOPs over eta(L) x last-wave occupancy x peak."""
    eta_max, l_half = CURVES[backend]
    flops = 4 * BATCH * HEADS * length * length * D / 2
    n_cta = BATCH * HEADS * ceil(length / 128)
    u = n_cta / (ceil(n_cta / SMS) * SMS)
    return flops / (eta_max * length / (length + l_half) * u * PEAK * 1e12) * 1e6


def sweep_run(folder: Path, backend: str, length: int, device: str, plain_copy: bool = True) -> None:
    """One run folder as profile_attention.py leaves it: a step, two attention blocks each with one SDPA call
    (shapes recorded) launching its fused kernel and a small fill; the .pt.trace.json.gz and a trace.json copy."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": device, "numSms": SMS}])
    b.annotation("ProfilerStep#1", 0, 5000)
    dur, k = kernel_us(backend, length), 100.0
    for layer in range(2):
        t = 10 + layer * 1000
        b.annotation(f"layer{layer}.attention", t, 900)
        op = b.op("aten::scaled_dot_product_attention", t + 5, 50)
        op["args"].update({"Input Dims": [[BATCH, HEADS, length, D]] * 3 + [[]] * 5,
                           "Input type": ["c10::BFloat16"] * 3 + ["", "Scalar", "Scalar", "", "Scalar"],
                           "Concrete Inputs": ["", "", "", "", "0.", "True", "", "False"]})
        b.launch(MEMSET, t + 6, 1, k, SMALL_US)
        b.launch(KERNELS[backend], t + 8, 1, k + 5, dur)
        k += dur + 2000
    run = folder / f"sdpa-{backend}_{length}"
    run.mkdir(parents=True)
    b.write(run / "host_1.1.pt.trace.json.gz")
    if plain_copy:
        b.write(run / "trace.json")


def make_sweep(tmp_path: Path, device: str = "NVIDIA H100 80GB HBM3", backends: tuple[str, ...] = ("cudnn", "flash"),
           lengths: tuple[int, ...] = (512, 1024, 2048)) -> Path:
    folder = tmp_path / "sweep"
    for backend in backends:
        for length in lengths:
            sweep_run(folder, backend, length, device)
    return folder
