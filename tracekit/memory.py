"""How tracekit manages the process's memory: the one pause of the cyclic GC (:func:`one_file`), and glibc's malloc
settings.

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


_held = [0]  # the pid inside one_shot(): there a pause, once made, lasts until the command ends (not in its forks)


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic GC off for the block, back to what it was afterwards (nested pauses keep it off).

    The primitive under :func:`one_file`; call that instead, so that the GC keeps one owner.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was and _held[0] != os.getpid():
            gc.enable()


@contextmanager
def one_file(tidy: bool = False, freeze: bool = False) -> Iterator[None]:
    """Around one trace file's load and attribution (tracekit.run.tasks.attribute_one): the one owner of the pause.

    Why one owner, and why there: that is where the millions of objects are made, in every way a file is read
    (serially, in a pool worker, on a Dask worker, from a URL), so one pause covers them all, and the GC is not
    switched off and on again by the CLI, the loader and the task at nested levels. Outside it (a notebook's
    own work) the GC runs as usual.

    ``tidy``: another file was read in this process before (or this is a worker, whose fork inherited its
    parent's objects): collect first, while only the finished results are alive, so that each file's model's
    reference cycles (about 40 MB per 100 MB of JSON) do not pile up over a folder of ranks. ``freeze`` (a
    worker's tasks): what survives that collection is frozen (``gc.freeze``), so the next one scans only what
    was made since, not again a Dask worker's own 60k objects (30 ms a task). One big file's decoding workers
    (tracekit.io.pload) fork inside the pause and need neither: each window's builder is released.
    """
    if tidy:
        gc.collect()
        if freeze:
            gc.freeze()
    with gc_paused():
        yield


@contextmanager
def one_shot() -> Iterator[None]:
    """A command whose process ends once its output is written (the CLI's): a pause that :func:`one_file` makes
    lasts to the end of the block instead of its own; the GC is back to what it was afterwards.

    Why: the models' reference cycles are garbage that the process's exit frees for nothing; with the GC back on
    after the file, its first collection would scan them all (millions of objects) while the result is rendered.
    This pauses nothing itself: a command that reads no trace keeps the GC on.
    """
    was, _held[0] = gc.isenabled(), os.getpid()
    try:
        yield
    finally:
        _held[0] = 0
        if was:
            gc.enable()


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
