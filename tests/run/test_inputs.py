"""Inputs.check(): what discovery promises (tracekit.run.inputs), and that discovery keeps it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.results.invariants import InvariantError
from tracekit.run.inputs import Inputs, discover


def _trace(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2, '
                    '"pid": 1, "tid": 1}]}')
    return path


def test_discovery_returns_checked_inputs(tmp_path: Path) -> None:
    a, b = _trace(tmp_path / "r1" / "b.pt.trace.json"), _trace(tmp_path / "r0" / "a.pt.trace.json")
    (tmp_path / "r1" / "b.pt.trace.json.gz").write_bytes(b"x")  # a gzip -k copy: read once, with a warning
    found = discover(tmp_path)
    assert found.check() is found
    assert found.files == sorted([a, b]) and any("duplicate" in w for w in found.warnings)
    assert discover(a).check().files == [a]


@pytest.mark.parametrize("broken, why", [
    (dict(files=[]), "without a file"),
    (dict(files=[Path("a"), Path("a")]), "listed twice"),
    (dict(files=[Path("b"), Path("a")]), "out of reading order"),
    (dict(files=[Path("a")], urls=["s3://x/a", "s3://x/b"]), "URLs not one per file"),
    (dict(files=[Path("a")], incomplete=True), "no warning says why"),
])
def test_check_names_each_broken_promise(broken: dict, why: str) -> None:
    with pytest.raises(InvariantError, match=why):
        Inputs(path=Path("x"), **broken).check()
    fixed = dict(broken, files=[Path("a")], urls=[], warnings=["x: skipped"])
    Inputs(path=Path("x"), **fixed).check()  # the same object, repaired, passes
