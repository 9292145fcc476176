"""Numbers-first plain-text tables for a terminal (no colour, no dependencies)."""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..results.efficiency import Efficiency, flops_range
from ..results.attribution import CATEGORIES, IDLE_CAUSES, Attribution, CompiledOutside, Coverage
from ..results.hints import NO_STEPS_BASIS, step_unit
from ..results.sweep import run_rows
from ..results.rows import Row, layer_rows, pair_layer_rows, with_layers  # issue 38: a group's attention layer row
from ..vocab import MATMUL_ROLES, IdleCause, Phase, UnlinkedReason
from .base import (
    latency_cell, measured_lines, runs_header_lines, speedup_cell, speedup_cols, sweep_notes,
    HEADS, Renderer, alloc_line, blocks_line, fmt_time, group_rows, header_lines, headline, noise_line, pair_rows,
    pct, printable, rank_from_line, text_lines, rank_pair_cells, rank_view_of, ratio_text, roles_line, share_line,
    share_text, spread_line,
    signed, step_line, unmatched_rows, lead_line, per_step, per_step_line, totals_label,
)
from .base import run_pair_cells, run_pair_gate_note, runs_only_line
from .base import rest_change_lines, rest_lines as base_rest_lines  # issue 37: the rest of the step
from .base import rest_shown  # issue 42: a trace with no attention blocks
from .names import ELLIPSIS, short_name
from .optables import NOT_COMPUTED, basis_of, kernel_rows, rate_cells, shapes_text  # issue 42: --by op/kernel
from .stagetable import (  # issue 44: serving stages
    NO_STAGES, STAGE_DIFF_HEAD, STAGE_HEAD, stage_cells, stage_diff_cells, stage_diff_title, stage_only_lines,
    stage_title,
)

if TYPE_CHECKING:
    from ..results.attribution import RankRow, Totals
    from ..results.ops import OpRow
    from ..results.diff import DiffResult
    from ..results.hints import Hint, HintOverlap
    from ..results.sweep import RunRow

_TOP_SHOWN = 8  # top kernels of an attribution
_KERNELS_SHOWN = 8  # gone/new kernels of a diff
DEFAULT_WIDTH = 100  # when stdout is not a terminal and COLUMNS is unset
MIN_WIDTH = 40  # narrower terminals get this width (and lines cut at it would say nothing)
_LABEL_SOFT = 24  # a name column shrinks to this before any column is dropped
_LABEL_HARD = 10  # ... and to this after every droppable column is gone
# Category headings over share-only cells (the compact form of the block table).
SHORT_HEADS = {"matmul": "matmul%", "softmax": "softmax%", "fused_attention": "fused%", "memory": "mem%",
               "elementwise": "elem%", "other": "other%"}


def terminal_width() -> int:
    """COLUMNS when set to a number, else the terminal's width when stdout is one, else 100."""
    env = os.environ.get("COLUMNS", "")
    if env.strip().isdigit() and int(env) > 0:
        return max(MIN_WIDTH, int(env))
    try:
        if sys.stdout is not None and sys.stdout.isatty():
            return max(MIN_WIDTH, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)
    except (AttributeError, ValueError, OSError):
        pass
    return DEFAULT_WIDTH


# ---------------------------------------------------------------------------------------------
# One unit per column

_UNITS = (("s", 1e6, 2), ("ms", 1e3, 2), ("µs", 1.0, 1))  # unit, µs per unit, decimals


def time_unit(values: Iterable[float]) -> str:
    """The unit of a column: that of its largest magnitude, so every cell reads in the same unit."""
    top = max((abs(v) for v in values), default=0.0)
    for unit, scale, _ in _UNITS:
        if top >= scale:
            return unit
    return "µs"


def fmt_in(us: float, unit: str, sign: bool = False) -> str:
    """``us`` in ``unit`` (``31.85 ms``, ``0.00 ms``); ``sign`` adds + to a positive delta that does not round to 0."""
    for u, scale, dec in _UNITS:
        if u == unit:
            text = f"{us / scale:.{dec}f}"
            if text.lstrip("-").strip("0.") == "":
                text = text.lstrip("-")
            elif sign and us > 0:
                text = "+" + text
            return f"{text} {unit}"
    raise ValueError(f"unknown time unit {unit!r}")


# ---------------------------------------------------------------------------------------------
# Tables and lines that fit the width


@dataclass(slots=True, kw_only=True)
class Col:
    """One table column. ``names`` marks the column of names (shortened by :func:`short_name`);
    ``compact`` is a narrower form of the cells; ``drop`` ranks droppable columns (lowest first)."""

    head: str
    cells: list[str]
    right: bool = True
    names: bool = False
    compact: list[str] | None = None
    compact_head: str | None = None
    drop: int | None = None


_Shown = tuple[str, list[str], bool]  # a column as laid out: head, cells, right-aligned


def _shown(c: Col, label_w: int | None) -> _Shown:
    """A column as laid out: a names column's head and cells shortened to ``label_w`` (when given)."""
    if not c.names or label_w is None:
        return c.head, c.cells, c.right
    return short_name(c.head, label_w), [short_name(x, label_w) for x in c.cells], c.right


def _row_text(cells: list[str], widths: list[int], shown: list[_Shown]) -> str:
    """One line of the table: each cell padded to its column's width, on its column's side."""
    return "  ".join(x.rjust(w) if right else x.ljust(w) for x, w, (_, _, right) in zip(cells, widths, shown)).rstrip()


def _layout(cols: list[Col], label_w: int | None) -> list[str]:
    """The heading, a rule under it and the rows, each column as wide as its widest cell."""
    shown = [_shown(c, label_w) for c in cols]
    widths = [max([len(h)] + [len(x) for x in cells]) for h, cells, _ in shown]
    rows = [[h for h, _, _ in shown]] + [list(r) for r in zip(*(cells for _, cells, _ in shown))]
    out = [_row_text(r, widths, shown) for r in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    return out


def _wide(lines: list[str], width: int) -> bool:
    return max(len(x) for x in lines) > width


def _label_room(cols: list[Col], width: int, limit: int) -> int | None:
    """The width left for names beside the other columns, at least ``limit``; None without a names column."""
    if not any(c.names for c in cols):
        return None
    others = _layout([c for c in cols if not c.names], None)
    rest = len(others[1]) + 2 if others and others[0] else 0
    return max(limit, width - rest)


def _cut(lines: list[str], width: int) -> list[str]:
    """Lines longer than ``width`` cut, with "…" as their last character."""
    return [x if len(x) <= width else x[:width - 1] + ELLIPSIS for x in lines]


def _drop_until_fits(cols: list[Col], width: int) -> tuple[list[Col], list[str]]:
    """Droppable columns go, lowest rank first, until the table (names at the soft limit) fits."""
    lines = _layout(cols, _label_room(cols, width, _LABEL_SOFT))
    for c in sorted((c for c in cols if c.drop is not None), key=lambda c: c.drop or 0):
        if not _wide(lines, width):
            break
        cols = [x for x in cols if x is not c]
        lines = _layout(cols, _label_room(cols, width, _LABEL_SOFT))
    return cols, lines


def fit_table(cols: list[Col], width: int) -> list[str]:
    """The table in at most ``width`` columns. In order, while it is too wide (docs/attribution.md, "Terminal width"):
    names are shortened to 24 characters, cells switch to their compact form, droppable columns go (lowest
    rank first), names are shortened to 10 characters, and last, lines are cut with "…"."""
    lines = _layout(cols, None)
    if not _wide(lines, width):
        return lines
    lines = _layout(cols, _label_room(cols, width, _LABEL_SOFT))
    if not _wide(lines, width):
        return lines
    for c in cols:
        if c.compact is not None:
            c.cells, c.head = c.compact, c.compact_head or c.head
    cols, lines = _drop_until_fits(cols, width)
    if not _wide(lines, width):
        return lines
    return _cut(_layout(cols, _label_room(cols, width, _LABEL_HARD)), width)


def _table(rows: list[list[str]], right: set[int], width: int, names: int | None = 0,
           drop: dict[int, int] | None = None) -> list[str]:
    """A table from rows (the first is the heading), column ``names`` holding names."""
    return fit_table(_cols(rows, right, names, drop or {}), width)


def _cols(rows: list[list[str]], right: set[int], names: int | None, drop: dict[int, int]) -> list[Col]:
    """Rows (the first is the heading) as columns: ``right`` aligned right, ``names`` the names column, ``drop``
    each droppable column's rank."""
    return [Col(head=rows[0][i], cells=[r[i] for r in rows[1:]], right=i in right, names=i == names,
                drop=drop.get(i)) for i in range(len(rows[0]))]


def _drop_forward_phase(cols: list[Col]) -> list[Col]:
    """The phase column is shown only when some row is not forward (total rows leave it blank)."""
    return [c for c in cols if not (c.head == "phase" and all(x in (Phase.FORWARD, "") for x in c.cells))]


def stage_lines(result: Attribution, w: int) -> list[str]:
    """Serving traces (issue 44): the stage table, prefill / decode / mixed / outside; nothing on other traces."""
    if result.stages is None:
        return []
    rows = [list(STAGE_HEAD)] + [stage_cells(r) for r in result.stages]
    drop = {8: 1, 10: 2, 11: 3, 7: 4, 13: 5}  # softmax%, elem%, other%, matmul%, roof go first: fused% and mem% stay
    return ["", *wrap(stage_title(result), w), *_table(rows, set(range(1, len(STAGE_HEAD))), w, names=None,
                                                      drop=drop)]


def wrap(line: str, width: int, indent: str = "  ") -> list[str]:
    """A prose line broken to fit ``width``, between its `` · `` parts where it has them, else at spaces;
    continuation lines are indented one step deeper."""
    if len(line) <= width:
        return [line]
    lead = line[:len(line) - len(line.lstrip(" "))] + indent
    parts = line.split(" · ")
    if len(parts) > 1 and all(len(lead) + len(p) + 2 <= width for p in parts[1:]) and len(parts[0]) + 2 <= width:
        out = [parts[0]]
        for p in parts[1:]:
            if len(out[-1]) + 3 + len(p) + 2 <= width:
                out[-1] += " · " + p
            else:
                out[-1] += " ·"
                out.append(lead + p)
        return out
    return textwrap.wrap(line, width=width, initial_indent="", subsequent_indent=lead,
                         break_on_hyphens=False, break_long_words=True) or [line[:width]]


def _wrap_all(lines: list[str], width: int) -> list[str]:
    return [w for x in lines for w in wrap(x, width)]


def _fmt_flops(x: float) -> str:
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if x >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f}"


def _efficiency_lines(result: Attribution, width: int, pooled: str = "") -> list[str]:
    """Per block kind: FLOPs, achieved TFLOP/s and GB/s, % of the roofline and the bound (tracekit.flops).
    ``pooled`` (a sweep's `` (pooled over 32 runs)``) goes into the heading before it is wrapped: added to a
    wrapped line's end, it once landed inside the roof's own words ("(dense (pooled over 32 runs) peaks)")."""
    if result.time_base == "host" or not result.blocks:
        return []
    tot = result.totals.efficiency
    if tot is None or tot.ops == 0:
        why = tot.reason if tot is not None and tot.reason else "no FLOP counts"
        return ["", *wrap(f"efficiency{pooled}: n/a ({why})", width)]
    groups = _efficiency_groups(result)
    extra = [(("all blocks", ""), (tot, [result.totals.total_us]))] if len(groups) > 1 else []
    rows = [["block kind", "phase", "FLOPs", "TFLOP/s", "GB/s", "of roof", "bound", "timed"]]
    for (kind, phase), (e, busy) in list(groups.items()) + extra:
        rows.append(_efficiency_row(kind, phase, e, busy[0]))
        if kind != "all blocks":  # (issue 42: a pooled "memory-bound" hid GEMMs near the roof)
            rows += [_efficiency_row(f"  · {part}", "", pe, busy[0]) for part, pe in _parts(result, kind, phase)]
    cols = _cols(rows, right={2, 3, 4, 5, 7}, names=0, drop={4: 2, 7: 1, 2: 3})
    return (["", *wrap(f"efficiency of kernels with recorded shapes{pooled} — roof: {_roof(result)}", width)]
            + fit_table(_drop_forward_phase(cols), width)
            + wrap("(timed: share of the blocks' busy time in kernels whose FLOPs/bytes are counted)", width)
            + _bounds_lines(result, width) + _uncounted_lines(result, width))


def _roof(result: Attribution) -> str:
    """The roofline the efficiency is measured against: the device's dense peaks at the dtypes the figures were
    counted at (hardware.compute_peak; else bf16's), or why there is none."""
    dev, tot = result.device, result.totals.efficiency
    if dev is None or dev.peaks is None:
        return dev.reason if dev is not None and dev.reason else "no device peaks"
    pk = dev.peaks
    dts = tot.dtypes if tot is not None and tot.dtypes else ("bf16",)
    tf = ", ".join(f"{d} {pk.tflops(d) or 'n/a'}" for d in dts)
    return f"{dev.name} → {pk.model}: {tf} TFLOP/s, {pk.mem_gb_per_s:.0f} GB/s (dense peaks)"


def _efficiency_groups(result: Attribution) -> dict[tuple[str, str], tuple[Efficiency, list[float]]]:
    """(kind, phase) -> the merged efficiency of its blocks with FLOP counts, and their busy time."""
    groups: dict[tuple[str, str], tuple[Efficiency, list[float]]] = {}
    for b in result.blocks:
        if b.efficiency is not None:
            e, busy = groups.setdefault((b.kind, b.phase), (Efficiency(), [0.0]))
            e.add(b.efficiency)
            busy[0] += b.total_us
    return groups


_PART_ORDER = (*CATEGORIES, *MATMUL_ROLES)  # a kind's parts: its categories, then matmul by role


def _parts(result: Attribution, kind: str, phase: str) -> list[tuple[str, Efficiency]]:
    """A block kind's efficiency per category and per matmul role (the blocks' ``efficiency_by_category`` merged),
    those with FLOP counts, in report order: what the pooled row is made of."""
    merged: dict[str, Efficiency] = {}
    for b in result.blocks:
        if b.kind == kind and b.phase == phase:
            for part, e in b.efficiency_by_category.items():
                merged.setdefault(part, Efficiency()).add(e)
    return [(p, merged[p]) for p in _PART_ORDER if p in merged and merged[p].ops > 0]


def _efficiency_row(kind: str, phase: str, e: Efficiency, busy_us: float) -> list[str]:
    """One row of the efficiency table: FLOPs, rates, share of the roof, the bound and the share of busy time timed."""
    if e.ops == 0:
        return [kind, phase, "n/a", "", "", "", "", ""]
    t = e.time_ns
    roof_pct = None if e.roof_pct is None else min(100.0, e.roof_pct)  # issue 44: never above the roof (a reason)
    row = [kind, phase, _fmt_flops(e.flops), f"{e.flops / t / 1e3:.1f}" if t else "n/a",
           f"{e.bytes / t:.0f}" if t else "n/a", "n/a" if roof_pct is None else f"{roof_pct:.1f}%",
           e.bound or "n/a", f"{pct(t / 1000, busy_us):.0f}%"]
    return _with_range(row, e) if e.bounded else row


def _with_range(row: list[str], e: Efficiency) -> list[str]:
    """Issue 44: a part counted as bounds (varlen, paged) shows FLOPs, TFLOP/s and % of roof as ``low–high``;
    the high end never above 100% of the roof (results.efficiency.flops_range cuts it and says why)."""
    r = flops_range(e)
    hi, rate, roof = r["flops_max"], r["tflops_per_s_max"], r["roof_pct_max"]
    row[2] = f"{row[2]}–{_fmt_flops(float(hi))}" if isinstance(hi, float) else row[2]
    row[3] = f"{row[3]}–{rate:.1f}" if isinstance(rate, float) else row[3]
    row[5] = f"{row[5][:-1]}–{roof:.1f}%" if isinstance(roof, float) and row[5].endswith("%") else row[5]
    return row


def _uncounted_lines(result: Attribution, width: int) -> list[str]:
    """Under the efficiency table: the categories whose calls have no FLOP count and why (issue 44: vLLM's
    attention, flex attention), each reason once."""
    seen: dict[str, str] = {}
    for b in result.blocks:
        for part, e in b.efficiency_by_category.items():
            if e.ops == 0 and e.reason and e.reason not in seen:
                seen[e.reason] = part
    return [ln for why, part in seen.items() for ln in wrap(f"({part}: no FLOP count: {why})", width)]


def _bounds_lines(result: Attribution, width: int) -> list[str]:
    """Under the efficiency table: why some counts are ranges (issue 44), once."""
    tot = result.totals.efficiency
    why = flops_range(tot)["flops_reason"] if tot is not None and tot.ops else None
    if not why:
        return []
    return wrap(f"({'low–high: FLOPs counted as bounds: ' if tot is not None and tot.bounded else ''}{why})", width)


def _rank_lines(result: Attribution, width: int) -> list[str]:
    """``--by rank``: one row per rank (attention time, split, span, idle) and the spread: the straggler view."""
    view = rank_view_of(result)
    idle = any(r.launch_bound is not None for r in view.rows)
    head = (["rank", "trace", "n", "total", "share", "span"] + (["idle"] if idle else [])
            + [HEADS[c] for c in CATEGORIES])
    tunit = time_unit(r.total_us for r in view.rows)
    sunit = time_unit(r.span_us for r in view.rows)
    cunits = {c: time_unit(r.categories[c] for r in view.rows) for c in CATEGORIES}
    rows = [head] + [_rank_cells(r, idle, tunit, sunit, cunits) for r in view.rows]
    drop = {1: 1, 2: 3, 5: 2}
    return (_table(rows, right={0} | set(range(2, len(head))), width=width, names=1, drop=drop)
            + _wrap_all([spread_line(view), rank_from_line(view)], width))


def _rank_cells(r: RankRow, idle: bool, tunit: str, sunit: str, cunits: dict[str, str]) -> list[str]:
    """One rank's row: its time, share, span, idle (on device ranks) and each category's time and share."""
    cells = [str(r.rank), r.source, str(r.blocks), fmt_in(r.total_us, tunit), share_text(r.attention_share),
             fmt_in(r.span_us, sunit)]
    cells += [f"{pct(r.idle_us, r.span_us):.0f}%"] if idle else []
    cells += [f"{fmt_in(r.categories[c], cunits[c])} {pct(r.categories[c], r.total_us):4.1f}%" for c in CATEGORIES]
    return cells


def _event_lines(rows: list[tuple[float, str, str, str]], width: int, sign: bool = False,
                 times: list[str] | None = None) -> list[str]:
    """``  31.51 ms  8×  softmax  cunn_SoftMaxForwardReg<…>``: one time unit for the list, names shortened to fit.
    ``times``: the time cells already worded (a diff's), instead of the list's one unit."""
    if times is None:
        unit = time_unit(us for us, _, _, _ in rows)
        times = [fmt_in(us, unit, sign) for us, _, _, _ in rows]
    tw = max(10, *(len(t) for t in times))
    cw = max(6, *(len(c) for _, c, _, _ in rows))
    catw = max([0] + [len(cat) for _, _, cat, _ in rows])
    out = []
    for t, (_, count, cat, name) in zip(times, rows):
        prefix = _event_prefix(f"  {t:>{tw}}  {count:>{cw}}  ", f"{cat:<{catw}} " if catw else "", width)
        out.append(prefix + short_name(name, max(1, width - len(prefix))))
    return _cut(out, width)


def _event_prefix(lead: str, cat: str, width: int) -> str:
    """The time and count, then the category unless that leaves too little room for a useful name."""
    return lead if cat and width - len(lead + cat) < 16 else lead + cat


# How the terminal names each unlinked reason (the JSON keys are the vocab.UnlinkedReason values).
UNLINKED_LABELS: dict[str, str] = {
    UnlinkedReason.BEFORE_TRACE: "before the trace",
    UnlinkedReason.GRAPH_REPLAY: "graph replay",
    UnlinkedReason.NO_CORRELATION: "no correlation id",
    UnlinkedReason.OTHER_PROCESS: "another process or stream",
    UnlinkedReason.OTHER: "other",
}
_OUTSIDE_NAMES_SHOWN = 3  # kernel names on the "attention outside blocks" line
_OUTSIDE_NAME_WIDTH = 48


def _coverage_detail(cv: Coverage) -> list[str]:
    """Under the coverage line: the unlinked time by reason (the reasons that have any) and the fused attention
    kernels no block owns, with the most frequent names."""
    lines: list[str] = []
    if cv.unlinked_us > 0:
        parts = [f"{UNLINKED_LABELS.get(k, k)} {pct(us, cv.device_us):.1f}%"
                 for k, us in cv.unlinked_by_reason.items() if us > 0]
        if parts:
            lines.append("unlinked by reason: " + " · ".join(parts))
    n = cv.attention_outside_kernels
    if n:
        names = [f"{short_name(printable(name), _OUTSIDE_NAME_WIDTH)} ×{k}"
                 for name, k in list(cv.attention_outside_names.items())[:_OUTSIDE_NAMES_SHOWN]]
        more = len(cv.attention_outside_names) - _OUTSIDE_NAMES_SHOWN
        if more > 0:
            names.append(f"+{more} more")
        lines.append(f"attention outside blocks: {n:,} kernel{'s' if n != 1 else ''}, "
                     f"{fmt_time(cv.attention_outside_us)} ({', '.join(names)})")
    return lines


def compiled_outside_lines(co: CompiledOutside | None) -> list[str]:
    """CPU-only traces (issue 38): the compiled regions no block covers, under "attention outside blocks", with
    their most frequent names, the batched products inside them and the reason."""
    if co is None:
        return []
    names = [f"{short_name(printable(name), _OUTSIDE_NAME_WIDTH)} ×{k}"
             for name, k in list(co.names.items())[:_OUTSIDE_NAMES_SHOWN]]
    more = len(co.names) - _OUTSIDE_NAMES_SHOWN
    if more > 0:
        names.append(f"+{more} more")
    products = f", {co.batched_products:,} batched products (bmm) inside" if co.batched_products else ""
    n = co.regions
    return [f"attention outside blocks: {n:,} compiled region{'s' if n != 1 else ''}, {fmt_time(co.host_us)} host "
            f"time ({', '.join(names)}){products}. {co.reason}"]


_RECORDED_KINDS, _RECORDED_NAMES = 4, 4  # block kinds, and kernel names of each, listed from a capture


def _recorded_lines(result: Attribution, w: int) -> list[str]:
    """In a graph capture: what each block kind's launches recorded into the graph (the calls ran nothing)."""
    by_kind: dict[str, dict[str, int]] = {}
    for b in result.blocks:
        if b.recorded:
            acc = by_kind.setdefault(b.kind, {})
            for name, k in b.recorded.items():
                acc[name] = acc.get(name, 0) + k
    if not by_kind:
        return []
    lines = ["", "recorded into graphs by the blocks' launches (captured, not run):"]
    for kind, names in list(by_kind.items())[:_RECORDED_KINDS]:
        top = sorted(names.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ", ".join(f"{short_name(printable(n), 48)} ×{k}" for n, k in top[:_RECORDED_NAMES])
        more = f", +{len(top) - _RECORDED_NAMES} more" if len(top) > _RECORDED_NAMES else ""
        lines += wrap(f"  {short_name(printable(kind), 40)}: {shown}{more}", w)
    return lines


def _pooled(result: Attribution) -> str:
    return f" (pooled over {len(result.runs)} runs)"


def _run_lines(result: Attribution, w: int) -> list[str]:
    """The sweep's run table: measured latency and speedup first, the profiled busy, span and idle beside them
    (kept when the table is narrowed: categories compact first, then n goes), and the marks' footnotes."""
    rows = run_rows(result)
    for r in rows:
        r.check()
    measured = any(r.measured is not None for r in rows)
    lines = wrap(f"runs: {'latency measured outside the profiler (one forward pass); ' if measured else ''}"
                 "profiled busy, span and idle are totals over each run's steps", w)
    lines += fit_table(_run_cols(rows, measured), w) + _wrap_all(sweep_notes(rows), w)
    return lines + ["", "share of each run's busy time by category:"] + fit_table(_run_share_cols(rows), w)


def _run_cols(rows: list[RunRow], measured: bool) -> list[Col]:
    """The run table's columns: name, blocks, latency and speedup (when measured), busy, span, idle."""
    cols = [Col(head="run", cells=[r.name for r in rows], right=False, names=True),
            Col(head="n", cells=[str(r.blocks) for r in rows], drop=1)]
    if measured:
        cols.append(_latency_col(rows))
    cols += [Col(head=head, cells=[speedup_cell(r, which) for r in rows]) for head, which in speedup_cols(rows)]
    cols += _busy_span_cols(rows)
    if any(r.launch_bound is not None for r in rows):
        cols.append(Col(head="idle", cells=[_idle_cell(r) for r in rows]))
    return cols


def _latency_col(rows: list[RunRow]) -> Col:
    """Measured latency ± its spread; narrowed, the milliseconds alone."""
    return Col(head="latency", cells=[latency_cell(r) for r in rows],
               compact=[latency_cell(r).split(" ±")[0].removesuffix(" ms") for r in rows], compact_head="latency ms")


def _busy_span_cols(rows: list[RunRow]) -> list[Col]:
    """Each run's profiled busy time and span, each column in its own unit."""
    busy_u, span_u = time_unit(r.busy_us for r in rows), time_unit(r.span_us for r in rows)
    return [Col(head="busy", cells=[fmt_in(r.busy_us, busy_u) for r in rows]),
            Col(head="span", cells=[fmt_in(r.span_us, span_u) for r in rows])]


def _idle_cell(r: RunRow) -> str:
    """A run's idle share, marked LB when it is launch-bound."""
    return ("—" if r.idle_pct is None else f"{r.idle_pct:.0f}%") + (" LB" if r.launch_bound else "")


def _run_share_cols(rows: list[RunRow]) -> list[Col]:
    """Each run's busy time by category, in percent."""
    shares = [Col(head="run", cells=[r.name for r in rows], right=False, names=True)]
    for c in CATEGORIES:
        shares.append(Col(head=SHORT_HEADS[c], cells=[f"{pct(r.categories[c], r.busy_us):.1f}" for r in rows],
                          compact=[f"{pct(r.categories[c], r.busy_us):.0f}" for r in rows]))
    return shares


def _run_role_lines(result: Attribution, w: int) -> list[str]:
    """Matmul by role, one line per run."""
    by_role = [roles_line(short_name(r.name, 40), r.attribution.totals.categories["matmul"],
                          r.attribution.totals.matmul_roles) for r in result.runs]
    if not any(by_role):
        return []
    return ["", "matmul by role (share of matmul):"] + _wrap_all([x for x in by_role if x], w)


def _run_hint_lines(result: Attribution, w: int) -> list[str]:
    """Hints per run: one entry per rule, naming each run it fired on with that run's saving, and the advice
    of the run where it saves most."""
    by_rule: dict[str, list[tuple[str, Hint]]] = {}
    for run in result.runs:
        for h in run.attribution.hints:
            by_rule.setdefault(h.rule, []).append((run.name, h))
    if not by_rule:
        return []
    lines = ["", "hints (per run):"]
    for rule, fired in by_rule.items():
        fired.sort(key=lambda rh: -(rh[1].saving_pct or 0))
        runs = ", ".join(f"{name}" + ("" if h.saving_pct is None else f" {h.saving_pct:.0f}%") for name, h in fired)
        lines += wrap(f"  - [{rule}] on {len(fired)} run{'s' if len(fired) != 1 else ''} "
                      f"(saving of each run's attention time): {runs}", w)
        lines += wrap(f"    {fired[0][0]}: {fired[0][1].message}", w, indent="      ")
    return lines


_SAVING_NAMES = 2  # kernel names a saving line quotes


def _hint_lines(hints: list[Hint], w: int) -> list[str]:
    """Each hint, its saving and the kernels it counts; hints whose savings count the same kernels are marked, and
    what they save together (the union of their kernel time, not the sum) follows them."""
    lines = ["", "hints:"]
    together: list[HintOverlap] = []
    for h in hints:
        lines += wrap(f"  - [{h.rule}] {h.message}", w)
        if h.saving_us is None:
            lines += wrap(f"    saving: not estimated; {h.saving_basis}", w)
            continue
        lines += wrap(_saving_line(h, h.saving_us), w)
        ov = h.overlap
        if ov is not None:
            lines += wrap(f"    overlaps {', '.join(f'[{r}]' for r in ov.rules if r != h.rule)}: the savings count "
                          f"some of the same kernels; see \"together\" below", w)
            if all(ov is not t for t in together):
                together.append(ov)
    for ov in together:
        lines += wrap(_together_line(ov), w)
    return lines


_GroupRow = tuple[str, str, int, float, float, float, dict[str, float]]  # label, phase, n, total, span, idle, cats


def _indented(rows: list) -> list:
    """Layer rows (results.rows) indented under the row they belong to; None stays None."""
    return [None if x is None else replace(x, label=f"  {x.label}") for x in rows]


def _with_layer_rows(groups: list[Row], layers: list[Row | None]) -> tuple[list[Row], set[int]]:
    """Each group followed by its layer row (results.rows.layer_rows), and the positions of the layer rows."""
    out: list[Row] = []
    at: set[int] = set()
    for g, lay in zip(groups, layers):
        out.append(g)
        if lay is not None:
            at.add(len(out))
            out.append(replace(lay, label=f"  {lay.label}"))
    return out, at


def _blank_layer_spans(cols: list[Col], layers: set[int]) -> list[Col]:
    """A layer row has a busy total and split, but no span or idle of its own: those cells stay blank."""
    for c in cols:
        if c.head in ("span", "idle"):
            c.cells = [("" if k in layers else x) for k, x in enumerate(c.cells)]
    return cols


def _group_cols(label: str, rows: list[_GroupRow], idle: bool) -> list[Col]:
    """The grouped table's columns: the group, phase, blocks, total, span, idle share (device blocks only) and
    each category's time and share of the group's total (its share alone when narrowed)."""
    cols = [Col(head=label, cells=[r[0] for r in rows], right=False, names=True),
            Col(head="phase", cells=[r[1] for r in rows], right=False),
            Col(head="n", cells=[str(r[2]) for r in rows], drop=4),
            *_total_span_cols(rows)]
    if idle:
        cols.append(Col(head="idle", cells=[f"{pct(r[5], r[4]):.0f}%" for r in rows], drop=2))
    return cols + [_group_category_col(rows, c) for c in CATEGORIES]


def _total_span_cols(rows: list[_GroupRow]) -> list[Col]:
    """Each group's busy total and span, each column in its own unit (the span goes first when narrowed)."""
    tunit = time_unit(r[3] for r in rows)
    sunit = time_unit(r[4] for r in rows)
    return [Col(head="total", cells=[fmt_in(r[3], tunit) for r in rows]),
            Col(head="span", cells=[fmt_in(r[4], sunit) for r in rows], drop=1)]


def _group_category_col(rows: list[_GroupRow], c: str) -> Col:
    """One category's time (in its own unit) and share of each group's total; narrowed, the share alone."""
    cunit = time_unit(r[6][c] for r in rows)
    return Col(head=HEADS[c], cells=[f"{fmt_in(r[6][c], cunit)} {pct(r[6][c], r[3]):4.1f}%" for r in rows],
               compact=[f"{pct(r[6][c], r[3]):.1f}%" for r in rows], compact_head=SHORT_HEADS[c])


def _idle_notes(tot: Totals, idle: bool, w: int) -> list[str]:
    """Under the grouped table: the launch-bound note, then the idle time by cause (device blocks only)."""
    lines: list[str] = []
    if tot.launch_bound:
        lines += wrap(f"launch-bound: the device is idle {pct(tot.idle_us, tot.span_us):.0f}% of the blocks' span "
                      f"(busy {fmt_time(tot.total_us)} of {fmt_time(tot.span_us)}); busy time understates what "
                      f"the blocks cost in wall clock", w)
    cause = idle_cause_line(tot.idle_by_cause, tot.idle_us) if idle else None
    if cause:  # under the launch-bound note, or apart from the table's rows
        lines += ([] if tot.launch_bound else [""]) + wrap(cause, w)
    return lines


def _saving_line(h: Hint, saving_us: float) -> str:
    """What an estimated hint saves, on what basis, and the first kernels it counts."""
    names = h.saving_kernels
    counts = ", ".join(short_name(n, 48) for n in names[:_SAVING_NAMES]) + (
        f" (+{len(names) - _SAVING_NAMES} more)" if len(names) > _SAVING_NAMES else "")
    how = "up to" if h.saving_basis.startswith("upper bound") else "about"
    over = "in all" if h.per_step_basis == NO_STEPS_BASIS else _over_steps(h.steps)
    return (f"    saving: {how} {_per_step_text(h)}; {fmt_time(saving_us)} {over} "
            f"({h.saving_pct:.1f}%); {h.saving_basis}" + (f"; counts {counts}" if counts else ""))


def _over_steps(steps: int) -> str:
    """How many steps a total covers: "over 2 steps"."""
    return f"over {steps} step{'s' if steps != 1 else ''}"


def _per_step_text(h: Hint) -> str:
    """The headline: the saving per step, its basis and its bound (one step's attention time), and, on
    launch-bound blocks, that a busy-time saving will not reach latency."""
    if h.saving_per_step_us is None:
        return "n/a per step"
    of = "span" if h.rule == "launch-bound" else "busy time"
    unit, whose = step_unit(h.per_step_basis), ("the trace's" if h.per_step_basis == NO_STEPS_BASIS else "a step's")
    text = (f"{fmt_time(h.saving_per_step_us)}{unit} ({h.per_step_basis}; {whose} attention {of} is "
            f"{fmt_time(h.step_attention_us or 0.0)})")
    return text + ("; will not reach latency (launch-bound)" if h.reaches_latency is False else "")


def _together_line(ov: HintOverlap) -> str:
    """What overlapping hints save together: the union of their kernel time, not the sum."""
    pct_text = "" if ov.union_pct is None else f" ({ov.union_pct:.1f}%)"
    per = "" if ov.union_per_step_us is None else f"{fmt_time(ov.union_per_step_us)} per step, "
    return (f"  together: {' + '.join(ov.rules)} save at most {per}{fmt_time(ov.union_us)} in all{pct_text}, not the "
            f"sum {fmt_time(ov.sum_us)}: these hints overlap ({fmt_time(ov.double_counted_us)} counted "
            f"twice, in {', '.join(short_name(n, 48) for n in ov.shared_kernels[:_SAVING_NAMES])})")


def _linked_to(result: Attribution) -> str:
    """What the coverage line's linked time is linked to: a replayed kernel left unmapped to a captured op is
    linked only through its graph launch call (issue 42: "100.0% linked" under "replayed kernels have no host op"
    read as a contradiction)."""
    unmapped = sum(t.graphs.replayed_us - t.graphs.mapped_us for t in result.traces if t.graphs is not None)
    return "host ops or graph launches" if unmapped > 0 else "host ops"


_OPS_SHOWN = 40  # rows of the op and kernel tables; the CSV and JSON have them all
_SHAPES_WIDTH, _SHAPES_COMPACT = 40, 29  # the recorded Input Dims for a terminal, cut to this (compact: when too wide)
_SCALAR_SLOTS = re.compile(r"(?:,\[\])+$")  # trailing ",[]" slots: the scalars after the tensors


def _clip(s: str, width: int) -> str:
    return s if len(s) <= width else s[:width - 1] + ELLIPSIS


def _shapes_cell(r: OpRow) -> str:
    """The recorded Input Dims for a terminal: no spaces, no outer brackets, no trailing scalar slots
    (``[4,16,4096,4096],[4096,4096]``)."""
    text = shapes_text(r)
    if text.startswith("[") and text.endswith("]"):
        text = _SCALAR_SLOTS.sub("", text[1:-1])
    return printable(text)


def _op_label(op: str) -> str:
    """An op's name for the terminal: ``aten::`` left out (the note under the table says so); other namespaces
    kept."""
    return op.removeprefix("aten::")


def _more_rows(n: int) -> list[str]:
    return [f"… {n - _OPS_SHOWN} more rows (--format csv or json for all)"] if n > _OPS_SHOWN else []


def op_lines(result: Attribution, w: int) -> list[str]:
    """``--by op``: each counted (op, shapes, dtype) on its own roofline, by time (tracekit.results.ops)."""
    if result.ops is None:
        return wrap(NOT_COMPUTED, w)
    if result.time_base == "host":  # (the rows time device kernels: a CPU-only trace has none)
        return wrap(f"ops whose FLOPs are counted in blocks: none timed ({_roof(result)})", w)
    basis = basis_of(result)
    head = wrap(f"ops whose FLOPs are counted in blocks, {basis.label} — roof: {_roof(result)}, each op at its "
                f"dtype's", w)
    if not result.ops:
        return head + wrap("(no op in blocks has recorded shapes and a FLOP formula: record_shapes=True)", w)
    shown = result.ops[:_OPS_SHOWN]
    unit = time_unit(basis.per_step(r.time_us) for r in shown)
    rows = [["op", "shapes", "dtype", "calls", "time", "TFLOP/s", "GB/s", "of roof", "bound"]]
    rows += [[printable(_op_label(r.op)), _shapes_cell(r), printable(r.dtype), str(r.calls),
              fmt_in(basis.per_step(r.time_us), unit), *rate_cells(r)] for r in shown]
    cols = _cols(rows, right={3, 4, 5, 6, 7}, names=0, drop={6: 1, 2: 2, 3: 3, 1: 4})
    cols[1].cells = [_clip(x, _SHAPES_WIDTH) for x in cols[1].cells]
    cols[1].compact = [_clip(x, _SHAPES_COMPACT) for x in cols[1].cells]
    table = fit_table(cols, w)
    note = ("(op: aten:: left out; shapes: the recorded Input Dims; time: the kernels' share of the blocks' busy "
            "time; of roof: time at the device's peak / measured time; bound: the larger of compute and memory time "
            "at peak)")
    return head + table + _more_rows(len(result.ops)) + wrap(note, w)


def kernel_lines(result: Attribution, w: int) -> list[str]:
    """``--by kernel``: every kernel the blocks own, by time: calls, time per step and total."""
    basis, ks = basis_of(result), kernel_rows(result)
    what = "kernels" if result.time_base != "host" else "host ops (self time)"
    head = wrap(f"{what} in blocks, {basis.label}" + (" and total" if basis.steps else ""), w)
    if not ks:
        return head + ["(none)"]
    shown = ks[:_OPS_SHOWN]
    unit, tunit = time_unit(basis.per_step(k.total_us) for k in shown), time_unit(k.total_us for k in shown)
    steps = basis.steps > 0
    rows = [["kernel", "category", "calls", *(["per step"] if steps else []), "total"]]
    rows += [[printable(k.kernel), k.category, str(k.calls),
              *([fmt_in(basis.per_step(k.total_us), unit)] if steps else []), fmt_in(k.total_us, tunit)]
             for k in shown]
    return head + fit_table(_cols(rows, right=set(range(2, len(rows[0]))), names=0, drop={1: 1}), w) + _more_rows(
        len(ks))


_TABLES: dict[str, Callable[[Attribution, int], list[str]]] = {"op": op_lines, "kernel": kernel_lines}
_TABLES["stage"] = lambda result, w: stage_lines(result, w)[1:] or wrap(NO_STAGES, w)  # issue 44: --by stage


class TerminalRenderer(Renderer):
    """Plain-text tables that fit ``width`` columns (default: :func:`terminal_width` at render time)."""

    name = "table"
    extension = ".txt"

    def __init__(self, by: str = "kind", tool: str = "tracekit", width: int | None = None,
                 title: str | None = None) -> None:
        super().__init__(by=by, tool=tool, title=title)
        self.width = width

    def _width(self) -> int:
        return max(MIN_WIDTH, self.width) if self.width is not None else terminal_width()

    def render_attribution(self, result: Attribution) -> str:
        w = self._width()
        lines = [f"{self.tool} attribute — {self.title or result.source}"]
        runs = self.by == "run" and len(result.runs) > 1  # a sweep: the run table first, pooled lines labelled
        lines += runs_header_lines(result) if runs else header_lines(result)
        lines += _per_step_lines(result)
        if result.coverage is not None:
            cv = result.coverage
            lines.append(f"device time linked to {_linked_to(result)}: {pct(cv.linked_us, cv.device_us):.1f}% · "
                         f"in attention blocks: {pct(cv.in_blocks_us, cv.device_us):.1f}% · "
                         f"unlinked: {pct(cv.unlinked_us, cv.device_us):.1f}% ({fmt_time(cv.unlinked_us)})")
            lines += _coverage_detail(cv)
        lines += compiled_outside_lines(result.compiled_outside)
        lines = _wrap_all(lines, w)
        lines.append("")
        if not result.blocks:  # (the step is still worth a page: where its time went, outside any attention)
            lines += wrap("no attention blocks found (try --scope REGEX to name your attention modules or ranges)", w)
            lines += rest_lines(result, w)
            lines += blockless_lines(result, w)
            lines += stage_lines(result, w)
            return text_lines(lines)
        if self.by == "rank":
            lines += _rank_lines(result, w)
        elif self.by in _TABLES:  # issue 42: the op and kernel tables instead of the grouped blocks
            lines += _TABLES[self.by](result, w)
        elif runs:
            lines = lines[:1] + _run_lines(result, w) + [""] + lines[1:-1]
            lines += _run_role_lines(result, w)
        else:
            lines += self._group_lines(result, w)
        lines += rest_lines(result, w)  # every grouping: each trace's own median step (base.rest_shown's rule)
        lines += stage_lines(result, w) if self.by != "stage" else []
        lines += self._tail_lines(result, w, pooled=_pooled(result) if runs else "")
        return text_lines(lines)

    def _group_lines(self, result: Attribution, w: int) -> list[str]:
        """The grouped table (kind, block, layer, step, run), the launch-bound note and matmul roles by group."""
        lines: list[str] = []
        tot = result.totals
        label = {"kind": "block kind", "layer": "block", "step": "step", "block": "block [step:ordinal]",
                 "run": "run"}[self.by]
        idle = tot.launch_bound is not None  # device blocks: span and idle share (a CPU has no idle device)
        groups = group_rows(result, self.by)
        groups, layers = _with_layer_rows(groups, layer_rows(result, self.by))
        rows: list[_GroupRow] = [
            (g.label, g.phase, g.blocks, g.total_us, g.span_us, g.idle_us, g.categories) for g in groups]
        if len(groups) - len(layers) > 1:
            rows.append(("all blocks", "", tot.blocks, tot.total_us, tot.span_us, tot.idle_us, tot.categories))
        lines += fit_table(_blank_layer_spans(_drop_forward_phase(_group_cols(label, rows, idle)), layers), w)
        lines += _idle_notes(tot, idle, w)
        by_role = [roles_line(short_name(g.label, 40) + ("" if g.phase == Phase.FORWARD else f" ({g.phase})"),
                              g.categories["matmul"], g.matmul_roles) for g in groups]
        if any(by_role):
            lines.append("")
            lines.append("matmul by role (share of matmul):")
            lines += _wrap_all([x for x in by_role if x], w)
        return lines

    def _tail_lines(self, result: Attribution, w: int, pooled: str = "") -> list[str]:
        """Efficiency, hints and the top kernels: the same under every grouping. ``pooled`` labels the lines
        of a sweep's merge (`` (pooled over 32 runs)``), whose hints are per run instead."""
        lines = _recorded_lines(result, w) + _efficiency_lines(result, w, pooled)
        if pooled:
            lines += _run_hint_lines(result, w)
        elif result.hints:
            lines += _hint_lines(result.hints, w)
        if result.top_kernels and self.by != "kernel":  # (--by kernel's table holds every one)
            lines.append("")
            lines.append(f"top device events in blocks{pooled}:" if result.time_base != "host"
                         else f"top host ops in blocks (self time){pooled}:")
            lines += _event_lines([(us, f"{count}×", cat, name)
                                   for name, cat, count, us in result.top_kernels[:_TOP_SHOWN]], w)
        return lines

    def render_diff(self, r: DiffResult) -> str:
        """The header, then each section of the report in reading order (see :data:`_DIFF_SECTIONS`)."""
        w = self._width()
        lines = self._diff_header(r, w)
        for section in _DIFF_SECTIONS:
            lines += section(r, w)
        return text_lines(lines)

    def _diff_header(self, r: DiffResult, w: int) -> list[str]:
        """Title, both sides' headers, warnings, the headline and how it was computed; a blank line closes it."""
        lines = [f"{self.tool} diff — {self.title or f'{r.labels[0]} → {r.labels[1]}'}"]
        lines += [f"before: {h}" for h in header_lines(r.before)]
        lines += [f"after:  {h}" for h in header_lines(r.after)]
        lines += [f"warning: {x}" for x in r.warnings]
        step = step_line(r)
        lines += [lead_line(r)]  # issue 37: the whole step (or the measured forward) leads; attention second
        lines += [headline(r), *([step] if step else []), *measured_lines(r), f"figures: {r.basis_note}", noise_line(r)]
        return _wrap_all(lines, w) + [""]


def _per_step_lines(result: Attribution) -> list[str]:
    """The headline on the one time base (issue 37): the median step first, then the totals over all steps,
    labelled; without steps (or runs pooled) the totals alone, labelled "whole trace" and why."""
    ps = per_step(result)
    if ps.span_us is None:
        return [f"attention, {ps.label}: {share_line(result)}"]
    return [per_step_line(ps), f"{totals_label(ps)} — attention: {share_line(result)}"]


# ---------------------------------------------------------------------------------------------
# The sections of a diff report: each takes the result and the width and returns its lines.

_CategoryRow = tuple[str, float, float, str, str, str]  # label, before, after, share of Δ, ratio, noise


_TINY_US = 0.0005  # half a nanosecond: below it a figure is 0 (float rounding of differences), above it never "0.00"


def _dcell(us: float, unit: str, sign: bool = False) -> str:
    """A diff cell in ``unit``; a figure that is not 0 but rounds to 0 there reads ``<0.01 ms`` (a signed one
    ``+<0.01 ms``/``-<0.01 ms``), never a ``0.00 ms`` that hides a change."""
    text = fmt_in(us, unit, sign)
    if abs(us) < _TINY_US or text.split(" ")[0].lstrip("+-").strip("0.") != "":
        return text
    dec = next(d for u, _, d in _UNITS if u == unit)
    return f"{'-' if us < 0 else '+' if sign else ''}<{10 ** -dec:.{dec}f} {unit}"


def _delta_text(us: float) -> str:
    """A signed delta in its own readable unit (``-0.7 µs``, ``+1.23 ms``), ``+<0.1 µs`` for a sliver."""
    if _TINY_US <= abs(us) < 0.05:
        return f"{'-' if us < 0 else '+'}<0.1 µs"
    return signed(us)


def _noise_word(r: DiffResult, category: str | None = None) -> str:
    """``within``/``beyond``/``unknown`` for the total (or one category); blank when there is no noise estimate."""
    if not r.noise:
        return ""
    within = r.noise.within_noise if category is None else r.noise.categories[category].within_noise
    return "unknown" if within is None else "within" if within else "beyond"


def _category_rows(r: DiffResult) -> list[_CategoryRow]:
    """One row per category, the total, and the profiled span when either side has device blocks."""
    rows: list[_CategoryRow] = []
    for c in CATEGORIES:
        d = r.categories[c]
        rows.append((HEADS[c], d.before_us, d.after_us, share_text(d.share_of_delta),
                     ratio_text(d.before_us, d.after_us), _noise_word(r, c)))
    bf, af = r.before_figures, r.after_figures
    rows.append(("total", bf.total_us, af.total_us,
                 "100.0%" if any(d.share_of_delta is not None for d in r.categories.values()) else "n/a",
                 ratio_text(bf.total_us, af.total_us), _noise_word(r)))
    if bf.launch_bound is not None or af.launch_bound is not None:
        rows.append(("profiled span", bf.span_us, af.span_us, "", ratio_text(bf.span_us, af.span_us), ""))
    return rows


def _category_lines(r: DiffResult, w: int) -> list[str]:
    """The category table in one time unit (the largest figure's), the noise column only with a noise estimate."""
    rows = _category_rows(r)
    u = time_unit([x[1] for x in rows] + [x[2] for x in rows])  # one unit for the table: a row reads in one unit
    cols = [Col(head="category", cells=[x[0] for x in rows], right=False, names=True),
            *_before_after_cols([(x[1], x[2]) for x in rows], u),
            Col(head="share of Δ", cells=[x[3] for x in rows], drop=2),
            Col(head="ratio", cells=[x[4] for x in rows], drop=1)]
    if r.noise:
        cols.append(Col(head="noise", cells=[x[5] for x in rows], right=False, drop=3))
    return fit_table(cols, w)


def _before_after_cols(figures: list[tuple[float, float]], u: str) -> list[Col]:
    """Before, after and their signed Δ, all in the table's one unit ``u``."""
    return [Col(head="before", cells=[_dcell(b, u) for b, _ in figures]),
            Col(head="after", cells=[_dcell(a, u) for _, a in figures]),
            Col(head="Δ", cells=[_dcell(a - b, u, sign=True) for b, a in figures])]


def _role_lines(r: DiffResult, w: int) -> list[str]:
    """Matmul by role, before → after; only when both sides have roles and some role has time."""
    rb, ra = r.before_figures.matmul_roles, r.after_figures.matmul_roles
    if rb is None or ra is None or not (any(rb.values()) or any(ra.values())):
        return []
    return wrap("matmul by role: " + " · ".join(
        f"{k} {fmt_time(rb[k])} → {fmt_time(ra[k])}" for k in rb if rb[k] or ra[k]), w)


def _pair_lines(r: DiffResult, w: int) -> list[str]:
    """The block count line and the paired-blocks table with each group's largest category change."""
    lines = ["", *wrap(blocks_line(r), w)]
    if not r.pairs:
        return lines
    prs = with_layers(pair_rows(r), _indented(pair_layer_rows(r)))  # each kind, then its layers' row (issue 38)
    u = time_unit([g.before_us for g in prs] + [g.after_us for g in prs])  # one unit for the table, as above
    cols = [Col(head="paired blocks, all steps", cells=[g.label for g in prs], right=False, names=True),
            Col(head="phase", cells=[g.phase for g in prs], right=False),
            Col(head="n", cells=[str(g.n) for g in prs], drop=2),
            *_before_after_cols([(g.before_us, g.after_us) for g in prs], u),
            Col(head="largest change", right=False, drop=1, cells=[_largest_change(g.deltas, u) for g in prs])]
    return lines + fit_table(_drop_forward_phase(cols), w)


def _largest_change(deltas: dict[str, float], u: str) -> str:
    """A paired group's largest category change (``softmax -1.20 ms``), or "—" when none reaches 0.05 µs."""
    c = max(CATEGORIES, key=lambda k: abs(deltas[k]))
    return f"{c} {_dcell(deltas[c], u, sign=True)}" if abs(deltas[c]) >= 0.05 else "—"


def _unmatched_lines(r: DiffResult, w: int) -> list[str]:
    """Blocks that found no partner, per side (nothing for a side with none)."""
    lines: list[str] = []
    for side, blocks in (("before", r.unmatched_before), ("after", r.unmatched_after)):
        if blocks:
            lines.append(f"blocks only {side} (unpaired), all steps:")
            ev = [(us, f"{n}×", "", kind + ("" if phase == Phase.FORWARD else f" ({phase})"))
                  for kind, phase, n, us in unmatched_rows(blocks)]
            tu = time_unit(us for us, _, _, _ in ev)
            lines += _event_lines(ev, w, times=[_dcell(us, tu) for us, _, _, _ in ev])
    return lines


def _kernel_unit(r: DiffResult) -> str:
    """What the kernel lists count: device events, host ops, or both."""
    return {"kernel": "device events", "op": "host ops (self time)"}.get(r.kernel_unit, "kernels/ops")


def _one_side_lines(r: DiffResult, side: str, w: int) -> list[str]:
    """Kernels only on ``side`` (gone before, new after), signed, the first few then one "more" row."""
    ks, sign, word = (r.only_before, -1, "gone") if side == "before" else (r.only_after, 1, "new")
    unit = _kernel_unit(r)
    if not ks:
        return [f"{unit} only {side}: none"]
    ev: list[tuple[float, str, str, str]] = [(sign * k.total_us, f"{k.count}×", str(k.category), k.name)
                                             for k in ks[:_KERNELS_SHOWN]]
    if len(ks) > _KERNELS_SHOWN:
        rest = ks[_KERNELS_SHOWN:]
        ev.append((sign * sum(k.total_us for k in rest), f"{sum(k.count for k in rest)}×", "",
                   f"{len(rest)} more (see --format json)"))
    tu = time_unit(us for us, _, _, _ in ev)
    times = [_dcell(us, tu, sign=True) for us, _, _, _ in ev]
    return [f"{unit} only {side} ({word}), all steps:", *_event_lines(ev, w, times=times)]


def _gone_new_lines(r: DiffResult, w: int) -> list[str]:
    """Kernels only before, then only after, each after a blank line (said even when there are none)."""
    return ["", *_one_side_lines(r, "before", w), "", *_one_side_lines(r, "after", w)]


def _changed_kernel_lines(r: DiffResult, w: int) -> list[str]:
    """Kernels on both sides that moved beyond noise, with their counts before → after."""
    if not r.kernels_changed:
        return []
    how = "changed beyond noise" if r.noise is not None and r.noise.known else "changed (noise unknown)" \
        if r.noise is not None else "changed"
    lines = ["", *wrap(f"{_kernel_unit(r)} on both sides that {how}, all steps:", w),
             *wrap(f"  ({r.kernels_changed_note})", w)]
    ev: list[tuple[float, str, str, str]] = [
        (kc.delta_us, f"{kc.before.count}× → {kc.after.count}×", str(kc.category), kc.name)
        for kc in r.kernels_changed[:_KERNELS_SHOWN]]
    if len(r.kernels_changed) > _KERNELS_SHOWN:
        more = r.kernels_changed[_KERNELS_SHOWN:]
        ev.append((sum(kc.delta_us for kc in more), "", "", f"{len(more)} more (see --format json)"))
    # each delta in its own unit: one small change beside a large one must not read 0.00 ms
    return lines + _event_lines(ev, w, times=[_delta_text(us) for us, _, _, _ in ev])


def _rank_pair_lines(r: DiffResult, w: int) -> list[str]:
    """Rank N before vs after, then each side's spread line (folders of ranks only)."""
    if not r.ranks:
        return []
    rows = [["rank", "before", "after", "Δ", "ratio"]]
    rows += [[str(p.rank), *rank_pair_cells(p)] for p in r.ranks]
    return ["", *_table(rows, right={0, 1, 2, 3}, width=w, names=None),
            *_wrap_all([f"before {spread_line(r.before.ranks)}" if r.before.ranks else "",
                        f"after  {spread_line(r.after.ranks)}" if r.after.ranks else ""], w)]


def _run_pair_lines(r: DiffResult, w: int) -> list[str]:
    """A row per run found on both sides (two folders of runs), each on its own headline, then the runs found on
    one side only; a blank line closes it."""
    if not r.run_pairs:
        return []
    rows = [["run", "basis", "before", "after", "change", "verdict"]]
    rows += [[printable(p.run), *run_pair_cells(p)] for p in r.run_pairs]
    notes = [n for n in (run_pair_gate_note(r), runs_only_line(r)) if n]
    return ["runs paired by name (each run's own headline):",
            *_table(rows, right={2, 3, 4}, width=w, names=0), *_wrap_all(notes, w), ""]


def _conclusion_lines(r: DiffResult, w: int) -> list[str]:
    """The allocation line and the conclusions, each conclusion on its own line so it reads (and greps) whole."""
    a = alloc_line(r, conclusions=False)
    if a:
        return ["", *wrap(a + (":" if r.conclusions else ""), w), *_wrap_all([f"  {c}" for c in r.conclusions], w)]
    if r.conclusions:
        return ["", *_wrap_all(list(r.conclusions), w)]
    return []


# The diff report after its header, in order; every section has the same signature.
_DIFF_SECTIONS: tuple[Callable[[DiffResult, int], list[str]], ...] = (
    _run_pair_lines,
    _category_lines, _role_lines, _pair_lines, _unmatched_lines, _gone_new_lines, _changed_kernel_lines,
    _rank_pair_lines, _conclusion_lines,
)


def idle_cause_line(causes: dict[str, float] | None, idle_us: float) -> str | None:
    """``idle by cause: launch 20% · sync 5% · queued 60% · other 15%`` (shares of the idle time): launch, sync
    and other always, the finer causes (vocab.IdleCause) where they took any time; None without idle time."""
    if not causes or idle_us <= 0:
        return None
    shown = [c for c in IDLE_CAUSES if c in _ALWAYS_CAUSES or causes.get(c, 0) > 0]
    return "idle by cause: " + " · ".join(f"{c.replace('_', ' ')} {pct(causes[c], idle_us):.0f}%" for c in shown)


_ALWAYS_CAUSES = frozenset({IdleCause.LAUNCH, IdleCause.SYNC, IdleCause.OTHER})


def rest_lines(result: Attribution, w: int) -> list[str]:
    """The rest of the step outside attention (renderers.base.rest_lines): each trace's median step by category
    and by top-level module, and for a launch-bound step its host side; one trace alone, a few traces each named,
    many traces one line naming --format json (base.rest_shown states the rule)."""
    lines = base_rest_lines(result)
    return ["", *_wrap_all(lines, w)] if lines else []


def blockless_lines(result: Attribution, w: int) -> list[str]:
    """A trace with no attention blocks (issue 42): for the step the lines above show (each trace's median step
    outside attention, base.rest_shown's rule), why its device idled and its costliest device events."""
    shown, _ = rest_shown(result)
    named = len(result.traces) > 1
    lines: list[str] = []
    for tr in shown:
        r, label = tr.rest, f" ({tr.label})" if named else ""
        idle = sum(r.idle_by_cause.values()) if r.idle_by_cause else 0.0
        cause = idle_cause_line(r.idle_by_cause, idle) if r.idle_by_cause else None
        if cause:
            lines += wrap(f"step {r.step}{label}: {fmt_time(idle)} idle; {cause}", w)
        if r.top_kernels:
            lines += ["", f"top device events, step {r.step}{label}:"]
            lines += _event_lines([(us, f"{n}×", cat, name) for name, cat, n, us in r.top_kernels[:_TOP_SHOWN]], w)
    return ["", *lines] if lines else []


def rest_diff_lines(r: DiffResult, w: int) -> list[str]:
    """Outside attention, median step against median step (renderers.base.rest_change_lines)."""
    lines = rest_change_lines(r)
    return ["", *_wrap_all(lines, w)] if lines else []


# The rest of the step joins the diff sections, before the conclusions (issue 37).
_DIFF_SECTIONS = (*_DIFF_SECTIONS[:-1], rest_diff_lines, _DIFF_SECTIONS[-1])  # (rest of the step: issue 37)


def _stage_pair_lines(r: DiffResult, w: int) -> list[str]:
    """Serving traces (issue 44): stage to stage, then the stages one side ran and the other did not."""
    if not r.stages.any:
        return []
    rows = [list(STAGE_DIFF_HEAD), *stage_diff_cells(r.stages)]
    table = _table(rows, set(range(1, len(STAGE_DIFF_HEAD))), w, names=None) if r.stages.pairs else []
    return ["", *wrap(stage_diff_title(), w), *table, *_wrap_all(stage_only_lines(r.stages), w)]


_DIFF_SECTIONS = (*_DIFF_SECTIONS[:-1], _stage_pair_lines, _DIFF_SECTIONS[-1])  # (stages: issue 44)
