"""The in-memory trace model: slotted records with canonical fields.

Raw Kineto keys (``"External id"``, ``"correlation"``, ``Kernel``/``kernel``, …) are
mapped once, in :mod:`tracekit.io.load`; nothing downstream sees a raw event dict.
Times are integer nanoseconds so that sums and invariants are exact. Event records are
msgspec Structs: C-level construction and no GC tracking, for millions of them.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec

# Host event kinds, ordered so that when two intervals start together and have
# the same length, the nn.Module slice encloses the annotation, which encloses the op.
MODULE, ANNOTATION, OP = 1, 2, 3

# Device event kinds.
KERNEL, MEMCPY, MEMSET = "kernel", "memcpy", "memset"

# A recorded shape: an attention-like op's name and its ``Input Dims`` as parsed once by the loader (a JSON list,
# one entry per input). Kept as data end to end, so that diff reads the sizes without parsing text again.
Shape = tuple[str, list[Any]]


def shape_text(shape: Shape) -> str:
    """The display form of a recorded shape, e.g. ``aten::bmm[[16, 64, 64], [16, 64, 64]]`` (the JSON output's)."""
    op, dims = shape
    return f"{op}{dims}"


class HostEvent(msgspec.Struct, gc=False):
    """A CPU-side interval: ATen op, record_function range or Python frame."""

    kind: int
    name: str
    thread: int  # index into Trace.threads
    ts: int
    dur: int
    ext_id: int  # 0 = none


class RuntimeEvent(msgspec.Struct, gc=False):
    """A CUDA/HIP runtime or driver call (the launch side of a link)."""

    name: str
    thread: int
    ts: int
    dur: int
    correlation: int
    ext_id: int
    # The launched kernel's name, where the call names it (HIP launches do, CUDA ones do not): the only record
    # of what a launch during a graph capture put into the graph, since nothing ran. "" when not named.
    kernel: str = ""


class DeviceEvent(msgspec.Struct, gc=False):
    """A kernel, memcpy or memset on a GPU stream."""

    kind: str
    name: str
    stream: int  # index into Trace.streams
    ts: int
    dur: int
    correlation: int
    ext_id: int


class GpuAnnotation(msgspec.Struct, gc=False):
    """A record_function range projected onto a GPU stream."""

    name: str
    stream: int
    ts: int
    dur: int
    ext_id: int


class MemoryEvent(msgspec.Struct, gc=False):
    """An allocation (a ``[memory]`` instant with positive ``Bytes``; frees are not kept)."""

    thread: int
    ts: int
    nbytes: int
    device_type: int
    total: int = -1  # the allocator's ``Total Allocated`` after it (bytes); -1 when the event has none


class Flow(msgspec.Struct, gc=False):
    """One end of a forward→backward (``fwdbwd``) flow."""

    id: int
    start: bool
    thread: int
    ts: int


@dataclass(slots=True)
class TraceInfo:
    """What the header says about a trace. Never holds user metadata."""

    source: str
    gpus: list[str] = field(default_factory=list)
    pytorch: str | None = None
    runtime: str | None = None  # e.g. "CUDA 12.4", "HIP 6.4"
    event_count: int = 0
    steps: list[int] = field(default_factory=list)
    # Input dims of attention-like ops: ("aten::bmm", [[16, 64, 64], …]).
    shapes: list[Shape] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    damaged: bool = False  # salvaged or dropped events: results are partial
    rank: int | None = None  # ``distributedInfo.rank`` (the process's rank in a distributed job)


class OpInputs(NamedTuple):
    """What ``record_shapes`` wrote for one op, as raw JSON (parsed only where it is used)."""

    dims: bytes  # ``Input Dims``: a list of shapes, one per input ([] for scalars)
    types: bytes  # ``Input type``: dtype names ("c10::BFloat16", "float", "Scalar", …)
    concrete: bytes  # ``Concrete Inputs`` of the ops in vocab.keeps_scalars (is_causal, cat's dim…); else b""


@dataclass(slots=True, kw_only=True)
class CaptureRegion:
    """One stream capture on one host thread, from its BeginCapture call to its EndCapture call (the trace's
    end where that is missing). Each launch in it recorded a graph node and ran nothing."""

    thread: int
    begin: int  # ns
    end: int
    launches: list[int]  # indices into Trace.runtime of the work launches inside, in time order
    closed: bool  # both ends are in the trace


@dataclass(slots=True, kw_only=True)
class GraphLaunch:
    """One ``cudaGraphLaunch``/``hipGraphLaunch`` call and the device events it ran (its correlation id)."""

    runtime: int  # index into Trace.runtime
    device: list[int]  # indices into Trace.device, in start order


@dataclass(slots=True, kw_only=True)
class GraphFacts:
    """What a trace says about CUDA/HIP graphs (tracekit.io.graphs): its captures and its graph launches."""

    captures: list[CaptureRegion] = field(default_factory=list)
    launches: list[GraphLaunch] = field(default_factory=list)
    instantiations: int = 0  # cudaGraphInstantiate/hipGraphInstantiate calls

    @property
    def any(self) -> bool:
        return bool(self.captures or self.launches)


@dataclass(slots=True)
class Trace:
    """One trace file, parsed."""

    info: TraceInfo
    threads: list[tuple[object, object]] = field(default_factory=list)
    streams: list[tuple[object, object]] = field(default_factory=list)
    host: list[HostEvent] = field(default_factory=list)
    runtime: list[RuntimeEvent] = field(default_factory=list)
    device: list[DeviceEvent] = field(default_factory=list)
    gpu_annotations: list[GpuAnnotation] = field(default_factory=list)
    memory: list[MemoryEvent] = field(default_factory=list)
    flows: list[Flow] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)  # malformed events, by reason
    # Autograd's ``Sequence number`` / ``Fwd thread id`` of the ops that carry one, as parallel int64 arrays
    # (host index, sequence number, forward thread id: 0 on forward ops, the forward thread's id on backward ops).
    seq_host: array = field(default_factory=lambda: array("q"))
    seq_nr: array = field(default_factory=lambda: array("q"))
    seq_fwd: array = field(default_factory=lambda: array("q"))
    # Every distinct event name of the file (the loader's interning table), for analyses that can skip a whole
    # pass when a name is absent; None when the trace was built by other means (then nothing is skipped).
    names: frozenset[str] | None = None
    # Recorded inputs of the ops in vocab.SHAPED_OPS, by index into ``host`` (record_shapes traces only).
    op_inputs: dict[int, OpInputs] = field(default_factory=dict)
    # CUDA/HIP graph captures and replays (tracekit.io.graphs), found once the events are in; None when the trace
    # was built by other means (the analysis then finds them itself).
    graphs: "GraphFacts | None" = None
