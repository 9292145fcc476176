"""Time in the results (issue 25, part 1): each block's and step's window on the trace's own clock, and the
blocks' device intervals (``--with-intervals``).

Expected times come from hand-built traces with known timestamps and from a walk of the raw JSON (read here
with orjson, not through tracekit: ``_independent_block`` of test_wallclock and ``_origin`` below). Every result
is check()ed, and check() is shown to catch a window or an interval that is off.
"""

from __future__ import annotations

import dataclasses
import json
from array import array
from pathlib import Path

import pytest
from support.builders import TraceBuilder, attention_block
from support.paths import REAL, real_trace_files
from support.cli import run_cli
from support.traces import independent_block as _independent_block, read_events

from tracekit import analyze
from tracekit.renderers import JSONRenderer
from tracekit.results.attribution import InvariantError

SWEEP = REAL.parent / "h200" / "sweep"
H200_FILES = sorted(SWEEP.glob("*/*.json.gz"))
GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*)"

# What the reader keeps, spelled out from docs/attribution.md ("Inputs", "Time in the trace"), not imported.
_KEPT_X = {"cpu_op", "operator", "user_annotation", "cuda_runtime", "cuda_driver", "runtime", "kernel", "gpu_memcpy",
           "memcpy", "gpu_memset", "memset", "gpu_user_annotation"}


def _origin(events: list[dict]) -> float:
    """The trace start by the documented rule: the earliest ts of the events tracekit reads."""
    def kept(e: dict) -> bool:
        cat = str(e.get("cat") or "").strip().casefold()
        if e.get("ph") == "X":
            return cat in _KEPT_X or (cat == "python_function" and str(e.get("name", "")).startswith("nn.Module: "))
        if e.get("ph") == "i":
            return e.get("name") == "[memory]" and (e.get("args") or {}).get("Bytes", 0) > 0
        return e.get("ph") in ("s", "f") and cat == "fwdbwd"
    return min(float(e["ts"]) for e in events if kept(e) and isinstance(e.get("ts"), (int, float)))


def _one_block_trace(t0: int = 1000, step_at: int = 900) -> TraceBuilder:
    """A ProfilerStep from ``step_at`` to +2100 µs around attention_block at ``t0`` (its docstring's answer):
    host range t0..t0+60, device events at t0+100.. t0+136, so the block's window is t0..t0+136."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", step_at, 2100)
    attention_block(b, t0)
    return b


def _block_kernels(t0: int) -> list[tuple[int, int, str]]:
    """attention_block's device events as (start, end, category), by its docstring: memset 1, gemm 10, div 2,
    softmax 5, copy 3, gemm 10, at t0+100 + (0, 2, 13, 16, 22, 26)."""
    k = t0 + 100
    return [(k, k + 1, "memory"), (k + 2, k + 12, "matmul"), (k + 13, k + 15, "elementwise"),
            (k + 16, k + 21, "softmax"), (k + 22, k + 25, "memory"), (k + 26, k + 36, "matmul")]


# -- hand-built traces: exact figures ----------------------------------------------------------------------------

@pytest.mark.parametrize("shift", [0, 1_700_000_000_000_000], ids=["relative", "epoch-integer-us"])
def test_block_and_step_windows_and_intervals_are_exact(tmp_path, shift):
    t0, step_at = shift + 1000, shift + 900
    res = analyze(_one_block_trace(t0, step_at).write(tmp_path / "t.json")).check()
    [blk] = res.blocks
    [trace] = res.traces
    assert trace.origin_ns == step_at * 1000  # the step range is the earliest event
    assert (blk.start_us, blk.end_us) == (100.0, 236.0)  # t0 - origin .. t0 + 136 - origin
    assert blk.end_us - blk.start_us == blk.span_us
    rows = sorted(blk.intervals.rows())
    assert rows == [(s - step_at, e - step_at, c, 0, 7) for s, e, c in _block_kernels(t0)]
    [step] = trace.step_figures
    assert (step.start_us, step.end_us) == (0.0, 2100.0)  # the range 900..3000 holds its device work


def test_epoch_sized_integer_times_keep_sub_microsecond_ends(tmp_path):
    """Integer-µs epoch times with a fractional duration: the end is 1.7e18 ns, beyond a float's exact integers,
    so only integer arithmetic keeps the 0.123 µs."""
    t0 = 1_700_000_000_000_000
    b = TraceBuilder()
    b.annotation("layer0.attention", t0, 30)
    b.op("aten::bmm", t0 + 1, 5)
    b.launch(GEMM, t0 + 2, 1, t0 + 40, 0.123)
    b.op("aten::_softmax", t0 + 10, 5)
    b.op("aten::bmm", t0 + 20, 5)
    res = analyze(b.write(tmp_path / "e.json")).check()
    [blk] = res.blocks
    assert blk.intervals.rows() == [(40.0, 40.123, "matmul", 0, 7)]


def test_json_writes_windows_always_and_intervals_only_when_asked(tmp_path):
    res = analyze(_one_block_trace().write(tmp_path / "t.json")).check()
    plain = json.loads(JSONRenderer().render(res))
    assert "intervals" not in plain["blocks"][0]
    assert (plain["blocks"][0]["start_us"], plain["blocks"][0]["end_us"]) == (100.0, 236.0)
    assert plain["traces"][0]["origin_us"] == 900
    assert plain["traces"][0]["step_figures"][0]["start_us"] == 0.0
    r = JSONRenderer()
    r.with_intervals = True
    full = json.loads(r.render(res))
    expected = sorted([s - 900, e - 900, c, 0, 7] for s, e, c in _block_kernels(1000))
    assert sorted(full["blocks"][0]["intervals"]) == expected


def test_a_folder_keeps_each_block_on_its_own_traces_clock(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _one_block_trace(1000, 900).write(run / "a.pt.trace.json")
    _one_block_trace(50_000, 40_000).write(run / "b.pt.trace.json")  # another process, another clock
    res = analyze(run).check()
    assert [t.origin_ns for t in res.traces] == [900_000, 40_000_000]
    assert [(b.source, b.start_us, b.end_us) for b in res.blocks] == [
        ("a.pt.trace.json", 100.0, 236.0), ("b.pt.trace.json", 10_000.0, 10_136.0)]
    by_source = {t.source: t.origin_ns for t in res.traces}
    for b in res.blocks:  # each block's intervals count from its own trace's start
        assert min(s for s, *_ in b.intervals.rows()) == b.start_us + 100
        assert b.intervals.origin_ns == by_source[b.source]


def test_cli_with_intervals_is_json_only(tmp_path):
    path = _one_block_trace().write(tmp_path / "t.json")
    proc = run_cli("attribute", path, "--format", "json", "--with-intervals", check=True)
    assert len(json.loads(proc.stdout)["blocks"][0]["intervals"]) == 6
    assert "intervals" not in json.loads(run_cli("attribute", path, "--format", "json", check=True).stdout)["blocks"][0]
    bad = run_cli("attribute", path, "--with-intervals")
    assert bad.returncode == 2 and "--with-intervals" in bad.stderr


def test_cpu_only_blocks_take_their_host_window(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 20, 500)
    b.annotation("layer0.attention", 100, 50)
    b.op("aten::bmm", 101, 10)
    b.op("aten::_softmax", 112, 5)
    b.op("aten::bmm", 120, 10)
    res = analyze(b.write(tmp_path / "cpu.json")).check()
    [blk] = res.blocks
    assert (blk.start_us, blk.end_us, blk.span_us) == (80.0, 130.0, 50.0)  # 100..150 from the start at 20
    assert blk.intervals is None  # no device events


def test_a_capture_block_with_no_device_events_is_an_instant(tmp_path):
    from support.builders import capture
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 500)
    capture(b, 10, 2)  # two captured Attention modules at 12 and 52: launches recorded, nothing ran
    b.device_only(SOFTMAX, 400, 5)  # some device work elsewhere: a GPU trace, timed by the device
    res = analyze(b.write(tmp_path / "cap.json")).check()
    assert [b.kernels for b in res.blocks] == [0, 0]
    assert [(b.start_us, b.end_us) for b in res.blocks] == [(12.0, 12.0), (52.0, 52.0)]


def test_check_catches_a_window_or_an_interval_that_is_off(tmp_path):
    res = analyze(_one_block_trace().write(tmp_path / "t.json")).check()
    blk = res.blocks[0]
    iv = blk.intervals
    late = array("q", iv.end_ns)
    late[0] = (iv.origin_ns + round(blk.end_us * 1000)) + 1000  # one interval ends 1 µs after the window
    blk.intervals = dataclasses.replace(iv, end_ns=late)
    with pytest.raises(InvariantError, match="outside the block's window"):
        res.check()
    early = array("q", iv.start_ns)
    early[3] = iv.origin_ns + round(blk.start_us * 1000) - 1000  # one starts 1 µs before it
    blk.intervals = dataclasses.replace(iv, start_ns=early)
    with pytest.raises(InvariantError, match="outside the block's window"):
        res.check()
    blk.intervals = iv
    res.check()
    blk.end_us += 1.0  # the window no longer spans span_us
    with pytest.raises(InvariantError, match="!= span"):
        res.check()
    blk.end_us -= 1.0
    blk.intervals = dataclasses.replace(iv, category=iv.category[:-1])
    with pytest.raises(InvariantError, match="lengths"):
        res.check()
    blk.intervals = iv
    step = res.traces[0].step_figures[0]
    step.start_us -= 5
    with pytest.raises(InvariantError, match="!= span"):
        res.check()


def test_two_streams_and_an_idle_gap_keep_each_kernel_where_it_ran(tmp_path):
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 30)
    b.op("aten::bmm", 1, 5)
    b.launch(GEMM, 2, 1, 40, 10)  # stream 7: 40..50
    b.op("aten::_softmax", 10, 5)
    b.launch(SOFTMAX, 11, 1, 45, 4, stream=8)  # stream 8, overlapping the GEMM: 45..49
    b.op("aten::bmm", 20, 5)
    b.launch(GEMM, 21, 1, 70, 10)  # after an idle gap: 70..80
    res = analyze(b.write(tmp_path / "s.json")).check()
    [blk] = res.blocks
    assert (blk.start_us, blk.end_us) == (0.0, 80.0)  # host 0..30, device 40..80, nothing queued before
    assert sorted(blk.intervals.rows()) == [(40.0, 50.0, "matmul", 0, 7), (45.0, 49.0, "softmax", 0, 8),
                                            (70.0, 80.0, "matmul", 0, 7)]


# -- real traces -------------------------------------------------------------------------------------------------

def _check_clock(path: Path) -> None:
    res = analyze(path).check()
    events = read_events(path)
    [trace] = res.traces
    assert trace.origin_ns / 1000 == pytest.approx(_origin(events), abs=1e-3), path
    for b in res.blocks:
        assert b.end_us - b.start_us == pytest.approx(b.span_us, abs=1e-6), (path, b.name)
        assert b.start_us >= 0, (path, b.name)
        if b.intervals is None:
            continue
        assert len(b.intervals) == b.kernels
        for s, e, _, _, _ in b.intervals.rows():
            assert b.start_us - 1e-6 <= s <= e <= b.end_us + 1e-6, (path, b.name, s, e)
    for f in trace.step_figures:
        assert f.end_us - f.start_us == pytest.approx(f.span_us, abs=1e-6)


@pytest.mark.parametrize("path", real_trace_files(), ids=[str(p.relative_to(REAL)) for p in real_trace_files()])
def test_every_real_trace_keeps_its_blocks_on_its_clock(path):
    _check_clock(path)


@pytest.mark.skipif(not H200_FILES, reason="no H200 sweep traces")
@pytest.mark.parametrize("path", H200_FILES, ids=[p.parent.name for p in H200_FILES])
def test_every_h200_trace_keeps_its_blocks_on_its_clock(path):
    _check_clock(path)


@pytest.mark.skipif(not H200_FILES, reason="no H200 sweep traces")
@pytest.mark.parametrize("run", ["eager_512", "sdpa-flash_512", "eager_4096", "sdpa-flash_4096"])
def test_block_windows_match_an_independent_walk_of_the_json(run):
    [path] = sorted((SWEEP / run).glob("*.json*"))
    res = analyze(path).check()
    events = read_events(path)
    origin = _origin(events)
    for layer, nth in (("layer0.attention", 0), ("layer2.attention", 1)):
        blk = [b for b in res.blocks if b.name == layer][nth]
        ref = _independent_block(events, layer, nth)
        assert blk.start_us == pytest.approx(ref["start"] - origin, abs=1e-3), (run, layer)
        assert blk.end_us == pytest.approx(ref["end"] - origin, abs=1e-3), (run, layer)
        mine = [t for s, e, *_ in sorted(blk.intervals.rows()) for t in (s, e)]
        assert mine == pytest.approx([t - origin for s, e in ref["intervals"] for t in (s, e)], abs=2e-3)
