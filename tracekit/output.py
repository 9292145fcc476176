"""Writing what tracekit makes, in one place: reports (``attribute``/``diff``/``report -o``) and trace copies
(``redact``, ``annotate``), to a file or to stdout, and never over an input.

Why one place: a failed write (a full disk, a renderer's error, a cut-off input) must leave no half-written file,
and no command may destroy the trace it reads (the evidence of a damaged run), however ``-o`` names it (another
path, a symlink, a hard link). A file is written to a temp file beside it and renamed into place only when the
whole output is there; a ``.gz`` name is gzip-compressed with a fixed header (the same output gives the same
bytes); a new file gets 0666 minus the umask, as shell redirection would, and a file written over keeps its
mode (``new_mode``: reports and trace copies alike).

A bottom-layer module (``.importlinter``): the standard library and tracekit.errors only, so ``tracekit --help``
stays light; the callers say which paths are inputs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from .errors import OutputError, TraceReadError, UsageError

MAX_WRITE = 1 << 30  # one write() call; Linux moves at most ~2 GiB per call anyway


# ---------------------------------------------------------------------------------------------
# Never over an input


def refuse_inputs(outputs: Iterable[Path], inputs: Iterable[Path]) -> None:
    """Refuse (UsageError) an output that is one of ``inputs``: by resolved path (a symlink, ``..``) and by file
    identity (st_dev, st_ino: a hard link), so no name for an input trace can be written over."""
    inputs = list(inputs)
    ids = {}
    for f in inputs:
        with contextlib.suppress(OSError):
            st = os.stat(f)
            ids[(st.st_dev, st.st_ino)] = f
    real_inputs = {os.path.realpath(f): f for f in inputs}
    for o in outputs:
        hit = real_inputs.get(os.path.realpath(o))
        if hit is None:
            with contextlib.suppress(OSError):
                st = os.stat(o)
                if stat.S_ISREG(st.st_mode):
                    hit = ids.get((st.st_dev, st.st_ino))
        if hit is not None:
            alias = "" if os.path.abspath(o) == os.path.abspath(hit) else f" ({hit})"
            raise UsageError(f"{o}: refusing to overwrite an input trace{alias}")


def refuse_next_input(output: Path, folder: Path, suffixes: tuple[str, ...]) -> None:
    """Refuse an output inside the input ``folder`` whose name the next run of that folder would read as a trace
    (``suffixes``: the trace names discovery reads)."""
    root, out = os.path.realpath(folder), os.path.realpath(output)
    if os.path.isdir(root) and out.startswith(root.rstrip(os.sep) + os.sep) and out.endswith(suffixes):
        raise UsageError(f"{output}: refusing to write a file that the next run of {folder} would read as a trace")


# ---------------------------------------------------------------------------------------------
# Bytes out


def encode(chunk: str) -> bytes:
    """UTF-8; lone surrogates (a "\\ud800" escape in a trace's JSON) must not crash the write."""
    return chunk.encode("utf-8", "backslashreplace")


def write_all(f: IO[bytes], data: bytes) -> None:
    """Write every byte or raise: a raw or non-blocking stream may take fewer bytes than given."""
    view = memoryview(data)
    while view:
        try:
            n = f.write(view[:MAX_WRITE])
        except BlockingIOError as exc:  # stdout left non-blocking by another program
            n = exc.characters_written
            _wait_writable(f)
        else:
            if n is None:  # a raw non-blocking stream with no room
                n = 0
                _wait_writable(f)
            elif n <= 0:
                raise OSError(errno.EIO, f"short write ({len(data) - len(view)} of {len(data)} bytes written)")
        view = view[n:]


def _wait_writable(f: IO[bytes]) -> None:
    import select

    select.select([], [f], [])


def to_stdout(chunks: Iterable[str]) -> None:
    """The chunks on stdout; a reader that went away (``| head``) is not an error, any other failure is."""
    out: IO[bytes] = sys.stdout.buffer  # what click.get_binary_stream("stdout") returns for a real stdout
    try:
        for chunk in chunks:
            write_all(out, encode(chunk))
        out.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        _quiet_stdout()
    except OSError as exc:
        raise OutputError(f"<stdout>: cannot write ({exc.strerror or exc})") from None


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not complain about the pipe."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def umask() -> int:
    """The process's umask (read by setting it, then set back)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def new_mode(old: os.stat_result | None) -> int:
    """The mode of a file written at a name: the old file's where a regular file is there (its owner chose it:
    a 0600 report stays private), else 0666 minus the umask, as shell redirection gives a new file."""
    if old is not None and stat.S_ISREG(old.st_mode):
        return stat.S_IMODE(old.st_mode)
    return 0o666 & ~umask()


def _at(path: Path) -> os.stat_result | None:
    """What is at ``path`` itself (a link is not followed); None when nothing is, or it cannot be looked at (the
    write then says why)."""
    try:
        return os.lstat(path)
    except OSError:
        return None


@contextlib.contextmanager
def _gzipped(raw: IO[bytes], gz: bool, name: str) -> Iterator[IO[bytes]]:
    """``raw``, or a gzip stream onto it named after ``name`` without its ``.gz``; mtime 0: the same content
    gives the same bytes, whatever the temp file's name."""
    if not gz:
        yield raw
        return
    import gzip

    inner = name[:-3] if name.lower().endswith(".gz") else name
    with gzip.GzipFile(filename=inner, mode="wb", fileobj=raw, compresslevel=6, mtime=0) as z:
        yield z  # type: ignore[misc]


@contextlib.contextmanager
def _replaced(target: Path, mode: int, gz: bool, durable: bool) -> Iterator[IO[bytes]]:
    """A stream onto a temp file beside ``target``, renamed onto it when the block ends well and removed on any
    failure. ``durable``: synced to disk before the rename. OSErrors go to the caller, who words them."""
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as raw:
            os.fchmod(raw.fileno(), mode)
            with _gzipped(raw, gz, target.name) as out:
                yield out
            if durable:
                raw.flush()
                os.fsync(raw.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_report(chunks: Iterable[str], output: Path, gz: bool) -> None:
    """A rendered report at ``output``, atomically (temp file + rename, synced).

    Through a symlink the file it names is replaced and the link kept; an existing file keeps its mode. A FIFO
    or device (``-o /dev/stdout``) has nothing to replace and is written directly, under the name as given (the
    target of /dev/stdout may be a pipe).
    """
    try:
        st: os.stat_result | None = os.stat(output)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"{output}: cannot write ({exc.strerror or exc})") from None
    target = Path(os.path.realpath(output))
    try:
        if st is not None and not stat.S_ISREG(st.st_mode):
            with open(output, "wb") as f, _gzipped(f, gz, output.name) as out:
                _write_chunks(out, chunks)
            return
        with _replaced(target, new_mode(st), gz, durable=True) as out:
            _write_chunks(out, chunks)
    except OSError as exc:
        raise OutputError(f"{output}: cannot write ({exc.strerror or exc})") from None


def _write_chunks(out: IO[bytes], chunks: Iterable[str]) -> None:
    for chunk in chunks:
        write_all(out, encode(chunk))


@contextlib.contextmanager
def trace_copy(src: Path, dst: Path) -> Iterator[IO[bytes]]:
    """A binary stream for a copy of the trace ``src`` at ``dst`` (gzip when its name ends in .gz; its folder made
    if missing; a new file at that very name: a regular file there keeps its mode, a symlink is replaced, not
    written through, by a file of 0666 minus the umask), renamed into place only when the body ends well. Errors
    reading ``src`` (a cut-off .gz) become TraceReadError, errors writing OutputError (redact, annotate)."""
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        with _replaced(dst, new_mode(_at(dst)), dst.name.lower().endswith(".gz"), durable=False) as out:
            yield out
    except (EOFError, OSError) as exc:
        raise _copy_error(exc, src, dst) from None


def _copy_error(exc: EOFError | OSError, src: Path, dst: Path) -> Exception:
    """Whose fault a failed copy was: the input's (it ended early, or reading it failed) or the output's."""
    import gzip

    if isinstance(exc, (EOFError, gzip.BadGzipFile)) or str(src) in str(getattr(exc, "filename", "")):
        return TraceReadError(f"{src}: cannot read ({exc})")
    assert isinstance(exc, OSError)
    return OutputError(f"{dst}: cannot write ({exc.strerror or exc})")
