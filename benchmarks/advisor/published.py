"""The V100 write-up's figures as published (a blog post comparing vLLM FP8 with llama.cpp Q4_K_M on V100s): a labelled
reference, never a measurement. 512 prompt / 100 output tokens, temperature 0.7."""

from __future__ import annotations

from ..importers.published import MODEL, published_quality
from .facts import DEEPSEEK_R1_DISTILL_QWEN_7B, fact
from .specs import Evidence, QualityEvidence

V100_LABEL = "V100 write-up (published, not measured here)"
V100_NAME = "Tesla V100-PCIE-16GB"
# The write-up's variants by the candidates' keys, as the inventory names their quantization.
V100_QUALITY_VARIANTS = {"vllm-fp8": "fp8_e4m3", "llamacpp-q4_k_m": "gguf_q4_k_m"}


# What the write-up ran: its model, the Q4_K_M file's size, its engines and flags.
WEIGHTS = {"llamacpp-q4_k_m": fact("q4km-size-r1-qwen7b").value}
VERSIONS = {"vllm-fp8": "0.6.x", "vllm-awq": "0.6.x", "llamacpp-q4_k_m": ""}
FLAGS = {"vllm-fp8": "--quantization fp8 --max-model-len 8192 --gpu-memory-utilization 0.92 --dtype float16",
         "vllm-awq": "", "llamacpp-q4_k_m": "-c 8192 --parallel 8 -ngl 99; CMAKE_CUDA_ARCHITECTURES=70"}


def published_v100_evidence() -> list[Evidence]:
    def row(id, candidate, concurrency, **figures):
        return Evidence(id=id, candidate=candidate, kind="published", label=V100_LABEL,
                        gpu_name=V100_NAME, compute_capability=(7, 0), concurrency=concurrency,
                        prompt_tokens=512, output_tokens=100, model=DEEPSEEK_R1_DISTILL_QWEN_7B.name,
                        weight_bytes=WEIGHTS.get(candidate), engine_version=VERSIONS[candidate],
                        build_flags=FLAGS[candidate], **figures)

    return [
        row("v100-writeup-vllm-fp8-c1", "vllm-fp8", 1, decode_tok_s_p50=32.0),
        # Peak memory is for the whole test; the write-up gives it in "GB" without saying which.
        row("v100-writeup-vllm-fp8-c8", "vllm-fp8", 8, decode_tok_s_p50=18.7, aggregate_tok_s=150.0,
            peak_memory_gib=9.5, note="peak GPU memory 9.5 GB over the test"),
        row("v100-writeup-llamacpp-q4_k_m-c1", "llamacpp-q4_k_m", 1, decode_tok_s_p50=56.0),
        row("v100-writeup-llamacpp-q4_k_m-c8", "llamacpp-q4_k_m", 8, decode_tok_s_p50=29.4,
            aggregate_tok_s=235.0, peak_memory_gib=6.5,
            note="peak GPU memory published as '< 6.5 GB': an upper bound"),
        row("v100-writeup-vllm-awq-c1", "vllm-awq", 1, decode_tok_s_p50=48.0,
            note="published as '~48'"),
    ]


def published_v100_quality() -> list[QualityEvidence]:
    """The write-up's perplexities (defined once, with the published reports), of its model only:
    labelled, their evaluation text not stated."""
    out = []
    for candidate, quantization in V100_QUALITY_VARIANTS.items():
        stated = published_quality(quantization)
        out.append(QualityEvidence(id=f"v100-writeup-{candidate}-quality", candidate=candidate, model=MODEL,
                                   label=V100_LABEL,
                                   point=stated.point(label=V100_LABEL, kind="published", model=MODEL)))
    return out
