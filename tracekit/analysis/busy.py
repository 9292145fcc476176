"""Device busy time and a block's window: the two time measures every device figure is made of.

Why a module of its own: block accounting, whole-step figures and the kernel table all read them, and they
are the per-event inner loops whose cost the 1 GB benchmark sees.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..model import DeviceEvent, HostEvent

if TYPE_CHECKING:
    import numpy as np


def busy_time(events: Sequence[DeviceEvent], busy_until: list[int] | None = None,
              order: Sequence[int] | None = None) -> tuple[int, list[int]]:
    """First-come split of overlapping device time: each event keeps what no earlier starter covered.

    ``busy_until``, when given (len(events) long), receives for each event the last end of the device
    work that started before it (-1 when none): when the device became free for it. ``order``: the events'
    positions sorted by start (stably), when the caller has them already (a block's figures share one sort).
    """
    if order is None:
        order = start_order(events)
    share = [0] * len(events)
    maxend = None
    for k in order:
        e = events[k]
        end = e.ts + e.dur
        if busy_until is not None:
            busy_until[k] = -1 if maxend is None else maxend
        start = e.ts if maxend is None or maxend < e.ts else maxend
        if end > start:
            share[k] = end - start
        if maxend is None or end > maxend:
            maxend = end
    return sum(share), share


@dataclass(slots=True, kw_only=True)
class DeviceColumns:
    """Every device event's start and end ns (int64: the parse bounds keep both within it) and the events'
    positions by start, stably: read once for the whole device's busy time, then gathered from by every per-block
    figure, so that no later walk reads the events' fields again."""

    ts: np.ndarray
    end: np.ndarray
    order: np.ndarray  # positions sorted by start, ties in index order (busy_time's order)


def device_busy(events: Sequence[DeviceEvent]) -> tuple[int, array[int], array[int], DeviceColumns]:
    """:func:`busy_time` of all the device's events with ``busy_until`` (-1 where none), over columns: the busy
    union, each event's first-come share, when the device became free for each, and the columns read.

    The shares and free times are int64 ``array.array``s, not lists: a list holds an int object per event (40
    bytes with its slot, against 8), which at 1 GB of trace is about 12 MB of the run's peak.

    Array operations throughout: each event's start is the later of its own and the running largest end before it
    in start order (never more than 1e15 ns past its own start, the bound on a duration, so no difference
    overflows int64); the union is a Python sum of the shares (exact at any size)."""
    import numpy as np

    n = len(events)
    ts, end = start_end(events)
    order = np.argsort(ts, kind="stable")
    first = np.zeros(n, np.bool_)
    first[:1] = True
    prev, share = first_come(ts[order], end[order], first)
    prev[:1] = -1  # (the first to start: the device was never busy before it)
    free_at, shares = np.empty(n, np.int64), np.empty(n, np.int64)
    free_at[order], shares[order] = prev, share
    out = array("q", shares.tobytes())
    return sum(out), out, array("q", free_at.tobytes()), DeviceColumns(ts=ts, end=end, order=order)


def start_end(events: Sequence[DeviceEvent]) -> tuple[np.ndarray, np.ndarray]:
    """The events' starts and ends in ns, as int64 arrays (one read of each field)."""
    import numpy as np

    ts = np.fromiter([e.ts for e in events], np.int64, len(events))
    return ts, ts + np.fromiter([e.dur for e in events], np.int64, len(events))


def first_come(ts: np.ndarray, end: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first-come split over runs of events sorted by start (``first``: True where a run begins; each run is
    split on its own, as :func:`busy_time` splits one list): for each event the largest end before it in its run
    (its own start for a run's first), and its share, the part of it past that end.

    The running largest end restarts at each run without a Python loop: each end is replaced by its rank among all
    ends, offset by its run's number times their count, so that a running maximum over the keys never carries a
    key across a run's start (every key of a run exceeds every key before it)."""
    import numpy as np

    n = len(ts)
    if not n:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    runs = np.cumsum(first) - 1
    if runs[-1] == 0:  # one run: a plain running maximum
        running = np.maximum.accumulate(end)
    else:
        by_end = np.argsort(end, kind="stable")
        rank = np.empty(n, np.int64)
        rank[by_end] = np.arange(n)
        key = np.maximum.accumulate(runs * n + rank)
        running = end[by_end[key - runs * n]]
    prev = np.empty(n, np.int64)
    prev[1:] = running[:-1]
    prev[first] = ts[first]
    return prev, np.maximum(end - np.maximum(ts, prev), 0)


def start_order(events: Sequence[DeviceEvent]) -> list[int]:
    """The events' positions sorted by start, stably (ties stay in index order): the order busy_time splits in."""
    starts = [e.ts for e in events]
    return sorted(range(len(events)), key=starts.__getitem__)


def block_window(evs: Sequence[DeviceEvent], roots: Sequence[HostEvent], free_at: int = -1) -> tuple[int, int]:
    """The block's span as (start, end) in ns: first start to last end of its host intervals and its device
    events, the profiled wall clock that busy time alone hides when the device waits for launches.

    Host time before the block's first device event counts only from ``free_at``, when the device finished
    the work queued before the block: a host that runs ahead of the device waits in the queue, and that
    wait is the previous work's time, not this block's (docs/attribution.md, Time). The idle causes split
    this window, and it is the block's ``start_us``/``end_us``.
    """
    if not evs:
        return _extent(roots) if roots else (0, 0)
    return window(*_extent(evs), roots, free_at)


def window(d0: int, end: int, roots: Sequence[HostEvent], free_at: int = -1) -> tuple[int, int]:
    """:func:`block_window` from the device events' first start ``d0`` and last end: for a caller that has read
    them already."""
    if not roots:
        return d0, end
    h0, h_end = _extent(roots)
    start = d0 if h0 >= d0 else max(h0, min(free_at, d0))
    return start, max(end, h_end)


def _extent(events: Sequence[DeviceEvent] | Sequence[HostEvent]) -> tuple[int, int]:
    """First start and last end of some events (at least one), in ns."""
    if len(events) == 1:  # (most blocks: one root; no generators)
        e = events[0]
        return e.ts, e.ts + e.dur
    return min(e.ts for e in events), max(e.ts + e.dur for e in events)
