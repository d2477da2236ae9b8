"""The V100 write-up's figures, as published (a blog post comparing vLLM FP8 with llama.cpp Q4_K_M on Tesla V100s).

A blog post measured these by hand on 2 × Tesla V100 16GB PCIe; they were not measured here.
They ship as reference reports so charts can show where our measurements agree or disagree.
Only what the post states is filled in: TTFT, ITL, E2E and absolute prefill were not published.
"""
from __future__ import annotations

from .model import ImportedLevel, ImportedReport, StatedQuality

GPU = "Tesla V100-PCIE-16GB"
MODEL = "DeepSeek-R1-Distill-Qwen-7B"
PROMPT_TOKENS = 512.0
OUTPUT_TOKENS = 100.0
TOOL_LABEL = "Published write-up (V100 blog post)"
# The post's perplexities: one figure per variant, without the evaluation text, its windows or
# the tool, so they compare with nothing (not even with each other: nothing says the text was
# the same). Keyed by the variant's quantization as the inventory names it (models.Variant).
PERPLEXITY = {"fp8_e4m3": 6.15, "gguf_q4_k_m": 6.28}
QUALITY_LABEL = "published, not measured here; evaluation text not stated"


def published_quality(quantization: str) -> StatedQuality | None:
    """The write-up's quality figures for this variant, labelled; None where it published none."""
    if quantization not in PERPLEXITY:
        return None
    return StatedQuality(figures={"perplexity": PERPLEXITY[quantization]}, text=None, windows=None,
                         notes=[f"Perplexity {PERPLEXITY[quantization]}: {QUALITY_LABEL} (nor its windows "
                                "or tool)."])

_COMMON_NOTES = [
    "Published figures from a blog post, not measured here.",
    "Setup: 2 × Tesla V100 16GB PCIe (no NVLink, PCIe 3.0 x16 between cards), X99 Xeon, "
    "128 GB RAM; driver 535, CUDA 12.2 on the host.",
    "Workload: prompt 512 tokens, 100 output tokens, temperature 0.7, concurrency 1 and 8; a "
    "home-made Python script over the OpenAI-compatible API.",
    "Prefill with 8 × 512-token prompts: vLLM FP8 reported +39 % vs llama.cpp Q4_K_M "
    "(relative only, no absolute figure published).",
]
_UPSTREAM_REFUSES = (
    "Not reproducible with upstream vLLM on a V100: upstream vLLM refuses --quantization fp8 "
    "below compute capability 8.0 (7.5 after PR #29901) and AWQ below 7.5; a V100 is 7.0, so "
    "both fail at start-up and these figures cannot come from upstream vLLM on that GPU.")

_RAW = {"source": "seed-v100-writeup.md", "gpus": "2 × Tesla V100 16GB PCIe",
        "interconnect": "PCIe 3.0 x16, no NVLink", "driver": "535", "host_cuda": "12.2",
        "prompt_tokens": 512, "output_tokens": 100, "temperature": 0.7}


def _stated(decode: float | None) -> dict:
    """The post gives one per-stream decode figure per level, not a distribution: a mean."""
    return {} if decode is None else {"mean": decode}


def _levels(decode_1: float | None, decode_8: float | None, aggregate_8: float | None,
            note_1: str | None = None, note_8: str | None = None) -> list[ImportedLevel]:
    one = ImportedLevel(label="1 concurrent request", concurrency=1.0,
                        prompt_tokens=PROMPT_TOKENS, output_tokens=OUTPUT_TOKENS,
                        decode_tok_s=_stated(decode_1))
    eight = ImportedLevel(label="8 concurrent requests", concurrency=8.0,
                          prompt_tokens=PROMPT_TOKENS, output_tokens=OUTPUT_TOKENS,
                          decode_tok_s=_stated(decode_8), aggregate_tok_s=aggregate_8)
    if note_1:
        one.notes.append(note_1)
    if note_8:
        eight.notes.append(note_8)
    return [one, eight]


def v100_writeup_reports() -> list[ImportedReport]:
    """One published report per backend: vLLM FP8, llama.cpp Q4_K_M, vLLM AWQ."""
    vllm_flags = ("vllm serve --quantization fp8 --tensor-parallel-size 1 --max-model-len 8192 "
                  "--gpu-memory-utilization 0.92 --dtype float16")
    fp8 = ImportedReport(
        kind="published", tool_label=TOOL_LABEL,
        title=f"V100 write-up (published): vLLM FP8 — {MODEL}",
        model=MODEL, backend="vllm", gpu=GPU, created=None,
        levels=_levels(32.0, 18.7, 150.0),
        notes=[*_COMMON_NOTES,
               "vLLM 0.6.x in Docker (CUDA 12.4 PyTorch image): " + vllm_flags + "; FP8 (E4M3) "
               "weights converted offline (~20 min).",
               f"Also published: weights ~7 GB, peak GPU memory 9.5 GB, perplexity {PERPLEXITY['fp8_e4m3']}, context "
               "'tight'; --tensor-parallel-size 2 across the two PCIe cards gave ~24 tok/s decode "
               "(slower than one card: all-reduce over PCIe).",
               _UPSTREAM_REFUSES],
        raw_meta={**_RAW, "engine": "vLLM 0.6.x", "quantization": "FP8 (E4M3)",
                  "flags": vllm_flags},
        quality=published_quality("fp8_e4m3"))
    llama_flags = "llama-server -m ...Q4_K_M.gguf -c 8192 --parallel 8 -ngl 99"
    q4 = ImportedReport(
        kind="published", tool_label=TOOL_LABEL,
        title=f"V100 write-up (published): llama.cpp Q4_K_M — {MODEL}",
        model=MODEL, backend="llamacpp", gpu=GPU, created=None,
        levels=_levels(56.0, 29.4, 235.0, note_1="Published as 56 tok/s (1.75× vLLM FP8)."),
        notes=[*_COMMON_NOTES,
               "llama.cpp built with -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=70; " + llama_flags
               + ".",
               f"Also published: weights 4.3 GB, peak GPU memory < 6.5 GB, perplexity {PERPLEXITY['gguf_q4_k_m']}, 32K "
               "context works; without CMAKE_CUDA_ARCHITECTURES=70 start-up took ~15 s longer "
               "(PTX JIT); without -ngl 99 speed roughly halves.",
               "A hot GPU logged correctable ECC errors and decode fell under 30 tok/s until it "
               "cooled."],
        raw_meta={**_RAW, "engine": "llama.cpp (CUDA, sm_70 build)", "quantization": "GGUF Q4_K_M",
                  "flags": llama_flags},
        quality=published_quality("gguf_q4_k_m"))
    awq = ImportedReport(
        kind="published", tool_label=TOOL_LABEL,
        title=f"V100 write-up (published): vLLM AWQ — {MODEL}",
        model=MODEL, backend="vllm", gpu=GPU, created=None,
        levels=_levels(48.0, None, None, note_1="Published as '~48' tok/s (approximate).",
                       note_8="No figure published at 8 concurrent requests."),
        notes=[*_COMMON_NOTES,
               "vLLM with AWQ 4-bit weights; flags not published. The post suggested vLLM + AWQ "
               "as 'the best of both'.",
               _UPSTREAM_REFUSES],
        raw_meta={**_RAW, "engine": "vLLM", "quantization": "AWQ 4-bit"})
    return [fp8, q4, awq]
