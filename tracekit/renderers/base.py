"""The renderer interface, and the lines that every text format shares.

One module per format; each renders both an :class:`~tracekit.results.Attribution` and a
:class:`~tracekit.results.DiffResult`. Conclusions are computed in the results, never here; the rows
(tracekit.results.rows) and the wording of figures (tracekit.results.format) live there too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Union

from ..results.attribution import CATEGORIES, Attribution, BlockResult, GraphSummary, RankView, TraceSummary
from ..results.sweep import RunRow, sweep_key
from ..results.diff import HEADLINE_STEP_SPAN, DiffResult, RankPair, RunPair, Verdict, pair_headline
from ..results.format import (  # noqa: F401  (the renderers' shared wording, imported from here)
    basis_label, fmt_bytes, fmt_time, headline, noise_words, pct, printable, ratio_text, share_text, signed,
    step_line, time_base_label,
)
from ..results.format import lead_line, per_step_line, totals_label  # noqa: F401  (issue 37: one time base)
from ..results.steps import per_step  # noqa: F401
from ..results.rows import (  # noqa: F401
    TABLE_GROUPINGS, PairRow, Row, check_grouping, group_rows, pair_rows, rank_view_of,
)
from ..results.rest import RestChange, TraceRest, rest_change, trace_rest  # issue 37: the rest of the step
from ..vocab import Compared, GraphMode, PairedBy, Phase
from .names import short_name

Result = Union[Attribution, DiffResult]
GROUPINGS = TABLE_GROUPINGS  # the groupings of a table (--by): tracekit.results.rows

HEADS = {"matmul": "matmul", "softmax": "softmax", "fused_attention": "fused attn",
         "memory": "memory", "elementwise": "elementwise", "other": "other"}


class Renderer:
    """Turns a result into text. Subclasses set ``name`` and ``extension`` and implement both ``render_*``."""

    name = ""
    extension = ""

    def __init__(self, by: str = "kind", tool: str = "tracekit", title: str | None = None) -> None:
        check_grouping(by, GROUPINGS)
        self.by = by
        self.tool = tool
        self.title = title  # what the user passed (a path as given); formats that name it fall back to result.source

    def render(self, result: Result) -> str:
        """The whole output as one string."""
        if isinstance(result, Attribution):
            return self.render_attribution(result)
        return self.render_diff(result)

    def stream(self, result: Result) -> Iterator[str]:
        """The output in pieces, to be written as they come; formats with huge outputs override it."""
        yield self.render(result)

    def render_attribution(self, result: Attribution) -> str:
        raise NotImplementedError

    def render_diff(self, result: DiffResult) -> str:
        raise NotImplementedError


def pick_renderer(registry: dict[str, type[Renderer]], fmt: str | None, output: str | None) -> type[Renderer]:
    """An explicit --format wins; else the -o file's extension; else the registry's terminal table."""
    if fmt:
        return registry[fmt]
    if output:
        for cls in registry.values():
            if cls.extension != ".txt" and output.endswith(cls.extension):
                return cls
    return registry["table"]


# ---------------------------------------------------------------------------------------------
# Numbers


# ---------------------------------------------------------------------------------------------
# Attribution: header and grouped rows


def header_lines(result: Attribution) -> list[str]:
    """What each trace is: device, runtime, steps, time base. Never user metadata."""
    lines = []
    for t in result.traces:
        lines.append(f"{t.source}: {t.events:,} events · " + " · ".join(trace_parts(t)))
        if t.graphs is not None and t.graphs.mode != GraphMode.EAGER:
            lines.append(graph_line(t.graphs))
    return lines


def trace_parts(t: TraceSummary) -> list[str]:
    """A trace's device, runtime, PyTorch, steps and time base, the words of its header line."""
    parts = [", ".join(t.gpus) if t.gpus else ("no GPU listed" if t.time_base == "device" else "CPU only")]
    if t.runtime:
        parts.append(t.runtime)
    parts.append(f"PyTorch {t.pytorch}" if t.pytorch else "PyTorch version not recorded")
    if t.steps:
        s = t.steps
        parts.append(f"{len(s)} step{'s' if len(s) != 1 else ''} (#{s[0]}{f'–#{s[-1]}' if len(s) > 1 else ''})")
    else:
        parts.append("no ProfilerStep")
    parts.append(f"time base: {time_base_label(t.time_base)}")
    return parts


RUNS_HEADER_LINES = 4  # distinct trace descriptions shown above a run table; the rest are counted


def runs_header_lines(result: Attribution) -> list[str]:
    """A folder of runs' header: one line per distinct trace description (with its count), not one per file."""
    counts: dict[str, int] = {}
    for t in result.traces:
        d = " · ".join(trace_parts(t))
        counts[d] = counts.get(d, 0) + 1
    n = len(result.traces)
    lines = [f"{len(result.runs)} runs, {n:,} trace{'s' if n != 1 else ''}"
             + (f": {next(iter(counts))}" if len(counts) == 1 else "")]
    if len(counts) > 1:
        lines += _trace_kind_lines(counts)
    graphs = sum(1 for t in result.traces if t.graphs is not None and t.graphs.mode != GraphMode.EAGER)
    if graphs:
        lines.append(f"graphs: {graphs} of the traces capture or replay CUDA/HIP graphs (per trace: attribute a run)")
    return lines


def _trace_kind_lines(counts: dict[str, int]) -> list[str]:
    """The first RUNS_HEADER_LINES trace descriptions with their counts, then how many more kinds there are."""
    lines = [f"  {k} × {d}" for d, k in list(counts.items())[:RUNS_HEADER_LINES]]
    if len(counts) > RUNS_HEADER_LINES:
        lines.append(f"  and {len(counts) - RUNS_HEADER_LINES} more kinds of trace")
    return lines


# The run table's three speedups (issue 37), in column order: (head, what the footnote says it divides).
SPEEDUP_HEADS = (
    ("latency×", "latency_speedup", "measured latency (measured.json on both runs)"),
    ("step×", "step_speedup", "profiled: the median step's device busy time"),
    ("attn×", "attention_speedup", "profiled: the attention blocks' busy time in the median step"),
)


def speedup_cell(r: RunRow, which: str = "latency_speedup") -> str:
    """One of the run's speedups: ``0.88×`` (measured latency), ``7.24× p`` (profiled), ``2.70× p!`` (profiled,
    either run launch-bound: not what the user waits for), or —."""
    x = getattr(r, which)
    if x is None:
        return "—"
    if which == "latency_speedup":
        return f"{x:.2f}×"
    return f"{x:.2f}× p!" if getattr(r, f"{which}_launch_bound") else f"{x:.2f}× p"


def speedup_cols(rows: list[RunRow]) -> list[tuple[str, str]]:
    """(head, field) of the speedups some row has, in SPEEDUP_HEADS order."""
    return [(head, which) for head, which, _ in SPEEDUP_HEADS if any(getattr(r, which) is not None for r in rows)]


def latency_cell(r: RunRow) -> str:
    """The measured latency of one forward pass, ``2.508 ± 0.031 ms``, or — without a measured.json."""
    m = r.measured
    if m is None:
        return "—"
    half = m.half_spread_ms
    return f"{m.median_ms:.3f} ms" if half is None else f"{m.median_ms:.3f} ± {half:.3f} ms"


def sweep_notes(rows: list[RunRow]) -> list[str]:
    """The run table's footnotes: what the speedup divides and what the marks mean (only those shown)."""
    base = next((r.baseline for r in rows if r.baseline), None)
    notes = [] if base is None else [_speedup_note(rows, base)]
    return notes + [text for shown, text in _SWEEP_MARKS if any(shown(r) for r in rows)]


def _speedup_note(rows: list[RunRow], base: str) -> str:
    """What each shown speedup divides, over which baseline; and why there is no latency speedup, when there is
    none: no run measured, or no run measured beside its baseline (issue 41: the first was said of the second)."""
    shown = {which for _, which in speedup_cols(rows)}
    what = "; ".join(f"{head} {text}" for head, which, text in SPEEDUP_HEADS if which in shown)
    none = "" if "latency_speedup" in shown else "; no run has a measured latency" if all(
        r.measured is None for r in rows) else "; no run and its baseline both have a measured latency"
    return f"speedups over {sweep_key_impl(base)} at the same sequence length: {what}{none}"


# The run table's marks, in footnote order: each footnote is printed when some row carries its mark.
_SWEEP_MARKS: tuple[tuple[Callable[[RunRow], object], str], ...] = (
    (lambda r: r.step_speedup is not None or r.attention_speedup is not None,
     "p: profiled (inside the profiler, busy time per step), not the latency; measure latency outside the "
     "profiler (scripts/profile_attention.py writes measured.json)"),
    (lambda r: r.step_speedup_launch_bound or r.attention_speedup_launch_bound,
     "!: a run is launch-bound (the device idles over half the step, or of the blocks' span): that profiled "
     "speedup is not the latency's"),
    (lambda r: r.launch_bound, "LB: launch-bound run"),
)


def measured_lines(r: DiffResult) -> list[str]:
    """The latency measured outside the profiler, before → after, where both sides have a measured.json."""
    mb, ma = r.before.measured, r.after.measured
    if mb is None or ma is None:
        return []
    change = 100.0 * (ma.median_ms - mb.median_ms) / mb.median_ms
    return [f"measured latency (outside the profiler, {printable(mb.what)}): {mb.median_ms:.3f} ms → "
            f"{ma.median_ms:.3f} ms ({change:+.1f}%; {mb.median_ms / ma.median_ms:.2f}× "
            f"{'faster' if ma.median_ms <= mb.median_ms else 'as fast'})"]


def sweep_key_impl(name: str) -> str:
    key = sweep_key(name)
    return key[0] if key else name


def graph_line(g: GraphSummary) -> str:
    """``graphs: replay · 1 graph launch ran 544 kernels (9.66 ms) · mapped to captured ops: 100.0% (from
    bs_32_rank0.json.gz)``: the trace's graph mode and what its replays could be tied to."""
    parts = [f"graphs: {g.mode}"]
    if g.captures:
        parts.append(f"{g.captures:,} capture{'s' if g.captures != 1 else ''} recorded {g.captured_launches:,} "
                     f"launch{'es' if g.captured_launches != 1 else ''} ({g.captured_named:,} naming their kernel)")
    if g.graph_launches:
        parts.append(f"{g.graph_launches:,} graph launch{'es' if g.graph_launches != 1 else ''} ran "
                     f"{g.replayed_kernels:,} kernels ({fmt_time(g.replayed_us)})")
    parts += _mapped_parts(g)
    if g.eager_attention_kernels and g.graph_launches:
        parts.append(f"{g.eager_attention_kernels:,} fused attention kernels launched outside graphs")
    return " · ".join(parts)


def _mapped_parts(g: GraphSummary) -> list[str]:
    """How much of the replayed time was tied to captured ops (and from which captures), and the first kernels
    that were not; nothing when no graph was replayed."""
    share = g.mapped_share
    if share is None:
        return []
    src = f" (from {', '.join(printable(x) for x in g.capture_sources[:2])})" if g.capture_sources else ""
    parts = [f"mapped to captured ops: {100 * share:.1f}%{src}"]
    if g.unmapped:
        parts.append("unmapped: " + ", ".join(f"{short_name(printable(n), 40)} ×{k}"
                                               for n, k in list(g.unmapped.items())[:3]))
    return parts


def text_lines(lines: Iterable[str]) -> str:
    """Lines of a text output joined, each made printable (results.format.printable): the one place where every
    name a line holds, from any table cell, header or warning, loses its control characters."""
    return "".join(printable(line) + "\n" for line in lines)


def share_line(result: Attribution) -> str:
    """``4 attention blocks, 149 µs · 48.1% of device busy time (309 µs)``, without the leading label."""
    t = result.totals
    share = f"{100 * t.attention_share:.1f}%" if t.attention_share is not None else "n/a"
    base_us = sum(s.base_us for s in result.traces)
    return (f"{t.blocks} blocks, {fmt_time(t.total_us)} · {share} of {time_base_label(result.time_base)} "
            f"({fmt_time(base_us)})")


def spread_line(view: RankView) -> str:
    """``spread over 4 ranks: min 31.0 µs (rank 0) · median 77.5 µs · max 124 µs (rank 3): rank 3 is +46.5 µs
    (+60.0%) over the median``."""
    sp = view.spread
    n = len(view.rows)
    if n == 1:
        return f"one rank (rank {view.rows[0].rank}): no spread"
    over = f" ({sp.slowest_over_median_pct:+.1f}%)" if sp.slowest_over_median_pct is not None else ""
    ratio = f" · max/min {sp.max_over_min:.2f}×" if sp.max_over_min is not None else ""
    return (f"spread over {n} ranks: min {fmt_time(sp.min_us)} (rank {sp.fastest_rank}) · median "
            f"{fmt_time(sp.median_us)} · max {fmt_time(sp.max_us)} (rank {sp.slowest_rank}){ratio} · slowest: rank "
            f"{sp.slowest_rank}, {signed(sp.slowest_over_median_us)}{over} over the median")


def rank_from_line(view: RankView) -> str:
    return f"rank numbers from: {view.rank_from}" + (f" ({view.note})" if view.note else "")


def roles_line(label: str, matmul_us: float, roles: dict[str, float] | None) -> str | None:
    """``matmul by role — layer*.attention: projection 1.62 ms 100.0% · score 0 · …`` (shares of matmul).

    None when there is no matmul time or no role split to show."""
    if roles is None or matmul_us <= 0:
        return None
    parts = [f"{role} {fmt_time(us)} {pct(us, matmul_us):.1f}%" if us > 0 else f"{role} 0"
             for role, us in roles.items()]
    return f"  {label[:60]}: " + " · ".join(parts)


# ---------------------------------------------------------------------------------------------
# Diff: the lines and grouped rows that the terminal and markdown formats share


def noise_line(r: DiffResult) -> str:
    """Each side's per-step range and the verdict; with too few steps, that the noise is unknown, and why."""
    n = r.noise
    if n is None:
        return r.noise_note
    if n.within_noise is None:
        return (f"{r.noise_note} (per-step ranges: before {fmt_time(n.before.min_us)}–{fmt_time(n.before.max_us)}, "
                f"after {fmt_time(n.after.min_us)}–{fmt_time(n.after.max_us)})")
    return (f"noise: before {fmt_time(n.before.min_us)}–{fmt_time(n.before.max_us)} over {len(n.before.steps)} steps, "
            f"after {fmt_time(n.after.min_us)}–{fmt_time(n.after.max_us)} over {len(n.after.steps)} steps; "
            f"combined spread {fmt_time(n.combined_spread_us)} → the change is {noise_words(n.within_noise)}")


def blocks_line(r: DiffResult) -> str:
    by_fk = sum(1 for p in r.pairs if p.paired_by == PairedBy.FUSED_KERNEL)
    extra = f", {by_fk} of them fused-kernel blocks paired by position" if by_fk else ""
    return (f"blocks: {len(r.pairs)} paired{extra}; {len(r.unmatched_before)} only before, "
            f"{len(r.unmatched_after)} only after")


def alloc_line(r: DiffResult, conclusions: bool = True) -> str | None:
    """Bytes allocated in blocks, then (unless ``conclusions`` is False) the result's conclusions (tracekit.diff)."""
    m = r.alloc
    if m is None:
        return None
    d = m.delta_peak_bytes
    if d is not None:
        peak = (f"peak {_bytes(m.before_peak_bytes)} → {_bytes(m.after_peak_bytes)} "
                f"({'+' if d > 0 else ''}{fmt_bytes(d)})")
    elif m.before_peak_bytes is None and m.after_peak_bytes is None:
        peak = "peak unknown (no Total Allocated in the memory events)"
    else:
        peak = f"peak {_bytes(m.before_peak_bytes)} → {_bytes(m.after_peak_bytes)}"
    line = (f"memory in blocks: {peak} · allocated (sum, all steps) {fmt_bytes(m.before_bytes)} → "
            f"{fmt_bytes(m.after_bytes)} ({'+' if m.delta_bytes > 0 else ''}{fmt_bytes(m.delta_bytes)})")
    return "".join([line, *(f": {c}" for c in r.conclusions)]) if conclusions else line


def _bytes(n: int | None) -> str:
    return "unknown" if n is None else fmt_bytes(n)


def largest_change(deltas: dict[str, float]) -> str:
    c = max(CATEGORIES, key=lambda k: abs(deltas[k]))
    return f"{c} {signed(deltas[c])}" if abs(deltas[c]) >= 0.05 else "—"


def unmatched_rows(blocks: list[BlockResult]) -> list[tuple[str, Phase, int, float]]:
    """Unpaired blocks grouped by (kind, phase): (kind, phase, count, µs)."""
    out: dict[tuple[str, Phase], list] = {}
    for b in blocks:
        v = out.setdefault((b.kind, b.phase), [0, 0.0])
        v[0] += 1
        v[1] += b.total_us
    return [(k, ph, n, us) for (k, ph), (n, us) in out.items()]


def rank_pair_cells(p: RankPair) -> tuple[str, str, str, str]:
    """(before, after, Δ, ratio) of one paired rank; ``—`` on the side that lacks it."""
    b = fmt_time(p.before.total_us) if p.before is not None else "—"
    a = fmt_time(p.after.total_us) if p.after is not None else "—"
    if p.before is None or p.after is None:
        return b, a, "", "only before" if p.after is None else "only after"
    return b, a, signed(p.delta_us or 0.0), ratio_text(p.before.total_us, p.after.total_us)


GATE_MARK = "†"  # a run pair's verdict that the gate decided on another basis than the row's (run_pair_gate_note)


def run_pair_cells(p: RunPair) -> tuple[str, str, str, str, str]:
    """(basis, before, after, change, verdict) of one run pair, from its headline (:func:`pair_headline`): its whole
    step as a single diff leads (a step span reads ``× shorter``/``× longer``, never faster), else its attention."""
    h = pair_headline(p.diff)
    b, a, s = h["before_us"], h["after_us"], h["speedup"]
    change = "" if h["delta_pct"] is None else f"{h['delta_pct']:+.1f}%"
    span = h["basis"] == HEADLINE_STEP_SPAN
    if s is not None and b > 0 and (h["claims_speedup"] or span):
        up, down = ("shorter", "longer") if span else ("faster", "slower")
        change += f" ({s:.2f}× {up})" if s >= 1 else f" ({1 / s:.2f}× {down})"
    return str(h["basis"]), fmt_time(b), fmt_time(a), change, run_pair_verdict(p, GATE_MARK)


def run_pair_verdict(p: RunPair, mark: str = "") -> str:
    """The pair's verdict, and where the gate decided on another figure than the row's headline (one basis per
    figure) either ``mark`` (a table's footnote, :func:`run_pair_gate_note`) or ``on attention`` in words."""
    on = gate_elsewhere(p)
    return p.verdict if on is None else p.verdict + (mark or f" on {on.split(' (')[0]}")


def gate_elsewhere(p: RunPair) -> str | None:
    """The gate's basis when it decided this pair on another than the row's headline; None otherwise."""
    on = p.verdict_basis
    return None if on is None or on == pair_headline(p.diff)["basis"] else on


def run_pair_gate_note(r: DiffResult, mark: str = GATE_MARK) -> str | None:
    """The footnote to ``mark``: which basis the gate decided the marked pairs on; None when none is marked."""
    by: dict[str, list[str]] = {}
    for p in r.run_pairs:
        on = gate_elsewhere(p)
        if on is not None:
            by.setdefault(on, []).append(printable(p.run))
    if not by:
        return None
    where = "; ".join(f"{on} for {', '.join(runs)}" for on, runs in by.items())
    return f"{mark} the gate's verdict, decided on its own basis, not the row's: {where}"


def runs_only_line(r: DiffResult) -> str | None:
    """``runs only before: a, b · only after: c``; None when every run is paired."""
    parts = [f"only {side}: {', '.join(printable(n) for n in names)}" for side, names in
             (("before", r.runs_only_before), ("after", r.runs_only_after)) if names]
    return "runs " + " · ".join(parts) if parts else None


def verdict_line(v: Verdict) -> str:
    """The CI gate's one line for stderr: what was compared, and the decision."""
    head = f"fail-if-slower {v.threshold_pct:g}%:"
    what = _compared_label(v)
    basis = "median of repeats" if v.compared == Compared.LATENCY else basis_label(v.basis)
    if v.change_pct is None:
        if v.ok:
            return f"{head} ok: no attention time on either side"
        return f"{head} REGRESSION: {what} appeared (0 → {fmt_time(v.after_us)}, {basis})"
    fig = f"{what} {fmt_time(v.before_us)} → {fmt_time(v.after_us)} ({v.change_pct:+.1f}%, {basis})"
    noise = ("; the change is within noise" if v.within_noise else "") + (f"; {v.evidence}" if v.evidence else "")
    if v.ok:
        return f"{head} ok: {fig}{noise}"
    return f"{head} REGRESSION: {fig} is more than {v.threshold_pct:g}% slower{noise}"


def _compared_label(v: Verdict) -> str:
    """What the gate compared, and why: asked for (--gate-on), or the default rule."""
    if v.compared == Compared.LATENCY:
        src = " / ".join(printable(s) for s in v.sources if s)
        return f"measured latency{f' ({src})' if src else ''}"
    if v.compared == Compared.SPAN:
        return "profiled span" + ("" if v.chosen else " (launch-bound: busy time is not the wait)")
    return "attention time" + (" (busy, --gate-on busy)" if v.chosen else "")


# ---------------------------------------------------------------------------------------------
# The rest of the step (issue 37, item 7): the lines the terminal and markdown share, and the parts every format
# names (the HTML report draws the same parts as a table)

REST_TOP = 5  # categories, modules and host ops named per line; the rest are counted
REST_TRACES_SHOWN = 4  # traces shown one by one; past this, one line names --format json


def top_parts(parts: dict[str, float], n: int = REST_TOP) -> tuple[list[tuple[str, float]], int]:
    """The parts with time, largest first: the first ``n`` as (name, µs), and how many more have time."""
    top = sorted(((v, k) for k, v in parts.items() if v > 0), reverse=True)
    return [(k, v) for v, k in top[:n]], max(0, len(top) - n)


def changed_parts(before: dict[str, float], after: dict[str, float], n: int = REST_TOP) -> tuple[list[str], int]:
    """The parts with time on either side, largest first (by the larger side): the first ``n``, and how many more."""
    names = sorted((k for k in set(before) | set(after) if before.get(k, 0) > 0 or after.get(k, 0) > 0),
                   key=lambda k: (-max(before.get(k, 0), after.get(k, 0)), k))
    return names[:n], max(0, len(names) - n)


def _more(n: int) -> str:
    return f" (+{n} more)" if n else ""


def top_us(parts: dict[str, float]) -> str:
    """``elementwise 7.32 ms · matmul 5.83 ms · … (+2 more)``: the largest parts with time first."""
    top, more = top_parts(parts)
    return " · ".join(f"{short_name(k, 40)} {fmt_time(v)}" for k, v in top) + _more(more)


def pair_us(before: dict[str, float], after: dict[str, float]) -> str:
    """``matmul 20.0 µs → 5.0 µs · …``: the parts with time on either side, largest first."""
    names, more = changed_parts(before, after)
    return " · ".join(f"{short_name(k, 40)} {fmt_time(before.get(k, 0))} → {fmt_time(after.get(k, 0))}"
                      for k in names) + _more(more) or "no device work"


def rest_traces(result: Attribution) -> list[TraceRest]:
    """Each trace's median step outside attention, named by its run in a folder of runs (``run/file`` where a
    run holds several traces), else by its file; traces without steps are left out."""
    if result.runs:
        named = [(r.name if len(r.attribution.traces) == 1 else f"{r.name}/{t.source}", t)
                 for r in result.runs for t in r.attribution.traces]
    else:
        named = [(t.source, t) for t in result.traces]
    return [x for label, t in named if (x := trace_rest(t, label)) is not None]


def rest_shown(result: Attribution) -> tuple[list[TraceRest], str | None]:
    """The traces whose rest of the step is shown, and the line said instead when there are too many.

    The rule for a folder of several traces (ranks of one job, or runs): each trace is shown on its own, named,
    while at most REST_TRACES_SHOWN of them have steps; past that, one line says where each trace's figures are
    (``--format json``, its ``step_rest``). The traces are never pooled into one median step: they are different
    processes (ranks that ran at the same time, or different programs), so a median over them is no step at all."""
    shown = rest_traces(result)
    if len(shown) <= REST_TRACES_SHOWN:
        return shown, None
    return [], (f"outside attention: {len(shown)} traces with steps, each with its own median step, too many to "
                f"list here: see --format json (each trace's step_rest)")


def rest_lines(result: Attribution) -> list[str]:
    """The rest of the step as lines (sub-lines indented two spaces), by :func:`rest_shown`'s rule; a trace's
    head names it when the result holds several traces."""
    shown, note = rest_shown(result)
    named = len(result.traces) > 1
    return [note] if note else [x for tr in shown for x in trace_rest_lines(tr, named)]


def trace_rest_lines(tr: TraceRest, named: bool = False) -> list[str]:
    """One trace's median step outside attention: its busy time by category and by top-level module, and for a
    launch-bound step the host side (kernels launched, top-level host op time)."""
    r = tr.rest
    lines = [f"outside attention{f' ({tr.label})' if named else ''}, {rest_step_words(tr)}: "
             + (top_us(r.categories) or "no device work")]
    if r.modules:
        lines.append("  by top-level module: " + top_us(r.modules))
    host = rest_host_words(tr)
    if host:
        lines.append(f"  {host} ({top_us(r.host_ops)})")
    return lines


def rest_step_words(tr: TraceRest) -> str:
    """``step 2 (median of 2 by busy outside attention)``: which step the figures are."""
    return f"step {tr.rest.step} (median of {tr.steps} by busy outside attention)"


def rest_host_words(tr: TraceRest) -> str | None:
    """``launch-bound step (device idle 87% of its span): 86 kernels launched, top-level host ops 5.75 ms``; None
    unless the step is launch-bound (the host side is what such a step waits on)."""
    if not tr.launch_bound or tr.span_us is None:
        return None
    return (f"launch-bound step (device idle {pct(tr.idle_us or 0.0, tr.span_us):.0f}% of its span): "
            f"{tr.rest.kernels} kernels launched, top-level host ops {fmt_time(tr.rest.host_ops_us)}")


def rest_change_lines(r: DiffResult) -> list[str]:
    """Outside attention, median step against median step (one trace a side): busy by category and by module, and
    where either side is launch-bound the host side (kernels launched, top-level host op time, the ops that
    changed most). Where a side holds several traces, one line says where each trace's figures are."""
    c = rest_change(r.before.traces, r.after.traces)
    if c is None:
        several = any(len(s.traces) > 1 and any(t.step_rest for t in s.traces) for s in (r.before, r.after))
        return ["outside attention: not compared, a side holds several traces (ranks or runs); see --format json "
                "(traces.before and traces.after, each trace's step_rest)"] if several else []
    return _rest_change_lines(c)


def _rest_change_lines(c: RestChange) -> list[str]:
    b, a = c.before, c.after
    lines = [f"outside attention, {rest_change_words(c)}", "  by category: " + pair_us(b.categories, a.categories)]
    if b.modules or a.modules:
        lines.append("  by top-level module: " + pair_us(b.modules, a.modules))
    host = rest_change_host_words(c)
    if host:
        lines.append(f"  {host}")
        if c.host_ops_changed:
            lines.append("  host ops that changed most: " + " · ".join(
                f"{short_name(n, 40)} {fmt_time(x)} → {fmt_time(y)}" for n, x, y in c.host_ops_changed))
    return lines


def rest_change_words(c: RestChange) -> str:
    """``median step (step 2 of 2 → step 2 of 3): 360 µs → 359 µs``: which steps, and their busy outside attention."""
    b, a = c.before, c.after
    return (f"median step (step {b.step} of {c.steps[0]} → step {a.step} of {c.steps[1]}): "
            f"{fmt_time(b.outside_us)} → {fmt_time(a.outside_us)}")


def rest_change_host_words(c: RestChange) -> str | None:
    """``host side (launch-bound before and after): kernels launched 86 → 46; top-level host ops 5.75 ms → 2.77
    ms``; None unless a side's median step is launch-bound."""
    sides = [side for side, lb in zip(("before", "after"), c.launch_bound) if lb]
    if not sides:
        return None
    b, a = c.before, c.after
    return (f"host side (launch-bound {' and '.join(sides)}): kernels launched {b.kernels} → {a.kernels}; "
            f"top-level host ops {fmt_time(b.host_ops_us)} → {fmt_time(a.host_ops_us)}")
