"""A physical prior for what nothing measured: a decode step's reads and matrix work against the
GPU's datasheet bandwidth and tensor peak, at the efficiencies the engine reaches (efficiency.py).

Every decode step reads the weights once (shared by the batch) and each sequence's KV cache, each
further sequence adds the engine's batching overhead, and no step is faster than its matrix work at
the GPU's full peak; so a stream's speed falls as users grow. Tensor parallel over NVLink shares the
reads and the work among the cards (ideally: the all-reduce is not counted); over PCIe, and in a
layer split that reads them one card after another, it is no faster than one card.

The efficiencies are fitted to published figures (the engines' maintainers' PRs and benchmarks,
this project's own runs) and to the runs measured here on other GPUs; the estimate's band is their
spread. It is labelled "estimated, not measured", names the figures it rests on, and never passes
a target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from .backends import engine_of
from .efficiency import DecodeFigures, compute_s, efficiency, memory_s
from .facts import BUILTIN_MODELS, Candidate, fact, fmt, start_check, users_str
from .gpus import peak_of
from .memory import kv_bytes_per_token, weight_bytes
from .performance import Predicted, model_key
from .specs import Evidence, GpuSpec, ModelSpec, Workload

ESTIMATED = "estimated, not measured"


def decode_context(workload_or_ev) -> float:
    """The mean context a sequence holds while it decodes: its prompt and half its output."""
    return workload_or_ev.prompt_tokens + workload_or_ev.output_tokens / 2


def precision(candidate: Candidate, cc: tuple[int, int]) -> str:
    """Which peak bounds the candidate's matrix work (its engine says: backends/)."""
    return engine_of(candidate.backend).precision(candidate, cc)


def measured_figures(backend: str, evidence: Sequence[Evidence],
                     candidates: Mapping[str, Candidate]) -> tuple[DecodeFigures, ...]:
    """The runs of this engine measured here (or published and upstream-reproducible) as figures
    to fit on: one per setup (GPU, model, weights, shape, version, flags), its levels its points.
    Only rows on one GPU with a datasheet row, their weights' size known (or estimated, for a
    built-in model) and a per-stream decode figure; a setup upstream refuses to start says nothing
    about the engine."""
    series: dict[tuple, list[Evidence]] = {}
    for ev in evidence:
        c = candidates.get(ev.candidate)
        if c is None or c.backend != backend or ev.decode_tok_s_p50 is None or ev.gpu_count != 1:
            continue
        if peak_of(ev.gpu_name) is None or not start_check(c, ev.compute_capability).eligible:
            continue
        key = (ev.gpu_name, ev.host_id, model_key(ev.model), ev.candidate, ev.weight_bytes, ev.prompt_tokens,
               ev.output_tokens, ev.engine_version, ev.build_flags)
        series.setdefault(key, []).append(ev)
    out = []
    for rows in series.values():
        ev, c = rows[0], candidates[rows[0].candidate]
        spec = next((m for m in BUILTIN_MODELS.values() if model_key(m.name) == model_key(ev.model)), None)
        weights = ev.weight_bytes or (weight_bytes(c, spec)[0] if spec else None)
        if not weights:
            continue
        points = {}
        for r in rows:  # newest first: the first row per level wins
            points.setdefault(r.concurrency, r.decode_tok_s_p50)
        out.append(DecodeFigures(
            ev.id, backend, ev.gpu_name, f"{ev.model or 'a model'} ({ev.label})", spec.params_b if spec else weights / 1e9,
            weights, kv_bytes_per_token(spec) if spec else 0.0, decode_context(ev), tuple(sorted(points.items())),
            ev.label + (f" ({ev.url})" if ev.url else ""), compute=precision(c, ev.compute_capability)))
    return tuple(out)


@dataclass
class Prior:
    metrics: dict[str, Predicted]  # decode, aggregate, TPOT: "estimated" with a band, or none
    ceiling: float | None  # tok/s per stream at the full bandwidth and tensor peak
    sentence: str  # how it was derived, in words
    prefill_floor_ms: float | None
    sources: list[str] = field(default_factory=list)  # the figures the efficiencies rest on, one line each


def _none(why: str) -> dict[str, Predicted]:
    return {m: Predicted(m, None, "none", (), (), why) for m in ("decode_tok_s_p50", "aggregate_tok_s", "tpot_ms_p50")}


def _share(lo: float, hi: float, digits: int = 0) -> str:
    a, b = f"{lo * 100:.{digits}f}", f"{hi * 100:.{digits}f}"
    return f"{a} %" if a == b else f"{a}-{b} %"


def estimate(candidate: Candidate, model: ModelSpec, gpu: GpuSpec, workload: Workload, weights: float,
             gpus: int, split: str, evidence: Sequence[Evidence], candidates: Mapping[str, Candidate]) -> Prior:
    if not candidate.estimable:
        f = fact("vllm-gguf-min-cc")
        return Prior(_none("no figure in the evidence"), None,
                     f"No published or measured figure of {candidate.label}'s kernels to fit an estimate on "
                     f"({f.statement}; {f.source}): not estimated, measure it.", None)
    peak = peak_of(gpu.name)
    if peak is None:
        why = f"No datasheet row for {gpu.name}: no physical estimate."
        return Prior(_none("no figure in the evidence"), None, why, None)
    kv = kv_bytes_per_token(model, candidate.kv_cache_bytes)
    users, context = workload.users, decode_context(workload)
    # Tensor parallel shares the reads and the work where NVLink carries its all-reduces; over PCIe
    # the write-up saw two cards decode slower than one (fact tp-over-pcie): counted as one card.
    linked = (gpu.topology or gpu.interconnect) == "nvlink"
    cards = gpus if split == "tensor parallel" and linked else 1
    kind = precision(candidate, gpu.compute_capability)
    mem = memory_s(peak, weights, kv, users, context) / cards
    ceiling = 1 / max(mem, compute_s(peak, model.params_b, users, kind) / cards)
    prefill = compute_s(peak, model.params_b, workload.prompt_tokens, kind) / gpus * 1000
    read_gb = (weights + users * context * kv) / 1e9
    tflop = 2 * model.params_b * 1e9 * users / 1e12
    tensor = peak.peak(kind)
    unit = "TOPS" if kind == "int8" and peak.int8_tops else "TFLOPS"
    on = (f" on each of {gpus} cards (tensor parallel over NVLink, ideal: the all-reduce is not counted)"
          if cards > 1 else " (tensor parallel over PCIe counted as one card: " + fact("tp-over-pcie").statement
          + ")" if split == "tensor parallel" else "")
    work_words = f", and its {fmt(tflop)} T operations take at least their time at {fmt(tensor)} {kind.upper()} {unit}"
    how = (f"at {users_str(users)} a decode step reads {fmt(read_gb)} GB (weights + {users_str(users)} x "
           f"{fmt(context)} tokens of KV cache) at {fmt(peak.bandwidth_gbs)} GB/s{work_words}{on} ({peak.name}, "
           f"{peak.source})")
    eff = efficiency(candidate.backend, gpu.compute_capability,
                     measured_figures(candidate.backend, evidence, candidates), gpu.name)
    if eff is None:
        return Prior(_none("no figure in the evidence"), ceiling,
                     f"{how[0].upper() + how[1:]}; no published or measured figure of this engine to fit its "
                     f"efficiency on, so no estimate.", prefill)
    weights_s = memory_s(peak, weights, 0.0, 0, 0) / cards
    floor = compute_s(peak, model.params_b, users, kind) / cards  # the full peak: no step is faster

    def speed(e_mem: float, k: float) -> float:
        return 1 / max(mem / e_mem + (users - 1) * k * weights_s / e_mem, floor)

    slow, fast = speed(eff.e_mem[0], eff.k_batch[1]), speed(eff.e_mem[1], eff.k_batch[0])
    mid = math.sqrt(slow * fast)  # the band's geometric middle: its ends are ratios of one ceiling
    where = (f"on {eff.architecture} GPUs" if eff.same_architecture else
             f"on the GPUs it has figures for (fewer than two on {eff.architecture})")
    rests_on = tuple(dict.fromkeys(eff.memory_figures + (eff.batch_figures if users > 1 else ())))
    figures = len({f.figures.id for f in rests_on})
    batch = f"; each further stream adds {_share(*eff.k_batch, 1)} of a single stream's step" if users > 1 else ""
    sentence = (f"{ESTIMATED}: {how}. The engine reaches {_share(*eff.e_mem)} of the bandwidth ceiling {where}{batch} "
                f"({figures} published or measured figures, listed with the estimate): {fmt(slow)} to {fmt(fast)} "
                f"tok/s per stream.")
    ids = tuple(dict.fromkeys(f.figures.id for f in rests_on))
    short = f"{ESTIMATED}, from the GPU's bandwidth and tensor peak"
    metrics = {
        "decode_tok_s_p50": Predicted("decode_tok_s_p50", mid, "estimated", (users,), ids,
                                      f"{short}: {fmt(slow)} to {fmt(fast)} tok/s", (slow, fast)),
        "aggregate_tok_s": Predicted("aggregate_tok_s", mid * users, "estimated", (users,), ids,
                                     f"{short}: {users_str(users)} x the per-stream estimate, an upper bound",
                                     (slow * users, fast * users)),
        "tpot_ms_p50": Predicted("tpot_ms_p50", 1000 / mid, "estimated", (users,), ids,
                                 f"{short}: the inverse of the per-stream estimate", (1000 / fast, 1000 / slow)),
    }
    sources = [f.words for f in rests_on]
    sources += [f"Not used: {f.words}: {f.left_out}." for f in eff.left_out]
    return Prior(metrics, ceiling, sentence[0].upper() + sentence[1:], prefill, sources)
