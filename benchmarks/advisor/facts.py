"""Hardware and engine facts, and the candidates, kept as data with a source and a date.

Versions move: correct a row here (and its `as_of`) rather than an `if` in the engine. A fact with
`min_cc` is a start-up requirement: a candidate listing it in `requires` cannot start below it.
`as_of` is the date the statement was last checked against its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from ..engine import backends
from .specs import EngineBuilds, ModelSpec

CHECKED = date(2026, 12, 1)  # each row re-read against its source on this date
WRITEUP = ("the V100 write-up (a blog post: vLLM FP8 against llama.cpp Q4_K_M on 2 x Tesla V100 PCIe 16 GB, "
           "DeepSeek-R1-Distill-Qwen-7B; published, not measured here)")
MEASURED_HERE = ("this project's own runs on an NVIDIA H200, 2026-12-02 (benchmarks/engine/results/"
                 "gpu_lab_h200.json and gpu_check_h200.json in its repository)")
VLLM, LLAMACPP = "vllm", "llamacpp"


@dataclass(frozen=True)
class Fact:
    """A statement with its source. A fact with `min_cc` is a start-up requirement; `engine`,
    `since` and `until` say for which releases of that engine it holds ([since, until), versions
    as (major, minor); None = no bound)."""

    id: str
    statement: str
    source: str
    as_of: date
    min_cc: tuple[int, int] | None = None
    value: float | None = None
    engine: str = ""
    since: tuple[int, int] | None = None
    until: tuple[int, int] | None = None


V0_13, V0_20 = (0, 13), (0, 20)

FACTS: tuple[Fact, ...] = (
    # --- vLLM: what starts where, by release ---
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
    Fact("bf16-min-cc",
         "bfloat16 needs compute capability 8.0: on older GPUs start vLLM with --dtype half",
         "NVIDIA CUDA C++ Programming Guide; vLLM engine arguments (--dtype)", CHECKED, min_cc=(8, 0)),
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
    Fact("bf16-size",
         "a 16-bit checkpoint (BF16, served as FP16 below compute capability 8.0) stores two bytes per weight",
         "vLLM engine arguments (--dtype)", CHECKED, value=16.0),
    # --- llama.cpp ---
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
    Fact("cuda13-no-sm70",
         "CUDA 13 cannot compile for Maxwell, Pascal or Volta (sm_50 to sm_72): build for this GPU with "
         "CUDA 12.x",
         "NVIDIA CUDA 13.0 release notes (deprecated architectures)", CHECKED, min_cc=(7, 5)),
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
    # --- sizes ---
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
    Fact("q4km-size-r1-qwen7b",
         "DeepSeek-R1-Distill-Qwen-7B as GGUF Q4_K_M is 4.68 GB (4.36 GiB)",
         "the file's size as llama-quantize writes it; " + MEASURED_HERE, CHECKED, value=4.68e9),
    # --- the write-up's observations, used as advice ---
    Fact("tp-over-pcie",
         "tensor parallel all-reduces every layer's output across the cards: over PCIe without NVLink the "
         "write-up's 7B model decoded ~24 tok/s with --tensor-parallel-size 2 against 32 tok/s on one V100",
         WRITEUP, CHECKED),
    Fact("hot-gpu-ecc",
         "watch GPU temperature and correctable ECC counts during runs: in the write-up a hot "
         "V100 logged correctable ECC errors and decode fell under 30 tok/s until it cooled",
         WRITEUP, CHECKED),
)

FACTS_BY_ID = {f.id: f for f in FACTS}


def fact(fact_id: str) -> Fact:
    return FACTS_BY_ID[fact_id]


# Qwen2-7B architecture (config.json of deepseek-ai/DeepSeek-R1-Distill-Qwen-7B): 7.62B parameters,
# 28 layers, 28 attention heads, 4 KV heads of 128, intermediate 18944, 131072 tokens; untied
# embedding and lm_head of 152064 x 3584 each.
DEEPSEEK_R1_DISTILL_QWEN_7B = ModelSpec(
    name="DeepSeek-R1-Distill-Qwen-7B", params_b=7.62, layers=28, kv_heads=4, head_dim=128,
    context_length=131072, embedding_params_b=1.09,
    known_weight_bytes={"q4_k_m": fact("q4km-size-r1-qwen7b").value}, attention_heads=28, intermediate_size=18944,
)
# Qwen2.5-14B and -32B architectures (config.json of deepseek-ai/DeepSeek-R1-Distill-Qwen-14B / -32B):
# hidden 5120, 40 attention heads, 8 KV heads of 128, intermediate 13824 / 27648, 131072 tokens;
# untied embedding and lm_head of 152064 x 5120 each.
DEEPSEEK_R1_DISTILL_QWEN_14B = ModelSpec(
    name="DeepSeek-R1-Distill-Qwen-14B", params_b=14.77, layers=48, kv_heads=8, head_dim=128,
    context_length=131072, embedding_params_b=1.557, attention_heads=40, intermediate_size=13824)
DEEPSEEK_R1_DISTILL_QWEN_32B = ModelSpec(
    name="DeepSeek-R1-Distill-Qwen-32B", params_b=32.76, layers=64, kv_heads=8, head_dim=128,
    context_length=131072, embedding_params_b=1.557, attention_heads=40, intermediate_size=27648)
# Llama-3.1-8B and Llama-3.3-70B architectures (config.json of deepseek-ai/DeepSeek-R1-Distill-Llama-8B /
# -70B): 32 / 80 layers, 32 / 64 attention heads, 8 KV heads of 128, intermediate 14336 / 28672,
# 131072 tokens; untied embedding and lm_head of 128256 x 4096 / 8192 each.
DEEPSEEK_R1_DISTILL_LLAMA_8B = ModelSpec(
    name="DeepSeek-R1-Distill-Llama-8B", params_b=8.03, layers=32, kv_heads=8, head_dim=128,
    context_length=131072, embedding_params_b=1.051, attention_heads=32, intermediate_size=14336)
DEEPSEEK_R1_DISTILL_LLAMA_70B = ModelSpec(
    name="DeepSeek-R1-Distill-Llama-70B", params_b=70.55, layers=80, kv_heads=8, head_dim=128,
    context_length=131072, embedding_params_b=2.101, attention_heads=64, intermediate_size=28672)
BUILTIN_MODELS = {m.name: m for m in (DEEPSEEK_R1_DISTILL_QWEN_7B, DEEPSEEK_R1_DISTILL_LLAMA_8B,
                                      DEEPSEEK_R1_DISTILL_QWEN_14B, DEEPSEEK_R1_DISTILL_QWEN_32B,
                                      DEEPSEEK_R1_DISTILL_LLAMA_70B)}


@dataclass(frozen=True)
class Candidate:
    """A way to serve the model. Add one by adding a row to DEFAULT_CANDIDATES (or pass your own)."""

    key: str
    label: str
    backend: str  # a backend name (engine.backends): "vllm", "llamacpp", ...
    quantization: str  # key into ModelSpec.known_weight_bytes and advise(variant_bytes=...)
    requires: tuple[str, ...]  # REQUIREMENTS keys (or fact ids with a min_cc)
    size_fact: str  # fact id whose value is the bits per layer weight
    embedding_bits: float  # bits per embedding/lm_head weight
    kv_cache_bytes: float = 2.0  # fp16 KV cache ("auto" on an fp16 model)
    # What `vllm serve --quantization` would name ("" = none: a 16-bit checkpoint). Only GGUF is passed
    # on the command line; a pre-quantized checkpoint's method is read from its config (fact
    # "vllm-prequantized").
    vllm_quantization: str = ""
    # False: no published or measured figure of its kernels to fit a prior on (it is not estimated,
    # and its missing figure does not hold the others' comparison open).
    estimable: bool = True


# A requirement: the facts that state it, one per range of releases of its engine.
REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "vllm": ("vllm-min-cc", "vllm-min-cc-v0.20"),
    "vllm-fp8": ("vllm-fp8-min-cc", "vllm-fp8-min-cc-pr29901"),
    "vllm-awq": ("vllm-awq-min-cc",),
    "vllm-gptq": ("vllm-gptq-min-cc",),
    "vllm-gguf": ("vllm-gguf-min-cc",),
    "llamacpp": ("llamacpp-min-cc",),
}

# The write-up's three first (their order is the page's), then what else the GPU may allow.
DEFAULT_CANDIDATES: tuple[Candidate, ...] = (
    Candidate("vllm-fp8", "vLLM FP8", "vllm", "fp8", ("vllm", "vllm-fp8"), "fp8-size", embedding_bits=16,
              vllm_quantization="fp8"),
    Candidate("llamacpp-q4_k_m", "llama.cpp Q4_K_M", "llamacpp", "q4_k_m", ("llamacpp",), "q4km-bpw",
              embedding_bits=4.9),
    Candidate("vllm-awq", "vLLM AWQ", "vllm", "awq", ("vllm", "vllm-awq"), "awq-size", embedding_bits=16,
              vllm_quantization="awq"),
    Candidate("llamacpp-q5_k_m", "llama.cpp Q5_K_M", "llamacpp", "q5_k_m", ("llamacpp",), "q5km-bpw",
              embedding_bits=5.7),
    Candidate("llamacpp-q8_0", "llama.cpp Q8_0", "llamacpp", "q8_0", ("llamacpp",), "q8_0-bpw",
              embedding_bits=8.5),
    Candidate("vllm-gptq", "vLLM GPTQ 4-bit", "vllm", "gptq", ("vllm", "vllm-gptq"), "gptq-size",
              embedding_bits=16, vllm_quantization="gptq"),
    Candidate("vllm-gguf-q4_k_m", "vLLM GGUF Q4_K_M", "vllm", "q4_k_m", ("vllm", "vllm-gguf"), "q4km-bpw",
              embedding_bits=4.9, vllm_quantization="gguf", estimable=False),
    Candidate("vllm-bf16", "vLLM BF16", "vllm", "bf16", ("vllm",), "bf16-size", embedding_bits=16),
)


# Candidate.quantization -> Variant.quantization: how a registered endpoint or a report maps to a
# candidate. A candidate whose quantization the inventory cannot name (Q5_K_M) has no measured evidence.
VARIANT_QUANTIZATION = {"fp8": "fp8_e4m3", "q4_k_m": "gguf_q4_k_m", "awq": "awq", "gptq": "gptq",
                        "q8_0": "gguf_q8_0", "bf16": "bf16"}
CANDIDATE_FOR = {(c.backend, VARIANT_QUANTIZATION[c.quantization]): c for c in DEFAULT_CANDIDATES
                 if c.quantization in VARIANT_QUANTIZATION}


def engine_version(backend: str, builds: EngineBuilds) -> tuple[int, int] | None:
    return builds.vllm_version if backend == VLLM else None


def _facts_of(requirement: str) -> list[Fact]:
    return [fact(fid) for fid in REQUIREMENTS.get(requirement, (requirement,))]


def _holds_for(f: Fact, version: tuple[int, int]) -> bool:
    return (f.since is None or version >= f.since) and (f.until is None or version < f.until)


def _boundaries(facts: list[Fact]) -> list[tuple[int, int]]:
    """The versions where some fact starts or stops holding, and the first: each range between
    two of them has the same facts."""
    return sorted({(0, 0)} | {b for f in facts for b in (f.since, f.until) if b is not None})


def version_str(v: tuple[int, int]) -> str:
    return f"v{v[0]}.{v[1]}"


@dataclass(frozen=True)
class StartCheck:
    """Can a candidate start on this compute capability, and with which releases of its engine."""

    eligible: bool
    facts: tuple[Fact, ...]  # the facts that decide, for the version given (or every release)
    unmet: tuple[Fact, ...]  # facts whose minimum this GPU is below (for the version, or all)
    releases: tuple[tuple[tuple[int, int], tuple[int, int] | None], ...]  # where it starts
    version_known: bool

    @property
    def releases_text(self) -> str:
        """'' when every release starts it (or the version was given), else which do."""
        if self.version_known or not self.eligible or self.releases == (((0, 0), None),):
            return ""
        parts = []
        for lo, hi in self.releases:
            if lo == (0, 0):
                parts.append(f"before {version_str(hi)}")
            elif hi is None:
                parts.append(f"{version_str(lo)} or later")
            else:
                parts.append(f"{version_str(lo)} to the last release before {version_str(hi)}")
        return " or ".join(parts)


def start_check(candidate: Candidate, cc: tuple[int, int], builds: EngineBuilds = EngineBuilds()) -> StartCheck:
    cc = tuple(cc)
    facts = [f for req in candidate.requires for f in _facts_of(req)]
    version = engine_version(candidate.backend, builds)
    if version is not None:
        used = [f for f in facts if _holds_for(f, tuple(version))]
        unmet = [f for f in used if f.min_cc and cc < f.min_cc]
        return StartCheck(not unmet, tuple(used), tuple(unmet),
                          ((tuple(version), tuple(version)),) if not unmet else (), True)
    releases, unmet = [], []
    points = _boundaries(facts)
    for lo, hi in zip(points, points[1:] + [None]):
        used = [f for f in facts if _holds_for(f, lo)]
        missing = [f for f in used if f.min_cc and cc < f.min_cc]
        if missing:
            unmet += [f for f in missing if f not in unmet]
        elif releases and releases[-1][1] == lo:
            releases[-1] = (releases[-1][0], hi)
        else:
            releases.append((lo, hi))
    return StartCheck(bool(releases), tuple(facts), tuple(unmet) if not releases else (), tuple(releases), False)


def required_facts(candidate: Candidate, builds: EngineBuilds = EngineBuilds()) -> list[Fact]:
    """The facts that decide whether it starts: for the version given, or for every release."""
    return list(start_check(candidate, (99, 0), builds).facts)


def cc_str(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


def unmet_requirements(candidate: Candidate, cc: tuple[int, int],
                       builds: EngineBuilds = EngineBuilds()) -> list[Fact]:
    """Why it cannot start ([] = it can, with some release when the version is not given)."""
    return list(start_check(candidate, cc, builds).unmet)


def ineligible_reasons(candidate: Candidate, cc: tuple[int, int],
                       builds: EngineBuilds = EngineBuilds()) -> list[str]:
    """Why the candidate cannot start on a GPU of this compute capability ([] = it can)."""
    check = start_check(candidate, cc, builds)
    version = engine_version(candidate.backend, builds)
    with_version = f" with {backends.label(candidate.backend)} {version_str(version)}" if version else ""
    reasons = [
        f"Cannot start on compute capability {cc_str(cc)}{with_version}: {f.statement} "
        f"(source: {f.source}, as of {f.as_of.isoformat()})."
        for f in check.unmet
    ]
    other = start_check(candidate, cc) if version and reasons else None
    if other is not None and other.eligible:  # refused by this release only: say which still start it
        reasons.append(f"{backends.label(candidate.backend)} releases {other.releases_text} still start it on "
                       f"this GPU; other engines (llama.cpp) run here too.")
    return reasons


def min_compute_capability(candidate: Candidate, builds: EngineBuilds = EngineBuilds()) -> tuple[int, int]:
    """The lowest compute capability some release (or the given one) starts it on."""
    facts = [f for req in candidate.requires for f in _facts_of(req)]
    version = engine_version(candidate.backend, builds)
    points = [tuple(version)] if version is not None else _boundaries(facts)
    return min(max((f.min_cc for f in facts if f.min_cc and _holds_for(f, v)), default=(0, 0)) for v in points)


def requirements(candidate: Candidate, builds: EngineBuilds = EngineBuilds()) -> dict:
    """What the candidate needs, for display."""
    facts = required_facts(candidate, builds)
    return {
        "backend": backends.label(candidate.backend),
        "quantization": candidate.quantization,
        "min_compute_capability": cc_str(min_compute_capability(candidate, builds)),
        "facts": [{"id": f.id, "statement": f.statement, "source": f.source,
                   "as_of": f.as_of.isoformat()} for f in facts],
    }


def users_str(n: int) -> str:
    return f"{n} user" if n == 1 else f"{n} users"


def fmt(x: float) -> str:
    """A number for a reason string: 3 significant figures at most, no exponent."""
    digits = 0 if abs(x) >= 100 else 1 if abs(x) >= 10 else 2
    s = f"{x:.{digits}f}"
    return s.rstrip("0").rstrip(".") if "." in s else s
