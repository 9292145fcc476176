"""How one set of files is read: the :class:`Plan` every file's task gets whole, and its defaults.

Two numbers, two meanings (docs/performance.md, "Parallelism"): ``jobs`` is how many files are analysed at once (pool
processes, or a local Dask cluster's workers); ``decode_workers`` is how many processes decode one big file
(tracekit.io.pload) when the input is a single file. The CLI and ``tracekit.analyze`` take the same defaults
from here (None: :func:`default_jobs`, :func:`default_decode_workers`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from ..analysis.classify import Classifier
from ..io.pload import MAX_DEFAULT_WORKERS
from .inputs import ProgressFn


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_jobs() -> int:
    """Files at once: one process per CPU."""
    return cpus()


def default_decode_workers() -> int:
    """Processes decoding one big file: one per CPU, at most ``pload.MAX_DEFAULT_WORKERS``.

    Why the cap: past a few workers the parent's reading and merging is the bottleneck. A file is decoded
    in several processes only when it is big enough to pay (``pload.worth_parallel``).
    """
    return min(cpus(), MAX_DEFAULT_WORKERS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """How one set of files is read: what to run, where, and with how many processes.

    It travels whole to every file's :func:`~tracekit.run.tasks.attribute_one`, here or in a worker (it pickles:
    a worker gets :meth:`for_workers`, without the progress callback), so no scheduler drops a setting.
    """

    scope: str | None
    classifier: Classifier
    hints: bool
    jobs: int  # files at once
    decode_workers: int  # processes decoding a single file
    progress: ProgressFn | None = None
    captures: tuple[str, ...] = ()  # graph capture trace files (discovered once) for the replays among the files
    in_worker: bool = False  # read in a pool or Dask worker: tidy the GC before each file (tracekit.memory.one_file)
    whatif: bool = False  # each file's result carries its what-if prediction (the report and the tab; issue 39)
    ops: bool = False  # each file's result carries its op table (``--by op``; issue 42)

    def for_workers(self) -> Plan:
        """The plan a worker runs: no callback (progress is counted here, per finished file), one decoding
        process per file (the files already run in parallel)."""
        return replace(self, progress=None, decode_workers=1, in_worker=True)


def plan(scope: str | None = None, classifier: Classifier | None = None, hints: bool = True,
         jobs: int | None = None, decode_workers: int | None = None, progress: ProgressFn | None = None,
         captures: tuple[str, ...] = (), whatif: bool = False, ops: bool = False) -> Plan:
    """The plan with every default filled in (the same for the CLI and the library). ``captures`` are files,
    as discovery found them (tracekit.run.api). ``whatif``: only the report and the tab ask for the prediction;
    ``ops``: only ``--by op`` asks for the op table."""
    for name, n in (("jobs", jobs), ("decode_workers", decode_workers)):
        if n is not None and n < 1:
            raise ValueError(f"{name}={n}: needs at least 1")
    return Plan(scope=scope, classifier=classifier or Classifier(), hints=hints, jobs=jobs or default_jobs(),
                decode_workers=decode_workers or default_decode_workers(), progress=progress,
                captures=tuple(str(c) for c in captures), whatif=whatif, ops=ops)
