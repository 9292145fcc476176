"""A folder's files in a process pool (``jobs`` > 1 and more than one file; tracekit.run.execute)."""

from __future__ import annotations

import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import TracekitError
from ..results.attribution import Attribution
from ..workers import worker_init
from .tasks import attribute_one, unusable

if TYPE_CHECKING:
    from .plan import Plan


def attribute_in_pool(files: list[Path], sizes: list[int], names: list[str], how: Plan,
                      keep_going: bool = False) -> list[Attribution | TracekitError]:
    """Files in a pool of ``min(how.jobs, files)`` processes, each read by :func:`~tracekit.run.tasks.attribute_one`
    with the plan whole (``Plan.for_workers``); ``how.progress`` advances as each file finishes (``names``, byte
    ``sizes``); results in file order.

    On a failure, files not yet started are cancelled and the error of the earliest file in
    reading order is raised, as a serial run would have raised it. ``keep_going``: a file that is no usable trace
    (:func:`~tracekit.run.tasks.unusable`) gives its error in its place instead, and the others are read.
    """
    workers = min(how.jobs, len(files))
    with ProcessPoolExecutor(max_workers=workers, initializer=worker_init, initargs=(os.getpid(),)) as pool:
        try:
            return _run(pool, files, sizes, names, how, keep_going)
        except BaseException:  # Ctrl-C (or any error): end the workers now, not when their files are done
            _stop(pool)
            raise


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and terminate the workers (the executor's shutdown would wait for them)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(5)


def _run(pool: ProcessPoolExecutor, files: list[Path], sizes: list[int], names: list[str],
         how: Plan, keep_going: bool) -> list[Attribution | TracekitError]:
    """Submit every file, follow them as they finish, and raise the first failure in reading order (with
    ``keep_going``, the first that is not an unusable file's)."""
    sent = how.for_workers()
    futures: list[Future[Attribution]] = [pool.submit(attribute_one, f, sent) for f in files]
    pending = _follow(futures, sizes, names, how, keep_going)
    if pending is not None:
        for fut in pending:
            fut.cancel()
        wait(pending)
        _raise_first(files, futures, keep_going)
    return [_outcome(fut) for fut in futures]


def _outcome(fut: Future[Attribution]) -> Attribution | TracekitError:
    """A finished file's result, or (``keep_going``: the only errors left) its error."""
    exc = fut.exception()
    return exc if isinstance(exc, TracekitError) else fut.result()


def _follow(futures: list[Future[Attribution]], sizes: list[int], names: list[str],
            how: Plan, keep_going: bool = False) -> set[Future[Attribution]] | None:
    """Wait for the files as they finish, reporting progress; at the first failure, the futures still pending
    (None when every file finished well)."""
    index = {fut: i for i, fut in enumerate(futures)}
    pending = set(futures)
    total, done_bytes, failed = sum(sizes), 0, False
    while pending and not failed:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        for fut in sorted(done, key=index.__getitem__):
            exc = fut.exception()
            if exc is not None and not (keep_going and unusable(exc)):
                failed = True
                continue
            done_bytes += sizes[index[fut]]
            if how.progress is not None:
                how.progress(names[index[fut]], done_bytes, total)
    return pending if failed else None


def _raise_first(files: list[Path], futures: list[Future[Attribution]], keep_going: bool = False) -> None:
    """The error of the earliest file that failed (``keep_going``: of those that are not unusable files); a killed
    worker's as one line, without its traceback."""
    for i, fut in enumerate(futures):
        exc = None if fut.cancelled() else fut.exception()
        if keep_going and exc is not None and unusable(exc):
            continue
        if isinstance(exc, BrokenProcessPool):  # killed (out of memory?): no traceback for that
            raise TracekitError(f"{files[i]}: the process reading it died ({exc}); "
                                "try --jobs 1 or a machine with more memory") from None
        if exc is not None:
            raise exc
