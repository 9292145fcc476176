"""Decode the batches of ONE big trace in worker processes; merge them in order (``--decode-workers``).

The parent cuts the events array (tracekit.read, ``EventStream.windows``); each window goes to a
forked worker that decodes it and runs the loader's ingest on it alone, with the thread
and stream tables the parent knew when it sent it (with two decode workers of a plain file, the parent is one of
them: it decodes every other window itself, likewise, ``_parent_cycle``). The parent merges the results strictly in
order, renumbering threads and streams first seen in a window, so tables, first-seen orders, shape
lists and drop counters are those of the serial path (tracekit.load): the output is byte-identical.
A plain file's windows are passed over by the parent, which reads only the end of each to find its cut
(``FileWindow``), and each worker reads its own from the file; a gzip's are inflated by the parent and
copied through a ring of shared memory. Each window's result comes back pickled in its own slot of that ring,
not through the pool's pipe (``_task``).

A window's cut is only a candidate until a worker decodes it. When one does not decode (a cut
inside a string, a syntax error) or the reader needs its slow path, the file is re-read serially
from that window on (the windows proven before it are passed over undecoded), so every damaged
file gets exactly the serial path's warnings and errors. At most ``decode_workers + 1`` windows are in
flight, one slot each of a ring of shared memory.
"""

from __future__ import annotations

import mmap
import os
import pickle
import time
from array import array
from collections import Counter, deque
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec.structs import astuple

from ..workers import worker_init
from ..model import DeviceEvent, Flow, GpuAnnotation, HostEvent, MemoryEvent, RuntimeEvent, Trace, TraceInfo
from .builder import TraceBuilder
from .read import Event, EventStream, Fallback, FileWindow, ReadSummary, decode_events, decode_pieces

if TYPE_CHECKING:
    from multiprocessing.pool import AsyncResult, Pool

# Below this much JSON a pool costs more than it saves (forking, pickling): such files are read serially.
MIN_PARALLEL = 64 << 20
# The windows' size here: half the serial reader's chunk. Each worker holds one decoded window (about
# 2.2x its JSON) at a time, so this bounds the workers' memory; at 16 MB the whole process tree of
# ``--decode-workers 2`` peaked below the serial path on a 1 GB trace, as fast as with 32 MB
# (benchmarks/README.md).
PARALLEL_CHUNK = 8 << 20
# Workers a big file gets by default: with 3 or more the parent only reads and merges (with 2, of a plain file, it
# decodes every other window itself: _parent_cycle), and merging each worker's windows takes it about 40% of what
# decoding them took the worker, so past 3-4 workers more only add memory (about one window each).
MAX_DEFAULT_WORKERS = 4
_GZ_RATIO = 10  # traces inflate 10-30x: a .gz above MIN_PARALLEL / 10 is taken for a big one

_Tables = tuple[dict, dict, dict, dict]  # threads, raw threads, streams, raw streams
_Windows = Generator[memoryview | FileWindow | list[Event], None, ReadSummary]  # EventStream.windows()


def worth_parallel(path: Path) -> bool:
    """Whether ``path`` holds enough JSON for worker processes to pay."""
    try:
        size = path.stat().st_size
    except OSError:
        return False  # the serial reader says what is wrong
    return size * (_GZ_RATIO if _gzip(path) else 1) > MIN_PARALLEL


def _gzip(path: Path) -> bool:
    """Whether ``path`` starts as a gzip does (False where it cannot be read: the reader says what is wrong)."""
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"\x1f\x8b"
    except OSError:
        return False


_RING_CHUNKS = 4  # a ring slot's size, in chunks
_RING: list[mmap.mmap] = []  # shared memory made before the fork: the windows travel through it, not a pipe
_FILE: list[int] = []  # a plain file's descriptor, opened before the fork: its FileWindows are read from it
_SCRATCH = bytearray()  # the buffer a worker's FileWindows are read into (and the parent's own), reused


def _close_ring() -> None:
    """Free what a parallel read held: the ring, the file's descriptors, the buffer the parent's own windows were read
    into (``_InOrder._own``)."""
    global _SCRATCH
    _SCRATCH = bytearray()
    for m in _RING:
        m.close()
    _RING.clear()
    _close_own()
    for fd in _FILE:
        os.close(fd)
    _FILE.clear()


def _read_window(w: FileWindow) -> bytearray | None:
    """(In a worker) the bytes of a window the parent passed over, framed by '[' and ']' like a ring slot's;
    None when the file no longer holds them all (it shrank since: the serial re-read then says what is left)."""
    global _SCRATCH
    if len(_SCRATCH) < w.size:
        _SCRATCH = bytearray(w.size)
    fd = _own_fd()
    with memoryview(_SCRATCH) as view:
        got = 0
        while got < w.size:
            n = os.preadv(fd, [view[got: w.size]], w.offset + got)
            if n <= 0:
                return None
            got += n
    _SCRATCH[0], _SCRATCH[w.size - 1] = 0x5B, 0x5D  # '[' and ']'
    return _SCRATCH


_OWN: list[tuple[int, int, int]] = []  # this process's (pid, inherited descriptor, its own descriptor of the file)


def _own_fd() -> int:
    """(In a worker) a descriptor of the parent's file with its own file position and read-ahead state.

    Why: the descriptor inherited across the fork shares one open file, and so one read-ahead state, between the
    workers, whose windows interleave: at 10 GB, with part of the file out of the page cache, the kernel's time
    doubled (16 -> 29-38 s, benchmarks/README.md). Reopened through /proc (the same file, even if its path was
    replaced since), else the inherited one."""
    inherited = _FILE[0]
    if _OWN and _OWN[0][:2] == (os.getpid(), inherited):
        return _OWN[0][2]
    _close_own()
    try:
        fd = os.open(f"/proc/self/fd/{inherited}", os.O_RDONLY)
    except OSError:
        fd = inherited
    else:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    _OWN[:] = [(os.getpid(), inherited, fd)]
    return fd


def _close_own() -> None:
    """Close this process's own descriptor (one a forked worker opened dies with it)."""
    for pid, inherited, fd in _OWN:
        if pid == os.getpid() and fd != inherited:
            os.close(fd)
    _OWN.clear()


def _work(slot: int | bytes | FileWindow, size: int, tables: _Tables) -> tuple[Any, ...] | None:
    """Decode the window in ring slot ``slot`` (or ``slot`` itself, a window too big for the ring; or the file's
    bytes a FileWindow names) and ingest it alone (in a worker); None when it does not decode."""
    done = _ingested(slot, size, tables)
    if done is None:
        return None
    b, n, read_dropped = done
    b.release()  # (no cycle left: freed on return, although a worker forked from the CLI has its GC paused)
    return _result_of(b, n, read_dropped, tables, _columns)


def _ingested(slot: int | bytes | FileWindow, size: int,
              tables: _Tables) -> tuple[TraceBuilder, int, Counter[str]] | None:
    """``_work``'s window ingested alone into a builder of its own (``_builder``); None when it does not decode."""
    buf: mmap.mmap | bytearray | bytes | None
    if isinstance(slot, FileWindow):
        buf = _read_window(slot)
        if buf is None:
            return None
    else:
        buf = _RING[slot] if isinstance(slot, int) else slot
    done = _pieces(buf, size, tables) if not isinstance(buf, bytes) else None
    if done is None:  # (a piece that did not decode: the window whole decides, as the serial reader would)
        done = _whole(memoryview(buf)[:size], tables)
    return done


def _result_of(b: TraceBuilder, n: int, read_dropped: Counter[str], tables: _Tables,
               part: Callable[[list], Any]) -> tuple[Any, ...]:
    """What ``_merge`` appends of a window's builder ``b`` (made with ``tables``); ``part(events)`` is how each
    list of events goes (``_columns`` from a worker, the list itself from the parent's own windows)."""
    threads, raw_threads, streams, raw_streams = tables
    tr = b.tr
    return (n, read_dropped, b.dropped, len(threads), len(streams),
            list(b.threads)[len(threads):], list(b.raw_threads.items())[len(raw_threads):],
            list(b.streams)[len(streams):], list(b.raw_streams.items())[len(raw_streams):],
            *(part(events) for events in (tr.host, tr.runtime, tr.device, tr.gpu_annotations, tr.memory, tr.flows)),
            array("q", tr.op_inputs), list(tr.op_inputs.values()), tr.seq_host, tr.seq_nr, tr.seq_fwd,
            b.steps, list(b.shapes_seen), b.range_profiler, list(b.names))


def _task(window: int | bytes | FileWindow, size: int, tables: _Tables, out: int) -> int | bytes | None:
    """(In a worker) ``_work`` on a window, its result pickled into ring slot ``out``: the pickle's size; or the
    pickle itself, where it does not fit there; None when the window does not decode.

    Why the ring: a result sent through the pool's pipe (megabytes a window) keeps the pipe readable while it
    flows, and the pool's worker-handler thread, which waits on that pipe, spins meanwhile (on a 1 GB trace
    0.25 s of the parent's CPU), besides the result thread's reads and copies. The slot is the window's own:
    the parent sends no window to it before it has loaded this result (``_InOrder._send``)."""
    res = _work(window, size, tables)
    if res is None:
        return None
    ring = _RING[out]
    ring.seek(0)
    try:
        pickle.dump(res, ring, protocol=pickle.HIGHEST_PROTOCOL)  # (written frame by frame: no copy in between)
    except ValueError:  # beyond the slot (mmap.write: "data out of range"): through the pipe, as it is
        return pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL)
    return ring.tell()


def _result(got: int | bytes, out: int) -> tuple[Any, ...]:
    """(In the parent) the result ``_task`` left in ring slot ``out`` (``got``: its size), or sent itself."""
    if isinstance(got, bytes):
        return pickle.loads(got)
    with memoryview(_RING[out]) as view, view[:got] as data:
        return pickle.loads(data)


def _builder(tables: _Tables) -> TraceBuilder:
    """A builder for one window that knows the threads and streams the parent knew when it sent it."""
    b = TraceBuilder(TraceInfo(source=""))
    threads, raw_threads, streams, raw_streams = tables
    b.threads, b.raw_threads = dict(threads), dict(raw_threads)
    b.streams, b.raw_streams = dict(streams), dict(raw_streams)
    return b


def _whole(view: memoryview, tables: _Tables) -> tuple[TraceBuilder, int, Counter[str]] | None:
    """The window decoded in one piece and ingested; None when it does not decode."""
    try:
        events, read_dropped = decode_events(view)
    except (msgspec.DecodeError, RecursionError):
        view.release()
        return None
    b = _builder(tables)
    b._ingest(events)  # (it copies what it keeps of the Raw fields, which point into the window)
    n = len(events)
    del events
    view.release()
    return b, n, read_dropped


def _pieces(ring: mmap.mmap | bytearray, size: int, tables: _Tables) -> tuple[TraceBuilder, int, Counter[str]] | None:
    """The window ``ring[:size]`` (``[`` … ``]``) decoded and ingested piece by piece (``read.decode_pieces``), so
    that each piece's objects are ingested while in cache; None when a piece does not decode (the caller then
    tries the window whole)."""
    b = _builder(tables)
    n = 0
    read_dropped: Counter[str] = Counter()
    pieces = decode_pieces(ring, size - 1)
    while True:
        try:
            events, dropped, _ = next(pieces)
        except StopIteration as stopped:
            if stopped.value == size - 1:
                return b, n, read_dropped
            b.release()
            return None
        b._ingest(events)  # (it copies what it keeps of the Raw fields, which point into the ring)
        n += len(events)
        read_dropped.update(dropped)
        del events


def _columns(events: list) -> list[Sequence[Any]]:
    """A list of structs as one tuple per field: these pickle at a fraction of the structs' cost
    (one memoised string per distinct name), and ``_rows`` rebuilds the structs in one C loop.
    (Each struct as a tuple, transposed by zip: C loops, 10-30% cheaper than one attrgetter pass per field.)

    The ``ts`` column travels as an int64 array (the parse bounds keep every ts in ns within int64): its
    values are epoch-sized, which pickle writes and reads one by one as long ints, and an array as one
    buffer (x8: the parent's unpickling and rows about a fifth cheaper, the worker's pickling no dearer)."""
    if not events:
        return []
    cols: list[Sequence[Any]] = list(zip(*map(astuple, events)))
    i = type(events[0]).__struct_fields__.index("ts")
    try:
        cols[i] = array("q", cols[i])
    except OverflowError:  # (not within the bounds: then it travels as it is)
        pass
    return cols


def _rows(cls: type, columns: list[Sequence[Any]], field: str, renumber: list[int] | None) -> list:
    """The structs of ``_columns``; ``renumber`` maps the ``field`` column (a thread or stream index)."""
    if not columns:
        return []
    if renumber is not None:
        i = cls.__struct_fields__.index(field)  # type: ignore[attr-defined]
        columns[i] = [renumber[t] for t in columns[i]]
    return list(map(cls, *columns))


def _renumber(table: dict, raw: dict, known: int, new: list, new_raw: list) -> list[int] | None:
    """Add a window's new threads (or streams) to the parent's tables; the local -> global map, None if identity."""
    local = list(range(known))
    for key in new:
        g = table.get(key)
        if g is None:
            g = table[key] = len(table)
        local.append(g)
    for spelling, i in new_raw:
        raw.setdefault(spelling, local[i])
    return None if all(g == i for i, g in enumerate(local)) else local


def _events(cls: type, events: list, field: str, renumber: list[int] | None) -> list:
    """``_rows`` for the parent's own windows, whose results are the events themselves (no columns)."""
    return events if renumber is None else _rows(cls, _columns(events), field, renumber)


def _merge(b: TraceBuilder, res: tuple[Any, ...], read_dropped: Counter[str],
           rows: Callable[[type, Any, str, list[int] | None], list] = _rows) -> int:
    """Append one window's results to the builder, as its ingest would have; returns its event count. ``rows``
    gives each part's events (``_rows`` of a worker's columns, ``_events`` of the parent's own events)."""
    (n, rdrop, bdrop, n_threads, n_streams, new_threads, new_raw_threads, new_streams, new_raw_streams,
     host, runtime, device, annotations, memory, flows, op_at, op_inputs, seq_host, seq_nr, seq_fwd,
     steps, shapes, range_profiler, names) = res
    tmap = _renumber(b.threads, b.raw_threads, n_threads, new_threads, new_raw_threads)
    smap = _renumber(b.streams, b.raw_streams, n_streams, new_streams, new_raw_streams)
    tr = b.tr
    offset = len(tr.host)
    tr.host.extend(rows(HostEvent, host, "thread", tmap))
    tr.runtime.extend(rows(RuntimeEvent, runtime, "thread", tmap))
    tr.device.extend(rows(DeviceEvent, device, "stream", smap))
    tr.gpu_annotations.extend(rows(GpuAnnotation, annotations, "stream", smap))
    tr.memory.extend(rows(MemoryEvent, memory, "thread", tmap))
    tr.flows.extend(rows(Flow, flows, "thread", tmap))
    # (equal records of one window arrive as one object, pickle's memo shares them: memory stays flat)
    tr.op_inputs.update(zip([i + offset for i in op_at], op_inputs))
    if seq_host:
        tr.seq_host.extend(array("q", [i + offset for i in seq_host]))
        tr.seq_nr.extend(seq_nr)
        tr.seq_fwd.extend(seq_fwd)
    b.steps |= steps
    for name, dims in shapes:
        b._shape(name, dims)
    b.range_profiler = b.range_profiler or range_profiler
    for name in names:  # the file's distinct names (Trace.names): what some analyses check before a walk
        b.names.setdefault(name, name)
    b.dropped.update(bdrop)
    read_dropped.update(rdrop)
    return n


def load_parallel(b: TraceBuilder, path: Path, progress: Callable[[int, int], None] | None,
                  decode_workers: int, chunk: int | None = None) -> tuple[Trace, ReadSummary]:
    """``b.build`` over ``path``'s batches, decoded and ingested in ``decode_workers`` processes: forked workers,
    and the parent itself as one of them where ``_parent_cycle`` says so."""
    chunk = chunk or PARALLEL_CHUNK  # (read at call time: tests make it small, to get many windows from a small file)
    inflight = decode_workers + 1
    # Address space only: pages are used as windows touch them (a plain file's windows stay below two chunks).
    _RING[:] = [mmap.mmap(-1, _RING_CHUNKS * chunk) for _ in range(inflight)]
    try:
        _FILE[:] = [os.open(path, os.O_RDONLY)]  # (a plain file's windows are read from it, not the ring)
    except OSError:
        pass  # the reader says what is wrong
    cycle = _parent_cycle(decode_workers, bool(_FILE) and not _gzip(path))
    try:
        pool = _quiet_pool(decode_workers - 1 if cycle else decode_workers)
    except BaseException:
        _close_ring()
        raise
    with pool:  # (its exit terminates the pool again: a no-op, .windows() did)
        merge = _InOrder(b, pool, inflight, cycle)
        read = merge.windows(EventStream(path, progress=progress, chunk=chunk, pass_over=bool(_FILE)))
    if merge.failed:  # re-read serially from the first window that is not proven (passed over as they were)
        read = merge.serial(EventStream(path, progress=progress, chunk=chunk, trusted=merge.merged, pass_over=True))
    assert read is not None
    merge.read_dropped.update(read.dropped)
    read.dropped = merge.read_dropped
    return b.finish(merge.n, read)


def _quiet_pool(workers: int) -> Pool:
    """A pool of ``workers`` forked processes whose worker-handler thread wakes only when a worker exits, a result
    empties its cache, or it is closed or terminated: not whenever the result pipe holds data.

    Why: the stock pool's handler also waits on the result pipe, which it never reads; until the result thread
    (waiting for the GIL) has read a result, every wait returns at once and the handler spins (a 264 MB trace:
    1,400 turns of its loop, 0.07 s of the parent's CPU). It needs no such wake-up without ``maxtasksperchild``
    (its pool replaces only workers that exited, and those wake it): ``ThreadPool`` waits on the same one pipe."""
    import multiprocessing.pool  # (here: small files never pay for the import)

    class QuietPool(multiprocessing.pool.Pool):
        def _get_sentinels(self) -> list:  # (multiprocessing.pool.ThreadPool's own)
            return [self._change_notifier._reader]  # type: ignore[attr-defined]

    return QuietPool(workers, initializer=worker_init, initargs=(os.getpid(),),
                     context=multiprocessing.get_context("fork"))


def _parent_cycle(decode_workers: int, plain: bool) -> int:
    """Where the parent is one of the ``decode_workers`` (``_InOrder._own``): it decodes the last window of each
    cycle of this many itself, and a pool of one worker fewer the others; 0 where the pool decodes every window.

    Why only two workers' worth, of a plain file: there, merging the one worker's windows leaves the parent about
    half idle, and its own windows cost nothing to hand over (x8, the load's CPU: 1.25 s with two workers, 1.10 s
    with one and the parent, 0.96 s serially; the parent and the worker each about half). With more workers,
    merging their windows is more of the parent's time, and a worker's share on top would make it the slowest
    process; a gzip's parent inflates every byte besides (x8.json.gz: the parent then took 1.27 s, the wall 1.36 ->
    1.78 s)."""
    return 2 if decode_workers == 2 and plain else 0


_TERMINATE_S = 10.0  # how long Pool.terminate() may take before its workers are killed and its queue locks freed


def terminate(pool: Pool) -> None:
    """``pool.terminate()``, bounded in time. Why: it first takes the task queue's lock, and a worker that died
    holding that lock (killed while it waited for a task, or while it sent a result: python/cpython#96995) never
    gives it back, so terminate() waits forever with its workers dead. Past ``_TERMINATE_S`` the workers are killed
    and the queues' locks released, and terminate() finishes."""
    import threading

    t = threading.Thread(target=pool.terminate, name="tracekit-pool-terminate", daemon=True)
    t.start()
    t.join(_TERMINATE_S)
    if not t.is_alive():
        return
    for p in list(getattr(pool, "_pool", ())):
        if p.exitcode is None:
            p.kill()
    for q, lock in (("_inqueue", "_rlock"), ("_outqueue", "_wlock")):
        held = getattr(getattr(pool, q, None), lock, None)
        if held is not None:
            try:
                held.release()  # (a multiprocessing Lock may be released by another process than its holder's)
            except ValueError:  # it was not held
                pass
    t.join(_TERMINATE_S)


# How long a pool that is done with may take to finish the windows still in flight before it is terminated
# anyway (a window takes well under a second; this bounds the wait if a worker died and its result never comes).
_SETTLE_S = 30.0


class _Own:
    """A window the parent decodes itself (``_InOrder._own``), where a worker's would be: a ring slot, the window's
    bytes or a FileWindow, and its size; once decoded, what ``_merge`` takes of it (None: it did not decode)."""

    __slots__ = ("window", "size", "done", "result")

    def __init__(self, *, window: int | bytes | FileWindow, size: int) -> None:
        self.window = window
        self.size = size
        self.done = False
        self.result: tuple[Any, ...] | None = None


class _InOrder:
    """The parent's side of a parallel read: windows sent to the pool through the ring (or kept for the parent to
    decode itself, one of every ``cycle``), their results merged strictly in the order sent, and where that stopped
    (``failed``: a window did not decode, or the reader met what only the serial path handles; ``merged`` windows
    are proven)."""

    def __init__(self, b: TraceBuilder, pool: Pool, inflight: int, cycle: int = 0):
        self.b = b
        self.pool = pool
        self.inflight = inflight  # windows sent and not merged, at most: one ring slot each
        self.cycle = cycle  # the parent decodes the last window of each cycle of this many itself (0: none)
        # (the ring slot of the window and its result, the worker's result to come or the parent's own window)
        self.pending: deque[tuple[int, AsyncResult | _Own]] = deque()
        self.read_dropped: Counter[str] = Counter()  # the reader's drops in the windows merged, in order
        self.n = 0  # events merged
        self.merged = 0  # windows merged (all proven)
        self.sent = 0
        self.failed = False

    def windows(self, stream: EventStream) -> ReadSummary | None:
        """Send ``stream``'s windows and merge them; the reader's summary, or None once ``failed``.

        The pool is terminated and the ring closed on the way out, whatever happens; on KeyboardInterrupt
        (which reaches the workers too) at once, else once the windows in flight are done (``_settle``).
        """
        gen = stream.windows()
        try:
            read = self._until_failed(gen)
        except Exception:
            self._settle()
            raise
        else:
            self._settle()
        finally:
            gen.close()
            terminate(self.pool)  # (before the ring goes: no worker reads it any more)
            _close_ring()
        return read

    def _until_failed(self, gen: _Windows) -> ReadSummary | None:
        """``_dispatch``, where a window that fails before an error means the serial path decides."""
        try:
            return self._dispatch(gen)
        except Fallback:
            self.failed = True
        except Exception:
            self._drain()  # an earlier window may fail first: then the serial path decides
            if not self.failed:
                raise
        return None

    def _dispatch(self, gen: _Windows) -> ReadSummary | None:
        """Each window to a worker, the last batch (decoded by the reader) ingested after every window before
        it; the reader's summary, or None once ``failed``."""
        while not self.failed:
            try:
                piece = next(gen)
            except StopIteration as done:
                self._drain()
                return None if self.failed else done.value
            if isinstance(piece, (memoryview, FileWindow)):
                self._send(piece)
                del piece
            else:
                self._drain()
                if not self.failed:
                    self.n += len(piece)
                    self.b._ingest(piece)
        return None

    def _send(self, piece: memoryview | FileWindow) -> None:
        """``piece`` to a worker, through the ring slot whose last window was merged (merged here if need be); a
        FileWindow as it is (the worker reads it from the file)."""
        while len(self.pending) >= self.inflight and not self.failed:
            self._merge_next()
        if self.failed:
            return  # (its slot may still be read: the window is the serial path's now)
        out = self.sent % self.inflight  # (its result comes back through the same slot)
        slot: int | bytes | FileWindow = out
        if isinstance(piece, FileWindow):
            slot, size = piece, piece.size
        else:
            ring, size = _RING[out], len(piece)
            if size <= len(ring):
                ring[:size] = piece
            else:  # a gzip read can inflate far beyond a chunk: such a window goes through the pipe
                slot = bytes(piece)
        job: AsyncResult | _Own
        if self.cycle and self.sent % self.cycle == self.cycle - 1:
            job = _Own(window=slot, size=size)
        else:
            tables = (dict(self.b.threads), dict(self.b.raw_threads), dict(self.b.streams), dict(self.b.raw_streams))
            job = self.pool.apply_async(_task, (slot, size, tables, out))
        self.pending.append((out, job))
        self.sent += 1

    def _merge_next(self) -> None:
        out, job = self.pending[0]
        rows: Callable[[type, Any, str, list[int] | None], list]
        if isinstance(job, _Own):
            if not job.done:
                self._own(job)
            self.pending.popleft()
            res, rows = job.result, _events
        else:
            while not job.ready() and self._own_ahead():
                pass  # (the parent's own windows sent after it, decoded while the worker finishes)
            self.pending.popleft()
            got = job.get()
            res, rows = (_result(got, out) if got is not None else None), _rows
        if res is None:
            self.failed = True
        elif not self.failed:
            self.n += _merge(self.b, res, self.read_dropped, rows)
            self.merged += 1

    def _own_ahead(self) -> bool:
        """Decode the first of the parent's own windows in flight that it has not decoded yet; False if none."""
        for _, job in self.pending:
            if isinstance(job, _Own) and not job.done:
                self._own(job)
                return True
        return False

    def _own(self, job: _Own) -> None:
        """Decode and ingest one of the parent's own windows alone, as a worker would; its result, the events as
        they are, is merged in its turn (with the threads and streams renumbered, as a worker's, where windows
        before it that were not merged yet met new ones).

        Why: a worker's events cost about as much again to hand over as to decode and ingest (taken apart into
        columns, pickled, unpickled and rebuilt: ~290 ns an event on two cores); the parent's own need none of it."""
        job.done = True
        if self.failed:
            return
        b = self.b
        tables = (b.threads, b.raw_threads, b.streams, b.raw_streams)  # (copied by the window's builder)
        done = _ingested(job.window, job.size, tables)
        if done is not None:
            own, n, read_dropped = done
            job.result = _result_of(own, n, read_dropped, tables, list)
            own.release()

    def _drain(self) -> None:
        """Merge every window in flight, in order, up to the first that fails."""
        while self.pending and not self.failed:
            self._merge_next()

    def _settle(self) -> None:
        """Let the windows still in flight after a failure finish (unmerged) before the pool is terminated.

        Why: Pool.terminate() may kill the workers before its task handler has put its end marker on the result
        queue (more so with other threads in the process). A worker killed while it sends a result (a big one
        blocks once the result handler stops reading) leaves that queue's lock held or its pipe full, and
        terminate() then joins a task handler that waits for it forever (python/cpython#96995). Idle workers
        hold no such lock. On the success path nothing is in flight by now: this costs nothing there.
        """
        deadline = time.monotonic() + _SETTLE_S
        for _, job in self.pending:
            if not isinstance(job, _Own):
                job.wait(max(0.0, deadline - time.monotonic()))
        self.pending.clear()

    def serial(self, stream: EventStream) -> ReadSummary:
        """The rest of the file read serially by ``stream`` (its ``trusted`` windows passed over) and ingested."""
        gen = stream.batches()
        while True:
            try:
                batch = next(gen)
            except StopIteration as done:
                return done.value
            self.n += len(batch)
            self.b._ingest(batch)

