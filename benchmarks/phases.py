"""CPU time of one serial `tracekit attribute` run, phase by phase, the way the command line runs a file.

    python benchmarks/phases.py TRACE [--reps N]

Each rep is a fresh process that imports tracekit, loads TRACE (the model built), runs the analysis stages once,
checks the result and renders its JSON, timing each phase with ``time.process_time``; the minimum per phase over
the reps is printed, with the share of the run taken after the model is built. That share is issue 40's "analysis
(everything after the model is built): at most 25 % of the serial time", and the phases are what any argument
about where this design's floor lies is made of: unlike ``stages.py`` (the minimum of several runs of the stages on
one loaded trace), the analysis here runs once, cold, as it does for a user, with its lazy imports, first-use regex
compiles and memo misses. Not a test: timing figures never come from the test suite.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

PHASES = ("import", "load", "analysis", "check", "output")
AFTER_MODEL = ("analysis", "check", "output")  # issue 40's "analysis": everything after the model is built


def one_run(path: str) -> dict[str, float]:
    """Phase -> CPU seconds of one run in this process (call it in a fresh one: imports are a phase)."""
    t0 = time.process_time()
    from tracekit.analysis.pipeline import attribute_trace
    from tracekit.cli import TOOL, _keep_big_buffers, _one_blas_thread
    from tracekit.io.load import load_trace
    from tracekit.memory import one_file, one_shot
    from tracekit.renderers import RENDERERS

    marks = [t0, time.process_time()]
    _one_blas_thread()  # the command line's process settings: numpy's BLAS pool, glibc's big buffers
    _keep_big_buffers()
    with one_shot(), one_file():  # the GC paused as a command pauses it (tracekit.memory)
        tr = load_trace(path)
        marks.append(time.process_time())
        result = attribute_trace(tr)
        marks.append(time.process_time())
        result.check(arrays=False)
        marks.append(time.process_time())
        renderer = RENDERERS["json"](by="block", tool=TOOL)
        renderer.title = path  # as the command line names what it was given
        size = sum(len(chunk) for chunk in renderer.stream(result))
        marks.append(time.process_time())
    out = {name: marks[i + 1] - marks[i] for i, name in enumerate(PHASES)}
    out["output_chars"] = float(size)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # (one rep, in the child)
    a = ap.parse_args()
    if a.json:
        print(json.dumps(one_run(a.trace)))
        return 0
    runs = []
    for _ in range(a.reps):  # a fresh process per rep: the imports and the first-use costs are counted each time
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), a.trace, "--json"],
                              capture_output=True, text=True, check=True)
        runs.append(json.loads(proc.stdout.splitlines()[-1]))
    best = {k: min(r[k] for r in runs) for k in PHASES}
    total = sum(best.values())
    after = sum(best[k] for k in AFTER_MODEL)
    print(f"{'phase (CPU s, min of %d)' % a.reps:28}{'s':>8}{'share':>8}")
    for k in PHASES:
        print(f"{k:28}{best[k]:8.3f}{best[k] / total:8.1%}")
    print(f"{'total':28}{total:8.3f}")
    print(f"{'after the model is built':28}{after:8.3f}{after / total:8.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
