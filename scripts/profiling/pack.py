"""Tar a sweep's traces into a few size-capped tarballs, one per group of sequence lengths.

    python scripts/profiling/pack.py SWEEP_DIR OUT_DIR --groups 512,1024,2048 4096,8192,16384

Why: a GPU check may only bring back a handful of files under 16 MB each. Each
tarball holds <impl>_<seq>/<worker>.pt.trace.json.gz (TensorBoard layout, so it
unpacks into a log dir tracekit and TensorBoard read) but not the plain
trace.json copies; when a tarball would exceed --max-mb, the largest traces
are left out and named in its MANIFEST.txt (and on stdout). No torch import.
"""
from __future__ import annotations

import argparse
import io
import re
import sys
import tarfile
from pathlib import Path

RUN_DIR = re.compile(r"^(?P<impl>[A-Za-z0-9.-]+)_(?P<seq>\d+)$")


def traces_by_seq(sweep: Path) -> dict[int, list[Path]]:
    out: dict[int, list[Path]] = {}
    for d in sorted(p for p in sweep.iterdir() if p.is_dir()):
        m = RUN_DIR.match(d.name)
        if m:
            out.setdefault(int(m["seq"]), []).extend(sorted(d.glob("*.pt.trace.json.gz")))
    return out


def _write(tar_path: Path, sweep: Path, files: list[Path], manifest: str) -> int:
    with tarfile.open(tar_path, "w") as tar:
        data = manifest.encode()
        info = tarfile.TarInfo("MANIFEST.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for f in files:
            tar.add(f, arcname=str(f.relative_to(sweep)))
    return tar_path.stat().st_size


def pack(sweep: Path, out: Path, groups: list[list[int]], max_mb: float = 15.5,
         prefix: str = "traces") -> list[tuple[Path, list[Path]]]:
    """Write one tarball per group (skipping groups without traces); return (tarball, dropped)."""
    by_seq = traces_by_seq(sweep)
    out.mkdir(parents=True, exist_ok=True)
    limit = int(max_mb * 2**20)
    written = []
    for seqs in groups:
        files = [f for s in seqs for f in by_seq.get(s, [])]
        if not files:
            continue
        tar_path = out / f"{prefix}_L{seqs[0]}-{seqs[-1]}.tar" if len(seqs) > 1 else \
            out / f"{prefix}_L{seqs[0]}.tar"
        dropped: list[Path] = []
        while True:
            kept = [f for f in files if f not in dropped]
            manifest = "traces of " + ", ".join(map(str, seqs)) + "\n" + "".join(
                f"left out (size cap {max_mb} MB): {f.relative_to(sweep)} "
                f"({f.stat().st_size / 2**20:.1f} MB)\n" for f in dropped)
            size = _write(tar_path, sweep, kept, manifest)
            if size <= limit or not kept:
                break
            dropped.append(max(kept, key=lambda f: f.stat().st_size))
        for f in dropped:
            print(f"pack: left out {f.relative_to(sweep)} ({f.stat().st_size / 2**20:.1f} MB)")
        print(f"pack: {tar_path.name}: {len(kept)} traces, {size / 2**20:.1f} MB")
        written.append((tar_path, dropped))
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sweep", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--groups", nargs="+", required=True,
                   help="comma lists of sequence lengths, one per tarball")
    p.add_argument("--max-mb", type=float, default=15.5)
    opts = p.parse_args(argv)
    try:
        groups = [[int(v) for v in g.split(",") if v] for g in opts.groups]
    except ValueError:
        print(f"error: --groups must be comma lists of integers, got {opts.groups}",
              file=sys.stderr)
        return 2
    if not opts.sweep.is_dir():
        print(f"error: {opts.sweep}: not a directory", file=sys.stderr)
        return 1
    pack(opts.sweep, opts.out, groups, opts.max_mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
