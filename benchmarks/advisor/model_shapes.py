"""The architectures of the dense models that published figures were measured on (each model's
config.json on its Hugging Face page): what the step-time model needs to turn a figure into bytes
read and operations done. Mixture-of-experts models are left out: their active parameters per token
vary with routing, and no figure here says which experts a batch touched.
"""

from __future__ import annotations

import re

from .specs import ModelSpec


def _m(name, params_b, layers, heads, kv_heads, head_dim, embedding_params_b, context=32768):
    return ModelSpec(name, params_b, layers, kv_heads, head_dim, context, embedding_params_b=embedding_params_b,
                     attention_heads=heads)


# name, parameters (billions), layers, attention heads, KV heads, head size, embedding (+ lm_head
# where untied) parameters (billions)
SHAPES = (
    _m("Llama-2-7B", 6.74, 32, 32, 32, 128, 0.262, 4096),
    _m("Llama-2-13B", 13.02, 40, 40, 40, 128, 0.328, 4096),
    _m("LLaMA-30B", 32.5, 60, 52, 52, 128, 0.426, 2048),
    _m("LLaMA-65B", 65.2, 80, 64, 64, 128, 0.524, 2048),
    _m("Llama-2-70B", 69.0, 80, 64, 8, 128, 0.524, 4096),
    _m("Llama-3-8B", 8.03, 32, 32, 8, 128, 1.05, 131072),
    _m("Llama-3-70B", 70.6, 80, 64, 8, 128, 2.10, 131072),
    _m("Llama-3.2-1B", 1.24, 16, 32, 8, 64, 0.263, 131072),
    _m("Llama-3.2-3B", 3.21, 28, 24, 8, 128, 0.394, 131072),
    _m("Mistral-7B", 7.24, 32, 32, 8, 128, 0.268),
    _m("Mistral-Nemo-12B", 12.2, 40, 32, 8, 128, 1.34, 131072),
    _m("TinyLlama-1.1B", 1.10, 22, 32, 4, 64, 0.131, 2048),
    _m("Qwen2.5-0.5B", 0.49, 24, 14, 2, 64, 0.136),
    _m("Qwen2.5-1.5B", 1.54, 28, 12, 2, 128, 0.233),
    _m("Qwen2.5-3B", 3.09, 36, 16, 2, 128, 0.311),
    _m("Qwen2.5-7B", 7.62, 28, 28, 4, 128, 1.09, 131072),
    _m("Qwen2.5-14B", 14.77, 48, 40, 8, 128, 1.56, 131072),
    _m("Qwen2.5-32B", 32.76, 64, 40, 8, 128, 1.56, 131072),
    _m("Qwen2.5-72B", 72.7, 80, 64, 8, 128, 2.49, 131072),
    _m("Qwen3-0.6B", 0.60, 28, 16, 8, 128, 0.156, 40960),
    _m("Qwen3-4B", 4.02, 36, 32, 8, 128, 0.389, 40960),
    _m("Qwen3-8B", 8.19, 36, 32, 8, 128, 1.245, 40960),
    _m("Qwen3-14B", 14.8, 40, 40, 8, 128, 1.556, 40960),
    _m("Qwen3-32B", 32.8, 64, 64, 8, 128, 1.556, 40960),
    _m("Phi-4-mini", 3.84, 32, 24, 8, 128, 0.615, 131072),
    _m("Pythia-2.8B", 2.78, 32, 32, 32, 80, 0.258, 2048),
    _m("deepseek-coder-1.3B", 1.35, 24, 16, 16, 128, 0.132, 16384),
)
BY_NAME = {m.name: m for m in SHAPES}

# How the names models are published under map to those shapes (fine-tunes, distillations and
# quantized checkpoints keep their base model's architecture). Checked in order.
ALIASES = (
    (r"tinyllama", "TinyLlama-1.1B"),
    (r"llama-3\.2-1b", "Llama-3.2-1B"), (r"llama-3\.2-3b", "Llama-3.2-3B"),
    (r"(llama-3(\.[13])?-70b|llama 70b)", "Llama-3-70B"), (r"(llama-3(\.1)?-8b|llama 8b)", "Llama-3-8B"),
    (r"llama-2-70b", "Llama-2-70B"), (r"llama-65b", "LLaMA-65B"), (r"llama-30b", "LLaMA-30B"),
    (r"(llama-2-13b|llama-13b|wizardlm-13b)", "Llama-2-13B"),
    (r"(llama-2-7b|llama-7b|codellama-7b|openllama-7b|llama 7b)", "Llama-2-7B"),
    (r"mistral-nemo", "Mistral-Nemo-12B"), (r"mistral-7b", "Mistral-7B"),
    (r"(qwen2\.5|qwen2)(-coder)?-72b", "Qwen2.5-72B"), (r"qwen2\.5(-coder)?-32b", "Qwen2.5-32B"),
    (r"(qwen2\.5(-coder)?|distill-qwen)-14b", "Qwen2.5-14B"), (r"(qwen2\.5|qwen2)(-coder)?-7b", "Qwen2.5-7B"),
    (r"qwen2\.5(-coder)?-3b", "Qwen2.5-3B"), (r"(qwen2\.5(-coder)?|distill-qwen)-1\.5b", "Qwen2.5-1.5B"),
    (r"qwen2\.5(-coder)?-0\.5b", "Qwen2.5-0.5B"),
    (r"qwen3-0\.6b", "Qwen3-0.6B"), (r"qwen3-4b", "Qwen3-4B"), (r"qwen3-8b", "Qwen3-8B"),
    (r"qwen3-14b", "Qwen3-14B"), (r"qwen3-32b", "Qwen3-32B"),
    (r"phi-4-mini", "Phi-4-mini"), (r"pythia-2\.8b", "Pythia-2.8B"), (r"deepseek-coder-1\.3b", "deepseek-coder-1.3B"),
)
# Names that look dense but are not (mixture of experts, vision towers): never matched.
NOT_DENSE = re.compile(r"(-a\d+b|moe|gpt-oss|deepseek-v2|glm|vl-|next)", re.IGNORECASE)


def shape_of(name: str) -> ModelSpec | None:
    """The architecture a published model name has, or None where it is not a known dense model."""
    low = name.lower()
    if NOT_DENSE.search(low):
        return None
    for pattern, shape in ALIASES:
        if re.search(pattern, low):
            return BY_NAME[shape]
    return None
