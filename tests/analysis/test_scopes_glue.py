"""Block discovery through shape-changing glue and over several softmaxes (issue 38, classes 1 and 2): rule eager-ops
on hand-built plain traces (no stacks, no modules). Each trace's blocks follow from how it is built: a triple whose
dims link through the glue is one block, one whose glue does not explain its dims is none, and a chain of triples
with no layer boundary between is one call."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.builders import HIDDEN_IN, TRIPLE_KERNELS, TraceBuilder, attribute_built, two_triples
from tracekit import whatif
from tracekit.analysis.blocks.discovery import (
    DISCOVERY_RULES, EXTENT_RULES, GAP_FREE, LAYER_ENDS, MAX_EAGER_GAP, SHAPE_GLUE,
)


def _op(b: TraceBuilder, t: list[float], name: str, dims: list | None = None, concrete: list | None = None) -> dict:
    """One top-level op of 1 µs at the running time ``t[0]`` (then advanced), with recorded dims if given."""
    ev = b.op(name, t[0], 1)
    t[0] += 2
    if dims is not None:
        ev["args"]["Input Dims"] = dims
        ev["args"]["Input type"] = ["float" if d else "Scalar" for d in dims]
    if concrete is not None:
        ev["args"]["Concrete Inputs"] = concrete
    return ev


def _trace() -> tuple[TraceBuilder, list[float]]:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 10_000)
    return b, [1.0]


def _sink(b: TraceBuilder, t: list[float], shapes: bool = True, cat_parts=((1, 4, 16, 16), (1, 4, 16, 1)),
          narrow: str | None = "aten::slice", context=(1, 4, 16, 16)) -> None:
    """GPT-OSS attention with a sink: scores [1, 4, 16, 16] cat a sink column to [1, 4, 16, 17], softmax, the sink
    sliced off, then the context product on [1, 4, 16, 16]."""
    def d(x):
        return x if shapes else None
    _op(b, t, "aten::matmul", d([[1, 4, 16, 8], [1, 4, 8, 16]]))
    _op(b, t, "aten::mul", d([[1, 4, 16, 16], []]))
    _op(b, t, "aten::add", d([[1, 4, 16, 16], [1, 1, 16, 16], []]))
    _op(b, t, "aten::expand")
    _op(b, t, "aten::cat", d([[list(p) for p in cat_parts], []]), ["", "-1"])
    _op(b, t, "aten::max")
    _op(b, t, "aten::sub", d([[1, 4, 16, 17], [1, 4, 16, 1], []]))
    _op(b, t, "aten::softmax", d([[1, 4, 16, 17], [], []]))
    if narrow is not None:
        _op(b, t, narrow)
    _op(b, t, "aten::dropout", d([list(context), [], []]))
    _op(b, t, "aten::matmul", d([list(context), [1, 4, 16, 8]]))
    _op(b, t, "aten::transpose")
    _op(b, t, "aten::linear", d([[1, 16, 32], [32, 32], [32]]))  # o_proj and the residual add: the layer ends
    _op(b, t, "aten::add", d([[1, 16, 32], [1, 16, 32], []]))


def test_glue_and_extent_rules_are_named_data_with_reasons() -> None:
    names = [g.name for g in SHAPE_GLUE]
    assert len(set(names)) == len(names) and all(g.why and g.side in ("score", "context") for g in SHAPE_GLUE)
    names = [r.name for r in (*DISCOVERY_RULES, *EXTENT_RULES)]
    assert len(set(names)) == len(names) and all(r.why for r in EXTENT_RULES)


@pytest.mark.parametrize("shapes", [True, False])
def test_an_attention_sink_cat_before_the_softmax_and_sliced_after_is_one_block_per_call(tmp_path: Path,
                                                                                         shapes: bool) -> None:
    """Two calls, each [.., 16, 16] scores cat a sink column → softmax [.., 16, 17] → slice → [.., 16, 16] @ V."""
    b, t = _trace()
    _sink(b, t, shapes)
    _sink(b, t, shapes)
    res = attribute_built(tmp_path, b)
    assert [(x.found_by, x.evidence.rule) for x in res.blocks] == [("inferred", "eager-ops")] * 2
    assert res.blocks[0].evidence.names == ("aten::matmul", "aten::softmax", "aten::matmul")


@pytest.mark.parametrize(("kw", "why"), [
    (dict(cat_parts=((1, 4, 16, 12), (1, 4, 16, 5))), "no cat input is the score's [16, 16]"),
    (dict(cat_parts=((1, 4, 16, 16), (1, 4, 16, 2))), "the cat makes [.., 16, 18], not the softmax's [.., 16, 17]"),
    (dict(narrow=None), "nothing narrows the softmax output to the context's [.., 16, 16]"),
    (dict(context=(1, 4, 16, 18)), "the context's first matrix is wider than the softmax output"),
])
def test_glue_that_does_not_explain_the_dims_leaves_the_shape_test_failing(tmp_path: Path, kw: dict, why: str) -> None:
    b, t = _trace()
    _sink(b, t, **kw)
    assert attribute_built(tmp_path, b).blocks == [], why


def _padded(b: TraceBuilder, t: list[float], pad: bool, softmax=(4, 16, 20)) -> None:
    """bmm scores [4, 16, 16], padded to ``softmax`` (a pad's dims are not kept), softmax, bmm on it."""
    _op(b, t, "aten::bmm", [[4, 16, 8], [4, 8, 16]])
    if pad:
        _op(b, t, "aten::constant_pad_nd")
    _op(b, t, "aten::softmax", [list(softmax), [], []])
    _op(b, t, "aten::bmm", [list(softmax), [4, softmax[-1], 8]])


@pytest.mark.parametrize(("pad", "softmax", "found"), [
    (True, (4, 16, 20), True),  # the pad explains Lk 16 → 20
    (False, (4, 16, 20), False),  # no glue: the shape test rejects it, as before
    (True, (4, 12, 20), False),  # a pad never shrinks Lq
    (True, (1, 4, 16, 20), False),  # nor changes the rank
])
def test_a_pad_between_scores_and_softmax_may_only_grow_them(tmp_path: Path, pad: bool, softmax: tuple,
                                                             found: bool) -> None:
    b, t = _trace()
    _padded(b, t, pad, softmax)
    assert len(attribute_built(tmp_path, b).blocks) == (1 if found else 0)


@pytest.mark.parametrize(("transposed", "found"), [(True, True), (False, False)])
def test_a_narrowed_then_transposed_probability_matrix_is_compared_sorted(tmp_path: Path, transposed: bool,
                                                                          found: bool) -> None:
    """Longformer with a global token: the softmax is [1, 16, 4, 6] (L, H, global + window); its global column,
    narrowed and transposed to [1, 4, 16, 1], goes into a matmul. Without the transpose the dims [1, 4, 16, 1] do
    not fit [1, 16, 4, 6] in place (16 > 4): nothing explains them."""
    b, t = _trace()
    _op(b, t, "aten::einsum", [[], [[1, 16, 4, 16], [1, 1, 4, 16]], []], ["blhd,bshd->blhs", "", ""])
    _op(b, t, "aten::cat", [[[1, 16, 4, 1], [1, 16, 4, 5]], []], ["", "-1"])
    _op(b, t, "aten::softmax", [[1, 16, 4, 6], [], []])
    _op(b, t, "aten::narrow")
    if transposed:
        _op(b, t, "aten::transpose")
    _op(b, t, "aten::matmul", [[1, 4, 16, 1], [1, 4, 1, 16]])
    assert len(attribute_built(tmp_path, b).blocks) == (1 if found else 0)


@pytest.mark.parametrize(("views", "computes", "found"), [
    (80, MAX_EAGER_GAP - 1, True),  # 80 views and 47 computing ops: only the 47 count
    (0, MAX_EAGER_GAP, True),
    (0, MAX_EAGER_GAP + 1, False),  # the gap as before
    (80, MAX_EAGER_GAP + 1, False),
])
def test_layout_glue_does_not_count_against_the_gap(tmp_path: Path, views: int, computes: int, found: bool) -> None:
    """Chunked sliding windows (Longformer) put about 40 views, slices and copies between the score einsum and
    the softmax: they only move the scores, so only computing ops (here aten::mul) count toward MAX_EAGER_GAP."""
    assert GAP_FREE.fullmatch("aten::view") and not GAP_FREE.fullmatch("aten::mul")
    b, t = _trace()
    _op(b, t, "aten::bmm")
    for k in range(max(views, computes)):
        if k < views:
            _op(b, t, "aten::view")
        if k < computes:
            _op(b, t, "aten::mul")
    _op(b, t, "aten::softmax")
    _op(b, t, "aten::bmm")
    assert len(attribute_built(tmp_path, b).blocks) == (1 if found else 0)


def _band(b: TraceBuilder, t: list[float], between: str = "aten::cat") -> None:
    """One band of block-sparse attention: glue, then matmul → mul → add → softmax → matmul."""
    _op(b, t, between)
    for name in ("aten::matmul", "aten::mul", "aten::add", "aten::softmax", "aten::matmul", "aten::unsqueeze_"):
        _op(b, t, name)


@pytest.mark.parametrize(("boundary", "blocks"), [
    ((), 1),  # five bands, nothing but glue and masks between: one call
    (("aten::linear", "aten::add"), 2),  # an output projection and its residual add between the 2nd and 3rd band
    (("aten::layer_norm",), 2),  # a norm likewise
])
def test_a_chain_of_triples_without_a_layer_boundary_is_one_block(tmp_path: Path, boundary: tuple,
                                                                  blocks: int) -> None:
    """BigBird's block-sparse attention runs five score → softmax → context triples per call (first, second,
    middle bands, second last, last); one call is one block. Calls are apart by a layer's end (rule one-chain; a
    projection alone between is rule input-projections')."""
    b, t = _trace()
    for k in range(5):
        for name in boundary if k == 2 else ():
            _op(b, t, name)
        _band(b, t)
    res = attribute_built(tmp_path, b)
    assert len(res.blocks) == blocks
    assert all(x.evidence.rule == "eager-ops" for x in res.blocks)


def test_a_chain_ends_beyond_the_gap(tmp_path: Path) -> None:
    """Two triples with more than MAX_EAGER_GAP computing ops between are two calls, even with no breaker."""
    b, t = _trace()
    _band(b, t)
    for _ in range(MAX_EAGER_GAP + 1):
        _op(b, t, "aten::mul")
    _band(b, t)
    assert len(attribute_built(tmp_path, b).blocks) == 2


# -- class 5: a quantise kernel alone ---------------------------------------------------------------------------

GEMM_K = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
FILL_K = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"


@pytest.mark.parametrize(("between", "fwd", "blocks"), [
    ([FILL_K], "sage_fwd", 1),  # the quantise's block takes its attention kernel: one call, one block
    ([], "sage_fwd", 1),
    ([FILL_K] * 6, "sage_fwd", 2),  # beyond MAX_BETWEEN kernels: another call's
    ([GEMM_K], "sage_fwd", 2),  # a GEMM between: two calls
    ([FILL_K], "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Params)", 2),  # not sage's
])
def test_a_free_attention_kernel_joins_the_block_that_owns_its_quantise(tmp_path: Path, between: list, fwd: str,
                                                                        blocks: int) -> None:
    """SageAttention quantises Q/K in a kernel of its own: here an attention-named range launches it (a block, its
    core the quantise kernel) and the attention kernel is launched outside any block. One call is one block
    (rule owned-lead): the free attention kernel right after the owned quantise joins that block."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    b.annotation("sage_attn_quant", 10, 20)
    b.op("sage::quant", 11, 5)
    b.launch("sage_quant_kernel", 12, 1, 200, 4)
    t, k = 40.0, 205.0
    for name in between:
        b.op("aten::fill_" if name == FILL_K else "aten::mm", t, 3)
        b.launch(name, t + 1, 1, k, 2)
        t, k = t + 5, k + 3
    b.op("sage::fwd", t, 5)
    b.launch(fwd, t + 1, 1, k, 30)
    res = attribute_built(tmp_path, b)
    assert len(res.blocks) == blocks
    first = res.blocks[0]
    assert first.name == "sage_attn_quant"
    if blocks == 1:
        assert first.categories["fused_attention"] == pytest.approx(34) and first.evidence.group == "sage-attention"


def _captured_sage(tmp_path: Path, between: list[str], fwd: str) -> list[dict | None]:
    """A graph capture (no kernel runs): an SDPA op (a fused-op block) records sage_quant_kernel; after it returns,
    launches outside any op record ``between`` and then ``fwd``. Each block's recorded kernels."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    b._x("cuda_runtime", "hipStreamBeginCapture", 1, 1, 100, 1, correlation=0)
    b.op("aten::scaled_dot_product_attention", 5, 10)

    def launch(ts: float, kernel: str) -> None:
        b._corr += 1
        b._x("cuda_runtime", "hipLaunchKernel", ts, 1, 100, 1, correlation=b._corr, kernel=kernel)
    launch(6, "sage_quant_kernel")
    t = 20.0
    for name in between:
        launch(t, name)
        t += 3
    launch(t, fwd)
    b._x("cuda_runtime", "hipStreamEndCapture", t + 10, 1, 100, 1, correlation=0)
    res = attribute_built(tmp_path, b)
    return [x.recorded for x in res.blocks]


@pytest.mark.parametrize(("between", "fwd", "recorded"), [
    ([], "sage_fwd", {"sage_quant_kernel": 1, "sage_fwd": 1}),
    ([FILL_K], "sage_fwd", {"sage_quant_kernel": 1, "sage_fwd": 1}),
    ([GEMM_K], "sage_fwd", {"sage_quant_kernel": 1}),  # a GEMM between: not the same call
    ([FILL_K] * 6, "sage_fwd", {"sage_quant_kernel": 1}),  # too far
    ([], "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Params)", {"sage_quant_kernel": 1}),
])
def test_in_a_capture_the_attention_launch_after_a_blocks_quantise_is_recorded_by_that_block(
        tmp_path: Path, between: list, fwd: str, recorded: dict) -> None:
    """Class 5 in a graph capture: the block that recorded the quantise also records its call's attention kernel,
    launched just after it outside the block's op (rule owned-lead, tracekit.analysis.blocks.kernels.CaptureLead)."""
    assert _captured_sage(tmp_path, between, fwd) == [recorded]


@pytest.mark.parametrize(("between", "first"), [
    ("aten::add", "aten::einsum"),  # the window einsum's scores, then the mask's einsum: one call from the first
    ("aten::linear", "aten::bmm"),  # a projection between: the earlier einsum is another layer's
])
def test_the_block_starts_at_the_first_product_of_its_scores(tmp_path: Path, between: str, first: str) -> None:
    """Longformer computes its window scores with one einsum and its mask's with another before the softmax: the
    nearest product is the score for the shape test, and the block starts at the first one (rule eager-ops)."""
    b, t = _trace()
    _op(b, t, "aten::einsum")
    _op(b, t, between)
    _op(b, t, "aten::bmm")
    _op(b, t, "aten::add")
    _op(b, t, "aten::softmax")
    _op(b, t, "aten::bmm")
    [blk] = attribute_built(tmp_path, b).blocks
    starts = {e["ts"]: e["name"] for e in b.events if e["cat"] == "cpu_op"}
    assert starts[min(s for _, _, s, _ in blk.host_spans)] == first
    assert blk.evidence.names == ("aten::bmm", "aten::softmax", "aten::bmm")


@pytest.mark.parametrize(("after", "last"), [
    # Longformer: the global columns' context by matmul, then the window's by einsum, then the output projection
    ([("aten::narrow", None), ("aten::einsum", None), ("aten::linear", None)], "aten::einsum"),
    # a product with a 2-D operand is a projection written as a matmul: not the context
    ([("aten::einsum", [[], [[1, 16, 64], [64, 64]], []]), ("aten::add", None)], "aten::matmul"),
    # a product a softmax follows (before any breaker) is the next call's score: not this context
    ([("aten::bmm", None), ("aten::add", None), ("aten::softmax", None), ("aten::bmm", None),
      ("aten::linear", None)], "aten::bmm"),
])
def test_the_block_ends_at_the_last_product_of_its_context(tmp_path: Path, after: list, last: str) -> None:
    b, t = _trace()
    _op(b, t, "aten::bmm")
    _op(b, t, "aten::softmax")
    _op(b, t, "aten::matmul")
    for name, dims in after:
        _op(b, t, name, dims)
    [blk] = attribute_built(tmp_path, b).blocks
    ends = {e["ts"] + e["dur"]: e["name"] for e in b.events if e["cat"] == "cpu_op"}
    end = max(e for _, _, _, e in blk.host_spans)
    assert ends[end] == last
    if last == "aten::bmm":  # the chain's second call ends it: the last op of the trace's attention
        assert end == max(e["ts"] + e["dur"] for e in b.events if e["name"] == "aten::bmm")


def test_a_projection_before_the_scores_is_not_the_start(tmp_path: Path) -> None:
    """``x @ W`` (a 2-D weight) before the score product is a projection, recorded shapes say: the block starts
    at the score."""
    b, t = _trace()
    _op(b, t, "aten::matmul", [[1, 16, 64], [64, 64]])
    _op(b, t, "aten::bmm", [[4, 16, 16], [4, 16, 16]])
    _op(b, t, "aten::softmax", [[4, 16, 16], [], []])
    _op(b, t, "aten::bmm", [[4, 16, 16], [4, 16, 16]])
    [blk] = attribute_built(tmp_path, b).blocks
    starts = {e["ts"]: e["name"] for e in b.events if e["cat"] == "cpu_op"}
    assert starts[min(s for _, _, s, _ in blk.host_spans)] == "aten::bmm"


# -- rule input-projections: a second triple over the same layer's input is the same call --------------------------
# Longformer with global tokens, between its windowed triple and its global one: the window context plus the global
# columns' (an add before any projection), the global tokens gathered, query_global on them alone ([1, 1, 64]),
# key_global and value_global on all tokens, the query scaled.
LONGFORMER_GLOBAL = [("aten::add", None), ("aten::new_zeros", None), ("aten::index", None), ("aten::index_put_", None),
                     ("aten::linear", [1, 1, 64]), ("aten::linear", HIDDEN_IN), ("aten::linear", HIDDEN_IN),
                     ("aten::div_", None), ("aten::view", None), ("aten::transpose", None)]
O_PROJ, ADD, NORM = ("aten::linear", [1, 16, 64]), ("aten::add", None), ("aten::layer_norm", None)
QKV = [("aten::linear", HIDDEN_IN)] * 3


def test_layer_ends_are_named_data_with_reasons() -> None:
    names = [p.name for p in LAYER_ENDS]
    assert len(set(names)) == len(names) and all(p.why for p in LAYER_ENDS)
    assert "input-projections" in {r.name for r in EXTENT_RULES}


@pytest.mark.parametrize("shapes", [True, False])
def test_a_second_triple_over_the_layers_own_input_is_the_same_call(tmp_path: Path, shapes: bool) -> None:
    """Longformer's self-attention with a global token, no modules recorded (issue 38): its windowed triple, then
    the global token's own q/k/v projections of the layer's input, then bmm → softmax → bmm. One call, one block
    holding both softmaxes (rule input-projections); the output projection, residual add and norm after it are
    the layer's end."""
    b = TraceBuilder()
    two_triples(b, LONGFORMER_GLOBAL, shapes)
    [blk] = attribute_built(tmp_path, b).blocks
    assert blk.evidence.rule == "eager-ops"
    softmaxes = [e for e in b.events if e["name"] == "aten::softmax"]
    assert all(any(s <= e["ts"] and e["ts"] + e["dur"] <= t for _, _, s, t in blk.host_spans) for e in softmaxes)


@pytest.mark.parametrize(("between", "shapes", "why"), [
    ([O_PROJ, ADD, NORM, *QKV], True, "the next layer's self-attention: output projection, residual add, norm"),
    ([O_PROJ, ADD, NORM, *QKV], False, "the same without shapes"),
    ([O_PROJ, ADD, *QKV], False, "a residual add after a projection, no norm"),
    ([O_PROJ, ("aten::pow", None), ("aten::mean", None), ("aten::rsqrt", None), ("aten::mul", None), *QKV], False,
     "an RMSNorm written out (Llama, T5)"),
    ([("aten::linear", [1, 16, 64]), ("aten::gelu", None), ("aten::linear", [1, 16, 128]), *QKV], False,
     "an MLP"),
    ([("aten::linear", [1, 16, 64]), ("aten::softmax", None), ("aten::topk", None), ("aten::_grouped_mm", None),
      *QKV], False, "a MoE router and its experts"),
    # cross-attention: the decoder's self-attention, its output projection, add and norm, then the cross q/k/v
    ([O_PROJ, ADD, NORM, ("aten::linear", [16, 1, 64]), ("aten::linear", [24, 1, 64]),
      ("aten::linear", [24, 1, 64])], True, "cross-attention over 24 encoder states"),
    ([O_PROJ, ADD, NORM, ("aten::linear", [1, 1, 64])], True, "cross-attention at decode, one token, cached K/V"),
    # the shape test alone: projections of longer states (an encoder's) are another attention's input
    ([("aten::linear", [16, 1, 64]), ("aten::linear", [24, 1, 64]), ("aten::linear", [24, 1, 64])], True,
     "projections of 24 states, more than the layer's 16"),
    ([("aten::linear", [16, 1, 32])], True, "a projection of a narrower input (32 wide, the layer's is 64)"),
])
def test_a_layer_end_between_two_triples_keeps_them_two_calls(tmp_path: Path, between: list, shapes: bool,
                                                              why: str) -> None:
    """Two attention calls stay two blocks when anything that ends a layer lies between them (LAYER_ENDS after a
    projection, a breaker that is no projection), or where shapes were recorded, a projection's input is not like
    the layer's (rule input-projections)."""
    b = TraceBuilder()
    two_triples(b, between, shapes)
    assert len(attribute_built(tmp_path, b).blocks) == 2, why


def test_the_projections_between_are_the_calls_but_not_its_core(tmp_path: Path) -> None:
    """The joined call's block holds the global projections' GEMMs (they run inside the attention call), but its
    eager core, what a fused kernel would replace (whatif's eager_core_us), is the two triples' kernels alone."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])
    two_triples(b, LONGFORMER_GLOBAL, kernels=True)
    [w] = whatif(b.write(tmp_path / "t.json"))
    [row] = w.check().blocks
    k = TRIPLE_KERNELS
    assert row.eager_core_us == pytest.approx(4 * k["aten::bmm"] + 2 * k["aten::softmax"])
    assert row.block_us == pytest.approx(4 * k["aten::bmm"] + 2 * k["aten::softmax"] + 3 * k["aten::linear"])


def test_a_chain_ends_at_the_last_product_of_its_last_context(tmp_path: Path) -> None:
    """A chain's last triple may compute its context in parts (rule last-context): the joined block runs to the
    last part, as a lone triple's does."""
    b, t = _trace()
    _band(b, t)
    _band(b, t)
    _op(b, t, "aten::einsum")
    _op(b, t, "aten::linear")
    [blk] = attribute_built(tmp_path, b).blocks
    ends = {e["ts"] + e["dur"]: e["name"] for e in b.events if e["cat"] == "cpu_op"}
    assert ends[max(e for _, _, _, e in blk.host_spans)] == "aten::einsum"
