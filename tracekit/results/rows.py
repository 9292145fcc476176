"""Blocks grouped into rows: the one list of groupings, and the rows every table, CSV and DataFrame sums.

Each grouping is named data with the outputs it applies to and why it exists (``GROUPINGS``, in tracekit.vocab so
that the CLI reads ``--by``'s choices without loading the results); the CLI's ``--by``, the renderers and
``to_dataframe(by=)`` all take their choices from there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..vocab import CATEGORIES, GROUPINGS, IDLE_CAUSES, MATMUL_ROLES, Phase
from ..vocab import TABLE_GROUPINGS as TABLE_GROUPINGS, Grouping as Grouping, GroupingRule as GroupingRule
from .attribution import Attribution, BlockResult, RankView, zero_categories
from .diff import DiffResult
from .efficiency import Efficiency
from .ranks import single_rank_view


FRAME_GROUPINGS: tuple[str, ...] = tuple(g.grouping.value for g in GROUPINGS if g.frame)
# A diff's DataFrame rows: per category (and the total), per pair, per pair kind, per kernel.
DIFF_FRAME_GROUPINGS: tuple[str, ...] = ("category", "pair", "kind", "kernel")


def check_grouping(by: str, allowed: tuple[str, ...]) -> None:
    """ValueError naming the choices, for a grouping outside ``allowed``."""
    if by not in allowed:
        raise ValueError(f"unknown grouping {by!r}; choose from {', '.join(allowed)}")


@dataclass(slots=True, kw_only=True)
class Row:
    """One table line: a group of blocks and their summed time, idle and efficiency.

    Every output that draws groups draws these sums (the HTML report too: tracekit.renderers.html serialises
    them), so a group's figures cannot differ between the terminal, the DataFrame and the page.
    """

    label: str
    phase: Phase
    blocks: int
    total_us: float
    categories: dict[str, float]
    kernels: int
    matmul_roles: dict[str, float] | None = None  # summed over the group's blocks; None if one lacks them
    span_us: float = 0.0
    idle_us: float = 0.0
    device_blocks: int = 0  # blocks with a device that can idle (launch_bound known); 0: idle means nothing
    idle_by_cause: dict[str, float] | None = None  # summed over the group's blocks; None if one lacks them
    efficiency: Efficiency | None = None  # the blocks' efficiency summed (sum_efficiency); None if none has any


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
                              kernels=0, matmul_roles=dict.fromkeys(MATMUL_ROLES, 0.0),
                              idle_by_cause=dict.fromkeys(IDLE_CAUSES, 0.0))
        r.matmul_roles = _add_parts(r.matmul_roles, b.matmul_roles)
        r.idle_by_cause = _add_parts(r.idle_by_cause, b.idle_by_cause)
        if b.efficiency is not None:
            if r.efficiency is None:
                r.efficiency = Efficiency()
            r.efficiency.add(b.efficiency)
        r.device_blocks += b.launch_bound is not None
        r.blocks += 1
        r.total_us += b.total_us
        r.kernels += b.kernels
        r.span_us += b.span_us
        r.idle_us += b.idle_us
        for c in CATEGORIES:
            r.categories[c] += b.categories[c]
    for r in rows.values():
        if r.efficiency is not None:
            r.efficiency.check()
    return list(rows.values())


LAYER_LABEL = "layer"  # the second row of a group: its blocks' attention layers (tracekit.analysis.blocks.layer)


def layer_rows(result: Attribution, by: str) -> list[Row | None]:
    """Each group_rows(result, by) row's second row, in the same order: its blocks' layers summed (a block that is
    its own layer adds its own figures, so the row holds the whole group and is at least its total), labelled
    ``layer <name>`` with the layers' name, instance numbers folded; None for a group where no block has a layer.
    Span and idle are the core's only: the layer row has none (0)."""
    rows: dict[tuple, Row] = {}
    names: dict[tuple, set[str]] = {}
    for b in result.blocks:
        k = _key(b, by)
        r = rows.get(k)
        if r is None:
            r = rows[k] = Row(label=LAYER_LABEL, phase=b.phase, blocks=0, total_us=0.0, categories=zero_categories(),
                              kernels=0, matmul_roles=dict.fromkeys(MATMUL_ROLES, 0.0), idle_by_cause=None)
            names[k] = set()
        names[k].update(_layer_names(b))
        total, cats = layer_or_own(b)
        r.blocks += 1
        r.total_us += total
        for c in CATEGORIES:
            r.categories[c] += cats[c]
        r.matmul_roles = _add_parts(r.matmul_roles, b.layer.matmul_roles if b.layer is not None else b.matmul_roles)
    for k, r in rows.items():
        r.label = _layer_label(names[k])
    return [r if names[k] else None for k, r in rows.items()]


def _layer_names(*blocks: BlockResult) -> set[str]:
    """The blocks' layer names with instance numbers folded (none for a block that is its own layer)."""
    return {re.sub(r"_\d+$", "", b.layer.name) for b in blocks if b.layer is not None}


def _layer_label(names: set[str]) -> str:
    """``layer <name>`` when a row's layers share one name, else ``layer``."""
    return f"{LAYER_LABEL} {next(iter(names))}" if len(names) == 1 else LAYER_LABEL


def with_layers(rows: list, layers: list) -> list:
    """Each row followed by its layer row where it has one (layer_rows, pair_layer_rows): the order views draw."""
    return [x for g, lay in zip(rows, layers) for x in (g, lay) if x is not None]


def _add_parts(acc: dict[str, float] | None, part: dict[str, float] | None) -> dict[str, float] | None:
    """``part`` added into ``acc`` key by key; None once any block lacks the split (a partial sum would mislead)."""
    if acc is None or part is None:
        return None
    for k, us in part.items():
        acc[k] += us
    return acc


def rank_view_of(result: Attribution) -> RankView:
    """The result's per-rank view; one row for a single trace (``--by rank`` on a file still renders)."""
    return single_rank_view(result)



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


def layer_or_own(b: BlockResult) -> tuple[float, dict[str, float]]:
    """A block's layer total and split, or the block's own where it is its own layer: what a diff pairs."""
    return (b.layer.total_us, b.layer.categories) if b.layer is not None else (b.total_us, b.categories)


def pair_layer_rows(r: DiffResult) -> list[PairRow | None]:
    """Each pair_rows(r) row's layer row, in the same order: the pairs' layers before and after (a block that is its
    own layer counts as one), labelled ``layer <name>`` as layer_rows labels them; None for a group where neither
    side's blocks have a layer."""
    rows: dict[tuple, PairRow] = {}
    names: dict[tuple, set[str]] = {}
    for p in r.pairs:
        label = p.before.kind if p.before.kind == p.after.kind else f"{p.before.kind} → {p.after.kind}"
        k = (label, p.before.phase)
        row = rows.get(k)
        if row is None:
            row = rows[k] = PairRow(label=LAYER_LABEL, phase=p.before.phase, n=0, before_us=0.0, after_us=0.0,
                                    deltas=zero_categories())
            names[k] = set()
        names[k].update(_layer_names(p.before, p.after))
        (bt, bc), (at, ac) = layer_or_own(p.before), layer_or_own(p.after)
        row.n += 1
        row.before_us += bt
        row.after_us += at
        for c in CATEGORIES:
            row.deltas[c] += ac[c] - bc[c]
    for k, row in rows.items():
        row.label = _layer_label(names[k])
    return [row if names[k] else None for k, row in rows.items()]


# -- the kernel table and the op/kernel tables' time basis (issue 42: --by kernel, --by op) --


def step_count(result: Attribution) -> int:
    """The profiled steps a per-step figure is the mean over: the distinct ProfilerSteps of the traces when every
    block lies in one; 0 (totals, stated) when there are none or some block lies outside every step."""
    if not result.blocks or any(b.step is None for b in result.blocks):
        return 0
    return len({s for t in result.traces for s in t.steps})


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelRow:
    """One kernel (compact name, category) the blocks own: its calls and busy µs over the whole profile."""

    kernel: str
    category: str
    calls: int
    total_us: float


def kernel_rows(result: Attribution) -> list[KernelRow]:
    """The result's kernel table as rows, by time (largest first), then name."""
    rows = [KernelRow(kernel=n, category=str(c), calls=k, total_us=us) for (n, c), (k, us) in result.kernels.items()]
    return sorted(rows, key=lambda r: (-r.total_us, r.kernel, r.category))
