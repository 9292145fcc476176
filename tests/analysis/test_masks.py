"""Attention pair counts (tracekit.analysis.masks, tracekit.analysis.serving) against a brute-force reference.

The reference walks every (head, query, key) triple of masked attention and counts the multiply-adds of its two
products (``Dqk`` for the score, ``Dv`` for the context), element by element: nothing from tracekit.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.analysis.flops import op_cost
from tracekit.analysis.masks import Mask, mask_pairs, paged_pairs, varlen_pairs


def _sees(i: int, j: int, lq: int, lk: int, left: int | None, right: int | None, br: bool) -> bool:
    pos = i + (lk - lq if br else 0)
    return (left is None or j >= pos - left) and (right is None or j <= pos + right)


def _brute_seq(lq: int, lk: int, hq: int, dqk: int, dv: int, left, right, br) -> int:
    """Multiply-adds of one sequence's masked attention, counted head by head, element by element."""
    madds = 0
    for _h in range(hq):
        for i in range(lq):
            for j in range(lk):
                if _sees(i, j, lq, lk, left, right, br):
                    madds += dqk + dv  # one score element (Dqk terms) and its share of the context (Dv terms)
    return madds


def _brute_pairs(lq, lk, left, right, br) -> int:
    return _brute_seq(lq, lk, 1, 1, 0, left, right, br)


_side = st.one_of(st.none(), st.integers(0, 9))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), _side, _side, st.booleans())
def test_mask_pairs_equal_the_brute_force_count(lq, lk, left, right, br):
    assert mask_pairs(lq, lk, Mask(left, right, br)) == _brute_pairs(lq, lk, left, right, br)


def _splits(total: int, batch: int, longest: int, rnd: random.Random) -> list[int]:
    """A random split of ``total`` into ``batch`` lengths in [1, longest]."""
    lens = [1] * batch
    for _ in range(total - batch):
        lens[rnd.choice([k for k in range(batch) if lens[k] < longest])] += 1
    return lens


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 5), st.integers(1, 9), _side, st.booleans(), st.integers(0, 10**6))
def test_varlen_bounds_hold_every_split(batch, longest, left, causal, seed):
    rnd = random.Random(seed)
    total = rnd.randint(batch, batch * longest)
    mask = Mask(left, 0 if causal else None, True)
    got = varlen_pairs(batch, total, longest, mask)
    assert got is not None
    values = set()
    for _ in range(6):
        lens = _splits(total, batch, longest, rnd)
        v = sum(_brute_pairs(n, n, left, mask.right, True) for n in lens)
        values.add(v)
        assert got.lo <= v <= got.hi
    if total in (batch, batch * longest):  # the split is forced: an exact count
        assert got.lo == got.hi == values.pop() and got.why is None


def test_varlen_bounds_are_attained():
    """The bounds are the most even and the most uneven splits' own counts, not something looser."""
    mask = Mask(None, 0, True)
    got = varlen_pairs(3, 10, 6, mask)  # even split 4,3,3; uneven 6,3,1
    assert got.lo == sum(_brute_pairs(n, n, None, 0, True) for n in (4, 3, 3))
    assert got.hi == sum(_brute_pairs(n, n, None, 0, True) for n in (6, 3, 1))
    assert varlen_pairs(3, 19, 6, mask) is None  # more tokens than 3 sequences of at most 6 hold


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), _side, st.integers(0, 10**6))
def test_paged_decode_bounds_hold(batch, longest_k, left, seed):
    rnd = random.Random(seed)
    mask = Mask(left, 0, True)
    got = paged_pairs(batch, batch, 1, longest_k, mask)
    for _ in range(5):
        ctx = [rnd.randint(1, longest_k) for _ in range(batch)]
        v = sum(_brute_pairs(1, c, left, 0, True) for c in ctx)
        assert got.lo <= v <= got.hi


def test_paged_prefill_exact_when_every_length_is_forced():
    got = paged_pairs(3, 3 * 5, 5, 5, Mask(None, 0, True))
    assert got.lo == got.hi == 3 * _brute_pairs(5, 5, None, 0, True)


def _j(x) -> bytes:
    return json.dumps(x).encode()


BF = "c10::BFloat16"


def test_flash_varlen_gqa_window_exact_against_brute_force():
    """flash_attn::_flash_attn_varlen_forward, 2 sequences of 6 (T = B·max), 4 query heads over 2 KV heads, causal
    with a 2-token left window: FLOPs = 2 × the brute-force multiply-adds; bytes read K/V at the KV heads."""
    hq, hk, d, n, length = 4, 2, 8, 2, 6
    dims = [[n * length, hq, d], [n * length, hk, d], [n * length, hk, d], [n + 1], [n + 1]] + [[]] * 14
    types = [BF] * 3 + ["int", "int"] + ["Scalar"] * 14
    conc = [""] * 5 + [str(length), str(length), "0.0", "0.1", "True", "2", "-1"] + [""] * 7
    c = op_cost("flash_attn::_flash_attn_varlen_forward", _j(dims), _j(types), _j(conc))
    brute = n * _brute_seq(length, length, hq, d, d, 2, 0, True)
    assert c.kind == "exact" and c.flops == 2 * brute
    assert c.bytes == 2 * (n * length * hq * 2 * d + n * length * hk * 2 * d)


def test_flash_varlen_uneven_gives_bounds_that_hold():
    dims = [[10, 2, 4], [10, 2, 4], [10, 2, 4], [4], [4]] + [[]] * 14
    conc = [""] * 5 + ["6", "6", "0.0", "0.1", "True", "-1", "-1"] + [""] * 7
    c = op_cost("flash_attn::_flash_attn_varlen_forward", _j(dims), _j([BF] * 3 + ["int"] * 2 + [""] * 14), _j(conc))
    assert c.kind == "bounds" and "varlen" in c.why
    for lens in ([6, 3, 1], [4, 3, 3], [5, 4, 1], [2, 2, 6]):
        v = 2 * sum(_brute_seq(n, n, 2, 4, 4, None, 0, True) for n in lens)
        assert c.flops <= v <= c.flops_max


def test_aiter_spellings():
    """aiter's dense, varlen-backward and batch-prefill schemas: causal, window and max_seqlen at their slots."""
    q = [2, 8, 4, 16]  # [B, L, H, D]
    conc = ["", "", "", "0.0", "0.1", "True", "3", "0"] + [""] * 5
    c = op_cost("aiter::mha_fwd", _j([q, q, q] + [[]] * 10), _j([BF] * 3 + [""] * 10), _j(conc))
    assert c.flops == 2 * 2 * _brute_seq(8, 8, 4, 16, 16, 3, 0, True)
    t = [[12, 4, 16]] * 6 + [[3], [3]] + [[]] * 20  # 2 sequences of 6 tokens
    conc = [""] * 8 + ["6", "6", "0.0", "0.1", "False", "True", "-1", "-1"] + [""] * 12
    bwd = op_cost("aiter::fmha_v3_varlen_bwd", _j(t), _j([BF] * 6 + ["int"] * 2 + [""] * 20), _j(conc))
    assert bwd.flops == 2.5 * 2 * 2 * _brute_seq(6, 6, 4, 16, 16, None, 0, True)
    pre = [[12, 4, 16], [500, 2, 16], [500, 2, 16], [3], [3], [13]] + [[]] * 24
    conc = [""] * 6 + ["6", "6", "0.", "0.1", "0.", "False", "True", "-1", "-1", "0"] + [""] * 14
    c = op_cost("aiter::mha_batch_prefill", _j(pre), _j([BF] * 3 + ["int"] * 3 + [""] * 24), _j(conc))
    assert c.kind == "exact" and c.flops == 2 * 2 * _brute_seq(6, 6, 4, 16, 16, None, 0, True)


def test_decode_and_vllm_spellings():
    d = [[4, 8, 16], [1 << 20], [4, 8, 16], [100, 1, 2, 16], [100, 1, 2, 16], [5], [40], [4], [], [1], [1], []]
    t = [BF, "unsigned char", BF, BF, BF, "int", "int", "int", "", "float", "float", ""]
    c = op_cost("sglang_profiler::attention_paged_attention_ragged_7", _j(d), _j(t), _j([""] * 12))
    assert c.kind == "bounds" and c.flops == 2 * 4 * 8 * 32  # each of 4 queries sees at least one key
    assert c.flops_max == 2 * 8 * 32 * 40  # at most the 40 page slots listed, page size 1
    v = op_cost("vllm::unified_attention_with_output", _j([[9, 8, 64], [9, 2, 64], [9, 2, 64], [9, 8, 64]]),
                _j([BF] * 4), _j([""] * 4))
    assert v.kind == "none" and "vllm" in v.why and v.flops == 0


def test_window_on_dense_flash_and_aten_varlen():
    q = [1, 8, 2, 4]
    conc = ["", "", "", "0.0", "0.1", "True", "2", "0"] + [""] * 3
    c = op_cost("flash_attn::_flash_attn_forward", _j([q, q, q] + [[]] * 8), _j([BF] * 3 + [""] * 8), _j(conc))
    assert c.flops == 2 * _brute_seq(8, 8, 2, 4, 4, 2, 0, True)
    nowin = ["", "", "", "0.0", "0.1", "True", "-1", "-1"] + [""] * 3
    full = op_cost("flash_attn::_flash_attn_forward", _j([q, q, q] + [[]] * 8), _j([BF] * 3 + [""] * 8), _j(nowin))
    assert full.flops == 2 * 2 * 8 * 8 * 8 / 2  # no window: the ½ causal convention, unchanged
    t = [[12, 2, 4]] * 3 + [[3], [3]] + [[]] * 10
    conc = [""] * 5 + ["6", "6", "0.0", "True", "False", "", "4", "0"] + [""] * 2
    a = op_cost("aten::_flash_attention_forward", _j(t), _j([BF] * 3 + ["int"] * 2 + [""] * 10), _j(conc))
    assert a.flops == 2 * 2 * _brute_seq(6, 6, 2, 4, 4, 4, 0, False)


# --- through the whole analysis: a hand-built trace per kind of count, its JSON efficiency fields

from support.builders import serving_attention_trace  # noqa: E402
from tracekit import analyze  # noqa: E402
from tracekit.hardware import lookup  # noqa: E402
from tracekit.renderers.jsonrenderer import to_dict  # noqa: E402

_VARLEN_DIMS = [[10, 2, 64], [10, 2, 64], [10, 2, 64], [4], [4]] + [[]] * 14
_VARLEN_TYPES = [BF] * 3 + ["int"] * 2 + [""] * 14
_VARLEN_CONC = [""] * 5 + ["6", "6", "0.0", "0.1", "True", "-1", "-1"] + [""] * 7


def _block_eff(tmp_path, op, dims, types, conc, kernel_us):
    res = analyze(serving_attention_trace(tmp_path / "t.json", op, dims, types, conc, kernel_us)).check()
    [b] = to_dict(res, "t")["blocks"]
    return b["efficiency"]


def test_bounds_reach_the_json_as_a_range(tmp_path):
    """3 causal sequences of 10 tokens, none over 6: FLOPs between the even (4,3,3) and the uneven (6,3,1) split's
    brute-force counts; the rate and the share of the roof as a range."""
    e = _block_eff(tmp_path, "flash_attn::_flash_attn_varlen_forward", _VARLEN_DIMS, _VARLEN_TYPES, _VARLEN_CONC,
                   100.0)
    lo = 2 * sum(_brute_seq(n, n, 2, 64, 64, None, 0, True) for n in (4, 3, 3))
    hi = 2 * sum(_brute_seq(n, n, 2, 64, 64, None, 0, True) for n in (6, 3, 1))
    assert e["flops_kind"] == "bounds" and e["flops"] == e["flops_min"] == lo and e["flops_max"] == hi
    assert "varlen" in e["flops_reason"]
    assert e["tflops_per_s_max"] == round(hi / 100e-6 / 1e12, 3)
    peak = lookup("NVIDIA H100 80GB HBM3").bf16 * 1e12
    nbytes = 2 * (10 * 2 * 128 + 10 * 2 * 128)
    roof = 100 * max(hi / peak, nbytes / (lookup("NVIDIA H100 80GB HBM3").mem_gb_per_s * 1e9)) / 100e-6
    assert e["roof_pct_max"] == round(roof, 2) and e["roof_pct"] <= e["roof_pct_max"] <= 100


def test_an_upper_bound_past_the_roof_is_cut_and_said(tmp_path):
    """A decode over a paged cache of a million slots in a 1 µs kernel: the page list's upper bound would be far
    above the roof -- never printed above 100%, and the reason says it was cut."""
    dims = [[4, 8, 128], [1], [4, 8, 128], [1 << 20, 1, 8, 128], [1 << 20, 1, 8, 128], [5], [1 << 20], [4], [],
            [1], [1], []]
    types = [BF, "unsigned char", BF, BF, BF, "int", "int", "int", "", "float", "float", ""]
    e = _block_eff(tmp_path, "sglang_profiler::attention_paged_attention_ragged_3", dims, types, [""] * 12, 1.0)
    assert e["flops_kind"] == "bounds" and e["roof_pct_max"] == 100.0 and "cut at 100%" in e["flops_reason"]
    peak = lookup("NVIDIA H100 80GB HBM3").bf16 * 1e12
    assert e["flops_max"] == pytest.approx(peak * 1e-6) and e["flops_min"] == 2 * 4 * 8 * 256


def test_no_count_states_its_reason(tmp_path):
    dims = [[9, 8, 64], [9, 2, 64], [9, 2, 64], [9, 8, 64]]
    e = _block_eff(tmp_path, "vllm::unified_attention_with_output", dims, [BF] * 4, [""] * 4, 10.0)
    assert e["flops_kind"] == "none" and e["flops"] is None and "vllm::unified_attention" in e["flops_reason"]
    assert e["reason"] == e["flops_reason"]


def test_exact_counts_keep_their_figures(tmp_path):
    dims = [[12, 2, 64], [12, 2, 64], [12, 2, 64], [3], [3]] + [[]] * 14
    conc = [""] * 5 + ["6", "6", "0.0", "0.1", "True", "-1", "-1"] + [""] * 7
    e = _block_eff(tmp_path, "flash_attn::_flash_attn_varlen_forward", dims, _VARLEN_TYPES, conc, 100.0)
    assert e["flops_kind"] == "exact" and e["flops"] == e["flops_min"] == e["flops_max"]
    assert e["tflops_per_s_max"] == e["tflops_per_s"] and e["roof_pct_max"] == e["roof_pct"]
    assert e["flops_reason"] is None


def test_an_exact_count_past_the_roof_is_cut_and_said(tmp_path):
    """An exact count (2 sequences of 6) in a kernel far too short for it (1 ns): the share of the roof is never
    printed above 100%; the reason says the count, the peak or the time cannot be right."""
    dims = [[12, 2, 64], [12, 2, 64], [12, 2, 64], [3], [3]] + [[]] * 14
    conc = [""] * 5 + ["6", "6", "0.0", "0.1", "True", "-1", "-1"] + [""] * 7
    e = _block_eff(tmp_path, "flash_attn::_flash_attn_varlen_forward", dims, _VARLEN_TYPES, conc, 0.001)
    assert e["flops_kind"] == "exact" and e["roof_pct"] == e["roof_pct_max"] == 100.0
    assert "count would exceed the roof" in e["flops_reason"]


def test_aiter_paged_decode_and_flex_spellings():
    """aiter::paged_attention_ragged's own schema (kv_indptr at 6, the page list at 7; key_cache [pages, page, H,
    D]): one query per sequence, at least one key each, at most the page list's slots × the page size; inductor's
    flex-attention template: no count, its block mask's values are not recorded."""
    d = [[3, 8, 16], [1 << 20], [3, 8, 16], [50, 4, 2, 16], [50, 4, 2, 16], [], [4], [10], [3]] + [[]] * 11
    t = [BF, "unsigned char", BF, BF, BF, "", "int", "int", "int"] + [""] * 11
    c = op_cost("aiter::paged_attention_ragged", _j(d), _j(t), _j([""] * 20))
    assert c.kind == "bounds" and c.flops == 2 * 3 * 8 * 32 and c.flops_max == 2 * 8 * 32 * 10 * 4
    q = [4, 16, 256, 64]
    f = op_cost("triton_tem_fused_flex_attention_0", _j([q, q, q, [4, 16, 256], [4, 16, 256], [1, 1, 2]]),
                _j([BF] * 3 + ["float"] * 2 + ["int"]), _j([""] * 6))
    assert f.kind == "none" and "block mask" in f.why


_FI = "flashinfer::batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_64"


def test_flashinfer_spellings():
    """FlashInfer's JIT ops (flashinfer/prefill.py's registrations): single prefill (q, k, v; mask_mode 6, layout 7,
    window_left 8), ragged (q 3, indptrs 6/7, mask_mode 10, window_left 12; no max_seqlen: the longest a split
    allows), paged (page list 8, layout 13: HND caches [pages, H, page, D]); mask_mode 2 (custom): no count."""
    single = "flashinfer::single_prefill_with_kv_cache_dtype_q_bf16_head_dim_64_run"
    conc = [""] * 6 + ["1", "1", "3"] + [""] * 9
    c = op_cost(single, _j([[5, 4, 64], [2, 7, 64], [2, 7, 64]] + [[]] * 15), _j([BF] * 3 + [""] * 15), _j(conc))
    assert c.kind == "exact" and c.flops == 2 * _brute_seq(5, 7, 4, 64, 64, 3, 0, True)  # HND: k [Hk=2, Lk=7, D]
    t = [[1], [1], [], [10, 4, 64], [10, 2, 64], [10, 2, 64], [4], [4]] + [[]] * 20
    conc = [""] * 10 + ["1", "0", "-1"] + [""] * 15
    r = op_cost(_FI + "_ragged_run", _j(t), _j(["uint8"] * 2 + [""] + [BF] * 3 + ["int"] * 2 + [""] * 20), _j(conc))
    assert r.kind == "bounds"
    for lens in ([8, 1, 1], [4, 3, 3], [2, 3, 5]):  # 3 sequences of 10 tokens: any split
        assert r.flops <= 2 * sum(_brute_seq(n, n, 4, 64, 64, None, 0, True) for n in lens) <= r.flops_max
    hnd = [[1], [1], [], [10, 4, 64], [2, 10, 64], [2, 10, 64], [4], [4]] + [[]] * 20  # HND: k, v [Hk, Tk, D]
    conc[11] = "1"
    assert op_cost(_FI + "_ragged_run", _j(hnd), _j([BF] * 28), _j(conc))[:2] == r[:2]
    conc[10] = "2"
    assert op_cost(_FI + "_ragged_run", _j(t), _j([BF] * 28), _j(conc)).kind == "none"
    p = [[1], [1], [], [6, 4, 64], [30, 2, 16, 64], [30, 2, 16, 64], [3], [3], [7], [2]] + [[]] * 30
    conc = [""] * 12 + ["1", "1", "-1"] + [""] * 25
    g = op_cost(_FI + "_paged_run", _j(p), _j([BF] * 40), _j(conc))
    # 2 sequences, 6 query tokens (the longest at most 5), 7 pages of 16 (HND: page size is dim 2) in all
    assert g.kind == "bounds" and g.flops == 2 * 6 * 4 * 128 and g.flops_max == 5 * 7 * 16 * 2 * 4 * 128


def test_serving_backward_factor_is_the_fused_ops_one():
    from tracekit.analysis import flops, serving

    assert serving.BWD_FACTOR == flops._BWD_FACTOR


# --- through the loader: the scalars an op's count reads are kept when the trace is built

def test_flashinfer_ragged_run_counts_through_the_loader(tmp_path):
    """FlashInfer's ragged prefill (2 causal sequences of 6, 4 query heads over 2 KV heads, head dim 16): its
    mask_mode, layout and window_left are Concrete Inputs; the loader must keep them, or the call is uncounted.
    FlashInfer records no max_seqlen, so the count is a range that must hold the brute-force count."""
    dims = [[1], [1], [1], [12, 4, 16], [12, 2, 16], [12, 2, 16], [3], [3], [], [], [], [], [], []]
    types = [""] * 3 + [BF] * 3 + ["int"] * 2 + [""] * 6
    conc = [""] * 10 + ["1", "0", "-1"] + [""]
    e = _block_eff(tmp_path, "flashinfer::batch_prefill_with_kv_cache_dtype_q_bf16_ragged_run", dims, types, conc,
                   100.0)
    brute = 2 * 2 * _brute_seq(6, 6, 4, 16, 16, None, 0, True)
    assert e["flops_kind"] == "bounds" and e["flops_min"] <= brute <= e["flops_max"]


def _vllm_fa2_trace(tmp_path, conc: list) -> dict:
    """vLLM's FlashAttention backend: vllm::unified_attention_with_output (no lengths recorded) around
    _vllm_fa2_C::varlen_fwd (vllm-project/flash-attention's varlen_fwd schema), which launches the kernel: 2
    sequences, 12 query tokens of 4 heads (head dim 16) over a paged cache of 100 pages of 16 slots, 2 KV heads,
    a block table of 4 pages per sequence."""
    from support.builders import LAYER_FLASH_K, TraceBuilder, with_dims

    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    b.annotation("layer0.attention", 0, 200)
    with_dims(b.op("vllm::unified_attention_with_output", 10, 40), [[12, 4, 16], [12, 2, 16], [12, 2, 16],
                                                                     [12, 4, 16]], [BF] * 4)
    cache = [100, 16, 2, 16]
    dims = [[12, 4, 16], cache, cache, [12, 4, 16], [3], [3], [2], [], [2, 4], []] + [[]] * 11
    ev = with_dims(b.op("_vllm_fa2_C::varlen_fwd", 12, 30), dims, [BF] * 4 + ["int"] * 3 + [""] + ["int"] + [""] * 12)
    ev["args"]["Concrete Inputs"] = conc
    b.launch(LAYER_FLASH_K, 13, 1, 1000, 100.0)
    res = analyze(b.write(tmp_path / "v.json")).check()
    [blk] = to_dict(res, "v")["blocks"]
    return blk["efficiency"]


_FA2_CONC = [""] * 10 + ["6", "40", "0.0", "0.25", "False", "True", "-1", "-1", "0.0", "False", "0"]


def test_vllm_flash_attention_backend_is_counted_at_its_inner_op(tmp_path):
    """The queries are forced (2 × 6 = 12, max_seqlen_q 6); each sequence's keys are 6 to 40 (max_seqlen_k, the
    block table's 4 × 16 = 64 slots): bounds holding both extremes' brute-force counts, bottom-right causal."""
    e = _vllm_fa2_trace(tmp_path, _FA2_CONC)
    assert e["flops_kind"] == "bounds", e
    for lk in (6, 40):
        brute = 2 * 2 * _brute_seq(6, lk, 4, 16, 16, None, 0, True)
        assert e["flops_min"] <= brute <= e["flops_max"]


def test_vllm_flash_attention_of_another_schema_is_not_misread(tmp_path):
    """A release whose arguments sit elsewhere (here: is_causal's slot holds a float) gives no count from the inner
    op, never a wrong one: the block keeps unified_attention's stated reason."""
    shifted = [""] * 10 + ["6", "40", "0.0", "0.25", "False", "0.5", "True", "-1", "-1", "False", "0"]
    e = _vllm_fa2_trace(tmp_path, shifted)
    assert e["flops_kind"] == "none" and "vllm::unified_attention" in e["flops_reason"]


def test_vllm_fa3_fwd_spelling_against_brute_force():
    """_vllm_fa3_C::fwd (hopper/flash_api_torch_lib.cpp): 2 sequences of 6 packed queries, causal with a 2-token
    left window, over a paged cache whose keys are forced to 6 (max_seqlen_k 6): exact, bottom-right aligned."""
    cache = [100, 16, 2, 16]
    dims = [[12, 4, 16], cache, cache, [], [], [], [12, 4, 16], [3], [], [], [], [2], [], [], [2, 4]] + [[]] * 23
    types = [BF] * 3 + [""] * 3 + [BF, "int", "", "", "", "int", "", "", "int"] + [""] * 23
    conc = [""] * 12 + ["6", "6"] + [""] * 10 + ["0.0883883461356163", "True", "2", "0", "0.0", "False"] + [""] * 8
    c = op_cost("_vllm_fa3_C::fwd", _j(dims), _j(types), _j(conc))
    assert c.kind == "exact" and c.flops == 2 * 2 * _brute_seq(6, 6, 4, 16, 16, 2, 0, True)
    conc[25] = "0.5"  # another release's slot: not a bool, so no count
    assert op_cost("_vllm_fa3_C::fwd", _j(dims), _j(types), _j(conc)) is None
