"""llama.cpp's llama-server: its candidates, where it starts, how it allocates memory for its flags,
splits over GPUs and is started, and the figures its speed model rests on."""

from __future__ import annotations

from ..facts import CHECKED, MEASURED_HERE, WRITEUP, Candidate, Fact, fact
from ..specs import EngineBuilds, GpuSpec
from .base import CUDA_CONTEXT_GIB, AdvisorEngine, FP16_KV, KvCache, Launch, WeightFormat, register

LLAMACPP = "llamacpp"
# llama.cpp compute buffers at the default -ub 512 (the logits of a 152k vocabulary alone are 0.3 GB),
# beyond the CUDA context. Checked against this project's H200 run: peak 5.84 GiB = 4.36 weights +
# 0.44 KV (8192 tokens) + 1.04 everything else.
LLAMACPP_BUFFERS_GIB = 0.6

FACTS: tuple[Fact, ...] = (
    Fact("llamacpp-min-cc",
         "llama.cpp's CUDA backend has no dp4a floor: below compute capability 6.1 ggml_cuda_dp4a falls back "
         "to scalar code, MMQ is skipped and cuBLAS does the matrix products; default builds target "
         "50-virtual and newer, so Maxwell (5.0), Pascal (P100 at 6.0) and newer run",
         "ggml-org/llama.cpp ggml/src/ggml-cuda/common.cuh (ggml_cuda_dp4a), mmq.cu (should_use_mmq), "
         "ggml/src/ggml-cuda/CMakeLists.txt (default CMAKE_CUDA_ARCHITECTURES)", CHECKED, min_cc=(5, 0),
         engine=LLAMACPP),
    Fact("llamacpp-dp4a-decode",
         "below compute capability 7.5 there are no int8 tensor cores: llama.cpp decodes Q4_K_M with int8 "
         "dp4a dot products on CUDA cores (activations quantized to q8_1), not on INT4 tensor cores; long "
         "prompts are dequantized to FP16 for cuBLAS",
         "ggml-org/llama.cpp ggml/src/ggml-cuda (mmvq.cu, mmq.cuh)", CHECKED, min_cc=(7, 5), engine=LLAMACPP),
    Fact("llamacpp-volta-tensor-cores",
         "llama.cpp uses Volta's tensor cores for float matrix products (MMF, PR #16843, merged 2025-10-29) "
         "and FlashAttention (mma kernel, PR #17505, merged 2025-11-25): use a build from after 2025-11-25 "
         "with -fa on",
         "ggml-org/llama.cpp PRs #16843 and #17505", CHECKED, engine=LLAMACPP),
    Fact("llamacpp-fa-flag",
         "llama-server takes -fa on|off|auto (default auto) since September 2025 (PR #15746); older builds "
         "take a bare -fa",
         "ggml-org/llama.cpp common/arg.cpp (--flash-attn); PR #15746", CHECKED, engine=LLAMACPP),
    Fact("llamacpp-kv-quant",
         "llama-server -ctk q8_0 -ctv q8_0 stores K and V at 8.5 bits (34 bytes per 32 values); a quantized "
         "V cache needs flash attention (-fa on)",
         "ggml-org/llama.cpp tools/server/README.md (-ctk, -ctv); src/llama-context.cpp (V cache quantization "
         "requires flash_attn); ggml/src/ggml-common.h (block_q8_0)", CHECKED, engine=LLAMACPP, value=34 / 32),
    Fact("llamacpp-build-arch",
         "build llama.cpp for the GPU's architecture (-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES); "
         "without it kernels are JIT-compiled from PTX and the write-up saw start-up take ~15 s "
         "longer",
         "ggml-org/llama.cpp docs/build.md; " + WRITEUP, CHECKED),
    Fact("llamacpp-ngl",
         "offload every layer to the GPU (llama-server -ngl 99); without it layers stay on the "
         "CPU and the write-up saw speed roughly halve",
         WRITEUP, CHECKED),
    Fact("llamacpp-slots",
         "llama-server allocates the KV cache for all of -c at start-up and shares it among its --parallel "
         "slots (each slot gets -c / --parallel tokens)",
         "ggml-org/llama.cpp tools/server/README.md (-c, --parallel); /slots n_ctx; " + MEASURED_HERE, CHECKED),
    Fact("llamacpp-split",
         "on several GPUs llama.cpp splits by layer by default (--split-mode layer): each card holds its "
         "share of the weights and KV cache and only activations cross the bus",
         "ggml-org/llama.cpp tools/server/README.md (--split-mode, --tensor-split)", CHECKED, engine=LLAMACPP),
    Fact("q4km-bpw",
         "Q4_K_M averages ~4.85-4.9 bits per weight (Q4_K, with Q6_K for attn_v, ffn_down on "
         "about half the layers and output.weight)",
         "ggml-org/llama.cpp src/llama-quant.cpp (llama_tensor_get_type for LLAMA_FTYPE_MOSTLY_Q4_K_M)", CHECKED,
         value=4.9),
    Fact("q5km-bpw",
         "Q5_K_M averages ~5.7 bits per weight (Q5_K at 5.5, with Q6_K for some tensors)",
         "ggml-org/llama.cpp src/llama-quant.cpp, ggml/src/ggml-common.h (block_q5_K)", CHECKED, value=5.7),
    Fact("q8_0-bpw",
         "Q8_0 stores 8.5 bits per weight (34 bytes per 32 weights)",
         "ggml-org/llama.cpp ggml/src/ggml-common.h (block_q8_0)", CHECKED, value=8.5),
)

REQUIREMENTS = {"llamacpp": ("llamacpp-min-cc",)}

# `order`: where the page lists it (the write-up's llama.cpp Q4_K_M second).
CANDIDATES = (
    Candidate("llamacpp-q4_k_m", "llama.cpp Q4_K_M", LLAMACPP, "q4_k_m", ("llamacpp",), "q4km-bpw",
              embedding_bits=4.9, order=2),
    Candidate("llamacpp-q5_k_m", "llama.cpp Q5_K_M", LLAMACPP, "q5_k_m", ("llamacpp",), "q5km-bpw",
              embedding_bits=5.7, order=4),
    Candidate("llamacpp-q8_0", "llama.cpp Q8_0", LLAMACPP, "q8_0", ("llamacpp",), "q8_0-bpw",
              embedding_bits=8.5, order=5),
)




# Its quantized matrix products are int8 dot products (MMVQ for a few sequences, MMQ for batches);
# F16 weights go through cuBLAS at 16 bit. Prompts reach what 16-bit tensor cores give at their full
# rate (FP16 accumulation), whatever the weights: published pp512 of Q4_K_M and F16 files of one
# model are within 20 % on most GPUs, where the int8 peak is 2-4x the 16-bit one. GGUF stores the
# embeddings in the file's type.
FORMATS = {
    "q4_k_m": WeightFormat(4, 4.9, 4.9, "int8", prefill_precision="fp16-full"),
    "q4_0": WeightFormat(4, 4.5, 4.5, "int8", prefill_precision="fp16-full"),
    "q5_k_m": WeightFormat(5, 5.7, 5.7, "int8", prefill_precision="fp16-full"),
    "q8_0": WeightFormat(8, 8.5, 8.5, "int8", prefill_precision="fp16-full"),
    "f16": WeightFormat(16, 16, 16, "fp16", prefill_precision="fp16-full"),
}


@register
class LlamaCpp(AdvisorEngine):
    name = LLAMACPP
    candidates = CANDIDATES
    facts = FACTS
    requirements = REQUIREMENTS
    variant_quantization = {"q4_k_m": "gguf_q4_k_m", "q8_0": "gguf_q8_0"}
    runtime_overhead_gib = CUDA_CONTEXT_GIB + LLAMACPP_BUFFERS_GIB
    overhead_why = "CUDA context plus llama.cpp compute buffers (checked against " + MEASURED_HERE + ")"
    several_gpus = "layer split"
    load_memory_is_need = True  # it allocates at load what it will use: weights, -c's KV cache, buffers
    formats = FORMATS

    def slots(self, users: int) -> int:
        return users  # its launch starts one slot per user (--parallel)
    # llama-server's flags that size its KV cache at load: -c (shared by its slots), quantized cache types.
    context_flags = ("-c", "--ctx-size")
    quantized_cache_flags = ("-ctk", "-ctv", "--cache-type-k", "--cache-type-v")

    def read_build(self, version_text: str):
        return ("llamacpp_build", version_text)

    def kv_options(self, candidate: Candidate, cc: tuple[int, int]) -> list[KvCache]:
        f = fact("llamacpp-kv-quant")
        return [KvCache(FP16_KV.label, candidate.kv_cache_bytes), KvCache("q8_0", f.value, "-ctk q8_0 -ctv q8_0", f.id)]

    def launch(self, candidate, model, gpu, workload, fit) -> Launch:
        cc = tuple(gpu.compute_capability)
        context, users = workload.context, workload.users
        why = []
        suffix = candidate.quantization.upper()
        parts = ["llama-server", f"-m /models/{model.name}-{suffix}.gguf", "--port 8080", f"-c {users * context}",
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
                 f"   # compute capability {cc[0]}.{cc[1]}{cuda}")
        return Launch(" ".join(parts), build, tuple(why))

    def hardware_notes(self, gpu: GpuSpec, builds: EngineBuilds, runnable: list[Candidate]):
        cc = tuple(gpu.compute_capability)
        notes = []
        if cc < fact("cuda13-no-sm70").min_cc:
            notes.append(("cuda13-no-sm70", None))
        if cc < (6, 1):
            notes.append(("llamacpp-min-cc", None))
        elif cc < fact("llamacpp-dp4a-decode").min_cc:
            notes.append(("llamacpp-dp4a-decode", None))
        if cc == (7, 0):
            build = f" (this build: {builds.llamacpp_build})" if builds.llamacpp_build else ""
            notes.append(("llamacpp-volta-tensor-cores", fact("llamacpp-volta-tensor-cores").statement + build))
        return notes

    def kv_context_tokens(self, flag_value) -> int | None:
        """-c: the tokens of 16-bit KV cache it allocates at load, from `flag_value(flags)` (the value
        the launch gave one of these flags, or None); None when -c is not given, 0 (the model's own
        length) or the cache is quantized."""
        if flag_value(self.quantized_cache_flags) is not None:
            return None
        try:
            tokens = int(flag_value(self.context_flags))
        except (TypeError, ValueError):
            return None
        return tokens if tokens > 0 else None
