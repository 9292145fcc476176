"""Six behaviours that a mutation-testing review found untested (one-line mutants of them survived).

1. a diff where exactly one side is launch-bound (flags, span figures, the no-claim note, the gate);
2. the per-category noise rule of the diff, just inside and just outside its boundary;
3. causal attention FLOPs when the query and key lengths differ (counted cell by cell here);
4. a batched matmul whose batch dims broadcast;
5. redaction of ``PASSWORD=…`` and ``"PASSWORD": "…"``;
6. ``ProfilerStep#N`` never becoming a block, even under a scope that matches its name.

Every expected figure comes from the hand-built trace's chosen times or from the shapes, never from tracekit's
own output; every result is check()ed.
"""

from __future__ import annotations

import json
from math import prod
from pathlib import Path

import pytest

from tracekit.errors import InconclusiveError
from tracekit.vocab import Compared

from support.builders import TraceBuilder, attention_block
from support.cli import run_cli
from tracekit import analyze, diff_paths
from tracekit.analysis.gate import gate
from tracekit.analysis.flops import op_cost

GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*)"
H100 = "NVIDIA H100 80GB HBM3"


def _block(b: TraceBuilder, t0: float, gemm: float = 10, gap: float = 0, softmax: float | None = None) -> None:
    """layer0.attention: GEMM (``gemm`` µs) [→ softmax (``softmax`` µs)] → ``gap`` µs idle → GEMM again.

    Another op's kernel keeps the device busy until the block's first kernel starts, so the block's span is
    its own device work: span = 2·gemm + softmax + gap, busy = 2·gemm + softmax, idle = gap.
    """
    b.op("aten::mm", t0 - 8, 2)
    b.launch(GEMM, t0 - 7, 1, t0 + 40, 60, stream=8)  # outside the block; ends at t0 + 100
    b.annotation("layer0.attention", t0, 50)
    k = t0 + 100
    b.op("aten::bmm", t0 + 1, 8)
    b.launch(GEMM, t0 + 2, 1, k, gemm)
    k += gemm
    if softmax is not None:
        b.op("aten::_softmax", t0 + 10, 6)
        b.launch(SOFTMAX, t0 + 11, 2, k, softmax)
        k += softmax
    b.op("aten::bmm", t0 + 20, 8)
    b.launch(GEMM, t0 + 21, 2, k + gap, gemm)


def _steps(path: Path, steps: list[dict]) -> Path:
    """One ProfilerStep per entry, each holding one ``_block(**entry)``."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    t = 1000
    for s, kw in enumerate(steps):
        b.annotation(f"ProfilerStep#{s + 1}", t - 20, 400)
        _block(b, t, **kw)
        t += 1000
    return b.write(path)


# --- 1. exactly one side launch-bound ------------------------------------------------------------------------

# gap 30 µs between two 10-µs GEMMs: span 50, idle 30 (60%, launch-bound); gap 5: span 25, idle 5 (20%, not).
BOUND, FREE = 30, 5
SIDE = {BOUND: (50.0, 30.0, True, "60%"), FREE: (25.0, 5.0, False, "20%")}  # span, idle, launch-bound, idle %


@pytest.mark.parametrize("n_steps", [1, 2], ids=["total", "median-step"])
@pytest.mark.parametrize("gap_b,gap_a", [(BOUND, FREE), (FREE, BOUND), (FREE, FREE), (BOUND, BOUND)],
                         ids=["before-bound", "after-bound", "neither", "both"])
def test_launch_bound_on_one_side_is_reported_and_gated_on_span(tmp_path, gap_b, gap_a, n_steps):
    before = _steps(tmp_path / "b.json", [dict(gap=gap_b)] * n_steps)
    after = _steps(tmp_path / "a.json", [dict(gap=gap_a)] * n_steps)
    r = diff_paths(before, after).check()
    (span_b, idle_b, lb_b, pct_b), (span_a, idle_a, lb_a, pct_a) = SIDE[gap_b], SIDE[gap_a]
    fb, fa = r.before_figures, r.after_figures
    assert (fb.total_us, fa.total_us) == pytest.approx((20, 20))  # busy: two 10-µs GEMMs on both sides
    assert (fb.span_us, fb.idle_us, fa.span_us, fa.idle_us) == pytest.approx((span_b, idle_b, span_a, idle_a))
    assert (fb.launch_bound, fa.launch_bound) == (lb_b, lb_a)
    either = lb_b or lb_a
    assert r.launch_bound is either
    if either:
        assert r.no_claim.startswith("launch-bound") and f"idle {pct_b} / {pct_a}" in r.no_claim
        # no verdict by default: neither busy time (which did not change) nor the span is the latency
        sides = " and ".join(s for s, lb in (("before", lb_b), ("after", lb_a)) if lb)
        with pytest.raises(InconclusiveError, match=f"inconclusive: {sides} (is|are) launch-bound"):
            gate(r, 5)
        v = gate(r, 5, on=Compared.SPAN)  # the profiled span, when asked for
        assert (v.compared, v.before_us, v.after_us) == ("span", pytest.approx(span_b), pytest.approx(span_a))
        assert v.ok is (span_a <= span_b * 1.05) and v.chosen
    else:
        v = gate(r, 5)
        assert r.no_claim == ""
        assert (v.compared, v.before_us, v.after_us, v.ok) == ("busy", pytest.approx(20), pytest.approx(20), True)


# --- 2. per-category noise at its boundary -------------------------------------------------------------------

# Softmax per step: before 5, 9 and 7 µs (median 7, range 4); after x, x + 2 and x + 1 (median x + 1, range 2).
# (Three steps a side: two give no noise estimate, issue 24.)
# Spread = (4 + 2) / 2 = 3 µs: a softmax change of |Δ| <= 3 µs is within noise, anything more is not.
@pytest.mark.parametrize("delta,within", [
    (3.0, True), (2.995, True), (-3.0, True), (3.005, False), (-3.005, False), (0.0, True)])
def test_category_noise_boundary(tmp_path, delta, within):
    x = 7 + delta - 1
    before = _steps(tmp_path / "b.json", [{"softmax": 5}, {"softmax": 9}, {"softmax": 7}])
    after = _steps(tmp_path / "a.json", [{"softmax": x}, {"softmax": x + 2}, {"softmax": x + 1}])
    r = diff_paths(before, after).check()
    assert r.categories["softmax"].delta_us == pytest.approx(delta, abs=1e-9)
    sm = r.noise.categories["softmax"]
    assert (sm.before_min_us, sm.before_max_us, sm.after_min_us, sm.after_max_us) == pytest.approx((5, 9, x, x + 2))
    assert sm.within_noise is within
    assert r.noise.categories["matmul"].within_noise is True  # unchanged (40 µs both sides), no spread


# --- 3. causal attention, Lq != Lk (and Lq == Lk) ------------------------------------------------------

def _causal_cells(lq: int, lk: int) -> float:
    """Unmasked cells of a top-left aligned causal mask (query i sees keys j <= i, PyTorch's is_causal), with
    the diagonal counted as half a cell: the convention (docs/attribution.md, Efficiency) that makes
    Lq == Lk exactly half the score matrix."""
    n = 0.0
    for i in range(lq):
        for j in range(lk):
            n += 1.0 if j < i else 0.5 if j == i else 0.0
    return n


@pytest.mark.parametrize("lq,lk", [(3, 8), (5, 7), (1, 4), (64, 256), (8, 3), (6, 6)])
def test_causal_attention_flops_counted_cell_by_cell(lq, lk):
    b, h, dqk, dv = 2, 4, 16, 32
    q, k, v = [b, h, lq, dqk], [b, h, lk, dqk], [b, h, lk, dv]
    dims = json.dumps([q, k, v, [], [], [], [], []]).encode()
    types = json.dumps(["c10::BFloat16"] * 3 + ["", "Scalar", "Scalar", "", "Scalar"]).encode()

    def cost(is_causal: str) -> float:  # scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, ...)
        c = op_cost("aten::scaled_dot_product_attention", dims, types,
                    json.dumps(["", "", "", "", "0.", is_causal, "", "False"]).encode())
        assert c is not None
        return c.flops

    # two products (QKᵀ over Dqk, PV over Dv), 2 FLOPs per multiply-add, over the cells that are computed
    assert cost("False") == 2 * b * h * lq * lk * (dqk + dv)
    assert cost("True") == pytest.approx(2 * b * h * (dqk + dv) * _causal_cells(lq, lk))


# --- 4. batched matmul with broadcast batch dims --------------------------------------------------------------

B, H, M, K, N = 3, 5, 7, 11, 13


@pytest.mark.parametrize("sa,sb,out_batch", [
    ([B, 1, M, K], [1, H, K, N], B * H),
    ([1, H, M, K], [B, 1, K, N], B * H),
    ([B, H, M, K], [H, K, N], B * H),  # b has fewer dims: broadcast from the right
    ([B, 1, M, K], [H, K, N], B * H),
])
def test_matmul_broadcast_batch_flops(sa, sb, out_batch):
    c = op_cost("aten::matmul", json.dumps([sa, sb]).encode(), json.dumps(["c10::BFloat16"] * 2).encode(), b"[]")
    assert c is not None
    assert c.flops == 2 * out_batch * M * N * K
    assert c.bytes == 2 * (prod(sa) + prod(sb) + out_batch * M * N)  # bf16: a, b read, [B, H, M, N] written


# --- 5. PASSWORD=… and "PASSWORD": "…" ---------------------------------------------------------------------------

ASSIGNED, MEMBER = "hunter2-Xyzzy-77", "correct-horse-battery"


def test_password_assignment_and_member_are_redacted(tmp_path):
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}],
                     command_line=f"PASSWORD={ASSIGNED} python serve.py --port 8080",
                     environment={"PASSWORD": MEMBER, "LANG": "C.UTF-8", "SHELL": "/bin/bash"})
    b.annotation("ProfilerStep#1", 0, 300)
    attention_block(b, 10)
    src = b.write(tmp_path / "in.json")
    out = tmp_path / "out.json"
    run_cli("redact", src, "-o", out, check=True)
    text = out.read_text()
    assert ASSIGNED not in text  # PASSWORD=…
    assert MEMBER not in text  # "PASSWORD": "…"
    orig, red = json.loads(src.read_text()), json.loads(text)
    cmd = red.pop("command_line")
    assert cmd.startswith("PASSWORD=") and ASSIGNED not in cmd
    assert cmd.endswith(" python serve.py --port 8080")  # the value ends at the space: the rest is kept
    env = red["environment"]
    assert set(env) == {"PASSWORD", "LANG", "SHELL"} and MEMBER not in env["PASSWORD"] and env["PASSWORD"]
    assert (env["LANG"], env["SHELL"]) == ("C.UTF-8", "/bin/bash")
    del orig["command_line"], orig["environment"]["PASSWORD"], env["PASSWORD"]
    assert red == orig  # everything else, events included, is unchanged


# --- 6. ProfilerStep#N is never a block ---------------------------------------------------------------------

@pytest.mark.parametrize("scope", ["Profiler|attention", ".", "ProfilerStep#1|layer"])
def test_profiler_step_is_never_a_block_even_when_the_scope_matches_it(tmp_path, scope):
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    b.annotation("ProfilerStep#1", 0, 1000)
    attention_block(b, 10, name="layer0.attention")
    attention_block(b, 400, name="layer1.attention")
    r = analyze(b.write(tmp_path / "t.json"), scope=scope).check()
    assert not any(x.name.startswith("ProfilerStep") for x in r.blocks)
    assert [(x.name, x.found_by, x.step) for x in r.blocks] == [
        ("layer0.attention", "annotation", 1), ("layer1.attention", "annotation", 1)]
    # attention_block's device work: 31 µs busy (matmul 20, softmax 5, elementwise 2, memory 4) per block
    assert [x.total_us for x in r.blocks] == pytest.approx([31, 31])
    assert r.totals.categories["matmul"] == pytest.approx(40)
