"""Issue 12: trustworthy timings, real quantized attention, memory, OOM rows and the summary columns.

Why: the sweep's table is only worth reading if its spreads, memory, accuracy and launch-bound
notes are right. Expected figures come from independent sources: a float64 textbook attention
for the int8/fp8 cores, the analytic rounding bounds of int8/e4m3, hand-built traces whose idle
time is known by construction, and lists of numbers whose median/range are worked out here.
GPU tests carry @pytest.mark.cuda (run by scripts/gpu_check.sh via `pytest -m cuda`).
"""
from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from support.builders import TraceBuilder, attention_block, host_core
from support.paths import ROOT
from tracekit import analyze

SCRIPT = ROOT / "scripts" / "profile_attention.py"


@pytest.fixture(scope="module")
def prof():
    """The scripts/profiling package (summary and pack need no torch; the rest does)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import profiling.pack
        import profiling.summary

        return SimpleNamespace(summary=profiling.summary, pack=profiling.pack)
    finally:
        sys.path.remove(str(ROOT / "scripts"))


@pytest.fixture(scope="module")
def torch_prof(prof):
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import profiling.quant
        import profiling.runner
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return SimpleNamespace(torch=torch, quant=profiling.quant, runner=profiling.runner,
                           summary=prof.summary)


def _err_cos(out, ref):
    import torch

    out, ref = out.double().flatten(), ref.double().flatten()
    return float((out - ref).abs().max()), float(torch.nn.functional.cosine_similarity(out, ref, dim=0))


# --- int8 / fp8 maths on CPU ---

@pytest.mark.parametrize("block", [1, 4, 64])
def test_int8_quantizer_error_is_within_half_a_step(torch_prof, block):
    torch, quant = torch_prof.torch, torch_prof.quant
    torch.manual_seed(0)
    x = torch.randn(2, 3, 37, 16) * torch.linspace(0.1, 10, 37)[:, None]  # scales differ by token
    q, scale = quant.quantize_int8(x, block)
    assert q.dtype == torch.int8 and q.shape == x.shape and scale.shape == x.shape[:-1]
    assert int(q.abs().max()) <= 127
    # one scale per block of `block` tokens, equal to that block's amax / 127
    for j0 in range(0, 37, block):
        blk = slice(j0, min(37, j0 + block))
        want = x[..., blk, :].abs().amax(dim=(-2, -1)) / 127
        torch.testing.assert_close(scale[..., blk], want[..., None].expand_as(scale[..., blk]))
    err = (x - q.float() * scale[..., None]).abs()
    assert bool((err <= scale[..., None] / 2 + 1e-6).all())


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", [5, 40, 70])
def test_int8_core_matches_float64_attention(torch_prof, causal, n):
    torch, quant = torch_prof.torch, torch_prof.quant
    torch.manual_seed(n)
    q, k, v = (torch.randn(2, 3, n, 16) for _ in range(3))
    ref = quant.reference_core(q, k, v, causal=causal)
    # a tiny chunk forces several head chunks (the GPU path at long L)
    out = quant.int8_core(q, k, v, causal=causal, block=8, chunk_elems=2 * 32 * 32)
    assert out.shape == v.shape and out.dtype == v.dtype
    err, cos = _err_cos(out, ref)
    assert err < 0.05 and cos > 0.999, (err, cos)
    # an exact product would be closer still: the int8 path really quantizes
    assert err > 1e-5


def test_int8_core_ignores_a_constant_offset_on_keys(torch_prof):
    """Smoothing K (subtracting its mean over tokens) is what makes int8 K accurate: an offset
    shared by every key changes each score row by a constant, which softmax ignores."""
    torch, quant = torch_prof.torch, torch_prof.quant
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 48, 16) for _ in range(3))
    offset = 20 * torch.randn(16)
    ref = quant.reference_core(q, k + offset, v)
    torch.testing.assert_close(quant.reference_core(q, k, v), ref, atol=1e-5, rtol=1e-4)  # premise
    err, cos = _err_cos(quant.int8_core(q, k + offset, v), ref)
    assert err < 0.05 and cos > 0.999, (err, cos)


def _fp8_or_skip(torch):
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("no float8_e4m3fn in this torch")
    try:
        a = torch.ones(32, 16).to(torch.float8_e4m3fn)
        torch._scaled_mm(a, torch.ones(16, 32).to(torch.float8_e4m3fn).t().contiguous().t(),
                         scale_a=torch.tensor(1.0), scale_b=torch.tensor(1.0),
                         out_dtype=torch.bfloat16)
    except Exception as exc:
        pytest.skip(f"torch._scaled_mm unsupported on CPU here: {exc}")


def test_fp8_quantizer_relative_error(torch_prof):
    torch, quant = torch_prof.torch, torch_prof.quant
    _fp8_or_skip(torch)
    torch.manual_seed(0)
    x = torch.randn(3, 50, 16)
    x[:, 0, :8] = x.abs().amax() * torch.linspace(1e-6, 3e-5, 8)  # subnormal range
    q8, scale = quant.quantize_fp8(x)
    assert q8.dtype == torch.float8_e4m3fn and scale.shape == (3, 1, 1)
    torch.testing.assert_close(scale, x.abs().amax(dim=(-2, -1), keepdim=True) / 448)
    back = q8.float() * scale
    # e4m3 keeps 3 mantissa bits: relative rounding error <= 2^-4 for normal numbers
    # (|x / scale| >= 2^-6); below that the absolute error is at most half the subnormal step 2^-9
    y = (x / scale).abs()
    normal = y >= 2 ** -6
    rel = ((back - x).abs() / x.abs())[normal]
    assert float(rel.max()) <= 2 ** -4 + 1e-6
    assert int((~normal).sum()) > 0
    assert float(((back - x).abs() / scale)[~normal].max()) <= 2 ** -10 + 1e-9


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", [5, 40])
def test_fp8_core_matches_float64_attention(torch_prof, causal, n):
    torch, quant = torch_prof.torch, torch_prof.quant
    _fp8_or_skip(torch)
    torch.manual_seed(n)
    q, k, v = (torch.randn(1, 3, n, 16) for _ in range(3))
    ref = quant.reference_core(q, k, v, causal=causal)
    out = quant.fp8_core(q, k, v, causal=causal, chunk_elems=32 * 32)
    assert out.shape == v.shape
    err, cos = _err_cos(out, ref)
    assert err < 0.3 and cos > 0.99, (err, cos)
    assert err > 1e-4  # really reduced precision
    # int8 QK with bf16/fp32 PV is the more accurate of the two on the same inputs
    assert _err_cos(quant.int8_core(q, k, v, causal=causal), ref)[1] >= cos


# --- repeat / spread logic ---

def test_summarize_median_and_min_max(torch_prof):
    runner = torch_prof.runner
    vals = [3.0, 1.0, 2.5, 10.0, 2.0]
    t = runner.summarize(vals, iters=20)
    assert t.median == statistics.median(vals) == 2.5
    assert (t.low, t.high, t.kind, t.repeats, t.iters) == (1.0, 10.0, "min-max", 5, 20)
    assert t.half_spread == pytest.approx(4.5)


def test_summarize_iqr(torch_prof):
    runner = torch_prof.runner
    vals = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    t = runner.summarize(vals, iters=7, kind="IQR")
    # inclusive quartiles of 1..9: 3 and 7
    assert (t.median, t.low, t.high, t.kind) == (5.0, 3.0, 7.0, "IQR")
    one = runner.summarize([4.0], iters=1, kind="IQR")  # a single block: no spread to report
    assert (one.median, one.spread) == (4.0, 0.0)
    with pytest.raises(ValueError):
        runner.summarize([], iters=1)


def test_agreement_within_spreads(torch_prof):
    T = torch_prof.runner.Timing
    a = T(median=10.0, low=9.0, high=11.0, kind="min-max", repeats=5, iters=20)  # ± 1
    b = T(median=11.5, low=11.0, high=12.0, kind="min-max", repeats=5, iters=20)  # ± 0.5
    c = T(median=13.0, low=12.9, high=13.1, kind="min-max", repeats=5, iters=20)  # ± 0.1
    assert a.agrees_with(b) and b.agrees_with(a)  # 1.5 <= 1 + 0.5
    assert not a.agrees_with(c)  # 3.0 > 1.1
    assert a.agrees_with(c, slack=3)  # 3.0 <= 3.3


@pytest.mark.parametrize("est_ms,target,want", [
    (1.0, None, 20),  # no cap
    (1.0, 1.0, 20),  # 5 x 20 x 1 ms fits in 1 s
    (40.0, 1.0, 5),  # 1000 / (5 * 40)
    (500.0, 1.0, 3),  # never below 3
])
def test_plan_iters(torch_prof, est_ms, target, want):
    assert torch_prof.runner.plan_iters(est_ms, repeats=5, iters=20, target_s=target) == want


def test_cpu_latency_keeps_each_repeat_and_names_its_timer(torch_prof):
    torch, runner = torch_prof.torch, torch_prof.runner
    x = torch.randn(64, 64)
    t = runner.measure_latency(lambda: x @ x, torch.device("cpu"), min_time=0.05, repeats=2)
    assert t.repeats == len(t.samples) == 5  # at least 5 on CPU, whatever --repeats says
    assert (t.low, t.high, t.kind) == (min(t.samples), max(t.samples), "min-max")
    assert t.median == statistics.median(t.samples) and t.timer == "CPU timer (time.perf_counter)"


def test_cpu_forward_slower_than_min_time_is_still_timed_five_times(torch_prof, monkeypatch):
    """issue 37: blocked_autorange measured a forward slower than min_time once (± 0). A fake clock that
    advances 1 s per call: every repeat is one call of 1000 ms, five of them."""
    runner = torch_prof.runner
    clock = {"t": 0.0}
    monkeypatch.setattr(runner.time, "perf_counter", lambda: clock["t"])

    def forward():
        clock["t"] += 1.0

    t = runner.time_cpu(forward, repeats=5, min_time=0.2)
    assert t.samples == (1000.0,) * 5 and (t.repeats, t.iters, t.median) == (5, 1, 1000.0)


def test_measured_json_keeps_samples_and_names_the_timer(prof, tmp_path):
    """write_measured: samples_ms from the timing, and a `what` naming the timer that took them (issue 37: a CPU
    run said "CUDA events"); a timing without samples (older callers) writes none."""
    s = prof.summary
    for timer, samples in (("CPU timer (time.perf_counter)", (2.0, 2.2, 2.1)), ("CUDA events", (1.0, 1.1, 1.2))):
        t = SimpleNamespace(median=statistics.median(samples), low=min(samples), high=max(samples),
                            kind="min-max", repeats=3, iters=1, samples=samples, timer=timer)
        s.write_measured(tmp_path, {"timing": t, "impl": "eager", "seq": 64}, None, None)
        doc = json.loads((tmp_path / "measured.json").read_text())
        assert doc["samples_ms"] == list(samples) and doc["what"] == f"forward pass, outside the profiler ({timer})"
        m = analyze_measured(tmp_path / "measured.json")
        assert m.samples_ms == samples and m.sample_count == 3
    s.write_measured(tmp_path, {"timing": _timing(1.0, 0.9, 1.1), "impl": "eager", "seq": 64}, None, None)
    doc = json.loads((tmp_path / "measured.json").read_text())
    assert doc["samples_ms"] is None and doc["what"] == "forward pass, outside the profiler"


def analyze_measured(path):
    from tracekit.run.measured import read_measured

    return read_measured(path)


# --- OOM / error rows ---

def _opts(**kw):
    base = dict(layers=1, heads=2, d_model=32, batch=1, causal=True, window=16, min_time=0.02,
                iters=3, repeats=2, active_steps=1, record_shapes=False, profile_memory=True,
                with_stack=False, with_modules=False, cuda_graphs=False, timing_seconds=None,
                energy_seconds=0.1, graph_max_ms=None)
    base.update(kw)
    return SimpleNamespace(**base)


@pytest.mark.slow  # records a real (CPU) profile for the config that follows the OOM
def test_oom_becomes_a_row_and_the_sweep_goes_on(torch_prof, tmp_path, monkeypatch):
    torch, runner, summary = torch_prof.torch, torch_prof.runner, torch_prof.summary
    from profiling import model

    real_build = model.build
    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError

    def failing_build(impl, **kw):
        built = real_build(impl, **kw)
        if impl != "sdpa":
            return built

        def forward():  # what the caching allocator raises when a request cannot be met
            raise oom("CUDA out of memory. Tried to allocate 64.00 GiB. GPU 0 has a total "
                      "capacity of 139.81 GiB of which 1.00 GiB is free.")
        return (built[0], forward, *built[2:])

    monkeypatch.setattr(model, "build", failing_build)
    logs = []
    dev, opts = torch.device("cpu"), _opts()
    results = [runner.run_config(impl, 32, "", opts, dev, torch.float32, tmp_path, log=logs.append)
               for impl in ("sdpa", "eager")]
    assert results[0]["status"] == "OOM" and results[0]["latency_ms"] is None
    assert any(line.startswith("oom: sdpa") for line in logs)
    assert results[1]["status"] == "" and results[1]["latency_ms"] > 0  # the sweep went on
    rows = summary.build_rows(results, warn=logs.append)
    assert rows[0]["Note"] == "OOM" and rows[0]["Time (ms)"] == "n/a"
    assert rows[0]["Speedup vs eager"] == "n/a" and rows[0]["Status"] == "OOM"
    assert rows[1]["Status"] == "ok" and rows[1]["Speedup vs eager"] == "1.00x"


def test_other_failures_become_one_line_error_rows(torch_prof, tmp_path):
    torch, runner = torch_prof.torch, torch_prof.runner

    def boom(*a, **kw):
        raise RuntimeError("self.size(0) needs to be greater than 16, but got 8\nsecond line")

    cpu_oom = runner.run_config("eager", 8, "", _opts(), torch.device("cpu"), torch.float32,
                                tmp_path, log=lambda m: None,
                                runner=lambda *a, **k: (_ for _ in ()).throw(RuntimeError(
                                    "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: "
                                    "can't allocate memory: you tried to allocate 1 bytes")))
    assert cpu_oom["status"] == "OOM"
    r = runner.run_config("quantized", 8, "", _opts(), torch.device("cpu"), torch.float32,
                          tmp_path, log=lambda m: None, runner=boom)
    assert r["status"] == "error: RuntimeError: self.size(0) needs to be greater than 16, but got 8"
    assert "\n" not in r["status"]


# --- launch-bound flag from synthetic traces ---

def _busy_block(b, t0, name):
    """One GEMM that keeps the device busy for 1000 µs right after a short host side."""
    b.annotation(name, t0, 10)
    b.op("aten::bmm", t0 + 1, 8)
    b.launch("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>"
             "(Params)", t0 + 2, 2, t0 + 5, 1000)
    host_core(b, t0 + 9.05)


@pytest.mark.parametrize("busy", [False, True])
def test_launch_bound_note_from_a_synthetic_trace(prof, tmp_path, busy):
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])
    for i, t0 in enumerate((0, 2000)):
        if busy:
            _busy_block(b, t0, f"layer{i}.attention")
        else:  # by construction: busy 31 µs of a 136 µs span (builders.attention_block)
            attention_block(b, t0, name=f"layer{i}.attention")
    run = tmp_path / "run"
    run.mkdir()
    b.write(run / "w.pt.trace.json")
    res = analyze(run)
    res.check()
    assert res.totals.launch_bound is (not busy)
    shares = prof.summary.attribute(analyze, run, 1)
    assert shares["Launch-bound blocks"] == ("0/2" if busy else "2/2")
    if not busy:
        assert shares["Idle %"] == pytest.approx(100 * (136 - 31) / 136, abs=0.5)
    result = {"impl": "eager", "seq": 512, "variant": "", "latency_ms": 1.0, "run_dir": str(run),
              "active_steps": 1}
    [row] = prof.summary.build_rows([result], warn=lambda m: None)
    assert ("launch-bound" in row["Note"]) is (not busy)


# --- summary columns ---

def _timing(median, low, high, kind="min-max"):
    return SimpleNamespace(median=median, low=low, high=high, kind=kind, repeats=5, iters=20,
                           spread=high - low, half_spread=(high - low) / 2)


def test_summary_columns_and_files(prof, tmp_path):
    s = prof.summary
    results = [
        {"impl": "eager", "seq": 1024, "variant": "", "latency_ms": 8.0,
         "timing": _timing(8.0, 7.0, 9.5), "graph": None, "peak_mb": 4096.4, "max_abs_err": 0.004,
         "cosine": 0.999991, "energy_j": 1.5, "run_dir": None, "status": "", "notes": []},
        {"impl": "quantized", "seq": 1024, "variant": "int8", "latency_ms": 2.0,
         "timing": _timing(2.0, 1.9, 2.3), "graph": _timing(1.25, 1.2, 1.3), "peak_mb": 900.0,
         "max_abs_err": 0.0312, "cosine": 0.99951, "energy_j": None, "run_dir": None,
         "status": "", "notes": ["graph: RuntimeError: x"]},
        {"impl": "sdpa-math", "seq": 16384, "variant": "", "latency_ms": None, "timing": None,
         "graph": None, "peak_mb": None, "max_abs_err": None, "cosine": None, "energy_j": None,
         "run_dir": None, "status": "skipped: time budget", "notes": []},
    ]
    rows = s.build_rows(results, warn=lambda m: None)
    assert rows[0]["Time (ms)"] == "8.000" and rows[0]["± (ms)"] == "1.250"  # (9.5 - 7) / 2
    assert rows[1]["Speedup vs eager"] == "4.00x" and rows[1]["Graph (ms)"] == "1.250"
    assert rows[0]["Peak mem (MB)"] == "4096" and rows[1]["Max abs err"] == "0.0312"
    assert rows[1]["Cosine"] == "0.99951" and rows[1]["Note"] == "graph: RuntimeError: x"
    assert rows[2]["Note"] == "skipped: time budget" and rows[2]["Time (ms)"] == "n/a"
    assert rows[0]["Spread kind"] == "min-max" and rows[0]["Mem source"].startswith("cuda")
    cols = s.table_columns(rows)
    assert cols.index("Graph (ms)") == cols.index("± (ms)") + 1
    for c in ("Time (ms)", "± (ms)", "Peak mem (MB)", "Max abs err", "Cosine", "Note",
              "Energy (J)", "softmax %"):
        assert c in cols
    csv_path, md_path = s.write(tmp_path, rows, header="device=cuda\nmeasured today")
    with open(csv_path, newline="") as f:
        got = list(csv.DictReader(f))
    assert [r["Method"] for r in got] == ["eager", "quantized", "sdpa-math"]
    assert list(got[0]) == s.TABLE_COLUMNS + s.CSV_EXTRA
    md = md_path.read_text()
    table = [ln for ln in md.splitlines() if ln.startswith("| ")]
    assert "Graph (ms)" in table[0] and len(table) == 4
    assert "launch-bound" in md and "measured today" in md
    # without graph timings the column is not printed
    assert "Graph (ms)" not in s.table_columns(rows[:1])


def test_pack_caps_tarball_size(prof, tmp_path):
    import tarfile

    sweep = tmp_path / "sweep"
    sizes = {"eager_512": 300_000, "sdpa_512": 100_000, "eager_4096": 50_000}
    for name, size in sizes.items():
        (sweep / name).mkdir(parents=True)
        (sweep / name / "w.pt.trace.json.gz").write_bytes(bytes(size))  # zeros: sizes stay exact
        (sweep / name / "trace.json").write_bytes(b"{}")  # the plain copy never travels
    out = tmp_path / "out"
    written = prof.pack.pack(sweep, out, [[512, 1024], [4096, 8192]], max_mb=0.3)
    names = sorted(p.name for p, _ in written)
    assert names == ["traces_L4096-8192.tar", "traces_L512-1024.tar"]
    for path, dropped in written:
        assert path.stat().st_size <= 0.3 * 2**20
        with tarfile.open(path) as tar:
            members = tar.getnames()
        assert not any(m.endswith("trace.json") for m in members)
        if "L512" in path.name:  # 400 kB of traces do not fit in 0.3 MB: the largest is left out
            assert [d.parent.name for d in dropped] == ["eager_512"]
            assert members == ["MANIFEST.txt", "sdpa_512/w.pt.trace.json.gz"]


# --- whole sweeps (subprocess, CPU) ---

def run_script(*args, timeout=300):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


TINY = ["--layers", "1", "--heads", "2", "--d-model", "32", "--batch", "1", "--active-steps", "1",
        "--window", "16", "--threads", "1"]


@pytest.mark.slow
def test_cpu_sweep_shows_spread_memory_and_accuracy(tmp_path):
    pytest.importorskip("torch")
    proc = run_script("--device", "cpu", "--impl", "eager,quantized,linear", "--seq", "64,96",
                      "--quadratic-max-seq", "64", "--profile-memory", "--min-time", "0.05",
                      "--out", tmp_path, *TINY)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    with open(tmp_path / "summary.csv", newline="") as f:
        rows = {(r["Method"], r["Sequence length"]): r for r in csv.DictReader(f)}
    for key in (("eager", "64"), ("quantized", "64"), ("linear", "64"), ("linear", "96")):
        r = rows[key]
        assert float(r["Time (ms)"]) > 0 and float(r["± (ms)"]) >= 0, r
        assert float(r["Peak mem (MB)"]) > 0 and r["Mem source"].startswith("profiler"), r
        assert -1 <= float(r["Cosine"]) <= 1 and float(r["Max abs err"]) >= 0
    assert float(rows["quantized", "64"]["Max abs err"]) > 0  # int8 linears are not exact
    assert float(rows["quantized", "64"]["Cosine"]) > 0.99
    assert rows["quantized", "64"]["Variant"].startswith("int8-dynamic linears")
    assert "int8-dynamic linears" in rows["quantized", "64"]["Note"]  # labelled in the table
    # quadratic impls above --quadratic-max-seq are rows, not silently missing
    assert rows["eager", "96"]["Note"].startswith("skipped: L x L")
    md = (tmp_path / "summary.md").read_text()
    assert "measured " in md and "torch " in md  # date, device and versions with the table


def _cpu_sweep_median(out: Path) -> tuple[float, float]:
    """One CPU sweep of the tiny eager config: its median and its reported spread (ms)."""
    proc = run_script("--device", "cpu", "--impl", "eager", "--seq", "256",
                      "--min-time", "0.3", "--out", out, *TINY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "summary.csv", newline="") as f:
        [row] = list(csv.DictReader(f))
    assert row["Spread kind"] in ("IQR", "min-max")
    return float(row["Time (ms)"]), float(row["± (ms)"])


def _agree(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Within 3x the two spreads or 50% of the larger median (loose: the box is shared)."""
    (m1, s1), (m2, s2) = a, b
    return abs(m1 - m2) <= max(3 * (s1 + s2), 0.5 * max(m1, m2))


@pytest.mark.slow
def test_back_to_back_cpu_sweeps_agree_within_spreads(tmp_path):
    """Two sweeps of the same config agree within their reported spreads (loose bound: this
    box is shared, so 3x the spreads or 50% of the median).

    A load that starts or stops between two sweeps moves one whole run (seen: 10.99 against 2.68 ms
    on a CI box with other jobs), which no spread inside one run can show; so a disagreeing pair is
    run once more, and the test fails only when the second pair disagrees too. A script whose
    medians or spreads are wrong disagrees every time, and still fails."""
    pytest.importorskip("torch")
    tries = []
    for attempt in range(2):
        pair = [_cpu_sweep_median(tmp_path / f"try{attempt}-run{i}") for i in range(2)]
        tries.append({"medians_and_spreads_ms": pair, "load_1min": round(os.getloadavg()[0], 2)})
        if _agree(*pair):
            break
        print(f"sweeps disagree on try {attempt + 1} (a loaded machine?): {tries[-1]}")  # kept in the report
    assert _agree(*tries[-1]["medians_and_spreads_ms"]), tries


@pytest.mark.slow
def test_time_budget_turns_the_rest_into_rows(tmp_path):
    pytest.importorskip("torch")
    proc = run_script("--device", "cpu", "--impl", "eager,sdpa", "--seq", "32,48",
                      "--time-budget", "0.001", "--min-time", "0.02", "--out", tmp_path, *TINY,
                      timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    with open(tmp_path / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and all(r["Note"] == "skipped: time budget" for r in rows)
    assert proc.stderr.count("skipped: time budget") == 4  # one progress line per config


# --- GPU (scripts/gpu_check.sh runs these with `pytest -m cuda`) ---

@pytest.fixture
def cuda(torch_prof):
    if not torch_prof.torch.cuda.is_available():
        pytest.skip("needs CUDA")
    return torch_prof


@pytest.mark.cuda
def test_cuda_int8_and_fp8_cores(cuda):
    torch, quant = cuda.torch, cuda.quant
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 300, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ref = quant.reference_core(q, k, v)
    err, cos = _err_cos(quant.int8_core(q, k, v), ref)
    assert cos > 0.999 and err < 0.1, (err, cos)
    if torch.cuda.get_device_capability() >= (8, 9):
        err, cos = _err_cos(quant.fp8_core(q, k, v), ref)
        assert cos > 0.99 and err < 0.3, (err, cos)


@pytest.mark.cuda
def test_cuda_real_oom_is_a_row(cuda, tmp_path):
    torch, runner = cuda.torch, cuda.runner
    total = torch.cuda.get_device_properties(0).total_memory

    def greedy(*a, **kw):
        torch.empty(4 * total, dtype=torch.uint8, device="cuda")

    r = runner.run_config("eager", 1, "", _opts(), torch.device("cuda"), torch.bfloat16, tmp_path,
                          log=lambda m: None, runner=greedy)
    assert r["status"] == "OOM"
    x = torch.ones(16, device="cuda")  # the device still works
    assert float(x.sum()) == 16


@pytest.mark.cuda
def test_cuda_graph_timing(cuda):
    torch, runner = cuda.torch, cuda.runner
    a = torch.randn(256, 256, device="cuda")

    def fwd():
        return torch.relu(a @ a)

    dev = torch.device("cuda")
    t = runner.measure_graph(fwd, dev, repeats=5, iters=20)
    assert t.repeats == 5 and 0 < t.low <= t.median <= t.high


@pytest.mark.cuda
def test_cuda_sweep_quantized_rows(cuda, tmp_path):
    torch = cuda.torch
    impls = ["quantized", "quantized-fp8", "autocast"]
    proc = run_script("--device", "cuda", "--dtype", "bfloat16", "--impl", ",".join(impls),
                      "--seq", 256, "--layers", 2, "--heads", 4, "--d-model", 256,
                      "--active-steps", 1, "--cuda-graphs", "--out", tmp_path, timeout=600)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    with open(tmp_path / "summary.csv", newline="") as f:
        rows = {r["Method"]: r for r in csv.DictReader(f)}
    expected = {"quantized", "autocast"}
    if torch.cuda.get_device_capability() >= (8, 9):
        expected.add("quantized-fp8")
    assert expected <= set(rows), proc.stderr[-3000:]
    for impl in expected:
        r = rows[impl]
        assert r["Status"] == "ok", r
        assert float(r["Time (ms)"]) > 0 and r["Spread kind"] == "min-max" and r["Repeats"] == "5"
        assert float(r["Peak mem (MB)"]) > 0 and r["Mem source"].startswith("cuda")
        assert float(r["Cosine"]) > 0.99, r
        assert r["Launch-bound blocks"] != "n/a"
    assert rows["quantized"]["Variant"].startswith("int8")
    res = analyze(tmp_path / "quantized_256")
    res.check()
    assert res.time_base == "device" and res.totals.categories["matmul"] > 0


def test_agree_compares_timed_rows_within_spreads(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from profiling import agree
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    head = "Method,Sequence length,Time (ms),± (ms),Note\n"
    a = tmp_path / "a.csv"
    b = tmp_path / "b.csv"
    a.write_text(head + "eager,2048,10.0,0.5,\nsdpa,2048,3.0,0.1,\nlinear,2048,n/a,n/a,OOM\n")
    b.write_text(head + "eager,2048,10.8,0.4,\nsdpa,2048,3.5,0.1,\nlinear,2048,5.0,0.1,\n")
    got = {k: ok for k, *_, ok in agree.compare(a, b)}
    # |10.8 - 10| = 0.8 <= 0.9; |3.5 - 3| = 0.5 > 0.2; linear was not timed in a
    assert got == {("eager", "2048"): True, ("sdpa", "2048"): False}
    assert agree.main([str(a), str(b)]) == 1
    assert agree.main([str(a), str(b), "--slack", "3"]) == 0
    assert agree.main([str(a), str(tmp_path / "missing.csv")]) == 2


@pytest.mark.parametrize("causal", [True, False])
def test_mixer_dispatches_fp8_core_with_its_cached_mask(torch_prof, causal):
    torch, quant = torch_prof.torch, torch_prof.quant
    _fp8_or_skip(torch)
    from profiling.model import Mixer

    torch.manual_seed(2)
    m = Mixer("quantized-fp8", 32, 2, causal=causal)
    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))
    ref = quant.reference_core(q, k, v, causal=causal)
    err, cos = _err_cos(m._core(q, k, v), ref)
    assert cos > 0.99 and 1e-4 < err < 0.3, (err, cos)
    # the eager path on the same Mixer settings is exact: the error is the fp8 products'
    m.impl = "eager"
    assert _err_cos(m._core(q, k, v), ref)[0] < 1e-5


@pytest.mark.slow  # a real CPU profile (about 8 s here)
def test_cpu_run_writes_five_samples_and_names_the_cpu_timer(tmp_path):
    """The smallest run of the script on CPU: measured.json keeps each repeat (>= 5) and says which clock took
    them; tracekit reads the samples back."""
    pytest.importorskip("torch")
    proc = run_script("--device", "cpu", "--impl", "eager", "--seq", "16", "--min-time", "0.01", "--repeats", "1",
                      "--out", tmp_path, *TINY)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "eager_16" / "measured.json").read_text())
    assert len(doc["samples_ms"]) >= 5 and doc["repeats"] == len(doc["samples_ms"])
    assert "CPU timer" in doc["what"] and "CUDA" not in doc["what"]
    assert doc["median_ms"] == statistics.median(doc["samples_ms"])
    assert (doc["low_ms"], doc["high_ms"]) == (min(doc["samples_ms"]), max(doc["samples_ms"]))
    m = analyze(tmp_path / "eager_16").check().measured
    assert m.samples_ms == tuple(doc["samples_ms"])
