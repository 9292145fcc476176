"""A set of inputs analysed, one result per file, merged in file order: here, in a process pool, or on Dask.

Each file is read by :func:`~tracekit.run.tasks.attribute_one` with the run's :class:`~tracekit.run.plan.Plan`
whole, whichever scheduler runs it. Results are identical to a serial run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..analysis.attribute import merge
from ..errors import TracekitError
from ..results.attribution import Attribution
from ..results.ranks import rank_view
from .inputs import Inputs, ProgressFn
from .measured import measured_beside
from .plan import Plan, cpus, default_decode_workers, default_jobs, plan  # noqa: F401  (the run's plan, for callers)
from .tasks import attribute_one, unusable


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
        parts, files, failed = [p for p in _here(found, how) if isinstance(p, Attribution)], found.files, []
    result = parts[0] if len(parts) == 1 else merge(parts, source=found.label)
    if len(parts) > 1:
        result.ranks = rank_view(parts, files, found.path)
    result.warnings[:0] = found.warnings + [f"{w}; skipped" for w in failed]
    result.incomplete = result.incomplete or found.incomplete or bool(failed)
    if not found.urls:
        result.measured, notes = measured_beside(files)
        result.warnings += notes
    return result


def attribute_files(files: list[Path], how: Plan, *, keep_going: bool = False) -> list[Attribution | TracekitError]:
    """One result per file, in file order (unmerged): run folders (tracekit.run.runs) group them their own way.

    ``keep_going``: a file that is no usable trace (:func:`~tracekit.run.tasks.unusable`) gives its error in its
    place and the other files are still read (``--by run`` skips that run); otherwise the error is raised."""
    return _here(Inputs(path=Path("."), files=files), how, keep_going)


def _here(found: Inputs, how: Plan, keep_going: bool = False) -> list[Attribution | TracekitError]:
    """Each file analysed by this machine: one after the other, or in a process pool. URLs count files, local
    files bytes. Errors are in the list only with ``keep_going``."""
    targets: list[Path | str] = list(found.urls or found.files)
    sizes, names = _sizes(found), [f.name for f in found.files]
    if min(how.jobs, len(targets)) > 1 and not found.urls:
        from .pool import attribute_in_pool

        return attribute_in_pool(found.files, sizes, names, how, keep_going)
    return _serial(targets, sizes, names, how, keep_going)


def _serial(targets: list[Path | str], sizes: list[int], names: list[str], how: Plan,
            keep_going: bool = False) -> list[Attribution | TracekitError]:
    """Files one after the other, here; a single file decoded by ``decode_workers`` processes."""
    parts: list[Attribution | TracekitError] = []
    total, before = sum(sizes), 0
    one = how if len(targets) == 1 else replace(how, decode_workers=1)
    for i, (target, size, name) in enumerate(zip(targets, sizes, names)):
        by_file = isinstance(target, str)  # a URL: progress steps once per file
        report = _reporter(how.progress, name, before, total) if how.progress is not None and not by_file else None
        try:
            parts.append(attribute_one(target, one, report, tidy=i > 0))
        except TracekitError as exc:
            if not (keep_going and unusable(exc)):
                raise
            parts.append(exc)
        before += size
        if how.progress is not None and by_file:
            how.progress(name, before, total)
    return parts


def _reporter(progress: ProgressFn, name: str, before: int, total: int) -> Callable[[int, int], None]:
    """One file's byte counts as the run's: ``progress(name, bytes of earlier files + done, total)``."""
    def report(done: int, _total: int) -> None:
        progress(name, before + done, total)
    return report


def _on_dask(found: Inputs, how: Plan, dask: str) -> tuple[list[Attribution], list[Path], list[str]]:
    """(results of the files that were analysed, those files, one-line errors of the files that failed)."""
    from .cluster import attribute_on_dask

    files = found.files
    got, failed = attribute_on_dask(found.urls or [str(f) for f in files], _sizes(found), how, dask)
    kept = [(f, r) for f, r in zip(files, got) if r is not None]
    if not kept:
        raise TracekitError(failed[0] if len(failed) == 1 else
                            f"{found.path}: none of its {len(files)} trace files could be analysed ({failed[0]})")
    return [r for _, r in kept], [f for f, _ in kept], failed


def _sizes(found: Inputs) -> list[int]:
    """What progress counts for each file: its bytes, or 1 for a URL (progress then counts files)."""
    return [1] * len(found.files) if found.urls else [_size(f) for f in found.files]


def _size(f: Path) -> int:
    try:
        return os.stat(f).st_size
    except OSError:
        return 0
