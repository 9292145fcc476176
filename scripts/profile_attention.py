#!/usr/bin/env python
"""Profile attention implementations in a small GPT-style model and compare them.

    python scripts/profile_attention.py --impl eager,sdpa --seq 512,1024 --out runs/

Each (impl, seq) gets <out>/<impl>_<seq>/ with TensorBoard profiler logs
(one *.pt.trace.json.gz) and a plain trace.json; the comparison table is
printed and written to <out>/summary.csv and <out>/summary.md. Attribution
shares come from tracekit.analyze on each run dir. Impls that cannot run on
this device are skipped with a one-line message on stderr.
GPU sweep used for the H200 check: scripts/gpu_check.sh OUT_DIR.

    python scripts/profile_attention.py --calibrate [--calibration-out FILE]

runs the SDPA cuDNN, flash and memory-efficient backends at the shared H200 sweep's sizes (unless given: L =
512..4096, B=4, 16 heads of 64, bf16, 4 layers, shapes recorded) on the local GPU, fits a fused-attention
calibration to the traces it wrote (tracekit.run.calibrate) and writes it with its provenance to FILE
(default: tracekit-calibration-<device>.json), for `tracekit whatif --calibration FILE`. Without CUDA it refuses
in one line (exit 2) before running anything.
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from profiling.impls import IMPLS  # noqa: E402  (no torch import here: fast errors)

DTYPES = ("float32", "float16", "bfloat16")
# --calibrate: the fused backends a calibration has entries for, and the shared H200 sweep's sizes (MANIFEST.md),
# used for each option left at its default
CALIBRATE_IMPLS = "sdpa-cudnn,sdpa-flash,sdpa-efficient"
CALIBRATE_SIZES = {"seq": "512,1024,2048,4096", "layers": 4, "heads": 16, "d_model": 1024, "batch": 4,
                   "dtype": "bfloat16"}


def _positive_ints(text, what):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{what} must be a comma-separated list of integers, got {text!r}")
    if not values:
        raise ValueError(f"{what} is empty")
    bad = [v for v in values if v <= 0]
    if bad:
        raise ValueError(f"{what} must be > 0, got {bad[0]}")
    return list(dict.fromkeys(values))


def _impls(text):
    names = [v.strip() for v in text.split(",") if v.strip()]
    if names == ["all"]:
        return list(IMPLS)
    unknown = [n for n in names if n not in IMPLS]
    if unknown or not names:
        raise ValueError(f"unknown impl {unknown[0]!r} (choose from: all, {', '.join(IMPLS)})"
                         if unknown else "--impl is empty")
    return list(dict.fromkeys(names))


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option is one `error: ...` line on stderr (exit 2)."""

    def error(self, message):
        self.exit(2, f"error: {message} (see --help)\n")


def make_parser():
    p = _Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", default="eager,sdpa",
                   help=f"comma list of: {', '.join(IMPLS)} (or 'all')")
    p.add_argument("--seq", default="512,1024", help="comma list of sequence lengths")
    p.add_argument("--out", default="runs", help="output directory (default: runs)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True,
                   help="causal masking (default: on)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--active-steps", type=int, default=2,
                   help="profiled steps after wait=1, warmup=1 (default: 2)")
    p.add_argument("--record-shapes", action="store_true")
    p.add_argument("--profile-memory", action="store_true")
    p.add_argument("--with-stack", action="store_true",
                   help="record Python stacks, which also records nn.Module ranges (tracekit's 'module' blocks)")
    p.add_argument("--with-modules", action="store_true",
                   help="deprecated alias of --with-stack (torch's with_modules records nothing in eager mode)")
    p.add_argument("--model", default="gpt",
                   help="gpt (this script's model) or hf:gpt2, hf:bert, hf:llama, hf:vit "
                        "(transformers, random weights)")
    p.add_argument("--attn", default="eager,sdpa",
                   help="hf models: comma list of attn_implementation (eager, sdpa, flash_attention_2)")
    p.add_argument("--mode", choices=("infer", "train"), default="infer",
                   help="train: forward, backward and an optimizer step per profiled step")
    p.add_argument("--compile", action="store_true", help="run the model through torch.compile")
    p.add_argument("--window", type=int, default=256, help="sparse: sliding-window size")
    p.add_argument("--sparse-mode", choices=("auto", "flex", "masked"), default="auto",
                   help="sparse: FlexAttention block mask, banded-mask fallback, or auto")
    p.add_argument("--min-time", type=float, default=0.2,
                   help="CPU latency: about this many seconds for all repeats (a slower forward "
                        "is still timed at least 5 times, once per repeat)")
    p.add_argument("--iters", type=int, default=20,
                   help="GPU latency: timed iterations per repeat (default: 20)")
    p.add_argument("--repeats", type=int, default=5,
                   help="latency repeats (CPU: at least 5); Time is their median, ± half their "
                        "range; each repeat's time goes to measured.json's samples_ms (default: 5)")
    p.add_argument("--timing-seconds", type=float, default=None,
                   help="GPU latency: cap repeats*iters*forward at about this many seconds "
                        "by timing fewer iterations (>= 3) per repeat (default: no cap)")
    p.add_argument("--energy-seconds", type=float, default=1.0,
                   help="GPU energy: seconds of forwards metered by NVML (default: 1)")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="GPU: also time replays of one forward captured in a CUDA graph "
                        "(kernels without launch overhead): the `Graph (ms)` column")
    p.add_argument("--graph-max-ms", type=float, default=None,
                   help="--cuda-graphs only for forwards faster than this (slower ones are not "
                        "launch-bound; saves time); default: all")
    p.add_argument("--first", default="",
                   help="comma list of impls whose configs run before all others (so a time "
                        "budget cuts the extras, not these); the table keeps the usual order")
    p.add_argument("--time-budget", type=float, default=None,
                   help="seconds: configs not started by then become `skipped: time budget` "
                        "rows (default: none)")
    p.add_argument("--quadratic-max-seq", type=int, default=None,
                   help="skip impls that materialise L x L scores (eager, sdpa-math, "
                        "quantized*, autocast, masked sparse) above this length")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU intra-op threads (default: torch's); 1 is steadier on a busy box")
    p.add_argument("--calibrate", action="store_true",
                   help="run the SDPA backends on this GPU and write a tracekit whatif calibration (needs CUDA)")
    p.add_argument("--calibration-out", default=None, metavar="FILE",
                   help="--calibrate: the calibration file (default: tracekit-calibration-<device>.json)")
    return p


def _calibrate_options(parser, opts):
    """--calibrate: the fused impls, recorded shapes, and the sweep's sizes for options left at their default."""
    if opts.calibration_out is not None and not opts.calibrate:
        parser.error("--calibration-out needs --calibrate")
    if not opts.calibrate:
        return
    if opts.model != "gpt" or opts.mode != "infer":
        parser.error("--calibrate runs this script's model forward only (no --model hf:..., no --mode train)")
    opts.impl, opts.record_shapes = CALIBRATE_IMPLS, True
    for name, value in CALIBRATE_SIZES.items():
        if getattr(opts, name) == parser.get_default(name):
            setattr(opts, name, value)


def parse_args(argv=None):
    parser = make_parser()
    opts = parser.parse_args(argv)
    _calibrate_options(parser, opts)
    if opts.with_modules:
        print("warning: --with-modules is deprecated; using --with-stack", file=sys.stderr)
        opts.with_stack, opts.with_modules = True, False
    try:
        from profiling.hf_models import ATTN_IMPLS, parse_model

        parse_model(opts.model)
        opts.attns = [a.strip() for a in opts.attn.split(",") if a.strip()]
        bad = [a for a in opts.attns if a not in ATTN_IMPLS]
        if bad or not opts.attns:
            raise ValueError(f"unknown --attn {bad[0]!r} (choose from: {', '.join(ATTN_IMPLS)})" if bad
                             else "--attn is empty")
        if opts.mode == "train" and opts.model == "gpt" and "quantized" in opts.impl.split(","):
            raise ValueError("--mode train: the quantized impl runs inference only")
        opts.impls = _impls(opts.impl)
        opts.seqs = _positive_ints(opts.seq, "--seq")
        opts.first = _impls(opts.first) if opts.first.strip() else []
        for name in ("layers", "heads", "d_model", "batch", "active_steps", "iters", "window",
                     "repeats"):
            if getattr(opts, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be > 0")
        if opts.d_model % opts.heads:
            raise ValueError("--d-model must be divisible by --heads")
        if opts.min_time <= 0:
            raise ValueError("--min-time must be > 0")
        if opts.threads is not None and opts.threads <= 0:
            raise ValueError("--threads must be > 0")
        for name in ("timing_seconds", "energy_seconds", "time_budget", "quadratic_max_seq",
                     "graph_max_ms"):
            value = getattr(opts, name)
            if value is not None and value <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be > 0")
    except ValueError as exc:
        parser.error(str(exc))
    torch = _torch(parser, opts)
    if opts.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda requested but CUDA is not available")
    opts.torch_device = torch.device(
        "cuda" if opts.device == "cuda" or (opts.device == "auto" and torch.cuda.is_available())
        else "cpu")
    opts.torch_dtype = getattr(torch, opts.dtype)
    if opts.threads is not None:
        torch.set_num_threads(opts.threads)
    return opts


def _torch(parser, opts):
    """torch, or one `error:` line (exit 2): not installed, or --calibrate without a CUDA GPU."""
    try:
        import torch
    except ImportError:
        parser.error("torch is not installed")
    if opts.calibrate and (opts.device == "cpu" or not torch.cuda.is_available()):
        parser.error("--calibrate needs a CUDA GPU (torch.cuda.is_available() is False here); nothing was run")
    return torch


def quadratic(impl, variant):
    """Does this impl materialise B*H*L*L scores?"""
    from profiling.model import QUADRATIC

    return impl in QUADRATIC or (impl == "sparse" and variant.startswith("masked"))


def main(argv=None):
    started = time.monotonic()
    opts = parse_args(argv)
    if opts.model != "gpt":  # transformers models: their own loop (profiling/train.py)
        from profiling.train import run_hf

        run_hf(opts, log=lambda m: print(m, file=sys.stderr, flush=True))
        return 0
    from profiling import summary
    from profiling.impls import Unavailable, resolve
    from profiling.runner import run_config, status_result

    def err(msg):
        print(msg, file=sys.stderr, flush=True)

    device, dtype = opts.torch_device, opts.torch_dtype
    variants = {}
    for impl in opts.impls:
        try:
            variants[impl] = resolve(impl, device=device, dtype=dtype, heads=opts.heads,
                                     head_dim=opts.d_model // opts.heads, causal=opts.causal,
                                     window=opts.window, sparse_mode=opts.sparse_mode, note=err)
        except Unavailable as exc:
            err(f"skip: {impl}: {exc}")
        except Exception as exc:  # a probe that broke the device, ...: never a traceback
            err(f"skip: {impl}: probe failed: {type(exc).__name__}: "
                f"{(str(exc).strip().splitlines() or [''])[0][:160]}")
    if device.type == "cpu" and opts.dtype != "float32" and "quantized" in variants:
        err("note: quantized on CPU runs int8 weights with float32 activations")
    err(f"probes done in {time.monotonic() - started:.1f} s")
    interrupted, running = [], [False]

    def on_term(signum, frame):  # `timeout` sends SIGTERM: stop the sweep, still summarise
        interrupted.append(signum)
        if running[0]:  # abandon the config in flight; between configs the flag suffices
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    results = []
    configs = [(seq, impl) for seq in opts.seqs for impl in opts.impls if impl in variants]
    order = {c: i for i, c in enumerate(configs)}  # the table's order
    configs.sort(key=lambda c: (c[1] not in opts.first, order[c]))
    for k, (seq, impl) in enumerate(configs, 1):
        elapsed = time.monotonic() - started
        tag = f"[{k}/{len(configs)} t={elapsed:.0f}s]"
        if opts.quadratic_max_seq and seq > opts.quadratic_max_seq and \
                quadratic(impl, variants[impl]):
            status = f"skipped: L x L scores above {opts.quadratic_max_seq}"
        elif opts.time_budget and elapsed > opts.time_budget:
            status = "skipped: time budget"
        elif interrupted:
            status = "skipped: interrupted"
        else:
            err(f"{tag} start: {impl} seq={seq}")
            try:
                running[0] = True
                results.append(run_config(impl, seq, variants[impl], opts, device, dtype,
                                          opts.out, log=err))
                continue
            except KeyboardInterrupt:
                interrupted.append("int")
                status = "skipped: interrupted"
            finally:
                running[0] = False
        err(f"{tag} {status}: {impl} seq={seq}")
        results.append(status_result(impl, seq, variants[impl], status))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # summarise what ran; timeout -k still kills
    if not results:
        err("warning: no impl could run on this device; nothing to summarise")
        return int(opts.calibrate)  # --calibrate with nothing to fit: a failure
    err(f"sweep done in {time.monotonic() - started:.1f} s; summarising")
    rank = {impl: i for i, impl in enumerate(opts.impls)}
    results.sort(key=lambda r: (opts.seqs.index(r["seq"]), rank[r["impl"]]))
    rows = summary.build_rows(results, warn=err)
    import torch

    threads = f" threads={torch.get_num_threads()}" if device.type == "cpu" else ""
    header = (f"device={device.type} dtype={opts.dtype} layers={opts.layers} heads={opts.heads} "
              f"d_model={opts.d_model} batch={opts.batch} causal={opts.causal}{threads}")
    csv_path, md_path = summary.write(opts.out, rows, header=header + "\n" + env_line(device))
    print(header)
    print(summary.to_markdown(rows, summary.table_columns(rows)))
    print(f"\nwrote {csv_path} and {md_path} ({time.monotonic() - started:.1f} s)")
    return write_local_calibration(opts, device, err)


def write_local_calibration(opts, device, err):
    """--calibrate, after the sweep: fit its traces and write the calibration file, or say why not (exit 1).
    Without --calibrate: nothing (exit 0)."""
    if not opts.calibrate:
        return 0
    import torch

    props = torch.cuda.get_device_properties(device)
    provenance = {"device_name": props.name, "torch": torch.__version__, "cuda": torch.version.cuda,
                  "cudnn": str(torch.backends.cudnn.version()), "date": _utc_now(),
                  "sweep": str(Path(opts.out).resolve()),
                  "sizes": f"{opts.dtype}, causal={opts.causal}, B={opts.batch}, H={opts.heads}, "
                           f"d={opts.d_model // opts.heads}, L={opts.seq}, {opts.layers} layers, forward"}
    out = opts.calibration_out or f"tracekit-calibration-{_slug(props.name)}.json"
    try:
        entries = calibrate(opts.out, out, provenance=provenance, sms=props.multi_processor_count)
    except Exception as exc:  # tracekit's refusal (a backend's runs missing, no peak for the device): one line
        err(f"error: --calibrate: {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}")
        return 1
    for c in entries:
        print(f"{c.device} {c.backend}: eta_max={c.eta_max} l_half={c.l_half} small_us={c.small_us} "
              f"({c.points} points)")
    print(f"wrote {out}: `tracekit whatif --calibration {out} TRACE` (or TRACEKIT_CALIBRATION={out})")
    return 0


def calibrate(folder, out, *, provenance, sms=None):
    """Fit a calibration to the sweep in ``folder`` (its sdpa-<backend>_<L> runs) and write it to ``out``, with
    its provenance: the fitting half of --calibrate, which needs no GPU (tests run it on hand-made sweeps)."""
    from tracekit.run.calibrate import fit_sweep, write_calibration

    source = ("fitted by scripts/profile_attention.py --calibrate to " + str(folder) + " ("
              + "; ".join(f"{k} {v}" for k, v in provenance.items() if v and k != "sweep") + ")")
    entries = fit_sweep(folder, sms=sms, source=source)
    write_calibration(out, entries, provenance)
    return entries


def _utc_now():
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _slug(name):
    """A device name as a file name part: "NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3"."""
    import re

    return re.sub(r"[^A-Za-z0-9.]+", "-", name).strip("-") or "gpu"


def env_line(device):
    """Date, device and versions: every table says where it was measured."""
    import datetime
    import platform

    import torch

    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if device.type == "cuda":
        dev = f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})"
    else:
        dev = f"CPU {platform.machine()} {platform.processor() or ''}".strip()
    return (f"measured {when} on {dev}; torch {torch.__version__}, "
            f"Python {platform.python_version()}")


if __name__ == "__main__":
    sys.exit(main())
