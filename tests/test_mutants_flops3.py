"""Survivors of the third mutmut run in tracekit.analysis.flops (issue 21): recorded inputs of the wrong kind
(a non-string einsum equation, an operand shape that is not a list) give no count and never a crash
(op_cost's rule: "a shape of the wrong arity or kind: no count, never a crash"). Hand-written inputs; the
expectations are worked out in the comments."""

from __future__ import annotations

import orjson

from tracekit.analysis.flops import op_cost


def _j(x) -> bytes:
    return orjson.dumps(x)


def cost(name, dims, types, concrete=()):
    return op_cost(name, _j(dims), _j(types), _j(list(concrete)))


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
