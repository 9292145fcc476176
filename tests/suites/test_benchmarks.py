"""The benchmark's tiler keeps results honest, and the benchmark itself runs (a smoke run; the
timing figures come from running benchmarks/bench.py by hand, never from the test suite)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support.paths import REAL, ROOT, SAMPLES, requires_real
from tracekit import analyze
from tracekit.results.attribution import CATEGORIES

pytestmark = pytest.mark.slow  # runs scripts/torch/TensorBoard: `pytest -m "not slow"` skips it

sys.path.insert(0, str(ROOT / "benchmarks"))
from tile import tile  # noqa: E402


def _assert_scaled(src, tiled, copies):
    a, b = analyze(src).check(), analyze(tiled).check()
    assert b.totals.blocks == copies * a.totals.blocks
    assert b.totals.total_us == pytest.approx(copies * a.totals.total_us, rel=1e-9)
    for c in CATEGORIES:
        assert b.totals.categories[c] == pytest.approx(copies * a.totals.categories[c], rel=1e-9, abs=1e-6)
    assert len(b.traces[0].steps) == copies * len(a.traces[0].steps)
    if a.coverage is not None:
        assert b.coverage.unlinked_us == pytest.approx(copies * a.coverage.unlinked_us, rel=1e-9, abs=1e-6)
        assert b.coverage.device_events == copies * a.coverage.device_events


def test_tiled_cpu_trace_is_the_source_times_copies(tmp_path):
    src = SAMPLES / "cpu_eager_256.pt.trace.json.gz"
    out = tmp_path / "tiled.json"
    tile(src, out, 3)
    _assert_scaled(src, out, 3)


@requires_real
@pytest.mark.parametrize("rel", ["tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
                                 "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"])  # Qwen: unlinked orphans
def test_tiled_gpu_trace_is_the_source_times_copies(tmp_path, rel):
    out = tmp_path / "tiled.json.gz"
    tile(REAL / rel, out, 4)
    _assert_scaled(REAL / rel, out, 4)


def test_benchmark_smoke_run():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--smoke"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    rows = [ln for ln in proc.stdout.splitlines() if "tracekit attribute" in ln or "orjson.loads only" in ln]
    assert len(rows) == 3


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_tree_pss_counts_the_children() -> None:
    # a parent that forks a child; the child touches 64 MB of its own: the tree's PSS must include it,
    # while the parent alone (its VmRSS, from the kernel) stays well below
    import time

    from bench import tree_pss

    code = ("import os, sys, time\n"
            "r, w = os.pipe()\n"
            "if os.fork() == 0:\n"
            "    b = bytearray(64 << 20)\n"
            "    for i in range(0, len(b), 4096): b[i] = 1\n"
            "    os.write(w, b'x'); time.sleep(30); os._exit(0)\n"
            "os.read(r, 1); print('ready', flush=True); time.sleep(30)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        time.sleep(0.1)
        own = next(int(line.split()[1]) for line in open(f"/proc/{p.pid}/status") if line.startswith("VmRSS:"))
        assert own / 1024 < 48
        assert tree_pss(p.pid) >= 64
    finally:
        p.kill()
        p.wait()


def test_stage_timer_lists_every_stage_and_their_sum():
    """benchmarks/stages.py (the per-stage CPU times notes quote) runs, names each stage of STAGES once, in order,
    and its analysis line is the sum of the stage lines."""
    from tracekit.analysis.pipeline import stage_names

    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "stages.py"),
                           str(SAMPLES / "cpu_eager_256.pt.trace.json.gz"), "--reps", "1"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    rows = [ln.split() for ln in proc.stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == ["load", *stage_names(), "analysis"]
    assert float(rows[-1][1]) == pytest.approx(sum(float(r[1]) for r in rows[1:-1]), abs=0.1 * len(rows))


def _git_checkout() -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _git_checkout(), reason="not a git checkout: --baseline COMMIT needs one")
def test_benchmark_baseline_commit_runs_in_a_worktree_that_is_removed_after(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--smoke", "--tools", "tracekit",
                           "--baseline", "HEAD", "--work", str(tmp_path)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "baseline tracekit attribute (.json)" in proc.stdout
    assert "this checkout / baseline, median of per-rep ratios" in proc.stdout
    trees = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True).stdout
    assert not (tmp_path / "baseline-HEAD").exists() and str(tmp_path) not in trees


def test_benchmark_baseline_pairs_the_default_path_too_when_tracekit_jobs_runs(tmp_path):
    """With tracekit-jobs chosen, the baseline also runs with --jobs W and a second ratio line pairs the two: the
    default path (a big file's decode workers) is compared like with like, not against the baseline's -j 1."""
    args = ["--smoke", "--tools", "tracekit,tracekit-jobs", "--workers", "2", "--baseline", str(ROOT),
            "--work", str(tmp_path)]
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench.py"), *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "baseline tracekit --jobs W (.json)" in proc.stdout
    lines = [x for x in proc.stdout.splitlines() if "this checkout / baseline" in x]
    assert len(lines) == 2 and "baseline (--jobs)" in lines[1] and "(--jobs)" not in lines[0]


@pytest.mark.skipif(not _git_checkout(), reason="not a git checkout: --baseline COMMIT needs one")
def test_benchmark_baseline_that_is_no_folder_nor_commit_is_a_one_line_error(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--smoke", "--tools", "tracekit",
                           "--baseline", "no-such-ref-xyz", "--work", str(tmp_path)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("Error: --baseline no-such-ref-xyz:") and len(proc.stderr.splitlines()) == 1


def test_benchmark_classes_pairs_each_kind_of_trace_or_says_it_is_absent(tmp_path):
    """--classes: one row per kind of trace in CLASSES, each with this checkout's and the baseline's medians and
    their ratios, or 'skipped' naming the shared trace that is absent (a fresh clone has none)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench import CLASSES

    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--classes", "--smoke",
                           "--baseline", str(ROOT), "--work", str(tmp_path)], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()[2:]}
    assert list(rows) == [c.name for c in CLASSES]
    for c in CLASSES:
        fields = rows[c.name].split()
        if (REAL / c.trace).is_file():
            this, base, wall, cpu = map(float, fields[2:6])
            assert this > 0 and base > 0 and wall > 0 and cpu > 0
        else:
            assert fields[1] == "skipped:"


def test_benchmark_classes_without_a_baseline_is_a_usage_error():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--classes", "--smoke"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "--classes pairs against a baseline" in proc.stderr


def test_phases_split_one_cli_run_and_add_up():
    """benchmarks/phases.py: each phase timed once per fresh process, the table's total their sum and the share
    after the model is built the analysis, check and output over it; the output phase renders exactly what
    `tracekit attribute --format json` writes (the same renderer, title and tool)."""
    import resource  # (POSIX only, as the phases' CPU times are compared with the child's)

    sample = SAMPLES / "cpu_eager_256.pt.trace.json.gz"
    script = str(ROOT / "benchmarks" / "phases.py")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    one = subprocess.run([sys.executable, script, str(sample), "--json"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = json.loads(one.stdout.splitlines()[-1])
    child_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    phases = ("import", "load", "analysis", "check", "output")
    assert sum(run[k] for k in phases) <= child_cpu  # disjoint phases of the child's own CPU time
    cli = subprocess.run([sys.executable, "-m", "tracekit", "attribute", str(sample), "--format", "json"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT, check=True)
    assert run["output_chars"] == len(cli.stdout)
    assert all(run[k] >= 0 for k in phases)

    proc = subprocess.run([sys.executable, script, str(sample), "--reps", "2"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, check=True)
    rows = {line[:28].strip(): line[28:].split() for line in proc.stdout.splitlines()[1:]}
    assert list(rows) == ["import", "load", "analysis", "check", "output", "total", "after the model is built"]
    secs = {k: float(v[0]) for k, v in rows.items()}
    assert secs["total"] == pytest.approx(sum(secs[k] for k in phases), abs=0.003)  # (each printed to 1 ms)
    after = secs["analysis"] + secs["check"] + secs["output"]
    assert secs["after the model is built"] == pytest.approx(after, abs=0.002)
    assert float(rows["after the model is built"][1].rstrip("%")) == pytest.approx(100 * after / secs["total"],
                                                                                   abs=1.0)
