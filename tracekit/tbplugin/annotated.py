"""The tab's "open annotated trace": a copy of one trace file of a run with tracekit's tracks (``tracekit annotate``),
served as a ``.json.gz`` download to open in Perfetto UI, chrome://tracing or TensorBoard's trace view.

Where the copies live: a folder of the plugin's own outside the logdir (a temp folder, removed when TensorBoard
exits), never beside the input. A copy is keyed like the tab's analyses, by the file's path, device, inode, mtime,
ctime and size: asking again for an unchanged file serves the copy already made, a changed file is annotated again
(and its old copy removed). Which file: the run and the file name come from the request and are matched against
the logdir's own listing, and the file must resolve inside the logdir (a symlink out of it is refused).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import threading
import weakref
from pathlib import Path

from ..annotation import annotate_path
from ..run.runs import Run

FileKey = tuple[str, int, int, int, int, int]
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_NAME = 120


def file_key(f: Path) -> FileKey:
    """What a cached product of ``f`` is valid for: its path, identity (device, inode), mtime, ctime and size."""
    st = os.stat(f)
    return (str(f), st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


class Refused(Exception):
    """A request for a file the route does not serve: ``code`` is the HTTP status, the message one line."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def download_name(run: str, file: Path) -> str:
    """``<run>-<file stem>.annotated.json.gz`` in letters, digits, '.', '_' and '-' only (a header-safe name)."""
    stem = file.name
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    safe = _UNSAFE.sub("_", f"{run}-{stem}").strip("._-")[:_MAX_NAME] or "trace"
    return f"{safe}.annotated.json.gz"


class AnnotatedCache:
    """Annotated copies of a logdir's trace files, made on first request, one at a time per file."""

    def __init__(self, root: Path, folder: Path | None = None) -> None:
        self.root = root
        self._folder = folder  # (a temp folder made on first use unless given, removed at exit)
        self._lock = threading.Lock()
        self._gates: dict[str, threading.Lock] = {}  # input path -> held while its copy is made
        self._made: dict[str, Path] = {}  # input path -> its current copy
        self.annotated = 0  # how many copies were made (tests read it to see the cache work)

    def trace(self, run: Run, name: str) -> Path:
        """The file of ``run`` named ``name`` (its name as listed, no path), inside the logdir; else Refused."""
        hits = [f for f in run.files if f.name == name]
        if len(hits) != 1:
            raise Refused(404, f"run {run.name!r} has no trace file named {name!r}")
        real, top = os.path.realpath(hits[0]), os.path.realpath(self.root)
        if os.path.commonpath([real, top]) != top:
            raise Refused(403, f"{name!r} lies outside the logdir")
        return hits[0]

    @property
    def folder(self) -> Path:
        with self._lock:
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix="tracekit-annotated-"))
                weakref.finalize(self, shutil.rmtree, str(self._folder), ignore_errors=True)
            return self._folder

    def copy(self, src: Path) -> Path:
        """The annotated copy of ``src``: the one made before while ``src`` is unchanged, else a new one."""
        top = os.path.realpath(self.root)
        if os.path.commonpath([os.path.realpath(self.folder), top]) == top:
            raise Refused(500, "the annotated-trace folder lies inside the logdir: set TMPDIR elsewhere")
        with self._lock:
            gate = self._gates.setdefault(str(src), threading.Lock())
        with gate:
            key = hashlib.sha256(repr(file_key(src)).encode()).hexdigest()[:32]
            out = self.folder / f"{key}.json.gz"
            if not out.is_file():
                annotate_path(src, out, jobs=1, decode_workers=1)
                with self._lock:
                    self.annotated += 1
            with self._lock:
                old, self._made[str(src)] = self._made.get(str(src)), out
            if old is not None and old != out:
                old.unlink(missing_ok=True)
            return out
