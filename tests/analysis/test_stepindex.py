"""The per-step device figures (tracekit.analysis.stepindex): one first-come sweep, in Python for small steps and as
array operations for large ones (ARRAY_SWEEP), checked against unions worked out by merging intervals (support)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.traces import busy_union

from tracekit.analysis import stepindex
from tracekit.analysis.stepindex import ATTENTION, OUTSIDE, STEPLESS, step_busy
from tracekit.model import DeviceEvent


_EVENTS = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 5000),
                             st.sampled_from([ATTENTION, OUTSIDE, STEPLESS])), min_size=1, max_size=400)


@settings(max_examples=200, deadline=None)
@given(events=_EVENTS, base=st.sampled_from([0, 1_700_000_000_000_000_000]))
def test_a_step_sweeps_the_same_in_python_and_as_arrays_and_matches_the_unions(events, base):
    """Random events (ties, zero lengths, nesting; epoch-sized ns too): both sweeps give the same figures, and
    those are the unions of all events and of the attention ones, outside shares that add up to the outside
    events' union (each at most its own length), the first start and the last end."""
    dev = [DeviceEvent(kind="kernel", name="k", stream=0, ts=base + t, dur=d, correlation=0, ext_id=0)
           for t, d, _ in events]
    js, kinds = list(range(len(dev))), [k for _, _, k in events]
    was = stepindex.ARRAY_SWEEP
    try:
        stepindex.ARRAY_SWEEP = 1
        arrays = step_busy(dev, js, kinds)
        stepindex.ARRAY_SWEEP = 10**9
        loop = step_busy(dev, js, kinds)
    finally:
        stepindex.ARRAY_SWEEP = was
    assert arrays == loop
    spans = [(e.ts, e.ts + e.dur) for e in dev]
    assert arrays.busy_ns == busy_union(spans)
    assert arrays.attention_ns == busy_union([s for s, k in zip(spans, kinds) if k == ATTENTION])
    out = [j for j in js if kinds[j] == OUTSIDE]
    assert arrays.outside == out
    assert sum(arrays.share) == busy_union([spans[j] for j in out])
    assert all(0 <= sh <= dev[j].dur for j, sh in zip(out, arrays.share))
    assert (arrays.start, arrays.end) == (min(s for s, _ in spans), max(e for _, e in spans))
    assert arrays.first == min(js, key=lambda j: (dev[j].ts, j))


_OWNERS = st.lists(st.tuples(st.integers(-1, 5), st.one_of(st.none(), st.integers(0, 4))), min_size=1, max_size=600)


@settings(max_examples=200, deadline=None)
@given(events=_OWNERS, block_steps=st.lists(st.one_of(st.none(), st.integers(0, 4)), min_size=6, max_size=6))
def test_events_group_by_step_the_same_in_python_and_as_arrays(events, block_steps):
    """Each device event (its block, -1 for none; its launching op's step) goes to its block's step as attention,
    to its launching op's as outside, or (a block outside every step) to its launching op's as stepless; the
    array grouping gives the same lists, in the same order of steps, as the loop, and this reading of the rule."""
    from types import SimpleNamespace

    from tracekit.analysis.stepindex import StepIndex, _device_pass

    owners = [b for b, _ in events]
    links = SimpleNamespace(step=[s for _, s in events], device_leaf=list(range(len(events))))
    blocks = [SimpleNamespace(step=s) for s in block_steps]
    got = {}
    was = stepindex.ARRAY_SWEEP
    try:
        for at in (1, 10**9):
            stepindex.ARRAY_SWEEP = at
            index = StepIndex()
            _device_pass(links, blocks, owners, index)
            got[at] = (list(index.events.items()), list(index.kinds.items()), dict(index.launched))
    finally:
        stepindex.ARRAY_SWEEP = was
    assert got[1] == got[10**9]
    want: dict[int, list[tuple[int, int]]] = {}
    for j, (b, ls) in enumerate(events):
        s, k = (ls, OUTSIDE) if b == -1 else (block_steps[b], ATTENTION)
        if b != -1 and s is None:
            s, k = ls, STEPLESS
        if s is not None:
            want.setdefault(s, []).append((j, k))
    assert got[1][0] == [(s, [j for j, _ in v]) for s, v in want.items()]
    assert got[1][1] == [(s, [k for _, k in v]) for s, v in want.items()]
