"""One file's attribution, as each scheduler runs it: here, in a pool worker, or as a Dask task.

Module-level functions, so that they pickle. A task reads a file (or an fsspec URL, copied to a local temp
file) and returns that file's :class:`~tracekit.results.Attribution`.
"""

from __future__ import annotations

import gc
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from ..analysis.attribute import attribute_trace
from ..analysis.classify import Classifier
from ..errors import TracekitError, TraceReadError
from ..io.load import load_trace
from ..model import Trace
from ..memory import collect_between_files
from ..results.attribution import Attribution
from .inputs import captures_beside, discover, fsspec_module


def attribute_file(path: Path, scope: str | None, classifier: Classifier,
                   progress: Callable[[int, int], None] | None = None, hints: bool = True,
                   decode_workers: int = 1, captures: Sequence[str] = ()) -> Attribution:
    """One file, in this process. ``decode_workers > 1``: a big file's batches are decoded in that many
    processes (tracekit.io.pload). A trace that replays CUDA/HIP graphs reads the traces of their captures:
    ``captures`` (files or folders, ``--capture``), else those that ``capture_traces/`` beside it names."""
    tr = load_trace(path, progress=progress, jobs=decode_workers)
    caps, notes = _captures_for(path, tr, captures, decode_workers)
    result = attribute_trace(tr, scope=scope, classifier=classifier, hints=hints, captures=caps)
    for c in caps:  # a damaged capture maps what it kept: the result is then from damaged input (exit 3)
        if c.info.damaged:
            notes.append(f"capture {c.info.source} is damaged ({'; '.join(c.info.warnings) or 'salvaged'}): "
                         f"replayed kernels it lost stay unmapped")
            result.incomplete = True
    result.traces[0].warnings.extend(notes)
    return result


def _captures_for(path: Path, tr: Trace, given: Sequence[str], decode_workers: int) -> tuple[list[Trace], list[str]]:
    """The capture traces for a replay, loaded; and what the reader should know about them. A trace that runs no
    graph needs none (a capture folder beside it is not even read). Given captures that fail are errors; the
    ones found beside the trace that fail are named in a warning and left out."""
    replays = tr.graphs is not None and any(g.device for g in tr.graphs.launches)
    if not replays:
        return [], ["--capture: this trace replays no CUDA/HIP graph; the capture was not read"] if given else []
    if given:
        files = [f for g in given for f in discover(g).files]
        return [load_trace(f, jobs=decode_workers) for f in files if not _same(f, path)], []
    files, notes = captures_beside(path)
    loaded = []
    for f in files:
        try:
            loaded.append(load_trace(f, jobs=decode_workers))
        except TracekitError as exc:
            notes.append(f"capture {f.name} not used: {exc}")
    return loaded, notes


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def pool_task(path: Path, scope: str | None, classifier: Classifier, hints: bool,
              captures: Sequence[str] = ()) -> Attribution:
    """:func:`attribute_file` in a pool worker, after collecting the previous file's garbage."""
    collect_between_files(freeze=True)
    return attribute_file(path, scope, classifier, None, hints, captures=captures)


def dask_task(path: str, scope: str | None, classifier: Classifier, hints: bool,
              captures: Sequence[str] = ()) -> Attribution | str:
    """One Dask task: a file's Attribution, or its one-line error (a bad file is not retried: it would fail again)."""
    collect_between_files(freeze=True)  # a forked worker inherits the CLI's paused GC: free the previous model first
    was = gc.isenabled()
    gc.disable()  # as the CLI does: a full collection would rescan the model being built, many times over
    try:
        if "://" in path:
            return attribute_url(path, scope, classifier, hints)
        return attribute_file(Path(path), scope, classifier, None, hints, captures=captures)
    except TracekitError as exc:
        return str(exc)
    finally:
        if was:
            gc.enable()


def attribute_url(url: str, scope: str | None, classifier: Classifier, hints: bool) -> Attribution:
    """An fsspec URL (s3://, gs://, http://…): copied to a local temp file under its own name, then read."""
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
            return attribute_file(local, scope, classifier, None, hints)
        except TracekitError as exc:  # name the file as the user did, not by its temp copy
            raise type(exc)(str(exc).replace(str(local), url)) from None
