"""Memory per block, from ``profile_memory`` traces: bytes allocated inside its host intervals, and its peak."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import groupby

from ..model import Trace
from .blocks.discovery import Block


def alloc_bytes(tr: Trace, blocks: list[Block], device_side: bool) -> list[int | None]:
    """Bytes allocated inside each block's host intervals (``profile_memory`` traces only)."""
    if not tr.memory:
        return [None] * len(blocks)
    per_thread: dict[int, tuple[list[int], list[int]]] = {}
    mem = sorted((m for m in tr.memory if m.nbytes > 0 and (m.device_type != 0) == device_side),
                 key=lambda m: (m.thread, m.ts))
    for t, g in groupby(mem, key=lambda m: m.thread):
        ts, cum, acc = [], [0], 0
        for m in g:
            ts.append(m.ts)
            acc += m.nbytes
            cum.append(acc)
        per_thread[t] = (ts, cum)
    out: list[int | None] = []
    for b in blocks:
        if not b.roots:
            out.append(None)
            continue
        total = 0
        for r in b.roots:
            h = tr.host[r]
            ts, cum = per_thread.get(h.thread, ([], [0]))
            total += cum[bisect_right(ts, h.ts + h.dur)] - cum[bisect_left(ts, h.ts)]
        out.append(total)
    return out


def alloc_peaks(tr: Trace, blocks: list[Block], device_side: bool) -> list[int | None]:
    """Per block, the largest ``Total Allocated`` the allocator reported at an allocation inside its host intervals:
    its peak memory as ``torch.cuda.max_memory_allocated`` reads it (docs/attribution.md, "Diff"). None where no
    allocation there carries the total (older traces write none): a peak the trace cannot tell."""
    per_thread = _totals_by_thread(tr, device_side)
    if not per_thread:
        return [None] * len(blocks)
    out: list[int | None] = []
    for b in blocks:
        peaks = []
        for r in b.roots:
            h = tr.host[r]
            ts, totals = per_thread.get(h.thread, ([], []))
            lo, hi = bisect_left(ts, h.ts), bisect_right(ts, h.ts + h.dur)
            if hi > lo:
                peaks.append(max(totals[lo:hi]))
        out.append(max(peaks) if peaks else None)
    return out


def _totals_by_thread(tr: Trace, device_side: bool) -> dict[int, tuple[list[int], list[int]]]:
    """Thread -> (times, ``Total Allocated``) of its allocations that report the total, in time order."""
    mem = sorted((m for m in tr.memory if m.nbytes > 0 and m.total >= 0 and (m.device_type != 0) == device_side),
                 key=lambda m: (m.thread, m.ts))
    per_thread: dict[int, tuple[list[int], list[int]]] = {}
    for t, g in groupby(mem, key=lambda m: m.thread):
        ms = list(g)
        per_thread[t] = ([m.ts for m in ms], [m.total for m in ms])
    return per_thread
