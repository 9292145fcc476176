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


def test_host_against_host_is_gated(tmp_path):
    a, b = cpu_trace(tmp_path / "a.json", 40), cpu_trace(tmp_path / "b.json", 40)
    v = gate(diff(a, b), 0)
    assert v.ok is True and v.change_pct == pytest.approx(0)


# -- busy time: the threshold boundary


def test_threshold_is_inclusive_and_exactly_a_percentage(tmp_path):
    # Not launch-bound; one step each: before 2·10 + 5 = 25 µs, after 2·22.5 + 5 = 50 µs: exactly +100 %.
    before = write(tmp_path / "a.json", [[busy(eager)]])
    after = write(tmp_path / "b.json", [[busy(lambda b, t0: eager(b, t0, gemm=22.5))]])
    r = diff(before, after)
    assert not r.launch_bound and r.basis == Basis.TOTAL
    v = gate(r, 100)
    assert (v.ok, v.before_us, v.after_us, v.threshold_pct) == (True, 25, 50, 100)
    assert v.change_pct == pytest.approx(100) and v.basis == Basis.TOTAL
    assert v.compared == Compared.BUSY and v.within_noise is None
    assert gate(r, 99.9).ok is False
    same = gate(diff(before, before), 0)  # equal is no regression, even at 0 %
    assert same.ok is True and same.change_pct == 0


def test_before_under_one_microsecond_still_gives_a_percentage(tmp_path):
    # 0.5 µs of flash on each side (not launch-bound): a 0 % change, not "no attention before".
    p = write(tmp_path / "a.json", [[busy(lambda b, t0: fused(b, t0, flash=0.5))]])
    v = gate(diff(p, p), 0)
    assert v.before_us == pytest.approx(0.5) and v.ok is True and v.change_pct == pytest.approx(0)


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
# Eager blocks with gemm g: span 102 + 2·g + 5 µs. Before gemm 10, 12 and 11: spans 127, 131 and 129 (median 129,
# range 4). Three steps a side: two give no noise estimate (issue 24).


def _span_diff(tmp_path, after_gemms, before_gemms=(10, 12, 11)):
    before = write(tmp_path / "a.json", steps_of(eager, "gemm", list(before_gemms)))
    after = write(tmp_path / "b.json", steps_of(eager, "gemm", list(after_gemms)))
    r = diff(before, after)
    assert r.launch_bound and r.basis == Basis.MEDIAN_STEP
    return r


def test_launch_bound_same_spans_are_within_noise(tmp_path):
    v = gate(_span_diff(tmp_path, [10, 12, 11]), 0, on=Compared.SPAN)
    assert v.compared == Compared.SPAN and (v.before_us, v.after_us) == (129, 129)
    assert v.within_noise is True and v.ok is True and v.change_pct == 0


def test_launch_bound_span_change_beyond_noise(tmp_path):
    # After gemm 13, 15 and 14: spans 133, 137 and 135 (median 135, range 4). |Δ| = 6 > (4 + 4) / 2 = 4.
    r = _span_diff(tmp_path, [13, 15, 14])
    v = gate(r, 5, on=Compared.SPAN)
    assert (v.before_us, v.after_us) == (129, 135) and v.change_pct == pytest.approx(100 * 6 / 129)
    assert v.within_noise is False
    assert v.ok is True  # 135 <= 129 · 1.05
    assert gate(r, 4, on=Compared.SPAN).ok is False  # 135 > 129 · 1.04


def test_launch_bound_span_change_within_noise(tmp_path):
    # After gemm 11.5, 13.5 and 12.5: spans 130, 134 and 132 (median 132, range 4). |Δ| = 3 <= 4.
    v = gate(_span_diff(tmp_path, [11.5, 13.5, 12.5]), 1, on=Compared.SPAN)
    assert (v.before_us, v.after_us) == (129, 132)
    assert v.within_noise is True and v.ok is False


def test_two_steps_a_side_have_no_noise_verdict(tmp_path):
    # Issue 24: the spans 127/131 against 133/137 differ by 6 > 4, but two steps a side say nothing about noise.
    r = _span_diff(tmp_path, [13, 15], before_gemms=(10, 12))
    v = gate(r, 5, on=Compared.SPAN)
    assert (v.before_us, v.after_us) == (129, 135) and v.within_noise is None
    assert gate(r, 5, on=Compared.BUSY).within_noise is None


def test_launch_bound_with_one_step_before_has_no_span_noise(tmp_path):
    before = write(tmp_path / "a.json", [[eager]])
    after = write(tmp_path / "b.json", steps_of(eager, "gemm", [10, 12]))
    r = diff(before, after)
    assert r.launch_bound and r.basis == Basis.MEDIAN_STEP
    v = gate(r, 5, on=Compared.SPAN)
    assert v.compared == Compared.SPAN and v.within_noise is None
    assert (v.before_us, v.after_us) == (127, 129)
    r2 = diff(after, before)
    assert gate(r2, 5, on=Compared.SPAN).within_noise is None


# ---------------------------------------------------------------------------------------------
# The latency and inconclusive rules (issue 24) on hand-built diffs: which figure is compared, when the time-base
# check applies, who chose it, and the exact one-line messages. An eager block is launch-bound by construction (idle
# 102 µs while busy < 102); busy(eager) is not (tests/support/pairs.py). Latencies are given here, so the expected
# verdicts are arithmetic

def _ms(v: float, low: float | None = None, high: float | None = None, source: str = "x") -> Measured:
    return Measured(median_ms=v, low_ms=low, high_ms=high, source=source)


def test_latency_pair_skips_the_time_base_check(tmp_path):
    """GPU against CPU: busy times say nothing, latencies do. Both given: gated on them; one given: refused."""
    gpu = write(tmp_path / "gpu.json", [[busy(eager)]])
    r = diff(gpu, cpu_trace(tmp_path / "cpu.json"))
    v = gate(r, 5, latency=(_ms(2.0), _ms(2.2)))
    assert v.compared == Compared.LATENCY and not v.ok and v.change_pct == pytest.approx(10.0)
    for one in ((_ms(2.0), None), (None, _ms(2.2))):
        with pytest.raises(IncomparableError):
            gate(r, 5, latency=one)
    assert gate(r, 5, on=Compared.LATENCY, latency=(_ms(2.0), _ms(2.0))).ok
    with pytest.raises(IncomparableError):
        gate(r, 5, on=Compared.BUSY, latency=(_ms(2.0), _ms(2.2)))


def test_latency_without_one_side_names_that_side(tmp_path):
    a = write(tmp_path / "a.json", [[busy(eager)]])
    r = diff(a, a)
    with pytest.raises(UsageError) as e:
        gate(r, 5, on=Compared.LATENCY, latency=(_ms(1.0), None))
    assert str(e.value) == ("--gate-on latency: no measured latency for after; give --latency-before/"
                            "--latency-after MS, or put the recorder's measured.json beside the traces")
    with pytest.raises(UsageError, match="no measured latency for before;"):
        gate(r, 5, on=Compared.LATENCY, latency=(None, _ms(1.0)))


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
    assert gate(r, 5, latency=(_ms(1.0), _ms(1.0))).chosen is False
    assert gate(r, 5, on=Compared.LATENCY, latency=(_ms(1.0), _ms(1.0))).chosen is True
    assert gate(r, 5, on=Compared.SPAN).chosen is True


def test_latency_noise_is_the_two_half_spreads(tmp_path):
    """|Δ| 0.5 ms against half-spreads 0.25 + 0.25: within (the boundary); 0.25 + 0.125: beyond; no spread:
    unknown (binary fractions, so the boundary is exact)."""
    a = write(tmp_path / "a.json", [[busy(eager)]])
    r = diff(a, a)
    assert gate(r, 50, latency=(_ms(2.0, 1.75, 2.25), _ms(2.5, 2.25, 2.75))).within_noise is True
    assert gate(r, 50, latency=(_ms(2.0, 1.75, 2.25), _ms(2.5, 2.375, 2.625))).within_noise is False
    assert gate(r, 50, latency=(_ms(2.0), _ms(2.5, 2.25, 2.75))).within_noise is None
    v = gate(r, 5, latency=(_ms(2.0, source="a.json"), _ms(2.2, source="b.json")))
    assert v.sources == ("a.json", "b.json") and (v.before_us, v.after_us) == pytest.approx((2000, 2200))


def test_span_noise_needs_three_steps_on_each_side(tmp_path):
    three = write(tmp_path / "a.json", steps_of(eager, "gemm", [10, 11, 12]))
    two = write(tmp_path / "b.json", steps_of(eager, "gemm", [10, 12]))
    assert gate(diff(three, three), 5, on=Compared.SPAN).within_noise is True
    assert gate(diff(three, two), 5, on=Compared.SPAN).within_noise is None
    assert gate(diff(two, three), 5, on=Compared.SPAN).within_noise is None


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

    r = diff(*paired_sweeps(tmp_path))
    bad = gate_runs(r, 5)
    assert [p.run for p in bad] == ["slower"]
    bound, slower = r.run_pairs
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
    (folder / "measured.json").write_text(json.dumps({"schema": "tracekit.measured/1", "median_ms": ms}))


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
