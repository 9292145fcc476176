"""``tracekit attribute PATH`` discovers PATH once (issue 36): run/ finds the files and the runs they make one time
and hands the CLI one result (inputs, runs, notes) to render; nothing climbs back down to discover again.
Counted by wrapping ``discover`` and ``runs_of`` wherever a tracekit module holds them."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
from support.builders import TraceBuilder, attention_block, capture, graph_launch, replay_kernels
from click.testing import CliRunner

import tracekit.cli  # noqa: F401  (loads the modules whose bindings are counted below)
import tracekit.run.api  # noqa: F401
from tracekit.cli import cli
from tracekit.run import inputs, runs


@pytest.fixture
def calls(monkeypatch) -> Counter:
    """How many times ``discover`` and ``runs_of`` run, under any name a tracekit module imported them by."""
    seen: Counter = Counter()
    for name, real in (("discover", inputs.discover), ("runs_of", runs.runs_of)):
        def counted(*a, _name=name, _real=real, **k):
            seen[_name] += 1
            return _real(*a, **k)
        for mod in [m for n, m in sys.modules.items() if n.startswith("tracekit") and m is not None]:
            if getattr(mod, name, None) is real:
                monkeypatch.setattr(mod, name, counted)
    return seen


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """Two run folders of one trace each: a folder of runs."""
    for name, layers in (("eager_1", 1), ("eager_2", 2)):
        (tmp_path / "sweep" / name).mkdir(parents=True)
        b = TraceBuilder()
        for i in range(layers):
            attention_block(b, 100.0 * i, name=f"layer{i}.attention")
        b.write(tmp_path / "sweep" / name / "host.pt.trace.json")
    return tmp_path / "sweep"


def _attribute(*args: object) -> str:
    out = CliRunner().invoke(cli, ["attribute", *map(str, args), "--format", "json", "-j", "1"])
    assert out.exit_code == 0, out.output
    return out.stderr


def test_a_file_is_discovered_once(sweep, calls) -> None:
    _attribute(sweep / "eager_1" / "host.pt.trace.json")
    assert calls["discover"] == 1 and calls["runs_of"] == 0


def test_a_folder_of_runs_is_discovered_once_and_its_note_still_shown(sweep, calls) -> None:
    err = _attribute(sweep)
    assert calls["discover"] == 1 and calls["runs_of"] == 1
    assert "holds 2 runs" in err and "--by run" in err


def test_by_run_discovers_once(sweep, calls) -> None:
    err = _attribute(sweep, "--by", "run")
    assert calls["discover"] == 1 and calls["runs_of"] == 1
    assert "holds 2 runs" not in err  # (the note is for a merged folder)


def test_a_capture_is_discovered_once_too(tmp_path, calls) -> None:
    cap = TraceBuilder()
    capture(cap, 0, 1)
    (tmp_path / "captures").mkdir()
    cap.write(tmp_path / "captures" / "bs_1.json")
    rep = TraceBuilder()
    graph_launch(rep, 990, replay_kernels(1000, 1)[0])
    _attribute(rep.write(tmp_path / "replay.json"), "--capture", tmp_path / "captures")
    assert calls["discover"] == 2  # PATH, then the capture folder: not again when the replay reads it
