"""Paths of trace files: their names, and why a path cannot be read as one (worded for a user).

Checked before opening: opening a FIFO would block, a device never ends. Discovery of a folder's
files (tracekit.run.inputs) and the reader (tracekit.io.load) both ask here.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..errors import TraceFormatError, TraceNotFoundError, TraceReadError

TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
PLAIN_SUFFIXES = (".json", ".json.gz")  # read from a folder that holds no TRACE_SUFFIXES file


def check_trace_file(path: str | os.PathLike[str]) -> None:
    """Raise the accurate error for a path that is not a readable, non-empty regular file.

    ``load_trace`` calls this before opening: opening a FIFO would block, a device never ends.
    """
    p = Path(path)
    problem = trace_file_problem(p, stat_path(p))
    if problem is not None:
        raise problem


def stat_path(p: Path) -> os.stat_result:
    """``os.stat`` with the failure worded for a user: a loop or a dangling link is not 'missing'."""
    try:
        return os.stat(p)
    except OSError as exc:
        raise access_error(p, exc) from None


def access_error(p: Path, exc: OSError) -> TraceNotFoundError | TraceReadError:
    if exc.errno == errno.ELOOP:
        return TraceReadError(f"{p}: symlink loop")
    if exc.errno == errno.ENOENT:
        if os.path.islink(p):
            return TraceNotFoundError(f"{p}: dangling symlink (points to {os.readlink(p)}, which does not exist)")
        return TraceNotFoundError(f"{p}: no such file or directory")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return TraceReadError(f"{p}: permission denied")
    return TraceReadError(f"{p}: cannot access ({exc.strerror or exc})")


def trace_file_problem(p: Path, st: os.stat_result) -> TraceReadError | TraceFormatError | None:
    """Why ``p`` (already stat'ed, symlinks followed) cannot be read as a trace, or None."""
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        return TraceReadError(f"{p}: is a folder, not a trace file")
    if stat.S_ISFIFO(mode):
        return TraceReadError(f"{p}: is a FIFO, not a trace file")
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return TraceReadError(f"{p}: is a device, not a trace file")
    if stat.S_ISSOCK(mode):
        return TraceReadError(f"{p}: is a socket, not a trace file")
    if not stat.S_ISREG(mode):
        return TraceReadError(f"{p}: is not a regular file")
    if not os.access(p, os.R_OK):
        return TraceReadError(f"{p}: permission denied")
    if st.st_size == 0:
        return TraceFormatError(f"{p}: file is empty")
    return None
