"""`tracekit report`: one offline HTML page, checked in a real headless Chromium.

Why a browser: only a browser shows that the page draws without console errors, fetches nothing (the
page's CSP forbids it; the performance log shows what was asked for), and that what it draws equals the
JSON. Figures are checked against hand-built traces whose answers are known by construction
(tests/builders.py: each eager block is 31 µs busy, 21 µs of it matmul).
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import time
import zlib
from pathlib import Path

import pytest
from builders import TraceBuilder, attention_block
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.renderers.html import embed_json

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT.parent / "shared" / "traces" / "h200" / "sweep"
XSS_IMG = '<img src=x onerror="window.__pwned=1">'
XSS_END = "</script><script>window.__pwned2=1</script>"


# ---------------------------------------------------------------------------------------------
# Traces with known answers


def eager_trace(path: Path, layers: int, steps: int = 2, names: tuple[str, ...] = ()) -> Path:
    """``steps`` ProfilerSteps of ``layers`` eager blocks (31 µs busy each: matmul 20, softmax 5, elementwise 2,
    memory 4)."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    t = 0
    for s in range(steps):
        b.annotation(f"ProfilerStep#{s + 1}", t, 400 * layers)
        for i in range(layers):
            attention_block(b, t + 1 + 400 * i, name=names[i] if i < len(names) else f"layer{i}.attention")
        t += 400 * layers + 10
    return b.write(path)


def hostile_trace(path: Path) -> Path:
    """Block and kernel names that are markup: a page that pastes them as HTML would run them."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    b.annotation("ProfilerStep#1", 0, 400)
    attention_block(b, 1, name=f"layer0.attention{XSS_IMG}{XSS_END}")
    for ev in b.events:
        if ev["name"].startswith("void (anonymous namespace)::softmax"):
            ev["name"] = f"softmax_{XSS_IMG}{XSS_END}"
    return b.write(path)


def report(*args: object) -> None:
    res = CliRunner().invoke(cli, ["report", *map(str, args)])
    assert res.exit_code == 0, res.output


# ---------------------------------------------------------------------------------------------
# Without a browser


def test_embedded_json_cannot_close_its_script_element():
    obj = {"name": XSS_END + "<!-- & \u2028"}
    text = embed_json(obj)
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == obj


def test_page_is_self_contained(tmp_path):
    report(eager_trace(tmp_path / "t.pt.trace.json", 2), "-o", tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    assert "default-src 'none'" in html
    # Nothing that would load from anywhere: no src/href attributes, no URLs in the page's code.
    assert not re.search(r"\b(src|href)\s*=", html)
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html
    assert "innerHTML" not in html and "insertAdjacentHTML" not in html and "document.write" not in html


def test_the_csp_runs_the_page_script_only(tmp_path):
    """Issue 26: no 'unsafe-inline' for scripts; the one script is allowed by its hash, computed here from the page."""
    import base64
    import hashlib

    report(eager_trace(tmp_path / "t.pt.trace.json", 2), "-o", tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)  # the executable ones (no type attribute)
    assert len(scripts) == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    script_src = next(d for d in csp.split(";") if d.strip().startswith("script-src")).split()[1:]
    assert script_src == [f"'sha256-{digest}'"]


def test_hostile_names_stay_data(tmp_path):
    report(hostile_trace(tmp_path / "x.pt.trace.json"), "-o", tmp_path / "x.html")
    html = (tmp_path / "x.html").read_text()
    assert html.count("</script>") == 2  # the data element's and the code's, nothing from the trace
    assert "<img" not in html


# ---------------------------------------------------------------------------------------------
# In Chromium


def _browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver") or shutil.which("chromium-driver")
    if not binary or not driver:
        pytest.skip("chromium and chromedriver are not installed (.ci/run installs them)")
    opts = Options()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1400"):
        opts.add_argument(a)
    opts.binary_location = binary
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)


@pytest.fixture(scope="module")
def browser():
    d = _browser()
    try:
        yield d
    finally:
        d.quit()


def open_page(d, path: Path, timeout: float = 20) -> float:
    """Load a report; fail on console errors or any request but the page itself. Returns seconds to draw."""
    d.get_log("browser")
    d.get_log("performance")
    t0 = time.perf_counter()
    d.get(path.resolve().as_uri())
    while d.execute_script("return document.body && document.body.getAttribute('data-ready')") != "1":
        assert time.perf_counter() - t0 < timeout, "the page never finished drawing"
        time.sleep(0.02)
    took = time.perf_counter() - t0
    errors = [e for e in d.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert not errors, errors
    urls = [json.loads(m["message"])["message"]["params"].get("request", {}).get("url")
            for m in d.get_log("performance")]
    urls = [u for u in urls if u]
    assert urls and set(urls) == {path.resolve().as_uri()}, urls
    return took


def png_colours(png: bytes) -> int:
    """Distinct colours in an 8-bit RGB/RGBA PNG (decoded with zlib: no imaging library needed)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(png):
        n, kind = struct.unpack(">I4s", png[pos:pos + 8])
        body = png[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), (depth, ctype)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    colours = set()
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 4 == 0:  # every 4th row is plenty to tell a drawing from a blank page
            colours.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp))
        prev = line
    return len(colours)


def shot(d, name: str) -> int:
    out = Path("/tmp/h10r") if Path("/tmp/h10r").is_dir() else None
    png = d.get_screenshot_as_png()
    if out is not None:
        (out / f"{name}.png").write_bytes(png)
    return png_colours(png)


def js(d, code: str):
    return d.execute_script(code)



@pytest.mark.slow
def test_single_report_draws_the_json(browser, tmp_path):
    trace = eager_trace(tmp_path / "two.pt.trace.json", layers=2, steps=2)
    report(trace, "-o", tmp_path / "r.html")
    open_page(browser, tmp_path / "r.html")
    assert shot(browser, "test_single") > 8
    data = json.loads(js(browser, "return document.getElementById('tk-data').textContent"))["result"]
    # By construction: 2 layers × 2 steps of 31 µs blocks, 21 µs of each in matmul.
    assert data["totals"]["total_us"] == pytest.approx(4 * 31)
    rows = js(browser, """return Array.from(document.querySelectorAll('[data-section="By layer"] .bars')[0]
        .querySelectorAll('.row')).map(r => [r.dataset.label, +r.dataset.us,
        Array.from(r.querySelectorAll('rect')).map(x => [x.dataset.key, +x.dataset.us])])""")
    assert [r[0] for r in rows] == ["layer0.attention", "layer1.attention"]
    for label, us, segs in rows:
        assert us == pytest.approx(2 * 31)
        assert dict(segs) == pytest.approx({"matmul": 40, "softmax": 10, "elementwise": 4, "memory": 8})
        blocks = [b for b in data["blocks"] if b["name"] == label]
        assert us == pytest.approx(sum(b["total_us"] for b in blocks))
    # The kernel table: the JSON's rows, full names on hover; sorting by time puts the largest first.
    table = "document.querySelectorAll('table')[0]"
    names = js(browser, f"return Array.from({table}.querySelectorAll('tbody td.name')).map(td => td.title)")
    assert names == [k["name"] for k in data["top_kernels"]]
    js(browser, f"{table}.querySelectorAll('th')[3].click()")
    times = js(browser, f"return Array.from({table}.querySelectorAll('tbody tr')).map(r => +r.cells[3].dataset.v)")
    assert times == sorted((k["total_us"] for k in data["top_kernels"]), reverse=True)
    js(browser, f"{table}.querySelectorAll('th')[3].click()")
    times = js(browser, f"return Array.from({table}.querySelectorAll('tbody tr')).map(r => +r.cells[3].dataset.v)")
    assert times == sorted(k["total_us"] for k in data["top_kernels"])


@pytest.mark.slow
def test_diff_report_waterfall_sums_to_the_total(browser, tmp_path):
    before = eager_trace(tmp_path / "b.pt.trace.json", layers=2, steps=1)
    after = eager_trace(tmp_path / "a.pt.trace.json", layers=1, steps=1)
    report(before, after, "-o", tmp_path / "d.html")
    open_page(browser, tmp_path / "d.html")
    assert shot(browser, "test_diff") > 8
    bars = js(browser, """return Array.from(document.querySelectorAll('svg.waterfall rect')).map(r =>
        [r.dataset.label, r.dataset.us === undefined ? null : +r.dataset.us,
         r.dataset.delta === undefined ? null : +r.dataset.delta])""")
    assert bars[0][0] == "before" and bars[-1][0] == "after"
    assert bars[0][1] == pytest.approx(62) and bars[-1][1] == pytest.approx(31)  # two blocks → one
    deltas = {label: d for label, _, d in bars[1:-1]}
    assert sum(deltas.values()) == pytest.approx(31 - 62, abs=0.01)
    assert deltas["matmul"] == pytest.approx(-20) and deltas["softmax"] == pytest.approx(-5)
    summary = js(browser, "return +document.querySelector('.summary').dataset.deltaUs")
    assert summary == pytest.approx(-31)
    # layer1's block has no partner after: listed as unpaired, with its 31 µs.
    unpaired = js(browser, "return Array.from(document.querySelectorAll('tr[data-unpaired]')).map(r => "
                           "[r.dataset.unpaired, +r.cells[1].dataset.v, +r.cells[2].dataset.v])")
    assert unpaired == [["before", 1, pytest.approx(31)]]


@pytest.mark.slow
def test_sweep_report_rows_and_charts(browser, tmp_path):
    root = tmp_path / "sweep"
    layers = {("fast", 64): 1, ("fast", 128): 2, ("slow", 64): 3, ("slow", 128): 4}
    for (impl, seq), n in layers.items():
        (root / f"{impl}_{seq}").mkdir(parents=True)
        eager_trace(root / f"{impl}_{seq}" / "host.123.pt.trace.json", layers=n, steps=1)
    report(root, "-o", tmp_path / "s.html")
    open_page(browser, tmp_path / "s.html")
    assert shot(browser, "test_sweep") > 8
    rows = js(browser, """return Array.from(document.querySelectorAll('tr[data-run]')).map(r =>
        [r.dataset.run, +r.cells[1].dataset.v, +r.cells[4].dataset.v])""")
    assert sorted(r[0] for r in rows) == sorted(f"{i}_{s}" for i, s in layers)
    for name, blocks, busy in rows:
        impl, seq = name.split("_")
        assert blocks == layers[(impl, int(seq))] and busy == pytest.approx(31 * blocks)
    charts = js(browser, "return Array.from(document.querySelectorAll('[data-chart]')).map(c => "
                         "[c.dataset.chart, c.querySelectorAll('circle').length])")
    assert len(charts) == 4 and all(n == 4 for _, n in charts), charts
    titles = [t for t, _ in charts]
    # no measured.json: the latency chart is the profiled span, labelled so, and log axes say so
    assert titles[0] == "attention span per step (profiled) (log scale)" and "profiled span" in titles[1]
    assert titles[2] == "idle share of the attention span"
    # A click on a run draws that run's own report below the table.
    js(browser, "document.querySelector('tr[data-run=\"slow_128\"]').click()")
    assert js(browser, "return +document.querySelector('.detail .summary').dataset.blocks") == 4


@pytest.mark.slow
def test_sweep_report_shows_measured_latency(browser, tmp_path):
    """With a measured.json per run, the latency chart and column are the measured medians (issue 24) and the
    speedup divides them; the profiled busy and span stay in the table, labelled."""
    root = tmp_path / "sweep"
    latency = {("eager", 64): 4.0, ("eager", 128): 8.0, ("fast", 64): 5.0, ("fast", 128): 2.0}
    for (impl, seq), ms in latency.items():
        (root / f"{impl}_{seq}").mkdir(parents=True)
        eager_trace(root / f"{impl}_{seq}" / "host.1.pt.trace.json", layers=1, steps=1)
        (root / f"{impl}_{seq}" / "measured.json").write_text(json.dumps(
            {"schema": "tracekit.measured/1", "median_ms": ms}))
    report(root, "-o", tmp_path / "m.html")
    open_page(browser, tmp_path / "m.html")
    charts = js(browser, "return Array.from(document.querySelectorAll('[data-chart]')).map(c => [c.dataset.chart, "
                         "Array.from(c.querySelectorAll('circle')).map(p => [p.dataset.series, +p.dataset.x, "
                         "+p.dataset.v])])")
    by_title = dict(charts)
    lat = by_title["latency (measured) (log scale)"]
    assert sorted(lat) == sorted([i, q, ms * 1000] for (i, q), ms in latency.items())
    speed = {(i, q): v for i, q, v in by_title["speedup over eager (measured) (log scale)"]}
    assert speed[("fast", 64)] == pytest.approx(4 / 5) and speed[("fast", 128)] == pytest.approx(8 / 2)
    assert speed[("eager", 64)] == 1
    heads = js(browser, "return Array.from(document.querySelectorAll('th')).map(t => t.textContent)")
    assert "latency (measured)" in heads and "span (profiled)" in heads and "busy (profiled)" in heads
    cells = js(browser, "return Array.from(document.querySelectorAll('tr[data-run=\"fast_128\"] td'))"
                        ".map(t => t.textContent)")
    assert "4.00\u00d7" in cells and not any("profiled" in c for c in cells)


@pytest.mark.slow
def test_hostile_names_render_as_text_and_never_run(browser, tmp_path):
    report(hostile_trace(tmp_path / "x.pt.trace.json"), "-o", tmp_path / "x.html")
    open_page(browser, tmp_path / "x.html")
    assert js(browser, "return [window.__pwned, window.__pwned2, document.images.length, "
                       "document.querySelectorAll('script').length]") == [None, None, 0, 2]
    text = js(browser, "return document.body.textContent")
    assert XSS_IMG in text
    hovers = js(browser, "return Array.from(document.querySelectorAll('td.name')).map(td => td.title)")
    assert any(XSS_END in h for h in hovers)


@pytest.mark.slow
@pytest.mark.skipif(not SWEEP.is_dir(), reason=f"the H200 sweep is not at {SWEEP}")
def test_h200_sweep_report_is_small_and_fast(browser, tmp_path):
    report(SWEEP, "-o", tmp_path / "h200.html")
    size = (tmp_path / "h200.html").stat().st_size
    took = open_page(browser, tmp_path / "h200.html")
    assert shot(browser, "test_h200_sweep") > 8
    runs = sorted(p.name for p in SWEEP.iterdir() if p.is_dir())
    shown = js(browser, "return Array.from(document.querySelectorAll('tr[data-run]')).map(r => r.dataset.run)")
    assert sorted(shown) == runs
    assert size < 2_000_000 and took < 5, (size, took)
