"""Sibling renderers over one :class:`~tracekit.diff.DiffResult`: terminal, JSON, CSV, markdown.

The JSON follows the Diff contract in docs/attribution.md; the CSV column order is a contract
for scripts (tests/golden/diff_header.csv).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

import orjson

from ..diff import BASIS_MEDIAN, DIFF_SCHEMA_VERSION, DiffResult, Verdict
from ..result import CATEGORIES, BlockResult, zero_categories
from .base import fmt_time, pick_renderer
from .jsonrenderer import to_dict
from .terminal import _HEADS, _table, header_lines

_KERNELS_SHOWN = 8


class DiffRenderer:
    """Turns a :class:`DiffResult` into text. Subclasses set ``name`` and ``extension``."""

    name = ""
    extension = ""

    def __init__(self, tool: str = "tracekit"):
        self.tool = tool

    def render(self, result: DiffResult) -> str:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# Shared wording


def signed(us: float) -> str:
    """``+0.60 ms`` / ``-1.80 ms`` / ``0.0 µs``: a delta always shows its direction."""
    if abs(us) < 0.05:
        return "0.0 µs"
    return ("+" if us > 0 else "") + fmt_time(us)


def _ratio(before: float, after: float) -> str:
    if before > 0:
        return f"{after / before:.2f}×" if after > 0 else "gone"
    return "new" if after > 0 else "—"


def _share(x: float | None) -> str:
    if x is None:
        return "n/a"
    v = 100 * x
    return f"{0.0 if abs(v) < 0.05 else v:.1f}%"


def verdict_line(v: Verdict) -> str:
    """The gate's one line for stderr: what was compared, and the decision."""
    head = f"fail-if-slower {v.threshold_pct:g}%:"
    basis = "median step" if v.basis == BASIS_MEDIAN else "total"
    if v.change_pct is None:
        if v.ok:
            return f"{head} ok: no attention time on either side"
        return f"{head} REGRESSION: attention time appeared (0 → {fmt_time(v.after_us)}, {basis})"
    fig = f"attention time {fmt_time(v.before_us)} → {fmt_time(v.after_us)} ({v.change_pct:+.1f}%, {basis})"
    noise = "; the change is within noise" if v.within_noise else ""
    if v.ok:
        return f"{head} ok: {fig}{noise}"
    return f"{head} REGRESSION: {fig} is more than {v.threshold_pct:g}% slower{noise}"


def _bytes(n: int) -> str:
    a = abs(n)
    for unit, k in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if a >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


def basis_label(r: DiffResult) -> str:
    return "median step" if r.basis == BASIS_MEDIAN else "total"


def headline(r: DiffResult) -> str:
    """``attention (median step): 2.69 ms → 1.03 ms · Δ -1.66 ms (-61.6%) · 2.61× faster``."""
    b, a = r.before_figures.total_us, r.after_figures.total_us
    parts = [f"attention ({basis_label(r)}): {fmt_time(b)} → {fmt_time(a)}", f"Δ {signed(r.delta_us)}"
             + (f" ({r.delta_pct:+.1f}%)" if r.delta_pct is not None else "")]
    if b <= 0 and a <= 0:
        parts.append("no attention time on either side")
    elif r.speedup is None:
        parts.append("no attention time after")
    elif b <= 0:
        parts.append("no attention time before")
    elif r.speedup >= 1:
        parts.append(f"{r.speedup:.2f}× faster")
    else:
        parts.append(f"{1 / r.speedup:.2f}× slower")
    if r.noise is not None and (b > 0 or a > 0):
        parts.append("within noise" if r.noise.within_noise else "beyond noise")
    return " · ".join(parts)


def noise_line(r: DiffResult) -> str:
    n = r.noise
    if n is None:
        return r.noise_note
    return (f"noise: before {fmt_time(n.before.min_us)}–{fmt_time(n.before.max_us)} over {len(n.before.steps)} steps, "
            f"after {fmt_time(n.after.min_us)}–{fmt_time(n.after.max_us)} over {len(n.after.steps)} steps; "
            f"combined spread {fmt_time(n.combined_spread_us)} → the change is "
            f"{'within' if n.within_noise else 'beyond'} noise")


def blocks_line(r: DiffResult) -> str:
    by_fk = sum(1 for p in r.pairs if p.paired_by == "fused-kernel")
    extra = f", {by_fk} of them fused-kernel blocks paired by position" if by_fk else ""
    return (f"blocks: {len(r.pairs)} paired{extra}; {len(r.unmatched_before)} only before, "
            f"{len(r.unmatched_after)} only after")


def alloc_line(r: DiffResult) -> str | None:
    m = r.alloc
    if m is None:
        return None
    line = (f"memory allocated inside blocks (all steps): {_bytes(m.before_bytes)} → {_bytes(m.after_bytes)} "
            f"({'+' if m.delta_bytes > 0 else ''}{_bytes(m.delta_bytes)})")
    c = r.categories
    if m.delta_bytes < 0 and c["softmax"].before_us > 0 and c["softmax"].after_us == 0 and c["fused_attention"].after_us > 0:
        line += ": eager → fused, the B·H·N² score matrices are no longer allocated"
    return line


@dataclass(slots=True)
class PairRow:
    """Paired blocks grouped by (before kind, after kind, phase), summed over steps and instances."""

    label: str
    phase: str
    n: int
    before_us: float
    after_us: float
    deltas: dict[str, float]


def pair_rows(r: DiffResult) -> list[PairRow]:
    rows: dict[tuple, PairRow] = {}
    for p in r.pairs:
        label = p.before.kind if p.before.kind == p.after.kind else f"{p.before.kind} → {p.after.kind}"
        k = (label, p.before.phase)
        row = rows.get(k)
        if row is None:
            row = rows[k] = PairRow(label, p.before.phase, 0, 0.0, 0.0, zero_categories())
        row.n += 1
        row.before_us += p.before.total_us
        row.after_us += p.after.total_us
        for c in CATEGORIES:
            row.deltas[c] += p.after.categories[c] - p.before.categories[c]
    return list(rows.values())


def _largest(deltas: dict[str, float]) -> str:
    c = max(CATEGORIES, key=lambda k: abs(deltas[k]))
    return f"{c} {signed(deltas[c])}" if abs(deltas[c]) >= 0.05 else "—"


def unmatched_rows(blocks: list[BlockResult]) -> list[tuple[str, str, int, float]]:
    out: dict[tuple[str, str], list] = {}
    for b in blocks:
        v = out.setdefault((b.kind, b.phase), [0, 0.0])
        v[0] += 1
        v[1] += b.total_us
    return [(k, ph, n, us) for (k, ph), (n, us) in out.items()]


# ---------------------------------------------------------------------------------------------
# Terminal


class DiffTerminalRenderer(DiffRenderer):
    name = "table"
    extension = ".txt"

    def render(self, r: DiffResult) -> str:
        lines = [f"{self.tool} diff — {r.labels[0]} → {r.labels[1]}"]
        lines += [f"before: {h}" for h in header_lines(r.before)]
        lines += [f"after:  {h}" for h in header_lines(r.after)]
        lines += [f"warning: {w}" for w in r.warnings]
        lines.append(headline(r))
        lines.append(f"figures: {r.basis_note}")
        lines.append(noise_line(r))
        lines.append("")
        head = ["category", "before", "after", "Δ", "share of Δ", "ratio"] + (["noise"] if r.noise else [])
        rows = [head]
        for c in CATEGORIES:
            d = r.categories[c]
            cells = [_HEADS[c], fmt_time(d.before_us), fmt_time(d.after_us), signed(d.delta_us),
                     _share(d.share_of_delta),
                     _ratio(d.before_us, d.after_us)]
            if r.noise:
                cells.append("within" if r.noise.categories[c].within_noise else "beyond")
            rows.append(cells)
        total = ["total", fmt_time(r.before_figures.total_us), fmt_time(r.after_figures.total_us), signed(r.delta_us),
                 "100.0%" if any(d.share_of_delta is not None for d in r.categories.values()) else "n/a",
                 _ratio(r.before_figures.total_us, r.after_figures.total_us)]
        if r.noise:
            total.append("within" if r.noise.within_noise else "beyond")
        rows.append(total)
        lines += _table(rows, right=set(range(1, 6)))
        lines.append("")
        lines.append(blocks_line(r))
        if r.pairs:
            rows = [["paired blocks (all steps)", "phase", "n", "before", "after", "Δ", "largest change"]]
            for g in pair_rows(r):
                rows.append([g.label[:60], g.phase, str(g.n), fmt_time(g.before_us), fmt_time(g.after_us),
                             signed(g.after_us - g.before_us), _largest(g.deltas)])
            table = _table(rows, right={2, 3, 4, 5})
            if all(g.phase == "forward" for g in pair_rows(r)):
                table = _table([x[:1] + x[2:] for x in rows], right={1, 2, 3, 4})
            lines += table
        for side, blocks in (("before", r.unmatched_before), ("after", r.unmatched_after)):
            if blocks:
                lines.append(f"blocks only {side} (unpaired), all steps:")
                for kind, phase, n, us in unmatched_rows(blocks):
                    ph = "" if phase == "forward" else f" ({phase})"
                    lines.append(f"  {fmt_time(us):>10}  {n:>6}×  {kind[:60]}{ph}")
        unit = {"kernel": "device events", "op": "host ops (self time)"}.get(r.kernel_unit, "kernels/ops")
        for side, ks, sign, word in (("before", r.only_before, -1, "gone"), ("after", r.only_after, 1, "new")):
            lines.append("")
            if not ks:
                lines.append(f"{unit} only {side}: none")
                continue
            lines.append(f"{unit} only {side} ({word}), all steps:")
            for k in ks[:_KERNELS_SHOWN]:
                lines.append(f"  {signed(sign * k.total_us):>10}  {k.count:>6}×  {k.category:<15} {k.name[:90]}")
            if len(ks) > _KERNELS_SHOWN:
                rest = ks[_KERNELS_SHOWN:]
                lines.append(f"  {signed(sign * sum(k.total_us for k in rest)):>10}  {sum(k.count for k in rest):>6}×  "
                             f"{len(rest)} more (see --format json)")
        a = alloc_line(r)
        if a:
            lines += ["", a]
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# JSON


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _block_ref(b: BlockResult) -> dict:
    return {"name": b.name, "kind": b.kind, "found_by": b.found_by, "step": b.step, "ordinal": b.ordinal,
            "trace": b.source}


def _unmatched(b: BlockResult) -> dict:
    return {**_block_ref(b), "phase": b.phase, "total_us": _r(b.total_us),
            "categories": {c: _r(b.categories[c]) for c in CATEGORIES}, "alloc_bytes": b.alloc_bytes}


def _kernels(ks) -> list[dict]:
    return [{"name": k.name, "category": k.category, "count": k.count, "total_us": _r(k.total_us)} for k in ks]


def diff_to_dict(r: DiffResult, tool: str) -> dict:
    """The stable diff schema (docs/attribution.md, Diff); extra keys beyond the contract are additive."""
    db, da = to_dict(r.before, tool), to_dict(r.after, tool)
    out = {
        "schema_version": DIFF_SCHEMA_VERSION,
        "tool": tool,
        "command": "diff",
        "before_source": r.labels[0],
        "after_source": r.labels[1],
        "time_base": {"before": r.before.time_base, "after": r.after.time_base},
        "basis": r.basis,
        "basis_note": r.basis_note,
        "before": db["totals"],
        "after": da["totals"],
        "headline": {"before_us": _r(r.before_figures.total_us), "after_us": _r(r.after_figures.total_us),
                     "delta_us": _r(r.delta_us), "delta_pct": _r(r.delta_pct, 2), "speedup": _r(r.speedup, 4),
                     "within_noise": None if r.noise is None else r.noise.within_noise},
        "categories": {c: {"before_us": _r(d.before_us), "after_us": _r(d.after_us), "delta_us": _r(d.delta_us),
                           "ratio": _r(d.ratio, 4), "share_of_delta": _r(d.share_of_delta, 4)}
                       for c, d in r.categories.items()},
        "blocks": [{
            "paired_by": p.paired_by, "phase": p.before.phase, "before": _block_ref(p.before),
            "after": _block_ref(p.after), "before_us": _r(p.before.total_us), "after_us": _r(p.after.total_us),
            "delta_us": _r(p.delta_us),
            "categories": {c: {"before_us": _r(p.before.categories[c]), "after_us": _r(p.after.categories[c]),
                               "delta_us": _r(p.after.categories[c] - p.before.categories[c])} for c in CATEGORIES},
            "alloc_before_bytes": p.before.alloc_bytes, "alloc_after_bytes": p.after.alloc_bytes,
        } for p in r.pairs],
        "unmatched_before": [_unmatched(b) for b in r.unmatched_before],
        "unmatched_after": [_unmatched(b) for b in r.unmatched_after],
        "kernel_unit": r.kernel_unit,
        "only_before": _kernels(r.only_before),
        "only_after": _kernels(r.only_after),
        "noise": None,
        "noise_note": r.noise_note,
        "alloc": None if r.alloc is None else {
            "before_bytes": r.alloc.before_bytes, "after_bytes": r.alloc.after_bytes,
            "delta_bytes": r.alloc.delta_bytes, "before_blocks": r.alloc.before_blocks,
            "after_blocks": r.alloc.after_blocks},
        "warnings": list(r.warnings),
        "traces": {"before": db["traces"], "after": da["traces"]},
    }
    if r.noise is not None:
        n = r.noise
        out["noise"] = {
            side: {"steps": s.steps, "totals_us": [_r(x) for x in s.totals_us], "min_us": _r(s.min_us),
                   "median_us": _r(s.median_us), "max_us": _r(s.max_us)}
            for side, s in (("before", n.before), ("after", n.after))}
        out["noise"]["combined_spread_us"] = _r(n.combined_spread_us)
        out["noise"]["within_noise"] = n.within_noise
        out["noise"]["categories"] = {c: {"before_min_us": _r(v.before_min_us), "before_max_us": _r(v.before_max_us),
                                          "after_min_us": _r(v.after_min_us), "after_max_us": _r(v.after_max_us),
                                          "within_noise": v.within_noise} for c, v in n.categories.items()}
    return out


class DiffJSONRenderer(DiffRenderer):
    name = "json"
    extension = ".json"

    def render(self, r: DiffResult) -> str:
        return orjson.dumps(diff_to_dict(r, self.tool), option=orjson.OPT_INDENT_2).decode() + "\n"


# ---------------------------------------------------------------------------------------------
# CSV

COLUMNS = ("section", "category", "before_us", "after_us", "delta_us", "ratio", "basis", "paired_by", "phase",
           "kind_before", "kind_after", "block_before", "block_after", "step_before", "step_after",
           "ordinal_before", "ordinal_after", "trace_before", "trace_after", "kernel", "count")


class DiffCSVRenderer(DiffRenderer):
    """Sections in one table with one header: ``category`` (headline, six rows + ``total``),
    ``block`` (paired block × category), ``block_only_before``/``block_only_after`` (unpaired block ×
    category), ``kernel_only_before``/``kernel_only_after`` (one row per kernel or op)."""

    name = "csv"
    extension = ".csv"

    def render(self, r: DiffResult) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(COLUMNS)
        blank = dict.fromkeys(COLUMNS, "")

        def row(**kw):
            w.writerow([{**blank, **kw}[c] for c in COLUMNS])

        def num(x):
            return "" if x is None else f"{x:.3f}"

        def ratio(b, a):
            return f"{a / b:.4f}" if b > 0 else ""

        for c, d in r.categories.items():
            row(section="category", category=c, before_us=num(d.before_us), after_us=num(d.after_us),
                delta_us=num(d.delta_us), ratio=ratio(d.before_us, d.after_us), basis=r.basis)
        row(section="category", category="total", before_us=num(r.before_figures.total_us),
            after_us=num(r.after_figures.total_us), delta_us=num(r.delta_us),
            ratio=ratio(r.before_figures.total_us, r.after_figures.total_us), basis=r.basis)

        def side(b: BlockResult | None, tag: str) -> dict:
            if b is None:
                return {}
            return {f"kind_{tag}": b.kind, f"block_{tag}": b.name, f"step_{tag}": "" if b.step is None else b.step,
                    f"ordinal_{tag}": b.ordinal, f"trace_{tag}": b.source}

        for p in r.pairs:
            for c in CATEGORIES:
                bu, au = p.before.categories[c], p.after.categories[c]
                row(section="block", category=c, before_us=num(bu), after_us=num(au), delta_us=num(au - bu),
                    ratio=ratio(bu, au), paired_by=p.paired_by, phase=p.before.phase,
                    **side(p.before, "before"), **side(p.after, "after"))
        for tag, blocks in (("before", r.unmatched_before), ("after", r.unmatched_after)):
            for b in blocks:
                for c in CATEGORIES:
                    v = b.categories[c]
                    row(section=f"block_only_{tag}", category=c, phase=b.phase, **side(b, tag),
                        before_us=num(v if tag == "before" else 0.0), after_us=num(v if tag == "after" else 0.0),
                        delta_us=num(-v if tag == "before" else v))
        for tag, ks in (("before", r.only_before), ("after", r.only_after)):
            for k in ks:
                row(section=f"kernel_only_{tag}", category=k.category, kernel=k.name, count=k.count,
                    before_us=num(k.total_us if tag == "before" else 0.0),
                    after_us=num(k.total_us if tag == "after" else 0.0),
                    delta_us=num(-k.total_us if tag == "before" else k.total_us))
        return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# Markdown


def _md(s: str) -> str:
    return s.replace("|", "\\|")


class DiffMarkdownRenderer(DiffRenderer):
    name = "markdown"
    extension = ".md"

    def render(self, r: DiffResult) -> str:
        lines = [f"**{_md(r.labels[0])} → {_md(r.labels[1])}** — {headline(r)}", ""]
        lines += [f"- before: {h}" for h in header_lines(r.before)]
        lines += [f"- after: {h}" for h in header_lines(r.after)]
        lines += [f"- **warning:** {w}" for w in r.warnings]
        lines += [f"- figures: {r.basis_note}", f"- {noise_line(r)}", f"- {blocks_line(r)}"]
        a = alloc_line(r)
        if a:
            lines.append(f"- {a}")
        lines += ["", "| category | before µs | after µs | Δ µs | share of Δ | ratio |", "|---|---:|---:|---:|---:|---:|"]
        for c, d in r.categories.items():
            share = _share(d.share_of_delta)
            lines.append(f"| {c} | {d.before_us:,.1f} | {d.after_us:,.1f} | {d.delta_us:+,.1f} | {share} | "
                         f"{_ratio(d.before_us, d.after_us)} |")
        lines.append(f"| **total** | {r.before_figures.total_us:,.1f} | {r.after_figures.total_us:,.1f} | "
                     f"{r.delta_us:+,.1f} | | {_ratio(r.before_figures.total_us, r.after_figures.total_us)} |")
        if r.pairs:
            lines += ["", "| paired blocks (all steps) | phase | n | before µs | after µs | Δ µs | largest change |",
                      "|---|---|---:|---:|---:|---:|---|"]
            for g in pair_rows(r):
                lines.append(f"| {_md(g.label)} | {g.phase} | {g.n} | {g.before_us:,.1f} | {g.after_us:,.1f} | "
                             f"{g.after_us - g.before_us:+,.1f} | {_largest(g.deltas)} |")
        for tag, blocks in (("before", r.unmatched_before), ("after", r.unmatched_after)):
            for kind, phase, n, us in unmatched_rows(blocks):
                lines.append(f"- block only {tag}: {_md(kind)} ({phase}) ×{n}, {us:,.1f} µs")
        for tag, ks, sign in (("before", r.only_before, -1), ("after", r.only_after, 1)):
            if ks:
                lines += ["", f"{'Gone' if tag == 'before' else 'New'} ({r.kernel_unit}s only {tag}, all steps):", ""]
                lines += [f"- `{_md(k.name[:120])}` ×{k.count}, {sign * k.total_us:+,.1f} µs ({k.category})"
                          for k in ks[:20]]
                if len(ks) > 20:
                    lines.append(f"- … {len(ks) - 20} more")
        return "\n".join(lines) + "\n"


DIFF_RENDERERS: dict[str, type[DiffRenderer]] = {
    cls.name: cls for cls in (DiffTerminalRenderer, DiffJSONRenderer, DiffCSVRenderer, DiffMarkdownRenderer)}


def diff_renderer_for(fmt: str | None, output: str | None) -> type[DiffRenderer]:
    return pick_renderer(DIFF_RENDERERS, fmt, output)
