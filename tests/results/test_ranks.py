"""Folders of ranks: --jobs keeps the classifier and progress, the per-rank (straggler) view,
and diff pairing ranks. Rank traces are hand-built (tests/support/builders.py), so each rank's figures are
known by construction: one eager attention block is 31 µs busy (matmul 20, softmax 5,
elementwise 2, memory 4) over a 136 µs span. Every result is check()ed."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.builders import rank_trace
from tracekit import analyze
from tracekit.analysis.classify import DEVICE_RULES, HOST_RULES, Classifier, Rule
from tracekit.cli import cli
from tracekit.run.api import diff_paths
from tracekit.run.api import analyze as attribute_inputs
from tracekit.run.inputs import discover
from tracekit.results.ranks import rank_from_path
from tracekit.renderers import CSVRenderer, JSONRenderer, MarkdownRenderer, TerminalRenderer
from tracekit.results.attribution import CATEGORIES, InvariantError
from tracekit.vocab import Category, RankFrom

BUSY, SPAN = 31.0, 136.0
SPLIT = {"matmul": 20.0, "softmax": 5.0, "elementwise": 2.0, "memory": 4.0}



@pytest.fixture
def rank_dir(tmp_path: Path) -> Path:
    """Four ranks: rank r has r + 1 blocks (rank 3 is the straggler, 4 × a block)."""
    d = tmp_path / "run"
    d.mkdir()
    for r in range(4):
        rank_trace(d / f"worker_rank{r}.pt.trace.json", r + 1)
    return d


# ---------------------------------------------------------------------------------------------
# 1. --jobs keeps the classifier and progress (issue 13's bug list)


def _softmax_is_other() -> Classifier:
    """A custom classifier whose first rule sends softmax kernels to 'other'."""
    rule = Rule("softmax-as-other", Category.OTHER, r"softmax")
    return Classifier(device_rules=(rule, *DEVICE_RULES), host_rules=HOST_RULES)


def test_custom_classifier_same_with_jobs_1_and_2(rank_dir: Path) -> None:
    found = discover(rank_dir)
    serial = attribute_inputs(found, classifier=_softmax_is_other(), jobs=1).check()
    pooled = attribute_inputs(found, classifier=_softmax_is_other(), jobs=2).check()
    default = attribute_inputs(found, jobs=2).check()
    blocks = 1 + 2 + 3 + 4
    # by construction: the custom rule moves every block's 5 µs of softmax to 'other'
    for res in (serial, pooled):
        assert res.totals.categories["softmax"] == 0.0
        assert res.totals.categories["other"] == pytest.approx(5.0 * blocks)
        assert res.totals.total_us == pytest.approx(BUSY * blocks)
    assert default.totals.categories["softmax"] == pytest.approx(5.0 * blocks)
    assert [b.categories for b in serial.blocks] == [b.categories for b in pooled.blocks]
    assert serial.kernels == pooled.kernels


@pytest.mark.parametrize("jobs", [1, 2])
def test_folder_progress_counts_every_byte(rank_dir: Path, jobs: int) -> None:
    found = discover(rank_dir)
    total = sum(f.stat().st_size for f in found.files)
    calls: list[tuple[str, int, int]] = []
    attribute_inputs(found, jobs=jobs, progress=lambda n, d, t: calls.append((n, d, t))).check()
    assert calls, "a folder must report progress"
    assert all(t == total for _, _, t in calls)
    done = [d for _, d, _ in calls]
    assert done == sorted(done) and done[-1] == total
    assert {n for n, _, _ in calls} <= {f.name for f in found.files}


# ---------------------------------------------------------------------------------------------
# 2. The per-rank (straggler) view


def test_rank_rows_and_spread_known_by_construction(rank_dir: Path) -> None:
    res = attribute_inputs(discover(rank_dir), jobs=1).check()
    view = res.ranks
    assert view is not None and view.rank_from == RankFrom.PATH  # no distributedInfo: worker_rank<N> in the name
    assert [r.rank for r in view.rows] == [0, 1, 2, 3]
    for r in view.rows:
        n = r.rank + 1
        assert r.blocks == n
        assert r.total_us == pytest.approx(BUSY * n)
        assert r.span_us == pytest.approx(SPAN * n)
        assert r.idle_us == pytest.approx((SPAN - BUSY) * n)
        for c, us in SPLIT.items():
            assert r.categories[c] == pytest.approx(us * n)
    sp = view.spread
    # totals 31, 62, 93, 124: median (62 + 93) / 2 = 77.5; rank 3 is 46.5 µs (60%) over it
    assert (sp.min_us, sp.median_us, sp.max_us) == pytest.approx((31.0, 77.5, 124.0))
    assert (sp.fastest_rank, sp.slowest_rank) == (0, 3)
    assert sp.slowest_over_median_us == pytest.approx(46.5)
    assert sp.slowest_over_median_pct == pytest.approx(60.0)
    assert sp.max_over_min == pytest.approx(4.0)


def test_distributed_info_rank_wins_over_the_file_name(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    # file names say 0, 1, 2; the traces say ranks 7, 5, 6 (blocks 1, 2, 3)
    for i, rank in enumerate((7, 5, 6)):
        rank_trace(d / f"rank{i}.pt.trace.json", i + 1, rank=rank)
    view = attribute_inputs(discover(d)).check().ranks
    assert view is not None and view.rank_from == RankFrom.TRACE
    assert [(r.rank, r.blocks) for r in view.rows] == [(5, 2), (6, 3), (7, 1)]
    assert view.spread.slowest_rank == 6 and view.spread.fastest_rank == 7


def test_copies_of_one_trace_fall_back_to_names_then_order(tmp_path: Path) -> None:
    d = tmp_path / "copies"
    d.mkdir()
    for i in range(3):  # every copy says rank 0
        rank_trace(d / f"trace_{10 + i}.json", 1, rank=0)
    view = attribute_inputs(discover(d)).check().ranks
    assert view is not None and view.rank_from == RankFrom.PATH
    assert [r.rank for r in view.rows] == [10, 11, 12]
    assert view.spread.slowest_over_median_us == 0.0
    e = tmp_path / "plain"
    e.mkdir()
    for name in ("a.json", "b.json"):
        rank_trace(e / name, 1, rank=0)
    view = attribute_inputs(discover(e)).check().ranks
    assert view is not None and view.rank_from == RankFrom.ORDER and view.note
    assert [(r.rank, r.source) for r in view.rows] == [(0, "a.json"), (1, "b.json")]


def test_rank_folders_name_the_rank(tmp_path: Path) -> None:
    d = tmp_path / "job"
    for r in (0, 1):
        (d / f"rank{r}").mkdir(parents=True)
        rank_trace(d / f"rank{r}" / "host.pt.trace.json", 2 - r)
    view = attribute_inputs(discover(d)).check().ranks
    assert view is not None and view.rank_from == RankFrom.PATH
    assert [(r.rank, r.blocks, r.source) for r in view.rows] == [(0, 2, "rank0/host.pt.trace.json"),
                                                                  (1, 1, "rank1/host.pt.trace.json")]


def test_rank_from_path_patterns() -> None:
    assert rank_from_path("profile_trace_rank_3.json.gz") == 3
    assert rank_from_path("rank-12.Apr_03_18_51_38.1102.pt.trace.json.gz") == 12
    assert rank_from_path("rank4/worker.pt.trace.json") == 4
    assert rank_from_path("trace_5.json") == 5
    assert rank_from_path("worker0.1623143089861.pt.trace.json.gz") is None
    assert rank_from_path("benchmark_result_2869224_1695835535_trace.json.gz") is None


def test_a_single_file_has_no_rank_view_but_by_rank_renders(tmp_path: Path) -> None:
    f = rank_trace(tmp_path / "t.json", 2, rank=3)
    res = analyze(f).check()
    assert res.ranks is None
    out = json.loads(JSONRenderer(by="rank").render(res))
    assert [r["rank"] for r in out["ranks"]["rows"]] == [3]
    assert "ranks" not in json.loads(JSONRenderer().render(res))  # the default JSON is unchanged for one file


def test_every_renderer_shows_the_ranks(rank_dir: Path) -> None:
    res = attribute_inputs(discover(rank_dir)).check()
    out = json.loads(JSONRenderer().render(res))  # a folder of ranks: always in the JSON
    rows = out["ranks"]["rows"]
    assert [r["total_us"] for r in rows] == [BUSY * n for n in (1, 2, 3, 4)]
    assert out["ranks"]["spread"]["slowest_rank"] == 3 and out["ranks"]["rank_from"] == "path"
    table = TerminalRenderer(by="rank").render(res)
    assert "spread over 4 ranks" in table and "rank 3, +46.5 µs (+60.0%) over the median" in table
    md = MarkdownRenderer(by="rank").render(res)
    assert "| 3 | worker_rank3.pt.trace.json | 4 | 124.0 |" in md
    rows_csv = list(csv.DictReader(io.StringIO(CSVRenderer(by="rank").render(res))))
    assert len(rows_csv) == 4 * len(CATEGORIES)
    m3 = next(r for r in rows_csv if r["rank"] == "3" and r["category"] == "matmul")
    assert float(m3["time_us"]) == 80.0 and float(m3["rank_total_us"]) == 124.0


def test_cli_by_rank(rank_dir: Path) -> None:
    r = CliRunner().invoke(cli, ["attribute", str(rank_dir), "--by", "rank", "--format", "json", "-j", "1"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["ranks"]["spread"]["max_us"] == 124.0
    bad = CliRunner().invoke(cli, ["attribute", str(rank_dir), "--by", "ranks"])
    assert bad.exit_code == 2


def test_rank_view_check_catches_a_wrong_spread(rank_dir: Path) -> None:
    res = attribute_inputs(discover(rank_dir)).check()
    assert res.ranks is not None
    res.ranks.spread.slowest_rank = 0
    with pytest.raises(InvariantError):
        res.check()


# ---------------------------------------------------------------------------------------------
# diff of two folders pairs ranks


def test_diff_pairs_ranks(rank_dir: Path, tmp_path: Path) -> None:
    after = tmp_path / "after"
    after.mkdir()
    for r in (0, 1, 2, 5):  # every rank 2 blocks; rank 3 gone, rank 5 new
        rank_trace(after / f"worker_rank{r}.pt.trace.json", 2)
    d = diff_paths(rank_dir, after, jobs=1).check()
    got = {p.rank: (p.before and p.before.blocks, p.after and p.after.blocks, p.delta_us) for p in d.ranks}
    assert got[0] == (1, 2, pytest.approx(BUSY)) and got[1] == (2, 2, 0.0)
    assert got[2] == (3, 2, pytest.approx(-BUSY))
    assert got[3] == (4, None, None) and got[5] == (None, 2, None)
    out = json.loads(JSONRenderer().render(d))
    assert [p["rank"] for p in out["ranks"]] == [0, 1, 2, 3, 5]
    rows = [r for r in csv.DictReader(io.StringIO(CSVRenderer().render(d))) if r["section"] == "rank"]
    assert [r["rank"] for r in rows] == ["0", "1", "2", "3", "5"]
    assert float(rows[0]["delta_us"]) == BUSY
    assert "only before" in TerminalRenderer().render(d)
    assert "| 5 | — |" in MarkdownRenderer().render(d)


def test_diff_of_two_files_has_no_rank_pairs(tmp_path: Path) -> None:
    a, b = rank_trace(tmp_path / "a.json", 1), rank_trace(tmp_path / "b.json", 2)
    d = diff_paths(a, b).check()
    assert d.ranks == []
    assert "ranks" not in json.loads(JSONRenderer().render(d))
