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

CHECKED = date(2026, 11, 29)  # shared/reference/hardware-facts.md as read on this date
WRITEUP = "shared/reference/seed-v100-writeup.md (V100 write-up, published, not measured here)"
MEASURED_HERE = "shared/reference/measured-here.md"


@dataclass(frozen=True)
class Fact:
    id: str
    statement: str
    source: str
    as_of: date
    min_cc: tuple[int, int] | None = None
    value: float | None = None


FACTS: tuple[Fact, ...] = (
    # --- vLLM: what starts where ---
    Fact("vllm-min-cc",
         "vLLM releases before v0.21 (install docs up to at least v0.14) run on compute "
         "capability 7.0 and newer",
         "vLLM installation docs (GPU requirements), v0.14", CHECKED, min_cc=(7, 0)),
    Fact("vllm-min-cc-v0.21",
         "vLLM v0.21 and later need compute capability 7.5: PyTorch 2.11 wheels dropped sm_70 "
         "and CUDA 13 cannot compile it",
         "vLLM installation docs (GPU requirements), v0.21", CHECKED, min_cc=(7, 5)),
    Fact("vllm-fp8-min-cc",
         "upstream vLLM refuses --quantization fp8 below compute capability 8.0 "
         "(\"Minimum capability: 80\")",
         "vllm-project/vllm vllm/model_executor/layers/quantization/fp8.py (get_min_capability)",
         CHECKED, min_cc=(8, 0)),
    Fact("vllm-fp8-min-cc-pr29901",
         "vLLM builds after PR #29901 (Dec 2025) run FP8 as weight-only Marlin down to compute "
         "capability 7.5",
         "vllm-project/vllm PR #29901", CHECKED, min_cc=(7, 5)),
    Fact("vllm-fp8-native-cc",
         "native FP8 W8A8 math needs FP8 tensor cores (compute capability 8.9); below that vLLM "
         "runs FP8 as weight-only W8A16 Marlin: it saves memory but does no FP8 math",
         "vllm-project/vllm vllm/model_executor/layers/quantization/fp8.py; NVIDIA CUDA C++ "
         "Programming Guide (compute capabilities)", CHECKED, min_cc=(8, 9)),
    Fact("vllm-awq-min-cc",
         "vLLM's AWQ kernels need compute capability 7.5; on a V100 vLLM raises ValueError at "
         "start-up",
         "vllm-project/vllm vllm/model_executor/layers/quantization/awq.py; issues #1488, #4202",
         CHECKED, min_cc=(7, 5)),
    Fact("vllm-volta-quant",
         "vLLM's quantization table lists GPTQ (non-Marlin), bitsandbytes and GGUF as working on "
         "Volta",
         "vLLM docs: Quantization, supported hardware", CHECKED),
    Fact("bf16-min-cc",
         "bfloat16 needs compute capability 8.0: on older GPUs start vLLM with --dtype half",
         "NVIDIA CUDA C++ Programming Guide; vLLM engine arguments (--dtype)", CHECKED,
         min_cc=(8, 0)),
    Fact("vllm-gpu-memory-utilization",
         "vLLM takes gpu_memory_utilization (default 0.9) of each GPU for weights, activations "
         "and KV cache",
         "vLLM engine arguments (--gpu-memory-utilization)", CHECKED, value=0.9),
    # --- llama.cpp ---
    Fact("llamacpp-min-cc",
         "llama.cpp's CUDA kernels for quantized weights need the dp4a instruction: compute "
         "capability 6.1",
         "ggml-org/llama.cpp ggml/src/ggml-cuda (mmvq.cu, mmq.cuh)", CHECKED, min_cc=(6, 1)),
    Fact("llamacpp-dp4a-decode",
         "below compute capability 7.5 there are no int8 tensor cores: llama.cpp decodes Q4_K_M "
         "with int8 dp4a dot products on CUDA cores (activations quantized to q8_1), not on INT4 "
         "tensor cores; long prompts are dequantized to FP16 for cuBLAS",
         "ggml-org/llama.cpp ggml/src/ggml-cuda (mmvq.cu, mmq.cuh)", CHECKED, min_cc=(7, 5)),
    Fact("llamacpp-build-arch",
         "build llama.cpp for the GPU's architecture (-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES); "
         "without it kernels are JIT-compiled from PTX and the write-up saw start-up take ~15 s "
         "longer",
         "ggml-org/llama.cpp docs/build.md; " + WRITEUP, CHECKED),
    Fact("cuda13-no-sm70",
         "CUDA 13 cannot compile for sm_70: build for a V100 with CUDA 12.x",
         "NVIDIA CUDA 13.0 release notes (Volta dropped)", CHECKED, min_cc=(7, 5)),
    Fact("llamacpp-ngl",
         "offload every layer to the GPU (llama-server -ngl 99); without it layers stay on the "
         "CPU and the write-up saw speed roughly halve",
         WRITEUP, CHECKED),
    Fact("llamacpp-slots",
         "llama-server shares its context (-c) among its --parallel slots: give it users x the "
         "per-user context",
         "ggml-org/llama.cpp tools/server/README.md (-c, --parallel)", CHECKED),
    # --- sizes ---
    Fact("fp8-size",
         "FP8 E4M3 stores one byte per weight; embeddings and lm_head stay 16-bit",
         "vLLM docs: FP8 W8A8 (llm-compressor keeps lm_head unquantized)", CHECKED, value=8.0),
    Fact("awq-size",
         "AWQ stores 4-bit weights with an fp16 scale and a 4-bit zero point per 128 weights "
         "(4.15625 bits per weight); embeddings and lm_head stay 16-bit",
         "vllm-project/vllm vllm/model_executor/layers/quantization/awq.py (group_size 128)",
         CHECKED, value=4.15625),
    Fact("q4km-bpw",
         "Q4_K_M averages ~4.85-4.9 bits per weight (Q4_K, with Q6_K for attn_v, ffn_down on "
         "about half the layers and output.weight)",
         "ggml-org/llama.cpp src/llama-quant.cpp; shared/reference/hardware-facts.md", CHECKED,
         value=4.9),
    Fact("q4km-size-r1-qwen7b",
         "DeepSeek-R1-Distill-Qwen-7B as GGUF Q4_K_M is 4.68 GB (4.36 GiB)",
         "shared/reference/hardware-facts.md; " + MEASURED_HERE, CHECKED, value=4.68e9),
    # --- the write-up's observations, used as advice ---
    Fact("tp-over-pcie",
         "tensor parallel across PCIe cards without NVLink is slower than one card for a 7B "
         "model: the write-up saw ~24 tok/s with --tensor-parallel-size 2 against 32 tok/s on one "
         "V100 (all-reduce over PCIe)",
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
# 28 layers, 4 KV heads of 128, 131072 tokens; untied embedding and lm_head of 152064 x 3584 each.
DEEPSEEK_R1_DISTILL_QWEN_7B = ModelSpec(
    name="DeepSeek-R1-Distill-Qwen-7B", params_b=7.62, layers=28, kv_heads=4, head_dim=128,
    context_length=131072, embedding_params_b=1.09,
    known_weight_bytes={"q4_k_m": fact("q4km-size-r1-qwen7b").value},
)


@dataclass(frozen=True)
class Candidate:
    """A way to serve the model. Add one by adding a row to DEFAULT_CANDIDATES (or pass your own)."""

    key: str
    label: str
    backend: str  # a backend name (engine.backends): "vllm", "llamacpp", ...
    quantization: str  # key into ModelSpec.known_weight_bytes and advise(variant_bytes=...)
    requires: tuple[str, ...]  # fact ids with a min_cc
    size_fact: str  # fact id whose value is the bits per layer weight
    embedding_bits: float  # bits per embedding/lm_head weight
    kv_cache_bytes: float = 2.0  # fp16 KV cache ("auto" on an fp16 model)


DEFAULT_CANDIDATES: tuple[Candidate, ...] = (
    Candidate("vllm-fp8", "vLLM FP8", "vllm", "fp8",
              ("vllm-min-cc", "vllm-fp8-min-cc"), "fp8-size", embedding_bits=16),
    Candidate("llamacpp-q4_k_m", "llama.cpp Q4_K_M", "llamacpp", "q4_k_m",
              ("llamacpp-min-cc",), "q4km-bpw", embedding_bits=4.9),
    Candidate("vllm-awq", "vLLM AWQ", "vllm", "awq",
              ("vllm-min-cc", "vllm-awq-min-cc"), "awq-size", embedding_bits=16),
)


def build_substitutions(builds: EngineBuilds) -> dict[str, str]:
    """Requirement facts that a newer (or patched) build replaces."""
    subs = {}
    if builds.vllm_version is not None and tuple(builds.vllm_version) >= (0, 21):
        subs["vllm-min-cc"] = "vllm-min-cc-v0.21"
    if builds.vllm_fp8_sm75:
        subs["vllm-fp8-min-cc"] = "vllm-fp8-min-cc-pr29901"
    return subs


def required_facts(candidate: Candidate, builds: EngineBuilds = EngineBuilds()) -> list[Fact]:
    subs = build_substitutions(builds)
    return [fact(subs.get(fid, fid)) for fid in candidate.requires]


def cc_str(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


def unmet_requirements(candidate: Candidate, cc: tuple[int, int],
                       builds: EngineBuilds = EngineBuilds()) -> list[Fact]:
    return [f for f in required_facts(candidate, builds) if f.min_cc and tuple(cc) < f.min_cc]


def ineligible_reasons(candidate: Candidate, cc: tuple[int, int],
                       builds: EngineBuilds = EngineBuilds()) -> list[str]:
    """Why the candidate cannot start on a GPU of this compute capability ([] = it can)."""
    return [
        f"Cannot start on compute capability {cc_str(cc)}: {f.statement} "
        f"(source: {f.source}, as of {f.as_of.isoformat()})."
        for f in unmet_requirements(candidate, cc, builds)
    ]


def requirements(candidate: Candidate, builds: EngineBuilds = EngineBuilds()) -> dict:
    """What the candidate needs, for display."""
    facts = required_facts(candidate, builds)
    return {
        "backend": backends.label(candidate.backend),
        "quantization": candidate.quantization,
        "min_compute_capability": cc_str(max(f.min_cc for f in facts if f.min_cc)),
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
