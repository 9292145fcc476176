"""The HTML report draws Python's groups (issue 36, "Rules with several homes").

Why: the page once summed blocks into groups and divided out TFLOP/s, shares and idle in its own script, a
second home for tracekit.results.rows.group_rows that could (and did) disagree with the terminal. Now it draws
the rows Python serialises. These tests read what the page draws from the DOM of a real headless Chromium and
hold it against ``group_rows`` / ``pair_rows`` computed here from the attribution itself, never from the
page's embedded JSON. Figures of a group's efficiency are held against the results layer's own properties
(``Efficiency.roof_pct``, ``.bound``), which the JSON's writer does not use.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from support.builders import TraceBuilder, attention_block
from click.testing import CliRunner

import tracekit
from tracekit.cli import cli
from tracekit.results.attribution import Attribution
from tracekit.results.rows import Row, group_rows, pair_rows
from tracekit.results.sweep import run_rows

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_CPU = ROOT / "sample_traces" / "cpu_eager_256.pt.trace.json.gz"
H200 = ROOT.parent / "shared" / "traces" / "h200" / "sweep"
BF16 = ["c10::BFloat16", "c10::BFloat16"]
H100 = "NVIDIA H100 80GB HBM3"


# ---------------------------------------------------------------------------------------------
# Traces


def shaped_trace(path: Path, device: str = H100, sizes: tuple[int, ...] = (1024, 768), steps: int = 2) -> Path:
    """``steps`` ProfilerSteps of one eager block per size; each block's two aten::bmm ops record bf16 shapes
    [1,n,n]·[1,n,n]. A bf16 bmm's intensity is n/3 FLOP/byte, so on an H100 (ridge 989.4/3.35 ≈ 295) n = 1024
    is compute-bound and n = 768 memory-bound: the kind ``layer*.attention`` holds blocks of both bounds, the
    case where a sum of per-block roofs is not the group's roof."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": device}])
    t = 0
    for s in range(steps):
        b.annotation(f"ProfilerStep#{s + 1}", t, 400 * len(sizes))
        for i, n in enumerate(sizes):
            first = len(b.events)
            attention_block(b, t + 1 + 400 * i, name=f"layer{i}.attention")
            for ev in b.events[first:]:
                if ev["name"] == "aten::bmm":
                    ev["args"]["Input Dims"] = [[1, n, n], [1, n, n]]
                    ev["args"]["Input type"] = BF16
        t += 400 * len(sizes) + 10
    return b.write(path)


def report(*args: object) -> None:
    res = CliRunner().invoke(cli, ["report", *map(str, args)])
    assert res.exit_code == 0, res.output


# ---------------------------------------------------------------------------------------------
# The browser


@pytest.fixture(scope="module")
def browser():
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
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(driver), options=opts)
    try:
        yield d
    finally:
        d.quit()


def open_page(d, path: Path, timeout: float = 30) -> None:
    """Load a report and wait until it has drawn; a console error fails the test."""
    d.get_log("browser")
    d.get(path.resolve().as_uri())
    t0 = time.perf_counter()
    while d.execute_script("return document.body && document.body.getAttribute('data-ready')") != "1":
        assert time.perf_counter() - t0 < timeout, "the page never finished drawing"
        time.sleep(0.02)
    errors = [e for e in d.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert not errors, errors


# One section's bars as drawn: each row's label, busy and idle (data attributes), its total's text, and each
# segment's value and hover; then the role bars under it.
SECTION_JS = """
const sec = document.querySelector('[data-section="' + arguments[0] + '"]');
const rows = box => !box ? [] : Array.from(box.querySelectorAll(':scope > .row')).map(r => ({
  label: r.dataset.label, us: +r.dataset.us, idle: r.dataset.idleUs === undefined ? null : +r.dataset.idleUs,
  tot: r.querySelector('.tot').textContent,
  segs: Object.fromEntries(Array.from(r.querySelectorAll('rect')).map(x => [x.dataset.key, +x.dataset.us])),
  hover: Object.fromEntries(Array.from(r.querySelectorAll('rect, line.idle')).map(
    x => [x.dataset.key, x.querySelector('title').textContent]))}));
return {bars: rows(sec.querySelector(':scope > .bars')), roles: rows(sec.querySelector('.roles .bars'))};
"""

# The roofline table's rows: [kind or "all", cell values (data-v)..., cell texts...].
ROOF_JS = """return Array.from(document.querySelectorAll('tr[data-kind], tr[data-all]')).map(r => ({
  kind: r.dataset.all ? 'all' : r.dataset.kind, v: Array.from(r.cells).map(c => c.dataset.v),
  text: Array.from(r.cells).map(c => c.textContent)}))"""


def suffixed(label: str, phase: str) -> str:
    return label if phase == "forward" else f"{label} ({phase})"


def number(text: str, pattern: str) -> float:
    m = re.search(pattern, text)
    assert m, (pattern, text)
    return float(m.group(1))


# ---------------------------------------------------------------------------------------------
# Checks: what is drawn against the rows computed here


def check_bars(drawn: list[dict], groups: list[Row], device: bool) -> None:
    """Each drawn bar is one group row: its label, busy, idle (only where a block ran on a device), one segment
    per category with time, each hover's share of the bar, and the TFLOP/s note from the group's efficiency."""
    assert [r["label"] for r in drawn] == [suffixed(g.label, g.phase) for g in groups]
    for r, g in zip(drawn, groups):
        assert r["us"] == pytest.approx(g.total_us, abs=1e-3)
        check_segments(r, g)
        check_idle(r, g, device)
        check_note(r["tot"], g.efficiency)


def check_segments(r: dict, g: Row) -> None:
    """One segment per category with time, its hover giving its share of the group's busy time."""
    want = {c: v for c, v in g.categories.items() if v >= 5e-4}
    assert r["segs"] == pytest.approx(want, abs=1e-3)
    for c, v in want.items():
        assert number(r["hover"][c], r"\(([\d.]+)%\)") == pytest.approx(100 * v / g.total_us, abs=0.051)


def counted(e) -> bool:
    """Whether a summed efficiency has FLOPs over a measured time (else the page has no rate to draw)."""
    return e is not None and e.ops > 0 and e.time_ns > 0


def check_note(tot: str, e) -> None:
    """The bar's TFLOP/s: the group's FLOPs over its counted kernels' time; none without counted FLOPs."""
    if counted(e):
        assert number(tot, r"([\d.]+) TFLOP/s") == pytest.approx(e.flops / e.time_ns / 1e3, abs=0.051)
    else:
        assert "TFLOP/s" not in tot


def check_idle(r: dict, g: Row, device: bool) -> None:
    """A device group's idle and its share of the span on hover; none at all on a CPU (nothing could idle)."""
    if not device:
        assert r["idle"] is None and "idle" not in r["tot"]
        return
    assert r["idle"] == pytest.approx(g.idle_us, abs=1e-3)
    if g.idle_us > 0:
        share = number(r["hover"]["idle"], r"\(([\d.]+)% of the span")
        assert share == pytest.approx(100 * g.idle_us / g.span_us, abs=0.051)


def check_roles(drawn: list[dict], groups: list[Row]) -> None:
    """Role bars: one per group with matmul time and a role split, each role's summed time."""
    withroles = [g for g in groups if g.matmul_roles is not None and g.categories["matmul"] > 0]
    assert [r["label"] for r in drawn] == [suffixed(g.label, g.phase) for g in withroles]
    for r, g in zip(drawn, withroles):
        assert g.matmul_roles is not None
        assert r["segs"] == pytest.approx({k: v for k, v in g.matmul_roles.items() if v >= 5e-4}, abs=1e-3)


def check_roof_row(v: list[str], text: list[str], blocks: int, busy_us: float, e) -> None:
    """One roofline row: FLOPs, TFLOP/s, GB/s, % of roof and bound of the summed efficiency ``e``, and the
    share of busy time its kernels cover; "n/a" without counted FLOPs."""
    assert int(v[1]) == blocks
    if not counted(e):
        assert text[2] == "n/a" and v[2] == ""
        return
    assert float(v[2]) == pytest.approx(e.flops, rel=1e-9)
    assert float(v[3]) == pytest.approx(e.flops / e.time_ns / 1e3, rel=1e-3)
    assert float(v[4]) == pytest.approx(e.bytes / e.time_ns, rel=1e-3)
    check_roof_pct(v[5], text[5], e.roof_pct)
    assert text[6] == (e.bound or "n/a")
    assert float(v[7]) == pytest.approx(e.time_ns / 1000 / busy_us, rel=1e-4)


def check_roof_pct(v: str, text: str, roof_pct: float | None) -> None:
    """The % of roof, or n/a where the device's peaks are unknown (never a 0)."""
    if roof_pct is None:
        assert (v, text) == ("", "n/a")
    else:
        assert float(v) == pytest.approx(roof_pct, abs=0.006)


def check_roof(rows: list[dict], result: Attribution, kinds: list[Row]) -> None:
    if result.time_base == "host" or not any(g.efficiency and g.efficiency.ops for g in kinds):
        assert rows == []
        return
    assert [r["kind"] for r in rows] == [suffixed(g.label, g.phase) for g in kinds] + (["all"] if len(kinds) > 1
                                                                                       else [])
    for r, g in zip(rows, kinds):
        check_roof_row(r["v"], r["text"], g.blocks, g.total_us, g.efficiency)
    if len(kinds) > 1:
        t = result.totals
        check_roof_row(rows[-1]["v"], rows[-1]["text"], t.blocks, t.total_us, t.efficiency)


def check_page(d, result: Attribution) -> None:
    device = any(b.launch_bound is not None for b in result.blocks)
    kinds, layers = group_rows(result, "kind"), group_rows(result, "layer")
    for title, groups in (("By block kind", kinds), ("By layer", layers)):
        drawn = d.execute_script(SECTION_JS, title)
        check_bars(drawn["bars"], groups, device)
        check_roles(drawn["roles"], groups)
    check_roof(d.execute_script(ROOF_JS), result, kinds)


# ---------------------------------------------------------------------------------------------
# Tests


@pytest.mark.slow
@pytest.mark.parametrize("device", [H100, "Mystery Accelerator 9000"])
def test_drawn_groups_are_python_group_rows_on_a_hand_built_trace(browser, tmp_path, device):
    """By construction the kind holds compute- and memory-bound blocks: its bound and % of roof are those of
    the summed work (what the terminal shows), not a mix of the blocks'. On a device without known peaks the
    % of roof is n/a, not 0."""
    trace = shaped_trace(tmp_path / "t.pt.trace.json", device=device)
    report(trace, "-o", tmp_path / "r.html")
    result = tracekit.analyze(trace, jobs=1)
    bounds = {b.efficiency.bound for b in result.blocks if b.efficiency is not None}
    assert bounds == ({"compute", "memory"} if device == H100 else {None})
    open_page(browser, tmp_path / "r.html")
    check_page(browser, result)
    (kind,) = browser.execute_script(ROOF_JS)
    assert kind["text"][6] == ("compute" if device == H100 else "n/a")  # never "mixed"
    assert kind["text"][5] != "0.0%"


REAL = [pytest.param(SAMPLE_CPU, id="cpu_eager_256")] + [
    pytest.param(H200 / run, id=run, marks=pytest.mark.skipif(not (H200 / run).is_dir(),
                                                              reason=f"{H200 / run} absent (the shared traces)"))
    for run in ("eager_1024", "sdpa-flash_4096")]


@pytest.mark.slow
@pytest.mark.parametrize("path", REAL)
def test_drawn_groups_are_python_group_rows_on_real_traces(browser, tmp_path, path):
    report(path, "-o", tmp_path / "r.html")
    open_page(browser, tmp_path / "r.html")
    check_page(browser, tracekit.analyze(path, jobs=1))


PAIRS_JS = """
const t = Array.from(document.querySelectorAll('table')).find(
  x => x.querySelector('th').textContent.startsWith('blocks (before'));
const unpaired = Array.from(document.querySelectorAll('tr[data-unpaired]')).map(
  r => [r.dataset.unpaired, r.cells[0].title, +r.cells[1].dataset.v, +r.cells[2].dataset.v]);
return {pairs: !t ? [] : Array.from(t.querySelectorAll('tbody tr')).map(r => ({
  label: r.cells[0].title, v: Array.from(r.cells).map(c => c.dataset.v), text: r.cells[5].textContent})),
  unpaired: unpaired};
"""


def unpaired_by_kind(d) -> dict[tuple[str, str], list]:
    """The blocks without a partner, counted and summed here by (side, kind)."""
    want: dict[tuple[str, str], list] = {}
    for side, blocks in (("before", d.unmatched_before), ("after", d.unmatched_after)):
        for b in blocks:
            acc = want.setdefault((side, suffixed(b.kind, b.phase)), [0, 0.0])
            acc[0] += 1
            acc[1] += b.total_us
    return want


@pytest.mark.slow
def test_drawn_paired_blocks_are_python_pair_rows(browser, tmp_path):
    """Before: two layers of two steps; after: one layer of one step. The paired table is pair_rows; the
    unpaired ones are the blocks without a partner, counted here by kind."""
    before = shaped_trace(tmp_path / "b.pt.trace.json", sizes=(1024, 768), steps=2)
    after = shaped_trace(tmp_path / "a.pt.trace.json", sizes=(512,), steps=1)
    report(before, after, "-o", tmp_path / "d.html")
    d = tracekit.diff_paths(before, after, jobs=1)
    open_page(browser, tmp_path / "d.html")
    drawn = browser.execute_script(PAIRS_JS)
    rows = pair_rows(d)
    assert rows and [r["label"] for r in drawn["pairs"]] == [suffixed(p.label, p.phase) for p in rows]
    for r, p in zip(drawn["pairs"], rows):
        want = [p.n, p.before_us, p.after_us, p.after_us - p.before_us]
        assert [float(x) for x in r["v"][1:5]] == pytest.approx(want, abs=2e-3)
        big = max(p.deltas, key=lambda c: abs(p.deltas[c]))
        assert r["text"].startswith(big) if abs(p.deltas[big]) >= 0.05 else r["text"] == "\u2014"
    want = unpaired_by_kind(d)
    assert want  # by construction the before side has blocks the after side lacks
    got = {(s, label): [n, us] for s, label, n, us in drawn["unpaired"]}
    assert got.keys() == want.keys()
    for k, (n, us) in want.items():
        assert got[k] == [n, pytest.approx(us, abs=1e-3)]


@pytest.mark.slow
def test_a_sweeps_run_draws_its_own_groups_and_profiled_span_per_step(browser, tmp_path):
    """A folder of two runs named <impl>_<seq>: each run's detail draws its own group rows, and the charted
    span per step (no measured.json) is the run row's, the span over its ProfilerSteps."""
    for impl, sizes in (("big", (1024, 768)), ("small", (512, 256))):
        for seq in (128, 256):
            (tmp_path / "sweep" / f"{impl}_{seq}").mkdir(parents=True)
            shaped_trace(tmp_path / "sweep" / f"{impl}_{seq}" / "t.pt.trace.json", sizes=sizes, steps=2)
    report(tmp_path / "sweep", "-o", tmp_path / "s.html", "-j", 1)
    result = tracekit.analyze(tmp_path / "sweep", jobs=1, by="run")
    open_page(browser, tmp_path / "s.html")
    points = browser.execute_script(
        "return Array.from(document.querySelectorAll('[data-chart^=\"attention span per step\"] .pt')).map("
        "c => [c.dataset.series + '_' + c.dataset.x, +c.dataset.v])")
    want = {r.name: r.span_per_step_us for r in run_rows(result)}
    assert len(points) == len(want) == 4
    for name, v in points:
        assert v == pytest.approx(want[name], abs=1e-3)
    for run in result.runs:
        browser.execute_script(f"document.querySelector('tr[data-run=\"{run.name}\"]').click()")
        check_page(browser, run.attribution)
