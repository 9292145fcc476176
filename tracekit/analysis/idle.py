"""Why a block's device idled: each idle nanosecond of its span goes to one cause (vocab.IdleCause).

The anchor is HTA's idle-time breakdown, which files a whole gap between two kernels of a stream under one of host
wait (the CPU did not enqueue kernels fast enough), kernel wait (the short overhead between consecutive kernels,
below a threshold) or other (what it cannot attribute: stream syncs through CUDA events, launch delays). Here each
gap is split exactly, at the instants the trace records, by the ordered rules of :data:`IDLE_RULES`
(docs/attribution.md, "Idle by cause"):

- A gap that a kernel ends is cut at the start of that kernel's launch call (the earliest, when several kernels end
  it). Before the cut the device waited for the host: **sync** where the launching thread sat in a blocking runtime
  call (:data:`SYNC_CALL_RULES`), **launch** for the rest. After the cut the launch was issued: **elsewhere** at the
  instants the device ran work outside the block (another stream's, or work queued on this one before); the rest
  **event_wait** where the launching thread queued a device-side wait (``cudaStreamWaitEvent``) right before this
  launch, else **queued** (launch latency, the device's overhead between queued kernels: HTA's kernel wait). The
  host sitting in a sync after the cut does not count: that sync waited for the device and did not hold it (the
  host of eager_4096 sits 36 ms in ``cudaDeviceSynchronize`` while the device works through kernels it launched).
- The span's tail after the block's last device work (the host still in the block): **sync** where the block's
  threads sat in a blocking call, **elsewhere** where the device ran other work, **host_op** where the block's host
  op still ran (and launched nothing more); the rest **other**.
- A gap whose kernels have no launch call in the trace: **elsewhere** where other work ran, else **other**.

Integer ns throughout, so the causes sum to ``span - busy`` exactly. CUDA/HIP graph replays: a replayed kernel's
launch call is its ``cudaGraphLaunch``/``hipGraphLaunch`` (the copies of captured launches that tracekit.analysis.graphs
adds carry the capture's times and measure nothing), so only the wait for the graph launch itself is ``launch``,
and the gaps between replayed kernels are ``queued`` unless other work ran.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, MutableSequence, Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import sub

from typing import TYPE_CHECKING, cast

from ..model import DeviceEvent, GraphLaunch, RuntimeEvent, Trace
from ..vocab import IDLE_CAUSES, IdleCause
from .busy import first_come, start_end

if TYPE_CHECKING:
    import numpy as np

    from .busy import DeviceColumns


@dataclass(frozen=True, slots=True)
class SyncRule:
    """Whether a runtime call holds the host until device work is done; the first rule whose pattern fully
    matches the call's name wins, and a name no rule matches does not hold the host."""

    name: str
    pattern: str  # a full match of the call's name (``_v2`` and per-thread ``_ptsz``/``_ptds``/``_spt`` suffixes too)
    holds: bool
    why: str


_SUFFIX = r"(?:_v\d+)?(?:_ptsz|_ptds|_spt)?"
SYNC_CALL_RULES: tuple[SyncRule, ...] = (
    SyncRule("async-call", r"(?:cuda|hip|cu)\w*Async\w*", False,
             "an ...Async call (cudaMemcpyAsync, hipMemsetAsync) returns once the work is queued; PyTorch follows "
             "one with a stream sync where it must wait, and that call is the sync"),
    SyncRule("device-sync", rf"(?:cuda|hip)(?:Device|Thread)Synchronize{_SUFFIX}|cuCtxSynchronize{_SUFFIX}", True,
             "returns when all work queued on the device has finished"),
    SyncRule("stream-sync", rf"(?:cuda|hip|cu)StreamSynchronize{_SUFFIX}", True,
             "returns when the work queued on the stream has finished (.item(), .cpu(), torch.cuda.synchronize)"),
    SyncRule("event-sync", rf"(?:cuda|hip|cu)EventSynchronize{_SUFFIX}", True,
             "returns when the event's work has finished"),
    SyncRule("stream-wait-event", rf"(?:cuda|hip|cu)StreamWaitEvent{_SUFFIX}", False,
             "queues a wait on the device and returns at once: the host is not held (a gap the wait causes is "
             "'other': the kernel's launch was issued)"),
    SyncRule("blocking-copy",
             r"(?:cuda|hip)Memcpy(?:2D|3D|Peer|ToSymbol|FromSymbol|WithStream|DtoH|HtoD|DtoD)?\w*|cuMemcpy\w*", True,
             "a copy without Async returns when the copy is done, after the work queued before it (to or from "
             "pageable host memory; a device-to-device copy returns at once, and its short call overlaps little)"),
    SyncRule("free", rf"(?:cuda|hip)Free{_SUFFIX}|cuMemFree{_SUFFIX}", True,
             "frees wait for the device to finish its queued work first (PyTorch's caching allocator avoids them "
             "for that reason; one inside a block is a sync)"),
)
_RULES = tuple((r, re.compile(r.pattern)) for r in SYNC_CALL_RULES)
_WAIT = re.compile(rf"(?:cuda|hip|cu)StreamWaitEvent{_SUFFIX}")  # the calls rule stream-wait-event looks for


def sync_rule(name: str) -> SyncRule | None:
    """The first :data:`SYNC_CALL_RULES` entry that fully matches a runtime call's name, or None."""
    for rule, rx in _RULES:
        if rx.fullmatch(name):
            return rule
    return None


def holds_host(name: str) -> bool:
    """True when a call of this name holds the host until device work is done (its rule says so)."""
    rule = sync_rule(name)
    return rule is not None and rule.holds


def zero_causes() -> dict[str, int]:
    return dict.fromkeys(IDLE_CAUSES, 0)


class _Intervals:
    """One thread's sync calls, merged into disjoint intervals sorted by start (ns)."""

    __slots__ = ("_cum", "arrays", "cum_array", "ends", "starts")

    def __init__(self, spans: Iterable[tuple[int, int]]) -> None:
        # (lists here; int64 arrays where _merged built them from the device's work: no int object per interval)
        self.starts: MutableSequence[int] = []
        self.ends: MutableSequence[int] = []
        self._cum: list[int] | None = None  # _cum[k]: ns of the first k intervals, built at the first length()
        self.arrays: tuple[np.ndarray, np.ndarray] | None = None  # starts and ends as int64 arrays, where built so
        self.cum_array: np.ndarray | None = None  # _lengths' running sums, built at its first call
        for s, e in sorted(spans):
            if self.ends and s <= self.ends[-1]:
                self.ends[-1] = max(self.ends[-1], e)
            else:
                self.starts.append(s)
                self.ends.append(e)

    def pieces(self, a: int, b: int) -> list[tuple[int, int]]:
        """The intervals clipped to ``[a, b)``, in order."""
        out = []
        k = max(0, bisect_right(self.starts, a) - 1)
        starts, ends = self.starts, self.ends
        while k < len(starts) and starts[k] < b:
            s, e = max(starts[k], a), min(ends[k], b)
            if e > s:
                out.append((s, e))
            k += 1
        return out

    def length(self, a: int, b: int) -> int:
        """ns of ``[a, b)`` inside the intervals: the pieces' sum, from running sums in two bisections (a block's
        window over the whole device's work would otherwise walk every interval in it)."""
        starts, ends, cum = self.starts, self.ends, self._cum
        if cum is None:
            cum = self._cum = [0, *accumulate(map(sub, ends, starts))]
        lo, hi = bisect_right(starts, a), bisect_left(starts, b)  # [lo, hi): the intervals starting inside
        total = 0
        if hi > lo:  # (disjoint and sorted: only the last of them can reach past b)
            total = cum[hi] - cum[lo] - max(0, ends[hi - 1] - b)
        if lo > 0:  # the one that starts at or before a
            total += max(0, min(ends[lo - 1], b) - a)
        return total


def _covered(lists: Sequence[_Intervals], a: int, b: int) -> int:
    """ns of ``[a, b)`` inside any of the threads' sync intervals (each instant once)."""
    if b <= a or not lists:
        return 0
    if len(lists) == 1:
        return lists[0].length(a, b)
    total, end = 0, a
    for s, e in sorted(p for iv in lists for p in iv.pieces(a, b)):
        s = max(s, end)
        if e > s:
            total += e - s
            end = e
    return total


def _blocking_spans(rt: Sequence[RuntimeEvent], names: Iterable[str]) -> dict[int, list[tuple[int, int]]]:
    """Per host thread, the (start, end) ns of its calls that hold the host (synchronize, blocking copies);
    ``names``: the calls' distinct names."""
    holds = {n: holds_host(n) for n in names}
    spans: dict[int, list[tuple[int, int]]] = {}
    for r in rt if any(holds.values()) else ():  # (most traces have no holding call: no pass over the calls)
        if holds[r.name] and r.dur > 0:
            spans.setdefault(r.thread, []).append((r.ts, r.ts + r.dur))
    return spans


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleRule:
    """One named reason an idle instant has a cause. A gap's pieces are of four kinds (``piece``): before the cut
    at the ender's launch call, after it, the span's tail, and a gap with no launch call. Each piece goes through
    the rules of its kind in order: a rule with a ``source`` takes the piece's instants inside those intervals that
    no earlier rule took; one without takes all that is left, when its ``when`` holds (always, if empty)."""

    name: str
    cause: IdleCause
    piece: str  # BEFORE, AFTER, TAIL or NO_CALL
    source: str = ""  # LAUNCHER_SYNC, BLOCK_SYNC, DEVICE or HOST_OP: instants inside these intervals
    when: str = ""  # STREAM_WAIT: the rest, if the launching thread queued a device-side wait before the launch
    why: str


BEFORE, AFTER, TAIL, NO_CALL = "before the launch call", "after the launch call", "the span's tail", "no launch call"
LAUNCHER_SYNC, BLOCK_SYNC, DEVICE, HOST_OP = "launcher sync", "block sync", "device work", "host op"
STREAM_WAIT = "stream wait"

IDLE_RULES: tuple[IdleRule, ...] = (
    IdleRule(name="host-held", cause=IdleCause.SYNC, piece=BEFORE, source=LAUNCHER_SYNC,
             why="the thread that later launched the kernel sat in a call that holds the host (SYNC_CALL_RULES)"),
    IdleRule(name="host-late", cause=IdleCause.LAUNCH, piece=BEFORE,
             why="the host had not yet started the kernel's launch call: the device waited for the host (HTA's "
                 "host wait)"),
    IdleRule(name="device-busy", cause=IdleCause.ELSEWHERE, piece=AFTER, source=DEVICE,
             why="the launch was issued and the device ran work outside the block (another stream's kernels, or "
                 "work queued on this stream before): the kernel waited behind it or for it"),
    IdleRule(name="stream-wait-event", cause=IdleCause.EVENT_WAIT, piece=AFTER, when=STREAM_WAIT,
             why="the launching thread's last call before this launch (of the launches and stream waits) was a "
                 "cudaStreamWaitEvent/hipStreamWaitEvent: the kernel sat behind a device-side wait"),
    IdleRule(name="issued", cause=IdleCause.QUEUED, piece=AFTER,
             why="the launch was issued and the device had nothing else to run: launch latency and the device's "
                 "overhead between queued kernels (HTA's kernel wait)"),
    IdleRule(name="tail-host-held", cause=IdleCause.SYNC, piece=TAIL, source=BLOCK_SYNC,
             why="after the block's last device work its threads sat in a call that holds the host"),
    IdleRule(name="tail-device-busy", cause=IdleCause.ELSEWHERE, piece=TAIL, source=DEVICE,
             why="after the block's last device work the device ran work outside the block"),
    IdleRule(name="tail-host-op", cause=IdleCause.HOST_OP, piece=TAIL, source=HOST_OP,
             why="after the block's last device work its host op still ran and launched nothing more"),
    IdleRule(name="tail-unexplained", cause=IdleCause.OTHER, piece=TAIL,
             why="the span's tail outside the block's host ops (a hole between its ranges) with the device idle"),
    IdleRule(name="no-call-device-busy", cause=IdleCause.ELSEWHERE, piece=NO_CALL, source=DEVICE,
             why="the kernel has no launch call in the trace, and the device ran work outside the block"),
    IdleRule(name="no-launch-call", cause=IdleCause.OTHER, piece=NO_CALL,
             why="the kernel has no launch call in the trace: nothing says why it started when it did"),
)
_NC = len(IDLE_CAUSES)
_IX = {c: k for k, c in enumerate(IDLE_CAUSES)}
_BY_PIECE = {p: tuple((_IX[r.cause], r.source, r.when) for r in IDLE_RULES if r.piece == p)
             for p in (BEFORE, AFTER, TAIL, NO_CALL)}
_SOURCES = {p: tuple(x for _, x, _ in rules if x) for p, rules in _BY_PIECE.items()}
_LAST = {p: rules[-1][0] for p, rules in _BY_PIECE.items()}  # each piece's last rule: it takes what is left
_WIDE = 2**62  # a window or the device's work this wide or wider: its differences might not fit int64 (split())
# The after-piece's rules where they read as IdleSplitter._foreign_rows splits them: the device's other work (its
# only source) to the first, the rest to the second where the launching thread queued a stream wait before, else to
# the last. None if the rules ever read otherwise: then every gap goes through _gap.
_AFTER_SPLIT = ((_BY_PIECE[AFTER][0][0], _BY_PIECE[AFTER][1][0])
                if [(bool(x), w) for _, x, w in _BY_PIECE[AFTER]] == [(True, ""), (False, STREAM_WAIT), (False, "")]
                and _SOURCES[AFTER] == (DEVICE,) else None)
# The before-piece's rules where they read so too: the launching thread's blocking calls (its only source) to the
# first, the rest to the last. None otherwise: then such gaps go through _gap.
_BEFORE_SPLIT = ((_BY_PIECE[BEFORE][0][0], _BY_PIECE[BEFORE][1][0])
                 if [(x, w) for _, x, w in _BY_PIECE[BEFORE]] == [(LAUNCHER_SYNC, ""), ("", "")] else None)
# A window with other device work in it and at least this many gaps has them split as array operations: a step of a
# trace without attention blocks (tens of thousands of gaps); below it numpy's overhead outweighs the loop's.
BATCH_GAPS = 64


def _device_work(tr: Trace, columns: DeviceColumns | None = None) -> dict[object, _Intervals]:
    """Per device (a stream's first id), all its device work with a positive duration, merged: what ran there.
    ``columns``: every event's start and end ns (busy.DeviceColumns), when the caller has read them."""
    import numpy as np

    streams, dev = tr.streams, tr.device
    ts, end = (columns.ts, columns.end) if columns is not None else start_end(dev)
    ids = [s[0] for s in streams]
    if len(set(ids)) <= 1:  # one device (most traces): one list
        return {ids[0] if ids else 0: _merged(ts, end, end > ts)}
    keys = [ids[e.stream] if e.stream < len(ids) else e.stream for e in dev]
    code = {k: c for c, k in enumerate(dict.fromkeys(keys))}
    on = np.fromiter(map(code.__getitem__, keys), np.int64, len(keys))
    return {d: _merged(ts, end, (end > ts) & (on == c)) for d, c in code.items()}


def _merged(ts: np.ndarray, end: np.ndarray, keep: np.ndarray) -> _Intervals:
    """The events ``keep`` selects, merged into disjoint intervals sorted by start (an interval that starts where
    or before the ones so far end joins them), as array operations: :class:`_Intervals` of their spans."""
    import numpy as np

    order = np.argsort(ts[keep], kind="stable")
    s, running = ts[keep][order], np.maximum.accumulate(end[keep][order])
    new = np.ones(len(s), np.bool_)
    new[1:] = s[1:] > running[:-1]
    last = np.ones(len(s), np.bool_)  # the last of each merged run: where the next starts a new one
    last[:-1] = new[1:]
    out = _Intervals(())
    out.arrays = s[new], running[last]
    out.starts, out.ends = array("q", out.arrays[0].tobytes()), array("q", out.arrays[1].tobytes())
    return out


def _launch_calls(tr: Trace) -> list[int | None]:
    """Each device event's launch call from the correlation ids: the first call with its id, as the linker takes it."""
    rt = tr.runtime
    corrs = [r.correlation for r in reversed(rt)]  # (reversed: the first call of an id is the one the dict keeps)
    by_corr = dict(zip(corrs, range(len(rt) - 1, -1, -1)))
    by_corr.pop(0, None)
    return [by_corr.get(e.correlation) for e in tr.device]


class IdleSplitter:
    """Per trace: each device event's launch call, each host thread's blocking calls, the device's work and the
    stream waits; then per block, its idle time by cause (:meth:`split`)."""

    def __init__(self, tr: Trace, graph_launches: Sequence[GraphLaunch] = (),
                 device_call: Sequence[int | None] = (), columns: DeviceColumns | None = None) -> None:
        """``device_call``: each device event's launch call as the linker found it (``Links.device_call``); looked
        up here from the correlation ids when not given. ``columns``: every device event's start and end
        (busy.DeviceColumns), when the caller has read them."""
        rt = tr.runtime
        self.tr, self.columns = tr, columns
        self.launch = device_call if len(device_call) == len(tr.device) else _launch_calls(tr)
        self.graph_call = {j: g.runtime for g in graph_launches for j in g.device}
        names = {r.name for r in rt}
        self.sync = {t: _Intervals(s) for t, s in _blocking_spans(rt, names).items()}
        self._held = {t: {LAUNCHER_SYNC: [iv]} for t, iv in self.sync.items()}  # per thread, rule host-held's source
        self._work: dict[object, _Intervals] | None = None  # built at the first gap that needs it
        # (most traces queue no stream wait: then no pass over the calls for them)
        self._wait_names = {n for n in names if _WAIT.fullmatch(n)}  # (the pattern once per distinct name)
        self._any_wait = bool(self._wait_names)
        self._waits: dict[int, tuple[list[int], list[bool]]] | None = None if self._any_wait else {}

    def call(self, j: int) -> int | None:
        """The runtime call that launched device event ``j``: its graph launch for a replayed one, else the first
        call with its correlation id; None when the trace has none."""
        g = self.graph_call.get(j)
        return g if g is not None else self.launch[j]

    def split(self, js: Sequence[int], start: int, end: int, threads: Iterable[int],
              gaps: array | None = None, host: Iterable[tuple[int, int]] = (),
              evs: Sequence[DeviceEvent] | None = None, order: Sequence[int] | None = None) -> dict[str, int]:
        """The idle ns of the window ``[start, end)`` outside the device events ``js``, by cause. ``threads``: the
        block's host threads, whose sync calls count in the span's tail (after its last device work); ``host``: its
        host ops' (start, end) ns, for the tail's host_op. ``gaps``, when given, gets each gap as ``start, end`` and
        its ns per cause (IDLE_CAUSES order), for the timeline. ``evs``, ``order``: the events of ``js`` and their
        positions by start (stably), when the caller has them already."""
        dev = self.tr.device
        found, busy = _gaps(evs if evs is not None else [dev[j] for j in js], js, start, end, order)
        work = self._devices(js)
        # Device work outside the block in its window: the device's busy time there beyond the block's own (one
        # query per block; most blocks have none, and then no gap asks for it)
        foreign = work if _covered(work, start, end) > busy else []
        tail = bool(found) and not found[-1][2]  # (only the span's tail reads the host ops: built when there is one)
        src = {BLOCK_SYNC: self._blocking(threads), DEVICE: foreign, HOST_OP: [_Intervals(host)] if tail else []}
        live = {p: any(map(src.get, xs)) for p, xs in _SOURCES.items()}  # the pieces with a source to consult
        batch = self._foreign_rows(found, src, live) if live[AFTER] and len(found) >= BATCH_GAPS else None
        if batch is not None:
            if gaps is not None:
                gaps.frombytes(batch.tobytes())
            return dict(zip(IDLE_CAUSES, batch[:, 2:].sum(axis=0).tolist()))  # (int64: a window is under _WIDE)
        rows = self._rows(found, src, live)
        if gaps is not None:
            gaps.extend(array("q", rows))  # (an array from a list converts in one C loop; extend(list) item by item)
        w = 2 + _NC  # (the sums column-wise, from the gaps' rows: no per-gap adding in Python)
        return {c: sum(rows[2 + x::w]) for x, c in enumerate(IDLE_CAUSES)}

    def _foreign_rows(self, found: list[tuple[int, int, list[int]]], src: dict[str, list[_Intervals]],
                      live: dict[str, bool]) -> np.ndarray | None:
        """:meth:`_rows` of a window where the device ran other work (the after-piece's source is live), as array
        operations: each gap one kernel ends is cut at its launch call, the piece before goes to the before-piece's
        last rule (launch) and the piece after to the device-busy rule as far as the other work covers it
        (``_lengths``), the rest to the stream-wait rule where the launching thread's last call was a stream wait,
        else to the after-piece's last (queued). The gaps this does not fit (the span's tail, several kernels or
        none with a launch call, a launching thread with blocking calls) go through :meth:`_gap` one by one. None
        where the whole window must take :meth:`_rows`: work on several devices, or spans too wide for int64
        differences. Why: a step of a trace without attention blocks (issue 42's page) is one window with a gap
        between most kernels and other streams' work in it: there _gap's calls cost 60% of the analysis."""
        import numpy as np

        work = src[DEVICE]
        if _AFTER_SPLIT is None or len(work) != 1 or not work[0].starts:
            return None
        if work[0].ends[-1] - work[0].starts[0] >= _WIDE or found[-1][1] - found[0][0] >= _WIDE:
            return None
        n = len(found)
        g0 = np.fromiter([f[0] for f in found], np.int64, n)
        g1 = np.fromiter([f[1] for f in found], np.int64, n)
        one = np.fromiter([len(f[2]) == 1 for f in found], np.bool_, n)
        reg = np.flatnonzero(one)
        a, b = g0[reg], g1[reg]
        issued, odd, calls = self._issued([found[k][2][0] for k in reg.tolist()], a, b)
        rows = np.zeros((n, 2 + _NC), np.int64)  # (the other gaps' rows: _gap's, below)
        rows[reg] = self._batch_rows(a, b, issued)  # the short way; then the after-piece's first two rules
        other = _lengths(work[0], issued, b)
        busy, wait = _AFTER_SPLIT
        rows[reg, 2 + busy] += other
        rows[reg, 2 + _LAST[AFTER]] -= other
        if self._any_wait:  # (rule stream-wait-event: the rest is event_wait where the launch came after a wait)
            waited = np.fromiter([r is not None and self._waited_event(r) for r in calls], np.bool_, len(calls))
            at, rest = reg[waited], (b - issued - other)[waited]
            rows[at, 2 + wait] += rest
            rows[at, 2 + _LAST[AFTER]] -= rest
        odd = self._held_rows(rows, reg, odd, calls, a, issued)
        call = self.call if self.graph_call else self.launch.__getitem__
        out: list[int] = []
        for k in sorted([*np.flatnonzero(~one).tolist(), *reg[odd].tolist()]):
            g = found[k]
            self._gap(g[0], g[1], g[2], src, live, call, out)
            rows[k] = out
            out.clear()
        return rows

    def split_regular(self, ts: np.ndarray, end: np.ndarray, block: np.ndarray, js: np.ndarray,
                      windows: list[tuple[int, int] | None]) -> dict[int, tuple[array, dict[str, int]]]:
        """:meth:`split` of every idling block whose gaps all take :meth:`_rows`' short way, for all blocks at once
        over columns: block -> (its gaps' rows, its idle ns by cause), what split() gives it. ``ts``, ``end``,
        ``block``, ``js``: all blocks' device events (start, end, block, index) sorted by (block, start), stably;
        ``windows``: each block's window when it idles, else None.

        A block is left to split() (absent from the answer) when it is irregular: a span's tail, a gap several
        kernels end, device work of others in its window, stream waits or several devices in the trace, or a
        window too wide for int64 differences. The rest is array operations: each gap opens where the running
        largest end of the block's positive-length events (from its window's start) falls short of the next
        start; the few gaps that no launch call explains, or whose launching thread was held by a blocking call
        after the gap opened, go through :meth:`_gap` one by one (with no source to consult: none is live)."""
        import numpy as np

        if self._work is None:
            self._work = _device_work(self.tr, self.columns)
        if self._any_wait or len(self._work) != 1 or not len(ts):
            return {}
        (work,) = self._work.values()
        nb = len(windows)
        lo, hi = np.zeros(nb, np.int64), np.zeros(nb, np.int64)
        cand = np.zeros(nb, np.bool_)
        for b, w in enumerate(windows):
            if w is not None and w[1] - w[0] < _WIDE:
                cand[b], lo[b], hi[b] = True, w[0], w[1]
        keep = (end > ts) & cand[block]
        t, e, bk, j = ts[keep], end[keep], block[keep], js[keep]
        if not len(t):
            return {}
        first = np.ones(len(t), np.bool_)
        first[1:] = bk[1:] != bk[:-1]
        covered = np.maximum(first_come(t, e, first)[0], lo[bk])
        covered[first] = lo[bk][first]
        bad = self._irregular(t, e, bk, covered, first, hi, nb)
        at = np.flatnonzero(t > covered)  # the gaps: each opened by the first event of its run of equal starts
        g0, g1, gb = covered[at], t[at], bk[at]
        idle = np.zeros(nb, np.int64)
        np.add.at(idle, gb, g1 - g0)
        bad |= cand & (_lengths(work, lo, hi) > (hi - lo) - idle)  # other work ran in the window
        enders = j[at].tolist()
        issued, odd, _ = self._issued(enders, g0, g1)
        rows = self._batch_rows(g0, g1, issued)
        self._odd_rows(rows, odd, enders)
        return _by_block(rows, gb, bad)

    def _held_rows(self, rows: np.ndarray, reg: np.ndarray, odd: list[int], calls: list[RuntimeEvent | None],
                   a: np.ndarray, issued: np.ndarray) -> list[int]:
        """Of the gaps ``odd`` (positions in ``reg``, the rows' gaps that one kernel ends), those whose launching
        thread made blocking calls: the piece before the launch call moved from the before-piece's last rule to its
        first as far as that thread's blocking calls cover it, per thread as array operations (rule host-held).
        The rest of ``odd`` (no launch call) is returned, for :meth:`_gap`."""
        if _BEFORE_SPLIT is None or not odd:
            return odd
        held_ix, last_ix = _BEFORE_SPLIT
        by_thread: dict[int, list[int]] = {}
        rest = []
        for k in odd:
            r = calls[k]
            if r is None or r.thread not in self.sync:
                rest.append(k)
            else:
                by_thread.setdefault(r.thread, []).append(k)
        for t, ks in by_thread.items():
            iv = self.sync[t]
            if iv.ends[-1] - iv.starts[0] >= _WIDE:
                rest += ks
                continue
            at = reg[ks]
            got = _lengths(iv, a[ks], issued[ks])
            rows[at, 2 + held_ix] += got
            rows[at, 2 + last_ix] -= got
        return sorted(rest)

    def _odd_rows(self, rows: np.ndarray, odd: list[int], enders: list[int]) -> None:
        """The rows of the gaps ``odd`` (by position in ``rows``) as :meth:`_gap` splits them, each ended by one
        kernel (``enders``), in a block with no source live (no other work in its window, no tail)."""
        call, live = self.call if self.graph_call else self.launch.__getitem__, dict.fromkeys(_BY_PIECE, False)
        one: list[int] = []
        for k in odd:
            self._gap(int(rows[k, 0]), int(rows[k, 1]), [enders[k]], {}, live, call, one)
            rows[k] = one
            one.clear()

    def _irregular(self, t: np.ndarray, e: np.ndarray, bk: np.ndarray, covered: np.ndarray, first: np.ndarray,
                   hi: np.ndarray, nb: int) -> np.ndarray:
        """The blocks with a span's tail (the window ends past all their work) or a gap several kernels end."""
        import numpy as np

        bad = np.zeros(nb, np.bool_)
        last = np.ones(len(t), np.bool_)
        last[:-1] = first[1:]
        after = np.maximum(covered, e)[last]  # what the block's work covers to, at its end
        bad[bk[last][hi[bk[last]] > after]] = True
        gap = t > covered
        several = gap[:-1] & ~last[:-1] & (t[1:] == t[:-1])
        bad[bk[:-1][several]] = True
        return bad

    def _issued(self, enders: list[int], g0: np.ndarray, g1: np.ndarray
                ) -> tuple[np.ndarray, list[int], list[RuntimeEvent | None]]:
        """Each gap's cut: its kernel's launch call's start, clamped to the gap; the gaps the short way does not
        split (no launch call, or a launching thread that made blocking calls, the call after the gap opened); and
        each gap's launch call (None: none)."""
        import numpy as np

        missing, found = self._calls(enders)
        held = self._held
        issued, odd = np.array(g0), np.zeros(len(enders), np.bool_)
        odd[missing] = True
        if found:
            has = ~odd
            at = np.fromiter([r.ts for r in found], np.int64, len(found))
            issued[has] = np.minimum(np.maximum(at, g0[has]), g1[has])
            if held:
                holds = np.fromiter([r.thread in held for r in found], np.bool_, len(found))
                odd[np.flatnonzero(has)[holds & (issued[has] != g0[has])]] = True
        calls: list[RuntimeEvent | None] = list(found)
        if missing:
            it, gone = iter(found), set(missing)
            calls = [None if k in gone else next(it) for k in range(len(enders))]
        return issued, np.flatnonzero(odd).tolist(), calls

    def _calls(self, enders: list[int]) -> tuple[list[int], list[RuntimeEvent]]:
        """The positions of the kernels ``enders`` without a launch call, and the launch calls of the others."""
        call = self.call if self.graph_call else self.launch.__getitem__
        calls, rt = list(map(call, enders)), self.tr.runtime
        if None in calls:
            return [k for k, c in enumerate(calls) if c is None], [rt[c] for c in calls if c is not None]
        return [], list(map(rt.__getitem__, cast("list[int]", calls)))  # (most traces: every kernel has its call)

    @staticmethod
    def _batch_rows(g0: np.ndarray, g1: np.ndarray, issued: np.ndarray) -> np.ndarray:
        """Each gap's row as :meth:`_rows`' short way writes it: start, end, and its ns per cause (the piece before
        the launch call to the before-piece's last rule, the rest to the after-piece's)."""
        import numpy as np

        rows = np.zeros((len(g0), 2 + _NC), np.int64)
        rows[:, 0], rows[:, 1] = g0, g1
        rows[:, 2 + _LAST[BEFORE]] += issued - g0
        rows[:, 2 + _LAST[AFTER]] += g1 - issued
        return rows

    def _rows(self, found: list[tuple[int, int, list[int]]], src: dict[str, list[_Intervals]],
              live: dict[str, bool]) -> list[int]:
        """Each gap as ``start, end`` and its ns per cause, flat. Most gaps take a short way here: one kernel ends
        the gap, nothing after its launch call has a source to consult, and its thread made no blocking call
        before it, so the rules give the piece before the call to their last (launch) and the piece after to
        theirs (queued) -- what :meth:`_gap` gives them, without its calls."""
        call = self.call if self.graph_call else self.launch.__getitem__  # (no replay: the launch list, no method)
        out: list[int] = []
        short = not (live[AFTER] or self._any_wait)
        rt, held, zeros = self.tr.runtime, self._held, [0] * _NC
        before, after = 2 + _LAST[BEFORE], 2 + _LAST[AFTER]
        for g0, g1, enders in found:
            c = call(enders[0]) if short and len(enders) == 1 else None
            if c is not None:
                r = rt[c]
                issued = min(max(r.ts, g0), g1)
                if issued == g0 or r.thread not in held:
                    row = [g0, g1, *zeros]
                    row[before] += issued - g0
                    row[after] += g1 - issued
                    out += row
                    continue
            self._gap(g0, g1, enders, src, live, call, out)
        return out

    def _blocking(self, threads: Iterable[int]) -> list[_Intervals]:
        """The blocking-call intervals of the block's host threads that made any."""
        return [self.sync[t] for t in set(threads) if t in self.sync] if self.sync else []

    def _devices(self, js: Sequence[int]) -> list[_Intervals]:
        """All the work of the devices the block's events ran on."""
        if self._work is None:
            self._work = _device_work(self.tr, self.columns)
        dev, streams, work = self.tr.device, self.tr.streams, self._work
        if len(work) <= 1:
            return list(work.values())
        ids = {streams[s][0] if s < len(streams) else s for s in {dev[j].stream for j in js}}
        return [work[d] for d in ids if d in work]

    def _gap(self, g0: int, g1: int, enders: list[int], src: dict[str, list[_Intervals]],
             live: dict[str, bool], call: Callable[[int], int | None], out: list[int]) -> None:
        """One idle gap: cut at the earliest launch call among the kernels that end it; each piece through the
        rules of its kind (:data:`IDLE_RULES`). The span's tail has no ender; nor has a gap no launch call explains.
        ``call``: :meth:`call`, or the launch list's look-up when the trace replays no graph; ``out`` gets the row."""
        got = [0] * _NC
        calls = [c for c in map(call, enders) if c is not None]
        if calls:
            self._launched(g0, g1, calls, src, live[AFTER], got)
        else:
            piece = NO_CALL if enders else TAIL
            _apply(piece, g0, g1, src, live[piece], got)
        out += (g0, g1, *got)

    def _launched(self, g0: int, g1: int, calls: list[int], src: dict[str, list[_Intervals]], live: bool,
                  got: list[int]) -> None:
        """A gap that launched kernels end: cut at the earliest of their calls, the pieces before and after."""
        rt = self.tr.runtime
        first = min(calls, key=lambda c: (rt[c].ts, c)) if len(calls) > 1 else calls[0]
        issued = min(max(rt[first].ts, g0), g1)
        if issued > g0:  # (most gaps: the call came first, and there is no piece before it)
            held = self._held.get(rt[first].thread) if self._held else None
            if held is None:  # (no source for the piece's rules: its last takes it all, without a call)
                got[_LAST[BEFORE]] = issued - g0
            else:
                _apply(BEFORE, g0, issued, held, True, got)
        waited = self._any_wait and issued < g1 and self._waited(first)
        if live or waited:
            _apply(AFTER, issued, g1, src, True, got, waited)
        else:
            got[_LAST[AFTER]] = g1 - issued

    def _waited(self, call: int) -> bool:
        """Whether the launching thread's last call before ``call`` (of its launches and stream waits) was a
        stream wait (rule ``stream-wait-event``)."""
        return self._waited_event(self.tr.runtime[call])

    def _waited_event(self, r: RuntimeEvent) -> bool:
        """:meth:`_waited` of the launch call ``r``."""
        if self._waits is None:
            self._waits = _stream_waits(self.tr, self.launch, self._wait_names)
        if not self._waits:
            return False
        t = self._waits.get(r.thread)
        if t is None:
            return False
        at = bisect_left(t[0], r.ts)
        return at > 0 and t[1][at - 1]


def _gaps(evs: Sequence[DeviceEvent], js: Sequence[int], start: int, end: int,
          order: Sequence[int] | None = None) -> tuple[list[tuple[int, int, list[int]]], int]:
    """The window's gaps outside the device events ``evs`` (``js``: their indices; empty ones end no gap) as
    (start, end, the events that end it; none for the span's tail), and the events' busy ns inside the window.
    One walk in start order (indices sorted by start: no tuple per event); the events that start where a gap
    ends all end it."""
    found: list[tuple[int, int, list[int]]] = []
    last: tuple[int, int, list[int]] = (start, start, [])  # the latest gap (at first none found: a row kept nowhere)
    covered_to = start
    for k in order if order is not None else sorted(range(len(evs)), key=[e.ts for e in evs].__getitem__):
        e = evs[k]
        if e.dur <= 0:
            continue
        s = e.ts
        if s > covered_to:
            last = (covered_to, s, [js[k]])
            found.append(last)
        elif s == last[1]:
            last[2].append(js[k])
        if s + e.dur > covered_to:
            covered_to = s + e.dur
    if end > covered_to:
        found.append((covered_to, end, []))
    return found, (end - start) - sum(g1 - g0 for g0, g1, _ in found)  # (the gaps and the busy time tile it)


def _by_block(rows: np.ndarray, gb: np.ndarray, bad: np.ndarray) -> dict[int, tuple[array, dict[str, int]]]:
    """The gaps' ``rows`` (sorted by block, ``gb``) of each block not ``bad``: its rows as split() writes them, and
    its idle ns by cause (int64 sums are exact: a regular block's causes sum to its idle time, and its window is
    narrower than _WIDE)."""
    import numpy as np

    if not len(rows):
        return {}
    starts = np.flatnonzero(np.r_[True, gb[1:] != gb[:-1]])
    sums = np.add.reduceat(rows[:, 2:], starts).tolist()
    raw, size, out = rows.tobytes(), rows.shape[1] * rows.itemsize, {}
    for a, z, b, got in zip(starts.tolist(), [*starts[1:].tolist(), len(rows)], gb[starts].tolist(), sums):
        if not bad[b]:
            gaps = array("q")
            gaps.frombytes(raw[a * size:z * size])
            out[b] = gaps, dict(zip(IDLE_CAUSES, got))
    return out


def _lengths(iv: _Intervals, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:meth:`_Intervals.length` of each ``[a[k], b[k])``, as array operations (0 where the intervals are too wide
    for int64 running sums: then every block is left to split() by the caller's check, never wrongly short)."""
    import numpy as np

    if not iv.starts or iv.ends[-1] - iv.starts[0] >= _WIDE:
        return np.full(len(a), np.iinfo(np.int64).max if iv.starts else 0, np.int64)
    if iv.arrays is None:
        iv.arrays = np.array(iv.starts, np.int64), np.array(iv.ends, np.int64)
    starts, ends = iv.arrays
    cum = iv.cum_array
    if cum is None:  # (kept: each step's window asks again of the whole device's work)
        cum = iv.cum_array = np.zeros(len(starts) + 1, np.int64)
        np.cumsum(ends - starts, out=cum[1:])
    lo, hi = np.searchsorted(starts, a, "right"), np.searchsorted(starts, b, "left")
    inside = np.where(hi > lo, cum[hi] - cum[lo] - np.maximum(0, ends[hi - 1] - b), 0)
    return inside + np.where(lo > 0, np.maximum(0, np.minimum(ends[lo - 1], b) - a), 0)


def _stream_waits(tr: Trace, launch: Sequence[int | None],
                  wait_names: set[str]) -> dict[int, tuple[list[int], list[bool]]]:
    """Per host thread, the start times of its launch calls and stream-wait calls, sorted, each flagged True for
    a stream wait; empty when the trace has no stream wait (most traces: no pass over the device events).
    ``wait_names``: the distinct call names that are stream waits."""
    rt = tr.runtime
    waits = [i for i, r in enumerate(rt) if r.name in wait_names] if wait_names else []
    if not waits:
        return {}
    launches = {c for c in launch if c is not None}
    rows: dict[int, list[tuple[int, bool]]] = {}
    for i in sorted(launches) + waits:
        r = rt[i]
        rows.setdefault(r.thread, []).append((r.ts, i in launches))
    out = {}
    for t, row in rows.items():
        row.sort()  # (by time; a wait and a launch at one instant: the wait first, False before True)
        out[t] = ([ts for ts, _ in row], [not is_launch for _, is_launch in row])
    return out



def _apply(piece: str, a: int, b: int, src: dict[str, list[_Intervals]], live: bool, got: list[int],
           waited: bool = False) -> None:
    """Split ``[a, b)`` by the rules of one piece kind, in order, into ``got`` (ns per cause index). ``live``:
    whether any of the piece's sources has intervals or its condition holds (else its last rule takes it all)."""
    if b <= a:
        return
    rules = _BY_PIECE[piece]
    if not live:
        got[rules[-1][0]] += b - a
        return
    left, taken = b - a, 0  # (taken: ns inside the sources used so far)
    used: list[_Intervals] = []
    for ix, source, when in rules:
        if source:
            ivs = src.get(source, ())
            if not ivs:
                continue
            used = used + ivs
            now = _covered(used, a, b)
            got[ix] += now - taken
            left -= now - taken
            taken = now
        elif not when or (when == STREAM_WAIT and waited):
            got[ix] += left
            return
