"""Issue 24, parts 1, 2 and 4: latency measured outside the profiler (measured.json), the honest CI gate, and
folders of runs (``--by run``) whose figures never contradict the measured latency.

Independent sources: the H200 sweep's ``summary.md`` (latencies the recorder measured with CUDA events, parsed
here from the markdown), the raw trace JSON (test_wallclock's own walk of a block's span and idle), and
hand-built traces whose spans are known by construction.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REAL
from support.cli import run_cli
from support.traces import independent_block as _independent_block, read_events as _events
from support.paths import sweep_file as _file
from support.pairs import launch_bound_trace as _launch_bound_trace
from tracekit import analyze
from tracekit.analysis.gate import gate
from tracekit.errors import InconclusiveError, UsageError
from tracekit.results.measured import MEASURED_FILE, MEASURED_SCHEMA, Measured
from tracekit.results.sweep import run_rows
from tracekit.run.api import diff_paths
from tracekit.renderers import JSONRenderer, TerminalRenderer
from tracekit.vocab import Compared

H200 = REAL.parent / "h200"
SWEEP = H200 / "sweep"
requires_h200 = pytest.mark.skipif(not SWEEP.is_dir(), reason=f"H200 sweep traces not present at {SWEEP}")


def summary_latency() -> dict[str, float]:
    """``<impl>_<seq>`` -> Time (ms) from the first table of summary.md (the sweep's; the sparse one follows)."""
    text = (H200 / "summary.md").read_text()
    first = text.split("\n\n| Method")[0] if text.startswith("| Method") else text.split("Attention profiling")[1]
    out = {}
    for line in first.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 3 and re.fullmatch(r"\d+", cells[1]) and re.fullmatch(r"[\d.]+", cells[2]):
            out[f"{cells[0]}_{cells[1]}"] = float(cells[2])
    return out


def measured_doc(ms: float, **extra) -> dict:
    return {"schema": MEASURED_SCHEMA, "median_ms": ms, **extra}


def sweep_copy(tmp_path: Path, names: list[str], latency: dict[str, float] | None) -> Path:
    """A sweep folder of links to the H200 traces, with a measured.json per run when ``latency`` is given."""
    root = tmp_path / "sweep"
    for n in names:
        (root / n).mkdir(parents=True)
        src = _file(n)
        os.symlink(src, root / n / src.name)
        if latency is not None:
            (root / n / MEASURED_FILE).write_text(json.dumps(measured_doc(latency[n], low_ms=latency[n] * 0.99,
                                                                          high_ms=latency[n] * 1.01)))
    return root


# -- 2. the gate on the sweep's real regression -----------------------------------------------------------


@requires_h200
def test_summary_table_parses():
    lat = summary_latency()
    assert len(lat) == 32 and lat["eager_512"] == 2.508 and lat["sdpa-flash_512"] == 2.842


@requires_h200
def test_gate_without_measured_latency_is_inconclusive_on_launch_bound_runs():
    """eager_512 → sdpa-flash_512: both launch-bound (idle over half the span, from the raw JSON), so busy time
    (falling) and profiled span (falling) say nothing; measured latency went up 2.508 → 2.842 ms."""
    for name in ("eager_512", "sdpa-flash_512"):
        ref = _independent_block(_events(_file(name)), "layer0.attention", 0)
        assert ref["idle"] > ref["span"] / 2
    proc = run_cli("diff", SWEEP / "eager_512", SWEEP / "sdpa-flash_512", "--fail-if-slower", "5%")
    assert proc.returncode == 5, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "inconclusive" in lines[0] and "launch-bound" in lines[0]
    assert "Traceback" not in proc.stderr and "ok:" not in proc.stderr
    assert "attention (median step)" in proc.stdout  # the diff itself is still shown


@requires_h200
def test_gate_fails_the_real_regression_given_the_measured_latencies():
    """summary.md gives medians only: given with a ±1 % spread each, the intervals are apart (2.814 > 2.533 ·
    1.05); given bare, each is one sample, which decides nothing (issue 37)."""
    lat = summary_latency()
    before, after = lat["eager_512"], lat["sdpa-flash_512"]
    assert after * 0.99 > before * 1.01 * 1.05  # the measured regression, independently of tracekit
    proc = run_cli("diff", SWEEP / "eager_512", SWEEP / "sdpa-flash_512", "--fail-if-slower", "5%",
                   "--latency-before", f"{before}±{before / 100:.4f}", "--latency-after", f"{after}+-{after / 100:.4f}")
    assert proc.returncode == 4, proc.stderr
    assert "REGRESSION: measured latency" in proc.stderr and "the spreads are apart" in proc.stderr
    assert f"{100 * (after - before) / before:+.1f}%" in proc.stderr
    bare = run_cli("diff", SWEEP / "eager_512", SWEEP / "sdpa-flash_512", "--fail-if-slower", "5%",
                   "--latency-before", before, "--latency-after", after)
    assert bare.returncode == 5 and "before (--latency-before) is one sample" in bare.stderr


@requires_h200
def test_gate_reads_measured_json_beside_the_traces(tmp_path):
    lat = summary_latency()
    root = sweep_copy(tmp_path, ["eager_512", "sdpa-flash_512"], lat)
    r = diff_paths(root / "eager_512", root / "sdpa-flash_512").check()
    assert r.before.measured.median_ms == lat["eager_512"] and r.after.measured.median_ms == lat["sdpa-flash_512"]
    v = gate(r, 5)
    assert v.compared == Compared.LATENCY and not v.ok and not v.chosen
    assert (v.before_us, v.after_us) == pytest.approx((lat["eager_512"] * 1000, lat["sdpa-flash_512"] * 1000))
    assert v.sources == (MEASURED_FILE, MEASURED_FILE)
    assert v.within_noise is False  # |Δ| 0.334 ms > the half-spreads 0.0254 + 0.0284
    with pytest.raises(InconclusiveError, match="the spreads overlap"):
        gate(r, 14)  # +13.3% is within 14 %, but 2.870 > 2.483 · 1.14: the spreads could carry it over
    assert gate(r, 20).ok  # 2.870 <= 2.483 · 1.2
    proc = run_cli("diff", root / "eager_512", root / "sdpa-flash_512", "--fail-if-slower", "5")
    assert proc.returncode == 4 and "measured latency" in proc.stderr


@requires_h200
def test_gate_on_choices_are_explicit():
    r = diff_paths(SWEEP / "eager_512", SWEEP / "sdpa-flash_512").check()
    with pytest.raises(InconclusiveError, match="launch-bound"):
        gate(r, 5)
    # chosen, but two profiled steps a side give no step-to-step spread to decide by (issue 37)
    for on, what in ((Compared.SPAN, "profiled span"), (Compared.BUSY, "attention busy time")):
        with pytest.raises(InconclusiveError, match=f"{what} has no step-to-step spread .before 2 steps, after 2"):
            gate(r, 5, on=on)
    with pytest.raises(UsageError, match="--gate-on latency: no measured latency for before and after"):
        gate(r, 5, on=Compared.LATENCY)
    proc = run_cli("diff", SWEEP / "eager_512", SWEEP / "sdpa-flash_512", "--fail-if-slower", "5",
                   "--gate-on", "latency")
    assert proc.returncode == 2 and proc.stderr.startswith("Error: --gate-on latency")


@requires_h200
def test_gate_on_a_compute_bound_pair_uses_busy_time_and_wants_its_spread():
    """Not launch-bound, so busy time by default; but two profiled steps a side have no step-to-step spread."""
    proc = run_cli("diff", SWEEP / "eager_4096", SWEEP / "sdpa-flash_4096", "--fail-if-slower", "5")
    assert proc.returncode == 5
    assert "inconclusive: attention busy time has no step-to-step spread (before 2 steps, after 2" in proc.stderr


def test_gate_options_need_fail_if_slower(tmp_path):
    a = _launch_bound_trace(tmp_path / "a.json", gemm=10, host=60)
    proc = run_cli("diff", a, a, "--gate-on", "span")
    assert proc.returncode == 2 and "--fail-if-slower" in proc.stderr


def test_one_measured_side_is_not_enough(tmp_path):
    """A latency for one side only has no pair to be compared with: a usage error (issue 41; it was dropped, and the
    launch-bound sides then left the gate inconclusive)."""
    before = _launch_bound_trace(tmp_path / "a.json", gemm=10, host=60)
    after = _launch_bound_trace(tmp_path / "b.json", gemm=5, host=90)
    r = diff_paths(before, after).check()
    with pytest.raises(InconclusiveError, match="launch-bound"):
        gate(r, 5)
    with pytest.raises(UsageError, match="given without a latency for after"):
        gate(r, 5, latency=(Measured(median_ms=1.0, low_ms=0.99, high_ms=1.01), None))
    v = gate(r, 5, latency=(Measured(median_ms=1.0, low_ms=0.99, high_ms=1.01),
                            Measured(median_ms=1.02, low_ms=1.01, high_ms=1.03)))  # 1.03 <= 0.99 · 1.05
    assert v.compared == Compared.LATENCY and v.ok and v.change_pct == pytest.approx(2.0)
    assert v.within_noise is True  # |Δ| 0.02 <= 0.01 + 0.01
    with pytest.raises(InconclusiveError, match="before has no spread; after has no spread"):
        gate(r, 5, latency=(Measured(median_ms=1.0), Measured(median_ms=1.02)))


# -- 1. measured.json: read strictly, never taken for a trace -------------------------------------------------


def _trace_folder(tmp_path: Path, doc: object | bytes) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    _launch_bound_trace(folder / "host.pt.trace.json", gemm=10, host=60)
    raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    (folder / MEASURED_FILE).write_bytes(raw)
    return folder


def test_measured_json_is_read_beside_a_trace(tmp_path):
    folder = _trace_folder(tmp_path, measured_doc(2.5, low_ms=2.4, high_ms=2.7, repeats=5, launch_bound=True))
    res = analyze(folder).check()
    m = res.measured
    assert (m.median_ms, m.low_ms, m.high_ms, m.repeats, m.launch_bound) == (2.5, 2.4, 2.7, 5, True)
    assert m.half_spread_ms == pytest.approx(0.15)
    assert m.samples_ms is None and m.sample_count == 5  # a file written before samples were kept still reads
    assert [t.source for t in res.traces] == ["host.pt.trace.json"]  # the table is not read as a trace
    out = json.loads(JSONRenderer().render(res))
    assert out["measured"]["median_ms"] == 2.5 and out["measured"]["source"] == MEASURED_FILE


def test_a_folder_of_plain_json_never_reads_measured_json_as_a_trace(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    _launch_bound_trace(folder / "trace.json", gemm=10, host=60)
    (folder / MEASURED_FILE).write_text(json.dumps(measured_doc(1.0)))
    res = analyze(folder).check()
    assert [t.source for t in res.traces] == ["trace.json"] and res.measured.median_ms == 1.0


@pytest.mark.parametrize("doc,why", [
    (b"{not json", "not JSON"),
    ({"median_ms": 2.0}, "schema"),
    (measured_doc(-1.0), "median_ms must be a positive number"),
    (measured_doc(0), "median_ms must be a positive number"),
    (b'{"schema": "tracekit.measured/1", "median_ms": NaN}', "not JSON"),
    (b'{"schema": "tracekit.measured/1", "median_ms": 1e999}', "median_ms must be a positive number"),
    (measured_doc(True), "median_ms must be a positive number"),
    (measured_doc("2.5"), "median_ms must be a positive number"),
    (measured_doc(2.0, low_ms=2.5, high_ms=3.0), "inconsistent"),
    (measured_doc(2.0, low_ms=1.5), "inconsistent"),
    (measured_doc(2.0, repeats=0), "repeats must be a whole number"),
    (measured_doc(2.0, samples_ms="2.0"), "samples_ms must be a non-empty list of latencies"),
    (measured_doc(2.0, samples_ms=[]), "samples_ms must be a non-empty list of latencies"),
    (measured_doc(2.0, samples_ms=[2.0, -1.0]), "samples_ms must be a non-empty list of latencies"),
    (measured_doc(2.0, samples_ms=[2.0, True]), "samples_ms must be a non-empty list of latencies"),
    (measured_doc(2.0, samples_ms=[1.9, 2.1], repeats=3), "inconsistent"),
    (measured_doc(2.0, samples_ms=[2.1, 2.2]), "inconsistent"),  # the median lies outside its samples
    # issue 41, rows 2 and 6: counts past 64 bits (and past a double's 53), latencies outside 1 ns .. 1 day
    (measured_doc(2.0, repeats=10**23), "repeats must be a whole number from 1 to"),
    (measured_doc(2.0, iters=2**64), "iters must be a whole number from 1 to"),
    (measured_doc(10**400), "median_ms must be a positive number"),  # a JSON integer no float holds
    (measured_doc(1e308), "median_ms must be a latency between 1 ns and 1 day"),
    (measured_doc(5e-324), "median_ms must be a latency between 1 ns and 1 day"),
    (measured_doc(2.0, low_ms=5e-324, high_ms=2.5), "low_ms must be a latency between 1 ns and 1 day"),
    (measured_doc(2.0, low_ms=1.5, high_ms=1e308), "high_ms must be a latency between 1 ns and 1 day"),
    (measured_doc(2.0, graph_median_ms=1e308), "graph_median_ms must be a latency between 1 ns and 1 day"),
    (measured_doc(2.0, samples_ms=[2.0, 1e308]), "samples_ms must be a non-empty list of latencies between 1 ns"),
    (measured_doc(2.0, samples_ms=[2.0, 10**400]), "samples_ms must be a non-empty list of"),
    (measured_doc(2.0, peak_memory_mb=10**400), "peak_memory_mb must be a non-negative number"),
    ([1, 2], "schema"),
    (b"\xff\xfe", "not JSON"),
    ("big", "over 1024 KiB"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_measured_json_is_a_warning_and_no_figure(tmp_path, doc, why):
    if doc == "big":
        doc = b'{"schema": "tracekit.measured/1", "median_ms": 1, "x": "' + b"a" * (1 << 20) + b'"}'
    res = analyze(_trace_folder(tmp_path, doc)).check()
    assert res.measured is None
    [w] = [w for w in res.warnings if MEASURED_FILE in w]
    assert "ignored" in w and why in w and "\n" not in w
    proc = run_cli("attribute", tmp_path / "run")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "ignored" in proc.stderr


def test_samples_are_read_kept_and_written_to_json(tmp_path):
    doc = measured_doc(2.5, low_ms=2.4, high_ms=2.7, repeats=3, samples_ms=[2.7, 2.4, 2.5])
    res = analyze(_trace_folder(tmp_path, doc)).check()
    assert res.measured.samples_ms == (2.7, 2.4, 2.5) and res.measured.sample_count == 3
    assert json.loads(JSONRenderer().render(res))["measured"]["samples_ms"] == [2.7, 2.4, 2.5]


SHARED_MEASURED = sorted(H200.glob("**/measured.json")) if H200.is_dir() else []


@pytest.mark.skipif(not SHARED_MEASURED, reason=f"no measured.json under {H200}")
def test_shared_h200_measured_files_still_read():
    """The recorder's files on the shared H200 traces, with or without samples_ms (older ones have none): each
    reads, checks, and holds what its own JSON says."""
    from tracekit.run.measured import read_measured

    for path in SHARED_MEASURED:
        raw = json.loads(path.read_text())
        m = read_measured(path)
        m.check()
        assert m.median_ms == raw["median_ms"] and m.repeats == raw.get("repeats")
        assert m.samples_ms == (None if raw.get("samples_ms") is None else tuple(raw["samples_ms"]))


def test_hostile_text_in_measured_json_is_escaped(tmp_path):
    res = analyze(_trace_folder(tmp_path, measured_doc(1.0, what="\x1b]52;c;AAAA\x07\nforged"))).check()
    assert res.measured.what.isprintable() and "\x1b" not in res.measured.what


# -- issue 41: figures past 64 bits or outside a plausible latency, on every path that reads measured.json -------


def _invoke(*args):
    """The CLI in-process; an exception escaping it (a traceback for the user) fails the test."""
    from click.testing import CliRunner

    from tracekit.cli import cli

    out = CliRunner().invoke(cli, [str(a) for a in args])
    assert out.exception is None or isinstance(out.exception, SystemExit), (args, out.exception)
    return out


def _pair_of_runs(tmp_path: Path, bad: dict | bytes, good_ms: float | None = 1.0, extra_bad: bool = False) -> Path:
    """A sweep: ``eager_512`` with ``bad`` as its measured.json, ``fast_512`` measured ``good_ms`` (None: no file),
    and with ``extra_bad`` a third run ``slow_512`` holding the same bad file."""
    root = tmp_path / "runs"
    names = ["eager_512", "fast_512"] + (["slow_512"] if extra_bad else [])
    for name in names:
        (root / name).mkdir(parents=True)
        _launch_bound_trace(root / name / "t.pt.trace.json", gemm=10, host=60)
    raw = bad if isinstance(bad, bytes) else json.dumps(bad).encode()
    for name in ("eager_512", "slow_512") if extra_bad else ("eager_512",):
        (root / name / MEASURED_FILE).write_bytes(raw)
    if good_ms is not None:
        (root / "fast_512" / MEASURED_FILE).write_text(json.dumps(measured_doc(good_ms, repeats=5)))
    return root


def _ignored(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("Warning:") and f"{MEASURED_FILE}: ignored" in ln]


@pytest.mark.parametrize("bad", [{"repeats": 10**23}, {"iters": 2**64}, {"median_ms": 1e308},
                                 {"median_ms": 5e-324}, {"median_ms": 10**400}],
                         ids=["repeats-1e23", "iters-2**64", "median-1e308", "median-5e-324", "median-int-1e400"])
def test_an_out_of_range_figure_ignores_the_file_on_every_path(tmp_path, bad):
    """Issue 41, rows 2 and 6: ``"repeats": 10**23`` was a TypeError traceback from ``attribute --format json``,
    ``--by run``, ``report`` and ``diff``; 1e308 ms gave "inf s" and a 309-digit cell, 5e-324 "+inf%". Each path
    now ignores the file with one warning line naming it, and shows the run with its profiled figures."""
    root = _pair_of_runs(tmp_path, {**measured_doc(2.0, repeats=5), **bad})
    one, good = root / "eager_512", root / "fast_512"
    for args, code in ((("attribute", one, "--format", "json"), 0), (("attribute", root, "--by", "run"), 0),
                       (("attribute", root, "--by", "run", "--format", "json"), 0),
                       (("report", one, "-o", tmp_path / "one.html"), 0),
                       (("report", root, "-o", tmp_path / "a.html"), 0), (("diff", one, good, "--format", "json"), 0),
                       (("diff", good, one, "--fail-if-slower", "5"), 5)):
        out = _invoke(*args)
        assert out.exit_code == code, (args, out.output)
        [w] = _ignored(out.stderr)
        assert "eager_512" in w and "\n" not in w
        assert not any(x in out.output for x in ("inf s", "inf%", "nan%", "Traceback"))
    data = json.loads(_invoke("attribute", root, "--by", "run", "--format", "json").stdout)
    assert {r["name"]: r["run_row"]["latency_ms"] for r in data["runs"]} == {"eager_512": None, "fast_512": 1.0}


def test_measured_check_holds_every_latency_to_the_plausible_range():
    """Issue 41, row 6: the result's own invariant, for a Measured built in Python (not read from a file)."""
    from tracekit.results.measured import LATENCY_RANGE_MS, MAX_COUNT

    lo, hi = LATENCY_RANGE_MS
    Measured(median_ms=lo, low_ms=lo, high_ms=hi, samples_ms=(lo, hi), repeats=2, graph_median_ms=hi).check()
    Measured(median_ms=1.0, repeats=MAX_COUNT, iters=MAX_COUNT).check()
    for bad in (dict(median_ms=1e308), dict(median_ms=5e-324), dict(median_ms=1.0, low_ms=0.0, high_ms=2.0),
                dict(median_ms=1.0, low_ms=0.5, high_ms=hi * 2), dict(median_ms=1.0, graph_median_ms=hi * 2),
                dict(median_ms=1.0, samples_ms=(1.0, hi * 2)), dict(median_ms=1.0, repeats=MAX_COUNT + 1),
                dict(median_ms=1.0, iters=2**64)):
        with pytest.raises(AssertionError):
            Measured(**bad).check()


@pytest.mark.parametrize("bad", [b'{"schema": "tracekit.measured/1", "median_ms": NaN}', measured_doc(-1.0),
                                 measured_doc("2.5"), b'{"schema": "tracekit.measured/1", "median_ms": 1e400}',
                                 measured_doc(2.0, low_ms=2.5, high_ms=3.0)],
                         ids=["nan", "-1", "string", "1e400", "low-over-median"])
def test_by_run_warns_once_per_bad_measured_json_and_its_note_is_true(tmp_path, bad):
    """Issue 41, row 5: ``--by run`` dropped each run's measured.json warning (``attribute RUN`` gave it), and its
    note then said "no run has a measured latency" while fast_512 had one (the baseline, eager_512, had none)."""
    root = _pair_of_runs(tmp_path, bad, extra_bad=True)
    res = analyze(root, by="run").check()
    warned = [w for w in res.warnings if MEASURED_FILE in w]
    assert len(warned) == 2 and "eager_512" in warned[0] and "slow_512" in warned[1]
    out = _invoke("attribute", root, "--by", "run")
    assert out.exit_code == 0 and len(_ignored(out.stderr)) == 2
    assert "no run has a measured latency" not in out.stdout
    assert "no run and its baseline both have a measured latency" in " ".join(out.stdout.split())
    for args in (("diff", root, root, "--format", "json"), ("report", root, "-o", tmp_path / "r.html")):
        assert len(_ignored(_invoke(*args).stderr)) == (4 if args[0] == "diff" else 2)  # each side's own
    (root / "fast_512" / MEASURED_FILE).unlink()
    out = _invoke("attribute", root, "--by", "run")
    assert "no run has a measured latency" in " ".join(out.stdout.split()) and len(_ignored(out.stderr)) == 2


# -- 4. --by run: the run table, measured latency and speedups -------------------------------------------------


@requires_h200
def test_by_run_speedup_is_the_measured_ratio(tmp_path):
    lat = summary_latency()
    names = ["eager_512", "sdpa-flash_512", "eager_4096", "sdpa-flash_4096", "sdpa-cudnn_4096"]
    res = analyze(sweep_copy(tmp_path, names, lat), by="run").check()
    rows = {r.name: r for r in run_rows(res)}
    for name in names:
        rows[name].check()
        assert rows[name].measured.median_ms == lat[name]
    for name in ("sdpa-flash_512", "sdpa-flash_4096", "sdpa-cudnn_4096"):
        base = f"eager_{name.rsplit('_', 1)[1]}"
        r = rows[name]
        assert r.baseline == base
        assert r.latency_speedup == pytest.approx(lat[base] / lat[name])  # 0.88×, 8.20×, 9.34× in summary.md
        # kept apart (issue 37): the profiled figures are the median steps' own, never the latency's
        assert r.step_speedup == pytest.approx(rows[base].per_step.busy_us / r.per_step.busy_us)
        assert r.attention_speedup == pytest.approx(rows[base].per_step.attention_us / r.per_step.attention_us)
    assert f"{rows['sdpa-flash_512'].latency_speedup:.2f}" == "0.88"
    assert rows["sdpa-flash_512"].step_speedup > 1 and rows["sdpa-flash_512"].step_speedup_launch_bound
    text = TerminalRenderer(by="run", width=100).render(res)
    assert "0.88×" in text and "2.70×" not in text  # the profiled span's 2.70× is gone from the headline figure
    line = next(x for x in text.splitlines() if x.startswith("sdpa-flash_512"))
    assert "0.88× " in line and f"{rows['sdpa-flash_512'].step_speedup:.2f}× p!" in line
    assert f"{lat['sdpa-flash_512']:.3f}" in text
    df = res.to_dataframe()
    assert list(df["run"]) == names or sorted(df["run"]) == sorted(names)
    assert df.set_index("run").loc["sdpa-flash_512", "latency_ms"] == lat["sdpa-flash_512"]


@requires_h200
def test_by_run_without_measured_latency_marks_profiled_and_launch_bound_speedups(tmp_path):
    names = ["eager_512", "sdpa-flash_512", "eager_4096", "sdpa-flash_4096"]
    res = analyze(sweep_copy(tmp_path, names, None), by="run").check()
    rows = {r.name: r for r in run_rows(res)}
    events = {n: _events(_file(n)) for n in ("eager_512", "sdpa-flash_512")}
    for n, ev in events.items():  # launch-bound by the raw JSON: every block idles over half its span
        refs = [_independent_block(ev, f"layer{k}.attention", s) for k in range(4) for s in range(2)]
        assert sum(x["idle"] for x in refs) > sum(x["span"] for x in refs) / 2
        assert rows[n].launch_bound is True
    flash = rows["sdpa-flash_512"]
    assert flash.latency_speedup is None and flash.step_speedup_launch_bound and flash.attention_speedup_launch_bound
    big = rows["sdpa-flash_4096"]
    assert big.latency_speedup is None and big.step_speedup is not None and big.attention_speedup is not None
    assert not big.step_speedup_launch_bound and not big.attention_speedup_launch_bound
    text = TerminalRenderer(by="run", width=100).render(res)
    line = next(x for x in text.splitlines() if x.startswith("sdpa-flash_512"))
    assert "p!" in line and "LB" in line
    assert "p: profiled" in text and "!: a run is launch-bound" in text
    assert "latency×" not in text and "no run has a measured latency" in text  # no latency column to misread


def _run_sweep(tmp_path: Path, n: int) -> Path:
    root = tmp_path / "runs"
    for k in range(n):
        (root / f"impl{k}_{512 * (k + 1)}").mkdir(parents=True)
        _launch_bound_trace(root / f"impl{k}_{512 * (k + 1)}" / f"host{k}.pt.trace.json", gemm=10 + k, host=60)
    return root


def test_by_run_header_is_compact_and_pooled_lines_are_labelled(tmp_path):
    root = _run_sweep(tmp_path, 12)
    res = analyze(root, by="run").check()
    text = TerminalRenderer(by="run", width=100).render(res)
    lines = text.splitlines()
    assert not any("host3.pt.trace.json" in x for x in lines)  # no header line per trace file
    assert sum("12 runs, 12 traces" in x for x in lines) == 1
    table = lines.index(next(x for x in lines if x.startswith("run ")))
    pooled = lines.index(next(x for x in lines if x.startswith("attention, whole trace (pooled over 12 runs")))
    assert table < pooled  # the run table first
    head = lines[table].split()
    assert "span" in head and "idle" in head  # kept at 100 columns
    assert all(len(x) <= 100 for x in lines)
    assert "top device events in blocks (pooled over 12 runs):" in text


def test_by_run_hints_name_their_run(tmp_path):
    res = analyze(_run_sweep(tmp_path, 3), by="run").check()
    assert all(r.attribution.hints for r in res.runs)  # launch-bound, each
    text = TerminalRenderer(by="run", width=100).render(res)
    assert "hints (per run):" in text and "\nhints:\n" not in text
    assert "[launch-bound] on 3 runs" in text
    for r in res.runs:
        assert r.name in text.split("hints (per run):")[1]


def test_folder_of_runs_without_by_run_suggests_it(tmp_path):
    root = _run_sweep(tmp_path, 3)
    proc = run_cli("attribute", root)
    assert proc.returncode == 0
    notes = [x for x in proc.stderr.splitlines() if "--by run" in x]
    assert len(notes) == 1 and "3 runs" in notes[0]
    one = run_cli("attribute", root / "impl0_512")
    assert "--by run" not in one.stderr
    assert "--by run" not in run_cli("attribute", root, "--by", "run").stderr


def test_python_by_run_and_tracekit_runs(tmp_path):
    root = _run_sweep(tmp_path, 3)
    code = ("import tracekit, sys; r = tracekit.analyze(sys.argv[1], by='run').check(); "
            "df = r.to_dataframe(); print(len(r.runs), list(df['run'])); "
            "print(tracekit.runs.find_runs is tracekit.run.runs.find_runs)")
    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["3 ['impl0_512', 'impl1_1024', 'impl2_1536']", "True"]


def test_run_rows_profiled_speedup_by_construction(tmp_path):
    """Hand-built runs (support.pairs.launch_bound_trace): per step, busy = attention = the GEMM's 10 µs in a
    1500 µs ProfilerStep, so eager (host 60) over fast (host 90) is 1.00× on both profiled speedups, each marked
    launch-bound; a measured latency 3.0 → 2.0 ms then gives latency 1.50× beside them, never in their place."""
    root = tmp_path / "s"
    for name, host in (("eager_64", 60), ("fast_64", 90)):
        (root / name).mkdir(parents=True)
        _launch_bound_trace(root / name / "t.pt.trace.json", gemm=10, host=host)
    rows = {r.name: r for r in run_rows(analyze(root, by="run").check())}
    fast = rows["fast_64"]
    fast.check()
    assert fast.step_speedup == pytest.approx(1.0) and fast.attention_speedup == pytest.approx(1.0)
    assert fast.latency_speedup is None and fast.step_speedup_launch_bound and fast.attention_speedup_launch_bound
    assert fast.baseline == "eager_64" and rows["eager_64"].step_speedup is None and rows["eager_64"].baseline is None
    (root / "eager_64" / MEASURED_FILE).write_text(json.dumps(measured_doc(3.0)))
    (root / "fast_64" / MEASURED_FILE).write_text(json.dumps(measured_doc(2.0)))
    fast = {r.name: r for r in run_rows(analyze(root, by="run").check())}["fast_64"]
    assert fast.latency_speedup == pytest.approx(1.5)
    assert fast.step_speedup == pytest.approx(1.0) and fast.attention_speedup == pytest.approx(1.0)


def test_a_table_in_a_sweeps_root_belongs_to_no_run(tmp_path):
    """The loose traces in a sweep's root are runs of their own: one measured.json there names none of them."""
    root = _run_sweep(tmp_path, 2)
    _launch_bound_trace(root / "loose.pt.trace.json", gemm=10, host=60)
    (root / MEASURED_FILE).write_text(json.dumps(measured_doc(9.0)))
    (root / "impl0_512" / MEASURED_FILE).write_text(json.dumps(measured_doc(1.0)))
    res = analyze(root, by="run").check()
    got = {r.name: (None if r.attribution.measured is None else r.attribution.measured.median_ms) for r in res.runs}
    assert got == {"impl0_512": 1.0, "impl1_1024": None, "loose": None}


def test_a_profiled_speedup_is_marked_when_one_run_is_launch_bound(tmp_path):
    """eager: gemm 100 µs in a 60 µs host range, blocks' span 103, idle 3 (not launch-bound); fast: gemm 10 in 90,
    span 90, idle 80 (launch-bound). Attention busy per step 100 / 10: 10×, marked, one of the two runs waits for
    its host; step busy the same 10×, marked too (each 1500 µs ProfilerStep idles far over half)."""
    root = tmp_path / "s"
    for name, gemm, host in (("eager_64", 100, 60), ("fast_64", 10, 90)):
        (root / name).mkdir(parents=True)
        _launch_bound_trace(root / name / "t.pt.trace.json", gemm=gemm, host=host)
    rows = {r.name: r for r in run_rows(analyze(root, by="run").check())}
    assert (rows["eager_64"].launch_bound, rows["fast_64"].launch_bound) == (False, True)
    fast = rows["fast_64"]
    assert fast.attention_speedup == pytest.approx(100 / 10) and fast.attention_speedup_launch_bound
    assert fast.step_speedup == pytest.approx(100 / 10) and fast.step_speedup_launch_bound
    text = TerminalRenderer(by="run", width=120).render(analyze(root, by="run").check())
    line = next(x for x in text.splitlines() if x.startswith("fast_64"))
    assert line.count("10.00× p!") == 2  # never drawn as a plain speedup
