"""Why device time is unlinked (``coverage.unlinked_by_reason``) and the fused attention kernels no block owns
(``coverage.attention_outside_blocks``): tiny traces built for each rule of ``link.UNLINKED_RULES``, and the two
Qwen1.5 traces checked against a walk of their raw JSON written here, not against tracekit's own code."""

from __future__ import annotations

import json
import re
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from support.builders import STREAM, TraceBuilder
from support.paths import REAL
from support.cli import run_cli
from support.traces import read_events
from tracekit import analyze
from tracekit.analysis.link import UNLINKED_FACTS, UNLINKED_RULES, UnlinkedRule, unlinked_reasons
from tracekit.renderers.jsonrenderer import to_dict
from tracekit.renderers.terminal import TerminalRenderer
from tracekit.vocab import UNLINKED_REASONS, UnlinkedReason

FLASH = ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
         "cutlass::bfloat16_t> >(Flash_fwd_params)")
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int, float)"
ZERO = dict.fromkeys(UNLINKED_REASONS, 0.0)


def _analyze(b: TraceBuilder, tmp_path: Path, name: str = "t.json"):
    return analyze(b.write(tmp_path / name)).check()


def _window(b: TraceBuilder) -> None:
    """A recorded launch (correlation 1001) inside an op: the profiler's window is open from here on."""
    b.op("aten::fill_", 100, 10)
    b.launch(ELEMENTWISE, 101, 2, 200, 4)


def _reasons(res) -> dict[str, float]:
    return {k: v for k, v in res.coverage.unlinked_by_reason.items() if v}


# -- each rule, on a trace built for it -------------------------------------------------------------

def test_a_kernel_whose_correlation_precedes_every_launch_was_launched_before_the_trace(tmp_path):
    b = TraceBuilder()
    _window(b)
    b.device_only(ELEMENTWISE, 10, 7, corr=3)  # ran first, launched before the window opened
    res = _analyze(b, tmp_path)
    assert _reasons(res) == {"before_trace": 7.0}
    assert res.coverage.unlinked_us == 7.0


def test_kernels_sharing_an_unrecorded_correlation_are_a_graph_replay(tmp_path):
    b = TraceBuilder()
    _window(b)
    for k in range(3):  # one replay: three kernels, one correlation, and no cudaGraphLaunch in the trace
        b.device_only(ELEMENTWISE, 300 + 10 * k, 2, corr=5000)
    b.device_only(ELEMENTWISE, 400, 5, corr=5001)  # a lone launch of the same kind: not a replay
    res = _analyze(b, tmp_path)
    assert _reasons(res) == {"graph_replay": 6.0, "other_process": 5.0}


def test_a_recorded_graph_launch_links_its_replay_so_none_of_it_is_unlinked(tmp_path):
    b = TraceBuilder()
    _window(b)
    b._x("cuda_runtime", "cudaGraphLaunch", 120, 3, 100, 1, correlation=7000, **{"External id": 0})
    for k in range(3):
        b.device_only(ELEMENTWISE, 300 + 10 * k, 2, corr=7000)
    res = _analyze(b, tmp_path)
    assert res.coverage.unlinked_us == 0 and _reasons(res) == {}


def test_a_kernel_without_a_correlation_id_says_so(tmp_path):
    b = TraceBuilder()
    _window(b)
    b._x("kernel", ELEMENTWISE, 300, 4, 0, STREAM, device=0, stream=STREAM)  # no "correlation" key
    b.device_only(ELEMENTWISE, 310, 2, corr=0)
    res = _analyze(b, tmp_path)
    assert _reasons(res) == {"no_correlation": 6.0}


def test_a_launch_inside_the_window_that_no_recorded_thread_made_is_another_process(tmp_path):
    b = TraceBuilder()
    _window(b)
    b.launch(ELEMENTWISE, 120, 2, 250, 4)  # correlation 1002
    b.device_only(ELEMENTWISE, 300, 9, corr=1500)  # above the first launch's id, and no call carries it
    res = _analyze(b, tmp_path)
    assert _reasons(res) == {"other_process": 9.0}


def test_without_any_runtime_call_the_reason_is_other(tmp_path):
    b = TraceBuilder()
    b.device_only(ELEMENTWISE, 300, 9, corr=1500)
    res = _analyze(b, tmp_path)
    assert _reasons(res) == {"other": 9.0}


def test_events_linked_by_external_id_or_annotation_get_no_reason(tmp_path):
    b = TraceBuilder()
    _window(b)
    op = b.op("aten::mul", 130, 10)
    b.device_only(ELEMENTWISE, 300, 3, corr=2, ext=op["args"]["External id"])  # pre-window id, but ext links it
    rng = b.annotation("ProfilerStep#1", 150, 100)
    b.gpu_annotation("ProfilerStep#1", 400, 50, ext=rng["args"]["External id"])
    b.device_only(ELEMENTWISE, 410, 5, corr=3)  # pre-window id, no External id: the stream's range links it
    res = _analyze(b, tmp_path)
    assert res.coverage.unlinked_us == 0 and _reasons(res) == {}


def test_each_reason_counts_busy_time_so_the_reasons_sum_to_unlinked_time(tmp_path):
    b = TraceBuilder()
    _window(b)
    b.device_only(ELEMENTWISE, 10, 10, corr=3)  # before the trace, 10 µs
    b.device_only(ELEMENTWISE, 15, 10, corr=4, stream=8)  # overlaps it by 5 µs on another stream: 5 µs busy
    b.device_only(ELEMENTWISE, 500, 4, corr=0)
    res = _analyze(b, tmp_path)
    assert _reasons(res) == {"before_trace": 15.0, "no_correlation": 4.0}
    assert sum(res.coverage.unlinked_by_reason.values()) == res.coverage.unlinked_us == 19.0


# -- the rules as data -------------------------------------------------------------------------------

def test_the_rules_are_ordered_data_over_named_facts():
    assert [r.reason for r in UNLINKED_RULES] == [UnlinkedReason.NO_CORRELATION, UnlinkedReason.BEFORE_TRACE,
                                                  UnlinkedReason.GRAPH_REPLAY, UnlinkedReason.OTHER_PROCESS,
                                                  UnlinkedReason.OTHER]
    assert len({r.name for r in UNLINKED_RULES}) == len(UNLINKED_RULES)
    assert all(r.why and r.when in UNLINKED_FACTS for r in UNLINKED_RULES)
    assert list(UNLINKED_REASONS) == [r.value for r in UnlinkedReason]
    with pytest.raises(ValueError, match="unknown fact"):
        UnlinkedRule("x", UnlinkedReason.OTHER, "no-such-fact")


def test_the_first_rule_that_holds_wins():
    # 0: no id (also below the first launch); 5: before; 2000 twice: a replay; 3000: unrecorded.
    corrs, runtime = [0, 5, 2000, 2000, 3000], [0, 1000, 1001]
    assert unlinked_reasons(corrs, runtime) == ["no_correlation", "before_trace", "graph_replay", "graph_replay",
                                                "other_process"]
    assert unlinked_reasons([5, 5], runtime) == ["before_trace"] * 2  # a replay launched before the window
    assert unlinked_reasons([5], []) == ["other"]
    only_last = (UNLINKED_RULES[-1],)
    assert unlinked_reasons(corrs, runtime, only_last) == ["other"] * 5


# -- attention kernels outside blocks ----------------------------------------------------------------

def test_flash_kernels_launched_before_the_window_are_counted_outside_blocks(tmp_path):
    b = TraceBuilder()
    b.device_only(FLASH, 10, 30, corr=2)
    b.device_only(FLASH, 50, 20, corr=3)
    b.device_only(FLASH, 20, 15, corr=4, stream=STREAM + 1)  # under the first one: 0 µs of busy time of its own
    b.device_only(ELEMENTWISE, 80, 5, corr=5)
    b.op("aten::scaled_dot_product_attention", 100, 20)  # a fused-op block owns this one
    b.op("aten::_flash_attention_forward", 101, 15)
    b.launch(FLASH, 102, 3, 200, 40)
    res = _analyze(b, tmp_path)
    cv = res.coverage
    assert len(res.blocks) == 1 and res.totals.categories["fused_attention"] == 40.0
    assert (cv.attention_outside_kernels, cv.attention_outside_us) == (3, 50.0)  # busy time, as in_blocks_us
    assert cv.attention_outside_names == {"pytorch_flash::flash_fwd_kernel": 3}
    out = to_dict(res, "t")["coverage"]
    assert out["attention_outside_blocks"] == {"kernels": 3, "busy_us": 50.0,
                                               "names": {"pytorch_flash::flash_fwd_kernel": 3}}
    assert out["unlinked_by_reason"] == {**ZERO, "before_trace": 55.0}
    text = TerminalRenderer(width=100).render_attribution(res)
    assert "unlinked by reason: before the trace " in text
    assert "attention outside blocks: 3 kernels, 50.0 µs (pytorch_flash::flash_fwd_kernel ×3)" in text


def test_no_attention_outside_blocks_and_nothing_unlinked_prints_no_extra_line(tmp_path):
    b = TraceBuilder()
    _window(b)
    text = TerminalRenderer(width=100).render_attribution(_analyze(b, tmp_path))
    assert "unlinked by reason" not in text and "attention outside blocks" not in text


def test_hostile_kernel_names_stay_on_one_line_in_the_terminal_and_whole_in_json(tmp_path):
    b = TraceBuilder()
    evil = "pytorch_flash::flash_fwd_kernel\x1b[2J\r\nunlinked: 0.0%\x07"
    b.device_only(evil, 10, 30, corr=2)
    _window(b)
    res = _analyze(b, tmp_path)
    assert res.coverage.attention_outside_names == {evil: 1}
    text = TerminalRenderer(width=200).render_attribution(res)
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    line = next(x for x in text.splitlines() if x.startswith("attention outside blocks"))
    assert "flash_fwd_kernel\\x1b[2J\\r\\n" in line and line.endswith(" ×1)")  # escaped, then cut to fit
    assert sum(x.startswith("unlinked") for x in text.splitlines()) == 1  # "unlinked by reason", none injected
    proc = run_cli("attribute", tmp_path / "t.json", "--format", "json", check=True)
    assert json.loads(proc.stdout)["coverage"]["attention_outside_blocks"]["names"] == {evil: 1}


def test_a_folder_sums_reasons_and_outside_kernels_over_its_traces(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    one = TraceBuilder()
    _window(one)
    one.device_only(FLASH, 10, 30, corr=2)
    one.write(run / "a.pt.trace.json")
    two = TraceBuilder()
    _window(two)
    two.device_only(FLASH, 10, 20, corr=3)
    two.device_only("attn_fwd", 40, 5, corr=4)
    two.device_only(ELEMENTWISE, 300, 6, corr=0)
    two.write(run / "b.pt.trace.json")
    parts = [analyze(run / n).check() for n in ("a.pt.trace.json", "b.pt.trace.json")]
    res = analyze(run).check()
    cv = res.coverage
    assert cv.unlinked_by_reason == {**ZERO, "before_trace": 55.0, "no_correlation": 6.0}
    assert cv.unlinked_by_reason == {k: sum(p.coverage.unlinked_by_reason[k] for p in parts) for k in UNLINKED_REASONS}
    assert (cv.attention_outside_kernels, cv.attention_outside_us) == (3, 55.0)
    assert cv.attention_outside_names == {"pytorch_flash::flash_fwd_kernel": 2, "attn_fwd": 1}
    assert list(cv.attention_outside_names) == ["pytorch_flash::flash_fwd_kernel", "attn_fwd"]  # most first


def test_check_catches_reasons_that_do_not_sum_to_unlinked_time(tmp_path):
    from tracekit.results.invariants import InvariantError

    b = TraceBuilder()
    _window(b)
    b.device_only(FLASH, 10, 30, corr=2)
    res = _analyze(b, tmp_path)
    res.coverage.unlinked_by_reason["other"] += 1.0
    with pytest.raises(InvariantError, match="unlinked by reason"):
        res.check()
    res.coverage.unlinked_by_reason["other"] -= 1.0
    res.coverage.attention_outside_names["x"] = 1
    with pytest.raises(InvariantError, match="name counts"):
        res.check()


# -- the shared Qwen1.5 traces, against a walk of their JSON -------------------------------------------

QWEN = {"tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": "flash_fwd_kernel",
        "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": r"^attn_fwd"}
_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
_RUNTIME_CATS = {"cuda_runtime", "cuda_driver"}


def _walk(rel: str, fused: str) -> dict:
    """Straight from the JSON: every device event's first-come busy share, the events whose correlation no
    runtime call carries, and the fused attention kernels launched from no ``nn.Module: *Attention`` slice."""
    evs = read_events(REAL / rel, exact=True)  # exact µs: ts is ~1e12
    xs = [e for e in evs if e.get("ph") == "X"]
    dev = [e for e in xs if e.get("cat") in _DEVICE_CATS]
    runtime = {e["args"]["correlation"]: e for e in xs if e.get("cat") in _RUNTIME_CATS}
    first_launch = min(c for c in runtime if c)
    busy: list[Decimal] = [Decimal(0)] * len(dev)
    end = None
    for k in sorted(range(len(dev)), key=lambda k: dev[k]["ts"]):
        e = dev[k]
        start = e["ts"] if end is None or end < e["ts"] else end
        busy[k] = max(Decimal(0), e["ts"] + e["dur"] - start)
        end = e["ts"] + e["dur"] if end is None else max(end, e["ts"] + e["dur"])
    orphans = [k for k, e in enumerate(dev) if e["args"].get("correlation") not in runtime]
    attention = [e for e in xs if e.get("cat") == "python_function" and re.match(r"nn\.Module: \w*Attention_\d+$",
                                                                                 e["name"])]

    def in_module(launch: dict) -> bool:
        return any(m["pid"] == launch["pid"] and m["tid"] == launch["tid"]
                   and m["ts"] <= launch["ts"] <= m["ts"] + m["dur"] for m in attention)

    outside = [k for k, e in enumerate(dev) if e.get("cat") == "kernel" and re.search(fused, e["name"])
               and not (e["args"].get("correlation") in runtime and in_module(runtime[e["args"]["correlation"]]))]
    step = min(e["ts"] for e in xs if e.get("cat") == "gpu_user_annotation")
    return {"dev": dev, "busy": [float(x) for x in busy], "orphans": orphans, "first_launch": first_launch,
            "outside": outside, "device_us": float(sum(busy)), "step_start": step,
            "ext": [dev[k]["args"].get("External id") for k in orphans]}


@pytest.mark.real
@pytest.mark.skipif(not REAL.is_dir(), reason=f"real traces not present at {REAL}")
@pytest.mark.parametrize("rel", sorted(QWEN))
def test_qwen_unlinked_time_is_launched_before_the_trace_and_its_flash_kernels_are_reported(rel):
    w = _walk(rel, QWEN[rel])
    dev, busy, orphans = w["dev"], w["busy"], w["orphans"]
    # The walk's own evidence that the orphans predate the window: every one has a correlation id below the first
    # recorded launch's, no External id, and ran before the GPU-side ProfilerStep range began.
    assert orphans and all(0 < dev[k]["args"]["correlation"] < w["first_launch"] for k in orphans)
    assert all(x is None for x in w["ext"])
    assert all(dev[k]["ts"] + dev[k]["dur"] <= w["step_start"] for k in orphans)
    orphan_us = sum(busy[k] for k in orphans)

    res = analyze(REAL / rel).check()
    cv = res.coverage
    assert cv.device_events - cv.linked_events == len(orphans)
    assert cv.device_us == pytest.approx(w["device_us"], abs=1e-3 * len(dev))  # 1 ns rounding per event
    assert cv.unlinked_by_reason == pytest.approx({**ZERO, "before_trace": orphan_us}, abs=len(orphans) * 1e-3)
    outside = w["outside"]
    assert outside and set(outside) <= set(orphans)  # every fused kernel outside a module is a pre-window orphan
    assert cv.attention_outside_kernels == len(outside)
    assert cv.attention_outside_us == pytest.approx(sum(busy[k] for k in outside), abs=len(outside) * 1e-3)
    names = Counter(re.match(r"(?:void )?([\w:]+)", dev[k]["name"]).group(1) for k in outside)
    assert cv.attention_outside_names == dict(names)

    out = to_dict(res, "t")["coverage"]
    assert out["attention_outside_blocks"]["kernels"] == len(outside)
    assert sum(out["unlinked_by_reason"].values()) == pytest.approx(out["unlinked_us"], abs=1e-2)
    text = TerminalRenderer(width=100).render_attribution(res)
    share = 100 * orphan_us / w["device_us"]
    assert f"unlinked by reason: before the trace {share:.1f}%\n" in text
    ms = sum(busy[k] for k in outside) / 1000
    (name, n), = names.items()
    assert f"attention outside blocks: {len(outside)} kernels, {ms:.2f} ms ({name} ×{n})" in text


# ---------------------------------------------------------------------------------------------
# The unlinked-reason rules on their own

def test_a_runtime_call_with_id_one_means_launches_were_recorded():
    """An unlinked kernel with correlation 5 where the trace's first runtime call has id 1: not before the first
    launch (1 < 5), not shared, and launches were recorded (an id of 1 is an id), so another process launched it."""
    assert unlinked_reasons([5], [1]) == [UnlinkedReason.OTHER_PROCESS]
    assert unlinked_reasons([5], [0]) == [UnlinkedReason.OTHER]  # no runtime call carries an id


def test_an_event_no_rule_holds_for_is_other():
    """A rule set without the closing "always" rule: an event none of its facts hold for keeps the default."""
    only = (UnlinkedRule("no-correlation-id", UnlinkedReason.NO_CORRELATION, "no-correlation", "no id at all"),)
    assert unlinked_reasons([5, 0], [1], rules=only) == [UnlinkedReason.OTHER, UnlinkedReason.NO_CORRELATION]
