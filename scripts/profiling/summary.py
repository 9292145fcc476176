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
    "Method", "Sequence length", "Time (ms)", "± (ms)", "Speedup vs eager", "Peak mem (MB)",
    "matmul %", "softmax %", "memory %", "fused %", "Energy (J)", "Max abs err", "Cosine",
    "Note",
]
GRAPH_COLUMN = "Graph (ms)"  # in the printed table only when --cuda-graphs produced figures
CSV_EXTRA = [
    "elementwise %", "other %", "Attention per step (ms)", "Time base",
    "Blocks", "Variant", "Run dir",
    GRAPH_COLUMN, "Graph ± (ms)", "Spread kind", "Min (ms)", "Max (ms)", "Repeats", "Iters",
    "Launch-bound blocks", "Idle %", "Mem source", "Status",
]
CATEGORY_COLUMNS = {
    "matmul %": "matmul", "softmax %": "softmax", "memory %": "memory",
    "fused %": "fused_attention", "elementwise %": "elementwise", "other %": "other",
}
NA = "n/a"
LAUNCH_BOUND = "launch-bound"
EXPLANATIONS = """\
- Time (ms): median latency of one forward outside the profiler; ± (ms): half the spread
  (GPU: min..max over >= 5 repeats of the timed iterations, CUDA events; CPU: the IQR of
  torch.utils.benchmark's blocked measurements). Graph (ms): the same forward replayed from a
  CUDA graph (--cuda-graphs), i.e. without Python and launch overhead (n/a for forwards
  slower than --graph-max-ms, where launch overhead is negligible).
- launch-bound: in this run's trace the GPU sat idle for more than half of the attention
  blocks' wall time (tracekit's `launch_bound`), waiting for the CPU to launch kernels. Time
  and Speedup then measure Python/launch overhead, not attention kernels; compare Graph (ms).
- Peak mem (MB): GPU: torch.cuda.max_memory_allocated over one forward (weights included);
  CPU: bytes the profiler saw allocated inside attention blocks, per step (needs
  --profile-memory).
- Max abs err / Cosine: layer 0's attention block (projections + core) on the run's own
  input, against eager attention in float32 with the same weights.
- OOM / error / skipped rows have no figures: the sweep went on without them.
"""
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
    if analyze is None or not run_dir:
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
    return shares_of(res, active_steps)


def shares_of(res, active_steps):
    """The summary's attribution figures from one tracekit Attribution."""
    total = float(res.totals.total_us)
    cats = res.totals.categories
    out = {col: (100.0 * cats.get(key, 0.0) / total if total > 0 else None)
           for col, key in CATEGORY_COLUMNS.items()}
    steps = max(active_steps, 1)
    out["Attention per step (ms)"] = total / 1e3 / steps
    out["Time base"] = str(res.time_base)
    out["Blocks"] = sum(1 for b in res.blocks if b.found_by == "annotation")
    dev = [b for b in res.blocks if b.launch_bound is not None]
    out["launch_bound"] = res.totals.launch_bound
    out["Launch-bound blocks"] = f"{sum(bool(b.launch_bound) for b in dev)}/{len(dev)}" \
        if dev else None
    span = float(res.totals.span_us)
    out["Idle %"] = 100.0 * float(res.totals.idle_us) / span if dev and span > 0 else None
    allocs = [b.alloc_bytes for b in res.blocks if b.alloc_bytes is not None]
    out["alloc_mb_per_step"] = sum(allocs) / 2**20 / steps if allocs else None
    return out


def _fmt(value, spec):
    return NA if value is None else format(value, spec)


def build_rows(results, warn=_warn):
    """One row per result; speedup is eager latency / latency at the same seq."""
    analyze = load_analyze(warn) if any(r.get("run_dir") for r in results) else None
    eager_ms = {r["seq"]: r["latency_ms"] for r in results
                if r["impl"] == "eager" and r.get("latency_ms")}
    rows = []
    for r in results:
        shares = attribute(analyze, r.get("run_dir"), r.get("active_steps", 0), warn) or {}
        base, ms = eager_ms.get(r["seq"]), r.get("latency_ms")
        t, g = r.get("timing"), r.get("graph")
        peak, source = r.get("peak_mb"), "cuda max_memory_allocated"
        if peak is None and r.get("run_dir"):
            peak, source = shares.get("alloc_mb_per_step"), "profiler alloc in blocks per step"
        notes = [r["status"]] if r.get("status") else []
        if shares.get("launch_bound"):
            notes.append(LAUNCH_BOUND)
        notes += r.get("notes") or []
        if str(r.get("variant", "")).startswith("int8-dynamic"):  # CPU `quantized`: say what it is
            notes.append("int8-dynamic linears, fp32 attention")
        row = {
            "Method": r["impl"],
            "Sequence length": str(r["seq"]),
            "Time (ms)": _fmt(ms, ".3f"),
            "± (ms)": NA if t is None else f"{t.half_spread:.3f}",
            "Speedup vs eager": NA if base is None or not ms else f"{base / ms:.2f}x",
            "Peak mem (MB)": _fmt(peak, ".0f" if peak is not None and peak >= 100 else ".3g"),
            "Energy (J)": _fmt(r.get("energy_j"), ".4g"),
            "Max abs err": _fmt(r.get("max_abs_err"), ".3g"),
            "Cosine": _fmt(r.get("cosine"), ".5f"),
            "Note": "; ".join(notes),
            "Attention per step (ms)": _fmt(shares.get("Attention per step (ms)"), ".3f"),
            "Time base": shares.get("Time base", NA),
            "Blocks": str(shares.get("Blocks", NA)),
            "Variant": r.get("variant", ""),
            "Run dir": r.get("run_dir") or "",
            GRAPH_COLUMN: NA if g is None else f"{g.median:.3f}",
            "Graph ± (ms)": NA if g is None else f"{g.half_spread:.3f}",
            "Spread kind": NA if t is None else t.kind,
            "Min (ms)": NA if t is None else f"{t.low:.3f}",
            "Max (ms)": NA if t is None else f"{t.high:.3f}",
            "Repeats": NA if t is None else str(t.repeats),
            "Iters": NA if t is None else str(t.iters),
            "Launch-bound blocks": shares.get("Launch-bound blocks") or NA,
            "Idle %": _fmt(shares.get("Idle %"), ".1f"),
            "Mem source": source if peak is not None else NA,
            "Status": r.get("status") or "ok",
        }
        for col in CATEGORY_COLUMNS:
            row[col] = _fmt(shares.get(col), ".1f")
        rows.append(row)
        if r.get("run_dir") and t is not None:
            write_measured(r["run_dir"], r, shares.get("launch_bound"), peak if source.startswith("cuda") else None,
                           warn)
    return rows


MEASURED_FILE = "measured.json"  # tracekit reads it beside the traces (tracekit.results.measured)
MEASURED_SCHEMA = "tracekit.measured/1"


def write_measured(run_dir, r, launch_bound, peak_mb, warn=_warn):
    """The run's measured latency as JSON beside its traces: tracekit's report, TensorBoard tab, ``--by run``
    and CI gate take it as the latency, and keep the profiled figures beside it."""
    import json

    t, g = r["timing"], r.get("graph")
    timer = getattr(t, "timer", "")  # the clock that took the repeats: CUDA events, or a CPU timer
    samples = list(getattr(t, "samples", ()))
    doc = {"schema": MEASURED_SCHEMA,
           "what": f"forward pass, outside the profiler ({timer})" if timer else "forward pass, outside the profiler",
           "median_ms": t.median, "low_ms": t.low, "high_ms": t.high, "spread_kind": t.kind,
           "repeats": t.repeats, "iters": t.iters, "samples_ms": samples or None,
           "graph_median_ms": None if g is None else g.median, "peak_memory_mb": peak_mb,
           "launch_bound": launch_bound if isinstance(launch_bound, bool) else None,
           "energy_j": r.get("energy_j"), "impl": r["impl"], "seq": r["seq"]}
    try:
        (Path(run_dir) / MEASURED_FILE).write_text(json.dumps(doc, indent=1) + "\n")
    except OSError as exc:
        warn(f"warning: cannot write {Path(run_dir) / MEASURED_FILE}: {exc}")


def table_columns(rows):
    """TABLE_COLUMNS, plus Graph (ms) after ± when any row has a graph timing."""
    if any(r.get(GRAPH_COLUMN, NA) != NA for r in rows):
        i = TABLE_COLUMNS.index("± (ms)") + 1
        return TABLE_COLUMNS[:i] + [GRAPH_COLUMN] + TABLE_COLUMNS[i:]
    return list(TABLE_COLUMNS)


def to_markdown(rows, columns=TABLE_COLUMNS):
    widths = [max([len(c)] + [len(r[c]) for r in rows]) for c in columns]

    def line(cells):
        return "| " + " | ".join(s.ljust(w) for s, w in zip(cells, widths)) + " |"

    out = [line(columns), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line([r[c] for c in columns]) for r in rows]
    return "\n".join(out)


def write(out_dir, rows, header=""):
    """Write <out>/summary.csv (all columns) and <out>/summary.md (table columns + notes)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=TABLE_COLUMNS + CSV_EXTRA)
        w.writeheader()
        w.writerows(rows)
    head = "Attention profiling summary (shares are % of attention-block time; " \
        "Time is latency outside the profiler).\n\n"
    if header:
        head += header.strip() + "\n\n"
    (out_dir / "summary.md").write_text(
        head + to_markdown(rows, table_columns(rows)) + "\n\n" + EXPLANATIONS)
    return out_dir / "summary.csv", out_dir / "summary.md"
