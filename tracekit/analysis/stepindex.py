"""Which step each event belongs to, found once for every per-step figure (whole steps, the rest of the step).

Why one index: the whole-step figures (tracekit.analysis.totals.whole_steps) and the rest of the step
(tracekit.analysis.rest.step_rest) both need each step's ProfilerStep ranges, its device events and its top-level
host ops. Each of those is a walk over every host or device event of a GB trace, so they are walked once here, by
one pass over the host events and one over the device events, and both figures read the result. Each step's busy
figures (its busy union, its attention's, the first-come split of its events outside blocks) come from one sort and
one sweep of its events (issue 40: three busy_time walks over three lists before).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import eq
from typing import TYPE_CHECKING

from ..model import DeviceEvent, HostEvent, Trace
from .blocks.discovery import Block
from .busy import first_come
from .graphs import replay_threads
from .link import NONE, Links

if TYPE_CHECKING:
    import numpy as np


# What a step's device event is to the step's figures (StepIndex.kinds): owned by one of the step's blocks; owned
# by no block (the rest of the step); or owned by a block outside every step (in the step by its launching op).
ATTENTION, OUTSIDE, STEPLESS = 1, 2, 0


@dataclass(slots=True, kw_only=True)
class StepBusy:
    """One step's device figures, from one first-come sweep over its events by start (busy.busy_time's split):
    the busy union of all of them (``busy_ns``) and of those its blocks own (``attention_ns``); the first start, the
    event that has it (``first``: the lowest index among those, clock.first_event's) and the last end; and each
    event no block owns, in index order, with its first-come share among those events (``outside``, ``share``)."""

    busy_ns: int = 0
    attention_ns: int = 0
    first: int = -1  # -1: the step launched nothing
    start: int = 0
    end: int = 0
    outside: list[int] = field(default_factory=list)
    share: list[int] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class StepIndex:
    """Per step number: its ProfilerStep#N ranges, its device events (``events``: a block's step for the events
    blocks own, else the launching op's) with what each is to the step (``kinds``: ATTENTION, OUTSIDE or STEPLESS),
    all it launched (``launched``), its top-level host ops' ns, and its device figures (``busy``, one sweep)."""

    roots: dict[int, list[HostEvent]] = field(default_factory=dict)
    events: dict[int, list[int]] = field(default_factory=dict)
    kinds: dict[int, list[int]] = field(default_factory=dict)
    launched: Counter[int] = field(default_factory=Counter)
    ops_ns: dict[int, int] = field(default_factory=dict)
    ops_by_name: dict[int, dict[str, int]] = field(default_factory=dict)
    busy: dict[int, StepBusy] = field(default_factory=dict)


def step_index(tr: Trace, links: Links, blocks: Sequence[Block], dev_owner: Sequence[int]) -> StepIndex:
    """The index of a trace with steps; an empty one without (no walk at all)."""
    index = StepIndex()
    if tr.info.steps:
        _host_pass(tr, links, index)
        _device_pass(links, blocks, dev_owner, index)
        dev = tr.device
        index.busy = {s: step_busy(dev, js, index.kinds[s]) for s, js in index.events.items()}
    return index


def _host_pass(tr: Trace, links: Links, index: StepIndex) -> None:
    """ProfilerStep ranges (``links.step_roots``, those of the trace's steps) and top-level host ops
    (``links.top_ops``: ops inside no other op, an op being its own launcher), per step: both lists were found by
    the host nesting's sweep, so this reads only their events. A graph replay's copies of captured ops carry the
    capture's times and are left out of the ops."""
    host, step = tr.host, links.step
    skip = replay_threads(tr) if tr.graphs is not None and tr.graphs.launches else frozenset()
    by_name: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for i in links.top_ops:
        s = step[i]
        if s is None:
            continue
        h = host[i]
        if skip and h.thread in skip:
            continue
        by_name[s][h.name] += h.dur
    total = {s: sum(ns.values()) for s, ns in by_name.items()}  # (integers: the same sums as op by op)
    index.roots, index.ops_ns, index.ops_by_name = _roots(tr, links), total, by_name


def _roots(tr: Trace, links: Links) -> dict[int, list[HostEvent]]:
    """Each step's ProfilerStep#N ranges: the step roots named for a step of the trace, that step's."""
    host, step = tr.host, links.step
    names = {f"ProfilerStep#{n}": n for n in tr.info.steps}
    roots: dict[int, list[HostEvent]] = defaultdict(list)
    for i in links.step_roots:
        if names.get(host[i].name) == step[i]:
            roots[step[i]].append(host[i])  # type: ignore[index]
    return roots


def _device_pass(links: Links, blocks: Sequence[Block], dev_owner: Sequence[int], index: StepIndex) -> None:
    """Each device event into its step's list, with what it is to the step (see :class:`StepIndex`)."""
    step = links.step
    # (each event's launching step, and each block's step, looked up once: the loop below only appends)
    launch_step = [step[lf] if lf != NONE else None for lf in links.device_leaf]
    block_step = [b.step for b in blocks]
    counted: Counter[int | None] = Counter(launch_step)  # (counted in C; those launched outside every step dropped)
    counted.pop(None, None)
    launched: Counter[int] = counted  # type: ignore[assignment]
    if len(dev_owner) >= ARRAY_SWEEP:
        try:
            index.events, index.kinds = _group_arrays(dev_owner, launch_step, block_step)
            index.launched = launched
            return
        except OverflowError:  # (a step number past int64: steps are held below 2**63, but Links may be built by hand)
            pass
    events: dict[int, list[int]] = defaultdict(list)
    kinds: dict[int, list[int]] = defaultdict(list)
    for j, (b, ls) in enumerate(zip(dev_owner, launch_step)):
        if b == NONE:
            s, kind = ls, OUTSIDE
        else:
            s, kind = block_step[b], ATTENTION
            if s is None:  # (a block outside every step: its events are in their launching op's)
                s, kind = ls, STEPLESS
        if s is not None:
            events[s].append(j)
            kinds[s].append(kind)
    index.events, index.kinds, index.launched = events, kinds, launched


def _group_arrays(dev_owner: Sequence[int], launch_step: list[int | None], block_step: list[int | None],
                  ) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """:func:`_device_pass`'s grouping as array operations: each event's step and kind (its block's step, else its
    launching op's), then the events of each step in index order by one stable sort. Steps in order of their
    first event, as the loop's dicts have them."""
    import numpy as np

    n = len(dev_owner)
    ls = np.fromiter([-1 if x is None else x for x in launch_step], np.int64, n)
    owner = np.fromiter(dev_owner, np.int64, n)
    owned = owner != NONE
    bs = np.fromiter([-1 if x is None else x for x in block_step], np.int64, len(block_step))
    step = np.where(owned, bs[np.where(owned, owner, 0)] if len(bs) else -1, ls)
    kind = np.where(owned, ATTENTION, OUTSIDE)
    stepless = owned & (step == -1)  # (a block outside every step: its events are in their launching op's)
    step[stepless], kind[stepless] = ls[stepless], STEPLESS
    at = np.flatnonzero(step != -1)
    order = at[np.argsort(step[at], kind="stable")]
    keys, starts = np.unique(step[order], return_index=True)
    bounds = [*starts.tolist(), len(order)]
    by_first = sorted(range(len(keys)), key=lambda g: order[bounds[g]])  # (steps in order of their first event)
    events = {int(keys[g]): order[bounds[g]:bounds[g + 1]].tolist() for g in by_first}
    kinds = {int(keys[g]): kind[order[bounds[g]:bounds[g + 1]]].tolist() for g in by_first}
    return events, kinds


def step_busy(dev: Sequence[DeviceEvent], js: list[int], kinds: list[int]) -> StepBusy:
    """:class:`StepBusy` of the device events ``js`` (ascending, each of kind ``kinds[k]``): one sort by start and one
    sweep (:func:`_sweep`)."""
    if not js:
        return StepBusy()
    evs = list(map(dev.__getitem__, js))
    ts = [e.ts for e in evs]
    order = sorted(range(len(js)), key=ts.__getitem__)  # (stable: the first is the lowest index among the first)
    sweep = _sweep if len(js) < ARRAY_SWEEP else _sweep_arrays
    busy, att, share, end = sweep(evs, ts, order, kinds)
    out = list(map(eq, kinds, repeat(OUTSIDE)))
    return StepBusy(busy_ns=busy, attention_ns=att, first=js[order[0]], start=ts[order[0]], end=end,
                    outside=list(compress(js, out)), share=list(compress(share, out)))


# A step with this many device events or more is swept as array operations (_sweep_arrays): a step of a training
# or serving trace has tens of thousands; below it numpy's overhead outweighs the loop's.
ARRAY_SWEEP = 256


def _sweep_arrays(evs: list[DeviceEvent], ts: list[int], order: list[int], kinds: list[int],
                  ) -> tuple[int, int, list[int], int]:
    """:func:`_sweep` as array operations: each first-come split by busy.first_come over the events in ``order``
    (one run each: all the events, the attention ones, the outside ones). The same integers: a split only compares
    and subtracts starts and ends, and every sum is at most the step's span."""
    import numpy as np

    n = len(ts)
    o = np.fromiter(order, np.int64, n)
    t = np.fromiter(ts, np.int64, n)[o]
    e = t + np.fromiter([x.dur for x in evs], np.int64, n)[o]
    k = np.fromiter(kinds, np.int64, n)[o]
    busy = int(_shares(t, e).sum())
    att = k == ATTENTION
    attention = int(_shares(t[att], e[att]).sum())
    out = k == OUTSIDE
    share = np.zeros(n, np.int64)
    share[o[out]] = _shares(t[out], e[out])
    return busy, attention, share.tolist(), int(e.max())


def _shares(t: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Each event's first-come share of one run sorted by start."""
    import numpy as np

    first = np.zeros(len(t), np.bool_)
    first[:1] = True
    return first_come(t, e, first)[1]


def _sweep(evs: list[DeviceEvent], ts: list[int], order: list[int], kinds: list[int],
           ) -> tuple[int, int, list[int], int]:
    """Three first-come splits at once (busy.busy_time's, each with its own running end), in ``order`` (by start;
    ``ts``: the events' starts): all the events' busy union, the attention ones', and each outside event's share
    among the outside ones; and the last end (the running end of all: no duration is negative, the loader drops
    those). The running ends start at the first start, which no end is below: the same split as starting from
    none."""
    m = ma = mo = ts[order[0]]  # the running ends: all, attention, outside
    busy = att = 0
    share = [0] * len(ts)
    for k in order:
        t = ts[k]
        e = t + evs[k].dur
        if e > m:
            busy += e - (t if t > m else m)
            m = e
        c = kinds[k]
        if c == ATTENTION:
            if e > ma:
                att += e - (t if t > ma else ma)
                ma = e
        elif c == OUTSIDE and e > mo:
            share[k] = e - (t if t > mo else mo)
            mo = e
    return busy, att, share, m
