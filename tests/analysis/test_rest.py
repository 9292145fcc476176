"""The rest of the step (issue 37, item 7): each ProfilerStep outside its attention blocks, by category and by
top-level module, with the host side (kernels launched, top-level host op time).

Hand-built traces put every op, module and kernel at a known µs, so each figure is worked out in the comments;
a real H100 trace is checked against a walk of the raw JSON with its own reading of the rule.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from support.builders import TraceBuilder, host_core
from support.paths import REAL, requires_real
from support.randtrace import REAL_SAMPLES, context_after, random_trace
from support.traces import read_events

from tracekit import analyze
from tracekit.analysis.rest import module_kind
from tracekit.renderers import JSONRenderer, TerminalRenderer
from tracekit.results.attribution import InvariantError
from tracekit.results.rest import StepRest, median_rest

GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
ELEM = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
COPY = "Memcpy HtoD (Pageable -> Device)"


def _step(b: TraceBuilder, step: int, t: float, linear_us: float = 20) -> None:
    """ProfilerStep#step at t..t+200 in nn.Module Model_0 (t..t+190), with Encoder_0 (t+10..t+100) holding the
    attention range (a 10 µs GEMM at t+30) and an add (elementwise 5 µs), and Head_0 (t+110..t+180) holding a
    linear (matmul ``linear_us`` from t+130) and a copy (memory 3 µs at t+155); an aten::empty at t+185 launches
    nothing. Top-level host ops: bmm 8 + softmax 0.4 + bmm 0.4 + add 5 + linear 10 + copy 5 + empty 1 = 29.8."""
    b.annotation(f"ProfilerStep#{step}", t, 200)
    b.module("Model_0", t, 190)
    b.module("Encoder_0", t + 10, 90)
    b.annotation("layer0.attention", t + 20, 40)
    b.op("aten::bmm", t + 21, 8)
    b.launch(GEMM, t + 22, 1, t + 30, 10)
    host_core(b, t + 41)
    b.op("aten::add", t + 65, 5)
    b.launch(ELEM, t + 66, 1, t + 70, 5)
    b.module("Head_0", t + 110, 70)
    b.op("aten::linear", t + 120, 10)
    b.launch(GEMM, t + 121, 1, t + 130, linear_us)
    b.op("aten::copy_", t + 150, 5)
    b.launch(COPY, t + 151, 1, t + 155, 3, kind="gpu_memcpy", launch_name="cudaMemcpyAsync")
    b.op("aten::empty", t + 185, 1)


def _analyze(tmp_path: Path, b: TraceBuilder):
    return analyze(b.write(tmp_path / "t.json")).check()


def test_one_step_outside_attention_by_category_module_and_host(tmp_path):
    b = TraceBuilder()
    _step(b, 1, 0)
    res = _analyze(tmp_path, b)
    [r] = res.traces[0].step_rest
    assert r.step == 1
    assert {k: v for k, v in r.categories.items() if v} == pytest.approx({"matmul": 20, "elementwise": 5,
                                                                           "memory": 3})
    assert r.outside_us == pytest.approx(28)  # the attention GEMM (10 µs) is not in it
    assert r.modules == pytest.approx({"Head": 23, "Encoder": 5})  # the model's children, largest first
    assert list(r.modules) == ["Head", "Encoder"]
    assert r.kernels == 4  # every launch of the step, attention's included
    assert r.host_ops_us == pytest.approx(29.8)
    assert r.host_ops == pytest.approx({"aten::bmm": 8.4, "aten::_softmax": 0.4, "aten::add": 5, "aten::linear": 10,
                                        "aten::copy_": 5, "aten::empty": 1})


def test_overlapping_kernels_outside_attention_count_each_instant_once(tmp_path):
    """A second stream's elementwise kernel 135..145 overlaps the linear 130..150: the first starter keeps the
    overlap, so matmul 20, elementwise 5 + 0, and the outside busy is the union 28."""
    b = TraceBuilder()
    _step(b, 1, 0)
    b.op("aten::mul", 125, 2)
    b.launch(ELEM, 126, 1, 135, 10, stream=8)
    [r] = _analyze(tmp_path, b).traces[0].step_rest
    assert r.categories["matmul"] == pytest.approx(20) and r.categories["elementwise"] == pytest.approx(5)
    assert r.outside_us == pytest.approx(28) and r.kernels == 5


def test_steps_are_kept_apart_and_the_median_is_one_real_step(tmp_path):
    """Three steps whose linear runs 20, 60 and 40 µs from +130: a linear of 40 or 60 covers the copy (+155..158),
    which then adds nothing (each instant once): outside busy 28, 65, 45; the median is step 3 (45)."""
    b = TraceBuilder()
    for step, lin in ((1, 20), (2, 60), (3, 40)):
        _step(b, step, 300 * (step - 1), linear_us=lin)
    rest = _analyze(tmp_path, b).traces[0].step_rest
    assert [r.step for r in rest] == [1, 2, 3]
    assert [r.outside_us for r in rest] == pytest.approx([28, 65, 45])
    assert median_rest(rest).step == 3
    assert median_rest(rest[:2]).step == 1  # an even count: the lower middle, a real step
    assert median_rest([]) is None


def test_no_modules_recorded_no_module_split(tmp_path):
    b = TraceBuilder()
    _step(b, 1, 0)
    b.events = [e for e in b.events if not e["name"].startswith("nn.Module")]
    [r] = _analyze(tmp_path, b).traces[0].step_rest
    assert r.modules == {} and r.outside_us == pytest.approx(28)


def test_a_trace_without_steps_has_none(tmp_path):
    b = TraceBuilder()
    _step(b, 1, 0)
    b.events = [e for e in b.events if not e["name"].startswith("ProfilerStep")]
    assert _analyze(tmp_path, b).traces[0].step_rest == []


@pytest.mark.parametrize("name,kind", [("nn.Module: Qwen2DecoderLayer_17", "Qwen2DecoderLayer"),
                                       ("nn.Module: Embedding_0", "Embedding"), ("Head", "Head"),
                                       ("nn.Module: Conv2d_1x1", "Conv2d_1x1")])
def test_module_kind_folds_instances(name, kind):
    assert module_kind(name) == kind


def test_check_rejects_inconsistent_figures():
    r = StepRest(step=1, categories={"matmul": 2.0}, modules={"A": 1.0}, kernels=1, host_ops_us=3.0,
                 host_ops={"aten::mm": 3.0})
    r.check("ok")
    for bad in (StepRest(step=1, categories={"matmul": -1.0}), StepRest(step=1, categories={}, modules={"A": 5.0}),
                StepRest(step=1, categories={}, host_ops_us=2.0, host_ops={"x": 1.0})):
        with pytest.raises(InvariantError):
            bad.check("bad")


def test_json_and_terminal_show_the_median_step(tmp_path):
    b = TraceBuilder()
    _step(b, 1, 0)
    res = _analyze(tmp_path, b)
    out = json.loads(JSONRenderer().render(res))
    [r] = out["traces"][0]["step_rest"]
    assert r["outside_us"] == 28.0 and r["kernels"] == 4 and r["modules"] == {"Head": 23.0, "Encoder": 5.0}
    assert list(r["host_ops"])[0] == "aten::linear"  # largest first
    text = TerminalRenderer().render(res)
    assert "outside attention, step 1 (median of 1 by busy outside attention): matmul 20.0 µs" in text
    assert "by top-level module: Head 23.0 µs · Encoder 5.0 µs" in text
    # the step is launch-bound (busy 38 of a 200 µs span): the host side follows
    assert "launch-bound step (device idle 81% of its span): 4 kernels launched, top-level host ops 29.8 µs" in text


# -- a real trace, against a walk of the raw JSON ------------------------------------------------------------------

QWEN = REAL / "tracelens" / "h100" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


@pytest.mark.skipif(not QWEN.is_file(), reason=f"{QWEN} not present")
def test_qwen_step_host_side_matches_a_walk_of_the_raw_json():
    """Per ProfilerStep range: the cpu_ops inside it that no other cpu_op (same thread) encloses, their durations
    summed; and the kernels whose launch call (by correlation) lies inside it."""
    ev = read_events(QWEN)
    res = analyze(QWEN).check()
    steps = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    ops = sorted((e for e in ev if e.get("cat") == "cpu_op"), key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    dev = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    want: dict[int, tuple[float, int]] = {}
    for s in steps:
        n = int(s["name"].split("#")[1])
        a, z = s["ts"], s["ts"] + s["dur"]
        top, end = 0.0, defaultdict(lambda: -1.0)
        for o in ops:
            if a <= o["ts"] and o["ts"] + o["dur"] <= z and o["ts"] >= end[o["tid"]]:
                top += o["dur"]
                end[o["tid"]] = o["ts"] + o["dur"]
        k = sum(1 for d in dev if (c := calls.get(d["args"].get("correlation"))) and a <= c["ts"] <= z)
        want[n] = (top, k)
    got = {r.step: (r.host_ops_us, r.kernels) for r in res.traces[0].step_rest}
    assert set(got) == set(want)
    for n, (top, k) in want.items():
        assert got[n][0] == pytest.approx(top, abs=0.01) and got[n][1] == k, n


# -- the diff: median step against median step ---------------------------------------------------------------------


def test_diff_shows_the_rest_of_the_step_and_the_host_ops_that_changed(tmp_path):
    """Before: one _step (linear 20 µs). After: the linear runs 60 µs (covering the 3 µs copy), and an extra
    aten::mul (4 µs on the host) launches a 6 µs elementwise kernel after the copy. Outside busy 28 → 60 + 5 + 6 =
    71; matmul 20 → 60, memory 3 → 0 (covered), elementwise 5 → 11; kernels 4 → 5; host ops 29.8 → 33.8, the mul
    the only changed op (0 → 4). Both steps launch-bound (busy 38 and 81 of a 200 µs span)."""
    from tracekit import diff

    b = TraceBuilder()
    _step(b, 1, 0)
    a = TraceBuilder()
    _step(a, 1, 0, linear_us=60)
    a.op("aten::mul", t := 160, 4)
    a.launch(ELEM, t + 1, 1, 192, 6)
    r = diff(b.write(tmp_path / "b.json"), a.write(tmp_path / "a.json"))
    text = " ".join(TerminalRenderer().render(r).split())  # (the lines wrap at the terminal's width)
    assert "outside attention, median step (step 1 of 1 → step 1 of 1): 28.0 µs → 71.0 µs" in text
    assert "by category: matmul 20.0 µs → 60.0 µs · elementwise 5.0 µs → 11.0 µs · memory 3.0 µs → 0.0 µs" in text
    assert "kernels launched 4 → 5; top-level host ops 29.8 µs → 33.8 µs" in text
    assert "host ops that changed most: aten::mul 0.0 µs → 4.0 µs" in text
    out = json.loads(JSONRenderer().render(r))["rest_of_step"]
    assert out["basis"] == "median step" and out["launch_bound"] == {"before": True, "after": True}
    assert out["before"]["outside_us"] == 28.0 and out["after"]["outside_us"] == 71.0
    assert out["host_ops_changed"] == [{"name": "aten::mul", "before_us": 0.0, "after_us": 4.0}]


# -- a trace with no attention blocks (issue 42): idle by cause and the top device events per step ---------------

CONV = "implicit_convolve_sgemm<float, 1024, 5, 5, 3, 3, 3, 1, false>"
RELU = "vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar>"


def test_a_step_without_attention_says_why_its_device_idled_and_on_what_it_ran(tmp_path):
    """builders.no_attention_trace, per step from t0 (µs): the step's range t0..t0+900 is its window; the conv's
    kernel runs t0+30..430 (launched by a call at t0+20), the relu's t0+440..490 (launched at t0+125). Idle 450:
    the gap t0..30 is cut at the conv's launch call, launch 20 before it, queued 10 after; the gap 430..440 was
    launched long before, queued 10; the tail 490..900 has no sync, no other work, no running op: other 410. On a
    cudaDeviceSynchronize at t0+500..800 on the step's thread, 300 µs of that tail is sync instead."""
    from support.builders import CPU_PID, TID, no_attention_trace

    res = analyze(no_attention_trace(tmp_path / "resnet.json")).check()
    [tr] = res.traces
    assert [r.step for r in tr.step_rest] == [1, 2]
    for r, fig in zip(tr.step_rest, tr.step_figures):
        causes = {k: v for k, v in r.idle_by_cause.items() if v}
        assert causes == {"launch": 20.0, "queued": 20.0, "other": 410.0}
        assert sum(r.idle_by_cause.values()) == pytest.approx(fig.span_us - fig.busy_us)  # the step's idle
        assert r.top_kernels == [(CONV, "other", 1, 400.0), (RELU, "elementwise", 1, 50.0)]
    doc = json.loads((tmp_path / "resnet.json").read_text())
    for t0 in (0, 1000):
        doc["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": CPU_PID,
                                   "tid": TID, "ts": t0 + 500, "dur": 300, "args": {"correlation": 0}})
    (tmp_path / "sync.json").write_text(json.dumps(doc))
    for r in analyze(tmp_path / "sync.json").check().traces[0].step_rest:
        assert {k: v for k, v in r.idle_by_cause.items() if v} == {"launch": 20.0, "queued": 20.0, "sync": 300.0,
                                                                  "other": 110.0}


def test_a_trace_with_blocks_pays_nothing_for_them(tmp_path):
    """The blockless figures are computed only where no block is found: a trace with blocks keeps none."""
    from support.builders import steps_trace

    res = analyze(steps_trace(tmp_path / "s.pt.trace.json")[0]).check()
    assert res.blocks and res.traces[0].step_rest
    assert all(r.idle_by_cause is None and r.top_kernels == [] for r in res.traces[0].step_rest)


def test_the_blockless_figures_stay_out_of_the_json(tmp_path):
    from support.builders import no_attention_trace

    out = json.loads(JSONRenderer().render(analyze(no_attention_trace(tmp_path / "r.json")).check()))
    assert all(set(r) == {"step", "outside_us", "categories", "modules", "kernels", "host_ops_us", "host_ops"}
               for r in out["traces"][0]["step_rest"])


def test_check_refuses_top_kernels_beyond_the_outside_busy_time():
    r = StepRest(step=1, categories={"matmul": 10.0}, top_kernels=[("k", "matmul", 1, 11.0)])
    with pytest.raises(InvariantError):
        r.check("t")
    r = StepRest(step=1, categories={"matmul": 10.0}, idle_by_cause={"launch": -1.0})
    with pytest.raises(InvariantError):
        r.check("t")
    StepRest(step=1, categories={"matmul": 10.0}, top_kernels=[("k", "matmul", 1, 10.0)],
             idle_by_cause={"launch": 1.0}).check("t")


# -- the step index over columns (issue 40): one sweep per step, against the plain walk it replaced -----------------
def _plain_steps(ctx) -> tuple[list, list]:
    """The whole-step figures and the rest of each step as the per-event walk made them: each step's events, those
    its blocks own and those no block owns, each list's busy time by its own busy_time call, the module looked up
    per launching op."""
    from tracekit.analysis.busy import block_window, busy_time
    from tracekit.analysis.clock import first_event, relative_us
    from tracekit.analysis.link import NONE
    from tracekit.analysis.rest import _ModuleOf
    from tracekit.model import MODULE
    from tracekit.results.attribution import StepFigures
    from tracekit.vocab import CATEGORIES

    tr, links, dev = ctx.tr, ctx.links, ctx.tr.device
    step, owner, free_at = links.step, ctx.dev_owner, ctx.device_time.free_at
    events, attention, outside = defaultdict(list), defaultdict(list), defaultdict(list)
    for j, b in enumerate(owner):
        ls = step[links.device_leaf[j]] if links.device_leaf[j] != NONE else None
        s = ctx.blocks[b].step if b != NONE else None
        if b != NONE and s is not None:
            events[s].append(j)
            attention[s].append(j)
        elif ls is not None:
            events[ls].append(j)
            if b == NONE:
                outside[ls].append(j)
    names = {f"ProfilerStep#{n}": n for n in tr.info.steps}
    roots = defaultdict(list)
    for i in links.step_roots:
        if names.get(tr.host[i].name) == step[i]:
            roots[step[i]].append(tr.host[i])
    whole = []
    for s in sorted(roots):
        js = events.get(s, [])
        evs = [dev[j] for j in js]
        start, end = block_window(evs, roots[s], free_at[first_event(js, evs)] if js else -1)
        whole.append(StepFigures(step=s, busy_us=busy_time(evs)[0] / 1000, span_us=(end - start) / 1000,
                                 attention_us=busy_time([dev[j] for j in attention.get(s, [])])[0] / 1000,
                                 start_us=relative_us(start, ctx.origin), end_us=relative_us(end, ctx.origin)))
    any_module, rest = _ModuleOf(tr, links).any, []

    def module(i: int) -> str | None:  # the nn.Module events above i (itself included), outermost first
        chain = []
        while i != NONE:
            if tr.host[i].kind == MODULE:
                chain.insert(0, i)
            i = links.parent[i]
        return module_kind(tr.host[chain[1] if len(chain) > 1 else chain[0]].name) if chain else None

    for s in sorted(outside):
        js = outside[s]
        c, mods, by_leaf = dict.fromkeys(CATEGORIES, 0), defaultdict(int), defaultdict(int)
        for j, ns in zip(js, busy_time([dev[j] for j in js])[1]):
            c[ctx.cats[j]] += ns
            by_leaf[links.device_leaf[j]] += ns
        for lf, ns in by_leaf.items():
            if any_module and module(lf) is not None:
                mods[module(lf)] += ns
        rest.append((s, c, sorted(mods.items(), key=lambda kv: -kv[1])))
    return whole, rest


def _plain_host_ops(ctx) -> dict:
    """Per step: its top-level host ops' ns in all and by name, op by op (no graph replay in these traces)."""
    total, by_name = defaultdict(int), defaultdict(lambda: defaultdict(int))
    for i in ctx.links.top_ops:
        s = ctx.links.step[i]
        if s is not None:
            total[s] += ctx.tr.host[i].dur
            by_name[s][ctx.tr.host[i].name] += ctx.tr.host[i].dur
    return {s: (total[s] / 1000, [(k, v / 1000) for k, v in by_name[s].items()]) for s in total}


def _assert_steps_as_plain(path: Path) -> None:
    ctx = context_after(path, "assemble-device")
    whole, rest = _plain_steps(ctx)
    summary = ctx.result.traces[0]
    assert repr(summary.step_figures) == repr(whole)
    got = {r.step: (r.categories, list(r.modules.items())) for r in summary.step_rest}
    for s, c, mods in rest:  # (the steps that launched nothing outside blocks: zeros, checked by the tests above)
        assert got[s] == ({k: v / 1000 for k, v in c.items()}, [(k, v / 1000) for k, v in mods])
    host = {r.step: (r.host_ops_us, list(r.host_ops.items())) for r in summary.step_rest if r.host_ops}
    assert host == _plain_host_ops(ctx)
    leaf, step = ctx.links.device_leaf, ctx.links.step
    launched = [step[leaf[j]] for j in range(len(ctx.tr.device)) if leaf[j] != -1]
    assert {r.step: r.kernels for r in summary.step_rest} == {r.step: launched.count(r.step) for r in summary.step_rest}


@pytest.mark.parametrize("seed", range(40))
def test_step_figures_over_columns_are_the_plain_walks(tmp_path, seed):
    _assert_steps_as_plain(random_trace(tmp_path, seed, sdpa=seed % 3 == 0))


@requires_real
@pytest.mark.parametrize("rel", REAL_SAMPLES)
def test_step_figures_over_columns_are_the_plain_walks_on_real_traces(rel):
    _assert_steps_as_plain(REAL / rel)
