"""Folders of ranks: --jobs keeps the classifier and progress, the per-rank (straggler) view,
and diff pairing ranks. Rank traces are hand-built (tests/builders.py), so each rank's figures are
known by construction: one eager attention block is 31 µs busy (matmul 21, softmax 5,
elementwise 2, memory 3) over a 136 µs span. Every result is check()ed."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import TraceBuilder, attention_block
from tracekit.classify import DEVICE_RULES, HOST_RULES, Classifier, Rule
from tracekit.inputs import attribute_inputs, discover
from tracekit.vocab import Category

BUSY, SPAN = 31.0, 136.0
SPLIT = {"matmul": 21.0, "softmax": 5.0, "elementwise": 2.0, "memory": 3.0}


def rank_trace(path: Path, blocks: int, rank: int | None = None) -> Path:
    """``blocks`` eager attention blocks, 1 ms apart; ``distributedInfo.rank`` when ``rank`` is given."""
    top = {} if rank is None else {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 8}}
    b = TraceBuilder(**top)
    for i in range(blocks):
        attention_block(b, 1000.0 * i, name=f"layer{i}.attention")
    return b.write(path)


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
