"""Read a ``measured.json`` (tracekit.results.measured): strict, small, and never trusted as more than numbers.

Why strict: the file comes from beside a trace, which may have travelled; a figure that is not a finite
positive number (a latency outside 1 ns .. 1 day, a count past ``MAX_COUNT``: results/measured.py), or a file
that is not what the recorder writes, is refused with one line and the run is shown with its profiled figures
only.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ..errors import TraceFormatError
from ..results.measured import LATENCY_RANGE_WORDS, MAX_COUNT, MEASURED_FILE, MEASURED_SCHEMA, Measured, \
    plausible_latency
from ..text import printable

MAX_BYTES = 1 << 20  # a measured table is a few hundred bytes


class MeasuredError(TraceFormatError):
    """A measured.json that cannot be used: its reader turns this into a warning."""


def read_measured(path: str | os.PathLike[str]) -> Measured:
    """The measured latency in ``path``; MeasuredError (one line) when it is unreadable or not the format."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise MeasuredError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) > MAX_BYTES:
        raise MeasuredError(f"{path}: over {MAX_BYTES // 1024} KiB, not a measured table")
    return parse_measured(data, source=os.path.basename(path))


def parse_measured(data: bytes, source: str = "") -> Measured:
    """Parse the bytes of a measured.json (``MEASURED_SCHEMA``)."""
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MeasuredError(f"{source}: not JSON ({printable(str(exc))[:80]})") from None
    if not isinstance(doc, dict) or doc.get("schema") != MEASURED_SCHEMA:
        raise MeasuredError(f"{source}: not a measured table (schema {MEASURED_SCHEMA!r} expected)")
    median = _latency(doc, "median_ms", source, required=True)
    assert median is not None  # (required: a missing one raised)
    out = Measured(
        median_ms=median,
        low_ms=_latency(doc, "low_ms", source), high_ms=_latency(doc, "high_ms", source),
        spread_kind=_text(doc.get("spread_kind")), repeats=_count(doc, "repeats", source),
        iters=_count(doc, "iters", source), graph_median_ms=_latency(doc, "graph_median_ms", source),
        peak_memory_mb=_number(doc, "peak_memory_mb", source),
        launch_bound=doc.get("launch_bound") if isinstance(doc.get("launch_bound"), bool) else None,
        what=_text(doc.get("what")) or "forward pass", source=source, samples_ms=_samples(doc, source))
    try:
        out.check()
    except AssertionError as exc:
        raise MeasuredError(f"{source}: inconsistent figures ({exc})") from None
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _float(v: Any) -> float | None:
    """``v`` as a finite float, or None: not a number (a bool, a string), NaN, an infinity, or a JSON integer too
    large for a float (``1`` and 400 zeros: ``float()`` would raise OverflowError)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        x = float(v)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def _number(doc: dict[str, Any], key: str, source: str, required: bool = False) -> float | None:
    """A finite number >= 0 (> 0 where ``required``); None when absent and not required."""
    v = doc.get(key)
    if v is None and not required:
        return None
    x = _float(v)
    if x is None or x < 0 or (required and x <= 0):
        raise MeasuredError(f"{source}: {key} must be a {'positive' if required else 'non-negative'} number")
    return x


def _latency(doc: dict[str, Any], key: str, source: str, required: bool = False) -> float | None:
    """A latency figure (ms): a number, and one in the plausible range (results.measured.LATENCY_RANGE_MS)."""
    x = _number(doc, key, source, required)
    if x is not None and not plausible_latency(x):
        raise MeasuredError(f"{source}: {key} must be a latency {LATENCY_RANGE_WORDS}, not {x:.3g}")
    return x


def _count(doc: dict[str, Any], key: str, source: str) -> int | None:
    """A whole number from 1 to MAX_COUNT (larger ones break the JSON writer, and mean damage)."""
    v = doc.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_COUNT:
        raise MeasuredError(f"{source}: {key} must be a whole number from 1 to {MAX_COUNT:,}")
    return v


def _samples(doc: dict[str, Any], source: str) -> tuple[float, ...] | None:
    """``samples_ms``: each repeat's time, a list of latencies (absent from older files: None)."""
    v = doc.get("samples_ms")
    if v is None:
        return None
    xs = [_float(x) for x in v] if isinstance(v, list) else []
    if not xs or not all(x is not None and plausible_latency(x) for x in xs):
        raise MeasuredError(f"{source}: samples_ms must be a non-empty list of latencies {LATENCY_RANGE_WORDS}")
    return tuple(x for x in xs if x is not None)


def _text(v: Any) -> str | None:
    return printable(v)[:80] if isinstance(v, str) and v else None


def measured_beside(files: list[Path], *, not_in: Path | None = None) -> tuple[Measured | None, list[str]]:
    """The ``measured.json`` in the one folder that holds all of ``files``, and a warning if it is unusable.

    None without such a file, when the files lie in several folders, or when their folder is ``not_in`` (a
    sweep's root, whose loose traces are runs of their own: one table there would belong to none of them)."""
    folders = {f.parent for f in files}
    if len(folders) != 1:
        return None, []
    folder = folders.pop()
    if not_in is not None and folder == not_in:
        return None, []
    path = folder / MEASURED_FILE
    if not path.is_file():
        return None, []
    try:
        return read_measured(path), []
    except MeasuredError as exc:
        return None, [f"{folder / printable(MEASURED_FILE)}: ignored: {str(exc).split(': ', 1)[-1]}"]
