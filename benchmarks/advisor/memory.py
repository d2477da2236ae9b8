"""Does it fit? What each engine allocates for the flags it would be started with, against VRAM.

- vLLM (`--max-model-len C --max-num-seqs U --gpu-memory-utilization u`) takes u x VRAM of each GPU
  at start-up: weights, its profiled activation peak and CUDA graphs, and the rest as KV cache. It
  fits when that KV cache holds U sequences of C tokens (with fewer it queues); without
  --max-model-len it serves the model's whole context and refuses to start when one sequence of it
  does not fit (said, and the launch command always sets it).
- llama-server (`-c U*C --parallel U`) allocates the KV cache for all of -c at start-up and shares
  it among its slots; it fits when weights + that cache + its buffers fit.
Several GPUs: vLLM tensor parallel over 1, 2, 4 or 8 cards, llama.cpp's layer split over any count;
the weights and KV cache are shared out, every card pays its own runtime overhead. When the 16-bit
KV cache does not fit, a quantized one (llama.cpp -ctk/-ctv q8_0; vLLM --kv-cache-dtype fp8 on any GPU
it runs on) is tried, and said. vLLM's tensor parallel is offered only where the model's heads and
(for AWQ/GPTQ) its MLP divide among the cards as vLLM requires. A fit must leave FIT_MARGIN_GIB a GPU.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Mapping

from .backends import FP16_KV, KvCache, engine_of  # noqa: F401 (KvCache: the memory model's, re-exported)
from .facts import Candidate, fact, fmt, users_str
from .specs import GpuSpec, ModelSpec

GIB = 1024**3
# The runtime overheads (each engine's runtime_overhead_gib) are estimates (calibrated on a 7B; a
# 70B's activation peak is larger): a fit that leaves less than this a GPU is not called one.
FIT_MARGIN_GIB = 0.5


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
class Capacity:
    """What fits with one KV-cache choice: the most users at the workload's context, the longest
    context at the workload's users (capped at the model's), on `gpus` cards."""

    kv_cache: str
    kv_flags: str
    kv_bytes_per_token: float
    gpus: int
    kv_pool_gib: float  # what is left for the KV cache after weights and overhead
    max_users: int  # at the workload's context
    longest_context: int  # per user, at the workload's users
    context: int
    users: int

    @property
    def sentence(self) -> str:
        where = "one GPU" if self.gpus == 1 else f"{self.gpus} GPUs"
        if self.kv_pool_gib <= 0:
            return f"With a {self.kv_cache} KV cache on {where}: the weights and runtime leave no room for it."
        return (f"With a {self.kv_cache} KV cache on {where} ({fmt(self.kv_pool_gib)} GiB for it): at most "
                f"{users_str(self.max_users)} at {self.context} tokens each; at {users_str(self.users)}, "
                f"at most {self.longest_context} tokens each.")


@dataclass(frozen=True)
class MemoryFit:
    fits: bool
    gpus_used: int  # the smallest count of the host's GPUs it fits on (the host's count when none)
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
    kv_cache: str = FP16_KV.label  # "16-bit" | "q8_0" | "FP8"
    kv_flags: str = ""  # the launch flags of a quantized KV cache
    split: str = "one GPU"  # "one GPU" | "tensor parallel" | "layer split"
    allocated_gib: float = 0.0  # what the engine takes at start-up (vLLM: all of usable)
    capacity: list[Capacity] = field(default_factory=list)  # one per KV-cache choice
    default_context_note: str = ""  # vLLM without --max-model-len, when that would not start
    basis: str = "modelled"  # "measured": weights and runtime from a launch's memory after load (launches.py)
    tensor_parallel_refused: list[str] = field(default_factory=list)  # GPU counts vLLM would not start on


def memory_fit(candidate: Candidate, model: ModelSpec, gpu: GpuSpec, users: int, context_tokens: int,
               variant_bytes: Mapping[str, float] | None = None,
               gpu_memory_utilization: float | None = None) -> MemoryFit:
    """Every user may hold a full context at once: conservative, and what a user experiences
    when all of them are busy (vLLM would otherwise queue, llama.cpp's slots are sized for it)."""
    engine = engine_of(candidate.backend)
    weights, weights_source = weight_bytes(candidate, model, variant_bytes)
    util = engine.memory_share(gpu_memory_utilization)
    per_gpu_overhead = engine.runtime_overhead_gib
    kv_tokens = users * context_tokens
    options = engine.kv_options(candidate, gpu.compute_capability)

    def pool(n: int) -> float:
        return gpu.vram_gib * (util if util is not None else 1.0) * n - per_gpu_overhead * n - weights / GIB

    def capacity(n: int, kv: KvCache) -> Capacity:
        per_token = kv_bytes_per_token(model, kv.bytes_per_value)
        left = pool(n) * GIB
        max_users = max(0, math.floor(left / (context_tokens * per_token))) if left > 0 else 0
        longest = max(0, min(model.context_length, math.floor(left / (users * per_token)))) if left > 0 else 0
        return Capacity(kv.label, kv.flags, per_token, n, pool(n), max_users, longest, context_tokens, users)

    def at(n: int, kv: KvCache) -> MemoryFit:
        per_token = kv_bytes_per_token(model, kv.bytes_per_value)
        overhead = per_gpu_overhead * n
        kv_gib = per_token * kv_tokens / GIB
        required = weights / GIB + kv_gib + overhead
        usable = gpu.vram_gib * (util if util is not None else 1.0) * n
        fits = required + FIT_MARGIN_GIB * n <= usable
        split = engine.split(n)
        where = "one GPU" if n == 1 else f"{n} GPUs ({split})"
        usable_how = f"{fmt(util)} x {fmt(gpu.vram_gib)} GiB" if util is not None else f"{fmt(gpu.vram_gib)} GiB"
        usable_how = f" ({usable_how} x {n})" if n > 1 else f" ({usable_how})" if util is not None else ""
        kv_words = "KV cache" if kv.label == FP16_KV.label else f"{kv.label} KV cache ({kv.flags})"
        explanation = (
            f"{'Fits on' if fits else 'Does not fit on'} {where}: {fmt(weights / GIB)} GiB weights "
            f"+ {fmt(kv_gib)} GiB {kv_words} ({users_str(users)} x {context_tokens} "
            f"tokens x {fmt(per_token)} bytes) + {fmt(overhead)} GiB runtime = {fmt(required)} GiB, "
            f"against {fmt(usable)} GiB usable{usable_how}."
        )
        if not fits and required <= usable:
            explanation += (f" {fmt(usable - required)} GiB to spare is within the runtime estimates' "
                            f"{fmt(FIT_MARGIN_GIB)} GiB a GPU: too close to call a fit.")
        allocated = usable if util is not None else required
        default_note = engine.default_context_note(model, context_tokens, kv, pool(n))
        return MemoryFit(fits, n, weights / GIB, weights_source, per_token, kv_tokens, kv_gib, overhead,
                         engine.overhead_why, required, usable, util, usable - required,
                         explanation, kv.label, kv.flags, split, allocated,
                         [capacity(n, o) for o in options], default_note)

    # The fewest GPUs (a card less beats any split), the 16-bit cache before a quantized one; else
    # the 16-bit cache on all of them, said not to fit.
    counts, refused = engine.gpu_counts(candidate, gpu, model)
    for n in counts:
        for kv in options:
            fit = at(n, kv)
            if fit.fits:
                return dataclasses.replace(fit, tensor_parallel_refused=refused)
    return dataclasses.replace(at(counts[-1], options[0]), tensor_parallel_refused=refused)
