"""The attention layer around each block's core (issue 38, class 4; tracekit.analysis.blocks.layer).

Each trace is built so that its layer and figures are known by construction: which scope holds the core and its
projections, and which kernels and ops run inside it. Real traces are checked against an independent walk of
the raw JSON (support.traces.read_doc), never against tracekit's own output.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from support.builders import LAYER_FLASH_K, TraceBuilder, attribute_built, llama_layer, projection, sdpa_core
from support.paths import REAL
from tracekit import analyze
from tracekit.analysis.blocks.layer import FEED_FORWARD_SCOPE, LAYER_RULES
from tracekit.renderers.jsonrenderer import to_dict
from tracekit.results.attribution import InvariantError, Layer

BERT = REAL / "tracelens" / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz"
COMPILED = REAL / "tracelens" / "torch_compile_triton" / "trace.json.gz"
SGLANG = REAL / "tracelens" / "inference" / "sglang_prefilldecode" / "sglang_Qwen3-8B_prefilldecode.json.gz"


def _layers(res) -> list[str | None]:
    return [b.layer.name if b.layer else None for b in res.blocks]


def test_rules_are_named_ordered_data_with_reasons() -> None:
    assert [r.name for r in LAYER_RULES] == ["forward-host-block", "scope", "one-core", "no-feed-forward",
                                             "outermost"]
    assert all(r.why for r in LAYER_RULES)


def test_a_layer_adds_the_projections_around_an_sdpa_core(tmp_path: Path) -> None:
    b = TraceBuilder()
    llama_layer(b)
    res = attribute_built(tmp_path, b)
    (blk,) = res.blocks
    assert blk.name == "CoreAttention_0" and blk.total_us == 20.0
    layer = blk.layer
    assert layer is not None and layer.name == "SelfAttn_0"
    assert layer.total_us == 37.0  # q 10 + core 20 + o 7, back to back: no overlap
    assert layer.categories["matmul"] == 17.0 and layer.categories["fused_attention"] == 20.0
    assert layer.categories["elementwise"] == 0.0  # the MLP's silu is outside the layer
    assert layer.matmul_roles is not None and layer.matmul_roles["projection"] == 17.0


def _flat_layer(b: TraceBuilder, ffn: str) -> None:
    """One scope ``Block_0`` holding the projections, the core and (``ffn``) a feed-forward part or nothing."""
    b.module("Block_0", 0, 100)
    projection(b, 2, "Linear_0", 1000, 10)
    sdpa_core(b, 10, "CoreAttention_0", 1011, 20)
    projection(b, 20, "Linear_1", 1032, 7)
    if ffn == "module":
        b.module("GPT2MLP_0", 50, 10)
    elif ffn == "activation":
        b.op("aten::gelu", 50, 3)
    elif ffn == "router":
        b.op("_moe_C::topk_softmax", 50, 3)


@pytest.mark.parametrize(("ffn", "layer"), [("none", "Block_0"), ("module", None), ("activation", None),
                                            ("router", None)])
def test_a_layer_that_also_holds_an_mlp_stops_below_it(tmp_path: Path, ffn: str, layer: str | None) -> None:
    b = TraceBuilder()
    _flat_layer(b, ffn)
    res = attribute_built(tmp_path, b)
    assert _layers(res) == [layer]
    if layer is not None:
        assert res.blocks[0].layer is not None and res.blocks[0].layer.total_us == 37.0


def test_a_scope_with_two_cores_is_no_layer_but_each_of_its_parts_is(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.module("TwoHeads_0", 0, 100)
    b.module("Head_0", 1, 30)
    projection(b, 2, "Linear_0", 1000, 10)
    sdpa_core(b, 10, "CoreAttention_0", 1011, 20)
    b.module("Head_1", 40, 30)
    projection(b, 41, "Linear_1", 1032, 5)
    sdpa_core(b, 50, "CoreAttention_1", 1038, 20)
    res = attribute_built(tmp_path, b)
    assert _layers(res) == ["Head_0", "Head_1"]
    assert [b.layer.total_us for b in res.blocks if b.layer] == [30.0, 25.0]

    bare = TraceBuilder()
    bare.module("TwoHeads_0", 0, 100)
    projection(bare, 2, "Linear_0", 1000, 10)
    sdpa_core(bare, 10, "CoreAttention_0", 1011, 20)
    sdpa_core(bare, 50, "CoreAttention_1", 1038, 20)
    assert _layers(attribute_built(tmp_path, bare)) == [None, None]


def test_a_block_that_is_its_own_layer_has_none(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 100)
    projection(b, 2, "Linear_0", 1000, 10)
    b.op("aten::scaled_dot_product_attention", 10, 5)
    b.launch(LAYER_FLASH_K, 11, 1, 1011, 20)
    res = attribute_built(tmp_path, b)
    assert [(x.name, x.layer) for x in res.blocks] == [("aten::scaled_dot_product_attention", None)]
    assert to_dict(res, "t")["blocks"][0]["layer"] is None


def test_a_cpu_only_layer_is_host_time_the_module_gap_included(tmp_path: Path) -> None:
    """SelfAttn_0 (40 µs) ⊃ linear 3 µs, CoreAttention_0 (6 µs ⊃ SDPA 5 µs), linear 3 µs; nothing else."""
    b = TraceBuilder()
    b.module("SelfAttn_0", 1, 40)
    projection(b, 2, "Linear_0")
    sdpa_core(b, 10, "CoreAttention_0")
    projection(b, 20, "Linear_1")
    res = attribute_built(tmp_path, b)
    (blk,) = res.blocks
    assert blk.total_us == 6.0 and blk.categories["fused_attention"] == 5.0
    layer = blk.layer
    assert layer is not None and layer.name == "SelfAttn_0"
    assert layer.total_us == pytest.approx(40.0)
    assert layer.categories["matmul"] == pytest.approx(6.0) and layer.categories["fused_attention"] == 5.0
    assert layer.categories["other"] == pytest.approx(29.0)  # the module's time outside any op, as a block's
    assert layer.matmul_roles is not None and layer.matmul_roles["projection"] == pytest.approx(6.0)


def test_a_cpu_only_range_layer_counts_the_blocks_python_time_once(tmp_path: Path) -> None:
    """A record_function range (40 µs) ⊃ linear 3 µs, CoreAttention_0 (6 µs module ⊃ SDPA 5 µs), linear 3 µs. The
    module's 1 µs outside its op is the block's ``other`` and also lies in the range's own time: the layer is the
    range's 40 µs, no more."""
    b = TraceBuilder()
    b.annotation("layer0.mixer", 1, 40)
    projection(b, 2, "Linear_0")
    sdpa_core(b, 10, "CoreAttention_0")
    projection(b, 20, "Linear_1")
    (blk,) = attribute_built(tmp_path, b).blocks
    assert blk.total_us == 6.0 and blk.categories["other"] == 1.0
    assert blk.layer is not None and blk.layer.name == "layer0.mixer"
    assert blk.layer.total_us == pytest.approx(40.0) and blk.layer.categories["other"] == pytest.approx(29.0)


def test_the_json_writes_the_layer_beside_the_block(tmp_path: Path) -> None:
    b = TraceBuilder()
    llama_layer(b)
    doc = to_dict(attribute_built(tmp_path, b), "t")
    layer = doc["blocks"][0]["layer"]
    assert set(layer) == {"name", "total_us", "categories", "matmul_roles"}
    assert layer["name"] == "SelfAttn_0" and layer["total_us"] == 37.0
    assert sum(layer["categories"].values()) == pytest.approx(37.0)


def test_check_holds_a_layer_to_its_invariants(tmp_path: Path) -> None:
    b = TraceBuilder()
    llama_layer(b)
    res = attribute_built(tmp_path, b)
    layer = res.blocks[0].layer
    assert layer is not None
    res.blocks[0].layer = Layer(name=layer.name, total_us=layer.total_us + 5, categories=dict(layer.categories),
                                matmul_roles=layer.matmul_roles)
    with pytest.raises(InvariantError, match="layer categories sum"):
        res.check()
    cats = {k: 0.0 for k in layer.categories}
    cats["matmul"] = 10.0
    res.blocks[0].layer = Layer(name=layer.name, total_us=10.0, categories=cats,
                                matmul_roles={"projection": 10.0, "score": 0.0, "context": 0.0, "matmul-other": 0.0})
    with pytest.raises(InvariantError, match="below the core"):
        res.check()


def test_the_scope_vocabulary_names_feed_forward_modules() -> None:
    pat = re.compile(FEED_FORWARD_SCOPE)
    for name in ("Qwen2MLP", "BertIntermediate", "MixtralSparseMoeBlock", "T5LayerFF", "LlamaMLP", "mlp",
                 "DeepseekV3MoE", "Qwen3MoeExperts"):
        assert pat.search(name), name
    for name in ("Qwen3Attention", "BertAttention", "RadixAttention", "BertSelfOutput", "Linear", "RMSNorm",
                 "QKVParallelLinear", "RotaryEmbedding"):
        assert not pat.search(name), name


# -- real traces: the layer against an independent walk of the raw JSON --------------------------------------------

def _raw_events(path: Path) -> list[dict]:
    return [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]


def _raw_modules(path: Path) -> list[dict]:
    return [e for e in _raw_events(path) if str(e.get("name", "")).startswith("nn.Module: ")]


def _busy_launched_in(events: list[dict], window: dict) -> float:
    """The union (µs) of the device events whose runtime launch lies inside ``window`` on its thread."""
    corr = {e["args"]["correlation"] for e in events
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and e["tid"] == window["tid"]
            and window["ts"] <= e["ts"] <= window["ts"] + window["dur"] and "correlation" in e.get("args", {})}
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"].get("correlation") in corr)
    busy, end = 0.0, float("-inf")
    for s, e in spans:
        if e > end:
            busy += e - max(s, end)
            end = e
    return busy


def _enclosing(mods: list[dict], inner: dict) -> list[str]:
    """Names of the module slices around ``inner`` on its thread, innermost first (by time containment)."""
    out = [m for m in mods if m is not inner and m["tid"] == inner["tid"] and m["pid"] == inner["pid"]
           and m["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= m["ts"] + m["dur"]]
    return [m["name"][len("nn.Module: "):] for m in sorted(out, key=lambda m: m["dur"])]


@pytest.mark.parametrize(("path", "core", "layer"), [
    (BERT, "BertSdpaSelfAttention", "BertAttention"), (SGLANG, "RadixAttention", "Qwen3Attention"),
    (REAL / "tracelens" / "b200" / "eager_trace.json.gz", "Attention", "OAIAttention"),  # vLLM GPT-OSS
    (REAL / "tracelens" / "h100" / "Falconsai_nsfw_image_detection__1016002.json.gz", "ViTSdpaSelfAttention",
     "ViTSdpaAttention"),
    (REAL / "tracelens" / "h100" / "facebook_timesformer-base-finetuned-k400__1016002.json.gz",
     "TimesformerSelfAttention", "TimeSformerAttention")])
def test_real_layers_are_the_attention_module_around_the_core(path: Path, core: str, layer: str) -> None:
    if not path.exists():
        pytest.skip(f"{path} not here")
    res = analyze(path).check()
    mods = _raw_modules(path)
    cores = [m for m in mods if re.sub(r"_\d+$", "", m["name"][len("nn.Module: "):]) == core]
    expected = [next(n for n in _enclosing(mods, m) if n.rsplit("_", 1)[0] == layer) for m in cores]
    assert len(res.blocks) == len(cores)
    assert sorted(_layers(res)) == sorted(expected)
    for blk in res.blocks:
        assert blk.layer is not None and blk.layer.total_us > blk.total_us
        assert blk.layer.matmul_roles is not None and blk.layer.matmul_roles["projection"] > 0
    events = _raw_events(path)
    windows = {m["name"][len("nn.Module: "):]: m for m in mods}
    for blk in res.blocks:
        assert blk.layer is not None
        assert blk.layer.total_us == pytest.approx(_busy_launched_in(events, windows[blk.layer.name]), abs=0.01)


def test_a_compiled_graph_holding_the_mlp_is_no_layer(tmp_path: Path) -> None:
    """A compiled transformer block: one CompiledFxGraph range holds the projections, the SDPA core and the MLP,
    whose activation is inductor's fused launch op (triton_poi_fused_..._silu_N): no layer around the core."""
    b = TraceBuilder()
    b.annotation("## Call CompiledFxGraph abc ##", 0, 100)
    b.op("aten::mm", 2, 3)
    b.op("aten::scaled_dot_product_attention", 10, 5)
    b.launch(LAYER_FLASH_K, 11, 1, 1011, 20)
    b.op("aten::mm", 20, 3)
    b.op("triton_poi_fused__unsafe_view_mul_silu_2", 30, 3)
    assert _layers(attribute_built(tmp_path, b)) == [None]


def test_the_real_compiled_trace_holds_its_mlp_in_the_same_graph() -> None:
    """torch_compile_triton: the raw JSON's CompiledFxGraph range holds the SDPA op and a fused silu launch op."""
    if not COMPILED.exists():
        pytest.skip(f"{COMPILED} not here")
    events = _raw_events(COMPILED)
    graph = next(e for e in events if e.get("cat") == "user_annotation" and "CompiledFxGraph" in e["name"])
    inside = {e["name"] for e in events if e.get("cat") == "cpu_op" and e["tid"] == graph["tid"]
              and graph["ts"] <= e["ts"] <= graph["ts"] + graph["dur"]}
    assert "aten::_scaled_dot_product_flash_attention" in inside and any("silu" in n for n in inside)
    res = analyze(COMPILED).check()
    assert [b.name for b in res.blocks] == ["aten::_scaled_dot_product_flash_attention"] and _layers(res) == [None]


def test_sglang_decode_replay_layers_hold_the_projections_the_core_lacks() -> None:
    """The issue's case: SGLang decode replayed from a graph, mapped to its capture. Each RadixAttention block has
    no GEMM; its layer is the Qwen3Attention module the capture's raw JSON nests it in, and holds the projections."""
    from support.paths import GRAPHS

    replay = GRAPHS / "sglang_decode" / "sglang_Qwen3-8B_decode.json.gz"
    capture = GRAPHS / "sglang_decode" / "capture_traces" / "bs_32_rank0.json.gz"
    if not (replay.exists() and capture.exists()):
        pytest.skip("../shared/traces/graphs not present")
    mods = _raw_modules(capture)
    nest = {m["name"][len("nn.Module: "):]: _enclosing(mods, m) for m in mods
            if m["name"].startswith("nn.Module: RadixAttention_")}
    res = analyze(replay, captures=(capture,), jobs=1, decode_workers=1).check()
    assert len(res.blocks) == len(nest) == 36
    for b in res.blocks:
        assert b.layer is not None and b.layer.name == next(n for n in nest[b.name] if n.startswith("Qwen3Attention_"))
        assert b.categories["matmul"] == 0.0 and b.layer.categories["matmul"] > 0.0
        assert b.layer.matmul_roles is not None and b.layer.matmul_roles["projection"] == b.layer.categories["matmul"]
        assert b.layer.total_us > b.total_us
