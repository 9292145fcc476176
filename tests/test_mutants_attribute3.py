"""Survivors of the third mutmut run in tracekit.analysis.attribute (issue 21), on hand-built pieces."""

from __future__ import annotations

import pytest
from support.builders import TraceBuilder

from tracekit import analyze
from tracekit.analysis.attribute import _backward_evidence
from tracekit.analysis.scopes import Block
from tracekit.results.attribution import Evidence
from tracekit.vocab import CoreKind, FoundBy

MAIN, AUTOGRAD = 1, 2
FWD_K = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"
BWD_K = "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x128x128_4x1x1_cga1x1x1_kernel0_0"


def test_backward_evidence_of_a_forward_block_without_evidence_is_none():
    """A forward block without evidence (a hand-built or pre-evidence block): its backward has none either,
    rather than a crash on the missing rule."""
    assert _backward_evidence(Block("attn", FoundBy.MODULE, [0], evidence=None), "autograd") is None


def test_backward_evidence_names_how_it_was_paired():
    """The forward's evidence with the rule prefixed: "autograd backward of innermost-scope"; the rest is kept."""
    ev = Evidence(rule="innermost-scope", core=CoreKind.FUSED_OP, names=("aten::sdpa",))
    got = _backward_evidence(Block("attn", FoundBy.MODULE, [0], evidence=ev), "autograd")
    assert got == Evidence(rule="autograd backward of innermost-scope", core=CoreKind.FUSED_OP, names=("aten::sdpa",))


def _seq(ev: dict, nr: int, fwd_tid: int) -> dict:
    ev["args"]["Sequence number"] = nr
    ev["args"]["Fwd thread id"] = fwd_tid
    return ev


def test_a_backward_op_inside_another_layers_backward_op_keeps_its_own_block(tmp_path):
    """Two layers (annotations, each a 30 µs fused forward kernel under an aten::mul with sequence number 2 / 12).
    On the autograd thread, layer 1's backward op (seq 12, 1200..1300 µs, a 10 µs bprop kernel) encloses layer 0's
    (seq 2, 1250..1280 µs, a 20 µs bprop kernel). Each is its own forward's backward root (attribute._attach_backward:
    an op inside another joined op is a root unless both join the same forward block), and children inherit an
    owner only when they have none: so layer 0's backward holds its 20 µs, not layer 1's, which holds its own 10 µs."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])
    b.annotation("ProfilerStep#5", 0, 1000, tid=MAIN)
    for layer in range(2):
        t = 100 + 300 * layer
        b.annotation(f"layer{layer}.attention", t, 200, tid=MAIN)
        _seq(b.op("aten::mul", t + 30, 100, tid=MAIN), 10 * layer + 2, 0)
        b.launch(FWD_K, t + 31, 2, 2000 + 200 * layer, 30, tid=MAIN)
    _seq(b.op("MulBackward0", 1200, 100, tid=AUTOGRAD), 12, MAIN)  # layer 1's
    b.launch(BWD_K, 1202, 2, 3000, 10, tid=AUTOGRAD)
    _seq(b.op("MulBackward0", 1250, 30, tid=AUTOGRAD), 2, MAIN)  # layer 0's, inside it
    b.launch(BWD_K, 1252, 2, 3100, 20, tid=AUTOGRAD)
    res = analyze(b.write(tmp_path / "t.json")).check()
    bwd = {x.name: x for x in res.blocks if x.phase == "backward"}
    assert sorted(bwd) == ["layer0.attention", "layer1.attention"]
    assert bwd["layer0.attention"].total_us == pytest.approx(20)
    assert bwd["layer1.attention"].total_us == pytest.approx(10)


GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"


def test_a_backward_op_inside_another_steps_backward_op_keeps_its_own_step(tmp_path):
    """ProfilerStep#5 and #6, each: a projection (aten::linear, sequence number 3 / 13, a 5 µs GEMM) and an attention
    layer (a 30 µs fused kernel). On the autograd thread, outside both steps: step 6's projection backward (seq 13,
    a 10 µs GEMM) encloses step 5's (seq 3, a 20 µs GEMM). Each backward op takes its own forward op's step, and a
    child inherits its parent's step only when it has none (attribute._inherit), so the whole-step busy times are
    step 5: 5 + 30 + 20 = 55 µs and step 6: 5 + 30 + 10 = 45 µs (no kernel overlaps another)."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])
    for s in range(2):
        t = 100 + 300 * s
        b.annotation(f"ProfilerStep#{5 + s}", t - 50, 290, tid=MAIN)
        _seq(b.op("aten::linear", t - 40, 20, tid=MAIN), 10 * s + 3, 0)
        b.launch(GEMM, t - 39, 2, 2000 + 200 * s, 5, tid=MAIN)
        b.annotation(f"layer{s}.attention", t, 200, tid=MAIN)
        b.op("aten::mul", t + 30, 100, tid=MAIN)
        b.launch(FWD_K, t + 31, 2, 2100 + 200 * s, 30, tid=MAIN)
    _seq(b.op("AddmmBackward0", 1200, 100, tid=AUTOGRAD), 13, MAIN)  # step 6's
    b.launch(GEMM, 1202, 2, 3000, 10, tid=AUTOGRAD)
    _seq(b.op("AddmmBackward0", 1250, 30, tid=AUTOGRAD), 3, MAIN)  # step 5's, inside it
    b.launch(GEMM, 1252, 2, 3100, 20, tid=AUTOGRAD)
    (tr,) = analyze(b.write(tmp_path / "t.json")).check().traces
    assert {f.step: f.busy_us for f in tr.step_figures} == pytest.approx({5: 55.0, 6: 45.0})
