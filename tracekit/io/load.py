"""Load one trace file into :class:`tracekit.model.Trace`: serially, or decoded in worker processes.

The events are mapped and checked at the parse boundary (tracekit.io.builder); the header's few facts here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..errors import TraceFormatError
from ..model import Trace, TraceInfo
from .builder import TraceBuilder
from .graphs import find_graphs
from .paths import check_trace_file
from .read import EventStream


def load_trace(path: str | os.PathLike, progress: Callable[[int, int], None] | None = None,
               decode_workers: int = 1, *, jobs: int | None = None) -> Trace:
    """Stream, decode and model one trace file. ``progress(done, total)`` gets compressed-byte counts.

    ``decode_workers > 1`` decodes a big file's batches in that many processes (tracekit.io.pload); the model
    is the same. Files below ``pload.MIN_PARALLEL`` of JSON are read here: a pool would cost more. ``jobs`` is
    the keyword's old name, still taken from callers of the public ``tracekit.load_trace``.

    The cyclic GC is not paused here: the caller that reads a file owns that (tracekit.memory.one_file).
    """
    if jobs is not None:
        decode_workers = jobs
    p = Path(path)
    check_trace_file(p)  # a FIFO or a device would block or never end; say what it is instead
    info = TraceInfo(source=p.name)
    from .pload import load_parallel, worth_parallel

    if decode_workers > 1 and worth_parallel(p):
        tr, read = load_parallel(TraceBuilder(info), p, progress, decode_workers)
    else:
        tr, read = TraceBuilder(info).build(EventStream(p, progress=progress).batches())
    tr.graphs = find_graphs(tr)
    _header(read.header, info)
    info.warnings[:0] = read.warnings
    info.damaged = info.damaged or read.damaged
    if not tr.host and not tr.device and not tr.runtime:
        if tr.dropped:
            reasons = ", ".join(f"{k}: {v:,}" for k, v in tr.dropped.items())
            raise TraceFormatError(f"{p}: no usable events ({reasons})")
        raise TraceFormatError(f"{p}: trace holds no profiler events")
    return tr


def _header(doc: dict, info: TraceInfo) -> None:
    """Pick the few facts the report header shows; user metadata is never copied."""
    props = doc.get("deviceProperties")
    if isinstance(props, list):
        names = [d["name"].strip() for d in props if isinstance(d, dict) and isinstance(d.get("name"), str)]
        info.gpus = sorted({n for n in names if n})
    for key in ("pytorch_version", "torch_version"):
        if isinstance(doc.get(key), str):
            info.pytorch = doc[key][:40]
    dist = doc.get("distributedInfo")
    rank = dist.get("rank") if isinstance(dist, dict) else None
    if type(rank) is int and 0 <= rank < 1 << 31:  # not bool; a rank, not an arbitrary number
        info.rank = rank
    cuda = doc.get("cuda_runtime_version")
    hip = doc.get("hip_runtime_version")
    if type(cuda) is int and cuda > 0:  # not bool
        info.runtime = f"CUDA {cuda // 1000}.{cuda % 1000 // 10}"
    elif type(hip) is int and hip > 0:
        info.runtime = f"HIP {hip // 10_000_000}.{hip // 100_000 % 100}"
