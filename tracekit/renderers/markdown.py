"""A GitHub-flavoured markdown table, for PR comments and notes."""

from __future__ import annotations

from ..result import CATEGORIES, Attribution
from .base import Renderer, group_rows, pct
from .terminal import header_lines


class MarkdownRenderer(Renderer):
    name = "markdown"
    extension = ".md"

    def render(self, result: Attribution) -> str:
        t = result.totals
        share = f"{100 * t.attention_share:.1f}%" if t.attention_share is not None else "n/a"
        lines = [f"**{result.source}** — {t.blocks} attention blocks, {t.total_us:,.1f} µs ({share} of "
                 f"{'device busy' if result.time_base == 'device' else 'host'} time)", ""]
        lines += [f"- {h}" for h in header_lines(result)]
        lines.append("")
        cols = ["block", "phase", "n", "total µs"] + [f"{c} µs (%)" for c in CATEGORIES]
        lines.append("| " + " | ".join(cols) + " |")
        lines.append("|" + "|".join(["---"] + ["---"] + ["---:"] * (len(cols) - 2)) + "|")
        for g in group_rows(result, self.by):
            cells = [g.label.replace("|", "\\|"), g.phase, str(g.blocks), f"{g.total_us:,.1f}"]
            cells += [f"{g.categories[c]:,.1f} ({pct(g.categories[c], g.total_us):.1f}%)" for c in CATEGORIES]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"
