"""Survivors the third mutmut run left unexamined (issue 21), each one a behaviour with no test that could fail:
inputs recorded with mismatched or wrong-kind slots, the unlinked-reason rules on their own, and a kernel run
joined by members of two groups. Hand-written inputs; the expected figures are worked out in the comments."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest
from support.builders import TraceBuilder

from tracekit import analyze
from tracekit.analysis.flops import op_cost
from tracekit.analysis.hints import HintTag, _cat_tag, _Inputs
from tracekit.analysis.link import UnlinkedRule, unlinked_reasons
from tracekit.model import OpInputs
from tracekit.vocab import UnlinkedReason

BF = "c10::BFloat16"


def _cost(name, dims, types):
    return op_cost(name, orjson.dumps(dims), orjson.dumps(types), b"[]")


# -- flops._tensor: a slot past the end of either list, or a shape that is not a list, is no tensor -------------

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


# -- hints._Inputs.concrete: only a JSON list is a record of concrete inputs -----------------------------------

def _inputs(concrete: bytes) -> _Inputs:
    rec = OpInputs(dims=orjson.dumps([[[1, 8, 16, 64], [1, 8, 1, 64]], []]), types=orjson.dumps(["TensorList", "Scalar"]),
                   concrete=concrete)
    return _Inputs(SimpleNamespace(op_inputs={0: rec}))


def test_concrete_inputs_that_are_a_list_give_the_cat_axis():
    """The control: cat([past (16 tokens), new (1)], dim=2) of (B, H, S, D) tensors is a KV-cache append."""
    inp = _inputs(orjson.dumps(["", "2"]))
    assert inp.concrete(0) == ["", "2"]
    assert _cat_tag(inp, 0) == HintTag.KV_CAT


def test_concrete_inputs_that_are_not_a_list_are_none():
    """A JSON string "x2" in place of the list: no concrete inputs, so the cat's axis is the default 0 and the cat is
    untagged. Taking the string as the list would read its second character, "2", as the axis: a KV append."""
    inp = _inputs(orjson.dumps("x2"))
    assert inp.concrete(0) is None
    assert _cat_tag(inp, 0) == HintTag.UNTAGGED


# -- link.unlinked_reasons: the rules on their own ----------------------------------------------------------

def test_a_runtime_call_with_id_one_means_launches_were_recorded():
    """An unlinked kernel with correlation 5 where the trace's first runtime call has id 1: not before the first
    launch (1 < 5), not shared, and launches were recorded (an id of 1 is an id), so another process launched it."""
    assert unlinked_reasons([5], [1]) == [UnlinkedReason.OTHER_PROCESS]
    assert unlinked_reasons([5], [0]) == [UnlinkedReason.OTHER]  # no runtime call carries an id


def test_an_event_no_rule_holds_for_is_other():
    """A rule set without the closing "always" rule: an event none of its facts hold for keeps the default."""
    only = (UnlinkedRule("no-correlation-id", UnlinkedReason.NO_CORRELATION, "no-correlation", "no id at all"),)
    assert unlinked_reasons([5, 0], [1], rules=only) == [UnlinkedReason.OTHER, UnlinkedReason.NO_CORRELATION]


# -- scopes._KernelRun: a run keeps the group of the member that opened it ---------------------------------------

def test_a_run_keeps_the_group_that_opened_it(tmp_path: Path) -> None:
    """One graph replay: a KV-cache write (kv-cache-write, before), a FlashInfer decode kernel, then FlashInfer's
    MergeStates (flashinfer, after; classified "other", so it joins as a member, not as an attention kernel).
    One block of the three kernels, and its group is the one that opened the run, not the last member's."""
    b = TraceBuilder()
    b.op("model_runner_forward", 1, 50)
    kernels = [("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>(int)", 3),
               ("BatchDecodeWithPagedKVCacheKernel<128>", 20), ("void flashinfer::MergeStatesKernel<8>(int)", 2)]
    t = 1000.0
    for k, (name, dur) in enumerate(kernels):
        if k == 0:
            b.launch(name, 2, 5, t, dur, launch_name="cudaGraphLaunch", corr=77)
        else:
            b.device_only(name, t, dur, corr=77)
        t += dur + 1
    res = analyze(b.write(tmp_path / "t.json")).check()
    [blk] = res.blocks
    assert blk.kernels == 3 and blk.total_us == pytest.approx(25)
    assert blk.evidence.group == "kv-cache-write"


# -- the real gaps among the third run's survivors (docs/mutation-survivors-run3.md) ---------------------------

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


def test_a_threshold_too_large_to_be_a_number_is_refused():
    """400 digits match the percentage pattern, but float() makes them inf, and "grew by more than inf%" could
    never fail: refused like any other non-percentage. 308 digits are still a (huge, finite) percentage."""
    from tracekit.analysis.gate import parse_percent
    with pytest.raises(ValueError, match="not a percentage"):
        parse_percent("1" * 400)
    assert parse_percent("9" * 308) == float("9" * 308)


def test_an_einsum_has_no_matmul_role_from_its_dims():
    """The equation decides an einsum's operands; even dims shaped like Q·Kᵀ operands give no role from shapes."""
    from tracekit.analysis.roles import _operands
    assert _operands("aten::einsum", [[2, 8, 128, 64], [2, 8, 64, 128]]) is None
    assert _operands("aten::matmul", [[2, 8, 128, 64], [2, 8, 64, 128]]) == ([2, 8, 128, 64], [2, 8, 64, 128])
