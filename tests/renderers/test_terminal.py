"""The terminal output fits the terminal, reads in one unit per column, and shortens kernel names to what they do.

Widths are checked on every H200 trace of our own script (sweep and sparse) and on diffs of them; kernel-name
rules on real names read from those traces (and from docs/kernel-names.md's examples), never on the code's output.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from support.builders import TraceBuilder, attention_block
from support.paths import REAL, ROOT
from support.traces import read_events
from tracekit.run.api import analyze
from tracekit.analysis.compare import diff_attributions
from tracekit.renderers import JSONRenderer, TerminalRenderer
from tracekit.renderers.names import NAME_RULES, short_name
from tracekit.vocab import compact_kernel_name
from tracekit.renderers.terminal import Col, fit_table, fmt_in, terminal_width, time_unit

H200 = REAL.parent / "h200"
RUNS = sorted(p for p in [*(H200 / "sweep").glob("*"), *(H200 / "sparse").glob("*")] if p.is_dir())
requires_h200 = pytest.mark.skipif(not RUNS, reason=f"H200 traces not present under {H200}")
WIDTHS = (80, 100, 160)
GROUPINGS = ("kind", "block", "layer", "step")
TIME = re.compile(r"(?<![\w.])-?\+?\d+(?:\.\d+)? (s|ms|µs)(?!\w)")


@lru_cache(maxsize=None)
def _result(run: Path):
    return analyze(run).check()


@lru_cache(maxsize=1)
def _kernel_names() -> tuple[str, ...]:
    """Every device event name in the H200 traces, read from the files themselves."""
    names = set()
    for f in H200.glob("*/*/*.json*"):
        names.update(e["name"] for e in read_events(f, cats=("kernel", "gpu_memcpy", "gpu_memset")))
    return tuple(sorted(names))


def _too_wide(text: str, width: int) -> list[str]:
    return [ln for ln in text.splitlines() if len(ln) > width]


def _columns(text: str) -> list[list[list[str]]]:
    """Each table of the text (a heading, a dashes line, rows up to a blank line) as its columns of cells,
    cut where the dashes line has its gaps."""
    lines = text.splitlines()
    tables = []
    for i, ln in enumerate(lines):
        if i == 0 or not ln or set(ln) - {"-", " "} or "-" not in ln:
            continue
        spans = [(m.start(), m.end()) for m in re.finditer(r"-+", ln)]
        body = []
        for row in lines[i + 1:]:
            if not row.strip() or row.startswith(("launch-bound", "matmul by role", "(timed", "blocks ")):
                break
            body.append(row)
        cols = []
        for n, (a, _) in enumerate(spans):
            b = spans[n + 1][0] if n + 1 < len(spans) else None
            cols.append([row[a:b].strip() for row in body])
        tables.append(cols)
    return tables


def _event_units(text: str) -> list[set[str]]:
    """Units of the leading time of each indented list (top kernels, gone/new kernels): one set per list. The
    kernels-changed list is left out: each of its deltas has its own unit (issue 24), so that a 0.7 µs change
    beside a 5 ms one reads as itself, not as 0.00 ms."""
    out, cur = [], set()
    changed = False
    for ln in text.splitlines():
        changed = (changed or "on both sides that changed" in ln) and bool(ln.strip())
        m = None if changed else re.match(r"^ {2,}([-+]?\d+(?:\.\d+)?) (s|ms|µs)  ", ln)
        if m:
            cur.add(m.group(2))
        elif cur:
            out.append(cur)
            cur = set()
    return out + ([cur] if cur else [])


def _assert_one_unit_per_column(text: str) -> None:
    for table in _columns(text):
        for col in table:
            units = {m.group(1) for cell in col for m in TIME.finditer(cell)}
            assert len(units) <= 1, f"column mixes units {units}: {col}\n{text}"
    for units in _event_units(text):
        assert len(units) == 1, f"a list mixes units {units}\n{text}"


# ---------------------------------------------------------------------------------------------
# Width


@requires_h200
@pytest.mark.parametrize("run", RUNS, ids=[f"{p.parent.name}/{p.name}" for p in RUNS])
def test_every_h200_trace_fits_80_100_and_160_columns_in_every_grouping(run):
    res = _result(run)
    for by in GROUPINGS:
        for width in WIDTHS:
            text = TerminalRenderer(by=by, width=width).render(res)
            assert not _too_wide(text, width), (by, width, _too_wide(text, width))
            _assert_one_unit_per_column(text)
            assert "attention:" in text and ("block kind" in text or by != "kind")


@requires_h200
@pytest.mark.parametrize("pair", [("sweep/eager_4096", "sweep/sdpa_4096"),
                                  ("sweep/eager_512", "sweep/sdpa-flash_512"),
                                  ("sparse/eager_4096", "sparse/sparse_4096"),
                                  ("sweep/linear_2048", "sweep/quantized_2048")])
def test_a_diff_of_two_h200_traces_fits_and_keeps_one_unit_per_column(pair):
    d = diff_attributions(_result(H200 / pair[0]), _result(H200 / pair[1])).check()
    for width in WIDTHS:
        text = TerminalRenderer(width=width).render(d)
        assert not _too_wide(text, width), (width, _too_wide(text, width))
        _assert_one_unit_per_column(text)
        assert "category" in text and "total" in text


@requires_h200
def test_the_issue_example_no_longer_mixes_units_or_overflows():
    """eager_4096 at 100 columns: 8 of 18 lines were wider (widest 161); "0.0 µs" sat beside "31.85 ms"."""
    res = _result(H200 / "sweep" / "eager_4096")
    assert not _too_wide(TerminalRenderer(width=100).render(res), 100)
    text = TerminalRenderer(width=200).render(res)  # wide enough for times in every category cell
    block_table = _columns(text)[0]
    units = [{m.group(1) for cell in col for m in TIME.finditer(cell)} for col in block_table]
    assert all(len(u) <= 1 for u in units) and {"ms"} in units
    # elementwise, beside an empty fused-attention column
    assert any("31.85 ms" in c for col in block_table for c in col)


@requires_h200
def test_narrowing_drops_columns_in_the_documented_order():
    """Wide: everything. 100: times leave the category cells (shares stay). 80: span and idle go before n and total."""
    res = _result(H200 / "sweep" / "eager_4096")
    heads = {}
    for width in (200, 100, 80, 60):
        text = TerminalRenderer(width=width).render(res)
        head = next(ln for ln in text.splitlines() if ln.startswith("block kind"))
        heads[width] = head.split()
    assert {"span", "idle", "softmax"} <= set(heads[200]) and "softmax%" not in heads[200]
    assert "softmax%" in heads[100]
    assert "span" not in heads[80] and "idle" not in heads[80] and "total" in heads[80]
    assert "total" in heads[60] and "n" not in heads[60]


def test_a_long_fused_kernel_block_kind_is_shortened_in_the_table_and_whole_in_json():
    """Graph replays: no attention op on the host, so blocks are named after their fused kernel; kernels that no
    vocab.KERNEL_LABELS entry renames (aiter's name the op themselves) keep their whole, long name as the kind."""
    name = "aiter::fmha_fwd_hd128_bf16_causal_rtne_group_mode_kernel_with_a_long_tail_64x128x64_4x1x1_cga1x1x1_k0"
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])
    b.annotation("ProfilerStep#3", 0, 5000)
    t = 100
    for _ in range(3):
        b.op("graph_replay_step", t, 50)
        b.launch(name, t + 1, 2, t + 1000, 30)
        b.launch("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)",
                 t + 7, 2, t + 1040, 4)  # ends the run: not attention
        t += 200
    res = analyze_dict(b.build())
    assert [blk.kind for blk in res.blocks] == [name] * 3, "expected fused-kernel blocks named after the kernel"
    for width in WIDTHS:
        text = TerminalRenderer(width=width).render(res)
        assert not _too_wide(text, width)
        rows = [ln for ln in text.splitlines() if ln.startswith("aiter") and "µs" in ln]
        assert rows and all("64x128x64" in ln for ln in rows), text  # the tile shape survives the shortening
    assert [blk["kind"] for blk in json.loads(JSONRenderer(by="block").render(res))["blocks"]] == [name] * 3


def analyze_dict(doc: dict):
    """Attribute a built trace (written to a fresh temp folder)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="tk_width_"))
    p = d / "t.json"
    p.write_text(json.dumps(doc))
    return analyze(p).check()


def test_hostile_widths_still_render():
    """A terminal narrower than the minimum renders at the minimum; nothing raises."""
    b = TraceBuilder()
    attention_block(b, 0.0)
    res = analyze_dict(b.build())
    for width in (1, 20, 40):
        text = TerminalRenderer(width=width).render(res)
        assert not _too_wide(text, max(width, 40))


# ---------------------------------------------------------------------------------------------
# Where the width comes from


def test_columns_env_wins_and_a_pipe_gets_100(monkeypatch):
    monkeypatch.setenv("COLUMNS", "123")
    assert terminal_width() == 123
    monkeypatch.setenv("COLUMNS", "junk")
    assert terminal_width() == 100  # pytest captures stdout: not a tty
    monkeypatch.delenv("COLUMNS")
    assert terminal_width() == 100


@pytest.mark.slow
@requires_h200
def test_the_cli_reads_columns_and_names_the_path_as_given():
    run = H200 / "sweep" / "eager_4096"
    for width in (80, 160):
        env = {**os.environ, "COLUMNS": str(width), "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-m", "tracekit", "attribute", str(run)], capture_output=True,
                             text=True, env=env, check=True).stdout
        assert not _too_wide(out, width)
        assert out.splitlines()[0].endswith(f"— {run}")  # the folder as passed, not the hashed file name
    other = H200 / "sweep" / "sdpa_4096"
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "tracekit", "diff", str(run), str(other)], capture_output=True,
                         text=True, env=env, check=True).stdout
    assert not _too_wide(out, 80)
    assert out.splitlines()[0].endswith("— eager_4096 → sdpa_4096")  # the folders as passed, not hashed file names


# ---------------------------------------------------------------------------------------------
# Units


def test_a_column_takes_the_unit_of_its_largest_figure():
    assert time_unit([0.0, 31850.0]) == "ms" and fmt_in(0.0, "ms") == "0.00 ms" and fmt_in(31850.0, "ms") == "31.85 ms"
    assert time_unit([0.0, 3.2e6]) == "s" and time_unit([0.0]) == "µs" and time_unit([-2500.0, 1.0]) == "ms"
    assert fmt_in(-0.001, "ms", sign=True) == "0.00 ms"  # a delta that rounds to zero has no sign
    assert fmt_in(1500.0, "ms", sign=True) == "+1.50 ms" and fmt_in(-1500.0, "ms", sign=True) == "-1.50 ms"


def test_fit_table_never_exceeds_the_width_and_keeps_the_undroppable_columns():
    long = "void " + "x" * 300
    cols = [Col(head="name", cells=[long, "short"], right=False, names=True),
            Col(head="total", cells=["1.00 ms", "2.00 ms"]),
            Col(head="extra", cells=["a" * 50, "b"], drop=1)]
    for width in (20, 40, 80, 200):
        lines = fit_table([Col(head=c.head, cells=list(c.cells), right=c.right, names=c.names, drop=c.drop)
                           for c in cols], width)
        assert all(len(x) <= width for x in lines)
        if width >= 40:
            assert "total" in lines[0] and "2.00 ms" in lines[3]


# ---------------------------------------------------------------------------------------------
# Kernel names


# (real name, width, what the short name must still contain): what the kernel does, per docs/kernel-names.md
KEEPS = [
    ("void at::native::vectorized_elementwise_kernel<8, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, "
     "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, "
     "at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor"
     "<float> >, std::array<char*, 2ul>)", 60, "MulFunctor"),
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<"
     "c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::DivFunctor<c10::BFloat16> > >("
     "at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
     "at::native::binary_internal::DivFunctor<c10::BFloat16> > const&)::{lambda(int)#1}>(int, "
     "at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor)", 40, "DivFunctor"),
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::(anonymous "
     "namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::"
     "{lambda()#12}::operator()() const::{lambda(c10::BFloat16, bool)#1}>(at::TensorIteratorBase&, at::native::"
     "(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{l", 50,
     "masked_fill_kernel"),
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
     "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::"
     "operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda("
     "at::TensorIteratorBase&)::{lambda()#3}", 50, "direct_copy_kernel_cuda"),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>"
     " >(int, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)", 40, "FillFunctor"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<"
     "c10::BFloat16, at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator()(at::TensorIterator&)::"
     "{lambda(float, float)#1}>, unsigned int, c10::BFloat16, 4, 8> >(at::native::ReduceOp<c10::BFloat16", 40,
     "sum_functor"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x64x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_"
     "kernel__5x_cublas", 40, "128x64x8"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0", 60,
     "64x128x64"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t,"
     " Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, "
     "false>(pytorch_flash::Flash_fwd_params)", 60, "64, 128, 128"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
     "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", 45, "fmha_cutlassF_bf16_aligned_64x64"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<c10::BFloat16, float, c10::BFloat16, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue, long, 4>(c10::BFloat16*, c10::BFloat16 const*, long)",
     40, "cunn_SoftMaxForwardReg"),
    ("Memcpy DtoD (Device -> Device)", 40, "Memcpy DtoD (Device -> Device)"),
]


@pytest.mark.parametrize(("name", "width", "keeps"), KEEPS, ids=[k[2] for k in KEEPS])
def test_a_short_kernel_name_keeps_what_the_kernel_does(name, width, keeps):
    s = short_name(name, width)
    assert len(s) <= width and keeps in s, s
    assert name[:width - 1] + "…" != s or keeps in name[:width - 1]  # a plain cut would have lost it


def test_the_issue_example_keeps_mulfunctor_where_a_90_character_cut_lost_it():
    name = KEEPS[0][0]
    assert "MulFunctor" not in name[:90]
    assert "MulFunctor" in short_name(name, 90)


def test_rules_are_named_ordered_data():
    names = [r.name for r in NAME_RULES]
    assert len(set(names)) == len(names) and names[:2] == ["demangle", "void-prefix"]
    assert names.index("functor") < names.index("op") < names.index("nested-templates")
    assert all(r.keeps for r in NAME_RULES)


def test_a_name_that_fits_is_left_alone():
    for n in ("Memset (Device)", "nvjet_sm90_tst_64x64_64x13_1x1_h_bz_NNT", "void kernel<1>(int)"):
        assert short_name(n, 60) == n


@requires_h200
def test_every_h200_kernel_name_fits_every_width_and_keeps_its_functor():
    names = _kernel_names()
    assert len(names) > 30
    for n in names:
        for width in (12, 30, 45, 60, 90):
            assert len(short_name(n, width)) <= width, (n, width)
        functors = re.findall(r"(\w*Functor\w*|\w+_functor)\b", n)
        inner = [f for f in functors if f not in ("AUnaryFunctor", "BUnaryFunctor", "BinaryFunctor")]
        if inner:
            assert inner[-1] in short_name(n, 60), (n, short_name(n, 60))
        shape = re.search(r"\d+x\d+", n)
        if shape and "<" not in n:
            assert shape.group() in short_name(n, 45), (n, short_name(n, 45))


@requires_h200
def test_json_keeps_the_full_kernel_name():
    res = _result(H200 / "sweep" / "eager_4096")
    doc = json.loads(JSONRenderer().render(res))
    # the library stores names through its one normaliser (void, at::native:: and anonymous namespaces dropped)
    full = [compact_kernel_name(n) for n in _kernel_names()
            if "MulFunctor<float> >, std::array" in n and "BFloat16" in n]
    names = {k["name"] for k in doc["top_kernels"]}
    assert full and set(full) <= names and all(len(n) > 200 for n in full)


# -- the rest of the step for a folder of several traces (issue 37, item 7) -----------------------------------------
# support.steps.rest_steps: per step, outside attention matmul = the linear's µs and elementwise 5; Head = the
# linear, Encoder 5; 3 kernels launched and 23.8 µs of top-level host ops; launch-bound (span 250, busy 15 + linear).


def _rest_text(res, by: str = "kind") -> list[str]:
    """The lines from "outside attention" on, up to the next blank line, at a width nothing wraps."""
    lines = TerminalRenderer(by=by, width=400).render(res).splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("outside attention"))
    return lines[start:lines.index("", start)]


def test_a_folder_of_a_few_traces_shows_each_traces_own_median_step(tmp_path):
    """Two traces (linears 20, 60, 40 and 80): each its own median step (step 3, 45 µs; step 1, 85 µs), named by
    its file; never one median over both."""
    from support.steps import rest_steps

    rest_steps(tmp_path / "a.pt.trace.json", [20, 60, 40])
    rest_steps(tmp_path / "b.pt.trace.json", [80])
    heads = [x for x in _rest_text(analyze(tmp_path).check()) if x.startswith("outside attention")]
    assert heads == [
        "outside attention (a.pt.trace.json), step 3 (median of 3 by busy outside attention): matmul 40.0 µs · "
        "elementwise 5.0 µs",
        "outside attention (b.pt.trace.json), step 1 (median of 1 by busy outside attention): matmul 80.0 µs · "
        "elementwise 5.0 µs"]


def test_a_folder_of_many_traces_says_where_each_traces_figures_are(tmp_path):
    """Five traces with steps, past REST_TRACES_SHOWN (4): one line naming --format json, no trace listed."""
    from support.steps import rest_steps

    for k in range(5):
        rest_steps(tmp_path / f"r{k}.pt.trace.json", [20 + k])
    assert _rest_text(analyze(tmp_path).check()) == [
        "outside attention: 5 traces with steps, each with its own median step, too many to list here: see "
        "--format json (each trace's step_rest)"]


def test_a_folder_of_runs_names_each_run(tmp_path):
    """--by run: each run's trace named by its run (its folder), figures its own (linear 20 and 40)."""
    from support.steps import rest_steps

    for name, linear in (("fast_64", 20), ("slow_64", 40)):
        (tmp_path / name).mkdir()
        rest_steps(tmp_path / name / "host.1.pt.trace.json", [linear])
    text = _rest_text(analyze(tmp_path, by="run").check(), by="run")
    assert [x.split(",")[0] for x in text if not x.startswith(" ")] == [
        "outside attention (fast_64)", "outside attention (slow_64)"]
    assert "matmul 20.0 µs" in text[0] and any("matmul 40.0 µs" in x for x in text[1:])


def test_a_step_that_is_not_launch_bound_shows_no_host_side(tmp_path):
    """A 300 µs linear from t + 120 ends past the step's range: span 430, busy 315, idle 115 (not over half): the
    figures outside attention without the host side; with a 20 µs linear the step is launch-bound (78% idle)."""
    from support.steps import rest_steps

    busy = analyze(rest_steps(tmp_path / "busy.pt.trace.json", [300])).check()
    assert _rest_text(busy) == [
        "outside attention, step 1 (median of 1 by busy outside attention): matmul 300 µs · elementwise 5.0 µs",
        "  by top-level module: Head 300 µs · Encoder 5.0 µs"]
    idle = analyze(rest_steps(tmp_path / "idle.pt.trace.json", [40])).check()
    assert _rest_text(idle)[-1] == (
        "  launch-bound step (device idle 78% of its span): 3 kernels launched, top-level host ops 23.8 µs "
        "(aten::linear 10.0 µs · aten::bmm 8.4 µs · aten::add 5.0 µs · aten::_softmax 0.4 µs)")


def test_a_diff_where_a_side_holds_several_traces_points_to_the_json(tmp_path):
    """Two traces a side are two processes, not one step: the diff compares no median step outside attention, says
    so in one line, and the JSON holds each trace's step_rest; one trace a side compares (25.0 → 45.0 µs)."""
    from support.steps import rest_steps

    from tracekit import diff

    for side in ("b", "a"):
        (tmp_path / side).mkdir()
        for k, linear in enumerate((20, 40)):
            rest_steps(tmp_path / side / f"r{k}.pt.trace.json", [linear])
    text = " ".join(TerminalRenderer(width=400).render(diff(tmp_path / "b", tmp_path / "a")).split())
    assert ("outside attention: not compared, a side holds several traces (ranks or runs); see --format json "
            "(traces.before and traces.after, each trace's step_rest)") in text
    one = diff(tmp_path / "b" / "r0.pt.trace.json", tmp_path / "a" / "r1.pt.trace.json")
    text = TerminalRenderer(width=400).render(one)
    assert "outside attention, median step (step 1 of 1 → step 1 of 1): 25.0 µs → 45.0 µs" in text
    assert "not compared" not in text


def test_compiled_regions_outside_blocks_are_shown_and_in_the_json(tmp_path):
    """Issue 38: a CPU trace whose two compiled regions no attention scope surrounds prints them on the
    "attention outside blocks" line (count, host time, names, reason) and the JSON carries them; a trace without
    any leaves the JSON key out."""
    b = TraceBuilder()
    for k in range(2):
        b.op("Torch-Compiled Region: 1/0", 10 + 100 * k, 60)
        b.op("## Call CompiledFxGraph abc ##", 12 + 100 * k, 56)
    res = analyze(b.write(tmp_path / "t.json")).check()
    text = TerminalRenderer(width=200).render_attribution(res)
    [line] = [ln for ln in text.splitlines() if ln.startswith("attention outside blocks:")]
    assert "2 compiled regions, 120 µs host time (Torch-Compiled Region: 1/0 ×2)" in line
    assert "no attention scope" in " ".join(text.split())
    doc = json.loads(JSONRenderer().render_attribution(res))
    assert doc["compiled_outside_blocks"]["regions"] == 2 and doc["compiled_outside_blocks"]["host_us"] == 120
    plain = TraceBuilder()
    plain.op("aten::mm", 0, 5)
    assert "compiled_outside_blocks" not in json.loads(JSONRenderer().render_attribution(
        analyze(plain.write(tmp_path / "p.json"))))


@pytest.mark.parametrize("width", [100, 80, 60, 45])
def test_a_named_kernel_keeps_its_own_name_and_loses_template_arguments_first(width):
    """Issue 42: vLLM ROCm's two paged-attention kernels printed as ``paged…<0, __hip_bfloat16, …`` (both as
    ``paged…<`` at 80): the function name is the identity, its template arguments go first."""
    qkv = ("void paged_attention_ll4mi_QKV_mfma16_kernel<__hip_bfloat16, __hip_bfloat16, "
           "(vllm::Fp8KVCacheDataType)0, 16, 128, 256, 1, false>(int, int, float const*, __hip_bfloat16*)")
    reduce = ("void paged_attention_ll4mi_reduce_kernel<__hip_bfloat16, __hip_bfloat16, 128, 256, 512, 8>"
              "(__hip_bfloat16*, float const*, float const*, __hip_bfloat16 const*, int const*, int)")
    a, b = short_name(qkv, width), short_name(reduce, width)
    assert len(a) <= width and len(b) <= width
    assert a.startswith("paged_attention_ll4mi_QKV_mfma16_kernel")
    assert b.startswith("paged_attention_ll4mi_reduce_kernel")


def test_replayed_kernels_without_a_host_op_are_said_to_be_linked_through_their_graph_launch(tmp_path):
    """Issue 42: a replay without its capture printed "linked to host ops: 100.0%" right under "replayed kernels
    have no host op"; its kernels are linked only through the graph launch call, and the line says so."""
    from support.builders import graph_pair

    replay, capture, _ = graph_pair(tmp_path)
    res = analyze(str(replay)).check()
    assert any("replayed kernels have no host op" in w for t in res.traces for w in t.warnings)
    alone = TerminalRenderer(width=200).render(res)
    assert "mapped to captured ops: 0.0%" in alone
    assert "device time linked to host ops or graph launches: 100.0%" in alone
    mapped = TerminalRenderer(width=200).render(analyze(str(replay), captures=(str(capture),)).check())
    assert "device time linked to host ops: 100.0%" in mapped and "graph launches:" not in mapped


def test_a_trace_without_attention_still_says_where_its_steps_went(tmp_path):
    """Issue 42: a ResNet trace printed "no attention blocks found" and nothing else; the step outside attention
    (by category, and the host side of a launch-bound step) is still shown."""
    from support.builders import no_attention_trace

    res = analyze(str(no_attention_trace(tmp_path / "resnet.json"))).check()
    assert res.blocks == []
    text = TerminalRenderer(width=120).render(res)
    assert "no attention blocks found" in text
    outside = text[text.index("outside attention"):]  # (by construction: the conv kernel 400 µs, the relu's 50)
    assert "other 400 µs · elementwise 50.0 µs" in outside


def test_a_sweeps_roof_heading_names_the_pooling_outside_the_roofs_words(tmp_path):
    """Issue 42: a sweep's pooled label was added to the end of the roof heading's first wrapped line, so at some
    widths it landed inside the roof's own words ("(dense (pooled over 32 runs) peaks)"). At every width the
    heading, unwrapped, names the pooling once, before the roof, and keeps "(dense peaks)" whole."""
    from support.builders import two_fp32_products

    for name in ("eager_64", "fast_64"):
        b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
        two_fp32_products(b)  # recorded shapes: a roofline heading to wrap
        (tmp_path / "sweep" / name).mkdir(parents=True)
        b.write(tmp_path / "sweep" / name / "t.pt.trace.json")
    res = analyze(str(tmp_path / "sweep"), by="run").check()
    for width in range(40, 200, 3):
        lines = TerminalRenderer(width=width, by="run").render(res).splitlines()
        i = next(k for k, x in enumerate(lines) if x.startswith("efficiency"))
        part = [x.strip() for x in lines[i:]]
        heading = " ".join(part[:next(k for k, x in enumerate(part) if x.startswith("block kind"))])
        assert heading.startswith("efficiency of kernels with recorded shapes (pooled over 2 runs) — roof: "), heading
        assert heading.count("pooled over") == 1 and heading.endswith("(dense peaks)"), (width, heading)


def test_a_mangled_kernel_name_is_shown_by_its_qualified_name():
    """Issue 42: graph headers showed ``_ZN7ck_tile6kentry…``; the Itanium mangling's nested source names are the
    kernel's name (7 characters ``ck_tile``, 6 ``kentry``, then template arguments: ``I``)."""
    ck = ("_ZN7ck_tile6kentryILi64ELi1ENS_10FmhaFwdKernelINS_20BlockFmhaPipelineQRKSVSINS_24BlockFmhaPipelineProblem"
          "IDF16bDF16bDF16bffDF16bhDF16bDF16bNS_13TileFmhaShapeEEEEEEEvNT1_5KargsE")
    assert short_name(ck, 40) == "ck_tile::kentry<…>"
    assert short_name("_Z" + "13" + "my_kernel_foo" + "Pf" * 30, 20) == "my_kernel_foo"
    for bad in ("_ZN999abc" + "x" * 60, "_Z" + "y" * 60, "_ZN0" + "z" * 60):  # no name to read: cut as any name
        s = short_name(bad, 30)
        assert len(s) <= 30 and s.startswith("_Z")


def test_the_efficiency_table_splits_each_kind_by_category_and_matmul_role(tmp_path):
    """Issue 42: eager_4096's pooled "39.7 TFLOP/s, memory-bound" hid projection GEMMs near the roof. By construction
    (support.builders.op_table_trace, two steps): the score bmm is 2·8·128·64·128 FLOPs in 10 µs and the context bmm
    the same in 8 µs, per step."""
    from support.builders import op_table_trace

    text = TerminalRenderer(width=120).render(analyze(str(op_table_trace(tmp_path / "t.json"))).check())
    rows = {ln.split()[1]: ln.split()[2:] for ln in text.splitlines() if ln.startswith("  · ")}
    one = 2 * 8 * 128 * 64 * 128
    assert rows["matmul"][:3] == [f"{4 * one / 1e6:.2f}", "M", f"{4 * one / 36e-6 / 1e12:.1f}"]
    assert rows["score"][:3] == [f"{2 * one / 1e6:.2f}", "M", f"{2 * one / 20e-6 / 1e12:.1f}"]
    assert rows["context"][:3] == [f"{2 * one / 1e6:.2f}", "M", f"{2 * one / 16e-6 / 1e12:.1f}"]
    assert "projection" not in rows  # (no projection was recorded: no row)


def test_a_trace_without_attention_says_why_its_device_idled_and_what_ran(tmp_path):
    """Issue 42: the blockless page also gives its median step's idle by cause and its top device events. By
    construction (tests/analysis/test_rest.py): idle 450 µs, launch 20 (4%), queued 20 (4%), other 410 (91%); the
    conv's kernel 400 µs, the relu's 50 µs. A trace with blocks shows neither line."""
    from support.builders import no_attention_trace, steps_trace

    text = TerminalRenderer(width=120).render(analyze(str(no_attention_trace(tmp_path / "resnet.json"))).check())
    assert "step 1: 450 µs idle; idle by cause: launch 4% · sync 0% · queued 4% · other 91%" in text
    top = text[text.index("top device events, step 1:"):].splitlines()[1:3]
    assert top[0].split()[:4] == ["400.0", "µs", "1×", "other"] and "implicit_convolve_sgemm<" in top[0]
    assert top[1].split()[:4] == ["50.0", "µs", "1×", "elementwise"] and "launch_clamp_scalar" in top[1]
    blocks = TerminalRenderer(width=120).render(analyze(str(steps_trace(tmp_path / "s.pt.trace.json")[0])).check())
    assert "top device events, step" not in blocks and "idle; idle by cause" not in blocks


def test_the_efficiency_table_shows_bounds_as_a_range(tmp_path):
    """Issue 44: a varlen call whose split is not recorded shows FLOPs, TFLOP/s and % of roof as low–high (the
    JSON's figures), and the reason under the table."""
    from support.builders import serving_attention_trace

    dims = [[10, 2, 64], [10, 2, 64], [10, 2, 64], [4], [4]] + [[]] * 14
    types = ["c10::BFloat16"] * 3 + ["int"] * 2 + [""] * 14
    conc = [""] * 5 + ["6", "6", "0.0", "0.1", "True", "-1", "-1"] + [""] * 7
    res = analyze(str(serving_attention_trace(tmp_path / "t.json", "flash_attn::_flash_attn_varlen_forward", dims,
                                              types, conc))).check()
    e = json.loads(JSONRenderer().render(res))["blocks"][0]["efficiency"]
    text = TerminalRenderer(width=160).render(res)
    assert f"{e['tflops_per_s']:.1f}–{e['tflops_per_s_max']:.1f}" in text
    assert f"{e['roof_pct']:.1f}–{e['roof_pct_max']:.1f}%" in text
    assert "FLOPs counted as bounds: varlen" in " ".join(text.split())


def test_the_efficiency_table_says_which_calls_have_no_count(tmp_path):
    """Issue 44: vLLM's attention records no lengths: the efficiency line gives that reason, not a figure."""
    from support.builders import serving_attention_trace

    dims = [[9, 8, 64], [9, 2, 64], [9, 2, 64], [9, 8, 64]]
    res = analyze(str(serving_attention_trace(tmp_path / "t.json", "vllm::unified_attention_with_output", dims,
                                              ["c10::BFloat16"] * 4, [""] * 4))).check()
    text = " ".join(TerminalRenderer(width=160).render(res).split())
    assert "efficiency: n/a (vllm::unified_attention records no sequence or context lengths" in text
