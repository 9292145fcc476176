"""A set of inputs analysed, one result per file, merged in file order: here, in a process pool, or on Dask.

Two numbers, two meanings (README, "Parallelism"): ``jobs`` is how many files are analysed at once (pool
processes, or a local Dask cluster's workers); ``decode_workers`` is how many processes decode one big file
(tracekit.io.pload) when the input is a single file. The CLI and ``tracekit.analyze`` take the same defaults
from here (None: :func:`default_jobs`, :func:`default_decode_workers`). Results are identical to a serial run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..analysis.attribute import merge
from ..analysis.classify import Classifier
from ..errors import TracekitError, TraceReadError
from ..io.pload import MAX_DEFAULT_JOBS
from ..memory import collect_between_files
from ..results.attribution import Attribution
from ..results.ranks import rank_view
from .inputs import Inputs, ProgressFn
from .measured import measured_beside
from .tasks import attribute_file, dask_task


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
    """Processes decoding one big file: one per CPU, at most ``pload.MAX_DEFAULT_JOBS``.

    Why the cap: past a few workers the parent's reading and merging is the bottleneck. A file is decoded
    in several processes only when it is big enough to pay (``pload.worth_parallel``).
    """
    return min(cpus(), MAX_DEFAULT_JOBS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """How one set of files is read: what to run, where, and with how many processes."""

    scope: str | None
    classifier: Classifier
    hints: bool
    jobs: int  # files at once
    decode_workers: int  # processes decoding a single file
    progress: ProgressFn | None = None
    captures: tuple[str, ...] = ()  # graph capture traces (files or folders) for the replays among the files


def plan(scope: str | None = None, classifier: Classifier | None = None, hints: bool = True,
         jobs: int | None = None, decode_workers: int | None = None, progress: ProgressFn | None = None,
         captures: tuple[str, ...] = ()) -> Plan:
    """The plan with every default filled in (the same for the CLI and the library)."""
    for name, n in (("jobs", jobs), ("decode_workers", decode_workers)):
        if n is not None and n < 1:
            raise ValueError(f"{name}={n}: needs at least 1")
    return Plan(scope=scope, classifier=classifier or Classifier(), hints=hints, jobs=jobs or default_jobs(),
                decode_workers=decode_workers or default_decode_workers(), progress=progress,
                captures=tuple(str(c) for c in captures))


def attribute_inputs(found: Inputs, how: Plan, dask: str | None = None) -> Attribution:
    """Attribute every file of ``found`` and merge them in file order.

    ``progress(name, done, total)`` counts bytes over all files: per chunk when serial, per finished file from
    a pool or a cluster. ``dask`` (a scheduler address, ``local`` or ``local:N``) runs each file as a task on a
    Dask cluster (tracekit.run.cluster); there a file that fails is named in ``warnings`` (the result is
    ``incomplete``) and the others still report. Two or more files also get the per-rank view.
    """
    if dask is not None:
        parts, files, failed = _on_dask(found, how, dask)
    else:
        parts, files, failed = _here(found.files, found.urls, how), found.files, []
    result = parts[0] if len(parts) == 1 else merge(parts, source=found.label)
    if len(parts) > 1:
        result.ranks = rank_view(parts, files, found.path)
    result.warnings[:0] = found.warnings + [f"{w}; skipped" for w in failed]
    result.incomplete = result.incomplete or found.incomplete or bool(failed)
    if not found.urls:
        result.measured, notes = measured_beside(files)
        result.warnings += notes
    return result


def attribute_files(files: list[Path], how: Plan) -> list[Attribution]:
    """One result per file, in file order (unmerged): run folders (tracekit.run.runs) group them their own way."""
    return _here(files, [], how)


def _here(files: list[Path], urls: list[str], how: Plan) -> list[Attribution]:
    """Each file analysed by this machine: one after the other, or in a process pool."""
    if urls:
        return _urls(files, urls, how)
    sizes = [_size(f) for f in files]
    if min(how.jobs, len(files)) > 1:
        from .pool import attribute_in_pool

        return attribute_in_pool(files, sizes, how.scope, how.classifier, min(how.jobs, len(files)), how.progress,
                                 how.hints, how.captures)
    return _serial(files, sizes, how)


def _serial(files: list[Path], sizes: list[int], how: Plan) -> list[Attribution]:
    """Files one after the other, here; a single file decoded by ``decode_workers`` processes."""
    parts: list[Attribution] = []
    total, before = sum(sizes), 0
    decode = how.decode_workers if len(files) == 1 else 1
    for i, (f, size) in enumerate(zip(files, sizes)):
        if i:
            collect_between_files()
        report = None
        if how.progress is not None:
            def report(done: int, _total: int, _name: str = f.name, _before: int = before,
                       _progress: ProgressFn = how.progress) -> None:
                _progress(_name, _before + done, total)
        parts.append(attribute_file(f, how.scope, how.classifier, report, how.hints, decode, how.captures))
        before += size
    return parts


def _urls(files: list[Path], urls: list[str], how: Plan) -> list[Attribution]:
    """URLs read here through fsspec, one after the other; progress counts files."""
    parts = []
    for i, url in enumerate(urls):
        if i:
            collect_between_files()
        one = dask_task(url, how.scope, how.classifier, how.hints)
        if isinstance(one, str):
            raise TraceReadError(one)
        parts.append(one)
        if how.progress is not None:
            how.progress(files[i].name, i + 1, len(files))
    return parts


def _on_dask(found: Inputs, how: Plan, dask: str) -> tuple[list[Attribution], list[Path], list[str]]:
    """(results of the files that were analysed, those files, one-line errors of the files that failed)."""
    from .cluster import attribute_on_dask

    files = found.files
    sizes = [1] * len(files) if found.urls else [_size(f) for f in files]  # URLs: progress counts files
    names = found.urls or [str(f) for f in files]
    got, failed = attribute_on_dask(names, sizes, how.scope, how.classifier, how.hints, dask, how.progress, how.jobs,
                                    how.captures)
    if not any(r is not None for r in got):
        raise TracekitError(failed[0] if len(failed) == 1 else
                            f"{found.path}: none of its {len(files)} trace files could be analysed ({failed[0]})")
    return [r for r in got if r is not None], [f for f, r in zip(files, got) if r is not None], failed


def _size(f: Path) -> int:
    try:
        return os.stat(f).st_size
    except OSError:
        return 0
