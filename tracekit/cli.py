"""The ``tracekit`` command: thin click wrappers that validate, call the library, and report.

Exit codes: 0 ok; 1 input could not be analysed (``Error: …``); 2 usage error;
3 results were produced from damaged input (truncated trace, dropped events);
4 ``diff --fail-if-slower`` found a regression.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

import click

from . import __version__
from .errors import OutputError, TracekitError
from .progress import Progress
from .renderers import DIFF_RENDERERS, GROUPINGS, RENDERERS, renderer_for

EXIT_DAMAGED = 3
EXIT_REGRESSION = 4


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracekit")
def cli() -> None:
    """Where the time goes inside attention, from PyTorch profiler traces."""


def _scope(ctx, param, value):
    if value is None:
        return None
    try:
        re.compile(value)
    except re.error as exc:
        raise click.BadParameter(f"not a valid regular expression ({exc})") from None
    return value


@cli.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(list(RENDERERS)), help="Output format (default: table, or from -o's extension).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to this file instead of stdout.")
@click.option("--scope", callback=_scope, metavar="REGEX", help="Names of attention modules/ranges (default: attention|attn|…).")
@click.option("--by", type=click.Choice(GROUPINGS), default="kind", show_default=True, help="One row per block kind, block, layer or step.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Processes for a folder of traces (default: one per CPU, at most one per file).")
def attribute(path: Path, fmt: str | None, output: Path | None, scope: str | None, by: str, jobs: int | None) -> None:
    """Attribute attention time in PATH (a .json/.json.gz trace or a TensorBoard run folder)."""
    from .attribute import analyze

    try:
        _refuse_clobber(output, path)
        with Progress() as progress:
            result = analyze(path, scope=scope, jobs=jobs or os.cpu_count() or 1, progress=progress.update)
        result.check()
        text = renderer_for(fmt, str(output) if output else None)(by=by, tool=f"tracekit {__version__}").render(result)
        _warn(result)
        _emit(text, output)
    except TracekitError as exc:
        raise _fail(exc) from None
    if result.damaged:
        sys.exit(EXIT_DAMAGED)


def _percent(ctx, param, value):
    if value is None:
        return None
    from .diff import parse_percent

    try:
        return parse_percent(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@cli.command()
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(list(DIFF_RENDERERS)),
              help="Output format (default: table, or from -o's extension).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to this file instead of stdout.")
@click.option("--scope", callback=_scope, metavar="REGEX", help="Names of attention modules/ranges, for both sides.")
@click.option("--fail-if-slower", "fail_pct", callback=_percent, metavar="PCT",
              help="Exit 4 when AFTER's attention time exceeds BEFORE's by more than PCT (5% or 5).")
def diff(before: Path, after: Path, fmt: str | None, output: Path | None, scope: str | None,
         fail_pct: float | None) -> None:
    """Compare attention time in BEFORE and AFTER (traces or run folders), by category, block and kernel.

    Exit codes: 0 ok; 1 error; 2 usage; 3 damaged input; 4 regression (--fail-if-slower).
    """
    from .diff import diff_paths, gate
    from .renderers import diff_renderer_for, verdict_line

    try:
        _refuse_clobber(output, before)
        _refuse_clobber(output, after)
        result = diff_paths(before, after, scope=scope)
        result.check()
        text = diff_renderer_for(fmt, str(output) if output else None)(tool=f"tracekit {__version__}").render(result)
        _warn(result.before)
        _warn(result.after)
        for w in result.warnings:
            click.echo(f"Warning: {w}", err=True)
        _emit(text, output)
    except TracekitError as exc:
        raise _fail(exc) from None
    if fail_pct is not None:
        verdict = gate(result, fail_pct)
        click.echo(verdict_line(verdict), err=True)
        if not verdict.ok:
            sys.exit(EXIT_REGRESSION)
    if result.damaged:
        sys.exit(EXIT_DAMAGED)


def _warn(result) -> None:
    for t in result.traces:
        for w in t.warnings:
            click.echo(f"Warning: {t.source}: {w}", err=True)


def _refuse_clobber(output: Path | None, path: Path) -> None:
    """Never write over an input trace; a damaged run must not destroy the evidence."""
    if output is None:
        return
    out = output.resolve()
    src = path.resolve()
    if out == src or (src.is_dir() and out.name.endswith((".json", ".json.gz")) and src in out.parents
                      and ".pt.trace." in out.name):
        raise OutputError(f"{output}: refusing to overwrite an input trace")


def _emit(text: str, output: Path | None) -> None:
    """Stdout, or an atomic write (temp file + rename) so a failure leaves no half-written file."""
    if output is None:
        click.echo(text, nl=False)
        return
    target = output.resolve()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except OSError as exc:
        raise OutputError(f"{output}: cannot write ({exc.strerror or exc})") from None
    click.echo(f"wrote {output}", err=True)


class _Fail(click.ClickException):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.exit_code = code


def _fail(exc: TracekitError) -> click.ClickException:
    return _Fail(str(exc), exc.exit_code)


def main() -> None:
    cli(prog_name="tracekit")
