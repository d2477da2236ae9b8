"""Selectors read: what pages, charts and exports show."""
from __future__ import annotations

from django.db.models import QuerySet

from benchmarks.models import Endpoint, LevelResult, RequestRecord, Run


def run_list(*, limit: int = 200) -> QuerySet[Run]:
    return Run.objects.select_related("owner").prefetch_related("endpoints")[:limit]


def runs_in_flight(user) -> int:
    return Run.objects.filter(owner=user, status__in=[Run.QUEUED, Run.RUNNING]).count()


def run_by_public_id(public_id: str) -> Run:
    return Run.objects.select_related("owner").get(public_id=public_id)


def run_levels(run: Run) -> list[LevelResult]:
    # The time series are only for the chart endpoints: never load them for the page.
    return list(run.levels.select_related("endpoint", "endpoint__host", "endpoint__variant")
                .defer("gpu_series", "server_series"))


def run_failures(run: Run, *, limit: int = 200) -> list[RequestRecord]:
    return list(RequestRecord.objects.filter(level__run=run).exclude(error="")
                .select_related("level__endpoint").order_by("level__endpoint__name", "level__concurrency", "index")
                .defer("chunk_times")[:limit])


def run_failure_count(run: Run) -> int:
    return RequestRecord.objects.filter(level__run=run).exclude(error="").count()


def run_preflight(run: Run) -> list[tuple[Endpoint, list[dict]]]:
    endpoints = {str(e.id): e for e in run.endpoints.all()}
    return [(endpoints[k], v) for k, v in run.preflight.items() if k in endpoints]


def run_server_config(run: Run) -> list[tuple[Endpoint, dict]]:
    endpoints = {str(e.id): e for e in run.endpoints.all()}
    return [(endpoints[k], v) for k, v in run.server_config.items() if k in endpoints]


def endpoints_for_runs() -> QuerySet[Endpoint]:
    return Endpoint.objects.filter(enabled=True).select_related("host", "variant__model")


# ---------------------------------------------------------------- series for charts and comparisons
def endpoint_gpu(endpoint: Endpoint) -> tuple[str | None, int]:
    """GPU model and count an endpoint runs on: its own GPUs if set, else its host's."""
    gpus = list(endpoint.gpus.all()) or list(endpoint.host.gpus.all())
    if not gpus:
        return None, endpoint.tensor_parallel_size or 1
    used = len(endpoint.gpus.all()) or endpoint.tensor_parallel_size or 1
    return gpus[0].name, used


def level_point(level: LevelResult) -> dict:
    s = level.summary
    return {"id": level.id, "concurrency": level.concurrency if level.rate is None else None, "rate": level.rate,
            "label": level.load_label, "ttft_p50": (s.get("ttft_ms") or {}).get("p50"),
            "ttft_p90": (s.get("ttft_ms") or {}).get("p90"), "ttft_p99": (s.get("ttft_ms") or {}).get("p99"),
            "tpot_p50": (s.get("tpot_ms") or {}).get("p50"), "decode_tok_s": (s.get("decode_tok_s") or {}).get("p50"),
            "aggregate_tok_s": s.get("aggregate_tok_s"), "completed": level.completed, "failed": level.failed,
            "flags": [f["code"] for f in level.flags]}


def run_series(run: Run) -> list[dict]:
    from benchmarks.compare import fingerprint

    levels = list(run.levels.select_related("endpoint__host", "endpoint__variant")
                  .prefetch_related("endpoint__gpus", "endpoint__host__gpus").defer("gpu_series", "server_series")
                  .order_by("endpoint__name", "level_index"))
    by_endpoint: dict[int, dict] = {}
    for lv in levels:
        e = lv.endpoint
        if e.id not in by_endpoint:
            gpu, count = endpoint_gpu(e)
            by_endpoint[e.id] = {
                "label": e.name if not e.variant else f"{e.name} ({e.variant.get_quantization_display()})",
                "kind": "measured", "url": run.get_absolute_url(), "run": str(run), "backend": e.backend,
                "quantization": e.variant.quantization if e.variant else None, "gpu": gpu, "gpu_count": count,
                "fingerprint": fingerprint(prompt_tokens=run.prompt_tokens, output_tokens=run.output_tokens,
                                           temperature=run.temperature, api=run.api, load_mode=run.load_mode,
                                           gpu=gpu, gpu_count=count),
                "levels": []}
        by_endpoint[e.id]["levels"].append(level_point(lv))
    return list(by_endpoint.values())


def report_series(report) -> dict:
    from benchmarks.compare import fingerprint

    data = report.report
    levels = data.get("levels") or []
    first = levels[0] if levels else {}
    rate_mode = any(lv.get("request_rate") is not None and lv.get("concurrency") is None for lv in levels)
    points = [{"concurrency": lv.get("concurrency"), "rate": lv.get("request_rate") if rate_mode else None,
               "label": lv.get("label"), "ttft_p50": (lv.get("ttft_ms") or {}).get("p50"),
               "ttft_p90": (lv.get("ttft_ms") or {}).get("p90"), "ttft_p99": (lv.get("ttft_ms") or {}).get("p99"),
               "tpot_p50": (lv.get("tpot_ms") or {}).get("p50"), "decode_tok_s": lv.get("decode_tok_s_per_stream"),
               "aggregate_tok_s": lv.get("aggregate_output_tok_s"), "completed": lv.get("completed"),
               "failed": lv.get("failed"), "flags": []} for lv in levels]
    meta = data.get("raw_meta") or {}
    return {"label": report.title, "kind": "published" if report.kind == "published" else "imported",
            "url": report.get_absolute_url(), "backend": report.backend or data.get("backend"),
            "quantization": report.quantization or None, "gpu": report.gpu or data.get("gpu"), "gpu_count": 1,
            "fingerprint": fingerprint(prompt_tokens=first.get("prompt_tokens"), output_tokens=first.get("output_tokens"),
                                       temperature=meta.get("temperature"), api=meta.get("api"),
                                       load_mode="rate" if rate_mode else "concurrency",
                                       gpu=report.gpu or data.get("gpu"), gpu_count=1),
            "levels": points}


def report_rows(report) -> list[dict]:
    """The report page's table, one row per level, numbers already formatted: Django's floatformat
    costs ~40 µs a cell, too much for the MAX_IMPORT_LEVELS × 9 cells of the largest import."""
    def num(value, digits: int) -> str:
        return "—" if value is None else f"{value:.{digits}f}"

    rows = []
    for lv in report.report.get("levels") or []:
        ttft, tpot = lv.get("ttft_ms") or {}, lv.get("tpot_ms") or {}
        rows.append({
            "label": lv.get("label"), "concurrency": num(lv.get("concurrency"), 0),
            "rate": "—" if lv.get("request_rate") is None else f"{lv['request_rate']:g}",
            "tokens": f"{num(lv.get('prompt_tokens'), 0)} / {num(lv.get('output_tokens'), 0)}",
            "ttft": " / ".join(num(ttft.get(p), 1) for p in ("p50", "p90", "p99")),
            "tpot": num(tpot.get("p50"), 2), "decode": num(lv.get("decode_tok_s_per_stream"), 1),
            "aggregate": num(lv.get("aggregate_output_tok_s"), 1), "prefill": num(lv.get("prefill_tok_s"), 0),
            "notes": " ".join(lv.get("notes") or [])})
    return rows


RESULT_COLUMNS = ("level_id", "index", "sent", "first_content", "end", "prompt_tokens", "output_tokens",
                  "client_output_tokens", "timings", "error")


def _as_result(row):
    from benchmarks.engine.metrics import RequestResult

    _, index, sent, first, end, p_tok, o_tok, c_tok, timings, error = row
    return RequestResult(index=index, sent=sent, prompt_tokens_asked=0, output_tokens_asked=0, first_content=first,
                         chunk_times=[end] if end is not None else [], prompt_tokens=p_tok, output_tokens=o_tok,
                         client_output_tokens=c_tok, timings=timings, error=error)


def level_results(level: LevelResult):
    """The level's requests as engine RequestResults (without chunk times), so every derived
    figure uses the one definition in engine.metrics."""
    rows = RequestRecord.objects.filter(level=level).order_by("index").values_list(*RESULT_COLUMNS)
    return [_as_result(row) for row in rows]


def run_results_by_level(run: Run) -> dict[int, list]:
    """All of a run's requests as RequestResults, grouped by level id, in one query."""
    out: dict[int, list] = {}
    rows = RequestRecord.objects.filter(level__run=run).order_by("level_id", "index").values_list(*RESULT_COLUMNS)
    for row in rows:
        out.setdefault(row[0], []).append(_as_result(row))
    return out


def run_levels_with_endpoint(run: Run) -> list[LevelResult]:
    return list(run.levels.select_related("endpoint").defer("gpu_series", "server_series")
                .order_by("endpoint__name", "level_index"))


def telemetry_levels(run: Run, field: str) -> list[dict]:
    """Per level: label, offset from the first level's start, and its stored series."""
    levels = list(run.levels.select_related("endpoint").only("id", "run", "started_at", "concurrency", "rate",
                                                             "endpoint__name", field).order_by("started_at"))
    if not levels:
        return []
    t0 = levels[0].started_at
    return [{"label": f"{lv.endpoint.name} {lv.load_label}", "offset_s": (lv.started_at - t0).total_seconds(),
             "series": getattr(lv, field) or {}} for lv in levels]


# ---------------------------------------------------------------- export
EXPORT_VERSION = 1
REQUEST_FIELDS = ("index", "sent", "scheduled", "first_content", "first_answer", "end", "prompt_tokens",
                  "output_tokens", "client_output_tokens", "finish_reason", "status_code", "error", "error_kind")


def run_export(run: Run) -> dict:
    """Everything about a run as one JSON document: configuration, servers, levels with their
    telemetry, and every request (chunk times included). Never the endpoints' API keys."""
    levels = list(run.levels.select_related("endpoint__host", "endpoint__variant__model").order_by(
        "endpoint__name", "level_index"))
    records: dict[int, list] = {lv.id: [] for lv in levels}
    for rec in RequestRecord.objects.filter(level__run=run).order_by("level_id", "index").values(
            "level_id", "chunk_times", "timings", *REQUEST_FIELDS):
        records[rec.pop("level_id")].append(rec)
    endpoints = {}
    for e in run.endpoints.select_related("host", "variant__model"):
        endpoints[str(e.id)] = {"name": e.name, "backend": e.backend, "base_url": e.base_url,
                                "model_name": e.model_name, "host": e.host.name,
                                "variant": str(e.variant) if e.variant else None,
                                "quantization": e.variant.quantization if e.variant else None,
                                "engine_version": e.engine_version, "launch_command": e.launch_command,
                                "launch_flags": e.launch_flags, "tensor_parallel_size": e.tensor_parallel_size,
                                "server_config": run.server_config.get(str(e.id)),
                                "preflight": run.preflight.get(str(e.id))}
    return {
        "format": "v100site-run", "version": EXPORT_VERSION, "public_id": run.public_id, "title": run.title,
        "status": run.status, "created": run.created.isoformat(),
        "started": run.started.isoformat() if run.started else None,
        "finished": run.finished.isoformat() if run.finished else None,
        "workload": {k: getattr(run, k) for k in (
            "prompt_tokens", "output_tokens", "temperature", "api", "load_mode", "concurrency_levels",
            "request_rates", "arrivals", "max_concurrency", "requests_per_level", "duration_s",
            "warmup_requests", "seed")} | {"slo": run.slo},
        "flags": run.flags, "endpoints": endpoints,
        "levels": [{"endpoint": str(lv.endpoint_id), "level_index": lv.level_index, "load": lv.load_label,
                    "concurrency": lv.concurrency, "rate": lv.rate, "started_at": lv.started_at.isoformat(),
                    "wall_s": lv.wall_s, "summary": lv.summary, "client": lv.client, "flags": lv.flags,
                    "gpu_summary": lv.gpu_summary, "gpu_series": lv.gpu_series,
                    "server_summary": lv.server_summary, "server_series": lv.server_series,
                    "requests": records[lv.id]} for lv in levels],
    }


def run_requests_csv(run: Run) -> str:
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["endpoint", "load", *REQUEST_FIELDS, "ttft_ms", "tpot_ms", "e2e_ms", "server_decode_tok_s"])
    for level in run_levels_with_endpoint(run):
        rows = RequestRecord.objects.filter(level=level).order_by("index").values_list(*REQUEST_FIELDS, "timings")
        results = {r.index: r for r in level_results(level)}
        for row in rows:
            r = results[row[0]]
            timings = row[-1] or {}
            writer.writerow([level.endpoint.name, level.load_label, *row[:-1],
                             *(None if v is None else round(v * 1000, 3) for v in (r.ttft, r.tpot, r.e2e)),
                             timings.get("predicted_per_second")])
    return out.getvalue()


def run_has_telemetry(run: Run, field: str) -> bool:
    return run.levels.exclude(**{field: {}}).exists()


def report_list():
    from benchmarks.models import ImportedReport

    return ImportedReport.objects.select_related("uploaded_by").defer("report")[:200]


def report_by_public_id(public_id: str):
    from django.http import Http404

    from benchmarks.models import ImportedReport

    try:
        return ImportedReport.objects.get(public_id=public_id)
    except ImportedReport.DoesNotExist:
        raise Http404("No report has this link.")


def comparison_by_public_id(public_id: str):
    from django.http import Http404

    from benchmarks.models import Comparison

    try:
        return Comparison.objects.get(public_id=public_id)
    except Comparison.DoesNotExist:
        raise Http404("No comparison has this link.")


def comparison_series(comparison) -> list[dict]:
    """Measured series first (each run's endpoints), then imported and published reports."""
    series = []
    for run in comparison.runs.order_by("created"):
        series += run_series(run)
    for report in comparison.reports.order_by("created"):
        series.append(report_series(report))
    return series
