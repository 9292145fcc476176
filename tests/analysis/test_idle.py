"""Idle inside a block, by cause (issue 24): launch, sync, other, summing to the block's idle time.

Hand-built traces put every launch call, sync call and kernel at a known µs, so each expected split is worked out by
hand in the test (the comments show the gaps). The H200 sweep traces are checked against a walk of the raw JSON here,
with its own reading of the rule (docs/attribution.md, "Idle by cause"), not through tracekit.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson
import pytest
from support.builders import CPU_PID, TID, TraceBuilder, capture, graph_launch, host_core, replay_kernels
from support.paths import REAL, SAMPLES

from tracekit import analyze
from tracekit.analysis.idle import SYNC_CALL_RULES, holds_host
from tracekit.renderers import JSONRenderer, TerminalRenderer
from tracekit.results.attribution import InvariantError
from tracekit.vocab import IDLE_CAUSES, IdleCause

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


def _split(blk) -> tuple[float, float, float]:
    c = blk.idle_by_cause
    return (pytest.approx(c["launch"], abs=1e-9), pytest.approx(c["sync"], abs=1e-9),
            pytest.approx(c["other"], abs=1e-9))


def test_launch_wait_ends_at_the_launch_call_and_the_rest_is_other(tmp_path):
    b = TraceBuilder()
    _base(b)
    res, blk = _block(tmp_path, b)
    assert blk.idle_us == pytest.approx(45)
    assert (13, 0, 32) == _split(blk)  # launch 2 + 11; other 8 + 4 + 20
    assert list(blk.idle_by_cause) == list(IDLE_CAUSES)
    assert res.totals.idle_by_cause == pytest.approx({"launch": 13, "sync": 0, "other": 32})


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
    # launch 2 (0..2) + 7 (24..31); sync 4 + 5; other 8 + 4 (31..35) + 15 (tail less 45..50)
    assert (9, 9, 27) == _split(blk)


def test_a_sync_that_covers_the_wait_takes_precedence_over_launch(tmp_path):
    b = TraceBuilder()
    _base(b)
    _call(b, "cudaDeviceSynchronize", 15, 13)  # 15..28: the host was held for 20..28 of the 20..31 wait
    _, blk = _block(tmp_path, b)
    assert (2 + 3, 8, 32) == _split(blk)


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
    # gap 0..10: launch 2, other 8; gap 20..35: launch 11, other 4; gap 40..45: sync 40..41, launch 41..43, other 2;
    # tail 50..60: other 10
    assert (15, 1, 24) == _split(blk)


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
    # gap 0..10: launch 2, other 8; gap 25..35: launch 25..31, other 31..35; tail 40..60: other 20
    assert (8, 0, 32) == _split(blk)


def test_replayed_kernels_wait_on_their_graph_launch_not_on_the_captured_copies(tmp_path):
    """The replay's copies of the captured launches carry the capture's times (here 13 and 22 µs after the graph
    launch, inside the 1 µs gaps between the replayed kernels): read as launches, they would make both gaps launch
    waits. The graph launch (at L) was issued before the replay began: both gaps are other."""
    b = TraceBuilder()
    t = capture(b, 0, 1)
    launch_at = t + 900
    ks, _ = replay_kernels(launch_at + 1, 1)  # 10, 5 and 8 µs kernels from L + 1, 1 µs apart
    graph_launch(b, launch_at, ks)
    res = analyze(b.write(tmp_path / "g.json")).check()
    [blk] = [x for x in res.blocks if x.kernels]
    assert blk.span_us == pytest.approx(25) and blk.idle_us == pytest.approx(2)
    assert (0, 0, 2) == _split(blk)


def test_cpu_only_blocks_have_every_cause_zero():
    res = analyze(SAMPLES / "cpu_eager_256.pt.trace.json.gz").check()
    assert res.blocks
    for blk in res.blocks:
        assert blk.idle_by_cause == {"launch": 0.0, "sync": 0.0, "other": 0.0}
    assert res.totals.idle_by_cause == {"launch": 0.0, "sync": 0.0, "other": 0.0}
    text = TerminalRenderer().render(res)
    assert "idle by cause" not in text


def test_json_and_terminal_show_the_split(tmp_path):
    b = TraceBuilder()
    _base(b)
    res, _ = _block(tmp_path, b)
    out = json.loads(JSONRenderer().render(res))
    assert out["blocks"][0]["idle_by_cause"] == {"launch_us": 13.0, "sync_us": 0.0, "other_us": 32.0}
    assert out["totals"]["idle_by_cause"] == {"launch_us": 13.0, "sync_us": 0.0, "other_us": 32.0}
    text = TerminalRenderer().render(res)
    assert "idle by cause: launch 29% · sync 0% · other 71%" in text  # 13 / 45, 32 / 45


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
    tc["launch"], tc["other"] = tc["launch"] + 1, tc["other"] - 1  # still summing to idle, no longer the blocks' sums
    with pytest.raises(InvariantError, match="totals.idle_by_cause.launch is not the sum of blocks"):
        res.check()
    tc["launch"], tc["other"] = tc["launch"] - 1, tc["other"] + 1
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
    assert [c.value for c in IdleCause] == list(IDLE_CAUSES) == ["launch", "sync", "other"]


# ---------------------------------------------------------------------------------------------------------------
# The H200 sweep, against a walk of the raw JSON

HOLDING = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaFree"}
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def _events(name: str) -> list[dict]:
    [path] = sorted((SWEEP / name).glob("*.json.gz"))
    return orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


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
    mine_corr = {e["args"]["correlation"] for e in calls if e["tid"] == tid and h0 <= e["ts"] <= e["ts"] + e["dur"] <= h1}
    dev = [e for e in events if e.get("cat") in DEVICE_CATS]
    mine = sorted((e for e in dev if e["args"].get("correlation") in mine_corr), key=lambda e: e["ts"])
    d0, d1 = mine[0]["ts"], max(e["ts"] + e["dur"] for e in mine)
    free = max((e["ts"] + e["dur"] for e in dev if e["ts"] < d0), default=None)
    start = d0 if h0 >= d0 else max(h0, min(free, d0) if free is not None else h0)
    end = max(d1, h1)
    holds = [(e["ts"], e["ts"] + e["dur"]) for e in calls if e["tid"] == tid and e["name"] in HOLDING]
    out = {"launch": 0.0, "sync": 0.0, "other": 0.0}
    cur = start
    for e in mine:
        if e["dur"] <= 0:
            continue
        if e["ts"] > cur:
            issued = min(first_call[x["args"]["correlation"]]["ts"] for x in mine if x["ts"] == e["ts"] and x["dur"] > 0)
            cut = min(max(issued, cur), e["ts"])
            s = _held(holds, cur, cut)
            out["sync"] += s
            out["launch"] += cut - cur - s
            out["other"] += e["ts"] - cut
        cur = max(cur, e["ts"] + e["dur"])
    if end > cur:
        s = _held(holds, cur, end)
        out["sync"] += s
        out["other"] += end - cur - s
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
        assert blk.idle_by_cause["sync"] == 0 and blk.idle_by_cause["other"] == pytest.approx(blk.idle_us)
