"""Fixtures and hooks only: what tests share as plain functions and constants is in tests/support/."""

from __future__ import annotations

import os
import re
import sys

import pytest


# -- the fuzzer's hypothesis profiles (tests/suites/test_fuzz.py) -------------------------------------------
# "ci": what a plain `python -m pytest -q` runs, about a minute, derandomized so a failure reproduces.
# "long": `pytest -m fuzz` (or TRACEKIT_FUZZ_PROFILE=long), thousands of random examples, with the
# example database so a failure found once is tried first next time.
FUZZ_EXAMPLES = {"ci": 1500, "long": 10000}


def pytest_configure(config: pytest.Config) -> None:
    """Register the fuzz profiles and load one: "long" when the -m expression selects fuzz."""
    try:
        from hypothesis import HealthCheck, Phase, settings
    except ImportError:  # tests/suites/test_fuzz.py then fails to import, loudly; the rest still runs
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


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium shared by a module's page tests (skipped when chromium or selenium is missing)."""
    from support.browser import start_browser

    d = start_browser()
    try:
        yield d
    finally:
        d.quit()
