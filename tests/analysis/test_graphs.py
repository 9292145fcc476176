"""CUDA/HIP graphs (issue 23): captures are told from runs, and replayed kernels are mapped to the ops that captured
them. Hand-built traces know their answer by construction: which kernels each replay ran and for how long."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from support.builders import FILL_K, GEMM2_K, GEMM_K, SOFTMAX_K, TraceBuilder, attention_block, capture, captured_attention, eager_layers, graph_launch, graph_pair, replay_kernels
from support.paths import GRAPHS

from tracekit import analyze
from tracekit.analysis.attribute import attribute_trace
from tracekit.analysis.graphs import MIN_ALIGNED_SHARE, align
from tracekit.io.graphs import GRAPH_CALL_RULES, GraphCall, graph_call
from tracekit.io.load import load_trace
from tracekit.renderers.jsonrenderer import to_dict
from tracekit.renderers.terminal import TerminalRenderer
from tracekit.vocab import GraphMode

SGLANG = GRAPHS / "sglang_decode" / "sglang_Qwen3-8B_decode.json.gz"
SGLANG_CAPTURE = GRAPHS / "sglang_decode" / "capture_traces" / "bs_32_rank0.json.gz"
VLLM = GRAPHS / "vllm_prefilldecode_piecewise" / "graph_execution.json.gz"
VLLM_CAPTURES = GRAPHS / "vllm_prefilldecode_piecewise" / "capture_traces"
needs_shared = pytest.mark.skipif(not SGLANG.exists(), reason="../shared/traces/graphs not present")
KERNELS = (GEMM_K, SOFTMAX_K, GEMM2_K)
DURS = (10, 5, 8)


def _run(path: Path, **kw):
    return analyze(path, jobs=1, decode_workers=1, **kw).check()


def _graphs(res, i: int = 0):
    g = res.traces[i].graphs
    assert g is not None
    g.check()
    return g


def test_a_sampler_softmax_beside_a_full_graph_is_not_mixed(tmp_path: Path) -> None:
    b = TraceBuilder()
    flash = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Params)"
    graph_launch(b, 0, [(flash, 10, 20), (GEMM_K, 31, 5)])
    b.op("aten::softmax", 100, 5)
    b.launch(SOFTMAX_K, 101, 1, 120, 3)  # sampling over the logits, eagerly
    assert _graphs(_run(b.write(tmp_path / "s.json"))).mode == GraphMode.REPLAY


def _launch_hints(res) -> list[str]:
    return [h.message for h in res.hints if h.rule == "launch-bound"]


def _capture_then_replays(b: TraceBuilder, layers: int, replays: int, t0: float = 0.0) -> list[list[tuple]]:
    """A capture of ``layers`` attention modules, then ``replays`` graph launches of it; returns each replay's kernels."""
    t = capture(b, t0, layers)
    out = []
    for r in range(replays):
        ks, _ = replay_kernels(t + 1000 + 500 * r, layers, KERNELS, DURS)
        graph_launch(b, t + 900 + 500 * r, ks)
        out.append(ks)
    return out


# -- the runtime calls -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,call", [
    ("cudaStreamBeginCapture", GraphCall.BEGIN_CAPTURE), ("hipStreamBeginCapture", GraphCall.BEGIN_CAPTURE),
    ("cudaStreamBeginCapture_v10000", GraphCall.BEGIN_CAPTURE), ("cuStreamBeginCapture_v2", GraphCall.BEGIN_CAPTURE),
    ("cudaStreamEndCapture", GraphCall.END_CAPTURE), ("hipStreamEndCapture", GraphCall.END_CAPTURE),
    ("cudaGraphLaunch", GraphCall.GRAPH_LAUNCH), ("hipGraphLaunch", GraphCall.GRAPH_LAUNCH),
    ("cudaGraphLaunch_v10000", GraphCall.GRAPH_LAUNCH), ("cudaGraphInstantiate", GraphCall.INSTANTIATE),
    ("hipGraphInstantiateWithFlags", GraphCall.INSTANTIATE), ("cudaStreamIsCapturing", GraphCall.CAPTURE_QUERY),
    ("hipStreamGetCaptureInfo", GraphCall.CAPTURE_QUERY), ("hipLaunchKernel", GraphCall.WORK),
    ("hipExtModuleLaunchKernel", GraphCall.WORK), ("cudaLaunchKernelExC", GraphCall.WORK),
    ("cuLaunchKernel", GraphCall.WORK), ("hipMemsetAsync", GraphCall.WORK), ("cudaMemcpyAsync", GraphCall.WORK),
    ("cudaDeviceSynchronize", None), ("cudaGraphGetNodes", None), ("hipModuleGetFunction", None),
])
def test_graph_calls_by_rule(name: str, call: GraphCall | None) -> None:
    assert graph_call(name) is call


def test_graph_call_rules_are_named_data_with_reasons() -> None:
    assert len({r.name for r in GRAPH_CALL_RULES}) == len(GRAPH_CALL_RULES) and all(r.why for r in GRAPH_CALL_RULES)


def test_capture_launches_keep_the_kernel_they_name(tmp_path: Path) -> None:
    b = TraceBuilder()
    capture(b, 0, 2)
    tr = load_trace(b.write(tmp_path / "c.json"))
    assert len(tr.graphs.captures) == 1
    cap = tr.graphs.captures[0]
    assert cap.closed and [tr.runtime[r].kernel for r in cap.launches] == list(KERNELS) * 2


# -- alignment ---------------------------------------------------------------------------------------------------

def test_align_skips_extra_memsets_and_missing_kernels() -> None:
    captured = ["a", "b", "c", "d"]
    replayed = ["a", "\0memset", "b", "d"]  # an extra memset; c was not replayed
    pairs, by_order = align(captured, replayed)
    assert pairs == [(0, 0), (1, 2), (3, 3)] and by_order == 0


def test_align_pairs_unnamed_launches_by_order_only_when_counts_agree() -> None:
    pairs, by_order = align(["\0kernel"] * 3, ["x", "y", "z"])
    assert pairs == [(0, 0), (1, 1), (2, 2)] and by_order == 3
    assert align(["\0kernel"] * 3, ["x", "y"]) == ([], 0)


# -- modes -------------------------------------------------------------------------------------------------------

def test_eager_trace_is_eager(tmp_path: Path) -> None:
    b = TraceBuilder()
    attention_block(b, 0)
    res = _run(b.write(tmp_path / "e.json"))
    g = _graphs(res)
    assert g.mode == GraphMode.EAGER and g.replayed_kernels == 0
    assert to_dict(res, "t")["traces"][0]["graphs"]["mode"] == "eager"
    assert "graphs:" not in TerminalRenderer(width=100).render_attribution(res)


def test_capture_only_reports_structure_and_no_launch_bound(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.launch(FILL_K, 0, 1, 2, 1)  # eager warm-up work before the capture: the device ran something
    capture(b, 10, 3)
    res = _run(b.write(tmp_path / "c.json"))
    g = _graphs(res)
    assert g.mode == GraphMode.CAPTURE_ONLY and g.captures == 1 and g.captured_launches == 9 and g.captured_named == 9
    assert len(res.blocks) == 3  # one per captured attention module
    for blk in res.blocks:
        assert blk.total_us == 0 and blk.span_us == 0 and blk.launch_bound is False
        assert blk.recorded == {"softmax_warp_forward": 1, GEMM_K: 1, GEMM2_K: 1}
    assert not res.totals.launch_bound and not _launch_hints(res)
    assert any("graph capture" in w for w in res.traces[0].warnings)
    text = TerminalRenderer(width=120).render_attribution(res)
    assert "graphs: capture-only" in text and "recorded into graphs" in text and "launch-bound" not in text
    assert to_dict(res, "t")["blocks"][0]["recorded"][GEMM_K] == 1


def test_capture_then_three_replays_in_one_file(tmp_path: Path) -> None:
    b = TraceBuilder()
    replays = _capture_then_replays(b, layers=2, replays=3)
    res = _run(b.write(tmp_path / "cr.json"))
    g = _graphs(res)
    assert g.mode == GraphMode.CAPTURE_REPLAY and g.graph_launches == 3
    assert g.replayed_kernels == 18 and g.mapped_kernels == 18 and g.mapped_share == 1.0
    # one block per replayed call (2 layers x 3 replays), none of them a 0 µs copy of the captured call
    assert len(res.blocks) == 6 and all(blk.total_us > 0 for blk in res.blocks)
    assert sorted({blk.name for blk in res.blocks}) == ["Attention_0", "Attention_1"]
    for blk in res.blocks:  # each call: a 10 and an 8 µs GEMM, a 5 µs softmax, 1 µs apart
        assert blk.categories["matmul"] == pytest.approx(18) and blk.categories["softmax"] == pytest.approx(5)
        assert blk.span_us == pytest.approx(25) and blk.kernels == 3
    assert sum(blk.total_us for blk in res.blocks) == pytest.approx(sum(k[2] for r in replays for k in r))
    assert not any(w.startswith("graph replay") for w in res.traces[0].warnings)


def test_replays_closer_than_the_capture_took(tmp_path: Path) -> None:
    """The capture took 82 µs of host time; its replays start 60 µs apart: their copies must not nest in each other."""
    b = TraceBuilder()
    t = capture(b, 0, 2)
    for r in range(4):
        ks, _ = replay_kernels(t + 1000 + 60 * r, 2, KERNELS, DURS)
        graph_launch(b, t + 990 + 60 * r, ks)
    res = _run(b.write(tmp_path / "close.json"))
    assert len(res.blocks) == 8 and all(blk.kernels == 3 for blk in res.blocks)


def test_two_graphs_of_different_batch_sizes(tmp_path: Path) -> None:
    small = ("gemm_bs1_kernel", SOFTMAX_K, "gemm2_bs1_kernel")
    big = ("gemm_bs8_kernel", SOFTMAX_K, "gemm2_bs8_kernel")
    b = TraceBuilder()
    t = capture(b, 0, 1, kernels=small)
    t = capture(b, t + 10, 1, kernels=big, dims=[[[8, 64, 64], [8, 64, 64]], [[8, 64, 64]], [[8, 64, 64], [8, 64, 64]]])
    expect = []
    for r, ks in enumerate((big, small, big, small)):
        evs, _ = replay_kernels(t + 1000 + 100 * r, 1, ks, DURS)
        graph_launch(b, t + 950 + 100 * r, evs)
        expect.append(ks)
    res = _run(b.write(tmp_path / "two.json"))
    g = _graphs(res)
    assert g.captures == 2 and g.mapped_kernels == g.replayed_kernels == 12
    assert len(res.blocks) == 4
    names = sorted(res.kernels)
    assert ("gemm_bs8_kernel", "matmul") in names and ("gemm_bs1_kernel", "matmul") in names


def test_replay_without_capture_says_so_and_keeps_kernel_blocks(tmp_path: Path) -> None:
    b = TraceBuilder()
    flash = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Params)"
    graph_launch(b, 0, [(flash, 10, 20), (GEMM_K, 31, 5), (flash, 40, 20)])
    res = _run(b.write(tmp_path / "r.json"))
    g = _graphs(res)
    assert g.mode == GraphMode.REPLAY and g.mapped_kernels == 0 and g.mapped_share == 0.0
    assert g.unmapped == {"pytorch_flash::flash_fwd_kernel": 2, GEMM_K: 1}
    assert len(res.blocks) == 2 and all(str(blk.found_by) == "fused-kernel" for blk in res.blocks)
    assert any("--capture" in w for w in res.traces[0].warnings)



def test_capture_from_another_file(tmp_path: Path) -> None:
    replay, cap, total = graph_pair(tmp_path)
    res = _run(replay, captures=(cap,))
    g = _graphs(res)
    assert g.mode == GraphMode.REPLAY and g.capture_sources == ["capture.json"] and g.mapped_share == 1.0
    assert [blk.name for blk in res.blocks] == ["Attention_0", "Attention_1"]
    assert sum(blk.total_us for blk in res.blocks) == pytest.approx(total)
    assert all(blk.evidence is not None and blk.evidence.core == "score-softmax-context" for blk in res.blocks)


def test_capture_traces_folder_beside_the_replay(tmp_path: Path) -> None:
    replay, cap, _ = graph_pair(tmp_path)
    folder = tmp_path / "capture_traces"
    folder.mkdir()
    cap.rename(folder / "bs_2.json")
    (folder / "execution_details.json").write_text(json.dumps(
        [{"file": "../replay.json", "batch_size": 1}, {"file": "bs_2.json", "batch_size": 2, "mode": "FULL"}]))
    res = _run(replay)
    assert _graphs(res).capture_sources == ["bs_2.json"] and _graphs(res).mapped_share == 1.0
    # a folder of a replay and its captures reads the replay only, and says why the captures were not runs
    folder_res = _run(tmp_path)
    assert len(folder_res.traces) == 1 and any("graph capture traces" in w for w in folder_res.warnings)


def test_unreadable_execution_details_falls_back_to_every_capture(tmp_path: Path) -> None:
    replay, cap, _ = graph_pair(tmp_path)
    folder = tmp_path / "capture_traces"
    folder.mkdir()
    cap.rename(folder / "bs_2.json")
    (folder / "execution_details.json").write_text("{not json")
    res = _run(replay)
    assert _graphs(res).mapped_share == 1.0
    assert any("execution_details.json" in w for w in res.traces[0].warnings)


def test_unnamed_cuda_captures_map_by_order(tmp_path: Path) -> None:
    replay, cap, _ = graph_pair(tmp_path, launch_name="cudaLaunchKernel", named=False)
    g = _graphs(_run(replay, captures=(cap,)))
    assert g.mapped_kernels == 6 and g.mapped_by_order == 6


def test_a_different_graph_is_not_mapped(tmp_path: Path) -> None:
    cap = TraceBuilder()
    capture(cap, 0, 1, kernels=(GEMM_K, "y_kernel", "z_kernel"))  # one kernel of three in common
    rep = TraceBuilder()
    ks, _ = replay_kernels(1000, 1, KERNELS, DURS)
    graph_launch(rep, 990, ks)
    g = _graphs(_run(rep.write(tmp_path / "r.json"), captures=(cap.write(tmp_path / "c.json"),)))
    assert 1 / 3 < MIN_ALIGNED_SHARE and g.mapped_kernels == 0


def test_mismatched_memset_is_left_unmapped(tmp_path: Path) -> None:
    cap = TraceBuilder()
    capture(cap, 0, 1)
    rep = TraceBuilder()
    ks, _ = replay_kernels(1000, 1, KERNELS, DURS)
    ks.insert(1, ("Memset (Device)", 1010.5, 0.5, "gpu_memset"))
    graph_launch(rep, 990, ks)
    g = _graphs(_run(rep.write(tmp_path / "r.json"), captures=(cap.write(tmp_path / "c.json"),)))
    assert g.mapped_kernels == 3 and g.replayed_kernels == 4
    assert g.mapped_us == pytest.approx(sum(DURS)) and g.replayed_us == pytest.approx(sum(DURS) + 0.5)


def test_the_loaded_trace_is_not_changed(tmp_path: Path) -> None:
    b = TraceBuilder()
    _capture_then_replays(b, layers=1, replays=2)
    tr = load_trace(b.write(tmp_path / "cr.json"))
    first = to_dict(attribute_trace(tr).check(), "t")
    assert to_dict(attribute_trace(tr).check(), "t") == first


# -- hints learn the mode ------------------------------------------------------------------------------------------

def test_launch_bound_replay_gets_no_graph_advice(tmp_path: Path) -> None:
    cap = TraceBuilder()
    capture(cap, 0, 1)
    rep = TraceBuilder()
    ks, _ = replay_kernels(1000, 1, KERNELS, DURS, gap=50)  # idle 100 of 123 µs inside the block
    graph_launch(rep, 990, ks)
    res = _run(rep.write(tmp_path / "r.json"), captures=(cap.write(tmp_path / "c.json"),))
    msgs = _launch_hints(res)
    assert len(msgs) == 1 and "already run from a CUDA/HIP graph" in msgs[0] and "capture CUDA graphs" not in msgs[0]


def test_eager_attention_beside_graphs_is_piecewise_advice(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.annotation("layer0.attention", 0, 60)
    flash = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Params)"
    for i, (op, k) in enumerate((("aten::mm", GEMM_K), ("aten::_flash_attention_forward", flash),
                                 ("aten::mm", GEMM2_K))):
        b.op(op, 1 + 10 * i, 8)
        b.launch(k, 2 + 10 * i, 1, 200 + 40 * i, 2)  # the device waits for each launch: idle 80 of 86 µs
    graph_launch(b, 70, [("triton_poi_fused_0", 400, 30), (SOFTMAX_K, 440, 5)])
    res = _run(b.write(tmp_path / "pw.json"))
    assert _graphs(res).mode == GraphMode.MIXED and _graphs(res).eager_attention_kernels == 1
    msgs = _launch_hints(res)
    assert len(msgs) == 1 and "eagerly outside them" in msgs[0]
    assert "torch.compile mode='reduce-overhead'" not in msgs[0]


# -- the shared real pairs -----------------------------------------------------------------------------------------

def _attention_calls(path: Path, op: str) -> int:
    """Our own count from the raw JSON: host ops of this name."""
    with gzip.open(path) as f:
        return sum(1 for e in json.load(f)["traceEvents"] if e.get("cat") == "cpu_op" and e.get("name") == op)


@needs_shared
@pytest.mark.parametrize("cap", [SGLANG_CAPTURE, VLLM_CAPTURES])
def test_real_captures_are_flagged(cap: Path) -> None:
    res = _run(cap)
    assert _graphs(res).mode == GraphMode.CAPTURE_ONLY
    assert not _launch_hints(res) and not any(h.message.count("capture CUDA graphs") for h in res.hints)


@needs_shared
def test_sglang_decode_replay_maps_to_its_capture() -> None:
    res = _run(SGLANG)  # capture_traces/ beside it is picked up
    g = _graphs(res)
    assert g.mode == GraphMode.REPLAY and g.mapped_share >= 0.95
    # Qwen3-8B has 36 decoder layers: one attention call each in the one replayed decode step
    assert len(res.blocks) == 36 and {b.kind for b in res.blocks} == {"RadixAttention"}
    assert all(b.total_us > 0 for b in res.blocks)
    assert _attention_calls(SGLANG_CAPTURE, "sglang::store_cache") == 36


@needs_shared
def test_vllm_piecewise_replay_maps_its_pieces() -> None:
    res = _run(VLLM)
    g = _graphs(res)
    assert g.mode == GraphMode.MIXED and g.mapped_share >= 0.95 and g.eager_attention_kernels > 0
    calls = _attention_calls(VLLM, "vllm::unified_attention_with_output")
    assert calls == 24 and len(res.blocks) == calls


# -- the diff --------------------------------------------------------------------------------------------------------


def test_diff_eager_against_replay_pairs_by_mapped_ops(tmp_path: Path) -> None:
    from tracekit import diff

    eager = TraceBuilder()
    eager_layers(eager, 2)
    replay, cap, _ = graph_pair(tmp_path)
    (tmp_path / "capture_traces").mkdir()
    cap.rename(tmp_path / "capture_traces" / "capture.json")  # beside the replay, as TraceLens lays them out
    (tmp_path / "capture_traces" / "execution_details.json").write_text('[{"file": "capture.json"}]')
    r = diff(eager.write(tmp_path / "eager.json"), replay, jobs=1)
    assert r is not None
    # the replay has no host op of its own: the pairs exist only because its kernels were mapped to Attention_i
    assert sorted(p.before.name for p in r.pairs) == ["Attention_0", "Attention_1"]
    assert all(p.before.name == p.after.name for p in r.pairs)
    assert r.after_figures.span_us == pytest.approx(2 * 25)  # each replayed call: 10 + 1 + 5 + 1 + 8 µs
    assert "after replays CUDA/HIP graphs" in r.no_claim and "capture CUDA graphs" not in r.no_claim


def test_unmapped_replay_beside_its_capture_is_one_block_per_call(tmp_path: Path) -> None:
    """A capture whose launches name nothing that the replay ran (a profiler lost them): no mapping, and still no
    0 µs captured call beside the replayed one."""
    b = TraceBuilder()
    t = capture(b, 0, 1, kernels=("x_kernel", "y_kernel", "z_kernel"))
    flash = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Params)"
    graph_launch(b, t + 100, [(flash, t + 200, 20)])
    res = _run(b.write(tmp_path / "cr.json"))
    g = _graphs(res)
    assert g.mode == GraphMode.CAPTURE_REPLAY and g.mapped_kernels == 0
    assert len(res.blocks) == 1 and res.blocks[0].total_us == pytest.approx(20)


def test_identical_pieces_map_in_capture_order(tmp_path: Path) -> None:
    """Piecewise graphs: one capture per layer, all with the same kernels. Replayed in order, each replay belongs to
    its own layer's capture, not all to the first."""
    b = TraceBuilder()
    t = 0.0
    for i in range(3):
        b._x("cuda_runtime", "hipStreamBeginCapture", t, 1, 100, 1, correlation=0)
        captured_attention(b, t + 2, name=f"Attention_{i}")
        b._x("cuda_runtime", "hipStreamEndCapture", t + 40, 1, 100, 1, correlation=0)
        t += 50
    for r in range(3):
        ks, _ = replay_kernels(1000 + 100 * r, 1, KERNELS, DURS)
        graph_launch(b, 990 + 100 * r, ks)
    res = _run(b.write(tmp_path / "pw.json"))
    assert sorted(blk.name for blk in res.blocks) == ["Attention_0", "Attention_1", "Attention_2"]


def test_capture_warm_up_gets_no_launch_bound_hint(tmp_path: Path) -> None:
    """A capture trace runs each call once eagerly first (warm-up), with launch gaps: still no advice to act on."""
    b = TraceBuilder()
    b.module("Attention_w", 0, 200)
    for i, (op, k) in enumerate((("aten::bmm", GEMM_K), ("aten::_softmax", SOFTMAX_K), ("aten::bmm", GEMM2_K))):
        b.op(op, 1 + 10 * i, 8)
        b.launch(k, 2 + 10 * i, 1, 20 + 60 * i, 2)  # idle 120 of 126 µs
    capture(b, 300, 1)
    res = _run(b.write(tmp_path / "cw.json"))
    assert _graphs(res).mode == GraphMode.CAPTURE_ONLY
    warm = [blk for blk in res.blocks if blk.kernels]
    assert len(warm) == 1 and warm[0].launch_bound  # the figure stays as measured
    assert not _launch_hints(res)


def test_a_damaged_capture_is_said_and_exits_3(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tracekit.cli import cli

    replay, cap, _ = graph_pair(tmp_path)
    raw = cap.read_bytes()
    cut = raw.rindex(b'{"ph"')  # cut inside the last event: the reader salvages the rest
    damaged = tmp_path / "damaged.json"
    damaged.write_bytes(raw[:cut + 20])
    out = CliRunner().invoke(cli, ["attribute", str(replay), "--capture", str(damaged), "--format", "json"])
    assert out.exit_code == 3, out.output
    doc = json.loads(out.stdout)
    assert any("damaged" in w for w in doc["traces"][0]["warnings"])
    missing = CliRunner().invoke(cli, ["attribute", str(replay), "--capture", str(tmp_path / "nope.json")])
    assert missing.exit_code == 1 and "nope.json" in missing.output and "Traceback" not in missing.output
