"""Device busy time and a block's window: the two time measures every device figure is made of.

Why a module of its own: block accounting, whole-step figures and the kernel table all read them, and they
are the per-event inner loops whose cost the 1 GB benchmark sees.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..model import DeviceEvent, HostEvent


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
    return min(e.ts for e in events), max(e.ts + e.dur for e in events)
