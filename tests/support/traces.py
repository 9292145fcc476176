"""The tests' one trace reader (raw JSON, never through tracekit) and the reader-size switch.

Expected figures are worked out from the file itself: ``read_events`` hands the events as the profiler wrote
them, gzip or not (told by the magic bytes, as tracekit tells it, whatever the file is called).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: Path) -> bytes:
    """The file's JSON text, decompressed when it is gzip."""
    raw = Path(path).read_bytes()
    return gzip.decompress(raw) if raw[:2] == GZIP_MAGIC else raw


def read_doc(path: Path, exact: bool = False) -> Any:
    """The whole JSON document. ``exact``: floats as ``Decimal`` (µs timestamps near 1e12 lose ns as floats)."""
    data = read_bytes(path)
    return json.loads(data, parse_float=Decimal) if exact else orjson.loads(data)


def read_events(path: Path, cats: Iterable[str] | None = None, exact: bool = False) -> list[dict]:
    """The ``traceEvents`` of one file (a bare JSON array is its own events); only those whose ``cat`` is in
    ``cats`` when given."""
    doc = read_doc(path, exact=exact)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    if cats is None:
        return events
    keep = set(cats)
    return [e for e in events if e.get("cat") in keep]


def ns_of(ts: float) -> int:
    """A written ts (µs) as exact integer ns (Decimal: epoch-sized floats lose ns in float arithmetic)."""
    return round(Decimal(repr(ts)) * 1000)


def busy_union(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals: busy time counted once where they overlap (exact
    for integer ns, epoch-sized ones too: integers in, an integer out)."""
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def independent_block(events: list[dict], name: str, nth: int) -> dict:
    """Span, busy and idle of the ``nth`` ``user_annotation`` called ``name``, straight from the JSON:
    the kernels launched (correlation) from inside its host range on its thread, and the device work
    queued before its first kernel (host time before that ends is queueing, docs/attribution.md)."""
    ann = [e for e in events if e.get("cat") == "user_annotation" and e["name"] == name]
    ann.sort(key=lambda e: e["ts"])
    a = ann[nth]
    h0, h1 = a["ts"], a["ts"] + a["dur"]
    corr = {e["args"]["correlation"] for e in events
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("tid") == a["tid"]
            and h0 <= e["ts"] and e["ts"] + e.get("dur", 0) <= h1 and "correlation" in e.get("args", {})}
    dev = [e for e in events if e.get("cat") in DEVICE_CATS]
    mine = [e for e in dev if e["args"].get("correlation") in corr]
    d0 = min(e["ts"] for e in mine)
    d1 = max(e["ts"] + e["dur"] for e in mine)
    free = max((e["ts"] + e["dur"] for e in dev if e["ts"] < d0), default=None)
    start = d0 if h0 >= d0 else max(h0, min(free, d0) if free is not None else h0)
    span = max(d1, h1) - start
    busy = busy_union([(e["ts"], e["ts"] + e["dur"]) for e in mine])
    return {"span": span, "busy": busy, "idle": span - busy, "kernels": len(mine), "host_start": h0, "free": free,
            "start": start, "end": max(d1, h1), "intervals": sorted((e["ts"], e["ts"] + e["dur"]) for e in mine)}


@contextmanager
def chunk_size(chunk: int) -> Iterator[list[int]]:
    """Make the loader read in ``chunk``-byte windows, through ``EventStream``'s own ``chunk`` parameter.

    Yields the list of chunk sizes the streams were built with, so a test can assert that its
    setting reached the reader (a renamed parameter must fail the test, not silently test 32 MB).
    The reader's other sizes shrink with it: its batches are decoded in pieces of a quarter chunk, and
    the events before the last one are cut off at the end of any file over a chunk (read._tail_cut).
    """
    from tracekit.io import load, read

    used: list[int] = []
    base = load.EventStream

    class SmallChunks(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: object, **kw: object) -> None:
            kw["chunk"] = chunk
            super().__init__(*args, **kw)
            used.append(self.chunk)

    load.EventStream = SmallChunks  # type: ignore[misc]
    sizes = read.PIECE, read._TAIL_WINDOW
    read.PIECE, read._TAIL_WINDOW = max(64, chunk // 4), chunk
    try:
        yield used
    finally:
        load.EventStream = base  # type: ignore[misc]
        read.PIECE, read._TAIL_WINDOW = sizes
