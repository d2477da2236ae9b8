"""How much of a GPU's physical ceiling an engine reaches, fitted to figures the engines' own
maintainers (and this project) published: the physical prior's efficiencies.

A decode step of U sequences takes, in this model,

    t(U) = (weight bytes + U x context x KV bytes per token) / bandwidth / e_mem
         + (U - 1) x k x (weight bytes / bandwidth / e_mem)

and never less than the matrix work at the GPU's full peak (U x 2 x parameters / peak). `e_mem` (a
share of the bandwidth ceiling) is what a single stream shows; `k` is what each further stream of
the batch adds, as a share of a single stream's step: an engine's batching overhead (scheduling,
sampling, attention launches, matrix products that grow with the batch) scales with how fast the
GPU runs one stream, which is what the figures show across GPUs (llama-server's 8 slots cost 3.5x
a single stream's step on an H200, vLLM's 16 sequences 1.4x on an H100). A series at several batch
sizes fits `k` (least squares); a single figure fits `e_mem` alone. A figure above its own bandwidth
ceiling cannot be right as stated and is left out, said.

Each efficiency is kept per engine and GPU architecture: the prior uses the figures on the asked
GPU's architecture where there are at least two (or one of this very GPU model), else every figure
of the engine (and says so), and its band is the spread of those figures — never one figure
stretched to every GPU. `k` comes from the engine's batched series (its own architecture's where
there are any).
"""

from __future__ import annotations

from dataclasses import dataclass

from .gpus import GpuPeak, architecture, peak_of

LLAMACPP, VLLM = "llamacpp", "vllm"
MIN_FIGURES = 2  # figures on the GPU's own architecture for its own band


@dataclass(frozen=True)
class DecodeFigures:
    """Published per-stream decode speeds of one setup at one or more batch sizes."""

    id: str
    engine: str  # a backend name
    gpu: str  # a name gpus.peak_of knows
    what: str  # the model and precision, as published
    params_b: float
    weight_bytes: float  # read once per decode step (the file's size)
    kv_bytes_per_token: float
    context: float  # the mean tokens a sequence holds while it decodes
    points: tuple[tuple[int, float], ...]  # (sequences in the batch, tok/s per stream)
    source: str  # repository and PR / issue / path, with its date
    note: str = ""
    compute: str = "fp16"  # which peak bounds its matrix work: "fp16" | "fp8" | "int8" (llama.cpp's quantized
    # matrix products: int8 dot products, dp4a or int8 tensor cores)


LLAMA_7B_KV = 2 * 32 * 32 * 128 * 2  # LLaMA / Llama 2 7B: 32 layers x 32 KV heads x 128, FP16
LLAMA3_8B_KV = 2 * 32 * 8 * 128 * 2  # Llama 3 8B: 32 layers x 8 KV heads x 128
QWEN2_7B_KV = 2 * 28 * 4 * 128 * 2
QWEN3_14B_KV = 2 * 40 * 8 * 128 * 2
QWEN3_4B_KV = 2 * 36 * 8 * 128 * 2
GIB = 1024**3

def _llamacpp(id: str, *args, **kwargs) -> DecodeFigures:
    """A llama.cpp figure: its quantized matrix products are int8 dot products (MMVQ/MMQ)."""
    return DecodeFigures(id, LLAMACPP, *args, compute="int8", **kwargs)


PUBLISHED: tuple[DecodeFigures, ...] = (
    # --- llama.cpp, CUDA: llama-bench tg (text generation from an empty context) ---
    _llamacpp("llamacpp-p40-pr4766", "Tesla P40", "LLaMA 7B Q4_0 (3.56 GiB)", 6.74, 3.56 * GIB,
                  LLAMA_7B_KV, 64, ((1, 56.79),), "ggml-org/llama.cpp PR #4766 (llama-bench tg128, January 2024)"),
    _llamacpp("llamacpp-v100-pr5434", "Tesla V100-PCIE-16GB", "LLaMA 7B Q5_1 (4.72 GiB)", 6.74,
                  4.72 * GIB, LLAMA_7B_KV, 1, ((1, 98.03),), "ggml-org/llama.cpp PR #5434 (tg1, 2024-02-10)"),
    _llamacpp("llamacpp-3090ti-pr4812", "NVIDIA GeForce RTX 3090 Ti", "LLaMA 7B Q4_0 (3.56 GiB)", 6.74,
                  3.56 * GIB, LLAMA_7B_KV, 64, ((1, 127.43),), "ggml-org/llama.cpp PR #4812 (tg128, 2024-01-07)"),
    _llamacpp("llamacpp-4090-pr6766", "NVIDIA GeForce RTX 4090", "Llama 2 7B Q4_0 (3.56 GiB)", 6.74,
                  3.56 * GIB, LLAMA_7B_KV, 64, ((1, 146.81),),
                  "ggml-org/llama.cpp PR #6766 (CUDA graphs, ./main text generation, 2024-04-19)"),
    _llamacpp("llamacpp-h100pcie-issue6763", "NVIDIA H100 PCIe", "Llama 2 7B Q4_K_M (3.80 GiB)", 6.74,
                  3.80 * GIB, LLAMA_7B_KV, 64, ((1, 163.83),),
                  "ggml-org/llama.cpp issue #6763 (CUDA graphs, -n 128, 2024-04-19)"),
    _llamacpp("llamacpp-3090-pr15802", "NVIDIA GeForce RTX 3090", "Llama 3 8B Q4_0 (4.33 GiB)", 8.03,
                  4.33 * GIB, LLAMA3_8B_KV, 256, ((1, 155.02), (8, 570.67 / 8)),
                  "ggml-org/llama.cpp PR #15802 (pp512 at micro-batch 1 and 8, September 2025)",
                  note="8 tokens of one sequence a step stand in for 8 sequences"),
    _llamacpp("llamacpp-2080-llmfit773", "NVIDIA GeForce RTX 2080", "Llama 3.1 8B Q4_K_M (4.58 GiB)",
                  8.03, 4.58 * GIB, LLAMA3_8B_KV, 128, ((1, 71.9),),
                  "AlexsJones/llmfit PR #773 (third party, 2026-07-20)"),
    _llamacpp("llamacpp-h200-here", "NVIDIA H200", "a Qwen2-7B-shaped Q4_K_M (4.68 GB)", 7.62, 4.68e9,
                  QWEN2_7B_KV, 562, ((1, 247.4), (8, 71.5)),
                  "this project's own lab run on an NVIDIA H200, 2026-12-02 (benchmarks/engine/results/"
                  "gpu_lab_h200.json)"),
    # --- vLLM ---
    DecodeFigures("vllm-h100-pr23197", VLLM, "NVIDIA H100 80GB HBM3", "Llama 3.1 8B BF16", 8.03, 16.06e9,
                  LLAMA3_8B_KV, 272, ((1, 32 / 0.236), (4, 32 / 0.260), (8, 32 / 0.284), (16, 32 / 0.336)),
                  "vllm-project/vllm PR #23197 (benchmark_latency baseline, 256 in / 32 out, batch 1 to 16, "
                  "2025-08-19)",
                  note="whole-request latency: the prefill is counted as decode time (a lower bound); an SXM "
                       "H100, since on a PCIe one's 2,000 GB/s the figure would exceed the ceiling"),
    DecodeFigures("vllm-h100-blog-2024-09", VLLM, "NVIDIA H100 80GB HBM3", "Llama 3 8B (16-bit)", 8.03, 16.06e9,
                  LLAMA3_8B_KV, 512, ((1, 1000 / 13),),
                  "vLLM blog, 'vLLM v0.6.0: 2.7x throughput improvement' (2024-09-05: '1 token every 13 ms under "
                  "light load')", note="light load, not one stream: a lower bound"),
    DecodeFigures("vllm-a100-issue20469", VLLM, "NVIDIA A100-SXM4-80GB", "Qwen3-14B AWQ (9.97 GB)", 14.77, 9.97e9,
                  QWEN3_14B_KV, 16100, ((1, 1000 / 20.63),),
                  "vllm-project/vllm issue #20469 (v0.9.1, --enforce-eager, 16000 in / 200 out, concurrency 1)",
                  note="without CUDA graphs (--enforce-eager): a lower bound"),
    DecodeFigures("vllm-4090-issue48035-fp16", VLLM, "NVIDIA GeForce RTX 4090", "Qwen3-4B FP16 (8.05 GB)", 4.02,
                  8.05e9, QWEN3_4B_KV, 256, ((1, 98.0),),
                  "vllm-project/vllm issue #48035 (v0.24.0, batch 1, 2026-07-08)"),
    DecodeFigures("vllm-4090-issue48035-fp8", VLLM, "NVIDIA GeForce RTX 4090", "Qwen3-4B FP8 (5.2 GB)", 4.02, 5.2e9,
                  QWEN3_4B_KV, 256, ((1, 80.0),), "vllm-project/vllm issue #48035 (v0.24.0, batch 1, 2026-07-08)",
                  compute="fp8"),
    DecodeFigures("vllm-4090-issue48035-v0191", VLLM, "NVIDIA GeForce RTX 4090", "Qwen3-4B FP16 (8.05 GB)", 4.02,
                  8.05e9, QWEN3_4B_KV, 256, ((1, 136.5),),
                  "vllm-project/vllm issue #48035 (v0.19.1, batch 1, 2026-07-08)"),
)


def memory_s(peak: GpuPeak, weights: float, kv_per_token: float, users: int, context: float) -> float:
    """The step's reads at the full bandwidth: the weights once, each sequence's KV cache."""
    return (weights + users * context * kv_per_token) / (peak.bandwidth_gbs * 1e9)


def compute_s(peak: GpuPeak, params_b: float, streams: int, precision: str = "fp16") -> float:
    """`streams` sequences' matrix work at the full peak of that precision: 2 FLOP per parameter each."""
    return 2 * params_b * 1e9 * streams / (peak.peak(precision) * 1e12)


@dataclass(frozen=True)
class Fitted:
    """One setup's efficiencies."""

    figures: DecodeFigures
    peak: GpuPeak
    e_mem: float
    k_batch: float | None  # None: a single batch size, nothing to fit it on
    left_out: str = ""  # why the figure is not used ("" = used)

    @property
    def architecture(self) -> str:
        return self.peak.architecture

    @property
    def words(self) -> str:
        share = f"{self.e_mem * 100:.0f} %"
        batch = (f"; each further stream adds {self.k_batch * 100:.1f} % of a single stream's step"
                 if self.k_batch is not None else "")
        speeds = ", ".join(f"{v:.0f} tok/s at {u}" for u, v in self.figures.points)
        return f"{self.figures.what} on {self.peak.name}: {speeds} ({share} of its ceiling{batch}; {self.figures.source})"


def fit(f: DecodeFigures) -> Fitted | None:
    """The figures' efficiencies on their GPU; None when the GPU has no datasheet row."""
    peak = peak_of(f.gpu)
    if peak is None:
        return None
    points = dict(f.points)
    first = min(points)
    m1, t1 = memory_s(peak, f.weight_bytes, f.kv_bytes_per_token, first, f.context), 1 / points[first]
    e_mem = m1 / t1
    # t(u) / t1 = M(u) / M(1) + k (u - 1): k by least squares over the batched points
    rows = [(u - first, 1 / v / t1 - memory_s(peak, f.weight_bytes, f.kv_bytes_per_token, u, f.context) / m1)
            for u, v in f.points if u > first]
    k = sum(x * y for x, y in rows) / sum(x * x for x, _ in rows) if rows else None
    left_out = ("above its own bandwidth ceiling: the figure or the model's size cannot be as stated"
                if e_mem > 1 else "")
    return Fitted(f, peak, e_mem, max(k, 0.0) if k is not None else None, left_out)


@dataclass(frozen=True)
class Efficiency:
    """The efficiencies an estimate uses: their ranges and the figures they rest on."""

    engine: str
    architecture: str
    same_architecture: bool  # False: no figure on this architecture, every figure of the engine used
    e_mem: tuple[float, float]
    k_batch: tuple[float, float]
    memory_figures: tuple[Fitted, ...]
    batch_figures: tuple[Fitted, ...]
    left_out: tuple[Fitted, ...]


def efficiency(engine: str, cc: tuple[int, int], extra: tuple[DecodeFigures, ...] = (),
               gpu_name: str = "") -> Efficiency | None:
    """The engine's efficiencies for this GPU (its compute capability, its name), from the
    published figures and `extra` (runs measured here on other GPUs); None when the engine has no
    figure at all."""
    fitted = [r for r in (fit(f) for f in PUBLISHED + tuple(extra) if f.engine == engine) if r is not None]
    used = [r for r in fitted if not r.left_out]
    if not used:
        return None
    arch = architecture(cc)
    here = [r for r in used if r.architecture == arch]
    same_gpu = peak_of(gpu_name) if gpu_name else None
    # One figure on an architecture is one setup's luck (or a lower bound): with fewer than two,
    # the band is the engine's whole spread, unless a figure is of this very GPU model.
    memory = here if len(here) >= MIN_FIGURES or any(r.peak == same_gpu for r in here) else used
    batch = [r for r in used if r.k_batch is not None]
    if not batch:
        return None
    batch = [r for r in batch if r.architecture == arch] or batch
    mems, ks = [r.e_mem for r in memory], [r.k_batch for r in batch]
    return Efficiency(engine, arch, memory is here, (min(mems), max(mems)), (min(ks), max(ks)),
                      tuple(memory), tuple(batch), tuple(r for r in fitted if r.left_out))
