"""Hostile recorded shapes (``Input Dims``, ``Input type``, ``Concrete Inputs``) never crash the analyses
that read them (FLOPs, matmul roles, hints): a result that passes check() and renders, or a TracekitError."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from support.paths import ROOT
from support.traces import read_doc
from tracekit import analyze
from tracekit.errors import TracekitError
from tracekit.renderers import RENDERERS

H200 = ROOT.parent / "shared" / "traces" / "h200" / "sweep"
pytestmark = pytest.mark.skipif(not H200.is_dir(), reason=f"H200 traces not present at {H200}")

DIMS = [[], [[]], [[-1, 5]], [[10**30, 10**30]], [[0, 0, 0]], ["x"], [[1.5, 2]], [[2**62, 2**62, 2**62]],
        [[[1]]], None, 5, "s", [[1, 2], [3]], [[4, 16, 512, 64]] * 3, [[True, False]], [[1, 2], None], [{}]]
TYPES = [[], ["c10::BFloat16"], ["weird"], [None], 5, ["float"] * 4, [["x"]]]
SCALARS = [[], ["", "", "", "", "", "True"], ["True"] * 10, [None], 5, ["1e400"], [[1]]]


def _trace(name: str) -> dict:
    [f] = (H200 / name).glob("*.pt.trace.json.gz")
    return read_doc(f)


@pytest.mark.parametrize("name", ["eager_512", "sdpa-flash_512", "sdpa-math_512"])
@pytest.mark.parametrize("seed", range(4))
def test_hostile_shapes_never_crash(tmp_path: Path, name: str, seed: int) -> None:
    rng = random.Random(seed)
    doc = _trace(name)
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and "args" in e]
    assert ops and any("Input Dims" in e["args"] for e in ops)  # the trace has shapes to damage
    for e in rng.sample(ops, min(len(ops), 80)):
        key = rng.choice(["Input Dims", "Input type", "Concrete Inputs"])
        e["args"][key] = rng.choice(DIMS if key == "Input Dims" else TYPES if key == "Input type" else SCALARS)
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))  # json, not orjson: 10**30 must reach the file as written
    try:
        res = analyze(p).check()
    except TracekitError:  # allowed by the contract, but these damaged shapes should never need it
        pytest.fail("damaged shapes cost the whole trace")
    assert res.totals.blocks == 8  # shapes feed figures, never block discovery: 4 layers x 2 steps
    for fmt in ("json", "table", "csv", "markdown"):
        assert RENDERERS[fmt]().render(res)
