"""Numbers-first plain-text table for a terminal (no colour, no dependencies)."""

from __future__ import annotations

from ..result import CATEGORIES, Attribution
from .base import Renderer, fmt_time, group_rows, pct

_HEADS = {"matmul": "matmul", "softmax": "softmax", "fused_attention": "fused attn",
          "memory": "memory", "elementwise": "elementwise", "other": "other"}


def header_lines(result: Attribution) -> list[str]:
    """What the trace is: device, runtime, steps, time base. Never user metadata."""
    lines = []
    for t in result.traces:
        parts = [", ".join(t.gpus) if t.gpus else ("no GPU listed" if t.time_base == "device" else "CPU only")]
        if t.runtime:
            parts.append(t.runtime)
        parts.append(f"PyTorch {t.pytorch}" if t.pytorch else "PyTorch version not recorded")
        if t.steps:
            s = t.steps
            parts.append(f"{len(s)} step{'s' if len(s) != 1 else ''} (#{s[0]}{f'–#{s[-1]}' if len(s) > 1 else ''})")
        else:
            parts.append("no ProfilerStep")
        base = "device busy time" if t.time_base == "device" else "host self time"
        parts.append(f"time base: {base}")
        lines.append(f"{t.source}: {t.events:,} events · " + " · ".join(parts))
    return lines


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for n, r in enumerate(rows):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


class TerminalRenderer(Renderer):
    name = "table"
    extension = ".txt"

    def render(self, result: Attribution) -> str:
        lines = [f"{self.tool} attribute — {result.source}"]
        lines += header_lines(result)
        tot = result.totals
        base_label = "device busy time" if result.time_base == "device" else "host time"
        base_us = sum(t.base_us for t in result.traces)
        share = f"{100 * tot.attention_share:.1f}%" if tot.attention_share is not None else "n/a"
        lines.append(f"attention: {tot.blocks} blocks, {fmt_time(tot.total_us)} · {share} of {base_label} "
                     f"({fmt_time(base_us)})")
        if result.coverage is not None:
            cv = result.coverage
            lines.append(f"device time linked to host ops: {pct(cv.linked_us, cv.device_us):.1f}% · "
                         f"in attention blocks: {pct(cv.in_blocks_us, cv.device_us):.1f}% · "
                         f"unlinked: {pct(cv.unlinked_us, cv.device_us):.1f}% ({fmt_time(cv.unlinked_us)})")
        lines.append("")
        if not result.blocks:
            lines.append("no attention blocks found (try --scope REGEX to name your attention modules or ranges)")
            return "\n".join(lines) + "\n"
        label = {"kind": "block kind", "layer": "block", "step": "step", "block": "block [step:ordinal]"}[self.by]
        head = [label, "phase", "n", "total"] + [_HEADS[c] for c in CATEGORIES]
        rows = [head]
        groups = group_rows(result, self.by)
        show_phase = any(g.phase != "forward" for g in groups)
        for g in groups + ([] if len(groups) == 1 else [None]):
            if g is None:
                label_, phase, n, total, cats = "all blocks", "", tot.blocks, tot.total_us, tot.categories
            else:
                label_, phase, n, total, cats = g.label, g.phase, g.blocks, g.total_us, g.categories
            cells = [label_[:60], phase, str(n), fmt_time(total)]
            cells += [f"{fmt_time(cats[c])} {pct(cats[c], total):4.1f}%" for c in CATEGORIES]
            rows.append(cells)
        table = _table(rows, right=set(range(2, len(head))))
        if not show_phase:
            table = _table([r[:1] + r[2:] for r in rows], right=set(range(1, len(head) - 1)))
        lines += table
        if result.top_kernels:
            lines.append("")
            lines.append("top device events in blocks:" if result.time_base != "host"
                         else "top host ops in blocks (self time):")
            for name, cat, count, us in result.top_kernels[:8]:
                lines.append(f"  {fmt_time(us):>10}  {count:>6}×  {cat:<15} {name[:90]}")
        return "\n".join(lines) + "\n"
