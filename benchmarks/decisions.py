"""Decisions: a stated workload -> the advisor's recommendation, saved behind a permalink.

Selectors read (evidence from finished runs, the GPU of a host, a saved decision, what to show);
services write (decision_create). The decision itself is made by the Django-free advisor
(benchmarks/advisor); this module only turns rows into its inputs and its answer into pages.

Inputs (the form's cleaned data and the JSON API's body, the same keys):
    host: Host id or None; else gpu_name, compute_capability ("7.0"), vram_gib, gpu_count,
    interconnect ("pcie" | "nvlink"); model: Model id or None (the built-in
    DeepSeek-R1-Distill-Qwen-7B spec); users, prompt_tokens, output_tokens, context_tokens (None =
    prompt + output); ttft_p90_ms, tpot_ms, min_user_tok_s (targets, None = none); priority.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import reduce
from operator import or_
from urllib.parse import urlencode

from django.conf import settings
from django.db.models import Prefetch, Q, QuerySet
from django.urls import reverse

from benchmarks.advisor import (DEEPSEEK_R1_DISTILL_QWEN_7B, DEFAULT_CANDIDATES, PRIORITIES, Evidence,
                                GpuSpec, ModelSpec, Workload, advise, published_v100_evidence)
from benchmarks.advisor.facts import WRITEUP
from benchmarks.advisor.performance import METRIC_LABELS, gpu_key
from benchmarks.models import Decision, Endpoint, Gpu, Host, LevelResult, Model, Run

# Candidate.quantization -> Variant.quantization: how a registered endpoint maps to a candidate.
VARIANT_QUANTIZATION = {"fp8": "fp8_e4m3", "q4_k_m": "gguf_q4_k_m", "awq": "awq"}
CANDIDATES = {c.key: c for c in DEFAULT_CANDIDATES}
CANDIDATE_FOR = {(c.backend, VARIANT_QUANTIZATION[c.quantization]): c for c in DEFAULT_CANDIDATES}
PRIORITY_LABELS = {
    "single_user_speed": "single-user speed (per-stream decode)",
    "throughput": "aggregate throughput",
    "memory_headroom": "memory headroom",
}
INTERCONNECTS = {"pcie": "PCIe only", "nvlink": "NVLink"}
CC_MIN, CC_MAX = (3, 0), (15, 9)
EVIDENCE_LIMIT = 2000  # newest measured levels read per decision
INPUT_KEYS = ("host", "gpu_name", "compute_capability", "vram_gib", "gpu_count", "interconnect", "model",
              "users", "prompt_tokens", "output_tokens", "context_tokens", "ttft_p90_ms", "tpot_ms",
              "min_user_tok_s", "priority")
_CC_RE = re.compile(r"(\d{1,2})(?:\.(\d))?")


class InputError(ValueError):
    """A stated input the advisor cannot use; `field` names the form field (None: the whole form)."""

    def __init__(self, field: str | None, message: str):
        super().__init__(message)
        self.field, self.message = field, message


def parse_cc(text) -> tuple[int, int] | None:
    """'7.0' -> (7, 0); '9' -> (9, 0); None when it is not a compute capability we know of."""
    m = _CC_RE.fullmatch(str(text or "").strip())
    if not m:
        return None
    cc = (int(m.group(1)), int(m.group(2) or 0))
    return cc if CC_MIN <= cc <= CC_MAX else None


# --- selectors: the GPU, the model, the evidence --------------------------------------------

def gpu_spec_from_host(host: Host) -> GpuSpec:
    """The host's GPU model (its first GPU) and how many of them it has. Raises InputError when
    the inventory lacks what the advisor needs."""
    gpus = list(host.gpus.all())
    if not gpus:
        raise InputError("host", f"{host} has no GPU in the inventory: probe it, or state the GPU instead.")
    first = gpus[0]
    cc = parse_cc(first.compute_capability)
    if cc is None:
        raise InputError("host", f"{host}'s {first.name} has no valid compute capability in the inventory "
                                 f"({first.compute_capability or 'blank'}): fix it, or state the GPU instead.")
    if not first.memory_total_mib:
        raise InputError("host", f"{host}'s {first.name} has no VRAM in the inventory: fix it, or state the "
                                 f"GPU instead.")
    same = [g for g in gpus if g.name == first.name and g.compute_capability == first.compute_capability]
    return GpuSpec(name=first.name, compute_capability=cc, vram_gib=first.memory_total_mib / 1024,
                   count=len(same), interconnect="nvlink" if host.interconnect == "nvlink" else "pcie",
                   host_id=str(host.pk))


def model_spec_from_model(model: Model) -> tuple[ModelSpec, dict[str, float]]:
    """The registered model's shape, and its variants' file sizes keyed by candidate quantization."""
    default = DEEPSEEK_R1_DISTILL_QWEN_7B
    is_default = model.name.strip().lower() == default.name.lower()
    context = model.context_length or (default.context_length if is_default else None)
    missing = [label for label, value in (("parameters", model.params_b), ("layers", model.layers),
                                          ("KV heads", model.kv_heads), ("head size", model.head_dim),
                                          ("context length", context)) if not value or value <= 0]
    if missing:
        raise InputError("model", f"{model} lacks {', '.join(missing)} in the inventory: fill them in, or "
                                  f"leave the model blank for the built-in {default.name} spec.")
    spec = ModelSpec(name=model.name, params_b=model.params_b, layers=model.layers, kv_heads=model.kv_heads,
                     head_dim=model.head_dim, context_length=context,
                     embedding_params_b=default.embedding_params_b if is_default else 0.0,
                     known_weight_bytes=dict(default.known_weight_bytes) if is_default else {})
    to_candidate = {v: k for k, v in VARIANT_QUANTIZATION.items()}
    sizes: dict[str, float] = {}
    for variant in model.variants.all():
        key = to_candidate.get(variant.quantization)
        if key and variant.size_bytes and variant.size_bytes > 0:
            sizes[key] = max(sizes.get(key, 0.0), float(variant.size_bytes))  # the largest: conservative
    return spec, sizes


@dataclass(frozen=True)
class Specs:
    gpu: GpuSpec
    model: ModelSpec
    workload: Workload
    variant_bytes: dict[str, float]
    host: str | None  # the registered host's name, when the GPU came from one
    model_source: str  # "registered" | "built-in"


def specs_from_inputs(inputs: dict) -> Specs:
    """Everything advise() needs, from validated inputs. Raises InputError for what only shows
    once the fields are put together (a host without GPUs, a context the model cannot hold)."""
    host = None
    if inputs.get("host") is not None:
        host = Host.objects.prefetch_related("gpus").filter(pk=inputs["host"]).first()
        if host is None:
            raise InputError("host", "No registered host has this id.")
        gpu = gpu_spec_from_host(host)
    else:
        for field, what in (("gpu_name", "the GPU model, e.g. Tesla V100-PCIE-16GB"),
                            ("compute_capability", "the compute capability, e.g. 7.0"),
                            ("vram_gib", "the VRAM per GPU in GiB, e.g. 16")):
            if inputs.get(field) in (None, ""):
                raise InputError(field, f"Pick a registered host, or state {what}.")
        cc = parse_cc(inputs["compute_capability"])
        if cc is None:
            raise InputError("compute_capability", "Give a compute capability such as 7.0 or 9.0 "
                                                   f"(from {CC_MIN[0]}.{CC_MIN[1]} to {CC_MAX[0]}.{CC_MAX[1]}).")
        gpu = GpuSpec(name=inputs["gpu_name"].strip(), compute_capability=cc, vram_gib=float(inputs["vram_gib"]),
                      count=inputs.get("gpu_count") or 1, interconnect=inputs.get("interconnect") or "pcie")

    if inputs.get("model") is not None:
        model_row = Model.objects.prefetch_related("variants").filter(pk=inputs["model"]).first()
        if model_row is None:
            raise InputError("model", "No registered model has this id.")
        model, variant_bytes = model_spec_from_model(model_row)
    else:
        model, variant_bytes = DEEPSEEK_R1_DISTILL_QWEN_7B, {}

    prompt, output = inputs["prompt_tokens"], inputs["output_tokens"]
    context = inputs.get("context_tokens") or prompt + output
    if context < prompt + output:
        raise InputError("context_tokens", f"The context must hold the prompt and the output: at least "
                                           f"{prompt + output} tokens.")
    if context > model.context_length:
        raise InputError("context_tokens", f"{model.name} handles at most {model.context_length} tokens "
                                           f"of context.")
    priority = inputs.get("priority") or "single_user_speed"
    if priority not in PRIORITIES:
        raise InputError("priority", f"Priority must be one of {', '.join(PRIORITIES)}.")
    workload = Workload(users=inputs["users"], prompt_tokens=prompt, output_tokens=output,
                        context_tokens=context, ttft_p90_ms=inputs.get("ttft_p90_ms"),
                        tpot_ms=inputs.get("tpot_ms"), min_user_tok_s=inputs.get("min_user_tok_s"),
                        priority=priority)
    return Specs(gpu, model, workload, variant_bytes, host.name if host else None,
                 "registered" if inputs.get("model") is not None else "built-in")


class EvidenceList(list):
    """A list[Evidence], plus how many measured levels were left out and why."""

    def __init__(self, rows=(), skipped: dict[str, int] | None = None):
        super().__init__(rows)
        self.skipped = dict(skipped or {})


def _measured_levels() -> QuerySet[LevelResult]:
    """Levels of finished runs in concurrency mode that completed at least one request."""
    return LevelResult.objects.filter(run__status__in=Run.FINISHED, run__load_mode="concurrency",
                                      rate__isnull=True, concurrency__gte=1, completed__gt=0)


def _candidate_q() -> Q:
    return reduce(or_, (Q(endpoint__backend=backend, endpoint__variant__quantization=quant)
                        for backend, quant in CANDIDATE_FOR))


def endpoint_gpu(endpoint: Endpoint) -> Gpu | None:
    """The GPU an endpoint serves from: its own first GPU, else its host's first GPU; None when
    that GPU has no name or valid compute capability. Expects gpus prefetched."""
    gpus = list(endpoint.gpus.all()) or list(endpoint.host.gpus.all())[:1]
    if gpus and gpus[0].name and parse_cc(gpus[0].compute_capability):
        return gpus[0]
    return None


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _stat(summary: dict, metric: str, stat: str) -> float | None:
    value = summary.get(metric) if isinstance(summary, dict) else None
    return _number(value.get(stat)) if isinstance(value, dict) else None


def _peak_memory_gib(level: LevelResult, endpoint: Endpoint) -> float | None:
    """Peak memory of the endpoint's own GPUs, when the telemetry can tell which ones they are."""
    rows = level.gpu_summary if isinstance(level.gpu_summary, list) else []
    indices = {g.index for g in endpoint.gpus.all()}
    if indices:
        rows = [r for r in rows if isinstance(r, dict) and r.get("index") in indices]
    elif len(rows) != 1:
        return None  # several GPUs sampled, none named as the endpoint's: we cannot tell
    peaks = [_number(r.get("peak_memory_used_mib")) for r in rows if isinstance(r, dict)]
    peaks = [p for p in peaks if p is not None]
    return max(peaks) / 1024 if peaks else None


def _evidence_row(level: LevelResult) -> Evidence | None:
    endpoint, run = level.endpoint, level.run
    gpu = endpoint_gpu(endpoint)
    if gpu is None:
        return None
    candidate = CANDIDATE_FOR[(endpoint.backend, endpoint.variant.quantization)]
    flags = [f.get("code") for f in level.flags or [] if isinstance(f, dict) and f.get("code")]
    label = f"{run} · {endpoint.name} · {level.concurrency} concurrent"
    if flags:
        label += f" (flags: {', '.join(flags)})"
    s = level.summary
    return Evidence(
        id=f"level-{level.pk}", candidate=candidate.key, kind="measured", label=label, gpu_name=gpu.name,
        compute_capability=parse_cc(gpu.compute_capability), concurrency=level.concurrency,
        prompt_tokens=run.prompt_tokens, output_tokens=run.output_tokens,
        url=f"{run.get_absolute_url()}#level-{level.public_id}", host_id=str(endpoint.host_id),
        ttft_p50_ms=_stat(s, "ttft_ms", "p50"), ttft_p90_ms=_stat(s, "ttft_ms", "p90"),
        tpot_p50_ms=_stat(s, "tpot_ms", "p50"), decode_tok_s=_stat(s, "decode_tok_s", "p50"),
        aggregate_tok_s=_number(s.get("aggregate_tok_s")) if isinstance(s, dict) else None,
        peak_memory_gib=_peak_memory_gib(level, endpoint), note=f"{len(flags)} validity flags" if flags else "")


def evidence_from_db(*, limit: int = EVIDENCE_LIMIT, published: bool = True) -> EvidenceList:
    """Measured evidence (newest first), then the published V100 figures. A handful of queries
    whatever the number of levels."""
    levels = _measured_levels()
    candidate_q = _candidate_q()
    rows = list(levels.filter(candidate_q)
                .select_related("run", "endpoint__variant", "endpoint__host")
                .prefetch_related(Prefetch("endpoint__gpus", queryset=Gpu.objects.order_by("index")),
                                  Prefetch("endpoint__host__gpus", queryset=Gpu.objects.order_by("index")))
                .defer("gpu_series", "server_series", "client", "server_summary",
                       "run__preflight", "run__server_config", "run__flags", "run__error")
                .order_by("-run__created", "-run_id", "-pk")[:limit + 1])
    skipped = {}
    if len(rows) > limit:
        skipped["older than the newest levels read"] = levels.filter(candidate_q).count() - limit
        rows = rows[:limit]
    other = levels.exclude(candidate_q).count()
    if other:
        skipped["not one of the candidates (backend and variant)"] = other
    evidence = []
    for level in rows:
        ev = _evidence_row(level)
        if ev is None:
            skipped["GPU or its compute capability unknown"] = \
                skipped.get("GPU or its compute capability unknown", 0) + 1
        else:
            evidence.append(ev)
    if published:
        evidence += published_v100_evidence()
    return EvidenceList(evidence, skipped)


# --- services ---------------------------------------------------------------------------------

def decision_compute(*, inputs: dict) -> dict:
    """The advisor's answer for these inputs, as JSON; nothing saved."""
    specs = specs_from_inputs(inputs)
    evidence = evidence_from_db()
    rec = advise(specs.gpu, specs.model, specs.workload, evidence, variant_bytes=specs.variant_bytes or None)
    result = rec.to_dict()
    result["host"] = specs.host
    result["model_source"] = specs.model_source
    result["evidence_skipped"] = evidence.skipped
    return result


def decision_create(*, owner, inputs: dict) -> Decision:
    result = decision_compute(inputs=inputs)
    return Decision.objects.create(owner=owner, inputs=inputs, result=result,
                                   recommended=result["recommended"] or "")


# --- selectors for the pages ----------------------------------------------------------------

_PUBLIC_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")


def decision_by_public_id(public_id: str) -> Decision:
    if not _PUBLIC_ID_RE.fullmatch(public_id or ""):
        raise Decision.DoesNotExist  # not a link we could have made: no query
    return Decision.objects.select_related("owner").get(public_id=public_id)


def decision_inputs(public_id: str | None) -> dict | None:
    """A saved decision's inputs, to start a new one from; None when there is no such decision."""
    try:
        return decision_by_public_id(public_id).inputs if public_id else None
    except Decision.DoesNotExist:
        return None


def decisions_recent(*, owner, limit: int = 10) -> QuerySet[Decision]:
    return Decision.objects.filter(owner=owner).only("public_id", "recommended", "created", "result")[:limit]


def _source_of(ref: dict) -> str:
    return WRITEUP if ref.get("kind") == "published" else ""


def decision_display(result: dict) -> dict:
    """The saved result shaped for the page: each predicted metric beside the evidence rows it
    was read from, the targets as a list, the flags of each candidate's evidence."""
    candidates = []
    for c in result["ranked"]:
        refs = {e["id"]: {**e, "source": _source_of(e)} for e in c["evidence"]}
        predicted = [{"metric": m, "label": METRIC_LABELS.get(m, m) + (" (GiB)" if m == "peak_memory_gib" else ""),
                      "value": p["value"], "how": p["how"], "note": p["note"], "evidence": [refs[i] for i in p["evidence_ids"] if i in refs]}
                     for m, p in c["predicted"].items()]
        candidates.append({
            **c, "predicted_rows": predicted, "evidence_rows": list(refs.values()),
            "targets": list(c["meets_targets"].values()),
            "is_recommended": c["key"] == result["recommended"],
            "flags": sorted({f for e in c["evidence"] for f in e["flags"]}),
        })
    workload = result["workload"]
    gpu = result["gpu"]
    skipped = result.get("evidence_skipped") or {}
    return {
        "candidates": candidates,
        "recommended": next((c for c in candidates if c["is_recommended"]), None),
        "gpu": {**gpu, "cc": ".".join(str(x) for x in gpu["compute_capability"]),
                "interconnect_label": INTERCONNECTS.get(gpu["interconnect"], gpu["interconnect"])},
        "workload": {**workload, "context": workload["context_tokens"] or
                     workload["prompt_tokens"] + workload["output_tokens"],
                     "priority_label": PRIORITY_LABELS.get(workload["priority"], workload["priority"])},
        "skipped": [f"{n} measured level{'s' if n != 1 else ''} not used: {why}." for why, n in skipped.items()],
    }


def _endpoints_for(candidate_key: str, host_id: str | None, gpu: dict) -> list[Endpoint]:
    """Enabled endpoints that serve this candidate: on the host, or (a stated GPU) on any GPU of
    the same model or compute capability."""
    c = CANDIDATES[candidate_key]
    qs = Endpoint.objects.filter(enabled=True, backend=c.backend,
                                 variant__quantization=VARIANT_QUANTIZATION[c.quantization])
    if host_id is not None:
        return list(qs.filter(host_id=int(host_id)).select_related("host"))
    cc = tuple(gpu["compute_capability"])
    matches = []
    for e in qs.select_related("host").prefetch_related("gpus", "host__gpus"):
        g = endpoint_gpu(e)
        if g and (gpu_key(g.name) == gpu_key(gpu["name"]) or parse_cc(g.compute_capability) == cc):
            matches.append(e)
    return matches


def measure_next_links(result: dict) -> list[dict]:
    """Each suggested run with the registered endpoints that can measure it and a link that
    pre-fills the run form; `url` is None when no endpoint serves that candidate there."""
    out = []
    for s in result.get("measure_next", []):
        label = CANDIDATES[s["candidate"]].label
        levels = [n for n in s["concurrency_levels"] if n <= settings.MAX_CONCURRENCY]
        endpoints = _endpoints_for(s["candidate"], s["host_id"], result["gpu"])
        title = f"Measure {label} at {s['prompt_tokens']}/{s['output_tokens']} tokens: {s['why']}"[:200]
        url = None
        if endpoints and levels:
            url = reverse("run-new") + "?" + urlencode(
                [("endpoints", e.name) for e in endpoints]  # names: the page is public, ids are not
                + [("concurrency_levels", ",".join(map(str, levels))), ("prompt_tokens", s["prompt_tokens"]),
                   ("output_tokens", s["output_tokens"]), ("title", title)])
        out.append({**s, "label": label, "levels": levels, "endpoints": endpoints, "url": url,
                    "capped": len(levels) < len(s["concurrency_levels"]), "backend": CANDIDATES[s["candidate"]].backend,
                    "quantization": VARIANT_QUANTIZATION[CANDIDATES[s["candidate"]].quantization]})
    return out
