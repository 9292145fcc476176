"""Matmul roles from recorded shapes (tracekit.analysis.roles, rule 2): the operands of baddbmm/addbmm are its
second and third inputs; an L×L output over a head dimension up to 1024 is a score product, an L×L input a
context product; a vector operand decides nothing. Hand-built blocks: one product of 10 µs in an eager block."""

from __future__ import annotations

import pytest
from support.builders import TraceBuilder
from support.pairs import GEMM, H100, SOFTMAX

from tracekit import analyze


def roles(tmp_path, op, dims):
    """An annotated eager block whose first product is ``op`` with ``dims`` (10 µs of GEMM); then softmax and a
    PV bmm with no shapes (matmul-other, 10 µs)."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    b.annotation("layer0.attention", 0, 60)
    first = b.op(op, 1, 8)
    first["args"]["Input Dims"] = dims
    first["args"]["Input type"] = ["c10::BFloat16" if d else "" for d in dims]
    b.launch(GEMM, 2, 1, 100, 10)
    b.op("aten::_softmax", 20, 6)
    b.launch(SOFTMAX, 21, 2, 111, 5)
    b.op("aten::bmm", 40, 8)
    b.launch(GEMM, 41, 2, 117, 10)
    (blk,) = analyze(b.write(tmp_path / "t.json")).check().blocks
    return {k: v for k, v in blk.matmul_roles.items() if v}


L, D = 256, 64


@pytest.mark.parametrize("op,dims,role", [
    # baddbmm(bias [B, L, L], q [B, L, D], kᵀ [B, D, L]): an L×L output: score.
    ("aten::baddbmm", [[2, L, L], [2, L, D], [2, D, L], [], []], "score"),
    # baddbmm(bias [B, L, D], p [B, L, L], v [B, L, D]): an L×L input: context.
    ("aten::baddbmm", [[2, L, D], [2, L, L], [2, L, D], [], []], "context"),
    # addbmm(bias [L, L], q [B, L, D], kᵀ [B, D, L]): score.
    ("aten::addbmm", [[L, L], [2, L, D], [2, D, L], [], []], "score"),
    # A head dimension of exactly 1024 (the largest taken for one): still a score / context product.
    ("aten::bmm", [[2, L, 1024], [2, 1024, L]], "score"),
    ("aten::bmm", [[2, L, L], [2, L, 1024]], "context"),
    # 2-D operands are matrices too.
    ("aten::mm", [[L, D], [D, L]], "score"),
    # Only the matrix dimensions must be integers: a symbolic (unrecorded) batch size does not matter.
    ("aten::bmm", [[None, L, D], [2, D, L]], "score"),
    ("aten::bmm", [[2, L, D], [None, D, L]], "score"),
])
def test_role_from_shapes(tmp_path, op, dims, role):
    assert roles(tmp_path, op, dims) == {role: 10, "matmul-other": 10}


@pytest.mark.parametrize("op,dims", [
    ("aten::matmul", [[D], [D, L]]),  # a vector operand
    ("aten::bmm", [[2, L, D], [2, None, L]]),  # a matrix dimension that is not an integer
    ("aten::matmul", [[2, None, D], [D, 32]]),
])
def test_operands_that_decide_no_role(tmp_path, op, dims):
    assert roles(tmp_path, op, dims) == {"matmul-other": 20}
