"""Load trace files into :class:`tracekit.model.Trace`.

This is the parse boundary: every raw Kineto spelling (2021 ``Kernel``/``Operator``,
``external id``, string tids, string numbers) is mapped here, once.
"""

from __future__ import annotations

import gc
import os
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Generator

import orjson

from .errors import TraceFormatError, TraceNotFoundError
from .model import (
    ANNOTATION, KERNEL, MEMCPY, MEMSET, MODULE, OP, PYTHON,
    DeviceEvent, Flow, GpuAnnotation, HostEvent, MemoryEvent, RuntimeEvent, Trace, TraceInfo,
)
from .read import Event, EventStream, ReadSummary

TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")

# Categories compared case-insensitively; 2021 names mapped onto current ones.
_HOST_CATS = {"cpu_op": OP, "operator": OP, "user_annotation": ANNOTATION, "python_function": PYTHON}
_RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime"}
_DEVICE_CATS = {"kernel": KERNEL, "gpu_memcpy": MEMCPY, "memcpy": MEMCPY, "gpu_memset": MEMSET, "memset": MEMSET}

# Ops whose input shapes characterise an attention workload (for diff's "different shapes" warning).
# In priority order: fused attention says the most about the problem size, bmm the least.
_SHAPE_OPS = {name: rank for rank, name in enumerate((
    "aten::scaled_dot_product_attention", "aten::_flash_attention_forward", "aten::_efficient_attention_forward",
    "aten::softmax", "aten::_softmax", "aten::bmm", "aten::baddbmm"))}
_MAX_SHAPES = 8
# Below 2**42 µs (51 days of relative time), float µs * 1000 rounds to the exact ns; epoch-sized
# float times (2024 traces) take the slower, exact path in _ns.
_EXACT_US = float(2**42)


def find_trace_files(path: str | os.PathLike) -> list[Path]:
    """A file is itself; a folder (a TensorBoard run) gives its ``*.pt.trace.json[.gz]``."""
    p = Path(path)
    if not p.exists():
        raise TraceNotFoundError(f"{p}: no such file or directory")
    if p.is_file():
        return [p]
    files = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
    if not files:  # a folder of plainly named traces is still worth reading
        files = sorted(f for f in p.glob("*") if f.is_file() and f.name.endswith((".json", ".json.gz")))
    if not files:
        raise TraceNotFoundError(f"{p}: folder holds no *.pt.trace.json[.gz] files")
    return files


def load_trace(path: str | os.PathLike, progress: Callable[[int, int], None] | None = None) -> Trace:
    """Stream, decode and model one trace file. ``progress(done, total)`` gets compressed-byte counts."""
    p = Path(path)
    if not p.exists():
        raise TraceNotFoundError(f"{p}: no such file or directory")
    if p.is_file() and p.stat().st_size == 0:
        raise TraceFormatError(f"{p}: file is empty")
    info = TraceInfo(source=p.name)
    with _gc_paused():
        tr, read = _Builder(info).build(EventStream(p, progress=progress).batches())
    _header(read.header, info)
    info.warnings[:0] = read.warnings
    info.damaged = info.damaged or read.damaged
    if not tr.host and not tr.device and not tr.runtime:
        if tr.dropped:
            reasons = ", ".join(f"{k}: {v:,}" for k, v in tr.dropped.items())
            raise TraceFormatError(f"{p}: no usable events ({reasons})")
        raise TraceFormatError(f"{p}: trace holds no profiler events")
    return tr


@contextmanager
def _gc_paused():
    """Cyclic GC makes building millions of objects superlinear; nothing here makes cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _num(v):
    """A JSON number, or a numeric string (ROCm writes some numbers as strings)."""
    t = type(v)
    if t is float or t is int:
        return v
    try:
        return float(v) if "." in v or "e" in v or "E" in v else int(v)
    except (TypeError, ValueError):
        return None


def _ns(us) -> int:
    """µs (int or float) to integer ns without float error on epoch-sized values."""
    if type(us) is int:
        return us * 1000
    i = int(us)
    return i * 1000 + round((us - i) * 1000)


def _int(v) -> int:
    t = type(v)
    if t is int:
        return v
    if v is None:
        return 0
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return 0


def _key(v):
    """pids/tids are ints, except 2021 X events, which write them as strings."""
    if type(v) is str and v.isdigit():
        return int(v)
    return v


def _header(doc: dict, info: TraceInfo) -> None:
    """Pick the few facts the report header shows; user metadata is never copied."""
    props = doc.get("deviceProperties")
    if isinstance(props, list):
        names = [str(d.get("name") or "").strip() for d in props if isinstance(d, dict)]
        info.gpus = sorted({n for n in names if n})
    for key in ("pytorch_version", "torch_version"):
        if isinstance(doc.get(key), str):
            info.pytorch = doc[key][:40]
    cuda = doc.get("cuda_runtime_version")
    hip = doc.get("hip_runtime_version")
    if isinstance(cuda, int) and cuda > 0:
        info.runtime = f"CUDA {cuda // 1000}.{cuda % 1000 // 10}"
    elif isinstance(hip, int) and hip > 0:
        info.runtime = f"HIP {hip // 10_000_000}.{hip // 100_000 % 100}"


class _Builder:
    """Turns decoded events into the model, keeping only what the analysis reads.

    Plain Python frames (``python_function`` that are not ``nn.Module`` slices) and launch
    flows are dropped here: they are most of a with_stack trace's events and the analysis
    needs neither (correlation ids carry the launch links).
    """

    def __init__(self, info: TraceInfo):
        self.info = info
        self.tr = Trace(info=info)
        self.threads: dict = {}
        self.streams: dict = {}
        self.names: dict[str, str] = {}
        self.steps: set[int] = set()
        self.shapes: dict[str, set[str]] = {}  # op name -> distinct input dims
        self.range_profiler = False
        self.dropped: Counter = Counter()
        self.categories: dict[str | None, tuple] = {}
        self.raw_threads: dict[tuple, int] = {}

    def build(self, batches: Generator[list[Event], None, ReadSummary]) -> tuple[Trace, ReadSummary]:
        """Ingest every batch; the reader's summary (header, warnings, its own drops) comes back too."""
        n = 0
        while True:
            try:
                batch = next(batches)
            except StopIteration as done:
                read: ReadSummary = done.value
                break
            n += len(batch)
            self._ingest(batch)
        if read.dropped:  # events the reader could not decode: counted like the builder's own drops
            self.dropped.update(read.dropped)
            n += sum(read.dropped.values())
        tr, info = self.tr, self.info
        info.event_count = n
        tr.threads = list(self.threads)
        tr.streams = list(self.streams)
        tr.dropped = self.dropped
        info.steps = sorted(self.steps)
        info.shapes = [f"{op}{dims}" for op in sorted(self.shapes, key=_SHAPE_OPS.get)
                       for dims in sorted(self.shapes[op])][:_MAX_SHAPES]
        if self.dropped:
            total = sum(self.dropped.values())
            reasons = ", ".join(f"{k}: {v:,}" for k, v in self.dropped.most_common())
            info.damaged = True
            info.warnings.append(f"dropped {total:,} malformed events ({reasons})")
        if self.range_profiler and not tr.device:
            info.warnings.append("CUPTI range-profiler trace: it has no kernel timings, so host time is used")
        return tr, read

    def _thread(self, pid, tid) -> int:
        t = self.raw_threads.get((pid, tid))
        if t is None:  # 2021 traces spell the same thread "123" on X events and 123 on flows
            tk = (_key(pid), _key(tid))
            t = self.threads.get(tk)
            if t is None:
                t = self.threads[tk] = len(self.threads)
            self.raw_threads[(pid, tid)] = t
        return t

    def _category(self, cat: str | None) -> tuple:
        """(host kind, is runtime, device kind, is gpu annotation, is range profiler) for a raw ``cat``."""
        catl = cat.lower() if cat is not None else ""
        entry = (_HOST_CATS.get(catl), catl in _RUNTIME_CATS, _DEVICE_CATS.get(catl),
                 catl == "gpu_user_annotation", catl == "cuda_profiler_range")
        self.categories[cat] = entry
        return entry

    def _ingest(self, batch: list[Event]) -> None:
        tr = self.tr
        categories, names, dropped, streams = self.categories, self.names, self.dropped, self.streams
        host_append, rt_append, dev_append = tr.host.append, tr.runtime.append, tr.device.append
        thread, raw_threads = self._thread, self.raw_threads
        for e in batch:
            ph = e.ph
            cat = e.cat
            if ph == "X":
                if cat == "python_function":  # most events of a with_stack trace: only modules matter
                    name = e.name
                    if name is None or not name.startswith("nn.Module: "):
                        continue
                entry = categories.get(cat) or self._category(cat)
                kind, is_rt, dkind, is_gpu_ann, is_range = entry
                if kind is None and not is_rt and dkind is None and not is_gpu_ann:
                    if is_range:
                        self.range_profiler = True
                    continue
                if kind == PYTHON:
                    name = e.name
                    if name is None or not name.startswith("nn.Module: "):
                        continue
                    kind = MODULE
                ts, dur = e.ts, e.dur
                if type(ts) is str or ts is None:
                    ts = _num(ts)
                    if ts is None:
                        dropped["missing or non-numeric ts"] += 1
                        continue
                if type(dur) is str or dur is None:
                    dur = _num(dur)
                    if dur is None:
                        dropped["missing or non-numeric dur"] += 1
                        continue
                if dur < 0:
                    dropped["negative dur"] += 1
                    continue
                name = e.name
                if name is None:
                    dropped["missing name"] += 1
                    continue
                name = names.setdefault(name, name)
                # Inline _ns for the common cases: int µs, and float µs small enough to scale exactly.
                ts_ns = ts * 1000 if type(ts) is int else round(ts * 1000) if ts < _EXACT_US else _ns(ts)
                dur_ns = dur * 1000 if type(dur) is int else round(dur * 1000)
                args = e.args
                if args is not None:
                    ext = args.ext_id
                    if type(ext) is not int:
                        ext = _int(ext if ext is not None else args.ext_id_2021)
                else:
                    ext = 0
                if kind is not None:
                    if name.startswith("ProfilerStep#"):
                        kind = ANNOTATION
                        step = name[13:]
                        if step.isdigit():
                            self.steps.add(int(step))
                    t = raw_threads.get((e.pid, e.tid))
                    host_append(HostEvent(kind, name, t if t is not None else thread(e.pid, e.tid), ts_ns, dur_ns, ext))
                    if name in _SHAPE_OPS and args is not None:
                        seen = self.shapes.setdefault(name, set())
                        dims = bytes(args.dims or args.dims_2021)
                        if len(seen) < _MAX_SHAPES and dims.startswith(b"[") and 2 < len(dims) < 4000:
                            seen.add(str(orjson.loads(dims)))
                    continue
                if is_rt:
                    corr = args.correlation if args is not None else 0
                    if type(corr) is not int:
                        corr = _int(corr)
                    rt_append(RuntimeEvent(name, thread(e.pid, e.tid), ts_ns, dur_ns, corr, ext))
                    continue
                sk = (_key(e.pid), _key(e.tid))
                s = streams.get(sk)
                if s is None:
                    s = streams[sk] = len(streams)
                if dkind is not None:
                    corr = _int(args.correlation) if args is not None else 0
                    dev = args.device if args is not None else None
                    dev = _int(dev) if dev is not None else (sk[0] if type(sk[0]) is int else 0)
                    dev_append(DeviceEvent(dkind, name, s, ts_ns, dur_ns, corr, ext, dev))
                else:
                    tr.gpu_annotations.append(GpuAnnotation(name, s, ts_ns, dur_ns, ext))
            elif ph == "i":
                if e.name != "[memory]":
                    continue
                args = e.args
                ts = _num(e.ts)
                if args is None or ts is None:
                    dropped["malformed [memory] event"] += 1
                    continue
                nbytes = _int(args.nbytes)
                if nbytes > 0:  # frees are not allocations
                    tr.memory.append(MemoryEvent(thread(e.pid, e.tid), _ns(ts), nbytes,
                                                 _int(args.device_type)))
            elif (ph == "s" or ph == "f") and cat is not None and cat.lower() == "fwdbwd":
                ts = _num(e.ts)
                if ts is None:
                    continue
                tr.flows.append(Flow(_int(e.id), ph == "s", thread(e.pid, e.tid), _ns(ts)))
