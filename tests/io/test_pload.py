"""Issue 13 item 1: one trace file decoded in worker processes (tracekit.io.pload) gives the serial path's output.

The serial path is the reference: each test compares ``jobs=2`` against ``jobs=1`` on the same file —
the model's tables, the JSON, the warnings and the errors. Files here are small, so the tests lower
the size threshold and the chunk size (``pload.MIN_PARALLEL``, ``pload.PARALLEL_CHUNK``) to cut them into
many windows; ``windows_sent`` checks that workers really got them.
"""

from __future__ import annotations

import gzip
import json
import mmap
import os
from pathlib import Path

import pytest

from support.builders import TraceBuilder, attention_block
from support.paths import H200, real_trace_files, requires_real
from support.traces import chunk_size
from tracekit.io import load, pload, read
from tracekit.run.api import analyze
from tracekit.errors import TracekitError
from tracekit.renderers import JSONRenderer



@pytest.fixture
def windows_sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Parallel decode for any file size, in 16 KB chunks; counts the windows handed to workers."""
    monkeypatch.setattr(pload, "MIN_PARALLEL", 0)
    monkeypatch.setattr(pload, "PARALLEL_CHUNK", 16 << 10)
    monkeypatch.setattr(read, "_TAIL_WINDOW", 4 << 10)  # the events before the last one go to a worker too
    sent: list[int] = []
    base = read.EventStream.windows

    def counting(self: read.EventStream):  # type: ignore[no-untyped-def]
        gen = base(self)
        while True:
            try:
                piece = next(gen)
            except StopIteration as done:
                return done.value
            if isinstance(piece, memoryview):
                sent.append(len(piece))
            elif isinstance(piece, read.FileWindow):  # (passed over: the worker reads it from the file)
                sent.append(piece.size)
                PASSED.append(piece.size)
            yield piece

    monkeypatch.setattr(read.EventStream, "windows", counting)

    class Rereads(read.EventStream):
        def __init__(self, *args: object, **kw: object) -> None:
            super().__init__(*args, **kw)  # type: ignore[arg-type]
            if self.trusted or sent:  # a serial re-read after the windows: record how many were trusted
                REREADS.append(self.trusted)

    monkeypatch.setattr(pload, "EventStream", Rereads)
    REREADS.clear()
    PASSED.clear()
    return sent


REREADS: list[int] = []
PASSED: list[int] = []  # the sizes of the windows passed over unread (FileWindow), in order


def _json(path: Path, jobs: int) -> tuple[str, list[str], bool]:
    res = analyze(path, jobs=jobs).check()
    return JSONRenderer().render(res), res.warnings, res.incomplete


def _model(path: Path, jobs: int) -> dict:
    """The model, read serially (``jobs=1``) in the chunks ``pload.PARALLEL_CHUNK`` gives the workers: a batch that
    holds an odd event is decoded leniently as a whole, so raw shapes' spelling depends on the cuts."""
    if jobs == 1:
        with chunk_size(pload.PARALLEL_CHUNK):
            tr = load.load_trace(path)
    else:
        tr = load.load_trace(path, decode_workers=jobs)
    return {"host": tr.host, "runtime": tr.runtime, "device": tr.device, "ann": tr.gpu_annotations,
            "memory": tr.memory, "flows": tr.flows, "threads": tr.threads, "streams": tr.streams,
            "dropped": list(tr.dropped.items()), "seq": (list(tr.seq_host), list(tr.seq_nr), list(tr.seq_fwd)),
            "op_inputs": list(tr.op_inputs.items()), "steps": tr.info.steps, "shapes": tr.info.shapes,
            "warnings": tr.info.warnings, "damaged": tr.info.damaged, "events": tr.info.event_count}


def _busy_trace(path: Path, layers: int = 60) -> Path:
    """Threads and streams that first appear late (so windows renumber them), shapes, seq numbers,
    memory, flows, steps and malformed events, all interleaved."""
    b = TraceBuilder(deviceProperties=[{"name": "GPU"}])
    t = 0.0
    for i in range(layers):
        tid = 1 + i % 7 if i > layers // 2 else 1  # new host threads in the second half only
        b.annotation(f"ProfilerStep#{i // 10}", t, 400)
        attention_block(b, t + 1)
        op = b.op("aten::bmm", t + 300, 5, tid=tid)
        op["args"].update({"Input Dims": [[2, 8 + i % 9, 4], [2, 4, 8]], "Input type": ["float", "float"],
                           "Sequence number": i, "Fwd thread id": 0})
        sdpa = b.op("aten::scaled_dot_product_attention", t + 310, 5, tid=tid)
        sdpa["args"].update({"Input Dims": [[1, 2, 16, 8]] * 3, "Concrete Inputs": ["", "", "", "0.0", "True"]})
        b.launch("void gemm_kernel<float>()", t + 320, 2, t + 330, 4, stream=7 + i % 5, tid=tid)
        b.memory(t + 340, 1024 * (i + 1), tid=tid)
        b.memory(t + 341, -512, tid=tid)
        b.flow(i, True, t + 342, tid=tid)
        b.flow(i, False, t + 343, tid=2)
        if i % 11 == 5:
            b.events.append({"ph": "X", "cat": "cpu_op", "name": "bad", "pid": 100, "tid": 1, "ts": "x", "dur": 1})
        if i % 13 == 6:
            b.events.append({"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": t, "dur": -1, "name": "k"})
        if i % 17 == 3:
            b.events.append({"ph": "X", "cat": "cpu_op", "name": "big", "pid": 100, "tid": 1, "ts": 2**70, "dur": 1})
        t += 500
    return b.write(path)


def test_hand_built_trace_same_model(tmp_path: Path, windows_sent: list[int]) -> None:
    path = _busy_trace(tmp_path / "busy.json")
    serial = _model(path, 1)
    assert windows_sent == []
    parallel = _model(path, 2)
    assert len(windows_sent) > 10  # the file really was cut into many windows for the workers
    assert len(PASSED) > 10  # most of them passed over by the parent, read by the workers themselves
    assert parallel == serial
    # the trace's own counts: threads 1..7 plus none else; every layer's sdpa kept its scalars
    assert sorted(k[1] for k in serial["threads"]) == list(range(1, 8))
    assert sum(1 for _, rec in serial["op_inputs"] if rec.concrete) == 60
    assert serial["dropped"] and serial["damaged"]


def test_hand_built_trace_same_json(tmp_path: Path, windows_sent: list[int]) -> None:
    path = _busy_trace(tmp_path / "busy.json.gz")
    assert _json(path, 2) == _json(path, 1)
    assert windows_sent


def test_small_files_stay_serial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _busy_trace(tmp_path / "busy.json")
    assert not pload.worth_parallel(path)  # far below 64 MB
    monkeypatch.setattr(pload, "load_parallel", lambda *a, **k: pytest.fail("a pool for a small file"))
    load.load_trace(path, decode_workers=4)


def test_default_decode_workers_are_the_cpus_up_to_the_cap_and_jobs_the_cpus() -> None:
    from tracekit.run.execute import default_decode_workers, default_jobs, plan

    cpus = len(os.sched_getaffinity(0))
    assert default_decode_workers() == min(cpus, pload.MAX_DEFAULT_WORKERS)
    assert default_jobs() == cpus
    how = plan()  # the library's defaults are the CLI's: None means these
    assert (how.jobs, how.decode_workers) == (cpus, min(cpus, pload.MAX_DEFAULT_WORKERS))
    assert (plan(jobs=1, decode_workers=3).jobs, plan(jobs=1, decode_workers=3).decode_workers) == (1, 3)
    with pytest.raises(ValueError, match="decode_workers=0"):
        plan(decode_workers=0)


def _events_text(n: int, extra: dict[int, str] | None = None) -> list[str]:
    out = []
    for i in range(n):
        e = json.dumps({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 5}", "pid": 1, "tid": 1 + i % 3,
                        "ts": 10 * i, "dur": 5, "args": {"External id": i + 1}})
        out.append(e[:-1] + (extra or {}).get(i, "") + "}")
    return out


def _doc(events: list[str]) -> bytes:
    return ('{"schemaVersion": 1, "traceEvents": [' + ", ".join(events) + '], "traceName": "t"}').encode()


@pytest.mark.parametrize("case", ["strings with boundaries", "values out of range", "too deep", "syntax error",
                                  "truncated", "truncated gz", "truncated after events"])
def test_damaged_files_same_outcome(tmp_path: Path, windows_sent: list[int], case: str) -> None:
    """Fallbacks to the serial path (a cut inside a string, an error) and the reader's salvage
    give the same model, warnings and errors as the serial path."""
    n = 3000
    if case == "strings with boundaries":  # '}, {' inside names: candidate cuts that do not decode
        extra = {i: ', "note": "' + "x}, {" * 4000 + '"' for i in range(400, n, 700)}
    elif case == "values out of range":
        extra = {i: ', "id": ' + "9" * 30 for i in range(100, n, 300)}
    elif case == "too deep":
        extra = {1500: ', "deep": ' + "[" * 2000 + "]" * 2000}
    elif case == "syntax error":
        extra = {2000: ', "oops": tru'}
    else:
        extra = {}
    data = _doc(_events_text(n, extra))
    if case == "truncated":
        data = data[: len(data) * 2 // 3]
    elif case == "truncated after events":
        data = data[: data.rindex(b'"traceName"') + 5]
    path = tmp_path / "t.json"
    path.write_bytes(data)
    if case == "truncated gz":
        path = tmp_path / "t.json.gz"
        z = gzip.compress(data)
        path.write_bytes(z[: len(z) * 3 // 4])

    def outcome(jobs: int) -> object:
        try:
            return _model(path, jobs)
        except TracekitError as exc:
            return f"{type(exc).__name__}: {exc}"

    serial = outcome(1)
    assert outcome(2) == serial
    assert windows_sent
    assert bool(PASSED) == (case != "truncated gz")  # a plain file's windows are passed over, a gzip's sent
    if case in ("strings with boundaries", "too deep", "syntax error"):  # these windows do not decode
        assert REREADS and REREADS[0] > 0, "the serial re-read, after the windows proven before the bad one"
    else:
        assert REREADS == []
    if case == "syntax error":
        assert isinstance(serial, str) and "not valid JSON" in serial
    elif case != "strings with boundaries":
        assert isinstance(serial, dict) and serial["damaged"]


def _real_and_h200() -> list[Path]:
    return real_trace_files() + sorted(p for p in H200.rglob("*.json*") if p.name.endswith((".json", ".json.gz")))


@pytest.mark.slow
@pytest.mark.parametrize("path", _real_and_h200(), ids=lambda p: p.name)
def test_real_and_h200_traces_same_json(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pload, "MIN_PARALLEL", 0)
    monkeypatch.setattr(pload, "PARALLEL_CHUNK", 1 << 20)
    try:
        serial = _json(path, 1)
    except TracekitError as exc:
        with pytest.raises(TracekitError) as got:
            _json(path, 2)
        assert str(got.value) == str(exc)
        return
    assert _json(path, 2) == serial


@pytest.mark.parametrize("damage", ["", "truncated"])
def test_cli_jobs_reaches_one_file(tmp_path: Path, windows_sent: list[int], damage: str) -> None:
    """``tracekit attribute FILE --jobs 2``, and with no ``--jobs`` (a big file: one process per CPU, up
    to 4): same stdout, stderr and exit code as ``--jobs 1``."""
    from click.testing import CliRunner

    from tracekit.cli import cli

    path = _busy_trace(tmp_path / "busy.json")
    if damage:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) * 3 // 4])
    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:
        runner = CliRunner()

    def run(*extra: str) -> tuple[int, str, str]:
        r = runner.invoke(cli, ["attribute", str(path), "--format", "json", *extra])
        return r.exit_code, r.stdout, r.stderr

    with chunk_size(pload.PARALLEL_CHUNK):
        serial = run("--jobs", "1")
    assert windows_sent == []
    assert run() == serial
    assert bool(windows_sent) == (min(len(os.sched_getaffinity(0)), pload.MAX_DEFAULT_WORKERS) > 1)
    windows_sent.clear()
    assert run("--jobs", "2") == serial
    assert windows_sent
    assert serial[0] == 3  # the hand-built trace has malformed events: salvaged results
    assert ("truncated" in serial[2]) == bool(damage)


@requires_real  # the smallest real trace with 4 windows (issue 42: a fresh clone skips, never fails)
def test_a_worker_frees_each_windows_builder_when_the_gc_is_paused() -> None:
    # workers are forked from the CLI, whose cyclic GC is paused: a builder left in a reference cycle
    # stays in the worker (280 MB each on a 1 GB trace); each is released, so none is left for the GC
    import gc

    from tracekit.io.builder import TraceBuilder as _Builder

    pieces: list[bytes] = []
    for src in sorted(real_trace_files(), key=lambda p: p.stat().st_size):  # the smallest with 4 windows
        pieces = [bytes(p) for p in read.EventStream(src, chunk=16 << 10).windows() if isinstance(p, memoryview)]
        if len(pieces) >= 4:
            break
    assert len(pieces) >= 4
    pieces = pieces[:4]
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for piece in pieces:
            assert pload._work(piece, len(piece), ({}, {}, {}, {})) is not None
        alive = sum(type(o) is _Builder for o in gc.get_objects())
    finally:
        if was:
            gc.enable()
    assert alive == 0, f"{alive} builders kept after 4 windows"


def _ring_windows(path: Path, chunk: int) -> list[bytes]:
    return [bytes(p) for p in read.EventStream(path, chunk=chunk).windows() if isinstance(p, memoryview)]


def _in_ring(window: bytes) -> object:
    """``pload._work`` on ``window`` placed in a one-slot ring, as the parent places it; the ring's bytes after."""
    ring = mmap.mmap(-1, len(window) + 4096)
    ring[: len(window)] = window
    pload._RING[:] = [ring]
    try:
        return pload._work(0, len(window), ({}, {}, {}, {})), ring[: len(window)]
    finally:
        pload._close_ring()


@requires_real  # one of the files is the smallest real trace with 4 windows (issue 42)
@pytest.mark.parametrize("piece", [1 << 10, 1 << 19])
def test_a_window_decoded_in_pieces_is_the_window_decoded_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                piece: int) -> None:
    """A worker decodes and ingests its window in pieces (``pload.PIECE``) cut at candidate boundaries; the
    result equals the window decoded whole (``_work`` on bytes), and the ring holds the same bytes after.
    Candidates inside strings (short names holding '}, {') do not decode: the window is then decoded whole."""
    monkeypatch.setattr(read, "PIECE", piece)
    real = next(p for p in sorted(real_trace_files(), key=lambda p: p.stat().st_size)
                if len(_ring_windows(p, 16 << 10)) >= 4)
    tricky = _doc(_events_text(2000, {i: ', "note": "' + "x}, {" * 30 + '"' for i in range(3, 2000, 7)}))
    (tmp_path / "tricky.json").write_bytes(tricky)
    spaced = b'{"traceEvents": [' + " ,\n ".join(_events_text(2000)).encode() + b"]}"  # whitespace, then the comma
    (tmp_path / "spaced.json").write_bytes(spaced)
    busy = _busy_trace(tmp_path / "busy.json")
    split = failed = 0
    for src in (real, tmp_path / "tricky.json", tmp_path / "spaced.json", busy):
        windows = _ring_windows(src, 16 << 10)
        assert len(windows) >= 3
        for w in windows:
            whole = pload._work(w, len(w), ({}, {}, {}, {}))
            assert _in_ring(w) == (whole, w)
            if whole is None:  # a window cut inside a string: the parent re-reads serially (tests above)
                continue
            m = mmap.mmap(-1, len(w))
            m[:] = w
            got = pload._pieces(m, len(w), ({}, {}, {}, {}))
            if got is None:
                assert src.name == "tricky.json", "only a cut inside a string fails"
                failed += 1
            else:
                b, n, dropped = got
                assert n == whole[0] and dropped == whole[1]
                b.release()
                split += len(w) > 2 * piece
            m.close()
    if piece < 16 << 10:
        assert split > 0  # windows really were cut into pieces
        assert failed > 0  # and candidates inside strings were met


def test_the_last_stretch_of_events_goes_to_a_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At the end of the file the reader cuts one more window before the events' closing ']' (a big tail would
    be decoded in the parent while the workers wait); only the last event is decoded there. Not for a small tail."""
    path = _busy_trace(tmp_path / "busy.json")
    events = json.loads(path.read_bytes())["traceEvents"]

    def pieces(tail: int) -> list:
        monkeypatch.setattr(read, "_TAIL_WINDOW", tail)
        return list(read.EventStream(path, chunk=16 << 10).windows())

    got = pieces(4 << 10)
    assert [e.name for e in got[-1]] == [events[-1].get("name")]  # the parent decodes the last event only
    n_windows = len(got) - 1
    big_tail = pieces(1 << 30)
    assert len(big_tail) == n_windows and len(big_tail[-1]) > 1  # without: one window fewer, a bigger last batch


@pytest.mark.parametrize("damage", ["syntax error", "strings with boundaries"])
def test_the_pool_is_terminated_with_no_window_in_flight(tmp_path: Path, windows_sent: list[int],
                                                         monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    """When a window fails, the windows still in flight finish before ``Pool.terminate()``: a worker killed
    while it sends its result can leave the result queue's lock held (or its pipe full), and terminate()
    then waits forever for its task handler (python/cpython#96995)."""
    import time
    from multiprocessing.pool import Pool

    pieces = pload._pieces

    def slow(*args: object) -> object:  # (forked: the workers see it too) so that windows are in flight
        time.sleep(0.05)
        return pieces(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(pload, "_pieces", slow)
    in_flight: list[int] = []
    terminate = Pool.terminate

    def counting(self: Pool) -> None:
        in_flight.append(len(self._cache))  # type: ignore[attr-defined]  # (the results not yet back)
        terminate(self)

    monkeypatch.setattr(Pool, "terminate", counting)
    bad = {2000: ', "oops": tru'} if damage == "syntax error" else {2000: ', "note": "' + "x}, {" * 4000 + '"'}
    path = tmp_path / "t.json"
    path.write_bytes(_doc(_events_text(3000, bad)))
    try:
        load.load_trace(path, decode_workers=2)
    except TracekitError:
        assert damage == "syntax error"
    assert REREADS and REREADS[0] > 0  # a window failed: the serial re-read after the windows proven
    assert in_flight and in_flight[0] == 0


def test_a_window_the_file_no_longer_holds_is_reread_serially(tmp_path: Path, windows_sent: list[int],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A window passed over is read by the worker; where the file no longer holds it (it shrank since the parent
    found the cut), the worker says so and the serial re-read decides, after the windows proven before it."""
    path = tmp_path / "t.json"
    path.write_bytes(_doc(_events_text(3000)))
    serial = _model(path, 1)
    real = pload._read_window
    monkeypatch.setattr(pload, "_read_window", lambda w: None if w.offset > 100_000 else real(w))
    assert _model(path, 2) == serial
    assert PASSED and REREADS and REREADS[0] > 0

    fd = os.open(path, os.O_RDONLY)
    monkeypatch.setattr(pload, "_FILE", [fd])
    try:
        size = path.stat().st_size
        assert real(read.FileWindow(size - 10, 11)) is None  # one byte past the end
        got = real(read.FileWindow(35, 40))
        assert got is not None and got[:1] == b"[" and got[39:40] == b"]"
        assert bytes(got[1:39]) == path.read_bytes()[36:74]
    finally:
        pload._close_own()  # (the descriptor _read_window opened for itself here)
        os.close(fd)


def test_a_windows_columns_give_back_its_events() -> None:
    """``_columns`` (a worker's, ts as an int64 array) and ``_rows`` (the parent's) give back the very events, threads
    renumbered, whatever the ts: within int64 as the parse bounds keep it, or beyond (then it travels as a list)."""
    from tracekit.model import Flow, HostEvent, MemoryEvent

    host = [HostEvent(3, "aten::mm", 1, -(2**63), 5, 2**64), HostEvent(2, "s", 0, 2**63 - 1, 0, 0)]
    assert pload._rows(HostEvent, pload._columns(host), "thread", None) == host
    assert pload._rows(HostEvent, pload._columns(host), "thread", [4, 9]) == [
        HostEvent(3, "aten::mm", 9, -(2**63), 5, 2**64), HostEvent(2, "s", 4, 2**63 - 1, 0, 0)]
    assert pload._events(HostEvent, host, "thread", None) is host  # (the parent's own: renumbered likewise)
    assert pload._events(HostEvent, host, "thread", [4, 9]) == pload._rows(HostEvent, pload._columns(host), "thread",
                                                                           [4, 9])
    beyond = [MemoryEvent(0, 2**63, 8, 1, 8), MemoryEvent(0, 1, 8, 1)]
    assert pload._rows(MemoryEvent, pload._columns(beyond), "thread", None) == beyond
    flows = [Flow(7, True, 0, 10), Flow(7, False, 0, 20)]
    back = pload._rows(Flow, pload._columns(flows), "thread", None)
    assert back == flows and [type(f.start) for f in back] == [bool, bool] and type(back[0].ts) is int
    assert pload._columns([]) == [] and pload._rows(HostEvent, [], "thread", None) == []


def test_a_worker_reads_through_its_own_descriptor_of_the_same_file(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Each worker reads its windows through a descriptor of its own (its own file position and read-ahead state,
    not the one open file every forked worker shares), of the very file the parent opened; kept, then closed."""
    path = tmp_path / "t.json"
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_RDONLY)
    monkeypatch.setattr(pload, "_FILE", [fd])
    try:
        own = pload._own_fd()
        assert own != fd and os.fstat(own).st_ino == os.fstat(fd).st_ino
        assert pload._own_fd() == own  # opened once per process
        os.lseek(own, 50, os.SEEK_SET)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # a separate open file, not a duplicate of the inherited one
    finally:
        pload._close_own()
        os.close(fd)
    with pytest.raises(OSError):
        os.fstat(own)


def test_a_windows_result_comes_back_through_its_ring_slot() -> None:
    """A worker pickles its window's result into the ring slot it is told (``_task``), and the parent loads it from
    there (``_result``): the very result ``_work`` gives. A result bigger than the slot comes through the pipe."""
    window = _doc(_events_text(400))[len('{"schemaVersion": 1, "traceEvents": '): -len(', "traceName": "t"}')]
    assert window[:1] == b"[" and window[-1:] == b"]"
    want = pload._work(window, len(window), ({}, {}, {}, {}))
    assert want is not None and want[0] == 400
    for slot_size, through_ring in ((1 << 20, True), (4096, False)):
        pload._RING[:] = [mmap.mmap(-1, 4096), mmap.mmap(-1, slot_size)]
        try:
            got = pload._task(window, len(window), ({}, {}, {}, {}), 1)
            assert isinstance(got, int) == through_ring
            assert pload._result(got, 1) == want  # type: ignore[arg-type]
            assert pload._RING[0][:] == bytes(4096)  # (another slot is left alone)
        finally:
            pload._close_ring()
    assert pload._task(b"[" + window[1:-1] + b",]", len(window) + 1, ({}, {}, {}, {}), 0) is None  # not decoded


def test_the_pools_worker_handler_does_not_spin_on_results(tmp_path: Path, windows_sent: list[int],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool's worker-handler thread wakes when a worker exits or the pool's state changes (its cache of results
    to come emptied: at most once a window), not whenever a result waits in the result pipe for the result thread:
    the stock pool's loop turned 900-3,900 times over these 180 windows (its CPU was 0.25 s of the parent's 0.7 s on
    a 1 GB trace); the output is the serial path's."""
    from multiprocessing.pool import Pool

    path = _busy_trace(tmp_path / "busy.json", layers=600)
    serial = _model(path, 1)
    turns: list[int] = []
    maintain = Pool._maintain_pool

    def counting(*args: object) -> None:
        turns.append(1)
        maintain(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(Pool, "_maintain_pool", staticmethod(counting))
    assert _model(path, 2) == serial
    assert len(windows_sent) > 150
    assert len(turns) <= len(windows_sent) + 3  # (and once as it starts, closes, terminates)


def _own_windows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records the ring slot or file offset of each window the parent decodes itself (``_InOrder._own``)."""
    own: list[int] = []
    base = pload._InOrder._own

    def recording(self: pload._InOrder, job: pload._Own) -> None:
        own.append(job.window.offset if isinstance(job.window, read.FileWindow) else -1)
        base(self, job)

    monkeypatch.setattr(pload._InOrder, "_own", recording)
    return own


@pytest.mark.parametrize("name, workers, parent_decodes", [("busy.json", 2, True), ("busy.json.gz", 2, False),
                                                           ("busy.json", 3, False)])
def test_with_two_workers_the_parent_decodes_every_other_window_of_a_plain_file(
        tmp_path: Path, windows_sent: list[int], monkeypatch: pytest.MonkeyPatch, name: str, workers: int,
        parent_decodes: bool) -> None:
    """``decode_workers=2`` on a plain file: a pool of one worker, and the parent decodes every other window itself
    (nothing to hand over); not a gzip's (its parent inflates every byte) nor with more workers. Same model; the
    buffer the parent read its windows into is freed after the read."""
    path = _busy_trace(tmp_path / name, layers=600 if name.endswith(".gz") else 60)  # (a gzip's windows inflate)
    serial = _model(path, 1)
    own = _own_windows(monkeypatch)
    pools: list[int] = []
    quiet = pload._quiet_pool
    monkeypatch.setattr(pload, "_quiet_pool", lambda n: pools.append(n) or quiet(n))
    assert _model(path, workers) == serial
    assert len(windows_sent) >= 3  # (a parent taking windows would have taken the second)
    if parent_decodes:
        assert pools == [1]
        assert len(own) == len(windows_sent) // 2 and -1 not in own  # (the reader decodes the last batch itself)
        assert own == sorted(own) and own[0] > 0  # in order, from the second window
    else:
        assert pools == [workers] and own == []
    assert len(pload._SCRATCH) == 0


@pytest.mark.parametrize("bad", [2, 3])  # a worker's window, the parent's own
def test_a_window_that_does_not_decode_is_reread_serially_whoever_decodes_it(tmp_path: Path, windows_sent: list[int],
                                                                              monkeypatch: pytest.MonkeyPatch,
                                                                              bad: int) -> None:
    """A window that does not decode, in a worker or in the parent (``_InOrder._own``), makes the file be read
    serially from that window on, after the ``bad`` windows before it (proven): the serial path's model."""
    path = tmp_path / "t.json"
    path.write_bytes(_doc(_events_text(3000)))
    serial = _model(path, 1)
    windows = [w for w in read.EventStream(path, chunk=pload.PARALLEL_CHUNK, pass_over=True).windows()
               if isinstance(w, read.FileWindow)]
    assert len(windows) > bad + 2
    windows_sent.clear()
    ingested = pload._ingested
    monkeypatch.setattr(pload, "_ingested", lambda w, *a: None if w == windows[bad] else ingested(w, *a))
    own = _own_windows(monkeypatch)
    assert _model(path, 2) == serial
    assert REREADS == [bad]
    assert (windows[bad].offset in own) == (bad % 2 == 1)


def test_the_parent_decodes_its_own_windows_while_a_worker_finishes_an_earlier_one(
        tmp_path: Path, windows_sent: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiting for a worker's window, the parent decodes its own windows sent after it (merged in their turn, with
    threads and streams renumbered where earlier windows met new ones): it does not sit idle. Same model."""
    import time

    path = _busy_trace(tmp_path / "busy.json")
    serial = _model(path, 1)
    work = pload._work

    def slow(*args: object) -> object:  # (forked: the worker sees it) each worker's window takes 0.1 s at least
        time.sleep(0.1)
        return work(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(pload, "_work", slow)
    order: list[str] = []
    own, merge = pload._InOrder._own, pload._merge
    monkeypatch.setattr(pload._InOrder, "_own", lambda self, job: order.append("own") or own(self, job))
    monkeypatch.setattr(pload, "_merge", lambda *a: order.append("merge") or merge(*a))
    assert _model(path, 2) == serial
    assert order[:2] == ["own", "merge"]  # window 1 (the parent's) decoded before window 0 (the worker's) came back
    assert order.count("own") == len(windows_sent) // 2


def test_the_parents_own_windows_may_come_through_the_ring(tmp_path: Path, windows_sent: list[int],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A window the reader does not pass over (near a plain file's end, or any of a gzip's) comes through a ring
    slot; the parent decodes such a window of its own from there: the serial path's model."""
    path = _busy_trace(tmp_path / "busy.json.gz", layers=600)
    serial = _model(path, 1)
    monkeypatch.setattr(pload, "_parent_cycle", lambda workers, plain: 2)  # (a gzip's parent would not, by default)
    own = _own_windows(monkeypatch)
    assert _model(path, 2) == serial
    assert own and set(own) == {-1}  # (ring slots, not FileWindows)
    assert REREADS == []  # (each decoded there: no serial re-read)


def test_the_quiet_pools_handler_waits_on_the_change_notifier_alone() -> None:
    """_quiet_pool overrides a private method of multiprocessing's Pool (``_get_sentinels``, what its worker-handler
    thread waits on): the handler must still call it by that name, and the override must leave out the result pipe
    that the stock one adds. A Python that renames it fails here instead of quietly spinning the handler again."""
    import multiprocessing.pool

    assert "_get_sentinels" in multiprocessing.pool.Pool.__init__.__code__.co_names  # (handed to the handler there)
    pool = pload._quiet_pool(1)
    try:
        stock = multiprocessing.pool.Pool._get_sentinels(pool)
        assert pool._get_sentinels() == [pool._change_notifier._reader]
        assert [pool._change_notifier._reader] in pool._worker_handler._args  # what the handler waits on
        assert len(stock) > 1 and pool._change_notifier._reader in stock  # (the stock one adds the result pipe)
    finally:
        pload.terminate(pool)
