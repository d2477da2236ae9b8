"""vLLM: its candidates, what starts where by release, how it takes memory, spreads over GPUs
and is started, and the figures its speed model rests on."""

from __future__ import annotations

from ..facts import CHECKED, Candidate, Fact, fact, fmt
from ..specs import EngineBuilds, GpuSpec, ModelSpec, parse_version
from .base import AdvisorEngine, FP16_KV, KvCache, Launch, WeightFormat, register

VLLM = "vllm"
V0_13, V0_20 = (0, 13), (0, 20)
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
# vLLM profiles a peak forward pass (max_num_batched_tokens) and captures CUDA graphs before it sizes
# the KV cache; for a 7B model with a 152k vocabulary that peak is 1-2 GiB (beyond the CUDA context).
VLLM_ACTIVATIONS_GIB = 1.5

FACTS: tuple[Fact, ...] = (
    Fact("vllm-min-cc",
         "vLLM releases before v0.20 run on compute capability 7.0 and newer (Volta included)",
         "vLLM installation docs, GPU requirements ('compute capability 7.0 or higher (e.g., V100, T4 ...)'), "
         "v0.3.3 to v0.14.0", CHECKED, min_cc=(7, 0), engine=VLLM, until=V0_20),
    Fact("vllm-min-cc-v0.20",
         "vLLM v0.20 and later need compute capability 7.5: Volta was dropped (its default wheels and images "
         "are built with PyTorch 2.11 for architectures from 7.5; CUDA 13 cannot target sm_70)",
         "vLLM installation docs gpu.cuda.inc.md ('compute capability 7.5 or higher (e.g., T4, RTX20xx, A100, "
         "L4, H100, B200)'); vllm-project/vllm PR #39878 (TORCH_CUDA_ARCH_LIST from 7.5, released in v0.20.0 "
         "with PyTorch 2.11)", CHECKED, min_cc=(7, 5), engine=VLLM, since=V0_20),
    Fact("vllm-fp8-min-cc",
         "vLLM releases before v0.13 run --quantization fp8 from compute capability 8.0 (weight-only FP8 "
         "Marlin, PR #5975, June 2024) and refuse it below (\"Minimum capability: 80\")",
         "vllm-project/vllm PR #5975; vllm/model_executor/layers/quantization/fp8.py (get_min_capability)",
         CHECKED, min_cc=(8, 0), engine=VLLM, until=V0_13),
    Fact("vllm-fp8-min-cc-pr29901",
         "vLLM v0.13 and later run FP8 checkpoints from compute capability 7.5 as weight-only W8A16 "
         "(Marlin for Turing, PR #29901, merged 2025-12-02)",
         "vllm-project/vllm PR #29901; vLLM docs v0.32.0, Quantization: FP8 W8A8 ('FP8 models will run on "
         "compute capability >= 7.5 (Turing) as weight-only W8A16, utilizing FP8 Marlin')",
         CHECKED, min_cc=(7, 5), engine=VLLM, since=V0_13),
    Fact("vllm-fp8-native-cc",
         "native FP8 W8A8 math needs FP8 tensor cores (compute capability 8.9); below that vLLM runs FP8 "
         "as weight-only W8A16 Marlin: it halves weight memory and reads, but does no FP8 math",
         "vLLM docs v0.32.0, Quantization: FP8 W8A8 ('FP8 computation is supported on NVIDIA GPUs with "
         "compute capability >= 8.9')", CHECKED, min_cc=(8, 9), engine=VLLM),
    Fact("vllm-awq-min-cc",
         "vLLM's AWQ kernels need compute capability 7.5; on a V100 vLLM raises ValueError at start-up",
         "vllm-project/vllm vllm/model_executor/layers/quantization/awq.py (get_min_capability 75); "
         "issues #1488, #4202; vLLM docs v0.9.2 supported-hardware table (AWQ: Volta no, Turing yes)",
         CHECKED, min_cc=(7, 5), engine=VLLM),
    Fact("vllm-awq-marlin",
         "on compute capability 8.0 (7.5 from v0.13, PR #29901) vLLM serves AWQ checkpoints with its faster "
         "AWQ-Marlin kernel (--quantization awq_marlin, chosen by itself when the GPU allows)",
         "vllm-project/vllm vllm/model_executor/layers/quantization/awq_marlin.py; PR #29901", CHECKED,
         min_cc=(8, 0), engine=VLLM),
    Fact("vllm-gptq-min-cc",
         "vLLM's GPTQ kernels (exllama, not Marlin) run from compute capability 6.0: GPTQ works on Volta",
         "vllm-project/vllm vllm/model_executor/layers/quantization/gptq.py (get_min_capability 60); vLLM docs "
         "v0.9.2 supported-hardware table (GPTQ: Volta yes)", CHECKED, min_cc=(6, 0), engine=VLLM),
    Fact("vllm-gguf-min-cc",
         "vLLM loads GGUF files from compute capability 6.0 (Volta included); its docs call GGUF support "
         "highly experimental and under-optimized",
         "vllm-project/vllm vllm/model_executor/layers/quantization/gguf.py (get_min_capability 60); vLLM docs: "
         "GGUF; v0.9.2 supported-hardware table (GGUF: Volta yes)", CHECKED, min_cc=(6, 0), engine=VLLM),
    Fact("vllm-volta-quant",
         "on Volta, of vLLM's quantization methods GPTQ (non-Marlin), bitsandbytes and GGUF start; AWQ, "
         "FP8 and every Marlin kernel do not",
         "vLLM docs v0.9.2, Quantization: supported hardware", CHECKED),
    Fact("vllm-gpu-memory-utilization",
         "vLLM takes --gpu-memory-utilization (default 0.9) of each GPU at start-up: weights, the profiled "
         "activation peak and CUDA graphs, and all the rest as KV cache, whatever the load",
         "vLLM engine arguments (--gpu-memory-utilization)", CHECKED, value=0.9),
    Fact("vllm-max-model-len",
         "without --max-model-len vLLM serves the model's whole context and refuses to start when one "
         "sequence of it does not fit in the KV cache (\"max seq len ... is larger than the maximum number of "
         "tokens that can be stored in KV cache\")",
         "vllm-project/vllm vllm/v1/core/kv_cache_utils.py (check_enough_kv_cache_memory); vLLM engine "
         "arguments (--max-model-len)", CHECKED),
    Fact("vllm-kv-fp8",
         "vLLM stores the KV cache in FP8 (1 byte per value, half of FP16) on every GPU it runs on, in the E4M3 "
         "format (--kv-cache-dtype fp8) from compute capability 8.9; older GPUs have no E4M3 conversions (Triton "
         "attention stops with 'type fp8e4nv not supported in this architecture'), so there it takes "
         "--kv-cache-dtype fp8_e5m2",
         "vllm-project/vllm docs/design/attention_backends.md (v0.32.0, KV cache dtypes per backend); issue "
         "#26431 (fp8 KV cache on an RTX 3090, v0.11.0); vLLM docs: Quantized KV Cache (fp8, fp8_e4m3, fp8_e5m2)",
         CHECKED, engine=VLLM, value=1.0, min_cc=(8, 9)),
    Fact("vllm-prequantized",
         "vLLM reads a pre-quantized checkpoint's method from its config and picks its fastest kernel by itself "
         "(AWQ-Marlin, GPTQ-Marlin, FP8 Marlin where the GPU allows): serve it without --quantization. An explicit "
         "awq or gptq forces the slower non-Marlin kernel (vLLM logs \"forcing awq. Use quantization=awq_marlin\"), "
         "and on a compressed-tensors checkpoint a method that differs makes vLLM refuse to start",
         "vllm-project/vllm vllm/model_executor/layers/quantization/awq_marlin.py and gptq_marlin.py "
         "(override_quantization_method); vllm/config (ModelConfig._verify_quantization)", CHECKED, engine=VLLM),
    Fact("vllm-tp-heads",
         "vLLM's tensor parallel splits attention heads evenly among the GPUs: the heads must divide by the "
         "tensor-parallel size, and the KV heads too (or the size by them, when they are replicated); for AWQ "
         "and GPTQ each GPU's share of the MLP's intermediate size must be a multiple of the group size (128), "
         "or vLLM refuses to start",
         "vllm-project/vllm vllm/config (ModelConfig.verify_with_parallel_config); vllm/model_executor/layers/"
         "quantization/utils/marlin_utils.py (verify_marlin_supports_shape)", CHECKED, engine=VLLM, value=128),
    Fact("fp8-size",
         "FP8 E4M3 stores one byte per weight; embeddings and lm_head stay 16-bit",
         "vLLM docs: FP8 W8A8 (llm-compressor keeps lm_head unquantized)", CHECKED, value=8.0),
    Fact("awq-size",
         "AWQ stores 4-bit weights with an fp16 scale and a 4-bit zero point per 128 weights "
         "(4.15625 bits per weight); embeddings and lm_head stay 16-bit",
         "vllm-project/vllm vllm/model_executor/layers/quantization/awq.py (group_size 128)",
         CHECKED, value=4.15625),
    Fact("gptq-size",
         "GPTQ 4-bit with group size 128 stores 4-bit weights with an fp16 scale and a 4-bit zero point per "
         "128 weights (4.15625 bits per weight); embeddings and lm_head stay 16-bit",
         "vllm-project/vllm vllm/model_executor/layers/quantization/gptq.py", CHECKED, value=4.15625),
)

# A requirement: the facts that state it, one per range of vLLM's releases.
REQUIREMENTS = {
    "vllm": ("vllm-min-cc", "vllm-min-cc-v0.20"),
    "vllm-fp8": ("vllm-fp8-min-cc", "vllm-fp8-min-cc-pr29901"),
    "vllm-awq": ("vllm-awq-min-cc",),
    "vllm-gptq": ("vllm-gptq-min-cc",),
    "vllm-gguf": ("vllm-gguf-min-cc",),
}

# `order`: where the page lists it (the write-up's vLLM FP8 first, its AWQ third).
CANDIDATES = (
    Candidate("vllm-fp8", "vLLM FP8", VLLM, "fp8", ("vllm", "vllm-fp8"), "fp8-size", embedding_bits=16,
              vllm_quantization="fp8", order=1),
    Candidate("vllm-awq", "vLLM AWQ", VLLM, "awq", ("vllm", "vllm-awq"), "awq-size", embedding_bits=16,
              vllm_quantization="awq", order=3),
    Candidate("vllm-gptq", "vLLM GPTQ 4-bit", VLLM, "gptq", ("vllm", "vllm-gptq"), "gptq-size",
              embedding_bits=16, vllm_quantization="gptq", order=6),
    Candidate("vllm-gguf-q4_k_m", "vLLM GGUF Q4_K_M", VLLM, "q4_k_m", ("vllm", "vllm-gguf"), "q4km-bpw",
              embedding_bits=4.9, vllm_quantization="gguf", estimable=False, order=7),
    Candidate("vllm-bf16", "vLLM BF16", VLLM, "bf16", ("vllm",), "bf16-size", embedding_bits=16, order=8),
)



def tensor_parallel_refusal(candidate: Candidate, model: ModelSpec, n: int) -> str:
    """Why vLLM refuses to start this model with --tensor-parallel-size n ("" = it starts, or the
    model's shape is not known well enough to tell)."""
    if n == 1:
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


def _weights_path(candidate: Candidate, model: ModelSpec) -> str:
    if candidate.quantization == "bf16":
        return f"/models/{model.name}"  # the checkpoint as published
    suffix = {"fp8": "FP8", "awq": "AWQ", "gptq": "GPTQ-Int4"}.get(candidate.quantization,
                                                                  candidate.quantization.upper())
    if candidate.vllm_quantization == "gguf":
        return f"/models/{model.name}-{suffix}.gguf"
    return f"/models/{model.name}-{suffix}"


_FP8_NATIVE_CC = next(f.min_cc for f in FACTS if f.id == "vllm-fp8-native-cc")
# FP8 multiplies in FP8 where the GPU has FP8 tensor cores (else W8A16 at 16 bit); AWQ and GPTQ
# 4-bit run W4A16 (Marlin), INT8 W8A8 at int8. Embeddings and lm_head stay 16-bit.
FORMATS = {
    "bf16": WeightFormat(16, 16, 16), "fp8": WeightFormat(8, 8, 16, "fp8", _FP8_NATIVE_CC),
    "awq": WeightFormat(4, 4.15625, 16), "gptq": WeightFormat(4, 4.15625, 16), "int4": WeightFormat(4, 4.15625, 16),
    "int8": WeightFormat(8, 8.125, 16, "int8"),
}


@register
class Vllm(AdvisorEngine):
    name = VLLM
    candidates = CANDIDATES
    facts = FACTS
    requirements = REQUIREMENTS
    variant_quantization = {"fp8": "fp8_e4m3", "awq": "awq", "gptq": "gptq", "q4_k_m": "gguf_q4_k_m", "bf16": "bf16"}
    runtime_overhead_gib = 0.5 + VLLM_ACTIVATIONS_GIB
    overhead_why = "CUDA context and cuBLAS workspace plus vLLM's profiled activation peak and CUDA graphs"
    several_gpus = "tensor parallel"
    memory_share_fact = "vllm-gpu-memory-utilization"
    formats = FORMATS
    version_fact = "vllm-min-cc-v0.20"

    def read_build(self, version_text: str):
        version = parse_version(version_text)
        return ("vllm_version", version) if version else None

    def combine_builds(self, values: list):
        return min(values)  # the answer must hold for every server the team runs

    def version(self, builds: EngineBuilds) -> tuple[int, int] | None:
        return builds.vllm_version

    def other_version_reason(self, asked, measured, measured_text: str) -> str:
        if asked and measured and tuple(asked) != measured:
            return f"started with vLLM {measured_text}, not the {asked[0]}.{asked[1]} asked about"
        return ""

    def memory_share(self, gpu_memory_utilization: float | None) -> float:
        return gpu_memory_utilization if gpu_memory_utilization is not None else fact(self.memory_share_fact).value

    def kv_options(self, candidate: Candidate, cc: tuple[int, int]) -> list[KvCache]:
        f = fact("vllm-kv-fp8")  # E4M3 where the GPU converts it, E5M2 below (min_cc: the E4M3 floor)
        dtype = "fp8" if tuple(cc) >= f.min_cc else "fp8_e5m2"
        return [KvCache(FP16_KV.label, candidate.kv_cache_bytes),
                KvCache("FP8", f.value, f"--kv-cache-dtype {dtype}", f.id)]

    def gpu_counts(self, candidate: Candidate, gpu: GpuSpec, model: ModelSpec) -> tuple[list[int], list[str]]:
        counts, refused = [], []
        for n in (n for n in TENSOR_PARALLEL_SIZES if n <= gpu.count):
            why = tensor_parallel_refusal(candidate, model, n)
            if why:
                refused.append(f"--tensor-parallel-size {n} would not start: {why} ({fact('vllm-tp-heads').source}).")
            else:
                counts.append(n)
        return counts, refused

    def default_context_note(self, model: ModelSpec, context_tokens: int, kv: KvCache, pool_gib: float) -> str:
        from ..memory import GIB, kv_bytes_per_token
        if model.context_length <= context_tokens:
            return ""
        one_sequence = kv_bytes_per_token(model, kv.bytes_per_value) * model.context_length / GIB
        if one_sequence <= pool_gib:
            return ""
        return (f"Without --max-model-len vLLM would serve {model.context_length} tokens and need "
                f"{fmt(one_sequence)} GiB of KV cache for one sequence, more than the "
                f"{fmt(max(pool_gib, 0))} GiB left: it would refuse to start "
                f"({fact('vllm-max-model-len').source}).")

    def launch(self, candidate, model, gpu, workload, fit) -> Launch:
        cc = tuple(gpu.compute_capability)
        context, users = workload.context, workload.users
        why = []
        parts = ["vllm serve", _weights_path(candidate, model), "--port 8000"]
        if candidate.vllm_quantization == "gguf":
            parts.append(f"--tokenizer deepseek-ai/{model.name}")
            why.append("--tokenizer: a GGUF file is served with its base model's tokenizer.")
        elif candidate.vllm_quantization:
            why.append("No --quantization: " + fact("vllm-prequantized").statement + ".")
        if cc < fact("bf16-min-cc").min_cc:
            parts.append("--dtype half")
            why.append("--dtype half: " + fact("bf16-min-cc").statement + ".")
        parts += [f"--max-model-len {context}", f"--max-num-seqs {users}",
                  f"--gpu-memory-utilization {fit.gpu_memory_utilization:g}"]
        why.append(f"--max-model-len {context}: " + fact("vllm-max-model-len").statement + ".")
        why.append(f"--max-num-seqs {users}: at most {users} sequences decode at once, each with its "
                   f"{context}-token context in the KV cache.")
        if fit.gpus_used > 1:
            parts.append(f"--tensor-parallel-size {fit.gpus_used}")
        if fit.kv_flags:
            parts.append(fit.kv_flags)
            why.append(f"{fit.kv_flags}: {fact('vllm-kv-fp8').statement}.")
        return Launch(" ".join(parts), "", tuple(why))

    def hardware_notes(self, gpu: GpuSpec, builds: EngineBuilds, runnable: list[Candidate]):
        cc = tuple(gpu.compute_capability)
        notes = []
        if cc < fact("bf16-min-cc").min_cc:
            notes.append(("bf16-min-cc", None))
        if cc == (7, 0):
            notes.append(("vllm-volta-quant", None))
        if any(c.quantization == "fp8" for c in runnable) and cc < fact("vllm-fp8-native-cc").min_cc:
            notes.append(("vllm-fp8-native-cc", None))
        return notes
