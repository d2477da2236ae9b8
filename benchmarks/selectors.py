"""Selectors read: what pages, charts and exports show."""
from __future__ import annotations

from django.db.models import QuerySet

from benchmarks.models import Endpoint, LevelResult, RequestRecord, Run


def run_list(*, limit: int = 200) -> QuerySet[Run]:
    return Run.objects.select_related("owner").prefetch_related("endpoints")[:limit]


def run_by_public_id(public_id: str) -> Run:
    return Run.objects.select_related("owner").get(public_id=public_id)


def run_levels(run: Run) -> list[LevelResult]:
    return list(run.levels.select_related("endpoint", "endpoint__host", "endpoint__variant"))


def run_failures(run: Run, *, limit: int = 200) -> list[RequestRecord]:
    return list(RequestRecord.objects.filter(level__run=run).exclude(error="")
                .select_related("level__endpoint").order_by("level__endpoint__name", "level__concurrency", "index")
                .defer("chunk_times")[:limit])


def run_failure_count(run: Run) -> int:
    return RequestRecord.objects.filter(level__run=run).exclude(error="").count()


def run_preflight(run: Run) -> list[tuple[Endpoint, list[dict]]]:
    endpoints = {str(e.id): e for e in run.endpoints.all()}
    return [(endpoints[k], v) for k, v in run.preflight.items() if k in endpoints]


def endpoints_for_runs() -> QuerySet[Endpoint]:
    return Endpoint.objects.filter(enabled=True).select_related("host", "variant__model")
