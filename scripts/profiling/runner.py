"""Time, meter and profile one (impl, seq) configuration.

Why separate latency from profiling: the profiler inflates op times (host
overhead, record_shapes, stacks), so latency is measured outside it (CUDA
events on GPU, torch.utils.benchmark on CPU) and the trace is used only for
the *shares* of attention time that tracekit attributes.
"""
from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

TRACE_GLOB = "*.pt.trace.json*"


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_latency(forward, device, *, min_time=0.2, iters=20):
    """Milliseconds per forward pass (call after warm-up)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sync(device)
        start.record()
        for _ in range(iters):
            forward()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / iters
    from torch.utils.benchmark import Timer

    # Timer defaults to 1 thread; measure with the threads the profiled run uses.
    timer = Timer(stmt="forward()", globals={"forward": forward},
                  num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_time).median * 1e3


def _nvml_handle(pynvml, device):
    idx = device.index if device.index is not None else torch.cuda.current_device()
    try:
        uuid = str(torch.cuda.get_device_properties(idx).uuid)
        return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else "GPU-" + uuid)
    except Exception:  # older torch without .uuid, MIG, ...
        return pynvml.nvmlDeviceGetHandleByIndex(idx)


def measure_energy(forward, device, ms_per_iter, *, min_seconds=1.0):
    """Joules per forward pass from the NVML energy counter, or None if unavailable.

    Runs >= min_seconds of forwards because the counter updates coarsely. This
    is whole-board energy (idle power included), which is what a user pays.
    """
    if device.type != "cuda":
        return None
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        handle = _nvml_handle(pynvml, device)
        n = max(10, math.ceil(min_seconds * 1e3 / max(ms_per_iter, 1e-3)))
        sync(device)
        e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # millijoules
        for _ in range(n):
            forward()
        sync(device)
        e1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        return (e1 - e0) / 1e3 / n
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def profile_run(forward, run_dir, device, *, active=2, record_shapes=False,
                profile_memory=False, with_stack=False, with_modules=False,
                worker_name=None, metadata=None):
    """Profile wait=1, warmup=1, active=N steps into run_dir.

    Leaves exactly one <worker>.<ts>.pt.trace.json.gz (TensorBoard plugin
    layout) plus a plain trace.json copy of the same trace. Returns the .gz path.
    `pytorch_version` (CPU traces lack it) and `metadata` go into the trace's
    top-level keys.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for old in list(run_dir.glob(TRACE_GLOB)) + [run_dir / "trace.json"]:
        if old.is_file():
            old.unlink()
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(
        activities=activities,
        schedule=schedule(wait=1, warmup=1, active=active, repeat=1),
        on_trace_ready=tensorboard_trace_handler(str(run_dir), worker_name=worker_name,
                                                 use_gzip=True),
        record_shapes=record_shapes,
        profile_memory=profile_memory,
        with_stack=with_stack,
        with_modules=with_modules,
    ) as prof:
        for step in range(2 + active):
            if step == 2:  # metadata is only accepted while the profiler is recording
                prof.add_metadata("pytorch_version", torch.__version__)
                if metadata:
                    prof.add_metadata_json("profile_config", json.dumps(metadata))
            forward()
            sync(device)  # keep each step's GPU work inside its ProfilerStep
            prof.step()
    traces = sorted(run_dir.glob(TRACE_GLOB))
    if len(traces) != 1:
        raise RuntimeError(f"expected one trace in {run_dir}, found {len(traces)}")
    with gzip.open(traces[0], "rb") as src, open(run_dir / "trace.json", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return traces[0]


def run_one(impl, seq, variant, opts, device, dtype, out_dir, log=print):
    """Build, warm up, time, meter and profile one configuration; return a result dict."""
    from .model import build

    model, forward = build(
        impl, layers=opts.layers, heads=opts.heads, d_model=opts.d_model, seq=seq,
        batch=opts.batch, dtype=dtype, device=device, causal=opts.causal,
        window=opts.window, variant="flex" if variant.startswith("flex") else "masked",
    )
    if getattr(opts, "mode", "infer") != "infer" or getattr(opts, "compile", False):  # issue 11: --mode/--compile
        from .train import adapt
        forward = adapt(model, forward, mode=opts.mode, compile=opts.compile, seq=seq, batch=opts.batch, device=device)
    for _ in range(2):  # warm-up: caches, compilation, allocator
        forward()
    sync(device)
    ms = measure_latency(forward, device, min_time=opts.min_time, iters=opts.iters)
    joules = measure_energy(forward, device, ms)
    run_dir = Path(out_dir) / f"{impl}_{seq}"
    config = dict(impl=impl, variant=variant, seq=seq, layers=opts.layers, heads=opts.heads,
                  d_model=opts.d_model, batch=opts.batch, dtype=str(dtype).replace("torch.", ""),
                  causal=opts.causal, device=device.type, active_steps=opts.active_steps)
    profile_run(forward, run_dir, device, active=opts.active_steps,
                record_shapes=opts.record_shapes, profile_memory=opts.profile_memory,
                with_stack=opts.with_stack, with_modules=opts.with_modules, metadata=config)
    del model, forward
    if device.type == "cuda":
        torch.cuda.empty_cache()
    log(f"done: {impl} seq={seq} {ms:.3f} ms -> {run_dir}")
    return {"impl": impl, "seq": seq, "variant": variant, "latency_ms": ms,
            "energy_j": joules, "run_dir": str(run_dir), "active_steps": opts.active_steps}
