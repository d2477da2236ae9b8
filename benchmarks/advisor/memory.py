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
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
# The runtime overheads above are estimates (calibrated on a 7B; a 70B's activation peak is larger):
# a fit that leaves less than this a GPU is not called one.
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
class KvCache:
    """How the KV cache is stored: its label, bytes per value, the flags that ask for it, the fact."""

    label: str
    bytes_per_value: float
    flags: str = ""
    fact_id: str = ""


FP16_KV = KvCache("16-bit", 2.0)


def kv_options(candidate: Candidate, cc: tuple[int, int]) -> list[KvCache]:
    """The 16-bit cache, then the quantized one this engine offers on this GPU."""
    options = [KvCache(FP16_KV.label, candidate.kv_cache_bytes)]
    if candidate.backend == "llamacpp":
        f = fact("llamacpp-kv-quant")
        options.append(KvCache("q8_0", f.value, "-ctk q8_0 -ctv q8_0", f.id))
    elif candidate.backend == "vllm":
        f = fact("vllm-kv-fp8")  # E4M3 where the GPU converts it, E5M2 below (min_cc: the E4M3 floor)
        dtype = "fp8" if tuple(cc) >= f.min_cc else "fp8_e5m2"
        options.append(KvCache("FP8", f.value, f"--kv-cache-dtype {dtype}", f.id))
    return options


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


def tensor_parallel_refusal(candidate: Candidate, model: ModelSpec, n: int) -> str:
    """Why vLLM refuses to start this model with --tensor-parallel-size n ("" = it starts, or the
    model's shape is not known well enough to tell)."""
    if candidate.backend != "vllm" or n == 1:
        return ""
    f = fact("vllm-tp-heads")
    heads, kv = model.attention_heads, model.kv_heads
    if heads and heads % n:
        return f"{model.name}'s {heads} attention heads do not divide among {n} GPUs"
    if kv and kv % n and n % kv:
        return f"{model.name}'s {kv} KV heads neither divide among {n} GPUs nor {n} by them"
    group = int(f.value)
    if candidate.quantization in ("awq", "gptq") and model.intermediate_size:
        share = model.intermediate_size / n
        if share != int(share) or int(share) % group:
            return (f"each of {n} GPUs would hold {fmt(share)} of {model.name}'s {model.intermediate_size}-wide MLP, "
                    f"not a multiple of the {candidate.quantization.upper()} group size {group}")
    return ""


def _counts(candidate: Candidate, gpu: GpuSpec, model: ModelSpec) -> tuple[list[int], list[str]]:
    """The GPU counts the engine can start the model on, and why the others are refused."""
    if candidate.backend != "vllm":
        return list(range(1, gpu.count + 1)), []
    counts, refused = [], []
    for n in (n for n in TENSOR_PARALLEL_SIZES if n <= gpu.count):
        why = tensor_parallel_refusal(candidate, model, n)
        if why:
            refused.append(f"--tensor-parallel-size {n} would not start: {why} ({fact('vllm-tp-heads').source}).")
        else:
            counts.append(n)
    return counts, refused


def memory_fit(candidate: Candidate, model: ModelSpec, gpu: GpuSpec, users: int, context_tokens: int,
               variant_bytes: Mapping[str, float] | None = None,
               gpu_memory_utilization: float | None = None) -> MemoryFit:
    """Every user may hold a full context at once: conservative, and what a user experiences
    when all of them are busy (vLLM would otherwise queue, llama.cpp's slots are sized for it)."""
    weights, weights_source = weight_bytes(candidate, model, variant_bytes)
    util = None
    if candidate.backend == "vllm":
        util = gpu_memory_utilization if gpu_memory_utilization is not None \
            else fact("vllm-gpu-memory-utilization").value
    per_gpu_overhead = OVERHEAD_GIB.get(candidate.backend, CUDA_CONTEXT_GIB)
    kv_tokens = users * context_tokens
    options = kv_options(candidate, gpu.compute_capability)

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
        split = "one GPU" if n == 1 else "tensor parallel" if candidate.backend == "vllm" else "layer split"
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
        default_note = ""
        if candidate.backend == "vllm" and model.context_length > context_tokens:
            one_sequence = kv_bytes_per_token(model, kv.bytes_per_value) * model.context_length / GIB
            if one_sequence > pool(n):
                default_note = (
                    f"Without --max-model-len vLLM would serve {model.context_length} tokens and need "
                    f"{fmt(one_sequence)} GiB of KV cache for one sequence, more than the "
                    f"{fmt(max(pool(n), 0))} GiB left: it would refuse to start "
                    f"({fact('vllm-max-model-len').source}).")
        return MemoryFit(fits, n, weights / GIB, weights_source, per_token, kv_tokens, kv_gib, overhead,
                         OVERHEAD_WHY.get(candidate.backend, ""), required, usable, util, usable - required,
                         explanation, kv.label, kv.flags, split, allocated,
                         [capacity(n, o) for o in options], default_note)

    # The fewest GPUs (a card less beats any split), the 16-bit cache before a quantized one; else
    # the 16-bit cache on all of them, said not to fit.
    counts, refused = _counts(candidate, gpu, model)
    for n in counts:
        for kv in options:
            fit = at(n, kv)
            if fit.fits:
                return dataclasses.replace(fit, tensor_parallel_refused=refused)
    return dataclasses.replace(at(counts[-1], options[0]), tensor_parallel_refused=refused)
