"""How big should the pieces be that one batch of events is decoded and ingested in (``read.PIECE``)?

    python benchmarks/pieces.py TRACE.json [--mb 300] [--reps 2] [--pieces 256,512,1024,4096,16384]

A worker gets 16 MB windows (``pload.PARALLEL_CHUNK``). For each piece size (KB) this decodes the first
``--mb`` MB of windows of TRACE in pieces of that size (``read.decode_pieces``) and ingests each piece as
the worker does (``load._Builder``, one per window), and prints the CPU seconds per GB of JSON spent in
decoding and in ingesting, best of ``--reps`` passes. A piece as big as the window is the whole window
at once. Decoded events take about twice their JSON: a piece that fits the CPU's cache is ingested
from the cache; a 16 MB window's 35 MB of objects is ingested from memory.
"""

from __future__ import annotations

import argparse
import gc
import mmap
import time
from pathlib import Path

from tracekit.io import pload, read
from tracekit.io.builder import TraceBuilder as _Builder
from tracekit.model import TraceInfo


def _windows(path: Path, mb: int) -> list[bytes]:
    out: list[bytes] = []
    total = 0
    for piece in read.EventStream(path, chunk=pload.PARALLEL_CHUNK).windows():
        if not isinstance(piece, memoryview) or total > mb << 20:
            break
        out.append(bytes(piece))
        total += len(piece)
    return out


def _pass(windows: list[bytes], piece_kb: int) -> tuple[float, float]:
    """(decode, ingest) CPU seconds over all windows, each decoded in pieces of ``piece_kb`` KB."""
    read.PIECE = piece_kb << 10
    decode = ingest = 0.0
    for w in windows:
        ring = mmap.mmap(-1, len(w))
        ring[:] = w
        b = _Builder(TraceInfo(source=""))
        pieces = read.decode_pieces(ring, len(w) - 1)
        while True:
            t0 = time.process_time()
            try:
                events, _, _ = next(pieces)
            except StopIteration as stopped:
                assert stopped.value == len(w) - 1, "a piece did not decode"
                break
            t1 = time.process_time()
            b._ingest(events)
            t2 = time.process_time()
            del events
            decode += t1 - t0
            ingest += t2 - t1
        b.release()
        del b
        ring.close()
    return decode, ingest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--mb", type=int, default=300, help="MB of windows to decode per pass")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--pieces", default="256,512,1024,4096,16384", help="piece sizes in KB, comma separated")
    a = ap.parse_args()
    gc.disable()  # as in the workers (forked from the CLI, whose GC is paused)
    windows = _windows(a.trace, a.mb)
    gb = sum(map(len, windows)) / 1e9
    sizes = [int(s) for s in a.pieces.split(",")]
    best: dict[int, tuple[float, float]] = {}
    for _ in range(a.reps):  # interleaved: each rep runs every size once
        for kb in sizes:
            d, i = _pass(windows, kb)
            old = best.get(kb)
            best[kb] = (d, i) if old is None or d + i < sum(old) else old
    print(f"{len(windows)} windows, {gb * 1000:.0f} MB of JSON; CPU seconds per GB, best of {a.reps}")
    print(f"{'piece KB':>9} {'decode':>8} {'ingest':>8} {'both':>8}")
    for kb in sizes:
        d, i = best[kb]
        print(f"{kb:>9} {d / gb:8.2f} {i / gb:8.2f} {(d + i) / gb:8.2f}")


if __name__ == "__main__":
    main()
