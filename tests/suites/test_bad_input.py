"""Bad input: a one-line ``Error: …`` naming the file, a non-zero exit, never a traceback."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest

from support.builders import TraceBuilder, attention_block
from support.cli import run_cli


def _assert_one_line_error(proc, *needles, code=1):
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    assert proc.stdout == ""


def _good(tmp_path, name="good.json", blocks=3):
    b = TraceBuilder()
    for k in range(blocks):
        attention_block(b, 1000 + 200 * k, name=f"layer{k}.attention")
    return b


def test_missing_file(tmp_path):
    _assert_one_line_error(run_cli("attribute", tmp_path / "nope.json"), "nope.json", "no such file")


def test_folder_without_traces(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    _assert_one_line_error(run_cli("attribute", tmp_path), "holds no")


def test_empty_file(tmp_path):
    (tmp_path / "e.json").write_bytes(b"")
    _assert_one_line_error(run_cli("attribute", tmp_path / "e.json"), "e.json", "empty")


def test_not_json(tmp_path):
    (tmp_path / "x.json").write_text("this is not json {")
    _assert_one_line_error(run_cli("attribute", tmp_path / "x.json"), "x.json", "not valid JSON")


@pytest.mark.parametrize("doc", [{"hello": 1}, [1, 2, 3], {"traceEvents": "oops"}, "a string"])
def test_json_that_is_not_a_trace(tmp_path, doc):
    (tmp_path / "d.json").write_text(json.dumps(doc))
    _assert_one_line_error(run_cli("attribute", tmp_path / "d.json"), "d.json", "not a PyTorch profiler trace")


def test_trace_without_events(tmp_path):
    (tmp_path / "d.json").write_text(json.dumps({"traceEvents": [{"ph": "M", "name": "process_name"}]}))
    _assert_one_line_error(run_cli("attribute", tmp_path / "d.json"), "no profiler events")


def test_corrupt_gzip(tmp_path):
    data = bytearray(gzip.compress(json.dumps(_good(tmp_path).build()).encode()))
    data[20:40] = b"\xff" * 20
    (tmp_path / "c.json.gz").write_bytes(bytes(data))
    _assert_one_line_error(run_cli("attribute", tmp_path / "c.json.gz"), "c.json.gz", "corrupt gzip")


def test_truncated_json_is_salvaged_and_says_so(tmp_path):
    data = json.dumps(_good(tmp_path).build(), indent=1).encode()
    full = run_cli("attribute", _good(tmp_path).write(tmp_path / "full.json"), "--format", "json")
    cut = data.rindex(b'"layer2.attention"')  # cut inside the third block's annotation
    (tmp_path / "t.json").write_bytes(data[:cut])
    proc = run_cli("attribute", tmp_path / "t.json", "--format", "json")
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "truncated" in proc.stderr and "dropped" in proc.stderr
    out = json.loads(proc.stdout)
    assert [b["name"] for b in out["blocks"]] == ["layer0.attention", "layer1.attention"]
    assert json.loads(full.stdout)["totals"]["blocks"] == 3


def _complete_events(text: str) -> list[dict]:
    """The events of a cut-off ``{"traceEvents": [...`` document that survived whole (an independent
    parser: the stdlib's, one event at a time)."""
    dec = json.JSONDecoder()
    i = text.index("[") + 1
    out = []
    while True:
        while i < len(text) and text[i] in " ,\n":
            i += 1
        try:
            ev, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return out
        out.append(ev)


def test_truncated_gzip_is_salvaged(tmp_path):
    gz = gzip.compress(json.dumps(_good(tmp_path, blocks=8).build()).encode())
    (tmp_path / "t.json.gz").write_bytes(gz[: len(gz) * 3 // 4])
    proc = run_cli("attribute", tmp_path / "t.json.gz", "--format", "json")
    assert proc.returncode == 3, proc.stderr
    assert "gzip stream ends early" in proc.stderr and "truncated" in proc.stderr
    # What survived, counted independently: inflate the cut stream and parse the complete events.
    survived = _complete_events(zlib.decompressobj(wbits=31).decompress(gz[: len(gz) * 3 // 4]).decode())
    ops = [e for e in survived if e.get("cat") == "cpu_op"]

    def has_core(a: dict) -> bool:  # QKᵀ → softmax → PV all survived inside the range (issue 22: no core, no block)
        inside = [o["name"] for o in ops if a["ts"] <= o["ts"] <= a["ts"] + a["dur"]]
        return inside.count("aten::bmm") >= 2 and "aten::_softmax" in inside

    blocks = [e["name"] for e in survived if e.get("cat") == "user_annotation" and has_core(e)]
    launched = {e["args"]["correlation"] for e in survived if e.get("cat") == "cuda_runtime"}
    device_us = sum(e["dur"] for e in survived if e.get("cat") in ("kernel", "gpu_memset")
                    and e["args"]["correlation"] in launched)
    assert 0 < len(blocks) < 8
    out = json.loads(proc.stdout)
    assert [b["name"] for b in out["blocks"]] == blocks
    assert out["totals"]["total_us"] == pytest.approx(device_us)


def test_odd_fields_are_dropped_with_a_warning(tmp_path):
    b = _good(tmp_path, blocks=1)
    doc = b.build()
    ev = doc["traceEvents"]
    ev.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5})  # missing dur
    ev.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5, "dur": -3})  # negative
    ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": "abc", "dur": 1})
    ev.append("not an event")
    for e in ev:  # numbers written as strings are still numbers
        if e.get("cat") == "user_annotation" if isinstance(e, dict) else False:
            e["ts"], e["dur"] = str(e["ts"]), str(e["dur"])
    (tmp_path / "odd.json").write_text(json.dumps(doc))
    proc = run_cli("attribute", tmp_path / "odd.json", "--format", "json")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    warn = [ln for ln in proc.stderr.splitlines() if ln.startswith("Warning:")]
    assert len(warn) == 1 and "dropped 4 malformed events" in warn[0]
    assert "negative dur: 1" in warn[0] and "missing or non-numeric dur: 1" in warn[0]
    out = json.loads(proc.stdout)
    assert out["totals"]["blocks"] == 1 and out["totals"]["total_us"] == pytest.approx(31)


def test_all_events_malformed(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1}]}))
    _assert_one_line_error(run_cli("attribute", tmp_path / "m.json"), "no usable events")


def test_output_never_overwrites_the_input(tmp_path):
    p = _good(tmp_path).write(tmp_path / "in.json")
    before = p.read_bytes()
    _assert_one_line_error(run_cli("attribute", p, "-o", p), "refusing to overwrite", code=2)
    assert p.read_bytes() == before


def test_bad_scope_regex_is_a_usage_error(tmp_path):
    p = _good(tmp_path).write(tmp_path / "in.json")
    proc = run_cli("attribute", p, "--scope", "([")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "regular expression" in proc.stderr
