"""The run's plan travels whole (issue 36): every way a file is read (here, from a file:// URL, in a pool, on Dask)
goes through ``tracekit.run.tasks.attribute_one`` with the same plan, so ``--capture`` maps a replay's kernels
the same way in each. The replay and its capture are hand-built: 2 captured attention calls, replayed once, so
every replayed kernel (2 x (10 + 5 + 8) µs) is mapped by construction."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.builders import TraceBuilder, capture, graph_launch, replay_kernels
from click.testing import CliRunner

from tracekit import analyze
from tracekit.cli import cli
from tracekit.renderers.jsonrenderer import to_dict

LAYERS = 2
REPLAYED_US = LAYERS * (10 + 5 + 8)  # replay_kernels' default durations


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """(a folder holding two replay traces, one per rank, the capture trace they replay, outside that folder)."""
    cap = TraceBuilder()
    capture(cap, 0, LAYERS)
    rep = TraceBuilder()
    kernels, _ = replay_kernels(1000, LAYERS)
    graph_launch(rep, 990, kernels)
    runs = tmp_path / "ranks"
    runs.mkdir()
    first = rep.write(runs / "rank0.pt.trace.json")
    shutil.copyfile(first, runs / "rank1.pt.trace.json")
    return runs, cap.write(tmp_path / "capture.json")


def _cli_json(*args: object) -> dict:
    out = CliRunner().invoke(cli, ["attribute", *map(str, args), "--format", "json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def _graphs(doc: dict) -> list[dict]:
    return [t["graphs"] for t in doc["traces"]]


def _mapped(doc: dict) -> dict:
    """What the capture decided, per trace: the graphs figures and warnings (not the file's name)."""
    return {"graphs": _graphs(doc), "warnings": [t["warnings"] for t in doc["traces"]],
            "blocks": sorted((b["name"], b["total_us"]) for b in doc["blocks"])}


def test_the_capture_maps_every_replayed_kernel_of_a_local_file(pair) -> None:
    runs, cap = pair
    doc = _cli_json(runs / "rank0.pt.trace.json", "--capture", cap, "-j", "1")
    (g,) = _graphs(doc)
    assert g["mapped_share"] == 1.0 and g["mapped_us"] == pytest.approx(REPLAYED_US)
    assert g["capture_sources"] == ["capture.json"]
    without = _graphs(_cli_json(runs / "rank0.pt.trace.json", "-j", "1"))[0]
    assert without["mapped_share"] == 0.0  # (so the figure above is the capture's doing)


def test_a_file_url_maps_as_the_local_path(pair) -> None:
    pytest.importorskip("fsspec")
    runs, cap = pair
    local = _cli_json(runs / "rank0.pt.trace.json", "--capture", cap, "-j", "1")
    url = _cli_json((runs / "rank0.pt.trace.json").as_uri(), "--capture", cap, "-j", "1")
    assert _mapped(url) == _mapped(local)
    assert _graphs(url)[0]["mapped_share"] == 1.0


def test_a_pool_maps_each_file_as_the_local_path(pair) -> None:
    runs, cap = pair
    one = _mapped(_cli_json(runs / "rank0.pt.trace.json", "--capture", cap, "-j", "1"))
    pooled = _cli_json(runs, "--capture", cap, "--jobs", "2")
    assert _graphs(pooled) == one["graphs"] * 2
    assert sorted(b["total_us"] for b in pooled["blocks"]) == sorted(2 * [us for _, us in one["blocks"]])
    url_folder = _cli_json(runs.as_uri(), "--capture", cap, "-j", "1") if _has("fsspec") else pooled
    assert _graphs(url_folder) == one["graphs"] * 2


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def test_dask_maps_each_file_as_the_local_path(pair) -> None:
    distributed = pytest.importorskip("distributed")
    pytest.importorskip("fsspec")
    runs, cap = pair
    one = _graphs(to_dict(analyze(runs / "rank0.pt.trace.json", jobs=1, captures=(cap,)), "t"))
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address=None)
    try:
        for target in (runs, runs.as_uri()):  # shared paths, and URLs the worker opens
            got = analyze(str(target), captures=(cap,), dask=cluster.scheduler_address).check()
            assert _graphs(to_dict(got, "t")) == one * 2, target
    finally:
        cluster.close()


def test_the_plan_a_worker_gets_pickles_without_the_callback(pair) -> None:
    import pickle

    from tracekit.run.plan import plan

    how = plan(jobs=2, decode_workers=3, progress=lambda *a: None, captures=("c.json",))
    sent = pickle.loads(pickle.dumps(how.for_workers()))
    assert sent.progress is None and sent.decode_workers == 1 and sent.in_worker
    assert (sent.captures, sent.scope, sent.hints, sent.jobs) == (how.captures, how.scope, how.hints, how.jobs)


def test_the_gc_is_paused_around_each_file_and_back_on_afterwards(pair, monkeypatch) -> None:
    """One owner (tracekit.memory.one_file, entered by attribute_one): off while a file is loaded and attributed,
    a collection before each file after the first, and on again when the library call returns."""
    import gc

    import tracekit.run.tasks as tasks

    runs, cap = pair
    seen: list[tuple[str, bool]] = []
    real_load, real_attr = tasks.load_trace, tasks.attribute_trace
    monkeypatch.setattr(tasks, "load_trace", lambda *a, **k: seen.append(("load", gc.isenabled())) or
                        real_load(*a, **k))
    monkeypatch.setattr(tasks, "attribute_trace", lambda *a, **k: seen.append(("attribute", gc.isenabled())) or
                        real_attr(*a, **k))
    collections: list[bool] = []
    real_collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(True) or real_collect(*a))
    assert gc.isenabled()
    analyze(runs, jobs=1, captures=(cap,))
    assert gc.isenabled()
    assert [what for what, _ in seen] == ["load", "load", "attribute"] * 2  # (each replay loads the capture too)
    assert not any(on for _, on in seen)
    assert len(collections) == 1  # before the second file, while only the first one's result is alive
