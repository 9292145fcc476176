"""tracekit.analysis.compare on hand-built pairs (tests/support/pairs.py) whose answers are known by
construction: the kernels-changed rule on both sides of its boundaries, the headline's notes, pairing across
traces, steps and the fused-kernel fallback, the header and block warnings, the launch-bound note's words, the
conclusions, memory and rank pairs. Every diff is check()ed (support.pairs.diff)."""

from __future__ import annotations

import math
from functools import partial

import pytest
from support.builders import TraceBuilder
from support.pairs import (
    ADD, ADD_C, FLASH_C, GEMM, GEMM_C, H100, SOFTMAX_C, busy, cpu_trace, diff, eager, fused, no_steps, plain,
    steps_of, write,
)

from tracekit import analyze
from tracekit.analysis.compare import attention_sizes, diff_attributions, within_noise
from tracekit.results.attribution import EPS_US
from tracekit.results.diff import EAGER_TO_FUSED_ALLOC
from tracekit.vocab import Basis, Category
from tracekit.analysis.compare import median_step
from tracekit.results.diff import Figures
from tracekit.vocab import CATEGORIES, MATMUL_ROLES
from pathlib import Path
from tracekit.errors import InconclusiveError
from tracekit.vocab import Compared
from tracekit import diff_paths
from tracekit.analysis.gate import gate
from support.paths import requires_h200

PER_STEP_NOTE = ("beyond noise: the kernel's per-step count changed, or its median-step time moved by more than "
                 "(its per-step range before + after) / 2")
TOTAL_NOTE = ("no per-step noise estimate: a kernel changed when its count changed, or its time by more than 5% and "
              "1 µs (all steps)")


def with_adds(b: TraceBuilder, t0: float, adds=(), conv=(), gemm: float = 10, softmax: float = 5, extra=()) -> None:
    """An eager block (gemm, softmax) plus ADD kernels after it: ``adds`` launched by aten::add (elementwise),
    ``conv`` by aten::conv2d (other: a conv's kernels are conv time), ``extra`` (name, µs) by aten::mul."""
    eager(b, t0, gemm=gemm, softmax=softmax)
    k = t0 + 100 + 2 * gemm + softmax + 3
    t = t0 + 50
    for op, name, dur in ([("aten::add", ADD, x) for x in adds] + [("aten::conv2d", ADD, x) for x in conv]
                          + [("aten::mul", n, x) for n, x in extra]):
        b.op(op, t, 1.5)
        b.launch(name, t + 0.2, 1, k, dur)
        k += dur + 1
        t += 2


def _changed(r) -> list[tuple]:
    return [(k.name, k.category, k.before.category, k.before.count, k.before.total_us, k.after.category,
             k.after.count, k.after.total_us) for k in r.kernels_changed]


# ---------------------------------------------------------------------------------------------
# kernels_changed with per-step noise (three steps or more on both sides: issue 24)
# An eager block of gemm g: GEMM 2 kernels, 2·g µs per step; SOFTMAX one 5-µs kernel per step.


def test_kernel_time_beyond_its_per_step_noise(tmp_path):
    # GEMM per step: before 20, 24, 22 (median 22, range 4); after 26, 30, 28 (median 28, range 4): |Δ| 6 > 4.
    r = diff(write(tmp_path / "a.json", steps_of(eager, "gemm", [10, 12, 11])),
             write(tmp_path / "b.json", steps_of(eager, "gemm", [13, 15, 14])))
    assert r.noise is not None and r.kernels_changed_note == PER_STEP_NOTE
    assert _changed(r) == [(GEMM_C, "matmul", "matmul", 6, 66, "matmul", 6, 84)]  # SOFTMAX: same on both sides
    assert r.kernels_changed[0].delta_us == pytest.approx(18)


def test_kernel_time_within_its_per_step_noise(tmp_path):
    # GEMM per step after: 23.5, 27.5, 25.5 (median 25.5): |Δ| 3.5 <= (4 + 4) / 2. Over all steps 66 → 76.5 µs,
    # which the rule without noise (5 % and 1 µs) would call a change.
    r = diff(write(tmp_path / "a.json", steps_of(eager, "gemm", [10, 12, 11])),
             write(tmp_path / "b.json", steps_of(eager, "gemm", [11.75, 13.75, 12.75])))
    assert r.noise is not None and r.kernels_changed_note == PER_STEP_NOTE
    assert r.kernels_changed == []


def test_two_steps_a_side_use_the_rule_without_noise(tmp_path):
    # Issue 24: two steps give no noise estimate, so the 5 % / 1 µs rule decides, and the note says why. GEMM over
    # all steps 44 → 51 µs (2 steps of 2 kernels): beyond 5 % and 1 µs, though within the per-step ranges.
    r = diff(write(tmp_path / "a.json", steps_of(eager, "gemm", [10, 12])),
             write(tmp_path / "b.json", steps_of(eager, "gemm", [11.75, 13.75])))
    assert r.noise is not None and r.noise.within_noise is None
    assert r.kernels_changed_note == ("noise unknown (fewer than 3 steps on a side): a kernel changed when its count "
                                      "changed, or its time by more than 5% and 1 µs (all steps)")
    assert _changed(r) == [(GEMM_C, "matmul", "matmul", 4, 44, "matmul", 4, 51)]


def test_kernel_count_moved_with_time_within_noise(tmp_path):
    # ADD: before one 4-µs kernel per step, after two 2-µs kernels: the same time, twice the count.
    r = diff(write(tmp_path / "a.json", [[partial(with_adds, adds=[4])]] * 3),
             write(tmp_path / "b.json", [[partial(with_adds, adds=[2, 2])]] * 3))
    assert r.noise is not None and r.noise.known
    assert _changed(r) == [(ADD_C, "elementwise", "elementwise", 3, 12, "elementwise", 6, 12)]


def test_counts_moved_and_changes_sorted_by_size(tmp_path):
    # After: two blocks per step: GEMM 4 → 8 kernels (44 → 88 µs), SOFTMAX 2 → 4 (10 → 20 µs).
    two = [[partial(eager, name="layer0.attention", gemm=g), partial(eager, name="layer1.attention", gemm=g)]
           for g in (10, 12)]
    r = diff(write(tmp_path / "a.json", steps_of(eager, "gemm", [10, 12])), write(tmp_path / "b.json", two))
    assert _changed(r) == [(GEMM_C, "matmul", "matmul", 4, 44, "matmul", 8, 88),
                           (SOFTMAX_C, "softmax", "softmax", 2, 10, "softmax", 4, 20)]


@pytest.mark.parametrize("x,changed", [(7.5, False), (8.5, True)])
def test_a_step_without_the_kernel_counts_zero(tmp_path, x, changed):
    # ADD before: 4 µs in each of three steps (median 4, range 0). After: x µs in two steps, none in the third:
    # median x, range x (the missing step counts 0); counts 1, 1, 1 → 1, 1, 0 (median 1 both). |Δ| = x - 4 against
    # x / 2: 3.5 <= 3.75 at x = 7.5, 4.5 > 4.25 at x = 8.5.
    before = write(tmp_path / "a.json", [[partial(with_adds, adds=[4])]] * 3)
    after = write(tmp_path / "b.json", [[partial(with_adds, adds=[x])]] * 2 + [[with_adds]])
    r = diff(before, after)
    want = [(ADD_C, "elementwise", "elementwise", 3, 12, "elementwise", 2, 2 * x)] if changed else []
    assert _changed(r) == want
    back = diff(after, before)
    assert _changed(back) == ([(ADD_C, "elementwise", "elementwise", 2, 2 * x, "elementwise", 3, 12)]
                              if changed else [])


@pytest.mark.parametrize("forward", [True, False])
def test_median_count_over_an_even_number_of_steps(tmp_path, forward):
    # ADD before: one 5-µs kernel in each of four steps (median count 1, time 5, range 0). Other side: two 5.5-µs
    # kernels in each of the first two steps, none in the last two: median count (2 + 0) / 2 = 1, median time
    # (11 + 0) / 2 = 5.5, range 11. Counts did not move and |Δ| 0.5 <= 5.5: no change, though the totals differ
    # (20 vs 22 µs: more than 5 % and 1 µs, which the rule without noise would call a change).
    a = write(tmp_path / "a.json", [[partial(with_adds, adds=[5])]] * 4)
    b = write(tmp_path / "b.json", [[partial(with_adds, adds=[5.5, 5.5])]] * 2 + [[with_adds]] * 2)
    r = diff(a, b) if forward else diff(b, a)
    assert r.noise is not None and r.noise.known and r.kernels_changed == []


def test_one_kernel_filed_under_two_categories_per_step(tmp_path):
    # ADD before per step: 3 + 3 µs, 4 + 4, 3.5 + 3.5, one kernel by aten::add, one by aten::conv2d: two rows per
    # step, 2 kernels, median 7, range 2. After: both by aten::add, 3 + 3.5, 4 + 4, 3.5 + 4.5: median 8, range
    # 1.5. Counts 2 and 2, |Δ| 1 <= 1.75: no change (over all steps 21 → 22.5 µs, which the rule without noise,
    # 5 % and 1 µs, would call one).
    steps = [partial(with_adds, adds=[x], conv=[x]) for x in (3, 4, 3.5)]
    r = diff(write(tmp_path / "a.json", [[f] for f in steps]),
             write(tmp_path / "b.json", [[partial(with_adds, adds=xs)] for xs in ([3, 3.5], [4, 4], [3.5, 4.5])]))
    assert r.noise is not None and r.noise.known and r.kernels_changed == []


# ---------------------------------------------------------------------------------------------
# kernels_changed without per-step noise (one step each): count changed, or |Δ| > max(5 % of before, 1 µs)


def _one_step(tmp_path, before, after):
    r = diff(write(tmp_path / "a.json", [[before]]), write(tmp_path / "b.json", [[after]]))
    assert r.noise is None and r.kernels_changed_note == TOTAL_NOTE
    return r


@pytest.mark.parametrize("gemm_after,changed", [(52.5, False), (52.75, True)])
def test_time_threshold_is_five_percent(tmp_path, gemm_after, changed):
    # GEMM 2 · 50 = 100 µs before; after 105 (|Δ| 5, not more than 5 % of 100) or 105.5.
    r = _one_step(tmp_path, partial(eager, gemm=50), partial(eager, gemm=gemm_after))
    want = [(GEMM_C, "matmul", "matmul", 2, 100, "matmul", 2, 2 * gemm_after)] if changed else []
    assert _changed(r) == want


@pytest.mark.parametrize("softmax_after,changed", [(5.9, False), (6.5, True)])
def test_time_threshold_has_a_one_microsecond_floor(tmp_path, softmax_after, changed):
    # SOFTMAX 5 µs: 5 % is 0.25 µs, so the 1-µs floor decides: 0.9 µs is no change, 1.5 µs is.
    r = _one_step(tmp_path, partial(eager, softmax=5), partial(eager, softmax=softmax_after))
    want = [(SOFTMAX_C, "softmax", "softmax", 1, 5, "softmax", 1, softmax_after)] if changed else []
    assert _changed(r) == want


def test_count_change_with_equal_time_and_a_gone_kernel_first(tmp_path):
    # ADD: two 2-µs kernels before, one 4-µs after (same time, other count). MUL (200 µs, the costliest kernel)
    # is only before: not a change, and the kernels after it in the table are still looked at.
    mul = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float> >(int)"
    r = _one_step(tmp_path, partial(with_adds, adds=[2, 2], extra=[(mul, 200)]), partial(with_adds, adds=[4]))
    assert _changed(r) == [(ADD_C, "elementwise", "elementwise", 2, 4, "elementwise", 1, 4)]


def test_kernel_rows_of_two_categories_are_summed(tmp_path):
    # Before: ADD by aten::conv2d 3 µs (other, the costlier row) and by aten::add 2 µs (elementwise): 2 kernels,
    # 5 µs, filed under its costliest row, other. After: three by aten::add, 9 µs: elementwise.
    r = _one_step(tmp_path, partial(with_adds, adds=[2], conv=[3]), partial(with_adds, adds=[3, 3, 3]))
    assert _changed(r) == [(ADD_C, "elementwise", "other", 2, 5, "elementwise", 3, 9)]


# ---------------------------------------------------------------------------------------------
# The noise rule and the medians


def test_within_noise_bound_is_inclusive():
    edge = 1.0 + EPS_US
    assert within_noise(edge, 1.0) is True and within_noise(-edge, 1.0) is True
    assert within_noise(edge + 1e-6, 1.0) is False


def test_spread_medians_of_two_and_three_steps(tmp_path):
    # Steps of eager blocks: 2·g + 5 µs each.
    r = diff(write(tmp_path / "a.json", steps_of(eager, "gemm", [10, 14])),  # 25, 33: median 29
             write(tmp_path / "b.json", steps_of(eager, "gemm", [20, 10, 11])))  # 45, 25, 27: median 27
    assert (r.noise.before.min_us, r.noise.before.median_us, r.noise.before.max_us) == (25, 29, 33)
    assert (r.noise.after.min_us, r.noise.after.median_us, r.noise.after.max_us) == (25, 27, 45)
    assert r.noise.before.totals_us == [25, 33] and r.noise.after.totals_us == [45, 25, 27]
    assert (r.before_figures.total_us, r.after_figures.total_us) == (29, 27)
    assert r.noise_note == ("noise unknown: before 2 steps, after 3 steps; a per-step spread needs at least 3 "
                            "steps on each side")  # issue 24: two steps before are too few
    assert r.noise.within_noise is None
    assert r.basis_note == ("per-step median: the median step by attention time (before 2 steps, after 3); an even "
                            "count averages the middle two")


def test_equal_step_totals_pick_a_median(tmp_path):
    p = write(tmp_path / "a.json", steps_of(eager, "gemm", [10, 10, 10]))
    r = diff(p, p)
    assert r.before_figures.total_us == 25 and r.noise.within_noise is True and r.kernels_changed == []
    assert r.categories["matmul"].share_of_delta is None  # no delta: no shares
    assert r.categories["matmul"].ratio == 1


def test_steps_with_equal_totals_and_different_splits(tmp_path):
    # Step 5: gemm 10, softmax 5 (25 µs); step 6: gemm 9, softmax 7 (25 µs). The median of two is their mean.
    steps = [[partial(eager, gemm=10, softmax=5)], [partial(eager, gemm=9, softmax=7)]]
    p = write(tmp_path / "a.json", steps)
    r = diff(p, p)
    assert r.before_figures.total_us == 25
    assert r.before_figures.categories["matmul"] == 19 and r.before_figures.categories["softmax"] == 6


def test_steps_listed_only_on_the_per_step_basis(tmp_path):
    r = diff(write(tmp_path / "a.json", [[eager]]), write(tmp_path / "b.json", [[fused]]))
    assert r.basis == Basis.TOTAL and r.steps_before == [] and r.steps_after == []
    assert r.basis_note == "whole-trace totals (one step each)"
    assert r.noise_note == "no noise estimate possible: before has one step; after has one step"


# ---------------------------------------------------------------------------------------------
# Basis notes, step warnings


def test_no_steps_on_either_side(tmp_path):
    r = diff(no_steps(tmp_path / "a.json", eager), no_steps(tmp_path / "b.json", fused))
    assert r.basis == Basis.TOTAL and r.basis_note == "whole-trace totals"
    assert r.noise_note == "no noise estimate possible: before has no ProfilerStep; after has no ProfilerStep"
    assert not any("whole-trace totals may cover" in w for w in r.warnings)


def test_one_step_against_none(tmp_path):
    r = diff(write(tmp_path / "a.json", [[eager]]), no_steps(tmp_path / "b.json", fused))
    assert r.basis_note == "whole-trace totals"
    assert r.noise_note == "no noise estimate possible: before has one step; after has no ProfilerStep"
    assert "before has 1 step and after no ProfilerStep: whole-trace totals may cover different amounts of work" \
        in r.warnings
    r2 = diff(no_steps(tmp_path / "c.json", eager), write(tmp_path / "d.json", [[fused], [fused]]))
    assert r2.basis_note == "whole-trace totals"
    assert "before has no ProfilerStep and after 2 steps: whole-trace totals may cover different amounts of work" \
        in r2.warnings


@pytest.mark.parametrize("outside", [1, 2])
def test_blocks_outside_every_step(tmp_path, outside):
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    b.annotation("ProfilerStep#1", 990, 1020)
    eager(b, 1000)
    b.annotation("ProfilerStep#2", 1990, 1020)
    eager(b, 2000)
    for i in range(outside):  # after the last step
        eager(b, 4000 + 1000 * i, name=f"layer{i + 1}.attention")
    before = b.write(tmp_path / "a.json")
    r = diff(before, write(tmp_path / "b.json", [[eager], [eager]]))
    assert r.basis == Basis.TOTAL and r.steps_before == [] and r.noise is None
    plural = "s" if outside != 1 else ""
    assert r.noise_note == f"no noise estimate possible: {outside} block{plural} of before lie outside any ProfilerStep"


# ---------------------------------------------------------------------------------------------
# Category deltas


def test_share_of_an_unchanged_category_is_positive_zero(tmp_path):
    # Softmax 5 → 5 while the total falls 25 → 21 (gemm 10 → 8): its share is 0.0, not -0.0.
    r = diff(write(tmp_path / "a.json", [[eager]]), write(tmp_path / "b.json", [[partial(eager, gemm=8)]]))
    sm = r.categories["softmax"]
    assert sm.share_of_delta == 0 and math.copysign(1, sm.share_of_delta) == 1
    assert r.categories["matmul"].share_of_delta == pytest.approx(1)
    assert r.categories["matmul"].ratio == pytest.approx(16 / 20)


def test_ratio_of_a_category_under_one_microsecond(tmp_path):
    r = diff(write(tmp_path / "a.json", [[partial(eager, softmax=0.5)]]),
             write(tmp_path / "b.json", [[partial(eager, softmax=1.5)]]))
    assert r.categories["softmax"].ratio == pytest.approx(3)
    assert r.categories["fused_attention"].ratio is None


# ---------------------------------------------------------------------------------------------
# Pairing


def test_blocks_pair_within_their_own_trace_of_a_folder(tmp_path):
    # Before: trace a with 2 blocks, trace b with 1; after: a with 1, b with 2. Blocks pair within a trace.
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    no_steps(before / "a.json", partial(eager, gemm=1), partial(eager, gemm=2))
    no_steps(before / "b.json", partial(eager, gemm=3))
    no_steps(after / "a.json", partial(eager, gemm=4))
    no_steps(after / "b.json", partial(eager, gemm=5), partial(eager, gemm=6))
    r = diff(before, after)
    busy_of = {1: 7, 2: 9, 3: 11, 4: 13, 5: 15, 6: 17}  # 2·g + 5
    assert sorted((p.before.total_us, p.after.total_us) for p in r.pairs) == [(busy_of[1], busy_of[4]),
                                                                              (busy_of[3], busy_of[5])]
    assert [b.total_us for b in r.unmatched_before] == [busy_of[2]]
    assert [b.total_us for b in r.unmatched_after] == [busy_of[6]]


def test_blocks_pair_within_their_step(tmp_path):
    # Before: step 1 has two blocks, step 2 one; after: step 1 one, step 2 two.
    two = [partial(eager, name="layer0.attention"), partial(eager, name="layer1.attention")]
    r = diff(write(tmp_path / "a.json", [two, [eager]]), write(tmp_path / "b.json", [[eager], two]))
    assert [(p.before.step, p.after.step, p.before.name) for p in r.pairs] == [
        (5, 5, "layer0.attention"), (6, 6, "layer0.attention")]
    assert [(b.step, b.name) for b in r.unmatched_before] == [(5, "layer1.attention")]
    assert [(b.step, b.name) for b in r.unmatched_after] == [(6, "layer1.attention")]


AITER = "aiter::fmha_fwd_hd128_bf16_rtz"


def _replays(path, kernels, annotated_first=False):
    """Graph replays (no attention op on the host): one fused-kernel block per kernel name, 30 µs each, each run
    ended by a non-attention add kernel; optionally an annotated eager block before them."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "AMD Instinct MI300X"}])
    b.annotation("ProfilerStep#3", 0, 9000)
    t = 100
    if annotated_first:
        eager(b, t)
        t += 1000
    for name in kernels:
        b.op("xdit::denoise_step", t, 50)
        b.launch(name, t + 1, 2, t + 1000, 30)
        b.launch(ADD, t + 7, 2, t + 1040, 4)
        t += 200
    return b.write(path)


@pytest.mark.parametrize("forward", [True, False])
def test_fused_kernel_fallback_skips_blocks_paired_by_kind(tmp_path, forward):
    # aiter, aiter against aiter, sage: the first aiters pair by kind, the second aiter with sage by position.
    a, s = _replays(tmp_path / "a.json", [AITER, AITER]), _replays(tmp_path / "s.json", [AITER, "sage_fwd"])
    r = diff(a, s) if forward else diff(s, a)
    got = sorted((p.before.name, p.after.name, p.paired_by) for p in r.pairs)
    if forward:
        assert got == [(AITER, AITER, "kind"), (AITER, "sage_fwd", "fused-kernel")]
    else:
        assert got == [(AITER, AITER, "kind"), ("sage_fwd", AITER, "fused-kernel")]
    assert r.unmatched_before == r.unmatched_after == []


def test_fused_kernel_fallback_after_an_annotated_block(tmp_path):
    r = diff(_replays(tmp_path / "a.json", [AITER], annotated_first=True),
             _replays(tmp_path / "s.json", ["sage_fwd"], annotated_first=True))
    assert sorted((p.before.name, p.after.name, p.paired_by) for p in r.pairs) == [
        (AITER, "sage_fwd", "fused-kernel"), ("layer0.attention", "layer0.attention", "kind")]


# ---------------------------------------------------------------------------------------------
# Block warnings


def test_sides_found_differently_but_paired(tmp_path):
    # Before: an annotated block and an inferred one (mixer0); after: the annotated block only. One pair.
    a = write(tmp_path / "a.json", [[eager, partial(eager, name="mixer0")]])
    b = write(tmp_path / "b.json", [[eager]])
    r = diff(a, b)
    assert len(r.pairs) == 1
    assert ("the sides found blocks differently: before by annotation, inferred, after by annotation (e.g. a trace "
            "with module stacks against one without); blocks pair only within one mode") in r.warnings
    assert r.no_claim.startswith("launch-bound") and "no block pairs" not in r.no_claim
    back = diff(b, a)
    assert ("the sides found blocks differently: before by annotation, after by annotation, inferred (e.g. a trace "
            "with module stacks against one without); blocks pair only within one mode") in back.warnings


def test_sides_found_differently_and_nothing_paired(tmp_path):
    # Before: annotated + inferred; after: a fused-op block (mixer0 around SDPA). No kind is on both sides.
    a = write(tmp_path / "a.json", [[eager, partial(eager, name="mixer0")]])
    b = write(tmp_path / "b.json", [[partial(fused, name="mixer0")]])
    r = diff(a, b)
    assert r.pairs == []
    assert r.no_claim.endswith("capture CUDA graphs; no block pairs: before found blocks by annotation, inferred, "
                               "after by fused-op, so the totals may cover different code; profile both the same way")
    back = diff(b, a)
    assert back.no_claim.endswith("no block pairs: before found blocks by fused-op, after by annotation, inferred, so "
                                  "the totals may cover different code; profile both the same way")


def test_same_finding_mode_gives_no_mode_warning(tmp_path):
    r = diff(write(tmp_path / "a.json", [[eager]]), write(tmp_path / "b.json", [[fused]]))
    assert r.warnings == [] and len(r.pairs) == 1


def test_no_blocks_on_one_side_or_both(tmp_path):
    empty = write(tmp_path / "e.json", [[plain]])
    full = write(tmp_path / "f.json", [[eager]])

    def blocks_said(r):
        return [w for w in r.warnings if "attention blocks" in w]

    r = diff(empty, full)
    assert blocks_said(r) == [f"no attention blocks in before ({r.before.source})"]
    r = diff(full, empty)
    assert blocks_said(r) == [f"no attention blocks in after ({r.after.source})"]
    assert r.before.source != r.after.source
    r = diff(empty, empty)
    assert r.warnings == ["no attention blocks on either side (try --scope REGEX to name your attention modules)"]


# ---------------------------------------------------------------------------------------------
# The launch-bound note: idle shares and how busy time and span moved
# Eager (launch-bound): span 102 + busy, idle 102. busy(fused 0.5): busy 0.5, span 0.5, idle 0 (not launch-bound).


def _note(tmp_path, before, after):
    r = diff(write(tmp_path / "a.json", [[before]]), write(tmp_path / "b.json", [[after]]))
    assert r.launch_bound
    return r.no_claim


TAIL = "; measure latency outside the profiler or capture CUDA graphs"


def test_launch_note_falls(tmp_path):
    # Busy 25 → 6 (gemm 0.5): 4.17×; span 127 → 108: 1.18×; idle 102/127 = 80 %, 102/108 = 94 %.
    assert _note(tmp_path, eager, partial(eager, gemm=0.5)) == (
        "launch-bound: the GPU is idle 80% / 94% of the attention blocks; busy time falls 4.17×, profiled span "
        "falls 1.18×" + TAIL)


def test_launch_note_rises_ten_times(tmp_path):
    # Busy 2.5 (gemm 0.5, softmax 1.5) → 25: exactly 10×, one decimal; span 104.5 → 127: 1.22×.
    assert _note(tmp_path, partial(eager, gemm=0.5, softmax=1.5), eager) == (
        "launch-bound: the GPU is idle 98% / 80% of the attention blocks; busy time rises 10.0×, profiled span "
        "rises 1.22×" + TAIL)


def test_launch_note_unchanged(tmp_path):
    assert _note(tmp_path, eager, eager) == (
        "launch-bound: the GPU is idle 80% / 80% of the attention blocks; busy time is unchanged, profiled span "
        "is unchanged" + TAIL)


def test_launch_note_with_a_side_under_one_microsecond(tmp_path):
    # Before: busy(fused 0.5) (not launch-bound): busy 0.5, span 0.5, idle 0 %. After: eager gemm 0.5: busy 6 (12×),
    # span 108 (216×).
    half = busy(partial(fused, flash=0.5))
    assert _note(tmp_path, half, partial(eager, gemm=0.5)) == (
        "launch-bound: the GPU is idle 0% / 94% of the attention blocks; busy time rises 12.0×, profiled span "
        "rises 216.0×" + TAIL)
    assert _note(tmp_path, partial(eager, gemm=0.5), half) == (
        "launch-bound: the GPU is idle 94% / 0% of the attention blocks; busy time falls 12.0×, profiled span "
        "falls 216.0×" + TAIL)


def test_launch_note_with_no_blocks_on_a_side(tmp_path):
    lb = write(tmp_path / "lb.json", [[partial(eager, gemm=0.5)]])
    none = write(tmp_path / "none.json", [[plain]])
    assert diff(none, lb).no_claim == (
        "launch-bound: the GPU is idle n/a / 94% of the attention blocks; busy time goes 0.0 µs → 6.0 µs, profiled "
        "span goes 0.0 µs → 108.0 µs" + TAIL)
    assert diff(lb, none).no_claim == (
        "launch-bound: the GPU is idle 94% / n/a of the attention blocks; busy time goes 6.0 µs → 0.0 µs, profiled "
        "span goes 108.0 µs → 0.0 µs" + TAIL)


# ---------------------------------------------------------------------------------------------
# Conclusions and memory

MIB = 1 << 20


def _conclusions(tmp_path, before, after):
    r = diff(write(tmp_path / "a.json", [[before]]), write(tmp_path / "b.json", [[after]]))
    return r, r.conclusions == [EAGER_TO_FUSED_ALLOC]


def test_eager_to_fused_with_less_memory_is_concluded(tmp_path):
    r, said = _conclusions(tmp_path, partial(eager, alloc=4 * MIB), partial(fused, alloc=MIB))
    assert said
    assert (r.alloc.before_bytes, r.alloc.after_bytes, r.alloc.before_blocks, r.alloc.after_blocks) == (
        4 * MIB, MIB, 1, 1)


def test_conclusion_needs_memory_on_both_sides(tmp_path):
    r, said = _conclusions(tmp_path, eager, fused)
    assert r.alloc is None and not said


def test_conclusion_needs_less_memory(tmp_path):
    assert not _conclusions(tmp_path, partial(eager, alloc=MIB), partial(fused, alloc=MIB))[1]


def test_conclusion_needs_softmax_before(tmp_path):
    assert not _conclusions(tmp_path, partial(fused, alloc=4 * MIB), partial(fused, alloc=MIB))[1]


def test_conclusion_with_a_short_softmax_and_a_short_flash(tmp_path):
    assert _conclusions(tmp_path, partial(eager, softmax=0.5, alloc=4 * MIB), partial(fused, flash=0.5, alloc=MIB))[1]


def test_conclusion_needs_fused_attention_after(tmp_path):
    def gemms_only(b, t0):  # the QKᵀ and PV products with host-only softmax: an attention block with no softmax time
        b.annotation("layer0.attention", t0, 60)
        b.op("aten::bmm", t0 + 1, 8)
        b.launch(GEMM, t0 + 2, 1, t0 + 100, 10)
        b.op("aten::_softmax", t0 + 20, 0.4)
        b.op("aten::bmm", t0 + 40, 8)
        b.launch(GEMM, t0 + 41, 2, t0 + 111, 10)
        b.memory(t0 + 22, MIB)

    r, said = _conclusions(tmp_path, partial(eager, alloc=4 * MIB), gemms_only)
    assert r.categories["softmax"].after_us == 0 and r.categories["fused_attention"].after_us == 0
    assert r.after.blocks and not said


def test_memory_blocks_are_counted_per_side(tmp_path):
    a = write(tmp_path / "a.json", [[partial(eager, name="layer0.attention", alloc=MIB),
                                     partial(eager, name="layer1.attention", alloc=2 * MIB)]])
    b = write(tmp_path / "b.json", [[partial(fused, alloc=MIB)]])
    r = diff(a, b)
    assert (r.alloc.before_bytes, r.alloc.before_blocks, r.alloc.after_bytes, r.alloc.after_blocks) == (
        3 * MIB, 2, MIB, 1)


# ---------------------------------------------------------------------------------------------
# Headers: devices, time bases, shapes


def test_devices_differ_with_none_listed_and_two_listed(tmp_path):
    two = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}, {"id": 1, "name": "NVIDIA A100-SXM4-80GB"}])
    eager(two, 1000)
    none = TraceBuilder()
    eager(none, 1000)
    a, b = two.write(tmp_path / "two.json"), none.write(tmp_path / "none.json")
    assert ("devices differ: before NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3, after no GPU listed (the change "
            "includes the hardware)") in diff(a, b).warnings
    assert ("devices differ: before no GPU listed, after NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3 (the change "
            "includes the hardware)") in diff(b, a).warnings


def test_kernel_unit_by_time_base(tmp_path):
    cpu = cpu_trace(tmp_path / "cpu.json")
    assert diff(cpu, cpu).kernel_unit == "op"
    folder = tmp_path / "mixed"
    folder.mkdir()
    write(folder / "gpu.json", [[eager]])
    cpu_trace(folder / "cpu.json")
    assert diff(folder, folder).kernel_unit == "mixed"


def _unshaped(b, t0):
    """An SDPA block without recorded input dims: no shapes at all."""
    b.annotation("layer0.attention", t0, 60)
    b.op("aten::scaled_dot_product_attention", t0 + 1, 20)
    b.op("aten::_scaled_dot_product_flash_attention", t0 + 2, 18)
    b.launch("void pytorch_flash::flash_fwd_kernel<Params>(Params)", t0 + 3, 2, t0 + 100, 12)


def test_shapes_differ_when_one_side_records_none(tmp_path):
    a = write(tmp_path / "a.json", [[partial(eager, n=256)]])
    b = write(tmp_path / "b.json", [[_unshaped]])
    want = "attention op input shapes differ: before aten::_softmax[[1, 2, 256, 256], [], []]; after none recorded"
    assert diff(a, b).warnings == [want]
    assert diff(b, a).warnings == [
        "attention op input shapes differ: before none recorded; after aten::_softmax[[1, 2, 256, 256], [], []]"]


def test_shapes_list_the_first_and_count_the_rest(tmp_path):
    a = write(tmp_path / "a.json", [[partial(eager, name="layer0.attention", n=256),
                                     partial(eager, name="layer1.attention", n=128)]])
    b = write(tmp_path / "b.json", [[_unshaped]])
    assert diff(a, b).warnings == [("attention op input shapes differ: before aten::_softmax[[1, 2, 128, 128], [], []] "
                                    "(+1 more); after none recorded")]


def test_sizes_listed_sorted(tmp_path):
    a = write(tmp_path / "a.json", [[partial(eager, name="layer0.attention", n=256),
                                     partial(eager, name="layer1.attention", n=128)]])
    b = write(tmp_path / "b.json", [[partial(fused, n=256)]])
    assert diff(a, b).warnings == [("attention sizes differ (batch·heads, query length, key length): before "
                                    "(2, 128, 128), (2, 256, 256), after (2, 256, 256)")]


def test_attention_sizes_per_layout():
    # SDPA [..., L, d] with 3-D inputs; key length from the second input.
    assert attention_sizes([("aten::scaled_dot_product_attention", [[8, 128, 64], [8, 512, 64]])]) == {(8, 128, 512)}
    assert attention_sizes([("aten::scaled_dot_product_attention", [[2, 3, 128, 64], [2, 3, 512, 64]])]) \
        == {(6, 128, 512)}
    # Only q recorded: no key length, no size.
    assert attention_sizes([("aten::scaled_dot_product_attention", [[2, 3, 128, 64]])]) == set()
    # [B, N, H, d] for the mem-efficient forward too.
    assert attention_sizes([("aten::_efficient_attention_forward", [[2, 100, 4, 64], [2, 300, 4, 64]])]) \
        == {(8, 100, 300)}
    # Softmax over [..., Lq, Lk], 3-D and rectangular.
    assert attention_sizes([("aten::softmax", [[8, 128, 256]])]) == {(8, 128, 256)}
    assert attention_sizes([("aten::_softmax", [[2, 3, 128, 256], [], []])]) == {(6, 128, 256)}
    # bmm is ambiguous even with 4-D inputs.
    assert attention_sizes([("aten::bmm", [[1, 2, 3, 4], [1, 2, 4, 3]])]) == set()


def test_attention_sizes_skip_what_they_cannot_read():
    good = ("aten::softmax", [[1, 2, 4, 4]])
    for bad in (("garbage", []), ("aten::softmax", "oops"), ("aten::softmax", [[1, 2, 4, 4], 5]), ("aten::softmax", []),
                ("", [[1, 2, 4, 4]]), ("x", [[1, 2, 4, 4]])):
        assert attention_sizes([bad, good]) == {(2, 4, 4)}, bad
        assert attention_sizes([bad]) == set(), bad


# ---------------------------------------------------------------------------------------------
# diff_attributions on two results directly, and rank pairs


def test_diff_of_two_attributions_keeps_their_sources_and_notes(tmp_path):
    a = analyze(write(tmp_path / "a.json", steps_of(eager, "gemm", [10, 12, 11]))).check()
    b = analyze(write(tmp_path / "b.json", steps_of(eager, "gemm", [13, 15, 14]))).check()
    r = diff_attributions(a, b).check()
    assert r.labels == (a.source, b.source) and a.source != b.source
    assert r.kernels_changed_note == PER_STEP_NOTE and len(r.kernels_changed) == 1
    assert r.ranks == []


def _rank_folder(path, ranks):
    path.mkdir()
    for rank, blocks in ranks.items():
        b = TraceBuilder(distributedInfo={"backend": "nccl", "rank": rank, "world_size": 4})
        for i in range(blocks):
            eager(b, 1000.0 * (i + 1), name=f"layer{i}.attention")
        b.write(path / f"worker_rank{rank}.pt.trace.json")
    return path


def test_ranks_pair_by_number(tmp_path):
    before = _rank_folder(tmp_path / "before", {0: 1, 1: 2})
    after = _rank_folder(tmp_path / "after", {1: 1, 2: 3})
    r = diff(before, after)
    got = [(p.rank, p.before and p.before.blocks, p.after and p.after.blocks) for p in r.ranks]
    assert got == [(0, 1, None), (1, 2, 1), (2, None, 3)]
    assert r.ranks[1].delta_us == pytest.approx(-25)  # one eager block of 25 µs fewer


def test_no_rank_pairs_against_a_single_file(tmp_path):
    before = _rank_folder(tmp_path / "before", {0: 1, 1: 2})
    single = write(tmp_path / "one.json", [[eager]])
    assert diff(before, single).ranks == [] and diff(single, before).ranks == []


def test_fused_names_compact(tmp_path):
    r = diff(write(tmp_path / "a.json", [[eager]]), write(tmp_path / "b.json", [[fused]]))
    assert [k.name for k in r.only_after] == [FLASH_C]
    assert {k.category for k in r.only_after} == {Category.FUSED_ATTENTION}


# ---------------------------------------------------------------------------------------------
# The median step: its matmul roles are None, not an empty value, when a median step has none (results/diff.py:
# "None if a block lacks roles"); the whole-step figure on each basis; replays against eager

def _fig(total: float, roles: dict[str, float] | None) -> Figures:
    cats = dict.fromkeys(CATEGORIES, 0.0)
    cats[CATEGORIES[0]] = total
    return Figures(total_us=total, categories=cats, matmul_roles=roles, span_us=total, idle_us=0.0)


def test_median_step_without_roles_has_none():
    """One step (the only one, so the median) without roles: the median step's roles are None exactly."""
    m = median_step([(0, _fig(10.0, None))])
    assert m.matmul_roles is None
    assert m.total_us == 10.0


def test_median_of_two_steps_one_without_roles_has_none_and_both_with_roles_average():
    """Two steps, 10 and 30 µs: the median is the mean of both (20 µs); one lacks roles, so the median has none.
    With roles on both (first role 4 and 8 µs) the median's first role is (4 + 8) / 2 = 6 µs."""
    r1 = dict.fromkeys(MATMUL_ROLES, 0.0) | {MATMUL_ROLES[0]: 4.0}
    r2 = dict.fromkeys(MATMUL_ROLES, 0.0) | {MATMUL_ROLES[0]: 8.0}
    m = median_step([(0, _fig(10.0, r1)), (1, _fig(30.0, None))])
    assert m.total_us == 20.0 and m.matmul_roles is None
    both = median_step([(0, _fig(10.0, r1)), (1, _fig(30.0, r2))])
    assert both.matmul_roles is not None and both.matmul_roles[MATMUL_ROLES[0]] == 6.0


def test_noise_note_with_three_steps_a_side(tmp_path):
    """Three steps on each side (NOISE_MIN_STEPS): the noise is known, and the note says which rule applies."""
    from support.pairs import diff, eager, write

    r = diff(write(tmp_path / "a.json", [[eager]] * 3), write(tmp_path / "b.json", [[eager]] * 3))
    assert r.noise is not None and r.noise.known
    assert r.noise_note == ("per-step spread: before 3 steps, after 3 steps; within noise when |Δ| <= "
                            "(range before + range after) / 2")


def test_replay_before_eager_names_the_before_side_as_the_replay(tmp_path):
    """test_graphs' eager-against-replay diff the other way round: the replay (mapped to Attention_0/1 through the
    capture beside it) is *before*; the eager side is launch-bound (each kernel waits 30 µs), so the note advises
    comparing spans and names the side that replays: "before replays CUDA/HIP graphs"."""
    from support.builders import eager_layers as _eager_layers, graph_pair as _pair

    from tracekit import diff

    eager = TraceBuilder()
    _eager_layers(eager, 2)
    replay, cap, _ = _pair(tmp_path)
    (tmp_path / "capture_traces").mkdir()
    cap.rename(tmp_path / "capture_traces" / "capture.json")
    (tmp_path / "capture_traces" / "execution_details.json").write_text('[{"file": "capture.json"}]')
    r = diff(replay, eager.write(tmp_path / "eager.json"), jobs=1)
    assert r is not None
    assert "before replays CUDA/HIP graphs" in r.no_claim and "capture CUDA graphs" not in r.no_claim


# Three steps whose attention order and whole-step busy order differ (eager: 2·gemm + softmax 5 µs of attention;
# plain: an add kernel no block owns):
#   step 5: gemm 5 → attention 15 µs, + 60 µs add → busy 75 µs
#   step 6: gemm 10 → attention 25 µs             → busy 25 µs
#   step 7: gemm 15 → attention 35 µs, + 100 µs add → busy 135 µs
# The median by attention is step 6; the median by whole-step busy (25, 75, 135) is step 5.
def _three_steps(path):
    from functools import partial

    from support.pairs import eager, plain, write

    return write(path, [[partial(eager, gemm=5), partial(plain, add=60)], [eager],
                        [partial(eager, gemm=15), partial(plain, add=100)]])


def test_whole_step_follows_the_attention_median_on_the_median_step_basis(tmp_path):
    """Both sides per-step (3 steps each): the whole step shown is the headline's median step, step 6 (25 µs)."""
    from support.pairs import diff

    r = diff(_three_steps(tmp_path / "a.json"), _three_steps(tmp_path / "b.json"))
    assert r.basis == "median_step"
    assert r.step_before.steps == [6] and r.step_after.steps == [6]
    assert r.step_after.busy_us == 25.0


def test_whole_step_is_the_sides_own_median_on_the_totals_basis(tmp_path):
    """The after side has its block outside any ProfilerStep, so the attention headline is whole-trace totals; the
    before side's whole step is still its own median by attention, step 6 (25 µs busy, not step 5's 75 µs by busy):
    the step its attribution headlines (issue 37), so attribute and diff cannot disagree."""
    from support.pairs import diff, eager, no_steps

    from tracekit.results.steps import per_step

    r = diff(_three_steps(tmp_path / "a.json"), no_steps(tmp_path / "b.json", eager))
    assert r.basis == "total"
    assert r.step_before.steps == [6] and r.step_before.busy_us == 25.0
    ps = per_step(r.before)
    assert (ps.median_steps, ps.busy_us, ps.span_us, ps.attention_us) == (
        r.step_before.steps, r.step_before.busy_us, r.step_before.span_us, r.step_before.attention_us)
    r = diff(no_steps(tmp_path / "c.json", eager), _three_steps(tmp_path / "d.json"))  # the other way round
    assert r.basis == "total"
    assert r.step_after.steps == [6] and r.step_after.busy_us == 25.0
    assert r.step_before is None and r.headline.basis is None and "before" in r.headline.note


FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Params)"


def test_a_replay_of_one_kernel_is_a_replay(tmp_path):
    """A graph launch that ran one 20 µs flash kernel (no capture: the kernel is its own block) against the
    launch-bound eager layers: one replayed kernel is enough for the before side to be named as replaying."""
    from support.builders import eager_layers as _eager_layers

    from support.builders import graph_launch
    from tracekit import diff

    one = TraceBuilder()
    graph_launch(one, 100, [(FLASH, 200, 20)])
    eager = TraceBuilder()
    _eager_layers(eager, 2)
    r = diff(one.write(tmp_path / "one.json"), eager.write(tmp_path / "eager.json"), jobs=1)
    assert "; before replays CUDA/HIP graphs, so compare the spans" in r.no_claim


def test_both_sides_replaying_launch_bound_graphs(tmp_path):
    """Both sides replay one captured attention call whose kernels (10, 5, 8 µs) sit 50 / 60 µs apart on the
    device: spans 123 / 143 µs, idle 100 / 120 µs, so both are launch-bound (idle > half the span), and the advice
    names both sides, plural verb: "before and after replay CUDA/HIP graphs"."""
    from support.builders import capture, graph_launch, replay_kernels
    from tracekit import diff

    def replay(path, gap):
        b = TraceBuilder()
        t = capture(b, 0, 1)
        ks, _ = replay_kernels(t + 200, 1, gap=gap)
        graph_launch(b, t + 100, ks)
        return b.write(path)

    r = diff(replay(tmp_path / "a.json", 50), replay(tmp_path / "b.json", 60), jobs=1)
    assert (r.before_figures.span_us, r.before_figures.idle_us) == (123.0, 100.0)
    assert (r.after_figures.span_us, r.after_figures.idle_us) == (143.0, 120.0)
    assert ("; before and after replay CUDA/HIP graphs, so compare the spans: a replay's span is its kernels' own, "
            "without launch gaps") in r.no_claim


def test_step_figures_have_no_roles_when_a_block_lacks_them(tmp_path):
    """One step, two eager blocks (each 2·10 µs GEMM + 5 µs softmax, the GEMMs split into score and context).
    With roles on both, the step's roles sum them (2 · 20 = 40 µs of matmul); with the first block's roles removed
    (a result without roles: "None if a block lacks roles"), the step has none rather than a partial sum."""
    from support.pairs import eager, write

    from tracekit import analyze
    from tracekit.analysis.compare import step_figures

    a = analyze(write(tmp_path / "a.json", [[eager, eager]])).check()
    ((step, f),) = step_figures(a)
    assert step == 5 and f.total_us == 50.0
    assert f.matmul_roles is not None and sum(f.matmul_roles.values()) == 40.0
    a.blocks[0].matmul_roles = None
    ((_, f),) = step_figures(a)
    assert f.total_us == 50.0 and f.matmul_roles is None


# ---------------------------------------------------------------------------------------------
# Folders of runs diffed run by run

def _sweep(root: Path, steps: tuple[int, int], blocks: dict[str, int]) -> Path:
    """A folder of runs, each one trace of two ProfilerSteps numbered ``steps``, run ``x`` holding ``blocks[x]``
    attention blocks per step (tests/support/builders.py's attention_block, 400 µs apart)."""
    from support.builders import attention_block
    for run, n in blocks.items():
        b = TraceBuilder()
        for k, s in enumerate(steps):
            t0 = k * 1000
            b.annotation(f"ProfilerStep#{s}", t0, 900)
            for j in range(n):
                attention_block(b, t0 + 10 + 400 * j)
        (root / run).mkdir(parents=True)
        b.write(root / run / "t.pt.trace.json")
    return root


def test_results_read_by_run_pair_run_by_run(tmp_path: Path) -> None:
    """Before: runs a and b, one block per step, steps 1 and 2; after: the same runs recorded at steps 3 and 4, run
    a now with two blocks per step. Each block pairs with the same run's block at the same step position (1↔3,
    2↔4), never with the other run's: run a's second blocks are left over on the after side. (Block sources are
    the runs' names in a result read by run.)"""
    from tracekit import diff
    before = analyze(_sweep(tmp_path / "b", (1, 2), {"a": 1, "b": 1}), by="run").check()
    after = analyze(_sweep(tmp_path / "a", (3, 4), {"a": 2, "b": 1}), by="run").check()
    r = diff(before, after).check()
    got = sorted((p.before.source, p.before.step, p.after.source, p.after.step) for p in r.pairs)
    assert got == [("a", 1, "a", 3), ("a", 2, "a", 4), ("b", 1, "b", 3), ("b", 2, "b", 4)]
    assert not r.unmatched_before and sorted((x.source, x.step) for x in r.unmatched_after) == [("a", 3), ("a", 4)]


# ---------------------------------------------------------------------------------------------
# One side launch-bound (flags, span figures, the no-claim note, the gate), and the per-category noise rule just
# inside and just outside its boundary; every figure from the hand-built trace's chosen times



SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*)"


def _block(b: TraceBuilder, t0: float, gemm: float = 10, gap: float = 0, softmax: float | None = None) -> None:
    """layer0.attention: GEMM (``gemm`` µs) [→ softmax (``softmax`` µs)] → ``gap`` µs idle → GEMM again.

    Another op's kernel keeps the device busy until the block's first kernel starts, so the block's span is
    its own device work: span = 2·gemm + softmax + gap, busy = 2·gemm + softmax, idle = gap.
    """
    b.op("aten::mm", t0 - 8, 2)
    b.launch(GEMM, t0 - 7, 1, t0 + 40, 60, stream=8)  # outside the block; ends at t0 + 100
    b.annotation("layer0.attention", t0, 50)
    k = t0 + 100
    b.op("aten::bmm", t0 + 1, 8)
    b.launch(GEMM, t0 + 2, 1, k, gemm)
    k += gemm
    if softmax is not None:
        b.op("aten::_softmax", t0 + 10, 6)
        b.launch(SOFTMAX, t0 + 11, 2, k, softmax)
        k += softmax
    b.op("aten::bmm", t0 + 20, 8)
    b.launch(GEMM, t0 + 21, 2, k + gap, gemm)


def _steps(path: Path, steps: list[dict]) -> Path:
    """One ProfilerStep per entry, each holding one ``_block(**entry)``."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    t = 1000
    for s, kw in enumerate(steps):
        b.annotation(f"ProfilerStep#{s + 1}", t - 20, 400)
        _block(b, t, **kw)
        t += 1000
    return b.write(path)


# gap 30 µs between two 10-µs GEMMs: span 50, idle 30 (60%, launch-bound); gap 5: span 25, idle 5 (20%, not).
BOUND, FREE = 30, 5


SIDE = {BOUND: (50.0, 30.0, True, "60%"), FREE: (25.0, 5.0, False, "20%")}  # span, idle, launch-bound, idle %


@pytest.mark.parametrize("n_steps", [1, 3], ids=["total", "median-step"])
@pytest.mark.parametrize("gap_b,gap_a", [(BOUND, FREE), (FREE, BOUND), (FREE, FREE), (BOUND, BOUND)],
                         ids=["before-bound", "after-bound", "neither", "both"])
def test_launch_bound_on_one_side_is_reported_and_gated_on_span(tmp_path, gap_b, gap_a, n_steps):
    before = _steps(tmp_path / "b.json", [dict(gap=gap_b)] * n_steps)
    after = _steps(tmp_path / "a.json", [dict(gap=gap_a)] * n_steps)
    r = diff_paths(before, after).check()
    (span_b, idle_b, lb_b, pct_b), (span_a, idle_a, lb_a, pct_a) = SIDE[gap_b], SIDE[gap_a]
    fb, fa = r.before_figures, r.after_figures
    assert (fb.total_us, fa.total_us) == pytest.approx((20, 20))  # busy: two 10-µs GEMMs on both sides
    assert (fb.span_us, fb.idle_us, fa.span_us, fa.idle_us) == pytest.approx((span_b, idle_b, span_a, idle_a))
    assert (fb.launch_bound, fa.launch_bound) == (lb_b, lb_a)
    either = lb_b or lb_a
    assert r.launch_bound is either
    if either:
        assert r.no_claim.startswith("launch-bound") and f"idle {pct_b} / {pct_a}" in r.no_claim
        # no verdict by default: neither busy time (which did not change) nor the span is the latency
        sides = " and ".join(s for s, lb in (("before", lb_b), ("after", lb_a)) if lb)
        with pytest.raises(InconclusiveError, match=f"inconclusive: {sides} (is|are) launch-bound"):
            gate(r, 5)
        if n_steps < 3:  # one step: no step-to-step spread, so not even the chosen span decides (issue 37)
            with pytest.raises(InconclusiveError, match="profiled span has no step-to-step spread"):
                gate(r, 5, on=Compared.SPAN)
            return
        v = gate(r, 5, on=Compared.SPAN)  # the profiled span, when asked for (three equal steps: spread 0)
        assert (v.compared, v.before_us, v.after_us) == ("span", pytest.approx(span_b), pytest.approx(span_a))
        assert v.ok is (span_a <= span_b * 1.05) and v.chosen
    else:
        assert r.no_claim == ""
        if n_steps < 3:
            with pytest.raises(InconclusiveError, match="attention busy time has no step-to-step spread"):
                gate(r, 5)
            return
        v = gate(r, 5)
        assert (v.compared, v.before_us, v.after_us, v.ok) == ("busy", pytest.approx(20), pytest.approx(20), True)


# Softmax per step: before 5, 9 and 7 µs (median 7, range 4); after x, x + 2 and x + 1 (median x + 1, range 2).
# (Three steps a side: two give no noise estimate, issue 24.)
# Spread = (4 + 2) / 2 = 3 µs: a softmax change of |Δ| <= 3 µs is within noise, anything more is not.
@pytest.mark.parametrize("delta,within", [
    (3.0, True), (2.995, True), (-3.0, True), (3.005, False), (-3.005, False), (0.0, True)])
def test_category_noise_boundary(tmp_path, delta, within):
    x = 7 + delta - 1
    before = _steps(tmp_path / "b.json", [{"softmax": 5}, {"softmax": 9}, {"softmax": 7}])
    after = _steps(tmp_path / "a.json", [{"softmax": x}, {"softmax": x + 2}, {"softmax": x + 1}])
    r = diff_paths(before, after).check()
    assert r.categories["softmax"].delta_us == pytest.approx(delta, abs=1e-9)
    sm = r.noise.categories["softmax"]
    assert (sm.before_min_us, sm.before_max_us, sm.after_min_us, sm.after_max_us) == pytest.approx((5, 9, x, x + 2))
    assert sm.within_noise is within
    assert r.noise.categories["matmul"].within_noise is True  # unchanged (40 µs both sides), no spread


# ---------------------------------------------------------------------------------------------
# The lead (issue 37): the whole step, or the measured latency, before attention


def _lead_pair(tmp_path, before_steps, after_steps, measured=(None, None)):
    import json

    """Two runs (folders) of dense steps (tests/results/test_steps.dense_steps), a measured.json beside each side
    whose latency (ms) is given."""
    from support.steps import dense_steps
    from tracekit.results.measured import MEASURED_FILE, MEASURED_SCHEMA

    out = []
    for name, steps, ms in (("a", before_steps, measured[0]), ("b", after_steps, measured[1])):
        (tmp_path / name).mkdir()
        if callable(steps):
            steps(tmp_path / name / "t.pt.trace.json")
        else:
            dense_steps(tmp_path / name / "t.pt.trace.json", steps)
        if ms is not None:
            (tmp_path / name / MEASURED_FILE).write_text(json.dumps({"schema": MEASURED_SCHEMA, "median_ms": ms}))
        out.append(tmp_path / name)
    return out


THREE_BEFORE = [(100.0, 50.0), (300.0, 10.0), (200.0, 100.0)]  # median step 3: busy 300, span 313, attention 200
THREE_AFTER = [(20.0, 50.0), (40.0, 10.0), (30.0, 20.0)]  # median step 3: busy 50, span 63, attention 30


def test_the_diff_leads_with_step_busy(tmp_path):
    """No measured latency and no launch-bound step: the lead is the median step's busy, 300 → 50 µs (6×), and
    attention (200 → 30, 6.67×) is the second line."""
    import json

    from support.cli import run_cli
    from support.pairs import diff

    a, b = _lead_pair(tmp_path, THREE_BEFORE, THREE_AFTER)
    r = diff(a, b)
    h = r.headline
    assert (h.basis, h.before_us, h.after_us) == ("step busy", pytest.approx(300), pytest.approx(50))
    assert h.speedup == pytest.approx(6.0)
    out = json.loads(run_cli("diff", a, b, "--format", "json", check=True).stdout)
    assert out["headline"]["basis"] == "step busy" and out["headline"]["speedup"] == 6.0
    assert (out["headline"]["before_us"], out["headline"]["after_us"]) == (300.0, 50.0)
    assert out["attention"]["speedup"] == pytest.approx(200 / 30, abs=1e-4)
    from tracekit.renderers import TerminalRenderer

    lines = TerminalRenderer(width=200).render(r).splitlines()
    lead = next(i for i, x in enumerate(lines) if x.startswith("step busy (per step, median of 3): "))
    assert "300 µs → 50.0 µs" in lines[lead] and "6.00× faster" in lines[lead]
    assert lines[lead + 1].startswith("attention (median step): 200 µs → 30.0 µs")
    from tracekit.renderers import MarkdownRenderer

    assert "step busy (per step, median of 3): 300 µs → 50.0 µs" in MarkdownRenderer().render(r).splitlines()[0]
    assert "step busy (per step, median of 3): 300 µs → 50.0 µs" in repr(r)
    csv = run_cli("diff", a, b, "--format", "csv", check=True).stdout.splitlines()
    assert csv[1].startswith("headline,total,300.000,50.000,-250.000,0.1667,step busy")


def test_the_diff_leads_with_measured_latency_when_both_sides_have_it(tmp_path):
    """Both sides measured: the lead is the latency (4.0 → 2.5 ms: 1.60×), whatever the profiled steps say; one side
    measured is not enough (the step busy leads)."""
    from support.pairs import diff

    (tmp_path / "x").mkdir()
    r = diff(*_lead_pair(tmp_path / "x", THREE_BEFORE, THREE_AFTER, measured=(4.0, 2.5)))
    assert (r.headline.basis, r.headline.before_us, r.headline.after_us) == ("latency", 4000.0, 2500.0)
    assert r.headline.speedup == pytest.approx(1.6)
    (tmp_path / "y").mkdir()
    r = diff(*_lead_pair(tmp_path / "y", THREE_BEFORE, THREE_AFTER, measured=(4.0, None)))
    assert r.headline.basis == "step busy" and r.headline.speedup == pytest.approx(6.0)


def test_the_diff_leads_with_step_span_where_a_side_is_launch_bound(tmp_path):
    """After is launch-bound (its 10 µs GEMM in a 1500 µs ProfilerStep): the lead compares the median steps' spans
    (313 → 1500 µs: slower), not their busy time (300 → 10 µs, which would read 30× faster)."""
    from functools import partial

    from support.pairs import diff, launch_bound_trace

    r = diff(*_lead_pair(tmp_path, THREE_BEFORE, partial(launch_bound_trace, gemm=10, host=60)))
    h = r.headline
    assert h.basis == "step span" and "after" in h.note and "launch-bound" in h.note
    assert (h.before_us, h.after_us) == (pytest.approx(313), pytest.approx(1500))
    assert h.speedup == pytest.approx(313 / 1500)


@requires_h200
def test_the_real_diff_leads_with_the_raw_step_busy():
    """eager_4096 → sdpa-flash_4096 (no measured.json in the shared sweep): the lead is step busy, its speedup the
    ratio of the median steps' busy by my own walk of the raw JSON (about 8.08×, not attention's 14.04×)."""
    from support.pairs import diff
    from support.paths import SWEEP
    from support.steps import raw_steps

    r = diff(SWEEP / "eager_4096", SWEEP / "sdpa-flash_4096")
    busy = [sum(b for b, _ in raw_steps(run).values()) / 2 for run in ("eager_4096", "sdpa-flash_4096")]
    assert r.headline.basis == "step busy"
    assert r.headline.speedup == pytest.approx(busy[0] / busy[1], rel=1e-5)
    assert r.speedup > r.headline.speedup * 1.5  # attention alone claims far more: it is the second line
