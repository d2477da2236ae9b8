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
    from .backends import engine_of  # its engine's published figures (the engines' modules import this one)
    published = tuple(engine_of(engine).published)
    fitted = [r for r in (fit(f) for f in published + tuple(extra) if f.engine == engine) if r is not None]
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
