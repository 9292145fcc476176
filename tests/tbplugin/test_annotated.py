"""The TensorBoard side of ``tracekit annotate`` (issue 25): the tab's "open annotated trace" route, and TensorBoard's
own profiler plugin (torch-tb-profiler) serving annotated copies in its trace view.

The route is driven in-process (the plugin's WSGI app under werkzeug's test client): hand-built traces whose block
times are known (tests/support/builders.py: a block at t0 spans t0..t0+136 µs), hostile run and file names, a logdir
that must not change. TensorBoard itself runs for real (tests/tbplugin/test_plugin_server.py's ``tensorboard``) with
torch-tb-profiler, whose loader takes ``<run>/<worker>[.<span>].pt.trace.json[.gz]``
(``torch_tb_profiler.consts.WORKER_PATTERN``) and whose trace route, ``/data/plugin/pytorch_profiler/trace?run=
&worker=&span=``, serves the file gzip-encoded (traces with device kernels get its GPU-metric counters appended).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import orjson
import pytest
from support.builders import TraceBuilder, attention_block
from support.paths import REAL, real_trace_files
from support.tensorboard import entry_point_installed

from tracekit.annotation import annotate_path
from tracekit.results.attribution import Attribution
from tracekit.errors import TraceFormatError
from tracekit.vocab import ANNOTATE_CAT

pytest.importorskip("tensorboard")
from tensorboard.plugins import base_plugin  # noqa: E402
from werkzeug.test import Client  # noqa: E402

from tracekit.tbplugin import TracekitPlugin  # noqa: E402
from tracekit.tbplugin import annotated as annotated_mod  # noqa: E402

H200 = REAL.parent / "h200"
QWEN = REAL / "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
EAGER = H200 / "sweep" / "eager_4096"
PROFILER = "/data/plugin/pytorch_profiler"
TRACEKIT = "/data/plugin/tracekit"


# -- helpers -------------------------------------------------------------------------------------------------------
def _trace(path: Path, *t0s: float) -> Path:
    """A trace with a step and one attention block at each t0 (block window t0..t0+136 µs, builders)."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", min(t0s) - 100, max(t0s) - min(t0s) + 1200)
    for k, t0 in enumerate(t0s):
        attention_block(b, t0, name=f"layer{k}.attention")
    path.parent.mkdir(parents=True, exist_ok=True)
    return b.write(path)


def _events(raw: bytes) -> list[dict]:
    doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _spans(events: list[dict]) -> list[tuple[str, float, float]]:
    """tracekit's block spans: (block, ts, dur)."""
    return sorted((e["args"]["block"], e["ts"], e["dur"]) for e in events
                  if e.get("cat") == ANNOTATE_CAT and e.get("ph") == "X" and e["args"]["level"] == "block")


def _snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``root``: size, mtime and content hash (what the route must leave alone)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = Path(d) / f
            out[str(p.relative_to(root))] = (p.stat().st_size, p.stat().st_mtime_ns,
                                             hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _plugin(root: Path) -> TracekitPlugin:
    return TracekitPlugin(base_plugin.TBContext(logdir=str(root)))


def _ask(plugin: TracekitPlugin, **params: str):
    return Client(plugin.get_plugin_apps()["/annotated"]).get("/annotated", query_string=params)


def _one_line(resp, code: int) -> str:
    body = resp.get_data(as_text=True)
    assert resp.status_code == code, (resp.status_code, body)
    assert "\n" not in body.strip() and "Traceback" not in body and body.strip(), body
    assert resp.mimetype == "text/plain"
    return body


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """run ``ranks`` holds two files (blocks at 1000 and at 5000, 9000), run ``solo`` one (a block at 2000)."""
    root = tmp_path / "logs"
    _trace(root / "ranks" / "rank0.pt.trace.json", 1000)
    _trace(root / "ranks" / "rank1.pt.trace.json", 5000, 9000)
    _trace(root / "solo" / "host.pt.trace.json", 2000)
    return root


# -- the route, in-process -----------------------------------------------------------------------------------------
def test_each_trace_of_a_run_is_served_annotated_as_a_download(logdir: Path, tmp_path: Path) -> None:
    before = _snapshot(logdir)
    plugin = _plugin(logdir)
    runs = json.loads(Client(plugin.get_plugin_apps()["/runs"]).get("/runs").get_data())["runs"]
    assert {r["name"]: r["traces"] for r in runs} == {"ranks": ["rank0.pt.trace.json", "rank1.pt.trace.json"],
                                                      "solo": ["host.pt.trace.json"]}
    want = {"rank0.pt.trace.json": [("layer0.attention", 1000, 136)],
            "rank1.pt.trace.json": [("layer0.attention", 5000, 136), ("layer1.attention", 9000, 136)]}
    for name, spans in want.items():
        resp = _ask(plugin, run="ranks", file=name)
        assert resp.status_code == 200 and resp.mimetype == "application/gzip"
        stem = name.removesuffix(".pt.trace.json")
        assert resp.headers["Content-Disposition"] == f'attachment; filename="ranks-{stem}.annotated.json.gz"'
        raw = resp.get_data()
        assert int(resp.headers["Content-Length"]) == len(raw) and raw[:2] == b"\x1f\x8b"
        assert _spans(_events(raw)) == spans
        ref = tmp_path / f"ref_{stem}.json"
        annotate_path(logdir / "ranks" / name, ref)  # the route's copy is `tracekit annotate`'s, byte for byte
        assert gzip.decompress(raw) == ref.read_bytes()
    assert _snapshot(logdir) == before  # nothing written into the logdir, no input touched
    assert not plugin.annotated.folder.resolve().is_relative_to(logdir.resolve())


def test_a_copy_is_made_once_per_version_of_its_file(logdir: Path) -> None:
    plugin = _plugin(logdir)
    cache = plugin.annotated
    first = _ask(plugin, run="solo", file="host.pt.trace.json").get_data()
    again = _ask(plugin, run="solo", file="host.pt.trace.json").get_data()
    assert first == again and cache.annotated == 1 and len(list(cache.folder.iterdir())) == 1
    src = logdir / "solo" / "host.pt.trace.json"
    _trace(src, 3000)  # the file rewritten: other content, a new ctime
    newer = _ask(plugin, run="solo", file="host.pt.trace.json").get_data()
    assert cache.annotated == 2 and _spans(_events(newer)) == [("layer0.attention", 3000, 136)]
    assert len(list(cache.folder.iterdir())) == 1  # the old copy is gone



def test_concurrent_first_requests_make_one_copy(logdir: Path) -> None:
    plugin = _plugin(logdir)
    start = threading.Barrier(8)
    got: list[bytes] = []

    def ask() -> None:
        start.wait()
        got.append(_ask(plugin, run="ranks", file="rank1.pt.trace.json").get_data())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(got) == 8 and len(set(got)) == 1 and plugin.annotated.annotated == 1

HOSTILE = [
    ({"run": "solo", "file": "../solo/host.pt.trace.json"}, 404),
    ({"run": "solo", "file": "/etc/passwd"}, 404),
    ({"run": "solo", "file": "rank0.pt.trace.json"}, 404),  # another run's file
    ({"run": "../logs/solo", "file": "host.pt.trace.json"}, 404),
    ({"run": "solo/..", "file": "host.pt.trace.json"}, 404),
    ({"run": "nope", "file": "host.pt.trace.json"}, 404),
    ({"run": "solo", "file": ""}, 400),
    ({"run": "", "file": "host.pt.trace.json"}, 400),
    ({}, 400),
]


@pytest.mark.parametrize(("params", "code"), HOSTILE, ids=[str(p) for p, _ in HOSTILE])
def test_names_from_the_request_match_the_listing_or_are_refused(logdir: Path, params: dict, code: int) -> None:
    plugin = _plugin(logdir)
    _one_line(_ask(plugin, **params), code)
    assert plugin.annotated.annotated == 0


def test_a_file_that_resolves_outside_the_logdir_is_refused(logdir: Path, tmp_path: Path) -> None:
    outside = _trace(tmp_path / "elsewhere" / "secret.pt.trace.json", 1000)
    (logdir / "linked").mkdir()
    (logdir / "linked" / "x.pt.trace.json").symlink_to(outside)
    plugin = _plugin(logdir)
    assert "x.pt.trace.json" in [f.name for f in plugin.cache.run("linked").files]  # listed, yet not served
    assert "outside the logdir" in _one_line(_ask(plugin, run="linked", file="x.pt.trace.json"), 403)
    assert plugin.annotated.annotated == 0


def test_a_hostile_run_name_makes_a_safe_download_name(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    run = 'we"ird;\r\nSet-Cookie: x=1 ü'
    _trace(root / run / "a b.pt.trace.json", 1000)
    _trace(root / "other" / "o.pt.trace.json", 1000)  # (two runs: the folders are runs, not the logdir)
    resp = _ask(_plugin(root), run=run, file="a b.pt.trace.json")
    assert resp.status_code == 200, resp.get_data()
    assert resp.headers["Content-Disposition"] == 'attachment; filename="we_ird_Set-Cookie_x_1_-a_b.annotated.json.gz"'
    assert "Set-Cookie" not in resp.headers


def test_errors_answer_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "logs"
    (root / "broken").mkdir(parents=True)
    (root / "broken" / "b.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "name')
    _trace(root / "good" / "g.pt.trace.json", 1000)
    plugin = _plugin(root)
    assert _one_line(_ask(plugin, run="broken", file="b.pt.trace.json"), 422).startswith("cannot annotate: ")

    def fails(exc: Exception):
        def annotate(*args: object, **kw: object) -> None:
            raise exc
        return annotate

    monkeypatch.setattr(annotated_mod, "annotate_path", fails(TraceFormatError("g: bad trace\nat byte 3")))
    assert _one_line(_ask(plugin, run="good", file="g.pt.trace.json"), 422) == "cannot annotate: g: bad trace"
    monkeypatch.setattr(annotated_mod, "annotate_path", fails(RuntimeError("a bug\nwith a second line")))
    body = _one_line(_ask(plugin, run="good", file="g.pt.trace.json"), 500)
    assert body == "cannot annotate: internal error (RuntimeError)"
    assert not [p for p in root.rglob("*") if p.is_file() and p.name not in ("b.pt.trace.json", "g.pt.trace.json")]


# -- TensorBoard's profiler plugin, for real ------------------------------------------------------------------------
def _fetch(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=120) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _profiler(base: str, route: str, **params: str) -> object:
    status, _, body = _fetch(f"{base}{PROFILER}/{route}?{urllib.parse.urlencode(params)}")
    assert status == 200, (route, params, status, body[:300])
    return json.loads(body)


def _wait_for_runs(base: str, want: set[str], deadline_s: float) -> None:
    """Until torch-tb-profiler lists every run of ``want`` and loads nothing more (it parses in the background)."""
    deadline, last = time.monotonic() + deadline_s, None
    while time.monotonic() < deadline:
        last = _profiler(base, "runs")
        if want <= set(last["runs"]) and not last["loading"]:
            return
        time.sleep(1)
    pytest.fail(f"torch-tb-profiler did not load {sorted(want - set(last['runs'] if last else []))} "
                f"in {deadline_s:.0f} s; last /runs = {last}")


def _served(base: str, run: str) -> list[dict]:
    """What the trace view loads for the run's one worker: the trace route's body, gzip-encoded JSON."""
    spans = _profiler(base, "spans", run=run, worker="worker0")
    assert spans, f"torch-tb-profiler parsed no profile of run {run!r} (its log: tensorboard.log)"
    [span] = spans
    status, headers, body = _fetch(f"{base}{PROFILER}/trace?" +
                                   urllib.parse.urlencode({"run": run, "worker": "worker0", "span": span}))
    assert status == 200 and headers.get("Content-Encoding") == "gzip", (run, status, body[:300])
    return orjson.loads(gzip.decompress(body))["traceEvents"]


def _check_served(served: list[dict], copy: Path, original: Path, res: Attribution) -> None:
    """The trace route serves the annotated copy: its events as written (the plugin may append its GPU-metric
    counters), the original's among them unchanged, the tracekit process, and a span per block and stream at the
    block's window (origin + start_us .. origin + end_us) of ``res``, the original's attribution (test_annotation.py
    checks that the copy attributes the same, tests/analysis/test_clock.py the block windows against the raw JSON)."""
    from support.traces import ns_of as _ns

    written = _events(copy.read_bytes())
    assert served[: len(written)] == written
    assert all(e.get("ph") == "C" for e in served[len(written):])  # (torch-tb-profiler's GPU metrics)
    ours = [e for e in written if e.get("cat") == ANNOTATE_CAT]
    assert all(isinstance(e.get("name"), str) for e in ours)  # (its loader reads every name of a trace without
    # Kineto's "Iteration Start"/"Record Window End" markers)
    assert [e for e in written if e.get("cat") != ANNOTATE_CAT] == _events(original.read_bytes())
    [pid] = {e["pid"] for e in ours if e["ph"] == "M" and e["name"] == "process_name"
             and e["args"]["name"] == "tracekit"}
    origin = res.traces[0].origin_ns
    spans = [e for e in ours if e["ph"] == "X" and e["args"]["level"] == "block"]
    assert all(e["pid"] == pid for e in spans)
    for b in res.blocks:
        key = (b.name, str(b.phase), b.step, b.ordinal)
        mine = [e for e in spans if (e["args"]["block"], e["args"]["phase"], e["args"]["step"],
                                     e["args"]["ordinal"]) == key]
        assert len(mine) == max(1, len(set(b.intervals.stream) if b.intervals is not None else ())), key
        for e in mine:
            assert _ns(e["ts"]) == origin + round(b.start_us * 1000), key
            assert _ns(e["ts"]) + _ns(e["dur"]) == origin + round(b.end_us * 1000), key
    assert len(spans) == sum(max(1, len(set(b.intervals.stream) if b.intervals is not None else ()))
                             for b in res.blocks)


def _trace_file(path: Path) -> Path:
    """A trace file, or a run folder's one trace file."""
    return next(path.glob("*.json.gz")) if path.is_dir() else path


def _profiler_logdir(root: Path, sources: dict[str, Path],
                     originals: bool) -> dict[str, tuple[Path, Path, Attribution]]:
    """``<name>/worker0.pt.trace.json.gz``: the annotated copy of each source (and ``<name>.orig/``, the original,
    when asked); name -> (copy, original, the original's attribution)."""
    out = {}
    for name, src in sources.items():
        src = _trace_file(src)
        copy = root / name / "worker0.pt.trace.json.gz"
        _, res = annotate_path(src, copy, jobs=1, decode_workers=1)
        if originals:
            (root / f"{name}.orig").mkdir()
            shutil.copy(src, root / f"{name}.orig" / "worker0.pt.trace.json.gz")
        out[name] = (copy, src, res)
    return out


@pytest.mark.skipif(not QWEN.is_file() or not EAGER.is_dir(), reason="the real and H200 traces are not present")
def test_profiler_plugin_serves_the_tabs_annotated_copy(tmp_path: Path) -> None:
    """Representative (real Qwen on H100 with its module blocks; an H200 eager sweep run): the copy the tab offers
    for download is what TensorBoard's trace view loads, which reads it as it reads the original."""
    pytest.importorskip("torch_tb_profiler")
    from support.tensorboard import tensorboard

    root = tmp_path / "logs"
    t0 = time.perf_counter()
    made = _profiler_logdir(root, {"qwen": QWEN, "eager_4096": EAGER}, originals=True)
    with tensorboard(root, every_plugin=True, log=tmp_path / "tensorboard.log") as base:
        # the tab's download (from the original's run) is the copy laid out for the profiler
        if entry_point_installed():
            status, _, body = _fetch(f"{base}{TRACEKIT}/annotated?run=qwen.orig&file=worker0.pt.trace.json.gz")
            assert status == 200 and gzip.decompress(body) == gzip.decompress(made["qwen"][0].read_bytes())
        _wait_for_runs(base, {*made, *(f"{n}.orig" for n in made)}, 200)
        for name, (copy, original, res) in made.items():
            served = _served(base, name)
            _check_served(served, copy, original, res)
            assert [e for e in served if e.get("cat") != ANNOTATE_CAT] == _served(base, f"{name}.orig")
            q = {"worker": "worker0", "span": _profiler(base, "spans", run=name, worker="worker0")[0]}
            assert _profiler(base, "overview", run=name, **q) == _profiler(base, "overview", run=f"{name}.orig", **q)
    print(f"\ntorch-tb-profiler served 2 annotated traces (and their originals) in {time.perf_counter() - t0:.1f} s")


def _every_trace() -> dict[str, Path]:
    """Every real trace and every H200 trace, by a run name made of its path."""
    files = real_trace_files() + sorted(H200.glob("*/*/*.json.gz"))
    return {re.sub(r"[^A-Za-z0-9_.-]+", "_", str(f.relative_to(REAL.parent)).removesuffix(".json.gz")): f
            for f in files}


SHARDS = 3  # one TensorBoard per shard: each loads a third of the bytes, well inside the per-test timeout


@pytest.mark.slow
@pytest.mark.skipif(not REAL.is_dir(), reason="the real traces are not present")
@pytest.mark.parametrize("shard", range(SHARDS))
def test_profiler_plugin_serves_every_annotated_trace(tmp_path: Path, shard: int) -> None:
    pytest.importorskip("torch_tb_profiler")
    from support.tensorboard import tensorboard

    every = _every_trace()
    by_size = sorted(every, key=lambda n: (-every[n].stat().st_size, n))
    mine = {n: every[n] for n in by_size[shard::SHARDS]}
    t0 = time.perf_counter()
    made = _profiler_logdir(tmp_path / "logs", mine, originals=False)
    with tensorboard(tmp_path / "logs", every_plugin=True, log=tmp_path / "tensorboard.log") as base:
        _wait_for_runs(base, set(made), 220)
        loaded = time.perf_counter() - t0
        for name, (copy, original, res) in made.items():
            _check_served(_served(base, name), copy, original, res)
    kib = sum(f.stat().st_size for f in mine.values()) >> 10
    print(f"\nshard {shard}: {len(made)} annotated traces ({kib} KiB gz) "
          f"loaded in {loaded:.1f} s, all served and checked in {time.perf_counter() - t0:.1f} s")
