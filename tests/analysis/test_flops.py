"""FLOPs, bytes and the roofline (tracekit.analysis.flops, tracekit.hardware) against independent counts.

* the H200 sweep's known shapes (B=4, H=16, D=64, d_model=1024, L from the folder name, causal,
  4 layers × 2 steps): analytic FLOPs of the projections, the eager score/context products and the fused
  SDPA kernels;
* the shared real traces with shapes: a count computed here from the raw JSON's ``Input Dims`` with the
  standard GEMM/SDPA formulas (TraceLens' perf model uses the same ones), over the *public* ops
  (``aten::linear``/``aten::matmul``/``aten::scaled_dot_product_attention``), while tracekit counts the
  launcher ops below them (addmm/mm/bmm, the SDPA backend ops): different ops, layouts and argument slots;
* hand-built inputs for GQA, causal masks, backward and the peak table.
"""

from __future__ import annotations

import dataclasses
import json
import re
from bisect import bisect_right
from pathlib import Path

import pytest

from support.paths import REAL, ROOT, requires_real
from tracekit.analysis import account as attribute_mod
from tracekit.analysis import flops as flops_mod
from tracekit.run.api import analyze
from tracekit.results.invariants import InvariantError
from tracekit.results.efficiency import (HOST_ONLY, NO_SHAPES, DeviceInfo, Efficiency, efficiency_dict, merge_device,
                                         sum_efficiency, sum_efficiency_maps)
from tracekit.analysis.flops import VECTOR_RULES, OpCost, device_info, op_cost, vector_rule
from tracekit.hardware import PEAKS, lookup, normalise
from tracekit.analysis.link import NONE
from tracekit.renderers.jsonrenderer import to_dict
import orjson
from tracekit.analysis.flops import _fallback
from tracekit.model import OP, HostEvent, OpInputs, Trace, TraceInfo
from support.builders import TraceBuilder, attribute_built, with_dims
from support.builders import two_fp32_products
from support.traces import read_events
from support.randtrace import REAL_SAMPLES, context_after, random_trace
from tracekit.results.efficiency import NO_FORMULA
from math import prod

H200 = ROOT.parent / "shared" / "traces" / "h200"
requires_h200 = pytest.mark.skipif(not H200.is_dir(), reason="H200 sweep traces not present")
B, H, D, DM, CALLS = 4, 16, 64, 1024, 8  # 4 layers × 2 profiled steps
SWEEP = sorted(p.name for p in (H200 / "sweep").iterdir()) if H200.is_dir() else []


def _trace(folder: str) -> Path:
    return next((H200 / folder).glob("*.json*"))


def _seq(folder: str) -> int:
    return int(folder.rsplit("_", 1)[1])


def _close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * abs(b)


_ROLE_OF = {"qkv_proj": "projection", "out_proj": "projection", "qk_matmul": "score", "pv_matmul": "context"}


def _with_annotation_roles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Feed block_efficiency the roles the sweep's record_function names give (the roles helper's job)."""
    orig = flops_mod.block_efficiency

    def wrapped(tr, links, n, dev_owner, cats, dev_share, owned, roles=None):  # type: ignore[no-untyped-def]
        out: list[str | None] = [None] * len(tr.host)
        for i in links.order:
            p = links.op_parent[i]
            own = _ROLE_OF.get(tr.host[i].name)
            out[i] = own if own else (out[p] if p != NONE else None)
        return orig(tr, links, n, dev_owner, cats, dev_share, owned, roles=out)

    monkeypatch.setattr(attribute_mod, "block_efficiency", wrapped)


# --- (a) analytic counts of the sweep ---------------------------------------------------------------------


@requires_h200
@pytest.mark.parametrize("folder", ["eager_512", "eager_1024", "eager_2048", "eager_4096"])
def test_eager_score_context_and_projection_flops(folder: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eager runs the full L×L products even under a causal mask: tracekit reports the work done (no halving)."""
    _with_annotation_roles(monkeypatch)
    L = _seq(folder)
    res = analyze(_trace(f"sweep/{folder}")).check()
    by = to_dict(res, "t")["totals"]["efficiency_by_category"]
    product = 2 * B * H * L * L * D  # per call, Q·Kᵀ and P·V alike
    assert _close(by["score"]["flops"], CALLS * product, 0.01)
    assert _close(by["context"]["flops"], CALLS * product, 0.01)
    proj = 2 * (B * L) * DM * (3 * DM) + 2 * (B * L) * DM * DM  # qkv + out projections (bias adds are 1/2048)
    assert _close(by["projection"]["flops"], CALLS * proj, 0.01)
    assert _close(by["matmul"]["flops"], CALLS * (proj + 2 * product), 0.01)  # every matmul counted once


@requires_h200
@pytest.mark.parametrize("impl", ["sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa"])
@pytest.mark.parametrize("L", [512, 1024, 2048, 4096])
def test_fused_sdpa_forward_flops_are_half_of_4BHL2D(impl: str, L: int) -> None:
    """Causal fused kernels: 4·B·H·L²·D/2 per call, counted once although three ops nest around the kernel."""
    res = analyze(_trace(f"sweep/{impl}_{L}")).check()
    t = res.totals.efficiency_by_category
    assert t["fused_attention"].flops == pytest.approx(CALLS * 4 * B * H * L * L * D / 2, rel=1e-12)
    proj = 2 * (B * L) * DM * (3 * DM) + 2 * (B * L) * DM * DM
    assert res.totals.efficiency is not None
    assert _close(res.totals.efficiency.flops, CALLS * (proj + 4 * B * H * L * L * D / 2), 0.01)


@requires_h200
@pytest.mark.parametrize("folder", SWEEP)
def test_every_sweep_trace_reports_flops_rate_and_verdict(folder: str) -> None:
    d = to_dict(analyze(_trace(f"sweep/{folder}")).check(), "t")
    assert d["device"]["model"] == "H200" and d["device"]["peaks"]["bf16"] > 0
    for e in [d["totals"]["efficiency"]] + [b["efficiency"] for b in d["blocks"]]:
        assert e["flops"] > 0 and e["tflops_per_s"] > 0 and e["gb_per_s"] > 0, e
        assert e["bound"] in ("compute", "memory") and 0 < e["roof_pct"] <= 100, e
        assert e["reason"] is None
        assert e["flops_kind"] == "exact" and e["flops_min"] == e["flops_max"] == e["flops"], e  # issue 44
    for b in d["blocks"]:  # issue 44: no part of a block above its roof either
        for e in b["efficiency_by_category"].values():
            assert e["roof_pct"] is None or e["roof_pct"] <= 100, e
            assert e["roof_pct_max"] is None or e["roof_pct_max"] <= 100, e
    tot = d["totals"]["efficiency"]
    # achieved rate = FLOPs / busy time of the counted kernels, which never exceeds the blocks' busy time
    assert tot["tflops_per_s"] == pytest.approx(tot["flops"] / (tot["time_us"] * 1e-6) / 1e12, rel=1e-3)
    assert tot["time_us"] <= d["totals"]["total_us"] + 1e-3


@requires_h200
def test_flash_at_4096_runs_at_about_a_quarter_of_the_bf16_peak() -> None:
    """The issue's sanity check: the flash forward kernel alone, against its own kernel time from the trace."""
    res = analyze(_trace("sweep/sdpa-flash_4096")).check()
    e = res.totals.efficiency_by_category["fused_attention"]
    kernel_us = sum(us for (name, cat), (_, us) in res.kernels.items() if cat == "fused_attention")
    assert e.time_ns / 1000 == pytest.approx(kernel_us, rel=1e-6)  # one kernel per call: the busy time is its duration
    achieved = CALLS * 4 * B * H * 4096 ** 2 * D / 2 / (kernel_us * 1e-6) / 1e12
    assert 0.15 < achieved / PEAKS["H200"].tflops("bf16") < 0.35  # type: ignore[operator]
    assert e.bound == "compute" and e.roof_pct == pytest.approx(100 * achieved / 989.4, rel=1e-3)


@requires_h200
def test_sdpa_math_fp32_products_are_held_against_the_fp32_peak() -> None:
    """The math backend upcasts to fp32 (the trace's Input type says float): its bmm roof is the fp32 figure."""
    res = analyze(_trace("sweep/sdpa-math_1024")).check()
    m = res.totals.efficiency_by_category["matmul"]
    assert m.compute_s is not None and m.flops > 0
    # the fp32 products dominate the time at the fp32 peak: far more than the bf16 peak would give
    assert m.compute_s > m.flops / (989.4e12)


# --- (b) independent counts from the raw JSON of real traces ----------------------------------------------

SHAPED = ["tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz",
          "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
          "tracelens/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz",
          "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
          "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
          "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
          "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz",
          "tracelens/mi300/google_owlv2-large-patch14-ensemble__1016001.json.gz",
          "tracelens/evals/sdpa_01_long_seq_low_eff.json.gz",
          "tracelens/b200/eager_trace.json.gz",
          "tracelens/inference/xdit_flux_aiter/profile_trace_rank_0.json.gz",
          "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
          "hta/trace_diff/control/control.json.gz",
          "hta/trace_diff/test/test.json.gz"]


def _raw_ops(rel: str) -> list[dict]:
    evs = read_events(REAL / rel)
    return [e for e in evs if e.get("ph") == "X" and "Input Dims" in e.get("args", {})]


def independent_flops(rel: str) -> dict[str, float]:
    """The public ops' FLOPs, by family, with the textbook formulas written out here from the raw args."""
    out = {"gemm": 0.0, "sdpa": 0.0}
    ops = _raw_ops(rel)
    # count the outermost GEMM op only: a matmul inside a linear, an mm/bmm inside either, are the same product
    public = sorted((e.get("tid"), e["ts"], e["ts"] + e.get("dur", 0), e["name"]) for e in ops
                    if e["name"] in ("aten::linear", "aten::matmul"))

    def inside(e: dict, names: tuple[str, ...]) -> bool:
        t, s, end = e.get("tid"), e["ts"], e["ts"] + e.get("dur", 0)
        k = bisect_right(public, (t, s, float("inf"), "~"))
        while k > 0:
            k -= 1
            pt, ps, pe, pn = public[k]
            if pt != t:
                return False
            if pe >= end and pn in names and not (ps == s and pe == end and pn == e["name"]):
                return True
        return False

    for e in ops:
        name, a = e["name"], e["args"]
        dims = a["Input Dims"]
        if name == "aten::matmul" and inside(e, ("aten::linear",)):
            continue
        if (name in ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")
                and inside(e, ("aten::linear", "aten::matmul"))):
            continue
        if name == "aten::linear":  # x[..., K] · W[N, K]ᵀ (+ bias[N])
            x, w = dims[0], dims[1]
            m = 1
            for s in x[:-1]:
                m *= s
            out["gemm"] += 2 * m * w[0] * w[1] + (m * w[0] if len(dims) > 2 and dims[2] else 0)
        elif name == "aten::matmul" and len(dims[0]) >= 2 and len(dims[1]) >= 2:
            a_, b_ = dims[0], dims[1]
            batch = 1
            for s in (a_[:-2] if len(a_) >= len(b_) else b_[:-2]):
                batch *= s
            out["gemm"] += 2 * batch * a_[-2] * a_[-1] * b_[-1]
        elif name in ("aten::mm", "aten::bmm"):  # called directly ([b,] M, K)·([b,] K, N)
            a_, b_ = dims[0], dims[1]
            out["gemm"] += 2 * (a_[0] if len(a_) == 3 else 1) * a_[-2] * a_[-1] * b_[-1]
        elif name in ("aten::addmm", "aten::baddbmm"):  # C + A·B: a bias add per output element
            a_, b_ = dims[1], dims[2]
            n = (a_[0] if len(a_) == 3 else 1) * a_[-2] * b_[-1]
            out["gemm"] += 2 * n * a_[-1] + n
        elif name == "aten::scaled_dot_product_attention":  # q, k, v as [B, H, L, D]; is_causal is argument 5
            q, k = dims[0], dims[1]
            causal = a.get("Concrete Inputs", [""] * 6)[5] == "True"
            f = 4 * q[0] * q[1] * q[2] * k[2] * q[3]
            out["sdpa"] += f / 2 if causal else f
    return out


def tracekit_flops(rel: str) -> dict[str, float]:
    """tracekit's count over the ops that launch the kernels (no public op: those are only fallbacks)."""
    from tracekit.io.load import load_trace
    tr = load_trace(REAL / rel)
    out = {"gemm": 0.0, "sdpa": 0.0}
    gemm = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
    for i, oi in tr.op_inputs.items():
        name = tr.host[i].name
        fam = "gemm" if name in gemm else "sdpa" if name in flops_mod._ATTENTION and not name.startswith(
            ("aten::scaled_dot", "aten::_scaled_dot")) else None
        if fam:
            c = op_cost(name, oi.dims, oi.types, oi.concrete)
            if c is not None:
                out[fam] += c.flops
    return out


@pytest.mark.slow
@requires_real
@pytest.mark.real
@pytest.mark.parametrize("rel", SHAPED)
def test_real_traces_agree_with_an_independent_count(rel: str) -> None:
    """Where the trace records only public ops and their launchers, the two counts must agree to 1%.

    Bias adds are in tracekit's GEMM count (addmm) and in the independent linear count alike; matmuls
    that torch lowers to mm/bmm are under aten::matmul on the independent side.
    """
    ind, tk = independent_flops(rel), tracekit_flops(rel)
    for fam in ("gemm", "sdpa"):
        if ind[fam] == 0 and tk[fam] == 0:
            continue
        assert _close(tk[fam], ind[fam], 0.01), (fam, tk[fam], ind[fam])


@requires_real
@pytest.mark.real
def test_block_flops_of_bert_equal_the_independent_count_of_its_attention_modules() -> None:
    """Per block: FLOPs of the public ops inside each attention module == tracekit's block efficiency."""
    rel = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    res = analyze(REAL / rel).check()
    assert res.blocks and all(b.efficiency is not None and b.efficiency.ops for b in res.blocks)
    total = sum(b.efficiency.flops for b in res.blocks if b.efficiency)
    assert res.totals.efficiency is not None and res.totals.efficiency.flops == pytest.approx(total)
    assert res.device is not None and res.device.peaks is not None and res.device.peaks.model == "H100 SXM"


# --- hand-built inputs ---------------------------------------------------------------------------------


def _j(x: object) -> bytes:
    return json.dumps(x).encode()


def test_gqa_counts_query_heads_and_reads_fewer_kv_bytes() -> None:
    q, kv = [2, 32, 1024, 128], [2, 8, 1024, 128]
    types = ["c10::BFloat16"] * 3 + ["Scalar"] * 4
    c = op_cost("aten::_scaled_dot_product_flash_attention", _j([q, kv, kv, [], [], [], []]), _j(types),
                _j(["", "", "", "0.", "False", "False", ""]))
    assert c is not None and c.flops == 4 * 2 * 32 * 1024 * 1024 * 128
    assert c.bytes == 2 * (2 * 2 * 32 * 1024 * 128 + 2 * 2 * 8 * 1024 * 128)  # Q and O at 32 heads, K and V at 8
    assert c.dtype == "bf16" and c.matrix


def test_causal_backward_and_mask_type() -> None:
    q = [1, 4096, 16, 64]  # [B, L, H, D] for the kernel-level ops
    fwd = 4 * 16 * 4096 * 4096 * 64
    base = ["", "", "", "", "", "", "", "", "0."]
    causal = op_cost("aten::_efficient_attention_forward", _j([q, q, q] + [[]] * 11), _j(["c10::Half"] * 3 + [""] * 11),
                     _j(base + ["1", "False", "", "", ""]))
    full = op_cost("aten::_efficient_attention_forward", _j([q, q, q] + [[]] * 11), _j(["c10::Half"] * 3 + [""] * 11),
                   _j(base + ["0", "False", "", "", ""]))
    assert causal is not None and full is not None and causal.flops == fwd / 2 and full.flops == fwd
    bwd = op_cost("aten::_flash_attention_backward", _j([q] * 6 + [[]] * 11), _j(["c10::BFloat16"] * 6 + [""] * 11),
                  _j([""] * 11 + ["True"] + [""] * 5))
    assert bwd is not None and bwd.flops == 2.5 * fwd / 2


def test_gemm_formulas() -> None:
    bf = _j(["c10::BFloat16"] * 5)
    assert op_cost("aten::mm", _j([[128, 64], [64, 32]]), bf, b"[]").flops == 2 * 128 * 64 * 32  # type: ignore[union-attr]
    assert op_cost("aten::bmm", _j([[3, 128, 64], [3, 64, 32]]), bf, b"[]").flops == 3 * 2 * 128 * 64 * 32  # type: ignore[union-attr]
    c = op_cost("aten::addmm", _j([[32], [128, 64], [64, 32], [], []]), bf, b"[]")
    assert c is not None and c.flops == 2 * 128 * 64 * 32 + 128 * 32
    assert c.bytes == 2 * (128 * 64 + 64 * 32 + 128 * 32 + 32)
    mat = op_cost("aten::matmul", _j([[2, 5, 128, 64], [64, 32]]), bf, b"[]")
    assert mat is not None and mat.flops == 10 * 2 * 128 * 64 * 32
    ein = op_cost("aten::einsum", _j([[], [[2, 8, 16], [2, 16, 4]]]), _j(["", "c10::BFloat16"]),
                  _j(["bij,bjk->bik", ""]))
    assert ein is not None and ein.flops == 2 * 2 * 8 * 16 * 4
    assert op_cost("aten::mm", _j([[128, 64], [65, 32]]), bf, b"[]") is None  # inconsistent shapes: no count
    assert op_cost("aten::mm", b"[[", bf, b"[]") is None


def test_vector_ops_bytes() -> None:
    c = op_cost("aten::masked_fill_", _j([[4, 16, 512, 512], [512, 512], []]), _j(["c10::BFloat16", "bool", "Scalar"]),
                _j(["", "", "-inf"]))
    n = 4 * 16 * 512 * 512
    assert c is not None and c.bytes == n * 2 + 512 * 512 + n * 2 and c.flops == n and not c.matrix
    cp = op_cost("aten::copy_", _j([[4, 16, 512, 512], [4, 16, 512, 512], []]),
                 _j(["c10::BFloat16", "float", "Scalar"]), _j(["", "", "False"]))
    assert cp is not None and cp.bytes == n * (2 + 4) and cp.flops == 0


# Each vector rule against bytes written out here from the shapes: (op, Input Dims, Input type, rule, FLOPs, bytes).
# Element sizes: bf16/half 2, float 4, double/long 8, bool 1.
_N = 4 * 8 * 128 * 128
VECTOR_CASES = [
    ("aten::_softmax", [[4, 8, 128, 128], [], []], ["c10::BFloat16", "Scalar", "Scalar"], "softmax",
     5 * _N, _N * 2 + _N * 2),  # read x, write y
    ("aten::log_softmax", [[6, 10]], ["float"], "softmax", 5 * 60, 60 * 4 * 2),
    ("aten::copy_", [[1, 1, 559], [1, 1, 559], []], ["float", "long int", "Scalar"], "copy-into",
     0, 559 * 8 + 559 * 4),  # read the long src, write float self
    ("aten::index_put_", [[64, 32], [[5]], [5, 32], []], ["float", "GenericList", "c10::Half", "Scalar"], "copy-into",
     0, 5 * 32 * 2 + 5 * 32 * 4),  # read 5 rows of half values, write them into float self; indices left out
    ("aten::clone", [[16, 16, 559, 64], []], ["c10::BFloat16", "Scalar"], "copy-out", 0, 2 * 16 * 16 * 559 * 64 * 2),
    ("aten::_to_copy", [[8, 32]], ["float"], "copy-out", 0, 8 * 32 * 4 * 2),
    ("aten::fill_", [[5, 5], []], ["float", "Scalar"], "fill", 0, 25 * 4),
    ("aten::zero_", [[1]], ["int"], "fill", 0, 4),
    ("aten::cat", [[[1, 559, 32], [2, 559, 32]], []], ["c10::BFloat16", "Scalar"], "concat",
     0, (559 * 32 + 2 * 559 * 32) * 2 * 2),  # parts read, result written
    ("aten::native_dropout", [[8, 128], [], []], ["c10::BFloat16", "Scalar", "Scalar"], "dropout",
     1024, 1024 * 2 + 1024 * 2 + 1024),  # read, write, 1-byte mask
    ("aten::masked_fill", [[4, 4], [4, 4], []], ["long int", "bool", "float"], "masked-fill",
     16, 16 * 8 + 16 * 1 + 4 + 16 * 8),  # a 0-dim float value: the output is still long, like self
    ("aten::where", [[1, 1, 1], [], [1, 5184, 1]], ["bool", "Scalar", "c10::BFloat16"], "where",
     5184, 1 + 5184 * 2 + 5184 * 2),
    ("aten::where", [[4, 1], [4, 4], [1, 4]], ["bool", "c10::BFloat16", "float"], "where",
     16, 4 + 16 * 2 + 4 * 4 + 16 * 4),  # broadcast to [4, 4], written at the last tensor's (float) size
    ("aten::add", [[16, 559, 1], [], []], ["float", "double", "Scalar"], "elementwise",
     16 * 559, 16 * 559 * 4 + 8 + 16 * 559 * 4),  # a 0-dim double tensor is read too
    ("aten::mul_", [[3], [2, 3]], ["long int", "c10::BFloat16"], "elementwise",
     6, 3 * 8 + 6 * 2 + 6 * 2),  # written at the first floating input's size, not the long's
]


@pytest.mark.parametrize("name,dims,types,rule,flops,nbytes", VECTOR_CASES)
def test_vector_rule_bytes(name: str, dims: list, types: list, rule: str, flops: int, nbytes: int) -> None:
    r = vector_rule(name)
    assert r is not None and r.name == rule  # first match wins: masked_fill/where before elementwise
    c = op_cost(name, _j(dims), _j(types), b"[]")
    assert c is not None and (c.flops, c.bytes) == (flops, nbytes) and not c.matrix


def test_vector_rules_are_named_explained_and_all_tested() -> None:
    names = [r.name for r in VECTOR_RULES]
    assert len(set(names)) == len(names) and all(r.why for r in VECTOR_RULES)
    assert set(names) == {case[3] for case in VECTOR_CASES}  # a new rule needs a case above
    for op in ("aten::copy", "aten::where__", "aten::softmax_backward_data", "aten::view", "aten::mm"):
        assert vector_rule(op) is None
    assert op_cost("aten::cat", _j([[[2, 3], [2, 3]], []]), _j(["TensorList", "Scalar"]), b"[]") is None


# --- check(): the invariants of Efficiency and DeviceInfo ---------------------------------------------------


def _counted() -> Efficiency:
    return Efficiency(flops=1e9, bytes=1e6, time_ns=2000, compute_s=1e-6, memory_s=3e-7, ops=2)


def test_efficiency_check_accepts_what_counting_and_summing_build() -> None:
    h100 = lookup("NVIDIA H100 80GB HBM3")
    unit = flops_mod._unit_efficiency
    ok = [Efficiency(), Efficiency(ops=0, reason=NO_SHAPES), Efficiency(reason=HOST_ONLY), _counted(),
          unit(OpCost(1e12, 1e9, "bf16", True), 1000, h100, "NVIDIA H100 80GB HBM3"),
          unit(OpCost(0.0, 1e9, None, False), 1000, h100, "NVIDIA H100 80GB HBM3"),  # a copy: no FLOPs
          unit(OpCost(1e9, 1e6, None, True), 1000, h100, "NVIDIA H100 80GB HBM3"),  # fp64: no FLOP roof, a reason
          unit(OpCost(1e9, 1e6, "bf16", True), 1000, None, "AMD Radeon Graphics")]  # unknown device: no roof at all
    for e in ok:
        assert e.check() is e
    total = sum_efficiency(ok)
    assert total is not None and total.ops == 6 and total.compute_s is None and total.reason
    assert all(e.check() is e for e in sum_efficiency_maps([{"matmul": e} for e in ok]).values())


@pytest.mark.parametrize("broken", [
    {"flops": -1.0}, {"bytes": -1.0}, {"time_ns": -1}, {"ops": -1}, {"flops": float("nan")},
    {"compute_s": -1e-9}, {"memory_s": -1e-9},
    {"ops": 0},  # figures without a counted call
    {"ops": 0, "flops": 0.0, "bytes": 0.0, "time_ns": 0, "memory_s": 0.0},  # seconds at peak without work
    {"memory_s": None, "reason": "no bandwidth"},  # a FLOP roof without a bandwidth one: no device has that
    {"compute_s": None},  # no roof, and no reason why
    {"reason": ""},
    {"bounded": 3},  # issue 44: more calls counted as ranges than calls counted
    {"flops_span": 1.0}, {"compute_span_s": 1e-9},  # a range's width without a call counted as a range
    {"bounded": 1, "flops_span": -1.0},
])
def test_efficiency_check_rejects_broken_figures(broken: dict) -> None:
    e = dataclasses.replace(_counted(), **broken)
    with pytest.raises(InvariantError, match="Efficiency invariant broken"):
        e.check()


def test_sums_check_what_they_return() -> None:
    broken = Efficiency(flops=-1.0, ops=1, compute_s=0.0, memory_s=0.0)
    with pytest.raises(InvariantError, match="flops"):
        sum_efficiency([None, broken, broken])
    with pytest.raises(InvariantError, match="flops"):
        sum_efficiency_maps([{"matmul": broken}])


def test_device_info_check_accepts_what_device_info_and_merge_build() -> None:
    ds = [device_info(["NVIDIA H100 80GB HBM3"], True), device_info([], True),
          device_info(["AMD Radeon Graphics"], True), device_info(["NVIDIA H200"], False),
          device_info(["NVIDIA H200", "NVIDIA H200"], True)]
    assert all(d.check() is d for d in ds)
    assert ds[0].peaks is not None and [d.reason is None for d in ds] == [True, False, False, False, True]
    merged = merge_device(ds)
    assert merged is not None and merged.peaks is None and merged.reason == "traces from different devices"
    assert merge_device([ds[4], ds[4]]) is ds[4] and merge_device([None]) is None


@pytest.mark.parametrize("broken", [
    DeviceInfo(name="NVIDIA H100 80GB HBM3", peaks=None),  # no peaks and no reason
    DeviceInfo(name="NVIDIA H100 80GB HBM3", peaks=PEAKS["H100 SXM"], reason="unknown device"),  # peaks and excuse
    DeviceInfo(name=None, peaks=PEAKS["H100 SXM"]),  # peaks from no name
    DeviceInfo(name="NVIDIA H200", peaks=PEAKS["H100 SXM"]),  # another model's peaks
    DeviceInfo(name="NVIDIA H200", peaks=PEAKS["H200"], names=["NVIDIA H100 80GB HBM3", "NVIDIA H200"]),
    DeviceInfo(name=None, peaks=None, reason=""),
])
def test_device_info_check_rejects_broken_objects(broken: DeviceInfo) -> None:
    with pytest.raises(InvariantError, match="DeviceInfo invariant broken"):
        broken.check()


@requires_real
@pytest.mark.real
def test_every_efficiency_of_a_real_trace_passes_check() -> None:
    res = analyze(REAL / "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz").check()
    es = [b.efficiency for b in res.blocks] + [e for b in res.blocks for e in b.efficiency_by_category.values()]
    assert len(es) > 100 and all(e is not None and e.check() is e for e in es)
    assert res.device is not None and res.device.check().peaks is not None


@pytest.mark.parametrize("name,model", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H200", "H200"),
    ("NVIDIA B200", "B200"), ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"), ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"), ("NVIDIA A100-PG509-200", "A100 SXM 40GB"),
    ("Tesla V100-SXM2-32GB", "V100 SXM2"), ("NVIDIA L4", "L4"), ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("AMD Instinct MI300X VF", "MI300X"), ("AMD Instinct MI325X", "MI325X"), ("AMD Instinct MI250X", "MI250X"),
    ("AMD Instinct MI210", "MI210"), ("AMD Radeon Graphics", None), ("NVIDIA L40", None),
])
def test_device_names_normalise(name: str, model: str | None) -> None:
    assert normalise(name) == model


def test_peak_table_is_dense_and_sourced() -> None:
    src = (ROOT / "tracekit" / "hardware.py").read_text()
    for p in PEAKS.values():
        assert p.source and p.fp32 > 0 and p.mem_gb_per_s > 0
        assert re.search(r"datasheet|whitepaper", p.source)
        tensor = [p.tflops(d) for d in ("bf16", "fp16") if p.tflops(d)]
        assert all(t > p.fp32 for t in tensor)
    assert "# NVIDIA H100" in src and "# AMD Instinct MI300X" in src
    h = lookup("NVIDIA H100 80GB HBM3")
    assert h is not None and h.tflops("bf16") == pytest.approx(1979 / 2, rel=1e-3)  # datasheet: 1,979 with sparsity


@requires_real
@pytest.mark.real
def test_no_shapes_and_unknown_device_give_reasons_not_figures() -> None:
    res = analyze(REAL / "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz").check()
    d = to_dict(res, "t")
    for b in d["blocks"]:
        assert b["efficiency"]["flops"] is None and b["efficiency"]["reason"] == NO_SHAPES
    res2 = analyze(REAL / "tracelens/inference/xdit_flux_aiter/profile_trace_rank_0.json.gz").check()
    assert res2.device is not None and res2.device.peaks is not None  # MI300X
    e = efficiency_dict(flops_mod._unit_efficiency(flops_mod.OpCost(1e12, 1e9, "bf16", True), 1_000_000, None,
                                                   "AMD Radeon Graphics"))
    assert e["tflops_per_s"] == 1000.0 and e["bound"] is None and e["roof_pct"] is None
    assert "unknown device" in str(e["reason"])


@requires_h200
def test_terminal_shows_the_efficiency_of_each_block_kind() -> None:
    from support.cli import run_cli
    out = run_cli("attribute", _trace("sweep/eager_4096"), check=True).stdout
    out = out.replace("\n    ", " ").replace("\n  ", " ")  # the terminal wraps long lines with an indent
    d = to_dict(analyze(_trace("sweep/eager_4096")).check(), "t")["totals"]["efficiency"]
    sect = out[out.index("efficiency of kernels with recorded shapes"):]
    assert "H200" in sect.splitlines()[0] and "989.4" in sect.splitlines()[0]
    row = next(line for line in sect.splitlines() if line.startswith("layer*.attention"))
    assert f"{d['tflops_per_s']:.1f}" in row and f"{d['roof_pct']:.1f}%" in row and d["bound"] in row


# ---------------------------------------------------------------------------------------------
# op_cost on hand-written recorded inputs: every field of the count (FLOPs, bytes, dtype class, matrix or vector),
# counted by hand from the conventions in the module's docstring (docs/attribution.md, "Efficiency"), for einsum,
# attention's causal argument and backward, and the vector rules

def _compact(x) -> bytes:
    return orjson.dumps(x)


def cost(name, dims, types, concrete=()):
    return op_cost(name, _compact(dims), _compact(types), _compact(list(concrete)))


# ---------------------------------------------------------------------------------------------
# einsum: 2 FLOPs per term of the full index space (1 with one operand); bytes: operands read, output written


def einsum(eq, shapes, dtype="c10::BFloat16"):
    return cost("aten::einsum", [[], shapes], ["", dtype], [eq, ""])


def test_einsum_fp32_operands():
    # b=2, i=8, j=16, k=4: space 2·8·16·4 = 1024 → 2048 FLOPs; bytes (256 + 128 + 64) · 4.
    assert einsum("bij,bjk->bik", [[2, 8, 16], [2, 16, 4]], "float") == OpCost(2048.0, 448.0 * 4, "fp32", True)


def test_einsum_bf16_with_spaces_in_the_equation():
    assert einsum("bij, bjk -> bik", [[2, 8, 16], [2, 16, 4]]) == OpCost(2048.0, 448.0 * 2, "bf16", True)


def test_einsum_broadcast_dimension_takes_the_largest_size():
    # b is 2 in the first operand, 1 (broadcast) in the second: the space is 2·8·16·4.
    c = einsum("bij,bjk->bik", [[2, 8, 16], [1, 16, 4]])
    assert c.flops == 2048.0 and c.bytes == (256 + 64 + 64) * 2


def test_einsum_size_one_dimension():
    # i = 1: space 1·16·4 = 64 → 128 FLOPs; bytes (16 + 64 + 4) · 2.
    assert einsum("ij,jk->ik", [[1, 16], [16, 4]]) == OpCost(128.0, 84.0 * 2, "bf16", True)


def test_einsum_one_operand_is_one_flop_per_term():
    # A reduction "ij->i" over 4×8: 32 terms, 32 FLOPs; bytes (32 + 4) · 2.
    assert einsum("ij->i", [[4, 8]]) == OpCost(32.0, 72.0, "bf16", True)


@pytest.mark.parametrize("dtype", ["TensorList", None, ["x"]])
def test_einsum_without_a_known_operand_dtype_takes_two_bytes(dtype):
    assert einsum("ij,jk->ik", [[2, 3], [3, 4]], dtype) == OpCost(48.0, (6 + 12 + 8) * 2.0, None, True)


def test_einsum_without_operand_types_takes_two_bytes():
    c = cost("aten::einsum", [[], [[2, 3], [3, 4]]], [""], ["ij,jk->ik", ""])
    assert c == OpCost(48.0, 52.0, None, True)


def test_einsum_that_cannot_be_read_is_not_counted():
    assert einsum("ij,jk,kl->il", [[2, 3], [3, 4]]) is None  # three terms, two shapes
    assert einsum("ij->i", [[2, 3], [3, 4]]) is None  # one term, two shapes
    assert einsum("...ij,...jk->...ik", [[1, 1, 2, 8, 16], [1, 1, 2, 16, 4]]) is None  # ellipsis: not counted


# ---------------------------------------------------------------------------------------------
# Attention: the causal argument, and backward's bytes

Q = [1, 128, 8, 64]  # [B, L, HALF, d] (flash/efficient forward layout)
HALF = "c10::Half"


def test_causal_argument_missing_means_not_causal():
    # 2·B·HALF·L·L·(d + d) = 2·8·128·128·128 FLOPs, full (not causal), with too short a Concrete Inputs list.
    full = 2.0 * 8 * 128 * 128 * 128
    for concrete in ([], [""] * 9):  # the is_causal slot is position 9: absent, then just past the end
        c = cost("aten::_efficient_attention_forward", [Q, Q, Q], [HALF] * 3, concrete)
        assert c is not None and c.flops == full, concrete
    c = cost("aten::_flash_attention_forward", [Q, Q, Q], [HALF] * 3, [""] * 8)
    assert c is not None and c.flops == full


def test_custom_mask_type_empty_or_zero_is_not_causal():
    full = 2.0 * 8 * 128 * 128 * 128
    for v in ("", " ", "0"):
        c = cost("aten::_efficient_attention_forward", [Q, Q, Q], [HALF] * 3, [""] * 9 + [v])
        assert c.flops == full, v
    c = cost("aten::_efficient_attention_forward", [Q, Q, Q], [HALF] * 3, [""] * 9 + ["1"])
    assert c.flops == full / 2


def test_backward_moves_twice_the_forward_bytes():
    # Forward: Q, K, V read and O written: 4 · 128·8·64 elements of 2 bytes. Backward: twice that, 2.5× the FLOPs.
    fwd = cost("aten::_flash_attention_forward", [Q, Q, Q], [HALF] * 3, [""] * 9)
    bwd = cost("aten::_flash_attention_backward", [Q] * 6, [HALF] * 6, [""] * 12)
    io = 4 * 128 * 8 * 64 * 2
    assert fwd == OpCost(2.0 * 8 * 128 * 128 * 128, float(io), "fp16", True)
    assert bwd == OpCost(2.5 * 2.0 * 8 * 128 * 128 * 128, float(2 * io), "fp16", True)


# ---------------------------------------------------------------------------------------------
# Vector rules: the whole OpCost, matrix False


def test_softmax_cost_is_fp32_vector_work():
    # 2·3·4·5 = 120 elements: 600 FLOPs, read and written at 2 bytes.
    assert cost("aten::_softmax", [[2, 3, 4, 5], [], []], ["c10::BFloat16", "Scalar", "Scalar"]) == \
        OpCost(600.0, 480.0, "fp32", False)


def test_copies_and_fills_are_vector_work_with_no_flops():
    x = [[4, 8], [], []]
    bf = ["c10::BFloat16", "Scalar", "Scalar"]
    assert cost("aten::clone", x, bf) == OpCost(0.0, 2.0 * 32 * 2, None, False)
    assert cost("aten::fill_", x, bf) == OpCost(0.0, 32.0 * 2, None, False)
    assert cost("aten::cat", [[[2, 3], [2, 5]], []], ["c10::BFloat16", "Scalar"]) == \
        OpCost(0.0, 2.0 * 16 * 2, None, False)


def test_dropout_cost():
    # 32 elements: 32 FLOPs; read and written at 2 bytes plus a 1-byte mask: 32 · 5 bytes.
    assert cost("aten::native_dropout", [[4, 8], [], []], ["c10::BFloat16", "Scalar", "Scalar"]) == \
        OpCost(32.0, 160.0, "fp32", False)


def test_concat_with_no_parts_is_not_counted():
    assert cost("aten::cat", [[], []], ["c10::BFloat16", "Scalar"]) is None
    # one 0-d part: 1 element read and written
    assert cost("aten::cat", [[[]], []], ["c10::BFloat16", "Scalar"]) == OpCost(0.0, 2.0 * 1 * 2, None, False)


# ---------------------------------------------------------------------------------------------
# GEMMs with a bias: 2·M·N·K per product plus M·N for the add; bytes: operands, output and bias

BF = "c10::BFloat16"


def test_baddbmm_counts_its_batched_product_and_bias():
    # bias [2, 8, 4], a [2, 8, 16], b [2, 16, 4]: 2·2·8·4·16 = 2048 + 64; bytes (256 + 128 + 64 + 64) · 2.
    assert cost("aten::baddbmm", [[2, 8, 4], [2, 8, 16], [2, 16, 4], [], []], [BF, BF, BF, "Scalar", "Scalar"]) == \
        OpCost(2112.0, 1024.0, "bf16", True)


def test_addbmm_sums_the_batch_into_one_output():
    # bias [8, 4], a [2, 8, 16], b [2, 16, 4]: 2048 FLOPs + 32 for the bias; output 8×4; bytes (256+128+32+32)·2.
    assert cost("aten::addbmm", [[8, 4], [2, 8, 16], [2, 16, 4], [], []], [BF, BF, BF, "Scalar", "Scalar"]) == \
        OpCost(2080.0, 896.0, "bf16", True)


def test_addmm_activation_is_an_addmm():
    # bias [4], a [8, 16], b [16, 4]: 1024 + 32 FLOPs; bytes (128 + 64 + 32 + 4) · 2.
    assert cost("aten::_addmm_activation", [[4], [8, 16], [16, 4], [], [], []],
                [BF, BF, BF, "Scalar", "Scalar", "Scalar"]) == OpCost(1056.0, 456.0, "bf16", True)


def test_linear_with_and_without_bias():
    # x [2, 8, 16] · W[4, 16]ᵀ: M = 16, K = 16, N = 4: 2048 FLOPs; bytes (256 + 64 + 64) · 2.
    x, w = [2, 8, 16], [4, 16]
    assert cost("aten::linear", [x, w], [BF, BF]) == OpCost(2048.0, 768.0, "bf16", True)
    assert cost("aten::linear", [x, w, []], [BF, BF, BF]) == OpCost(2048.0, 768.0, "bf16", True)  # empty bias slot
    assert cost("aten::linear", [x, w, []], [BF, BF, ""]) == OpCost(2048.0, 768.0, "bf16", True)
    assert cost("aten::linear", [x, w, [4]], [BF, BF, BF]) == OpCost(2048.0 + 64, 768.0 + 8, "bf16", True)


def test_scaled_mm_bias_is_its_fifth_input():
    # fp8 a [8, 16], b [16, 4], scales, bf16 bias [4]; output bf16 (2 bytes): 1024 + 32 FLOPs,
    # bytes 128·1 + 64·1 + 32·2 + 4·2.
    f8 = "c10::Float8_e4m3fn"
    dims = [[8, 16], [16, 4], [], [], [4]]
    types = [f8, f8, "float", "float", BF]
    assert cost("aten::_scaled_mm", dims, types) == OpCost(1056.0, 264.0, "fp8", True)
    assert cost("aten::_scaled_mm", dims[:4], types[:4]) == OpCost(1024.0, 256.0, "fp8", True)


# ---------------------------------------------------------------------------------------------
# Pointwise: 1 FLOP per output element, fp32 vector work; the output written at the first floating input's size


def test_pointwise_costs():
    assert cost("aten::add", [[4, 8], [4, 8], []], [BF, BF, "Scalar"]) == OpCost(32.0, 3 * 64.0, "fp32", False)
    # The mask is read as bool; the output has self's dtype.
    assert cost("aten::masked_fill", [[4, 8], [4, 8], []], [BF, "bool", "Scalar"]) == \
        OpCost(32.0, 64.0 + 32 + 64, "fp32", False)
    # cond, x, y read; out written
    assert cost("aten::where", [[4, 8], [4, 8], [4, 8]], ["bool", BF, BF]) == OpCost(32.0, 32.0 + 3 * 64, "fp32", False)


def test_pointwise_on_integer_tensors_writes_at_the_first_input_size():
    # No floating input: the output takes the first input's element size (8 bytes).
    assert cost("aten::add", [[4], [4], []], ["long int", "long int", "Scalar"]) == OpCost(4.0, 96.0, "fp32", False)
    assert cost("aten::neg", [[4]], ["long int"]) == OpCost(4.0, 64.0, "fp32", False)
    assert cost("aten::mul", [[4], [4]], ["int", "long int"]) == OpCost(4.0, 16.0 + 32 + 16, "fp32", False)


def test_linear_with_mismatched_or_batched_weight_is_not_counted():
    assert cost("aten::linear", [[2, 8, 16], [4, 15]], [BF, BF]) is None  # K 16 against 15
    assert cost("aten::linear", [[2, 8, 16], [3, 4, 16]], [BF, BF]) is None  # a weight is 2-D


def test_matmul_with_vector_operands():
    # [16] · [16, 4]: the vector is a 1×16 row: 2·1·4·16 = 128 FLOPs; bytes (16 + 64 + 4) · 2.
    assert cost("aten::matmul", [[16], [16, 4]], [BF, BF]) == OpCost(128.0, 168.0, "bf16", True)
    # [8, 16] · [16]: the vector is a 16×1 column: 2·8·1·16 = 256 FLOPs; bytes (128 + 16 + 8) · 2.
    assert cost("aten::matmul", [[8, 16], [16]], [BF, BF]) == OpCost(256.0, 304.0, "bf16", True)


def test_int_mm_writes_int32():
    # int8 [8, 16] · [16, 4]: 1024 FLOPs; bytes 128 + 64 read at 1 byte, 32 outputs written at 4 (int32).
    assert cost("aten::_int_mm", [[8, 16], [16, 4]], ["signed char", "signed char"]) == \
        OpCost(1024.0, 320.0, "int8", True)


def test_copy_into_reads_the_last_tensor_and_writes_self():
    # copy_(self bf16, src fp32): 2048 elements read at 4 bytes and written at 2.
    assert cost("aten::copy_", [[32, 64], [32, 64], []], [BF, "float", "Scalar"]) == \
        OpCost(0.0, 2048.0 * (4 + 2), None, False)
    # index_put_(self, index, values): the values (the last tensor, 4 bf16 elements) are read and written into self;
    # an index recorded as a plain long tensor is not what is copied.
    assert cost("aten::index_put_", [[8], [4], [4], []], [BF, "long int", BF, "Scalar"]) == \
        OpCost(0.0, 4.0 * (2 + 2), None, False)


# ---------------------------------------------------------------------------------------------
# The fallback on a hand-built host tree: a launcher without a formula hands its kernels to the innermost
# GEMM/attention parent above it (aten::matmul/linear/einsum or an attention op) that has recorded inputs and a
# count, and the walk's memo answers for every op it passed. Indices and parents are written out per test

BF16 = "c10::BFloat16"


def _inputs(dims, types) -> OpInputs:
    return OpInputs(dims=orjson.dumps(dims), types=orjson.dumps(types), concrete=b"")


MATMUL_IN = _inputs([[4, 8], [8, 16]], [BF16, BF16])  # a countable product: 2·4·8·16 FLOPs
LINEAR_IN = _inputs([[4, 8], [16, 8]], [BF16, BF16])  # x[4, 8] · W[16, 8]ᵀ: countable
BAD_IN = _inputs([[4], []], [BF16, ""])  # recorded, but no formula applies (a vector and nothing)
SDPA_IN = _inputs([[1, 2, 8, 16]] * 3, [BF16] * 3)  # q, k, v (B, H, L, D)


def _host_tree(names: list[str], inputs: dict[int, OpInputs]) -> Trace:
    host = [HostEvent(OP, n, 0, 10 * i, 5, 0) for i, n in enumerate(names)]
    return Trace(info=TraceInfo(source="hand"), host=host, op_inputs=inputs)


def test_the_innermost_counted_gemm_parent_takes_the_kernels():
    """0 matmul (counted) > 1 einsum (no inputs) > 2 mm (counted, but no GEMM parent) > 3 add (the launcher).
    The walk passes 2 (mm is no parent op) and 1 (no inputs) and stops at 0; every op passed answers 0."""
    tr = _host_tree(["aten::matmul", "aten::einsum", "aten::mm", "aten::add"], {0: MATMUL_IN, 2: MATMUL_IN})
    memo: dict[int, int] = {}
    assert _fallback(tr, [NONE, 0, 1, 2], 3, memo) == 0
    assert memo == {2: 0, 1: 0, 0: 0}


def test_a_parent_without_a_count_is_passed():
    """0 linear (counted) > 1 matmul whose inputs give no count > 2 add: the answer is 0, not 1."""
    tr = _host_tree(["aten::linear", "aten::matmul", "aten::add"], {0: LINEAR_IN, 1: BAD_IN})
    memo: dict[int, int] = {}
    assert _fallback(tr, [NONE, 0, 1], 2, memo) == 0
    assert memo == {1: 0, 0: 0}


def test_an_attention_op_is_a_parent_too():
    """0 SDPA (q, k, v recorded) > 1 _softmax: the softmax's kernels go to the SDPA call."""
    tr = _host_tree(["aten::scaled_dot_product_attention", "aten::_softmax"], {0: SDPA_IN, 1: MATMUL_IN})
    assert _fallback(tr, [NONE, 0], 1, {}) == 0


def test_no_parent_is_none_and_the_memo_says_so():
    """0 mm (counted, not a parent op) > 1 add: nothing above 1 qualifies, so NONE (-1), memoised for 0; a launcher
    at the top has no parent at all."""
    tr = _host_tree(["aten::mm", "aten::add"], {0: MATMUL_IN})
    memo: dict[int, int] = {}
    assert _fallback(tr, [NONE, 0], 1, memo) == NONE == -1
    assert memo == {0: NONE}
    memo2: dict[int, int] = {}
    assert _fallback(tr, [NONE, 0], 0, memo2) == NONE and memo2 == {}


def test_the_launcher_itself_is_not_its_own_fallback():
    """The walk starts at the launcher's parent: a counted matmul launcher with no parent gets NONE."""
    tr = _host_tree(["aten::matmul"], {0: MATMUL_IN})
    assert _fallback(tr, [NONE], 0, {}) == NONE


def test_a_memoised_op_answers_for_the_rest_of_the_walk():
    """1 einsum (no inputs) > 2 mm > 3 add, and the memo already says 1 -> 0: the walk stops at 1 with that answer
    (0's inputs are never read: it has none here) and memoises it for 2, the op it passed."""
    tr = _host_tree(["aten::matmul", "aten::einsum", "aten::mm", "aten::add"], {})
    memo = {1: 0}
    assert _fallback(tr, [NONE, 0, 1, 2], 3, memo) == 0
    assert memo == {1: 0, 2: 0}
    memo = {1: NONE}  # a memoised "nothing above": NONE, even though nothing else is known
    assert _fallback(tr, [NONE, 0, 1, 2], 3, memo) == NONE and memo == {1: NONE, 2: NONE}


# ---------------------------------------------------------------------------------------------
# Recorded inputs of the wrong kind (a non-string einsum equation, an operand shape that is not a list) give no
# count and never a crash (op_cost's rule: "a shape of the wrong arity or kind: no count, never a crash")

def test_einsum_whose_equation_is_not_a_string_is_not_counted():
    """The equation slot holds a JSON object that contains the key "->": `"->" in {...}` is True, so code that took
    it for the equation would go on to call .replace on a dict (AttributeError, which op_cost does not catch).
    The rule: only a string is an equation; anything else is "" and no count."""
    dims = [[], [[2, 3], [3, 4]]]
    types = ["", "c10::BFloat16"]
    assert cost("aten::einsum", dims, types, [{"->": 1}, ""]) is None
    assert cost("aten::einsum", dims, types, [["->"], ""]) is None  # a list holding "->": the same


def test_einsum_with_an_operand_shape_that_is_not_a_list_is_not_counted():
    """"ij,->ij" with shapes [2,3] and "" (a string, not a shape): every operand shape must be a list, so no count.
    Code that skipped that check would count it: the empty term matches the empty string, the space is 2·3 = 6
    (12 FLOPs), and the bytes (6 + numel("") = 1 + 6)·2 = 26; so a non-None answer means the check is gone."""
    assert cost("aten::einsum", [[], [[2, 3], ""]], ["", "c10::BFloat16"], ["ij,->ij", ""]) is None


def test_concat_whose_parts_are_not_shapes_is_not_counted():
    """aten::cat's first input is a list of shapes; [None] is a list whose first part is not a shape: no count.
    Counting it would give 2·numel(None) = 2·1 element · 2 bytes = 4 bytes."""
    assert cost("aten::cat", [[None], []], ["c10::BFloat16", "Scalar"]) is None
    assert cost("aten::cat", [[""], []], ["c10::BFloat16", "Scalar"]) is None


def test_mm_ignores_inputs_past_its_two_operands():
    """aten::mm [2,3]·[3,4] in bf16 with three more recorded slots (the fifth a 1-D tensor): only _scaled_mm reads a
    bias from input 4. FLOPs 2·2·3·4 = 48; bytes (2·3 + 3·4 + 2·4 output) · 2 = 52. Reading the fifth input as a
    bias would add 8 FLOPs (one per output element) and 4·2 bytes."""
    bf = "c10::BFloat16"
    got = cost("aten::mm", [[2, 3], [3, 4], [], [], [4]], [bf, bf, "", "", bf])
    assert (got.flops, got.bytes) == (48.0, 52.0)


# ---------------------------------------------------------------------------------------------
# Efficiency on hand-built blocks: calls of equal figures summed, bytes of unequal ones added, and why a block has
# no count

GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"




def test_equal_calls_sum_their_kernel_time(tmp_path: Path) -> None:
    """Two identical aten::mm [2,3]·[3,4] bf16 calls in one block, their GEMM kernels 20 and 30 µs apart in time:
    one group of equal figures, so the block's counted time is the busy union 20 + 30 = 50 µs, its FLOPs 2·48."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 200)
    with_dims(b.op("aten::mm", 10, 8), [[2, 3], [3, 4]], [BF, BF])
    b.launch(GEMM, 11, 1, 1000, 20)
    with_dims(b.op("aten::mm", 30, 8), [[2, 3], [3, 4]], [BF, BF])
    b.launch(GEMM, 31, 1, 1100, 30)
    [blk] = attribute_built(tmp_path, b).blocks
    e = blk.efficiency
    assert e.ops == 2 and e.flops == 96.0
    assert e.time_ns == 50_000


def test_a_block_without_counted_ops_says_why(tmp_path: Path) -> None:
    """Two blocks (mm → softmax → mm); only the first's first mm has recorded shapes (counted: 48 FLOPs). Shapes
    exist in the trace, so the second block's reason is "no formula" (not "no shapes", and never empty)."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 100)
    with_dims(b.op("aten::mm", 10, 8), [[2, 3], [3, 4]], [BF, BF])
    b.launch(GEMM, 11, 1, 1000, 20)
    b.op("aten::_softmax", 30, 2)
    b.op("aten::mm", 40, 8)
    b.annotation("layer1.attention", 200, 100)
    b.op("aten::mm", 210, 8)
    b.launch(GEMM, 211, 1, 1100, 20)
    b.op("aten::_softmax", 230, 2)
    b.op("aten::mm", 240, 8)
    first, second = attribute_built(tmp_path, b).blocks
    assert first.efficiency.ops == 1 and first.efficiency.flops == 48.0
    assert second.efficiency.ops == 0 and second.efficiency.reason == NO_FORMULA


def test_efficiency_sums_the_bytes_of_unequal_calls(tmp_path: Path) -> None:
    """The two fp32 products of different shapes are two groups; their bytes add up in matmul: mm [2,3]·[3,4] reads
    6 + 12 and writes 8 elements, mm [2,4]·[4,5] reads 8 + 20 and writes 10: (26 + 38) · 4 bytes."""
    b = TraceBuilder()
    two_fp32_products(b)
    [blk] = attribute_built(tmp_path, b).blocks
    assert blk.efficiency_by_category["matmul"].bytes == 256.0


def test_a_device_trace_without_recorded_shapes_says_so(tmp_path: Path) -> None:
    """No op in the trace has Input Dims (record_shapes off): every block's efficiency has no ops and says why."""
    from support.builders import attention_block
    from tracekit.results.efficiency import NO_SHAPES
    b = TraceBuilder()
    attention_block(b, 10)
    [blk] = attribute_built(tmp_path, b).blocks
    assert blk.efficiency.ops == 0 and blk.efficiency.reason == NO_SHAPES


# ---------------------------------------------------------------------------------------------
# Recorded slots that do not match: a bias without a shape or a dtype, a cat part that is no shape, addbmm's operands

def _cost(name, dims, types):
    return op_cost(name, orjson.dumps(dims), orjson.dumps(types), b"[]")


def test_linear_with_fewer_dims_than_types_has_no_bias():
    """aten::linear x[2,3]·W[4,3]ᵀ with a third type but no third shape: the bias slot is missing, so no bias.
    FLOPs 2·2·3·4 = 48; bytes (2·3 + 4·3 + 2·4 output)·2 = 52. Reading the slot anyway is an IndexError (no count)."""
    got = _cost("aten::linear", [[2, 3], [4, 3]], [BF, BF, BF])
    assert (got.flops, got.bytes) == (48.0, 52.0)


def test_linear_with_fewer_types_than_dims_has_no_bias():
    """The same product with a third shape [4] but only two types: the slot has no dtype, so no bias (48, 52).
    A bias would add one FLOP per output element (8) and 4·2 bytes."""
    got = _cost("aten::linear", [[2, 3], [4, 3], [4]], [BF, BF])
    assert (got.flops, got.bytes) == (48.0, 52.0)


def test_addmm_whose_bias_shape_is_not_a_list_has_no_bias():
    """aten::addmm(bias, a[2,3], b[3,4]) with the bias shape null but a valid dtype: no tensor, so no bias term.
    48 FLOPs and 52 bytes as a plain mm; taking it as a bias of numel(None) = 1 would give 56 and 54."""
    got = _cost("aten::addmm", [None, [2, 3], [3, 4]], [BF, BF, BF])
    assert (got.flops, got.bytes) == (48.0, 52.0)


def test_a_cat_with_a_part_that_is_not_a_shape_is_not_counted():
    """aten::cat of a [2,3] part and a null part, bf16: the null part's size is unknown, so no count (the same
    rule as a cat whose only part is null). The control, two [2,3] parts: 2·(6 + 6)·2 = 48 bytes, no FLOPs."""
    assert _cost("aten::cat", [[[2, 3], None]], [BF]) is None
    got = _cost("aten::cat", [[[2, 3], [2, 3]]], [BF])
    assert (got.flops, got.bytes) == (0.0, 48.0)


@pytest.mark.parametrize(("a", "b", "want"), [
    ([4, 2, 3], [4, 3, 5], (250.0, 2 * (10 + 24 + 60 + 10))),  # the control: 4 products summed into one [2,5]
    ([1, 2, 3], [4, 3, 5], None),  # batch dims differ: PyTorch refuses it, so no count
    ([2, 3], [3, 5], None),  # 2-D operands: not an addbmm PyTorch runs
])
def test_addbmm_counts_only_3d_operands_with_one_batch(a, b, want):
    """aten::addmm's batched sibling: bias [2,5] + Σ_b A[b]·B[b]. FLOPs 2·4·2·5·3 = 240 + one add per output
    element (10) = 250; bytes (bias 10 + A 24 + B 60 + out 10 elements)·2. Any other operand shape: no count."""
    got = _cost("aten::addbmm", [[2, 5], a, b], [BF, BF, BF])
    assert (got if got is None else (got.flops, got.bytes)) == want


# ---------------------------------------------------------------------------------------------
# Causal attention when the query and key lengths differ (counted cell by cell), and a batched matmul whose batch
# dims broadcast

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


BATCH, HEADS, M, K, N = 3, 5, 7, 11, 13


@pytest.mark.parametrize("sa,sb,out_batch", [
    ([BATCH, 1, M, K], [1, HEADS, K, N], BATCH * HEADS),
    ([1, HEADS, M, K], [BATCH, 1, K, N], BATCH * HEADS),
    ([BATCH, HEADS, M, K], [HEADS, K, N], BATCH * HEADS),  # b has fewer dims: broadcast from the right
    ([BATCH, 1, M, K], [HEADS, K, N], BATCH * HEADS),
])
def test_matmul_broadcast_batch_flops(sa, sb, out_batch):
    c = op_cost("aten::matmul", json.dumps([sa, sb]).encode(), json.dumps(["c10::BFloat16"] * 2).encode(), b"[]")
    assert c is not None
    assert c.flops == 2 * out_batch * M * N * K
    assert c.bytes == 2 * (prod(sa) + prod(sb) + out_batch * M * N)  # bf16: a, b read, [BATCH, HEADS, M, N] written


@pytest.mark.parametrize("bad", [-4, True])
def test_a_negative_or_boolean_dim_is_no_shape(bad):
    """A recorded dim that no tensor can have (negative; JSON true) gives no count, never a negative FLOP figure
    that check() would then refuse with a traceback."""
    dims = json.dumps([[1, bad, 256, 64], [1, 4, 64, 256]]).encode()
    types = json.dumps(["c10::BFloat16"] * 2).encode()
    assert flops_mod.op_cost("aten::matmul", dims, types, b"") is None
    good = json.dumps([[1, 4, 256, 64], [1, 4, 64, 256]]).encode()
    assert flops_mod.op_cost("aten::matmul", good, types, b"").flops == 2 * 4 * 256 * 256 * 64


# --- issue 44: serving attention (varlen, paged, windowed) on the shared serving traces, and TraceLens' formulas

_SERVING_TRACES = ["graphs/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
                   "graphs/sglang_decode/capture_traces/bs_32_rank0.json.gz",
                   "graphs/vllm_prefilldecode_piecewise/graph_execution.json.gz",
                   "real/tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
                   "real/tracelens/inference/vllm_decode_full/graph_execution.json.gz",
                   "real/tracelens/b200/eager_trace.json.gz"]
_SERVING_ATTENTION = re.compile(r"vllm::unified_attention.*|aiter::(?:mha|fmha)\w*|sglang_profiler::\w*attention\w*")


@requires_real
@pytest.mark.real
@pytest.mark.parametrize("rel", _SERVING_TRACES)
def test_every_serving_attention_call_has_flops_or_a_reason(rel: str) -> None:
    """Walk the raw JSON for the serving attention ops (vLLM, aiter, SGLang's wrappers) that recorded inputs: each
    gets a count (exact, or a range with its reason) or none with a reason; and every block's attention figures
    in the JSON say how they were counted, or why not."""
    path = REAL.parent / rel
    calls = [e for e in read_events(path) if e.get("cat") == "cpu_op" and e.get("ph") == "X"
             and _SERVING_ATTENTION.fullmatch(e.get("name", "")) and "Input Dims" in e.get("args", {})]
    for e in calls:
        a = e["args"]
        c = op_cost(e["name"], _j(a["Input Dims"]), _j(a["Input type"]), _j(a.get("Concrete Inputs", [])))
        if e["name"].startswith("sglang_profiler::mha"):
            continue  # SGLang's wrapper around aiter::mha_batch_prefill (no scalars recorded): the aiter op counts
        assert c is not None, e["name"]
        assert c.kind == "exact" or (c.why and (c.kind == "none" or c.flops <= c.flops_max)), (e["name"], c)
    d = to_dict(analyze(path).check(), "t")
    for b in d["blocks"]:
        e = b["efficiency_by_category"].get("fused_attention", b["efficiency"])
        assert e["flops_kind"] in ("exact", "bounds") or e["flops_reason"], (b["name"], e)
        assert e["flops_kind"] == "exact" or e["flops_reason"], (b["name"], e)
        assert e["roof_pct_max"] is None or e["roof_pct_max"] <= 100, e


@requires_real
@pytest.mark.real
def test_sglang_decode_replay_counts_a_range_cut_at_the_roof() -> None:
    """SGLang's decode replay: 32 sequences, one query each, over a paged cache whose lengths are not recorded --
    a lower bound (one key per query) and an upper bound from the page list, never above 100% of the roof."""
    d = to_dict(analyze(GRAPHS_DIR / "sglang_decode/sglang_Qwen3-8B_decode.json.gz").check(), "t")
    e = d["totals"]["efficiency_by_category"]["fused_attention"]
    assert e["flops_kind"] == "bounds" and "paged KV cache" in e["flops_reason"]
    assert 0 < e["flops_min"] < e["flops_max"] and e["roof_pct"] <= e["roof_pct_max"] <= 100
    assert "cut at 100%" in e["flops_reason"]


GRAPHS_DIR = REAL.parent / "graphs"


def _tracelens_sdpa(b: int, nq: int, hq: int, nkv: int, d: int, causal: bool) -> float:
    """TraceLens' SDPA forward count (TraceLens/PerfModel/perf_model.py, ``SDPA.flops_func``): two products over
    the query heads, halved when causal (only for Nq == Nkv)."""
    f = 2.0 * b * hq * nq * nkv * d * 2
    return f / 2 if causal else f


def _tracelens_varlen(tq: int, hq: int, d: int, n: int, mq: int, causal: bool) -> float:
    """TraceLens' varlen count (``flash_attention_varlen_forward.flops``): one sequence at max_seqlen, the other
    n-1 sharing the rest equally (self-attention: the same split for keys)."""
    f = _tracelens_sdpa(1, mq, hq, mq, d, causal)
    if n > 1:
        rest = (tq - mq) // (n - 1)
        f += (n - 1) * _tracelens_sdpa(1, rest, hq, rest, d, causal)
    return f


@pytest.mark.parametrize("n,lens,causal", [(4, [512] * 4, True), (4, [512] * 4, False), (3, [1024, 700, 700], True),
                                           (2, [2048, 1000], False)])
def test_varlen_agrees_with_tracelens_within_one_percent(n: int, lens: list[int], causal: bool) -> None:
    """Where TraceLens' varlen formula applies (the split is forced) tracekit's exact count agrees within 1% (its
    causal ½ versus the exact L(L+1)/2); where it is not, TraceLens' split is one feasible split, so its value lies
    within tracekit's bounds (again within the ½ convention's 1%)."""
    hq, d, tq, mq = 8, 128, sum(lens), max(lens)
    dims = [[tq, hq, d], [tq, hq, d], [tq, hq, d], [n + 1], [n + 1]] + [[]] * 14
    conc = [""] * 5 + [str(mq), str(mq), "0.0", "0.1", str(causal), "-1", "-1"] + [""] * 7
    c = op_cost("flash_attn::_flash_attn_varlen_forward", _j(dims), _j(["c10::BFloat16"] * 3 + ["int"] * 2
                                                                        + [""] * 14), _j(conc))
    tl = _tracelens_varlen(tq, hq, d, n, mq, causal)
    hi = c.flops_max if c.kind == "bounds" else c.flops
    assert c.flops * 0.99 <= tl <= hi * 1.01
    if len(set(lens)) == 1:
        assert c.kind == "exact" and c.flops == pytest.approx(tl, rel=0.01)


def test_dense_aiter_agrees_with_tracelens() -> None:
    """aiter::mha_fwd (TraceLens: ``aiter__mha_fwd``, the same SDPA count) on a causal square and a full shape."""
    q = [2, 1024, 16, 128]
    for causal in (True, False):
        conc = ["", "", "", "0.0", "0.1", str(causal), "-1", "-1"] + [""] * 5
        c = op_cost("aiter::mha_fwd", _j([q, q, q] + [[]] * 10), _j(["c10::BFloat16"] * 3 + [""] * 10), _j(conc))
        assert c.flops == pytest.approx(_tracelens_sdpa(2, 1024, 16, 1024, 128, causal), rel=0.01)


def test_efficiency_sums_the_ranges_of_its_parts() -> None:
    """Issue 44: summing parts keeps the lower bounds in ``flops`` and adds the ranges' widths and their seconds
    at peak, and the first reason; an exact part adds no width."""
    a = dataclasses.replace(_counted(), bounded=1, flops_span=5e8, compute_span_s=5e-7, bounds_why="varlen: …")
    total = sum_efficiency([a, _counted(), a])
    assert total is not None and total.check() is total
    assert (total.flops, total.flops_span, total.bounded, total.ops) == (3e9, 1e9, 2, 6)
    assert total.compute_span_s == pytest.approx(1e-6) and total.bounds_why == "varlen: …"
    d = efficiency_dict(total)
    assert d["flops_kind"] == "bounds" and d["flops_max"] == 4e9 and d["flops_reason"] == "varlen: …"
    assert efficiency_dict(_counted())["flops_kind"] == "exact"


@requires_h200
def test_flex_attention_states_why_it_has_no_count() -> None:
    """The H200 sparse runs' flex-attention template (triton_tem_fused_flex_attention_0) records q/k/v and the block
    mask's shapes, not its values: its category carries that reason, never a figure; the projections stay counted."""
    res = analyze(next((H200 / "sparse" / "sparse_4096").glob("*.json*"))).check()
    for b in res.blocks:
        fa = b.efficiency_by_category["fused_attention"]
        assert fa.ops == 0 and fa.flops == 0 and "block mask" in (fa.reason or "")
        assert b.efficiency_by_category["projection"].ops > 0
    from tracekit.renderers import TerminalRenderer
    text = " ".join(TerminalRenderer(width=160).render(res).split())
    assert "(fused_attention: no FLOP count: flex attention's block mask" in text


@pytest.mark.slow
@requires_real
@pytest.mark.real
def test_no_real_trace_counts_more_than_its_roof_allows() -> None:
    """Issue 44: on every shared real trace and H200 run, no block (nor any of its categories or roles) does more
    work than the device's roof allows in the measured time -- the uncut share of the roof (Efficiency.roof_pct,
    before the JSON's cut at 100%) stays at or under 100%; a count above it would be a wrong count."""
    from support.paths import real_trace_files

    paths = real_trace_files() + (sorted((H200 / "sweep").glob("*/*.json*")) + sorted((H200 / "sparse").glob(
        "*/*.json*")) if H200.is_dir() else [])
    checked = 0
    for p in paths:
        try:
            res = analyze(p)
        except Exception:  # unreadable samples are other tests' concern
            continue
        for b in res.blocks:
            for e in [b.efficiency, *b.efficiency_by_category.values()]:
                if e is not None and e.roof_pct is not None:
                    checked += 1
                    assert e.roof_pct <= 100.0 + 1e-6, (p.name, b.name, e)
    assert checked > 1000


# -- block efficiency over columns (issue 40), against the plain walk it replaced ------------------------------------
def _plain_block_efficiency(ctx) -> tuple[list, list]:
    """Each block's efficiency as the per-op walk made it: each counted op's key from its longest kernel, the
    groups in first-seen order, and each group's calls summed into its keys one field at a time."""
    from tracekit.analysis.roles import GemmRoles

    tr, links, owner, cats, share = ctx.tr, ctx.links, ctx.dev_owner, ctx.cats, ctx.walk.dev_share
    nblocks, roles = len(ctx.block_results), GemmRoles(tr, ctx.walk.roles)
    units, costs = flops_mod._counted_ops(tr, links, ctx.device_time.members.values())
    groups: dict = {}
    for u, js in units.items():
        durs = [tr.device[j].dur for j in js]
        longest = js[durs.index(max(durs))]
        g = groups.setdefault((owner[longest], cats[longest], roles[u], costs[u]), [0, 0])
        g[0] += 1
        g[1] += sum(share[j] for j in js)
    device = tr.info.gpus[0] if tr.info.gpus else None
    sums, peaks = {}, lookup(device)
    for (b, cat, role, c), (n, ns) in groups.items():
        keys = [(b, None), (b, str(cat))] + ([(b, str(role))] if role else [])
        if c.kind == flops_mod.FLOPS_NONE:
            flops_mod._note_uncounted(sums, keys, c.why)
            continue
        ref = flops_mod._unit_efficiency(c, 0, peaks, device)
        for key in keys:
            e = sums.setdefault(key, Efficiency())
            e.flops, e.bytes, e.time_ns, e.ops = e.flops + n * c.flops, e.bytes + n * c.bytes, e.time_ns + ns, e.ops + n
            e.compute_s = None if e.compute_s is None or ref.compute_s is None else e.compute_s + n * ref.compute_s
            e.memory_s = None if e.memory_s is None or ref.memory_s is None else e.memory_s + n * ref.memory_s
            e.reason = ref.reason if e.reason is None else e.reason
            if ref.dtypes and ref.dtypes[0] not in e.dtypes:
                e.dtypes = tuple(sorted({*e.dtypes, *ref.dtypes}))
            if c.kind == flops_mod.FLOPS_BOUNDS:
                flops_mod._add_range(e, n, c, peaks)
    effs, by_cat = [None] * nblocks, [{} for _ in range(nblocks)]
    for (b, k), e in sums.items():
        if k is None:
            effs[b] = e
        else:
            by_cat[b][k] = e
    empty = NO_FORMULA if units else NO_SHAPES
    return [e if e is not None else Efficiency(ops=0, reason=empty) for e in effs], by_cat


def _assert_efficiency_as_plain(path: Path) -> None:
    ctx = context_after(path, "add-efficiency")
    if not ctx.tr.op_inputs:
        pytest.skip("no recorded shapes: no count to compare")
    got = ([r.efficiency for r in ctx.block_results], [r.efficiency_by_category for r in ctx.block_results])
    assert repr(got) == repr(_plain_block_efficiency(ctx))


@pytest.mark.parametrize("seed", range(40))
def test_block_efficiency_over_columns_is_the_plain_walk(tmp_path, seed):
    _assert_efficiency_as_plain(random_trace(tmp_path, seed, sdpa=seed % 3 == 0))


@requires_real
@pytest.mark.parametrize("rel", REAL_SAMPLES)
def test_block_efficiency_over_columns_is_the_plain_walk_on_real_traces(rel):
    _assert_efficiency_as_plain(REAL / rel)


def test_a_timed_copy_is_the_same_figures_over_another_time():
    """Efficiency.timed sets each field itself (no keyword __init__): every field but the time must come across."""
    values = {"flops": 1.5, "bytes": 2.5, "time_ns": 3, "compute_s": 4.5, "memory_s": 5.5, "ops": 6, "reason": "r",
              "dtypes": ("bf16",), "bounded": 7, "flops_span": 8.5, "compute_span_s": 9.5, "bounds_why": "w"}
    assert set(values) == {f.name for f in dataclasses.fields(Efficiency)}  # (a new field: add it here and there)
    e = Efficiency(**values)
    copy = e.timed(99)
    assert copy == dataclasses.replace(e, time_ns=99) and copy is not e and e.time_ns == 3


def _random_part(rng) -> Efficiency:
    """A part as blocks give them: counted calls with figures (seconds at peak unknown on an unknown device), or
    none with a reason; some counted as ranges."""
    if rng.random() < 0.2:
        return Efficiency(ops=0, reason=rng.choice((None, "no shapes", "no formula")))
    peaks = rng.random() < 0.8
    bounded = rng.choice((0, 0, 1))
    return Efficiency(flops=rng.choice((0.0, rng.uniform(0, 1e12))), bytes=rng.uniform(0, 1e9),
                      time_ns=rng.randint(0, 10**9), compute_s=rng.uniform(0, 1e-3) if peaks else None,
                      memory_s=rng.uniform(0, 1e-3) if peaks else None, ops=rng.randint(1, 5),
                      reason=None if peaks and rng.random() < 0.7 else rng.choice(("unknown device", "no fp8 peak")),
                      dtypes=rng.choice(((), ("bf16",), ("fp32",), ("bf16", "fp32"))), bounded=bounded,
                      flops_span=rng.uniform(0, 1e9) if bounded else 0.0,
                      compute_span_s=rng.uniform(0, 1e-4) if bounded else 0.0,
                      bounds_why=rng.choice((None, "varlen", "paged")) if bounded else None)


@pytest.mark.parametrize("seed", range(30))
def test_summed_efficiency_is_each_part_added_in_turn(seed):
    """sum_efficiency(_maps) keep their sums in locals: the figures must be Efficiency.add's, part by part."""
    import random

    rng = random.Random(seed)
    maps = [{k: _random_part(rng) for k in rng.sample(["matmul", "softmax", "projection", "other"], rng.randint(0, 4))}
            for _ in range(rng.randint(0, 40))]
    want: dict[str, Efficiency] = {}
    for m in maps:
        for k, e in m.items():
            want.setdefault(k, Efficiency()).add(e)
    assert repr(sum_efficiency_maps(maps)) == repr(want)
    parts = [m.get("matmul") for m in maps]
    total = None
    for p in parts:
        if p is not None:
            total = total or Efficiency()
            total.add(p)
    assert repr(sum_efficiency(parts)) == repr(total)


def test_equal_costs_are_one_group_whatever_their_objects():
    """Groups merge ops of equal cost (as equal keys merge): two records that give the same figures are one cost,
    the first met standing for both, however many objects op_cost handed out."""
    a, b, other = OpCost(8.0, 4.0, "bf16", True), OpCost(8.0, 4.0, "bf16", True), OpCost(1.0, 4.0, "bf16", True)
    assert a is not b
    distinct, index = flops_mod._distinct_costs([a, other, b, a, other])
    assert distinct == [a, other] and distinct[0] is a and index == [0, 1, 0, 0, 1]
