"""tracekit.analysis.flops._fallback on a hand-built host tree: a launcher without a formula hands its kernels to the
innermost GEMM/attention parent above it (aten::matmul/linear/einsum or an attention op) that has recorded inputs
and a count, and the walk's memo answers for every op it passed. Indices and parents are written out per test."""

from __future__ import annotations

import orjson

from tracekit.analysis.flops import _fallback
from tracekit.analysis.link import NONE
from tracekit.model import OP, HostEvent, OpInputs, Trace, TraceInfo

BF16 = "c10::BFloat16"


def _inputs(dims, types) -> OpInputs:
    return OpInputs(dims=orjson.dumps(dims), types=orjson.dumps(types), concrete=b"")


MATMUL_IN = _inputs([[4, 8], [8, 16]], [BF16, BF16])  # a countable product: 2·4·8·16 FLOPs
LINEAR_IN = _inputs([[4, 8], [16, 8]], [BF16, BF16])  # x[4, 8] · W[16, 8]ᵀ: countable
BAD_IN = _inputs([[4], []], [BF16, ""])  # recorded, but no formula applies (a vector and nothing)
SDPA_IN = _inputs([[1, 2, 8, 16]] * 3, [BF16] * 3)  # q, k, v (B, H, L, D)


def _trace(names: list[str], inputs: dict[int, OpInputs]) -> Trace:
    host = [HostEvent(OP, n, 0, 10 * i, 5, 0) for i, n in enumerate(names)]
    return Trace(info=TraceInfo(source="hand"), host=host, op_inputs=inputs)


def test_the_innermost_counted_gemm_parent_takes_the_kernels():
    """0 matmul (counted) > 1 einsum (no inputs) > 2 mm (counted, but no GEMM parent) > 3 add (the launcher).
    The walk passes 2 (mm is no parent op) and 1 (no inputs) and stops at 0; every op passed answers 0."""
    tr = _trace(["aten::matmul", "aten::einsum", "aten::mm", "aten::add"], {0: MATMUL_IN, 2: MATMUL_IN})
    memo: dict[int, int] = {}
    assert _fallback(tr, [NONE, 0, 1, 2], 3, memo) == 0
    assert memo == {2: 0, 1: 0, 0: 0}


def test_a_parent_without_a_count_is_passed():
    """0 linear (counted) > 1 matmul whose inputs give no count > 2 add: the answer is 0, not 1."""
    tr = _trace(["aten::linear", "aten::matmul", "aten::add"], {0: LINEAR_IN, 1: BAD_IN})
    memo: dict[int, int] = {}
    assert _fallback(tr, [NONE, 0, 1], 2, memo) == 0
    assert memo == {1: 0, 0: 0}


def test_an_attention_op_is_a_parent_too():
    """0 SDPA (q, k, v recorded) > 1 _softmax: the softmax's kernels go to the SDPA call."""
    tr = _trace(["aten::scaled_dot_product_attention", "aten::_softmax"], {0: SDPA_IN, 1: MATMUL_IN})
    assert _fallback(tr, [NONE, 0], 1, {}) == 0


def test_no_parent_is_none_and_the_memo_says_so():
    """0 mm (counted, not a parent op) > 1 add: nothing above 1 qualifies, so NONE (-1), memoised for 0; a launcher
    at the top has no parent at all."""
    tr = _trace(["aten::mm", "aten::add"], {0: MATMUL_IN})
    memo: dict[int, int] = {}
    assert _fallback(tr, [NONE, 0], 1, memo) == NONE == -1
    assert memo == {0: NONE}
    memo2: dict[int, int] = {}
    assert _fallback(tr, [NONE, 0], 0, memo2) == NONE and memo2 == {}


def test_the_launcher_itself_is_not_its_own_fallback():
    """The walk starts at the launcher's parent: a counted matmul launcher with no parent gets NONE."""
    tr = _trace(["aten::matmul"], {0: MATMUL_IN})
    assert _fallback(tr, [NONE], 0, {}) == NONE


def test_a_memoised_op_answers_for_the_rest_of_the_walk():
    """1 einsum (no inputs) > 2 mm > 3 add, and the memo already says 1 -> 0: the walk stops at 1 with that answer
    (0's inputs are never read: it has none here) and memoises it for 2, the op it passed."""
    tr = _trace(["aten::matmul", "aten::einsum", "aten::mm", "aten::add"], {})
    memo = {1: 0}
    assert _fallback(tr, [NONE, 0, 1, 2], 3, memo) == 0
    assert memo == {1: 0, 2: 0}
    memo = {1: NONE}  # a memoised "nothing above": NONE, even though nothing else is known
    assert _fallback(tr, [NONE, 0, 1, 2], 3, memo) == NONE and memo == {1: NONE, 2: NONE}
