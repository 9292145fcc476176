"""Blocks grouped into rows: the one list of groupings, and the rows every table, CSV and DataFrame sums.

Each grouping is named data with the outputs it applies to and why it exists (``GROUPINGS``); the CLI's
``--by``, the renderers and ``to_dataframe(by=)`` all take their choices from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..vocab import CATEGORIES, IDLE_CAUSES, MATMUL_ROLES, Phase, StrEnum
from .attribution import Attribution, BlockResult, RankView, zero_categories
from .diff import DiffResult
from .efficiency import Efficiency
from .ranks import single_rank_view


class Grouping(StrEnum):
    KIND = "kind"
    BLOCK = "block"
    LAYER = "layer"
    STEP = "step"
    RUN = "run"
    RANK = "rank"
    KERNEL = "kernel"


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupingRule:
    """One way to group blocks: in tables (``--by``), in DataFrames (``to_dataframe(by=)``), or both."""

    grouping: Grouping
    table: bool
    frame: bool
    why: str


GROUPINGS: tuple[GroupingRule, ...] = (
    GroupingRule(grouping=Grouping.KIND, table=True, frame=True,
                 why="instance numbers folded: layer3.attention and layer4.attention are one row"),
    GroupingRule(grouping=Grouping.BLOCK, table=True, frame=True, why="every block, by step and ordinal"),
    GroupingRule(grouping=Grouping.LAYER, table=True, frame=True, why="one row per block name over its steps"),
    GroupingRule(grouping=Grouping.STEP, table=True, frame=True,
                 why="one row per ProfilerStep: the step-to-step spread"),
    GroupingRule(grouping=Grouping.RUN, table=True, frame=True,
                 why="a folder of runs (a sweep): blocks' source is their run (tracekit.run.runs)"),
    GroupingRule(grouping=Grouping.RANK, table=True, frame=False,
                 why="a folder of ranks: one row per rank and their spread, the straggler view"),
    GroupingRule(grouping=Grouping.KERNEL, table=False, frame=True, why="every kernel the blocks own, by time"),
)
TABLE_GROUPINGS: tuple[str, ...] = tuple(g.grouping.value for g in GROUPINGS if g.table)
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
