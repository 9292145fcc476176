"""tracekit diff, issue 24 part 5: the wording and units of a diff. Memory inside blocks is a sum *and* a peak; a
table reads in one unit and never prints 0.00 for a figure that is not 0; two steps a side say nothing about noise;
the whole step (all device work in ProfilerStep#N) stands beside the attention figures.

Expected figures come from hand-built traces (tests/support/builders.py) whose times and bytes are chosen here, and, for
the H200 sweep pair, from a walk of the raw gzipped JSON in this file (ProfilerStep windows, runtime correlations,
kernel durations, [memory] args), never from the code's own output. Every diff is check()ed.
"""

from __future__ import annotations

import json
import re
from functools import partial
from pathlib import Path

import pytest
from support.builders import TraceBuilder
from support.pairs import GEMM, GEMM_C, H100, busy, diff, eager, fused, write

from support.traces import busy_union as _union, read_events
from support.paths import SWEEP
from tracekit.analysis.gate import gate
from tracekit.errors import InconclusiveError
from tracekit.renderers import JSONRenderer, TerminalRenderer
from tracekit.renderers.markdown import MarkdownRenderer
from tracekit.results.attribution import InvariantError
from tracekit.vocab import Basis, Compared

MIB = 1 << 20
MEMSET = "Memset (Device)"
PAIRS = [("eager_512", "sdpa-flash_512"), ("eager_4096", "sdpa-flash_4096")]
requires_sweep = pytest.mark.skipif(not all((SWEEP / d).is_dir() for p in PAIRS for d in p),
                                    reason=f"H200 sweep traces not present under {SWEEP}")


def _text(r, width: int = 100) -> str:
    return TerminalRenderer(width=width).render(r)


def _json(r) -> dict:
    return json.loads(JSONRenderer().render(r))


def _row(text: str, label: str) -> list[str]:
    """The cells of the category table's row ``label`` (split on runs of two spaces or more)."""
    line = next(x for x in text.splitlines() if x.startswith(label + "  "))
    return re.split(r"\s{2,}", line.strip())


# ---------------------------------------------------------------------------------------------
# 1. Memory: allocated (sum) and peak


def _mem_side(path: Path, peaks: bool) -> tuple[Path, Path]:
    """Before: two eager blocks ([1000, 1060] and [2000, 2060]) allocating 4 + 1 and 2 MiB, the allocator's totals
    after them 100, 105 and 103 MiB; a free inside (its total, 101 MiB, is no allocation); outside the blocks a
    64 MiB allocation up to 200 MiB and, inside block 0, a host (CPU) one up to 500 MiB: neither is the blocks'.
    After: two fused blocks allocating 1 MiB each, totals 101 and 100 MiB. ``peaks`` False: no Total Allocated."""
    def t(x):
        return x * MIB if peaks else None

    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    b.annotation("ProfilerStep#5", 990, 2100)
    for t0 in (1000, 2000):
        eager(b, t0, name=f"layer{t0 // 1000 - 1}.attention")
    b.memory(1022, 4 * MIB, total=t(100))
    b.memory(1030, 1 * MIB, total=t(105))
    b.memory(1040, -4 * MIB, total=t(101))
    b.memory(1025, 1 * MIB, device_type=0, total=t(500))
    b.memory(1500, 64 * MIB, total=t(200))
    b.memory(2022, 2 * MIB, total=t(103))
    before = b.write(path / "before.json")
    a = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    a.annotation("ProfilerStep#5", 990, 2100)
    for t0 in (1000, 2000):
        fused(a, t0, name=f"layer{t0 // 1000 - 1}.attention")
    a.memory(1004, MIB, total=t(101))
    a.memory(2004, MIB, total=t(100))
    return before, a.write(path / "after.json")


def test_peak_memory_is_the_largest_total_at_an_allocation_inside_blocks(tmp_path):
    r = diff(*_mem_side(tmp_path, peaks=True))
    m = r.alloc
    assert (m.before_bytes, m.after_bytes) == (7 * MIB, 2 * MIB)  # the sum, as before issue 24
    assert (m.before_peak_bytes, m.after_peak_bytes, m.delta_peak_bytes) == (105 * MIB, 101 * MIB, -4 * MIB)
    assert [b.alloc_peak_bytes for b in r.before.blocks] == [105 * MIB, 103 * MIB]
    text = _text(r)
    assert "allocated (sum, all steps) 7.0 MB → 2.0 MB (-5.0 MB)" in text
    assert "peak 105.0 MB → 101.0 MB (-4.0 MB)" in text
    assert "memory allocated inside blocks" not in text  # the old wording read like a peak
    out = _json(r)["alloc"]
    peak_bytes = (out["before_peak_bytes"], out["after_peak_bytes"], out["delta_peak_bytes"])
    assert peak_bytes == (105 * MIB, 101 * MIB, -4 * MIB)
    assert out["before_bytes"] == 7 * MIB
    assert "peak 105.0 MB → 101.0 MB" in MarkdownRenderer().render(r)


def test_peak_unknown_without_total_allocated(tmp_path):
    r = diff(*_mem_side(tmp_path, peaks=False))
    assert (r.alloc.before_bytes, r.alloc.after_bytes) == (7 * MIB, 2 * MIB)
    assert r.alloc.before_peak_bytes is None and r.alloc.after_peak_bytes is None
    assert "peak unknown" in _text(r)
    assert _json(r)["alloc"]["before_peak_bytes"] is None


def test_peak_invariants(tmp_path):
    r = diff(*_mem_side(tmp_path, peaks=True))
    r.alloc.before_peak_bytes = 104 * MIB  # not the blocks' largest
    with pytest.raises(InvariantError, match="peak"):
        r.check()
    r = diff(*_mem_side(tmp_path, peaks=True))
    r.before.blocks[0].alloc_peak_bytes = -1
    with pytest.raises(InvariantError, match="peak"):
        r.before.check()


# ---------------------------------------------------------------------------------------------
# 2. Units: one per table, never a 0.00 that is not 0


def _memset_after(b: TraceBuilder, launch_ts: float, kernel_ts: float, dur: float) -> None:
    """A memset launched inside the block's op at ``launch_ts`` (memory time of the block)."""
    b.launch(MEMSET, launch_ts, 0.5, kernel_ts, dur, kind="gpu_memset")


def _eager_ms(b: TraceBuilder, t0: float, gemm: float = 1000, memset: float = 2) -> None:
    """An eager block with ms-long GEMMs (2·gemm µs), a 500-µs softmax and a ``memset``-µs memset (launched by the
    first bmm, at t0 + 5; its kernel after the block's three)."""
    eager(b, t0, gemm=gemm, softmax=500)
    _memset_after(b, t0 + 5, t0 + 100 + 2 * gemm + 500 + 3, memset)


def _fused_us(b: TraceBuilder, t0: float, flash: float = 258.5, memset: float = 3.7) -> None:
    """A fused block of ``flash`` µs and a ``memset``-µs memset launched by the flash op (t0 + 10)."""
    fused(b, t0, flash=flash)
    _memset_after(b, t0 + 10, t0 + 100 + flash + 1, memset)


def test_category_rows_read_in_one_unit(tmp_path):
    # Before 2000 + 500 + 2 µs, after 258.5 + 3.7 µs: the table's largest figure is 2.50 ms, so every time cell is
    # in ms (before issue 24: "fused attn  0.00 ms  258.5 µs  +0.26 ms").
    r = diff(write(tmp_path / "a.json", [[_eager_ms]]), write(tmp_path / "b.json", [[_fused_us]]))
    c = r.categories
    assert (c["matmul"].before_us, c["fused_attention"].after_us, c["memory"].before_us, c["memory"].after_us) \
        == pytest.approx((2000, 258.5, 2, 3.7))
    text = _text(r)
    assert _row(text, "fused attn")[1:4] == ["0.00 ms", "0.26 ms", "+0.26 ms"]
    assert _row(text, "matmul")[1:4] == ["2.00 ms", "0.00 ms", "-2.00 ms"]
    assert _row(text, "total")[1:4] == ["2.50 ms", "0.26 ms", "-2.24 ms"]
    for label in ("matmul", "softmax", "fused attn", "memory", "elementwise", "other", "total", "profiled span"):
        assert {cell.split()[-1] for cell in _row(text, label)[1:4]} == {"ms"}, label


def test_a_small_figure_that_is_not_zero_never_reads_zero(tmp_path):
    # Memory 2 → 3.7 µs in an ms table: "<0.01 ms", and its delta "+<0.01 ms", not "0.00 ms".
    r = diff(write(tmp_path / "a.json", [[_eager_ms]]), write(tmp_path / "b.json", [[_fused_us]]))
    text = _text(r)
    assert _row(text, "memory")[1:4] == ["<0.01 ms", "<0.01 ms", "+<0.01 ms"]
    assert _row(text, "other")[1:4] == ["0.00 ms", "0.00 ms", "0.00 ms"]  # really 0
    assert _row(text, "memory")[5] == "1.85×"
    # A ratio above 0 that rounds to 0.00: memory 2000 → 3.7 µs is 0.00185×, "<0.01×" (its share of the total
    # delta: 1996.3 of 4500 - 262.2 = 4237.8 µs, 47.1%).
    r = diff(write(tmp_path / "c.json", [[partial(_eager_ms, memset=2000)]]), write(tmp_path / "d.json", [[_fused_us]]))
    assert _row(_text(r), "memory")[1:] == ["2.00 ms", "<0.01 ms", "-2.00 ms", "47.1%", "<0.01×"]


def test_changed_kernels_show_each_delta_in_a_readable_unit(tmp_path):
    # One step each: GEMM 2 × 1000 → 2 × 500 µs (-1.00 ms); the memset 2 → 3.7 µs (+1.7 µs, beyond 5 % and 1 µs).
    # Before issue 24 the list took one unit from its largest delta: "+0.00 ms  1× → 1×".
    r = diff(write(tmp_path / "a.json", [[_eager_ms]]),
             write(tmp_path / "b.json", [[partial(_eager_ms, gemm=500, memset=3.7)]]))
    assert [(k.name, k.before.count, k.after.count) for k in r.kernels_changed] == [(GEMM_C, 2, 2), (MEMSET, 1, 1)]
    assert [k.delta_us for k in r.kernels_changed] == pytest.approx([-1000, 1.7])
    lines = _text(r).splitlines()
    head = next(i for i, x in enumerate(lines) if "on both sides that changed" in x)
    listed = [x for x in lines[head:] if "× → " in x]
    assert listed[0].split()[:2] == ["-1.00", "ms"] and listed[1].split()[:2] == ["+1.7", "µs"]
    assert "0.00 ms" not in "\n".join(listed)


# ---------------------------------------------------------------------------------------------
# 3. Noise: unknown with fewer than three steps a side


def _gemm2_steps(tmp_path, name: str, n: int, gemm2: float) -> Path:
    """``n`` steps of a non-launch-bound eager block, gemm 10 µs and a second gemm of ``gemm2`` µs."""
    return write(tmp_path / name, [[partial(busy(eager), gemm2=gemm2)]] * n)


def test_two_steps_a_side_leave_the_noise_unknown_everywhere(tmp_path):
    # The second GEMM 10 → 9.65 µs per step: -0.7 µs over two steps, both ranges 0. The old rule called it beyond noise.
    r = diff(_gemm2_steps(tmp_path, "a.json", 2, 10), _gemm2_steps(tmp_path, "b.json", 2, 9.65))
    assert r.basis == Basis.MEDIAN_STEP and r.delta_us == pytest.approx(-0.35)
    assert r.noise is not None and r.noise.within_noise is None and not r.noise.known
    assert all(c.within_noise is None for c in r.noise.categories.values())
    assert r.kernels_changed == []  # -0.7 µs over all steps: below the 1-µs floor of the rule without noise
    assert "noise unknown (fewer than 3 steps on a side)" in r.kernels_changed_note
    text = _text(r)
    headline = next(x for x in text.splitlines() if x.startswith("attention ("))
    assert "noise unknown" in headline and "beyond noise" not in text and "within noise" not in text
    assert next(x for x in text.splitlines() if x.startswith("noise unknown: before 2 steps, after 2 steps"))
    assert _row(text, "total")[-1] == "unknown" and _row(text, "matmul")[-1] == "unknown"
    out = _json(r)
    assert out["attention"]["within_noise"] is None and out["noise"]["within_noise"] is None
    assert out["noise"]["known"] is False and out["noise"]["categories"]["matmul"]["within_noise"] is None
    for on in (None, Compared.SPAN):  # busy and span alike: no spread, so the gate decides nothing (issue 37)
        with pytest.raises(InconclusiveError, match="has no step-to-step spread .before 2 steps, after 2 steps"):
            gate(r, 5, on=on)


def test_three_steps_a_side_decide_noise(tmp_path):
    # The same change over three steps: ranges 0, so |Δ| 0.35 > 0 is beyond noise, and the GEMM changed by it.
    r = diff(_gemm2_steps(tmp_path, "a.json", 3, 10), _gemm2_steps(tmp_path, "b.json", 3, 9.65))
    assert r.noise.known and r.noise.within_noise is False and r.noise.categories["softmax"].within_noise is True
    assert [(k.name, k.delta_us) for k in r.kernels_changed] == [(GEMM_C, pytest.approx(-1.05))]
    text = _text(r)
    assert "beyond noise" in text and "changed beyond noise" in text
    assert gate(r, 5).within_noise is False


def test_noise_invariant(tmp_path):
    r = diff(_gemm2_steps(tmp_path, "a.json", 2, 10), _gemm2_steps(tmp_path, "b.json", 2, 9.65))
    r.noise.within_noise = False  # a verdict from two steps
    with pytest.raises(InvariantError, match="noise verdict"):
        r.check()


# ---------------------------------------------------------------------------------------------
# 4. The whole step


def _stepped(path: Path, after: bool) -> Path:
    """Two ProfilerSteps, [990, 2010] and [2090, 3110], each with one attention block and other device work.

    Before: eager blocks at 1000 and 2100 (kernels [1100, 1127] and [2200, 2227], 25 µs busy each); an aten::mm in
    step 5 whose 100-µs kernel runs [2000, 2100], past the step's host end; one in step 6, [2700, 2730]; one outside
    every step, [5100, 5200]. Step 5: busy 125, span 990 → 2100 = 1110. Step 6: busy 55; the device is busy with
    step 5's kernel until 2100, so the span opens there (not at the host's 2090): 2100 → 3110 = 1010.
    After: fused blocks (12 µs [1100, 1112], 14 µs [2200, 2214]) and a 40-µs kernel [1200, 1240] in step 5. Step 5:
    busy 52, span 990 → 2010 = 1020; step 6: busy 14, the device free since 1240, span 2090 → 3110 = 1020.
    """
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    b.annotation("ProfilerStep#5", 990, 1020)
    b.annotation("ProfilerStep#6", 2090, 1020)
    if not after:
        eager(b, 1000, name="layer0.attention")
        eager(b, 2100, name="layer0.attention")
        for ts, k, dur in ((1500, 2000, 100), (2600, 2700, 30), (5000, 5100, 100)):
            b.op("aten::mm", ts, 2)
            b.launch(GEMM, ts + 0.5, 1, k, dur)
    else:
        fused(b, 1000, flash=12)
        fused(b, 2100, flash=14)
        b.op("aten::mm", 1070, 2)
        b.launch(GEMM, 1070.5, 1, 1200, 40)
    return b.write(path)


def test_whole_step_figures_by_hand(tmp_path):
    r = diff(_stepped(tmp_path / "a.json", False), _stepped(tmp_path / "b.json", True))
    def figures(per):
        return [(f.step, round(f.busy_us, 6), round(f.span_us, 6), round(f.attention_us, 6)) for f in per]

    assert figures(r.whole_steps_before) == [(5, 125, 1110, 25), (6, 55, 1010, 25)]
    assert figures(r.whole_steps_after) == [(5, 52, 1020, 12), (6, 14, 1020, 14)]
    sb, sa = r.step_before, r.step_after  # two steps: the mean of both
    assert (sb.steps, sb.busy_us, sb.span_us, sb.attention_us) == ([5, 6], pytest.approx(90), pytest.approx(1060),
                                                                   pytest.approx(25))
    assert (sa.busy_us, sa.span_us, sa.attention_us) == pytest.approx((33, 1020, 13))
    line = next(x for x in _text(r).splitlines() if x.startswith("step (median)"))
    assert line == "step (median): busy 90.0 µs → 33.0 µs, span 1.06 ms → 1.02 ms (attention 28% → 39% of busy)"
    out = _json(r)["step"]
    assert out["before"] == {"steps": [5, 6], "busy_us": 90.0, "span_us": 1060.0, "attention_us": 25.0}
    assert out["per_step"]["after"][0] == {"step": 5, "busy_us": 52.0, "span_us": 1020.0, "attention_us": 12.0}
    assert "step (median): busy 90.0 µs → 33.0 µs" in MarkdownRenderer().render(r)


def _extra(b: TraceBuilder, t0: float, gemm: float, extra: float) -> None:
    """An eager block (busy 2·gemm + 5) and a non-attention kernel of ``extra`` µs in the same step."""
    eager(b, t0, gemm=gemm)
    if extra:
        b.op("aten::mm", t0 + 500, 2)
        b.launch(GEMM, t0 + 500.5, 1, t0 + 600, extra)


def test_the_whole_step_is_the_headline_median_step(tmp_path):
    # Attention per step 25, 33, 29 µs (gemm 10, 14, 12): the median step is step 7. Whole-step busy 125, 33, 229:
    # by busy alone the median would be step 5. On the per-step basis the step line describes the headline's step.
    steps = [[partial(_extra, gemm=g, extra=x)] for g, x in ((10, 100), (14, 0), (12, 200))]
    p = write(tmp_path / "a.json", steps)
    r = diff(p, p)
    assert r.basis == Basis.MEDIAN_STEP and r.before_figures.total_us == pytest.approx(29)
    assert r.step_before.steps == [7] and r.step_before.busy_us == pytest.approx(229)
    assert r.step_before.attention_us == pytest.approx(29)


def test_whole_step_without_per_step_attention_takes_the_median_by_busy(tmp_path):
    # One step each: the basis is the total, and the step line is that one step ("step", no "median").
    p = write(tmp_path / "a.json", [[partial(_extra, gemm=10, extra=100)]])
    r = diff(p, p)
    assert r.basis == Basis.TOTAL and r.step_before.steps == [5] and r.step_before.busy_us == pytest.approx(125)
    assert any(x.startswith("step: busy 125 µs → 125 µs") for x in _text(r).splitlines())


def test_whole_step_invariants(tmp_path):
    before, after = _stepped(tmp_path / "a.json", False), _stepped(tmp_path / "b.json", True)
    r = diff(before, after)
    f = r.before.traces[0].step_figures[0]
    f.attention_us = f.busy_us + 1  # attention beyond the step's busy time
    with pytest.raises(InvariantError, match="beyond the step's busy"):
        r.before.check()
    r = diff(before, after)
    f = r.after.traces[0].step_figures[1]
    f.span_us = f.busy_us - 1
    if f.start_us is not None:  # keep the window the span's own, so that only the busy ≤ span rule breaks
        f.end_us = f.start_us + f.span_us
    with pytest.raises(InvariantError, match="beyond the step's span"):
        r.after.check()
    r = diff(before, after)
    r.step_before.busy_us += 1  # not the mean of its steps
    with pytest.raises(InvariantError, match="median step busy"):
        r.check()


# ---------------------------------------------------------------------------------------------
# 5. The H200 sweep pairs (profile_memory, two profiled steps each), against a walk of the raw JSON


def _ns(x: float) -> int:
    return round(x * 1000)


def _walk(folder: str) -> dict:
    """From the raw events alone: per ProfilerStep#N (a user_annotation), the device events whose runtime call
    (same correlation) lies in its window on its thread; their union (busy) and span (from the step's host start,
    or from when earlier device work ended if that is later, up to the last end of host range and events); and the
    largest Total Allocated of a device allocation (Bytes > 0) inside a ``layer*.attention`` annotation."""
    path = next((SWEEP / folder).glob("*.json.gz"))
    ev = read_events(path)
    steps = {int(e["name"][13:]): e for e in ev if e.get("cat") == "user_annotation"
             and e.get("name", "").startswith("ProfilerStep#")}
    runtime = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
               and "correlation" in (e.get("args") or {})}
    device = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    spans = [(_ns(d["ts"]), _ns(d["ts"]) + _ns(d["dur"])) for d in device]
    out = {}
    for n, s in steps.items():
        h0, h1 = _ns(s["ts"]), _ns(s["ts"]) + _ns(s["dur"])
        mine = []
        for d, iv in zip(device, spans):
            rt = runtime.get(d["args"].get("correlation"))
            if rt is not None and rt["tid"] == s["tid"] and h0 <= _ns(rt["ts"]) <= h1:
                mine.append(iv)
        d0 = min(a for a, _ in mine)
        free = max((b for a, b in spans if a < d0), default=-1)
        start = d0 if h0 >= d0 else max(h0, min(free, d0))
        out[n] = (_union(mine) / 1000, (max(h1, max(b for _, b in mine)) - start) / 1000)
    blocks = [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), e["tid"]) for e in ev
              if e.get("cat") == "user_annotation" and re.fullmatch(r"layer\d+\.attention", e.get("name", ""))]
    peak = max(m["args"]["Total Allocated"] for m in ev if m.get("name") == "[memory]"
               and m["args"]["Bytes"] > 0 and m["args"]["Device Type"] != 0
               and any(a <= _ns(m["ts"]) <= b and m["tid"] == t for a, b, t in blocks))
    return {"steps": out, "peak": peak}


@requires_sweep
@pytest.mark.parametrize("before,after", PAIRS, ids=[p[0] for p in PAIRS])
def test_h200_pair_step_and_peak_from_the_raw_json(before, after):
    r = diff(SWEEP / before, SWEEP / after)
    for side, folder, ws, per in (("before", before, r.step_before, r.whole_steps_before),
                                  ("after", after, r.step_after, r.whole_steps_after)):
        walk = _walk(folder)
        got = {f.step: (f.busy_us, f.span_us) for f in per}
        assert sorted(got) == sorted(walk["steps"]) == [2, 3]
        for n, (busy_us, span_us) in walk["steps"].items():
            assert got[n] == (pytest.approx(busy_us, abs=0.05), pytest.approx(span_us, abs=0.05)), (side, n)
        # two steps: the median step is their mean; the step's busy holds the attention busy of that step
        assert ws.steps == [2, 3]
        assert ws.busy_us == pytest.approx(sum(b for b, _ in walk["steps"].values()) / 2, abs=0.05)
        assert ws.span_us == pytest.approx(sum(s for _, s in walk["steps"].values()) / 2, abs=0.05)
        fig = r.before_figures if side == "before" else r.after_figures
        assert fig.total_us <= ws.busy_us <= ws.span_us
        assert (r.alloc.before_peak_bytes if side == "before" else r.alloc.after_peak_bytes) == walk["peak"]
    assert r.noise is not None and r.noise.within_noise is None  # two profiled steps each
    text = _text(r)
    assert "noise unknown" in text and "beyond noise" not in text
    assert "allocated (sum, all steps)" in text and "peak " in text
    assert next(x for x in text.splitlines() if x.startswith("step (median): busy "))
    for label in ("matmul", "softmax", "fused attn", "memory", "elementwise", "other", "total"):
        assert len({cell.split()[-1] for cell in _row(text, label)[1:4]}) == 1, label


@requires_sweep
def test_h200_4096_memory_line_reads_as_sum_and_peak():
    # The sum (66.2 GB on a 141 GB GPU) is a turnover; the peak is a few GB. Both from the walk above.
    r = diff(SWEEP / "eager_4096", SWEEP / "sdpa-flash_4096")
    peak_b, peak_a = _walk("eager_4096")["peak"], _walk("sdpa-flash_4096")["peak"]
    assert r.alloc.before_bytes > 141e9 / 3 > peak_b > peak_a  # sum ≫ any device's memory share; peak below it
    line = next(x for x in _text(r, 160).splitlines() if x.startswith("memory in blocks:"))
    assert line.startswith(f"memory in blocks: peak {peak_b / (1 << 30):.1f} GB → {peak_a / (1 << 20):.1f} MB")


# -- layers pair as well as cores (issue 38, class 4) -------------------------------------------------------------
# llama_layer(q_us=…): the core is 20 µs on both sides; the layer is q_us + 27 µs (q GEMM, core, o GEMM 7 µs).

def _layer_pair(tmp_path: Path):
    from support.builders import llama_layer

    sides = []
    for name, q in (("before.json", 10), ("after.json", 25)):
        b = TraceBuilder()
        llama_layer(b, q_us=q)
        sides.append(b.write(tmp_path / name))
    return diff(*sides)


def test_a_diff_pairs_the_layers_around_paired_cores(tmp_path: Path) -> None:
    r = _layer_pair(tmp_path)
    (pair,) = json.loads(JSONRenderer().render(r))["blocks"]
    assert pair["delta_us"] == 0.0  # the cores did not change
    layer = pair["layer"]
    assert (layer["before"], layer["after"]) == ("SelfAttn_0", "SelfAttn_0")
    assert (layer["before_us"], layer["after_us"], layer["delta_us"]) == (37.0, 52.0, 15.0)
    assert layer["categories"]["matmul"] == {"before_us": 17.0, "after_us": 32.0, "delta_us": 15.0}


def test_the_diff_views_show_a_layer_row_before_and_after(tmp_path: Path) -> None:
    from tracekit.renderers import CSVRenderer

    r = _layer_pair(tmp_path)
    text = _text(r, 140)
    row = next(line for line in text.splitlines() if line.startswith("  layer SelfAttn"))
    assert "37.0" in row and "52.0" in row and "matmul +15.0" in row
    assert "| layer SelfAttn | forward | 1 | 37.0 | 52.0 | +15.0 |" in MarkdownRenderer().render(r)
    rows = [x for x in CSVRenderer().render(r).splitlines() if x.startswith("block_layer,matmul,")]
    assert len(rows) == 1 and rows[0].split(",")[2:5] == ["17.000", "32.000", "15.000"]
