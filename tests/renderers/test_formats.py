"""Renderers by format: every format renders both an attribution and a diff, from the result objects alone."""

from __future__ import annotations

import csv
import importlib
import io
import json

import pytest

from support.builders import TraceBuilder, attention_block
from tracekit import analyze
from tracekit.results.diff import EAGER_TO_FUSED_ALLOC
from tracekit.vocab import Basis
from tracekit.analysis.compare import diff_attributions
from tracekit.renderers import (
    DIFF_RENDERERS, RENDERERS, CSVRenderer, JSONRenderer, MarkdownRenderer, Renderer, TerminalRenderer,
    diff_renderer_for, renderer_for, verdict_line,
)
from tracekit.renderers import csvrenderer
from tracekit.results.attribution import CATEGORIES

FLASH = "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4> >(Params)"
MIB = 1 << 20


def _eager(tmp_path, name: str = "eager.json", alloc: int | None = None, block: str = "layer0.attention"):
    b = TraceBuilder()
    attention_block(b, 1000, name=block)  # 31 µs: matmul 20, softmax 5, memory 4, elementwise 2
    if alloc is not None:
        b.memory(1021, alloc)
    return analyze(b.write(tmp_path / name)).check()


def _fused(tmp_path, name: str = "fused.json", alloc: int | None = None):
    b = TraceBuilder()
    b.annotation("layer0.attention", 1000, 60)
    b.op("aten::scaled_dot_product_attention", 1001, 20)
    b.launch(FLASH, 1003, 2, 1100, 12)  # 12 µs, all fused_attention
    if alloc is not None:
        b.memory(1004, alloc)
    return analyze(b.write(tmp_path / name)).check()


@pytest.fixture
def results(tmp_path):
    before, after = _eager(tmp_path, alloc=4 * MIB), _fused(tmp_path, alloc=MIB)
    return before, diff_attributions(before, after).check()


def test_one_registry_one_picker_for_both_commands():
    assert DIFF_RENDERERS is RENDERERS
    assert set(RENDERERS) == {"table", "json", "csv", "markdown"}
    for fmt, cls in RENDERERS.items():
        assert renderer_for(fmt, None) is diff_renderer_for(fmt, None) is cls
        assert issubclass(cls, Renderer)
    assert renderer_for(None, "out.csv") is CSVRenderer and renderer_for(None, "x.md") is MarkdownRenderer
    assert renderer_for(None, None) is TerminalRenderer and renderer_for(None, "x.json") is JSONRenderer
    with pytest.raises(ImportError):  # the parallel diff hierarchy is gone
        importlib.import_module("tracekit.renderers.diff")


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_every_format_renders_an_attribution_and_a_diff_and_streams_the_same_text(results, fmt):
    att, d = results
    r = RENDERERS[fmt](tool="tracekit X")
    for result in (att, d):
        text = r.render(result)
        assert text.endswith("\n") and len(text) > 50
        assert "".join(r.stream(result)) == text
    assert r.render(att) != r.render(d)


def test_json_of_both_results(results):
    att, d = results
    a = json.loads(JSONRenderer(tool="t").render(att))
    assert a["blocks"][0]["categories"] == {"matmul": 20.0, "softmax": 5.0, "fused_attention": 0.0, "memory": 4.0,
                                            "elementwise": 2.0, "other": 0.0}
    j = json.loads(JSONRenderer(tool="t").render(d))
    assert j["before"]["total_us"] == 31 and j["after"]["total_us"] == 12 and j["basis"] == "total"


def test_the_allocation_conclusion_is_in_the_result_and_in_every_format(results, tmp_path):
    """Eager (softmax, 4 MiB allocated) → fused (no softmax, 1 MiB): the score matrices are gone."""
    _, d = results
    assert d.conclusions == [EAGER_TO_FUSED_ALLOC]
    assert json.loads(JSONRenderer().render(d))["conclusions"] == [EAGER_TO_FUSED_ALLOC]
    for cls in (TerminalRenderer, MarkdownRenderer):
        assert EAGER_TO_FUSED_ALLOC in cls().render(d)
    # The other way round more is allocated: no such conclusion, and an empty list in the JSON.
    back = diff_attributions(d.after, d.before).check()
    assert back.conclusions == [] and json.loads(JSONRenderer().render(back))["conclusions"] == []
    assert "no longer allocated" not in TerminalRenderer().render(back)


def test_csv_streams_rows_in_chunks_and_never_joins_them(tmp_path, monkeypatch):
    """A block name of several MiB: each chunk holds about CHUNK_CHARS, their concatenation is the CSV."""
    monkeypatch.setattr(csvrenderer, "CHUNK_CHARS", 1 << 16)
    att = _eager(tmp_path, block="attn_" + "x" * (1 << 15))  # 32 KiB name, on each of six rows
    chunks = list(CSVRenderer().stream(att))
    assert len(chunks) >= 3
    assert all(len(c) < (1 << 16) + (1 << 15) + 200 for c in chunks)
    rows = list(csv.reader(io.StringIO("".join(chunks))))
    assert len(rows) == 1 + len(CATEGORIES) and {r[4] for r in rows[1:]} == {att.blocks[0].name}
    assert float(rows[1 + CATEGORIES.index("matmul")][8]) == 20.0


def test_csv_quoting_matches_the_csv_module(tmp_path):
    """The renderer quotes cells itself (for memory); the csv module is the reference it must match."""
    att = _eager(tmp_path, block='attn "q,k"\nline2\r, end')
    text = CSVRenderer().render(att)
    ref = io.StringIO()
    w = csv.writer(ref, lineterminator="\n")
    w.writerow(csvrenderer.COLUMNS)
    w.writerows(CSVRenderer.attribution_rows(att))
    assert text == ref.getvalue()
    assert list(csv.reader(io.StringIO(text)))[1][4] == att.blocks[0].name


@pytest.mark.slow
def test_csv_of_a_huge_name_holds_no_copy_of_its_rows(tmp_path):
    """A 16 MiB block name (six rows of it): streaming adds well under one name's size of memory."""
    import tracemalloc

    name = "attn_" + "x" * (16 << 20)
    att = _eager(tmp_path, block=name)
    tracemalloc.start()
    try:
        total = sum(len(c) for c in CSVRenderer().stream(att))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert total > 12 * len(name)  # block and kind columns on each of six rows
    assert peak < len(name) // 2, peak


def _backward_trace(tmp_path):
    """One forward SDPA block whose fwdbwd flow reaches a backward op: a forward and a backward block."""
    b = TraceBuilder()
    b.op("aten::scaled_dot_product_attention", 1000, 20)
    b.launch(FLASH, 1001, 2, 1100, 12)
    b.flow(7, True, 1000)
    b.op("autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", 2000, 30)
    b.launch("void pytorch_flash::flash_bwd_dq_dk_dv_loop_kernel<Flash_bwd_kernel_traits>(Params)", 2001, 2, 2100, 25)
    b.flow(7, False, 2000)
    return analyze(b.write(tmp_path / "bwd.json")).check()


def _has_phase_column(text: str) -> bool:
    return any(line.split()[:1] in (["block"], ["paired"]) and " phase " in line for line in text.splitlines())


def test_the_phase_column_shows_only_when_a_row_is_backward(tmp_path):
    fwd = _fused(tmp_path)
    both = _backward_trace(tmp_path)
    assert sorted(b.phase for b in both.blocks) == ["backward", "forward"]
    assert not _has_phase_column(TerminalRenderer().render(fwd))
    assert _has_phase_column(TerminalRenderer().render(both))
    assert not _has_phase_column(TerminalRenderer().render(diff_attributions(fwd, fwd).check()))
    assert _has_phase_column(TerminalRenderer().render(diff_attributions(both, both).check()))


def test_one_time_base_label_everywhere(tmp_path):
    gpu, cpu = _fused(tmp_path), _cpu(tmp_path)
    for res, label in ((gpu, "device busy time"), (cpu, "host self time")):
        term, md = TerminalRenderer().render(res), MarkdownRenderer().render(res)
        assert f"time base: {label}" in term and f"of {label} (" in term
        assert f"time base: {label}" in md and f"of {label})" in md
    d = diff_attributions(gpu, cpu).check()
    assert "time bases differ: before device busy time, after host self time" in " ".join(d.warnings)


def _cpu(tmp_path):
    b = TraceBuilder()
    b.annotation("attn", 0, 100)
    b.op("aten::bmm", 10, 20)
    return analyze(b.write(tmp_path / "cpu.json")).check()


def test_verdict_line_is_importable_from_the_package():
    from tracekit.results.diff import Verdict

    v = Verdict(ok=False, threshold_pct=5.0, before_us=100.0, after_us=120.0, change_pct=20.0,
                basis=Basis.MEDIAN_STEP, within_noise=None)
    assert verdict_line(v) == ("fail-if-slower 5%: REGRESSION: attention time 100 µs → 120 µs (+20.0%, median step) "
                               "is more than 5% slower")


# -- the rest of the step in markdown (issue 37, item 7) ------------------------------------------------------------
# support.steps.rest_steps: per step, outside attention matmul = the linear's µs and elementwise 5; by top-level
# module Head = the linear (+ the mul), Encoder 5; kernels 3 (+1 with the mul), top-level host ops 23.8 µs (+4);
# the step's range 250 µs holds every kernel, busy 15 + linear (+ mul): launch-bound.


def _rest_bullets(text: str) -> list[str]:
    """The markdown list that starts at "- outside attention", to its end."""
    lines = text.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("- outside attention"))
    end = next((i for i in range(start, len(lines)) if not lines[i].lstrip().startswith("- ")), len(lines))
    return lines[start:end]


def test_markdown_shows_each_steps_rest_as_the_terminal_does(tmp_path):
    """Linears 20, 60 and 40: outside busy 25, 65, 45, so the median is step 3 (matmul 40, elementwise 5); its
    span 250, busy 55: idle 195 (78%), launch-bound, so the host side follows. The terminal's lines, as a list."""
    from support.steps import rest_steps

    res = analyze(rest_steps(tmp_path / "t.pt.trace.json", [20, 60, 40])).check()
    want = [
        "- outside attention, step 3 (median of 3 by busy outside attention): matmul 40.0 µs · elementwise 5.0 µs",
        "  - by top-level module: Head 40.0 µs · Encoder 5.0 µs",
        "  - launch-bound step (device idle 78% of its span): 3 kernels launched, top-level host ops 23.8 µs "
        "(aten::linear 10.0 µs · aten::bmm 8.4 µs · aten::add 5.0 µs · aten::_softmax 0.4 µs)"]
    assert _rest_bullets(MarkdownRenderer().render(res)) == want
    terminal = TerminalRenderer(width=400).render(res).splitlines()
    assert [x.replace("- ", "", 1) for x in want] == [x for x in terminal if x.lstrip().startswith(
        ("outside attention", "by top-level module", "launch-bound step"))]


def test_markdown_diff_shows_the_rest_of_the_step(tmp_path):
    """Before: a 20 µs linear. After: a 60 µs linear and an aten::mul (4 µs on the host) launching a 6 µs add:
    outside 25 → 71 µs; matmul 20 → 60, elementwise 5 → 11; Head 20 → 66; kernels 3 → 4; host ops 23.8 → 27.8,
    the mul the only op that changed; both steps launch-bound (busy 35 and 81 of 250 µs)."""
    from support.steps import rest_steps

    before = analyze(rest_steps(tmp_path / "b.pt.trace.json", [20])).check()
    after = analyze(rest_steps(tmp_path / "a.pt.trace.json", [60], mul_us=6)).check()
    text = MarkdownRenderer().render(diff_attributions(before, after).check())
    assert _rest_bullets(text) == [
        "- outside attention, median step (step 1 of 1 → step 1 of 1): 25.0 µs → 71.0 µs",
        "  - by category: matmul 20.0 µs → 60.0 µs · elementwise 5.0 µs → 11.0 µs",
        "  - by top-level module: Head 20.0 µs → 66.0 µs · Encoder 5.0 µs → 5.0 µs",
        "  - host side (launch-bound before and after): kernels launched 3 → 4; top-level host ops 23.8 µs → "
        "27.8 µs",
        "  - host ops that changed most: aten::mul 0.0 µs → 4.0 µs"]


def test_markdown_escapes_a_hostile_name_in_the_rest_of_the_step(tmp_path):
    """A host op named as markup stays text: its brackets and pipes escaped, no raw HTML."""
    from support.steps import rest_steps

    path = rest_steps(tmp_path / "t.pt.trace.json", [20])
    doc = json.loads(path.read_text())
    for ev in doc["traceEvents"]:
        if ev["name"] == "aten::linear":
            ev["name"] = "<img src=x>|[x](y)"
    path.write_text(json.dumps(doc))
    text = MarkdownRenderer().render(analyze(path).check())
    (host,) = [x for x in _rest_bullets(text) if "launch-bound step" in x]
    assert "&lt;img src=x&gt;\\|\\[x\\](y) 10.0 µs" in host and "<img" not in text


# -- the attention layer's row (issue 38, class 4) ---------------------------------------------------------------
# llama_layer: block CoreAttention_0 20 µs; its layer SelfAttn_0 37 µs busy (q 10 + o 7 GEMMs, the 20 µs core).

def _layered(tmp_path):
    from support.builders import llama_layer

    b = TraceBuilder()
    llama_layer(b)
    return analyze(b.write(tmp_path / "layer.json")).check()


def test_the_terminal_shows_a_layer_row_under_its_kind_without_span_or_idle(tmp_path):
    text = TerminalRenderer(width=140).render(_layered(tmp_path))
    rows = [line for line in text.splitlines() if line.startswith(("CoreAttention", "  layer SelfAttn"))]
    assert len(rows) == 2 and rows[1].startswith("  layer SelfAttn")
    assert rows[0].split()[1:4] == ["1", "20.0", "µs"] and rows[1].split()[2:5] == ["1", "37.0", "µs"]
    assert rows[1].split()[5:7] == ["17.0", "µs"]  # no span, no idle share: the matmul cell comes next
    assert "layer SelfAttn: projection 17.0 µs" in text  # its matmul by role


def test_markdown_and_csv_carry_the_layer(tmp_path):
    res = _layered(tmp_path)
    md = MarkdownRenderer().render(res)
    assert "| layer SelfAttn | forward | 1 | 37.0 | 17.0 (45.9%) |" in md
    rows = list(csv.DictReader(io.StringIO(CSVRenderer().render(res))))
    by_cat = {r["category"]: r for r in rows}
    assert {r["layer"] for r in rows} == {"SelfAttn_0"}
    assert by_cat["matmul"]["layer_time_us"] == "17.000" and by_cat["matmul"]["time_us"] == "0.000"
    assert by_cat["fused_attention"]["layer_time_us"] == "20.000"
    assert {r["layer_total_us"] for r in rows} == {"37.000"}


def test_the_page_draws_the_layer_rows_python_summed(tmp_path):
    from tracekit.renderers.html import groups_data

    rows = groups_data(_layered(tmp_path))["kind_layers"]
    assert [(r["label"], r["layer"], r["total_us"]) for r in rows] == [
        ("CoreAttention", False, 20.0), ("layer SelfAttn", True, 37.0)]
    assert rows[1]["idle_share"] is None and rows[1]["matmul_roles"]["projection"] == 17.0


def test_a_kind_whose_blocks_are_partly_their_own_layers_sums_each_blocks_layer_or_itself(tmp_path):
    """Top ⊃ [Head_0 ⊃ (Linear 10 µs, core 20 µs), core 20 µs]: Top holds two cores, so the second core is its own
    layer; the kind's layer row is Head_0 (30 µs) plus that core (20 µs)."""
    from support.builders import projection, sdpa_core
    from tracekit.results.rows import layer_rows

    b = TraceBuilder()
    b.module("Top_0", 0, 100)
    b.module("Head_0", 1, 30)
    projection(b, 2, "Linear_0", 1000, 10)
    sdpa_core(b, 10, "CoreAttention_0", 1011, 20)
    sdpa_core(b, 50, "CoreAttention_1", 1040, 20)
    res = analyze(b.write(tmp_path / "mixed.json")).check()
    (row,) = layer_rows(res, "kind")
    assert row is not None and row.label == "layer Head" and row.blocks == 2
    assert row.total_us == 50.0 and row.categories["matmul"] == 10.0 and row.categories["fused_attention"] == 40.0
