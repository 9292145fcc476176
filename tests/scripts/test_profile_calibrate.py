"""``scripts/profile_attention.py --calibrate`` (issue 39): the refusal without CUDA, and its fitting half
(``calibrate``), which needs no GPU: on a hand-made sweep and on the shared H200 sweep."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import ROOT, SWEEP, requires_h200
from support.sweeps import CURVES, SMS, make_sweep
from tracekit import whatif
from tracekit.calibration import CALIBRATIONS
from tracekit.io.calibration_file import read_calibration_file

SCRIPT = ROOT / "scripts" / "profile_attention.py"
PROVENANCE = {"device_name": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "cuda": "13.0", "cudnn": "91002",
              "date": "2026-12-04 20:00 UTC", "sweep": "/tmp/sweep"}


def _script():
    spec = importlib.util.spec_from_file_location("profile_attention", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_calibrate_without_cuda_refuses_in_one_line(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: --calibrate would run")
    out = tmp_path / "runs"
    proc = _run("--calibrate", "--out", out, "--calibration-out", tmp_path / "c.json")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: --calibrate needs a CUDA GPU")
    assert not out.exists() and not (tmp_path / "c.json").exists()  # nothing ran, nothing written


@pytest.mark.parametrize(("args", "why"), [
    (["--calibration-out", "c.json"], "--calibration-out needs --calibrate"),
    (["--calibrate", "--model", "hf:gpt2"], "runs this script's model forward only"),
    (["--calibrate", "--mode", "train"], "runs this script's model forward only")])
def test_calibrate_options_that_cannot_go_together_are_one_line(tmp_path: Path, args: list[str], why: str) -> None:
    proc = _run(*args, "--out", tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and why in line


def test_calibrate_fits_a_sweep_folder_and_writes_what_whatif_reads(tmp_path: Path) -> None:
    folder, out = make_sweep(tmp_path), tmp_path / "tracekit-calibration-H100.json"
    entries = _script().calibrate(folder, out, provenance=PROVENANCE, sms=SMS)
    assert [c.backend for c in entries] == ["cudnn", "flash"]
    back = read_calibration_file(out)
    for c in back:
        assert c.eta_max == pytest.approx(CURVES[c.backend][0], rel=1e-3) and c.device == "H100 SXM"
        for fact in ("NVIDIA H100 80GB HBM3", "torch 2.11.0", "cudnn 91002", "2026-12-04", str(folder)):
            assert fact in c.source
    assert json.loads(out.read_text())["provenance"] == PROVENANCE
    eager = _one_eager_h100(tmp_path)
    [w] = whatif(eager, backend="cudnn", calibration=out)
    assert w.calibration is not None and w.calibration["origin"] == str(out) and w.blocks[0].fused_us


def _one_eager_h100(tmp_path: Path) -> Path:
    """An H100 eager block (no built-in calibration for the H100): only the file makes a prediction."""
    from support.builders import CUTLASS_BF16_GEMM, TraceBuilder, with_dims

    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    b.annotation("layer0.attention", 0, 200)
    bf = "c10::BFloat16"
    with_dims(b.op("aten::matmul", 1, 10), [[1, 4, 256, 64], [1, 4, 64, 256]], [bf, bf])
    b.launch(CUTLASS_BF16_GEMM, 2, 1, 1000, 40)
    with_dims(b.op("aten::softmax", 20, 10), [[1, 4, 256, 256], [], []], [bf, "Scalar", "Scalar"])
    b.launch("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 8>(x)",
             21, 1, 1040, 20)
    with_dims(b.op("aten::matmul", 40, 10), [[1, 4, 256, 256], [1, 4, 256, 64]], [bf, bf])
    b.launch(CUTLASS_BF16_GEMM, 41, 1, 1060, 30)
    path = b.write(tmp_path / "eager.pt.trace.json")
    [none] = whatif(path, backend="cudnn")
    assert none.calibration is None and "no fused-attention calibration for" in (none.reason or "")
    return path


@requires_h200
def test_calibrate_on_the_shared_sweep_gives_the_built_in_entries(tmp_path: Path) -> None:
    entries = _script().calibrate(SWEEP, tmp_path / "h200.json", provenance={"device_name": "NVIDIA H200"})
    built_in = [c for c in CALIBRATIONS if c.device == "H200"]
    assert [(c.backend, c.eta_max, c.l_half, c.small_us) for c in entries] == [
        (c.backend, c.eta_max, c.l_half, c.small_us) for c in built_in]
