#!/usr/bin/env python3
"""Regenerate every file in tests/golden/ from the current code, and say what changed.

The golden files pin tracekit's output contract; the tests compare against them. They must change
only on purpose, so regenerating is a reviewed step:

1. Run ``python scripts/regen_golden.py --check``: nothing is written; it prints, per file, every
   JSON path (or CSV column) whose value would change, old -> new, and exits 1 if any would.
2. Read each change and decide whether it is intended (a fix, a new field, a renamed column)
   or a regression. A changed number needs an independent reason (a hand count, the trace's own
   durations); "the code now says so" is not one.
3. Run ``python scripts/regen_golden.py`` to write the files, run ``python -m pytest -q``, and
   commit the golden files on their own, with the printed summary (or its gist) in the commit
   message, so the reviewer of the commit sees what moved and why.

Sources, as the tests that read the files produce them:
  attribute.json, attribute_header.csv  tests/support/builders.py's golden_trace(), ``tracekit attribute``
  diff.json, diff_header.csv            tests/support/pairs.py's eager/fused pair, ``tracekit diff``
  real_attribution.json.gz              every trace under ../shared/traces/real, through the JSON
                                        renderer's to_dict (skipped, with a note, when absent)
  whatif_eager_4096.json                ``tracekit whatif --backend all --format json`` of the shared H200
                                        sweep's eager_4096 (skipped, with a note, when absent)
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout's tracekit, and the tests' builders

from support.cli import diff_json, run_cli  # noqa: E402  (tests/support is importable only after the sys.path line)
from support.paths import REAL, SWEEP, real_trace_files  # noqa: E402  (likewise)


def _json_text(doc: Any) -> str:
    return json.dumps(doc, indent=2) + "\n"


def attribute_goldens(tmp: Path) -> dict[str, bytes]:
    from support.builders import golden_trace

    trace = golden_trace(tmp / "run.pt.trace.json.gz")
    out = json.loads(run_cli("attribute", trace, "--format", "json", check=True).stdout)
    out["tool"] = "tracekit X.Y.Z"
    header = run_cli("attribute", trace, "--format", "csv", check=True).stdout.splitlines()[0]
    return {"attribute.json": _json_text(out).encode(), "attribute_header.csv": (header + "\n").encode()}


def diff_goldens(tmp: Path) -> dict[str, bytes]:
    from support.pairs import eager, fused, two_layers, write

    before = write(tmp / "eager.json", two_layers(eager, gemm=[10, 12]))
    after = write(tmp / "fused.json", two_layers(fused, flash=[12, 14]))
    out = diff_json(run_cli("diff", before, after, "--format", "json", check=True))
    header = run_cli("diff", before, after, "--format", "csv", check=True).stdout.splitlines()[0]
    return {"diff.json": _json_text(out).encode(), "diff_header.csv": (header + "\n").encode()}


def real_golden() -> dict[str, bytes]:
    from tracekit import analyze
    from tracekit.renderers.jsonrenderer import to_dict

    files = real_trace_files()
    files = [f for f in files if f.name.endswith(".json.gz")]  # the set tests/suites/test_real_traces.py covers
    if not files:
        print(f"real_attribution.json.gz: skipped, no real traces at {REAL}")
        return {}
    doc = {f.relative_to(REAL).as_posix(): json.loads(json.dumps(to_dict(analyze(f).check(), "x")))
           for f in files}
    text = json.dumps(doc, indent=0, sort_keys=True)
    return {"real_attribution.json.gz": gzip.compress(text.encode(), mtime=0)}


def whatif_golden() -> dict[str, bytes]:
    run = SWEEP / "eager_4096"
    if not run.is_dir():
        print(f"whatif_eager_4096.json: skipped, no H200 sweep at {SWEEP}")
        return {}
    out = json.loads(run_cli("whatif", run, "--backend", "all", "--format", "json", check=True).stdout)
    out["tool"] = "tracekit X.Y.Z"
    return {"whatif_eager_4096.json": _json_text(out).encode()}


# -- what changed -----------------------------------------------------------------------------------

def _decode(name: str, data: bytes) -> Any:
    if name.endswith(".gz"):
        data = gzip.decompress(data)
    if name.endswith(".csv"):
        return data.decode().strip().split(",")
    return json.loads(data)


def _changes(old: Any, new: Any, path: str = "") -> Iterator[str]:
    """Every leaf that differs, as 'path: old -> new' (lists of different lengths are reported whole)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            p = f"{path}.{k}" if path else str(k)
            if k not in old:
                yield f"{p}: added {_short(new[k])}"
            elif k not in new:
                yield f"{p}: removed (was {_short(old[k])})"
            else:
                yield from _changes(old[k], new[k], p)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            yield from _changes(a, b, f"{path}[{i}]")
    elif old != new:
        yield f"{path}: {_short(old)} -> {_short(new)}"


def _short(x: Any) -> str:
    s = json.dumps(x, ensure_ascii=False)
    return s if len(s) <= 100 else s[:97] + "..."


def summarize(name: str, old: bytes | None, new: bytes, limit: int) -> list[str]:
    if old is None:
        return [f"{name}: new file"]
    if old == new:
        return [f"{name}: unchanged"]
    changes = list(_changes(_decode(name, old), _decode(name, new)))
    if not changes:
        return [f"{name}: same content, different bytes (formatting only)"]
    lines = [f"{name}: {len(changes)} change(s)"]
    lines += [f"  {c}" for c in changes[:limit]]
    if len(changes) > limit:
        lines.append(f"  ... and {len(changes) - limit} more (--limit to see them)")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if any golden file would change")
    ap.add_argument("--limit", type=int, default=40, help="changes to print per file (default 40)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        makers: list[Callable[[], dict[str, bytes]]] = [
            lambda: attribute_goldens(tmp), lambda: diff_goldens(tmp), real_golden, whatif_golden]
        fresh: dict[str, bytes] = {}
        for make in makers:
            fresh.update(make())
    stale = sorted(p.name for p in GOLDEN.iterdir() if p.is_file() and p.suffix != ".md"
                   and p.name not in fresh and not (p.name == "real_attribution.json.gz" and not REAL.is_dir())
                   and not (p.name == "whatif_eager_4096.json" and not SWEEP.is_dir()))
    changed = False
    for name, data in fresh.items():
        path = GOLDEN / name
        old = path.read_bytes() if path.exists() else None
        print("\n".join(summarize(name, old, data, args.limit)))
        if old != data:
            changed = True
            if not args.check:
                path.write_bytes(data)
    for name in stale:
        print(f"{name}: no test produces it any more; delete it by hand if that is intended")
    if args.check:
        return 1 if changed else 0
    if changed:
        print("\nwritten. Review: git diff --stat tests/golden; python -m pytest -q; commit the golden files alone, "
              "with this summary in the message.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
