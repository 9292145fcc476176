"""CUDA/HIP graphs (issue 23): captures are told from runs, and replayed kernels are mapped to the ops that captured
them. Hand-built traces know their answer by construction: which kernels each replay ran and for how long."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.builders import (
    FILL_K, GEMM2_K, GEMM_K, SOFTMAX_K, TraceBuilder, attention_block, capture, captured_attention, eager_layers,
    graph_launch, graph_pair, replay_kernels,
)
from support.paths import GRAPHS

from tracekit import analyze
from tracekit.analysis.attribute import attribute_trace
from tracekit.analysis.graphs import MIN_ALIGNED_SHARE, align
from tracekit.io.graphs import GRAPH_CALL_RULES, GraphCall, graph_call
from tracekit.io.load import load_trace
from tracekit.renderers.jsonrenderer import to_dict
from tracekit.renderers.terminal import TerminalRenderer
from tracekit.vocab import GraphMode
from tracekit.analysis.graphs import COPY, FILL, UNNAMED_KERNEL, capture_token
from tracekit.model import RuntimeEvent
from array import array
from types import SimpleNamespace
from support.builders import CPU_PID, TID
from support.traces import read_events
from tracekit.analysis.graphs import (
    REPLAY_PROCESS, ReplayMap, _around, _Chooser, _Synth, device_token, graph_warnings, replay_threads,
    replay_with_captures, summarize, templates,
)
from tracekit.model import (
    MODULE, OP, CaptureRegion, DeviceEvent, GraphFacts, GraphLaunch, HostEvent, OpInputs, Trace, TraceInfo,
)
from tracekit.results.attribution import GraphSummary

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
    """A capture of ``layers`` attention modules, then ``replays`` graph launches of it; returns each replay's
    kernels."""
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
    return sum(1 for e in read_events(path, cats=("cpu_op",)) if e.get("name") == op)


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


# ---------------------------------------------------------------------------------------------
# Graph mapping's smallest rules on hand-made inputs: what a captured launch recorded, and how two token sequences
# align. Each expectation follows from the rule's text

def _rt(name: str, kernel: str = "") -> RuntimeEvent:
    return RuntimeEvent(name=name, thread=1, ts=0, dur=1, correlation=1, ext_id=0, kernel=kernel)


@pytest.mark.parametrize("name,kernel,want", [
    ("cudaMemcpyAsync", "", COPY),
    ("hipMemcpyWithStream", "", COPY),
    ("cudaMemsetAsync", "", FILL),
    ("hipMemsetD32Async", "", FILL),
    ("cudaLaunchKernel", "", UNNAMED_KERNEL),
    ("hipLaunchKernel", "my_kernel", "my_kernel"),  # a HIP launch names its kernel: the name is the token
    ("hipMemcpyAsync", "copy_kernel", "copy_kernel"),
])
def test_capture_token(name, kernel, want):
    assert capture_token(_rt(name, kernel)) == want


def test_align_pairs_the_matching_runs_and_the_equal_gaps():
    """A · [two unnamed] · B against A · [two named] · B: the named runs pair, and the equal-length gap of unnamed
    launches pairs by position (counted apart)."""
    captured = ["A", UNNAMED_KERNEL, UNNAMED_KERNEL, "B"]
    replayed = ["A", "k1", "k2", "B"]
    pairs, by_order = align(captured, replayed)
    assert sorted(pairs) == [(0, 0), (1, 1), (2, 2), (3, 3)] and by_order == 2


def test_align_leaves_unequal_or_named_gaps_unpaired():
    pairs, by_order = align(["A", UNNAMED_KERNEL, "B"], ["A", "k1", "k2", "B"])
    assert sorted(pairs) == [(0, 0), (2, 3)] and by_order == 0
    pairs, by_order = align(["A", "C", "B"], ["A", "k1", "B"])  # a named launch never pairs with another name
    assert sorted(pairs) == [(0, 0), (2, 2)] and by_order == 0


def test_align_keeps_frequent_tokens_in_long_sequences():
    """300 launches of one kernel (a decode graph): difflib's autojunk would call the token junk and match
    nothing; every launch must pair."""
    captured = ["gemm"] * 150 + ["X"] + ["gemm"] * 150
    replayed = ["gemm"] * 150 + ["Y"] + ["gemm"] * 150  # one kernel differs: both runs of 150 still pair
    pairs, _ = align(captured, replayed)
    assert len(pairs) == 300 and (151, 151) in pairs


def test_align_pairs_every_gap_by_its_own_bounds():
    """Two gaps: the second starts after the first matched run (its own start, not the sequence's)."""
    captured = ["A", UNNAMED_KERNEL, "B", UNNAMED_KERNEL, "C"]
    replayed = ["A", "k1", "B", "k2", "C"]
    pairs, by_order = align(captured, replayed)
    assert sorted(pairs) == [(k, k) for k in range(5)] and by_order == 2


def test_an_unnamed_launch_never_pairs_with_a_copy_or_fill():
    for kind in (COPY, FILL):
        pairs, by_order = align(["A", UNNAMED_KERNEL, "B"], ["A", kind, "B"])
        assert sorted(pairs) == [(0, 0), (2, 2)] and by_order == 0


# ---------------------------------------------------------------------------------------------
# Replay mapping on Traces built by hand from the model's own records (ns), with their GraphFacts given, so every
# index, time and correlation id of the rewritten trace is worked out in the test: which captured host events a
# replay copies, where the copies land, the launches added for them, the device events re-pointed to those, and the
# capture's own ops dropped with everything that indexes host renumbered

X0, X2, X4 = (OpInputs(dims=f"[[{n}]]".encode(), types=b'["float"]', concrete=b"") for n in (0, 2, 4))


def _h(kind: int, name: str, ts: int, dur: int, thread: int = 0) -> HostEvent:
    return HostEvent(kind, name, thread, ts, dur, 0)


def _rtc(name: str, ts: int, dur: int, corr: int, kernel: str = "", thread: int = 0) -> RuntimeEvent:
    return RuntimeEvent(name, thread, ts, dur, corr, 0, kernel)


def _k(name: str, ts: int, dur: int, corr: int, ext: int = 0, kind: str = "kernel") -> DeviceEvent:
    return DeviceEvent(kind, name, 0, ts, dur, corr, ext)


def _capture_and_two_replays() -> Trace:
    """One file: an eager add (host 0, launched at 1, its kernel corr 5), a capture 90..200 on thread 0 of an
    Attention module (host 1, 100..130) around a bmm (2, 101..109, inputs X2) and a softmax (3, 110..118), whose
    launches at 102 and 111 record kernels "gemm" and "soft"; an eager mul (4, at 300). Then two graph launches,
    at 1000 (corr 8: gemm 1010, soft 1021) and 1030 (corr 11: gemm 1050, soft 1061), and one device event with
    no call (corr 20). The replayed kernels carry external ids (3, 4) that the re-pointing clears. Sequence numbers
    on ops 0, 2, 3, 4 (7..10, forward threads 70..100)."""
    host = [_h(OP, "aten::add", 0, 5), _h(MODULE, "nn.Module: Attention_0", 100, 30), _h(OP, "aten::bmm", 101, 8),
            _h(OP, "aten::_softmax", 110, 8), _h(OP, "aten::mul", 300, 5)]
    runtime = [_rtc("cudaLaunchKernel", 1, 1, 5), _rtc("hipLaunchKernel", 102, 2, 6, "gemm"),
               _rtc("hipLaunchKernel", 111, 2, 7, "soft"), _rtc("hipGraphLaunch", 1000, 5, 8),
               _rtc("hipGraphLaunch", 1030, 5, 11)]
    device = [_k("add_k", 10, 3, 5, ext=2), _k("gemm", 1010, 10, 8, ext=3), _k("soft", 1021, 5, 8, ext=3),
              _k("gemm", 1050, 10, 11, ext=4), _k("soft", 1061, 5, 11, ext=4), _k("lost", 2000, 1, 20)]
    facts = GraphFacts(captures=[CaptureRegion(thread=0, begin=90, end=200, launches=[1, 2], closed=True)],
                       launches=[GraphLaunch(runtime=3, device=[1, 2]), GraphLaunch(runtime=4, device=[3, 4])])
    return Trace(info=TraceInfo(source="cr.json"), threads=[("proc", 1)], streams=[("dev", 7)], host=host,
                 runtime=runtime, device=device, op_inputs={0: X0, 2: X2, 4: X4}, graphs=facts,
                 seq_host=array("q", [0, 2, 3, 4]), seq_nr=array("q", [7, 8, 9, 10]),
                 seq_fwd=array("q", [70, 80, 90, 100]), dropped={"bad": 1}, names=frozenset(h.name for h in host))


def test_replays_copy_the_captured_tree_shifted_to_each_launch():
    """Replay 1 (launch 1000): offset 1000 - 90 (the capture's start) = 910, so the copies sit at 1010, 1011, 1020
    on a new replay thread 1, ending at 130 + 910 = 1040. Replay 2 (launch 1030) would start at 1030 - 90 = 940,
    inside the first copy: it waits for that copy's end + 1 ns, 1041, so its offset is 1041 - 100 = 941."""
    tr = _capture_and_two_replays()
    out, rm = replay_with_captures(tr)
    assert out.threads == [("proc", 1), (REPLAY_PROCESS, "cr.json capture 0")] and replay_threads(out) == {1}
    # the capture's own ops (1, 2, 3) are dropped; the eager add and mul stay first, then the copies
    assert [(h.kind, h.name, h.thread, h.ts, h.dur, h.ext_id) for h in out.host] == [
        (OP, "aten::add", 0, 0, 5, 0), (OP, "aten::mul", 0, 300, 5, 0),
        (MODULE, "nn.Module: Attention_0", 1, 1010, 30, 0), (OP, "aten::bmm", 1, 1011, 8, 0),
        (OP, "aten::_softmax", 1, 1020, 8, 0),
        (MODULE, "nn.Module: Attention_0", 1, 1041, 30, 0), (OP, "aten::bmm", 1, 1042, 8, 0),
        (OP, "aten::_softmax", 1, 1051, 8, 0)]
    # inputs follow their ops: add 0 -> 0, mul 4 -> 1, the copies' bmm (at 6 and 9 before the drop) -> 3 and 6
    assert out.op_inputs == {0: X0, 1: X4, 3: X2, 6: X2}
    # sequence numbers of dropped ops go; the rest point at the renumbered ops
    assert (list(out.seq_host), list(out.seq_nr), list(out.seq_fwd)) == ([0, 1], [7, 10], [70, 100])
    assert all(isinstance(a, array) and a.typecode == "q" for a in (out.seq_host, out.seq_nr, out.seq_fwd))
    # one launch per paired kernel, on the replay thread at the captured call's time + offset; fresh correlation
    # ids from 1 + the largest in the trace (20, the call-less device event): 21..24; the kernels' external ids
    # (which would tie them to the capture's own ops) are cleared
    assert out.runtime[:5] == tr.runtime
    assert [(r.name, r.thread, r.ts, r.dur, r.correlation, r.ext_id, r.kernel) for r in out.runtime[5:]] == [
        ("hipLaunchKernel", 1, 1012, 2, 21, 0, "gemm"), ("hipLaunchKernel", 1, 1021, 2, 22, 0, "soft"),
        ("hipLaunchKernel", 1, 1043, 2, 23, 0, "gemm"), ("hipLaunchKernel", 1, 1052, 2, 24, 0, "soft")]
    assert [(d.name, d.ts, d.dur, d.correlation, d.ext_id) for d in out.device] == [
        ("add_k", 10, 3, 5, 2), ("gemm", 1010, 10, 21, 0), ("soft", 1021, 5, 22, 0), ("gemm", 1050, 10, 23, 0),
        ("soft", 1061, 5, 24, 0), ("lost", 2000, 1, 20, 0)]
    assert rm.replayed == [1, 2, 3, 4] and rm.mapped == {1, 2, 3, 4} and rm.by_order == 0
    assert rm.sources == ["cr.json"] and rm.used == {("cr.json", 0)}
    assert out.names == tr.names  # the copies' names were the trace's already


def test_the_input_trace_and_its_shared_parts_are_kept():
    """The rewrite is a copy: the input's lists are untouched, and what the rewrite does not change is the input's
    own (streams, annotations, memory, flows, dropped counts, graph facts, info)."""
    tr = _capture_and_two_replays()
    before = (list(tr.host), list(tr.runtime), list(tr.device), dict(tr.op_inputs), list(tr.threads),
              list(tr.seq_host), list(tr.seq_nr), list(tr.seq_fwd))
    out, _ = replay_with_captures(tr)
    assert (tr.host, tr.runtime, tr.device, tr.op_inputs, tr.threads, list(tr.seq_host), list(tr.seq_nr),
            list(tr.seq_fwd)) == before
    assert out.info is tr.info and out.streams is tr.streams and out.graphs is tr.graphs
    assert out.gpu_annotations is tr.gpu_annotations and out.memory is tr.memory and out.flows is tr.flows
    assert out.dropped is tr.dropped and out.dropped == {"bad": 1}


def test_a_trace_without_replays_or_captures_is_returned_as_is():
    tr = _capture_and_two_replays()
    tr.graphs = GraphFacts(captures=tr.graphs.captures, launches=[])  # a capture, nothing replayed
    out, rm = replay_with_captures(tr)
    assert out is tr and rm.replayed == [] and not rm.mapped
    tr.graphs = GraphFacts(launches=[GraphLaunch(runtime=3, device=[1, 2])])  # a replay, no capture anywhere
    out, rm = replay_with_captures(tr)
    assert out is tr and rm.replayed == [1, 2] and not rm.mapped and rm.sources == []


def _replay_only(launch_at: int = 990) -> Trace:
    """A replay file: one graph launch at ``launch_at`` (corr 30) of gemm 1000 and soft 1011, a stream sync call
    with corr 40 (no device event) and no host ops."""
    runtime = [_rtc("hipGraphLaunch", launch_at, 5, 30), _rtc("hipStreamSynchronize", 1100, 5, 40)]
    device = [_k("gemm", 1000, 10, 30), _k("soft", 1011, 5, 30)]
    facts = GraphFacts(launches=[GraphLaunch(runtime=0, device=[0, 1])])
    return Trace(info=TraceInfo(source="replay.json"), threads=[("proc", 1)], runtime=runtime, device=device,
                 graphs=facts, names=frozenset({"hipGraphLaunch"}))


def _capture_file(with_host: bool = True) -> Trace:
    """A capture file: capture 0..100 on thread 0 with an Attention module 10..40 holding a bmm 11..19 (inputs
    X2) that launches "gemm" at 12, and a softmax 20..28 launching "soft" at 21 (or no host ops at all)."""
    host = [_h(MODULE, "nn.Module: Attention_0", 10, 30), _h(OP, "aten::bmm", 11, 8), _h(OP, "aten::_softmax", 20, 8)]
    runtime = [_rtc("hipLaunchKernel", 12, 2, 1, "gemm"), _rtc("hipLaunchKernel", 21, 2, 2, "soft")]
    facts = GraphFacts(captures=[CaptureRegion(thread=0, begin=0, end=100, launches=[0, 1], closed=True)])
    return Trace(info=TraceInfo(source="cap.json"), threads=[("proc", 1)], host=host if with_host else [],
                 runtime=runtime, op_inputs={1: X2} if with_host else {}, graphs=facts)


def test_a_capture_from_another_file():
    """Offset 990 - 0 = 990: copies at 1000, 1001, 1010 on thread 1 (thread 0 is the replay's own); launches at
    1002 and 1011 with correlation ids from 1 + 40 (the sync call's, the largest): 41, 42. The replay's own host
    list was empty, so nothing is dropped, and its names gain the capture's."""
    out, rm = replay_with_captures(_replay_only(), [_capture_file()])
    assert out.threads[1] == (REPLAY_PROCESS, "cap.json capture 0")
    assert [(h.name, h.thread, h.ts) for h in out.host] == [
        ("nn.Module: Attention_0", 1, 1000), ("aten::bmm", 1, 1001), ("aten::_softmax", 1, 1010)]
    assert out.op_inputs == {1: X2}
    assert [(r.ts, r.correlation, r.kernel, r.thread) for r in out.runtime[2:]] == [(1002, 41, "gemm", 1),
                                                                                 (1011, 42, "soft", 1)]
    assert [d.correlation for d in out.device] == [41, 42]
    assert out.names == {"hipGraphLaunch", "nn.Module: Attention_0", "aten::bmm", "aten::_softmax"}
    assert rm.sources == ["cap.json"] and rm.used == {("cap.json", 0)}


def test_a_capture_whose_launches_no_host_op_holds():
    """No host op around the captured launches: nothing is copied, and the launches shift by the graph launch's
    distance from the capture's start (990 - 0): 1002 and 1011."""
    out, rm = replay_with_captures(_replay_only(), [_capture_file(with_host=False)])
    assert out.host == [] and rm.mapped == {0, 1}
    assert [(r.ts, r.correlation) for r in out.runtime[2:]] == [(1002, 41), (1011, 42)]


def test_a_later_launch_is_not_moved_before_its_own_time():
    """Launch at 5000: offset 5000 (the copies at 5010, 5011, 5020), not the thread's free time."""
    out, _ = replay_with_captures(_replay_only(5000), [_capture_file()])
    assert [h.ts for h in out.host] == [5010, 5011, 5020]


def test_traces_without_graph_facts_are_read_for_them():
    """Neither file carries GraphFacts: the replay's graph launch (corr 30) and the capture's begin/end pair are
    found from their runtime calls, and the mapping is the one of test_a_capture_from_another_file."""
    rep = _replay_only()
    rep.graphs = None
    cap = _capture_file()
    cap.graphs = None
    cap.runtime = [_rtc("hipStreamBeginCapture", 0, 1, 0), *cap.runtime, _rtc("hipStreamEndCapture", 99, 1, 0)]
    out, rm = replay_with_captures(rep, [cap])
    assert [(h.name, h.ts) for h in out.host] == [("nn.Module: Attention_0", 1000), ("aten::bmm", 1001),
                                                  ("aten::_softmax", 1010)]
    assert rm.mapped == {0, 1} and [d.correlation for d in out.device] == [41, 42]


def _unnamed_capture(source: str = "cap.json") -> Trace:
    """A CUDA capture 0..100: an op 10..40 launching two kernels (at 12 and 21) whose names the calls do not say."""
    runtime = [_rtc("cudaLaunchKernel", 12, 2, 1), _rtc("cudaLaunchKernel", 21, 2, 2)]
    facts = GraphFacts(captures=[CaptureRegion(thread=0, begin=0, end=100, launches=[0, 1], closed=True)])
    return Trace(info=TraceInfo(source=source), host=[_h(OP, "aten::mm", 10, 30)], runtime=runtime, graphs=facts)


def test_launches_that_ran_nothing_or_align_to_nothing_are_skipped():
    """Four graph launches of an unnamed two-kernel capture: one ran no device event, one ran three kernels (no
    pairing by position: the counts differ, and nothing else aligns), then two ran two kernels each: those map by
    position, 2 + 2 = 4 pairs by order."""
    runtime = [_rtc("cudaGraphLaunch", 100 * n, 5, 30 + n) for n in range(4)]
    device = [_k("x", 110, 5, 31), _k("y", 120, 5, 31), _k("z", 130, 5, 31),
              _k("g", 210, 5, 32), _k("s", 220, 5, 32), _k("g", 310, 5, 33), _k("s", 320, 5, 33)]
    facts = GraphFacts(launches=[GraphLaunch(runtime=0, device=[]), GraphLaunch(runtime=1, device=[0, 1, 2]),
                                 GraphLaunch(runtime=2, device=[3, 4]), GraphLaunch(runtime=3, device=[5, 6])])
    tr = Trace(info=TraceInfo(source="r.json"), threads=[("proc", 1)], runtime=runtime, device=device, graphs=facts)
    out, rm = replay_with_captures(tr, [_unnamed_capture()])
    assert rm.mapped == {3, 4, 5, 6} and rm.by_order == 4 and rm.replayed == [0, 1, 2, 3, 4, 5, 6]
    # the mm op copied twice, at 200 + 10 and 300 + 10 (offset: the launch's distance from the capture's start)
    assert [(h.name, h.ts) for h in out.host] == [("aten::mm", 210), ("aten::mm", 310)]


def test_each_capture_replays_on_a_thread_of_its_own():
    """Two capture files (a.json with gemm, soft; b.json with g2, s2) and a launch of each: two replay threads,
    one per capture, each holding its own copies."""
    a = _capture_file()
    a.info = TraceInfo(source="a.json")
    b = _capture_file()
    b.info = TraceInfo(source="b.json")
    b.runtime = [_rtc("hipLaunchKernel", 12, 2, 1, "g2"), _rtc("hipLaunchKernel", 21, 2, 2, "s2")]
    runtime = [_rtc("hipGraphLaunch", 990, 5, 30), _rtc("hipGraphLaunch", 1990, 5, 31)]
    device = [_k("gemm", 1000, 10, 30), _k("soft", 1011, 5, 30), _k("g2", 2000, 10, 31), _k("s2", 2011, 5, 31)]
    facts = GraphFacts(launches=[GraphLaunch(runtime=0, device=[0, 1]), GraphLaunch(runtime=1, device=[2, 3])])
    tr = Trace(info=TraceInfo(source="r.json"), threads=[("proc", 1)], runtime=runtime, device=device, graphs=facts)
    out, rm = replay_with_captures(tr, [a, b])
    assert out.threads[1:] == [(REPLAY_PROCESS, "a.json capture 0"), (REPLAY_PROCESS, "b.json capture 0")]
    assert [(h.thread, h.ts) for h in out.host] == [(1, 1000), (1, 1001), (1, 1010), (2, 2000), (2, 2001), (2, 2010)]
    assert [r.thread for r in out.runtime[2:]] == [1, 1, 2, 2]
    assert rm.sources == ["a.json", "b.json"] and rm.used == {("a.json", 0), ("b.json", 0)}


def test_fresh_correlation_ids_start_at_one_in_an_empty_trace():
    """No call and no device event: the first id handed out is 1 (1 + nothing)."""
    assert _Synth(Trace(info=TraceInfo(source="e"))).corr == 1
    assert _Synth(Trace(info=TraceInfo(source="e"), device=[_k("k", 0, 1, 7)])).corr == 8
    assert _Synth(Trace(info=TraceInfo(source="e"), runtime=[_rtc("c", 0, 1, 9)])).corr == 10


def test_names_stay_none_when_the_loader_kept_none():
    tr = _replay_only()
    tr.names = None
    out, _ = replay_with_captures(tr, [_capture_file()])
    assert out.names is None


# -- templates ----------------------------------------------------------------------------------------------------


def test_templates_take_the_host_events_wholly_inside_the_capture_on_its_thread():
    """Capture 100..200 on thread 0. In: an op starting at the capture's start (100), one at 150, and a 0 ns op
    at its very end (200). Out: one before it (90), one that ends after it (190 + 20), one on thread 1 (150), and
    one after it (201). The template keeps them in time order, outer first (120 with 30 ns before 120 with 5)."""
    host = [_h(OP, "aten::a", 90, 5), _h(OP, "aten::in0", 100, 10), _h(OP, "aten::inner", 120, 5),
            _h(MODULE, "nn.Module: M", 120, 30), _h(OP, "aten::late", 190, 20), _h(OP, "aten::other", 150, 5, 1),
            _h(OP, "aten::end", 200, 0), _h(OP, "aten::after", 201, 1)]
    runtime = [_rtc("hipLaunchKernel", 121, 1, 1, "k")]
    facts = GraphFacts(captures=[CaptureRegion(thread=0, begin=100, end=200, launches=[0], closed=True)])
    tr = Trace(info=TraceInfo(source="t.json"), host=host, runtime=runtime, op_inputs={2: X2, 0: X0}, graphs=facts)
    (tp,) = templates(tr, "t.json")
    assert tp.host_index == [1, 3, 2, 6]
    assert [h.name for h in tp.host] == ["aten::in0", "nn.Module: M", "aten::inner", "aten::end"]
    assert tp.inputs == {2: X2} and tp.begin == 100 and tp.index == 0 and tp.source == "t.json"
    assert tp.tokens == ("k",) and tp.launches == runtime
    assert tp.around == [[1, 2]]  # the launch at 121 sits in M (120..150) and in aten::inner (120..125)
    assert tp.names == {"aten::in0", "nn.Module: M", "aten::inner", "aten::end"}
    assert templates(Trace(info=TraceInfo(source="e"), graphs=GraphFacts()), "e") == []
    # facts given by the caller win over the trace's own (here: none)
    tr.graphs = GraphFacts()
    assert templates(tr, "t.json") == []
    assert [t.host_index for t in templates(tr, "t.json", facts)] == [[1, 3, 2, 6]]


def test_templates_find_the_captures_when_the_trace_has_no_facts():
    """No GraphFacts on the trace: the runtime calls are read for them (a begin/end capture pair around a launch
    at 12, inside the op 10..20)."""
    runtime = [_rtc("hipStreamBeginCapture", 0, 1, 0), _rtc("hipLaunchKernel", 12, 2, 1, "k"),
               _rtc("hipStreamEndCapture", 99, 1, 0)]
    tr = Trace(info=TraceInfo(source="t.json"), host=[_h(OP, "aten::mm", 10, 10)], runtime=runtime)
    (tp,) = templates(tr, "t.json")
    assert tp.host_index == [0] and tp.tokens == ("k",) and tp.begin == 0
    assert templates(Trace(info=TraceInfo(source="e"), runtime=[_rtc("cudaLaunchKernel", 0, 1, 1)]), "e") == []


# -- _around ------------------------------------------------------------------------------------------------------


def test_around_is_the_stack_of_host_events_holding_each_launch():
    """Module 0..100 holds op A 10..30 and op B 30..50, and a 0 ns op Z at 60. Launches: at 20 (in A); at 30, where
    B starts as A ends (B's start closes A: the call is B's); at 40 (in B); at 61 (Z and B are over, the module
    holds it); at 101 (after everything)."""
    host = [_h(MODULE, "M", 0, 100), _h(OP, "A", 10, 20), _h(OP, "B", 30, 20), _h(OP, "Z", 60, 0)]
    launches = [_rtc("l", t, 1, 1) for t in (20, 30, 40, 61, 101)]
    assert _around(host, launches) == [[0, 1], [0, 2], [0, 2], [0], []]


def test_around_a_zero_duration_op_does_not_close_its_neighbours():
    """Op A 0..10, then a 0 ns op Z at 10 and a launch at 10: A (ending at 10) is not closed by Z, which has no
    length, and is still open at the call (its end is not before 10)."""
    host = [_h(OP, "A", 0, 10), _h(OP, "Z", 10, 0)]
    assert _around(host, [_rtc("l", 10, 1, 1)]) == [[0, 1]]
    host = [_h(OP, "A", 0, 10), _h(OP, "B", 10, 5)]  # a real op at 10 does close A
    assert _around(host, [_rtc("l", 12, 1, 1)]) == [[1]]
    host = [_h(OP, "A", 0, 10), _h(OP, "B", 10, 1)]  # so does one of 1 ns
    assert _around(host, [_rtc("l", 10, 1, 1)]) == [[1]]


# -- device_token and the chooser ------------------------------------------------------------------------------------


def test_device_tokens():
    dev = [_k("gemm", 0, 1, 1), _k("Memcpy DtoD", 0, 1, 1, kind="memcpy"), _k("Memset (Device)", 0, 1, 1,
                                                                             kind="memset"),
           _k("odd", 0, 1, 1, kind="cuda_driver")]
    tr = Trace(info=TraceInfo(source="d"), device=dev)
    assert [device_token(tr, j) for j in range(4)] == ["gemm", COPY, FILL, "odd"]


def _chooser(*tokens: tuple[str, ...]) -> _Chooser:
    return _Chooser([SimpleNamespace(tokens=t) for t in tokens])  # type: ignore[misc]


def test_identical_captures_are_taken_in_capture_order():
    """Captures 0 and 2 record the same graph, 1 another: replays of it go 0, 2, then round to 0 again."""
    ch = _chooser(("a", "b"), ("c",), ("a", "b"))
    got = [ch.choose(("a", "b")) for _ in range(3)]
    assert [g[0] for g in got] == [0, 2, 0]
    assert got[0][1:] == ([(0, 0), (1, 1)], 0)
    assert ch.choose(("c",))[0] == 1
    assert ch.choose(("a", "b"))[0] == 2  # after 1: the next of the group past it


def test_the_best_alignment_wins():
    """Replay a, b, c: capture 0 (a, b, x) pairs 2, capture 1 (a, b, c, d) pairs 3: capture 1."""
    t, pairs, by_order = _chooser(("a", "b", "x"), ("a", "b", "c", "d")).choose(("a", "b", "c"))
    assert (t, sorted(pairs), by_order) == (1, [(0, 0), (1, 1), (2, 2)], 0)


def test_named_pairs_beat_pairs_by_position():
    """Replay k, b: capture 0 (unnamed, b) pairs both, one by position; capture 1 (k, b, e) pairs both by name
    though its length differs: capture 1."""
    t, pairs, by_order = _chooser((UNNAMED_KERNEL, "b"), ("k", "b", "e")).choose(("k", "b"))
    assert (t, sorted(pairs), by_order) == (1, [(0, 0), (1, 1)], 0)
    t, pairs, by_order = _chooser((UNNAMED_KERNEL, "b")).choose(("k", "b"))
    assert (t, sorted(pairs), by_order) == (0, [(0, 0), (1, 1)], 1)


def test_equal_scores_go_to_the_larger_bound_first():
    """Replay a, b, c: capture 0 (a, b, d) could match 2, capture 1 (c, a, b) 3 (its c is out of order). Both
    align a, b (2 named pairs, equal lengths): a tie, which the candidate tried first keeps, capture 1."""
    t, pairs, _ = _chooser(("a", "b", "d"), ("c", "a", "b")).choose(("a", "b", "c"))
    assert (t, sorted(pairs)) == (1, [(1, 0), (2, 1)])


def test_a_candidate_with_fewer_pairs_by_position_is_still_tried():
    """Replay a, a2, k1, k2, e, c. Capture 0 (c, a, a2, U, U, e): bound 4 (a, a2, e, c), aligning a, a2, e by name
    and the two unnamed launches by position: 3 named of 5 pairs. Capture 1 (a, a2, e, c): bound 4, 4 named.
    Capture 1 must still be aligned after capture 0 (its bound 4 is not below capture 0's 3 named pairs, though it
    is below its 5 pairs), and wins on named pairs."""
    c0 = ("c", "a", "a2", UNNAMED_KERNEL, UNNAMED_KERNEL, "e")
    replay = ("a", "a2", "k1", "k2", "e", "c")
    t, pairs, by_order = _chooser(c0).choose(replay)
    assert (t, sorted(pairs), by_order) == (0, [(1, 0), (2, 1), (3, 2), (4, 3), (5, 4)], 2)
    t, pairs, by_order = _chooser(c0, ("a", "a2", "e", "c")).choose(replay)
    assert (t, sorted(pairs), by_order) == (1, [(0, 0), (1, 1), (2, 4), (3, 5)], 0)


def test_a_weak_first_candidate_does_not_stop_the_search():
    """Replay a, b, c. Captures 0-2 share nothing with it; capture 3 (c, b, a) could match 3 but aligns 1;
    capture 4 (a, b, x) could match 2 and aligns 2: capture 4 (an alignment of 1 of 3 would be no mapping)."""
    t, _, _ = _chooser(("z",), ("y",), ("w",), ("c", "b", "a"), ("a", "b", "x")).choose(("a", "b", "c"))
    assert t == 4


def test_equal_pairs_go_to_the_closest_length_longer_or_shorter():
    """Replay a, b, q, r: capture 0 (a, b) is two launches shorter, capture 1 (a, b, y, z, w) one longer: 1."""
    t, _, _ = _chooser(("a", "b"), ("a", "b", "y", "z", "w")).choose(("a", "b", "q", "r"))
    assert t == 1


def test_equal_pairs_go_to_the_closest_length():
    """Replay a, b, q: both captures pair a and b by name (bound 2 each); capture 0 (a, b, z, z, z) is two
    launches longer than the replay, capture 1 (a, b, y, z) one: capture 1, though it comes second with the same
    bound (an equal bound must not stop the search)."""
    t, _, _ = _chooser(("a", "b", "z", "z", "z"), ("a", "b", "y", "z")).choose(("a", "b", "q"))
    assert t == 1


@pytest.mark.parametrize("replay,mapped", [
    (("a", "x"), True),  # 1 of 2 aligned: exactly the minimum share
    (("a", "x", "y"), False),  # 1 of 3: below it
])
def test_too_little_aligned_is_no_mapping(replay, mapped):
    assert MIN_ALIGNED_SHARE == 0.5
    assert (_chooser(("a", "b")).choose(replay) is not None) == mapped


def test_no_capture_aligns_at_all():
    ch = _chooser(("a",))
    assert ch.choose(("z",)) is None and ch.choose(("z",)) is None  # (the memo's answer too)


# -- record_captured: what a capture-only trace's blocks recorded -----------------------------------------------------


def _recorded(tmp_path, **kw) -> list[dict | None]:
    b = TraceBuilder()
    b._corr += 1
    # a launch recorded at 1.5, inside the capture (which begins at 0) but outside any op: no block records it
    b._x("cuda_runtime", "hipLaunchKernel", 1.5, 0.2, CPU_PID, TID, correlation=b._corr, kernel="stray_kernel")
    capture(b, 0, 1, **kw)
    res = analyze(b.write(tmp_path / "c.json"), jobs=1, decode_workers=1).check()
    return [blk.recorded for blk in res.blocks]


def test_recorded_counts_each_kernel_of_a_block(tmp_path):
    """One captured attention module launching GEMM, softmax, GEMM again: the GEMM counted twice; the stray launch
    before the module (outside every block) is skipped, not the end of the walk."""
    assert _recorded(tmp_path, kernels=(GEMM_K, SOFTMAX_K, GEMM_K)) == [{GEMM_K: 2, "softmax_warp_forward": 1}]


def test_recorded_unnamed_launches_by_their_kind(tmp_path):
    """CUDA launches name no kernel: the block records three unnamed kernel launches."""
    assert _recorded(tmp_path, launch_name="cudaLaunchKernel", named=False) == [{"(kernel, unnamed)": 3}]


# -- summarize and graph_warnings ------------------------------------------------------------------------------------


def test_summary_keeps_the_ten_most_frequent_unmapped_kernels():
    """Eleven replayed kernel names, k0 once, k1 twice, ... k10 eleven times, none mapped: the ten most frequent
    (k10 .. k1) are named; k0 is left out. Replayed time: 66 events of 2 µs (2000 ns) = 132 µs."""
    names = [f"k{i}" for i in range(11) for _ in range(i + 1)]
    dev = [_k(n, 10 * j, 2000, 1) for j, n in enumerate(names)]
    tr = Trace(info=TraceInfo(source="r"), runtime=[_rtc("cudaGraphLaunch", 0, 1, 1)], device=dev)
    facts = GraphFacts(launches=[GraphLaunch(runtime=0, device=list(range(len(dev))))])
    rm = ReplayMap(replayed=list(range(len(dev))))
    g = summarize(tr, facts, rm, None)
    assert g.unmapped == {f"k{i}": i + 1 for i in range(10, 0, -1)} and list(g.unmapped) == [f"k{i}" for i in
                                                                                            range(10, 0, -1)]
    assert (g.replayed_kernels, g.replayed_us, g.mapped_kernels, g.mapped_us) == (66, 132.0, 0, 0.0)
    assert g.mode == GraphMode.REPLAY and g.graph_launches == 1 and g.captured_named == 0


def test_summary_counts_eager_attention_only_beside_graph_launches():
    """A fused attention kernel in an eager trace is not "eager attention beside graphs": 0. Beside a graph launch
    (which ran kernel 0), the one outside it (kernel 1) is counted."""
    from tracekit.vocab import Category

    dev = [_k("flash", 0, 10, 1), _k("flash", 20, 10, 2)]
    tr = Trace(info=TraceInfo(source="e"), runtime=[_rtc("cudaGraphLaunch", 0, 1, 1)], device=dev)
    cats = [Category.FUSED_ATTENTION, Category.FUSED_ATTENTION]
    assert summarize(tr, GraphFacts(), ReplayMap(), cats).eager_attention_kernels == 0
    g = summarize(tr, GraphFacts(launches=[GraphLaunch(runtime=0, device=[0])]), ReplayMap(replayed=[0]), cats)
    assert g.eager_attention_kernels == 1 and g.mode == GraphMode.MIXED


def _summary(**kw) -> GraphSummary:
    base = dict(mode=GraphMode.REPLAY, captures=0, captured_launches=0, captured_named=0, instantiations=0,
                graph_launches=1, replayed_kernels=10, replayed_us=100.0, mapped_kernels=0, mapped_us=0.0,
                mapped_by_order=0, unmapped={}, capture_sources=[], eager_attention_kernels=0)
    return GraphSummary(**{**base, **kw})


@pytest.mark.parametrize("captures,plural", [(1, "graph"), (2, "graphs")])
def test_capture_only_warning(captures, plural):
    g = _summary(mode=GraphMode.CAPTURE_ONLY, captures=captures, captured_launches=1234, graph_launches=0,
                 replayed_kernels=0, replayed_us=0.0)
    assert graph_warnings(g) == [f"graph capture: 1,234 launches recorded into {captures} {plural} and ran nothing; "
                                 "blocks show the captured structure, not timings (attribute the replay, with "
                                 "--capture this file)"]


def test_replay_warnings_by_mapped_share():
    """Mapped 95 of 100 µs: enough, no warning; 94.9: the share is said (94.9%); none mapped and no capture source:
    pass the capture; no replayed kernels: nothing to say."""
    assert graph_warnings(_summary(mapped_kernels=9, mapped_us=95.0, capture_sources=["c"])) == []
    assert graph_warnings(_summary(mapped_kernels=9, mapped_us=94.9, capture_sources=["c"])) == [
        "graph replay: 94.9% of replayed kernel time mapped to captured ops; the rest is named after its kernels"]
    assert graph_warnings(_summary(mapped_kernels=1, mapped_us=0.0, capture_sources=["c"])) == [
        "graph replay: 0.0% of replayed kernel time mapped to captured ops; the rest is named after its kernels"]
    assert graph_warnings(_summary(replayed_kernels=1234)) == [
        "graph replay: 1,234 replayed kernels have no host op; pass the capture trace with --capture (or put it in "
        "capture_traces/ beside the replay) to map them to the ops that captured them"]
    assert graph_warnings(_summary(replayed_kernels=0, replayed_us=0.0)) == []
