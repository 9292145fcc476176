"""Eager fused-op self time (issue 38, class 6): an attention op that ran unfused under it books its own host time as
glue, ``other``, not ``fused_attention``. ``FlexAttentionAutogradOp`` (eager FlexAttention's reference path) and a
math-fallback ``aten::_native_multi_head_attention`` (nn.MultiheadAttention on CPU) each hold their bmm/softmax/bmm
as ops of their own. The expected figures follow from the hand-built times."""

from __future__ import annotations

import pytest

from support.builders import TraceBuilder
from tracekit import analyze
from tracekit.analysis.classify import HOST_CHILD_RULES, Classifier

WRAPPERS = {"FlexAttentionAutogradOp": "host-flex-eager-wrapper",
            "aten::_native_multi_head_attention": "host-mha-math-fallback"}


def _wrapped(b: TraceBuilder, t0: float, op: str, children: bool, softmax: str = "aten::_softmax") -> None:
    """``op`` (100 µs) over bmm 20, ``softmax`` 30 and bmm 20 (its own self time 30), or over nothing."""
    b.op(op, t0, 100)
    if children:
        b.op("aten::bmm", t0 + 5, 20)
        b.op(softmax, t0 + 30, 30)
        b.op("aten::bmm", t0 + 70, 20)


def test_the_wrapper_rules_are_named_with_reasons() -> None:
    rules = {r.name: r for r in HOST_CHILD_RULES}
    assert all(rules[name].why and rules[name].category == "other" for name in WRAPPERS.values())


@pytest.mark.parametrize("op", list(WRAPPERS))
@pytest.mark.parametrize("softmax", ["aten::_softmax", "aten::_masked_softmax", "aten::_safe_softmax"])
def test_an_unfused_attention_ops_own_time_is_other(tmp_path, op: str, softmax: str) -> None:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    _wrapped(b, 100, op, True, softmax)
    res = analyze(b.write(tmp_path / "t.json")).check()
    [blk] = res.blocks
    assert blk.categories == pytest.approx({"matmul": 40, "softmax": 30, "fused_attention": 0, "memory": 0,
                                            "elementwise": 0, "other": 30})
    assert res.kernels[(op, "other")] == (1, pytest.approx(30))


@pytest.mark.parametrize("op", list(WRAPPERS))
def test_without_unfused_children_the_op_stays_fused(tmp_path, op: str) -> None:
    """An op with no bmm/softmax under it did the work itself: fused_attention (host-fused-attention)."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    _wrapped(b, 100, op, False)
    res = analyze(b.write(tmp_path / "t.json")).check()
    [blk] = res.blocks
    assert blk.categories["fused_attention"] == pytest.approx(100) and blk.categories["other"] == 0


def test_the_wrapper_rules_fire_on_their_op_and_an_unfused_child_only() -> None:
    c = Classifier()
    for op, name in WRAPPERS.items():
        assert c.host_child_rule(op, "aten::bmm").name == name
        assert c.host_child_rule(op, "aten::_scaled_dot_product_flash_attention_for_cpu") is None
    assert c.host_child_rule("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::bmm") is None
