"""Do two sweeps' timings agree within their reported spreads?

    python scripts/profiling/agree.py A/summary.csv B/summary.csv [--slack 1.0]

Why: a `Time (ms)` is only worth quoting if re-running the same config lands
within the `± (ms)` both runs report. Prints one line per (Method, Sequence
length) present and timed in both, and exits 0 (all agree), 1 (some do not) or
2 (nothing to compare). No torch import.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def timed_rows(path: Path) -> dict[tuple[str, str], tuple[float, float]]:
    out = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            try:
                out[r["Method"], r["Sequence length"]] = (float(r["Time (ms)"]),
                                                          float(r["± (ms)"]))
            except (KeyError, ValueError):  # n/a: OOM, error or skipped rows
                continue
    return out


def compare(a: Path, b: Path, slack: float = 1.0) -> list[tuple[tuple[str, str], float, float,
                                                                   float, float, bool]]:
    """(key, median a, ± a, median b, ± b, agrees) for every config timed in both."""
    ra, rb = timed_rows(a), timed_rows(b)
    rows = []
    for key in ra:
        if key in rb:
            (m1, s1), (m2, s2) = ra[key], rb[key]
            rows.append((key, m1, s1, m2, s2, abs(m1 - m2) <= slack * (s1 + s2)))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--slack", type=float, default=1.0,
                   help="agree when |median a - median b| <= slack * (± a + ± b)")
    opts = p.parse_args(argv)
    for path in (opts.a, opts.b):
        if not path.is_file():
            print(f"error: {path}: no such file", file=sys.stderr)
            return 2
    rows = compare(opts.a, opts.b, opts.slack)
    if not rows:
        print("agree: no config timed in both runs")
        return 2
    for (method, seq), m1, s1, m2, s2, ok in rows:
        print(f"agree: {method:<14} L={seq:<6} {m1:9.3f} ± {s1:.3f}  vs {m2:9.3f} ± {s2:.3f} ms  "
              f"diff {abs(m1 - m2):.3f}  {'ok' if ok else 'OUTSIDE the spreads'}")
    bad = sum(not r[-1] for r in rows)
    print(f"agree: {len(rows) - bad}/{len(rows)} configs within their spreads (slack {opts.slack})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
