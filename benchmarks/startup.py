"""How long ``tracekit --help`` takes over a bare interpreter (issue 8: at most 150 ms).

Prints the median of N runs of ``python -c pass`` and of ``python -m tracekit --help``, and the
difference. A script, not a timed test: CI machines are too noisy for a hard limit.

    python benchmarks/startup.py [-n 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def median_ms(cmd: list[str], n: int) -> float:
    """Median wall time of ``cmd`` in ms (one untimed warm-up run fills the page cache)."""
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10, help="runs of each command (default 10)")
    n = ap.parse_args().n
    bare = median_ms([sys.executable, "-c", "pass"], n)
    helped = median_ms([sys.executable, "-m", "tracekit", "--help"], n)
    print(f"python -c pass          {bare:7.1f} ms")
    print(f"python -m tracekit -h   {helped:7.1f} ms")
    print(f"difference              {helped - bare:7.1f} ms  (target <= 150 ms)")


if __name__ == "__main__":
    main()
