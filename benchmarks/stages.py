"""CPU time of each analysis stage (tracekit.analysis.pipeline.STAGES) on one trace: where an issue's cost went.

    python benchmarks/stages.py TRACE [--reps N] [--baseline CHECKOUT]

The trace is loaded once (serially, GC paused, as tracekit.memory.one_file runs a file); then the stages run
``--reps`` times on fresh contexts, each stage timed with ``time.process_time`` (CPU time: other processes' turns on
a shared machine do not count), and the minimum per stage is printed. With ``--baseline``, another checkout (a
``git worktree``) is timed the same way in a child process and the two columns are printed side by side; a stage
only one of them has shows ``-``. Figures in notes are quoted with this command. Not a test: timing figures never
come from the test suite.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def stage_times(path: str, reps: int) -> dict[str, float]:
    """Stage name -> min CPU ms over ``reps`` runs, plus ``load`` (one) and ``analysis`` (the stages' sum)."""
    from tracekit.analysis.context import AttributeConfig, StageContext
    from tracekit.analysis.pipeline import STAGES
    from tracekit.io.load import load_trace

    gc.disable()
    t0 = time.process_time()
    tr = load_trace(path)
    out = {"load": (time.process_time() - t0) * 1000}
    best: dict[str, float] = {}
    for _ in range(reps):
        ctx = StageContext(tr=tr, config=AttributeConfig())
        for stage in STAGES:
            t = time.process_time()
            stage.run(ctx)
            ms = (time.process_time() - t) * 1000
            best[stage.name] = min(best.get(stage.name, ms), ms)
    out.update(best)
    out["analysis"] = sum(best.values())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout, timed the same way")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # (the baseline child's output)
    a = ap.parse_args()
    mine = stage_times(a.trace, a.reps)
    if a.json:
        print(json.dumps(mine))
        return 0
    cols = [mine]
    if a.baseline is not None:
        env = {**os.environ, "PYTHONPATH": str(a.baseline)}
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), a.trace, "--reps", str(a.reps),
                               "--json"], capture_output=True, text=True, env=env, cwd=a.baseline, check=True)
        cols.insert(0, json.loads(proc.stdout.splitlines()[-1]))
    names = list(dict.fromkeys(k for c in reversed(cols) for k in c if k not in ("load", "analysis")))  # this order
    print(f"{'stage (CPU ms, min of %d)' % a.reps:28}" + ("  baseline" if len(cols) > 1 else "") + "      this")
    for k in ["load", *names, "analysis"]:
        print(f"{k:28}" + "".join(f"{c[k]:10.1f}" if k in c else f"{'-':>10}" for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
