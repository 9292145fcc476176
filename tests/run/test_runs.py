"""Folders of runs (tracekit.run.runs) and `tracekit attribute DIR --by run`: a row per run, named after its folder.

Each hand-built run has a known number of eager blocks (31 µs busy each, tests/support/builders.py), so every
figure per run is known without running tracekit.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.builders import eager_trace

from tracekit.run.api import analyze
from tracekit.cli import cli
from tracekit.run.api import analyze_runs
from tracekit.run.runs import find_runs, sweep_key

LAYERS = {"eager_64": 1, "eager_128": 2, "flash_64": 3, "nested/deep_1": 1, "loose": 2}


@pytest.fixture
def sweep(tmp_path) -> Path:
    """Four run folders (one nested two deep) and a trace file lying in the root (the run ``loose``)."""
    root = tmp_path / "sweep"
    for name, layers in LAYERS.items():
        if name == "loose":
            root.mkdir(parents=True, exist_ok=True)
            eager_trace(root / "loose.pt.trace.json", layers=layers, steps=1)
            continue
        (root / name).mkdir(parents=True)
        eager_trace(root / name / "host_1.123.pt.trace.json", layers=layers, steps=1)
    return root


def invoke(*args: object) -> str:
    res = CliRunner().invoke(cli, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res.stdout


def test_runs_are_named_after_folders_or_files(sweep):
    _, runs = find_runs(sweep)
    assert sorted(r.name for r in runs) == sorted(LAYERS)
    assert [r.name for r in runs][:2] == ["eager_64", "eager_128"]  # numbers sort as numbers
    assert all(len(r.files) == 1 for r in runs)
    assert sweep_key("sdpa-flash_4096") == ("sdpa-flash", 4096) and sweep_key("loose") is None


def test_each_run_is_its_own_analysis(sweep):
    result = analyze_runs(sweep).check()
    by_name = {r.name: r.attribution for r in result.runs}
    assert sorted(by_name) == sorted(LAYERS)
    for name, layers in LAYERS.items():
        att = by_name[name]
        assert att.totals.blocks == layers and att.totals.total_us == pytest.approx(31 * layers)
        alone = analyze(sweep / name if name != "loose" else sweep / "loose.pt.trace.json").check()
        assert att.totals.total_us == pytest.approx(alone.totals.total_us)
    assert result.totals.blocks == sum(LAYERS.values())
    assert {b.source for b in result.blocks} == set(LAYERS)


def test_by_run_table_json_and_csv(sweep):
    table = invoke("attribute", sweep, "--by", "run")
    lines = table.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("run "))
    rows = {line.split()[0]: line.split()[1] for line in lines[head + 2:head + 2 + len(LAYERS)]}
    assert rows == {name: str(n) for name, n in LAYERS.items()}

    data = json.loads(invoke("attribute", sweep, "--by", "run", "--format", "json"))
    assert [r["name"] for r in data["runs"]] == [r.name for r in find_runs(sweep)[1]]
    for r in data["runs"]:
        assert r["totals"]["blocks"] == LAYERS[r["name"]]
        assert r["totals"]["total_us"] == pytest.approx(31 * LAYERS[r["name"]])
    assert {b["trace"] for b in data["blocks"]} == set(LAYERS)

    rows = list(csv.DictReader(io.StringIO(invoke("attribute", sweep, "--by", "run", "--format", "csv"))))
    per_run: dict[str, float] = {}
    for row in rows:
        per_run[row["trace"]] = per_run.get(row["trace"], 0.0) + float(row["time_us"])
    assert per_run == pytest.approx({name: 31.0 * n for name, n in LAYERS.items()})


def test_by_run_on_one_run(sweep):
    data = json.loads(invoke("attribute", sweep / "eager_128", "--by", "run", "--format", "json"))
    assert [r["name"] for r in data["runs"]] == ["eager_128"]
    assert data["totals"]["blocks"] == 2


def test_a_file_beside_a_folder_of_the_same_name_is_its_own_run(tmp_path):
    """Issue 26, row 12: eager/ and eager.pt.trace.json are two runs, and a warning says how they were named."""
    from support.builders import TraceBuilder, attention_block
    from tracekit.run.runs import find_runs

    for path, blocks in ((tmp_path / "eager" / "r0.pt.trace.json", 1), (tmp_path / "eager.pt.trace.json", 2),
                         (tmp_path / "sdpa" / "r0.pt.trace.json", 1)):
        b = TraceBuilder()
        for k in range(blocks):
            attention_block(b, 1000.0 * k, name=f"layer{k}.attention")
        path.parent.mkdir(parents=True, exist_ok=True)
        b.write(path)
    found, runs = find_runs(tmp_path)
    assert sorted(r.name for r in runs) == ["eager", "eager (file)", "sdpa"]
    assert {r.name: len(r.files) for r in runs} == {"eager": 1, "eager (file)": 1, "sdpa": 1}
    assert any("eager (file)" in w for w in found.warnings)


# -- two folders of runs, diffed run by run (issue 37): support.pairs.paired_sweeps builds them with known figures


def test_folders_of_runs_pair_by_run_name(tmp_path):
    from support.pairs import paired_sweeps

    import tracekit

    before, after = paired_sweeps(tmp_path)
    r = tracekit.diff(before, after).check()  # the Python API returns the pairs too
    assert [p.run for p in r.run_pairs] == ["bound", "slower"]
    assert (r.runs_only_before, r.runs_only_after) == (["gone"], ["new"])
    slower = r.run_pairs[1].diff
    assert (slower.before_figures.total_us, slower.after_figures.total_us) == pytest.approx((25, 45))
    assert slower.labels == ("before/slower", "after/slower")
    assert len(slower.pairs) == 3 and not slower.unmatched_before  # the run's own 3 blocks, none of another run
    assert len(r.pairs) == 6 and {b.source for p in r.pairs for b in (p.before, p.after)} == {"bound", "slower"}
    # no gate asked: each pair's own reading of its lead, the whole step. Each step is its 1020 µs ProfilerStep
    # window (the blocks' kernels inside it), mostly idle: launch-bound, so the lead is the step span, 1020 µs on both
    # sides in every step (no spread, no change): within noise, though slower's attention goes 25 -> 45 µs.
    assert [(p.diff.headline.basis, p.diff.headline.before_us, p.diff.headline.after_us) for p in r.run_pairs] \
        == [("step span", pytest.approx(1020), pytest.approx(1020))] * 2
    assert [p.verdict for p in r.run_pairs] == ["within noise", "within noise"]
    # the diff's own figures are the runs in common, summed per step: bound 25 + slower 25 -> 25 + 45
    assert (r.before_figures.total_us, r.after_figures.total_us) == pytest.approx((50, 70))
    assert not r.ranks and "runs paired by name: 2 in common; 1 only before (gone); 1 only after (new)" \
        in r.warnings[0]


def test_folders_of_runs_with_no_run_in_common_are_refused(tmp_path):
    from support.pairs import busy, eager, run_folders, steps_of

    from tracekit.errors import UsageError
    from tracekit.run.api import diff_paths

    steps = steps_of(busy(eager), "gemm", [10])
    a = run_folders(tmp_path / "a", {"x_1": steps, "x_2": steps})
    b = run_folders(tmp_path / "b", {"y_1": steps, "y_2": steps})
    with pytest.raises(UsageError, match=r"a and .*b are folders of runs with no run name in common \(x_1, x_2 "
                                         r"against y_1, y_2\); diff the runs themselves$"):
        diff_paths(a, b)


def test_a_folder_of_runs_against_one_run_is_refused(tmp_path):
    from support.pairs import paired_sweeps

    from tracekit.errors import UsageError
    from tracekit.run.api import diff_paths

    before, after = paired_sweeps(tmp_path)
    for pair, many in (((before, after / "slower"), before), ((before / "slower" / "w.pt.trace.json", after), after)):
        with pytest.raises(UsageError, match=rf"^{many} is a folder of 3 runs \(sub-folders with traces, as --by run "
                                             r"names them\) and .* is one run: diff it against one of them"):
            diff_paths(*pair)
    assert diff_paths(before / "slower", after / "slower").check().run_pairs == []  # one run each: as before


def test_run_pairs_invariants(tmp_path):
    from support.pairs import paired_sweeps

    from tracekit.results.invariants import InvariantError
    from tracekit.run.api import diff_paths

    r = diff_paths(*paired_sweeps(tmp_path)).check()
    r.runs_only_before.append("slower")
    with pytest.raises(InvariantError, match="both paired and on one side only"):
        r.check()
    r.runs_only_before.pop()
    r.run_pairs.append(r.run_pairs[0])
    with pytest.raises(InvariantError, match="a run is paired twice"):
        r.check()


def test_ranks_pair_only_within_a_run(tmp_path):
    """Runs that are folders of ranks: rank N of run x pairs with rank N of run x, and the summed runs pair no rank.
    Run x has ranks of 1 and 2 blocks (31 µs each) before and after; run y ranks of 3 and 4."""
    from support.builders import rank_trace

    from tracekit.run.api import diff_paths

    for side in ("before", "after"):
        for run, blocks in (("x", (1, 2)), ("y", (3, 4))):
            (tmp_path / side / run).mkdir(parents=True)
            for rank, n in enumerate(blocks):
                rank_trace(tmp_path / side / run / f"rank{rank}.pt.trace.json", n, rank=rank)
    r = diff_paths(tmp_path / "before", tmp_path / "after").check()
    assert r.ranks == []
    for p, blocks in zip(r.run_pairs, ((1, 2), (3, 4))):
        assert [(q.rank, q.before.total_us, q.after.total_us) for q in p.diff.ranks] == \
            [(rank, pytest.approx(31 * n), pytest.approx(31 * n)) for rank, n in enumerate(blocks)]
    (tmp_path / "after" / "y").rename(tmp_path / "after" / "z")  # one run in common: still its own ranks only
    r = diff_paths(tmp_path / "before", tmp_path / "after").check()
    assert r.ranks == [] and [q.rank for q in r.run_pairs[0].diff.ranks] == [0, 1]
    whole = analyze(tmp_path / "before", by="run")
    assert whole.ranks is None and whole.runs[0].attribution.ranks is not None  # the merge of runs has no ranks
    one = analyze(tmp_path / "before" / "x", by="run")  # a run folder of ranks, read by run: one run, as before
    assert one.ranks is None and len(one.runs[0].attribution.ranks.rows) == 2


def test_two_results_read_by_run_pair_by_run_name(tmp_path):
    """``tracekit.diff`` of two ``analyze(..., by="run")`` results pairs their runs as two folders do."""
    from support.pairs import paired_sweeps

    import tracekit

    before, after = paired_sweeps(tmp_path)
    twin = before / "gone" / "w.pt.trace.json.gz"  # gzip -k's twin: read once, and discovery warns about it
    twin.write_bytes(gzip.compress((before / "gone" / "w.pt.trace.json").read_bytes()))
    r = tracekit.diff(analyze(before, by="run"), analyze(after, by="run")).check()
    assert any(str(twin) in w for w in r.before.warnings)  # each side's own warnings stay with the pairs' merge
    from_paths = tracekit.diff(before, after)
    assert [(p.run, p.verdict, p.diff.before_figures.total_us, p.diff.after_figures.total_us) for p in r.run_pairs] \
        == [(p.run, p.verdict, p.diff.before_figures.total_us, p.diff.after_figures.total_us)
            for p in from_paths.run_pairs]
    assert (r.runs_only_before, r.runs_only_after) == (["gone"], ["new"])
    assert (r.before_figures.total_us, r.after_figures.total_us) == pytest.approx((50, 70))
    assert r.run_pairs[1].diff.labels == ("before/slower", "after/slower")
    assert tracekit.diff(analyze(before), analyze(after)).run_pairs == []  # merged results: one diff, as before


def test_a_pairs_reading_says_when_its_noise_is_unknown(tmp_path):
    """Two steps a side give no spread: a pair whose step busy goes 150 -> 200 µs (support.steps.dense_steps: gemm
    100 + add 50 -> 100) reads ``slower, noise unknown``; three steps, ``slower``. A run without ProfilerSteps falls
    back to its attention, whole trace, which has no spread: ``slower, noise unknown`` at any count."""
    from support.steps import dense_runs

    from tracekit.run.api import diff_paths

    for steps in (2, 3):
        b = dense_runs(tmp_path / f"b{steps}", {n: [(100, 50)] * steps for n in ("x", "y")})
        a = dense_runs(tmp_path / f"a{steps}", {n: [(100, 100)] * steps for n in ("x", "y")})
        word = "slower" + (", noise unknown" if steps == 2 else "")
        assert [p.verdict for p in diff_paths(b, a).check().run_pairs] == [word, word]


def test_each_run_pair_leads_with_its_whole_step(tmp_path):
    """support.steps.lead_sweeps: each pair leads on the basis its own diff leads on, with figures known by
    construction, and reads them on that basis alone (its noise the whole step's spread, never attention's)."""
    from support.steps import lead_sweeps

    from tracekit.results.diff import pair_headline
    from tracekit.run.api import diff_paths

    before, after = lead_sweeps(tmp_path)
    r = diff_paths(before, after).check()
    got = {p.run: (pair_headline(p.diff)["basis"], pair_headline(p.diff)["before_us"],
                   pair_headline(p.diff)["after_us"], p.verdict) for p in r.run_pairs}
    assert got == {"heavier": ("step busy", pytest.approx(150), pytest.approx(200), "slower"),
                   "noisy": ("step busy", pytest.approx(150), pytest.approx(160), "within noise"),
                   "longer": ("step span", pytest.approx(1020), pytest.approx(2020), "longer"),
                   "unstepped": ("attention (total)", pytest.approx(25), pytest.approx(45), "slower, noise unknown")}
    heavier = r.run_pairs[0].diff
    assert (heavier.before_figures.total_us, heavier.after_figures.total_us) == pytest.approx((100, 100))
    for p in r.run_pairs:  # each pair's headline is the lead of a diff of those two run folders alone
        alone = diff_paths(before / p.run, after / p.run).check()
        h = pair_headline(p.diff)
        if alone.headline.basis is None:
            assert (h["basis"], h["before_us"], h["after_us"]) == ("attention (total)", alone.before_figures.total_us,
                                                                   alone.after_figures.total_us)
            assert h["note"] == alone.headline.note
        else:
            assert (h["basis"], h["before_us"], h["after_us"], h["speedup"]) == \
                (alone.headline.basis, alone.headline.before_us, alone.headline.after_us, alone.headline.speedup)


# -- issue 41, row 12: one unusable run in a sweep ----------------------------------------------------------------

GOOD = {"eager_64": 1, "eager_128": 2, "eager_256": 1, "eager_512": 2, "flash_64": 3, "flash_128": 1, "flash_256": 2}


def _sweep_with_a_dead_run(root: Path, dead: str = "dead_32") -> Path:
    """Seven runs of known blocks (31 µs busy each: more than a 2-process pool takes at once) and, read first, one
    whose trace holds no profiler event."""
    for name, layers in GOOD.items():
        (root / name).mkdir(parents=True)
        eager_trace(root / name / "host.pt.trace.json", layers=layers, steps=1)
    (root / dead).mkdir(parents=True)
    (root / dead / "host.pt.trace.json").write_text(
        '{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]}')
    return root


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_an_unusable_run_is_named_in_one_warning_skipped_and_exits_3(tmp_path, jobs):
    from support.cli import run_cli

    root = _sweep_with_a_dead_run(tmp_path / "sweep")
    r = run_cli("attribute", root, "--by", "run", "--format", "json", "-j", jobs)
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    warned = [w for w in r.stderr.splitlines() if "dead_32" in w]
    assert len(warned) == 1 and warned[0].startswith("Warning: ") and "skipped" in warned[0], r.stderr
    out = json.loads(r.stdout)
    runs = {run["name"]: run for run in out["runs"]}
    assert sorted(runs) == sorted(GOOD)
    for name, layers in GOOD.items():
        assert runs[name]["totals"]["blocks"] == layers
        assert runs[name]["totals"]["total_us"] == pytest.approx(31 * layers)
    assert out["totals"]["total_us"] == pytest.approx(31 * sum(GOOD.values()))
    page = tmp_path / "r.html"
    rep = run_cli("report", root, "-o", page, "-j", jobs)
    assert rep.returncode == 3 and page.exists() and "Traceback" not in rep.stderr, rep.stderr
    assert len([w for w in rep.stderr.splitlines() if "dead_32" in w]) == 1


def test_a_sweep_with_no_usable_run_is_still_an_error(tmp_path):
    from support.cli import run_cli

    root = tmp_path / "sweep"
    for name in ("dead_1", "dead_2"):
        (root / name).mkdir(parents=True)
        (root / name / "host.pt.trace.json").write_text('{"traceEvents": []}')
    r = run_cli("attribute", root, "--by", "run")
    assert r.returncode == 1 and r.stderr.startswith("Error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
