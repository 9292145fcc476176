"""GitHub-flavoured markdown tables, for PR comments and notes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..results.attribution import CATEGORIES, Attribution
from ..results.hints import NO_STEPS_BASIS, step_unit
from ..results.sweep import run_rows
from ..results.rows import layer_rows, pair_layer_rows, with_layers  # issue 38: a group's attention layer row
from .base import (
    latency_cell, runs_header_lines, speedup_cell, sweep_notes,
    Renderer, alloc_line, blocks_line, group_rows, header_lines, headline, largest_change, noise_line, pair_rows,
    pct, printable, rank_from_line, rank_pair_cells, rank_view_of, ratio_text, share_text, spread_line, step_line,
    time_base_label, unmatched_rows,
)
from .base import run_pair_cells, run_pair_gate_note, runs_only_line
from .base import lead_line, per_step, per_step_line, totals_label  # issue 37: one time base
from .base import rest_change_lines, rest_lines  # issue 37: the rest of the step
from .names import short_name
from .optables import NOT_COMPUTED, basis_of, kernel_rows, rate_cells, shapes_text  # issue 42: --by op/kernel
from .stagetable import (  # issue 44: serving stages
    NO_STAGES, STAGE_DIFF_HEAD, stage_diff_cells, stage_diff_title, stage_only_lines, stage_table_lines,
)

if TYPE_CHECKING:
    from ..results.diff import DiffResult
    from ..results.hints import Hint, HintOverlap

_KERNELS_SHOWN = 20


# Characters that change what markdown means: a backslash (so that no escape below can be undone), the cell
# separator, a code span, a link's brackets, raw HTML and entities. Each gets a backslash or an entity. (Emphasis
# marks stay: they change no structure, and the layer grouping's labels are written with a * wildcard.)
_MD_ESCAPES = str.maketrans({"\\": "\\\\", "|": "\\|", "`": "\\`", "[": "\\[", "]": "\\]",
                             "<": "&lt;", ">": "&gt;", "&": "&amp;"})


def _md(s: str) -> str:
    """Text from a trace safe anywhere in a markdown line or table cell: markdown's own characters escaped, and
    every unprintable character (a newline would end the table or start a fake heading) as its escape."""
    return printable(s).translate(_MD_ESCAPES)


def _rank_lines(result: Attribution) -> list[str]:
    """``--by rank``: one row per rank and the spread."""
    view = rank_view_of(result)
    cols = ["rank", "trace", "n", "total µs", "span µs", "idle µs"] + [f"{c} µs (%)" for c in CATEGORIES]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(["---:", "---"] + ["---:"] * (len(cols) - 2)) + "|"]
    for r in view.rows:
        cells = [str(r.rank), _md(r.source), str(r.blocks), f"{r.total_us:,.1f}", f"{r.span_us:,.1f}",
                 f"{r.idle_us:,.1f}"]
        cells += [f"{r.categories[c]:,.1f} ({pct(r.categories[c], r.total_us):.1f}%)" for c in CATEGORIES]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + ["", f"- {spread_line(view)}", f"- {rank_from_line(view)}"]


def _run_lines(result: Attribution) -> list[str]:
    """``--by run`` on a folder of runs: the run table (measured latency and speedup, profiled busy, span, idle,
    category shares) and its footnotes."""
    rows = run_rows(result)
    heads = [("latency speedup (measured)", "latency_speedup"), ("step speedup (profiled)", "step_speedup"),
             ("attention speedup (profiled)", "attention_speedup")]
    cols = ["run", "n", "latency (measured)", *(h for h, _ in heads), "busy µs", "span µs", "idle"]
    cols += [f"{c} %" for c in CATEGORIES]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|"]
    for r in rows:
        r.check()
        idle = "—" if r.idle_pct is None else f"{r.idle_pct:.0f}%" + (" LB" if r.launch_bound else "")
        cells = [_md(r.name), str(r.blocks), latency_cell(r), *(speedup_cell(r, w) for _, w in heads),
                 f"{r.busy_us:,.1f}", f"{r.span_us:,.1f}", idle]
        cells += [f"{pct(r.categories[c], r.busy_us):.1f}" for c in CATEGORIES]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""] + [f"- {_md(n)}" for n in sweep_notes(rows)]


def _run_hint_lines(result: Attribution) -> list[str]:
    """Hints per run: each rule with the runs it fired on and their savings."""
    lines: list[str] = []
    for run in result.runs:
        for h in run.attribution.hints:
            saving = "" if h.saving_pct is None else f" (saving {h.saving_pct:.1f}%)"
            lines.append(f"- {_md(run.name)}: **{h.rule}**{saving}: {_md(h.message)}")
    return ["", "Hints (per run):", ""] + lines if lines else []


def _hint_lines(hints: list[Hint]) -> list[str]:
    """Each hint with its saving and the kernels it counts; where savings count the same kernels, the hints are
    marked and what they save together (the union of their kernel time) follows."""
    lines = ["", "Hints:", ""]
    together: list[HintOverlap] = []
    for h in hints:
        saving = _saving_text(h)
        if h.overlap is not None:
            saving += f" Overlaps {', '.join(r for r in h.overlap.rules if r != h.rule)} (see below)."
            if all(h.overlap is not t for t in together):
                together.append(h.overlap)
        lines.append(f"- **{h.rule}**: {_md(h.message)}.{_md(saving)}")
    return lines + [_together_text(ov) for ov in together]


def _per_step(h: Hint) -> str:
    """The saving per step (the headline) with its basis and bound; the latency caveat on launch-bound blocks."""
    of = "span" if h.rule == "launch-bound" else "busy time"
    unit, whose = step_unit(h.per_step_basis), ("the trace's" if h.per_step_basis == NO_STEPS_BASIS else "a step's")
    text = (f"{h.saving_per_step_us or 0.0:,.1f} µs{unit} ({h.per_step_basis}; {whose} attention {of} is "
            f"{h.step_attention_us or 0.0:,.1f} µs)")
    return text + (", busy time only: will not reach latency (launch-bound)" if h.reaches_latency is False else "")


def _over(h: Hint) -> str:
    """What the total covers: "over N steps", or "in all" where no step was recorded (the total is the trace's)."""
    return "in all" if h.per_step_basis == NO_STEPS_BASIS else f"over {h.steps} step{'s' if h.steps != 1 else ''}"


def _saving_text(h: Hint) -> str:
    """What a hint saves (when estimated), on what basis, and the first kernels it counts."""
    saving = ("" if h.saving_us is None
              else f" Saving: {_per_step(h)}; {h.saving_us:,.1f} µs {_over(h)} "
                   f"({h.saving_pct:.1f}%), {h.saving_basis}.")
    if h.saving_kernels:
        names = ", ".join(short_name(n, 60) for n in h.saving_kernels[:3])
        saving += f" Counts: {names}{' …' if len(h.saving_kernels) > 3 else ''}."
    return saving


def _together_text(ov: HintOverlap) -> str:
    """What overlapping hints save together: the union of their kernel time, not the sum."""
    pct_text = "" if ov.union_pct is None else f" ({ov.union_pct:.1f}%)"
    shared = ", ".join(short_name(n, 60) for n in ov.shared_kernels[:3])
    per = "" if ov.union_per_step_us is None else f"{ov.union_per_step_us:,.1f} µs per step, "
    return _md(f"- Together, {' + '.join(ov.rules)} save at most {per}{ov.union_us:,.1f} µs in all{pct_text}, not "
               f"the sum {ov.sum_us:,.1f} µs: these hints overlap ({ov.double_counted_us:,.1f} µs "
               f"counted twice, in {shared}).")


def _op_lines(result: Attribution) -> list[str]:
    """``--by op``: each counted (op, shapes, dtype) on its own roofline, by time; every row (a PR comment is read
    whole)."""
    if result.ops is None:
        return [f"- {_md(NOT_COMPUTED)}"]
    if result.time_base == "host":  # (the rows time device kernels: a CPU-only trace has none)
        return ["- ops whose FLOPs are counted in blocks: none timed (a CPU-only trace has no device kernels)"]
    basis = basis_of(result)
    lines = [f"Ops whose FLOPs are counted in blocks, {_md(basis.label)}:", ""]
    if not result.ops:
        return lines + ["- no op in blocks has recorded shapes and a FLOP formula (record_shapes=True)"]
    cols = ["op", "shapes", "dtype", "calls", "time µs", "TFLOP/s", "GB/s", "of roof", "bound"]
    lines += ["| " + " | ".join(cols) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * 5 + ["---"]) + "|"]
    for r in result.ops:
        cells = [_md(r.op), _md(shapes_text(r)), _md(r.dtype), str(r.calls), f"{basis.per_step(r.time_us):,.1f}",
                 *rate_cells(r)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + ["", "- time: the kernels' share of the blocks' busy time; of roof: time at the device's peak / "
                        "measured time; bound: the larger of compute and memory time at peak"]


def _kernel_lines(result: Attribution) -> list[str]:
    """``--by kernel``: every kernel the blocks own, by time: calls, time per step and total."""
    basis = basis_of(result)
    steps = basis.steps > 0
    cols = ["kernel", "category", "calls", *(["per step µs"] if steps else []), "total µs"]
    what = "Kernels" if result.time_base != "host" else "Host ops (self time)"
    lines = [f"{what} in blocks, {_md(basis.label)}{' and total' if steps else ''}:", "",
             "| " + " | ".join(cols) + " |", "|" + "|".join(["---", "---"] + ["---:"] * (len(cols) - 2)) + "|"]
    for k in kernel_rows(result):
        cells = [_md(k.kernel), k.category, str(k.calls), *([f"{basis.per_step(k.total_us):,.1f}"] if steps else []),
                 f"{k.total_us:,.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


_TABLES: dict[str, Callable[[Attribution], list[str]]] = {"op": _op_lines, "kernel": _kernel_lines}
_TABLES["stage"] = lambda result: stage_table_lines(result)[1:] or [f"- {NO_STAGES}"]  # issue 44: --by stage


class MarkdownRenderer(Renderer):
    name = "markdown"
    extension = ".md"

    def render_attribution(self, result: Attribution) -> str:
        t = result.totals
        share = f"{100 * t.attention_share:.1f}%" if t.attention_share is not None else "n/a"
        what = _md(self.title or result.source)  # the path as passed on the command line, else the trace's name
        totals = f"{t.blocks} attention blocks, {t.total_us:,.1f} µs ({share} of {time_base_label(result.time_base)})"
        ps = per_step(result)  # issue 37: the median step leads, the totals over all steps come second, labelled
        if ps.span_us is None:
            lines = [f"**{what}** — {_md(ps.label)}: {totals}", ""]
        else:
            lines = [f"**{what}** — {per_step_line(ps)}", "", f"- {totals_label(ps)}: {totals}"]
        runs = self.by == "run" and len(result.runs) > 1
        lines += [f"- {_md(h)}" for h in (runs_header_lines(result) if runs else header_lines(result))]
        lines.append("")
        if runs:
            lines += _run_lines(result) + _rest_md(rest_lines(result)) + _run_hint_lines(result)
        else:
            lines += self._table_lines(result)
            lines += _rest_md(rest_lines(result))
            lines += stage_table_lines(result) if self.by != "stage" else []
            lines += _hint_lines(result.hints) if result.hints else []
        return "\n".join(lines) + "\n"

    def _table_lines(self, result: Attribution) -> list[str]:
        """The table ``--by`` names: ranks, ops or kernels (issue 42), else the grouped blocks."""
        if self.by in _TABLES:
            return _TABLES[self.by](result)
        return _rank_lines(result) if self.by == "rank" else self._group_lines(result)

    def _group_lines(self, result: Attribution) -> list[str]:
        """The grouped table and matmul roles by group (every grouping but rank)."""
        lines: list[str] = []
        cols = ["block", "phase", "n", "total µs"] + [f"{c} µs (%)" for c in CATEGORIES]
        lines.append("| " + " | ".join(cols) + " |")
        lines.append("|" + "|".join(["---"] + ["---"] + ["---:"] * (len(cols) - 2)) + "|")
        groups = with_layers(group_rows(result, self.by), layer_rows(result, self.by))  # then its layer's (issue 38)
        for g in groups:
            cells = [_md(g.label), g.phase, str(g.blocks), f"{g.total_us:,.1f}"]
            cells += [f"{g.categories[c]:,.1f} ({pct(g.categories[c], g.total_us):.1f}%)" for c in CATEGORIES]
            lines.append("| " + " | ".join(cells) + " |")
        by_role = [(g, g.matmul_roles) for g in groups if g.matmul_roles is not None and g.categories["matmul"] > 0]
        if by_role:
            lines.append("")
            lines += [f"- matmul by role, {_md(g.label)}: " + " · ".join(
                f"{k} {us:,.1f} µs ({pct(us, g.categories['matmul']):.1f}%)" for k, us in roles.items())
                for g, roles in by_role]
        return lines

    def render_diff(self, r: DiffResult) -> str:
        """The headline and how it was computed, then each section of the report (see :data:`_DIFF_SECTIONS`)."""
        lines = _diff_header(r)
        for section in _DIFF_SECTIONS:
            lines += section(r)
        return "\n".join(lines) + "\n"


def _diff_header(r: DiffResult) -> list[str]:
    """The headline, both sides' headers, warnings, the basis, noise, blocks and memory."""
    lines = [f"**{_md(r.labels[0])} → {_md(r.labels[1])}** — {lead_line(r)}", "", f"- {headline(r)}"]
    lines += [f"- before: {_md(h)}" for h in header_lines(r.before)]
    lines += [f"- after: {_md(h)}" for h in header_lines(r.after)]
    lines += [f"- **warning:** {_md(w)}" for w in r.warnings]
    step = step_line(r)
    lines += [f"- {step}"] if step else []
    lines += [f"- figures: {r.basis_note}", f"- {noise_line(r)}", f"- {blocks_line(r)}"]
    a = alloc_line(r)
    return lines + ([f"- {a}"] if a else [f"- {c}" for c in r.conclusions])


def _diff_category_lines(r: DiffResult) -> list[str]:
    """The category table and its total."""
    lines = ["", "| category | before µs | after µs | Δ µs | share of Δ | ratio |", "|---|---:|---:|---:|---:|---:|"]
    for c, d in r.categories.items():
        lines.append(f"| {c} | {d.before_us:,.1f} | {d.after_us:,.1f} | {d.delta_us:+,.1f} | "
                     f"{share_text(d.share_of_delta)} | {ratio_text(d.before_us, d.after_us)} |")
    lines.append(f"| **total** | {r.before_figures.total_us:,.1f} | {r.after_figures.total_us:,.1f} | "
                 f"{r.delta_us:+,.1f} | | {ratio_text(r.before_figures.total_us, r.after_figures.total_us)} |")
    return lines


def _diff_pair_lines(r: DiffResult) -> list[str]:
    """The paired blocks, grouped, with each group's largest category change."""
    if not r.pairs:
        return []
    lines = ["", "| paired blocks (all steps) | phase | n | before µs | after µs | Δ µs | largest change |",
             "|---|---|---:|---:|---:|---:|---|"]
    for g in with_layers(pair_rows(r), pair_layer_rows(r)):
        lines.append(f"| {_md(g.label)} | {g.phase} | {g.n} | {g.before_us:,.1f} | {g.after_us:,.1f} | "
                     f"{g.after_us - g.before_us:+,.1f} | {largest_change(g.deltas)} |")
    return lines


def _diff_run_pair_lines(r: DiffResult) -> list[str]:
    """A row per run found on both sides (two folders of runs), then the runs found on one side only."""
    if not r.run_pairs:
        return []
    lines = ["", "Runs paired by name (each run's own headline):", "",
             "| run | basis | before | after | change | verdict |", "|---|---|---:|---:|---:|---|"]
    lines += [f"| {_md(p.run)} | " + " | ".join(run_pair_cells(p)) + " |" for p in r.run_pairs]
    return lines + [f"- {_md(n)}" for n in (run_pair_gate_note(r), runs_only_line(r)) if n]


def _diff_rank_lines(r: DiffResult) -> list[str]:
    """Rank N before and after, then each side's spread over its ranks."""
    if not r.ranks:
        return []
    lines = ["", "| rank | before | after | Δ | ratio |", "|---:|---:|---:|---:|---:|"]
    lines += [f"| {p.rank} | " + " | ".join(rank_pair_cells(p)) + " |" for p in r.ranks]
    return lines + [f"- {side} {spread_line(v)}" for side, v in (("before", r.before.ranks), ("after", r.after.ranks))
                    if v is not None]


def _diff_unmatched_lines(r: DiffResult) -> list[str]:
    """Blocks that found no partner, per side."""
    return [f"- block only {tag}: {_md(kind)} ({phase}) ×{n}, {us:,.1f} µs"
            for tag, blocks in (("before", r.unmatched_before), ("after", r.unmatched_after))
            for kind, phase, n, us in unmatched_rows(blocks)]


def _diff_gone_new_lines(r: DiffResult) -> list[str]:
    """Kernels only before (gone), then only after (new), signed; the first few, then a count of the rest."""
    lines: list[str] = []
    for tag, ks, sign in (("before", r.only_before, -1), ("after", r.only_after, 1)):
        if ks:
            lines += ["", f"{'Gone' if tag == 'before' else 'New'} ({r.kernel_unit}s only {tag}, all steps):", ""]
            lines += [f"- {_md(k.name[:120])} ×{k.count}, {sign * k.total_us:+,.1f} µs ({k.category})"
                      for k in ks[:_KERNELS_SHOWN]]
            lines += _more(len(ks))
    return lines


def _diff_changed_lines(r: DiffResult) -> list[str]:
    """Kernels on both sides that changed beyond noise, with the rule applied."""
    if not r.kernels_changed:
        return []
    lines = ["", f"Changed ({r.kernel_unit}s on both sides, all steps; {_md(r.kernels_changed_note)}):", ""]
    lines += [f"- {_md(k.name[:120])} ×{k.before.count} → ×{k.after.count}, {k.delta_us:+,.1f} µs ({k.category})"
              for k in r.kernels_changed[:_KERNELS_SHOWN]]
    return lines + _more(len(r.kernels_changed))


def _more(n: int) -> list[str]:
    """The "… N more" line of a list cut at _KERNELS_SHOWN entries (none when it was not cut)."""
    return [f"- … {n - _KERNELS_SHOWN} more"] if n > _KERNELS_SHOWN else []


# The sections of a diff report, in reading order.
_DIFF_SECTIONS: tuple[Callable[[DiffResult], list[str]], ...] = (
    _diff_run_pair_lines,
    _diff_category_lines, _diff_pair_lines, _diff_rank_lines, _diff_unmatched_lines, _diff_gone_new_lines,
    _diff_changed_lines,
)


def _diff_stage_lines(r: DiffResult) -> list[str]:
    """Serving traces (issue 44): stage to stage, then the stages one side ran and the other did not."""
    if not r.stages.any:
        return []
    lines = ["", stage_diff_title(), ""]
    if r.stages.pairs:
        lines += ["| " + " | ".join(STAGE_DIFF_HEAD) + " |", "|" + "|".join(["---"] + ["---:"] * 8) + "|"]
        lines += ["| " + " | ".join(cells) + " |" for cells in stage_diff_cells(r.stages)]
    return lines + [f"- {x}" for x in stage_only_lines(r.stages)]


_DIFF_SECTIONS = (*_DIFF_SECTIONS, _diff_stage_lines)


def _rest_md(lines: list[str]) -> list[str]:
    """The rest of the step's lines (renderers.base: the terminal's wording) as a list, each sub-line (indented
    two spaces) a nested item, after a blank line; nothing without lines."""
    out = []
    for line in lines:
        depth = (len(line) - len(line.lstrip(" "))) // 2
        out.append("  " * depth + "- " + _md(line.strip()))
    return [""] + out if out else []


def _diff_rest_lines(r: DiffResult) -> list[str]:
    """Outside attention, median step against median step (renderers.base.rest_change_lines)."""
    return _rest_md(rest_change_lines(r))


# The rest of the step closes the diff report, as in the terminal (issue 37).
_DIFF_SECTIONS = (*_DIFF_SECTIONS, _diff_rest_lines)
