"""Memory per block, from ``profile_memory`` traces: bytes allocated inside its host intervals, and its peak."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import accumulate, islice
from operator import attrgetter, gt

from ..model import MemoryEvent, Trace
from .blocks.discovery import Block


class _ThreadAllocs:
    """One host thread's allocations of one side (device or host), in time order: their times, the running sum of
    their bytes, and the ``Total Allocated`` each reported (-1 where none)."""

    __slots__ = ("cum", "totals", "ts")

    def __init__(self) -> None:
        self.ts: list[int] = []
        self.cum: list[int] = [0]  # cum[k]: bytes of the first k allocations
        self.totals: list[int] = []


def _by_thread(tr: Trace, device_side: bool) -> dict[int, _ThreadAllocs]:
    """Thread -> its allocations on ``device_side``: one pass over the memory events for both figures, then each
    thread's sorted by time (a trace writes them in time order per thread already: a linear check)."""
    per_thread: dict[int, list[MemoryEvent]] = {}
    for m in tr.memory:
        if m.nbytes > 0 and (m.device_type != 0) == device_side:
            got = per_thread.get(m.thread)
            if got is None:
                per_thread[m.thread] = [m]
            else:
                got.append(m)
    return {t: _in_time_order(per_thread[t]) for t in sorted(per_thread)}


def _in_time_order(ms: list[MemoryEvent]) -> _ThreadAllocs:
    """One thread's allocations sorted by time, stably (the file's order of equal times), as columns."""
    ts = [m.ts for m in ms]
    if any(map(gt, ts, islice(ts, 1, None))):  # (already in time order in most traces: then no sort, no keys)
        ms.sort(key=attrgetter("ts"))
        ts = [m.ts for m in ms]
    a = _ThreadAllocs()
    a.ts = ts
    a.cum += accumulate([m.nbytes for m in ms])
    a.totals = [m.total for m in ms]
    return a


def block_allocations(tr: Trace, blocks: list[Block], device_side: bool) -> tuple[list[int | None], list[int | None]]:
    """Per block, the bytes allocated inside its host intervals and its peak (``profile_memory`` traces only; None
    without memory events), from one index of the allocations. The peak is the largest ``Total Allocated`` the
    allocator reported at an allocation inside those intervals: the block's peak memory as
    ``torch.cuda.max_memory_allocated`` reads it (docs/attribution.md, "Diff"); None where no allocation there
    carries the total (older traces write none): a peak the trace cannot tell."""
    if not tr.memory:
        return [None] * len(blocks), [None] * len(blocks)
    per_thread = _by_thread(tr, device_side)
    return _bytes(tr, blocks, per_thread), _peaks(tr, blocks, per_thread)


def _bytes(tr: Trace, blocks: list[Block], per_thread: dict[int, _ThreadAllocs]) -> list[int | None]:
    out: list[int | None] = []
    none = _ThreadAllocs()
    for b in blocks:
        if not b.roots:
            out.append(None)
            continue
        total = 0
        for r in b.roots:
            h = tr.host[r]
            a = per_thread.get(h.thread, none)
            total += a.cum[bisect_right(a.ts, h.ts + h.dur)] - a.cum[bisect_left(a.ts, h.ts)]
        out.append(total)
    return out


def _peaks(tr: Trace, blocks: list[Block], per_thread: dict[int, _ThreadAllocs]) -> list[int | None]:
    if not any(t >= 0 for a in per_thread.values() for t in a.totals):
        return [None] * len(blocks)
    out: list[int | None] = []
    none = _ThreadAllocs()
    for b in blocks:
        peak = -1
        for r in b.roots:
            h = tr.host[r]
            a = per_thread.get(h.thread, none)
            lo, hi = bisect_left(a.ts, h.ts), bisect_right(a.ts, h.ts + h.dur)
            if hi > lo:
                peak = max(peak, max(a.totals[lo:hi]))
        out.append(peak if peak >= 0 else None)
    return out
