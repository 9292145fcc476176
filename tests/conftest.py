"""Shared fixtures: where the real traces are, and helpers to run the CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The one place that knows where the real traces live: every test finds them through REAL.
REAL = ROOT.parent / "shared" / "traces" / "real"
SAMPLES = ROOT / "sample_traces"

requires_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real traces not present at {REAL} (a user's clone)")


def real(rel: str) -> Path:
    """One real trace by its path under REAL (kept for tests on other branches that call it)."""
    return REAL / rel


def real_trace_files() -> list[Path]:
    """Every real trace file (sorted), or [] when the folder is absent (a user's clone)."""
    if not REAL.is_dir():
        return []
    return sorted(REAL.rglob("*.json.gz")) + sorted(REAL.rglob("*.json"))


def run_cli(*args: object, cwd: Path | None = None, check: bool = False,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: a fresh process, so exit codes and stderr are real."""
    proc = subprocess.run([sys.executable, "-m", "tracekit", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}: {proc.stderr}")
    return proc


@contextmanager
def chunk_size(chunk: int) -> Iterator[list[int]]:
    """Make the loader read in ``chunk``-byte windows, through ``EventStream``'s own ``chunk`` parameter.

    Yields the list of chunk sizes the streams were built with, so a test can assert that its
    setting reached the reader (a renamed parameter must fail the test, not silently test 32 MB).
    The reader's other sizes shrink with it: its batches are decoded in pieces of a quarter chunk, and
    the events before the last one are cut off at the end of any file over a chunk (read._tail_cut).
    """
    from tracekit.io import load, read

    used: list[int] = []
    base = load.EventStream

    class SmallChunks(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: object, **kw: object) -> None:
            kw["chunk"] = chunk
            super().__init__(*args, **kw)
            used.append(self.chunk)

    load.EventStream = SmallChunks  # type: ignore[misc]
    sizes = read.PIECE, read._TAIL_WINDOW
    read.PIECE, read._TAIL_WINDOW = max(64, chunk // 4), chunk
    try:
        yield used
    finally:
        load.EventStream = base  # type: ignore[misc]
        read.PIECE, read._TAIL_WINDOW = sizes


# -- the fuzzer's hypothesis profiles (tests/test_fuzz.py) -------------------------------------------
# "ci": what a plain `python -m pytest -q` runs, about a minute, derandomized so a failure reproduces.
# "long": `pytest -m fuzz` (or TRACEKIT_FUZZ_PROFILE=long), thousands of random examples, with the
# example database so a failure found once is tried first next time.
FUZZ_EXAMPLES = {"ci": 1500, "long": 10000}


def pytest_configure(config: pytest.Config) -> None:
    """Register the fuzz profiles and load one: "long" when the -m expression selects fuzz."""
    try:
        from hypothesis import HealthCheck, Phase, settings
    except ImportError:  # tests/test_fuzz.py then fails to import, loudly; the rest still runs
        return

    quiet = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
             HealthCheck.filter_too_much]
    settings.register_profile("ci", max_examples=FUZZ_EXAMPLES["ci"], deadline=None, derandomize=True,
                              database=None, print_blob=True, suppress_health_check=quiet,
                              phases=[Phase.explicit, Phase.generate])  # no shrinking: keep CI time bounded
    settings.register_profile("long", max_examples=FUZZ_EXAMPLES["long"], deadline=None,
                              print_blob=True, suppress_health_check=quiet)
    markexpr = config.getoption("markexpr", "") or ""
    chosen = os.environ.get("TRACEKIT_FUZZ_PROFILE") or (
        "long" if re.search(r"(?<!not )\bfuzz\b", markexpr) else "ci")
    settings.load_profile(chosen)


@pytest.fixture(params=[1 << 10, None], ids=["1k-pieces", "pieces"])
def read_pieces(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader test run twice: with batches decoded in 1 KB pieces (read.decode_pieces) and the events
    before the last one cut off at the end of even a small file (read._tail_cut), each cut proven by its
    decoding; and as shipped."""
    from tracekit.io import read

    if request.param is not None:
        monkeypatch.setattr(read, "PIECE", request.param)
        monkeypatch.setattr(read, "_TAIL_WINDOW", 2 << 10)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Each session starts with tracekit's memo caches empty (``functools`` caches of op costs, rules, names).

    mutmut forks each mutant's run from a process whose earlier session filled them: a cached answer would
    hide the mutated function, and its mutants would survive untested (issue 21).
    """
    for name, mod in list(sys.modules.items()):
        if name == "tracekit" or name.startswith("tracekit."):
            for obj in list(vars(mod).values()):
                clear = getattr(obj, "cache_clear", None)
                if callable(clear):
                    clear()
