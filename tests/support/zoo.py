"""A zoo of tiny ``transformers`` models profiled on CPU, for tests/suites/test_zoo.py (issue 22).

Each case builds one model from a config (random weights, 2 layers, hidden 64: nothing is downloaded),
profiles two steps of it into a Chrome trace, and counts, with forward hooks, how many attention calls
those two steps made. The count is the test's expectation; it never comes from tracekit.

An *attention module* is found structurally: a module whose class name ends in ``Attention`` (or
``SelfAttention``, ``CrossAttention``, ``Attention2``…) and that holds no other such module. So
``T5LayerSelfAttention`` (which wraps ``T5Attention``) and ``SwinAttention`` (which wraps
``SwinSelfAttention``) do not count, and neither do hybrids' ``JambaAttentionDecoderLayer`` containers,
MoE routers or Mamba mixers, whose names do not end that way.

Traces are cached (gzipped, with the hook counts beside them) under the pytest cache
(``.pytest_cache/d/tracekit-zoo/<torch>-<transformers>-<hash of this file>/``; other keys are removed): a
second run only analyses. ``pytest --cache-clear``, or ``-p no:cacheprovider`` (which records into a
temporary folder), records afresh.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

STEPS = 2  # profiled steps per trace
SEQ = 16  # tokens per sequence (text models)
LONG_SEQ = 64  # tokens per sequence where a model needs more (BigBird's block-sparse attention)
VOCAB = 256
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64)
ATTENTION_CLASS = re.compile(r"(Self|Cross)?Attention\d*$")


# -- the architectures ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Arch:
    """How to build one architecture: its config class and kwargs, the model class, and its inputs' kind."""

    config: str  # a transformers config class name
    model: str  # a transformers model class name
    inputs: str  # key of INPUTS: what one forward pass takes
    kwargs: dict = field(default_factory=dict)


def _moe(**kw: Any) -> dict:
    return {**TINY, **kw}


_LONGFORMER = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=VOCAB,
                   max_position_embeddings=64, attention_window=4)
_BIG_BIRD = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=VOCAB,
                 max_position_embeddings=128, attention_type="block_sparse", block_size=8, num_random_blocks=1)
ARCHS: dict[str, Arch] = {
    "mixtral": Arch("MixtralConfig", "MixtralForCausalLM", "causal",
                    _moe(num_local_experts=4, num_experts_per_tok=2)),
    "qwen2_moe": Arch("Qwen2MoeConfig", "Qwen2MoeForCausalLM", "causal",
                      _moe(moe_intermediate_size=64, shared_expert_intermediate_size=64, num_experts=4,
                           num_experts_per_tok=2, decoder_sparse_step=1)),
    "qwen3_moe": Arch("Qwen3MoeConfig", "Qwen3MoeForCausalLM", "causal",
                      _moe(head_dim=16, moe_intermediate_size=64, num_experts=4, num_experts_per_tok=2,
                           decoder_sparse_step=1)),
    "deepseek_v3": Arch("DeepseekV3Config", "DeepseekV3ForCausalLM", "causal",
                        _moe(num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=4,
                             num_experts_per_tok=2, n_group=1, topk_group=1, n_shared_experts=1,
                             first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
                             qk_nope_head_dim=8, v_head_dim=16)),
    # Hybrids: layer 0 a Mamba mixer, layer 1 attention (Jamba's attention layer also carries the MoE FFN).
    "jamba": Arch("JambaConfig", "JambaForCausalLM", "causal",
                  _moe(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1,
                       num_experts=4, num_experts_per_tok=2, mamba_d_state=8, mamba_dt_rank=8,
                       use_mamba_kernels=False)),
    "zamba2": Arch("Zamba2Config", "Zamba2ForCausalLM", "causal",
                   _moe(num_key_value_heads=4, layers_block_type=["mamba", "hybrid"], mamba_d_state=8,
                        n_mamba_heads=4, chunk_size=16, use_mamba_kernels=False, adapter_rank=8)),
    "bamba": Arch("BambaConfig", "BambaForCausalLM", "causal",
                  _moe(attn_layer_indices=[1], mamba_n_heads=4, mamba_d_head=32, mamba_d_state=8,
                       mamba_chunk_size=16)),
    "falcon_h1": Arch("FalconH1Config", "FalconH1ForCausalLM", "causal",
                      _moe(head_dim=16, mamba_n_heads=4, mamba_d_head=32, mamba_d_state=8, mamba_chunk_size=16,
                           mamba_d_ssm=128)),
    "gemma2": Arch("Gemma2Config", "Gemma2ForCausalLM", "causal", _moe(head_dim=16, sliding_window=8)),
    "gemma3": Arch("Gemma3TextConfig", "Gemma3ForCausalLM", "causal", _moe(head_dim=16, sliding_window=8)),
    "gpt_neox": Arch("GPTNeoXConfig", "GPTNeoXForCausalLM", "causal",
                     dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          vocab_size=VOCAB, max_position_embeddings=64)),
    "falcon": Arch("FalconConfig", "FalconForCausalLM", "causal",
                   dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=VOCAB)),
    "bloom": Arch("BloomConfig", "BloomForCausalLM", "causal",
                  dict(hidden_size=64, n_layer=2, n_head=4, vocab_size=VOCAB, hidden_dropout=0.0,
                       attention_dropout=0.0)),
    "modernbert": Arch("ModernBertConfig", "ModernBertForMaskedLM", "masked",
                       dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                            vocab_size=VOCAB, max_position_embeddings=64, global_attn_every_n_layers=2,
                            local_attention=8, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1,
                            sep_token_id=2)),
    "bart": Arch("BartConfig", "BartForConditionalGeneration", "seq2seq",
                 dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                      decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=VOCAB,
                      max_position_embeddings=64, dropout=0.0, attention_dropout=0.0)),
    "t5": Arch("T5Config", "T5ForConditionalGeneration", "seq2seq",
               dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
                    vocab_size=VOCAB, dropout_rate=0.0, decoder_start_token_id=0)),
    "whisper": Arch("WhisperConfig", "WhisperForConditionalGeneration", "speech",
                    dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                         decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=VOCAB,
                         num_mel_bins=16, max_source_positions=16, max_target_positions=32,
                         decoder_start_token_id=1, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                         suppress_tokens=None, begin_suppress_tokens=None)),
    "swin": Arch("SwinConfig", "SwinForImageClassification", "image",
                 dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4,
                      num_labels=10)),
    "clip": Arch("CLIPConfig", "CLIPModel", "clip",
                 dict(projection_dim=32,
                      text_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                       num_attention_heads=4, vocab_size=VOCAB, max_position_embeddings=32),
                      vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, image_size=32, patch_size=8))),
    "llama": Arch("LlamaConfig", "LlamaForCausalLM", "causal", dict(TINY)),
    # An attention layer around the core (issue 38, class 4): BertAttention adds the output projection around the
    # innermost BertSelfAttention; BertLayer also holds the MLP (BertIntermediate).
    "bert": Arch("BertConfig", "BertForMaskedLM", "masked",
                 dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      vocab_size=VOCAB, max_position_embeddings=64, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)),
    # Issue 38. GPT-OSS: attention sinks (scores cat a sink column before the softmax, sliced off after it).
    "gpt_oss": Arch("GptOssConfig", "GptOssForCausalLM", "causal",
                    _moe(head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=8)),
    # Longformer: chunked sliding-window scores (einsum chunks, pads, diagonals) → softmax [B, L, H, 2w + 1].
    "longformer": Arch("LongformerConfig", "LongformerForMaskedLM", "causal", _LONGFORMER),
    # ... with token 0 global (a classifier's CLS): the global keys' scores cat to the window's before the softmax,
    # and a second attention of the global token over all (its own projections, bmm → softmax → bmm) in one call.
    "longformer_global": Arch("LongformerConfig", "LongformerForMaskedLM", "global", _LONGFORMER),
    # BigBird block-sparse: five softmaxes per attention call (first, second, middle bands, second last, last).
    # Block-sparse runs only beyond (5 + 2 * num_random_blocks) * block_size = 56 tokens: LONG_SEQ is 64.
    "big_bird": Arch("BigBirdConfig", "BigBirdModel", "long", _BIG_BIRD),
    "big_bird_mlm": Arch("BigBirdConfig", "BigBirdForMaskedLM", "long_labels", _BIG_BIRD),  # (a loss to train on)
}


def _causal(torch: Any, g: Any) -> dict:
    ids = torch.randint(3, VOCAB, (1, SEQ), generator=g)
    return {"input_ids": ids, "labels": ids}


def _masked(torch: Any, g: Any) -> dict:
    return _causal(torch, g)


def _global(torch: Any, g: Any) -> dict:
    """Causal-style inputs and a global attention mask with the first token global (Longformer's CLS)."""
    d = _causal(torch, g)
    mask = torch.zeros_like(d["input_ids"])
    mask[:, 0] = 1
    return {**d, "global_attention_mask": mask}


def _long(torch: Any, g: Any) -> dict:
    return {"input_ids": torch.randint(3, VOCAB, (1, LONG_SEQ), generator=g)}


def _long_labels(torch: Any, g: Any) -> dict:
    ids = torch.randint(3, VOCAB, (1, LONG_SEQ), generator=g)
    return {"input_ids": ids, "labels": ids}


def _seq2seq(torch: Any, g: Any) -> dict:
    return {"input_ids": torch.randint(3, VOCAB, (1, SEQ), generator=g),
            "labels": torch.randint(3, VOCAB, (1, SEQ // 2), generator=g)}


def _speech(torch: Any, g: Any) -> dict:
    # Whisper's encoder takes 2 × max_source_positions frames of num_mel_bins features.
    return {"input_features": torch.randn(1, 16, 32, generator=g)}


def _image(torch: Any, g: Any) -> dict:
    return {"pixel_values": torch.randn(1, 3, 32, 32, generator=g), "labels": torch.randint(0, 10, (1,), generator=g)}


def _clip(torch: Any, g: Any) -> dict:
    return {"input_ids": torch.randint(3, VOCAB, (2, SEQ), generator=g),
            "pixel_values": torch.randn(2, 3, 32, 32, generator=g), "return_loss": True}


INPUTS: dict[str, Callable[[Any, Any], dict]] = {
    "causal": _causal, "masked": _masked, "seq2seq": _seq2seq, "speech": _speech, "image": _image, "clip": _clip,
    "global": _global, "long": _long, "long_labels": _long_labels}


# -- the cases -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One profiled trace: an architecture under one attention implementation and profiler setting."""

    arch: str
    attn: str = "sdpa"  # eager | sdpa
    mode: str = "infer"  # infer | train (forward + backward + SGD) | generate
    stack: bool = False  # with_stack=True: nn.Module slices and Python frames in the trace
    shapes: bool = False  # record_shapes=True
    experts: str | None = None  # MoE experts_implementation: batched_mm | grouped_mm
    compile: bool = False  # torch.compile (CPU inductor)
    slow: bool = False  # marked @pytest.mark.slow
    # Issue 38: torch.compile of each attention module alone (Module.compile(), "regional compilation"): its
    # nn.Module slice, in a stack trace, holds a Torch-Compiled Region.
    regional: bool = False
    # False: the attention runs in compiled code that no op names and no attention scope surrounds (a plain
    # flex_attention trace, a whole compiled eager model). No block can be found; tracekit must list the compiled
    # regions under "attention outside blocks" instead (tests/suites/test_zoo.py).
    seen: bool = True

    @property
    def id(self) -> str:
        parts = [self.arch, self.experts, self.attn, self.mode, "stack" if self.stack else "plain",
                 "shapes" if self.shapes else None, "compiled" if self.compile else None,
                 "regional" if self.regional else None]
        return "-".join(p for p in parts if p)

    @property
    def compiled(self) -> bool:
        """Compiled in any way (the whole model, or each attention module)."""
        return self.compile or self.regional


CASES: list[Case] = [
    # MoE (class 1: a router softmax between expert matmuls in plain SDPA traces)
    Case("mixtral"),
    Case("mixtral", "eager", stack=True, shapes=True),
    Case("mixtral", experts="batched_mm", mode="train"),
    Case("qwen2_moe", experts="batched_mm"),
    Case("qwen2_moe", experts="batched_mm", shapes=True),
    Case("qwen2_moe", experts="grouped_mm", stack=True),
    Case("qwen3_moe", experts="batched_mm"),
    Case("qwen3_moe", experts="grouped_mm", mode="train", shapes=True),
    Case("qwen3_moe", "eager", experts="batched_mm", stack=True),
    Case("deepseek_v3", shapes=True),
    Case("deepseek_v3", "eager", mode="train", stack=True),
    Case("deepseek_v3", experts="batched_mm"),
    # Hybrids (class 1 in plain traces; class 2, *AttentionDecoderLayer, in stack traces)
    Case("jamba"),
    Case("jamba", experts="batched_mm"),
    Case("jamba", stack=True),
    Case("jamba", "eager", mode="train", shapes=True),
    Case("zamba2"),
    Case("zamba2", stack=True, shapes=True),
    Case("bamba"),
    Case("bamba", stack=True),
    Case("falcon_h1", mode="train"),
    Case("falcon_h1", "eager", stack=True),
    # Dense decoders, encoders, encoder-decoders, vision
    Case("gemma2", "eager", stack=True),
    Case("gemma2", "eager", mode="train"),
    Case("gemma3", mode="train", shapes=True),
    Case("gemma3", "eager", stack=True),
    Case("gpt_neox", "eager"),
    Case("gpt_neox", stack=True),
    Case("falcon", mode="train"),
    Case("bloom", "eager", stack=True, shapes=True),
    Case("modernbert", "eager", mode="train"),
    Case("modernbert", stack=True),
    Case("modernbert", "eager", stack=True),
    Case("bart", mode="train"),
    Case("bart", "eager", mode="train", stack=True),
    Case("t5", "eager", mode="train"),
    Case("t5", "sdpa", mode="train", stack=True, shapes=True),
    Case("whisper", mode="generate"),
    Case("whisper", "eager", mode="generate", stack=True),
    Case("whisper", mode="generate", stack=True, shapes=True),
    Case("swin", "eager", stack=True),
    Case("swin", mode="train"),
    Case("clip", mode="train", stack=True),
    Case("clip", "eager"),
    Case("bert", stack=True),  # issue 38, class 4: the layer around the core
    Case("bert", "eager", mode="train", stack=True, shapes=True),
    # Issue 38: sinks and chunked windows (glue between the score product and the softmax), several softmaxes
    # in one call (block-sparse)
    Case("gpt_oss", "eager"),
    Case("gpt_oss", "eager", shapes=True),
    Case("gpt_oss", "eager", mode="train", stack=True),
    Case("longformer", "eager"),
    Case("longformer", "eager", shapes=True),
    Case("longformer_global", "eager", stack=True, shapes=True),
    # ... without modules: the global token's own projections between the windowed and the global triples are no
    # layer boundary (rule input-projections); with and without the recorded shapes
    Case("longformer_global", "eager"),
    Case("longformer_global", "eager", shapes=True),
    Case("longformer_global", "eager", mode="train"),
    Case("longformer_global", "eager", mode="train", stack=True),
    Case("big_bird", "eager"),
    Case("big_bird", "eager", shapes=True),
    Case("big_bird", "eager", stack=True),
    Case("big_bird_mlm", "eager", mode="train"),
    Case("llama", compile=True, slow=True),
    Case("llama", mode="train", compile=True, slow=True),
    # Compiled attention that no op names (issue 38): FlexAttention (transformers compiles flex_attention itself,
    # one bare Torch-Compiled Region per call on CPU), compiled eager attention (extern bmm calls in the region).
    Case("llama", "flex_attention", seen=False),
    Case("llama", "flex_attention", stack=True, shapes=True),
    Case("llama", "eager", compile=True, seen=False),
    Case("llama", "eager", stack=True, regional=True),
    Case("llama", "eager", mode="train", stack=True, regional=True),  # (CPU FlexAttention has no backward)
]


# -- building and stepping a model -----------------------------------------------------------------------
class Unavailable(RuntimeError):
    """This architecture cannot be built with the installed transformers."""


def build(case: Case) -> tuple[Any, dict]:
    """The model (random weights, seeded) and the fixed inputs of one forward pass."""
    import torch
    import transformers as tf

    arch = ARCHS[case.arch]
    if not hasattr(tf, arch.config) or not hasattr(tf, arch.model):
        raise Unavailable(f"transformers {tf.__version__} has no {arch.config}/{arch.model}")
    torch.manual_seed(0)
    extra = {"experts_implementation": case.experts} if case.experts else {}
    cfg = getattr(tf, arch.config)(**arch.kwargs, attn_implementation=case.attn, **extra)
    model = getattr(tf, arch.model)(cfg)
    _check_implementations(model.config, case)
    inputs = INPUTS[arch.inputs](torch, torch.Generator().manual_seed(1))
    return model, inputs


def _check_implementations(cfg: Any, case: Case) -> None:
    """The model runs what the case names (transformers may fall back silently: the case would test another thing)."""
    assert cfg._attn_implementation == case.attn, (case.id, cfg._attn_implementation)
    if case.experts:
        assert cfg._experts_implementation == case.experts, (case.id, cfg._experts_implementation)


def make_step(model: Any, inputs: dict, case: Case) -> Callable[[], None]:
    """One zero-argument step: inference under no_grad, a training step, or a short greedy generate()."""
    import torch

    run = torch.compile(model) if case.compile else model
    if case.regional:
        for _, m in attention_modules(model):
            m.compile()
    if case.mode == "train":
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)

        def train_step() -> None:
            opt.zero_grad(set_to_none=True)
            run(**inputs).loss.backward()
            opt.step()
        return train_step
    model.eval()
    if case.mode == "generate":
        gen = {k: v for k, v in inputs.items() if k != "labels"}
        return lambda: _no_grad(torch, lambda: model.generate(**gen, max_new_tokens=4, min_new_tokens=4,
                                                              do_sample=False, use_cache=True))
    fwd = {k: v for k, v in inputs.items() if k not in ("labels", "return_loss")}
    return lambda: _no_grad(torch, lambda: run(**fwd))


def _no_grad(torch: Any, fn: Callable[[], object]) -> None:
    with torch.no_grad():
        fn()


# -- counting attention calls with hooks -----------------------------------------------------------------
def attention_modules(model: Any) -> list[tuple[str, Any]]:
    """(qualified name, module) of every innermost module whose class name ends like an attention."""
    matching = [(n, m) for n, m in model.named_modules() if ATTENTION_CLASS.search(type(m).__name__)]
    names = [n for n, _ in matching]
    return [(n, m) for n, m in matching
            if not any(o != n and (n == "" or o.startswith(n + ".")) for o in names)]


class CallCounter:
    """Forward calls of the attention modules, one count per step (``next_step`` opens the next count)."""

    def __init__(self, model: Any) -> None:
        self.modules = attention_modules(model)
        self.per_step: list[int] = []
        self.handles = [m.register_forward_hook(self._hook) for _, m in self.modules]

    def _hook(self, *_: object) -> None:
        self.per_step[-1] += 1

    def next_step(self) -> None:
        self.per_step.append(0)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


# Softmax op names (aten overload packets) that a softmax call reaches below autograd; the trace names them aten::<…>.
SOFTMAX_OPS = frozenset({"softmax", "_softmax", "_safe_softmax", "_masked_softmax"})


def count_softmaxes(model: Any, inputs: dict, case: Case) -> int:
    """Softmax calls made inside the attention modules in one eager (never compiled), un-profiled step: forward
    pre-hooks and hooks keep the depth of attention calls, and a dispatch mode counts each softmax op that runs
    while it is above 0 (an op dispatched inside another's kernel is not seen twice). Not during profiling: a
    Python dispatch mode records every op twice there."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    depth = [0]
    count = [0]

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if depth[0] and func._overloadpacket.__name__ in SOFTMAX_OPS:
                count[0] += 1
            return func(*args, **(kwargs or {}))

    def enter(*_: object) -> None:
        depth[0] += 1

    def leave(*_: object) -> None:
        depth[0] -= 1

    handles = []
    for _, m in attention_modules(model):
        handles += [m.register_forward_pre_hook(enter), m.register_forward_hook(leave)]
    step = make_step(model, inputs, replace(case, compile=False))
    try:
        with Count():
            step()
    finally:
        for h in handles:
            h.remove()
    assert depth[0] == 0 and torch is not None
    return count[0]


# -- recording ----------------------------------------------------------------------------------------
@dataclass
class Recorded:
    """A recorded case: its trace, and what the hooks counted in its profiled steps."""

    case: Case
    trace: Path
    forward_calls: int  # attention forward calls in the profiled steps
    attention_classes: list[str]  # class names of the innermost attention modules
    per_step: list[int]  # forward calls per profiled step
    softmaxes: int = 0  # softmax calls inside the attention modules in one step (count_softmaxes)

    @property
    def backward_calls(self) -> int:
        return self.forward_calls if self.case.mode == "train" else 0


def record(case: Case, out: Path) -> Recorded:
    """Build, warm up, and profile STEPS steps (schedule wait=0, warmup=1) into ``out/trace.json.gz``.

    A compiled model is counted on eager steps of the same module before it is compiled: a hook that
    bumps a Python counter inside a compiled region makes dynamo guard on the count and recompile
    every step (the profiled steps would then hold compilation, not the model).
    """
    model, inputs = build(case)
    _check_runs_as_configured(model, inputs, case)
    # (compiled code and flex_attention, a higher-order op, run under no Python dispatch mode; their check skips)
    softmaxes = 0 if case.compiled or case.attn == "flex_attention" else count_softmaxes(model, inputs, case)
    counter = CallCounter(model)
    eager_counts = _count_eager(model, inputs, case, counter) if case.compiled else None
    step = make_step(model, inputs, case)
    for _ in range(2 if case.compiled else 1):  # un-profiled: compilation, allocator, lazy init
        counter.next_step()
        step()
    path = _profile(step, counter, case, out)
    counter.remove()
    active = eager_counts or counter.per_step[-STEPS:]
    classes = sorted({type(m).__name__ for _, m in counter.modules})
    return Recorded(case, path, sum(active), classes, active, softmaxes)


def _check_runs_as_configured(model: Any, inputs: dict, case: Case) -> None:
    """One un-profiled step, then each string setting of the config is still what the case set: BigBird switches
    itself to full attention when the sequence is too short for block-sparse (the case would test another thing)."""
    make_step(model, inputs, replace(case, compile=False))()
    for key, want in ARCHS[case.arch].kwargs.items():
        if isinstance(want, str):
            got = {getattr(m, key) for m in (model.config, *model.modules()) if isinstance(getattr(m, key, None), str)}
            assert got == {want}, (case.id, key, got)


def _count_eager(model: Any, inputs: dict, case: Case, counter: CallCounter) -> list[int]:
    """STEPS eager steps of the not yet compiled model, counted; then the hooks go."""
    eager = make_step(model, inputs, replace(case, compile=False, regional=False))
    for _ in range(STEPS):
        counter.next_step()
        eager()
    counter.remove()
    return counter.per_step[:]


def _profile(step: Callable[[], None], counter: CallCounter, case: Case, out: Path) -> Path:
    """One warm-up step and STEPS active steps under the profiler, one count per step."""
    from torch.profiler import ProfilerActivity, profile, schedule

    out.mkdir(parents=True, exist_ok=True)
    path = out / "trace.json.gz"  # gzip: about a tenth of the size in the cache
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=STEPS, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path)), with_stack=case.stack,
                 record_shapes=case.shapes) as prof:
        for _ in range(1 + STEPS):
            counter.next_step()
            step()
            prof.step()
    return path


def cache_key() -> str:
    """torch and transformers versions and this file's hash: a change to any of them records afresh."""
    import torch
    import transformers

    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    return f"torch{torch.__version__}-tf{transformers.__version__}-{digest}"


def prune_stale(root: Path) -> None:
    """Remove the cached recordings of other versions or other revisions of this file, beside ``root``."""
    import shutil

    for old in root.parent.iterdir():
        if old.is_dir() and old.name != root.name:
            shutil.rmtree(old, ignore_errors=True)


def cached_record(case: Case, root: Path) -> Recorded:
    """``record`` once per cache: the hook counts are stored beside the trace, written last."""
    out = root / case.id
    meta = out / "expected.json"
    if meta.is_file():
        d = json.loads(meta.read_text())
        return Recorded(case, out / "trace.json.gz", d["forward_calls"], d["attention_classes"], d["per_step"],
                        d["softmaxes"])
    rec = record(case, out)
    meta.write_text(json.dumps({"case": asdict(case), "forward_calls": rec.forward_calls,
                                "attention_classes": rec.attention_classes, "per_step": rec.per_step,
                                "softmaxes": rec.softmaxes}))
    return rec


# -- the attention layer around each call (issue 38, class 4) ---------------------------------------------
ACTIVATION_CLASS = re.compile(r"(?i)(?:gelu|silu|relu|swish|mish|activation)$")


def _activation(m: Any) -> bool:
    """An MLP's activation module: torch's or transformers' own, or a model's (BloomGelu); softmax and
    nn.MultiheadAttention live in torch's activation module too and are none."""
    cls = type(m)
    return ((cls.__module__ in ("torch.nn.modules.activation", "transformers.activations")
             or ACTIVATION_CLASS.search(cls.__name__) is not None)
            and "Softmax" not in cls.__name__ and cls.__name__ != "MultiheadAttention")


MOE_CLASS = re.compile(r"(?:Router|Experts|MoE|Moe|MoeBlock)$")  # a MoE's router or its experts, by class name


def expected_layers(model: Any) -> dict[str, set[str | None]]:
    """Attention class -> the class names of the layers around its instances (None: it is its own layer), from the
    model's structure alone: walking out from each innermost attention module, the outermost called module that
    holds this one attention module, no other, no activation (an MLP or MoE expert has one) and no MoE router or
    experts module (GPT-OSS's experts apply their gated activation inline, without an activation module).
    Containers that are never called (ModuleList, ModuleDict) are passed through."""
    import torch

    attn = attention_modules(model)
    names = [n for n, _ in attn]
    mods = dict(model.named_modules())
    acts = [n for n, m in mods.items() if _activation(m) or MOE_CLASS.search(type(m).__name__)]
    out: dict[str, set[str | None]] = {}
    for n, m in attn:
        best = None
        parts = n.split(".")
        for k in range(len(parts) - 1, -1, -1):  # the ancestors, from the parent outward ("" is the model)
            a = ".".join(parts[:k])
            under = [o for o in names + acts if a == "" or o == a or o.startswith(a + ".")]
            if sum(o in names for o in under) != 1 or any(o in acts for o in under):
                break
            if not isinstance(mods[a], (torch.nn.ModuleList, torch.nn.ModuleDict)):
                best = a
        out.setdefault(type(m).__name__, set()).add(None if best is None else type(mods[best]).__name__)
    return out
