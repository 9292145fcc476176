"""Issue 8 reproducers for the CLI and input discovery: -o over an input, partial folders,
duplicates, odd files, -o details, the gate over mixed time bases, strict PCT, streamed output,
the parallel path, and a light ``--help``.

Each test builds its own traces (tests/support/builders.py) so the expected figures follow from the
construction: one ``attention_block`` is 31 µs busy (matmul 20, softmax 5, elementwise 2, memory 4).
"""

from __future__ import annotations

import csv
import errno
import gzip
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.builders import TraceBuilder, attention_block
from support.paths import ROOT
from support.cli import run_cli

BLOCK_US = 31.0  # busy time of one attention_block, by construction


def _trace(path: Path, blocks: int = 2) -> Path:
    b = TraceBuilder()
    for k in range(blocks):
        attention_block(b, 1000 + 200 * k, name=f"layer{k}.attention")
    path.parent.mkdir(parents=True, exist_ok=True)
    return b.write(path)


def _cpu_trace(path: Path) -> Path:
    """A CPU-only trace: one annotated block of 40 µs host self time (more than BLOCK_US)."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 50)
    b.op("aten::_scaled_dot_product_flash_attention_for_cpu", 1, 40)
    return b.write(path)


def _json_out(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode in (0, 3), proc.stderr
    return json.loads(proc.stdout)


def _one_error_line(proc: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    err = lines[-1] if lines else ""
    assert "Traceback" not in proc.stderr and err.startswith("Error: "), proc.stderr
    assert all(line.startswith("Warning: ") for line in lines[:-1]), proc.stderr
    for n in needles:
        assert n in err, err
    return err


def _invoke(args: list[str]):
    """The CLI in this process (so monkeypatches apply); stderr kept apart from stdout."""
    from tracekit.cli import cli

    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


# ---------------------------------------------------------------------------------------------
# 1. -o replaces an input


def test_output_over_a_folders_own_trace_is_refused(tmp_path):
    d = tmp_path / "run"
    inp = _trace(d / "trace.json")  # a plainly named trace: the folder's fallback discovery reads it
    before = inp.read_bytes()
    _one_error_line(run_cli("attribute", d, "-o", d / "trace.json"), 2, "refusing to overwrite an input trace")
    assert inp.read_bytes() == before


def test_output_through_a_hard_link_or_symlink_to_an_input_is_refused(tmp_path):
    inp = _trace(tmp_path / "w.pt.trace.json")
    before = inp.read_bytes()
    hard = tmp_path / "hard.json"
    os.link(inp, hard)
    soft = tmp_path / "soft.json"
    soft.symlink_to(inp)
    for out in (hard, soft):
        _one_error_line(run_cli("attribute", inp, "-o", out), 2, "refusing to overwrite an input trace")
    assert inp.read_bytes() == before


def test_diff_output_over_an_input_of_a_folder_side_is_refused(tmp_path):
    a = _trace(tmp_path / "a" / "rank0.json")
    b = _trace(tmp_path / "b" / "rank0.json")
    before = b.read_bytes()
    _one_error_line(run_cli("diff", a.parent, b.parent, "-o", b), 2, "refusing to overwrite an input trace")
    assert b.read_bytes() == before


# ---------------------------------------------------------------------------------------------
# 2. Silent partial folder


def test_unlistable_subfolder_warns_and_exits_3(tmp_path, monkeypatch):
    _trace(tmp_path / "w0.pt.trace.json")
    hidden = tmp_path / "rank1"
    _trace(hidden / "w1.pt.trace.json")
    real_scandir = os.scandir

    def scandir(path="."):  # root can list a chmod-000 folder, so deny it here
        if Path(path) == hidden:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    from tracekit import analyze

    res = analyze(tmp_path).check()
    assert res.totals.blocks == 2 and res.damaged
    assert any(str(hidden) in w and "cannot list folder" in w for w in res.warnings)
    out = _invoke(["attribute", tmp_path])
    assert out.exit_code == 3
    assert f"Warning: {hidden}: cannot list folder (Permission denied)" in out.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod-000 folder anyway (the monkeypatched test covers it)")
def test_chmod_000_subfolder_warns_and_exits_3(tmp_path):
    _trace(tmp_path / "w0.pt.trace.json")
    hidden = tmp_path / "rank1"
    _trace(hidden / "w1.pt.trace.json")
    hidden.chmod(0)
    try:
        proc = run_cli("attribute", tmp_path)
    finally:
        hidden.chmod(0o755)
    assert proc.returncode == 3 and str(hidden) in proc.stderr


def test_dangling_symlink_and_fifo_in_a_folder_are_named_and_exit_3(tmp_path):
    _trace(tmp_path / "w0.pt.trace.json")
    (tmp_path / "w1.pt.trace.json.gz").symlink_to(tmp_path / "gone.json.gz")
    os.mkfifo(tmp_path / "w2.pt.trace.json")
    proc = run_cli("attribute", tmp_path, "--format", "json")
    assert proc.returncode == 3, proc.stderr
    assert _json_out(proc)["totals"]["blocks"] == 2
    assert "w1.pt.trace.json.gz: dangling symlink" in proc.stderr
    assert "w2.pt.trace.json: is a FIFO, not a trace file" in proc.stderr


# ---------------------------------------------------------------------------------------------
# 3. Duplicates


def test_json_and_json_gz_of_one_trace_count_once(tmp_path):
    _trace(tmp_path / "w.pt.trace.json", blocks=2)
    _trace(tmp_path / "w.pt.trace.json.gz", blocks=2)
    proc = run_cli("attribute", tmp_path, "--format", "json")
    assert proc.returncode == 0, proc.stderr  # documented: a duplicate is not damage
    out = _json_out(proc)
    assert out["totals"]["blocks"] == 2 and out["totals"]["total_us"] == pytest.approx(2 * BLOCK_US)
    assert "Warning:" in proc.stderr and "w.pt.trace.json.gz: duplicate of w.pt.trace.json" in proc.stderr


def test_an_unreadable_json_falls_back_to_its_json_gz(tmp_path):
    (tmp_path / "w.pt.trace.json").write_bytes(b"")  # still being written
    _trace(tmp_path / "w.pt.trace.json.gz", blocks=3)
    from tracekit import analyze

    res = analyze(tmp_path).check()
    assert res.totals.blocks == 3 and not res.damaged
    assert any("file is empty" in w and "w.pt.trace.json.gz read instead" in w for w in res.warnings)


def test_hard_linked_names_count_once(tmp_path):
    a = _trace(tmp_path / "a.pt.trace.json", blocks=1)
    os.link(a, tmp_path / "b.pt.trace.json")
    from tracekit import analyze

    res = analyze(tmp_path).check()
    assert res.totals.blocks == 1 and any("same file as" in w for w in res.warnings)


# ---------------------------------------------------------------------------------------------
# 4. Odd files: exit 1, an accurate message, and never a blocked read


def test_fifo_is_named_and_never_read(tmp_path):
    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-m", "tracekit", "attribute", str(fifo)], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)  # a blocked open would hang here
    _one_error_line(proc, 1, "is a FIFO, not a trace file")


@pytest.mark.parametrize("make,needle", [
    (lambda d: Path("/dev/null"), "is a device, not a trace file"),
    (lambda d: (d / "loop.json").symlink_to(d / "loop.json") or d / "loop.json", "symlink loop"),
    (lambda d: (d / "dangling.json").symlink_to(d / "nowhere.json") or d / "dangling.json", "dangling symlink"),
    (lambda d: (d / "empty.json").write_bytes(b"") and d / "empty.json" or d / "empty.json", "file is empty"),
])
def test_odd_paths_exit_1_with_what_they_are(tmp_path, make, needle):
    _one_error_line(run_cli("attribute", make(tmp_path)), 1, needle)


def test_unreadable_file_is_permission_denied(tmp_path, monkeypatch):
    p = _trace(tmp_path / "t.json")
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False)  # root passes chmod 000
    out = _invoke(["attribute", p])
    assert out.exit_code == 1 and out.stderr.strip() == f"Error: {p}: permission denied"


def test_one_unreadable_file_in_a_folder_warns_and_exits_3(tmp_path, monkeypatch):
    _trace(tmp_path / "w0.pt.trace.json", blocks=1)
    locked = _trace(tmp_path / "w1.pt.trace.json", blocks=2)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != locked and real_access(path, mode))
    out = _invoke(["attribute", tmp_path, "--format", "json"])
    assert out.exit_code == 3 and f"Warning: {locked}: permission denied; skipped" in out.stderr
    assert json.loads(out.stdout)["totals"]["blocks"] == 1


def test_load_trace_names_a_fifo_without_opening_it(tmp_path):
    from tracekit.errors import TraceReadError
    from tracekit.io.load import load_trace

    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)
    with pytest.raises(TraceReadError, match="is a FIFO"):
        load_trace(fifo)  # an open() would block forever: no writer


def test_odd_file_on_the_diff_side(tmp_path):
    _one_error_line(run_cli("diff", _trace(tmp_path / "a.json"), "/dev/null"), 1, "/dev/null: is a device")


# ---------------------------------------------------------------------------------------------
# 5. -o details


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_output_mode_follows_the_umask(tmp_path, umask):
    inp = _trace(tmp_path / "t.json")
    out = tmp_path / "o.json"
    code = (f"import os, sys; os.umask({umask}); "
            f"sys.argv = ['tracekit', 'attribute', {str(inp)!r}, '-o', {str(out)!r}]; "
            "from tracekit.cli import main; main()")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, capture_output=True)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask


def test_an_existing_output_keeps_its_mode(tmp_path):
    inp = _trace(tmp_path / "t.json")
    out = tmp_path / "o.json"
    out.write_text("old")
    out.chmod(0o604)
    run_cli("attribute", inp, "-o", out, check=True)
    assert stat.S_IMODE(out.stat().st_mode) == 0o604 and json.loads(out.read_text())["totals"]["blocks"] == 2


def test_full_disk_leaves_no_temp_file(tmp_path, monkeypatch):
    inp = _trace(tmp_path / "t.json")
    outdir = tmp_path / "out"
    outdir.mkdir()
    real_fdopen = os.fdopen

    class Full:
        """A file whose every write fails as on a full disk."""

        def __init__(self, f):
            self.f = f

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(os, "fdopen", lambda *a, **kw: Full(real_fdopen(*a, **kw)))
    out = _invoke(["attribute", inp, "-o", outdir / "a.json"])
    assert out.exit_code == 1 and "No space left on device" in out.stderr
    assert list(outdir.iterdir()) == []


def test_a_renderer_error_leaves_no_temp_file(tmp_path, monkeypatch):
    import tracekit.cli as cli

    class Boom:
        def stream(self, result):
            yield "partial,"
            raise OSError(errno.EIO, "renderer failed")

    monkeypatch.setattr(cli, "_attribution_renderer", lambda fmt, by: Boom())
    inp = _trace(tmp_path / "t.json")
    out = _invoke(["attribute", inp, "-o", tmp_path / "a.csv"])
    assert out.exit_code == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_format_from_extension_is_case_insensitive(tmp_path):
    inp = _trace(tmp_path / "t.json")
    out = tmp_path / "OUT.JSON"
    run_cli("attribute", inp, "-o", out, check=True)
    assert json.loads(out.read_text())["totals"]["blocks"] == 2


def test_gz_outputs_are_gzip_compressed(tmp_path):
    inp = _trace(tmp_path / "t.json")
    run_cli("attribute", inp, "-o", tmp_path / "o.json.gz", check=True)
    assert json.loads(gzip.decompress((tmp_path / "o.json.gz").read_bytes()))["totals"]["blocks"] == 2
    run_cli("attribute", inp, "-o", tmp_path / "o.csv.GZ", check=True)
    rows = list(csv.reader(io.StringIO(gzip.decompress((tmp_path / "o.csv.GZ").read_bytes()).decode())))
    assert len(rows) > 1 and "category" in rows[0]
    run_cli("diff", inp, inp, "-o", tmp_path / "d.json.gz", check=True)
    assert "categories" in json.loads(gzip.decompress((tmp_path / "d.json.gz").read_bytes()))


@pytest.mark.parametrize("name", ["out.xlsx", "report", "out.gz"])
def test_unknown_output_extension_is_a_usage_error(tmp_path, name):
    inp = _trace(tmp_path / "t.json")
    _one_error_line(run_cli("attribute", inp, "-o", tmp_path / name), 2, "cannot tell the format")
    assert not (tmp_path / name).exists()
    run_cli("attribute", inp, "-o", tmp_path / name, "--format", "csv", check=True)  # an explicit format is enough


def test_output_to_a_device_is_written_directly(tmp_path):
    inp = _trace(tmp_path / "t.json")
    proc = run_cli("attribute", inp, "--format", "json", "-o", "/dev/stdout")
    assert proc.returncode == 0 and json.loads(proc.stdout)["totals"]["blocks"] == 2
    assert os.path.exists("/dev/null") and stat.S_ISCHR(os.stat("/dev/null").st_mode)  # not replaced


# ---------------------------------------------------------------------------------------------
# 6. The gate over mixed time bases


def test_gate_refuses_device_against_host_time(tmp_path):
    gpu = _trace(tmp_path / "gpu.json", blocks=1)
    cpu = _cpu_trace(tmp_path / "cpu.json")
    err = _one_error_line(run_cli("diff", gpu, cpu, "--fail-if-slower", "5"), 1, "device busy time", "host self time")
    assert "--fail-if-slower" in err
    plain = run_cli("diff", gpu, cpu)  # no gate: the diff still renders, with its warning
    assert plain.returncode == 0 and "time bases differ" in plain.stderr and plain.stdout


def test_gate_api_raises_incomparable(tmp_path):
    from tracekit.run.api import diff_paths
    from tracekit.analysis.gate import gate
    from tracekit.errors import IncomparableError

    r = diff_paths(_trace(tmp_path / "gpu.json", blocks=1), _cpu_trace(tmp_path / "cpu.json")).check()
    with pytest.raises(IncomparableError):
        gate(r, 5.0)


# ---------------------------------------------------------------------------------------------
# 7. PCT parsing


@pytest.mark.parametrize("text", ["1_0", "\u0665", "-0", "inf", "nan", "1e1", "+5", "5%%", ".5", "5.", "0x10", ""])
def test_percent_is_strict(text):
    from tracekit.analysis.gate import parse_percent

    with pytest.raises(ValueError):
        parse_percent(text)


@pytest.mark.parametrize("text,value", [("5", 5.0), ("5%", 5.0), ("2.5", 2.5), ("007", 7.0), ("10.0%", 10.0)])
def test_percent_accepts_plain_decimals(text, value):
    from tracekit.analysis.gate import parse_percent

    assert parse_percent(text) == value


@pytest.mark.parametrize("text", ["1_0", "\u0665", "-0"])
def test_bad_percent_exits_2(tmp_path, text):
    a = _trace(tmp_path / "a.json")
    proc = run_cli("diff", a, a, "--fail-if-slower", text)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------------------------
# 8. Streamed output, short writes, closed pipes


def test_output_is_streamed_chunk_by_chunk(tmp_path, monkeypatch):
    import tracekit.cli as cli

    seen: list[str] = []

    class Chunky:
        def stream(self, result):
            for k in range(3):
                seen.append(f"chunk{k}")
                yield f"row{k}\n"

        def render(self, result):
            raise AssertionError("render() used although stream() exists")

    monkeypatch.setattr(cli, "_attribution_renderer", lambda fmt, by: Chunky())
    inp = _trace(tmp_path / "t.json")
    out = _invoke(["attribute", inp])
    assert out.exit_code == 0 and out.stdout == "row0\nrow1\nrow2\n" and len(seen) == 3
    out = _invoke(["attribute", inp, "-o", tmp_path / "o.csv.gz"])
    assert gzip.decompress((tmp_path / "o.csv.gz").read_bytes()) == b"row0\nrow1\nrow2\n"


def test_write_all_survives_short_writes_and_reports_none():
    from tracekit.cli import write_all

    class Trickle(io.RawIOBase):
        def __init__(self):
            self.data = bytearray()

        def writable(self):
            return True

        def write(self, b):
            piece = bytes(b[:7])
            self.data += piece
            return len(piece)

    t = Trickle()
    payload = bytes(range(256)) * 40
    write_all(t, payload)
    assert bytes(t.data) == payload

    class Stuck(Trickle):
        def write(self, b):
            return 0

    with pytest.raises(OSError, match="short write"):
        write_all(Stuck(), payload)


def test_closed_pipe_exits_quietly(tmp_path):
    inp = _trace(tmp_path / "t.json", blocks=50)
    cmd = [sys.executable, "-m", "tracekit", "attribute", str(inp), "--format", "csv", "--by", "block"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    proc.stdout.close()  # like `| head -0`: the reader is gone before the first row
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert "Traceback" not in err and "Broken pipe" not in err and "Exception ignored" not in err, err


# ---------------------------------------------------------------------------------------------
# 9. The parallel path keeps every argument


def _folder(tmp_path: Path, ranks: int = 3) -> Path:
    for r in range(ranks):
        _trace(tmp_path / f"rank{r}.pt.trace.json.gz", blocks=r + 1)
    return tmp_path


def test_custom_classifier_reaches_the_workers(tmp_path):
    import pickle

    from tracekit import analyze
    from tracekit.analysis.classify import Classifier, Rule

    clf = Classifier(device_rules=(Rule("everything-is-memory", "memory", r"."),))
    assert pickle.loads(pickle.dumps(clf)).device("x", "kernel", None) == "memory"
    d = _folder(tmp_path)
    serial = analyze(d, classifier=clf, jobs=1).check()
    parallel = analyze(d, classifier=clf, jobs=2).check()
    n = 1 + 2 + 3
    for res in (serial, parallel):  # every device event is memory: all the busy time, by construction
        assert res.totals.blocks == n
        assert res.totals.categories["memory"] == pytest.approx(n * BLOCK_US)
        assert res.totals.categories["matmul"] == 0
    assert [(b.source, b.name, b.categories) for b in serial.blocks] == \
           [(b.source, b.name, b.categories) for b in parallel.blocks]


def test_parallel_progress_reports_every_file(tmp_path):
    from tracekit import analyze

    d = _folder(tmp_path)
    sizes = {f.name: f.stat().st_size for f in d.iterdir()}
    total = sum(sizes.values())
    for jobs in (1, 2):
        seen: list[tuple[str, int, int]] = []
        analyze(d, jobs=jobs, progress=lambda name, done, tot: seen.append((name, done, tot))).check()
        assert seen and all(t == total for _, _, t in seen)
        assert seen[-1][1] == total and {n for n, _, _ in seen} == set(sizes)
        assert [d_ for _, d_, _ in seen] == sorted(d_ for _, d_, _ in seen)  # never goes backwards


def test_diff_of_folders_uses_jobs_progress_and_discovery(tmp_path):
    from tracekit.run.api import diff_paths

    a = _folder(tmp_path / "a", ranks=2)
    b = _folder(tmp_path / "b", ranks=2)
    _trace(b / "rank0.pt.trace.json", blocks=1)  # a duplicate of rank0 on the after side
    seen: list[str] = []
    r = diff_paths(a, b, jobs=2, progress=lambda name, done, tot: seen.append(name)).check()
    assert r.before.totals.blocks == r.after.totals.blocks == 3
    assert any("duplicate" in w for w in r.after.warnings) and not r.before.warnings
    assert set(seen) >= {"rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz", "rank0.pt.trace.json"}
    proc = run_cli("diff", a, b, "--jobs", "2")
    assert proc.returncode == 0 and "duplicate of rank0.pt.trace.json" in proc.stderr


# ---------------------------------------------------------------------------------------------
# 10. A light --help


def test_help_imports_neither_the_analysis_nor_heavy_modules():
    code = ("import sys\nfrom tracekit.cli import cli\n"
            "try:\n    cli(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('\\n'.join(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    mods = set(proc.stdout.split())
    assert "tracekit.cli" in mods
    # (the results package too: its ~50 dataclasses cost --help about 30 ms; --by's choices are in tracekit.vocab)
    heavy = {"torch", "tensorboard", "pandas", "dask", "numpy", "msgspec", "orjson", "concurrent.futures",
             "tracekit.analysis.attribute", "tracekit.analysis.compare", "tracekit.renderers", "tracekit.io.load",
             "tracekit.run.inputs", "tracekit.results"}
    assert not heavy & mods, sorted(heavy & mods)


def test_import_tracekit_is_lazy_and_names_still_resolve():
    code = ("import sys, tracekit\nassert 'tracekit.analysis.attribute' not in sys.modules\n"
            "from tracekit import analyze, load_trace, find_trace_files, Attribution, CATEGORIES, TracekitError\n"
            "assert callable(analyze) and 'matmul' in CATEGORIES and set(tracekit.__all__) <= set(dir(tracekit))\n"
            "try:\n    tracekit.nope\nexcept AttributeError:\n    print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_cli_format_names_match_the_renderers():
    from tracekit.cli import EXTENSIONS, FORMATS, GROUPINGS
    from tracekit.renderers import GROUPINGS as RENDER_GROUPINGS
    from tracekit.renderers import RENDERERS
    from tracekit.renderers import DIFF_RENDERERS

    assert set(FORMATS) == set(RENDERERS) == set(DIFF_RENDERERS)
    assert tuple(GROUPINGS) == tuple(RENDER_GROUPINGS)
    for ext, fmt in EXTENSIONS.items():  # -o's extension table agrees with each renderer's own extension
        if ext != ".markdown":
            assert RENDERERS[fmt].extension == ext


def test_load_find_trace_files_still_works(tmp_path):
    from tracekit.run.inputs import find_trace_files

    d = _folder(tmp_path, ranks=2)
    assert find_trace_files(d) == [d / "rank0.pt.trace.json.gz", d / "rank1.pt.trace.json.gz"]


def test_a_worker_killed_mid_file_is_one_error_line(tmp_path, monkeypatch):
    import multiprocessing

    import tracekit.run.tasks as tasks

    if multiprocessing.get_start_method() != "fork":
        pytest.skip("the patched worker reaches the pool only when workers fork")

    d = _folder(tmp_path, ranks=2)
    monkeypatch.setattr(tasks, "load_trace", _die)  # the workers fork and inherit the patch
    from tracekit import analyze
    from tracekit.errors import TracekitError

    with pytest.raises(TracekitError, match="the process reading it died"):
        analyze(d, jobs=2)


def _die(*args: object, **kw: object) -> None:
    os._exit(9)  # as the OOM killer would
