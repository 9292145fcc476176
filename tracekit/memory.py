"""How tracekit manages the process's memory: the one place that pauses the cyclic GC, and glibc's malloc settings.

Why the GC is paused: building or analysing a trace makes millions of small objects and no reference
cycles, and each full collection would rescan all of them (superlinear; about 15% of the time on a 200 MB
trace). Reference counting still frees everything. Each caller of ``mallopt`` says why beside its call.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # malloc.h


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic GC off for the block, back to what it was afterwards (nested pauses keep it off)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def collect_between_files(freeze: bool = False) -> None:
    """Free the previous file's model before reading the next one, when the GC is paused.

    The CLI pauses the cyclic GC, and a pool's forked workers inherit that: the reference cycles of each
    file's model would pile up, about 40 MB per 100 MB of JSON read, over a folder of ranks. One collection
    per file, while only the finished results are alive, is cheap. (One big file's decoding workers need
    not: each window's builder is released, tracekit.io.pload.)

    ``freeze`` (a worker's tasks): what survives the collection is then frozen (``gc.freeze``), so the
    next one scans only what was made since, not again a Dask worker's own 60k objects (30 ms a task).
    """
    if not gc.isenabled():
        gc.collect()
        if freeze:
            gc.freeze()


def is_glibc() -> bool:
    """Linux with GNU libc: where ``mallopt`` and these parameters exist."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (OSError, ValueError):  # no such confstr name (musl)
        return False


def mallopt(param: int, value: int) -> bool:
    """``mallopt(param, value)``; False where glibc refused it or is not the C library (musl, macOS, Windows)."""
    if not is_glibc():
        return False
    import ctypes

    try:
        return bool(ctypes.CDLL(None).mallopt(param, value))
    except (OSError, AttributeError):
        return False
