"""CSV: one row per block × category, in a fixed column order (a contract for scripts)."""

from __future__ import annotations

import csv
import io

from ..result import CATEGORIES, Attribution
from .base import Renderer, pct

COLUMNS = ("trace", "step", "phase", "ordinal", "block", "kind", "found_by", "category", "time_us",
           "pct_of_block", "block_total_us", "kernels")


class CSVRenderer(Renderer):
    name = "csv"
    extension = ".csv"

    def render(self, result: Attribution) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(COLUMNS)
        for b in result.blocks:
            for c in CATEGORIES:
                w.writerow([b.source, "" if b.step is None else b.step, b.phase, b.ordinal, b.name, b.kind,
                            b.found_by, c, f"{b.categories[c]:.3f}", f"{pct(b.categories[c], b.total_us):.2f}",
                            f"{b.total_us:.3f}", b.kernels])
        return buf.getvalue()
