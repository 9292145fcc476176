"""The builder's per-event paths (issue 40): what ``_ingest`` takes inline (ops, runtime calls, kernels, [memory]
instants) gives what the handlers give, and the caches it keeps on the way (host names, the last thread and stream)
never change a decision or a first-seen order.

Each case is a hand-built batch whose answer follows from the rules as documented: a name's inputs are kept or not
as its first host event decides; threads and streams are numbered in first-seen order, a 2021 string spelling of
a pid/tid being the same thread as the int one.
"""

from __future__ import annotations

import msgspec

from tracekit.io.builder import TraceBuilder
from tracekit.io.read import Args, Event
from tracekit.model import ANNOTATION, MODULE, OP, TraceInfo

DIMS = msgspec.Raw(b"[[2, 8, 4], [2, 4, 8]]")
TYPES = msgspec.Raw(b'["float", "float"]')


def _x(cat: str, name: str, ts: float, pid: object = 1, tid: object = 1, **args: object) -> Event:
    return Event(ph="X", cat=cat, name=name, pid=pid, tid=tid, ts=ts, dur=1.0,  # type: ignore[arg-type]
                 args=Args(**args) if args else None)  # type: ignore[arg-type]


def _op(cat: str, ts: float, **args: object) -> Event:
    return _x(cat, "aten::bmm", ts, **{"dims": DIMS, "types": TYPES, **args})


# An epoch-sized float time, exact in binary (its ulp is 0.25 µs); float µs * 1000 would not be exact ns.
EPOCH_US, EPOCH_NS = 1700000000000000.25, 1700000000000000250


def _memory(ts: float, **args: object) -> Event:
    return Event(ph="i", name="[memory]", pid=1, tid=1, ts=ts, args=Args(**args))  # type: ignore[arg-type]


def _built(*events: Event) -> TraceBuilder:
    b = TraceBuilder(TraceInfo(source="x"))
    b._ingest(list(events))
    return b


def test_both_spellings_of_an_op_keep_its_inputs_and_share_one_record():
    """``cpu_op`` and the 2021 ``Operator`` are both ops: both keep their inputs, and equal inputs are one record."""
    b = _built(_op("cpu_op", 1.0), _op("Operator", 2.0), _op("cpu_op", 3.0))
    assert [(h.kind, h.name) for h in b.tr.host] == [(OP, "aten::bmm")] * 3
    assert sorted(b.tr.op_inputs) == [0, 1, 2]
    recs = list(b.tr.op_inputs.values())
    assert recs[0].dims == bytes(DIMS) and recs[0].types == bytes(TYPES)
    assert recs[0] is recs[1] is recs[2]


def test_a_names_first_host_event_decides_whether_its_inputs_are_kept():
    """A name first met on an annotation (even one without args) keeps no inputs, on any later op of that name;
    a name first met on an op keeps them, on a later annotation of that name too."""
    first_annotation = _built(_x("user_annotation", "aten::bmm", 1.0), _op("cpu_op", 2.0), _op("Operator", 3.0))
    assert [h.kind for h in first_annotation.tr.host] == [ANNOTATION, OP, OP]
    assert first_annotation.tr.op_inputs == {}
    first_op = _built(_op("cpu_op", 1.0), _op("user_annotation", 2.0))
    assert sorted(first_op.tr.op_inputs) == [0, 1]


def test_step_annotations_and_modules_on_the_inline_path():
    """``ProfilerStep#N`` is an annotation whatever its cat says, and its N a step; an unusable N is dropped at each
    of its events; ``nn.Module`` slices are modules, other Python frames are not read."""
    b = _built(_x("cpu_op", "ProfilerStep#3", 1.0), _x("user_annotation", "ProfilerStep#²", 2.0),
               _x("user_annotation", "ProfilerStep#²", 3.0), _x("python_function", "nn.Module: Attention", 4.0),
               _x("python_function", "nn.Module:Attention", 5.0), _x("python_function", "torch/nn/x.py(1): f", 6.0),
               _x("cpu_op", "ProfilerStep#3", 7.0))
    assert [(h.kind, h.name, h.ts) for h in b.tr.host] == [(ANNOTATION, "ProfilerStep#3", 1000),
                                                           (MODULE, "nn.Module: Attention", 4000),
                                                           (ANNOTATION, "ProfilerStep#3", 7000)]
    assert b.steps == {3}
    assert dict(b.dropped) == {"bad ProfilerStep number": 2}


def test_threads_and_streams_in_first_seen_order_whatever_the_event_kind():
    """Consecutive events on one thread share a cached look-up: interleaving threads, spellings and event kinds
    still gives each event its own thread, numbered in first-seen order."""
    mem = Args(nbytes=64, device_type=1, total_allocated=64)
    b = _built(
        _x("cpu_op", "aten::mm", 1.0, pid=1, tid=1),                        # thread 0
        _x("cuda_runtime", "cudaLaunchKernel", 2.0, pid=1, tid=2, correlation=5),  # thread 1
        Event(ph="i", name="[memory]", pid=1, tid=1, ts=3.0, args=mem),  # thread 0
        _x("cpu_op", "aten::mm", 4.0, pid="1", tid="1"),                    # 2021 spelling of thread 0
        _x("cpu_op", "aten::mm", 5.0, pid=2, tid=1),                        # thread 2
        Event(ph="i", name="[memory]", pid=1, tid=2, ts=6.0, args=mem),  # thread 1
        _x("cuda_runtime", "cudaLaunchKernel", 7.0, pid=2, tid=1, correlation=6),  # thread 2
        _x("kernel", "k", 8.0, pid=0, tid=7, correlation=5),                # stream 0
        _x("kernel", "k", 9.0, pid=0, tid=8, correlation=6),                # stream 1
        _x("Kernel", "k", 10.0, pid=0, tid=7, correlation=7),               # stream 0 (a respelled cat)
        _x("kernel", "k", 11.0, pid="0", tid="8", correlation=8),           # stream 1, 2021 spelling
        _x("kernel", "k", 12.0, pid=1, tid="8", correlation=9),             # stream 2: another GPU's
    )
    assert list(b.threads) == [(1, 1), (1, 2), (2, 1)]
    assert [h.thread for h in b.tr.host] == [0, 0, 2]
    assert [r.thread for r in b.tr.runtime] == [1, 2]
    assert [m.thread for m in b.tr.memory] == [0, 1]
    assert list(b.streams) == [(0, 7), (0, 8), (1, 8)]
    assert [d.stream for d in b.tr.device] == [0, 1, 0, 1, 2]


def test_runtime_kernel_and_memory_oddities_take_their_handlers():
    """What the inline paths leave to the handlers still counts: a HIP launch that names its kernel, a string
    correlation, an unusable one, a [memory] event with a string size, without a total or with an absurd one."""
    b = _built(
        _x("cuda_runtime", "hipLaunchKernel", 1.0, correlation=1, kernel="gemm"),
        _x("cuda_runtime", "cudaLaunchKernel", 2.0, correlation="2"),
        _x("kernel", "k", 3.0, pid=0, tid=7, correlation="x"),
        Event(ph="i", name="[memory]", pid=1, tid=1, ts=4.0, args=Args(nbytes="64", device_type=1)),
        Event(ph="i", name="[memory]", pid=1, tid=1, ts=5.0, args=Args(nbytes=-64, device_type=1)),
        _memory(6.0, nbytes=2**49, device_type=1, total_allocated=64),
        _memory(7.0, nbytes=32, device_type=1),
        _memory(8.0, nbytes=32, device_type=1, total_allocated=2**53),
        _memory(9, nbytes=32, device_type=1, total_allocated=96),
        _memory(EPOCH_US, nbytes=32, device_type=1, total_allocated=96),
    )
    assert [(r.name, r.correlation, r.kernel) for r in b.tr.runtime] == [
        ("hipLaunchKernel", 1, "gemm"), ("cudaLaunchKernel", 2, "")]
    assert b.tr.device == []
    assert [(m.ts, m.nbytes, m.total) for m in b.tr.memory] == [(4000, 64, -1), (7000, 32, -1), (8000, 32, -1),
                                                                 (9000, 32, 96), (EPOCH_NS, 32, 96)]
    assert dict(b.dropped) == {"bad correlation": 1, "[memory] Bytes out of range": 1}
