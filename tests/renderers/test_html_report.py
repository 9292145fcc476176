"""`tracekit report`: one offline HTML page, checked in a real headless Chromium.

Why a browser: only a browser shows that the page draws without console errors, fetches nothing (the
page's CSP forbids it; the performance log shows what was asked for), and that what it draws equals the
JSON. Figures are checked against hand-built traces whose answers are known by construction
(tests/support/builders.py: each eager block is 31 µs busy, 21 µs of it matmul).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from support.builders import TraceBuilder, attention_block, eager_trace, no_attention_trace
from support.cli import run_cli
from support.paths import ROOT
from support.browser import XSS_END, XSS_IMG, hostile_trace, js, open_page, report, shot

from tracekit.renderers.html import embed_json

SWEEP = ROOT.parent / "shared" / "traces" / "h200" / "sweep"

# ---------------------------------------------------------------------------------------------
# Traces with known answers


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
    table = "Array.from(document.querySelectorAll('h2')).find(h => h.textContent.startsWith('Top ')).nextElementSibling"
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
    # issue 37: the whole step leads, on the basis the JSON names (the page and the JSON share one headline)
    doc = json.loads(run_cli("diff", before, after, "--format", "json", check=True).stdout)["headline"]
    lead = js(browser, "var e = document.querySelector('.lead'); return [e.dataset.basis, e.textContent]")
    assert lead[0] == doc["basis"] and lead[1].startswith(doc["basis"] + " (per step")
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
        [r.dataset.run, +r.cells[1].dataset.v, +r.cells[6].dataset.v])""")  # busy: after latency and 3 speedups
    assert sorted(r[0] for r in rows) == sorted(f"{i}_{s}" for i, s in layers)
    for name, blocks, busy in rows:
        impl, seq = name.split("_")
        assert blocks == layers[(impl, int(seq))] and busy == pytest.approx(31 * blocks)
    charts = js(browser, "return Array.from(document.querySelectorAll('[data-chart]')).map(c => "
                         "[c.dataset.chart, c.querySelectorAll('.pt').length])")
    assert len(charts) == 4 and all(n == 4 for _, n in charts), charts
    titles = [t for t, _ in charts]
    # no measured.json: the latency chart is the profiled span, labelled so, and log axes say so
    # issue 37: the speedup chart names what it plots: with no measured latency, the profiled step busy
    assert titles[0] == "attention span per step (profiled) (log scale)"
    assert titles[1].startswith("step speedup over fast (profiled step busy)")
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
                         "Array.from(c.querySelectorAll('.pt')).map(p => [p.dataset.series, +p.dataset.x, "
                         "+p.dataset.v])])")
    by_title = dict(charts)
    lat = by_title["latency (measured) (log scale)"]
    assert sorted(lat) == sorted([i, q, ms * 1000] for (i, q), ms in latency.items())
    speed = {(i, q): v for i, q, v in by_title["latency speedup over eager (measured) (log scale)"]}
    assert speed[("fast", 64)] == pytest.approx(4 / 5) and speed[("fast", 128)] == pytest.approx(8 / 2)
    assert speed[("eager", 64)] == 1
    heads = js(browser, "return Array.from(document.querySelectorAll('th')).map(t => t.textContent)")
    assert "latency (measured)" in heads and "span per step (profiled)" in heads and "busy per step (profiled)" in heads
    cells = js(browser, "return Array.from(document.querySelectorAll('tr[data-run=\"fast_128\"] td'))"
                        ".map(t => t.textContent)")
    # issue 37: the latency speedup, then the profiled step and attention speedups, kept apart and labelled
    assert cells[3] == "4.00\u00d7" and "profiled" in cells[4] and "profiled" in cells[5]


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


# ---------------------------------------------------------------------------------------------
# Issue 25, part 3: values on bars, one scale for role bars, the waterfall's colours and axis, hints'
# savings, the roofline table, idle in the run view.

SPAN = 136  # one eager block's span (tests/support/builders.py's attention_block): busy 31 + idle 105
REAL_XDIT = ROOT.parent / "shared" / "traces" / "real" / "tracelens" / "inference"


def fmt_us(us: float) -> str:
    """The page's units (written out here: the test must not borrow the code it checks)."""
    a = abs(us)
    if a >= 1e6:
        return f"{us / 1e6:.2f} s"
    if a >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.0f} \u00b5s" if a >= 100 else f"{us:.1f} \u00b5s"


# Every segment of the bars under `root`, with its printed value (if any) and both boxes in page pixels.
SEGMENTS_JS = """return Array.from(arguments[0].querySelectorAll('.row')).map(row => {
    const svg = row.querySelector('svg'), sb = svg.getBoundingClientRect();
    const texts = Array.from(svg.querySelectorAll('text.val'));
    return {label: row.dataset.label, us: +row.dataset.us,
            idle: row.dataset.idleUs === undefined ? null : +row.dataset.idleUs,
            tot: row.querySelector('.tot').textContent, svgW: sb.width, svgL: sb.left, svgT: sb.top, svgB: sb.bottom,
            segs: Array.from(svg.querySelectorAll('rect, line.idle')).map(r => {
                const b = r.getBoundingClientRect(), t = texts.find(x => x.dataset.key === r.dataset.key);
                const tb = t ? t.getBoundingClientRect() : null;
                return {key: r.dataset.key, us: +r.dataset.us, tag: r.tagName, l: b.left, w: b.width,
                        title: r.querySelector('title') ? r.querySelector('title').textContent : null,
                        text: t ? t.textContent : null,
                        tb: tb ? [tb.left, tb.right, tb.top, tb.bottom] : null};
            })};
})"""


def segments(d, css: str) -> list[dict]:
    return js(d, f"return (function() {{ {SEGMENTS_JS} }}).apply(null, [document.querySelector({css!r})])")


def check_printed(rows: list[dict], expect: dict[tuple[str, str], float]) -> None:
    """Each printed value is its segment's figure and lies inside it; segments in ``expect`` (wide by
    construction) carry their value; every segment keeps its hover."""
    for r in rows:
        for s in r["segs"]:
            assert s["title"] and fmt_us(s["us"]) in s["title"], s
            if s["text"] is not None:
                assert s["text"] == ("idle " if s["key"] == "idle" else "") + fmt_us(s["us"]) or s["text"] == "idle"
                left, right, top, bottom = s["tb"]
                assert s["l"] - 0.5 <= left and right <= s["l"] + s["w"] + 0.5, s  # inside its segment
                assert r["svgT"] - 0.5 <= top and bottom <= r["svgB"] + 0.5, s
            if (r["label"], s["key"]) in expect:
                assert s["us"] == pytest.approx(expect[r["label"], s["key"]])
                assert s["text"] == ("idle " if s["key"] == "idle" else "") + fmt_us(s["us"]), s


@pytest.mark.slow
def test_bar_values_are_printed_inside_wide_segments(browser, tmp_path):
    """By construction each layer has 2 × 31 µs busy (matmul 40) and 2 × 105 µs idle; the role bars
    (all matmul-other here) 40 µs; the narrow ones (elementwise 4 µs on a 272 µs scale) only hover."""
    report(eager_trace(tmp_path / "t.pt.trace.json", layers=2, steps=2), "-o", tmp_path / "r.html")
    open_page(browser, tmp_path / "r.html")
    layers = segments(browser, '[data-section="By layer"] .bars')
    wide = {(f"layer{i}.attention", k): v for i in range(2) for k, v in (("matmul", 40), ("idle", 2 * 105))}
    check_printed(layers, wide)
    roles = segments(browser, '[data-section="By layer"] .roles .bars')
    check_printed(roles, {(f"layer{i}.attention", "matmul-other"): 40 for i in range(2)})
    narrow = [s for r in layers for s in r["segs"] if s["key"] == "elementwise"]
    assert len(narrow) == 2 and all(s["text"] is None and s["w"] < 20 for s in narrow)
    # The diff's before/after bars: two blocks' matmul (40 µs) before, one block's (20 µs) after.
    before = eager_trace(tmp_path / "b.pt.trace.json", layers=2, steps=1)
    after = eager_trace(tmp_path / "a.pt.trace.json", layers=1, steps=1)
    report(before, after, "-o", tmp_path / "d.html")
    open_page(browser, tmp_path / "d.html")
    bars = segments(browser, ".bars")
    check_printed(bars, {("before", "matmul"): 40, ("after", "matmul"): 20})
    data = json.loads(js(browser, "return document.getElementById('tk-data').textContent"))["result"]
    for r in bars:
        for s in r["segs"]:
            assert s["us"] == pytest.approx(data["categories"][s["key"]][r["label"] + "_us"])


@pytest.mark.slow
def test_role_bars_are_drawn_on_the_block_bars_scale(browser, tmp_path):
    """A role bar is as long as the same time in the block bars above: matmul 40 µs of a 272 µs longest bar
    (2 blocks' span, 2 × 136 µs), not the full width that a scale of its own would give."""
    report(eager_trace(tmp_path / "t.pt.trace.json", layers=2, steps=2), "-o", tmp_path / "r.html")
    open_page(browser, tmp_path / "r.html")
    for section in ("By layer", "By block kind"):
        blocks = segments(browser, f'[data-section="{section}"] .bars')
        roles = segments(browser, f'[data-section="{section}"] .roles .bars')
        longest = max(r["us"] + r["idle"] for r in blocks)
        n = 2 if section == "By layer" else 4  # blocks per row
        assert longest == pytest.approx(n * SPAN)
        for r in roles:
            (seg,) = r["segs"]
            assert seg["w"] / r["svgW"] == pytest.approx(n * 20 / longest, abs=0.003)
            block = next(b for b in blocks if b["label"] == r["label"])
            mm = next(s for s in block["segs"] if s["key"] == "matmul")
            assert seg["w"] == pytest.approx(mm["w"], abs=1)


def slower_softmax_trace(path: Path) -> Path:
    """Two eager blocks whose bmm kernels take 7 µs (not 10) and softmax 6 µs (not 5): per block matmul -6 µs,
    softmax +1 µs against eager_trace, so 2 × (31 - 6 + 1) = 52 µs."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    b.annotation("ProfilerStep#1", 0, 800)
    for i in range(2):
        attention_block(b, 1 + 400 * i, name=f"layer{i}.attention")
    for ev in b.events:
        if ev.get("cat") == "kernel" and ev["name"].startswith("void cutlass"):
            ev["dur"] = 7
        elif ev.get("cat") == "kernel" and "softmax_warp_forward" in ev["name"]:
            ev["dur"] = 6
    return b.write(path)


WATERFALL_JS = """const svg = document.querySelector('svg.waterfall'), sb = svg.getBoundingClientRect();
    const legend = {};
    document.querySelectorAll('.legend span').forEach(s => {
        const i = s.querySelector('i'); legend[s.textContent] = getComputedStyle(i).backgroundColor; });
    return {lo: +svg.dataset.axisLo, hi: +svg.dataset.axisHi, broken: svg.dataset.broken, legend: legend,
        svg: [sb.left, sb.right, sb.top, sb.bottom],
        note: (svg.querySelector('[data-axis-note]') || {}).textContent || null,
        zigzags: svg.querySelectorAll('.zigzag').length,
        caption: (document.querySelector('.caption') || {}).textContent || '',
        ticks: Array.from(svg.querySelectorAll('text[data-tick]')).map(t => { const b = t.getBoundingClientRect();
            return {v: +t.dataset.tick, text: t.textContent, y: +t.getAttribute('y') - 4,
                box: [b.left, b.right, b.top, b.bottom]}; }),
        bars: Array.from(svg.querySelectorAll('rect')).map(r => ({label: r.dataset.label,
            us: r.dataset.us === undefined ? null : +r.dataset.us,
            delta: r.dataset.delta === undefined ? null : +r.dataset.delta, sign: r.dataset.sign || null,
            broken: r.dataset.broken || null, fill: getComputedStyle(r).fill,
            stroke: r.getAttribute('stroke'), dash: r.getAttribute('stroke-dasharray'),
            y: +r.getAttribute('y'), h: +r.getAttribute('height')})),
        values: Array.from(svg.querySelectorAll('text.wf-value')).map(t => [t.dataset.label, t.textContent])};"""

UNITS = {"\u00b5s": 1, "ms": 1e3, "s": 1e6}


def check_axis(w: dict) -> float:
    """One unit for every tick, each tick's text its value in it, the ticks evenly spaced; returns px per µs."""
    units = {t["text"].split(" ")[1] for t in w["ticks"]}
    assert len(units) == 1, w["ticks"]
    scale = UNITS[units.pop()]
    for t in w["ticks"]:
        assert re.fullmatch(r"-?\d+(\.\d+)? (µs|ms|s)", t["text"]), t
        assert float(t["text"].split(" ")[0]) * scale == pytest.approx(t["v"], rel=1e-6, abs=1e-6)
    ys = [t["y"] for t in w["ticks"]]
    vs = [t["v"] for t in w["ticks"]]
    px = (ys[0] - ys[-1]) / (vs[-1] - vs[0])
    for y, v in zip(ys, vs):
        assert ys[0] - y == pytest.approx((v - vs[0]) * px, abs=0.01)
    assert vs[0] == pytest.approx(w["lo"]) and vs[-1] == pytest.approx(w["hi"])
    return px


@pytest.mark.slow
def test_waterfall_keeps_the_legend_colours_and_breaks_its_axis(browser, tmp_path):
    """62 µs before (two eager blocks), 52 µs after: matmul -12 µs, softmax +2 µs. Every level is at least
    50 µs, far above 0: the axis starts below 50 µs and above 0, broken, and the totals' bars are cut."""
    before = eager_trace(tmp_path / "b.pt.trace.json", layers=2, steps=1)
    report(before, slower_softmax_trace(tmp_path / "a.pt.trace.json"), "-o", tmp_path / "d.html")
    open_page(browser, tmp_path / "d.html")
    shot(browser, "test_waterfall_hand")
    w = js(browser, WATERFALL_JS)
    bars = {b["label"]: b for b in w["bars"]}
    assert bars["before"]["us"] == pytest.approx(62) and bars["after"]["us"] == pytest.approx(52)
    assert bars["matmul"]["delta"] == pytest.approx(-12) and bars["softmax"]["delta"] == pytest.approx(2)
    for cat in ("matmul", "softmax", "memory", "elementwise"):
        assert bars[cat]["fill"] == w["legend"][cat], cat  # the legend's colour, whatever the sign
    grey = bars["before"]["fill"]
    assert bars["after"]["fill"] == grey and grey not in w["legend"].values()
    up, down, flat = bars["softmax"], bars["matmul"], bars["memory"]
    assert up["sign"] == "+" and up["stroke"] and not up["dash"]
    assert down["sign"] == "-" and down["stroke"] and down["dash"] and down["stroke"] != up["stroke"]
    assert flat["sign"] == "0" and not flat["stroke"]
    values = dict(w["values"])
    assert values["softmax"] == "\u25b2 +2.0 µs" and values["matmul"] == "\u25bc -12.0 µs"
    assert "\u25b2" in w["caption"] and "\u25bc" in w["caption"] and "outline" in w["caption"]
    # The axis: broken, from a level above 0 and below the lowest (50 µs), up to at least the highest (62 µs).
    assert w["broken"] == "1" and 0 < w["lo"] < 50 and 62 <= w["hi"]
    assert w["note"] == f"axis starts at {w['ticks'][0]['text']} (broken), not 0"
    assert bars["before"]["broken"] == "1" and bars["after"]["broken"] == "1" and w["zigzags"] >= 2
    px = check_axis(w)
    assert down["h"] == pytest.approx(12 * px, abs=0.01) and up["h"] == pytest.approx(2 * px, abs=0.01)
    base = w["ticks"][0]["y"]
    assert base - bars["before"]["y"] == pytest.approx((62 - w["lo"]) * px, abs=0.01)


@pytest.mark.slow
@pytest.mark.skipif(not (REAL_XDIT / "xdit_flux_aiter").is_dir(), reason="the xDiT MI300X traces are not there")
def test_xdit_waterfall_reads_the_change_and_keeps_its_top_label(browser, tmp_path):
    """xDiT on MI300X, aiter → aiter+sage: +18 ms on 135 ms. The top tick shows its whole value inside the
    svg, all ticks are in ms, and the change fills most of the plot (the axis does not start at 0)."""
    a, b = (REAL_XDIT / f / "profile_trace_rank_0.json.gz" for f in ("xdit_flux_aiter", "xdit_flux_aiter_sage"))
    report(a, b, "-o", tmp_path / "x.html", "-j", "1")
    open_page(browser, tmp_path / "x.html")
    shot(browser, "test_waterfall_xdit")
    data = json.loads(js(browser, "return document.getElementById('tk-data').textContent"))["result"]
    w = js(browser, WATERFALL_JS)
    levels, level = [data["attention"]["before_us"]], data["attention"]["before_us"]
    for c in data["categories"].values():
        level += c["delta_us"]
        levels.append(level)
    assert level == pytest.approx(data["attention"]["after_us"], abs=0.01)
    check_axis(w)
    assert {t["text"].split(" ")[1] for t in w["ticks"]} == {"ms"}
    top = w["ticks"][-1]
    assert top["v"] >= max(levels) and top["text"] == f"{top['v'] / 1000:g} ms"
    left, right, up, down = w["svg"]
    for t in w["ticks"]:  # every label whole inside the svg: none cut at the left
        assert left <= t["box"][0] and t["box"][1] <= right and up <= t["box"][2] and t["box"][3] <= down, t
    assert w["broken"] == "1" and 0 < w["lo"] <= min(levels)
    change = abs(data["attention"]["delta_us"]) / (w["hi"] - w["lo"])
    assert change > 0.5, (w["lo"], w["hi"])


@pytest.mark.slow
def test_hints_print_their_savings(browser, tmp_path):
    """Four eager blocks, two per step: launch-bound saves at most their idle, 2 × 105 µs per step within a step's
    span 2 × 136 µs (4 × 105 over both steps); fp32-softmax about half the softmax time (2 × 5 µs / 2 per step,
    within a step's busy 2 × 31 µs), an estimate, and busy time on launch-bound blocks: it will not reach latency."""
    report(eager_trace(tmp_path / "t.pt.trace.json", layers=2, steps=2), "-o", tmp_path / "r.html")
    open_page(browser, tmp_path / "r.html")
    lines = dict(js(browser, "return Array.from(document.querySelectorAll('.hint[data-rule]')).map(h => "
                             "[h.dataset.rule, h.querySelector('.saving').firstChild.textContent])"))
    idle, span, busy = 4 * 105, 4 * SPAN, 4 * 31
    assert lines["launch-bound"] == (f"saves at most {fmt_us(idle / 2)} per step (median of 2 steps; a step's "
                                     f"attention span is {fmt_us(span / 2)}), {fmt_us(idle)} over 2 steps "
                                     f"({100 * idle / span:.1f}% of the span of layer*.attention)")
    sm = 4 * 5 / 2
    assert lines["fp32-softmax"] == (f"saves about {fmt_us(sm / 2)} per step (median of 2 steps; a step's attention "
                                     f"busy time is {fmt_us(busy / 2)}), {fmt_us(sm)} over 2 steps "
                                     f"({100 * sm / busy:.1f}% of the busy time of layer*.attention); busy time "
                                     "only: will not reach latency (launch-bound)")


def shaped_trace(path: Path) -> Path:
    """Blocks whose two aten::bmm ops record bf16 shapes: enc (×2) [8,256,64]·[8,64,256], dec [1,1024,1024]²;
    a cross block without shapes."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    b.annotation("ProfilerStep#1", 0, 1600)
    shapes = {"enc.layer0.attention": (8, 256, 64, 256), "enc.layer1.attention": (8, 256, 64, 256),
              "dec.layer0.attention": (1, 1024, 1024, 1024), "cross.layer0.attention": None}
    for i, (name, bmkn) in enumerate(shapes.items()):
        n0 = len(b.events)
        attention_block(b, 1 + 400 * i, name=name)
        for ev in b.events[n0:]:
            if ev["name"] == "aten::bmm" and bmkn:
                B, M, K, N = bmkn
                ev["args"]["Input Dims"] = [[B, M, K], [B, K, N]]
                ev["args"]["Input type"] = ["c10::BFloat16", "c10::BFloat16"]
    return b.write(path)


@pytest.mark.slow
def test_roofline_table_per_block_kind(browser, tmp_path):
    """Per kind, from the shapes: FLOPs 2·B·M·K·N and bytes 2·(BMK + BKN + BMN) per bmm (bf16), timed over the
    two bmm kernels (10 µs each) and the memset the first one launches (1 µs); the roof is H100 SXM's
    (989.4 TFLOP/s bf16, 3350 GB/s). No table for a trace without shapes."""
    report(shaped_trace(tmp_path / "s.pt.trace.json"), "-o", tmp_path / "s.html")
    open_page(browser, tmp_path / "s.html")
    rows = {r[0]: r[1:] for r in js(browser, "return Array.from(document.querySelectorAll('tr[data-kind]')).map(r => "
                                             "[r.dataset.kind].concat(Array.from(r.cells).map(c => c.dataset.v)))")}
    for kind, n, (B, M, K, N) in (("enc.layer*.attention", 2, (8, 256, 64, 256)), ("dec.layer*.attention", 1,
                                                                                    (1, 1024, 1024, 1024))):
        flops, nbytes, t = n * 2 * 2 * B * M * K * N, n * 2 * 2 * (B * M * K + B * K * N + B * M * N), n * 21e-6
        cs, ms = flops / 989.4e12, nbytes / 3350e9
        _, count, f, tf, gb, roof, bound, timed = rows[kind]
        assert int(count) == n and float(f) == flops
        assert float(tf) == pytest.approx(flops / t / 1e12, rel=1e-3)
        assert float(gb) == pytest.approx(nbytes / t / 1e9, rel=1e-3)
        assert float(roof) == pytest.approx(100 * max(cs, ms) / t, abs=0.02)
        assert bound == ("compute" if cs >= ms else "memory")
        assert float(timed) == pytest.approx(21 / 31, rel=1e-3)
    assert rows["cross.layer*.attention"][2] == ""  # no shapes: n/a, no figure
    shown = js(browser, "return Array.from(document.querySelectorAll('tr[data-kind] td')).map(t => t.textContent)")
    assert "memory" in shown and "compute" in shown and "n/a" in shown
    report(eager_trace(tmp_path / "t.pt.trace.json", layers=2), "-o", tmp_path / "r.html")
    open_page(browser, tmp_path / "r.html")
    assert js(browser, "return document.querySelectorAll('tr[data-kind]').length") == 0
    assert "Roofline" not in js(browser, "return document.getElementById('app').textContent")


def check_idle(rows: list[dict], blocks_per_row: dict[str, int], causes: dict[str, dict[str, float]]) -> None:
    """Each row's idle is its blocks' (105 µs each), drawn after its busy segments, as long as its time on the
    shared scale, with the causes in the hover and "busy X + idle Y" as its total."""
    longest = max(r["us"] + r["idle"] for r in rows)
    for r in rows:
        n = blocks_per_row[r["label"]]
        assert r["us"] == pytest.approx(31 * n) and r["idle"] == pytest.approx(105 * n)
        assert r["tot"].startswith(f"busy {fmt_us(31 * n)} + idle {fmt_us(105 * n)}")
        busy = [s for s in r["segs"] if s["tag"] == "rect"]
        (idle,) = [s for s in r["segs"] if s["key"] == "idle"]
        assert idle["tag"] == "line" and idle["l"] >= max(s["l"] + s["w"] for s in busy) - 0.5
        assert idle["w"] / r["svgW"] == pytest.approx(105 * n / longest, abs=0.003)
        assert idle["title"].endswith(cause_words(causes[r["label"]])), idle["title"]


def cause_words(causes: dict[str, float]) -> str:
    """The end of an idle hover: the causes that took time, in vocab.IdleCause's order, in the terminal's words
    (``host op``, not ``host_op``); a cause at zero is not listed. (Dicts read back from the page lose their key
    order, so the order is the vocabulary's.)"""
    from tracekit.vocab import IDLE_CAUSES

    timed = [f"{c.replace('_', ' ')} {fmt_us(causes[c + '_us'])}" for c in IDLE_CAUSES if causes.get(c + "_us", 0) > 0]
    return "; " + ", ".join(timed) + ")" if timed else " of the span)"


def causes_of(blocks: list[dict], key: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for b in blocks:
        for c, us in b["idle_by_cause"].items():
            out.setdefault(b[key], {}).setdefault(c, 0.0)
            out[b[key]][c] += us
    return out


@pytest.mark.slow
def test_run_view_shows_idle(browser, tmp_path):
    """Each eager block idles 105 µs of its 136 µs span: per layer (2 steps) 210 µs, per kind 420 µs; in a
    sweep, the run clicked shows its own."""
    report(eager_trace(tmp_path / "t.pt.trace.json", layers=2, steps=2), "-o", tmp_path / "r.html")
    open_page(browser, tmp_path / "r.html")
    blocks = json.loads(js(browser, "return document.getElementById('tk-data').textContent"))["result"]["blocks"]
    check_idle(segments(browser, '[data-section="By layer"] .bars'),
               {"layer0.attention": 2, "layer1.attention": 2}, causes_of(blocks, "name"))
    check_idle(segments(browser, '[data-section="By block kind"] .bars'), {"layer*.attention": 4},
               causes_of(blocks, "kind"))
    root = tmp_path / "sweep"
    for name, n in (("fast_64", 1), ("fast_128", 3)):
        (root / name).mkdir(parents=True)
        eager_trace(root / name / "host.1.pt.trace.json", layers=n, steps=1)
    report(root, "-o", tmp_path / "s.html")
    open_page(browser, tmp_path / "s.html")
    js(browser, "document.querySelector('tr[data-run=\"fast_128\"]').click()")
    data = json.loads(js(browser, "return document.getElementById('tk-data').textContent"))
    run = next(r for r in data["result"]["runs"] if r["name"] == "fast_128")
    check_idle(segments(browser, '.detail [data-section="By block kind"] .bars'), {"layer*.attention": 3},
               causes_of(run["blocks"], "kind"))
    assert js(browser, "return document.querySelectorAll('.detail line.idle').length") == 1 + 3


@pytest.mark.slow
def test_waterfall_from_zero_keeps_one_unit(browser, tmp_path):
    """40 eager blocks (1.24 ms) → 2 (62 µs): the lowest level is near 0, so the axis starts at 0, unbroken;
    its ticks, 0 among them, are all in ms (the range's unit), never "0.0 µs" beside "1.20 ms"."""
    before = eager_trace(tmp_path / "b.pt.trace.json", layers=40, steps=1)
    after = eager_trace(tmp_path / "a.pt.trace.json", layers=2, steps=1)
    report(before, after, "-o", tmp_path / "d.html")
    open_page(browser, tmp_path / "d.html")
    w = js(browser, WATERFALL_JS)
    assert w["broken"] == "0" and w["lo"] == 0 and w["note"] is None and w["zigzags"] == 0
    check_axis(w)
    number, unit = w["ticks"][0]["text"].split(" ")
    assert float(number) == 0 and unit == "ms" and w["hi"] >= 40 * 31
    assert not any(b["broken"] for b in w["bars"])


@pytest.mark.slow
def test_diff_report_of_folders_of_runs_has_a_row_per_run_pair(browser, tmp_path):
    """support.steps.lead_sweeps: each row leads on its run's own whole step (step busy 150 -> 200 µs, +33.3%; a
    launch-bound step's span 1020 -> 2020 µs, longer, never slower), else on its attention."""
    from support.pairs import paired_sweeps
    from support.steps import lead_sweeps

    def pair_rows(before, after):
        report(before, after, "-o", tmp_path / "d.html")
        open_page(browser, tmp_path / "d.html")
        return js(browser, """const h = Array.from(document.querySelectorAll('h2'))
            .find(e => e.textContent === 'Runs paired by name');
            let t = h.nextElementSibling;
            while (t.tagName !== 'TABLE') t = t.querySelector('table') || t.nextElementSibling;
            return Array.from(t.querySelectorAll('tbody tr')).map(r => Array.from(r.cells).map(c => c.textContent))""")

    rows = pair_rows(*lead_sweeps(tmp_path / "lead"))
    assert [(r[0], r[1], r[4], r[5]) for r in rows] == [
        ("heavier", "step busy", "+33.3% (1.33\u00d7 slower)", "slower"),
        ("longer", "step span", "+98.0% (1.98\u00d7 longer)", "longer"),
        ("noisy", "step busy", "+6.7% (1.07\u00d7 slower)", "within noise"),
        ("unstepped", "attention (total)", "+80.0% (1.80\u00d7 slower)", "slower, noise unknown")]
    rows = pair_rows(*paired_sweeps(tmp_path / "gate"))  # runs on one side only
    assert [(r[0], r[1], r[5]) for r in rows] == [("bound", "step span", "within noise"),
                                                  ("slower", "step span", "within noise")]
    subs = js(browser, "return Array.from(document.querySelectorAll('.sub')).map(e => e.textContent)")
    assert "runs only before: gone" in subs and "runs only after: new" in subs


# ---------------------------------------------------------------------------------------------
# The rest of the step (issue 37, item 7). support.steps.rest_steps: per step, outside attention matmul = the
# linear's µs and elementwise 5; by top-level module Head = the linear (+ the mul), Encoder 5; top-level host ops
# REST_HOST_OPS (+ aten::mul 4); its 250 µs range holds every kernel, busy 15 + linear (+ mul): launch-bound.

REST_ROWS_JS = """return Array.from(document.querySelectorAll('[data-section="rest"] tbody tr')).map(r => ({
    by: r.dataset.restBy, name: r.cells[1].dataset.v,
    values: Array.from(r.cells).slice(2).map(c => [c.textContent, c.dataset.v === '' ? null : +c.dataset.v])}))"""
JSON_JS = "return JSON.parse(document.getElementById('tk-data').textContent)"
REST_KEYS = {"category": "categories", "module": "modules", "host op": "host_ops"}


def rest_rows(d) -> dict[tuple[str, str], list]:
    """The rest-of-step table as {(by, name): [(text, value), ...]}, in page order."""
    return {(r["by"], r["name"]): [tuple(v) for v in r["values"]] for r in js(d, REST_ROWS_JS)}


def check_rest_rows(rows: dict[tuple[str, str], list], step_rest: dict) -> None:
    """Each row of the rest-of-step table prints the JSON's figure for its step (``step_rest``), in the page's
    units, and holds it as its value."""
    for (by, name), [(text, us)] in rows.items():
        assert us == step_rest[REST_KEYS[by]][name] and text == fmt_us(us), (by, name)


@pytest.mark.slow
def test_rest_of_step_table_equals_the_json(browser, tmp_path):
    """Linears 20, 60, 40: outside busy 25, 65, 45, so the median step is step 3 (matmul 40, elementwise 5;
    Head 40, Encoder 5), launch-bound (idle 195 of 250 µs), so its host ops follow. Each figure in the table is
    the JSON's ``step_rest`` of step 3, and the construction's."""
    from support.steps import REST_HOST_OPS, rest_steps

    report(rest_steps(tmp_path / "t.pt.trace.json", [20, 60, 40]), "-o", tmp_path / "r.html")
    open_page(browser, tmp_path / "r.html")
    (step3,) = [r for r in js(browser, JSON_JS)["result"]["traces"][0]["step_rest"] if r["step"] == 3]
    rows = rest_rows(browser)
    want = {("category", "matmul"): 40, ("category", "elementwise"): 5, ("module", "Head"): 40,
            ("module", "Encoder"): 5, **{("host op", k): v for k, v in REST_HOST_OPS.items()}}
    assert {k: v[0][1] for k, v in rows.items()} == pytest.approx(want)
    check_rest_rows(rows, step3)
    sub = js(browser, "return document.querySelector('[data-section=\"rest\"] .sub').textContent")
    assert sub == ("step 3 (median of 3 by busy outside attention): 45.0 \u00b5s busy outside attention \u00b7 "
                   "launch-bound step (device idle 78% of its span): 3 kernels launched, top-level host ops "
                   "23.8 \u00b5s")


@pytest.mark.slow
def test_the_report_lists_no_idle_cause_that_took_no_time(browser, tmp_path):
    """rest_steps' blocks idle by launch, queued and host op only: the other causes (sync, elsewhere, event wait,
    other) are zero, and neither the idle bar's hover nor the timeline's key lists them."""
    from support.steps import rest_steps

    report(rest_steps(tmp_path / "t.pt.trace.json", [20, 60, 40]), "-o", tmp_path / "r.html")
    open_page(browser, tmp_path / "r.html")
    data = js(browser, JSON_JS)["result"]
    causes = data["totals"]["idle_by_cause"]
    assert {c for c, us in causes.items() if us == 0} == {"sync_us", "elsewhere_us", "event_wait_us", "other_us"}
    # (the kind's bar; a layer's bar under it, issue 38, has no idle: span and idle belong to the core)
    (bar,) = [r for r in segments(browser, '[data-section="By block kind"] .bars') if r["idle"] is not None]
    (idle,) = [x for x in bar["segs"] if x["key"] == "idle"]
    assert idle["title"].endswith(cause_words(causes)) and "sync" not in idle["title"], idle["title"]
    legend = js(browser, "return Array.from(document.querySelectorAll('.legend span')).map(e => e.textContent)")
    gaps = data["timeline"]["gaps"]
    shown = [x for x in legend if x.startswith("idle: ")]
    assert len(shown) == sum(1 for c in data["timeline"]["idle_causes"] if any(v > 0 for v in gaps[c])) == 3


@pytest.mark.slow
def test_diff_rest_of_step_table_equals_the_json(browser, tmp_path):
    """Before: a 20 µs linear; after: 60 µs and an aten::mul (4 µs on the host) launching a 6 µs add. Matmul
    20 → 60, elementwise 5 → 11; Head 20 → 66, Encoder 5 → 5; both launch-bound, so the host op that changed
    follows (aten::mul 0 → 4). Each row is the JSON's ``rest_of_step``, its Δ after − before."""
    from support.steps import rest_steps

    report(rest_steps(tmp_path / "b.pt.trace.json", [20]), rest_steps(tmp_path / "a.pt.trace.json", [60], mul_us=6),
           "-o", tmp_path / "d.html")
    open_page(browser, tmp_path / "d.html")
    rest = js(browser, JSON_JS)["result"]["rest_of_step"]
    rows = rest_rows(browser)
    want = {("category", "matmul"): (20, 60), ("category", "elementwise"): (5, 11), ("module", "Head"): (20, 66),
            ("module", "Encoder"): (5, 5), ("host op", "aten::mul"): (0, 4)}
    assert list(rows) == list(want)
    for (by, name), (b, a) in want.items():
        (bt, bv), (at, av), (dt, dv) = rows[by, name]
        if by == "host op":
            (json_b, json_a), = [(x["before_us"], x["after_us"]) for x in rest["host_ops_changed"]
                                 if x["name"] == name]
        else:
            json_b, json_a = rest["before"][REST_KEYS[by]][name], rest["after"][REST_KEYS[by]][name]
        assert (bv, av) == (json_b, json_a) == pytest.approx((b, a)) and dv == pytest.approx(a - b)
        assert (bt, at) == (fmt_us(b), fmt_us(a)), (by, name)


@pytest.mark.slow
@pytest.mark.skipif(not (SWEEP / "eager_512").is_dir(), reason=f"the H200 sweep is not at {SWEEP}")
def test_h200_rest_of_step_table_equals_the_json(browser, tmp_path):
    """eager_512: each row of the table is its median step's figure in the JSON's step_rest (the step named above
    the table), and every category with time in that step has a row."""
    report(SWEEP / "eager_512", "-o", tmp_path / "r.html")
    open_page(browser, tmp_path / "r.html")
    data = js(browser, JSON_JS)["result"]
    sub = js(browser, "return document.querySelector('[data-section=\"rest\"] .sub').textContent")
    step = int(re.match(r"step (\d+) \(median of", sub).group(1))
    (rest,) = [r for r in data["traces"][0]["step_rest"] if r["step"] == step]
    rows = rest_rows(browser)
    check_rest_rows(rows, rest)
    assert {n for by, n in rows if by == "category"} == {c for c, us in rest["categories"].items() if us > 0}


def test_the_kind_section_draws_each_kinds_layer_row(browser, tmp_path):
    """llama_layer: block CoreAttention (20 µs flash) inside its layer SelfAttn (37 µs: q 10 + o 7 GEMMs and the
    core), by construction; the page draws the row Python summed, under its kind."""
    from support.builders import TraceBuilder, llama_layer

    b = TraceBuilder()
    llama_layer(b)
    report(b.write(tmp_path / "layer.json"), "-o", tmp_path / "l.html")
    open_page(browser, tmp_path / "l.html")
    rows = js(browser, """return Array.from(document.querySelectorAll('[data-section="By block kind"] .bars')[0]
        .querySelectorAll('.row')).map(r => [r.dataset.label, +r.dataset.us,
        Array.from(r.querySelectorAll('rect')).map(x => [x.dataset.key, +x.dataset.us])])""")
    assert [(r[0], r[1]) for r in rows] == [("CoreAttention", 20.0), ("\u2514 layer SelfAttn", 37.0)]
    assert dict(rows[1][2]) == pytest.approx({"matmul": 17.0, "fused_attention": 20.0})


# ---------------------------------------------------------------------------------------------
# "What if" (issue 39): tracekit whatif's prediction as a section of the report


def _cli(*args: object):
    from click.testing import CliRunner

    from tracekit.cli import cli

    return CliRunner().invoke(cli, [str(a) for a in args])


def _page_data(page: Path) -> dict:
    return json.loads(re.search(r'id="tk-data">(.*?)</script>', page.read_text(), re.S).group(1))["result"]


def _whatif_of(path: Path) -> dict:
    """tracekit.whatif's own rows per kind (results.whatif_rows), per step and headline: what the section must say."""
    import tracekit
    from tracekit.renderers.whatif import step_line
    from tracekit.results.whatif import shape_text, whatif_rows

    [w] = tracekit.whatif(path)
    rows = [{"label": r.label, "n": r.n, "shape": shape_text(r.shape, r.mask, r.mask_assumed),
             "confidence": r.confidence, "eager_core_us": r.eager_core_us, "fused_us": r.fused_us,
             "block_us": r.block_us, "fused_block_us": r.fused_block_us, "saving_per_step_us": r.saving_per_step_us,
             "launch_bound_predicted": r.launch_bound_predicted} for r in whatif_rows(w, "kind")]
    steps = [{"step": s.step, "eager_us": s.eager_us, "fused_us": s.fused_us, "saving_us": s.saving_us}
             for s in w.per_step]
    return {"rows": rows, "per_step": steps, "headline": step_line(w), "backend": w.backend, "reason": w.reason,
            "blocks": w.blocks}


def _section_rows(section: dict) -> list[dict]:
    keys = ("label", "n", "shape", "confidence", "eager_core_us", "fused_us", "block_us", "fused_block_us",
            "saving_per_step_us", "launch_bound_predicted")
    return [{k: r[k] for k in keys} for r in section["rows"]]


def test_the_whatif_section_is_whatifs_own_rows_on_a_hand_built_h200_trace(tmp_path):
    """whatif_trace: two steps of one calibrated eager block, 165 µs busy of which the core is 105 µs (score 40,
    mask 10, softmax 25, context 30) by construction; the section shows tracekit.whatif's rows, figure for figure."""
    from support.builders import whatif_trace

    trace = whatif_trace(tmp_path / "w.json", steps=2)
    report(trace, "-o", tmp_path / "w.html")
    section = _page_data(tmp_path / "w.html")["whatif"]
    want = _whatif_of(trace)
    assert section["reason"] is None and section["backend"] == "cuDNN" and want["backend"] == "cudnn"
    assert _section_rows(section) == want["rows"] and section["per_step"] == want["per_step"]
    [row] = section["rows"]
    assert (row["n"], row["block_us"], row["eager_core_us"]) == (2, pytest.approx(165), pytest.approx(105))
    assert row["shape"] == "B2 H8 L256² d64 bf16 causal (assumed)" and row["error_text"] == "±10%"
    assert section["basis"] == "per step (median of 2)" and section["headline"] == want["headline"]
    assert section["headline"].startswith("per step (median of 2): ")
    assert row["launch_bound_predicted"] is True  # 20 µs host ops x 6 outlast the predicted 67 µs block
    assert any(n.startswith("mask: assumed by --mask auto") for n in section["notes"])
    assert any(n.startswith("launch-bound after the switch") for n in section["notes"])


@pytest.mark.parametrize("run", ["eager_512", "eager_4096"])
def test_the_whatif_section_is_whatifs_own_rows_on_the_h200_sweep(tmp_path, run):
    trace_dir = SWEEP / run
    if not trace_dir.is_dir():
        pytest.skip(f"the H200 sweep is not at {SWEEP}")
    [trace] = sorted(trace_dir.glob("*.json*"))
    report(trace_dir, "-o", tmp_path / "r.html")
    section = _page_data(tmp_path / "r.html")["whatif"]
    want = _whatif_of(trace)
    assert section["reason"] is None and want["rows"] and _section_rows(section) == want["rows"]
    assert section["per_step"] == want["per_step"] and section["headline"] == want["headline"]
    assert all(r["fused_us"] is not None for r in section["rows"])
    if run == "eager_512":  # where the measured latency got worse with SDPA: the launch check fires (issue 39)
        assert all(r["launch_bound_predicted"] for r in section["rows"])
        assert any(n.startswith("launch-bound after the switch") for n in section["notes"])


def _cpu_trace(tmp_path: Path) -> Path:
    return ROOT / "sample_traces" / "cpu_eager_256.pt.trace.json.gz"


def _h100_trace(tmp_path: Path) -> Path:
    from support.builders import whatif_trace

    return whatif_trace(tmp_path / "h100.json", device="NVIDIA H100 80GB HBM3")


def _no_shapes_trace(tmp_path: Path) -> Path:
    from support.builders import whatif_trace

    return whatif_trace(tmp_path / "bare.json", dims=False)


@pytest.mark.parametrize("make", [_cpu_trace, _h100_trace, _no_shapes_trace], ids=["cpu", "uncalibrated", "no-shapes"])
def test_the_whatif_section_is_one_line_where_nothing_is_predicted(tmp_path, make):
    """A CPU-only trace, a device without a calibration, a trace without shapes: the reason tracekit whatif gives,
    and no figure at all."""
    trace = make(tmp_path)
    report(trace, "-o", tmp_path / "n.html")
    section = _page_data(tmp_path / "n.html")["whatif"]
    want = _whatif_of(trace)
    reasons = [want["reason"]] if want["reason"] else sorted({b.reason for b in want["blocks"]})
    assert len(reasons) == 1 and reasons[0]
    assert section["reason"] == f"no prediction: {reasons[0]}"
    assert set(section) == {"backend", "device", "mask_option", "reason"}  # no rows, no headline: nothing guessed


def test_several_traces_get_whatifs_one_trace_line(tmp_path):
    from support.builders import whatif_trace

    (tmp_path / "run").mkdir()
    for rank in (0, 1):
        whatif_trace(tmp_path / "run" / f"rank{rank}.pt.trace.json")
    report(tmp_path / "run", "-o", tmp_path / "r.html")
    reason = _page_data(tmp_path / "r.html")["whatif"]["reason"]
    res = _cli("whatif", tmp_path / "run")
    assert res.exit_code != 0 and reason.startswith("no prediction: whatif reads one trace; ")
    assert reason.endswith(" holds 2 (pass one file)") and "Error: whatif reads one trace; " in res.output


def test_each_run_of_a_sweep_report_has_its_own_whatif_section(tmp_path):
    """A folder of runs: each run's view (drawn when its row is picked) carries its own trace's prediction."""
    from support.builders import whatif_trace

    traces = {}
    for run, steps in (("eager_256", 1), ("eager_512", 3)):
        (tmp_path / "sweep" / run).mkdir(parents=True)
        traces[run] = whatif_trace(tmp_path / "sweep" / run / "a.pt.trace.json", steps=steps)
    report(tmp_path / "sweep", "-o", tmp_path / "s.html")
    runs = {r["name"]: r["whatif"] for r in _page_data(tmp_path / "s.html")["runs"]}
    assert set(runs) == set(traces)
    for run, trace in traces.items():
        want = _whatif_of(trace)
        assert _section_rows(runs[run]) == want["rows"] and runs[run]["per_step"] == want["per_step"]
    assert (runs["eager_256"]["basis"], runs["eager_512"]["basis"]) == ("per step (median of 1)",
                                                                        "per step (median of 3)")


def test_attribute_makes_no_prediction(tmp_path):
    """The 1 GB benchmark's command never pays for the section: its result carries no prediction."""
    import tracekit
    from support.builders import whatif_trace

    trace = whatif_trace(tmp_path / "w.json")
    assert tracekit.analyze(trace).whatif is None
    res = _cli("attribute", trace, "--format", "json")
    assert res.exit_code == 0 and '"whatif"' not in res.output


@pytest.mark.slow
def test_the_whatif_section_draws_in_chromium_and_hostile_names_stay_inert(browser, tmp_path):
    """The section's rows are the embedded figures, drawn as text: a block named with markup runs nothing."""
    from support.builders import whatif_trace

    trace = whatif_trace(tmp_path / "x.json", name=f"layer0.attention{XSS_IMG}{XSS_END}",
                         softmax_kernel=f"softmax_{XSS_IMG}{XSS_END}")
    report(trace, "-o", tmp_path / "x.html")
    open_page(browser, tmp_path / "x.html")
    assert js(browser, "return [window.__pwned, window.__pwned2, document.images.length, "
                       "document.querySelectorAll('script').length]") == [None, None, 0, 2]
    want = _whatif_of(trace)
    sec = "document.querySelector('[data-section=\"What if\"]')"
    lead = js(browser, f"var e = {sec}.querySelector('.whatif-lead'); return [e.dataset.basis, e.textContent]")
    assert lead == ["per step (median of 2)", want["headline"]]
    rows = js(browser, f"""return Array.from({sec}.querySelectorAll('table')[0].querySelectorAll('tbody tr')).map(r =>
        [r.dataset.whatifKind, r.cells[0].title].concat(Array.from(r.cells).slice(3, 8).map(c => +c.dataset.v)))""")
    [r] = want["rows"]
    assert rows == [[r["label"], r["label"], r["eager_core_us"], r["fused_us"], r["block_us"], r["fused_block_us"],
                     r["saving_per_step_us"]]]
    assert XSS_IMG in r["label"] and XSS_END in r["label"]
    text = js(browser, f"return {sec}.textContent")
    assert "in-scope (±10%)" in text and "launch-bound" in text and "mask: assumed by --mask auto" in text
    assert XSS_IMG in text  # the name, as text
    steps = js(browser, f"return Array.from({sec}.querySelectorAll('tr[data-step]')).map(r => +r.dataset.step)")
    assert steps == [s["step"] for s in want["per_step"]] == [1, 2]

    report(_h100_trace(tmp_path), "-o", tmp_path / "n.html")
    open_page(browser, tmp_path / "n.html")
    none = js(browser, f"var s = {sec}; return [s.querySelectorAll('table').length, "
                       "s.querySelector('.whatif-none').textContent]")
    assert none == [0, f"no prediction: {_whatif_of(_h100_trace(tmp_path))['reason']}"]


# ---------------------------------------------------------------------------------------------
# Issue 42: the sweep's charts (round log ticks, a 1× line, a colour-blind-safe palette with direct labels, the
# table's time base, the runs left out named), its title, and a page for a trace with no attention.

# Okabe and Ito's 8 colours (https://jfly.uni-koeln.de/color/), written out here: the test does not borrow the page's.
OKABE_ITO = {"#000000", "#e69f00", "#56b4e9", "#009e73", "#0072b2", "#d55e00", "#cc79a7", "#f0e442"}
# (impl, seq) -> eager layers per step (31 µs busy, 136 µs span each): sdpa and sdpa-cudnn are the same runs, so
# their lines lie on each other; "odd" is not named <impl>_<seq>.
CHART_RUNS = {("eager", 64): 1, ("eager", 128): 2, ("eager", 256): 4, ("sdpa", 64): 1, ("sdpa", 128): 1,
              ("sdpa", 256): 2, ("sdpa-cudnn", 64): 1, ("sdpa-cudnn", 128): 1, ("sdpa-cudnn", 256): 2,
              ("slow", 64): 2, ("slow", 128): 4, ("slow", 256): 8}

CHARTS_JS = """return Array.from(document.querySelectorAll('[data-chart]')).map(c => ({
    title: c.dataset.chart,
    ticks: Array.from(c.querySelectorAll('text.tick')).map(t => [+t.dataset.tick, t.textContent, +t.getAttribute('y')]),
    points: Array.from(c.querySelectorAll('.pt')).map(p => [p.dataset.series, +p.dataset.x, +p.dataset.v]),
    lines: Array.from(c.querySelectorAll('polyline.series-line')).map(l => [l.dataset.series,
        l.getAttribute('stroke').toLowerCase(), l.getAttribute('stroke-dasharray') || '']),
    shapes: Array.from(c.querySelectorAll('.pt')).map(p => [p.dataset.series, p.dataset.shape]),
    ref: Array.from(c.querySelectorAll('line.ref')).map(l => [+l.dataset.v, +l.getAttribute('y1')]),
    refText: Array.from(c.querySelectorAll('.ref-label')).map(t => t.textContent),
    labels: Array.from(c.querySelectorAll('g.end-label')).map(g => {
        const b = g.querySelector('text').getBoundingClientRect();
        return [g.dataset.series, g.querySelector('text').textContent, b.top, b.bottom]; })}))"""


def chart_sweep(root: Path) -> Path:
    for (impl, seq), n in CHART_RUNS.items():
        (root / f"{impl}_{seq}").mkdir(parents=True)
        eager_trace(root / f"{impl}_{seq}" / "t.pt.trace.json", layers=n, steps=2)
    (root / "odd").mkdir()
    eager_trace(root / "odd" / "t.pt.trace.json", layers=1, steps=2)
    return root


def round_125(lo: float, hi: float) -> list[float]:
    """1, 2 and 5 × 10^k from the largest at or below ``lo`` to the smallest at or above ``hi``."""
    vals = [m * 10.0 ** k for k in range(-4, 8) for m in (1, 2, 5)]
    a = max(v for v in vals if v <= lo * (1 + 1e-9))
    b = min(v for v in vals if v >= hi * (1 - 1e-9))
    return [v for v in vals if a <= v <= b]


@pytest.fixture(scope="module")
def sweep_page(browser, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("charts")
    report(chart_sweep(tmp / "sweep"), "-o", tmp / "s.html")
    open_page(browser, tmp / "s.html")
    shot(browser, "test_sweep_charts")
    return {c["title"]: c for c in js(browser, CHARTS_JS)}


@pytest.mark.slow
def test_sweep_log_axes_tick_at_1_2_5_and_the_speedup_chart_draws_1x(browser, sweep_page):
    """By construction the span per step runs 136 µs (1 layer) to 1.09 ms (8): ticks 100 µs … 2 ms; the step
    speedups over eager are 0.5× (slow), 1× and 2× (sdpa): ticks 0.5×, 1×, 2×, and a line at 1×."""
    span = sweep_page["attention span per step (profiled) (log scale)"]
    assert [t[0] for t in span["ticks"]] == pytest.approx(round_125(136, 136 * 8)) == [100, 200, 500, 1000, 2000]
    assert [t[1] for t in span["ticks"]] == ["100 \u00b5s", "200 \u00b5s", "500 \u00b5s", "1 ms", "2 ms"]
    speed = sweep_page["step speedup over eager (profiled step busy) (log scale)"]
    assert [t[0] for t in speed["ticks"]] == pytest.approx(round_125(0.5, 2)) == [0.5, 1, 2]
    assert [t[1] for t in speed["ticks"]] == ["0.5\u00d7", "1\u00d7", "2\u00d7"]
    assert {(s, x): v for s, x, v in speed["points"]}[("slow", 256)] == pytest.approx(0.5)
    ((v, y),) = speed["ref"]
    one = next(t for t in speed["ticks"] if t[0] == 1)
    assert v == 1 and y == pytest.approx(one[2] - 4)  # on the 1× tick (its label sits 4 px below the level)
    assert speed["refText"] == ["1\u00d7 = eager"]
    for title, c in sweep_page.items():  # the linear (share) axes: round steps from 0
        if "log scale" not in title:
            ticks = [t[0] for t in c["ticks"]]
            step = ticks[1] - ticks[0]
            assert ticks[0] == 0 and all(b - a == pytest.approx(step) for a, b in zip(ticks, ticks[1:])), title
            assert step / 10 ** math.floor(math.log10(step)) in (1, 2, 5), title


@pytest.mark.slow
def test_sweep_series_are_colour_blind_safe_and_labelled_at_their_ends(browser, sweep_page):
    """Each series: an Okabe-Ito colour of its own and its own marker and dash, named once at its line's end;
    sdpa and sdpa-cudnn lie on each other by construction, and both names show, apart."""
    impls = {i for i, _ in CHART_RUNS}
    for title, c in sweep_page.items():
        colours = {s: col for s, col, _ in c["lines"]}
        assert colours.keys() == impls and set(colours.values()) <= OKABE_ITO, title
        assert len(set(colours.values())) == len(impls), title
        looks = {s: (dict(c["shapes"])[s], dash) for s, _, dash in c["lines"]}
        assert looks["sdpa"] != looks["sdpa-cudnn"] and len(set(looks.values())) == len(impls), title
        assert sorted(s for s, *_ in c["labels"]) == sorted(impls) and all(s == t for s, t, *_ in c["labels"])
        boxes = sorted((top, bottom) for *_, top, bottom in c["labels"])
        assert all(b[0] >= a[1] - 0.5 for a, b in zip(boxes, boxes[1:])), (title, boxes)  # no two overlap


@pytest.mark.slow
def test_sweep_charts_and_table_share_one_time_base(browser, sweep_page):
    """The span chart and the table both show the span per step (136 µs per layer by construction), and the
    table's busy is per step too (31 µs per layer), each column and chart title saying so."""
    heads = js(browser, "return Array.from(document.querySelectorAll('th')).map(t => t.textContent)")
    assert "busy per step (profiled)" in heads and "span per step (profiled)" in heads
    busy_col, span_col = heads.index("busy per step (profiled)"), heads.index("span per step (profiled)")
    rows = js(browser, "return Array.from(document.querySelectorAll('tr[data-run]')).map(r => [r.dataset.run, "
                       f"+r.cells[{busy_col}].dataset.v, +r.cells[{span_col}].dataset.v])")
    table = {name: (busy, span) for name, busy, span in rows}
    charted = {f"{s}_{x}": v for s, x, v in sweep_page["attention span per step (profiled) (log scale)"]["points"]}
    for (impl, seq), n in CHART_RUNS.items():
        assert table[f"{impl}_{seq}"] == (pytest.approx(31 * n), pytest.approx(136 * n))
        assert charted[f"{impl}_{seq}"] == pytest.approx(table[f"{impl}_{seq}"][1])


@pytest.mark.slow
def test_sweep_names_its_uncharted_runs_and_itself_once(browser, sweep_page):
    """A run not named <impl>_<seq> keeps its table row and is named under the charts; the title names the
    folder once ("sweep: sweep (32 runs)" before)."""
    assert js(browser, "return document.querySelector('h1').textContent") == "tracekit report: sweep (13 runs)"
    note = js(browser, "return Array.from(document.querySelectorAll('.uncharted')).map(e => e.textContent)")
    assert note == ["not charted: odd (not named <impl>_<seq>)"]
    assert js(browser, "return document.querySelectorAll('tr[data-run=\"odd\"]').length") == 1
    assert all(s != "odd" for c in sweep_page.values() for s, *_ in c["points"])


@pytest.mark.slow
def test_a_trace_without_attention_still_gets_its_step_and_the_time_outside_attention(browser, tmp_path):
    """Issue 42: a ResNet-like trace (two steps of a 400 µs conv kernel and a 50 µs relu, 900 µs apart) drew
    "no attention blocks found" and nothing else; now the median step (busy 450, span 900, idle 450 µs) and the
    step outside attention by category, as the terminal prints them."""
    report(no_attention_trace(tmp_path / "resnet.json"), "-o", tmp_path / "r.html")
    open_page(browser, tmp_path / "r.html")
    shot(browser, "test_blockless")
    lead = js(browser, "return document.querySelector('.lead').textContent")
    assert lead == ("per step (median of 2): attention 0.0 \u00b5s \u00b7 busy 450 \u00b5s \u00b7 span 900 \u00b5s"
                    " \u00b7 idle 450 \u00b5s")
    assert "No attention blocks found" in js(browser, "return document.body.textContent")
    rows = js(browser, "return Array.from(document.querySelectorAll('[data-section=\"rest\"] tr[data-rest-by]'))"
                       ".map(r => [r.dataset.restBy, r.cells[1].textContent, +r.cells[2].dataset.v])")
    assert rows == [["category", "other", 400], ["category", "elementwise", 50]]


def test_the_timeline_carries_each_kernel_names_display_names(tmp_path):
    """Issue 42, item 3: the page's timeline gets, per kernel name, its display names (renderers/names.py
    label_ladder), widest first, so that a bar is labelled by the widest that fits it. The softmax kernel of
    builders.attention_block narrows, by the rules, down to its function's name alone (20 characters); a name
    that fits every width (a memset) gets none (the page draws the name itself)."""
    from support.builders import steps_trace

    import tracekit
    from tracekit.renderers.html import report_data
    from tracekit.renderers.names import LABEL_WIDTHS

    trace, _ = steps_trace(tmp_path / "s.pt.trace.json")
    t = report_data(tracekit.analyze(trace), "tracekit")["result"]["timeline"]
    assert len(t["labels"]) == len(t["names"])
    for name, ladder in zip(t["names"], t["labels"]):
        lengths = [len(x) for x in ladder]
        assert lengths == sorted(set(lengths), reverse=True) and name not in ladder
        assert all(n <= LABEL_WIDTHS[0] for n in lengths)
        assert (ladder == []) == (len(name) <= LABEL_WIDTHS[-1]), name
    softmax = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*)"
    assert t["labels"][t["names"].index(softmax)][-1] == "softmax_warp_forward"
    assert t["labels"][t["names"].index("Memset (Device)")] == []


FITS_JS = """const t = document.querySelector('table.wrap-heads'), box = t.parentElement;
    const page = document.documentElement;
    return {inner: window.innerWidth, page: [page.scrollWidth, page.clientWidth],
            box: [box.clientWidth, box.scrollWidth, box.getBoundingClientRect().right],
            heads: Array.from(t.querySelectorAll('th')).map(th => th.textContent)}"""


@pytest.mark.slow
def test_the_sweeps_runs_table_fits_a_1280_px_page(browser, tmp_path):
    """Issue 42: the H200 sweep's runs table was 1,726 px wide on a 1,280 px window (eleven columns with headers
    on one line), so the whole page scrolled sideways. Its headers now wrap, whole, and the table sits in a box of
    its own that scrolls when it must: the H200 sweep's fits without scrolling, and a sweep whose run names are too
    long for any page scrolls inside its box while the page does not."""
    if SWEEP.is_dir():
        report(SWEEP, "-o", tmp_path / "h200.html")
        open_page(browser, tmp_path / "h200.html")
        got = js(browser, FITS_JS)
        assert got["inner"] == 1280
        assert got["page"][0] <= got["page"][1], got  # the page: no sideways scroll
        assert got["box"][1] <= got["box"][0], got  # the table: fits its box
        assert "latency speedup over eager (measured)" in got["heads"]  # headers wrap, never cut
    root = tmp_path / "long"
    for seq in (64, 128):
        run = root / f"{'an-implementation-with-a-long-descriptive-name-' * 4}{seq}"
        run.mkdir(parents=True)
        eager_trace(run / "t.pt.trace.json", layers=1, steps=2)
    report(root, "-o", tmp_path / "long.html")
    open_page(browser, tmp_path / "long.html")
    got = js(browser, FITS_JS)
    assert got["page"][0] <= got["page"][1], got
    assert got["box"][1] > got["box"][0] and got["box"][2] <= got["page"][1], got  # it scrolls inside its box


@pytest.mark.slow
def test_a_trace_without_attention_shows_its_idle_by_cause_and_top_device_events(browser, tmp_path):
    """Issue 42: the blockless page also gives the median step's idle by cause and its top device events. By
    construction (tests/analysis/test_rest.py): idle 450 µs, other 410, launch 20, queued 20; the conv's kernel
    400 µs and the relu's 50 µs, one call each. A page with blocks has no such section."""
    report(no_attention_trace(tmp_path / "resnet.json"), "-o", tmp_path / "r.html")
    open_page(browser, tmp_path / "r.html")
    words = js(browser, "return document.querySelector('[data-idle-words]').textContent")
    head, parts = words.split(": ", 1)[0], words.split("by cause: ")[1].split(" \u00b7 ")
    assert head == "step 1" and words.startswith("step 1: idle 450 \u00b5s by cause: other 410 \u00b5s")
    assert sorted(parts) == ["launch 20.0 \u00b5s", "other 410 \u00b5s", "queued 20.0 \u00b5s"]  # (a tie: any order)
    rows = js(browser, "return Array.from(document.querySelectorAll('tr[data-top-kernel]')).map(r => "
                       "[r.cells[0].title, r.cells[1].textContent, +r.cells[2].dataset.v, +r.cells[3].dataset.v])")
    assert rows == [["implicit_convolve_sgemm<float, 1024, 5, 5, 3, 3, 3, 1, false>", "other", 1, 400],
                    ["vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar>",
                     "elementwise", 1, 50]]
    report(eager_trace(tmp_path / "e.pt.trace.json", layers=1), "-o", tmp_path / "e.html")
    open_page(browser, tmp_path / "e.html")
    assert js(browser, "return document.querySelectorAll('[data-section=\"blockless\"]').length") == 0


@pytest.mark.slow
def test_roofline_table_shows_bounds_as_a_range(browser, tmp_path):
    """Issue 44: a varlen call whose split is not recorded (3 causal sequences, 10 tokens, none over 6) shows
    FLOPs, TFLOP/s and % of roof as low–high, the JSON's own figures, with the reason in the cells' title."""
    from support.builders import serving_attention_trace

    dims = [[10, 2, 64], [10, 2, 64], [10, 2, 64], [4], [4]] + [[]] * 14
    types = ["c10::BFloat16"] * 3 + ["int"] * 2 + [""] * 14
    conc = [""] * 5 + ["6", "6", "0.0", "0.1", "True", "-1", "-1"] + [""] * 7
    path = serving_attention_trace(tmp_path / "v.pt.trace.json", "flash_attn::_flash_attn_varlen_forward", dims,
                                   types, conc)
    [b] = json.loads(run_cli("attribute", path, "--format", "json").stdout)["blocks"]
    e = b["efficiency"]
    report(path, "-o", tmp_path / "v.html")
    open_page(browser, tmp_path / "v.html")
    cells = js(browser, "return Array.from(document.querySelectorAll('tr[data-kind] td')).map(t => "
                        "[t.textContent, t.title || ''])")
    texts = [c[0] for c in cells]
    assert f"{e['tflops_per_s']:.1f}\u2013{e['tflops_per_s_max']:.1f}" in texts
    assert f"{e['roof_pct']:.1f}\u2013{e['roof_pct_max']:.1f}%" in texts
    assert any(c[1].startswith("FLOPs counted as bounds: varlen") for c in cells)
