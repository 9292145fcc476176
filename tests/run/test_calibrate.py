"""Fitting a fused-attention calibration to a sweep folder (tracekit.run.calibrate), as
``scripts/profile_attention.py --calibrate`` does after its runs (issue 39).

The hand-made sweeps below time each fused kernel by a known curve, so the fit must give that curve back; the
shared H200 sweep's fit must give the built-in entries.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.paths import SWEEP, requires_h200
from support.sweeps import CURVES, D, SMALL_US, SMS, make_sweep
from tracekit.calibration import CALIBRATIONS
from tracekit.errors import TracekitError
from tracekit.io.calibration_file import read_calibration_file
from tracekit.run.calibrate import fit_sweep, write_calibration


def test_the_fit_gives_back_the_curve_the_kernels_were_timed_by(tmp_path: Path) -> None:
    folder = make_sweep(tmp_path)
    cudnn, flash = fit_sweep(folder, sms=SMS, source="a hand-made sweep")  # no efficient runs: no entry
    for cal in (cudnn, flash):
        eta_max, l_half = CURVES[cal.backend]
        assert cal.eta_max == pytest.approx(eta_max, rel=1e-3) and cal.l_half == pytest.approx(l_half, rel=1e-3)
        assert cal.small_us == pytest.approx(SMALL_US, abs=0.01)
        assert (cal.device, cal.sms, cal.head_dim, cal.causal, cal.phase, cal.points) == (
            "H100 SXM", SMS, D, True, "forward", 3)
        assert cal.source == "a hand-made sweep" and cal.origin == "built-in"


def test_a_device_without_a_built_in_entry_needs_its_sm_count(tmp_path: Path) -> None:
    with pytest.raises(TracekitError, match="SM count of H100 SXM is unknown"):
        fit_sweep(make_sweep(tmp_path, backends=("cudnn",)))
    h200 = fit_sweep(make_sweep(tmp_path / "h200", device="NVIDIA H200", backends=("cudnn",)))
    assert [c.sms for c in h200] == [132]  # the built-in H200 entry's


def test_a_sweep_without_fused_runs_or_with_one_length_is_refused(tmp_path: Path) -> None:
    (tmp_path / "eager_512").mkdir()
    with pytest.raises(TracekitError, match="no sdpa-<backend>_<L> runs"):
        fit_sweep(tmp_path, sms=SMS)
    with pytest.raises(ValueError, match="two key lengths"):
        fit_sweep(make_sweep(tmp_path, backends=("cudnn",), lengths=(1024,)), sms=SMS)


def test_the_written_file_is_what_whatif_reads(tmp_path: Path) -> None:
    entries = fit_sweep(make_sweep(tmp_path), sms=SMS, source="a hand-made sweep")
    out = tmp_path / "tracekit-calibration-H100.json"
    write_calibration(out, entries, {"device_name": "NVIDIA H100 80GB HBM3", "torch": "2.x", "cudnn": "91002"})
    back = read_calibration_file(out)
    assert [c.as_dict() for c in back] == [c.as_dict() for c in entries]
    assert json.loads(out.read_text())["provenance"]["cudnn"] == "91002"


@requires_h200
def test_the_shared_sweep_fits_to_the_built_in_entries() -> None:
    """fit_sweep on the shared sweep folder is scripts/fit_whatif.py's fit: the built-in H200 entries."""
    got = fit_sweep(SWEEP, source="x")
    built_in = [c for c in CALIBRATIONS if c.device == "H200"]
    assert [(c.backend, c.eta_max, c.l_half, c.small_us, c.sms, c.points) for c in got] == [
        (c.backend, c.eta_max, c.l_half, c.small_us, c.sms, c.points) for c in built_in]
