"""Result invariants that must hold at any magnitude, and shares that can never pass 100%."""

from __future__ import annotations

import dataclasses

import pytest

from support.builders import TraceBuilder, attention_block
from tracekit import analyze
from tracekit.analysis.compare import diff_attributions
from tracekit.results.attribution import CATEGORIES, Attribution, BlockResult, InvariantError, Totals, zero_categories


@pytest.mark.parametrize("which", range(6))
def test_the_longest_kernel_the_parser_accepts_passes_check(tmp_path, which):
    """A kernel just under the parse bound (1e12 µs, docs/attribution.md) attributes and checks.

    Longer ones (the fuzzer's 1e17 µs) are dropped and counted at the parse boundary
    (tests/io/test_load.py)."""
    b = TraceBuilder()
    attention_block(b, 1000)
    device = [e for e in b.events if e["cat"] in ("kernel", "gpu_memset")]
    device[which]["dur"] = 9.99e11
    res = analyze(b.write(tmp_path / "huge.json")).check()
    [blk] = res.blocks
    assert blk.total_us == pytest.approx(9.99e11, rel=1e-9)
    diff_attributions(res, res).check()


def test_check_tolerance_is_relative_at_1e17_us():
    """At 1e17 µs one ulp is 16 µs: an absolute 1 ns tolerance would call a correct sum broken."""
    blk = _block(1e17, matmul=1e17, softmax=12.0)  # 1e17 + 12 rounds to 1e17 + 16 in float64
    assert abs(sum(blk.categories.values()) - blk.total_us) > 1.0
    _attribution([blk], 1.0).check()
    broken = _block(1e17, matmul=1e17, softmax=1e9)  # off by 1e-8 relative: a real error
    with pytest.raises(InvariantError):
        _attribution([broken], 1.0).check()


def _block(total: float, **cats: float) -> BlockResult:
    c = zero_categories() | cats
    return BlockResult(name="a", kind="a", found_by="annotation", step=None, ordinal=0, phase="forward",
                       total_us=total, span_us=total, idle_us=0.0, categories=c, kernels=0, host_us=None,
                       alloc_bytes=None, source="t")


def _attribution(blocks: list[BlockResult], share: float | None) -> Attribution:
    cats = {c: sum(b.categories[c] for b in blocks) for c in CATEGORIES}
    return Attribution(source="t", time_base="host", traces=[], blocks=blocks, coverage=None,
                       totals=Totals(total_us=sum(b.total_us for b in blocks), categories=cats,
                                     attention_share=share, blocks=len(blocks),
                                     span_us=sum(b.span_us for b in blocks)))


def test_check_tolerance_is_relative_for_huge_figures_and_absolute_for_small():
    big = 3e17 / 7  # not representable: the sum of its parts rounds
    _attribution([_block(big, matmul=big * 0.3, softmax=big * 0.7)], 0.5).check()
    with pytest.raises(InvariantError):  # 1 µs off on a 10 µs block is a real error
        _attribution([_block(10.0, matmul=9.0)], 0.5).check()
    with pytest.raises(InvariantError):  # and 1% off stays an error at any magnitude
        _attribution([_block(1e17, matmul=0.99e17)], 0.5).check()


@pytest.mark.parametrize("share, ok", [(0.0, True), (1.0, True), (1.0 + 1e-12, True), (1.01, False), (100.0, False),
                                       (-0.01, False), (None, True)])
def test_check_asserts_the_share_is_a_fraction(share, ok):
    att = _attribution([_block(10.0, matmul=10.0)], share)
    if ok:
        att.check()
    else:
        with pytest.raises(InvariantError, match="share"):
            att.check()


def test_module_time_outside_ops_cannot_push_the_cpu_share_past_100_percent(tmp_path):
    """The issue's recipe: a 1000 µs ``nn.Module: SelfAttention_0`` slice holding one 10 µs op, CPU only.
    The block is 1000 µs (10 softmax + 990 'other': Python and the module call); the trace's host time is
    that same 1000 µs, so the share is 100%, not 10000%."""
    b = TraceBuilder()
    b.module("SelfAttention_0", 0, 1000)
    b.op("aten::_scaled_dot_product_flash_attention_for_cpu", 100, 10)  # the module's core (issue 22)
    res = analyze(b.write(tmp_path / "cpu.json")).check()
    [blk] = res.blocks
    assert (blk.found_by, blk.total_us) == ("module", pytest.approx(1000))
    assert blk.categories["fused_attention"] == pytest.approx(10) and blk.categories["other"] == pytest.approx(990)
    assert res.traces[0].base_us == pytest.approx(1000)
    assert res.totals.attention_share == pytest.approx(1.0)


def test_module_gap_inside_a_range_is_counted_once(tmp_path):
    """Inside ``ProfilerStep#1`` (2000 µs) the module's gap is already the step's self time: host time stays
    2000 µs, the share 1000 / 2000."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 2000)
    b.module("SelfAttention_0", 500, 1000)
    b.op("aten::_scaled_dot_product_flash_attention_for_cpu", 600, 10)
    b.op("aten::add", 1600, 100)  # outside the block
    res = analyze(b.write(tmp_path / "cpu.json")).check()
    [blk] = res.blocks
    assert blk.total_us == pytest.approx(1000)
    assert res.traces[0].base_us == pytest.approx(2000)
    assert res.totals.attention_share == pytest.approx(0.5)


def test_result_dataclasses_are_keyword_only():
    for cls in (BlockResult, Totals, Attribution):
        assert all(f.kw_only for f in dataclasses.fields(cls)), cls
    with pytest.raises(TypeError):
        Totals(1.0, zero_categories(), None, 0)  # type: ignore[misc]


def test_compiled_regions_outside_blocks_must_add_up(tmp_path):
    """Issue 38: the listed regions' name counts are their number, and each listing says why."""
    b = TraceBuilder()
    b.op("Torch-Compiled Region: 0/0", 10, 60)
    res = analyze(b.write(tmp_path / "t.json")).check()
    assert res.compiled_outside is not None and res.compiled_outside.regions == 1
    for broken in ({"regions": 2}, {"names": {"Torch-Compiled Region: 0/0": 1, "x": 1}}, {"reason": ""},
                   {"host_us": -1.0}):
        with pytest.raises(InvariantError):
            dataclasses.replace(res, compiled_outside=dataclasses.replace(res.compiled_outside, **broken)).check()


def test_check_without_arrays_skips_only_the_per_event_arrays(tmp_path):
    """check(arrays=False) (the CLI's attribute without --with-intervals) still checks every figure, and the
    arrays' lengths, but not each interval and gap element by element; check() checks those too."""
    from array import array

    b = TraceBuilder()
    attention_block(b, 1000)
    res = analyze(b.write(tmp_path / "t.json")).check()
    [blk] = res.blocks
    assert blk.intervals is not None and len(blk.intervals) > 0
    good = blk.intervals
    blk.intervals = dataclasses.replace(good, end_ns=array("q", [s - 1 for s in good.start_ns]))  # each ends first
    res.check(arrays=False)
    with pytest.raises(InvariantError, match="ends before it starts"):
        res.check()
    blk.intervals = dataclasses.replace(good, end_ns=good.end_ns[:-1])  # one end missing: a length, always checked
    with pytest.raises(InvariantError):
        res.check(arrays=False)
    blk.intervals = good
    blk.total_us += 1.0  # a figure: always checked
    with pytest.raises(InvariantError):
        res.check(arrays=False)
