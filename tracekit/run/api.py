"""The path-level entry points: ``tracekit.analyze`` and ``tracekit.diff``.

Here a path becomes inputs (tracekit.run.inputs), the inputs results (tracekit.run.execute), and two results
a diff (tracekit.analysis.compare). The CLI and notebooks call these; nothing below knows about paths.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..analysis.classify import Classifier
from ..analysis.compare import diff_attributions
from ..errors import UsageError
from ..results.attribution import Attribution
from ..results.diff import DiffResult
from ..results.rows import FRAME_GROUPINGS
from .execute import attribute_inputs
from .inputs import Inputs, ProgressFn, discover
from .plan import plan
from .runs import Discovered, Run, attribute_runs, diff_run_results, diff_runs, discover_runs, runs_of, several_runs

if TYPE_CHECKING:  # (imported at run time where it is used: whatif and the report's path)
    from ..results.whatif import WhatIf


def analyze(path: str | os.PathLike | Inputs | Discovered, scope: str | None = None,
            classifier: Classifier | None = None, jobs: int | None = None, progress: ProgressFn | None = None,
            hints: bool = True, dask: str | None = None, by: str | None = None, *, decode_workers: int | None = None,
            captures: tuple[str | os.PathLike, ...] = ()) -> Attribution:
    """Attribute one trace file, or every trace in a run folder (results are merged in file order).

    ``jobs`` files are analysed at once (a folder's files, one per rank/worker: a process pool; default one
    per CPU), and a single big file is decoded by ``decode_workers`` processes (default one per CPU, at most
    4): the result is identical to a serial run (``jobs=1, decode_workers=1``). ``progress(name, done,
    total)`` reports bytes read. Files the folder scan skipped are named in ``Attribution.warnings``.
    ``hints=False`` skips the hint rules (``--no-hints``). ``dask`` (a scheduler address, ``local`` or
    ``local:N``; N defaults to ``jobs``) analyses each file as a task on a Dask cluster (``tracekit[dask]``).
    ``by`` ("kind", "block", "layer", "step", "run", "kernel" or "op") is the grouping of the result's
    ``to_dataframe()`` and notebook table (``--by`` of the CLI); a name outside those raises ValueError before
    any file is read. ``by="op"`` also computes the op table (``Attribution.ops``: each counted op call shape's
    FLOPs, time and roofline), which no other grouping pays for. ``by="run"`` reads a folder of runs (a sweep) as
    the CLI's ``--by run`` does: each run's
    own result in ``.runs`` (with its measured latency, when measured.json lies beside its traces), and one
    DataFrame row per run, named after its folder. ``captures`` (files or folders, ``--capture``) are the
    traces of the CUDA/HIP graph captures that the traces replay, however the files are read (here, a pool,
    Dask, a URL, runs); without them, a ``capture_traces/`` folder beside a replay is read (docs/graphs.md, "Graph
    traces"). ``path`` may be what discovery found already (``Inputs``, or the
    CLI's :class:`~tracekit.run.runs.Discovered`): it is not discovered again.
    """
    if by is not None and by not in FRAME_GROUPINGS:
        raise ValueError(f"unknown grouping by={by!r}; choose from {', '.join(FRAME_GROUPINGS)}")
    if by == "run" and dask is not None:
        raise ValueError("by='run' reads the runs here: leave out dask")
    where = _runs(path) if by == "run" else _inputs(path)
    # each capture discovered once, here (a missing one fails before any trace is read); the files travel in the plan
    how = plan(scope=scope, classifier=classifier, hints=hints, jobs=jobs, decode_workers=decode_workers,
               progress=progress, captures=tuple(str(f) for c in captures for f in discover(c).files),
               ops=by == "op")  # the op table only where asked: the default run pays nothing for it
    if isinstance(where, Discovered):  # a folder of runs: each run's own result in .runs (the CLI's --by run)
        result = attribute_runs(where, how)
    else:
        result = attribute_inputs(where, how, dask=dask)
    if by is not None:
        result.default_by = by
    return result


def _inputs(path: str | os.PathLike | Inputs | Discovered) -> Inputs:
    """``path``'s files, discovering it only when that was not done yet."""
    if isinstance(path, Discovered):
        return path.inputs
    return path if isinstance(path, Inputs) else discover(path)


def _runs(path: str | os.PathLike | Inputs | Discovered) -> Discovered:
    """``path``'s runs, discovering it only when that was not done yet."""
    if isinstance(path, Discovered):
        return path
    if isinstance(path, Inputs):
        return Discovered(inputs=path, runs=runs_of(path))
    return discover_runs(path, by_run=True)


def analyze_runs(path: str | os.PathLike | Discovered | tuple[Inputs, list[Run]], scope: str | None = None,
                 classifier: Classifier | None = None, jobs: int | None = None, progress: ProgressFn | None = None,
                 hints: bool = True) -> Attribution:
    """A folder of runs (a sweep): one result per run (``.runs``), and their merge (tracekit.run.runs)."""
    how = plan(scope=scope, classifier=classifier, hints=hints, jobs=jobs, progress=progress)
    found = path if isinstance(path, tuple) else _runs(path)
    return attribute_runs(found, how)


def diff_paths(before: str | os.PathLike | Inputs, after: str | os.PathLike | Inputs, scope: str | None = None,
               classifier: Classifier | None = None, jobs: int | None = None, progress: ProgressFn | None = None,
               dask: str | None = None, *, decode_workers: int | None = None) -> DiffResult:
    """Load and attribute both sides (files or run folders), then diff them.

    Each side is read like ``analyze``: folder warnings, ``jobs``, ``decode_workers`` and ``progress`` apply
    to both. Two folders of several runs (``--by run``'s names) are diffed run by run, paired by name
    (:func:`~tracekit.run.runs.diff_runs`: ``run_pairs``); a folder of several runs against one run or trace
    is a UsageError, since merging its runs would set unrelated runs against one.
    """
    # Discover both sides first: fail on a missing *after* before spending time on a big *before*.
    found_b = before if isinstance(before, Inputs) else discover(before)
    found_a = after if isinstance(after, Inputs) else discover(after)
    how = plan(scope=scope, classifier=classifier, jobs=jobs, decode_workers=decode_workers, progress=progress)
    runs_b, runs_a = several_runs(found_b), several_runs(found_a)
    if runs_b is not None and runs_a is not None:
        if dask is not None:
            raise UsageError("two folders of runs are diffed run by run, read here: leave out --dask")
        result = diff_runs(runs_b, runs_a, how)
        for p in result.run_pairs:
            p.diff.labels = side_labels(Path(found_b.path) / p.run, Path(found_a.path) / p.run)
    elif runs_b is not None or runs_a is not None:
        raise UsageError(_one_against_many(found_b.path, runs_b, found_a.path, runs_a))
    else:
        result = diff_attributions(attribute_inputs(found_b, how, dask=dask),
                                   attribute_inputs(found_a, how, dask=dask))
    result.labels = side_labels(found_b.path, found_a.path)
    return result


def _one_against_many(path_b: Path, runs_b: Discovered | None, path_a: Path, runs_a: Discovered | None) -> str:
    """Why a folder of several runs is not diffed against a single run or trace."""
    many, one, found = (path_b, path_a, runs_b) if runs_b is not None else (path_a, path_b, runs_a)
    n = len(found.runs) if found is not None else 0
    return (f"{many} is a folder of {n} runs (sub-folders with traces, as --by run names them) and {one} is one "
            f"run: diff it against one of them ({many}/<run>), or two folders of runs, paired by run name")


def side_labels(before: str | os.PathLike, after: str | os.PathLike) -> tuple[str, str]:
    """The shortest path tails that tell the two sides apart (``x/rank_0.json.gz`` vs ``y/rank_0.json.gz``)."""
    pb, pa = Path(before).parts, Path(after).parts
    for n in range(1, max(len(pb), len(pa)) + 1):
        lb, la = "/".join(pb[-n:]), "/".join(pa[-n:])
        if lb != la:
            return lb, la
    return str(before), str(after)


def diff(before: str | os.PathLike | Inputs | Attribution, after: str | os.PathLike | Inputs | Attribution,
         scope: str | None = None, classifier: Classifier | None = None, jobs: int | None = None,
         progress: ProgressFn | None = None, *, decode_workers: int | None = None) -> DiffResult:
    """``tracekit.diff(before, after)``: two traces or run folders (as :func:`diff_paths`), or two results of
    ``tracekit.analyze`` (as :func:`~tracekit.analysis.compare.diff_attributions`; ``scope``/``jobs`` then do
    not apply). Two folders of several runs, or two results read by run (``by="run"``) with several runs each,
    are diffed run by run, paired by name: ``run_pairs``, ``runs_only_before``, ``runs_only_after``."""
    if isinstance(before, Attribution) and isinstance(after, Attribution):
        if len(before.runs) > 1 and len(after.runs) > 1:  # two results read by run: paired by run name
            result = diff_run_results(before, after)
            for p in result.run_pairs:
                p.diff.labels = (f"{before.source}/{p.run}", f"{after.source}/{p.run}")
        else:
            result = diff_attributions(before, after)
        result.labels = (before.source, after.source) if before.source != after.source else ("before", "after")
        return result
    if isinstance(before, Attribution) or isinstance(after, Attribution):
        raise TypeError("tracekit.diff takes two paths or two Attribution results, not one of each")
    return diff_paths(before, after, scope=scope, classifier=classifier, jobs=jobs, progress=progress,
                      decode_workers=decode_workers)


def whatif(path: str | os.PathLike | Inputs, backend: str = "best", mask: str = "auto",
           scope: str | None = None, calibration: str | os.PathLike | None = None) -> list[WhatIf]:
    """Predict what a fused attention kernel would take for each eager block of one trace (``tracekit whatif``).

    ``backend``: ``best`` (the fastest calibrated one: one result), ``all`` (one result per calibrated backend,
    the fastest first) or a name of tracekit.calibration.BACKENDS; ``mask``: ``auto`` (causal where Lq = Lk and
    the core masks, else none), ``causal``, ``none`` or ``dense`` (a lower bound on the fused time). ``path`` is
    one trace file, or a run folder holding one. ``calibration``: a calibration file (``scripts/profile_attention.py
    --calibrate`` writes one) whose entries replace the built-in ones of their device; None reads the file
    ``$TRACEKIT_CALIBRATION`` names, if any (a bad one: a warning on each result, and the built-in entries). Each
    result's ``check()`` holds. docs/whatif.md.
    """
    from ..calibration import BACKENDS
    from ..results.whatif import MASKS

    backends, masks = ("best", "all", *BACKENDS), ("auto", *MASKS)
    if backend not in backends:
        raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(backends)}")
    if mask not in masks:
        raise ValueError(f"unknown mask {mask!r}; choose from {', '.join(masks)}")
    from ..io.calibration_file import user_calibrations

    entries, warnings = user_calibrations(calibration)  # a bad file fails before the trace is read
    found = path if isinstance(path, Inputs) else discover(path)
    if len(found.files) != 1 or found.urls:
        raise UsageError(one_trace_only(str(found.path), len(found.files) + len(found.urls)))
    from ..analysis.context import AttributeConfig, StageContext
    from ..analysis.pipeline import run_stages
    from ..analysis.whatif import whatif_of
    from ..io.load import load_trace
    from ..memory import one_file

    with one_file():
        tr = load_trace(found.files[0])
        ctx = run_stages(StageContext(tr=tr, config=AttributeConfig(scope=scope, hints=False)))
        results = whatif_of(ctx, backend=backend, mask=mask, entries=entries)
    if backend == "all":
        results.sort(key=lambda w: w.totals.fused_us)
    for w in results:
        w.warnings.extend(warnings)
        w.check()
    return results


def one_trace_only(where: str, n: int) -> str:
    """Why ``whatif`` predicts nothing for several traces (``tracekit whatif``'s refusal and the report's line)."""
    return f"whatif reads one trace; {where} holds {n} (pass one file)"


def analyze_for_report(path: Inputs | Discovered, scope: str | None = None, jobs: int | None = None,
                       decode_workers: int | None = None, progress: ProgressFn | None = None) -> Attribution:
    """``analyze`` (or, for a folder of several runs, ``analyze_runs``) as ``tracekit report`` and the TensorBoard
    tab read ``path``: each trace's result also carries ``whatif``'s prediction (``Attribution.whatif``, the
    page's "What if" section), made from the analysed trace in the same pass. A result of several traces (ranks,
    workers) carries the one line that says why there is none. ``tracekit attribute`` never comes here.
    """
    from ..results.whatif import WhatIf

    how = plan(scope=scope, jobs=jobs, decode_workers=decode_workers, progress=progress, whatif=True)
    if isinstance(path, Discovered) and len(path.runs) > 1:
        result = attribute_runs(path, how)
    else:
        result = attribute_inputs(_inputs(path), how)
    for one in [result, *(r.attribution for r in result.runs)]:
        if one.whatif is None and len(one.traces) > 1:
            one.whatif = WhatIf(source=one.source, backend="best", device=None, calibration=None,
                                mask_option="auto", reason=one_trace_only(one.source, len(one.traces)))
    return result
