"""Results in a notebook: DataFrames, one-line reprs and small HTML tables.

pandas is an optional extra (``pip install 'tracekit[notebook]'``) imported only when a DataFrame is asked
for, so ``import tracekit`` stays light. The rows come from the same result objects (and the same grouping,
:func:`tracekit.results.rows.group_rows`) as every renderer, so a DataFrame's sums are the JSON's.
"""

from __future__ import annotations

import html
from typing import Any

from .attribution import CATEGORIES, Attribution, BlockResult
from .format import headline, lead_line, per_step_line, totals_label
from .steps import per_step
from .views import register
from .rows import DIFF_FRAME_GROUPINGS, FRAME_GROUPINGS, Row, check_grouping, group_rows, pair_rows
from .sweep import RunRow, run_rows
from .rows import step_count

from .diff import BlockPair, DiffResult
from .stages import STAGE_COLUMNS, stage_record  # issue 44: serving stages

_HTML_ROWS = 12  # rows of a _repr_html_ table; the DataFrame has them all


def _pandas() -> Any:
    try:
        import pandas  # type: ignore[import-untyped]  # optional extra, without stubs here
    except ImportError:
        raise ImportError("to_dataframe() needs pandas: pip install 'tracekit[notebook]'") from None
    return pandas


# ---------------------------------------------------------------------------------------------
# Rows (plain dicts: the DataFrame and the HTML table share them)


def attribution_rows(result: Attribution, by: str) -> list[dict[str, Any]]:
    """One dict per block, group of blocks (kind, layer, step) or kernel; times in µs, category keys ``<c>_us``."""
    check_grouping(by, FRAME_GROUPINGS)
    if by == "kernel":
        return [{"kernel": name, "category": str(cat), "count": count, "total_us": us}
                for (name, cat), (count, us) in sorted(result.kernels.items(), key=lambda kv: (-kv[1][1], kv[0]))]
    if by == "op":
        return _op_dicts(result)
    if by == "stage":  # issue 44: a serving trace's stages; no rows on a trace without them
        return [stage_record(r) for r in result.stages or []]
    if by == "run":
        return [_run_dict(r) for r in run_rows(result)]
    if by == "block":
        return [_block_dict(b) for b in result.blocks]
    return [_group_dict(g, by) for g in group_rows(result, by)]


OP_FRAME_COLUMNS = ["op", "shapes", "dtype", "calls", "time_us", "time_per_step_us", "steps", "flops", "bytes",
                    "tflops_per_s", "gb_per_s", "roof_pct", "bound",
                    "flops_max", "tflops_per_s_max", "roof_pct_max"]  # issue 44: FLOPs counted as bounds, else NaN


def _op_dicts(result: Attribution) -> list[dict[str, Any]]:
    """``by="op"``: the op table's rows (tracekit.results.ops), by time; a figure the trace cannot give is NaN. The
    table is computed only when asked, so a result analysed without it is refused, saying how to get it."""
    if result.ops is None:
        raise ValueError("this result has no op table: analyze with by='op' (tracekit.analyze(path, by='op'), "
                         "or tracekit attribute --by op) to compute it")
    n = step_count(result)

    def f(x: float | None) -> float:
        return float("nan") if x is None else x

    return [{"op": r.op, "shapes": r.shapes, "dtype": r.dtype, "calls": r.calls, "time_us": r.time_us,
             "time_per_step_us": r.time_us / n if n else r.time_us, "steps": n, "flops": r.flops, "bytes": r.bytes,
             "tflops_per_s": f(r.tflops_per_s), "gb_per_s": f(r.gb_per_s), "roof_pct": f(r.roof_pct),
             "bound": r.bound, "flops_max": f(r.flops_max), "tflops_per_s_max": f(r.tflops_per_s_max),
             "roof_pct_max": f(r.roof_pct_max)} for r in result.ops]


def _block_dict(b: BlockResult) -> dict[str, Any]:
    """A block's row: where it is, how it was found, its figures by category, its evidence and its attention layer's
    name and total (None where the block is its own layer)."""
    return {"trace": b.source, "step": b.step, "ordinal": b.ordinal, "block": b.name, "kind": b.kind,
            "phase": str(b.phase), "found_by": str(b.found_by), "kernels": b.kernels, "total_us": b.total_us,
            "span_us": b.span_us, "idle_us": b.idle_us, **{f"{c}_us": b.categories[c] for c in CATEGORIES},
            "launch_bound": b.launch_bound, "alloc_bytes": b.alloc_bytes,
            "evidence_rule": b.evidence.rule if b.evidence else None,
            "evidence_core": str(b.evidence.core) if b.evidence else None,
            "evidence": " → ".join(b.evidence.names) if b.evidence else None,
            "layer": b.layer.name if b.layer else None, "layer_total_us": b.layer.total_us if b.layer else None}


def _group_dict(g: Row, by: str) -> dict[str, Any]:
    """A group's row (kind, layer, step): its figures by category, in µs and as shares of its total."""
    return {by: g.label, "phase": str(g.phase), "blocks": g.blocks, "kernels": g.kernels, "total_us": g.total_us,
            "span_us": g.span_us, "idle_us": g.idle_us, **{f"{c}_us": g.categories[c] for c in CATEGORIES},
            **{f"{c}_share": (g.categories[c] / g.total_us if g.total_us > 0 else None) for c in CATEGORIES}}


def _run_dict(r: RunRow) -> dict[str, Any]:
    """A run's row: named after its folder; measured latency (ms) beside the profiled figures (µs)."""
    m = r.measured
    return {"run": r.name, "impl": r.impl, "seq": r.seq, "blocks": r.blocks, "steps": r.steps,
            "latency_ms": None if m is None else m.median_ms, "latency_low_ms": None if m is None else m.low_ms,
            "latency_high_ms": None if m is None else m.high_ms, "latency_speedup": r.latency_speedup,
            "step_speedup": r.step_speedup, "attention_speedup": r.attention_speedup,
            "step_speedup_launch_bound": r.step_speedup_launch_bound,
            "attention_speedup_launch_bound": r.attention_speedup_launch_bound, "baseline": r.baseline,
            "per_step_basis": r.per_step.basis, "step_busy_us": r.per_step.busy_us,
            "step_attention_us": r.per_step.attention_us, "busy_us": r.busy_us,
            "span_us": r.span_us, "idle_us": r.idle_us,
            "idle_share": None if r.idle_pct is None else r.idle_pct / 100, "launch_bound": r.launch_bound,
            **{f"{c}_us": r.categories[c] for c in CATEGORIES},
            **{f"{c}_share": (r.categories[c] / r.busy_us if r.busy_us > 0 else None) for c in CATEGORIES}}


def diff_rows(r: DiffResult, by: str) -> list[dict[str, Any]]:
    """One dict per category (with the total), block pair, pair group (by kind) or kernel of either side."""
    check_grouping(by, DIFF_FRAME_GROUPINGS)
    if by == "category":
        return _category_dicts(r)
    if by == "pair":
        return [_pair_dict(p) for p in r.pairs]
    if by == "kind":
        return [{"kind": g.label, "phase": str(g.phase), "pairs": g.n, "before_us": g.before_us,
                 "after_us": g.after_us, "delta_us": g.after_us - g.before_us,
                 **{f"{c}_delta_us": g.deltas[c] for c in CATEGORIES}} for g in pair_rows(r)]
    return _kernel_dicts(r)


def _category_dicts(r: DiffResult) -> list[dict[str, Any]]:
    """Each category's row, then the total's."""
    rows = [{"category": c, "before_us": d.before_us, "after_us": d.after_us, "delta_us": d.delta_us,
             "ratio": d.ratio, "share_of_delta": d.share_of_delta} for c, d in r.categories.items()]
    b, a = r.before_figures.total_us, r.after_figures.total_us
    rows.append({"category": "total", "before_us": b, "after_us": a, "delta_us": a - b,
                 "ratio": a / b if b > 0 else None, "share_of_delta": 1.0 if a != b else None})
    return rows


def _pair_dict(p: BlockPair) -> dict[str, Any]:
    """A block pair's row: both blocks, how they paired, and the change by category."""
    return {"before": p.before.name, "after": p.after.name, "kind": p.before.kind, "phase": str(p.before.phase),
            "step_before": p.before.step, "step_after": p.after.step, "paired_by": str(p.paired_by),
            "before_us": p.before.total_us, "after_us": p.after.total_us, "delta_us": p.delta_us,
            **{f"{c}_delta_us": p.after.categories[c] - p.before.categories[c] for c in CATEGORIES}}


def _kernel_dicts(r: DiffResult) -> list[dict[str, Any]]:
    """One row per kernel (and category) of either side, counts and time before and after, by |Δ|."""
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for side, ks in (("before", r.kernels_before), ("after", r.kernels_after)):
        for k in ks:
            row = table.setdefault((k.name, str(k.category)), {
                "kernel": k.name, "category": str(k.category), "count_before": 0, "count_after": 0,
                "before_us": 0.0, "after_us": 0.0})
            row[f"count_{side}"] += k.count
            row[f"{side}_us"] += k.total_us
    out: list[dict[str, Any]] = list(table.values())
    for kr in out:
        kr["delta_us"] = kr["after_us"] - kr["before_us"]
    return sorted(out, key=lambda x: (-abs(x["delta_us"]), x["kernel"]))


def attribution_frame(result: Attribution, by: str = "kind") -> Any:
    """``Attribution.to_dataframe``: a pandas DataFrame of :func:`attribution_rows`."""
    pd = _pandas()
    rows = attribution_rows(result, by)
    return _numeric(pd.DataFrame(rows)) if rows else pd.DataFrame(columns=_empty_columns(by))


def diff_frame(r: DiffResult, by: str = "category") -> Any:
    """``DiffResult.to_dataframe``: a pandas DataFrame of :func:`diff_rows`."""
    pd = _pandas()
    return _numeric(pd.DataFrame(diff_rows(r, by)))


# Columns that hold a figure whatever their rows hold: a figure the trace cannot give is NaN there, never a None
# object (a column of None alone, such as latency_ms in a sweep without measured.json, was an object column).
_FIGURE_SUFFIXES = ("_us", "_ms", "_share", "_speedup", "_bytes")


def _numeric(df: Any) -> Any:
    pd = _pandas()
    for col in df.columns:
        if str(col).endswith(_FIGURE_SUFFIXES) and df[col].dtype == object:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    return df


def _empty_columns(by: str) -> list[str]:
    if by == "op":
        return OP_FRAME_COLUMNS
    if by == "stage":
        return list(STAGE_COLUMNS)
    if by == "kernel":
        return ["kernel", "category", "count", "total_us"]
    head = ["trace", "step", "ordinal", "block", "kind", "phase"] if by == "block" else [by, "phase", "blocks"]
    return head + ["total_us"] + [f"{c}_us" for c in CATEGORIES]


# ---------------------------------------------------------------------------------------------
# repr and HTML


def _ms(us: float) -> str:
    return f"{us / 1000:.2f} ms" if abs(us) >= 1000 else f"{us:.1f} µs"


def attribution_repr(result: Attribution) -> str:
    """One line: what, its median step (issue 37: the one time base), then the totals over all steps, labelled: how
    many blocks, their time and share, the two largest categories."""
    t = result.totals
    ps = per_step(result)
    lead = f"{per_step_line(ps)}; {totals_label(ps)}: " if ps.span_us is not None else f"{ps.label}: "
    share = f"{100 * t.attention_share:.1f}%" if t.attention_share is not None else "n/a"
    top = sorted(CATEGORIES, key=lambda c: -t.categories[c])[:2]
    cats = ", ".join(f"{c} {100 * t.categories[c] / t.total_us:.1f}%" for c in top) if t.total_us > 0 else "no time"
    return (f"<Attribution {result.source!r}: {lead}{t.blocks} attention blocks, {_ms(t.total_us)} ({share} of "
            f"{result.time_base} time); {cats}; {len(result.traces)} trace(s) · .to_dataframe(by=...)>")


def diff_repr(r: DiffResult) -> str:
    return (f"<DiffResult {r.labels[0] or r.before.source!r} → {r.labels[1] or r.after.source!r}: {lead_line(r)}; "
            f"{headline(r)}; "
            f"{len(r.pairs)} paired blocks · .to_dataframe(by=...)>")


# Inline styles (a notebook shows an output's HTML as it is: no stylesheet of ours): figures right-aligned in
# tabular digits, names on one line cut by the browser at a width, in full on hover (title).
_NUM_STYLE = "text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap"
_NAME_STYLE = "text-align:left;max-width:36em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap"
_SUMMARY_STYLE = "margin:0 0 4px;max-width:72em"
_NOTE_STYLE = "color:#666;font-size:90%"
_NO_FIGURE = "\u2014"  # a figure the trace cannot give (None, NaN)
_COUNT_COLUMNS = frozenset({"blocks", "kernels", "count", "calls", "pairs", "steps", "flops", "bytes"})


def _is_figure_column(name: str, rows: list[dict[str, Any]]) -> bool:
    """A column of figures, by its name (a column of missing figures alone is still one) or by holding a number
    (bool aside): right-aligned, head and cells."""
    if name.endswith((*_FIGURE_SUFFIXES, "share_of_delta", "_pct", "_per_s")) or name in _COUNT_COLUMNS:
        return True
    return any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (row.get(name) for row in rows))


def _cell(name: str, v: Any, figure: bool) -> str:
    """One escaped cell: shares (0-1) as percentages, other floats with one decimal, a missing figure as an em
    dash; a name's full text in its title."""
    if v is None or (isinstance(v, float) and v != v):
        text = _NO_FIGURE if figure else ""
    elif isinstance(v, float):
        text = f"{100 * v:.1f}%" if name.endswith(("_share", "share_of_delta")) else f"{v:,.1f}"
    else:
        text = str(v)
    if figure:
        return f"<td style='{_NUM_STYLE}'>{html.escape(text)}</td>"
    return f"<td style='{_NAME_STYLE}' title='{html.escape(text)}'>{html.escape(text)}</td>"


def _html_table(rows: list[dict[str, Any]], columns: list[str], summary: str, empty: str = "no rows") -> str:
    """The summary line above a small table of the first ``_HTML_ROWS`` rows (the DataFrame has them all); every
    text escaped, names from traces in cells and titles alike (anyone may have written a trace). The summary sits
    outside the table, so that a long headline does not squeeze the columns to its width."""
    figures = {c: _is_figure_column(c, rows) for c in columns}
    head = "".join(f"<th style='{_NUM_STYLE if figures[c] else 'text-align:left'}'>{html.escape(c)}</th>"
                   for c in columns)
    body = "".join("<tr>" + "".join(_cell(c, row.get(c), figures[c]) for c in columns) + "</tr>"
                   for row in rows[:_HTML_ROWS])
    if not rows:
        body = f"<tr><td colspan='{len(columns)}' style='{_NOTE_STYLE}'>{html.escape(empty)}</td></tr>"
    more = (f"<tr><td colspan='{len(columns)}' style='{_NOTE_STYLE}'>\u2026 {len(rows) - _HTML_ROWS} more rows: "
            ".to_dataframe()</td></tr>" if len(rows) > _HTML_ROWS else "")
    kind, _, rest = summary.partition(" ")
    note = (f"times in \u00b5s \u00b7 {len(rows)} row{'' if len(rows) == 1 else 's'} \u00b7 .to_dataframe(by=...) "
            "has every row and column")
    return (f"<div><p style='{_SUMMARY_STYLE}'><b>{html.escape(kind)}</b> {html.escape(rest)}<br>"
            f"<span style='{_NOTE_STYLE}'>{note}</span></p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}{more}</tbody></table></div>")


def _summary(text: str) -> str:
    """A repr less its angle brackets and its closing pointer to .to_dataframe (the table's note says it)."""
    return text[1:-1].removesuffix(" \u00b7 .to_dataframe(by=...)")


def attribution_html(result: Attribution, by: str = "kind") -> str:
    rows = attribution_rows(result, by)
    if by == "kernel":
        cols = ["kernel", "category", "count", "total_us"]
    elif by == "op":
        cols = ["op", "shapes", "dtype", "calls", "time_per_step_us", "tflops_per_s", "roof_pct", "bound"]
    elif by == "stage":
        cols = ["stage", "iterations", "busy_us", "attention_us", "attention_share", "idle_us", "tflops_per_s"]
    else:
        cols = [by if by != "block" else "block", "phase", "blocks" if by != "block" else "step",
                "total_us", *(f"{c}_us" for c in CATEGORIES)]
    empty = ("no attention blocks found (name your attention modules or ranges with analyze(path, scope=REGEX))"
             if not result.blocks else "no rows")
    return _html_table(rows, cols, _summary(attribution_repr(result)), empty)


def diff_html(r: DiffResult) -> str:
    return _html_table(diff_rows(r, "category"), ["category", "before_us", "after_us", "delta_us", "share_of_delta"],
                       _summary(diff_repr(r)))


for _fn in (attribution_frame, attribution_repr, attribution_html, diff_frame, diff_repr, diff_html):
    register(_fn.__name__, _fn)
