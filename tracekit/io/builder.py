"""The trace model's builder: raw Kineto events in, :class:`tracekit.model.Trace` out.

This is the parse boundary: every raw Kineto spelling (2021 ``Kernel``/``Operator``,
``external id``, string tids, string numbers) is mapped here, once, and every number is
checked here against the bounds in ``docs/attribution.md`` ("Inputs"): an event outside
them is dropped and counted, so nothing downstream meets NaN, ±inf or an absurd integer.
Both readers use it: the serial one (tracekit.io.load) and each decoding worker (tracekit.io.pload).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator
from typing import Any, NamedTuple

import orjson

from ..model import (
    ANNOTATION, KERNEL, MEMCPY, MEMSET, MODULE, OP,
    DeviceEvent, Flow, GpuAnnotation, HostEvent, MemoryEvent, OpInputs, RuntimeEvent, Trace, TraceInfo,
)
from ..vocab import ANNOTATE_CAT, CALLED_SOFTMAX_OPS, keeps_scalars, keeps_shapes
from .read import Args, Event, ReadSummary

# Categories compared after strip + casefold; 2021 names mapped onto current ones.
_HOST_CATS = {"cpu_op": OP, "operator": OP, "user_annotation": ANNOTATION}  # and python_function
_RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime"}
_DEVICE_CATS = {"kernel": KERNEL, "gpu_memcpy": MEMCPY, "memcpy": MEMCPY, "gpu_memset": MEMSET, "memset": MEMSET}

# Ops whose input shapes characterise an attention workload (for diff's "different shapes" warning).
# In priority order: fused attention says the most about the problem size, bmm the least.
_SHAPE_OPS = {name: rank for rank, name in enumerate((
    "aten::scaled_dot_product_attention", "aten::_flash_attention_forward", "aten::_efficient_attention_forward",
    *CALLED_SOFTMAX_OPS, "aten::bmm", "aten::baddbmm"))}
_MAX_SHAPES = 8
_new_tuple = tuple.__new__  # builds an OpInputs without NamedTuple.__new__'s keyword handling (3x faster)
# Below 2**42 µs (51 days of relative time), float µs * 1000 rounds to the exact ns; epoch-sized
# float times (2024 traces) take the slower, exact path in _ns.
_EXACT_US = float(2**42)
# Bounds of the parse boundary (docs/attribution.md, "Inputs"); events outside them are dropped and counted.
# |ts| < 2**53 µs (285 years: epoch times fit) keeps ts in ns within int64; dur <= 1e12 µs (11.6 days)
# keeps a dur in ns below 2**53, where floats are still exact, so sums and invariants hold.
_MAX_TS_US = 2**53
_MAX_DUR_US = 10**12
_MIN_TS_US = -_MAX_TS_US
_MIN_EXACT_US, _MAX_DUR_F = -_EXACT_US, float(_MAX_DUR_US)  # float bounds for float values: faster compares
_ROUND = float.__round__  # round() of a value known to be a float: the same int, called directly
_MAX_BYTES = 2**48  # one allocation of 256 TiB: far beyond any device
_MAX_TOTAL = 2**52  # an allocator's ``Total Allocated`` of 4 PiB: beyond any device, so a corrupt figure
_MAX_STEP = 2**63  # ProfilerStep numbers go to JSON output: keep them within int64
_HUGE = 2.0**64  # a float beyond this is no id (ids are uint64 at most)
_NOBODY = object()  # equal to no pid or tid: _ingest's last thread and stream before it has met one


class _Role(NamedTuple):
    """What X events of one raw ``cat`` are: ``handle`` takes them with ``kind`` (None: skip them), unless
    ``inline`` says that _ingest takes their commonest path itself (one call less per event)."""

    handle: Callable[..., None] | None
    kind: int | str | None = None
    inline: int = 0  # _HOST, _RUNTIME or _DEVICE: the path _ingest takes inline; 0: none, ``handle`` takes them


_HOST, _RUNTIME, _DEVICE = 1, 2, 3


_SKIP = _Role(None)
# tracekit annotate's own events (``cat`` ANNOTATE_CAT), counted under this key of ``dropped`` while the batches
# come in (so that both readers carry the count, windows included) and taken out of the event count by finish():
# they are skipped, not malformed, and the annotated copy must attribute exactly like the original.
OWN_EVENTS = "tracekit annotate's own events"
_OWN = _Role(None, OWN_EVENTS)  # skipped like _SKIP, and counted


def _num(v: object) -> int | float | None:
    """A JSON number, or a numeric string (ROCm writes some numbers as strings); None otherwise.

    Strings must be ASCII: ``int()`` also reads other scripts' digits, and ``"²".isdigit()`` is
    true although ``int("²")`` fails.
    """
    if type(v) is float or type(v) is int:
        return v
    if type(v) is not str or not v.isascii() or "_" in v or v.strip() != v:
        return None  # float() and int() also take "1_0" and " 12 ": a trace never writes those
    try:
        return float(v) if "." in v or "e" in v or "E" in v else int(v)
    except ValueError:  # also int() of more than 4300 digits
        return None


def _ns(us: int | float) -> int:
    """µs (int, or finite float) to integer ns without float error on epoch-sized values."""
    if type(us) is int:
        return us * 1000
    i = int(us)
    return i * 1000 + round((us - i) * 1000)


def _int(v: object) -> int | None:
    """An integer field (an id, a byte count): 0 when absent, None when unusable.

    Ints are taken as they are (ids are only compared, so any int links); floats and numeric
    strings are truncated, and are unusable when not finite or beyond 2**64.
    """
    if type(v) is int:
        return v
    if v is None:
        return 0
    n = _num(v)
    if type(n) is float:
        return int(n) if -_HUGE < n < _HUGE else None  # NaN and ±inf fail the comparison
    return n  # type: ignore[return-value]  # int or None: a float returned above


def _key(v: object) -> object:
    """pids/tids are ints, except 2021 X events, which write them as strings.

    Other strings (``"stream 7"``, ``"²"``) stay opaque labels: a thread's name needs no number.
    """
    if type(v) is str and len(v) < 19 and v.isascii() and v.isdigit():
        return int(v)
    return v


def _step(name: str) -> int | None:
    """N of ``ProfilerStep#N``; None when N is not digits (an ordinary annotation, as in link.py),
    -1 when the digits make no usable step (non-ASCII digits such as "²", or 2**63 and above:
    step numbers reach the JSON output), and the event is dropped."""
    s = name[13:]
    if not s.isdigit():
        return None
    if s.isascii() and len(s) < 20:
        n = int(s)
        if n < _MAX_STEP:
            return n
    return -1


class TraceBuilder:
    """Turns decoded events into the model, keeping only what the analysis reads.

    Plain Python frames (``python_function`` that are not ``nn.Module`` slices) and launch
    flows are dropped here: they are most of a with_stack trace's events and the analysis
    needs neither (correlation ids carry the launch links).
    """

    def __init__(self, info: TraceInfo) -> None:
        self.info = info
        self.tr = tr = Trace(info=info)
        self.threads: dict[tuple[object, object], int] = {}
        self.streams: dict[tuple[object, object], int] = {}
        self.raw_threads: dict[tuple[object, object], int] = {}  # as spelled in the event -> index
        self.raw_streams: dict[tuple[object, object], int] = {}
        self.names: dict[str, str] = {}
        self.steps: set[int] = set()
        self.shapes: dict[str, dict[str, list[Any]]] = {}  # op name -> its distinct input dims by display form
        self.shapes_seen: dict[tuple[str, bytes], None] = {}  # (op, raw dims) already parsed, in first-seen order
        self.keep_inputs: dict[str, int] = {}  # op name -> whether its recorded inputs are kept
        # host event name -> (its interned form, its keep_inputs), () for ``ProfilerStep#`` names (those take _host):
        # one look-up for what _host works out per event (interning, the step test, the inputs decision)
        self.host_names: dict[str, tuple[str, int] | tuple[()]] = {}
        self.range_profiler = False
        self.dropped: Counter[str] = Counter()
        # raw cat -> role; exactly spelled python_function events reach it only as nn.Module slices (_ingest skips the
        # other frames first): host events, taken inline
        self.roles: dict[str | None, _Role] = {"python_function": _Role(self._module, MODULE, _HOST)}
        self.host_append, self.rt_append, self.dev_append = tr.host.append, tr.runtime.append, tr.device.append
        self.host, self.op_inputs = tr.host, tr.op_inputs
        self.records: dict[tuple[bytes, bytes], OpInputs] = {}  # one per distinct (dims, types)
        self.seq_host_append, self.seq_nr_append, self.seq_fwd_append = (
            tr.seq_host.append, tr.seq_nr.append, tr.seq_fwd.append)

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
        return self.finish(n, read)

    def finish(self, n: int, read: ReadSummary) -> tuple[Trace, ReadSummary]:
        """Fill the model's tables and warnings once every batch is in (``n`` events were decoded)."""
        if read.dropped:  # events the reader could not decode: counted like the builder's own drops
            self.dropped.update(read.dropped)
            n += sum(read.dropped.values())
        tr, info = self.tr, self.info
        info.event_count = n - self.dropped.pop(OWN_EVENTS, 0)
        tr.threads = list(self.threads)
        tr.streams = list(self.streams)
        tr.dropped = self.dropped
        info.steps = sorted(self.steps)
        tr.names = frozenset(self.names)
        # Ordered by op priority, then by display form (the JSON output's order).
        info.shapes = [(op, dims[text]) for op, dims in sorted(self.shapes.items(), key=lambda o: _SHAPE_OPS[o[0]])
                       for text in sorted(dims)][:_MAX_SHAPES]
        if self.dropped:
            total = sum(self.dropped.values())
            reasons = ", ".join(f"{k}: {v:,}" for k, v in self.dropped.most_common())
            info.damaged = True
            info.warnings.append(f"dropped {total:,} malformed events ({reasons})")
        if self.range_profiler and not tr.device:
            info.warnings.append("CUPTI range-profiler trace: it has no kernel timings, so host time is used")
        return tr, read

    def release(self) -> None:
        """Break the builder's one reference cycle (``roles`` holds its bound methods), so that it is
        freed as soon as it is dropped: decoding workers forked from the CLI run with the GC paused,
        and a window's builder left for a collection cost 6-10 ms of scanning per window."""
        self.roles.clear()

    def _thread(self, pid: object, tid: object) -> int:
        t = self.raw_threads.get((pid, tid))
        if t is None:  # 2021 traces spell the same thread "123" on X events and 123 on flows
            tk = (_key(pid), _key(tid))
            t = self.threads.get(tk)
            if t is None:
                t = self.threads[tk] = len(self.threads)
            self.raw_threads[(pid, tid)] = t
        return t

    def _stream(self, pid: object, tid: object) -> int:
        s = self.raw_streams.get((pid, tid))
        if s is None:
            sk = (_key(pid), _key(tid))
            s = self.streams.get(sk)
            if s is None:
                s = self.streams[sk] = len(self.streams)
            self.raw_streams[(pid, tid)] = s
        return s

    def _role(self, cat: str | None) -> _Role:
        """The role of a raw ``cat``, matched after strip + casefold (``"Kernel "`` is a kernel)."""
        key = cat.strip().casefold() if cat is not None else ""
        if not key:
            role = _Role(self._missing_cat)
        elif key == "python_function":  # (a respelling: the exact one is in ``roles`` from the start)
            role = _Role(self._module)
        elif key in _HOST_CATS:
            role = _Role(self._host, _HOST_CATS[key], _HOST)
        elif key in _RUNTIME_CATS:
            role = _Role(self._runtime, None, _RUNTIME)
        elif key in _DEVICE_CATS:
            role = _Role(self._device, _DEVICE_CATS[key], _DEVICE)
        elif key == "gpu_user_annotation":
            role = _Role(self._gpu_annotation)
        elif key == "cuda_profiler_range":
            role = _Role(self._range)
        elif cat == ANNOTATE_CAT:
            role = _OWN
        else:  # "Trace", "overhead", "cuda_sync", …: not read, and not malformed
            role = _SKIP
        self.roles[cat] = role
        return role

    # The per-event hot loop (tests/test_layers.py HOT_LOOPS): its checks stay inline, because a helper call per
    # event costs more than the branches; so it alone is above the mccabe ceiling.
    def _ingest(self, batch: list[Event]) -> None:  # noqa: C901
        """Validate what every event role shares (ts, dur, name, External id), then hand X events to
        their role's method. This is the hot loop: fast paths are a type test and one comparison."""
        roles, role_of, names, dropped = self.roles, self._role, self.names, self.dropped
        host_names, raw_threads, raw_streams = self.host_names, self.raw_threads, self.raw_streams
        host_append, rt_append, dev_append = self.host_append, self.rt_append, self.dev_append
        mem_append = self.tr.memory.append
        HostEvent_, RuntimeEvent_, DeviceEvent_, MemoryEvent_ = HostEvent, RuntimeEvent, DeviceEvent, MemoryEvent
        fround = _ROUND  # (round(x) of a float, without the builtin's dispatch: about 30 ns an event less)
        # The last thread and stream met: runs of events on one thread skip building a tuple to look it up.
        last_pid: object = _NOBODY
        last_tid: object = _NOBODY
        last_t = 0
        last_spid: object = _NOBODY
        last_stid: object = _NOBODY
        last_s = 0
        ts_ns: int | None
        dur_ns: int | None
        ext: int | None
        for e in batch:
            ph = e.ph
            if ph == "X":
                cat = e.cat
                if cat == "python_function":  # most events of a with_stack trace: only modules matter
                    name = e.name
                    if name is None or not name.startswith("nn.Module: "):
                        continue
                handle, kind, inline = roles.get(cat) or role_of(cat)
                if handle is None:
                    if kind is not None:  # (_OWN: before any check, so its names are not interned either)
                        dropped[OWN_EVENTS] += 1
                    continue
                ts = e.ts
                if type(ts) is float and _MIN_EXACT_US < ts < _EXACT_US:
                    ts_ns = fround(ts * 1000)
                elif type(ts) is int and _MIN_TS_US < ts < _MAX_TS_US:
                    ts_ns = ts * 1000
                else:
                    ts_ns = self._ts_ns(ts)
                    if ts_ns is None:
                        continue
                dur = e.dur
                if type(dur) is float and 0.0 <= dur <= _MAX_DUR_F:
                    dur_ns = fround(dur * 1000)
                elif type(dur) is int and 0 <= dur <= _MAX_DUR_US:
                    dur_ns = dur * 1000
                else:
                    dur_ns = self._dur_ns(dur)
                    if dur_ns is None:
                        continue
                name = e.name
                if name is None:
                    dropped["missing name"] += 1
                    continue
                args = e.args
                if args is None:
                    ext = 0
                else:
                    raw = args.ext_id
                    if type(raw) is int:
                        ext = raw
                    else:
                        ext = _int(raw if raw is not None else args.ext_id_2021)
                        if ext is None:
                            dropped["bad External id"] += 1
                            continue
                # The commonest paths of _host, _runtime and _device, inline; anything else takes ``handle``.
                if inline == _HOST:
                    entry = host_names.get(name)
                    if entry is None:
                        entry = self._host_name(name, kind)  # type: ignore[arg-type]
                    if entry:  # (not a ProfilerStep#: those take _host)
                        name, keep = entry
                        pid, tid = e.pid, e.tid
                        if pid != last_pid or tid != last_tid:
                            last_t = raw_threads.get((pid, tid))  # type: ignore[assignment]
                            if last_t is None:
                                last_t = self._thread(pid, tid)
                            last_pid, last_tid = pid, tid
                        host_append(HostEvent_(kind, name, last_t, ts_ns, dur_ns, ext))  # type: ignore[arg-type]
                        if args is not None:
                            if args.seq is not None:  # autograd's fwd <-> bwd key: training traces only
                                self._seq(args.seq, args.fwd_tid, kind)  # type: ignore[arg-type]
                            if keep:
                                self._inputs(args, keep, name)
                        continue
                elif inline == _RUNTIME:
                    corr = args.correlation if args is not None else 0
                    if type(corr) is int and (args is None or args.kernel is None):  # (else: _runtime)
                        pid, tid = e.pid, e.tid
                        if pid != last_pid or tid != last_tid:
                            last_t = raw_threads.get((pid, tid))  # type: ignore[assignment]
                            if last_t is None:
                                last_t = self._thread(pid, tid)
                            last_pid, last_tid = pid, tid
                        rt_append(RuntimeEvent_(names.setdefault(name, name), last_t, ts_ns, dur_ns, corr, ext))
                        continue
                elif inline == _DEVICE:
                    corr = args.correlation if args is not None else 0
                    if type(corr) is int:  # (else: _device)
                        pid, tid = e.pid, e.tid
                        if pid != last_spid or tid != last_stid:
                            last_s = raw_streams.get((pid, tid))  # type: ignore[assignment]
                            if last_s is None:
                                last_s = self._stream(pid, tid)
                            last_spid, last_stid = pid, tid
                        dev_append(DeviceEvent_(kind, names.setdefault(name, name),  # type: ignore[arg-type]
                                                last_s, ts_ns, dur_ns, corr, ext))
                        continue
                handle(e, kind, names.setdefault(name, name), ts_ns, dur_ns, ext)
            elif ph == "i":
                if e.name == "[memory]":  # (_memory's commonest paths inline: a free, an allocation with its total)
                    args = e.args
                    if args is not None:
                        nbytes, device_type = args.nbytes, args.device_type
                        if type(nbytes) is int and type(device_type) is int:
                            if nbytes <= 0:
                                continue  # a free
                            ts, total = e.ts, args.total_allocated
                            if (nbytes <= _MAX_BYTES and type(ts) is float and _MIN_EXACT_US < ts < _EXACT_US
                                    and type(total) is int and 0 <= total <= _MAX_TOTAL):
                                pid, tid = e.pid, e.tid
                                if pid != last_pid or tid != last_tid:
                                    last_t = raw_threads.get((pid, tid))  # type: ignore[assignment]
                                    if last_t is None:
                                        last_t = self._thread(pid, tid)
                                    last_pid, last_tid = pid, tid
                                mem_append(MemoryEvent_(last_t, fround(ts * 1000), nbytes, device_type, total))
                                continue
                    self._memory(e)
                elif e.cat == ANNOTATE_CAT:
                    dropped[OWN_EVENTS] += 1
            elif ph == "s" or ph == "f":
                cat = e.cat
                if cat != "ac2g" and cat is not None:  # ac2g: launch flows, not read
                    if cat.lower() == "fwdbwd":
                        self._flow(e, ph == "s")
                    elif cat == ANNOTATE_CAT:
                        dropped[OWN_EVENTS] += 1
            elif ph == "M" and e.cat == ANNOTATE_CAT:
                dropped[OWN_EVENTS] += 1

    # -- the rare paths of ts and dur: strings, epoch-sized floats, and values that are dropped ----------
    def _ts_ns(self, ts: int | float | str | None) -> int | None:
        n = _num(ts)
        if n is None:
            self.dropped["missing or non-numeric ts"] += 1
            return None
        if not _MIN_TS_US < n < _MAX_TS_US:  # NaN and ±inf fail it too
            self.dropped["ts out of range"] += 1
            return None
        return _ns(n)

    def _dur_ns(self, dur: int | float | str | None) -> int | None:
        n = _num(dur)
        if n is None:
            self.dropped["missing or non-numeric dur"] += 1
            return None
        if n < 0:
            self.dropped["negative dur"] += 1
            return None
        if not n <= _MAX_DUR_US:  # NaN and inf fail it too
            self.dropped["dur out of range"] += 1
            return None
        return n * 1000 if type(n) is int else round(n * 1000)

    def _correlation(self, corr: int | float | str | None) -> int | None:
        """The rare path of ``args.correlation``: not an int."""
        c = _int(corr)
        if c is None:
            self.dropped["bad correlation"] += 1
        return c

    # -- one method per event role: (event, kind, name, ts ns, dur ns, External id) ------------------------
    def _module(self, e: Event, kind: int | None, name: str, ts: int, dur: int, ext: int) -> None:
        """``python_function``: only ``nn.Module`` slices matter (the loop skips the rest when spelled exactly)."""
        if name.startswith("nn.Module: "):
            self._host(e, MODULE, name, ts, dur, ext)

    def _host_name(self, name: str, kind: int) -> tuple[str, int] | tuple[()]:
        """``host_names``' entry for a name first seen on a host event of ``kind``: its interned form and whether
        its inputs are kept (decided once per name, by the first host event that has it, as _host does)."""
        if name.startswith("ProfilerStep#"):
            entry: tuple[str, int] | tuple[()] = ()
        else:
            name = self.names.setdefault(name, name)
            entry = (name, self._keep(name, kind))
        self.host_names[name] = entry
        return entry

    def _keep(self, name: str, kind: int) -> int:
        """Whether an op's recorded inputs are kept (0: nothing; 1: dims and dtypes; 2: also the scalars, such as
        is_causal of attention ops), decided by the first host event of that name."""
        keep = self.keep_inputs.get(name)
        if keep is None:
            keep = self.keep_inputs[name] = (2 if keeps_scalars(name) else 1) if (
                kind == OP and keeps_shapes(name)) else 0
        return keep

    def _host(self, e: Event, kind: int, name: str, ts: int, dur: int, ext: int) -> None:
        """ATen ops and record_function ranges (``ProfilerStep#N`` among them), and ``nn.Module`` slices: what
        _ingest does not take inline (``ProfilerStep#`` names, and modules under a respelled python_function)."""
        if name.startswith("ProfilerStep#"):
            kind = ANNOTATION
            step = _step(name)
            if step is not None:
                if step < 0:
                    self.dropped["bad ProfilerStep number"] += 1
                    return
                self.steps.add(step)
        pid, tid = e.pid, e.tid
        t = self.raw_threads.get((pid, tid))
        self.host_append(HostEvent(kind, name, t if t is not None else self._thread(pid, tid), ts, dur, ext))
        args = e.args
        if args is not None and args.seq is not None:  # autograd's fwd <-> bwd key: training traces only
            self._seq(args.seq, args.fwd_tid, kind)
        keep = self._keep(name, kind)  # (decided here even without args: the name's first host event decides)
        if keep and args is not None:
            self._inputs(args, keep, name)

    def _inputs(self, args: Args, keep: int, name: str) -> None:
        """The recorded inputs of the host event just appended, whose name's inputs are kept."""
        raw = args.dims or args.dims_2021
        if raw:
            # Layers and steps repeat their shapes: one record per distinct (dims, types) keeps
            # memory flat, and a hit costs two copies and one look-up.
            key = (bytes(raw), bytes(args.types))
            rec = self.records.get(key)
            if rec is None:
                rec = self.records[key] = _new_tuple(OpInputs, (*key, b""))
            if keep == 2:
                rec = _new_tuple(OpInputs, (rec.dims, rec.types, bytes(args.concrete)))
            self.op_inputs[len(self.host) - 1] = rec
            if name in _SHAPE_OPS:
                self._shape(name, rec.dims)

    def _seq(self, sq: object, ft: object, kind: int) -> None:
        """Keep an op's ``Sequence number`` and ``Fwd thread id`` (ints only: they are only compared)."""
        if type(sq) is int and sq >= 0 and kind == OP:
            self.seq_host_append(len(self.host) - 1)
            self.seq_nr_append(sq)
            self.seq_fwd_append(ft if type(ft) is int and ft >= 0 else 0)

    def _shape(self, name: str, dims: bytes) -> None:
        """Input dims of attention-like ops, for diff's "different shapes" warning; display only."""
        key = (name, dims)
        if key in self.shapes_seen:
            return
        self.shapes_seen[key] = None
        seen = self.shapes.setdefault(name, {})
        if len(seen) < _MAX_SHAPES and dims.startswith(b"[") and 2 < len(dims) < 4000:
            try:
                parsed = orjson.loads(dims)
            except (orjson.JSONDecodeError, RecursionError):  # absurdly nested: no shape is shown
                return
            # Keyed by display form: two spellings of the same dims (spaces apart) count once.
            seen.setdefault(str(parsed), parsed)

    def _runtime(self, e: Event, kind: None, name: str, ts: int, dur: int, ext: int) -> None:
        """CUDA/HIP runtime and driver calls: the launch side of a correlation link."""
        args = e.args
        corr = args.correlation if args is not None else 0
        if type(corr) is not int:
            corr = self._correlation(corr)
            if corr is None:
                return
        pid, tid = e.pid, e.tid
        t = self.raw_threads.get((pid, tid))
        k = args.kernel if args is not None else None
        if k is None:
            self.rt_append(RuntimeEvent(name, t if t is not None else self._thread(pid, tid), ts, dur, corr, ext))
        else:  # (a launch that names its kernel: HIP's; names are interned like event names)
            k = self.names.setdefault(k, k) if type(k) is str else ""
            self.rt_append(RuntimeEvent(name, t if t is not None else self._thread(pid, tid), ts, dur, corr, ext, k))

    def _device(self, e: Event, kind: str, name: str, ts: int, dur: int, ext: int) -> None:
        """Kernels, memcpys and memsets on a GPU stream."""
        args = e.args
        corr = args.correlation if args is not None else 0
        if type(corr) is not int:
            corr = self._correlation(corr)
            if corr is None:
                return
        pid, tid = e.pid, e.tid
        s = self.raw_streams.get((pid, tid))
        self.dev_append(DeviceEvent(kind, name, s if s is not None else self._stream(pid, tid), ts, dur, corr, ext))

    def _gpu_annotation(self, e: Event, kind: None, name: str, ts: int, dur: int, ext: int) -> None:
        """A record_function range projected onto a stream (the last way to link a device event)."""
        self.tr.gpu_annotations.append(GpuAnnotation(name, self._stream(e.pid, e.tid), ts, dur, ext))

    def _range(self, e: Event, kind: None, name: str, ts: int, dur: int, ext: int) -> None:
        """CUPTI range-profiler traces have ranges instead of kernels; build() says so."""
        self.range_profiler = True

    def _missing_cat(self, e: Event, kind: None, name: str, ts: int, dur: int, ext: int) -> None:
        """An X event without ``cat`` could be a kernel: losing it silently would hide time."""
        self.dropped["missing cat"] += 1

    def _memory(self, e: Event) -> None:
        """An allocator instant; frees (Bytes <= 0) are not allocations and are skipped."""
        args = e.args
        if args is None:
            self.dropped["malformed [memory] event"] += 1
            return
        raw_bytes, raw_type = args.nbytes, args.device_type
        if type(raw_bytes) is int and type(raw_type) is int:
            nbytes, device_type = raw_bytes, raw_type
        else:
            n = _int(raw_bytes) if raw_bytes is not None else None
            d = _int(raw_type)
            if n is None or d is None:
                self.dropped["malformed [memory] event"] += 1
                return
            nbytes, device_type = n, d
        if nbytes <= 0:
            return
        if nbytes > _MAX_BYTES:
            self.dropped["[memory] Bytes out of range"] += 1
            return
        ts = e.ts
        ts_ns: int | None
        if type(ts) is float and _MIN_EXACT_US < ts < _EXACT_US:
            ts_ns = _ROUND(ts * 1000)
        else:
            ts_ns = self._ts_ns(ts)
            if ts_ns is None:
                return
        pid, tid = e.pid, e.tid
        t = self.raw_threads.get((pid, tid))
        raw_total = args.total_allocated  # (a missing, odd or out-of-range total is only unknown: the event stays)
        total = raw_total if type(raw_total) is int else _int(raw_total) if raw_total is not None else None
        if total is None or not 0 <= total <= _MAX_TOTAL:
            total = -1
        self.tr.memory.append(MemoryEvent(t if t is not None else self._thread(pid, tid), ts_ns, nbytes, device_type,
                                          total))

    def _flow(self, e: Event, start: bool) -> None:
        """One end of a forward→backward link."""
        fid = _int(e.id)
        if fid is None:
            self.dropped["bad fwdbwd flow id"] += 1
            return
        ts = self._ts_ns(e.ts)
        if ts is not None:
            self.tr.flows.append(Flow(fid, start, self._thread(e.pid, e.tid), ts))
