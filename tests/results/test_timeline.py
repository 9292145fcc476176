"""The report's timeline data (tracekit.results.timeline, issue 25 part 2): which step is drawn, and that its
blocks, kernels, idle gaps and host spans sit where the trace put them.

Expectations come from hand-built traces (tests/support/builders.py's attention_block: six device events at known times,
busy 31 µs, idle 105 µs, a 60 µs host annotation) and, on a real H200 trace, from a walk of the raw JSON.
"""

from __future__ import annotations


import pytest
from support.builders import TraceBuilder, attention_block, steps_trace
from support.builders import ATTENTION_BLOCK_KERNELS as KERNELS
from support.paths import ROOT
from support.traces import read_events

import tracekit
from tracekit.renderers.html import report_data
from tracekit.results import timeline as tl
from tracekit.results.invariants import InvariantError
from tracekit.results.attribution import GAP_STRIDE
from tracekit.vocab import CATEGORIES, IDLE_CAUSES, LaneKind, StepChoice

SWEEP = ROOT.parent / "shared" / "traces" / "h200" / "sweep"
# attention_block's device events, from the block's start t0: (offset µs, duration µs); device work starts at +100



@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    path, starts = steps_trace(tmp_path_factory.mktemp("tl") / "steps.pt.trace.json")
    return tracekit.analyze(path, jobs=1), starts


def test_the_median_step_by_span_is_drawn(steps):
    """Windows 200 (step 1), 600 (step 2), 400 µs (step 3): by span 1 < 3 < 2, the middle one is step 3."""
    result, starts = steps
    t = tl.timeline(result)
    t.check()
    assert (t.step, t.chosen, t.steps) == (3, StepChoice.MEDIAN, [1, 2, 3])
    assert [b.name for b in t.blocks] == ["layer0.attention", "layer1.attention"]
    assert t.block_index == [i for i, b in enumerate(result.blocks) if b.step == 3]


def test_the_lower_middle_of_an_even_count():
    """Four steps by span 200 < 400 < 600 < 800 µs: the lower middle is the second, the 400 µs step (#4)."""
    blocks = [type("B", (), {"step": s})() for s in (1, 2, 3, 4)]
    windows = {1: 200, 2: 800, 3: 600, 4: 400}
    summary = type("T", (), {"step_figures": [type("F", (), {"step": s, "start_us": 0.0, "end_us": float(w)})()
                                              for s, w in windows.items()]})()
    assert tl.choose_step(blocks, summary, None) == (4, StepChoice.MEDIAN)  # type: ignore[arg-type]


def test_a_requested_step_is_drawn_and_a_missing_one_falls_back(steps):
    result, _ = steps
    t = tl.timeline(result, step=2)
    t.check()
    assert (t.step, t.chosen, len(t.blocks)) == (2, StepChoice.REQUESTED, 3)
    t = tl.timeline(result, step=9)
    assert (t.step, t.chosen) == (3, StepChoice.MEDIAN)


def _flat(rows) -> list[float]:
    """Rows of numbers as one flat list: pytest.approx compares flat sequences only (pytest >= 9.2 refuses nested
    ones), and flattening keeps the row count and order in the comparison."""
    return [float(x) for row in rows for x in row]


def test_a_step_no_timeline_holds_is_named_with_the_steps_there(steps, tmp_path):
    """Issue 41 row 7: ``report --step`` for a step the trace lacks drew the median step (exit 0). missing_step
    says why, naming the steps with blocks (1, 2, 3 by construction: steps_trace); None where a timeline has it."""
    result, _ = steps
    for step in (99999, -1, 0):
        assert tl.missing_step(step, [result]) == (
            f"no step {step} in the trace (steps with attention blocks: 1, 2, 3)")
    assert [tl.missing_step(s, [result]) for s in (1, 2, 3)] == [None, None, None]
    many, _ = steps_trace(tmp_path / "many.pt.trace.json", {s: 1 for s in range(1, 41)}, gap=10)
    many_res = tracekit.analyze(many, jobs=1)
    assert tl.missing_step(99, [many_res, result]) == (
        "no step 99 in any trace (steps with attention blocks: 1, 2, 3, 4, 5, 6, 7, …, 40: 40 steps)")
    assert tl.missing_step(40, [result, many_res]) is None  # (one of a sweep's runs, or a diff's sides, has it)
    b = TraceBuilder()
    attention_block(b, 0)
    flat = tracekit.analyze(b.write(tmp_path / "nosteps.pt.trace.json"), jobs=1)
    assert tl.missing_step(1, [flat]) == "no step 1 in the trace (attention blocks in no ProfilerStep)"


def test_kernels_gaps_and_host_spans_are_where_the_trace_put_them(steps):
    """Step 3's blocks start at t0 = 901 and 1101 µs (step 3 opens at 200 + 50 + 600 + 50 = 900) (the trace's
    first event is at 0): each has six device events at t0 + KERNELS, idle gaps filling its window between them
    (105 µs in all: 100 before the first kernel, five of 1 µs), and a host span, its 60 µs annotation, on the one
    host thread."""
    result, starts = steps
    t = tl.timeline(result)
    t0s = [starts[(3, 0)], starts[(3, 1)]]
    assert [(b.start_us, b.end_us) for b in t.blocks] == [(s, s + 136) for s in t0s]
    want = sorted((s + o, s + o + d, bi) for bi, s in enumerate(t0s) for o, d in KERNELS)
    k = t.kernels
    assert _flat(sorted(zip(k["start"], k["end"], k["block"]))) == pytest.approx(_flat(want))
    assert [t.lanes[x].kind for x in set(k["lane"])] == [LaneKind.STREAM]
    g = t.gaps
    for bi, s in enumerate(t0s):
        mine = [(a, e) for a, e, b in zip(g["start"], g["end"], g["block"]) if b == bi]
        assert _flat(mine) == pytest.approx(_flat([(s, s + 100), (s + 101, s + 102), (s + 112, s + 113),
                                                   (s + 115, s + 116), (s + 121, s + 122), (s + 125, s + 126)]))
    for i, (a, e) in enumerate(zip(g["start"], g["end"])):
        assert sum(g[c][i] for c in IDLE_CAUSES) == pytest.approx(e - a)
    assert _flat(zip(t.host["start"], t.host["end"])) == pytest.approx(_flat((s, s + 60) for s in t0s))
    assert t.lanes[0].kind == LaneKind.HOST and t.host["lane"] == [0, 0]  # host lanes come first
    assert (t.start_us, t.end_us) == pytest.approx((900, 900 + 400))  # step 3's ProfilerStep window


def test_a_trace_without_steps_draws_every_block(tmp_path):
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    for i in range(3):
        attention_block(b, 300 * i, name=f"layer{i}.attention")
    t = tl.timeline(tracekit.analyze(b.write(tmp_path / "nosteps.pt.trace.json"), jobs=1))
    t.check()
    assert (t.step, t.chosen, t.steps, len(t.blocks)) == (None, StepChoice.ALL, [], 3)
    assert (t.start_us, t.end_us) == pytest.approx((0, 600 + 136))


def test_kernels_past_the_cap_are_counted_not_drawn(steps, monkeypatch):
    monkeypatch.setattr(tl, "MAX_KERNELS", 7)
    t = tl.timeline(steps[0])
    t.check()
    assert (len(t.kernels["start"]), t.left_out) == (7, 12 - 7)


@pytest.mark.parametrize("column,index,value", [("kernels", "start", -50.0), ("gaps", "end", 1e9),
                                               ("host", "lane", 1)])
def test_check_refuses_a_piece_out_of_place(steps, column, index, value):
    t = tl.timeline(steps[0])
    getattr(t, column)[index][0] = value
    with pytest.raises(InvariantError):
        t.check()


def test_every_report_kind_embeds_its_timelines(steps, tmp_path):
    result, _ = steps
    single = report_data(result, "t")["result"]
    assert single["timeline"]["step"] == 3 and len(single["timeline"]["blocks"]) == 2
    assert [b["index"] for b in single["timeline"]["blocks"]] == [i for i, b in enumerate(single["blocks"])
                                                                  if b["step"] == 3]
    other, _ = steps_trace(tmp_path / "other.pt.trace.json", {1: 2, 2: 2})
    d = report_data(tracekit.diff(result, tracekit.analyze(other, jobs=1)), "t", step=1)["result"]
    assert (d["timelines"]["before"]["step"], d["timelines"]["after"]["step"]) == (1, 1)
    assert d["timelines"]["before"]["requested"] == 1


@pytest.mark.real
@pytest.mark.skipif(not (SWEEP / "eager_4096").is_dir(), reason="the H200 sweep is not there")
def test_h200_kernels_are_the_raw_json_events():
    """eager_4096: every drawn kernel is a device event of the raw JSON at the same name, time and duration
    (relative to the earliest ts), and each block draws as many as the JSON's block says it owns."""
    path = next((SWEEP / "eager_4096").glob("*.json.gz"))
    result = tracekit.analyze(path, jobs=1)
    t = tl.timeline(result)
    t.check()
    raw = read_events(path)
    origin = result.traces[0].origin_ns  # integer ns: the file's ts carry three decimals of µs
    events = {(e["name"], round(e["ts"] * 1000) - origin, round(e["dur"] * 1000)) for e in raw
              if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    k = t.kernels
    drawn = [(t.names[n], round(s * 1000), round(e * 1000) - round(s * 1000))
             for s, e, n in zip(k["start"], k["end"], k["name"])]
    assert drawn and all(x in events for x in drawn)
    assert [k["block"].count(i) for i in range(len(t.blocks))] == [b.kernels for b in t.blocks]
    # The step: the lower middle by the host ProfilerStep#N span; its blocks: the layer annotations inside it.
    steps = {int(e["name"].split("#")[1]): e for e in raw
             if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")}
    ranked = sorted(steps, key=lambda n: (steps[n]["dur"], n))
    want = ranked[(len(ranked) - 1) // 2]
    win = steps[want]
    layers = sorted(e["name"] for e in raw if e.get("cat") == "user_annotation" and e["name"].endswith(".attention")
                    and win["ts"] <= e["ts"] <= win["ts"] + win["dur"])
    assert t.step == want and sorted(b.name for b in t.blocks) == layers and layers


def test_a_sweep_shares_the_page_kernel_budget(steps, monkeypatch):
    """run_cap: the page's budget split between runs, never under the floor nor over one timeline's cap; a
    timeline drawn at a cap counts the rest (12 kernels in step 3, at a cap of 5: 7 left out)."""
    monkeypatch.setattr(tl, "PAGE_KERNELS", 100)
    monkeypatch.setattr(tl, "MIN_RUN_KERNELS", 5)
    monkeypatch.setattr(tl, "MAX_KERNELS", 40)
    assert [tl.run_cap(n) for n in (1, 2, 3, 20, 40)] == [40, 40, 33, 5, 5]
    t = tl.timeline(steps[0], cap=5)
    t.check()
    assert (len(t.kernels["start"]), t.left_out, t.cap) == (5, 7, 5)


_COL = {c: 2 + k for k, c in enumerate(IDLE_CAUSES)}  # an IdleGaps row: start, end, then ns per cause


def _gaps_of(block, rows):
    from array import array

    from tracekit.results.attribution import IdleGaps
    o = block.idle_gaps.origin_ns
    return IdleGaps(origin_ns=o, flat=array("q", [v for r in rows for v in r]))


@pytest.mark.parametrize("fault", ["order", "overlap", "empty", "before", "outside", "negative", "sum", "total"])
def test_idle_gaps_check_refuses_a_bad_gap(steps, fault):
    """A block of attention_block: idle gaps at +0..100 and five of 1 µs (ns below, from its start, absolute via
    the trace origin); each fault breaks one rule of IdleGaps.check, and the untouched rows pass."""
    result, _ = steps
    b = next(x for x in result.blocks if x.idle_gaps is not None and len(x.idle_gaps))
    w, f = GAP_STRIDE, b.idle_gaps.flat
    rows = [list(r) for r in (f[i:i + w] for i in range(0, len(f), w))]
    # the gap at +0..100 is launch then queued (the kernel was launched at +2): balance faults against queued
    assert rows[0][_COL["queued"]] > 2000
    _gaps_of(b, rows).check(b, "ok")
    g = [list(r) for r in rows]
    if fault == "order":
        g[0], g[1] = g[1], g[0]
    elif fault == "overlap":
        g[1][0] = g[0][1] - 1  # starts before the previous gap ends (its causes still sum)
        g[1][_COL["queued"]] += 1
    elif fault == "empty":  # a zero-length gap where the first ends: in order, its causes (none) sum
        g.insert(1, [g[0][1], g[0][1]] + [0] * len(IDLE_CAUSES))
    elif fault == "before":  # the first gap moved 1 ms earlier, before the window opens
        g[0][0] -= 10**6
        g[0][1] -= 10**6
    elif fault == "outside":  # the last gap moved 1 ms later, past the window: same length, same causes
        g[-1][0] += 10**6
        g[-1][1] += 10**6
    elif fault == "negative":  # gap 1's launch set to −5 ns and gap 0's raised to match (others balancing each)
        q = _COL["queued"]
        moved = g[1][2] + 5
        g[1][2], g[1][q] = -5, g[1][q] + moved
        g[0][2], g[0][q] = g[0][2] + moved, g[0][q] - moved  # gap 0: 100 µs, its queued has room
    elif fault == "sum":
        g[0][_COL["other"]] += 1
    elif fault == "total":  # every gap sound, but 1 µs of queued moves to launch: the block's causes disagree
        g[0][2] += 1000
        g[0][_COL["queued"]] -= 1000
    with pytest.raises(InvariantError):
        _gaps_of(b, g).check(b, "bad")


SAMPLE = ROOT / "sample_traces" / "cpu_eager_256.pt.trace.json.gz"


def test_a_cpu_trace_draws_its_ops_on_their_threads():
    """A CPU-only trace has no kernels: the timeline's kernels are the blocks' host ops with self time, on host
    lanes, each a raw JSON event of the trace (name, ts, dur in ns from the earliest ts), inside its block."""
    result = tracekit.analyze(SAMPLE, jobs=1)
    t = tl.timeline(result)
    t.check()
    assert t.kernel_lane == LaneKind.HOST and {t.lanes[x].kind for x in t.kernels["lane"]} == {LaneKind.HOST}
    raw = read_events(SAMPLE)
    origin = result.traces[0].origin_ns
    events = {(e["name"], round(e["ts"] * 1000) - origin, round(e["dur"] * 1000)) for e in raw if e.get("ph") == "X"}
    k = t.kernels
    drawn = [(t.names[n], round(s * 1000), round(e * 1000) - round(s * 1000))
             for s, e, n in zip(k["start"], k["end"], k["name"])]
    assert len(drawn) > 20 and all(x in events for x in drawn)
    for s, e, b in zip(k["start"], k["end"], k["block"]):
        assert t.blocks[b].start_us - 1e-3 <= s <= e <= t.blocks[b].end_us + 1e-3
    # every category a block counts host time in (but "other", which module time outside ops also fills) has
    # an op of that category drawn in the block
    for bi, b in enumerate(t.blocks):
        drawn_cats = {CATEGORIES[c] for c, x in zip(k["cat"], k["block"]) if x == bi}
        assert {c for c, us in b.categories.items() if us > 0 and c != "other"} <= drawn_cats


def test_a_device_trace_keeps_no_host_ops(steps):
    assert all(b.host_ops is None for b in steps[0].blocks)
    assert tl.timeline(steps[0]).kernel_lane == LaneKind.STREAM
