"""Does it fit? Weights + KV cache for users x context + runtime overhead, against VRAM."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .facts import MEASURED_HERE, Candidate, fact, fmt, users_str
from .specs import GpuSpec, ModelSpec

GIB = 1024**3

# Runtime overhead per GPU, beyond weights and KV cache. Estimates, stated so they can be argued:
# - CUDA context + cuBLAS workspace: what an idle CUDA process shows in nvidia-smi (0.3-0.5 GiB).
CUDA_CONTEXT_GIB = 0.5
# - vLLM profiles a peak forward pass (max_num_batched_tokens) and captures CUDA graphs before it
#   sizes the KV cache; for a 7B model with a 152k vocabulary that peak is 1-2 GiB.
VLLM_ACTIVATIONS_GIB = 1.5
# - llama.cpp compute buffers at the default -ub 512 (the logits of a 152k vocabulary alone are
#   0.3 GB). Checked against measured-here.md: H200 peak 5.84 GiB = 4.36 weights + 0.44 KV
#   (8192 tokens) + 1.04 everything else.
LLAMACPP_BUFFERS_GIB = 0.6

OVERHEAD_GIB = {
    "vllm": CUDA_CONTEXT_GIB + VLLM_ACTIVATIONS_GIB,
    "llamacpp": CUDA_CONTEXT_GIB + LLAMACPP_BUFFERS_GIB,
}
OVERHEAD_WHY = {
    "vllm": "CUDA context and cuBLAS workspace plus vLLM's profiled activation peak and CUDA graphs",
    "llamacpp": "CUDA context plus llama.cpp compute buffers (checked against " + MEASURED_HERE + ")",
}


def kv_bytes_per_token(model: ModelSpec, cache_bytes: float = 2.0) -> float:
    """K and V, for every layer and KV head: 2 * layers * kv_heads * head_dim * bytes."""
    return 2 * model.layers * model.kv_heads * model.head_dim * cache_bytes


def weight_bytes(candidate: Candidate, model: ModelSpec,
                 variant_bytes: Mapping[str, float] | None = None) -> tuple[float, str]:
    """Size of the candidate's weights for this model, and where the figure comes from."""
    if variant_bytes and candidate.quantization in variant_bytes:
        return float(variant_bytes[candidate.quantization]), "the variant's size as given"
    if candidate.quantization in model.known_weight_bytes:
        return float(model.known_weight_bytes[candidate.quantization]), \
            f"known {candidate.quantization} file size of {model.name}"
    size = fact(candidate.size_fact)
    layer_params = (model.params_b - model.embedding_params_b) * 1e9
    total = layer_params * size.value / 8 + model.embedding_params_b * 1e9 * candidate.embedding_bits / 8
    return total, f"estimated from {model.params_b}B parameters: {size.statement} ({size.source})"


@dataclass(frozen=True)
class MemoryFit:
    fits: bool
    gpus_used: int  # 1, or the host's GPU count when one GPU is not enough
    weights_gib: float
    weights_source: str
    kv_bytes_per_token: float
    kv_tokens: int  # users x per-user context
    kv_cache_gib: float
    overhead_gib: float  # all GPUs used
    overhead_why: str
    required_gib: float
    usable_gib: float  # all GPUs used, after gpu_memory_utilization
    gpu_memory_utilization: float | None  # vLLM only
    headroom_gib: float  # usable - required; negative when it does not fit
    explanation: str


def memory_fit(candidate: Candidate, model: ModelSpec, gpu: GpuSpec, users: int, context_tokens: int,
               variant_bytes: Mapping[str, float] | None = None,
               gpu_memory_utilization: float | None = None) -> MemoryFit:
    """Every user may hold a full context at once: conservative, and what a user experiences
    when all of them are busy (vLLM would otherwise queue, llama.cpp would refuse long prompts)."""
    weights, weights_source = weight_bytes(candidate, model, variant_bytes)
    per_token = kv_bytes_per_token(model, candidate.kv_cache_bytes)
    kv_tokens = users * context_tokens
    util = None
    if candidate.backend == "vllm":
        util = gpu_memory_utilization if gpu_memory_utilization is not None \
            else fact("vllm-gpu-memory-utilization").value
    per_gpu_overhead = OVERHEAD_GIB.get(candidate.backend, CUDA_CONTEXT_GIB)

    def at(n: int) -> MemoryFit:
        overhead = per_gpu_overhead * n
        required = weights / GIB + per_token * kv_tokens / GIB + overhead
        usable = gpu.vram_gib * (util if util is not None else 1.0) * n
        fits = required <= usable
        where = "one GPU" if n == 1 else f"{n} GPUs"
        usable_how = f"{fmt(util)} x {fmt(gpu.vram_gib)} GiB" if util is not None else f"{fmt(gpu.vram_gib)} GiB"
        usable_how = f" ({usable_how} x {n})" if n > 1 else f" ({usable_how})" if util is not None else ""
        explanation = (
            f"{'Fits on' if fits else 'Does not fit on'} {where}: {fmt(weights / GIB)} GiB weights "
            f"+ {fmt(per_token * kv_tokens / GIB)} GiB KV cache ({users_str(users)} x {context_tokens} "
            f"tokens x {fmt(per_token)} bytes) + {fmt(overhead)} GiB runtime = {fmt(required)} GiB, "
            f"against {fmt(usable)} GiB usable{usable_how}."
        )
        return MemoryFit(fits, n, weights / GIB, weights_source, per_token, kv_tokens,
                         per_token * kv_tokens / GIB, overhead, OVERHEAD_WHY.get(candidate.backend, ""),
                         required, usable, util, usable - required, explanation)

    one = at(1)
    if one.fits or gpu.count <= 1:
        return one
    return at(gpu.count)
