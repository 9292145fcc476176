"""CUDA/HIP graph facts at the parse boundary: which runtime calls capture, instantiate and launch graphs.

During a capture the launches only record graph nodes: no device event follows them (trace-schema, "Graphs").
A replay is one ``cudaGraphLaunch``/``hipGraphLaunch`` call whose correlation id every replayed device event
carries; those events have no host op of their own. Runtime call names are matched by :data:`GRAPH_CALL_RULES`,
named, ordered data like the classifier's rules; the first rule that matches a name wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from ..model import CaptureRegion, GraphFacts, GraphLaunch, Trace


class GraphCall(Enum):
    BEGIN_CAPTURE = "begin-capture"
    END_CAPTURE = "end-capture"
    GRAPH_LAUNCH = "graph-launch"
    INSTANTIATE = "instantiate"
    CAPTURE_QUERY = "capture-query"
    WORK = "work"


@dataclass(frozen=True, slots=True)
class GraphCallRule:
    name: str
    call: GraphCall
    pattern: str  # a full match of the runtime call's name (per-thread ``_ptsz``/``_spt`` and ``_vN`` suffixes too)
    why: str


_SUFFIX = r"(?:_v\d+)?(?:_ptsz|_ptds|_spt)?"
GRAPH_CALL_RULES: tuple[GraphCallRule, ...] = (
    GraphCallRule("begin-capture", GraphCall.BEGIN_CAPTURE,
                  rf"(?:cuda|hip|cu)StreamBeginCapture(?:ToGraph)?{_SUFFIX}",
                  "the thread's launches from here on record graph nodes instead of running"),
    GraphCallRule("end-capture", GraphCall.END_CAPTURE, rf"(?:cuda|hip|cu)StreamEndCapture{_SUFFIX}",
                  "closes the capture the thread opened last; the recorded graph is then instantiated"),
    GraphCallRule("graph-launch", GraphCall.GRAPH_LAUNCH, rf"(?:cuda|hip|cu)GraphLaunch{_SUFFIX}",
                  "replays an instantiated graph: every device event with its correlation id is one of its nodes"),
    GraphCallRule("instantiate", GraphCall.INSTANTIATE,
                  rf"(?:cuda|hip|cu)GraphInstantiate(?:WithFlags|WithParams)?{_SUFFIX}",
                  "turns a captured graph into one that can be launched"),
    GraphCallRule("capture-query", GraphCall.CAPTURE_QUERY,
                  rf"(?:cuda|hip|cu)Stream(?:IsCapturing|GetCaptureInfo)(?:_v2)?{_SUFFIX}",
                  "only asks whether the stream is capturing: eager code (the caching allocator) calls it too, "
                  "so it marks no capture by itself"),
    GraphCallRule("work", GraphCall.WORK,
                  r"(?:cuda|hip|cu)\w*Launch\w*Kernel\w*|(?:cuda|hip|cu)Memcpy\w*Async\w*|(?:cuda|hip|cu)Memset"
                  r"\w*Async\w*|(?:cuda|hip)MemcpyWithStream\w*",
                  "launches device work (a kernel, a copy, a fill): inside a capture it records one node"),
)
_RULES = tuple((r, re.compile(r.pattern)) for r in GRAPH_CALL_RULES)
_HINT = re.compile(r"Capture|GraphLaunch")  # a name no graph trace lacks: an eager trace is told by it alone


def graph_call(name: str) -> GraphCall | None:
    """The graph role of a runtime call's name, by the first rule that matches it."""
    for rule, rx in _RULES:
        if rx.fullmatch(name):
            return rule.call
    return None


def find_graphs(tr: Trace) -> GraphFacts:
    """The trace's captures (per host thread) and graph launches with the device events each ran.

    An eager trace costs one look at its distinct names (``Trace.names``) when the loader recorded them.
    """
    if not _mentions_graphs(tr):
        return GraphFacts()
    role = {n: graph_call(n) for n in {rt.name for rt in tr.runtime}}
    facts = GraphFacts()
    open_: dict[int, list[CaptureRegion]] = {}  # thread -> its open captures, innermost last
    launch_of: dict[int, GraphLaunch] = {}  # correlation id -> the graph launch with it
    order = sorted(range(len(tr.runtime)), key=lambda r: tr.runtime[r].ts)
    end = max((rt.ts + rt.dur for rt in tr.runtime), default=0)
    for r in order:
        rt = tr.runtime[r]
        call = role[rt.name]
        if call is None or call is GraphCall.CAPTURE_QUERY:
            continue
        stack = open_.get(rt.thread)
        if call is GraphCall.WORK:
            if stack:
                stack[-1].launches.append(r)
        elif call is GraphCall.BEGIN_CAPTURE:
            region = CaptureRegion(thread=rt.thread, begin=rt.ts, end=end, launches=[], closed=False)
            open_.setdefault(rt.thread, []).append(region)
            facts.captures.append(region)
        elif call is GraphCall.END_CAPTURE:
            if stack:
                region = stack.pop()
                region.end, region.closed = rt.ts + rt.dur, True
            else:  # (the capture began before the profiler's window: from the thread's first call)
                region = _unopened(tr, order, r)
                facts.captures.append(region)
        elif call is GraphCall.GRAPH_LAUNCH:
            launch = GraphLaunch(runtime=r, device=[])
            facts.launches.append(launch)
            if rt.correlation:
                launch_of[rt.correlation] = launch
        elif call is GraphCall.INSTANTIATE:
            facts.instantiations += 1
    if launch_of:
        _attach_device(tr, launch_of, facts.launches)
    facts.captures.sort(key=lambda c: (c.begin, c.thread))
    return facts


def _mentions_graphs(tr: Trace) -> bool:
    """Whether any runtime call names a graph or capture API: the cheap test that lets an eager trace skip the walk."""
    names = tr.names if tr.names is not None else {rt.name for rt in tr.runtime}
    return any(_HINT.search(n) for n in names if "Graph" in n or "Capture" in n)


def _attach_device(tr: Trace, launch_of: dict[int, GraphLaunch], launches: list[GraphLaunch]) -> None:
    """Each device event to the graph launch whose correlation id it carries, in device time order."""
    for j, d in enumerate(tr.device):
        g = launch_of.get(d.correlation)
        if g is not None:
            g.device.append(j)
    for g in launches:
        g.device.sort(key=lambda j: (tr.device[j].ts, tr.device[j].stream))


def _unopened(tr: Trace, order: list[int], end_r: int) -> CaptureRegion:
    """A capture whose BeginCapture is before the trace: from the thread's first runtime call to its end."""
    rt_end = tr.runtime[end_r]
    mine = [r for r in order if tr.runtime[r].thread == rt_end.thread and tr.runtime[r].ts <= rt_end.ts]
    work = [r for r in mine if r != end_r and graph_call(tr.runtime[r].name) is GraphCall.WORK]
    return CaptureRegion(thread=rt_end.thread, begin=tr.runtime[mine[0]].ts, end=rt_end.ts + rt_end.dur,
                         launches=work, closed=False)
