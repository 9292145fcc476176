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
import gzip
import json
import re
from bisect import bisect_right
from pathlib import Path

import pytest

from support.paths import REAL, ROOT, requires_real
from tracekit.analysis import attribute as attribute_mod
from tracekit.analysis import flops as flops_mod
from tracekit.run.api import analyze
from tracekit.results.invariants import InvariantError
from tracekit.results.efficiency import (HOST_ONLY, NO_SHAPES, DeviceInfo, Efficiency, efficiency_dict, merge_device,
                                         sum_efficiency, sum_efficiency_maps)
from tracekit.analysis.flops import VECTOR_RULES, OpCost, device_info, op_cost, vector_rule
from tracekit.hardware import PEAKS, lookup, normalise
from tracekit.analysis.link import NONE
from tracekit.renderers.jsonrenderer import to_dict

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
    doc = json.loads(gzip.decompress((REAL / rel).read_bytes()))
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
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
        if name in ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm") and inside(e, ("aten::linear", "aten::matmul")):
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
    assert op_cost("aten::matmul", _j([[2, 5, 128, 64], [64, 32]]), bf, b"[]").flops == 10 * 2 * 128 * 64 * 32  # type: ignore[union-attr]
    ein = op_cost("aten::einsum", _j([[], [[2, 8, 16], [2, 16, 4]]]), _j(["", "c10::BFloat16"]), _j(["bij,bjk->bik", ""]))
    assert ein is not None and ein.flops == 2 * 2 * 8 * 16 * 4
    assert op_cost("aten::mm", _j([[128, 64], [65, 32]]), bf, b"[]") is None  # inconsistent shapes: no count
    assert op_cost("aten::mm", b"[[", bf, b"[]") is None


def test_vector_ops_bytes() -> None:
    c = op_cost("aten::masked_fill_", _j([[4, 16, 512, 512], [512, 512], []]), _j(["c10::BFloat16", "bool", "Scalar"]),
                _j(["", "", "-inf"]))
    n = 4 * 16 * 512 * 512
    assert c is not None and c.bytes == n * 2 + 512 * 512 + n * 2 and c.flops == n and not c.matrix
    cp = op_cost("aten::copy_", _j([[4, 16, 512, 512], [4, 16, 512, 512], []]), _j(["c10::BFloat16", "float", "Scalar"]),
                 _j(["", "", "False"]))
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
