"""A model's shape from its checkpoint's config.json (the Hugging Face layout Llama, Qwen2, Mistral
and their distills share): what the advisor needs for memory, tensor parallel and its prior — the
parameters (counted from the shape), layers, attention and KV heads, head size, MLP width, context,
and the embedding and lm_head parameters (stored 16-bit by FP8/AWQ/GPTQ checkpoints). Django-free."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    architecture: str
    params_b: float
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    context_length: int
    embedding_params_b: float  # the input embedding, plus lm_head unless tied to it
    vocab_size: int
    tied_embeddings: bool


REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")


def _positive_int(config: dict, key: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"config.json: {key} must be a whole number, at least 1 (got {value!r})")
    return value


def shape_from_config(text_or_dict: str | dict) -> ModelShape:
    """Raises ValueError with the field at fault for anything it cannot read."""
    if isinstance(text_or_dict, str):
        try:
            config = json.loads(text_or_dict)
        except ValueError as e:
            raise ValueError(f"config.json is not JSON: {e}") from None
    else:
        config = text_or_dict
    if not isinstance(config, dict):
        raise ValueError("config.json must be a JSON object")
    config = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
    missing = [k for k in REQUIRED if k not in config]
    if missing:
        raise ValueError(f"config.json lacks {', '.join(missing)}: not a dense decoder config this reader knows")
    hidden, layers = _positive_int(config, "hidden_size"), _positive_int(config, "num_hidden_layers")
    heads, mlp = _positive_int(config, "num_attention_heads"), _positive_int(config, "intermediate_size")
    vocab = _positive_int(config, "vocab_size")
    kv_heads = _positive_int(config, "num_key_value_heads") if "num_key_value_heads" in config else heads
    head_dim = _positive_int(config, "head_dim") if config.get("head_dim") else hidden // heads
    context = _positive_int(config, "max_position_embeddings") if "max_position_embeddings" in config else 0
    tied = bool(config.get("tie_word_embeddings", False))
    # Per layer: q and o (hidden x heads*head_dim), k and v (hidden x kv_heads*head_dim), the gated
    # MLP's three matrices, two norms; Qwen2-style q/k/v biases where the config says so.
    q_width, kv_width = heads * head_dim, kv_heads * head_dim
    attention = 2 * hidden * q_width + 2 * hidden * kv_width
    if config.get("attention_bias") or config.get("model_type") == "qwen2":
        attention += q_width + 2 * kv_width
    per_layer = attention + 3 * hidden * mlp + 2 * hidden
    embedding = vocab * hidden * (1 if tied else 2)
    params = layers * per_layer + embedding + hidden  # the final norm
    architecture = ",".join(config.get("architectures") or []) or str(config.get("model_type", ""))
    return ModelShape(architecture[:100], params / 1e9, layers, heads, kv_heads, head_dim, mlp, context,
                      embedding / 1e9, vocab, tied)
