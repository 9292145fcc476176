"""The op and kernel tables in every format (``--by op`` / ``--by kernel``; tracekit.renderers.optables, issue 42).

The trace is support.builders.op_table_trace: two ProfilerSteps on an H200, each one block of bmm QK (10 µs),
softmax (5 µs), bmm PV (8 µs), plus an aten::add (1 µs) whose recorded dtype name is hostile; its GEMM kernels
carry a hostile name too. Figures checked are the ones the trace was built with.
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from support.builders import OPS_QK, op_table_trace
from tracekit import analyze
from tracekit.renderers import CSVRenderer, JSONRenderer, MarkdownRenderer, TerminalRenderer
from tracekit.renderers.optables import KERNEL_COLUMNS, NOT_COMPUTED, OP_COLUMNS

HOSTILE_DTYPE = "=1+2|<script>x</script>\n## fake dtype"
HOSTILE_KERNEL = "=HYPERLINK(\"http://x\")|<img src=x onerror=alert(1)>\n## fake kernel `x` [a](b)"


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory):
    """The same trace analysed with the op table and without it."""
    path = op_table_trace(tmp_path_factory.mktemp("optables") / "t.json", kernel_name=HOSTILE_KERNEL,
                          dtype_name=HOSTILE_DTYPE)
    return analyze(path, by="op").check(), analyze(path).check()


def test_terminal_op_table_rows_by_time_per_step(results) -> None:
    """One row per (op, shapes, dtype), largest time first, the per-step time the mean over the 2 steps; the header
    names that basis; every line fits the width."""
    lines = TerminalRenderer(by="op", width=120).render(results[0]).splitlines()
    head = next(i for i, x in enumerate(lines) if x.startswith("op "))
    assert "per step (mean over 2 steps)" in " ".join(lines[:head])
    rows = lines[head + 2: head + 6]
    assert [r.split()[0] for r in rows] == ["bmm", "bmm", "_softmax", "add"]  # (aten:: left out, as the note says)
    assert "[8,128,64],[8,64,128] " in rows[0] and "10.0 µs" in rows[0] and " 2 " in rows[0]
    assert "8.0 µs" in rows[1] and "5.0 µs" in rows[2] and "memory" in rows[0]
    assert all(len(x) <= 120 for x in lines)
    assert not any(x.startswith("## fake") for x in lines) and "\\n## fake dtype" in rows[3]  # the newline escaped


def test_terminal_kernel_table_every_kernel_per_step_and_total(results) -> None:
    lines = TerminalRenderer(by="kernel", width=120).render(results[1]).splitlines()
    head = next(i for i, x in enumerate(lines) if x.startswith("kernel "))
    assert "per step (mean over 2 steps)" in lines[head - 1]
    gemm = lines[head + 2]  # the two GEMM kernels share a (hostile) name: 4 calls, 18 µs a step, 36 in all
    assert " 4 " in gemm and "18.0 µs" in gemm and "36.0 µs" in gemm
    assert not any(x.startswith("top device events") for x in lines)  # the table holds them all
    assert not any(x.startswith("## fake") for x in lines)


def test_markdown_tables_escape_hostile_names(results) -> None:
    """The hostile dtype and kernel names stay inside their cells: no raw HTML, no new line, no extra cell."""
    for by, res in (("op", results[0]), ("kernel", results[1])):
        md = MarkdownRenderer(by=by).render(res)
        assert "<script>" not in md and "<img" not in md
        assert not any(x.startswith("## fake") for x in md.splitlines())
        table = [x for x in md.splitlines() if x.startswith("| ")]
        width = table[0].count(" | ")
        assert all(x.replace("\\|", "").count(" | ") == width for x in table), by
    op_md = MarkdownRenderer(by="op").render(results[0])
    assert "| aten::bmm | \\[\\[8,128,64\\],\\[8,64,128\\]\\] | bf16 | 2 | 10.0 |" in op_md


def test_csv_op_and_kernel_tables_have_fixed_columns_and_no_formulas(results) -> None:
    ops = list(csv.reader(io.StringIO(CSVRenderer(by="op").render(results[0]))))
    assert tuple(ops[0]) == OP_COLUMNS and len(ops) == 1 + 4
    qk = dict(zip(OP_COLUMNS, ops[1]))
    (b, m, k), (_, _, n) = OPS_QK
    assert (qk["op"], qk["calls"], qk["time_us"], qk["time_per_step_us"], qk["steps"], qk["flops"]) == (
        "aten::bmm", "2", "20.000", "10.000", "2", str(2 * 2 * b * m * n * k))
    kernels = list(csv.reader(io.StringIO(CSVRenderer(by="kernel").render(results[1]))))
    assert tuple(kernels[0]) == KERNEL_COLUMNS and kernels[1][2:5] == ["4", "36.000", "18.000"]
    for row in ops[1:] + kernels[1:]:
        assert not any(c[:1] in "=+@" for c in row[:3]), row  # text cells: a leading ' guards a formula
    assert any(c.startswith("'=1+2") for r in ops for c in r) and kernels[1][0].startswith("'=HYPERLINK")


def test_csv_refuses_an_op_table_that_was_not_computed(results) -> None:
    with pytest.raises(ValueError, match="by='op'"):
        CSVRenderer(by="op").render(results[1])


def test_json_has_ops_only_when_computed(results) -> None:
    """The default JSON has no "ops" key (the goldens stay byte for byte); analyze(by="op") adds one row per op."""
    with_ops, plain = (json.loads(JSONRenderer().render(r)) for r in results)
    assert "ops" not in plain and "kernels" not in plain
    assert [o["op"] for o in with_ops["ops"]] == ["aten::bmm", "aten::bmm", "aten::_softmax", "aten::add"]
    assert with_ops["ops"][0]["time_per_step_us"] == 10.0 and with_ops["ops"][0]["steps"] == 2
    assert with_ops["ops"][3]["dtype"] == HOSTILE_DTYPE  # JSON keeps the name as recorded; its encoding escapes it
    assert {k: v for k, v in with_ops.items() if k != "ops"} == plain
    kernels = json.loads(JSONRenderer(by="kernel").render(results[1]))["kernels"]
    assert kernels[0]["name"] == HOSTILE_KERNEL and kernels[0]["count"] == 4 and kernels[0]["per_step_us"] == 18.0


def test_text_views_say_how_to_get_an_op_table_that_was_not_computed(results) -> None:
    assert NOT_COMPUTED in TerminalRenderer(by="op", width=200).render(results[1])
    assert "analyze with by='op'" in MarkdownRenderer(by="op").render(results[1])


def test_a_cpu_only_trace_says_its_ops_are_not_timed(tmp_path) -> None:
    """The op rows time device kernels: on a CPU-only trace the table says none are timed, not "record shapes"."""
    from support.builders import TraceBuilder, with_dims

    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)
    with_dims(b.op("aten::bmm", 1, 8), [[2, 3, 4], [2, 4, 3]], ["float", "float"])
    b.op("aten::_softmax", 10, 5)
    b.op("aten::bmm", 20, 8)
    res = analyze(b.write(tmp_path / "cpu.json"), by="op").check()
    assert res.ops == []
    for text in (TerminalRenderer(by="op", width=200).render(res), MarkdownRenderer(by="op").render(res)):
        assert "none timed" in text and "record_shapes" not in text


def test_op_rows_show_flops_counted_as_bounds_as_a_range(tmp_path) -> None:
    """Issue 44: flash-attn varlen, 3 causal sequences of 10 tokens, none over 6, 2 heads of 128: the most even
    split (4, 3, 3) scores 10 + 6 + 6 = 22 pairs, the most uneven (6, 3, 1) 21 + 6 + 1 = 28; 2·2·(64 + 64) = 512
    FLOPs a pair. JSON and CSV carry the upper bound beside the lower; terminal and markdown show low–high."""
    from support.builders import serving_attention_trace

    dims = [[10, 2, 64], [10, 2, 64], [10, 2, 64], [4], [4]] + [[]] * 14
    types = ["c10::BFloat16"] * 3 + ["int"] * 2 + [""] * 14
    conc = [""] * 5 + ["6", "6", "0.0", "0.1", "True", "-1", "-1"] + [""] * 7
    res = analyze(serving_attention_trace(tmp_path / "t.json", "flash_attn::_flash_attn_varlen_forward", dims,
                                          types, conc, kernel_us=0.01), by="op").check()
    [row] = json.loads(JSONRenderer(by="op").render(res))["ops"]
    assert (row["flops"], row["flops_max"]) == (22 * 512, 28 * 512)
    assert row["roof_pct"] <= row["roof_pct_max"] <= 100
    [c] = list(csv.DictReader(io.StringIO(CSVRenderer(by="op").render(res))))
    assert float(c["flops_max"]) == 28 * 512 and float(c["tflops_per_s_max"]) == row["tflops_per_s_max"]
    rate = f"{row['tflops_per_s']:.1f}–{row['tflops_per_s_max']:.1f}"
    assert rate in MarkdownRenderer(by="op").render(res)
    assert rate in TerminalRenderer(by="op", width=200).render(res)
