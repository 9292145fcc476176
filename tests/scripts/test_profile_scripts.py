"""Tests for scripts/profile_attention.py and the scripts/profiling package.

Why: the sweep produces the traces tracekit is built for, so we check that
every impl that runs on this machine yields a loadable run dir whose
attention blocks tracekit finds and attributes plausibly. One tiny sweep
(all impls in one subprocess) keeps the file to a few seconds on CPU.
GPU tests carry @pytest.mark.cuda and skip without CUDA.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
from support.paths import ROOT

# A broken tracekit must fail these tests, not skip them: only a missing torch is a reason to skip.
from tracekit import analyze

pytestmark = pytest.mark.slow  # runs scripts/torch/TensorBoard: `pytest -m "not slow"` skips it

SCRIPT = ROOT / "scripts" / "profile_attention.py"
LAYERS, ACTIVE, SEQ = 2, 2, 64
MUST_RUN_ON_CPU = ["eager", "sdpa", "sdpa-math", "sparse", "linear"]
MAY_RUN_ON_CPU = ["sdpa-flash", "quantized", "autocast"]  # skipped (with a message) if unsupported
SKIPPED_ON_CPU = ["sdpa-efficient", "sdpa-cudnn", "flash-attn", "quantized-fp8"]
TINY = ["--layers", str(LAYERS), "--heads", "2", "--d-model", "32", "--batch", "1",
        "--active-steps", str(ACTIVE), "--window", "16", "--min-time", "0.02"]


def run_script(*args, timeout=180):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def skip_lines(stderr, impl):
    return [ln for ln in stderr.splitlines() if ln.startswith(f"skip: {impl}:")]


@pytest.fixture(scope="module")
def cpu_sweep(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("sweep")
    impls = MUST_RUN_ON_CPU + MAY_RUN_ON_CPU + SKIPPED_ON_CPU
    proc = run_script("--device", "cpu", "--impl", ",".join(impls), "--seq", SEQ,
                      "--out", out, *TINY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    ran = [i for i in impls if not skip_lines(proc.stderr, i)]
    return out, proc, ran


def run_dir_for(cpu_sweep, impl):
    out, proc, ran = cpu_sweep
    if impl not in ran:
        pytest.skip(f"{impl} is not available on this CPU: {skip_lines(proc.stderr, impl)[0]}")
    return out / f"{impl}_{SEQ}"


@pytest.mark.parametrize("impl", SKIPPED_ON_CPU)
def test_unavailable_impl_is_skipped_with_one_message(cpu_sweep, impl):
    _, proc, _ = cpu_sweep
    lines = skip_lines(proc.stderr, impl)
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "cpu" in lines[0]


def test_cpu_impls_that_must_run_did_run(cpu_sweep):
    _, proc, ran = cpu_sweep
    assert set(MUST_RUN_ON_CPU) <= set(ran), proc.stderr[-3000:]


@pytest.mark.parametrize("impl", MUST_RUN_ON_CPU + MAY_RUN_ON_CPU)
def test_run_dir_layout(cpu_sweep, impl):
    run_dir = run_dir_for(cpu_sweep, impl)
    gz = list(run_dir.glob("*.pt.trace.json.gz"))
    assert len(gz) == 1, sorted(p.name for p in run_dir.iterdir())
    trace = json.loads((run_dir / "trace.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {f"layer{i}.attention" for i in range(LAYERS)} <= names
    assert trace["pytorch_version"] and trace["profile_config"]["impl"] == impl


def test_summary_files_have_one_row_per_run(cpu_sweep):
    out, proc, ran = cpu_sweep
    with open(out / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["Method"] for r in rows] == ran
    assert all(r["Sequence length"] == str(SEQ) for r in rows)
    assert rows[0]["Speedup vs eager"] == "1.00x"
    assert all(r["Energy (J)"] == "n/a" for r in rows)  # no NVML on CPU
    md = (out / "summary.md").read_text()
    table = [ln for ln in md.splitlines() if ln.startswith("| ")]
    assert "Energy (J)" in table[0] and len(table) == 1 + len(ran)
    assert table[0] in proc.stdout  # the same table is printed


@pytest.mark.parametrize("impl", MUST_RUN_ON_CPU + MAY_RUN_ON_CPU)
def test_tracekit_attribution(cpu_sweep, impl):
    run_dir = run_dir_for(cpu_sweep, impl)
    res = analyze(run_dir)
    res.check()
    assert res.time_base == "host"
    blocks = [b for b in res.blocks if b.found_by == "annotation"]
    assert len(blocks) == LAYERS * ACTIVE
    assert {b.name for b in blocks} == {f"layer{i}.attention" for i in range(LAYERS)}
    cats = res.totals.categories
    assert res.totals.total_us > 0
    if impl in ("eager", "quantized"):
        assert cats["matmul"] > 0 and cats["softmax"] > 0
    if impl in ("sdpa", "sdpa-flash"):
        assert cats["fused_attention"] > 0 and cats["softmax"] == 0
    if impl == "linear":
        assert cats["softmax"] == 0 and cats["matmul"] > 0


def test_summary_uses_tracekit_percentages(cpu_sweep):
    out, _, _ = cpu_sweep
    with open(out / "summary.csv", newline="") as f:
        rows = {r["Method"]: r for r in csv.DictReader(f)}
    assert float(rows["eager"]["softmax %"]) > 0
    assert float(rows["sdpa"]["fused %"]) > 0 and float(rows["sdpa"]["softmax %"]) == 0
    assert rows["eager"]["Blocks"] == str(LAYERS * ACTIVE)


def test_each_run_gets_its_measured_latency_beside_its_traces(cpu_sweep):
    """measured.json holds the summary's own Time and spread (issue 24); tracekit reads it as the run's latency,
    and a sweep of the output folder divides those latencies for its speedups."""
    out, _, ran = cpu_sweep
    with open(out / "summary.csv", newline="") as f:
        rows = {r["Method"]: r for r in csv.DictReader(f)}
    for impl in ran:
        doc = json.loads((out / f"{impl}_{SEQ}" / "measured.json").read_text())
        assert doc["schema"] == "tracekit.measured/1"
        assert f"{doc['median_ms']:.3f}" == rows[impl]["Time (ms)"]
        assert f"{doc['low_ms']:.3f}" == rows[impl]["Min (ms)"] and f"{doc['high_ms']:.3f}" == rows[impl]["Max (ms)"]
        m = analyze(out / f"{impl}_{SEQ}").check().measured
        assert m is not None and m.median_ms == doc["median_ms"]
    sweep = analyze(out, by="run").check()
    df = sweep.to_dataframe().set_index("run")
    sdpa = df.loc[f"sdpa_{SEQ}"]
    # the measured speedup is its own column (issue 37: latency, step and attention speedups kept apart)
    assert f"{sdpa['latency_speedup']:.2f}x" == rows["sdpa"]["Speedup vs eager"]


@pytest.mark.parametrize("args", [
    ["--impl", "bogus"], ["--seq", "0"], ["--seq=-8"], ["--seq", "abc"],
    ["--layers", "0"], ["--d-model", "30", "--heads", "4"], ["--dtype", "int8"],
])
def test_bad_options_one_line_error(args, tmp_path):
    proc = run_script(*args, "--out", tmp_path, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert not (tmp_path / "summary.csv").exists()


def test_device_cuda_without_cuda_is_an_error(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    proc = run_script("--device", "cuda", "--out", tmp_path, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "CUDA" in lines[0], proc.stderr


def test_make_samples_writes_a_small_eager_sdpa_pair(tmp_path):
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_samples.py"),
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = sorted(p.name for p in tmp_path.glob("*.pt.trace.json.gz"))
    assert files == ["cpu_eager_256.pt.trace.json.gz", "cpu_sdpa_256.pt.trace.json.gz"]
    assert all((tmp_path / f).stat().st_size < 100_000 for f in files)
    assert "make_samples.py" in (tmp_path / "README.md").read_text()


# --- in-process checks of the attention cores (numerics, not profiling) ---

@pytest.fixture(scope="module")
def models():
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from profiling import model
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return model


@pytest.mark.parametrize("causal", [True, False])
def test_exact_cores_agree_with_eager(models, causal):
    import torch

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))

    def core(impl, **kw):
        m = models.Mixer(impl, 32, 2, causal=causal, **kw)
        return m._core(q, k, v)

    ref = core("eager")
    for impl in ("sdpa", "sdpa-math"):
        torch.testing.assert_close(core(impl), ref, atol=1e-5, rtol=1e-4)
    # a window wider than the sequence is plain (causal) attention
    torch.testing.assert_close(core("sparse", window=64, variant="masked"), ref,
                               atol=1e-5, rtol=1e-4)


def test_sparse_band_matches_flex_when_flex_works(models):
    import torch

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 48, 16) for _ in range(3))
    masked = models.Mixer("sparse", 32, 2, window=8, variant="masked")._core(q, k, v)
    try:
        flex = models.Mixer("sparse", 32, 2, window=8, variant="flex")._core(q, k, v)
    except Exception as exc:  # FlexAttention missing/broken on this build
        pytest.skip(f"FlexAttention unavailable: {exc}")
    torch.testing.assert_close(flex, masked, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("n", [64, 70, 5])
def test_chunked_linear_attention_matches_quadratic_reference(models, n):
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 8, dtype=torch.float64) for _ in range(3))
    got = models.Mixer("linear", 16, 2, causal=True)._linear(q, k, v, chunk=16)
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    s = (fq @ fk.transpose(-2, -1)).tril()
    torch.testing.assert_close(got, (s @ v) / s.sum(-1, keepdim=True), atol=1e-6, rtol=1e-6)


# --- GPU (run by scripts/gpu_check.sh via `pytest -m cuda`) ---

@pytest.fixture
def cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")


@pytest.mark.cuda
def test_cuda_sweep_device_time(cuda, tmp_path):
    impls = ["eager", "sdpa", "sdpa-flash", "linear", "quantized"]
    proc = run_script("--device", "cuda", "--dtype", "bfloat16", "--impl", ",".join(impls),
                      "--seq", 256, "--layers", LAYERS, "--heads", 4, "--d-model", 256,
                      "--active-steps", ACTIVE, "--out", tmp_path, timeout=600)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    with open(tmp_path / "summary.csv", newline="") as f:
        rows = {r["Method"]: r for r in csv.DictReader(f)}
    assert set(rows) == set(impls) - {i for i in impls if skip_lines(proc.stderr, i)}
    assert all(float(r["Time (ms)"]) > 0 for r in rows.values())
    for impl in rows:
        res = analyze(tmp_path / f"{impl}_256")
        res.check()
        assert res.time_base == "device"
        assert sum(b.found_by == "annotation" for b in res.blocks) == LAYERS * ACTIVE
        cats = res.totals.categories
        if impl == "eager":
            assert cats["matmul"] > 0 and cats["softmax"] > 0
        if impl in ("sdpa", "sdpa-flash"):
            assert cats["fused_attention"] > 0 and cats["softmax"] == 0
        if impl == "linear":
            assert cats["softmax"] == 0 and cats["matmul"] > 0


@pytest.mark.cuda
def test_cuda_forced_backends_skip_or_run(cuda, tmp_path):
    impls = ["sdpa-efficient", "sdpa-cudnn", "flash-attn", "sparse"]
    proc = run_script("--device", "cuda", "--dtype", "bfloat16", "--impl", ",".join(impls),
                      "--seq", 256, "--layers", 1, "--heads", 4, "--d-model", 256,
                      "--out", tmp_path, timeout=600)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for impl in impls:
        ran = (tmp_path / f"{impl}_256" / "trace.json").exists()
        assert ran != bool(skip_lines(proc.stderr, impl)), proc.stderr[-3000:]
