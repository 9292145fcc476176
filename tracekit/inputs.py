"""Which files a run reads, and reading them: discovery, the process pool, progress and merging.

``attribute`` and ``diff`` both go through here, so a folder gets the same warnings, ``--jobs``
and progress line whichever command reads it. Discovery never opens a trace for reading (a FIFO
would block), and never skips anything silently: every entry it leaves out is named in
``Inputs.warnings`` (README, "Exit codes").
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .errors import TraceFormatError, TracekitError, TraceNotFoundError, TraceReadError

if TYPE_CHECKING:
    from concurrent.futures import Future

    from .classify import Classifier
    from .result import Attribution

TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
_PLAIN_SUFFIXES = (".json", ".json.gz")

# (name, bytes done, bytes total): the signature of Progress.update.
ProgressFn = Callable[[str, int, int], None]


@dataclass(slots=True)
class Inputs:
    """The trace files one command-line argument stands for, in reading order."""

    path: Path  # as given
    files: list[Path]
    warnings: list[str] = field(default_factory=list)  # one line per entry skipped or read once for two
    incomplete: bool = False  # something that should have been read was not: results are from damaged input
    # fsspec URLs (s3://, gs://, file://…) of the files, parallel to ``files`` (which then hold the paths
    # relative to the URL given); [] for local paths.
    urls: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.path.name or str(self.path)


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: str | os.PathLike[str]) -> bool:
    """``s3://…``, ``gs://…``, ``file://…``: a location fsspec opens, not a local path."""
    return isinstance(path, str) and _URL.match(path) is not None


def discover(path: str | os.PathLike[str]) -> Inputs:
    """A file is itself; a folder (a TensorBoard run) gives its ``*.pt.trace.json[.gz]``, at any depth.

    A folder without such files falls back to its own top-level ``*.json[.gz]``. Raises a
    :class:`~tracekit.errors.TracekitError` naming the problem when nothing can be read. A URL
    (``is_url``) is listed through fsspec the same way (tracekit.cluster).
    """
    if is_url(path):
        from .cluster import discover_url

        return discover_url(str(path))
    p = Path(path)
    st = _stat(p)
    if stat.S_ISDIR(st.st_mode):
        return _discover_folder(p)
    problem = _not_a_trace(p, st)
    if problem is not None:
        raise problem
    return Inputs(p, [p])


def find_trace_files(path: str | os.PathLike[str]) -> list[Path]:
    """The files :func:`discover` would read (kept for callers of the old ``load.find_trace_files``)."""
    return discover(path).files


def check_trace_file(path: str | os.PathLike[str]) -> None:
    """Raise the accurate error for a path that is not a readable, non-empty regular file.

    ``load_trace`` calls this before opening: opening a FIFO would block, a device never ends.
    """
    p = Path(path)
    problem = _not_a_trace(p, _stat(p))
    if problem is not None:
        raise problem


def _stat(p: Path) -> os.stat_result:
    """``os.stat`` with the failure worded for a user: a loop or a dangling link is not 'missing'."""
    try:
        return os.stat(p)
    except OSError as exc:
        raise _access_error(p, exc) from None


def _access_error(p: Path, exc: OSError) -> TraceNotFoundError | TraceReadError:
    if exc.errno == errno.ELOOP:
        return TraceReadError(f"{p}: symlink loop")
    if exc.errno == errno.ENOENT:
        if os.path.islink(p):
            return TraceNotFoundError(f"{p}: dangling symlink (points to {os.readlink(p)}, which does not exist)")
        return TraceNotFoundError(f"{p}: no such file or directory")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return TraceReadError(f"{p}: permission denied")
    return TraceReadError(f"{p}: cannot access ({exc.strerror or exc})")


def _not_a_trace(p: Path, st: os.stat_result) -> TraceReadError | TraceFormatError | None:
    """Why ``p`` (already stat'ed, symlinks followed) cannot be read as a trace, or None."""
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        return TraceReadError(f"{p}: is a folder, not a trace file")
    if stat.S_ISFIFO(mode):
        return TraceReadError(f"{p}: is a FIFO, not a trace file")
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return TraceReadError(f"{p}: is a device, not a trace file")
    if stat.S_ISSOCK(mode):
        return TraceReadError(f"{p}: is a socket, not a trace file")
    if not stat.S_ISREG(mode):
        return TraceReadError(f"{p}: is not a regular file")
    if not os.access(p, os.R_OK):
        return TraceReadError(f"{p}: permission denied")
    if st.st_size == 0:
        return TraceFormatError(f"{p}: file is empty")
    return None


def _discover_folder(root: Path) -> Inputs:
    found = Inputs(root, [])
    named: list[Path] = []
    _walk(root, named, found)
    candidates = sorted(named)
    if not candidates:  # a folder of plainly named traces is still worth reading
        try:
            with os.scandir(root) as it:
                candidates = sorted(root / e.name for e in it if e.name.endswith(_PLAIN_SUFFIXES)
                                    and not _is_dir(e))
        except OSError as exc:
            raise _access_error(root, exc) from None
    found.files = _usable(candidates, found)
    if not found.files:
        why = f" ({found.warnings[0]})" if found.warnings else ""
        if candidates:
            raise TraceReadError(f"{root}: none of its {len(candidates)} trace files can be read{why}")
        raise TraceNotFoundError(f"{root}: folder holds no *.pt.trace.json[.gz] files{why}")
    return found


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _walk(folder: Path, out: list[Path], found: Inputs) -> None:
    """Every ``*.pt.trace.json[.gz]`` entry below ``folder``, whatever its type (checked later).

    Like ``Path.rglob``, symlinked folders are not followed (no cycles); unlike it, a folder that
    cannot be listed is reported instead of skipped in silence.
    """
    try:
        with os.scandir(folder) as it:
            entries = list(it)
    except OSError as exc:
        found.warnings.append(f"{folder}: cannot list folder ({exc.strerror or exc}); any traces in it were skipped")
        found.incomplete = True
        return
    for e in entries:
        path = folder / e.name
        if e.is_dir(follow_symlinks=False):
            _walk(path, out, found)
        elif e.name.endswith(TRACE_SUFFIXES):
            out.append(path)


def _usable(candidates: list[Path], found: Inputs) -> list[Path]:
    """The candidates that can be read, each file once.

    ``x.json`` and ``x.json.gz`` side by side are one trace (``gzip -k`` leaves both): the
    uncompressed one is read, as it needs no inflating, unless it cannot be read. Two names
    for one file (a symlink, a hard link) are read once too, under the first name.
    """
    groups: dict[Path, list[Path]] = {}
    for c in candidates:
        key = c.with_name(c.name[:-3]) if c.name.endswith(".gz") else c
        groups.setdefault(key, []).append(c)
    files: list[Path] = []
    seen: dict[tuple[int, int], Path] = {}
    for key in sorted(groups):
        members = sorted(groups[key], key=lambda c: c.name.endswith(".gz"))  # x.json first
        problems: list[str] = []
        chosen = None
        for c in members:
            try:
                st = os.stat(c)
            except OSError as exc:
                problems.append(str(_access_error(c, exc)))
                continue
            problem = _not_a_trace(c, st)
            if problem is not None:
                problems.append(str(problem))
                continue
            chosen = c
            first = seen.setdefault((st.st_dev, st.st_ino), c)
            if first == c:
                files.append(c)
            else:
                found.warnings.append(f"{c}: same file as {first}; read once")
            break
        if chosen is None:
            found.incomplete = True
            found.warnings += [f"{w}; skipped" for w in problems]
            continue
        found.warnings += [f"{w}; skipped, {chosen.name} read instead" for w in problems]
        for c in members[members.index(chosen) + 1:]:
            found.warnings.append(f"{c}: duplicate of {chosen.name}; only {chosen.name} is read")
    return sorted(files)


# ---------------------------------------------------------------------------------------------
# Reading: serial or in a process pool, with one progress line and one merged result


def default_jobs(*found: Inputs) -> int:
    """One process per CPU this process may run on; for a single file, at most ``pload.MAX_DEFAULT_JOBS``.

    A single file is decoded in several processes only when it is big enough to pay
    (``pload.worth_parallel``); past a few workers its parent's reading and merging is the bottleneck.
    """
    try:
        cpus = len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    if found and all(len(f.files) <= 1 for f in found):
        from .pload import MAX_DEFAULT_JOBS

        return min(cpus, MAX_DEFAULT_JOBS)
    return cpus


def attribute_inputs(found: Inputs, scope: str | None = None, classifier: Classifier | None = None,
                     jobs: int = 1, progress: ProgressFn | None = None, hints: bool = True,
                     dask: str | None = None) -> Attribution:
    """Attribute every file of ``found`` and merge them in file order.

    ``jobs > 1`` reads files in that many processes (the classifier travels with each file); the
    result is identical to a serial run. ``progress(name, done, total)`` counts bytes over all
    files: per chunk when serial, per finished file from a pool or a cluster. ``dask`` (a scheduler
    address, ``local`` or ``local:N``) runs each file as a task on a Dask cluster (tracekit.cluster);
    there a file that fails is named in ``warnings`` (the result is ``incomplete``) and the others
    still report. Two or more files also get the per-rank view (tracekit.ranks).
    """
    from .attribute import merge

    parts, files, failed = _attribute_all(found.files, found.urls, found.path, scope, classifier, jobs, progress,
                                          hints, dask)
    result = parts[0] if len(parts) == 1 else merge(parts, source=found.label)
    if len(parts) > 1:
        from .ranks import rank_view

        result.ranks = rank_view(parts, files, found.path)
    result.warnings[:0] = found.warnings + [f"{w}; skipped" for w in failed]
    result.incomplete = result.incomplete or found.incomplete or bool(failed)
    return result


def attribute_files(files: list[Path], scope: str | None = None, classifier: Classifier | None = None,
                    jobs: int = 1, progress: ProgressFn | None = None, hints: bool = True) -> list[Attribution]:
    """One result per file, in file order (unmerged): run folders (tracekit.runs) group them their own way."""
    parts, _, _ = _attribute_all(files, [], None, scope, classifier, jobs, progress, hints, None)
    return parts


def _attribute_all(files: list[Path], urls: list[str], path: Path | None, scope: str | None,
                   classifier: Classifier | None, jobs: int, progress: ProgressFn | None, hints: bool,
                   dask: str | None) -> tuple[list[Attribution], list[Path], list[str]]:
    """(one result per file that was analysed, those files, one-line errors of the files that failed)."""
    from .classify import Classifier

    clf = classifier or Classifier()
    sizes = [1] * len(files) if urls else [_size(f) for f in files]  # URLs: progress counts files
    total = sum(sizes)
    workers = min(jobs, len(files))
    failed: list[str] = []
    if dask is not None:
        from .cluster import attribute_on_dask

        names = urls or [str(f) for f in files]
        got, failed = attribute_on_dask(names, sizes, scope, clf, hints, dask, progress, jobs)
        if not any(r is not None for r in got):
            raise TracekitError(failed[0] if len(failed) == 1 else
                                f"{path}: none of its {len(files)} trace files could be analysed ({failed[0]})")
        files = [f for f, r in zip(files, got) if r is not None]
        parts = [r for r in got if r is not None]
    elif urls:  # read here through fsspec, one after the other
        from .cluster import analyse_file

        parts = []
        for i, url in enumerate(urls):
            if i:
                _collect()
            one = analyse_file(url, scope, clf, hints)
            if isinstance(one, str):
                raise TraceReadError(one)
            parts.append(one)
            if progress is not None:
                progress(files[i].name, i + 1, len(files))
    elif workers > 1:
        parts = _pooled(files, sizes, total, scope, clf, workers, progress, hints)
    else:
        parts = []
        before = 0
        for i, (f, size) in enumerate(zip(files, sizes)):
            if i:
                _collect()
            report = None
            if progress is not None:
                def report(done: int, _total: int, _name: str = f.name, _before: int = before) -> None:
                    progress(_name, _before + done, total)
            parts.append(_attribute_file(f, scope, clf, report, hints, jobs if len(files) == 1 else 1))
            before += size
    return parts, files, failed


def _size(f: Path) -> int:
    try:
        return os.stat(f).st_size
    except OSError:
        return 0


def _attribute_file(path: Path, scope: str | None, classifier: Classifier,
                    progress: Callable[[int, int], None] | None = None, hints: bool = True,
                    jobs: int = 1) -> Attribution:
    """One file, in this process or a worker (module-level, so that it pickles).

    ``jobs > 1``: a big file's batches are decoded in that many processes (tracekit.pload).
    """
    from .attribute import attribute_trace
    from .load import load_trace

    return attribute_trace(load_trace(path, progress=progress, jobs=jobs), scope=scope, classifier=classifier,
                           hints=hints)


def _collect(freeze: bool = False) -> None:
    """Free the previous file's model before reading the next one.

    The CLI pauses the cyclic GC (cli._gc_paused), and a pool's forked workers inherit that: the
    reference cycles of each file's model would pile up, about 40 MB per 100 MB of JSON read, over
    a folder of ranks. One collection per file, while only the finished results are alive, is cheap.
    Dask tasks (tracekit.cluster) call it too. (One big file's decoding workers need not: each
    window's builder is released, tracekit.pload.)

    ``freeze`` (a worker's tasks): what survives the collection is then frozen (``gc.freeze``), so the
    next one scans only what was made since, not again a Dask worker's own 60k objects (30 ms a task).
    """
    import gc

    if not gc.isenabled():
        gc.collect()
        if freeze:
            gc.freeze()


def _attribute_file_fresh(path: Path, scope: str | None, classifier: Classifier, hints: bool) -> Attribution:
    """``_attribute_file`` in a pool worker, after collecting the previous file's garbage."""
    _collect(freeze=True)
    return _attribute_file(path, scope, classifier, None, hints)


def _pooled(files: list[Path], sizes: list[int], total: int, scope: str | None, clf: Classifier,
            workers: int, progress: ProgressFn | None, hints: bool = True) -> list[Attribution]:
    """Files in a process pool; progress advances as each file finishes; results in file order.

    On a failure, files not yet started are cancelled and the error of the earliest file in
    reading order is raised, as a serial run would have raised it.
    """
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures: list[Future[Attribution]] = [pool.submit(_attribute_file_fresh, f, scope, clf, hints) for f in files]
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
            for i, fut in enumerate(futures):
                exc = None if fut.cancelled() else fut.exception()
                if isinstance(exc, BrokenProcessPool):  # killed (out of memory?): no traceback for that
                    raise TracekitError(f"{files[i]}: the process reading it died ({exc}); "
                                        "try --jobs 1 or a machine with more memory") from None
                if exc is not None:
                    raise exc
        return [fut.result() for fut in futures]
