"""Wall clock next to busy time (span, idle, launch-bound) and the diff's changed-kernels section.

Expected figures come from the raw trace JSON (read here with orjson, not through tracekit), from
hand-built traces whose answers are known by construction, or from each side's own kernel table.
Every result is check()ed.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from tracekit.vocab import Compared

from support.builders import TraceBuilder, host_core
from support.paths import REAL, SAMPLES
from support.cli import run_cli
from support.pairs import launch_bound_trace
from support.traces import independent_block, read_events
from tracekit import analyze
from tracekit.run.api import diff_paths
from tracekit.analysis.gate import gate
from tracekit.errors import InconclusiveError
from tracekit.renderers import CSVRenderer, JSONRenderer, TerminalRenderer, verdict_line
from tracekit.renderers.base import headline

H200 = REAL.parent / "h200"
SWEEP = H200 / "sweep"
requires_h200 = pytest.mark.skipif(not SWEEP.is_dir(), reason=f"H200 sweep traces not present at {SWEEP}")

GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*)"


def _file(name: str) -> Path:
    [f] = sorted((SWEEP / name).glob("*.json*"))
    return f


# ---------------------------------------------------------------------------------------------
# Span and idle against the raw JSON


@requires_h200
@pytest.mark.parametrize("trace", ["eager_512", "sdpa-flash_512", "eager_4096", "sdpa-flash_4096"])
def test_block_span_and_idle_match_an_independent_count(trace):
    path = _file(trace)
    res = analyze(path).check()
    events = read_events(path)
    for layer, nth in (("layer0.attention", 0), ("layer2.attention", 1)):  # a first and a later block
        blk = [b for b in res.blocks if b.name == layer][nth]
        ref = independent_block(events, layer, nth)
        assert blk.kernels == ref["kernels"]
        assert blk.total_us == pytest.approx(ref["busy"], abs=0.01)
        assert blk.span_us == pytest.approx(ref["span"], abs=0.01)
        assert blk.idle_us == pytest.approx(ref["idle"], abs=0.02)
        assert blk.launch_bound == (ref["idle"] > ref["span"] / 2)
    t = res.totals
    assert t.span_us == pytest.approx(sum(b.span_us for b in res.blocks))
    assert t.idle_us == pytest.approx(sum(b.idle_us for b in res.blocks))
    assert t.launch_bound == (t.idle_us > t.span_us / 2)


@requires_h200
def test_launch_bound_at_512_and_not_at_4096():
    """At L=512 the GPU waits for launches (issue: 83% / 88% idle by device span alone); at 4096 it does not."""
    for trace, bound in (("eager_512", True), ("sdpa-flash_512", True), ("eager_4096", False),
                         ("sdpa-flash_4096", False)):
        res = analyze(_file(trace)).check()
        assert res.totals.launch_bound is bound, trace
        assert all(b.launch_bound is bound for b in res.blocks), trace
        idle = res.totals.idle_us / res.totals.span_us
        assert (idle > 0.8) if bound else (idle < 0.2), (trace, idle)


@requires_h200
def test_host_running_ahead_is_not_idle_time():
    """eager_4096: the host enqueues a block long before the device reaches it. That queueing is the previous
    block's time: counted as idle it would call a GPU-saturated run launch-bound."""
    path = _file("eager_4096")
    res = analyze(path).check()
    blk = [b for b in res.blocks if b.name == "layer3.attention"][0]
    ref = independent_block(read_events(path), "layer3.attention", 0)
    assert ref["host_start"] < ref["free"] - 1000  # the host really ran more than 1 ms ahead of the device
    assert blk.span_us == pytest.approx(ref["span"], abs=0.01)
    assert not blk.launch_bound and blk.idle_us < 0.1 * blk.span_us


def test_json_carries_the_wall_clock_keys(tmp_path):
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 60)
    b.op("aten::bmm", 1, 8)
    b.launch(GEMM, 2, 1, 10, 10)
    host_core(b, 20)  # device idle 0..10 while the host launched: the block waited
    path = b.write(tmp_path / "t.json")
    res = analyze(path).check()
    out = json.loads(JSONRenderer().render(res))
    blk = out["blocks"][0]
    # host 0..60, kernel 10..20: span 60, busy 10, idle 50 > 30 → launch-bound
    assert (blk["span_us"], blk["busy_us"], blk["total_us"], blk["idle_us"], blk["launch_bound"]) == \
        (60.0, 10.0, 10.0, 50.0, True)
    t = out["totals"]
    assert (t["span_us"], t["busy_us"], t["idle_us"], t["launch_bound"]) == (60.0, 10.0, 50.0, True)
    text = TerminalRenderer().render(res)
    assert "span" in text and "83%" in text and "launch-bound" in text  # idle 50 / 60


def test_cpu_only_blocks_have_no_idle_and_no_launch_bound_verdict():
    res = analyze(SAMPLES / "cpu_eager_256.pt.trace.json.gz").check()
    assert res.blocks
    for b in res.blocks:
        assert b.idle_us == 0.0 and b.launch_bound is None
        assert b.span_us == pytest.approx(b.host_us, abs=0.002)  # one root each: span = its host duration
    assert res.totals.launch_bound is None and res.totals.idle_us == 0.0
    out = json.loads(JSONRenderer().render(res))
    assert out["totals"]["launch_bound"] is None and out["blocks"][0]["launch_bound"] is None
    assert "idle" not in TerminalRenderer().render(res).split("\n\n")[1].splitlines()[0]


def test_check_rejects_an_inconsistent_launch_bound_flag(tmp_path):
    from tracekit.results.attribution import InvariantError
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 60)
    b.op("aten::bmm", 1, 8)
    b.launch(GEMM, 2, 1, 10, 10)
    host_core(b, 20)
    res = analyze(b.write(tmp_path / "t.json")).check()
    res.blocks[0].launch_bound = False
    with pytest.raises(InvariantError, match="launch_bound"):
        res.check()
    res.blocks[0].launch_bound = True
    res.totals.span_us += 5
    with pytest.raises(InvariantError, match="span"):
        res.check()


# ---------------------------------------------------------------------------------------------
# The diff's headline and gate


@requires_h200
def test_eager_512_to_flash_512_is_flagged_launch_bound_and_claims_no_speedup():
    proc = run_cli("diff", SWEEP / "eager_512", SWEEP / "sdpa-flash_512", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["launch_bound"] == {"before": True, "after": True}
    assert out["attention"]["claims_speedup"] is False and "launch-bound" in out["attention"]["no_claim"]
    # the span figures are the median step's blocks' spans: with 2 steps, the mean of the two steps' spans
    for side, name in (("before", "eager_512"), ("after", "sdpa-flash_512")):
        blocks = analyze(_file(name)).check().blocks
        steps = sorted({b.step for b in blocks})
        assert len(steps) == 2
        assert out["span"][f"{side}_us"] == pytest.approx(sum(b.span_us for b in blocks) / 2, abs=0.01)
    assert out["span"]["ratio"] == pytest.approx(out["span"]["after_us"] / out["span"]["before_us"], rel=1e-3)
    text = run_cli("diff", SWEEP / "eager_512", SWEEP / "sdpa-flash_512").stdout
    text = text.replace("\n    ", " ").replace("\n  ", " ")  # the terminal wraps long lines with an indent
    head = [ln for ln in text.splitlines() if ln.startswith("attention (")][0]
    assert "launch-bound: the GPU is idle" in head and "profiled span" in head
    assert "faster" not in text and "slower" not in text
    # issue 37: the lead is the median step's span (both sides launch-bound), worded as a span, never "faster"
    lead = [ln for ln in text.splitlines() if ln.startswith("step span (per step, median of 2")][0]
    assert "launch-bound" in lead and "× shorter" in lead and out["headline"]["basis"] == "step span"
    busy = out["attention"]["before_us"] / out["attention"]["after_us"]
    assert f"busy time falls {busy:.2f}×" in head


@requires_h200
def test_eager_4096_to_flash_4096_still_headlines_its_gain():
    r = diff_paths(SWEEP / "eager_4096", SWEEP / "sdpa-flash_4096").check()
    assert (r.before_figures.launch_bound, r.after_figures.launch_bound) == (False, False)
    assert not r.no_claim
    # the busy ratio, from the two sides' own median steps
    per = []
    for name in ("eager_4096", "sdpa-flash_4096"):
        blocks = analyze(_file(name)).check().blocks
        steps = sorted({b.step for b in blocks})
        per.append(sum(b.total_us for b in blocks) / len(steps))  # 2 steps: the median is their mean
    assert f"{per[0] / per[1]:.2f}× faster" in headline(r)
    # busy time by default (not launch-bound), but two profiled steps a side give it no spread (issue 37)
    with pytest.raises(InconclusiveError, match="attention busy time has no step-to-step spread .before 2 steps"):
        gate(r, 5)



def test_gate_compares_span_when_launch_bound(tmp_path):
    """Busy time halves (10 → 5 µs) but the host range grows (60 → 90 µs): a launch-bound run got slower. Three
    equal steps a side: a step-to-step spread of 0, which the gate needs to decide (issue 37)."""
    before = launch_bound_trace(tmp_path / "a.json", gemm=10, host=60, steps=3)
    after = launch_bound_trace(tmp_path / "b.json", gemm=5, host=90, steps=3)
    r = diff_paths(before, after).check()
    assert r.before_figures.span_us == pytest.approx(60) and r.after_figures.span_us == pytest.approx(90)
    assert r.speedup == pytest.approx(2)  # busy time alone would say 2× faster
    v = gate(r, 5, on=Compared.SPAN)
    assert v.compared == "span" and not v.ok and v.change_pct == pytest.approx(50)
    assert "profiled span" in verdict_line(v)
    assert "faster" not in headline(r) and "launch-bound" in headline(r)
    proc = run_cli("diff", before, after, "--fail-if-slower", "5", "--gate-on", "span")
    assert proc.returncode == 4 and "profiled span" in proc.stderr and "REGRESSION" in proc.stderr
    proc = run_cli("diff", before, after, "--fail-if-slower", "5")  # by default: launch-bound, so no verdict
    assert proc.returncode == 5 and "inconclusive" in proc.stderr and "REGRESSION" not in proc.stderr


# ---------------------------------------------------------------------------------------------
# Kernels that changed


def _kernel_sums(path: Path, needle: str) -> tuple[int, float]:
    ks = [e for e in read_events(path) if e.get("cat") == "kernel" and needle in e["name"]]
    return len(ks), sum(e["dur"] for e in ks)


@requires_h200
def test_flash_2048_to_4096_lists_the_kernels_that_grew():
    r = diff_paths(SWEEP / "sdpa-flash_2048", SWEEP / "sdpa-flash_4096").check()
    assert not r.only_before and not r.only_after
    [flash] = [k for k in r.kernels_changed if "flash_fwd_kernel" in k.name]
    nb, ub = _kernel_sums(_file("sdpa-flash_2048"), "flash_fwd_kernel")
    na, ua = _kernel_sums(_file("sdpa-flash_4096"), "flash_fwd_kernel")
    assert (flash.before.count, flash.after.count) == (nb, na)
    assert flash.delta_us == pytest.approx(ua - ub, abs=0.01)
    assert r.kernels_changed[0] is flash  # the largest change comes first
    out = json.loads(JSONRenderer().render(r))
    row = [k for k in out["kernels_changed"] if "flash_fwd_kernel" in k["name"]][0]
    assert row["before"] == {"count": nb, "total_us": pytest.approx(ub, abs=0.01)}
    assert row["delta_us"] == pytest.approx(ua - ub, abs=0.01)
    rows = list(csv.DictReader(io.StringIO(CSVRenderer().render(r))))
    changed = [x for x in rows if x["section"] == "kernel_changed"]
    assert len(changed) == len(r.kernels_changed) and "flash_fwd_kernel" in changed[0]["kernel"]
    assert "changed" in TerminalRenderer().render(r)


@requires_h200
def test_a_trace_against_itself_changes_no_kernel():
    r = diff_paths(SWEEP / "sdpa-flash_2048", SWEEP / "sdpa-flash_2048").check()
    assert r.kernels_changed == []


def _one_step(path: Path, softmax_calls: int, gemm: float) -> Path:
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 200)
    b.op("aten::bmm", 1, 2)
    b.launch(GEMM, 2, 1, 3, gemm)
    for i in range(softmax_calls):
        b.op("aten::_softmax", 10 + 10 * i, 5)
        b.launch(SOFTMAX, 11 + 10 * i, 1, 50 + 10 * i, 4)
    b.op("aten::bmm", 10 + 10 * softmax_calls, 1)  # the context product: QKᵀ → softmax → PV is the core
    return b.write(path)


def test_without_steps_a_count_change_or_a_large_time_change_counts(tmp_path):
    """No noise estimate: softmax count 1 → 2 counts; GEMM 10 → 10.3 µs (3%) does not; 10 → 12 µs does."""
    r = diff_paths(_one_step(tmp_path / "a.json", 1, 10), _one_step(tmp_path / "b.json", 2, 10.3)).check()
    assert [k.name for k in r.kernels_changed] == ["softmax_warp_forward<float, float, float, 8, false, false>(float*)"]
    assert "no per-step noise estimate" in r.kernels_changed_note
    r = diff_paths(_one_step(tmp_path / "a.json", 1, 10), _one_step(tmp_path / "c.json", 1, 12)).check()
    [k] = r.kernels_changed
    assert k.category == "matmul" and k.delta_us == pytest.approx(2)


# ---------------------------------------------------------------------------------------------
# Different discovery modes


def _module_trace(path: Path) -> Path:
    b = TraceBuilder()
    b.module("SelfAttention_0", 0, 60)
    b.op("aten::bmm", 1, 2)
    b.launch(GEMM, 2, 1, 100, 40)
    host_core(b, 4)
    return b.write(path)


def _annotated_trace(path: Path) -> Path:
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 60)
    b.op("aten::bmm", 1, 2)
    b.launch(GEMM, 2, 1, 100, 10)
    host_core(b, 4)
    return b.write(path)


def test_different_discovery_modes_warn_and_claim_nothing_when_nothing_pairs(tmp_path):
    before, after = _module_trace(tmp_path / "a.json"), _annotated_trace(tmp_path / "b.json")
    r = diff_paths(before, after).check()
    assert not r.pairs
    assert any("found blocks differently" in w for w in r.warnings)
    assert "faster" not in headline(r) and "no block pairs" in headline(r)
    proc = run_cli("diff", before, after, "--format", "json")
    out = json.loads(proc.stdout)
    assert out["attention"]["claims_speedup"] is False
    assert any("found blocks differently" in w for w in out["warnings"])
    assert "found blocks differently" in proc.stderr


def test_same_discovery_mode_does_not_warn(tmp_path):
    r = diff_paths(_annotated_trace(tmp_path / "a.json"), _annotated_trace(tmp_path / "b.json")).check()
    assert not any("found blocks differently" in w for w in r.warnings)
