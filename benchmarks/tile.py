"""Make a big trace by tiling a real one: N copies back to back, every id shifted per copy.

Timestamps shift by the source's span (plus a gap); correlation ids, External ids, flow ids,
Python ids and ``ProfilerStep#N`` shift by per-copy strides, so links stay consistent and unique.
The attribution of the tiled trace is the source's attribution times N (a test checks this).
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

import orjson

_ID_ARGS = ("correlation", "External id", "external id", "Python id", "Python parent id", "Ev Idx",
            "Record function id", "Sequence number")


def _load(path: Path) -> dict:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return orjson.loads(raw)


def _stride(values) -> int:
    top = max((v for v in values if isinstance(v, int)), default=0)
    s = 10
    while s <= top:
        s *= 10
    return s


def tile(src: Path, dst: Path, copies: int) -> int:
    """Write ``copies`` copies of ``src`` into ``dst``; returns the number of events written."""
    doc = _load(src)
    events = doc["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    spans = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in body if isinstance(e.get("ts"), (int, float))]
    t0 = min(s for s, _ in spans)
    period = max(e for _, e in spans) - t0 + 1000.0
    ids = [e["args"].get(k) for e in body if isinstance(e.get("args"), dict) for k in _ID_ARGS]
    ids += [e.get("id") for e in body]
    id_stride = _stride(ids)
    steps = [int(e["name"][13:]) for e in body if str(e.get("name", "")).startswith("ProfilerStep#")
             and e["name"][13:].isdigit()]
    step_stride = (max(steps) - min(steps) + 1) if steps else 0
    head = {k: v for k, v in doc.items() if k not in ("traceEvents", "metadata")}
    opener = gzip.open if dst.name.endswith(".gz") else open
    n = 0
    with opener(dst, "wb") as out:
        out.write(b'{"schemaVersion": 1,\n  "traceEvents": [\n')
        first = True
        for e in meta:
            out.write((b"" if first else b",\n") + b"  " + orjson.dumps(e))
            first = False
            n += 1
        for k in range(copies):
            dt = k * period
            di = k * id_stride
            for e in body:
                c = dict(e)
                if isinstance(c.get("ts"), (int, float)):
                    c["ts"] = round(c["ts"] + dt, 3)
                if k:
                    if isinstance(c.get("id"), int):
                        c["id"] = c["id"] + di
                    a = c.get("args")
                    if isinstance(a, dict):
                        a = dict(a)
                        for key in _ID_ARGS:
                            v = a.get(key)
                            if isinstance(v, int) and v > 0:
                                a[key] = v + di
                        c["args"] = a
                    name = c.get("name")
                    if (step_stride and isinstance(name, str) and name.startswith("ProfilerStep#")
                            and name[13:].isdigit()):
                        c["name"] = f"ProfilerStep#{int(name[13:]) + k * step_stride}"
                out.write((b"" if first else b",\n") + b"  " + orjson.dumps(c))
                first = False
                n += 1
        out.write(b"\n  ],\n")
        out.write(orjson.dumps(head)[1:-1] + b"\n}\n" if head else b'"traceName": "tiled"\n}\n')
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--copies", type=int, default=None)
    ap.add_argument("--size-mb", type=float, default=None, help="aim for about this many MB of JSON")
    a = ap.parse_args(argv)
    copies = a.copies
    if copies is None:
        if a.size_mb is None:
            ap.error("give --copies or --size-mb")
        one = a.dest.with_suffix(".one.json")
        tile(a.source, one, 1)
        copies = max(1, round(a.size_mb * 1e6 / one.stat().st_size))
        one.unlink()
    n = tile(a.source, a.dest, copies)
    print(f"{a.dest}: {copies} copies, {n:,} events, {a.dest.stat().st_size / 1e6:,.1f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
