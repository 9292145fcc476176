"""Fuzzing the input handling (issue 8, section 1), and a fixed corpus of the reproducers it found.

The fuzz tests mutate slices of the real traces (see tests/support/fuzzing.py) and check the CLI's
contract on every one. A plain `python -m pytest -q` runs them briefly (hypothesis profile "ci",
derandomized); `pytest -m fuzz` runs the long profile (thousands of examples). The fixed corpus
below holds one hand-made input per failure class, each asserting the wanted behaviour.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from support import fuzzing
from support.builders import TraceBuilder, attention_block
from support.paths import REAL, ROOT, real_trace_files
from support.traces import chunk_size
from support.cli import run_cli


@pytest.fixture(scope="module")
def seeds(request: pytest.FixtureRequest) -> list[tuple[str, dict]]:
    """Slices of every real trace, cached on disk (loading all traces takes ~15 s; slicing is stable)."""
    files = real_trace_files()
    if not files:
        pytest.skip(f"real traces (the fuzz seeds) not present at {REAL}")
    key = hashlib.sha1(repr([(f.relative_to(REAL).as_posix(), f.stat().st_size, f.stat().st_mtime_ns)
                             for f in files] + [fuzzing.SEED_VERSION, fuzzing.MAX_EVENTS]).encode()).hexdigest()[:16]
    cache = getattr(request.config, "cache", None)
    path = cache.mkdir("tracekit-fuzz") / f"seeds-{key}.json" if cache is not None else None
    if path is not None and path.exists():
        return fuzzing.Seeds(tuple(s) for s in orjson.loads(path.read_bytes()))
    built = fuzzing.build_seeds(files, REAL)
    if path is not None:
        path.write_bytes(orjson.dumps(built))
    return built


@pytest.mark.slow
def test_seeds_are_meaningful(seeds: list[tuple[str, dict]], tmp_path: Path) -> None:
    """Unmutated seeds must attribute cleanly and many must hold attention blocks, or the fuzzer
    would be exercising nothing but the error paths."""
    from tracekit import analyze

    assert len({label.split("#")[0] for label, _ in seeds}) == len(real_trace_files())
    with_blocks = 0
    for label, doc in seeds:
        p = tmp_path / "s.json"
        p.write_bytes(fuzzing.dumps(doc))
        res = analyze(p).check()
        with_blocks += bool(res.blocks)
    assert with_blocks >= len(seeds) // 2, f"only {with_blocks} of {len(seeds)} seeds hold attention blocks"


def _write(tmp: Path, case: fuzzing.Case) -> Path:
    p = tmp / ("fuzz.json.gz" if case.gz else "fuzz.json")
    p.write_bytes(case.data)
    return p


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.fuzz
@pytest.mark.slow
def test_fuzz_attribute(seeds: list[tuple[str, dict]], fuzz_dir: Path) -> None:
    """`tracekit attribute` and `analyze().check()` on mutated real traces keep the contract."""

    @given(case=fuzzing.cases(seeds), fmt=st.sampled_from(["json", "json", "csv", "table", "markdown"]),
           chunk=st.sampled_from([0, 0, 0, 997, 4096]))
    def run(case: fuzzing.Case, fmt: str, chunk: int) -> None:
        p = _write(fuzz_dir, case)
        what = case.describe() + (f"; read in {chunk}-byte chunks" if chunk else "")
        with chunk_size(chunk) if chunk else contextlib.nullcontext():
            code, out, err = fuzzing.invoke("attribute", str(p), "--format", fmt)
            event(f"exit {code}")
            fuzzing.check_cli_output(code, out, err, fmt, what)
            fuzzing.check_library(p, what)

    run()


@pytest.mark.fuzz
@pytest.mark.slow
def test_fuzz_diff_gate(seeds: list[tuple[str, dict]], fuzz_dir: Path) -> None:
    """`tracekit diff A B --fail-if-slower 5` with one side mutated: exit 4 is allowed, nothing else new."""

    @settings(max_examples=max(10, settings().max_examples // 4))
    @given(case=fuzzing.cases(seeds), mutated_first=st.booleans())
    def run(case: fuzzing.Case, mutated_first: bool) -> None:
        p = _write(fuzz_dir, case)
        clean = fuzz_dir / "clean.json"
        clean.write_bytes(fuzzing.dumps(dict(seeds)[case.seed]))
        a, b = (p, clean) if mutated_first else (clean, p)
        code, out, err = fuzzing.invoke("diff", str(a), str(b), "--fail-if-slower", "5", "--format", "json")
        event(f"exit {code}")
        fuzzing.check_cli_output(code, out, err, "json", case.describe(), gate=True)

    run()


@pytest.fixture(scope="module")
def replay_beside_captures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A replay whose kernels its capture maps (all of them), the capture in ``capture_traces/`` with the odd
    neighbours of fuzzing.capture_folder; each example writes its own ``execution_details.json`` there."""
    from support.builders import graph_pair

    root = tmp_path_factory.mktemp("captures")
    replay, capture, _ = graph_pair(root)
    folder = root / "capture_traces"
    folder.mkdir()
    capture.rename(folder / fuzzing.CAPTURE_FILE)
    fuzzing.capture_folder(folder, replay)
    return replay


@pytest.mark.fuzz
def test_fuzz_capture_lists(replay_beside_captures: Path) -> None:
    """Issue 41: any ``execution_details.json`` beside a replay keeps the contract (exit 0 or 3, a warning for a
    list it cannot use, never a traceback), and the capture is read exactly when the list's rule says so
    (fuzzing.expected_captures): then every replayed kernel is mapped, else none."""
    replay = replay_beside_captures
    details = replay.parent / "capture_traces" / "execution_details.json"

    def check(data: bytes, what: str) -> None:
        details.write_bytes(data)
        code, out, err = fuzzing.invoke("attribute", str(replay), "--format", "json")
        fuzzing.check_cli_output(code, out, err, "json", what)
        assert code in (0, 3), what
        graphs = json.loads(out)["traces"][0]["graphs"]
        mapped = fuzzing.CAPTURE_FILE in fuzzing.expected_captures(data)
        assert graphs["capture_sources"] == ([fuzzing.CAPTURE_FILE] if mapped else []), what
        assert graphs["mapped_share"] == (1.0 if mapped else 0.0), what

    for data in fuzzing.CAPTURE_REGRESSIONS:
        check(data, f"capture list {data[:80]!r}")

    @settings(max_examples=max(40, settings().max_examples // 40))
    @given(listed=fuzzing.capture_lists())
    def run(listed: tuple[bytes, list[str]]) -> None:
        check(listed[0], "; ".join(listed[1]))

    run()


@pytest.mark.fuzz
def test_fuzz_report_step(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Issue 41: ``report --step N`` draws step N when the trace has it (steps 1, 2, 3 by construction), and is
    one usage-error line (exit 2) for any other integer, however large."""
    from support.builders import steps_trace

    root = tmp_path_factory.mktemp("steps")
    trace, _ = steps_trace(root / "s.pt.trace.json")
    out = root / "r.html"

    def check(step: int) -> None:
        out.unlink(missing_ok=True)
        code, _, err = fuzzing.invoke("report", str(trace), "-o", str(out), "--step", str(step))
        fuzzing.check_step_output(code, err, step, [1, 2, 3], f"--step {step}")
        assert out.exists() == (code == 0)

    for step in fuzzing.STEP_REGRESSIONS:
        check(step)

    @settings(max_examples=max(20, settings().max_examples // 80))
    @given(step=fuzzing.step_values())
    def run(step: int) -> None:
        check(step)

    run()


# =====================================================================================================
# The fixed corpus: one hand-made reproducer per failure class of issue 8's section 1 table, each
# asserting the behaviour the table wants. Built on tests/support/builders.py traces, whose answer is known.
# =====================================================================================================

def _doc(blocks: int = 3, **top: Any) -> dict:
    b = TraceBuilder(**top)
    for k in range(blocks):
        attention_block(b, 1000 + 200 * k, name=f"layer{k}.attention")
    return b.build()


def _events(doc: dict, cat: str, name: str | None = None) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == cat and (name is None or e.get("name") == name)]


def _write_doc(path: Path, doc: Any, gz: bool = False) -> Path:
    data = fuzzing.dumps(doc)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.strip()]


def assert_salvaged(code: int, out: str, err: str, *needles: str) -> dict:
    """Exit 3, a Warning: line (holding ``needles``), no Error:, valid JSON on stdout."""
    assert code == 3, f"exit {code}\n{err}"
    warn = [ln for ln in _lines(err) if ln.startswith("Warning:")]
    assert warn, err
    for n in needles:
        assert any(n in w for w in warn), f"{n!r} not in {warn}"
    assert not any(ln.startswith("Error:") for ln in _lines(err)), err
    return json.loads(out, parse_constant=fuzzing.no_nan)


def assert_one_line_error(code: int, out: str, err: str, *needles: str) -> str:
    assert code == 1, f"exit {code}\n{err}"
    lines = _lines(err)
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    for n in needles:
        assert n in lines[0], lines[0]
    assert out == ""
    return lines[0]


def _api_ok_or_tracekit_error(path: Path) -> None:
    fuzzing.check_library(path, str(path))


# -- dropped-and-counted events: one mutation of a good trace each ----------------------------------

def _on_kernel(field: str, value: Any) -> Any:
    def mutate(doc: dict) -> None:
        _events(doc, "kernel")[1][field] = value
    return mutate


def _on_kernel_arg(field: str, value: Any) -> Any:
    def mutate(doc: dict) -> None:
        _events(doc, "kernel")[1]["args"][field] = value
    return mutate


def _on_op(field: str, value: Any, arg: bool = False) -> Any:
    def mutate(doc: dict) -> None:
        ev = _events(doc, "cpu_op", "aten::_softmax")[0]
        (ev["args"] if arg else ev)[field] = value
    return mutate


def _memory_bytes(value: Any) -> Any:
    def mutate(doc: dict) -> None:
        doc["traceEvents"].append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 100,
                                   "tid": 1, "ts": 1005, "args": {"Bytes": value, "Device Type": 1}})
    return mutate


def _step_named(name: str) -> Any:
    def mutate(doc: dict) -> None:
        doc["traceEvents"].insert(0, {"ph": "X", "cat": "user_annotation", "name": name, "pid": 100, "tid": 1,
                                      "ts": 990, "dur": 700, "args": {"External id": 999}})
    return mutate


DROPPED = [
    pytest.param(_on_kernel_arg("correlation", "inf"), id="correlation-inf"),
    pytest.param(_on_op("ts", "1e400"), id="ts-string-1e400"),
    pytest.param(_on_kernel("dur", 1e306), id="dur-1e306"),
    pytest.param(_on_kernel("dur", fuzzing.Raw("1" + "0" * 400)), id="dur-int-10e400"),
    pytest.param(_on_kernel("ts", 10**79), id="ts-int-10e79"),
    pytest.param(_on_op("External id", "Infinity", arg=True), id="external-id-Infinity"),
    pytest.param(_memory_bytes(2**64), id="bytes-2e64"),
    pytest.param(_step_named("ProfilerStep#²"), id="profilerstep-superscript-two"),
    # Found by this fuzzer, not in the table: float() reads these strings as 5, 10 and 12.
    pytest.param(_on_kernel("ts", "٥"), id="ts-arabic-indic-five"),
    pytest.param(_on_kernel("dur", "1_0"), id="dur-underscore"),
    pytest.param(_on_kernel("dur", " 12 "), id="dur-padded"),
    pytest.param(_on_kernel_arg("never_read", fuzzing.deep(1000)), id="deep-list-1000-in-unread-arg"),
    pytest.param(_on_kernel_arg("never_read", fuzzing.deep(1000, "dict")), id="deep-dict-1000-in-unread-arg"),
    pytest.param(_on_kernel("cat", None), id="kernel-without-cat"),
]


@pytest.mark.parametrize("mutate", DROPPED)
def test_bad_field_drops_the_event_and_says_so(tmp_path: Path, mutate: Any) -> None:
    doc = _doc()
    mutate(doc)
    p = _write_doc(tmp_path / "t.json", doc)
    out = assert_salvaged(*fuzzing.invoke("attribute", str(p), "--format", "json"), "dropped")
    assert out["totals"]["blocks"] == 3  # one bad event costs that event, not the trace
    _api_ok_or_tracekit_error(p)


# Odd but harmless: nothing is lost, so nothing is dropped (a deliberate reading of the table).
KEPT = [
    pytest.param(_on_op("pid", "²"), id="pid-superscript-two"),  # a pid is a label; "²" is a fine label
    pytest.param(_on_op("Input Dims", fuzzing.deep(300), arg=True), id="input-dims-300-deep"),  # shapes only
    pytest.param(_on_kernel("cat", "Kernel "), id="kernel-cat-with-space"),  # read as "kernel", so it counts
]


@pytest.mark.parametrize("mutate", KEPT)
def test_harmless_oddity_changes_nothing(tmp_path: Path, mutate: Any) -> None:
    plain = _write_doc(tmp_path / "plain.json", _doc())
    doc = _doc()
    mutate(doc)
    odd = _write_doc(tmp_path / "odd.json", doc)
    code, out, err = fuzzing.invoke("attribute", str(odd), "--format", "json")
    assert code == 0 and "Warning" not in err and "Error" not in err, err
    want = json.loads(fuzzing.invoke("attribute", str(plain), "--format", "json")[1])
    got = json.loads(out)
    assert got["totals"] == want["totals"] and got["totals"]["blocks"] == 3


def test_huge_step_number_in_json(tmp_path: Path) -> None:
    doc = _doc()
    _step_named("ProfilerStep#18446744073709551616")(doc)
    p = _write_doc(tmp_path / "t.json", doc)
    code, out, err = fuzzing.invoke("attribute", str(p), "--format", "json")
    assert code in (0, 3), err
    json.loads(out, parse_constant=fuzzing.no_nan)


def test_huge_step_number_in_diff_json(tmp_path: Path) -> None:
    doc = _doc()
    _step_named("ProfilerStep#18446744073709551616")(doc)
    p = _write_doc(tmp_path / "t.json", doc)
    clean = _write_doc(tmp_path / "clean.json", _doc())
    code, out, err = fuzzing.invoke("diff", str(clean), str(p), "--format", "json")
    assert code in (0, 3), err
    json.loads(out, parse_constant=fuzzing.no_nan)


@pytest.mark.parametrize("kernel,dur", [(1, 1e16), (3, 1e16), (5, 1e17)])
def test_huge_kernel_duration_is_not_an_invariant_error(tmp_path: Path, kernel: int, dur: float) -> None:
    doc = _doc()
    [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memset")][kernel]["dur"] = dur
    p = _write_doc(tmp_path / "t.json", doc)
    code, out, err = fuzzing.invoke("attribute", str(p), "--format", "json")
    assert code in (0, 3) and "Error" not in err, err
    _api_ok_or_tracekit_error(p)


def _cpu_module_doc() -> dict:
    """A CPU trace, no ProfilerStep: an attention module slice of 1000 µs holding one 10 µs op."""
    b = TraceBuilder()
    b.module("SelfAttention_0", 0, 1000)
    b.op("aten::bmm", 100, 10)
    return b.build()


def test_attention_share_never_exceeds_the_whole(tmp_path: Path) -> None:
    from tracekit import analyze

    p = _write_doc(tmp_path / "cpu.json", _cpu_module_doc())
    code, out, err = fuzzing.invoke("attribute", str(p), "--format", "json")
    assert code in (0, 3), err
    share = json.loads(out)["totals"]["attention_share"]
    assert share is not None and 0 <= share <= 1.0
    _, out, err = fuzzing.invoke("attribute", str(p))
    assert all(float(x) <= 100.0 for x in __import__("re").findall(r"([\d.]+)% of", out)), out
    res = analyze(p).check()
    res.totals.attention_share = 100.0  # a share over 100% must not pass check()
    with pytest.raises(Exception, match="share"):
        res.check()


# -- corruption in a complete document is an error at the right byte, not "truncated" ----------------

def _complete_then(tmp_path: Path, damage: str) -> tuple[Path, int]:
    doc = _doc()
    if damage == "1e400":
        _events(doc, "kernel")[2]["dur"] = fuzzing.Raw("1e400")
        data = fuzzing.dumps(doc)
        pos = data.index(b"1e400")
    else:  # flip one byte (':' -> ';') inside the last event of a complete file
        data = fuzzing.dumps(doc)
        pos = data.rindex(b'"dur":') + 5
        data = data[:pos] + b";" + data[pos + 1:]
    p = tmp_path / "c.json"
    p.write_bytes(data)
    return p, pos


def test_a_number_past_double_mid_file_costs_one_event_not_the_rest(tmp_path: Path) -> None:
    """``1e400`` is valid JSON syntax that no double holds: that event is dropped and counted; the
    events after it are read (they used to be dropped as "truncated")."""
    p, _ = _complete_then(tmp_path, "1e400")
    out = assert_salvaged(*fuzzing.invoke("attribute", str(p), "--format", "json"), "number out of range: 1")
    assert out["totals"]["blocks"] == 3
    assert out["coverage"]["device_events"] == len(_events(_doc(), "kernel")) - 1 + sum(
        1 for e in _doc()["traceEvents"] if e.get("cat") in ("gpu_memset", "gpu_memcpy"))


def test_corruption_in_a_complete_file_is_an_error_at_its_byte(tmp_path: Path) -> None:
    import re

    p, pos = _complete_then(tmp_path, "flipped-byte")
    line = assert_one_line_error(*fuzzing.invoke("attribute", str(p), "--format", "json"), "c.json")
    assert "truncated" not in line and "JSON" in line, line
    m = re.search(r"byte ([\d,]+)", line)
    assert m, line
    assert abs(int(m.group(1).replace(",", "")) - pos) <= 64, (line, pos)


def test_strings_holding_event_separators_across_chunks(tmp_path: Path) -> None:
    """Names full of '},{' and ']' where the reader cuts its chunks: still the same, valid, trace."""
    from tracekit import analyze

    doc = _doc(blocks=6)
    for e in _events(doc, "cpu_op"):
        e["name"] = e["name"] + ' },{"ph":"X"} ] },{' * 40
    p = _write_doc(tmp_path / "s.json", doc)
    whole = analyze(p).check()
    with chunk_size(997) as used:
        cut = analyze(p).check()
    assert used == [997]
    assert not cut.damaged and [b.name for b in cut.blocks] == [b.name for b in whole.blocks]
    assert cut.totals.total_us == pytest.approx(whole.totals.total_us)


def test_salvage_of_a_huge_last_event_is_fast(tmp_path: Path) -> None:
    """A trace cut mid-write inside an event holding 1 MB of ']': seconds today, must be linear."""
    data = fuzzing.dumps(_doc())
    cut = data.rindex(b'{"ph"')
    p = tmp_path / "cut.json"
    p.write_bytes(data[:cut] + b'{"ph":"X","name":"' + b"]" * (1 << 20))
    proc = run_cli("attribute", p, "--format", "json", timeout=5)  # 14 s before the fix
    assert proc.returncode == 3 and "truncated" in proc.stderr, proc.stderr


# -- output path -------------------------------------------------------------------------------------

def test_output_never_replaces_a_folders_own_trace(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    p = _write_doc(d / "trace.json", _doc())
    before = p.read_bytes()
    proc = run_cli("attribute", d, "-o", p)
    # The table wants exit 2 (a usage error); test_bad_input's file case has 1: either refuses.
    assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr, proc.stderr
    assert p.read_bytes() == before


def _run_limited(args: list[str], umask: int | None = None, fsize: int | None = None,
                 stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess:
    """The CLI in a child with a umask and/or a file-size limit (a full disk, as far as write() can tell)."""

    def setup() -> None:
        if umask is not None:
            os.umask(umask)
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG from write(), not a killed process
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run([sys.executable, "-m", "tracekit", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=120, preexec_fn=setup, cwd=ROOT)


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_output_file_mode_follows_the_umask(tmp_path: Path, umask: int) -> None:
    p = _write_doc(tmp_path / "in.json", _doc())
    proc = _run_limited(["attribute", str(p), "-o", str(tmp_path / "out.json")], umask=umask)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE((tmp_path / "out.json").stat().st_mode) == 0o666 & ~umask


def test_failed_output_write_leaves_nothing_behind(tmp_path: Path) -> None:
    p = _write_doc(tmp_path / "in.json", _doc(blocks=20))
    proc = _run_limited(["attribute", str(p), "--format", "json", "-o", str(tmp_path / "out.json")], fsize=1000)
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "out.json")
    assert sorted(f.name for f in tmp_path.iterdir()) == ["in.json"]


@pytest.mark.parametrize("name", ["OUT.JSON", "out.json.gz", "Out.Json.GZ"])
def test_output_format_follows_the_extension(tmp_path: Path, name: str) -> None:
    p = _write_doc(tmp_path / "in.json", _doc())
    out = tmp_path / name
    code, _, err = fuzzing.invoke("attribute", str(p), "-o", str(out))
    if code == 0:
        data = out.read_bytes()
        if name.lower().endswith(".gz"):
            data = gzip.decompress(data)
        assert json.loads(data)["totals"]["blocks"] == 3
    else:  # refusing is allowed; writing a text table under a .json name is not
        assert code in (1, 2) and not out.exists(), err


# -- odd inputs ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["gzip-zero-padding", "utf8-bom", "bom-in-gzip"])
def test_gzip_padding_and_bom_are_accepted(tmp_path: Path, variant: str) -> None:
    data = fuzzing.dumps(_doc())
    if variant == "gzip-zero-padding":
        blob, name = gzip.compress(data) + b"\0" * 512, "t.json.gz"
    elif variant == "utf8-bom":
        blob, name = b"\xef\xbb\xbf" + data, "t.json"
    else:
        blob, name = gzip.compress(b"\xef\xbb\xbf" + data), "t.json.gz"
    (tmp_path / name).write_bytes(blob)
    code, out, err = fuzzing.invoke("attribute", str(tmp_path / name), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["totals"]["total_us"] == pytest.approx(3 * 31)


def _locked(monkeypatch: pytest.MonkeyPatch, target: Path) -> None:
    """Make ``target`` unreadable: chmod 000, and, for root (whom modes do not stop), fail the calls."""
    target.chmod(0)
    if os.geteuid() != 0:
        return
    for fn in ("scandir", "listdir"):
        real = getattr(os, fn)

        def deny(path: Any = ".", _real: Any = real) -> Any:
            if Path(os.fsdecode(path)).resolve() == target.resolve():
                raise PermissionError(13, "Permission denied", str(path))
            return _real(path)

        monkeypatch.setattr(os, fn, deny)
    real_open = open

    def deny_open(file: Any, *a: Any, **kw: Any) -> Any:
        if isinstance(file, (str, os.PathLike)) and Path(os.fsdecode(file)).resolve() == target.resolve():
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *a, **kw)

    monkeypatch.setattr("builtins.open", deny_open)


def test_unreadable_subfolder_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for sub in ("rank0", "rank1"):
        (tmp_path / sub).mkdir()
        _write_doc(tmp_path / sub / "w.pt.trace.json", _doc())
    try:
        _locked(monkeypatch, tmp_path / "rank1")
        assert_salvaged(*fuzzing.invoke("attribute", str(tmp_path), "--format", "json"), "rank1")
    finally:
        (tmp_path / "rank1").chmod(0o755)


def test_same_trace_as_json_and_json_gz_counts_once(tmp_path: Path) -> None:
    _write_doc(tmp_path / "w.pt.trace.json", _doc(blocks=4))
    _write_doc(tmp_path / "w.pt.trace.json.gz", _doc(blocks=4), gz=True)
    code, out, err = fuzzing.invoke("attribute", str(tmp_path), "--format", "json")
    assert code in (0, 3) and any(ln.startswith("Warning:") for ln in _lines(err)), err
    assert json.loads(out)["totals"]["blocks"] == 4


@pytest.mark.parametrize("kind,wrong", [
    pytest.param("fifo", "folder"),  # today: "folder holds no *.pt.trace.json"
    pytest.param("dev-null", "folder"),
    pytest.param("symlink-loop", "no such file"),  # it exists: it loops
    pytest.param("unreadable", "not a PyTorch", id="unreadable"),
])
def test_odd_files_are_an_accurate_one_line_error(tmp_path: Path, kind: str, wrong: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    if kind == "fifo":
        p = tmp_path / "f.json"
        os.mkfifo(p)
        proc = run_cli("attribute", p, timeout=20)  # a child: reading a FIFO with no writer blocks
        line = assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "f.json")
        assert wrong not in line, line
        return
    if kind == "dev-null":
        p = Path(os.devnull)
    elif kind == "symlink-loop":
        p = tmp_path / "loop.json"
        p.symlink_to(tmp_path / "loop2.json")
        (tmp_path / "loop2.json").symlink_to(p)
    else:
        p = _write_doc(tmp_path / "locked.json", _doc())
        _locked(monkeypatch, p)
    line = assert_one_line_error(*fuzzing.invoke("attribute", str(p)), p.name)
    assert wrong not in line, line


# -- the diff gate --------------------------------------------------------------------------------

def test_gate_refuses_device_against_host_time(tmp_path: Path) -> None:
    gpu = _write_doc(tmp_path / "gpu.json", _doc())
    cpu = _write_doc(tmp_path / "cpu.json", _cpu_module_doc())
    assert_one_line_error(*fuzzing.invoke("diff", str(gpu), str(cpu), "--fail-if-slower", "5"))


@pytest.mark.parametrize("pct", [
    *(pytest.param(p) for p in ["1_0", "٥", "-0", "+5", "5 %", "1e1"]), "0x5", "five"])
def test_gate_percent_is_strict(tmp_path: Path, pct: str) -> None:
    gpu = _write_doc(tmp_path / "gpu.json", _doc())
    code, _, err = fuzzing.invoke("diff", str(gpu), str(gpu), "--fail-if-slower", pct)
    assert code == 2 and "Traceback" not in err, (pct, code, err)


@pytest.mark.parametrize("pct", ["5", "5%", "2.5%", "0"])
def test_gate_percent_accepts_plain_numbers(tmp_path: Path, pct: str) -> None:
    gpu = _write_doc(tmp_path / "gpu.json", _doc())  # (launch-bound, no steps: the gate is given latencies, apart)
    code, _, err = fuzzing.invoke("diff", str(gpu), str(gpu), "--fail-if-slower", pct, "--latency-before", "2±0.1",
                                  "--latency-after", "1±0.1")
    assert code == 0, (pct, err)


# -- huge output ------------------------------------------------------------------------------------

def test_short_write_to_stdout_is_an_error(tmp_path: Path) -> None:
    doc = _doc()
    _events(doc, "user_annotation")[0]["name"] = "layer0.attention." + "x" * 200_000
    p = _write_doc(tmp_path / "t.json", doc)
    with open(tmp_path / "stdout.csv", "w") as sink:
        proc = _run_limited(["attribute", str(p), "--format", "csv"], fsize=50_000, stdout=sink)
    assert_one_line_error(proc.returncode, "", proc.stderr)
