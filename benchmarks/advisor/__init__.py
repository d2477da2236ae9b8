"""The decision engine: how to serve a 7B LLM on a team's GPUs. Django-free.

For each candidate (vLLM FP8, llama.cpp Q4_K_M, vLLM AWQ; more as data in facts.py) it answers:
can it start on this GPU (facts with sources), does it fit (weights + KV cache + overhead), how
fast is it at this load (the closest evidence, read at the users level), does it meet the targets.
Then it ranks by the stated priority. It never invents a number and never recommends what cannot
start or does not fit.

API
---
advise(gpu: GpuSpec, model: ModelSpec, workload: Workload, evidence: Sequence[Evidence],
       candidates: Sequence[Candidate] = DEFAULT_CANDIDATES, *,
       builds: EngineBuilds = EngineBuilds(),
       variant_bytes: Mapping[str, float] | None = None,   # actual sizes, keyed by quantization
       gpu_memory_utilization: float | None = None,        # vLLM; None = the fact's 0.9
       quality: Sequence[QualityEvidence] = (),            # measured and published quality
       launches: Sequence[LaunchEvidence] = (),            # the lab's starts, newest first
       price: HourlyPrice | None = None,                   # engine.cost: the GPUs' stated price
       ) -> Recommendation

GpuSpec(name, compute_capability: tuple[int, int], vram_gib, count=1, interconnect="pcie",
        host_id=None, topology="")                       # topology: the farthest path between the
        # host's GPUs as probed: "nvlink" | "single" | "multiple" | "hostbridge" | "node" | "system"
ModelSpec(name, params_b, layers, kv_heads, head_dim, context_length, embedding_params_b=0.0,
          known_weight_bytes={})                          # DEEPSEEK_R1_DISTILL_QWEN_7B
Workload(users, prompt_tokens, output_tokens, context_tokens=None, ttft_p90_ms=None,
         tpot_ms=None, min_user_tok_s=None, priority="single_user_speed")
         # priority: "single_user_speed" | "throughput" | "memory_headroom" | "least_quality_loss"
         #   | "lowest_cost" (needs a price) | "lowest_energy"
Evidence(id, candidate, kind ("measured" | "published"), label, gpu_name, compute_capability,
         concurrency, prompt_tokens, output_tokens, url=None, host_id=None, ttft_ms_p50=None,
         ttft_ms_p90=None, tpot_ms_p50=None, decode_tok_s_p50=None, aggregate_tok_s=None,
         peak_memory_gib=None, note="")                   # one row per concurrency level;
         # its figures are engine.catalogue.ADVISOR_FIGURES, named as the catalogue names them
EngineBuilds(vllm_version: tuple[int, int] | None = None, vllm_fp8_sm75: bool = False)
Candidate(key, label, backend, quantization, requires, size_fact, embedding_bits, kv_cache_bytes=2)
LaunchEvidence(id, candidate, label, gpu_name, compute_capability, started, model, url, host_id,
         engine_version, flags, gpu_count, cause_code, cause, cause_line, log_excerpt, exit, health_s,
         first_token_s, memory_loaded_mib, memory_source ("gpu" | "rss"), memory_note)
         # one server the lab started from a recipe, or that did not start (launches.py)
QualityEvidence(id, candidate, model, label, point: engine.points.QualityPoint, url=None)
         # one candidate's variant of a base model: its quality figures, measured or published,
         # and what they are figures of (text, windows, reference); read only for that model
published_v100_evidence() -> list[Evidence]             # the write-up's figures, labelled
published_v100_quality() -> list[QualityEvidence]       # its perplexities (FP8, Q4_K_M), text not stated

Recommendation: gpu, model, workload, builds (echoed), ranked: list[CandidateResult],
    recommended: str | None, summary, caveats, confidence ("high" | "medium" | "low"),
    confidence_why, hardware_notes: list[Note(text, source, fact_id)],
    measure_next: list[SuggestedRun(candidate, concurrency_levels, prompt_tokens, output_tokens,
    host_id, why, quality)], quality_basis: QualityBasis(figure, words, candidates, evidence_ids),
    cards: CardsAnswer(question, answer ("one card" | "two cards" | "open"), basis ("measured" |
    "anecdote"), summary, reasons, rows: list[CardsRow], path, source, note, note_fact) | None,
    candidate(key) -> CandidateResult, to_dict() for JSON.
CandidateResult: key, label, requirements, eligible, ineligible_reasons, fit: MemoryFit,
    evidence_basis, evidence_shape, predicted: {metric: Predicted(metric, value, how, levels,
    evidence_ids, note)}, evidence: list[EvidenceRef(id, label, kind, url, concurrency, flags)],
    evidence_notes, meets_targets: {target: TargetCheck(target, limit, metric, predicted, how, met,
    note)}, meets_all, priority_value, priority_how, priority_text, reasons, quality: QualityRead(how
    ("measured" | "published" | "not measured"), evidence_id, label, url, figures, perplexity_stderr,
    text, windows, reference, note), rank, recommendable, energy, cost: EconomyRead(figure, value, how
    ("measured" | "published" | "interpolated" | "estimated" | "none"), text, band, tok_s, tok_s_how,
    power, currency) | None.
MemoryFit: fits, gpus_used, weights_gib, weights_source, kv_bytes_per_token, kv_tokens,
    kv_cache_gib, overhead_gib, overhead_why, required_gib, usable_gib, gpu_memory_utilization,
    headroom_gib, explanation.

Ranking: candidates that can start and fit first; then those meeting every target, those whose
targets cannot be checked, those missing one; then figures at this load before extrapolated ones
before none; then the priority value. `recommended` is the top one when the evidence backs it (a
known priority figure, targets shown to be met, or being the only one that can start and fit);
otherwise None, and the summary says what to measure.

"least quality loss" ranks on measured quality, never on published figures (their text is not
stated): the KL divergence from one reference on one text in one window setting, or perplexity on
one text, whichever compares the most candidates (KL on a tie); it says which in each reason.
Quality is read only for the decision's model (any GPU); speed evidence as below.

Energy and cost (economics.py): energy per output token and cost per million output tokens at the
workload's users, read where a run measured them (the cost at the stated price from the measured
throughput and power: engine.cost.HourlyPrice.per_million_at), else estimated - the GPUs' maximum
board power (gpus.py, datasheets) at 40 % to 100 % over the predicted throughput, with its band -
and labelled so. No price, no cost: ranking on cost without one is an AdviceInputError.
price_comparison(yours, rented) -> PriceComparison(sides, cheaper, verdict, text): two answers ranked
on cost (your GPU at its price, rented_gpu(name, count) at its rate), each one's cheapest candidate,
and the cheaper named only when their bands do not overlap.

One card or two (cards.py, a host of several GPUs): runs measured here serving the same model on one
GPU and on several (Evidence.gpu_count, Evidence.split: "one GPU", "layer split", "row split",
"tensor parallel"), on this host (or a GPU of the same model), compared at the level nearest the
workload's users on its priority's figure; a model that fits only on several needs them. Without
such runs it says it has only the write-up's anecdote, with what the host's path between GPUs
(NVLink, one PCIe switch, host bridge, across sockets) makes of it, and what to measure.

Measured starts beat the facts table: a launch of the candidate, for this model, on this host or a
GPU of the same model or compute capability that did not start for a reason of the GPU (its
compute capability, or the quantization on it) refuses it with the log line and the run's link; one
that started where the facts table says it cannot is used and said as a measured contradiction.

Evidence is preferred in this order: measured on this host, on the same GPU model, on the same
compute capability, then published (same GPU model or compute capability only). Within the best
tier, one series (GPU, host, prompt/output shape: the closest to the workload's) is read at the
users level: exact, linear interpolation between the two nearest levels, or - beyond the measured
levels - the nearest level's figure flagged as an extrapolation (never used to pass a target).
Pass evidence newest first: the first row per level wins.
"""

from .engine import (AdviceInputError, CandidateResult, Note, Recommendation, SuggestedRun, TargetCheck, advise,
                     check_targets, validate_inputs)
from .economics import EconomyRead, PriceComparison, price_comparison, rented_gpu
from .backends import DEFAULT_CANDIDATES, all_facts
from .facts import (BUILTIN_MODELS, DEEPSEEK_R1_DISTILL_QWEN_7B, DEEPSEEK_R1_DISTILL_QWEN_14B,
                    DEEPSEEK_R1_DISTILL_QWEN_32B, DEEPSEEK_R1_DISTILL_LLAMA_8B, DEEPSEEK_R1_DISTILL_LLAMA_70B,
                    Candidate, Fact, fact, ineligible_reasons, required_facts, requirements, start_check)
from .memory import MemoryFit, kv_bytes_per_token, memory_fit, weight_bytes
from .performance import EvidenceRef, Performance, Predicted, predict, read_at
from .published import V100_LABEL, published_v100_evidence, published_v100_quality
from .quality import QualityBasis, QualityRead, read_quality
from .launches import LaunchRead, LaunchRef, StartupRead, read_launches
FACTS = all_facts()  # every fact the advisor holds: the shared ones, then each engine's (backends/)
from .specs import (PRIORITIES, PRIORITY, EngineBuilds, Evidence, GpuSpec, LaunchEvidence, ModelSpec, Priority,
                    QualityEvidence, Workload)

__all__ = [
    "advise", "check_targets", "Recommendation", "CandidateResult", "Note", "SuggestedRun",
    "TargetCheck", "DEFAULT_CANDIDATES", "FACTS", "Candidate", "Fact", "fact", "ineligible_reasons",
    "required_facts", "requirements", "MemoryFit", "kv_bytes_per_token", "memory_fit",
    "weight_bytes", "EvidenceRef", "Performance", "Predicted", "predict", "read_at", "V100_LABEL",
    "published_v100_evidence", "published_v100_quality", "QualityBasis", "QualityRead", "QualityEvidence",
    "read_quality", "PRIORITIES", "PRIORITY", "Priority", "EngineBuilds", "Evidence", "GpuSpec", "ModelSpec",
    "Workload", "DEEPSEEK_R1_DISTILL_QWEN_7B", "DEEPSEEK_R1_DISTILL_QWEN_14B", "DEEPSEEK_R1_DISTILL_QWEN_32B",
    "DEEPSEEK_R1_DISTILL_LLAMA_8B", "DEEPSEEK_R1_DISTILL_LLAMA_70B",
    "BUILTIN_MODELS", "AdviceInputError", "start_check", "validate_inputs", "LaunchEvidence", "LaunchRead",
    "LaunchRef", "StartupRead", "read_launches", "EconomyRead", "PriceComparison", "price_comparison", "rented_gpu",
]
