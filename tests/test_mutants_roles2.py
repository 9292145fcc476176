"""tracekit.analysis.roles._operands: which two recorded inputs of a product op are its matrices. The bias comes
first in addmm(bias, a, b) and its batched kin, so their operands are inputs 1 and 2; every other product's are
inputs 0 and 1 (ATen's schemas). Through the attribution an aten::addmm is a linear layer by name before its shapes
are read (roles rule 2), so only a direct call shows its operand order."""

from __future__ import annotations

import pytest

from tracekit.analysis.roles import _operands

BIAS, A, B = [16], [4, 8], [8, 16]


@pytest.mark.parametrize("op", ["aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation"])
def test_bias_first_ops_take_inputs_one_and_two(op):
    # addmm(bias [16], mat1 [4, 8], mat2 [8, 16], beta, alpha): the matrices are mat1 and mat2.
    assert _operands(op, [BIAS, A, B, [], []]) == (A, B)


@pytest.mark.parametrize("op", ["aten::mm", "aten::bmm", "aten::matmul", "aten::linear"])
def test_other_products_take_inputs_zero_and_one(op):
    assert _operands(op, [A, B, BIAS]) == (A, B)


def test_a_vector_bias_in_first_place_is_never_an_operand():
    """Read as inputs 0 and 1, addmm's [16] bias would make no matrix pair at all: None. That is what a wrong
    offset gives; the right one gives the pair."""
    assert _operands("aten::mm", [BIAS, A, B]) is None
    assert _operands("aten::addmm", [BIAS, A, B]) == (A, B)


@pytest.mark.parametrize("op,dims", [
    ("aten::addmm", [BIAS, A]),  # one operand recorded
    ("aten::mm", [A]),
    ("aten::einsum", [[], [A, B]]),  # the equation decides
    ("aten::mm", [A, [8]]),  # a vector
    ("aten::mm", [A, "x"]),
    ("aten::mm", [[4, None], B]),
])
def test_no_pair(op, dims):
    assert _operands(op, dims) is None
