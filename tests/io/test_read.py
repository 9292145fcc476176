"""The streaming reader: chunk boundaries, awkward strings, truncation at any byte."""

from __future__ import annotations

import json

import pytest

from support.builders import TraceBuilder, attention_block
from tracekit.io import read
from tracekit.io.read import EventStream


# Every test here also with batches decoded in 1 KB pieces and the tail cut off early (conftest.read_pieces).
pytestmark = pytest.mark.usefixtures("read_pieces")


def _names(path, chunk):
    """Every event's name, and the reader's summary (returned when its batches run out)."""
    batches = EventStream(path, chunk=chunk).batches()
    names = []
    while True:
        try:
            names += [e.name for e in next(batches)]
        except StopIteration as done:
            return names, done.value


def _tricky(tmp_path, indent=None):
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "GPU }, {"}], traceName="x ], }")
    attention_block(b, 1000)
    b.op('weird},{"name": "x"}, {op', 2000, 5)  # boundary-looking text inside a string
    b.op("big" + "x" * 5000, 3000, 5)  # one event larger than the chunk
    b.op("last", 4000, 5)
    doc = b.build()
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc, indent=indent))
    return path, [e["name"] for e in doc["traceEvents"]]


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("chunk", [7, 64, 1000, 1 << 20])
def test_every_chunk_size_gives_the_same_events(tmp_path, indent, chunk):
    path, expected = _tricky(tmp_path, indent)
    names, stream = _names(path, chunk)
    assert names == expected
    assert not stream.damaged
    assert stream.header["deviceProperties"][0]["name"] == "GPU }, {" and stream.header["traceName"] == "x ], }"


def _event_ends(data: bytes) -> list[int]:
    """Byte offset just after each event, found by Python's own JSON decoder (not tracekit's)."""
    text = data.decode()
    dec = json.JSONDecoder()
    i = text.index("[", text.index('"traceEvents"')) + 1
    ends = []
    while True:
        while text[i] in " \n,":
            i += 1
        if text[i] == "]":
            return ends
        _, i = dec.raw_decode(text, i)
        ends.append(len(text[:i].encode()))


def test_truncation_at_any_byte_keeps_exactly_the_complete_events(tmp_path):
    path, expected = _tricky(tmp_path, indent=1)
    data = path.read_bytes()
    ends = _event_ends(data)
    start = data.index(b"[")
    for cut in range(start + 2, ends[-1], max(1, len(data) // 300)):
        complete = sum(e <= cut for e in ends)
        p = tmp_path / "cut.json"
        p.write_bytes(data[:cut])
        if not complete:
            continue
        names, summary = _names(p, 512)
        assert names == expected[:complete]
        lost = cut - ends[complete - 1]
        warning = (f"trace is truncated: read {cut:,} bytes of JSON, dropped the last {lost:,} bytes "
                   "(events cut off mid-write)")
        assert summary.damaged and summary.warnings == [warning]


def test_key_order_does_not_matter(tmp_path):
    """TraceLens writes its metadata first; Kineto writes header keys after the events."""
    b = TraceBuilder()
    attention_block(b, 1000)
    doc = b.build()
    events = doc.pop("traceEvents")
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"metadata": {"x": [{"y": "]}"}]}, "traceEvents": events, **doc,
                                "deviceProperties": [{"name": "GPU"}]}))
    names, stream = _names(path, 256)
    assert len(names) == len(events)
    assert stream.header["deviceProperties"] == [{"name": "GPU"}] and "metadata" in stream.header


def test_a_batch_with_an_odd_event_decodes_the_others_as_they_are_spelled():
    """One event that cannot be typed (a list for a number, an id beyond 64 bits) sends its batch to the lenient
    path; the other events are still decoded typed, so their raw shapes keep the file's spelling and the
    model does not depend on where batches or a worker's pieces were cut."""
    import msgspec

    from tracekit.io.read import decode_events

    good = [{"ph": "X", "cat": "cpu_op", "name": f"aten::mm{i}", "ts": i, "dur": 1,
             "args": {"Input Dims": [[2, i], [i, 3]], "Input type": ["float", "float"], "External id": i}}
            for i in range(1, 6)]
    odd = {"ph": "X", "cat": "cpu_op", "name": "odd", "ts": 7, "dur": 1,
           "args": {"Input Dims": [[1, 1]], "correlation": [1]}}
    huge = {"ph": "X", "cat": "cpu_op", "name": "huge", "ts": 1, "dur": 1, "id": 2**70}
    alone = [decode_events(json.dumps([e], indent=1).encode())[0][0] for e in good]
    events, dropped = decode_events(json.dumps(good[:2] + [odd] + good[2:] + [huge], indent=1).encode())
    assert dict(dropped) == {"number out of range": 1}
    assert [e.name for e in events] == ["aten::mm1", "aten::mm2", "odd", "aten::mm3", "aten::mm4", "aten::mm5"]
    kept = [e for e in events if e.name != "odd"]
    assert [bytes(e.args.dims) for e in kept] == [bytes(e.args.dims) for e in alone]
    assert b"\n" in bytes(kept[0].args.dims)  # the file's own spelling (indented), not a re-encoding
    assert kept == alone
    assert events[2].args.correlation is None and bytes(events[2].args.dims) == msgspec.json.encode([[1, 1]])


@pytest.mark.parametrize("sep", [", ", ",\n  ", "\n ,\n "])
def test_a_clean_file_is_decoded_once_in_pieces(tmp_path, monkeypatch, sep):
    """Pieces are cut at true boundaries, whitespace before the comma included: no byte is decoded twice,
    and every event comes out once, in order."""
    monkeypatch.setattr(read, "PIECE", 1 << 10)
    monkeypatch.setattr(read, "_TAIL_WINDOW", 4 << 10)  # (a file within one chunk: its events before the last)
    events = [json.dumps({"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1})
              for i in range(3000)]
    data = ('{"traceEvents": [' + sep.join(events) + "]}").encode()
    path = tmp_path / "t.json"
    path.write_bytes(data)
    decoded = []
    decode = read.decode_events
    monkeypatch.setattr(read, "decode_events", lambda d: (decoded.append(len(d)), decode(d))[1])
    names, summary = _names(path, read.CHUNK)
    assert names == [f"op{i}" for i in range(3000)] and not summary.warnings
    assert len(decoded) > 100 and sum(decoded) < len(data) * 1.01  # many pieces, each byte once
