"""The serving stage table (issue 44, item 2) as every view words it: one row per stage (prefill, decode, mixed,
outside), its busy and attention time, attention share, attention split, efficiency and idle.

One place for the cells and the JSON rows, so that the terminal, markdown, CSV, JSON, the HTML report and the
TensorBoard tab cannot disagree (tracekit.results.stages says what each figure means).
"""

from __future__ import annotations

from ..results.attribution import Attribution
from ..results.efficiency import efficiency_dict
from ..results.format import fmt_time
from ..results.diff import DiffResult
from ..results.stages import STAGE_COLUMNS, StageDiff, StageRow, stage_record
from ..vocab import CATEGORIES

STAGE_HEAD = ("stage", "iterations", "busy", "attention", "attn%", "idle", "fused%", "matmul%", "softmax%", "mem%",
              "elem%", "other%", "TFLOP/s", "roof")
_SHOWN = ("fused_attention", "matmul", "softmax", "memory", "elementwise", "other")
NO_SPAN = "n/a"  # the outside row's span and idle: its events lie around the iterations, in no one stretch


def stage_title(result: Attribution) -> str:
    """``serving stages (device busy time, by engine iteration; rows add up to the whole 10.72 ms)``."""
    whole = sum(t.base_us for t in result.traces)
    return f"serving stages (device busy time by engine iteration; the rows add up to the whole {fmt_time(whole)}):"


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole > 0 else "n/a"


def _rate(r: StageRow) -> tuple[str, str]:
    """(TFLOP/s, % of roof and bound) of the stage's attention, "n/a" where no call was counted."""
    e = efficiency_dict(r.efficiency)
    tf, roof, bound = e["tflops_per_s"], e["roof_pct"], e["bound"]
    ranged = e.get("flops_kind") == "bounds"  # (a range: never its lower end alone, as if it were the count)
    tf_hi, roof_hi = e.get("tflops_per_s_max"), e.get("roof_pct_max")
    rate = "n/a" if tf is None else f"{tf:.1f}" + (f"\u2013{tf_hi:.1f}" if ranged and tf_hi is not None else "")
    share = "n/a" if roof is None else f"{roof:.1f}" + (f"\u2013{roof_hi:.1f}" if ranged and roof_hi is not None
                                                         else "") + f"% {bound or ''}"
    return rate, share.strip()


def stage_cells(r: StageRow) -> list[str]:
    """The table cells (STAGE_HEAD) of one row: times as the terminal writes them, the split as % of attention."""
    idle = (NO_SPAN if r.idle_us is None or r.span_us is None
            else f"{fmt_time(r.idle_us)} ({_share(r.idle_us, r.span_us)})")
    return [r.stage, str(r.iterations), fmt_time(r.busy_us), fmt_time(r.attention_us),
            _share(r.attention_us, r.busy_us), idle, *(_share(r.categories[c], r.attention_us) for c in _SHOWN),
            *_rate(r)]


def stage_csv_row(r: StageRow) -> list:
    """The CSV row (STAGE_COLUMNS): raw µs figures rounded to the ns, empty cells where a figure is None."""
    rec = stage_record(r)
    return ["" if rec[c] is None else round(v, 6) if isinstance(v := rec[c], float) else v for c in STAGE_COLUMNS]


def stage_dict(r: StageRow) -> dict:
    """One JSON row of ``stages`` (docs/attribution.md, "Serving stages")."""
    share = r.attention_share
    return {"stage": r.stage, "iterations": r.iterations, "rules": dict(sorted(r.rules.items())),
            "busy_us": round(r.busy_us, 3), "attention_us": round(r.attention_us, 3),
            "attention_share": None if share is None else round(share, 6),
            "categories": {c: round(r.categories[c], 3) for c in CATEGORIES},
            "span_us": None if r.span_us is None else round(r.span_us, 3),
            "idle_us": None if r.idle_us is None else round(r.idle_us, 3),
            "blocks": r.blocks, "efficiency": efficiency_dict(r.efficiency)}


def stage_table_lines(result: Attribution) -> list[str]:
    """The stage table in markdown (the heading line, then the rows); [] on a trace without stages."""
    if result.stages is None:
        return []
    lines = ["", stage_title(result), "", "| " + " | ".join(STAGE_HEAD) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(STAGE_HEAD) - 1)) + "|"]
    return lines + ["| " + " | ".join(stage_cells(r)) + " |" for r in result.stages]


NO_STAGES = ("no serving stages: the trace shows no prefill or decode iteration (docs/attribution.md, "
             "\"Serving stages\")")


def stages_key(result: Attribution) -> dict:
    """``{"stages": [...]}`` on a serving trace, else nothing: a trace without stages keeps its JSON byte for byte."""
    return {} if result.stages is None else {"stages": [stage_dict(r) for r in result.stages]}


# -- diff: stage to stage (issue 44): prefill with prefill, decode with decode; a one-sided stage is named

STAGE_DIFF_HEAD = ("stage", "busy before", "after", "Δ", "attention before", "after", "Δ", "attn% before", "after")


def stage_diff_cells(d: StageDiff) -> list[list[str]]:
    """One row per paired stage: busy and attention time on both sides, their deltas, and the attention shares."""
    return [[p.stage, fmt_time(p.before.busy_us), fmt_time(p.after.busy_us), _signed(p.busy_delta_us),
             fmt_time(p.before.attention_us), fmt_time(p.after.attention_us), _signed(p.attention_delta_us),
             _share(p.before.attention_us, p.before.busy_us), _share(p.after.attention_us, p.after.busy_us)]
            for p in d.pairs]


def _signed(us: float) -> str:
    return ("+" if us >= 0 else "−") + fmt_time(abs(us))


def stage_only_lines(d: StageDiff) -> list[str]:
    """``stages in before only: prefill (not paired: the other side ran no prefill iteration)``, per side."""
    return [f"stages in {side} only: {', '.join(names)} (not paired: the other side ran no such iteration)"
            for side, names in (("before", d.only_before), ("after", d.only_after)) if names]


def stage_diff_title() -> str:
    return "serving stages, stage to stage (device busy time; a stage is paired only with itself):"


def stage_diff_dict(r: DiffResult) -> dict:
    """``{"stages": {"pairs": [...], "only_before": [...], "only_after": [...]}}`` where a side is a serving trace;
    nothing otherwise (the diff JSON of other traces stays byte for byte)."""
    d = r.stages
    if not d.any:
        return {}
    return {"stages": {"pairs": [{"stage": p.stage, "before": stage_dict(p.before), "after": stage_dict(p.after),
                                  "busy_delta_us": round(p.busy_delta_us, 3),
                                  "attention_delta_us": round(p.attention_delta_us, 3)} for p in d.pairs],
                       "only_before": list(d.only_before), "only_after": list(d.only_after)}}


def stage_diff_csv(r: DiffResult) -> list[dict[str, object]]:
    """The diff CSV's ``stage`` rows (busy and attention per paired stage) and ``stage_only_<side>`` rows."""
    rows: list[dict[str, object]] = []
    for p in r.stages.pairs:
        for what, b, a in (("busy", p.before.busy_us, p.after.busy_us),
                           ("attention", p.before.attention_us, p.after.attention_us)):
            rows.append({"section": "stage", "category": f"{p.stage}:{what}", "before_us": b, "after_us": a,
                         "delta_us": a - b})
    for side, names in (("before", r.stages.only_before), ("after", r.stages.only_after)):
        rows += [{"section": f"stage_only_{side}", "category": s} for s in names]
    return rows


def stage_table_data(result: Attribution) -> dict | None:
    """The report's and the TensorBoard tab's stage section: the terminal's cells, drawn as they are (the page sums
    and divides nothing); None on a trace without stages."""
    if result.stages is None:
        return None
    return {"title": stage_title(result), "head": list(STAGE_HEAD), "rows": [stage_cells(r) for r in result.stages],
            "stages": [r.stage for r in result.stages]}


def stage_diff_data(r: DiffResult) -> dict | None:
    """The diff page's stage section: paired stages' cells and the one-sided stages' lines; None without stages."""
    if not r.stages.any:
        return None
    return {"title": stage_diff_title(), "head": list(STAGE_DIFF_HEAD), "rows": stage_diff_cells(r.stages),
            "stages": [p.stage for p in r.stages.pairs], "notes": stage_only_lines(r.stages)}
