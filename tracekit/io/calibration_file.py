"""A user's fused-attention calibration file (``tracekit whatif --calibration FILE``, ``TRACEKIT_CALIBRATION``).

``scripts/profile_attention.py --calibrate`` writes one on the user's GPU (tracekit.run.calibrate). This module is
the one place that reads it, and every check of what it holds is here: the file is read once, bounded, and each
entry is checked field by field before it becomes a :class:`tracekit.calibration.Calibration`. Nothing after this
boundary meets a string where a number belongs, a NaN, a negative time or a device without peaks.

The format (version 1)::

    {"tracekit_calibration": 1,
     "provenance": {"device_name", "torch", "cudnn", "cuda", "date", "sweep", "sizes"},  (strings or null)
     "entries": [{"device", "backend", "eta_max", "l_half", "sms", "tile_q", "floor_us", "small_us",
                  "head_dim", "causal", "phase", "points", "source"}, ...]}
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..calibration import BACKENDS, CALIBRATIONS, Calibration, with_user_entries
from ..errors import UsageError
from ..hardware import lookup

__all__ = ["ENV", "FORMAT_VERSION", "MAX_BYTES", "calibration_document", "read_calibration_file", "user_calibrations"]

ENV = "TRACEKIT_CALIBRATION"  # names a calibration file whatif reads when no --calibration is given

FORMAT_VERSION = 1
MAX_BYTES = 1 << 20  # a file of a few entries is a few kB: anything near this is not one
_MAX_ENTRIES = 64
_MAX_TEXT = 2000


@dataclass(frozen=True, slots=True)
class _Field:
    """One entry field: its type and the closed range a sane value lies in (why each bound: its comment)."""

    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False


_FIELDS: dict[str, _Field] = {
    "device": _Field(str),
    "backend": _Field(str),
    "eta_max": _Field(float, 0.0, 1.0, low_open=True),  # a share of the dense peak
    "l_half": _Field(float, 0.0, 1e7),  # a key length
    "sms": _Field(int, 1, 10_000),  # streaming multiprocessors of one device
    "tile_q": _Field(int, 1, 4096),  # query rows per CTA
    "floor_us": _Field(float, 0.0, 1e5),  # the shortest kernel call: 100 ms would be no kernel
    "small_us": _Field(float, 0.0, 1e5),
    "head_dim": _Field(int, 1, 1024),
    "causal": _Field(bool),
    "phase": _Field(str),
    "points": _Field(int, 2, 100_000),  # a curve needs two points
    "source": _Field(str),
}
_CHECKS: dict[type, Callable[[object], bool]] = {
    # bool is an int to Python, and an int is a fine float: say exactly what each field takes
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    str: lambda v: isinstance(v, str),
}
_KIND_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def user_calibrations(path: str | os.PathLike[str] | None) -> tuple[tuple[Calibration, ...], list[str]]:
    """(the entries a prediction uses, warnings). ``path`` (the --calibration flag): its entries first, or the
    UsageError of a bad file. None: the file ``$TRACEKIT_CALIBRATION`` names, where it is set; a bad one there
    is a warning and the built-in entries (an environment outlives the command it was meant for)."""
    if path is not None:
        return with_user_entries(read_calibration_file(path)), []
    named = os.environ.get(ENV, "")
    if not named:
        return CALIBRATIONS, []
    try:
        return with_user_entries(read_calibration_file(named)), []
    except UsageError as exc:
        return CALIBRATIONS, [f"{ENV}: {exc}; using the built-in calibration"]


def read_calibration_file(path: str | os.PathLike[str]) -> tuple[Calibration, ...]:
    """The entries of a calibration file, each checked, their ``origin`` the path. Raises UsageError (one line,
    exit 2) naming the file and what is wrong with it; never reads more than :data:`MAX_BYTES`."""
    p = Path(path)
    doc = _parse(p, _read_bounded(p))
    if not isinstance(doc, dict):
        raise _bad(p, "not a JSON object")
    unknown = sorted(set(doc) - {"tracekit_calibration", "provenance", "entries"})
    if unknown:
        raise _bad(p, f"unknown key {unknown[0][:40]!r}")
    if doc.get("tracekit_calibration") != FORMAT_VERSION or isinstance(doc.get("tracekit_calibration"), bool):
        raise _bad(p, f'not a tracekit calibration file ("tracekit_calibration": {FORMAT_VERSION} missing)')
    _check_provenance(p, doc.get("provenance"))
    entries = doc.get("entries")
    if not isinstance(entries, list) or not 1 <= len(entries) <= _MAX_ENTRIES:
        raise _bad(p, f'"entries" must be a list of 1 to {_MAX_ENTRIES} entries')
    out = tuple(_entry(p, i, e) for i, e in enumerate(entries))
    seen: set[tuple[str, str]] = set()
    for c in out:
        if (c.device, c.backend) in seen:
            raise _bad(p, f"two entries for {c.device} {c.backend}")
        seen.add((c.device, c.backend))
    return out


def _read_bounded(p: Path) -> bytes:
    """The file's bytes: a regular file only (a FIFO would block, a device never end), at most MAX_BYTES."""
    try:
        st = os.stat(p)
        if stat.S_ISDIR(st.st_mode):
            raise _bad(p, "is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise _bad(p, "is not a regular file (a FIFO, socket or device)")
        if st.st_size > MAX_BYTES:
            raise _bad(p, f"is {st.st_size} bytes; a calibration file is at most {MAX_BYTES}")
        with open(p, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise _bad(p, f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_BYTES:  # it grew since the stat
        raise _bad(p, f"is over {MAX_BYTES} bytes")
    return data


def _parse(p: Path, data: bytes) -> Any:
    """JSON, strictly: orjson refuses NaN and Infinity, integers beyond 64 bits and invalid UTF-8."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise _bad(p, f"not valid JSON ({str(exc).splitlines()[0][:80]})") from None


def _check_provenance(p: Path, prov: object) -> None:
    if prov is None:
        return
    if not isinstance(prov, dict) or len(prov) > 32:
        raise _bad(p, '"provenance" must be an object of a few strings')
    for k, v in prov.items():
        if not (v is None or (isinstance(v, str) and _text_ok(v))):
            raise _bad(p, f'"provenance" {k[:40]!r} must be a short string')


def _entry(p: Path, i: int, e: object) -> Calibration:
    """One entry, every field checked: its keys, each value's type and range, then what it must name."""
    where = f"entry {i}"
    if not isinstance(e, dict):
        raise _bad(p, f"{where} is not an object")
    missing = [k for k in _FIELDS if k not in e]
    extra = sorted(set(e) - set(_FIELDS))
    if missing or extra:
        raise _bad(p, f"{where}: {'missing' if missing else 'unknown'} key {(missing or extra)[0][:40]!r}")
    for name, spec in _FIELDS.items():
        problem = _value_problem(e[name], spec)
        if problem:
            raise _bad(p, f"{where} {name!r} {problem}")
    return Calibration(device=_model(p, where, e), backend=e["backend"], eta_max=float(e["eta_max"]),
                       l_half=float(e["l_half"]), sms=e["sms"], tile_q=e["tile_q"], floor_us=float(e["floor_us"]),
                       small_us=float(e["small_us"]), head_dim=e["head_dim"], causal=e["causal"], phase=e["phase"],
                       source=e["source"], points=e["points"], origin=str(p))


def _model(p: Path, where: str, e: dict[str, Any]) -> str:
    """The peak table's name of the entry's device, once its backend and phase are ones whatif predicts."""
    peaks = lookup(e["device"])
    if peaks is None:
        raise _bad(p, f"{where}: device {e['device'][:60]!r} has no peak figures in tracekit.hardware")
    if e["backend"] not in BACKENDS:
        raise _bad(p, f"{where}: backend {e['backend'][:40]!r} is not one of {', '.join(BACKENDS)}")
    if e["phase"] != "forward":
        raise _bad(p, f'{where}: phase {e["phase"][:40]!r}: only "forward" calibrations are read')
    return peaks.model


def _value_problem(v: object, spec: _Field) -> str | None:
    """What is wrong with one value (its type, then its range), or None."""
    if not _CHECKS[spec.kind](v):
        return f"must be {_KIND_NAMES[spec.kind]}"
    if isinstance(v, str):
        ok = bool(v) and _text_ok(v)
        return None if ok else f"must be a non-empty printable string of at most {_MAX_TEXT} characters"
    if spec.low is None or spec.high is None or isinstance(v, bool):
        return None
    return _range_problem(float(v), spec.low, spec.high, spec.low_open)  # type: ignore[arg-type]


def _range_problem(x: float, low: float, high: float, low_open: bool) -> str | None:
    too_low = x <= low if low_open else x < low
    if math.isfinite(x) and not too_low and x <= high:
        return None
    return f"is {x:.6g}, outside {'(' if low_open else '['}{low:g}, {high:g}]"


def _text_ok(s: str) -> bool:
    return len(s) <= _MAX_TEXT and s.isprintable()


def _bad(p: Path, problem: str) -> UsageError:
    return UsageError(f"calibration file {p}: {problem}")


def calibration_document(entries: Sequence[Calibration], provenance: dict[str, str | None]) -> dict[str, object]:
    """What :func:`read_calibration_file` reads, for these entries: the writer's half of the format."""
    return {"tracekit_calibration": FORMAT_VERSION, "provenance": dict(provenance),
            "entries": [c.as_dict() for c in entries]}
