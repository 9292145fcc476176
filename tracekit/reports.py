"""``tracekit.report()``: the offline HTML report from Python, as ``tracekit report`` writes it.

Why a module of its own, above ``run`` and ``renderers``: the report analyses (run/) and renders (renderers/), which
sit side by side in the layers and may not import each other; the CLI's ``report`` command and notebooks both call
this one function, so the page a notebook writes is the page the command writes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UsageError

if TYPE_CHECKING:
    from .run.inputs import ProgressFn


def report(path: str | os.PathLike, output: str | os.PathLike, after: str | os.PathLike | None = None, *,
           scope: str | None = None, jobs: int | None = None, decode_workers: int | None = None,
           step: int | None = None, progress: ProgressFn | None = None) -> Any:
    """Write one self-contained HTML report of ``path`` (a trace, a run folder, or a folder of runs: a sweep), or
    of the diff ``path`` → ``after``, to ``output``; returns the result drawn (an Attribution or a DiffResult).

    ``step`` draws that ProfilerStep's timeline (default: the median step); a step no timeline holds is a
    UsageError naming the steps there. ``output`` is written atomically and is never one of the inputs.
    """
    from .version import __version__
    from .output import write_report
    from .renderers.html import HTMLRenderer

    out = Path(output)
    result = _analysed(Path(path), None if after is None else Path(after), out, scope, jobs,
                       decode_workers or jobs, progress)
    result.check()
    if step is not None:
        refuse_missing_step(result, step)
    renderer = HTMLRenderer(tool=f"tracekit {__version__}")
    renderer.step = step
    write_report([renderer.render(result)], out, False)
    return result


def _analysed(path: Path, after: Path | None, output: Path, scope: str | None, jobs: int | None,
              decode_workers: int | None, progress: ProgressFn | None) -> Any:
    """The report's result: the diff of two inputs, or one input read as ``report`` reads it (its runs, each
    trace with its what-if prediction)."""
    from .run.api import analyze_for_report, diff_paths
    from .run.inputs import discover
    from .run.runs import discover_runs

    if after is not None:
        found_b, found_a = discover(path), discover(after)
        refuse_clobber(output, [found_b, found_a])
        return diff_paths(found_b, found_a, scope=scope, jobs=jobs, decode_workers=decode_workers,
                          progress=progress)
    found = discover_runs(path, by_run=True)  # the one discovery of PATH
    refuse_clobber(output, [found.inputs])
    result = analyze_for_report(found, scope=scope, jobs=jobs, decode_workers=decode_workers, progress=progress)
    if len(found.runs) <= 1:
        result.source = found.runs[0].name  # the page is headed by what was passed, not a file's name
    return result


def refuse_clobber(output: Path | None, inputs: Any) -> None:
    """Never write over an input trace; a damaged run must not destroy the evidence (tracekit.output: by any path,
    symlink or hard link). A name inside an input folder that the next run would read as a trace is refused as
    well. Remote inputs have nothing local to overwrite."""
    if output is None:
        return
    from .output import refuse_inputs, refuse_next_input
    from .run.inputs import TRACE_SUFFIXES

    for found in inputs:
        if not found.urls:
            refuse_inputs([output], found.files)
            refuse_next_input(output, found.path, TRACE_SUFFIXES)


def refuse_missing_step(result: Any, step: int) -> None:
    """``report --step N`` where no timeline of the report holds step N: a usage error naming the steps there."""
    from .results.attribution import Attribution
    from .results.timeline import missing_step

    if isinstance(result, Attribution):
        drawn = [run.attribution for run in result.runs] or [result]
    else:  # a diff draws both sides
        drawn = [result.before, result.after]
    why = missing_step(step, drawn)
    if why is not None:
        raise UsageError(f"--step {step}: {why}")
