"""Linking by gpu_user_annotation (tracekit.analysis.link): a device event with no launch link takes the innermost
annotation on its stream that is open at its start, and through its External id the host range of that name."""

from __future__ import annotations

from support.builders import TraceBuilder
from support.pairs import GEMM, H100

from tracekit import load_trace
from tracekit.analysis.link import NONE, link


def test_device_events_link_to_the_innermost_open_annotation(tmp_path):
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    outer = b.annotation("model_forward", 0, 1000)  # host 0
    first = b.annotation("layer0.attention", 10, 500)  # host 1
    second = b.annotation("layer1.attention", 520, 470)  # host 2
    ext = {k: ev["args"]["External id"] for k, ev in (("outer", outer), ("first", first), ("second", second))}
    # On the device (stream 7): first 100-400 and second 600-700 inside outer 100-1000, written innermost first.
    b.gpu_annotation("layer1.attention", 600, 100, ext["second"])
    b.gpu_annotation("layer0.attention", 100, 300, ext["first"])
    b.gpu_annotation("model_forward", 100, 900, ext["outer"])
    # Kernels with no correlation to any launch, out of time order in the file.
    b.device_only(GEMM, 650, 10, corr=0)  # in second
    b.device_only(GEMM, 150, 10, corr=0)  # in first (and outer, which opened at the same time)
    b.device_only(GEMM, 450, 10, corr=0)  # first has closed: outer
    b.device_only(GEMM, 120, 10, corr=0, stream=9)  # a stream with no annotation: not linked
    b.device_only(GEMM, 600, 10, corr=0)  # at second's very start: in it
    b.device_only(GEMM, 400, 10, corr=0)  # at first's very end: first has closed, outer
    b.gpu_annotation("orphan", 800, 50, 99999)  # an annotation no host range carries the id of
    b.device_only(GEMM, 810, 10, corr=0)  # linked, to no host event
    tr = load_trace(b.write(tmp_path / "t.json"))
    names = [h.name for h in tr.host]
    assert names == ["model_forward", "layer0.attention", "layer1.attention"]
    links = link(tr)
    got = [(tr.device[j].ts // 1000, links.device_linked[j],
            names[links.device_leaf[j]] if links.device_leaf[j] != NONE else None) for j in range(len(tr.device))]
    assert got == [(650, True, "layer1.attention"), (150, True, "layer0.attention"), (450, True, "model_forward"),
                   (120, False, None), (600, True, "layer1.attention"), (400, True, "model_forward"),
                   (810, True, None)]
    assert links.unlinked == [3]
