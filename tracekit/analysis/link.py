"""Nest host events by time and link each device event to the host op that launched it.

Order of evidence (docs/attribution.md, "Linking"): correlation id to a runtime
launch, then External id to an op (unless the trace's External ids are really
correlation ids), then time overlap with a ``gpu_user_annotation`` on the stream.
A device event none of them links gets the reason of the first :data:`UNLINKED_RULES` entry that holds.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, MutableSequence, Sequence
from dataclasses import dataclass, field
from itertools import compress, groupby, repeat
from operator import attrgetter, eq, not_
from typing import Any

from ..model import ANNOTATION, OP, HostEvent, Trace
from ..vocab import UnlinkedReason

NONE = -1
_KIND = attrgetter("kind")
_EXT = attrgetter("ext_id")
_NAME = attrgetter("name")


@dataclass(slots=True)
class Links:
    """Host nesting plus device→host links, as parallel index sequences.

    :func:`link` gives the per-event ones (``order`` to ``device_leaf``, and ``top_ops``) as machine-integer
    arrays (:func:`index_column`), not lists: a list holds one int object per host index (32 bytes, plus its
    8-byte slot), which at 1 GB of trace is about 20 MB of the run's peak; readers index, slice and iterate them
    as they would a list. Links built by hand may hold lists.
    """

    order: Sequence[int]  # host events sorted per thread by (ts, -dur, kind): parents before children
    parent: Sequence[int]  # innermost enclosing host event, any kind
    op_parent: Sequence[int]  # innermost enclosing op/annotation (the profiler's own tree)
    launcher: Sequence[int]  # innermost enclosing op (kind OP), itself included
    device_leaf: Sequence[int]  # per device event: innermost host event around its launch, or NONE
    device_linked: list[bool]  # per device event: linked to a launch or op at all
    external_ids_trusted: bool
    step: list[int | None]  # per host event: the ProfilerStep#N around it (None outside steps)
    step_roots: list[int] = field(default_factory=list)  # the ProfilerStep#N events themselves, in sweep order
    top_ops: Sequence[int] = field(default_factory=list)  # ops inside no other op (top level), in index order; if steps
    unlinked: list[int] = field(default_factory=list)  # the device events not linked, in index order
    unlinked_reason: list[UnlinkedReason] = field(default_factory=list)  # parallel to ``unlinked``
    order_index: OrderIndex | None = None  # ``order`` bisectable (index_of_order); None until someone needs it
    # per device event: the first runtime call with its correlation id (the launch), None where none; empty when the
    # Links were built by hand (tracekit.analysis.idle then looks the calls up itself)
    device_call: list[int | None] = field(default_factory=list)
    tree: HostTree | None = None  # the nesting as arrays (HostTree), from link; None when built by hand

    def index_of_order(self, tr: Trace) -> OrderIndex:
        """:class:`OrderIndex` of ``order``, built at the first call when linking did not need it."""
        if self.order_index is None:
            self.order_index = order_index(tr, self.order)
        return self.order_index

    def host_tree(self, tr: Trace) -> HostTree:
        """:class:`HostTree` of the nesting: link's, else (Links built by hand) the trace's nested again."""
        if self.tree is None:
            self.tree = _nest_host(tr)[9]
        return self.tree


@dataclass(frozen=True, slots=True)
class UnlinkedRule:
    """Why a device event that nothing linked stays unlinked: the first rule whose fact ``when`` holds wins.

    The facts (``_unlinked_facts``) read only the event's correlation id, the trace's runtime calls and the
    other unlinked events: what a trace whose launch side is missing still says about that launch.
    """

    name: str
    reason: UnlinkedReason
    when: str  # a key of UNLINKED_FACTS
    why: str = ""

    def __post_init__(self) -> None:
        if self.when not in UNLINKED_FACTS:
            raise ValueError(f"unlinked rule {self.name!r}: unknown fact {self.when!r}")


UNLINKED_FACTS: dict[str, str] = {
    "no-correlation": "the event's correlation id is 0 or absent",
    "before-first-launch": "its correlation id is below every recorded runtime call's (nonzero) id",
    "shared-correlation": "another unlinked device event carries the same correlation id",
    "launches-recorded": "the trace records runtime calls at all",
    "always": "true",
}

UNLINKED_RULES: tuple[UnlinkedRule, ...] = (
    UnlinkedRule("no-correlation-id", UnlinkedReason.NO_CORRELATION, "no-correlation",
                 "nothing ties it to a launch, and neither its External id nor a stream annotation did"),
    UnlinkedRule("launched-before-window", UnlinkedReason.BEFORE_TRACE, "before-first-launch",
                 "correlation ids grow with each launch: below the first recorded call's, the launch predates the "
                 "window (trace-schema 5.3: 509 such events open the Qwen H100 trace, 463 the MI300X one)"),
    UnlinkedRule("unrecorded-graph-launch", UnlinkedReason.GRAPH_REPLAY, "shared-correlation",
                 "one launch, many device events: only a graph replay does that (trace-schema 5.2), and its "
                 "cudaGraphLaunch/hipGraphLaunch is not in the trace (a recorded one links them all)"),
    UnlinkedRule("unrecorded-launch", UnlinkedReason.OTHER_PROCESS, "launches-recorded",
                 "inside the window, yet no recorded call carries its id: the launch ran in a process, thread "
                 "or stream the profiler did not record"),
    UnlinkedRule("no-launch-recorded", UnlinkedReason.OTHER, "always",
                 "the trace has no runtime calls at all (a filtered or device-only export): nothing to say why"),
)


def host_order(host: list[HostEvent]) -> list[int]:
    """Host event indices sorted by (thread, ts, -dur, kind), ties in file order: parents before children."""
    return _host_order(host)[0]


def _host_order(host: list[HostEvent]) -> tuple[list[int], OrderIndex]:
    """:func:`host_order`, and that order bisectable (:class:`OrderIndex`)."""
    cols = _HostColumns.of(host)
    order = _sorted_order(cols)
    listed = order.tolist()
    return listed, _order_index(cols, listed, cols.thread[order])


@dataclass(slots=True)
class _HostColumns:
    """The host events' fields that nesting reads, as int64 arrays in file order: built once (a list of each field
    in a C loop, converted in C), so that sorting and nesting run as array operations, not per event in Python."""

    ts: Any
    dur: Any
    kind: Any
    thread: Any
    ts_list: list[int]  # the starts as a list: the events' own int objects, for lists built from them

    @classmethod
    def of(cls, host: list[HostEvent]) -> _HostColumns:
        import numpy as np

        n, i64 = len(host), np.int64
        ts = [h.ts for h in host]
        threads = [h.thread for h in host]
        one = not n or threads.count(threads[0]) == n  # (one thread: no conversion)
        return cls(ts=np.fromiter(ts, i64, n), dur=np.fromiter([h.dur for h in host], i64, n),
                   kind=_small_ints([h.kind for h in host]), ts_list=ts,
                   thread=np.full(n, threads[0] if n else 0, i64) if one else np.fromiter(threads, i64, n))


def _small_ints(values: list[int]) -> Any:
    """``values`` as an array: bytes where they all fit one (a C conversion 3x faster), else int64."""
    import numpy as np

    try:
        return np.frombuffer(bytes(values), np.uint8)
    except ValueError:
        return np.fromiter(values, np.int64, len(values))


def _sorted_order(cols: _HostColumns) -> Any:
    """Indices by (thread, ts, -dur, kind), ties in file order: a stable sort by ts (traces are nearly in time
    order: it runs in about linear time), then only the runs of equal ts re-sorted by the rest, then a stable sort
    by thread where there are several."""
    import numpy as np

    order = np.argsort(cols.ts, kind="stable")
    in_order = cols.ts[order]
    tied = in_order[1:] == in_order[:-1]  # position k + 1 ties position k
    if tied.any():
        member = np.zeros(len(order), bool)
        member[1:] |= tied
        member[:-1] |= tied
        at = np.flatnonzero(member)  # the positions in runs of equal ts
        run = np.cumsum(np.concatenate(([True], ~tied)))[at]  # each one's run (runs stay in place)
        idx = order[at]
        order[at] = idx[np.lexsort((cols.kind[idx], -cols.dur[idx], cols.thread[idx], run))]
    threads = cols.thread[order]
    if len(order) and threads.min() != threads.max():
        order = order[np.argsort(threads, kind="stable")]
    return order


def _thread_runs(threads: Any) -> list[tuple[int, int, int]]:
    """(thread, first, stop) positions of each thread's run in an order sorted by thread."""
    import numpy as np

    n = len(threads)
    cuts = (np.flatnonzero(threads[1:] != threads[:-1]) + 1).tolist() if n else []
    firsts = [0, *cuts] if n else []
    return list(zip(threads[firsts].tolist(), firsts, [*cuts, n]))


def _order_index(cols: _HostColumns, order: Sequence[int], threads: Any) -> OrderIndex:
    """The OrderIndex of an order sorted by thread (``threads``: an array in that order); the starts are the
    events' own ints (no new ones: a list of them lives as long as the links)."""
    runs = _thread_runs(threads)
    return OrderIndex(starts=list(map(cols.ts_list.__getitem__, order)), first={t: a for t, a, _ in runs},
                      stop={t: b for t, _, b in runs})


@dataclass(slots=True, kw_only=True, eq=False)  # (arrays: compared as objects, never element-wise)
class HostTree:
    """The host nesting in sweep positions (``Links.order``), as arrays: where each event sits in the order and
    where its subtree ends. Parents come first in the order and an event's descendants are exactly the events
    pushed while it is on the sweep's stack, so each subtree is one run of positions: readers that hand a figure
    down the tree (the owning block) assign runs instead of walking the events."""

    order: Any  # position -> host index (``Links.order`` as an array)
    position: Any  # host index -> position
    end: Any  # position -> one past the last position of its subtree
    parent: Any  # position -> its parent's position (n: none)
    kind: Any  # position -> its event's kind
    names: HostNames | None = None  # the events' names as ids: built at the first reader's call (names_of)

    def names_of(self, tr: Trace) -> HostNames:
        """:class:`HostNames` of the trace's host events, built once."""
        if self.names is None:
            self.names = HostNames.of(tr.host, tr.names)
        return self.names


@dataclass(slots=True, kw_only=True, eq=False)
class HostNames:
    """The host events' names as a column of ids: which events carry one of a set of names is then an array
    lookup (:meth:`having`), however many readers ask (the steps, the rules' named ops), after one walk."""

    ids: dict[str, int]  # name -> id
    column: Any  # host index -> the id of its name

    @classmethod
    def of(cls, host: list[HostEvent], table: frozenset[str] | None) -> HostNames:
        import numpy as np

        ids: dict[str, int] = dict(zip(table, range(len(table)))) if table is not None else {}
        try:
            column = [ids[h.name] for h in host]
        except KeyError:  # (no table, or a name not in it: ids as the names come)
            column = [ids.setdefault(h.name, len(ids)) for h in host]
        return cls(ids=ids, column=np.fromiter(column, np.int32 if len(ids) < 1 << 31 else np.int64, len(column)))

    def having(self, names: Iterable[str]) -> Any:
        """The host indices (ascending, an array) of the events named one of ``names``."""
        import numpy as np

        return np.flatnonzero(self.flags(names)[self.column])

    def flags(self, names: Iterable[str]) -> Any:
        """Per name id, whether it is one of ``names`` (a bool array to index with ids)."""
        import numpy as np

        wanted = np.zeros(len(self.ids) + 1, bool)
        wanted[[self.ids[x] for x in names if x in self.ids]] = True
        return wanted


def nest_host(tr: Trace) -> tuple[list[int], list[int], list[int], list[int], list[int | None], list[int], list[int],
                                  OrderIndex, list[int]]:
    """The host tree of :func:`host_order`'s stack sweep, found over columns (:func:`_nest`), and what it hands down
    (:func:`_inherit`): each event's op parent, launcher and ``ProfilerStep#N`` (None outside steps, and for all
    when the trace has no steps); the ProfilerStep#N events themselves, in sweep order, and the top-level ops (ops
    whose innermost enclosing op/annotation is no op), in index order, when the trace has steps: found here, so
    no later pass over every host event (tracekit.analysis.stepindex) needs to read them again. Last, each runtime
    call's leaf (:func:`runtime_leaves`), by bisection of the same order (:func:`_call_leaves`)."""
    return _nest_host(tr)[:9]


def _nest_host(tr: Trace) -> tuple:
    """:func:`nest_host`'s figures, then the :class:`HostTree` that :func:`link` keeps."""
    import numpy as np

    host = tr.host
    n = len(host)
    cols = _HostColumns.of(host)
    order = _sorted_order(cols)
    named = np.empty(n + 1, np.int64)  # position (n: none) -> host index (NONE)
    named[:n], named[n] = order, NONE
    listed = index_column(order)
    t, d, threads, kind = cols.ts[order], cols.dur[order], cols.thread[order], cols.kind[order]
    index = _order_index(cols, listed, threads)
    del cols  # (the columns in file order: not needed past here, freed before the nesting's own arrays)
    parent, end, levels = _nest(t, d, _thread_runs(threads))
    del threads
    launcher = _inherit(parent, levels, kind == OP, False)
    op_parent = _inherit(parent, levels, kind >= ANNOTATION, True)
    del levels
    leaf = _call_leaves(tr, index, t, t + d, parent, named)
    del t, d  # (each array the size of the trace is freed once read: the peak is what 10 GB runs feel)
    i32 = np.int32 if n < 1 << 31 else np.int64  # (kept as long as the links: the narrowest that holds n)
    position = np.empty(n, i32)
    position[order] = np.arange(n, dtype=i32)
    tree = HostTree(order=order.astype(i32), position=position, end=end.astype(i32), parent=parent.astype(i32),
                    kind=kind)
    del order, end, parent
    step, roots, tops = _steps(tr, tree, named, op_parent) if tr.info.steps else ([None] * n, [], [])
    return (listed, index_column(named[tree.parent[position]]), index_column(named[op_parent[position]]),
            index_column(named[launcher[position]]), step, roots, tops, index, leaf, tree)


def index_column(values: Any) -> array[int]:
    """A numpy array of host or device indices (NONE included) as an ``array.array`` of C ints (of int64 where an
    index needs more): what :class:`Links` keeps per event, at 4 bytes an entry and no int object per index."""
    import numpy as np

    if not len(values) or (int(values.max()) < 2**31 and int(values.min()) >= -(2**31)):
        return array("i", values.astype(np.intc).tobytes())
    return array("q", values.astype(np.int64).tobytes())


def _nest(t: Any, d: Any, runs: list[tuple[int, int, int]]) -> tuple[Any, Any, list[Any]]:
    """(parent, end, levels) of the positions of the order (starts ``t``, durations ``d``): each one's parent in the
    stack sweep (n: none) and the position that pops it (one past its subtree), and the positions at each depth,
    shallowest first (:func:`_levels`).

    The sweep closes an event by the next that starts at or after its end, except that a zero-length event at
    its end, when it started earlier, is still inside it; a zero-length event is closed by whatever comes next.
    Where every event closes no later than its parent (properly nested events: all real traces), the events open
    at a position are those whose close lies beyond it, so depths are a running count and each parent is the last
    event one level up: array operations (:func:`_nest_columns`). :func:`_improper` checks that this is what the
    sweep itself would do; a thread where it is not is swept in Python (:func:`_sweep_run`).
    """
    parent, end, depth, by_depth = _nest_columns(t, d, runs)
    improper = _improper(parent, end, depth, runs)
    for lo, hi in improper:
        p, e, k = _sweep_run(t[lo:hi].tolist(), d[lo:hi].tolist(), lo, len(t))
        parent[lo:hi], end[lo:hi], depth[lo:hi] = p, e, k
    return parent, end, _levels(depth, _by_depth(depth) if improper else by_depth)


def _nest_columns(t: Any, d: Any, runs: list[tuple[int, int, int]]) -> tuple[Any, Any, Any, Any]:
    """:func:`_nest` for properly nested events: ends by bisection (:func:`_closes`), depths by a running count of
    the opens and closes, parents by bisection among the positions one level up. Also the positions by depth."""
    import numpy as np

    n = len(t)
    end = _closes(t, d, runs)
    depth = np.cumsum(np.bincount(end, minlength=n + 1)[:n])
    np.subtract(np.arange(1, n + 1), depth, out=depth)
    by_depth = _by_depth(depth)
    return _parents(depth, by_depth), end, depth, by_depth


def _parents(depth: Any, by_depth: Any) -> Any:
    """Each position's parent (n: none) where the nesting is proper: the position before it where that one is a
    level up (a first child), else the parent of the last position before it at its depth (a later sibling's).
    Each level's first children, filled forward over the level (keys offset by depth keep the levels apart)."""
    import numpy as np

    n = len(depth)
    level = depth[by_depth]
    before = by_depth - 1  # (-1 for position 0: the last entry of the padded depths, 0, is never a level up)
    first = np.append(depth, 0)[before] + 1 == level
    offset = level * (n + 1)
    before += offset
    filled = np.where(first, before, -1)
    del before, first
    np.maximum.accumulate(filled, out=filled)
    filled -= offset
    filled[(level <= 1) | (filled < 0)] = n
    parent = np.empty(n, np.int64)
    parent[by_depth] = filled
    return parent


def _by_depth(depth: Any) -> Any:
    """The positions sorted by (depth, position): a stable sort, in 16 bits where the depths fit (a radix sort)."""
    import numpy as np

    small = len(depth) and depth.max() < 1 << 15
    return np.argsort(depth.astype(np.int16) if small else depth, kind="stable")


def _closes(t: Any, d: Any, runs: list[tuple[int, int, int]]) -> Any:
    """Per position, the position of the event that closes it (the thread's stop if none): for an event with a
    length, the first of its thread to start at its end with a length (those come first at equal ts) or to start
    after its end; for a zero-length event, the next."""
    import numpy as np

    n = len(t)
    end = np.arange(1, n + 1)
    long = np.flatnonzero(d) if not d.all() else None  # (None: every event has a length)
    for _, lo, hi in runs:
        if long is None:
            js: Any = slice(lo, hi)
        else:
            a, b = np.searchsorted(long, (lo, hi)).tolist()
            js = long[a:b]
            if not len(js):
                continue
        starts, ends = t[lo:hi], t[js] + d[js]
        q = np.searchsorted(starts, ends)  # the first to start at or after the end
        if long is not None:  # (zero-length events only at the end: they are inside it, the first after is not)
            at = np.minimum(q, hi - lo - 1)
            instant = (q < hi - lo) & (starts[at] == ends) & (d[lo + at] == 0)
            q[instant] = np.searchsorted(starts, ends[instant], "right")
        q += lo
        end[js] = q
    return end


def _improper(parent: Any, end: Any, depth: Any, runs: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """The (first, stop) runs of the threads where the column nesting may differ from the sweep's: some event's
    parent is no open event one level up, or closes before it, or an event ends before it starts. Where none
    does, the events open at each position are exactly its parent's chain, which is the sweep's stack: by
    induction over the positions, as each parent is open at its child and closes no earlier, that chain is open,
    and its length, the depth less one, is the count of the events open there."""
    import numpy as np

    n = len(parent)
    has = parent < n
    up = np.where(has, parent, 0)
    at = np.arange(n)
    bad = end <= at  # (a negative duration: a hand-built trace's; the loader drops them)
    above = end[up]  # (one array at a time: these are the size of the trace)
    bad |= has & ((above <= at) | (above < end))
    above = depth[up]
    above += 1
    bad |= has & (above != depth)
    bad |= ~has & (depth != 1)
    if not bad.any():
        return []
    return [(lo, hi) for _, lo, hi in runs if bad[lo:hi].any()]


def _sweep_run(t: list[int], d: list[int], lo: int, n: int) -> tuple[list[int], list[int], list[int]]:
    """The stack sweep itself over one thread's run of positions ``lo``.. (starts ``t``, durations ``d``), for
    improperly nested events: (parent, end, depth) as :func:`_nest` gives them."""
    m = len(t)
    parent, end, depth = [n] * m, [lo + m] * m, [1] * m
    stack: list[int] = []
    for k in range(m):
        ts, zero = t[k], not d[k]
        while stack:
            top = stack[-1]
            top_end = t[top] + d[top]
            if top_end > ts or (zero and top_end == ts and d[top]):
                break
            end[stack.pop()] = lo + k
        if stack:
            parent[k] = lo + stack[-1]
        depth[k] = len(stack) + 1
        stack.append(k)
    return parent, end, depth


def _levels(depth: Any, by_depth: Any) -> list[Any]:
    """The positions at each depth (``by_depth``: sorted by depth, then position), shallowest first: a level's
    parents are all in the levels before it."""
    import numpy as np

    cuts = np.cumsum(np.bincount(depth)).tolist()
    return [by_depth[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]


def _inherit(parent: Any, levels: list[Any], hit: Any, strict: bool) -> Any:
    """Per position (and n: none, last), the nearest enclosing position for which ``hit`` holds, itself included
    unless ``strict``; n where none: handed down one level at a time, parents first."""
    import numpy as np

    n = len(parent)
    out = np.full(n + 1, n, np.int64)
    hit = np.append(hit, False)
    for idx in levels:
        up = parent[idx]
        out[idx] = np.where(hit[up], up, out[up]) if strict else np.where(hit[idx], idx, out[up])
    return out


def _step_names(tr: Trace) -> dict[str, int]:
    """Each ``ProfilerStep#N`` name of the trace -> N: from the loader's name table (a few hundred names), else
    (a trace built by other means) from the events' names."""
    names = tr.names if tr.names is not None else {h.name for h in tr.host}
    return {name: s for name in names if (s := _step_number(name)) >= 0}


def _steps(tr: Trace, tree: HostTree, named: Any, op_parent: Any) -> tuple[list[int | None], list[int], Sequence[int]]:
    """(each event's step, the ProfilerStep#N events in sweep order, the top ops in index order). A step is handed
    down its subtree, a run of positions (inner steps last: they overwrite); a top op is an op whose op parent is
    none or no op. The step events are picked out by name (HostNames): a few among all the events."""
    import numpy as np

    host, position, end, kind = tr.host, tree.position, tree.end, tree.kind
    n = len(host)
    names = _step_names(tr)
    at = np.sort(position[tree.names_of(tr).having(names)]).tolist() if names else []
    rank = np.zeros(n, np.int64)  # per position: 1 + the rank of its step event, 0 for none
    for r, p in enumerate(at, 1):
        rank[p:end[p]] = r
    roots = named[at].tolist() if at else []
    table = np.array([None, *(names[host[i].name] for i in roots)], object)
    is_op = kind == OP
    top = is_op & ~np.append(is_op, False)[op_parent[:n]]
    return table[rank[position]].tolist(), roots, index_column(named[position[np.flatnonzero(top[position])]])


def _call_leaves(tr: Trace, index: OrderIndex, starts: Any, ends: Any, parent: Any, named: Any) -> array[int]:
    """Each runtime call's leaf (:func:`runtime_leaves`): the last host event on its thread to start at or before
    it (by bisection), else the first around that one, outwards, that ends at or after it: what the sweep's stack
    holds at the call, ends included. All calls a level at a time: the calls still outside move up together."""
    import numpy as np

    n = len(parent)
    at, call_ts = _last_started(tr, index, starts, n)
    ends = np.append(ends, np.iinfo(np.int64).max)  # (n, no event: never ends)
    up = np.append(parent, n)
    live = np.flatnonzero(ends[at] < call_ts)
    while len(live):
        at[live] = up[at[live]]
        live = live[ends[at[live]] < call_ts[live]]
    return index_column(named[at])


def _last_started(tr: Trace, index: OrderIndex, starts: Any, n: int) -> tuple[Any, Any]:
    """(per runtime call, the position of the last host event on its thread to start at or before it (n: none);
    the calls' times). The calls' times and threads in one walk; each thread's calls bisect its run."""
    import numpy as np

    ts: list[int] = []
    threads: list[int] = []
    add_ts, add_thread = ts.append, threads.append
    for rt in tr.runtime:
        add_ts(rt.ts)
        add_thread(rt.thread)
    m = len(ts)
    call_ts, call_thread = np.fromiter(ts, np.int64, m), np.fromiter(threads, np.int64, m)
    at = np.full(m, n, np.int64)
    if not m:
        return at, call_ts
    if call_thread.min() == call_thread.max():
        groups: list[tuple[int, Any]] = [(threads[0], slice(None))]
    else:
        by_thread = np.argsort(call_thread, kind="stable")
        groups = [(t, by_thread[a:b]) for t, a, b in _thread_runs(call_thread[by_thread])]
    for thread, calls in groups:
        lo, hi = index.run(thread)
        k = np.searchsorted(starts[lo:hi], call_ts[calls], "right") + (lo - 1)
        at[calls] = np.where(k >= lo, k, n)
    return at, call_ts


def nearest_above(parent: Sequence[int], i: int, hit: Callable[[int], bool], memo: dict[int, int]) -> int:
    """The innermost host event around ``i`` (itself included) for which ``hit`` holds, or NONE. ``memo`` (one per
    predicate) keeps the answer of every event the walk passed, so a tree's events are each walked once however
    many of their descendants ask: the scope around an op, the compiled region around it, the core it is in."""
    path = []
    found = NONE
    k = i
    while k != NONE:
        got = memo.get(k)
        if got is not None:
            found = got
            break
        path.append(k)
        if hit(k):
            found = k
            break
        k = parent[k]
    for k in path:
        memo[k] = found
    return found


def _step_number(name: str) -> int:
    """N of ``ProfilerStep#N``; -1 for any other name. ASCII digits only: the name table also holds the names of
    events the loader dropped, such as ``ProfilerStep#²`` (``"²".isdigit()``, yet ``int("²")`` fails) or one of 5,000
    digits (beyond ``int()``'s limit); the loader keeps only steps below 2**63 (io.builder._step)."""
    n = name[13:]
    return int(n) if name.startswith("ProfilerStep#") and n.isdigit() and n.isascii() and len(n) < 20 else -1


@dataclass(slots=True, kw_only=True)
class OrderIndex:
    """``Links.order`` as bisectable runs: each host event's start in that order, and each thread's run of it.
    Built once (by the runtime-call linking, or by the first later reader) and kept: the layer finder bisects it
    for each block's subtree."""

    starts: list[int]  # host[order[k]].ts
    first: dict[int, int]  # thread -> its first position in order
    stop: dict[int, int]  # thread -> one past its last position

    def run(self, thread: int) -> tuple[int, int]:
        """(first, stop) positions of the thread's events in ``order``; (0, 0) for a thread with none."""
        return self.first.get(thread, 0), self.stop.get(thread, 0)


def order_index(tr: Trace, order: Sequence[int]) -> OrderIndex:
    hs = [tr.host[i] for i in order]
    return _index([h.ts for h in hs], [h.thread for h in hs])


def _index(starts: list[int], threads: list[int]) -> OrderIndex:
    """The OrderIndex of an order whose events start at ``starts`` on ``threads``."""
    n = len(starts)
    return OrderIndex(starts=starts, first=dict(zip(reversed(threads), range(n - 1, -1, -1))),
                      stop=dict(zip(threads, range(1, n + 1))))


def runtime_leaves(tr: Trace, order: Sequence[int], parent: Sequence[int],
                   index: OrderIndex | None = None) -> list[int]:
    """For each runtime call, the innermost host event on its thread that contains it (ends included).

    The last host event on the thread to start at or before the call (a bisection of ``order``) is
    the candidate; if it ended before the call, its enclosing events (``parent``, from the same stack
    sweep) are tried outwards. :func:`link` has these from its own sweep (:func:`nest_host`), which meets
    the calls between the events; this is for a reader that has only the links.
    """
    host = tr.host
    leaf = [NONE] * len(tr.runtime)
    if not leaf:
        return leaf
    index = index or order_index(tr, order)
    starts, first, stop = index.starts, index.first, index.stop
    for r, rt in enumerate(tr.runtime):
        lo = first.get(rt.thread)
        if lo is None:
            continue
        ts = rt.ts
        k = bisect_right(starts, ts, lo, stop[rt.thread]) - 1
        if k < lo:
            continue
        i = order[k]
        while i != NONE:
            h = host[i]
            if h.ts + h.dur >= ts:
                break
            i = parent[i]
        leaf[r] = i
    return leaf


def external_ids_trusted(tr: Trace) -> bool:
    """In 2022-23 traces a device event's External id is its correlation id: ignore them then."""
    return _ids_trusted([d.ext_id for d in tr.device], [d.correlation for d in tr.device])


def _ids_trusted(exts: list[int], corrs: list[int]) -> bool:
    """:func:`external_ids_trusted` of the device events' External ids and correlation ids (C loops)."""
    with_ext = len(exts) - exts.count(0)
    return with_ext > 0 and sum(compress(map(eq, exts, corrs), exts)) * 2 < with_ext


def link(tr: Trace) -> Links:
    order, parent, op_parent, launcher, step, roots, tops, index, rleaf, tree = _nest_host(tr)
    rt_corrs = [rt.correlation for rt in reversed(tr.runtime)]
    corrs = [d.correlation for d in tr.device]
    trusted = _ids_trusted([d.ext_id for d in tr.device], corrs)
    launch, leaf, linked = _launches(rt_corrs, corrs, rleaf)
    pending = [] if all(linked) else _link_by_ext(tr, launch, leaf, linked, trusted)
    if pending and tr.gpu_annotations:
        _link_by_annotation(tr, pending, leaf, linked)
    links = Links(order, parent, op_parent, launcher, leaf, linked, trusted, step, roots, tops)
    links.order_index, links.device_call, links.tree = index, launch, tree
    if pending:
        _record_unlinked(links, tr, pending, rt_corrs)
    return links


def _launches(rt_corrs: list[int], corrs: list[int], rleaf: Sequence[int]
              ) -> tuple[list[int | None], array[int], list[bool]]:
    """Per device event (correlation ids ``corrs``): its launch, the first runtime call with its id (``rt_corrs``:
    the calls' ids, last first), or None; that call's leaf (``rleaf``), or NONE; whether it has a launch. By
    bisection among the calls sorted by id (:func:`_first_calls`), or, with an id beyond int64, by a dict.
    The leaves are an array of ``rleaf``'s type (:func:`index_column`)."""
    try:
        launch = _first_calls(rt_corrs, corrs)
    except OverflowError:
        # correlation id -> its first runtime call (later writes win: reversed, the first is written last)
        by_corr = dict(zip(rt_corrs, range(len(rt_corrs) - 1, -1, -1)))
        by_corr.pop(0, None)  # 0: no correlation
        launch = list(map(by_corr.get, corrs))  # (C loops: one entry per kernel)
    code = rleaf.typecode if isinstance(rleaf, array) else "q"
    if None not in launch:  # (every kernel launched by a recorded call: the common case, no test per kernel)
        return launch, array(code, map(rleaf.__getitem__, launch)), [True] * len(launch)  # type: ignore[arg-type]
    return launch, array(code, [rleaf[r] if r is not None else NONE for r in launch]), [r is not None for r in launch]


def _first_calls(rt_corrs: list[int], corrs: list[int]) -> list[int | None]:
    """Per correlation id of ``corrs``, the first runtime call with it (``rt_corrs``: the calls' ids, last first),
    or None (and for 0, no correlation): a stable sort of the calls' ids, then a bisection per id. OverflowError
    for an id beyond int64."""
    import numpy as np

    m = len(rt_corrs)
    calls = np.fromiter(rt_corrs, np.int64, m)[::-1]
    ids = np.fromiter(corrs, np.int64, len(corrs))
    if not m:
        return [None] * len(corrs)
    by_id = np.argsort(calls, kind="stable")  # (equal ids: the first call first)
    k = np.minimum(np.searchsorted(calls[by_id], ids), m - 1)
    first = by_id[k]
    found = (calls[first] == ids) & (ids != 0)
    if found.all():
        return first.tolist()
    out = first.astype(object)
    out[~found] = None
    return out.tolist()


def _record_unlinked(links: Links, tr: Trace, pending: list[int], rt_corrs: list[int]) -> None:
    """The device events left unlinked, in order, and the reason of each."""
    links.unlinked = sorted(j for j in pending if not links.device_linked[j])
    links.unlinked_reason = unlinked_reasons([tr.device[j].correlation for j in links.unlinked], rt_corrs)


def _link_by_ext(tr: Trace, launch: list[int | None], leaf: MutableSequence[int], linked: list[bool], trusted: bool
                 ) -> list[int]:
    """The device events no launch call claims, tied by External id to the first op that carries it (when the
    trace's ids are trusted); returns those still unlinked. Once per trace, its loop only over the unlinked."""
    dev = tr.device
    unlinked = [j for j, r in enumerate(launch) if r is None]
    by_ext = _first_by_ext(tr.host, {dev[j].ext_id for j in unlinked}) if trusted else {}
    pending: list[int] = []
    for j in unlinked:
        ext = dev[j].ext_id
        op = by_ext.get(ext) if ext else None
        if op is not None:
            leaf[j], linked[j] = op, True
        else:
            pending.append(j)
    return pending


def _unlinked_facts(corrs: list[int], runtime_corrs: list[int]) -> dict[str, Callable[[], bool | list[bool]]]:
    """Each of UNLINKED_FACTS, evaluated over all the unlinked events' correlation ids at once: a list with one
    bool per event, or one bool when it holds for all or none. Lazy: only the facts a rule reads are computed."""
    first = min(filter(None, runtime_corrs), default=0)  # 0: no runtime call with an id

    def shared() -> bool | list[bool]:
        if len(set(corrs)) == len(corrs):  # the common case, ids all distinct: no counting
            return False
        count = Counter(corrs)
        return list(map((1).__lt__, map(count.__getitem__, corrs)))

    return {
        "no-correlation": lambda: list(map(not_, corrs)),
        "before-first-launch": lambda: list(map(first.__gt__, corrs)),  # (an id of 0 is the rule before)
        "shared-correlation": shared,
        "launches-recorded": lambda: first > 0,
        "always": lambda: True,
    }


def unlinked_reasons(corrs: list[int], runtime_corrs: list[int],
                     rules: tuple[UnlinkedRule, ...] = UNLINKED_RULES) -> list[UnlinkedReason]:
    """The reason of each unlinked device event, given its correlation id: the first rule that holds.

    The rules are applied last to first, each overwriting the events its fact holds for, so the first rule
    that holds has the last word. Each fact is one C-level map over the ids (up to ~30% of a trace's device
    events, where its window opened late); a fact that holds for none of them costs no further pass.
    """
    facts = _unlinked_facts(corrs, runtime_corrs)
    out: list[UnlinkedReason] = [UnlinkedReason.OTHER] * len(corrs)
    for rule in reversed(rules):
        holds = facts[rule.when]()
        if holds is True:
            out = [rule.reason] * len(corrs)
        elif holds is not False and any(holds):
            reason = rule.reason
            out = [reason if h else o for h, o in zip(holds, out)]
    return out


def _first_by_ext(host: list[HostEvent], wanted: set[int]) -> dict[int, int]:
    """External id (of ``wanted``) -> the first op or annotation that carries it. Only the events whose
    id is wanted are visited in Python (the rest in C loops): unlinked kernels often carry no id at all."""
    wanted.discard(0)  # 0: none
    by_ext: dict[int, int] = {}
    if wanted:
        for i in compress(range(len(host)), map(wanted.__contains__, map(_EXT, host))):
            h = host[i]
            if h.kind >= ANNOTATION:
                by_ext.setdefault(h.ext_id, i)
    return by_ext


def _annotations_by_ext(host: list[HostEvent]) -> dict[int, int]:
    """External id -> the first annotation (record_function range) that carries it."""
    ann_host: dict[int, int] = {}
    for i in compress(range(len(host)), map(eq, map(_KIND, host), repeat(ANNOTATION))):  # (C loops over all events)
        ext = host[i].ext_id
        if ext:
            ann_host.setdefault(ext, i)
    return ann_host


def _link_by_annotation(tr: Trace, pending: list[int], leaf: MutableSequence[int], linked: list[bool]) -> None:
    """Innermost gpu_user_annotation on the same stream that overlaps the event's start."""
    ann_host = _annotations_by_ext(tr.host)
    anns = sorted(tr.gpu_annotations, key=lambda a: (a.stream, a.ts, -a.dur))
    by_stream = {s: list(g) for s, g in groupby(anns, key=lambda a: a.stream)}
    dev = tr.device
    pending.sort(key=lambda j: (dev[j].stream, dev[j].ts))
    for s, group in groupby(pending, key=lambda j: dev[j].stream):
        al = by_stream.get(s, [])
        k = 0
        stack = []
        for j in group:
            ts = dev[j].ts
            while k < len(al) and al[k].ts <= ts:
                stack.append(al[k])
                k += 1
            stack = [a for a in stack if a.ts + a.dur > ts]  # still open at ts; the last is innermost
            if stack:
                leaf[j], linked[j] = ann_host.get(stack[-1].ext_id, NONE), True
