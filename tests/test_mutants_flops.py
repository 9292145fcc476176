"""tracekit.analysis.flops.op_cost on hand-written recorded inputs: every field of the count (FLOPs, bytes, dtype
class, matrix or vector), counted by hand from the conventions in the module's docstring (docs/attribution.md,
"Efficiency"), for einsum, attention's causal argument and backward, and the vector rules."""

from __future__ import annotations

import orjson
import pytest

from tracekit.analysis.flops import OpCost, op_cost


def _j(x) -> bytes:
    return orjson.dumps(x)


def cost(name, dims, types, concrete=()):
    return op_cost(name, _j(dims), _j(types), _j(list(concrete)))


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

Q = [1, 128, 8, 64]  # [B, L, H, d] (flash/efficient forward layout)
H = "c10::Half"


def test_causal_argument_missing_means_not_causal():
    # 2·B·H·L·L·(d + d) = 2·8·128·128·128 FLOPs, full (not causal), with too short a Concrete Inputs list.
    full = 2.0 * 8 * 128 * 128 * 128
    for concrete in ([], [""] * 9):  # the is_causal slot is position 9: absent, then just past the end
        c = cost("aten::_efficient_attention_forward", [Q, Q, Q], [H] * 3, concrete)
        assert c is not None and c.flops == full, concrete
    c = cost("aten::_flash_attention_forward", [Q, Q, Q], [H] * 3, [""] * 8)
    assert c is not None and c.flops == full


def test_custom_mask_type_empty_or_zero_is_not_causal():
    full = 2.0 * 8 * 128 * 128 * 128
    for v in ("", " ", "0"):
        c = cost("aten::_efficient_attention_forward", [Q, Q, Q], [H] * 3, [""] * 9 + [v])
        assert c.flops == full, v
    c = cost("aten::_efficient_attention_forward", [Q, Q, Q], [H] * 3, [""] * 9 + ["1"])
    assert c.flops == full / 2


def test_backward_moves_twice_the_forward_bytes():
    # Forward: Q, K, V read and O written: 4 · 128·8·64 elements of 2 bytes. Backward: twice that, 2.5× the FLOPs.
    fwd = cost("aten::_flash_attention_forward", [Q, Q, Q], [H] * 3, [""] * 9)
    bwd = cost("aten::_flash_attention_backward", [Q] * 6, [H] * 6, [""] * 12)
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
    assert cost("aten::cat", [[[]], []], ["c10::BFloat16", "Scalar"]) == OpCost(0.0, 2.0 * 1 * 2, None, False)  # one 0-d part: 1 element read and written


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
    assert cost("aten::_addmm_activation", [[4], [8, 16], [16, 4], [], [], []], [BF, BF, BF, "Scalar", "Scalar", "Scalar"]) \
        == OpCost(1056.0, 456.0, "bf16", True)


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
    assert cost("aten::where", [[4, 8], [4, 8], [4, 8]], ["bool", BF, BF]) == OpCost(32.0, 32.0 + 3 * 64, "fp32", False)  # cond, x, y read; out written


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
