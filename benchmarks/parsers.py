"""Which JSON parser should tracekit use? Each candidate parses the same real traces in a fresh
process; the table shows the parse time (file already decompressed in memory) and peak RSS.

    python benchmarks/parsers.py [--reps 3] [trace.json.gz ...]

Candidates: stdlib json, orjson.loads (with and without the cyclic GC), msgspec decoding straight
into tracekit's typed event structs (tracekit.io.read: what tracekit does, in 32 MB chunks), and
ijson streaming the events (yajl2_c backend when available; counting only).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT.parent / "shared/traces/real"
DEFAULT = [
    "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "hta/df_index_resolver/df_index_resolver.json.gz",
    "tracelens/inference/xdit_flux_aiter/profile_trace_rank_0.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
]

CHILD = r"""
import gc, gzip, sys, time
path, how = sys.argv[1], sys.argv[2]
raw = open(path, "rb").read()
data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
del raw
t = time.perf_counter()
if how == "json":
    import json; json.loads(data)
elif how == "orjson":
    import orjson; orjson.loads(data)
elif how == "orjson-nogc":
    import orjson; gc.disable(); orjson.loads(data)
elif how == "msgspec-tracekit":
    sys.path.insert(0, sys.argv[3])
    import tempfile, os
    from pathlib import Path
    from tracekit.io.read import EventStream
    fd, tmp = tempfile.mkstemp(suffix=".json"); os.write(fd, data); os.close(fd)
    del data
    t = time.perf_counter()
    gc.disable()
    n = sum(len(b) for b in EventStream(Path(tmp)).batches())
    os.unlink(tmp)
elif how == "ijson":
    import io, ijson
    n = sum(1 for _ in ijson.items(io.BytesIO(data), "traceEvents.item", use_float=True))
print(time.perf_counter() - t)
"""

HOWS = ("json", "orjson", "orjson-nogc", "msgspec-tracekit", "ijson")


def measure(path: Path, how: str) -> tuple[float, float]:
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(path), how, str(ROOT)], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return float("nan"), ru.ru_maxrss / 1024
    return float(out), ru.ru_maxrss / 1024


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args(argv)
    traces = a.traces or [REAL / r for r in DEFAULT if (REAL / r).exists()]
    print(f"{'trace':44} {'MB':>6} " + " ".join(f"{h:>18}" for h in HOWS))
    for path in traces:
        import gzip
        mb = len(gzip.open(path).read()) / 1e6 if path.name.endswith(".gz") else path.stat().st_size / 1e6
        cells = []
        for how in HOWS:
            runs = [measure(path, how) for _ in range(a.reps)]
            secs = statistics.median(r[0] for r in runs)
            rss = max(r[1] for r in runs)
            cells.append(f"{secs:6.2f}s {mb / secs:4.0f}MB/s {rss:4.0f}M" if secs == secs else f"{'n/a':>18}")
        print(f"{path.name[:44]:44} {mb:6.1f} " + " ".join(f"{c:>18}" for c in cells))
    return 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print(f"({time.time() - t0:.0f} s)", file=sys.stderr)
    sys.exit(rc)
