"""A folder of runs (a sweep): which files make each run, and one result per run.

``tracekit attribute DIR`` merges every trace below DIR into one result; a sweep of 32 runs then reads
as one row of 256 blocks named by hash. Here each sub-folder that holds traces is one run, named after
the folder relative to DIR (``eager_4096``), and a trace file lying directly in DIR beside such folders is
a run of its own, named after the file without ``.pt.trace.json[.gz]``. A DIR whose traces all lie
directly in it is one run (a TensorBoard run folder: a trace per rank), named after DIR. Files are read
in one process pool for all runs.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from ..analysis.attribute import merge
from ..analysis.compare import diff_attributions
from ..errors import TracekitError, UsageError
from ..io.paths import TRACE_SUFFIXES
from ..results.attribution import Attribution, RunResult
from ..results.diff import DiffResult, RunPair
from ..results.ranks import rank_view
from ..results.sweep import sweep_key  # noqa: F401  (the run-name rule lives with the run rows)
from .execute import attribute_files
from .inputs import Inputs, discover
from .measured import measured_beside
from .plan import Plan


@dataclasses.dataclass(slots=True)
class Run:
    """One run: its display name and the files it reads."""

    name: str
    files: list[Path]


def run_name(file: Path, root: Path) -> str:
    """The run a file belongs to: its folder relative to ``root``, or the file's own name when it lies in ``root``."""
    parent = file.parent
    if parent == root:
        name = file.name
        for suffix in sorted(TRACE_SUFFIXES + (".json.gz", ".json"), key=len, reverse=True):
            if name.endswith(suffix):
                return name[: -len(suffix)] or name
        return name
    return parent.relative_to(root).as_posix()


@dataclasses.dataclass(slots=True, kw_only=True)
class Discovered:
    """What one PATH stands for, found once: its files (``inputs``, with discovery's warnings), the runs they
    make, and the notes a reader should see before the result (a folder of several runs merged into one).

    The CLI renders this and passes it on to ``analyze``; nothing discovers PATH again."""

    inputs: Inputs
    runs: list[Run]
    notes: list[str] = dataclasses.field(default_factory=list)


def discover_runs(path: str | os.PathLike[str], by_run: bool = False) -> Discovered:
    """Discover ``path`` once (:func:`~tracekit.run.inputs.discover`) and group its files into runs.

    ``by_run``: the runs are read as runs, so a file named like a folder beside it is warned about in the inputs'
    warnings. Otherwise the files are merged into one result, and when they make several runs a note says so.
    """
    found = discover(path)
    root = Path(path)
    if found.urls or not root.is_dir():
        return Discovered(inputs=found, runs=[Run(run_name(root, root.parent), list(found.files))])
    runs = runs_of(found if by_run else dataclasses.replace(found, warnings=[]))
    note = (f"{path} holds {len(runs)} runs (sub-folders with traces), merged here into one result; "
            "--by run gives a row per run")
    notes = [] if by_run or len(runs) < 2 else [note]
    return Discovered(inputs=found, runs=runs, notes=notes)


def find_runs(path: str | os.PathLike[str]) -> tuple[Inputs, list[Run]]:
    """The files under ``path`` (as :func:`~tracekit.run.inputs.discover` finds them) grouped into runs, by name."""
    got = discover_runs(path, by_run=True)
    return got.inputs, got.runs


def runs_of(found: Inputs) -> list[Run]:
    """The runs that a folder's discovered files make (warnings for ambiguous names go to ``found``)."""
    root = found.path
    if all(f.parent == root for f in found.files):  # a run folder itself (one trace per rank or worker)
        return [Run(root.resolve().name or str(root), list(found.files))]
    runs: dict[str, Run] = {}
    folders = {run_name(f, root) for f in found.files if f.parent != root}
    for f in found.files:
        name = run_name(f, root)
        if f.parent == root and name in folders:  # a file beside a folder of the same name: two runs, not one
            name = _distinct(f"{name} (file)", folders | set(runs))
            found.warnings.append(f"{f}: named like the folder {run_name(f, root)}/ beside it; "
                                  f"read as the run {name!r}")
        runs.setdefault(name, Run(name, [])).files.append(f)
    return [runs[k] for k in sorted(runs, key=_natural)]


def _distinct(name: str, taken: set[str]) -> str:
    k, out = 2, name
    while out in taken:
        out, k = f"{name} {k}", k + 1
    return out


def _natural(name: str) -> tuple:
    """``eager_512`` before ``eager_1024``: digits compare as numbers."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def attribute_runs(found_runs: Discovered | tuple[Inputs, list[Run]], how: Plan, *, sweep: bool = False) -> Attribution:
    """One result per run (``.runs``), and their merge with each block's ``source`` set to its run's name.

    Files are read in one process pool for all runs (``how.jobs``). ``sweep``: the runs are some of a folder of
    runs (those a diff pairs), so a ``measured.json`` in the folder itself belongs to none of them, even when
    only one is read."""
    found, runs = (found_runs.inputs, found_runs.runs) if isinstance(found_runs, Discovered) else found_runs
    root = found.path
    files = [f for r in runs for f in r.files]
    parts = attribute_files(files, how, keep_going=len(runs) > 1 and not sweep)
    results, skipped, unusable = _by_run(runs, parts, not_in=root if len(runs) > 1 or sweep else None)
    result = usable_runs(found.label, results, skipped)
    result.warnings[:0] = found.warnings
    result.warnings += [w for w in unusable if w not in result.warnings]  # (one run: its own warnings already)
    result.incomplete = result.incomplete or found.incomplete
    return result


def _by_run(runs: list[Run], parts: list[Attribution | TracekitError], not_in: Path | None,
            ) -> tuple[list[RunResult], list[tuple[str, TracekitError]], list[str]]:
    """The files' results (in the runs' file order) as each run's own result; the runs with a file that is no
    usable trace (its name and that file's error: the sweep goes on without them); and the warning for each
    unusable measured.json, which the runs' merge must say itself (it keeps no run's warnings: issue 41, ``--by run``
    said nothing of a NaN or a 10**23 there)."""
    results: list[RunResult] = []
    skipped: list[tuple[str, TracekitError]] = []
    unusable: list[str] = []
    it = iter(parts)
    for r in runs:
        got = [next(it) for _ in r.files]
        failed = [p for p in got if isinstance(p, TracekitError)]
        if failed:
            skipped.append((r.name, failed[0]))
        else:
            one, notes = _run_result(r, [p for p in got if isinstance(p, Attribution)], not_in)
            results.append(one)
            unusable += notes
    return results, skipped, unusable


def _run_result(run: Run, parts: list[Attribution], not_in: Path | None) -> tuple[RunResult, list[str]]:
    """A run's own result with its measured latency (a measured.json beside its traces, not in ``not_in``), and the
    warnings of an unusable measured.json there."""
    one = _one_run(run, parts)
    one.measured, notes = measured_beside(run.files, not_in=not_in)
    one.warnings += notes
    return RunResult(name=run.name, attribution=one), notes


def _one_run(run: Run, parts: list[Attribution]) -> Attribution:
    """A run's own result: its one file's, or its files' merge with their rank view (so that a diff pairs ranks
    within the run)."""
    if len(parts) == 1:
        one = parts[0]
    else:
        one = merge(parts, source=run.name)
        one.ranks = rank_view(parts, run.files, run.files[0].parent)
    one.source = run.name
    return one


def combine_runs(label: str, results: list[RunResult]) -> Attribution:
    """The runs' merge, each block's ``source`` renamed to its run, with ``.runs`` holding each run's own result."""
    named = [dataclasses.replace(one.attribution, blocks=[dataclasses.replace(b, source=one.name)
                                                          for b in one.attribution.blocks], runs=[],
                                     ranks=None)  # a run's ranks are its own (.runs), never the merge's
             for one in results]
    result = named[0] if len(named) == 1 else merge(named, source=label)
    result.source = label
    result.runs = list(results)
    result.warnings = list(result.warnings)
    result.incomplete = result.incomplete or any(r.attribution.incomplete for r in results)
    return result


def usable_runs(label: str, results: list[RunResult], skipped: list[tuple[str, TracekitError]]) -> Attribution:
    """:func:`combine_runs` of the runs that could be analysed; each run that could not (``skipped``: its name and
    error) is named in one warning, and the result is incomplete (exit 3, as for a skipped file). Why: one dead run
    of a 32-run sweep must not hide the other 31. With no run left, the first run's error is raised."""
    if not results:
        raise skipped[0][1]
    result = combine_runs(label, results)
    result.warnings[:0] = [f"run {name!r} skipped: {exc}" for name, exc in skipped]
    result.incomplete = result.incomplete or bool(skipped)
    return result


def several_runs(found: Inputs) -> Discovered | None:
    """``found`` as a folder of several runs (``--by run``'s names), or None: a trace, a run folder, URLs."""
    if found.urls or not Path(found.path).is_dir():
        return None
    mine = dataclasses.replace(found, warnings=list(found.warnings))  # runs_of warns about names it changed
    runs = runs_of(mine)
    return Discovered(inputs=mine, runs=runs) if len(runs) > 1 else None


def diff_runs(before: Discovered, after: Discovered, how: Plan) -> DiffResult:
    """Two folders of runs, diffed run by run, paired by name: only the runs in common are read.

    The result's own figures are those runs summed on each side (the same runs both sides, so like with like);
    ``run_pairs`` holds each run's own diff, and ranks pair only within a run (the runs' merge has no rank view:
    :func:`combine_runs`). UsageError (exit 2) when the folders share no run name: merging them would compare
    unrelated runs."""
    names = [r.name for r in before.runs], [r.name for r in after.runs]
    common = _common_runs(*names, before.inputs.path, after.inputs.path)
    sides = [attribute_runs(dataclasses.replace(d, runs=[r for r in d.runs if r.name in common]), how, sweep=True)
             for d in (before, after)]
    return _paired(sides[0], sides[1], *([n for n in side if n not in common] for side in names))


def diff_run_results(before: Attribution, after: Attribution) -> DiffResult:
    """Two results read by run (``analyze(..., by="run")``, each with several ``.runs``), diffed as
    :func:`diff_runs` diffs two folders of runs."""
    names = [r.name for r in before.runs], [r.name for r in after.runs]
    common = _common_runs(*names, before.source, after.source)
    sides = [_kept(att, common) for att in (before, after)]
    return _paired(sides[0], sides[1], *([n for n in side if n not in common] for side in names))


def _kept(att: Attribution, names: list[str]) -> Attribution:
    """The merge of ``att``'s runs of those names, with ``att``'s own warnings."""
    kept = combine_runs(att.source, [r for r in att.runs if r.name in names])
    kept.warnings[:0] = [w for w in att.warnings if w not in kept.warnings]
    return kept


def _paired(before: Attribution, after: Attribution, only_before: list[str], only_after: list[str]) -> DiffResult:
    """The diff of two merges of the same runs, with each run's own diff (``run_pairs``) and the runs left out."""
    result = diff_attributions(before, after)
    own = {r.name: r.attribution for r in after.runs}
    result.run_pairs = [RunPair(run=r.name, diff=diff_attributions(r.attribution, own[r.name])) for r in before.runs]
    result.runs_only_before, result.runs_only_after = only_before, only_after
    result.warnings.insert(0, _pairing_note(result))
    return result


def _common_runs(before: list[str], after: list[str], where_b: object, where_a: object) -> list[str]:
    """The run names on both sides, in ``before``'s order; UsageError when there is none."""
    common = [n for n in before if n in set(after)]
    if not common:
        raise UsageError(f"{where_b} and {where_a} are folders of runs with no run name in common "
                         f"({_few(before)} against {_few(after)}); diff the runs themselves")
    return common


def _pairing_note(result: DiffResult) -> str:
    """The one line saying the runs were paired by name, how many on one side only, and what the figures sum."""
    only = [f"{len(names)} only {side} ({_few(names)})" for side, names in
            (("before", result.runs_only_before), ("after", result.runs_only_after)) if names]
    return (f"runs paired by name: {len(result.run_pairs)} in common{'; ' + '; '.join(only) if only else ''}; "
            "the figures below sum the runs in common, each run's own diff is in the run table")


def _few(names: list[str], shown: int = 4) -> str:
    """The first few names, then how many more."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")
