"""Read a ``measured.json`` (tracekit.results.measured): strict, small, and never trusted as more than numbers.

Why strict: the file comes from beside a trace, which may have travelled; a figure that is not a finite
positive number, or a file that is not what the recorder writes, is refused with one line and the run is
shown with its profiled figures only.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ..errors import TraceFormatError
from ..results.measured import MEASURED_FILE, MEASURED_SCHEMA, Measured
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
    median = _number(doc, "median_ms", source, required=True)
    assert median is not None  # (required: a missing one raised)
    out = Measured(
        median_ms=median,
        low_ms=_number(doc, "low_ms", source), high_ms=_number(doc, "high_ms", source),
        spread_kind=_text(doc.get("spread_kind")), repeats=_count(doc, "repeats", source),
        iters=_count(doc, "iters", source), graph_median_ms=_number(doc, "graph_median_ms", source),
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


def _number(doc: dict[str, Any], key: str, source: str, required: bool = False) -> float | None:
    v = doc.get(key)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or \
            (required and v <= 0):
        raise MeasuredError(f"{source}: {key} must be a {'positive' if required else 'non-negative'} number")
    return float(v)


def _count(doc: dict[str, Any], key: str, source: str) -> int | None:
    v = doc.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise MeasuredError(f"{source}: {key} must be a whole number >= 1")
    return v


def _samples(doc: dict[str, Any], source: str) -> tuple[float, ...] | None:
    """``samples_ms``: each repeat's time, a list of positive finite numbers (absent from older files: None)."""
    v = doc.get("samples_ms")
    if v is None:
        return None
    if not isinstance(v, list) or not v or not all(
            not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in v):
        raise MeasuredError(f"{source}: samples_ms must be a non-empty list of positive numbers")
    return tuple(float(x) for x in v)


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
