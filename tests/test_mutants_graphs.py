"""Graph mapping's smallest rules on hand-made inputs (tracekit.analysis.graphs): what a captured launch recorded,
and how two token sequences align. Each expectation follows from the rule's text; tests/test_graphs.py covers the
whole mapping on real and hand-built traces."""

from __future__ import annotations

import pytest

from tracekit.analysis.graphs import COPY, FILL, UNNAMED_KERNEL, align, capture_token
from tracekit.model import RuntimeEvent


def _rt(name: str, kernel: str = "") -> RuntimeEvent:
    return RuntimeEvent(name=name, thread=1, ts=0, dur=1, correlation=1, ext_id=0, kernel=kernel)


@pytest.mark.parametrize("name,kernel,want", [
    ("cudaMemcpyAsync", "", COPY),
    ("hipMemcpyWithStream", "", COPY),
    ("cudaMemsetAsync", "", FILL),
    ("hipMemsetD32Async", "", FILL),
    ("cudaLaunchKernel", "", UNNAMED_KERNEL),
    ("hipLaunchKernel", "my_kernel", "my_kernel"),  # a HIP launch names its kernel: the name is the token
    ("hipMemcpyAsync", "copy_kernel", "copy_kernel"),
])
def test_capture_token(name, kernel, want):
    assert capture_token(_rt(name, kernel)) == want


def test_align_pairs_the_matching_runs_and_the_equal_gaps():
    """A · [two unnamed] · B against A · [two named] · B: the named runs pair, and the equal-length gap of unnamed
    launches pairs by position (counted apart)."""
    captured = ["A", UNNAMED_KERNEL, UNNAMED_KERNEL, "B"]
    replayed = ["A", "k1", "k2", "B"]
    pairs, by_order = align(captured, replayed)
    assert sorted(pairs) == [(0, 0), (1, 1), (2, 2), (3, 3)] and by_order == 2


def test_align_leaves_unequal_or_named_gaps_unpaired():
    pairs, by_order = align(["A", UNNAMED_KERNEL, "B"], ["A", "k1", "k2", "B"])
    assert sorted(pairs) == [(0, 0), (2, 3)] and by_order == 0
    pairs, by_order = align(["A", "C", "B"], ["A", "k1", "B"])  # a named launch never pairs with another name
    assert sorted(pairs) == [(0, 0), (2, 2)] and by_order == 0


def test_align_keeps_frequent_tokens_in_long_sequences():
    """300 launches of one kernel (a decode graph): difflib's autojunk would call the token junk and match
    nothing; every launch must pair."""
    captured = ["gemm"] * 150 + ["X"] + ["gemm"] * 150
    replayed = ["gemm"] * 150 + ["Y"] + ["gemm"] * 150  # one kernel differs: both runs of 150 still pair
    pairs, _ = align(captured, replayed)
    assert len(pairs) == 300 and (151, 151) in pairs


def test_align_pairs_every_gap_by_its_own_bounds():
    """Two gaps: the second starts after the first matched run (its own start, not the sequence's)."""
    captured = ["A", UNNAMED_KERNEL, "B", UNNAMED_KERNEL, "C"]
    replayed = ["A", "k1", "B", "k2", "C"]
    pairs, by_order = align(captured, replayed)
    assert sorted(pairs) == [(k, k) for k in range(5)] and by_order == 2


def test_an_unnamed_launch_never_pairs_with_a_copy_or_fill():
    for kind in (COPY, FILL):
        pairs, by_order = align(["A", UNNAMED_KERNEL, "B"], ["A", kind, "B"])
        assert sorted(pairs) == [(0, 0), (2, 2)] and by_order == 0
