"""Per-rank view of a distributed run: one row per trace file, numbered by rank, and the spread.

A 64-GPU job waits at every collective for its slowest rank, so a merged total hides the
straggler. Rank numbers come, in order of trust, from each trace's ``distributedInfo.rank``, from
``rank<N>`` (or ``_<N>.``) in the file's path below the folder, or from the file order; a source is
used only when it numbers every file once (two copies of one trace both say rank 0).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from .attribution import RankRow, RankSpread, RankView, zero_categories
from ..vocab import RankFrom

if TYPE_CHECKING:
    from .attribution import Attribution

_RANK_IN_PATH = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
_NUMBER_SUFFIX = re.compile(r"_(\d+)\.")


def rank_from_path(rel: str) -> int | None:
    """``rank3``, ``rank_3``, ``rank-3`` anywhere in the path (the last one wins); else ``_3.`` in the file name."""
    hits = _RANK_IN_PATH.findall(rel)
    if hits:
        return _bounded(hits[-1])
    m = _NUMBER_SUFFIX.search(Path(rel).name)
    return _bounded(m.group(1)) if m else None


MAX_RANK = (1 << 31) - 1  # as for distributedInfo.rank: beyond it a number in a name is no rank (and no JSON int64)


def _bounded(digits: str) -> int | None:
    """The rank a name's digits spell, or None beyond MAX_RANK (the ranks then follow the file order, with a note)."""
    return int(digits) if len(digits) <= 10 and int(digits) <= MAX_RANK else None


def _distinct(numbers: list[int | None]) -> bool:
    return None not in numbers and len(set(numbers)) == len(numbers)


def number_ranks(header_ranks: list[int | None], rel_paths: list[str]) -> tuple[list[int], RankFrom, str]:
    """(rank per file, where the numbers came from, a note when they fell back to the file order)."""
    if _distinct(header_ranks):
        return [r for r in header_ranks if r is not None], RankFrom.TRACE, ""
    from_path = [rank_from_path(p) for p in rel_paths]
    if _distinct(from_path):
        return [r for r in from_path if r is not None], RankFrom.PATH, ""
    return list(range(len(rel_paths))), RankFrom.ORDER, (
        "ranks numbered by file order: neither distributedInfo.rank nor the file names number every file once")


def _row(part: Attribution, rank: int, source: str) -> RankRow:
    t = part.totals
    return RankRow(rank=rank, source=source, blocks=t.blocks, total_us=t.total_us, categories=dict(t.categories),
                   span_us=t.span_us, idle_us=t.idle_us, base_us=sum(s.base_us for s in part.traces),
                   attention_share=t.attention_share, launch_bound=t.launch_bound)


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def spread(rows: list[RankRow]) -> RankSpread:
    """min/median/max of attention time; ties go to the lowest rank."""
    slow = max(rows, key=lambda r: (r.total_us, -r.rank))
    fast = min(rows, key=lambda r: (r.total_us, r.rank))
    med = _median([r.total_us for r in rows])
    return RankSpread(min_us=fast.total_us, median_us=med, max_us=slow.total_us, fastest_rank=fast.rank,
                      slowest_rank=slow.rank, slowest_over_median_us=slow.total_us - med,
                      slowest_over_median_pct=100.0 * (slow.total_us - med) / med if med > 0 else None,
                      max_over_min=slow.total_us / fast.total_us if fast.total_us > 0 else None)


def rank_view(parts: list[Attribution], files: list[Path], root: Path) -> RankView:
    """The per-rank view of one result per file (``parts[i]`` read from ``files[i]`` under ``root``)."""
    rel = [_relative(f, root) for f in files]
    header = [p.traces[0].rank if len(p.traces) == 1 else None for p in parts]
    numbers, source, note = number_ranks(header, rel)
    rows = sorted((_row(p, n, r) for p, n, r in zip(parts, numbers, rel)), key=lambda r: r.rank)
    return RankView(rank_from=source, rows=rows, spread=spread(rows), note=note)


def single_rank_view(result: Attribution) -> RankView:
    """A result without a rank view (one file, or built by hand) as one row: ``--by rank`` still renders."""
    if result.ranks is not None:
        return result.ranks
    header = [t.rank for t in result.traces]
    rank = header[0] if len(header) == 1 and header[0] is not None else 0
    row = _row(result, rank, result.source) if result.blocks or result.traces else RankRow(
        rank=0, source=result.source, blocks=0, total_us=0.0, categories=zero_categories(), span_us=0.0,
        idle_us=0.0, base_us=0.0, attention_share=None, launch_bound=None)
    src = RankFrom.TRACE if len(header) == 1 and header[0] is not None else RankFrom.ORDER
    return RankView(rank_from=src, rows=[row], spread=spread([row]))


def _relative(f: Path, root: Path) -> str:
    try:
        return str(f.relative_to(root)) if root != f else f.name
    except ValueError:
        return str(f)
