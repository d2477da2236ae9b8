"""A physical prior for what nothing measured: decode is bound by memory bandwidth.

Every decode step reads the weights once (shared by the batch) and each sequence's KV cache, so one
step takes at least (weight bytes + users x context x KV bytes per token) / bandwidth, and a
stream decodes at most 1 / that. Tensor parallel shares those reads among the cards (ideally:
the all-reduce is not counted); a layer split reads them one card after another, no faster than
one card. Prefill is bound by compute: 2 x parameters x prompt tokens / peak FP16 tensor FLOPS.

An engine reaches only part of that ceiling. Its efficiency is fitted from the runs that were
measured (or published, when upstream could reproduce them): each row's per-stream decode over
its own ceiling (its GPU, its weights, its load), at the concurrency level nearest to the
workload's. The estimate is the ceiling times that range: labelled "estimated, not measured",
never used to pass a target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from .facts import BUILTIN_MODELS, Candidate, fmt, start_check, users_str
from .gpus import GpuPeak, peak_of
from .memory import kv_bytes_per_token, weight_bytes
from .performance import Predicted, model_key
from .specs import Evidence, GpuSpec, ModelSpec, Workload

ESTIMATED = "estimated, not measured"


def step_bytes(weights: float, kv_per_token: float, users: int, workload_context: float) -> float:
    return weights + users * workload_context * kv_per_token


def decode_ceiling(peak: GpuPeak, weights: float, kv_per_token: float, users: int, context: float,
                   params_b: float, gpus: int = 1, split: str = "one GPU") -> float:
    """Tokens per second one stream can at most decode at this load."""
    read = step_bytes(weights, kv_per_token, users, context)
    cards = gpus if split == "tensor parallel" else 1
    memory_s = read / (peak.bandwidth_gbs * 1e9 * cards)
    compute_s = 2 * params_b * 1e9 * users / (peak.fp16_tflops * 1e12 * cards)
    return 1 / max(memory_s, compute_s)


def decode_context(workload_or_ev) -> float:
    """The mean context a sequence holds while it decodes: its prompt and half its output."""
    return workload_or_ev.prompt_tokens + workload_or_ev.output_tokens / 2


@dataclass(frozen=True)
class Efficiency:
    evidence_id: str
    label: str
    gpu_name: str
    concurrency: int
    measured: float  # tok/s per stream
    ceiling: float
    value: float  # measured / ceiling


def efficiencies(backend: str, evidence: Sequence[Evidence], candidates: Mapping[str, Candidate]) -> list[Efficiency]:
    """One per usable row of this engine: one GPU, a datasheet peak, the weights' size known (or
    estimated, for a built-in model),
    a per-stream decode figure, and a setup upstream can start (a figure upstream refuses to
    reproduce says nothing about the engine)."""
    out = []
    for ev in evidence:
        c = candidates.get(ev.candidate)
        if c is None or c.backend != backend or ev.decode_tok_s_p50 is None or ev.gpu_count != 1:
            continue
        peak = peak_of(ev.gpu_name)
        if peak is None or not start_check(c, ev.compute_capability).eligible:
            continue
        spec = BUILTIN_MODELS.get(next((n for n in BUILTIN_MODELS if model_key(n) == model_key(ev.model)), ""))
        weights = ev.weight_bytes or (weight_bytes(c, spec)[0] if spec else None)  # the size, else the estimate
        if not weights:
            continue
        kv = kv_bytes_per_token(spec) if spec else 0.0
        params = spec.params_b if spec else weights / 1e9  # the compute bound is far at these loads
        ceiling = decode_ceiling(peak, weights, kv, ev.concurrency, decode_context(ev), params)
        out.append(Efficiency(ev.id, ev.label, ev.gpu_name, ev.concurrency, ev.decode_tok_s_p50, ceiling,
                              ev.decode_tok_s_p50 / ceiling))
    return out


@dataclass
class Prior:
    metrics: dict[str, Predicted]  # decode, aggregate, TPOT: "estimated" with a band, or none
    ceiling: float | None  # tok/s per stream
    sentence: str  # how it was derived, in words
    prefill_floor_ms: float | None


def estimate(candidate: Candidate, model: ModelSpec, gpu: GpuSpec, workload: Workload, weights: float,
             gpus: int, split: str, evidence: Sequence[Evidence], candidates: Mapping[str, Candidate]) -> Prior:
    none = {m: Predicted(m, None, "none", (), (), "no figure in the evidence")
            for m in ("decode_tok_s_p50", "aggregate_tok_s", "tpot_ms_p50")}
    peak = peak_of(gpu.name)
    if peak is None:
        return Prior(none, None, f"No datasheet bandwidth for {gpu.name}: no physical estimate.", None)
    kv = kv_bytes_per_token(model, candidate.kv_cache_bytes)
    users, context = workload.users, decode_context(workload)
    ceiling = decode_ceiling(peak, weights, kv, users, context, model.params_b, gpus, split)
    read_gb = step_bytes(weights, kv, users, context) / 1e9
    cards = f" x {gpus} cards (tensor parallel, ideal: the all-reduce is not counted)" \
        if split == "tensor parallel" else ""
    prefill = 2 * model.params_b * 1e9 * workload.prompt_tokens / (peak.fp16_tflops * 1e12 * gpus) * 1000
    how = (f"bandwidth ceiling {fmt(ceiling)} tok/s per stream at {users_str(users)}: {fmt(peak.bandwidth_gbs)} GB/s"
           f"{cards} / {fmt(read_gb)} GB read per step (weights + {users_str(users)} x {fmt(context)} tokens "
           f"of KV cache) ({peak.name}, {peak.source})")
    fitted = efficiencies(candidate.backend, evidence, candidates)
    if not fitted:
        return Prior(none, ceiling, f"{how[0].upper() + how[1:]}; no run of this engine to fit its efficiency "
                                    f"on, so no estimate.", prefill)
    nearest = min(abs(math.log(e.concurrency / users)) for e in fitted)
    used = [e for e in fitted if abs(math.log(e.concurrency / users)) == nearest]
    lo, hi = min(e.value for e in used), max(e.value for e in used)
    level = used[0].concurrency
    runs = "; ".join(sorted({f"{e.label} on {e.gpu_name}, {fmt(e.measured)} tok/s of {fmt(e.ceiling)}"
                             for e in used}))
    share = f"{fmt(lo * 100)} %" if lo == hi else f"{fmt(lo * 100)}-{fmt(hi * 100)} %"
    sentence = (f"{ESTIMATED}: {how}, times the {share} of its ceiling this engine reached at "
                f"{users_str(level)} in {len(used)} run{'s' if len(used) != 1 else ''} ({runs})")
    decode = (ceiling * lo, ceiling * hi)
    mid = (decode[0] + decode[1]) / 2
    ids = tuple(e.evidence_id for e in used)
    short = f"{ESTIMATED}, from the memory-bandwidth ceiling"
    metrics = {
        "decode_tok_s_p50": Predicted("decode_tok_s_p50", mid, "estimated", (level,), ids,
                                      f"{short}: {fmt(decode[0])} to {fmt(decode[1])} tok/s", decode),
        "aggregate_tok_s": Predicted("aggregate_tok_s", mid * users, "estimated", (level,), ids,
                                     f"{short}: {users_str(users)} x the per-stream estimate, an upper bound",
                                     (decode[0] * users, decode[1] * users)),
        "tpot_ms_p50": Predicted("tpot_ms_p50", 1000 / mid, "estimated", (level,), ids,
                                 f"{short}: the inverse of the per-stream estimate", (1000 / decode[1], 1000 / decode[0])),
    }
    return Prior(metrics, ceiling, sentence[0].upper() + sentence[1:] + ".", prefill)
