"""One step of a trace in time: the report's timeline (tracekit/renderers/timeline.js draws it).

Why a view of its own: the attribution keeps each block's window, device intervals, idle gaps and host spans for
the whole trace; the page draws one step of one trace, and lays its pieces on lanes (one per host thread that
ran a block's host op, one per device stream its kernels ran on). Built from the result objects only, so every
report (file, folder of runs, TensorBoard tab) draws the same figures the JSON gives.

The step drawn is the median step by default: the steps with attention blocks, ordered by their span (the
ProfilerStep's window where the trace has it, else the blocks'), and the lower middle one. A trace without
steps draws all its blocks. Past ``MAX_KERNELS`` kernels the rest are left out and counted, so a page stays light
(a sweep's runs share ``PAGE_KERNELS``: ``run_cap``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..vocab import CATEGORIES, IDLE_CAUSES, LaneKind, StepChoice
from .attribution import Attribution, BlockResult, TraceSummary
from .invariants import expect, near

MAX_KERNELS = 60_000  # drawn kernels per timeline: eager_4096's step holds a few thousand
PAGE_KERNELS = 240_000  # drawn kernels per page: a sweep's runs share it (at least MIN_RUN_KERNELS each)
MIN_RUN_KERNELS = 4_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Lane:
    kind: LaneKind
    pid: object
    tid: object

    @property
    def label(self) -> str:
        what = "thread" if self.kind == LaneKind.HOST else "stream"
        return f"{what} {self.tid} (pid {self.pid})"


@dataclass(slots=True, kw_only=True)
class Timeline:
    """The pieces of one step on lanes. Kernels, gaps and host spans are columns (lists of equal length): a step
    of eager_4096 has thousands of kernels, and one dict per kernel would triple the page."""

    trace: str
    step: int | None  # None: the trace has no steps and every block is drawn
    chosen: StepChoice
    steps: list[int]  # the trace's steps with attention blocks, in order
    start_us: float
    end_us: float
    lanes: list[Lane]
    blocks: list[BlockResult]
    block_index: list[int]  # each block's index in the attribution's ``blocks``
    # kernels: start, end (µs), category index (CATEGORIES), lane, name index (``names``), block (into ``blocks``);
    # on a CPU-only trace, the blocks' host ops with self time, on their threads
    kernels: dict[str, list] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    gaps: dict[str, list] = field(default_factory=dict)  # start, end, launch, sync, other (µs), block
    host: dict[str, list] = field(default_factory=dict)  # start, end (µs), lane, block
    left_out: int = 0  # kernels past ``cap``, not drawn
    cap: int = MAX_KERNELS  # the most kernels drawn

    @property
    def kernel_lane(self) -> LaneKind:
        """Where the kernels lie: on device streams, or for a CPU-only trace (its ops) on host threads."""
        return LaneKind.HOST if any(b.host_ops is not None for b in self.blocks) else LaneKind.STREAM

    def check(self) -> None:
        """Columns of one length; every piece on a lane of its kind, inside its block's window (host spans inside
        the timeline's); the drawn window holds every block."""
        where = f"timeline {self.trace} step {self.step}"
        for name, cols in (("kernels", self.kernels), ("gaps", self.gaps), ("host", self.host)):
            expect(len({len(v) for v in cols.values()}) <= 1, f"{where}: {name} columns of different lengths")
        expect(len(self.block_index) == len(self.blocks), f"{where}: {len(self.block_index)} indices for blocks")
        tol = near(1, self.end_us)
        for b in self.blocks:
            expect(self.start_us - tol <= b.start_us and b.end_us <= self.end_us + tol,  # type: ignore[operator]
                   f"{where}: block {b.name} outside the window")
        self._check_kernels(where, tol)
        self._check_gaps_and_host(where, tol)

    def _check_kernels(self, where: str, tol: float) -> None:
        """Each kernel on a lane of the kernels' kind, with a known category and name, inside its block's window;
        kernels are left out only past the cap."""
        k, kind = self.kernels, self.kernel_lane  # (once: the property walks the blocks)
        for s, e, c, lane, n, b in zip(k["start"], k["end"], k["cat"], k["lane"], k["name"], k["block"]):
            blk = self.blocks[b]
            expect(self.lanes[lane].kind == kind and c < len(CATEGORIES) and n < len(self.names),
                   f"{where}: a kernel of {blk.name} on lane {lane}")
            expect(blk.start_us - tol <= s <= e <= blk.end_us + tol,
                   f"{where}: a kernel at {s}..{e} µs outside block {blk.name}")
        expect(self.left_out >= 0 and (self.left_out == 0 or len(k["start"]) == self.cap),
               f"{where}: {self.left_out} kernels left out of {len(k['start'])}")

    def _check_gaps_and_host(self, where: str, tol: float) -> None:
        """Idle gaps inside their block's window; host spans on host lanes inside the timeline's window."""
        g = self.gaps
        for s, e, b in zip(g["start"], g["end"], g["block"]):
            blk = self.blocks[b]
            expect(blk.start_us - tol <= s < e <= blk.end_us + tol,
                   f"{where}: an idle gap at {s}..{e} µs outside block {blk.name}")
        h = self.host
        for s, e, lane in zip(h["start"], h["end"], h["lane"]):
            expect(self.lanes[lane].kind == LaneKind.HOST and self.start_us - tol <= s <= e <= self.end_us + tol,
                   f"{where}: a host span at {s}..{e} µs on lane {lane}")


def _step_windows(t: TraceSummary) -> dict[int, tuple[float, float]]:
    return {f.step: (f.start_us, f.end_us) for f in t.step_figures if f.start_us is not None and f.end_us is not None}


def choose_step(blocks: list[BlockResult], t: TraceSummary, step: int | None) -> tuple[int | None, StepChoice]:
    """The step to draw: ``step`` when given and it has blocks, else the median step by span; None (all blocks)
    for a trace whose blocks have no step."""
    steps = sorted({b.step for b in blocks if b.step is not None})
    if not steps:
        return None, StepChoice.ALL
    if step is not None and step in steps:
        return step, StepChoice.REQUESTED
    windows = _step_windows(t)

    def span(s: int) -> float:
        if s in windows:
            return windows[s][1] - windows[s][0]
        mine = [b for b in blocks if b.step == s]
        return max(b.end_us for b in mine) - min(b.start_us for b in mine)  # type: ignore[type-var, operator]

    ranked = sorted(steps, key=lambda s: (span(s), s))
    return ranked[(len(ranked) - 1) // 2], StepChoice.MEDIAN


def run_cap(runs: int) -> int:
    """The kernels each of ``runs`` timelines on one page may draw: the page's budget shared, so that a sweep of
    many big runs stays a page a browser opens."""
    return min(MAX_KERNELS, max(MIN_RUN_KERNELS, PAGE_KERNELS // max(runs, 1)))


def timeline(result: Attribution, step: int | None = None, cap: int | None = None) -> Timeline | None:
    """The timeline of one step of the attribution's first trace with timed blocks (at most ``cap`` kernels,
    default MAX_KERNELS); None when none has any."""
    drawn = _drawn_trace(result)
    return None if drawn is None else _build(*drawn, step, MAX_KERNELS if cap is None else cap)


def _drawn_trace(result: Attribution) -> tuple[TraceSummary, list[tuple[int, BlockResult]]] | None:
    """The trace a timeline draws (the first with timed blocks) and its timed blocks with their indices."""
    for t in result.traces:
        mine = [(i, b) for i, b in enumerate(result.blocks)
                if b.source == t.source and b.start_us is not None and b.end_us is not None]
        if mine:
            return t, mine
    return None


def drawable_steps(result: Attribution) -> list[int]:
    """The steps ``timeline`` draws when asked for them: those of the drawn trace's timed blocks."""
    drawn = _drawn_trace(result)
    return [] if drawn is None else sorted({b.step for _, b in drawn[1] if b.step is not None})


def missing_step(step: int, results: list[Attribution]) -> str | None:
    """Why no timeline of ``results`` (a report's traces: one, a diff's two sides, a sweep's runs) can draw
    ``step``, naming the steps they can (a few, then the last and a count); None when one of them can.

    Why refuse rather than draw the median step: ``report --step N`` asked for step N, and a page of another
    step (its note aside) reads as step N's."""
    steps = sorted({s for r in results for s in drawable_steps(r)})
    if step in steps:
        return None
    where = "the trace" if len(results) == 1 else "any trace"
    if not steps:
        why = "attention blocks in no ProfilerStep" if any(map(_drawn_trace, results)) else "no timed attention block"
        return f"no step {step} in {where} ({why})"
    shown = ", ".join(map(str, steps)) if len(steps) <= _LISTED_STEPS else (
        f"{', '.join(map(str, steps[:_LISTED_STEPS - 1]))}, …, {steps[-1]}: {len(steps)} steps")
    return f"no step {step} in {where} (steps with attention blocks: {shown})"


_LISTED_STEPS = 8


def _build(t: TraceSummary, mine: list[tuple[int, BlockResult]], step: int | None, cap: int) -> Timeline:
    chosen_step, how = choose_step([b for _, b in mine], t, step)
    drawn = [(i, b) for i, b in mine if chosen_step is None or b.step == chosen_step]
    drawn.sort(key=lambda ib: (ib[1].start_us, ib[0]))
    blocks = [b for _, b in drawn]
    lanes: dict[tuple[LaneKind, object, object], int] = {}

    def lane(kind: LaneKind, pid: object, tid: object) -> int:
        return lanes.setdefault((kind, pid, tid), len(lanes))

    host = _host_spans(blocks, lane)
    kernels, names, left_out = _kernels(blocks, lane, cap)
    lo, hi = _window(t, chosen_step, blocks, host)
    order = _host_lanes_first(lanes, host, kernels)
    steps = sorted({b.step for _, b in mine if b.step is not None})
    return Timeline(trace=t.source, step=chosen_step, chosen=how, steps=steps, start_us=lo, end_us=hi,
                    lanes=[Lane(kind=k[0], pid=k[1], tid=k[2]) for k in order], blocks=blocks,
                    block_index=[i for i, _ in drawn], kernels=kernels, names=names, gaps=_gaps(blocks),
                    host=host, left_out=left_out, cap=cap)


def _host_lanes_first(lanes: dict[tuple[LaneKind, object, object], int], *columns: dict[str, list]
                      ) -> list[tuple[LaneKind, object, object]]:
    """The lanes in drawing order, host lanes first (each kind in first-seen order), and the ``lane`` column of
    each of ``columns`` renumbered to it."""
    order = sorted(lanes, key=lambda k: (k[0] != LaneKind.HOST, lanes[k]))
    renumber = {lanes[k]: i for i, k in enumerate(order)}
    for cols in columns:
        cols["lane"] = [renumber[x] for x in cols["lane"]]
    return order


def _host_spans(blocks: list[BlockResult], lane: Callable[[LaneKind, object, object], int]) -> dict[str, list]:
    """The blocks' host spans as columns, each on the lane of its (pid, tid)."""
    host: dict[str, list] = {"start": [], "end": [], "lane": [], "block": []}
    for bi, b in enumerate(blocks):
        for pid, tid, s, e in b.host_spans:
            for col, v in zip(("start", "end", "lane", "block"), (s, e, lane(LaneKind.HOST, pid, tid), bi)):
                host[col].append(v)
    return host


def _window(t: TraceSummary, step: int | None, blocks: list[BlockResult], host: dict[str, list]
            ) -> tuple[float, float]:
    """The drawn window: every block and host span, widened to the whole step where the trace has its window."""
    lo = min([b.start_us for b in blocks] + host["start"])
    hi = max([b.end_us for b in blocks] + host["end"])
    window = _step_windows(t).get(step) if step is not None else None
    if window is not None:
        lo, hi = min(lo, window[0]), max(hi, window[1])
    return lo, hi


def _kernels(blocks: list[BlockResult], lane: Callable[[LaneKind, object, object], int],
             cap: int) -> tuple[dict[str, list], list[str], int]:
    cols: dict[str, list] = {"start": [], "end": [], "cat": [], "lane": [], "name": [], "block": []}
    names: dict[str, int] = {}
    total = 0
    for bi, b in enumerate(blocks):
        # a device block's kernels on their streams; a CPU-only block's ops (self time) on their threads
        iv, kind = (b.intervals, LaneKind.STREAM) if b.host_ops is None else (b.host_ops, LaneKind.HOST)
        if iv is None:
            continue
        total += len(iv)
        o = iv.origin_ns
        for k in range(len(iv)):
            if len(cols["start"]) >= cap:
                break
            pid, tid = iv.streams[iv.stream[k]]
            name = iv.names[k] if iv.names else ""
            for col, v in zip(cols, ((iv.start_ns[k] - o) / 1000, (iv.end_ns[k] - o) / 1000, iv.category[k],
                                     lane(kind, pid, tid), names.setdefault(name, len(names)), bi)):
                cols[col].append(v)
    return cols, list(names), total - len(cols["start"])


def _gaps(blocks: list[BlockResult]) -> dict[str, list]:
    cols: dict[str, list] = {"start": [], "end": [], **{c: [] for c in IDLE_CAUSES}, "block": []}
    for bi, b in enumerate(blocks):
        if b.idle_gaps is None:
            continue
        for s, e, *causes in b.idle_gaps.rows():
            for col, v in zip(cols, (s, e, *causes, bi)):
                cols[col].append(v)
    return cols
