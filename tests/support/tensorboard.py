"""A real TensorBoard on 127.0.0.1 for the tab's tests: started, asked, always stopped."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.paths import ROOT


LAUNCHER = """
import sys
from tensorboard import default, program
from tracekit.tbplugin import TracekitLoader
tb = program.TensorBoard(plugins=default.get_static_plugins() + [TracekitLoader])
tb.configure(argv=[None, "--logdir", sys.argv[1], "--host", "127.0.0.1", "--port", sys.argv[2]])
sys.exit(tb.main())
"""


def entry_point_installed() -> bool:
    return any(e.name == "tracekit" and e.value.startswith("tracekit.tbplugin")
               for e in importlib.metadata.entry_points(group="tensorboard_plugins"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(base: str, route: str, **params: str) -> tuple[int, str]:
    url = base + route + ("?" + urllib.parse.urlencode(params) if params else "")
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="tk-data">(.*?)</script>', page, re.S)
    assert m, page[:300]
    return json.loads(m.group(1))


@contextlib.contextmanager
def tensorboard(root: Path, every_plugin: bool = False, log: Path | None = None) -> Iterator[str]:
    """A real TensorBoard on 127.0.0.1 serving ``root``, its base URL once it answers; always stopped after.
    The installed ``tensorboard`` command (every plugin its entry points name, torch-tb-profiler included) where
    tracekit's entry point is installed or ``every_plugin`` asks; else the launcher (static plugins + tracekit).
    ``log``: where its output goes (else its stderr is kept for the failure message)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    tb = shutil.which("tensorboard")
    if every_plugin:
        cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(root), "--host", "127.0.0.1",
               "--port", str(port), "--load_fast=false"]
    elif entry_point_installed() and tb:
        cmd = [tb, "--logdir", str(root), "--host", "127.0.0.1", "--port", str(port)]
    else:
        cmd = [sys.executable, "-c", LAUNCHER, str(root), str(port)]
    out = open(log, "w") if log is not None else None
    proc = subprocess.Popen(cmd, env=env, stdout=out or subprocess.DEVNULL,
                            stderr=subprocess.STDOUT if out else subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                said = log.read_text() if log is not None else proc.stderr.read()  # type: ignore[union-attr]
                pytest.fail(f"tensorboard exited {proc.returncode}: {said[-2000:]}")
            try:
                status, _ = get(base, "/data/plugins_listing")
                if status == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "tensorboard did not answer in 90 s"
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if out is not None:
            out.close()
        assert proc.returncode is not None
