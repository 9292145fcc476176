"""A user's calibration file (tracekit.io.calibration_file): what it reads, and every hostile file it refuses in one
line (issue 39: ``tracekit whatif --calibration FILE`` and ``$TRACEKIT_CALIBRATION``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tracekit.calibration import CALIBRATIONS, calibration, calibrations_for
from tracekit.errors import UsageError
from tracekit.io.calibration_file import MAX_BYTES, calibration_document, read_calibration_file, user_calibrations

ENTRY = {"device": "NVIDIA H100 80GB HBM3", "backend": "cudnn", "eta_max": 0.61, "l_half": 800.0, "sms": 132,
         "tile_q": 128, "floor_us": 4.0, "small_us": 1.2, "head_dim": 64, "causal": True, "phase": "forward",
         "points": 4, "source": "a sweep on my H100"}


def _write(tmp_path: Path, doc: object, name: str = "cal.json") -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def _doc(**changes: object) -> dict:
    return {"tracekit_calibration": 1, "entries": [{**ENTRY, **changes}]}


def test_a_good_file_gives_its_entries_with_their_origin(tmp_path: Path) -> None:
    p = _write(tmp_path, _doc())
    [c] = read_calibration_file(p)
    assert (c.device, c.backend, c.eta_max, c.l_half, c.sms, c.points) == ("H100 SXM", "cudnn", 0.61, 800.0, 132, 4)
    assert c.origin == str(p) and c.source == "a sweep on my H100"


def test_the_writer_and_the_reader_agree(tmp_path: Path) -> None:
    """calibration_document is what read_calibration_file reads: the built-in entries go round unchanged."""
    doc = calibration_document(CALIBRATIONS, {"device_name": "NVIDIA H200", "torch": "2.11", "cudnn": None})
    back = read_calibration_file(_write(tmp_path, doc))
    assert [c.as_dict() for c in back] == [c.as_dict() for c in CALIBRATIONS]


def test_the_files_entries_replace_the_built_in_ones_of_their_device_only(tmp_path: Path) -> None:
    mine = _doc(device="NVIDIA H200", eta_max=0.7)
    entries, warnings = user_calibrations(_write(tmp_path, mine))
    assert warnings == []
    [cudnn] = calibrations_for("NVIDIA H200", entries)  # the file's device: only the file's backends
    assert cudnn.eta_max == 0.7 and cudnn.origin != "built-in"
    assert calibration("NVIDIA H200", "flash", entries) is None
    other = read_calibration_file(_write(tmp_path, _doc(), "h100.json"))
    entries, _ = user_calibrations(_write(tmp_path, {"tracekit_calibration": 1, "entries": [other[0].as_dict()]},
                                          "h100b.json"))
    assert [c.origin for c in calibrations_for("NVIDIA H200", entries)] == ["built-in"] * 3


HOSTILE = [
    ("not json", "{not json", "not valid JSON"),
    ("a list", [], "not a JSON object"),
    ("no version", {"entries": [ENTRY]}, "not a tracekit calibration file"),
    ("version true", {"tracekit_calibration": True, "entries": [ENTRY]}, "not a tracekit calibration file"),
    ("no entries", {"tracekit_calibration": 1, "entries": []}, "1 to 64 entries"),
    ("unknown top key", {"tracekit_calibration": 1, "entries": [ENTRY], "x": 1}, "unknown key 'x'"),
    ("entry not an object", {"tracekit_calibration": 1, "entries": [3]}, "entry 0 is not an object"),
    ("missing key", {"tracekit_calibration": 1, "entries": [{k: v for k, v in ENTRY.items() if k != "sms"}]},
     "missing key 'sms'"),
    ("unknown entry key", _doc(extra=1), "unknown key 'extra'"),
    ("string for a number", _doc(eta_max="0.5"), "'eta_max' must be a number"),
    ("bool for a number", _doc(l_half=True), "'l_half' must be a number"),
    ("float for an int", _doc(sms=132.0), "'sms' must be an integer"),
    ("int for a bool", _doc(causal=1), "'causal' must be true or false"),
    ("NaN", '{"tracekit_calibration": 1, "entries": [{"eta_max": NaN}]}', "not valid JSON"),
    ("Infinity", '{"tracekit_calibration": 1, "entries": [{"eta_max": Infinity}]}', "not valid JSON"),
    ("1e999", json.dumps(_doc()).replace('"l_half": 800.0', '"l_half": 1e999'), "not valid JSON"),
    ("2**64 count", json.dumps(_doc()).replace('"sms": 132', f'"sms": {2 ** 64}'), "'sms' must be an integer"),
    ("2**64 length", json.dumps(_doc()).replace('"l_half": 800.0', f'"l_half": {2 ** 64}'), "'l_half' is 1.84467e+19"),
    ("huge int in range type", _doc(sms=2 ** 40), "outside"),
    ("negative time", _doc(floor_us=-1.0), "'floor_us' is -1, outside"),
    ("zero efficiency", _doc(eta_max=0.0), "'eta_max' is 0, outside (0"),
    ("efficiency above peak", _doc(eta_max=1.5), "outside"),
    ("absurd small kernels", _doc(small_us=1e9), "outside"),
    ("one point", _doc(points=1), "outside"),
    ("unknown device", _doc(device="Imaginary GPU 9000"), "no peak figures"),
    ("unknown backend", _doc(backend="math"), "backend 'math' is not one of"),
    ("backward phase", _doc(phase="backward"), "only \"forward\""),
    ("empty source", _doc(source=""), "non-empty printable"),
    ("control chars", _doc(source="a\x1b[2Jb"), "non-empty printable"),
    ("duplicate", {"tracekit_calibration": 1, "entries": [ENTRY, ENTRY]}, "two entries for H100 SXM cudnn"),
    ("bad provenance", {"tracekit_calibration": 1, "entries": [ENTRY], "provenance": {"torch": 2}},
     "'torch' must be a short string"),
    ("deep nesting", "[" * 5000 + "]" * 5000, "not valid JSON"),
    ("invalid utf-8", b'{"tracekit_calibration": 1, "\xff": 1}', "not valid JSON"),
]


@pytest.mark.parametrize(("doc", "message"), [(d, m) for _, d, m in HOSTILE], ids=[i for i, _, _ in HOSTILE])
def test_a_hostile_file_is_one_usage_error_naming_it(tmp_path: Path, doc: object, message: str) -> None:
    p = tmp_path / "cal.json"
    if isinstance(doc, bytes):
        p.write_bytes(doc)
    else:
        _write(tmp_path, doc)
    with pytest.raises(UsageError) as err:
        read_calibration_file(p)
    text = str(err.value)
    assert text.startswith(f"calibration file {p}: ") and message in text and "\n" not in text
    assert err.value.exit_code == 2


def test_a_directory_a_fifo_a_missing_and_a_huge_file_are_refused_without_reading(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is a directory"):
        read_calibration_file(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it would block: it must be refused by its type first
    with pytest.raises(UsageError, match="not a regular file"):
        read_calibration_file(fifo)
    with pytest.raises(UsageError, match="cannot be read"):
        read_calibration_file(tmp_path / "absent.json")
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_BYTES + 1)
    with pytest.raises(UsageError, match=f"is {MAX_BYTES + 1} bytes"):
        read_calibration_file(big)


def test_the_environment_variable_names_a_file_and_a_bad_one_warns(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACEKIT_CALIBRATION", raising=False)
    assert user_calibrations(None) == (CALIBRATIONS, [])
    monkeypatch.setenv("TRACEKIT_CALIBRATION", str(_write(tmp_path, _doc())))
    entries, warnings = user_calibrations(None)
    assert warnings == [] and calibration("NVIDIA H100 80GB HBM3", "cudnn", entries) is not None
    monkeypatch.setenv("TRACEKIT_CALIBRATION", str(_write(tmp_path, _doc(eta_max=float("nan")), "nan.json")))
    entries, warnings = user_calibrations(None)
    assert entries == CALIBRATIONS
    [w] = warnings
    assert w.startswith("TRACEKIT_CALIBRATION: calibration file ") and w.endswith("using the built-in calibration")
    bad = _write(tmp_path, "[", "bad.json")  # the flag wins over the variable, and a bad flag is an error
    with pytest.raises(UsageError):
        user_calibrations(bad)
