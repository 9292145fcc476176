"""Compiled attention that no op names (issue 38; tracekit.analysis.blocks.compiled): an attention scope around a
torch.compile region is a block whose ``compiled-region`` core is named by what the region shows, and a region no
block covers is listed under "attention outside blocks". Each trace is built by hand: the expected blocks, names
and times follow from how it is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.builders import TraceBuilder, attribute_built
from support.pairs import GEMM, H100
from tracekit.analysis.blocks.compiled import SIGHTS
from tracekit.vocab import CoreKind

REGION = "Torch-Compiled Region: 1/0"
GRAPH_CALL = "## Call CompiledFxGraph fybktpjmprjjmupjuhqek66ewiuxrkpxnexkwlc6uusenqypsobk ##"
# Inductor's FlexAttention templates as named in real runs (OutOfMemoryError messages, profiles quoted in public
# repositories): the forward template and the backward one.
FLEX_FWD = "triton_tem_fused_flex_attention_0"
FLEX_BWD = "triton_tem_fused_flex_attention_backward_2"
POINTWISE = "triton_poi_fused_add_mul_0"
CPP_SOFTMAX = "graph_1_cpp_fused__softmax_view_0"  # an inductor C++ kernel, recorded with cpp.enable_kernel_profile


def _region(b: TraceBuilder, t0: float, dur: float = 60) -> None:
    """A compiled region at ``t0`` (``dur`` µs) with its graph call inside it (2 µs shorter at each end)."""
    b.op(REGION, t0, dur)
    b.op(GRAPH_CALL, t0 + 2, dur - 4)


def _cpu_flex(modules: bool, calls: int = 2) -> TraceBuilder:
    """CPU FlexAttention as transformers runs it: per call a bare compiled region (its C++ kernels unrecorded),
    inside a 100 µs LlamaAttention slice when ``modules``. Calls 200 µs apart, in one ProfilerStep."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 200 * calls)
    for k in range(calls):
        t0 = 200 * k + 10
        if modules:
            b.module(f"LlamaAttention_{k}", t0, 100)
        _region(b, t0 + 20)
    return b


def test_the_sights_are_named_ordered_and_explained():
    assert [s.name for s in SIGHTS] == ["fused-kernels", "softmax", "batched-products", "hidden"]
    assert all(s.why for s in SIGHTS)


def test_an_attention_module_around_a_bare_compiled_region_is_a_block(tmp_path: Path):
    """Each LlamaAttention slice holds one bare region: one block per call, its core the region itself (nothing
    else is recorded), and its whole slice as host time (100 µs: the region's ops and the module's Python)."""
    res = attribute_built(tmp_path, _cpu_flex(modules=True))
    assert [b.name for b in res.blocks] == ["LlamaAttention_0", "LlamaAttention_1"]
    for b in res.blocks:
        assert b.evidence.core == CoreKind.COMPILED_REGION and b.evidence.rule == "innermost-scope"
        assert b.evidence.names == (REGION,)
        assert b.total_us == pytest.approx(100)
        assert b.categories["other"] == pytest.approx(100)  # code no event names: of unknown kind
    assert res.compiled_outside is None  # every region is inside a block


def test_a_region_no_attention_scope_surrounds_is_listed_outside_blocks(tmp_path: Path):
    """Plain trace: no slice, no op naming attention. No block; both regions listed with their host time
    (60 µs each, duration with children), their name and the reason."""
    res = attribute_built(tmp_path, _cpu_flex(modules=False))
    assert res.blocks == []
    co = res.compiled_outside
    assert co is not None and co.regions == 2 and co.names == {REGION: 2}
    assert co.host_us == pytest.approx(120) and co.batched_products == 0
    assert "no attention scope" in co.reason


def test_a_region_holding_a_block_is_not_listed(tmp_path: Path):
    """Compiled SDPA: the fused op stays a visible extern call inside the region and is the block (rule fused-op),
    so the region is not attention outside blocks."""
    b = TraceBuilder()
    _region(b, 10, 80)
    b.op("aten::scaled_dot_product_attention", 20, 30)
    b.op("aten::_scaled_dot_product_flash_attention_for_cpu", 21, 28)
    res = attribute_built(tmp_path, b)
    assert [str(x.found_by) for x in res.blocks] == ["fused-op"]
    assert res.compiled_outside is None


def test_a_region_inside_another_is_listed_once(tmp_path: Path):
    b = TraceBuilder()
    _region(b, 10, 80)
    b.op("Torch-Compiled Region: 2/0", 20, 30)
    co = attribute_built(tmp_path, b).compiled_outside
    assert co is not None and co.regions == 1 and co.host_us == pytest.approx(80)


def _compiled_eager(b: TraceBuilder, t0: float, softmax: bool = False) -> None:
    """Regional compilation of eager attention: the module's region runs q, k projections (mm), QKᵀ (bmm), the
    v projection (mm), PV (bmm) and the output projection (mm) as extern calls, 5 µs each; ``softmax`` adds the
    inductor C++ softmax kernel (8 µs) between the bmms, as cpp.enable_kernel_profile records it."""
    b.module("LlamaAttention_0", t0, 100)
    _region(b, t0 + 5, 90)
    ops = ["aten::mm", "aten::mm", "aten::bmm", *([CPP_SOFTMAX] if softmax else []), "aten::mm", "aten::bmm",
           "aten::mm"]
    t = t0 + 10
    for name in ops:
        b.op(name, t, 8 if name == CPP_SOFTMAX else 5)
        t += 10


def test_compiled_eager_attention_is_named_by_its_bmm_pair(tmp_path: Path):
    """The region's batched products name the core (the 2-D mm projections do not); the six products are matmul
    time, the rest of the slice (region, graph call, Python) other."""
    b = TraceBuilder()
    _compiled_eager(b, 0)
    res = attribute_built(tmp_path, b)
    [blk] = res.blocks
    assert blk.evidence.core == CoreKind.COMPILED_REGION and blk.evidence.names == ("aten::bmm", "aten::bmm")
    assert blk.categories["matmul"] == pytest.approx(30)
    assert blk.total_us == pytest.approx(100)


def test_an_inductor_cpp_softmax_names_the_core_and_is_softmax_time(tmp_path: Path):
    b = TraceBuilder()
    _compiled_eager(b, 0, softmax=True)
    [blk] = attribute_built(tmp_path, b).blocks
    assert blk.evidence.core == CoreKind.COMPILED_REGION and blk.evidence.names == (CPP_SOFTMAX,)
    assert blk.categories["softmax"] == pytest.approx(8)
    assert blk.categories["matmul"] == pytest.approx(30)


def test_the_listed_regions_count_their_batched_products(tmp_path: Path):
    """A whole compiled model: no attention scope inside its region, so no block; the region is listed with the
    two bmm calls it ran."""
    b = TraceBuilder()
    b.module("LlamaForCausalLM_0", 0, 100)
    _region(b, 5, 90)
    for k, name in enumerate(("aten::mm", "aten::bmm", "aten::mm", "aten::bmm")):
        b.op(name, 10 + 10 * k, 5)
    res = attribute_built(tmp_path, b)
    assert res.blocks == []
    assert res.compiled_outside is not None and res.compiled_outside.batched_products == 2


# -- GPU: inductor's kernels are device events, linked to the region through their launches ------------------------
def _gpu_flex(module: str | None, kernels: tuple[str, ...] = (FLEX_FWD,)) -> TraceBuilder:
    """A compiled FlexAttention call on an H100: the region and graph call on the host, a cudaLaunchKernel inside
    the graph call for each of ``kernels`` (10 µs each on stream 7, linked by correlation), inside ``module``'s
    slice when given."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": H100}])
    b.annotation("ProfilerStep#1", 0, 400)
    if module is not None:
        b.module(module, 5, 100)
    _region(b, 10, 80)
    for k, name in enumerate(kernels):
        b.launch(name, 20 + 10 * k, 3, 200 + 20 * k, 10)
    return b


def test_a_gpu_flex_template_in_an_attention_module_is_a_compiled_region_core(tmp_path: Path):
    res = attribute_built(tmp_path, _gpu_flex("Qwen3Attention_0"))
    [blk] = res.blocks
    assert blk.name == "Qwen3Attention_0"
    assert blk.evidence.core == CoreKind.COMPILED_REGION and blk.evidence.names == (FLEX_FWD,)
    assert blk.categories["fused_attention"] == pytest.approx(10) and blk.total_us == pytest.approx(10)


@pytest.mark.parametrize(("kernel", "phase"), [(FLEX_FWD, "forward"), (FLEX_BWD, "backward")])
def test_a_gpu_flex_template_outside_any_scope_is_a_fused_kernel_block(tmp_path: Path, kernel: str, phase: str):
    """No scope: rule fused-kernels finds the template (a fused attention kernel, its phase from its name) as
    before; no region is listed on a device trace (its work shows as kernels)."""
    res = attribute_built(tmp_path, _gpu_flex(None, (kernel,)))
    assert [(str(b.phase), b.evidence.core, b.evidence.names) for b in res.blocks] == [
        (phase, CoreKind.FUSED_KERNEL, (kernel,))]
    assert res.blocks[0].categories["fused_attention"] == pytest.approx(10)
    assert res.compiled_outside is None


def test_a_gpu_region_that_launched_only_pointwise_kernels_makes_no_block(tmp_path: Path):
    """On a device trace the region's kernels show what it computed: an attention-named scope around a compiled
    pointwise kernel (a fused norm or RoPE) holds no attention core."""
    res = attribute_built(tmp_path, _gpu_flex("LlamaAttention_0", (POINTWISE,)))
    assert res.blocks == []


TRITON_SOFTMAX = "triton_per_fused__softmax_0"


def test_a_gpu_gemm_softmax_gemm_run_in_a_compiled_region_is_a_compiled_region_core(tmp_path: Path):
    """Regional compilation on a GPU: the region launches QKᵀ's GEMM, inductor's fused softmax and PV's GEMM. The
    run names the core (rule innermost-scope's kernel triple), and the core says it is compiled."""
    [blk] = attribute_built(tmp_path, _gpu_flex("LlamaAttention_0", (GEMM, TRITON_SOFTMAX, GEMM))).blocks
    assert blk.evidence.core == CoreKind.COMPILED_REGION
    assert blk.evidence.names[1] == TRITON_SOFTMAX and len(blk.evidence.names) == 3
    assert blk.categories["matmul"] == pytest.approx(20) and blk.categories["softmax"] == pytest.approx(10)


def test_a_gpu_softmax_kernel_alone_names_the_compiled_core(tmp_path: Path):
    """No GEMM run around it (the products are templates the classifier cannot tell, or elsewhere): the region's
    softmax kernel is what shows the call."""
    [blk] = attribute_built(tmp_path, _gpu_flex("LlamaAttention_0", (POINTWISE, TRITON_SOFTMAX))).blocks
    assert blk.evidence.core == CoreKind.COMPILED_REGION and blk.evidence.names == (TRITON_SOFTMAX,)
    assert blk.categories["softmax"] == pytest.approx(10) and blk.categories["elementwise"] == pytest.approx(10)
