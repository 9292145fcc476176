"""Linking on random nestings whose answers a brute force knows: the innermost host event around each launch."""

from __future__ import annotations

import random
from array import array

import pytest

from tracekit.analysis.attribute import attribute_trace
from tracekit.analysis import link as link_module
from tracekit.analysis.link import NONE, _host_order, host_order, index_column, link, nest_host
from tracekit.model import ANNOTATION, KERNEL, MODULE, OP, DeviceEvent, HostEvent, RuntimeEvent, Trace, TraceInfo
from support.builders import TraceBuilder
from support.pairs import GEMM, H100
from tracekit import load_trace


def _nested(rng: random.Random, thread: int, start: int, end: int, depth: int, out: list[HostEvent]) -> None:
    """Children of [start, end]: consecutive pieces that may touch each other and the parent's ends,
    zero-length ones among them, and sometimes twins (same start and length, another kind)."""
    t = start
    while depth < 5 and t < end and rng.random() < 0.8:
        t += rng.choice((0, 0, 1, 3, 10))
        if t > end:
            break
        e = min(end, t + rng.choice((0, 1, 5, 20, 60)))
        kind = rng.choice((MODULE, ANNOTATION, OP, OP))
        out.append(HostEvent(kind, f"op{len(out)}", thread, t, e - t, 0))
        if rng.random() < 0.15:
            out.append(HostEvent(rng.choice((MODULE, ANNOTATION, OP)), f"twin{len(out)}", thread, t, e - t, 0))
        _nested(rng, thread, t, e, depth + 1, out)
        t = e


def _innermost(host: list[HostEvent], thread: int, ts: int) -> int:
    """Of the events on ``thread`` that contain ``ts`` (both ends included), the one nested deepest:
    the latest start, then the shortest, then the kind order (module, annotation, op), then the last."""
    around = [i for i, h in enumerate(host) if h.thread == thread and h.ts <= ts <= h.ts + h.dur]
    return max(around, key=lambda i: (host[i].ts, -host[i].dur, host[i].kind, i), default=NONE)


@pytest.mark.parametrize("seed", range(40))
def test_each_launch_links_to_the_innermost_host_event_around_it(seed: int) -> None:
    rng = random.Random(seed)
    host: list[HostEvent] = []
    for thread in (0, 1):
        for start, end in ((0, 120), (120, 200), (260, 400)):  # touching roots, then a gap
            host.append(HostEvent(rng.choice((ANNOTATION, OP)), f"root{len(host)}", thread, start, end - start, 0))
            _nested(rng, thread, start, end, 1, host)
    rng.shuffle(host)  # the file's order is not the time order
    tr = Trace(info=TraceInfo(source="random"), threads=[(1, 1), (1, 2), (1, 3)], streams=[(0, 7)], host=host)
    for k in range(60):
        thread = rng.choice((0, 1, 2))  # thread 2 has no host events
        ts = rng.choice([h.ts for h in host] + [h.ts + h.dur for h in host] + [rng.randrange(-5, 420)])
        tr.runtime.append(RuntimeEvent("cudaLaunchKernel", thread, ts, 1, k + 1, 0))
        tr.device.append(DeviceEvent(KERNEL, f"kernel{k}", 0, 1000 + 10 * k, 5, k + 1, 0))
    links = link(tr)
    expected = [_innermost(host, rt.thread, rt.ts) for rt in tr.runtime]
    assert list(links.device_leaf) == expected
    assert any(e != NONE for e in expected) and NONE in expected
    attribute_trace(tr).check()


def _enclosing(host: list[HostEvent], order: list[int], i: int) -> int:
    """Brute force: of the events before ``i`` in host order on its thread that hold it, the last. An event holds
    one that starts inside it, or a zero-length one at its very end when it started earlier (that event is still
    inside it, as a record_function closing with its range)."""
    h, pos = host[i], order.index(i)
    holders = [j for j in order[:pos] if host[j].thread == h.thread and host[j].ts <= h.ts
               and (h.ts < host[j].ts + host[j].dur
                    or (h.dur == 0 and h.ts == host[j].ts + host[j].dur and host[j].ts < h.ts))]
    return holders[-1] if holders else NONE


def _up(parent: list[int], i: int, hit) -> int:
    while i != NONE and not hit(i):
        i = parent[i]
    return i


@pytest.mark.parametrize("named", [False, True])  # the loader's name table, or none (a hand-built trace)
@pytest.mark.parametrize("seed", range(25))
def test_the_host_tree_its_launchers_steps_and_top_ops_follow_the_nesting(seed: int, named: bool) -> None:
    """Parent, op parent (innermost op or annotation above), launcher (innermost op, itself included), step (the
    innermost ProfilerStep#N around, itself included, of any kind), the steps in sweep order and the top ops
    (ops with no op as their op parent), each against a brute force on random nestings with zero-length events at
    their parents' ends, twins and ProfilerSteps anywhere, even nested."""
    rng = random.Random(seed)
    host: list[HostEvent] = []
    for thread in (0, 1):
        for start, end in ((0, 120), (120, 200), (260, 400)):
            host.append(HostEvent(rng.choice((MODULE, ANNOTATION, OP)), f"root{len(host)}", thread, start,
                                  end - start, 0))
            _nested(rng, thread, start, end, 1, host)
    for i in rng.sample([i for i, h in enumerate(host) if h.dur], 4):  # zero-length events at an event's end
        host.append(HostEvent(rng.choice((MODULE, ANNOTATION, OP)), f"end{i}", host[i].thread,
                              host[i].ts + host[i].dur, 0, 0))
    for k, i in enumerate(rng.sample(range(len(host)), 6)):
        host[i].name = f"ProfilerStep#{k + 3}"
    rng.shuffle(host)
    tr = Trace(info=TraceInfo(source="random", steps=[3, 4]), threads=[(1, 1), (1, 2)], host=host,
               names=frozenset(h.name for h in host) if named else None)
    order, parent, op_parent, launcher, step, roots, tops = map(list, nest_host(tr)[:7])
    assert order == host_order(host)
    assert parent == [_enclosing(host, order, i) for i in range(len(host))]
    assert op_parent == [_up(parent, parent[i], lambda j: host[j].kind >= ANNOTATION) for i in range(len(host))]
    assert launcher == [_up(parent, i, lambda j: host[j].kind == OP) for i in range(len(host))]
    named_step = [int(h.name[13:]) if h.name.startswith("ProfilerStep#") else None for h in host]
    assert step == [named_step[s] if (s := _up(parent, i, lambda j: named_step[j] is not None)) != NONE else None
                    for i in range(len(host))]
    assert roots == [i for i in order if named_step[i] is not None] and len(roots) == 6
    assert tops == [i for i, h in enumerate(host)
                    if h.kind == OP and (op_parent[i] == NONE or host[op_parent[i]].kind != OP)]
    assert any(h.dur == 0 and parent[i] != NONE and h.ts == host[parent[i]].ts + host[parent[i]].dur
               for i, h in enumerate(host))  # (the zero-length rule was exercised)
    tr.info.steps = []
    assert tuple(map(list, nest_host(tr)[4:7])) == ([None] * len(host), [], [])  # no steps: none read, no top ops


@pytest.mark.parametrize("threads", [1, 3])  # (one thread takes a shortcut: no sort by thread)
@pytest.mark.parametrize("seed", range(10))
def test_host_order_is_one_sort_on_thread_ts_longest_first_kind(seed: int, threads: int) -> None:
    rng = random.Random(seed)
    # few distinct values: ties of every kind, runs of them anywhere
    host = [HostEvent(rng.choice((MODULE, ANNOTATION, OP)), "x", rng.randrange(threads), rng.randrange(30),
                      rng.randrange(4), 0)
            for _ in range(500)]
    expected = sorted(range(len(host)), key=lambda i: (host[i].thread, host[i].ts, -host[i].dur, host[i].kind))
    assert host_order(host) == expected
    index = _host_order(host)[1]
    assert index.starts == [host[i].ts for i in expected]
    assert [index.run(t) for t in range(threads)] == [
        (min(k for k, i in enumerate(expected) if host[i].thread == t),
         1 + max(k for k, i in enumerate(expected) if host[i].thread == t)) for t in range(threads)]
    assert host_order([]) == [] and host_order(host[:1]) == [0]


@pytest.mark.parametrize("seed", range(20))
def test_kernels_without_a_launch_link_to_the_first_op_with_their_external_id(seed: int) -> None:
    """A kernel whose correlation id matches no runtime call links by External id (when the trace's ids are
    trusted) to the first op or annotation carrying it, never a module; else it stays unlinked. Brute force."""
    rng = random.Random(seed)
    host = [HostEvent(rng.choice((MODULE, ANNOTATION, OP, OP)), f"op{i}", 0, 10 * i, 5,
                      rng.choice((0, 0, *range(1, 30))))
            for i in range(200)]
    tr = Trace(info=TraceInfo(source="random"), threads=[(1, 1)], streams=[(0, 7)], host=host)
    for k in range(80):
        launched = rng.random() < 0.3
        if launched:
            tr.runtime.append(RuntimeEvent("cudaLaunchKernel", 0, 10 * k + 1, 1, 1000 + k, 0))
        ext = rng.choice((0, 0, *range(1, 40), -3))  # ids no op carries among them; 1000 + k is never an id here
        tr.device.append(DeviceEvent(KERNEL, f"kernel{k}", 0, 5000 + 10 * k, 5,
                                     1000 + k if launched else 5000 + k, ext))
    links = link(tr)
    assert links.external_ids_trusted  # (no kernel's External id equals its correlation id)
    for j, d in enumerate(tr.device):
        if links.device_leaf[j] != NONE and d.correlation < 5000:
            continue  # linked by its launch (the test above)
        first = next((i for i, h in enumerate(host) if d.ext_id and h.ext_id == d.ext_id and h.kind != MODULE), NONE)
        assert (links.device_leaf[j], links.device_linked[j]) == (first, first != NONE)
    assert 0 < sum(links.device_linked) < len(tr.device)
    attribute_trace(tr).check()


# ---------------------------------------------------------------------------------------------
# Linking by gpu_user_annotation: a device event with no launch link takes the innermost annotation on its stream
# that is open at its start, and through its External id the host range of that name

def test_device_events_link_to_the_innermost_open_annotation(tmp_path):
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    outer = b.annotation("model_forward", 0, 1000)  # host 0
    first = b.annotation("layer0.attention", 10, 500)  # host 1
    second = b.annotation("layer1.attention", 520, 470)  # host 2
    ext = {k: ev["args"]["External id"] for k, ev in (("outer", outer), ("first", first), ("second", second))}
    # On the device (stream 7): first 100-400 and second 600-700 inside outer 100-1000, written innermost first.
    b.gpu_annotation("layer1.attention", 600, 100, ext["second"])
    b.gpu_annotation("layer0.attention", 100, 300, ext["first"])
    b.gpu_annotation("model_forward", 100, 900, ext["outer"])
    # Kernels with no correlation to any launch, out of time order in the file.
    b.device_only(GEMM, 650, 10, corr=0)  # in second
    b.device_only(GEMM, 150, 10, corr=0)  # in first (and outer, which opened at the same time)
    b.device_only(GEMM, 450, 10, corr=0)  # first has closed: outer
    b.device_only(GEMM, 120, 10, corr=0, stream=9)  # a stream with no annotation: not linked
    b.device_only(GEMM, 600, 10, corr=0)  # at second's very start: in it
    b.device_only(GEMM, 400, 10, corr=0)  # at first's very end: first has closed, outer
    b.gpu_annotation("orphan", 800, 50, 99999)  # an annotation no host range carries the id of
    b.device_only(GEMM, 810, 10, corr=0)  # linked, to no host event
    tr = load_trace(b.write(tmp_path / "t.json"))
    names = [h.name for h in tr.host]
    assert names == ["model_forward", "layer0.attention", "layer1.attention"]
    links = link(tr)
    got = [(tr.device[j].ts // 1000, links.device_linked[j],
            names[links.device_leaf[j]] if links.device_leaf[j] != NONE else None) for j in range(len(tr.device))]
    assert got == [(650, True, "layer1.attention"), (150, True, "layer0.attention"), (450, True, "model_forward"),
                   (120, False, None), (600, True, "layer1.attention"), (400, True, "model_forward"),
                   (810, True, None)]
    assert links.unlinked == [3]


# ---------------------------------------------------------------------------------------------
# The host tree over columns (issue 40): nest_host finds the tree with array operations where the events nest
# properly, and sweeps a thread in Python where they do not. Both are held to the stack sweep itself, kept here as
# the reference: a plain walk of the rules in link's docstrings, event by event.

def _closes(host: list[HostEvent], top: int, h: HostEvent) -> bool:
    """Whether ``h`` closes the open event ``top``: it starts at or after its end; a zero-length ``h`` at its end
    only when ``top`` is zero-length too (else it is inside ``top``)."""
    end = host[top].ts + host[top].dur
    return end <= h.ts if h.dur else end < h.ts or (end == h.ts and not host[top].dur)


def _swept(tr: Trace) -> tuple:
    """(order, parent, op_parent, launcher, step, step roots, top ops, leaf per runtime call) by the stack sweep."""
    host, n = tr.host, len(tr.host)
    order = sorted(range(n), key=lambda i: (host[i].thread, host[i].ts, -host[i].dur, host[i].kind))
    parent, leaf = [NONE] * n, [NONE] * len(tr.runtime)
    for thread in sorted({h.thread for h in host} | {rt.thread for rt in tr.runtime}):
        calls = sorted((rt.ts, r) for r, rt in enumerate(tr.runtime) if rt.thread == thread)
        stack: list[int] = []
        for i in [i for i in order if host[i].thread == thread] + [None]:
            while calls and (i is None or calls[0][0] < host[i].ts):  # a call before the next start: its leaf
                ts, r = calls.pop(0)
                while stack and host[stack[-1]].ts + host[stack[-1]].dur < ts:
                    stack.pop()
                leaf[r] = stack[-1] if stack else NONE
            if i is not None:
                while stack and _closes(host, stack[-1], host[i]):
                    stack.pop()
                parent[i] = stack[-1] if stack else NONE
                stack.append(i)
    op_parent = [_up(parent, parent[i], lambda j: host[j].kind >= ANNOTATION) for i in range(n)]
    launcher = [_up(parent, i, lambda j: host[j].kind == OP) for i in range(n)]
    named = [int(h.name[13:]) if h.name.startswith("ProfilerStep#") and tr.info.steps else None for h in host]
    step = [named[s] if (s := _up(parent, i, lambda j: named[j] is not None)) != NONE else None for i in range(n)]
    roots = [i for i in order if named[i] is not None]
    tops = [i for i, h in enumerate(host) if tr.info.steps and h.kind == OP
            and (op_parent[i] == NONE or host[op_parent[i]].kind != OP)]
    return order, parent, op_parent, launcher, step, roots, tops, leaf


def _overlapping(rng: random.Random, threads: int, count: int) -> list[HostEvent]:
    """Events at random on few distinct times: ties, zero-length events, children that outlast their parents
    (improper nesting, which the column nesting must leave to the sweep), now and then a negative duration (the
    loader drops those; a trace built by hand may hold one)."""
    return [HostEvent(rng.choice((MODULE, ANNOTATION, OP)), f"e{k}", rng.randrange(threads), rng.randrange(40),
                      rng.choice((0, 0, 1, 2, 5, 9, 30, 30, -2)) if k % 7 else 2, 0) for k in range(count)]


def _with_calls(rng: random.Random, host: list[HostEvent], threads: int, steps: bool) -> Trace:
    """``host`` in a trace with ProfilerSteps among its events and runtime calls at the events' starts and ends,
    one off them, and on a thread with no host event."""
    for k, i in enumerate(rng.sample(range(len(host)), min(3, len(host)))):
        host[i].name = f"ProfilerStep#{k + 1}"
    tr = Trace(info=TraceInfo(source="random", steps=[1, 2, 3] if steps else []),
               threads=[(1, t) for t in range(threads + 1)], host=host)
    edges = [t for h in host for t in (h.ts, h.ts + h.dur)]
    for k in range(80):
        ts = rng.choice(edges) + rng.choice((0, 0, 0, -1, 1))
        tr.runtime.append(RuntimeEvent("cudaLaunchKernel", rng.randrange(threads + 1), ts, 1, k + 1, 0))
    return tr


@pytest.mark.parametrize("steps", [True, False])
@pytest.mark.parametrize("seed", range(60))
def test_the_columns_give_the_stack_sweeps_tree_ties_instants_and_overlaps_included(seed: int, steps: bool) -> None:
    """nest_host against the sweep itself on properly nested events (three threads, zero-length events at their
    parents' ends, twins) and on events that overlap at random (children outlasting their parents), with runtime
    calls at every edge: the tree, what it hands down, the steps, the top ops and each call's leaf."""
    rng = random.Random(seed)
    if seed % 2:
        host = _overlapping(rng, 3, rng.choice((1, 5, 60, 200)))
    else:
        host = []
        for thread in (0, 1, 2):
            for start, end in ((0, 120), (120, 200)):
                host.append(HostEvent(rng.choice((MODULE, ANNOTATION, OP)), "root", thread, start, end - start, 0))
                _nested(rng, thread, start, end, 1, host)
        host += [HostEvent(OP, "end", h.thread, h.ts + h.dur, 0, 0) for h in rng.sample(host, 5)]
    rng.shuffle(host)
    tr = _with_calls(rng, host, 3, steps)
    order, parent, op_parent, launcher, step, roots, tops, index, leaf = nest_host(tr)
    assert tuple(map(list, (order, parent, op_parent, launcher, step, roots, tops, leaf))) == _swept(tr)
    assert index.starts == [host[i].ts for i in order]
    assert {t: index.run(t) for t in range(4)} == {
        t: (min((k for k, i in enumerate(order) if host[i].thread == t), default=0),
            max((k + 1 for k, i in enumerate(order) if host[i].thread == t), default=0)) for t in range(4)}


def test_improperly_nested_threads_are_swept_and_only_those() -> None:
    """The column nesting holds only where each event closes no later than its parent: a thread where a child
    outlasts its parent (here one op, 5-15, under a range 0-10, then an op at 12, which the sweep puts under the
    child) is swept in Python, the properly nested one beside it is not, and both come out as the sweep's."""
    host = [HostEvent(ANNOTATION, "range", 0, 0, 10, 0), HostEvent(OP, "child", 0, 5, 10, 0),
            HostEvent(OP, "later", 0, 12, 1, 0),
            HostEvent(ANNOTATION, "range", 1, 0, 10, 0), HostEvent(OP, "child", 1, 5, 5, 0),
            HostEvent(OP, "later", 1, 12, 1, 0)]
    tr = Trace(info=TraceInfo(source="hand"), threads=[(1, 1), (1, 2)], host=host)
    cols = link_module._HostColumns.of(host)
    order = link_module._sorted_order(cols)
    runs = link_module._thread_runs(cols.thread[order])
    t, d = cols.ts[order], cols.dur[order]
    assert link_module._improper(*link_module._nest_columns(t, d, runs)[:3], runs) == [(0, 3)]
    order_, parent = map(list, nest_host(tr)[:2])
    assert parent == [NONE, 0, 1, NONE, 3, NONE]  # "later" is the outlasting child's on thread 0, no one's on 1
    assert (order_, parent) == _swept(tr)[:2]


@pytest.mark.parametrize("seed", range(12))
def test_each_subtree_is_one_run_of_the_order(seed: int) -> None:
    """HostTree: an event's descendants (by the parent links) are exactly the positions from it to its end, and
    the tree's parent, kind and position columns are those of the links, on proper and improper nestings."""
    rng = random.Random(seed)
    host = _overlapping(rng, 2, 150) if seed % 2 else []
    if not host:
        for start, end in ((0, 120), (130, 200)):
            host.append(HostEvent(OP, "root", 0, start, end - start, 0))
            _nested(rng, 0, start, end, 1, host)
    links = link(Trace(info=TraceInfo(source="random"), threads=[(1, 1), (1, 2)], host=host))
    tree = links.tree
    assert tree is not None and tree.order.tolist() == list(links.order)
    parent = links.parent
    for p, i in enumerate(links.order):
        below = {j for j in range(len(host)) if j != i and _up(parent, parent[j], lambda k: k == i) == i}
        assert set(links.order[p + 1: int(tree.end[p])]) == below
        assert int(tree.position[i]) == p and int(tree.kind[p]) == host[i].kind
        assert int(tree.parent[p]) == (int(tree.position[parent[i]]) if parent[i] != NONE else len(host))


@pytest.mark.parametrize("huge", [False, True])  # (an id beyond int64: looked up by a dict instead)
@pytest.mark.parametrize("seed", range(15))
def test_each_kernel_launches_from_the_first_call_with_its_correlation_id(seed: int, huge: bool) -> None:
    """A device event's launch is the first runtime call (in file order) with its correlation id, none for id 0
    or an id no call has; its leaf that call's. Ids repeat among the calls (graph replays) and the kernels."""
    rng = random.Random(seed)
    host = [HostEvent(OP, f"op{i}", 0, 10 * i, 8, 0) for i in range(30)]
    tr = Trace(info=TraceInfo(source="random"), threads=[(1, 1)], streams=[(0, 7)], host=host)
    ids = [0, 1, 2, 3, 5, 8, 2**40] + ([2**64 - 5] if huge else [])
    for k in range(60):
        tr.runtime.append(RuntimeEvent("cudaLaunchKernel", 0, rng.randrange(300), 1, rng.choice(ids), 0))
    for k in range(50):
        tr.device.append(DeviceEvent(KERNEL, f"kernel{k}", 0, 1000 + k, 5, rng.choice([*ids, 13]), 0))
    links = link(tr)
    first = {}
    for r, rt in enumerate(tr.runtime):
        first.setdefault(rt.correlation, r)
    expected = [first.get(d.correlation) if d.correlation else None for d in tr.device]
    assert links.device_call == expected and None in expected
    leaves = nest_host(tr)[8]
    assert [links.device_leaf[j] for j, r in enumerate(expected) if r is not None] == [
        leaves[r] for r in expected if r is not None]


def test_the_links_keep_each_events_indices_as_machine_ints() -> None:
    """link's per-event columns are arrays of C ints, not lists: a list holds one int object per host index (about
    20 MB of a 1 GB run's peak). They read as the lists would: a step around an op in a range, the op's kernel."""
    host = [HostEvent(ANNOTATION, "ProfilerStep#1", 0, 0, 100, 0), HostEvent(ANNOTATION, "range", 0, 5, 50, 0),
            HostEvent(OP, "aten::mm", 0, 10, 20, 0)]
    tr = Trace(info=TraceInfo(source="hand", steps=[1]), threads=[(1, 1)], streams=[(0, 7)], host=host,
               runtime=[RuntimeEvent("cudaLaunchKernel", 0, 12, 2, 9, 0)],
               device=[DeviceEvent(KERNEL, "gemm", 0, 40, 5, 9, 0), DeviceEvent(KERNEL, "lost", 0, 50, 5, 77, 0)])
    links = link(tr)
    columns = (links.order, links.parent, links.op_parent, links.launcher, links.device_leaf, links.top_ops)
    assert all(isinstance(c, array) and c.itemsize == 4 for c in columns)
    assert [list(c) for c in columns] == [[0, 1, 2], [NONE, 0, 1], [NONE, 0, 1], [NONE, NONE, 2], [2, NONE], [2]]
    assert links.step == [1, 1, 1] and links.device_linked == [True, False]


@pytest.mark.parametrize(("values", "code"), [([0, NONE, 2**31 - 1], "i"), ([0, NONE, 2**31], "q"), ([], "i")])
def test_an_index_column_widens_to_int64_only_where_an_index_needs_it(values: list[int], code: str) -> None:
    """index_column: C ints while every index fits, int64 beyond (a trace of 2**31 events), NONE kept."""
    import numpy as np

    column = index_column(np.array(values, np.int64))
    assert column.typecode == code and list(column) == values
