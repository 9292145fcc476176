"""One self-contained HTML page: the JSON renderer's output, embedded as data, drawn by inline JS/SVG.

Why this shape: the page must open from a USB stick with no network (no CDN, no chart library), and show
nothing that the JSON does not say (one source of truth). Its grouped figures (blocks by kind and by layer,
paired blocks by kind) are Python's rows (tracekit.results.rows), serialised beside the JSON: the script draws
them and sums or divides nothing, so a group reads the same on the page as in the terminal. The JSON sits in
a ``<script type="application/json">`` with ``<``, ``>`` and ``&`` escaped, so a kernel named ``</script>``
cannot end it; the script builds the DOM with ``textContent`` only, and a Content-Security-Policy forbids every
network fetch and every script but ours.
"""

from __future__ import annotations

import base64
import hashlib
import html
from importlib import resources
from typing import TYPE_CHECKING

import orjson

from ..results.attribution import Attribution, BlockResult, Totals
from ..results.efficiency import Efficiency, efficiency_dict
from ..results.rest import RestChange, TraceRest, rest_change
from ..results.rows import PairRow, Row, group_rows, layer_rows, pair_layer_rows, pair_rows, with_layers
from ..results.sweep import run_rows
from ..results.timeline import run_cap, timeline
from ..results.whatif import WhatIf, WhatIfRow, shape_text, whatif_rows
from .base import Renderer, largest_change, unmatched_rows
from .base import (  # issue 37: the rest of the step, in the terminal's wording and choice of parts
    changed_parts, rest_change_host_words, rest_change_lines, rest_change_words, rest_host_words, rest_shown,
    rest_step_words, top_parts,
)
from .jsonrenderer import diff_to_dict, idle_cause_dict, timeline_dict, to_dict
from .names import label_ladder
from .base import fmt_time, top_us  # issue 42: a trace with no attention blocks
from .whatif import backend_label, error_text, notes, nothing_to_predict, step_line
from .stagetable import stage_diff_data, stage_table_data  # issue 44: serving stages

if TYPE_CHECKING:
    from ..results.diff import DiffResult

# The page's one script, in this order: the timeline (timeline.js defines ``tkTimeline``), then the report that
# calls it. Two files to read, one ``<script>`` element and one hash to allow.
_SCRIPTS = ("timeline.js", "report.js")


def script() -> str:
    return "\n".join(_asset(name) for name in _SCRIPTS)


def script_sha256() -> str:
    """The base64 SHA-256 of the page's one script: the CSP allows that script and no other, so an injected
    ``<script>`` (or an inline handler) would not run even if an escape failed (the TensorBoard route uses it too)."""
    return base64.b64encode(hashlib.sha256(script().encode("utf-8")).digest()).decode("ascii")


def csp() -> str:
    return (f"default-src 'none'; script-src 'sha256-{script_sha256()}'; style-src 'unsafe-inline'; "
            "img-src data:")

# Report kinds: the page's script draws one view per kind.
SINGLE, SWEEP, DIFF = "single", "sweep", "diff"


def embed_json(obj: object) -> str:
    """JSON safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` survives (``</script>``, ``<!--``)."""
    text = orjson.dumps(obj).decode()
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


# Keys of a block that the page never draws: left out so that the 32-run sweep page stays small.
_UNDRAWN_BLOCK_KEYS = ("efficiency_by_category",)


def _drawn(d: dict) -> dict:
    d["blocks"] = [{k: v for k, v in b.items() if k not in _UNDRAWN_BLOCK_KEYS} for b in d["blocks"]]
    return d


def _timeline(result: Attribution, step: int | None, cap: int | None = None) -> dict | None:
    t = timeline(result, step, cap)
    if t is None:
        return None
    t.check()
    d = timeline_dict(t)
    d["requested"] = step
    d["labels"] = [label_ladder(n) for n in d["names"]]  # per kernel name, its display names (timeline.js)
    return d


def _with_timeline(d: dict, result: Attribution, step: int | None, cap: int | None = None) -> dict:
    t = _timeline(result, step, cap)
    if t is not None:
        d["timeline"] = t
    return d


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _share(part: float | None, whole: float) -> float | None:
    return None if part is None or whole <= 0 else round(part / whole, 6)


def _timed_share(e: Efficiency | None, busy_us: float) -> float | None:
    """The share of busy time in kernels whose FLOPs and bytes are counted (the roofline table's "timed")."""
    return None if e is None or e.ops == 0 else _share(e.time_ns / 1000, busy_us)


def group_dict(g: Row) -> dict:
    """One group row as the page draws it: its sums (rounded as the JSON rounds), each category's share of its
    busy time, and its idle only where a block of it ran on a device (``None``: nothing could idle)."""
    device = g.device_blocks > 0
    return {"label": g.label, "phase": g.phase, "blocks": g.blocks, "kernels": g.kernels,
            "total_us": _r(g.total_us), "span_us": _r(g.span_us),
            "categories": {k: _r(v) for k, v in g.categories.items()},
            "shares": {k: _share(v, g.total_us) for k, v in g.categories.items()},
            "matmul_roles": None if g.matmul_roles is None else {k: _r(v) for k, v in g.matmul_roles.items()},
            "role_shares": None if g.matmul_roles is None else {
                k: _share(v, g.categories["matmul"]) for k, v in g.matmul_roles.items()},
            "idle_us": _r(g.idle_us) if device else None,
            "idle_share": _share(g.idle_us, g.span_us) if device else None,
            "idle_by_cause": idle_cause_dict(g.idle_by_cause) if device else None,
            "efficiency": efficiency_dict(g.efficiency), "timed_share": _timed_share(g.efficiency, g.total_us)}


def _all_blocks(t: Totals) -> dict:
    """The roofline table's "all blocks" row: the totals' efficiency and its timed share."""
    return {"label": "all blocks", "blocks": t.blocks, "efficiency": efficiency_dict(t.efficiency),
            "timed_share": _timed_share(t.efficiency, t.total_us)}


def groups_data(result: Attribution) -> dict:
    """What the page draws of one attribution beyond the JSON, all computed here: its blocks grouped by kind and
    by layer (tracekit.results.rows.group_rows), the all-blocks efficiency row, the traces' summed time base and
    the blocks' idle share of their span."""
    t = result.totals
    return {"kind": [group_dict(g) for g in group_rows(result, "kind")],
            "kind_layers": _kind_layer_rows(result),
            "layer": [group_dict(g) for g in group_rows(result, "layer")],
            "all": _all_blocks(t), "base_us": _r(sum(s.base_us for s in result.traces)),
            "idle_share": _share(t.idle_us, t.span_us) if t.launch_bound is not None else None}


def _kind_layer_rows(result: Attribution) -> list[dict]:
    """The kind rows, each followed by its attention layer's row (tracekit.results.rows.layer_rows, ``"layer":
    true``; issue 38): the page's "By block kind" bars, drawn as Python summed them."""
    out: list[dict] = []
    for g, lay in zip(group_rows(result, "kind"), layer_rows(result, "kind")):
        out.append({**group_dict(g), "layer": False})
        if lay is not None:
            out.append({**group_dict(lay), "idle_us": None, "idle_share": None, "idle_by_cause": None,
                        "layer": True})
    return out


def _pair_dict(p: PairRow) -> dict:
    return {"label": p.label, "phase": p.phase, "n": p.n, "before_us": _r(p.before_us), "after_us": _r(p.after_us),
            "delta_us": _r(p.after_us - p.before_us), "largest_change": largest_change(p.deltas)}


def _unpaired(blocks: list[BlockResult]) -> list[dict]:
    return [{"label": kind, "phase": phase, "n": n, "total_us": _r(us)}
            for kind, phase, n, us in unmatched_rows(blocks)]


def pair_groups_data(result: DiffResult) -> dict:
    """The diff's paired blocks grouped by kind (tracekit.results.rows.pair_rows) and its unpaired ones by kind."""
    pairs = with_layers(pair_rows(result), pair_layer_rows(result))  # each paired kind, then its layers' (issue 38)
    return {"pairs": [_pair_dict(p) for p in pairs],
            "before": _unpaired(result.unmatched_before), "after": _unpaired(result.unmatched_after)}


def _rest_rows(by: str, parts: dict[str, float]) -> tuple[list[dict], int]:
    """The parts the terminal names (renderers.base.top_parts) as table rows, and how many more have time."""
    top, more = top_parts(parts)
    return [{"by": by, "name": k, "us": _r(v)} for k, v in top], more


def _trace_rest_dict(tr: TraceRest, named: bool) -> dict:
    """One trace's median step outside attention as the page draws it: the terminal's words for the step and
    (launch-bound) its host side, and one table row per part the terminal names: by category, by top-level
    module, and the top-level host ops where the step is launch-bound; ``more``: the parts left out, by kind."""
    r = tr.rest
    rows: list[dict] = []
    more: dict[str, int] = {}
    host = rest_host_words(tr)
    for by, parts in (("category", r.categories), ("module", r.modules), ("host op", r.host_ops if host else {})):
        got, n = _rest_rows(by, parts)
        rows += got
        if n:
            more[by] = n
    return {"label": tr.label if named else None, "step": r.step, "steps": tr.steps, "words": rest_step_words(tr),
            "outside_us": _r(r.outside_us), "launch_bound": tr.launch_bound, "host": host, "rows": rows, "more": more}


def rest_data(result: Attribution) -> dict | None:
    """The rest of the step (issue 37): each shown trace's median step (renderers.base.rest_shown: a few traces
    each named, many as one note); None when no trace has steps."""
    shown, note = rest_shown(result)
    if not shown and note is None:
        return None
    named = len(result.traces) > 1
    return {"traces": [{**_trace_rest_dict(tr, named), **_blockless_dict(tr)} for tr in shown], "note": note}


def _blockless_dict(tr: TraceRest) -> dict:
    """For a trace with no attention blocks (issue 42; tracekit.analysis.rest.blockless_steps): the step's idle by
    cause in words (``idle 450 µs by cause: other 410 µs · launch 20.0 µs · queued 20.0 µs``) and its top device
    events as rows; {} for a trace with blocks (the figures are not computed there)."""
    r = tr.rest
    if r.idle_by_cause is None:
        return {}
    idle = sum(r.idle_by_cause.values())
    causes = {c.replace("_", " "): v for c, v in r.idle_by_cause.items()}
    return {"idle_words": f"idle {fmt_time(idle)} by cause: {top_us(causes)}" if idle > 0 else "no idle time",
            "top_kernels": [{"name": n, "category": c, "count": k, "us": _r(us)} for n, c, k, us in r.top_kernels]}


def _pair_rest_rows(by: str, before: dict[str, float], after: dict[str, float]) -> list[dict]:
    names, _ = changed_parts(before, after)
    return [{"by": by, "name": k, "before_us": _r(before.get(k, 0.0)), "after_us": _r(after.get(k, 0.0)),
             "delta_us": _r(after.get(k, 0.0) - before.get(k, 0.0))} for k in names]


def rest_change_data(result: DiffResult) -> dict | None:
    """The diff outside attention (issue 37) as the page draws it: the terminal's words for the steps and the host
    side, and a row (before, after, Δ) per part the terminal names: categories, top-level modules, and where a
    side is launch-bound the host ops that changed most. Where a side holds several traces, the terminal's note;
    None when neither applies."""
    c = rest_change(result.before.traces, result.after.traces)
    if c is None:
        lines = rest_change_lines(result)
        return {"note": lines[0]} if lines else None
    return _rest_change_dict(c)


def _rest_change_dict(c: RestChange) -> dict:
    b, a = c.before, c.after
    host = rest_change_host_words(c)
    rows = _pair_rest_rows("category", b.categories, a.categories) + _pair_rest_rows("module", b.modules, a.modules)
    rows += [{"by": "host op", "name": n, "before_us": _r(x), "after_us": _r(y), "delta_us": _r(y - x)}
             for n, x, y in (c.host_ops_changed if host else [])]
    return {"words": rest_change_words(c), "host": host, "before_us": _r(b.outside_us), "after_us": _r(a.outside_us),
            "rows": rows, "note": None}


def whatif_data(w: WhatIf) -> dict:
    """The page's "What if" section (issue 39): ``tracekit whatif``'s rows per block kind (results.whatif_rows, the
    terminal table's figures, not rounded: the page shows what the command prints), its headline per step, the
    per-step figures and its notes (the mask it assumed, the launch-bound warning, the calibration's source); or,
    where nothing could be predicted, only ``reason``: the one line the command gives, never a guess."""
    head = {"backend": backend_label(w), "device": w.device, "mask_option": w.mask_option}
    reason = nothing_to_predict(w)
    if reason is not None:
        return {**head, "reason": reason}
    rows = whatif_rows(w, "kind")
    stepped = sum(1 for s in w.per_step if s.step is not None)
    t = w.totals
    return {**head, "reason": None, "headline": step_line(w),
            "basis": f"per step (median of {stepped})" if stepped else "all blocks (no ProfilerStep)",
            "rows": [_whatif_row(r) for r in rows],
            "per_step": [{"step": s.step, "eager_us": s.eager_us, "fused_us": s.fused_us, "saving_us": s.saving_us}
                         for s in w.per_step],
            "totals": {"eager_us": t.eager_us, "fused_us": t.fused_us, "saving_us": t.saving_us},
            "notes": [n.strip() for n in notes(w, rows)]}


def _whatif_row(r: WhatIfRow) -> dict:
    return {"label": r.label, "phase": str(r.phase) if r.phase is not None else None, "n": r.n,
            "shape": shape_text(r.shape, r.mask, r.mask_assumed), "mask": r.mask, "mask_assumed": r.mask_assumed,
            "confidence": r.confidence, "error": r.error, "error_text": error_text(r.confidence),
            "eager_core_us": r.eager_core_us, "fused_us": r.fused_us, "block_us": r.block_us,
            "fused_block_us": r.fused_block_us, "saving_per_step_us": r.saving_per_step_us, "steps": r.steps,
            "launch_bound_predicted": r.launch_bound_predicted, "reason": r.reason}


def _with_whatif(d: dict, result: Attribution) -> dict:
    """``d`` with the "What if" section where the analysis made a prediction (the report and the tab ask for one;
    a result from ``tracekit.analyze`` has none, and its page has no section)."""
    if result.whatif is not None:
        d["whatif"] = whatif_data(result.whatif)
    return d


def report_data(result: Attribution | DiffResult, tool: str, step: int | None = None) -> dict:
    """What the page embeds: ``{"report": kind, "result": <the JSON renderer's dict>}``.

    The dict is the JSON renderer's, less what the page never draws (per-block efficiency by category, and for
    a folder of runs the merged ``blocks``: each run carries its own), plus each attribution's ``timeline`` of
    one step (``step``, else its median step; tracekit.results.timeline), its ``groups`` (groups_data), its
    ``rest`` of the step (rest_data) and, where the analysis made one, its ``whatif`` (whatif_data). A folder's
    run rows carry ``span_per_step_us`` and ``busy_per_step_us`` (the charts' and the run table's time base). A
    diff carries ``pair_groups`` (pair_groups_data), ``rest`` (rest_change_data) and ``timelines``, one per side
    (``before``/``after``), that the page draws on one time scale.
    """
    if isinstance(result, Attribution):
        d = _drawn(to_dict(result, tool))
        if result.runs:
            d["blocks"] = []
            cap = run_cap(len(result.runs))  # the runs share the page's kernel budget
            per_step = {r.name: (_r(r.span_per_step_us), _r(r.busy_us / r.steps)) for r in run_rows(result)}
            d["runs"] = [_with_timeline(_drawn(r), run.attribution, step, cap)
                         for r, run in zip(d["runs"], result.runs)]
            for r, run in zip(d["runs"], result.runs):
                r["groups"] = groups_data(run.attribution)
                r["rest"] = rest_data(run.attribution)
                r["stage_table"] = stage_table_data(run.attribution)  # issue 44: each run's own stages
                _with_whatif(r, run.attribution)
                r["run_row"]["span_per_step_us"], r["run_row"]["busy_per_step_us"] = per_step[r["name"]]
            d["warnings"] = list(result.warnings)  # (a run skipped: the page names it, as stderr does)
            return {"report": SWEEP, "result": d}
        d["groups"] = groups_data(result)
        d["rest"] = rest_data(result)
        d["stage_table"] = stage_table_data(result)  # issue 44: serving stages (None: no section)
        _with_whatif(d, result)
        return {"report": SINGLE, "result": _with_timeline(d, result, step)}
    d = diff_to_dict(result, tool)
    d["pair_groups"] = pair_groups_data(result)
    d["rest"] = rest_change_data(result)
    d["stage_diff"] = stage_diff_data(result)  # issue 44: stage to stage (None: no section)
    sides = {"before": _timeline(result.before, step), "after": _timeline(result.after, step)}
    if all(sides.values()):
        d["timelines"] = sides
    return {"report": DIFF, "result": d}


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def page(data: dict, title: str) -> str:
    """The whole page for ``report_data``'s dict."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp()}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{html.escape(title)}</title>\n<style>{_asset('report.css')}</style>\n</head>\n"
        "<body><div id=\"app\"><noscript>This report draws its figures with JavaScript; the data is in the page "
        "source as JSON.</noscript></div>\n"
        f"<script type=\"application/json\" id=\"tk-data\">{embed_json(data)}</script>\n"
        f"<script>{script()}</script>\n</body></html>\n"
    )


class HTMLRenderer(Renderer):
    """``tracekit report`` (and ``-o x.html``): one offline page per attribution, folder of runs or diff."""

    name = "html"
    extension = ".html"

    step: int | None = None  # the timeline's step (``tracekit report --step``); None: the median step

    def render_attribution(self, result: Attribution) -> str:
        return page(report_data(result, self.tool, self.step), f"tracekit report — {result.source}")

    def render_diff(self, result: DiffResult) -> str:
        return page(report_data(result, self.tool, self.step),
                    f"tracekit diff — {result.labels[0]} → {result.labels[1]}")
