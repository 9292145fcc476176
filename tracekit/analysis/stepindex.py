"""Which step each event belongs to, found once for every per-step figure (whole steps, the rest of the step).

Why one index: the whole-step figures (tracekit.analysis.totals.whole_steps) and the rest of the step
(tracekit.analysis.rest.step_rest) both need each step's ProfilerStep ranges, its device events and its top-level
host ops. Each of those is a walk over every host or device event of a GB trace, so they are walked once here, by
one pass over the host events and one over the device events, and both figures read the result.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..model import HostEvent, Trace
from .blocks.discovery import Block
from .graphs import replay_threads
from .link import NONE, Links


@dataclass(slots=True, kw_only=True)
class StepIndex:
    """Per step number: its ProfilerStep#N ranges, its device events (``events``: a block's step for the events
    blocks own, else the launching op's; ``attention``: those its blocks own), by the launching op's step the
    events no block owns (``outside``) and all it launched (``launched``), and its top-level host ops' ns."""

    roots: dict[int, list[HostEvent]] = field(default_factory=dict)
    events: dict[int, list[int]] = field(default_factory=dict)
    attention: dict[int, list[int]] = field(default_factory=dict)
    outside: dict[int, list[int]] = field(default_factory=dict)
    launched: Counter[int] = field(default_factory=Counter)
    ops_ns: dict[int, int] = field(default_factory=dict)
    ops_by_name: dict[int, dict[str, int]] = field(default_factory=dict)


def step_index(tr: Trace, links: Links, blocks: Sequence[Block], dev_owner: Sequence[int]) -> StepIndex:
    """The index of a trace with steps; an empty one without (no walk at all)."""
    index = StepIndex()
    if tr.info.steps:
        _host_pass(tr, links, index)
        _device_pass(links, blocks, dev_owner, index)
    return index


def _host_pass(tr: Trace, links: Links, index: StepIndex) -> None:
    """ProfilerStep ranges (``links.step_roots``, those of the trace's steps) and top-level host ops
    (``links.top_ops``: ops inside no other op, an op being its own launcher), per step: both lists were found by
    the host nesting's sweep, so this reads only their events. A graph replay's copies of captured ops carry the
    capture's times and are left out of the ops."""
    host, step = tr.host, links.step
    names = {f"ProfilerStep#{n}": n for n in tr.info.steps}
    roots: dict[int, list[HostEvent]] = defaultdict(list)
    for i in links.step_roots:
        if names.get(host[i].name) == step[i]:
            roots[step[i]].append(host[i])  # type: ignore[index]
    skip = replay_threads(tr) if tr.graphs is not None and tr.graphs.launches else frozenset()
    total: dict[int, int] = defaultdict(int)
    by_name: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for i in links.top_ops:
        s = step[i]
        if s is None:
            continue
        h = host[i]
        if skip and h.thread in skip:
            continue
        total[s] += h.dur
        by_name[s][h.name] += h.dur
    index.roots, index.ops_ns, index.ops_by_name = roots, total, by_name


def _device_pass(links: Links, blocks: Sequence[Block], dev_owner: Sequence[int], index: StepIndex) -> None:
    """Each device event into its step's lists (see :class:`StepIndex`)."""
    step = links.step
    # (each event's launching step, and each block's step, looked up once: the loop below only appends)
    launch_step = [step[lf] if lf != NONE else None for lf in links.device_leaf]
    block_step = [b.step for b in blocks]
    launched: Counter[int] = Counter(s for s in launch_step if s is not None)
    events: dict[int, list[int]] = defaultdict(list)
    attention: dict[int, list[int]] = defaultdict(list)
    outside: dict[int, list[int]] = defaultdict(list)
    for j, (b, ls) in enumerate(zip(dev_owner, launch_step)):
        if b == NONE:
            if ls is not None:
                outside[ls].append(j)
                events[ls].append(j)
            continue
        s = block_step[b]
        if s is not None:
            attention[s].append(j)
            events[s].append(j)
        elif ls is not None:
            events[ls].append(j)
    index.events, index.attention, index.outside, index.launched = events, attention, outside, launched
