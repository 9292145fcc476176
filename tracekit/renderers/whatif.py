"""``tracekit whatif`` in every format: a terminal table, JSON, CSV and markdown.

The rows and their figures come from tracekit.results.whatif (``whatif_rows``); this module lays them out, labels
every figure as a prediction with its backend, basis and stated error, and makes trace names safe for each format.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson

from ..results.whatif import CONFIDENCE_ERRORS, WhatIf, WhatIfBlock, WhatIfRow, shape_text, whatif_rows
from .base import fmt_time, printable
from .csvrenderer import _chunks
from .markdown import _md

WHATIF_SCHEMA_VERSION = 1
BACKEND_LABELS = {"cudnn": "cuDNN", "flash": "flash", "efficient": "mem-efficient"}


def render_whatif(results: Sequence[WhatIf], fmt: str, by: str = "kind", tool: str = "tracekit",
                  title: str | None = None) -> str:
    """The whole output; ``results``: one per backend (``--backend all``) or one, the first the chosen one."""
    return _FORMATS[fmt](list(results), by, tool, title)


def error_text(confidence: str) -> str:
    err = CONFIDENCE_ERRORS.get(confidence)
    if confidence == "masked":
        return "lower bound"
    return f"±{err * 100:.0f}%" if err is not None else confidence


def backend_label(w: WhatIf) -> str:
    return BACKEND_LABELS.get(w.backend, w.backend)


# -- terminal ------------------------------------------------------------------------------------------------------
def _table(results: list[WhatIf], by: str, tool: str, title: str | None) -> str:
    out = [f"{tool} whatif — {printable(title or results[0].source)}"]
    for w in results:
        out += _table_one(w, by)
    return "\n".join(out) + "\n"


def _table_one(w: WhatIf, by: str) -> list[str]:
    head = f"device {printable(w.device or 'unknown')} · backend {backend_label(w)} · mask {w.mask_option}"
    if w.reason:
        return ["", head, f"no prediction: {printable(w.reason)}"]
    rows = whatif_rows(w, by)
    labels = [printable(r.label)[:40] for r in rows]
    shapes = [shape_text(r.shape, r.mask, r.mask_assumed) for r in rows]
    lw, sw = max(map(len, labels + [by])), max(map(len, shapes + ["shape"]))
    lines = ["", head + " · predicted, per call unless marked", step_line(w),
             f"  {by:<{lw}} {'n':>3}  {'shape':<{sw}}  {'eager core':>10} → {backend_label(w):<9} "
             f"{'block':>9} → {'fused':<9} {'saving/step':>11}  confidence"]
    for r, label, shape in zip(rows, labels, shapes):
        lines.append(f"  {label:<{lw}} {r.n:>3}  {shape:<{sw}}  " + _figures(r))
    return lines + notes(w, rows)


def step_line(w: WhatIf) -> str:
    steps = [s for s in w.per_step if s.step is not None]
    if not w.per_step:
        return "no eager block to predict: each block already runs a fused kernel, or its shapes were not recorded"
    if not steps:
        t = w.totals
        return (f"all blocks (no ProfilerStep): eager {fmt_time(t.eager_us)} → {fmt_time(t.fused_us)} predicted · "
                f"saving {fmt_time(t.saving_us)} (device busy)")
    mid = sorted(steps, key=lambda s: (s.saving_us, s.step))[(len(steps) - 1) // 2]
    return (f"per step (median of {len(steps)}): attention blocks {fmt_time(mid.eager_us)} busy → "
            f"{fmt_time(mid.fused_us)} predicted · saving {fmt_time(mid.saving_us)} of device busy time")


def nothing_to_predict(w: WhatIf) -> str | None:
    """The one line that stands for the whole prediction where no block has a number (the report's "What if"
    section): the result's own reason (a CPU-only trace, no calibration for the device), else its blocks' reasons
    (no shapes recorded, no eager core), else the step line's; None where some block is predicted."""
    if w.reason:
        return f"no prediction: {w.reason}"
    if any(True for _ in w.predicted()):
        return None
    reasons = list(dict.fromkeys(b.reason for b in w.blocks if b.reason))
    return f"no prediction: {'; '.join(reasons)}" if reasons else step_line(w)


def _figures(r: WhatIfRow) -> str:
    if r.fused_us is None or r.fused_block_us is None or r.saving_per_step_us is None:
        return f"{fmt_time(r.eager_core_us):>10}   no prediction: {printable(r.reason or '')}"
    return (f"{fmt_time(r.eager_core_us):>10} → {fmt_time(r.fused_us):<9} {fmt_time(r.block_us):>9} → "
            f"{fmt_time(r.fused_block_us):<9} {fmt_time(r.saving_per_step_us):>11}  "
            f"{r.confidence} ({error_text(r.confidence)})")


def notes(w: WhatIf, rows: list[WhatIfRow]) -> list[str]:
    out = []
    if any(r.mask_assumed and r.fused_us is not None for r in rows):
        out.append("  mask: assumed by --mask auto (causal where Lq = Lk and the core masks, else none); "
                   "--mask dense if it is a padding mask")
    bound = [r for r in rows if r.launch_bound_predicted]
    if bound:
        out.append(f"  launch-bound after the switch: {', '.join(printable(r.label) for r in bound[:4])}"
                   f"{' …' if len(bound) > 4 else ''}: the host takes longer per call than the predicted device "
                   "time, so the latency saving will be smaller (CUDA graphs or torch.compile collect it)")
    cal = w.calibration or {}
    origin = cal.get("origin", "built-in")
    where = "" if origin == "built-in" else f" (from {printable(str(origin))})"
    out.append(f"  calibration: {printable(str(cal.get('source', '')))}{where}")
    return out


# -- JSON ----------------------------------------------------------------------------------------------------------
def _json(results: list[WhatIf], by: str, tool: str, title: str | None) -> str:
    doc = {"schema_version": WHATIF_SCHEMA_VERSION, "tool": tool, "source": results[0].source,
           "whatif": whatif_dict(results[0])}
    if len(results) > 1:
        doc["by_backend"] = [whatif_dict(w) for w in results]
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n"


def whatif_dict(w: WhatIf) -> dict[str, object]:
    t = w.totals
    return {"backend": w.backend, "device": w.device, "calibration": w.calibration, "mask": w.mask_option,
            "reason": w.reason, "blocks": [_block_dict(b) for b in w.blocks],
            "per_step": [{"step": s.step, "eager_us": s.eager_us, "fused_us": s.fused_us, "saving_us": s.saving_us}
                         for s in w.per_step],
            "totals": {"eager_us": t.eager_us, "fused_us": t.fused_us, "saving_us": t.saving_us}}


def _block_dict(b: WhatIfBlock) -> dict[str, object]:
    return {"name": b.name, "kind": b.kind, "step": b.step, "ordinal": b.ordinal, "phase": str(b.phase),
            "shape": b.shape.as_dict() if b.shape else None, "mask": b.mask, "mask_assumed": b.mask_assumed,
            "flops": b.flops, "block_us": b.block_us, "eager_core_us": b.eager_core_us,
            "repeat_kv_us": b.repeat_kv_us, "host_us": b.host_us, "fused_us": b.fused_us,
            "fused_block_us": b.fused_block_us, "saving_us": b.saving_us, "confidence": b.confidence,
            "error": CONFIDENCE_ERRORS.get(b.confidence), "reason": b.reason,
            "launch_bound_predicted": b.launch_bound_predicted}


# -- CSV and markdown ----------------------------------------------------------------------------------------------
_CSV_HEAD = ("backend", "row", "n", "shape", "mask", "mask_assumed", "eager_core_us", "fused_us", "block_us",
             "fused_block_us", "saving_per_step_us", "confidence", "error", "launch_bound_predicted", "reason")


def _csv(results: list[WhatIf], by: str, tool: str, title: str | None) -> str:
    rows = ([w.backend, r.label, r.n, shape_text(r.shape), r.mask, r.mask_assumed, r.eager_core_us, r.fused_us,
             r.block_us, r.fused_block_us, r.saving_per_step_us, r.confidence, r.error, r.launch_bound_predicted,
             r.reason or w.reason] for w in results for r in (whatif_rows(w, by) or [_empty(w)]))
    return "".join(_chunks(_CSV_HEAD, rows))


def _empty(w: WhatIf) -> WhatIfRow:
    return WhatIfRow(label="", phase=None, n=0, shape=None, mask=None, mask_assumed=False, confidence="none",
                     eager_core_us=0.0, fused_us=None, block_us=0.0, fused_block_us=None, saving_per_step_us=None,
                     steps=0, launch_bound_predicted=False, reason=w.reason)


def _markdown(results: list[WhatIf], by: str, tool: str, title: str | None) -> str:
    out = [f"# What if: fused attention — {_md(title or results[0].source)}", ""]
    for w in results:
        out += [f"## {backend_label(w)} on {_md(w.device or 'an unknown device')} (predicted)", ""]
        if w.reason:
            out += [f"No prediction: {_md(w.reason)}", ""]
            continue
        out += [step_line(w), "", f"| {by} | n | shape | eager core | fused | block | fused block | saving/step "
                "| confidence |", "|---|--:|---|--:|--:|--:|--:|--:|---|"]
        for r in whatif_rows(w, by):
            cells = [_md(r.label), str(r.n), _md(shape_text(r.shape, r.mask, r.mask_assumed)),
                     fmt_time(r.eager_core_us), _opt(r.fused_us), fmt_time(r.block_us), _opt(r.fused_block_us),
                     _opt(r.saving_per_step_us), f"{r.confidence} ({error_text(r.confidence)})"]
            out.append("| " + " | ".join(cells) + " |")
        out += ["", f"Calibration: {_md(str((w.calibration or {}).get('source', '')))}", ""]
    return "\n".join(out)


def _opt(us: float | None) -> str:
    return fmt_time(us) if us is not None else "—"


_FORMATS: dict[str, Callable[[list[WhatIf], str, str, str | None], str]] = {
    "table": _table, "json": _json, "csv": _csv, "markdown": _markdown}
