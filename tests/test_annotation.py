"""``tracekit annotate`` (issue 25, part 4): a streamed copy of a trace plus tracekit's tracks, which attributes
exactly like the original and never overwrites it.

Expected figures come from hand-built traces with known timestamps (tests/support/builders.py) and, on real traces, from
the raw JSON of the input and of the copy (read here with orjson); the block figures a span must carry are the
result's own, which tests/analysis/test_clock.py checks against the raw JSON.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
from support.builders import CPU_PID, TraceBuilder, attention_block, host_core
from support.paths import REAL, real_trace_files
from support.cli import run_cli
from support.fuzzing import HOSTILE_PARTS
from support.traces import read_doc, read_events

from tracekit import analyze
from tracekit import annotation as annotate_mod
from tracekit.annotation import CHUNK, annotate_path
from tracekit.renderers import JSONRenderer
from tracekit.vocab import ANNOTATE_CAT

H200_FILES = sorted((REAL.parent / "h200" / "sweep").glob("*/*.json.gz"))
REPRESENTATIVE = [REAL / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",  # CUDA, module blocks
                  REAL / "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",  # ROCm
                  REAL.parent / "h200/sweep/eager_4096"]  # eager ops, H200 (a folder: its one trace)
GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*)"
DIV = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
       "at::native::binary_internal::DivFunctor<float> > >(int, float)")
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def _ours(path: Path) -> list[dict]:
    return [e for e in read_events(path) if e.get("cat") == ANNOTATE_CAT]


def _attribution(path: Path) -> dict:
    """The JSON of ``tracekit attribute``, less the file names (the copy has its own)."""
    out = json.loads(JSONRenderer().render(analyze(path).check()))
    out.pop("source")
    for t in out["traces"]:
        t.pop("source")
    for b in out["blocks"]:
        b.pop("trace")
    return out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _ns(ts: float) -> int:
    """A written ts (µs) as exact integer ns (Decimal: epoch-sized floats lose ns in float arithmetic)."""
    return round(Decimal(repr(ts)) * 1000)


def _check_nesting(ours: list[dict]) -> None:
    """On each tracekit lane, complete events nest: each lies inside the one open around it, or after it."""
    lanes: dict[tuple, list[tuple[int, int, str]]] = {}
    for e in ours:
        if e["ph"] == "X":
            s = _ns(e["ts"])
            lanes.setdefault((e["pid"], e["tid"]), []).append((s, s + _ns(e["dur"]), e["name"]))
    for lane, spans in lanes.items():
        stack: list[tuple[int, int, str]] = []
        for s, e, name in sorted(spans, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1][1] <= s and not (stack[-1][0] == s == stack[-1][1]):
                stack.pop()
            assert not stack or e <= stack[-1][1], (lane, name, stack[-1][2])
            stack.append((s, e, name))


def _check_copy(src: Path, out: Path) -> None:
    """What every annotated copy must be: the same attribution, the spans on the blocks' windows, a pid of its
    own, nested lanes, and arrows that land on a kernel of the trace."""
    res = analyze(src).check()
    events = read_events(out)
    theirs = [e for e in events if e.get("cat") != ANNOTATE_CAT]
    ours = [e for e in events if e.get("cat") == ANNOTATE_CAT]
    assert theirs == read_events(src)  # the original events, all of them, unchanged
    assert _attribution(out) == _attribution(src)
    pids = {e.get("pid") for e in ours if e["ph"] != "f"}  # (an arrow's end sits on its kernel's track)
    assert len(pids) == 1
    [pid] = pids
    assert pid not in {e.get("pid") for e in theirs} and str(pid) not in {str(e.get("pid")) for e in theirs}
    _check_nesting(ours)
    origin = res.traces[0].origin_ns
    spans = [e for e in ours if e["ph"] == "X" and e["args"]["level"] == "block"]
    for b in res.blocks:
        mine = [e for e in spans if (e["args"]["block"], e["args"]["phase"], e["args"]["step"], e["args"]["ordinal"])
                == (b.name, str(b.phase), b.step, b.ordinal)]
        streams = {k for k in b.intervals.stream} if b.intervals is not None else set()
        assert len(mine) == max(1, len(streams)), b.name
        for e in mine:
            assert _ns(e["ts"]) == origin + round(b.start_us * 1000), b.name
            assert _ns(e["dur"]) == round(b.end_us * 1000) - round(b.start_us * 1000), b.name
    kernels: dict[tuple, list[tuple[int, int]]] = {}
    for e in theirs:
        if e.get("ph") == "X" and str(e.get("cat", "")).strip().lower() in DEVICE_CATS:
            kernels.setdefault((e["pid"], e["tid"]), []).append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    starts = {e["id"]: e for e in ours if e["ph"] == "s"}
    ends = [e for e in ours if e["ph"] == "f"]
    assert len(starts) == len(ends) == sum(b.kernels for b in res.blocks)  # (every real trace is under the cap)
    for f in ends:
        assert f["bp"] == "e" and starts[f["id"]]["pid"] == pid and starts[f["id"]]["ts"] == f["ts"]
        t = _ns(f["ts"])
        assert any(s <= t <= e for s, e in kernels[(f["pid"], f["tid"])]), f


def _annotate(src: Path, tmp: Path, **kw) -> tuple[Path, object]:
    out = tmp / ("out_" + src.name)
    stats, _ = annotate_path(src, out, **kw)
    return out, stats


def _one_block(tmp: Path, name: str = "layer0.attention") -> Path:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 900, 2100)
    attention_block(b, 1000, name=name)  # host 1000..1060, device 1100..1136 (builders.attention_block)
    return b.write(tmp / "t.json")


# -- hand-built traces: known answers ----------------------------------------------------------------------------

def test_a_block_gets_its_span_runs_arrows_and_hint_marks(tmp_path):
    src = _one_block(tmp_path)
    out, stats = _annotate(src, tmp_path)
    ours = _ours(out)
    assert stats.pid == CPU_PID + 1  # above the trace's pids (100 and 0)
    [span] = [e for e in ours if e["ph"] == "X" and e["args"]["level"] == "block"]
    # busy 31 µs: matmul 20 (65%), softmax 5 (16%), memory 4 (13%), elementwise 2: three named, then "…"
    assert span["name"] == "layer0.attention · 65% matmul · 16% softmax · 13% memory …"
    assert (span["ts"], span["dur"], span["pid"]) == (1000, 136, CPU_PID + 1)
    assert span["args"]["busy_us"] == 31.0 and span["args"]["span_us"] == 136.0 and span["args"]["kernels"] == 6
    runs = [(e["name"], e["ts"], e["dur"]) for e in ours if e["ph"] == "X" and e["args"]["level"] == "category run"]
    assert runs == [("memory ×1", 1100, 1), ("matmul ×1", 1102, 10), ("elementwise ×1", 1113, 2),
                    ("softmax ×1", 1116, 5), ("memory ×1", 1122, 3), ("matmul ×1", 1126, 10)]
    ends = sorted(e["ts"] for e in ours if e["ph"] == "f")
    assert ends == [1100.5, 1107, 1114, 1118.5, 1123.5, 1131]  # each kernel's midpoint, on stream (0, 7)
    assert {(e["pid"], e["tid"]) for e in ours if e["ph"] == "f"} == {(0, 7)}
    marks = sorted((e["name"], e["ts"]) for e in ours if e["ph"] == "i")
    assert marks == [("hint: fp32-softmax", 1000), ("hint: launch-bound", 1000)]  # this trace's two hints
    names = {e["args"]["name"] for e in ours if e["ph"] == "M" and e["name"] in ("process_name", "thread_name")}
    assert names == {"tracekit", "attention · stream 7 (pid 0)"}
    _check_copy(src, out)


def _two_streams(tmp: Path) -> Path:
    """One block: on stream 7 two GEMMs back to back, a softmax and a third GEMM; on stream 8 a division."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 30)
    b.op("aten::bmm", 1, 5)
    b.launch(GEMM, 2, 1, 40, 10)
    b.launch(GEMM, 3, 1, 51, 10)
    b.op("aten::div", 7, 2)
    b.launch(DIV, 8, 1, 45, 3, stream=8)
    b.op("aten::_softmax", 10, 5)
    b.launch(SOFTMAX, 11, 1, 62, 4)
    b.op("aten::bmm", 20, 5)
    b.launch(GEMM, 21, 1, 70, 10)
    return b.write(tmp / "s.json")


def test_consecutive_kernels_of_a_category_make_one_run_per_stream_lane(tmp_path):
    src = _two_streams(tmp_path)
    out, stats = _annotate(src, tmp_path)
    ours = _ours(out)
    lanes = {e["tid"]: e["args"]["name"] for e in ours if e["name"] == "thread_name"}
    assert sorted(lanes.values()) == ["attention · stream 7 (pid 0)", "attention · stream 8 (pid 0)"]
    by_lane: dict[str, list] = {name: [] for name in lanes.values()}
    for e in ours:
        if e["ph"] == "X":
            by_lane[lanes[e["tid"]]].append((e["args"]["level"], e["name"].split(" · ")[0], e["ts"], e["dur"]))
    # the block's window 0..80 on both lanes; on stream 7 the two GEMMs are one run (40..61), then the softmax
    # and the last GEMM; the division on stream 8 breaks no run of stream 7
    assert by_lane["attention · stream 7 (pid 0)"] == [("block", "layer0.attention", 0, 80),
                                                       ("category run", "matmul ×2", 40, 21),
                                                       ("category run", "softmax ×1", 62, 4),
                                                       ("category run", "matmul ×1", 70, 10)]
    assert by_lane["attention · stream 8 (pid 0)"] == [("block", "layer0.attention", 0, 80),
                                                       ("category run", "elementwise ×1", 45, 3)]
    assert stats.blocks == 2 and stats.flows == 5
    _check_copy(src, out)


def test_overlapping_blocks_on_one_stream_take_separate_lanes(tmp_path):
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)  # thread 1: window 0..100
    b.op("aten::bmm", 1, 5)
    b.launch(GEMM, 2, 1, 50, 10)
    host_core(b, 10)
    b.annotation("layer1.attention", 20, 20, tid=2)  # thread 2: its kernel waits for the first's (50..60)
    b.op("aten::bmm", 21, 5, tid=2)
    b.launch(GEMM, 22, 1, 70, 10, tid=2)
    b.op("aten::_softmax", 30, 2, tid=2)
    b.op("aten::bmm", 33, 2, tid=2)
    src = b.write(tmp_path / "o.json")
    res = analyze(src).check()
    assert sorted((x.start_us, x.end_us) for x in res.blocks) == [(0.0, 100.0), (60.0, 80.0)]  # inside the first
    out, _stats = _annotate(src, tmp_path)
    lanes = sorted(e["args"]["name"] for e in _ours(out) if e["name"] == "thread_name")
    assert lanes == ["attention · stream 7 (pid 0)", "attention · stream 7 (pid 0) · overlap 2"]
    _check_copy(src, out)


def test_past_the_flow_cap_each_block_points_at_its_first_kernel_per_stream(tmp_path, monkeypatch):
    b = TraceBuilder()
    attention_block(b, 0, name="layer0.attention")
    attention_block(b, 400, name="layer1.attention")
    src = b.write(tmp_path / "two.json")
    monkeypatch.setattr(annotate_mod, "MAX_FLOWS", 11)  # the blocks own 12 kernels
    out, stats = _annotate(src, tmp_path)
    ends = sorted(e["ts"] for e in _ours(out) if e["ph"] == "f")
    assert not stats.every_kernel and ends == [100.5, 500.5]  # each block's first kernel (its memset)
    monkeypatch.setattr(annotate_mod, "MAX_FLOWS", 12)
    out, stats = _annotate(src, tmp_path)
    assert stats.every_kernel and len([e for e in _ours(out) if e["ph"] == "f"]) == 12


def test_a_cpu_only_trace_gets_its_blocks_on_one_lane(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 20, 500)
    b.annotation("layer0.attention", 100, 50)
    b.op("aten::bmm", 101, 10)
    b.op("aten::_softmax", 112, 5)
    b.op("aten::bmm", 120, 10)
    src = b.write(tmp_path / "cpu.json")
    out, _ = _annotate(src, tmp_path)
    ours = _ours(out)
    [span] = [e for e in ours if e["ph"] == "X"]
    assert (span["ts"], span["dur"]) == (100, 50)  # the host window, absolute
    assert [e["args"]["name"] for e in ours if e["name"] == "thread_name"] == ["attention · no device events"]
    _check_copy(src, out)


def test_hostile_names_stay_data(tmp_path):
    name = "layer0.attention" + "".join(HOSTILE_PARTS) + '"}, {"ph": "X'
    src = _one_block(tmp_path, name=name)
    out, _ = _annotate(src, tmp_path)
    [span] = [e for e in _ours(out) if e["ph"] == "X" and e["args"]["level"] == "block"]
    assert span["name"].startswith(name + " · ") and span["args"]["block"] == name
    (tmp_path / "plain").mkdir()
    assert len(_ours(out)) == len(_ours(_annotate(_one_block(tmp_path / "plain"), tmp_path / "plain")[0]))
    _check_copy(src, out)


def test_bare_arrays_gzip_and_empty_traces(tmp_path):
    b = TraceBuilder()
    attention_block(b, 0)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(b.events))  # Chrome's array format: no header keys
    out, _ = _annotate(bare, tmp_path)
    assert isinstance(read_doc(out), list)
    _check_copy(bare, out)
    gz = tmp_path / "z.json.gz"
    annotate_path(bare, gz)
    assert gz.read_bytes()[:2] == b"\x1f\x8b" and read_events(gz) == read_events(out)
    empty = tmp_path / "empty.json"
    empty.write_text('{"schemaVersion": 1, "traceEvents": [ ], "traceName": "x"}')
    proc = run_cli("annotate", empty, "-o", tmp_path / "e.json")
    assert proc.returncode == 1 and "no profiler events" in proc.stderr and not (tmp_path / "e.json").exists()


def test_the_copy_is_the_same_for_any_chunk_size(tmp_path):
    src = _two_streams(tmp_path)
    whole, _ = _annotate(src, tmp_path / "whole")
    for chunk in (1, 7, 64, 4096):
        piece, _stats = _annotate(src, tmp_path / f"c{chunk}", chunk=chunk)
        assert piece.read_bytes() == whole.read_bytes(), chunk


def test_annotating_an_annotated_copy_replaces_its_tracks(tmp_path):
    """Issue 41 row 8: ``annotate a1.json -o a2.json`` kept a1's tracks beside the new ones (two tracekit
    processes). The old tracks are the leading elements of the events array (where annotate put them): they are
    left out, so the copy of a copy is the copy, byte for byte, whatever the chunk, layout or compression."""
    src = _two_streams(tmp_path)
    a1, _ = _annotate(src, tmp_path)
    for name, chunk in (("a2.json", CHUNK), ("a2_1.json", 1), ("a2_7.json", 7), ("a2.json.gz", CHUNK)):
        a2 = tmp_path / name
        stats, _ = annotate_path(a1, a2, chunk=chunk)
        assert read_events(a2) == read_events(a1), name
        assert stats.replaced == len(_ours(a1)) > 0
        if chunk != CHUNK or name.endswith(".json"):
            assert a2.read_bytes() == a1.read_bytes(), name
    # laid out by another tool (indented, the header keys after the events): the tracks still go, once
    doc = read_doc(a1)
    loose = tmp_path / "loose.json"
    loose.write_text(json.dumps({"traceEvents": doc.pop("traceEvents"), **doc}, indent=2))
    a3, _ = _annotate(loose, tmp_path)
    processes = [e for e in _ours(a3) if e["ph"] == "M" and e["name"] == "process_name"]
    assert len(processes) == 1 and sorted(map(repr, _ours(a3))) == sorted(map(repr, _ours(a1)))
    _check_copy(src, a3)  # (a3 less its tracks is the original trace)
    assert _attribution(a3) == _attribution(a1) == _attribution(src)


def test_looking_for_old_tracks_reads_no_further_than_its_bound(tmp_path, monkeypatch):
    """The check for an earlier annotation's tracks reads the first element whole only up to ``_MAX_OWN`` bytes:
    a trace whose first event is huge is copied in chunks as before, not held whole."""
    b = TraceBuilder()
    b.annotation("x" * 20_000, 0, 1)  # the first event: a 20 kB name
    attention_block(b, 1000)
    src = b.write(tmp_path / "t.json")
    monkeypatch.setattr(annotate_mod, "_MAX_OWN", 4096)
    out, stats = _annotate(src, tmp_path, chunk=1024)
    assert stats.replaced == 0 and stats.peak_buffer <= 4096 + 1024
    _check_copy(src, out)


def test_the_reader_skips_tracekit_events_at_no_cost_to_the_count(tmp_path):
    src = _one_block(tmp_path)
    out, _ = _annotate(src, tmp_path)
    a, b = analyze(src).check(), analyze(out).check()
    assert b.traces[0].events == a.traces[0].events == len(read_events(src))
    assert not b.traces[0].damaged and not b.traces[0].warnings
    # an added span that looks like a kernel is still not read
    doc = read_doc(out)
    doc["traceEvents"].insert(0, {"ph": "X", "cat": ANNOTATE_CAT, "name": GEMM, "pid": 0, "tid": 7, "ts": 1101,
                                  "dur": 30,
                                  "args": {"correlation": 1002}})
    out.write_bytes(orjson.dumps(doc))
    assert _attribution(out) == _attribution(src)


def test_parallel_decoding_skips_them_too(tmp_path, monkeypatch):
    from tracekit.io import pload, read
    b = TraceBuilder()
    for i in range(40):
        attention_block(b, 500 * i, name=f"layer{i}.attention")
    src = b.write(tmp_path / "many.json")
    out, stats = _annotate(src, tmp_path)
    assert stats.flows == 40 * 6 and len(out.read_bytes()) > 8 * (16 << 10)
    serial = _attribution(src)
    monkeypatch.setattr(pload, "MIN_PARALLEL", 0)  # decode windows of 16 KB in worker processes
    monkeypatch.setattr(pload, "PARALLEL_CHUNK", 16 << 10)
    monkeypatch.setattr(read, "_TAIL_WINDOW", 4 << 10)
    res = analyze(out, jobs=2, decode_workers=2).check()
    got = json.loads(JSONRenderer().render(res))
    got.pop("source")
    for t in got["traces"]:
        t.pop("source")
    for blk in got["blocks"]:
        blk.pop("trace")
    assert got == serial


# -- the CLI: refusals and errors --------------------------------------------------------------------------------

def test_cli_writes_the_copy_and_never_over_its_input(tmp_path):
    src = _one_block(tmp_path)
    before = _sha(src)
    out = tmp_path / "a.json.gz"
    proc = run_cli("annotate", src, "-o", out)
    assert proc.returncode == 0 and "1 block span on 1 lane of pid" in proc.stderr and out.exists()
    assert _sha(src) == before
    for alias in (src, tmp_path / "." / "t.json"):
        proc = run_cli("annotate", src, "-o", alias)
        assert proc.returncode == 2 and "refusing to overwrite" in proc.stderr
    link = tmp_path / "link.json"
    link.symlink_to(src)
    hard = tmp_path / "hard.json"
    os.link(src, hard)
    for alias in (link, hard):
        proc = run_cli("annotate", src, "-o", alias)
        assert proc.returncode == 2 and "refusing to overwrite" in proc.stderr
    assert _sha(src) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left


@pytest.mark.parametrize("case, code, words", [
    ("missing", 1, "no such file"), ("not-json", 1, "not valid JSON"),
    ("folder", 2, "this folder holds 2; pass one of its files"),
    ("extension", 2, ".json or .json.gz"), ("out-folder", 2, "is a folder"),
    ("url", 2, "http://example.invalid/t.json: annotate reads a local trace file, not a URL"),  # issue 41 row 10
])
def test_cli_bad_input_is_one_line_with_its_exit_code(tmp_path, case, code, words):
    src: Path | str = _one_block(tmp_path)
    out = tmp_path / "out.json"
    if case == "url":  # (as the README says: a usage error, not "no such file" on the name with one slash)
        src = "http://example.invalid/t.json"
    elif case == "missing":
        src = tmp_path / "nope.json"
    elif case == "not-json":
        src = tmp_path / "bad.json"
        src.write_bytes(b"\x00\x01 not a trace")
    elif case == "folder":  # (two traces: a run folder of one trace is that trace, below)
        src = tmp_path / "run"
        src.mkdir()
        _one_block(src).rename(src / "w0.pt.trace.json")
        _one_block(src).rename(src / "w1.pt.trace.json")
    elif case == "extension":
        out = tmp_path / "out.csv"
    else:
        out = tmp_path / "dir.json"
        out.mkdir()
    proc = run_cli("annotate", src, "-o", out)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code and len(lines) == 1, proc.stderr
    assert lines[0].startswith("Error:") and words in lines[0], proc.stderr
    assert not out.is_file()


def test_a_truncated_trace_is_copied_as_far_as_it_goes_and_exits_3(tmp_path):
    src = _one_block(tmp_path)
    raw = gzip.compress(src.read_bytes())
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: len(raw) * 3 // 4])
    out = tmp_path / "cut_out.json"
    proc = run_cli("annotate", cut, "-o", out)
    assert proc.returncode == 3 and "ends early" in proc.stderr
    part = zlib.decompressobj(wbits=31).decompress(cut.read_bytes())  # what the cut file still holds
    at = part.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    text = out.read_bytes()
    assert text.startswith(part[:at]) and text.endswith(part[at:]) and len(text) > len(part)


# -- real traces -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("src", REPRESENTATIVE, ids=lambda p: p.name)
def test_representative_traces_annotate_to_an_identical_attribution(src, tmp_path):
    if not src.exists():
        pytest.skip(f"{src} not present")
    if src.is_dir():
        [src] = sorted(src.glob("*.json.gz"))
    before = _sha(src)
    out, _ = _annotate(src, tmp_path)
    _check_copy(src, out)
    assert _sha(src) == before


ALL = real_trace_files() + H200_FILES


@pytest.mark.slow
@pytest.mark.parametrize("src", ALL, ids=[str(p.relative_to(REAL.parent)) for p in ALL])
def test_every_real_and_h200_trace_annotates_to_an_identical_attribution(src, tmp_path):
    before = _sha(src)
    out, _ = _annotate(src, tmp_path)
    _check_copy(src, out)
    assert _sha(src) == before


@pytest.mark.skipif(not real_trace_files(), reason="no real traces")
def test_memory_of_the_copy_is_bounded_by_the_chunk_not_the_trace(tmp_path):
    big = max(real_trace_files(), key=lambda p: p.stat().st_size)
    _out, stats = _annotate(big, tmp_path, chunk=1 << 16)
    assert stats.bytes_in > 16 * (1 << 16)
    assert stats.peak_buffer < 4 * (1 << 16), (stats.peak_buffer, stats.bytes_in)  # pieces, never the whole file


def test_tracekit_annotate_in_python_writes_the_commands_copy(tmp_path):
    """Issue 42: ``tracekit.annotate(path, output)`` from Python, the copy ``tracekit annotate`` writes, and the
    trace's attribution (the copy attributes to the same)."""
    import tracekit
    from support.builders import steps_trace
    from support.cli import run_cli

    trace, _ = steps_trace(tmp_path / "s.pt.trace.json")
    res = tracekit.annotate(trace, tmp_path / "py.json")
    proc = run_cli("annotate", trace, "-o", tmp_path / "cli.json")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "py.json").read_bytes() == (tmp_path / "cli.json").read_bytes()
    assert [b.name for b in res.blocks] == [b.name for b in tracekit.analyze(tmp_path / "py.json").blocks]
    assert len(res.blocks) == len(tracekit.analyze(trace).blocks) > 0


def test_a_run_folder_of_one_trace_is_annotated_as_that_trace(tmp_path):
    """Issue 42: ``tracekit annotate RUN_FOLDER`` exited 2 ("not a folder") while every other command takes a run
    folder; a folder holding one trace (a TensorBoard run of one worker) is that trace."""
    run = tmp_path / "run"
    run.mkdir()
    trace = _one_block(run).rename(run / "w0.pt.trace.json")
    proc = run_cli("annotate", run, "-o", tmp_path / "from_folder.json")
    assert proc.returncode == 0, proc.stderr
    assert run_cli("annotate", trace, "-o", tmp_path / "from_file.json").returncode == 0
    assert (tmp_path / "from_folder.json").read_bytes() == (tmp_path / "from_file.json").read_bytes()


# -- packed lanes for graph replays (issue 44, part 3) -----------------------------------------------------------

# A graph replay's kernels on six streams, (stream, start, dur) µs. By construction at most three run at once
# (108..110: streams 10, 11, 12; 112..115: 10, 11, 13), and stream 13 starts when stream 12 ends (112): touching
# spans share a lane, so three lanes hold them (four if a touch counted as overlap).
REPLAYED = [(10, 100, 10), (10, 110, 10), (11, 105, 10), (12, 108, 4), (13, 112, 6), (14, 130, 1), (15, 130, 10),
            (15, 141, 0)]
REPLAY_CORR = 9001


def _replay_on_streams(tmp: Path, replayed=REPLAYED, other_device=()) -> Path:
    """An eager attention block, then one cudaGraphLaunch whose kernels ran on many streams (device 0), and on
    device 1 the ``other_device`` ones; an eager kernel on stream 20 that no graph launched."""
    b = TraceBuilder()
    attention_block(b, 0)  # host 0..60, device 100..136 on stream 7
    b._x("cuda_runtime", "cudaGraphLaunch", 90, 5, CPU_PID, 1, correlation=REPLAY_CORR)
    for stream, ts, dur in replayed:
        b.device_only(GEMM, 1000 + ts, dur, stream=stream, corr=REPLAY_CORR)
    for stream, ts, dur in other_device:
        b._x("kernel", SOFTMAX, 1000 + ts, dur, 1, stream, correlation=REPLAY_CORR, device=1, stream=stream)
    b.op("aten::div", 200, 2)
    b.launch(DIV, 201, 1, 1300, 3, stream=20)
    return b.write(tmp / "replay.json")


def _graph_lanes(out: Path) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in _ours(out)
            if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"].startswith("graph replays")}


def _max_overlap(spans: list[tuple[int, int]]) -> int:
    """The most spans open at once, by a sweep over their ends (an end before a start at the same time)."""
    most = now = 0
    for _t, step in sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans]):
        now += step
        most = max(most, now)
    return most


def _check_lanes(src: Path, out: Path) -> dict[int, str]:
    """The packed lanes of ``out`` against the raw JSON of ``src``: every kernel of a graph launch copied once
    (its name, time and original stream), none of another, no two overlapping on a lane, and per device as many
    lanes as the most of its replayed kernels that overlap."""
    raw = read_events(src)
    graph = {e["args"]["correlation"] for e in raw if e.get("cat") == "cuda_runtime" and "GraphLaunch" in e["name"]}
    replayed = sorted((e["pid"], e["tid"], _ns(e["ts"]), _ns(e["dur"]), e["name"]) for e in raw
                      if str(e.get("cat", "")).lower() in DEVICE_CATS and e.get("args", {}).get("correlation") in graph)
    lanes = _graph_lanes(out)
    copies = [e for e in _ours(out) if e["ph"] == "X" and e["tid"] in lanes]
    assert all(e["args"]["level"] == "graph replay" for e in copies)
    assert sorted((e["args"]["stream_pid"], e["args"]["stream"], _ns(e["ts"]), _ns(e["dur"]), e["name"])
                  for e in copies) == replayed
    by_lane: dict[int, list[tuple[int, int]]] = {}
    for e in copies:
        by_lane.setdefault(e["tid"], []).append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    for tid, spans in by_lane.items():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), lanes[tid]
    for spid in {r[0] for r in replayed}:
        mine = [tid for tid, name in lanes.items() if name.startswith(f"graph replays · pid {spid} ·")]
        assert {e["args"]["stream_pid"] for e in copies if e["tid"] in mine} == {spid}  # devices never share a lane
        assert len(mine) == _max_overlap([(r[2], r[2] + r[3]) for r in replayed if r[0] == spid])
    return lanes


def test_replayed_kernels_pack_onto_as_many_lanes_as_overlap_and_attribute_the_same(tmp_path):
    src = _replay_on_streams(tmp_path)
    before = _sha(src)
    out, stats = _annotate(src, tmp_path, pack_graph_lanes=True)
    lanes = _check_lanes(src, out)
    assert sorted(lanes.values()) == [f"graph replays · pid 0 · lane {k}" for k in (1, 2, 3)]  # by construction
    assert (stats.graph_kernels, stats.graph_lanes) == (len(REPLAYED), 3)
    attention = {e["tid"] for e in _ours(out) if e["name"] == "thread_name"} - set(lanes)
    assert len(attention) == stats.lanes == 1 and not attention & set(lanes)  # the block's lane keeps its own tid
    _check_copy(src, out)  # the original events unchanged, and attribute's JSON identical
    assert _sha(src) == before


def test_each_device_gets_lanes_of_its_own(tmp_path):
    src = _replay_on_streams(tmp_path, other_device=[(3, 100, 50), (4, 120, 10), (5, 125, 10)])
    out, stats = _annotate(src, tmp_path, pack_graph_lanes=True)
    lanes = _check_lanes(src, out)
    assert sorted(lanes.values()) == ([f"graph replays · pid 0 · lane {k}" for k in (1, 2, 3)]
                                      + [f"graph replays · pid 1 · lane {k}" for k in (1, 2, 3)])
    _check_copy(src, out)


def test_without_the_option_the_copy_gains_nothing(tmp_path):
    src = _replay_on_streams(tmp_path)
    plain, stats = _annotate(src, tmp_path / "plain") if (tmp_path / "plain").mkdir() is None else (None, None)
    assert not _graph_lanes(plain) and stats.graph_kernels == stats.graph_lanes == 0
    assert not [e for e in _ours(plain) if e.get("args", {}).get("level") == "graph replay"]
    (tmp_path / "off").mkdir()
    off, _ = _annotate(src, tmp_path / "off", pack_graph_lanes=False)
    assert off.read_bytes() == plain.read_bytes()
    packed, _ = _annotate(src, tmp_path, pack_graph_lanes=True)  # the option only adds: the rest as without it
    lanes = _graph_lanes(packed)
    assert [e for e in read_events(packed) if e.get("tid") not in lanes or e.get("cat") != ANNOTATE_CAT] \
        == read_events(plain)


def test_annotating_a_packed_copy_again_replaces_its_lanes(tmp_path):
    src = _replay_on_streams(tmp_path)
    a1, _ = _annotate(src, tmp_path, pack_graph_lanes=True)
    a2 = tmp_path / "a2.json"
    stats, _ = annotate_path(a1, a2, pack_graph_lanes=True)
    assert a2.read_bytes() == a1.read_bytes() and stats.replaced == len(_ours(a1))


def test_pack_lanes_uses_the_fewest_lanes_on_any_spans():
    """Brute force on random integer spans, touching ones included: no lane holds two overlapping spans, and the
    lanes number the most spans open at one time (counted at every half-integer point). Zero-length spans (a point
    inside a longer span overlaps it) are checked for overlaps only."""
    import random

    rng = random.Random(44)
    for zero in (False, True):
        for _ in range(300):
            n = rng.randrange(1, 25)
            spans = [(s, s + rng.choice([0, 1, 2, 5, 9] if zero else [1, 2, 5, 9])) for s in rng.sample(range(60), n)
                     for _ in range(rng.choice([1, 1, 2]))]
            lanes = annotate_mod.pack_lanes(spans)
            for k in set(lanes):
                mine = sorted(sp for sp, lane in zip(spans, lanes) if lane == k)
                assert all(a[1] <= b[0] and (a[0] < b[0] or a[0] == a[1]) for a, b in zip(mine, mine[1:])), spans
            assert set(lanes) == set(range(max(lanes) + 1))
            if not zero:
                most = max(sum(s <= t + 0.5 < e for s, e in spans) for t in range(70))
                assert max(lanes) + 1 == most, (spans, lanes)


def test_cli_packs_graph_lanes_on_request(tmp_path):
    src = _replay_on_streams(tmp_path)
    proc = run_cli("annotate", src, "-o", tmp_path / "p.json", "--pack-graph-lanes")
    assert proc.returncode == 0 and "packed 8 replayed kernels onto 3 graph replay lanes" in proc.stderr, proc.stderr
    proc = run_cli("annotate", src, "-o", tmp_path / "q.json")
    assert proc.returncode == 0 and "packed" not in proc.stderr
    import tracekit

    tracekit.annotate(src, tmp_path / "py.json", pack_graph_lanes=True)
    assert (tmp_path / "py.json").read_bytes() == (tmp_path / "p.json").read_bytes()


GRAPH_REPLAYS = [REAL / "hta/trace_diff/test/test.json.gz",  # replays on 4 streams
                 REAL.parent / "graphs/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
                 REAL / "tracelens/inference/vllm_decode_full/graph_execution.json.gz"]


@pytest.mark.parametrize("src", GRAPH_REPLAYS, ids=lambda p: p.parent.name)
def test_real_graph_replays_pack_and_attribute_the_same(src, tmp_path):
    if not src.exists():
        pytest.skip(f"{src} not present")
    before = _sha(src)
    if (src.parent / "capture_traces").is_dir():  # (the copy beside the same captures, which name its blocks)
        (tmp_path / "capture_traces").symlink_to(src.parent / "capture_traces")
    out, stats = _annotate(src, tmp_path, pack_graph_lanes=True)
    _check_lanes(src, out)
    assert stats.graph_kernels > 0
    _check_copy(src, out)
    assert _sha(src) == before


def test_sigterm_during_the_copy_leaves_no_temp_file(tmp_path):
    """``kill`` (a scheduler stopping a job) while the copy is written: exit 143, its temp file removed, no output."""
    import signal
    import subprocess
    import sys
    import time

    from support.paths import ROOT

    b = TraceBuilder()
    for k in range(4000):  # a copy long enough to be stopped while it is written
        attention_block(b, 200.0 * k, name=f"layer{k % 24}.attention")
    src = b.write(tmp_path / "big.pt.trace.json")
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "tracekit", "annotate", str(src), "-o", str(out / "a.json")],
                            cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(out.iterdir()) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    if proc.poll() is not None:
        pytest.skip("the copy ended before it could be stopped")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
    assert not list(out.iterdir())
