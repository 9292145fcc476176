"""The CI gate's latency and inconclusive rules (issue 24) on hand-built diffs: which figure is compared, when
the time-base check applies, who chose it, and the exact one-line messages (tracekit.analysis.gate).

Traces from tests/test_mutants_support.py: an ``eager`` block is launch-bound by construction (idle 102 µs
while busy < 102); ``busy(eager)`` is not. Latencies are given here, so the expected verdicts are arithmetic.
"""

from __future__ import annotations

import pytest
from support.pairs import busy, cpu_trace, diff, eager, steps_of, write

from tracekit.analysis.gate import gate
from tracekit.errors import IncomparableError, InconclusiveError, UsageError
from tracekit.results.measured import Measured
from tracekit.vocab import Compared


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
