"""Time in the results: the trace's own clock, and each block's device intervals on it (docs/attribution.md,
"Time in the trace").

Why a module of its own: the block walk (tracekit.analysis.attribute) calls these once per block, and the
intervals are stored as flat arrays (``array`` converts a list in C) built from the events the walk already
holds, so that keeping them costs the 1 GB benchmark next to nothing when they are not written.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from itertools import compress, repeat
from operator import attrgetter, eq

from ..model import DeviceEvent, HostEvent, Trace
from ..results.attribution import Intervals
from ..vocab import CATEGORIES

_TS = attrgetter("ts")
_CATEGORY_INDEX = {c: i for i, c in enumerate(CATEGORIES)}  # (a Category is its string: it looks up the same)


def trace_origin(tr: Trace) -> int:
    """The trace start in ns: the smallest ``ts`` of the events tracekit reads (host ops, ranges and module
    slices, runtime calls, device events, GPU annotations, allocations, fwdbwd flows); 0 for a trace without any.

    Read before graph replays are mapped: the copies of captured ops carry the capture's times, not this clock."""
    firsts = [min(map(_TS, events)) for events in (tr.host, tr.runtime, tr.device, tr.gpu_annotations, tr.memory,
                                                    tr.flows) if events]
    return min(firsts) if firsts else 0


def relative_us(ns: int, origin_ns: int) -> float:
    """An absolute ns time as µs from the trace start."""
    return (ns - origin_ns) / 1000


def first_event(js: Sequence[int], evs: Sequence[DeviceEvent]) -> int:
    """The lowest index among the device events ``js`` (``evs``, at least one) that start first: the event whose
    ``free_at`` opens a window (busy.block_window). C loops over the starts: no key tuple per event."""
    ts = [e.ts for e in evs]
    return min(compress(js, map(eq, ts, repeat(min(ts)))))


def block_intervals(evs: Sequence[DeviceEvent], cats: Iterable[str], origin_ns: int,
                    streams: tuple[tuple[object, object], ...], starts: list[int] | None = None,
                    ends: list[int] | None = None) -> Intervals:
    """A block's device events (``evs``, of categories ``cats``) as flat arrays: absolute start and end (ns),
    category index and stream index (into ``streams``, the trace's stream table, shared by every block). (List
    comprehensions read the events' fields faster than ``map(attrgetter)``; an array from a list converts in C.)
    ``starts``, ``ends``: the events' start and end ns, when the caller has read them already."""
    cat = _CATEGORY_INDEX
    return Intervals(origin_ns=origin_ns, start_ns=array("q", starts if starts is not None else [e.ts for e in evs]),
                     end_ns=array("q", ends if ends is not None else [e.ts + e.dur for e in evs]),
                     category=bytes([cat[c] for c in cats]),
                     stream=array("q", [e.stream for e in evs]), streams=streams, names=tuple([e.name for e in evs]))


def host_spans(roots: Iterable[HostEvent], threads: Sequence[tuple[object, object]],
               origin_ns: int) -> tuple[tuple[object, object, float, float], ...]:
    """A block's host ops as (pid, tid, start_us, end_us) on the trace's clock: the timeline's host lanes."""
    return tuple((*threads[h.thread], relative_us(h.ts, origin_ns), relative_us(h.ts + h.dur, origin_ns))
                 for h in roots)


def host_intervals(ops: Sequence[tuple[HostEvent, str]], origin_ns: int, lo: int, hi: int,
                   threads: tuple[tuple[object, object], ...]) -> Intervals:
    """A CPU-only block's host ops with self time (each with its category), those inside its window ``[lo, hi]``
    (ns), as flat arrays like a device block's kernels: the timeline draws them on their threads."""
    inside = [(h, c) for h, c in ops if lo <= h.ts and h.ts + h.dur <= hi]
    start = array("q", (h.ts for h, _ in inside))
    return Intervals(origin_ns=origin_ns, start_ns=start, end_ns=array("q", (h.ts + h.dur for h, _ in inside)),
                     category=bytes(_CATEGORY_INDEX[c] for _, c in inside),
                     stream=array("q", (h.thread for h, _ in inside)),
                     streams=threads, names=tuple(h.name for h, _ in inside))
