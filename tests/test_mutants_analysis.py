"""tracekit.analysis.attribute: folders merged into one result (merge), and op_self_times, on hand-built traces
whose figures are known by construction (tests/test_mutants_support.py). Every result is check()ed."""

from __future__ import annotations

from functools import partial

import pytest
from support.builders import TraceBuilder
from support.pairs import GEMM_C, H100, cpu_trace, eager, fused, plain, write

from tracekit import analyze, load_trace
from tracekit.analysis.attribute import op_self_times
from tracekit.vocab import Category, TimeBase


def _folder(path, *traces):
    path.mkdir()
    for name, steps in traces:
        write(path / name, steps)
    return path


def test_gpu_folder_merges_shares_steps_facts_and_device(tmp_path):
    # a: one step, eager (25 µs in the block) + a 3-µs add outside it: device busy 28 µs.
    # b: the same again. Merged: share (25 + 25) / (28 + 28); step 5 holds both traces' kernels.
    f = _folder(tmp_path / "run", ("a.json", [[eager, plain]]), ("b.json", [[eager, plain]]))
    r = analyze(f).check()
    one = analyze(f / "a.json").check()
    assert r.time_base == TimeBase.DEVICE and f.name in r.source
    assert [t.base_us for t in r.traces] == [28, 28]
    assert r.totals.attention_share == pytest.approx(50 / 56)
    assert r.kernels_by_step[(GEMM_C, Category.MATMUL, 5)] == (4, 40)  # 2 kernels of 10 µs per trace
    assert r.kernels[(GEMM_C, Category.MATMUL)] == (4, 40)
    key = next(iter(one.hint_facts))
    assert set(r.hint_facts) == set(one.hint_facts)
    gemm_fact = next(v for k, v in one.hint_facts[key].kernels.items() if k[0] == GEMM_C)
    merged = next(v for k, v in r.hint_facts[key].kernels.items() if k[0] == GEMM_C)
    assert list(merged) == [2 * gemm_fact[0], 2 * gemm_fact[1]]
    assert r.device is not None and r.device.name == H100


def test_shares_weighted_by_each_trace_base(tmp_path):
    # a: 25 of 28 µs; b: a 3-µs flash block and a 3-µs add: 3 of 6 µs. Merged: 28 / 34.
    f = _folder(tmp_path / "run", ("a.json", [[eager, plain]]), ("b.json", [[partial(fused, flash=3), plain]]))
    assert analyze(f).check().totals.attention_share == pytest.approx(28 / 34)


def test_folder_under_one_microsecond_of_device_time(tmp_path):
    # Two traces, each a single 0.4-µs flash kernel inside its block: base 0.8 µs, all of it attention.
    f = _folder(tmp_path / "run", ("a.json", [[partial(fused, flash=0.4)]]), ("b.json", [[partial(fused, flash=0.4)]]))
    r = analyze(f).check()
    assert sum(t.base_us for t in r.traces) == pytest.approx(0.8)
    assert r.totals.attention_share == pytest.approx(1)


def test_mixed_folder(tmp_path):
    f = tmp_path / "mixed"
    f.mkdir()
    write(f / "gpu.json", [[eager]])
    cpu_trace(f / "cpu.json")
    assert analyze(f).check().time_base == TimeBase.MIXED


def test_cpu_folder_has_no_coverage(tmp_path):
    f = tmp_path / "cpu"
    f.mkdir()
    cpu_trace(f / "a.json", 40)
    cpu_trace(f / "b.json", 20)
    r = analyze(f).check()
    assert r.time_base == TimeBase.HOST and r.coverage is None


def test_folder_with_no_time_has_no_share(tmp_path):
    f = tmp_path / "empty"
    f.mkdir()
    for n in "ab":
        b = TraceBuilder()
        b.op("aten::empty", 0, 0)
        b.write(f / f"{n}.json")
    r = analyze(f).check()
    assert sum(t.base_us for t in r.traces) == 0 and r.totals.attention_share is None


def test_op_self_times_count_annotations_and_ops(tmp_path):
    # A 10-µs range around a 3-µs op: self 7 and 3 µs.
    b = TraceBuilder()
    b.annotation("my_range", 0, 10)
    b.op("aten::mul", 2, 3)
    t = op_self_times(load_trace(b.write(tmp_path / "t.json")))
    assert t["my_range"] == (1, pytest.approx(7)) and t["aten::mul"] == (1, pytest.approx(3))


@pytest.mark.parametrize("end,gap", [(10, 0), (12, 2)])
def test_module_time_outside_its_ops_is_other(tmp_path, end, gap):
    # CPU-only: an nn.Module block from 0 to ``end`` µs around bmm (3) + softmax (3) + bmm (4) = 10 µs of ops.
    b = TraceBuilder()
    b.module("SelfAttention_0", 0, end)
    b.op("aten::bmm", 0, 3)
    b.op("aten::_softmax", 3, 3)
    b.op("aten::bmm", 6, 4)
    r = analyze(b.write(tmp_path / "m.json")).check()
    (blk,) = r.blocks
    assert blk.categories["other"] == gap and blk.categories["matmul"] == 7 and blk.categories["softmax"] == 3
    assert blk.total_us == end and r.traces[0].base_us == end and r.totals.attention_share == 1
