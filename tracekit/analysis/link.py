"""Nest host events by time and link each device event to the host op that launched it.

Order of evidence (docs/attribution.md, "Linking"): correlation id to a runtime
launch, then External id to an op (unless the trace's External ids are really
correlation ids), then time overlap with a ``gpu_user_annotation`` on the stream.
A device event none of them links gets the reason of the first :data:`UNLINKED_RULES` entry that holds.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, compress, groupby, islice, repeat
from operator import attrgetter, eq, not_

from ..model import ANNOTATION, OP, HostEvent, Trace
from ..vocab import UnlinkedReason

NONE = -1
_KIND = attrgetter("kind")
_EXT = attrgetter("ext_id")


@dataclass(slots=True)
class Links:
    """Host nesting plus device→host links, as parallel index lists."""

    order: list[int]  # host events sorted per thread by (ts, -dur, kind): parents before children
    parent: list[int]  # innermost enclosing host event, any kind
    op_parent: list[int]  # innermost enclosing op/annotation (the profiler's own tree)
    launcher: list[int]  # innermost enclosing op (kind OP), itself included
    device_leaf: list[int]  # per device event: innermost host event around its launch, or NONE
    device_linked: list[bool]  # per device event: linked to a launch or op at all
    external_ids_trusted: bool
    step: list[int | None]  # per host event: the ProfilerStep#N around it (None outside steps)
    step_roots: list[int] = field(default_factory=list)  # the ProfilerStep#N events themselves, in sweep order
    top_ops: list[int] = field(default_factory=list)  # ops inside no other op (top level), in index order; if steps
    unlinked: list[int] = field(default_factory=list)  # the device events not linked, in index order
    unlinked_reason: list[UnlinkedReason] = field(default_factory=list)  # parallel to ``unlinked``
    order_index: OrderIndex | None = None  # ``order`` bisectable (index_of_order); None until someone needs it
    # per device event: the first runtime call with its correlation id (the launch), None where none; empty when the
    # Links were built by hand (tracekit.analysis.idle then looks the calls up itself)
    device_call: list[int | None] = field(default_factory=list)

    def index_of_order(self, tr: Trace) -> OrderIndex:
        """:class:`OrderIndex` of ``order``, built at the first call when linking did not need it."""
        if self.order_index is None:
            self.order_index = order_index(tr, self.order)
        return self.order_index


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
    """:func:`host_order`, and that order bisectable (:class:`OrderIndex`), from the same key lists.

    Sorted by ts alone first, a key list of the events' own ints, then runs of equal ts re-sorted by
    the rest, then a stable sort by thread. The same order as one sort on 4-tuples, without building
    them: those were 100 MB per GB of trace, freed at once, and at 10 GB fresh pages to fault in again.
    """
    n = len(host)
    ts = [h.ts for h in host]
    order = sorted(range(n), key=ts.__getitem__)
    in_order = list(map(ts.__getitem__, order))
    tied = list(compress(range(1, n), map(eq, in_order, islice(in_order, 1, None))))  # order[k] ties order[k-1]
    k, end_k = 0, len(tied)
    while k < end_k:  # each run of equal ts: order[start:end]
        start, end = tied[k] - 1, tied[k] + 1
        k += 1
        while k < end_k and tied[k] == end:
            end += 1
            k += 1
        order[start:end] = sorted(order[start:end], key=lambda i: (host[i].thread, -host[i].dur, host[i].kind))
    threads = [h.thread for h in host]
    if not n or threads.count(threads[0]) == n:  # one thread: the ties' re-sort kept each ts in place
        return order, _index_sorted(in_order, threads)
    del in_order
    order.sort(key=threads.__getitem__)
    return order, _index_sorted(list(map(ts.__getitem__, order)), list(map(threads.__getitem__, order)))


def nest_host(tr: Trace) -> tuple[list[int], list[int], list[int], list[int], list[int | None], list[int], list[int],
                                  OrderIndex, list[int]]:
    """One stack sweep per thread; O(n log n) for the sort, linear after. It also hands each event the
    ``ProfilerStep#N`` around it (None outside steps), inherited down the nesting, when the trace has steps, and
    lists the ProfilerStep#N events themselves and the top-level ops (ops whose innermost enclosing op/annotation
    is no op), in index order: found here, where each name and parent is read anyway, so no later
    pass over every host event (tracekit.analysis.stepindex) needs to read them again. Last, each runtime call's
    leaf (:func:`runtime_leaves`), read off the same sweep's stack as the calls go by in time order."""
    host = tr.host
    n = len(host)
    parent = [NONE] * n
    op_parent = [NONE] * n
    launcher = [NONE] * n
    step: list[int | None] = [None] * n
    roots: list[int] = []
    tops: list[int] = []
    leaf = [NONE] * len(tr.runtime)
    order, index = _host_order(host)
    calls, call_index = _calls_in_time_order(tr)
    step_names = _step_names(tr) if tr.info.steps else {}
    out = (parent, op_parent, launcher, step, roots, tops, leaf)
    for thread in sorted(index.first, key=index.first.__getitem__):  # each thread's run of ``order``, in order
        lo, hi = index.run(thread)
        c_lo, c_hi = call_index.run(thread)
        _sweep(host, zip(order[lo:hi], index.starts[lo:hi]),  # (slices: an islice would walk up to lo)
               chain(zip(calls[c_lo:c_hi], call_index.starts[c_lo:c_hi]), _NO_CALL), step_names, out)
    if tr.info.steps:
        tops.sort()
    else:
        tops.clear()
    return order, parent, op_parent, launcher, step, roots, tops, index, leaf


def _step_names(tr: Trace) -> dict[str, int]:
    """Each ``ProfilerStep#N`` name of the trace -> N: from the loader's name table (a few hundred names), else
    (a trace built by other means) from the events' names."""
    names = tr.names if tr.names is not None else {h.name for h in tr.host}
    return {name: s for name in names if (s := _step_number(name)) >= 0}


def _calls_in_time_order(tr: Trace) -> tuple[list[int], OrderIndex]:
    """The runtime calls by (thread, ts), ties in file order, and that order's :class:`OrderIndex`. Both key
    lists in one walk over the calls (as fast as two comprehensions)."""
    ts: list[int] = []
    threads: list[int] = []
    add_ts, add_thread = ts.append, threads.append
    for rt in tr.runtime:
        add_ts(rt.ts)
        add_thread(rt.thread)
    calls = sorted(range(len(ts)), key=ts.__getitem__)
    if threads and threads.count(threads[0]) != len(threads):
        calls.sort(key=threads.__getitem__)
    return calls, _index_sorted(list(map(ts.__getitem__, calls)), list(map(threads.__getitem__, calls)))


_NEVER = float("inf")  # the end of the bottom of the stack (it outlasts every event), and the time of no call
_NO_CALL: tuple[tuple[int, float], ...] = ((NONE, _NEVER),)  # after a thread's last runtime call


def _sweep(host: list[HostEvent], run: Iterable[tuple[int, int]], calls: Iterator[tuple[int, float]],
           step_names: dict[str, int], out: tuple[list, ...]) -> None:
    """The stack sweep of one thread's events (``run``: (index, ts) in :func:`host_order`), filling ``out``.

    The innermost open event's own figures, and what it hands its children (op parent, launcher, step, whether
    an op under it is a top op), are locals; the stack keeps the enclosing events' as one tuple each. An event
    is closed by the next that starts at or after its end, except that a zero-length event at its end, when it
    started earlier, is still inside it (:func:`_close_for_instant`). The thread's runtime calls (``calls``:
    (index, ts) by time, then ``_NO_CALL``) are met between the events: each call's leaf is the innermost event
    open at it, ends included, once every event that starts at or before it is in.
    """
    parent, op_parent, launcher, step, roots, tops, leaf = out
    stack: list[tuple] = []
    push, pop = stack.append, stack.pop
    top, top_end, c_opp, c_launch, c_step, c_top = NONE, _NEVER, NONE, NONE, None, True
    r, call_ts = next(calls)
    for i, ts in run:
        while call_ts < ts:
            while top_end < call_ts:  # (what the next event would close anyway: it starts later)
                top, top_end, c_opp, c_launch, c_step, c_top = pop()
            leaf[r] = top
            r, call_ts = next(calls)
        h = host[i]
        dur = h.dur
        if dur:
            while top_end <= ts:
                top, top_end, c_opp, c_launch, c_step, c_top = pop()
        else:
            top, top_end, c_opp, c_launch, c_step, c_top = _close_for_instant(
                host, stack, (top, top_end, c_opp, c_launch, c_step, c_top), ts)
        parent[i] = top
        op_parent[i] = c_opp
        push((top, top_end, c_opp, c_launch, c_step, c_top))
        if h.name in step_names:
            c_step = step_names[h.name]
            roots.append(i)
        step[i] = c_step
        kind = h.kind
        if kind == OP:
            launcher[i] = c_launch = c_opp = i
            if c_top:
                tops.append(i)  # (whatever its step now: backward ops get theirs later, blocks.backward)
            c_top = False
        else:
            launcher[i] = c_launch
            if kind >= ANNOTATION:
                c_opp, c_top = i, True
        top, top_end = i, ts + dur
    _calls_after(stack, top, top_end, r, call_ts, calls, leaf)


def _close_for_instant(host: list[HostEvent], stack: list[tuple], state: tuple, ts: int) -> tuple:
    """The stack state a zero-length event at ``ts`` sees: the events it closes popped. Those that ended before
    it, and a zero-length one at the same ts; not one that ends at ts and started earlier (it is inside that)."""
    while state[1] < ts or (state[1] == ts and not host[state[0]].dur):
        state = stack.pop()
    return state


def _calls_after(stack: list[tuple], top: int, top_end: float, r: int, call_ts: float,
                 calls: Iterator[tuple[int, float]], leaf: list[int]) -> None:
    """The leaves of a thread's calls at or after its last event's start: as in the sweep, with nothing left to
    come but the calls."""
    while r != NONE:
        while top_end < call_ts:
            top, top_end = stack.pop()[:2]
        leaf[r] = top
        r, call_ts = next(calls)


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


def order_index(tr: Trace, order: list[int]) -> OrderIndex:
    hs = [tr.host[i] for i in order]
    return _index([h.ts for h in hs], [h.thread for h in hs])


def _index(starts: list[int], threads: list[int]) -> OrderIndex:
    """The OrderIndex of an order whose events start at ``starts`` on ``threads``."""
    n = len(starts)
    return OrderIndex(starts=starts, first=dict(zip(reversed(threads), range(n - 1, -1, -1))),
                      stop=dict(zip(threads, range(1, n + 1))))


def _index_sorted(starts: list[int], threads: list[int]) -> OrderIndex:
    """:func:`_index` of an order sorted by thread: each thread's run found by bisection, not by a dict per event."""
    first: dict[int, int] = {}
    stop: dict[int, int] = {}
    k, n = 0, len(threads)
    while k < n:
        thread = threads[k]
        first[thread] = k
        k = stop[thread] = bisect_right(threads, thread, k)
    return OrderIndex(starts=starts, first=first, stop=stop)


def runtime_leaves(tr: Trace, order: list[int], parent: list[int], index: OrderIndex | None = None) -> list[int]:
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
    with_ext = [d for d in tr.device if d.ext_id]
    if not with_ext:
        return False
    same = sum(1 for d in with_ext if d.ext_id == d.correlation)
    return same * 2 < len(with_ext)


def link(tr: Trace) -> Links:
    order, parent, op_parent, launcher, step, roots, tops, index, rleaf = nest_host(tr)
    # correlation id -> its first runtime call (later writes win: reversed, the first is written last)
    rt_corrs = [rt.correlation for rt in reversed(tr.runtime)]
    by_corr = dict(zip(rt_corrs, range(len(tr.runtime) - 1, -1, -1)))
    by_corr.pop(0, None)  # 0: no correlation
    trusted = external_ids_trusted(tr)
    launch = list(map(by_corr.get, [d.correlation for d in tr.device]))  # (C loops: one entry per kernel)
    leaf = [rleaf[r] if r is not None else NONE for r in launch]
    linked = [r is not None for r in launch]
    pending = [] if all(linked) else _link_by_ext(tr, launch, leaf, linked, trusted)
    if pending and tr.gpu_annotations:
        _link_by_annotation(tr, pending, leaf, linked)
    links = Links(order, parent, op_parent, launcher, leaf, linked, trusted, step, roots, tops)
    links.order_index, links.device_call = index, launch
    if pending:
        _record_unlinked(links, tr, pending, rt_corrs)
    return links


def _record_unlinked(links: Links, tr: Trace, pending: list[int], rt_corrs: list[int]) -> None:
    """The device events left unlinked, in order, and the reason of each."""
    links.unlinked = sorted(j for j in pending if not links.device_linked[j])
    links.unlinked_reason = unlinked_reasons([tr.device[j].correlation for j in links.unlinked], rt_corrs)


def _link_by_ext(tr: Trace, launch: list[int | None], leaf: list[int], linked: list[bool], trusted: bool
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


def _link_by_annotation(tr: Trace, pending: list[int], leaf: list[int], linked: list[bool]) -> None:
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
