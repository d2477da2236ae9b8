"""The command that starts a candidate the way the advisor sized it: the memory model's flags
(context, slots or sequences, memory share, GPUs, KV cache) and the GPU's own (dtype, build)."""

from __future__ import annotations

from dataclasses import dataclass

from .facts import Candidate, cc_str, fact
from .memory import MemoryFit
from .specs import GpuSpec, ModelSpec, Workload


@dataclass(frozen=True)
class Launch:
    command: str
    build: str  # how to build the engine for this GPU ("" when a stock install will do)
    why: tuple[str, ...]  # one line per flag that is not the engine's default


def _weights_path(candidate: Candidate, model: ModelSpec) -> str:
    if candidate.quantization == "bf16":
        return f"/models/{model.name}"  # the checkpoint as published
    suffix = {"fp8": "FP8", "awq": "AWQ", "gptq": "GPTQ-Int4"}.get(candidate.quantization,
                                                                  candidate.quantization.upper())
    if candidate.backend == "llamacpp" or candidate.vllm_quantization == "gguf":
        return f"/models/{model.name}-{suffix}.gguf"
    return f"/models/{model.name}-{suffix}"


def launch(candidate: Candidate, model: ModelSpec, gpu: GpuSpec, workload: Workload, fit: MemoryFit) -> Launch:
    cc = tuple(gpu.compute_capability)
    context, users = workload.context, workload.users
    why = []
    if candidate.backend == "vllm":
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
    parts = ["llama-server", f"-m {_weights_path(candidate, model)}", "--port 8080", f"-c {users * context}",
             f"--parallel {users}", "-ngl 99"]
    if fit.gpus_used < gpu.count:  # llama.cpp spreads over every GPU it sees: only the ones it was sized on
        devices = ",".join(str(i) for i in range(fit.gpus_used))
        parts.insert(0, f"CUDA_VISIBLE_DEVICES={devices}")
        why.append(f"CUDA_VISIBLE_DEVICES={devices}: sized on {fit.gpus_used} of the host's {gpu.count} GPUs; "
                   f"llama.cpp would otherwise split over all of them.")
    why.append(f"-c {users * context} --parallel {users}: " + fact("llamacpp-slots").statement
               + f": {context} tokens per slot.")
    why.append("-ngl 99: " + fact("llamacpp-ngl").statement + ".")
    if cc >= (7, 0) or fit.kv_flags:
        parts.append("-fa on")
        why.append("-fa on: " + fact("llamacpp-fa-flag").statement + ".")
    if fit.kv_flags:
        parts.append(fit.kv_flags)
        why.append(f"{fit.kv_flags}: {fact('llamacpp-kv-quant').statement}.")
    if fit.gpus_used > 1:
        parts.append("--split-mode layer")
        why.append("--split-mode layer: " + fact("llamacpp-split").statement + ".")
    parts.append("--metrics")
    arch = f"{cc[0]}{cc[1]}"
    cuda = " with CUDA 12.x" if cc < fact("cuda13-no-sm70").min_cc else ""
    build = (f"cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES={arch} && cmake --build build -j"
             f"   # compute capability {cc_str(cc)}{cuda}")
    return Launch(" ".join(parts), build, tuple(why))
