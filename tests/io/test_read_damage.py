"""The reader under damage: unrepresentable values, syntax errors, tricky strings, truncation, gzip oddities.

Every expected figure comes from the hand-built bytes (event positions, counts), never from the reader.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import subprocess
import sys
import zlib

import pytest

from support.builders import TraceBuilder, attention_block
from support.paths import ROOT, real, requires_real
from support.cli import run_cli
from tracekit.io import jsonscan, read
from tracekit.errors import TraceFormatError, TracekitError, TraceReadError
from tracekit.io.read import EventStream, ReadSummary

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


# Every test here also with batches decoded in 1 KB pieces and the tail cut off early (conftest.read_pieces).
pytestmark = pytest.mark.usefixtures("read_pieces")


def _read(path, chunk=read.CHUNK):
    """(events, summary): the summary is what ``batches()`` returns when exhausted."""
    batches = EventStream(path, chunk=chunk).batches()
    events = []
    while True:
        try:
            events += next(batches)
        except StopIteration as done:
            assert isinstance(done.value, ReadSummary)
            return events, done.value


def _event(i: int, name: str | None = None, **extra) -> str:
    """One event's JSON text, written by hand so a test can plant raw bytes in it."""
    body = {"ph": "X", "cat": "cpu_op", "name": name or f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
    text = json.dumps(body)[:-1]
    for k, v in extra.items():
        text += f', "{k}": {v}'
    return text + "}"


def _doc(events: list[str], sep: str = ", ") -> tuple[bytes, list[int], list[int]]:
    """A Kineto-shaped document; with each event's (start, end) byte offsets in it."""
    head = '{"schemaVersion": 1, "traceEvents": ['
    starts, ends, pos = [], [], len(head)
    for k, e in enumerate(events):
        if k:
            pos += len(sep)
        starts.append(pos)
        pos += len(e.encode())
        ends.append(pos)
    text = head + sep.join(events) + '], "traceName": "t", "deviceProperties": [{"name": "GPU"}]}'
    return text.encode(), starts, ends


def _write(tmp_path, data: bytes, name="t.json"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


CHUNKS = [64, 1000, read.CHUNK]


# -- values JSON can spell but the reader cannot hold: only that event goes ---------------------
BAD_VALUES = {
    "float beyond a double": ('"ts"', "1e400", read.OUT_OF_RANGE),
    "int beyond 64 bits": ('"ts"', str(2**64), read.OUT_OF_RANGE),
    "negative int beyond 64 bits": ('"id"', str(-(2**63) - 1), read.OUT_OF_RANGE),
    "Bytes beyond 64 bits": ('"args"', f'{{"Bytes": {2**64}}}', read.OUT_OF_RANGE),
    "3000 deep in an unread key": ('"args"', '{"zz": ' + "[" * 3000 + "]" * 3000 + "}", read.TOO_DEEP),
    "5000 deep": ('"args"', '{"Input Dims": ' + "[" * 5000 + "]" * 5000 + "}", read.TOO_DEEP),
    "1e400 in an unread key": ('"args"', '{"zz": 1e400}', None),  # skipped unparsed: nothing lost
}


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_an_unrepresentable_value_drops_only_its_event(tmp_path, case, chunk):
    key, value, reason = BAD_VALUES[case]
    n, bad = 40, 17
    events = [_event(i) for i in range(n)]
    events[bad] = _event(bad, **{key.strip('"'): value}) if key != '"ts"' else events[bad].replace(
        f'"ts": {10 * bad}', f'"ts": {value}')
    data, _, _ = _doc(events)
    if reason != read.TOO_DEEP:
        json.loads(data)  # the document is valid JSON (Python reads any number, not any depth)
    got, summary = _read(_write(tmp_path, data), chunk)
    kept = [e.name for e in got]
    if reason is None:
        assert kept == [f"op{i}" for i in range(n)] and not summary.dropped
    else:
        assert kept == [f"op{i}" for i in range(n) if i != bad]
        assert summary.dropped == {reason: 1}
    assert not summary.damaged and not summary.warnings  # not "truncated": nothing was cut off


@pytest.mark.parametrize("chunk", [64, read.CHUNK])
def test_deep_input_dims_next_to_an_event_read_leniently(tmp_path, chunk):
    """A wrongly typed field sends its batch through the lenient path, which re-encodes Input Dims (orjson
    stops at 255 levels): the event is kept, as the typed path keeps it, whichever batch it falls in."""
    events = [_event(i) for i in range(20)]
    events[3] = events[3].replace('"pid": 1', '"pid": [1]')  # kept, without its pid
    events[9] = _event(9, args='{"Input Dims": ' + "[" * 300 + "]" * 300 + "}")
    got, summary = _read(_write(tmp_path, _doc(events)[0]), chunk)
    assert [e.name for e in got] == [f"op{i}" for i in range(20)]
    assert not summary.dropped and [e.pid for e in got][3] is None


def test_a_huge_number_mid_file_exits_3_with_the_event_counted(tmp_path):
    b = TraceBuilder()
    for k in range(3):
        attention_block(b, 1000 + 200 * k, name=f"layer{k}.attention")
    b.op("victim", 123456.25, 5)
    for k in range(3, 6):
        attention_block(b, 200000 + 200 * k, name=f"layer{k}.attention")
    text = json.dumps(b.build())
    assert text.count("123456.25") == 1
    path = _write(tmp_path, text.replace("123456.25", "1e400").encode())
    proc = run_cli("attribute", path, "--format", "json")
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and "truncated" not in proc.stderr
    assert "number out of range: 1" in proc.stderr
    out = json.loads(proc.stdout)
    assert [blk["name"] for blk in out["blocks"]] == [f"layer{k}.attention" for k in range(6)]


# -- syntax errors in a complete document: an error at the exact byte --------------------------
def _flip_cases(data: bytes, starts: list[int], ends: list[int]):
    """(description, position, replacement byte) for corruptions whose first bad byte is known exactly."""
    last, mid = len(starts) - 2, len(starts) // 2
    for k, where in ((last, "last events"), (mid, "mid-file")):
        e = data[starts[k]:ends[k]]
        yield f"':' after a key, {where}", starts[k] + e.index(b":"), b";"
        yield f"',' between keys, {where}", starts[k] + e.index(b","), b"x"
        yield f"a digit, {where}", starts[k] + e.index(b'"ts": ') + 6, b"q"
        yield f"the closing brace, {where}", ends[k] - 1, b"x"
        yield f"an opening brace, {where}", starts[k], b"x"
        yield f"a name's letter made invalid UTF-8, {where}", starts[k] + e.index(b'"op') + 1, b"\xff"


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("bom", [False, True])
def test_a_syntax_error_in_a_complete_document_is_an_error_at_its_byte(tmp_path, chunk, bom):
    clean, starts, ends = _doc([_event(i) for i in range(60)])
    pre = b"\xef\xbb\xbf" if bom else b""
    for what, pos, byte in _flip_cases(clean, starts, ends):
        data = bytearray(pre + clean)
        data[len(pre) + pos] = byte[0]
        with pytest.raises(TraceFormatError) as err:
            _read(_write(tmp_path, bytes(data)), chunk)
        assert f"not valid JSON at byte {len(pre) + pos:,} " in str(err.value), (what, str(err.value))


def test_a_syntax_error_through_the_cli_and_gzip(tmp_path):
    clean, _, _ = _doc([_event(i) for i in range(60)])
    data = bytearray(clean)
    pos = clean.index(b'"ts": 570') + 6
    data[pos] = ord("}")
    path = _write(tmp_path, gzip.compress(bytes(data)), "t.json.gz")
    proc = run_cli("attribute", path)
    assert proc.returncode == 1, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and f"not valid JSON at byte {pos:,} " in lines[0]


def test_garbage_after_a_cut_is_truncation_at_its_byte(tmp_path):
    """A crashed writer leaves zero bytes, not a document end: salvage up to them, say where."""
    clean, starts, _ = _doc([_event(i) for i in range(30)])
    cut = starts[20] + 7
    data = clean[:cut] + b"\0" * 4000
    got, summary = _read(_write(tmp_path, data), 256)
    assert [e.name for e in got] == [f"op{i}" for i in range(20)]
    assert summary.damaged and any(f"not valid JSON from byte {cut:,}" in w for w in summary.warnings)


# -- strings that look like structure ----------------------------------------------------------
NASTY = 'a},{"name": "x"}, {b ] ]] "traceEvents":[ \\" },{ \\\\ {[ "'


def _nasty_doc(n: int, indent=None) -> tuple[bytes, list[str]]:
    names = [f"{i}:{NASTY * (1 + i % 3)}" for i in range(n)]
    events = [{"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": i, "dur": 1, "args": {"note": "]},{"},
               "name": nm} for i, nm in enumerate(names)]  # the tricky text last: the last '},{' is in a string
    doc = {"meta": {"x": '"traceEvents": ['}, "traceEvents": events, "traceName": "x ] },{"}
    return json.dumps(doc, indent=indent).encode(), names


@pytest.mark.parametrize("indent", [None, 1])
@pytest.mark.parametrize("chunk", [7, 64, 333, 4096, read.CHUNK])
def test_strings_full_of_boundaries_are_read_exactly(tmp_path, chunk, indent):
    data, names = _nasty_doc(300, indent)
    got, summary = _read(_write(tmp_path, data), chunk)
    assert [e.name for e in got] == names
    assert not summary.damaged and not summary.warnings and not summary.dropped
    assert summary.header["traceName"] == "x ] },{" and summary.header["meta"] == {"x": '"traceEvents": ['}
    assert summary.bytes_read == len(data)


@pytest.mark.slow
def test_a_40mb_trace_of_boundary_strings_at_the_real_chunk(tmp_path):
    """Above the 32 MB chunk, strings full of '},{' once made a valid trace 'not valid JSON'."""
    one, names = _nasty_doc(2000)
    body = one[one.index(b'"traceEvents": [{') + 16:one.rindex(b'], "traceName"')]
    copies = (40 << 20) // len(body) + 1
    data = b'{"traceEvents": [' + b", ".join([body] * copies) + b"]}"
    got, summary = _read(_write(tmp_path, data))
    assert len(got) == 2000 * copies and [e.name for e in got[-2000:]] == names
    assert not summary.damaged and not summary.warnings


# -- truncation: exactly the complete events, and the bytes dropped named --------------------
@pytest.mark.parametrize("chunk", [64, 1000, read.CHUNK])
@pytest.mark.parametrize("sep", [", ", ",\n  ", "\n ,\n "])  # (the last: whitespace before the comma)
def test_a_cut_keeps_exactly_the_complete_events(tmp_path, chunk, sep):
    n = 50
    data, starts, ends = _doc([_event(i) for i in range(n)], sep)
    for cut in sorted({starts[3] + 1, ends[10], ends[10] + 1, starts[25] + 9, ends[n - 1] - 1, ends[n - 1]}):
        complete = sum(e <= cut for e in ends)
        got, summary = _read(_write(tmp_path, data[:cut]), chunk)
        assert [e.name for e in got] == [f"op{i}" for i in range(complete)], cut
        lost = cut - ends[complete - 1]
        assert summary.damaged
        warning = (f"trace is truncated: read {cut:,} bytes of JSON, dropped the last {lost:,} bytes "
                   "(events cut off mid-write)")
        assert summary.warnings == [warning], cut
    got, summary = _read(_write(tmp_path, data[:ends[n - 1] + 1]), chunk)  # the events' ']', then nothing
    lost_keys = "trace is truncated after its events: header keys at the end were lost"
    assert len(got) == n and summary.damaged and summary.warnings == [lost_keys]


def _work(monkeypatch) -> dict[str, int]:
    """Bytes handed to msgspec and to the scan, counted: linear salvage keeps them a few times the input."""
    done = {"decoded": 0, "scanned": 0}
    decode_events, scan = read.decode_events, jsonscan.scan

    def counted_decode(data):
        done["decoded"] += len(data)
        return decode_events(data)

    def counted_scan(buf, i, end, fresh):
        done["scanned"] += end - i
        return scan(buf, i, end, fresh)

    monkeypatch.setattr(read, "decode_events", counted_decode)
    monkeypatch.setattr(jsonscan, "scan", counted_scan)
    return done


@pytest.mark.parametrize("mb", [1, 4])
def test_salvaging_a_tail_of_brackets_is_linear(tmp_path, monkeypatch, mb):
    n = 2000
    data, _, ends = _doc([_event(i) for i in range(n)])
    cut = data[:ends[-1]] + b', {"ph": "X", "name": "' + b"]" * (mb << 20)
    done = _work(monkeypatch)
    got, summary = _read(_write(tmp_path, cut))
    assert len(got) == n and summary.damaged
    assert done["decoded"] + done["scanned"] < 4 * len(cut)


@requires_real
def test_salvaging_the_real_qwen_trace_cut_at_6mb_is_linear(tmp_path, monkeypatch):
    data = gzip.decompress(real(QWEN).read_bytes())[: 6 << 20]
    done = _work(monkeypatch)
    got, summary = _read(_write(tmp_path, data))
    assert summary.damaged and len(got) > 10_000
    assert done["decoded"] + done["scanned"] < 4 * len(data)


def test_salvage_of_4mb_of_brackets_takes_seconds_not_minutes(tmp_path):
    """Quadratic salvage took 221 s here; linear takes well under a second (a minute is generous)."""
    data, _, ends = _doc([_event(i) for i in range(20_000)])
    path = _write(tmp_path, data[:ends[-1]] + b', {"name": "' + b"]" * (4 << 20))
    proc = subprocess.run([sys.executable, "-m", "tracekit", "attribute", str(path)], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, check=False)
    assert proc.returncode in (1, 3) and "Traceback" not in proc.stderr and "truncated" in proc.stderr


# -- gzip and encoding oddities ----------------------------------------------------------------
def test_gzip_zero_padding_and_a_bom_are_accepted(tmp_path):
    data, _, _ = _doc([_event(i) for i in range(30)])
    plain, _ = _read(_write(tmp_path, data))
    variants = {
        "padded.json.gz": gzip.compress(data) + b"\0" * 10_000,
        "bom.json": b"\xef\xbb\xbf" + data,
        "bom.json.gz": gzip.compress(b"\xef\xbb\xbf" + data) + b"\0" * 3,
        "two-members.json.gz": gzip.compress(data[:500]) + b"\0" * 512 + gzip.compress(data[500:]) + b"\0",
    }
    for name, raw in variants.items():
        got, summary = _read(_write(tmp_path, raw, name), 64)
        assert [e.name for e in got] == [e.name for e in plain], name
        assert not summary.damaged and not summary.warnings, name
    for name, raw in variants.items():  # Python's gzip agrees: padding is no error
        if name.endswith(".gz"):
            assert gzip.GzipFile(fileobj=io.BytesIO(raw)).read().removeprefix(b"\xef\xbb\xbf") == data


def test_garbage_after_gzip_is_corrupt_gzip(tmp_path):
    data, _, _ = _doc([_event(i) for i in range(30)])
    with pytest.raises(TraceReadError, match="corrupt gzip data"):
        _read(_write(tmp_path, gzip.compress(data) + b"\0\0junk", "g.json.gz"))


def test_inflate_errors_are_caught_by_name():
    assert zlib.error in read._INFLATE_ERRORS and Exception not in read._INFLATE_ERRORS


# -- any bytes: a result or a typed error, never anything else ---------------------------------
def test_random_damage_never_escapes_as_another_exception(tmp_path):
    b = TraceBuilder(deviceProperties=[{"name": "GPU"}])
    for k in range(4):
        attention_block(b, 1000 + 200 * k, name=f"layer{k}.attention")
    clean = json.dumps(b.build(), indent=1).encode()
    rng = random.Random(8)
    for trial in range(300):
        data = bytearray(clean)
        kind = trial % 3
        if kind == 0:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 1:
            del data[rng.randrange(len(data)):]
        else:
            i = rng.randrange(len(data))
            data[i:i] = rng.choice([b"1e400", b"[" * 2000, b'"', b"\\", b"\xef\xbb\xbf", b"\0"])
        path = _write(tmp_path, bytes(data))
        for chunk in (64, read.CHUNK):
            try:
                _read(path, chunk)
            except TracekitError:
                pass


@pytest.mark.parametrize("raw", [b"\0" * 100, b"\xef\xbb\xbf", b"\x89PNG\r\n\x1a\n....", b"{\"traceEvents\": [}",
                                 b"[{]", b"\xef\xbb\xbf[1, 2]"])
def test_bytes_that_are_no_trace_get_a_one_line_error(tmp_path, raw):
    proc = run_cli("attribute", _write(tmp_path, raw))
    assert proc.returncode in (1, 3), proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error: ")]
    assert len(errors) == 1 and "t.json" in errors[0]


def test_an_event_far_larger_than_the_chunk_is_read_in_linear_work(tmp_path, monkeypatch):
    events = [_event(i) for i in range(10)]
    events[5] = _event(5, name="},{" * 1_000_000)
    data, _, _ = _doc(events)
    done = _work(monkeypatch)
    got, summary = _read(_write(tmp_path, data), 64)
    assert [e.name for e in got][4:7] == ["op4", "},{" * 1_000_000, "op6"] and not summary.warnings
    assert done["decoded"] + done["scanned"] < 8 * len(data)


@pytest.mark.parametrize("chunk", [64, read.CHUNK])
def test_a_syntax_error_after_a_wrongly_typed_value_is_located(tmp_path, chunk):
    """The typed decoder stops at the wrong type; the untyped retry must still report the syntax error."""
    events = [_event(i) for i in range(30)]
    events[28] = events[28].replace('"pid": 1', '"pid": [1]').replace('"dur": 5', '"dur": 5x')
    data, _, _ = _doc(events)
    with pytest.raises(TraceFormatError, match=f"not valid JSON at byte {data.index(b'5x') + 1:,} "):
        _read(_write(tmp_path, data), chunk)
