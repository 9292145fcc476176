"""A copy of a trace with tracekit's view added as extra tracks (``tracekit annotate TRACE -o OUT``), so that
Perfetto UI, chrome://tracing and TensorBoard's trace viewer show each attention block above its kernels.

What is added (docs/attribution.md, "Annotated traces"), all with ``cat`` = ``vocab.ANNOTATE_CAT`` on a process of
its own (a pid that no event of the trace uses) named ``tracekit``:

- one thread lane per device stream the blocks used (more lanes where blocks on one stream overlap, so that spans
  nest), and one lane for blocks without device events (CPU-only traces, graph captures);
- a complete event (``X``) per block and stream over the block's window (``start_us``/``end_us``), named
  ``layer0.attention · 62% matmul · 25% fused_attention …``, its figures in ``args``; inside it one ``X`` per
  category run (consecutive kernels of one category on that stream);
- an instant (``i``) per hint at the start of each block it names;
- flow arrows (``s``/``f``, ``bp: "e"``) from the block to its kernels: to every kernel the blocks own when they own
  at most ``MAX_FLOWS``, else to the first kernel of each block on each stream. Both ends sit at the kernel's
  midpoint, so a viewer binds the arrow to the category run above it (inside the block) and to the kernel.

Timestamps are the file's own (absolute ``ts``): a block's ``origin + start_us``. Names from the trace are data:
every event is written by the JSON encoder, never pasted into JSON text. The original text is copied byte for
byte, streamed (``redact``'s reading and atomic writing), with the new events inserted just after the '[' of the
events array; the reader skips them (tracekit.io.builder), so the copy attributes exactly like the original.
Annotating an annotated copy replaces its tracks (the leading events with that ``cat``): one tracekit process.

With ``pack_graph_lanes`` (``--pack-graph-lanes``) the tracekit process also gets the kernels that graph launches
replayed, copied onto the fewest lanes on which none overlaps (``graph replays · pid 0 · lane 1`` …): a replay may
spread its kernels over many streams, one track each in a viewer. They are copies, not moves: the analysis reads
each kernel's stream (busy time, idle and overlap are per stream), so the originals stay where they are and the
copy still attributes exactly like its input; each copy names its original stream in ``args``.
"""

from __future__ import annotations

import heapq
import itertools
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import orjson

from .errors import TraceFormatError, TraceReadError, UsageError
from .io.jsonscan import skip
from .io.load import load_trace
from .io.read import events_array_at
from .output import refuse_inputs, trace_copy
from .redact import decompressed_blocks
from .model import DeviceEvent
from .results.attribution import Attribution, BlockResult, Intervals
from .vocab import ANNOTATE_CAT, CATEGORIES, Phase

CHUNK = 1 << 20
MAX_FLOWS = 20_000  # arrows to every owned kernel up to this many; past it, one per block and stream
_SHOWN_SHARES = 3  # categories named in a block span's name
_MAX_PID = 2**31 - 1  # viewers keep pids in 32 bits
_PID = re.compile(rb'"pid"\s*:\s*"?(-?\d{1,19})')  # numbers and digit strings (the reader takes "12" as 12)
_FLOW_NAME = "tracekit block → kernel"
_WS = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"
_FLUSH = 1 << 20  # bytes of new events gathered before a write


@dataclass(slots=True)
class AnnotateStats:
    """What one annotation added, and what reading the input cost."""

    path: Path
    pid: int = 0  # the tracekit process's pid
    lanes: int = 0
    blocks: int = 0  # block spans written (one per block and stream)
    runs: int = 0  # category-run spans
    marks: int = 0  # hint instants
    flows: int = 0
    every_kernel: bool = True  # an arrow to every owned kernel (else to the first of each block on each stream)
    bytes_in: int = 0
    peak_buffer: int = 0  # the largest piece of the input held at once: the memory bound of the copy
    damaged: str = ""  # why the input ended early (a truncated .gz): the copy ends where it does
    replaced: int = 0  # the input's own tracekit events left out (an annotated copy's tracks, replaced)
    graph_kernels: int = 0  # replayed device events copied onto packed lanes (pack_graph_lanes)
    graph_lanes: int = 0  # the packed lanes they took: the most of them that overlap at any time, per device


def annotate(path: str | os.PathLike, output: str | os.PathLike, scope: str | None = None, *,
             jobs: int | None = None, decode_workers: int | None = None,
             pack_graph_lanes: bool = False) -> Attribution:
    """``tracekit.annotate``: write ``output`` (.json or .json.gz), the trace ``path`` with tracekit's blocks,
    kernel runs and hints added as tracks for Perfetto UI, chrome://tracing or TensorBoard, as ``tracekit annotate``
    does; returns the trace's attribution (the copy attributes to the same). Refuses (UsageError) a folder or URL,
    another extension, and ``output`` naming the input by any path. ``pack_graph_lanes`` adds copies of the
    graph-replayed kernels packed onto the fewest non-overlapping lanes (``--pack-graph-lanes``)."""
    return annotate_path(os.fspath(path), os.fspath(output), scope, jobs=jobs, decode_workers=decode_workers,
                         pack_graph_lanes=pack_graph_lanes)[1]


def annotate_path(src: str | Path, dst: str | Path, scope: str | None = None, chunk: int = CHUNK,
                  progress: Callable[[str, int, int], None] | None = None, *, jobs: int | None = None,
                  decode_workers: int | None = None, pack_graph_lanes: bool = False
                  ) -> tuple[AnnotateStats, Attribution]:
    """Attribute the trace ``src`` (a file, or a run folder holding one trace) and write ``dst`` (.json, or .json.gz to
    compress): the trace with tracekit's tracks. Refuses (UsageError) a folder of several traces or a URL, another
    extension, and ``dst`` naming the input by any path.
    ``jobs`` and ``decode_workers`` are ``analyze``'s (the TensorBoard tab passes 1 and 1: no process pool).
    ``pack_graph_lanes`` reads the trace a second time, for its replayed kernels (module docstring)."""
    from .run.api import analyze
    from .run.inputs import discover, is_url

    if is_url(src):  # (before Path(), which would make "s3://b/t" the local name "s3:/b/t")
        raise UsageError(f"{src}: annotate reads a local trace file, not a URL")
    src, out = Path(src), Path(dst)
    if not out.name.lower().endswith((".json", ".json.gz")):
        raise UsageError(f"{dst}: the annotated trace is JSON; name it .json or .json.gz")
    found = discover(src)
    if src.is_dir():  # a run folder of one trace (a TensorBoard run of one worker) is that trace
        if len(found.files) != 1:
            raise UsageError(f"{src}: annotate writes one trace, and this folder holds {len(found.files)}; pass one "
                             "of its files")
        src = found.files[0]
    if out.is_dir():
        raise UsageError(f"{dst}: is a folder; name the output file")
    refuse_inputs([out], found.files)
    result = analyze(found, scope=scope, progress=progress, jobs=jobs, decode_workers=decode_workers).check()
    stats = AnnotateStats(path=src, pid=free_pid(trace_pids(src, chunk)))
    events = tracks(result, stats)
    if pack_graph_lanes:  # (after tracks(), lazily: the packed lanes' tids follow the attention lanes it counted)
        events = itertools.chain(events, _graph_lanes_of(src, stats, decode_workers or 1))
    _copy_with(src, out, events, stats, chunk)
    return stats, result


def trace_pids(src: Path, chunk: int = CHUNK) -> set[int]:
    """Every integer the file writes as a ``pid`` (a superset: a number inside a string counts too), streamed;
    but for the tracks of an earlier annotation, which the copy replaces (so a copy of a copy gets the same pid)."""
    pids: set[int] = set()
    stats = AnnotateStats(path=src)
    tail = b""
    try:
        with open(src, "rb") as f:
            blocks = decompressed_blocks(f, stats, chunk)
            head, rest, _ = _split(src, blocks, stats)
            for block in itertools.chain((head, rest), blocks):
                buf = tail + block
                pids.update(int(m.group(1)) for m in _PID.finditer(buf))
                tail = buf[-64:]  # (a pid cut by the block's end is found whole in the next buffer)
    except OSError as exc:
        raise TraceReadError(f"{src}: cannot read ({exc.strerror or exc})") from None
    return pids


def free_pid(pids: Iterable[int]) -> int:
    """A pid above every one the trace uses (in 32 bits), or the smallest positive one it leaves free."""
    used = set(pids)
    top = max((p for p in used if 0 <= p < _MAX_PID), default=0) + 1
    if top < _MAX_PID:
        return top
    return next(p for p in range(1, _MAX_PID) if p not in used)


# -- the copy ------------------------------------------------------------------------------------------------------
def _copy_with(src: Path, dst: Path, events: Iterator[dict], stats: AnnotateStats, chunk: int) -> None:
    """``src``'s text, the new events inserted first in its events array; pieces of ``chunk`` bytes at a time."""
    with trace_copy(src, dst) as out, open(src, "rb") as f:
        blocks = decompressed_blocks(f, stats, chunk)
        head, rest, empty = _split(src, blocks, stats)
        out.write(head)
        _write_events(out, events)
        if not empty:
            out.write(b",")
        out.write(rest)
        del head, rest
        for block in blocks:
            stats.bytes_in += len(block)
            stats.peak_buffer = max(stats.peak_buffer, len(block))
            out.write(block)


def _head(src: Path, blocks: Iterator[bytes], stats: AnnotateStats) -> tuple[bytes, int, bool]:
    """The text up to the events array's first non-blank byte, where the array's elements start, and whether
    the array is empty (its ']' comes first)."""
    head = b""
    for block in blocks:
        stats.bytes_in += len(block)
        head += block
        stats.peak_buffer = max(stats.peak_buffer, len(head))
        skip = 3 if head.startswith(_BOM) else 0
        at = events_array_at(head[skip:])
        if at >= 0:
            rest = head[skip + at:].lstrip(_WS)
            if rest:
                return head, skip + at, rest[:1] == b"]"
    raise TraceFormatError(f"{src}: no events array found to annotate (did the file change while it was read?)")


def _split(src: Path, blocks: Iterator[bytes], stats: AnnotateStats) -> tuple[bytes, bytes, bool]:
    """The text up to the events array's first element (where the new events go); the text read past it, less
    the leading elements an earlier annotation wrote; and whether the array is then empty (its ']' comes first).

    Why only leading elements: ``annotate`` inserts its tracks first in the array, so an annotated copy holds them
    there; annotating it again replaces them (one tracekit process, the same copy) instead of adding a second set.
    """
    head, at, empty = _head(src, blocks, stats)
    if empty:
        return head[:at], head[at:], True
    rest = _without_old_tracks(bytearray(head[at:]), blocks, stats)
    return head[:at], rest, rest.lstrip(_WS)[:1] == b"]"


def _without_old_tracks(buf: bytearray, blocks: Iterator[bytes], stats: AnnotateStats) -> bytes:
    """``buf`` (the array's text from its first element on) from its first element that is not tracekit's own
    (``cat`` ANNOTATE_CAT, as the reader tells them), reading more of ``blocks`` while an element needs it."""
    i = 0
    while True:
        end = _own_element_end(buf, i)
        if end >= 0:
            stats.replaced += 1
            i = end
            continue
        more = next(blocks, None) if end == _MORE and len(buf) - i <= _MAX_OWN else None
        if more is None:  # (an element of the trace's own, the end of a cut-off file, or more than ours would be)
            return bytes(buf[i:])
        stats.bytes_in += len(more)
        del buf[:i]
        buf += more
        i = 0
        stats.peak_buffer = max(stats.peak_buffer, len(buf))


_MORE, _NOT_OURS = -1, -2
# The most text read ahead for one element that may be tracekit's (its largest is a block span, a few KB): past
# it the element is the trace's own, so a huge first event costs no more memory than the copy's chunks.
_MAX_OWN = 1 << 22
_NOT_WS = re.compile(rb"[^ \t\r\n]")


def _own_element_end(buf: bytearray, i: int) -> int:
    """Where the next element (after blanks from ``i``) ends with its ',' when tracekit wrote it; at its ']' when
    it is the array's last; _MORE when ``buf`` ends first; _NOT_OURS for any other element, or no element."""
    k = _skip_ws(buf, i)
    if k == len(buf):
        return _MORE
    if buf[k] != 0x7B:  # '{'
        return _NOT_OURS
    end = skip(buf, k, len(buf))
    if end < 0:
        return _MORE if end == -1 else _NOT_OURS
    try:
        ev = orjson.loads(buf[k:end])
    except orjson.JSONDecodeError:
        return _NOT_OURS
    if not isinstance(ev, dict) or ev.get("cat") != ANNOTATE_CAT:
        return _NOT_OURS
    after = _skip_ws(buf, end)
    if after == len(buf):
        return _MORE
    return {0x2C: after + 1, 0x5D: after}.get(buf[after], _NOT_OURS)  # ',' or ']'


def _skip_ws(buf: bytearray, i: int) -> int:
    m = _NOT_WS.search(buf, i)
    return len(buf) if m is None else m.start()


def _write_events(out: IO[bytes], events: Iterable[dict]) -> None:
    """The events, comma separated, in writes of about ``_FLUSH`` bytes."""
    parts: list[bytes] = []
    size = 0
    for ev in events:
        data = orjson.dumps(ev)  # (names from the trace: data for the encoder, valid UTF-8 as the reader read them)
        parts.append(data)
        size += len(data) + 1
        if size >= _FLUSH:
            out.write(b",".join(parts))
            out.write(b",")
            parts, size = [], 0
    out.write(b",".join(parts))  # (never empty: the process metadata comes last)


# -- the tracks ----------------------------------------------------------------------------------------------------
class _Lanes:
    """Thread lanes of the tracekit process: per key (a stream, or no device), as many as keep its spans apart."""

    def __init__(self) -> None:
        self.ends: dict[tuple, list[tuple[int, int]]] = {}  # key -> [(tid, last end ns)]
        self.names: list[tuple[tuple, int, int]] = []  # (key, overlap number, tid)

    def place(self, key: tuple, start: int, end: int) -> int:
        """The first lane of ``key`` free from ``start`` on (spans come in start order), else a new one."""
        lanes = self.ends.setdefault(key, [])
        for k, (tid, last) in enumerate(lanes):
            if last <= start:
                lanes[k] = (tid, end)
                return tid
        tid = len(self.names) + 1
        lanes.append((tid, end))
        self.names.append((key, len(lanes), tid))
        return tid


def tracks(res: Attribution, stats: AnnotateStats) -> Iterator[dict]:
    """tracekit's events for the one trace of ``res`` (module docstring), the process and lane names last."""
    pid, origin = stats.pid, res.traces[0].origin_ns if res.traces else 0
    owned = sum(len(b.intervals) for b in res.blocks if b.intervals is not None)
    stats.every_kernel = owned <= MAX_FLOWS
    lanes = _Lanes()
    first_lane: dict[int, int] = {}  # block -> the lane of its first span (where its hint marks go)
    for i in sorted(range(len(res.blocks)), key=lambda i: (res.blocks[i].start_us or 0.0, i)):
        b = res.blocks[i]
        for ev in _block_events(b, origin, lanes, stats):
            if ev["ph"] == "X" and ev["args"]["level"] == "block":
                first_lane.setdefault(i, ev["tid"])
            yield ev
    yield from _hint_marks(res, origin, first_lane, stats)
    yield {"ph": "M", "cat": ANNOTATE_CAT, "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "tracekit"}}
    yield {"ph": "M", "cat": ANNOTATE_CAT, "name": "process_sort_index", "pid": pid, "tid": 0,
           "args": {"sort_index": -1}}
    for n, (key, overlap, tid) in enumerate(sorted(lanes.names, key=_lane_order)):
        yield {"ph": "M", "cat": ANNOTATE_CAT, "name": "thread_name", "pid": pid, "tid": tid,
               "args": {"name": _lane_name(key, overlap)}}
        yield {"ph": "M", "cat": ANNOTATE_CAT, "name": "thread_sort_index", "pid": pid, "tid": tid,
               "args": {"sort_index": n}}
    stats.lanes = len(lanes.names)


# -- packed lanes for graph replays ---------------------------------------------------------------------------------
def pack_lanes(spans: Iterable[tuple[int, int]]) -> list[int]:
    """A lane number (0, 1, …) per span (start, end), in the spans' order, such that no two spans of one lane
    overlap (one ending where the next starts does not), using the fewest lanes: as many as the most spans that
    overlap at one time. Greedy in start order, each span to the lowest-numbered lane free at its start; a lane is
    opened only when every open one is busy at that start, so the count is the largest overlap (interval colouring)."""
    spans = list(spans)
    lane = [0] * len(spans)
    free: list[int] = []  # lanes free now, lowest first
    busy: list[tuple[int, int]] = []  # (end, lane) of the lanes in use
    opened = 0
    for i in sorted(range(len(spans)), key=lambda i: (spans[i][0], spans[i][1], i)):
        start, end = spans[i]
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane[i] = heapq.heappop(free)
        else:
            lane[i], opened = opened, opened + 1
        heapq.heappush(busy, (max(end, start), lane[i]))
    return lane


def _graph_lanes_of(src: Path, stats: AnnotateStats, decode_workers: int) -> Iterator[dict]:
    """The replayed kernels of ``src``'s graph launches, read again (the analysis keeps no device event), packed.
    A generator, so that nothing runs before tracks() has placed (and counted) the attention lanes."""
    tr = load_trace(src, decode_workers=decode_workers)
    launches = tr.graphs.launches if tr.graphs is not None else []  # (load_trace always sets it)
    replayed = sorted({j for g in launches for j in g.device})
    yield from graph_lanes(tr.device, tr.streams, replayed, stats, first_tid=stats.lanes + 1)


def graph_lanes(device: list[DeviceEvent], streams: list[tuple[object, object]], replayed: list[int],
                stats: AnnotateStats, first_tid: int) -> Iterator[dict]:
    """A copy of each replayed device event on the packed lanes of its device (its stream's pid): the lanes of
    one device never mix with another's, and a copy names the stream it ran on. Lanes and their names last."""
    by_device: dict[object, list[int]] = {}
    for j in replayed:
        by_device.setdefault(streams[device[j].stream][0], []).append(j)
    tid = first_tid
    names: list[tuple[int, str]] = []
    for spid in sorted(by_device, key=lambda v: (type(v) is not int, v if type(v) is int else 0, str(v))):
        js = by_device[spid]
        lanes = pack_lanes((device[j].ts, device[j].ts + device[j].dur) for j in js)
        for j, k in zip(js, lanes):
            d = device[j]
            stats.graph_kernels += 1
            yield {"ph": "X", "cat": ANNOTATE_CAT, "name": d.name, "pid": stats.pid, "tid": tid + k,
                   "ts": _us(d.ts), "dur": _us(d.dur),
                   "args": {"level": "graph replay", "kind": d.kind, "stream": streams[d.stream][1],
                            "stream_pid": spid, "graph_launch": d.correlation}}
        count = max(lanes) + 1
        names += [(tid + k, f"graph replays · pid {spid} · lane {k + 1}") for k in range(count)]
        tid += count
    stats.graph_lanes = len(names)
    for tid, name in names:
        yield {"ph": "M", "cat": ANNOTATE_CAT, "name": "thread_name", "pid": stats.pid, "tid": tid,
               "args": {"name": name}}
        yield {"ph": "M", "cat": ANNOTATE_CAT, "name": "thread_sort_index", "pid": stats.pid, "tid": tid,
               "args": {"sort_index": tid}}


def _lane_order(lane: tuple[tuple, int, int]) -> tuple:
    """Streams by pid and tid (numbers before labels), each followed by its overlap lanes; no-device lanes last."""
    key, overlap, _ = lane
    return (key[0] != "stream", [(0, v, "") if type(v) is int else (1, 0, str(v)) for v in key[1:]], overlap)


def _lane_name(key: tuple, overlap: int) -> str:
    more = "" if overlap == 1 else f" · overlap {overlap}"
    if key[0] == "stream":
        return f"attention · stream {key[2]} (pid {key[1]}){more}"
    return f"attention · no device events{more}"


def _block_events(b: BlockResult, origin: int, lanes: _Lanes, stats: AnnotateStats) -> Iterator[dict]:
    """The block's span on each stream it used (or on the no-device lane), its category runs and flows there."""
    start, end = origin + _ns(b.start_us), origin + _ns(b.end_us)
    span = {"ph": "X", "cat": ANNOTATE_CAT, "name": span_name(b), "pid": stats.pid, "ts": _us(start),
            "dur": _us(end - start), "args": block_args(b)}
    iv = b.intervals
    if iv is None or not len(iv):
        stats.blocks += 1
        yield {**span, "tid": lanes.place(("none",), start, end)}
        return
    by_stream: dict[int, list[int]] = {}
    for j, k in enumerate(iv.stream):
        by_stream.setdefault(k, []).append(j)
    for k in sorted(by_stream):
        js = sorted(by_stream[k], key=lambda j: (iv.start_ns[j], j))
        spid, stid = iv.streams[k]
        tid = lanes.place(("stream", spid, stid), start, end)
        stats.blocks += 1
        yield {**span, "tid": tid}
        yield from _runs(iv, js, tid, stats)
        yield from _flows(iv, js if stats.every_kernel else js[:1], tid, (spid, stid), stats)


def _runs(iv: Intervals, js: list[int], tid: int, stats: AnnotateStats) -> Iterator[dict]:
    """One span per run of consecutive kernels of one category (in start order on one stream), each starting
    where the previous ended at the earliest, so that they nest in the block's span."""
    runs: list[list[int]] = []  # [category, start, end, kernels, device ns]
    for j in js:
        s, e, c = iv.start_ns[j], iv.end_ns[j], iv.category[j]
        if runs and runs[-1][0] == c:
            r = runs[-1]
            r[2], r[3], r[4] = max(r[2], e), r[3] + 1, r[4] + e - s
        else:
            lo = max(s, runs[-1][2]) if runs else s
            runs.append([c, lo, max(e, lo), 1, e - s])
    for c, s, e, n, busy in runs:
        stats.runs += 1
        yield {"ph": "X", "cat": ANNOTATE_CAT, "name": f"{CATEGORIES[c]} ×{n}", "pid": stats.pid, "tid": tid,
               "ts": _us(s), "dur": _us(e - s),
               "args": {"level": "category run", "category": CATEGORIES[c], "kernels": n, "device_us": busy / 1000}}


def _flows(iv: Intervals, js: list[int], tid: int, stream: tuple[object, object],
           stats: AnnotateStats) -> Iterator[dict]:
    """An arrow from the tracekit lane to each kernel of ``js``, both ends at the kernel's midpoint."""
    for j in js:
        stats.flows += 1
        mid = _us((iv.start_ns[j] + iv.end_ns[j]) // 2)
        base = {"cat": ANNOTATE_CAT, "name": _FLOW_NAME, "id": stats.flows, "ts": mid}
        yield {"ph": "s", **base, "pid": stats.pid, "tid": tid}
        yield {"ph": "f", "bp": "e", **base, "pid": stream[0], "tid": stream[1]}


def _hint_marks(res: Attribution, origin: int, first_lane: dict[int, int], stats: AnnotateStats) -> Iterator[dict]:
    """An instant per hint at the start of each block of the kinds it names, on that block's first lane."""
    for h in res.hints:
        named = set(h.blocks)
        for i, b in enumerate(res.blocks):
            label = b.kind if b.phase == Phase.FORWARD else f"{b.kind} ({b.phase})"
            if label not in named or i not in first_lane:
                continue
            stats.marks += 1
            yield {"ph": "i", "s": "t", "cat": ANNOTATE_CAT, "name": f"hint: {h.rule}", "pid": stats.pid,
                   "tid": first_lane[i], "ts": _us(origin + _ns(b.start_us)),
                   "args": {"message": h.message, "blocks": list(h.blocks), "saving_us": h.saving_us,
                            "saving_pct": h.saving_pct, "saving_basis": h.saving_basis}}


def span_name(b: BlockResult) -> str:
    """``name · 62% matmul · 25% fused_attention …``: the block's largest categories, as shares of its busy time."""
    total = b.total_us
    if total <= 0:
        return f"{b.name} · no busy time"
    shares = sorted(((v / total, c) for c, v in b.categories.items() if v > 0), key=lambda x: (-x[0], x[1]))
    parts = [f"{round(100 * s)}% {c}" for s, c in shares[:_SHOWN_SHARES]]
    return " · ".join([b.name, *parts]) + (" …" if len(shares) > _SHOWN_SHARES else "")


def block_args(b: BlockResult) -> dict:
    """The block's figures, as the JSON output names them (keys clear of the Kineto ``args`` the reader decodes)."""
    return {"level": "block", "block": b.name, "kind": b.kind, "phase": str(b.phase), "step": b.step,
            "ordinal": b.ordinal, "found_by": str(b.found_by), "busy_us": _r(b.total_us), "span_us": _r(b.span_us),
            "idle_us": _r(b.idle_us), "launch_bound": b.launch_bound, "kernels": b.kernels,
            "start_us": _r(b.start_us), "end_us": _r(b.end_us),
            "categories_us": {c: _r(v) for c, v in b.categories.items()},
            "idle_by_cause_us": None if b.idle_by_cause is None else {c: _r(v) for c, v in b.idle_by_cause.items()},
            "rule": None if b.evidence is None else b.evidence.rule}


def _ns(us: float | None) -> int:
    """A result's relative µs back to the integer ns it was made from (exact below 2**42 µs)."""
    return 0 if us is None else round(us * 1000)


def _us(ns: int) -> int | float:
    """Integer ns as the file's µs: an int where whole (epoch-sized integer times stay exact), else a float."""
    return ns // 1000 if ns % 1000 == 0 else ns / 1000


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)
