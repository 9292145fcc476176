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
from operator import attrgetter
from collections import defaultdict
from collections.abc import Iterable, Sequence

from ..model import MODULE, Trace
from ..results.rest import StepRest
from ..vocab import CATEGORIES, Category
from .busy import block_window, busy_time
from .clock import first_event
from .idle import IdleSplitter
from .link import NONE, Links
from .stepindex import StepIndex


def step_rest(tr: Trace, links: Links, cats: Sequence[Category], index: StepIndex) -> list[StepRest]:
    """Each step's figures outside attention, in step order; [] on a trace without steps. ``index``: each step's
    events, their busy split and top-level host ops (tracekit.analysis.stepindex), found once for this and the
    whole-step figures."""
    if not tr.info.steps:
        return []
    busy, launched, ops, by_name = index.busy, index.launched, index.ops_ns, index.ops_by_name
    module = _ModuleOf(tr, links)
    out = []
    for s in sorted(set(tr.info.steps) & (set(launched) | set(ops))):
        b = busy.get(s)
        c, mods = _outside(links, cats, b.outside, b.share, module) if b is not None else (_no_categories(), {})
        out.append(StepRest(step=s, categories={k: v / 1000 for k, v in c.items()},
                            modules={k: v / 1000 for k, v in sorted(mods.items(), key=lambda kv: -kv[1])},
                            kernels=launched[s], host_ops_us=ops.get(s, 0) / 1000,
                            host_ops={k: v / 1000 for k, v in by_name.get(s, {}).items()}))
    return out


def _no_categories() -> dict[str, int]:
    return dict.fromkeys(CATEGORIES, 0)


def _outside(links: Links, cats: Sequence[Category], js: list[int], share: list[int],
             module: _ModuleOf) -> tuple[dict[str, int], dict[str, int]]:
    """The events' busy ns (``share``: their first-come split among them) by category and by top-level module."""
    c = _no_categories()
    mods: dict[str, int] = defaultdict(int)
    leaf = links.device_leaf
    by_leaf: dict[int, int] = defaultdict(int)  # the module is looked up once per launching op, not per kernel
    for j, ns in zip(js, share):
        c[cats[j]] += ns
        by_leaf[leaf[j]] += ns
    if module.any:
        for m, ns in zip(module.of_leaves(by_leaf), by_leaf.values()):
            if m is not None:
                mods[m] += ns
    return c, mods


TOP_OUTSIDE = 10  # device events by name kept per step of a trace with no attention blocks


def blockless_steps(tr: Trace, cats: Sequence[Category], index: StepIndex, rest: list[StepRest],
                    idle: IdleSplitter, free_at: Sequence[int]) -> None:
    """For a trace with no attention blocks (issue 42; a ResNet step is still worth a page): each step's idle time
    by cause, its window (whole_steps' rule, so the causes sum to its span less its busy time) split as a block's
    is, and its costliest device events by name. One more pass over each step's device events, on such traces
    only: a trace with blocks pays nothing."""
    dev = tr.device
    for r in rest:
        js = index.events.get(r.step, [])
        if not js:
            continue
        evs = [dev[j] for j in js]
        roots = index.roots.get(r.step, [])
        start, end = block_window(evs, roots, free_at[first_event(js, evs)])
        causes = idle.split(js, start, end, {h.thread for h in roots})
        r.idle_by_cause = {k: v / 1000 for k, v in causes.items()}
        r.top_kernels = _top_kernels(tr, cats, js)


def _top_kernels(tr: Trace, cats: Sequence[Category], js: list[int]) -> list[tuple[str, str, int, float]]:
    """The events by (name, category): (name, category, count, busy µs, first-come split among them), the largest
    first, at most TOP_OUTSIDE."""
    _, share = busy_time([tr.device[j] for j in js])
    by: dict[tuple[str, str], list[int]] = {}
    for j, ns in zip(js, share):
        got = by.setdefault((tr.device[j].name, str(cats[j])), [0, 0])
        got[0] += 1
        got[1] += ns
    rows = sorted(((n, c, k, ns / 1000) for (n, c), (k, ns) in by.items()), key=lambda r: (-r[3], r[0]))
    return rows[:TOP_OUTSIDE]


def module_kind(name: str) -> str:
    """``nn.Module: Qwen2DecoderLayer_17`` -> ``Qwen2DecoderLayer``: the module's class, its instances summed."""
    return _INSTANCE.sub("", name.removeprefix("nn.Module: "))


_INSTANCE = re.compile(r"_\d+$")


class _ModuleOf:
    """A host event's top-level module: among the nn.Module events around it, the outermost one's child (the
    outermost itself when it is the only one); memoised per module event, which an op's answer is its nearest's."""

    def __init__(self, tr: Trace, links: Links) -> None:
        self.host, self.parent = tr.host, links.parent
        # Whether any event is an nn.Module: the file's distinct names tell without a pass over the events (a name
        # that reads like a module on another kind only costs lookups that find nothing)
        self.any = (any(n.startswith("nn.Module: ") for n in tr.names) if tr.names is not None
                    else any(map(MODULE.__eq__, map(attrgetter("kind"), tr.host))))
        self.memo: dict[int, str | None] = {}  # nn.Module event -> its top-level module's class
        self._outermost: set[int] = set()  # the outermost modules met so far (no module around them)
        self._kinds: dict[str, str] = {}  # module event name -> module_kind (layers repeat their names)

    def __call__(self, i: int) -> str | None:
        host, parent = self.host, self.parent
        while i != NONE and host[i].kind != MODULE:  # an op's top-level module is its nearest module's: kept there
            i = parent[i]
        if i == NONE:
            return None
        got = self.memo.get(i, "")
        if got == "":
            got = self.memo[i] = self._named(i)
        return got

    def of_leaves(self, leaves: Iterable[int]) -> list[str | None]:
        """:meth:`__call__` of each of ``leaves`` (distinct launching ops, or NONE): an op's answer is its parent's
        (the nearest module above it is its parent's), so it is worked out once per distinct parent, not per op."""
        host, parent = self.host, self.parent
        by_parent: dict[int, str | None] = {}
        out: list[str | None] = []
        for lf in leaves:
            if lf == NONE or host[lf].kind == MODULE:
                out.append(self(lf))
                continue
            p = parent[lf]
            got = by_parent.get(p, "")
            if got == "":
                got = by_parent[p] = self(p)
            out.append(got)
        return out

    def _named(self, m: int) -> str | None:
        """The top-level module of nn.Module event ``m`` (its outermost, or that one's child on the way to ``m``),
        by class; kept for every module on the way up to one whose answer is known (a module's answer is its
        nearest module's, unless that one is the outermost: then it is its own), so each is looked at once."""
        host, parent, memo, outermost = self.host, self.parent, self.memo, self._outermost
        path = [m]  # the modules from m up, innermost first
        k = parent[m]
        while True:
            while k != NONE and host[k].kind != MODULE:
                k = parent[k]
            if k == NONE or k in memo:
                break
            path.append(k)
            k = parent[k]
        got: str | None
        if k == NONE:  # path[-1] is the outermost: its answer is its own, and its child's (and below) the child's
            top = path.pop()
            outermost.add(top)
            memo[top] = self._kind(top)
            if not path:
                return memo[top]
            got = self._kind(path[-1])
        else:
            got = self._kind(path[-1]) if k in outermost else memo[k]
        for q in path:
            memo[q] = got
        return got

    def _kind(self, m: int) -> str:
        """module_kind of module event ``m``'s name, once per distinct name (layers repeat their names)."""
        raw = self.host[m].name
        name = self._kinds.get(raw)
        if name is None:
            name = self._kinds[raw] = module_kind(raw)
        return name
