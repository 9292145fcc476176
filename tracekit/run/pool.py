"""A folder's files in a process pool (``jobs`` > 1 and more than one file; tracekit.run.execute)."""

from __future__ import annotations

import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..analysis.classify import Classifier
from ..errors import TracekitError
from ..results.attribution import Attribution
from .inputs import ProgressFn
from ..workers import worker_init
from .tasks import pool_task


def attribute_in_pool(files: list[Path], sizes: list[int], scope: str | None, clf: Classifier, workers: int,
                      progress: ProgressFn | None, hints: bool = True,
                      captures: tuple[str, ...] = ()) -> list[Attribution]:
    """Files in a process pool; progress advances as each file finishes; results in file order.

    On a failure, files not yet started are cancelled and the error of the earliest file in
    reading order is raised, as a serial run would have raised it.
    """
    total = sum(sizes)
    with ProcessPoolExecutor(max_workers=workers, initializer=worker_init, initargs=(os.getpid(),)) as pool:
        try:
            return _run(pool, files, sizes, total, scope, clf, progress, hints, captures)
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


def _run(pool: ProcessPoolExecutor, files: list[Path], sizes: list[int], total: int, scope: str | None,
         clf: Classifier, progress: ProgressFn | None, hints: bool, captures: tuple[str, ...]) -> list[Attribution]:
    """Submit every file, follow them as they finish, and raise the first failure in reading order."""
    futures: list[Future[Attribution]] = [pool.submit(pool_task, f, scope, clf, hints, captures) for f in files]
    index = {fut: i for i, fut in enumerate(futures)}
    pending = set(futures)
    done_bytes = 0
    failed = False
    while pending and not failed:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        for fut in sorted(done, key=index.__getitem__):
            if fut.exception() is not None:
                failed = True
                continue
            done_bytes += sizes[index[fut]]
            if progress is not None:
                progress(files[index[fut]].name, done_bytes, total)
    if failed:
        for fut in pending:
            fut.cancel()
        wait(pending)
        _raise_first(files, futures)
    return [fut.result() for fut in futures]


def _raise_first(files: list[Path], futures: list[Future[Attribution]]) -> None:
    """The error of the earliest file that failed; a killed worker's as one line, without its traceback."""
    for i, fut in enumerate(futures):
        exc = None if fut.cancelled() else fut.exception()
        if isinstance(exc, BrokenProcessPool):  # killed (out of memory?): no traceback for that
            raise TracekitError(f"{files[i]}: the process reading it died ({exc}); "
                                "try --jobs 1 or a machine with more memory") from None
        if exc is not None:
            raise exc
