"""One vocabulary: an op opens a ``fused-op`` block exactly when its kernels and host time are ``fused_attention``.

The names are real ones, hand-labelled here from the real traces and PyTorch / flash-attn / vLLM / sglang /
aiter op registrations, not read off tracekit's own patterns. Each is run through the whole pipeline on a
hand-built trace: block finding and classification must agree.
"""

from __future__ import annotations

import enum
import json

import orjson
import pytest

from support.builders import TraceBuilder
from tracekit import analyze
from tracekit.analysis.classify import HOST_RULES, Classifier
from tracekit.vocab import Basis
from tracekit.results.attribution import CATEGORIES
from tracekit.vocab import Category, FoundBy, Phase, TimeBase, is_fused_attention_op

FUSED = [
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_flash_attention_backward",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_efficient_attention_backward",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_cudnn_attention_backward",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    "aten::_scaled_dot_product_fused_attention_overrideable",
    "aten::_flash_attention_forward",
    "aten::_flash_attention_backward",
    "aten::_efficient_attention_forward",
    "aten::_efficient_attention_backward",
    "aten::_cudnn_attention_forward",
    "aten::_cudnn_attention_backward",
    "aten::_native_multi_head_attention",
    "aten::_flex_attention",
    "aten::flex_attention_backward",
    "higher_order::flex_attention",
    "FlexAttentionAutogradOp",  # eager FlexAttention (PyTorch 2.13 CPU trace)
    "flash_attn::_flash_attn_forward",
    "flash_attn::_flash_attn_backward",
    "flash_attn::_flash_attn_varlen_forward",
    "flash_attn_3::fwd",
    "vllm::unified_attention",
    "vllm::unified_attention_with_output",
    "vllm::mla_attention",
    "sglang::extend_attention",
    "sglang_profiler::mha__mha_batch_prefill_167",
    "aiter::mha_fwd",
    "aiter::mha_batch_prefill",
    "aiter::fmha_v3_fwd",
]

NOT_FUSED = [
    "aten::_scaled_dot_product_attention_math",  # the un-fused path: its bmm/softmax children are the work
    "aten::_fused_sdp_choice",  # picks a backend, computes nothing
    "aten::bmm",
    "aten::_softmax",
    "aten::matmul",
    "aten::linear",
    "aten::copy_",
    "_C_cache_ops::reshape_and_cache_flash",  # KV-cache writes contain 'flash'
    "vllm::reshape_and_cache_flash",
    "sglang::store_kvcache",
    "aten::layer_norm",
]

# A kernel name that no name rule claims (category 'other' by name): only its launcher can make it fused.
PLAIN_KERNEL = "void some_vendor_kernel<128, 4>(Params)"


def test_the_lists_are_disjoint_and_real():
    assert not set(FUSED) & set(NOT_FUSED)
    assert Classifier().device(PLAIN_KERNEL, "kernel", None) == "other"


@pytest.mark.parametrize("name", FUSED + NOT_FUSED)
def test_an_op_opens_a_fused_block_iff_its_host_time_is_fused_attention(tmp_path, name):
    b = TraceBuilder()  # CPU-only: host self time
    b.op(name, 100, 50)
    b.op("aten::empty", 110, 10)  # a child, so the op has 40 µs of self time
    res = analyze(b.write(tmp_path / "cpu.json")).check()
    fused = name in FUSED
    assert is_fused_attention_op(name) is fused
    assert [(x.name, x.found_by) for x in res.blocks] == ([(name, "fused-op")] if fused else [])
    assert (Classifier().host(name) == "fused_attention") is fused
    if fused:
        [blk] = res.blocks
        assert blk.categories["fused_attention"] == pytest.approx(40)
        assert blk.categories["memory"] == pytest.approx(10)
        assert blk.total_us == pytest.approx(50)


@pytest.mark.parametrize("name", FUSED + NOT_FUSED)
def test_an_op_opens_a_fused_block_iff_its_kernels_are_fused_attention(tmp_path, name):
    b = TraceBuilder()
    b.op(name, 100, 50)
    b.launch(PLAIN_KERNEL, 101, 2, 200, 30)
    res = analyze(b.write(tmp_path / "gpu.json")).check()
    fused = name in FUSED
    assert (Classifier().device(PLAIN_KERNEL, "kernel", name) == "fused_attention") is fused
    if fused:
        [blk] = res.blocks
        assert (blk.found_by, blk.kernels) == ("fused-op", 1)
        assert blk.categories["fused_attention"] == pytest.approx(30) == blk.total_us
    else:
        assert res.blocks == []


def test_every_host_rule_for_fused_attention_is_the_vocabulary():
    """No second list can creep back into classify: the only fused host rule matches exactly FUSED."""
    clf = Classifier()
    fused_rules = [r for r in HOST_RULES if r.category == "fused_attention"]
    assert len(fused_rules) == 1
    assert [n for n in FUSED + NOT_FUSED if clf.host(n) == "fused_attention"] == FUSED


def test_categories_are_defined_once():
    import tracekit.analysis.classify
    import tracekit.results.attribution

    assert tracekit.results.attribution.CATEGORIES is tracekit.analysis.classify.CATEGORIES is CATEGORIES
    assert CATEGORIES == ("matmul", "softmax", "fused_attention", "memory", "elementwise", "other")
    assert all(type(c) is str for c in CATEGORIES)  # plain strings: orjson refuses str-subclass dict keys


@pytest.mark.parametrize("enum_cls, values", [
    (Category, ["matmul", "softmax", "fused_attention", "memory", "elementwise", "other"]),
    (Phase, ["forward", "backward"]),
    (FoundBy, ["annotation", "module", "fused-op", "inferred", "fused-kernel"]),
    (TimeBase, ["device", "host", "mixed"]),
    (Basis, ["median_step", "total"]),
])
def test_closed_sets_are_str_enums_that_serialise_as_their_values(enum_cls, values):
    assert issubclass(enum_cls, enum.Enum) and issubclass(enum_cls, str)
    assert [m.value for m in enum_cls] == values
    members = list(enum_cls)
    assert orjson.loads(orjson.dumps(members)) == values
    assert json.loads(json.dumps(members)) == values
    assert [f"{m}" for m in members] == [str(m) for m in members] == values
