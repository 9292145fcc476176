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
from .tasks import attribute_one

if TYPE_CHECKING:
    from .plan import Plan


def attribute_in_pool(files: list[Path], sizes: list[int], names: list[str], how: Plan) -> list[Attribution]:
    """Files in a pool of ``min(how.jobs, files)`` processes, each read by :func:`~tracekit.run.tasks.attribute_one`
    with the plan whole (``Plan.for_workers``); ``how.progress`` advances as each file finishes (``names``, byte
    ``sizes``); results in file order.

    On a failure, files not yet started are cancelled and the error of the earliest file in
    reading order is raised, as a serial run would have raised it.
    """
    workers = min(how.jobs, len(files))
    with ProcessPoolExecutor(max_workers=workers, initializer=worker_init, initargs=(os.getpid(),)) as pool:
        try:
            return _run(pool, files, sizes, names, how)
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
         how: Plan) -> list[Attribution]:
    """Submit every file, follow them as they finish, and raise the first failure in reading order."""
    sent = how.for_workers()
    futures: list[Future[Attribution]] = [pool.submit(attribute_one, f, sent) for f in files]
    pending = _follow(futures, sizes, names, how)
    if pending is not None:
        for fut in pending:
            fut.cancel()
        wait(pending)
        _raise_first(files, futures)
    return [fut.result() for fut in futures]


def _follow(futures: list[Future[Attribution]], sizes: list[int], names: list[str],
            how: Plan) -> set[Future[Attribution]] | None:
    """Wait for the files as they finish, reporting progress; at the first failure, the futures still pending
    (None when every file finished well)."""
    index = {fut: i for i, fut in enumerate(futures)}
    pending = set(futures)
    total, done_bytes, failed = sum(sizes), 0, False
    while pending and not failed:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        for fut in sorted(done, key=index.__getitem__):
            if fut.exception() is not None:
                failed = True
                continue
            done_bytes += sizes[index[fut]]
            if how.progress is not None:
                how.progress(names[index[fut]], done_bytes, total)
    return pending if failed else None


def _raise_first(files: list[Path], futures: list[Future[Attribution]]) -> None:
    """The error of the earliest file that failed; a killed worker's as one line, without its traceback."""
    for i, fut in enumerate(futures):
        exc = None if fut.cancelled() else fut.exception()
        if isinstance(exc, BrokenProcessPool):  # killed (out of memory?): no traceback for that
            raise TracekitError(f"{files[i]}: the process reading it died ({exc}); "
                                "try --jobs 1 or a machine with more memory") from None
        if exc is not None:
            raise exc
