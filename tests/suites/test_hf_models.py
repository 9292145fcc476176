"""Traces recorded here with tiny ``transformers`` models (random weights from configs): tracekit must find
every attention call in both passes, whatever the profiler settings and the attention implementation.

Why these cases: they are what a new user records (issue 11): eager and SDPA attention, with and without
``with_stack``, inference and training, and ``torch.compile``. The expectations are analytic, not copied
from tracekit's output: a model with L layers profiled for S steps runs exactly L×S attention calls forward
(and L×S backward when it trains); eager attention has a softmax op and no fused op, SDPA the reverse.
Each case is recorded once per module (a few seconds each on CPU). GPU variants carry ``@pytest.mark.cuda``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support.paths import ROOT
from support.traces import read_events

from tracekit import analyze
from tracekit.vocab import is_backward_op, is_fused_attention_op

pytestmark = pytest.mark.slow  # records with torch

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(ROOT / "scripts"))
from profiling import hf_models, train  # noqa: E402

LAYERS, STEPS = 2, 2


def _record(tmp_path_factory: pytest.TempPathFactory, model: str, attn: str, mode: str, stack: bool,
            compile: bool = False, device: str = "cpu", dtype: str = "float32") -> Path:
    m = hf_models.build(model, attn=attn, layers=LAYERS, device=device, dtype=getattr(torch, dtype))
    step = train.make_step(m.model, m.inputs, m.loss, mode, compile=compile)
    out = tmp_path_factory.mktemp(f"{model}_{attn}_{mode}_{int(stack)}_{int(compile)}")
    return Path(train.record(step, str(out), device=device, active=STEPS, with_stack=stack,
                             warmup_calls=2 if compile else 1))


CASES = {  # id -> (model, attn, mode, with_stack, compile)
    "gpt2-eager-infer": ("gpt2", "eager", "infer", False, False),
    "gpt2-eager-train": ("gpt2", "eager", "train", False, False),
    "gpt2-eager-train-stack": ("gpt2", "eager", "train", True, False),
    "gpt2-sdpa-infer": ("gpt2", "sdpa", "infer", False, False),
    "gpt2-sdpa-infer-stack": ("gpt2", "sdpa", "infer", True, False),
    "gpt2-sdpa-train": ("gpt2", "sdpa", "train", False, False),
    "gpt2-sdpa-train-stack": ("gpt2", "sdpa", "train", True, False),
    "llama-sdpa-train": ("llama", "sdpa", "train", False, False),
    "bert-eager-train": ("bert", "eager", "train", False, False),
    "gpt2-sdpa-train-compile": ("gpt2", "sdpa", "train", False, True),
}


@pytest.fixture(scope="module", params=list(CASES))
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[tuple, Path]:
    case = CASES[request.param]
    return case, _record(tmp_path_factory, *case)


def _expect(case: tuple, path: Path) -> None:
    """The whole contract of one recorded case (also run on GPU)."""
    _, attn, mode, stack, compiled = case
    res = analyze(path)
    res.check()  # time is conserved: categories sum to each block, blocks to the totals
    fwd = [b for b in res.blocks if b.phase == "forward"]
    bwd = [b for b in res.blocks if b.phase == "backward"]
    assert len(fwd) == LAYERS * STEPS, [(b.name, b.step) for b in fwd]
    assert len(bwd) == (LAYERS * STEPS if mode == "train" else 0), [(b.name, b.step) for b in bwd]
    steps = sorted({b.step for b in fwd})
    assert len(steps) == STEPS and None not in steps
    for phase in (fwd, bwd):
        for s in steps:  # each step: one block per layer, ordinals 0..L-1, in both phases
            assert sorted(b.ordinal for b in phase if b.step == s) == (list(range(LAYERS)) if phase else [])
    pairs = {(b.step, b.ordinal): b.name for b in fwd}
    for b in bwd:  # a backward block is named after its forward block, at the same step and ordinal
        assert pairs[(b.step, b.ordinal)] == b.name
    for b in fwd:  # never a backward op as a forward block
        assert not is_backward_op(b.name), b.name
    # The trace's own ops: as many fused backward ops as backward blocks when SDPA trains (independent count).
    ops = [e["name"] for e in read_events(path) if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    fused_bwd = [n for n in ops if is_fused_attention_op(n) and is_backward_op(n)
                 and not n.startswith("aten::_scaled_dot_product_efficient")]
    if attn == "sdpa" and mode == "train" and not torch.cuda.is_available():
        assert len(fused_bwd) == len(bwd)
    for phase in (fwd, bwd):
        if not phase:
            continue
        fused = sum(b.categories["fused_attention"] for b in phase)
        softmax = sum(b.categories["softmax"] for b in phase)
        if attn == "eager":
            assert softmax > 0 and fused == 0, (phase[0].phase, softmax, fused)
        else:
            assert fused > 0 and softmax == 0, (phase[0].phase, softmax, fused)
    if stack and not compiled:
        assert {b.found_by for b in fwd} == {"module"}


def test_blocks_per_layer_and_step(recorded: tuple[tuple, Path]) -> None:
    case, path = recorded
    _expect(case, path)


def test_no_backward_phase_without_autograd_links(recorded: tuple[tuple, Path], tmp_path: Path) -> None:
    """The same training trace with its fwdbwd flows removed: the Sequence numbers alone find the backward."""
    case, path = recorded
    if case[2] != "train":
        pytest.skip("inference has no backward")
    events = [e for e in read_events(path) if e.get("cat") != "fwdbwd"]
    assert any("Sequence number" in (e.get("args") or {}) for e in events)
    stripped = tmp_path / "noflows.json"
    stripped.write_text(json.dumps({"traceEvents": events}))
    _expect(case, stripped)


# --- GPU (scripts/gpu_check.sh runs `pytest -m cuda`); small: a few seconds per case on an H200 ---
GPU_CASES = {  # id -> (model, attn, mode, with_stack, compile, dtype); bf16 picks the flash/cuDNN backends
    "gpt2-sdpa-train": ("gpt2", "sdpa", "train", False, False, "float32"),
    "gpt2-eager-train": ("gpt2", "eager", "train", False, False, "float32"),
    "llama-sdpa-train-bf16": ("llama", "sdpa", "train", False, False, "bfloat16"),
    "llama-sdpa-train-stack-bf16": ("llama", "sdpa", "train", True, False, "bfloat16"),
}


@pytest.mark.cuda
@pytest.mark.parametrize("name", list(GPU_CASES))
def test_cuda_blocks_per_layer_and_step(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    *case, dtype = GPU_CASES[name]
    path = _record(tmp_path_factory, *case, device="cuda", dtype=dtype)
    _expect(tuple(case), path)
    res = analyze(path)
    assert res.time_base == "device"
    bwd = [b for b in res.blocks if b.phase == "backward"]
    assert all(b.step is not None for b in bwd)  # autograd-thread ops get their forward op's step
    if case[1] == "sdpa":  # every kernel the backward blocks run is attention, copies or a known helper
        names = {k for (k, cat) in res.kernels if cat == "other"}
        assert not any("dot_do_o" in n or "convert_dq" in n for n in names), names


def test_script_profiles_a_transformers_model_in_train_mode(tmp_path: Path) -> None:
    """scripts/profile_attention.py --model hf:gpt2 --mode train: blocks per phase = layers × active steps;
    the deprecated --with-modules says so in one line and records stacks instead."""
    import subprocess

    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "profile_attention.py"), "--model", "hf:gpt2", "--attn", "sdpa",
         "--seq", "32", "--layers", "2", "--heads", "2", "--d-model", "32", "--mode", "train", "--with-modules",
         "--active-steps", "2", "--device", "cpu", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = [line for line in proc.stderr.splitlines() if "--with-modules is deprecated" in line]
    assert len(warnings) == 1
    res = analyze(tmp_path / "gpt2_sdpa_32_train" / "trace.json").check()
    assert [sum(1 for b in res.blocks if b.phase == p) for p in ("forward", "backward")] == [4, 4]
    assert {b.found_by for b in res.blocks} == {"module"}  # stacks were recorded
    assert "| hf:gpt2 | sdpa | 32 | train | True | False | 4 | 4 | 4 |" in proc.stdout


def test_unknown_model_is_one_line_error() -> None:
    import subprocess

    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "profile_attention.py"), "--model", "hf:nope"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown model 'hf:nope'")


class _FlexModel(torch.nn.Module):
    """Two layers of FlexAttention between projections: the smallest model whose attention is flex."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.ModuleList(torch.nn.Linear(64, 192) for _ in range(LAYERS))
        self.out = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(LAYERS))

    def forward(self, x: "torch.Tensor") -> "torch.Tensor":
        from torch.nn.attention.flex_attention import flex_attention

        for proj, out in zip(self.proj, self.out):
            q, k, v = proj(x).view(1, 128, 3, 4, 16).permute(2, 0, 3, 1, 4)
            x = x + out(flex_attention(q, k, v).transpose(1, 2).reshape(1, 128, 64))
        return x


def _flex_trace(tmp_path: Path, device: str, mode: str, compile: bool) -> Path:
    torch.manual_seed(0)
    model = _FlexModel().to(device)
    x = torch.randn(1, 128, 64, device=device)
    step = train.make_step(model, lambda: {"x": x}, lambda out: out.float().square().mean(), mode, compile=compile)
    return Path(train.record(step, str(tmp_path), device=device, active=STEPS, warmup_calls=2 if compile else 1))


def test_eager_flex_attention_is_one_block_per_call(tmp_path: Path) -> None:
    """Eager FlexAttention (CPU: inference only) runs an unfused reference under FlexAttentionAutogradOp."""
    res = analyze(_flex_trace(tmp_path, "cpu", "infer", False)).check()
    assert [(b.name, b.found_by) for b in res.blocks] == [("FlexAttentionAutogradOp", "fused-op")] * LAYERS * STEPS


@pytest.mark.cuda
def test_cuda_compiled_flex_attention_training(tmp_path: Path) -> None:
    """Compiled FlexAttention on GPU: Triton templates, forward and backward, no host attention op."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    res = analyze(_flex_trace(tmp_path, "cuda", "train", True)).check()
    fwd = [b for b in res.blocks if b.phase == "forward"]
    bwd = [b for b in res.blocks if b.phase == "backward"]
    assert len(fwd) == len(bwd) == LAYERS * STEPS, [(b.name, b.phase, b.found_by) for b in res.blocks]
    assert all(b.categories["fused_attention"] > 0 for b in res.blocks)
