"""Rule eager-kernels (tracekit.analysis.scopes): a softmax kernel with a GEMM run shortly before and after it,
on one stream and owned by no block, is one inferred block (docs/attribution.md, "Attention blocks", rule 5).
Hand-built compiled regions: one host call launches every kernel, each 5 µs, 1 µs apart."""

from __future__ import annotations

import pytest
from support.builders import TraceBuilder
from support.pairs import GEMM, H100

from tracekit import analyze

SM = "triton_per_fused__softmax_0"  # inductor's fused softmax: category softmax
E = "triton_poi_fused_mul_0"  # inductor pointwise: elementwise, neither GEMM nor softmax


def compiled(path, seq, launcher="CompiledFunction", softmax_op=None, gemm_op=None):
    """One host call launching ``seq`` in order; optionally the softmax under a host ``softmax_op`` and the GEMMs
    under a host ``gemm_op`` (each its own op inside the call)."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    b.op(launcher, 0, 1000)
    t, k = 1, 2000
    for name in seq:
        op = softmax_op if name == SM else gemm_op if name == GEMM else None
        if op:
            b.op(op, t - 0.5, 1.8)
        b.launch(name, t, 1, k, 5)
        t += 2
        k += 6
    return b.write(path)


def blocks(tmp_path, seq, **kw):
    r = analyze(compiled(tmp_path / "c.json", seq, **kw)).check()
    return [(b.name, b.found_by, b.kernels) for b in r.blocks]


@pytest.mark.parametrize("before,after", [(0, 0), (1, 1), (3, 3), (4, 4), (1, 4), (4, 1)])
def test_gemm_runs_up_to_four_kernels_from_the_softmax(tmp_path, before, after):
    seq = [GEMM] + [E] * before + [SM] + [E] * after + [GEMM]
    assert blocks(tmp_path, seq) == [("inferred attention", "inferred", len(seq))]


@pytest.mark.parametrize("before,after", [(5, 1), (1, 5), (6, 1), (1, 6)])  # 5: one past MAX_BETWEEN (4)
def test_gemm_run_too_far_from_the_softmax(tmp_path, before, after):
    assert blocks(tmp_path, [GEMM] + [E] * before + [SM] + [E] * after + [GEMM]) == []


def test_pattern_late_on_the_stream(tmp_path):
    # Six free kernels first: the search counts kernels from the softmax, not from the start of the stream.
    seq = [E] * 6 + [GEMM, E, SM, E, GEMM]
    assert blocks(tmp_path, seq) == [("inferred attention", "inferred", 5)]


def test_gemm_runs_are_taken_whole(tmp_path):
    seq = [E, GEMM, GEMM, E, SM, E, GEMM, GEMM, GEMM, E]
    assert blocks(tmp_path, seq) == [("inferred attention", "inferred", 8)]  # first GEMM to last GEMM


def test_no_gemm_on_one_side(tmp_path):
    assert blocks(tmp_path, [GEMM, E, SM, E, E]) == []
    assert blocks(tmp_path, [E, E, SM, E, GEMM]) == []


def test_gemms_of_a_linear_layer_are_no_members(tmp_path):
    # A router: linear → softmax → linear. Its GEMMs are a breaker op's: no inferred block.
    assert blocks(tmp_path, [GEMM, SM, GEMM], gemm_op="aten::linear") == []


def test_softmax_of_a_host_softmax_op_is_no_member(tmp_path):
    assert blocks(tmp_path, [GEMM, SM, GEMM], softmax_op="aten::_softmax") == []


@pytest.mark.parametrize("seq", [[GEMM, GEMM, SM, GEMM], [GEMM, SM, GEMM, GEMM]])
def test_gemm_runs_reach_the_ends_of_the_stream(tmp_path, seq):
    assert blocks(tmp_path, seq) == [("inferred attention", "inferred", 4)]
