"""Tiny Hugging Face ``transformers`` models built from configs (random weights, nothing downloaded).

Why configs and not checkpoints: the profiler answer depends on the model's structure (layers,
attention implementation), not its weights, and the scripts and tests must run offline.
``--model gpt`` stays the script's own model (profiling/model.py); ``hf:<name>`` comes from here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

HF_MODELS = ("gpt2", "bert", "llama", "vit")
ATTN_IMPLS = ("eager", "sdpa", "flash_attention_2")


class Unavailable(RuntimeError):
    """This model/attention cannot run here (transformers or flash-attn missing, CPU for FA2)."""


@dataclass
class HFModel:
    """A built model, what one forward pass takes, and the loss a training step backpropagates."""

    name: str
    model: object
    inputs: Callable[[], dict]
    layers: int
    loss: Callable[[object], object]


def parse_model(spec: str) -> str | None:
    """``gpt`` -> None (the script's own model); ``hf:NAME`` -> NAME; anything else raises ValueError."""
    if spec == "gpt":
        return None
    if spec.startswith("hf:") and spec[3:] in HF_MODELS:
        return spec[3:]
    raise ValueError(f"unknown model {spec!r} (choose from: gpt, {', '.join('hf:' + m for m in HF_MODELS)})")


def _config(name: str, layers: int, heads: int, d_model: int, seq: int, attn: str) -> object:
    import transformers as tf

    # Dropout off: SDPA with dropout in training falls back to its math path on CPU, and the block counts and
    # categories the tests check would then depend on the backend choice, not on tracekit.
    common = dict(attn_implementation=attn)
    if name == "gpt2":
        return tf.GPT2Config(n_layer=layers, n_head=heads, n_embd=d_model, n_positions=max(seq, 64),
                             vocab_size=512, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0,
                             eos_token_id=0, **common)
    if name == "bert":
        return tf.BertConfig(num_hidden_layers=layers, num_attention_heads=heads, hidden_size=d_model,
                             intermediate_size=4 * d_model, max_position_embeddings=max(seq, 64),
                             vocab_size=512, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **common)
    if name == "llama":
        return tf.LlamaConfig(num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                              hidden_size=d_model, intermediate_size=4 * d_model,
                              max_position_embeddings=max(seq, 64), vocab_size=512, **common)
    if name == "vit":
        return tf.ViTConfig(num_hidden_layers=layers, num_attention_heads=heads, hidden_size=d_model,
                            intermediate_size=4 * d_model, image_size=32, patch_size=4, num_labels=10, **common)
    raise ValueError(f"unknown model {name!r}")


def build(name: str, *, attn: str = "sdpa", layers: int = 2, heads: int = 4, d_model: int = 64, seq: int = 32,
          batch: int = 1, device: object = "cpu", dtype: object = None, seed: int = 0) -> HFModel:
    """One model with random weights and fixed random inputs; raises Unavailable when it cannot run here."""
    try:
        import transformers as tf
    except ImportError as exc:
        raise Unavailable("transformers is not installed (pip install 'tracekit[profile]')") from exc
    import torch

    if attn not in ATTN_IMPLS:
        raise ValueError(f"unknown attention {attn!r} (choose from: {', '.join(ATTN_IMPLS)})")
    if attn == "flash_attention_2":
        try:
            import flash_attn  # noqa: F401
        except ImportError as exc:
            raise Unavailable("flash_attention_2 needs the flash-attn package") from exc
        if torch.device(device).type != "cuda":
            raise Unavailable("flash_attention_2 runs on CUDA only")
    torch.manual_seed(seed)
    cfg = _config(name, layers, heads, d_model, seq, attn)
    if name == "vit":
        model = tf.ViTForImageClassification(cfg)
        x = torch.randn(batch, 3, 32, 32, device=device, dtype=dtype)
        labels = torch.randint(0, 10, (batch,), device=device)
        inputs = {"pixel_values": x, "labels": labels}
    else:
        cls = {"gpt2": tf.GPT2LMHeadModel, "bert": tf.BertForMaskedLM, "llama": tf.LlamaForCausalLM}[name]
        model = cls(cfg)
        ids = torch.randint(0, 512, (batch, seq), device=device)
        inputs = {"input_ids": ids, "labels": ids}
    model = model.to(device=device, dtype=dtype)
    return HFModel(name, model, lambda: inputs, layers, lambda out: out.loss)
