"""Time, meter and profile one (impl, seq) configuration.

Why separate latency from profiling: the profiler inflates op times (host
overhead, record_shapes, stacks), so latency is measured outside it (CUDA
events on GPU, a CPU wall-clock timer on CPU) and the trace is used only for
the *shares* of attention time that tracekit attributes.
"""
from __future__ import annotations

import gc
import gzip
import json
import math
import shutil
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

TRACE_GLOB = "*.pt.trace.json*"


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Timing:
    """Milliseconds per forward: the median and the spread of repeated measurements.

    One value per repeat (the mean of `iters` timed forwards; GPU: CUDA events, CPU:
    time.perf_counter), spread = min..max over repeats. `samples` keeps each repeat's
    value (tracekit's CI gate tests them), `timer` names the clock that took them.
    `half_spread` is what the table prints as `± (ms)`.
    """

    median: float
    low: float
    high: float
    kind: str  # "min-max" or "IQR"
    repeats: int
    iters: int
    samples: tuple = ()  # each repeat's ms, in the order taken
    timer: str = ""  # "CUDA events" or "CPU timer (time.perf_counter)"

    @property
    def spread(self):
        return self.high - self.low

    @property
    def half_spread(self):
        return self.spread / 2

    def agrees_with(self, other, slack=1.0):
        """Medians closer than the sum of the half-spreads (times `slack`)."""
        return abs(self.median - other.median) <= slack * (self.half_spread + other.half_spread)


def summarize(per_repeat_ms, *, iters, kind="min-max", timer=""):
    """Timing from per-repeat values: median and min..max (or IQR by linear quantiles)."""
    samples = tuple(float(v) for v in per_repeat_ms)
    vals = sorted(samples)
    if not vals:
        raise ValueError("no measurements")
    med = statistics.median(vals)
    if kind == "IQR" and len(vals) >= 2:
        q1, _, q3 = statistics.quantiles(vals, n=4, method="inclusive")
        return Timing(median=med, low=q1, high=q3, kind=kind, repeats=len(vals), iters=iters,
                      samples=samples, timer=timer)
    return Timing(median=med, low=vals[0], high=vals[-1], kind="min-max", repeats=len(vals),
                  iters=iters, samples=samples, timer=timer)


def plan_iters(est_ms, *, repeats, iters, target_s=None, min_iters=3):
    """Timed iterations per repeat: `iters`, fewer (never below `min_iters`) when
    repeats * iters forwards of `est_ms` would exceed `target_s` seconds."""
    if not target_s or est_ms <= 0:
        return iters
    fit = int(target_s * 1e3 / (repeats * est_ms))
    return max(min_iters, min(iters, fit))


def time_cuda(fn, device, *, repeats=5, iters=20, target_s=None):
    """Median of `repeats` CUDA-event timings of `iters` calls each (call after warm-up)."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(repeats + 1)]
    sync(device)
    s, e = events[0]
    s.record()
    fn()
    e.record()
    e.synchronize()
    n = plan_iters(s.elapsed_time(e), repeats=repeats, iters=iters, target_s=target_s)
    per = []
    for s, e in events[1:]:
        s.record()
        for _ in range(n):
            fn()
        e.record()
        e.synchronize()
        per.append(s.elapsed_time(e) / n)
    return summarize(per, iters=n, timer="CUDA events")


MIN_CPU_REPEATS = 5  # tracekit's latency gate wants >= 3 repeats a side; 5 lets its U test decide at 5%
CPU_TIMER = "CPU timer (time.perf_counter)"


def time_cpu(fn, *, repeats=MIN_CPU_REPEATS, min_time=0.2):
    """Median of at least MIN_CPU_REPEATS wall-clock timings of `n` calls each (call after
    warm-up), `n` chosen from one timed call so that all repeats take about `min_time` s.

    Why not torch.utils.benchmark's blocked_autorange: a forward slower than min_time is
    measured once, a median of one with a spread of 0, which no gate can trust."""
    repeats = max(MIN_CPU_REPEATS, int(repeats))
    t0 = time.perf_counter()
    fn()
    est = time.perf_counter() - t0
    n = max(1, int(min_time / (repeats * max(est, 1e-9))))
    per = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        per.append((time.perf_counter() - t0) * 1e3 / n)
    return summarize(per, iters=n, timer=CPU_TIMER)


def measure_latency(forward, device, *, min_time=0.2, iters=20, repeats=5, target_s=None):
    """Timing of one forward pass (call after warm-up): CUDA events on GPU, a CPU
    wall-clock timer on CPU; both keep each repeat's time."""
    if device.type == "cuda":
        return time_cuda(forward, device, repeats=repeats, iters=iters, target_s=target_s)
    return time_cpu(forward, repeats=repeats, min_time=min_time)


def measure_graph(forward, device, *, repeats=5, iters=20, target_s=None):
    """Timing of replays of one forward captured in a CUDA graph: the kernels without
    Python/launch overhead. Raises if the forward cannot be captured."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
        for _ in range(2):
            forward()
    torch.cuda.current_stream(device).wait_stream(side)
    sync(device)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            out = forward()
        graph.replay()
        sync(device)
        return time_cuda(graph.replay, device, repeats=repeats, iters=iters, target_s=target_s)
    finally:
        out = None  # noqa: F841  (release the graph's static output and pool)
        del graph
        sync(device)


def peak_memory_mb(forward, device):
    """torch.cuda.max_memory_allocated around one forward (MB, weights included); None on CPU."""
    if device.type != "cuda":
        return None
    sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    out = forward()
    sync(device)
    del out
    return torch.cuda.max_memory_allocated(device) / 2**20


def is_oom(exc):
    """CUDA OOM, or a CPU allocator failure."""
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    text = str(exc).lower()
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        "out of memory" in text or "can't allocate memory" in text or isinstance(exc, MemoryError))


def first_line(exc, limit=160):
    lines = str(exc).strip().splitlines()
    msg = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return msg if len(msg) <= limit else msg[:limit - 3] + "..."


def _nvml_handle(pynvml, device):
    idx = device.index if device.index is not None else torch.cuda.current_device()
    try:
        uuid = str(torch.cuda.get_device_properties(idx).uuid)
        return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else "GPU-" + uuid)
    except Exception:  # older torch without .uuid, MIG, ...
        return pynvml.nvmlDeviceGetHandleByIndex(idx)


def measure_energy(forward, device, ms_per_iter, *, min_seconds=1.0, min_iters=3):
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
        n = max(min_iters, math.ceil(min_seconds * 1e3 / max(ms_per_iter, 1e-3)))
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
    """Build, warm up, check accuracy, meter memory, time, profile (and graph-time) one
    configuration; return a result dict. Raises on failure: see run_config."""
    from .model import build

    t0 = time.monotonic()
    model, forward, accuracy = build(
        impl, layers=opts.layers, heads=opts.heads, d_model=opts.d_model, seq=seq,
        batch=opts.batch, dtype=dtype, device=device, causal=opts.causal,
        window=opts.window, variant="flex" if variant.startswith("flex") else "masked",
        reference=True,
    )
    if getattr(opts, "mode", "infer") != "infer" or getattr(opts, "compile", False):  # issue 11: --mode/--compile
        from .train import adapt
        forward = adapt(model, forward, mode=opts.mode, compile=opts.compile, seq=seq, batch=opts.batch, device=device)
    for _ in range(2):  # warm-up: caches, compilation, allocator
        forward()
    sync(device)
    notes = []
    try:
        err, cos = accuracy()
    except Exception as exc:  # OOM of the float32 reference must not lose the row
        if device.type == "cuda":
            torch.cuda.empty_cache()
        err = cos = None
        notes.append("accuracy: " + ("OOM" if is_oom(exc) else first_line(exc, 80)))
    if device.type == "cuda":
        torch.cuda.empty_cache()
    peak = peak_memory_mb(forward, device)
    target = getattr(opts, "timing_seconds", None)
    timing = measure_latency(forward, device, min_time=opts.min_time, iters=opts.iters,
                             repeats=getattr(opts, "repeats", 5), target_s=target)
    joules = measure_energy(forward, device, timing.median,
                            min_seconds=getattr(opts, "energy_seconds", 1.0))
    run_dir = Path(out_dir) / f"{impl}_{seq}"
    config = dict(impl=impl, variant=variant, seq=seq, layers=opts.layers, heads=opts.heads,
                  d_model=opts.d_model, batch=opts.batch, dtype=str(dtype).replace("torch.", ""),
                  causal=opts.causal, device=device.type, active_steps=opts.active_steps)
    profile_run(forward, run_dir, device, active=opts.active_steps,
                record_shapes=opts.record_shapes, profile_memory=opts.profile_memory,
                with_stack=opts.with_stack, with_modules=getattr(opts, "with_modules", False),
                metadata=config)
    graph = None
    graph_max = getattr(opts, "graph_max_ms", None)
    if getattr(opts, "cuda_graphs", False) and device.type == "cuda" and \
            (graph_max is None or timing.median <= graph_max):
        try:  # last: a capture that fails cannot spoil the other figures
            torch.cuda.empty_cache()  # the graph gets its own memory pool
            graph = measure_graph(forward, device, repeats=getattr(opts, "repeats", 5),
                                  iters=opts.iters, target_s=target)
        except Exception as exc:
            notes.append("graph: " + ("OOM" if is_oom(exc) else first_line(exc, 80)))
    del model, forward, accuracy
    log(f"done: {impl} seq={seq} {timing.median:.3f} ms ±{timing.half_spread:.3f} "
        f"({timing.repeats}x{timing.iters}) peak={_mb(peak)} MB "
        f"err={err if err is None else f'{err:.3g}'} "
        f"graph={'n/a' if graph is None else f'{graph.median:.3f} ms'} "
        f"[{time.monotonic() - t0:.1f} s] -> {run_dir}")
    return {"impl": impl, "seq": seq, "variant": variant, "latency_ms": timing.median,
            "timing": timing, "graph": graph, "peak_mb": peak, "max_abs_err": err,
            "cosine": cos, "energy_j": joules, "run_dir": str(run_dir),
            "active_steps": opts.active_steps, "status": "", "notes": notes}


def _mb(v):
    return "n/a" if v is None else f"{v:.0f}"


def status_result(impl, seq, variant, status):
    """A row for a configuration that has no figures: OOM, error: ..., skipped: ..."""
    return {"impl": impl, "seq": seq, "variant": variant, "latency_ms": None, "timing": None,
            "graph": None, "peak_mb": None, "max_abs_err": None, "cosine": None,
            "energy_j": None, "run_dir": None, "active_steps": 0, "status": status,
            "notes": []}


def run_config(impl, seq, variant, opts, device, dtype, out_dir, log=print, runner=None):
    """run_one, isolated: an OOM becomes an `OOM` row and any other exception an
    `error: <one line>` row; memory is released and the sweep goes on."""
    runner = runner or run_one
    try:
        return runner(impl, seq, variant, opts, device, dtype, out_dir, log=log)
    except Exception as exc:
        status = "OOM" if is_oom(exc) else "error: " + first_line(exc)
        log(f"{'oom' if status == 'OOM' else 'error'}: {impl} seq={seq}: {status}")
        return status_result(impl, seq, variant, status)
    finally:
        gc.collect()
        if device.type == "cuda":
            try:
                torch.cuda.empty_cache()
            except Exception:  # a sticky CUDA error: the next configs will report it
                pass
