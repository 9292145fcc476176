"""Device block accounting over columns (issue 40, wave 7): every block's busy split, category and role sums, kernel
table, windows, intervals and idle gaps are computed for all blocks at once (one sort by (block, start), a
segmented running maximum, one pass over the columns). The oracle is the plain walk each figure used to be, kept
here as the reference: block by block, event by event. Random hand-built traces with overlapping kernels, several
streams, zero-length events, ties, unowned kernels and blocks whose device work overlaps; plus the real traces.
"""

from __future__ import annotations

import random
from array import array

import pytest
from support.builders import CPU_PID, TID, TraceBuilder, attention_block
from support.paths import GRAPHS, SWEEP, real_trace_files

from tracekit.analysis import account
from tracekit.analysis.busy import busy_time, device_busy
from tracekit.analysis.context import AttributeConfig, StageContext
from tracekit.analysis.idle import _device_work, _Intervals
from tracekit.analysis.link import NONE
from tracekit.analysis.pipeline import STAGES
from tracekit.io.load import load_trace
from tracekit.model import DeviceEvent
from tracekit.vocab import CATEGORIES, MATMUL_ROLES, Category, MatmulRole, compact_kernel_name

KERNELS = (
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)",
    "void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float> >(int, float)",
    "Memcpy DtoD (Device -> Device)",
    "some_other_kernel_17",
)

SYNCS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaStreamSynchronize", "cudaStreamWaitEvent")


# -- the references: the plain walks the columns replace ---------------------------------------------------------

def _ref_busy(evs: list) -> tuple[int, list[int], list[int]]:
    """First-come split: events by start (ties in index order); each keeps what no earlier starter covered."""
    order = sorted(range(len(evs)), key=lambda k: (evs[k].ts, k))
    share, free, maxend = [0] * len(evs), [-1] * len(evs), None
    for k in order:
        e = evs[k]
        if maxend is not None:
            free[k] = maxend
        start = e.ts if maxend is None else max(e.ts, maxend)
        share[k] = max(0, e.ts + e.dur - start)
        maxend = e.ts + e.dur if maxend is None else max(maxend, e.ts + e.dur)
    return sum(share), share, free


def _ref_blocks(ctx: StageContext) -> tuple[list[dict], list[int], dict]:
    """Block by block, event by event: each block's busy, categories, roles, window and intervals; every event's
    share; the kernel table (first-seen order)."""
    tr, links, walk = ctx.tr, ctx.links, ctx.walk
    dev, cats, members = tr.device, ctx.cats, ctx.device_time.members
    dev_share, top, out = [0] * len(dev), {}, []
    for b, blk in enumerate(ctx.blocks):
        js = members.get(b, [])
        evs = [dev[j] for j in js]
        busy, share, _ = _ref_busy(evs)
        c, mr = dict.fromkeys(CATEGORIES, 0), dict.fromkeys(MATMUL_ROLES, 0)
        for j, s in zip(js, share):
            dev_share[j] = s
            c[cats[j]] += s
            if cats[j] == Category.MATMUL:
                lf = links.device_leaf[j]
                la = links.launcher[lf] if lf != NONE else NONE
                mr[walk.roles.role(la if la != NONE else lf) if lf != NONE else str(MatmulRole.OTHER)] += s
            row = (compact_kernel_name(dev[j].name), cats[j], blk.step)
            t = top.setdefault(row, [0, 0])
            t[0] += 1
            t[1] += dev[j].dur
        first = min(range(len(js)), key=lambda k: (evs[k].ts, k)) if js else None
        out.append({"busy": busy, "c": c, "mr": mr, "first": first, "js": js,
                    "starts": [e.ts for e in evs], "ends": [e.ts + e.dur for e in evs],
                    "category": bytes(CATEGORIES.index(cats[j]) for j in js), "stream": [e.stream for e in evs],
                    "names": tuple(e.name for e in evs),
                    "order": sorted(range(len(js)), key=lambda k: (evs[k].ts, k))})
    return out, dev_share, top


def _ref_window(d0: int, d_end: int, roots: list, free_at: int) -> tuple[int, int]:
    """The block's window: host time before its first kernel counts from when the device became free for it."""
    if not roots:
        return d0, d_end
    h0, h_end = min(h.ts for h in roots), max(h.ts + h.dur for h in roots)
    return (d0 if h0 >= d0 else max(h0, min(free_at, d0))), max(d_end, h_end)


def _ref_merged(spans: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    starts: list[int] = []
    ends: list[int] = []
    for s, e in sorted(spans):
        if ends and s <= ends[-1]:
            ends[-1] = max(ends[-1], e)
        else:
            starts.append(s)
            ends.append(e)
    return starts, ends


# -- random traces ----------------------------------------------------------------------------------------------

def _random_trace(tmp_path, seed: int):
    """Attention blocks (the finder's shape) with random extra kernels inside each: random times that overlap, tie,
    have zero length, on three streams, some late enough to overlap the next block's; launched early (before the
    gap opens) or late (after), twins (one start, the later event launched first), kernels tied to their op by
    External id alone (no launch call), launches right after a stream wait, blocking calls on the launching
    thread; and kernels no host op launched (owned by no block)."""
    rng = random.Random(seed)
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    t, waits = 0, rng.random() < 0.3  # (a trace with stream waits takes the block-by-block way throughout)
    starts = []
    for i in range(rng.randint(1, 6)):
        attention_block(b, t, name=f"layer{i}.attention")
        starts.append(t)
        if rng.random() < 0.4:
            _runtime(b, rng.choice(SYNCS[:3 + waits]), t + rng.choice([0, 3, 20, 45, 60, 100]),
                     rng.choice([2, 30, 90]))
        for k in range(rng.randint(0, 8)):
            _extra_kernel(b, rng, b.op("aten::add", t + 50 + k, 0.5), t + 50 + k + 0.1,
                          t + 100 + rng.choice([-20, -4, 0, 2, 2, 5, 13, 40, rng.randint(0, 300)]), waits)
        t += rng.choice([60, 150, 400])
    for _ in range(rng.randint(0, 5)):
        b.device_only(rng.choice(KERNELS), rng.randint(0, t + 300), rng.choice([0, 4, 50]),
                      stream=rng.choice([7, 8]))
    if rng.random() < 0.5:  # two profiler steps: the kernel table's rows are per step
        cut = rng.choice(starts)
        b.annotation("ProfilerStep#1", -1, cut - 0.5)
        b.annotation("ProfilerStep#2", cut - 0.5, t + 1000)
    return load_trace(b.write(tmp_path / f"r{seed}.json"))


def _runtime(b: TraceBuilder, name: str, ts: float, dur: float) -> None:
    """A runtime call that launches nothing (a sync, a stream wait)."""
    b.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": CPU_PID, "tid": TID, "ts": ts,
                     "dur": dur, "args": {"correlation": 9_000_000 + len(b.events)}})


def _extra_kernel(b: TraceBuilder, rng: random.Random, op: dict, early: float, kts: float, waits: bool) -> None:
    how = rng.choice(["early", "early", "late", "twin", "no call", "wait"][:5 + waits])
    name, dur, stream = rng.choice(KERNELS), rng.choice([0, 0, 1, 3, 10, 120]), rng.choice([7, 7, 8, 9])
    launch = kts - rng.choice([0.5, 3, 20]) if how in ("late", "twin") else early
    if how == "wait":
        _runtime(b, "cudaStreamWaitEvent", launch - 0.05, 0.02)
    if how == "no call":
        b.device_only(name, kts, dur, stream=stream, corr=8_000_000 + len(b.events), ext=op["args"]["External id"])
        return
    b.launch(name, launch, 0.2, kts, dur, stream=stream)
    if how == "twin":
        b.launch(rng.choice(KERNELS), launch - 1, 0.2, kts, rng.choice([1, 3, 10]), stream=stream)


def _through_account(tr) -> StageContext:
    ctx = StageContext(tr=tr, config=AttributeConfig())
    for stage in STAGES:
        stage.run(ctx)
        if stage.name == "account-device":
            return ctx
    raise AssertionError("no account-device stage")


def _assert_matches_reference(ctx: StageContext) -> None:
    ref, ref_share, ref_top = _ref_blocks(ctx)
    walk, results = ctx.walk, ctx.block_results
    assert walk.dev_share == ref_share
    assert list(walk.top.items()) == list(ref_top.items())  # (first-seen order too)
    free_at = ctx.device_time.free_at
    for b, (r, want) in enumerate(zip(results, ref)):
        assert r.total_us == want["busy"] / 1000
        assert r.categories == {k: v / 1000 for k, v in want["c"].items()}
        assert r.matmul_roles == {k: v / 1000 for k, v in want["mr"].items()}
        iv = r.intervals
        assert (iv.start_ns, iv.end_ns, iv.category, iv.stream, iv.names) == (
            array("q", want["starts"]), array("q", want["ends"]), want["category"], array("q", want["stream"]),
            want["names"])
        host = ctx.tr.host
        roots = [host[x] for x in ctx.blocks[b].roots if host[x].thread not in walk.replay_threads]
        assert r.host_spans == tuple((*ctx.tr.threads[h.thread], (h.ts - ctx.origin) / 1000,
                                      (h.ts + h.dur - ctx.origin) / 1000) for h in roots)
        assert r.kernels == len(want["js"]) and r.host_us == (sum(h.dur for h in roots) / 1000 if roots else None)
        if want["js"]:  # the window opens at the first starter (lowest index among ties), from its free_at
            first = want["first"]
            start, end = _ref_window(want["starts"][first], max(want["ends"]), roots, free_at[want["js"][first]])
            assert (r.start_us, r.end_us) == ((start - ctx.origin) / 1000, (end - ctx.origin) / 1000)
        if r.idle_gaps is not None:  # the idle split, from the reference's order, gives the same gaps
            gaps = array("q")
            start = round(r.start_us * 1000) + ctx.origin
            end = round(r.end_us * 1000) + ctx.origin
            if (start - ctx.origin) / 1000 == r.start_us and (end - ctx.origin) / 1000 == r.end_us:
                causes = walk.idle.split(want["js"], start, end, {h.thread for h in roots}, gaps,
                                         [(h.ts, h.ts + h.dur) for h in roots],
                                         [ctx.tr.device[j] for j in want["js"]], want["order"])
                assert gaps == r.idle_gaps.flat
                assert r.idle_by_cause == {k: v / 1000 for k, v in causes.items()}
    ctx_result_check(ctx)


def ctx_result_check(ctx: StageContext) -> None:
    for r in ctx.block_results:
        assert sum(r.categories.values()) == pytest.approx(r.total_us)


# -- the tests ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("narrow", [True, False], ids=["int64 sums", "python sums"])
@pytest.mark.parametrize("seed", range(60))
def test_block_figures_over_columns_match_the_block_by_block_walk(tmp_path, monkeypatch, seed, narrow):
    """``python sums``: every block taken as too wide for int64 sums by category (events centuries apart)."""
    if not narrow:
        monkeypatch.setattr(account, "_NARROW", 0)
    ctx = _through_account(_random_trace(tmp_path, seed))
    assert ctx.block_results is not None
    _assert_matches_reference(ctx)


def test_random_traces_do_cover_overlaps_ties_zero_lengths_and_several_streams(tmp_path, monkeypatch):
    """The random traces above reach the cases the columns must get right (else the comparison proves little),
    and their idling blocks take both ways: all at once (idle.split_regular) and block by block (split)."""
    from tracekit.analysis.idle import IdleSplitter

    seen = set()
    batch = IdleSplitter.split_regular

    def counted(self, *args):
        out = batch(self, *args)
        idling = sum(w is not None for w in args[-1])
        seen.update({"regular"} if out else set(), {"irregular"} if idling > len(out) else set())
        return out

    monkeypatch.setattr(IdleSplitter, "split_regular", counted)
    for seed in range(60):
        ctx = _through_account(_random_trace(tmp_path, seed))
        dev, members = ctx.tr.device, ctx.device_time.members
        for js in members.values():
            evs = sorted((dev[j].ts, dev[j].ts + dev[j].dur) for j in js)
            seen |= {"zero" for s, e in evs if s == e}
            seen |= {"tie" for x, y in zip(evs, evs[1:]) if x[0] == y[0]}
            seen |= {"overlap" for x, y in zip(evs, evs[1:]) if y[0] < x[1]}
            seen |= {"streams" for _ in [0] if len({dev[j].stream for j in js}) > 1}
        seen |= {"blocks" for _ in [0] if len(members) > 1}
        seen |= {"unowned" for _ in [0] if sum(map(len, members.values())) < len(dev)}
        seen |= {"steps" for _ in [0] if len({blk.step for blk in ctx.blocks}) > 1}
    assert seen == {"zero", "tie", "overlap", "streams", "blocks", "unowned", "regular", "irregular", "steps"}


def _events(rng: random.Random, n: int) -> list[DeviceEvent]:
    """Random device events: ties at 0 and 5, zero lengths, negative times, three streams."""
    return [DeviceEvent(kind="kernel", name="k", stream=rng.randint(0, 2),
                        ts=rng.choice([0, 5, 5, rng.randint(-50, 500)]),
                        dur=rng.choice([0, 0, 1, 7, rng.randint(0, 200)]), correlation=0, ext_id=0)
            for _ in range(n)]


@pytest.mark.parametrize("seed", range(60))
def test_device_busy_over_columns_matches_the_first_come_walk(seed):
    rng = random.Random(seed)
    evs = _events(rng, rng.randint(0, 40))
    total, share, free_at, cols = device_busy(evs)
    assert share.typecode == free_at.typecode == "q"  # (int64 arrays: no int object per event held)
    assert (total, list(share), list(free_at)) == _ref_busy(evs)
    assert busy_time(evs)[1] == list(share)  # (busy_time, which other stages call, agrees)
    assert cols.ts.tolist() == [e.ts for e in evs] and cols.end.tolist() == [e.ts + e.dur for e in evs]
    assert cols.order.tolist() == sorted(range(len(evs)), key=lambda k: (evs[k].ts, k))


class _Tr:
    def __init__(self, evs, streams):
        self.device, self.streams = evs, streams


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("streams", [[(0, 7)], [(0, 7), (0, 8), (0, 9)], [(0, 7), (1, 8), (0, 9)]])
def test_device_work_merged_over_columns_matches_the_sorted_merge(seed, streams):
    """Per device (a stream's first id), the merged work of its positive-length events; with and without the
    columns the busy split read."""
    rng = random.Random(seed)
    evs = _events(rng, rng.randint(0, 40))
    tr = _Tr(evs, streams)
    ids = [s[0] for s in streams]
    want: dict = {}
    for e in evs:
        if e.dur > 0:
            want.setdefault(ids[e.stream] if len(set(ids)) > 1 else ids[0], []).append((e.ts, e.ts + e.dur))
    for cols in (None, device_busy(evs)[3]):
        got = _device_work(tr, cols)
        got_merged = {d: (list(iv.starts), list(iv.ends)) for d, iv in got.items() if iv.starts}
        assert got_merged == {d: _ref_merged(s) for d, s in want.items()}
        for d, iv in got.items():  # the lengths the idle split asks for agree with the reference's intervals
            ref = _Intervals(want.get(d, []))
            for a, z in [(-100, 600), (0, 5), (5, 5), (3, 250)]:
                assert iv.length(a, z) == ref.length(a, z)


def _real_with_blocks() -> list:
    """Real traces that have attention blocks: H200 sweep runs (eager, SDPA, fused), CUDA-graph serving traces
    (replays), and the first files of the real-trace folder; whichever are present."""
    sweep = [SWEEP / name for name in ("eager_512", "sdpa-flash_512", "linear_1024", "sdpa-math_512")]
    found = [f for d in sweep if d.is_dir() for f in sorted(d.glob("*.json*"))[:1]]
    found += sorted(GRAPHS.glob("*/*.json.gz")) if GRAPHS.is_dir() else []
    return found + real_trace_files()[:3]


@pytest.mark.parametrize("path", _real_with_blocks(), ids=lambda p: p.parent.name + "/" + p.name[:24])
def test_block_figures_on_real_traces_match_the_block_by_block_walk(path):
    tr = load_trace(path)
    if not tr.device:
        pytest.skip("no device events")
    _assert_matches_reference(_through_account(tr))


@pytest.mark.parametrize("seed", range(40))
def test_interval_lengths_over_columns_match_the_bisecting_length(seed):
    """idle._lengths (every block's window at once) against _Intervals.length (one window at a time): windows that
    start or end inside, at the edges of, between and around the intervals."""
    import numpy as np

    from tracekit.analysis.idle import _lengths

    rng = random.Random(seed)
    iv = _Intervals([(s, s + rng.choice([1, 5, 30])) for s in (rng.randint(0, 300) for _ in range(rng.randint(1, 25)))])
    edges = [*iv.starts, *iv.ends, 0, 1000]
    a = [rng.choice(edges) + rng.choice([-1, 0, 0, 1]) for _ in range(50)]
    z = [x + rng.choice([0, 1, 4, 50, 400]) for x in a]
    got = _lengths(iv, np.array(a, np.int64), np.array(z, np.int64)).tolist()
    assert got == [iv.length(x, y) for x, y in zip(a, z)]


def _one_block(tmp_path, extra) -> StageContext:
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    attention_block(b, 0)
    extra(b)
    return _through_account(load_trace(b.write(tmp_path / "one.json")))


def test_a_gap_two_kernels_end_is_cut_at_the_earlier_launch(tmp_path):
    """The first gap [0, 100) ends at two kernels: the memset (launched at 2) and one after it in the file but
    launched at 0.5. The cut is at 0.5: 0.5 µs launch, 99.5 queued (not 2 and 98, enders[0]'s call)."""
    ctx = _one_block(tmp_path, lambda b: b.launch(KERNELS[2], 0.5, 0.2, 100, 3))
    _assert_matches_reference(ctx)
    (r,) = ctx.block_results
    assert r.idle_gaps.flat[:9].tolist() == [0, 100_000, 500, 0, 0, 0, 99_500, 0, 0]


def test_a_launch_after_a_stream_wait_waits_on_the_event(tmp_path):
    """The GEMM's launch (at 4) follows a cudaStreamWaitEvent (at 3.5): its gap (101, 102) is event_wait; the first
    gap [0, 100) is 2 µs launch (the memset's call at 2) and 98 queued, and the four other 1-µs gaps queued."""
    ctx = _one_block(tmp_path, lambda b: _runtime(b, "cudaStreamWaitEvent", 3.5, 0.2))
    _assert_matches_reference(ctx)
    (r,) = ctx.block_results
    assert (r.idle_by_cause["event_wait"], r.idle_by_cause["launch"], r.idle_by_cause["queued"]) == (1.0, 2.0, 102.0)


def test_a_block_whose_only_idle_is_its_tail_is_split_block_by_block(tmp_path):
    """One kernel, and the block's host range runs on past it: no gap between kernels, only the span's tail (the
    batch has no gap rows at all and leaves the block to split())."""
    def extra(b: TraceBuilder) -> None:
        b.annotation("layer0.attention", 1000, 400)
        b.op("aten::bmm", 1001, 8)
        b.launch(KERNELS[0], 1002, 1, 1000, 20)  # (from the range's start: no gap before the first kernel)
        b.op("aten::_softmax", 1020, 6)
        b.launch(KERNELS[1], 1021, 1, 1020, 5)
        b.op("aten::bmm", 1030, 8)
        b.launch(KERNELS[0], 1031, 1, 1025, 10)

    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    extra(b)
    ctx = _through_account(load_trace(b.write(tmp_path / "tail.json")))
    _assert_matches_reference(ctx)
    (r,) = ctx.block_results
    assert r.idle_gaps is not None and r.idle_gaps.flat[2:].tolist() != [0] * 7


@pytest.mark.parametrize("seed", range(0, 60, 6))
def test_windows_too_wide_for_int64_take_the_block_by_block_split(tmp_path, monkeypatch, seed):
    """A window (or the device's work) as wide as _WIDE might overflow int64 differences: such blocks go through
    split() one by one, with the same figures (here every window counts as too wide)."""
    from tracekit.analysis import idle

    monkeypatch.setattr(idle, "_WIDE", 0)
    _assert_matches_reference(_through_account(_random_trace(tmp_path, seed)))
