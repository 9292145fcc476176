"""--dask: each file of a folder as a task on a real Dask cluster (distributed.LocalCluster with worker
processes on 127.0.0.1, never a mock); results merged on the client identical to a local run, a bad
file reported while the others still count, and a worker killed by PID mid-run losing nothing and
counting nothing twice. Rank traces are hand-built (tests/results/test_ranks.py), so every rank's figures
are known by construction."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from support.builders import ATTENTION_BLOCK_BUSY as BUSY, rank_trace
from support.paths import ROOT
from tracekit.errors import UsageError
from tracekit.run.api import analyze as attribute_inputs
from tracekit.run.inputs import discover
from tracekit.memory import is_glibc
from tracekit.renderers.jsonrenderer import to_dict

distributed = pytest.importorskip("distributed")


def _comparable(res) -> dict:
    out = to_dict(res, "t")
    return out


@pytest.fixture(scope="module")
def cluster():
    """Two single-threaded worker processes on 127.0.0.1, made as ``--dask local:2`` makes them
    (forked on Linux), shared by the tests of this module."""
    from tracekit.run.cluster import _Connection

    conn = _Connection("local:2", 2)
    try:
        yield conn.cluster
    finally:
        conn.close()


def test_local_workers_start_by_fork_unless_the_user_chose(cluster) -> None:
    import dask

    import tracekit.io.load  # noqa: F401  (in this process before the workers started, as the CLI has it)
    from tracekit.run.cluster import LOCAL_SETTINGS, _local_settings

    client = distributed.Client(cluster.scheduler_address, set_as_default=False)
    try:
        # a forked worker inherits this process's modules; a spawned one would not have tracekit.io.load yet
        inherited = client.run(lambda: "tracekit.io.load" in sys.modules)
        profiling = client.run(lambda: dask.config.get("distributed.worker.profile.enabled"))
    finally:
        client.close()
    if sys.platform.startswith("linux"):
        assert list(inherited.values()) == [True, True]
    assert list(profiling.values()) == [False, False]
    method = "distributed.worker.multiprocessing-method"
    # Dask's defaults everywhere (outside the fixture's connection): every setting applies
    with dask.config.set({key: dask.config.get(key, config=dask.config.merge(*dask.config.defaults))
                          for key, _v, _w in LOCAL_SETTINGS}):
        assert set(_local_settings(dask)) == {k for k, _v, _w in LOCAL_SETTINGS} - (
            set() if sys.platform.startswith("linux") else {method})
        with dask.config.set({method: "forkserver", "distributed.admin.tick.interval": "50ms"}):
            chosen = _local_settings(dask)  # what the user set is kept
        assert method not in chosen and "distributed.admin.tick.interval" not in chosen
        assert "distributed.worker.profile.enabled" in chosen


def _folder(d: Path, ranks: int, blocks=lambda r: r + 1) -> Path:
    d.mkdir()
    for r in range(ranks):
        rank_trace(d / f"worker_rank{r}.pt.trace.json", blocks(r))
    return d


@pytest.mark.slow
def test_same_result_as_a_local_run(cluster, tmp_path: Path) -> None:
    found = discover(_folder(tmp_path / "run", 6))
    serial = attribute_inputs(found, jobs=1).check()
    calls: list[tuple[str, int, int]] = []
    on_dask = attribute_inputs(found, dask=cluster.scheduler_address,
                               progress=lambda n, d, t: calls.append((n, d, t))).check()
    assert _comparable(on_dask) == _comparable(serial)
    assert on_dask.ranks is not None and [r.total_us for r in on_dask.ranks.rows] == [BUSY * n for n in range(1, 7)]
    total = sum(f.stat().st_size for f in found.files)
    assert len(calls) == 6 and calls[-1][1:] == (total, total)  # as-completed counts, one per file
    assert not on_dask.damaged


@pytest.mark.slow
def test_a_bad_file_is_reported_and_the_others_still_count(cluster, tmp_path: Path) -> None:
    d = _folder(tmp_path / "run", 3)
    (d / "worker_rank7.pt.trace.json").write_text("{not json")
    res = attribute_inputs(discover(d), dask=cluster.scheduler_address).check()
    assert res.incomplete and res.damaged
    bad = [w for w in res.warnings if "worker_rank7" in w]
    assert len(bad) == 1 and "not valid JSON" in bad[0] and "\n" not in bad[0]
    assert res.ranks is not None and [r.rank for r in res.ranks.rows] == [0, 1, 2]
    assert res.totals.total_us == pytest.approx(BUSY * (1 + 2 + 3))


@pytest.mark.slow
def test_cli_local_cluster_exit_3_and_one_error_line(tmp_path: Path) -> None:
    from support.cli import run_cli

    d = _folder(tmp_path / "run", 2)
    (d / "worker_rank5.pt.trace.json").write_text("[]")
    r = run_cli("attribute", d, "--dask", "local:2", "--format", "json")
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    warn = [line for line in r.stderr.splitlines() if "worker_rank5" in line]
    assert len(warn) == 1 and warn[0].startswith("Warning: "), r.stderr
    import json

    out = json.loads(r.stdout)
    assert [row["rank"] for row in out["ranks"]["rows"]] == [0, 1]


@pytest.mark.slow
def test_a_worker_killed_mid_run_loses_nothing_and_counts_nothing_twice(cluster, tmp_path: Path) -> None:
    # 12 ranks of 400 blocks + r: each task takes long enough that both workers are busy at the kill
    found = discover(_folder(tmp_path / "run", 12, blocks=lambda r: 400 + r))
    client = distributed.Client(cluster.scheduler_address, set_as_default=False)
    try:
        pids_before = client.run(os.getpid)
        killed: list[int] = []
        in_flight: list[int] = []

        def progress(name: str, done: int, total: int) -> None:
            if killed:
                return
            busy = {addr: keys for addr, keys in client.processing().items() if keys}
            if not busy:  # between tasks: try again at the next file
                return
            addr = sorted(busy)[0]  # a worker with a task running on it right now
            os.kill(pids_before[addr], signal.SIGKILL)
            killed.append(pids_before[addr])
            in_flight.append(len(busy[addr]))

        res = attribute_inputs(found, dask=cluster.scheduler_address, progress=progress).check()
        assert killed and in_flight[0] >= 1, "the worker must die with a task in flight"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the nanny restarts the worker under a new PID
            try:
                pids_after = client.run(os.getpid)
            except Exception:
                pids_after = {}
            if len(pids_after) == 2 and killed[0] not in pids_after.values():
                break
            time.sleep(0.5)
        assert killed[0] not in pids_after.values()
    finally:
        client.close()
    assert not res.damaged and not res.warnings
    assert res.ranks is not None
    assert [(r.rank, r.blocks) for r in res.ranks.rows] == [(r, 400 + r) for r in range(12)]  # each rank once
    assert res.totals.blocks == sum(400 + r for r in range(12))
    assert res.totals.total_us == pytest.approx(BUSY * res.totals.blocks)
    assert len(res.traces) == 12


def test_address_forms() -> None:
    from tracekit.run.cluster import parse_address

    assert parse_address("local") == (None, None)
    assert parse_address("local:3") == (None, 3)
    assert parse_address("tcp://10.0.0.1:8786") == ("tcp://10.0.0.1:8786", None)
    with pytest.raises(UsageError):
        parse_address("local:0")
    with pytest.raises(UsageError):
        parse_address(" ")


def test_without_dask_installed_the_error_says_how_to_get_it(monkeypatch, tmp_path: Path) -> None:
    d = _folder(tmp_path / "run", 2)
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(UsageError, match=r"tracekit\[dask\]"):
        attribute_inputs(discover(d), dask="local:1")


def test_a_url_folder_reads_like_the_local_folder(tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    d = _folder(tmp_path / "run", 3)
    (d / "sub").mkdir()
    rank_trace(d / "sub" / "worker_rank3.pt.trace.json", 4)
    local = attribute_inputs(discover(d)).check()
    url = discover(f"file://{d}")
    assert url.urls and [str(f) for f in url.files] == ["sub/worker_rank3.pt.trace.json",
                                                       *(f"worker_rank{r}.pt.trace.json" for r in range(3))]
    assert _comparable(attribute_inputs(url).check()) == _comparable(local)


def test_a_bad_url_file_is_named_by_its_url(tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    f = tmp_path / "bad.json"
    f.write_text("{not json")
    from tracekit.errors import TracekitError

    with pytest.raises(TracekitError, match=rf"^file://{tmp_path}/bad.json: not valid JSON"):
        attribute_inputs(discover(f"file://{f}"))


@pytest.mark.slow
def test_a_url_folder_on_dask(cluster, tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    d = _folder(tmp_path / "run", 4)
    local = attribute_inputs(discover(d)).check()
    on_dask = attribute_inputs(discover(f"file://{d}"), dask=cluster.scheduler_address).check()
    assert _comparable(on_dask) == _comparable(local)


@pytest.mark.slow
def test_bench_many_ranks_smoke(tmp_path: Path) -> None:
    """benchmarks/bench.py --ranks runs and finds the three ways' outputs identical (figures come from hand runs)."""
    import subprocess

    root = ROOT
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "bench.py"), "--smoke", "--ranks", "3",
                           "--tools", "none", "--workers", "2", "--work", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("serial", "--jobs", "--dask"))]
    assert len(rows) == 3 and all(line.endswith("identical") for line in rows), proc.stdout


def test_importing_tracekit_loads_no_dask() -> None:
    """The extra is imported only when --dask is given: not by the package, the CLI or the readers."""
    import subprocess

    code = ("import sys, tracekit, tracekit.cli, tracekit.run.inputs, tracekit.analysis.attribute, "
            "tracekit.analysis.compare, tracekit.results.ranks; "
            "tracekit.analyze; bad = [m for m in ('dask', 'distributed', 'fsspec') if m in sys.modules]; "
            "sys.exit(str(bad) if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_task_frees_the_previous_tasks_model_when_the_gc_is_paused(tmp_path: Path) -> None:
    # a forked worker inherits the CLI's paused GC: without a collection per task, every rank's model
    # (reference cycles) would stay in the worker until it exits
    import gc

    from tracekit.model import Trace
    from tracekit.run.plan import plan
    from tracekit.run.tasks import attribute_or_error as analyse_file

    d = _folder(tmp_path / "run", 4)
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for f in sorted(d.iterdir()):
            assert not isinstance(analyse_file(str(f), plan(jobs=1).for_workers()), str)
        assert gc.get_freeze_count() > 0  # each task froze what survived its collection (its next one skips them)
        gc.unfreeze()  # (count those too)
        alive = sum(type(o) is Trace for o in gc.get_objects())
    finally:
        gc.unfreeze()
        if was:
            gc.enable()
    assert alive <= 1, f"{alive} models kept after 4 tasks"


_ARENAS = '''
import ctypes, os, sys, tempfile
def arenas(_=None):
    """glibc's malloc arenas in this process, after this thread allocated (malloc_stats prints one per arena)."""
    keep = [bytearray(1 << 20), [bytes(1000) for _ in range(1000)]]
    with tempfile.TemporaryFile() as f:
        saved = os.dup(2)
        try:
            os.dup2(f.fileno(), 2)
            ctypes.CDLL(None).malloc_stats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        return f.read().decode().count("Arena ")
from tracekit.run.cluster import _Connection
conn = _Connection("local:2", 2)
try:
    print(conn.client.gather(conn.client.map(arenas, range(4), pure=False)), arenas())
finally:
    conn.close()
'''


@pytest.mark.skipif(not is_glibc(), reason="glibc's arenas")
@pytest.mark.parametrize("env, want", [({}, 1), ({"MALLOC_ARENA_MAX": "3"}, None)])
def test_local_workers_tasks_allocate_from_one_malloc_arena(env: dict, want: int | None) -> None:
    # a task runs on a worker's executor thread: with its own arena, each file's freed model was faulted
    # back in by the next task (benchmarks/README.md); the user's MALLOC_ARENA_MAX is left alone
    import ast
    import subprocess

    clean = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    proc = subprocess.run([sys.executable, "-c", _ARENAS], capture_output=True, text=True, timeout=120,
                          env={**clean, **env})
    assert proc.returncode == 0, proc.stderr[-2000:]
    tasks, client = ast.literal_eval(proc.stdout.strip().splitlines()[-1].replace("] ", "], "))
    if want is None:  # glibc's own choice up to the user's cap: more than one
        assert 1 < max(tasks + [client]) <= 3, (tasks, client)
    else:
        assert tasks == [want] * 4 and client == want, (tasks, client)


def test_malloc_is_left_alone_in_a_process_with_other_threads() -> None:
    # a notebook's kernel has threads with arenas of their own: one arena for all would make them contend
    import threading

    from tracekit.run.cluster import _one_malloc_arena

    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert _one_malloc_arena() is False
    finally:
        stop.set()
        other.join()
