"""Serving stages (issue 44, item 2): a serving trace's device time split into prefill, decode and mixed.

Why: a serving engine's trace holds iterations of different kinds. A prefill iteration runs long queries: its
attention is compute-bound matmul work. A decode iteration runs one query token per sequence: its attention
reads the KV cache and is memory-bound. Pooled, the two hide each other. tracekit.analysis.stages names each
iteration's stage and sums each stage's figures here.

One row per stage present, in :data:`STAGE_ORDER`, plus an ``outside`` row for the device time launched
outside every classified iteration (the scheduler's work between iterations, an iteration of a mode no rule
names). The rows' busy times add up to the trace's device busy time (``check_stages``: within 0.1%, and in
practice to the ns), so that no stage's share is read off a different whole than the headline's.

Every time is device busy time in µs, each instant once (the share the busy-time split gives each event).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..vocab import CATEGORIES
from .efficiency import Efficiency, efficiency_dict
from .invariants import EPS_US, close, expect

__all__ = ["OUTSIDE", "STAGE_COLUMNS", "STAGE_ORDER", "STAGE_TOLERANCE", "StageRow", "check_stages", "merge_stages",
           "StageDiff", "StagePair", "check_stage_diff", "pair_stages", "stage_record"]

PREFILL, DECODE, MIXED = "prefill", "decode", "mixed"
OUTSIDE = "outside"  # device time launched outside every classified iteration
STAGE_ORDER: tuple[str, ...] = (PREFILL, DECODE, MIXED, OUTSIDE)
STAGE_TOLERANCE = 0.001  # the rows' busy times add up to the whole within 0.1% (issue 44)
# One flat record per stage (the CSV's ``--by stage`` columns, the notebook's ``to_dataframe(by="stage")``).
STAGE_COLUMNS: tuple[str, ...] = (
    "stage", "iterations", "rules", "busy_us", "attention_us", "attention_share", "span_us", "idle_us", "blocks",
    *(f"{c}_us" for c in CATEGORIES), "tflops_per_s", "roof_pct", "bound",
    "flops_kind", "tflops_per_s_max", "roof_pct_max")  # (a range's high end beside its low one, as --by op has it)


@dataclass(slots=True, kw_only=True)
class StageRow:
    """One stage of a serving trace, summed over its iterations (µs of device busy time).

    ``rules``: the rule that named each iteration (tracekit.analysis.stages.STAGE_RULES) -> iterations; empty on
    the ``outside`` row. ``categories``: the attention time by category (summing to ``attention_us``).
    ``span_us``: each iteration's first device start to last device end, summed; ``idle_us`` = span - busy (both
    None on ``outside``).
    ``efficiency``: the stage's attention blocks' FLOP/byte sums; None where no block of it was counted."""

    stage: str
    iterations: int
    rules: dict[str, int]
    busy_us: float
    attention_us: float
    categories: dict[str, float]
    span_us: float | None  # None on ``outside``: its events lie around the iterations, in no one stretch
    idle_us: float | None
    blocks: int
    efficiency: Efficiency | None = None

    @property
    def attention_share(self) -> float | None:
        """The stage's attention time over its busy time; None without busy time."""
        return self.attention_us / self.busy_us if self.busy_us > 0 else None


def stage_record(r: StageRow) -> dict[str, object]:
    """The row as STAGE_COLUMNS: raw µs, the attention split as ``<category>_us``, rules as ``rule=n;…``, and the
    attention's TFLOP/s, % of roof and bound (None where no call was counted, or the row has no span)."""
    e = efficiency_dict(r.efficiency)
    rec: dict[str, object] = {
        "stage": r.stage, "iterations": r.iterations, "rules": ";".join(f"{k}={v}" for k, v in sorted(r.rules.items())),
        "busy_us": r.busy_us, "attention_us": r.attention_us, "attention_share": r.attention_share,
        "span_us": r.span_us, "idle_us": r.idle_us, "blocks": r.blocks}
    rec.update({f"{c}_us": r.categories[c] for c in CATEGORIES})
    rec.update(tflops_per_s=e["tflops_per_s"], roof_pct=e["roof_pct"], bound=e["bound"], flops_kind=e["flops_kind"],
               tflops_per_s_max=e["tflops_per_s_max"], roof_pct_max=e["roof_pct_max"])
    return rec


def check_stages(rows: list[StageRow], whole_us: float) -> None:
    """Each row adds up (attention by category, busy + idle = span, attention within busy), the stages are
    known and unique, and the rows' busy times add up to ``whole_us`` (the traces' device busy) within 0.1%."""
    names = [r.stage for r in rows]
    expect(names == [s for s in STAGE_ORDER if s in names], lambda: f"stages {names}: unknown, repeated or unordered")
    for r in rows:
        w = f"stage {r.stage}"
        expect(set(r.categories) == set(CATEGORIES), lambda: f"{w}: category keys {sorted(r.categories)}")
        expect(close(sum(r.categories.values()), r.attention_us, len(CATEGORIES) + 1, r.attention_us),
               lambda: f"{w}: categories sum {sum(r.categories.values())} != attention {r.attention_us}")
        expect(min(r.busy_us, r.attention_us, *r.categories.values()) >= -EPS_US, f"{w}: negative time")
        expect(r.attention_us <= r.busy_us or close(r.attention_us, r.busy_us, 2, r.busy_us),
               lambda: f"{w}: attention {r.attention_us} µs beyond busy {r.busy_us} µs")
        _check_span(r, w)
        expect((r.stage == OUTSIDE) == (not r.rules), lambda: f"{w}: rules {r.rules}")
        expect(r.stage == OUTSIDE or sum(r.rules.values()) == r.iterations,
               lambda: f"{w}: {r.iterations} iterations, rules {r.rules}")
        if r.efficiency is not None:
            r.efficiency.check()
    total = sum(r.busy_us for r in rows)
    expect(abs(total - whole_us) <= max(STAGE_TOLERANCE * abs(whole_us), EPS_US * (len(rows) + 1)),
           lambda: f"stages' busy time {total} µs is not the whole {whole_us} µs (within 0.1%)")


def _check_span(r: StageRow, w: str) -> None:
    """busy + idle = span, idle never negative; no span on ``outside`` only."""
    expect((r.span_us is None) == (r.idle_us is None) == (r.stage == OUTSIDE), lambda: f"{w}: span {r.span_us}")
    if r.span_us is not None and r.idle_us is not None:
        expect(r.idle_us >= -EPS_US, lambda: f"{w}: negative idle {r.idle_us}")
        expect(close(r.busy_us + r.idle_us, r.span_us, 2 * max(1, r.iterations), r.span_us),
               lambda: f"{w}: busy {r.busy_us} + idle {r.idle_us} != span {r.span_us}")


def merge_stages(parts: list[tuple[list[StageRow] | None, float]]) -> list[StageRow] | None:
    """Several traces' stage rows as one table (ranks, a folder), from (rows, the part's device busy µs) pairs:
    rows of one stage summed. None when no part has stages. A part without stages is no serving trace: its whole
    busy time joins ``outside`` (none of it ran in a classified iteration), so that the rows still add up to the
    merged whole."""
    if all(rows is None for rows, _ in parts):
        return None
    out: dict[str, StageRow] = {}
    for rows, whole_us in parts:
        for r in rows if rows is not None else [_outside_row(whole_us)]:
            m = out.get(r.stage)
            if m is None:
                out[r.stage] = replace(r, rules=dict(r.rules), categories=dict(r.categories),
                                       efficiency=None if r.efficiency is None else replace(r.efficiency))
            else:
                _add_row(m, r)
    return [out[s] for s in STAGE_ORDER if s in out]


def _outside_row(busy_us: float) -> StageRow:
    """A part without stages as one ``outside`` row: its busy time, attention not split out (it is no stage's)."""
    return StageRow(stage=OUTSIDE, iterations=0, rules={}, busy_us=busy_us, attention_us=0.0,
                    categories=dict.fromkeys(CATEGORIES, 0.0), span_us=None, idle_us=None, blocks=0)


def _add_row(m: StageRow, r: StageRow) -> None:
    """``r``'s figures summed into ``m`` (same stage)."""
    m.iterations += r.iterations
    m.busy_us += r.busy_us
    m.attention_us += r.attention_us
    if m.span_us is not None and r.span_us is not None and m.idle_us is not None and r.idle_us is not None:
        m.span_us += r.span_us
        m.idle_us += r.idle_us
    m.blocks += r.blocks
    for rule, n in r.rules.items():
        m.rules[rule] = m.rules.get(rule, 0) + n
    for cat, us in r.categories.items():
        m.categories[cat] += us
    m.efficiency = _add(m.efficiency, r.efficiency)


def _add(a: Efficiency | None, b: Efficiency | None) -> Efficiency | None:
    """Two efficiency sums added (None where neither has one)."""
    if b is None:
        return a
    if a is None:
        return replace(b)
    a.add(b)
    return a


@dataclass(slots=True, kw_only=True)
class StagePair:
    """One stage on both sides of a diff (prefill with prefill, decode with decode: never across stages)."""

    stage: str
    before: StageRow
    after: StageRow

    @property
    def busy_delta_us(self) -> float:
        return self.after.busy_us - self.before.busy_us

    @property
    def attention_delta_us(self) -> float:
        return self.after.attention_us - self.before.attention_us


@dataclass(slots=True, kw_only=True)
class StageDiff:
    """A diff's stages: the pairs in STAGE_ORDER, and the stages one side has and the other has not (named, never
    paired with another stage). Empty (``any`` False) when neither side is a serving trace."""

    pairs: list[StagePair]
    only_before: list[str]
    only_after: list[str]

    @property
    def any(self) -> bool:
        return bool(self.pairs or self.only_before or self.only_after)


def pair_stages(before: list[StageRow] | None, after: list[StageRow] | None) -> StageDiff:
    """Stage to stage (issue 44): each stage present on both sides paired with itself; the others named."""
    b = {r.stage: r for r in before or []}
    a = {r.stage: r for r in after or []}
    return StageDiff(pairs=[StagePair(stage=s, before=b[s], after=a[s]) for s in STAGE_ORDER if s in b and s in a],
                     only_before=[s for s in STAGE_ORDER if s in b and s not in a],
                     only_after=[s for s in STAGE_ORDER if s in a and s not in b])


def check_stage_diff(d: StageDiff, before: list[StageRow] | None, after: list[StageRow] | None) -> None:
    """Every pair joins one stage with itself, and each side's stages are its pairs plus its own-only stages."""
    expect(all(p.stage == p.before.stage == p.after.stage for p in d.pairs), "a stage paired with another stage")
    paired = [p.stage for p in d.pairs]
    expect(sorted(paired + d.only_before) == sorted(r.stage for r in before or []), "before's stages unaccounted")
    expect(sorted(paired + d.only_after) == sorted(r.stage for r in after or []), "after's stages unaccounted")
