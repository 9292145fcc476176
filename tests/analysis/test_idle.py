"""Idle inside a block, by cause (issue 24): launch, sync, other, summing to the block's idle time.

Hand-built traces put every launch call, sync call and kernel at a known µs, so each expected split is worked out by
hand in the test (the comments show the gaps). The H200 sweep traces are checked against a walk of the raw JSON here,
with its own reading of the rule (docs/attribution.md, "Idle by cause"), not through tracekit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import CPU_PID, TID, TraceBuilder, capture, graph_launch, host_core, replay_kernels
from support.paths import GRAPHS, REAL, SAMPLES
from support.traces import read_events

from tracekit import analyze
from tracekit.analysis.idle import SYNC_CALL_RULES, holds_host
from tracekit.renderers import JSONRenderer, TerminalRenderer
from tracekit.results.attribution import InvariantError
from tracekit.vocab import IDLE_CAUSES, IdleCause
from tracekit.analysis.idle import (
    AFTER, BEFORE, IDLE_RULES, NO_CALL, TAIL, IdleSplitter, _covered, _Intervals, sync_rule,
)
from tracekit.model import DeviceEvent, GraphLaunch, RuntimeEvent, Trace, TraceInfo

SWEEP = REAL.parent / "h200" / "sweep"
requires_h200 = pytest.mark.skipif(not SWEEP.is_dir(), reason=f"H200 sweep traces not present at {SWEEP}")
GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
COPY = "Memcpy DtoH (Device -> Pageable)"


def _call(b: TraceBuilder, name: str, ts: float, dur: float, tid: int = TID) -> None:
    """A runtime call that launches nothing (a sync, an async copy without its device event, a stream wait)."""
    b._x("cuda_runtime", name, ts, dur, CPU_PID, tid, correlation=0)


def _base(b: TraceBuilder, second_call: float = 31) -> None:
    """Host range 0..60; kernel 10..20 launched at 2; kernel 35..40 launched at ``second_call``.

    Idle 45 (span 60, busy 15): gap 0..10 (launch 0..2, other 2..10), gap 20..35 (launch 20..31, other 31..35),
    tail 40..60 (other)."""
    b.annotation("layer0.attention", 0, 60)
    b.op("aten::bmm", 1, 8)
    b.launch(GEMM, 2, 1, 10, 10)
    host_core(b, 20)
    b.op("aten::bmm", 30, 8)
    b.launch(GEMM, second_call, 2, 35, 5)


def _block(tmp_path: Path, b: TraceBuilder):
    res = analyze(b.write(tmp_path / "t.json")).check()
    [blk] = res.blocks
    return res, blk


def _c(**ns: float) -> dict[str, float]:
    """Every cause, in IDLE_CAUSES order: the given ones, the rest 0."""
    assert set(ns) <= set(IDLE_CAUSES)
    return {c: ns.get(c, 0) for c in IDLE_CAUSES}


def _split(blk) -> dict[str, float]:
    return pytest.approx(blk.idle_by_cause, abs=1e-9)


def test_launch_wait_ends_at_the_launch_call_then_queued_and_the_tail_is_the_host_op(tmp_path):
    b = TraceBuilder()
    _base(b)
    res, blk = _block(tmp_path, b)
    assert blk.idle_us == pytest.approx(45)
    assert _c(launch=13, queued=12, host_op=20) == _split(blk)  # launch 2 + 11; queued 8 + 4; the range's tail 20
    assert list(blk.idle_by_cause) == list(IDLE_CAUSES)
    assert res.totals.idle_by_cause == pytest.approx(_c(launch=13, queued=12, host_op=20))


def test_sync_on_the_launching_thread_before_the_launch_and_in_the_tail(tmp_path):
    b = TraceBuilder()
    _base(b)
    _call(b, "cudaStreamSynchronize", 18, 6)  # holds the host until 24: gap 20..31 before the launch → sync 20..24
    _call(b, "cudaStreamSynchronize", 25, 4, tid=2)  # another thread: not the launching one
    _call(b, "cudaMemcpyAsync", 26, 2)  # returns once queued: holds nothing
    _call(b, "cudaStreamWaitEvent", 29, 1)  # a device-side wait: holds nothing on the host
    _call(b, "cudaStreamSynchronize", 32, 2)  # after the launch was issued (31): other, not sync
    _call(b, "cudaDeviceSynchronize", 45, 5)  # in the tail 40..60, on the block's thread → sync 45..50
    _call(b, "cudaDeviceSynchronize", 52, 3, tid=2)  # the tail, another thread
    _, blk = _block(tmp_path, b)
    # launch 2 (0..2) + 7 (24..31); sync 4 + 5; queued 8 (2..10); 31..35 behind the stream wait queued at 29 (the
    # thread's last call before the launch at 31): event_wait 4; the tail less 45..50: host_op 15
    assert _c(launch=9, sync=9, queued=8, event_wait=4, host_op=15) == _split(blk)


def test_a_sync_that_covers_the_wait_takes_precedence_over_launch(tmp_path):
    b = TraceBuilder()
    _base(b)
    _call(b, "cudaDeviceSynchronize", 15, 13)  # 15..28: the host was held for 20..28 of the 20..31 wait
    _, blk = _block(tmp_path, b)
    assert _c(launch=2 + 3, sync=8, queued=12, host_op=20) == _split(blk)


def test_a_blocking_copy_holds_the_host_until_it_returns(tmp_path):
    """The copy's call (31..41) is its own launch: 31..35 is other (issued, not started); after the copy ends (40)
    the host is still in the call until 41, then launches the next kernel at 43."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 60)
    b.op("aten::bmm", 1, 8)
    b.launch(GEMM, 2, 1, 10, 10)
    host_core(b, 20)
    b.op("aten::copy_", 30, 12)
    b.launch(COPY, 31, 10, 35, 5, kind="gpu_memcpy", launch_name="cudaMemcpy")
    b.op("aten::bmm", 42, 4)
    b.launch(GEMM, 43, 1, 45, 5)
    _, blk = _block(tmp_path, b)
    assert blk.idle_us == pytest.approx(40)  # span 60, busy 10 + 5 + 5
    # gap 0..10: launch 2, queued 8; gap 20..35: launch 11, queued 4; gap 40..45: sync 40..41, launch 41..43,
    # queued 2; tail 50..60: host_op 10 (the annotation still runs)
    assert _c(launch=15, sync=1, queued=14, host_op=10) == _split(blk)


def test_kernels_on_two_streams_the_earliest_launch_of_those_that_end_a_gap(tmp_path):
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 60)
    b.op("aten::bmm", 1, 8)
    b.launch(GEMM, 2, 1, 10, 10)
    b.launch(GEMM, 5, 1, 15, 10, stream=8)  # busy 10..25 on the two streams together
    host_core(b, 20)
    b.launch(GEMM, 26, 1, 27, 0)  # a 0 µs event ends no gap
    b.op("aten::bmm", 30, 8)
    b.launch(GEMM, 33, 1, 35, 5)
    b.launch(GEMM, 31, 1, 35, 3, stream=8)  # starts with it, launched earlier: the wait ends at 31
    _, blk = _block(tmp_path, b)
    assert blk.idle_us == pytest.approx(40)  # span 60, busy 15 + 5
    # gap 0..10: launch 2, queued 8; gap 25..35: launch 25..31, queued 31..35; tail 40..60: host_op 20 (every
    # kernel is the block's: none runs elsewhere)
    assert _c(launch=8, queued=12, host_op=20) == _split(blk)


def test_replayed_kernels_wait_on_their_graph_launch_not_on_the_captured_copies(tmp_path):
    """The replay's copies of the captured launches carry the capture's times (here 13 and 22 µs after the graph
    launch, inside the 1 µs gaps between the replayed kernels): read as launches, they would make both gaps launch
    waits. The graph launch (at L) was issued before the replay began: both gaps are queued."""
    b = TraceBuilder()
    t = capture(b, 0, 1)
    launch_at = t + 900
    ks, _ = replay_kernels(launch_at + 1, 1)  # 10, 5 and 8 µs kernels from L + 1, 1 µs apart
    graph_launch(b, launch_at, ks)
    res = analyze(b.write(tmp_path / "g.json")).check()
    [blk] = [x for x in res.blocks if x.kernels]
    assert blk.span_us == pytest.approx(25) and blk.idle_us == pytest.approx(2)
    assert _c(queued=2) == _split(blk)


def test_cpu_only_blocks_have_every_cause_zero():
    res = analyze(SAMPLES / "cpu_eager_256.pt.trace.json.gz").check()
    assert res.blocks
    for blk in res.blocks:
        assert blk.idle_by_cause == _c()
    assert res.totals.idle_by_cause == _c()
    text = TerminalRenderer().render(res)
    assert "idle by cause" not in text


def test_json_and_terminal_show_the_split(tmp_path):
    b = TraceBuilder()
    _base(b)
    res, _ = _block(tmp_path, b)
    out = json.loads(JSONRenderer().render(res))
    want = {f"{c}_us": float(v) for c, v in _c(launch=13, queued=12, host_op=20).items()}
    assert out["blocks"][0]["idle_by_cause"] == want
    assert out["totals"]["idle_by_cause"] == want
    assert list(want)[:2] == ["launch_us", "sync_us"] and "other_us" in want  # the keys of issue 24 stay
    text = TerminalRenderer().render(res)
    # 13 / 45, 12 / 45, 20 / 45; the finer causes only where they took time, launch, sync and other always
    assert "idle by cause: launch 29% · sync 0% · queued 27% · host op 44% · other 0%" in text


def test_check_rejects_causes_that_do_not_sum_to_idle(tmp_path):
    b = TraceBuilder()
    _base(b)
    res, blk = _block(tmp_path, b)
    blk.idle_by_cause["launch"] += 1
    with pytest.raises(InvariantError, match="idle causes sum"):
        res.check()
    blk.idle_by_cause["launch"] -= 1
    res.check()
    tc = res.totals.idle_by_cause
    assert tc is not None
    tc["other"] += 1
    with pytest.raises(InvariantError, match="totals: idle causes sum"):
        res.check()
    tc["other"] -= 1
    tc["launch"], tc["queued"] = tc["launch"] + 1, tc["queued"] - 1  # still summing to idle, not the blocks' sums
    with pytest.raises(InvariantError, match="totals.idle_by_cause.launch is not the sum of blocks"):
        res.check()
    tc["launch"], tc["queued"] = tc["launch"] - 1, tc["queued"] + 1
    tc["host_op"], tc["queued"] = tc["host_op"] - 1, tc["queued"] + 1  # a new key counts like the old ones
    with pytest.raises(InvariantError, match="totals.idle_by_cause.queued is not the sum of blocks"):
        res.check()
    tc["host_op"], tc["queued"] = tc["host_op"] + 1, tc["queued"] - 1
    res.check()
    blk.idle_by_cause["sync"], blk.idle_by_cause["other"] = -1.0, blk.idle_by_cause["other"] + 1
    with pytest.raises(InvariantError, match="negative idle cause"):
        res.check()


@pytest.mark.parametrize("name,holds", [
    ("cudaDeviceSynchronize", True), ("hipDeviceSynchronize", True), ("cuCtxSynchronize", True),
    ("cudaStreamSynchronize", True), ("hipStreamSynchronize", True), ("cudaStreamSynchronize_ptsz", True),
    ("cudaEventSynchronize", True), ("hipEventSynchronize", True), ("cudaMemcpy", True), ("hipMemcpy", True),
    ("hipMemcpyWithStream", True), ("cuMemcpyDtoH_v2", True), ("cudaMemcpy2D", True), ("cudaFree", True),
    ("hipFree", True), ("cudaMemcpyAsync", False), ("hipMemcpyAsync", False), ("cuMemcpyDtoHAsync_v2", False),
    ("cudaMemsetAsync", False), ("cudaStreamWaitEvent", False), ("hipStreamWaitEvent", False),
    ("cudaLaunchKernel", False), ("cuLaunchKernelEx", False), ("cudaGraphLaunch", False), ("cudaEventQuery", False),
    ("cudaEventRecord", False), ("cudaMemset", False),
])
def test_which_calls_hold_the_host(name, holds):
    assert holds_host(name) is holds


def test_sync_rules_are_named_data_with_reasons():
    names = [r.name for r in SYNC_CALL_RULES]
    assert len(names) == len(set(names)) and all(r.why for r in SYNC_CALL_RULES)
    assert [c.value for c in IdleCause] == list(IDLE_CAUSES)
    assert IDLE_CAUSES == ("launch", "sync", "elsewhere", "event_wait", "queued", "host_op", "other")


# ---------------------------------------------------------------------------------------------------------------
# The H200 sweep, against a walk of the raw JSON

HOLDING = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaFree"}
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def _events(name: str) -> list[dict]:
    [path] = sorted((SWEEP / name).glob("*.json.gz"))
    return read_events(path)


def _held(spans: list[tuple[float, float]], a: float, b: float) -> float:
    """µs of [a, b) inside the (possibly overlapping) intervals."""
    total, end = 0.0, a
    for s, e in sorted(spans):
        s = max(s, end)
        if min(e, b) > s:
            total += min(e, b) - s
            end = min(e, b)
    return total


def _walk(events: list[dict], name: str, nth: int) -> dict[str, float]:
    """The ``nth`` ``name`` range's idle split, from the JSON: its kernels (launched from its thread inside it), its
    window (host start, or when the device came free, to the last end), then each gap in start order."""
    ranges = sorted((e for e in events if e.get("cat") == "user_annotation" and e["name"] == name),
                    key=lambda e: e["ts"])
    a = ranges[nth]
    h0, h1, tid = a["ts"], a["ts"] + a["dur"], a["tid"]
    calls = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    first_call: dict[int, dict] = {}
    for e in calls:
        first_call.setdefault(e["args"].get("correlation"), e)
    mine_corr = {e["args"]["correlation"] for e in calls
                 if e["tid"] == tid and h0 <= e["ts"] <= e["ts"] + e["dur"] <= h1}
    dev = [e for e in events if e.get("cat") in DEVICE_CATS]
    mine = sorted((e for e in dev if e["args"].get("correlation") in mine_corr), key=lambda e: e["ts"])
    others = [(e["ts"], e["ts"] + e["dur"]) for e in dev if e["args"].get("correlation") not in mine_corr]
    d0, d1 = mine[0]["ts"], max(e["ts"] + e["dur"] for e in mine)
    free = max((e["ts"] + e["dur"] for e in dev if e["ts"] < d0), default=None)
    start = d0 if h0 >= d0 else max(h0, min(free, d0) if free is not None else h0)
    end = max(d1, h1)
    holds = [(e["ts"], e["ts"] + e["dur"]) for e in calls if e["tid"] == tid and e["name"] in HOLDING]
    launches = {first_call[e["args"]["correlation"]]["ts"] for e in dev if e["args"].get("correlation") in first_call}
    order = sorted([(e["ts"], e["name"] == "cudaStreamWaitEvent") for e in calls if e["tid"] == tid
                    and (e["name"] == "cudaStreamWaitEvent" or e["ts"] in launches)])
    out = dict.fromkeys(IDLE_CAUSES, 0.0)
    cur = start
    for e in mine:
        if e["dur"] <= 0:
            continue
        if e["ts"] > cur:
            issued = min(first_call[x["args"]["correlation"]]["ts"] for x in mine
                         if x["ts"] == e["ts"] and x["dur"] > 0)
            cut = min(max(issued, cur), e["ts"])
            s = _held(holds, cur, cut)
            out["sync"] += s
            out["launch"] += cut - cur - s
            busy = _held(others, cut, e["ts"])
            out["elsewhere"] += busy
            before = [w for ts, w in order if ts < issued]
            out["event_wait" if before and before[-1] else "queued"] += e["ts"] - cut - busy
        cur = max(cur, e["ts"] + e["dur"])
    if end > cur:  # the tail: held, then other device work, then the range itself
        s = _held(holds, cur, end)
        busy = _held(holds + others, cur, end) - s
        host = _held(holds + others + [(h0, h1)], cur, end) - s - busy
        out["sync"] += s
        out["elsewhere"] += busy
        out["host_op"] += host
        out["other"] += end - cur - s - busy - host
    out["idle"] = end - start - sum(e["dur"] for e in mine)  # (one stream: the kernels never overlap)
    out["start"], out["end"] = start, end
    return out


@requires_h200
@pytest.mark.parametrize("trace", ["eager_512", "eager_4096"])
def test_sweep_split_matches_a_walk_of_the_raw_json(trace):
    events = _events(trace)
    res = analyze(next((SWEEP / trace).glob("*.json.gz"))).check()
    seen: dict[str, int] = {}
    for blk in res.blocks:  # blocks come in step and layer order, as the ranges do
        nth = seen[blk.name] = seen.get(blk.name, -1) + 1
        ref = _walk(events, blk.name, nth)
        assert blk.idle_us == pytest.approx(ref["idle"], abs=0.02)
        for c in IDLE_CAUSES:
            assert blk.idle_by_cause[c] == pytest.approx(ref[c], abs=0.02), (blk.name, nth, c)
    if trace == "eager_512":  # launch-bound: the device waits for the host to launch most of its idle time
        assert all(blk.idle_by_cause["launch"] > 0.7 * blk.idle_us for blk in res.blocks)


@requires_h200
def test_a_host_held_in_a_sync_after_launching_is_not_sync_idle():
    """eager_4096: the host launches a whole step, then waits 36 ms in cudaDeviceSynchronize while the device runs
    it. The gaps between those kernels fall inside that call, yet their launches were long issued: other, not sync."""
    events = _events("eager_4096")
    res = analyze(next((SWEEP / "eager_4096").glob("*.json.gz"))).check()
    syncs = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "cudaDeviceSynchronize"]
    later = [blk for blk in res.blocks if blk.name != "layer0.attention"]
    assert len(later) == 6
    seen: dict[str, int] = {}
    for blk in later:
        nth = seen[blk.name] = seen.get(blk.name, -1) + 1
        ref = _walk(events, blk.name, nth)
        assert any(s <= ref["start"] and ref["end"] <= e for s, e in syncs)  # the whole window inside one sync call
        assert blk.idle_us > 20
        assert blk.idle_by_cause["sync"] == 0 and blk.idle_by_cause["queued"] == pytest.approx(blk.idle_us)


# ---------------------------------------------------------------------------------------------
# The smallest pieces: a thread's sync calls merged into disjoint intervals, those clipped to a window, the union of
# several threads' intervals, and IdleSplitter.split on a Trace built by hand (integer ns). Every expectation is
# interval arithmetic worked out in the comments

# -- _Intervals: merging ------------------------------------------------------------------------------------------


def _spans(iv: _Intervals) -> list[tuple[int, int]]:
    return list(zip(iv.starts, iv.ends))


def test_overlapping_and_touching_spans_merge_into_one():
    """(0,10) and (5,15) overlap; (15,20) starts where they end: one interval 0..20, however they are ordered."""
    iv = _Intervals([(15, 20), (5, 15), (0, 10)])
    assert _spans(iv) == [(0, 20)]
    assert iv.pieces(0, 100) == [(0, 20)]  # one piece, not three


def test_a_span_inside_another_keeps_the_outer_end():
    """(0,20) holds (5,10): the merged end stays 20, and a later disjoint span (30,40) stays apart."""
    iv = _Intervals([(5, 10), (30, 40), (0, 20)])
    assert _spans(iv) == [(0, 20), (30, 40)]


def test_disjoint_spans_stay_apart_sorted_by_start():
    """A 1 ns hole between 10 and 11: two intervals."""
    iv = _Intervals([(11, 12), (0, 10)])
    assert _spans(iv) == [(0, 10), (11, 12)]
    assert _Intervals([]).pieces(0, 10) == []


# -- _Intervals.pieces: clipping to [a, b) -----------------------------------------------------------------------

IV3 = [(0, 10), (20, 30), (40, 50)]


@pytest.mark.parametrize("a,b,want", [
    (5, 45, [(5, 10), (20, 30), (40, 45)]),  # first and last clipped, the middle whole
    (0, 50, IV3),  # the exact bounds: nothing clipped
    (3, 8, [(3, 8)]),  # inside the first interval (it starts before a)
    (25, 26, [(25, 26)]),  # inside a middle one
    (10, 20, []),  # exactly a hole: the touching ends give empty pieces, which are left out
    (12, 18, []),  # inside a hole
    (45, 60, [(45, 50)]),  # past the last start
    (-5, 5, [(0, 5)]),  # a window that opens before the first interval
    (30, 41, [(40, 41)]),  # opens where an interval ends
])
def test_pieces_clip_the_intervals_to_the_window(a, b, want):
    assert _Intervals(IV3).pieces(a, b) == want


# -- _covered: several threads, each instant once -----------------------------------------------------------------


def test_covered_counts_overlapping_threads_once():
    """Thread A 0..10 and 20..25, thread B 5..15: the union inside 0..30 is 0..15 and 20..25 = 15 + 5 = 20 ns."""
    a, b = _Intervals([(0, 10), (20, 25)]), _Intervals([(5, 15)])
    assert _covered([a, b], 0, 30) == 20
    assert _covered([b, a], 0, 30) == 20  # the order of the threads does not matter


def test_covered_clips_to_the_window():
    """The same threads inside 7..22: 7..15 and 20..22 = 8 + 2 = 10 ns."""
    a, b = _Intervals([(0, 10), (20, 25)]), _Intervals([(5, 15)])
    assert _covered([a, b], 7, 22) == 10


def test_covered_nested_across_threads():
    """A 0..20 holds B 5..10 and C 8..30: the union inside 0..40 is 0..30 = 30 ns (B adds nothing, C 10)."""
    lists = [_Intervals([(0, 20)]), _Intervals([(5, 10)]), _Intervals([(8, 30)])]
    assert _covered(lists, 0, 40) == 30


def test_covered_of_disjoint_threads_is_their_sum():
    """A 0..4, B 6..9 inside 2..8: 2..4 and 6..8 = 4 ns."""
    assert _covered([_Intervals([(0, 4)]), _Intervals([(6, 9)])], 2, 8) == 4


def test_covered_single_thread_and_empty_cases():
    """One thread: the sum of its clipped pieces (0..10, 20..30 inside 5..25: 5 + 5); no window or no thread: 0."""
    one = _Intervals([(0, 10), (20, 30)])
    assert _covered([one], 5, 25) == 10
    assert _covered([one], 25, 5) == 0  # a window that ends before it starts
    assert _covered([one, _Intervals([(0, 30)])], 9, 9) == 0  # an empty window
    assert _covered([], 0, 30) == 0


# -- sync_rule ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,rule", [
    ("cudaMemcpyAsync", "async-call"),  # the first rule wins over blocking-copy, which would also match
    ("cudaDeviceSynchronize", "device-sync"),
    ("cudaStreamSynchronize_ptsz", "stream-sync"),
    ("hipEventSynchronize", "event-sync"),
    ("cudaStreamWaitEvent", "stream-wait-event"),
    ("cudaMemcpy", "blocking-copy"),
    ("cudaFree", "free"),
    ("cudaLaunchKernel", None),
    ("xcudaDeviceSynchronize", None),  # a full match, not a search
])
def test_sync_rule_is_the_first_full_match(name, rule):
    got = sync_rule(name)
    assert (got.name if got is not None else None) == rule


# -- IdleSplitter.split on a hand-built Trace (ns) ----------------------------------------------------------------

T0, T1 = 0, 1  # host threads


def _trace(runtime: list[RuntimeEvent], device: list[DeviceEvent]) -> Trace:
    return Trace(info=TraceInfo(source="hand"), runtime=runtime, device=device)


def _rt(name: str, thread: int, ts: int, dur: int, corr: int) -> RuntimeEvent:
    return RuntimeEvent(name=name, thread=thread, ts=ts, dur=dur, correlation=corr, ext_id=0)


def _k(ts: int, dur: int, corr: int) -> DeviceEvent:
    return DeviceEvent(kind="kernel", name="k", stream=0, ts=ts, dur=dur, correlation=corr, ext_id=0)


def test_split_gap_before_and_after_the_launch_call():
    """Window 0..100. Kernel A 10..20 (launched at 4), kernel B 50..60 (launched at 30, thread 0, which sat in a
    stream sync 25..28 and a device sync 27..29: merged 25..29). Gaps: 0..10 = launch 4 + other 6; 20..50: before
    the call at 30, 20..30 holds sync 25..29 = 4 and launch 6, then other 30..50 = 20; tail 60..100: thread 0's sync
    calls lie before it, so other 40. Sums: launch 10, sync 4, other 66 = 100 - 20 busy."""
    rt = [_rt("cudaLaunchKernel", T0, 4, 1, 1), _rt("cudaStreamSynchronize", T0, 25, 3, 0),
          _rt("cudaDeviceSynchronize", T0, 27, 2, 0), _rt("cudaLaunchKernel", T0, 30, 1, 2)]
    sp = IdleSplitter(_trace(rt, [_k(10, 10, 1), _k(50, 10, 2)]))
    assert sp.split([0, 1], 0, 100, [T0]) == _c(launch=10, sync=4, queued=26, other=40)


def test_split_tail_sync_is_the_union_of_the_block_threads():
    """One kernel 0..10 (launched at -5, so no launch gap), window 0..50; tail 10..50. Thread 0 syncs 12..30,
    thread 1 syncs 20..40 (a third thread 2 syncs 40..50 but is not the block's): tail sync = 12..40 = 28, other
    12. A cudaLaunchKernel of 0 µs is not a sync, nor is a holding call of 0 duration."""
    rt = [_rt("cudaLaunchKernel", T0, -5, 1, 1), _rt("cudaStreamSynchronize", T0, 12, 18, 0),
          _rt("cudaDeviceSynchronize", T1, 20, 20, 0), _rt("cudaDeviceSynchronize", 2, 40, 10, 0),
          _rt("cudaDeviceSynchronize", T0, 11, 0, 0)]
    sp = IdleSplitter(_trace(rt, [_k(0, 10, 1)]))
    assert sp.split([0], 0, 50, [T0, T1]) == _c(sync=28, other=12)
    assert sp.split([0], 0, 50, [T0]) == _c(sync=18, other=22)  # thread 0 alone: 12..30
    assert sp.split([0], 0, 50, []) == _c(other=40)


def test_split_kernels_starting_together_end_one_gap_at_the_earliest_call():
    """Two kernels start at 40 (launched at 30 on thread 1 and 20 on thread 0); the gap 0..40 is cut at the
    earliest call, 20: launch 20, other 20. Their ends (50, 45) leave the tail 50..60 = other 10."""
    rt = [_rt("cudaLaunchKernel", T1, 30, 1, 1), _rt("cudaLaunchKernel", T0, 20, 1, 2)]
    sp = IdleSplitter(_trace(rt, [_k(40, 10, 1), _k(40, 5, 2)]))
    assert sp.split([0, 1], 0, 60, [T0, T1]) == _c(launch=20, queued=20, other=10)


def test_split_overlapping_kernels_cover_to_the_furthest_end():
    """Kernel A 10..40, kernel B 20..30 inside it, kernel C 50..55; all launched before the window. Covered to 40
    (not 30), so the gaps are 0..10 and 40..50 (other: each kernel's call was issued) and the tail 55..60."""
    rt = [_rt("cudaLaunchKernel", T0, -9, 1, 1), _rt("cudaLaunchKernel", T0, -8, 1, 2),
          _rt("cudaLaunchKernel", T0, -7, 1, 3)]
    sp = IdleSplitter(_trace(rt, [_k(10, 30, 1), _k(20, 10, 2), _k(50, 5, 3)]))
    assert sp.split([0, 1, 2], 0, 60, [T0]) == _c(queued=20, other=5)


def test_split_a_launch_call_after_the_kernel_started_is_clipped_to_the_gap():
    """A kernel at 10 whose only call is at 15 (clock skew): the whole gap 0..10 is launch. A kernel with no call
    in the trace (correlation 9): its gap is other. Empty events end no gap."""
    rt = [_rt("cudaLaunchKernel", T0, 15, 1, 1)]
    sp = IdleSplitter(_trace(rt, [_k(10, 5, 1), _k(30, 5, 9), _k(20, 0, 1)]))
    assert sp.split([0], 0, 15, [T0]) == _c(launch=10)
    # 0..10 launch; 15..30 ended by the call-less kernel: other 15; tail 35..40 (no host op given): other 5.
    assert sp.split([0, 1, 2], 0, 40, [T0]) == _c(launch=10, other=20)


def test_split_the_first_call_per_correlation_and_graph_launches():
    """Two calls share correlation 1 (at 8, then at 2): the linker takes the first in the trace, at 8, so 0..8 is
    launch and 8..10 other. A replayed kernel waits on its graph launch (at 30), not on its own correlation's call
    (at 1): 20..30 launch, 30..40 other."""
    rt = [_rt("cudaLaunchKernel", T0, 8, 1, 1), _rt("cudaLaunchKernel", T0, 2, 1, 1),
          _rt("cudaGraphLaunch", T0, 30, 1, 5), _rt("cudaLaunchKernel", T0, 1, 1, 7)]
    dev = [_k(10, 10, 1), _k(40, 10, 7)]
    sp = IdleSplitter(_trace(rt, dev), [GraphLaunch(runtime=2, device=[1])])
    assert sp.split([0, 1], 0, 50, [T0]) == _c(launch=18, queued=12)
    assert sp.call(1) == 2 and sp.call(0) == 0


def test_split_sync_before_the_call_counts_the_launching_thread_only():
    """Gap 0..20 ended by a kernel launched at 15 on thread 0. Thread 1 sat in a sync 0..15, thread 0 in one 5..8:
    only the launching thread's counts: sync 3, launch 12, other 5."""
    rt = [_rt("cudaDeviceSynchronize", T1, 0, 15, 0), _rt("cudaDeviceSynchronize", T0, 5, 3, 0),
          _rt("cudaLaunchKernel", T0, 15, 1, 1)]
    sp = IdleSplitter(_trace(rt, [_k(20, 5, 1)]))
    assert sp.split([0], 0, 25, [T0, T1]) == _c(launch=12, sync=3, queued=5)


def test_split_sync_adds_up_over_several_gaps():
    """Thread 0 syncs 2..5 and 22..24, and launches kernels at 8 (runs 10..15) and 26 (runs 30..35). Gap 0..10:
    sync 3, launch 8 - 3 = 5, other 2; gap 15..30: before the call at 26, sync 2 of 15..26 and launch 9, then
    other 4. Sums: launch 14, sync 5, other 6 (= 35 - 10 busy - 14 - 5)."""
    rt = [_rt("cudaDeviceSynchronize", T0, 2, 3, 0), _rt("cudaLaunchKernel", T0, 8, 1, 1),
          _rt("cudaStreamSynchronize", T0, 22, 2, 0), _rt("cudaLaunchKernel", T0, 26, 1, 2)]
    sp = IdleSplitter(_trace(rt, [_k(10, 5, 1), _k(30, 5, 2)]))
    assert sp.split([0, 1], 0, 35, [T0]) == _c(launch=14, sync=5, queued=6)


def test_split_one_ns_kernels_and_sync_calls_count():
    """A 1 ns kernel at 10 (launched at 4) ends the first gap: launch 4, other 6; the tail 11..20 holds a 1 ns
    sync call at 15: sync 1, other 8."""
    rt = [_rt("cudaLaunchKernel", T0, 4, 1, 1), _rt("cudaDeviceSynchronize", T0, 15, 1, 0)]
    sp = IdleSplitter(_trace(rt, [_k(10, 1, 1)]))
    assert sp.split([0], 0, 20, [T0]) == _c(launch=4, sync=1, queued=6, other=8)


def test_split_correlation_zero_is_no_link():
    """A kernel with correlation 0 (none recorded) is not tied to the calls that also carry 0 (a sync call at 5):
    its gap 0..20 is other."""
    rt = [_rt("cudaDeviceSynchronize", T0, 5, 2, 0)]
    sp = IdleSplitter(_trace(rt, [_k(20, 5, 0)]))
    assert sp.call(0) is None
    assert sp.split([0], 0, 25, [T0]) == _c(other=20)


# ---------------------------------------------------------------------------------------------------------------
# The finer causes (issue 37): what the old "other" held, each built by hand with its ns known by construction

ELEM = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)"


def test_a_kernel_waiting_while_another_stream_runs_is_elsewhere(tmp_path):
    """The block's second kernel is launched at 21 (stream 7) and starts at 32; meanwhile thread 2, outside the
    block, ran a kernel 22..30 on stream 8. Gap 0..10: launch 2, queued 8; gap 20..32: launch 20..21, elsewhere
    22..30 = 8, queued 21..22 + 30..32 = 3; tail 40..60: host_op 20. Idle 60 - 18 = 42."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 60)
    b.op("aten::bmm", 1, 8)
    b.launch(GEMM, 2, 1, 10, 10)
    host_core(b, 15)
    b.op("aten::bmm", 20, 3)
    b.launch(GEMM, 21, 1, 32, 8)
    b.op("aten::fill_", 15, 6, tid=2)
    b.launch(ELEM, 16, 1, 22, 8, stream=8, tid=2)
    res, blk = _block(tmp_path, b)
    assert blk.idle_us == pytest.approx(42)
    assert _c(launch=3, elsewhere=8, queued=11, host_op=20) == _split(blk)
    assert sum(blk.idle_by_cause.values()) == pytest.approx(blk.span_us - blk.total_us)


def test_a_stream_wait_queued_right_before_the_launch_is_event_wait(tmp_path):
    """_base, with a cudaStreamWaitEvent at 1.5 on the launching thread: it is that thread's last call before the
    launch at 2, so 2..10 is event_wait 8. Before the launch at 31 the last call is the launch at 2: queued 4."""
    b = TraceBuilder()
    _base(b)
    _call(b, "cudaStreamWaitEvent", 1.5, 0.2)
    _call(b, "hipStreamWaitEvent", 25, 1, tid=2)  # another thread's wait says nothing about this thread's launch
    _, blk = _block(tmp_path, b)
    assert _c(launch=13, event_wait=8, queued=4, host_op=20) == _split(blk)


def test_the_tail_is_the_host_op_where_it_runs_and_other_in_its_holes():
    """Kernel 0..10 (launched at -5), window 0..60, the block's host ops 0..30 and 50..60, thread 0 in a sync
    25..35, a kernel outside the block 40..45. Tail 10..60: sync 25..35 = 10; elsewhere 40..45 = 5; host_op
    10..25 + 50..60 = 25; other 35..40 + 45..50 = 10. Sum 50 = 60 - 10 busy."""
    rt = [_rt("cudaLaunchKernel", T0, -5, 1, 1), _rt("cudaDeviceSynchronize", T0, 25, 10, 0),
          _rt("cudaLaunchKernel", T1, 38, 1, 2)]
    sp = IdleSplitter(_trace(rt, [_k(0, 10, 1), _k(40, 5, 2)]))
    assert sp.split([0], 0, 60, [T0], host=[(0, 30), (50, 60)]) == _c(sync=10, elsewhere=5, host_op=25, other=10)
    assert sp.split([0], 0, 60, [T0]) == _c(sync=10, elsewhere=5, other=35)  # no host op: its instants are other


def test_work_on_another_device_is_not_elsewhere():
    """A kernel on another GPU (stream table: device 1) runs 12..18 inside the gap 10..20 of a device-0 block:
    it does not occupy this device, so the gap stays queued."""
    rt = [_rt("cudaLaunchKernel", T0, -9, 1, 1), _rt("cudaLaunchKernel", T0, -8, 1, 2),
          _rt("cudaLaunchKernel", T0, -7, 1, 3)]
    other = DeviceEvent(kind="kernel", name="k", stream=1, ts=12, dur=6, correlation=3, ext_id=0)
    tr = Trace(info=TraceInfo(source="hand"), runtime=rt, device=[_k(0, 10, 1), _k(20, 5, 2), other],
               streams=[(0, 7), (1, 7)])
    assert IdleSplitter(tr).split([0, 1], 0, 25, [T0]) == _c(queued=10)
    tr.streams = [(0, 7), (0, 8)]  # the same kernel on device 0's other stream: elsewhere 6, queued 4
    assert IdleSplitter(tr).split([0, 1], 0, 25, [T0]) == _c(elsewhere=6, queued=4)


def test_a_pause_between_steps_is_no_block_idle(tmp_path):
    """Two ProfilerSteps (0..100, 200..300), each one _base block 10 µs in; the host pauses 100..200 between
    them. Each block's idle is its own span's (45: launch 13, queued 12, host_op 20): the pause lies in no block's
    span, so it is in no cause, and the totals are twice one block, summing to span - busy."""
    b = TraceBuilder()
    for step, t0 in ((1, 0), (2, 200)):
        b.annotation(f"ProfilerStep#{step}", t0, 100)
        sub = TraceBuilder()
        sub._corr = 100 * step  # (correlation ids unique across the two copies)
        _base(sub)
        for e in sub.events:
            b.events.append({**e, "ts": e["ts"] + t0 + 10})
    res = analyze(b.write(tmp_path / "steps.json")).check()
    assert [blk.step for blk in res.blocks] == [1, 2]
    for blk in res.blocks:
        assert _c(launch=13, queued=12, host_op=20) == _split(blk)
    assert res.totals.idle_by_cause == pytest.approx(_c(launch=26, queued=24, host_op=40))
    assert sum(res.totals.idle_by_cause.values()) == pytest.approx(res.totals.span_us - res.totals.total_us)


def test_idle_rules_are_named_ordered_data_with_reasons():
    names = [r.name for r in IDLE_RULES]
    assert len(names) == len(set(names)) and all(r.why for r in IDLE_RULES)
    assert {r.cause for r in IDLE_RULES} == set(IdleCause)  # every cause has a rule that gives it
    for piece in (BEFORE, AFTER, TAIL, NO_CALL):  # each piece ends with a rule that takes all that is left
        last = [r for r in IDLE_RULES if r.piece == piece][-1]
        assert not last.source and not last.when, piece


# -- a graph replay, against a walk of the raw JSON ----------------------------------------------------------------

REPLAYS = ["sglang_decode/sglang_Qwen3-8B_decode.json.gz", "vllm_prefilldecode_piecewise/graph_execution.json.gz"]
WAITS = {"cudaStreamWaitEvent", "hipStreamWaitEvent"}


def _replay_walk(events: list[dict], s: int, e: int) -> dict[str, int]:
    """A block window [s, e) ns whose device idle instants are found from the JSON alone: the gaps in the union of
    every device event there. Each gap is cut at its next event's first correlated call (a replayed kernel shares
    its graph launch's correlation): launch before it; after it, queued, or event_wait where the calling thread's
    last launch or stream-wait call before it was a stream wait. None of the block's gaps may hold other device
    work (no event of any stream runs in them), so the gaps' sum is the whole idle."""
    ns = [(round(x["ts"] * 1000), round((x["ts"] + x["dur"]) * 1000), x) for x in events
          if x.get("cat") in DEVICE_CATS and x["dur"] > 0]
    inside = sorted((a, b, x) for a, b, x in ns if b > s and a < e)
    calls = sorted((x for x in events if x.get("cat") in ("cuda_runtime", "cuda_driver")), key=lambda x: x["ts"])
    first: dict[int, dict] = {}
    for x in calls:
        first.setdefault(x["args"].get("correlation"), x)
    launched = {id(first[x["args"]["correlation"]]) for _, _, x in ns if x["args"].get("correlation") in first}
    out, cur = {"launch": 0, "queued": 0, "event_wait": 0, "idle": 0}, s
    for a, b, x in inside:
        if a > cur:
            call = first[x["args"]["correlation"]]
            cut = min(max(round(call["ts"] * 1000), cur), a)
            prior = [y for y in calls if y["tid"] == call["tid"] and y["ts"] < call["ts"]
                     and (y["name"] in WAITS or id(y) in launched)]
            out["launch"] += cut - cur
            out["event_wait" if prior and prior[-1]["name"] in WAITS else "queued"] += a - cut
            out["idle"] += a - cur
        cur = max(cur, b)
    out["idle"] += max(0, e - cur)
    return out


@pytest.mark.parametrize("name", REPLAYS)
def test_graph_replay_idle_once_all_other_is_split_by_a_walk_of_the_raw_json(name):
    """Issue 37: replays read "other 100%". Their gaps lie between kernels a graph launch (or an eager launch
    long before) queued, with no other device work running: queued, to the ns of the walk."""
    path = GRAPHS / name
    if not path.is_file():
        pytest.skip(f"graph traces not present at {path}")
    events = read_events(path)
    res = analyze(path).check()
    seen = 0
    for blk in res.blocks:
        if not blk.idle_gaps or not len(blk.idle_gaps):
            continue
        o = blk.idle_gaps.origin_ns
        f = blk.idle_gaps.flat
        s, e = f[0], f[len(f) - len(IDLE_CAUSES) - 1]  # the first gap's start, the last gap's end (ns, absolute)
        ref = _replay_walk(events, s, e)
        ns = {c: round(blk.idle_by_cause[c] * 1000) for c in IDLE_CAUSES}
        assert abs(sum(ns.values()) - ref["idle"]) <= len(IDLE_CAUSES), (blk.name, o)
        for c in ("launch", "queued", "event_wait"):
            assert abs(ns[c] - ref[c]) <= 2, (blk.name, c, ns, ref)
        assert ns["other"] == 0 and ns["elsewhere"] == 0
        seen += 1
    assert seen
    assert res.totals.idle_by_cause["other"] == 0 and res.totals.idle_by_cause["queued"] > 0


# ---------------------------------------------------------------------------------------------------------------
# A window with other device work in it: its gaps split as array operations (idle.BATCH_GAPS and up) must give
# what the gap-by-gap rules give

def _with_batch(at: int, fn):
    """``fn()`` with idle.BATCH_GAPS set to ``at`` (1: every window with other work takes the array path)."""
    import tracekit.analysis.idle as idle_mod

    was = idle_mod.BATCH_GAPS
    idle_mod.BATCH_GAPS = at
    try:
        return fn()
    finally:
        idle_mod.BATCH_GAPS = was


def test_the_array_path_splits_other_work_sync_and_waits_as_worked_out_by_hand(monkeypatch):
    """Block kernels A 10..20 (launched at 2 by T0), B 40..50 (launched at 25 by T0, which sat in a stream sync
    22..24 after a cudaStreamWaitEvent at 21), C 60..70 (launched at 55 by T1); a kernel outside the block on the
    device's other stream runs 30..35, launched at 29 by T1. Window 0..80, no host ops. Gaps:
    0..10: launch 0..2 = 2, queued 2..10 = 8; 20..40: before the call at 25, sync 22..24 = 2 and launch 3; after
    it elsewhere 30..35 = 5, and T0's last call before the launch was the wait: event_wait 10; 50..60: launch
    50..55 = 5, queued 5; tail 70..80: other 10. Sum 50 = 80 - 30 busy."""
    import tracekit.analysis.idle as idle_mod

    rt = [_rt("cudaLaunchKernel", T0, 2, 1, 1), _rt("cudaStreamWaitEvent", T0, 21, 0, 0),
          _rt("cudaStreamSynchronize", T0, 22, 2, 0), _rt("cudaLaunchKernel", T0, 25, 1, 2),
          _rt("cudaLaunchKernel", T1, 29, 1, 4), _rt("cudaLaunchKernel", T1, 55, 1, 3)]
    other = DeviceEvent(kind="kernel", name="k", stream=1, ts=30, dur=5, correlation=4, ext_id=0)
    tr = Trace(info=TraceInfo(source="hand"), runtime=rt, device=[_k(10, 10, 1), _k(40, 10, 2), _k(60, 10, 3), other],
               streams=[(0, 7), (0, 8)])
    took: list[bool] = []
    real = IdleSplitter._foreign_rows
    monkeypatch.setattr(IdleSplitter, "_foreign_rows", lambda *a: took.append(True) or real(*a))
    want = _c(launch=10, sync=2, elsewhere=5, event_wait=10, queued=13, other=10)
    assert _with_batch(1, lambda: IdleSplitter(tr).split([0, 1, 2], 0, 80, [T0])) == want
    assert took == [True]
    assert _with_batch(idle_mod.BATCH_GAPS, lambda: IdleSplitter(tr).split([0, 1, 2], 0, 80, [T0])) == want
    assert took == [True]  # (three gaps and a tail: under BATCH_GAPS, gap by gap)


_NAMES = ("cudaLaunchKernel", "cudaStreamSynchronize", "cudaStreamWaitEvent", "cudaMemcpyAsync", "cudaMemcpy")


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_window_splits_the_same_by_array_operations_as_gap_by_gap(data):
    """Random kernels on two streams of one device (and sometimes a second device), launched early or late by two
    threads that also sync, copy and queue stream waits, some without a launch call; a random block of them in a
    random window. The array path (BATCH_GAPS 1) gives the same causes and the same gap rows as the rules applied
    gap by gap, and the causes sum to the window less the block's busy time."""
    n = data.draw(st.integers(2, 30))
    dev, rt = [], []
    for k in range(n):
        ts, dur = data.draw(st.integers(0, 300)), data.draw(st.integers(0, 20))
        corr = data.draw(st.sampled_from([k + 1, k + 1, k + 1, 0, n + 100]))  # (n + 100: no call has it)
        dev.append(DeviceEvent(kind="kernel", name="k", stream=data.draw(st.sampled_from([0, 0, 1, 2])), ts=ts,
                               dur=dur, correlation=corr, ext_id=0))
        if corr == k + 1:
            rt.append(_rt("cudaLaunchKernel", data.draw(st.sampled_from([T0, T1])), ts - data.draw(
                st.integers(-5, 40)), data.draw(st.integers(0, 3)), corr))
    for _ in range(data.draw(st.integers(0, 8))):
        rt.append(_rt(data.draw(st.sampled_from(_NAMES[1:])), data.draw(st.sampled_from([T0, T1])),
                      data.draw(st.integers(-20, 320)), data.draw(st.integers(0, 15)), 0))
    rt.sort(key=lambda r: r.ts)
    streams = [(0, 7), (0, 8), (data.draw(st.sampled_from([0, 1])), 9)]
    tr = Trace(info=TraceInfo(source="hand"), runtime=rt, device=dev, streams=streams)
    js = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1)))
    lo = min(dev[j].ts for j in js) - data.draw(st.integers(0, 10))
    hi = max(dev[j].ts + dev[j].dur for j in js) + data.draw(st.integers(0, 10))
    threads = data.draw(st.sampled_from([[T0], [T0, T1], []]))
    host = data.draw(st.lists(st.tuples(st.integers(-10, 300), st.integers(0, 30)).map(lambda p: (p[0], p[0] + p[1])),
                              max_size=3))

    def run(at: int) -> tuple[dict[str, int], list[int]]:
        from array import array
        gaps = array("q")
        got = _with_batch(at, lambda: IdleSplitter(tr).split(js, lo, hi, threads, gaps, host))
        return got, gaps.tolist()

    batch, loop = run(1), run(10**9)
    assert batch == loop
    busy = sum(e - s for s, e in _Intervals((dev[j].ts, dev[j].ts + dev[j].dur) for j in js
                                            if dev[j].dur > 0).pieces(lo, hi))
    assert sum(batch[0].values()) == (hi - lo) - busy
