"""Which files one argument stands for: a file, a local folder, or a URL's folder (one discovery for all).

``attribute``, ``diff`` and ``report`` all go through here, so a folder gets the same warnings whichever
command reads it. Discovery never opens a trace for reading (a FIFO would block), and never skips anything
silently: every entry it leaves out is named in ``Inputs.warnings`` (README, "Exit codes").
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeGuard

from ..errors import TraceNotFoundError, TraceReadError, UsageError
from ..results.invariants import expect
from ..results.measured import MEASURED_FILE
from ..io.paths import PLAIN_SUFFIXES, TRACE_SUFFIXES, access_error, stat_path, trace_file_problem

# (name, bytes done, bytes total): the signature of Progress.update.
ProgressFn = Callable[[str, int, int], None]


@dataclass(slots=True, kw_only=True)
class Inputs:
    """The trace files one command-line argument stands for, in reading order."""

    path: Path  # as given
    files: list[Path]
    warnings: list[str] = field(default_factory=list)  # one line per entry skipped or read once for two
    incomplete: bool = False  # something that should have been read was not: results are from damaged input
    # fsspec URLs (s3://, gs://, file://…) of the files, parallel to ``files`` (which then hold the paths
    # relative to the URL given); [] for local paths.
    urls: list[str] = field(default_factory=list)

    def check(self) -> "Inputs":
        """Raise InvariantError unless this is what discovery promises: files to read, each once, in reading
        order, a URL for each when they are remote, and a warning for whatever made them incomplete."""
        expect(bool(self.files), f"{self.path}: inputs without a file")
        expect(len(set(self.files)) == len(self.files), f"{self.path}: a file listed twice")
        expect(self.files == sorted(self.files), f"{self.path}: files out of reading order")
        expect(not self.urls or len(self.urls) == len(self.files), f"{self.path}: URLs not one per file")
        expect(not self.incomplete or bool(self.warnings), f"{self.path}: incomplete, and no warning says why")
        return self

    @property
    def label(self) -> str:
        return self.path.name or str(self.path)


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: str | os.PathLike[str]) -> bool:
    """``s3://…``, ``gs://…``, ``file://…``: a location fsspec opens, not a local path."""
    return isinstance(path, str) and _URL.match(path) is not None


def discover(path: str | os.PathLike[str]) -> Inputs:
    """A file is itself; a folder (a TensorBoard run) gives its ``*.pt.trace.json[.gz]``, at any depth.

    A folder without such files falls back to its own top-level ``*.json[.gz]``. Raises a
    :class:`~tracekit.errors.TracekitError` naming the problem when nothing can be read. A URL
    (``is_url``) is listed through fsspec the same way (:func:`discover_url`).
    """
    if is_url(path):
        return discover_url(str(path)).check()
    p = Path(path)
    st = stat_path(p)
    if stat.S_ISDIR(st.st_mode):
        return _discover_folder(p).check()
    problem = trace_file_problem(p, st)
    if problem is not None:
        raise problem
    return Inputs(path=p, files=[p]).check()


def find_trace_files(path: str | os.PathLike[str]) -> list[Path]:
    """The files :func:`discover` would read (kept for callers of the old ``load.find_trace_files``)."""
    return discover(path).files


def _discover_folder(root: Path) -> Inputs:
    found = Inputs(path=root, files=[])
    named: list[Path] = []
    _walk(root, named, found)
    candidates = sorted(named)
    if not candidates:  # a folder of plainly named traces is still worth reading
        try:
            with os.scandir(root) as it:
                candidates = sorted(root / e.name for e in it if e.name.endswith(PLAIN_SUFFIXES)
                                    and e.name not in NOT_TRACES and not _is_dir(e))
        except OSError as exc:
            raise access_error(root, exc) from None
    found.files = _usable(candidates, found)
    _expect_files(str(root), len(candidates), found)
    return found


def _expect_files(root: str, candidates: int, found: Inputs) -> None:
    """Raise the accurate error when discovery left nothing to read."""
    if not found.files:
        why = f" ({found.warnings[0]})" if found.warnings else ""
        if candidates:
            raise TraceReadError(f"{root}: none of its {candidates} trace files can be read{why}")
        raise TraceNotFoundError(f"{root}: folder holds no *.pt.trace.json[.gz] files{why}")


# The layout TraceLens's inference workflow writes: a replay trace, and beside it ``capture_traces/`` with the
# traces of the graph captures it replays and ``execution_details.json`` naming them (file, batch size, mode).
CAPTURE_FOLDER, EXECUTION_DETAILS = "capture_traces", "execution_details.json"
# JSON files beside traces that are not traces: a capture folder's index, a recorder's measured latency.
NOT_TRACES = frozenset({EXECUTION_DETAILS, MEASURED_FILE})
_MAX_DETAILS = 1 << 20  # bytes: a list of a few files, never more


def is_capture_folder(folder: Path) -> bool:
    return folder.name == CAPTURE_FOLDER and _is_file(folder / EXECUTION_DETAILS)


def captures_beside(trace: Path) -> tuple[list[Path], list[str]]:
    """The capture traces a replay's ``capture_traces/execution_details.json`` names (plain file names inside
    that folder only), and warnings; every trace in the folder when the file lists none it can use."""
    folder = trace.parent / CAPTURE_FOLDER
    details = folder / EXECUTION_DETAILS
    if not _is_file(details):
        return [], []
    names, why = _listed(details)
    files = [folder / n for n in names if _plain_name(n) and _is_file(folder / n)]
    if files:
        return sorted(set(files)), []
    try:
        rest = _every_capture(folder)
    except OSError as exc:
        return [], [f"{folder}: cannot list folder ({exc.strerror or exc}); no capture read"]
    return rest, [f"{details}: {why}; read every trace in {folder.name}/ as a capture"] if rest else []


def _every_capture(folder: Path) -> list[Path]:
    """Every trace file in the capture folder (the fallback when its list names none that can be used)."""
    return sorted(p for p in folder.iterdir() if p.name.endswith(PLAIN_SUFFIXES) and p.name not in NOT_TRACES
                  and _is_file(p))


def _listed(details: Path) -> tuple[list[object], str]:
    """The ``file`` values of the capture list's entries, and what to say if none is usable (why the list is)."""
    try:
        with open(details, "rb") as f:
            raw = f.read(_MAX_DETAILS + 1)
        listed = json.loads(raw) if len(raw) <= _MAX_DETAILS else None
    except (OSError, ValueError, RecursionError) as exc:
        return [], f"{type(exc).__name__}"
    if not isinstance(listed, list):
        return [], "no usable entry" if listed is not None else "too big"
    return [e.get("file") for e in listed if isinstance(e, dict)], "no usable entry"


def _plain_name(n: object) -> TypeGuard[str]:
    """A file name inside the capture folder: no path, no '.' or '..' (no way out of the folder)."""
    return isinstance(n, str) and bool(n) and Path(n).name == n and n not in (".", "..")


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a regular file (after links); a name the system refuses to look up for any reason (too
    long, a loop, no permission) is not one: a listed entry that cannot be used, never a failure."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):  # (ValueError: a NUL in the name)
        return False


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _walk(folder: Path, out: list[Path], found: Inputs) -> None:
    """Every ``*.pt.trace.json[.gz]`` entry below ``folder``, whatever its type (checked later).

    Like ``Path.rglob``, symlinked folders are not followed (no cycles); unlike it, a folder that
    cannot be listed is reported instead of skipped in silence.
    """
    try:
        with os.scandir(folder) as it:
            entries = list(it)
    except OSError as exc:
        found.warnings.append(f"{folder}: cannot list folder ({exc.strerror or exc}); any traces in it were skipped")
        found.incomplete = True
        return
    for e in entries:
        path = folder / e.name
        if e.is_dir(follow_symlinks=False):
            if is_capture_folder(path):  # graph captures: read with the replays beside them, not as runs
                found.warnings.append(f"{path}: graph capture traces, read with the replay beside them "
                                      f"(tracekit attribute REPLAY); not attributed on their own")
                continue
            _walk(path, out, found)
        elif e.name.endswith(TRACE_SUFFIXES):
            out.append(path)


def _usable(candidates: list[Path], found: Inputs) -> list[Path]:
    """The candidates that can be read, each file once.

    ``x.json`` and ``x.json.gz`` side by side are one trace (``gzip -k`` leaves both): the
    uncompressed one is read, as it needs no inflating, unless it cannot be read. Two names
    for one file (a symlink, a hard link) are read once too, under the first name.
    """
    files: list[Path] = []
    seen: dict[tuple[int, int], Path] = {}
    for members in _copies(candidates):
        problems: list[str] = []
        chosen = None
        for c in members:
            try:
                st = os.stat(c)
            except OSError as exc:
                problems.append(str(access_error(c, exc)))
                continue
            problem = trace_file_problem(c, st)
            if problem is not None:
                problems.append(str(problem))
                continue
            chosen = c
            first = seen.setdefault((st.st_dev, st.st_ino), c)
            if first == c:
                files.append(c)
            else:
                found.warnings.append(f"{c}: same file as {first}; read once")
            break
        if chosen is None:
            found.incomplete = True
            found.warnings += [f"{w}; skipped" for w in problems]
            continue
        found.warnings += [f"{w}; skipped, {chosen.name} read instead" for w in problems]
        _warn_duplicates(members[members.index(chosen) + 1:], chosen.name, found)
    return sorted(files)


def _copies(candidates: list[Path]) -> list[list[Path]]:
    """Candidates grouped as one trace: ``x.json`` and ``x.json.gz`` side by side, the uncompressed first."""
    groups: dict[Path, list[Path]] = {}
    for c in candidates:
        key = c.with_name(c.name[:-3]) if c.name.endswith(".gz") else c
        groups.setdefault(key, []).append(c)
    return [sorted(groups[key], key=lambda c: c.name.endswith(".gz")) for key in sorted(groups)]


def _warn_duplicates(others: list[Path], chosen: str, found: Inputs) -> None:
    for c in others:
        found.warnings.append(f"{c}: duplicate of {chosen}; only {chosen} is read")


# ---------------------------------------------------------------------------------------------
# URLs: the same discovery through fsspec


def fsspec_module() -> Any:
    """fsspec, or the usage error that names the extra to install."""
    try:
        import fsspec
    except ImportError:
        raise UsageError("reading URLs needs fsspec: pip install 'tracekit[dask]'") from None
    return fsspec


def discover_url(url: str) -> Inputs:
    """A URL's trace files, found as :func:`discover` finds them in a local folder (copies read once).

    ``Inputs.urls`` holds each file's URL; ``Inputs.files`` its path relative to ``url`` (names and ranks).
    """
    fsspec = fsspec_module()
    try:
        fs, root = fsspec.core.url_to_fs(url)
        if not fs.isdir(root):
            if not fs.exists(root):
                raise TraceNotFoundError(f"{url}: no such file or directory")
            return Inputs(path=Path(root), files=[Path(root.rstrip("/").rsplit("/", 1)[-1])], urls=[url])
        listed = sorted(p for p in fs.find(root) if p.endswith(TRACE_SUFFIXES))
        if not listed:
            listed = sorted(p for p in fs.ls(root, detail=False) if p.endswith(PLAIN_SUFFIXES)
                            and p.rsplit("/", 1)[-1] not in NOT_TRACES and not fs.isdir(p))
    except (OSError, ValueError, ImportError) as exc:
        if isinstance(exc, TraceNotFoundError):
            raise
        raise TraceReadError(f"{url}: cannot list ({' '.join(str(exc).split())[:200]})") from None
    found = Inputs(path=Path(root), files=[])
    chosen = []
    for members in _copies([Path(p) for p in listed]):
        chosen.append(members[0])
        _warn_duplicates(members[1:], members[0].name, found)
    base = root.rstrip("/") + "/"
    rel = [c.as_posix()[len(base):] if c.as_posix().startswith(base) else c.as_posix() for c in chosen]
    scheme = url.split("://", 1)[0]
    found.files = [Path(r) for r in rel]
    found.urls = [c.as_posix() if "://" in c.as_posix() else f"{scheme}://{c.as_posix()}" for c in chosen]
    if not found.files:
        raise TraceNotFoundError(f"{url}: holds no *.pt.trace.json[.gz] files")
    return found
