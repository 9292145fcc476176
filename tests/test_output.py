"""tracekit.output: the one home of atomic writing and of "never write over an input" (issue 36), used by the CLI's
reports and by redact's and annotate's trace copies. Each test sets up the files itself, so the answer (what is on
disk afterwards) is known by construction."""

from __future__ import annotations

import gzip
import os
import stat
from pathlib import Path

import pytest

from tracekit.errors import OutputError, TraceReadError, UsageError
from tracekit.output import refuse_inputs, refuse_next_input, trace_copy, write_report


def _failing(first: str):
    yield first
    raise RuntimeError("renderer broke")


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_report_that_fails_half_way_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    out.write_text("old")
    with pytest.raises(RuntimeError, match="renderer broke"):
        write_report(_failing("new, half"), out, gz=False)
    assert out.read_text() == "old" and _leftovers(tmp_path) == []


def test_a_new_report_follows_the_umask_and_an_old_one_keeps_its_mode(tmp_path: Path) -> None:
    was = os.umask(0o027)
    try:
        write_report(["a"], tmp_path / "new.txt", gz=False)
    finally:
        os.umask(was)
    old = tmp_path / "old.txt"
    old.write_text("x")
    old.chmod(0o604)
    write_report(["b"], old, gz=False)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE(old.stat().st_mode) == 0o604 and old.read_text() == "b"


def test_a_report_through_a_symlink_replaces_the_file_and_keeps_the_link(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_report(["new"], link, gz=False)
    assert link.is_symlink() and real.read_text() == "new"


def test_a_gz_report_is_the_same_bytes_each_time(tmp_path: Path, monkeypatch) -> None:
    import time

    a, b = tmp_path / "a.json.gz", tmp_path / "b" / "a.json.gz"
    b.parent.mkdir()
    write_report(["{", "}"], a, gz=True)
    later = time.time() + 3600
    monkeypatch.setattr(time, "time", lambda: later)  # (an hour on: the header holds no clock)
    write_report(["{}"], b, gz=True)
    assert gzip.decompress(a.read_bytes()) == b"{}" and a.read_bytes() == b.read_bytes()


def test_a_report_into_a_missing_folder_is_an_output_error(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="cannot write"):
        write_report(["x"], tmp_path / "nowhere" / "r.json", gz=False)


def test_a_trace_copy_is_renamed_into_place_only_when_whole(tmp_path: Path) -> None:
    src = tmp_path / "t.json"
    src.write_text("[]")
    dst = tmp_path / "made" / "copy.json.gz"  # (its folder is made)
    with trace_copy(src, dst) as out:
        out.write(b"[1]")
    assert gzip.decompress(dst.read_bytes()) == b"[1]"
    with pytest.raises(RuntimeError), trace_copy(src, dst) as out:
        out.write(b"[2")
        raise RuntimeError("stopped")
    assert gzip.decompress(dst.read_bytes()) == b"[1]" and _leftovers(dst.parent) == []


def test_a_trace_copy_over_an_old_file_keeps_its_mode_as_a_report_does(tmp_path: Path) -> None:
    """Issue 41 row 9: ``annotate -o`` and ``redact -o`` over a 0600 file left it 0644 (``attribute -o`` kept
    0600). Both write through trace_copy; a new copy follows the umask, a symlink is replaced by a new file."""
    from support.builders import TraceBuilder, eager_layers

    from tracekit.annotation import annotate_path
    from tracekit.redact import redact_path

    b = TraceBuilder()
    eager_layers(b, 1)
    src = b.write(tmp_path / "t.json")
    copies = {"copy": lambda dst: _copied(src, dst), "annotate": lambda dst: annotate_path(src, dst, jobs=1),
              "redact": lambda dst: redact_path(src, dst, [])}
    for how, make in copies.items():
        for name, mode in ((f"{how}.json", 0o600), (f"{how}.json.gz", 0o640)):
            old = tmp_path / name
            old.write_bytes(b"old")
            old.chmod(mode)
            make(old)
            assert old.read_bytes() != b"old" and stat.S_IMODE(old.stat().st_mode) == mode, (how, name)
    was = os.umask(0o027)
    try:
        _copied(src, tmp_path / "new.json")
        (tmp_path / "link.json").symlink_to(tmp_path / "copy.json")  # (0600: the link's target)
        _copied(src, tmp_path / "link.json")
    finally:
        os.umask(was)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640
    assert not (tmp_path / "link.json").is_symlink() and stat.S_IMODE((tmp_path / "link.json").stat().st_mode) == 0o640


def _copied(src: Path, dst: Path) -> None:
    with trace_copy(src, dst) as out:
        out.write(src.read_bytes())


def test_a_trace_copy_blames_the_input_or_the_output(tmp_path: Path) -> None:
    src = tmp_path / "t.json.gz"
    src.write_bytes(b"")
    with pytest.raises(TraceReadError, match="t.json.gz: cannot read"), trace_copy(src, tmp_path / "c.json") as out:
        raise EOFError("cut off")
    with pytest.raises(OutputError, match="c.json: cannot write"), trace_copy(src, tmp_path / "c.json") as out:
        out.write(b"x")
        raise OSError(28, "No space left on device")
    assert _leftovers(tmp_path) == [] and not (tmp_path / "c.json").exists()


def test_no_name_for_an_input_can_be_written_over(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text("[]")
    (tmp_path / "sym.json").symlink_to(trace)
    os.link(trace, tmp_path / "hard.json")
    with pytest.raises(UsageError, match=r"t.json: refusing to overwrite an input trace$"):
        refuse_inputs([trace], [trace])
    for alias in ("sym.json", "hard.json"):  # another name: the message names the input it stands for
        with pytest.raises(UsageError, match=r"refusing to overwrite an input trace \(.*t.json\)"):
            refuse_inputs([tmp_path / alias], [trace])
    (tmp_path / "sub").mkdir()
    with pytest.raises(UsageError, match="refusing to overwrite"):
        refuse_inputs([tmp_path / "sub" / ".." / "t.json"], [trace])
    refuse_inputs([tmp_path / "other.json"], [trace])  # a new name is fine


def test_no_file_the_next_run_would_read_as_a_trace(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="the next run of"):
        refuse_next_input(tmp_path / "sub" / "x.pt.trace.json", tmp_path, (".pt.trace.json",))
    refuse_next_input(tmp_path / "report.json", tmp_path, (".pt.trace.json",))
    refuse_next_input(tmp_path.parent / "x.pt.trace.json", tmp_path, (".pt.trace.json",))
