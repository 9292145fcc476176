#!/usr/bin/env python
"""Regenerate sample_traces/: small CPU traces for tracekit's tests and docs.

    python scripts/make_samples.py [--out sample_traces] [--impl eager,sdpa]

Why: tracekit's tests need real PyTorch-profiler traces without torch at
test time. An eager/sdpa pair at the same shape lets tests compare a
softmax-bearing trace against a fused one. Settings are fixed (seed, one
thread, tiny model, with_stack off) so files stay small (tens of KB) and
the op sequence is reproducible; timestamps naturally differ per run.
"""
from __future__ import annotations

import argparse
import gzip
import platform
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SETTINGS = dict(layers=2, heads=2, d_model=64, seq=256, batch=1, active=2)


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def make_one(impl, out_dir, tmp):
    import torch

    from profiling.model import build
    from profiling.runner import profile_run

    s = SETTINGS
    name = f"cpu_{impl}_{s['seq']}"
    _, forward = build(impl, layers=s["layers"], heads=s["heads"], d_model=s["d_model"],
                       seq=s["seq"], batch=s["batch"], dtype=torch.float32,
                       device=torch.device("cpu"), causal=True)
    forward()  # warm-up outside the profiler as well
    gz = profile_run(forward, Path(tmp) / name, torch.device("cpu"), active=s["active"],
                     record_shapes=True, worker_name=name,
                     metadata=dict(impl=impl, dtype="float32", causal=True, device="cpu", **s))
    dest = Path(out_dir) / f"{name}.pt.trace.json.gz"
    with gzip.open(gz, "rb") as src, open(dest, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)  # mtime=0: no gzip header churn between runs
    return dest


def write_readme(out_dir, files, command):
    import torch

    s = SETTINGS
    rows = "\n".join(f"| `{f.name}` | {f.stat().st_size / 1024:.1f} KB |" for f in files)
    text = f"""# Sample traces

Small PyTorch-profiler traces (Chrome trace JSON, gzipped) of a tiny GPT-style
model on CPU, for tracekit's tests and examples. Each file is one TensorBoard
worker, so this folder also loads as one run in the PyTorch Profiler plugin.

Regenerate (overwrites the files below):

    {command}

| File | Size |
|------|------|
{rows}

How they were made:
- model: {s['layers']} layers, {s['heads']} heads, d_model {s['d_model']}, seq {s['seq']}, batch {s['batch']},
  float32, causal; attention impl as in the file name (`eager` = explicit
  QK^T/softmax/PV, `sdpa` = `torch.nn.functional.scaled_dot_product_attention`)
- each attention block is annotated `layer<i>.attention` with inner scopes
  (`qkv_proj`, `qk_matmul`, `scale_mask`, `softmax`, `pv_matmul` / `sdpa`,
  `merge_heads`, `out_proj`)
- `torch.profiler.schedule(wait=1, warmup=1, active={s['active']})`, so {s['active']} profiled
  steps and {s['layers'] * s['active']} annotated attention blocks per file;
  record_shapes on, with_stack / profile_memory / with_modules off; 1 CPU thread
- top-level trace keys `pytorch_version` and `profile_config` (these settings)
  are added with `prof.add_metadata*` (CPU traces carry no version otherwise)
- torch {torch.__version__}, Python {platform.python_version()}, CPU: {cpu_name()}
  ({platform.system()} {platform.machine()})
"""
    (Path(out_dir) / "README.md").write_text(text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "sample_traces"))
    p.add_argument("--impl", default="eager,sdpa", help="comma list (default: eager,sdpa)")
    opts = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    with tempfile.TemporaryDirectory() as tmp:
        for impl in [i.strip() for i in opts.impl.split(",") if i.strip()]:
            files.append(make_one(impl, out, tmp))
            print(f"wrote {files[-1]} ({files[-1].stat().st_size / 1024:.1f} KB)")
    command = "python scripts/make_samples.py" + (
        f" --impl {opts.impl}" if opts.impl != "eager,sdpa" else "")
    write_readme(out, files, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
