"""Workers end with their parent (issue 26, rows 13-14): a parent killed by SIGKILL leaves no pool worker behind, and
Ctrl-C is the parent's alone (workers ignore SIGINT, so they print no traceback)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.builders import TraceBuilder, attention_block

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

_POOL = textwrap.dedent("""
    import multiprocessing, os, sys, time
    from tracekit.workers import worker_init
    init = sys.argv[1] == "init"
    pool = multiprocessing.get_context("fork").Pool(
        1, initializer=worker_init if init else None, initargs=(os.getpid(),) if init else ())
    pid = pool.apply(os.getpid)
    pool.apply_async(time.sleep, (120,))
    time.sleep(1)  # (the worker is asleep in its task, not waiting on the pool's pipe)
    print(pid, flush=True)
    time.sleep(120)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead: it only waits for its parent to reap it
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _orphan_after_parent_killed(init: bool) -> tuple[int, bool]:
    parent = subprocess.Popen([sys.executable, "-c", _POOL, "init" if init else "bare"], stdout=subprocess.PIPE,
                              text=True)
    worker = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return worker, _alive(worker)


def test_a_worker_dies_with_its_killed_parent() -> None:
    worker, alive = _orphan_after_parent_killed(init=True)
    assert not alive


def test_without_the_initializer_the_worker_is_orphaned() -> None:
    """The control: the same pool without worker_init leaves its worker running (so the test above can fail)."""
    worker, alive = _orphan_after_parent_killed(init=False)
    try:
        assert alive
    finally:
        if _alive(worker):
            os.kill(worker, signal.SIGKILL)


def test_workers_ignore_ctrl_c() -> None:
    import multiprocessing

    from tracekit.workers import worker_init

    with multiprocessing.get_context("fork").Pool(1, initializer=worker_init, initargs=(os.getpid(),)) as pool:
        assert pool.apply(signal.getsignal, (signal.SIGINT,)) == signal.SIG_IGN


def test_workers_die_on_sigterm_whatever_handler_the_parent_set() -> None:
    """The CLI's SIGTERM clean-up handler is inherited by forked workers; they set the default back, so a pool's
    terminate() ends them at once instead of running the parent's clean-up."""
    import multiprocessing

    from tracekit.workers import worker_init

    before = signal.signal(signal.SIGTERM, lambda *a: None)
    try:
        with multiprocessing.get_context("fork").Pool(1, initializer=worker_init, initargs=(os.getpid(),)) as pool:
            assert pool.apply(signal.getsignal, (signal.SIGTERM,)) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, before)


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out |= {int(x) for x in (task / "children").read_text().split()}
        except OSError:
            pass
    return out


def _ranks(tmp_path: Path) -> Path:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for r in range(2):
        b = TraceBuilder()
        for k in range(3000):  # big enough that the workers are still busy when the parent is stopped
            attention_block(b, 200.0 * k, name=f"layer{k % 24}.attention")
        b.write(folder / f"rank{r}.pt.trace.json")
    return folder


def _started(folder: Path, stderr=subprocess.DEVNULL) -> tuple[subprocess.Popen, set[int]]:
    """``tracekit attribute FOLDER -j 2``, once both its workers are running."""
    cli = subprocess.Popen([sys.executable, "-m", "tracekit", "attribute", str(folder), "-j", "2"],
                           stdout=subprocess.DEVNULL, stderr=stderr, text=True)
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while len(workers) < 2 and cli.poll() is None and time.monotonic() < deadline:
        workers = _children(cli.pid)
        time.sleep(0.05)
    if cli.poll() is not None:
        pytest.skip("the run ended before its workers could be seen")
    return cli, workers


def test_ctrl_c_ends_a_pool_run_quietly_with_130(tmp_path: Path) -> None:
    cli, workers = _started(_ranks(tmp_path), stderr=subprocess.PIPE)
    t0 = time.monotonic()
    cli.send_signal(signal.SIGINT)
    _, err = cli.communicate(timeout=30)
    assert cli.returncode == 130 and time.monotonic() - t0 < 10
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "Interrupted"
    assert not [w for w in workers if _alive(w)]


def test_attribute_jobs_2_leaves_no_worker_when_killed(tmp_path: Path) -> None:
    cli, workers = _started(_ranks(tmp_path))
    cli.kill()
    cli.wait()
    deadline = time.monotonic() + 15
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [w for w in workers if _alive(w)]
    for w in left:
        os.kill(w, signal.SIGKILL)
    assert workers and not left


_STUCK = textwrap.dedent("""
    import multiprocessing, os, signal, sys, time
    from tracekit.io import pload
    pload._TERMINATE_S = 2.0
    from tracekit.workers import worker_init
    pool = multiprocessing.get_context("fork").Pool(1, initializer=worker_init, initargs=(os.getpid(),))
    worker = pool.apply(os.getpid)
    time.sleep(0.5)  # idle: the worker holds the task queue's lock while it waits for a task
    os.kill(worker, signal.SIGKILL)  # ... and dies holding it
    time.sleep(0.5)
    t0 = time.monotonic()
    (pool.terminate if sys.argv[1] == "plain" else lambda: pload.terminate(pool))()
    print(round(time.monotonic() - t0, 1), flush=True)
""")


def test_terminate_ends_although_a_worker_died_holding_the_queue_lock() -> None:
    """Issue 26, row 17: the hang behind test_parallel_decode's rare stall, made certain; the control shows that the
    plain Pool.terminate() waits forever in it."""
    out = subprocess.run([sys.executable, "-c", _STUCK, "bounded"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) < 10
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([sys.executable, "-c", _STUCK, "plain"], capture_output=True, text=True, timeout=8)
