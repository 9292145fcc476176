"""Every real trace in ../shared/traces/real attributes with check() passing, and the attention
traces give the blocks we know they contain (facts from shared/traces/real/MANIFEST.md)."""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

import orjson
import pytest

from support.paths import GOLDEN, REAL, real_trace_files, requires_real
from support.traces import chunk_size, read_doc, read_events
from tracekit import analyze

pytestmark = [requires_real, pytest.mark.real]

ALL = sorted(p.relative_to(REAL).as_posix() for p in real_trace_files() if p.name.endswith(".json.gz"))
# Traces over 1.5 MB compressed take seconds each: `pytest -m "not slow"` leaves them out.
BIG = {rel for rel in ALL if (REAL / rel).stat().st_size > 1_500_000}


def sized(*values: str | int) -> object:
    """A parameter set, marked slow when its first value is a big trace."""
    return pytest.param(*values, marks=pytest.mark.slow) if values[0] in BIG else pytest.param(*values)




@lru_cache(maxsize=None)
def result(rel: str):
    return analyze(REAL / rel).check()


@lru_cache(maxsize=4)
def raw_events(rel: str) -> list[dict]:
    return read_events(REAL / rel)


def kernel_time(rel: str, pattern: str, linked_only: bool = False) -> float:
    """Sum of kernel durations straight from the JSON: an independent check on the categories."""
    evs = raw_events(rel)
    runtime = {e["args"].get("correlation") for e in evs if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    rx = re.compile(pattern)
    return sum(e["dur"] for e in evs if e.get("cat") == "kernel" and rx.search(e["name"])
               and (not linked_only or e["args"].get("correlation") in runtime))


def kinds(res) -> Counter:
    return Counter((b.kind, b.found_by) for b in res.blocks)


def test_the_set_is_complete():
    assert len(ALL) == 27


@pytest.mark.parametrize("rel", [sized(r) for r in ALL])
def test_every_real_trace_attributes(rel):
    res = result(rel)
    assert res.time_base in ("device", "host")
    if res.coverage is not None:
        cv = res.coverage
        assert 0 <= cv.unlinked_us <= cv.device_us
        assert cv.in_blocks_us <= cv.linked_us + 1e-3


# Eager attention (bmm + softmax): MANIFEST lists 180 softmax ops in OWLv2 and 24 attention
# modules in TimeSformer; every softmax kernel of these models is inside an attention module.
@pytest.mark.parametrize("rel,module,count", [
    sized("tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz", "Owlv2Attention", 180),
    sized("tracelens/mi300/google_owlv2-large-patch14-ensemble__1016001.json.gz", "Owlv2Attention", 180),
    ("tracelens/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz", "TimesformerSelfAttention", 24),
])
def test_eager_attention_traces(rel, module, count):
    res = result(rel)
    assert kinds(res) == Counter({(module, "module"): count})
    c = res.totals.categories
    assert c["fused_attention"] == 0
    assert c["matmul"] > 0 and c["softmax"] > 0
    assert (c["matmul"] + c["softmax"]) / res.totals.total_us > 0.7
    # All attention softmax kernels, summed from the raw JSON, land in the softmax category.
    assert c["softmax"] == pytest.approx(kernel_time(rel, r"softmax_warp_forward|SoftMaxForward"), rel=1e-6)


# SDPA flash: one fused kernel per layer inside each attention module, no separate softmax. The block is the
# innermost module around the SDPA op (BertSdpaSelfAttention, not its container BertAttention, which also holds
# the output dense + LayerNorm: issue 22).
@pytest.mark.parametrize("rel,module,count,kernel", [
    ("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz", "BertSdpaSelfAttention", 4, r"flash_fwd_kernel"),
    ("tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz", "BertSdpaSelfAttention", 4, r"^attn_fwd"),
    ("tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz", "ViTSdpaSelfAttention", 12, r"flash_fwd_kernel"),
    ("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "Qwen2Attention", 24, r"flash_fwd_kernel"),
    ("tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "Qwen2Attention", 24, r"^attn_fwd"),
])
def test_sdpa_flash_traces(rel, module, count, kernel):
    res = result(rel)
    assert kinds(res) == Counter({(module, "module"): count})
    c = res.totals.categories
    assert c["softmax"] == 0
    # Only kernels launched inside the window can be attributed; Qwen has pre-window orphans.
    assert c["fused_attention"] == pytest.approx(kernel_time(rel, kernel, linked_only=True), rel=1e-6)
    assert all(b.categories["fused_attention"] > 0 for b in res.blocks)


def test_qwen_orphans_are_unlinked_not_guessed():
    # MANIFEST: 509 of 1,707 GPU events of the H100 Qwen trace were launched before the window.
    res = result("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    assert res.coverage.device_events - res.coverage.linked_events == 509
    assert 0.2 < res.coverage.unlinked_us / res.coverage.device_us < 0.4
    assert all(b.found_by == "module" for b in res.blocks)


@pytest.mark.slow  # two 3.7 MB traces
def test_flux_pair_aiter_vs_sage():
    # xDiT Flux: DiT attention replays in HIP graphs with no attention op on the host, so the
    # fused kernels form their own blocks; T5 (24, eager) and CLIP (12, SDPA) are modules.
    before = result("tracelens/inference/xdit_flux_aiter/profile_trace_rank_0.json.gz")
    after = result("tracelens/inference/xdit_flux_aiter_sage/profile_trace_rank_0.json.gz")
    for res in (before, after):
        k = kinds(res)
        assert k[("T5Attention", "module")] + k[("T5LayerSelfAttention", "module")] == 24
        assert k[("CLIPAttention", "module")] == 12
        t5 = [b for b in res.blocks if b.kind.startswith("T5")]
        assert all(b.categories["softmax"] > 0 and b.categories["fused_attention"] == 0 for b in t5)
    fk_before = [b for b in before.blocks if b.found_by == "fused-kernel"]
    fk_after = [b for b in after.blocks if b.found_by == "fused-kernel"]
    assert len(fk_before) == len(fk_after) == 228  # 228 aiter::fmha_fwd calls; 228 sage_quant + sage_fwd pairs
    assert {b.name for b in fk_before} == {"aiter::fmha_fwd_hd128_bf16_rtz"}
    assert {b.name for b in fk_after} == {"sage_fwd"}  # named after the run's longest kernel
    assert all(b.kernels >= 2 for b in fk_after)
    fused_before = sum(b.categories["fused_attention"] for b in fk_before)
    assert fused_before == pytest.approx(kernel_time("tracelens/inference/xdit_flux_aiter/profile_trace_rank_0.json.gz",
                                                     r"^aiter::fmha_fwd"), rel=1e-6)


def test_vllm_b200_custom_attention_op():
    res = result("tracelens/b200/eager_trace.json.gz")
    # The innermost module around vllm::unified_attention_with_output is vLLM's Attention layer, inside
    # OAIAttention (which also holds the qkv/o projections): issue 22.
    assert kinds(res) == Counter({("Attention", "module"): 36})
    c = res.totals.categories
    fmha = kernel_time("tracelens/b200/eager_trace.json.gz", r"^fmhaSm100a")
    assert c["fused_attention"] == pytest.approx(fmha, rel=1e-6)
    # The KV-cache write kernel names contain "flash" but move memory.
    assert c["memory"] >= kernel_time("tracelens/b200/eager_trace.json.gz", r"reshape_and_cache_flash") * 0.999


def test_sglang_ck_tile_attention():
    res = result("tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz")
    assert kinds(res) == Counter({("RadixAttention", "module"): 36})  # SGLang's attention layer, inside Qwen3Attention
    assert res.totals.categories["fused_attention"] == pytest.approx(kernel_time(
        "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz", r"Fmha"), rel=1e-6)


def test_vllm_full_graph_replay():
    # One hipGraphLaunch owns all 421 kernels; attention shows only as kernel names.
    res = result("tracelens/inference/vllm_decode_full/graph_execution.json.gz")
    assert kinds(res) == Counter({("kernel_unified_attention_2d", "fused-kernel"): 12,
                                  ("kernel_unified_attention_3d", "fused-kernel"): 12})
    # Each call's KV-cache write (reshape_and_cache_flash, just before it) is part of the call: KERNEL_GROUPS.
    cache = kernel_time("tracelens/inference/vllm_decode_full/graph_execution.json.gz", r"reshape_and_cache")
    assert cache > 0 and res.totals.categories["memory"] == pytest.approx(cache, rel=1e-6)
    assert {b.evidence.group for b in res.blocks} == {"kv-cache-write"}


@pytest.mark.parametrize("rel,count", [
    ("tracelens/evals/sdpa_01_long_seq_low_eff.json.gz", 10),
    ("tracelens/torch_compile_triton/trace.json.gz", 1),
])
def test_fused_op_without_modules(rel, count):
    res = result(rel)
    assert [b.found_by for b in res.blocks] == ["fused-op"] * count
    assert res.totals.categories["fused_attention"] == pytest.approx(kernel_time(rel, r"^attn_fwd"), rel=1e-6)


@pytest.mark.parametrize("rel", [
    "kineto/2021-01_resnet50/worker0.pt.trace.json.gz",
    "kineto/2021-06_resnet50/worker0.1623143089861.pt.trace.json.gz",
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "tracelens/mi210/gpu_only_trace/gpu_only_trace.json.gz",
    "hta/triton_example/triton_example.json.gz",
    "hta/trace_filter/sampled_rank-0.json.gz",  # softmax → matmul in fb::convex_sum is not attention
])
def test_no_attention_no_blocks(rel):
    res = result(rel)
    assert res.blocks == [] and res.totals.total_us == 0


def test_2022_external_ids_are_not_trusted():
    # alexnet: External id == correlation on GPU events; a naive join gives 17 false matches.
    for rel in ("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
                "hta/trace_diff/control/control.json.gz"):
        assert result(rel).traces[0].external_ids_trusted is False
    assert result("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz").traces[0].external_ids_trusted is True


def test_2021_orphans_with_external_id_zero_are_unlinked():
    res = result("kineto/2021-01_resnet50/worker0.pt.trace.json.gz")
    assert res.coverage.device_events - res.coverage.linked_events == 733


def test_range_profiler_trace_has_no_device_time():
    res = result("hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz")
    assert res.time_base == "host"
    assert any("range-profiler" in w for w in res.traces[0].warnings)


def test_header_never_echoes_user_metadata():
    res = result("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz")
    t = res.traces[0]
    assert t.gpus == ["NVIDIA H100 80GB HBM3"] and t.runtime == "CUDA 12.4" and t.steps == [6]
    from tracekit.renderers import JSONRenderer
    text = JSONRenderer().render(res)
    assert "hf_" not in text and "torch_env_info" not in text and "moca" not in text


@lru_cache(maxsize=1)
def _golden() -> dict:
    return read_doc(GOLDEN / "real_attribution.json.gz")


@pytest.mark.parametrize("rel", [sized(r) for r in ALL])
def test_json_is_unchanged_by_the_streaming_loader(rel):
    """tests/golden/real_attribution.json.gz holds the JSON of every real trace as produced by the first,
    whole-document orjson loader; the streaming msgspec loader must reproduce it exactly."""
    from tracekit.renderers.jsonrenderer import to_dict
    assert orjson.loads(orjson.dumps(to_dict(result(rel), "x"))) == _golden()[rel]


@pytest.mark.parametrize("rel", [
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",  # header keys after the events
    "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",  # metadata before the events
    "kineto/2021-01_resnet50/worker0.pt.trace.json.gz",  # 2021 spellings
    "hta/triton_example/triton_example.json.gz",  # INFO list after the events
])
@pytest.mark.parametrize("chunk", [997, 65536])
def test_chunk_boundaries_do_not_change_results(rel, chunk):
    from tracekit.renderers.jsonrenderer import to_dict
    with chunk_size(chunk) as used:
        res = analyze(REAL / rel).check()
    assert used == [chunk]  # the reader really read in small windows
    assert not res.damaged
    assert orjson.loads(orjson.dumps(to_dict(res, "x"))) == _golden()[rel]
