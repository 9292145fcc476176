"""The op table's rows and their invariants (tracekit.results.ops; issue 42): ``Attribution.check()`` refuses a
row without calls, with a negative figure, or rows whose time exceeds the blocks' busy time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from support.builders import op_table_trace
from tracekit import analyze
from tracekit.results.invariants import InvariantError
from tracekit.results.ops import OpRow, merge_ops, ops_basis


def _row(**kw: object) -> OpRow:
    base = {"op": "aten::mm", "shapes": "[[2, 3], [3, 4]]", "dtype": "bf16", "calls": 1, "flops": 48.0,
            "bytes": 40.0, "time_ns": 1000, "compute_s": 1e-12, "memory_s": 2e-12}
    return OpRow(**{**base, **kw})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory):
    return analyze(op_table_trace(tmp_path_factory.mktemp("ops") / "t.json"), by="op").check()


@pytest.mark.parametrize("bad", [{"calls": 0}, {"time_ns": -1}, {"flops": -1.0}, {"memory_s": -1e-9},
                                 {"compute_s": -1e-9}])
def test_check_refuses_a_row_without_calls_or_with_a_negative_figure(result, bad: dict) -> None:
    good = result.ops[0]
    result.ops[0] = replace(good, **bad)
    try:
        with pytest.raises(InvariantError):
            result.check()
    finally:
        result.ops[0] = good
    result.check()


def test_check_refuses_rows_whose_time_exceeds_the_blocks_busy_time(result) -> None:
    """Each kernel's busy share is in at most one row: 1 µs more than the blocks' busy total is refused."""
    good = result.ops[0]
    result.ops[0] = replace(good, time_ns=good.time_ns + 1000)
    try:
        with pytest.raises(InvariantError, match="beyond the blocks' busy"):
            result.check()
    finally:
        result.ops[0] = good


def test_roof_and_bound_follow_the_larger_time_at_peak() -> None:
    """1 µs measured; 0.5 µs at the memory peak, 0.25 at the compute peak: memory-bound at 50% of the roof."""
    r = _row(compute_s=0.25e-6, memory_s=0.5e-6, time_ns=1000)
    assert r.bound == "memory" and r.roof_pct == pytest.approx(50.0)
    r = _row(compute_s=0.75e-6, memory_s=0.5e-6, time_ns=1000)
    assert r.bound == "compute" and r.roof_pct == pytest.approx(75.0)
    assert _row(compute_s=None).bound is None and _row(compute_s=None).roof_pct is None


def test_merge_sums_equal_keys_and_keeps_an_unknown_peak_unknown() -> None:
    a, b = _row(), _row(compute_s=None, time_ns=3000)
    [m] = merge_ops([[a], [b]]) or []
    assert (m.calls, m.flops, m.time_ns, m.compute_s) == (2, 96.0, 4000, None)
    assert (a.calls, a.time_ns) == (1, 1000)  # the parts' rows are left as they were
    assert merge_ops([None, None]) is None


def test_the_basis_names_its_steps() -> None:
    assert ops_basis(3) == "per step (mean over 3 steps)" and ops_basis(1) == "per step (mean over 1 step)"
    assert ops_basis(0).startswith("total")
