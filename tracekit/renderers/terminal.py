"""Numbers-first plain-text tables for a terminal (no colour, no dependencies)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..flops import Efficiency
from ..result import CATEGORIES, Attribution
from ..vocab import Phase
from .base import (
    HEADS, Renderer, alloc_line, blocks_line, fmt_time, group_rows, header_lines, headline, largest_change,
    noise_line, pair_rows, pct, rank_from_line, rank_pair_cells, rank_view_of, ratio_text, roles_line, share_line,
    share_text, signed, spread_line, unmatched_rows,
)

if TYPE_CHECKING:
    from ..diff import DiffResult

_TOP_SHOWN = 8  # top kernels of an attribution
_KERNELS_SHOWN = 8  # gone/new kernels of a diff


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for n, r in enumerate(rows):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def _phase_table(rows: list[list[str]], right: set[int], phase_col: int = 1) -> list[str]:
    """A table whose phase column is shown only when some row is not forward (total rows leave it blank)."""
    if all(r[phase_col] in (Phase.FORWARD, "") for r in rows[1:]):
        rows = [r[:phase_col] + r[phase_col + 1:] for r in rows]
        right = {i - 1 if i > phase_col else i for i in right if i != phase_col}
    return _table(rows, right)


def _fmt_flops(x: float) -> str:
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if x >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f}"


def _efficiency_lines(result: Attribution) -> list[str]:
    """Per block kind: FLOPs, achieved TFLOP/s and GB/s, % of the roofline and the bound (tracekit.flops)."""
    if result.time_base == "host" or not result.blocks:
        return []
    dev = result.device
    if dev is not None and dev.peaks is not None:
        pk = dev.peaks
        roof = f"{dev.name} → {pk.model}: bf16 {pk.tflops('bf16') or 'n/a'} TFLOP/s, {pk.mem_gb_per_s:.0f} GB/s (dense peaks)"
    else:
        roof = dev.reason if dev is not None and dev.reason else "no device peaks"
    tot = result.totals.efficiency
    if tot is None or tot.ops == 0:
        why = tot.reason if tot is not None and tot.reason else "no FLOP counts"
        return ["", f"efficiency: n/a ({why})"]
    groups: dict[tuple[str, str], tuple[Efficiency, list[float]]] = {}
    for b in result.blocks:
        if b.efficiency is not None:
            e, busy = groups.setdefault((b.kind, b.phase), (Efficiency(), [0.0]))
            e.add(b.efficiency)
            busy[0] += b.total_us
    rows = [["block kind", "phase", "FLOPs", "TFLOP/s", "GB/s", "of roof", "bound", "timed"]]
    extra = [(("all blocks", ""), (tot, [result.totals.total_us]))] if len(groups) > 1 else []
    for (kind, phase), (e, busy) in list(groups.items()) + extra:
        if e.ops == 0:
            rows.append([kind[:60], phase, "n/a", "", "", "", "", ""])
            continue
        t = e.time_ns
        roof_pct = e.roof_pct
        rows.append([kind[:60], phase, _fmt_flops(e.flops), f"{e.flops / t / 1e3:.1f}" if t else "n/a",
                     f"{e.bytes / t:.0f}" if t else "n/a", "n/a" if roof_pct is None else f"{roof_pct:.1f}%",
                     e.bound or "n/a", f"{pct(t / 1000, busy[0]):.0f}%"])
    return (["", f"efficiency of kernels with recorded shapes — roof: {roof}"]
            + _phase_table(rows, right={2, 3, 4, 5, 7})
            + ["(timed: share of the blocks' busy time in kernels whose FLOPs/bytes are counted)"])


def _rank_lines(result: Attribution) -> list[str]:
    """``--by rank``: one row per rank (attention time, split, span, idle) and the spread: the straggler view."""
    view = rank_view_of(result)
    idle = any(r.launch_bound is not None for r in view.rows)
    head = ["rank", "trace", "n", "total", "share", "span"] + (["idle"] if idle else []) + [HEADS[c] for c in CATEGORIES]
    rows = [head]
    for r in view.rows:
        cells = [str(r.rank), r.source[-50:], str(r.blocks), fmt_time(r.total_us), share_text(r.attention_share),
                 fmt_time(r.span_us)]
        cells += [f"{pct(r.idle_us, r.span_us):.0f}%"] if idle else []
        cells += [f"{fmt_time(r.categories[c])} {pct(r.categories[c], r.total_us):4.1f}%" for c in CATEGORIES]
        rows.append(cells)
    return _table(rows, right={0} | set(range(2, len(head)))) + [spread_line(view), rank_from_line(view)]


class TerminalRenderer(Renderer):
    name = "table"
    extension = ".txt"

    def render_attribution(self, result: Attribution) -> str:
        lines = [f"{self.tool} attribute — {result.source}"]
        lines += header_lines(result)
        lines.append(f"attention: {share_line(result)}")
        if result.coverage is not None:
            cv = result.coverage
            lines.append(f"device time linked to host ops: {pct(cv.linked_us, cv.device_us):.1f}% · "
                         f"in attention blocks: {pct(cv.in_blocks_us, cv.device_us):.1f}% · "
                         f"unlinked: {pct(cv.unlinked_us, cv.device_us):.1f}% ({fmt_time(cv.unlinked_us)})")
        lines.append("")
        if not result.blocks:
            lines.append("no attention blocks found (try --scope REGEX to name your attention modules or ranges)")
            return "\n".join(lines) + "\n"
        if self.by == "rank":
            lines += _rank_lines(result)
        else:
            lines += self._group_lines(result)
        lines += self._tail_lines(result)
        return "\n".join(lines) + "\n"

    def _group_lines(self, result: Attribution) -> list[str]:
        """The grouped table (kind, block, layer, step), the launch-bound note and matmul roles by group."""
        lines: list[str] = []
        tot = result.totals
        label = {"kind": "block kind", "layer": "block", "step": "step", "block": "block [step:ordinal]",
                 "run": "run"}[self.by]
        idle = tot.launch_bound is not None  # device blocks: span and idle share (a CPU has no idle device)
        head = [label, "phase", "n", "total", "span"] + (["idle"] if idle else []) + [HEADS[c] for c in CATEGORIES]
        rows = [head]
        groups = group_rows(result, self.by)
        for g in groups + ([] if len(groups) == 1 else [None]):
            if g is None:
                label_, phase, n, total, cats = "all blocks", "", tot.blocks, tot.total_us, tot.categories
                span, idle_us = tot.span_us, tot.idle_us
            else:
                label_, phase, n, total, cats = g.label, g.phase, g.blocks, g.total_us, g.categories
                span, idle_us = g.span_us, g.idle_us
            cells = [label_[:60], phase, str(n), fmt_time(total), fmt_time(span)]
            cells += [f"{pct(idle_us, span):.0f}%"] if idle else []
            cells += [f"{fmt_time(cats[c])} {pct(cats[c], total):4.1f}%" for c in CATEGORIES]
            rows.append(cells)
        lines += _phase_table(rows, right=set(range(2, len(head))))
        if tot.launch_bound:
            lines.append(f"launch-bound: the device is idle {pct(tot.idle_us, tot.span_us):.0f}% of the blocks' span "
                         f"(busy {fmt_time(tot.total_us)} of {fmt_time(tot.span_us)}); busy time understates what "
                         f"the blocks cost in wall clock")
        by_role = [roles_line(g.label + ("" if g.phase == Phase.FORWARD else f" ({g.phase})"), g.categories["matmul"],
                              g.matmul_roles) for g in groups]
        if any(by_role):
            lines.append("")
            lines.append("matmul by role (share of matmul):")
            lines += [x for x in by_role if x]
        return lines

    def _tail_lines(self, result: Attribution) -> list[str]:
        """Efficiency, hints and the top kernels: the same under every grouping."""
        lines = _efficiency_lines(result)
        if result.hints:
            lines.append("")
            lines.append("hints:")
            for h in result.hints:
                lines.append(f"  - [{h.rule}] {h.message}")
                if h.saving_us is None:
                    lines.append(f"    saving: not estimated; {h.saving_basis}")
                else:
                    lines.append(f"    saving: up to {fmt_time(h.saving_us)} ({h.saving_pct:.1f}%); {h.saving_basis}"
                                 if h.saving_basis.startswith("upper bound") else
                                 f"    saving: about {fmt_time(h.saving_us)} ({h.saving_pct:.1f}%); {h.saving_basis}")
        if result.top_kernels:
            lines.append("")
            lines.append("top device events in blocks:" if result.time_base != "host"
                         else "top host ops in blocks (self time):")
            for name, cat, count, us in result.top_kernels[:_TOP_SHOWN]:
                lines.append(f"  {fmt_time(us):>10}  {count:>6}×  {cat:<15} {name[:90]}")
        return lines

    def render_diff(self, r: DiffResult) -> str:
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
            cells = [HEADS[c], fmt_time(d.before_us), fmt_time(d.after_us), signed(d.delta_us),
                     share_text(d.share_of_delta), ratio_text(d.before_us, d.after_us)]
            if r.noise:
                cells.append("within" if r.noise.categories[c].within_noise else "beyond")
            rows.append(cells)
        total = ["total", fmt_time(r.before_figures.total_us), fmt_time(r.after_figures.total_us), signed(r.delta_us),
                 "100.0%" if any(d.share_of_delta is not None for d in r.categories.values()) else "n/a",
                 ratio_text(r.before_figures.total_us, r.after_figures.total_us)]
        if r.noise:
            total.append("within" if r.noise.within_noise else "beyond")
        rows.append(total)
        if r.before_figures.launch_bound is not None or r.after_figures.launch_bound is not None:
            sb, sa = r.before_figures.span_us, r.after_figures.span_us
            span = ["profiled span", fmt_time(sb), fmt_time(sa), signed(sa - sb), "", ratio_text(sb, sa)]
            rows.append(span + ([""] if r.noise else []))
        lines += _table(rows, right=set(range(1, 6)))
        rb, ra = r.before_figures.matmul_roles, r.after_figures.matmul_roles
        if rb is not None and ra is not None and (any(rb.values()) or any(ra.values())):
            lines.append("matmul by role: " + " · ".join(
                f"{k} {fmt_time(rb[k])} → {fmt_time(ra[k])}" for k in rb if rb[k] or ra[k]))
        lines.append("")
        lines.append(blocks_line(r))
        if r.pairs:
            rows = [["paired blocks (all steps)", "phase", "n", "before", "after", "Δ", "largest change"]]
            for g in pair_rows(r):
                rows.append([g.label[:60], g.phase, str(g.n), fmt_time(g.before_us), fmt_time(g.after_us),
                             signed(g.after_us - g.before_us), largest_change(g.deltas)])
            lines += _phase_table(rows, right={2, 3, 4, 5})
        for side, blocks in (("before", r.unmatched_before), ("after", r.unmatched_after)):
            if blocks:
                lines.append(f"blocks only {side} (unpaired), all steps:")
                for kind, phase, n, us in unmatched_rows(blocks):
                    ph = "" if phase == Phase.FORWARD else f" ({phase})"
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
        if r.kernels_changed:
            lines.append("")
            lines.append(f"{unit} on both sides that changed beyond noise, all steps:")
            lines.append(f"  ({r.kernels_changed_note})")
            for kc in r.kernels_changed[:_KERNELS_SHOWN]:
                counts = f"{kc.before.count}× → {kc.after.count}×"
                lines.append(f"  {signed(kc.delta_us):>10}  {counts:>14}  {kc.category:<15} {kc.name[:80]}")
            if len(r.kernels_changed) > _KERNELS_SHOWN:
                more = r.kernels_changed[_KERNELS_SHOWN:]
                lines.append(f"  {signed(sum(kc.delta_us for kc in more)):>10}  {len(more)} more (see --format json)")
        if r.ranks:
            lines.append("")
            rows = [["rank", "before", "after", "Δ", "ratio"]]
            rows += [[str(p.rank), *rank_pair_cells(p)] for p in r.ranks]
            lines += _table(rows, right={0, 1, 2, 3})
            lines += [f"before {spread_line(r.before.ranks)}" if r.before.ranks else "",
                      f"after  {spread_line(r.after.ranks)}" if r.after.ranks else ""]
        a = alloc_line(r)
        if a:
            lines += ["", a]
        elif r.conclusions:
            lines += ["", *r.conclusions]
        return "\n".join(lines) + "\n"
