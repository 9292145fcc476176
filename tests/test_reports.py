"""``tracekit.report()``: the HTML report from Python is the page ``tracekit report`` writes (issue 42)."""

from __future__ import annotations

import pytest

import tracekit
from support.builders import steps_trace
from support.cli import run_cli
from tracekit.errors import UsageError


def test_the_python_report_is_the_commands_page_byte_for_byte(tmp_path):
    trace, _ = steps_trace(tmp_path / "s.pt.trace.json")
    proc = run_cli("report", trace, "-o", tmp_path / "cli.html")
    assert proc.returncode == 0, proc.stderr
    result = tracekit.report(trace, tmp_path / "py.html")
    assert (tmp_path / "py.html").read_bytes() == (tmp_path / "cli.html").read_bytes()
    assert [b.name for b in result.blocks] == [b.name for b in tracekit.analyze(trace).blocks]


def test_the_python_report_draws_a_diff_and_a_chosen_step(tmp_path):
    before, _ = steps_trace(tmp_path / "b.pt.trace.json")
    after, _ = steps_trace(tmp_path / "a.pt.trace.json")
    d = tracekit.report(before, tmp_path / "d.html", after, step=1)  # (not the median step, 2)
    assert type(d).__name__ == "DiffResult" and (tmp_path / "d.html").stat().st_size > 0
    proc = run_cli("report", before, after, "-o", tmp_path / "c.html", "--step", 1)
    assert proc.returncode == 0 and (tmp_path / "c.html").read_bytes() == (tmp_path / "d.html").read_bytes()
    tracekit.report(before, tmp_path / "median.html", after)  # (the step drawn is in the page)
    assert (tmp_path / "median.html").read_bytes() != (tmp_path / "d.html").read_bytes()


def test_the_python_report_refuses_a_missing_step_and_an_input_as_output(tmp_path):
    trace, _ = steps_trace(tmp_path / "s.pt.trace.json")
    with pytest.raises(UsageError, match="no step 99 in the trace"):
        tracekit.report(trace, tmp_path / "r.html", step=99)
    assert not (tmp_path / "r.html").exists()
    before = trace.read_bytes()
    with pytest.raises(UsageError):
        tracekit.report(trace, trace)
    assert trace.read_bytes() == before
