"""The TensorBoard side of ``tracekit annotate`` (issue 25): the tab's "open annotated trace" route, and TensorBoard's
own profiler plugin (torch-tb-profiler) serving annotated copies in its trace view.

The route is driven in-process (the plugin's WSGI app under werkzeug's test client): hand-built traces whose block
times are known (tests/builders.py: a block at t0 spans t0..t0+136 µs), hostile run and file names, a logdir that
must not change. TensorBoard itself runs for real (tests/test_tbplugin.py's ``tensorboard``) with
torch-tb-profiler, whose loader takes ``<run>/<worker>[.<span>].pt.trace.json[.gz]``
(``torch_tb_profiler.consts.WORKER_PATTERN``) and whose trace route, ``/data/plugin/pytorch_profiler/trace?run=
&worker=&span=``, serves the file gzip-encoded (traces with device kernels get its GPU-metric counters appended).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import orjson
import pytest
from builders import TraceBuilder, attention_block
from conftest import REAL, real_trace_files

from tracekit import analyze
from tracekit.annotate import annotate_path
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
    assert not os.path.commonpath([plugin.annotated.folder, logdir]) == str(logdir)


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
