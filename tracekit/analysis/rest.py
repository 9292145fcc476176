"""The rest of each ProfilerStep, outside its attention blocks (tracekit.results.rest.StepRest; issue 37, item 7).

Per step: the busy time of the device events no attention block owns, by category and by top-level module (the
outermost recorded nn.Module's child, or that module when it has none: the outermost is the whole model; by
class, instances summed); the
device events the step launched; the host time of its top-level ops, in all and by op name. A step's events are
those whose launching host op lies in its ProfilerStep#N range. One pass over the device events and one over the
host ops, only on traces with steps.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence

from ..model import MODULE, Trace
from ..results.rest import StepRest
from ..vocab import CATEGORIES, Category
from .busy import busy_time
from .graphs import replay_threads
from .link import NONE, Links


def step_rest(tr: Trace, links: Links, cats: Sequence[Category], dev_owner: Sequence[int]) -> list[StepRest]:
    """Each step's figures outside attention, in step order; [] on a trace without steps."""
    if not tr.info.steps:
        return []
    outside, launched = _step_events(links, dev_owner)
    module = _ModuleOf(tr, links)
    ops, by_name = _host_ops(tr, links)
    out = []
    for s in sorted(set(tr.info.steps) & (set(launched) | set(ops))):
        c, mods = _outside(tr, links, cats, outside.get(s, []), module)
        out.append(StepRest(step=s, categories={k: v / 1000 for k, v in c.items()},
                            modules={k: v / 1000 for k, v in sorted(mods.items(), key=lambda kv: -kv[1])},
                            kernels=launched[s], host_ops_us=ops.get(s, 0) / 1000,
                            host_ops={k: v / 1000 for k, v in by_name.get(s, {}).items()}))
    return out


def _step_events(links: Links, dev_owner: Sequence[int]) -> tuple[dict[int, list[int]], Counter[int]]:
    """Per step (of the launching host op), the device events no block owns, and the count of all it launched."""
    step, leaf = links.step, links.device_leaf
    outside: dict[int, list[int]] = defaultdict(list)
    launched: Counter[int] = Counter()
    for j, (b, lf) in enumerate(zip(dev_owner, leaf)):
        s = step[lf] if lf != NONE else None
        if s is not None:
            launched[s] += 1
            if b == NONE:
                outside[s].append(j)
    return outside, launched


def _outside(tr: Trace, links: Links, cats: Sequence[Category], js: list[int],
             module: _ModuleOf) -> tuple[dict[str, int], dict[str, int]]:
    """The events' busy ns (first-come split among them) by category and by top-level module."""
    _, share = busy_time([tr.device[j] for j in js])
    c = dict.fromkeys(CATEGORIES, 0)
    mods: dict[str, int] = defaultdict(int)
    leaf = links.device_leaf
    by_leaf: dict[int, int] = defaultdict(int)  # the module is looked up once per launching op, not per kernel
    for j, ns in zip(js, share):
        c[cats[j]] += ns
        by_leaf[leaf[j]] += ns
    if module.any:
        for lf, ns in by_leaf.items():
            m = module(lf)
            if m is not None:
                mods[m] += ns
    return c, mods


def _host_ops(tr: Trace, links: Links) -> tuple[dict[int, int], dict[int, dict[str, int]]]:
    """Per step, the ns of its top-level host ops (kind OP inside no other op), in all and by name. A graph
    replay's copies of captured ops carry the capture's times and are left out.

    Why through ``links.launcher``: an event is an op exactly when it is its own launcher, so the walk over every
    host event reads two lists and touches an event's fields only for the few top-level ops (this pass sees all
    events of a GB trace)."""
    host, step, op_parent, launcher = tr.host, links.step, links.op_parent, links.launcher
    skip = replay_threads(tr) if tr.graphs is not None and tr.graphs.launches else frozenset()
    total: dict[int, int] = defaultdict(int)
    by_name: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for i, (s, p) in enumerate(zip(step, op_parent)):
        if s is None or launcher[i] != i or (p != NONE and launcher[p] == p):
            continue
        h = host[i]
        if skip and h.thread in skip:
            continue
        total[s] += h.dur
        by_name[s][h.name] += h.dur
    return total, by_name


def module_kind(name: str) -> str:
    """``nn.Module: Qwen2DecoderLayer_17`` -> ``Qwen2DecoderLayer``: the module's class, its instances summed."""
    return _INSTANCE.sub("", name.removeprefix("nn.Module: "))


_INSTANCE = re.compile(r"_\d+$")


class _ModuleOf:
    """A host event's top-level module: among the nn.Module events around it, the outermost one's child (the
    outermost itself when it is the only one); memoised per event, as many kernels share a launching op."""

    def __init__(self, tr: Trace, links: Links) -> None:
        self.host, self.parent = tr.host, links.parent
        self.any = any(h.kind == MODULE for h in tr.host)
        self.memo: dict[int, str | None] = {}

    def __call__(self, i: int) -> str | None:
        if i == NONE:
            return None
        got = self.memo.get(i, "")
        if got != "":
            return got
        outer = inner = NONE
        k = i
        while k != NONE:
            if self.host[k].kind == MODULE:
                outer, inner = k, outer
            k = self.parent[k]
        name = None if outer == NONE else module_kind(self.host[inner if inner != NONE else outer].name)
        self.memo[i] = name
        return name
