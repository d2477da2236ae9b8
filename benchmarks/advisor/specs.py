"""Inputs to the advisor: the GPU, the model, the workload, the evidence, the engine builds."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from ..engine.catalogue import metric
from ..engine.points import QualityPoint


@dataclass(frozen=True)
class Priority:
    key: str
    label: str  # what the form offers
    phrase: str  # how a sentence names what is ranked on
    best: str = "best"  # how a sentence names the top one's: "best memory headroom", "least quality loss"


# What a team may rank on, once: the form's choices and the advisor's sentences read this.
PRIORITY = {p.key: p for p in (
    Priority("single_user_speed", "single-user speed (per-stream decode)", metric("decode_tok_s").name.lower()),
    Priority("throughput", "aggregate throughput", metric("aggregate_tok_s").name.lower()),
    Priority("memory_headroom", "memory headroom", "memory headroom"),
    Priority("least_quality_loss", "least quality loss (KL divergence from a reference, or perplexity on the "
             "same text)", "quality loss", best="least"),
    # economics.py: measured at this load where a run measured it, else estimated from the GPU's
    # board power over the predicted throughput (labelled, with its band). Cost needs a stated price.
    Priority("lowest_cost", "lowest cost per million output tokens (at the price stated below)",
             "cost per million output tokens", best="lowest"),
    Priority("lowest_energy", "lowest energy per output token", "energy per output token", best="lowest"),
)}
PRIORITIES = tuple(PRIORITY)


@dataclass(frozen=True)
class GpuSpec:
    name: str  # as nvidia-smi / pynvml reports it, e.g. "Tesla V100-PCIE-16GB"
    compute_capability: tuple[int, int]
    vram_gib: float  # per GPU
    count: int = 1
    interconnect: str = "pcie"  # "pcie" | "nvlink": how the GPUs of one host talk
    host_id: str | None = None  # matches Evidence.host_id for "measured on this host"
    # The farthest path between the host's GPUs as its probe read it (engine.gpu.GpuPair.kind):
    # "nvlink", or the PCIe level "internal" | "single" | "multiple" | "hostbridge" | "node" |
    # "system" (across CPU sockets); "" when not probed (a stated GPU).
    topology: str = ""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    params_b: float  # all parameters, billions
    layers: int
    kv_heads: int
    head_dim: int
    context_length: int
    # Embedding + lm_head parameters: FP8/AWQ checkpoints keep these in 16 bit.
    embedding_params_b: float = 0.0
    # Known file sizes of quantized variants, bytes, keyed by Candidate.quantization.
    known_weight_bytes: Mapping[str, float] = field(default_factory=dict)
    # What tensor parallel must divide (config.json or the GGUF header); 0 = not known, not checked.
    attention_heads: int = 0
    intermediate_size: int = 0


@dataclass(frozen=True)
class Workload:
    users: int  # concurrent requests
    prompt_tokens: int
    output_tokens: int
    context_tokens: int | None = None  # per user; None means prompt + output
    ttft_p90_ms: float | None = None  # target: TTFT p90 at most this
    tpot_ms: float | None = None  # target: time per output token (p50) at most this
    min_user_tok_s: float | None = None  # target: per-stream decode at least this
    priority: str = "single_user_speed"  # one of PRIORITIES ("lowest_cost" needs advise()'s price)

    @property
    def context(self) -> int:
        return self.context_tokens or (self.prompt_tokens + self.output_tokens)


@dataclass(frozen=True)
class Evidence:
    """One concurrency level of one candidate: measured here or published elsewhere. Its figures
    are the catalogue's ADVISOR_FIGURES, one field each, named as the catalogue names them."""

    id: str
    candidate: str  # Candidate.key
    kind: str  # "measured" | "published"
    label: str
    gpu_name: str
    compute_capability: tuple[int, int]
    concurrency: int
    prompt_tokens: int
    output_tokens: int
    url: str | None = None  # link to the run (or the publication)
    host_id: str | None = None
    ttft_ms_p50: float | None = None
    ttft_ms_p90: float | None = None
    tpot_ms_p50: float | None = None
    decode_tok_s_p50: float | None = None  # per stream
    aggregate_tok_s: float | None = None
    peak_memory_gib: float | None = None
    energy_per_token_j: float | None = None  # measured (NVML) or stated by an imported report
    note: str = ""
    # What was measured, so a figure is never carried to another setup: the model (its name as
    # the inventory or the publication gives it), the weights' size, the engine's version and
    # flags, and how many GPUs served it.
    model: str = ""
    weight_bytes: float | None = None
    engine_version: str = ""
    build_flags: str = ""
    gpu_count: int = 1
    split: str = ""  # how the model was spread over them (engine.multi_gpu.Spread.how); "" not said


@dataclass(frozen=True)
class QualityEvidence:
    """The quality of one candidate's variant of a base model: measured here (an endpoint's
    quality step in a run) or published. Its figures, and what they are figures of (the text,
    the windows, the reference), are its `point`'s; it is only ever read for `model`."""

    id: str
    candidate: str  # Candidate.key
    model: str  # the base model's name
    label: str
    point: QualityPoint
    url: str | None = None  # link to the run's quality step (or None: the publication)

    @property
    def kind(self) -> str:
        return self.point.kind


_VERSION_RE = re.compile(r"v?(\d{1,3})\.(\d{1,3})")


def parse_version(text) -> tuple[int, int] | None:
    """'0.11.0', 'v0.21.1rc2' -> (0, 11), (0, 21); None when it is no release number."""
    m = _VERSION_RE.match(str(text or "").strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class EngineBuilds:
    """What the team runs, where it changes what can start.

    vllm_version: (major, minor) such as (0, 21), as stated or read from a registered endpoint
    (vLLM's /version); None = unknown: a candidate starts when some release starts it, and the
    answer names those releases. llamacpp_build: llama-server's build_info (its /props), shown
    with the notes that depend on the build's date. `source` says where the versions came from.
    """

    vllm_version: tuple[int, int] | None = None
    llamacpp_build: str | None = None
    source: str = ""


@dataclass(frozen=True)
class LaunchEvidence:
    """One server the lab started from a recipe on a host's GPU, or that did not start there:
    measured, and keyed as speed evidence is (candidate, model, engine version, flags, GPU), so
    it is never carried to another model. A start that failed keeps its recognised cause
    (engine.launcher.CAUSES' codes), the log line that says it and the last lines of its log."""

    id: str
    candidate: str  # Candidate.key
    label: str
    gpu_name: str
    compute_capability: tuple[int, int]
    started: bool  # reached /health
    model: str = ""
    url: str | None = None  # the run's launch row
    host_id: str | None = None
    engine_version: str = ""  # as the server said (its /version or /props), else its log; "" unknown
    flags: str = ""  # the setting it was started at
    gpu_count: int = 1
    cause_code: str = ""
    cause: str = ""  # the cause in words
    cause_line: str = ""
    log_excerpt: str = ""
    exit: str = ""  # "exit code 1", "signal SIGKILL", "no answer on /health"
    health_s: float | None = None  # start -> /health 200
    first_token_s: float | None = None  # start -> a probe's first token
    memory_loaded_mib: float | None = None  # the server's processes after load
    memory_source: str = ""  # "gpu" (NVML) | "rss" (no GPU: resident memory, not GPU memory)
    memory_note: str = ""
    # The tokens of 16-bit KV cache its flags allocate at load (llama.cpp's -c, shared by its
    # slots); None when its flags do not say, or quantize the cache.
    kv_context_tokens: int | None = None

    @property
    def kind(self) -> str:
        return "measured"  # as Evidence.kind: the lab only measures
