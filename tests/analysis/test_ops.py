"""The op table of ``tracekit attribute --by op`` (tracekit.analysis.ops; issue 42, section 4).

Hand-built traces whose FLOPs, bytes and times are counted here from the shapes they record (2·b·m·n·k per bmm,
5 FLOPs per softmax element), against the H200's datasheet peaks; and the H200 sweep's eager_4096 against an
independent count from its raw JSON's Input Dims.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from support.builders import OPS_PV, OPS_QK, OPS_SCORES, OPS_US, op_table_trace
from support.paths import SWEEP, requires_h200
from support.traces import read_events
from tracekit import analyze
from tracekit.analysis import pipeline

# NVIDIA H200 Tensor Core GPU datasheet, SXM column: bf16 dense tensor peak and HBM3e bandwidth; fp32 (vector) peak.
H200_BF16_FLOPS, H200_FP32_FLOPS, H200_BYTES_PER_S = 989.4e12, 67.0e12, 4800e9
STEPS = 2


def _bmm_flops(a: list[int], b: list[int]) -> int:
    """[b,m,k]·[b,k,n]: b products of 2·m·n·k FLOPs."""
    (nb, m, k), (_, _, n) = a, b
    return 2 * nb * m * n * k


def _bmm_bytes(a: list[int], b: list[int]) -> int:
    """Both operands read and the [b,m,n] output written once, bf16 (2 bytes)."""
    (nb, m, k), (_, _, n) = a, b
    return 2 * (nb * m * k + nb * k * n + nb * m * n)


def _row(result, op: str, dims: list) -> object:
    [r] = [r for r in result.ops if r.op == op and r.shapes.replace(" ", "") == str(dims).replace(" ", "")]
    return r


def test_bmm_rows_hold_the_hand_counted_calls_flops_time_and_roof(tmp_path: Path) -> None:
    """Two steps, each one block: bmm QK (10 µs), softmax (5 µs), bmm PV (8 µs). Each bmm shape is one row of 2 calls,
    its FLOPs 2·(2·b·m·n·k), its time the two kernels' 20 / 16 µs, TFLOP/s = FLOPs / time; memory-bound (its
    bytes at 4.8 TB/s take longer than its FLOPs at 989.4 TFLOP/s), % of roof = memory time at peak / time."""
    result = analyze(op_table_trace(tmp_path / "t.json", steps=STEPS), by="op").check()
    assert result.ops is not None and len(result.ops) == 3
    for dims, us in ((OPS_QK, OPS_US["qk"]), (OPS_PV, OPS_US["pv"])):
        r = _row(result, "aten::bmm", list(dims))
        flops, nbytes, time_s = STEPS * _bmm_flops(*dims), STEPS * _bmm_bytes(*dims), STEPS * us * 1e-6
        assert (r.calls, r.dtype, r.flops, r.bytes, r.time_ns) == (STEPS, "bf16", flops, nbytes, STEPS * us * 1000)
        assert r.tflops_per_s == pytest.approx(flops / time_s / 1e12, rel=1e-12)
        assert r.compute_s == pytest.approx(flops / H200_BF16_FLOPS, rel=1e-12)
        assert r.memory_s == pytest.approx(nbytes / H200_BYTES_PER_S, rel=1e-12)
        assert r.bound == "memory" and nbytes / H200_BYTES_PER_S > flops / H200_BF16_FLOPS
        assert r.roof_pct == pytest.approx(100 * (nbytes / H200_BYTES_PER_S) / time_s, rel=1e-12)
    soft = _row(result, "aten::_softmax", [OPS_SCORES, [], []])
    elems = OPS_SCORES[0] * OPS_SCORES[1] * OPS_SCORES[2]
    assert (soft.calls, soft.flops, soft.time_ns) == (STEPS, STEPS * 5 * elems, STEPS * OPS_US["softmax"] * 1000)
    assert soft.compute_s == pytest.approx(STEPS * 5 * elems / H200_FP32_FLOPS, rel=1e-12)  # vector work: fp32 peak
    assert [r.time_ns for r in result.ops] == sorted((r.time_ns for r in result.ops), reverse=True)


def test_the_rows_time_is_the_blocks_busy_time_when_every_kernel_is_counted(tmp_path: Path) -> None:
    """Every kernel of the blocks belongs to a counted op: the rows' time sums to the blocks' busy time, 23 µs a step
    (each kernel's busy share counted once)."""
    result = analyze(op_table_trace(tmp_path / "t.json", steps=STEPS), by="op").check()
    assert sum(r.time_ns for r in result.ops) == STEPS * sum(OPS_US.values()) * 1000
    assert result.totals.total_us == STEPS * sum(OPS_US.values())


def test_the_op_table_is_computed_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default analysis never reads the op table off the context (the 1 GB benchmark pays nothing): with the
    reader broken, it still runs, and its result carries no table; by="op" reaches it."""
    path = op_table_trace(tmp_path / "t.json")

    def broken(ctx: object) -> list:
        raise AssertionError("op table computed without being asked")

    monkeypatch.setattr(pipeline, "ops_of", broken)
    assert analyze(path).check().ops is None
    with pytest.raises(AssertionError, match="without being asked"):
        analyze(path, by="op")


def test_a_folder_of_traces_sums_equal_rows(tmp_path: Path) -> None:
    """Two traces (ranks) of the same work: one row per (op, shapes, dtype), calls, FLOPs and time doubled."""
    one = analyze(op_table_trace(tmp_path / "one.json"), by="op").check()
    folder = tmp_path / "ranks"
    folder.mkdir()
    for k in range(2):
        shutil.copy(tmp_path / "one.json", folder / f"rank{k}.pt.trace.json")
    both = analyze(folder, by="op", jobs=1).check()
    assert both.ops is not None
    assert [(r.op, r.shapes, 2 * r.calls, 2 * r.flops, 2 * r.time_ns) for r in one.ops] == [
        (r.op, r.shapes, r.calls, r.flops, r.time_ns) for r in both.ops]


@requires_h200
def test_eager_4096_bmm_rows_equal_an_independent_count_of_the_raw_input_dims() -> None:
    """The shared H200 sweep's eager_4096: the op rows' time is at most the blocks' busy time, and the bmm rows'
    calls and FLOPs equal a count over the raw JSON's aten::bmm events (2·b·m·n·k each, per recorded shape)."""
    [path] = sorted((SWEEP / "eager_4096").glob("*.json*"))
    result = analyze(path, by="op").check()
    assert result.ops and sum(r.time_us for r in result.ops) <= result.totals.total_us + 1e-6
    calls: Counter[str] = Counter()
    flops: Counter[str] = Counter()
    for e in read_events(path, ["cpu_op"]):
        if e["name"] == "aten::bmm":
            dims = e["args"]["Input Dims"]
            key = str(dims).replace(" ", "")
            calls[key] += 1
            flops[key] += _bmm_flops(dims[0], dims[1])
    rows = {r.shapes.replace(" ", ""): r for r in result.ops if r.op == "aten::bmm"}
    assert rows.keys() == calls.keys() and len(rows) == 2
    assert {k: (r.calls, r.flops) for k, r in rows.items()} == {k: (calls[k], flops[k]) for k in calls}
