"""CPU traces recorded here by torch.profiler: tracekit's host self times must match torch's own
``key_averages()`` for the same run, and blocks must come out as the model was written."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.slow  # runs scripts/torch/TensorBoard: `pytest -m "not slow"` skips it

torch = pytest.importorskip("torch", reason="torch is needed to record CPU traces (pip install '.[profile]')")
from torch.profiler import ProfilerActivity, profile, record_function, schedule  # noqa: E402

from tracekit import analyze# noqa: E402
from tracekit.analysis.attribute import op_self_times# noqa: E402
from tracekit.io.load import load_trace# noqa: E402


def _eager_step(q, k, v, lin, layers=2):
    for i in range(layers):
        with record_function(f"layer{i}.attention"):
            s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            p = torch.softmax(s, dim=-1)
            o = torch.matmul(p, v).transpose(1, 2).contiguous()
        lin(o.reshape(o.shape[0], o.shape[1], -1))


@pytest.fixture(scope="module")
def eager_run(tmp_path_factory):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 16) for _ in range(3))
    lin = torch.nn.Linear(64, 64)
    path = tmp_path_factory.mktemp("eager") / "eager.pt.trace.json"
    seen = {}

    def ready(p):  # the cycle's events exist only inside this callback
        p.export_chrome_trace(str(path))
        seen["ka"] = p.key_averages()

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, on_trace_ready=ready,
                 schedule=schedule(wait=0, warmup=1, active=3, repeat=1)) as prof:
        for _ in range(5):
            _eager_step(q, k, v, lin)
            prof.step()
    return path, seen["ka"]


def test_self_times_agree_with_key_averages(eager_run):
    path, ka = eager_run
    mine = op_self_times(load_trace(path))
    theirs = {e.key: (e.count, e.self_cpu_time_total) for e in ka}
    compared = 0
    for key, (count, self_us) in theirs.items():
        if key.startswith("ProfilerStep"):
            continue
        assert key in mine, key
        assert mine[key][0] == count, key
        assert mine[key][1] == pytest.approx(self_us, abs=0.002 * count + 1e-6), key
        compared += 1
    assert compared >= 10


def test_eager_blocks_match_the_model(eager_run):
    path, ka = eager_run
    res = analyze(path).check()
    assert res.time_base == "host"
    assert [(b.name, b.found_by) for b in res.blocks] == [(f"layer{i}.attention", "annotation") for i in range(2)] * 3
    assert sorted({b.step for b in res.blocks}) == sorted(set(res.traces[0].steps)) and len(res.traces[0].steps) == 3
    inclusive = {e.key: e.cpu_time_total for e in ka}
    assert res.totals.total_us == pytest.approx(inclusive["layer0.attention"] + inclusive["layer1.attention"], abs=0.01)
    c = res.totals.categories
    self_of = {e.key: e.self_cpu_time_total for e in ka}
    assert c["matmul"] == pytest.approx(self_of["aten::bmm"] + self_of["aten::matmul"], abs=0.05)
    assert c["softmax"] == pytest.approx(self_of["aten::_softmax"] + self_of["aten::softmax"], abs=0.05)
    assert c["fused_attention"] == 0


def test_sdpa_and_modules_on_cpu(tmp_path):
    """nn.MultiheadAttention with with_modules: module blocks; SDPA's CPU flash op is fused time."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32))
    mha = torch.nn.ModuleList([torch.nn.MultiheadAttention(32, 4, batch_first=True) for _ in range(2)])
    x = torch.randn(2, 48, 32)
    path = tmp_path / "mha.pt.trace.json"
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], with_stack=True, with_modules=True) as prof:
        h = model(x)
        for m in mha:
            h = m(h, h, h, need_weights=False)[0]
        q = h.view(2, 48, 4, 8).transpose(1, 2)
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    prof.export_chrome_trace(str(path))
    res = analyze(path).check()
    found = [(b.kind, b.found_by) for b in res.blocks]
    assert found == [("MultiheadAttention", "module")] * 2 + [("aten::scaled_dot_product_attention", "fused-op")]
    assert res.blocks[2].categories["fused_attention"] > 0
    assert all(b.categories["softmax"] == 0 for b in res.blocks)


def test_backward_pass_joins_its_forward_block(tmp_path):
    """torch writes fwdbwd flows from forward ops to their autograd ops; the backward work of an
    attention block is reported as that block's backward phase, not as 'other'."""
    torch.manual_seed(0)
    q = torch.randn(2, 4, 64, 16, requires_grad=True)
    path = tmp_path / "bwd.pt.trace.json"
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("layer0.attention"):
            p = torch.softmax(torch.matmul(q, q.transpose(-2, -1)) / 4, dim=-1)
            o = torch.matmul(p, q)
        o.sum().backward()
    prof.export_chrome_trace(str(path))
    res = analyze(path).check()
    assert [(b.name, b.phase) for b in res.blocks] == [("layer0.attention", "forward"),
                                                        ("layer0.attention", "backward")]
    fwd, bwd = res.blocks
    assert bwd.categories["matmul"] > 0  # BmmBackward0's bmm calls
    assert bwd.categories["softmax"] > 0  # aten::_softmax_backward_data
    assert fwd.categories["matmul"] > 0 and fwd.categories["softmax"] > 0
    ka = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
    assert bwd.categories["softmax"] == pytest.approx(ka["aten::_softmax_backward_data"], abs=0.01)
