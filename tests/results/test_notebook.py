"""The notebook API: DataFrames that hold the JSON's sums, short reprs, escaped HTML, tracekit.diff, analyze(by=).

The DataFrames are checked against the JSON renderer's output, parsed back (never against the result objects
the DataFrames are built from), and against hand-built traces whose answer is known by construction.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from html.parser import HTMLParser

import pytest

import tracekit
from support.builders import TraceBuilder, attention_block
from support.paths import REAL, ROOT
from tracekit.renderers import JSONRenderer
from tracekit.results.attribution import CATEGORIES

pd = pytest.importorskip("pandas")

SWEEP = REAL.parent / "h200" / "sweep"
requires_h200 = pytest.mark.skipif(not SWEEP.is_dir(), reason=f"H200 sweep traces not present at {SWEEP}")
HOSTILE_BLOCK = "<img src=x onerror=alert(1)>attention</script>"
HOSTILE_KERNEL = "</script><script>alert('k')</script>_kernel<&\"'>"


def _json(result) -> dict:
    return json.loads(JSONRenderer().render(result))


def _approx(a: float, b: float) -> bool:
    return abs(a - b) <= 0.01 + 1e-6 * abs(b)  # the JSON rounds to ns


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    """Two eager blocks (known: busy 31 µs each, matmul 20, softmax 5, elementwise 2, memory 4) and a hostile one."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100"}])
    b.annotation("ProfilerStep#1", 0, 2000)
    attention_block(b, 10, name="layer0.attention")
    attention_block(b, 400, name="layer1.attention")
    attention_block(b, 800, name=HOSTILE_BLOCK)
    b.op("aten::mul", 850, 5)
    b.launch(HOSTILE_KERNEL, 851, 2, 950, 4)
    path = b.write(tmp_path_factory.mktemp("nb") / "hand.json")
    return path, tracekit.analyze(path).check()


@pytest.fixture(scope="module")
def sweep():
    if not SWEEP.is_dir():
        pytest.skip("no H200 sweep")
    before = tracekit.analyze(SWEEP / "eager_4096").check()
    after = tracekit.analyze(SWEEP / "sdpa_4096").check()
    return before, after, tracekit.diff(before, after).check()


# ---------------------------------------------------------------------------------------------
# DataFrames hold the JSON's sums


def _check_frames_against_json(res) -> None:
    doc = _json(res)
    tot = doc["totals"]
    for by in ("block", "kind", "layer", "step"):
        df = res.to_dataframe(by=by)
        assert _approx(df["total_us"].sum(), tot["total_us"]), by
        for c in CATEGORIES:
            assert _approx(df[f"{c}_us"].sum(), tot["categories"][c]), (by, c)
    blocks = res.to_dataframe(by="block")
    assert len(blocks) == tot["blocks"] == len(doc["blocks"])
    assert list(blocks["block"]) == [b["name"] for b in doc["blocks"]]
    assert [None if x != x else x for x in blocks["layer"]] == [  # (NaN: a missing layer in a float column)
        b["layer"]["name"] if b["layer"] else None for b in doc["blocks"]]
    # by kind: the JSON's blocks summed by (kind, phase), in first-appearance order
    want: dict[tuple[str, str], float] = defaultdict(float)
    for b in doc["blocks"]:
        want[(b["kind"], b["phase"])] += b["total_us"]
    kinds = res.to_dataframe(by="kind")
    got = {(k, p): us for k, p, us in zip(kinds["kind"], kinds["phase"], kinds["total_us"])}
    assert got.keys() == want.keys() and all(_approx(got[k], want[k]) for k in want)
    # kernels: every top kernel of the JSON, with its count and time
    kern = res.to_dataframe(by="kernel").set_index(["kernel", "category"])
    for k in doc["top_kernels"]:
        row = kern.loc[(k["name"], k["category"])]
        assert int(row["count"]) == k["count"] and _approx(float(row["total_us"]), k["total_us"])


def test_hand_built_frames_hold_the_known_answer_and_the_json_sums(hand):
    _, res = hand
    _check_frames_against_json(res)
    layers = res.to_dataframe(by="layer").set_index("layer")
    # by construction: each eager block is busy 31 µs: matmul 20, softmax 5, elementwise 2, memory 4
    for name in ("layer0.attention", "layer1.attention"):
        row = layers.loc[name]
        assert (row["total_us"], row["matmul_us"], row["softmax_us"], row["elementwise_us"], row["memory_us"]) == \
            pytest.approx((31, 20, 5, 2, 4))
        assert row["softmax_share"] == pytest.approx(5 / 31)


@requires_h200
@pytest.mark.parametrize("run", ["eager_4096", "sdpa-flash_512", "linear_2048", "quantized_1024"])
def test_h200_frames_hold_the_json_sums(run):
    _check_frames_against_json(tracekit.analyze(SWEEP / run).check())


@requires_h200
def test_diff_frames_hold_the_diff_json_sums(sweep):
    _, _, d = sweep
    doc = _json(d)
    cats = d.to_dataframe().set_index("category")
    for c in CATEGORIES:
        for k in ("before_us", "after_us", "delta_us"):
            assert _approx(cats.loc[c, k], doc["categories"][c][k]), (c, k)
    assert _approx(cats.loc["total", "delta_us"], doc["attention"]["delta_us"])
    assert _approx(cats.drop("total")["delta_us"].sum(), doc["attention"]["delta_us"])
    pairs = d.to_dataframe(by="pair")
    assert len(pairs) == len(doc["blocks"])
    assert _approx(pairs["delta_us"].sum(), sum(p["delta_us"] for p in doc["blocks"]))
    kinds = d.to_dataframe(by="kind")
    assert _approx(kinds["delta_us"].sum(), pairs["delta_us"].sum())
    kern = d.to_dataframe(by="kernel").set_index("kernel")
    for k in doc["only_before"]:
        assert kern.loc[k["name"], "count_after"] == 0 and _approx(kern.loc[k["name"], "before_us"], k["total_us"])
    for k in doc["only_after"]:
        assert kern.loc[k["name"], "count_before"] == 0 and _approx(kern.loc[k["name"], "after_us"], k["total_us"])


def test_an_unknown_grouping_is_a_clear_error(hand):
    _, res = hand
    with pytest.raises(ValueError, match="choose from kind, block, layer, step, run, kernel"):
        res.to_dataframe(by="bogus")


def test_without_pandas_the_error_says_what_to_install(hand, monkeypatch):
    _, res = hand
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"tracekit\[notebook\]"):
        res.to_dataframe()


# ---------------------------------------------------------------------------------------------
# analyze(by=) and tracekit.diff


def test_analyze_by_sets_the_default_grouping_and_changes_no_figure(hand):
    path, res = hand
    by_layer = tracekit.analyze(path, by="layer").check()
    assert _json(by_layer) == _json(res)
    assert "layer" in by_layer.to_dataframe().columns and len(by_layer.to_dataframe()) == 3
    assert ">layer</th>" in by_layer._repr_html_()
    with pytest.raises(ValueError, match="by='run-ish'"):
        tracekit.analyze(path, by="run-ish")


def test_tracekit_diff_takes_paths_or_results_and_survives_importing_the_comparison(hand, tmp_path):
    path, res = hand
    import tracekit.analysis.compare  # noqa: F401  (importing the comparison binds no name over tracekit.diff)

    assert "diff" in tracekit.__all__ and callable(tracekit.diff)
    d1 = tracekit.diff(path, path).check()
    d2 = tracekit.diff(res, res).check()
    assert d1.delta_us == 0 and d2.delta_us == 0
    assert _json(d1)["categories"] == _json(d2)["categories"]
    with pytest.raises(TypeError, match="two paths or two Attribution"):
        tracekit.diff(res, path)


# ---------------------------------------------------------------------------------------------
# reprs and HTML


@requires_h200
def test_reprs_are_short(sweep):
    before, after, d = sweep
    for obj in (before, after, d):
        text = repr(obj)
        assert len(text) < 400 and text.count("\n") == 0, text
    assert "84.60 ms" in repr(before) and "18.96× faster" in repr(d)


def test_hand_repr_is_short_and_names_its_figures(hand):
    _, res = hand
    text = repr(res)
    assert len(text) < 300 and "\n" not in text and "3 attention blocks" in text


def test_repr_html_escapes_hostile_names(hand):
    _, res = hand
    for page in (res._repr_html_(), tracekit.analyze(hand[0], by="block").check()._repr_html_(),
                 tracekit.diff(res, res)._repr_html_()):
        assert "<img" not in page and "<script" not in page and "</script>" not in page
        assert page.startswith("<div><p") and page.count("<table>") == 1
    block_page = tracekit.analyze(hand[0], by="layer").check()._repr_html_()
    assert "&lt;img src=x onerror=alert(1)&gt;attention&lt;/script&gt;" in block_page
    kernel_page = tracekit.analyze(hand[0], by="kernel").check()._repr_html_()
    assert "&lt;/script&gt;&lt;script&gt;alert(&#x27;k&#x27;)" in kernel_page and "<script" not in kernel_page
    kernels = res.to_dataframe(by="kernel")
    assert HOSTILE_KERNEL.replace("void ", "") in set(kernels["kernel"])  # the frame keeps names as they are


@pytest.mark.slow
def test_import_tracekit_and_the_api_never_load_pandas():
    code = ("import sys, tracekit; tracekit.analyze; tracekit.diff; tracekit.Attribution; "
            "import tracekit.results.notebook, tracekit.analysis.compare; "
            "assert 'pandas' not in sys.modules, 'pandas loaded'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT),
                   "PATH": "/usr/bin:/bin"})


def test_the_block_frame_names_each_blocks_attention_layer(tmp_path):
    """llama_layer: block CoreAttention_0 (20 µs) inside its layer SelfAttn_0 (37 µs busy), by construction."""
    from support.builders import TraceBuilder, llama_layer

    b = TraceBuilder()
    llama_layer(b)
    df = tracekit.analyze(b.write(tmp_path / "layer.json")).check().to_dataframe(by="block")
    assert list(df["layer"]) == ["SelfAttn_0"] and list(df["layer_total_us"]) == [37.0]


def test_dir_of_the_package_shows_its_api_not_its_own_imports():
    """Issue 42: ``dir(tracekit)`` listed ``Any``, ``TYPE_CHECKING`` and ``importlib``."""
    import tracekit

    names = dir(tracekit)
    assert {"analyze", "diff", "whatif", "Attribution", "runs"} <= set(names)
    assert not {"Any", "TYPE_CHECKING", "importlib", "annotations"} & set(names)


def test_the_run_frame_gives_shares_as_fractions_and_missing_figures_as_nan(tmp_path):
    """Issue 42: ``to_dataframe(by="run")`` mixed ``idle_pct`` (0-100) with ``*_share`` (0-1), and held None objects
    where NaN belongs (``latency_ms`` of runs without measured.json was an object column)."""
    for run, t0 in (("eager_256", 10), ("sdpa_256", 10)):
        b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100"}])
        b.annotation("ProfilerStep#1", 0, 2000)
        attention_block(b, t0, name="layer0.attention")
        (tmp_path / run).mkdir()
        b.write(tmp_path / run / "w.pt.trace.json")
    res = tracekit.analyze(tmp_path, by="run").check()
    df = res.to_dataframe(by="run")
    assert "idle_pct" not in df.columns
    assert len(df) == 2 and df["idle_us"].gt(0).all()
    assert list(df["idle_share"]) == pytest.approx(list(df["idle_us"] / df["span_us"]))
    assert df["latency_ms"].dtype == float and df["latency_ms"].isna().all()


# ---------------------------------------------------------------------------------------------
# by="op" (issue 42): the op table, when the result carries it


def test_op_frame_holds_the_json_op_rows_and_a_result_without_them_says_how(tmp_path) -> None:
    """analyze(by="op"): to_dataframe() is the op table, row for row the JSON's "ops" (a bmm's FLOPs 2·b·m·n·k per
    call, 2 calls); a result analysed without by="op" refuses by="op" with a ValueError naming the way."""
    from support.builders import OPS_QK, op_table_trace

    path = op_table_trace(tmp_path / "t.json")
    res = tracekit.analyze(path, by="op").check()
    df = res.to_dataframe()
    ops = _json(res)["ops"]
    assert list(df["op"]) == [o["op"] for o in ops] and list(df["calls"]) == [o["calls"] for o in ops]
    (b, m, k), (_, _, n) = OPS_QK
    qk = df[(df["op"] == "aten::bmm") & (df["shapes"] == str(list(OPS_QK)))]
    assert list(qk["flops"]) == [2 * 2 * b * m * n * k] and list(qk["time_per_step_us"]) == [10.0]
    assert df["tflops_per_s"].dtype == float and df["roof_pct"].dtype == float
    assert df["flops_max"].isna().all()  # issue 44: exact counts have no upper bound of their own
    with pytest.raises(ValueError, match="by='op'"):
        tracekit.analyze(path).to_dataframe(by="op")


class _Page(HTMLParser):
    """A _repr_html_ page read back: the summary paragraph's text, and per table row its cells as (text, style,
    title)."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.summary, self.rows, self.heads, self._in, self._cell = "", [], [], [], None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self._in.append(tag)
        a = dict(attrs)
        if tag == "tr" and "tbody" in self._in:
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = [tag, "", a.get("style") or "", a.get("title")]

    def handle_endtag(self, tag):
        self._in.pop()
        if tag in ("td", "th") and self._cell is not None:
            kind, text, style, title = self._cell
            (self.heads if kind == "th" else self.rows[-1]).append((text, style, title))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data
        elif "p" in self._in:
            self.summary += data


def test_repr_html_puts_its_summary_above_figures_right_aligned_and_names_whole_on_hover(hand):
    """Issue 42 (a tidy notebook): the summary line sat in the table's caption, as wide as the table, so a diff's
    headline squeezed four columns into a tall strip; figures were left-aligned and a missing one blank. Now the
    summary is a paragraph above the table, figures right-aligned (missing: an em dash), and a kernel's cell holds its
    full name as its title, the names of the result itself (escaped on the way in, whole on the way out)."""
    path, res = hand
    page = _Page(tracekit.analyze(path, by="kernel").check()._repr_html_())
    assert "3 attention blocks" in page.summary and "µs" in page.summary
    assert [h[0] for h in page.heads] == ["kernel", "category", "count", "total_us"]
    assert [("text-align:right" in h[1]) for h in page.heads] == [False, False, True, True]
    expected = sorted(res.kernels.items(), key=lambda kv: (-kv[1][1], kv[0]))
    assert [r[0][2] for r in page.rows] == [name for (name, _), _ in expected]  # (the hostile one too, whole)
    assert all("text-align:right" in r[2][1] and "text-align:right" in r[3][1] for r in page.rows)
    assert [float(r[3][0]) for r in page.rows] == [round(us, 1) for _, (_, us) in expected]


def test_repr_html_writes_shares_as_percentages_and_missing_figures_as_dashes(tmp_path):
    """Two eager traces, 1 and 2 blocks per step (builders.eager_trace: a block is 31 µs busy, matmul 20): the diff
    grows by one block, so matmul holds 20/31 = 64.5% of the change, fused attention (none on either side) 0.0% and
    the total 100.0%. Diffing a trace with itself changes nothing: no share exists, every one is a dash."""
    from support.builders import eager_trace

    one, two = eager_trace(tmp_path / "one.json", layers=1), eager_trace(tmp_path / "two.json", layers=2)
    rows = {r[0][0]: r for r in _Page(tracekit.diff(one, two).check()._repr_html_()).rows}
    assert rows["matmul"][4][0] == "64.5%" and rows["total"][4][0] == "100.0%"
    assert rows["fused_attention"][4][0] == "0.0%" and "text-align:right" in rows["fused_attention"][4][1]
    same = _Page(tracekit.diff(one, one).check()._repr_html_()).rows
    assert {r[4][0] for r in same} == {"\u2014"}


def test_repr_html_of_a_trace_without_attention_says_so_in_its_table(tmp_path):
    from support.builders import no_attention_trace

    page = _Page(tracekit.analyze(no_attention_trace(tmp_path / "r.json")).check()._repr_html_())
    assert len(page.rows) == 1 and len(page.heads) == 4 + len(CATEGORIES)  # one row, saying why it is empty
    assert [("text-align:right" in h[1]) for h in page.heads[:4]] == [False, False, True, True]
    assert page.rows[0][0][0].startswith("no attention blocks found") and "scope=" in page.rows[0][0][0]


def test_a_serving_trace_frames_by_stage_and_another_trace_has_no_stage_rows(tmp_path):
    """Issue 44: ``to_dataframe(by="stage")``, one row per stage (support.builders.serving_trace: busy 50, 25, 10
    and 6 µs); a trace without stages gives the columns and no row."""
    from support.builders import no_attention_trace, serving_trace

    df = tracekit.analyze(serving_trace(tmp_path / "serving.json")).to_dataframe(by="stage")
    assert list(df["stage"]) == ["prefill", "decode", "mixed", "outside"]
    assert list(df["busy_us"]) == pytest.approx([50, 25, 10, 6])
    assert list(df["fused_attention_us"]) == pytest.approx([30, 16, 7, 0])
    empty = tracekit.analyze(no_attention_trace(tmp_path / "resnet.json")).to_dataframe(by="stage")
    assert len(empty) == 0 and "busy_us" in empty.columns


def test_op_frame_carries_the_bounds_of_a_range(tmp_path) -> None:
    """Issue 44: a varlen call whose split is not recorded (3 causal sequences, 10 tokens, none over 6): the frame's
    flops_max is the JSON row's upper bound (22 and 28 pairs of 512 FLOPs: the most even and uneven splits)."""
    from support.builders import serving_attention_trace

    dims = [[10, 2, 64], [10, 2, 64], [10, 2, 64], [4], [4]] + [[]] * 14
    types = ["c10::BFloat16"] * 3 + ["int"] * 2 + [""] * 14
    conc = [""] * 5 + ["6", "6", "0.0", "0.1", "True", "-1", "-1"] + [""] * 7
    res = tracekit.analyze(serving_attention_trace(tmp_path / "t.json", "flash_attn::_flash_attn_varlen_forward",
                                                   dims, types, conc), by="op").check()
    df = res.to_dataframe()
    assert list(df["flops"]) == [22 * 512] and list(df["flops_max"]) == [28 * 512]
    assert df["roof_pct_max"][0] == pytest.approx(_json(res)["ops"][0]["roof_pct_max"], abs=1e-3)  # (JSON rounds)
