"""Result objects of an analysis, and the invariants they must keep (``check``).

Renderers take these; nothing here formats text. What each figure means: docs/attribution.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .flops import DeviceInfo, Efficiency
from .vocab import CATEGORIES, FoundBy, Phase, TimeBase

__all__ = ["CATEGORIES", "DIFF_SCHEMA_VERSION", "SCHEMA_VERSION", "Attribution", "BlockResult", "Coverage", "InvariantError", "Totals",
           "TraceSummary", "close", "zero_categories"]

SCHEMA_VERSION = 1
DIFF_SCHEMA_VERSION = 1  # the diff's JSON (tracekit.diff), versioned on its own
_EPS_US = 0.002  # 1 ns rounding on each side of a sum
_REL = 1e-9  # float rounding of sums of huge figures (a 1e17 µs kernel), where 1 ns is below one ulp


class InvariantError(AssertionError):
    """A result broke one of its invariants: a tracekit bug, never a user error."""


def zero_categories() -> dict[str, float]:
    return dict.fromkeys(CATEGORIES, 0.0)


def close(a: float, b: float, terms: int = 1, scale: float = 0.0) -> bool:
    """``a == b`` up to ``terms`` ns roundings, or up to float rounding relative to the figures involved
    (the larger of ``a``, ``b`` and ``scale``, the magnitude of the terms summed)."""
    return abs(a - b) <= max(_EPS_US * terms, _REL * max(abs(a), abs(b), scale))


@dataclass(slots=True, kw_only=True)
class BlockResult:
    """One attention block. Time figures in µs; ``total_us`` is device busy time or host time."""

    name: str
    kind: str  # the block name with instance numbers folded, for grouping
    found_by: FoundBy
    step: int | None
    ordinal: int
    phase: Phase
    total_us: float
    span_us: float
    idle_us: float
    categories: dict[str, float]
    kernels: int
    host_us: float | None
    alloc_bytes: int | None
    source: str
    # FLOPs/bytes of the block's counted kernels and the rate they reached (tracekit.flops); per category and role.
    efficiency: Efficiency | None = None
    efficiency_by_category: dict[str, Efficiency] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class Totals:
    total_us: float
    categories: dict[str, float]
    attention_share: float | None  # of device busy time (host time on CPU-only traces)
    blocks: int
    efficiency: Efficiency | None = None  # the sum over blocks
    efficiency_by_category: dict[str, Efficiency] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class Coverage:
    """How much device time could be tied to host ops and to blocks."""

    device_us: float
    linked_us: float
    in_blocks_us: float
    unlinked_us: float
    device_events: int
    linked_events: int


@dataclass(slots=True, kw_only=True)
class TraceSummary:
    """Per input file: the header facts and its whole-trace denominators."""

    source: str
    gpus: list[str]
    pytorch: str | None
    runtime: str | None
    time_base: TimeBase
    steps: list[int]
    events: int
    base_us: float  # device busy time, or host time of the top-level ops
    warnings: list[str]
    damaged: bool
    external_ids_trusted: bool
    shapes: list[str] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class Attribution:
    """Where attention time goes, for one trace or a folder of them."""

    source: str
    time_base: TimeBase  # MIXED when a folder holds both GPU and CPU-only traces
    traces: list[TraceSummary]
    blocks: list[BlockResult]
    totals: Totals
    coverage: Coverage | None
    # Every device event (host op, on CPU-only traces) that a block owns: (name, category) -> (count, µs).
    # Device events count their full duration; host ops their self time.
    kernels: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)
    # Device events placed in a block, counted once per placement and once per distinct event: equal unless
    # an event was placed twice (check() asserts they are). Sums over the parts when results are merged.
    device_events_owned: int = 0
    device_events_owned_distinct: int = 0
    # About the inputs as a whole (files skipped or read once for two names), for stderr and reports.
    warnings: list[str] = field(default_factory=list)
    incomplete: bool = False  # an input file could not be read: the figures miss its share
    device: DeviceInfo | None = None  # the accelerator and its peaks (the roof of the efficiency figures)

    @property
    def top_kernels(self) -> list[tuple[str, str, int, float]]:
        """The 15 costliest kernels in blocks: (name, category, count, µs)."""
        rows = sorted(((n, c, k, us) for (n, c), (k, us) in self.kernels.items()), key=lambda r: (-r[3], r[0]))
        return rows[:15]

    @property
    def damaged(self) -> bool:
        return self.incomplete or any(t.damaged for t in self.traces)

    def check(self) -> "Attribution":
        """Raise InvariantError unless every figure adds up. Returns self for chaining."""
        nc = len(CATEGORIES)
        for b in self.blocks:
            s = sum(b.categories.values())
            _expect(set(b.categories) == set(CATEGORIES), f"block {b.name}: category keys {sorted(b.categories)}")
            _expect(close(s, b.total_us, nc), f"block {b.name}: categories sum {s} != total {b.total_us}")
            _expect(all(v >= -_EPS_US for v in b.categories.values()), f"block {b.name}: negative category")
            if self.time_base != TimeBase.HOST:
                _expect(close(b.total_us + b.idle_us, b.span_us, 2),
                        f"block {b.name}: busy {b.total_us} + idle {b.idle_us} != span {b.span_us}")
        n = max(1, len(self.blocks))
        t = self.totals
        _expect(close(sum(b.total_us for b in self.blocks), t.total_us, n), "totals.total_us is not the sum of blocks")
        for c in CATEGORIES:
            _expect(close(sum(b.categories[c] for b in self.blocks), t.categories[c], n, t.total_us),
                    f"totals.{c} is not the sum of blocks")
        _expect(t.blocks == len(self.blocks), "totals.blocks != number of blocks")
        if t.attention_share is not None:
            _expect(-_REL <= t.attention_share <= 1 + _REL, f"attention share {t.attention_share} outside [0, 1]")
        _expect(self.device_events_owned == self.device_events_owned_distinct, "a device event was counted in two blocks")
        if self.coverage is not None:
            cv = self.coverage
            _expect(close(cv.linked_us + cv.unlinked_us, cv.device_us, 4), "linked + unlinked != device time")
            _expect(cv.in_blocks_us <= cv.device_us or close(cv.in_blocks_us, cv.device_us, n),
                    "more time in blocks than on the device")
            _expect(sum(b.kernels for b in self.blocks) == self.device_events_owned, "block kernel counts != events owned")
        return self


def _expect(ok: bool, msg: str) -> None:
    if not ok:
        raise InvariantError(msg)
