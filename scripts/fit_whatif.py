"""Fit the fused-attention calibration of tracekit.calibration to a sweep of SDPA runs, and print the entries.

    python scripts/fit_whatif.py ../shared/traces/h200/sweep [--loo]

Each backend's entry (tracekit.calibration.CALIBRATIONS) takes eta_max, l_half and small_us from this output;
tests/analysis/test_whatif.py refits the shared sweep and checks that the stored entry is what this prints.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tracekit.analysis.whatif import fused_time_us
from tracekit.calibration import BACKENDS, CALIBRATIONS
from tracekit.hardware import lookup
from tracekit.run.calibrate import Point, fit_backend, sweep_points


def main(folder: str, loo: bool) -> int:
    for backend in BACKENDS:
        points = sweep_points(Path(folder), backend)
        base = next(c for c in CALIBRATIONS if c.device == points[0].device)
        cal = fit_backend(points, backend, base)
        print(f"{cal.device} {backend}: eta_max={cal.eta_max} l_half={cal.l_half} small_us={cal.small_us} "
              f"({cal.points} points)")
        for k, p in enumerate(points):
            print(f"    {p.run}: BH={p.batch_heads} Lq={p.len_q} Lk={p.len_k} d={p.head_dim} causal={p.causal} "
                  f"{p.flops / 1e9:.2f} GFLOP in {p.fused_us:.2f} us (+{p.small_us:.2f} us small kernels)"
                  + (f"; left out of the fit: {_loo(points, k, backend, base):+.1f}%" if loo else ""))
    return 0


def _loo(points: list[Point], k: int, backend: str, base: object) -> float:
    """The error of point ``k``'s kernel time predicted by a fit to the other points, %."""
    cal = fit_backend(points[:k] + points[k + 1:], backend, base)  # type: ignore[arg-type]
    p, peaks = points[k], lookup(points[k].device)
    assert peaks is not None and peaks.bf16 is not None
    t = fused_time_us(cal, flops=p.flops, batch_heads=p.batch_heads, len_q=p.len_q, len_k=p.len_k,
                      peak_tflops=peaks.bf16)
    return 100 * (t / p.fused_us - 1)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--loo"]
    sys.exit(main(args[0] if args else str(Path(__file__).resolve().parents[1].parent / "shared/traces/h200/sweep"),
                  "--loo" in sys.argv[1:]))
