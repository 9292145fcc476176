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


def test_a_capture_list_entry_that_cannot_be_looked_at_is_unusable_not_fatal(tmp_path: Path) -> None:
    """Issue 41 row 3: ``execution_details.json`` naming a file whose name the file system refuses (a 300-letter
    name: ENAMETOOLONG) is an unusable entry like any other: the folder's traces are read, with the warning."""
    from tracekit.run.inputs import captures_beside

    folder = tmp_path / "capture_traces"
    capture = _trace(folder / "bs_2.json")
    (folder / "execution_details.json").write_text(f'[{{"file": "{"a" * 300}"}}]')
    files, warnings = captures_beside(tmp_path / "replay.json")
    assert files == [capture]
    assert len(warnings) == 1 and "no usable entry" in warnings[0]
    # a usable entry beside it is still the one read, and nothing is said
    (folder / "execution_details.json").write_text(f'[{{"file": "{"a" * 300}"}}, {{"file": "bs_2.json"}}]')
    assert captures_beside(tmp_path / "replay.json") == ([capture], [])


def test_a_capture_folder_that_cannot_be_listed_gives_no_capture_and_says_so(tmp_path: Path, monkeypatch) -> None:
    """The fallback (every trace in the folder) on a folder that cannot be listed: a warning, not a traceback."""
    from tracekit.run.inputs import captures_beside

    folder = tmp_path / "capture_traces"
    _trace(folder / "bs_2.json")
    (folder / "execution_details.json").write_text("[]")

    def refuse(self: Path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "iterdir", refuse)
    files, warnings = captures_beside(tmp_path / "replay.json")
    assert files == [] and len(warnings) == 1 and "cannot list folder (Permission denied)" in warnings[0]
