"""Why a block's device idled: each idle nanosecond of its span goes to one cause (vocab.IdleCause).

The anchor is HTA's idle-time breakdown (host wait / kernel wait / other), which files a whole gap between two
kernels of a stream under one category. Here each gap is split exactly, at the instants the trace records
(docs/attribution.md, "Idle by cause"):

- A gap that a kernel ends is cut at the start of that kernel's launch call (the earliest, when several kernels end
  it). Before the cut the device waited for the host: **sync** where the launching thread sat in a blocking runtime
  call (:data:`SYNC_CALL_RULES`), **launch** for the rest. After the cut the launch was issued and the kernel had not
  started (launch latency, queueing, a device-side wait): **other**, even where the host then sat in a sync, which
  waited for the device and did not hold it (the host of eager_4096 sits 36 ms in ``cudaDeviceSynchronize`` while
  the device works through kernels it launched long before).
- The span's tail after the block's last device work (the host still in the block): **sync** where the block's
  threads sat in a blocking call, else **other**. A gap whose kernels have no launch call in the trace: **other**.

Integer ns throughout, so the three sum to ``span - busy`` exactly. CUDA/HIP graph replays: a replayed kernel's
launch call is its ``cudaGraphLaunch``/``hipGraphLaunch`` (the copies of captured launches that tracekit.analysis.graphs
adds carry the capture's times and measure nothing), so only the wait for the graph launch itself is ``launch``.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..model import GraphLaunch, RuntimeEvent, Trace
from ..vocab import IDLE_CAUSES, IdleCause


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

    __slots__ = ("ends", "starts")

    def __init__(self, spans: Iterable[tuple[int, int]]) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
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


def _covered(lists: Sequence[_Intervals], a: int, b: int) -> int:
    """ns of ``[a, b)`` inside any of the threads' sync intervals (each instant once)."""
    if b <= a or not lists:
        return 0
    if len(lists) == 1:
        return sum(e - s for s, e in lists[0].pieces(a, b))
    total, end = 0, a
    for s, e in sorted(p for iv in lists for p in iv.pieces(a, b)):
        s = max(s, end)
        if e > s:
            total += e - s
            end = e
    return total


def _blocking_spans(rt: Sequence[RuntimeEvent]) -> dict[int, list[tuple[int, int]]]:
    """Per host thread, the (start, end) ns of its calls that hold the host (synchronize, blocking copies)."""
    holds = {n: holds_host(n) for n in {r.name for r in rt}}
    spans: dict[int, list[tuple[int, int]]] = {}
    for r in rt if any(holds.values()) else ():  # (most traces have no holding call: no pass over the calls)
        if holds[r.name] and r.dur > 0:
            spans.setdefault(r.thread, []).append((r.ts, r.ts + r.dur))
    return spans


class IdleSplitter:
    """Per trace: each device event's launch call, and each host thread's blocking calls; then per block, its idle
    time by cause (:meth:`split`)."""

    def __init__(self, tr: Trace, graph_launches: Sequence[GraphLaunch] = ()) -> None:
        rt = tr.runtime
        self.tr = tr
        corrs = [r.correlation for r in reversed(rt)]  # correlation -> its first call, as the linker takes it
        self.by_corr = dict(zip(corrs, range(len(rt) - 1, -1, -1)))
        self.by_corr.pop(0, None)
        self.graph_call = {j: g.runtime for g in graph_launches for j in g.device}
        self.sync = {t: _Intervals(s) for t, s in _blocking_spans(rt).items()}
        self._rec: array | None = None  # where split() records its gaps, if asked

    def call(self, j: int) -> int | None:
        """The runtime call that launched device event ``j``: its graph launch for a replayed one, else the first
        call with its correlation id; None when the trace has none."""
        g = self.graph_call.get(j)
        return g if g is not None else self.by_corr.get(self.tr.device[j].correlation)

    def split(self, js: Sequence[int], start: int, end: int, threads: Iterable[int],
              gaps: array | None = None) -> dict[str, int]:
        """The idle ns of the window ``[start, end)`` outside the device events ``js``, by cause. ``threads``: the
        block's host threads, whose sync calls count in the span's tail (after its last device work). ``gaps``,
        when given, gets each gap as ``start, end, launch, sync, other`` (ns; IDLE_CAUSES order), for the timeline."""
        out = zero_causes()
        self._rec = gaps
        dev = self.tr.device
        evs = sorted((e.ts, e.ts + e.dur, j) for j in js if (e := dev[j]).dur > 0)  # (empty events end no gap)
        roots = self._blocking(threads)
        covered_to, k, n = start, 0, len(evs)
        while k < n:
            g1, far, i = evs[k][0], covered_to, k
            while k < n and evs[k][0] == g1:
                if evs[k][1] > far:
                    far = evs[k][1]
                k += 1
            if g1 > covered_to:
                self._gap(out, covered_to, g1, [evs[x][2] for x in range(i, k)], roots)
            covered_to = far
        if end > covered_to:
            self._gap(out, covered_to, end, [], roots)
        return out

    def _blocking(self, threads: Iterable[int]) -> list[_Intervals]:
        """The blocking-call intervals of the block's host threads that made any."""
        return [self.sync[t] for t in set(threads) if t in self.sync] if self.sync else []

    def _gap(self, out: dict[str, int], g0: int, g1: int, enders: list[int], roots: list[_Intervals]) -> None:
        """One idle gap, split at the earliest launch call among the kernels that end it: before the call the
        device waited for the host (sync where the host sat in a blocking call, else launch); after it, other.
        The span's tail (no ender): sync where the block's threads sat in a blocking call, else other."""
        rt, rec = self.tr.runtime, self._rec
        if not enders:
            sync = _covered(roots, g0, g1)
            out[IdleCause.SYNC] += sync
            out[IdleCause.OTHER] += (g1 - g0) - sync
            if rec is not None:
                rec.extend((g0, g1, 0, sync, g1 - g0 - sync))
            return
        calls = [c for c in map(self.call, enders) if c is not None]
        first = min(calls, key=lambda c: (rt[c].ts, c)) if calls else None
        issued = g0 if first is None else min(max(rt[first].ts, g0), g1)  # (no call: nothing says the host was late)
        iv = self.sync.get(rt[first].thread) if first is not None else None
        sync = _covered([iv], g0, issued) if iv is not None else 0
        out[IdleCause.SYNC] += sync
        out[IdleCause.LAUNCH] += (issued - g0) - sync
        out[IdleCause.OTHER] += g1 - issued
        if rec is not None:
            rec.extend((g0, g1, issued - g0 - sync, sync, g1 - issued))
