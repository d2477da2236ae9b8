"""Decision selectors: the GPU of a registered host, a registered model's shape, the evidence
measured here (each level read as a comparison/advisor point), saved decisions."""
from __future__ import annotations

import json
import re
from functools import reduce
from operator import or_

from django.db.models import Prefetch, Q, QuerySet
from django.http import Http404

from django.utils.text import slugify

from benchmarks.advisor import (BUILTIN_MODELS, DEEPSEEK_R1_DISTILL_QWEN_7B, DEFAULT_CANDIDATES, EngineBuilds,
                                Evidence, GpuSpec, LaunchEvidence, ModelSpec, QualityEvidence, published_v100_evidence,
                                published_v100_quality)
from benchmarks.advisor.backends import ENGINES, candidate_for, engine_of, variant_quantization
from benchmarks.advisor.performance import gpu_key, model_key
from benchmarks.engine import backends, load_modes, multi_gpu
from benchmarks.engine.load_modes.concurrency import ConcurrencySweep
from benchmarks.engine.catalogue import ADVISOR_FIGURES
from benchmarks.engine.points import QualityPoint
from benchmarks.models import (Decision, Endpoint, Gpu, Host, LevelResult, Model, QualityMeasurement, Run,
                               ServerLaunch, ServerRecipe)
from benchmarks.selectors import address_hider, decision_by_public_id, endpoint_label, level_point

CANDIDATES = {c.key: c for c in DEFAULT_CANDIDATES}
# How a registered endpoint or report maps to a candidate, over every engine the advisor holds.
VARIANT_QUANTIZATION = variant_quantization()
CANDIDATE_FOR = candidate_for()
CC_MIN, CC_MAX = (3, 0), (15, 9)  # the compute capabilities a GPU can state
CC_RANGE = f"from {CC_MIN[0]}.{CC_MIN[1]} to {CC_MAX[0]}.{CC_MAX[1]}"
EVIDENCE_LIMIT = 2000  # newest measured levels read per decision
QUALITY_LIMIT = 500  # newest quality measurements read per decision
LAUNCH_LIMIT = 500  # newest lab launches read per decision
SEARCH_LIMIT = 200  # newest SLO-search runs read per decision
LOG_EXCERPT_LINES = 8  # of a launch that did not start, the last lines of its log shown with the decision
_CC_RE = re.compile(r"(\d{1,2})(?:\.(\d))?")


class InputError(ValueError):
    """What the inventory lacks for the advisor; `field` names the form field it came from."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


def parse_cc(text) -> tuple[int, int] | None:
    """'7.0' -> (7, 0); '9' -> (9, 0); None when it is not a compute capability we know of."""
    m = _CC_RE.fullmatch(str(text or "").strip())
    if not m:
        return None
    cc = (int(m.group(1)), int(m.group(2) or 0))
    return cc if CC_MIN <= cc <= CC_MAX else None


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
    farthest = host.topology_figures.slowest([g.index for g in same])
    return GpuSpec(name=first.name, compute_capability=cc, vram_gib=first.memory_total_mib / 1024,
                   count=len(same), interconnect="nvlink" if host.interconnect == "nvlink" else "pcie",
                   host_id=str(host.pk), topology=farthest.kind if farthest else "")


def model_spec_from_model(model: Model) -> tuple[ModelSpec, dict[str, float]]:
    """The registered model's shape, and its variants' file sizes keyed by candidate quantization."""
    default = DEEPSEEK_R1_DISTILL_QWEN_7B
    # The inventory's shape first; a registered model of a built-in architecture gets what the
    # inventory leaves blank (embedding size, attention heads, intermediate size) from the built-in spec.
    builtin = next((m for m in BUILTIN_MODELS.values() if model_key(m.name) == model_key(model.name)), None)
    context = model.context_length or (builtin.context_length if builtin else None)
    missing = [label for label, value in (("parameters", model.params_b), ("layers", model.layers),
                                          ("KV heads", model.kv_heads), ("head size", model.head_dim),
                                          ("context length", context)) if not value or value <= 0]
    if missing:
        raise InputError("model", f"{model} lacks {', '.join(missing)} in the inventory: fill them in, or "
                                  f"leave the model blank for the built-in {default.name} spec.")
    spec = ModelSpec(name=model.name, params_b=model.params_b, layers=model.layers, kv_heads=model.kv_heads,
                     head_dim=model.head_dim, context_length=context,
                     embedding_params_b=model.embedding_params_b or (builtin.embedding_params_b if builtin else 0.0),
                     known_weight_bytes=dict(builtin.known_weight_bytes) if builtin else {},
                     attention_heads=model.attention_heads or (builtin.attention_heads if builtin else 0),
                     intermediate_size=model.intermediate_size or (builtin.intermediate_size if builtin else 0))
    to_candidate = {v: k for k, v in VARIANT_QUANTIZATION.items()}
    sizes: dict[str, float] = {}
    for variant in model.variants.all():
        key = to_candidate.get(variant.quantization)
        if key and variant.size_bytes and variant.size_bytes > 0:
            sizes[key] = max(sizes.get(key, 0.0), float(variant.size_bytes))  # the largest: conservative
    return spec, sizes


# --- the evidence ---------------------------------------------------------------------------

class EvidenceList(list):
    """A list[Evidence], plus how many measured levels were left out and why."""

    def __init__(self, rows=(), skipped: dict[str, int] | None = None):
        super().__init__(rows)
        self.skipped = dict(skipped or {})


def _measured_levels() -> QuerySet[LevelResult]:
    """Levels of finished runs in concurrency mode that completed at least one request."""
    return LevelResult.objects.filter(run__status__in=Run.FINISHED, run__load_mode=ConcurrencySweep.name,
                                      rate__isnull=True, concurrency__gte=1, completed__gt=0)


def _candidate_q() -> Q:
    return reduce(or_, (Q(endpoint__backend=backend, endpoint__variant__quantization=quant)
                        for backend, quant in CANDIDATE_FOR))


def endpoint_gpu(endpoint: Endpoint) -> Gpu | None:
    """The GPU an endpoint serves from: its own first GPU, else its host's first GPU; None when
    that GPU has no name or valid compute capability. Expects gpus prefetched."""
    gpus = endpoint.serving_gpus()
    if gpus and gpus[0].name and parse_cc(gpus[0].compute_capability):
        return gpus[0]
    return None


def _evidence_row(level: LevelResult) -> Evidence | None:
    endpoint, run = level.endpoint, level.run
    gpu = endpoint_gpu(endpoint)
    if gpu is None:
        return None
    candidate = CANDIDATE_FOR[(endpoint.backend, endpoint.variant.quantization)]
    point = level_point(level)  # the one reader of a level's stored summaries
    variant = endpoint.variant
    label = f"{run} · {endpoint.name} · {level.concurrency} concurrent"
    if point.flags:
        label += f" (flags: {', '.join(point.flags)})"
    return Evidence(
        id=f"level-{level.pk}", candidate=candidate.key, kind="measured", label=label, gpu_name=gpu.name,
        compute_capability=parse_cc(gpu.compute_capability), concurrency=level.concurrency,
        prompt_tokens=run.prompt_tokens, output_tokens=run.output_tokens,
        url=f"{run.get_absolute_url()}#level-{level.public_id}", host_id=str(endpoint.host_id),
        note=f"{len(point.flags)} validity flags" if point.flags else "",
        model=variant.model.name, weight_bytes=float(variant.size_bytes) if variant.size_bytes else None,
        engine_version=run.server_identity(endpoint.id).version or endpoint.engine_version,
        build_flags=endpoint.launch_command_shown or (json.dumps(endpoint.launch_flags, sort_keys=True)
                                               if endpoint.launch_flags else ""),
        **_endpoint_spread(endpoint), **{f.name: point.get(f) for f in ADVISOR_FIGURES})


def _endpoint_spread(endpoint: Endpoint) -> dict:
    """How many GPUs served the endpoint and how the model was spread over them: a server the lab
    started reads its flags (engine.multi_gpu) and the GPUs it was given; a registered endpoint
    its GPUs and tensor-parallel size. Expects gpus prefetched and the recipe selected."""
    given = len(endpoint.gpus.all())
    if endpoint.recipe_id is not None:
        try:
            s = multi_gpu.spread(endpoint.backend, endpoint.launch_flags, endpoint.recipe.args, given or None)
            return {"gpu_count": s.gpus_used, "split": s.how}
        except ValueError:
            pass
    count = max(given, endpoint.tensor_parallel_size or 1, 1)
    split = "one GPU" if count == 1 else "tensor parallel" if (endpoint.tensor_parallel_size or 1) > 1 else ""
    return {"gpu_count": count, "split": split}


def slo_capacity_from_db(*, limit: int = SEARCH_LIMIT) -> list[dict]:
    """Every finished SLO search measured here (run load modes "slo" and "slo_rate"), per
    endpoint: the most concurrent users it served (or the highest rate it sustained) within its
    targets, the targets, and what it ran on (GPU, the candidate its backend and variant are, the
    lengths). A rate's row adds the requests it had in flight on average at that rate (Little's
    law on its measured figures: request throughput × mean E2E, the mean across trials)."""
    runs = list(Run.objects.filter(status__in=Run.FINISHED, load_mode__in=load_modes.search_names()).exclude(slo_search={})
                .order_by("-created")[:limit])
    ids = {int(k) for run in runs for k in run.slo_search if str(k).isdigit()}
    endpoints = {e.id: e for e in Endpoint.objects.filter(id__in=ids).select_related("variant", "host")
                 .prefetch_related("gpus", "host__gpus")}
    rows = []
    for run in runs:
        for key, search in run.searches().items():
            e = endpoints.get(int(key)) if key.isdigit() else None
            if e is None or search.status == "unfinished":
                continue
            gpu = endpoint_gpu(e)
            candidate = CANDIDATE_FOR.get((e.backend, e.variant.quantization)) if e.variant else None
            by_rate = search.by == "rate"
            rows.append({"endpoint": e.name, "run": str(run), "url": run.get_absolute_url(),
                         "users": None if by_rate else search.best, "by": search.by,
                         "rate": search.best if by_rate else None,
                         "in_flight": _in_flight(run, e, search.best) if by_rate and search.best else None,
                         "status": search.status, "target": search.target.to_dict(), "words": search.words,
                         "gpu_name": gpu.name if gpu else None, "candidate": candidate.key if candidate else None,
                         "prompt_tokens": run.prompt_tokens, "output_tokens": run.output_tokens,
                         "trials": run.trials})
    return rows


def _in_flight(run: Run, endpoint: Endpoint, rate: float) -> float | None:
    """Requests in flight on average at `rate` in the run (Little's law: request throughput ×
    mean E2E of each trial's level, then their mean); None without both figures."""
    values = []
    for level in run.levels.filter(endpoint=endpoint, rate=rate).only("summary"):
        stats = level.stats
        throughput, e2e = stats.stat("request_throughput"), stats.stat("e2e_ms", "mean")
        if throughput is not None and e2e is not None:
            values.append(throughput * e2e / 1000)
    return sum(values) / len(values) if values else None


# What a server's own log says it is, for a launch whose server never answered /version or /props.
_LOGGED_VERSION = re.compile(r"vLLM API server version (\S+)|\bvLLM version:? (\S+)|\bbuild: (\d+ \(\w+\))")


def _logged_version(log: str) -> str:
    m = _LOGGED_VERSION.search(log or "")
    return next((g for g in m.groups() if g), "")[:100] if m else ""


def _launch_gpu_count(launch: ServerLaunch) -> int:
    """How many GPUs the server was started on (engine.multi_gpu): its flags over the GPUs it was
    given; one when its flags cannot be read."""
    given = launch.recipe.gpu_indices(launch.setting)
    try:
        return multi_gpu.spread(launch.recipe.backend, launch.setting, launch.recipe.args,
                                len(given) if given is not None else None).gpus_used
    except ValueError:
        return 1


def _flag_value(launch: ServerLaunch, flags: tuple[str, ...]):
    """The value of one of these flags as the server was started: its setting, else its recipe's
    arguments; None when neither sets it."""
    return multi_gpu.flag_value(launch.setting, launch.recipe.args, flags)


def _kv_context_tokens(launch: ServerLaunch) -> int | None:
    """The tokens of 16-bit KV cache the server allocated at load, as its engine reads its flags
    (llama.cpp's -c); None where they do not say."""
    return engine_of(launch.recipe.backend).kv_context_tokens(lambda flags: _flag_value(launch, flags))


def _exit_text(report) -> str:
    if report.exit_signal:
        return f"ended by {report.exit_signal}"
    if report.exit_code is not None:
        return f"exit code {report.exit_code}"
    return report.failure or "it never answered /health"


def launch_evidence_from_db(*, limit: int = LAUNCH_LIMIT) -> list[LaunchEvidence]:
    """The lab's launches in finished runs, newest first: each server a recipe started (its
    start-up and memory after load) or that did not start (its cause, log line and the last lines
    of its log, addresses blanked), keyed to the recipe's variant (model and candidate), its host's
    GPU and the engine version the server said (else its log said). Refused launches never ran
    and say nothing about a GPU. Two queries, and one per run for its addresses."""
    rows = (ServerLaunch.objects.filter(run__status__in=Run.FINISHED, recipe__variant__isnull=False,
                                        status__in=(ServerLaunch.STOPPED, ServerLaunch.DID_NOT_START))
            .select_related("run", "recipe__variant__model", "recipe__host", "endpoint")
            .prefetch_related(Prefetch("recipe__host__gpus", queryset=Gpu.objects.order_by("index")))
            .defer("run__preflight", "run__flags", "run__error")
            .order_by("-run__created", "-run_id", "-pk")[:limit])
    hiders, evidence = {}, []
    for launch in rows:
        recipe, run = launch.recipe, launch.run
        candidate = CANDIDATE_FOR.get((recipe.backend, recipe.variant.quantization))
        gpus = list(recipe.host.gpus.all())[:1]
        if candidate is None or not gpus or not gpus[0].name or not parse_cc(gpus[0].compute_capability):
            continue
        if run.id not in hiders:
            hiders[run.id] = address_hider(run.endpoints.all())
        blank, report = hiders[run.id], launch.figures
        started = launch.status == ServerLaunch.STOPPED and report.health_s is not None
        said = run.server_identity(launch.endpoint_id).version if launch.endpoint_id else ""
        tail = [line for line in report.log_tail.splitlines() if line.strip()]
        evidence.append(LaunchEvidence(
            id=f"launch-{launch.public_id}", candidate=candidate.key, label=f"{run} · {launch}",
            gpu_name=gpus[0].name, compute_capability=parse_cc(gpus[0].compute_capability), started=started,
            model=recipe.variant.model.name, url=f"{run.get_absolute_url()}#launch-{launch.public_id}",
            host_id=str(recipe.host_id), engine_version=said or _logged_version(report.log_tail),
            flags=launch.label, gpu_count=_launch_gpu_count(launch), cause_code=report.cause.code,
            cause=report.cause.label, cause_line=blank(report.cause.line),
            log_excerpt="" if started else blank("\n".join(tail[-LOG_EXCERPT_LINES:])),
            exit="" if started else _exit_text(report), health_s=report.health_s,
            first_token_s=report.first_token_s, memory_loaded_mib=report.memory_loaded.server_mib,
            memory_source=report.memory_loaded.source, memory_note=report.memory_loaded.note,
            kv_context_tokens=_kv_context_tokens(launch)))
    return evidence


def evidence_from_db(*, limit: int = EVIDENCE_LIMIT, published: bool = True) -> EvidenceList:
    """Measured evidence (newest first), then the published V100 figures. A handful of queries
    whatever the number of levels."""
    levels = _measured_levels()
    candidate_q = _candidate_q()
    rows = list(levels.filter(candidate_q)
                .select_related("run", "endpoint__variant__model", "endpoint__host", "endpoint__recipe")
                .prefetch_related(Prefetch("endpoint__gpus", queryset=Gpu.objects.order_by("index")),
                                  Prefetch("endpoint__host__gpus", queryset=Gpu.objects.order_by("index")))
                .defer("gpu_series", "server_series", "client", "server_summary",
                       "run__preflight", "run__flags", "run__error")
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


def quality_evidence_from_db(*, limit: int = QUALITY_LIMIT, published: bool = True) -> list[QualityEvidence]:
    """The candidates' quality measured here (newest first: each endpoint's quality step in a
    finished run, keyed to its variant's model and candidate), then the write-up's published
    perplexities. Two queries whatever the number of rows."""
    rows = (QualityMeasurement.objects.filter(_candidate_q(), run__status__in=Run.FINISHED, error="")
            .exclude(result={})
            .select_related("run__quality_reference__variant", "endpoint__variant__model")
            .defer("run__preflight", "run__server_config", "run__flags", "run__error")
            .order_by("-run__created", "-run_id", "-pk")[:limit])
    evidence = []
    for row in rows:
        e, run, result = row.endpoint, row.run, row.figures
        reference = run.quality_reference
        label = f"{run.name_beside_endpoint} · {e.name}"
        point = QualityPoint.measured(result, label=label, model=e.variant.model.name,
                                      reference=endpoint_label(reference) if reference else None)
        evidence.append(QualityEvidence(
            id=f"quality-{row.public_id}", candidate=CANDIDATE_FOR[(e.backend, e.variant.quantization)].key,
            model=e.variant.model.name, label=label, point=point,
            url=f"{run.get_absolute_url()}#quality-{slugify(e.name)}"))
    if published:
        evidence += published_v100_quality()
    return evidence


# --- saved decisions ------------------------------------------------------------------------

def decision_inputs(public_id: str | None) -> dict | None:
    """A saved decision's inputs, to start a new one from; None when there is no such decision."""
    try:
        return decision_by_public_id(public_id).inputs if public_id else None
    except Http404:
        return None


def host_by_id(host_id: str | None) -> Host | None:
    """A registered host by its id as a link gives it (?host=3); None for anything else."""
    if not host_id or not re.fullmatch(r"[0-9]{1,9}", str(host_id)):
        return None
    return Host.objects.filter(pk=int(host_id)).first()


def decisions_recent(*, owner, limit: int = 10) -> QuerySet[Decision]:
    return Decision.objects.filter(owner=owner).only("public_id", "recommended", "created", "result")[:limit]


def _serving(qs: QuerySet, host_id: str | None, gpu_name: str, cc: tuple, gpu_of, prefetch: tuple) -> list:
    """Of qs (endpoints or recipes), those on the host, or (a stated GPU) those whose GPU (gpu_of)
    is of the same model or compute capability."""
    if host_id is not None:
        return list(qs.filter(host_id=int(host_id)).select_related("host"))
    matches = []
    for item in qs.select_related("host").prefetch_related(*prefetch):
        g = gpu_of(item)
        if g and (gpu_key(g.name) == gpu_key(gpu_name) or parse_cc(g.compute_capability) == tuple(cc)):
            matches.append(item)
    return matches


def _host_gpu(recipe: ServerRecipe) -> Gpu | None:
    gpus = list(recipe.host.gpus.all())[:1]
    return gpus[0] if gpus and gpus[0].name and parse_cc(gpus[0].compute_capability) else None


def endpoints_for(candidate_key: str, host_id: str | None, gpu_name: str, cc: tuple) -> list[Endpoint]:
    """Enabled endpoints that serve this candidate: on the host, or (a stated GPU) on any GPU of
    the same model or compute capability."""
    c = CANDIDATES[candidate_key]
    if c.quantization not in VARIANT_QUANTIZATION:
        return []
    qs = Endpoint.objects.filter(enabled=True, backend=c.backend,
                                 variant__quantization=VARIANT_QUANTIZATION[c.quantization])
    return _serving(qs, host_id, gpu_name, cc, endpoint_gpu, ("gpus", "host__gpus"))


def recipes_for(candidate_key: str, host_id: str | None, gpu_name: str, cc: tuple) -> list[ServerRecipe]:
    """Enabled server recipes that start this candidate: on the host, or (a stated GPU) on a host
    whose first GPU is of the same model or compute capability. The worker decides at start
    whether its host allows them; the decision page only offers them."""
    c = CANDIDATES[candidate_key]
    if c.quantization not in VARIANT_QUANTIZATION:
        return []
    qs = ServerRecipe.objects.filter(enabled=True, backend=c.backend,
                                     variant__quantization=VARIANT_QUANTIZATION[c.quantization])
    return _serving(qs, host_id, gpu_name, cc, _host_gpu, ("host__gpus",))


def engine_builds_for(host_id: str | None, gpu_name: str, cc: tuple) -> EngineBuilds:
    """The engine versions the registered endpoints serving from this host (or, for a stated GPU,
    from a GPU like it) said they were in their newest run, else their registered engine_version.
    The lowest vLLM version wins: the answer must hold for every server the team runs."""
    qs = Endpoint.objects.filter(enabled=True, backend__in=list(ENGINES)).select_related("host")
    qs = qs.filter(host_id=int(host_id)) if host_id is not None else qs.prefetch_related("gpus", "host__gpus")
    builds, sources = {}, []  # an EngineBuilds field -> (its engine, the versions read)
    for e in qs:
        if host_id is None:
            g = endpoint_gpu(e)
            if not g or not (gpu_key(g.name) == gpu_key(gpu_name) or parse_cc(g.compute_capability) == tuple(cc)):
                continue
        run = (Run.objects.filter(endpoints=e, server_config__has_key=str(e.id)).order_by("-created")
               .only("server_config").first())
        stored = run.server_identity(e.id) if run else None
        said = stored.version if stored else ""
        version = said or e.engine_version
        read = engine_of(e.backend).read_build(version) if version else None
        if read is None:
            continue
        where = f"{e.name} ({stored.backend.version_source} in its newest run)" if said else f"{e.name} (as registered)"
        builds.setdefault(read[0], (engine_of(e.backend), []))[1].append(read[1])
        sources.append(f"{backends.label(e.backend)} {version} from {where}")
    return EngineBuilds(**{name: engine.combine_builds(values) for name, (engine, values) in builds.items()},
                        source="; ".join(sources))
