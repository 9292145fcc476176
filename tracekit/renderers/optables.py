"""The op and kernel tables' figures as every view words them (``--by op``, ``--by kernel``; issue 42).

One place for the per-step division and the cells, so the terminal, markdown and CSV cannot disagree; each view
lays them out and escapes names its own way (the terminal's fit_table and short_name, markdown's escapes, the
CSV's formula guard).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..results.attribution import Attribution
from ..results.ops import OpRow, ops_basis
from ..results.rows import KernelRow, kernel_rows, step_count

NOT_COMPUTED = "op table not computed: analyze with by='op' (tracekit attribute --by op)"
OP_COLUMNS = ("op", "shapes", "dtype", "calls", "time_us", "time_per_step_us", "steps", "flops", "bytes",
              "tflops_per_s", "gb_per_s", "roof_pct", "bound", "flops_max", "tflops_per_s_max", "roof_pct_max")
KERNEL_COLUMNS = ("kernel", "category", "calls", "time_us", "time_per_step_us", "steps")


@dataclass(frozen=True, slots=True, kw_only=True)
class Basis:
    """The tables' time basis: ``steps`` profiled steps a per-step figure is the mean over (0: totals)."""

    steps: int

    @property
    def label(self) -> str:
        return ops_basis(self.steps)

    def per_step(self, us: float) -> float:
        """``us`` over the whole profile as the column shows it: per step, or the total when there are no steps."""
        return us / self.steps if self.steps else us


def basis_of(result: Attribution) -> Basis:
    return Basis(steps=step_count(result))


def shapes_text(r: OpRow) -> str:
    """The recorded Input Dims without spaces: ``[[4,16,4096,64],[4,16,64,4096]]``."""
    return r.shapes.replace(" ", "")


def fmt_flops(x: float) -> str:
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f}"


def rate_cells(r: OpRow) -> list[str]:
    """TFLOP/s, GB/s, % of roof and bound ("n/a" where the time or the peaks are missing)."""
    tf, gb, roof = r.tflops_per_s, r.gb_per_s, r.roof_pct
    cells = ["n/a" if tf is None else f"{tf:.1f}", "n/a" if gb is None else f"{gb:.0f}",
             "n/a" if roof is None else f"{roof:.1f}%", r.bound or "n/a"]
    return _ranged(cells, r) if r.flops_max is not None else cells


def _ranged(cells: list[str], r: OpRow) -> list[str]:
    """Issue 44: FLOPs counted as bounds (varlen, paged) as low–high; the roof's high end never above 100%."""
    tf, roof = r.tflops_per_s_max, r.roof_pct_max
    if tf is not None and cells[0] != "n/a":
        cells[0] += f"–{tf:.1f}"
    if roof is not None and cells[2] != "n/a":
        cells[2] = f"{cells[2][:-1]}–{roof:.1f}%"
    return cells


def op_csv_row(r: OpRow, basis: Basis) -> list:
    """One CSV row in OP_COLUMNS order (empty cells where a figure is missing)."""
    def num(x: float | None, nd: int = 3) -> str:
        return "" if x is None else f"{x:.{nd}f}"

    return [r.op, r.shapes, r.dtype, r.calls, num(r.time_us), num(basis.per_step(r.time_us)), basis.steps,
            f"{r.flops:.0f}", f"{r.bytes:.0f}", num(r.tflops_per_s), num(r.gb_per_s), num(r.roof_pct, 2),
            r.bound or "", num(r.flops_max, 0), num(r.tflops_per_s_max), num(r.roof_pct_max, 2)]


def kernel_csv_row(k: KernelRow, basis: Basis) -> list:
    """One CSV row in KERNEL_COLUMNS order."""
    return [k.kernel, k.category, k.calls, f"{k.total_us:.3f}", f"{basis.per_step(k.total_us):.3f}", basis.steps]


__all__ = ["KERNEL_COLUMNS", "NOT_COMPUTED", "OP_COLUMNS", "Basis", "basis_of", "fmt_flops", "kernel_csv_row",
           "kernel_rows", "op_csv_row", "rate_cells", "shapes_text"]
