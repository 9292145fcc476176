"""The PyTorch Profiler TensorBoard plugin must load what our scripts write.

Why a real server: the plugin discovers runs by file-name pattern and parses
them in background processes; only a running `tensorboard` shows that our
run dirs (tensorboard_trace_handler output) and sample_traces/ load. The
server is bounded (<= 60 s of polling) and always terminated.
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from support.paths import ROOT

pytestmark = pytest.mark.slow  # runs scripts/torch/TensorBoard: `pytest -m "not slow"` skips it

SAMPLES = ROOT / "sample_traces"
PLUGIN = "/data/plugin/pytorch_profiler"
DEADLINE_S = 60


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(base, route, **params):
    url = f"{base}{PLUGIN}/{route}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read().decode())


@pytest.fixture
def logdir(tmp_path):
    """run_x = the committed samples; sweep/eager_32 = a fresh run from the script."""
    pytest.importorskip("torch")
    root = tmp_path / "logs"
    runs = []
    samples = sorted(SAMPLES.glob("*.pt.trace.json.gz"))
    if samples:
        (root / "run_x").mkdir(parents=True)
        for f in samples:
            shutil.copy(f, root / "run_x" / f.name)
        runs.append("run_x")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "profile_attention.py"), "--device", "cpu",
         "--impl", "eager", "--seq", "32", "--layers", "1", "--heads", "2", "--d-model", "32",
         "--min-time", "0.02", "--out", str(root / "sweep")],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs.append("sweep/eager_32")
    return root, runs


@pytest.fixture
def server(logdir, tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed")
    pytest.importorskip("torch_tb_profiler", reason="torch-tb-profiler plugin is not installed")
    root, runs = logdir
    port = free_port()
    log = open(tmp_path / "tensorboard.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(root), "--host", "127.0.0.1",
         "--port", str(port), "--load_fast=false"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}", runs, proc, tmp_path / "tensorboard.log"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        log.close()


def wait_for_runs(base, want, proc, log_path):
    """Poll /runs until every wanted run is loaded (the plugin loads asynchronously)."""
    deadline, last = time.monotonic() + DEADLINE_S, None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"tensorboard exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}")
        try:
            last = get_json(base, "runs")
            if set(want) <= set(last["runs"]):
                return last
        except (urllib.error.URLError, ConnectionError, OSError):
            pass  # server still starting
        time.sleep(0.5)
    pytest.fail(f"runs {want} not loaded within {DEADLINE_S}s; last /runs = {last}\n"
                f"{log_path.read_text()[-3000:]}")


def test_plugin_loads_our_runs(server):
    base, runs, proc, log_path = server
    listed = wait_for_runs(base, runs, proc, log_path)
    assert set(listed) == {"runs", "loading"}
    for run in runs:
        views = get_json(base, "views", run=run)
        assert "Overview" in views and "Operator" in views
        workers = get_json(base, "workers", run=run, view="Overview")
        assert workers
        if run == "run_x":  # one worker per sample file
            assert set(workers) == {f.name.split(".")[0] for f in SAMPLES.glob("*.pt.trace.json.gz")}
        for worker in workers:
            spans = get_json(base, "spans", run=run, worker=worker)
            assert len(spans) == 1  # exactly one trace per worker and run dir
            q = dict(run=run, worker=worker, span=spans[0])
            overview = get_json(base, "overview", **q)
            assert overview["steps"]["rows"], overview.keys()
            assert {"title": "Device Type", "value": "CPU"} in overview["environments"]
            ops = get_json(base, "operation", group_by="Operation", **q)
            names = {row[0] for row in ops["host_self_time"]["rows"]}
            assert any(n in names for n in ("aten::bmm", "aten::addmm", "aten::mm")), names
