"""tracekit diff: hand-built pairs whose answers are known by construction, the shipped CPU sample
pair, and the real pairs in ../shared/traces/real (expected numbers summed from the raw JSON or
from each side's own attribution, never copied from diff's output). Every result is check()ed."""

from __future__ import annotations

import csv
import io
import json
import re
from functools import lru_cache, partial

import pytest

from support.builders import TraceBuilder
from support.paths import GOLDEN, REAL, SAMPLES, requires_real
from support.cli import diff_json, run_cli
from support.pairs import FLASH_C, GEMM_C, H100, SOFTMAX_C, busy, diff, eager, fused, two_layers, write
from support.traces import read_events
from tracekit import analyze, load_trace
from tracekit.analysis.attribute import op_self_times
from tracekit.analysis.compare import BASIS_MEDIAN, BASIS_TOTAL, attention_sizes
from tracekit.run.api import diff_paths, side_labels
from tracekit.analysis.gate import gate, parse_percent
from tracekit.errors import InconclusiveError
from tracekit.renderers import JSONRenderer, TerminalRenderer, verdict_line
from tracekit.results.attribution import CATEGORIES, InvariantError




@pytest.fixture
def eager_fused(tmp_path):
    """Before: eager, 2 steps × 2 blocks, gemm 10 then 12 µs, softmax 5. After: flash 12 then 14 µs.

    Per step before: 2·(2·10+5) = 50 and 2·(2·12+5) = 58 µs; after: 24 and 28 µs.
    """
    before = write(tmp_path / "eager.json", two_layers(eager, gemm=[10, 12]))
    after = write(tmp_path / "fused.json", two_layers(fused, flash=[12, 14]))
    return before, after


# ---------------------------------------------------------------------------------------------
# Headline, categories, noise


def test_eager_to_fused_median_step_and_categories(eager_fused):
    r = diff(*eager_fused)
    assert r.basis == BASIS_MEDIAN
    # Two steps: the median step is the mean of both. Before (50 + 58) / 2 = 54, after (24 + 28) / 2 = 26.
    assert r.before_figures.total_us == pytest.approx(54)
    assert r.after_figures.total_us == pytest.approx(26)
    assert r.delta_us == pytest.approx(-28)
    assert r.speedup == pytest.approx(54 / 26)
    c = r.categories
    assert (c["matmul"].before_us, c["matmul"].after_us) == pytest.approx((44, 0))  # (40 + 48) / 2
    assert (c["softmax"].before_us, c["softmax"].after_us) == pytest.approx((10, 0))
    assert (c["fused_attention"].before_us, c["fused_attention"].after_us) == pytest.approx((0, 26))
    assert sum(d.delta_us for d in c.values()) == pytest.approx(r.delta_us)
    assert c["matmul"].share_of_delta == pytest.approx(-44 / -28)
    assert c["fused_attention"].ratio is None and c["matmul"].ratio == 0
    # Whole-trace totals stay available next to the headline.
    assert r.before.totals.total_us == pytest.approx(108) and r.after.totals.total_us == pytest.approx(52)


def test_noise_ranges_and_beyond_noise(tmp_path):
    # Three steps a side (two say nothing about noise: issue 24): before gemm 10, 12, 11 → 50, 58, 54 µs (median
    # 54, range 8); after flash 12, 14, 13 → 24, 28, 26 (median 26, range 4). |Δ| 28 > (8 + 4) / 2.
    r = diff(write(tmp_path / "eager.json", two_layers(eager, gemm=[10, 12, 11])),
              write(tmp_path / "fused.json", two_layers(fused, flash=[12, 14, 13])))
    n = r.noise
    assert (n.before.min_us, n.before.max_us, n.after.min_us, n.after.max_us) == pytest.approx((50, 58, 24, 28))
    assert n.before.steps == n.after.steps == [5, 6, 7]
    assert n.combined_spread_us == pytest.approx((8 + 4) / 2)
    assert n.within_noise is False
    assert n.categories["softmax"].within_noise is False  # 10 → 0 with no spread on either side


def test_two_steps_show_their_ranges_but_the_noise_is_unknown(eager_fused):
    # Issue 24: the range of two steps says nothing about a third; the spreads stay, the verdicts are None.
    r = diff(*eager_fused)
    n = r.noise
    assert (n.before.min_us, n.before.max_us, n.after.min_us, n.after.max_us) == pytest.approx((50, 58, 24, 28))
    assert n.within_noise is None and all(c.within_noise is None for c in n.categories.values())
    assert r.noise_note.startswith("noise unknown: before 2 steps, after 2 steps")


def _single(kind, values, key):
    return [[partial(kind, **{key: v})] for v in values]


def test_change_within_noise_leaves_the_gate_undecided(tmp_path):
    # Before steps: 2·10+5 = 25, 2·14+5 = 33 and 29 µs (median 29, range 8); after: 29, 31, 30 (median 30, range 2).
    before = write(tmp_path / "a.json", _single(busy(eager), [10, 14, 12], "gemm"))
    after = write(tmp_path / "b.json", _single(busy(eager), [12, 13, 12.5], "gemm"))
    r = diff(before, after)
    assert not r.launch_bound  # the gate compares busy time
    assert r.delta_us == pytest.approx(1)
    assert r.noise.combined_spread_us == pytest.approx(5)
    assert r.noise.within_noise is True
    # issue 37: at 1 % (threshold 29.29) and 5 % (30.45) the spread of 5 µs could carry 30 µs across: no verdict
    for pct in (1, 5):
        with pytest.raises(InconclusiveError, match="is within the step-to-step spread"):
            gate(r, pct)
    v = gate(r, 25)  # 30 + 5 <= 29 · 1.25 = 36.25
    assert v.ok is True and v.change_pct == pytest.approx(100 / 29)
    assert "within noise" in verdict_line(v) and "ok" in verdict_line(v)


def test_odd_step_count_uses_the_median_step_itself(tmp_path):
    # Step totals 25 (gemm 10), 33 (gemm 14), 27 (gemm 11): the median step is the third, matmul 22 + softmax 5.
    before = write(tmp_path / "a.json", _single(eager, [10, 14, 11], "gemm"))
    after = write(tmp_path / "b.json", _single(fused, [12, 12, 12], "flash"))
    r = diff(before, after)
    assert r.before_figures.total_us == pytest.approx(27)
    assert r.before_figures.categories["matmul"] == pytest.approx(22)
    assert r.before_figures.categories["softmax"] == pytest.approx(5)
    assert [s for s, _ in r.steps_before] == [5, 6, 7]


def test_one_step_means_totals_and_no_noise_estimate(tmp_path):
    before = write(tmp_path / "a.json", [[eager]])
    after = write(tmp_path / "b.json", [[fused]])
    r = diff(before, after)
    assert r.basis == BASIS_TOTAL and r.noise is None
    assert "no noise estimate possible" in r.noise_note and "one step" in r.noise_note
    assert r.before_figures.total_us == pytest.approx(25) and r.after_figures.total_us == pytest.approx(12)
    text = TerminalRenderer().render(r)
    assert "no noise estimate possible" in text and "attention (total)" in text


def test_two_steps_against_one_compares_medians_without_noise(tmp_path):
    before = write(tmp_path / "a.json", _single(eager, [10, 14], "gemm"))  # 25 and 33 µs: median 29
    after = write(tmp_path / "b.json", [[fused]])  # one step of 12 µs
    r = diff(before, after)
    assert r.basis == BASIS_MEDIAN and r.noise is None
    assert (r.before_figures.total_us, r.after_figures.total_us) == pytest.approx((29, 12))
    assert r.noise_note == "no noise estimate possible: after has one step"


def test_no_steps_at_all_says_so(tmp_path):
    b1, b2 = TraceBuilder(), TraceBuilder()
    eager(b1, 1000)
    fused(b2, 1000)
    r = diff(b1.write(tmp_path / "a.json"), b2.write(tmp_path / "b.json"))
    assert r.basis == BASIS_TOTAL and r.noise is None
    assert "no ProfilerStep" in r.noise_note


def test_one_side_with_steps_other_without_warns_about_totals(tmp_path):
    b2 = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    fused(b2, 1000)
    r = diff(write(tmp_path / "a.json", [[eager], [eager]]), b2.write(tmp_path / "b.json"))
    assert r.basis == BASIS_TOTAL
    assert any("2 steps" in w and "no ProfilerStep" in w for w in r.warnings)


# ---------------------------------------------------------------------------------------------
# Blocks and kernels


def test_blocks_pair_by_kind_and_rank_and_leftovers_are_listed(tmp_path):
    before = write(tmp_path / "a.json", [[partial(eager, name="layer0.attention"),
                                          partial(eager, name="layer1.attention")]])
    after = write(tmp_path / "b.json", [[partial(fused, name="cross_attn"), partial(fused, name="layer0.attention"),
                                         partial(fused, name="layer1.attention"),
                                         partial(fused, name="layer2.attention")]])
    r = diff(before, after)
    assert [(p.before.name, p.after.name, p.paired_by) for p in r.pairs] == [
        ("layer0.attention", "layer0.attention", "kind"), ("layer1.attention", "layer1.attention", "kind")]
    assert r.unmatched_before == []
    assert [b.name for b in r.unmatched_after] == ["cross_attn", "layer2.attention"]
    assert [p.delta_us for p in r.pairs] == pytest.approx([12 - 25, 12 - 25])


def test_steps_pair_by_position_not_number(tmp_path):
    before = write(tmp_path / "a.json", [[eager], [eager]], first_step=2)
    after = write(tmp_path / "b.json", [[fused], [fused]], first_step=40)
    r = diff(before, after)
    assert [(p.before.step, p.after.step) for p in r.pairs] == [(2, 40), (3, 41)]


def test_kernels_only_on_one_side_with_counts_and_times(eager_fused):
    r = diff(*eager_fused)
    assert r.kernel_unit == "kernel"
    # 2 steps × 2 blocks × 2 GEMMs: 4 of 10 µs, 4 of 12 µs; softmax 4 × 5 µs; flash 2 × 12 + 2 × 14 µs.
    assert [(k.name, k.category, k.count, k.total_us) for k in r.only_before] == [
        (GEMM_C, "matmul", 8, pytest.approx(88)), (SOFTMAX_C, "softmax", 4, pytest.approx(20))]
    assert [(k.name, k.category, k.count, k.total_us) for k in r.only_after] == [
        (FLASH_C, "fused_attention", 4, pytest.approx(52))]


def test_fused_kernel_blocks_pair_by_position_when_their_names_differ(tmp_path):
    """Graph replays: no attention op on the host, so blocks are named after their kernels (aiter vs sage)."""
    add = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"
    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int> >(int)"

    def build(path, sage):
        b = TraceBuilder(deviceProperties=[{"id": 0, "name": "AMD Instinct MI300X"}])
        b.annotation("ProfilerStep#3", 0, 5000)
        t = 100
        for _ in range(2):
            b.op("xdit::denoise_step", t, 50)
            if sage:  # quantise 5 µs, zero-fill 2 µs (joins the run), attend 20 µs
                b.launch("sage_quant_kernel", t + 1, 2, t + 1000, 5)
                b.launch(fill, t + 3, 1, t + 1006, 2)
                b.launch("sage_fwd", t + 4, 2, t + 1009, 20)
            else:
                b.launch("aiter::fmha_fwd_hd128_bf16_rtz", t + 1, 2, t + 1000, 30)
            b.launch(add, t + 7, 2, t + 1040, 4)  # ends the run: not attention
            t += 200
        return b.write(path)

    r = diff(build(tmp_path / "aiter.json", False), build(tmp_path / "sage.json", True))
    assert [(p.before.name, p.after.name, p.paired_by) for p in r.pairs] == [
        ("aiter::fmha_fwd_hd128_bf16_rtz", "sage_fwd", "fused-kernel")] * 2
    assert r.unmatched_before == r.unmatched_after == []
    assert r.categories["fused_attention"].delta_us == pytest.approx(2 * 25 - 2 * 30)
    assert r.categories["memory"].delta_us == pytest.approx(2 * 2)
    assert [(k.name, k.count, k.total_us) for k in r.only_before] == [("aiter::fmha_fwd_hd128_bf16_rtz", 2, 60)]
    assert [(k.name, k.count, k.total_us) for k in r.only_after] == [
        ("sage_fwd", 2, 40), ("sage_quant_kernel", 2, 10),
        ("vectorized_elementwise_kernel<4, FillFunctor<int> >(int)", 2, 4)]


def test_scope_applies_to_both_sides(tmp_path):
    before = write(tmp_path / "a.json", [[partial(eager, name="mixer0")]])
    after = write(tmp_path / "b.json", [[partial(fused, name="mixer0")]])
    default = diff(before, after)  # found as an inferred pattern and a fused op: different kinds
    assert default.pairs == [] and len(default.unmatched_before) == len(default.unmatched_after) == 1
    scoped = diff(before, after, scope=r"^mixer")
    assert [(p.before.found_by, p.after.found_by) for p in scoped.pairs] == [("annotation", "annotation")]


def test_memory_no_longer_allocated(tmp_path):
    mib = 1 << 20
    before = write(tmp_path / "a.json", [[partial(eager, alloc=4 * mib)]])
    after = write(tmp_path / "b.json", [[partial(fused, alloc=1 * mib)]])
    r = diff(before, after)
    assert (r.alloc.before_bytes, r.alloc.after_bytes, r.alloc.delta_bytes) == (4 * mib, mib, -3 * mib)
    assert (r.pairs[0].before.alloc_bytes, r.pairs[0].after.alloc_bytes) == (4 * mib, mib)
    assert "score matrices are no longer allocated" in TerminalRenderer().render(r)
    # One side without memory events: no figure at all (silence is not zero bytes).
    r2 = diff(before, write(tmp_path / "c.json", [[fused]]))
    assert r2.alloc is None


# ---------------------------------------------------------------------------------------------
# Header warnings


def test_device_and_time_base_warnings(tmp_path):
    before = write(tmp_path / "a.json", [[eager]])
    same = diff(before, write(tmp_path / "b.json", [[fused]]))
    assert not any("devices differ" in w for w in same.warnings)
    other = diff(before, write(tmp_path / "c.json", [[fused]], device="AMD Instinct MI300X"))
    assert any("devices differ" in w and H100 in w and "MI300X" in w for w in other.warnings)
    cpu = TraceBuilder()
    cpu.annotation("layer0.attention", 0, 50)
    cpu.op("aten::_scaled_dot_product_flash_attention_for_cpu", 1, 40)
    r = diff(before, cpu.write(tmp_path / "cpu.json"))
    assert any("time bases differ" in w for w in r.warnings)
    assert r.kernel_unit == "mixed"


def test_shapes_compare_as_attention_sizes(tmp_path):
    before = write(tmp_path / "a.json", [[partial(eager, n=256)]])
    same = diff(before, write(tmp_path / "b.json", [[partial(fused, n=256)]]))  # eager softmax vs SDPA q, k
    assert not any("sizes differ" in w or "shapes differ" in w for w in same.warnings)
    longer = diff(before, write(tmp_path / "c.json", [[partial(fused, n=512)]]))
    assert any("attention sizes differ" in w and "(2, 256, 256)" in w and "(2, 512, 512)" in w for w in longer.warnings)


def test_attention_sizes_from_each_op_layout():
    assert attention_sizes([("aten::softmax", [[1, 2, 256, 256], [], []])]) == {(2, 256, 256)}
    sdpa = ("aten::scaled_dot_product_attention", [[4, 8, 128, 64], [4, 8, 512, 64], [4, 8, 512, 64]])
    assert attention_sizes([sdpa]) == {(32, 128, 512)}
    assert attention_sizes([("aten::_flash_attention_forward", [[1, 141, 8, 64], [1, 141, 8, 64], [1, 141, 8, 64]])]) \
        == {(8, 141, 141)}
    assert attention_sizes([("aten::bmm", [[2, 256, 32], [2, 32, 256]]), ("garbage", []), ("aten::softmax", "oops")]) \
        == set()


# ---------------------------------------------------------------------------------------------
# Invariants and small pure pieces


def test_check_catches_a_dropped_block_and_a_broken_sum(eager_fused):
    r = diff(*eager_fused)
    r.pairs.pop()
    with pytest.raises(InvariantError, match="paired \\+ unmatched"):
        r.check()
    r = diff(*eager_fused)
    r.after_figures.categories["other"] += 1.0
    with pytest.raises(InvariantError):
        r.check()


@pytest.mark.parametrize("text,value", [("5%", 5.0), ("5", 5.0), ("2.5%", 2.5), ("0", 0.0)])
def test_parse_percent(text, value):
    assert parse_percent(text) == value


@pytest.mark.parametrize("text", ["abc", "-5%", "", "%", "nan", "inf"])
def test_parse_percent_rejects(text):
    with pytest.raises(ValueError):
        parse_percent(text)


def test_side_labels_keep_enough_path_to_tell_sides_apart():
    assert side_labels("r/xdit_flux_aiter/rank_0.json.gz", "r/xdit_flux_aiter_sage/rank_0.json.gz") == (
        "xdit_flux_aiter/rank_0.json.gz", "xdit_flux_aiter_sage/rank_0.json.gz")
    assert side_labels("a/eager.json", "a/sdpa.json") == ("eager.json", "sdpa.json")


# ---------------------------------------------------------------------------------------------
# CLI: formats, gate, errors



def test_json_matches_the_golden_contract(eager_fused):
    out = diff_json(run_cli("diff", *eager_fused, "--format", "json", check=True))
    assert out == json.loads((GOLDEN / "diff.json").read_text())
    # The contract keys, and the sums, checked here by construction too.
    for key in ("schema_version", "before", "after", "categories", "blocks", "only_before", "only_after", "noise",
                "warnings", "basis"):
        assert key in out
    assert out["before"]["total_us"] == 108 and out["after"]["total_us"] == 52
    claim = {k: out["attention"].pop(k) for k in ("claims_speedup", "no_claim")}  # issue 9: test_attribute_wallclock
    assert claim["claims_speedup"] is False and claim["no_claim"].startswith("launch-bound")  # hand-built: launch-bound
    assert out["attention"] == {"before_us": 54.0, "after_us": 26.0, "delta_us": -28.0, "delta_pct": -51.85,
                               "speedup": 2.0769, "within_noise": None}  # two steps a side: noise unknown
    assert set(out["categories"]) == set(CATEGORIES)
    assert sum(c["delta_us"] for c in out["categories"].values()) == pytest.approx(out["attention"]["delta_us"])
    assert len(out["blocks"]) == 4 and out["unmatched_before"] == out["unmatched_after"] == []


def test_csv_has_a_stable_header_and_sections(eager_fused):
    rows = list(csv.reader(io.StringIO(run_cli("diff", *eager_fused, "--format", "csv", check=True).stdout)))
    assert rows[0] == (GOLDEN / "diff_header.csv").read_text().strip().split(",")
    sections = [r[0] for r in rows[1:]]
    assert sections.count("category") == len(CATEGORIES) + 1
    assert sections.count("block") == 4 * len(CATEGORIES)
    assert sections.count("kernel_only_before") == 2 and sections.count("kernel_only_after") == 1
    total = next(r for r in rows[1:] if r[0] == "category" and r[1] == "total")
    assert [float(x) for x in total[2:5]] == [54, 26, -28]
    blocks_matmul = [float(r[4]) for r in rows[1:] if r[0] == "block" and r[1] == "matmul"]
    assert blocks_matmul == [-20, -20, -24, -24]


@pytest.mark.slow  # CLI subprocesses: CI runs it, the quick core run skips it
def test_table_markdown_and_output_file(eager_fused, tmp_path):
    table = run_cli("diff", *eager_fused, check=True).stdout
    assert "eager.json → fused.json" in table and "54.0 µs → 26.0 µs" in table and "noise unknown" in table
    assert "layer*.attention" in table and "softmax_warp_forward" in table
    assert "pytorch_flash::flash_fwd_kernel" in table
    md = run_cli("diff", *eager_fused, "--format", "markdown", check=True).stdout
    assert "| category | before µs |" in md and "| softmax | 10.0 | 0.0 | -10.0 |" in md
    out = tmp_path / "d.csv"
    proc = run_cli("diff", *eager_fused, "-o", out, check=True)
    assert proc.stdout == "" and "wrote" in proc.stderr and out.read_text().startswith("section,")


@pytest.mark.slow  # CLI subprocesses: CI runs it, the quick core run skips it
def test_gate_passes_on_improvement_and_equal_fails_on_regression(tmp_path):
    # eager_fused on a device kept busy, so that neither side is launch-bound and the gate compares busy time
    # Three steps (issue 37: the gate wants a step-to-step spread): before 2·(2·10 + 5) = 50 µs each step (range 0),
    # after 2·12, 2·14, 2·13 = 24, 28, 26 (median 26, range 4): spread (0 + 4) / 2 = 2 µs.
    before = write(tmp_path / "eager.json", two_layers(busy(eager), gemm=[10, 10, 10]))
    after = write(tmp_path / "fused.json", two_layers(busy(fused), flash=[12, 14, 13]))
    ok = run_cli("diff", before, after, "--fail-if-slower", "5%")
    assert ok.returncode == 0 and "fail-if-slower 5%: ok" in ok.stderr  # 26 + 2 <= 52.5
    same = run_cli("diff", before, before, "--fail-if-slower", "0")
    assert same.returncode == 0 and "(+0.0%, median step)" in same.stderr  # 50 + 0 <= 50
    bad = run_cli("diff", after, before, "--fail-if-slower", "5")
    assert bad.returncode == 4 and "REGRESSION" in bad.stderr and "(+92.3%, median step)" in bad.stderr  # 48 > 27.3
    assert bad.stdout  # the report is still written
    assert run_cli("diff", after, before, "--fail-if-slower", "110%").returncode == 0  # 52 <= 54.6


@pytest.mark.parametrize("value", ["abc", "-5%", ""])
def test_bad_percentage_is_a_usage_error(eager_fused, value):
    proc = run_cli("diff", *eager_fused, "--fail-if-slower", value)
    assert proc.returncode == 2 and "--fail-if-slower" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("missing", ["before", "after"])
def test_missing_file_on_either_side(eager_fused, tmp_path, missing):
    gone = tmp_path / "nope.json"
    args = (gone, eager_fused[1]) if missing == "before" else (eager_fused[0], gone)
    proc = run_cli("diff", *args)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"Error: {gone}: no such file or directory"]


@pytest.mark.parametrize("side", [0, 1])
def test_output_never_overwrites_an_input(eager_fused, side):
    target = eager_fused[side]
    before = target.read_bytes()
    proc = run_cli("diff", *eager_fused, "-o", target)
    assert proc.returncode == 2 and "refusing to overwrite an input trace" in proc.stderr
    assert target.read_bytes() == before


def test_damaged_input_exits_3(eager_fused, tmp_path):
    raw = eager_fused[0].read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: int(len(raw) * 0.9)])
    proc = run_cli("diff", cut, eager_fused[1])
    assert proc.returncode == 3 and "Warning: cut.json: trace is truncated" in proc.stderr


def test_help_lists_exit_codes():
    out = run_cli("diff", "--help", check=True).stdout
    assert "--fail-if-slower" in out and "4 regression" in out


# ---------------------------------------------------------------------------------------------
# The shipped CPU sample pair (scripts/make_samples.py): eager → SDPA, host time, 2 steps

EAGER = SAMPLES / "cpu_eager_256.pt.trace.json.gz"
SDPA = SAMPLES / "cpu_sdpa_256.pt.trace.json.gz"


@lru_cache(maxsize=None)
def sample_diff():
    return diff_paths(EAGER, SDPA).check()


def _per_step(path) -> dict[int, dict[str, float]]:
    """Per-step category sums from the side's own attribution (not from the diff)."""
    out: dict[int, dict[str, float]] = {}
    for b in analyze(path).check().blocks:
        d = out.setdefault(b.step, dict.fromkeys(CATEGORIES, 0.0))
        for c in CATEGORIES:
            d[c] += b.categories[c]
    return out


def test_sample_pair_softmax_and_matmul_leave_fused_attention_arrives():
    r = sample_diff()
    assert r.basis == BASIS_MEDIAN and r.kernel_unit == "op" and r.warnings == []
    assert [(p.before.name, p.after.name, p.before.step) for p in r.pairs] == [
        ("layer0.attention", "layer0.attention", 2), ("layer1.attention", "layer1.attention", 2),
        ("layer0.attention", "layer0.attention", 3), ("layer1.attention", "layer1.attention", 3)]
    c = r.categories
    assert c["softmax"].before_us > 0 and c["softmax"].after_us == 0
    assert c["fused_attention"].before_us == 0 and c["fused_attention"].after_us > 0
    assert c["matmul"].after_us < 0.5 * c["matmul"].before_us  # the bmm pair is gone; projections stay
    # Two steps each: the headline is the mean of the two steps, per category, from each side's attribution.
    for fig, path in ((r.before_figures, EAGER), (r.after_figures, SDPA)):
        steps = _per_step(path)
        assert sorted(steps) == [2, 3]
        for k in CATEGORIES:
            assert fig.categories[k] == pytest.approx((steps[2][k] + steps[3][k]) / 2)


def test_sample_pair_ops_gone_and_new_match_torch_self_times():
    r = sample_diff()
    gone = {k.name: k for k in r.only_before}
    new = {k.name: k for k in r.only_after}
    # These ops occur only inside the attention blocks, so the whole-trace self times (the
    # torch key_averages quantity, cross-checked in test_torch_crosscheck) must equal the diff's.
    eager_ops, sdpa_ops = op_self_times(load_trace(EAGER)), op_self_times(load_trace(SDPA))
    for name, count in (("aten::_softmax", 4), ("aten::bmm", 8)):
        assert gone[name].count == eager_ops[name][0] == count
        assert gone[name].total_us == pytest.approx(eager_ops[name][1])
    name = "aten::_scaled_dot_product_flash_attention_for_cpu"
    assert new[name].count == sdpa_ops[name][0] == 4
    assert new[name].total_us == pytest.approx(sdpa_ops[name][1])
    assert new[name].category == "fused_attention"


def test_sample_pair_noise_from_per_step_totals():
    r = sample_diff()
    for spread, path in ((r.noise.before, EAGER), (r.noise.after, SDPA)):
        totals = [sum(v.values()) for _, v in sorted(_per_step(path).items())]
        assert spread.totals_us == pytest.approx(totals)
    assert r.noise.within_noise is None  # two steps a side: the spread of two steps decides nothing (issue 24)


def test_sample_pair_gate_both_directions():
    """Two profiled steps a side: no step-to-step spread, so busy time decides nothing (issue 37); latencies with
    their spreads do, both ways."""
    for pair in ((EAGER, SDPA), (SDPA, EAGER)):
        undecided = run_cli("diff", *pair, "--fail-if-slower", "5%")
        assert undecided.returncode == 5 and "no step-to-step spread (before 2 steps, after 2 steps" in undecided.stderr
    ok = run_cli("diff", EAGER, SDPA, "--fail-if-slower", "5%", "--latency-before", "10±0.5", "--latency-after",
                 "2±0.1")
    assert ok.returncode == 0 and "ok" in ok.stderr
    bad = run_cli("diff", SDPA, EAGER, "--fail-if-slower", "5%", "--latency-before", "2±0.1", "--latency-after",
                  "10±0.5")
    assert bad.returncode == 4 and "REGRESSION" in bad.stderr


# ---------------------------------------------------------------------------------------------
# Real pairs (../shared/traces/real)

FLUX_A = "tracelens/inference/xdit_flux_aiter/profile_trace_rank_0.json.gz"
FLUX_S = "tracelens/inference/xdit_flux_aiter_sage/profile_trace_rank_0.json.gz"


@lru_cache(maxsize=None)
def real_diff(before: str, after: str):
    return diff_paths(REAL / before, REAL / after).check()


@lru_cache(maxsize=None)
def real_attr(rel: str):
    return analyze(REAL / rel).check()


@lru_cache(maxsize=2)
def linked_kernels(rel: str) -> dict[str, tuple[int, float]]:
    """name -> (count, µs) of kernels launched inside the window, straight from the raw JSON."""
    evs = read_events(REAL / rel)
    runtime = {e["args"].get("correlation") for e in evs if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    out: dict[str, list] = {}
    for e in evs:
        if e.get("cat") == "kernel" and e["args"].get("correlation") in runtime:
            v = out.setdefault(e["name"], [0, 0.0])
            v[0] += 1
            v[1] += e["dur"]
    return {k: (n, us) for k, (n, us) in out.items()}


def _raw(rel: str, pattern: str) -> tuple[int, float]:
    rx = re.compile(pattern)
    hits = [v for k, v in linked_kernels(rel).items() if rx.search(k)]
    return sum(n for n, _ in hits), sum(us for _, us in hits)


@requires_real
@pytest.mark.real
@pytest.mark.slow  # two 3.7 MB traces (~4 s)
def test_flux_aiter_to_sage():
    r = real_diff(FLUX_A, FLUX_S)
    assert r.basis == BASIS_TOTAL and r.noise is None and "one step" in r.noise_note
    assert r.warnings == []  # same GPU, same attention sizes
    assert r.unmatched_before == r.unmatched_after == []
    by = {}
    for p in r.pairs:
        by.setdefault(p.paired_by, []).append(p)
    assert len(by["fused-kernel"]) == 228 and len(by["kind"]) == 24 + 12 + 1
    assert {(p.before.name, p.after.name) for p in by["fused-kernel"]} == {("aiter::fmha_fwd_hd128_bf16_rtz",
                                                                           "sage_fwd")}
    # Category deltas from each side's own attribution.
    a, s = real_attr(FLUX_A), real_attr(FLUX_S)
    for c in CATEGORIES:
        assert r.categories[c].delta_us == pytest.approx(s.totals.categories[c] - a.totals.categories[c])
    assert r.categories["fused_attention"].delta_us != 0
    # Kernels on one side only, with counts and times summed from the raw JSON.
    gone = {k.name: k for k in r.only_before}
    new = {k.name: k for k in r.only_after}
    assert set(gone) == {"aiter::fmha_fwd_hd128_bf16_rtz"}
    assert (gone["aiter::fmha_fwd_hd128_bf16_rtz"].count, gone["aiter::fmha_fwd_hd128_bf16_rtz"].total_us) == \
        pytest.approx(_raw(FLUX_A, r"^aiter::fmha_fwd_hd128_bf16_rtz$"))
    for name in ("sage_fwd", "sage_quant_kernel"):
        assert new[name].count == 228
        assert (new[name].count, new[name].total_us) == pytest.approx(_raw(FLUX_S, rf"^{name}$"))


@requires_real
@pytest.mark.real
@pytest.mark.slow  # multi-MB traces
def test_flux_full_kernel_table_agrees_with_top_kernels():
    r = real_diff(FLUX_A, FLUX_S)
    for att, table in ((r.before, r.kernels_before), (r.after, r.kernels_after)):
        full = {(k.name, k.category): (k.count, round(k.total_us, 3)) for k in table}
        for name, cat, count, us in att.top_kernels:
            assert full[(name, cat)] == (count, pytest.approx(us))
        assert sum(k.count for k in table) == sum(b.kernels for b in att.blocks)


@requires_real
@pytest.mark.real
@pytest.mark.slow  # multi-MB traces
def test_hta_pair_without_attention_still_diffs():
    r = real_diff("hta/trace_diff/control/control.json.gz", "hta/trace_diff/test/test.json.gz")
    assert r.pairs == [] and r.unmatched_before == r.unmatched_after == []
    assert r.delta_us == 0 and r.only_before == r.only_after == []
    assert any("no attention blocks on either side" in w for w in r.warnings)
    assert any("devices differ" in w and "A100" in w and "V100" in w for w in r.warnings)
    assert "no attention time on either side" in TerminalRenderer().render(r)
    out = json.loads(JSONRenderer().render(r))
    assert out["blocks"] == [] and out["attention"]["delta_us"] == 0


@requires_real
@pytest.mark.real
@pytest.mark.parametrize("model,module,count", [
    ("gaunernst_bert-small-uncased__1016001", "BertSdpaSelfAttention", 4),
    ("Qwen_Qwen1.5-0.5B-Chat__1016005", "Qwen2Attention", 24),
    pytest.param("google_owlv2-large-patch14-ensemble__1016001", "Owlv2Attention", 180, marks=pytest.mark.slow),
])
def test_h100_vs_mi300_warns_about_the_device(model, module, count):
    h, m = f"tracelens/h100/{model}.json.gz", f"tracelens/mi300/{model}.json.gz"
    r = real_diff(h, m)
    assert any("devices differ" in w and "H100" in w and "MI300X" in w for w in r.warnings)
    assert not any("sizes differ" in w or "shapes differ" in w for w in r.warnings)  # same model, same shapes
    assert len(r.pairs) == count and {p.before.kind for p in r.pairs} == {module}
    assert r.unmatched_before == r.unmatched_after == []
    assert r.delta_us == pytest.approx(real_attr(m).totals.total_us - real_attr(h).totals.total_us)


@requires_real
@pytest.mark.real
def test_real_pair_through_the_cli():
    proc = run_cli("diff", REAL / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
                   REAL / "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz", "--format", "json")
    assert proc.returncode == 0
    assert "Warning: devices differ" in proc.stderr
    out = json.loads(proc.stdout)
    assert any("devices differ" in w for w in out["warnings"])
    assert out["before_source"] == "h100/gaunernst_bert-small-uncased__1016001.json.gz"
