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


def _self_times(events: list[dict]) -> dict[str, list[float]]:
    """Independent of tracekit: each cpu_op's self time (its duration less its direct children's), by name, in
    time order; parents found by a stack of the enclosing ops on each thread."""
    ops = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"),
                 key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    selfs = [float(e["dur"]) for e in ops]
    stack: list[int] = []
    for k, e in enumerate(ops):
        while stack and (ops[stack[-1]]["tid"] != e["tid"] or ops[stack[-1]]["ts"] + ops[stack[-1]]["dur"] <= e["ts"]):
            stack.pop()
        if stack:
            selfs[stack[-1]] -= e["dur"]
        stack.append(k)
    out: dict[str, list[float]] = {}
    for k in sorted(range(len(ops)), key=lambda k: ops[k]["ts"]):
        out.setdefault(ops[k]["name"], []).append(selfs[k])
    return out


def test_eager_flex_and_mha_fallback_on_a_recorded_cpu_trace(tmp_path) -> None:
    """torch's own names and nesting: eager flex_attention and nn.MultiheadAttention's fast path on CPU (bmm and
    softmax under both). Each op's own time, walked from the raw JSON, is filed as other and none as fused."""
    torch = pytest.importorskip("torch")
    import json
    import warnings

    from torch.nn.attention.flex_attention import flex_attention
    from torch.profiler import ProfilerActivity, profile

    q = torch.randn(1, 2, 16, 8)
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
    x = torch.randn(1, 10, 16)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex_attention's "called without torch.compile"
        flex_attention(q, q, q)
        mha(x, x, x, need_weights=False)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            flex_attention(q, q, q)
            mha(x, x, x, need_weights=False)
    path = tmp_path / "eager.json"
    prof.export_chrome_trace(str(path))
    selfs = _self_times(json.loads(path.read_text())["traceEvents"])
    res = analyze(path).check()
    for op in WRAPPERS:
        assert len(selfs.get(op, [])) == 1, f"{op}: the recording no longer runs it (torch changed its path)"
        assert res.kernels[(op, "other")][1] == pytest.approx(selfs[op][0], abs=2e-3)
        assert (op, "fused_attention") not in res.kernels
    assert all(b.categories["fused_attention"] == 0 for b in res.blocks)
