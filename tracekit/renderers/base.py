"""The renderer interface, and the wording and grouping that every text format shares.

One module per format; each renders both an :class:`~tracekit.result.Attribution` and a
:class:`~tracekit.diff.DiffResult`. Conclusions are computed in the result objects, never here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from ..result import CATEGORIES, Attribution, BlockResult, RankView, zero_categories
from ..vocab import MATMUL_ROLES, TIME_BASE_LABELS, Basis, Phase

if TYPE_CHECKING:  # tracekit.diff imports the analysis; a renderer never needs it at run time
    from ..diff import DiffResult, RankPair, Verdict

Result = Union[Attribution, "DiffResult"]

# "run": one row per run of a folder of runs (tracekit.runs names each block's source after its run).
# "rank": one row per rank of a folder of ranks (tracekit.ranks), with their spread.
GROUPINGS = ("kind", "block", "layer", "step", "run", "rank")

HEADS = {"matmul": "matmul", "softmax": "softmax", "fused_attention": "fused attn",
         "memory": "memory", "elementwise": "elementwise", "other": "other"}


class Renderer:
    """Turns a result into text. Subclasses set ``name`` and ``extension`` and implement both ``render_*``."""

    name = ""
    extension = ""

    def __init__(self, by: str = "kind", tool: str = "tracekit", title: str | None = None) -> None:
        if by not in GROUPINGS:
            raise ValueError(f"unknown grouping {by!r}; choose from {', '.join(GROUPINGS)}")
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


def fmt_time(us: float) -> str:
    """Human units with three significant-ish digits: 812 µs, 3.41 ms, 12.0 s."""
    a = abs(us)
    if a >= 1e6:
        return f"{us / 1e6:.2f} s"
    if a >= 1e3:
        return f"{us / 1e3:.2f} ms"
    if a >= 100:
        return f"{us:.0f} µs"
    return f"{us:.1f} µs"


def pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def signed(us: float) -> str:
    """``+0.60 ms`` / ``-1.80 ms`` / ``0.0 µs``: a delta always shows its direction."""
    if abs(us) < 0.05:
        return "0.0 µs"
    return ("+" if us > 0 else "") + fmt_time(us)


def ratio_text(before: float, after: float) -> str:
    if before > 0:
        return f"{after / before:.2f}×" if after > 0 else "gone"
    return "new" if after > 0 else "—"


def share_text(x: float | None) -> str:
    if x is None:
        return "n/a"
    v = 100 * x
    return f"{0.0 if abs(v) < 0.05 else v:.1f}%"


def fmt_bytes(n: int) -> str:
    a = abs(n)
    for unit, k in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if a >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


def time_base_label(time_base: str) -> str:
    """The one wording of a time base, in every format."""
    return TIME_BASE_LABELS.get(time_base, time_base)


def basis_label(basis: str) -> str:
    return "median step" if basis == Basis.MEDIAN_STEP else "total"


# ---------------------------------------------------------------------------------------------
# Attribution: header and grouped rows


def header_lines(result: Attribution) -> list[str]:
    """What each trace is: device, runtime, steps, time base. Never user metadata."""
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
        parts.append(f"time base: {time_base_label(t.time_base)}")
        lines.append(f"{t.source}: {t.events:,} events · " + " · ".join(parts))
    return lines


def share_line(result: Attribution) -> str:
    """``4 attention blocks, 149 µs · 48.1% of device busy time (309 µs)``, without the leading label."""
    t = result.totals
    share = f"{100 * t.attention_share:.1f}%" if t.attention_share is not None else "n/a"
    base_us = sum(s.base_us for s in result.traces)
    return (f"{t.blocks} blocks, {fmt_time(t.total_us)} · {share} of {time_base_label(result.time_base)} "
            f"({fmt_time(base_us)})")


@dataclass(slots=True, kw_only=True)
class Row:
    """One table line: a group of blocks and their summed time."""

    label: str
    phase: Phase
    blocks: int
    total_us: float
    categories: dict[str, float]
    kernels: int
    matmul_roles: dict[str, float] | None = None  # summed over the group's blocks; None if one lacks them
    span_us: float = 0.0
    idle_us: float = 0.0


def _key(b: BlockResult, by: str) -> tuple:
    if by == "kind":
        return (b.kind, b.phase)
    if by == "layer":
        return (b.name, b.phase)
    if by == "run":
        return (b.source, b.phase)
    if by == "step":
        return ("all steps" if b.step is None else f"step {b.step}", b.phase)
    return (f"{b.name} [{'-' if b.step is None else b.step}:{b.ordinal}]", b.phase, b.source, b.step, b.ordinal)


def group_rows(result: Attribution, by: str) -> list[Row]:
    """Blocks grouped for display; order follows first appearance (model order)."""
    rows: dict[tuple, Row] = {}
    for b in result.blocks:
        k = _key(b, by)
        r = rows.get(k)
        if r is None:
            r = rows[k] = Row(label=k[0], phase=b.phase, blocks=0, total_us=0.0, categories=zero_categories(),
                              kernels=0, matmul_roles=dict.fromkeys(MATMUL_ROLES, 0.0))
        if b.matmul_roles is None:
            r.matmul_roles = None
        elif r.matmul_roles is not None:
            for role, us in b.matmul_roles.items():
                r.matmul_roles[role] += us
        r.blocks += 1
        r.total_us += b.total_us
        r.kernels += b.kernels
        r.span_us += b.span_us
        r.idle_us += b.idle_us
        for c in CATEGORIES:
            r.categories[c] += b.categories[c]
    return list(rows.values())


def rank_view_of(result: Attribution) -> RankView:
    """The result's per-rank view; one row for a single trace (``--by rank`` on a file still renders)."""
    from ..ranks import single_rank_view

    return single_rank_view(result)


def spread_line(view: RankView) -> str:
    """``spread over 4 ranks: min 31.0 µs (rank 0) · median 77.5 µs · max 124 µs (rank 3): rank 3 is +46.5 µs (+60.0%) over the median``."""
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


def headline(r: DiffResult) -> str:
    """``attention (median step): 2.69 ms → 1.03 ms · Δ -1.66 ms (-61.6%) · 2.61× faster``."""
    b, a = r.before_figures.total_us, r.after_figures.total_us
    parts = [f"attention ({basis_label(r.basis)}): {fmt_time(b)} → {fmt_time(a)}", f"Δ {signed(r.delta_us)}"
             + (f" ({r.delta_pct:+.1f}%)" if r.delta_pct is not None else "")]
    if r.no_claim:  # launch-bound, or nothing paired: busy time alone does not say faster or slower
        sb, sa = r.before_figures.span_us, r.after_figures.span_us
        if r.launch_bound:
            parts[0] = f"attention ({basis_label(r.basis)}): busy {fmt_time(b)} → {fmt_time(a)}, " \
                       f"profiled span {fmt_time(sb)} → {fmt_time(sa)}"
        return " · ".join([*parts, r.no_claim])
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


def alloc_line(r: DiffResult, conclusions: bool = True) -> str | None:
    """Bytes allocated in blocks, then (unless ``conclusions`` is False) the result's conclusions (tracekit.diff)."""
    m = r.alloc
    if m is None:
        return None
    line = (f"memory allocated inside blocks (all steps): {fmt_bytes(m.before_bytes)} → {fmt_bytes(m.after_bytes)} "
            f"({'+' if m.delta_bytes > 0 else ''}{fmt_bytes(m.delta_bytes)})")
    return "".join([line, *(f": {c}" for c in r.conclusions)]) if conclusions else line


@dataclass(slots=True, kw_only=True)
class PairRow:
    """Paired blocks grouped by (before kind, after kind, phase), summed over steps and instances."""

    label: str
    phase: Phase
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
            row = rows[k] = PairRow(label=label, phase=p.before.phase, n=0, before_us=0.0, after_us=0.0,
                                    deltas=zero_categories())
        row.n += 1
        row.before_us += p.before.total_us
        row.after_us += p.after.total_us
        for c in CATEGORIES:
            row.deltas[c] += p.after.categories[c] - p.before.categories[c]
    return list(rows.values())


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


def verdict_line(v: Verdict) -> str:
    """The CI gate's one line for stderr: what was compared, and the decision."""
    head = f"fail-if-slower {v.threshold_pct:g}%:"
    basis = basis_label(v.basis)
    if v.change_pct is None:
        if v.ok:
            return f"{head} ok: no attention time on either side"
        what = "profiled span" if v.compared == "span" else "attention time"
        return f"{head} REGRESSION: {what} appeared (0 → {fmt_time(v.after_us)}, {basis})"
    what = "profiled span (launch-bound: busy time is not the wait)" if v.compared == "span" else "attention time"
    fig = f"{what} {fmt_time(v.before_us)} → {fmt_time(v.after_us)} ({v.change_pct:+.1f}%, {basis})"
    noise = "; the change is within noise" if v.within_noise else ""
    if v.ok:
        return f"{head} ok: {fig}{noise}"
    return f"{head} REGRESSION: {fig} is more than {v.threshold_pct:g}% slower{noise}"
