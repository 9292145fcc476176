"""The package type-checks: mypy over tracekit/ with the settings in pyproject.toml ([tool.mypy])."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.paths import ROOT


@pytest.mark.slow
def test_mypy_is_clean() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_mypy_is_clean_without_the_optional_extras(tmp_path) -> None:
    """The same check in an interpreter that has only the core dependencies (orjson, click, msgspec): no dask,
    distributed, fsspec, werkzeug, tensorboard or pandas. A venv without pip, the core packages linked in."""
    import importlib
    import os
    import venv

    env_dir = tmp_path / "core"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    for name in ("orjson", "click", "msgspec", "numpy"):
        src = os.path.dirname(importlib.import_module(name).__file__ or "")
        os.symlink(src, os.path.join(site, name))
    probe = subprocess.run([str(python), "-c", "import orjson, click, msgspec\n"
                            "for m in ('dask', 'distributed', 'fsspec', 'werkzeug', 'tensorboard', 'pandas'):\n"
                            "    try:\n        __import__(m)\n    except ImportError:\n        continue\n"
                            "    raise SystemExit(m + ' is importable')"], capture_output=True, text=True)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--python-executable", str(python),
                           "--cache-dir", str(tmp_path / "cache")], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
