"""Survivors of the third mutmut run in tracekit.analysis.hints (issue 21), on traces built by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.builders import TraceBuilder

from tracekit import analyze

# An elementwise copy kernel (the layout copy a clone launches) and a bf16 GEMM kernel.
COPY = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
        "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const>(int)")
GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
FIVE_D = [1, 2, 4, 100, 64]  # (B, H_kv, n_rep = 4, S, D): repeat_kv's expand before the reshape


def _repeat_kv_trace(tmp_path: Path, wrapper: str | None) -> list:
    """test_hints' repeat_kv trace (reshape → clone of a 5-D expand → copy_, one 20 µs copy kernel), with the
    reshape optionally inside ``wrapper``: the gqa-repeat-kv hints it fires."""
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 200)
    b.op("aten::bmm", 0.2, 0.5)
    if wrapper is not None:
        b.op(wrapper, 0.8, 33)
    b.op("aten::reshape", 1, 30)
    b.op("aten::clone", 2, 28)["args"].update({"Input Dims": [FIVE_D, []], "Input type": ["c10::BFloat16", "Scalar"]})
    b.op("aten::copy_", 3, 20)["args"].update({"Input Dims": [FIVE_D, FIVE_D, []]})
    b.launch(COPY, 4, 1, 1000, 20)
    b.op("aten::_softmax", 36, 2)
    b.op("aten::mm", 40, 8)
    b.launch(GEMM, 41, 1, 1020, 20)
    a = analyze(b.write(tmp_path / "t.json")).check()
    return [h for h in a.hints if h.rule == "gqa-repeat-kv"]


def test_repeat_kv_fires_outside_any_product(tmp_path):
    """The control: the bare reshape → clone → copy_ fires (one hint, the 20 µs copy)."""
    (h,) = _repeat_kv_trace(tmp_path, None)
    assert h.saving_us == pytest.approx(20)


@pytest.mark.parametrize("wrapper", ["aten::matmul",  # a GEMM op: a chunked product reshapes its own operands
                                     "aten::_scaled_dot_product_efficient_attention"])  # a fused attention op
def test_repeat_kv_is_silent_when_the_reshape_is_inside_a_product(tmp_path, wrapper):
    """The same copies with the reshape's parent a GEMM or an attention op: that op reshaping its own operands,
    not HF's repeat_kv, so no hint (hints._is_matmul_op: a GEMM *or* a fused attention op)."""
    assert _repeat_kv_trace(tmp_path, wrapper) == []


# -- hints._cat_tag on recorded inputs (a stub for _Inputs: the cat's dims and concrete inputs) ------------------

class _Stub:
    def __init__(self, dims, conc):
        self._d, self._c = dims, conc

    def dims(self, i):
        return self._d

    def concrete(self, i):
        return self._c


PAST, NEW = [1, 2, 10, 64], [1, 2, 1, 64]  # (B, H, S, D): 10 cached tokens, 1 new


@pytest.mark.parametrize("dims,conc,want", [
    ([[PAST, NEW]], ["", "2"], "kv-cat"),  # along S: a cache append (past 10 >= new 1 > 0)
    ([[PAST, NEW]], ["", "-2"], "kv-cat"),  # -2 % 4 = 2: the same axis
    ([[PAST, PAST]], ["", "2"], "kv-cat"),  # equal lengths along S: still an append (>=), not halves
    ([[NEW, PAST]], ["", "2"], ""),  # the first part shorter than the second: no growing cache
    ([[PAST, [1, 2, 0, 64]]], ["", "2"], ""),  # nothing new (S = 0)
    ([[PAST, NEW]], ["", "0"], ""),  # along the batch axis
    ([[PAST, NEW]], ["", "3"], ""),  # along D with unequal parts
    ([[[1, 2, 10, 32], [1, 2, 10, 32]]], ["", "-1"], "halves-cat"),  # two equal halves along D: rotate_half
    ([[PAST, NEW, NEW]], ["", "2"], ""),  # three parts: not [past, new]
    ([[PAST, [1, 2, 64]]], ["", "2"], ""),  # a 3-D part
    ([[PAST, None]], ["", "2"], ""),  # a part that is not a shape
    ([[None, NEW]], ["", "2"], ""),
    ([{"a": 1, "b": 2}], ["", "2"], ""),  # the tensor list recorded as an object
    ([[PAST, NEW]], ["x"], ""),  # no dim argument recorded: the default, axis 0
])
def test_cat_tag(dims, conc, want):
    from tracekit.analysis.hints import _cat_tag

    assert _cat_tag(_Stub(dims, conc), 0) == want  # HintTag values; UNTAGGED is ""
