"""Idle by cause (tracekit.analysis.idle) on its smallest pieces: a thread's sync calls merged into disjoint
intervals, those clipped to a window, the union of several threads' intervals, and IdleSplitter.split on a Trace
built by hand (integer ns). Every expectation is interval arithmetic worked out in the comments; test_idle_causes.py
covers the same rules end to end through analyze()."""

from __future__ import annotations

import pytest

from tracekit.analysis.idle import IdleSplitter, _covered, _Intervals, sync_rule
from tracekit.model import DeviceEvent, GraphLaunch, RuntimeEvent, Trace, TraceInfo

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
    assert sp.split([0, 1], 0, 100, [T0]) == {"launch": 10, "sync": 4, "other": 66}


def test_split_tail_sync_is_the_union_of_the_block_threads():
    """One kernel 0..10 (launched at -5, so no launch gap), window 0..50; tail 10..50. Thread 0 syncs 12..30,
    thread 1 syncs 20..40 (a third thread 2 syncs 40..50 but is not the block's): tail sync = 12..40 = 28, other
    12. A cudaLaunchKernel of 0 µs is not a sync, nor is a holding call of 0 duration."""
    rt = [_rt("cudaLaunchKernel", T0, -5, 1, 1), _rt("cudaStreamSynchronize", T0, 12, 18, 0),
          _rt("cudaDeviceSynchronize", T1, 20, 20, 0), _rt("cudaDeviceSynchronize", 2, 40, 10, 0),
          _rt("cudaDeviceSynchronize", T0, 11, 0, 0)]
    sp = IdleSplitter(_trace(rt, [_k(0, 10, 1)]))
    assert sp.split([0], 0, 50, [T0, T1]) == {"launch": 0, "sync": 28, "other": 12}
    assert sp.split([0], 0, 50, [T0]) == {"launch": 0, "sync": 18, "other": 22}  # thread 0 alone: 12..30
    assert sp.split([0], 0, 50, []) == {"launch": 0, "sync": 0, "other": 40}


def test_split_kernels_starting_together_end_one_gap_at_the_earliest_call():
    """Two kernels start at 40 (launched at 30 on thread 1 and 20 on thread 0); the gap 0..40 is cut at the
    earliest call, 20: launch 20, other 20. Their ends (50, 45) leave the tail 50..60 = other 10."""
    rt = [_rt("cudaLaunchKernel", T1, 30, 1, 1), _rt("cudaLaunchKernel", T0, 20, 1, 2)]
    sp = IdleSplitter(_trace(rt, [_k(40, 10, 1), _k(40, 5, 2)]))
    assert sp.split([0, 1], 0, 60, [T0, T1]) == {"launch": 20, "sync": 0, "other": 30}


def test_split_overlapping_kernels_cover_to_the_furthest_end():
    """Kernel A 10..40, kernel B 20..30 inside it, kernel C 50..55; all launched before the window. Covered to 40
    (not 30), so the gaps are 0..10 and 40..50 (other: each kernel's call was issued) and the tail 55..60."""
    rt = [_rt("cudaLaunchKernel", T0, -9, 1, 1), _rt("cudaLaunchKernel", T0, -8, 1, 2),
          _rt("cudaLaunchKernel", T0, -7, 1, 3)]
    sp = IdleSplitter(_trace(rt, [_k(10, 30, 1), _k(20, 10, 2), _k(50, 5, 3)]))
    assert sp.split([0, 1, 2], 0, 60, [T0]) == {"launch": 0, "sync": 0, "other": 25}


def test_split_a_launch_call_after_the_kernel_started_is_clipped_to_the_gap():
    """A kernel at 10 whose only call is at 15 (clock skew): the whole gap 0..10 is launch. A kernel with no call
    in the trace (correlation 9): its gap is other. Empty events end no gap."""
    rt = [_rt("cudaLaunchKernel", T0, 15, 1, 1)]
    sp = IdleSplitter(_trace(rt, [_k(10, 5, 1), _k(30, 5, 9), _k(20, 0, 1)]))
    assert sp.split([0], 0, 15, [T0]) == {"launch": 10, "sync": 0, "other": 0}
    # 0..10 launch; 15..30 ended by the call-less kernel: other 15; tail 35..40: other 5.
    assert sp.split([0, 1, 2], 0, 40, [T0]) == {"launch": 10, "sync": 0, "other": 20}


def test_split_the_first_call_per_correlation_and_graph_launches():
    """Two calls share correlation 1 (at 8, then at 2): the linker takes the first in the trace, at 8, so 0..8 is
    launch and 8..10 other. A replayed kernel waits on its graph launch (at 30), not on its own correlation's call
    (at 1): 20..30 launch, 30..40 other."""
    rt = [_rt("cudaLaunchKernel", T0, 8, 1, 1), _rt("cudaLaunchKernel", T0, 2, 1, 1),
          _rt("cudaGraphLaunch", T0, 30, 1, 5), _rt("cudaLaunchKernel", T0, 1, 1, 7)]
    dev = [_k(10, 10, 1), _k(40, 10, 7)]
    sp = IdleSplitter(_trace(rt, dev), [GraphLaunch(runtime=2, device=[1])])
    assert sp.split([0, 1], 0, 50, [T0]) == {"launch": 18, "sync": 0, "other": 12}
    assert sp.call(1) == 2 and sp.call(0) == 0


def test_split_sync_before_the_call_counts_the_launching_thread_only():
    """Gap 0..20 ended by a kernel launched at 15 on thread 0. Thread 1 sat in a sync 0..15, thread 0 in one 5..8:
    only the launching thread's counts: sync 3, launch 12, other 5."""
    rt = [_rt("cudaDeviceSynchronize", T1, 0, 15, 0), _rt("cudaDeviceSynchronize", T0, 5, 3, 0),
          _rt("cudaLaunchKernel", T0, 15, 1, 1)]
    sp = IdleSplitter(_trace(rt, [_k(20, 5, 1)]))
    assert sp.split([0], 0, 25, [T0, T1]) == {"launch": 12, "sync": 3, "other": 5}


def test_split_sync_adds_up_over_several_gaps():
    """Thread 0 syncs 2..5 and 22..24, and launches kernels at 8 (runs 10..15) and 26 (runs 30..35). Gap 0..10:
    sync 3, launch 8 - 3 = 5, other 2; gap 15..30: before the call at 26, sync 2 of 15..26 and launch 9, then
    other 4. Sums: launch 14, sync 5, other 6 (= 35 - 10 busy - 14 - 5)."""
    rt = [_rt("cudaDeviceSynchronize", T0, 2, 3, 0), _rt("cudaLaunchKernel", T0, 8, 1, 1),
          _rt("cudaStreamSynchronize", T0, 22, 2, 0), _rt("cudaLaunchKernel", T0, 26, 1, 2)]
    sp = IdleSplitter(_trace(rt, [_k(10, 5, 1), _k(30, 5, 2)]))
    assert sp.split([0, 1], 0, 35, [T0]) == {"launch": 14, "sync": 5, "other": 6}


def test_split_one_ns_kernels_and_sync_calls_count():
    """A 1 ns kernel at 10 (launched at 4) ends the first gap: launch 4, other 6; the tail 11..20 holds a 1 ns
    sync call at 15: sync 1, other 8."""
    rt = [_rt("cudaLaunchKernel", T0, 4, 1, 1), _rt("cudaDeviceSynchronize", T0, 15, 1, 0)]
    sp = IdleSplitter(_trace(rt, [_k(10, 1, 1)]))
    assert sp.split([0], 0, 20, [T0]) == {"launch": 4, "sync": 1, "other": 14}


def test_split_correlation_zero_is_no_link():
    """A kernel with correlation 0 (none recorded) is not tied to the calls that also carry 0 (a sync call at 5):
    its gap 0..20 is other."""
    rt = [_rt("cudaDeviceSynchronize", T0, 5, 2, 0)]
    sp = IdleSplitter(_trace(rt, [_k(20, 5, 0)]))
    assert sp.call(0) is None
    assert sp.split([0], 0, 25, [T0]) == {"launch": 0, "sync": 0, "other": 20}
