"""The CLI as users and CI scripts drive it: formats, output files, exit codes, import weight."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.builders import TraceBuilder, attention_block, golden_trace, steps_trace
from support.paths import GOLDEN, H200, ROOT, SWEEP, requires_h200
from support.cli import run_cli
from tracekit.results.attribution import CATEGORIES




@pytest.fixture
def trace(tmp_path):
    return golden_trace(tmp_path / "run.pt.trace.json.gz")


def test_json_matches_the_golden_contract(trace):
    proc = run_cli("attribute", trace, "--format", "json", check=True)
    out = json.loads(proc.stdout)
    out["tool"] = "tracekit X.Y.Z"
    golden = json.loads((GOLDEN / "attribute.json").read_text())
    assert out == golden
    for b in out["blocks"]:
        assert set(b["categories"]) == set(CATEGORIES)
        assert sum(b["categories"].values()) == pytest.approx(b["total_us"])
    assert "hf_" not in proc.stdout and "HF_TOKEN" not in proc.stdout


def test_csv_has_a_stable_header_and_one_row_per_block_and_category(trace):
    proc = run_cli("attribute", trace, "--format", "csv", check=True)
    rows = list(csv.reader(io.StringIO(proc.stdout)))
    assert rows[0] == (GOLDEN / "attribute_header.csv").read_text().strip().split(",")
    assert len(rows) == 1 + 2 * len(CATEGORIES)
    matmul = [r for r in rows[1:] if r[7] == "matmul"]
    assert [float(r[8]) for r in matmul] == [20.0, 20.0]


def test_table_and_markdown(trace):
    table = run_cli("attribute", trace, check=True).stdout
    assert "NVIDIA H100 80GB HBM3" in table and "CUDA 12.4" in table and "1 step (#7)" in table
    assert "layer*.attention" in table and "62.0 µs" in table  # two blocks of 31 µs
    md = run_cli("attribute", trace, "--format", "markdown", "--by", "block", check=True).stdout
    assert md.count("| layer") == 2 and "|---|" in md


def test_output_file_by_extension_and_stdout_stays_clean(trace, tmp_path):
    out = tmp_path / "a.json"
    proc = run_cli("attribute", trace, "-o", out, check=True)
    assert proc.stdout == "" and "wrote" in proc.stderr
    assert json.loads(out.read_text())["schema_version"] == 1


def test_grouping_by_step_and_layer(trace):
    by_step = run_cli("attribute", trace, "--by", "step", check=True).stdout
    assert "step 7" in by_step
    by_layer = run_cli("attribute", trace, "--by", "layer", check=True).stdout
    assert "layer0.attention" in by_layer and "layer1.attention" in by_layer


def test_custom_scope(trace):
    out = json.loads(run_cli("attribute", trace, "--scope", r"^layer1\.", "--format", "json", check=True).stdout)
    # layer0 no longer matches the scope, so its bmm → softmax → bmm is found by inference instead.
    assert [(b["name"], b["found_by"]) for b in out["blocks"]] == [("inferred attention", "inferred"),
                                                                   ("layer1.attention", "annotation")]
    assert out["blocks"][0]["total_us"] == out["blocks"][1]["total_us"] == 31.0


def test_run_folder(trace):
    out = json.loads(run_cli("attribute", trace.parent, "--format", "json", check=True).stdout)
    assert out["totals"]["blocks"] == 2


def test_console_script_and_module_agree(trace):
    exe = Path(sys.executable).parent / "tracekit"
    if not exe.exists():
        pytest.skip("console script not installed (pip install . to get it)")
    a = subprocess.run([str(exe), "attribute", str(trace), "--format", "json"], capture_output=True, text=True)
    b = run_cli("attribute", trace, "--format", "json")
    assert a.returncode == b.returncode == 0 and a.stdout == b.stdout


def test_import_and_help_stay_light():
    code = ("import sys, tracekit; from tracekit.cli import cli\n"
            "try:\n    cli(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "cli(['attribute', '--help'], standalone_mode=False)\n"
            "heavy = [m for m in ('torch', 'tensorboard', 'pandas', 'numpy') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "attribute" in proc.stdout


def test_version():
    assert run_cli("--version", check=True).stdout.startswith("tracekit, version ")


def test_progress_line_only_on_a_terminal_and_only_for_slow_loads(tmp_path):
    import io

    from tracekit.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    quiet = io.StringIO()
    p = Progress(stream=quiet)
    p.update("t.json", 5, 10)
    assert quiet.getvalue() == "" and not p.enabled  # not a terminal: nothing

    tty = Tty()
    p = Progress(stream=tty)
    p.update("t.json", 5, 10)
    assert tty.getvalue() == ""  # a quick load: nothing
    p.start -= 2 * Progress.DELAY_S
    p.update("t.json", 5_000_000, 10_000_000)
    assert "reading t.json" in tty.getvalue() and "50.0%" in tty.getvalue()
    p.close()
    assert tty.getvalue().endswith("\r\033[K")


def test_progress_reports_bytes_read(trace):
    from tracekit import analyze

    seen = []
    analyze(trace, progress=lambda name, done, total: seen.append((name, done, total)))
    assert seen and seen[-1][0] == trace.name and seen[-1][1] == seen[-1][2] == trace.stat().st_size


_HEAP_PROBE = """
import ctypes, sys
if sys.argv[1] == "tuned":
    from tracekit.cli import _keep_big_buffers
    _keep_big_buffers()
b = bytearray(40 << 20)
addr = ctypes.addressof((ctypes.c_char * len(b)).from_buffer(b))
for line in open("/proc/self/maps"):
    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
    if lo <= addr < hi:
        print("heap" if line.rstrip().endswith("[heap]") else "own mapping")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or "glibc" not in " ".join(__import__("platform").libc_ver()),
                    reason="glibc's mallopt")
def test_commands_keep_big_buffers_on_the_heap() -> None:
    # the kernel's own map of the process: a 40 MB buffer is its own mmap by default (fresh pages each
    # time, freed back to the kernel), and comes from the reusable heap once a command has tuned malloc
    where = {mode: subprocess.run([sys.executable, "-c", _HEAP_PROBE, mode], capture_output=True, text=True,
                                  check=True).stdout.strip() for mode in ("default", "tuned")}
    assert where == {"default": "own mapping", "tuned": "heap"}


_QUICK_EXIT = """
import atexit, sys, threading
from tracekit.cli import main
atexit.register(lambda: sys.stderr.write("atexit ran\\n"))
if sys.argv[1] in ("thread", "Dask-Offload_0"):
    stop = threading.Event()
    threading.Thread(target=stop.wait, daemon=True, name=sys.argv[1]).start()
sys.argv = ["tracekit", *sys.argv[2:]]
main()
"""


@pytest.mark.parametrize("thread", ["", "thread", "Dask-Offload_0"])
def test_main_flushes_everything_then_skips_the_teardown_unless_threads_live(thread: str, tmp_path: Path) -> None:
    # after the output, os._exit: no object-by-object teardown of the model (and no atexit handlers);
    # with another thread alive, Python's own exit instead, except for Dask's offload thread (idle once
    # --dask's cluster is closed). Exit codes and every output byte either way.
    b = TraceBuilder()
    for k in range(200):
        attention_block(b, 1000 + 400 * k, name=f"layer{k}.attention")
    trace = b.write(tmp_path / "t.json")
    proc = subprocess.run([sys.executable, "-c", _QUICK_EXIT, thread or "-", "attribute", str(trace),
                           "--format", "json"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # all of it, though the process left with os._exit
    assert len(out["blocks"]) == 200
    assert ("atexit ran" in proc.stderr) == (thread == "thread")
    bad = subprocess.run([sys.executable, "-c", _QUICK_EXIT, "-", "attribute", str(tmp_path / "missing.json")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode != 0 and bad.stderr.startswith("Error:") and "atexit ran" not in bad.stderr


@pytest.mark.parametrize("args, files_at_once, decoders", [
    ((), None, None),  # the library's defaults (tracekit.run.execute), the same for both
    (("-j", "3"), 3, 3),  # -j alone on one trace also sets its decode workers
    (("-j", "3", "--decode-workers", "1"), 3, 1),
    (("--decode-workers", "2"), None, 2),
])
def test_jobs_and_decode_workers_reach_the_library(trace, monkeypatch, args, files_at_once, decoders):
    """The CLI passes each of the two numbers under its own name; unset, it leaves the default to the library."""
    from click.testing import CliRunner

    import tracekit.run.api as api
    from tracekit.cli import cli

    seen: dict[str, object] = {}
    real = api.analyze

    def spy(*a: object, **kw: object):
        seen.update(jobs=kw.get("jobs"), decode_workers=kw.get("decode_workers"))
        return real(*a, **kw)

    monkeypatch.setattr(api, "analyze", spy)
    out = CliRunner().invoke(cli, ["attribute", str(trace), "--format", "json", *args])
    assert out.exit_code == 0, out.output
    assert seen == {"jobs": files_at_once, "decode_workers": decoders}
    assert json.loads(out.stdout)["totals"]["blocks"] > 0


# -- two folders of runs (issue 37): paired by run name, the gate over the pairs, every exit code
# (support.pairs.paired_sweeps: ``slower`` 25 -> 45 µs a step by default, ``bound`` launch-bound both sides)


def test_report_step_the_trace_lacks_is_a_usage_error_naming_its_steps(tmp_path):
    """Issue 41 row 7: ``report --step 99999`` (or -1, 0) drew the median step and exited 0; now exit 2, one
    line naming the steps with blocks (1, 2, 3: steps_trace's), and no page. A step of the trace is drawn."""
    trace, _ = steps_trace(tmp_path / "s.pt.trace.json")
    for step in (99999, -1, 0):
        out = tmp_path / f"r{step}.html"
        proc = run_cli("report", trace, "-o", out, "--step", step)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0] == f"Error: --step {step}: no step {step} in the trace (steps with attention blocks: 1, 2, 3)"
        assert not out.exists()
    proc = run_cli("report", trace, "-o", tmp_path / "r2.html", "--step", 2)
    assert proc.returncode == 0 and (tmp_path / "r2.html").exists(), proc.stderr


def test_folders_of_runs_exit_4_naming_the_regressing_pair(tmp_path):
    from support.pairs import paired_sweeps

    before, after = paired_sweeps(tmp_path)
    proc = run_cli("diff", before, after, "--fail-if-slower", "5%")
    assert proc.returncode == 4, proc.stderr
    err = proc.stderr.splitlines()
    assert err[-1] == "fail-if-slower 5%: REGRESSION in 1 of 2 run pairs: slower"
    assert "run slower: fail-if-slower 5%: REGRESSION: attention time 25.0 µs → 45.0 µs (+80.0%, median step)" \
        in err[-2]
    assert err[-3].startswith("run bound: fail-if-slower 5%: inconclusive: before and after are launch-bound")
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
            if line.startswith(("bound ", "slower "))}
    # the row leads on the whole step (step span); the gate decided on attention, and the verdict says so
    assert rows["slower"][-1] == "regression†" and rows["bound"][-1] == "inconclusive"
    assert "† the gate's verdict, decided on its own basis, not the row's: attention (median step) for slower" \
        in " ".join(proc.stdout.split())  # (wrapped to the terminal's width)
    assert "runs only before: gone · only after: new" in proc.stdout


def test_folders_of_runs_exit_5_when_a_pair_is_inconclusive_and_none_regresses(tmp_path):
    from support.pairs import paired_sweeps

    before, after = paired_sweeps(tmp_path, slower_after=10)
    proc = run_cli("diff", before, after, "--fail-if-slower", "5%")
    assert proc.returncode == 5, proc.stderr
    assert proc.stderr.splitlines()[-1] == "fail-if-slower 5%: inconclusive: 1 of 2 run pairs (bound), none regresses"
    ok = run_cli("diff", before, after, "--fail-if-slower", "5%", "--gate-on", "busy")
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr.splitlines()[-1] == "fail-if-slower 5%: ok: 2 run pairs, none slower by more than 5%"
    assert run_cli("diff", before, after).returncode == 0  # no gate: the report alone


def test_folders_of_runs_usage_errors_exit_2_with_one_line(tmp_path):
    from support.pairs import paired_sweeps, run_folders, steps_of, busy, eager

    before, after = paired_sweeps(tmp_path)
    other = run_folders(tmp_path / "other", {"x_1": steps_of(busy(eager), "gemm", [10]),
                                             "x_2": steps_of(busy(eager), "gemm", [10])})
    for args, says in (((before, other), "are folders of runs with no run name in common"),
                       ((before, after / "slower"), "is a folder of 3 runs (sub-folders with traces, as --by run"),
                       ((before, after, "--fail-if-slower", "5", "--latency-before", "2", "--latency-after", "2"),
                        "--latency-before/--latency-after give one latency, and these are folders of runs"),
                       ((before, after, "--dask", "local:1"), "two folders of runs are diffed run by run, read here")):
        proc = run_cli("diff", *args)
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("Error: ") and says in proc.stderr


def test_a_run_pairs_own_warnings_name_the_run(tmp_path):
    """Run ``x`` has no attention block after: its pair's diff says so, named by the run (the sum of x and y has
    blocks on both sides, so the diff's own warnings do not)."""
    from support.pairs import busy, eager, plain, run_folders, steps_of

    b = run_folders(tmp_path / "b", {n: steps_of(busy(eager), "gemm", [10] * 3) for n in ("x", "y")})
    a = run_folders(tmp_path / "a", {"x": [[plain]] * 3, "y": steps_of(busy(eager), "gemm", [10] * 3)})
    err = run_cli("diff", b, a, check=True).stderr.splitlines()
    assert [w for w in err if "no attention blocks" in w] == ["Warning: run x: no attention blocks in after (x)"]


def test_folders_of_runs_in_json_csv_and_markdown(tmp_path):
    """support.steps.lead_sweeps: each pair leads on its own whole step (step busy, step span), or on its attention
    where it has no ProfilerStep, with figures known by construction; the gate's verdicts are its own."""
    from support.pairs import paired_sweeps
    from support.steps import lead_sweeps

    before, after = lead_sweeps(tmp_path / "lead")
    data = json.loads(run_cli("diff", before, after, "--format", "json", check=True).stdout)
    assert [(p["run"], p["before"], p["after"], p["verdict"]) for p in data["run_pairs"]] == [
        ("heavier", "before/heavier", "after/heavier", "slower"), ("longer", "before/longer", "after/longer", "longer"),
        ("noisy", "before/noisy", "after/noisy", "within noise"),
        ("unstepped", "before/unstepped", "after/unstepped", "slower, noise unknown")]
    heads = {p["run"]: p["headline"] for p in data["run_pairs"]}
    assert [(h["basis"], h["before_us"], h["after_us"], h["within_noise"], h["claims_speedup"])
            for h in heads.values()] == [("step busy", 150, 200, False, True), ("step span", 1020, 2020, False, False),
                                         ("step busy", 150, 160, True, True),
                                         ("attention (total)", 25, 45, None, True)]
    assert heads["heavier"]["speedup"] == pytest.approx(150 / 200, abs=1e-4)
    assert heads["longer"]["note"].startswith("before and after launch-bound")
    for run, h in heads.items():  # each pair's headline is the lead of a diff of those two run folders alone
        alone = json.loads(run_cli("diff", before / run, after / run, "--format", "json", check=True).stdout)
        lead = alone["headline"] if alone["headline"]["basis"] else {**alone["attention"], "basis": "attention (total)"}
        assert (h["basis"], h["before_us"], h["after_us"]) == (lead["basis"], lead["before_us"], lead["after_us"])
    assert (data["runs_only_before"], data["runs_only_after"]) == ([], []) and "ranks" not in data
    sweeps = paired_sweeps(tmp_path / "gate")  # runs on one side only, and a gate that decides
    gated = json.loads(run_cli("diff", *sweeps, "--format", "json", "--fail-if-slower", "5").stdout)
    assert [(p["verdict"], p["verdict_basis"]) for p in gated["run_pairs"]] == [
        ("inconclusive", None), ("regression", "attention (median step)")]  # the gate's basis, not the headline's
    assert [p["verdict_basis"] for p in data["run_pairs"]] == [h["basis"] for h in heads.values()]  # ungated
    assert (gated["runs_only_before"], gated["runs_only_after"]) == (["gone"], ["new"])

    rows = list(csv.DictReader(io.StringIO(run_cli("diff", before, after, "--format", "csv", check=True).stdout)))
    pairs = [(r["trace_before"], r["basis"], r["before_us"], r["after_us"], r["paired_by"]) for r in rows
             if r["section"] == "run_pair"]
    assert pairs == [("heavier", "step busy", "150.000", "200.000", "slower"),
                     ("longer", "step span", "1020.000", "2020.000", "longer"),
                     ("noisy", "step busy", "150.000", "160.000", "within noise"),
                     ("unstepped", "attention (total)", "25.000", "45.000", "slower, noise unknown")]
    gone = list(csv.DictReader(io.StringIO(run_cli("diff", *sweeps, "--format", "csv", check=True).stdout)))
    assert [(r["section"], r["trace_before"], r["trace_after"]) for r in gone if r["section"].startswith("run_only")] \
        == [("run_only_before", "gone", ""), ("run_only_after", "", "new")]

    md = run_cli("diff", before, after, "--format", "markdown", check=True).stdout
    assert "| heavier | step busy | 150 µs | 200 µs | +33.3% (1.33× slower) | slower |" in md
    assert "| longer | step span | 1.02 ms | 2.02 ms | +98.0% (1.98× longer) | longer |" in md
    assert "| unstepped | attention (total) | 25.0 µs | 45.0 µs | +80.0% (1.80× slower) | slower, noise unknown |" in md
    assert "- runs only before: gone · only after: new" in run_cli("diff", *sweeps, "--format", "markdown",
                                                                   check=True).stdout


@requires_h200
def test_h200_sweep_against_sparse_pairs_the_two_eager_runs(tmp_path):
    """The shared folders (summary.md): the sweep's 32 runs against sparse's 4 share eager_512 and eager_4096. Each
    pair's figures are the diff of those two run folders on their own; eager_512 is launch-bound both sides and
    eager_4096 has two steps a side (no step-to-step spread), so the gate is inconclusive on both (exit 5), and no
    rank table sets one run against another."""
    proc = run_cli("diff", SWEEP, H200 / "sparse", "--fail-if-slower", "5%", "--format", "json")
    assert proc.returncode == 5, proc.stderr
    assert proc.stderr.splitlines()[-1] == \
        "fail-if-slower 5%: inconclusive: 2 of 2 run pairs (eager_512, eager_4096), none regresses"
    data = json.loads(proc.stdout)
    assert [p["run"] for p in data["run_pairs"]] == ["eager_512", "eager_4096"] and "ranks" not in data
    assert data["runs_only_after"] == ["sparse_512", "sparse_4096"] and len(data["runs_only_before"]) == 30
    assert [p["verdict"] for p in data["run_pairs"]] == ["inconclusive", "inconclusive"]
    for p in data["run_pairs"]:  # a pair leads as a diff of its two run folders alone: the whole step
        alone = json.loads(run_cli("diff", SWEEP / p["run"], H200 / "sparse" / p["run"], "--format", "json",
                                   check=True).stdout)["headline"]
        assert (p["headline"]["basis"], p["headline"]["before_us"], p["headline"]["after_us"]) == \
            (alone["basis"], pytest.approx(alone["before_us"], abs=1e-3), pytest.approx(alone["after_us"], abs=1e-3))
    # eager_512 is launch-bound both sides: its lead is the step span; eager_4096 is not: the step busy time
    assert [p["headline"]["basis"] for p in data["run_pairs"]] == ["step span", "step busy"]


# ---------------------------------------------------------------------------------------------
# --latency-before/--latency-after (issue 37): a spread, samples, a bare number (one sample), or a usage error.


@pytest.fixture
def cpu_pair(tmp_path):
    from support.pairs import cpu_trace

    return cpu_trace(tmp_path / "a.json", 40), cpu_trace(tmp_path / "b.json", 40)


def _gate_cli(pair, before: str, after: str):
    from click.testing import CliRunner

    from tracekit.cli import cli

    return CliRunner().invoke(cli, ["diff", str(pair[0]), str(pair[1]), "--fail-if-slower", "5%",
                                    "--latency-before", before, "--latency-after", after])


@pytest.mark.parametrize("before,after,code,words", [
    ("2.0±0.05", "2.5±0.05", 4, "REGRESSION: measured latency (--latency-before / --latency-after) 2.00 ms → 2.50 ms "
                                "(+25.0%, median of repeats) is more than 5% slower; the spreads are apart"),
    ("2.0+-0.05", "1.9+-0.05", 0, "ok: measured latency (--latency-before / --latency-after) 2.00 ms → 1.90 ms"),
    ("2.0 ± 0.04", "2.02±0.05", 5, "inconclusive: measured latency: the spreads overlap: after 1.970–2.070 ms "
                                   "against before +5% 2.058–2.142 ms"),
    ("2.0,2.1,2.2", "2.4,2.5,2.32", 4, "Mann-Whitney U 9 of 9, 3 repeats after against 3 before +5%: slower"),
    ("2.0,2.1,2.2", "2.15,2.2,2.3", 5, "Mann-Whitney U 4 of 9"),
    ("2.0", "2.5", 5, "inconclusive: measured latency: before (--latency-before) is one sample (give MS±S, or each "
                      "repeat's time MS,MS,MS); after (--latency-after) is one sample"),
    ("2.0,2.1", "2.4,2.5,2.6", 5, "before (--latency-before) has 2 repeats; the gate needs at least 3"),
])
def test_latency_options_take_a_spread_or_samples(cpu_pair, before, after, code, words):
    out = _gate_cli(cpu_pair, before, after)
    assert out.exit_code == code, out.output
    [line] = [x for x in out.stderr.splitlines() if x.startswith("fail-if-slower 5%:")]
    assert words in line
    assert "Traceback" not in out.output and out.stdout  # the diff itself is still printed


@pytest.mark.parametrize("text", ["abc", "2.5±", "±0.1", "2.5±3", "2.5±2.5", "0", "-1", "1,,2", "2.5,abc", "inf",
                                  "1e3", "2.5ms", "", "0,1,2", "٢.5", "9" * 4000 + "x",
                                  # issue 41, rows 1 and 6: non-finite, and finite but outside 1 ns .. 1 day
                                  "nan", "NaN", "1e400", "-inf", "1" + "0" * 400, "1" + "0" * 308,
                                  "0." + "0" * 323 + "5", "0.0000009", "86400000.1", "2.0,2.1,1" + "0" * 308,
                                  "1" + "0" * 308 + "±1", "2.0±1.9999999999"])
@pytest.mark.parametrize("side", ["before", "after"])
def test_malformed_latency_is_a_one_line_usage_error(cpu_pair, text, side):
    args = ("2.0±0.1", text) if side == "after" else (text, "2.0±0.1")
    out = _gate_cli(cpu_pair, *args)
    assert out.exit_code == 2, out.output
    assert out.stderr.splitlines() == [out.stderr.strip()] and out.stderr.startswith(f"Error: --latency-{side}: ")
    assert len(out.stderr) < 200  # the value is quoted, not echoed whole
    assert out.stdout == ""  # refused before any work


@pytest.mark.parametrize("side", ["before", "after"])
def test_a_latency_flag_alone_is_a_one_line_usage_error(cpu_pair, side):
    """Issue 41, row 1: one ``--latency-*`` flag, and no measured.json on the other side, was silently ignored."""
    from click.testing import CliRunner

    from tracekit.cli import cli

    out = CliRunner().invoke(cli, ["diff", str(cpu_pair[0]), str(cpu_pair[1]), "--fail-if-slower", "5%",
                                   f"--latency-{side}", "2.0,2.1,2.2"])
    other = "after" if side == "before" else "before"
    assert out.exit_code == 2, out.output
    assert out.stderr.splitlines() == [f"Error: --latency-{side} given without a latency for {other}: give "
                                       f"--latency-{other} too, or put the recorder's measured.json beside "
                                       f"{other}'s traces"]
    assert out.stdout == ""


def test_latency_range_is_the_same_for_flags_and_measured_json():
    """Issue 41, row 6: one plausible range (results/measured.py) bounds a latency however it arrives: its ends
    are taken, just past them refused, by --latency-* and by measured.json alike."""
    import json

    from tracekit.analysis.gate import parse_latency
    from tracekit.results.measured import LATENCY_RANGE_MS, MEASURED_SCHEMA
    from tracekit.run.measured import MeasuredError, parse_measured

    lo, hi = LATENCY_RANGE_MS
    assert (lo, hi) == (1e-6, 24 * 3600 * 1000.0)  # 1 ns and 1 day, in ms
    for ok in (lo, hi):
        assert parse_latency(f"{ok:.6f}", "before").median_ms == ok
        assert parse_measured(json.dumps({"schema": MEASURED_SCHEMA, "median_ms": ok}).encode()).median_ms == ok
    for bad in (lo * 0.99, hi * 1.0001):
        with pytest.raises(ValueError, match="between 1 ns and 1 day"):
            parse_latency(f"{bad:.10f}", "before")
        with pytest.raises(MeasuredError, match="between 1 ns and 1 day"):
            parse_measured(json.dumps({"schema": MEASURED_SCHEMA, "median_ms": bad}).encode())


@pytest.mark.parametrize("step", [str(2**64), str(2**63), "1" + "0" * 40])
def test_report_step_past_int64_is_a_usage_error(tmp_path, step):
    """Issue 41, row 2: ``report --step 18446744073709551616`` was a TypeError traceback from the JSON writer."""
    from support.pairs import cpu_trace

    trace = cpu_trace(tmp_path / "t.json", 40)
    proc = run_cli("report", trace, "-o", tmp_path / "r.html", "--step", step)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and [ln for ln in proc.stderr.splitlines() if ln.startswith("Error:")] \
        == [ln for ln in proc.stderr.splitlines() if "--step" in ln and ln.startswith("Error:")] != []
    assert not (tmp_path / "r.html").exists()


def test_latency_parse_forms():
    from tracekit.analysis.gate import parse_latency

    m = parse_latency("2.51±0.04", "before")
    assert (m.median_ms, m.samples_ms, m.source, m.spread_kind) == (2.51, None, "--latency-before", "±")
    assert (m.low_ms, m.high_ms) == pytest.approx((2.47, 2.55))
    assert parse_latency("2.51+-0.04", "after").high_ms == pytest.approx(2.55)
    m = parse_latency("2.55,2.49,2.51,2.6", "before")
    assert (m.median_ms, m.low_ms, m.high_ms, m.repeats) == (pytest.approx(2.53), 2.49, 2.6, 4)
    assert m.samples_ms == (2.55, 2.49, 2.51, 2.6)
    one = parse_latency("2.51", "after")
    assert (one.median_ms, one.sample_count, one.half_spread_ms) == (2.51, 1, None)


# -- tracekit whatif (issue 39) --------------------------------------------------------------------------------------
def _hostile_eager(tmp_path: Path) -> Path:
    """An H200 trace whose one eager block carries a hostile name (a formula start, markdown and a newline)."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])
    b.annotation("=HYPERLINK(1)|*x*\nattention", 0, 200)
    dims = {"Input Dims": [[1, 4, 256, 64], [1, 4, 64, 256]], "Input type": ["c10::BFloat16"] * 2}
    b.op("aten::matmul", 1, 10)["args"].update(dims)
    b.launch("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)",
             2, 1, 1000, 40)
    b.op("aten::softmax", 20, 10)["args"].update({"Input Dims": [[1, 4, 256, 256], [], []],
                                                   "Input type": ["c10::BFloat16", "Scalar", "Scalar"]})
    b.launch("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 8>(x)",
             21, 1, 1040, 20)
    b.op("aten::matmul", 40, 10)["args"].update({"Input Dims": [[1, 4, 256, 256], [1, 4, 256, 64]],
                                                  "Input type": ["c10::BFloat16"] * 2})
    b.launch("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)",
             41, 1, 1060, 30)
    return b.write(tmp_path / "t.pt.trace.json")


def test_whatif_formats_agree_and_keep_hostile_names_inert(tmp_path):
    trace = _hostile_eager(tmp_path)
    doc = json.loads(run_cli("whatif", trace, "--format", "json", check=True).stdout)
    [block] = doc["whatif"]["blocks"]
    assert block["name"] == "=HYPERLINK(1)|*x*\nattention" and block["fused_us"] > 0
    assert block["eager_core_us"] == pytest.approx(90.0) and block["confidence"] == "in-scope"
    table = run_cli("whatif", trace, check=True).stdout
    assert "\\n" in table and "\nattention" not in table  # the newline shown as its escape, never a line break
    rows = list(csv.reader(io.StringIO(run_cli("whatif", trace, "--format", "csv", check=True).stdout)))
    assert rows[1][1].startswith("'=HYPERLINK")  # a formula start written as text
    md = run_cli("whatif", trace, "--format", "markdown", check=True).stdout
    assert "=HYPERLINK(1)\\|*x*\\\\nattention |" in md  # the cell separator escaped, the newline shown as \\n


def test_whatif_writes_a_file_and_never_over_its_input(tmp_path):
    trace = _hostile_eager(tmp_path)
    out = tmp_path / "w.json"
    run_cli("whatif", trace, "-o", out, check=True)
    assert json.loads(out.read_text())["whatif"]["backend"] in ("cudnn", "flash", "efficient")
    proc = run_cli("whatif", trace, "--format", "json", "-o", trace)
    assert proc.returncode != 0 and proc.stderr.startswith("Error: ") and "Traceback" not in proc.stderr
    assert json.loads(trace.read_text())["traceEvents"]


def test_whatif_refuses_what_it_cannot_read_with_one_line(tmp_path):
    missing = run_cli("whatif", tmp_path / "nope.json")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1 and missing.stderr.startswith("Error: ")
    _hostile_eager(tmp_path)
    (tmp_path / "u.pt.trace.json").write_text((tmp_path / "t.pt.trace.json").read_text())
    two = run_cli("whatif", tmp_path)
    assert two.returncode == 2 and "whatif reads one trace" in two.stderr and "Traceback" not in two.stderr


def test_whatif_on_a_cpu_trace_says_why_there_is_no_number(tmp_path):
    proc = run_cli("whatif", ROOT / "sample_traces" / "cpu_eager_256.pt.trace.json.gz", check=True)
    assert "no prediction: a CPU-only trace" in proc.stdout


def _calibration_file(tmp_path: Path, **changes) -> Path:
    entry = {"device": "NVIDIA H200", "backend": "cudnn", "eta_max": 0.25, "l_half": 500.0, "sms": 132, "tile_q": 128,
             "floor_us": 4.0, "small_us": 1.0, "head_dim": 64, "causal": True, "phase": "forward", "points": 3,
             "source": "my own sweep", **changes}
    p = tmp_path / "mine.json"
    p.write_text(json.dumps({"tracekit_calibration": 1, "entries": [entry]}))
    return p


def test_whatif_calibration_flag_uses_the_file_and_names_it(tmp_path):
    """Issue 39: --calibration FILE replaces the built-in entries of its device; the output names the file."""
    trace, cal = _hostile_eager(tmp_path), _calibration_file(tmp_path)
    doc = json.loads(run_cli("whatif", trace, "--format", "json", "--backend", "all", "--calibration", cal,
                             check=True).stdout)
    assert doc["whatif"]["calibration"]["origin"] == str(cal) and doc["whatif"]["calibration"]["eta_max"] == 0.25
    assert "by_backend" not in doc  # the file has only cudnn for the H200: no built-in flash or efficient beside it
    built_in = json.loads(run_cli("whatif", trace, "--format", "json", "--backend", "cudnn", check=True).stdout)
    assert built_in["whatif"]["calibration"]["origin"] == "built-in"
    assert doc["whatif"]["blocks"][0]["fused_us"] > built_in["whatif"]["blocks"][0]["fused_us"]  # eta 0.25 < 0.54
    assert f"(from {cal})" in run_cli("whatif", trace, "--calibration", cal, check=True).stdout


@pytest.mark.parametrize("bad", ["not json", "dir", "fifo", "nan", "negative", "huge"])
def test_whatif_refuses_a_bad_calibration_file_in_one_line(tmp_path, bad):
    trace = _hostile_eager(tmp_path)
    cal = {"not json": lambda: _write_text(tmp_path / "c.json", "{"), "dir": lambda: tmp_path,
           "fifo": lambda: _fifo(tmp_path / "f"),
           "nan": lambda: _write_text(tmp_path / "c.json", _calibration_file(tmp_path).read_text()
                                      .replace("0.25", "NaN")),
           "negative": lambda: _calibration_file(tmp_path, floor_us=-4.0),
           "huge": lambda: _write_text(tmp_path / "c.json", " " * (2 << 20))}[bad]()
    proc = run_cli("whatif", trace, "--calibration", cal, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.startswith(f"Error: calibration file {cal}: ") and proc.stderr.count("\n") == 1, proc.stderr
    env = subprocess.run([sys.executable, "-m", "tracekit", "whatif", str(trace), "--format", "json"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT,
                         env={**os.environ, "TRACEKIT_CALIBRATION": str(cal)})
    assert env.returncode == 0 and "Traceback" not in env.stderr
    assert env.stderr.startswith("Warning: TRACEKIT_CALIBRATION: calibration file ") and env.stderr.count("\n") == 1
    assert json.loads(env.stdout)["whatif"]["calibration"]["origin"] == "built-in"


def _write_text(p: Path, text: str) -> Path:
    p.write_text(text)
    return p


def _fifo(p: Path) -> Path:
    os.mkfifo(p)
    return p


def test_whatif_never_writes_over_its_calibration_file(tmp_path):
    trace, cal = _hostile_eager(tmp_path), _calibration_file(tmp_path)
    before = cal.read_bytes()
    proc = run_cli("whatif", trace, "--calibration", cal, "--format", "json", "-o", cal)
    assert proc.returncode == 2 and proc.stderr.startswith("Error: ") and proc.stderr.count("\n") == 1
    assert cal.read_bytes() == before


def test_by_op_and_by_kernel_on_the_command_line(tmp_path):
    """``--by op`` computes the op table (JSON "ops", the terminal's op rows); the default JSON has no "ops" key;
    ``--by kernel`` lists every kernel the blocks own (issue 42)."""
    from support.builders import op_table_trace

    path = op_table_trace(tmp_path / "t.json")
    plain = json.loads(run_cli("attribute", path, "--format", "json", check=True).stdout)
    ops = json.loads(run_cli("attribute", path, "--format", "json", "--by", "op", check=True).stdout)
    assert "ops" not in plain and [o["op"] for o in ops["ops"]] == ["aten::bmm", "aten::bmm", "aten::_softmax"]
    assert {k: v for k, v in ops.items() if k != "ops"} == plain
    table = run_cli("attribute", path, "--by", "op", check=True).stdout
    assert "ops whose FLOPs are counted in blocks, per step (mean over 2 steps)" in table
    kernels = run_cli("attribute", path, "--by", "kernel", "--format", "csv", check=True).stdout
    assert kernels.splitlines()[0] == "kernel,category,calls,time_us,time_per_step_us,steps"
    assert len(kernels.splitlines()) == 1 + 2  # the GEMM kernel (both bmm) and the softmax kernel


_SHOW_BLAS = ("import os, tracekit.cli as c\n"
              "c.cli = lambda **k: print(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
              "c.main()\n")


@pytest.mark.parametrize(("given", "seen"), [(None, "1"), ("3", "3")])
def test_the_command_line_runs_numpy_with_one_blas_thread_unless_told(given, seen):
    """The console entry point sets OPENBLAS_NUM_THREADS=1 before any command runs (numpy's thread pool would spin
    on the second core for nothing: tracekit calls no BLAS routine); a value the user set is kept."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    proc = subprocess.run([sys.executable, "-c", _SHOW_BLAS], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == seen


def test_importing_tracekit_leaves_the_blas_settings_alone():
    """A notebook's process: importing and using the library sets nothing in the environment."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    code = "import os, tracekit, tracekit.cli; print(os.environ.get('OPENBLAS_NUM_THREADS'))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.stdout.strip() == "None", proc.stderr
