"""Turn per-run results into the comparison table (stdout, summary.csv, summary.md).

Why tracekit is imported lazily: the attribution columns come from tracekit's
library API on each run's trace, but a sweep should still produce timings
(with `n/a` shares) if tracekit is missing or broken.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

TABLE_COLUMNS = [
    "Method", "Sequence length", "Time (ms)", "Speedup vs eager",
    "matmul %", "softmax %", "memory %", "fused %", "Energy (J)",
]
CSV_EXTRA = [
    "elementwise %", "other %", "Attention per step (ms)", "Time base",
    "Blocks", "Variant", "Run dir",
]
CATEGORY_COLUMNS = {
    "matmul %": "matmul", "softmax %": "softmax", "memory %": "memory",
    "fused %": "fused_attention", "elementwise %": "elementwise", "other %": "other",
}
NA = "n/a"


def _warn(msg):
    print(msg, file=sys.stderr)


def load_analyze(warn=_warn):
    """Return tracekit.analyze, or None (with a warning) if it is not importable."""
    repo_root = str(Path(__file__).resolve().parents[2])
    if repo_root not in sys.path:
        sys.path.append(repo_root)  # a checkout without `pip install -e .`
    try:
        import tracekit

        return tracekit.analyze
    except Exception as exc:  # ImportError, AttributeError, or a half-written package
        warn(f"warning: tracekit.analyze is not importable ({type(exc).__name__}: {exc}); "
             "attribution columns are n/a")
        return None


def attribute(analyze, run_dir, active_steps, warn=_warn):
    """Category shares (%) of attention time for one run dir, or None on failure."""
    if analyze is None:
        return None
    try:
        res = analyze(str(run_dir))
    except Exception as exc:
        warn(f"warning: tracekit.analyze({run_dir}) failed: {type(exc).__name__}: {exc}")
        return None
    try:
        res.check()
    except Exception as exc:
        warn(f"warning: tracekit invariants failed for {run_dir}: {exc}")
    total = float(res.totals.total_us)
    cats = res.totals.categories
    out = {col: (100.0 * cats.get(key, 0.0) / total if total > 0 else None)
           for col, key in CATEGORY_COLUMNS.items()}
    out["Attention per step (ms)"] = total / 1e3 / max(active_steps, 1)
    out["Time base"] = res.time_base
    out["Blocks"] = sum(1 for b in res.blocks if b.found_by == "annotation")
    return out


def _fmt(value, spec):
    return NA if value is None else format(value, spec)


def build_rows(results, warn=_warn):
    """One row per result; speedup is eager latency / latency at the same seq."""
    analyze = load_analyze(warn) if results else None
    eager_ms = {r["seq"]: r["latency_ms"] for r in results if r["impl"] == "eager"}
    rows = []
    for r in results:
        shares = attribute(analyze, r["run_dir"], r["active_steps"], warn) or {}
        base = eager_ms.get(r["seq"])
        row = {
            "Method": r["impl"],
            "Sequence length": str(r["seq"]),
            "Time (ms)": _fmt(r["latency_ms"], ".3f"),
            "Speedup vs eager": NA if base is None else f"{base / r['latency_ms']:.2f}x",
            "Energy (J)": _fmt(r.get("energy_j"), ".4g"),
            "Attention per step (ms)": _fmt(shares.get("Attention per step (ms)"), ".3f"),
            "Time base": shares.get("Time base", NA),
            "Blocks": str(shares.get("Blocks", NA)),
            "Variant": r.get("variant", ""),
            "Run dir": r["run_dir"],
        }
        for col in CATEGORY_COLUMNS:
            row[col] = _fmt(shares.get(col), ".1f")
        rows.append(row)
    return rows


def to_markdown(rows, columns=TABLE_COLUMNS):
    widths = [max([len(c)] + [len(r[c]) for r in rows]) for c in columns]

    def line(cells):
        return "| " + " | ".join(s.ljust(w) for s, w in zip(cells, widths)) + " |"

    out = [line(columns), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line([r[c] for c in columns]) for r in rows]
    return "\n".join(out)


def write(out_dir, rows):
    """Write <out>/summary.csv (all columns) and <out>/summary.md (table columns)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=TABLE_COLUMNS + CSV_EXTRA)
        w.writeheader()
        w.writerows(rows)
    (out_dir / "summary.md").write_text(
        "Attention profiling summary (shares are % of attention-block time; "
        "Time is latency outside the profiler).\n\n" + to_markdown(rows) + "\n")
    return out_dir / "summary.csv", out_dir / "summary.md"
