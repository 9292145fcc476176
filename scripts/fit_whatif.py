"""Fit the fused-attention calibration of tracekit.calibration to a sweep of SDPA runs, and print the entries.

    python scripts/fit_whatif.py ../shared/traces/h200/sweep

Each backend's entry (tracekit.calibration.CALIBRATIONS) takes eta_max, l_half and small_us from this output;
tests/analysis/test_whatif.py refits the shared sweep and checks that the stored entry is what this prints.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tracekit.calibration import BACKENDS, CALIBRATIONS
from tracekit.run.calibrate import fit_backend, sweep_points


def main(folder: str) -> int:
    for backend in BACKENDS:
        points = sweep_points(Path(folder), backend)
        base = next(c for c in CALIBRATIONS if c.device == points[0].device)
        cal = fit_backend(points, backend, base)
        print(f"{cal.device} {backend}: eta_max={cal.eta_max} l_half={cal.l_half} small_us={cal.small_us} "
              f"({cal.points} points)")
        for p in points:
            print(f"    {p.run}: BH={p.batch_heads} Lq={p.len_q} Lk={p.len_k} d={p.head_dim} causal={p.causal} "
                  f"{p.flops / 1e9:.2f} GFLOP in {p.fused_us:.2f} us (+{p.small_us:.2f} us small kernels)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parents[1].parent
                                                                 / "shared/traces/h200/sweep")))
