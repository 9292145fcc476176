"""The *tracekit* TensorBoard tab, in a real `tensorboard` server on 127.0.0.1 and a headless Chromium.

Why a real server: only TensorBoard itself shows that the plugin registers (plugins_listing), that its
routes answer under TensorBoard's CSP and URL prefixes, and that the tab draws offline. With the
package installed (`pip install -e '.[tensorboard]'`) the `tensorboard_plugins` entry point loads it and
the real `tensorboard` command is run; without that entry point (a checkout run through PYTHONPATH) a
three-line launcher hands TensorBoard the same loader. The server is always stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import tomllib
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from support.builders import eager_trace
from support.browser import png_colours, start_browser
from support.paths import ROOT
from support.tensorboard import embedded, entry_point_installed, get, tensorboard

pytestmark = pytest.mark.slow

SWEEP = ROOT.parent / "shared" / "traces" / "h200" / "sweep"
PREFIX = "/data/plugin/tracekit"

def test_entry_point_is_declared():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["entry-points"]["tensorboard_plugins"]["tracekit"] == "tracekit.tbplugin:TracekitLoader"
    assert "tensorboard" in meta["optional-dependencies"]
    if not entry_point_installed():
        pytest.skip("the installed tracekit predates the tensorboard_plugins entry point: "
                    "run `pip install -e '.[tensorboard]'` (the tests below use a launcher meanwhile)")



@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    """run_a: two layers, run_b: one (31 µs busy per block, tests/support/builders.py), plus the H200 sweep's 32
    runs."""
    root = tmp_path_factory.mktemp("logs")
    for name, layers in (("run_a", 2), ("run_b", 1)):
        (root / name).mkdir()
        eager_trace(root / name / "host.1.pt.trace.json", layers=layers, steps=1)
    (root / "run_a" / "measured.json").write_text(json.dumps({"schema": "tracekit.measured/1", "median_ms": 3.25}))
    sweep = []
    if SWEEP.is_dir():
        for run in sorted(p for p in SWEEP.iterdir() if p.is_dir()):
            shutil.copytree(run, root / run.name)
            sweep.append(run.name)
    return root, sweep



@pytest.fixture(scope="module")
def server(logdir):
    pytest.importorskip("tensorboard")
    with tensorboard(logdir[0]) as base:
        yield base


def test_listing_runs_and_reports(server, logdir):
    _, sweep = logdir
    status, body = get(server, "/data/plugins_listing")
    listing = json.loads(body)
    assert status == 200 and listing["tracekit"]["enabled"] is True
    assert listing["tracekit"]["tab_name"] == "tracekit"

    t0 = time.perf_counter()
    status, body = get(server, PREFIX + "/runs")
    runs = json.loads(body)
    assert status == 200 and sorted(r["name"] for r in runs["runs"]) == sorted(["run_a", "run_b", *sweep])
    assert runs["analyses"] == 0  # listing opens no trace

    status, page = get(server, PREFIX + "/report", run="run_a")
    data = embedded(page)
    assert status == 200 and data["report"] == "single"
    assert data["result"]["totals"]["blocks"] == 2 and data["result"]["totals"]["total_us"] == pytest.approx(62)
    assert data["result"]["measured"]["median_ms"] == 3.25  # the recorder's latency heads the run's report

    status, page = get(server, PREFIX + "/report", before="run_a", after="run_b")
    data = embedded(page)
    assert status == 200 and data["report"] == "diff"
    assert data["result"]["attention"]["delta_us"] == pytest.approx(-31)

    status, page = get(server, PREFIX + "/report")  # every run: the logdir as a sweep
    opened = time.perf_counter() - t0
    data = embedded(page)
    assert status == 200 and data["report"] == "sweep"
    assert sorted(r["name"] for r in data["result"]["runs"]) == sorted(["run_a", "run_b", *sweep])
    rows = {r["name"]: r["run_row"] for r in data["result"]["runs"]}
    assert rows["run_a"]["latency_ms"] == 3.25 and rows["run_b"]["latency_ms"] is None
    # With the entry point installed, `tensorboard` also loads torch-tb-profiler, which parses every trace in
    # background processes at start-up: on a 2-core machine our first analyses share the CPU with it.
    assert opened < (180 if entry_point_installed() else 60), opened
    served_by = ("tensorboard with every installed plugin" if entry_point_installed()
                 else "launcher, static plugins + tracekit")
    print(f"\n{2 + len(sweep)}-run logdir: listing + three reports in {opened:.2f} s ({served_by})")

    # The cache: a second look analyses nothing; a changed file is analysed again.
    analyses = json.loads(get(server, PREFIX + "/runs")[1])["analyses"]
    assert analyses == 2 + len(sweep)
    t1 = time.perf_counter()
    assert get(server, PREFIX + "/report")[0] == 200
    print(f"cached sweep report in {time.perf_counter() - t1:.2f} s")
    assert json.loads(get(server, PREFIX + "/runs")[1])["analyses"] == analyses
    f = logdir[0] / "run_b" / "host.1.pt.trace.json"
    os.utime(f, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert get(server, PREFIX + "/report", run="run_b")[0] == 200
    assert json.loads(get(server, PREFIX + "/runs")[1])["analyses"] == analyses + 1

    assert get(server, PREFIX + "/report", run="no_such_run")[0] == 404

    # A new measured latency is a changed run: analysed again, and shown.
    (logdir[0] / "run_a" / "measured.json").write_text(json.dumps({"schema": "tracekit.measured/1", "median_ms": 4.5}))
    assert embedded(get(server, PREFIX + "/report", run="run_a")[1])["result"]["measured"]["median_ms"] == 4.5


def _into_report(d, deadline: float, want: str) -> None:
    """Switch into the tab's report frame once it has drawn and ``want`` (a JS expression) holds there."""
    from selenium.webdriver.common.by import By

    while True:
        assert time.monotonic() < deadline, f"the tracekit tab never showed a report where {want}"
        d.switch_to.default_content()
        for outer in d.find_elements(By.TAG_NAME, "iframe"):
            d.switch_to.default_content()
            try:
                d.switch_to.frame(outer)
                inner = d.find_elements(By.ID, "tk-report")
                if not inner:
                    continue
                d.switch_to.frame(inner[0])
                if d.execute_script("return !!(document.body && document.body.getAttribute('data-ready') === '1' "
                                    f"&& ({want}))"):
                    return
            except Exception:  # a frame reloaded under us: look again
                continue
        time.sleep(0.3)


def test_tab_draws_offline_in_chromium(server, tmp_path):
    from selenium.webdriver.common.by import By

    d = start_browser()
    try:
        d.get(server + "/#tracekit")
        _into_report(d, time.monotonic() + 60, "document.querySelectorAll('tr[data-run]').length >= 2")
        d.switch_to.default_content()
        png = d.get_screenshot_as_png()
        if Path("/tmp/h10r").is_dir():
            (Path("/tmp/h10r") / "test_tensorboard_tab.png").write_bytes(png)
        assert png_colours(png) > 8
        # Two runs picked in the tab's bar: their diff (run_b has one block of 31 µs less than run_a).
        for outer in d.find_elements(By.TAG_NAME, "iframe"):
            d.switch_to.default_content()
            d.switch_to.frame(outer)
            if d.find_elements(By.ID, "tk-mode"):
                d.execute_script("""
                    const set = (id, v) => { const s = document.getElementById(id); s.value = v;
                                             s.dispatchEvent(new Event('change')); };
                    set('tk-run', 'run_a'); set('tk-after', 'run_b'); set('tk-mode', 'diff');""")
                break
        _into_report(d, time.monotonic() + 60, "document.querySelector('svg.waterfall')")
        assert d.execute_script("return +document.querySelector('.summary').dataset.deltaUs") == pytest.approx(-31)
        # The diff's timelines under TensorBoard's CSP: run_a's step of two blocks, run_b's of one, both drawn.
        drawn = d.execute_script("return Array.from(document.querySelectorAll('.timeline')).map(w => "
                                 "[w.dataset.timeline, +w.dataset.blocksDrawn, +w.dataset.kernelsDrawn])")
        assert drawn == [["drawn", 2, 12], ["drawn", 1, 6]]  # 6 device events per block (tests/support/builders.py)
        d.switch_to.default_content()
        png = d.get_screenshot_as_png()
        if Path("/tmp/h10r").is_dir():
            (Path("/tmp/h10r") / "test_tensorboard_diff.png").write_bytes(png)
        assert png_colours(png) > 8
        urls = [json.loads(m["message"])["message"]["params"].get("request", {}).get("url")
                for m in d.get_log("performance")]
        hosts = {urllib.parse.urlparse(u).netloc for u in urls if u and not u.startswith(("data:", "blob:"))}
        assert hosts == {server.split("//")[1]}, hosts  # nothing but the local server: works offline
        ours = [e for e in d.get_log("browser") if e["level"] == "SEVERE" and "/data/plugin/tracekit" in e["message"]]
        assert not ours, ours
    finally:
        d.quit()


def test_tab_links_the_annotated_trace_of_the_selected_run(server):
    """In "one run" mode the tab's bar holds "open annotated trace", built from /runs' file names; its href is the
    annotated copy as a download (run_a: two layers, so two block spans); other modes hide it."""
    import gzip

    from selenium.webdriver.common.by import By

    runs = {r["name"]: r["traces"] for r in json.loads(get(server, PREFIX + "/runs")[1])["runs"]}
    assert runs["run_a"] == ["host.1.pt.trace.json"]
    d = start_browser()
    try:
        d.get(server + "/#tracekit")
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "the tracekit tab's bar never appeared"
            d.switch_to.default_content()
            bars = []
            for outer in d.find_elements(By.TAG_NAME, "iframe"):
                d.switch_to.default_content()
                d.switch_to.frame(outer)
                bars = d.find_elements(By.ID, "tk-mode")
                if bars:
                    break
            if bars:
                break
            time.sleep(0.3)
        link = d.find_element(By.ID, "tk-annotated")
        assert not link.is_displayed()  # "all runs": no one trace to annotate
        d.execute_script("""const set = (id, v) => { const s = document.getElementById(id); s.value = v;
                                                    s.dispatchEvent(new Event('change')); };
                            set('tk-mode', 'run'); set('tk-run', 'run_a');""")
        assert link.is_displayed() and link.text == "open annotated trace"
        assert link.get_attribute("download") == "" and not d.find_element(By.ID, "tk-trace").is_displayed()
        href = link.get_attribute("href")
        assert href.startswith(server + PREFIX + "/annotated?"), href
        assert urllib.parse.parse_qs(urllib.parse.urlparse(href).query) == {"run": ["run_a"],
                                                                            "file": ["host.1.pt.trace.json"]}
    finally:
        d.quit()
    with urllib.request.urlopen(href, timeout=120) as resp:
        assert resp.headers["Content-Disposition"].startswith("attachment; ")
        events = json.loads(gzip.decompress(resp.read()))["traceEvents"]
    spans = [e for e in events if e.get("cat") == "tracekit" and e["ph"] == "X" and e["args"]["level"] == "block"]
    assert sorted(e["args"]["block"] for e in spans) == ["layer0.attention", "layer1.attention"]
