"""The renderer interface, and the grouping of blocks into table rows that all text formats share."""

from __future__ import annotations

from dataclasses import dataclass

from ..result import CATEGORIES, Attribution, BlockResult, zero_categories

GROUPINGS = ("kind", "block", "layer", "step")


class Renderer:
    """Turns an :class:`Attribution` into text. Subclasses set ``name`` and ``extension``."""

    name = ""
    extension = ""

    def __init__(self, by: str = "kind", tool: str = "tracekit"):
        if by not in GROUPINGS:
            raise ValueError(f"unknown grouping {by!r}; choose from {', '.join(GROUPINGS)}")
        self.by = by
        self.tool = tool

    def render(self, result: Attribution) -> str:
        raise NotImplementedError


def pick_renderer(registry: dict[str, type], fmt: str | None, output: str | None) -> type:
    """An explicit --format wins; else the -o file's extension; else the registry's terminal table."""
    if fmt:
        return registry[fmt]
    if output:
        for cls in registry.values():
            if cls.extension != ".txt" and output.endswith(cls.extension):
                return cls
    return registry["table"]


@dataclass(slots=True)
class Row:
    """One table line: a group of blocks and their summed time."""

    label: str
    phase: str
    blocks: int
    total_us: float
    categories: dict[str, float]
    kernels: int


def _key(b: BlockResult, by: str):
    if by == "kind":
        return (b.kind, b.phase)
    if by == "layer":
        return (b.name, b.phase)
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
            r = rows[k] = Row(k[0], b.phase, 0, 0.0, zero_categories(), 0)
        r.blocks += 1
        r.total_us += b.total_us
        r.kernels += b.kernels
        for c in CATEGORIES:
            r.categories[c] += b.categories[c]
    return list(rows.values())


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
