"""One trace's attribution, the one unit of work every scheduler runs: here, in a pool worker, or as a Dask task.

:func:`attribute_one` takes the target (a local path or an fsspec URL) and the run's whole
:class:`~tracekit.run.execute.Plan`, so serial, pool, Dask and URL runs read a file the same way: the same
scope, classifier, hints and graph captures. Module-level functions, so that they pickle.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..analysis.attribute import attribute_trace
from ..errors import TracekitError, TraceReadError, UsageError
from ..io.load import load_trace
from ..memory import one_file
from ..model import Trace
from ..results.attribution import Attribution
from .inputs import captures_beside, fsspec_module, is_url

if TYPE_CHECKING:
    from .plan import Plan

# (bytes done, bytes total) of the one file being read
FileProgress = Callable[[int, int], None]


def unusable(exc: BaseException) -> bool:
    """Whether ``exc``, one file's failure, leaves the other files worth reading: the file is not a usable trace
    (not JSON, no profiler events, unreadable). Not a usage error (every file would fail alike), nor a worker
    killed for memory (the next may be too)."""
    return isinstance(exc, TracekitError) and not isinstance(exc, UsageError)


def attribute_one(target: Path | str, plan: Plan, report: FileProgress | None = None, *,
                  tidy: bool = False) -> Attribution:
    """One trace file (a local path, or an fsspec URL read through a local copy) attributed as ``plan`` says.

    Every scheduler calls this, in this process or in a worker, with the plan whole; only ``report``, this file's
    own byte count, stays behind (a worker's plan has no callback: see ``Plan.for_workers``). ``tidy``: another
    file was analysed in this process before (or this is a worker): its garbage is collected first. The GC is
    paused here and nowhere else (tracekit.memory.one_file says why).
    """
    with one_file(tidy=tidy or plan.in_worker, freeze=plan.in_worker):
        if isinstance(target, str) and is_url(target):
            return _from_url(target, plan)
        return _from_path(Path(target), plan, report)


def _from_path(path: Path, plan: Plan, report: FileProgress | None) -> Attribution:
    """A local file. ``plan.decode_workers > 1``: a big file's batches are decoded in that many processes
    (tracekit.io.pload). A trace that replays CUDA/HIP graphs reads the traces of their captures:
    ``plan.captures`` (the files ``--capture`` named), else those that ``capture_traces/`` beside it names."""
    tr = load_trace(path, progress=report, decode_workers=plan.decode_workers)
    caps, notes = _captures_for(path, tr, plan.captures, plan.decode_workers)
    result = attribute_trace(tr, scope=plan.scope, classifier=plan.classifier, hints=plan.hints, captures=caps,
                             whatif=plan.whatif, ops=plan.ops)
    for c in caps:  # a damaged capture maps what it kept: the result is then from damaged input (exit 3)
        if c.info.damaged:
            notes.append(f"capture {c.info.source} is damaged ({'; '.join(c.info.warnings) or 'salvaged'}): "
                         f"replayed kernels it lost stay unmapped")
            result.incomplete = True
    result.traces[0].warnings.extend(notes)
    return result


def _captures_for(path: Path, tr: Trace, given: Sequence[str], decode_workers: int) -> tuple[list[Trace], list[str]]:
    """The capture traces for a replay, loaded; and what the reader should know about them. A trace that runs no
    graph needs none (a capture folder beside it is not even read). ``given`` are files (discovered once, by
    ``execute.plan``); those that fail are errors; the ones found beside the trace that fail are named in a
    warning and left out."""
    replays = tr.graphs is not None and any(g.device for g in tr.graphs.launches)
    if not replays:
        return [], ["--capture: this trace replays no CUDA/HIP graph; the capture was not read"] if given else []
    if given:
        return [load_trace(f, decode_workers=decode_workers) for f in map(Path, given) if not _same(f, path)], []
    files, notes = captures_beside(path)
    loaded = []
    for f in files:
        try:
            loaded.append(load_trace(f, decode_workers=decode_workers))
        except TracekitError as exc:
            notes.append(f"capture {f.name} not used: {exc}")
    return loaded, notes


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _from_url(url: str, plan: Plan) -> Attribution:
    """An fsspec URL (s3://, gs://, file://…): copied to a local temp file under its own name, then read as a
    local file with the same plan (captures included)."""
    fsspec = fsspec_module()
    name = url.rstrip("/").rsplit("/", 1)[-1]
    with tempfile.TemporaryDirectory(prefix="tracekit-") as tmp:
        local = Path(tmp) / name
        try:
            with fsspec.open(url, "rb") as src, open(local, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (OSError, ValueError) as exc:
            raise TraceReadError(f"{url}: cannot read ({exc})") from None
        try:
            return _from_path(local, plan, None)
        except TracekitError as exc:  # name the file as the user did, not by its temp copy
            raise type(exc)(str(exc).replace(str(local), url)) from None


def attribute_or_error(target: str, plan: Plan) -> Attribution | str:
    """:func:`attribute_one` as a Dask task: a file's Attribution, or its one-line error (a bad file is not
    retried: it would fail again)."""
    try:
        return attribute_one(target, plan)
    except TracekitError as exc:
        return str(exc)
