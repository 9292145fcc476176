"""The report's timeline (tracekit/renderers/timeline.js, issue 25 part 2) in a real headless Chromium.

The canvas is read two ways: its pixels (a step is drawn, in the categories' colours) and the attributes the
script sets on the timeline's wrapper after each drawing (the view's range, how many blocks and kernels lie in
it, where the rows and the time axis are). Expected counts and times come from the hand-built traces of
tests/results/test_timeline.py (known by construction) and from the JSON blocks embedded in the page.
"""

from __future__ import annotations

import json
import time

import pytest
from support.paths import SAMPLES, SWEEP
from support.browser import XSS_END, XSS_IMG, hostile_trace, js, open_page, report

from support.builders import ATTENTION_BLOCK_KERNELS as KERNELS, steps_trace

pytestmark = pytest.mark.slow

WRAP = "document.querySelectorAll('.timeline')"
MATMUL_RGB = [0x4E, 0x79, 0xA7]  # report.js CAT_COL.matmul


def state(d, n: int = 0) -> dict:
    """What timeline ``n`` drew last: its view (µs), counts in view, and its layout."""
    return js(d, f"""const w = {WRAP}[{n}], r = w.dataset;
        return {{start: +r.viewStartUs, end: +r.viewEndUs, blocks: +r.blocksDrawn, kernels: +r.kernelsDrawn,
                 gaps: +r.gapsDrawn, host: +r.hostDrawn, step: r.step, plot: r.plot.split(' ').map(Number),
                 rows: r.rows.split(',').map(x => x.split(' ')).map(x => [x[0], +x[1], +x[2]])}}""")


def page_data(d) -> dict:
    return json.loads(js(d, "return document.getElementById('tk-data').textContent"))["result"]


def key(d, k: str, n: int = 0) -> None:
    js(d, f"{WRAP}[{n}].querySelector('canvas').dispatchEvent(new KeyboardEvent('keydown', {{key: {k!r}}}))")


def mouse(d, kind: str, x: float, y: float, n: int = 0, target: str = "canvas", **extra) -> None:
    """A mouse event at canvas pixel (x, y) of timeline ``n``; ``target`` 'window' for a mouseup."""
    opts = ", ".join(f"{k}: {json.dumps(v)}" for k, v in extra.items())
    js(d, f"""const c = {WRAP}[{n}].querySelector('canvas'), b = c.getBoundingClientRect();
        const ev = new {'WheelEvent' if kind == 'wheel' else 'MouseEvent'}({kind!r}, {{clientX: b.left + {x},
            clientY: b.top + {y}, bubbles: true, cancelable: true{', ' + opts if opts else ''}}});
        ({'window' if target == 'window' else 'c'}).dispatchEvent(ev);""")


def x_of(s: dict, us: float) -> float:
    left, width = s["plot"]
    return left + (us - s["start"]) / (s["end"] - s["start"]) * width


def row_y(s: dict, kind: str) -> float:
    _, y, h = next(r for r in s["rows"] if r[0] == kind)
    return y + h / 2


def plot_colours(d, n: int = 0) -> list[list[int]]:
    """The distinct colours drawn in the plot area (right of the labels), sampled every other pixel."""
    return js(d, f"""const c = {WRAP}[{n}].querySelector('canvas'), x = c.getContext('2d');
        const k = window.devicePixelRatio || 1, left = +{WRAP}[{n}].dataset.plot.split(' ')[0] * k;
        const px = x.getImageData(left, 0, c.width - left, c.height).data, seen = new Set();
        for (let i = 0; i < px.length; i += 8) seen.add(px[i] + ',' + px[i + 1] + ',' + px[i + 2]);
        return Array.from(seen).map(s => s.split(',').map(Number));""")


@pytest.fixture(scope="module")
def steps_page(tmp_path_factory):
    d = tmp_path_factory.mktemp("tlp")
    trace, starts = steps_trace(d / "steps.pt.trace.json")
    report(trace, "-o", d / "r.html")
    return d / "r.html", starts


def test_the_median_step_is_drawn_block_for_block(browser, steps_page):
    """Step 3 (the median by span) holds 2 blocks of 6 kernels each (tests/results/test_timeline.py); the page's own
    JSON blocks of that step are the ones drawn."""
    open_page(browser, steps_page[0])
    s, data = state(browser), page_data(browser)
    assert s["step"] == "3"
    assert s["blocks"] == len([b for b in data["blocks"] if b["step"] == 3]) == 2
    assert (s["kernels"], s["gaps"], s["host"]) == (2 * len(KERNELS), 2 * len(KERNELS), 2)
    assert (s["start"], s["end"]) == pytest.approx((900, 1300), abs=1e-3)  # step 3's window
    assert [r[0] for r in s["rows"]] == ["blocks", "gaps", "host", "kernels"]
    colours = plot_colours(browser)
    assert len(colours) > 8 and MATMUL_RGB in colours


def test_keys_zoom_and_pan_the_view(browser, steps_page):
    open_page(browser, steps_page[0])
    s0 = state(browser)
    key(browser, "w")
    s1 = state(browser)
    width0, width1 = s0["end"] - s0["start"], s1["end"] - s1["start"]
    assert width1 == pytest.approx(width0 / 1.4, rel=1e-3)  # one step in, about the centre
    assert (s1["start"] + s1["end"]) / 2 == pytest.approx((s0["start"] + s0["end"]) / 2, abs=1e-3)
    key(browser, "d")
    s2 = state(browser)
    assert s2["start"] - s1["start"] == pytest.approx(0.2 * width1, rel=1e-3)
    key(browser, "s")
    assert state(browser)["end"] - state(browser)["start"] == pytest.approx(width0, rel=1e-3)
    key(browser, "0")
    assert (state(browser)["start"], state(browser)["end"]) == pytest.approx((s0["start"], s0["end"]), abs=1e-3)


def test_the_mouse_zooms_pans_and_picks_a_block(browser, steps_page):
    open_page(browser, steps_page[0])
    s0 = state(browser)
    at = x_of(s0, 1000)  # ctrl+wheel zooms in about the pointer: 1000 µs stays under it
    mouse(browser, "wheel", at, row_y(s0, "kernels"), deltaY=-200, ctrlKey=True)
    s1 = state(browser)
    assert s1["end"] - s1["start"] < s0["end"] - s0["start"]
    assert x_of(s1, 1000) == pytest.approx(at, abs=0.5)
    mouse(browser, "wheel", at, row_y(s1, "kernels"), deltaY=-200)  # a plain wheel scrolls the page, not the view
    assert state(browser)["start"] == s1["start"]
    y = row_y(s1, "kernels")  # drag 100 px right: the view moves 100 px of time earlier
    mouse(browser, "mousedown", 400, y)
    mouse(browser, "mousemove", 500, y)
    mouse(browser, "mouseup", 500, y, target="window")
    s2 = state(browser)
    assert s1["start"] - s2["start"] == pytest.approx(100 * (s1["end"] - s1["start"]) / s1["plot"][1], rel=1e-3)
    key(browser, "0")
    s = state(browser)
    t0 = steps_page[1][(3, 1)]  # a click on the second block zooms to its 136 µs window, 5% either side
    x, y = x_of(s, t0 + 50), row_y(s, "blocks")
    mouse(browser, "mousedown", x, y)
    mouse(browser, "mouseup", x, y, target="window")
    s3 = state(browser)
    assert (s3["start"], s3["end"]) == pytest.approx((t0 - 6.8, t0 + 136 + 6.8), abs=1e-3)
    assert s3["blocks"] == 1


def test_hover_names_the_kernel_in_full(browser, steps_page):
    open_page(browser, steps_page[0])
    s = state(browser)
    t0 = steps_page[1][(3, 0)]
    mouse(browser, "mousemove", x_of(s, t0 + 116 + 2.5), row_y(s, "kernels"))  # the softmax kernel's middle
    lines = js(browser, f"return Array.from({WRAP}[0].querySelector('.tl-tip').children).map(c => c.textContent)")
    assert lines[0].startswith("void (anonymous namespace)::softmax_warp_forward")
    assert lines[1].startswith("softmax \u00b7 5.0 \u00b5s at +") and "layer0.attention" in lines[2]
    mouse(browser, "mousemove", x_of(s, t0 + 50), row_y(s, "gaps"))  # the 100 µs wait before the first kernel
    tip = js(browser, f"return {WRAP}[0].querySelector('.tl-tip').textContent")
    assert tip.startswith("device idle 100 \u00b5s in layer0.attention")  # fmt: 3 figures from 100 µs


def test_hostile_names_in_the_timeline_stay_text(browser, tmp_path):
    report(hostile_trace(tmp_path / "x.pt.trace.json"), "-o", tmp_path / "x.html")
    open_page(browser, tmp_path / "x.html")
    s = state(browser)
    assert s["blocks"] == 1
    k = page_data(browser)["timeline"]
    i = next(i for i, n in enumerate(k["names"]) if n.startswith("softmax_"))
    j = k["kernels"]["name"].index(i)
    mid = (k["kernels"]["start"][j] + k["kernels"]["end"][j]) / 2
    mouse(browser, "mousemove", x_of(s, mid), row_y(s, "kernels"))
    first = js(browser, f"return {WRAP}[0].querySelector('.tl-tip').firstChild.textContent")
    assert first == f"softmax_{XSS_IMG}{XSS_END}"
    assert js(browser, "return [window.__pwned, window.__pwned2, document.querySelectorAll('img').length]") == [None,
                                                                                                               None, 0]


def test_diff_timelines_share_one_scale_and_move_together(browser, tmp_path):
    before, _ = steps_trace(tmp_path / "b.pt.trace.json", {1: 2, 2: 3, 3: 1})
    after, _ = steps_trace(tmp_path / "a.pt.trace.json", {1: 1, 2: 1, 3: 1})
    report(before, after, "-o", tmp_path / "d.html")
    open_page(browser, tmp_path / "d.html")
    b, a = state(browser, 0), state(browser, 1)
    # before: the median by span is step 1 (400 µs: 200 < 400 < 600); after: three 200 µs steps, the lower
    # middle of equal spans is step 2. One scale: both views as wide as the longer step.
    assert (b["step"], a["step"], b["blocks"], a["blocks"]) == ("1", "2", 2, 1)
    assert b["end"] - b["start"] == pytest.approx(400, abs=1e-3) == a["end"] - a["start"]
    key(browser, "w", 0)
    b2, a2 = state(browser, 0), state(browser, 1)
    assert b2["end"] - b2["start"] == pytest.approx(400 / 1.4, rel=1e-3) == a2["end"] - a2["start"]
    assert b2["start"] - b["start"] == pytest.approx(a2["start"] - a["start"], abs=1e-3)


@pytest.mark.real
@pytest.mark.skipif(not SWEEP.is_dir(), reason=f"the H200 sweep is not at {SWEEP}")
def test_every_run_of_the_h200_sweep_draws_its_step(browser, tmp_path):
    """A click on each of the 32 runs draws that run's timeline: its blocks of the chosen step (the run's JSON
    blocks of that step) and every kernel of them, quickly enough to click through."""
    report(SWEEP, "-o", tmp_path / "s.html")
    open_page(browser, tmp_path / "s.html", timeout=60)
    runs = {r["name"]: r for r in page_data(browser)["runs"]}
    slowest = 0.0
    for name, run in runs.items():
        t0 = time.perf_counter()
        js(browser, f"document.querySelector('tr[data-run={json.dumps(name)}]').click()")
        slowest = max(slowest, time.perf_counter() - t0)
        s = state(browser)
        step = run["timeline"]["step"]
        mine = [b for b in run["blocks"] if b["step"] == step]
        assert s["blocks"] == len(mine) > 0, name
        assert s["kernels"] == sum(b["kernels"] for b in mine), name
        assert len(plot_colours(browser)) > 4, name
    assert slowest < 5, f"a run's report took {slowest:.1f} s to draw"


def test_a_step_without_blocks_says_which_step_is_drawn(browser, tmp_path):
    """A diff --step 4 where only the after side has a step 4: the before timeline draws its median (step 3) and
    says step 4 had no blocks, the after one draws step 4 (a --step no timeline holds is refused: test_cli);
    --step 2 draws step 2 (3 blocks) as asked."""
    trace, _ = steps_trace(tmp_path / "s.pt.trace.json")
    longer, _ = steps_trace(tmp_path / "l.pt.trace.json", {1: 1, 2: 3, 3: 2, 4: 1})
    report(trace, longer, "-o", tmp_path / "r4.html", "--step", 4)
    open_page(browser, tmp_path / "r4.html")
    note = js(browser, f"return {WRAP}[0].querySelector('.sub').textContent")
    assert state(browser)["step"] == "3" and "step 4 has no attention blocks" in note
    assert state(browser, 1)["step"] == "4"
    report(trace, "-o", tmp_path / "r2.html", "--step", 2)
    open_page(browser, tmp_path / "r2.html")
    note = js(browser, f"return {WRAP}[0].querySelector('.sub').textContent")
    assert (state(browser)["step"], state(browser)["blocks"]) == ("2", 3) and "step 2 (as asked" in note


def test_a_cpu_trace_draws_its_ops(browser, tmp_path):
    """The shipped CPU sample: under each host thread an "ops" row holds the blocks' ops, all of them in view."""
    sample = SAMPLES / "cpu_eager_256.pt.trace.json.gz"
    report(sample, "-o", tmp_path / "cpu.html")
    open_page(browser, tmp_path / "cpu.html")
    s, t = state(browser), page_data(browser)["timeline"]
    assert [r[0] for r in s["rows"]] == ["blocks", "host", "kernels"]
    assert s["kernels"] == len(t["kernels"]["start"]) > 20 and t["kernel_unit"] == "op"
    assert len(plot_colours(browser)) > 8


def test_overlapping_blocks_take_at_most_six_rows(browser, tmp_path):
    """Eight blocks at once, each from its own host thread: they stack in rows of their own, at most six (the
    last row holds the rest), and every one is still drawn."""
    from support.builders import TraceBuilder, attention_block

    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    for i in range(8):
        n = len(b.events)
        attention_block(b, 1 + 3 * i, name=f"layer{i}.attention")
        for ev in b.events[n:]:
            if ev.get("cat") in ("user_annotation", "cpu_op", "cuda_runtime"):
                ev["tid"] = 100 + i
    report(b.write(tmp_path / "o.pt.trace.json"), "-o", tmp_path / "o.html")
    open_page(browser, tmp_path / "o.html")
    s = state(browser)
    assert len(page_data(browser)["timeline"]["blocks"]) == s["blocks"] == 8
    assert [r[0] for r in s["rows"]].count("blocks") == 6


SOFTMAX_NAME = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*)"


def test_kernel_bars_are_labelled_by_their_display_names_and_named_in_full_on_hover(browser, steps_page):
    """Issue 42, item 3: kernel bars were labelled with the start of the C++ name (``void (anonym…``). Zoomed
    until the softmax kernel's bar is a few hundred pixels wide (too narrow for its 92-character name), the label
    drawn on it is one of its display names (renderers/names.py), which keep the function's name; hover still
    gives the full name."""
    open_page(browser, steps_page[0])
    js(browser, """window.__texts = [];
        const fill = CanvasRenderingContext2D.prototype.fillText;
        CanvasRenderingContext2D.prototype.fillText = function (t) {
            window.__texts.push(t); return fill.apply(this, arguments); };""")
    labels = page_data(browser)["timeline"]
    ladder = labels["labels"][labels["names"].index(SOFTMAX_NAME)]
    t0 = steps_page[1][(3, 0)]
    mid = t0 + 116 + 2.5  # the softmax kernel's middle (builders.attention_block)
    s = state(browser)
    while x_of(s, t0 + 121) - x_of(s, t0 + 116) < 200:  # ctrl+wheel about the kernel until its bar is 200 px
        mouse(browser, "wheel", x_of(s, mid), row_y(s, "kernels"), deltaY=-300, ctrlKey=True)
        s = state(browser)
    drawn = js(browser, "return window.__texts.slice(-40)")  # (the last drawing: a few dozen labels)
    softmax = [t for t in drawn if "softmax_warp_forward" in t]
    assert softmax and softmax[-1] in ladder, (drawn, ladder)
    assert not [t for t in drawn if t.startswith("void ")]  # no kernel label is the start of its C++ name
    mouse(browser, "mousemove", x_of(s, mid), row_y(s, "kernels"))
    tip = js(browser, f"return {WRAP}[0].querySelector('.tl-tip').firstChild.textContent")
    assert tip == SOFTMAX_NAME
