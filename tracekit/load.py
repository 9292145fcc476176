"""Load trace files into :class:`tracekit.model.Trace`.

This is the parse boundary: every raw Kineto spelling (2021 ``Kernel``/``Operator``,
``external id``, string tids, string numbers) is mapped here, once.
"""

from __future__ import annotations

import gc
import os
import zlib
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import orjson

from .errors import TraceFormatError, TraceNotFoundError, TraceReadError
from .model import (
    ANNOTATION, KERNEL, MEMCPY, MEMSET, MODULE, OP, PYTHON,
    DeviceEvent, Flow, GpuAnnotation, HostEvent, MemoryEvent, RuntimeEvent, Trace, TraceInfo,
)

TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")

# Categories compared case-insensitively; 2021 names mapped onto current ones.
_HOST_CATS = {"cpu_op": OP, "operator": OP, "user_annotation": ANNOTATION, "python_function": PYTHON}
_RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime"}
_DEVICE_CATS = {"kernel": KERNEL, "gpu_memcpy": MEMCPY, "memcpy": MEMCPY, "gpu_memset": MEMSET, "memset": MEMSET}

_SALVAGE_TRIES = 256
# Ops whose input shapes characterise an attention workload (for diff's "different shapes" warning).
_SHAPE_OPS = frozenset({"aten::scaled_dot_product_attention", "aten::softmax", "aten::_softmax", "aten::bmm",
                        "aten::baddbmm", "aten::_flash_attention_forward", "aten::_efficient_attention_forward"})
_MAX_SHAPES = 8


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


def load_trace(path: str | os.PathLike) -> Trace:
    """Read, decompress, parse and model one trace file."""
    p = Path(path)
    info = TraceInfo(source=p.name)
    data = _read_bytes(p, info)
    with _gc_paused():
        doc = _parse_json(data, p, info)
        del data
        return _build(doc, p, info)


@contextmanager
def _gc_paused():
    """Cyclic GC makes building millions of dicts superlinear; nothing here makes cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _read_bytes(p: Path, info: TraceInfo) -> bytes:
    if not p.exists():
        raise TraceNotFoundError(f"{p}: no such file or directory")
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise TraceReadError(f"{p}: cannot read ({exc.strerror or exc})") from None
    if not raw:
        raise TraceFormatError(f"{p}: file is empty")
    if raw[:2] != b"\x1f\x8b":
        return raw
    d = zlib.decompressobj(wbits=31)
    try:
        out = d.decompress(raw)
    except zlib.error as exc:
        raise TraceReadError(f"{p}: corrupt gzip data ({exc})") from None
    if not d.eof:
        info.damaged = True
        info.warnings.append(f"gzip stream ends early after {len(raw):,} bytes; reading what was decompressed")
    return out


def _parse_json(data: bytes, p: Path, info: TraceInfo):
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        pos = getattr(exc, "pos", 0) or 0
        truncated = "unexpected end of data" in str(exc) or pos >= len(data.rstrip()) - 1
    if not truncated or data.lstrip()[:1] not in (b"{", b"["):
        raise TraceFormatError(f"{p}: not valid JSON (error at byte {pos:,})")
    doc, kept = _salvage(data)
    if doc is None:
        raise TraceFormatError(f"{p}: JSON is cut off at byte {len(data):,} and no complete event could be salvaged")
    info.damaged = True
    info.warnings.append(f"trace is truncated: kept the first {kept:,} bytes of {len(data):,}, "
                         f"dropped {len(data) - kept:,} bytes (the events cut off mid-write)")
    return doc


def _salvage(data: bytes):
    """Cut after the last complete event and close the brackets; try a few cut points."""
    opener = data.lstrip()[:1]
    closers = (b"]}", b"}", b"]") if opener == b"{" else (b"]",)
    end = len(data)
    for _ in range(_SALVAGE_TRIES):
        cut = data.rfind(b"}", 0, end)
        if cut < 0:
            return None, 0
        for closer in closers:
            try:
                return orjson.loads(data[: cut + 1] + closer), cut + 1
            except orjson.JSONDecodeError:
                pass
        end = cut
    return None, 0


def _events_of(doc, p: Path) -> list:
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        if not isinstance(events, list):
            raise TraceFormatError(f"{p}: JSON is not a PyTorch profiler trace (no 'traceEvents' list)")
        return events
    if isinstance(doc, list) and doc and all(isinstance(e, dict) and "ph" in e for e in doc[:100]):
        return doc  # Chrome's bare-array trace format
    raise TraceFormatError(f"{p}: JSON is not a PyTorch profiler trace (no 'traceEvents' list)")


def _num(v):
    """A JSON number, or a numeric string (ROCm writes some numbers as strings)."""
    t = type(v)
    if t is float or t is int:
        return v
    if t is str:
        try:
            return float(v)
        except ValueError:
            return None
    return None


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


def _header(doc, info: TraceInfo) -> None:
    """Pick the few facts the report header shows; user metadata is never copied."""
    if not isinstance(doc, dict):
        return
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


def _build(doc, p: Path, info: TraceInfo) -> Trace:
    events = _events_of(doc, p)
    _header(doc, info)
    tr = Trace(info=info)
    info.event_count = len(events)
    threads: dict = {}
    streams: dict = {}
    names: dict[str, str] = {}
    dropped: Counter = Counter()
    steps: set[int] = set()
    shapes: set[str] = set()
    range_profiler = False
    host_cats, rt_cats, dev_cats = _HOST_CATS, _RUNTIME_CATS, _DEVICE_CATS
    for e in events:
        if type(e) is not dict:
            dropped["not an object"] += 1
            continue
        ph = e.get("ph")
        cat = e.get("cat")
        catl = cat.lower() if type(cat) is str else ""
        if ph == "X":
            kind = host_cats.get(catl)
            is_rt = catl in rt_cats
            dkind = dev_cats.get(catl)
            if kind is None and not is_rt and dkind is None and catl != "gpu_user_annotation":
                if catl == "cuda_profiler_range":
                    range_profiler = True
                continue
            ts = _num(e.get("ts"))
            dur = _num(e.get("dur"))
            if ts is None:
                dropped["missing or non-numeric ts"] += 1
                continue
            if dur is None:
                dropped["missing or non-numeric dur"] += 1
                continue
            if dur < 0:
                dropped["negative dur"] += 1
                continue
            name = e.get("name")
            if type(name) is not str:
                dropped["missing name"] += 1
                continue
            name = names.setdefault(name, name)
            ts_ns = round(ts * 1000)
            dur_ns = round(dur * 1000)
            args = e.get("args")
            if type(args) is not dict:
                args = {}
            ext = args.get("External id", args.get("external id"))
            ext = _int(ext) if ext is not None else 0
            if kind is not None or is_rt:
                tk = (_key(e.get("pid")), _key(e.get("tid")))
                t = threads.get(tk)
                if t is None:
                    t = threads[tk] = len(threads)
                if kind is not None:
                    if kind == PYTHON and name.startswith("nn.Module: "):
                        kind = MODULE
                    elif name.startswith("ProfilerStep#"):
                        kind = ANNOTATION
                        step = name[13:]
                        if step.isdigit():
                            steps.add(int(step))
                    tr.host.append(HostEvent(kind, name, t, ts_ns, dur_ns, ext))
                    if name in _SHAPE_OPS and len(shapes) < _MAX_SHAPES * 4:
                        dims = args.get("Input Dims", args.get("Input dims"))
                        if type(dims) is list and dims:
                            shapes.add(f"{name}{dims}")
                else:
                    tr.runtime.append(RuntimeEvent(name, t, ts_ns, dur_ns, _int(args.get("correlation")), ext))
                continue
            sk = (_key(e.get("pid")), _key(e.get("tid")))
            s = streams.get(sk)
            if s is None:
                s = streams[sk] = len(streams)
            if dkind is not None:
                dev = args.get("device")
                dev = _int(dev) if dev is not None else _int(sk[0]) if type(sk[0]) is int else 0
                tr.device.append(DeviceEvent(dkind, name, s, ts_ns, dur_ns, _int(args.get("correlation")), ext, dev))
            else:
                tr.gpu_annotations.append(GpuAnnotation(name, s, ts_ns, dur_ns, ext))
        elif ph == "i":
            if e.get("name") != "[memory]":
                continue
            args = e.get("args")
            ts = _num(e.get("ts"))
            if type(args) is not dict or ts is None:
                dropped["malformed [memory] event"] += 1
                continue
            tk = (_key(e.get("pid")), _key(e.get("tid")))
            t = threads.get(tk)
            if t is None:
                t = threads[tk] = len(threads)
            tr.memory.append(MemoryEvent(t, round(ts * 1000), _int(args.get("Bytes")), _int(args.get("Device Type"))))
        elif (ph == "s" or ph == "f") and catl == "fwdbwd":
            ts = _num(e.get("ts"))
            if ts is None:
                continue
            tk = (_key(e.get("pid")), _key(e.get("tid")))
            t = threads.get(tk)
            if t is None:
                t = threads[tk] = len(threads)
            tr.flows.append(Flow(_int(e.get("id")), ph == "s", t, round(ts * 1000)))
    tr.threads = list(threads)
    tr.streams = list(streams)
    info.steps = sorted(steps)
    info.shapes = sorted(shapes)[:_MAX_SHAPES]
    if dropped:
        n = sum(dropped.values())
        reasons = ", ".join(f"{k}: {v:,}" for k, v in dropped.most_common())
        info.damaged = True
        info.warnings.append(f"dropped {n:,} malformed events ({reasons})")
    if range_profiler and not tr.device:
        info.warnings.append("CUPTI range-profiler trace: it has no kernel timings, so host time is used")
    if not tr.host and not tr.device and not tr.runtime:
        if dropped:
            raise TraceFormatError(f"{p}: no usable events ({', '.join(f'{k}: {v:,}' for k, v in dropped.items())})")
        raise TraceFormatError(f"{p}: trace holds no profiler events")
    return tr
