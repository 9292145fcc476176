"""The parse boundary under hostile input (issue 8): non-finite and huge numbers, unicode digits,
step numbers beyond int64, and kernels whose ``cat`` is missing or respelled.

Each bad event is dropped and counted, so the CLI warns and exits 3, never with a traceback;
the good events around it still give their known answer (``attention_block``: 31 µs per block).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
import math
import re

import pytest
from support.builders import CPU_PID, STREAM, TraceBuilder, attention_block
from support import fuzzing
from support.paths import real, requires_real
from support.traces import read_doc

from tracekit.io.builder import TraceBuilder as _Builder, _key, _num
from tracekit.model import TraceInfo
from tracekit.io.read import Args, Event

BERT = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"


def _one_block() -> dict:
    b = TraceBuilder()
    attention_block(b, 1000)
    return b.build()


def _kernel(**over) -> dict:
    ev = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": STREAM, "ts": 5000, "dur": 3,
          "args": {"correlation": 1, "device": 0}}
    args = over.pop("args", {})
    ev.update(over)
    ev["args"].update(args)
    return ev


def _run(tmp_path, doc: dict, fmt: str = "json"):
    """The CLI in-process (click's runner: real exit codes and stderr; an escaping exception is re-raised)."""
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    code, out, err = fuzzing.invoke("attribute", str(p), "--format", fmt)
    assert "Traceback" not in err, err
    return SimpleNamespace(returncode=code, stdout=out, stderr=err)


def _warning(proc) -> str:
    warn = [ln for ln in proc.stderr.splitlines() if ln.startswith("Warning:")]
    assert len(warn) == 1, proc.stderr
    return warn[0]


def _assert_dropped(proc, reason: str, n: int = 1) -> dict:
    """Exit 3, one warning naming ``reason: n``, and the one good block still worth 31 µs."""
    assert proc.returncode == 3, proc.stderr
    assert f"{reason}: {n}" in _warning(proc)
    out = json.loads(proc.stdout)
    assert out["totals"]["blocks"] == 1 and out["totals"]["total_us"] == pytest.approx(31)
    return out


# -- 1, 4: non-finite or huge numbers ------------------------------------------------------------

BIG = "1" + "0" * 400  # 10**400


@pytest.mark.parametrize("bad,reason", [
    (_kernel(ts="1e400"), "ts out of range"),
    (_kernel(ts="-1e400"), "ts out of range"),
    (_kernel(ts=2**53 + 1), "ts out of range"),
    (_kernel(ts="inf"), "missing or non-numeric ts"),
    (_kernel(dur=1e306), "dur out of range"),
    (_kernel(dur=1e17), "dur out of range"),  # 4: used to fail the absolute invariant tolerance
    (_kernel(dur=10**400), "number out of range"),  # a JSON integer literal past 64 bits: the reader drops it
    (_kernel(dur=BIG), "dur out of range"),
    (_kernel(dur="1e400"), "dur out of range"),
    (_kernel(dur="-1e400"), "negative dur"),
    (_kernel(dur="NaN"), "missing or non-numeric dur"),
    (_kernel(dur="1" + "0" * 5000), "missing or non-numeric dur"),  # beyond int()'s 4300 digits
    (_kernel(args={"correlation": "inf"}), "bad correlation"),
    (_kernel(args={"correlation": "1e400"}), "bad correlation"),
    (_kernel(args={"correlation": "nan"}), "bad correlation"),
    (_kernel(args={"External id": "Infinity"}), "bad External id"),
    (_kernel(args={"external id": "-inf"}), "bad External id"),
    ({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": CPU_PID, "tid": 1, "ts": 5000,
      "dur": 1, "args": {"correlation": "1e400"}}, "bad correlation"),
    ({"ph": "i", "name": "[memory]", "pid": CPU_PID, "tid": 1, "ts": 1001, "args": {"Bytes": 2**64}},
     "number out of range"),  # past 64 bits: dropped by the reader
    ({"ph": "i", "name": "[memory]", "pid": CPU_PID, "tid": 1, "ts": 1001, "args": {"Bytes": 2**50}},
     "[memory] Bytes out of range"),  # fits int64, past the loader's 2**48 bound
    ({"ph": "i", "name": "[memory]", "pid": CPU_PID, "tid": 1, "ts": 1001, "args": {"Bytes": str(2**64)}},
     "[memory] Bytes out of range"),
    ({"ph": "i", "name": "[memory]", "pid": CPU_PID, "tid": 1, "ts": 1001, "args": {"Bytes": "inf"}},
     "malformed [memory] event"),
    ({"ph": "i", "name": "[memory]", "pid": CPU_PID, "tid": 1, "ts": 1001,
      "args": {"Bytes": 64, "Device Type": "Infinity"}}, "malformed [memory] event"),
    ({"ph": "i", "name": "[memory]", "pid": CPU_PID, "tid": 1, "ts": "1e400", "args": {"Bytes": 64}},
     "ts out of range"),
    ({"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": "inf", "pid": CPU_PID, "tid": 1, "ts": 1},
     "bad fwdbwd flow id"),
    ({"ph": "f", "cat": "fwdbwd", "name": "fwdbwd", "id": 1, "pid": CPU_PID, "tid": 1, "ts": "1e400"},
     "ts out of range"),
])
def test_non_finite_or_huge_numbers_are_dropped_and_counted(tmp_path, bad, reason):
    doc = _one_block()
    doc["traceEvents"].append(bad)
    out = _assert_dropped(_run(tmp_path, doc), reason)
    assert all(math.isfinite(v) for v in out["totals"]["categories"].values())


def test_bounds_are_inclusive_where_documented(tmp_path):
    """dur = 1e12 µs (11.6 days) and epoch-sized µs times are still good events."""
    doc = _one_block()
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::long", "pid": CPU_PID, "tid": 2,
                               "ts": 1.7e15, "dur": 10**12})
    proc = _run(tmp_path, doc)
    assert proc.returncode == 0, proc.stderr


def _event(**kw) -> Event:
    return Event(ph="X", cat="kernel", name="k", pid=0, tid=7, **kw)


@pytest.mark.parametrize("ev,reason", [
    (_event(ts=math.nan, dur=1.0), "ts out of range"),
    (_event(ts=math.inf, dur=1.0), "ts out of range"),
    (_event(ts=-math.inf, dur=1.0), "ts out of range"),
    (_event(ts=1.0, dur=math.nan), "dur out of range"),
    (_event(ts=1.0, dur=math.inf), "dur out of range"),
    (_event(ts=1.0, dur=-math.inf), "negative dur"),
    (_event(ts=1.0, dur=1.0, args=Args(correlation=math.nan)), "bad correlation"),
    (_event(ts=1.0, dur=1.0, args=Args(correlation=math.inf)), "bad correlation"),
    (_event(ts=1.0, dur=1.0, args=Args(ext_id=-math.inf)), "bad External id"),
    (_event(ts=1.0, dur=1.0, args=Args(ext_id=1e300)), "bad External id"),
])
def test_float_nan_and_inf_after_decoding(ev, reason):
    """Floats that no JSON literal gives but a decoder might (NaN, ±inf) are dropped too."""
    b = _Builder(TraceInfo(source="x"))
    b._ingest([ev, _event(ts=2.0, dur=1.0, args=Args(correlation=5))])
    assert dict(b.dropped) == {reason: 1}
    assert [(d.ts, d.dur, d.correlation) for d in b.tr.device] == [(2000, 1000, 5)]


def test_number_strings():
    assert _num("12") == 12 and _num("1.5") == 1.5 and _num("1e3") == 1000.0
    for s in ("²", "١٢", "1_0", "abc", "", None):  # int() reads "١٢" and "1_0": not here
        assert _num(s) is None


# -- 2, 3: unicode digits and step numbers beyond int64 ----------------------------------------------

def test_unicode_digit_pid_is_an_opaque_label(tmp_path):
    """``"²".isdigit()`` is true but int("²") fails: the pid stays a label and nothing is lost."""
    assert _key("²") == "²" and _key("١٢") == "١٢" and _key("12") == 12
    doc = _one_block()
    for e in doc["traceEvents"]:
        if e["pid"] == CPU_PID:
            e["pid"] = "²"
    proc = _run(tmp_path, doc)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["totals"]["total_us"] == pytest.approx(31)


def _with_steps(*names: str) -> dict:
    """Two blocks, each inside its own ProfilerStep annotation named ``names[i]``."""
    b = TraceBuilder()
    for k, name in enumerate(names):
        t0 = 1000 + 1000 * k
        b.annotation(name, t0 - 10, 500)
        attention_block(b, t0, name=f"layer{k}.attention")
    return b.build()


@pytest.mark.parametrize("bad", ["ProfilerStep#²", "ProfilerStep#١", "ProfilerStep#18446744073709551616",
                                 "ProfilerStep#9223372036854775808", "ProfilerStep#" + "9" * 5000],
                         ids=["superscript", "arabic", "2**64", "2**63", "5000 digits"])
@pytest.mark.parametrize("fmt", ["json", "csv", "markdown", "table"])
def test_unusable_step_numbers_are_dropped(tmp_path, bad, fmt):
    """The step is dropped (counted), its block survives outside any step; every format renders."""
    proc = _run(tmp_path, _with_steps("ProfilerStep#7", bad), fmt)
    assert proc.returncode == 3, proc.stderr
    assert "bad ProfilerStep number: 1" in _warning(proc)
    if fmt == "json":
        out = json.loads(proc.stdout)
        assert out["totals"]["blocks"] == 2 and out["totals"]["total_us"] == pytest.approx(62)
        assert sorted((b["step"] is None, b["step"]) for b in out["blocks"]) == [(False, 7), (True, None)]


def test_largest_step_number_is_kept(tmp_path):
    top = 2**63 - 1
    proc = _run(tmp_path, _with_steps("ProfilerStep#7", f"ProfilerStep#{top}"))
    assert proc.returncode == 0, proc.stderr
    assert sorted(b["step"] for b in json.loads(proc.stdout)["blocks"]) == [7, top]


def test_non_numeric_step_suffix_is_an_ordinary_annotation(tmp_path):
    proc = _run(tmp_path, _with_steps("ProfilerStep#7", "ProfilerStep#warmup"))
    assert proc.returncode == 0, proc.stderr


# -- 5: kernels whose cat is missing or respelled -------------------------------------------------------

def _bert() -> dict:
    return read_doc(real(BERT))


def _kernel_events(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]


def _flash_us(doc: dict) -> float:
    """Flash kernel time straight from the JSON (every bert-small kernel is launched in the window)."""
    return sum(e["dur"] for e in _kernel_events(doc) if re.search("flash_fwd_kernel", e["name"]))


@requires_real
@pytest.mark.parametrize("spelling", ["Kernel ", "KERNEL", " kernel", "Kernel"])
def test_respelled_kernel_cat_is_still_a_kernel(tmp_path, spelling):
    doc = _bert()
    flash = _flash_us(doc)
    assert flash > 0
    exact = _run(tmp_path, doc)
    assert exact.returncode == 0, exact.stderr
    for e in _kernel_events(doc):
        e["cat"] = spelling
    proc = _run(tmp_path, doc)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["totals"]["categories"]["fused_attention"] == pytest.approx(flash, rel=1e-6)
    assert out["totals"] == json.loads(exact.stdout)["totals"]  # the 149 µs of attention, not 0


@requires_real
@pytest.mark.parametrize("how", ["removed", "null", "empty", "blank"])
def test_kernels_without_cat_are_counted_not_lost(tmp_path, how):
    doc = _bert()
    kernels = _kernel_events(doc)
    for e in kernels:
        if how == "removed":
            del e["cat"]
        else:
            e["cat"] = {"null": None, "empty": "", "blank": "  "}[how]
    proc = _run(tmp_path, doc)
    assert proc.returncode == 3, proc.stderr
    assert f"missing cat: {len(kernels)}" in _warning(proc)


@requires_real
def test_unread_categories_stay_silent(tmp_path):
    """python_function frames, 'Trace', 'overhead' and other categories tracekit does not read are
    not malformed: the real trace (which has them) gives no warning, and neither do respellings."""
    doc = _bert()
    cats = {e.get("cat") for e in doc["traceEvents"] if e.get("ph") == "X"}
    assert {"python_function", "Trace"} <= cats
    doc["traceEvents"] += [
        {"ph": "X", "cat": c, "name": "x", "pid": CPU_PID, "tid": 1, "ts": 1, "dur": 1}
        for c in ("overhead", "cuda_sync", "Python_Function ", "TRACE")]
    proc = _run(tmp_path, doc)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
