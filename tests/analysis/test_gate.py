"""The CI gate (tracekit.analysis.gate) on hand-built diffs whose figures are known by construction
(tests/support/pairs.py): every field of the verdict, the boundaries of its rules, its refusals."""

from __future__ import annotations

import json

import pytest
from support.pairs import busy, cpu_trace, diff, eager, fused, plain, steps_of, write

from tracekit.analysis.gate import gate, parse_percent
from tracekit.errors import IncomparableError, InconclusiveError
from tracekit.vocab import Basis, Compared
from tracekit.errors import UsageError
from tracekit.results.measured import Measured


def test_bad_percentage_message_names_the_text():
    with pytest.raises(ValueError, match=r"^'abc' is not a percentage \(digits, an optional decimal part and %"):
        parse_percent("abc")


# -- refusals: different or mixed time bases


def test_device_against_host_is_refused_with_both_labels(tmp_path):
    gpu = write(tmp_path / "gpu.json", [[eager]])
    cpu = cpu_trace(tmp_path / "cpu.json")
    r = diff(gpu, cpu)
    with pytest.raises(IncomparableError) as e:
        gate(r, 5)
    assert str(e.value) == ("--fail-if-slower: cannot gate device busy time against host self time; "
                            "compare traces timed the same way (both GPU or both CPU-only)")
    with pytest.raises(IncomparableError, match="cannot gate host self time against device busy time"):
        gate(diff(cpu, gpu), 5)


def test_mixed_against_mixed_is_refused(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    write(folder / "gpu.json", [[eager]])
    cpu_trace(folder / "cpu.json")
    r = diff(folder, folder)
    assert str(r.before.time_base) == str(r.after.time_base) == "mixed"
    with pytest.raises(IncomparableError, match="cannot gate mixed time bases against mixed time bases"):
        gate(r, 5)


def test_host_against_host_is_not_refused_but_wants_steps(tmp_path):
    # Both CPU-only (host self time): the time-base check passes; with no ProfilerStep there is no step-to-step
    # spread, so the busy gate decides nothing (issue 37).
    a, b = cpu_trace(tmp_path / "a.json", 40), cpu_trace(tmp_path / "b.json", 40)
    with pytest.raises(InconclusiveError) as e:
        gate(diff(a, b), 0)
    assert str(e.value).startswith("--fail-if-slower: inconclusive: attention busy time has no step-to-step "
                                   "spread (before 0 steps, after 0 steps; it needs at least 3 a side)")


# -- busy time: the threshold boundary, three steps a side with no spread


def test_threshold_is_inclusive_and_exactly_a_percentage(tmp_path):
    # Not launch-bound; three equal steps each (spread 0): before 2·10 + 5 = 25 µs, after 2·22.5 + 5 = 50 µs:
    # exactly +100 %.
    before = write(tmp_path / "a.json", steps_of(busy(eager), "gemm", [10, 10, 10]))
    after = write(tmp_path / "b.json", steps_of(busy(eager), "gemm", [22.5, 22.5, 22.5]))
    r = diff(before, after)
    assert not r.launch_bound and r.basis == Basis.MEDIAN_STEP and r.noise.combined_spread_us == 0
    v = gate(r, 100)
    assert (v.ok, v.before_us, v.after_us, v.threshold_pct) == (True, 25, 50, 100)
    assert v.change_pct == pytest.approx(100) and v.basis == Basis.MEDIAN_STEP
    assert v.compared == Compared.BUSY and v.within_noise is False
    assert gate(r, 99.9).ok is False
    same = gate(diff(before, before), 0)  # equal is no regression, even at 0 %
    assert same.ok is True and same.change_pct == 0 and same.within_noise is True


def test_before_under_one_microsecond_still_gives_a_percentage(tmp_path):
    # 0.5 µs of flash on each side, three steps (not launch-bound): a 0 % change, not "no attention before".
    p = write(tmp_path / "a.json", steps_of(busy(fused), "flash", [0.5, 0.5, 0.5]))
    v = gate(diff(p, p), 0)
    assert v.before_us == pytest.approx(0.5) and v.ok is True and v.change_pct == pytest.approx(0)


# -- busy time: the step-to-step spread decides whether the gate may decide (issue 37)
# Busy per step = 2·gemm + 5. Before gemm 10, 12, 11: 25, 29, 27 (median 27, range 4). After gemm g-1, g+1, g:
# median 2g + 5, range 4. Spread (4 + 4) / 2 = 4 µs. At 100 %: the threshold is 54 µs.


def _busy_diff(tmp_path, g):
    before = write(tmp_path / "a.json", steps_of(busy(eager), "gemm", [10, 12, 11]))
    after = write(tmp_path / "b.json", steps_of(busy(eager), "gemm", [g - 1, g + 1, g]))
    r = diff(before, after)
    assert not r.launch_bound and r.noise.combined_spread_us == 4
    return r


@pytest.mark.parametrize("g,outcome", [
    (22.5, "ok"),             # after 50: 50 + 4 = 54 <= 54 (the pass boundary is inclusive)
    (22.75, "inconclusive"),  # after 50.5: 50.5 + 4 > 54, and 50.5 - 4 <= 54
    (26.5, "inconclusive"),   # after 58: 58 - 4 = 54 is not over 54 (the regression boundary is exclusive)
    (26.75, "regression"),    # after 58.5: 58.5 - 4 = 54.5 > 54
])
def test_busy_gate_decides_only_beyond_the_spread(tmp_path, g, outcome):
    r = _busy_diff(tmp_path, g)
    if outcome == "inconclusive":
        with pytest.raises(InconclusiveError, match=r"^--fail-if-slower: inconclusive: attention busy time 27.0 µs "
                                                    r"→ 5\d.\d µs \(\+\d+.\d%\) is within the step-to-step spread"):
            gate(r, 100)
        return
    v = gate(r, 100)
    assert v.ok is (outcome == "ok") and v.after_us == 2 * g + 5 and v.before_us == 27
    word = "under the threshold (54.0 µs) by at least" if v.ok else "over the threshold (54.0 µs) by more than"
    assert v.evidence == f"{word} the step-to-step spread (±4.0 µs)"


def test_busy_inconclusive_message(tmp_path):
    with pytest.raises(InconclusiveError) as e:
        gate(_busy_diff(tmp_path, 22.75), 100)
    assert str(e.value) == (
        "--fail-if-slower: inconclusive: attention busy time 27.0 µs → 50.5 µs (+87.0%) is within the step-to-step "
        "spread (±4.0 µs) of the 100% threshold (54.0 µs): profile more steps, or give the latency measured with "
        "repeats (--latency-before/--latency-after)")


# -- no attention before


def test_no_attention_before_with_per_step_noise(tmp_path):
    # Before: three steps of non-attention kernels (0 µs of attention each); after: three steps of 0.5 µs flash.
    # (Three: two steps a side give no noise estimate, issue 24.)
    before = write(tmp_path / "a.json", [[plain]] * 3)
    after = write(tmp_path / "b.json", steps_of(busy(fused), "flash", [0.5, 0.5, 0.5]))
    r = diff(before, after)
    assert r.basis == Basis.MEDIAN_STEP and r.noise is not None
    v = gate(r, 5)
    # 0.5 µs from nothing: a regression, with no percentage; beyond noise (both ranges 0).
    assert (v.ok, v.threshold_pct, v.before_us, v.after_us, v.change_pct) == (False, 5, 0, 0.5, None)
    assert v.basis == Basis.MEDIAN_STEP and v.within_noise is False and v.compared == Compared.BUSY


def test_no_attention_on_either_side_passes(tmp_path):
    before = write(tmp_path / "a.json", [[plain]] * 3)
    v = gate(diff(before, before), 0)
    assert (v.ok, v.before_us, v.after_us, v.change_pct) == (True, 0, 0, None)
    assert v.within_noise is True and v.compared == Compared.BUSY


def test_no_attention_before_and_launch_bound_after_compares_span(tmp_path):
    # After: launch-bound eager blocks, gemm 0.5: busy 6 µs, span 102 + 6 = 108 µs per step.
    before = write(tmp_path / "a.json", [[plain]] * 3)
    after = write(tmp_path / "b.json", steps_of(eager, "gemm", [0.5, 0.5, 0.5]))
    r = diff(before, after)
    assert r.launch_bound
    with pytest.raises(InconclusiveError, match=r"^--fail-if-slower: inconclusive: after is launch-bound"):
        gate(r, 5)  # by default: no measured latency, so no verdict
    v = gate(r, 5, on=Compared.SPAN)
    assert (v.ok, v.before_us, v.after_us, v.change_pct) == (False, 0, 108, None)
    assert v.compared == Compared.SPAN and v.basis == Basis.MEDIAN_STEP
    assert v.within_noise is False  # 108 µs from 0, both span ranges 0


# -- launch-bound: the span and its noise
# Eager blocks with gemm g: span 102 + 2·g + 5 µs. Before gemm 9.5, 11.5 and 10.5: spans 126, 130 and 128 (median
# 128, range 4). Three steps a side: two give no noise estimate (issue 24). Binary fractions: boundaries are exact.


def _span_diff(tmp_path, after_gemms, before_gemms=(9.5, 11.5, 10.5)):
    before = write(tmp_path / "a.json", steps_of(eager, "gemm", list(before_gemms)))
    after = write(tmp_path / "b.json", steps_of(eager, "gemm", list(after_gemms)))
    r = diff(before, after)
    assert r.launch_bound and r.basis == Basis.MEDIAN_STEP
    return r


def test_launch_bound_same_spans_are_within_noise(tmp_path):
    r = _span_diff(tmp_path, [9.5, 11.5, 10.5])
    v = gate(r, 3.125, on=Compared.SPAN)  # 128 + 4 = 132 = 128 · 1.03125: under by the spread
    assert v.compared == Compared.SPAN and (v.before_us, v.after_us) == (128, 128)
    assert v.within_noise is True and v.ok is True and v.change_pct == 0
    with pytest.raises(InconclusiveError, match="profiled span 128 µs → 128 µs .* within the step-to-step spread"):
        gate(r, 0, on=Compared.SPAN)  # no change, but a spread of 4 µs could carry it over a 0 % threshold


def test_launch_bound_span_pass_and_regression_boundaries(tmp_path):
    # After gemm 15.5, 17.5 and 16.5: spans 138, 142 and 140 (median 140, range 4): spread (4 + 4) / 2 = 4.
    r = _span_diff(tmp_path, [15.5, 17.5, 16.5])
    v = gate(r, 12.5, on=Compared.SPAN)  # 140 + 4 = 144 = 128 · 1.125: a pass (inclusive)
    assert (v.ok, v.before_us, v.after_us, v.within_noise) == (True, 128, 140, False)
    assert v.change_pct == pytest.approx(100 * 12 / 128)
    with pytest.raises(InconclusiveError):
        gate(r, 12.4, on=Compared.SPAN)  # 144 > 143.87 and 136 <= it
    with pytest.raises(InconclusiveError):
        gate(r, 6.25, on=Compared.SPAN)  # 140 - 4 = 136 = 128 · 1.0625: not over it by more than the spread
    assert gate(r, 6.2, on=Compared.SPAN).ok is False  # 136 > 135.94


def test_launch_bound_span_change_within_noise_is_no_regression(tmp_path):
    # After gemm 11, 13 and 12: spans 131, 135 and 133 (median 133, range 4). |Δ| = 5 > 4, but at 1 % the
    # threshold is 129.28 µs and 133 - 4 = 129 does not exceed it: today's "REGRESSION within noise" is no more.
    with pytest.raises(InconclusiveError, match="within the step-to-step spread"):
        gate(_span_diff(tmp_path, [11, 13, 12]), 1, on=Compared.SPAN)


def test_two_steps_a_side_decide_nothing(tmp_path):
    # Issue 24: two steps a side say nothing about noise; issue 37: so the gate says nothing either.
    r = _span_diff(tmp_path, [13, 15], before_gemms=(10, 12))
    for on, what in ((Compared.SPAN, "profiled span"), (Compared.BUSY, "attention busy time")):
        with pytest.raises(InconclusiveError) as e:
            gate(r, 5, on=on)
        assert str(e.value).startswith(f"--fail-if-slower: inconclusive: {what} has no step-to-step spread "
                                       "(before 2 steps, after 2 steps; it needs at least 3 a side)")


def test_launch_bound_with_one_step_before_decides_nothing(tmp_path):
    before = write(tmp_path / "a.json", [[eager]])
    after = write(tmp_path / "b.json", steps_of(eager, "gemm", [10, 12]))
    r = diff(before, after)
    assert r.launch_bound and r.basis == Basis.MEDIAN_STEP
    with pytest.raises(InconclusiveError, match=r"\(before 1 step, after 2 steps; it needs at least 3 a side\)"):
        gate(r, 5, on=Compared.SPAN)
    with pytest.raises(InconclusiveError, match=r"\(before 2 steps, after 1 step;"):
        gate(diff(after, before), 5, on=Compared.SPAN)


# ---------------------------------------------------------------------------------------------
# The latency and inconclusive rules (issues 24, 37) on hand-built diffs: which figure is compared, when the
# time-base check applies, who chose it, and the exact one-line messages. An eager block is launch-bound by
# construction (idle 102 µs while busy < 102); busy(eager) is not (tests/support/pairs.py). Latencies are given
# here, so the expected verdicts are arithmetic.

def _ms(v: float, low: float | None = None, high: float | None = None, source: str = "x", **kw) -> Measured:
    return Measured(median_ms=v, low_ms=low, high_ms=high, source=source, **kw)


def _pm(v: float, half: float = 0.0625, source: str = "x") -> Measured:
    """A median ± a half-spread (ms)."""
    return _ms(v, v - half, v + half, source)


def test_latency_pair_skips_the_time_base_check(tmp_path):
    """GPU against CPU: busy times say nothing, latencies do. Both given: gated on them; one given: refused."""
    gpu = write(tmp_path / "gpu.json", [[busy(eager)]])
    r = diff(gpu, cpu_trace(tmp_path / "cpu.json"))
    v = gate(r, 5, latency=(_pm(2.0), _pm(2.5)))  # 2.4375 > 2.0625 · 1.05
    assert v.compared == Compared.LATENCY and not v.ok and v.change_pct == pytest.approx(25.0)
    for one in ((_pm(2.0), None), (None, _pm(2.5))):
        with pytest.raises(UsageError, match="given without a latency for"):  # (issue 41: unpaired is usage)
            gate(r, 5, latency=one)
    assert gate(r, 10, on=Compared.LATENCY, latency=(_pm(2.0), _pm(2.0))).ok  # 2.0625 <= 1.9375 · 1.1
    with pytest.raises(IncomparableError):
        gate(r, 5, on=Compared.BUSY, latency=(_pm(2.0), _pm(2.5)))


def test_latency_without_one_side_names_that_side(tmp_path):
    a = write(tmp_path / "a.json", [[busy(eager)]])
    r = diff(a, a)
    with pytest.raises(UsageError) as e:
        gate(r, 5, on=Compared.LATENCY, latency=(_pm(1.0), None))
    assert str(e.value) == ("--gate-on latency: no measured latency for after; give --latency-before/"
                            "--latency-after MS, or put the recorder's measured.json beside the traces")
    with pytest.raises(UsageError, match="no measured latency for before;"):
        gate(r, 5, on=Compared.LATENCY, latency=(None, _pm(1.0)))


def test_a_latency_for_one_side_needs_one_for_the_other(tmp_path):
    """Issue 41, row 1: ``--latency-before`` alone, with no measured.json after, was dropped without a word and the
    gate decided on busy time. It is a usage error naming the missing side; paired with the other side's
    measured.json it stands (a given latency overrides that side's file)."""
    a = write(tmp_path / "a.json", steps_of(busy(eager), "gemm", [10, 10, 10]))
    r = diff(a, a)
    assert gate(r, 5).compared == Compared.BUSY  # the busy gate decides this pair on its own
    with pytest.raises(UsageError) as e:
        gate(r, 5, latency=(_samples(2.0, 2.1, 2.2, source="--latency-before"), None))
    assert str(e.value) == ("--latency-before given without a latency for after: give --latency-after too, or "
                            "put the recorder's measured.json beside after's traces")
    with pytest.raises(UsageError, match="^--latency-after given without a latency for before: give --latency-b"):
        gate(r, 5, on=Compared.BUSY, latency=(None, _samples(2.0, 2.1, 2.2, source="--latency-after")))
    r.after.measured = _samples(2.5, 2.6, 2.7, source="measured.json")
    v = gate(r, 5, latency=(_samples(2.0, 2.1, 2.2, source="--latency-before"), None))
    assert v.compared == Compared.LATENCY and not v.ok and v.sources == ("--latency-before", "measured.json")


def test_inconclusive_message_names_the_launch_bound_side(tmp_path):
    bound = write(tmp_path / "b.json", steps_of(eager, "gemm", [10, 10, 10]))
    free = write(tmp_path / "f.json", steps_of(busy(eager), "gemm", [10, 10, 10]))
    with pytest.raises(InconclusiveError) as e:
        gate(diff(free, bound), 5)
    assert str(e.value) == (
        "--fail-if-slower: inconclusive: after is launch-bound, so neither busy time nor the profiled span is the "
        "latency; give --latency-before/--latency-after MS (or measured.json beside the traces), or choose "
        "--gate-on busy|span")
    assert e.value.exit_code == 5
    with pytest.raises(InconclusiveError, match=r"inconclusive: before and after are launch-bound, so"):
        gate(diff(bound, bound), 5)


def test_chosen_says_who_picked_the_figure(tmp_path):
    free = write(tmp_path / "f.json", steps_of(busy(eager), "gemm", [10, 10, 10]))
    r = diff(free, free)
    assert gate(r, 5).chosen is False and gate(r, 5).compared == Compared.BUSY
    assert gate(r, 5, on=Compared.BUSY).chosen is True
    assert gate(r, 20, latency=(_pm(1.0), _pm(1.0))).chosen is False  # 1.0625 <= 0.9375 · 1.2
    assert gate(r, 20, on=Compared.LATENCY, latency=(_pm(1.0), _pm(1.0))).chosen is True
    assert gate(r, 5, on=Compared.SPAN).chosen is True


def test_latency_noise_is_the_two_half_spreads(tmp_path):
    """Within noise: |Δ| 0.5 ms against half-spreads 0.25 + 0.25: within (the boundary); 0.25 + 0.125: beyond
    (binary fractions, so the boundary is exact). At 100 % both pass: 2.75 <= 1.75 · 2."""
    a = write(tmp_path / "a.json", [[busy(eager)]])
    r = diff(a, a)
    assert gate(r, 100, latency=(_ms(2.0, 1.75, 2.25), _ms(2.5, 2.25, 2.75))).within_noise is True
    assert gate(r, 100, latency=(_ms(2.0, 1.75, 2.25), _ms(2.5, 2.375, 2.625))).within_noise is False
    v = gate(r, 100, latency=(_pm(2.0, source="a.json"), _pm(2.5, source="b.json")))
    assert v.sources == ("a.json", "b.json") and (v.before_us, v.after_us) == pytest.approx((2000, 2500))


def test_span_noise_needs_three_steps_on_each_side(tmp_path):
    three = write(tmp_path / "a.json", steps_of(eager, "gemm", [10, 11, 12]))
    two = write(tmp_path / "b.json", steps_of(eager, "gemm", [10, 12]))
    assert gate(diff(three, three), 5, on=Compared.SPAN).within_noise is True  # 129 + 4 <= 129 · 1.05
    for r in (diff(three, two), diff(two, three)):
        with pytest.raises(InconclusiveError, match="no step-to-step spread"):
            gate(r, 5, on=Compared.SPAN)


# ---------------------------------------------------------------------------------------------
# The latency gate wants a spread (issue 37): too few repeats, overlapping spreads, the U test on samples.


def test_one_repeat_a_side_decides_nothing_and_says_so(tmp_path):
    """What the CPU recorder wrote before issue 37: repeats 1, low = high = median (± 0.000). A +214.7 % change
    from such samples is no regression: exit 5, naming the one repeat on each side."""
    a = write(tmp_path / "a.json", [[busy(eager)]])
    r = diff(a, a)
    one = (_ms(10.0, 10.0, 10.0, "measured.json", repeats=1), _ms(31.47, 31.47, 31.47, "measured.json", repeats=1))
    with pytest.raises(InconclusiveError) as e:
        gate(r, 5, latency=one)
    assert str(e.value) == (
        "--fail-if-slower: inconclusive: measured latency: before (measured.json) has one repeat; after "
        "(measured.json) has one repeat; the gate needs at least 3 repeats a side with their spread")
    with pytest.raises(InconclusiveError, match=r"before \(x\) has 2 repeats$|before \(x\) has 2 repeats;"):
        gate(r, 5, latency=(_ms(1.0, 0.9, 1.1, repeats=2), _pm(1.0)))
    with pytest.raises(InconclusiveError, match=r"after \(x\) has no spread;"):
        gate(r, 5, latency=(_pm(1.0), _ms(1.0, repeats=5)))
    assert gate(r, 50, latency=(_ms(1.0, 0.9, 1.1, repeats=3), _pm(1.0))).ok  # three repeats are enough


@pytest.mark.parametrize("after,outcome", [
    ((2.0, 2.25), "ok"),               # 2.25 <= 2.0 · 1.25 = 2.5: apart, under
    ((2.25, 2.5), "ok"),               # 2.5 <= 2.5: the pass boundary is inclusive
    ((2.25, 2.5625), "overlap"),       # 2.5625 > 2.5 and 2.25 <= 2.5 · 1.25 = 3.125
    ((3.125, 3.25), "overlap"),        # 3.125 is not above 3.125: the regression boundary is exclusive
    ((3.1875, 3.25), "regression"),    # 3.1875 > 3.125: apart, over
])
def test_spreads_decide_only_when_apart(tmp_path, after, outcome):
    """Before 2.0–2.5 ms (no samples) at 25 %: after's interval against before's raised, 2.5–3.125 (binary
    fractions: the boundaries are exact)."""
    a = write(tmp_path / "a.json", [[busy(eager)]])
    r = diff(a, a)
    mb, ma = _ms(2.25, 2.0, 2.5), _ms(sum(after) / 2, *after)
    if outcome == "overlap":
        with pytest.raises(InconclusiveError) as e:
            gate(r, 25, latency=(mb, ma))
        assert str(e.value) == ("--fail-if-slower: inconclusive: measured latency: the spreads overlap: after "
                                f"{after[0]:.3f}–{after[1]:.3f} ms against before +25% 2.500–3.125 ms")
        return
    v = gate(r, 25, latency=(mb, ma))
    assert v.ok is (outcome == "ok") and v.evidence.startswith("the spreads are apart: after ")


def _samples(*xs: float, source: str = "x") -> Measured:
    s = sorted(xs)
    mid = (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2
    return Measured(median_ms=mid, low_ms=s[0], high_ms=s[-1], spread_kind="min-max", repeats=len(xs),
                    samples_ms=tuple(xs), source=source)


def test_three_samples_a_side_decide_only_when_they_separate(tmp_path):
    """The U test of after against before · 1.05, one-sided at 0.05. With 3 and 3 samples the smallest p is
    1 / C(6, 3) = 1/20 = 0.05: only a full separation decides (worked by hand in test_rank_test_by_hand)."""
    a = write(tmp_path / "a.json", [[busy(eager)]])
    r = diff(a, a)
    before = _samples(2.0, 2.1, 2.2)  # raised by 5 %: 2.1, 2.205, 2.31
    v = gate(r, 5, latency=(before, _samples(2.4, 2.5, 2.32)))  # all above 2.31: U = 9 of 9
    assert v.ok is False and v.evidence.endswith("slower, p 0.05 <= 0.05") and "U 9 of 9" in v.evidence
    v = gate(r, 5, latency=(before, _samples(1.9, 2.0, 2.09)))  # all below 2.1: U = 0
    assert v.ok is True and v.evidence.endswith("not slower, p 0.05 <= 0.05")
    with pytest.raises(InconclusiveError) as e:  # 2.3 lies between 2.205 and 2.31: U = 8, P(U >= 8) = 2/20
        gate(r, 5, latency=(before, _samples(2.4, 2.5, 2.3)))
    assert "Mann-Whitney U 8 of 9" in str(e.value) and "p 0.1 (slower) and 0.95 (not slower)" in str(e.value)


def test_many_samples_decide_through_overlapping_spreads(tmp_path):
    """Twelve repeats a side whose min-max spreads overlap (one slow outlier before): the spreads alone cannot
    decide, but the ranks can. After's 12 samples all lie above before's raised by 5 % but for the outlier:
    U = 12 · 12 - 12 = 132 of 144, p (exact) tiny."""
    a = write(tmp_path / "a.json", [[busy(eager)]])
    r = diff(a, a)
    before = _samples(*[2.0 + 0.01 * i for i in range(11)], 3.0)
    after = _samples(*[2.5 + 0.01 * i for i in range(12)])
    v = gate(r, 5, latency=(before, after))
    assert v.ok is False and "U 132 of 144" in v.evidence
    without = (_ms(before.median_ms, before.low_ms, before.high_ms), _ms(after.median_ms, after.low_ms,
                                                                         after.high_ms))
    with pytest.raises(InconclusiveError, match="the spreads overlap"):
        gate(r, 5, latency=without)  # the same figures without their samples


def test_rank_test_by_hand():
    """x = 1, 3, 5 against y = 2, 4, 6: U counts x > y: (3>2) (5>2) (5>4) = 3. Of the C(6, 3) = 20 ways to
    pick x's ranks, U takes 0..9 with counts 1 1 2 3 3 3 3 2 1 1: P(U <= 3) = 7/20, P(U >= 3) = 16/20.
    Ties: x = 1, 2 against y = 2, 3: mid-ranks 1, 2.5, 2.5, 4. x's rank sum is 3.5, so U = 3.5 - 2·3/2 = 0.5
    (the tie counts one half). The 6 ways to pick two of the four ranks sum to 3.5, 3.5, 5, 5, 6.5, 6.5: x's 3.5
    is the smallest, so P(U <= 0.5) = 2/6 and P(U >= 0.5) = 1."""
    from tracekit.analysis.ranktest import mann_whitney

    t = mann_whitney([1, 3, 5], [2, 4, 6])
    assert (t.u, t.p_less, t.p_greater, t.exact) == (3, pytest.approx(7 / 20), pytest.approx(16 / 20), True)
    t = mann_whitney([1, 2], [2, 3])
    assert (t.u, t.p_less, t.p_greater) == (0.5, pytest.approx(2 / 6), pytest.approx(1.0))
    t = mann_whitney([4, 5, 6], [1, 2, 3])
    assert (t.u, t.p_greater, t.p_less) == (9, pytest.approx(1 / 20), pytest.approx(1.0))


def test_rank_test_normal_approximation_by_hand():
    """25 against 25 (50 samples, past EXACT_MAX = 40), x all above y, no ties: U = 625, mean 25·25/2 = 312.5,
    variance 25·25·51/12 = 2656.25, z = (625 - 312.5 - 0.5) / sqrt(2656.25) = 312 / 51.5388... = 6.0537...
    P(U >= 625) = erfc(z / sqrt 2) / 2 = 7.0783e-10. All tied: variance 0, p 1 both ways."""
    import math

    from tracekit.analysis.ranktest import EXACT_MAX, mann_whitney

    assert EXACT_MAX < 50
    t = mann_whitney(list(range(25, 50)), list(range(25)))
    z = 312 / math.sqrt(2656.25)
    assert t.exact is False and t.u == 625 and z == pytest.approx(6.0537, abs=1e-4)
    assert t.p_greater == pytest.approx(0.5 * math.erfc(z / math.sqrt(2))) and t.p_greater == pytest.approx(
        7.0783e-10, rel=1e-4)
    tied = mann_whitney([1.0] * 25, [1.0] * 25)
    assert (tied.p_greater, tied.p_less) == (1.0, 1.0)


# ---------------------------------------------------------------------------------------------
# A threshold too large to be a number

def test_a_threshold_too_large_to_be_a_number_is_refused():
    """400 digits match the percentage pattern, but float() makes them inf, and "grew by more than inf%" could
    never fail: refused like any other non-percentage. 308 digits are still a (huge, finite) percentage."""
    from tracekit.analysis.gate import parse_percent
    with pytest.raises(ValueError, match="not a percentage"):
        parse_percent("1" * 400)
    assert parse_percent("9" * 308) == float("9" * 308)


# -- two folders of runs: the gate decides each run pair on its own (support.pairs.paired_sweeps: ``slower`` goes
# 25 -> 2·gemm + 5 µs a step, ``bound`` is launch-bound both sides, so inconclusive by the default rule)


def test_gate_over_run_pairs_names_the_regressing_pair(tmp_path):
    from support.pairs import paired_sweeps

    from tracekit.analysis.gate import gate_runs
    from tracekit.results.diff import pair_headline

    r = diff(*paired_sweeps(tmp_path))
    # ungated, each pair reads its lead: the whole 1020 µs step span, unchanged on both (mostly idle steps)
    assert [p.verdict for p in r.run_pairs] == ["within noise", "within noise"]
    bad = gate_runs(r, 5)
    assert [p.run for p in bad] == ["slower"]
    bound, slower = r.run_pairs
    # the gate decides on its own basis, and says which: attention busy time per median step, not the pair's lead
    assert (slower.gate.compared, slower.gate.basis) == (Compared.BUSY, "median_step")
    assert pair_headline(slower.diff)["basis"] == "step span"
    assert (slower.gate.before_us, slower.gate.after_us, slower.gate.change_pct) == pytest.approx((25, 45, 80))
    assert bound.gate is None and bound.inconclusive.startswith("before and after are launch-bound")
    assert [p.verdict for p in r.run_pairs] == ["inconclusive", "regression"]
    r.check()


def test_gate_over_run_pairs_without_a_regression(tmp_path):
    from support.pairs import paired_sweeps

    from tracekit.analysis.gate import gate_runs

    r = diff(*paired_sweeps(tmp_path, slower_after=11))  # 25 -> 27 µs: +8%
    assert gate_runs(r, 10) == [] and [p.verdict for p in r.run_pairs] == ["inconclusive", "pass"]
    assert [p.run for p in gate_runs(r, 7)] == ["slower"]  # the same pair over a tighter threshold
    assert gate_runs(r, 10, on=Compared.BUSY) == [] and [p.verdict for p in r.run_pairs] == ["pass", "pass"]
    with pytest.raises(UsageError, match=r"^run bound: --gate-on latency: no measured latency for before and after"):
        gate_runs(r, 10, on=Compared.LATENCY)


def _measured(folder, ms: float) -> None:
    """Five repeats within ±1% of ``ms``: enough samples, and a spread narrow enough to decide on."""
    xs = [round(ms * f, 6) for f in (0.99, 0.995, 1.0, 1.005, 1.01)]
    (folder / "measured.json").write_text(json.dumps({"schema": "tracekit.measured/1", "median_ms": ms,
                                                      "repeats": 5, "samples_ms": xs}))


def test_gate_over_run_pairs_reads_each_runs_own_latency(tmp_path):
    """``bound`` measured 2.0 -> 2.5 ms (+25%) beside its own traces: gated on latency, and it regresses."""
    from support.pairs import paired_sweeps

    from tracekit.analysis.gate import gate_runs

    before, after = paired_sweeps(tmp_path, slower_after=10)
    _measured(before / "bound", 2.0)
    _measured(after / "bound", 2.5)
    r = diff(before, after)
    assert [p.run for p in gate_runs(r, 5)] == ["bound"]
    v = r.run_pairs[0].gate
    assert v.compared == Compared.LATENCY and v.change_pct == pytest.approx(25)
    assert r.run_pairs[1].gate.compared == Compared.BUSY  # the other pair has no latency: its busy time


def test_a_sweeps_own_measured_json_belongs_to_no_run_pair(tmp_path):
    """A trace lying in a sweep's folder is a run of its own (``loose``); the folder's measured.json is not its
    latency, even when it is the only run in common (so it stays inconclusive: launch-bound, unmeasured)."""
    from support.pairs import eager, run_folders, steps_of

    from tracekit.analysis.gate import gate_runs

    for side, other in (("before", "x_1"), ("after", "y_1")):
        root = run_folders(tmp_path / side, {other: steps_of(eager, "gemm", [10])})
        write(root / "loose.pt.trace.json", steps_of(eager, "gemm", [10] * 3))
        _measured(root, 1.0 if side == "before" else 9.0)
    r = diff(tmp_path / "before", tmp_path / "after")
    assert [p.run for p in r.run_pairs] == ["loose"] and r.run_pairs[0].diff.before.measured is None
    assert gate_runs(r, 5) == [] and r.run_pairs[0].inconclusive


# ---------------------------------------------------------------------------------------------
# A CPU-like pair (host self time, one block, no ProfilerStep) with measured.json beside each trace, as
# scripts/profile_attention.py writes it: one, three and many samples; single, overlapping and separated.


def _cpu_run(folder, doc: dict):
    import json

    from tracekit.results.measured import MEASURED_FILE, MEASURED_SCHEMA

    folder.mkdir(parents=True)
    cpu_trace(folder / "host.pt.trace.json", 40)
    (folder / MEASURED_FILE).write_text(json.dumps({"schema": MEASURED_SCHEMA, **doc}))
    return folder


def _one_repeat(ms: float) -> dict:
    """What the CPU recorder wrote before issue 37 for a forward slower than min_time: one block, ± 0."""
    return {"median_ms": ms, "low_ms": ms, "high_ms": ms, "spread_kind": "min-max", "repeats": 1, "iters": 1,
            "what": "forward pass, outside the profiler (CUDA events)"}


def _with_samples(*xs: float) -> dict:
    m = _samples(*xs)
    return {"median_ms": m.median_ms, "low_ms": m.low_ms, "high_ms": m.high_ms, "spread_kind": "min-max",
            "repeats": len(xs), "samples_ms": list(xs), "what": "forward pass, outside the profiler (CPU timer)"}


def test_cpu_pair_with_one_sample_a_side_is_inconclusive(tmp_path):
    """The issue's CPU case: 10.0 → 31.47 ms from one repeat each (+214.7 %) is neither a pass nor a failure."""
    r = diff(_cpu_run(tmp_path / "eager_256", _one_repeat(10.0)), _cpu_run(tmp_path / "sdpa_256", _one_repeat(31.47)))
    assert str(r.before.time_base) == "host" and r.before.measured.repeats == 1
    with pytest.raises(InconclusiveError, match="measured latency: before .measured.json. has one repeat; after "):
        gate(r, 5)


@pytest.mark.parametrize("after,outcome", [
    ((2.15, 2.2, 2.3), "inconclusive"),       # overlapping: against before · 1.05 (2.1, 2.205, 2.31), U 1+1+2 = 4
    ((2.5, 2.6, 2.7), "regression"),          # separated above: U 9 of 9, p 1/20
    ((1.8, 1.85, 1.9), "ok"),                 # separated below: U 0, p 1/20
])
def test_cpu_pair_with_three_samples_a_side(tmp_path, after, outcome):
    r = diff(_cpu_run(tmp_path / "b", _with_samples(2.0, 2.1, 2.2)), _cpu_run(tmp_path / "a", _with_samples(*after)))
    assert r.before.measured.samples_ms == (2.0, 2.1, 2.2)
    if outcome == "inconclusive":
        with pytest.raises(InconclusiveError, match=r"Mann-Whitney U 4 of 9, 3 repeats after against 3 before \+5%"):
            gate(r, 5)
        return
    v = gate(r, 5)
    assert v.compared == Compared.LATENCY and v.ok is (outcome == "ok") and "p 0.05 <= 0.05" in v.evidence


def test_cpu_pair_with_many_samples_decides_within_overlapping_spreads(tmp_path):
    """Ten repeats a side. Before 2.00..2.09 (and one 2.6 outlier in place of 2.09); after 2.20..2.29, which
    against before · 1.05 (2.1..2.1945, 2.73) lies above all but the outlier: U = 10·10 - 10 = 90 of 100."""
    before = [2.0 + 0.01 * i for i in range(9)] + [2.6]
    after = [2.2 + 0.01 * i for i in range(10)]
    r = diff(_cpu_run(tmp_path / "b", _with_samples(*before)), _cpu_run(tmp_path / "a", _with_samples(*after)))
    assert r.after.measured.low_ms < r.before.measured.high_ms  # the min-max spreads overlap
    v = gate(r, 5)
    assert v.ok is False and "U 90 of 100, 10 repeats after against 10 before +5%" in v.evidence
