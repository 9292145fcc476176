"""A folder's files analysed on a Dask cluster (``--dask``), merged on the client like a local run.

The optional extra ``tracekit[dask]`` (dask[distributed]); imported only when ``--dask`` is given.
Each file is one task that reads the file on a worker (a shared path, or an fsspec URL the
workers can open) and returns that file's :class:`~tracekit.results.Attribution`; the client puts
the results back in file order, so the merge is the one ``--jobs`` does. A worker that dies
mid-task has its tasks rerun by the scheduler (and ``retries`` covers a task that fails for
another reason), and each file's result is taken from its own future exactly once, so nothing is
lost or counted twice. A file that cannot be analysed comes back as its one-line error: the
other files still report, and the run exits 3 (results from incomplete input).
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Any

from ..errors import TracekitError, UsageError
from ..memory import M_ARENA_MAX, mallopt
from .tasks import attribute_or_error

if TYPE_CHECKING:
    from ..results.attribution import Attribution
    from .plan import Plan

RETRIES = 2  # Dask's own retries of a task that raised; a worker's death is rescheduled by the scheduler
_LOCAL = re.compile(r"^local(?::(\d+))?$")
_CONNECT_TIMEOUT_S = 30
# A LocalCluster's settings that differ from Dask's defaults: (key, value, why). Each is applied only
# while its value is still Dask's default, so whatever the user set in Dask's config files or
# environment is kept; forked workers inherit them. Measured on 16 ranks x 100 MB, 2 workers on
# 2 cores (benchmarks/README.md).
_START_METHOD = "distributed.worker.multiprocessing-method"  # fork: Linux only
LOCAL_SETTINGS: tuple[tuple[str, object, str], ...] = (
    (_START_METHOD, "fork",
     "a spawned worker is a fresh interpreter that imports distributed, then tracekit's pipeline: "
     "1.3 s of an 11.2 s run; a forked one inherits both (Linux only; Dask supports the setting)"),
    ("distributed.admin.tick.interval", "1s",
     "the event loops' 20 ms ticks, the 100 ms memory monitor and the 10 ms statistical profiler "
     "take the GIL from the task thread: together 0.45 s of a 10.2 s run"),
    ("distributed.worker.memory.monitor-interval", "1s", "(as above)"),
    ("distributed.admin.system-monitor.interval", "2s", "(as above)"),
    ("distributed.worker.profile.enabled", False, "(as above; there is no dashboard to show it)"),
)


def _local_settings(dask: Any) -> dict[str, object]:
    """The LOCAL_SETTINGS whose keys still hold Dask's default value (fork only on Linux)."""
    defaults = dask.config.merge(*dask.config.defaults)
    out: dict[str, object] = {}
    for key, value, _why in LOCAL_SETTINGS:
        if key == _START_METHOD and not sys.platform.startswith("linux"):
            continue
        current = dask.config.get(key, default=None)
        if current is not None and current == dask.config.get(key, default=None, config=defaults):
            out[key] = value
    return out


def _one_malloc_arena() -> bool:
    """Have this process, and the workers it forks, allocate from glibc's main arena only; True if set.

    A Dask task runs on a worker's executor thread, and glibc gives each new thread its own arena:
    64 MB heaps that are unmapped as soon as they empty, so each file's model, freed at the end of
    its task, is faulted back in page by page by the next one. On 16 ranks x 100 MB that was 35-45k
    page faults and 0.9 s a file, against 2-5k and 0.7 s on a pool worker's main thread (which uses
    the main arena). It must be set before any thread allocates, so before distributed is imported
    (a forked worker's new threads then find no other arena to take); ``MALLOC_ARENA_MAX`` set by the
    user wins. Only while this is the process's only thread (the CLI): in a notebook other threads
    already have arenas, and their allocations would all contend for one lock. Linux with glibc
    only; for a remote cluster, set ``MALLOC_ARENA_MAX=1`` on the workers.
    """
    import threading

    if "MALLOC_ARENA_MAX" in os.environ or threading.active_count() > 1:
        return False
    return mallopt(M_ARENA_MAX, 1)


def parse_address(address: str) -> tuple[str | None, int | None]:
    """``local`` / ``local:N`` -> (None, N or None); anything else is a scheduler address, as given."""
    m = _LOCAL.match(address.strip())
    if m is None:
        if not address.strip():
            raise UsageError("--dask: empty address; use tcp://HOST:PORT, local or local:N")
        return address.strip(), None
    n = int(m.group(1)) if m.group(1) else None
    if n is not None and n < 1:
        raise UsageError(f"--dask {address}: a local cluster needs at least one worker")
    return None, n


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise UsageError("--dask needs Dask's distributed scheduler: pip install 'tracekit[dask]'") from None
    return distributed


class _Connection:
    """A Client on the scheduler at ``address``, or on a LocalCluster of worker processes on 127.0.0.1."""

    def __init__(self, address: str, default_workers: int) -> None:
        remote, n = parse_address(address)
        if remote is None:
            _one_malloc_arena()  # before distributed starts a thread
        distributed = _import_distributed()
        self.cluster: Any = None
        self._config: Any = None
        try:
            if remote is None:
                import logging

                import dask

                # kept for the connection's life: a nanny restarting a dead worker starts it the same way
                self._config = dask.config.set(_local_settings(dask))
                # Our own workers' logs stay quiet: a failed task or a dead worker comes back through its
                # future (an error line per file); at close a heartbeat in flight logged a traceback.
                self.cluster = distributed.LocalCluster(
                    n_workers=n or default_workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                    dashboard_address=None, worker_dashboard_address=None, silence_logs=logging.CRITICAL)
                self.client = distributed.Client(self.cluster, set_as_default=False)
            else:
                self.client = distributed.Client(remote, timeout=_CONNECT_TIMEOUT_S, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            self.close()
            raise TracekitError(f"--dask {address}: cannot reach the Dask scheduler ({exc})") from None

    def close(self) -> None:
        for thing in (getattr(self, "client", None), self.cluster):
            if thing is not None:
                try:
                    thing.close()
                except Exception:  # closing must not hide the result or the real error
                    pass
        if self._config is not None:
            self._config.__exit__(None, None, None)
            self._config = None


def attribute_on_dask(files: list[str], sizes: list[int], how: Plan,
                      address: str) -> tuple[list[Attribution | None], list[str]]:
    """Every file (a path or a URL) as one task that reads it with the plan whole (``Plan.for_workers``); a local
    cluster has ``how.jobs`` workers by default. (Results in file order, None for a failed file; one error line
    per failure.)"""
    conn = _Connection(address, how.jobs)
    distributed = _import_distributed()
    progress = how.progress
    try:
        futures = conn.client.map(attribute_or_error, files, plan=how.for_workers(), retries=RETRIES, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[Attribution | None] = [None] * len(files)
        errors: dict[int, str] = {}
        total, done_bytes = sum(sizes), 0
        for fut in distributed.as_completed(futures, loop=conn.client.loop):
            i = index[fut.key]
            try:
                value = fut.result()
            except Exception as exc:  # KilledWorker (died too often), or an unexpected failure after retries
                why = " ".join(str(exc).split())[:300]
                value = f"{files[i]}: failed on the Dask cluster ({type(exc).__name__}: {why})"
            if isinstance(value, str):
                errors[i] = value
            else:
                results[i] = value
            done_bytes += sizes[i]
            if progress is not None:
                progress(os.path.basename(files[i]), done_bytes, total)
        return results, [errors[i] for i in sorted(errors)]
    finally:
        conn.close()
