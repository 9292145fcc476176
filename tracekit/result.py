"""Result objects of an analysis, and the invariants they must keep (``check``).

Renderers take these; nothing here formats text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CATEGORIES = ("matmul", "softmax", "fused_attention", "memory", "elementwise", "other")
SCHEMA_VERSION = 1
_EPS_US = 0.002  # 1 ns rounding on each side of a sum


class InvariantError(AssertionError):
    """A result broke one of its invariants: a tracekit bug, never a user error."""


def zero_categories() -> dict[str, float]:
    return dict.fromkeys(CATEGORIES, 0.0)


@dataclass(slots=True)
class BlockResult:
    """One attention block. Time figures in µs; ``total_us`` is device busy time or host time."""

    name: str
    kind: str  # the block name with instance numbers folded, for grouping
    found_by: str
    step: int | None
    ordinal: int
    phase: str
    total_us: float
    span_us: float
    idle_us: float
    categories: dict[str, float]
    kernels: int
    host_us: float | None
    alloc_bytes: int | None
    source: str


@dataclass(slots=True)
class Totals:
    total_us: float
    categories: dict[str, float]
    attention_share: float | None  # of device busy time (host time on CPU-only traces)
    blocks: int


@dataclass(slots=True)
class Coverage:
    """How much device time could be tied to host ops and to blocks."""

    device_us: float
    linked_us: float
    in_blocks_us: float
    unlinked_us: float
    device_events: int
    linked_events: int


@dataclass(slots=True)
class TraceSummary:
    """Per input file: the header facts and its whole-trace denominators."""

    source: str
    gpus: list[str]
    pytorch: str | None
    runtime: str | None
    time_base: str
    steps: list[int]
    events: int
    base_us: float  # device busy time, or host time of the top-level ops
    warnings: list[str]
    damaged: bool
    external_ids_trusted: bool
    shapes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Attribution:
    """Where attention time goes, for one trace or a folder of them."""

    source: str
    time_base: str  # "device" or "host"; "mixed" when a folder holds both
    traces: list[TraceSummary]
    blocks: list[BlockResult]
    totals: Totals
    coverage: Coverage | None
    # Every device event (host op, on CPU-only traces) that a block owns: (name, category) -> (count, µs).
    # Device events count their full duration; host ops their self time.
    kernels: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)
    _device_owned: int = 0  # device events placed in a block
    _device_owned_unique: int = 0
    # About the inputs as a whole (files skipped or read once for two names), for stderr and reports.
    warnings: list[str] = field(default_factory=list)
    incomplete: bool = False  # an input file could not be read: the figures miss its share

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
        for b in self.blocks:
            s = sum(b.categories.values())
            _expect(set(b.categories) == set(CATEGORIES), f"block {b.name}: category keys {sorted(b.categories)}")
            _expect(abs(s - b.total_us) <= _EPS_US * len(CATEGORIES), f"block {b.name}: categories sum {s} != total {b.total_us}")
            _expect(all(v >= -_EPS_US for v in b.categories.values()), f"block {b.name}: negative category")
            if self.time_base != "host":
                _expect(abs(b.total_us + b.idle_us - b.span_us) <= _EPS_US * 2,
                        f"block {b.name}: busy {b.total_us} + idle {b.idle_us} != span {b.span_us}")
        n = max(1, len(self.blocks))
        _expect(abs(sum(b.total_us for b in self.blocks) - self.totals.total_us) <= _EPS_US * n, "totals.total_us is not the sum of blocks")
        for c in CATEGORIES:
            _expect(abs(sum(b.categories[c] for b in self.blocks) - self.totals.categories[c]) <= _EPS_US * n,
                    f"totals.{c} is not the sum of blocks")
        _expect(self.totals.blocks == len(self.blocks), "totals.blocks != number of blocks")
        _expect(self._device_owned == self._device_owned_unique, "a device event was counted in two blocks")
        if self.coverage is not None:
            cv = self.coverage
            _expect(abs(cv.linked_us + cv.unlinked_us - cv.device_us) <= _EPS_US * 4, "linked + unlinked != device time")
            _expect(cv.in_blocks_us <= cv.device_us + _EPS_US * n, "more time in blocks than on the device")
            _expect(sum(b.kernels for b in self.blocks) == self._device_owned, "block kernel counts != events owned")
        return self


def _expect(ok: bool, msg: str) -> None:
    if not ok:
        raise InvariantError(msg)
