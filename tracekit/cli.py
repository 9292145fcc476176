"""The ``tracekit`` command: thin click wrappers that validate, call the library, and report.

Exit codes: 0 ok; 1 input could not be analysed (``Error: …``); 2 usage error;
3 results were produced from damaged input (truncated trace, dropped events, skipped files);
4 ``diff --fail-if-slower`` found a regression; 5 ``diff --fail-if-slower`` is inconclusive (a side is
launch-bound and no measured latency was given: docs/diff.md, "CI gate"). Over two folders of runs the gate decides
each run pair: 4 when any pair regresses, else 5 when any is inconclusive.

Only click and the standard library load at import: the analysis, the renderers and the process
pool are imported inside the commands, so ``tracekit --help`` starts fast (benchmarks/startup.py).
"""

from __future__ import annotations

import functools
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from . import __version__
from .errors import TracekitError, UsageError
from .memory import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, mallopt, one_shot
from .output import to_stdout, write_all, write_report  # noqa: F401  (write_all: kept for callers of the CLI's)
from .progress import Progress
from .reports import refuse_clobber
from .vocab import TABLE_GROUPINGS
from .text import printable

if TYPE_CHECKING:
    pass

EXIT_DAMAGED = 3
EXIT_REGRESSION = 4
EXIT_INCONCLUSIVE = 5
TOOL = f"tracekit {__version__}"

# The renderers' names, spelled out so that --help need not import the renderers (tests/test_cli_robust.py
# checks they match the registry); the groupings are the results' one list.
FORMATS = ("table", "json", "csv", "markdown")
GROUPINGS = TABLE_GROUPINGS
GATE_ON = ("busy", "span", "latency")  # tracekit.vocab.Compared, spelled out for --help (tests check they match)
# -o extension, compared in lower case and before any ".gz" -> format.
EXTENSIONS = {".txt": "table", ".json": "json", ".csv": "csv", ".md": "markdown", ".markdown": "markdown"}

_JOBS_HELP = ("Files analysed at once: processes for a folder's files, or a local Dask cluster's workers "
              "(default: one per CPU). For a single trace, also its decode workers unless --decode-workers is given. "
              "-j 1: one process.")
_DECODE_HELP = ("Processes decoding one trace over 64 MB of JSON (default: one per CPU, at most 4; "
                "1: decode it in this process).")
_DASK_HELP = ("Analyse each file on a Dask cluster: tcp://HOST:PORT of a running scheduler, or local[:N] for N "
              "worker processes on this machine (needs tracekit[dask]).")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracekit")
def cli() -> None:
    """Where the time goes inside attention, from PyTorch profiler traces."""


# glibc's mallopt settings (tracekit.memory): blocks up to 64 MB come from the heap, and up to 256 MB of
# freed heap is kept
_MALLOPT = ((M_MMAP_THRESHOLD, 64 << 20), (M_TRIM_THRESHOLD, 256 << 20))


def _keep_big_buffers() -> None:
    """Let glibc reuse the reader's 16-32 MB buffers instead of mapping fresh pages for each one.

    Why: by default a block over 32 MB is its own mmap, returned to the kernel when freed, so every
    chunk read and every growth of the reader's buffer faulted in new zeroed pages: 465k minor faults
    per GB and 1.2-1.6 s of system time. With these settings 184k and 0.6-0.7 s, 5-10% less wall time,
    for about 40 MB more peak RSS (benchmarks/README.md). Forked workers inherit the settings. No-op
    off glibc.
    """
    for param, value in _MALLOPT:
        mallopt(param, value)


def _one_shot(f: Callable[..., None]) -> Callable[..., None]:
    """Run a command as a process that ends once its output is written (tracekit.memory.one_shot): the GC pause
    of each trace file read (tracekit.memory.one_file, its one owner) lasts to the end of the command, so the
    models' garbage is not scanned while the result is rendered; the GC is back to what it was afterwards (tests
    call commands in-process). Also sets the process's malloc up for big buffers (``_keep_big_buffers``)."""
    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> None:
        _keep_big_buffers()
        with one_shot():
            f(*args, **kwargs)
    return run


def _scope(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        re.compile(value)
    except re.error as exc:
        raise click.BadParameter(f"not a valid regular expression ({exc})") from None
    return value


# Arguments are plain paths: existence and file type are checked by tracekit.run.inputs, which
# words each problem (FIFO, symlink loop, empty file) and exits 1, not 2.
@cli.command()
@click.argument("path", type=click.Path(readable=False))  # a str: an s3://… URL must keep its "//"
@click.option("--format", "fmt", type=click.Choice(FORMATS),
              help="Output format (default: table, or from -o's extension).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, readable=False, path_type=Path),
              help="Write to this file instead of stdout (.json/.csv/.md/.txt, + .gz to compress).")
@click.option("--scope", callback=_scope, metavar="REGEX",
              help="Names of attention modules/ranges (default: attention|attn|…).")
@click.option("--by", type=click.Choice(GROUPINGS), default="kind", show_default=True,
              help="One row per block kind, block, layer, step, run (a folder of runs: each sub-folder, "
                   "or trace file directly in it, is one run), rank (a folder of ranks: the straggler view), "
                   "kernel (every kernel the blocks own) or op (each counted op call shape: TFLOP/s, GB/s, "
                   "% of roof, bound).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help=_JOBS_HELP)
@click.option("--decode-workers", type=click.IntRange(min=1), default=None, help=_DECODE_HELP)
@click.option("--no-hints", "no_hints", is_flag=True, help="Do not compute or show hints (what to do next).")
@click.option("--dask", metavar="ADDRESS", default=None, help=_DASK_HELP)
@click.option("--capture", "captures", multiple=True, type=click.Path(readable=False), metavar="CAPTURE",
              help="Trace (or folder) of the CUDA/HIP graph capture that PATH replays: replayed kernels are "
                   "mapped to the ops that captured them (default: capture_traces/ beside PATH). Repeatable.")
@click.option("--with-intervals", "with_intervals", is_flag=True,
              help="JSON only: also write each block's device intervals [start_us, end_us, category, pid, tid], "
                   "on the trace's clock (much larger output).")
@_one_shot
def attribute(path: str, fmt: str | None, output: Path | None, scope: str | None, by: str, jobs: int | None,
              decode_workers: int | None, no_hints: bool, dask: str | None, captures: tuple[str, ...],
              with_intervals: bool = False) -> None:
    """Attribute attention time in PATH (a .json/.json.gz trace or a TensorBoard run folder)."""
    try:
        fmt, gz = output_format(fmt, output)
        if with_intervals and fmt != "json":
            raise click.UsageError(f"--with-intervals applies to JSON output, not {fmt}")
        from .run.api import analyze
        from .run.runs import discover_runs

        found = discover_runs(path, by_run=by == "run")  # the one discovery of PATH: files, runs, notes
        for note in found.notes:
            click.echo(f"note: {printable(note)}", err=True)
        refuse_clobber(output, [found.inputs])
        if by == "run" and dask is not None:
            raise click.UsageError("--by run reads the runs here: leave out --dask")
        with Progress() as progress:
            result = analyze(found, scope=scope, jobs=jobs, decode_workers=decode_workers or jobs,
                             progress=progress.update, hints=not no_hints, dask=dask, captures=captures,
                             by=by if by in ("run", "op") else None)  # "op": the op table, only when asked
        result.check(arrays=with_intervals)  # (the per-event arrays are written only with --with-intervals)
        _warn(result)
        renderer = _attribution_renderer(fmt, by)
        renderer.title = str(path)  # the header names what was passed, not the trace file's hashed name
        renderer.with_intervals = with_intervals
        emit(renderer, result, output, gz)
    except TracekitError as exc:
        raise _fail(exc) from None
    if result.damaged:
        sys.exit(EXIT_DAMAGED)


def _n(k: int, word: str) -> str:
    return f"{k:,} {word}{'' if k == 1 else 's'}"


def _percent(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    from .analysis.gate import parse_percent

    try:
        return parse_percent(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@cli.command()
@click.argument("before", type=click.Path(readable=False))
@click.argument("after", type=click.Path(readable=False))
@click.option("--format", "fmt", type=click.Choice(FORMATS),
              help="Output format (default: table, or from -o's extension).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, readable=False, path_type=Path),
              help="Write to this file instead of stdout (.json/.csv/.md/.txt, + .gz to compress).")
@click.option("--scope", callback=_scope, metavar="REGEX", help="Names of attention modules/ranges, for both sides.")
@click.option("--fail-if-slower", "fail_pct", callback=_percent, metavar="PCT",
              help="Exit 4 when AFTER is slower than BEFORE by more than PCT (5% or 5): measured latency where "
                   "both sides have it, else attention busy time; exit 5 (inconclusive) when a side is "
                   "launch-bound and no latency was measured.")
@click.option("--gate-on", "gate_on", type=click.Choice(GATE_ON), default=None,
              help="What --fail-if-slower compares: busy (device time in the blocks), span (their profiled wall "
                   "clock) or latency (measured outside the profiler). Default: latency, else busy, else exit 5.")
@click.option("--latency-before", "latency_before", metavar="MS±S|MS,MS,…", default=None,
              help="BEFORE's latency measured outside the profiler, in ms (overrides its measured.json): a median "
                   "and its half-spread (2.51±0.04 or 2.51+-0.04) or each repeat's time (2.49,2.51,2.55); a bare "
                   "number is one sample, which decides nothing (exit 5).")
@click.option("--latency-after", "latency_after", metavar="MS±S|MS,MS,…", default=None,
              help="AFTER's latency, as --latency-before.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help=_JOBS_HELP)
@click.option("--decode-workers", type=click.IntRange(min=1), default=None, help=_DECODE_HELP)
@click.option("--dask", metavar="ADDRESS", default=None, help=_DASK_HELP)
@_one_shot
def diff(before: str, after: str, fmt: str | None, output: Path | None, scope: str | None,
         fail_pct: float | None, gate_on: str | None, latency_before: str | None, latency_after: str | None,
         jobs: int | None, decode_workers: int | None, dask: str | None) -> None:
    """Compare attention time in BEFORE and AFTER (traces or run folders), by category, block and kernel.

    Two folders of runs (sub-folders with traces, as --by run names them) are compared run by run, paired by
    run name; the gate then decides each pair.

    Exit codes: 0 ok; 1 error (and a busy/span gate over a GPU and a CPU-only trace); 2 usage (and a latency
    outside 1 ns-1 day, or for one side only; two folders of runs with no run in common, or a folder of runs
    against one run); 3 damaged input; 4 regression
    (--fail-if-slower; over folders of runs, any pair); 5 the gate is inconclusive (a side is launch-bound
    and no latency was measured, fewer than 3 repeats or steps a side, or a change within their spread; over
    folders of runs, a pair is and none regresses).
    """
    if fail_pct is None and (gate_on or latency_before or latency_after):
        raise click.UsageError("--gate-on and --latency-before/--latency-after apply to --fail-if-slower")
    try:
        given = _latencies(latency_before, latency_after)
        fmt, gz = output_format(fmt, output)
        from .run.api import diff_paths
        from .run.inputs import discover

        found_b, found_a = discover(before), discover(after)
        refuse_clobber(output, [found_b, found_a])
        with Progress() as progress:
            result = diff_paths(found_b, found_a, scope=scope, jobs=jobs, decode_workers=decode_workers or jobs,
                                progress=progress.update, dask=dask)
        result.check()
        # Decided before anything is printed: a gate over sides timed differently is refused with
        # one error line and no report (exit 1). An inconclusive gate still shows the diff (exit 5).
        said, code = _decide(result, fail_pct, gate_on, given)
        _warn_diff(result)
        emit(_diff_renderer(fmt), result, output, gz)  # headed by the paths as given, shortened (result.labels)
        for line in said:
            click.echo(line, err=True)
        if code:
            sys.exit(code)
    except TracekitError as exc:
        raise _fail(exc) from None
    if result.damaged:
        sys.exit(EXIT_DAMAGED)


def _decide(result: Any, pct: float | None, on: str | None, latency: tuple[Any, Any]) -> tuple[list[str], int]:
    """The gate's lines for stderr and its exit code (0, 4 regression, 5 inconclusive); over the run pairs when
    both sides were folders of runs."""
    if pct is not None and result.run_pairs:
        return _gate_runs(result, pct, on, latency)
    verdict, inconclusive = _gate(result, pct, on, latency)
    if inconclusive:
        return [inconclusive], EXIT_INCONCLUSIVE
    if verdict is None:
        return [], 0
    from .renderers import verdict_line

    return [verdict_line(verdict)], 0 if verdict.ok else EXIT_REGRESSION


def _gate_runs(result: Any, pct: float, on: str | None, latency: tuple[Any, Any]) -> tuple[list[str], int]:
    """Each run pair's verdict (or why it is inconclusive), then one line naming the pairs that decide the exit:
    4 when any regresses, else 5 when any is inconclusive."""
    if any(ms is not None for ms in latency):
        raise UsageError("--latency-before/--latency-after give one latency, and these are folders of runs: "
                         "put each run's measured.json beside its traces")
    from .analysis.gate import gate_runs
    from .vocab import Compared

    bad = [p.run for p in gate_runs(result, pct, on=None if on is None else Compared(on))]
    lost = [p.run for p in result.run_pairs if p.inconclusive]
    head, n = f"fail-if-slower {pct:g}%:", len(result.run_pairs)
    lines = [_run_verdict_line(p, head) for p in result.run_pairs]
    if bad:
        return [*lines, f"{head} REGRESSION in {len(bad)} of {n} run pairs: {printable(', '.join(bad))}"], \
            EXIT_REGRESSION
    if lost:
        return [*lines, f"{head} inconclusive: {len(lost)} of {n} run pairs ({printable(', '.join(lost))}), "
                        "none regresses"], EXIT_INCONCLUSIVE
    return [*lines, f"{head} ok: {n} run pairs, none slower by more than {pct:g}%"], 0


def _run_verdict_line(p: Any, head: str) -> str:
    """``run NAME: `` and the pair's verdict line, or why the gate could not decide on it."""
    from .renderers import verdict_line

    said = verdict_line(p.gate) if p.gate is not None else f"{head} inconclusive: {p.inconclusive}"
    return f"run {printable(p.run)}: {printable(said)}"


def _latencies(before: str | None, after: str | None) -> tuple[Any, Any]:
    """``--latency-before``/``--latency-after`` as measurements; a malformed one is a usage error (one line)."""
    from .analysis.gate import parse_latency

    out = []
    for text, side in ((before, "before"), (after, "after")):
        try:
            out.append(None if text is None else parse_latency(text, side))
        except ValueError as exc:
            raise UsageError(f"--latency-{side}: {exc}") from None
    return out[0], out[1]


def _gate(result: Any, pct: float | None, on: str | None, given: tuple[Any, Any]) -> tuple[Any, str]:
    """The gate's verdict, or the one line saying why it cannot decide (exit 5)."""
    if pct is None:
        return None, ""
    from .errors import InconclusiveError
    from .analysis.gate import gate
    from .vocab import Compared

    try:
        return gate(result, pct, on=None if on is None else Compared(on), latency=given), ""
    except InconclusiveError as exc:
        return None, printable(str(exc)).replace("--fail-if-slower:", f"fail-if-slower {pct:g}%:", 1)


@cli.command()
@click.argument("path", type=click.Path(path_type=Path, readable=False))
@click.argument("after", required=False, type=click.Path(path_type=Path, readable=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False, readable=False, path_type=Path), required=True,
              help="The HTML file to write (self-contained: no network needed to view it).")
@click.option("--scope", callback=_scope, metavar="REGEX", help="Names of attention modules/ranges.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help=_JOBS_HELP)
@click.option("--decode-workers", type=click.IntRange(min=1), default=None, help=_DECODE_HELP)
@click.option("--step", "timeline_step", type=int, default=None, metavar="N",
              help="The step the timeline draws (ProfilerStep#N); default: the median step.")
@_one_shot
def report(path: Path, after: Path | None, output: Path, scope: str | None, jobs: int | None,
           decode_workers: int | None, timeline_step: int | None) -> None:
    """Write one offline HTML report: PATH (a trace, a run, or a folder of runs), or the diff PATH → AFTER.

    A folder whose traces lie in several sub-folders (or side by side) is a sweep: one row per run,
    charted against sequence length when runs are named <impl>_<seq>.
    """
    try:
        from .reports import report as write_html_report

        with Progress() as progress:
            result = write_html_report(path, output, after, scope=scope, jobs=jobs, decode_workers=decode_workers,
                                       step=timeline_step, progress=progress.update)
        if after is not None:
            _warn_diff(result)
        else:
            _warn(result)
        click.echo(f"wrote {printable(str(output))}", err=True)
    except TracekitError as exc:
        raise _fail(exc) from None
    if result.damaged:
        sys.exit(EXIT_DAMAGED)


@cli.command()
@click.argument("path", type=click.Path(path_type=Path, readable=False))
@click.option("-o", "--output", required=True, type=click.Path(readable=False, path_type=Path),
              help="The redacted copy: a file for a trace (.gz compresses), a folder for a run folder.")
def redact(path: Path, output: Path) -> None:
    """Write a copy of PATH (a trace or a run folder) without secrets, to share it.

    Removes tokens (hf_…, AWS key ids, GitHub/OpenAI/Slack tokens, Bearer …), NAME=value and "NAME": "value"
    where NAME says token/secret/password/key/credential/auth, credentials in URLs, and user names in home
    paths (/home/<user>, /Users/<user>, C:\\Users\\<user> become <home>). The copy attributes like the original.
    Streamed: memory stays about 1 MiB plus the longest string of the trace.
    """
    _sigterm_cleans_up()
    try:
        from .redact import RULE_WORDS, redact_path

        notes: list[str] = []
        done = redact_path(path, output, notes)
        for st in done:
            if st.replaced:
                what = ", ".join(f"{n} {RULE_WORDS.get(k, k)}" for k, n in sorted(st.replaced.items()))
                click.echo(f"{printable(str(st.path))}: replaced {what}", err=True)
            if st.damaged:
                notes.append(f"{st.path}: {st.damaged}; the copy ends where the input does")
        for note in notes:
            click.echo(f"Warning: {printable(note)}", err=True)
        click.echo(f"wrote {printable(str(output))}{_redacted(done)}", err=True)
    except TracekitError as exc:
        raise _fail(exc) from None
    if notes:  # a file skipped or cut short: the copy is incomplete
        sys.exit(EXIT_DAMAGED)


def _redacted(done: list[Any]) -> str:
    """What the "wrote" line adds: how many traces had nothing to redact."""
    clean = sum(1 for st in done if not st.replaced)
    if len(done) > 1:
        return f" ({len(done)} traces, {clean} with nothing to redact)"
    return "" if done[0].replaced else " (nothing to redact)"


@cli.command()
@click.argument("path", type=click.Path(readable=False))  # (a str: Path would turn a URL's "//" into "/")
@click.option("-o", "--output", required=True, type=click.Path(readable=False, path_type=Path),
              help="The annotated copy: .json, or .json.gz to compress.")
@click.option("--scope", callback=_scope, metavar="REGEX", help="Names of attention modules/ranges.")
@click.option("--pack-graph-lanes", is_flag=True,
              help="Also copy the kernels that graph launches replayed onto the fewest lanes on which none overlaps "
                   "(the originals stay on their streams, so the copy still attributes the same).")
@_one_shot
def annotate(path: str, output: Path, scope: str | None, pack_graph_lanes: bool) -> None:
    """Write a copy of the trace PATH with tracekit's view added, for Perfetto UI or TensorBoard's trace viewer.

    A process named tracekit holds, per device stream, a span per attention block (named by its category
    shares, its figures in args) with a span per run of same-category kernels inside, an instant per hint,
    and arrows from each block to its kernels. The copy attributes exactly like the original (the added
    events are skipped); it is streamed, and never written over its input.
    """
    _sigterm_cleans_up()
    try:
        from .annotation import annotate_path

        with Progress() as progress:
            stats, result = annotate_path(path, output, scope=scope, progress=progress.update,
                                          pack_graph_lanes=pack_graph_lanes)
        _warn(result)
        if stats.damaged:
            click.echo(f"Warning: {printable(str(path))}: {stats.damaged}; the copy ends where the input does",
                       err=True)
        arrows = "every kernel" if stats.every_kernel else "the first kernel of each block on each stream"
        old = f"; replaced its {_n(stats.replaced, 'old tracekit event')}" if stats.replaced else ""
        click.echo(f"wrote {printable(str(output))}: {_n(stats.blocks, 'block span')} on {_n(stats.lanes, 'lane')} "
                   f"of pid {stats.pid}, {_n(stats.runs, 'category run')}, {_n(stats.marks, 'hint mark')}, "
                   f"{_n(stats.flows, 'arrow')} (to {arrows}){old}", err=True)
        if pack_graph_lanes:
            click.echo(f"packed {_n(stats.graph_kernels, 'replayed kernel')} onto "
                       f"{_n(stats.graph_lanes, 'graph replay lane')}", err=True)
    except TracekitError as exc:
        raise _fail(exc) from None
    if result.damaged or stats.damaged:
        sys.exit(EXIT_DAMAGED)


@cli.command()
@click.argument("path", type=click.Path(readable=False))
@click.option("--backend", type=click.Choice(("best", "all", "cudnn", "flash", "efficient")), default="best",
              show_default=True, help="The fused SDPA backend to predict: the fastest calibrated one, all of them, "
                                      "or one.")
@click.option("--mask", type=click.Choice(("auto", "causal", "none", "dense")), default="auto", show_default=True,
              help="The mask the fused kernel would apply: auto guesses causal where Lq = Lk and the core masks; "
                   "dense gives a lower bound on the fused time.")
@click.option("--by", type=click.Choice(("kind", "block", "step")), default="kind", show_default=True,
              help="One row per block kind, block or step.")
@click.option("--format", "fmt", type=click.Choice(FORMATS),
              help="Output format (default: table, or from -o's extension).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, readable=False, path_type=Path),
              help="Write to this file instead of stdout (.json/.csv/.md/.txt, + .gz to compress).")
@click.option("--scope", callback=_scope, metavar="REGEX", help="Names of attention modules/ranges.")
@click.option("--calibration", "calibration", metavar="FILE",
              help="A calibration file (scripts/profile_attention.py --calibrate writes one): its entries replace "
                   "the built-in ones of their device. Default: the file $TRACEKIT_CALIBRATION names, if any.")
@_one_shot
def whatif(path: str, backend: str, mask: str, by: str, fmt: str | None, output: Path | None,
           scope: str | None, calibration: str | None) -> None:
    """Predict what a fused attention kernel would take for each eager block of PATH (one trace), and the saving."""
    try:
        fmt, gz = output_format(fmt, output)
        from .renderers.whatif import render_whatif
        from .run.api import whatif as predict
        from .run.inputs import discover

        found = discover(path)
        refuse_clobber(output, [found])
        if output is not None and calibration is not None:
            from .output import refuse_inputs

            refuse_inputs([output], [Path(calibration)])
        results = predict(found, backend=backend, mask=mask, scope=scope, calibration=calibration)
        for w in results[0].warnings:
            click.echo(f"Warning: {printable(w)}", err=True)
        emit(_WhatIfText(render_whatif(results, fmt, by, tool=TOOL, title=str(path))), None, output, gz)
    except TracekitError as exc:
        raise _fail(exc) from None


class _WhatIfText:
    """Already rendered text, for emit()."""

    def __init__(self, text: str) -> None:
        self.text = text

    def render(self, result: object) -> str:
        return self.text


# ---------------------------------------------------------------------------------------------
# Renderers (the only place the CLI names renderer classes)


def _attribution_renderer(fmt: str, by: str) -> Any:
    from .renderers import RENDERERS

    return RENDERERS[fmt](by=by, tool=TOOL)


def _diff_renderer(fmt: str) -> Any:
    from .renderers import DIFF_RENDERERS

    return DIFF_RENDERERS[fmt](tool=TOOL)


def _warn_diff(result: Any) -> None:
    """Both sides' warnings, then the diff's own (different discovery modes, shapes…), then each run pair's own
    (two folders of runs), named by its run."""
    _warn(result.before)
    _warn(result.after)
    for w in result.warnings:
        click.echo(f"Warning: {printable(w)}", err=True)
    for p in result.run_pairs:
        for w in p.diff.warnings:
            click.echo(f"Warning: run {printable(p.run)}: {printable(w)}", err=True)


def _warn(result: Any) -> None:
    """Each warning on one line of stderr, its names made printable (no control character reaches a terminal)."""
    for w in getattr(result, "warnings", ()):
        click.echo(f"Warning: {printable(w)}", err=True)
    for t in result.traces:
        for w in t.warnings:
            click.echo(f"Warning: {printable(t.source)}: {printable(w)}", err=True)


# ---------------------------------------------------------------------------------------------
# Output


def output_format(fmt: str | None, output: Path | None) -> tuple[str, bool]:
    """(format, gzip?) for this command line: --format wins, else -o's extension, else a table.

    Extensions compare case-insensitively; a final ``.gz`` compresses whatever the format. An
    extension that names no format is refused rather than guessed (a table in ``out.json.gz``
    would break the next tool in the pipeline).
    """
    if output is None:
        return fmt or "table", False
    name = output.name.lower()
    gz = name.endswith(".gz")
    if gz:
        name = name[:-3]
    if fmt is None:
        fmt = EXTENSIONS.get(os.path.splitext(name)[1])
        if fmt is None:
            raise UsageError(f"{output}: cannot tell the format from the file name; use a .json, .csv, .md or .txt "
                             "extension (add .gz to compress) or --format")
    return fmt, gz


def emit(renderer: Any, result: Any, output: Path | None, gz: bool = False) -> None:
    """Stream the rendered result to stdout or (atomically) to ``output``."""
    chunks = _chunks(renderer, result)
    if output is None:
        to_stdout(chunks)
        return
    write_report(chunks, output, gz)
    click.echo(f"wrote {printable(str(output))}", err=True)


def _chunks(renderer: Any, result: Any) -> Iterator[str]:
    """The renderer's ``stream(result)`` when it has one (CSV row by row), else one ``render()``."""
    stream = getattr(renderer, "stream", None)
    if stream is not None:
        yield from stream(result)
    else:
        yield renderer.render(result)


class _Fail(click.ClickException):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        setattr(self, "exit_code", code)  # click >= 8.2 declares exit_code a class variable: set it per instance


def _fail(exc: TracekitError) -> click.ClickException:
    return _Fail(printable(str(exc)), exc.exit_code)


def _one_blas_thread() -> None:
    """numpy's OpenBLAS with one thread in this process and its workers, unless the user chose a number.

    Why: numpy's OpenBLAS starts a thread per core when numpy is imported, and they spin a while: about 50 ms of
    CPU on a 2-core machine, taken from the main thread's second core, for nothing, since tracekit calls no BLAS
    routine (its arrays are sorts, sums and running maxima). Only the command line sets it: a notebook that imports
    tracekit keeps its own BLAS settings."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main() -> None:
    """The console entry point: the command, then a quick exit.

    Why: once the output is written, freeing the trace model object by object is wasted work (1.5 s
    of a 10 GB run, benchmarks/README.md), so the process ends with ``os._exit`` after flushing
    stdout and stderr. Not while other threads or child processes live (a Dask cluster being shut
    down): their clean-up runs at a normal exit.
    """
    code: str | int | None = 0
    signal.signal(signal.SIGINT, _interrupted)
    _one_blas_thread()
    try:
        cli(prog_name="tracekit")
    except SystemExit as exc:
        code = exc.code
        if isinstance(exc, Interrupted):
            _quiet_echo("Interrupted")
            _let_threads_end()
    if not isinstance(code, int) or _threads_alive() or _children_alive():
        sys.exit(code)  # (a message, or something left to clean up: Python's own exit)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # a reader gone, or a stream closed: nothing more can be said
        pass
    os._exit(code)


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C


class Interrupted(SystemExit):
    """Ctrl-C: raised where the run is, so that its clean-up (pools terminated, temp files removed) runs, and
    not a KeyboardInterrupt, which click would turn into "Aborted!" and exit 1."""


def _interrupted(signum: int, frame: object) -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second Ctrl-C during the clean-up ends the process at once
    raise Interrupted(EXIT_INTERRUPTED)


class Terminated(SystemExit):
    """SIGTERM (``kill``, a scheduler stopping a job) during a trace copy: raised where the copy is, so that its
    temp file is removed, as on Ctrl-C; the exit status is the one a shell shows for a killed process (143)."""


def _sigterm_cleans_up() -> None:
    """From here on, SIGTERM ends the command through its clean-up (its temp file removed, its pools terminated).
    Pool workers set SIGTERM's default again as they start (tracekit.workers.worker_init), so they still die at once
    when their pool is terminated."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)


def _terminated(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM during the clean-up ends the process at once
    raise Terminated(128 + signum)


def _quiet_echo(text: str) -> None:
    try:
        click.echo(text, err=True)
    except (BrokenPipeError, ValueError, OSError):
        pass


def _threads_alive() -> bool:
    """Threads besides this one that may still have work. Dask's offload thread is not one: it is idle once
    ``--dask``'s cluster and client are closed, and waiting for Python's own exit cost 0.3 s of a 7.7 s run."""
    return any(t is not threading.main_thread() and not t.name.startswith("Dask-Offload")
               for t in threading.enumerate())


def _let_threads_end(timeout_s: float = 2.0) -> None:
    """After Ctrl-C, give the threads the run leaves (a process pool's manager, ending its terminated workers) a
    moment to finish. Why: one still alive sends the exit through Python's own, whose pool hook can then wake a
    pipe the manager just closed and print a traceback after "Interrupted" (seen on a loaded machine)."""
    deadline = time.monotonic() + timeout_s
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:  # (daemon threads, Dask's, do not hold the exit)
            t.join(max(0.0, deadline - time.monotonic()))


def _children_alive() -> bool:
    mp = sys.modules.get("multiprocessing")  # (never imported by a run without a pool: then there are none)
    return bool(mp is not None and mp.active_children())
