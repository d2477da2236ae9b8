"""Writing the ledger: a prediction for each answer, and the pairs a finished run or an imported
report makes with the predictions made before it that it measures."""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import receiver
from django.utils import timezone

from benchmarks.advisor.correction import CORRECTED
from benchmarks.advisor.engine import RESULT_VERSION
from benchmarks.advisor.fit import FITTED
from benchmarks.advisor.performance import gpu_key, model_key
from benchmarks.decisions.selectors import CANDIDATE_FOR, CANDIDATES, VARIANT_QUANTIZATION, _evidence_row
from benchmarks.engine.load_modes.concurrency import ConcurrencySweep
from benchmarks.models import Decision, ImportedReport, Prediction, PredictionPair, Run
from benchmarks.services import run_finished_signal

log = logging.getLogger(__name__)

LENGTH_TOLERANCE = 0.20  # a run's prompt and output lengths within ±20 % of the prediction's match it


def advisor_version() -> str:
    """The result's shape and the fit it estimated with: two predictions of one version were made
    by the same model with the same parameters."""
    return f"advisor result {RESULT_VERSION}, fit {hashlib.sha256(FITTED.read_bytes()).hexdigest()[:12]}"


def prediction_record(*, result: dict, owner=None, decision: Decision | None = None) -> Prediction:
    """Store an answer (Recommendation.to_dict plus the decision's extras) as a prediction."""
    gpu, model, workload = result["gpu"], result["model"], result["workload"]
    estimates = []
    for c in result["ranked"]:
        record = c.get("model_estimate") or {}
        if not record.get("metrics"):
            continue
        candidate = CANDIDATES.get(c["key"])
        estimates.append({"candidate": c["key"], "label": c["label"],
                          "backend": candidate.backend if candidate else "",
                          "quantization": VARIANT_QUANTIZATION.get(candidate.quantization, "") if candidate else "",
                          "gpus": record.get("gpus"), "correction": record.get("correction", ""),
                          "metrics": record["metrics"]})
    host_id = gpu.get("host_id")
    return Prediction.objects.create(
        owner=owner if owner is not None and owner.is_authenticated else None, decision=decision,
        host_id=int(host_id) if host_id else None, gpu_name=gpu["name"], gpu_count=gpu["count"],
        model_name=model["name"], users=workload["users"], prompt_tokens=workload["prompt_tokens"],
        output_tokens=workload["output_tokens"],
        inputs={"gpu": gpu, "model": model["name"], "workload": workload, "builds": result.get("builds")},
        advisor_version=advisor_version(), estimates=estimates)


# --- pairing -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Measured:
    """One measured level as the ledger matches it."""

    source: str
    label: str
    candidate: str
    backend: str
    gpu_name: str
    gpu_count: int | None
    model: str
    users: float
    prompt_tokens: float
    output_tokens: float
    figures: dict  # figure -> value
    host_id: int | None = None


def _near(measured: float | None, predicted: int) -> bool:
    return measured is not None and abs(measured - predicted) <= LENGTH_TOLERANCE * predicted


def _matches(p: Prediction, m: Measured) -> dict | None:
    """The prediction's estimate this level measures: same GPU model, model, candidate (engine and
    variant), user count, and lengths within ±20 %; a layout of as many GPUs where both say."""
    if (p.users != m.users or gpu_key(p.gpu_name) != gpu_key(m.gpu_name) or model_key(p.model_name) != model_key(m.model)
            or not _near(m.prompt_tokens, p.prompt_tokens) or not _near(m.output_tokens, p.output_tokens)):
        return None
    for e in p.estimates:
        if e["candidate"] == m.candidate and (not e.get("gpus") or not m.gpu_count or e["gpus"] == m.gpu_count):
            return e
    return None


def _pairs_for(m: Measured, before, **where) -> list[PredictionPair]:
    pairs = []
    for p in Prediction.objects.filter(created__lt=before, users=m.users).only(
            "id", "gpu_name", "model_name", "users", "prompt_tokens", "output_tokens", "estimates"):
        e = _matches(p, m)
        if e is None:
            continue
        for metric in CORRECTED:
            said, value = e["metrics"].get(metric), m.figures.get(metric)
            if said is None or said.get("value") is None or value is None or value <= 0 or said["value"] <= 0:
                continue
            band = said.get("band") or (None, None)
            pairs.append(PredictionPair(
                prediction=p, source=m.source, level_label=m.label[:200], host_id=m.host_id,
                gpu_name=m.gpu_name[:200], candidate=m.candidate, backend=m.backend, metric=metric,
                estimated=said["value"], raw=said.get("raw") or said["value"], band_low=band[0], band_high=band[1],
                measured=value, **where))
    return pairs


def pair_run(run: Run) -> int:
    """Pair a finished run's levels with the predictions made before it finished; the number of
    pairs stored. A run of another load mode, or one that measured nothing, pairs with none."""
    if run.status not in (Run.SUCCEEDED, Run.PARTIAL) or run.load_mode != ConcurrencySweep.name:
        return 0
    levels = (run.levels.filter(rate__isnull=True, completed__gt=0, endpoint__variant__isnull=False)
              .select_related("run", "endpoint__variant__model", "endpoint__host", "endpoint__recipe")
              .prefetch_related("endpoint__gpus", "endpoint__host__gpus"))
    pairs = []
    for level in levels:
        if (level.endpoint.backend, level.endpoint.variant.quantization) not in CANDIDATE_FOR:
            continue
        ev = _evidence_row(level)
        if ev is None:
            continue
        m = Measured(source=f"level-{level.pk}", label=f"{level.endpoint.name} · {level.load_label}",
                     candidate=ev.candidate, backend=level.endpoint.backend, gpu_name=ev.gpu_name,
                     gpu_count=ev.gpu_count, model=ev.model, users=level.concurrency,
                     prompt_tokens=run.prompt_tokens, output_tokens=run.output_tokens,
                     figures={metric: getattr(ev, metric, None) for metric in CORRECTED},
                     host_id=level.endpoint.host_id)
        pairs += _pairs_for(m, run.finished or timezone.now(), run=run, level=level)
    return _store(pairs)


def pair_report(report: ImportedReport) -> int:
    """Pair an imported report's levels (a concurrency each) with the predictions made before it
    was imported; the number of pairs stored. A report that names no GPU, model, engine or
    variant the candidates know pairs with none."""
    data = report.data
    candidate = CANDIDATE_FOR.get((report.backend or data.backend or "", report.quantization or ""))
    gpu, model = report.gpu or data.gpu, data.model
    if candidate is None or not gpu or not model or data.rate_mode:
        return 0
    pairs = []
    for i, (level, point) in enumerate(zip(data.levels, data.points())):
        if level.concurrency is None or level.concurrency != int(level.concurrency):
            continue
        m = Measured(source=f"report-{report.pk}-{i}", label=level.label, candidate=candidate.key,
                     backend=candidate.backend, gpu_name=gpu, gpu_count=None, model=model,
                     users=int(level.concurrency), prompt_tokens=level.prompt_tokens, output_tokens=level.output_tokens,
                     figures={metric: point.get(metric) for metric in CORRECTED})
        pairs += _pairs_for(m, report.created, report=report)
    return _store(pairs)


def _store(pairs: list[PredictionPair]) -> int:
    """Store the pairs not stored yet (pairing a run twice adds nothing); how many were new."""
    if not pairs:
        return 0
    with transaction.atomic():
        before = PredictionPair.objects.count()
        PredictionPair.objects.bulk_create(pairs, ignore_conflicts=True)
        return PredictionPair.objects.count() - before


@receiver(run_finished_signal)
def pair_finished_run(sender, run: Run, **kwargs) -> None:
    """Each finished run is checked against the predictions it measures (connected in apps.py)."""
    pair_run(run)


@receiver(post_save, sender=ImportedReport)
def pair_imported_report(sender, instance: ImportedReport, created: bool, **kwargs) -> None:
    """Each imported report is checked against the predictions it measures, once it is stored."""
    if created:
        transaction.on_commit(lambda: pair_report(instance))
